"""The ceiling of each task's induced rule: a program that follows it exactly (no LLM) on test seeds.

For each task with an expert, as the engine does it: the expert plays ``--episodes`` training seeds, the
``induce`` operator fits its table on the labelled states, the "no line names the mission's things" rule is
chosen by simulating the candidate explorers on ``--explore-episodes`` other training seeds
(:func:`promptevo.optim.reflect.follower.choose_explorer`), then the perfect follower plays ``--test``
test seeds once. The majority-action explorer that the table alone would use is played too, for
comparison. Prints a table and, as its last line, one JSON object ``{"<task>": {"n", "success"}, ...}``;
writes ``benchmarks/induce_ceiling.json``.

    python benchmarks/induce_ceiling.py [--tasks goto,pickup,...] [--test 100]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from promptevo.optim.propose.induce import induce
from promptevo.optim.reflect.expert import collect, states_of
from promptevo.optim.reflect.follower import Explorer, choose_explorer, play, success_rate
from promptevo.tasks import load_task, make_env

BABYAI = ["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"]


def ceiling(name: str, episodes: int, explore: int, test: int) -> dict:
    task = load_task(name)
    train = task.seed_list("train")
    t0 = time.perf_counter()
    ev = collect(task, [], train[-episodes:])
    if not ev.get("available"):
        return {"task": name, "expert": False, "note": ev.get("note")}
    ind = induce(states_of(ev))
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
                "success": round(success_rate(rows), 4),
                "majority_explorer": majority.describe() if majority else None,
                "majority_success": round(success_rate(base), 4), "seconds": round(time.perf_counter() - t0, 1)})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(BABYAI), help="comma separated (default: the five BabyAI tasks)")
    ap.add_argument("--episodes", type=int, default=30, help="expert-played training seeds the table is fitted on")
    ap.add_argument("--explore-episodes", type=int, default=30, help="training seeds the explorers are simulated on")
    ap.add_argument("--test", type=int, default=100, help="test seeds the follower plays")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    a = ap.parse_args()
    rows = [ceiling(n, a.episodes, a.explore_episodes, a.test) for n in a.tasks.split(",") if n]
    print(f"{'task':<20} {'n':>4} {'ceiling':>8} {'explorer':<40} {'majority explorer':>18}")
    for r in rows:
        if "success" not in r:
            print(f"{r['task']:<20} {'-':>4} {'-':>8} {r.get('note') or r.get('reason')}")
            continue
        print(f"{r['task']:<20} {r['n']:>4} {r['success']:>8.0%} {r['explorer']:<40} "
              f"{r['majority_success']:>8.0%} ({r['majority_explorer']})")
    Path(a.out).write_text(json.dumps({"episodes": a.episodes, "explore_episodes": a.explore_episodes,
                                       "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({r["task"]: {"n": r.get("n", 0), "success": r.get("success")} for r in rows}))


if __name__ == "__main__":
    main()
