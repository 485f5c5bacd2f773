"""Tests of the behaviour analyser (JSON extraction, validation, retry, rendering, ablation).

The optimizer LLM is the ``fake/scripted`` test double (ScriptedLLM); episodes are hand-made
EpisodeResult records.
"""

from __future__ import annotations

import json

import pytest

from promptevo.optim.reflect.analyzer import Analysis, analyze
from promptevo.optim.reflect.llm_json import extract_json
from promptevo.optim.reflect.render import render_episode, select_episodes
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.optim.reflect.ablation import counterfactual_ablation
from promptevo.evaluation.rollout import EpisodeResult
from promptevo.segments import Prompt, PromptSet, Segment


def scripted_gateway() -> Gateway:
    return Gateway(LLMConfig(model="fake/scripted", cache_dir=None, num_retries=0))


def two_stage_prompts(extra_actor: str | None = None) -> PromptSet:
    actor = [Segment("role", "You choose the next action."), Segment("output_format", "<|ACTION|>a<|END|>")]
    if extra_actor:
        actor.insert(1, Segment("rules", extra_actor))
    return PromptSet.of(
        {
            "descriptor": Prompt((Segment("role", "Describe the scene."), Segment("focus", "List objects."))),
            "actor": Prompt(tuple(actor)),
        }
    )


def episode(seed: int, success: bool, steps: int = 3) -> EpisodeResult:
    traj = [
        {
            "t": t,
            "observation": f"a red ball {t + 1} steps forward\nwall to the left",
            "action": "pick up" if t == steps - 1 else "go forward",
            "executed_action": "pick up" if t == steps - 1 else "go forward",
            "reply": "<|ACTION|>go forward<|END|>",
            "parsed": True,
            "valid": True,
            "reward": 0.9 if (success and t == steps - 1) else 0.0,
            "description": "ball ahead",
        }
        for t in range(steps)
    ]
    return EpisodeResult(
        task="pickup", seed=seed, mission="pick up the red ball", success=success,
        progression=1.0 if success else 0.0, return_=0.9 if success else 0.0, steps=steps,
        invalid_actions=0, prompt_tokens=10, completion_tokens=5, cost=0.0, llm_calls=2 * steps,
        wall_s=0.1, trajectory=traj,
    )


GOOD_REPLY = {
    "attributions": [
        {"module": "actor", "segment": "role", "effect": "hurt",
         "evidence": [{"seed": 1, "step": "2", "note": "picked up while not facing the ball"}],
         "explanation": "no rule about facing"},
        {"module": "nonexistent", "segment": "x", "effect": "hurt", "explanation": "dropped"},
    ],
    "failure_modes": ["picks up too early"],
    "proposals": [
        {"module": "actor", "segment": "facing", "op": "add", "idea": "face the object before pick up"},
        {"module": "actor", "segment": "nope", "op": "delete", "idea": "cannot delete what is absent"},
        {"module": "actor", "segment": "role", "op": "modify", "idea": "mention facing"},
    ],
}


def test_extract_json_from_fenced_and_chatty_replies():
    assert extract_json('Sure!\n```json\n{"a": 1}\n```\nbye') == {"a": 1}
    assert extract_json('I think {"a": {"b": [1, 2]}} is it.') == {"a": {"b": [1, 2]}}
    # a broken first brace does not hide a later valid object
    assert extract_json('{oops} then {"ok": true}') == {"ok": True}
    with pytest.raises(ValueError):
        extract_json("no json here")
    with pytest.raises(ValueError):
        extract_json("")


def test_render_episode_has_steps_flags_and_outcome():
    ep = episode(7, False, steps=40)
    ep.trajectory[5]["valid"] = False
    ep.trajectory[5]["parsed"] = False
    text = render_episode(ep, max_steps_shown=10)
    assert "seed=7: FAILED" in text
    assert "Mission: pick up the red ball" in text
    assert "S7.0 obs: a red ball 1 steps forward / wall to the left" in text
    assert "steps omitted" in text
    assert "S7.39" in text  # the tail is shown
    assert text.count("obs:") == 10
    short = render_episode(episode(3, False, steps=6), max_steps_shown=30)
    assert "[INVALID]" not in short
    ep2 = episode(4, False, steps=6)
    ep2.trajectory[2]["valid"] = False
    ep2.trajectory[2]["parsed"] = False
    assert "[INVALID] [UNPARSED]" in render_episode(ep2)


def test_select_episodes_prefers_failures_and_keeps_some_successes():
    eps = [episode(s, s % 3 == 0) for s in range(12)]
    picked = select_episodes(eps, max_trajectories=6, max_successes=2)
    assert len(picked) == 6
    assert sum(1 for e in picked if e.success) == 2
    # all successes: still returns episodes to learn from
    assert len(select_episodes([episode(s, True) for s in range(4)], 6)) == 4


def test_analyze_validates_and_filters_against_prompts():
    prompts = two_stage_prompts()
    seen: list[list[dict]] = []

    def responder(messages):
        seen.append(messages)
        return "Here is my analysis:\n```json\n" + json.dumps(GOOD_REPLY) + "\n```"

    with ScriptedLLM.install(responder):
        a = analyze(prompts, [episode(1, False), episode(2, True)], scripted_gateway(), env_instructions="ENVRULES")
    assert a.ok and a.error is None
    assert len(seen) == 1
    sys_msg, user_msg = seen[0][0]["content"], seen[0][1]["content"]
    assert "ENVRULES" in sys_msg
    assert "<<actor.role>>" in user_msg and "<<descriptor.focus>>" in user_msg
    assert "seed=1: FAILED" in user_msg and "seed=2: SUCCESS" in user_msg
    assert [x.module for x in a.attributions] == ["actor"]
    assert a.attributions[0].evidence[0].step == 2  # "2" coerced
    ops = [(p.op, p.segment) for p in a.proposals]
    assert ops == [("add", "facing"), ("rewrite", "role")]  # bad delete dropped, modify -> rewrite
    assert any("nope" in w for w in a.warnings)
    assert a.usage["calls"] == 1
    # round-trips as JSON
    assert Analysis.from_json(a.to_json()) == a
    assert "face the object" in a.summary_text()


def test_analyze_retries_once_on_malformed_json_then_succeeds():
    replies = iter(["I cannot decide {not json", json.dumps(GOOD_REPLY)])
    calls: list[list[dict]] = []

    def responder(messages):
        calls.append(messages)
        return next(replies)

    with ScriptedLLM.install(responder):
        a = analyze(two_stage_prompts(), [episode(1, False)], scripted_gateway())
    assert a.ok
    assert len(calls) == 2
    assert "could not be used" in calls[1][-1]["content"]  # corrective message
    assert calls[1][-2]["role"] == "assistant"


def test_analyze_gives_up_after_one_retry_without_crashing():
    n = {"calls": 0}

    def responder(messages):
        n["calls"] += 1
        return '{"attributions": [{"module": "actor", "effect": "exploded"}]}'  # schema error

    with ScriptedLLM.install(responder):
        a = analyze(two_stage_prompts(), [episode(1, False)], scripted_gateway())
    assert not a.ok
    assert n["calls"] == 2
    assert "schema error" in (a.error or "")
    assert "exploded" in a.raw
    assert "raw notes" in a.summary_text()


def test_analyze_transient_llm_error_is_not_a_crash_but_config_error_is_raised():
    import litellm

    from promptevo.llm import LLMConfigError

    def transient(messages):
        return litellm.RateLimitError(message="slow down", model="scripted", llm_provider="fake")

    with ScriptedLLM.install(transient):
        a = analyze(two_stage_prompts(), [episode(1, False)], scripted_gateway())
    assert not a.ok and "LLM call failed" in (a.error or "")

    def config_problem(messages):
        return litellm.BadRequestError(message="no such model", model="scripted", llm_provider="fake")

    with ScriptedLLM.install(config_problem), pytest.raises(LLMConfigError):
        analyze(two_stage_prompts(), [episode(1, False)], scripted_gateway())


def test_analyze_without_episodes():
    a = analyze(two_stage_prompts(), [], gateway=None)
    assert not a.ok and "no episodes" in (a.error or "")


def test_counterfactual_ablation_measures_segment_value():
    """Test-double runner: success only while actor.rules (the 'facing' rule) is present."""
    prompts = two_stage_prompts(extra_actor="face the object before pick up")

    def run(ps: PromptSet, seeds):
        has_rule = "face the object" in ps.module("actor").render()
        return [episode(s, has_rule) for s in seeds]

    rows = counterfactual_ablation(prompts, [1, 2, 3, 4], run)
    by = {(r["module"], r["segment"]): r for r in rows}
    assert by[("actor", "rules")]["delta_success"] == -1.0
    assert by[("actor", "rules")]["n"] == 4
    assert by[("descriptor", "focus")]["delta_success"] == 0.0
    assert rows[0]["segment"] == "rules"  # most harmful removal first
    only = counterfactual_ablation(prompts, [1], run, segments=[("actor", "role")])
    assert len(only) == 1 and only[0]["delta_return"] == 0.0


def test_render_episode_collapses_repeated_steps():
    ep = episode(5, False, steps=20)
    for st in ep.trajectory[3:]:
        st.update(observation="a wall 1 step forward", action="go forward", description="wall ahead")
    text = render_episode(ep, max_steps_shown=30)
    assert "S5.3-19 (same step repeated 17 times) obs: a wall 1 step forward" in text
    assert text.count("obs:") == 4


class RecordingGatewayDouble:
    """Test double gateway: records complete() kwargs and answers with a fixed JSON reply."""

    def __init__(self, model: str):
        from types import SimpleNamespace

        self.config = SimpleNamespace(model=model)
        self.kwargs: list[dict] = []

    def complete(self, messages, **kw):
        from promptevo.llm import Completion

        self.kwargs.append(kw)
        return Completion(text=json.dumps(GOOD_REPLY), prompt_tokens=1, completion_tokens=1, cost=0.0,
                          latency_s=0.0, cached=False, model=self.config.model)


def test_analyzer_replies_are_forced_to_the_reply_schema():
    """The analyzer asks for its reply schema as response_format (a grammar on local models, the provider's
    schema support elsewhere; the gateway drops it where the provider has none); constrained=False asks
    in the prompt only."""
    from promptevo.optim.reflect.analyzer import AnalysisReply

    for model in ("local/qwen2.5-coder-1.5b", "openai/gpt-4o-mini"):
        gw = RecordingGatewayDouble(model)
        assert analyze(two_stage_prompts(), [episode(1, False)], gw).ok
        rf = gw.kwargs[0]["response_format"]
        assert gw.kwargs[0]["role"] == "analyzer" and rf["type"] == "json_schema"
        assert rf["json_schema"]["schema"] == AnalysisReply.model_json_schema()
        assert "grammar" not in gw.kwargs[0]
    free = RecordingGatewayDouble("openai/gpt-4o-mini")
    analyze(two_stage_prompts(), [episode(1, False)], free, constrained=False)
    assert "response_format" not in free.kwargs[0]


def test_a_reply_that_copies_the_template_example_is_asked_again():
    from promptevo.optim.reflect.analyzer import build_analyzer_messages
    from promptevo.optim.reflect.llm_json import example_strings

    msgs, _ = build_analyzer_messages(two_stage_prompts(), [episode(1, False)])
    example = example_strings(msgs[0]["content"])
    assert example and all(len(x) >= 12 for x in example)
    m = __import__("re").search(r"```json\n(.*?)```", msgs[0]["content"], __import__("re").DOTALL)
    replies = iter([m.group(1), json.dumps(GOOD_REPLY)])  # first the example itself, then a real answer
    calls = []

    def responder(messages):
        calls.append(messages)
        return next(replies)

    with ScriptedLLM.install(responder):
        a = analyze(two_stage_prompts(), [episode(1, False)], scripted_gateway())
    assert a.ok and len(calls) == 2
    assert "repeats the example text" in calls[1][-1]["content"]


def test_a_reply_that_copies_only_part_of_the_example_keeps_its_own_findings():
    """Small local models copy one example item and fill the rest themselves: keep their own items."""
    from promptevo.optim.reflect.analyzer import build_analyzer_messages
    from promptevo.optim.reflect.llm_json import example_strings, scrub_copied

    msgs, _ = build_analyzer_messages(two_stage_prompts(), [episode(1, False)])
    copied_text = sorted(example_strings(msgs[0]["content"]))[0]
    partial = dict(GOOD_REPLY, failure_modes=[copied_text, "turns in circles near walls"])
    calls = []

    def responder(messages):
        calls.append(messages)
        return json.dumps(partial)

    with ScriptedLLM.install(responder):
        a = analyze(two_stage_prompts(), [episode(1, False)], scripted_gateway())
    assert a.ok and len(calls) == 1
    assert a.failure_modes == ["turns in circles near walls"]
    assert a.attributions  # the model's own attributions survive
    assert scrub_copied({"a": [copied_text]}, [copied_text]) == {"a": []}


def long_episode(seed: int, steps: int = 60) -> EpisodeResult:
    """A failed episode with grid-like observations of ~400 characters per step (MAPF-sized)."""
    ep = episode(seed, False, steps)
    for t, st in enumerate(ep.trajectory):
        st["observation"] = "\n".join(f"row {r}: " + " ".join("FHG.A"[(r + c + t) % 5] for c in range(12))
                                      for r in range(12))
        st["action"] = st["executed_action"] = ["go forward", "turn left", "turn right"][t % 3]
        st["description"] = f"agent at row {t % 7}, the goal is {t % 5} rows down " * 3
    return ep


def test_raw_trajectories_are_shortened_to_fit_the_models_window():
    from promptevo.optim.reflect.analyzer import build_analyzer_messages
    from promptevo.optim.reflect.llm_json import estimate_tokens

    eps = [long_episode(s) for s in range(6)]
    full, seeds_full = build_analyzer_messages(two_stage_prompts(), eps)
    assert estimate_tokens(full) > 8000
    for budget in (6000, 3000, 1600):  # the template itself is ~1,450 tokens (1,500 before the signatures section)
        msgs, seeds = build_analyzer_messages(two_stage_prompts(), eps, max_prompt_tokens=budget)
        assert estimate_tokens(msgs) <= budget, budget
        assert seeds and set(seeds) <= set(seeds_full)
        assert "S0." in msgs[1]["content"] or "S0." in msgs[0]["content"]  # still real evidence


def test_analyze_fits_its_prompt_to_the_gateway_context_window(monkeypatch):
    from promptevo.optim.reflect.llm_json import estimate_tokens

    gw = scripted_gateway()
    monkeypatch.setattr(gw, "context_window", lambda: 4096)
    seen = []

    def reply(messages):
        seen.append(estimate_tokens(messages))
        return json.dumps(GOOD_REPLY)

    with ScriptedLLM.install(reply):
        a = analyze(two_stage_prompts(), [long_episode(s) for s in range(6)], gw, max_tokens=1024)
    assert a.ok
    assert seen and seen[0] <= 4096 - 1024


def test_a_prompt_longer_than_the_window_fails_the_call_not_the_run():
    """The gateway maps LiteLLM's ContextWindowExceededError to LLMContextError; the analyzer
    returns an unusable analysis (the loop falls back) instead of stopping the run."""
    import litellm

    from promptevo.llm import LLMConfigError, LLMContextError

    def too_long(messages):
        return litellm.ContextWindowExceededError(message="prompt too long", model="scripted",
                                                   llm_provider="fake")

    with ScriptedLLM.install(too_long):
        with pytest.raises(LLMContextError) as ei:
            scripted_gateway().complete([{"role": "user", "content": "hi"}], role="agent")
        assert isinstance(ei.value, LLMConfigError) and "too long" in str(ei.value)
        a = analyze(two_stage_prompts(), [episode(1, False)], scripted_gateway())
    assert not a.ok and "LLM call failed" in (a.error or "")


def test_context_window_known_for_local_models_unknown_for_the_test_double():
    from promptevo.llm import local as localmodel

    assert scripted_gateway().context_window() is None
    local = Gateway(LLMConfig(model="local/qwen2.5-coder-1.5b", cache_dir=None))
    assert local.context_window() == localmodel.OPTIONS.n_ctx
