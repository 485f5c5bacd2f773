"""Features of a decision state computed from its text alone: which observation lines name what the
mission names, and the shape of those lines.

Nothing here knows a game. A mission's *things* are the maximal runs of its words that also occur in
observation lines and are not structural (a structural token occurs in most observation lines: "a",
"step"...), in the order the mission names them ("put the red ball next to the blue key": slot 1 "red
ball", slot 2 "blue key"). For each slot, the first observation line that contains the slot's words as
a run gives the features:

======== ==================================================================================
feature  value
======== ==================================================================================
line     ``yes`` / ``none``: some line names the slot's thing
first    the line's first word
last     the line's last word
before   the word just before the thing's words (``-`` at the start of the line)
after    the word just after them (``-`` at the end)
rest     the line with the thing's words replaced by ``...`` ("a ... 1 step forward")
count    how many lines name it (``1``, ``2+``)
======== ==================================================================================

A feature is named ``<slot>.<feature>`` (``1.last``). :func:`vocabulary` learns the structural tokens
and the words lines use from a set of states; the same vocabulary must be used for every state of one
fit. All functions are pure.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

#: a token in at least this share of observation lines is structural (never part of a thing's name)
STRUCTURAL_SHARE = 0.5
#: at most this many slots (things named by one mission)
MAX_SLOTS = 3
FEATURES = ("line", "first", "last", "before", "after", "rest", "count")
NONE = "none"
PLACEHOLDER = "..."


def tokens(text: str) -> list[str]:
    """Lowercase words and numbers of ``text``."""
    return _WORD.findall(text.lower())


def observation_lines(observation: str) -> list[str]:
    """The non-empty lines of an observation, stripped."""
    return [ln.strip() for ln in observation.splitlines() if ln.strip()]


@dataclass(frozen=True)
class Vocabulary:
    """What lines are made of, learnt from states: the words lines use, and the structural ones."""

    line_words: frozenset[str]
    structural: frozenset[str]
    #: words seen only as a line's first word ("you" of "You carry a ..."): never a thing's name
    leading: frozenset[str] = frozenset()

    def to_dict(self) -> dict:
        return {"structural": sorted(self.structural), "line_words": len(self.line_words)}

    @classmethod
    def from_words(cls, words: Iterable[str], structural: Iterable[str]) -> "Vocabulary":
        """The vocabulary an induction record stored (``{"words": [...], "structural": [...]}``)."""
        return cls(frozenset(words), frozenset(structural))


def vocabulary(observations: Iterable[str], *, share: float = STRUCTURAL_SHARE) -> Vocabulary:
    """The vocabulary of a set of observations (each line counted once per observation)."""
    counts: Counter[str] = Counter()
    heads: set[str] = set()
    inner: set[str] = set()
    n_lines = 0
    for obs in observations:
        for line in observation_lines(obs):
            n_lines += 1
            toks = tokens(line)
            counts.update(set(toks))
            heads.update(toks[:1])
            inner.update(toks[1:])
    structural = {w for w, c in counts.items() if n_lines and c / n_lines >= share}
    return Vocabulary(frozenset(counts), frozenset(structural), frozenset(heads - inner - structural))


def mission_slots(mission: str, vocab: Vocabulary) -> list[tuple[str, ...]]:
    """The things a mission names, in order: maximal runs of mission words that lines use, trimmed of
    structural words at both ends (a run of structural words only keeps its last word, when every line
    names the thing); duplicates and runs of leading words only ("after you pick up": "you") dropped."""
    out: list[tuple[str, ...]] = []
    run: list[str] = []

    def close() -> None:
        last = run[-1:]
        while run and run[0] in vocab.structural:
            run.pop(0)
        while run and run[-1] in vocab.structural:
            run.pop()
        thing = tuple(run) or tuple(w for w in last if len(w) > 2)  # all structural: the run's head word
        if thing and thing not in out and not all(w in vocab.leading for w in thing):
            out.append(thing)
        run.clear()

    for w in tokens(mission):
        if w in vocab.line_words:
            run.append(w)
        else:
            close()
    close()
    return out[:MAX_SLOTS]


def find(seq: Sequence[str], sub: Sequence[str]) -> int:
    """Where the run ``sub`` starts in ``seq`` (-1: nowhere)."""
    n = len(sub)
    for i in range(len(seq) - n + 1):
        if tuple(seq[i:i + n]) == tuple(sub):
            return i
    return -1


def slot_lines(observation: str, thing: Sequence[str]) -> list[tuple[str, list[str], int]]:
    """``(line, its tokens, where the thing starts)`` for every observation line naming ``thing``."""
    out = []
    for line in observation_lines(observation):
        toks = tokens(line)
        at = find(toks, thing)
        if at >= 0:
            out.append((line, toks, at))
    return out


def thing_features(observation: str, thing: Sequence[str], prefix: str) -> dict[str, str]:
    """The features of the first observation line naming ``thing``, named ``<prefix>.<feature>``; only
    ``<prefix>.line = none`` when no line names it."""
    found = slot_lines(observation, thing)
    if not found:
        return {f"{prefix}.line": NONE}
    _, toks, at = found[0]
    end = at + len(thing)
    return {
        f"{prefix}.line": "yes",
        f"{prefix}.first": toks[0],
        f"{prefix}.last": toks[-1],
        f"{prefix}.before": toks[at - 1] if at > 0 else "-",
        f"{prefix}.after": toks[end] if end < len(toks) else "-",
        f"{prefix}.rest": " ".join(toks[:at] + [PLACEHOLDER] + toks[end:]),
        f"{prefix}.count": "1" if len(found) == 1 else "2+",
    }


def after_name(shape: str) -> str:
    """The words after the thing's name in a ``rest`` shape ("a ... 1 step forward" -> "1 step forward");
    the shape itself when it has no placeholder."""
    parts = shape.split(PLACEHOLDER, 1)
    return parts[1].strip() if len(parts) == 2 else shape


def state_features(observation: str, mission: str, vocab: Vocabulary) -> dict[str, str]:
    """The features of one state (see the module docstring); a slot with no line has only
    ``<slot>.line = none``."""
    feats: dict[str, str] = {}
    for k, thing in enumerate(mission_slots(mission, vocab), 1):
        feats.update(thing_features(observation, thing, str(k)))
    return feats


def lead_word(states: Iterable[Any], vocab: Vocabulary, slot: int | None = None) -> str:
    """The word the observation lines most often put just before the name of the mission's ``slot``-th
    thing (every slot's with None), ``-`` when the name most often starts the line or no line names it.
    ``states``: objects with ``mission`` and ``observation``."""
    seen: Counter[str] = Counter()
    for s in states:
        for k, thing in enumerate(mission_slots(s.mission, vocab), 1):
            if slot is None or k == slot:
                b = thing_features(s.observation, thing, "x").get("x.before")
                if b and b != NONE:
                    seen[b] += 1
    return seen.most_common(1)[0][0] if seen else "-"


def defined(features: dict[str, str]) -> bool:
    """True when some slot has a line (the state can be decided from its text)."""
    return any(k.endswith(".line") and v == "yes" for k, v in features.items())


def relevant_lines(observation: str, mission: str, vocab: Vocabulary) -> list[str]:
    """The observation lines that name something the mission names (each once, in order)."""
    seen: list[str] = []
    for thing in mission_slots(mission, vocab):
        for line, _, _ in slot_lines(observation, thing):
            if line not in seen:
                seen.append(line)
    return seen


def anonymise(line: str, mission: str, vocab: Vocabulary) -> str:
    """``line`` with the words of the mission's things replaced by ``...`` (so that evidence shown to a
    small model carries the shape of a line, not one instance's names)."""
    toks = tokens(line)
    for thing in mission_slots(mission, vocab):
        at = find(toks, thing)
        if at >= 0:
            toks = toks[:at] + [PLACEHOLDER] + toks[at + len(thing):]
    return " ".join(toks)


def thing_words(states: Sequence[Any], vocab: Vocabulary) -> set[str]:
    """The words that name things: those of the things the expert's missions name, and a word of an
    observation line that stands between the line's first word and such a word ("a yellow key": "yellow",
    a thing's word no mission of the sample used); never "and", "left", "step" of the lines, nor a word
    that begins a mission (its verb: "a open door" never makes "open" a thing's word). ``states``: objects
    with ``mission`` and ``observation`` (expert-labelled states, env resets)."""
    words = {w for s in states for thing in mission_slots(s.mission, vocab) for w in thing}
    verbs = {t[0] for s in states if (t := tokens(s.mission))}
    lead = Counter(ln.split()[0] for s in states for ln in s.observation.lower().splitlines() if ln.split())
    first = lead.most_common(1)[0][0] if lead else None
    extra = set()
    for s in states:
        for ln in s.observation.lower().splitlines():
            t = ln.split()
            if (len(t) >= 3 and t[0] == first and t[2] in words and t[1] not in words and t[1].isalpha()
                    and t[1] not in verbs):
                extra.add(t[1])
    return words | extra


__all__ = ["FEATURES", "NONE", "PLACEHOLDER", "Vocabulary", "after_name", "anonymise", "defined", "find", "lead_word", "mission_slots",
           "observation_lines", "relevant_lines", "slot_lines", "state_features", "thing_features", "thing_words", "tokens",
           "vocabulary"]
