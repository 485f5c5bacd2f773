"""The ``delete`` operator: deletion guided by counterfactual ablation.

The parent is played without each of a few candidate segments on some of the evidence seeds (through the
engine's store-backed ``evaluate``, so episodes already played are not played again); the segments whose
removal did not lower the score are proposed for deletion, best first. Segments the analyzer said hurt are
ablated first, then the longest prunable ones; deletions tried earlier in the run are skipped. Each child is
then raced on fresh training seeds like any other.
"""

from __future__ import annotations

from promptevo.optim.evidence import Evidence
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.pruner import prunable_segments
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.segments import Edit, PromptSet, apply_edit

#: how many segments are ablated per generation, and on how many evidence seeds
ABLATE_SEGMENTS = 3
ABLATE_SEEDS = 4


class AblationOperator:
    """``delete``: segments whose removal cost nothing on a few evidence seeds, proposed for deletion."""

    name = "delete"
    author = "machine"
    reads = ("analysis", "episodes")
    summary = ("counterfactual ablation: the parent played without each of a few segments on evidence seeds; "
               "segments whose removal cost nothing are deleted")

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        p = ctx.proposal
        if p.evaluate is None or not p.evidence_seeds:
            return []
        candidates = prunable_segments(parent)
        hurt = []
        for a in ((Evidence.of(evidence).analysis or {}).get("attributions") or []):
            if a.get("effect") == "hurt" and a.get("segment"):
                hurt.append((a["module"], a["segment"]))
        tried_del = {((h.get("edit") or {}).get("module"), (h.get("edit") or {}).get("segment"))
                     for h in p.history if (h.get("edit") or {}).get("op") == "delete"}
        ordered = [t for t in hurt if t in candidates] + sorted(
            (t for t in candidates if t not in hurt),
            key=lambda t: -len(parent.module(t[0]).get(t[1]) or ""))
        ordered = [t for t in dict.fromkeys(ordered) if t not in tried_del][:ABLATE_SEGMENTS]
        seeds = list(p.evidence_seeds)[:ABLATE_SEEDS]
        base = p.evaluate(parent, seeds)
        rows = []
        for module, seg in ordered:
            edit = Edit(op="delete", module=module, segment=seg, rationale="counterfactual ablation")
            try:
                child = apply_edit(parent, edit)
            except ValueError:
                continue
            if child.fingerprint() in ctx.tried:
                continue
            scores = p.evaluate(child, seeds)
            common = [s for s in seeds if s in scores and s in base]
            delta = sum(scores[s] - base[s] for s in common) / len(common) if common else 0.0
            rows.append({"module": module, "segment": seg, "delta": delta, "n": len(common), "child": child})
        ctx.record["ablation"] = [{k2: v for k2, v in r.items() if k2 != "child"} for r in rows]
        out = []
        for r in sorted(rows, key=lambda r: -r["delta"]):
            if len(out) >= k or r["delta"] < 0:
                break
            ctx.tried.add(r["child"].fingerprint())
            edit = Edit(op="delete", module=r["module"], segment=r["segment"],
                        rationale=f"ablation on {r['n']} seeds: removing it changed the score by {r['delta']:+.2f}")
            out.append(Proposal(r["child"], "delete", edit.to_dict(),
                                {"ablation": {"delta": r["delta"], "n": r["n"], "seeds": seeds}}))
        return out


register_operator(AblationOperator())

__all__ = ["ABLATE_SEEDS", "ABLATE_SEGMENTS", "AblationOperator"]
