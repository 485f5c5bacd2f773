"""Export the result of an optimization run as files a user (or ``promptevo eval``) can take away.

:func:`export_run` reads ``<run>/checkpoint.json`` and writes, into ``out_dir`` (default
``<run>/export``):

* ``best.md`` / ``best.json`` -- the best prompt set (PromptSet markdown / JSON; both load with
  :meth:`PromptSet.load`, so ``promptevo eval --prompts best.md`` plays them);
* ``agent.json`` -- ``{"agent", "task", "model", "init", "prompts_file", ..., "meta", "modules"}``: which
  agent to build with these prompts; the prompt set itself is at top level (``meta``/``modules``), so
  the file also loads with :meth:`PromptSet.load` and ``promptevo eval --prompts agent.json`` works;
  ``prompts_file`` is the path of ``best.json`` relative to ``agent.json``;
* ``report.html`` -- a copy of the run's static HTML report, when the run has one;
* ``LINEAGE.md`` -- the chain of edits from the initial prompt to the best, each with its op,
  segment, rationale, training-seed decision and held-out scores, plus the segment diffs; then a table
  of every other candidate that was tried.
"""

from __future__ import annotations

import json
from pathlib import Path

from promptevo.optim.engine import (
    CHECKPOINT,
    Candidate,
    EvolveConfig,
    EvolveError,
    _atomic_write,
    _read_checkpoint,
    _State,
    lineage,
    resolve_run_dir,
    summarize_scores,
)
from promptevo.segments import PromptSet, diff_prompts


def _pct(scores: dict) -> str:
    if not scores:
        return "-"
    r = summarize_scores(scores)
    lo, hi = r["ci95"]
    return f"{r['successes']}/{r['n']} = {r['success_rate']:.0%} [{lo:.0%}, {hi:.0%}], return {r['mean_return']:.3f}"


def _edit_line(c: Candidate) -> str:
    if not c.edit:
        return "(initial prompts)"
    return f"`{c.edit.get('op')}` `{c.edit.get('module')}.{c.edit.get('segment')}`"


def lineage_markdown(st: _State) -> str:
    chain = lineage(st.candidates, st.best_id)
    out = [f"# Lineage of the best prompts ({st.config.task}, agent {st.config.agent})", "",
           f"Best candidate: **{st.best_id}**; chain: " + " -> ".join(c.id for c in chain), ""]
    for i, c in enumerate(chain):
        out.append(f"## {i}. {c.id} (generation {c.generation}) -- {_edit_line(c)}")
        out.append("")
        if c.edit and c.edit.get("rationale"):
            out.append(f"Rationale: {c.edit['rationale']}")
            out.append("")
        if c.verdict:
            v = c.verdict
            out.append(f"- training seeds ({v['n']}, paired with {c.parent}): mean diff {v['mean_diff']:+.3f}, "
                       f"{v['wins']} wins / {v['losses']} losses / {v['ties']} ties, p={v['p_value']:.3g} -> "
                       f"{'accepted' if v['accepted'] else 'rejected'}")
        if c.train:
            out.append(f"- training episodes: {_pct(c.train)}")
        if c.promotion:
            p = c.promotion
            out.append(f"- held-out check: mean diff {p['mean_diff']:+.3f} -> {'promoted' if p['accepted'] else 'not promoted'}")
        out.append(f"- held-out episodes: {_pct(c.heldout)}")
        out.append(f"- status: {c.status}; fingerprint {c.fingerprint}")
        if c.parent is not None and c.parent in st.candidates:
            diffs = diff_prompts(st.candidates[c.parent].prompt_set(), c.prompt_set())
            if diffs:
                out.append("")
                out.append("```diff")
                out += [d.unified() or f"{d.kind} {d.module}.{d.segment}" for d in diffs]
                out.append("```")
        out.append("")
    others = [c for c in st.candidates.values() if c.id not in {x.id for x in chain}]
    if others:
        out += ["## Other candidates tried", "",
                "| id | gen | parent | edit | train mean diff | status | rationale |", "|---|---|---|---|---|---|---|"]
        for c in others:
            md = f"{c.verdict['mean_diff']:+.3f}" if c.verdict else "-"
            why = (c.edit or {}).get("rationale", "").replace("|", "/").replace("\n", " ")[:160]
            out.append(f"| {c.id} | {c.generation} | {c.parent} | {_edit_line(c)} | {md} | {c.status} | {why} |")
        out.append("")
    return "\n".join(out)


def export_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write best prompts (md + json), ``agent.json`` and ``LINEAGE.md``; returns the written paths."""
    run_dir = Path(run_dir)
    if not (run_dir / CHECKPOINT).exists():
        raise EvolveError(f"not a promptevo run (no {CHECKPOINT}): {run_dir}")
    data = _read_checkpoint(run_dir)
    config = EvolveConfig.model_validate(data["config"])
    st = _State.from_dict(data, config, run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "export"
    out.mkdir(parents=True, exist_ok=True)
    best = st.candidates[st.best_id]
    meta = {"task": config.task, "agent": config.agent, "run": run_dir.name, "candidate": best.id}
    ps = PromptSet(best.prompt_set().modules, tuple(meta.items()))
    paths = [ps.save(out / "best.md"), ps.save(out / "best.json")]
    agent_cfg = {
        "agent": config.agent,
        "task": config.task,
        "model": config.model,
        "init": config.init,
        "prompts_file": "best.json",
        "run": str(run_dir),
        "candidate": best.id,
        "fingerprint": best.fingerprint,
        "heldout": summarize_scores(best.heldout) if best.heldout else None,
        # the prompt set itself, at top level, so PromptSet.load / `promptevo eval --prompts agent.json` work
        **ps.to_dict(),
    }
    p = out / "agent.json"
    _atomic_write(p, json.dumps(agent_cfg, indent=2) + "\n")
    paths.append(p)
    p = out / "LINEAGE.md"
    _atomic_write(p, lineage_markdown(st))
    paths.append(p)
    if (run_dir / "report.html").is_file():  # written at the end of a run, or by `promptevo report`
        p = out / "report.html"
        if p.resolve() != (run_dir / "report.html").resolve():
            _atomic_write(p, (run_dir / "report.html").read_text(encoding="utf-8"))
        paths.append(p)
    return paths


def load_agent_config(path: str | Path) -> tuple[str, PromptSet, dict]:
    """(agent name, prompt set, whole config) from an ``agent.json`` written by :func:`export_run`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        agent = data["agent"]
        if isinstance(data.get("modules"), dict):
            ps = PromptSet.from_dict(data)
        elif isinstance(data.get("prompts"), dict):
            ps = PromptSet.from_dict(data["prompts"])
        else:
            ps = PromptSet.load(path.parent / data["prompts_file"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EvolveError(f"{path}: not a promptevo agent config ({e})") from None
    return agent, ps, data


def cli_main(args: list[str]) -> int:
    """Entry point of ``promptevo export RUN [--out DIR]``; returns the exit code."""
    import argparse

    from rich.console import Console

    p = argparse.ArgumentParser(prog="promptevo export",
                                description="Write a run's best prompts (md + json), agent.json and LINEAGE.md.")
    p.add_argument("run", help="run folder, or a run name under --results-dir")
    p.add_argument("--out", "-o", help="output folder (default <run>/export)")
    p.add_argument("--results-dir", default="results", help="where run folders are (default results)")
    try:
        ns = p.parse_args(list(args))
    except SystemExit as e:
        return int(e.code or 0)
    run_dir = resolve_run_dir(ns.run, ns.results_dir)
    try:
        paths = export_run(run_dir, ns.out)
    except EvolveError as e:
        Console(stderr=True).print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    out = Console()
    for path in paths:
        out.print(str(path), highlight=False)
    out.print(f"play them: promptevo eval --agent {json.loads((paths[2]).read_text())['agent']} "
              f"--task {json.loads((paths[2]).read_text())['task']} --prompts {paths[0]}", highlight=False)
    return 0
