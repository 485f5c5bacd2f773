"""Tests of MAPF-FrozenLake: config, generator, solver oracle, dynamics, parser and gym wrapper."""

from __future__ import annotations

import time

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from promptevo.envs.base import TextEnv
from promptevo.envs.mapf.env import (
    GYM_ENV_ID,
    MAPF_PRESETS,
    MOVES,
    MAPFConfig,
    MAPFConfigError,
    MAPFFrozenLakeEnv,
    MAPFFrozenLakeGymEnv,
    MAPFGenerationError,
    MAPFInstance,
    format_joint_action,
    generate_instance,
    instance_solvable,
    load_mapf_config,
    load_mapf_preset,
    make_mapf_config,
    parse_joint_action,
    resolve_moves,
)
from promptevo.envs.mapf.solver import (
    GridMap,
    JointPlan,
    SolverError,
    bfs_distances,
    cbs_plan,
    optimality_ratio,
    solve,
    validate_plan,
)

NEIGHBOURS = [(-1, 0), (1, 0), (0, -1), (0, 1), (0, 0)]


def no_slip(cfg: MAPFConfig) -> MAPFConfig:
    return cfg.model_copy(update={"slip_prob": 0.0})


def replay(env: MAPFFrozenLakeEnv, plan: JointPlan):
    """Play the oracle plan through the env's own dynamics; returns the last StepResult."""
    res = None
    for moves in plan.joint_moves():
        res = env.step(format_joint_action(moves))
        assert res.info["valid_action"]
        if res.done:
            break
    return res


def small_instance(rows, cols, starts, goals, holes=(), walls=()) -> MAPFInstance:
    return MAPFInstance(rows, cols, frozenset(holes), frozenset(walls), tuple(starts), tuple(goals))


def env_for(inst: MAPFInstance, **kw) -> MAPFFrozenLakeEnv:
    cfg = MAPFConfig(rows=inst.rows, cols=inst.cols, n_agents=len(inst.starts), hole_density=0.0, **kw)
    env = MAPFFrozenLakeEnv(cfg)
    env.load_instance(inst)
    return env


# ---------------------------------------------------------------------------------------------- presets


def test_presets_load_and_are_text_envs():
    assert set(MAPF_PRESETS) == {"single", "easy", "medium", "hard"}
    for name in MAPF_PRESETS:
        cfg = load_mapf_preset(name)
        assert cfg.name == name
        env = MAPFFrozenLakeEnv(cfg)
        assert isinstance(env, TextEnv) and env.family == "mapf"
        obs, info = env.reset(seed=0)
        assert "Agents:" in obs and info["mission"] == env.mission and env.mission
        assert env.default_action == format_joint_action(["stay"] * cfg.n_agents)
        assert "Action format" in env.instructions()


def test_unknown_preset_and_bad_toml(tmp_path):
    with pytest.raises(MAPFConfigError, match="unknown MAPF preset 'nope'"):
        load_mapf_preset("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text('rows = 5\ncols = 5\nn_agentz = 2\n')
    with pytest.raises(MAPFConfigError, match="n_agentz"):
        load_mapf_config(bad)
    worse = tmp_path / "worse.toml"
    worse.write_text("rows = = 5\n")
    with pytest.raises(MAPFConfigError, match="not valid TOML"):
        load_mapf_config(worse)


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"rows": -3}, "rows"),
        ({"cols": 0}, "cols"),
        ({"hole_density": 1.0}, "hole_density"),
        ({"wall_density": 1.5}, "wall_density"),
        ({"hole_density": -0.1}, "hole_density"),
        ({"hole_density": 0.5, "wall_density": 0.4}, "hole_density \\+ wall_density"),
        ({"rows": 3, "cols": 3, "n_agents": 5, "hole_density": 0.0}, "n_agents"),
        ({"rows": 4, "cols": 4, "n_agents": 5, "hole_density": 0.5, "wall_density": 0.0}, "n_agents"),
        ({"n_agents": 0}, "n_agents"),
        ({"slip_prob": 1.2}, "slip_prob"),
        ({"goal_assignment": "mine"}, "goal_assignment"),
        ({"observation": "partial"}, "observation"),
        ({"max_steps": 0}, "max_steps"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_impossible_configs_name_the_field(kwargs, field):
    with pytest.raises(ValidationError, match=field):
        MAPFConfig(**kwargs)
    with pytest.raises(MAPFConfigError, match=field) as err:
        make_mapf_config(kwargs, "bad-one")
    assert "\n" not in str(err.value) and "bad-one" in str(err.value)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(-3, 12),
    cols=st.integers(-3, 12),
    n=st.integers(-1, 11),
    hd=st.floats(-0.2, 1.2, allow_nan=False),
    wd=st.floats(-0.2, 1.2, allow_nan=False),
)
def test_config_bounds_property(rows, cols, n, hd, wd):
    def expected_ok() -> bool:
        if not (2 <= rows <= 32 and 2 <= cols <= 32 and 1 <= n <= 9):
            return False
        if not (0 <= hd < 1 and 0 <= wd < 1) or hd + wd > 0.75:
            return False
        free = rows * cols - round(hd * rows * cols) - round(wd * rows * cols)
        return 2 * n <= free

    try:
        cfg = MAPFConfig(rows=rows, cols=cols, n_agents=n, hole_density=hd, wall_density=wd)
    except ValidationError:
        assert not expected_ok()
        return
    assert expected_ok()
    assert cfg.free_cells >= 2 * cfg.n_agents


# ---------------------------------------------------------------------------------------------- generator


@pytest.mark.parametrize("preset", MAPF_PRESETS)
def test_oracle_solves_every_generated_instance(preset):
    """>= 200 seeds per preset (non-slippery): the oracle plan is valid and wins in the real dynamics."""
    cfg = no_slip(load_mapf_preset(preset))
    env = MAPFFrozenLakeEnv(cfg)
    methods = set()
    for seed in range(200):
        inst = generate_instance(cfg, seed)
        assert instance_solvable(inst.grid, inst.starts, inst.goals, cfg.goal_assignment, cfg.min_goal_distance)
        plan = inst.plan
        assert plan is not None
        assert validate_plan(inst.grid, inst.starts, plan.goals, plan.paths) == []
        if cfg.goal_assignment == "own":
            assert list(plan.goals) == list(inst.goals)
        methods.add(plan.method)
        env.load_instance(inst, seed)
        res = replay(env, plan)
        stats = env.episode_stats()
        assert res is not None and res.terminated and res.reward == 1.0, (preset, seed)
        assert stats["success"] and stats["collisions"] == 0 and stats["hole_falls"] == 0
        assert stats["steps"] == plan.makespan and stats["optimality_ratio"] == 1.0
        assert stats["soc_ratio"] == pytest.approx(1.0)
    assert "prioritized" in methods


@pytest.mark.slow
@pytest.mark.parametrize("preset", MAPF_PRESETS)
def test_oracle_sweep_500_seeds(preset):
    """Longer sweep: 500 seeds per preset, also with goal_assignment='any'."""
    for goal_assignment in ("own", "any"):
        cfg = no_slip(load_mapf_preset(preset)).model_copy(update={"goal_assignment": goal_assignment})
        env = MAPFFrozenLakeEnv(cfg)
        for seed in range(500):
            inst = generate_instance(cfg, seed)
            assert validate_plan(inst.grid, inst.starts, inst.plan.goals, inst.plan.paths) == []
            env.load_instance(inst, seed)
            res = replay(env, inst.plan)
            assert res.terminated and res.reward == 1.0, (preset, goal_assignment, seed)


@pytest.mark.parametrize("preset", ["medium", "hard"])
def test_solver_on_raw_bfs_solvable_instances(preset):
    """Without the generator's joint-plan filter the solver still solves >= 99% of BFS-solvable maps."""
    cfg = no_slip(load_mapf_preset(preset))
    solved = 0
    for seed in range(200):
        inst = generate_instance(cfg, seed, with_plan=False)
        try:
            plan = solve(inst.grid, inst.starts, inst.goals, seed=seed, cbs_node_limit=300)
        except SolverError:
            continue
        assert validate_plan(inst.grid, inst.starts, plan.goals, plan.paths) == []
        solved += 1
    assert solved >= 198


def test_generation_is_deterministic_and_seed_dependent():
    cfg = load_mapf_preset("medium")
    a, b, c = generate_instance(cfg, 7), generate_instance(cfg, 7), generate_instance(cfg, 8)
    assert a == b and a != c
    other_ns = generate_instance(cfg.model_copy(update={"seed": 1}), 7)
    assert other_ns != a


def test_generation_failure_names_the_config():
    cfg = MAPFConfig(name="crowded", rows=4, cols=4, n_agents=4, hole_density=0.25, wall_density=0.25,
                     min_goal_distance=6, max_tries=5)
    with pytest.raises(MAPFGenerationError, match="'crowded'.*after 5 tries"):
        generate_instance(cfg, 0)


def test_any_goal_assignment_generates_and_solves():
    cfg = MAPFConfig(name="any", rows=6, cols=6, n_agents=3, hole_density=0.1, wall_density=0.1,
                     goal_assignment="any", max_steps=40)
    env = MAPFFrozenLakeEnv(cfg)
    for seed in range(30):
        inst = generate_instance(cfg, seed)
        assert sorted(inst.plan.goals) == sorted(inst.goals)
        env.load_instance(inst, seed)
        res = replay(env, inst.plan)
        assert res.terminated and res.reward == 1.0
    assert " G " in env.render_text() or "G" in env.render_text()


# ---------------------------------------------------------------------------------------------- solver


def test_solver_needs_a_wait_in_a_corridor():
    # 1 x 5 corridor with a side pocket at (1,2): agents must pass each other via the pocket
    grid = GridMap(2, 5, frozenset({(1, 0), (1, 1), (1, 3), (1, 4)}))
    starts, goals = [(0, 0), (0, 4)], [(0, 4), (0, 0)]
    plan = solve(grid, starts, goals)
    assert validate_plan(grid, starts, goals, plan.paths) == []
    assert plan.makespan > 4 and plan.sum_of_costs >= 8
    paths, nodes = cbs_plan(grid, starts, goals)
    assert paths is not None and validate_plan(grid, starts, goals, paths) == [] and nodes >= 1


def test_solver_errors_and_validate_plan():
    grid = GridMap(3, 3, frozenset({(0, 1), (1, 1), (2, 1)}))
    with pytest.raises(SolverError, match="cannot reach"):
        solve(grid, [(0, 0)], [(0, 2)])
    with pytest.raises(ValueError, match="goal_assignment"):
        solve(grid, [(0, 0)], [(2, 0)], goal_assignment="mine")
    bad = validate_plan(GridMap(1, 3), [(0, 0), (0, 2)], [(0, 2), (0, 0)], [[(0, 0), (0, 1), (0, 2)], [(0, 2), (0, 1), (0, 0)]])
    assert any("vertex conflict" in p for p in bad)
    swap = validate_plan(GridMap(1, 2), [(0, 0), (0, 1)], [(0, 1), (0, 0)], [[(0, 0), (0, 1)], [(0, 1), (0, 0)]])
    assert any("swap conflict" in p for p in swap)
    assert bfs_distances(grid, (0, 0))[(2, 0)] == 2


def test_optimality_ratio():
    plan = JointPlan([[(0, 0), (0, 1), (0, 2)], [(1, 0), (1, 1)]], [(0, 2), (1, 1)])
    assert plan.makespan == 2 and plan.sum_of_costs == 3 and plan.costs == [2, 1]
    assert plan.joint_moves() == [["right", "right"], ["right", "stay"]]
    assert optimality_ratio(2, plan) == 1.0
    assert optimality_ratio(5, plan) == 2.5
    assert optimality_ratio([3, 3], plan) == 2.0
    with pytest.raises(ValueError, match="entries"):
        optimality_ratio([1], plan)
    with pytest.raises(ValueError, match=">= 0"):
        optimality_ratio(-1, plan)


# ---------------------------------------------------------------------------------------------- conflict rules


@st.composite
def joint_moves(draw):
    rows, cols = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    n = draw(st.integers(1, min(6, len(cells))))
    positions = draw(st.permutations(cells))[:n]
    targets = [(p[0] + d[0], p[1] + d[1]) for p, d in zip(positions, draw(st.lists(st.sampled_from(NEIGHBOURS), min_size=n, max_size=n)))]
    return list(positions), targets


@settings(max_examples=400, deadline=None)
@given(joint_moves())
def test_resolve_moves_properties(case):
    positions, targets = case
    new, vertex, swaps, stopped = resolve_moves(positions, targets)
    assert len(set(new)) == len(new)  # never two agents on one cell
    for i, j in [(i, j) for i in range(len(new)) for j in range(len(new)) if i != j]:
        assert not (new[i] == positions[j] and new[j] == positions[i] and new[i] != positions[i])  # no swap
    for i in range(len(new)):
        assert new[i] in (positions[i], targets[i])  # an agent moves as told or stays
        assert (new[i] != targets[i]) == (i in stopped)
    if len(set(targets)) == len(targets) and not any(
        targets[i] == positions[j] and targets[j] == positions[i] and i != j and targets[i] != positions[i]
        for i in range(len(new)) for j in range(len(new))
    ):
        assert new == targets and vertex == swaps == 0 and not stopped
    else:
        assert vertex + swaps > 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), slip=st.sampled_from([0.0, 0.3]),
       actions=st.lists(st.lists(st.sampled_from(MOVES), min_size=3, max_size=3), min_size=1, max_size=25))
def test_env_steps_keep_agents_apart(seed, slip, actions):
    cfg = MAPFConfig(rows=5, cols=5, n_agents=3, hole_density=0.12, wall_density=0.12, slip_prob=slip, max_steps=30)
    env = MAPFFrozenLakeEnv(cfg)
    env.reset(seed)
    inst = env.instance
    for moves in actions:
        before = list(env.positions)
        alive_before = list(env.alive)
        res = env.step(format_joint_action(moves))
        alive = [i for i in range(3) if env.alive[i]]
        cells = [env.positions[i] for i in alive]
        assert len(set(cells)) == len(cells)
        assert all(c not in inst.holes and c not in inst.walls for c in cells)
        for i in alive:
            for j in alive:
                if i != j and env.positions[i] != before[i]:
                    assert not (env.positions[i] == before[j] and env.positions[j] == before[i])
            d = abs(env.positions[i][0] - before[i][0]) + abs(env.positions[i][1] - before[i][1])
            assert d <= 1
        assert sum(alive_before) - len(alive) == res.info["events"].__str__().count("fell into")
        assert 0.0 <= res.reward <= 1.0 and (res.reward == 0.0 or res.done)
        if res.done:
            break


# ---------------------------------------------------------------------------------------------- dynamics


def test_swap_and_vertex_conflicts_are_resolved_and_counted():
    inst = small_instance(2, 4, [(0, 1), (0, 2)], [(0, 3), (0, 0)], walls=[(1, 0), (1, 1), (1, 2), (1, 3)])
    env = env_for(inst)
    res = env.step("agent 1: right, agent 2: left")  # swap
    assert env.positions == [(0, 1), (0, 2)] and res.info["collisions"] == 1
    inst2 = small_instance(3, 3, [(0, 1), (2, 1)], [(2, 2), (0, 0)])
    env2 = env_for(inst2)
    env2.step("agent 1: down, agent 2: up")  # both into (1,1)
    assert env2.positions == [(0, 1), (2, 1)]
    env2.step("agent 1: down, agent 2: stay")  # follow-free move
    assert env2.positions == [(1, 1), (2, 1)]
    env2.step("agent 1: down, agent 2: right")  # agent 1 follows agent 2 (allowed)
    assert env2.positions == [(2, 1), (2, 2)]
    stats = env2.episode_stats()
    assert stats["vertex_collisions"] == 1 and stats["swap_collisions"] == 0 and stats["collisions"] == 1
    assert env.episode_stats()["swap_collisions"] == 1


def test_holes_walls_edges_and_rewards():
    inst = small_instance(3, 3, [(0, 0), (2, 2)], [(0, 2), (2, 0)], holes=[(1, 1)], walls=[(0, 1)])
    env = env_for(inst, max_steps=10)
    res = env.step("agent 1: right, agent 2: down")  # wall, edge
    assert env.positions == [(0, 0), (2, 2)] and env.episode_stats()["wall_bumps"] == 2
    assert "hit a wall" in res.observation and "edge of the map" in res.observation
    res = env.step("agent 1: down, agent 2: up")
    res = env.step("agent 1: right, agent 2: stay")  # agent 1 falls into the hole
    assert env.alive == [False, True] and "fell into the hole" in res.observation
    assert not res.done and res.reward == 0.0
    env.step("agent 2: down")
    res = env.step("agent 2: left")
    res = env.step("agent 2: left")
    assert res.terminated and not res.truncated and res.reward == 0.5 and env.progression == 0.5
    stats = env.episode_stats()
    assert stats["hole_falls"] == 1 and stats["per_agent_success"] == [False, True]
    assert not stats["success"] and stats["optimality_ratio"] is None
    with pytest.raises(RuntimeError, match="over"):
        env.step("stay")


def test_truncation_counts_timeouts():
    inst = small_instance(2, 3, [(0, 0), (1, 0)], [(0, 2), (1, 2)])
    env = env_for(inst, max_steps=3)
    for _ in range(2):
        assert not env.step("agent 1: right, agent 2: stay").done
    res = env.step("agent 1: right, agent 2: stay")
    assert res.terminated is False and res.truncated and res.reward == 0.5
    stats = env.episode_stats()
    assert stats["timeout"] and stats["timeouts"] == 1 and stats["steps"] == 3
    assert res.info["episode_stats"]["per_agent_success"] == [True, False]


def test_slip_goes_perpendicular():
    inst = small_instance(3, 3, [(1, 1)], [(0, 0)])
    env = env_for(inst, slip_prob=1.0)
    res = env.step("up")
    assert env.positions[0] in [(1, 0), (1, 2)] and "slipped" in res.observation
    assert env.episode_stats()["slips"] == 1
    env.step("stay")
    assert env.episode_stats()["slips"] == 1


def test_invalid_action_falls_back_to_all_stay():
    inst = small_instance(2, 3, [(0, 0), (1, 0)], [(0, 2), (1, 2)])
    env = env_for(inst)
    res = env.step("let me think about it")
    assert res.info["valid_action"] is False and res.info["executed_action"] == env.default_action
    assert env.positions == [(0, 0), (1, 0)] and env.episode_stats()["invalid_actions"] == 1
    assert "invalid action" in res.observation
    res = env.step("agent 2: right")  # partial: agent 1 stays, still valid
    assert res.info["valid_action"] and res.info["missing_agents"] == [1] and env.positions[1] == (1, 1)
    assert res.info["executed_action"] == "agent 1: stay, agent 2: right"


def test_local_observation_hides_far_cells():
    cfg = MAPFConfig(rows=9, cols=9, n_agents=1, hole_density=0.1, observation="local", view_radius=1)
    env = MAPFFrozenLakeEnv(cfg)
    obs, _ = env.reset(3)
    map_lines = [ln for ln in obs.splitlines() if ln[:4].strip().isdigit() and len(ln) > 10]
    assert len(map_lines) == 9
    visible = sum(ch != "?" for ln in map_lines for ch in ln[4::2])
    assert 4 <= visible <= 9 and "? not visible" in obs
    full, _ = MAPFFrozenLakeEnv(cfg.model_copy(update={"observation": "full"})).reset(3)
    assert "?" not in full.split("Legend")[0]


def test_observation_has_legend_agents_and_hazards():
    env = MAPFFrozenLakeEnv(load_mapf_preset("medium"))
    obs, info = env.reset(1)
    assert "Legend: . ice, H hole, # wall" in obs
    for i in (1, 2, 3):
        assert f"- agent {i}: at (" in obs
    assert "next to it: up" in obs
    assert info["valid_actions"] == env.valid_actions and "agent 3: stay" in env.valid_actions


# ---------------------------------------------------------------------------------------------- parser


@pytest.mark.parametrize(
    "text, n, moves",
    [
        ("agent 1: up, agent 2: left", 2, ["up", "left"]),
        ("Agent 1 -> UP; Agent 2 = west", 2, ["up", "left"]),
        ("1: up\n2: down", 2, ["up", "down"]),
        ('{"1": "up", "2": "stay"}', 2, ["up", "stay"]),
        ("up, left", 2, ["up", "left"]),
        ("agent 1 should move up and agent 2 should wait", 2, ["up", "stay"]),
        ("agent 1 (at (2,3)): down, agent 2: right", 2, ["down", "right"]),
        ("**Action:** agent 2: east, agent 1: north", 2, ["up", "right"]),
        ("up", 1, ["up"]),
        ("Move: LEFT.", 1, ["left"]),
        ("stay", 1, ["stay"]),
    ],
)
def test_parser_accepts(text, n, moves):
    parsed = parse_joint_action(text, n)
    assert parsed.moves == moves, parsed


@pytest.mark.parametrize(
    "text, n, err",
    [
        ("agent 3: up", 2, "no agent 3"),
        ("agent 1: up, agent 1: down", 2, "two different"),
        ("blah", 2, "no move"),
        ("up", 2, "1 moves for 2"),
        ("up or down", 1, "2 moves for 1"),
        ("", 1, "no move"),
    ],
)
def test_parser_rejects(text, n, err):
    parsed = parse_joint_action(text, n)
    assert parsed.moves is None and err in parsed.error


@given(st.lists(st.sampled_from(MOVES), min_size=1, max_size=9))
def test_format_parse_roundtrip(moves):
    assert parse_joint_action(format_joint_action(moves), len(moves)).moves == moves


@given(st.text(max_size=60))
def test_parser_never_crashes(text):
    parsed = parse_joint_action(text, 3)
    assert parsed.moves is None or len(parsed.moves) == 3


# ---------------------------------------------------------------------------------------------- gym


def test_gym_env_passes_checker_and_registry():
    from gymnasium.utils.env_checker import check_env

    env = gym.make(GYM_ENV_ID, preset="hard", render_mode="ansi")
    check_env(env.unwrapped, skip_render_check=False)
    assert isinstance(env.action_space, gym.spaces.MultiDiscrete) and list(env.action_space.nvec) == [5] * 4
    obs, info = env.reset(seed=5)
    assert env.observation_space.contains(obs) and "mission" in info
    obs2, *_ = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs2) and isinstance(env.render(), str)
    single = gym.make(GYM_ENV_ID, config={"rows": 4, "cols": 4, "n_agents": 1}, render_mode="ansi")
    check_env(single.unwrapped)
    assert single.unwrapped.text_env.n_agents == 1
    with pytest.raises(MAPFConfigError, match="either"):
        MAPFFrozenLakeGymEnv(config=load_mapf_preset("easy"), preset="easy")


def test_speed_generation_plus_1000_steps():
    env = MAPFFrozenLakeEnv(load_mapf_preset("medium"))
    t0 = time.perf_counter()
    env.reset(0)
    moves = ["up", "right", "down", "left", "stay"]
    seed = 0
    for k in range(1000):
        res = env.step(format_joint_action([moves[(k + i) % 5] for i in range(3)]))
        if res.done:
            seed += 1
            env.reset(seed)
    assert time.perf_counter() - t0 < 2.0  # benchmark target is < 1 s; slack for slow CI machines
