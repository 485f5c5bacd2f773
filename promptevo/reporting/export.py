"""Export the result of an optimization run as files a user (or ``promptevo eval``) can take away.

:func:`export_run` reads ``<run>/checkpoint.json`` and writes, into ``out_dir`` (default
``<run>/export``):

* ``best.md`` / ``best.json`` -- the best prompt set (PromptSet markdown / JSON; both load with
  :meth:`PromptSet.load`, so ``promptevo eval --prompts best.md`` plays them);
* ``agent.json`` -- ``{"agent", "task", "model", "init", "prompts_file", ..., "test", "meta", "modules"}``:
  which agent to build with these prompts and how they did on the TEST split (``test``: n, success rate,
  95% interval; ``null`` when the run never played its test split); the prompt set itself is at top level
  (``meta``/``modules``), so the file also loads with :meth:`PromptSet.load` and ``promptevo eval --prompts
  agent.json`` works; ``prompts_file`` is the path of ``best.json`` relative to ``agent.json``;
* ``report.html`` -- a copy of the run's static HTML report, when the run has one;
* ``LINEAGE.md`` -- the chain of edits from the initial prompt to the best, each with its operator, op,
  segment, rationale, training-seed verdict and validation gate (the loop's decisions), its test-split
  result when it was played, plus the segment diffs; then a table of every other candidate that was tried.

Validation and training numbers are shown as the decisions they were, never as a prompt's score: the only
score reported is the test split's, played once at the end of the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from promptevo.evaluation.statistics import summarize_records
from promptevo.fileio import write_json_atomic, write_text_atomic
from promptevo.optim.state import CHECKPOINT, Candidate, RunError, RunState, lineage, load_checkpoint
from promptevo.safetext import fence, markdown_safe
from promptevo.segments import PromptSet, diff_prompts


def _pct(records: dict) -> str:
    if not records:
        return "-"
    r = summarize_records(records)
    lo, hi = r["ci95"]
    return (f"{r['successes']}/{r['n']} = {r['success_rate']:.0%} [{lo:.0%}, {hi:.0%}], "
            f"mean return {r['mean_return']:.3f}")


def _edit_line(c: Candidate) -> str:
    if c.operator == "crossover":
        parents = (c.source or {}).get("parents") or []
        return f"`crossover` of {' x '.join(map(str, parents))}" if parents else "`crossover`"
    if not c.edit:
        return "(initial prompts)" if c.operator == "initial" else f"`{c.operator}`"
    line = f"`{c.edit.get('op')}` `{c.edit.get('module')}.{c.edit.get('segment')}`"
    for key in ("hint", "skill"):
        if (c.source or {}).get(key):
            line += f" ({key} {c.source[key]})"
    return line


def _cell(text: Any, n: int = 160) -> str:
    return str(text or "").replace("|", "/").replace("\n", " ")[:n]


def summary_on_test(c: Candidate) -> dict | None:
    """n, successes, success rate and its 95% interval of ``c`` on the test split (None if not played)."""
    if not c.test:
        return None
    r = summarize_records(c.test)
    return {k: r[k] for k in ("n", "successes", "success_rate", "ci95", "mean_return", "mean_progress")}



def lineage_markdown(st: RunState) -> str:
    cfg = st.config
    chain = lineage(st.candidates, st.best_id)
    out = [f"# Lineage of the best prompts ({cfg.task}, agent {cfg.agent})", "",
           f"Best candidate: **{st.best_id}**; chain: " + " -> ".join(c.id for c in chain), "",
           "Training and validation figures below are the loop's decisions (paired with the parent on training "
           "seeds; the validation gate against the best so far). The score of a prompt is its TEST split result, "
           "played once at the end of the run.", ""]
    for i, c in enumerate(chain):
        out += [f"## {i}. {c.id} (generation {c.generation}, {c.operator}) -- {_edit_line(c)}", ""]
        if c.edit and c.edit.get("rationale"):
            out += [f"Rationale: {c.edit['rationale']}", ""]
        if c.verdict:
            v = c.verdict
            p = f", p={v['p_value']:.3g}" if isinstance(v.get("p_value"), (int, float)) else ""
            out.append(f"- training seeds (n={v.get('n')}, paired with {c.parent}): mean diff "
                       f"{float(v.get('mean_diff') or 0):+.3f}, {v.get('wins')} wins / {v.get('losses')} losses / "
                       f"{v.get('ties')} ties{p} -> {'accepted' if v.get('accepted') else 'rejected'}"
                       f" ({v.get('reason', '')})")
        if c.race and c.race.get("stopped"):
            out.append(f"- racing: stopped early ({c.race['stopped']})")
        if c.gate:
            g = c.gate
            out.append(f"- validation gate (n={g.get('n')}): mean diff {float(g.get('mean_diff') or 0):+.3f} -> "
                       f"{'promoted' if g.get('accepted') else 'not promoted'} ({g.get('reason', '')})")
        if c.test:
            out.append(f"- TEST split: {_pct(c.test)}")
        out.append(f"- status: {c.status}; fingerprint {c.fingerprint}")
        if c.parent is not None and c.parent in st.candidates:
            diffs = diff_prompts(st.candidates[c.parent].prompt_set(), c.prompt_set())
            if diffs:
                out += ["", *fence([d.unified() or f"{d.kind} {d.module}.{d.segment}" for d in diffs], "diff")]
        out.append("")
    on_chain = {x.id for x in chain}
    others = [c for c in st.candidates.values() if c.id not in on_chain]
    if others:
        out += ["## Other candidates tried", "",
                "| id | gen | parent | operator | edit | train mean diff | status | rationale |",
                "|---|---|---|---|---|---|---|---|"]
        for c in others:
            md = f"{float(c.verdict.get('mean_diff') or 0):+.3f}" if c.verdict else "-"
            out.append(f"| {c.id} | {c.generation} | {c.parent} | {c.operator} | {_cell(_edit_line(c))} | {md} | "
                       f"{c.status} | {_cell((c.edit or {}).get('rationale'))} |")
        out.append("")
    return "\n".join(out)


def export_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write best prompts (md + json), ``agent.json``, ``LINEAGE.md`` (and a copy of ``report.html``);
    returns the written paths. Raises :class:`RunError` (one line) for a folder that is not a run."""
    run_dir = Path(run_dir)
    if not (run_dir / CHECKPOINT).exists():
        raise RunError(f"not a promptevo run (no {CHECKPOINT}): {run_dir}")
    st = load_checkpoint(run_dir)
    cfg = st.config
    out = Path(out_dir) if out_dir is not None else run_dir / "export"
    out.mkdir(parents=True, exist_ok=True)
    best = st.best
    meta = {"task": cfg.task, "agent": cfg.agent, "run": run_dir.name, "candidate": best.id}
    ps = PromptSet(best.prompt_set().modules, tuple(meta.items()))
    paths = [ps.save(out / "best.md"), ps.save(out / "best.json")]
    agent_cfg = {
        "agent": cfg.agent,
        "task": cfg.task,
        "model": cfg.model,
        "init": cfg.init,
        "agent_options": dict(cfg.agent_options),
        "prompts_file": "best.json",
        "run": str(run_dir),
        "candidate": best.id,
        "fingerprint": best.fingerprint,
        "test": summary_on_test(best),  # the TEST split, played once at the end (None: not played)
        # the prompt set itself, at top level, so PromptSet.load / `promptevo eval --prompts agent.json` work
        **ps.to_dict(),
    }
    paths.append(write_json_atomic(out / "agent.json", agent_cfg))
    paths.append(write_text_atomic(out / "LINEAGE.md", markdown_safe(lineage_markdown(st))))
    if (run_dir / "report.html").is_file():  # written at the end of a run, or by `promptevo report`
        p = out / "report.html"
        if p.resolve() != (run_dir / "report.html").resolve():
            write_text_atomic(p, (run_dir / "report.html").read_text(encoding="utf-8"))
        paths.append(p)
    return paths


def load_agent_config(path: str | Path) -> tuple[str, PromptSet, dict]:
    """(agent name, prompt set, whole config) from an ``agent.json`` written by :func:`export_run`.
    Raises :class:`RunError` (one line) for a file that is not one."""
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
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RunError(f"{path}: not a promptevo agent config ({msg})") from None
    return agent, ps, data
