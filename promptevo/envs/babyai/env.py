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

import logging
from typing import Any

import numpy as np

from promptevo.envs.babyai.bot import expert_action_index, plan_length, start_plan_length
from promptevo.envs.babyai.level import MixedLocalLevel, check_goal
from promptevo.envs.babyai.spec import ACTIONS, BABYAI_GOALS, DEFAULT_ACTION, FEEDBACK_STYLES
from promptevo.envs.babyai.view import describe
from promptevo.envs.base import ExpertError, StepResult, TextEnv

__all__ = [
    "ACTIONS",
    "BABYAI_GOALS",
    "DEFAULT_ACTION",
    "FEEDBACK_STYLES",
    "BabyAITextEnv",
    "MixedLocalLevel",
    "bot_action",
    "describe",
    "instructions_text",
    "invalid_action_feedback",
    "make_babyai_env",
    "plan_length",
]

log = logging.getLogger(__name__)

_ACTION_INDEX = {a: i for i, a in enumerate(ACTIONS)}


# --------------------------------------------------------------------------------------------------
# Text environment
# --------------------------------------------------------------------------------------------------



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
        check_goal(goal)
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
        self._plan_start: tuple[int, int | None] | None = None  # (seed, bot plan length at reset)
        self._plan_end: tuple[int, int | None] | None = None  # (step, bot plan length then)
        self._objects: tuple[Any, list[Any]] = (None, [])  # (grid, its non-wall objects) for state_key
        self._objects_key: tuple | None = None  # their state, valid until a pick up / drop / toggle

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
        self._plan_end = None
        self._list_objects()
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
        index = _ACTION_INDEX[executed]
        _, reward, terminated, truncated, _ = self.level.step(index)
        if index >= 3:  # pick up, drop, toggle: objects may have changed
            self._objects_key = None
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

    # -- dense progress and loop detection ---------------------------------------------------------
    def plan_lengths(self) -> tuple[int | None, int | None]:
        """``(start, now)``: the steps minigrid's ``BabyAIBot`` needs to finish the mission from the
        episode's first state and from the current one (0 once the episode succeeded); either is None
        when the bot cannot plan that state (a warning is logged). The start value is computed on first
        use from a freshly generated level (cached per goal, distractors and seed); the current one
        costs one bot play-out on a copy of the level (a few ms) and is cached until the next step."""
        if not self._started or self._seed is None:
            return None, None
        if self._plan_start is None or self._plan_start[0] != self._seed:
            self._plan_start = (self._seed, start_plan_length(self.goal, self.num_dists, self._seed))
        start = self._plan_start[1]
        if self._progression >= 1.0:
            return start, 0
        if self._plan_end is None or self._plan_end[0] != self._steps:
            self._plan_end = (self._steps, plan_length(self.level))
        return start, self._plan_end[1]

    def progress(self) -> float | None:
        """1.0 on success, else ``max(0, 1 - remaining_now / remaining_at_start)`` from
        :meth:`plan_lengths`; None when the bot cannot plan either state (the caller uses success)."""
        if not self._started:
            return None
        if self._progression >= 1.0:
            return 1.0
        start, end = self.plan_lengths()
        if start is None or end is None or start <= 0:
            log.debug("no BabyAI progress for seed %s: bot plan lengths %s -> %s", self._seed, start, end)
            return None
        return max(0.0, 1.0 - end / start)

    def expert_action(self) -> str | None:
        """The first action of minigrid's ``BabyAIBot`` from the current state, planned on a copy of the
        level with the whole map known and only the part of the mission still to do (the same bot play-out
        as :meth:`progress`); :class:`ExpertError` when the bot cannot plan this state."""
        if not self._started:
            raise RuntimeError("call reset(seed) before expert_action()")
        if self._done:
            raise ExpertError("the episode is over")
        try:
            index = expert_action_index(self.level)
        except RuntimeError as e:
            raise ExpertError(str(e)) from None
        return ACTIONS[index] if index < len(ACTIONS) else DEFAULT_ACTION

    def state_key(self) -> object | None:
        """The full state as a hashable tuple: agent position and direction, where each key, ball and
        box is (its cell, carried, or gone: a toggled box), each door's open/locked state, and the
        progress of a two-part mission. Walls never change in BabyAI and objects never change kind, so
        they are listed once per episode; the step counter is left out (it only matters for the time
        limit). About 1 us per call, under 10% of a step."""
        if not self._started:
            return None
        lv = self.level
        objs = self._objects_key
        if objs is None:  # new episode, or the last action could have changed an object
            objs = self._objects_key = self._objects_state()
        return (*lv.agent_pos, lv.agent_dir, objs, _instr_state(lv.instrs))  # numbers may be numpy ints

    def _list_objects(self) -> None:
        lv = self.level
        objs = [o for o in lv.grid.grid if o is not None and o.type != "wall"]
        if lv.carrying is not None and all(o is not lv.carrying for o in objs):
            objs.append(lv.carrying)
        self._objects = (lv.grid, [(o, o.type == "door") for o in objs])
        self._objects_key = None

    def _objects_state(self) -> tuple:
        lv = self.level
        grid = lv.grid
        if self._objects[0] is not grid:  # not listed at reset (the level was reset directly)
            self._list_objects()
        cells, width, carrying = grid.grid, grid.width, lv.carrying
        out: list[Any] = []
        for o, door in self._objects[1]:
            if door:  # doors never move; only their state changes
                out.append((o.is_open, o.is_locked))
            elif o is carrying:
                out.append(-1)
            else:
                x, y = o.cur_pos
                k = int(y) * width + int(x)
                out.append(k if 0 <= k < len(cells) and cells[k] is o else -2)  # -2: gone (toggled box)
        return tuple(out)

    def episode_stats(self) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "seed": self._seed,
            "steps": self._steps,
            "invalid_actions": self._invalid,
            "action_frequency": dict(self._executed_counts),
            "success": self._progression >= 1.0,
        }


def _instr_state(instr: Any) -> Any:
    """What a BabyAI instruction remembers between steps: the done flags of two-part missions
    (``before``/``after``/``and``); single instructions only remember the carried object."""
    a = getattr(instr, "instr_a", None)
    if a is None:
        return None
    return (instr.a_done, instr.b_done, _instr_state(a), _instr_state(instr.instr_b))


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
