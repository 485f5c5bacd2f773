"""The toytext env family: gymnasium's FrozenLake, Taxi and CliffWalking as text envs."""

from __future__ import annotations

import random
from collections import deque

import pytest

from promptevo.agents import default_prompts, make_agent
from promptevo.agents.base import render_module
from promptevo.envs.base import TextEnv
from promptevo.envs.registry import check_params, get_family, make_env as registry_make_env
from promptevo.evaluation.rollout import run_episodes
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.tasks import TaskError, load_task, make_env

# A shortest path on gymnasium's 4x4 map (SFFF / FHFH / FFFH / HFFG), checked by BFS below.
FROZENLAKE_SOLUTION = ["down", "down", "right", "down", "right", "right"]
MAP_4X4 = ["SFFF", "FHFH", "FFFH", "HFFG"]
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


def toytext(**params):
    return registry_make_env("toytext", params)


def bfs_path(grid: list[str]) -> list[str]:
    """A shortest list of moves from S to G avoiding H (the test's own BFS)."""
    start = next((r, row.index("S")) for r, row in enumerate(grid) if "S" in row)
    prev: dict = {start: None}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        if grid[cur[0]][cur[1]] == "G":
            path = []
            while prev[cur] is not None:
                cur, move = prev[cur]
                path.append(move)
            return path[::-1]
        for move, (dr, dc) in MOVES.items():
            n = (cur[0] + dr, cur[1] + dc)
            if 0 <= n[0] < len(grid) and 0 <= n[1] < len(grid[0]) and grid[n[0]][n[1]] != "H" and n not in prev:
                prev[n] = (cur, move)
                queue.append(n)
    raise AssertionError("no path")


# -- loading ---------------------------------------------------------------------------------------
def test_task_loads_through_the_registry():
    task = load_task("frozenlake")
    assert task.family == "toytext"
    assert task.env == {"id": "FrozenLake-v1", "map_name": "4x4", "is_slippery": False}
    assert get_family("toytext").description
    env = make_env(task)
    assert isinstance(env, TextEnv) and env.family == "toytext"
    assert env.valid_actions == ["left", "down", "right", "up"] and env.default_action == "left"
    assert env.max_steps == 100


@pytest.mark.parametrize("name, limit, actions", [
    ("frozenlake", 100, 4), ("frozenlake-slippery", 100, 4), ("taxi", 200, 6), ("cliffwalking", 100, 4)])
def test_shipped_tasks(name, limit, actions):
    task = load_task(name)
    assert task.seed_list("train")[0] == 0 and task.seed_list("validation")[0] == 50000
    assert task.seed_list("test")[0] == 100000
    env = make_env(task)
    obs, info = env.reset(task.seeds("test", 1)[0])
    assert env.max_steps == limit and len(env.valid_actions) == actions
    assert info["mission"] == env.mission and env.mission
    assert "row" in obs and "column" in obs
    assert "Actions:" in env.instructions() and str(limit) in env.instructions()


def test_step_limits_follow_gymnasium_or_max_steps():
    assert toytext(id="FrozenLake-v1", map_name="8x8").max_steps == 200
    assert toytext(id="FrozenLake8x8-v1").max_steps == 200
    env = toytext(id="FrozenLake-v1", is_slippery=False, max_steps=3)
    env.reset(0)
    results = [env.step("left") for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True] and results[-1].done
    assert "step limit" in results[-1].observation
    with pytest.raises(RuntimeError):
        env.step("left")


# -- FrozenLake --------------------------------------------------------------------------------------
def test_frozenlake_solution_reaches_the_goal():
    assert len(bfs_path(MAP_4X4)) == len(FROZENLAKE_SOLUTION)
    env = make_env(load_task("frozenlake"))
    obs, _ = env.reset(0)
    assert "You are at row 0, column 0" in obs and "goal G is at row 3, column 3" in obs
    assert "(1,1), (1,3), (2,3), (3,0)" in obs
    progress = [env.progress()]
    ret = 0.0
    for i, a in enumerate(FROZENLAKE_SOLUTION):
        res = env.step(a)
        ret += res.reward
        progress.append(env.progress())
        assert res.info["valid_action"] and res.info["executed_action"] == a
        assert res.done == (i == len(FROZENLAKE_SOLUTION) - 1)
    assert res.terminated and res.reward == 1.0 and ret == 1.0
    assert res.info["success"] and res.info["progression"] == 1.0 and env.progression == 1.0
    assert "reached the goal" in res.observation
    assert progress == sorted(progress) and progress[0] == 0.0 and progress[-1] == 1.0
    stats = env.episode_stats()
    assert stats["success"] and stats["steps"] == 6 and stats["optimal_steps"] == 6 and stats["return"] == 1.0


def test_hole_ends_the_episode_and_progress_counts_from_the_last_safe_cell():
    env = toytext(id="FrozenLake-v1", is_slippery=False)
    env.reset(0)
    env.step("right")  # (0,1): one step closer (distance 6 -> 5)
    res = env.step("down")  # (1,1) is a hole
    assert res.terminated and not res.info["success"] and res.reward == 0.0
    assert "hole" in res.observation and env.progression == 0.0
    assert env.progress() == pytest.approx(1 / 6)
    assert env.episode_stats()["holes"] == 1


def test_invalid_actions_are_flagged_and_replaced():
    env = toytext(id="FrozenLake-v1", is_slippery=False)
    env.reset(0)
    res = env.step("jump over the hole")
    assert res.info["valid_action"] is False and res.info["executed_action"] == "left"
    assert "not a valid action" in res.observation and "left was played" in res.observation
    assert "edge" in res.observation  # left from (0,0) bumps into the edge
    for text, meant in [("Right.", "right"), ("EAST", "right"), ("move down", "down"), ("South", "down")]:
        res = env.step(text)
        assert res.info["valid_action"] and res.info["executed_action"] == meant
    assert env.step("pickup").info["valid_action"] is False  # a Taxi action is not a FrozenLake action
    assert env.episode_stats()["invalid_actions"] == 2


def test_reset_is_deterministic_per_seed():
    for params in ({"id": "FrozenLake-v1", "is_slippery": True}, {"id": "Taxi-v4", "is_rainy": True}):
        runs = []
        for seed in (7, 7, 8):
            env = toytext(**params)
            obs = [env.reset(seed)[0]]
            rng = random.Random(0)
            for _ in range(15):
                res = env.step(rng.choice(env.valid_actions))
                obs.append(res.observation)
                if res.done:
                    break
            runs.append(obs)
        assert runs[0] == runs[1]
    starts = {toytext(id="Taxi-v4").reset(s)[0] for s in range(10)}
    assert len(starts) > 1  # the seed picks Taxi's start


def test_state_key_only_when_deterministic():
    env = toytext(id="FrozenLake-v1", is_slippery=False)
    assert env.state_key() is None  # before reset
    env.reset(0)
    env.step("right")
    assert env.state_key() == 1 == env.state
    slippery = toytext(id="FrozenLake-v1", is_slippery=True)
    slippery.reset(0)
    assert slippery.state_key() is None and slippery.deterministic is False
    assert toytext(id="FrozenLake-v1", is_slippery=True, success_rate=1.0).deterministic
    taxi = toytext(id="Taxi-v4")
    taxi.reset(1)
    assert taxi.state_key() == taxi.state
    for params in ({"is_rainy": True}, {"fickle_passenger": True}):
        t = toytext(id="Taxi-v4", **params)
        t.reset(1)
        assert t.state_key() is None
    assert toytext(id="CliffWalking-v1").deterministic and not toytext(id="CliffWalkingSlippery-v1").deterministic


def test_slippery_frozenlake_reports_slips():
    env = toytext(id="FrozenLake-v1", map_name="8x8", is_slippery=True)
    env.reset(3)
    texts = []
    for _ in range(30):
        res = env.step("right")
        texts.append(res.observation)
        if res.done:
            break
    assert env.episode_stats()["slips"] > 0 and any("slipped" in t for t in texts)
    assert "probability 1/3" in env.instructions()


# -- Taxi --------------------------------------------------------------------------------------------
def taxi_plan(env) -> list[str]:
    """Shortest action list to a delivery, by BFS over gymnasium's own transition table."""
    table = env.gym_env.unwrapped.P
    prev = {env.state: None}
    queue = deque([env.state])
    while queue:
        s = queue.popleft()
        for a, outs in table[s].items():
            _, n, _, done = outs[0]
            if done:
                path = [env.valid_actions[a]]
                while prev[s] is not None:
                    s, act = prev[s]
                    path.append(act)
                return path[::-1]
            if n not in prev:
                prev[n] = (s, env.valid_actions[a])
                queue.append(n)
    raise AssertionError("no plan")


def test_taxi_decodes_and_delivers():
    env = make_env(load_task("taxi"))
    obs, info = env.reset(5)
    r, c, p, d = env.decode()
    assert (r, c, p, d) == tuple(env.gym_env.unwrapped.decode(env.state))
    assert f"The taxi is at row {r}, column {c}" in obs and "empty" in obs
    assert f"pad {'RGYB'[p]}" in info["mission"] and f"pad {'RGYB'[d]}" in info["mission"]
    assert env.valid_actions == ["down", "up", "right", "left", "pickup", "dropoff"]
    plan = taxi_plan(env)
    assert env.episode_stats()["optimal_steps"] == len(plan)
    ret, progress = 0.0, [env.progress()]
    for a in plan:
        res = env.step(a)
        ret += res.reward
        progress.append(env.progress())
        if a == "pickup":
            assert "got into the taxi" in res.observation and "with the passenger inside" in res.observation
    assert res.terminated and res.info["success"] and env.progression == 1.0
    assert ret == 20 - (len(plan) - 1)
    assert progress == sorted(progress) and progress[0] == 0.0 and progress[-1] == 1.0


def test_taxi_illegal_pickup_costs_ten():
    env = toytext(id="Taxi-v4")
    seed = next(s for s in range(50) if (env.reset(s) or True) and env.decode()[:2] not in env.locs)
    env.reset(seed)
    res = env.step("pick up")
    assert res.info["executed_action"] == "pickup" and res.reward == -10
    assert "not possible" in res.observation and env.episode_stats()["illegal"] == 1


def test_taxi_random_episode_ends_within_its_limit():
    env = toytext(id="Taxi-v4")
    env.reset(11)
    rng = random.Random(11)
    for t in range(env.max_steps + 1):
        res = env.step(rng.choice(env.valid_actions))
        if res.done:
            break
    assert res.done and t < env.max_steps
    assert res.terminated or res.truncated and t == env.max_steps - 1


# -- CliffWalking -------------------------------------------------------------------------------------
def test_cliffwalking_goal_and_cliff():
    env = make_env(load_task("cliffwalking"))
    obs, _ = env.reset(0)
    assert "columns 1 to 10" in obs and "right: CLIFF C" in obs
    res = env.step("right")  # onto the cliff: -100, back to the start, the episode goes on
    assert res.reward == -100 and not res.done and env.state == 36 and "cliff" in res.observation
    ret = 0.0
    for a in ["up"] + ["right"] * 11 + ["down"]:
        res = env.step(a)
        ret += res.reward
    assert res.terminated and res.info["success"] and ret == -13 and env.progress() == 1.0
    assert env.episode_stats()["cliff_falls"] == 1 and env.episode_stats()["optimal_steps"] == 13


# -- bad parameters ---------------------------------------------------------------------------------
@pytest.mark.parametrize("env_table, message", [
    ('id = "Pong-v5"', "unknown toytext id 'Pong-v5'"),
    ('is_slippery = false', "needs id"),
    ('id = "FrozenLake-v1"\nslippery = true', "unknown FrozenLake-v1 parameter 'slippery'"),
    ('id = "Taxi-v4"\nis_slippery = true', "unknown Taxi-v4 parameter 'is_slippery'"),
    ('id = "FrozenLake-v1"\nis_slippery = "yes"', "is_slippery must be true or false"),
    ('id = "FrozenLake-v1"\nmap_name = "5x5"', "map_name must be one of 4x4, 8x8"),
    ('id = "FrozenLake-v1"\ndesc = ["SH", "HG"]', "no goal G can be reached"),
    ('id = "CliffWalking-v1"\nmax_steps = 0', "max_steps must be an integer >= 1"),
])
def test_bad_env_parameters_fail_on_load(tmp_path, monkeypatch, env_table, message):
    (tmp_path / "bad.toml").write_text(f'name = "bad"\nfamily = "toytext"\n\n[env]\n{env_table}\n')
    monkeypatch.setenv("PROMPTEVO_TASKS_DIR", str(tmp_path))
    with pytest.raises(TaskError) as e:
        load_task("bad")
    assert message in str(e.value) and "\n" not in str(e.value) and "field env" in str(e.value)


def test_check_normalises_and_custom_maps_play(tmp_path):
    assert check_params("toytext", {"success_rate": 1, "id": "FrozenLake-v1"}) == {
        "id": "FrozenLake-v1", "success_rate": 1.0}
    env = toytext(id="FrozenLake-v1", desc=["SFH", "FFG"], is_slippery=False)
    obs, _ = env.reset(0)
    assert env.max_steps == 100 and "Holes H (row,column): (0,2)." in obs
    assert [env.step(a).done for a in ("down", "right", "right")] == [False, False, True]
    assert env.progression == 1.0


# -- end to end ------------------------------------------------------------------------------------
def test_random_agent_evaluation_end_to_end():
    for name in ("frozenlake", "taxi"):
        task = load_task(name)
        seeds = task.seeds("test", 3)
        results = run_episodes(task, lambda: make_agent("random", None, seed=0), seeds, concurrency=1)
        assert [r.seed for r in results] == seeds
        for r in results:
            assert r.error is None and 1 <= r.steps <= 200 and r.env_stats["id"] == task.env["id"]
            assert r.success == (r.progression == 1.0) and r.invalid_actions == 0
            assert r.return_ == pytest.approx(sum(step["reward"] for step in r.trajectory))


def test_two_stage_agent_plays_with_the_scripted_llm():
    task = load_task("frozenlake").with_env({"id": "FrozenLake-v1", "is_slippery": False, "max_steps": 5})
    gw = Gateway(LLMConfig(model="fake/scripted", cache_dir=None))
    seen: list = []
    with ScriptedLLM.install(lambda messages: (seen.append(messages), "<|ACTION|>right<|END|>")[1]):
        results = run_episodes(task, lambda: make_agent("two-stage", gw, task=task), [0], concurrency=1)
    r = results[0]
    assert r.error is None and r.steps == 5 and r.llm_calls == 10 and r.invalid_actions == 0
    assert [s["executed_action"] for s in r.trajectory] == ["right"] * 5
    assert r.trajectory[-1]["done"] and not r.success and r.env_stats["bumps"] == 2  # (0,3) is the right edge
    assert "Actions: left, down, right, up." in seen[1][0]["content"]  # the actor's system prompt
    assert "You are at row 0, column 0" in seen[0][1]["content"]  # the descriptor sees the observation


def test_state_key_lets_the_rollout_cut_a_loop():
    """Bumping into the edge repeats state and observation: the rollout replays instead of calling."""
    task = load_task("frozenlake").with_env({"id": "FrozenLake-v1", "is_slippery": False, "max_steps": 20})
    gw = Gateway(LLMConfig(model="fake/scripted", cache_dir=None))
    with ScriptedLLM.install(lambda messages: "<|ACTION|>right<|END|>"):
        r = run_episodes(task, lambda: make_agent("two-stage", gw, task=task), [0], concurrency=1)[0]
    assert r.steps == 20 and r.llm_calls < 2 * 20 and not r.success


@pytest.mark.parametrize("agent, init", [("two-stage", "plain"), ("two-stage", "guided"), ("robust-cot", "guided"),
                                         ("robust-cot", "plain"), ("naive", "plain")])
def test_default_prompts_render_for_every_game(agent, init):
    for name in ("frozenlake", "taxi", "cliffwalking"):
        task = load_task(name)
        env = make_env(task)
        env.reset(0)
        prompts = default_prompts(agent, task, init)
        for module in prompts.module_names:
            body, _ = render_module(prompts.module(module), mission=env.mission, env=env, split_format=False)
            assert "{actions}" not in body and "{instructions}" not in body and "{mission}" not in body
        if agent == "two-stage":
            assert "<|ACTION|>" in prompts.module("actor").render()
