"""Dense progress (the BabyAI bot's remaining plan) and state keys of the BabyAI and MAPF text envs."""

from __future__ import annotations

import itertools
import logging
import random

import pytest

from promptevo.envs.babyai import bot as babyai_bot
from promptevo.envs.babyai.env import (
    ACTIONS,
    BABYAI_GOALS,
    BabyAITextEnv,
    bot_action,
    plan_length,
)
from promptevo.envs.mapf.env import MAPFFrozenLakeEnv, format_joint_action
from promptevo.envs.mapf.generator import make_mapf_config


@pytest.fixture(autouse=True)
def _fresh_start_cache():
    babyai_bot.clear_start_cache()
    yield
    babyai_bot.clear_start_cache()


@pytest.mark.parametrize("goal", BABYAI_GOALS)
def test_progress_is_zero_at_reset_rises_along_the_bot_and_is_one_on_success(goal):
    env = BabyAITextEnv(goal)
    for seed in (0, 1):
        env.reset(seed)
        assert env.progress() == 0.0
        start, end = env.plan_lengths()
        assert start == end and start >= 1
        seen = [0.0]
        result = None
        while result is None or not result.done:
            result = env.step(bot_action(env))
            p = env.progress()
            assert p is not None and p >= seen[-1] - 1e-9, (goal, seed, seen, p)
            seen.append(p)
        assert result.info["success"] and seen[-1] == 1.0
        assert env.plan_lengths() == (start, 0)
        assert len(set(seen)) > 2  # intermediate values, not just 0 and 1


def test_plan_length_leaves_the_level_alone():
    env = BabyAITextEnv("putnext")
    text, _ = env.reset(3)
    rng_state = env.level.np_random.bit_generator.state
    pose = (env.level.agent_pos, env.level.agent_dir, env.level.step_count)
    assert plan_length(env.level) >= 1
    assert (env.level.agent_pos, env.level.agent_dir, env.level.step_count) == pose
    assert env.level.np_random.bit_generator.state == rng_state
    assert "\n".join(env.descriptions) == text


def test_progress_and_state_key_do_not_change_the_game():
    rng = random.Random(5)
    actions = [rng.choice(ACTIONS) for _ in range(40)]
    plain, probed = BabyAITextEnv("pick_up_seq_go_to"), BabyAITextEnv("pick_up_seq_go_to")
    a, b = plain.reset(11), probed.reset(11)
    assert a[0] == b[0]
    for action in actions:
        probed.state_key()
        probed.progress()
        ra, rb = plain.step(action), probed.step(action)
        assert (ra.observation, ra.reward, ra.done) == (rb.observation, rb.reward, rb.done)
        if ra.done:
            break


def test_progress_when_holding_the_object_to_move():
    env = BabyAITextEnv("putnext")
    env.reset(0)
    before = None
    while env.level.carrying is None:
        before = env.progress()
        env.step(bot_action(env))
    assert env.progress() > before  # picking up the object to move is progress, not a failed plan


def test_state_key_round_trip_and_moves():
    env = BabyAITextEnv("goto")
    env.reset(0)
    k0 = env.state_key()
    hash(k0)
    env.step("turn left")
    assert env.state_key() != k0
    env.step("turn right")
    assert env.state_key() == k0
    env.step("go forward")  # seed 0 has open floor ahead
    assert env.state_key() != k0
    assert BabyAITextEnv("goto").state_key() is None  # before reset


def test_state_key_sees_pickups_and_drops():
    env = BabyAITextEnv("putnext")
    env.reset(0)
    while env.level.carrying is None:
        env.step(bot_action(env))
    holding = env.state_key()
    env.step("drop")
    dropped = env.state_key()
    assert dropped != holding
    env.step("pick up")
    assert env.state_key() == holding


def test_bot_failure_gives_no_progress_and_a_warning(monkeypatch, caplog):
    class BrokenBot:
        def __init__(self, level):
            raise RuntimeError("bot exploded")

    env = BabyAITextEnv("goto")
    env.reset(2)
    env.step("turn left")
    monkeypatch.setattr(babyai_bot, "BabyAIBot", BrokenBot)
    with caplog.at_level(logging.WARNING, logger="promptevo.envs.babyai.bot"):
        assert env.progress() is None
    assert env.plan_lengths() == (None, None)
    messages = [r.getMessage() for r in caplog.records]
    assert messages and all("bot exploded" in m and "\n" not in m for m in messages)


# -- MAPF ----------------------------------------------------------------------------------------------
def _mapf(slip: float) -> MAPFFrozenLakeEnv:
    return MAPFFrozenLakeEnv(make_mapf_config({"rows": 5, "cols": 5, "n_agents": 2, "slip_prob": slip, "max_steps": 30}))


def test_mapf_state_key_none_with_slip():
    env = _mapf(0.2)
    env.reset(0)
    assert env.state_key() is None


def test_mapf_state_key_and_progress_follow_the_plan():
    env = _mapf(0.0)
    assert env.state_key() is None and env.progress() is None  # before reset
    env.reset(1)
    assert env.progress() == 0.0
    k0 = env.state_key()
    env.step(format_joint_action(["stay", "stay"]))
    assert env.state_key() == k0
    env.reset(1)
    seen = [0.0]
    result = None
    for moves in env.instance.plan.joint_moves():
        result = env.step(format_joint_action(moves))
        seen.append(env.progress())
        if result.done:
            break
    assert result.info["success"] and seen[-1] == 1.0
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(seen)) and len(set(seen)) > 2
    assert env.state_key() != k0
