"""BabyAI behaviour signatures, read from the text of BALROG's observations (no minigrid needed).

Detectors (see :mod:`promptevo.evaluation.signatures` for the format):

* ``wall_bump``: ``go forward`` with ``a wall 1 step forward`` in view;
* ``closed_door_bump``: ``go forward`` into a closed or locked door right ahead;
* ``object_bump``: ``go forward`` into a key, ball or box right ahead (they block the way);
* ``target_visible_not_approached``: the object the mission needs now is in view, more than one step
  away, and over the next :data:`APPROACH_WINDOW` steps it gets no closer (distance = side + forward
  steps; out of view counts as not closer);
* ``pickup_not_facing``: ``pick up`` with nothing in front, with hands full, or in front of an object
  the mission does not ask to pick up;
* ``plan_progress``: for failed episodes that carry ``progress_detail`` (the BabyAI bot's remaining
  plan length at the start and at the end, from ``BabyAITextEnv.plan_lengths()``), how much closer the
  agent got.

The mission's objects come from :func:`parse_mission` (``go to``, ``pick up``, ``open``, ``put X next
to Y`` and the two-part ``X, then Y`` / ``X after you Y`` forms); the object needed at a step is the
first one not yet dealt with (an object picked up for a two-part mission counts as dealt with from
then on; a ``put next`` object only while carried). A locked target door makes its key the target
until the agent carries it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from promptevo.envs.behaviour import (
    Occurrence,
    Signature,
    aggregate,
    citation,
    clean_observation,
    episode_dicts,
    step_action,
)

__all__ = [
    "APPROACH_WINDOW",
    "SeenObject",
    "Target",
    "detect",
    "parse_mission",
    "parse_observation",
]

#: steps within which a visible target should get closer
APPROACH_WINDOW = 4

TEXTS = {
    "wall_bump": "walked into a wall right in front (go forward with 'a wall 1 step forward')",
    "closed_door_bump": "walked into a closed or locked door instead of opening it (toggle)",
    "object_bump": "walked into an object right in front (objects block the way; pick up or go around)",
    "target_visible_not_approached":
        f"saw the object the mission needs but got no closer within {APPROACH_WINDOW} steps",
    "pickup_not_facing": "used 'pick up' without the target object 1 step forward",
}

_COLOR = r"(red|green|blue|purple|yellow|grey)"
_TYPE = r"(key|ball|box|door)"
_OBJ = re.compile(rf"\b(?:the|a|an)\s+(?:{_COLOR}\s+)?{_TYPE}\b")
_LINE = re.compile(rf"^a\s+(?:(open|closed|locked)\s+)?{_COLOR}\s+{_TYPE}\s+(.+)$")
_WHERE = re.compile(r"^(?:(\d+)\s+steps?\s+(left|right))?(?:\s*and\s*)?(?:(\d+)\s+steps?\s+forward)?$")
_CARRY = re.compile(rf"^you carry an?\s+{_COLOR}\s+{_TYPE}$")


@dataclass(frozen=True)
class Target:
    """One object the mission needs: ``verb`` is goto, pickup, putnext (the object to put something
    next to) or open; ``color`` None when the mission does not say (``a ball``). ``sticky``: once
    carried it stays dealt with (a pick-up that is the first part of a two-part mission)."""

    verb: str
    color: str | None
    type: str
    sticky: bool = False

    def matches(self, color: str | None, type_: str) -> bool:
        return type_ == self.type and (self.color is None or color == self.color)

    def name(self) -> str:
        return f"{self.color} {self.type}" if self.color else self.type


@dataclass(frozen=True)
class SeenObject:
    """An object line of an observation: ``side`` < 0 left, > 0 right; ``forward`` steps ahead."""

    color: str
    type: str
    state: str | None
    side: int
    forward: int

    @property
    def distance(self) -> int:
        return abs(self.side) + self.forward

    @property
    def in_front(self) -> bool:
        return self.side == 0 and self.forward == 1


def _clause(text: str, sticky: bool) -> list[Target]:
    text = text.strip()
    objs = [(c or None, t) for c, t in _OBJ.findall(text)]
    if not objs:
        return []
    if text.startswith("put") and len(objs) >= 2:
        return [Target("pickup", *objs[0]), Target("putnext", *objs[1])]
    if text.startswith("pick"):
        return [Target("pickup", *objs[0], sticky=sticky)]
    if text.startswith("open"):
        return [Target("open", *objs[0])]
    if text.startswith("go"):
        return [Target("goto", *objs[0])]
    return []


def parse_mission(mission: str) -> list[Target]:
    """The mission's objects in the order they are dealt with (empty when the text is not a BabyAI
    mission): ``pick up a ball, then go to the grey key`` -> pickup ball (sticky), goto grey key;
    ``go to X after you pick up Y`` -> pickup Y, goto X; ``put X next to Y`` -> pickup X, putnext Y."""
    m = " ".join(str(mission or "").lower().split())
    if ", then " in m:
        first, second = m.split(", then ", 1)
    elif " after you " in m:
        second, first = m.split(" after you ", 1)
    elif " and " in m and not m.startswith("put"):
        first, second = m.split(" and ", 1)
    else:
        return _clause(m, sticky=False)
    return _clause(first, sticky=True) + _clause(second, sticky=False)


def parse_observation(text: Any) -> tuple[tuple[SeenObject, ...], frozenset[str], tuple[str, str] | None]:
    """(objects in view, wall lines such as ``a wall 1 step forward``, carried (color, type) or None)
    of a BabyAI observation (the invalid-action feedback is ignored)."""
    return _parse(clean_observation(text) or "")


@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> tuple[tuple[SeenObject, ...], frozenset[str], tuple[str, str] | None]:
    objs: list[SeenObject] = []
    walls: set[str] = set()
    carried = None
    for raw in text.splitlines():
        line = " ".join(raw.strip().lower().split())
        if line.startswith("a wall"):
            walls.add(line)
            continue
        m = _CARRY.match(line)
        if m:
            carried = (m.group(1), m.group(2))
            continue
        m = _LINE.match(line)
        if not m:
            continue
        w = _WHERE.match(m.group(4))
        if not w or not (w.group(1) or w.group(3)):
            continue
        side = int(w.group(1) or 0) * (-1 if w.group(2) == "left" else 1)
        objs.append(SeenObject(m.group(2), m.group(3), m.group(1), side, int(w.group(3) or 0)))
    return tuple(objs), frozenset(walls), carried


class _Progress:
    """Which mission object is needed at each step of one episode."""

    def __init__(self, targets: list[Target]):
        self.targets = targets
        self.done = 0  # sticky targets dealt with

    def current(self, carried: tuple[str, str] | None, seen: tuple[SeenObject, ...]) -> Target | None:
        i = self.done
        while i < len(self.targets):
            tg = self.targets[i]
            if tg.verb == "pickup" and carried is not None and tg.matches(*carried) and i + 1 < len(self.targets):
                if tg.sticky:
                    self.done = i + 1
                i += 1
                continue
            break
        if i >= len(self.targets):
            return None
        tg = self.targets[i]
        if tg.type == "door":  # a locked door needs its key first
            for o in seen:
                locked = o.type == "door" and o.state == "locked" and tg.matches(o.color, "door")
                if locked and carried != (o.color, "key"):
                    return Target("pickup", o.color, "key")
        return tg


def _distance(tg: Target | None, seen: tuple[SeenObject, ...]) -> int | None:
    if tg is None:
        return None
    ds = [o.distance for o in seen if tg.matches(o.color, o.type)]
    return min(ds) if ds else None


def _episode_occurrences(ep: dict[str, Any], idx: int) -> Iterator[Occurrence]:
    traj = [s for s in (ep.get("trajectory") or []) if isinstance(s, dict)]
    seed = ep.get("seed") if isinstance(ep.get("seed"), int) else -1
    targets = parse_mission(str(ep.get("mission") or ""))
    progress = _Progress(targets)
    views = [parse_observation(s.get("observation")) for s in traj]
    needed: list[Target | None] = []
    dist: list[int | None] = []
    for objs, _walls, carried in views:
        tg = progress.current(carried, objs)
        needed.append(tg)
        dist.append(_distance(tg, objs))
    pickups = [t for t in targets if t.verb == "pickup"]
    skip_until = -1
    for k, s in enumerate(traj):
        t = s.get("t") if isinstance(s.get("t"), int) else k
        objs, walls, carried = views[k]
        action = step_action(s, executed=True)
        front = [o for o in objs if o.in_front]
        if action == "go forward":
            if "a wall 1 step forward" in walls:
                yield Occurrence("wall_bump", seed, t, episode=idx)
            for o in front:
                if o.type == "door" and o.state in ("closed", "locked"):
                    yield Occurrence("closed_door_bump", seed, t, f"a {o.state} {o.color} door", idx)
                elif o.type != "door":
                    yield Occurrence("object_bump", seed, t, f"a {o.color} {o.type}", idx)
        elif action == "pick up":
            wanted = pickups + ([needed[k]] if needed[k] is not None and needed[k].verb == "pickup" else [])
            if carried is not None:
                yield Occurrence("pickup_not_facing", seed, t, "hands already full", idx)
            elif not front:
                yield Occurrence("pickup_not_facing", seed, t, "nothing 1 step forward", idx)
            elif wanted and not any(w.matches(o.color, o.type) for w in wanted for o in front):
                o = front[0]
                yield Occurrence("pickup_not_facing", seed, t, f"a {o.color} {o.type} in front is not the target", idx)
        d = dist[k]
        if k < skip_until or d is None or d <= 1 or k + APPROACH_WINDOW >= len(traj):
            continue
        window = range(k + 1, k + APPROACH_WINDOW + 1)
        if any(needed[j] != needed[k] for j in window):
            continue
        if any(float(traj[j - 1].get("reward") or 0) > 0 for j in window):
            continue
        later = [dist[j] for j in window if dist[j] is not None]
        if not later or min(later) >= d:
            yield Occurrence("target_visible_not_approached", seed, t,
                             f"the {needed[k].name()} {d} steps away", idx)
            skip_until = k + APPROACH_WINDOW


def _plan_numbers(ep: dict[str, Any]) -> tuple[int, int] | None:
    detail = ep.get("progress_detail")
    if detail is None:
        detail = (ep.get("env_stats") or {}).get("progress_detail")
    if isinstance(detail, dict):
        pair = (detail.get("plan_start", detail.get("start")), detail.get("plan_end", detail.get("end")))
    elif isinstance(detail, (list, tuple)) and len(detail) == 2:
        pair = (detail[0], detail[1])
    else:
        return None
    if all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        return int(pair[0]), int(pair[1])
    return None


def plan_progress(episodes: list[dict[str, Any]]) -> Signature | None:
    """How far the failed episodes with ``progress_detail`` got: mean bot plan length at the start and
    at the end, and which got no closer (cited at their last step)."""
    rows = []
    for ep in episodes:
        nums = _plan_numbers(ep)
        if nums is None or ep.get("success"):
            continue
        traj = ep.get("trajectory") or []
        last = traj[-1].get("t") if traj and isinstance(traj[-1], dict) else None
        rows.append((ep.get("seed", -1), last, *nums))
    if not rows:
        return None
    stuck = [r for r in rows if r[3] >= r[2]]
    steps: list[str] = []
    for seed, last, _, _ in stuck + [r for r in rows if r[3] < r[2]]:
        c = citation(seed, last if isinstance(last, int) else None)
        if c not in steps and len(steps) < 12:
            steps.append(c)
    start = sum(r[2] for r in rows) / len(rows)
    end = sum(r[3] for r in rows) / len(rows)
    detail = (f"in failed episodes the BabyAI bot's remaining plan went from {start:.1f} to {end:.1f} steps "
              f"on average; {len(stuck)} of {len(rows)} got no closer")
    return Signature("plan_progress", sorted({r[0] for r in rows}), steps, len(rows), len(rows),
                     len(rows) / len(episodes), detail)


def detect(episodes: list[Any]) -> list[Signature]:
    """BabyAI's own signatures of ``episodes`` (the ``signatures`` hook of the babyai env family)."""
    eps = episode_dicts(episodes)
    occ = [o for i, ep in enumerate(eps) for o in _episode_occurrences(ep, i)]
    sigs = aggregate(occ, len(eps), TEXTS)
    pp = plan_progress(eps)
    if pp is not None:
        sigs.append(pp)
    return sigs
