"""Validity diagnostics: cheap, LLM-free checks that veto a high-scoring but invalid candidate.

An idea from EvoTrainer ("evolving diagnostics that block invalid high-scoring branches"): a child can
win on its training seeds for the wrong reasons. Each check below looks for one such reason and returns
a :class:`Veto` (or None when it has nothing to object to):

* :func:`leak_check` -- the edit hard-codes specifics of the training seeds (mission phrases such as
  "red ball" that no validation mission has, or grid coordinates copied from training observations);
* :func:`generalization_gap` -- the child gained on the training seeds but not on the validation seeds;
* :func:`backtest` -- replayed on earlier generations' training seeds (where the incumbent best was
  already played), the child does worse than the incumbent;
* :func:`behaviour_checks` -- the child's episodes have clearly more invalid actions or more loops
  (repeating an (observation, action) pair already seen in the same episode) than the parent's.

:func:`validity` runs whichever checks its inputs allow and returns a :class:`ValidityReport`. All
functions are pure and deterministic (results are sorted, never dependent on set or dict order).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: Function words: an n-gram that starts or ends with one of these is not a "specific" phrase
#: ("go to", "the red", "pick up" are phrasing, "red ball" is content).
STOP_WORDS = frozenset(
    """a an the to of in on at by for with from into onto over under and or but nor then after before
    when while until once so if than as is are was were be been being it its this that these those there
    here you your yours we our us i me my he she they them their his her up down out off again also
    all any each every some no not only very just next""".split()
)

_WORD_RE = re.compile(r"[a-z0-9]+")
_COORD_PATTERNS = (
    re.compile(r"\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)"),
    re.compile(r"\brow\s+(\d{1,3})\s*,?\s*(?:and\s+)?(?:col|column)\s+(\d{1,3})\b", re.IGNORECASE),
)
_STEP_COUNTER_RE = re.compile(r"\bstep\s+\d+\s+of\s+\d+\b\.?", re.IGNORECASE)
_EPS = 1e-12


@dataclass(frozen=True)
class Veto:
    """One check's objection to a candidate: the check's name, a one-line reason, and the numbers."""

    check: str
    reason: str
    details: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        return {"check": self.check, "reason": self.reason, "details": dict(self.details)}


@dataclass
class ValidityReport:
    """The outcome of :func:`validity`: vetoes (empty when valid) and which checks ran."""

    vetoes: list[Veto] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    backtest: "BacktestResult | None" = None

    @property
    def ok(self) -> bool:
        return not self.vetoes

    def summary(self) -> str:
        """One line: "valid (checks: ...)" or the vetoes' reasons joined by "; "."""
        if self.ok:
            return "valid" + (f" (checks: {', '.join(self.checks)})" if self.checks else " (no checks ran)")
        return "; ".join(f"{v.check}: {v.reason}" for v in self.vetoes)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "checks": list(self.checks),
            "vetoes": [v.to_dict() for v in self.vetoes],
            "backtest": self.backtest.to_dict() if self.backtest is not None else None,
        }


# =================================================================================================
# Leaks of training-seed specifics
# =================================================================================================


def words(text: str) -> list[str]:
    """Lower-case alphanumeric word tokens of ``text``."""
    return _WORD_RE.findall(str(text or "").lower())


def _ngrams(tokens: Sequence[str], sizes: Iterable[int] = (2, 3)) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for n in sizes:
        for i in range(len(tokens) - n + 1):
            out.add(tuple(tokens[i : i + n]))
    return out


def content_ngrams(text: str, sizes: Iterable[int] = (2, 3)) -> set[tuple[str, ...]]:
    """Word n-grams of ``text`` that neither start nor end with a stop word (so never stop-words-only)."""
    return {g for g in _ngrams(words(text), sizes) if g[0] not in STOP_WORDS and g[-1] not in STOP_WORDS}


def coordinates(text: str) -> set[tuple[int, int]]:
    """Grid coordinates written as "(3, 4)", "(3,4)", "row 3 col 4" or "row 3, column 4"."""
    out: set[tuple[int, int]] = set()
    for pat in _COORD_PATTERNS:
        for m in pat.finditer(str(text or "")):
            out.add((int(m.group(1)), int(m.group(2))))
    return out


def _contains(big: tuple[str, ...], small: tuple[str, ...]) -> bool:
    n = len(small)
    return any(big[i : i + n] == small for i in range(len(big) - n + 1))


def leaked_phrases(
    edit_text: str, parent_text: str, train_missions: Iterable[str], heldout_missions: Iterable[str]
) -> list[str]:
    """Mission phrases that :func:`leak_check` would flag, shortest first, then alphabetically.

    A phrase is a 2-3 word n-gram (lower case, not starting or ending with a stop word) that occurs in
    some training mission, in no validation mission, not in ``parent_text``, and in ``edit_text``. A
    3-gram that contains a flagged 2-gram is not listed separately. With no validation missions nothing
    is flagged (specific and generic phrasing cannot be told apart).
    """
    heldout = list(heldout_missions)
    if not heldout:
        return []
    train: set[tuple[str, ...]] = set()
    for m in train_missions:
        train |= content_ngrams(m)
    held: set[tuple[str, ...]] = set()
    for m in heldout:
        held |= _ngrams(words(m))
    parent = _ngrams(words(parent_text))
    edit = _ngrams(words(edit_text))
    flagged = sorted((g for g in train if g not in held and g not in parent and g in edit), key=lambda g: (len(g), g))
    kept: list[tuple[str, ...]] = []
    for g in flagged:
        if not any(_contains(g, k) for k in kept):
            kept.append(g)
    return [" ".join(g) for g in kept]


def leaked_coordinates(edit_text: str, parent_text: str, train_observations: Iterable[str]) -> list[tuple[int, int]]:
    """Coordinates written in ``edit_text``, seen in training observations, absent from ``parent_text``."""
    seen: set[tuple[int, int]] = set()
    for o in train_observations:
        seen |= coordinates(o)
    return sorted((coordinates(edit_text) & seen) - coordinates(parent_text))


def leak_check(
    edit_text: str,
    parent_text: str,
    train_missions: Iterable[str],
    heldout_missions: Iterable[str],
    train_observations: Iterable[str] | None = None,
) -> Veto | None:
    """Veto an edit that hard-codes training-seed specifics (see :func:`leaked_phrases`).

    Flags word n-grams of the training missions that no validation mission shares and that the edit
    introduces (they are not in the parent prompt), e.g. "always go to the red ball" learned on a
    "go to the red ball" seed while the validation missions name other objects. Generic instructions
    ("go to the target", "pick up the key you need") are not flagged. When ``train_observations`` are
    given, coordinates like "(3, 4)" or "row 3 col 4" copied from them into the edit are flagged too.
    """
    phrases = leaked_phrases(edit_text, parent_text, list(train_missions), list(heldout_missions))
    coords = leaked_coordinates(edit_text, parent_text, train_observations) if train_observations is not None else []
    if not phrases and not coords:
        return None
    parts = []
    if phrases:
        shown = ", ".join(repr(p) for p in phrases[:5]) + (f" (+{len(phrases) - 5} more)" if len(phrases) > 5 else "")
        parts.append(f"training-mission phrases absent from every validation mission: {shown}")
    if coords:
        shown = ", ".join(f"({r}, {c})" for r, c in coords[:5]) + (f" (+{len(coords) - 5} more)" if len(coords) > 5 else "")
        parts.append(f"coordinates copied from training observations: {shown}")
    return Veto("leak", "edit hard-codes training-seed specifics: " + "; ".join(parts),
                {"phrases": phrases, "coordinates": [list(c) for c in coords]})


# =================================================================================================
# Training vs validation gap
# =================================================================================================


def generalization_gap(
    train_diff: float | None, heldout_diff: float | None, *, min_train_gain: float = 0.1, tolerance: float = 0.0
) -> Veto | None:
    """Veto a child that "only works on training seeds".

    ``train_diff`` and ``heldout_diff`` are the child's mean paired differences against its reference
    on the training and the validation seeds. Vetoed when the training gain is at least
    ``min_train_gain`` while the validation difference is not above ``tolerance`` (0: no validation gain at
    all; a negative tolerance forgives a small validation loss). None when either value is missing.
    """
    if train_diff is None or heldout_diff is None:
        return None
    t, h = float(train_diff), float(heldout_diff)
    if t + _EPS >= min_train_gain and h <= tolerance + _EPS:
        return Veto("generalization_gap",
                    f"gained {t:+.3f} on training seeds but {h:+.3f} on validation seeds (needs > {tolerance:+.3f})",
                    {"train_diff": t, "heldout_diff": h, "min_train_gain": min_train_gain, "tolerance": tolerance})
    return None


# =================================================================================================
# Backtest on earlier generations' seeds
# =================================================================================================


@dataclass(frozen=True)
class BacktestResult:
    """The child against the incumbent on the seeds both were played on (paired)."""

    n: int
    mean_diff: float
    wins: int
    losses: int
    ties: int
    seeds: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        return d


def _seed(s: Any) -> Any:
    try:
        return int(s)
    except (TypeError, ValueError):
        return s


def _seed_order(s: Any) -> tuple:
    return (0, s, "") if isinstance(s, int) else (1, 0, str(s))


def backtest_result(child_by_seed: Mapping[Any, float], best_by_seed: Mapping[Any, float]) -> BacktestResult:
    """Paired comparison on the common seeds (keys may be ints or their strings, as in checkpoints)."""
    child = {_seed(k): float(v) for k, v in child_by_seed.items()}
    best = {_seed(k): float(v) for k, v in best_by_seed.items()}
    seeds = sorted(set(child) & set(best), key=_seed_order)
    diffs = [child[s] - best[s] for s in seeds]
    wins = sum(1 for d in diffs if d > _EPS)
    losses = sum(1 for d in diffs if d < -_EPS)
    return BacktestResult(n=len(diffs), mean_diff=sum(diffs) / len(diffs) if diffs else 0.0, wins=wins,
                          losses=losses, ties=len(diffs) - wins - losses, seeds=tuple(seeds))


def backtest(
    child_by_seed: Mapping[Any, float],
    best_by_seed: Mapping[Any, float],
    *,
    tolerance: float = 0.0,
    min_pairs: int = 1,
) -> Veto | None:
    """Veto a child that, replayed on earlier generations' training seeds, does worse than the
    incumbent best by more than ``tolerance`` in mean paired score.

    Only seeds both were played on count. With fewer than ``min_pairs`` of them there is no evidence
    and nothing is vetoed. The veto's details hold the :class:`BacktestResult` (n, mean diff,
    wins/losses/ties, seeds).
    """
    r = backtest_result(child_by_seed, best_by_seed)
    if r.n == 0 or r.n < min_pairs:
        return None
    if r.mean_diff < -tolerance - _EPS:
        return Veto("backtest",
                    f"on {r.n} earlier training seeds the child trails the incumbent by {r.mean_diff:+.3f} "
                    f"({r.wins}W/{r.losses}L/{r.ties}T; tolerance {tolerance:.3f})", r.to_dict())
    return None


# =================================================================================================
# Behaviour: invalid actions and loops
# =================================================================================================


def _get(ep: Any, name: str, default: Any = None) -> Any:
    if isinstance(ep, Mapping):
        return ep.get(name, default)
    return getattr(ep, name, default)


def normalize_observation(obs: Any) -> str:
    """Observation text with step counters ("Step 3 of 25.") removed and whitespace collapsed, so a
    state seen again at a later step compares equal."""
    return " ".join(_STEP_COUNTER_RE.sub(" ", str(obs if obs is not None else "")).split())


@dataclass(frozen=True)
class BehaviourStats:
    """Invalid-action and loop counts over a set of episodes (errored episodes are left out)."""

    episodes: int
    steps: int
    invalid: int
    traj_steps: int
    repeats: int

    @property
    def invalid_rate(self) -> float | None:
        return self.invalid / self.steps if self.steps else None

    @property
    def loop_rate(self) -> float | None:
        return self.repeats / self.traj_steps if self.traj_steps else None

    def to_dict(self) -> dict:
        return {**asdict(self), "invalid_rate": self.invalid_rate, "loop_rate": self.loop_rate}


def behaviour_stats(episodes: Iterable[Any]) -> BehaviourStats:
    """Counts from episode dicts or objects with ``invalid_actions``, ``steps`` and ``trajectory``.

    ``steps`` falls back to the trajectory length and ``invalid_actions`` to the number of trajectory
    steps with ``valid`` false. A loop step is one whose (normalized observation, action) pair already
    occurred earlier in the same episode.
    """
    n_eps = steps = invalid = traj_steps = repeats = 0
    for ep in episodes:
        if _get(ep, "error"):
            continue
        traj = list(_get(ep, "trajectory") or [])
        n_eps += 1
        s = _get(ep, "steps")
        steps += int(s) if s is not None else len(traj)
        inv = _get(ep, "invalid_actions")
        invalid += int(inv) if inv is not None else sum(1 for t in traj if _get(t, "valid", True) is False)
        seen: set[tuple[str, str]] = set()
        for t in traj:
            action = _get(t, "action")
            if action is None:
                action = _get(t, "executed_action", "")
            key = (normalize_observation(_get(t, "observation")), str(action).strip().lower())
            traj_steps += 1
            if key in seen:
                repeats += 1
            else:
                seen.add(key)
    return BehaviourStats(n_eps, steps, invalid, traj_steps, repeats)


def behaviour_checks(
    child_episodes: Iterable[Any],
    parent_episodes: Iterable[Any],
    *,
    max_invalid_increase: float = 0.1,
    max_loop_increase: float = 0.2,
) -> list[Veto]:
    """Vetoes when the child's invalid-action rate (invalid actions per step) or loop rate (share of
    trajectory steps repeating an earlier (observation, action) pair of the same episode) exceeds the
    parent's by more than ``max_invalid_increase`` / ``max_loop_increase`` (absolute rates).

    A rate is compared only when both sides have steps for it (no trajectories: no loop check).
    """
    c, p = behaviour_stats(child_episodes), behaviour_stats(parent_episodes)
    out: list[Veto] = []
    details = {"child": c.to_dict(), "parent": p.to_dict()}
    ci, pi = c.invalid_rate, p.invalid_rate
    if ci is not None and pi is not None and ci - pi > max_invalid_increase + _EPS:
        out.append(Veto("invalid_actions",
                        f"invalid-action rate {ci:.1%} vs parent {pi:.1%} (+{ci - pi:.1%} > {max_invalid_increase:.1%})",
                        details))
    cl, pl = c.loop_rate, p.loop_rate
    if cl is not None and pl is not None and cl - pl > max_loop_increase + _EPS:
        out.append(Veto("loops",
                        f"loop rate {cl:.1%} vs parent {pl:.1%} (+{cl - pl:.1%} > {max_loop_increase:.1%})",
                        details))
    return out


# =================================================================================================
# Helpers for callers holding episodes
# =================================================================================================


def missions(episodes: Iterable[Any]) -> list[str]:
    """Distinct non-empty ``mission`` strings of episodes, in first-seen order."""
    out: list[str] = []
    for ep in episodes:
        m = _get(ep, "mission")
        if m and m not in out:
            out.append(str(m))
    return out


def observations(episodes: Iterable[Any]) -> list[str]:
    """Every trajectory step's ``observation`` text of the episodes, in order."""
    return [str(_get(t, "observation") or "") for ep in episodes for t in (_get(ep, "trajectory") or [])]


# =================================================================================================
# All together
# =================================================================================================


def validity(
    *,
    edit_text: str | None = None,
    parent_text: str = "",
    train_missions: Iterable[str] | None = None,
    heldout_missions: Iterable[str] | None = None,
    train_observations: Iterable[str] | None = None,
    train_diff: float | None = None,
    heldout_diff: float | None = None,
    min_train_gain: float = 0.1,
    gap_tolerance: float = 0.0,
    backtest_child: Mapping[Any, float] | None = None,
    backtest_best: Mapping[Any, float] | None = None,
    backtest_tolerance: float = 0.0,
    backtest_min_pairs: int = 1,
    child_episodes: Iterable[Any] | None = None,
    parent_episodes: Iterable[Any] | None = None,
    max_invalid_increase: float = 0.1,
    max_loop_increase: float = 0.2,
) -> ValidityReport:
    """Run every check whose inputs are given and collect the vetoes.

    * leak: ``edit_text`` with ``train_missions`` and ``heldout_missions`` (and optionally
      ``train_observations``); ``parent_text`` is the parent prompt's text;
    * generalization gap: ``train_diff`` and ``heldout_diff``;
    * backtest: ``backtest_child`` and ``backtest_best`` (per-seed scores on earlier seeds);
    * behaviour: ``child_episodes`` and ``parent_episodes``.

    ``report.checks`` names the checks that ran, in this order.
    """
    rep = ValidityReport()
    if edit_text is not None and train_missions is not None and heldout_missions is not None:
        rep.checks.append("leak")
        v = leak_check(edit_text, parent_text, train_missions, heldout_missions, train_observations)
        if v:
            rep.vetoes.append(v)
    if train_diff is not None and heldout_diff is not None:
        rep.checks.append("generalization_gap")
        v = generalization_gap(train_diff, heldout_diff, min_train_gain=min_train_gain, tolerance=gap_tolerance)
        if v:
            rep.vetoes.append(v)
    if backtest_child is not None and backtest_best is not None:
        rep.checks.append("backtest")
        rep.backtest = backtest_result(backtest_child, backtest_best)
        v = backtest(backtest_child, backtest_best, tolerance=backtest_tolerance, min_pairs=backtest_min_pairs)
        if v:
            rep.vetoes.append(v)
    if child_episodes is not None and parent_episodes is not None:
        rep.checks.append("behaviour")
        rep.vetoes.extend(behaviour_checks(list(child_episodes), list(parent_episodes),
                                           max_invalid_increase=max_invalid_increase,
                                           max_loop_increase=max_loop_increase))
    return rep
