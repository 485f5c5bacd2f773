"""Statistics: pure functions over episode results (EpisodeResult objects or their dicts).

* :func:`wilson_interval` - the Wilson score interval of a success rate (scipy's ``binomtest``);
* :func:`summarize` - success rate + Wilson CI, BALROG progression % with its standard error
  (``100 * population std / sqrt(n)``, as BALROG reports it), mean return/steps, invalid-action and
  parse-failure rates, tokens, cost, LLM calls, errors. Episodes that ended on an LLM error are left
  out of every rate and mean (``n`` counts the completed episodes) and counted in ``errors``;
* :func:`summarize_by_task` and :func:`aggregate_tasks` - per task, and the BALROG-style overall number;
* :func:`paired_test` - a challenger against an incumbent on the seeds both played: mean difference,
  wins/losses/ties and the p-value of the exact sign test, the Wilcoxon signed-rank test or a paired
  bootstrap, one- or two-sided;
* :func:`summarize_records` - a table row from the compact per-seed records an optimization keeps.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Literal, Mapping

import numpy as np
from scipy import stats as _st

PairedTestName = Literal["sign", "wilcoxon", "bootstrap"]
Alternative = Literal["greater", "two-sided", "less"]
_EPS = 1e-12


def wilson_interval(successes: int | float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for ``successes`` out of ``n`` (``z`` = 1.96: 95%); (0, 1) when n == 0."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, n] (got {successes} of {n})")
    k = int(round(float(successes)))
    confidence = float(_st.norm.cdf(z) * 2 - 1)
    ci = _st.binomtest(k, int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return (max(0.0, float(ci.low)), min(1.0, float(ci.high)))


def sign_test_p(wins: int, losses: int, alternative: Alternative = "two-sided") -> float:
    """Exact binomial sign-test p-value for ``wins`` vs ``losses`` (ties already dropped).

    ``alternative``: "two-sided", "greater" (wins more likely than losses) or "less".
    """
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less' (got {alternative!r})")
    n = wins + losses
    if n == 0:
        return 1.0
    return float(_st.binomtest(int(wins), int(n), 0.5, alternative=alternative).pvalue)


@dataclass(frozen=True)
class PairedTest:
    """A challenger against an incumbent on common seeds (differences are challenger - incumbent)."""

    test: str
    alternative: str
    n: int
    mean_diff: float
    wins: int
    losses: int
    ties: int
    p_value: float
    seeds: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        return d


def paired_test(challenger: Mapping[int, float], incumbent: Mapping[int, float], *,
                test: PairedTestName = "sign", alternative: Alternative = "greater",
                n_boot: int = 4000, rng_seed: int = 0) -> PairedTest:
    """Paired comparison on the seeds both were played on.

    * ``sign``: exact binomial test on wins vs losses (ties dropped); for 0/1 outcomes this is the exact
      McNemar test;
    * ``wilcoxon``: Wilcoxon signed-rank test on the non-zero differences (exact for small n);
    * ``bootstrap``: the share of ``n_boot`` resampled mean differences on the wrong side of 0 (one-sided;
      twice the smaller share for two-sided). Approximate: with few seeds it is anti-conservative (3 wins
      and 5 ties of 8 give p ~ 0.02 where the exact sign test gives 0.125); prefer sign or wilcoxon there.

    No common seed, or no non-zero difference, gives p = 1.
    """
    common = sorted(set(challenger) & set(incumbent))
    diffs = np.array([float(challenger[s]) - float(incumbent[s]) for s in common], dtype=float)
    n = len(diffs)
    wins = int((diffs > _EPS).sum())
    losses = int((diffs < -_EPS).sum())
    mean = float(diffs.mean()) if n else 0.0
    nonzero = diffs[np.abs(diffs) > _EPS]
    if test == "sign":
        p = sign_test_p(wins, losses, alternative)
    elif test == "wilcoxon":
        if len(nonzero) == 0:
            p = 1.0
        else:
            p = float(_st.wilcoxon(nonzero, alternative=alternative, zero_method="wilcox").pvalue)
    elif test == "bootstrap":
        if len(nonzero) == 0:
            p = 1.0
        else:
            rng = np.random.default_rng(rng_seed)
            means = diffs[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
            below = float((means <= 0).mean())
            above = float((means >= 0).mean())
            p = {"greater": below, "less": above, "two-sided": min(1.0, 2 * min(below, above))}[alternative]
    else:
        raise ValueError(f"unknown paired test {test!r} (use sign, wilcoxon or bootstrap)")
    return PairedTest(test=test, alternative=alternative, n=n, mean_diff=mean, wins=wins, losses=losses,
                      ties=n - wins - losses, p_value=min(1.0, max(0.0, p)), seeds=tuple(int(s) for s in common))


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


def call_cost(results: Iterable[Any]) -> dict[str, Any]:
    """What one agent LLM call costs over played episodes (one call per decision for naive and robust-cot,
    two for two-stage): tokens per call, and seconds per call over the calls not answered from the cache
    (the episodes' wall time spent on them; None when every call was cached)."""
    rs = [r for r in results if not _get(r, "error")]
    calls = sum(int(_get(r, "llm_calls", 0) or 0) for r in rs)
    cached = sum(int(_get(r, "cached_calls", 0) or 0) for r in rs)
    tokens = sum(int(_get(r, "prompt_tokens", 0) or 0) + int(_get(r, "completion_tokens", 0) or 0) for r in rs)
    wall = sum(float(_get(r, "wall_s", 0.0) or 0.0) for r in rs)
    return {"episodes": len(rs), "calls": calls, "cached_calls": cached,
            "tokens_per_call": round(tokens / calls, 1) if calls else None,
            "seconds_per_call": round(wall / (calls - cached), 3) if calls > cached else None}


#: the most a promoted prompt may cost per call, as a multiple of the initial prompt's seconds per call
COST_LIMIT = 1.5


def cost_comparison(costs: Mapping[str, Mapping[str, Any]], limit: float = COST_LIMIT) -> dict[str, Any]:
    """``costs`` ("initial", "best": :func:`call_cost` rows on the same seeds) with the best's seconds per call
    as a multiple of the initial's, and whether it stays within ``limit``."""
    out: dict[str, Any] = {k: dict(v) for k, v in costs.items()}
    a = (costs.get("initial") or {}).get("seconds_per_call")
    b = (costs.get("best") or {}).get("seconds_per_call")
    ratio = round(b / a, 3) if a and b is not None else None
    out["seconds_ratio"] = ratio
    out["limit"] = limit
    out["within_limit"] = None if ratio is None else ratio <= limit
    return out


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


def by_seed(results: Iterable[Any], metric: str = "success") -> dict[int, float]:
    """``{seed: metric}`` for completed episodes (metric: success, progression, return)."""
    key = "return_" if metric == "return" else metric
    return {int(_get(r, "seed")): float(_get(r, key, 0.0)) for r in results if not _get(r, "error")}


def summarize_records(records: Mapping[Any, Mapping[str, Any]]) -> dict[str, Any]:
    """Table row from compact per-seed records ``{seed: {"success", "return", "progression", "progress",
    "tokens", "cost"}}``: n, successes, success rate with its 95% Wilson interval, means and totals."""
    n = len(records)
    succ = sum(1 for v in records.values() if v.get("success"))
    lo, hi = wilson_interval(succ, n)

    def mean(k: str) -> float:
        return (sum(float(v.get(k) or 0.0) for v in records.values()) / n) if n else 0.0

    return {
        "n": n,
        "successes": succ,
        "success_rate": succ / n if n else 0.0,
        "ci95": [lo, hi],
        "mean_return": mean("return"),
        "mean_progression": mean("progression"),
        "mean_progress": mean("progress"),
        "tokens": int(sum(int(v.get("tokens") or 0) for v in records.values())),
        "cost": float(sum(float(v.get("cost") or 0.0) for v in records.values())),
    }
