"""BabyAI levels for BALROG's protocol (part of the text game, reproducing BALROG's ``BabyAI-MixedTrainLocal-v0``).

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

from typing import Any

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

from promptevo.envs.babyai.spec import BABYAI_GOALS
from promptevo.envs.babyai.view import WorldCache, tracked_positions, view_image

#: Missions containing any of these phrases are regenerated (BALROG's held-out phrases).
REJECTED_PHRASES: tuple[str, ...] = ("yellow box", "red key", "red door", "green ball", "grey door")

#: Possible colours of the locked door in the ``open`` goal.
LOCKED_DOOR_COLORS: tuple[str, ...] = ("yellow", "green", "blue", "purple")


# --------------------------------------------------------------------------------------------------
# Level generation
# --------------------------------------------------------------------------------------------------


class MixedLocalLevel(LevelGen):
    """One BabyAI room (two for ``open``) holding only what the mission names, plus ``num_dists``.

    ``goal`` is one of :data:`BABYAI_GOALS`. Layout and mission are a deterministic function of
    ``(goal, num_dists, seed)`` and match BALROG's ``BabyAI-MixedTrainLocal-v0/<goal>``.
    """

    def __init__(self, goal: str = "goto", num_dists: int = 0, **kwargs: Any):
        check_goal(goal)
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
                desc.obj_poss = tracked_positions(self.grid, desc.obj_set)

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
            self._world = WorldCache(self.grid)
            self._world_grid = self.grid
            self._dirty = None
        elif self._dirty is not None:
            self._world.update(self.grid, *self._dirty)
            self._dirty = None
        self._cells, self._vis_rows, self._lines = self._world.view(
            int(self.agent_pos[0]), int(self.agent_pos[1]), int(self.agent_dir)
        )
        image = view_image(self._cells, self._vis_rows, self.carrying) if self.compute_image else None
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




def check_goal(goal: str) -> None:
    if goal not in BABYAI_GOALS:
        raise ValueError(f"unknown BabyAI goal {goal!r}; valid goals: {', '.join(BABYAI_GOALS)}")


