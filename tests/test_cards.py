"""Tests of evidence cards: deterministic grouping, the one-call card writer, its fallback, and the
analyzer reading cards instead of raw trajectories.

The optimizer LLM is the ``fake/scripted`` test double (ScriptedLLM); episodes are hand-made
EpisodeResult records.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from promptevo.optim.reflect.analyzer import analyze, build_analyzer_messages
from promptevo.optim.reflect.cards import (
    ABORTED,
    ENDED,
    OUT_OF_STEPS,
    SUCCESS,
    CardSet,
    build_cards,
    build_cards_messages,
    group_episodes,
)
from promptevo.llm import Completion, Gateway, LLMConfig, ScriptedLLM
from promptevo.evaluation.rollout import EpisodeResult
from promptevo.segments import Prompt, PromptSet, Segment


def scripted_gateway() -> Gateway:
    return Gateway(LLMConfig(model="fake/scripted", cache_dir=None, num_retries=0))


def prompts() -> PromptSet:
    return PromptSet.of(
        {
            "descriptor": Prompt((Segment("role", "Describe the scene."), Segment("focus", "List objects."))),
            "actor": Prompt((Segment("role", "You choose the next action."), Segment("output_format", "<|ACTION|>a<|END|>"))),
        }
    )


def make_episode(seed: int, kind: str, steps: int = 8, obs_pad: int = 0) -> EpisodeResult:
    """kind: win | loop (ran out of steps, same step repeated) | invalid (ended, many invalid actions) |
    wander (ended, every step different) | abort (LLM error)."""
    traj = []
    for t in range(steps):
        obs = f"seed {seed} step {t}: a red ball {t % 5 + 1} steps forward, a wall {t % 3 + 1} steps left"
        action = "turn left" if t % 2 else "go forward"
        valid = True
        if kind == "loop" and t >= 1:
            obs, action = "a wall 1 step forward", "go forward"
        if kind == "invalid" and t % 2 == 0:
            action, valid = "fly away", False
        if kind == "win" and t == steps - 1:
            action = "pick up"
        traj.append(
            {
                "t": t,
                "observation": obs + (" / the room continues with grey floor tiles" * obs_pad),
                "action": action,
                "executed_action": action,
                "reply": f"<|ACTION|>{action}<|END|>",
                "parsed": True,
                "valid": valid,
                "reward": 0.9 if (kind == "win" and t == steps - 1) else 0.0,
                "done": t == steps - 1 and kind != "loop",
                "description": "details of the scene " * obs_pad if obs_pad else "ball ahead",
            }
        )
    success = kind == "win"
    return EpisodeResult(
        task="pickup", seed=seed, mission="pick up the red ball", success=success,
        progression=1.0 if success else (0.5 if kind == "wander" else 0.0),
        return_=0.9 if success else (0.1 * seed if kind == "wander" else 0.0), steps=steps,
        invalid_actions=sum(not s["valid"] for s in traj), prompt_tokens=10, completion_tokens=5, cost=0.0,
        llm_calls=steps, wall_s=0.1, trajectory=traj, truncated=kind == "loop",
        error="LLMError: model gave up after 3 attempts" if kind == "abort" else None,
    )


def batch() -> list[EpisodeResult]:
    kinds = {0: "win", 1: "loop", 2: "invalid", 3: "win", 4: "loop", 5: "wander", 6: "abort", 7: "wander"}
    return [make_episode(s, k, steps=(5 if k == "win" else 12) if k != "abort" else 2) for s, k in kinds.items()]


EXPECTED_KEYS = [
    SUCCESS,
    f"{OUT_OF_STEPS} (looping)",
    ENDED,
    f"{ENDED} (invalid actions)",
    ABORTED,
]


def good_reply(n_groups: int = 5, **extra) -> str:
    cards = [
        {"group": f"G{i}", "what_happened": f"observed behaviour number {i}", "where_failed": f"failure point {i}",
         "what_helped": "", "refs": [f"S{s}.1" for s in (1, 4, 99)], **extra}
        for i in range(1, n_groups + 1)
    ]
    return "Here are the cards:\n```json\n" + json.dumps({"cards": cards}) + "\n```"


# -- grouping --------------------------------------------------------------------------------------


def test_group_episodes_keys_counts_tags_and_stats():
    groups = group_episodes(batch())
    assert [g.key for g in groups] == EXPECTED_KEYS
    by = {g.key: g for g in groups}
    assert [(g.n, g.seeds) for g in groups] == [(2, [0, 3]), (2, [1, 4]), (2, [5, 7]), (1, [2]), (1, [6])]
    assert sum(g.n for g in groups) == 8 and abs(sum(g.share for g in groups) - 1.0) < 1e-9
    loop = by[f"{OUT_OF_STEPS} (looping)"]
    assert loop.tag == "looping" and loop.outcome == OUT_OF_STEPS
    assert loop.top_actions[0] == ("go forward", 24)  # 12 steps x 2 episodes, all "go forward"
    assert loop.mean_steps == 12.0 and loop.invalid_rate == 0.0
    inv = by[f"{ENDED} (invalid actions)"]
    assert inv.invalid_rate == 0.5 and ("fly away", 6) in inv.top_actions
    wins = by[SUCCESS]
    assert wins.mean_return == 0.9 and wins.mean_progression == 1.0 and wins.tag is None
    # representative: worst failure (lowest return, then lowest seed); best shortest win for successes
    assert by[ENDED].representative.seed == 5  # return 0.5 < 0.7
    assert loop.representative.seed == 1
    assert wins.representative.seed == 0


def test_group_episodes_is_deterministic_and_accepts_dicts():
    eps = batch()
    a = group_episodes(eps)
    b = group_episodes(list(reversed(eps)))
    c = group_episodes([e.to_dict() for e in eps])  # as stored in episodes.jsonl ("return" key)
    summary = lambda gs: [(g.key, g.seeds, g.n, round(g.mean_return, 6), g.top_actions, g.rep_seed) for g in gs]
    assert summary(a) == summary(b) == summary(c)
    # dicts without a "truncated" field: ran out of steps inferred from a last step that did not end it
    d = make_episode(9, "loop").to_dict()
    d.pop("truncated")
    assert group_episodes([d])[0].key == f"{OUT_OF_STEPS} (looping)"
    assert group_episodes([]) == []


# -- build_cards -----------------------------------------------------------------------------------


def test_build_cards_with_a_good_reply():
    seen: list[list[dict]] = []

    def responder(messages):
        seen.append(messages)
        return good_reply()

    eps = batch()
    with ScriptedLLM.install(responder):
        cs = build_cards(prompts(), eps, scripted_gateway(), env_instructions="ENVRULES")
    assert cs.ok and cs.error is None and len(seen) == 1
    assert cs.usage["calls"] == 1 and cs.usage["prompt_tokens"] > 0
    sys_msg, user_msg = seen[0][0]["content"], seen[0][1]["content"]
    assert "ENVRULES" in sys_msg and "evidence cards" in sys_msg
    for i, key in enumerate(EXPECTED_KEYS, 1):
        assert f"## G{i}: {key}" in user_msg
    assert user_msg.count("Representative episode") == 5  # one compact trajectory per group
    assert [c.group for c in cs.cards] == EXPECTED_KEYS
    assert all(c.source == "llm" for c in cs.cards)
    assert cs.cards[0].what_happened == "observed behaviour number 1"
    # refs are kept only for steps of the card's own episodes: S1.1/S4.1 belong to the looping group
    assert cs.cards[1].refs == ["S1.1", "S4.1"]
    assert cs.cards[0].refs == []
    assert any("S99.1" in w for w in cs.warnings)
    assert cs.seeds == list(range(8)) and cs.n_episodes == 8
    assert cs.prompt_fingerprint == prompts().fingerprint()
    # JSON-serializable round trip (stored in a run folder)
    again = CardSet.from_dict(json.loads(json.dumps(cs.to_dict())))
    assert again == cs and again.render() == cs.render()
    text = cs.render()
    assert "[G2] failure: ran out of steps (looping)" in text and "refs: S1.1, S4.1" in text
    assert "observed behaviour number 3" in text and "(from statistics only)" not in text


def test_card_numbers_come_from_the_data_not_the_llm():
    def responder(messages):
        return good_reply(n=99, seeds=[42], share=0.99, mean_return=7.5, mean_steps=1, invalid_rate=0.9)

    with ScriptedLLM.install(responder):
        cs = build_cards(prompts(), batch(), scripted_gateway())
    assert cs.ok
    groups = group_episodes(batch())
    for card, g in zip(cs.cards, groups, strict=True):
        assert (card.n, card.seeds) == (g.n, g.seeds)
        assert card.mean_return == round(g.mean_return, 4) and card.mean_steps == round(g.mean_steps, 2)
        assert card.invalid_rate == round(g.invalid_rate, 4) and card.share == round(g.share, 4)
    assert "99" not in cs.render().split("refs")[0] and "7.5" not in cs.render()


def test_garbage_reply_falls_back_to_statistics_cards():
    calls = []

    def responder(messages):
        calls.append(messages)
        return "I am not sure what you want {broken"

    eps = batch()
    with ScriptedLLM.install(responder):
        cs = build_cards(prompts(), eps, scripted_gateway())
    assert not cs.ok and cs.error and len(calls) == 2  # one corrective retry, then give up
    assert "broken" in cs.raw
    assert [c.group for c in cs.cards] == EXPECTED_KEYS  # still one card per group
    assert all(c.source == "fallback" and c.what_happened for c in cs.cards)
    loop = cs.cards[1]
    assert "repeated action 'go forward'" in loop.where_failed and loop.refs == ["S1.1", "S1.2"]
    inv = cs.cards[3]
    assert "50% of the actions were invalid" in inv.where_failed and inv.refs == ["S2.0", "S2.2"]
    assert "reached the goal" in cs.cards[0].what_helped
    assert "model gave up after 3 attempts" in cs.cards[4].where_failed  # the episode's own error
    assert "(from statistics only)" in cs.render()
    assert CardSet.from_dict(cs.to_dict()) == cs


def test_partial_reply_keeps_the_llm_cards_and_fills_the_rest():
    def responder(messages):
        return json.dumps({"cards": [{"group": "failure: ran out of steps (looping)", "what_happened": "walks into the wall again and again",
                                      "refs": ["S4.3-11 (same step repeated 9 times)"]}]})

    with ScriptedLLM.install(responder):
        cs = build_cards(prompts(), batch(), scripted_gateway())
    assert cs.ok  # the reply was usable
    assert [c.source for c in cs.cards] == ["fallback", "llm", "fallback", "fallback", "fallback"]
    assert cs.cards[1].what_happened == "walks into the wall again and again" and cs.cards[1].refs == ["S4.3"]
    assert sum("no usable card" in w for w in cs.warnings) == 4


def test_cards_call_uses_role_cards_and_the_reply_schema():
    class Recorder:
        def __init__(self, model):
            self.config = SimpleNamespace(model=model)
            self.kwargs: list[dict] = []

        def complete(self, messages, **kw):
            self.kwargs.append(kw)
            return Completion(text=good_reply(), prompt_tokens=3, completion_tokens=2, cost=0.0, latency_s=0.0,
                              cached=False, model=self.config.model)

    local = Recorder("local/qwen2.5-coder-1.5b")
    assert build_cards(prompts(), batch(), local, max_tokens=512).ok
    assert local.kwargs[0]["role"] == "cards"
    assert local.kwargs[0]["response_format"]["json_schema"]["name"] == "CardsReply"
    assert local.kwargs[0]["max_tokens"] == 512
    remote = Recorder("openai/gpt-4o-mini")
    assert build_cards(prompts(), batch(), remote, constrained=False).ok and "response_format" not in remote.kwargs[0]
    empty = build_cards(prompts(), [], remote)
    assert not empty.ok and empty.cards == [] and len(remote.kwargs) == 1  # no call for no episodes


# -- the analyzer reads the cards ------------------------------------------------------------------


def _fallback_cards(eps) -> CardSet:
    with ScriptedLLM.install(lambda m: good_reply(len(group_episodes(eps)))):
        return build_cards(prompts(), eps, scripted_gateway())


def test_analyzer_messages_with_evidence_show_cards_not_trajectories():
    eps = batch()
    cs = _fallback_cards(eps)
    msgs, seeds = build_analyzer_messages(prompts(), eps, evidence=cs.render())
    user = msgs[1]["content"]
    assert "Evidence cards" in user and "summarizes one group of episodes with the same outcome" in user
    assert cs.render() in user
    assert "=== Episode" not in user and "obs:" not in user and "Episodes:\n" not in user
    assert "<<actor.role>>" in user  # the prompt segments are still there
    assert seeds == list(range(8))
    raw_msgs, raw_seeds = build_analyzer_messages(prompts(), eps)
    assert "=== Episode seed=" in raw_msgs[1]["content"] and "Evidence cards" not in raw_msgs[1]["content"]
    assert len(raw_seeds) == 6  # select_episodes' default

    seen = []

    def responder(messages):
        seen.append(messages)
        return json.dumps({"failure_modes": ["walks into walls"], "attributions": [], "proposals": []})

    with ScriptedLLM.install(responder):
        a = analyze(prompts(), eps, scripted_gateway(), evidence=cs)  # a CardSet is rendered
    assert a.ok and a.seeds == list(range(8)) and a.failure_modes == ["walks into walls"]
    assert cs.render() in seen[0][1]["content"]


def test_analyzer_prompt_with_cards_is_shorter_than_with_raw_trajectories():
    eps = [make_episode(s, k, steps=60, obs_pad=6) for s, k in enumerate(["loop", "wander", "loop", "wander", "invalid", "win"])]
    cards_prompt_chars = []

    def responder(messages):
        cards_prompt_chars.append(sum(len(m["content"]) for m in messages))
        return good_reply(len(group_episodes(eps)))

    with ScriptedLLM.install(responder):
        cs = build_cards(prompts(), eps, scripted_gateway())
    assert cs.ok
    raw, _ = build_analyzer_messages(prompts(), eps)
    with_cards, _ = build_analyzer_messages(prompts(), eps, evidence=cs.render())
    raw_chars = sum(len(m["content"]) for m in raw)
    card_chars = sum(len(m["content"]) for m in with_cards)
    assert card_chars < raw_chars / 3
    # even counting the cards call itself, the optimizer reads less than with raw trajectories
    assert card_chars + cards_prompt_chars[0] < raw_chars
    # and the cards call shows compact trajectories (12 steps, short observations)
    msgs, _ = build_cards_messages(eps)
    assert msgs[1]["content"].count(" obs: ") <= 12 * len(group_episodes(eps))


def test_cards_prompt_is_shortened_to_fit_the_models_window(monkeypatch):
    from promptevo.optim.reflect.llm_json import estimate_tokens

    eps = [make_episode(s, k, steps=40, obs_pad=8) for s, k in enumerate(["loop", "invalid", "wander", "win"])]
    full, _ = build_cards_messages(eps)
    gw = scripted_gateway()
    budget_window = 1024 + 64 + estimate_tokens(full) * 2 // 3  # room for two thirds of the full prompt
    monkeypatch.setattr(gw, "context_window", lambda: budget_window)
    seen: list[int] = []

    def responder(messages):
        seen.append(estimate_tokens(messages))
        return good_reply(len(group_episodes(eps)))

    with ScriptedLLM.install(responder):
        cs = build_cards(prompts(), eps, gw, max_tokens=1024)
    assert cs.ok and seen
    assert seen[0] <= budget_window - 1024 - 64 < estimate_tokens(full)
