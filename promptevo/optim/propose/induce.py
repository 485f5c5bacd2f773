"""Fitting a rule table to the expert's actions: the rule of the ``induce`` operator (rendered by
:mod:`promptevo.optim.propose.render_table`, proposed by :mod:`promptevo.optim.propose.compile_table`).

From expert-labelled decision states of training seeds (:mod:`promptevo.optim.reflect.expert`), the
features of :mod:`promptevo.optim.reflect.features` (which observation line names the mission's thing,
its first and last word, its shape...) and the expert's action:

1. **Fit** (:func:`fit_table`, pure): a value table over one feature, where a value's branch may be
   refined by one yes/no test on another feature (a tree of depth <= 2 that reads as a table). The
   structure is chosen by accuracy under cross-validation by seed on the fitting states; values seen in
   fewer than ``min_support`` states go to the default action. Only states where some line names the
   mission's things are fitted; the rest ("no such line") get the expert's most common action there.
   A hand-written fitter rather than a CART library: CART splits one-hot features in two, so a
   three-valued table needs depth 3 and reads as nested conditions; a multiway table is what the agent
   is asked to follow.
2. **Measure** (:func:`induce`): states of a share of the seeds are held out; the table fitted on the
   others is scored on them against the fitting states' majority action. No child unless it beats the
   majority on held-out states by :data:`MIN_GAIN` with at least :data:`MIN_HELDOUT` states.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from promptevo.errors import PromptevoError
from promptevo.optim.reflect.expert import LabelledState
from promptevo.optim.reflect.features import (
    NONE,
    Vocabulary,
    defined,
    mission_slots,
    state_features,
    vocabulary,
)


#: fewest fitting states, held-out states, and the held-out gain over the majority action a child needs
MIN_FIT = 12
MIN_HELDOUT = 6
MIN_GAIN = 0.10
HOLDOUT_SHARE = 0.3
FOLDS = 5

Row = tuple[dict[str, str], str]  # (features, expert action)


class InduceError(PromptevoError, ValueError):
    """The phrase file of the induce operator is missing or malformed; ``str(e)`` is one line."""


# -- the model --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Split:
    """A yes/no test inside one branch of the table: ``feature == value``."""

    feature: str
    value: str
    yes: str
    no: str


@dataclass
class RuleTable:
    """``root`` value -> action (or a :class:`Split`); ``default`` for values not in the table;
    ``none_action`` where no line names the mission's things (None: the table says nothing there)."""

    root: str
    branches: dict[str, str | Split]
    default: str
    none_action: str | None = None

    def predict(self, feats: dict[str, str]) -> str | None:
        if not defined(feats):
            return self.none_action
        b = self.branches.get(feats.get(self.root, NONE), self.default)
        if isinstance(b, Split):
            return b.yes if feats.get(b.feature, NONE) == b.value else b.no
        return b

    def features(self) -> list[str]:
        used = [self.root] + [b.feature for b in self.branches.values() if isinstance(b, Split)]
        return list(dict.fromkeys(used))

    def to_dict(self) -> dict:
        return {"root": self.root, "default": self.default, "none": self.none_action,
                "branches": {v: (b if isinstance(b, str) else {"if": f"{b.feature} = {b.value}", "yes": b.yes,
                                                                "no": b.no}) for v, b in self.branches.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "RuleTable":
        """The table :meth:`to_dict` wrote."""
        branches: dict[str, str | Split] = {}
        for v, b in (d.get("branches") or {}).items():
            if isinstance(b, str):
                branches[v] = b
            else:
                feature, value = str(b["if"]).split(" = ", 1)
                branches[v] = Split(feature, value, b["yes"], b["no"])
        return cls(str(d["root"]), branches, str(d["default"]), d.get("none"))


def majority_action(actions: Sequence[str]) -> str:
    counts = Counter(actions)
    return max(sorted(counts), key=lambda a: counts[a])


def _build(rows: Sequence[Row], root: str, splits: dict[str, tuple[str, str]], min_support: int) -> RuleTable:
    """Fit the table of a given structure (root feature, per-value split tests) to ``rows``."""
    default = majority_action([a for _, a in rows])
    by_value: dict[str, list[Row]] = defaultdict(list)
    for f, a in rows:
        by_value[f.get(root, NONE)].append((f, a))
    branches: dict[str, str | Split] = {}
    for v, members in sorted(by_value.items()):
        if len(members) < min_support:
            continue
        act = majority_action([a for _, a in members])
        if v in splits:
            g, w = splits[v]
            yes = [a for f, a in members if f.get(g, NONE) == w]
            no = [a for f, a in members if f.get(g, NONE) != w]
            branches[v] = Split(g, w, majority_action(yes) if yes else act, majority_action(no) if no else act)
        else:
            branches[v] = act
    return RuleTable(root, branches, default)


def _accuracy(table: RuleTable, rows: Sequence[Row]) -> float:
    return sum(table.predict(f) == a for f, a in rows) / len(rows) if rows else 0.0


def _fold(seed: int, k: int) -> int:
    return int(hashlib.sha256(f"fold:{seed}".encode()).hexdigest(), 16) % k


def _cv(rows: Sequence[Row], seeds: Sequence[int], root: str, splits: dict[str, tuple[str, str]],
        min_support: int) -> float:
    """Cross-validated accuracy (folds by seed) of a structure; resubstitution when there is one fold."""
    folds = {_fold(s, FOLDS) for s in seeds}
    if len(folds) < 2:
        return _accuracy(_build(rows, root, splits, min_support), rows)
    hits = 0
    for k in folds:
        train = [r for r, s in zip(rows, seeds) if _fold(s, FOLDS) != k]
        test = [r for r, s in zip(rows, seeds) if _fold(s, FOLDS) == k]
        t = _build(train, root, splits, min_support)
        hits += sum(t.predict(f) == a for f, a in test)
    return hits / len(rows)


def complexity(table: RuleTable) -> int:
    """How much the agent must read: values the table lists plus its yes/no tests."""
    return len(table.branches) + sum(isinstance(b, Split) for b in table.branches.values())


def _grow(rows: Sequence[Row], seeds: Sequence[int], root: str, candidates: Sequence[str], min_support: int,
          max_splits: int) -> tuple[float, dict[str, tuple[str, str]]]:
    """Greedy yes/no tests under one root: each round adds the test that raises the cross-validated
    accuracy most (by at least half a state); returns (accuracy, tests)."""
    score = _cv(rows, seeds, root, {}, min_support)
    splits: dict[str, tuple[str, str]] = {}
    for _ in range(max_splits):
        table = _build(rows, root, splits, min_support)
        errors: Counter[str] = Counter(f.get(root, NONE) for f, a in rows if table.predict(f) != a)
        best: tuple[float, str, str, str] | None = None
        for v, _n in errors.most_common(4):
            if v in splits:
                continue
            members = [(f, a) for f, a in rows if f.get(root, NONE) == v]
            cands = []  # tests ranked by how many of the branch's states they would get right
            for g in candidates:
                if g == root:
                    continue
                for w, c in Counter(f.get(g, NONE) for f, _ in members).items():
                    if c < min_support or c == len(members):
                        continue
                    yes = [a for f, a in members if f.get(g, NONE) == w]
                    no = [a for f, a in members if f.get(g, NONE) != w]
                    right = Counter(yes).most_common(1)[0][1] + Counter(no).most_common(1)[0][1]
                    cands.append((right, g, w))
            for _right, g, w in sorted(cands, reverse=True)[:4]:
                sc = _cv(rows, seeds, root, {**splits, v: (g, w)}, min_support)
                if best is None or sc > best[0]:
                    best = (sc, v, g, w)
        if best is None or best[0] <= score + 0.5 / len(rows):
            break
        score = best[0]
        splits[best[1]] = (best[2], best[3])
    return score, splits


def fit_table(rows: Sequence[Row], seeds: Sequence[int], *, min_support: int = 2, max_splits: int = 3,
              tolerance: float = 0.03, max_values: int | None = None) -> RuleTable:
    """The simplest table (fewest values and tests, :func:`complexity`) whose cross-validated accuracy is
    within ``tolerance`` of the best found; every feature is tried as the root, each grown greedily
    (:func:`_grow`). ``rows`` are states where some line names the mission's things; ``seeds`` their
    episode seeds (the folds). ``max_values``: a root whose table lists more values is not considered
    (a table an agent can read), unless every root does."""
    if not rows:
        raise ValueError("no states to fit")
    names = sorted({k for f, _ in rows for k in f})
    candidates = [n for n in names if len({f.get(n, NONE) for f, _ in rows}) > 1]
    if not candidates:
        return RuleTable(names[0] if names else "1.line", {}, majority_action([a for _, a in rows]))
    models = []
    for root in candidates:
        score, splits = _grow(rows, seeds, root, candidates, min_support, max_splits)
        table = _build(rows, root, splits, min_support)
        models.append((score, complexity(table), root, table))
    if max_values is not None and any(len(m[3].branches) <= max_values for m in models):
        models = [m for m in models if len(m[3].branches) <= max_values]
    top = max(m[0] for m in models)
    return min((m for m in models if m[0] >= top - tolerance), key=lambda m: (m[1], -m[0], m[2]))[3]


# -- induction from labelled states -----------------------------------------------------------------
@dataclass
class Induction:
    """What the operator found: the table (fitted on all usable states), its held-out accuracy (fitted on
    the other seeds) beside the majority action's, the state counts and why there is no child, if none."""

    table: RuleTable | None = None
    accuracy: float | None = None
    majority: float | None = None
    majority_action: str | None = None
    n_fit: int = 0
    n_heldout: int = 0
    left_out: int = 0  # states where no line names the mission's things
    none_accuracy: float | None = None  # of none_action on the left-out states
    slots: dict[str, str] = field(default_factory=dict)  # slot -> an example of the thing it names
    vocab: Vocabulary | None = None  # the vocabulary the features were computed with
    reason: str = ""

    @property
    def useful(self) -> bool:
        return self.table is not None and not self.reason

    def to_dict(self) -> dict:
        return {"table": self.table.to_dict() if self.table else None, "heldout_accuracy": self.accuracy,
                "majority_accuracy": self.majority, "majority_action": self.majority_action,
                "fit_states": self.n_fit, "heldout_states": self.n_heldout, "left_out_states": self.left_out,
                "none_accuracy": self.none_accuracy, "slots": self.slots, "reason": self.reason or None,
                "vocabulary": ({"structural": sorted(self.vocab.structural), "words": sorted(self.vocab.line_words)}
                               if self.vocab else None)}


def heldout_seed(seed: int) -> bool:
    """Whether a seed's states are held out of the fit (:data:`HOLDOUT_SHARE` of seeds, by hash)."""
    return int(hashlib.sha256(f"heldout:{seed}".encode()).hexdigest(), 16) % 100 < HOLDOUT_SHARE * 100


def distinct_states(states: Sequence[LabelledState]) -> list[LabelledState]:
    """``states`` without repeats (same mission, observation and expert action), first kept, in order."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for s in states:
        if (s.mission, s.observation, s.expert) not in seen:
            seen.add((s.mission, s.observation, s.expert))
            out.append(s)
    return out


def induce(states: Sequence[LabelledState], *, vocab: Vocabulary | None = None, min_fit: int = MIN_FIT,
           min_heldout: int = MIN_HELDOUT, min_gain: float = MIN_GAIN, min_support: int = 2) -> Induction:
    """Fit and measure a rule table on expert-labelled states (distinct by mission, observation and
    expert action)."""
    uniq = distinct_states(states)
    if not uniq:
        return Induction(reason="no expert-labelled states")
    vocab = vocab or vocabulary(s.observation for s in uniq)
    feats = [state_features(s.observation, s.mission, vocab) for s in uniq]
    rows = [(f, s.expert, s.seed) for f, s in zip(feats, uniq) if defined(f)]
    left = [(s.expert, s) for f, s in zip(feats, uniq) if not defined(f)]
    out = Induction(left_out=len(left), vocab=vocab)
    for s in uniq:
        for k, thing in enumerate(mission_slots(s.mission, vocab), 1):
            out.slots.setdefault(str(k), " ".join(thing))
    fit = [(f, a, sd) for f, a, sd in rows if not heldout_seed(sd)]
    held = [(f, a, sd) for f, a, sd in rows if heldout_seed(sd)]
    out.n_fit, out.n_heldout = len(fit), len(held)
    if len(fit) < min_fit or len(held) < min_heldout:
        out.reason = (f"too few labelled states where a line names the mission's things ({len(fit)} to fit, "
                      f"{len(held)} held out; need {min_fit} and {min_heldout})")
        return out
    probe = fit_table([(f, a) for f, a, _ in fit], [sd for *_, sd in fit], min_support=min_support)
    out.majority_action = majority_action([a for _, a, _ in fit])
    out.accuracy = round(_accuracy(probe, [(f, a) for f, a, _ in held]), 4)
    out.majority = round(sum(a == out.majority_action for _, a, _ in held) / len(held), 4)
    table = fit_table([(f, a) for f, a, _ in rows], [sd for *_, sd in rows], min_support=min_support)
    if left:
        table.none_action = majority_action([a for a, _ in left])
        out.none_accuracy = round(sum(a == table.none_action for a, _ in left) / len(left), 4)
    out.table = table
    if out.accuracy < out.majority + min_gain:
        out.reason = (f"the fitted table is no better than the majority action on held-out states "
                      f"({out.accuracy:.0%} vs {out.majority:.0%} for always {out.majority_action!r}, "
                      f"n = {len(held)})")
    return out


__all__ = ["InduceError", "Induction", "MIN_FIT", "MIN_GAIN", "MIN_HELDOUT", "RuleTable", "Split", "distinct_states", "heldout_seed", "majority_action",
           "complexity", "fit_table", "induce"]
