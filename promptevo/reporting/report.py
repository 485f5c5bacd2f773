"""The report of an optimization run: the final test table and what the loop did.

Every success figure in it is measured on the test split, played once after the last generation: the
random floor (the ``random`` agent), the baseline agent, the initial and the best prompts, each with n
and a 95% Wilson interval, and the paired tests of best vs initial and best vs baseline on the same seeds.
Validation and training numbers appear only as what the loop decided on, never as a prompt's score.

:func:`finish_run` (the engine's last step) plays the test seeds and writes ``report.json``,
``report.md``, ``best.md``/``best.json`` and ``report.html``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptevo.evaluation.statistics import paired_test, summarize_records
from promptevo.fileio import read_json, write_json_atomic, write_text_atomic
from promptevo.optim.propose.pruner import prompt_tokens
from promptevo.optim.state import (
    ACCEPTED_STATUSES,
    Candidate,
    RunState,
    author_of,
    lineage,
    segment_authors,
)
from promptevo.reporting.html import write_html
from promptevo.safetext import markdown_safe
from promptevo.segments import PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.optim.engine import Engine

log = logging.getLogger(__name__)

ACCEPTED = ACCEPTED_STATUSES


def _usage_tokens(u: dict | None) -> int:
    u = u or {}
    return int(u.get("prompt_tokens") or 0) + int(u.get("completion_tokens") or 0)


def operator_counts(st: RunState) -> dict[str, dict[str, int]]:
    """Per proposal operator: children proposed, dropped by the screen before racing, stopped early by
    racing, accepted on training seeds, promoted by the validation gate."""
    out: dict[str, dict[str, int]] = {}
    for c in st.candidates.values():
        if c.operator == "initial":
            continue
        row = out.setdefault(c.operator, {"proposed": 0, "screened_out": 0, "stopped": 0, "accepted": 0, "promoted": 0})
        row["proposed"] += 1
        row["screened_out"] += c.status == "screened-out"
        row["stopped"] += c.status == "stopped"
        row["accepted"] += c.status in ACCEPTED
        row["promoted"] += c.status == "promoted"
    return dict(sorted(out.items()))


def strategy_summary(st: RunState) -> dict:
    """Figures of the optional strategies (a pure function of the run state)."""
    cfg = st.config
    gens = []
    for rec in sorted(st.generations, key=lambda r: r.index):
        by_step = {k: _usage_tokens(v) for k, v in rec.optimizer_usage.items()}
        gens.append({"generation": rec.index, "mode": rec.mode, "evidence": rec.evidence_kind,
                     "optimizer_tokens": by_step, "optimizer_tokens_total": sum(by_step.values()),
                     "episodes_saved_by_racing": rec.episodes_saved})
    init, best = st.initial, st.best
    cands = list(st.candidates.values())

    def mean_tokens(gs: list[dict]) -> float:
        return sum(g["optimizer_tokens_total"] for g in gs) / len(gs) if gs else 0.0

    spent = [g for g in gens if g["optimizer_tokens"]]
    return {
        "enabled": {"evidence": cfg.evidence, "prune_at": cfg.prune_at, "skills": cfg.skills,
                    "backtest": cfg.backtest, "ray": cfg.ray, "operators": list(cfg.operators), "hints": cfg.hints},
        "generations": gens,
        "mean_optimizer_tokens_per_generation": mean_tokens(spent),
        "mean_optimizer_tokens_by_mode": {m: mean_tokens([g for g in spent if g["mode"] == m])
                                          for m in sorted({g["mode"] for g in spent})},
        "prompt_tokens": {"initial": prompt_tokens(init.prompt_set()), "best": prompt_tokens(best.prompt_set())},
        "pruned": [{"candidate": c.id, "edit": c.edit, "saved": c.prompt_tokens_saved, "status": c.status}
                   for c in cands if c.operator == "prune"],
        "vetoed": [{"candidate": c.id, "vetoes": (c.validity or {}).get("vetoes", [])} for c in cands
                   if c.status == "vetoed"],
        "validity_checked": sum(1 for c in cands if c.validity is not None),
        "skill_children": [{"candidate": c.id, "skill": (c.source or {}).get("skill"), "status": c.status}
                           for c in cands if c.operator == "skill"],
    }


def promoted_edits(st: RunState) -> list[dict]:
    """Every promoted edit: generation, operator, who wrote it (person / machine), what it changed and the
    validation gate's verdict; an induced rule carries its table and held-out accuracy."""
    out = []
    for c in sorted(st.candidates.values(), key=lambda c: int(c.id[1:])):
        if c.status != "promoted":
            continue
        edit = c.edit or {}
        row = {"candidate": c.id, "generation": c.generation, "operator": c.operator, "author": author_of(c),
               "edit": f"{edit.get('op', '')} {edit.get('module', '')}.{edit.get('segment', '')}".strip() if edit else None,
               "text": (edit.get("text") or "")[:1200] or None,
               "gate": {k: (c.gate or {}).get(k) for k in ("wins", "losses", "ties", "p_value", "alpha")}}
        src = c.source or {}
        if src.get("hint"):
            row["hint"] = src["hint"]
        if src.get("induce"):
            ind = src["induce"]
            row["induced"] = {k: ind.get(k) for k in ("table", "heldout_accuracy", "majority_accuracy",
                                                      "majority_action", "fit_states", "heldout_states",
                                                      "left_out_states", "none_accuracy", "format")}
        if src.get("screen"):
            row["screen"] = src["screen"]
        out.append(row)
    return out


def expert_summary(run_dir: Path, st: RunState) -> list[dict]:
    """Per generation: agreement of the parent with the game's expert, the largest disagreement clusters,
    the induced table (or why none) and the screen's decisions, from ``analyses/gen-NNN.json``."""
    out = []
    for rec in sorted(st.generations, key=lambda r: r.index):
        if not rec.evidence or not (run_dir / rec.evidence).is_file():
            continue
        try:
            blob = read_json(run_dir / rec.evidence)
        except (OSError, ValueError):
            continue
        ex = blob.get("expert") or {}
        row: dict = {"generation": rec.index, "available": bool(ex.get("available"))}
        if ex.get("available"):
            row.update({"agreement": {k: (ex.get("agreement") or {}).get(k) for k in ("agree", "states", "rate")},
                        "counts": ex.get("counts"),
                        "clusters": [{k: c.get(k) for k in ("agent", "expert", "count", "episodes", "with_line", "cites",
                                                             "patterns")} for c in (ex.get("clusters") or [])[:4]]})
        if blob.get("induce"):
            row["induce"] = blob["induce"]
        if blob.get("screen"):
            row["screen"] = blob["screen"]
        if blob.get("rules"):
            row["rules"] = blob["rules"]
        out.append(row)
    return out


def test_comparison(a: dict[str, dict], b: dict[str, dict]) -> dict:
    """Paired comparison of two test-split record sets (success): the exact sign (McNemar) test, two-sided."""
    sa = {int(s): float(bool(r.get("success"))) for s, r in a.items()}
    sb = {int(s): float(bool(r.get("success"))) for s, r in b.items()}
    return paired_test(sb, sa, test="sign", alternative="two-sided").to_dict()


def progress_comparison(a: dict[str, dict], b: dict[str, dict]) -> dict:
    """Paired Wilcoxon signed-rank test (two-sided) of the test-split progress of ``b`` against ``a``."""
    pa = {int(s): float(r.get("progress", r.get("success", 0.0))) for s, r in a.items()}
    pb = {int(s): float(r.get("progress", r.get("success", 0.0))) for s, r in b.items()}
    return paired_test(pb, pa, test="wilcoxon", alternative="two-sided").to_dict()


def _row(name: str, records: dict, candidate: Candidate | None = None) -> dict:
    row = {"name": name, "candidate": candidate.id if candidate else None, **summarize_records(records)}
    if candidate is not None:
        row["fingerprint"] = candidate.fingerprint
    return row


def build_report(engine: "Engine") -> dict:
    from promptevo.optim.engine import FLOOR_AGENT

    st, cfg = engine.state, engine.cfg
    init, best = st.initial, st.best
    rows: list[dict] = []
    if not cfg.final_test:  # a curriculum stage: no test split; what the stage selected on, labelled so
        validation_rows = [_row(f"initial ({cfg.agent}) [validation: selection split, not a score]", init.validation, init),
                           _row(f"best ({best.id}) [validation: selection split, not a score]", best.validation, best)]
    else:
        validation_rows = []
    if st.final.get("floor"):
        rows.append(_row(f"random floor ({FLOOR_AGENT} agent)", st.final["floor"]))
    if st.baseline.get("test"):
        rows.append(_row(f"baseline ({st.baseline['agent']})", st.baseline["test"]))
    if cfg.final_test:
        rows.append(_row(f"initial ({cfg.agent}, {cfg.init})", init.test, init))
        rows.append(_row(f"best ({cfg.agent}, {best.id})", best.test, best))
    comparisons = {"best_vs_initial": test_comparison(init.test, best.test)} if cfg.final_test else {}
    if cfg.final_test:
        comparisons["best_vs_initial_progress"] = {**progress_comparison(init.test, best.test),
                                                   "metric": "progress", "test": "wilcoxon"}
    if st.baseline.get("test"):
        comparisons["best_vs_baseline"] = test_comparison(st.baseline["test"], best.test)
    gens_done = sum(1 for g in st.generations if g.done)
    report = {
        "run": str(engine.run_dir),
        "task": cfg.task,
        "agent": cfg.agent,
        "model": cfg.model,
        "optimizer_model": cfg.optimizer_model or cfg.model,
        "fitness": cfg.fitness,
        "test_split": {"n": len(engine.test_seeds()) if cfg.final_test else 0,
                       "seeds": engine.test_seeds() if cfg.final_test else [],
                       "note": "played once, after the last generation" if cfg.final_test else "not played (final_test off)"},
        "validation_rows": validation_rows,
        "splits": {"train_seeds_used": len(st.splits.get("train", [])),
                   "validation_seeds": len(st.splits.get("validation", [])),
                   "test_seeds": len(st.splits.get("test", []))},
        "rows": rows,
        "comparisons": comparisons,
        "best_id": best.id,
        "generations_done": gens_done,
        "candidates": len(st.candidates),
        "accepted": sum(1 for c in st.candidates.values() if c.status in ACCEPTED),
        "promoted": sum(1 for c in st.candidates.values() if c.status == "promoted"),
        "operators": operator_counts(st),
        "racing": {"episodes_saved": sum(g.episodes_saved for g in st.generations),
                   "children_stopped": sum(1 for c in st.candidates.values() if c.status == "stopped")},
        "lineage": [c.id for c in lineage(st.candidates, best.id)],
        "promoted_edits": promoted_edits(st),
        "best_segments": segment_authors(st.candidates, best.id),
        "expert": expert_summary(engine.run_dir, st),
        "usage": engine.usage(),
        "episodes_run": engine.episodes_total,
        "wall_s": round(engine.wall_s, 1),
        "stop_reason": st.stop_reason,
        "warnings": list(st.warnings),
        "signatures": st.final.get("signatures", {}),
        "compliance": st.final.get("compliance", {}),
        "cost_per_call": st.final.get("cost", {}),
        "config": cfg.model_dump(),
        "strategies": strategy_summary(st),
    }
    abl = engine.run_dir / "ablation.json"
    if abl.exists():
        import json

        report["ablation"] = json.loads(abl.read_text(encoding="utf-8"))
    return report


def fmt_rate(row: dict) -> str:
    """``rate [lo, hi]``; a row with no episode has no rate (``n = 0`` is never shown as 0%)."""
    if not row.get("n"):
        return "no episode played"
    lo, hi = row["ci95"]
    return f"{row['success_rate']:.1%} [{lo:.1%}, {hi:.1%}]"


def markdown_table(report: dict) -> str:
    lines = [f"Test split: n = {report['test_split']['n']} seeds (played once, at the end). Success with 95% "
             "Wilson interval.", "",
             "| prompts | n | success [95% CI] | mean progress | mean return | tokens |", "|---|---|---|---|---|---|"]
    for r in report["rows"] or report.get("validation_rows") or []:
        lines.append(f"| {r['name']} | {r['n']} | {fmt_rate(r)} | {r.get('mean_progress', 0.0):.3f} | "
                     f"{r['mean_return']:.3f} | {r['tokens']:,} |")
    for name, c in report.get("comparisons", {}).items():
        lines.append("")
        test = "Wilcoxon signed-rank test" if c.get("test") == "wilcoxon" else "exact sign test"
        lines.append(f"{name.replace('_', ' ')}: {c['wins']} seeds won, {c['losses']} lost, {c['ties']} tied; "
                     f"mean difference {c['mean_diff']:+.3f}; {test} (two-sided) p = {c['p_value']:.3g}")
    return "\n".join(lines)


def _markdown(report: dict) -> str:
    md = [f"# promptevo run {Path(report['run']).name}", "",
          f"Task `{report['task']}`, agent `{report['agent']}`, model `{report['model']}`, optimizer "
          f"`{report['optimizer_model']}`, fitness `{report['fitness']}`. Stopped: {report['stop_reason']}.", "",
          markdown_table(report), "",
          f"Generations: {report['generations_done']}, candidates: {report['candidates']}, accepted on training "
          f"seeds: {report['accepted']}, promoted by the validation gate: {report['promoted']}. Racing stopped "
          f"{report['racing']['children_stopped']} children early and saved {report['racing']['episodes_saved']} "
          "training episodes.", "",
          "| operator | proposed | screened out | stopped early | accepted | promoted |", "|---|---|---|---|---|---|"]
    md += [f"| {op} | {v['proposed']} | {v.get('screened_out', 0)} | {v['stopped']} | {v['accepted']} | {v['promoted']} |"
           for op, v in report["operators"].items()] or ["| - | 0 | 0 | 0 | 0 | 0 |"]
    u = report["usage"]
    md += ["", f"Usage: {u.get('calls', 0)} LLM calls, {u.get('tokens', 0):,} tokens, ${u.get('cost', 0.0):.4f}; "
           f"wall time {report['wall_s']:.0f} s.", "",
           "Lineage of the best prompts: " + " -> ".join(report["lineage"]), ""]
    if report.get("promoted_edits"):
        md += ["## Promoted edits (who wrote them)", "",
               "| candidate | generation | operator | author | edit | validation gate |", "|---|---|---|---|---|---|"]
        for e in report["promoted_edits"]:
            g = e.get("gate") or {}
            gate = (f"{g.get('wins')} won / {g.get('losses')} lost, p = {g['p_value']:.3g}"
                    if g.get("p_value") is not None else "-")
            md.append(f"| {e['candidate']} | {e['generation']} | {e['operator']} | {e['author']} | {e.get('edit') or '-'} "
                      f"| {gate} |")
        for e in report["promoted_edits"]:
            if e.get("induced"):
                ind = e["induced"]
                md += ["", f"{e['candidate']} (induced from the expert): held-out accuracy {ind['heldout_accuracy']:.0%} "
                       f"vs {ind['majority_accuracy']:.0%} for always {ind['majority_action']!r} (n = {ind['heldout_states']} "
                       f"held-out states; {ind['fit_states']} fitted; {ind['left_out_states']} states had no line naming "
                       "the mission's things).", "", "```", e.get("text") or "", "", ind.get("format") or "", "```"]
        md.append("")
    if report.get("best_segments"):
        md += ["Segments of the best prompts and who wrote them: " + "; ".join(
            f"{r['segment']} ({r['operator']}, {r['author']})" for r in report["best_segments"]), ""]
    comp = report.get("compliance") or {}
    if any("decisions" in (comp.get(w) or {}) for w in ("initial", "best")):
        md += ["## Compliance with the induced rule (test seeds)", "",
               "Each decision of a prompt that carries an induced table, against the true field values and the "
               "expert: correct; perception (a wrong value, owned by the answer format); lookup (right values, "
               "another action: the rule segment); table (followed, the table is wrong there); format (a field "
               "missing or outside its values, no action, a cut reply). Compliance = (correct + table) / decisions.",
               "", "| prompts | decisions | compliance | in view | out of view | correct | perception | lookup | "
               "table | format | most common errors |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for who in ("initial", "best"):
            c = comp.get(who) or {}
            if "decisions" not in c:
                md.append(f"| {who} | - | {c.get('note', '-')} | | | | | | | | |")
                continue
            bv = c.get("by_view") or {}

            def pct(x: Any) -> str:
                return "-" if x is None else f"{x:.0%}"
            kinds = "; ".join(f"{k} ({n})" for k, n in list((c.get("kinds") or {}).items())[:3]) or "-"
            md.append(f"| {who} ({c.get('candidate')}) | {c['decisions']} | {pct(c['compliance'])} | "
                      f"{pct((bv.get('in view') or {}).get('compliance'))} | "
                      f"{pct((bv.get('out of view') or {}).get('compliance'))} | {c['correct']} | {c['perception']} | "
                      f"{c['lookup']} | {c['table']} | {c['format']} | {kinds} |")
        md.append("")
    cost = report.get("cost_per_call") or {}
    if any((cost.get(w) or {}).get("calls") for w in ("initial", "best")):
        def per(c: dict, key: str, unit: str) -> str:
            return "-" if c.get(key) is None else f"{c[key]} {unit}"
        md += ["## Cost per agent call (test seeds)", "", "| prompts | calls (cached) | tokens per call | seconds per call |",
               "|---|---|---|---|"]
        for who in ("initial", "best"):
            c = cost.get(who) or {}
            md.append(f"| {who} | {c.get('calls', 0)} ({c.get('cached_calls', 0)}) | {per(c, 'tokens_per_call', '')} | "
                      f"{per(c, 'seconds_per_call', 's')} |")
        if cost.get("seconds_ratio") is not None:
            verdict = "within" if cost.get("within_limit") else "over"
            md += ["", f"The best prompts take {cost['seconds_ratio']}x the initial's seconds per call ({verdict} the "
                   f"{cost.get('limit')}x limit; seconds measured on this machine, other work beside the run counts)."]
        md.append("")
    sigs = report.get("signatures") or {}
    for who in ("initial", "best"):
        if sigs.get(who):
            md += [f"Behaviour signatures of the {who} prompts on the test seeds:", ""]
            md += [f"- {s['kind']}: {s['episodes']} episodes ({s['share']:.0%}); {s['detail']}" for s in sigs[who][:6]]
            md.append("")
    if report.get("warnings"):
        md += ["Warnings:", ""] + [f"- {w}" for w in report["warnings"]] + [""]
    if "ablation" in report:
        md += ["## Segment ablation of the best prompts (validation seeds)", "",
               "| segment removed | n | change in success | change in score |", "|---|---|---|---|"]
        md += [f"| {r['module']}.{r['segment']} | {r['n']} | {r['delta_success']:+.1%} | {r['delta_return']:+.3f} |"
               for r in report["ablation"]["rows"]]
        md.append("")
    return "\n".join(md)


def write_report(run_dir: Path, report: dict, st: RunState) -> None:
    write_json_atomic(run_dir / "report.json", report)
    write_text_atomic(run_dir / "report.md", markdown_safe(_markdown(report)))
    best = st.best
    meta = {"task": st.config.task, "agent": st.config.agent, "run": run_dir.name, "candidate": best.id}
    best_ps = PromptSet(best.prompt_set().modules, tuple(meta.items()))
    best_ps.save(run_dir / "best.md")
    best_ps.save(run_dir / "best.json")


class _Recorded:
    """What :func:`build_report` reads of an engine, from a finished run's checkpoint."""

    def __init__(self, run_dir: Path, state: RunState):
        self.run_dir, self.state, self.cfg = run_dir, state, state.config
        self.episodes_total, self.wall_s = state.episodes_run, state.wall_s

    def test_seeds(self) -> list[int]:
        return list(self.state.splits.get("test", []))

    def usage(self) -> dict:
        return dict(self.state.usage)


def rebuild_report(run_dir: Path) -> dict | None:
    """Rewrite ``report.json``/``report.md`` of a finished run from its checkpoint (nothing is played), so
    a run made by an earlier version gets the sections of this one; None when the run is not finished."""
    from promptevo.optim.state import load_checkpoint

    st = load_checkpoint(run_dir)
    if st.phase != "done":
        return None
    report = build_report(_Recorded(run_dir, st))  # type: ignore[arg-type]
    write_json_atomic(run_dir / "report.json", report)
    write_text_atomic(run_dir / "report.md", markdown_safe(_markdown(report)))
    return report


def finish_run(engine: "Engine") -> dict:
    """The engine's last step after it played its final phase (:meth:`Engine.final_phase`): render what it
    recorded into ``report.json``, ``report.md``, ``best.md``/``best.json`` and ``report.html``."""
    st = engine.state
    report = build_report(engine)
    write_report(engine.run_dir, report, st)
    engine.emit("final", table=markdown_table(report), report=report)
    try:  # the HTML report is a convenience: its failure never fails the run
        write_html(engine.run_dir)
    except Exception as e:  # noqa: BLE001
        engine.warn(f"warning: report.html not written ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
    return report
