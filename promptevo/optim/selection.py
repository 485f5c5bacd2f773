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
* :func:`prune_keep` - scaffold pruning: a shorter prompt is kept when it is not significantly worse than
  the current best, the best prompt seen (the peak) and the initial prompt, so success cannot ratchet
  down over repeated prunes.
"""

from __future__ import annotations

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
