"""The ``toytext`` env family: gymnasium's toy-text games FrozenLake, Taxi and CliffWalking as text envs.

One adapter over the installed gymnasium envs (built with ``gymnasium.make``: dynamics, rewards, seeding
and time limit are gymnasium's own); promptevo adds the text on both sides. ``[env]`` parameters:

* ``id`` (required): a gymnasium id registered in the installed gymnasium: ``FrozenLake-v1``,
  ``FrozenLake8x8-v1``, ``Taxi-v4`` (``Taxi-v3`` on older gymnasium), ``CliffWalking-v1`` or
  ``CliffWalkingSlippery-v1`` (``CliffWalking-v0`` on older gymnasium);
* the gymnasium keyword arguments whitelisted for that id in :data:`GAMES` (``map_name``, ``desc``,
  ``is_slippery``, ``success_rate`` for FrozenLake; ``is_rainy``, ``rainy_probability``,
  ``fickle_passenger``, ``fickle_probability`` for Taxi; ``is_slippery`` for CliffWalking);
* ``max_steps``: the step limit (gymnasium's TimeLimit). Default: gymnasium's limit for the game
  (FrozenLake 4x4: 100, 8x8: 200, Taxi: 200); CliffWalking has none in gymnasium, promptevo uses 100.

Text: the observation is a small map (row numbers on the left, column numbers on top) and plain
sentences with the positions; the previous step's outcome comes first ("Last action: ..."). Actions are
words ("left", "down", "right", "up"; Taxi adds "pickup" and "dropoff"), listed in gymnasium's action
order; "north"/"south"/"east"/"west", "move up" or "pick up" are read as well. An invalid action runs
gymnasium's action 0 (FrozenLake "left", Taxi "down", CliffWalking "up") and is reported in
``info["valid_action"]`` and in the next observation.

Success: FrozenLake reaching G (reward 1), Taxi dropping the passenger at the destination, CliffWalking
reaching the goal. ``progression`` is 1.0 on success, else 0.0; the return is the sum of gymnasium's
rewards. ``progress()``: FrozenLake / CliffWalking: reduction of the shortest safe path (BFS on the map)
to the goal since the start, normalised (a fall into a hole counts from the cell the player fell from);
Taxi: reduction of the remaining moves + pickup + dropoff along the roads. ``state_key()``: gymnasium's
integer state when the game is deterministic (not slippery, rainy or fickle), else None.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Callable

from promptevo.envs.base import ActionSpace, ExpertError, StepResult, TextEnv, normalize_action
from promptevo.envs.registry import register_env
from promptevo.envs.planning import bfs, optimal_policy

Cell = tuple[int, int]


#: gymnasium id -> (game, the gymnasium keyword arguments a task may set)
GAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "FrozenLake-v1": ("frozenlake", ("map_name", "desc", "is_slippery", "success_rate")),
    "FrozenLake8x8-v1": ("frozenlake", ("is_slippery", "success_rate")),
    "Taxi-v4": ("taxi", ("is_rainy", "rainy_probability", "fickle_passenger", "fickle_probability")),
    "Taxi-v3": ("taxi", ("is_rainy", "fickle_passenger")),
    "CliffWalking-v1": ("cliffwalking", ("is_slippery",)),
    "CliffWalkingSlippery-v1": ("cliffwalking", ()),
    "CliffWalking-v0": ("cliffwalking", ()),
}
#: step limit where gymnasium registers none (CliffWalking)
DEFAULT_LIMIT = 100
FROZENLAKE_MAPS = ("4x4", "8x8")
_DELTAS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
_COORDS = "Positions are (row, column); row 0 is the top row and column 0 the left column."
_MOVES = "Moves: up (row - 1), down (row + 1), left (column - 1), right (column + 1)."
_SYNONYMS = {"north": "up", "south": "down", "west": "left", "east": "right", "pick up": "pickup",
             "pick-up": "pickup", "drop off": "dropoff", "drop-off": "dropoff", "drop": "dropoff"}


# ----------------------------------------------------------------------------------------------------
# parameters


def _installed_ids() -> list[str]:
    import gymnasium as gym  # imported here: loading promptevo does not need gymnasium

    return [k for k in GAMES if k in gym.registry]


def _is_prob(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and 0.0 <= v <= 1.0


_BOOL = (lambda v: isinstance(v, bool), "true or false")
_PROB = (_is_prob, "a number from 0 to 1")
#: parameter -> (test, what it must be)
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "is_slippery": _BOOL, "is_rainy": _BOOL, "fickle_passenger": _BOOL, "success_rate": _PROB,
    "rainy_probability": _PROB, "fickle_probability": _PROB,
    "map_name": (lambda v: v in FROZENLAKE_MAPS, "one of " + ", ".join(FROZENLAKE_MAPS)),
    "max_steps": (lambda v: type(v) is int and v >= 1, "an integer >= 1"),
}


def _desc(v: Any) -> list[str]:
    if not isinstance(v, list) or not v or not all(isinstance(r, str) and r for r in v):
        raise ValueError("desc must be a list of map rows such as [\"SFFF\", \"FHFH\", \"FFFH\", \"HFFG\"]")
    if len({len(r) for r in v}) != 1:
        raise ValueError("desc rows must all have the same length")
    bad = sorted(set("".join(v)) - set("SFHG"))
    if bad:
        raise ValueError(f"desc may only use S, F, H and G (got {bad[0]!r})")
    if "".join(v).count("S") != 1 or "G" not in "".join(v):
        raise ValueError("desc needs exactly one start S and at least one goal G")
    cells = {ch: {(r, c) for r, row in enumerate(v) for c, x in enumerate(row) if x == ch} for ch in "SGH"}
    if not cells["S"] <= set(bfs(cells["G"], _grid_neighbours(len(v), len(v[0]), cells["H"]))):
        raise ValueError("desc: no goal G can be reached from the start S without crossing a hole H")
    return list(v)


def check(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked and normalised (``id`` first); ValueError with one line when wrong."""
    pid = params.get("id")
    if pid is None:
        raise ValueError(f"family 'toytext' needs id (one of {', '.join(_installed_ids())})")
    if not isinstance(pid, str) or pid not in GAMES:
        raise ValueError(f"unknown toytext id {pid!r} (supported: {', '.join(_installed_ids())})")
    if pid not in _installed_ids():
        raise ValueError(f"id {pid!r} is not registered in the installed gymnasium (use one of "
                         f"{', '.join(_installed_ids())})")
    allowed = GAMES[pid][1] + ("max_steps",)
    out: dict[str, Any] = {"id": pid}
    for k, v in params.items():
        if k == "id":
            continue
        if k not in allowed:
            raise ValueError(f"unknown {pid} parameter {k!r} (valid: {', '.join(allowed)})")
        if k == "desc":
            out[k] = _desc(v)
        elif not _RULES[k][0](v):
            raise ValueError(f"{k} must be {_RULES[k][1]} (got {v!r})")
        else:
            out[k] = float(v) if _RULES[k] is _PROB else v
    if "map_name" in out and "desc" in out:
        raise ValueError("give either map_name or desc, not both")
    return out


def _grid_neighbours(nrow: int, ncol: int, blocked: set[Cell]) -> Callable[[Cell], list[Cell]]:
    def neighbours(cell: Cell) -> list[Cell]:
        cells = [(cell[0] + dr, cell[1] + dc) for dr, dc in _DELTAS.values()]
        return [n for n in cells if 0 <= n[0] < nrow and 0 <= n[1] < ncol and n not in blocked]

    return neighbours


def _rows(desc: Any) -> list[str]:
    """A gymnasium ``desc`` (array of single bytes) as a list of strings."""
    return ["".join(ch.decode() if isinstance(ch, bytes) else str(ch) for ch in row) for row in desc]


def _at(cell: Cell) -> str:
    return f"row {cell[0]}, column {cell[1]}"


def _fmt_prob(p: float) -> str:
    for num, den in ((1, 3), (2, 3), (1, 6)):
        if abs(p - num / den) < 1e-9:
            return f"{num}/{den}"
    return f"{p:g}"


def grid_lines(symbols: list[list[str]]) -> list[str]:
    """A map with column numbers on top and row numbers on the left."""
    nrow, ncol = len(symbols), len(symbols[0])
    w, rw = len(str(ncol - 1)), len(str(nrow - 1))
    lines = [" " * (rw + 1) + " ".join(str(c).rjust(w) for c in range(ncol))]
    lines += [str(r).rjust(rw) + " " + " ".join(s.rjust(w) for s in row) for r, row in enumerate(symbols)]
    return lines


class ToyTextActionSpace(ActionSpace):
    """The env's action words; compass words, "move up" and "pick up" style spellings are read too."""

    def match(self, candidate: str) -> str | None:
        if not isinstance(candidate, str):
            return None
        t = normalize_action(candidate).removeprefix("move ").removeprefix("go ")
        return super().match(candidate) or super().match(_SYNONYMS.get(t, t))


# ----------------------------------------------------------------------------------------------------
# the adapter


class ToyTextEnv(TextEnv):
    """Common part: builds the gymnasium env, plays text actions, counts, reports. A game subclass gives
    ``ACTIONS`` (words in gymnasium's action order) and the text, success and progress of its game."""

    family = "toytext"
    ACTIONS: tuple[str, ...] = ()
    #: game-specific counters of :meth:`episode_stats` (besides bumps and slips)
    COUNTERS: tuple[str, ...] = ()

    def __init__(self, params: dict[str, Any]):
        import gymnasium as gym

        self.params = check(params)
        self.env_id: str = self.params["id"]
        self.kwargs = {k: v for k, v in self.params.items() if k not in ("id", "max_steps")}
        self._limit = int(self.params.get("max_steps") or self._default_limit())
        self.gym_env = gym.make(self.env_id, disable_env_checker=True, max_episode_steps=self._limit, **self.kwargs)
        self.core = self.gym_env.unwrapped
        self.deterministic = self._is_deterministic()
        self._space = ToyTextActionSpace(list(self.ACTIONS))
        self._index = {a: i for i, a in enumerate(self.ACTIONS)}
        self._started = False
        self.state = self._start_state = self._seed = 0
        self._policy: list[int] | None = None  # the expert's action per state, computed on first use
        self._new_episode()

    def _default_limit(self) -> int:
        import gymnasium as gym

        # FrozenLake-v1 on the 8x8 map: the limit gymnasium registers for that map (FrozenLake8x8-v1)
        big = self.params.get("map_name") == "8x8" and "FrozenLake8x8-v1" in gym.registry
        limit = gym.spec("FrozenLake8x8-v1" if big else self.env_id).max_episode_steps
        return int(limit) if limit else DEFAULT_LIMIT

    def _is_deterministic(self) -> bool:
        table = getattr(self.core, "P", None)
        if not isinstance(table, dict) or getattr(self.core, "fickle_passenger", False):
            return False
        return all(sum(1 for t in outs if t[0] > 0) == 1 for acts in table.values() for outs in acts.values())

    def _new_episode(self) -> None:
        self._steps, self._return, self._invalid = 0, 0.0, 0
        self._done = self._success = False
        self._notes: list[str] = []
        self._counts: dict[str, int] = {}
        self._stats: dict[str, int] = {"bumps": 0, "slips": 0, **{k: 0 for k in self.COUNTERS}}

    # -- TextEnv properties
    @property
    def valid_actions(self) -> list[str]:
        return list(self.ACTIONS)

    @property
    def default_action(self) -> str:
        return self.ACTIONS[0]

    def action_space(self) -> ActionSpace:
        return self._space

    @property
    def max_steps(self) -> int:
        return self._limit

    @property
    def mission(self) -> str:
        return self._mission() if self._started else ""

    @property
    def progression(self) -> float:
        return 1.0 if self._success else 0.0

    # -- episode
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        if isinstance(seed, bool) or not hasattr(seed, "__index__") or int(seed) < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        obs, _ = self.gym_env.reset(seed=int(seed))
        self._seed = int(seed)
        self.state = self._start_state = int(obs)
        self._started = True
        self._new_episode()
        self._on_reset()
        info = self._info(valid=True, executed=None, reward=0.0)
        info["valid_actions"] = self.valid_actions
        return self.render_text(), info

    def step(self, action: str) -> StepResult:
        if not self._started:
            raise RuntimeError("call reset(seed) before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset(seed) to start a new one")
        canon = self._space.match(action) if isinstance(action, str) else None
        valid, executed = canon is not None, canon or self.default_action
        prev = self.state
        obs, reward, terminated, truncated, _ = self.gym_env.step(self._index[executed])
        self.state, reward = int(obs), float(reward)
        self._steps, self._return = self._steps + 1, self._return + reward
        self._counts[executed] = self._counts.get(executed, 0) + 1
        self._success = bool(terminated) and self._is_success()
        self._done = bool(terminated or truncated)
        notes = []
        if not valid:
            self._invalid += 1
            shown = action if isinstance(action, str) else repr(action)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            notes.append(f"{shown!r} is not a valid action, so {executed} was played instead.")
        notes.append(self._event(prev, executed, reward))
        if truncated and not terminated:
            notes.append(f"The step limit ({self._limit}) is reached; the episode is over.")
        self._notes = notes
        info = self._info(valid=valid, executed=executed, reward=reward)
        if self._done:
            info["episode_stats"] = self.episode_stats()
        return StepResult(self.render_text(), reward, bool(terminated), bool(truncated), info)

    def _info(self, *, valid: bool, executed: str | None, reward: float) -> dict[str, Any]:
        return {"mission": self.mission, "valid_action": valid, "executed_action": executed,
                "progression": self.progression, "success": self._success, "step": self._steps,
                "max_steps": self._limit, "reward": reward, "state": self.state, "id": self.env_id}

    def state_key(self) -> object | None:
        return self.state if self.deterministic and self._started else None

    def expert_action(self) -> str | None:
        """The optimal action here: value iteration over gymnasium's ``P`` table (once per env)."""
        if not self._started or self._done:
            raise ExpertError("no episode in progress")
        if self._policy is None:
            if not isinstance(getattr(self.core, "P", None), dict):
                raise ExpertError(f"{self.env_id} has no transition model to plan with")
            self._policy = optimal_policy(self.core.P, len(self.ACTIONS))
        return self.ACTIONS[self._policy[self.state]]

    def episode_stats(self) -> dict[str, Any]:
        return {"id": self.env_id, "seed": self._seed, "steps": self._steps, "success": self._success,
                "return": self._return, "invalid_actions": self._invalid, "deterministic": self.deterministic,
                "optimal_steps": self._optimal_steps(), "action_frequency": dict(self._counts),
                **self._stats}

    def render_text(self) -> str:
        if not self._started:
            return "(no episode; call reset)"
        lines = ["Last action: " + " ".join(self._notes)] if self._notes else []
        return "\n".join(lines + self._describe())

    def close(self) -> None:
        self.gym_env.close()

    def _action_rule(self) -> str:
        return (f"Actions: reply with exactly one of {', '.join(self.ACTIONS)}. Anything else is invalid and "
                f"counts as {self.default_action}.")

    # -- per game
    def _on_reset(self) -> None:
        pass

    @abstractmethod
    def _mission(self) -> str: ...

    @abstractmethod
    def _describe(self) -> list[str]:
        """The observation without the "Last action" line."""

    @abstractmethod
    def _event(self, prev: int, action: str, reward: float) -> str:
        """Sentence about the step from state ``prev`` with ``action`` (also counts bumps, slips...)."""

    @abstractmethod
    def _is_success(self) -> bool: ...

    def _optimal_steps(self) -> int | None:
        return None


class GridWalkEnv(ToyTextEnv):
    """FrozenLake and CliffWalking: one walker on a grid, cells numbered ``row * ncol + column``."""

    tile_names: dict[str, str] = {}
    blocked: set[Cell] = set()  # cells a safe path avoids (holes, cliff)

    def _setup_grid(self, tiles: list[str]) -> None:
        self.tiles = tiles
        self.nrow, self.ncol = len(tiles), len(tiles[0])
        self.start = next((r, row.index("S")) for r, row in enumerate(tiles) if "S" in row)
        self.goals = {(r, c) for r, row in enumerate(tiles) for c, ch in enumerate(row) if ch == "G"}
        self.dist = bfs(self.goals, _grid_neighbours(self.nrow, self.ncol, self.blocked))

    def cell(self, state: int | None = None) -> Cell:
        r, c = divmod(self.state if state is None else state, self.ncol)
        return int(r), int(c)

    def _target(self, cell: Cell, move: str) -> Cell:
        dr, dc = _DELTAS[move]
        return min(max(cell[0] + dr, 0), self.nrow - 1), min(max(cell[1] + dc, 0), self.ncol - 1)

    def _on_reset(self) -> None:
        self._last_safe = self.cell()

    def _is_success(self) -> bool:
        return self.cell() in self.goals

    def _optimal_steps(self) -> int | None:
        return self.dist.get(self.cell(self._start_state))

    def progress(self) -> float | None:
        d0 = self.dist.get(self.cell(self._start_state)) if self._started else None
        d = self.dist.get(self._last_safe)
        if not d0 or d is None:
            return None
        return 1.0 if self._success else max(0.0, min(1.0, (d0 - d) / d0))

    def _moved(self, prev: int, action: str) -> str:
        """Sentence about a move from ``prev`` to the current cell (edge bump, slip or plain move)."""
        p, n = self.cell(prev), self.cell()
        intended = self._target(p, action)
        if n == intended:
            if n == p:
                self._stats["bumps"] += 1
                return f"{action}: the edge of the map is there, so you stayed at {_at(n)}."
            return f"{action}: you moved to {_at(n)}."
        self._stats["slips"] += 1
        slid = [m for m in _DELTAS if self._target(p, m) == n and m != action]
        if n == p:
            return f"{action}: you slipped sideways into the edge and stayed at {_at(n)}."
        return f"{action}: you slipped and slid {slid[0] if slid else 'sideways'} instead, to {_at(n)}."

    def _symbols(self) -> list[list[str]]:
        rows = [list(r) for r in self.tiles]
        r, c = self.cell()
        rows[r][c] = "X"
        return rows

    def _around(self) -> str:
        p = self.cell()

        def what(m: str) -> str:
            r, c = p[0] + _DELTAS[m][0], p[1] + _DELTAS[m][1]
            return self.tile_names[self.tiles[r][c]] if 0 <= r < self.nrow and 0 <= c < self.ncol else "edge"

        return "Around you: " + ", ".join(f"{m}: {what(m)}" for m in _DELTAS) + "."


class FrozenLakeText(GridWalkEnv):
    """FrozenLake: walk from S to G on the ice without falling into a hole H."""

    ACTIONS = ("left", "down", "right", "up")  # gymnasium: 0 left, 1 down, 2 right, 3 up
    COUNTERS = ("holes",)
    tile_names = {"S": "start S (ice)", "F": "ice F", "H": "HOLE H", "G": "goal G"}

    def __init__(self, params: dict[str, Any]):
        super().__init__(params)
        tiles = _rows(self.core.desc)
        self.blocked = {(r, c) for r, row in enumerate(tiles) for c, ch in enumerate(row) if ch == "H"}
        self._setup_grid(tiles)
        self.slippery = not self.deterministic
        self.success_rate = float(self.kwargs.get("success_rate", 1.0 / 3.0))

    def _mission(self) -> str:
        goals = " or ".join(_at(g) for g in sorted(self.goals))
        return f"Reach the goal G at {goals} without falling into a hole H."

    def _event(self, prev: int, action: str, reward: float) -> str:
        text = self._moved(prev, action)
        n = self.cell()
        if n in self.blocked:
            self._stats["holes"] += 1
            return text + " That cell is a hole H: you fell in and the episode is over."
        self._last_safe = n
        if self._success:
            return text + f" You reached the goal G (reward {reward:g}). The episode is over."
        return text

    def _describe(self) -> list[str]:
        goals = " and ".join(_at(g) for g in sorted(self.goals))
        holes = ", ".join(f"({r},{c})" for r, c in sorted(self.blocked))
        lines = ["Map (row numbers on the left, column numbers on top):", *grid_lines(self._symbols()),
                 "Legend: X you, S start, F frozen ice (safe), H hole, G goal.",
                 f"You are at {_at(self.cell())}. The goal G is at {goals}. "
                 + (f"Holes H (row,column): {holes}." if holes else "There are no holes.")]
        if not self._done:
            lines.append(self._around())
        return lines

    def instructions(self) -> str:
        lines = [
            f"You walk on a frozen lake drawn as a grid of {self.nrow} rows x {self.ncol} columns. {_COORDS}",
            "Goal: walk from the start S to the goal G without falling into a hole H.",
            "Tiles: S start and F frozen ice are safe; H is a hole: stepping into it ends the episode as a "
            "failure; G is the goal: stepping onto it ends the episode as a success.",
            _MOVES + " A move off the map leaves you where you are.",
        ]
        if self.slippery:
            side = (1.0 - self.success_rate) / 2
            lines.append(f"The ice is slippery: a move goes in the chosen direction only with probability "
                         f"{_fmt_prob(self.success_rate)}; otherwise you slide to one of the two perpendicular "
                         f"directions (probability {_fmt_prob(side)} each). You never slide backwards.")
        else:
            lines.append("The ice is not slippery: every move goes exactly where you chose.")
        lines += [f"Reward: 1 for reaching the goal, 0 otherwise. The episode ends after {self._limit} steps "
                  "at the latest.", self._action_rule()]
        return "\n".join(lines)


class CliffWalkingText(GridWalkEnv):
    """CliffWalking: walk along the cliff from S to G; stepping onto the cliff costs -100 and restarts."""

    ACTIONS = ("up", "right", "down", "left")  # gymnasium: 0 up, 1 right, 2 down, 3 left
    COUNTERS = ("cliff_falls",)
    tile_names = {"S": "start S", ".": "ground", "C": "CLIFF C", "G": "goal G"}

    def __init__(self, params: dict[str, Any]):
        super().__init__(params)
        nrow, ncol = (int(x) for x in getattr(self.core, "shape", (4, 12)))
        # gymnasium's layout: start bottom-left, goal bottom-right, the cliff between them
        tiles = ["." * ncol] * (nrow - 1) + ["S" + "C" * (ncol - 2) + "G"]
        self.blocked = {(nrow - 1, c) for c in range(1, ncol - 1)}
        self._setup_grid(tiles)

    def _mission(self) -> str:
        return (f"Walk from the start S at {_at(self.start)} to the goal G at {_at(min(self.goals))} "
                "without stepping onto the cliff C.")

    def _event(self, prev: int, action: str, reward: float) -> str:
        if reward <= -100:
            self._stats["cliff_falls"] += 1
            self._last_safe = self.cell()
            slip = " (you slipped on the ice)" if not self.deterministic else ""
            return (f"{action}: you stepped onto the cliff{slip} (reward {reward:g}) and were sent back to "
                    f"the start S at {_at(self.cell())}.")
        text = self._moved(prev, action)
        self._last_safe = self.cell()
        if self._success:
            return text + " You reached the goal G. The episode is over."
        return text

    def _describe(self) -> list[str]:
        cliff = sorted(self.blocked)
        return ["Map (row numbers on the left, column numbers on top):", *grid_lines(self._symbols()),
                "Legend: X you, S start, . ground (safe), C cliff, G goal.",
                f"You are at {_at(self.cell())}. The goal G is at {_at(min(self.goals))}. The cliff C covers "
                f"row {cliff[0][0]}, columns {cliff[0][1]} to {cliff[-1][1]}.", self._around()]

    def instructions(self) -> str:
        c0, c1 = min(self.blocked), max(self.blocked)
        lines = [
            f"You walk on a grid of {self.nrow} rows x {self.ncol} columns. {_COORDS}",
            f"Goal: walk from the start S at {_at(self.start)} to the goal G at {_at(min(self.goals))}. Between "
            f"them lies a cliff C (row {c0[0]}, columns {c0[1]} to {c1[1]}).",
            _MOVES + " A move off the map leaves you where you are.",
            "Stepping onto the cliff costs -100 and puts you back on the start S; the episode goes on.",
        ]
        if not self.deterministic:
            lines.append("The ground is slippery: a move goes in the chosen direction with probability 1/3 and "
                         "to each of the two perpendicular directions with probability 1/3.")
        lines += [f"Reward: -1 per step (-100 for the cliff). Reaching G ends the episode as a success; it "
                  f"ends after {self._limit} steps at the latest.", self._action_rule()]
        return "\n".join(lines)


PADS = ("R", "G", "Y", "B")
PAD_COLOURS = ("red", "green", "yellow", "blue")


class TaxiText(ToyTextEnv):
    """Taxi: drive to the passenger's pad, pick them up, drive to the destination pad, drop them off."""

    ACTIONS = ("down", "up", "right", "left", "pickup", "dropoff")  # gymnasium's order 0..5
    COUNTERS = ("illegal", "wrong_dropoffs")

    def __init__(self, params: dict[str, Any]):
        super().__init__(params)
        self.desc = _rows(self.core.desc)
        self.nrow = len(self.desc) - 2
        self.ncol = (len(self.desc[0]) - 1) // 2
        self.locs: list[Cell] = [tuple(x) for x in self.core.locs]  # type: ignore[misc]
        # road distance from every cell to each pad (walls block both ways, so it is symmetric)
        roads = lambda cell: [n for m in _DELTAS if (n := self._step_from(cell, m)) is not None]  # noqa: E731
        self._roads = [bfs({loc}, roads) for loc in self.locs]

    def decode(self, state: int | None = None) -> tuple[int, int, int, int]:
        """(taxi row, taxi column, passenger location 0-3 or 4 = in the taxi, destination 0-3), by
        gymnasium's own ``decode``."""
        r, c, p, d = self.core.decode(self.state if state is None else state)
        return int(r), int(c), int(p), int(d)

    def _step_from(self, cell: Cell, move: str) -> Cell | None:
        """Where a move leads on the roads, None when a wall or the edge blocks it (gymnasium's map has
        ':' between two cells where the road is open, '|' where a wall is)."""
        r, c = cell[0] + _DELTAS[move][0], cell[1] + _DELTAS[move][1]
        if not (0 <= r < self.nrow and 0 <= c < self.ncol):
            return None
        return (r, c) if r != cell[0] or self.desc[1 + r][2 * min(c, cell[1]) + 2] == ":" else None

    def _remaining(self, state: int) -> int:
        """Fewest actions left to finish from ``state`` (moves + pickup + dropoff)."""
        r, c, p, d = self.decode(state)
        if p == 4:
            return self._roads[d][(r, c)] + 1
        return 0 if p == d else self._roads[p][(r, c)] + 1 + self._roads[d][self.locs[p]] + 1

    def _optimal_steps(self) -> int | None:
        return self._remaining(self._start_state)

    def progress(self) -> float | None:
        total = self._remaining(self._start_state) if self._started else 0
        if not total:
            return None
        return 1.0 if self._success else max(0.0, min(1.0, 1.0 - self._remaining(self.state) / total))

    def _is_success(self) -> bool:
        return True  # only a dropoff at the destination terminates a Taxi episode

    def _pad(self, i: int) -> str:
        return f"pad {PADS[i]} ({PAD_COLOURS[i]}, {_at(self.locs[i])})"

    def _mission(self) -> str:
        _, _, p, d = self.decode(self._start_state)
        return f"Pick up the passenger at {self._pad(p)} and drop them off at {self._pad(d)}."

    def _event(self, prev: int, action: str, reward: float) -> str:
        pr, pc, pp, pd = self.decode(prev)
        r, c, p, d = self.decode()
        if action in _DELTAS:
            intended = self._step_from((pr, pc), action)
            if (r, c) == (intended or (pr, pc)):
                self._stats["bumps"] += intended is None
                text = (f"{action}: the taxi moved to {_at((r, c))}." if intended else
                        f"{action}: a wall or the edge blocks that way, so the taxi stayed at {_at((r, c))}.")
            else:
                self._stats["slips"] += 1
                slid = next((f"went {m} instead" for m in _DELTAS if self._step_from((pr, pc), m) == (r, c)),
                            "did not move")
                text = f"{action}: the taxi skidded in the rain and {slid}; it is at {_at((r, c))}."
            if d != pd:
                text += f" The passenger changed their mind: they now want to go to {self._pad(d)}."
            return text
        if action == "pickup":
            if pp != 4 and p == 4:
                return "pickup: the passenger got into the taxi."
            self._stats["illegal"] += 1
            why = "the passenger is already in the taxi" if pp == 4 else "the passenger is not here"
            return f"pickup: not possible, {why} (reward {reward:g})."
        if self._success:
            return f"dropoff: the passenger got out at their destination (reward {reward:g}). The episode is over."
        if pp == 4 and p != 4:
            self._stats["wrong_dropoffs"] += 1
            return f"dropoff: the passenger got out at {self._pad(p)}, which is not their destination."
        self._stats["illegal"] += 1
        why = "there is no passenger in the taxi" if pp != 4 else "the taxi is not on a pad"
        return f"dropoff: not possible, {why} (reward {reward:g})."

    def _describe(self) -> list[str]:
        r, c, p, d = self.decode()
        def sym(cell: Cell) -> str:
            return "T" if cell == (r, c) else PADS[self.locs.index(cell)] if cell in self.locs else "."

        # gymnasium's map row: cells at odd offsets, ':' (open) or '|' (wall) between them
        def wall(i: int, cc: int) -> str:  # what separates cell (i, cc) from the cell on its right
            return "" if cc == self.ncol - 1 else " " if self.desc[1 + i][2 * cc + 2] == ":" else "|"

        rows = [f"{i} " + "".join(sym((i, cc)) + wall(i, cc) for cc in range(self.ncol)) for i in range(self.nrow)]
        lines = ["Map (row numbers on the left, column numbers on top; | is a wall between two cells):",
                 "  " + " ".join(str(cc) for cc in range(self.ncol)), *rows,
                 "Legend: T taxi, R/G/Y/B the four pads (red, green, yellow, blue), . road, | wall."]
        where = f"The taxi is at {_at((r, c))}"
        where += f", on {self._pad(self.locs.index((r, c)))}" if (r, c) in self.locs else ""
        if self._success:
            lines.append(where + ". The passenger has arrived at their destination.")
            return lines
        if p == 4:
            lines.append(where + f", with the passenger inside. The passenger wants to go to {self._pad(d)}.")
        else:
            lines.append(where + f", empty. The passenger waits at {self._pad(p)} and wants to go to {self._pad(d)}.")
        free = [m for m in ("up", "down", "left", "right") if self._step_from((r, c), m) is not None]
        shut = [m for m in ("up", "down", "left", "right") if m not in free]
        lines.append("The taxi can move " + ", ".join(free) + (f" (blocked: {', '.join(shut)})." if shut else "."))
        return lines

    def instructions(self) -> str:
        lines = [
            f"You drive a taxi in a town of {self.nrow} rows x {self.ncol} columns. {_COORDS}",
            "There are four pads: " + ", ".join(self._pad(i) for i in range(len(self.locs))) + ".",
            "Goal: drive to the passenger's pad, pick the passenger up, drive to their destination pad and drop "
            "them off there.",
            _MOVES + " Walls '|' on the map block left/right moves between two cells; a blocked move or a move "
            "off the map does nothing.",
            "pickup: takes the passenger in when the taxi is on the passenger's pad; anywhere else it costs -10.",
            "dropoff: with the passenger inside, on the destination pad it ends the episode as a success (+20); on "
            "another pad the passenger gets out and waits there; anywhere else (or with an empty taxi) it costs -10.",
        ]
        if self.kwargs.get("is_rainy"):
            p = float(self.kwargs.get("rainy_probability", 0.8))
            lines.append(f"It is raining: a move goes in the chosen direction with probability {_fmt_prob(p)} and "
                         f"skids to each side with probability {_fmt_prob((1 - p) / 2)}.")
        if self.kwargs.get("fickle_passenger"):
            p = float(self.kwargs.get("fickle_probability", 0.3))
            lines.append(f"The passenger is fickle: with probability {_fmt_prob(p)} they pick a new destination "
                         "once, on the taxi's first move after the pickup.")
        lines += [f"Reward: -1 per step, +20 for the delivery, -10 for a pickup or dropoff that is not allowed. "
                  f"The episode ends after {self._limit} steps at the latest.", self._action_rule()]
        return "\n".join(lines)


_CLASSES: dict[str, type[ToyTextEnv]] = {"frozenlake": FrozenLakeText, "taxi": TaxiText,
                                          "cliffwalking": CliffWalkingText}


def make(params: dict[str, Any]) -> TextEnv:
    params = check(params)
    return _CLASSES[GAMES[params["id"]][0]](params)


register_env("toytext", make, check=check,
             description="gymnasium's toy-text games (FrozenLake, Taxi, CliffWalking) as text")
