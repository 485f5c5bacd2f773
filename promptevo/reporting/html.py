"""A static, self-contained HTML report of one optimization run: ``results/<run>/report.html``.

The page has no script, no external stylesheet, font or image (a Content-Security-Policy forbids
loading anything); plots are inline SVG and every piece of text from the run (prompt segments, LLM
rationales and explanations) is escaped with :func:`html.escape`.

Sections: run header (task, agent, models, init, budget used, stop reason); training score per
generation (incumbent and children, accepted/rejected, baseline line); held-out table (baseline vs
initial vs best, 95% Wilson intervals); lineage tree; segment diffs best vs initial; the analyzer's
attributions per generation. Partial runs (stopped early, no analysis yet, best never changed) show
whatever exists.

* :func:`load_run` reads a run folder into a plain dict (tolerant of missing pieces);
* :func:`render_html` is a pure function of that dict;
* :func:`write_html` writes ``report.html`` atomically; ``promptevo report RUN`` calls it.
"""

from __future__ import annotations

import html
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from promptevo.optim.engine import CHECKPOINT, EvolveError, _atomic_write, resolve_run_dir, summarize_scores
from promptevo.segments import PromptSet, diff_prompts

REPORT_HTML = "report.html"
_MAX_TEXT = 4000  # longest free text (raw replies) shown before it is cut


def esc(x: Any) -> str:
    """Escape any value for HTML text and attribute context."""
    return html.escape("" if x is None else str(x), quote=True)


# =================================================================================================
# Loading
# =================================================================================================


def _read_json(path: Path, errors: list[str]) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        errors.append(f"{path.name}: unreadable ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return None


def load_run(run_dir: str | Path) -> dict:
    """Everything the report shows, as plain data: ``{"run", "run_dir", "checkpoint", "report",
    "analyses": {generation: blob}, "ablation", "errors"}``. Only a missing or unreadable
    ``checkpoint.json`` is an error (:class:`EvolveError`); other files are optional."""
    run_dir = Path(run_dir)
    path = run_dir / CHECKPOINT
    if not path.exists():
        raise EvolveError(f"not a promptevo run (no {CHECKPOINT}): {run_dir}")
    try:
        ckpt = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise EvolveError(f"corrupt checkpoint {path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if not isinstance(ckpt, dict):
        raise EvolveError(f"corrupt checkpoint {path}: not a JSON object")
    errors: list[str] = []
    report = _read_json(run_dir / "report.json", errors) if (run_dir / "report.json").exists() else None
    ablation = _read_json(run_dir / "ablation.json", errors) if (run_dir / "ablation.json").exists() else None
    analyses: dict[int, dict] = {}
    adir = run_dir / "analyses"
    if adir.is_dir():
        for p in sorted(adir.glob("gen-*.json")):
            blob = _read_json(p, errors)
            if isinstance(blob, dict):
                try:
                    g = int(blob.get("generation", p.stem.split("-")[-1]))
                except (TypeError, ValueError):
                    continue
                analyses[g] = blob
    return {"run": run_dir.name, "run_dir": str(run_dir), "checkpoint": ckpt,
            "report": report if isinstance(report, dict) else None,
            "analyses": analyses, "ablation": ablation if isinstance(ablation, dict) else None, "errors": errors}


# =================================================================================================
# Data helpers (pure, tolerant of missing fields)
# =================================================================================================


def _score(rec: dict, metric: str) -> float:
    if metric == "success":
        return float(bool(rec.get("success")))
    if metric == "progression":
        return float(rec.get("progression") or 0.0)
    return float(rec.get("return", rec.get("return_", 0.0)) or 0.0)


def _mean_score(records: dict | None, metric: str, seeds: list | None = None) -> float | None:
    if not isinstance(records, dict):
        return None
    keep = {str(s) for s in seeds} if seeds is not None else None
    vals = [_score(r, metric) for s, r in records.items() if isinstance(r, dict) and (keep is None or str(s) in keep)]
    return sum(vals) / len(vals) if vals else None


def _candidates(ckpt: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for c in ckpt.get("candidates") or []:
        if isinstance(c, dict) and c.get("id"):
            out[str(c["id"])] = c
    return out


def _prompt_set(c: dict | None) -> PromptSet | None:
    if not c or not isinstance(c.get("prompts"), dict):
        return None
    try:
        return PromptSet.from_dict(c["prompts"])
    except Exception:  # noqa: BLE001 - a malformed stored prompt only hides the diff
        return None


def _edit_label(c: dict) -> str:
    e = c.get("edit") or {}
    if not e:
        return "initial prompts"
    return f"{e.get('op', '?')} {e.get('module', '?')}.{e.get('segment', '?')}"


def _chain(cands: dict[str, dict], cid: str | None) -> list[str]:
    out: list[str] = []
    cur = cid
    while cur and cur in cands and cur not in out:
        out.append(cur)
        cur = cands[cur].get("parent")
    return list(reversed(out))


def _fmt_num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _status_class(status: str | None) -> str:
    s = str(status or "new")
    if s == "promoted":
        return "promoted"
    if s in ("accepted", "not-promoted", "vetoed"):
        return "accepted"
    if s == "rejected":
        return "rejected"
    return "other"


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
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0}dl.meta dt{font-weight:600;
 color:#4a5566}dl.meta dd{margin:0}
code,pre{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0}
.note{color:#5b6472;font-style:italic}.warn{color:#8a4b00}
.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;font-weight:600;color:#fff}
.badge.promoted{background:#137333}.badge.accepted{background:#4caf50}.badge.rejected{background:#c62828}
.badge.other{background:#7a8494}.best{outline:2px solid #1a56c4;border-radius:4px}
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
svg text{font-family:system-ui,"DejaVu Sans",sans-serif}
"""


def _section_header(data: dict) -> str:
    ck, rep = data.get("checkpoint") or {}, data.get("report") or {}
    cfg = ck.get("config") or rep.get("config") or {}
    usage = ck.get("usage") or rep.get("usage") or {}
    gens = ck.get("generations") or []
    done = sum(1 for g in gens if isinstance(g, dict) and g.get("done"))
    stop = ck.get("stop_reason") or rep.get("stop_reason") or ""
    model = cfg.get("model", "?")
    opt = cfg.get("optimizer_model") or model
    limits = []
    for key, label in (("budget_llm_calls", "calls"), ("budget_tokens", "tokens"), ("budget_dollars", "$"),
                       ("budget_episodes", "episodes")):
        if cfg.get(key) is not None:
            limits.append(f"{label} ≤ {cfg[key]}")
    updated = ck.get("updated")
    when = ""
    if isinstance(updated, (int, float)):
        when = datetime.fromtimestamp(float(updated), tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = [
        ("run", data.get("run", "")),
        ("task", cfg.get("task", "?")),
        ("agent", cfg.get("agent", "?")),
        ("model", model if opt == model else f"{model} (agent); {opt} (optimizer)"),
        ("init", cfg.get("prompts") or cfg.get("init", "?")),
        ("generations", f"{done} done of {cfg.get('generations', '?')} configured; "
                        f"{len(ck.get('candidates') or [])} candidates, {cfg.get('children', '?')} children each"),
        ("selection", f"metric {cfg.get('metric', '?')}; accept rule {cfg.get('accept_rule', '?')} "
                      f"(margin {cfg.get('accept_margin', '?')}) on {cfg.get('episodes', '?')} paired training seeds; "
                      f"held-out gate on {cfg.get('heldout_episodes', '?')} seeds"),
        ("budget used", f"{int(usage.get('calls') or 0):,} LLM calls, {int(usage.get('tokens') or 0):,} tokens, "
                        f"${float(usage.get('cost') or 0.0):.4f}; {int(ck.get('episodes_run') or 0):,} episodes"
                        + (f" (limits: {', '.join(limits)})" if limits else " (no limit set)")),
        ("stop reason", stop or "not finished (interrupted or still running)"),
        ("last update", when or "–"),
    ]
    out = [f"<h1>promptevo run {esc(data.get('run', ''))}</h1>", '<section id="header"><dl class="meta">']
    out += [f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows]
    out.append("</dl>")
    for e in data.get("errors") or []:
        out.append(f'<p class="warn">warning: {esc(e)}</p>')
    out.append("</section>")
    return "\n".join(out)


def fitness_points(data: dict) -> dict:
    """Plot data: ``{"metric", "incumbent": [(gen, score, id)], "children": [(gen, score, id, status,
    label)], "baseline": score|None, "baseline_agent"}`` (training-seed means per generation)."""
    ck = data.get("checkpoint") or {}
    cfg = ck.get("config") or {}
    metric = str(cfg.get("metric") or "return")
    cands = _candidates(ck)
    inc: list[tuple] = []
    kids: list[tuple] = []
    for rec in sorted((g for g in ck.get("generations") or [] if isinstance(g, dict)), key=lambda g: g.get("index", 0)):
        g, seeds = int(rec.get("index", 0)), list(rec.get("seeds") or [])
        parent = cands.get(str(rec.get("parent")))
        if parent is not None:
            s = _mean_score(parent.get("train"), metric, seeds)
            if s is not None:
                inc.append((g, s, parent["id"]))
        for cid in rec.get("children") or []:
            c = cands.get(str(cid))
            if c is None:
                continue
            s = _mean_score(c.get("train"), metric, seeds)
            if s is not None and c.get("verdict") is not None:
                kids.append((g, s, c["id"], str(c.get("status") or ""), _edit_label(c)))
    base = ck.get("baseline") or {}
    return {"metric": metric, "incumbent": inc, "children": kids,
            "baseline": _mean_score(base.get("heldout"), metric) if base.get("heldout") else None,
            "baseline_agent": base.get("agent") or cfg.get("baseline")}


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    step = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(step)) if step > 0 else 1.0
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= step), default=step)
    start = math.floor(lo / step) * step
    out, v = [], start
    while v <= hi + 1e-9 and len(out) < 20:
        if v >= lo - 1e-9:
            out.append(round(v, 10))
        v += step
    return out


def fitness_svg(pts: dict, width: int = 1000, height: int = 340) -> str:
    """Inline SVG: incumbent line, children markers (accepted/promoted/rejected), baseline line."""
    inc, kids, base = pts["incumbent"], pts["children"], pts["baseline"]
    vals = [p[1] for p in inc] + [k[1] for k in kids] + ([base] if base is not None else [])
    gens = sorted({p[0] for p in inc} | {k[0] for k in kids})
    if not gens:
        return ""
    lo, hi = min(vals + [0.0]), max(vals)
    if pts["metric"] in ("success", "progression"):
        lo, hi = min(lo, 0.0), max(hi, 1.0)
    if hi - lo < 1e-9:
        hi = lo + 1.0
    pad = (hi - lo) * 0.06
    lo, hi = lo - (pad if lo < 0 else 0), hi + pad
    ml, mr, mt, mb = 64, 230, 18, 48
    pw, ph = width - ml - mr, height - mt - mb
    g0, g1 = gens[0] - 0.5, gens[-1] + 0.5

    def X(g: float) -> float:
        return ml + (g - g0) / (g1 - g0) * pw

    def Y(v: float) -> float:
        return mt + (hi - v) / (hi - lo) * ph

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
         f'role="img" aria-label="training score per generation">',
         f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fbfcfd" stroke="#9aa3af"/>']
    for t in _ticks(lo, hi):
        y = Y(t)
        o.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e9ee"/>')
        o.append(f'<line x1="{ml - 5}" x2="{ml}" y1="{y:.1f}" y2="{y:.1f}" stroke="#4a5566"/>')
        o.append(f'<text x="{ml - 8}" y="{y + 4:.1f}" font-size="11" text-anchor="end" fill="#333">{t:g}</text>')
    every = max(1, math.ceil(len(gens) / 20))
    for i, g in enumerate(gens):
        if i % every:
            continue
        x = X(g)
        o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{mt + ph}" y2="{mt + ph + 5}" stroke="#4a5566"/>')
        o.append(f'<text x="{x:.1f}" y="{mt + ph + 18}" font-size="11" text-anchor="middle" fill="#333">{g}</text>')
    o.append(f'<text x="{ml + pw / 2:.1f}" y="{height - 8}" font-size="12" text-anchor="middle" fill="#1d2430">'
             f'generation</text>')
    o.append(f'<text transform="translate(16 {mt + ph / 2:.1f}) rotate(-90)" font-size="12" text-anchor="middle" '
             f'fill="#1d2430">training score ({esc(pts["metric"])}, mean over seeds)</text>')
    if base is not None:
        y = Y(base)
        o.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e8710a" stroke-width="2" '
                 f'stroke-dasharray="7 5"><title>baseline {esc(pts["baseline_agent"])} held-out: {base:.3f}</title></line>')
    if inc:
        path = " ".join(f"{'M' if i == 0 else 'L'}{X(g):.1f},{Y(v):.1f}" for i, (g, v, _) in enumerate(inc))
        o.append(f'<path d="{path}" fill="none" stroke="#1a56c4" stroke-width="2"/>')
        for g, v, cid in inc:
            o.append(f'<rect x="{X(g) - 5:.1f}" y="{Y(v) - 5:.1f}" width="10" height="10" fill="#1a56c4">'
                     f'<title>gen {g}: incumbent {esc(cid)} = {v:.3f}</title></rect>')
    by_gen: dict[int, list] = {}
    for k in kids:
        by_gen.setdefault(k[0], []).append(k)
    for g, ks in by_gen.items():
        n = len(ks)
        for i, (_, v, cid, status, label) in enumerate(ks):
            x = X(g) + (0.0 if n == 1 else (-0.22 + 0.44 * i / (n - 1)) * (pw / (g1 - g0)))
            y = Y(v)
            tip = f"<title>gen {g}: {esc(cid)} ({esc(label)}) {esc(status)} = {v:.3f}</title>"
            cls = _status_class(status)
            if cls == "rejected":
                o.append(f'<g stroke="#c62828" stroke-width="2.2"><line x1="{x - 5:.1f}" y1="{y - 5:.1f}" '
                         f'x2="{x + 5:.1f}" y2="{y + 5:.1f}"/><line x1="{x - 5:.1f}" y1="{y + 5:.1f}" '
                         f'x2="{x + 5:.1f}" y2="{y - 5:.1f}"/>{tip}</g>')
            elif cls == "promoted":
                o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="7" fill="#137333" stroke="#0b3d1b" '
                         f'stroke-width="2">{tip}</circle>')
            elif cls == "accepted":
                o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="#4caf50">{tip}</circle>')
            else:
                o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="none" stroke="#7a8494" stroke-width="2">'
                         f'{tip}</circle>')
    # legend
    lx, ly = ml + pw + 16, mt + 8
    items = [("rect", "#1a56c4", "incumbent (parent)"), ("promoted", "#137333", "child: promoted"),
             ("accepted", "#4caf50", "child: accepted"), ("rejected", "#c62828", "child: rejected")]
    if base is not None:
        items.append(("base", "#e8710a", f"baseline {pts['baseline_agent'] or ''}"))
    for i, (kind, col, text) in enumerate(items):
        y = ly + i * 22
        if kind == "rect":
            o.append(f'<rect x="{lx}" y="{y}" width="10" height="10" fill="{col}"/>')
        elif kind == "rejected":
            o.append(f'<g stroke="{col}" stroke-width="2.2"><line x1="{lx}" y1="{y}" x2="{lx + 10}" y2="{y + 10}"/>'
                     f'<line x1="{lx}" y1="{y + 10}" x2="{lx + 10}" y2="{y}"/></g>')
        elif kind == "base":
            o.append(f'<line x1="{lx - 4}" x2="{lx + 14}" y1="{y + 5}" y2="{y + 5}" stroke="{col}" stroke-width="2" '
                     f'stroke-dasharray="5 3"/>')
        else:
            o.append(f'<circle cx="{lx + 5}" cy="{y + 5}" r="5.5" fill="{col}"/>')
        o.append(f'<text x="{lx + 20}" y="{y + 9}" font-size="11" fill="#1d2430">{esc(text[:34])}</text>')
        if kind == "base":
            o.append(f'<text x="{lx + 20}" y="{y + 23}" font-size="11" fill="#1d2430">(held-out seeds)</text>')
    o.append("</svg>")
    return "\n".join(o)


def _section_fitness(data: dict) -> str:
    pts = fitness_points(data)
    out = ['<section id="fitness"><h2>Training score per generation</h2>']
    svg = fitness_svg(pts)
    if not svg:
        out.append('<p class="note">No generation has been evaluated yet.</p>')
        if pts["baseline"] is not None:
            out.append(f"<p>Baseline {esc(pts['baseline_agent'])} held-out score ({esc(pts['metric'])}): "
                       f"{pts['baseline']:.3f}</p>")
    else:
        out.append(svg)
        out.append(f'<p class="note">Each generation plays the incumbent and its children on the same training seeds '
                   f'(mean {esc(pts["metric"])} shown); the dashed line is the baseline agent on the held-out seeds.</p>')
    out.append("</section>")
    return "\n".join(out)


def table_rows(data: dict) -> list[dict]:
    """Held-out rows (baseline, initial, best) computed from the checkpoint's per-seed records."""
    ck = data.get("checkpoint") or {}
    cfg = ck.get("config") or {}
    cands = _candidates(ck)
    metric = str(cfg.get("metric") or "return")
    rows: list[dict] = []
    base = ck.get("baseline") or {}
    if base.get("heldout"):
        rows.append({"name": f"baseline ({base.get('agent', '?')})", "candidate": None,
                     **summarize_scores(base["heldout"]), "mean_metric": _mean_score(base["heldout"], metric)})
    init_id, best_id = ck.get("initial_id"), ck.get("best_id")
    for label, cid in ((f"initial ({cfg.get('agent', '?')}, {cfg.get('init', '?')})", init_id),
                       (f"best ({cfg.get('agent', '?')})", best_id)):
        c = cands.get(str(cid)) if cid else None
        if c is None:
            continue
        ho = c.get("heldout") or {}
        rows.append({"name": label, "candidate": c["id"], **summarize_scores(ho), "mean_metric": _mean_score(ho, metric)})
    return rows


def _ci_bar(lo: float, hi: float, p: float) -> str:
    w = 120
    return (f'<svg width="{w}" height="12" viewBox="0 0 {w} 12" aria-hidden="true">'
            f'<rect x="0" y="5" width="{w}" height="2" fill="#e3e6eb"/>'
            f'<rect x="{lo * w:.1f}" y="2" width="{max(1.0, (hi - lo) * w):.1f}" height="8" fill="#9bb7ea"/>'
            f'<rect x="{p * w - 1:.1f}" y="0" width="2" height="12" fill="#1a56c4"/></svg>')


def _section_table(data: dict) -> str:
    ck = data.get("checkpoint") or {}
    cfg = ck.get("config") or {}
    metric = str(cfg.get("metric") or "return")
    rows = table_rows(data)
    out = ['<section id="table"><h2>Held-out results</h2>']
    if not any(r["n"] for r in rows):
        out.append('<p class="note">No held-out episodes recorded yet.</p>')
    extra = metric != "return"  # a second score column only when selection used another metric
    out.append(f"<table><thead><tr><th>prompts</th><th>candidate</th><th>n</th><th>success</th><th>95% Wilson CI</th>"
               f"<th></th><th>mean return</th>{f'<th>mean {esc(metric)}</th>' if extra else ''}<th>tokens</th>"
               f"</tr></thead><tbody>")
    for r in rows:
        lo, hi = r["ci95"]
        has = r["n"] > 0
        out.append(
            f"<tr><td>{esc(r['name'])}</td><td>{esc(r['candidate'] or '–')}</td><td class=num>{r['n']}</td>"
            f"<td class=num>{(str(r['successes']) + '/' + str(r['n']) + ' = ' + format(r['success_rate'], '.1%')) if has else '–'}</td>"
            f"<td class=num>{f'[{lo:.1%}, {hi:.1%}]' if has else '–'}</td>"
            f"<td>{_ci_bar(lo, hi, r['success_rate']) if has else ''}</td>"
            f"<td class=num>{_fmt_num(r['mean_return']) if has else '–'}</td>"
            + (f"<td class=num>{_fmt_num(r['mean_metric'])}</td>" if extra else "")
            + f"<td class=num>{r['tokens']:,}</td></tr>")
    out.append("</tbody></table>")
    best_ho = (_candidates(ck).get(str(ck.get("best_id"))) or {}).get("heldout") or {}
    hs = sorted(int(s) for s in best_ho if str(s).lstrip("-").isdigit())
    if hs:
        out.append(f'<p class="note">Held-out seeds: {esc(", ".join(map(str, hs)))}.</p>')
    abl = data.get("ablation") or {}
    if isinstance(abl.get("rows"), list) and abl["rows"]:
        out.append(f"<h3>Segment ablation of {esc(abl.get('candidate', 'the best prompts'))} (held-out seeds)</h3>")
        out.append("<table><thead><tr><th>segment removed</th><th>n</th><th>change in success</th>"
                   "<th>change in return</th></tr></thead><tbody>")
        for r in abl["rows"]:
            if not isinstance(r, dict):
                continue
            try:
                ds, dr = f"{float(r.get('delta_success', 0)):+.1%}", f"{float(r.get('delta_return', 0)):+.3f}"
            except (TypeError, ValueError):
                ds = dr = "?"
            out.append(f"<tr><td>{esc(r.get('module'))}.{esc(r.get('segment'))}</td><td class=num>{esc(r.get('n'))}</td>"
                       f"<td class=num>{ds}</td><td class=num>{dr}</td></tr>")
        out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


def _node_html(c: dict, best_chain: set[str], best_id: str | None) -> str:
    cls = _status_class(c.get("status"))
    parts = [f"<b>{esc(c['id'])}</b>", f"gen {esc(c.get('generation', 0))}", f"<code>{esc(_edit_label(c))}</code>",
             f'<span class="badge {cls}">{esc(c.get("status") or "new")}</span>']
    v = c.get("verdict")
    if isinstance(v, dict):
        try:
            parts.append(f"train Δ {float(v.get('mean_diff', 0)):+.3f} ({esc(v.get('wins'))}W/{esc(v.get('losses'))}L/"
                         f"{esc(v.get('ties'))}T, n={esc(v.get('n'))})")
        except (TypeError, ValueError):
            pass
    p = c.get("promotion")
    if isinstance(p, dict):
        try:
            parts.append(f"held-out Δ {float(p.get('mean_diff', 0)):+.3f} → "
                         f"{'promoted' if p.get('accepted') else 'not promoted'}")
        except (TypeError, ValueError):
            pass
    if c["id"] == best_id:
        parts.append("<b>★ best</b>")
    rationale = (c.get("edit") or {}).get("rationale")
    why = f'<span class="why">{esc(rationale)}</span>' if rationale else ""
    extra = " best" if c["id"] in best_chain else ""
    return f'<span class="node{extra}">' + " · ".join(parts) + why + "</span>"


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
        out.append(f"<p>Best prompts: <b>{esc(best_id)}</b>; chain {esc(' → '.join(chain))} "
                   f"(outlined below).</p>")
    chain_set = set(chain)
    seen: set[str] = set()

    def tree(cid: str, depth: int) -> list[str]:
        if cid in seen or depth > 500:
            return []
        seen.add(cid)
        lines = ["<li>" + _node_html(cands[cid], chain_set, best_id)]
        ch = sorted(kids.get(cid, []), key=lambda x: (int(cands[x].get("generation") or 0), x))
        if ch:
            lines.append("<ul>")
            for k in ch:
                lines += tree(k, depth + 1)
            lines.append("</ul>")
        lines.append("</li>")
        return lines

    out.append('<ul class="tree">')
    for root in kids.get(None, []):
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
            if line.startswith(("+++", "---")):
                cls = "file"
            elif line.startswith("@@"):
                cls = "hunk"
            elif line.startswith("+"):
                cls = "add"
            elif line.startswith("-"):
                cls = "del"
            else:
                cls = "ctx"
            out.append(f'<span class="l {cls}">{esc(line) or " "}</span>')
        out.append("</pre></div>")
    return "".join(out)


def _section_diff(data: dict) -> str:
    ck = data.get("checkpoint") or {}
    cands = _candidates(ck)
    init = cands.get(str(ck.get("initial_id")))
    best = cands.get(str(ck.get("best_id")))
    out = ['<section id="diff"><h2>Best prompts vs initial prompts</h2>']
    a, b = _prompt_set(init), _prompt_set(best)
    if a is None or b is None:
        out.append('<p class="note">The initial or best prompts are not available.</p>')
    else:
        out.append(f"<p>Diff {esc(init['id'])} → {esc(best['id'])}, by segment.</p>")
        out.append(diff_html(a, b))
    out.append("</section>")
    return "\n".join(out)


def _section_analyses(data: dict) -> str:
    analyses = data.get("analyses") or {}
    out = ['<section id="analyses"><h2>Analyzer attributions per generation</h2>']
    if not analyses:
        out.append('<p class="note">No analysis recorded yet.</p></section>')
        return "\n".join(out)
    for g in sorted(analyses):
        blob = analyses[g] or {}
        a = blob.get("analysis") if isinstance(blob.get("analysis"), dict) else {}
        out.append(f"<h3>Generation {esc(g)} — analysis of {esc(blob.get('parent', '?'))}</h3>")
        if not a.get("ok"):
            out.append(f'<p class="warn">Unusable analysis: {esc(a.get("error") or "no reply")}</p>')
            raw = str(a.get("raw") or "")
            if raw:
                out.append(f"<pre>{esc(raw[:_MAX_TEXT])}{'…' if len(raw) > _MAX_TEXT else ''}</pre>")
        attrs = [x for x in a.get("attributions") or [] if isinstance(x, dict)]
        if attrs:
            out.append("<table><thead><tr><th>segment</th><th>effect</th><th>explanation</th><th>evidence</th>"
                       "</tr></thead><tbody>")
            for at in attrs:
                ev = []
                for e in at.get("evidence") or []:
                    if isinstance(e, dict):
                        where = ", ".join(f"{k} {e[k]}" for k in ("seed", "step") if e.get(k) is not None)
                        ev.append(f"<li>{esc(where)}{': ' if where and e.get('note') else ''}{esc(e.get('note', ''))}</li>")
                effect = str(at.get("effect") or "")
                seg = f"{at.get('module', '?')}.{at.get('segment')}" if at.get("segment") else f"{at.get('module', '?')} (module)"
                out.append(f"<tr><td><code>{esc(seg)}</code></td><td class=\"effect-{esc(effect)}\">{esc(effect)}</td>"
                           f"<td>{esc(at.get('explanation', ''))}</td><td><ul>{''.join(ev)}</ul></td></tr>")
            out.append("</tbody></table>")
        elif a.get("ok"):
            out.append('<p class="note">No attributions.</p>')
        modes = [m for m in a.get("failure_modes") or [] if m]
        if modes:
            out.append("<p>Failure modes:</p><ul>" + "".join(f"<li>{esc(m)}</li>" for m in modes) + "</ul>")
        props = [p for p in a.get("proposals") or [] if isinstance(p, dict)]
        if props:
            out.append("<p>Proposals:</p><ul>" + "".join(
                f"<li><code>{esc(p.get('op'))} {esc(p.get('module'))}.{esc(p.get('segment'))}</code> {esc(p.get('idea', ''))}</li>"
                for p in props) + "</ul>")
        mut = blob.get("mutation")
        if isinstance(mut, dict):
            n_edits = len(mut.get("edits") or [])
            msg = f"Mutator: {n_edits} edit(s) proposed"
            if mut.get("rejected"):
                msg += f", {len(mut['rejected'])} rejected as unusable"
            if mut.get("error") and not n_edits:
                msg += f" ({mut['error']})"
            out.append(f'<p class="note">{esc(msg)}.</p>')
    out.append("</section>")
    return "\n".join(out)


# =================================================================================================
# Page
# =================================================================================================

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def render_html(run_data: dict) -> str:
    """The whole report page for the data of :func:`load_run` (pure; never raises for missing parts:
    a section that fails is replaced by a one-line note)."""
    sections = []
    for fn in (_section_header, _section_fitness, _section_table, _section_lineage, _section_diff, _section_analyses):
        try:
            sections.append(fn(run_data))
        except Exception as e:  # noqa: BLE001 - a partial/odd run shows the other sections
            sections.append(f'<section><p class="warn">section {esc(fn.__name__.removeprefix("_section_"))} '
                            f'unavailable: {esc(type(e).__name__)}: {esc(e)}</p></section>')
    title = f"promptevo report — {run_data.get('run', '')}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{_CSS}</style></head>\n<body><main>\n"
            + "\n".join(sections)
            + '\n<footer><p class="note">Generated by promptevo from checkpoint.json; static page, no scripts.</p>'
              "</footer>\n</main></body></html>\n")


def write_html(run_dir: str | Path) -> Path:
    """(Re)write ``<run_dir>/report.html`` atomically; returns its path."""
    run_dir = Path(run_dir)
    page = render_html(load_run(run_dir))
    path = run_dir / REPORT_HTML
    _atomic_write(path, page)
    return path


def cli_main(args: list[str]) -> int:
    """Entry point of ``promptevo report RUN [--results-dir DIR]``; returns the exit code."""
    import argparse

    from rich.console import Console

    p = argparse.ArgumentParser(prog="promptevo report",
                                description="(Re)write results/<run>/report.html: a static HTML report of a run.")
    p.add_argument("run", help="run folder, or a run name under --results-dir")
    p.add_argument("--results-dir", default="results", help="where run folders are (default results)")
    try:
        ns = p.parse_args(list(args))
    except SystemExit as e:
        return int(e.code or 0)
    run_dir = resolve_run_dir(ns.run, ns.results_dir)
    try:
        path = write_html(run_dir)
    except (EvolveError, OSError) as e:
        from rich.markup import escape

        Console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return 2
    Console().print(str(path), highlight=False, markup=False, soft_wrap=True)
    return 0
