"""The ceiling of each task's induced rule: a program that follows it exactly (no LLM) on test seeds.

For each task with an expert, as the engine does it: the expert plays ``--episodes`` training seeds, the
``induce`` operator fits its table on the labelled states, the "no line names the mission's things" rule is
chosen by simulating the candidate explorers on ``--explore-episodes`` other training seeds
(:func:`promptevo.optim.reflect.follower.choose_explorer`), then the perfect follower plays ``--test``
test seeds once. The majority-action explorer that the table alone would use is played too, for
comparison.

The *phased* rule (:mod:`promptevo.optim.propose.induce_phase`: what the agent carries at the root, one
table per phase over the current thing's line, obstacle rows) is fitted on the same expert states and
refined by dataset aggregation (:func:`promptevo.optim.reflect.follower.refine`: the follower plays
``--explore-episodes`` training seeds, the expert labels every state it meets, the table is fitted again,
``--rounds`` times); its explorer is chosen on those seeds too. Then the follower plays the same test
seeds once. *Compact*: the same with at most ``MAX_VALUES`` values per phase table and stateless explorers, as the
``compile-phase`` operator fits it (a table a small agent can read, no step counting).

Prints a table and, as its last line, one JSON object ``{"<task>": {"n", "success", "phased"}, ...}``;
writes ``benchmarks/induce_ceiling.json``.

    python benchmarks/induce_ceiling.py [--tasks goto,pickup,...] [--test 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from promptevo.optim.propose.induce import induce
from promptevo.optim.propose.compile_phase import MAX_VALUES
from promptevo.optim.propose.induce_phase import induce_phased
from promptevo.optim.reflect.expert import collect, states_of
from promptevo.optim.reflect.follower import Explorer, choose_explorer, play, refine, success_rate
from promptevo.evaluation.statistics import wilson_interval
from promptevo.tasks import load_task, make_env

BABYAI = ["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"]


def _interval(rows: list[dict]) -> list[float]:
    lo, hi = wilson_interval(sum(bool(r["success"]) for r in rows), len(rows))
    return [round(lo, 4), round(hi, 4)]


def _failures(rows: list[dict]) -> dict:
    """How the failed episodes end: ran out of steps, or ended early (an irreversible wrong action)."""
    failed = [r for r in rows if not r["success"]]
    long = max((r["steps"] for r in rows), default=0)
    return {"failed": len(failed), "out_of_steps": sum(r["steps"] >= long for r in failed),
            "ended_early": sum(r["steps"] < long for r in failed)}


def phased(task, states, actions: list[str], explore_seeds: list[int], seeds: list[int], rounds: int,
           max_values: int | None = None, stateless: bool = False) -> dict:
    """The phase-rooted rule, refined by dataset aggregation, played by the follower on ``seeds``
    (``max_values``: at most that many values per phase table, ``stateless``: explorers that do not count
    steps, as the compile-phase operator fits it)."""
    def fit(pool):
        ind = induce_phased(pool, max_values=max_values)
        return ind.table, ind.vocab

    first = induce_phased(states, max_values=max_values)
    ref = refine(task, fit, states, actions, explore_seeds, env_factory=make_env, rounds=rounds, stateless=stateless,
                 start=(first.table, first.vocab))
    rows = play(task, ref.table, ref.explorer, ref.vocab, seeds, env_factory=make_env)
    return {"table": ref.table.to_dict(), "heldout_accuracy": first.accuracy, "phases": first.phases,
            "notes": first.notes, "rounds": ref.rounds, "states": ref.states, "explorer": ref.explorer.describe(),
            "n": len(rows), "success": round(success_rate(rows), 4), "interval": _interval(rows),
            "failures": _failures(rows)}


def ceiling(name: str, episodes: int, explore: int, test: int, rounds: int) -> dict:
    task = load_task(name)
    train = task.seed_list("train")
    t0 = time.perf_counter()
    ev = collect(task, [], train[-episodes:])
    if not ev.get("available"):
        return {"task": name, "expert": False, "note": ev.get("note")}
    states = states_of(ev)
    ind = induce(states)
    row: dict = {"task": name, "expert": True, "table": ind.table.to_dict() if ind.table else None,
                 "heldout_accuracy": ind.accuracy, "child": ind.useful, "reason": ind.reason or None}
    if ind.table is None or ind.vocab is None:
        return row
    env = make_env(task)
    try:
        env.reset(train[0])
        actions = list(env.valid_actions)
    finally:
        env.close()
    explore_seeds = train[-(episodes + explore):-episodes]
    chosen, scores = choose_explorer(task, ind.table, ind.vocab, actions, explore_seeds, env_factory=make_env)
    seeds = task.seed_list("test")[:test]
    rows = play(task, ind.table, chosen, ind.vocab, seeds, env_factory=make_env)
    majority = Explorer(ind.table.none_action) if ind.table.none_action else None
    base = play(task, ind.table, majority, ind.vocab, seeds, env_factory=make_env)
    row.update({"explorer": chosen.describe(), "explorer_scores": scores, "n": len(rows),
                "success": round(success_rate(rows), 4), "interval": _interval(rows),
                "majority_explorer": majority.describe() if majority else None,
                "majority_success": round(success_rate(base), 4)})
    t1 = time.perf_counter()
    row["phased"] = phased(task, states, actions, explore_seeds, seeds, rounds)
    row["phased"]["seconds"] = round(time.perf_counter() - t1, 1)
    t1 = time.perf_counter()
    row["phased_compact"] = phased(task, states, actions, explore_seeds, seeds, rounds, MAX_VALUES, stateless=True)
    row["phased_compact"]["max_values"] = MAX_VALUES
    row["phased_compact"]["seconds"] = round(time.perf_counter() - t1, 1)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(BABYAI), help="comma separated (default: the five BabyAI tasks)")
    ap.add_argument("--episodes", type=int, default=30, help="expert-played training seeds the table is fitted on")
    ap.add_argument("--explore-episodes", type=int, default=60,
                    help="other training seeds the explorers are simulated on and the phased rule is refined on")
    ap.add_argument("--rounds", type=int, default=2, help="dataset-aggregation rounds of the phased rule")
    ap.add_argument("--test", type=int, default=100, help="test seeds the follower plays")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    a = ap.parse_args()
    rows = [ceiling(n, a.episodes, a.explore_episodes, a.test, a.rounds) for n in a.tasks.split(",") if n]
    print(f"{'task':<20} {'n':>4} {'flat':>6} {'phased':>7} {'95% CI (phased)':>16} {'compact':>8}  explorer (phased)")
    for r in rows:
        if "success" not in r:
            print(f"{r['task']:<20} {'-':>4} {'-':>6} {r.get('note') or r.get('reason')}")
            continue
        p = r["phased"]
        print(f"{r['task']:<20} {r['n']:>4} {r['success']:>6.0%} {p['success']:>7.0%} "
              f"{p['interval'][0]:>7.0%}-{p['interval'][1]:<7.0%} {r['phased_compact']['success']:>8.0%}  {p['explorer']}")
    Path(a.out).write_text(json.dumps({"episodes": a.episodes, "explore_episodes": a.explore_episodes,
                                       "rounds": a.rounds, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({r["task"]: {"n": r.get("n", 0), "success": r.get("success"),
                                  "phased": (r.get("phased") or {}).get("success"),
                                  "phased_compact": (r.get("phased_compact") or {}).get("success")} for r in rows}))


if __name__ == "__main__":
    main()
