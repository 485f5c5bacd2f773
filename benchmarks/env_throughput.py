"""Throughput of the BabyAI text env: steps/s with random valid actions, resets included.

Usage: python benchmarks/env_throughput.py [--steps N] [--goal GOAL ...] [--out PATH]
Prints one line per goal plus the overall rate (wall clock, and per CPU second of this process, which
is less sensitive to other load on the machine) and writes benchmarks/env_throughput.json. The
goal is 20,000 steps/s (wall clock).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

from promptevo.envs.babyai.env import ACTIONS, BABYAI_GOALS, make_babyai_env

GOAL_STEPS_PER_S = 20_000


def measure(goal: str, steps: int, seed: int = 0) -> dict:
    """Run ``steps`` random valid actions on ``goal``, resetting with fresh seeds when episodes end."""
    env = make_babyai_env(goal)
    rng = random.Random(seed)
    episode_seed = seed * 1_000_003
    env.reset(episode_seed)
    episodes = 1
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        result = env.step(ACTIONS[rng.randrange(len(ACTIONS))])
        if result.done:
            episode_seed += 1
            env.reset(episode_seed)
            episodes += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "goal": goal,
        "steps": steps,
        "episodes": episodes,
        "wall_s": wall,
        "cpu_s": cpu,
        "steps_per_s": steps / wall,
        "steps_per_cpu_s": steps / cpu if cpu > 0 else None,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000, help="steps per goal")
    parser.add_argument("--goal", action="append", choices=BABYAI_GOALS, help="goal(s); default: all")
    parser.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    args = parser.parse_args(argv)
    goals = args.goal or list(BABYAI_GOALS)
    rows = [measure(g, args.steps) for g in goals]
    total_steps = sum(r["steps"] for r in rows)
    total_wall = sum(r["wall_s"] for r in rows)
    overall = total_steps / total_wall
    overall_cpu = total_steps / max(sum(r["cpu_s"] for r in rows), 1e-9)
    for r in rows:
        print(f"{r['goal']:>18}: {r['steps_per_s']:>9,.0f} steps/s ({r['episodes']} episodes)")
    verdict = "OK" if overall >= GOAL_STEPS_PER_S else "BELOW GOAL"
    print(f"{'overall':>18}: {overall:>9,.0f} steps/s (goal {GOAL_STEPS_PER_S:,}) {verdict}")
    print(f"{'per CPU second':>18}: {overall_cpu:>9,.0f} steps/s (process time; robust to a busy machine)")
    report = {
        "benchmark": "babyai_text_env_random_valid_actions",
        "steps_per_s": overall,
        "steps_per_cpu_s": overall_cpu,
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cpu_count": os.cpu_count(),
        "goal_steps_per_s": GOAL_STEPS_PER_S,
        "meets_goal": overall >= GOAL_STEPS_PER_S,
        "per_goal": rows,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
