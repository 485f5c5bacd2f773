"""Dense progress for BabyAI from minigrid's ``BabyAIBot``: how many steps the bot still needs.

:func:`plan_length` plays the bot on a deep copy of a level (the level itself, its RNG and its caches
are left alone) and counts the steps until the mission is done. The bot is given the whole map (no
exploration detours) and only the part of the mission still to do, so the count is close to the
shortest way to finish from that state, and the same for the same state every time (the bot and the
level are deterministic). :func:`start_plan_length` is the count at the start of an episode, computed
from a freshly generated level and cached per ``(goal, num_dists, seed)``: an evaluation plays the
same seeds for many prompts.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from typing import Any

from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    AndInstr,
    BeforeInstr,
    PickupInstr,
    PutNextInstr,
)
from minigrid.utils.baby_ai_bot import BabyAIBot

from promptevo.envs.babyai.level import MixedLocalLevel

__all__ = ["clear_start_cache", "plan_length", "remaining_instr", "start_plan_length"]

log = logging.getLogger(__name__)

#: the bot may take this many times the level's step limit before it counts as failing
CAP_FACTOR = 3

_DONE = 6  # minigrid's ``done`` action: the bot's answer once it thinks the mission is complete

_START_CACHE: OrderedDict[tuple[str, int, int], int | None] = OrderedDict()
_START_CACHE_SIZE = 4096
_START_LOCK = threading.Lock()


def _copy_level(level: Any) -> Any:
    """A deep copy of ``level`` that shares the immutable spaces and drops the observation cache
    (the copy rebuilds it on its first step); about half the time of a plain ``deepcopy``."""
    memo: dict[int, Any] = {}
    for name in ("action_space", "observation_space"):
        obj = getattr(level, name, None)
        if obj is not None:
            memo[id(obj)] = obj
    world = getattr(level, "_world", None)
    if world is not None:
        memo[id(world)] = None
    sim = copy.deepcopy(level, memo)
    if hasattr(sim, "invalidate_obs_cache"):
        sim.invalidate_obs_cache()
    return sim


def remaining_instr(instr: Any) -> Any:
    """The part of a mission still to do: a two-part mission whose first part succeeded is its second
    part (``pick up X, then go to Y`` once X was picked up is ``go to Y``)."""
    if isinstance(instr, (BeforeInstr, AndInstr)) and instr.a_done == "success":
        return remaining_instr(instr.instr_b)
    if isinstance(instr, AndInstr) and instr.b_done == "success":
        return remaining_instr(instr.instr_a)
    if isinstance(instr, AfterInstr) and instr.b_done == "success":
        return remaining_instr(instr.instr_a)
    return instr


def _first_part(instr: Any) -> Any:
    if isinstance(instr, (BeforeInstr, AndInstr)):
        return _first_part(instr.instr_a)
    if isinstance(instr, AfterInstr):
        return _first_part(instr.instr_b)
    return instr


def _drop_in_place(sim: Any) -> tuple[int, bool] | None:
    """Drop the carried object in the first free cell around the agent (turning right up to three
    times): ``(steps, mission done)``, or None when all four cells are taken."""
    for turns in range(4):
        fx, fy = (int(v) for v in sim.front_pos)
        if sim.grid.get(fx, fy) is None:
            _, reward, _, _, _ = sim.step(sim.actions.drop)
            return turns + 1, reward > 0
        sim.step(sim.actions.right)
    return None


def plan_length(level: Any, *, cap: int | None = None) -> int | None:
    """Steps ``BabyAIBot`` needs from the current state of ``level`` to finish its mission (>= 1).

    The bot plays on a copy of the level with the whole map known (no exploration detours), only the
    part of the mission still to do, and the state as it is: holding the object a ``put next`` mission
    moves skips fetching it; holding an object the next pick-up would not allow (the bot picks up with
    empty hands) first drops it in a free cell next to the agent, counted in the steps.

    ``None`` when the bot raises, gives up (answers ``done`` without success), the mission fails, or it
    needs more than ``cap`` steps (default: :data:`CAP_FACTOR` x the level's step limit); a one-line
    warning is logged then.
    """
    limit = int(cap) if cap is not None else CAP_FACTOR * int(level.max_steps)
    mission = getattr(level, "mission", "?")
    try:
        sim = _copy_level(level)
        sim.max_steps = int(sim.step_count) + limit + 8  # no truncation inside the simulation
        remaining = remaining_instr(sim.instrs)
        held = sim.carrying
        keep = isinstance(remaining, PutNextInstr) and any(held is o for o in remaining.desc_move.obj_set)
        used = 0
        if held is not None and not keep and isinstance(_first_part(remaining), (PickupInstr, PutNextInstr)):
            dropped = _drop_in_place(sim)
            if dropped is None:
                log.warning("BabyAI bot cannot plan %r: no free cell to drop the carried object", mission)
                return None
            used, done = dropped
            if done:
                return used
        full, sim.instrs = sim.instrs, remaining
        try:
            bot = BabyAIBot(sim)
        finally:
            sim.instrs = full
        bot.vis_mask[:] = True
        if keep:  # the top two subgoals are "go next to the object to move" and "pick it up"
            del bot.stack[-2:]
        for n in range(used + 1, limit + 1):
            action = int(bot.replan())
            _, reward, terminated, truncated, _ = sim.step(action)
            if reward > 0:
                return n
            if terminated or truncated or action == _DONE:
                log.warning("BabyAI bot cannot finish %r from this state (stopped after %d steps)", mission, n)
                return None
    except Exception as e:  # noqa: BLE001 - any bot failure means "no plan", never a crash
        log.warning("BabyAI bot failed to plan %r: %s: %s", mission, type(e).__name__, str(e)[:200] or "(no message)")
        return None
    log.warning("BabyAI bot did not finish %r within %d steps", mission, limit)
    return None


def start_plan_length(goal: str, num_dists: int, seed: int) -> int | None:
    """:func:`plan_length` at the start of episode ``seed`` of ``goal`` (cached; the level is generated
    afresh, so no env's state or RNG is touched)."""
    key = (goal, int(num_dists), int(seed))
    with _START_LOCK:
        if key in _START_CACHE:
            _START_CACHE.move_to_end(key)
            return _START_CACHE[key]
    level = MixedLocalLevel(goal, num_dists=num_dists)
    level.compute_image = False
    level.reset(seed=int(seed))
    n = plan_length(level)
    with _START_LOCK:
        _START_CACHE[key] = n
        while len(_START_CACHE) > _START_CACHE_SIZE:
            _START_CACHE.popitem(last=False)
    return n


def clear_start_cache() -> None:
    """Forget the cached start plan lengths (tests)."""
    with _START_LOCK:
        _START_CACHE.clear()
