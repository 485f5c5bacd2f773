"""Which operators make how many of a generation's children, and what happens when one fails.

:func:`propose_children` fills up to ``ctx.n`` slots from the registered operators named in the run's
``operators`` (:mod:`promptevo.optim.propose.registry`):

1. in a pruning generation only the ``prune`` operator runs;
2. with a skill library (``--skills``) its skills come first (``skill_children`` of them at most);
3. every operator except ``mutate`` gets a round-robin quota of the free slots (:func:`quotas`); the LLM
   mutator takes what is left;
4. a weak optimizer LLM often returns nothing usable: the other operators then fill the slots it left.

An operator that raises is logged with its name and skipped for this generation; the run goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from promptevo.optim.adapter import ProposalBatch, ProposalContext
from promptevo.optim.propose.registry import GameServices, OperatorContext, get_operator
from promptevo.segments import PromptSet

log = logging.getLogger(__name__)

#: the operator that fills what the others leave (the LLM mutator)
FILLER = "mutate"


def quotas(ops: Sequence[str], n: int) -> dict[str, int]:
    """Children per operator: round-robin over the operators other than the filler first; the filler
    takes what is left (and what the others could not fill)."""
    others = [op for op in ops if op != FILLER]
    q = {op: 0 for op in ops}
    if not others:
        if FILLER in ops:
            q[FILLER] = n
        return q
    share = n if FILLER not in ops else max(1, n - 1) if n > 1 else n
    for i in range(share):
        q[others[i % len(others)]] += 1
    if FILLER in ops:
        q[FILLER] = n - share
    return q


def segment_cap(cfg: object, parent: PromptSet) -> int:
    """The most tokens (4 characters each) one segment of a child may hold: ``max_segment_tokens`` when set,
    else twice the parent's prompts, at least 512."""
    given = getattr(cfg, "max_segment_tokens", None)
    return int(given) if given else max(512, 2 * parent.token_estimate())


def oversized(child: PromptSet, parent: PromptSet, cap: int) -> str | None:
    """``"<module>.<segment> (N tokens)"`` for the first segment the child wrote (new or changed text) that is
    longer than ``cap`` tokens, else None."""
    old = {(m, s.name): s.text for m, p in parent.modules for s in p.segments}
    for m, p in child.modules:
        for s in p.segments:
            tokens = (len(s.text) + 3) // 4
            if tokens > cap and old.get((m, s.name)) != s.text:
                return f"{m}.{s.name} ({tokens} tokens)"
    return None


def run_operator(name: str, parent: PromptSet, evidence: dict, ctx: OperatorContext, k: int) -> int:
    """Add up to ``k`` children of operator ``name`` to the batch; returns how many it added. An operator
    that raises is logged with its name (and the error's first line) and adds nothing."""
    if k <= 0:
        return 0
    op = get_operator(name)
    try:
        props = list(op.propose(parent, evidence, ctx, k) or [])
    except Exception as e:  # noqa: BLE001 - one operator's bug must not stop the run
        first = str(e).splitlines()[0] if str(e) else ""
        line = f"operator {name!r} raised {type(e).__name__}: {first[:200]}; skipped this generation"
        ctx.log.append(line)
        ctx.game.warn_once(f"operator-raised:{name}:{type(e).__name__}", f"warning: {line}")
        log.debug("operator %s raised", name, exc_info=True)
        return 0
    props = props[:k]
    cap = segment_cap(ctx.cfg, parent)
    kept = []
    for p in props:
        big = oversized(p.prompts, parent, cap)
        if big is None:
            kept.append(p)
            continue
        line = (f"operator {name!r} wrote {big}, over the {cap}-token cap per segment (--max-segment-tokens); "
                "child refused")
        ctx.log.append(line)
        ctx.record["oversized"] = int(ctx.record.get("oversized", 0)) + 1
        ctx.game.warn_once(f"oversized:{name}", f"warning: {line}")
    props = kept
    for p in props:
        src = dict(p.source or {})
        src.setdefault("author", op.author)
        p.source = src
    ctx.batch.proposals += props
    return len(props)


def propose_children(parent: PromptSet, evidence: dict, pctx: ProposalContext, game: GameServices,
                     operators: Sequence[str]) -> ProposalBatch:
    """Up to ``pctx.n`` children of ``parent`` (see the module docstring)."""
    ctx = OperatorContext(proposal=pctx, game=game)
    want = pctx.n
    if pctx.mode == "prune":
        run_operator("prune", parent, evidence, ctx, want)
        return ctx.batch
    cfg = game.cfg
    if getattr(cfg, "skills", None) and getattr(cfg, "skill_children", 0) > 0:
        run_operator("skills", parent, evidence, ctx, min(cfg.skill_children, want))
    ops = list(operators)
    quota = quotas(ops, want - len(ctx.batch.proposals))
    for op in ops:
        if op != FILLER:
            run_operator(op, parent, evidence, ctx, quota.get(op, 0))
    free = want - len(ctx.batch.proposals)
    if free > 0 and FILLER in ops:
        run_operator(FILLER, parent, evidence, ctx, free)
    for op in ops:
        free = want - len(ctx.batch.proposals)
        if free <= 0:
            break
        if op != FILLER:
            added = run_operator(op, parent, evidence, ctx, free)
            if added:
                ctx.log.append(f"{op} filled {added} slot(s) the mutator left")
    return ctx.batch


__all__ = ["FILLER", "propose_children", "quotas", "run_operator"]
