"""The keep / promote decisions (pure functions of per-seed scores)."""

from __future__ import annotations

import json

import pytest

from promptevo.optim.selection import (
    accept,
    gate_alpha,
    max_score_of,
    promote,
    prune_keep,
    race_check,
    race_schedule,
)


def test_accept_margin_rule():
    parent = {1: 0.0, 2: 0.5, 3: 1.0, 4: 0.0}
    better = {1: 1.0, 2: 0.5, 3: 1.0, 4: 0.5}
    v = accept(better, parent, "margin", 0.05)
    assert v.accepted and v.n == 4 and v.wins == 2 and v.ties == 2 and v.losses == 0
    assert v.mean_diff == pytest.approx(0.375) and v.p_value is None
    assert not accept(parent, parent, "margin", 0.0).accepted  # equal is not better
    assert not accept({1: 0.04}, {1: 0.0}, "margin", 0.05).accepted
    v = accept({1: 1.0, 9: 1.0}, {1: 0.0, 2: 0.0}, "margin", 0.0)  # only common seeds are paired
    assert v.n == 1 and v.accepted
    v = accept({5: 1.0}, {1: 0.0}, "margin", 0.0)
    assert not v.accepted and v.reason == "no paired seeds"
    assert json.dumps(v.to_dict())


@pytest.mark.parametrize("rule", ["sign", "wilcoxon", "bootstrap"])
def test_accept_with_a_paired_test(rule):
    parent = {s: 0.0 for s in range(8)}
    child = {s: 1.0 for s in range(8)}
    v = accept(child, parent, rule, 0.0, alpha=0.05)
    assert v.accepted and v.p_value < 0.05 and v.alpha == 0.05
    few = {s: (1.0 if s < 2 else 0.0) for s in range(8)}  # 2 wins, 6 ties
    assert not accept(few, parent, rule, 0.0).accepted
    with pytest.raises(ValueError):
        accept(child, parent, "vote", 0.0)


def test_sign_rule_p_values_are_exact():
    parent = {s: 0.0 for s in range(8)}
    assert accept({s: 1.0 for s in range(8)}, parent, "sign").p_value == pytest.approx(1 / 256)
    assert accept({s: (1.0 if s < 3 else 0.0) for s in range(8)}, parent, "sign").p_value == pytest.approx(1 / 8)
    worse = {s: -1.0 for s in range(8)}
    assert accept(worse, parent, "always", 0.0).accepted and not accept(worse, parent, "margin").accepted


def test_promote_is_a_real_test_at_the_corrected_level():
    best = {s: float(s % 2) for s in range(40)}
    lucky = {**best, 0: 1.0, 2: 1.0, 4: 1.0}  # 3 wins, 0 losses: p = 1/8
    assert not promote(lucky, best, alpha=0.05).accepted  # a margin-0 gate would have promoted it
    strong = {s: 1.0 for s in range(40)}  # 20 wins, 0 losses
    assert promote(strong, best, alpha=gate_alpha(0.05, 5)).accepted
    assert promote(lucky, best, rule="margin", margin=0.0).accepted  # the explicit margin rule
    with pytest.raises(ValueError):
        promote(strong, best, rule="always")
    assert gate_alpha(0.05, 5) == pytest.approx(0.01)
    assert gate_alpha(0.05, 5, "none") == 0.05 and gate_alpha(0.05, 0) == 0.05
    with pytest.raises(ValueError):
        gate_alpha(0.05, 5, "holm")


def test_race_schedule():
    assert race_schedule(16) == [4, 8, 16]
    assert race_schedule(10) == [3, 5, 10]
    assert race_schedule(6) == [6] and race_schedule(16, race=False) == [16]


def test_race_check_futility_is_exact_and_worse_children_stop():
    seeds = list(range(8))
    parent = {s: 1.0 if s < 6 else 0.0 for s in seeds}  # the parent already wins 6 of 8
    # margin rule: the child lost 4 of the first 4; even winning the other 4 it cannot beat the parent
    child = {s: 0.0 for s in range(4)}
    stop, why = race_check(child, parent, seeds, rule="margin", margin=0.0, alpha=0.05, race_alpha=0.01,
                           max_score=1.0)
    assert stop and "futile" in why
    # not futile while a best case exists
    ok = {0: 1.0, 1: 1.0}
    assert not race_check(ok, parent, seeds, rule="margin", margin=0.0, alpha=0.05, race_alpha=0.01,
                          max_score=1.0)[0]
    # without a known maximum there is no futility, only the significance rule
    bad = {s: 0.0 for s in range(6)}  # 6 losses of 6: p = 1/64
    stop, why = race_check(bad, parent, seeds, rule="margin", margin=0.0, alpha=0.05, race_alpha=0.05,
                           max_score=None)
    assert stop and "worse than its parent" in why
    assert not race_check(bad, parent, seeds, rule="always", margin=0.0, alpha=0.05, race_alpha=0.5,
                          max_score=1.0)[0]
    assert max_score_of("success") == 1.0 and max_score_of("return") is None


def test_prune_keep_compares_with_fixed_references_so_success_cannot_ratchet_down():
    seeds = range(40)
    initial = {s: 1.0 if s < 30 else 0.0 for s in seeds}  # 30/40
    best = dict(initial)
    slightly_worse = {s: 1.0 if s < 27 else 0.0 for s in seeds}  # 3 losses: not significant
    v = prune_keep(slightly_worse, best, references={"initial": initial, "peak": initial}, alpha=0.05)
    assert v.accepted and v.n == 40 and v.rule == "prune"
    # a second prune, compared with the lowered best alone, would again look fine; against the initial
    # prompt (the floor) it is significantly worse and is refused
    lower = {s: 1.0 if s < 24 else 0.0 for s in seeds}  # 3 losses vs slightly_worse, 6 vs initial
    assert prune_keep(lower, slightly_worse, references={}, alpha=0.05).accepted
    v2 = prune_keep(lower, slightly_worse, references={"initial": initial, "peak": initial}, alpha=0.05)
    assert not v2.accepted and "initial" in v2.reason
    v3 = prune_keep({1: 1.0}, {2: 1.0}, references={})
    assert not v3.accepted and v3.n == 0
