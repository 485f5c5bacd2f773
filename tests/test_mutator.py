"""Tests of the mutator: edit validation, duplicate rejection, retry/skip on malformed replies.

The optimizer LLM is the ``fake/scripted`` test double (ScriptedLLM).
"""

from __future__ import annotations

import json

from promptevo.optim.reflect.analyzer import Analysis, Proposal
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.optim.propose.mutator import check_edit, propose, propose_detailed, repair_edit
from promptevo.segments import Edit, Prompt, PromptSet, Segment, apply_edit


def scripted_gateway() -> Gateway:
    return Gateway(LLMConfig(model="fake/scripted", cache_dir=None, num_retries=0))


def prompts() -> PromptSet:
    return PromptSet.of(
        {
            "descriptor": Prompt((Segment("role", "Describe the scene."),)),
            "actor": Prompt(
                (
                    Segment("role", "You choose the next action."),
                    Segment("rules", "Move toward the target."),
                    Segment("output_format", "<|ACTION|>a<|END|>"),
                )
            ),
        }
    )


ANALYSIS = Analysis(
    ok=True,
    failure_modes=["picks up without facing the object"],
    proposals=[Proposal(module="actor", segment="facing", op="add", idea="face the object before pick up")],
)


def test_check_edit_rules():
    ps = prompts()
    ok, why = check_edit(ps, Edit("add", "actor", "facing", "Face the object before pick up."), set())
    assert why is None and "facing" in ok.module("actor").names
    cases = {
        Edit("add", "critic", "x", "t"): "unknown module",
        Edit("rewrite", "actor", "missing", "t"): "existing segment",
        Edit("delete", "actor", "missing"): "existing segment",
        Edit("add", "actor", "rules", "t"): "already exists",
        Edit("rewrite", "actor", "rules", "   "): "empty text",
        Edit("rewrite", "actor", "rules", "Move toward the target."): "no change",
        Edit("delete", "descriptor", "role"): "empty",
        Edit("delete", "actor", "output_format"): "answer format",
        Edit("add", "actor", "Bad Name!", "t"): "invalid segment name",
    }
    for edit, expected in cases.items():
        child, why = check_edit(ps, edit, set())
        assert child is None and expected in why, (edit, why)
    # duplicate of an already-tried candidate
    seen = {apply_edit(ps, Edit("delete", "actor", "rules")).fingerprint()}
    child, why = check_edit(ps, Edit("delete", "actor", "rules"), seen)
    assert child is None and "duplicate" in why


def test_propose_returns_validated_edits_and_rejects_bad_ones():
    reply = {
        "edits": [
            {"module": "actor", "op": "add", "segment": "facing", "after": "rules",
             "text": "Face the object before pick up.", "rationale": "picked up while not facing"},
            {"module": "actor", "op": "modify", "segment": "rules", "text": "Move to the target, then face it.",
             "rationale": "same idea, in the rules"},
            {"module": "actor", "op": "delete", "segment": "ghost", "rationale": "bad"},
            {"module": "actor", "op": "add", "segment": "facing", "after": "rules",
             "text": "Face the object before pick up.", "rationale": "same child as the first"},
        ]
    }
    seen: list[list[dict]] = []

    def responder(messages):
        seen.append(messages)
        return "Edits:\n```json\n" + json.dumps(reply) + "\n```"

    history = [{"generation": 1, "edit": {"op": "delete", "module": "actor", "segment": "role",
                                          "rationale": "too long"}, "outcome": "rejected", "train_diff": -0.2}]
    with ScriptedLLM.install(responder):
        res = propose_detailed(prompts(), ANALYSIS, scripted_gateway(), n=3, history=history, env_instructions="ENV")
    assert [e.describe() for e in res.edits] == ["add actor.facing", "rewrite actor.rules"]
    assert res.edits[0].after == "rules" and res.edits[0].rationale == "picked up while not facing"
    reasons = [r["reason"] for r in res.rejected]
    assert any("existing segment" in r for r in reasons)
    assert any("duplicate" in r for r in reasons)  # same child twice in one reply
    assert len(seen) == 1
    user = seen[0][1]["content"]
    assert "face the object before pick up" in user  # analysis digest
    assert "delete actor.role -> rejected" in user  # hereditary history
    assert "<<actor.rules>>" in user and "ENV" in seen[0][0]["content"]
    # n caps the number of edits
    with ScriptedLLM.install(responder):
        assert len(propose(prompts(), ANALYSIS, scripted_gateway(), n=1)) == 1


def test_propose_rejects_children_equal_to_tried_candidates():
    ps = prompts()
    child = apply_edit(ps, Edit("add", "actor", "facing", "Face the object before pick up.", after="rules"))
    reply = {"edits": [{"module": "actor", "op": "add", "segment": "facing", "text": "Face the object before pick up."}]}
    with ScriptedLLM.install(lambda m: json.dumps(reply)):
        res = propose_detailed(ps, ANALYSIS, scripted_gateway(), tried={child.fingerprint()})
    assert res.edits == []
    assert any("duplicate" in r["reason"] for r in res.rejected)
    assert "no usable edit" in (res.error or "")


def test_malformed_reply_is_retried_once_then_skipped():
    calls: list[list[dict]] = []

    def responder(messages):
        calls.append(messages)
        return "I would change the rules section to be clearer."  # no JSON at all

    with ScriptedLLM.install(responder):
        res = propose_detailed(prompts(), ANALYSIS, scripted_gateway())
    assert res.edits == [] and len(calls) == 2
    assert "could not be used" in calls[1][-1]["content"]
    assert res.raw.startswith("I would change")


def test_malformed_then_good_reply():
    replies = iter(['{"edits": [{"module": "actor"', json.dumps(
        {"module": "actor", "op": "remove", "segment": "rules", "rationale": "contradicts the mission"})])
    with ScriptedLLM.install(lambda m: next(replies)):
        edits = propose(prompts(), None, scripted_gateway())  # no analysis is fine too
    assert [e.describe() for e in edits] == ["delete actor.rules"]  # bare edit, 'remove' -> delete
    assert edits[0].text == ""


def test_repair_fixes_common_slips_of_small_models():
    ps = prompts()
    # add to an existing segment -> its text is appended
    e, note = repair_edit(ps, Edit("add", "actor", "rules", "Face the ball first."))
    assert e.op == "rewrite" and e.text == "Move toward the target.\n\nFace the ball first." and "appended" in note
    # rewrite of a missing segment -> add, placed before the trailing answer-format segment
    e, note = repair_edit(ps, Edit("rewrite", "actor", "tips", "Face the ball first."))
    assert e.op == "add" and e.after == "rules" and "added" in note
    assert apply_edit(ps, e).module("actor").names == ["role", "rules", "tips", "output_format"]
    # wrong module name but a unique segment
    e, note = repair_edit(ps, Edit("rewrite", "agent", "rules", "x"))
    assert e.module == "actor" and "module" in note
    # "module.segment" written in one field (the local model's pruner reply did this)
    e, note = repair_edit(ps, Edit("delete", "actor.rules", ""))
    assert (e.module, e.segment) == ("actor", "rules") and "split" not in note and "'actor.rules'" in note
    e, _ = repair_edit(ps, Edit("delete", "actor.rules", "actor.rules"))
    assert (e.module, e.segment) == ("actor", "rules")
    e, _ = repair_edit(ps, Edit("delete", "actor", "actor.rules"))
    assert (e.module, e.segment) == ("actor", "rules")
    e, _ = repair_edit(ps, Edit("add", "actor.tips", "tips", "Face the ball first."))
    assert (e.module, e.segment, e.op) == ("actor", "tips", "add")
    e, note = repair_edit(ps, Edit("delete", "nomodule.rules", "rules"))  # unknown prefix: segment owner rule
    assert e.module == "actor"
    # nothing to repair
    e, note = repair_edit(ps, Edit("delete", "actor", "rules"))
    assert note is None and e == Edit("delete", "actor", "rules")


def test_reply_examples_use_the_prompt_set_own_names():
    seen = []

    def responder(messages):
        seen.append(messages)
        return json.dumps({"edits": [{"module": "actor", "op": "add", "segment": "rules", "text": "Face the ball."}]})

    with ScriptedLLM.install(responder):
        res = propose_detailed(prompts(), ANALYSIS, scripted_gateway())
    assert 'for example "role"' in seen[0][0]["content"]  # first non-format segment of the actor
    assert res.edits[0].op == "rewrite" and res.repaired and "appended" in res.repaired[0]["note"]


def test_skills_section_only_when_skills_are_given():
    from promptevo.optim.propose.mutator import SKILLS_HEADING, build_mutator_messages

    ps = prompts()
    plain = build_mutator_messages(ps, ANALYSIS, n=2, history=None)
    for empty in (None, "", "  \n"):
        assert build_mutator_messages(ps, ANALYSIS, n=2, history=None, skills=empty) == plain
    assert "Reusable skills" not in plain[1]["content"] and "${skills_section}" not in plain[1]["content"]
    skill = "- Before pick up, turn until the object is at '1 step forward'."
    with_skills = build_mutator_messages(ps, ANALYSIS, n=2, history=None, skills=skill)
    assert with_skills[0] == plain[0]  # the system message does not change
    user = with_skills[1]["content"]
    assert SKILLS_HEADING.startswith("Reusable skills learned on other tasks (you may insert one as an 'add' edit")
    assert f"(none yet)\n\n{SKILLS_HEADING}\n\n{skill}\n\nPropose 2 different edits" in user
    assert user.replace(f"\n\n{SKILLS_HEADING}\n\n{skill}", "") == plain[1]["content"]

    seen = []

    def responder(messages):
        seen.append(messages)
        return json.dumps({"edits": [{"module": "actor", "op": "add", "segment": "facing", "text": skill[2:]}]})

    with ScriptedLLM.install(responder):
        edits = propose(ps, ANALYSIS, scripted_gateway(), n=1, skills=skill)
        propose_detailed(ps, ANALYSIS, scripted_gateway(), n=1)
    assert [e.describe() for e in edits] == ["add actor.facing"]
    assert skill in seen[0][1]["content"] and SKILLS_HEADING not in seen[1][1]["content"]
