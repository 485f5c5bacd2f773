"""How often does the loop promote an edit that does nothing, and how often does it find a real one?

Runs promptevo's real engine (``promptevo.optim.engine.Engine``: racing, acceptance, the validation gate)
many times with a simulated adapter - a test double, no LLM and no game - and prints:

(a) the false-promotion rate: runs in which ANY child was promoted although no child changes success
    (every generation proposes ``children`` edits without effect);
(b) the power: runs in which a child that truly adds +20 points of success (proposed in generation 1,
    beside null children) ends as the best prompt;
(c) the power for a +10-point edit;
(d) episodes per run (training + validation; the test split is the same for every procedure), mean and
    90th percentile, in the scenarios above and in one where one child per generation is harmful (-20
    points), as LLM edits often are.

Three procedures on the same simulated runs (same seeds, same outcomes):

* ``fixed-n``: every child on all its acceptance seeds, the validation gate on all validation seeds;
* ``racing``: children raced on growing batches, the gate on all validation seeds (the default until
  the sequential gate);
* ``sequential``: racing, and the validation gate in looks at 25/50/75/100% of the seeds with
  O'Brien-Fleming-type alpha spending and futility stops (``--gate sequential``, the default now).

The episode model (stated, because the figures depend on it): seed s has a difficulty u_s ~ U(0,1); a
prompt with success rate q succeeds on s when u_s < q (the same seeds are hard for every prompt), except
that with probability ``noise`` (default 0.5) the outcome of a (prompt, seed) pair is an independent
Bernoulli(q) draw instead (prompt-specific idiosyncrasy). The parent's rate is ``base`` (default 0.3).
``--noise 1`` is the hardest case: independent outcomes, no pairing benefit.

Usage: ``python benchmarks/selection.py [--runs 500] [--noise 0.5] [--base 0.3] [--jobs 2]``
Writes benchmarks/selection.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptevo.optim.adapter import Proposal, ProposalBatch  # noqa: E402
from promptevo.optim.config import OptimizeConfig  # noqa: E402
from promptevo.optim.engine import Engine  # noqa: E402
from promptevo.optim.selection import max_score_of  # noqa: E402
from promptevo.segments import Prompt, PromptSet, Segment  # noqa: E402
from promptevo.tasks import SeedRange, TaskConfig  # noqa: E402

OUT = Path(__file__).with_name("selection.json")


def _u(*parts: Any) -> float:
    h = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


def prompt_with(rate: float, tag: str) -> PromptSet:
    return PromptSet.of({"system": Prompt((Segment("rate", f"{rate:.6f}"), Segment("tag", tag)))})


def rate_of(ps: PromptSet) -> float:
    return float(ps.module("system").get("rate") or 0.0)


class SimulatedAdapter:
    """Test double adapter (see the module docstring): ``kind`` null (every edit has no effect), power (one
    +0.2 edit in generation 1, the others null) or harmful (one -0.2 edit per generation, the others null)."""

    max_score = max_score_of("success")

    def __init__(self, run_seed: int, noise: float, kind: str):
        self.run_seed, self.noise, self.kind = run_seed, noise, kind
        self.effect = {"power": 0.2, "power10": 0.1}.get(kind, 0.0)
        self.episodes = 0

    def evaluate(self, prompts, seeds, *, agent=None, on_episode=None):
        q = rate_of(prompts) if prompts is not None and prompts.modules else 0.0
        fp = prompts.fingerprint() if prompts is not None else str(agent)
        out = []
        for s in seeds:
            if _u("noise", self.run_seed, fp, s) < self.noise:
                win = _u("draw", self.run_seed, fp, s) < q
            else:
                win = _u("difficulty", self.run_seed, s) < q
            ep = {"seed": int(s), "success": bool(win), "return": float(win), "steps": 1, "error": None}
            self.episodes += 1
            if on_episode is not None:
                on_episode(ep)
            out.append(ep)
        return out

    def score(self, ep: dict) -> float:
        return float(bool(ep.get("success")))

    def make_reflective_dataset(self, parent, episodes, *, generation, history, **_):
        return {"signatures": [], "usage": {}}

    def propose(self, parent, evidence, ctx):
        q = rate_of(parent)
        props = []
        for i in range(ctx.n):
            effect = 0.0
            if i == 0 and self.effect and ctx.generation == 1:
                effect = self.effect
            elif i == 0 and self.kind == "harmful":
                effect = -0.2
            rate = min(1.0, max(0.0, q + effect))
            child = prompt_with(rate, f"g{ctx.generation}c{i}{'T' if effect > 0 else 'H' if effect < 0 else 'N'}")
            props.append(Proposal(child, "mutate", {"op": "rewrite", "module": "system", "segment": "tag",
                                                    "text": child.module("system").get("tag")}))
        return ProposalBatch(props)


PROCEDURES = {"fixed-n": {"race": False, "gate": "fixed"}, "racing": {"race": True, "gate": "fixed"},
              "sequential": {"race": True, "gate": "sequential"}}


def one_run(args: tuple) -> dict:
    run_seed, kind, proc, noise, base, overrides, root = args
    cfg = OptimizeConfig(task="sim", generations=overrides.get("generations", 4),
                         results_dir=root, run=f"{kind}-{proc}-{run_seed}", baseline=None, **PROCEDURES[proc],
                         **{k: v for k, v in overrides.items() if k != "generations"})
    task = TaskConfig(name="sim", family="babyai", env={"goal": "goto"}, train_seeds=SeedRange(start=0, count=5000),
                      validation_seeds=SeedRange(start=50000, count=1000), test_seeds=SeedRange(start=100000, count=1000))
    adapter = SimulatedAdapter(run_seed, noise, kind)
    eng = Engine(cfg, adapter, task=task, usage=lambda: {"calls": 0, "tokens": 0, "cost": 0.0},
                 emitter=lambda *a, **k: None)
    res = eng.run(prompt_with(base, "initial"))
    st = eng.state
    promoted = [c for c in st.candidates.values() if c.status == "promoted"]
    train_eps = sum(len(c.train) for c in st.candidates.values())
    best_rate = rate_of(st.best.prompt_set())
    shutil.rmtree(eng.run_dir, ignore_errors=True)
    return {"seed": run_seed, "kind": kind, "proc": proc, "promoted": len(promoted),
            "found": best_rate > base + 1e-9, "train_episodes": train_eps,
            "validation_episodes": sum(len(c.validation) for c in st.candidates.values()),
            "saved": sum(g.episodes_saved for g in st.generations), "stop": res.stop_reason}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--noise", type=float, default=0.5)
    ap.add_argument("--base", type=float, default=0.3)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default=str(OUT))
    ns = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="promptevo-sim-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    defaults = OptimizeConfig(task="sim")
    overrides: dict[str, Any] = {}
    t0 = time.time()
    jobs = [(s, kind, proc, ns.noise, ns.base, overrides, root)
            for kind in ("null", "power", "power10", "harmful") for proc in PROCEDURES for s in range(ns.runs)]
    with ProcessPoolExecutor(max_workers=ns.jobs) as ex:
        rows = list(ex.map(one_run, jobs, chunksize=20))
    shutil.rmtree(root, ignore_errors=True)
    summary: dict[str, Any] = {
        "runs_per_cell": ns.runs, "noise": ns.noise, "base_rate": ns.base, "true_effects": [0.2, 0.1],
        "defaults": {k: getattr(defaults, k) for k in ("generations", "children", "episodes", "validation_episodes",
                                                       "accept_rule", "accept_margin", "promote_rule", "alpha",
                                                       "correction", "race_alpha")},
        "wall_s": round(time.time() - t0, 1), "cells": {},
    }

    def p90(xs: list[float]) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(0.9 * len(xs)))]

    for proc in PROCEDURES:
        by = {k: [r for r in rows if r["kind"] == k and r["proc"] == proc] for k in ("null", "power", "power10", "harmful")}
        eps = {k: [r["train_episodes"] + r["validation_episodes"] for r in rs] for k, rs in by.items()}
        summary["cells"][proc] = {
            "false_promotion_rate": sum(r["promoted"] > 0 for r in by["null"]) / len(by["null"]),
            "false_promotion_rate_harmful": sum(r["promoted"] > 0 for r in by["harmful"]) / len(by["harmful"]),
            "power_20": sum(r["found"] for r in by["power"]) / len(by["power"]),
            "power_10": sum(r["found"] for r in by["power10"]) / len(by["power10"]),
            "mean_episodes": {k: sum(v) / len(v) for k, v in eps.items()},
            "p90_episodes": {k: p90(v) for k, v in eps.items()},
        }
    base_cells = summary["cells"]["racing"]
    for proc, c in summary["cells"].items():
        c["episodes_vs_racing"] = {k: 1 - c["mean_episodes"][k] / base_cells["mean_episodes"][k]
                                   for k in c["mean_episodes"]}
    Path(ns.out).write_text(json.dumps(summary, indent=2) + "\n")
    a = summary["defaults"]["alpha"]
    print(f"{ns.runs} simulated runs per cell, settings {summary['defaults']}")
    print(f"episode model: base success {ns.base}, prompt-specific noise {ns.noise}; true edits +0.20 and +0.10")
    for name, c in summary["cells"].items():
        me, pe, sv = c["mean_episodes"], c["p90_episodes"], c["episodes_vs_racing"]
        print(f"{name:>10}: false promotion {c['false_promotion_rate']:.3f} (alpha {a}: "
              f"{'OK' if c['false_promotion_rate'] <= a else 'ABOVE ALPHA'}; harmful {c['false_promotion_rate_harmful']:.3f})"
              f" | power +20 {c['power_20']:.3f}, +10 {c['power_10']:.3f} | episodes per run mean (p90): "
              + ", ".join(f"{k} {me[k]:.0f} ({pe[k]:.0f})" for k in me)
              + " | vs racing: " + ", ".join(f"{k} {v:+.1%}" for k, v in sv.items()))
    print(f"({summary['wall_s']:.0f} s)")
    return summary


if __name__ == "__main__":
    main()
