"""The optional strategies of the optimization loop, run end to end through ``promptevo.optimize()``:
evidence cards, scaffold pruning, the skill library, backtest + validity diagnostics (``--ray`` through
optimize() is tested in test_scaleout.py, which shares one Ray session).

Test doubles (never used for reported results):

* ``MissionEnv`` (env family ``strategy_test``): a tiny text env. Mission "go to the red ball" on even
  training seeds, "go to the <colour> key" otherwise (validation and test missions never name a red
  ball). Actions "wait" and "done": "done" ends the episode with success (return 1 - 0.5 t/3); after
  three "wait"s the env's step limit ends it.
* The agent LLM is ``fake/agent`` (ScriptedLLM) playing the real two-stage agent: the descriptor echoes
  the observation, the actor answers "done" when ``policy(actor system prompt, mission, seed)`` says so
  (default policy: succeed with the rule RULE in the prompt, on a red-ball mission with "red ball" in
  the prompt, and on seeds divisible by 4; else "wait").
* The optimizer LLM is ``fake/optimizer`` (ScriptedLLM) answered by :class:`OptimizerDouble`, which tells
  the calls apart by their system prompt (cards / pruner / analyzer / mutator), records them, and
  replies with scripted JSON.

Seeds (new loop): each generation draws 4 evidence and 4 disjoint acceptance seeds from the shuffled
training split (run seed 0: gen 1 plays evidence [22, 35, 8, 38] and acceptance [25, 6, 1, 5]); the
validation gate is the paired sign test on 8 validation seeds at alpha / generations, so the rule
(6 wins, 0 losses on seeds 1000-1007, p = 1/64) is promoted with one or two generations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import promptevo
from promptevo.cli.optimize import config_from_args
from promptevo.envs.base import StepResult, TextEnv
from promptevo.envs.registry import register_env
from promptevo.evaluation.rollout import run_episodes
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.optim.config import ConfigError, OptimizeConfig
from promptevo.optim.state import RunError, RunState, load_checkpoint
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import SeedRange, TaskConfig

RULE = "Always check the mission before answering."
LEAK = "Always go to the red ball."
TASK_NAME = "strategy-test"
FAMILY = "strategy_test"
KEYS = ("green", "blue", "purple", "yellow")


def mission_of(seed: int) -> str:
    if seed < 1000 and seed % 2 == 0:
        return "go to the red ball"
    return f"go to the {KEYS[seed % 4]} key"


class MissionEnv(TextEnv):
    """Test double env (see the module docstring)."""

    family = FAMILY

    def __init__(self, task: Any = None):
        self.seed, self.t, self.ok = 0, 0, False

    valid_actions = property(lambda self: ["wait", "done"])  # type: ignore[assignment]
    default_action = property(lambda self: "wait")  # type: ignore[assignment]
    max_steps = property(lambda self: 3)  # type: ignore[assignment]
    mission = property(lambda self: mission_of(self.seed))  # type: ignore[assignment]
    progression = property(lambda self: 1.0 if self.ok else 0.0)  # type: ignore[assignment]

    def reset(self, seed: int):
        self.seed, self.t, self.ok = seed, 0, False
        return f"seed {seed} step 0: nothing happened yet", {"mission": self.mission}

    def step(self, action: str) -> StepResult:
        self.t += 1
        valid = action in ("wait", "done")
        executed = action if valid else "wait"
        reward = 0.0
        if executed == "done":
            self.ok = True
            reward = 1.0 - 0.5 * self.t / 3
        return StepResult(f"seed {self.seed} step {self.t}: you waited", reward, self.ok, False,
                          {"valid_action": valid, "executed_action": executed, "progression": self.progression})

    def instructions(self) -> str:
        return "Actions: wait, done"


# the env's own instructions reach the optimizer through the registry (optimize() no longer takes
# env_instructions)
register_env(FAMILY, lambda params: MissionEnv(), replace=True)
TASK = TaskConfig(name=TASK_NAME, family=FAMILY, train_seeds=SeedRange(start=0, count=40),
                  validation_seeds=SeedRange(start=1000, count=40), test_seeds=SeedRange(start=2000, count=40))


def initial_prompts() -> PromptSet:
    return PromptSet.of({
        "descriptor": Prompt((Segment("role", "Describe what you see."),)),
        "actor": Prompt((
            Segment("role", "You choose the next action for {mission}."),
            Segment("rules", "Act carefully."),
            Segment("tips", "Finish the task as soon as you can; waiting wastes steps and lowers the return."),
            Segment("output_format", "Answer as <|ACTION|>action<|END|>."),
        )),
    })


Policy = Callable[[str, str, int], bool]


def default_policy(system: str, mission: str, seed: int) -> bool:
    s = system.lower()
    if RULE.lower() in s:
        return True
    if LEAK.lower() in s and "red ball" in mission:
        return True
    return seed % 4 == 0


def agent_reply(messages: list[dict], policy: Policy) -> str:
    system = messages[0]["content"]
    user = messages[-1]["content"]
    if system.startswith("Describe"):
        return user.split("Observation:\n", 1)[-1]
    mission = re.search(r"Mission: (.*)", user).group(1).strip()  # type: ignore[union-attr]
    seed = int(re.search(r"seed (\d+) step", user).group(1))  # type: ignore[union-attr]
    return "<|ACTION|>done<|END|>" if policy(system, mission, seed) else "<|ACTION|>wait<|END|>"


def fenced(obj: Any) -> str:
    return "```json\n" + json.dumps(obj) + "\n```"


ANALYSIS = {"attributions": [{"module": "actor", "segment": "rules", "effect": "missing",
                              "evidence": [{"seed": 1, "step": 2}], "explanation": "nothing says to finish"}],
            "failure_modes": ["waits until the step limit"],
            "proposals": [{"module": "actor", "segment": "rules", "op": "rewrite", "idea": "check the mission"}]}

GOOD_CARDS = {"cards": [
    {"group": "G1", "what_happened": "CARD-G1 answered done at the first step", "where_failed": "",
     "what_helped": "finishing at once", "refs": ["S0.0"]},
    {"group": "G2", "what_happened": "CARD-G2 waited until the step limit", "where_failed": "never answered done",
     "what_helped": "", "refs": ["S1.2"]},
]}


def rewrite_rules(text: str) -> dict:
    return {"module": "actor", "op": "rewrite", "segment": "rules", "text": text, "rationale": "scripted edit"}


NEUTRAL = {"module": "actor", "op": "rewrite", "segment": "role", "text": "You pick the next action for {mission}.",
           "rationale": "clearer wording"}


class OptimizerDouble:
    """Scripted optimizer: ``mutations[i]`` are the edits of the i-th mutator call (the last repeats)."""

    def __init__(self, mutations: list[list[dict]] | None = None, cards: Any = GOOD_CARDS,
                 prunes: list[dict] | None = None):
        self.mutations = mutations or [[rewrite_rules("Act carefully. " + RULE)]]
        self.cards = cards
        self.prunes = prunes or []
        self.calls: list[tuple[str, list[dict]]] = []

    @staticmethod
    def kind(messages: list[dict]) -> str:
        system = messages[0]["content"]
        if system.startswith("You summarise") and "evidence cards" in system:
            return "cards"
        if system.startswith("You shorten"):
            return "pruner"
        if '"attributions"' in system:
            return "analyzer"
        if '"edits"' in system:
            return "mutator"
        return "unknown"

    def kinds(self) -> list[str]:
        return [k for k, _ in self.calls]

    def messages(self, kind: str) -> list[list[dict]]:
        return [m for k, m in self.calls if k == kind]

    def __call__(self, messages: list[dict]) -> str:
        kind = self.kind(messages)
        self.calls.append((kind, messages))
        if kind == "cards":
            return self.cards if isinstance(self.cards, str) else fenced(self.cards)
        if kind == "pruner":
            return fenced({"edits": self.prunes})
        if kind == "analyzer":
            return json.dumps(ANALYSIS)
        if kind == "mutator":
            i = min(len(self.messages("mutator")) - 1, len(self.mutations) - 1)
            return fenced({"edits": self.mutations[i]})
        return "?"


class Runner:
    """Real run_episodes on MissionEnv; records every (prompt fingerprint, seed) played."""

    def __init__(self):
        self.played: list[tuple[str, int]] = []

    def __call__(self, task, agent_factory, seeds, *, concurrency=4, on_result=None, **_):
        fp = agent_factory().prompts.fingerprint()

        def record(r):
            self.played.append((fp, r.seed))
            if on_result is not None:
                on_result(r)

        return run_episodes(task, agent_factory, list(seeds), concurrency=concurrency, on_result=record,
                            env_factory=MissionEnv)


def config(tmp_path: Path, name: str = "run", **kw: Any) -> OptimizeConfig:
    base: dict[str, Any] = dict(task=TASK_NAME, agent="two-stage", generations=1, episodes=4, evidence_episodes=4,
                                validation_episodes=8, test_episodes=4, children=1, accept_rule="margin",
                                accept_margin=0.05, concurrency=2, baseline=None, results_dir=str(tmp_path), run=name)
    base.update(kw)
    return OptimizeConfig(**base)


def draw(g: int, **kw: Any) -> tuple[list[int], list[int]]:
    """(evidence, acceptance) seeds the engine draws for generation ``g`` of a run configured with ``kw``."""
    from promptevo.optim.engine import Engine

    eng = Engine(config(Path("."), **kw), adapter=None, task=TASK, usage=dict, emitter=lambda *a, **k: None)
    return eng.draw_train(g)


def run(tmp_path: Path, opt: OptimizerDouble, *, policy: Policy = default_policy, name: str = "run", **kw: Any):
    """optimize() with the doubles; returns (result, optimizer gateway, runner)."""
    cfg = config(tmp_path, name, **kw)
    agw = Gateway(LLMConfig(model="fake/agent", cache_dir=None, num_retries=0))
    ogw = Gateway(LLMConfig(model="fake/optimizer", cache_dir=None, num_retries=0, max_tokens=2048))

    def responder(messages: list[dict], params: dict) -> str:
        if params.get("model") == "fake/optimizer":
            return opt(messages)
        return agent_reply(messages, policy)

    runner = Runner()
    with ScriptedLLM.install(responder):
        res = promptevo.optimize(cfg, agent_gateway=agw, optimizer_gateway=ogw, task=TASK,
                                 initial_prompts=initial_prompts(), runner=runner, quiet=True)
    return res, ogw, runner


def cands(res) -> dict:
    return {c.id: c for c in res.candidates}


def by_role(gw: Gateway) -> dict:
    return gw.usage.snapshot()["by_role"]


def checkpoint(res) -> RunState:
    return load_checkpoint(res.run_dir)


def evidence_blob(res, g: int = 1) -> dict:
    return json.loads((res.run_dir / f"analyses/gen-{g:03d}.json").read_text())


# =================================================================================================
# command line
# =================================================================================================


def test_cli_parses_strategy_flags():
    cfg, _ = config_from_args(["--task", "goto", "--evidence", "cards", "--prune-at", "0.8", "--skills", "x.json",
                               "--backtest", "--ray"])
    assert (cfg.evidence, cfg.prune_at, cfg.skills, cfg.backtest, cfg.ray) == ("cards", 0.8, "x.json", True, True)
    plain, _ = config_from_args(["--task", "goto"])
    assert (plain.evidence, plain.prune_at, plain.skills, plain.backtest, plain.ray) == ("raw", None, None, False, False)
    cfg2, _ = config_from_args(["--task", "goto", "--skill-children", "2", "--backtest-episodes", "3"])
    assert cfg2.skill_children == 2 and cfg2.backtest_episodes == 3
    with pytest.raises(ConfigError, match="^--prune-at: "):  # the flag as typed, not the field name
        config_from_args(["--task", "goto", "--prune-at", "1.5"])
    with pytest.raises(ConfigError, match="^--cards-above: "):
        config_from_args(["--task", "goto", "--evidence", "auto", "--cards-above", "-1"])


# =================================================================================================
# evidence cards
# =================================================================================================


def test_evidence_cards_replace_raw_trajectories(tmp_path):
    opt = OptimizerDouble()
    res, ogw, _ = run(tmp_path, opt, evidence="cards")
    assert opt.kinds() == ["cards", "analyzer", "mutator"]
    assert by_role(ogw)["cards"]["calls"] == 1
    cards_user = opt.messages("cards")[0][-1]["content"]
    assert "Representative episode" in cards_user  # the cards call reads the trajectories ...
    analyzer_user = opt.messages("analyzer")[0][-1]["content"]
    assert "Evidence cards" in analyzer_user  # ... the analyzer reads the cards instead
    assert "CARD-G1 answered done" in analyzer_user and "CARD-G2 waited" in analyzer_user
    assert "[G1] success" in analyzer_user and "[G2] failure: ran out of steps" in analyzer_user
    assert "=== Episode seed=" not in analyzer_user and "Representative episode" not in analyzer_user

    # the cards describe the parent's episodes on the generation's evidence seeds (not its acceptance seeds)
    g1 = checkpoint(res).generations[0]
    won = sorted(s for s in g1.evidence_seeds if s % 4 == 0)
    lost = sorted(s for s in g1.evidence_seeds if s % 4)
    assert won and lost, "the run seed must draw an evidence batch with both outcomes"
    blob = evidence_blob(res)
    assert blob["evidence_kind"] == "cards" and blob["evidence_seeds"] == g1.evidence_seeds
    assert blob["cards"]["ok"] is True and blob["cards"]["n_episodes"] == 4
    assert [(c["group"], c["n"], c["source"]) for c in blob["cards"]["cards"]] == [
        ("success", len(won), "llm"), ("failure: ran out of steps", len(lost), "llm")]
    assert blob["cards"]["cards"][0]["seeds"] == won and blob["cards"]["cards"][1]["seeds"] == lost
    assert blob["analysis"]["ok"] and sorted(blob["analysis"]["seeds"]) == sorted(g1.evidence_seeds)

    gen = res.report["strategies"]["generations"][0]
    assert gen["mode"] == "mutate" and gen["evidence"] == "cards"
    assert {"cards", "analyzer", "mutator"} <= set(gen["optimizer_tokens"])
    assert gen["optimizer_tokens"]["cards"] > 0 and gen["optimizer_tokens"]["analyzer"] > 0
    assert gen["optimizer_tokens_total"] == sum(gen["optimizer_tokens"].values())
    assert res.report["strategies"]["enabled"]["evidence"] == "cards"
    assert res.best_id == "c1"  # the loop still works: the rule is promoted


def test_evidence_auto_uses_cards_only_when_the_raw_prompt_is_long(tmp_path):
    from promptevo.optim.game_adapter import choose_evidence

    assert choose_evidence("raw", 0, 10**6) == "raw" and choose_evidence("cards", 10**6, 0) == "cards"
    assert choose_evidence("auto", 4000, 4001) == "cards" and choose_evidence("auto", 4000, 4000) == "raw"
    # short trajectories (3 steps): the raw prompt is a few hundred tokens -> raw, no cards call
    short = OptimizerDouble()
    res, _, _ = run(tmp_path, short, evidence="auto", name="short")
    assert short.kinds() == ["analyzer", "mutator"]
    assert res.report["strategies"]["generations"][0]["evidence"] == "raw"
    # the same run with a threshold below that size -> cards
    low = OptimizerDouble()
    res, _, _ = run(tmp_path, low, evidence="auto", cards_above=50, name="low")
    assert low.kinds() == ["cards", "analyzer", "mutator"]
    assert evidence_blob(res)["evidence_kind"] == "cards"
    assert res.report["strategies"]["generations"][0]["evidence"] == "cards"
    cfg, _ = config_from_args(["--task", "goto", "--evidence", "auto", "--cards-above", "2500"])
    assert (cfg.evidence, cfg.cards_above) == ("auto", 2500)


def test_garbage_cards_reply_falls_back_to_statistics(tmp_path):
    opt = OptimizerDouble(cards="I cannot summarise these {not json")
    res, ogw, _ = run(tmp_path, opt, evidence="cards")
    assert res.stop_reason == "completed 1 generations"
    assert opt.kinds() == ["cards", "cards", "analyzer", "mutator"]  # one corrective retry, then fallback
    assert by_role(ogw)["cards"]["calls"] == 2
    blob = evidence_blob(res)
    assert blob["cards"]["ok"] is False and blob["cards"]["error"]
    assert [c["source"] for c in blob["cards"]["cards"]] == ["fallback", "fallback"]
    analyzer_user = opt.messages("analyzer")[0][-1]["content"]
    assert "Evidence cards" in analyzer_user and "(from statistics only)" in analyzer_user
    assert "=== Episode seed=" not in analyzer_user
    assert blob["analysis"]["ok"] and res.best_id == "c1"


# =================================================================================================
# scaffold pruning
# =================================================================================================


def always(system: str, mission: str, seed: int) -> bool:
    return True


DELETE_TIPS = {"module": "actor", "op": "delete", "segment": "tips", "text": "", "rationale": "redundant advice"}
DELETE_RULES = {"module": "actor", "op": "delete", "segment": "rules", "text": "", "rationale": "redundant rules"}


def test_prune_generation_removes_a_segment_the_agent_no_longer_needs(tmp_path):
    opt = OptimizerDouble(prunes=[DELETE_TIPS, DELETE_RULES])
    res, ogw, _ = run(tmp_path, opt, policy=always, prune_at=0.8, children=2)
    assert checkpoint(res).generations[0].mode == "prune"
    assert res.report["strategies"]["generations"][0]["mode"] == "prune"
    assert opt.kinds() == ["pruner"]  # no diagnosis, no mutation in a pruning generation
    assert "pruner" in by_role(ogw) and "analyzer" not in by_role(ogw) and "mutator" not in by_role(ogw)
    cs = cands(res)
    c1, c2 = cs["c1"], cs["c2"]
    assert {(c.operator, c.edit["op"], c.edit["segment"]) for c in (c1, c2)} == {("prune", "delete", "tips"),
                                                                                 ("prune", "delete", "rules")}
    assert all(c.prompt_tokens_saved and c.prompt_tokens_saved > 0 for c in (c1, c2))
    assert c1.status == "promoted" and c1.edit["segment"] == "tips"  # tips is the larger segment
    assert c2.status == "accepted"
    # new gate for prunes: not significantly worse than the best, the initial and the peak prompts
    assert c1.gate["accepted"] and c1.gate["rule"] == "prune" and c1.gate["losses"] == 0
    assert res.best_id == "c1" and "tips" not in res.best_prompts.module("actor").names
    pt = res.report["strategies"]["prompt_tokens"]
    assert pt["best"] < pt["initial"] and pt["initial"] - pt["best"] == c1.prompt_tokens_saved
    blob = evidence_blob(res)
    assert blob["mode"] == "prune" and "pruning" in blob and blob["evidence_kind"] == "none"
    assert [p["candidate"] for p in res.report["strategies"]["pruned"]] == ["c1", "c2"]


def needs_both(system: str, mission: str, seed: int) -> bool:
    """Without actor.rules the agent fails everywhere; without actor.tips it fails on validation/test seeds."""
    if "Act carefully" not in system:
        return False
    if seed >= 1000 and "waiting wastes steps" not in system:
        return False
    return True


def test_prune_that_breaks_success_is_not_promoted(tmp_path):
    opt = OptimizerDouble(prunes=[DELETE_RULES, DELETE_TIPS])
    res, _, _ = run(tmp_path, opt, policy=needs_both, prune_at=0.8, children=2)
    assert checkpoint(res).generations[0].mode == "prune"
    cs = cands(res)
    assert cs["c1"].edit["segment"] == "rules" and cs["c1"].status == "rejected"  # worse on training seeds
    assert cs["c1"].verdict["mean_diff"] < 0
    # tips: no worse on the training seeds, but significantly worse on the validation seeds
    assert cs["c2"].edit["segment"] == "tips" and cs["c2"].verdict["accepted"]
    assert cs["c2"].status == "not-promoted" and not cs["c2"].gate["accepted"]
    assert cs["c2"].gate["losses"] == 8 and cs["c2"].gate["mean_diff"] == -1.0
    assert "significantly worse" in cs["c2"].gate["reason"]
    assert res.best_id == "c0"
    pt = res.report["strategies"]["prompt_tokens"]
    assert pt["best"] == pt["initial"]


def test_below_threshold_mutates_then_prunes_once_competent(tmp_path):
    opt = OptimizerDouble(prunes=[DELETE_TIPS])
    res, ogw, _ = run(tmp_path, opt, prune_at=0.8, generations=2)
    gens = checkpoint(res).generations
    # gen 1: initial validation success 2/8 < 80% -> mutate; its rule is promoted (8/8) -> gen 2 prunes
    assert [g.mode for g in gens] == ["mutate", "prune"]
    assert opt.kinds() == ["analyzer", "mutator", "pruner"]
    cs = cands(res)
    assert cs["c1"].operator == "mutate" and cs["c1"].status == "promoted"
    assert cs["c2"].operator == "prune" and cs["c2"].parent == "c1" and cs["c2"].status == "promoted"
    assert res.best_id == "c2"
    assert by_role(ogw)["pruner"]["calls"] == 1
    st = res.report["strategies"]
    gen_tokens = [g["optimizer_tokens_total"] for g in st["generations"]]
    assert all(gen_tokens) and set(st["mean_optimizer_tokens_by_mode"]) == {"mutate", "prune"}
    assert st["mean_optimizer_tokens_by_mode"]["prune"] == gen_tokens[1]
    assert st["mean_optimizer_tokens_per_generation"] == sum(gen_tokens) / 2


def test_prune_at_not_reached_stays_mutate(tmp_path):
    opt = OptimizerDouble(mutations=[[NEUTRAL]], prunes=[DELETE_TIPS])
    res, ogw, _ = run(tmp_path, opt, prune_at=0.8, generations=2)
    assert [g.mode for g in checkpoint(res).generations] == ["mutate", "mutate"]
    assert "pruner" not in by_role(ogw) and "pruner" not in opt.kinds()
    assert all(c.operator == "mutate" for c in res.candidates if c.id != "c0")


# =================================================================================================
# skill library
# =================================================================================================


def write_library(path: Path, text: str = RULE, task: str = "pickup-elsewhere") -> str:
    from promptevo.optim.propose.skills import Skill, SkillLibrary

    sk = Skill(module="actor", segment="rules", text=text, task=task, family=FAMILY, run="old-run", gain=0.5, n=8)
    SkillLibrary([sk]).save(path)
    return sk.id


def test_library_skill_is_inserted_as_a_child_and_its_use_recorded(tmp_path):
    lib_path = tmp_path / "skills.json"
    sid = write_library(lib_path)
    opt = OptimizerDouble(mutations=[[NEUTRAL]])
    res, _, _ = run(tmp_path, opt, name="skills-a", skills=str(lib_path), children=2, skill_children=1)
    cs = cands(res)
    c1, c2 = cs["c1"], cs["c2"]
    assert c1.operator == "skill" and c1.source == {"skill": sid, "author": "machine"}
    assert c1.edit["op"] == "add" and c1.edit["module"] == "actor" and c1.edit["text"] == RULE
    assert c1.edit["segment"] == "skill-rules" and sid in c1.edit["rationale"]
    assert c1.prompt_set().module("actor").names == ["role", "rules", "tips", "skill-rules", "output_format"]
    assert c2.operator == "mutate"
    # the mutator was offered the skill, and asked for the remaining child only
    mut_user = opt.messages("mutator")[0][-1]["content"]
    assert "Reusable skills learned on other tasks" in mut_user and sid in mut_user
    assert "Propose 1 different edits" in mut_user
    assert c1.status == "promoted" and res.best_id == "c1"
    lib = json.loads(lib_path.read_text())
    assert len(lib["skills"]) == 1  # a promoted skill child is not stored again
    uses = lib["skills"][0]["uses"]
    assert len(uses) == 1
    assert uses[0]["task"] == TASK_NAME and uses[0]["run"] == "skills-a" and uses[0]["outcome"] == "promoted"
    assert uses[0]["gain"] == pytest.approx(c1.gate["mean_diff"]) and uses[0]["gain"] > 0  # the validation gain
    assert res.report["strategies"]["skill_children"] == [{"candidate": "c1", "skill": sid, "status": "promoted"}]
    children = evidence_blob(res)["children"]
    assert [(c["id"], c["operator"], c["source"]) for c in children] == [("c1", "skill", {"skill": sid, "author": "machine"}),
                                                                         ("c2", "mutate", {"author": "machine"})]


def test_skill_use_is_recorded_once_per_candidate_even_if_the_hook_runs_again(tmp_path):
    """A crash between the library write and the checkpoint re-runs the skills hook on resume: the use of
    the skill by that candidate must not be recorded twice."""
    from promptevo.optim.strategies import update_skills

    lib_path = tmp_path / "skills.json"
    write_library(lib_path)
    res, _, _ = run(tmp_path, OptimizerDouble(mutations=[[NEUTRAL]]), name="skills-c", skills=str(lib_path),
                    children=2)
    before = json.loads(lib_path.read_text())["skills"]
    assert len(before) == 1 and [u["candidate"] for u in before[0]["uses"]] == ["c1"]
    st = checkpoint(res)
    engine = SimpleNamespace(cfg=st.config, state=st, run_dir=res.run_dir, task=TASK, emit=lambda *a, **k: None)
    update_skills(engine, st.generations[0])  # what a resumed run does when it crashed before the checkpoint
    assert json.loads(lib_path.read_text())["skills"] == before


def test_skill_learned_on_the_same_task_is_not_offered(tmp_path):
    lib_path = tmp_path / "skills.json"
    write_library(lib_path, task=TASK_NAME)
    opt = OptimizerDouble(mutations=[[NEUTRAL]])
    res, _, _ = run(tmp_path, opt, skills=str(lib_path), children=2)
    assert all(c.operator == "mutate" for c in res.candidates if c.id != "c0")
    assert "Reusable skills" not in opt.messages("mutator")[0][-1]["content"]


def test_missing_library_is_created_with_the_promoted_mutation(tmp_path):
    lib_path = tmp_path / "lib" / "skills.json"
    assert not lib_path.exists()
    opt = OptimizerDouble()  # rewrite actor.rules with RULE: promoted
    res, _, _ = run(tmp_path, opt, name="skills-b", skills=str(lib_path))
    c1 = cands(res)["c1"]
    assert c1.operator == "mutate" and c1.status == "promoted"
    lib = json.loads(lib_path.read_text())
    assert len(lib["skills"]) == 1
    sk = lib["skills"][0]
    assert (sk["module"], sk["segment"], sk["text"]) == ("actor", "rules", "Act carefully. " + RULE)
    assert sk["task"] == TASK_NAME and sk["family"] == FAMILY and sk["run"] == "skills-b"
    # the skill keeps the validation estimate that earned the promotion
    assert sk["gain"] == pytest.approx(c1.gate["mean_diff"]) and sk["gain"] > 0 and sk["n"] == 8
    assert sk["train_gain"] == pytest.approx(c1.verdict["mean_diff"])
    assert sk["validation_rate"] == 1.0 and sk["p_value"] == pytest.approx(c1.gate["p_value"])
    assert sk["uses"] == []


def test_corrupt_library_is_a_one_line_error(tmp_path):
    lib_path = tmp_path / "skills.json"
    lib_path.write_text('{"version": 1, "skills": [')
    with pytest.raises(RunError) as e:
        run(tmp_path, OptimizerDouble(), skills=str(lib_path))
    msg = str(e.value)
    assert "\n" not in msg and "corrupt skill library" in msg and str(lib_path) in msg
    lib_path.write_text(json.dumps({"version": 1, "skills": [{"module": "actor"}]}))
    with pytest.raises(RunError) as e2:
        run(tmp_path, OptimizerDouble(), name="run2", skills=str(lib_path))
    assert "\n" not in str(e2.value) and "corrupt skill library" in str(e2.value)
    assert lib_path.read_text() == json.dumps({"version": 1, "skills": [{"module": "actor"}]})  # left as it was
    assert not (tmp_path / "run").exists() and not (tmp_path / "run2").exists()  # refused before any episode


# =================================================================================================
# backtest and validity diagnostics
# =================================================================================================


def test_backtest_replays_a_gen2_promotion_on_gen1_seeds_and_leaky_edit_never_wins(tmp_path):
    # gen 1: the mutator hard-codes the training missions' "red ball" (helps on training seeds only);
    # gen 2: the general rule (helps everywhere)
    opt = OptimizerDouble(mutations=[[rewrite_rules("Act carefully. " + LEAK)], [rewrite_rules("Act carefully. " + RULE)]])
    res, _, runner = run(tmp_path, opt, generations=2, backtest=True)
    ck = checkpoint(res)
    g1, g2 = ck.generations
    gen1_seeds = set(g1.evidence_seeds) | set(g1.accept_seeds)
    assert not gen1_seeds & (set(g2.evidence_seeds) | set(g2.accept_seeds))
    cs = cands(res)
    c1, c2 = cs["c1"], cs["c2"]
    # the leaky edit: accepted on training seeds, no validation gain, flagged by the leak check
    assert c1.verdict["accepted"] and c1.status in ("vetoed", "not-promoted")
    assert c1.validity is not None and "leak" in c1.validity["checks"]
    leak = [v for v in c1.validity["vetoes"] if v["check"] == "leak"]
    assert leak and "red ball" in leak[0]["details"]["phrases"]
    assert c1.validity["backtest_seeds"] == []  # gen 1 has no earlier seeds
    assert not g1.gate["promoted"] and g1.gate["candidate"] == "c1"
    # the general rule in gen 2: replayed on gen 1's seeds before its promotion
    assert c2.parent == "c0" and c2.status == "promoted" and res.best_id == "c2"
    assert c2.validity["ok"] and "backtest" in c2.validity["checks"]
    bt = c2.validity["backtest_seeds"]
    # the most recent earlier seeds, at most --episodes of them: gen 1's acceptance seeds
    assert bt == sorted(g1.accept_seeds) and c2.validity["backtest"]["n"] == 4
    assert {int(s) for s in c2.train} == set(g2.accept_seeds) | set(bt)
    rows = [json.loads(x) for x in (res.run_dir / "episodes.jsonl").read_text().splitlines()]
    c2_train = {r["seed"] for r in rows if r["key"] == c2.fingerprint and r["seed"] < 1000}
    assert c2_train == set(g2.accept_seeds) | set(bt)
    assert {s for fp, s in runner.played if fp == c2.fingerprint} >= set(bt)
    assert g2.gate["validity"]["backtest_seeds"] == bt and g2.gate["promoted"]
    assert res.report["strategies"]["validity_checked"] == 2
    assert res.report["strategies"]["enabled"]["backtest"] is True


def test_backtest_replays_the_most_recent_earlier_generations_first(tmp_path):
    """Training seeds are drawn from a shuffled pool, so "most recent" means the latest earlier generation,
    not the highest seed numbers."""
    from promptevo.optim.state import GenerationRecord
    from promptevo.optim.strategies import earlier_seeds

    gens = [GenerationRecord(index=1, parent="c0", evidence_seeds=[30, 31], accept_seeds=[32, 33]),
            GenerationRecord(index=2, parent="c0", evidence_seeds=[1, 2], accept_seeds=[3, 4]),
            GenerationRecord(index=3, parent="c0", evidence_seeds=[20, 21], accept_seeds=[22, 23])]
    played = [30, 31, 32, 33, 1, 2, 3, 4, 20, 21, 22, 23]
    assert earlier_seeds(gens, 3, played, limit=4) == [1, 2, 3, 4]  # gen 2's seeds, not 30-33
    assert earlier_seeds(gens, 3, played, limit=6) == [1, 2, 3, 4, 32, 33]  # then gen 1's acceptance seeds
    assert earlier_seeds(gens, 3, [30, 31, 3], limit=None) == [3, 30, 31]  # only seeds the best was played on
    assert earlier_seeds(gens, 1, played, limit=4) == []


def test_leaky_edit_that_also_helps_validation_is_vetoed(tmp_path):
    opt = OptimizerDouble(mutations=[[rewrite_rules("Act carefully. " + LEAK + " " + RULE)]])
    res, _, _ = run(tmp_path, opt, backtest=True)
    c1 = cands(res)["c1"]
    assert c1.gate["accepted"]  # it passed the validation gate ...
    assert c1.status == "vetoed" and res.best_id == "c0"  # ... but hard-codes a training mission
    assert [v["check"] for v in c1.validity["vetoes"]] == ["leak"]
    outcomes = {h["candidate"]: h["outcome"] for h in checkpoint(res).history}
    assert outcomes["c1"] == "passed the validation gate, vetoed by validity diagnostics"
    assert res.report["strategies"]["vetoed"][0]["candidate"] == "c1"
    assert res.report["strategies"]["vetoed"][0]["vetoes"][0]["check"] == "leak"


def test_backtest_vetoes_a_child_worse_on_earlier_seeds(tmp_path):
    trick = "Answer done at once."
    ev1, ac1 = draw(1, generations=2)
    gen1 = set(ev1) | set(ac1)

    def policy(system: str, mission: str, seed: int) -> bool:
        if trick in system:
            return seed not in gen1  # helps on gen 2's seeds and on validation, hurts on gen 1's seeds
        return default_policy(system, mission, seed)

    assert any(s % 4 == 0 for s in gen1)  # the initial prompt wins some of gen 1's seeds
    opt = OptimizerDouble(mutations=[[NEUTRAL], [rewrite_rules("Act carefully. " + trick)]])
    res, _, _ = run(tmp_path, opt, policy=policy, generations=2, backtest=True, backtest_episodes=8)
    cs = cands(res)
    assert cs["c1"].status == "rejected"
    c2 = cs["c2"]
    assert c2.gate["accepted"] and c2.status == "vetoed" and res.best_id == "c0"
    assert [v["check"] for v in c2.validity["vetoes"]] == ["backtest"]
    assert set(c2.validity["backtest_seeds"]) == gen1
    assert c2.validity["backtest"]["n"] == 8 and c2.validity["backtest"]["mean_diff"] < 0


def test_no_strategies_no_strategy_records(tmp_path):
    # changed by design: report.md no longer has a "## Strategies" section (nor "Evidence: cards",
    # "backtest: on", "vetoed: c1 (leak)" lines); the strategy figures are in report.json["strategies"]
    res, _, _ = run(tmp_path, OptimizerDouble())
    st = res.report["strategies"]
    assert st["enabled"] == {"evidence": "raw", "prune_at": None, "skills": None, "backtest": False, "ray": False,
                             "operators": ["induce", "mutate"], "hints": None}
    assert st["validity_checked"] == 0 and st["pruned"] == [] and st["skill_children"] == [] and st["vetoed"] == []
    assert cands(res)["c1"].validity is None and cands(res)["c1"].operator == "mutate"
    assert checkpoint(res).generations[0].evidence_kind == "raw"


def test_vetoed_candidate_counts_as_accepted_on_training_seeds(tmp_path):
    opt = OptimizerDouble(mutations=[[rewrite_rules("Act carefully. " + LEAK + " " + RULE)]])
    res, _, _ = run(tmp_path, opt, backtest=True)
    c1 = cands(res)["c1"]
    assert c1.status == "vetoed" and c1.verdict["accepted"]
    assert res.report["accepted"] == 1
    assert "accepted on training seeds: 1" in (res.run_dir / "report.md").read_text()
