"""The agent executes the rule: compliance analysis, the compile operators' pieces (answer grammar, mission
slots, demonstrations) and the "no line" explorer chosen by simulation.

The LLM here is a test double (ScriptedLLM); nothing in this file stands in for a measured result.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace as S2

import pytest
from engine_doubles import CountingRunner, config, run
from test_expert import TurnEnv, _rule_following_agent

from promptevo.agents.answer_fields import (
    GENERIC_SLOTS,
    AnswerSpecError,
    fill_slots,
    grammar_of,
    mission_things,
    parse_slot_words,
    parse_spec,
    read_fields,
    spec_text,
)
from promptevo.optim.propose.compile_table import demonstrations
from promptevo.optim.propose.induce import RuleTable, induce
from promptevo.optim.propose.render_table import Field
from promptevo.optim.reflect.compliance import analyse, classify, true_values
from promptevo.optim.reflect.expert import collect, states_of
from promptevo.optim.reflect.features import defined, state_features, vocabulary
from promptevo.optim.reflect.follower import Explorer, choose_explorer, play, success_rate
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import load_task, make_env

# -- compliance ---------------------------------------------------------------------------------------
MISSION = "go to the red ball"
IN_VIEW = "a wall 3 steps forward\na red ball 1 step left and 2 steps forward"
OUT_OF_VIEW = "a wall 2 steps forward\na wall 1 step left"
VOCAB = vocabulary([IN_VIEW, OUT_OF_VIEW, "a wall 4 steps forward\na blue key 1 step right",
                    "a wall 1 step right\na grey box 2 steps left"])
TABLE = RuleTable("1.last", {"forward": "go forward", "left": "turn left", "right": "turn right"}, "go forward",
                  "turn left")
FIELDS = [Field("Line", "the line", None, "1.line"),
          Field("Last word", "its last word", ["forward", "left", "right", "none"], "1.last")]
BALL = "a red ball 1 step left and 2 steps forward"


def reply(line: str, last: str, action: str) -> str:
    return f"Line: {line}\nLast word: {last}\n<|ACTION|>{action}<|END|>"


def step(obs: str, text: str, action: str, t: int = 0, **extra) -> dict:
    return {"t": t, "observation": obs, "reply": text, "action": action, "executed_action": action, "parsed": True,
            **extra}


CASES = [  # (step, expert, class, kind)
    (step(IN_VIEW, reply(BALL, "forward", "go forward"), "go forward"), "go forward", "correct", None),
    (step(OUT_OF_VIEW, reply("none", "none", "turn left"), "turn left"), "turn left", "correct", None),
    (step(IN_VIEW, reply("a wall 3 steps forward", "forward", "go forward"), "go forward"), "go forward",
     "perception", "another line"),
    (step(OUT_OF_VIEW, reply("a wall 2 steps forward", "forward", "go forward"), "go forward"), "turn left",
     "perception", "line while none"),
    (step(IN_VIEW, reply("none", "none", "turn left"), "turn left"), "go forward", "perception",
     "none while visible"),
    (step(IN_VIEW, reply(BALL, "left", "turn left"), "turn left"), "go forward", "perception", "wrong word"),
    (step(IN_VIEW, reply(BALL, "forward", "turn right"), "turn right"), "go forward", "lookup", None),
    (step(IN_VIEW, reply(BALL, "forward", "go forward"), "go forward"), "turn left", "table", None),
    (step(IN_VIEW, "<|ACTION|>go forward<|END|>", "go forward"), "go forward", "format", "field 'Line' missing"),
    (step(IN_VIEW, reply(BALL, "ahead", "go forward"), "go forward"), "go forward", "format",
     "'Last word' value outside its values"),
    (step(IN_VIEW, "Line: a red ball 1 st", "go forward", truncated=True), "go forward", "format",
     "reply cut by the token cap"),
    (step(IN_VIEW, "I think", "go forward", parsed=False), "go forward", "format", "no parsable action"),
]


def test_true_values_come_from_the_observation_and_mission():
    assert true_values(IN_VIEW, MISSION, VOCAB, TABLE, FIELDS) == {"Line": BALL, "Last word": "forward"}
    assert true_values(OUT_OF_VIEW, MISSION, VOCAB, TABLE, FIELDS) == {"Line": "none", "Last word": "none"}


@pytest.mark.parametrize("st, expert, cls, kind", CASES)
def test_compliance_classifies_each_scripted_reply_exactly(st, expert, cls, kind):
    r = classify(st, MISSION, VOCAB, TABLE, FIELDS, explorer=Explorer("turn left"), expert=expert)
    assert (r["class"], r.get("kind")) == (cls, kind)
    assert r["agent"] == st["action"] and r["expert"] == expert


def test_compliance_of_a_candidate_counts_cites_and_first_errors():
    episodes = [{"seed": 7, "mission": MISSION, "trajectory": [dict(c[0], t=i) for i, c in enumerate(CASES)]},
                {"seed": 8, "mission": MISSION, "trajectory": [dict(CASES[0][0], t=0)]}]
    experts = {(7, i): c[1] for i, c in enumerate(CASES)}
    a = analyse(episodes, VOCAB, TABLE, FIELDS, explorer=Explorer("turn left"), experts=experts)
    assert a["decisions"] == len(CASES) + 1
    assert (a["correct"], a["perception"], a["lookup"], a["table"], a["format"]) == (3, 4, 1, 1, 4)
    assert a["compliance"] == round(4 / 13, 4)  # followed the table: correct + table errors
    assert a["first_error"] == {"7": 2, "8": None}
    assert a["cites"]["lookup"] == ["S7.6"] and a["cites"]["table"] == ["S7.7"]
    assert a["kinds"]["perception: another line"] == 1 and a["kinds"]["format: reply cut by the token cap"] == 1
    assert a["owners"]["perception"] == "format" and a["owners"]["lookup"] == "induced-rule"
    assert a["by_view"]["out of view"]["n"] == 2


# -- answer grammar and fields -----------------------------------------------------------------------------
def test_answer_spec_round_trips_and_compiles_to_a_grammar():
    spec = spec_text([("Line", None), ("Last word", ["forward", "left", "none"])])
    assert spec == "Line: <text>\nLast word: forward | left | none\n<|ACTION|>"
    assert parse_spec(spec) == [("Line", None), ("Last word", ["forward", "left", "none"])]
    g = grammar_of(spec, 'action ::= "go forward" | "turn left"')
    assert g.startswith('root ::= "Line: " f0 "\\n" "Last word: " f1 "\\n" "<|ACTION|>" action "<|END|>"')
    assert 'f1 ::= "forward" | "left" | "none"' in g
    for bad in ("Line: <text>", "no colon here\n<|ACTION|>", "Last word: |\n<|ACTION|>", ""):
        with pytest.raises(AnswerSpecError):
            parse_spec(bad)
    llama = pytest.importorskip("llama_cpp")
    assert llama.LlamaGrammar.from_string(g, verbose=False) is not None


def test_a_line_field_that_must_name_the_missions_thing_is_filled_per_episode():
    from promptevo.agents.base import answer_grammar
    from promptevo.envs.base import ActionSpace

    prompt = Prompt((Segment("answer-grammar", "Line: none | a {slot1} <text>\nLast word: left | none\n<|ACTION|>"),
                     Segment("slot-words", "red, ball, blue, key")))
    g = answer_grammar(prompt, ActionSpace(["turn left", "go forward"]), None, "go to the blue key")
    assert 'f0y ::= "a blue key " [^\\n<]{1,100}' in g and 'f0n ::= "none"' in g
    assert 'f1n ::= "none"' in g and 'f1y ::= "left"' in g  # "none" after a none line, a word after a line
    assert answer_grammar(Prompt((Segment("answer-grammar", "broken"),)), ActionSpace(["turn left"]), None, "x")


def test_a_line_field_closed_to_the_observation_offers_only_its_lines_naming_the_thing():
    from promptevo.agents.base import answer_grammar
    from promptevo.envs.base import ActionSpace

    prompt = Prompt((Segment("answer-grammar", "Line: none | a {slot1} <line>\nLast word: left | none\n<|ACTION|>"),
                     Segment("slot-words", "red, ball, blue, key")))
    space = ActionSpace(["turn left", "go forward"])
    g = answer_grammar(prompt, space, None, "go to the red ball", IN_VIEW)
    assert 'f0y ::= "a red ball 1 step left and 2 steps forward"\n' in g
    assert 'f0 ::= "none"\n' in answer_grammar(prompt, space, None, "go to the red ball", OUT_OF_VIEW)
    # no observation (e.g. a grammar built outside a step): the line is free text after the thing's name
    assert 'f0y ::= "a red ball " [^\\n<]{1,100}' in answer_grammar(prompt, space, None, "go to the red ball")
    llama = pytest.importorskip("llama_cpp")
    assert llama.LlamaGrammar.from_string(g, verbose=False) is not None


def test_a_folded_field_holds_its_value_after_a_none_line_in_grammar_truth_and_rule():
    from promptevo.agents.base import answer_grammar
    from promptevo.envs.base import ActionSpace
    from promptevo.optim.propose.render_table import Rendering, fold_key, grammar_fields, load_phrases, render_fields

    prompt = Prompt((Segment("answer-grammar", "Line: none | a {slot1} <line>\nLast word: forward | left | right | "
                                               "left (if none)\n<|ACTION|>"),
                     Segment("slot-words", "red, ball, blue, key")))
    space = ActionSpace(["turn left", "go forward"])
    g = answer_grammar(prompt, space, None, "go to the red ball", IN_VIEW)
    assert 'f1n ::= "left"\n' in g and 'f1y ::= "forward" | "left" | "right"\n' in g
    assert 'f1 ::= "left"\n' in answer_grammar(prompt, space, None, "go to the red ball", OUT_OF_VIEW)
    # the rule's key: the row that gives the constant explorer's action; none for a counting explorer
    assert fold_key(TABLE, Explorer("turn left")) == "left"
    assert fold_key(TABLE, Explorer("turn left", 3, "go forward")) is None
    assert fold_key(TABLE, Explorer("pick up")) is None
    fields, rule = render_fields(TABLE, load_phrases(), Rendering(closed=True, explorer=Explorer("turn left"),
                                                                  fold=True))
    last = next(f for f in fields if f.feature == "1.last")
    assert last.fold == "left" and "none" not in last.values and "left if Line is none" in last.ask
    assert rule.splitlines()[1] == '- Line is "none": write "Last word: left" and use its row below.'
    assert "No line" not in rule
    assert grammar_fields(fields, [], VOCAB, slots=False)[1] == ("Last word", ["forward", "left", "right",
                                                                               "left (if none)"])
    # truth and compliance read the fold: "Last word: left" is right where no line names the ball
    assert true_values(OUT_OF_VIEW, MISSION, VOCAB, TABLE, fields) == {"Line": "none", "Last word": "left"}
    ok = classify(step(OUT_OF_VIEW, reply("none", "left", "turn left"), "turn left"), MISSION, VOCAB, TABLE, fields,
                  explorer=Explorer("turn left"), expert="turn left")
    assert ok["class"] == "correct"
    bad = classify(step(OUT_OF_VIEW, reply("none", "left", "go forward"), "go forward"), MISSION, VOCAB, TABLE,
                   fields, explorer=Explorer("turn left"), expert="turn left")
    assert bad["class"] == "lookup"
    llama = pytest.importorskip("llama_cpp")
    assert llama.LlamaGrammar.from_string(g, verbose=False) is not None


def test_a_bound_field_gets_only_the_copied_lines_own_word_from_the_grammar():
    from promptevo.agents.base import answer_grammar
    from promptevo.envs.base import ActionSpace
    from promptevo.optim.propose.render_table import Rendering, grammar_fields, load_phrases, render_fields

    prompt = Prompt((Segment("answer-grammar", "Line: none | a {slot1} <line>\nLast word: forward | left | right | "
                                               "left (if none) | <last word>\n<|ACTION|>"),
                     Segment("slot-words", "red, ball, blue, key")))
    space = ActionSpace(["turn left", "go forward"])
    two = IN_VIEW + "\na red ball 2 steps right"
    g = answer_grammar(prompt, space, None, "go to the red ball", two)
    # the two-part line's last word is "forward" (never its first direction word "left")
    assert ('("Line: " "a red ball 1 step left and 2 steps forward" "\\n" "Last word: " "forward" "\\n")' in g)
    assert '("Line: " "a red ball 2 steps right" "\\n" "Last word: " "right" "\\n")' in g
    assert 'f1n ::= "left"\n' in g and "f0y" not in g
    # out of view there is no line to bind: the folded value, as compile-fold
    assert 'f1 ::= "left"\n' in answer_grammar(prompt, space, None, "go to the red ball", OUT_OF_VIEW)
    llama = pytest.importorskip("llama_cpp")
    grammar = llama.LlamaGrammar.from_string(g, verbose=False)
    assert grammar is not None
    # the words after the name: one of the field's values, else "other"
    after = Prompt((Segment("answer-grammar", "Line: none | a {slot1} <line>\nAfter the name: 1 step forward | other "
                                              "| none | <words after the name>\n<|ACTION|>"),
                    Segment("slot-words", "red, ball, blue, key")))
    g2 = answer_grammar(after, space, None, "pick up the red ball", "a red ball 1 step forward\na red ball 2 steps left")
    assert '"a red ball 1 step forward" "\\n" "After the name: " "1 step forward"' in g2
    assert '"a red ball 2 steps left" "\\n" "After the name: " "other"' in g2
    assert llama.LlamaGrammar.from_string(g2, verbose=False) is not None
    fields, _ = render_fields(TABLE, load_phrases(), Rendering(closed=True, explorer=Explorer("turn left"), fold=True))
    assert grammar_fields(fields, [], VOCAB, slots=False, lines=True, bind=True)[1][1][-1] == "<last word>"
    assert "<last word>" not in grammar_fields(fields, [], VOCAB, slots=False, lines=True)[1][1]


def test_a_flat_rendering_writes_one_condition_per_row_where_the_shape_implies_the_key():
    from promptevo.optim.propose.induce import Split
    from promptevo.optim.propose.render_table import Rendering, load_phrases, render_fields

    split = Split("1.rest", "a ... 1 step forward", "pick up", "go forward")
    table = RuleTable("1.last", {"forward": split, "left": "turn left", "right": "turn right"}, "go forward",
                      "turn left")
    how = Rendering(closed=True, explorer=Explorer("turn left"), fold=True)
    _, nested = render_fields(table, load_phrases(), how)
    assert '- Last word is "forward" and After the name is "1 step forward": pick up.' in nested.splitlines()
    _, flat = render_fields(table, load_phrases(), Rendering(closed=True, explorer=Explorer("turn left"), fold=True,
                                                             flat=True))
    rows = flat.splitlines()
    assert rows[0].endswith("the first row that matches gives it.")
    assert rows.index('- After the name is "1 step forward": pick up.') + 1 == rows.index(
        '- Last word is "forward": go forward.')
    assert not any("Last word is" in r and "After the name is" in r for r in rows) and "otherwise" not in flat
    # a shape that does not end with the key's value keeps both conditions (no implication to rely on)
    odd = RuleTable("1.last", {"forward": Split("1.rest", "a ... 1 step left", "pick up", "go forward")}, "go forward")
    _, kept = render_fields(odd, load_phrases(), Rendering(closed=True, flat=True))
    assert '- Last word is "forward" and After the name is "1 step left": pick up.' in kept.splitlines()


def test_thing_words_come_from_env_resets_too_and_never_from_a_missions_verb():
    from types import SimpleNamespace as S

    from promptevo.optim.reflect.features import thing_words

    expert = [S(mission=MISSION, observation=IN_VIEW), S(mission="go to the blue key", observation=OUT_OF_VIEW)]
    assert "yellow" not in thing_words(expert, VOCAB)
    resets = [S(mission="go to the yellow key", observation="a wall 2 steps forward\na yellow key 1 step left")]
    words = thing_words(expert + resets, VOCAB)
    assert {"yellow", "red", "ball", "blue", "key"} <= words
    assert "wall" not in words and "left" not in words and "step" not in words
    doors = vocabulary([OUT_OF_VIEW, "a red door 1 step left\na wall 2 steps forward\na blue key 1 step right"])
    words = thing_words([S(mission="open the red door", observation="a open door 2 steps left")], doors)
    assert words == {"red", "door"}  # "a open door": the mission's verb is never a thing's word


def test_reset_states_read_missions_and_first_observations_of_training_seeds(goto_fit):
    from promptevo.optim.propose.compile_table import reset_states

    task, train, _states, _ind = goto_fit
    game = S2(task=task, env_factory=make_env)
    got = reset_states(game, train[:5])
    assert len(got) == 5 and all(r.mission.startswith("go to") and r.observation for r in got)


def test_read_fields_reads_what_the_agent_wrote():
    got = read_fields("**Line:** A red ball 1 step left.\nLast word: `forward`<|ACTION|>go forward<|END|>",
                      ["Line", "Last word", "Door"])
    assert got == {"Line": "a red ball 1 step left", "Last word": "forward", "Door": None}


# -- mission slots ----------------------------------------------------------------------------------------
def test_slot_filler_names_the_missions_things_and_keeps_generic_text_with_one_warning(caplog):
    words = parse_slot_words("red, ball, blue, key, purple")
    assert mission_things("put the red ball next to the blue key", words) == ["red ball", "blue key"]
    assert fill_slots("Find {slot1}, then {slot2}.", "put the red ball next to the blue key", words) == \
        "Find the red ball, then the blue key."
    with caplog.at_level(logging.WARNING, logger="promptevo.agents.answer_fields"):
        for _ in range(3):
            assert fill_slots("Find {slot1}.", "xyzzy plugh", words) == f"Find {GENERIC_SLOTS[0]}."
    assert len([r for r in caplog.records if "slot filler" in r.getMessage()]) == 1


# -- explorer and demonstrations on a real game (the BabyAI expert, no LLM) ----------------------------
@pytest.fixture(scope="module")
def goto_fit():
    task = load_task("goto")
    train = task.seed_list("train")
    ev = collect(task, [], train[-30:])
    states = states_of(ev)
    ind = induce(states)
    assert ind.useful, ind.reason
    return task, train, states, ind


def test_an_explorer_that_loops_is_rejected_by_simulation(goto_fit):
    task, train, _states, ind = goto_fit
    seeds = train[:10]
    chosen, scores = choose_explorer(task, ind.table, ind.vocab, ["turn left", "turn right", "go forward"], seeds,
                                     env_factory=make_env)
    by = {s["explorer"]: s["success"] for s in scores}
    assert by["go forward"] < max(by.values())  # walks into the wall and stays there
    assert chosen.describe() != "go forward" and by[chosen.describe()] >= max(by.values()) - 0.02
    assert success_rate(play(task, ind.table, chosen, ind.vocab, seeds, env_factory=make_env)) > \
        success_rate(play(task, ind.table, Explorer("go forward"), ind.vocab, seeds, env_factory=make_env))


def test_demonstrations_cover_every_row_of_the_table(goto_fit):
    _task, _train, states, ind = goto_fit
    explorer = Explorer("turn left")
    chosen = demonstrations(states, ind.table, explorer, ind.vocab, 10)
    rows = set()
    for s in chosen:
        feats = state_features(s.observation, s.mission, ind.vocab)
        assert (explorer.action if not defined(feats) else ind.table.predict(feats)) == s.expert
        rows.add("none" if not defined(feats) else feats[ind.table.root])
    assert rows == set(ind.table.branches) | {"none"}
    assert len(chosen) == len(rows)  # one per row, no more


# -- the compile operators in a loop (test double) ------------------------------------------------------------
@pytest.mark.parametrize("operator, segment", [("compile-grammar", "answer-grammar"), ("compile-slots", "slot-words"),
                                               ("compile-demos", "induced-examples"),
                                               ("compile-lines", "answer-grammar"),
                                               ("compile-fold", "answer-grammar"),
                                               ("compile-bind", "answer-grammar"),
                                               ("compile-key", "answer-grammar")])
def test_compile_operator_child_carries_its_rendering_and_compliance_is_reported(tmp_path, operator, segment):
    cfg = config(tmp_path, agent="robust-cot", init="plain", operators=[operator], generations=1, children=1,
                 episodes=8, evidence_episodes=4, validation_episodes=12, test_episodes=6, expert_episodes=12,
                 agent_options={"history": 1})
    initial = PromptSet.of({"system": Prompt((Segment("role", "You pick up the ball."),
                                              Segment("format", "Mission: {mission}\n<|ACTION|>the action<|END|>")))})
    res = run(cfg, CountingRunner(env=TurnEnv), responder_fn=_rule_following_agent, initial_prompts=initial)
    c1 = next(c for c in res.candidates if c.id == "c1")
    assert c1.operator == operator and c1.source["author"] == "machine"
    system = c1.prompt_set().module("system")
    assert system.get("induced-rule") and system.get(segment)
    comp = res.report.get("compliance") or {}
    assert comp, "report.json has a compliance section"
    if operator in ("compile-lines", "compile-fold", "compile-bind", "compile-key"):
        assert "<line>" in system.get("answer-grammar")
    if operator in ("compile-fold", "compile-bind", "compile-key"):
        assert "(if none)" in system.get("answer-grammar")
    assert ("<last word>" in (system.get("answer-grammar") or "")) == (operator in ("compile-bind", "compile-key"))
    assert c1.source["induce"]["rendering"]["flat"] == (operator == "compile-key")
    cost = res.report["cost_per_call"]
    assert cost["initial"]["calls"] > 0 and cost["best"]["tokens_per_call"] > 0 and cost["limit"] == 1.5


def test_a_format_whose_full_answer_exceeds_the_reply_cap_is_not_proposed(tmp_path):
    cfg = config(tmp_path, agent="robust-cot", init="plain", operators=["compile-vocab"], generations=1, children=1,
                 episodes=4, evidence_episodes=2, validation_episodes=4, test_episodes=2, expert_episodes=12,
                 agent_options={"history": 1}, agent_max_tokens=16)
    initial = PromptSet.of({"system": Prompt((Segment("role", "You pick up the ball."),
                                              Segment("format", "Mission: {mission}\n<|ACTION|>the action<|END|>")))})
    res = run(cfg, CountingRunner(env=TurnEnv), responder_fn=_rule_following_agent, initial_prompts=initial)
    assert [c.id for c in res.candidates] == ["c0"]
    assert "over the agent's reply cap of 16" in (res.run_dir / "run.log").read_text()


def test_cost_comparison_states_the_ratio_and_the_limit():
    from promptevo.evaluation.statistics import call_cost, cost_comparison

    eps = [{"llm_calls": 4, "cached_calls": 2, "prompt_tokens": 90, "completion_tokens": 10, "wall_s": 3.0},
           {"error": "LLMError", "llm_calls": 9, "wall_s": 99.0}]
    assert call_cost(eps) == {"episodes": 1, "calls": 4, "cached_calls": 2, "tokens_per_call": 25.0,
                              "seconds_per_call": 1.5}
    c = cost_comparison({"initial": {"seconds_per_call": 1.0}, "best": {"seconds_per_call": 1.6}})
    assert c["seconds_ratio"] == 1.6 and c["within_limit"] is False
    assert cost_comparison({"initial": {"seconds_per_call": None}, "best": {}})["within_limit"] is None


# -- paraphrases by the optimizer LLM ---------------------------------------------------------------------------
RULE = ('Then choose the action from what you wrote:\n- Line is "none": write "Last word: left" and use its row below.\n'
        '- Last word is "forward": go forward.\n- Last word is "left": turn left.\n- Last word is "right": turn right.\n'
        '- Anything else: go forward.')
GOOD = ('Pick your action from your answer:\n- If Line is "none", write "Last word: left" and follow that row.\n'
        '- If Last word is "forward", go forward.\n- If Last word is "left", turn left.\n'
        '- If Last word is "right", turn right.\n- Otherwise, go forward.')


def test_a_paraphrase_that_drops_a_value_or_an_action_is_refused():
    from promptevo.optim.propose.compile_paraphrase import check_paraphrase, required_texts

    keep = required_texts(RULE, ["turn left", "turn right", "go forward", "pick up"])
    assert '"Last word: left"' in keep and '"right"' in keep and "turn right" in keep and "pick up" not in keep
    assert check_paraphrase(RULE, GOOD, keep) is None
    assert "drops" in check_paraphrase(RULE, GOOD.replace(', turn right', ', turn to the right'), keep)
    assert "drops" in check_paraphrase(RULE, GOOD.replace('"forward"', 'forward'), keep)
    assert "fewer cases" in check_paraphrase(RULE, GOOD.replace("\n- If Last word", " If Last word"), keep)
    assert check_paraphrase(RULE, RULE, keep) == "the same text"
    assert check_paraphrase(RULE, "", keep) == "empty"


def test_the_paraphrase_operator_keeps_only_a_faithful_rewording(goto_fit):
    from types import SimpleNamespace

    from promptevo.agents.registry import default_prompts
    from promptevo.optim.adapter import ProposalContext
    from promptevo.optim.propose.registry import OperatorContext, get_operator

    task, train, _states, _ind = goto_fit
    replies = iter([GOOD.replace(", turn right", ", turn to the right"), GOOD])

    class Gateway:
        def complete(self, messages, **kw):
            assert "Texts that must appear exactly as written" in messages[1]["content"]
            return SimpleNamespace(text=next(replies), prompt_tokens=10, completion_tokens=20, cost=0.0, truncated=False)

    game = SimpleNamespace(task=task, env_factory=make_env, opt_gw=Gateway(), env_instructions="",
                           cfg=SimpleNamespace(seed=0, skills=None, agent_max_tokens=96, model=None,
                                               optimizer_temperature=0.7, optimizer_max_tokens=256),
                           warn_once=lambda key, msg: None)
    ctx = OperatorContext(proposal=ProposalContext(generation=1, mode="mutate", n=2, history=[], tried=set()), game=game)
    ev = collect(task, [], train[-20:])
    props = get_operator("compile-paraphrase").propose(default_prompts("robust-cot", task=task, init="compact"),
                                                       {"expert": ev}, ctx, 2)
    assert len(props) == 1 and props[0].operator == "compile-paraphrase" and props[0].source["author"] == "machine"
    system = props[0].prompts.module("system")
    assert system.get("induced-rule").startswith("Pick your action") and "(if none)" in system.get("answer-grammar")
    assert any("refused sample 1: drops turn right" in ln for ln in ctx.log)
    assert ctx.usage["paraphrase"]["calls"] == 2
