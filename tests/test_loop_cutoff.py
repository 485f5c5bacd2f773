"""Lossless loop cut-off: a deterministic agent in a deterministic env that repeats a state can only cycle;
the rollout stops asking the LLM and replays the cycle to the step limit. Replaying the same episodes in
full gives the same success, return, steps and progress."""

from __future__ import annotations

import pytest

from promptevo.agents import make_agent
from promptevo.evaluation.rollout import run_episode
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import load_task

PROMPTS = PromptSet.of({"system": Prompt((Segment("role", "Play. {mission}"), Segment("format", "Tag it.")))})


def policy(messages):
    """A deterministic policy test double: its action depends only on the newest observation."""
    obs = messages[-1]["content"]
    if "1 step forward" in obs and "wall 1 step forward" not in obs:
        return "<|ACTION|>go forward<|END|>"
    if "wall 1 step forward" in obs:
        return "<|ACTION|>turn left<|END|>"
    return "<|ACTION|>go forward<|END|>"


@pytest.mark.parametrize("task_name,history", [("goto", 1), ("goto", 3), ("pickup", 2), ("mapf-open", 1)])
def test_cut_episodes_equal_full_replays(task_name, history):
    task = load_task(task_name)
    gw = Gateway(LLMConfig(model="fake/scripted", cache_dir=None, temperature=0.0))
    cut = full = 0
    saved = 0
    with ScriptedLLM.install(policy):
        for seed in range(12):
            a = run_episode(task, lambda: make_agent("robust-cot", gw, PROMPTS, history=history), seed)
            b = run_episode(task, lambda: make_agent("robust-cot", gw, PROMPTS, history=history), seed,
                            loop_cutoff=False)
            assert (a.success, a.return_, a.steps, a.progression, a.progress, a.invalid_actions) == \
                   (b.success, b.return_, b.steps, b.progression, b.progress, b.invalid_actions), seed
            assert [s["action"] for s in a.trajectory] == [s["action"] for s in b.trajectory]
            if a.loop_cut:
                cut += 1
                saved += a.loop_cut["replayed_steps"]
                assert not a.success and a.llm_calls < b.llm_calls
                assert a.loop_cut["at"] + a.loop_cut["replayed_steps"] == a.steps
                assert all(s.get("replayed") for s in a.trajectory[a.loop_cut["at"]:])
            full += 1
    if task_name != "mapf-open":  # MAPF observations carry a step counter: the agent's input never repeats
        assert cut > 0 and saved > 0  # the scripted policy loops on some seeds


def test_no_cut_off_when_the_agent_samples():
    """temperature > 0 without the response cache: replies may differ, so a repeated state proves nothing."""
    task = load_task("goto")
    gw = Gateway(LLMConfig(model="fake/scripted", cache_dir=None, temperature=0.7))
    with ScriptedLLM.install(policy):
        r = run_episode(task, lambda: make_agent("robust-cot", gw, PROMPTS, history=1), 0)
    assert r.loop_cut is None and r.llm_calls == r.steps


def test_random_agent_is_never_cut():
    task = load_task("goto")
    r = run_episode(task, lambda: make_agent("random", None, seed=1), 3)
    assert r.loop_cut is None
