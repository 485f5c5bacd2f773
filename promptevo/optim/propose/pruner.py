"""Scaffold pruning: once the agent is competent, remove the guidance it no longer needs.

Idea from PATS (prompt scaffolding that shrinks as the policy gets competent; its authors report 25-50%
fewer prompt tokens at equal performance). Here:

* :func:`competent` - the gate: success rate at or above a threshold;
* :func:`prunable_segments` - what may go: every segment except the answer-format ones
  (:data:`~promptevo.optim.reflect.llm_json.PROTECTED_SEGMENTS`), the ones holding a placeholder the agent fills in
  (:data:`PLACEHOLDERS`) and the only segment of a module;
* :func:`prompt_tokens`, :func:`prompt_tokens_by_segment` - static prompt size in tokens (LiteLLM's
  bundled ``gpt-3.5-turbo`` tokenizer, offline; ``len(text) // 4`` if that fails);
* :func:`propose_prunes` - ONE optimizer call (gateway role ``"pruner"``, template
  ``prompts/optimizer/pruner.md``) for ``delete`` edits and strictly shorter ``rewrite`` edits of
  prunable segments, validated; missing ones are filled with deterministic deletions of the largest
  untried prunable segments (recorded in ``Proposals.fallbacks``). Never raises on bad LLM output.

Whether a pruned child is kept is decided by :func:`promptevo.optim.selection.prune_keep` on the
validation seeds.

Everything but :func:`propose_prunes` is pure.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from promptevo.optim.evidence import Evidence
from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.agents.base import PLACEHOLDERS as AGENT_PLACEHOLDERS
from promptevo.optim.reflect.llm_json import PROTECTED_SEGMENTS, example_strings, load_template, render_template
from promptevo.optim.reflect.render import render_history
from promptevo.optim.propose.mutator import MutatorReply, Proposals, check_edit, edit_parser
from promptevo.llm.tokens import count_tokens
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.segments import Edit, PromptSet, apply_edit, sanitize_text

#: Placeholders filled in when the agent plays (agents.PLACEHOLDERS) plus ``{observation}``, which
#: custom prompts may carry; a segment holding one is never pruned.
PLACEHOLDERS: tuple[str, ...] = tuple(dict.fromkeys((*AGENT_PLACEHOLDERS, "{observation}")))

#: Tokenizer used for prompt sizes (bundled with LiteLLM, so counting works offline).

Target = tuple[str, str]  # (module, segment)


# -- competence ------------------------------------------------------------------------------------
def competent(successes: int, n: int, threshold: float) -> bool:
    """True when ``n > 0`` episodes were played and the success rate ``successes / n`` is >= ``threshold``."""
    if n <= 0:
        return False
    return successes / n >= threshold - 1e-12


# -- what may be pruned ----------------------------------------------------------------------------
def keep_reasons(prompts: PromptSet, protected: frozenset[str] = PROTECTED_SEGMENTS) -> dict[Target, str | None]:
    """``{(module, segment): why it must stay, or None when it is prunable}`` for every segment."""
    out: dict[Target, str | None] = {}
    for m, p in prompts.modules:
        for s in p.segments:
            held = [ph for ph in PLACEHOLDERS if ph in s.text]
            if s.name in protected:
                why: str | None = "holds the answer format"
            elif held:
                why = f"holds the placeholder {held[0]}"
            elif len(p.segments) <= 1:
                why = "only segment of its module"
            else:
                why = None
            out[(m, s.name)] = why
    return out


def prunable_segments(prompts: PromptSet, protected: frozenset[str] = PROTECTED_SEGMENTS) -> list[Target]:
    """(module, segment) pairs, in prompt order, that a pruning edit may delete or shorten."""
    return [t for t, why in keep_reasons(prompts, protected).items() if why is None]


# -- size ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8192)
def prompt_tokens(prompts: PromptSet) -> int:
    """Static size of the prompt set: tokens of each module's rendered text (placeholders unfilled)."""
    return sum(count_tokens(p.render()) for _, p in prompts.modules)


def prompt_tokens_by_segment(prompts: PromptSet) -> dict[Target, int]:
    """``{(module, segment): tokens of the segment text}``, in prompt order."""
    return {(m, s.name): count_tokens(s.text) for m, p in prompts.modules for s in p.segments}


# -- the pruner call -------------------------------------------------------------------------------
def render_sized_prompts(prompts: PromptSet, sizes: dict[Target, int], reasons: dict[Target, str | None]) -> str:
    out = []
    for m, p in prompts.modules:
        out.append(f"[module {m}] segments in order: {', '.join(p.names)}")
        for s in p.segments:
            why = reasons.get((m, s.name))
            tag = "prunable" if why is None else f"keep: {why}"
            out.append(f"<<{m}.{s.name}>> ({sizes.get((m, s.name), 0)} tokens, {tag})\n{s.text}")
        out.append("")
    return "\n".join(out).strip()


def _largest_first(targets: Iterable[Target], sizes: dict[Target, int]) -> list[Target]:
    order = {t: i for i, t in enumerate(sizes)}
    return sorted(targets, key=lambda t: (-sizes.get(t, 0), order.get(t, 0)))


def build_pruner_messages(
    prompts: PromptSet,
    *,
    n: int,
    stats: str = "",
    history: Iterable[dict] | None = None,
    env_instructions: str = "",
    template_path: str | Path | None = None,
) -> list[dict]:
    system_t, user_t = load_template("pruner", template_path)
    sizes = prompt_tokens_by_segment(prompts)
    reasons = keep_reasons(prompts)
    ranked = _largest_first(prunable_segments(prompts), sizes)
    actor_first = sorted(ranked, key=lambda t: t[0] != "actor")
    ex_mod, ex_seg = actor_first[0] if actor_first else (prompts.module_names[0], "rules")
    values = {
        "example_module": ex_mod,
        "example_segment": ex_seg,
        "env_instructions": env_instructions.strip() or "(not given)",
        "n": n,
        "stats": str(stats or "").strip() or "its recent success rate reached the competence threshold",
        "total_tokens": prompt_tokens(prompts),
        "prompt_sized": render_sized_prompts(prompts, sizes, reasons),
        "prunable": "\n".join(f"- {m}.{s} ({sizes[(m, s)]} tokens)" for m, s in ranked) or "(none)",
        "history": render_history(history),
    }
    return [
        {"role": "system", "content": render_template(system_t, **values)},
        {"role": "user", "content": render_template(user_t, **values)},
    ]


def check_prune(
    parent: PromptSet, edit: Edit, tried: set[str], prunable: set[Target] | None = None
) -> tuple[PromptSet | None, str | None]:
    """(child, None) when ``edit`` is a valid pruning edit of ``parent``; else (None, one-line reason).

    Valid: a ``delete`` of a prunable segment, or a ``rewrite`` of one whose new text has strictly fewer
    tokens; plus everything :func:`~promptevo.mutator.check_edit` checks (child differs from the parent
    and from every fingerprint in ``tried``).
    """
    if edit.op not in ("delete", "rewrite"):
        return None, f"pruning only deletes or shortens segments ({edit.op!r} is not allowed)"
    reasons = keep_reasons(parent)
    target = (edit.module, edit.segment)
    if target not in reasons:  # unknown module or segment: check_edit says which
        _, why = check_edit(parent, edit, tried)
        return None, why or f"{edit.module}.{edit.segment} is not a segment of the prompts"
    if reasons[target] is not None or (prunable is not None and target not in prunable):
        return None, f"{edit.module}.{edit.segment} is not prunable ({reasons[target] or 'not offered'})"
    if edit.op == "rewrite":
        old = parent.module(edit.module).get(edit.segment) or ""
        new = sanitize_text(edit.text)
        if new and count_tokens(new) >= count_tokens(old):
            return None, (
                f"rewrite of {edit.module}.{edit.segment} is not shorter "
                f"({count_tokens(old)} -> {count_tokens(new)} tokens)"
            )
    return check_edit(parent, edit, tried)


def propose_prunes(
    prompts: PromptSet,
    gateway: Any,
    *,
    n: int = 2,
    stats: str = "",
    history: Iterable[dict] | None = None,
    tried: Iterable[str] = (),
    env_instructions: str = "",
    temperature: float | None = None,
    max_tokens: int | None = 1024,
    seed: int | None = None,
    constrained: bool | None = None,
    template_path: str | Path | None = None,
) -> Proposals:
    """Up to ``n`` validated pruning edits of ``prompts`` from one optimizer call (role ``"pruner"``).

    ``stats`` is a line about the current success (e.g. ``"7/8 successes on the training seeds"``),
    ``history`` the hereditary edit history, ``tried`` fingerprints of candidates already evaluated.
    When the reply is unusable or gives fewer than ``n`` edits, deterministic deletions of the largest
    prunable segments not yet tried fill up (rationale starting with ``"fallback:"``, listed in
    ``Proposals.fallbacks``; ``error`` says why the reply was not used). LLM configuration errors
    (missing key, unknown model) propagate like everywhere else; nothing else raises.
    """
    history = list(history or [])
    seen = set(tried)
    prunable = prunable_segments(prompts)
    if n <= 0:
        return Proposals()
    if not prunable:
        return Proposals(error="no prunable segment (only answer-format, placeholder or single segments)")
    prunable_set = set(prunable)
    msgs = build_pruner_messages(
        prompts, n=n, stats=stats, history=history, env_instructions=env_instructions, template_path=template_path
    )
    state: dict[str, list[dict]] = {"rejected": [], "repaired": []}

    # name slips are repaired, but a prune never turns into an addition
    parse = edit_parser(prompts, seen, lambda ps, e, sn: check_prune(ps, e, sn, prunable_set), state,
                        keep_repair=lambda original, fixed: fixed.op == original.op, what="pruning edit")

    parsed, raw, err, usage = OptimizerLM.of(gateway).json(
        msgs, role="pruner", parse=parse, temperature=temperature, max_tokens=max_tokens, seed=seed,
        schema=MutatorReply, constrained=constrained, forbid=example_strings(msgs[0]["content"]),
    )
    chosen = list(parsed or [])[:n]
    edits = [e for e, _ in chosen]
    seen.update(child.fingerprint() for _, child in chosen)

    fallbacks: list[dict] = []
    if len(edits) < n:
        why = ("the pruner reply was unusable" if parsed is None
               else f"the pruner gave {len(edits)} usable edit(s) of {n}")
        sizes = prompt_tokens_by_segment(prompts)
        for m, s in _largest_first(prunable, sizes):
            if len(edits) >= n:
                break
            edit = Edit("delete", m, s, "", f"fallback: {m}.{s} is the largest prunable segment not yet tried "
                                             f"({sizes[(m, s)]} tokens)")
            child, _ = check_prune(prompts, edit, seen, prunable_set)
            if child is None:
                continue
            seen.add(child.fingerprint())
            edits.append(edit)
            fallbacks.append({"edit": edit.to_dict(), "note": why})
    error = err
    if fallbacks and err:
        error = f"{err}; used {len(fallbacks)} deterministic fallback deletion(s)"
    return Proposals(edits=edits, rejected=state["rejected"], repaired=state["repaired"], raw=raw, error=error,
                     usage=usage, fallbacks=fallbacks)


class PruneOperator:
    """Scaffold pruning (pruning generations only): the pruner LLM's deletions and shortenings, with
    deterministic deletions of the largest prunable segments when its reply is unusable."""

    name = "prune"
    author = "machine"
    reads = ()
    summary = "pruning generations: the optimizer deletes or shortens segments the policy no longer needs"

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        p = ctx.proposal
        props = propose_prunes(parent, ctx.lm, n=k, history=p.history, tried=ctx.tried,
                               stats=p.parent_stats, env_instructions=ctx.game.env_instructions, seed=ctx.seed)
        before = prompt_tokens(parent)
        ctx.usage["pruner"] = dict(props.usage)
        ctx.record["pruning"] = props.to_dict()
        out = []
        for e in props.edits:
            child = apply_edit(parent, e)
            ctx.tried.add(child.fingerprint())
            out.append(Proposal(child, "prune", e.to_dict(), prompt_tokens_saved=before - prompt_tokens(child)))
        return out


register_operator(PruneOperator())
