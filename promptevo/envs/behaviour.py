"""Behaviour signatures, the part a game family builds on: the :class:`Signature` and :class:`Occurrence`
types, trajectory helpers (citations ``S<seed>.<t>``, cleaned observations, the executed action), the
generic detectors that work for any text game from the trajectory alone, and :func:`aggregate`.

A family's own detectors (``signatures=`` of :func:`~promptevo.envs.registry.register_env`) use these,
so they sit with the environments; :mod:`promptevo.evaluation.signatures` runs every detector over
played episodes and renders the result.

Generic detectors (each yields :class:`Occurrence` objects; :func:`aggregate` turns them into
:class:`Signature` objects):

* ``repeated_state``: the same observation 3+ steps in a row, or an exact (observation, action) pair
  coming back after 2+ steps (a cycle; one occurrence per trip round the cycle);
* ``no_effect_action``: the observation did not change after an action that is not a turn or a wait;
* ``turn_oscillation``: opposite actions alternating (left/right, up/down, turn left/turn right) 3+
  actions long, or 4+ equal turns in a row (spinning in place);
* ``invalid_action`` / ``unparsed_reply``: steps with ``valid`` / ``parsed`` false;
* ``stuck_repeating_action``: the same action 8+ times in a row without a reward.

Observations are compared after :func:`clean_observation`, which drops what an env adds about the
previous step rather than the state: the invalid-action feedback prefix, ``Last step: ...`` event lines
and step counters (``Step 3 of 40``).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

#: step citations kept per signature: this many per seed and in total
STEPS_PER_SEED = 3
STEPS_TOTAL = 12

REPEAT_RUN = 3  # same observation this many steps in a row
OSCILLATION_ACTIONS = 3  # a b a: opposite actions alternating twice
SPIN_TURNS = 4  # four equal turns: a full circle
STUCK_RUN = 8  # the same action this many times in a row


@dataclass
class Signature:
    """One behaviour seen in a set of episodes."""

    kind: str
    seeds: list[int]
    steps: list[str]
    count: int
    episodes: int
    share: float
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Occurrence:
    """One sighting of a behaviour: in the episode with ``seed`` at step ``t`` (None: the whole
    episode), with an optional short ``note`` (e.g. the action involved). ``episode`` is the episode's
    index in the list given to the detectors (seeds may repeat across episodes)."""

    kind: str
    seed: int
    t: int | None = None
    note: str = ""
    episode: int = -1


#: one short sentence per generic kind (families pass their own to :func:`aggregate`)
KIND_TEXT: dict[str, str] = {
    "repeated_state": "came back to the same observation again and again",
    "no_effect_action": "took an action that changed nothing in the observation",
    "turn_oscillation": "alternated opposite moves or turned in circles",
    "invalid_action": "sent an action the game does not accept",
    "unparsed_reply": "gave a reply from which no action could be read",
    "stuck_repeating_action": f"repeated one action {STUCK_RUN}+ times in a row without a reward",
}


# -- episode access ----------------------------------------------------------------------------------
def episode_dicts(episodes: Iterable[Any]) -> list[dict[str, Any]]:
    """Episode dicts from EpisodeResult objects (anything with ``to_dict``) or dicts."""
    out = []
    for ep in episodes:
        if isinstance(ep, dict):
            out.append(ep)
        elif hasattr(ep, "to_dict"):
            out.append(ep.to_dict())
        else:
            raise TypeError(f"an episode must be a dict or have to_dict(), got {type(ep).__name__}")
    return out


def _seed(ep: dict[str, Any]) -> int:
    s = ep.get("seed")
    return int(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else -1


def _trajectory(ep: dict[str, Any]) -> list[dict[str, Any]]:
    traj = ep.get("trajectory") or []
    return [s for s in traj if isinstance(s, dict)]


def _t(step: dict[str, Any], index: int) -> int:
    t = step.get("t")
    return int(t) if isinstance(t, int) and not isinstance(t, bool) else index


def citation(seed: int, t: int | None) -> str:
    """``S<seed>.<t>`` (``S<seed>`` for a whole episode)."""
    return f"S{seed}" if t is None else f"S{seed}.{t}"


def step_action(step: dict[str, Any], executed: bool = False) -> str:
    """The action of a step, normalised (lowercase, single spaces): what the agent sent, or with
    ``executed`` what the env ran (they differ for invalid actions)."""
    a = step.get("executed_action") if executed else None
    if not isinstance(a, str):
        a = step.get("action")
    if not isinstance(a, str):
        return ""
    return " ".join(a.strip().lower().split())


_FEEDBACK_START = "your previous output"
_FEEDBACK_END = re.compile(r"defaulted to action:[^\n]*(?:\n|$)", re.IGNORECASE)
_OBS_HEADER = re.compile(r"^\s*observation:[ \t]*\n?", re.IGNORECASE)
_EVENT_LINE = re.compile(r"^\s*last step:.*$\n?", re.IGNORECASE | re.MULTILINE)
_STEP_COUNTER = re.compile(r"\bstep \d+ (of|/) \d+\b", re.IGNORECASE)


def clean_observation(text: Any) -> str | None:
    """The observation without what describes the previous step rather than the state: the
    invalid-action feedback prefix (``Your previous output ... Defaulted to action: ...`` and an
    ``Observation:`` header after it), ``Last step: ...`` event lines and step counters. None when
    ``text`` is not a string."""
    if not isinstance(text, str):
        return None
    return _clean(text)


@functools.lru_cache(maxsize=8192)
def _clean(text: str) -> str:
    s = text.lstrip()
    if s.lower().startswith(_FEEDBACK_START):
        m = _FEEDBACK_END.search(s)
        if m is not None:
            s = _OBS_HEADER.sub("", s[m.end():].lstrip("\n"), count=1)
    s = _EVENT_LINE.sub("", s)
    s = _STEP_COUNTER.sub(r"step # \1 #", s)
    return s.strip()


# -- action words -----------------------------------------------------------------------------------
_OPPOSITE = {
    "left": "right", "right": "left", "up": "down", "down": "up", "north": "south", "south": "north",
    "east": "west", "west": "east", "forward": "backward", "backward": "forward",
    "clockwise": "counterclockwise", "counterclockwise": "clockwise",
}
_DIRECTION = re.compile(r"\b(" + "|".join(sorted(_OPPOSITE, key=len, reverse=True)) + r")\b")
_WAIT_WORDS = frozenset({"stay", "wait", "noop", "no-op", "idle", "hold", "none", "pass", "done", "nothing"})
_LABEL_WORDS = frozenset({"agent", "robot", "and"})


def opposite_action(action: str) -> str | None:
    """``action`` with each direction word swapped (``turn left`` -> ``turn right``, ``agent 1: up``
    -> ``agent 1: down``); None when it has none."""
    if not _DIRECTION.search(action):
        return None
    return _DIRECTION.sub(lambda m: _OPPOSITE[m.group(1)], action)


def is_turn(action: str) -> bool:
    return "turn" in action or "rotate" in action


def is_wait(action: str) -> bool:
    """Every word of the action (agent labels aside) means staying put."""
    words = [w for w in re.findall(r"[a-z][a-z\-]*", action) if w not in _LABEL_WORDS]
    return bool(words) and all(w in _WAIT_WORDS for w in words)


def _snippet(text: Any, n: int = 40) -> str:
    s = " ".join(str(text).split()) if text is not None else ""
    return repr(s if len(s) <= n else s[: n - 3] + "...")


# -- generic detectors --------------------------------------------------------------------------------
def detect_repeated_state(ep: dict[str, Any]) -> Iterator[Occurrence]:
    traj, seed = _trajectory(ep), _seed(ep)
    obs = [clean_observation(s.get("observation")) for s in traj]
    acts = [step_action(s) for s in traj]
    n = len(traj)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and obs[i] is not None and obs[j + 1] == obs[i]:
            j += 1
        if j - i + 1 >= REPEAT_RUN:
            yield Occurrence("repeated_state", seed, _t(traj[i], i), f"same observation {j - i + 1} steps in a row")
        i = j + 1
    seen: dict[tuple[str, str], int] = {}
    quiet_until = -1
    for k in range(n):
        if obs[k] is None:
            continue
        key = (obs[k], acts[k])
        p = seen.get(key)
        if p is not None and k - p >= 2 and k >= quiet_until and any(obs[m] != obs[k] for m in range(p, k)):
            yield Occurrence("repeated_state", seed, _t(traj[k], k),
                             f"observation and action of step {_t(traj[p], p)} again ({k - p}-step cycle)")
            quiet_until = k + (k - p)  # one occurrence per trip round the cycle
        seen[key] = k


def detect_no_effect_action(ep: dict[str, Any]) -> Iterator[Occurrence]:
    traj, seed = _trajectory(ep), _seed(ep)
    for k in range(len(traj) - 1):
        a = step_action(traj[k], executed=True)
        if not a or is_turn(a) or is_wait(a):
            continue
        before, after = clean_observation(traj[k].get("observation")), clean_observation(traj[k + 1].get("observation"))
        if before is not None and before == after:
            yield Occurrence("no_effect_action", seed, _t(traj[k], k), repr(a))


def detect_turn_oscillation(ep: dict[str, Any]) -> Iterator[Occurrence]:
    traj, seed = _trajectory(ep), _seed(ep)
    acts = [step_action(s) for s in traj]
    n = len(acts)
    k = 1
    while k < n:  # alternating opposites: a, opposite(a), a, ...
        j = k
        while j < n and acts[j] and acts[j] == opposite_action(acts[j - 1]):
            j += 1
        length = j - k + 1  # actions in the alternation
        if length >= OSCILLATION_ACTIONS:
            yield Occurrence("turn_oscillation", seed, _t(traj[k - 1], k - 1),
                             f"{acts[k - 1]!r}/{acts[k]!r} alternated {length} times")
        k = j + 1 if j > k else k + 1
    i = 0
    while i < n:  # spinning: the same turn again and again
        j = i
        while j + 1 < n and acts[j + 1] == acts[i]:
            j += 1
        if is_turn(acts[i]) and j - i + 1 >= SPIN_TURNS:
            yield Occurrence("turn_oscillation", seed, _t(traj[i], i),
                             f"{acts[i]!r} {j - i + 1} times (spinning in place)")
        i = j + 1


def detect_invalid(ep: dict[str, Any]) -> Iterator[Occurrence]:
    traj, seed = _trajectory(ep), _seed(ep)
    for k, s in enumerate(traj):
        if s.get("valid") is False:
            yield Occurrence("invalid_action", seed, _t(s, k), _snippet(s.get("action")))
        if s.get("parsed") is False:
            reply = s.get("reply")
            tail = reply.strip()[-40:] if isinstance(reply, str) else reply
            yield Occurrence("unparsed_reply", seed, _t(s, k), _snippet(tail))


def detect_stuck(ep: dict[str, Any]) -> Iterator[Occurrence]:
    traj, seed = _trajectory(ep), _seed(ep)
    acts = [step_action(s) for s in traj]
    n = len(acts)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and acts[j + 1] == acts[i]:
            j += 1
        rewarded = any(_reward(traj[m]) > 0 for m in range(i, j + 1))
        won_at_end = j == n - 1 and bool(ep.get("success"))
        if acts[i] and j - i + 1 >= STUCK_RUN and not rewarded and not won_at_end:
            yield Occurrence("stuck_repeating_action", seed, _t(traj[i], i), f"{acts[i]!r} x{j - i + 1}")
        i = j + 1


def _reward(step: dict[str, Any]) -> float:
    r = step.get("reward")
    return float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else 0.0


EpisodeDetector = Callable[[dict[str, Any]], Iterable[Occurrence]]

GENERIC_DETECTORS: tuple[EpisodeDetector, ...] = (
    detect_repeated_state,
    detect_no_effect_action,
    detect_turn_oscillation,
    detect_invalid,
    detect_stuck,
)


# -- aggregation ----------------------------------------------------------------------------------------
def aggregate(occurrences: Iterable[Occurrence], n_episodes: int,
              texts: dict[str, str] | None = None) -> list[Signature]:
    """One :class:`Signature` per kind: seeds, capped step citations (:data:`STEPS_PER_SEED` per seed,
    :data:`STEPS_TOTAL` in all, in episode then step order), counts and the share of ``n_episodes``.
    The detail is the kind's sentence from ``texts`` (else :data:`KIND_TEXT`, else the kind's name)
    plus the most common note as an example."""
    by_kind: dict[str, list[Occurrence]] = {}
    for o in occurrences:
        by_kind.setdefault(o.kind, []).append(o)
    texts = {**KIND_TEXT, **(texts or {})}
    out = []
    for kind, occ in by_kind.items():
        occ.sort(key=lambda o: (o.episode, o.seed, -1 if o.t is None else o.t))
        episodes = {(o.episode, o.seed) for o in occ}
        seeds = sorted({o.seed for o in occ})
        per_seed: Counter[int] = Counter()
        steps: list[str] = []
        for o in occ:
            c = citation(o.seed, o.t)
            if len(steps) < STEPS_TOTAL and per_seed[o.seed] < STEPS_PER_SEED and c not in steps:
                steps.append(c)
                per_seed[o.seed] += 1
        notes = Counter(o.note for o in occ if o.note)
        detail = texts.get(kind, kind.replace("_", " "))
        if notes:
            detail += f" (e.g. {notes.most_common(1)[0][0]})"
        share = len(episodes) / n_episodes if n_episodes > 0 else 0.0
        out.append(Signature(kind, seeds, steps, len(occ), len(episodes), min(share, 1.0), detail))
    return out
