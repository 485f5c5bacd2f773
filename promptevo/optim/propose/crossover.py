"""Crossover of two accepted lineages: a child that takes, segment by segment, the version of one parent
or the other (uniform crossover over named segments; seeded, so a run is reproducible).

Segments present in only one parent are inherited with probability 1/2; module order and the segment
order of the first parent are kept, and segments only the second parent has go before the answer-format
segment. The child must differ from both parents and from every candidate tried.
"""

from __future__ import annotations

import random

from promptevo.optim.evidence import Evidence
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.segments import Prompt, PromptSet, Segment


def crossover(a: PromptSet, b: PromptSet, rng: random.Random) -> PromptSet | None:
    """A child mixing ``a`` and ``b``, or None when they share no module or the child equals a parent."""
    bd = b.as_dict()
    modules: list[tuple[str, Prompt]] = []
    for name, pa in a.modules:
        pb = bd.get(name)
        if pb is None:
            modules.append((name, pa))
            continue
        segs: list[Segment] = []
        b_only = [s for s in pb.segments if s.name not in pa.names]
        for s in pa.segments:
            other = pb.get(s.name)
            if other is None:
                if rng.random() < 0.5:
                    segs.append(s)
            else:
                segs.append(Segment(s.name, other if rng.random() < 0.5 else s.text))
        extra = [s for s in b_only if rng.random() < 0.5]
        fmt = next((i for i, s in enumerate(segs) if s.name in ("format", "output_format")), len(segs))
        segs[fmt:fmt] = extra
        if not segs:
            segs = list(pa.segments)
        modules.append((name, Prompt(tuple(segs))))
    child = PromptSet(tuple(modules), a.meta)
    if child.fingerprint() in (a.fingerprint(), b.fingerprint()):
        return None
    return child


def propose_crossovers(parent: PromptSet, archive: list[tuple[str, PromptSet]], *, parent_id: str, n: int,
                       tried: set[str], seed: int) -> list[tuple[str, PromptSet]]:
    """Up to ``n`` (other parent's id, child) pairs crossing ``parent`` with accepted candidates of other
    lineages (newest first)."""
    rng = random.Random(seed)
    out: list[tuple[str, PromptSet]] = []
    for other_id, other in reversed(archive):
        if len(out) >= n:
            break
        if other_id == parent_id or other.fingerprint() == parent.fingerprint():
            continue
        for _ in range(4):  # a few draws: some mixes equal a parent or a tried candidate
            child = crossover(parent, other, rng)
            if child is not None and child.fingerprint() not in tried:
                tried.add(child.fingerprint())
                out.append((other_id, child))
                break
    return out


class CrossoverOperator:
    """``crossover``: a segment-wise mix of the parent and another accepted lineage."""

    name = "crossover"
    author = "machine"
    reads = ("archive",)
    summary = "a segment-wise mix of the parent and an accepted candidate of another lineage"

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        p = ctx.proposal
        return [Proposal(child, "crossover", None, {"parents": [p.archive_parent, other]})
                for other, child in propose_crossovers(parent, p.archive, parent_id=p.archive_parent, n=k,
                                                       tried=ctx.tried, seed=p.seed)]


register_operator(CrossoverOperator())
