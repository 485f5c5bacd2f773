"""What the environment engineer writes, without a curriculum run: for each starting MAPF task, a stage's
failure report is built from episodes of a fixed policy (the seeded random agent, no LLM, the task's train
seeds and step limit), and the engineer (``propose_config``, the call a curriculum makes between stages) is
asked ``--calls`` times with different sampling seeds. Counted per call: whether the reply parsed, whether
the proposal was a valid configuration that differs from the current one (clipped to the bounds, at most
two knobs, solvable), else why the current configuration was kept; and the changes it made.

    python benchmarks/engineer_probe.py --out benchmarks/engineer_probe.json

Every LLM call goes to ``--model`` (default: the offline local model), so the figures are the model's, not
a test double's. A full curriculum comparison (``benchmarks/strategies.py --only engineer,fixed,mapf-plain``)
plays hundreds of agent episodes; this probe measures the engineer's part alone in minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="mapf-open,mapf-single,mapf-easy,mapf-hard",
                   help="comma-separated MAPF tasks whose configuration is the current one")
    p.add_argument("--episodes", type=int, default=8, help="random-agent episodes per failure report")
    p.add_argument("--calls", type=int, default=3, help="engineer calls per task (sampling seeds 0..calls-1)")
    p.add_argument("--model", default=None, help="engineer model (default: the local model)")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=None,
                   help="engineer sampling temperature (default: the optimizer's, as in a curriculum)")
    p.add_argument("--out", default="benchmarks/engineer_probe.json")
    a = p.parse_args(argv)

    from promptevo.agents.registry import agent_factory
    from promptevo.envs.mapf.failures import config_knobs, failure_report
    from promptevo.envs.mapf.family import mapf_config
    from promptevo.evaluation.rollout import run_episodes
    from promptevo.llm.gateway import Gateway
    from promptevo.llm.types import LLMConfig
    from promptevo.optim.config import OptimizeConfig
    from promptevo.optim.optimizer_lm import OptimizerLM
    from promptevo.optim.propose.engineer import propose_config
    from promptevo.tasks import load_task

    base = OptimizeConfig(task="mapf-open", model=a.model or LLMConfig.model)
    temperature = base.optimizer_temperature if a.temperature is None else a.temperature
    gw = Gateway(LLMConfig(model=base.model, max_tokens=a.max_tokens, temperature=temperature, cache_dir=None))
    gw.check()
    lm = OptimizerLM(gw, temperature=temperature, max_tokens=a.max_tokens)
    rows, outcomes = [], Counter()
    for name in [t.strip() for t in a.tasks.split(",") if t.strip()]:
        task = load_task(name)
        cfg = mapf_config(task.env)
        seeds = task.seed_list("train")[: a.episodes]
        eps = run_episodes(task, agent_factory("random", None), seeds, concurrency=1)
        report = failure_report(eps, cfg)
        for k in range(a.calls):
            t0 = time.perf_counter()
            new, info = propose_config(cfg, report, lm, seed=k, max_tokens=a.max_tokens,
                                       probe_seeds=task.seed_list("train")[:1] + task.seed_list("validation")[:1])
            differs = config_knobs(new) != config_knobs(cfg)
            outcome = ("valid, changed" if differs else "kept: " + (info.get("fallback") or "the engineer chose no change"))
            outcomes["valid_changed" if differs else "parse_failed" if info.get("error") and not info.get("requested")
                     else "kept"] += 1
            rows.append({"task": name, "call": k, "random_success": report["success_rate"],
                         "failure_causes": report["failure_causes"], "parsed": not (info.get("error") and not
                                                                                   info.get("requested")),
                         "requested": info.get("requested"), "changes": info.get("changes"),
                         "clamped": info.get("clamped"), "dropped": info.get("dropped"),
                         "outcome": outcome, "rationale": (info.get("rationale") or "")[:300],
                         "seconds": round(time.perf_counter() - t0, 1),
                         "completion_tokens": (info.get("usage") or {}).get("completion_tokens")})
            print(json.dumps({k2: rows[-1][k2] for k2 in ("task", "call", "outcome", "changes", "seconds")}),
                  flush=True)
    n = len(rows)
    out = {"model": base.model, "temperature": temperature, "max_tokens": a.max_tokens, "calls": n,
           "episodes_per_report": a.episodes, "parsed": sum(r["parsed"] for r in rows),
           "valid_and_changed": outcomes["valid_changed"], "kept": outcomes["kept"],
           "parse_failed": outcomes["parse_failed"],
           "fallbacks": dict(Counter(r["outcome"] for r in rows if r["outcome"] != "valid, changed")),
           "knobs_changed": dict(Counter(k for r in rows for k in (r["changes"] or {}))), "rows": rows}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("calls", "parsed", "valid_and_changed", "kept", "parse_failed",
                                          "knobs_changed")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
