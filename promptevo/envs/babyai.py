"""BabyAI as a text game, reproducing BALROG's ``BabyAI-MixedTrainLocal-v0`` protocol.

BALROG (MIT, https://github.com/balrog-ai/BALROG) evaluates LLM agents on five BabyAI goals drawn from
the ``MixedTrainLocal`` level of its MiniGrid fork, with the text observations of babyai-text. This
module re-implements that protocol on stock PyPI ``minigrid`` (independent code, written from a
description of the algorithm, not copied):

* :class:`MixedLocalLevel` generates the level for a fixed goal with the same random-number calls in
  the same order, so ``(goal, seed)`` gives BALROG's mission, layout and observations.
* :func:`describe` turns the agent's 7x7 egocentric view into BALROG's description lines
  (``a wall 2 steps left``, ``a red ball 1 step left and 3 steps forward``, ``You carry a red ball``).
* :class:`BabyAITextEnv` is the :class:`~promptevo.envs.base.TextEnv`: exact-match actions, invalid
  actions replaced by ``go forward`` with feedback, and BALROG's binary ``progression``.

The level overrides ``gen_obs`` (the hot path) with an equivalent of minigrid's ``gen_obs_grid`` +
``Grid.encode`` computed from a cached flat encoding of the world with per-pose cell pickers and
cached visibility/description, and ``check_objs_reachable`` / ``update_objs_poss`` with faster
equivalents; tests check all of them against the stock implementations.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT
from minigrid.core.roomgrid import RoomGrid
from minigrid.envs.babyai.core.levelgen import LevelGen
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    AndInstr,
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

from promptevo.envs.base import StepResult, TextEnv

__all__ = [
    "ACTIONS",
    "BABYAI_GOALS",
    "DEFAULT_ACTION",
    "FEEDBACK_STYLES",
    "REJECTED_PHRASES",
    "BabyAITextEnv",
    "MixedLocalLevel",
    "bot_action",
    "describe",
    "instructions_text",
    "invalid_action_feedback",
    "make_babyai_env",
]

#: The five BALROG BabyAI goals (task names after ``BabyAI-MixedTrainLocal-v0/``).
BABYAI_GOALS: tuple[str, ...] = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")

#: Text actions, index = minigrid action id (``done`` is not exposed).
ACTIONS: tuple[str, ...] = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
_ACTION_INDEX = {a: i for i, a in enumerate(ACTIONS)}
DEFAULT_ACTION = "go forward"

#: Missions containing any of these phrases are regenerated (BALROG's held-out phrases).
REJECTED_PHRASES: tuple[str, ...] = ("yellow box", "red key", "red door", "green ball", "grey door")

#: Possible colours of the locked door in the ``open`` goal.
LOCKED_DOOR_COLORS: tuple[str, ...] = ("yellow", "green", "blue", "purple")

_VIEW = 7  # agent_view_size
_AX, _AY = _VIEW // 2, _VIEW - 1  # agent cell in the egocentric view


# --------------------------------------------------------------------------------------------------
# Level generation
# --------------------------------------------------------------------------------------------------


class MixedLocalLevel(LevelGen):
    """One BabyAI room (two for ``open``) holding only what the mission names, plus ``num_dists``.

    ``goal`` is one of :data:`BABYAI_GOALS`. Layout and mission are a deterministic function of
    ``(goal, num_dists, seed)`` and match BALROG's ``BabyAI-MixedTrainLocal-v0/<goal>``.
    """

    def __init__(self, goal: str = "goto", num_dists: int = 0, **kwargs: Any):
        _check_goal(goal)
        if not isinstance(num_dists, int) or num_dists < 0:
            raise ValueError(f"num_dists must be a non-negative int, got {num_dists!r}")
        self.goal = goal
        num_cols = 2 if goal == "open" else 1
        super().__init__(
            room_size=8,
            num_rows=1,
            num_cols=num_cols,
            num_dists=num_dists,
            action_kinds=[goal.replace("_", " ")],
            instr_kinds=["action", "seq1"],
            locations=False,
            unblocking=False,
            implicit_unlock=False,
            **kwargs,
        )

    # -- top-level loop: same as RoomGridLevel._gen_grid, without printing rejections ---------------
    def _gen_grid(self, width: int, height: int) -> None:
        while True:
            try:
                if self.num_cols * self.num_rows > 1:
                    # gen_mission() rebuilds the room grid anyway; the first build only matters for
                    # its random door positions, and a single room has none.
                    RoomGrid._gen_grid(self, width, height)
                self.gen_mission()
                self.validate_instrs(self.instrs)
            except (RecursionError, RejectSampling):
                continue
            break
        self.surface = self.instrs.surface(self)
        self.mission = self.surface

    def update_objs_poss(self, instr: Any = None) -> None:
        """Same as ``RoomGridLevel.update_objs_poss`` (run after ``drop``) without rescanning the grid."""
        if instr is None:
            instr = self.instrs
        if isinstance(instr, (BeforeInstr, AndInstr, AfterInstr)):
            self.update_objs_poss(instr.instr_a)
            self.update_objs_poss(instr.instr_b)
            return
        for attr in ("desc", "desc_move", "desc_fixed"):
            desc = getattr(instr, attr, None)
            if desc is not None:
                desc.obj_poss = _tracked_positions(self.grid, desc.obj_set)

    def check_objs_reachable(self, raise_exc: bool = True) -> bool:
        """Same result as ``RoomGridLevel.check_objs_reachable`` (flood fill from the agent), faster."""
        grid = self.grid
        w, h = grid.width, grid.height
        cells = grid.grid
        start = int(self.agent_pos[1]) * w + int(self.agent_pos[0])
        reachable = bytearray(w * h)
        stack = [start]
        while stack:
            k = stack.pop()
            if reachable[k]:
                continue
            reachable[k] = 1
            cell = cells[k]
            if cell is not None and cell.type != "door":
                continue
            x = k % w
            if x + 1 < w:
                stack.append(k + 1)
            if x > 0:
                stack.append(k - 1)
            if k + w < w * h:
                stack.append(k + w)
            if k >= w:
                stack.append(k - w)
        for k, cell in enumerate(cells):
            if cell is None or cell.type == "wall" or reachable[k]:
                continue
            if not raise_exc:
                return False
            raise RejectSampling(f"unreachable object at {(k % w, k // w)}")
        return True

    # -- fast observations ---------------------------------------------------------------------
    # The view is computed from a cache of the world's encoding that only ``step`` keeps up to date
    # (it refreshes the cell in front of the agent after pickup/drop/toggle). Code that edits
    # ``self.grid`` directly must call :meth:`invalidate_obs_cache` before the next observation.
    def invalidate_obs_cache(self) -> None:
        self._world_grid = None

    def step(self, action: int):  # type: ignore[override]
        # pickup / drop / toggle can only change the cell in front of the agent
        if action in (3, 4, 5):
            self._dirty = tuple(int(v) for v in self.front_pos)
        return super().step(action)

    #: compute ``obs["image"]`` in ``gen_obs``; the text env turns it off (it needs only the text)
    compute_image: bool = True

    def gen_obs(self) -> dict[str, Any]:
        """Same result as ``MiniGridEnv.gen_obs`` (tested), computed from a cached world encoding.

        Also stores the visible view for :meth:`describe` (``image`` is None when ``compute_image``
        is off).
        """
        if getattr(self, "_world_grid", None) is not self.grid:
            self._world = _WorldCache(self.grid)
            self._world_grid = self.grid
            self._dirty = None
        elif self._dirty is not None:
            self._world.update(self.grid, *self._dirty)
            self._dirty = None
        self._cells, self._vis_rows, self._lines = self._world.view(
            int(self.agent_pos[0]), int(self.agent_pos[1]), int(self.agent_dir)
        )
        image = _view_image(self._cells, self._vis_rows, self.carrying) if self.compute_image else None
        return {"image": image, "direction": self.agent_dir, "mission": self.mission}

    def describe(self) -> list[str]:
        """Description lines of the current view (same as ``describe(gen_obs()["image"], carrying)``)."""
        if self.carrying is None:
            return list(self._lines)
        return [f"You carry a {self.carrying.color} {self.carrying.type}", *self._lines]

    def _regen_grid(self) -> None:
        # Fresh walls, rooms and door positions; same RNG draws as the initial room-grid build.
        RoomGrid._gen_grid(self, self.width, self.height)

    def gen_mission(self) -> None:
        self.locked_room = None
        kind = self._rand_elem(self.action_kinds)  # one-element list: consumes no randomness
        while True:
            self._regen_grid()
            self.locked_room = None
            if kind == "open":
                self._gen_open()
            elif kind in ("goto", "pickup"):
                self._gen_single(kind)
            elif kind == "putnext":
                self._gen_putnext()
            else:  # "pick up seq go to"
                self._gen_pickup_then_goto()
            reachable = self.check_objs_reachable(raise_exc=False)
            surface = self.instrs.surface(self)
            accepted = not any(p in surface for p in REJECTED_PHRASES)
            if accepted and reachable:
                return

    def _add_locked_room_colored(self, color: str) -> None:
        """``add_locked_room`` with a fixed door colour (stock minigrid draws the colour)."""
        while True:
            i = self._rand_int(0, self.num_cols)
            j = self._rand_int(0, self.num_rows)
            door_idx = self._rand_int(0, 4)
            self.locked_room = self.get_room(i, j)
            if self.locked_room.neighbors[door_idx] is None:
                continue
            door, _ = self.add_door(i, j, door_idx, color=color, locked=True)
            break
        while True:
            i = self._rand_int(0, self.num_cols)
            j = self._rand_int(0, self.num_rows)
            if self.get_room(i, j) is self.locked_room:
                continue
            self.add_object(i, j, "key", door.color)
            break

    def _gen_open(self) -> None:
        color_door = self._rand_elem(LOCKED_DOOR_COLORS)
        self._add_locked_room_colored(color_door)
        self.connect_all()
        for i in range(self.num_cols):
            for j in range(self.num_rows):
                if self.get_room(i, j) is not self.locked_room:
                    self.add_distractors(i, j, num_distractors=self.num_dists, all_unique=False)
        while True:
            self.place_agent()
            if self.room_from_pos(*self.agent_pos) is not self.locked_room:
                break
        color_in_instr = self._rand_elem([None, color_door])
        self.instrs = OpenInstr(ObjDesc("door", color_in_instr))

    def _gen_single(self, kind: str) -> None:
        self.place_agent()
        objs = self.add_distractors(num_distractors=self.num_dists + 1, all_unique=False)
        obj = self._rand_elem(objs)
        if kind == "goto":
            self.instrs = GoToInstr(ObjDesc(obj.type, obj.color))
        else:
            while obj.type == "door":
                obj = self._rand_elem(objs)
            self.instrs = PickupInstr(ObjDesc(obj.type, obj.color))

    def _draw_pair(self) -> tuple[Any, Any]:
        self.place_agent()
        objs = self.add_distractors(num_distractors=self.num_dists + 2, all_unique=False)
        obj_1 = self._rand_elem(objs)
        while obj_1.type == "door":
            obj_1 = self._rand_elem(objs)
        obj_2 = self._rand_elem(objs)
        if obj_1.type == obj_2.type and obj_1.color == obj_2.color:
            same, _ = ObjDesc(obj_1.type, obj_1.color).find_matching_objs(self)
            if len(same) < 2:
                while obj_1.type == obj_2.type and obj_1.color == obj_2.color:
                    obj_2 = self._rand_elem(objs)
        return obj_1, obj_2

    def _gen_putnext(self) -> None:
        obj_1, obj_2 = self._draw_pair()
        self.instrs = PutNextInstr(ObjDesc(obj_1.type, obj_1.color), ObjDesc(obj_2.type, obj_2.color))

    def _gen_pickup_then_goto(self) -> None:
        obj_a, obj_b = self._draw_pair()
        pick = PickupInstr(ObjDesc(obj_a.type, obj_a.color))
        goto = GoToInstr(ObjDesc(obj_b.type, obj_b.color))
        if self._rand_elem(["Before", "After"]) == "Before":
            self.instrs = BeforeInstr(pick, goto)
        else:
            self.instrs = AfterInstr(goto, pick)


# --------------------------------------------------------------------------------------------------
# Fast egocentric view (equivalent to minigrid's gen_obs_grid + Grid.encode)
# --------------------------------------------------------------------------------------------------

_PAD = _VIEW  # wall padding around the world, so every view cell is in bounds
_EMPTY = (1, 0, 0)
_OUTSIDE = (2, 5, 0)  # minigrid's Grid.slice fills out-of-bounds cells with a grey Wall
_AGENT_K = _AX * _VIEW + _AY  # view cells are flattened x-major: k = i * 7 + j


_PICKERS: dict[tuple[int, int, int, int], tuple[Any, dict[int, int]]] = {}


def _picker(pw: int, ax: int, ay: int, direction: int) -> tuple[Any, dict[int, int]]:
    """For an agent pose in a padded flat world of width ``pw``: an itemgetter picking the 49 view
    cells (x-major, k = i * 7 + j) and the map from flat world index to k."""
    key = (pw, ax, ay, direction)
    hit = _PICKERS.get(key)
    if hit is None:
        fx, fy = ((1, 0), (0, 1), (-1, 0), (0, -1))[direction]
        rx, ry = -fy, fx
        idx = []
        for i in range(_VIEW):
            for j in range(_VIEW):
                fwd, side = _AY - j, i - _AX
                x, y = ax + fx * fwd + rx * side, ay + fy * fwd + ry * side
                idx.append((y + _PAD) * pw + x + _PAD)
        hit = _PICKERS[key] = (operator.itemgetter(*idx), {f: k for k, f in enumerate(idx)})
    return hit


class _WorldCache:
    """Flat, wall-padded encodings of one episode's world grid, and per-pose cached views.

    Only the cell in front of the agent can change (pickup, drop, toggle); :meth:`update` refreshes
    it, bumping ``version`` (cells changed) and ``clear_version`` (see-through changed), which
    invalidate the cached descriptions and visibility masks.
    """

    def __init__(self, grid: Any):
        self.pw = grid.width + 2 * _PAD
        ph = grid.height + 2 * _PAD
        self.cells: list[tuple[int, int, int]] = [_OUTSIDE] * (self.pw * ph)
        self.clear: list[int] = [0] * (self.pw * ph)
        self.objects: dict[int, tuple[int, int, int]] = {}  # flat index -> cell, for non-wall objects
        for k, obj in enumerate(grid.grid):
            self._set(k % grid.width, k // grid.width, obj)
        self.version = 0
        self.clear_version = 0
        # pose -> (clear_version, vis_rows, version, cells, lines)
        self.poses: dict[tuple[int, int, int], tuple[int, list[int], int, tuple, list[str]]] = {}

    def _set(self, x: int, y: int, obj: Any) -> tuple[bool, bool]:
        k = (y + _PAD) * self.pw + x + _PAD
        if obj is None:
            cell, clear = _EMPTY, 1
        else:
            cell, clear = obj.encode(), int(obj.see_behind())
        changed = (cell != self.cells[k], clear != self.clear[k])
        self.cells[k], self.clear[k] = cell, clear
        if cell[0] > 2:
            self.objects[k] = cell
        else:
            self.objects.pop(k, None)
        return changed

    def update(self, grid: Any, x: int, y: int) -> None:
        cells_changed, clear_changed = self._set(x, y, grid.get(x, y))
        self.version += cells_changed
        self.clear_version += clear_changed

    def view(self, ax: int, ay: int, direction: int) -> tuple[tuple, list[int], list[str]]:
        """(49 view cells x-major, visible-cell bit mask per view row j, description lines without
        the carried object) for an agent pose."""
        pose = (ax, ay, direction)
        hit = self.poses.get(pose)
        if hit is not None and hit[2] == self.version:
            return hit[3], hit[1], hit[4]
        pick, index = _picker(self.pw, ax, ay, direction)
        cells = pick(self.cells)
        if hit is not None and hit[0] == self.clear_version:
            vis_rows = hit[1]
        else:
            clear = pick(self.clear)
            rows = _ROW_CACHE
            vis_rows = [0] * _VIEW
            seen = 1 << _AX
            for j in range(_VIEW - 1, -1, -1):
                key = (seen, clear[j::_VIEW])
                row = rows.get(key)
                vis_rows[j], seen = row if row is not None else _row_visibility(*key)
        lines = _describe_objects(cells, vis_rows, index, self.objects)
        self.poses[pose] = (self.clear_version, vis_rows, self.version, cells, lines)
        return cells, vis_rows, lines


_ROW_CACHE: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}


def _row_visibility(seen: int, clear: tuple[int, ...]) -> tuple[int, int]:
    """One row of minigrid's ``Grid.process_vis``.

    ``seen``: bit mask of the row's cells already visible; ``clear``: per cell, 1 if see-through.
    Returns (bit mask of the row's visible cells, bit mask made visible in the row further away).
    """
    mask = [bool(seen >> i & 1) for i in range(_VIEW)]
    up = [False] * _VIEW
    for i in range(_VIEW - 1):
        if mask[i] and clear[i]:
            mask[i + 1] = up[i + 1] = up[i] = True
    for i in range(_VIEW - 1, 0, -1):
        if mask[i] and clear[i]:
            mask[i - 1] = up[i - 1] = up[i] = True
    res = (sum(1 << i for i in range(_VIEW) if mask[i]), sum(1 << i for i in range(_VIEW) if up[i]))
    _ROW_CACHE[(seen, clear)] = res
    return res


_I = np.arange(_VIEW)[:, None]


def _view_image(cells: tuple, vis_rows: list[int], carrying: Any) -> np.ndarray:
    """``gen_obs()["image"]``: the view cells, zero where not visible, the carried object at the agent."""
    image = np.array(cells, dtype=np.uint8).reshape(_VIEW, _VIEW, 3)
    image *= ((np.array(vis_rows)[None, :] >> _I) & 1).astype(np.uint8)[:, :, None]
    image[_AX, _AY] = _EMPTY if carrying is None else carrying.encode()
    return image


def _tracked_positions(grid: Any, objs: list[Any]) -> list[tuple[int, int]]:
    """``ObjDesc.find_matching_objs(use_location=False)``'s positions: tracked objects still on the
    grid, in the scan order x-major then y."""
    out = []
    w, h = grid.width, grid.height
    cells = grid.grid
    for obj in objs:
        pos = obj.cur_pos
        if pos is None:
            continue
        x, y = int(pos[0]), int(pos[1])
        if 0 <= x < w and 0 <= y < h and cells[y * w + x] is obj:
            out.append((x, y))
    out.sort()
    return out


def _check_goal(goal: str) -> None:
    if goal not in BABYAI_GOALS:
        raise ValueError(f"unknown BabyAI goal {goal!r}; valid goals: {', '.join(BABYAI_GOALS)}")


# --------------------------------------------------------------------------------------------------
# Observation description
# --------------------------------------------------------------------------------------------------

_STATE_NAMES = {0: "open", 1: "closed", 2: "locked"}


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _where(x: int, y: int) -> str:
    dx, dy = x - _AX, _AY - y
    if dx == 0:
        return f"{_steps(dy)} forward"
    side = f"{_steps(abs(dx))} {'left' if dx < 0 else 'right'}"
    return f"{side} and {_steps(dy)} forward" if dy > 0 else side


_WHERE = [[_where(x, y) for y in range(_VIEW)] for x in range(_VIEW)]
_WALL_LINES = (
    ("forward", [(_AX, y) for y in range(_AY - 1, -1, -1)]),
    ("left", [(x, _AY) for x in range(_AX - 1, -1, -1)]),
    ("right", [(x, _AY) for x in range(_AX + 1, _VIEW)]),
)
_WALL_TEXT = {
    (x, y): f"a wall {_steps(k)} {word}"
    for word, cells in _WALL_LINES
    for k, (x, y) in enumerate(cells, start=1)
}


def _object_name(t: int, c: int, s: int) -> str:
    if t == 4:
        return f"a {_STATE_NAMES[s]} {IDX_TO_COLOR[c]} door"
    return f"a {IDX_TO_COLOR[c]} {IDX_TO_OBJECT[t]}"


_NAME_CACHE: dict[tuple[int, int, int], str] = {}


def describe(image: np.ndarray, carrying: Any = None) -> list[str]:
    """BALROG's description lines for an encoded 7x7 egocentric view (``image[x][y] = (type, color, state)``).

    Order: ``You carry a <color> <type>`` when carrying; walls met first on the straight lines
    forward, left and right (``a wall 2 steps left``); then every other visible object, x from left to
    right and, within a column, far to near (``a red ball 1 step left and 3 steps forward``; doors read
    ``a open|closed|locked <color> door``). BALROG's ``You see`` prefix is already removed.
    """
    cols = image.tolist() if isinstance(image, np.ndarray) else [[list(c) for c in col] for col in image]
    out: list[str] = []
    if carrying is not None:
        out.append(f"You carry a {carrying.color} {carrying.type}")
    for _word, cells in _WALL_LINES:
        for x, y in cells:
            t = cols[x][y][0]
            if t <= 1:
                continue
            if t == 2:
                out.append(_WALL_TEXT[(x, y)])
            break
    names = _NAME_CACHE
    for x in range(_VIEW):
        col = cols[x]
        where = _WHERE[x]
        for y in range(_VIEW):
            t, c, s = col[y]
            if t <= 2 or (x == _AX and y == _AY):
                continue
            key = (t, c, s)
            name = names.get(key)
            if name is None:
                name = names[key] = _object_name(t, c, s)
            out.append(f"{name} {where[y]}")
    return out


_WALL_SCAN = tuple(
    tuple((x * _VIEW + y, y, 1 << x, _WALL_TEXT[(x, y)]) for x, y in cells) for _w, cells in _WALL_LINES
)


def _describe_objects(
    cells: tuple, vis_rows: list[int], index: dict[int, int], objects: dict[int, tuple[int, int, int]]
) -> list[str]:
    """:func:`describe` (without the carry line) on a cached view: x-major view ``cells``, visibility
    bits per view row, the pose's flat-index -> view-cell map and the world's object cells (only
    those few are looked at, not all 49 view cells)."""
    out: list[str] = []
    for line in _WALL_SCAN:
        for k, y, bit, text in line:
            if not vis_rows[y] & bit:
                continue
            t = cells[k][0]
            if t <= 1:
                continue
            if t == 2:
                out.append(text)
            break
    seen = []
    for flat, cell in objects.items():
        k = index.get(flat)
        if k is None or k == _AGENT_K:
            continue
        x, y = divmod(k, _VIEW)
        if vis_rows[y] >> x & 1:
            seen.append((k, cell))
    if seen:
        seen.sort()
        names = _NAME_CACHE
        for k, cell in seen:
            name = names.get(cell)
            if name is None:
                name = names[cell] = _object_name(*cell)
            x, y = divmod(k, _VIEW)
            out.append(f"{name} {_WHERE[x][y]}")
    return out


# --------------------------------------------------------------------------------------------------
# Text environment
# --------------------------------------------------------------------------------------------------

#: Feedback prefixes BALROG puts before the observation after an invalid action ("current" since
#: BALROG commit c347aa8, 2025-01; "legacy" before, used by the 2024 leaderboard runs).
FEEDBACK_STYLES: tuple[str, ...] = ("current", "legacy")


def invalid_action_feedback(action: str, default_action: str = DEFAULT_ACTION, style: str = "current") -> str:
    """The text put before the next observation when ``action`` was invalid (BALROG's convention)."""
    if style == "current":
        return (
            "\n\nYour previous output did not contain a valid action. "
            f"Defaulted to action: {default_action}\n\nObservation:\n"
        )
    if style == "legacy":
        return (
            f"\n\nYour previous output action: '{action}' is not a valid action. "
            f"Defaulted to action: {default_action}\n"
        )
    raise ValueError(f"unknown feedback style {style!r}; valid styles: {', '.join(FEEDBACK_STYLES)}")


_ACTION_HELP: dict[str, str] = {
    "turn left": "rotate 90 degrees to your left, staying in the same cell",
    "turn right": "rotate 90 degrees to your right, staying in the same cell",
    "go forward": "move one cell in the direction you face (blocked by walls, closed doors and objects)",
    "pick up": "pick up the object in the cell directly in front of you (you can hold one object)",
    "drop": "put the object you hold into the empty cell directly in front of you",
    "toggle": "interact with the cell in front of you: open or close a door (a locked door needs the key "
    "of the same colour in your hands); toggling a box destroys it",
}


def instructions_text(mission: str | None = None) -> str:
    """Game description for the LLM (promptevo's own wording of BALROG's BabyAI protocol)."""
    goal = f"Your goal is to {mission}." if mission else "Your goal is given by the mission text."
    actions = "\n".join(f"- {a}: {_ACTION_HELP[a]}" for a in ACTIONS)
    return (
        "You are an agent in BabyAI, a small grid world seen from above, made of rooms with walls, "
        "doors, keys, balls and boxes.\n"
        f"{goal}\n\n"
        "Each turn, answer with exactly one of these actions:\n"
        f"{actions}\n\n"
        "Each observation lists what you can see from where you stand, one item per line, relative to "
        "you and the direction you face: 'a red ball 1 step left and 3 steps forward' means three cells "
        "ahead and one to the left; 'a wall 2 steps right' means the wall is two cells to your right. "
        "'You carry ...' names the object in your hands. You see up to 6 cells ahead and 3 to each side, "
        "not through walls or closed doors; walls are only reported straight ahead, left and right, "
        "and an observation can be empty. Door lines read 'a open/closed/locked <colour> door'.\n"
        "'Go to' an object means standing in the cell next to it while facing it. Anything that is not "
        "exactly one of the actions above counts as 'go forward'."
    )


class BabyAITextEnv(TextEnv):
    """BALROG's ``BabyAI-MixedTrainLocal-v0/<goal>`` as a :class:`TextEnv`.

    Observation text: the description lines joined by newlines. An action is valid when, after
    stripping surrounding whitespace, it equals one of :data:`ACTIONS` (case-sensitive); otherwise
    ``go forward`` runs and, with ``feedback_on_invalid``, the next observation starts with
    :func:`invalid_action_feedback`. ``progression`` becomes 1.0 at the first positive reward, which
    also ends the episode; otherwise it ends at ``max_steps`` (64 or 128).
    """

    family = "babyai"

    def __init__(
        self,
        goal: str,
        num_dists: int = 0,
        feedback_on_invalid: bool = True,
        feedback_style: str = "current",
    ):
        _check_goal(goal)
        if feedback_style not in FEEDBACK_STYLES:
            raise ValueError(
                f"unknown feedback style {feedback_style!r}; valid styles: {', '.join(FEEDBACK_STYLES)}"
            )
        self.goal = goal
        self.num_dists = num_dists
        self.feedback_on_invalid = feedback_on_invalid
        self.feedback_style = feedback_style
        self.level = MixedLocalLevel(goal, num_dists=num_dists)
        self.level.compute_image = False
        self._started = False
        self._done = False
        self._progression = 0.0
        self._seed: int | None = None
        self._steps = 0
        self._invalid = 0
        self._executed_counts: dict[str, int] = {}
        self._lines: list[str] = []
        self._bot: Any = None

    # -- TextEnv properties ------------------------------------------------------------------------
    @property
    def valid_actions(self) -> list[str]:
        return list(ACTIONS)

    @property
    def default_action(self) -> str:
        return DEFAULT_ACTION

    @property
    def max_steps(self) -> int:
        return int(self.level.max_steps)

    @property
    def mission(self) -> str:
        return self.level.mission if self._started else ""

    @property
    def progression(self) -> float:
        return self._progression

    @property
    def descriptions(self) -> list[str]:
        """Description lines of the current observation (without any feedback prefix)."""
        return list(self._lines)

    # -- episode -----------------------------------------------------------------------------------
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.level.reset(seed=int(seed))
        self._seed = int(seed)
        self._started = True
        self._done = False
        self._progression = 0.0
        self._steps = 0
        self._invalid = 0
        self._executed_counts = {}
        self._bot = None
        self._lines = self.level.describe()
        info = self._info(valid=True, executed=None, reward=0.0)
        return "\n".join(self._lines), info

    def parse_action(self, action: Any) -> str | None:
        """The canonical action for ``action``, or None when it is invalid."""
        if not isinstance(action, str):
            return None
        a = action.strip()
        return a if a in _ACTION_INDEX else None

    def step(self, action: str) -> StepResult:
        if not self._started:
            raise RuntimeError("call reset(seed) before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset(seed) to start a new one")
        parsed = self.parse_action(action)
        valid = parsed is not None
        executed = parsed if valid else DEFAULT_ACTION
        _, reward, terminated, truncated, _ = self.level.step(_ACTION_INDEX[executed])
        reward = float(reward)
        self._steps += 1
        self._executed_counts[executed] = self._executed_counts.get(executed, 0) + 1
        if not valid:
            self._invalid += 1
        if reward > 0:
            self._progression = 1.0
        self._done = bool(terminated or truncated)
        self._lines = self.level.describe()
        text = "\n".join(self._lines)
        if not valid and self.feedback_on_invalid:
            shown = action if isinstance(action, str) else repr(action)
            text = invalid_action_feedback(shown, DEFAULT_ACTION, self.feedback_style) + text
        info = self._info(valid=valid, executed=executed, reward=reward)
        return StepResult(text, reward, bool(terminated), bool(truncated), info)

    def _info(self, *, valid: bool, executed: str | None, reward: float) -> dict[str, Any]:
        return {
            "mission": self.level.mission,
            "valid_action": valid,
            "executed_action": executed,
            "progression": self._progression,
            "success": self._progression >= 1.0,
            "step": self._steps,
            "max_steps": self.max_steps,
            "reward": reward,
            "seed": self._seed,
            "goal": self.goal,
        }

    def instructions(self) -> str:
        return instructions_text(self.level.mission if self._started else None)

    def episode_stats(self) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "seed": self._seed,
            "steps": self._steps,
            "invalid_actions": self._invalid,
            "action_frequency": dict(self._executed_counts),
            "success": self._progression >= 1.0,
        }


def make_babyai_env(goal: str, **kw: Any) -> BabyAITextEnv:
    """Build the text env for one of :data:`BABYAI_GOALS` (``num_dists``, ``feedback_on_invalid``...)."""
    return BabyAITextEnv(goal, **kw)


# --------------------------------------------------------------------------------------------------
# Oracle: minigrid's BabyAI bot
# --------------------------------------------------------------------------------------------------


def bot_action(env: BabyAITextEnv) -> str:
    """The text action minigrid's ``BabyAIBot`` suggests for the current state of ``env``.

    The bot keeps a plan across steps, so call this once per step and execute its answer (the bot is
    created at the first call of each episode and assumes its previous suggestion was taken). When
    the bot thinks the mission is done it answers ``done``, which has no text form; the default
    action is returned then.
    """
    from minigrid.utils.baby_ai_bot import BabyAIBot

    if not env._started:
        raise RuntimeError("call reset(seed) before bot_action()")
    if env._bot is None:
        env._bot = BabyAIBot(env.level)
    idx = int(env._bot.replan())
    return ACTIONS[idx] if idx < len(ACTIONS) else DEFAULT_ACTION
