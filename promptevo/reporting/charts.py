"""Charts of the HTML report, drawn with matplotlib and returned as inline SVG text.

Only the object-oriented API is used (:class:`matplotlib.figure.Figure` with the SVG canvas): no pyplot, no
GUI backend, no global state touched, so it runs headless and in threads. The SVG keeps its text as
``<text>`` elements (``svg.fonttype = none``; matplotlib escapes the text) and is deterministic (fixed hash
salt, no date), so the same run gives the same page. Text that comes from the run goes through
:func:`_plain` so that a ``$`` never turns into mathtext.

* :func:`decision_data` / :func:`decisions_svg` -- what the loop decided per generation: each child's mean
  paired difference to its parent on the training seeds (marker by outcome, the acceptance margin as a
  line) and, below, the validation success rate of the best prompts after each generation and of each
  child that reached the validation gate;
* :func:`final_svg` -- success rate with its 95% interval of each row of the final (test split) table.
"""

from __future__ import annotations

import io
import re
from typing import Any

# outcome -> (colour, marker, label); the same colours as the badges of the page
STATUS_STYLE: dict[str, tuple[str, str, str]] = {
    "promoted": ("#137333", "*", "promoted by the validation gate"),
    "accepted": ("#4caf50", "o", "accepted on training seeds"),
    "not-promoted": ("#e08a00", "o", "accepted, not promoted"),
    "vetoed": ("#8a4b00", "D", "accepted, vetoed by the backtest"),
    "rejected": ("#c62828", "X", "rejected on training seeds"),
    "stopped": ("#7a8494", "v", "stopped early by racing"),
}
BEST_COLOUR = "#1a56c4"


def _plain(text: Any) -> str:
    """Run-provided text for a matplotlib label: no mathtext, no control characters."""
    s = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", " ", str(text))
    return s.replace("$", r"\$")


def _rate(records: Any) -> float | None:
    if not isinstance(records, dict) or not records:
        return None
    vals = [bool(r.get("success")) for r in records.values() if isinstance(r, dict)]
    return sum(vals) / len(vals) if vals else None


def decision_data(ck: dict) -> dict:
    """Plot data from a checkpoint dict: ``{"children": [(gen, mean_diff, id, status, operator)],
    "margin", "best": [(gen, validation rate, id)], "gated": [(gen, validation rate, id, promoted)],
    "fitness"}``."""
    cfg = ck.get("config") or {}
    cands = ck.get("candidates") if isinstance(ck.get("candidates"), dict) else {}
    gens = sorted((g for g in ck.get("generations") or [] if isinstance(g, dict)), key=lambda g: g.get("index", 0))
    children: list[tuple] = []
    best: list[tuple] = []
    gated: list[tuple] = []
    init = cands.get(str(ck.get("initial_id", "c0")))
    if isinstance(init, dict) and _rate(init.get("validation")) is not None:
        best.append((0, _rate(init.get("validation")), init.get("id", "c0")))
    for rec in gens:
        g = int(rec.get("index") or 0)
        for cid in rec.get("children") or []:
            c = cands.get(str(cid))
            v = (c or {}).get("verdict")
            if isinstance(v, dict) and isinstance(v.get("mean_diff"), (int, float)):
                children.append((g, float(v["mean_diff"]), str(cid), str(c.get("status") or ""),
                                 str(c.get("operator") or "")))
        gate = rec.get("gate") if isinstance(rec.get("gate"), dict) else {}
        top = cands.get(str(gate.get("candidate"))) if gate.get("candidate") else None
        promoted = bool(gate.get("promoted"))
        if top is not None and _rate(top.get("validation")) is not None:
            gated.append((g, _rate(top.get("validation")), top.get("id"), promoted))
        holder = top if (promoted and top is not None) else cands.get(str(rec.get("parent")))
        if rec.get("done") and isinstance(holder, dict) and _rate(holder.get("validation")) is not None:
            best.append((g, _rate(holder.get("validation")), holder.get("id")))
    margin = cfg.get("accept_margin") if cfg.get("accept_rule", "margin") == "margin" else None
    return {"children": children, "margin": margin if isinstance(margin, (int, float)) else None,
            "best": best, "gated": gated, "fitness": str(cfg.get("fitness") or "score")}


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    fig.patch.set_facecolor("white")
    return fig


def svg_text(fig: Any, salt: str) -> str:
    """The figure as an ``<svg>`` element (no XML prolog or doctype) for inlining in HTML."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"promptevo-{salt}",
                                "svg.image_inline": True}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    start = text.find("<svg")
    if start < 0:
        return ""
    text = text[start:]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    # scale with the page: keep the viewBox, let CSS size it
    return re.sub(r'^<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="chart"', text, count=1)


def decisions_svg(data: dict) -> str:
    """Two panels over the generations (empty string when no generation has decided anything)."""
    kids, best, gated = data["children"], data["best"], data["gated"]
    gens = sorted({k[0] for k in kids} | {b[0] for b in best} | {x[0] for x in gated})
    if not kids and not gated:
        return ""
    fig = _figure(9.0, 5.6)
    ax_t, ax_v = fig.subplots(2, 1, sharex=True, height_ratios=[1.15, 1.0])
    # training: mean paired difference child - parent, jittered within a generation
    per_gen: dict[int, int] = {}
    for k in kids:
        per_gen[k[0]] = per_gen.get(k[0], 0) + 1
    seen: dict[int, int] = {}
    used: set[str] = set()
    for g, diff, cid, status, _op in kids:
        i = seen.get(g, 0)
        seen[g] = i + 1
        n = per_gen[g]
        x = g + (i - (n - 1) / 2) * min(0.5 / max(n - 1, 1), 0.12)
        colour, marker, label = STATUS_STYLE.get(status, ("#5b6472", "s", status or "other"))
        ax_t.scatter([x], [diff], s=150 if marker == "*" else 48, c=colour, marker=marker, zorder=3,
                     edgecolors="white" if marker != "X" else "none", linewidths=0.6,
                     label=None if status in used else _plain(label))
        used.add(status)
        ax_t.annotate(_plain(cid), (x, diff), textcoords="offset points", xytext=(5, 4), fontsize=7.5, color="#4a5566")
    if data["margin"] is not None:
        ax_t.axhline(float(data["margin"]), color="#5b6472", linestyle="--", linewidth=1,
                     label=f"acceptance margin ({float(data['margin']):+g})")
    ax_t.axhline(0.0, color="#c9ced6", linewidth=0.8, zorder=0)
    ax_t.set_ylabel(_plain(f"child - parent\nmean {data['fitness']}, training seeds"), fontsize=9)
    ax_t.set_title("Training seeds: paired difference of each child to its parent", fontsize=10, loc="left")
    if kids:
        ax_t.legend(fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    # validation: best prompts after each generation (step line) and the gated children
    if best:
        xs = [b[0] for b in best]
        ys = [b[1] for b in best]
        ax_v.step(xs, ys, where="post", color=BEST_COLOUR, linewidth=2, label="best prompts after the generation")
        ax_v.plot(xs, ys, "o", color=BEST_COLOUR, markersize=4)
    for g, rate, cid, promoted in gated:
        ax_v.scatter([g + 0.08], [rate], s=150 if promoted else 48, marker="*" if promoted else "o",
                     c=STATUS_STYLE["promoted" if promoted else "not-promoted"][0], zorder=3, edgecolors="white",
                     linewidths=0.6)
        ax_v.annotate(_plain(cid), (g + 0.08, rate), textcoords="offset points", xytext=(5, 4), fontsize=7.5,
                      color="#4a5566")
    if any(not x[3] for x in gated):
        ax_v.scatter([], [], s=48, marker="o", c=STATUS_STYLE["not-promoted"][0], label="gated child, not promoted")
    if any(x[3] for x in gated):
        ax_v.scatter([], [], s=120, marker="*", c=STATUS_STYLE["promoted"][0], label="gated child, promoted")
    ax_v.set_ylim(-0.04, 1.04)
    ax_v.set_ylabel("success rate\nvalidation seeds", fontsize=9)
    ax_v.set_title("Validation seeds: the promotion gate", fontsize=10, loc="left")
    ax_v.set_xlabel("generation", fontsize=9)
    if best or gated:
        ax_v.legend(fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax_v.set_xticks(gens if len(gens) <= 25 else gens[:: max(1, len(gens) // 20)])
    ax_v.set_xlim(min(gens) - 0.5, max(gens) + 0.5)
    for ax in (ax_t, ax_v):
        ax.grid(True, axis="y", color="#eceff3")
        ax.tick_params(labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    return svg_text(fig, "decisions")


def final_svg(rows: list[dict]) -> str:
    """Success rate and 95% interval per row of the test table (empty string when no row has episodes)."""
    rows = [r for r in rows if isinstance(r, dict) and int(r.get("n") or 0) > 0]
    if not rows:
        return ""
    fig = _figure(9.0, 0.55 * len(rows) + 1.1)
    ax = fig.subplots()
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows, strict=True):
        p = float(r.get("success_rate") or 0.0)
        lo, hi = (list(r.get("ci95") or [p, p]) + [p, p])[:2]
        colour = BEST_COLOUR if str(r.get("name", "")).startswith("best") else "#5b6472"
        ax.errorbar([p], [y], xerr=[[max(0.0, p - float(lo))], [max(0.0, float(hi) - p)]], fmt="o", color=colour,
                    ecolor=colour, elinewidth=2, capsize=4, markersize=6)
        ax.annotate(f"{p:.0%} (n={int(r['n'])})", (p, y), textcoords="offset points", xytext=(0, 7), ha="center",
                    fontsize=7.5, color="#1d2430")
    ax.set_yticks(ys, [_plain(r.get("name", "?")) for r in rows], fontsize=8)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("success rate on the TEST split, with 95% Wilson interval", fontsize=9)
    ax.xaxis.set_major_formatter(_percent())
    ax.grid(True, axis="x", color="#eceff3")
    ax.tick_params(axis="x", labelsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return svg_text(fig, "test")


def _percent() -> Any:
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0, decimals=0, symbol="%")


__all__ = ["STATUS_STYLE", "decision_data", "decisions_svg", "svg_text", "final_svg"]
