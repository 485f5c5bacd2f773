"""The sequential validation gate: optional stopping does not inflate the false-promotion rate (a simulation
with a fixed seed, paired 0/1 outcomes as in the loop), and it saves seeds."""

from __future__ import annotations

import random

from promptevo.optim.selection import GATE_LOOKS, look_levels, look_sizes, promote, sequential_gate, spent_alpha


def _outcomes(rng: random.Random, n: int, base: float, effect: float) -> tuple[dict, dict]:
    """Paired per-seed success: shared seed difficulty, half of the outcomes prompt-specific (the loop's
    benchmark model)."""
    best, child = {}, {}
    for s in range(n):
        u = rng.random()
        best[s] = float((rng.random() if rng.random() < 0.5 else u) < base)
        child[s] = float((rng.random() if rng.random() < 0.5 else u) < base + effect)
    return child, best


def _run(child: dict, best: dict, n: int, alpha: float) -> tuple[bool, int]:
    seeds = list(range(n))
    sizes = look_sizes(n)
    levels = look_levels(alpha, [k / n for k in sizes])
    for k, m in enumerate(sizes):
        part = seeds[:m]
        decision, _ = sequential_gate({s: child[s] for s in part}, {s: best[s] for s in part}, seeds, k,
                                      levels=levels, max_score=1.0)
        if decision != "continue":
            return decision == "promote", m
    raise AssertionError("the last look always decides")


def test_levels_spend_alpha_and_grow():
    levels = look_levels(0.025)
    assert len(levels) == len(GATE_LOOKS) and all(a < b for a, b in zip(levels, levels[1:]))
    assert spent_alpha(0.025, 1.0) == 0.025 and spent_alpha(0.025, 0.25) < 0.001
    assert 0.02 < levels[-1] < 0.025  # the last look keeps most of alpha (the looks are correlated)
    assert look_sizes(150) == [38, 75, 113, 150] and look_sizes(3) == [1, 2, 3]


def test_optional_stopping_keeps_the_false_promotion_rate_at_alpha():
    rng = random.Random(20261204)
    alpha, n, runs = 0.05, 150, 1000
    false = sum(_run(*_outcomes(rng, n, 0.3, 0.0), n, alpha)[0] for _ in range(runs))
    rate = false / runs
    assert rate <= alpha + 2 * (alpha * (1 - alpha) / runs) ** 0.5, rate  # alpha plus two standard errors


def test_sequential_gate_finds_real_edits_with_fewer_seeds():
    rng = random.Random(7)
    alpha, n, runs = 0.05, 150, 300
    seq_found = fixed_found = 0
    seeds_used = []
    for _ in range(runs):
        child, best = _outcomes(rng, n, 0.3, 0.2)
        found, used = _run(child, best, n, alpha)
        seq_found += found
        seeds_used.append(used)
        fixed_found += promote(child, best, alpha=alpha).accepted
    assert seq_found >= fixed_found - 0.05 * runs  # about the same power as one test on every seed
    assert sum(seeds_used) / runs < 0.8 * n  # and it stops early
    null_used = [_run(*_outcomes(rng, n, 0.3, 0.0), n, alpha)[1] for _ in range(runs)]
    assert sum(null_used) / runs < 0.7 * n  # futility stops most edits without effect early
