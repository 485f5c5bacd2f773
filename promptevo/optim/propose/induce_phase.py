"""A phase-rooted rule: the phase (what the agent carries, :mod:`promptevo.optim.reflect.phases`) at the
root and one rule table per phase over the active slot's line and the near positions.

:func:`induce_phased` fits it on expert-labelled states the way :func:`promptevo.optim.propose.induce.induce`
fits a flat table: the slot order from the expert's episodes, then per phase
:func:`~promptevo.optim.propose.induce.fit_table` on the states where the active slot has a line, the
expert's most common action where it has none; held-out accuracy on a share of the seeds against the
majority action. A phase with too few states gets the majority action of its states (one line in
``notes``); a phase never seen gets the table's default.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from promptevo.optim.propose.induce import RuleTable, distinct_states, fit_table, heldout_seed, majority_action
from promptevo.optim.reflect.expert import LabelledState
from promptevo.optim.reflect.features import Vocabulary, defined, mission_slots, vocabulary
from promptevo.optim.reflect.phases import (
    OTHER,
    Fetch,
    SlotOrder,
    fit_fetch,
    fit_order,
    near_positions,
    phase_features,
    target_of,
)

#: fewest states of a phase (where its active slot has a line) for a table of its own
MIN_PHASE_STATES = 6
#: fewest states a guard must set right (net) to be kept, and most guards per phase
MIN_GUARD_GAIN = 1
MAX_GUARDS = 2


@dataclass(frozen=True)
class Guard:
    """An obstacle row read before the table: where something other than the active thing stands at
    ``position`` and the table says ``when``, do ``instead``."""

    position: str
    when: str
    instead: str

    def to_dict(self) -> dict:
        return {"at": self.position, "when": self.when, "instead": self.instead}


def guarded(table: RuleTable, guards: Sequence[Guard], feats: dict[str, str]) -> str | None:
    """The table's action with its guards applied (the first matching guard wins)."""
    act = table.predict(feats)
    for g in guards:
        if act == g.when and feats.get(f"at:{g.position}") == OTHER:
            return g.instead
    return act


def fit_guards(rows: Sequence[tuple[dict, str]], table: RuleTable, near: Sequence[str]) -> list[Guard]:
    """Greedy obstacle rows: each round adds the (position, table action) -> expert action that sets
    most states right, net of those it sets wrong, if at least :data:`MIN_GUARD_GAIN`."""
    guards: list[Guard] = []
    for _ in range(MAX_GUARDS):
        best: tuple[int, Guard] | None = None
        preds = [(f, a, guarded(table, guards, f)) for f, a in rows]
        for p in near:
            hit = [(a, pr) for f, a, pr in preds if f.get(f"at:{p}") == OTHER]
            for when in sorted({pr for _, pr in hit if pr}):
                under = [a for a, pr in hit if pr == when]
                for instead in sorted(set(under) - {when}):
                    gain = sum(a == instead for a in under) - sum(a == when for a in under)
                    if best is None or gain > best[0]:
                        best = (gain, Guard(p, when, instead))
        if best is None or best[0] < MIN_GUARD_GAIN or any(g.position == best[1].position and g.when == best[1].when
                                                            for g in guards):
            break
        guards.append(best[1])
    return guards


@dataclass
class PhasedTable:
    """``phase`` value -> :class:`RuleTable`; ``default`` for a phase with no table."""

    order: SlotOrder
    near: tuple[str, ...]
    tables: dict[str, RuleTable]
    default: str
    guards: dict[str, list[Guard]] = field(default_factory=dict)  # phase -> obstacle rows
    fetch: Fetch | None = None

    def predict(self, feats: dict[str, str]) -> str | None:
        phase = feats.get("phase", "0")
        t = self.tables.get(phase)
        return guarded(t, self.guards.get(phase, ()), feats) if t is not None else self.default

    def featurize(self, observation: str, mission: str, vocab: Vocabulary) -> dict[str, str]:
        """The features this table reads (a :data:`~promptevo.optim.reflect.follower.Featurizer`)."""
        return phase_features(observation, mission, vocab, self.order, self.near, self.fetch)

    def slots(self, mission: str, vocab: Vocabulary) -> list[tuple[str, ...]]:
        """The mission's things, in the mission's order."""
        return mission_slots(mission, vocab)

    def target_words(self, observation: str, mission: str, vocab: Vocabulary) -> tuple[str, ...]:
        """The words of the thing that is the target in this state (the active slot, or the fetched thing)."""
        return target_of(observation, mission, vocab, self.order, self.fetch)

    def to_dict(self) -> dict:
        return {"root": "phase", "order": self.order.to_dict(), "near": list(self.near), "default": self.default,
                "phases": {p: t.to_dict() for p, t in sorted(self.tables.items())},
                "guards": {p: [g.to_dict() for g in gs] for p, gs in sorted(self.guards.items()) if gs},
                "fetch": self.fetch.to_dict() if self.fetch else None}

    @classmethod
    def from_dict(cls, d: dict) -> "PhasedTable":
        return cls(SlotOrder.from_dict(d.get("order")), tuple(d.get("near") or ()),
                   {p: RuleTable.from_dict(t) for p, t in (d.get("phases") or {}).items()}, str(d["default"]),
                   {p: [Guard(g["at"], g["when"], g["instead"]) for g in gs]
                    for p, gs in (d.get("guards") or {}).items()}, Fetch.from_dict(d.get("fetch")))


@dataclass
class PhasedInduction:
    table: PhasedTable | None = None
    accuracy: float | None = None
    majority: float | None = None
    n_fit: int = 0
    n_heldout: int = 0
    phases: dict[str, int] = field(default_factory=dict)  # phase -> states
    notes: list[str] = field(default_factory=list)
    vocab: Vocabulary | None = None
    reason: str = ""

    def to_dict(self) -> dict:
        return {"table": self.table.to_dict() if self.table else None, "heldout_accuracy": self.accuracy,
                "majority_accuracy": self.majority, "fit_states": self.n_fit, "heldout_states": self.n_heldout,
                "phases": self.phases, "notes": self.notes, "reason": self.reason or None}


def _fit(rows: Sequence[tuple[dict, str, int]], order: SlotOrder, near: tuple[str, ...], fetch: Fetch | None,
         notes: list[str] | None, max_values: int | None = None) -> PhasedTable:
    default = majority_action([a for _, a, _ in rows])
    by_phase: dict[str, list[tuple[dict, str, int]]] = defaultdict(list)
    for r in rows:
        by_phase[r[0]["phase"]].append(r)
    tables: dict[str, RuleTable] = {}
    guards: dict[str, list[Guard]] = {}
    for p, members in sorted(by_phase.items()):
        seen = [(f, a, s) for f, a, s in members if defined(f)]
        unseen = [a for f, a, _ in members if not defined(f)]
        if len(seen) >= MIN_PHASE_STATES:
            t = fit_table([(f, a) for f, a, _ in seen], [s for *_, s in seen], max_values=max_values)
        else:
            t = RuleTable("a.line", {}, majority_action([a for _, a, _ in members]))
            if notes is not None:
                notes.append(f"phase {p}: {len(seen)} states with the active thing in view (need "
                             f"{MIN_PHASE_STATES}); the phase's most common action stands in for its table")
        t.none_action = majority_action(unseen) if unseen else None
        tables[p] = t
        guards[p] = fit_guards([(f, a) for f, a, _ in seen], t, near)
    return PhasedTable(order, near, tables, default, guards, fetch)


def induce_phased(states: Sequence[LabelledState], *, vocab: Vocabulary | None = None,
                  max_values: int | None = None) -> PhasedInduction:
    """Fit and measure a phase-rooted table on expert-labelled states (distinct by mission, observation
    and expert action)."""
    uniq = distinct_states(states)
    if not uniq:
        return PhasedInduction(reason="no expert-labelled states")
    vocab = vocab or vocabulary(s.observation for s in uniq)
    order = fit_order(uniq, vocab)
    near = tuple(near_positions((s.observation for s in uniq), vocab))
    fetch = fit_fetch([s for s in uniq if s.agent is None], vocab)
    rows = [(phase_features(s.observation, s.mission, vocab, order, near, fetch), s.expert, s.seed) for s in uniq]
    out = PhasedInduction(vocab=vocab)
    for f, _, _ in rows:
        out.phases[f["phase"]] = out.phases.get(f["phase"], 0) + 1
    blank = sorted({s.mission for s in uniq if not mission_slots(s.mission, vocab)})
    if blank:
        out.notes.append(f"{len(blank)} mission(s) name no thing the observation lines use (e.g. {blank[0]!r}): "
                         "their states are read as 'no line names the thing'")
    if any(len(mission_slots(s.mission, vocab)) >= 2 for s in uniq) and "1" not in out.phases:
        out.notes.append("phase 1 never occurs in the expert's episodes (nothing the mission names is ever "
                         "carried): the rule has no table for it and plays the default action there")
    fit = [r for r in rows if not heldout_seed(r[2])]
    held = [r for r in rows if heldout_seed(r[2])]
    out.n_fit, out.n_heldout = len(fit), len(held)
    if fit and held:
        probe = _fit(fit, order, near, fetch, None, max_values)
        out.accuracy = round(sum(probe.predict(f) == a for f, a, _ in held) / len(held), 4)
        m = majority_action([a for _, a, _ in fit])
        out.majority = round(sum(a == m for _, a, _ in held) / len(held), 4)
    out.table = _fit(rows, order, near, fetch, out.notes, max_values)
    return out


__all__ = ["Guard", "MIN_GUARD_GAIN", "MIN_PHASE_STATES", "PhasedInduction", "PhasedTable", "fit_guards", "guarded",
           "induce_phased"]
