"""Reference solver for non-slippery MAPF-FrozenLake instances (the oracle).

Model (the same rules as :mod:`promptevo.envs.mapf.env` without slip): a 4-connected grid whose blocked cells
(holes and walls) may not be entered; every time step each agent moves to a free neighbour or stays;
two agents may not occupy one cell at one time (*vertex conflict*) nor exchange cells in one step
(*swap conflict*). Following another agent and rotations of three or more agents are allowed. An agent
that has arrived stays at its goal for good.

Solvers, tried in this order by :func:`solve`:

1. prioritized planning with space-time A* under several priority orders;
2. Conflict-Based Search (CBS, sum of costs), bounded by a node limit.

Everything here is pure Python with no state between calls.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

Cell = tuple[int, int]

#: move name -> (d_row, d_col); "up" decreases the row index (row 0 is the top line)
MOVE_DELTAS: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1), "stay": (0, 0)}
_DELTA_TO_MOVE: dict[Cell, str] = {d: m for m, d in MOVE_DELTAS.items()}


class SolverError(RuntimeError):
    """No joint plan was found within the solver's budget."""


@dataclass(frozen=True)
class GridMap:
    rows: int
    cols: int
    blocked: frozenset[Cell] = frozenset()

    def passable(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < self.rows and 0 <= c < self.cols and cell not in self.blocked

    @cached_property
    def adjacency(self) -> dict[Cell, tuple[Cell, ...]]:
        """Free cell -> (itself, its free 4-neighbours): the cells reachable in one time step."""
        return {
            (r, c): ((r, c), *self.neighbours((r, c)))
            for r in range(self.rows) for c in range(self.cols) if (r, c) not in self.blocked
        }

    def neighbours(self, cell: Cell) -> list[Cell]:
        r, c = cell
        out = []
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            nxt = (r + dr, c + dc)
            if self.passable(nxt):
                out.append(nxt)
        return out


def bfs_distances(grid: GridMap, source: Cell) -> dict[Cell, int]:
    """Shortest 4-connected distances from ``source`` to every reachable free cell."""
    if not grid.passable(source):
        return {}
    dist = {source: 0}
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        for nxt in grid.neighbours(cell):
            if nxt not in dist:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


@dataclass
class JointPlan:
    """One path per agent; ``paths[i][t]`` is agent i's cell at time t; it stays on ``paths[i][-1]``."""

    paths: list[list[Cell]]
    goals: list[Cell]
    method: str = ""
    orders_tried: int = 0
    cbs_nodes: int = 0

    @property
    def n_agents(self) -> int:
        return len(self.paths)

    @property
    def makespan(self) -> int:
        return max((len(p) - 1 for p in self.paths), default=0)

    @property
    def costs(self) -> list[int]:
        """Per-agent arrival time (time of the last move; the agent then stays on its goal)."""
        return [len(p) - 1 for p in self.paths]

    @property
    def sum_of_costs(self) -> int:
        return sum(self.costs)

    def position(self, agent: int, t: int) -> Cell:
        path = self.paths[agent]
        return path[min(t, len(path) - 1)]

    def joint_moves(self) -> list[list[str]]:
        """Per time step, the move name of each agent ("up", ..., "stay"), ``makespan`` steps long."""
        out = []
        for t in range(1, self.makespan + 1):
            step = []
            for i in range(self.n_agents):
                a, b = self.position(i, t - 1), self.position(i, t)
                step.append(_DELTA_TO_MOVE[(b[0] - a[0], b[1] - a[1])])
            out.append(step)
        return out


def optimality_ratio(agent_steps: int | Sequence[int], plan: JointPlan) -> float:
    """How many times longer the agents took than the oracle plan (1.0 = as good as the oracle).

    ``agent_steps`` as an int is the episode length and is compared with the plan's makespan; as a
    sequence of per-agent arrival times it is compared with the plan's sum of costs. Values below 1 are
    possible because prioritized planning is not optimal.
    """
    if isinstance(agent_steps, int):
        if agent_steps < 0:
            raise ValueError(f"agent_steps must be >= 0, got {agent_steps}")
        return agent_steps / max(plan.makespan, 1)
    steps = list(agent_steps)
    if len(steps) != plan.n_agents:
        raise ValueError(f"agent_steps has {len(steps)} entries but the plan has {plan.n_agents} agents")
    if any(s < 0 for s in steps):
        raise ValueError(f"agent_steps must be >= 0, got {steps}")
    return sum(steps) / max(plan.sum_of_costs, 1)


def validate_plan(grid: GridMap, starts: Sequence[Cell], goals: Sequence[Cell], paths: Sequence[Sequence[Cell]]) -> list[str]:
    """Independent check of a joint plan; returns a list of problems (empty = valid)."""
    problems: list[str] = []
    if len(paths) != len(starts):
        return [f"{len(paths)} paths for {len(starts)} agents"]
    for i, path in enumerate(paths):
        if not path or path[0] != starts[i]:
            problems.append(f"agent {i}: path does not begin at its start {starts[i]}")
            continue
        if path[-1] != goals[i]:
            problems.append(f"agent {i}: path ends at {path[-1]}, not at its goal {goals[i]}")
        for t, cell in enumerate(path):
            if not grid.passable(cell):
                problems.append(f"agent {i}: blocked or outside cell {cell} at t={t}")
            if t and abs(cell[0] - path[t - 1][0]) + abs(cell[1] - path[t - 1][1]) > 1:
                problems.append(f"agent {i}: jump {path[t - 1]}->{cell} at t={t}")
    if problems:
        return problems
    horizon = max(len(p) for p in paths)

    def pos(i: int, t: int) -> Cell:
        return paths[i][min(t, len(paths[i]) - 1)]

    for t in range(horizon):
        seen: dict[Cell, int] = {}
        for i in range(len(paths)):
            cell = pos(i, t)
            if cell in seen:
                problems.append(f"vertex conflict: agents {seen[cell]} and {i} at {cell}, t={t}")
            seen[cell] = i
        if t:
            for i, j in itertools.combinations(range(len(paths)), 2):
                if pos(i, t) == pos(j, t - 1) and pos(j, t) == pos(i, t - 1) and pos(i, t) != pos(i, t - 1):
                    problems.append(f"swap conflict: agents {i} and {j}, t={t}")
    return problems


# ----------------------------------------------------------------------------------------------------
# low level: space-time A*


@dataclass
class Constraints:
    """Forbidden space-time facts for one agent."""

    vertex: set[tuple[Cell, int]] = field(default_factory=set)  # (cell, t)
    edge: set[tuple[Cell, Cell, int]] = field(default_factory=set)  # move a->b arriving at t
    parked: dict[Cell, int] = field(default_factory=dict)  # cell forbidden for every t >= value

    def last_time(self) -> int:
        times = [t for _, t in self.vertex] + [t for *_, t in self.edge] + list(self.parked.values())
        return max(times, default=0)


def space_time_astar(
    grid: GridMap,
    start: Cell,
    goal: Cell,
    heuristic: dict[Cell, int],
    cons: Constraints,
    max_time: int | None = None,
) -> list[Cell] | None:
    """Shortest path in (cell, time) that respects ``cons``; the agent then stays on ``goal`` forever."""
    if goal not in heuristic or start not in heuristic:
        return None
    if goal in cons.parked:
        return None
    goal_last = max((t for c, t in cons.vertex if c == goal), default=-1)
    if max_time is None:
        max_time = cons.last_time() + grid.rows * grid.cols + 1
    parked = cons.parked
    vertex = cons.vertex
    edge = cons.edge
    adjacency = grid.adjacency

    def blocked(cell: Cell, t: int) -> bool:
        p = parked.get(cell)
        return (p is not None and t >= p) or (cell, t) in vertex

    if blocked(start, 0):
        return None
    counter = itertools.count()
    open_heap = [(heuristic[start], 0, next(counter), start, 0)]
    parent: dict[tuple[Cell, int], tuple[Cell, int] | None] = {(start, 0): None}
    while open_heap:
        _, neg_t, _, cell, t = heapq.heappop(open_heap)
        if cell == goal and t > goal_last:
            path = []
            node: tuple[Cell, int] | None = (cell, t)
            while node is not None:
                path.append(node[0])
                node = parent[node]
            return path[::-1]
        if t >= max_time:
            continue
        nt = t + 1
        for nxt in adjacency[cell]:
            key = (nxt, nt)
            if key in parent or blocked(nxt, nt) or (cell, nxt, nt) in edge:
                continue
            parent[key] = (cell, t)
            heapq.heappush(open_heap, (nt + heuristic[nxt], -nt, next(counter), nxt, nt))
    return None


# ----------------------------------------------------------------------------------------------------
# prioritized planning


def _reserve(cons: Constraints, path: list[Cell]) -> None:
    for t, cell in enumerate(path[:-1]):
        cons.vertex.add((cell, t))
    for t in range(1, len(path)):
        a, b = path[t - 1], path[t]
        if a != b:
            cons.edge.add((b, a, t))  # the reverse move would be a swap
    cons.parked[path[-1]] = len(path) - 1


def prioritized_plan(
    grid: GridMap,
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    order: Sequence[int],
    heuristics: Sequence[dict[Cell, int]] | None = None,
) -> list[list[Cell]] | None:
    """Plan agents one at a time in ``order``, each avoiding the ones planned before; None on failure."""
    heuristics = heuristics or [bfs_distances(grid, g) for g in goals]
    cons = Constraints()
    paths: list[list[Cell] | None] = [None] * len(starts)
    for i in order:
        path = space_time_astar(grid, starts[i], goals[i], heuristics[i], cons)
        if path is None:
            return None
        paths[i] = path
        _reserve(cons, path)
    return [p for p in paths if p is not None]


# ----------------------------------------------------------------------------------------------------
# CBS


def _first_conflict(paths: Sequence[list[Cell]]) -> tuple | None:
    horizon = max(len(p) for p in paths)

    def pos(i: int, t: int) -> Cell:
        return paths[i][min(t, len(paths[i]) - 1)]

    n = len(paths)
    for t in range(horizon):
        seen: dict[Cell, int] = {}
        for i in range(n):
            cell = pos(i, t)
            if cell in seen:
                return ("vertex", seen[cell], i, cell, t)
            seen[cell] = i
        if t:
            for i in range(n):
                a, b = pos(i, t - 1), pos(i, t)
                if a == b:
                    continue
                for j in range(i + 1, n):
                    if pos(j, t - 1) == b and pos(j, t) == a:
                        return ("swap", i, j, a, b, t)
    return None


def cbs_plan(
    grid: GridMap,
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    node_limit: int = 2000,
    heuristics: Sequence[dict[Cell, int]] | None = None,
) -> tuple[list[list[Cell]] | None, int]:
    """Conflict-Based Search minimising the sum of costs. Returns (paths or None, nodes expanded)."""
    heuristics = heuristics or [bfs_distances(grid, g) for g in goals]
    n = len(starts)
    root_cons = [Constraints() for _ in range(n)]
    root_paths = []
    for i in range(n):
        p = space_time_astar(grid, starts[i], goals[i], heuristics[i], root_cons[i])
        if p is None:
            return None, 0
        root_paths.append(p)
    counter = itertools.count()
    heap = [(sum(len(p) - 1 for p in root_paths), next(counter), root_cons, root_paths)]
    expanded = 0
    while heap and expanded < node_limit:
        _, _, cons, paths = heapq.heappop(heap)
        expanded += 1
        conflict = _first_conflict(paths)
        if conflict is None:
            return paths, expanded
        if conflict[0] == "vertex":
            _, i, j, cell, t = conflict
            branches = [(i, ("v", cell, t)), (j, ("v", cell, t))]
        else:
            _, i, j, a, b, t = conflict
            branches = [(i, ("e", a, b, t)), (j, ("e", b, a, t))]
        for agent, c in branches:
            new_cons = list(cons)
            ac = Constraints(set(cons[agent].vertex), set(cons[agent].edge))
            if c[0] == "v":
                ac.vertex.add((c[1], c[2]))
            else:
                ac.edge.add((c[1], c[2], c[3]))
            new_cons[agent] = ac
            p = space_time_astar(grid, starts[agent], goals[agent], heuristics[agent], ac)
            if p is None:
                continue
            new_paths = list(paths)
            new_paths[agent] = p
            heapq.heappush(heap, (sum(len(q) - 1 for q in new_paths), next(counter), new_cons, new_paths))
    return None, expanded


# ----------------------------------------------------------------------------------------------------
# goal assignment for goal_assignment="any"


def assign_goals(distances: Sequence[dict[Cell, int]], goals: Sequence[Cell]) -> list[Cell] | None:
    """Minimum-sum-of-distances perfect matching agents -> goals (bitmask DP); None if none exists.

    ``distances[i]`` are BFS distances from agent i's start.
    """
    n, m = len(distances), len(goals)
    inf = float("inf")
    # best[mask] over the first popcount(mask) agents
    best: dict[int, tuple[float, list[int]]] = {0: (0.0, [])}
    for i in range(n):
        nxt: dict[int, tuple[float, list[int]]] = {}
        for mask, (cost, chosen) in best.items():
            for g in range(m):
                if mask >> g & 1:
                    continue
                d = distances[i].get(goals[g], inf)
                if d == inf:
                    continue
                key = mask | (1 << g)
                cand = cost + d
                if key not in nxt or cand < nxt[key][0]:
                    nxt[key] = (cand, chosen + [g])
        best = nxt
        if not best:
            return None
    _, chosen = min(best.values(), key=lambda v: v[0])
    return [goals[g] for g in chosen]


# ----------------------------------------------------------------------------------------------------
# entry point


def _orders(n: int, dists: Sequence[int], rng: random.Random, max_orders: int) -> Iterable[list[int]]:
    seen: set[tuple[int, ...]] = set()
    base = [
        sorted(range(n), key=lambda i: -dists[i]),
        sorted(range(n), key=lambda i: dists[i]),
        list(range(n)),
    ]
    candidates = itertools.chain(base, (rng.sample(range(n), n) for _ in range(max_orders * 4)))
    for order in candidates:
        key = tuple(order)
        if key in seen:
            continue
        seen.add(key)
        yield list(order)
        if len(seen) >= max_orders:
            return


def solve(
    grid: GridMap,
    starts: Sequence[Cell],
    goals: Sequence[Cell],
    *,
    goal_assignment: str = "own",
    max_orders: int = 24,
    cbs_node_limit: int = 2000,
    seed: int = 0,
) -> JointPlan:
    """Joint plan for the non-slippery instance; raises :class:`SolverError` when none is found.

    ``goal_assignment="any"``: agents may end on any goal cell; the goals are first matched to agents
    by minimum total BFS distance.
    """
    starts = list(starts)
    goals = list(goals)
    if len(starts) != len(goals):
        raise ValueError(f"{len(starts)} starts but {len(goals)} goals")
    if goal_assignment not in ("own", "any"):
        raise ValueError(f"goal_assignment must be 'own' or 'any', got {goal_assignment!r}")
    if goal_assignment == "any":
        start_d = [bfs_distances(grid, s) for s in starts]
        assigned = assign_goals(start_d, goals)
        if assigned is None:
            raise SolverError("no assignment of agents to reachable goals exists")
        goals = assigned
    heuristics = [bfs_distances(grid, g) for g in goals]
    for i, s in enumerate(starts):
        if s not in heuristics[i]:
            raise SolverError(f"agent {i} cannot reach its goal {goals[i]} from {s}")
    rng = random.Random(seed)
    dists = [heuristics[i][starts[i]] for i in range(len(starts))]
    tried = 0
    for order in _orders(len(starts), dists, rng, max_orders):
        tried += 1
        paths = prioritized_plan(grid, starts, goals, order, heuristics)
        if paths is not None:
            return JointPlan(paths, goals, method="prioritized", orders_tried=tried)
    paths, nodes = cbs_plan(grid, starts, goals, cbs_node_limit, heuristics)
    if paths is not None:
        return JointPlan(paths, goals, method="cbs", orders_tried=tried, cbs_nodes=nodes)
    raise SolverError(
        f"no joint plan found ({tried} priority orders, CBS gave up after {nodes} nodes)"
    )
