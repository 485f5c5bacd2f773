"""Scoring: pure functions over episode results (EpisodeResult objects or their dicts).

* :func:`wilson_interval` - 95% Wilson score interval for a success rate.
* :func:`summarize` - success rate + Wilson CI, BALROG progression % with its standard error
  (``100 * population std / sqrt(n)``, as BALROG reports it), mean return/steps, invalid-action and
  parse-failure rates, tokens, cost, LLM calls, errors. Episodes that ended on an LLM error are left
  out of every rate and mean (``n`` counts the completed episodes) and counted in ``errors``.
* :func:`summarize_by_task` and :func:`aggregate_tasks` - per task, and the BALROG-style overall
  number (mean of task percentages, SE = sqrt(sum se^2) / n_tasks).
* :func:`paired_diff` - challenger vs incumbent on the same seeds: mean difference, wins/losses/ties and
  the exact two-sided sign-test p-value (ties dropped).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n``; (0, 1) when n == 0."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n] (got {successes} of {n})")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def population_se(values: list[float]) -> float:
    """Population standard deviation / sqrt(n) (BALROG's 'standard error'); 0 for n < 1."""
    n = len(values)
    if n == 0:
        return 0.0
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / n) / math.sqrt(n)


def _get(r: Any, key: str, default: Any = None) -> Any:
    if isinstance(r, Mapping):
        if key == "return_":
            return r.get("return", r.get("return_", default))
        return r.get(key, default)
    return getattr(r, key, default)


def summarize(results: Iterable[Any]) -> dict[str, Any]:
    rs = list(results)
    ok = [r for r in rs if not _get(r, "error")]
    n = len(ok)
    succ = sum(bool(_get(r, "success")) for r in ok)
    prog = [float(_get(r, "progression", 0.0)) for r in ok]
    steps = sum(int(_get(r, "steps", 0)) for r in ok)
    lo, hi = wilson_interval(succ, n)
    ptok = sum(int(_get(r, "prompt_tokens", 0)) for r in rs)
    ctok = sum(int(_get(r, "completion_tokens", 0)) for r in rs)
    mean = (lambda xs: sum(xs) / len(xs) if xs else 0.0)  # noqa: E731
    return {
        "episodes": len(rs),
        "n": n,
        "successes": succ,
        "success_rate": succ / n if n else 0.0,
        "success_ci95": [lo, hi],
        "progression_pct": 100.0 * mean(prog),
        "progression_se": 100.0 * population_se(prog),
        "mean_return": mean([float(_get(r, "return_", 0.0)) for r in ok]),
        "mean_steps": steps / n if n else 0.0,
        "invalid_action_rate": sum(int(_get(r, "invalid_actions", 0)) for r in ok) / steps if steps else 0.0,
        "parse_failure_rate": sum(int(_get(r, "parse_failures", 0)) for r in ok) / steps if steps else 0.0,
        "prompt_tokens": ptok,
        "completion_tokens": ctok,
        "total_tokens": ptok + ctok,
        "cost": sum(float(_get(r, "cost", 0.0) or 0.0) for r in rs),
        "llm_calls": sum(int(_get(r, "llm_calls", 0)) for r in rs),
        "cached_calls": sum(int(_get(r, "cached_calls", 0) or 0) for r in rs),
        "errors": len(rs) - n,
        "mean_wall_s": mean([float(_get(r, "wall_s", 0.0)) for r in rs]),
        "env_stats": aggregate_env_stats([_get(r, "env_stats", None) or {} for r in ok]),
    }


def aggregate_env_stats(stats: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Totals and per-episode means of the envs' numeric statistics (booleans count as 0/1).

    Lists of booleans (e.g. MAPF's ``per_agent_success``) become a per-index rate; ``None`` values and
    text are skipped. An env without statistics gives ``{}``.
    """
    rows = [s for s in stats if s]
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    lists: dict[str, list[list[float]]] = {}
    for row in rows:
        for k, v in row.items():
            if isinstance(v, (bool, int, float)) and not (isinstance(v, float) and math.isnan(v)):
                totals[k] = totals.get(k, 0.0) + float(v)
                counts[k] = counts.get(k, 0) + 1
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (bool, int, float)) for x in v):
                lists.setdefault(k, []).append([float(x) for x in v])
    out: dict[str, Any] = {}
    for k in sorted(totals):
        out[k] = {"total": totals[k], "mean": totals[k] / counts[k], "n": counts[k]}
    for k, vals in sorted(lists.items()):
        width = max(len(v) for v in vals)
        out[k] = {
            "rate_by_index": [
                sum(v[i] for v in vals if i < len(v)) / max(1, sum(1 for v in vals if i < len(v)))
                for i in range(width)
            ],
            "n": len(vals),
        }
    return out


def summarize_by_task(results: Iterable[Any]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Any]] = {}
    for r in results:
        groups.setdefault(str(_get(r, "task", "")), []).append(r)
    return {t: summarize(rs) for t, rs in sorted(groups.items())}


def aggregate_tasks(per_task: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """BALROG-style overall score: mean of per-task progression %, SE = sqrt(sum se^2) / n_tasks."""
    k = len(per_task)
    if k == 0:
        return {"tasks": 0, "progression_pct": 0.0, "progression_se": 0.0}
    pct = sum(float(s["progression_pct"]) for s in per_task.values()) / k
    se = math.sqrt(sum(float(s["progression_se"]) ** 2 for s in per_task.values())) / k
    return {"tasks": k, "progression_pct": pct, "progression_se": se}


def sign_test_p(wins: int, losses: int, alternative: str = "two-sided") -> float:
    """Exact binomial sign-test p-value for ``wins`` vs ``losses`` (ties already dropped).

    ``alternative``: "two-sided", or "greater" (wins more likely than losses).
    """
    n = wins + losses
    if n == 0:
        return 1.0

    def tail_ge(k: int) -> float:  # P(X >= k), X ~ Bin(n, 1/2)
        return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n

    if alternative == "greater":
        return tail_ge(wins)
    if alternative != "two-sided":
        raise ValueError(f"alternative must be 'two-sided' or 'greater' (got {alternative!r})")
    k = max(wins, losses)
    return min(1.0, 2 * tail_ge(k))


def paired_diff(a_by_seed: Mapping[int, float], b_by_seed: Mapping[int, float]) -> dict[str, Any]:
    """Compare ``b`` (challenger) against ``a`` (incumbent) on the seeds both have.

    Returns n, mean_diff (mean of b - a), wins (b > a), losses, ties, p_value (two-sided exact sign
    test) and p_greater (one-sided: b better).
    """
    common = sorted(set(a_by_seed) & set(b_by_seed))
    diffs = [float(b_by_seed[s]) - float(a_by_seed[s]) for s in common]
    wins = sum(d > 0 for d in diffs)
    losses = sum(d < 0 for d in diffs)
    return {
        "n": len(diffs),
        "seeds": common,
        "mean_diff": sum(diffs) / len(diffs) if diffs else 0.0,
        "wins": wins,
        "losses": losses,
        "ties": len(diffs) - wins - losses,
        "p_value": sign_test_p(wins, losses),
        "p_greater": sign_test_p(wins, losses, "greater"),
    }


def by_seed(results: Iterable[Any], metric: str = "success") -> dict[int, float]:
    """``{seed: metric}`` for completed episodes (metric: success, progression, return)."""
    key = "return_" if metric == "return" else metric
    return {int(_get(r, "seed")): float(_get(r, key, 0.0)) for r in results if not _get(r, "error")}
