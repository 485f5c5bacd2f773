"""Mutation: ask the optimizer LLM (gateway role ``"mutator"``) for targeted segment edits.

:func:`propose` turns an :class:`~promptevo.analyzer.Analysis` plus the hereditary history (earlier
edits and their outcomes) into up to ``n`` validated :class:`~promptevo.segments.Edit` objects. Every
edit is checked: the module exists, the op is known, the segment exists for rewrite/delete (and does
not for add), the text is non-empty where needed, :func:`apply_edit` succeeds, the module is not left
empty, and the child differs from the parent and from every candidate already tried (by fingerprint).
A malformed reply, or one with no usable edit, is retried once with the reasons; then it is skipped.
Nothing here raises on bad LLM output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from promptevo.optim.evidence import Evidence
from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.agents.base import unknown_placeholders
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.optim.propose.skills import render as render_skills
from promptevo.optim.reflect.expert import render_clusters
from promptevo.optim.reflect.analyzer import Analysis, OP_ALIASES
from promptevo.optim.reflect.llm_json import PROTECTED_SEGMENTS, example_strings, example_target, load_template, render_template
from promptevo.optim.reflect.render import render_history
from promptevo.segments import Edit, Prompt, PromptFormatError, PromptSet, Segment, apply_edit, sanitize_text


class EditSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    module: str
    op: str
    segment: str
    text: str = ""
    rationale: str = ""
    after: str | None = None

    @field_validator("op", mode="before")
    @classmethod
    def _op(cls, v: Any) -> Any:
        v = str(v).strip().lower()
        return OP_ALIASES.get(v, v)

    @field_validator("segment", "module", mode="before")
    @classmethod
    def _name(cls, v: Any) -> Any:
        return str(v).strip().strip("<>#").strip().lower().replace(" ", "-") if v is not None else v

    @field_validator("text", "rationale", mode="before")
    @classmethod
    def _str(cls, v: Any) -> Any:
        return "" if v is None else v


class MutatorReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    edits: list[EditSpec] = Field(default_factory=list)


@dataclass
class Proposals:
    """Everything one mutation round produced (kept as JSON in the run's record)."""

    edits: list[Edit] = field(default_factory=list)
    rejected: list[dict] = field(default_factory=list)  # {"edit": {...}, "reason": str}
    repaired: list[dict] = field(default_factory=list)  # {"edit": {...} as used, "note": str}
    raw: str = ""
    error: str | None = None
    usage: dict = field(default_factory=dict)
    fallbacks: list[dict] = field(default_factory=list)  # {"edit": {...}, "note": str}: not from the LLM

    def to_dict(self) -> dict:
        out = {
            "edits": [e.to_dict() for e in self.edits],
            "rejected": self.rejected,
            "repaired": self.repaired,
            "raw": self.raw,
            "error": self.error,
            "usage": self.usage,
        }
        if self.fallbacks:  # only pruning fills this; the mutator's record keeps its shape
            out["fallbacks"] = self.fallbacks
        return out


def check_edit(
    parent: PromptSet, edit: Edit, tried: set[str], protected: frozenset[str] = PROTECTED_SEGMENTS
) -> tuple[PromptSet | None, str | None]:
    """(child, None) when ``edit`` is usable on ``parent``; else (None, one-line reason)."""
    if edit.op not in ("rewrite", "add", "delete"):
        return None, f"unknown op {edit.op!r}"
    if edit.module not in parent.module_names:
        return None, f"unknown module {edit.module!r} (have {parent.module_names})"
    names = parent.module(edit.module).names
    if edit.op in ("rewrite", "delete") and edit.segment not in names:
        return None, f"{edit.op} needs an existing segment; {edit.module} has {names}"
    if edit.op == "add" and edit.segment in names:
        return None, f"segment {edit.module}.{edit.segment} already exists (use rewrite)"
    if edit.op != "delete" and not sanitize_text(edit.text):
        return None, "empty text"
    if edit.op == "delete" and edit.segment in protected:
        return None, f"segment {edit.module}.{edit.segment} holds the answer format and cannot be deleted"
    if edit.op == "delete" and len(names) <= 1:
        return None, f"deleting {edit.module}.{edit.segment} would leave the module empty"
    if edit.op != "delete":
        bad = unknown_placeholders(PromptSet.of({"x": Prompt((Segment("x", sanitize_text(edit.text)),))}))
        if bad:
            return None, f"unknown placeholder {bad[0]} (the agent would see it literally)"
    try:
        child = apply_edit(parent, edit)
    except PromptFormatError as e:
        return None, str(e).splitlines()[0]
    fp = child.fingerprint()
    if fp == parent.fingerprint():
        return None, "no change to the prompt"
    if fp in tried:
        return None, "duplicate of a candidate already tried"
    return child, None


def _default_after(prompt_names: list[str], protected: frozenset[str]) -> str | None:
    """Where a new segment goes by default: just before a trailing answer-format segment."""
    if len(prompt_names) >= 2 and prompt_names[-1] in protected:
        return prompt_names[-2]
    return None


def _split_dotted(mods: dict, edit: Edit) -> tuple[Edit, str | None]:
    """``module: "actor.rules"`` or ``segment: "actor.rules"`` (a frequent slip) -> module actor,
    segment rules, when the prefix names a module."""
    for name in ("module", "segment"):
        value = getattr(edit, name) or ""
        head, dot, tail = value.partition(".")
        if not dot or value in mods or head not in mods or not tail:
            continue
        # the segment field wins when it holds a plain name of its own
        keep = name == "module" and edit.segment and "." not in edit.segment
        seg = edit.segment if keep else tail
        fixed = Edit(edit.op, head, seg, edit.text, edit.rationale, edit.after)
        return fixed, f"{name} {value!r} -> module {head!r}, segment {seg!r}"
    return edit, None


def repair_edit(parent: PromptSet, edit: Edit, protected: frozenset[str] = PROTECTED_SEGMENTS) -> tuple[Edit, str | None]:
    """Fix common slips of small optimizer models; returns (edit, note or None).

    * ``module.segment`` written in the module or segment field -> split;
    * module unknown but the segment exists in exactly one module -> that module;
    * ``add`` of a segment that exists -> ``rewrite`` with the new text appended to the old;
    * ``rewrite`` of a segment that does not exist -> ``add``;
    * ``add`` without ``after`` (or with an unknown one) -> placed before a trailing format segment.
    """
    notes = []
    mods = parent.as_dict()
    edit, note = _split_dotted(mods, edit)
    if note:
        notes.append(note)
    if edit.module not in mods:
        owners = [m for m, p in mods.items() if edit.segment in p.names]
        if len(owners) == 1:
            notes.append(f"module {edit.module!r} -> {owners[0]!r}")
            edit = Edit(edit.op, owners[0], edit.segment, edit.text, edit.rationale, edit.after)
        else:
            return edit, None
    names = mods[edit.module].names
    text = sanitize_text(edit.text)
    if edit.op == "add" and edit.segment in names and text:
        old = mods[edit.module].get(edit.segment) or ""
        if text not in old:
            notes.append("add to an existing segment -> appended to it")
            edit = Edit("rewrite", edit.module, edit.segment, (old + "\n\n" + text).strip(), edit.rationale)
    elif edit.op == "rewrite" and edit.segment not in names and text:
        notes.append("rewrite of a missing segment -> added")
        edit = Edit("add", edit.module, edit.segment, edit.text, edit.rationale, edit.after)
    if edit.op == "add" and (edit.after is None or edit.after not in names):
        after = _default_after(names, protected)
        if after != edit.after:
            edit = Edit("add", edit.module, edit.segment, edit.text, edit.rationale, after)
    return edit, "; ".join(notes) or None


def render_full_prompts(prompts: PromptSet) -> str:
    out = []
    for m, p in prompts.modules:
        out.append(f"[module {m}] segments in order: {', '.join(p.names)}")
        for s in p.segments:
            out.append(f"<<{m}.{s.name}>>\n{s.text}")
        out.append("")
    return "\n".join(out).strip()


#: Heading of the optional skills section of the mutator's user message.
SKILLS_HEADING = (
    "Reusable skills learned on other tasks (you may insert one as an 'add' edit if the diagnosis fits):"
)


def skills_section(skills: str | None) -> str:
    """Text for the template's ``${skills_section}`` placeholder: '' when there are no skills, so the
    rendered messages are then exactly those of a template without the section."""
    text = (skills or "").strip()
    return f"\n\n{SKILLS_HEADING}\n\n{text}" if text else ""


def build_mutator_messages(
    prompts: PromptSet,
    analysis: Analysis | None,
    *,
    n: int,
    history: Iterable[dict] | None,
    env_instructions: str = "",
    template_path: str | Path | None = None,
    skills: str | None = None,
    expert: str = "",
) -> list[dict]:
    """System and user messages of one mutation call; ``skills`` (reusable rules learned on other
    tasks) adds a section after the history when non-empty; ``expert`` (where the agent departs from the
    game's expert, :func:`~promptevo.optim.reflect.expert.render_clusters`) follows the diagnosis."""
    system_t, user_t = load_template("mutator", template_path)
    ex_mod, ex_seg = example_target(prompts)
    values = {
        "example_module": ex_mod,
        "example_segment": ex_seg,
        "env_instructions": env_instructions.strip() or "(not given)",
        "n": n,
        "prompt_full": render_full_prompts(prompts),
        "analysis": (analysis.summary_text() if analysis is not None else "(no diagnosis available)")
        + (f"\n\nWhere the agent departs from the game's expert:\n{expert.strip()}" if expert.strip() else ""),
        "history": render_history(history),
        "skills_section": skills_section(skills),
    }
    return [
        {"role": "system", "content": render_template(system_t, **values)},
        {"role": "user", "content": render_template(user_t, **values)},
    ]


EditCheck = Callable[[PromptSet, Edit, set], "tuple[PromptSet | None, str | None]"]


def edit_parser(
    prompts: PromptSet,
    tried: Iterable[str],
    check: EditCheck,
    state: dict[str, list[dict]],
    *,
    keep_repair: Callable[[Edit, Edit], bool] = lambda original, fixed: True,
    what: str = "edit",
) -> Callable[[Any], list[tuple[Edit, PromptSet]]]:
    """The ``parse`` callback of :meth:`promptevo.optim.optimizer_lm.OptimizerLM.json` for replies listing edits.

    Each edit is repaired (:func:`repair_edit`; a repair is used when ``keep_repair(original, fixed)``),
    then checked with ``check(prompts, edit, seen) -> (child, reason)``; rejected edits and used repairs
    are appended to ``state["rejected"]`` / ``state["repaired"]``. Raises ValueError (which makes
    the call ask again) when no edit is usable.
    """
    tried_set = set(tried)

    def parse(obj: Any) -> list[tuple[Edit, PromptSet]]:
        if isinstance(obj, dict) and "edits" not in obj and {"module", "op", "segment"} <= set(obj):
            obj = {"edits": [obj]}  # a single bare edit
        reply = MutatorReply.model_validate(obj)
        good: list[tuple[Edit, PromptSet]] = []
        rejected: list[dict] = []
        seen = set(tried_set)
        for spec in reply.edits:
            edit = Edit(
                op=spec.op,  # type: ignore[arg-type]
                module=spec.module,
                segment=spec.segment,
                text="" if spec.op == "delete" else spec.text,
                rationale=spec.rationale.strip(),
                after=spec.after or None,
            )
            fixed, note = repair_edit(prompts, edit)
            if keep_repair(edit, fixed):
                edit = fixed
                if note:
                    state["repaired"].append({"edit": edit.to_dict(), "note": note})
            child, reason = check(prompts, edit, seen)
            if child is None:
                rejected.append({"edit": edit.to_dict(), "reason": reason})
                continue
            seen.add(child.fingerprint())
            good.append((edit, child))
        state["rejected"].extend(rejected)
        if not good:
            reasons = "; ".join(f"{r['edit'].get('op')} {r['edit'].get('module')}.{r['edit'].get('segment')}: "
                                f"{r['reason']}" for r in rejected[:5])
            raise ValueError(f"no usable {what}" + (f" ({reasons})" if reasons else " (the list was empty)"))
        return good

    return parse


def propose_detailed(
    prompts: PromptSet,
    analysis: Analysis | None,
    gateway: Any,
    *,
    n: int = 3,
    history: Iterable[dict] | None = None,
    tried: Iterable[str] = (),
    env_instructions: str = "",
    temperature: float | None = None,
    max_tokens: int | None = 2048,
    seed: int | None = None,
    template_path: str | Path | None = None,
    constrained: bool | None = None,
    skills: str | None = None,
    expert: str = "",
) -> Proposals:
    """Like :func:`propose` but also returns the rejected edits with reasons, the raw reply and usage."""
    history = list(history or [])
    tried_set = set(tried)
    msgs = build_mutator_messages(
        prompts, analysis, n=n, history=history, env_instructions=env_instructions, template_path=template_path,
        skills=skills, expert=expert,
    )
    state: dict[str, list[dict]] = {"rejected": [], "repaired": []}
    parse = edit_parser(prompts, tried_set, check_edit, state)

    parsed, raw, err, usage = OptimizerLM.of(gateway).json(
        msgs, role="mutator", parse=parse, temperature=temperature, max_tokens=max_tokens, seed=seed,
        schema=MutatorReply, constrained=constrained,
        forbid=example_strings(msgs[0]["content"]),
    )
    edits = [e for e, _ in (parsed or [])][:n]
    return Proposals(edits=edits, rejected=state["rejected"], repaired=state["repaired"],
                     raw=raw, error=err, usage=usage)


def propose(
    prompts: PromptSet,
    analysis: Analysis | None,
    gateway: Any,
    *,
    n: int = 3,
    history: Sequence[dict] | None = None,
    tried: Iterable[str] = (),
    skills: str | None = None,
    **kw: Any,
) -> list[Edit]:
    """Up to ``n`` validated edits of ``prompts`` suggested by the optimizer LLM (may be empty).

    ``history`` is the hereditary context: dicts ``{"generation", "edit": Edit.to_dict(), "outcome",
    "train_diff"}`` of earlier attempts (the last 10 are shown). ``tried`` holds fingerprints of
    candidates already evaluated; children equal to one of them (or to the parent) are rejected.
    ``skills``: reusable rules learned on other tasks, shown to the optimizer as insertable ideas.
    """
    return propose_detailed(prompts, analysis, gateway, n=n, history=history, tried=tried, skills=skills, **kw).edits


class MutateOperator:
    """``mutate``: the optimizer LLM rewrites, adds or deletes one segment per child (reply forced to a JSON
    schema), reading the analysis, the run's edit history, the expert comparison and library skills."""

    name = "mutate"
    author = "machine"
    reads = ("analysis", "expert")
    summary = ("the optimizer LLM rewrites, adds or deletes one segment per child (JSON schema); fills the slots "
               "the other operators leave")

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        game, cfg = ctx.game, ctx.cfg
        ev = Evidence.of(evidence)
        analysis = Analysis.model_validate(ev.analysis) if ev.analysis else None
        skills_text = None
        if cfg.skills:
            chosen = game.skill_library().select(game.task.name, game.task.family, parent, k=3)
            skills_text = render_skills(chosen) if chosen else None
        props = propose_detailed(parent, analysis, ctx.lm, n=k, history=ctx.proposal.history, tried=ctx.tried,
                                 env_instructions=game.env_instructions, seed=ctx.seed, skills=skills_text,
                                 expert=render_clusters(ev.expert or {}))
        ctx.usage["mutator"] = dict(props.usage)
        ctx.record["mutation"] = props.to_dict()
        out = []
        for e in props.edits:
            child = apply_edit(parent, e)
            ctx.tried.add(child.fingerprint())
            out.append(Proposal(child, "mutate", e.to_dict()))
        if props.rejected:
            ctx.log.append(f"{len(props.rejected)} mutator edits rejected")
        if props.error and not props.edits:
            ctx.log.append(f"mutator: {props.error}")
        return out


register_operator(MutateOperator())
