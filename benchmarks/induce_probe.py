"""What the ``induce`` operator finds on every shipped task, from expert-played episodes alone (no LLM).

For each task with an expert: the expert plays ``--episodes`` training seeds (outside the seeds a run's
evidence and acceptance draws start from), the states are labelled with its actions, and
:func:`promptevo.optim.propose.induce.induce` fits and measures a table. Prints one row per task (fitting,
held-out and left-out states, the table's root feature, held-out accuracy against the majority action,
whether a child would be proposed and why not) and writes ``benchmarks/induce_probe.json``.

    python benchmarks/induce_probe.py [--episodes 30] [--tasks goto,pickup] [--out benchmarks/induce_probe.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from promptevo.optim.propose.induce import induce
from promptevo.optim.propose.render_table import load_phrases, render
from promptevo.optim.reflect.expert import collect, states_of
from promptevo.tasks import list_tasks, load_task


def probe(name: str, episodes: int) -> dict:
    task = load_task(name)
    seeds = task.seed_list("train")[-episodes:]
    t0 = time.perf_counter()
    ev = collect(task, [], seeds)
    if not ev.get("available"):
        return {"task": name, "expert": False, "note": ev.get("note")}
    ind = induce(states_of(ev))
    row = {"task": name, "expert": True, "expert_states": ev["counts"]["expert_states"], **ind.to_dict(),
           "child": ind.useful, "seconds": round(time.perf_counter() - t0, 2), "problems": ev.get("problems")}
    if ind.table is not None:
        row["rule"], row["format"] = render(ind.table, load_phrases())
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--tasks", default="", help="comma-separated (default: every task)")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    a = ap.parse_args()
    names = [t for t in a.tasks.split(",") if t] or list_tasks()
    rows = [probe(n, a.episodes) for n in names]
    print(f"{'task':<20} {'states':>6} {'fit':>4} {'held':>4} {'left':>4}  {'root':<8} {'held-out acc':>12} "
          f"{'majority':>8}  child / why not")
    for r in rows:
        if not r.get("expert"):
            print(f"{r['task']:<20} {'-':>6}  {r['note']}")
            continue
        acc = f"{r['heldout_accuracy']:.0%}" if r["heldout_accuracy"] is not None else "-"
        maj = f"{r['majority_accuracy']:.0%}" if r["majority_accuracy"] is not None else "-"
        root = (r["table"] or {}).get("root", "-")
        print(f"{r['task']:<20} {r['expert_states']:>6} {r['fit_states']:>4} {r['heldout_states']:>4} "
              f"{r['left_out_states']:>4}  {root:<8} {acc:>12} {maj:>8}  {'yes' if r['child'] else r['reason']}")
    Path(a.out).write_text(json.dumps({"episodes": a.episodes, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(f"written: {a.out}")


if __name__ == "__main__":
    main()
