"""Behaviour analysis: ask an optimizer LLM which prompt segments helped or hurt in recorded episodes.

:func:`analyze` renders a compact view of failed (and a few successful) trajectories together with the
agent's prompt segments, asks the optimizer LLM (gateway role ``"analyzer"``) for a JSON diagnosis and
validates it. It never raises on a bad reply: a malformed answer is retried once with a corrective
message, then returned as an :class:`Analysis` with ``ok=False`` and the raw text.

The reply is forced to the schema of :class:`AnalysisReply` (a grammar on local models,
``response_format`` where the provider supports it; see :mod:`promptevo.optim.reflect.llm_json`). With ``analyze(..., evidence=...)`` the analyzer reads evidence
cards (:mod:`promptevo.optim.reflect.cards`) instead of raw trajectories.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.optim.reflect.llm_json import (
    example_strings,
    example_target,
    fit_to_budget,
    load_template,
    load_template_segment,
    render_template,
)
from promptevo.optim.reflect.render import (
    field_of,
    render_episode,
    render_history,
    render_prompt_segments,
    select_episodes,
    stats_line,
)
from promptevo.segments import PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.optim.reflect.cards import CardSet


# -- analysis data model ---------------------------------------------------------------------------

OP_ALIASES = {"modify": "rewrite", "replace": "rewrite", "edit": "rewrite", "insert": "add", "remove": "delete"}
_EFFECT_ALIASES = {"help": "helped", "helpful": "helped", "hurts": "hurt", "harmful": "hurt", "absent": "missing"}


class Evidence(BaseModel):
    model_config = ConfigDict(extra="ignore")
    seed: int | None = None
    step: int | None = None
    note: str = ""

    @field_validator("seed", "step", mode="before")
    @classmethod
    def _intish(cls, v: Any) -> Any:
        if isinstance(v, str):
            m = re.search(r"-?\d+", v)
            return int(m.group()) if m else None
        return v


class Attribution(BaseModel):
    model_config = ConfigDict(extra="ignore")
    module: str
    segment: str | None = None
    effect: Literal["helped", "hurt", "missing"]
    evidence: list[Evidence] = Field(default_factory=list)
    explanation: str = ""

    @field_validator("effect", mode="before")
    @classmethod
    def _effect(cls, v: Any) -> Any:
        return _EFFECT_ALIASES.get(str(v).strip().lower(), str(v).strip().lower()) if v is not None else v


class Proposal(BaseModel):
    model_config = ConfigDict(extra="ignore")
    module: str
    segment: str
    op: Literal["rewrite", "add", "delete"]
    idea: str = ""

    @field_validator("op", mode="before")
    @classmethod
    def _op(cls, v: Any) -> Any:
        return OP_ALIASES.get(str(v).strip().lower(), str(v).strip().lower()) if v is not None else v


class AnalysisReply(BaseModel):
    """The JSON shape the analyzer LLM must return."""

    model_config = ConfigDict(extra="ignore")
    attributions: list[Attribution] = Field(default_factory=list)
    failure_modes: list[str] = Field(default_factory=list)
    proposals: list[Proposal] = Field(default_factory=list)

    @field_validator("failure_modes", mode="before")
    @classmethod
    def _modes(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in v]
        return v


class Analysis(BaseModel):
    """A validated diagnosis (or, with ``ok=False``, the raw text of a reply that could not be used)."""

    ok: bool
    attributions: list[Attribution] = Field(default_factory=list)
    failure_modes: list[str] = Field(default_factory=list)
    proposals: list[Proposal] = Field(default_factory=list)
    raw: str = ""
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    prompt_fingerprint: str = ""
    seeds: list[int] = Field(default_factory=list)
    usage: dict[str, float] = Field(default_factory=dict)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> "Analysis":
        return cls.model_validate_json(text)

    def summary_text(self, max_chars: int = 4000) -> str:
        """Readable digest for the mutator prompt (falls back to the raw reply when not ok)."""
        if not self.ok:
            raw = self.raw.strip()
            return ("(the diagnosis could not be parsed; raw notes follow)\n" + raw)[:max_chars] if raw else "(no diagnosis available)"
        out: list[str] = []
        if self.failure_modes:
            out.append("Failure modes:")
            out += [f"- {m}" for m in self.failure_modes]
        if self.attributions:
            out.append("Segment effects:")
            for a in self.attributions:
                ev = "; ".join(
                    f"seed {e.seed} step {e.step}: {e.note}".strip() for e in a.evidence[:3]
                )
                out.append(f"- {a.module}.{a.segment or '(new)'} {a.effect}: {a.explanation}" + (f" [{ev}]" if ev else ""))
        if self.proposals:
            out.append("Suggested changes:")
            out += [f"- {p.op} {p.module}.{p.segment}: {p.idea}" for p in self.proposals]
        return "\n".join(out)[:max_chars] or "(empty diagnosis)"


# -- rendering -------------------------------------------------------------------------------------


def build_analyzer_messages(
    prompts: PromptSet,
    results: Sequence[Any],
    *,
    env_instructions: str = "",
    history: Iterable[dict] | None = None,
    max_trajectories: int = 6,
    max_steps_shown: int = 30,
    template_path: str | Path | None = None,
    evidence: "str | CardSet | None" = None,
    obs_chars: int = 300,
    max_prompt_tokens: int | None = None,
    signatures: str = "",
    count: Callable[[Sequence[dict]], int] | None = None,
) -> tuple[list[dict], list[int]]:
    """(messages, seeds covered) of the analyzer call.

    By default the user message shows raw trajectories of :func:`select_episodes`. With ``evidence``
    (the text of :meth:`promptevo.cards.CardSet.render`, or a CardSet) the episodes section is replaced
    by those evidence cards, and the seeds covered are all seeds of ``results``.
    ``max_prompt_tokens`` (see :meth:`~promptevo.optim.optimizer_lm.OptimizerLM.prompt_budget`): raw trajectories are shortened until the
    estimated prompt fits.
    """
    if evidence is None and max_prompt_tokens:
        # fewer steps, shorter observations, fewer episodes until the prompt fits the model's window
        return fit_to_budget(
            lambda n_traj, n_steps, obs: build_analyzer_messages(
                prompts, results, env_instructions=env_instructions, history=history,
                max_trajectories=n_traj, max_steps_shown=n_steps, obs_chars=obs, template_path=template_path,
                signatures=signatures),
            _shrink_steps(max_trajectories, max_steps_shown), max_prompt_tokens, count)
    system_t, user_t = load_template("analyzer", template_path)
    ex_mod, ex_seg = example_target(prompts)
    values = {
        "example_module": ex_mod,
        "example_segment": ex_seg,
        "env_instructions": env_instructions.strip() or "(not given)",
        "prompt_segments": render_prompt_segments(prompts),
        "history": render_history(history),
        "stats": stats_line(results),
        "signatures": signatures.strip() or "(none computed)",
    }
    if evidence is not None:
        text = evidence if isinstance(evidence, str) else evidence.render()
        section_t = load_template_segment("analyzer", "evidence", template_path) or _DEFAULT_EVIDENCE_SECTION
        values["trajectories"] = text.strip()  # templates without an evidence section get the cards there
        values["episodes_section"] = render_template(section_t, evidence=text.strip())
        seeds = sorted({int(field_of(r, "seed", -1)) for r in results})
    else:
        picked = select_episodes(results, max_trajectories)
        values["trajectories"] = "\n\n".join(
            render_episode(r, max_steps_shown=max_steps_shown, obs_chars=obs_chars) for r in picked)
        section_t = load_template_segment("analyzer", "episodes", template_path) or "Episodes:\n\n${trajectories}"
        values["episodes_section"] = render_template(section_t, trajectories=values["trajectories"])
        seeds = [int(field_of(r, "seed", -1)) for r in picked]
    msgs = [
        {"role": "system", "content": render_template(system_t, **values)},
        {"role": "user", "content": render_template(user_t, **values)},
    ]
    return msgs, seeds


def _shrink_steps(max_trajectories: int, max_steps_shown: int) -> list[tuple[int, int, int]]:
    """Ever shorter (episodes, steps shown, observation chars) settings for a raw-trajectory prompt."""
    t, k = max_trajectories, max_steps_shown
    out = [(t, k, 300), (t, max(4, k // 2), 200), (max(1, t // 2), max(4, k // 2), 160),
           (max(1, t // 2), max(4, k // 4), 120), (min(t, 2), 4, 100), (1, 4, 80)]
    return list(dict.fromkeys(out))


_DEFAULT_EVIDENCE_SECTION = (
    "Evidence cards (each summarizes a group of episodes with the same outcome; cite the S<seed>.<step> "
    "references they give):\n\n${evidence}"
)


def _check_against_prompts(reply: AnalysisReply, prompts: PromptSet) -> tuple[AnalysisReply, list[str]]:
    """Drop proposals/attributions that name unknown modules or segments that cannot take the op."""
    warnings: list[str] = []
    mods = prompts.as_dict()
    atts = []
    for a in reply.attributions:
        if a.module not in mods:
            warnings.append(f"attribution to unknown module {a.module!r} dropped")
            continue
        if a.effect != "missing" and a.segment and a.segment not in mods[a.module].names:
            warnings.append(f"attribution to unknown segment {a.module}.{a.segment} kept as 'missing'")
            a = a.model_copy(update={"effect": "missing"})
        atts.append(a)
    props = []
    for p in reply.proposals:
        if p.module not in mods:
            warnings.append(f"proposal for unknown module {p.module!r} dropped")
            continue
        exists = p.segment in mods[p.module].names
        if p.op in ("rewrite", "delete") and not exists:
            warnings.append(f"proposal {p.op} {p.module}.{p.segment}: no such segment, dropped")
            continue
        if p.op == "add" and exists:
            p = p.model_copy(update={"op": "rewrite"})
        props.append(p)
    return reply.model_copy(update={"attributions": atts, "proposals": props}), warnings


def analyze(
    prompts: PromptSet,
    results: Sequence[Any],
    gateway: Any,
    *,
    max_trajectories: int = 6,
    max_steps_shown: int = 30,
    env_instructions: str = "",
    history: Iterable[dict] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = 2048,
    seed: int | None = None,
    template_path: str | Path | None = None,
    constrained: bool | None = None,
    evidence: "str | CardSet | None" = None,
    signatures: str = "",
) -> Analysis:
    """Diagnose ``results`` (episodes played with ``prompts``) with the optimizer LLM; never raises on
    a malformed reply (returns ``ok=False`` with the raw text).

    ``evidence``: evidence-card text (:func:`promptevo.cards.build_cards` then ``.render()``; a CardSet
    is rendered here) shown instead of the raw trajectories, to cut the analyzer's prompt tokens.
    """
    if not results:
        return Analysis(ok=False, error="no episodes to analyse", prompt_fingerprint=prompts.fingerprint())
    lm = OptimizerLM.of(gateway)
    msgs, seeds = build_analyzer_messages(
        prompts,
        results,
        env_instructions=env_instructions,
        history=history,
        max_trajectories=max_trajectories,
        max_steps_shown=max_steps_shown,
        template_path=template_path,
        evidence=evidence,
        max_prompt_tokens=lm.prompt_budget("analyzer", max_tokens),
        signatures=signatures,
        count=lm.count_tokens,
    )
    parsed, raw, err, usage = lm.json(
        msgs,
        role="analyzer",
        parse=AnalysisReply.model_validate,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
        schema=AnalysisReply,
        constrained=constrained,
        forbid=example_strings(msgs[0]["content"]),
    )
    base = {"raw": raw, "prompt_fingerprint": prompts.fingerprint(), "seeds": seeds, "usage": usage}
    if parsed is None:
        return Analysis(ok=False, error=err, **base)
    checked, warnings = _check_against_prompts(parsed, prompts)
    return Analysis(
        ok=True,
        attributions=checked.attributions,
        failure_modes=checked.failure_modes,
        proposals=checked.proposals,
        warnings=warnings,
        **base,
    )


