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
from collections.abc import Iterator
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

__all__ = ["clear_start_cache", "expert_action_index", "plan_length", "remaining_instr", "start_plan_length"]

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


def _bot_actions(level: Any, limit: int) -> Iterator[int]:
    """The actions ``BabyAIBot`` plays from the current state of ``level``, on a copy of it, until the
    mission is done (the generator then returns); raises :class:`_NoPlan` when the bot cannot finish.

    The bot is given the whole map (no exploration detours), only the part of the mission still to do,
    and the state as it is: holding the object a ``put next`` mission moves skips fetching it; holding an
    object the next pick-up would not allow (the bot picks up with empty hands) first drops it in a free
    cell next to the agent (turning right up to three times), and those steps come first.
    """
    mission = getattr(level, "mission", "?")
    sim = _copy_level(level)
    sim.max_steps = int(sim.step_count) + limit + 8  # no truncation inside the simulation
    remaining = remaining_instr(sim.instrs)
    held = sim.carrying
    keep = isinstance(remaining, PutNextInstr) and any(held is o for o in remaining.desc_move.obj_set)
    used = 0
    if held is not None and not keep and isinstance(_first_part(remaining), (PickupInstr, PutNextInstr)):
        for _ in range(4):
            fx, fy = (int(v) for v in sim.front_pos)
            action = sim.actions.drop if sim.grid.get(fx, fy) is None else sim.actions.right
            used += 1
            _, reward, _, _, _ = sim.step(action)
            yield int(action)
            if action == sim.actions.drop:
                if reward > 0:
                    return
                break
        else:
            raise _NoPlan("no free cell to drop the carried object")
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
        if action == _DONE:
            raise _NoPlan(f"the bot gave up after {n - 1} steps")
        _, reward, terminated, truncated, _ = sim.step(action)
        yield action
        if reward > 0:
            return
        if terminated or truncated:
            raise _NoPlan(f"stopped after {n} steps")
    raise _NoPlan(f"did not finish {mission!r} within {limit} steps")


class _NoPlan(Exception):
    """The bot cannot finish the mission from this state."""


def plan_length(level: Any, *, cap: int | None = None) -> int | None:
    """Steps ``BabyAIBot`` needs from the current state of ``level`` to finish its mission (>= 1), played
    on a copy of the level as :func:`_bot_actions` describes (the level itself is left alone).

    ``None`` when the bot raises, gives up (answers ``done`` without success), the mission fails, or it
    needs more than ``cap`` steps (default: :data:`CAP_FACTOR` x the level's step limit); a one-line
    warning is logged then.
    """
    limit = int(cap) if cap is not None else CAP_FACTOR * int(level.max_steps)
    mission = getattr(level, "mission", "?")
    n = 0
    try:
        for _ in _bot_actions(level, limit):
            n += 1
    except _NoPlan as e:
        log.warning("BabyAI bot cannot finish %r from this state: %s", mission, e)
        return None
    except Exception as e:  # noqa: BLE001 - any bot failure means "no plan", never a crash
        log.warning("BabyAI bot failed to plan %r: %s: %s", mission, type(e).__name__, str(e)[:200] or "(no message)")
        return None
    return n


def expert_action_index(level: Any) -> int:
    """The first action of ``BabyAIBot``'s plan from the current state of ``level`` (minigrid's action
    index), computed on a copy as :func:`_bot_actions` describes. Raises ``RuntimeError`` with a one-line
    reason when the bot cannot plan this state."""
    limit = CAP_FACTOR * int(level.max_steps)
    try:
        for action in _bot_actions(level, limit):
            return action
    except _NoPlan as e:
        raise RuntimeError(f"the BabyAI bot cannot plan this state: {e}") from None
    except Exception as e:  # noqa: BLE001 - minigrid's own errors ("nothing left to explore"...)
        raise RuntimeError(f"the BabyAI bot failed: {type(e).__name__}: {str(e)[:200] or '(no message)'}") from None
    raise RuntimeError("the mission is already done")


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
