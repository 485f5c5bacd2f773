"""Behaviour analysis: ask an optimizer LLM which prompt segments helped or hurt in recorded episodes.

:func:`analyze` renders a compact view of failed (and a few successful) trajectories together with the
agent's prompt segments, asks the optimizer LLM (gateway role ``"analyzer"``) for a JSON diagnosis and
validates it. It never raises on a bad reply: a malformed answer is retried once with a corrective
message, then returned as an :class:`Analysis` with ``ok=False`` and the raw text.

:func:`counterfactual_ablation` measures, instead of asking, what each segment is worth: it re-runs the
same seeds with one segment removed and reports the change in success and return.

The optimizer's own prompt templates are data, in ``prompts/optimizer/*.md`` (PromptSet markdown with a
``system`` and a ``user`` segment, optionally more sections such as the analyzer's ``episodes`` and
``evidence``; ``${name}`` placeholders). With ``analyze(..., evidence=...)`` the analyzer reads evidence
cards (:mod:`promptevo.optim.reflect.cards`) instead of raw trajectories.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from promptevo.resources import prompts_dir
from promptevo.segments import PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.optim.reflect.cards import CardSet

def template_dir() -> Path:
    """The folder of the optimizer's prompt templates (``prompts/optimizer``)."""
    return prompts_dir() / "optimizer"


# -- shared helpers (also used by the mutator) -----------------------------------------------------


class TemplateError(ValueError):
    """An optimizer template file is missing or malformed."""


def load_template(name: str, path: str | Path | None = None) -> tuple[str, str]:
    """(system, user) template texts of ``prompts/optimizer/<name>.md`` (or ``path``)."""
    p = Path(path) if path is not None else template_dir() / f"{name}.md"
    if not p.exists():
        raise TemplateError(f"optimizer template not found: {p}")
    ps = PromptSet.load(p)
    mod = ps.module(ps.module_names[0])
    system, user = mod.get("system"), mod.get("user")
    if system is None or user is None:
        raise TemplateError(f"{p}: template needs '## system' and '## user' segments (have {mod.names})")
    return system, user


def load_template_segment(name: str, segment: str, path: str | Path | None = None) -> str | None:
    """Text of an extra segment (besides system/user) of an optimizer template, or None when absent."""
    p = Path(path) if path is not None else template_dir() / f"{name}.md"
    if not p.exists():
        raise TemplateError(f"optimizer template not found: {p}")
    ps = PromptSet.load(p)
    return ps.module(ps.module_names[0]).get(segment)


def render_template(text: str, **values: Any) -> str:
    """Fill ``${name}`` placeholders; unknown placeholders are left as they are."""
    return string.Template(text).safe_substitute({k: str(v) for k, v in values.items()})


#: Segments that carry the answer format the agents parse; they may be rewritten but not deleted.
PROTECTED_SEGMENTS = frozenset({"format", "output_format"})


def example_target(prompts: PromptSet) -> tuple[str, str]:
    """(module, segment) used in the reply example of the templates: real names of this prompt set."""
    order = sorted(prompts.modules, key=lambda mp: mp[0] != "actor")
    for m, p in order:
        for s in p.segments:
            if s.name not in PROTECTED_SEGMENTS:
                return m, s.name
    m, p = prompts.modules[0]
    return m, (p.names[0] if p.names else "rules")


_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The first JSON object in an LLM reply: fenced ```json blocks first, then any ``{...}`` in chatter.

    Raises ValueError with a one-line reason when there is none.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty reply")
    candidates = [m.group(1) for m in _FENCE_RE.finditer(text)] + [text]
    dec = json.JSONDecoder()
    last_err = "no JSON object found"
    for chunk in candidates:
        for m in re.finditer(r"\{", chunk):
            try:
                obj, _ = dec.raw_decode(chunk, m.start())
            except json.JSONDecodeError as e:
                last_err = f"invalid JSON: {e.msg} at char {e.pos}"
                continue
            if isinstance(obj, dict):
                return obj
    raise ValueError(last_err)


#: GBNF grammar of one JSON object (llama.cpp constrained decoding; used for local/ optimizer models,
#: which otherwise often wrap or break the JSON). Whitespace runs are bounded so decoding cannot stall.
JSON_OBJECT_GRAMMAR = r'''root ::= ws object ws
object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
value ::= object | array | string | number | "true" | "false" | "null"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]{0,16}
'''


def json_grammar_for(gateway: Any, constrained: bool | None) -> str | None:
    """The JSON grammar when constrained decoding is wanted (None = auto: on for local/ models)."""
    if constrained is None:
        model = getattr(getattr(gateway, "config", None), "model", "") or ""
        constrained = str(model).startswith("local/")
    return JSON_OBJECT_GRAMMAR if constrained else None


def example_strings(template_text: str, min_len: int = 12) -> set[str]:
    """String values (>= ``min_len`` chars) of the ```json example in a rendered template.

    Small models often return the example itself; a reply containing one of these is re-asked.
    """
    out: set[str] = set()
    m = _FENCE_RE.search(template_text or "")
    if not m:
        return out
    try:
        obj = json.loads(m.group(1))
    except ValueError:
        return out

    def walk(x: Any) -> None:
        if isinstance(x, str) and len(x) >= min_len:
            out.add(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(obj)
    return out


def _llm_errors() -> tuple[type[BaseException], type[BaseException] | None]:
    """(LLMError, LLMConfigError) from promptevo.llm.gateway, or generic fallbacks if it is not importable."""
    try:
        from promptevo.llm.gateway import LLMConfigError, LLMError

        return LLMError, LLMConfigError
    except ImportError:  # pragma: no cover - llm.py is part of the package
        return RuntimeError, None


def call_json(
    gateway: Any,
    messages: list[dict],
    *,
    role: str,
    parse: Callable[[Any], Any],
    temperature: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    retries: int = 1,
    grammar: str | None = None,
    forbid: Iterable[str] = (),
) -> tuple[Any | None, str, str | None, dict]:
    """Call ``gateway`` and parse the reply with ``parse(json_obj)``; retry with a corrective message.

    Returns ``(parsed_or_None, raw_text_of_last_reply, error_or_None, usage)``, usage being
    ``{"calls", "prompt_tokens", "completion_tokens", "cost"}`` of these calls. LLM configuration errors
    (missing key, unknown model) are re-raised; any other LLM error ends the attempt with ``error`` set.
    A reply that contains one of the ``forbid`` strings (the template's example text) counts as unusable.
    """
    forbid = [f for f in forbid if f]
    llm_error, config_error = _llm_errors()
    usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}
    msgs = list(messages)
    raw, err = "", None
    for attempt in range(retries + 1):
        try:
            kw: dict[str, Any] = {"grammar": grammar} if grammar is not None else {}
            comp = gateway.complete(
                msgs, role=role, temperature=temperature, max_tokens=max_tokens, seed=seed, **kw
            )
        except Exception as e:  # noqa: BLE001 - classified below
            if config_error is not None and isinstance(e, config_error) and not _is_context_error(e):
                raise
            if not isinstance(e, llm_error) and not isinstance(e, (RuntimeError, TimeoutError)):
                raise
            return None, raw, f"LLM call failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}", usage
        usage["calls"] += 1
        usage["prompt_tokens"] += int(getattr(comp, "prompt_tokens", 0) or 0)
        usage["completion_tokens"] += int(getattr(comp, "completion_tokens", 0) or 0)
        usage["cost"] += float(getattr(comp, "cost", 0.0) or 0.0)
        raw = comp.text or ""
        copied = [f for f in forbid if f in raw]
        try:
            obj = extract_json(raw)
            if copied:
                # small models often copy part of the example: keep the items that are their own work
                obj = scrub_copied(obj, copied)
                if not _has_content(obj):
                    raise ValueError(
                        f"the answer repeats the example text ({copied[0]!r}) instead of describing the "
                        "actual episodes and prompts"
                    )
            return parse(obj), raw, None, usage
        except (ValueError, ValidationError, TypeError) as e:
            err = _one_line(e)
        if attempt < retries:
            msgs = msgs + [
                {"role": "assistant", "content": raw},
                {
                    "role": "user",
                    "content": "Your answer could not be used: "
                    + err
                    + ". Reply again with only the JSON object in the requested shape, no other text.",
                },
            ]
    return None, raw, err, usage


def _is_context_error(e: BaseException) -> bool:
    """The prompt did not fit the model's window: this call fails, the run goes on (with fallbacks)."""
    try:
        from promptevo.llm.gateway import LLMContextError
    except ImportError:  # pragma: no cover
        return False
    return isinstance(e, LLMContextError)


def scrub_copied(obj: Any, copied: Sequence[str]) -> Any:
    """``obj`` without the list items (at any depth) whose text contains one of the ``copied`` strings."""
    if isinstance(obj, dict):
        return {k: scrub_copied(v, copied) for k, v in obj.items()}
    if isinstance(obj, list):
        keep = [x for x in obj if not any(c in json.dumps(x, ensure_ascii=False) for c in copied)]
        return [scrub_copied(x, copied) for x in keep]
    return obj


def _has_content(obj: Any) -> bool:
    """True when a top-level list of the reply still holds at least one item."""
    return isinstance(obj, dict) and any(isinstance(v, list) and v for v in obj.values())


def _one_line(e: BaseException) -> str:
    if isinstance(e, ValidationError):
        parts = []
        for d in e.errors()[:3]:
            loc = ".".join(str(x) for x in d.get("loc", ()))
            parts.append(f"{loc}: {d.get('msg')}")
        return "schema error: " + "; ".join(parts)
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


# -- analysis data model ---------------------------------------------------------------------------

_OP_ALIASES = {"modify": "rewrite", "replace": "rewrite", "edit": "rewrite", "insert": "add", "remove": "delete"}
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
        return _OP_ALIASES.get(str(v).strip().lower(), str(v).strip().lower()) if v is not None else v


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


def _flat(text: Any, limit: int) -> str:
    s = " / ".join(line.strip() for line in str(text or "").splitlines() if line.strip())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def render_prompt_segments(prompts: PromptSet, max_chars_per_segment: int | None = None) -> str:
    out: list[str] = []
    for m, p in prompts.modules:
        out.append(f"[module {m}]")
        for s in p.segments:
            text = s.text
            if max_chars_per_segment and len(text) > max_chars_per_segment:
                text = text[: max_chars_per_segment - 3] + "..."
            out.append(f"<<{m}.{s.name}>>\n{text}")
        out.append("")
    return "\n".join(out).strip()


def render_episode(result: Any, *, max_steps_shown: int = 30, obs_chars: int = 300) -> str:
    """Compact text of one episode: header, mission, steps (head and tail when long), outcome."""
    seed = _get(result, "seed")
    traj = list(_get(result, "trajectory", []) or [])
    steps = _get(result, "steps", len(traj))
    success = bool(_get(result, "success", False))
    if success:
        head = f"=== Episode seed={seed}: SUCCESS in {steps} steps ==="
    else:
        prog = _get(result, "progression", 0.0)
        head = f"=== Episode seed={seed}: FAILED after {steps} steps (progression {prog}) ==="
    lines = [head, f"Mission: {_get(result, 'mission', '')}"]
    prev_sig: tuple = ()
    err = _get(result, "error")
    if err:
        lines.append(f"(episode aborted: {_flat(err, 200)})")
    # collapse runs of identical steps (same observation, description and action) into one entry
    groups: list[tuple[int, int]] = []  # (first index, run length)
    for i, st in enumerate(traj):
        st = st or {}
        sig = (st.get("observation", st.get("obs")), st.get("description"), st.get("action"), st.get("valid"))
        if groups and sig == prev_sig:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1)
        else:
            groups.append((i, 1))
        prev_sig = sig
    gidx = list(range(len(groups)))
    if len(gidx) > max_steps_shown:
        first = max(1, max_steps_shown // 4)
        last = max_steps_shown - first
        shown = gidx[:first] + [-1] + gidx[-last:]
        omitted = sum(groups[g][1] for g in gidx[first:-last])
    else:
        shown, omitted = gidx, 0
    for g in shown:
        if g == -1:
            lines.append(f"  ... ({omitted} steps omitted) ...")
            continue
        i, run = groups[g]
        st = traj[i] or {}
        n = st.get("t", st.get("step", i))
        label = f"S{seed}.{n}" if run == 1 else f"S{seed}.{n}-{n + run - 1} (same step repeated {run} times)"
        flags = []
        if st.get("valid") is False:
            flags.append("[INVALID]")
        if st.get("parsed") is False:
            flags.append("[UNPARSED]")
        lines.append(f"{label} obs: {_flat(st.get('obs', st.get('observation', '')), obs_chars)}")
        if st.get("description"):
            lines.append(f"    description: {_flat(st['description'], obs_chars)}")
        action = st.get("action", "")
        executed = st.get("executed_action")
        act = f"    action: {action}"
        if executed and executed != action:
            act += f" (executed: {executed})"
        if flags:
            act += " " + " ".join(flags)
        if st.get("reward"):
            act += f" reward={st['reward']}"
        lines.append(act)
        reply = st.get("reply")
        if reply and st.get("parsed") is False:
            lines.append(f"    reply: {_flat(reply, 200)}")
    lines.append(
        f"Outcome: {'success' if success else 'failure'}, return {round(float(_get(result, 'return_', 0.0) or 0.0), 3)}, "
        f"invalid actions {_get(result, 'invalid_actions', 0)}"
    )
    return "\n".join(lines)


def select_episodes(results: Sequence[Any], max_trajectories: int = 6, max_successes: int = 2) -> list[Any]:
    """Failures first (lowest return first), then up to ``max_successes`` successes; deterministic."""
    fails = sorted((r for r in results if not _get(r, "success")), key=lambda r: (_get(r, "return_", 0.0) or 0.0, _get(r, "seed", 0)))
    wins = sorted((r for r in results if _get(r, "success")), key=lambda r: _get(r, "seed", 0))
    n_wins = min(max_successes, len(wins), max_trajectories)
    if len(fails) < max_trajectories - n_wins:
        n_wins = min(len(wins), max_trajectories - len(fails))
    picked = fails[: max_trajectories - n_wins] + wins[:n_wins]
    return picked


def render_history(history: Iterable[dict] | None, last: int = 10) -> str:
    items = list(history or [])[-last:]
    if not items:
        return "(none yet)"
    out = []
    for h in items:
        e = h.get("edit") or {}
        diff = h.get("train_diff")
        diff_s = f", train diff {diff:+.3f}" if isinstance(diff, (int, float)) else ""
        out.append(
            f"- gen {h.get('generation')}: {e.get('op')} {e.get('module')}.{e.get('segment')} -> "
            f"{h.get('outcome', 'pending')}{diff_s}; why: {_flat(e.get('rationale', ''), 200)}"
        )
    return "\n".join(out)


def _stats_line(results: Sequence[Any]) -> str:
    n = len(results)
    if not n:
        return "no episodes"
    succ = sum(1 for r in results if _get(r, "success"))
    ret = sum(float(_get(r, "return_", 0.0) or 0.0) for r in results) / n
    return f"{succ}/{n} successes, mean return {ret:.3f}"


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
) -> tuple[list[dict], list[int]]:
    """(messages, seeds covered) of the analyzer call.

    By default the user message shows raw trajectories of :func:`select_episodes`. With ``evidence``
    (the text of :meth:`promptevo.cards.CardSet.render`, or a CardSet) the episodes section is replaced
    by those evidence cards, and the seeds covered are all seeds of ``results``.
    ``max_prompt_tokens`` (see :func:`prompt_budget`): raw trajectories are shortened until the
    estimated prompt fits.
    """
    if evidence is None and max_prompt_tokens:
        # fewer steps, shorter observations, fewer episodes until the prompt fits the model's window
        return fit_to_budget(
            lambda n_traj, n_steps, obs: build_analyzer_messages(
                prompts, results, env_instructions=env_instructions, history=history,
                max_trajectories=n_traj, max_steps_shown=n_steps, obs_chars=obs, template_path=template_path),
            _shrink_steps(max_trajectories, max_steps_shown), max_prompt_tokens)
    system_t, user_t = load_template("analyzer", template_path)
    ex_mod, ex_seg = example_target(prompts)
    values = {
        "example_module": ex_mod,
        "example_segment": ex_seg,
        "env_instructions": env_instructions.strip() or "(not given)",
        "prompt_segments": render_prompt_segments(prompts),
        "history": render_history(history),
        "stats": _stats_line(results),
    }
    if evidence is not None:
        text = evidence if isinstance(evidence, str) else evidence.render()
        section_t = load_template_segment("analyzer", "evidence", template_path) or _DEFAULT_EVIDENCE_SECTION
        values["trajectories"] = text.strip()  # templates without an evidence section get the cards there
        values["episodes_section"] = render_template(section_t, evidence=text.strip())
        seeds = sorted({int(_get(r, "seed", -1)) for r in results})
    else:
        picked = select_episodes(results, max_trajectories)
        values["trajectories"] = "\n\n".join(
            render_episode(r, max_steps_shown=max_steps_shown, obs_chars=obs_chars) for r in picked)
        section_t = load_template_segment("analyzer", "episodes", template_path) or "Episodes:\n\n${trajectories}"
        values["episodes_section"] = render_template(section_t, trajectories=values["trajectories"])
        seeds = [int(_get(r, "seed", -1)) for r in picked]
    msgs = [
        {"role": "system", "content": render_template(system_t, **values)},
        {"role": "user", "content": render_template(user_t, **values)},
    ]
    return msgs, seeds


def estimate_tokens(messages: Sequence[dict]) -> int:
    """A deliberately high estimate of a chat prompt's tokens (2.5 characters per token, plus framing);
    no tokenizer is needed. Grid observations are the densest text here (measured 2.6 characters per
    Qwen2.5 token on MAPF trajectories; English prose is near 4), so it errs towards shortening."""
    return sum(len(str(m.get("content") or "")) * 2 // 5 + 8 for m in messages)


def fit_to_budget(build: Callable[..., tuple], settings: Sequence[tuple], budget: int | None) -> tuple:
    """``build(*setting)`` (a tuple whose first item is the messages) for the first of ``settings`` (longest
    first) whose prompt is estimated within ``budget``; the last setting when none fits or budget is None."""
    out: tuple = ()
    for setting in settings:
        out = build(*setting)
        if budget is None or estimate_tokens(out[0]) <= budget:
            break
    return out


def prompt_budget(gateway: Any, max_tokens: int | None, margin: int = 64) -> int | None:
    """Prompt tokens left for a call on ``gateway`` that may generate ``max_tokens`` (None: unknown)."""
    window = getattr(gateway, "context_window", None)
    try:
        n = window() if callable(window) else None
    except Exception:  # noqa: BLE001 - no window known
        n = None
    if not n:
        return None
    return max(256, int(n) - int(max_tokens or 0) - margin)


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
) -> Analysis:
    """Diagnose ``results`` (episodes played with ``prompts``) with the optimizer LLM; never raises on
    a malformed reply (returns ``ok=False`` with the raw text).

    ``evidence``: evidence-card text (:func:`promptevo.cards.build_cards` then ``.render()``; a CardSet
    is rendered here) shown instead of the raw trajectories, to cut the analyzer's prompt tokens.
    """
    if not results:
        return Analysis(ok=False, error="no episodes to analyse", prompt_fingerprint=prompts.fingerprint())
    msgs, seeds = build_analyzer_messages(
        prompts,
        results,
        env_instructions=env_instructions,
        history=history,
        max_trajectories=max_trajectories,
        max_steps_shown=max_steps_shown,
        template_path=template_path,
        evidence=evidence,
        max_prompt_tokens=prompt_budget(gateway, max_tokens),
    )
    parsed, raw, err, usage = call_json(
        gateway,
        msgs,
        role="analyzer",
        parse=AnalysisReply.model_validate,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
        grammar=json_grammar_for(gateway, constrained),
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


# -- counterfactual ablation -----------------------------------------------------------------------


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def counterfactual_ablation(
    prompts: PromptSet,
    task: Any,
    agent_factory_for: Callable[[PromptSet], Callable[[], Any]],
    seeds: Sequence[int],
    segments: Sequence[tuple[str, str]] | None = None,
    *,
    run: Callable[..., list[Any]] | None = None,
    concurrency: int = 4,
) -> list[dict]:
    """Re-run ``seeds`` with each segment removed; report the change against the full prompt.

    ``segments`` is a list of ``(module, segment)``; default: every segment whose removal leaves its
    module non-empty. ``run(task, agent_factory, seeds, concurrency=...)`` defaults to
    :func:`promptevo.rollout.run_episodes` (pass a store-backed runner to reuse finished episodes).
    Episodes that aborted on an LLM error are left out of both sides of the comparison.
    Returns ``[{"module", "segment", "delta_success", "delta_return", "n"}]`` sorted by delta_return.
    """
    if run is None:
        from promptevo.evaluation.rollout import run_episodes

        def run(task, factory, seeds, concurrency=4):  # type: ignore[no-redef]
            return run_episodes(task, factory, seeds, concurrency=concurrency)

    seeds = list(seeds)
    full = {int(_get(r, "seed")): r for r in run(task, agent_factory_for(prompts), seeds, concurrency=concurrency)}
    if segments is None:
        segments = [(m, s.name) for m, p in prompts.modules if len(p.segments) > 1 for s in p.segments]
    out: list[dict] = []
    for module, seg in segments:
        ablated = prompts.replace_module(module, prompts.module(module).without(seg))
        res = {int(_get(r, "seed")): r for r in run(task, agent_factory_for(ablated), seeds, concurrency=concurrency)}
        common = [s for s in seeds if s in full and s in res and not _get(full[s], "error") and not _get(res[s], "error")]
        ds = [float(bool(_get(res[s], "success"))) - float(bool(_get(full[s], "success"))) for s in common]
        dr = [float(_get(res[s], "return_", 0.0) or 0.0) - float(_get(full[s], "return_", 0.0) or 0.0) for s in common]
        out.append(
            {"module": module, "segment": seg, "delta_success": _mean(ds), "delta_return": _mean(dr), "n": len(common)}
        )
    out.sort(key=lambda d: (d["delta_return"], d["delta_success"]))
    return out
