"""Scoring: Wilson interval, BALROG standard error, summaries, paired sign test."""

from __future__ import annotations

import math

import pytest

from promptevo.evaluation.rollout import EpisodeResult
from promptevo.evaluation.statistics import (
    aggregate_tasks,
    by_seed,
    paired_test,
    population_se,
    sign_test_p,
    summarize,
    summarize_by_task,
    wilson_interval,
)


def ep(seed: int, success: bool, task: str = "goto", **kw) -> EpisodeResult:
    base = dict(task=task, seed=seed, mission="m", success=success, progression=float(success),
                return_=0.5 if success else 0.0, steps=10, invalid_actions=1, prompt_tokens=100,
                completion_tokens=20, cost=0.01, llm_calls=10, wall_s=1.0)
    base.update(kw)
    return EpisodeResult(**base)


@pytest.mark.parametrize(
    "k,n,lo,hi",
    [(0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (8, 10, 0.4902, 0.9433), (10, 10, 0.7225, 1.0)],
)
def test_wilson_known_values(k, n, lo, hi):
    a, b = wilson_interval(k, n)
    assert a == pytest.approx(lo, abs=1e-4) and b == pytest.approx(hi, abs=1e-4)


def test_wilson_edge_cases():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_balrog_standard_error_matches_the_gpt4o_entry():
    # BALROG: GPT-4o 77.6 +- 3.7 on 125 episodes (97 successes), population SE
    values = [1.0] * 97 + [0.0] * 28
    assert 100 * population_se(values) == pytest.approx(3.73, abs=0.005)
    assert population_se([]) == 0.0


def test_summarize_counts_rates_and_leaves_errors_out():
    rs = [ep(0, True), ep(1, False), ep(2, True), ep(3, False, error="LLMError: boom", steps=2)]
    s = summarize(rs)
    assert (s["episodes"], s["n"], s["successes"], s["errors"]) == (4, 3, 2, 1)
    assert s["success_rate"] == pytest.approx(2 / 3)
    assert s["progression_pct"] == pytest.approx(200 / 3)
    assert s["progression_se"] == pytest.approx(100 * math.sqrt((2 / 3) * (1 / 3) / 3))
    assert s["success_ci95"] == list(wilson_interval(2, 3))
    assert s["mean_steps"] == 10 and s["invalid_action_rate"] == pytest.approx(0.1)
    assert s["prompt_tokens"] == 400 and s["total_tokens"] == 480 and s["llm_calls"] == 40
    assert s["cost"] == pytest.approx(0.04)
    assert s["mean_return"] == pytest.approx(1 / 3)
    assert summarize([ep(0, True)]) == summarize([ep(0, True).to_dict()])  # dicts work too


def test_summarize_empty():
    s = summarize([])
    assert s["n"] == 0 and s["success_rate"] == 0.0 and s["success_ci95"] == [0.0, 1.0]


def test_by_task_and_balrog_overall():
    rs = [ep(i, i < 5, "goto") for i in range(10)] + [ep(i, i < 2, "open") for i in range(10)]
    per = summarize_by_task(rs)
    assert list(per) == ["goto", "open"] and per["goto"]["success_rate"] == 0.5
    agg = aggregate_tasks(per)
    assert agg["progression_pct"] == pytest.approx(35.0)
    se = math.sqrt(per["goto"]["progression_se"] ** 2 + per["open"]["progression_se"] ** 2) / 2
    assert agg["progression_se"] == pytest.approx(se)


def test_sign_test_exact_values():
    assert sign_test_p(8, 0) == pytest.approx(2 / 256)
    assert sign_test_p(9, 1) == pytest.approx(2 * 11 / 1024)
    assert sign_test_p(5, 5) == 1.0
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(8, 0, "greater") == pytest.approx(1 / 256)
    assert sign_test_p(0, 3, "greater") == 1.0


def test_paired_test_on_common_seeds():
    a = {1: 0.0, 2: 1.0, 3: 0.0, 4: 0.0, 9: 1.0}
    b = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.0, 5: 1.0}
    d = paired_test(b, a, test="sign", alternative="two-sided")
    assert list(d.seeds) == [1, 2, 3, 4] and d.n == 4
    assert (d.wins, d.losses, d.ties) == (2, 0, 2)
    assert d.mean_diff == pytest.approx(0.5)
    assert d.p_value == pytest.approx(0.5)
    assert paired_test(b, a, test="sign", alternative="greater").p_value == pytest.approx(0.25)
    assert paired_test({}, {}).n == 0 and paired_test({}, {}).p_value == 1.0


def test_paired_wilcoxon_and_bootstrap():
    parent = {s: 0.2 for s in range(12)}
    better = {s: 0.2 + 0.05 * (1 + s % 3) for s in range(12)}
    for test in ("wilcoxon", "bootstrap"):
        assert paired_test(better, parent, test=test).p_value < 0.01
        assert paired_test(parent, better, test=test).p_value > 0.5
        assert paired_test(parent, parent, test=test).p_value == 1.0
    with pytest.raises(ValueError):
        paired_test(better, parent, test="vote")  # type: ignore[arg-type]


def test_by_seed_skips_errors():
    rs = [ep(1, True), ep(2, False), ep(3, True, error="x")]
    assert by_seed(rs) == {1: 1.0, 2: 0.0}
    assert by_seed(rs, "return") == {1: 0.5, 2: 0.0}


def test_env_stats_are_aggregated_into_the_summary():
    from promptevo.evaluation.statistics import aggregate_env_stats, summarize

    eps = [
        {"success": True, "steps": 5, "env_stats": {"collisions": 2, "hole_falls": 0, "timeout": False,
                                                    "per_agent_success": [True, True], "solver_method": "cbs",
                                                    "optimality_ratio": None}},
        {"success": False, "steps": 9, "env_stats": {"collisions": 1, "hole_falls": 1, "timeout": True,
                                                     "per_agent_success": [True, False]}},
    ]
    agg = summarize(eps)["env_stats"]
    assert agg["collisions"] == {"total": 3.0, "mean": 1.5, "n": 2}
    assert agg["timeout"]["total"] == 1.0 and agg["hole_falls"]["mean"] == 0.5
    assert agg["per_agent_success"] == {"rate_by_index": [1.0, 0.5], "n": 2}
    assert "solver_method" not in agg and "optimality_ratio" not in agg
    assert aggregate_env_stats([{}, {}]) == {}
