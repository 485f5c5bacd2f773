"""Experts behind the env interface, expert-labelled evidence, rules induced from it and the screen.

The LLM here is a test double (ScriptedLLM); nothing in this file stands in for a measured result.
"""

from __future__ import annotations

import random
import re

import pytest
from engine_doubles import ScriptedPickupEnv, config, make_task, run

from promptevo.envs.base import ExpertError, has_expert
from promptevo.optim.propose.induce import RuleTable, Split, complexity, induce
from promptevo.optim.propose.render_table import load_phrases, render
from promptevo.optim.reflect.expert import LabelledState, collect, label_episode, states_of
from promptevo.optim.reflect.features import mission_slots, state_features, vocabulary
from promptevo.optim.screen import choose_states, screen
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import load_task, make_env


class ExpertPickupEnv(ScriptedPickupEnv):
    """The scripted pickup env with an expert: pick up when the ball is in front, else turn left."""

    def expert_action(self) -> str | None:
        if self._done:
            raise ExpertError("the episode is over")
        return "pick up" if self._front else "turn left"


class TurnEnv(ScriptedPickupEnv):
    """A test-double game with an expert: a coloured ball 1-3 turns to the left or right, or in front; turning
    moves it by one; "pick up" wins when it is in front. Text in BabyAI's style, with a wall line that varies."""

    COLOURS = ("red", "green", "blue", "grey", "purple", "yellow")

    def reset(self, seed: int):
        self._seed, self._offset, self._done, self._t = seed, seed % 7 - 3, False, 0
        return self._obs(), {"mission": self.mission}

    @property
    def mission(self) -> str:
        return f"pick up the {self.COLOURS[self._seed % 6]} ball"

    @property
    def max_steps(self) -> int:
        return 8

    def _obs(self) -> str:
        c, o = self.COLOURS[self._seed % 6], self._offset
        where = "1 step forward" if o == 0 else f"{abs(o)} steps {'left' if o < 0 else 'right'}"
        return f"a wall {(self._seed + self._t) % 5 + 1} steps forward\na {c} ball {where}"

    def step(self, action: str):
        from promptevo.envs.base import StepResult

        self._t += 1
        valid = action in self.ACTIONS
        executed = action if valid else self.default_action
        if executed == "turn left":
            self._offset += 1
        elif executed == "turn right":
            self._offset -= 1
        elif executed == "pick up" and self._offset == 0:
            self._done = True
        done = self._done or self._t >= self.max_steps
        return StepResult(self._obs(), float(self._done), self._done, done and not self._done,
                          {"valid_action": valid, "executed_action": executed, "progression": self.progression})

    def expert_action(self) -> str | None:
        if self._done:
            raise ExpertError("the episode is over")
        return "pick up" if self._offset == 0 else "turn left" if self._offset < 0 else "turn right"


class BrokenExpertEnv(ScriptedPickupEnv):
    def expert_action(self) -> str | None:
        raise RuntimeError("planner crashed")


# -- the experts of the shipped games ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["goto", "pickup", "putnext", "frozenlake", "taxi", "cliffwalking", "mapf-single",
                                  "mapf-easy"])
def test_shipped_experts_solve_their_games_and_leave_the_state_alone(name):
    task = load_task(name)
    env = make_env(task)
    assert has_expert(env)
    wins = 0
    for seed in task.seed_list("train")[:4]:
        env.reset(seed)
        for _ in range(env.max_steps):
            before = env.state_key()
            action = env.expert_action()
            assert env.state_key() == before  # asking the expert changes nothing
            assert env.action_space().match(action) == action
            if env.step(action).done:
                break
        wins += env.progression >= 1.0
    assert wins >= 3, f"{name}: the expert won {wins} of 4"


def test_env_without_expert_says_none():
    env = ScriptedPickupEnv()
    assert not has_expert(env) and env.expert_action() is None


# -- features ------------------------------------------------------------------------------------------
def test_features_find_the_missions_things_generically():
    obs = ["a wall 2 steps forward\na red ball 1 step left and 2 steps forward", "a wall 1 step left\nYou carry a red ball",
           "a blue key 3 steps right\na wall 4 steps forward"]
    vocab = vocabulary(obs)
    assert "a" in vocab.structural and "red" not in vocab.structural
    assert mission_slots("put the red ball next to the blue key", vocab) == [("red", "ball"), ("blue", "key")]
    f = state_features(obs[0], "go to the red ball", vocab)
    assert f["1.line"] == "yes" and f["1.last"] == "forward" and f["1.rest"] == "a ... 1 step left and 2 steps forward"
    assert state_features(obs[2], "go to the red ball", vocab) == {"1.line": "none"}
    assert state_features(obs[1], "go to the red ball", vocab)["1.first"] == "you"


# -- induction -----------------------------------------------------------------------------------------
def _goto_like_states(n_seeds: int, label) -> list[LabelledState]:
    rng = random.Random(7)
    out = []
    colours, kinds = ["red", "green", "blue", "grey"], ["ball", "key", "box"]
    for seed in range(n_seeds):
        c, k = rng.choice(colours), rng.choice(kinds)
        mission = f"go to the {c} {k}"
        for t in range(6):
            side = rng.choice(["left", "right", "forward"])
            dist = rng.randint(1, 3)
            where = f"{dist} steps {side}" if side != "forward" else f"{dist + 1} steps forward"
            lines = [f"a wall {rng.randint(1, 5)} steps forward"]
            if rng.random() < 0.8:
                lines.append(f"a {c} {k} {where}")
            if rng.random() < 0.5:
                lines.append(f"a {rng.choice(colours)} {rng.choice(kinds)} 2 steps right")
            obs = "\n".join(rng.sample(lines, len(lines)))
            out.append(LabelledState(seed, t, mission, obs, label(obs, c, k, rng)))
    return out


def _by_last_word(obs, c, k, rng):
    line = next((ln for ln in obs.splitlines() if f"{c} {k}" in ln), None)
    if line is None:
        return "turn left"
    return {"left": "turn left", "right": "turn right", "forward": "go forward"}[line.split()[-1]]


def test_induce_recovers_a_known_mapping_and_renders_it():
    ind = induce(_goto_like_states(40, _by_last_word))
    assert ind.useful and ind.accuracy == 1.0 and ind.accuracy > ind.majority
    t = ind.table
    assert t.root == "1.last" and t.branches == {"forward": "go forward", "left": "turn left", "right": "turn right"}
    assert t.none_action == "turn left" and ind.left_out > 0
    rule, fmt = render(t, load_phrases())
    assert 'Last word is "left": turn left.' in rule and "<|ACTION|>the action<|END|>" in fmt
    assert fmt.index("Line:") < fmt.index("Last word:") < fmt.index("<|ACTION|>")
    # every value and action in the edit comes from the data: no colour or kind of any mission
    assert not re.search(r"\b(red|green|blue|grey|ball|key|box)\b", rule + fmt)


def test_induce_proposes_nothing_on_unrelated_labels():
    noise = _goto_like_states(40, lambda obs, c, k, rng: rng.choice(["turn left", "turn right", "go forward"]))
    ind = induce(noise)
    assert not ind.useful and "no better than the majority" in ind.reason


def test_induce_says_why_with_too_few_states():
    ind = induce(_goto_like_states(2, _by_last_word))
    assert not ind.useful and "too few labelled states" in ind.reason
    assert not induce([]).useful


def test_render_of_a_split_asks_for_the_words_after_the_name_or_a_yes_no_field():
    t = RuleTable("1.last", {"forward": Split("1.rest", "a ... 1 step forward", "pick up", "go forward"),
                             "left": "turn left"}, "go forward", "turn right")
    rule, fmt = render(t, load_phrases())
    assert "After the name: <the words that follow the name" in fmt
    assert 'Last word is "forward" and After the name is "1 step forward": pick up.' in rule
    assert 'Last word is "forward", otherwise: go forward.' in rule and complexity(t) == 3
    # a shape with nothing after the name can only be asked as a whole
    t2 = RuleTable("1.last", {"ball": Split("1.rest", "you carry a ...", "drop", "go forward")}, "go forward")
    rule2, fmt2 = render(t2, load_phrases())
    assert 'Exactly "you carry a ...": <yes' in fmt2 and 'Exactly "you carry a ..." is yes: drop.' in rule2


# -- expert evidence --------------------------------------------------------------------------------------
def _episode(seed: int, actions: list[str]) -> dict:
    env = ExpertPickupEnv()
    obs, _ = env.reset(seed)
    traj = []
    for t, a in enumerate(actions):
        st = env.step(a)
        traj.append({"t": t, "observation": obs, "action": a, "executed_action": a, "valid": True})
        obs = st.observation
        if st.done:
            break
    return {"seed": seed, "trajectory": traj}


def test_collect_labels_replays_and_clusters_disagreements():
    task = make_task()
    eps = [_episode(s, ["pick up", "pick up", "turn left", "pick up"]) for s in (1, 2, 4)]
    ev = collect(task, eps, [5, 6, 8], env_factory=ExpertPickupEnv)
    assert ev["available"] and ev["counts"]["expert_episodes"] == 3
    states = states_of(ev)
    mine = [s for s in states if s.agent is not None]
    assert mine and all(s.expert in ("pick up", "turn left") for s in mine)
    top = ev["clusters"][0]
    assert (top["agent"], top["expert"]) == ("pick up", "turn left") and top["cites"][0].startswith("S")
    assert ev["agreement"]["states"] == len(mine)


def test_collect_without_expert_and_with_a_broken_one():
    task = make_task()
    ev = collect(task, [_episode(1, ["pick up"])], [2], env_factory=ScriptedPickupEnv)
    assert ev == {"available": False, "note": ev["note"]} and "has no expert" in ev["note"]
    broken = collect(task, [_episode(1, ["pick up"])], [2, 3], env_factory=BrokenExpertEnv)
    assert broken["available"] and broken["states"] == []
    assert len(broken["problems"]) == 1 and "planner crashed" in broken["problems"][0]


def test_replay_that_diverges_stops_labelling_that_episode():
    ep = _episode(1, ["pick up", "pick up"])
    ep["trajectory"][1]["observation"] = "something else"
    from promptevo.optim.reflect.expert import Problems

    problems = Problems()
    states = label_episode(make_task(), ep, problems, env_factory=ExpertPickupEnv)
    assert len(states) == 1 and "diverged" in problems.lines[0]


# -- the screen ------------------------------------------------------------------------------------------
def test_screen_keeps_a_child_that_fixes_states_and_drops_one_that_changes_nothing():
    states = [LabelledState(s, 0, "pick up the ball", "the ball is 1 step to your left", "turn left", agent="pick up")
              for s in range(1, 7)] + [LabelledState(8, 0, "pick up the ball", "the ball is right in front of you",
                                                     "pick up", agent="pick up")]
    chosen = choose_states(states, 4)
    assert len(chosen) == 2  # distinct states only: one disagreement, one agreement

    def decide(prompts, st):  # a scripted agent: follows the rule "turn left" when its prompt has it
        text = prompts.module("system").render()
        if "turn towards it" in text and "left" in st.observation:
            return "turn left", True
        return "pick up", True

    parent = PromptSet.of({"system": Prompt((Segment("role", "Pick up the ball."),))})
    good = PromptSet.of({"system": Prompt((Segment("role", "Pick up the ball; turn towards it first."),))})
    same = PromptSet.of({"system": Prompt((Segment("role", "Pick up the ball, please."),))})
    ok = screen(good, parent, chosen, decide)
    assert ok.keep and (ok.fixed, ok.broken) == (1, 0)
    no = screen(same, parent, chosen, decide)
    assert not no.keep and no.changed == 0 and "fixes 0" in no.reason


def test_the_screen_phase_reads_states_and_decisions_through_the_adapter():
    from contextlib import contextmanager
    from types import SimpleNamespace

    from promptevo.optim.adapter import Proposal, ProposalBatch
    from promptevo.optim.screen import screen_phase

    st = LabelledState(1, 0, "pick up the ball", "the ball is 1 step to your left", "turn left", agent="pick up")
    parent = PromptSet.of({"system": Prompt((Segment("role", "Pick up the ball."),))})
    child = PromptSet.of({"system": Prompt((Segment("role", "Pick up the ball; turn towards it first."),))})
    closed = []

    class Replaying:
        def screen_states(self, evidence, k):
            return evidence["states"][:k]

        @contextmanager
        def replay(self):
            cost = {"decisions": 0}

            def decide(prompts, s):
                cost["decisions"] += 1
                return ("turn left" if "towards" in prompts.module("system").render() else "pick up"), True
            yield decide, cost
            closed.append(True)

    batch = ProposalBatch([Proposal(child, "mutate", {}, {})])
    screen_phase(Replaying(), "filter", 4, parent, {"states": [st]}, batch)
    assert batch.proposals[0].screen["keep"] and batch.record["screen"]["decisions"] == 2 and closed == [True]
    empty = ProposalBatch([Proposal(child, "mutate", {}, {})])
    screen_phase(Replaying(), "filter", 4, parent, {"states": []}, empty)
    assert "no recorded states" in empty.log[0] and empty.proposals[0].screen is None
    # an adapter that cannot replay states (no expert, or no replay methods) is not screened
    plain = ProposalBatch([Proposal(child, "mutate", {}, {})])
    screen_phase(SimpleNamespace(), "filter", 4, parent, {}, plain)
    screen_phase(Replaying(), "off", 4, parent, {"states": [st]}, plain)
    assert plain.proposals[0].screen is None and "screen" not in plain.record


# -- in the loop ---------------------------------------------------------------------------------------------
def test_game_without_expert_still_optimizes_and_says_so(tmp_path):
    res = run(config(tmp_path, operators=["induce", "mutate"], generations=1))
    log = (res.run_dir / "run.log").read_text()
    assert "induce: no expert for this game; no child" in log
    assert res.report["rows"] and res.candidates[1].operator == "mutate"


def _rule_following_agent(messages, params):
    """A test double of an agent that follows an induced table literally (and of an optimizer that has
    nothing to say): it reads the rule lines of its prompt, finds the line naming the mission's thing and
    answers the mapped action."""
    text = messages[0]["content"] + "\n" + messages[-1]["content"]
    if '"edits"' in messages[0]["content"]:
        return '{"edits": []}'
    if '"attributions"' in messages[0]["content"]:
        return '{"attributions": [], "failure_modes": [], "proposals": []}'
    rules = {}
    for cond, action in re.findall(r"^- (.+): ([a-z ]+)\.$", text, flags=re.M):
        for value in re.findall(r'Last word is "(\w+)"', cond):
            rules[value] = action
    if rules:
        obs = messages[-1]["content"].split("Observation:\n", 1)[-1]
        line = next((ln for ln in obs.splitlines() if "ball" in ln), "")
        last = (re.findall(r"[a-z]+", line.lower()) or ["none"])[-1]
        return f"Line: {line}\nLast word: {last}\n<|ACTION|>{rules.get(last, 'pick up')}<|END|>"
    return "<|ACTION|>pick up<|END|>"


def test_induced_rule_is_screened_raced_promoted_and_reported_as_machine_written(tmp_path):
    from engine_doubles import CountingRunner

    from promptevo.optim.propose.skills import SkillLibrary

    bank = tmp_path / "rules.json"
    cfg = config(tmp_path, agent="robust-cot", init="plain", operators=["induce", "mutate"], generations=1, children=1,
                 episodes=8, evidence_episodes=4, validation_episodes=24, test_episodes=12, expert_episodes=12,
                 agent_options={"history": 1}, skills=str(bank))
    initial = PromptSet.of({"system": Prompt((Segment("role", "You pick up the ball."),
                                              Segment("format", "Mission: {mission}\n<|ACTION|>the action<|END|>")))})
    res = run(cfg, CountingRunner(env=TurnEnv), responder_fn=_rule_following_agent, initial_prompts=initial)
    c1 = next(c for c in res.candidates if c.id == "c1")
    assert c1.operator == "induce" and c1.status == "promoted" and c1.screen["keep"]
    edits = res.report["promoted_edits"]
    assert edits[0]["operator"] == "induce" and edits[0]["author"] == "machine"
    assert edits[0]["induced"]["heldout_accuracy"] > edits[0]["induced"]["majority_accuracy"]
    rows = {r["name"].split(" ")[0]: r for r in res.report["rows"]}
    assert rows["best"]["success_rate"] == 1.0 > rows["initial"]["success_rate"]
    owners = {r["segment"]: r for r in res.report["best_segments"]}
    assert owners["system.induced-rule"]["author"] == "machine"
    assert res.report["expert"][0]["induce"]["table"]["root"] == "1.last"
    # the rule bank keeps it, with who wrote it, the answer format it needs and its evidence
    (rule,) = SkillLibrary.load(bank).skills
    assert (rule.author, rule.operator, rule.status, rule.segment) == ("machine", "induce", "promoted", "induced-rule")
    assert "<|ACTION|>" in rule.format and rule.evidence["heldout_accuracy"] == 1.0
    assert rule.counters()["tasks"]["scripted-pickup"] == {"tried": 1, "accepted": 1, "promoted": 1}
    # and offers it to a run on another task, with its format
    other = config(tmp_path, agent="robust-cot", operators=["mutate"], generations=1, children=1, episodes=8,
                   evidence_episodes=4, validation_episodes=24, test_episodes=12, agent_options={"history": 1},
                   skills=str(bank), run="run2")
    res2 = run(other, CountingRunner(env=TurnEnv), responder_fn=_rule_following_agent, initial_prompts=initial,
               task=make_task(name="other-pickup"))
    c1 = next(c for c in res2.candidates if c.id == "c1")
    assert c1.operator == "skill" and c1.source == {"skill": rule.id, "author": "machine"}
    assert "Last word:" in c1.prompt_set().module("system").get("format")
    used = SkillLibrary.load(bank).skills[0]
    assert used.counters()["tasks"]["other-pickup"]["tried"] == 1


# -- the rules operator ----------------------------------------------------------------------------------
def test_rule_writer_drops_instance_specific_numbered_and_repeated_rules():
    from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
    from promptevo.optim.propose.rules import check_rule, write_rules

    cluster = {"agent": "go forward", "expert": "turn left", "count": 5, "with_line": 5,
               "patterns": [["a ... 2 steps left", 3], ["a ... 1 step left", 2]],
               "examples": [{"cite": "S1.0", "mission": "go to the red ball", "lines": ["a red ball 2 steps left"]}]}
    assert check_rule("If you see a red ball, go forward.", cluster, []).startswith("names a particular thing")
    assert check_rule("Turn left when it is 2 steps left.", cluster, []) == "names a number"
    assert check_rule("When the line ends with left, answer turn left.", cluster,
                      ["When the line ends with left, answer turn left!"]) == "same as a rule already tried"
    replies = iter(['{"rule": "If the red ball is on the left, turn left.", "format": null}',
                    '{"rule": "When the line about your target ends with left, answer turn left.", "format": '
                    '"Line: <the line>\\n<|ACTION|>the action<|END|>"}',
                    '{"rule": "When the line about your target ends with left, answer turn left.", "format": null}'])
    gw = Gateway(LLMConfig(model="fake/optimizer", cache_dir=None, num_retries=0))
    with ScriptedLLM.install(lambda messages: next(replies)):
        rnd = write_rules([cluster], gw, actions="turn left, turn right, go forward", tried=[], samples=3)
    assert [s.kept for s in rnd.samples] == [False, True, False]
    assert rnd.kept[0].format.endswith("<|END|>") and rnd.usage["calls"] == 3
    assert "red" not in (rnd.kept[0].rule + (rnd.kept[0].format or ""))
