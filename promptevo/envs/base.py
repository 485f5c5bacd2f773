"""The interface shared by every text environment in promptevo.

A text env is gymnasium-like but speaks text on both sides:

* ``reset(seed)`` returns ``(observation_text, info)``; ``info["mission"]`` holds the goal text.
* ``step(action_text)`` returns a :class:`StepResult`. An action that is not one of
  ``valid_actions`` (exact match after the env's own normalisation) is *invalid*: the env executes its
  documented ``default_action`` instead and reports ``info["valid_action"] = False`` and
  ``info["executed_action"]``; the trajectory records both.
* ``progression`` is the benchmark metric in [0, 1] for the episode so far (BALROG's progression for
  BabyAI: 1.0 once any step gave a positive reward).
* ``instructions()`` is the environment's description for the LLM (rules, action list), data-driven.
* ``episode_stats()`` returns env-specific statistics for summaries (e.g. collisions for MAPF).
* ``expert_action()`` (optional) is what the game's expert would do in the current state: BabyAI's bot,
  MAPF's reference solver, an optimal policy of a toy-text game. The optimizer compares the agent with it
  (disagreement clusters, rules induced from expert-labelled states); an env without one returns None.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


# -- actions ---------------------------------------------------------------------------------------
_TRAIL = ".!,;:?"
_WRAP = "\"'`*_ "


def normalize_action(text: str) -> str:
    """Lowercase, collapse whitespace, drop wrapping quotes/markup and trailing punctuation."""
    t = " ".join(text.strip().lower().split())
    prev = None
    while prev != t:
        prev = t
        t = t.strip(_WRAP).rstrip(_TRAIL).strip()
    return t


def match_action(candidate: str, valid_actions: list[str]) -> str | None:
    """The valid action ``candidate`` denotes after :func:`normalize_action`, or ``None``."""
    table = {normalize_action(a): a for a in valid_actions}
    return table.get(normalize_action(candidate))


def gbnf_literal(s: str) -> str:
    """``s`` as a GBNF string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ActionSpace:
    """What counts as an action of an env: matching a reply to it, sampling, the ``{actions}`` text and
    the GBNF rule ``action`` for constrained decoding.

    This default is a finite list of action strings (``env.valid_actions``), matched after
    :func:`normalize_action`. An env whose actions are structured (MAPF's joint moves) returns its own
    subclass from :meth:`TextEnv.action_space`.
    """

    def __init__(self, actions: list[str]):
        self.valid = list(actions)

    def match(self, candidate: str) -> str | None:
        """The canonical action ``candidate`` denotes, or None."""
        return match_action(candidate, self.valid)

    def describe(self) -> str:
        """Text for the ``{actions}`` placeholder."""
        return ", ".join(self.valid)

    def sample(self, rng: random.Random) -> str:
        """A uniformly random valid action."""
        return rng.choice(self.valid)

    def gbnf_rules(self) -> str:
        """GBNF rules defining ``action`` (one valid action, canonical form)."""
        return "action ::= " + " | ".join(gbnf_literal(a) for a in self.valid) + "\n"


@dataclass
class StepResult:
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class ExpertError(RuntimeError):
    """The env has an expert, but it cannot give an action in this state; ``str(e)`` is one line."""


class TextEnv(ABC):
    """Abstract text environment (see module docstring for the contract)."""

    #: short env family name, e.g. "babyai" or "mapf"
    family: str = ""

    @property
    @abstractmethod
    def valid_actions(self) -> list[str]:
        """The exact action strings the env accepts."""

    @property
    @abstractmethod
    def default_action(self) -> str:
        """Executed in place of an invalid action."""

    @property
    @abstractmethod
    def max_steps(self) -> int:
        """Step limit of the current episode."""

    @property
    @abstractmethod
    def mission(self) -> str:
        """Goal text of the current episode."""

    @property
    @abstractmethod
    def progression(self) -> float:
        """Benchmark metric for the episode so far, in [0, 1]."""

    @abstractmethod
    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        """Start an episode; returns (observation text, info with at least 'mission')."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action (text). info carries 'valid_action', 'executed_action', 'progression'."""

    @abstractmethod
    def instructions(self) -> str:
        """Environment description for the LLM: goal format, rules and the list of actions."""

    def progress(self) -> float | None:
        """A dense estimate in [0, 1] of how far the episode got towards success (1.0 = done), or None
        when the env has none (the optimizer then uses success instead). BabyAI computes it from the
        BabyAI bot's remaining plan; it is read once, at the end of an episode."""
        return None

    def state_key(self) -> object | None:
        """A hashable snapshot of the env's full state (None when the env cannot give one). Two steps
        with equal keys and equal agent inputs repeat exactly, so a deterministic agent is in a loop
        it can never leave; the rollout stops such an episode (loop cut-off)."""
        return None

    def expert_action(self) -> str | None:
        """The action the game's expert takes in the current state (a valid action string), or None when
        the env has no expert (the default). The expert may see more than the observation (the whole map);
        it must not change the env's state or its random-number generators. Raises :class:`ExpertError`
        when the expert exists but cannot plan this state."""
        return None

    def action_space(self) -> ActionSpace:
        """How replies map to actions (default: exactly one of ``valid_actions``)."""
        return ActionSpace(self.valid_actions)

    def episode_stats(self) -> dict[str, Any]:
        """Env-specific statistics of the current episode (override where useful)."""
        return {}

    def close(self) -> None:  # pragma: no cover - nothing to free by default
        pass


def has_expert(env: "TextEnv | type[TextEnv]") -> bool:
    """True when the env (or env class) overrides :meth:`TextEnv.expert_action`."""
    cls = env if isinstance(env, type) else type(env)
    return getattr(cls, "expert_action", None) is not TextEnv.expert_action
