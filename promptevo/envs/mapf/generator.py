"""MAPF-FrozenLake's generator: the multi-dimensional configuration (:class:`MAPFConfig`), its presets
(``tasks/mapf/<name>.toml``) and the instances it generates (solvable by construction).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from promptevo.envs.mapf.solver import (
    Cell,
    GridMap,
    JointPlan,
    SolverError,
    assign_goals,
    bfs_distances,
    solve,
)
from promptevo.errors import PromptevoError

MAX_COMBINED_DENSITY = 0.75
#: deterministic oracle budget inside the generator: an instance the solver cannot plan within it is
#: re-sampled (about 1% of BFS-solvable maps on the hard preset; keeps generation fast)
GEN_MAX_ORDERS = 12
GEN_CBS_NODES = 300
MAPF_PRESETS: tuple[str, ...] = ("single", "easy", "medium", "hard")

ICE, HOLE, WALL, UNSEEN, ANY_GOAL = ".", "H", "#", "?", "G"


class MAPFConfigError(PromptevoError, ValueError):
    """A MAPF configuration or preset is invalid (one clear line)."""


class MAPFGenerationError(RuntimeError):
    """No solvable instance was found for a configuration within ``max_tries``."""


# ----------------------------------------------------------------------------------------------------
# configuration


class MAPFConfig(BaseModel):
    """Independent generator dimensions of MAPF-FrozenLake."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    description: str = ""
    rows: int = Field(5, ge=2, le=32, description="grid height")
    cols: int = Field(5, ge=2, le=32, description="grid width")
    n_agents: int = Field(2, ge=1, le=9, description="agents, labelled 1..n on the map")
    hole_density: float = Field(0.1, ge=0.0, lt=1.0, description="share of cells that are holes")
    wall_density: float = Field(0.0, ge=0.0, lt=1.0, description="share of cells that are walls")
    slip_prob: float = Field(0.0, ge=0.0, le=1.0, description="chance a move goes perpendicular")
    goal_assignment: Literal["own", "any"] = "own"
    observation: Literal["full", "local"] = "full"
    view_radius: int = Field(2, ge=1, le=16, description="local view: cells within this Chebyshev distance")
    max_steps: int = Field(30, ge=1, le=1000)
    seed: int = Field(0, ge=0, description="generator namespace; combined with the episode seed")
    min_goal_distance: int = Field(1, ge=1, le=64, description="least start-to-goal BFS distance per agent")
    max_tries: int = Field(200, ge=1, le=100_000, description="re-samples before giving up")

    @model_validator(mode="after")
    def _check_capacity(self) -> "MAPFConfig":
        total = self.hole_density + self.wall_density
        if total > MAX_COMBINED_DENSITY:
            raise ValueError(
                f"hole_density + wall_density = {total:.3g} exceeds {MAX_COMBINED_DENSITY} (no room to move)"
            )
        free = self.free_cells
        if 2 * self.n_agents > free:
            raise ValueError(
                f"n_agents={self.n_agents} needs {2 * self.n_agents} free cells (distinct starts and goals) "
                f"but a {self.rows}x{self.cols} grid with these densities has only {free}"
            )
        return self

    @property
    def n_holes(self) -> int:
        return int(round(self.hole_density * self.rows * self.cols))

    @property
    def n_walls(self) -> int:
        return int(round(self.wall_density * self.rows * self.cols))

    @property
    def free_cells(self) -> int:
        return self.rows * self.cols - self.n_holes - self.n_walls

    def summary(self) -> str:
        return (
            f"{self.name}: {self.rows}x{self.cols}, {self.n_agents} agent(s), holes {self.hole_density:g}, "
            f"walls {self.wall_density:g}, slip {self.slip_prob:g}, goals {self.goal_assignment}, "
            f"view {self.observation}" + (f" r={self.view_radius}" if self.observation == "local" else "")
            + f", max_steps {self.max_steps}"
        )


def _one_line(err: ValidationError, what: str) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e.get("loc", ())) or "config"
        parts.append(f"{loc}: {e.get('msg', '')}")
    return f"invalid MAPF config {what}: " + "; ".join(parts)


def make_mapf_config(data: dict[str, Any], what: str = "") -> MAPFConfig:
    """Build a :class:`MAPFConfig`, turning pydantic's error into a one-line :class:`MAPFConfigError`."""
    try:
        return MAPFConfig(**data)
    except ValidationError as err:
        raise MAPFConfigError(_one_line(err, what or repr(data.get("name", "custom")))) from None


def load_mapf_config(path: str | Path) -> MAPFConfig:
    """Read a MAPF config from a TOML file (flat keys = :class:`MAPFConfig` fields)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MAPFConfigError(f"MAPF config file not found: {path}") from None
    except tomllib.TOMLDecodeError as err:
        raise MAPFConfigError(f"MAPF config {path} is not valid TOML: {err}") from None
    data.setdefault("name", path.stem)
    return make_mapf_config(data, str(path))


def preset_dirs() -> list[Path]:
    """Where presets are looked up: ``$PROMPTEVO_TASKS_DIR/mapf`` (when set) first, then tasks/mapf."""
    from promptevo.resources import TASKS_ENV, shipped_tasks_dir

    env = os.environ.get(TASKS_ENV)
    dirs = [Path(env) / "mapf"] if env else []
    return dirs + [shipped_tasks_dir() / "mapf"]


def load_mapf_preset(name: str) -> MAPFConfig:
    """One of :data:`MAPF_PRESETS` (tasks/mapf/<name>.toml; see :func:`preset_dirs`)."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name:
        raise MAPFConfigError(f"bad MAPF preset name {name!r}")
    for d in preset_dirs():
        path = d / f"{name}.toml"
        if path.is_file():
            return load_mapf_config(path)
    known = sorted({p.stem for d in preset_dirs() if d.is_dir() for p in d.glob("*.toml")})
    raise MAPFConfigError(f"unknown MAPF preset {name!r}; known: {', '.join(known)}")


# ----------------------------------------------------------------------------------------------------
# instances and generation


@dataclass(frozen=True)
class MAPFInstance:
    rows: int
    cols: int
    holes: frozenset[Cell]
    walls: frozenset[Cell]
    starts: tuple[Cell, ...]
    goals: tuple[Cell, ...]
    plan: JointPlan | None = field(default=None, compare=False)
    tries: int = field(default=1, compare=False)

    @property
    def grid(self) -> GridMap:
        return GridMap(self.rows, self.cols, self.holes | self.walls)

    def cell(self, c: Cell) -> str:
        if c in self.holes:
            return HOLE
        if c in self.walls:
            return WALL
        return ICE


def instance_solvable(
    grid: GridMap, starts: tuple[Cell, ...], goals: tuple[Cell, ...], goal_assignment: str,
    min_goal_distance: int = 1,
) -> bool:
    """BFS check: every agent can reach its goal (own) / a perfect agent-goal matching exists (any),
    each at BFS distance >= ``min_goal_distance`` (any: the distance to the goal it is matched to)."""
    dists = [bfs_distances(grid, s) for s in starts]
    if goal_assignment == "own":
        return all(d.get(g, -1) >= min_goal_distance for g, d in zip(goals, dists))
    far = [{c: v for c, v in d.items() if v >= min_goal_distance} for d in dists]
    return assign_goals(far, goals) is not None


def generate_instance(config: MAPFConfig, seed: int, *, with_plan: bool = True) -> MAPFInstance:
    """Sample a solvable instance for ``config`` and episode ``seed`` (deterministic).

    With ``with_plan`` the reference solver must also find a joint plan (stored on the instance).
    """
    rng = np.random.default_rng([config.seed, seed])
    rows, cols = config.rows, config.cols
    n_cells = rows * cols
    n_h, n_w, n = config.n_holes, config.n_walls, config.n_agents
    reasons = {"unreachable": 0, "no_joint_plan": 0}
    for attempt in range(1, config.max_tries + 1):
        perm = rng.permutation(n_cells)
        cells = [(int(i) // cols, int(i) % cols) for i in perm]
        holes = frozenset(cells[:n_h])
        walls = frozenset(cells[n_h:n_h + n_w])
        rest = cells[n_h + n_w:]
        starts = tuple(rest[:n])
        goals = tuple(rest[n:2 * n])
        grid = GridMap(rows, cols, holes | walls)
        if not instance_solvable(grid, starts, goals, config.goal_assignment, config.min_goal_distance):
            reasons["unreachable"] += 1
            continue
        plan = None
        if with_plan:
            try:
                plan = solve(grid, starts, goals, goal_assignment=config.goal_assignment, seed=seed,
                             max_orders=GEN_MAX_ORDERS, cbs_node_limit=GEN_CBS_NODES)
            except SolverError:
                reasons["no_joint_plan"] += 1
                continue
        return MAPFInstance(rows, cols, holes, walls, starts, goals, plan, attempt)
    raise MAPFGenerationError(
        f"no solvable MAPF instance for config {config.name!r} ({config.summary()}) with seed {seed} "
        f"after {config.max_tries} tries ({reasons['unreachable']} unreachable, "
        f"{reasons['no_joint_plan']} without a joint plan); lower the densities or the agent count"
    )


