"""Rollout: episode records, trajectory compaction, LLM errors, results files, real BabyAI success."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from promptevo.agents import make_agent
from promptevo.envs.base import TextEnv
from promptevo.llm import Completion, Gateway, LLMConfig, LLMConfigError, LLMError, ScriptedLLM
from promptevo.evaluation.store import RunWriter, read_episodes
from promptevo.fileio import write_json_atomic
from promptevo.evaluation.rollout import (
    EpisodeResult,
    run_episode,
    run_episodes,
)
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import TaskConfig, load_task
from doubles import FakeSeedEnv

PROMPTS = PromptSet.of({"system": Prompt((Segment("role", "Play. {mission}"), Segment("format", "Tag it.")))})


class FakeGatewayDouble:
    """Test double for Gateway: replies from a function of the messages; raises what it returns."""

    def __init__(self, fn):
        self.fn = fn
        self.config = LLMConfig(model="fake/scripted", cache_dir=None)

    def complete(self, messages, **kw) -> Completion:
        out = self.fn(messages)
        if isinstance(out, BaseException):
            raise out
        return Completion(text=out, prompt_tokens=10, completion_tokens=3, cost=0.001, latency_s=0.01,
                          cached=False, model="fake/scripted")


TASK = TaskConfig(name="fake", family="babyai", env={"goal": "goto"})


def fake_env(_task: TaskConfig) -> TextEnv:
    return FakeSeedEnv()


def test_episode_record_and_trajectory_compaction():
    replies = iter(["<|ACTION|>wait<|END|>", "hmm", "<|ACTION|>win<|END|>"])
    gw = FakeGatewayDouble(lambda m: next(replies))
    r = run_episode(TASK, lambda: make_agent("robust-cot", gw, PROMPTS), 7, env_factory=fake_env)
    assert (r.success, r.steps, r.progression, r.return_) == (True, 3, 1.0, 1.0)
    assert (r.invalid_actions, r.parse_failures, r.llm_calls) == (1, 1, 3)
    assert (r.prompt_tokens, r.completion_tokens) == (30, 9) and r.cost == pytest.approx(0.003)
    assert r.mission == "win game 7" and r.agent == "robust-cot" and r.error is None and not r.truncated
    assert r.env_stats == {"t": 3}
    t0, t1 = r.trajectory[0], r.trajectory[1]
    assert t0["observation"] == "seed 7 step 0" and t0["action"] == "wait" and t0["valid"] and t0["parsed"]
    assert "messages" in t0["calls"][0] and t0["calls"][0]["n_messages"] == 2
    assert "messages" not in t1["calls"][0]
    assert t1["calls"][0]["last_message"]["content"].startswith("Current Observation:\nseed 7 step 1")
    assert len(t1["calls"][0]["messages_sha"]) == 16
    assert (t1["parsed"], t1["valid"], t1["executed_action"]) == (False, False, "wait")
    d = r.to_dict()
    assert "return" in d and "return_" not in d
    assert EpisodeResult.from_dict(json.loads(json.dumps(d))) == r


def test_task_max_steps_caps_the_episode():
    gw = FakeGatewayDouble(lambda m: "<|ACTION|>wait<|END|>")
    task = TaskConfig(name="fake", family="babyai", env={"goal": "goto"}, max_steps=2)
    r = run_episode(task, lambda: make_agent("robust-cot", gw, PROMPTS), 0, env_factory=fake_env)
    assert r.steps == 2 and r.truncated and not r.success


def test_llm_error_marks_only_that_episode():
    def fn(messages):
        if "seed 2 step 1" in messages[-1]["content"]:
            return LLMError("server went away")
        return "<|ACTION|>wait<|END|>"

    gw = FakeGatewayDouble(fn)
    seen: list[int] = []
    res = run_episodes(TASK, lambda: make_agent("robust-cot", gw, PROMPTS), [1, 2, 3], concurrency=3,
                       env_factory=fake_env, on_result=lambda r: seen.append(r.seed))
    assert [r.seed for r in res] == [1, 2, 3] and sorted(seen) == [1, 2, 3]
    assert res[1].error == "LLMError: server went away" and res[1].steps == 1
    assert res[0].error is None and res[2].error is None and res[0].steps == 6


def test_llm_config_error_aborts_the_run():
    gw = FakeGatewayDouble(lambda m: LLMConfigError("no API key for openai"))
    with pytest.raises(LLMConfigError):
        run_episodes(TASK, lambda: make_agent("robust-cot", gw, PROMPTS), [1, 2], env_factory=fake_env)


def test_run_writer_files(tmp_path: Path):
    gw = FakeGatewayDouble(lambda m: "<|ACTION|>win<|END|>")
    w = RunWriter(tmp_path / "run")
    res = run_episodes(TASK, lambda: make_agent("robust-cot", gw, PROMPTS), [4, 5], env_factory=fake_env,
                       on_result=w.add)
    w.write_summary({"n": len(res)})
    w.write_config({"agent": "robust-cot"})
    lines = (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 2 and {json.loads(x)["seed"] for x in lines} == {4, 5}
    assert all(json.loads(x)["key"] == "fake" and json.loads(x)["result"]["success"] for x in lines)
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == {"n": 2}
    assert not list((tmp_path / "run").glob("*.tmp"))
    with open(tmp_path / "run" / "episodes.jsonl", "a") as f:
        f.write('{"key": "fake", "seed": 9, "resu')  # a crash mid-write
    assert sorted(r.seed for r in read_episodes(tmp_path / "run" / "episodes.jsonl")) == [4, 5]
    write_json_atomic(tmp_path / "x.json", {"a": 1})
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}


def test_real_babyai_episode_with_scripted_bot_succeeds():
    """End-to-end on the real env: a ScriptedLLM that answers with minigrid's bot action wins."""
    from promptevo.envs.babyai.env import bot_action
    from promptevo.tasks import make_env

    task = load_task("pickup")
    holder: dict[str, Any] = {}

    def env_factory(t: TaskConfig) -> TextEnv:
        holder["env"] = make_env(t)
        return holder["env"]

    gw = Gateway(LLMConfig(model="fake/scripted", cache_dir=None))
    with ScriptedLLM.install(lambda m: f"Reasoning.\n<|ACTION|>{bot_action(holder['env'])}<|END|>"):
        r = run_episode(task, lambda: make_agent("robust-cot", gw, task=task), 0, env_factory=env_factory)
    assert r.success and r.progression == 1.0 and r.return_ > 0 and r.steps < 64
    assert r.mission == "pick up the green key"
    assert r.invalid_actions == 0 and r.llm_calls == r.steps


def test_real_random_agent_on_mapf():
    task = load_task("mapf-single")
    res = run_episodes(task, lambda: make_agent("random", None, seed=3), [0, 1], concurrency=2)
    assert all(r.error is None and r.llm_calls == 0 and r.invalid_actions == 0 for r in res)
    assert all(0.0 <= r.progression <= 1.0 for r in res)


def test_evaluate_returns_results_and_summary(tmp_path: Path):
    from promptevo.evaluation.rollout import evaluate

    gw = FakeGatewayDouble(lambda m: "<|ACTION|>win<|END|>" if "seed 1 " in m[-1]["content"] else "no")
    ticks: list[tuple[int, int]] = []
    res, summ = evaluate(TASK, lambda: make_agent("robust-cot", gw, PROMPTS), [1, 2], concurrency=2,
                         writer=RunWriter(tmp_path), env_factory=fake_env,
                         progress=lambda done, total, r: ticks.append((done, total)))
    assert [r.success for r in res] == [True, False]
    assert summ["successes"] == 1 and summ["n"] == 2 and sorted(ticks) == [(1, 2), (2, 2)]
    assert json.loads((tmp_path / "summary.json").read_text())["task"] == "fake"
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 2
