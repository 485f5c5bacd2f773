"""Speed of MAPF-FrozenLake: instance generation (with the oracle plan) and env steps, per preset.

Run: ``python benchmarks/mapf_bench.py [--steps 1000] [--out benchmarks/mapf_bench.json]``.
Target: one generation + 1000 env steps (with a reset, i.e. a new generated instance, whenever an episode
ends) in < 1 s for every preset. Also reports how often the generator had to re-sample and which oracle
method solved the instances.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptevo.envs.mapf.env import (  # noqa: E402
    MAPF_PRESETS,
    MOVES,
    MAPFFrozenLakeEnv,
    format_joint_action,
    generate_instance,
    load_mapf_preset,
)

TARGET_S = 1.0


def bench_preset(name: str, steps: int, gen_seeds: int) -> dict:
    cfg = load_mapf_preset(name)
    # generation alone (includes the BFS check and the oracle plan)
    gen_times, tries, methods = [], [], Counter()
    for seed in range(gen_seeds):
        t0 = time.perf_counter()
        inst = generate_instance(cfg, seed)
        gen_times.append(time.perf_counter() - t0)
        tries.append(inst.tries)
        methods[inst.plan.method] += 1
    # one generation + `steps` env steps with cyclic pseudo-random joint actions
    env = MAPFFrozenLakeEnv(cfg)
    t0 = time.perf_counter()
    env.reset(0)
    resets, episode = 1, 0
    for k in range(steps):
        moves = [MOVES[(k * 7 + i * 3 + k // 5) % 5] for i in range(cfg.n_agents)]
        res = env.step(format_joint_action(moves))
        if res.done:
            episode += 1
            env.reset(episode)
            resets += 1
    total = time.perf_counter() - t0
    # steps alone (no resets inside the timed loop)
    env.reset(10_000)
    step_times = []
    for k in range(steps):
        if env.done:
            env.reset(10_000 + k)
        moves = [MOVES[(k + i) % 5] for i in range(cfg.n_agents)]
        s0 = time.perf_counter()
        env.step(format_joint_action(moves))
        step_times.append(time.perf_counter() - s0)
    return {
        "preset": name,
        "config": cfg.summary(),
        "generation_ms_mean": 1000 * statistics.mean(gen_times),
        "generation_ms_p99": 1000 * sorted(gen_times)[int(0.99 * (len(gen_times) - 1))],
        "generation_ms_max": 1000 * max(gen_times),
        "generation_tries_mean": statistics.mean(tries),
        "oracle_methods": dict(methods),
        "step_us_mean": 1e6 * statistics.mean(step_times),
        f"gen_plus_{steps}_steps_s": total,
        "resets_during_steps": resets,
        "meets_target": total < TARGET_S,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--gen-seeds", type=int, default=200)
    ap.add_argument("--out", default=str(Path(__file__).with_name("mapf_bench.json")))
    args = ap.parse_args(argv)
    rows = [bench_preset(p, args.steps, args.gen_seeds) for p in MAPF_PRESETS]
    report = {
        "benchmark": "mapf_frozenlake",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "steps": args.steps,
        "gen_seeds": args.gen_seeds,
        "target_s": TARGET_S,
        "presets": rows,
        "all_meet_target": all(r["meets_target"] for r in rows),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    key = f"gen_plus_{args.steps}_steps_s"
    print(f"{'preset':8} {'gen ms':>8} {'gen p99':>8} {'tries':>6} {'step us':>8} {'gen+steps s':>12}  ok")
    for r in rows:
        print(f"{r['preset']:8} {r['generation_ms_mean']:8.2f} {r['generation_ms_p99']:8.2f} "
              f"{r['generation_tries_mean']:6.2f} {r['step_us_mean']:8.1f} {r[key]:12.3f}  {r['meets_target']}")
    print(f"wrote {args.out}")
    return 0 if report["all_meet_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
