"""More test seeds for a finished run's best prompts: play them on the test seeds after the ones the run
played (never seen by the run: it selected on train and validation seeds only), join them with the run's own
test episodes, and compare with the run's initial prompts on the same seeds (paired sign test).

The initial prompts' episodes come from the run itself and from ``--pair`` runs (other runs whose test split
played prompts with the same fingerprint, the same agent settings and model); seeds neither covers are
played here. The best's compliance with its induced rule is computed on every joined episode.

    python benchmarks/more_test_seeds.py --run results/reference/main-job --episodes 90 \\
        --pair results/reference/goto-fold --out results/reference/main-job-test100

Prints as its last line one JSON object: n, successes, rate and 95% interval of the best and the initial,
the paired test, compliance; the same is written to ``<out>/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def test_episodes(run: Path, key: str) -> dict[int, dict]:
    """seed -> episode (result dict) of ``key`` on the test split of a run folder."""
    from promptevo.evaluation.store import iter_records

    out: dict[int, dict] = {}
    for name in ("episodes.jsonl", "episodes.jsonl.gz"):
        path = run / name
        if path.exists():
            for rec in iter_records(path):
                res = rec.get("result") or {}
                if rec.get("key") == key and rec.get("split") == "test" and not res.get("error"):
                    out[int(rec["seed"])] = res
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a finished optimize run folder")
    p.add_argument("--episodes", type=int, required=True, help="test seeds to add after the run's own")
    p.add_argument("--pair", action="append", default=[], help="another run folder with the initial's test episodes")
    p.add_argument("--out", required=True, help="folder for the new episodes and summary.json")
    a = p.parse_args(argv)

    from promptevo.api import evaluate
    from promptevo.evaluation.statistics import paired_test, wilson_interval
    from promptevo.optim.game_adapter import rule_compliance
    from promptevo.optim.state import induced_rule, load_checkpoint
    from promptevo.segments import PromptSet
    from promptevo.tasks import load_task

    run, out = Path(a.run), Path(a.out)
    report = json.loads((run / "report.json").read_text())
    state = load_checkpoint(run)
    cfg = state.config
    best_id = report["best_id"]
    best = PromptSet.load(run / "best.json")
    rows = {r["name"].split(" ")[0]: r for r in report["rows"]}
    init_key, best_key = rows["initial"]["fingerprint"], rows["best"]["fingerprint"]
    task = load_task(cfg.task)
    own = len(report["test_split"]["seeds"])
    settings = dict(agent=cfg.agent, model=cfg.model, api_base=cfg.api_base, split="test", temperature=cfg.temperature,
                    max_tokens=cfg.agent_max_tokens, max_steps=cfg.max_steps, results_dir=out.parent, resume=True,
                    **cfg.agent_options)
    evaluate(task, prompts=best, seed_offset=own, episodes=a.episodes, run_name=out.name, **settings)
    new = {int(r["seed"]): r for _, _, r in _records(out / "episodes.jsonl")}
    best_eps = {**test_episodes(run, best_key), **new}
    init_eps = test_episodes(run, init_key)
    for other in a.pair:
        for s, r in test_episodes(Path(other), init_key).items():
            init_eps.setdefault(s, r)
    missing = sorted(set(best_eps) - set(init_eps))
    if missing:  # the initial on the seeds no run covers, played here
        initial = next(PromptSet.from_dict(c.prompts) for c in state.candidates.values() if c.fingerprint == init_key)
        order = task.seed_list("test")
        for s in missing:
            evaluate(task, prompts=initial, seed_offset=order.index(s), episodes=1, run_name=out.name + "-initial",
                     **settings)
        for _, _, r in _records(out.parent / (out.name + "-initial") / "episodes.jsonl"):
            init_eps.setdefault(int(r["seed"]), r)

    def row(eps: dict[int, dict]) -> dict:
        n, k = len(eps), sum(bool(r["success"]) for r in eps.values())
        lo, hi = wilson_interval(k, n)
        return {"n": n, "successes": k, "rate": round(k / n, 4) if n else None, "ci95": [round(lo, 4), round(hi, 4)]}

    test = paired_test({s: float(bool(r["success"])) for s, r in best_eps.items()},
                       {s: float(bool(r["success"])) for s, r in init_eps.items()}, test="sign", alternative="greater")
    rule = induced_rule(state.candidates, best_id)
    comp = rule_compliance(task, rule[1], [best_eps[s] for s in sorted(best_eps)]) if rule else None
    summary = {
        "run": str(run), "task": task.name, "best": best_id, "best_fingerprint": best_key,
        "initial_fingerprint": init_key, "seeds": [min(best_eps), max(best_eps)], "own_test_seeds": own,
        "added_test_seeds": len(new), "best_row": row(best_eps), "initial_row": row(init_eps),
        "paired": {"n": test.n, "wins": test.wins, "losses": test.losses, "ties": test.ties,
                   "p_value": test.p_value, "test": "exact sign, one-sided (best > initial)"},
        "initial_from": {"run": str(run), "pairs": a.pair, "played_here": len(missing)},
        "compliance": None if comp is None else {k: comp[k] for k in (
            "decisions", "compliance", "correct", "perception", "lookup", "table", "format", "kinds", "by_view")},
        "seconds_per_decision": round(sum(r.get("wall_s") or 0 for r in new.values())
                                      / max(1, sum(len(r.get("trajectory") or []) for r in new.values())), 2),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: summary[k] for k in ("best_row", "initial_row", "paired")} |
                     {"compliance": (summary["compliance"] or {}).get("compliance")}))
    return 0


def _records(path: Path):
    from promptevo.evaluation.store import EpisodeStore

    return EpisodeStore(path).items() if path.exists() else iter(())


if __name__ == "__main__":
    sys.exit(main())
