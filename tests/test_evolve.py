"""Tests of the optimization loop: paired acceptance, held-out promotion, resume, budgets, export.

Test doubles:
* ``ScriptedPickupEnv``: a tiny text env. The ball is in front of the player on seeds divisible by 4,
  else to its left; "pick up" only works when facing the ball.
* The agent LLM is ``fake/agent`` (ScriptedLLM): the real two-stage agent plays; its actor reply turns
  toward the ball first ONLY if the actor prompt contains the rule "face the object before pick up",
  otherwise it always answers "pick up". So the rule lifts success from 25% to 100%.
* The optimizer LLM is ``fake/optimizer`` (ScriptedLLM): the analyzer returns a fixed diagnosis; the
  mutator proposes adding the rule while it is absent (plus a harmless rewording), and deleting it
  once it is present.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from promptevo.envs.base import StepResult, TextEnv
from promptevo.optim.engine import (
    EvolveConfig,
    EvolveError,
    accept,
    load_run_config,
    optimize,
    promote,
    sign_test_p,
    usage_totals,
)
from promptevo.reporting.export import export_run, load_agent_config
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.evaluation.rollout import run_episodes
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import SeedRange, TaskConfig

RULE = "Always face the object before pick up."


# -- pure selection functions ------------------------------------------------------------------------


def test_accept_margin_rule():
    parent = {1: 0.0, 2: 0.5, 3: 1.0, 4: 0.0}
    better = {1: 1.0, 2: 0.5, 3: 1.0, 4: 0.5}
    v = accept(better, parent, "margin", 0.05)
    assert v.accepted and v.n == 4 and v.wins == 2 and v.ties == 2 and v.losses == 0
    assert v.mean_diff == pytest.approx(0.375)
    assert not accept(parent, parent, "margin", 0.0).accepted  # equal is not better
    assert not accept({1: 0.04}, {1: 0.0}, "margin", 0.05).accepted
    # only common seeds are paired
    v = accept({1: 1.0, 9: 1.0}, {1: 0.0, 2: 0.0}, "margin", 0.0)
    assert v.n == 1 and v.accepted
    v = accept({5: 1.0}, {1: 0.0}, "margin", 0.0)
    assert not v.accepted and v.reason == "no paired seeds"


def test_accept_paired_sign_test_and_always():
    parent = {s: 0.0 for s in range(8)}
    child = {s: 1.0 for s in range(8)}
    v = accept(child, parent, "paired", 0.0, alpha=0.05)
    assert v.accepted and v.p_value == pytest.approx(1 / 256)
    few = {s: (1.0 if s < 3 else 0.0) for s in range(8)}  # 3 wins, 5 ties: p = 1/8
    assert not accept(few, parent, "paired", 0.0).accepted
    assert sign_test_p(3, 0) == pytest.approx(0.125)
    assert sign_test_p(0, 0) == 1.0
    worse = {s: -1.0 for s in range(8)}
    assert accept(worse, parent, "always", 0.0).accepted
    assert not accept(worse, parent, "margin", 0.0).accepted
    with pytest.raises(ValueError):
        accept(child, parent, "vote", 0.0)  # type: ignore[arg-type]


def test_promote_needs_heldout_improvement():
    best = {10: 1.0, 11: 0.0, 12: 0.0}
    assert promote({10: 1.0, 11: 1.0, 12: 0.0}, best).accepted
    assert not promote({10: 1.0, 11: 0.0, 12: 0.0}, best).accepted  # training luck only
    with pytest.raises(ValueError):
        promote(best, best, rule="always")


def test_usage_totals_reads_gateway_snapshots():
    snap = {"total": {"calls": 3, "prompt_tokens": 10, "completion_tokens": 5, "cost": 0.5}, "by_role": {}}
    assert usage_totals(snap) == {"calls": 3, "tokens": 15, "cost": 0.5}
    assert usage_totals({"a": {"calls": 1}, "b": {"calls": 2, "prompt_tokens": 4}}) == {"calls": 3, "tokens": 4, "cost": 0.0}
    assert usage_totals(None) == {"calls": 0, "tokens": 0, "cost": 0.0}


# -- test doubles ------------------------------------------------------------------------------------


class ScriptedPickupEnv(TextEnv):
    """Test double env: pick up the ball; it is in front on seeds % 4 == 0, else to the left."""

    family = "test"
    ACTIONS = ["turn left", "turn right", "go forward", "pick up"]

    def __init__(self, task: Any = None):
        self._front = False
        self._done = False
        self._t = 0

    @property
    def valid_actions(self) -> list[str]:
        return list(self.ACTIONS)

    @property
    def default_action(self) -> str:
        return "turn right"

    @property
    def max_steps(self) -> int:
        return 5

    @property
    def mission(self) -> str:
        return "pick up the ball"

    @property
    def progression(self) -> float:
        return 1.0 if self._done else 0.0

    def _obs(self) -> str:
        return "the ball is right in front of you" if self._front else "the ball is 1 step to your left"

    def reset(self, seed: int):
        self._front, self._done, self._t = seed % 4 == 0, False, 0
        return self._obs(), {"mission": self.mission}

    def step(self, action: str) -> StepResult:
        self._t += 1
        valid = action in self.ACTIONS
        executed = action if valid else self.default_action
        reward = 0.0
        if executed == "turn left":
            self._front = not self._front
        elif executed == "pick up" and self._front:
            self._done = True
            reward = 1.0 - 0.9 * self._t / self.max_steps
        return StepResult(self._obs(), reward, self._done, False,
                          {"valid_action": valid, "executed_action": executed, "progression": self.progression})

    def instructions(self) -> str:
        return "Actions: " + ", ".join(self.ACTIONS)


def initial_prompts() -> PromptSet:
    return PromptSet.of(
        {
            "descriptor": Prompt((Segment("role", "Describe where the ball is."),)),
            "actor": Prompt(
                (
                    Segment("role", "You choose the next action for {mission}."),
                    Segment("rules", "Move toward the ball."),
                    Segment("output_format", "Answer as <|ACTION|>action<|END|>."),
                )
            ),
        }
    )


def agent_reply(messages: list[dict]) -> str:
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    user = messages[-1]["content"]
    if system.startswith("Describe"):  # descriptor: echo the observation
        return user.split("Observation:\n", 1)[-1]
    if "face the object before pick up" in system.lower() and "to your left" in user:
        return "The ball is left. <|ACTION|>turn left<|END|>"
    return "<|ACTION|>pick up<|END|>"  # actor without the rule, and the robust-cot baseline


ANALYSIS_REPLY = {
    "attributions": [{"module": "actor", "segment": "rules", "effect": "missing",
                      "evidence": [{"seed": 1, "step": 0, "note": "picked up while the ball was to the left"}],
                      "explanation": "nothing says to face the ball first"}],
    "failure_modes": ["pick up while not facing the ball"],
    "proposals": [{"module": "actor", "segment": "rules", "op": "rewrite", "idea": "face the object first"}],
}


def mutator_reply(messages: list[dict]) -> str:
    user = messages[-1]["content"]
    if RULE in user:  # the parent already has the rule: propose removing it (must be rejected)
        edits = [{"module": "actor", "op": "delete", "segment": "rules", "rationale": "the rules look redundant"}]
    else:
        edits = [
            {"module": "actor", "op": "rewrite", "segment": "rules", "text": "Move toward the ball. " + RULE,
             "rationale": "episodes fail by picking up while the ball is to the left"},
            {"module": "actor", "op": "rewrite", "segment": "role", "text": "You pick the next action for {mission}.",
             "rationale": "clearer wording (no behavioural change)"},
        ]
    return "```json\n" + json.dumps({"edits": edits}) + "\n```"


def optimizer_reply(messages: list[dict]) -> str:
    if '"edits"' in messages[0]["content"]:
        return mutator_reply(messages)
    return json.dumps(ANALYSIS_REPLY)


def responder(messages: list[dict], params: dict) -> str:
    if params.get("model") == "fake/optimizer":
        return optimizer_reply(messages)
    return agent_reply(messages)


def make_task() -> TaskConfig:
    return TaskConfig(name="scripted-pickup", family="babyai", goal="pickup",
                      train_seeds=SeedRange(start=0, count=40), heldout_seeds=SeedRange(start=1000, count=40))


class CountingRunner:
    """Real run_episodes on the test-double env; records every (prompt fingerprint, seed) played."""

    def __init__(self, interrupt_on: str | None = None, interrupt_after: int = 0):
        self.played: list[tuple[str, int]] = []
        self.interrupt_on = interrupt_on
        self.interrupt_after = interrupt_after

    def __call__(self, task, agent_factory, seeds, *, concurrency=4, on_result=None):
        fp = agent_factory().prompts.fingerprint()
        seeds = list(seeds)
        if self.interrupt_on is not None and fp == self.interrupt_on:
            self.interrupt_on = None
            part = run_episodes(task, agent_factory, seeds[: self.interrupt_after], concurrency=concurrency,
                                on_result=lambda r: (self.played.append((fp, r.seed)), on_result and on_result(r)),
                                env_factory=ScriptedPickupEnv)
            assert len(part) == self.interrupt_after
            raise KeyboardInterrupt("simulated crash in the middle of an evaluation")

        def record(r):
            self.played.append((fp, r.seed))
            if on_result is not None:
                on_result(r)

        return run_episodes(task, agent_factory, seeds, concurrency=concurrency, on_result=record,
                            env_factory=ScriptedPickupEnv)


def gateways(cache_dir: str | None = None) -> tuple[Gateway, Gateway]:
    return (Gateway(LLMConfig(model="fake/agent", cache_dir=cache_dir, num_retries=0)),
            Gateway(LLMConfig(model="fake/optimizer", cache_dir=cache_dir, num_retries=0, max_tokens=2048)))


def config(tmp_path: Path, **kw: Any) -> EvolveConfig:
    base = dict(task="scripted-pickup", agent="two-stage", generations=2, episodes=8, heldout_episodes=8,
                children=2, accept_rule="margin", accept_margin=0.05, concurrency=4,
                results_dir=str(tmp_path), run="run1")
    base.update(kw)
    return EvolveConfig(**base)


def run(cfg: EvolveConfig, runner: CountingRunner, *, fast: bool = False, console_out: io.StringIO | None = None):
    from rich.console import Console

    agw, ogw = gateways()
    with ScriptedLLM.install(responder):
        return optimize(cfg, agent_gateway=agw, optimizer_gateway=ogw, task=make_task(),
                        initial_prompts=initial_prompts(), runner=runner, env_instructions="Actions: ...",
                        console=Console(file=console_out or io.StringIO(), width=120), quiet=fast)


def fp_of(res, cid: str) -> str:
    return next(c.fingerprint for c in res.candidates if c.id == cid)


# -- the loop ------------------------------------------------------------------------------------------


def test_rule_is_accepted_and_promoted_then_its_deletion_is_rejected(tmp_path):
    runner = CountingRunner()
    out = io.StringIO()
    res = run(config(tmp_path), runner, console_out=out)
    cands = {c.id: c for c in res.candidates}
    assert set(cands) == {"c0", "c1", "c2", "c3"}
    c1, c2, c3 = cands["c1"], cands["c2"], cands["c3"]
    assert c1.edit["op"] == "rewrite" and c1.edit["segment"] == "rules"
    # accepted on paired training seeds, then promoted after the held-out check
    assert c1.verdict["accepted"] and c1.verdict["n"] == 8 and c1.verdict["losses"] == 0
    assert c1.status == "promoted" and c1.promotion["accepted"]
    assert c2.status == "rejected" and c2.verdict["mean_diff"] == pytest.approx(0.0)
    # generation 2: the parent is the promoted child; deleting the rule is rejected
    assert c3.parent == "c1" and c3.edit["op"] == "delete" and c3.status == "rejected"
    assert c3.verdict["mean_diff"] < 0
    assert res.best_id == "c1"
    assert RULE in res.best_prompts.module("actor").get("rules")
    # paired evaluation: children were played on exactly their parent's seeds of that generation
    ck = json.loads((res.run_dir / "checkpoint.json").read_text())
    g1, g2 = ck["generations"]
    assert g1["done"] and g2["done"] and g1["seeds"] != g2["seeds"]
    assert sorted(int(s) for s in c1.train) == sorted(g1["seeds"] + g2["seeds"])  # parent again in gen 2
    assert sorted(int(s) for s in c3.train) == sorted(g2["seeds"])
    # no (candidate, seed) played twice within the run
    assert max(Counter(runner.played).values()) == 1
    # hereditary history records every attempt and outcome
    outcomes = [(h["candidate"], h["outcome"]) for h in ck["history"]]
    assert ("c1", "accepted and promoted") in outcomes and ("c3", "rejected") in outcomes
    # the mutator saw the history in generation 2 (it is in the stored analysis file)
    assert json.loads((res.run_dir / g2["analysis"]).read_text())["analysis"]["ok"]
    # report: baseline vs initial vs best on the held-out seeds
    rows = {r["name"].split(" ")[0]: r for r in res.report["rows"]}
    assert rows["initial"]["success_rate"] == pytest.approx(2 / 8)  # seeds 1000, 1004 have the ball in front
    assert rows["best"]["success_rate"] == 1.0
    assert rows["baseline"]["n"] == 8 and rows["baseline"]["success_rate"] == pytest.approx(2 / 8)
    lo, hi = rows["best"]["ci95"]
    assert lo < 1.0 and hi == pytest.approx(1.0)
    for name in ("report.json", "report.md", "best.md", "best.json", "episodes.jsonl"):
        assert (res.run_dir / name).exists(), name
    assert PromptSet.load(res.run_dir / "best.md").fingerprint() == c1.fingerprint
    assert "| best (two-stage) | 8 | 100.0%" in (res.run_dir / "report.md").read_text()
    assert "PROMOTED" in out.getvalue()
    assert res.stop_reason == "completed 2 generations"


def test_resume_continues_without_replaying_episodes(tmp_path):
    runner = CountingRunner()
    first = run(config(tmp_path, generations=1), runner, fast=True)
    assert first.best_id == "c1"
    n_first = len(runner.played)
    stored = len((first.run_dir / "episodes.jsonl").read_text().splitlines())
    assert stored == n_first
    cfg2 = load_run_config(first.run_dir).model_copy(update={"generations": 2, "resume": True})
    second = run(cfg2, runner, fast=True)
    counts = Counter(runner.played)
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1]
    # only generation 2 work was done in the second session: parent c1 on new seeds + child c3
    new = runner.played[n_first:]
    assert {fp for fp, _ in new} == {fp_of(second, "c1"), fp_of(second, "c3")}
    ck = json.loads((second.run_dir / "checkpoint.json").read_text())
    ids = [c["id"] for c in ck["candidates"]]
    assert ids == ["c0", "c1", "c2", "c3"]
    assert all(c["parent"] in ids for c in ck["candidates"] if c["parent"])
    assert [g["index"] for g in ck["generations"]] == [1, 2] and all(g["done"] for g in ck["generations"])
    assert ck["best_id"] == "c1"
    assert ck["episodes_run"] == len(runner.played)
    # resuming with a changed identity field is refused
    with pytest.raises(EvolveError, match="episodes"):
        run(cfg2.model_copy(update={"episodes": 4}), runner, fast=True)
    # a fresh run into an existing run directory is refused
    with pytest.raises(EvolveError, match="already has a checkpoint"):
        run(config(tmp_path), runner, fast=True)


def test_resume_after_crash_mid_evaluation(tmp_path):
    # find the fingerprint of the gen-2 child (delete rules) from a reference run
    ref = run(config(tmp_path, run="ref"), CountingRunner(), fast=True)
    target = fp_of(ref, "c3")
    runner = CountingRunner(interrupt_on=target, interrupt_after=3)
    with pytest.raises(KeyboardInterrupt):
        run(config(tmp_path, run="crash"), runner, fast=True)
    assert sum(1 for fp, _ in runner.played if fp == target) == 3
    cfg = load_run_config(tmp_path / "crash").model_copy(update={"resume": True})
    res = run(cfg, runner, fast=True)
    counts = Counter(runner.played)
    assert max(counts.values()) == 1
    assert sum(1 for fp, _ in runner.played if fp == target) == 8  # 3 before the crash + 5 after
    assert {c.id: c.status for c in res.candidates} == {c.id: c.status for c in ref.candidates}
    assert res.report["rows"][-1]["success_rate"] == ref.report["rows"][-1]["success_rate"]


def test_corrupt_checkpoint_gives_clear_error(tmp_path):
    run_dir = tmp_path / "run1"
    run_dir.mkdir()
    (run_dir / "checkpoint.json").write_text('{"version": 1, "candidates": [')
    with pytest.raises(EvolveError, match=r"corrupt checkpoint .*run1/checkpoint\.json"):
        run(config(tmp_path, resume=True), CountingRunner(), fast=True)
    with pytest.raises(EvolveError, match="checkpoint"):
        export_run(run_dir)
    with pytest.raises(EvolveError, match="no checkpoint to resume"):
        run(config(tmp_path, run="absent", resume=True), CountingRunner(), fast=True)


def test_malformed_optimizer_replies_do_not_crash_the_loop(tmp_path):
    calls = {"optimizer": 0}

    def bad_responder(messages, params):
        if params.get("model") == "fake/optimizer":
            calls["optimizer"] += 1
            return "Sorry, I think the prompt is fine {not json"
        return agent_reply(messages)

    agw, ogw = gateways()
    with ScriptedLLM.install(bad_responder):
        res = optimize(config(tmp_path, generations=1, baseline=None), agent_gateway=agw, optimizer_gateway=ogw,
                       task=make_task(), initial_prompts=initial_prompts(), runner=CountingRunner(),
                       env_instructions="", quiet=True)
    assert calls["optimizer"] == 4  # analyzer: 1 + 1 retry; mutator: 1 + 1 retry
    assert res.best_id == "c0" and len(res.candidates) == 1
    analysis = json.loads((res.run_dir / "analyses/gen-001.json").read_text())
    assert analysis["analysis"]["ok"] is False and "not json" in analysis["analysis"]["raw"]
    assert analysis["mutation"]["edits"] == [] and analysis["mutation"]["error"]
    assert len(res.report["rows"]) == 2  # no baseline row when baseline=None


def test_budget_stops_the_run_and_still_reports(tmp_path):
    runner = CountingRunner()
    res = run(config(tmp_path, generations=5, budget_llm_calls=150), runner, fast=True)
    assert "LLM-call budget" in res.stop_reason
    ck = json.loads((res.run_dir / "checkpoint.json").read_text())
    assert ck["usage"]["calls"] >= 150
    assert sum(1 for g in ck["generations"] if g["done"]) < 5
    assert (res.run_dir / "report.md").exists()
    res2 = run(config(tmp_path, run="eps", generations=5, budget_episodes=20), CountingRunner(), fast=True)
    assert "episode budget" in res2.stop_reason


def test_export_writes_loadable_files_and_lineage(tmp_path):
    res = run(config(tmp_path), CountingRunner(), fast=True)
    paths = export_run(res.run_dir, tmp_path / "out")
    names = sorted(p.name for p in paths)
    assert names == ["LINEAGE.md", "agent.json", "best.json", "best.md", "report.html"]
    best_fp = fp_of(res, "c1")
    assert PromptSet.load(tmp_path / "out" / "best.md").fingerprint() == best_fp
    assert PromptSet.load(tmp_path / "out" / "best.json").fingerprint() == best_fp
    agent, ps, data = load_agent_config(tmp_path / "out" / "agent.json")
    assert agent == "two-stage" and ps.fingerprint() == best_fp and data["task"] == "scripted-pickup"
    assert (tmp_path / "out" / data["prompts_file"]).exists()
    assert PromptSet.load(tmp_path / "out" / "agent.json").fingerprint() == best_fp  # eval --prompts agent.json
    lineage = (tmp_path / "out" / "LINEAGE.md").read_text()
    assert "c0 -> c1" in lineage
    assert "`rewrite` `actor.rules`" in lineage
    assert "episodes fail by picking up while the ball is to the left" in lineage
    assert "+Move toward the ball. " + RULE in lineage  # the segment diff
    assert "held-out episodes: 8/8" in lineage
    assert "| c3 | 2 | c1 | `delete` `actor.rules`" in lineage  # rejected candidates listed too
    # default output folder
    assert all(p.parent == res.run_dir / "export" for p in export_run(res.run_dir))


# -- command line and default wiring ---------------------------------------------------------------


def test_cli_args_and_resume_config(tmp_path):
    from promptevo.optim.engine import config_from_args

    cfg, quiet = config_from_args(["--task", "pickup", "-g", "3", "--budget-calls", "10", "--baseline", "none",
                                   "--results-dir", str(tmp_path), "--optimizer-model", "openai/gpt-4o-mini", "-q"])
    assert cfg.task == "pickup" and cfg.generations == 3 and cfg.budget_llm_calls == 10 and cfg.baseline is None
    assert cfg.optimizer_model == "openai/gpt-4o-mini" and quiet and cfg.run and cfg.run.startswith("pickup-two-stage-")
    with pytest.raises(EvolveError, match="--task"):
        config_from_args([])
    with pytest.raises(EvolveError, match="generations"):
        config_from_args(["--task", "pickup", "-g", "-1"])
    res = run(config(tmp_path, generations=1), CountingRunner(), fast=True)
    cfg2, _ = config_from_args(["--resume", "run1", "--results-dir", str(tmp_path), "-g", "4"])
    assert cfg2.resume and cfg2.generations == 4 and cfg2.task == "scripted-pickup" and cfg2.run_path() == res.run_dir
    cfg3, _ = config_from_args(["--resume", str(res.run_dir)])
    assert cfg3.run_path() == res.run_dir and cfg3.generations == 1


def test_export_cli(tmp_path, capsys):
    from promptevo.reporting.export import cli_main

    res = run(config(tmp_path, generations=1), CountingRunner(), fast=True)
    assert cli_main([str(res.run_dir), "--out", str(tmp_path / "exp")]) == 0
    out = capsys.readouterr().out
    assert "LINEAGE.md" in out and "--prompts" in out
    assert cli_main(["nope", "--results-dir", str(tmp_path)]) == 2


def test_default_wiring_with_real_babyai_env_and_scripted_llm(tmp_path):
    """optimize() with defaults: real task file, default prompts, gateways from the config, make_agent,
    run_episodes and the BabyAI env (episodes capped at 8 steps)."""
    pytest.importorskip("minigrid")

    def scripted(messages, params):
        first = messages[0]["content"]
        if '"edits"' in first:
            return json.dumps({"edits": [{"module": "actor", "op": "add", "segment": "tips",
                                          "text": "Turn toward the target before moving.", "rationale": "test"}]})
        if '"attributions"' in first:
            return json.dumps({"attributions": [], "failure_modes": ["wanders"], "proposals": []})
        return "<|ACTION|>go forward<|END|>"

    cfg = EvolveConfig(task="goto", model="fake/scripted", generations=1, episodes=2, heldout_episodes=2,
                       children=1, results_dir=str(tmp_path), run="real", no_cache=True, concurrency=2)
    from promptevo.tasks import load_task

    short = load_task("goto").model_copy(update={"max_steps": 8})  # keep the test fast
    with ScriptedLLM.install(scripted):
        res = optimize(cfg, task=short, quiet=True)
    cands = {c.id: c for c in res.candidates}
    assert cands["c1"].edit["segment"] == "tips" and cands["c1"].verdict is not None
    assert [r["n"] for r in res.report["rows"]] == [2, 2, 2]
    assert res.report["model"] == "fake/scripted"
    analysis = json.loads((res.run_dir / "analyses/gen-001.json").read_text())
    assert analysis["analysis"]["ok"] and analysis["analysis"]["seeds"]


def test_ablation_of_best_prompts_reuses_stored_episodes(tmp_path):
    runner = CountingRunner()
    res = run(config(tmp_path, generations=1, ablate_best=True), runner, fast=True)
    rows = {(r["module"], r["segment"]): r for r in res.report["ablation"]["rows"]}
    assert rows[("actor", "rules")]["delta_success"] == pytest.approx(-6 / 8)  # the rule is what matters
    assert rows[("actor", "role")]["delta_success"] == 0.0
    assert ("descriptor", "role") not in rows  # removing a module's only segment is not tried
    assert max(Counter(runner.played).values()) == 1  # the best's held-out episodes were not re-played
    assert "Segment ablation" in (res.run_dir / "report.md").read_text()


def test_episode_store_tolerates_a_cut_last_line_but_not_corruption(tmp_path):
    from promptevo.optim.engine import EpisodeStore

    path = tmp_path / "episodes.jsonl"
    store = EpisodeStore(path)
    store.put("abc", 1, {"seed": 1, "success": True})
    store.put("abc", 2, {"seed": 2, "success": False, "error": "LLMError: timeout"})
    assert store.get("abc", 1)["success"] and store.get("abc", 2) is None  # errored = not finished
    with path.open("a") as f:
        f.write('{"key": "abc", "seed": 3, "res')
    again = EpisodeStore(path)
    assert again.get("abc", 1) and again.get("abc", 3) is None
    path.write_text('garbage\n' + path.read_text())
    with pytest.raises(EvolveError, match="episodes.jsonl:1"):
        EpisodeStore(path)
