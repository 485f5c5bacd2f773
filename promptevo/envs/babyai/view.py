"""The agent's 7x7 egocentric view of a BabyAI level, and its text description.

:class:`WorldCache` computes minigrid's ``gen_obs_grid`` + ``Grid.encode`` from a cached flat encoding of
the world with per-pose cell pickers and cached visibility; :func:`describe` turns a view into BALROG's
description lines (``a wall 2 steps left``, ``a red ball 1 step left and 3 steps forward``). Tests check
both against the stock implementations.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT

_VIEW = 7  # agent_view_size
_AX, _AY = _VIEW // 2, _VIEW - 1  # agent cell in the egocentric view

# --------------------------------------------------------------------------------------------------
# Fast egocentric view (equivalent to minigrid's gen_obs_grid + Grid.encode)
# --------------------------------------------------------------------------------------------------

_PAD = _VIEW  # wall padding around the world, so every view cell is in bounds
_EMPTY = (1, 0, 0)
_OUTSIDE = (2, 5, 0)  # minigrid's Grid.slice fills out-of-bounds cells with a grey Wall
_AGENT_K = _AX * _VIEW + _AY  # view cells are flattened x-major: k = i * 7 + j


_PICKERS: dict[tuple[int, int, int, int], tuple[Any, dict[int, int]]] = {}


def picker(pw: int, ax: int, ay: int, direction: int) -> tuple[Any, dict[int, int]]:
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


class WorldCache:
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
        pick, index = picker(self.pw, ax, ay, direction)
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
                vis_rows[j], seen = row if row is not None else row_visibility(*key)
        lines = _describe_objects(cells, vis_rows, index, self.objects)
        self.poses[pose] = (self.clear_version, vis_rows, self.version, cells, lines)
        return cells, vis_rows, lines


_ROW_CACHE: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}


def row_visibility(seen: int, clear: tuple[int, ...]) -> tuple[int, int]:
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


def view_image(cells: tuple, vis_rows: list[int], carrying: Any) -> np.ndarray:
    """``gen_obs()["image"]``: the view cells, zero where not visible, the carried object at the agent."""
    image = np.array(cells, dtype=np.uint8).reshape(_VIEW, _VIEW, 3)
    image *= ((np.array(vis_rows)[None, :] >> _I) & 1).astype(np.uint8)[:, :, None]
    image[_AX, _AY] = _EMPTY if carrying is None else carrying.encode()
    return image


def tracked_positions(grid: Any, objs: list[Any]) -> list[tuple[int, int]]:
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


