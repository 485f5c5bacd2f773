"""Keep / promote decisions: pure functions of per-seed scores (no I/O, no randomness).

* :func:`accept` - a child against its parent on the same training seeds (paired);
* :func:`promote` - the validation gate: an accepted child replaces the best prompt only if a paired test
  on the validation seeds says it is better at the level :func:`gate_alpha` gives (the run-wide ``alpha``
  split over the generations' gates, Bonferroni), or, with the ``margin`` rule, by an explicit margin;
* :func:`race_schedule` and :func:`race_check` - racing: children are played on growing batches of the
  training seeds; a child stops early when no outcome of its remaining seeds could get it accepted
  (futility: exact, it never changes a decision) or when it is significantly worse than its parent
  (the one-sided sign test at ``race_alpha``: the upper confidence bound of its paired difference is
  below 0);
* :func:`sequential_gate` - the validation gate in looks at fixed fractions of the validation seeds, with
  O'Brien-Fleming-type alpha spending (:func:`look_levels`, the union bound keeps the false-promotion
  rate at most alpha under this optional stopping) and non-binding futility stops;
* :func:`prune_keep` - scaffold pruning: a shorter prompt is kept when it is not significantly worse than
  the current best, the best prompt seen (the peak) and the initial prompt, so success cannot ratchet
  down over repeated prunes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from promptevo.evaluation.statistics import paired_test

Scores = Mapping[int, float]
TESTS = ("sign", "wilcoxon", "bootstrap")
_EPS = 1e-12


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    rule: str
    n: int
    mean_diff: float
    wins: int
    losses: int
    ties: int
    p_value: float | None
    alpha: float | None
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def _verdict(ok: bool, rule: str, t, alpha: float | None, reason: str) -> Verdict:
    return Verdict(accepted=ok, rule=rule, n=t.n, mean_diff=t.mean_diff, wins=t.wins, losses=t.losses,
                   ties=t.ties, p_value=t.p_value if rule in TESTS else None, alpha=alpha, reason=reason)


def accept(child: Scores, parent: Scores, rule: str = "margin", margin: float = 0.0, *,
           alpha: float = 0.05) -> Verdict:
    """Compare per-seed scores on the seeds both were played on.

    ``margin``: accepted when mean(child - parent) > margin. ``sign`` / ``wilcoxon`` / ``bootstrap``:
    when the one-sided paired test gives p < alpha and the mean difference is > max(margin, 0).
    ``always``: accepts anything (ablation studies). No common seed -> rejected.
    """
    test = rule if rule in TESTS else "sign"
    t = paired_test(child, parent, test=test, alternative="greater")
    if t.n == 0:
        return _verdict(False, rule, t, None, "no paired seeds")
    if rule == "always":
        return _verdict(True, rule, t, None, "always-accept")
    if rule == "margin":
        ok = t.mean_diff > margin + _EPS
        return _verdict(ok, rule, t, None, f"mean diff {t.mean_diff:+.3f} {'>' if ok else '<='} margin {margin:.3f}")
    if rule in TESTS:
        need = max(margin, 0.0)
        ok = t.p_value < alpha and t.mean_diff > need + _EPS
        return _verdict(ok, rule, t, alpha, f"{rule} test p={t.p_value:.3g} ({t.wins}W/{t.losses}L/{t.ties}T), mean "
                        f"diff {t.mean_diff:+.3f}" + ("" if ok else f"; needs p<{alpha:.3g} and mean diff>{need:g}"))
    raise ValueError(f"unknown rule {rule!r} (use margin, sign, wilcoxon, bootstrap or always)")


def gate_alpha(alpha: float, generations: int, correction: str = "bonferroni") -> float:
    """Level of one generation's promotion test: ``alpha`` split over ``generations`` gates (Bonferroni), so
    the chance that a run promotes any edit without effect stays <= ``alpha``."""
    if correction == "none":
        return alpha
    if correction != "bonferroni":
        raise ValueError(f"unknown correction {correction!r} (use bonferroni or none)")
    return alpha / max(1, generations)


def promote(child: Scores, best: Scores, *, rule: str = "sign", alpha: float = 0.05, margin: float = 0.0) -> Verdict:
    """The validation gate: the child replaces the best only if it beats it on the validation seeds."""
    if rule == "always":
        raise ValueError("promotion needs a real test (use sign, wilcoxon, bootstrap or margin)")
    return accept(child, best, rule, margin, alpha=alpha)


def race_schedule(n: int, race: bool = True) -> list[int]:
    """Cumulative batch sizes a child is played on: quarter, half, all of its ``n`` training seeds (only the
    full batch when racing is off or ``n`` is below 8)."""
    if not race or n < 8:
        return [n]
    sizes = sorted({max(1, math.ceil(n / 4)), max(1, math.ceil(n / 2)), n})
    return sizes


def race_check(child: Scores, parent: Scores, seeds: Sequence[int], *, rule: str, margin: float, alpha: float,
               race_alpha: float, max_score: float | None) -> tuple[bool, str]:
    """(stop, reason) for a child played on part of ``seeds`` (the parent has all of them).

    Futility (only with a known ``max_score``): even if the child scored ``max_score`` on every seed it has
    not played, :func:`accept` would reject it - stopping loses nothing. Elimination: the child is
    significantly worse than its parent on the seeds played so far (one-sided sign test p < race_alpha).
    """
    if rule == "always":
        return False, ""
    remaining = [s for s in seeds if s not in child and s in parent]
    if max_score is not None and remaining:
        best_case = dict(child)
        best_case.update({s: max(float(max_score), float(parent[s])) for s in remaining})
        if not accept(best_case, parent, rule, margin, alpha=alpha).accepted:
            return True, "futile: cannot be accepted whatever its remaining seeds give"
    worse = paired_test(child, parent, test="sign", alternative="less")
    if worse.n and worse.p_value < race_alpha:
        return True, (f"worse than its parent: {worse.losses}L/{worse.wins}W on {worse.n} seeds "
                      f"(sign test p={worse.p_value:.3g} < {race_alpha:g})")
    return False, ""


def prune_keep(child: Scores, best: Scores, *, references: Mapping[str, Scores], alpha: float = 0.05) -> Verdict:
    """Keep a pruned (shorter) prompt when it is not significantly worse (one-sided sign test at ``alpha``)
    than the current ``best`` nor any of the ``references`` (the initial prompt and the peak: the best
    validation score seen). Comparing against fixed references stops success from ratcheting down."""
    t = paired_test(child, best, test="sign", alternative="less")
    if t.n == 0:
        return _verdict(False, "prune", t, alpha, "no paired seeds")
    against = {"best": best, **references}
    for name, ref in against.items():
        r = paired_test(child, ref, test="sign", alternative="less")
        if r.n and r.p_value < alpha:
            return _verdict(False, "prune", t, alpha, f"significantly worse than the {name} prompt "
                            f"({r.losses}L/{r.wins}W, p={r.p_value:.3g} < {alpha:g})")
    return _verdict(True, "prune", t, alpha, f"not significantly worse than {', '.join(against)} "
                    f"(mean diff vs best {t.mean_diff:+.3f})")


def max_score_of(fitness: str) -> float | None:
    """The largest per-episode score of a fitness (None when unbounded, as returns can be)."""
    return 1.0 if fitness in ("success", "progress", "progression") else None


# -- a sequential validation gate ---------------------------------------------------------------------
#: fractions of the validation seeds at which the sequential gate looks (fixed in advance)
GATE_LOOKS = (0.25, 0.5, 0.75, 1.0)


def spent_alpha(alpha: float, t: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type alpha spending: the share of ``alpha`` spent by information time
    ``t`` in (0, 1] (``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``; all of it at t = 1, very little early)."""
    from scipy.stats import norm

    if t >= 1.0:
        return alpha
    return float(2.0 - 2.0 * norm.cdf(norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t)))


def look_levels(alpha: float, looks: Sequence[float] = GATE_LOOKS) -> list[float]:
    return list(_look_levels(float(alpha), tuple(float(t) for t in looks)))


@functools.lru_cache(maxsize=256)
def _look_levels(alpha: float, looks: tuple[float, ...]) -> tuple[float, ...]:
    """The nominal one-sided level of each look: group-sequential boundaries for the O'Brien-Fleming-type
    spending of :func:`spent_alpha`, computed for the normal approximation of the test statistic (looks
    at information times ``t_j`` are correlated as ``sqrt(t_i / t_j)``), so that the chance of crossing
    any boundary under no effect is ``alpha`` in all. ``benchmarks/selection.py`` measures the resulting
    false-promotion rate of the discrete sign test by simulation."""
    from scipy.optimize import brentq
    from scipy.stats import multivariate_normal, norm

    ts = list(looks)
    bounds: list[float] = []
    below = 1.0  # P(no boundary crossed so far)
    for k, t in enumerate(ts):
        target = spent_alpha(alpha, t) - (spent_alpha(alpha, ts[k - 1]) if k else 0.0)
        if k == 0:
            bounds.append(float(norm.ppf(1.0 - max(target, 1e-300))))
            below = 1.0 - target
            continue
        cov = [[math.sqrt(min(ts[i], ts[j]) / max(ts[i], ts[j])) for j in range(k + 1)] for i in range(k + 1)]
        mvn = multivariate_normal(mean=[0.0] * (k + 1), cov=cov, allow_singular=True)

        def crossing(c: float) -> float:
            return below - float(mvn.cdf([*bounds, c])) - target

        try:
            c = brentq(crossing, -1.0, 12.0, xtol=1e-6)
        except ValueError:  # numerical trouble: the union bound (conservative) for this look
            c = float(norm.ppf(1.0 - max(target, 1e-300)))
        bounds.append(c)
        below -= target
    return tuple(float(1.0 - norm.cdf(c)) for c in bounds)


def look_sizes(n: int, looks: Sequence[float] = GATE_LOOKS) -> list[int]:
    """Cumulative validation seeds at each look (distinct, ending with ``n``)."""
    return sorted({max(1, math.ceil(n * t)) for t in looks} | {n})


def sequential_gate(child: Scores, best: Scores, seeds: Sequence[int], look: int, *, levels: Sequence[float],
                    rule: str = "sign", max_score: float | None = None) -> tuple[str, Verdict]:
    """The decision at look ``look`` (0-based) of the sequential gate on the seeds played so far:
    ``("promote" | "reject" | "continue", verdict)``.

    Efficacy: the paired test at this look's level (:func:`look_levels`). Futility (non-binding: it can
    only lower the false-promotion rate): reject when the child is behind the best (mean difference < 0)
    from the first look on, not ahead (<= 0) from the second, or when even the best outcome on every seed
    not yet played could not pass the last look (exact, with a known ``max_score``).
    """
    last = look == len(levels) - 1
    v = promote(child, best, rule=rule, alpha=levels[look])
    if v.accepted:
        return "promote", v
    if last:
        return "reject", v
    if v.mean_diff < -_EPS or (look >= 1 and v.mean_diff <= _EPS):
        return "reject", Verdict(**{**v.to_dict(), "reason": f"futility at look {look + 1}: mean difference "
                                                              f"{v.mean_diff:+.3f} ({v.reason})"})
    remaining = [s for s in seeds if s not in child and s in best]
    if max_score is not None and remaining:
        best_case = dict(child)
        best_case.update({s: max(float(max_score), float(best[s])) for s in remaining})
        if not promote(best_case, best, rule=rule, alpha=levels[-1]).accepted:
            return "reject", Verdict(**{**v.to_dict(), "reason": "futility: cannot pass the last look whatever "
                                                                  "the remaining seeds give"})
    return "continue", v
