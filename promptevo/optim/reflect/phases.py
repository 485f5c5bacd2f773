"""Phase features of a decision state: what the agent carries, which of the mission's things is the
current one, and what stands right next to the agent. Computed from the text alone; nothing here knows
a game.

* A **status line** is an observation line whose first word is not structural (most lines begin with
  the same article; "You carry a red ball" does not). The **carried** value is the mission slot a status
  line names (``1``, ``2``), ``other`` when a status line names none of them, ``-`` with no status line.
* The **slot order** says which of a two-slot mission's things comes first. It is fitted, not written:
  in each expert episode the first slot the expert ever carries is the first one; :func:`fit_order` finds
  the mission word (one not inside a slot) whose presence best predicts that the second slot comes first
  ("go to the red ball after you pick up the blue key"), or none when the written order always holds.
* The **phase** is how many of the ordered slots the agent already carries (``0`` or ``1``), or
  ``other`` when it carries something else; the **active slot** is the ordered slot at that phase (the
  same slot again when the mission names only one thing).
* The active slot's line gives the usual features of :mod:`promptevo.optim.reflect.features` under the
  name ``a.`` (``a.line``, ``a.last``, ``a.rest`` ...), read from non-status lines only.
* A **fetched** thing is one the mission does not name that the expert carries first (a key before a
  locked door): :func:`fit_fetch` learns its own words (those it does not share with the mission's
  thing's line, the same in most episodes: "key") and which word of that line it shares (by offset from
  the thing's last word: the colour). While nothing is carried, the fetched thing is the active one.
* A line's **position** is its words from the first number on ("1 step forward"); the **near**
  positions are those with one number, the smallest seen (one step away). ``at:<position>`` is ``a``
  when the active slot's line is there, ``other`` when another line is, ``-`` when none.

All functions are pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from promptevo.agents.answer_fields import line_position
from promptevo.optim.reflect.features import (
    NONE,
    Vocabulary,
    find,
    mission_slots,
    observation_lines,
    thing_features,
    tokens,
)

#: the phase value (and carried value) for a thing that is none of the mission's
OTHER = "other"
NOTHING = "-"
#: fewest two-slot expert episodes (with a carried slot) before an order word is fitted
MIN_ORDER_EPISODES = 2


def is_status(line_tokens: Sequence[str], vocab: Vocabulary) -> bool:
    """A line about the agent itself: its first word is neither structural nor a number."""
    return bool(line_tokens) and line_tokens[0] not in vocab.structural and not line_tokens[0].isdigit()


def carried(observation: str, slots: Sequence[tuple[str, ...]], vocab: Vocabulary) -> str:
    """The slot (``"1"``, ``"2"``) a status line names, ``other``, or ``-`` (no status line)."""
    status = [t for ln in observation_lines(observation) if is_status(t := tokens(ln), vocab)]
    if not status:
        return NOTHING
    for k, thing in enumerate(slots, 1):
        if any(find(t, thing) >= 0 for t in status):
            return str(k)
    return OTHER


@dataclass(frozen=True)
class SlotOrder:
    """Which slot of a two-slot mission comes first: the second when the mission has ``word``."""

    word: str | None = None
    accuracy: float | None = None
    episodes: int = 0

    def ordered(self, mission: str, slots: Sequence[tuple[str, ...]]) -> list[int]:
        """Slot indices (1-based) in the order the mission wants them handled."""
        idx = list(range(1, len(slots) + 1))
        if len(idx) >= 2 and self.word and self.word in _free_words(mission, slots):
            idx[0], idx[1] = idx[1], idx[0]
        return idx

    def to_dict(self) -> dict:
        return {"word": self.word, "accuracy": self.accuracy, "episodes": self.episodes}

    @classmethod
    def from_dict(cls, d: dict | None) -> "SlotOrder":
        d = d or {}
        return cls(d.get("word"), d.get("accuracy"), int(d.get("episodes") or 0))


def _free_words(mission: str, slots: Sequence[tuple[str, ...]]) -> set[str]:
    inside = {w for thing in slots for w in thing}
    return {w for w in tokens(mission) if w not in inside}


def fit_order(states: Sequence[Any], vocab: Vocabulary) -> SlotOrder:
    """The slot order read from expert episodes (``states``: objects with ``seed``, ``t``, ``mission``,
    ``observation``, in any order): per two-slot episode, whether the first slot the expert carried was
    the second one; the free mission word that best predicts it (ties: a word no observation line uses,
    then the rarer word, then the first in alphabetical order), if it beats "always the written order"."""
    first: dict[int, tuple[str, bool]] = {}
    for s in sorted(states, key=lambda s: (s.seed, s.t)):
        if s.seed in first:
            continue
        slots = mission_slots(s.mission, vocab)
        if len(slots) < 2:
            continue
        c = carried(s.observation, slots, vocab)
        if c in ("1", "2"):
            first[s.seed] = (s.mission, c == "2")
    n = len(first)
    if n < MIN_ORDER_EPISODES:
        return SlotOrder(None, None, n)
    labelled = [(_free_words(m, mission_slots(m, vocab)), rev) for m, rev in first.values()]
    plain = sum(not rev for _, rev in labelled) / n
    counts: Counter[str] = Counter(w for words, _ in labelled for w in words)
    ranked = sorted(((sum((w in words) == rev for words, rev in labelled) / n, w not in vocab.line_words, -c, w)
                     for w, c in counts.items()), key=lambda x: (-x[0], not x[1], -x[2], x[3]))
    if not ranked or ranked[0][0] <= plain:
        return SlotOrder(None, round(plain, 4), n)
    return SlotOrder(ranked[0][3], round(ranked[0][0], 4), n)


@dataclass(frozen=True)
class Fetch:
    """The thing to carry first: ``own`` words, preceded by the word of the mission's thing's line at
    ``offset`` from the thing's last word when that line is in view (``offset`` None: ``own`` alone)."""

    own: tuple[str, ...]
    offset: int | None = None
    share: float | None = None  # of the carry-first episodes whose carried thing had exactly ``own``
    episodes: int = 0

    def thing(self, lines: Sequence[str], slot: Sequence[str]) -> tuple[str, ...]:
        if self.offset is not None:
            for ln in lines:
                t = tokens(ln)
                end = find(t, slot)
                if end >= 0 and 0 <= (j := end + len(slot) - 1 + self.offset) < len(t):
                    return (t[j],) + self.own
        return self.own

    def to_dict(self) -> dict:
        return {"own": list(self.own), "offset": self.offset, "share": self.share, "episodes": self.episodes}

    @classmethod
    def from_dict(cls, d: dict | None) -> "Fetch | None":
        if not d or not d.get("own"):
            return None
        return cls(tuple(d["own"]), d.get("offset"), d.get("share"), int(d.get("episodes") or 0))


#: share of carry-first episodes that must agree on the fetched thing's own words
MIN_FETCH_SHARE = 0.8


def fit_fetch(states: Sequence[Any], vocab: Vocabulary) -> Fetch | None:
    """The fetched thing read from expert episodes, or None when the expert never carries a thing the
    mission does not name before anything else (see the module docstring)."""
    by_seed: dict[int, list[Any]] = {}
    for s in sorted(states, key=lambda s: (s.seed, s.t)):
        by_seed.setdefault(s.seed, []).append(s)
    body_words = {w for s in states for ln in observation_lines(s.observation)
                  if not is_status(t := tokens(ln), vocab) for w in t}
    found: list[tuple[tuple[str, ...], int | None]] = []
    for eps in by_seed.values():
        slots = mission_slots(eps[0].mission, vocab)
        if not slots:
            continue
        first = next(((s, c) for s in eps if (c := carried(s.observation, slots, vocab)) != NOTHING), None)
        if first is None or first[1] != OTHER:
            continue
        first = first[0]
        status = next(t for ln in observation_lines(first.observation) if is_status(t := tokens(ln), vocab))
        thing = [w for w in status[1:] if w in body_words and w not in vocab.structural]
        slot_line = next((t for s in eps for ln in observation_lines(s.observation)
                          if not is_status(t := tokens(ln), vocab) and find(t, slots[0]) >= 0), None)
        if not thing:
            continue
        if slot_line is None:
            found.append((tuple(thing), None))
            continue
        own = tuple(w for w in thing if w not in slot_line)
        last = find(slot_line, slots[0]) + len(slots[0]) - 1
        offsets = [i - last for i, w in enumerate(slot_line) if w in thing and i <= last]
        found.append((own or tuple(thing), offsets[0] if offsets else None))
    if not found:
        return None
    own, n = Counter(o for o, _ in found).most_common(1)[0]
    if n / len(found) < MIN_FETCH_SHARE:
        return None
    offs = Counter(off for o, off in found if o == own and off is not None)
    offset = offs.most_common(1)[0][0] if offs else None
    return Fetch(own, offset, round(n / len(found), 4), len(found))


def phase_of(carry: str, ordered: Sequence[int]) -> tuple[str, int | None]:
    """(phase, active slot) from the carried value and the ordered slots."""
    if not ordered:
        return "0", None
    if carry == NOTHING:
        return "0", ordered[0]
    if carry == OTHER:
        return OTHER, ordered[0]
    if carry == str(ordered[0]):
        return "1", ordered[1] if len(ordered) > 1 else ordered[0]
    return OTHER, ordered[0]


def near_positions(observations: Iterable[str], vocab: Vocabulary) -> list[str]:
    """The positions one step away seen in ``observations`` (one number, the smallest), sorted."""
    seen: set[str] = set()
    for obs in observations:
        for ln in observation_lines(obs):
            if not is_status(tokens(ln), vocab) and (p := line_position(ln)) is not None:
                seen.add(p)
    singles = {p: int(n[0]) for p in seen if len(n := [w for w in p.split() if w.isdigit()]) == 1}
    if not singles:
        return []
    low = min(singles.values())
    return sorted(p for p, v in singles.items() if v == low)


def _active(observation: str, mission: str, vocab: Vocabulary, order: SlotOrder,
            fetch: Fetch | None) -> tuple[str, str, list[str], tuple[str, ...]]:
    """(phase, carried value, the non-status lines, the active thing's words: ``()`` when the mission
    names none)."""
    slots = mission_slots(mission, vocab)
    carry = carried(observation, slots, vocab)
    phase, active = phase_of(carry, order.ordered(mission, slots))
    lines = [ln for ln in observation_lines(observation) if not is_status(tokens(ln), vocab)]
    if active is None:
        return phase, carry, lines, ()
    if fetch is not None and carry == NOTHING:
        return phase, carry, lines, fetch.thing(lines, slots[0])
    return phase, carry, lines, slots[active - 1]


def target_of(observation: str, mission: str, vocab: Vocabulary, order: SlotOrder,
              fetch: Fetch | None = None) -> tuple[str, ...]:
    """The words of the active thing in this state (``()`` when the mission names none)."""
    return _active(observation, mission, vocab, order, fetch)[3]


#: the codes of an ``at:<position>`` feature, in the order its answer values are listed (target, something
#: else, nothing)
AT_CODES = ("a", OTHER, NOTHING)


def at_word(values: Sequence[str], code: str) -> str:
    """How an ``at:`` feature's ``code`` is written, given the field's values in :data:`AT_CODES` order."""
    return values[AT_CODES.index(code) if code in AT_CODES else 2]


def phase_features(observation: str, mission: str, vocab: Vocabulary, order: SlotOrder,
                   near: Sequence[str] = (), fetch: Fetch | None = None) -> dict[str, str]:
    """``phase``, ``carry``, the active slot's ``a.*`` features and one ``at:<position>`` per near
    position."""
    phase, carry, lines, thing = _active(observation, mission, vocab, order, fetch)
    feats = {"phase": phase, "carry": carry}
    if not thing:
        feats["a.line"] = NONE
        return feats
    feats.update(thing_features("\n".join(lines), thing, "a"))
    for p in near:
        value = NOTHING
        for ln in lines:
            if line_position(ln) == p:
                value = "a" if find(tokens(ln), thing) >= 0 else OTHER
                if value == "a":
                    break
        feats[f"at:{p}"] = value
    return feats


__all__ = ["AT_CODES", "Fetch", "MIN_FETCH_SHARE", "NOTHING", "OTHER", "SlotOrder", "at_word", "carried", "fit_fetch",
           "fit_order", "is_status", "near_positions", "phase_features", "phase_of", "target_of"]
