"""Tests of scaffold pruning: competence gate, prunable segments, token sizes, the pruner call and the
held-out keep rule. The optimizer LLM is the ``fake/scripted`` test double (ScriptedLLM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


from promptevo.optim.propose import pruner as pruning
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.llm.tokens import count_tokens
from promptevo.optim.propose.pruner import (
    competent,
    prompt_tokens,
    prompt_tokens_by_segment,
    propose_prunes,
    prunable_segments,
)
from promptevo.segments import Edit, Prompt, PromptSet, Segment, apply_edit

TIPS = (
    "- Walk forward until the target has no forward distance left, then turn towards it.\n"
    "- If the target is not visible, turn to scan, then explore through free space and open doors.\n"
    "- Do not repeat an action that changed nothing, and avoid turning back and forth."
)


def scripted_gateway() -> Gateway:
    return Gateway(LLMConfig(model="fake/scripted", cache_dir=None, num_retries=0))


def prompts() -> PromptSet:
    return PromptSet.of(
        {
            "descriptor": Prompt((Segment("role", "Describe the scene for the mission {mission}."),)),
            "actor": Prompt(
                (
                    Segment("role", "You control a player in BabyAI, a grid world. Choose the single best next action."),
                    Segment("mission", "Your mission: {mission}"),
                    Segment("actions", "Valid actions: {actions}"),
                    Segment("tips", TIPS),
                    Segment("facing", "Face an object before you pick it up."),
                    Segment("output_format", "Think briefly, then answer <|ACTION|>the action<|END|>."),
                )
            ),
            "solo": Prompt((Segment("role", "A module with one segment only, and no placeholder at all."),)),
        }
    )


def test_competent_gate():
    assert competent(8, 10, 0.8) and competent(4, 5, 0.8) and competent(10, 10, 1.0)
    assert not competent(7, 10, 0.8)
    assert not competent(0, 0, 0.0)  # nothing played: never competent
    assert competent(0, 3, 0.0)


def test_prunable_segments_skip_protected_placeholder_and_only_segments():
    ps = prompts()
    assert prunable_segments(ps) == [("actor", "role"), ("actor", "tips"), ("actor", "facing")]
    reasons = pruning.keep_reasons(ps)
    assert reasons[("actor", "output_format")] == "holds the answer format"
    assert reasons[("actor", "mission")] == "holds the placeholder {mission}"
    assert reasons[("actor", "actions")] == "holds the placeholder {actions}"
    assert reasons[("descriptor", "role")] == "holds the placeholder {mission}"
    assert reasons[("solo", "role")] == "only segment of its module"
    # the single-call agents' answer segment is 'format'; {instructions}/{observation} also pin a segment
    single = PromptSet.of({"system": Prompt((Segment("intro", "{instructions}"), Segment("obs", "See {observation}"),
                                             Segment("tips", "Be quick."), Segment("format", "Answer.")))})
    assert prunable_segments(single) == [("system", "tips")]
    # the shipped BabyAI prompt keeps its answer formats
    shipped = PromptSet.load(os.path.join(os.path.dirname(__file__), "..", "prompts", "babyai", "guided",
                                          "two-stage.md"))
    targets = prunable_segments(shipped)
    assert targets and all(s != "output_format" for _, s in targets)


def test_prompt_tokens_counts_and_shrinks_after_a_delete():
    ps = prompts()
    total = prompt_tokens(ps)
    by_seg = prompt_tokens_by_segment(ps)
    assert total > 0 and all(v > 0 for v in by_seg.values())
    assert list(by_seg)[:2] == [("descriptor", "role"), ("actor", "role")]
    # segments joined by blank lines: the total is about the sum of the parts
    assert abs(total - sum(by_seg.values())) <= 2 * len(by_seg)
    child = apply_edit(ps, Edit("delete", "actor", "tips"))
    assert prompt_tokens(child) < total
    assert total - prompt_tokens(child) >= by_seg[("actor", "tips")] - 2
    assert count_tokens("hello world") == 2  # the real tokenizer (cl100k), not len // 4 (== 2 as well)
    assert count_tokens("go forward " * 40) != len("go forward " * 40) // 4


def test_count_tokens_falls_back_to_chars_on_tokenizer_errors(monkeypatch):
    import litellm

    def boom(**kw):
        raise RuntimeError("no tokenizer")

    monkeypatch.setattr(litellm, "token_counter", boom)
    assert count_tokens("x" * 41) == 16  # a cautious 2.5 characters per token


def test_token_counting_never_touches_the_network():
    code = (
        "import socket\n"
        "def no(*a, **k): raise OSError('network is off in this test')\n"
        "socket.socket.connect = no; socket.getaddrinfo = no; socket.create_connection = no\n"
        "from promptevo.llm.tokens import count_tokens\n"
        "import litellm\n"
        "print(count_tokens('Go to the red ball, then pick up the blue key.'), "
        "litellm.token_counter(model='gpt-3.5-turbo', text='Go to the red ball, then pick up the blue key.'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    ours, theirs = out.stdout.split()
    assert ours == theirs and int(ours) > 5


def test_propose_prunes_good_reply():
    ps = prompts()
    reply = {"edits": [
        {"module": "actor", "op": "remove", "segment": "tips", "rationale": "the player explores well by now"},
        {"module": "actor", "op": "rewrite", "segment": "role", "text": "Choose the next action.",
         "rationale": "the rest repeats the environment description"},
    ]}
    seen: list[list[dict]] = []

    def responder(messages):
        seen.append(messages)
        return "Here:\n```json\n" + json.dumps(reply) + "\n```"

    gw = scripted_gateway()
    with ScriptedLLM.install(responder):
        res = propose_prunes(ps, gw, n=2, stats="8/8 successes on the training seeds", env_instructions="ENV")
    assert [e.describe() for e in res.edits] == ["delete actor.tips", "rewrite actor.role"]
    assert res.edits[0].text == "" and res.edits[1].text == "Choose the next action."
    assert res.error is None and res.rejected == [] and res.fallbacks == []
    assert len(seen) == 1 and gw.usage.role("pruner")["calls"] == 1
    system, user = seen[0][0]["content"], seen[0][1]["content"]
    assert "8/8 successes on the training seeds" in user and "ENV" in system
    tips_tokens = prompt_tokens_by_segment(ps)[("actor", "tips")]
    assert f"<<actor.tips>> ({tips_tokens} tokens, prunable)" in user
    assert "<<actor.output_format>>" in user and "keep: holds the answer format" in user
    assert f"{prompt_tokens(ps)} tokens in all" in user
    assert f"- actor.tips ({tips_tokens} tokens)" in user.split("largest first:")[1]
    # every edit gives a smaller prompt
    for e in res.edits:
        assert prompt_tokens(apply_edit(ps, e)) < prompt_tokens(ps)


def test_propose_prunes_rejects_protected_placeholder_longer_and_add_edits():
    ps = prompts()
    reply = {"edits": [
        {"module": "actor", "op": "delete", "segment": "output_format", "rationale": "x"},
        {"module": "actor", "op": "delete", "segment": "mission", "rationale": "x"},
        {"module": "solo", "op": "delete", "segment": "role", "rationale": "x"},
        {"module": "actor", "op": "rewrite", "segment": "facing",
         "text": "Face an object before you pick it up. Also check twice that it is the right colour.",
         "rationale": "longer"},
        {"module": "actor", "op": "add", "segment": "extra", "text": "More advice.", "rationale": "x"},
        {"module": "agent", "op": "delete", "segment": "facing", "rationale": "wrong module name, repaired"},
    ]}
    calls = []

    def responder(messages):
        calls.append(messages)
        return json.dumps(reply)

    with ScriptedLLM.install(responder):
        res = propose_prunes(ps, scripted_gateway(), n=2)
    reasons = {(r["edit"]["module"], r["edit"]["segment"]): r["reason"] for r in res.rejected}
    assert "not prunable (holds the answer format)" in reasons[("actor", "output_format")]
    assert "holds the placeholder {mission}" in reasons[("actor", "mission")]
    assert "only segment of its module" in reasons[("solo", "role")]
    assert "not shorter" in reasons[("actor", "facing")]
    assert "'add' is not allowed" in reasons[("actor", "extra")]
    assert len(calls) == 1  # one usable edit: no retry
    # the repaired delete is used, then the largest untried prunable segment fills up to n
    assert [e.describe() for e in res.edits] == ["delete actor.facing", "delete actor.tips"]
    assert res.repaired and "'agent' -> 'actor'" in res.repaired[0]["note"]
    assert len(res.fallbacks) == 1 and "1 usable edit(s) of 2" in res.fallbacks[0]["note"]
    assert res.edits[1].rationale.startswith("fallback:")
    assert "fallbacks" in res.to_dict()


def test_propose_prunes_garbage_reply_falls_back_deterministically():
    ps = prompts()
    calls = []

    def responder(messages):
        calls.append(messages)
        return "I think the tips are too long."

    sizes = prompt_tokens_by_segment(ps)
    by_size = sorted(prunable_segments(ps), key=lambda t: -sizes[t])
    assert by_size[0] == ("actor", "tips")
    tried = {apply_edit(ps, Edit("delete", "actor", "tips")).fingerprint()}
    with ScriptedLLM.install(responder):
        res = propose_prunes(ps, scripted_gateway(), n=2, tried=tried)
        again = propose_prunes(ps, scripted_gateway(), n=2, tried=tried)
    assert len(calls) == 4  # one call with one corrective retry, per round
    expected = [f"delete {m}.{s}" for m, s in by_size[1:3]]
    assert [e.describe() for e in res.edits] == expected  # the largest one was already tried
    assert [e.describe() for e in again.edits] == expected
    assert "deterministic fallback" in res.error and res.raw.startswith("I think")
    assert all(f["note"] == "the pruner reply was unusable" for f in res.fallbacks)


def test_propose_prunes_without_prunable_segments_makes_no_call():
    ps = PromptSet.of({"system": Prompt((Segment("role", "Mission: {mission}"), Segment("format", "Answer.")))})
    calls = []
    with ScriptedLLM.install(lambda m: calls.append(m) or "{}"):
        res = propose_prunes(ps, scripted_gateway(), n=2)
    assert res.edits == [] and calls == [] and "no prunable segment" in res.error


def test_prune_policy_is_one_object_with_pure_decisions():
    from types import SimpleNamespace

    from promptevo.optim.pruning import PRUNE, PrunePolicy

    off = PrunePolicy(None)
    assert not off.active and off.mode(10, 10, PromptSet()) == "mutate"
    pol = PrunePolicy(0.8)
    prune, other = SimpleNamespace(operator=PRUNE), SimpleNamespace(operator="mutate")  # only the operator is read
    assert pol.race_rule(prune, "sign", 0.0) == ("margin", -1.0)
    assert pol.race_rule(other, "sign", 0.1) == ("sign", 0.1)
    # a removal that loses a little on training seeds is still accepted; an edit is not
    child, parent = {1: 0.0, 2: 1.0, 3: 1.0}, {1: 0.0, 2: 1.0, 3: 1.0}
    assert pol.accept(prune, child, parent, rule="margin", margin=0.0, alpha=0.05).accepted
    assert not pol.accept(other, child, parent, rule="margin", margin=0.0, alpha=0.05).accepted
