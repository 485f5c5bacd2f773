"""Phase features and the phase-rooted rule, on a scripted two-phase game (a test double; nothing here
stands in for a measured result: the real ceilings come from benchmarks/induce_ceiling.py).

``CarryEnv``: take a coloured ball, then reach a coloured box. The only sign of the phase is the line
"You carry a ... ball". Half of the missions name the box first ("reach the blue box after you take the
red ball"). On odd seeds the player starts facing away (only a wall in view) until it turns.
"""

from __future__ import annotations

from engine_doubles import make_task

from promptevo.envs.base import ExpertError, StepResult, TextEnv
from promptevo.optim.propose.induce_phase import Guard, PhasedTable, guarded, induce_phased
from promptevo.optim.propose.induce import RuleTable
from promptevo.optim.reflect.expert import LabelledState, collect, states_of
from promptevo.optim.reflect.features import mission_slots, vocabulary
from promptevo.optim.reflect.follower import Explorer, choose_explorer, play, refine, success_rate
from promptevo.optim.reflect.phases import SlotOrder, carried, fit_fetch, fit_order, phase_features

BALLS = ("red", "green", "purple")
BOXES = ("blue", "grey", "yellow")


class CarryEnv(TextEnv):
    family = "test"
    ACTIONS = ["turn left", "go forward", "pick up", "drop"]

    def __init__(self, task=None):
        self._seed = 0

    valid_actions = property(lambda self: list(self.ACTIONS))
    default_action = property(lambda self: "turn left")
    max_steps = property(lambda self: 16)
    progression = property(lambda self: 1.0 if self._won else 0.0)

    @property
    def mission(self) -> str:
        ball, box = BALLS[self._seed % 3], BOXES[(self._seed // 3) % 3]
        if (self._seed // 2) % 2:
            return f"reach the {box} box after you take the {ball} ball"
        return f"take the {ball} ball, then reach the {box} box"

    def reset(self, seed: int):
        self._seed, self._t, self._won, self._carry = seed, 0, False, False
        self._away = seed % 2 == 1
        self._ball, self._box = 1 + seed % 3, 4 + seed % 3
        return self._obs(), {"mission": self.mission}

    def _steps(self, d: int) -> str:
        return "1 step forward" if d == 1 else f"{d} steps forward"

    def _obs(self) -> str:
        if self._away:
            return f"a wall {2 + self._t % 3} steps forward"
        lines = [f"You carry a {BALLS[self._seed % 3]} ball"] if self._carry else []
        lines.append(f"a wall {self._box + 2} steps forward")
        if not self._carry:
            lines.append(f"a {BALLS[self._seed % 3]} ball {self._steps(self._ball)}")
        lines.append(f"a {BOXES[(self._seed // 3) % 3]} box {self._steps(self._box)}")
        return "\n".join(lines)

    def step(self, action: str) -> StepResult:
        self._t += 1
        if action == "turn left":
            self._away = not self._away
        elif action == "go forward" and not self._away:
            if self._carry or self._ball > 1:
                self._ball, self._box = max(1, self._ball - 1), max(1, self._box - 1)
        elif action == "pick up" and not self._away and not self._carry and self._ball == 1:
            self._carry = True
        elif action == "drop" and self._carry and self._box == 1 and not self._away:
            self._won = True
        done = self._won or self._t >= self.max_steps
        return StepResult(self._obs(), float(self._won), self._won, done and not self._won,
                          {"valid_action": True, "executed_action": action, "success": self._won})

    def expert_action(self) -> str | None:
        if self._won:
            raise ExpertError("the episode is over")
        if self._away:
            return "turn left"
        if not self._carry:
            return "pick up" if self._ball == 1 else "go forward"
        return "drop" if self._box == 1 else "go forward"

    def instructions(self) -> str:
        return "take the ball, then reach the box"


def _factory(task):
    return CarryEnv()


TASK = make_task(name="carry")


def _states(n: int = 24) -> list[LabelledState]:
    ev = collect(TASK, [], list(range(n)), env_factory=_factory)
    assert ev["available"]
    return states_of(ev)


def test_second_slot_pronoun_and_order_word():
    states = _states()
    vocab = vocabulary(s.observation for s in states)
    assert "you" in vocab.leading
    assert mission_slots("reach the blue box after you take the red ball", vocab) == [("blue", "box"), ("red", "ball")]
    order = fit_order(states, vocab)
    assert order.word == "after" and order.accuracy == 1.0
    assert order.ordered("reach the blue box after you take the red ball", [("blue", "box"), ("red", "ball")]) == [2, 1]
    assert order.ordered("take the red ball, then reach the blue box", [("red", "ball"), ("blue", "box")]) == [1, 2]


def test_phase_features_read_the_carried_line():
    states = _states()
    vocab = vocabulary(s.observation for s in states)
    slots = [("red", "ball"), ("blue", "box")]
    obs = "You carry a red ball\na wall 6 steps forward\na blue box 2 steps forward"
    assert carried(obs, slots, vocab) == "1"
    assert carried("a wall 3 steps forward", slots, vocab) == "-"
    f = phase_features(obs, "take the red ball, then reach the blue box", vocab, SlotOrder(), ["1 step forward"])
    assert f["phase"] == "1" and f["a.rest"] == "a ... 2 steps forward" and f["at:1 step forward"] == "-"
    # the reversed mission: its carried slot is the second, and the phase is the same
    f2 = phase_features(obs.replace("red ball", "red ball"), "reach the blue box after you take the red ball", vocab,
                        SlotOrder("after"), ["1 step forward"])
    assert f2["phase"] == "1" and f2["a.rest"] == "a ... 2 steps forward"


def test_induction_recovers_a_phase_rooted_policy_that_solves_the_game():
    states = _states()
    ind = induce_phased(states)
    table = ind.table
    assert isinstance(table, PhasedTable) and set(table.tables) >= {"0", "1"}
    # the phases' tables differ: pick up in phase 0, drop in phase 1
    acts = {p: {b for b in t.branches.values() if isinstance(b, str)} | {t.default} for p, t in table.tables.items()}
    assert "pick up" in str(table.tables["0"].to_dict()) and "drop" in str(table.tables["1"].to_dict()), acts
    seeds = list(range(100, 140))
    rows = play(TASK, table, Explorer("turn left"), ind.vocab, seeds, env_factory=_factory)
    assert success_rate(rows) == 1.0
    assert PhasedTable.from_dict(table.to_dict()).to_dict() == table.to_dict()


def test_looping_explorer_is_rejected_by_the_simulation():
    states = _states()
    ind = induce_phased(states)
    chosen, scores = choose_explorer(TASK, ind.table, ind.vocab, CarryEnv.ACTIONS, list(range(200, 220)),
                                     env_factory=_factory)
    by = {s["explorer"]: s["success"] for s in scores}
    assert by["go forward"] < 0.6  # facing away, going forward never shows the ball: half the seeds loop
    assert chosen.action == "turn left" and by[chosen.describe()] == 1.0


def test_refine_stops_when_the_follower_solves_every_seed():
    states = _states()

    def fit(pool):
        ind = induce_phased(pool)
        return ind.table, ind.vocab

    ref = refine(TASK, fit, states, CarryEnv.ACTIONS, list(range(300, 310)), env_factory=_factory, rounds=3)
    assert len(ref.rounds) == 1 and ref.rounds[0]["success"] == 1.0


def test_guard_overrides_the_table_when_something_else_is_ahead():
    table = RuleTable("a.last", {"forward": "go forward"}, "go forward")
    guards = [Guard("1 step forward", "go forward", "turn left")]
    feats = {"a.line": "yes", "a.last": "forward", "at:1 step forward": "other"}
    assert guarded(table, guards, feats) == "turn left"
    assert guarded(table, guards, {**feats, "at:1 step forward": "a"}) == "go forward"


def test_no_fetch_without_an_unnamed_carried_thing():
    states = _states()
    vocab = vocabulary(s.observation for s in states)
    assert fit_fetch(states, vocab) is None


def test_phase_that_never_occurs_and_unsplittable_missions_get_one_line_each():
    states = [s for s in _states() if "You carry" not in s.observation]  # the expert never carries
    odd = [LabelledState(900, 0, "do it", "a wall 2 steps forward", "turn left")]
    ind = induce_phased(states + odd)
    assert ind.table is not None
    text = " ".join(ind.notes)
    assert "phase 1 never occurs" in text
    assert "name no thing" in text


# -- rendering, the operator, compliance per phase -------------------------------------------------------
def _phrases():
    from promptevo.optim.propose.render_table import load_phrases

    return load_phrases()


def test_rendering_asks_for_the_phase_first_then_the_phase_fields():
    from promptevo.optim.propose.render_phase import render_phase

    ind = induce_phased(_states())
    rule, fmt, fields = render_phase(ind.table, _phrases(), Explorer("turn left"))
    assert [f.feature for f in fields][:3] == ["carry", "target", "a.line"]
    assert fmt.index("Carrying:") < fmt.index("Target:") < fmt.index("Line:") < fmt.index("<|ACTION|>")
    assert 'the word "after"' in fmt  # the fitted order word, from the data
    assert "When Carrying is nothing:" in rule and "When you carry a thing your mission names:" in rule
    assert "pick up" in rule and "drop" in rule and 'Line is "none": turn left.' in rule
    for word in ("ball", "box", "red", "blue"):  # no game word in the rendering: only placeholders
        assert word not in rule and word not in fmt


def _reply(truth: dict, fields, action: str, wrong: str | None = None) -> str:
    out = [f"{f['label']}: {'zzz' if f['label'] == wrong else truth[f['label']]}" for f in fields]
    return "\n".join(out + [f"<|ACTION|>{action}<|END|>"])


def test_compliance_per_phase_names_the_first_wrong_field():
    from promptevo.optim.propose.render_phase import render_phase
    from promptevo.optim.reflect.phase_compliance import analyse_phased, step_truth

    ind = induce_phased(_states())
    _, _, pf = render_phase(ind.table, _phrases(), Explorer("turn left"))
    fields = [{"label": f.label, "feature": f.feature, "values": f.values} for f in pf]
    at_values = _phrases()["phase"]["at_values"]
    env = CarryEnv()
    obs, info = env.reset(4)
    steps = []
    for t in range(12):
        feats, truth = step_truth(obs, info["mission"], ind.table, ind.vocab, fields, at_values)
        action = env.expert_action()
        wrong = "Carrying" if feats["phase"] == "1" else None  # the agent misreads what it carries in phase 1
        steps.append({"t": t, "observation": obs, "reply": _reply(truth, fields, action, wrong), "action": action,
                      "parsed": True})
        r = env.step(action)
        obs = r.observation
        if r.terminated:
            break
    comp = analyse_phased([{"seed": 4, "mission": info["mission"], "trajectory": steps}], ind.table, ind.vocab,
                          fields, Explorer("turn left"), at_values)
    assert comp["phases"]["0"]["compliance"] == 1.0
    assert comp["phases"]["1"]["perception"] == comp["phases"]["1"]["n"] > 0
    assert comp["phases"]["1"]["first_wrong_field"] == {"Carrying": comp["phases"]["1"]["n"]}


def test_compile_phase_operator_proposes_one_machine_written_child():
    from types import SimpleNamespace

    from promptevo.optim.adapter import ProposalContext
    from promptevo.optim.propose.registry import OperatorContext, get_operator
    from promptevo.segments import Prompt, PromptSet, Segment

    game = SimpleNamespace(task=TASK, env_factory=_factory, opt_gw=None, env_instructions="",
                           cfg=SimpleNamespace(seed=0, skills=None, agent_max_tokens=256, model=None),
                           warn_once=lambda key, msg: None)
    ctx = OperatorContext(proposal=ProposalContext(generation=1, mode="mutate", n=2, history=[], tried=set()), game=game)
    ev = collect(TASK, [], list(range(24)), env_factory=_factory)
    parent = PromptSet.of({"system": Prompt((Segment("role", "You carry things."),
                                             Segment("format", "Mission: {mission}\n<|ACTION|>the action<|END|>")))})
    props = get_operator("compile-phase").propose(parent, {"expert": ev}, ctx, 2)
    assert len(props) == 1, ctx.log
    p = props[0]
    assert p.operator == "compile-phase" and p.source["author"] == "machine"
    system = p.prompts.module("system")
    assert "When Carrying is nothing:" in system.get("induced-rule") and "Carrying:" in system.get("format")
    assert "ball" in system.get("slot-words")
    grammar = system.get("answer-grammar")
    assert "Carrying: nothing | {slot1} | {slot2} | something else" in grammar
    assert "Line: none | a {slot1} <line> | a {slot2} <line>" in grammar and grammar.endswith("<|ACTION|>")
    assert p.source["induce"]["simulated"]["success"] == 1.0
    assert get_operator("compile-phase").propose(parent, {"expert": ev}, ctx, 2) == []  # one child per generation


def test_compile_phase_without_an_expert_says_so():
    from types import SimpleNamespace

    from promptevo.optim.adapter import ProposalContext
    from promptevo.optim.propose.registry import OperatorContext, get_operator
    from promptevo.segments import Prompt, PromptSet, Segment

    game = SimpleNamespace(task=TASK, env_factory=_factory, cfg=SimpleNamespace(seed=0), warn_once=lambda k, m: None)
    ctx = OperatorContext(proposal=ProposalContext(generation=1, mode="mutate", n=1, history=[], tried=set()), game=game)
    parent = PromptSet.of({"system": Prompt((Segment("format", "<|ACTION|>x<|END|>"),))})
    assert get_operator("compile-phase").propose(parent, {"expert": {"available": False}}, ctx, 1) == []
    assert ctx.log == ["compile-phase: no expert for this game; no child"]


class RaisingCarryEnv(CarryEnv):
    """CarryEnv whose expert crashes once the ball is carried."""

    def expert_action(self):
        if self._carry:
            raise RuntimeError("planner crashed")
        return super().expert_action()


def test_an_expert_that_raises_mid_episode_gets_one_line_and_the_rest_is_fitted():
    states = _states()
    env_factory = lambda task: RaisingCarryEnv()  # noqa: E731

    def fit(pool):
        ind = induce_phased(pool)
        return ind.table, ind.vocab

    half = [s for s in states if "You carry" not in s.observation]  # phase 1 never labelled either
    ref = refine(TASK, fit, half, CarryEnv.ACTIONS, list(range(400, 406)), env_factory=env_factory, rounds=1)
    assert ref.problem and ref.problem.startswith("the expert could not label") and "RuntimeError: planner crashed" in ref.problem
    assert ref.table is not None and "0" in ref.table.tables


def test_the_grammar_offers_only_the_lines_naming_the_target_written():
    from promptevo.agents.answer_fields import grammar_of

    spec = "\n".join(["Carrying: nothing | red ball | blue box | something else", "Target: red ball | blue box",
                      "Line: none | a red ball <line> | a blue box <line>",
                      "Last word: forward | left | right | none | <last word>",
                      "At 1 step forward: target | something else | nothing", "<|ACTION|>"])
    g = grammar_of(spec, 'action ::= "go forward"', "a wall 2 steps left\na blue box 3 steps forward\na red ball 1 step left")
    root = g.splitlines()[0]
    # after "Target: red ball" only the red ball's line (or none); its last word is written by the grammar
    assert '"Target: " "red ball" "\\n" "Line: " "a red ball 1 step left" "\\n" "Last word: " "left"' in root
    assert '"Target: " "red ball" "\\n" "Line: " "a blue box' not in root
    assert '"Target: " "blue box" "\\n" "Line: " "none" "\\n" "Last word: " f3n' in root and 'f3n ::= "none"' in g


def test_an_at_field_is_bound_to_what_stands_there():
    from promptevo.agents.answer_fields import grammar_of

    spec = "\n".join(["Target: red ball | blue box", "Line: none | a red ball <line> | a blue box <line>",
                      "At 1 step forward: target | something else | nothing | <at 1 step forward>", "<|ACTION|>"])
    g = grammar_of(spec, 'action ::= "go forward"', "a wall 1 step forward\na blue box 2 steps left and 1 step forward")
    root = g.splitlines()[0]
    assert root.count('"At 1 step forward: " "something else"') == 3  # the wall, whatever the target
    g2 = grammar_of(spec, 'action ::= "go forward"', "a red ball 1 step forward")
    assert '"Line: " "a red ball 1 step forward" "\\n" "At 1 step forward: " "target"' in g2.splitlines()[0]
    assert '"Target: " "blue box" "\\n" "Line: " "none" "\\n" "At 1 step forward: " "something else"' in g2.splitlines()[0]


def test_stateless_explorers_never_count_steps():
    from promptevo.optim.reflect.follower import candidates

    full = candidates(["turn left", "go forward"], ["turn left", "go forward"], ["1 step forward"])
    flat = candidates(["turn left", "go forward"], ["turn left", "go forward"], ["1 step forward"], stateless=True)
    assert any(e.turns for e in full) and not any(e.turns for e in flat)
    assert Explorer("go forward", 0, "turn left", "1 step forward") in flat


def test_a_constant_explorer_is_folded_into_the_key_when_every_phase_has_its_row():
    from promptevo.optim.propose.induce import Split
    from promptevo.optim.propose.render_phase import fold_of, render_phase

    t0 = RuleTable("a.last", {"forward": "go forward", "left": "turn left", "right": "turn right"}, "go forward")
    t1 = RuleTable("a.last", {"forward": Split("a.rest", "a ... 2 steps forward", "drop", "go forward"),
                              "right": Split("at:1 step right", "a", "go forward", "turn right")}, "go forward")
    table = PhasedTable(SlotOrder(), ("1 step right",), {"0": t0, "1": t1}, "go forward")
    assert fold_of(table, Explorer("turn right")) == ("a.last", "right")
    assert fold_of(table, Explorer("turn left")) is None  # phase 1 has no row giving it
    assert fold_of(table, Explorer("turn right", 2, "go forward")) is None  # counts steps
    rule, fmt, fields = render_phase(table, _phrases(), Explorer("turn right"))
    assert rule.count('Line is "none": write "Last word: right"') == 2 and "right if Line is none" in fmt
    assert next(f for f in fields if f.feature == "a.last").fold == "right"
