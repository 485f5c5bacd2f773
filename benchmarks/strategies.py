"""Measured comparisons of the optional strategies against the plain loop, same model and budget.

Runs, one after another (each writes its own run folder under ``--out``):

* ``plain``      the plain loop (raw trajectories to the analyzer);
* ``cards``      the same with ``--evidence cards``;
* ``prune``      the same with ``--prune-at RATE`` (scaffold pruning);
* ``skills-src`` the plain loop on ``--skill-source`` with ``--skills LIB --backtest`` (fills the library);
* ``skills``     the main task with ``--skills LIB --backtest``;
* ``engineer`` / ``fixed``  ``promptevo curriculum`` on ``--mapf-task`` with ``--engineer llm`` / ``fixed``;
* ``mapf-plain`` the plain loop on ``--mapf-target``, as many generations as the two stages together;
* ``ray``        ``promptevo eval`` of the initial prompts with and without ``--ray`` (same seeds) and a
  check that the episodes are identical.

and prints one table (also written to ``<out>/strategies.md``; rows of earlier ``--only`` runs into the
same ``--out`` are kept): test success (initial -> best), optimizer tokens per
generation, prompt tokens of the best prompts, LLM calls and wall time. Every LLM call goes to the model
given with ``--model`` (default: the offline local model), so the figures are real, not a test double.

    python benchmarks/strategies.py --out results/strategies --only plain,cards
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ALL = ["plain", "cards", "prune", "ray", "engineer", "fixed", "mapf-plain", "skills-src", "skills"]


def run(cmd: list[str], log: Path) -> tuple[int, float]:
    t0 = time.time()
    with log.open("w") as f:
        f.write("$ " + shlex.join(cmd) + "\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    return rc, time.time() - t0


def opt_row(name: str, run_dir: Path, wall: float, rc: int) -> dict:
    rep_path = run_dir / "report.json"
    if not rep_path.exists():
        return {"name": name, "error": f"no report (exit {rc})", "wall_s": wall}
    rep = json.loads(rep_path.read_text())
    best = next(r for r in rep["rows"] if r["name"].startswith("best"))
    init = next(r for r in rep["rows"] if r["name"].startswith("initial"))
    s = rep.get("strategies", {})
    return {
        "name": name,
        "initial": f"{init['successes']}/{init['n']}",
        "best": f"{best['successes']}/{best['n']}",
        "best_id": rep["best_id"],
        "promoted": rep["promoted"],
        "opt_tokens_per_gen": round(s.get("mean_optimizer_tokens_per_generation", 0.0)),
        "prompt_tokens": f"{s.get('prompt_tokens', {}).get('initial', '?')} -> {s.get('prompt_tokens', {}).get('best', '?')}",
        "calls": rep["usage"].get("calls"),
        "tokens": rep["usage"].get("tokens"),
        "proposals": {k: sum(int(v.get(k, 0)) for v in (rep.get("operators") or {}).values())
                      for k in ("proposed", "screened_out", "stopped", "accepted", "promoted")},
        "analyzer_tokens_per_gen": round(sum(g.get("optimizer_tokens", {}).get("analyzer", 0)
                                             for g in s.get("generations", [])) / max(1, len(s.get("generations", [])))),
        "vetoed": len(s.get("vetoed", [])),
        "skill_children": len(s.get("skill_children", [])),
        "wall_s": round(wall),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/strategies")
    p.add_argument("--task", default="goto")
    p.add_argument("--agent", default="two-stage")
    p.add_argument("--init", default="plain")
    p.add_argument("--skill-source", default="pickup", help="task whose run fills the skill library")
    p.add_argument("--mapf-task", default="mapf-open")
    p.add_argument("--mapf-target", default="mapf-single")
    p.add_argument("--prune-at", default="0.5", help="success rate that starts pruning (0: from generation 1)")
    p.add_argument("--prune-init", default="guided", help="initialization of the pruning run (guided has scaffold)")
    p.add_argument("--prune-children", default="2")
    p.add_argument("--curriculum", default="--episodes 2 --validation-episodes 2 --test-episodes 2",
                   help="options appended to --common for the two curriculum runs")
    p.add_argument("--model", default=None, help="agent and optimizer model (default: the local model)")
    p.add_argument("--only", default=",".join(ALL), help="comma-separated subset of " + ",".join(ALL))
    p.add_argument("--common", default="--generations 1 --episodes 3 --evidence-episodes 2 --children 1 "
                   "--validation-episodes 3 --test-episodes 3 "
                   "--max-steps 8 --agent-max-tokens 48 --optimizer-max-tokens 1024 --baseline none "
                   "--concurrency 1 --quiet",
                   help="options shared by every optimize run")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    bad = [x for x in only if x not in ALL]
    if bad:
        p.error(f"unknown run(s) {bad}; choose from {ALL}")
    exe = [sys.executable, "-m", "promptevo"]
    model = ["--model", a.model] if a.model else []
    common = shlex.split(a.common) + model
    base = ["optimize", "--task", a.task, "--agent", a.agent, "--init", a.init, *common]
    lib = out / "skills.json"
    runs = {
        "plain": base + ["--results-dir", str(out), "--run", "plain"],
        "cards": base + ["--evidence", "cards", "--results-dir", str(out), "--run", "cards"],
        "prune": ["optimize", "--task", a.task, "--agent", a.agent, *common, "--init", a.prune_init,
                  "--children", a.prune_children, "--prune-at", a.prune_at, "--results-dir", str(out),
                  "--run", "prune"],
        "skills-src": ["optimize", "--task", a.skill_source, "--agent", a.agent, "--init", a.init, *common,
                       "--skills", str(lib), "--backtest", "--results-dir", str(out), "--run", "skills-src"],
        "skills": base + ["--skills", str(lib), "--backtest", "--results-dir", str(out), "--run", "skills"],
        "engineer": ["curriculum", "--task", a.mapf_task, "--target", a.mapf_target, "--agent", a.agent, "--stages",
                     "2", "--engineer", "llm", *common, *shlex.split(a.curriculum),
                     "--results-dir", str(out), "--run", "engineer"],
        "fixed": ["curriculum", "--task", a.mapf_task, "--target", a.mapf_target, "--agent", a.agent, "--stages",
                  "2", "--engineer", "fixed", *common, *shlex.split(a.curriculum),
                  "--results-dir", str(out), "--run", "fixed"],
        # the plain loop on the curriculum's target, with the curriculum runs' sizes and as many
        # generations as the two stages together (the same LLM-call budget, less the engineer's calls)
        "mapf-plain": ["optimize", "--task", a.mapf_target, "--agent", a.agent, "--init", a.init, *common,
                       *shlex.split(a.curriculum), "--generations", str(2 * generations(common)),
                       "--results-dir", str(out), "--run", "mapf-plain"],
    }
    rows = []
    for name in only:
        if name == "ray":
            rows.append(ray_check(exe, a, model, out))
            continue
        rc, wall = run(exe + runs[name], out / f"{name}.log")
        if name in ("engineer", "fixed"):
            rows.append(curriculum_row(name, out / name, wall, rc))
        else:
            rows.append(opt_row(name, out / name, wall, rc))
        print(json.dumps(rows[-1]), flush=True)
    rows = merge_rows(out / "strategies.json", rows)
    md = table(rows)
    (out / "strategies.md").write_text(md + "\n")
    (out / "strategies.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(md)
    return 0


def generations(args: list[str]) -> int:
    """The last --generations value in an option list (1 when absent)."""
    n = 1
    for i, x in enumerate(args[:-1]):
        if x == "--generations":
            n = int(args[i + 1])
    return n


def merge_rows(path: Path, rows: list[dict]) -> list[dict]:
    """Rows of earlier ``--only`` runs in the same ``--out`` kept, this run's rows replacing theirs."""
    try:
        old = json.loads(path.read_text()) if path.exists() else []
    except ValueError:
        old = []
    new = {r["name"]: r for r in rows}
    merged = {r["name"]: r for r in old if isinstance(r, dict) and "name" in r}
    merged.update(new)
    return sorted(merged.values(), key=lambda r: ALL.index(r["name"]) if r["name"] in ALL else len(ALL))


def curriculum_row(name: str, run_dir: Path, wall: float, rc: int) -> dict:
    path = run_dir / "curriculum.json"
    if not path.exists():
        return {"name": name, "error": f"no curriculum.json (exit {rc})", "wall_s": round(wall)}
    d = json.loads(path.read_text())
    rows = (d.get("final") or {}).get("rows", {})

    def frac(x: dict) -> str:
        return f"{x.get('successes', '?')}/{x.get('n', '?')}"

    return {"name": name, "initial": frac(rows.get("initial", {})), "best": frac(rows.get("best", {})),
            "calls": (d.get("usage") or {}).get("calls"), "tokens": (d.get("usage") or {}).get("tokens"),
            "stages": " | ".join(str(s.get("config_summary") or s.get("config")) for s in d.get("stages", [])),
            "wall_s": round(wall)}


def ray_check(exe: list[str], a: argparse.Namespace, model: list[str], out: Path) -> dict:
    """The same eval with and without --ray: identical episodes apart from timing fields."""
    common = ["eval", "--agent", "robust-cot", "--task", a.mapf_target, "--episodes", "2", "--max-tokens", "48",
              "--history", "2", "-j", "1", "--no-cache", *model]
    walls, rcs = {}, {}
    for mode in ("local", "ray"):
        shutil.rmtree(out / f"eval-{mode}", ignore_errors=True)  # a fresh pair each time, never a resume
        extra = ["--ray"] if mode == "ray" else []
        rcs[mode], walls[mode] = run(exe + common + extra + ["--results-dir", str(out), "--run-name", f"eval-{mode}"],
                                out / f"eval-{mode}.log")
    # timing fields, and the record's checksum (it covers them)
    timing = {"wall_s", "latency_s", "duration_s", "started", "finished", "time", "timestamp", "sum"}

    def load(mode: str) -> list[dict]:
        path = out / f"eval-{mode}" / "episodes.jsonl"
        if not path.exists():
            return []
        return [strip(json.loads(line), timing) for line in path.read_text().splitlines() if line.strip()]

    loc, ray = load("local"), load("ray")
    if not loc or not ray or any(rcs.values()):
        return {"name": "ray", "error": f"eval exit codes local {rcs['local']} / ray {rcs['ray']}, "
                f"episodes {len(loc)} / {len(ray)}", "wall_s": f"local {walls['local']:.0f} / ray {walls['ray']:.0f}"}
    same = bool(loc) and sorted(loc, key=lambda d: d["seed"]) == sorted(ray, key=lambda d: d["seed"])
    return {"name": "ray", "episodes": len(loc), "identical_to_local": same,
            "wall_s": f"local {walls['local']:.0f} / ray {walls['ray']:.0f}",
            "overhead_s_per_episode": round((walls["ray"] - walls["local"]) / len(loc), 1),
            "ray_over_local": round(walls["ray"] / walls["local"], 2) if walls["local"] else None}


def strip(x: object, keys: set[str]) -> object:
    if isinstance(x, dict):
        return {k: strip(v, keys) for k, v in x.items() if k not in keys and not k.endswith("_s")}
    if isinstance(x, list):
        return [strip(v, keys) for v in x]
    return x


def table(rows: list[dict]) -> str:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c, "")).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
