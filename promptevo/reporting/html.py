"""A static, self-contained HTML report of one optimization run: ``results/<run>/report.html``.

The page has no script and loads nothing (a Content-Security-Policy forbids it); charts are inline SVG
drawn with matplotlib (:mod:`promptevo.reporting.charts`), and every piece of text from the run (prompt
segments, LLM rationales and explanations, names) is escaped with :func:`esc`.

Sections: header (task, agent, models, splits, budget used, stop reason); the final table on the TEST
split (random floor, baseline, initial, best, each with n and its 95% Wilson interval, and the paired
comparisons); proposals per operator (proposed / stopped / accepted / promoted); what the loop decided per
generation on training and validation seeds (chart and table; these are decisions, never scores); lineage;
segment diff best vs initial; behaviour signatures on the test seeds; the analyses per generation. A run
that stopped early shows whatever exists.

* :func:`load_run` reads a run folder into a plain dict (tolerant of missing pieces);
* :func:`render_html` is a pure function of that dict;
* :func:`write_html` writes ``report.html`` atomically (the engine calls it at the end of a run);
* ``promptevo report RUN`` (:mod:`promptevo.cli.report`) calls :func:`write_html`.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from promptevo.fileio import write_text_atomic
from promptevo.optim.state import ACCEPTED_STATUSES, CHECKPOINT, RunError, fingerprint_mismatch
from promptevo.reporting import charts
from promptevo.segments import PromptSet, diff_prompts

REPORT_HTML = "report.html"
_MAX_TEXT = 4000  # longest free text (raw replies) shown before it is cut
ACCEPTED = ACCEPTED_STATUSES
_STATUS_CLASS = {"promoted": "promoted", "accepted": "accepted", "not-promoted": "accepted", "vetoed": "vetoed",
                 "rejected": "rejected", "stopped": "stopped"}
_EFFECTS = {"helped", "hurt", "missing", "neutral"}


def esc(x: Any) -> str:
    """Escape any value for HTML text and attribute context."""
    return html.escape("" if x is None else str(x), quote=True)


def _line(e: BaseException) -> str:
    s = str(e)
    return s.splitlines()[0] if s else type(e).__name__


# =================================================================================================
# Loading
# =================================================================================================


def _read_json(path: Path, errors: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        errors.append(f"{path.name}: unreadable ({type(e).__name__}: {_line(e)})")
        return None


def load_run(run_dir: str | Path) -> dict:
    """Everything the report shows, as plain data: ``{"run", "run_dir", "checkpoint", "report",
    "analyses": {generation: blob}, "errors"}``. Only a missing or unreadable ``checkpoint.json`` is an
    error (:class:`~promptevo.optim.state.RunError`, one line); the other files are optional."""
    run_dir = Path(run_dir)
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise RunError(f"not a promptevo run (no {CHECKPOINT}): {run_dir}")
    try:
        ckpt = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RunError(f"corrupt checkpoint {path}: {_line(e)}") from None
    if not isinstance(ckpt, dict):
        raise RunError(f"corrupt checkpoint {path}: not a JSON object")
    bad = fingerprint_mismatch(ckpt.get("candidates") if isinstance(ckpt.get("candidates"), dict) else {})
    if bad:
        raise RunError(f"checkpoint {path}: {bad}")
    errors: list[str] = []
    report = _read_json(run_dir / "report.json", errors) if (run_dir / "report.json").exists() else None
    analyses: dict[int, dict] = {}
    adir = run_dir / "analyses"
    if adir.is_dir():
        for p in sorted(adir.glob("gen-*.json")):
            blob = _read_json(p, errors)
            if isinstance(blob, dict):
                try:
                    analyses[int(blob.get("generation", p.stem.split("-")[-1]))] = blob
                except (TypeError, ValueError):
                    errors.append(f"{p.name}: no generation number")
    return {"run": run_dir.name, "run_dir": str(run_dir), "checkpoint": ckpt,
            "report": report if isinstance(report, dict) else None, "analyses": analyses, "errors": errors}


# =================================================================================================
# Data helpers (pure, tolerant of missing fields)
# =================================================================================================


def _candidates(ck: dict) -> dict[str, dict]:
    raw = ck.get("candidates")
    items = raw.values() if isinstance(raw, dict) else raw if isinstance(raw, list) else []
    return {str(c["id"]): c for c in items if isinstance(c, dict) and c.get("id")}


def _prompt_set(c: dict | None) -> PromptSet | None:
    if not c or not isinstance(c.get("prompts"), dict):
        return None
    try:
        return PromptSet.from_dict(c["prompts"])
    except Exception:  # noqa: BLE001 - a malformed stored prompt only hides the diff
        return None


def _edit_label(c: dict) -> str:
    e = c.get("edit") or {}
    op = str(c.get("operator") or "initial")
    if op == "crossover":
        parents = (c.get("source") or {}).get("parents") or []
        return "crossover of " + " × ".join(map(str, parents)) if parents else "crossover"
    if not e:
        return "initial prompts" if op == "initial" else op
    label = f"{e.get('op', '?')} {e.get('module', '?')}.{e.get('segment', '?')}"
    src = c.get("source") or {}
    for key in ("hint", "skill"):
        if src.get(key):
            label += f" ({key} {src[key]})"
    return label


def _chain(cands: dict[str, dict], cid: str | None) -> list[str]:
    out: list[str] = []
    cur = cid
    while cur and cur in cands and cur not in out:
        out.append(cur)
        cur = cands[cur].get("parent")
    return list(reversed(out))


def _summary(records: Any) -> dict:
    """n, successes, success rate, Wilson interval, means and tokens of per-seed records."""
    from promptevo.evaluation.statistics import summarize_records

    recs = {s: r for s, r in records.items() if isinstance(r, dict)} if isinstance(records, dict) else {}
    return summarize_records(recs)


def _rate_text(records: Any) -> str:
    r = _summary(records)
    return f"{r['successes']}/{r['n']} = {r['success_rate']:.0%}" if r["n"] else "–"


def final_rows(data: dict) -> list[dict]:
    """The final table on the test split: report.json's rows when present, else computed from the
    checkpoint's per-seed test records (floor, baseline, initial, best)."""
    rep = data.get("report") or {}
    if isinstance(rep.get("rows"), list) and all(isinstance(r, dict) and "n" in r for r in rep["rows"]):
        return rep["rows"]
    ck = data.get("checkpoint") or {}
    cfg = ck.get("config") or {}
    cands = _candidates(ck)
    rows = []
    floor = (ck.get("final") or {}).get("floor")
    if floor:
        rows.append({"name": "random floor (random agent)", "candidate": None, **_summary(floor)})
    base = ck.get("baseline") or {}
    if base.get("test"):
        rows.append({"name": f"baseline ({base.get('agent', '?')})", "candidate": None, **_summary(base["test"])})
    for label, cid in ((f"initial ({cfg.get('agent', '?')}, {cfg.get('init', '?')})", ck.get("initial_id")),
                       (f"best ({cfg.get('agent', '?')}, {ck.get('best_id')})", ck.get("best_id"))):
        c = cands.get(str(cid))
        if c is not None and c.get("test"):
            rows.append({"name": label, "candidate": c["id"], **_summary(c["test"])})
    return rows


# =================================================================================================
# Sections
# =================================================================================================

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2430;
 margin:0;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:18px 24px 60px;background:#fff;min-height:100vh}
h1{font-size:22px;margin:6px 0 12px}h2{font-size:18px;margin:28px 0 10px;border-bottom:2px solid #e3e6eb;
 padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 10px}th,td{border:1px solid #d8dce3;padding:4px 8px;
 text-align:left;vertical-align:top}th{background:#eef1f5}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.best td{background:#eef4ff;font-weight:600}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0}dl.meta dt{font-weight:600;
 color:#4a5566}dl.meta dd{margin:0}
code,pre{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}
.note{color:#5b6472;font-style:italic}.warn{color:#8a4b00}
.split{display:inline-block;padding:1px 8px;border-radius:4px;background:#1a56c4;color:#fff;font-weight:700;
 font-size:12px;letter-spacing:.04em}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;font-weight:600;color:#fff}
.badge.promoted{background:#137333}.badge.accepted{background:#4caf50}.badge.rejected{background:#c62828}
.badge.stopped{background:#7a8494}.badge.vetoed{background:#8a4b00}.badge.other{background:#5b6472}
.best{outline:2px solid #1a56c4;border-radius:4px}
ul.tree,ul.tree ul{list-style:none;margin:0;padding-left:22px;border-left:1px dashed #b9c0cb}
ul.tree{padding-left:6px;border-left:none}ul.tree li{margin:6px 0}
.node{display:inline-block;padding:3px 6px}.node .why{color:#4a5566;display:block;max-width:900px}
.diff{border:1px solid #d8dce3;border-radius:4px;margin:8px 0;overflow:hidden}
.diff .head{background:#eef1f5;padding:3px 8px;font-weight:600}
.diff pre{margin:0;padding:0}.diff .l{display:block;padding:0 8px}
.diff .add{background:#e6ffec;color:#0a5c1f}.diff .del{background:#ffebe9;color:#8e1519}
.diff .hunk{background:#f1f4ff;color:#3b4a8c}.diff .file{color:#6a7280}
td ul{margin:0;padding-left:18px}
.effect-helped{color:#137333;font-weight:600}.effect-hurt{color:#c62828;font-weight:600}
.effect-missing{color:#8a4b00;font-weight:600}
svg.chart{width:100%;height:auto;max-width:1000px;display:block;margin:6px 0}
"""


def _section_header(data: dict) -> str:
    ck, rep = data.get("checkpoint") or {}, data.get("report") or {}
    cfg = ck.get("config") or rep.get("config") or {}
    usage = ck.get("usage") or rep.get("usage") or {}
    gens = [g for g in ck.get("generations") or [] if isinstance(g, dict)]
    splits = ck.get("splits") or {}
    model = cfg.get("model", "?")
    opt = cfg.get("optimizer_model") or model
    limits = [f"{label} ≤ {cfg[key]}" for key, label in (("budget_llm_calls", "calls"), ("budget_tokens", "tokens"),
                                                          ("budget_dollars", "$"), ("budget_episodes", "episodes"))
              if cfg.get(key) is not None]
    when = "–"
    if isinstance(ck.get("updated"), (int, float)):
        when = datetime.fromtimestamp(float(ck["updated"]), tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    wall = ck.get("wall_s") if isinstance(ck.get("wall_s"), (int, float)) else rep.get("wall_s")
    rows = [
        ("run", data.get("run", "")),
        ("task", cfg.get("task", "?")),
        ("agent", cfg.get("agent", "?")),
        ("models", model if opt == model else f"{model} (agent); {opt} (optimizer)"),
        ("initial prompts", cfg.get("prompts") or cfg.get("init", "?")),
        ("fitness", f"{cfg.get('fitness', '?')} (training seeds; accept rule {cfg.get('accept_rule', '?')}, "
                    f"promotion rule {cfg.get('promote_rule', '?')} on validation seeds)"),
        ("splits", f"train {len(splits.get('train') or [])} seeds, validation {len(splits.get('validation') or [])}, "
                   f"test {len(splits.get('test') or [])}"),
        ("generations", f"{sum(1 for g in gens if g.get('done'))} done of {cfg.get('generations', '?')} configured; "
                        f"{len(_candidates(ck))} candidates, {cfg.get('children', '?')} children each; "
                        f"operators {', '.join(map(str, cfg.get('operators') or [])) or '?'}"),
        ("budget used", f"{int(usage.get('calls') or 0):,} LLM calls, {int(usage.get('tokens') or 0):,} tokens, "
                        f"${float(usage.get('cost') or 0.0):.4f}; {int(ck.get('episodes_run') or 0):,} episodes"
                        + (f"; {float(wall):.0f} s" if isinstance(wall, (int, float)) else "")
                        + (f" (limits: {', '.join(limits)})" if limits else " (no limit set)")),
        ("stop reason", ck.get("stop_reason") or rep.get("stop_reason") or
         "not finished (interrupted or still running)"),
        ("phase", ck.get("phase", "?")),
        ("last update", when),
    ]
    out = [f"<h1>promptevo run {esc(data.get('run', ''))}</h1>", '<section id="header"><dl class="meta">']
    out += [f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows]
    out.append("</dl>")
    for w in ck.get("warnings") or []:
        out.append(f'<p class="warn">{esc(w)}</p>')
    for e in data.get("errors") or []:
        out.append(f'<p class="warn">warning: {esc(e)}</p>')
    out.append("</section>")
    return "\n".join(out)


def _comparison_line(name: str, c: dict) -> str:
    try:
        return (f"<li><b>{esc(name.replace('_', ' '))}</b>: {int(c['wins'])} seeds won, {int(c['losses'])} lost, "
                f"{int(c['ties'])} tied (n = {int(c.get('n', 0))}); mean difference {float(c['mean_diff']):+.3f}; "
                f"exact sign test (two-sided) <b>p = {float(c['p_value']):.3g}</b></li>")
    except (KeyError, TypeError, ValueError):
        return f"<li>{esc(name)}: unavailable</li>"


def _section_test(data: dict) -> str:
    rows = final_rows(data)
    rep = data.get("report") or {}
    n_test = len((data.get("checkpoint") or {}).get("splits", {}).get("test") or [])
    out = ['<section id="test"><h2><span class="split">TEST SPLIT</span> Final results</h2>',
           "<p>Every figure in this section is measured on the <b>test split</b>"
           + (f" ({n_test} seeds)" if n_test else "")
           + ", played once, after the last generation. Success rate with its 95% Wilson interval. The "
           "training and validation numbers further down are what the loop decided on, not scores.</p>"]
    if not any(int(r.get("n") or 0) for r in rows):
        out.append('<p class="note">The test split has not been played yet (the run stopped before its final '
                   'evaluation).</p></section>')
        return "\n".join(out)
    out.append("<table><thead><tr><th>prompts (test split)</th><th>candidate</th><th>n</th><th>successes</th>"
               "<th>success rate</th><th>95% CI</th><th>mean progress</th><th>mean return</th><th>tokens</th>"
               "</tr></thead><tbody>")
    for r in rows:
        lo, hi = (list(r.get("ci95") or [0.0, 0.0]) + [0.0, 0.0])[:2]
        best = ' class="best"' if str(r.get("name", "")).startswith("best") else ""
        out.append(f"<tr{best}><td>{esc(r.get('name'))}</td><td>{esc(r.get('candidate') or '–')}</td>"
                   f"<td class=num>{int(r.get('n') or 0)}</td><td class=num>{int(r.get('successes') or 0)}</td>"
                   + (f"<td class=num>{float(r.get('success_rate') or 0):.1%}</td>"
                      f"<td class=num>[{float(lo):.1%}, {float(hi):.1%}]</td>" if int(r.get("n") or 0) else
                      "<td class=num>no episode played</td><td class=num>–</td>") +
                   f"<td class=num>{float(r.get('mean_progress') or 0):.3f}</td>"
                   f"<td class=num>{float(r.get('mean_return') or 0):.3f}</td>"
                   f"<td class=num>{int(r.get('tokens') or 0):,}</td></tr>")
    out.append("</tbody></table>")
    comps = rep.get("comparisons") if isinstance(rep.get("comparisons"), dict) else {}
    if comps:
        out.append("<p>Paired comparisons on the same test seeds (success):</p><ul>")
        out += [_comparison_line(k, v) for k, v in comps.items() if isinstance(v, dict)]
        out.append("</ul>")
    else:
        out.append('<p class="note">Paired comparisons: not available (report.json missing).</p>')
    svg = charts.final_svg(rows)
    if svg:
        out.append(svg)
    out.append("</section>")
    return "\n".join(out)


def operator_counts(ck: dict) -> dict[str, dict[str, int]]:
    """Per proposal operator: children proposed, stopped early, accepted on training seeds, promoted."""
    out: dict[str, dict[str, int]] = {}
    for c in _candidates(ck).values():
        op = str(c.get("operator") or "initial")
        if op == "initial":
            continue
        row = out.setdefault(op, {"proposed": 0, "stopped": 0, "accepted": 0, "promoted": 0})
        st = c.get("status")
        row["proposed"] += 1
        row["stopped"] += st == "stopped"
        row["accepted"] += st in ACCEPTED
        row["promoted"] += st == "promoted"
    return dict(sorted(out.items()))


def _section_operators(data: dict) -> str:
    ck = data.get("checkpoint") or {}
    counts = operator_counts(ck)
    out = ['<section id="operators"><h2>Proposals per operator</h2>']
    if not counts:
        out.append('<p class="note">No child has been proposed yet.</p></section>')
        return "\n".join(out)
    out.append("<table><thead><tr><th>operator</th><th>proposed</th><th>stopped early (racing)</th>"
               "<th>accepted (training seeds)</th><th>promoted (validation gate)</th></tr></thead><tbody>")
    for op, v in counts.items():
        out.append(f"<tr><td>{esc(op)}</td>" + "".join(f"<td class=num>{v[k]}</td>" for k in
                                                         ("proposed", "stopped", "accepted", "promoted")) + "</tr>")
    tot = {k: sum(v[k] for v in counts.values()) for k in ("proposed", "stopped", "accepted", "promoted")}
    out.append("<tr><td><b>all</b></td>" + "".join(f"<td class=num><b>{tot[k]}</b></td>" for k in tot) + "</tr>")
    saved = sum(int(g.get("episodes_saved") or 0) for g in ck.get("generations") or [] if isinstance(g, dict))
    out.append(f"</tbody></table><p class=note>Racing saved {saved} training episodes.</p></section>")
    return "\n".join(out)


def _badge(status: Any) -> str:
    cls = _STATUS_CLASS.get(str(status), "other")
    return f'<span class="badge {cls}">{esc(status or "new")}</span>'


def _verdict_text(v: Any) -> str:
    if not isinstance(v, dict):
        return ""
    try:
        return (f"train Δ {float(v.get('mean_diff') or 0):+.3f} ({int(v.get('wins') or 0)}W/{int(v.get('losses') or 0)}"
                f"L/{int(v.get('ties') or 0)}T, n={int(v.get('n') or 0)})")
    except (TypeError, ValueError):
        return ""


def _section_decisions(data: dict) -> str:
    ck = data.get("checkpoint") or {}
    cands = _candidates(ck)
    gens = sorted((g for g in ck.get("generations") or [] if isinstance(g, dict)), key=lambda g: g.get("index", 0))
    out = ['<section id="decisions"><h2>Decisions per generation (training and validation seeds)</h2>',
           '<p class="note">Each generation reflects on the parent, proposes children, races them against the parent '
           "on paired training seeds (accept or reject) and sends the best accepted child to the validation gate "
           "(promote or not). These are the loop's decisions, not the final scores: see the test split above.</p>"]
    if not gens:
        out.append('<p class="note">No generation has been evaluated yet.</p></section>')
        return "\n".join(out)
    svg = charts.decisions_svg(charts.decision_data(ck))
    out.append(svg or '<p class="note">No child has been decided on yet.</p>')
    out.append("<table><thead><tr><th>gen</th><th>parent</th><th>mode / evidence</th><th>children (training "
               "verdict)</th><th>validation gate</th><th>optimizer tokens</th></tr></thead><tbody>")
    for rec in gens:
        kids = []
        for cid in rec.get("children") or []:
            c = cands.get(str(cid)) or {"id": cid}
            stop = ((c.get("race") or {}).get("stopped")) if isinstance(c.get("race"), dict) else None
            kids.append(f"<li><b>{esc(cid)}</b> <code>{esc(_edit_label(c))}</code> {_badge(c.get('status'))} "
                        f"{esc(_verdict_text(c.get('verdict')))}{f' — {esc(stop)}' if stop else ''}</li>")
        gate = rec.get("gate") if isinstance(rec.get("gate"), dict) else None
        if gate is None:
            gate_html = "–" if rec.get("done") else "not reached"
        elif not gate.get("candidate"):
            gate_html = f"<span class=note>{esc(gate.get('reason') or 'no child reached the gate')}</span>"
        else:
            top = cands.get(str(gate.get("candidate"))) if gate.get("candidate") else None
            verdict = "PROMOTED" if gate.get("promoted") else "not promoted"
            gate_html = (f"{esc(gate.get('candidate') or '–')}: <b>{verdict}</b>"
                         + (f"<br>validation {esc(_rate_text(top.get('validation')))}" if top else "")
                         + f"<br><span class=note>{esc(gate.get('reason', ''))}</span>")
        usage = rec.get("optimizer_usage") if isinstance(rec.get("optimizer_usage"), dict) else {}
        tok = sum(int((u or {}).get("prompt_tokens") or 0) + int((u or {}).get("completion_tokens") or 0)
                  for u in usage.values() if isinstance(u, dict))
        out.append(f"<tr><td class=num>{esc(rec.get('index'))}</td><td>{esc(rec.get('parent'))}</td>"
                   f"<td>{esc(rec.get('mode', ''))} / {esc(rec.get('evidence_kind') or '–')}</td>"
                   f"<td><ul>{''.join(kids) or '<li>none</li>'}</ul></td><td>{gate_html}</td>"
                   f"<td class=num>{tok:,}</td></tr>")
    out.append("</tbody></table></section>")
    return "\n".join(out)


def _node_html(c: dict, chain: set[str], best_id: str | None) -> str:
    parts = [f"<b>{esc(c['id'])}</b>", f"gen {esc(c.get('generation', 0))}", esc(c.get("operator") or "initial"),
             f"<code>{esc(_edit_label(c))}</code>", _badge(c.get("status"))]
    if (v := _verdict_text(c.get("verdict"))):
        parts.append(esc(v))
    race = c.get("race")
    if isinstance(race, dict) and race.get("stopped"):
        parts.append(f"stopped: {esc(race['stopped'])}")
    g = c.get("gate")
    if isinstance(g, dict):
        parts.append(f"validation gate → {'promoted' if g.get('accepted', g.get('promoted')) else 'not promoted'}"
                     f" ({esc(g.get('reason', ''))})")
    if c.get("test"):
        parts.append(f"test {esc(_rate_text(c['test']))}")
    if c["id"] == best_id:
        parts.append("<b>★ best</b>")
    rationale = (c.get("edit") or {}).get("rationale")
    why = f'<span class="why">{esc(rationale)}</span>' if rationale else ""
    return f'<span class="node{" best" if c["id"] in chain else ""}">' + " · ".join(parts) + why + "</span>"


def _section_lineage(data: dict) -> str:
    ck = data.get("checkpoint") or {}
    cands = _candidates(ck)
    best_id = ck.get("best_id")
    chain = _chain(cands, best_id)
    kids: dict[str | None, list[str]] = {}
    for cid, c in cands.items():
        par = c.get("parent")
        kids.setdefault(par if par in cands else None, []).append(cid)
    out = ['<section id="lineage"><h2>Lineage</h2>']
    if not cands:
        out.append('<p class="note">No candidates recorded.</p></section>')
        return "\n".join(out)
    if chain:
        out.append(f"<p>Best prompts: <b>{esc(best_id)}</b>; chain {esc(' → '.join(chain))} (outlined below).</p>")
    chain_set, seen = set(chain), set()

    def order(x: str) -> tuple:
        return (int(cands[x].get("generation") or 0), int(x[1:]) if x[1:].isdigit() else 0, x)

    def tree(cid: str, depth: int) -> list[str]:
        if cid in seen or depth > 500:
            return []
        seen.add(cid)
        lines = ["<li>" + _node_html(cands[cid], chain_set, best_id)]
        ch = sorted(kids.get(cid, []), key=order)
        if ch:
            lines.append("<ul>")
            for k in ch:
                lines += tree(k, depth + 1)
            lines.append("</ul>")
        lines.append("</li>")
        return lines

    out.append('<ul class="tree">')
    for root in sorted(kids.get(None, []), key=order):
        out += tree(root, 0)
    out.append("</ul></section>")
    return "\n".join(out)


def diff_html(old: PromptSet, new: PromptSet) -> str:
    """Segment-level unified diffs from ``old`` to ``new``, added/removed lines coloured."""
    diffs = diff_prompts(old, new)
    if not diffs:
        return '<p class="note">No segment differs: the best prompts are the initial ones.</p>'
    out = []
    for d in diffs:
        out.append(f'<div class="diff"><div class="head">{esc(d.kind)}: {esc(d.module)}.{esc(d.segment)}</div><pre>')
        for line in (d.unified() or "").splitlines():
            cls = ("file" if line.startswith(("+++", "---")) else "hunk" if line.startswith("@@")
                   else "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx")
            out.append(f'<span class="l {cls}">{esc(line) or " "}</span>')
        out.append("</pre></div>")
    return "".join(out)


def _section_diff(data: dict) -> str:
    ck = data.get("checkpoint") or {}
    cands = _candidates(ck)
    init, best = cands.get(str(ck.get("initial_id"))), cands.get(str(ck.get("best_id")))
    out = ['<section id="diff"><h2>Best prompts vs initial prompts</h2>']
    a, b = _prompt_set(init), _prompt_set(best)
    if a is None or b is None:
        out.append('<p class="note">The initial or best prompts are not available.</p>')
    else:
        out.append(f"<p>Diff {esc(init['id'])} → {esc(best['id'])}, by segment.</p>")
        out.append(diff_html(a, b))
    out.append("</section>")
    return "\n".join(out)


def _signature_rows(sigs: Any) -> dict[str, dict]:
    return {str(s.get("kind")): s for s in sigs or [] if isinstance(s, dict) and s.get("kind")}


def _section_signatures(data: dict) -> str:
    ck, rep = data.get("checkpoint") or {}, data.get("report") or {}
    sigs = (ck.get("final") or {}).get("signatures") or rep.get("signatures") or {}
    init, best = _signature_rows(sigs.get("initial")), _signature_rows(sigs.get("best"))
    out = ['<section id="signatures"><h2>Behaviour signatures on the test seeds</h2>']
    if not init and not best:
        out.append('<p class="note">No behaviour signature recorded (the test split has not been played, or no '
                   "episode showed one).</p></section>")
        return "\n".join(out)
    out.append("<table><thead><tr><th>signature</th><th>initial prompts: episodes</th><th>best prompts: episodes"
               "</th><th>detail</th></tr></thead><tbody>")

    def cell(s: dict | None) -> str:
        if not s:
            return "<td class=num>0</td>"
        try:
            return f"<td class=num>{int(s.get('episodes') or 0)} ({float(s.get('share') or 0):.0%})</td>"
        except (TypeError, ValueError):
            return "<td class=num>?</td>"

    for kind in list(dict.fromkeys([*init, *best])):
        s = best.get(kind) or init.get(kind) or {}
        out.append(f"<tr><td><code>{esc(kind)}</code></td>{cell(init.get(kind))}{cell(best.get(kind))}"
                   f"<td>{esc(s.get('detail', ''))}</td></tr>")
    out.append("</tbody></table></section>")
    return "\n".join(out)


def _attributions_table(attrs: list[dict]) -> str:
    out = ["<table><thead><tr><th>segment</th><th>effect</th><th>explanation</th><th>evidence</th></tr></thead><tbody>"]
    for at in attrs:
        ev = []
        for e in at.get("evidence") or []:
            if isinstance(e, dict):
                where = ", ".join(f"{k} {e[k]}" for k in ("seed", "step") if e.get(k) is not None)
                ev.append(f"<li>{esc(where)}{': ' if where and e.get('note') else ''}{esc(e.get('note', ''))}</li>")
        effect = str(at.get("effect") or "")
        cls = f' class="effect-{effect}"' if effect in _EFFECTS else ""
        mod = at.get("module", "?")
        seg = f"{mod}.{at.get('segment')}" if at.get("segment") else f"{mod} (module)"
        out.append(f"<tr><td><code>{esc(seg)}</code></td><td{cls}>{esc(effect)}</td>"
                   f"<td>{esc(at.get('explanation', ''))}</td><td><ul>{''.join(ev)}</ul></td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _analysis_html(g: int, blob: dict) -> list[str]:
    out = [f"<h3>Generation {esc(g)} — evidence about {esc(blob.get('parent', '?'))} "
           f"({esc(blob.get('mode', 'mutate'))}, evidence {esc(blob.get('evidence_kind') or '–')})</h3>"]
    seeds = [s for s in blob.get("evidence_seeds") or [] if isinstance(s, int)]
    if seeds:
        out.append(f'<p class="note">Training seeds played for evidence: {esc(", ".join(map(str, seeds)))}.</p>')
    sigs = [s for s in blob.get("signatures") or [] if isinstance(s, dict)]
    if sigs:
        out.append("<p>Behaviour signatures:</p><ul>" + "".join(
            f"<li><code>{esc(s.get('kind'))}</code>: {esc(s.get('episodes'))} episodes; {esc(s.get('detail', ''))}</li>"
            for s in sigs[:8]) + "</ul>")
    a = blob.get("analysis") if isinstance(blob.get("analysis"), dict) else None
    if a is not None:
        if not a.get("ok"):
            out.append(f'<p class="warn">Unusable analysis: {esc(a.get("error") or "no reply")}</p>')
            raw = str(a.get("raw") or "")
            if raw:
                out.append(f"<pre>{esc(raw[:_MAX_TEXT])}{'…' if len(raw) > _MAX_TEXT else ''}</pre>")
        attrs = [x for x in a.get("attributions") or [] if isinstance(x, dict)]
        if attrs:
            out.append(_attributions_table(attrs))
        elif a.get("ok"):
            out.append('<p class="note">No attributions.</p>')
        modes = [m for m in a.get("failure_modes") or [] if m]
        if modes:
            out.append("<p>Failure modes:</p><ul>" + "".join(f"<li>{esc(m)}</li>" for m in modes) + "</ul>")
        props = [p for p in a.get("proposals") or [] if isinstance(p, dict)]
        if props:
            out.append("<p>Proposals:</p><ul>" + "".join(
                f"<li><code>{esc(p.get('op'))} {esc(p.get('module'))}.{esc(p.get('segment'))}</code> "
                f"{esc(p.get('idea', ''))}</li>" for p in props) + "</ul>")
    for key, who in (("mutation", "Mutator"), ("pruning", "Pruner")):
        mut = blob.get(key)
        if isinstance(mut, dict):
            n_edits = len(mut.get("edits") or [])
            msg = f"{who}: {n_edits} edit(s) proposed"
            if mut.get("rejected"):
                msg += f", {len(mut['rejected'])} rejected as unusable"
            if mut.get("error") and not n_edits:
                msg += f" ({mut['error']})"
            out.append(f'<p class="note">{esc(msg)}.</p>')
    children = [c for c in blob.get("children") or [] if isinstance(c, dict)]
    if children:
        out.append("<p>Children: " + "; ".join(f"<b>{esc(c.get('id'))}</b> {esc(c.get('operator'))}"
                                                for c in children) + "</p>")
    return out


def _section_analyses(data: dict) -> str:
    analyses = data.get("analyses") or {}
    out = ['<section id="analyses"><h2>Evidence and analyses per generation</h2>']
    if not analyses:
        out.append('<p class="note">No analysis recorded yet.</p></section>')
        return "\n".join(out)
    for g in sorted(analyses):
        out += _analysis_html(g, analyses[g] if isinstance(analyses[g], dict) else {})
    out.append("</section>")
    return "\n".join(out)


# =================================================================================================
# Page
# =================================================================================================

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
SECTIONS = (_section_header, _section_test, _section_operators, _section_decisions, _section_lineage,
            _section_diff, _section_signatures, _section_analyses)


def render_html(run_data: dict) -> str:
    """The whole report page for the data of :func:`load_run` (pure; never raises for missing parts:
    a section that fails is replaced by a one-line note)."""
    sections = []
    for fn in SECTIONS:
        try:
            sections.append(fn(run_data))
        except Exception as e:  # noqa: BLE001 - a partial/odd run shows the other sections
            sections.append(f'<section><p class="warn">section {esc(fn.__name__.removeprefix("_section_"))} '
                            f"unavailable: {esc(type(e).__name__)}: {esc(_line(e))}</p></section>")
    title = f"promptevo report — {run_data.get('run', '')}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{_CSS}</style></head>\n<body><main>\n"
            + "\n".join(sections)
            + '\n<footer><p class="note">Generated by promptevo from checkpoint.json; static page, no scripts; charts '
              "drawn with matplotlib.</p></footer>\n</main></body></html>\n")


def write_html(run_dir: str | Path) -> Path:
    """(Re)write ``<run_dir>/report.html`` atomically; returns its path."""
    run_dir = Path(run_dir)
    page = render_html(load_run(run_dir))
    return write_text_atomic(run_dir / REPORT_HTML, page)
