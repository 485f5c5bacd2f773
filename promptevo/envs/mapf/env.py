"""MAPF-FrozenLake: multi-agent path finding on FrozenLake-style ice, as a text environment.

Our own design (the paper that names the testbed publishes no observation, action or reward format):

* **Map**: a rows x cols grid of ice ('.'), holes ('H': an agent entering one is lost) and walls ('#':
  a move into a wall or off the map leaves the agent in place). Each agent has a start and a goal.
* **Actions**: each step every active agent moves up, down, left, right or stays. Text format:
  ``"agent 1: up, agent 2: stay"`` (a single agent may answer just ``"up"``).
* **Slip**: with probability ``slip_prob`` a move goes to one of the two perpendicular directions
  (each half of the time), like FrozenLake's slippery ice. Staying never slips.
* **Conflicts** (deterministic): if two agents would exchange cells (swap) or end on one cell (vertex),
  the moving agents involved stay where they were; this repeats until no conflict remains. Following an
  agent that moves away, and rotations of three or more agents, are allowed. Conflicts are counted.
* **End**: when every agent that is still in play is home (on its goal, or on any goal cell with
  ``goal_assignment="any"``), when all are lost, or after ``max_steps`` (truncation). Reward 0 per step
  and, at the end, the fraction of agents home. ``progression`` = fraction of agents home now;
  success = all agents home.
* **Generation**: every instance is solvable by construction: each agent can reach its goal around
  holes and walls (BFS), and the reference solver (:mod:`promptevo.envs.mapf.solver`) found a joint
  plan for the non-slippery version; otherwise the instance is re-sampled (``max_tries``).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from promptevo.envs.base import ActionSpace, ExpertError, StepResult, TextEnv, gbnf_literal
from promptevo.envs.mapf.generator import (
    ANY_GOAL,
    HOLE,
    ICE,
    MAPF_PRESETS,
    UNSEEN,
    WALL,
    MAPFConfig,
    MAPFConfigError,
    MAPFGenerationError,
    MAPFInstance,
    generate_instance,
    instance_solvable,
    load_mapf_config,
    load_mapf_preset,
    make_mapf_config,
)
from promptevo.envs.mapf.solver import MOVE_DELTAS, Cell, optimality_ratio

MOVES: tuple[str, ...] = ("up", "down", "left", "right", "stay")
#: index order of the gymnasium MultiDiscrete action space (stay = 0)
GYM_MOVES: tuple[str, ...] = ("stay", "up", "down", "left", "right")


# ----------------------------------------------------------------------------------------------------
# conflict rules (pure)


def resolve_moves(
    positions: list[Cell], targets: list[Cell]
) -> tuple[list[Cell], int, int, set[int]]:
    """Apply the conflict rules to the intended targets of the agents in play.

    Returns (new positions, vertex conflicts, swap conflicts, indices of agents stopped by a conflict).
    Agents whose target equals their position stay; swaps and shared targets make the moving agents
    involved stay, repeated until the targets are pairwise distinct.
    """
    if len(positions) != len(targets):
        raise ValueError("positions and targets differ in length")
    if len(set(positions)) != len(positions):
        raise ValueError("two agents already share a cell")
    new = list(targets)
    stopped: set[int] = set()
    swaps = 0
    where = {p: i for i, p in enumerate(positions)}
    for i, (p, t) in enumerate(zip(positions, targets)):
        j = where.get(t)
        if j is not None and j > i and p != t and targets[j] == p:
            new[i], new[j] = p, t
            stopped.update((i, j))
            swaps += 1
    vertex = 0
    while True:
        by_cell: dict[Cell, list[int]] = {}
        for i, t in enumerate(new):
            by_cell.setdefault(t, []).append(i)
        clashes = [ids for ids in by_cell.values() if len(ids) > 1]
        if not clashes:
            return new, vertex, swaps, stopped
        for ids in clashes:
            vertex += 1
            for i in ids:
                if new[i] != positions[i]:
                    new[i] = positions[i]
                    stopped.add(i)


# ----------------------------------------------------------------------------------------------------
# action text


_MOVE_WORDS = {
    "up": "up", "north": "up", "down": "down", "south": "down", "left": "left", "west": "left",
    "right": "right", "east": "right", "stay": "stay", "wait": "stay", "hold": "stay", "idle": "stay",
    "noop": "stay", "no-op": "stay", "none": "stay",
}
_MOVE_RE = "|".join(sorted((re.escape(w) for w in _MOVE_WORDS), key=len, reverse=True))
_LABELLED = re.compile(
    rf"\b(?:agent|robot)\s*#?\s*(\d+)(?:(?!agent|robot)[^\n,;|]){{0,30}}?(?<![\w-])({_MOVE_RE})(?![\w-])"
)
_BARE_LABEL = re.compile(rf"(?:^|[,;\n|])\s*(\d+)\s*[:=)\.\-]+>?\s*({_MOVE_RE})(?![\w-])")
_WORD = re.compile(rf"(?<![\w-])({_MOVE_RE})(?![\w-])")


def format_joint_action(moves: list[str]) -> str:
    """Canonical text of a joint action: ``"up"`` for one agent, else ``"agent 1: up, agent 2: stay"``."""
    if len(moves) == 1:
        return moves[0]
    return ", ".join(f"agent {i + 1}: {m}" for i, m in enumerate(moves))


@dataclass
class ParsedAction:
    moves: list[str] | None  # None = unparsable
    error: str = ""
    missing: list[int] = field(default_factory=list)  # 1-based agents without a move (they stay)


def parse_joint_action(text: str, n_agents: int) -> ParsedAction:
    """Tolerant parser: ``"agent 1: up, agent 2: left"``, ``"1: up; 2: west"``, ``'{"1": "up"}'``,
    ``"up, left"`` (one move per agent, in order) or, for one agent, just ``"up"``.

    Labelled agents that are missing stay (reported in ``missing``); contradictory or out-of-range
    labels and a wrong number of unlabelled moves make the action unparsable (``moves is None``).
    """
    if not isinstance(text, str):
        return ParsedAction(None, "action is not text")
    clean = re.sub(r"[\"'`*{}\[\]]", " ", text.lower())
    clean = re.sub(r"\(\s*\d+\s*,\s*\d+\s*\)", " ", clean)  # coordinates like (2,3)
    pairs = [(int(a), _MOVE_WORDS[m]) for a, m in _LABELLED.findall(clean)]
    if not pairs:
        pairs = [(int(a), _MOVE_WORDS[m]) for a, m in _BARE_LABEL.findall(clean)]
    if pairs:
        moves: dict[int, str] = {}
        for agent, move in pairs:
            if not 1 <= agent <= n_agents:
                return ParsedAction(None, f"there is no agent {agent} (agents are 1..{n_agents})")
            if moves.get(agent, move) != move:
                return ParsedAction(None, f"agent {agent} got two different moves")
            moves[agent] = move
        missing = [a for a in range(1, n_agents + 1) if a not in moves]
        return ParsedAction([moves.get(a, "stay") for a in range(1, n_agents + 1)], missing=missing)
    words = [_MOVE_WORDS[w] for w in _WORD.findall(clean)]
    if len(words) == n_agents:
        return ParsedAction(words)
    if not words:
        return ParsedAction(None, "no move found (use up, down, left, right or stay)")
    return ParsedAction(None, f"found {len(words)} moves for {n_agents} agent(s); label them 'agent 1: up'")


class JointActionSpace(ActionSpace):
    """Actions of a MAPF env with several agents: one move per agent (``agent 1: up, agent 2: stay``),
    read with :func:`parse_joint_action` and written back in canonical form."""

    def __init__(self, n_agents: int):
        super().__init__([f"agent {i}: {m}" for i in range(1, n_agents + 1) for m in MOVES])
        self.n_agents = n_agents

    def match(self, candidate: str) -> str | None:
        p = parse_joint_action(candidate, self.n_agents)
        return format_joint_action(p.moves) if p.moves is not None else None

    def describe(self) -> str:
        example = format_joint_action(["up"] + ["stay"] * (self.n_agents - 1))
        return f"one of {', '.join(MOVES)} for each of the {self.n_agents} agents, e.g. '{example}'"

    def sample(self, rng: random.Random) -> str:
        return format_joint_action([rng.choice(MOVES) for _ in range(self.n_agents)])

    def gbnf_rules(self) -> str:
        parts = ' ", " '.join(f'"agent {i}: " move' for i in range(1, self.n_agents + 1))
        return f"action ::= {parts}\nmove ::= " + " | ".join(gbnf_literal(m) for m in MOVES) + "\n"


# ----------------------------------------------------------------------------------------------------
# the text environment


_PERPENDICULAR = {"up": ("left", "right"), "down": ("left", "right"), "left": ("up", "down"), "right": ("up", "down")}


class MAPFFrozenLakeEnv(TextEnv):
    """Multi-agent FrozenLake as a :class:`TextEnv` (see the module docstring for the rules)."""

    family = "mapf"

    def __init__(self, config: MAPFConfig | None = None):
        self.config = config if config is not None else MAPFConfig()
        self.instance: MAPFInstance | None = None
        self._seed = 0
        self._reset_state()

    # -- TextEnv properties
    @property
    def n_agents(self) -> int:
        return self.config.n_agents

    @property
    def valid_actions(self) -> list[str]:
        if self.n_agents == 1:
            return list(MOVES)
        return [f"agent {i}: {m}" for i in range(1, self.n_agents + 1) for m in MOVES]

    @property
    def default_action(self) -> str:
        return format_joint_action(["stay"] * self.n_agents)

    def action_space(self) -> ActionSpace:
        return ActionSpace(list(MOVES)) if self.n_agents == 1 else JointActionSpace(self.n_agents)

    @property
    def max_steps(self) -> int:
        return self.config.max_steps

    @property
    def mission(self) -> str:
        if self.instance is None:
            return ""
        if self.config.goal_assignment == "any":
            cells = ", ".join(_fmt(g) for g in self.instance.goals)
            who = "the agent" if self.n_agents == 1 else f"each of the {self.n_agents} agents"
            return (f"Move {who} onto a different goal cell G ({cells}) without falling into a hole "
                    f"or bumping into each other.")
        parts = ", ".join(
            f"agent {i + 1} to {_goal_letter(i)} at {_fmt(g)}" for i, g in enumerate(self.instance.goals)
        )
        if self.n_agents == 1:
            return f"Move {parts} without falling into a hole."
        return f"Move {parts}, without falling into a hole or bumping into each other."

    @property
    def progression(self) -> float:
        return self._home_count() / self.n_agents

    # -- state
    def _reset_state(self) -> None:
        self.positions: list[Cell] = []
        self.alive: list[bool] = []
        self.steps = 0
        self.done = False
        self.truncated = False
        self.rng = np.random.default_rng(0)
        self.stats_counts = {"vertex": 0, "swap": 0, "holes": 0, "bumps": 0, "slips": 0, "invalid": 0,
                             "partial": 0}
        self.arrival: list[int | None] = []
        self.last_events: list[str] = []
        self._vis_cache: tuple[tuple, set[Cell] | None] | None = None

    def _is_home(self, i: int) -> bool:
        assert self.instance is not None
        if not self.alive[i]:
            return False
        if self.config.goal_assignment == "any":
            return self.positions[i] in self.instance.goals
        return self.positions[i] == self.instance.goals[i]

    def _home_count(self) -> int:
        return sum(self._is_home(i) for i in range(len(self.positions)))

    # -- API
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        return self.load_instance(generate_instance(self.config, int(seed)), int(seed))

    def load_instance(self, instance: MAPFInstance, seed: int = 0) -> tuple[str, dict[str, Any]]:
        """Start an episode on a given instance (tests, replays); ``seed`` drives the slips."""
        if len(instance.starts) != self.n_agents or (instance.rows, instance.cols) != (self.config.rows, self.config.cols):
            raise ValueError(
                f"instance has {len(instance.starts)} agents on {instance.rows}x{instance.cols}; config "
                f"{self.config.name!r} wants {self.n_agents} on {self.config.rows}x{self.config.cols}"
            )
        self._reset_state()
        self._seed = int(seed)
        self.instance = instance
        self.rng = np.random.default_rng([self.config.seed, self._seed, 1])
        self.positions = list(self.instance.starts)
        self.alive = [True] * self.n_agents
        self.arrival = [None] * self.n_agents
        info = {"mission": self.mission, "valid_actions": self.valid_actions, "progression": 0.0,
                "config": self.config.name, "generation_tries": self.instance.tries}
        return self.render_text(), info

    def step(self, action: str) -> StepResult:
        if self.instance is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed)")
        inst = self.instance
        parsed = parse_joint_action(action, self.n_agents)
        valid = parsed.moves is not None
        moves = parsed.moves if valid else ["stay"] * self.n_agents
        events: list[str] = []
        if not valid:
            self.stats_counts["invalid"] += 1
            events.append(f"invalid action ({parsed.error}); every agent stayed")
        elif parsed.missing:
            self.stats_counts["partial"] += 1

        active = [i for i in range(self.n_agents) if self.alive[i]]
        cur = [self.positions[i] for i in active]
        targets: list[Cell] = []
        for i, pos in zip(active, cur):
            move = moves[i]
            if move != "stay" and self.config.slip_prob > 0 and self.rng.random() < self.config.slip_prob:
                slipped = _PERPENDICULAR[move][int(self.rng.integers(2))]
                events.append(f"agent {i + 1} slipped: tried {move}, went {slipped}")
                self.stats_counts["slips"] += 1
                move = slipped
            dr, dc = MOVE_DELTAS[move]
            tgt = (pos[0] + dr, pos[1] + dc)
            if move != "stay" and (not (0 <= tgt[0] < inst.rows and 0 <= tgt[1] < inst.cols)
                                   or tgt in inst.walls):
                what = "a wall" if tgt in inst.walls else "the edge of the map"
                events.append(f"agent {i + 1} hit {what} going {move} and stayed at {_fmt(pos)}")
                self.stats_counts["bumps"] += 1
                tgt = pos
            targets.append(tgt)
        new, n_vertex, n_swap, stopped = resolve_moves(cur, targets)
        self.stats_counts["vertex"] += n_vertex
        self.stats_counts["swap"] += n_swap
        if stopped:
            names = ", ".join(str(active[k] + 1) for k in sorted(stopped))
            events.append(f"collision: agent(s) {names} would have bumped into another agent and stayed")
        self.steps += 1
        for k, i in enumerate(active):
            self.positions[i] = new[k]
            if new[k] in inst.holes:
                self.alive[i] = False
                self.stats_counts["holes"] += 1
                events.append(f"agent {i + 1} fell into the hole at {_fmt(new[k])} and is out of the game")
        for i in range(self.n_agents):
            home = self._is_home(i)
            if home and self.arrival[i] is None:
                self.arrival[i] = self.steps
            elif not home:
                self.arrival[i] = None
        in_play = [i for i in range(self.n_agents) if self.alive[i]]
        terminated = all(self._is_home(i) for i in in_play)
        truncated = not terminated and self.steps >= self.max_steps
        self.done = terminated or truncated
        self.truncated = truncated
        reward = self.progression if self.done else 0.0
        self.last_events = events
        info = {
            "valid_action": valid,
            "executed_action": format_joint_action(moves),
            "progression": self.progression,
            "events": list(events),
            "collisions": n_vertex + n_swap,
            "missing_agents": parsed.missing,
        }
        if not valid:
            info["parse_error"] = parsed.error
        if self.done:
            info["success"] = self._home_count() == self.n_agents
            info["episode_stats"] = self.episode_stats()
        return StepResult(self.render_text(), float(reward), terminated, truncated, info)

    def episode_stats(self) -> dict[str, Any]:
        if self.instance is None:
            return {}
        c = self.stats_counts
        per_agent = [self._is_home(i) for i in range(self.n_agents)]
        success = all(per_agent)
        plan = self.instance.plan
        stats: dict[str, Any] = {
            "config": self.config.name,
            "n_agents": self.n_agents,
            "steps": self.steps,
            "success": success,
            "progression": self.progression,
            "collisions": c["vertex"] + c["swap"],
            "vertex_collisions": c["vertex"],
            "swap_collisions": c["swap"],
            "hole_falls": c["holes"],
            "wall_bumps": c["bumps"],
            "slips": c["slips"],
            "invalid_actions": c["invalid"],
            "partial_actions": c["partial"],
            "timeout": self.truncated,
            "timeouts": sum(1 for i in range(self.n_agents) if self.alive[i] and not per_agent[i])
            if self.truncated else 0,
            "per_agent_success": per_agent,
            "solver_method": plan.method if plan else None,
            "solver_makespan": plan.makespan if plan else None,
            "solver_sum_of_costs": plan.sum_of_costs if plan else None,
            "optimality_ratio": None,
            "soc_ratio": None,
        }
        if plan is not None and success:
            stats["optimality_ratio"] = optimality_ratio(self.steps, plan)
            stats["soc_ratio"] = optimality_ratio([a or 0 for a in self.arrival], plan)
        return stats

    # -- loop detection and dense progress
    def state_key(self) -> object | None:
        """Positions, lost and home status of all agents; None with slippery ice (the same state and
        action can lead to different next states, so a repeat is not a loop) or before reset."""
        if self.instance is None or self.config.slip_prob > 0:
            return None
        return (tuple(self.positions), tuple(self.alive), tuple(self._is_home(i) for i in range(self.n_agents)))

    def expert_action(self) -> str | None:
        """The first joint move of the reference solver's plan from the agents' current cells (the plan of
        the non-slippery instance, re-planned in every state, so it is also a sound policy on slippery ice).
        :class:`ExpertError` once an agent is lost (the mission cannot be completed any more) or when the
        solver finds no plan within its budget."""
        from promptevo.envs.mapf.solver import SolverError, solve

        inst = self.instance
        if inst is None:
            raise RuntimeError("call reset(seed) before expert_action()")
        if self.done:
            raise ExpertError("the episode is over")
        if not all(self.alive):
            raise ExpertError("an agent fell into a hole: the mission cannot be completed any more")
        key = tuple(self.positions)
        cached = getattr(self, "_expert_cache", None)
        if cached is None or cached[0] is not inst or cached[1] != key:
            try:
                plan = solve(inst.grid, self.positions, inst.goals, goal_assignment=self.config.goal_assignment,
                             seed=self.config.seed)
            except (SolverError, ValueError) as e:
                raise ExpertError(f"the reference solver found no plan from this state: {e}") from None
            moves = plan.joint_moves()
            cached = (inst, key, moves[0] if moves else ["stay"] * self.n_agents)
            self._expert_cache = cached
        return format_joint_action(cached[2])

    def progress(self) -> float | None:
        """1.0 on success, else the mean over agents of ``max(0, 1 - d_now / d_start)`` with ``d`` the
        BFS distance to the agent's goal (``goal_assignment="any"``: to the nearest goal cell) around
        holes and walls; an agent at home counts 1, a lost one 0."""
        from promptevo.envs.mapf.solver import bfs_distances

        inst = self.instance
        if inst is None:
            return None
        if self._home_count() == self.n_agents:
            return 1.0
        cache = getattr(self, "_goal_distances", None)
        if cache is None or cache[0] is not inst:
            grid = inst.grid
            cache = (inst, [bfs_distances(grid, g) for g in inst.goals])
            self._goal_distances = cache
        maps = cache[1]

        def distance(i: int, cell: Cell) -> int | None:
            if self.config.goal_assignment == "any":
                found = [m[cell] for m in maps if cell in m]
                return min(found) if found else None
            return maps[i].get(cell)

        total = 0.0
        for i in range(self.n_agents):
            if self._is_home(i):
                total += 1.0
                continue
            if not self.alive[i]:
                continue
            d0, d = distance(i, inst.starts[i]), distance(i, self.positions[i])
            if d0 and d is not None:
                total += max(0.0, 1.0 - d / d0)
        return total / self.n_agents

    # -- text
    def visible_cells(self) -> set[Cell] | None:
        """Cells shown in local mode (None = the whole map)."""
        if self.config.observation == "full" or self.instance is None:
            return None
        key = (tuple(self.positions), tuple(self.alive))
        if self._vis_cache is not None and self._vis_cache[0] == key:
            return self._vis_cache[1]
        r = self.config.view_radius
        seen: set[Cell] = set()
        for i, pos in enumerate(self.positions):
            if not self.alive[i]:
                continue
            for dr in range(-r, r + 1):
                for dc in range(-r, r + 1):
                    seen.add((pos[0] + dr, pos[1] + dc))
        self._vis_cache = (key, seen)
        return seen

    def _symbol(self, cell: Cell) -> str:
        inst = self.instance
        assert inst is not None
        for i, p in enumerate(self.positions):
            if self.alive[i] and p == cell:
                return str(i + 1)
        if cell in inst.goals:
            return ANY_GOAL if self.config.goal_assignment == "any" else _goal_letter(inst.goals.index(cell))
        return inst.cell(cell)

    def _describe(self, cell: Cell) -> str:
        inst = self.instance
        assert inst is not None
        if not (0 <= cell[0] < inst.rows and 0 <= cell[1] < inst.cols):
            return "edge"
        vis = self.visible_cells()
        if vis is not None and cell not in vis:
            return "unseen"
        s = self._symbol(cell)
        if s.isdigit():
            return f"agent {s}"
        return {ICE: "ice", HOLE: "HOLE", WALL: "wall"}.get(s, f"goal {s}")

    def render_text(self) -> str:
        inst = self.instance
        if inst is None:
            return "(no episode; call reset)"
        vis = self.visible_cells()
        lines = [
            f"Step {self.steps} of {self.max_steps}. Agents home: {self._home_count()} of {self.n_agents}; "
            f"lost in holes: {self.alive.count(False)}."
        ]
        if self.last_events:
            lines.append("Last step: " + "; ".join(self.last_events) + ".")
        view = "whole map" if vis is None else f"only cells within {self.config.view_radius} of an agent"
        lines.append(f"Map ({view}; row numbers on the left, column numbers on top):")
        wide = inst.cols > 10
        if wide:
            lines.append("    " + " ".join(str(c // 10) if c >= 10 else " " for c in range(inst.cols)))
        lines.append("    " + " ".join(str(c % 10) for c in range(inst.cols)))
        for r in range(inst.rows):
            row = [self._symbol((r, c)) if vis is None or (r, c) in vis else UNSEEN for c in range(inst.cols)]
            lines.append(f"{r:>3} " + " ".join(row))
        lines.append(self._legend())
        lines.append("Agents:")
        for i in range(self.n_agents):
            lines.append("- " + self._agent_line(i))
        return "\n".join(lines)

    def _legend(self) -> str:
        n = self.n_agents
        agents = "1" if n == 1 else f"1-{n}"
        if self.config.goal_assignment == "any":
            goals = "G goal cell (any agent)"
        else:
            goals = ("a goal of agent 1" if n == 1 else f"a-{_goal_letter(n - 1)} goals (a = agent 1's goal, b = agent 2's, ...)")
        legend = f"Legend: . ice, H hole, # wall, {agents} agents, {goals}"
        if self.config.observation == "local":
            legend += ", ? not visible"
        return legend + "."

    def _agent_line(self, i: int) -> str:
        inst = self.instance
        assert inst is not None
        pos = self.positions[i]
        if self.config.goal_assignment == "any":
            goal_txt = "goal: any free G cell"
        else:
            goal_txt = f"goal {_goal_letter(i)} at {_fmt(inst.goals[i])}"
        if not self.alive[i]:
            return f"agent {i + 1}: lost (fell into the hole at {_fmt(pos)}); {goal_txt}"
        if self._is_home(i):
            return f"agent {i + 1}: at {_fmt(pos)}, HOME (on its goal); {goal_txt}"
        around = ", ".join(
            f"{m} {self._describe((pos[0] + MOVE_DELTAS[m][0], pos[1] + MOVE_DELTAS[m][1]))}"
            for m in ("up", "down", "left", "right")
        )
        return f"agent {i + 1}: at {_fmt(pos)}, {goal_txt}; next to it: {around}"

    def instructions(self) -> str:
        cfg = self.config
        n = cfg.n_agents
        lines = [
            "You control " + ("one agent" if n == 1 else f"{n} agents") + " on a frozen lake drawn as a grid "
            f"of {cfg.rows} rows x {cfg.cols} columns. Positions are written (row, column); row 0 is the top "
            "row and column 0 the left column.",
            "Goal: " + ("bring the agent to its goal cell." if n == 1 and cfg.goal_assignment == "own" else
                        "bring every agent to its own goal cell (agent 1 to a, agent 2 to b, ...)."
                        if cfg.goal_assignment == "own" else "bring every agent onto a different goal cell G."),
            "Moves: up (row - 1), down (row + 1), left (column - 1), right (column + 1), stay.",
            "Rules:",
            "- Ice '.' is safe. A hole 'H' swallows an agent that enters it: it is out of the game for good.",
            "- A wall '#' or the edge of the map blocks a move: the agent stays where it was.",
        ]
        if n > 1:
            lines += [
                "- All agents move at the same time. Two agents may not end on the same cell or swap cells: "
                "when that would happen, the agents involved stay where they were (a collision).",
                "- An agent may step into a cell that another agent leaves in the same step.",
            ]
        if cfg.slip_prob > 0:
            lines.append(
                f"- The ice is slippery: with probability {cfg.slip_prob:g} a move goes sideways "
                "(perpendicular to the chosen direction) instead. Staying never slips."
            )
        if cfg.observation == "local":
            lines.append(f"- You only see cells within {cfg.view_radius} steps of your agents; '?' is unseen.")
        lines += [
            f"- The game ends when every agent still in play is on its goal, or after {cfg.max_steps} steps. "
            "The score is the fraction of agents on their goals at the end.",
        ]
        if n == 1:
            lines.append("Action format: reply with exactly one move: up, down, left, right or stay.")
        else:
            example = format_joint_action(["up", "left"] + ["stay"] * (n - 2))
            lines.append(
                f"Action format: one move per agent, e.g. '{example}'. Every agent needs a move "
                "(up, down, left, right or stay); an agent that is not mentioned stays. An action that "
                "cannot be read makes every agent stay."
            )
        return "\n".join(lines)

    def render(self) -> str:
        return self.render_text()


def _fmt(cell: Cell) -> str:
    return f"({cell[0]},{cell[1]})"


def _goal_letter(i: int) -> str:
    return string.ascii_lowercase[i]


# ----------------------------------------------------------------------------------------------------
# gymnasium wrapper

GYM_ENV_ID = "promptevo/MAPFFrozenLake-v0"


class MAPFFrozenLakeGymEnv(gym.Env):
    """gymnasium view of :class:`MAPFFrozenLakeEnv`: MultiDiscrete actions (per agent, index into
    :data:`GYM_MOVES`, stay = 0) and the text observation as a ``Text`` space."""

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, config: MAPFConfig | dict | None = None, preset: str | None = None,
                 render_mode: str | None = None):
        if config is not None and preset is not None:
            raise MAPFConfigError("give either config or preset, not both")
        if isinstance(config, dict):
            config = make_mapf_config(config)
        if config is None:
            config = load_mapf_preset(preset or "easy")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self.text_env = MAPFFrozenLakeEnv(config)
        self.action_space = spaces.MultiDiscrete([len(GYM_MOVES)] * config.n_agents)
        # header/legend + map + per agent: its status line and up to three event lines
        max_len = 1000 + (config.rows + 2) * (2 * config.cols + 8) + config.n_agents * 500
        self.observation_space = spaces.Text(max_length=max_len, min_length=1, charset=string.printable)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        episode_seed = int(self.np_random.integers(0, 2**31 - 1))
        obs, info = self.text_env.reset(episode_seed)
        return obs, info

    def step(self, action):
        moves = [GYM_MOVES[int(a)] for a in np.asarray(action).reshape(-1)]
        res = self.text_env.step(format_joint_action(moves))
        return res.observation, res.reward, res.terminated, res.truncated, res.info

    def render(self):
        if self.render_mode == "ansi":
            return self.text_env.render_text()
        return None


# (registered with gymnasium by ``import promptevo``)


__all__ = [
    "GYM_ENV_ID", "GYM_MOVES", "MAPF_PRESETS", "MOVES", "MAPFConfig", "MAPFConfigError", "MAPFFrozenLakeEnv",
    "MAPFFrozenLakeGymEnv", "MAPFGenerationError", "MAPFInstance", "ParsedAction", "format_joint_action",
    "generate_instance", "instance_solvable", "load_mapf_config", "load_mapf_preset", "make_mapf_config",
    "parse_joint_action", "resolve_moves", "optimality_ratio",
]
