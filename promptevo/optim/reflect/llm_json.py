"""How the optimizer talks to its LLM: prompt templates (data, in ``prompts/optimizer/*.md``), replies
that must be one JSON object of a known shape, and prompts that must fit the model's window.

Templates are PromptSet markdown with a ``system`` and a ``user`` segment (optionally more sections such
as the analyzer's ``episodes`` and ``evidence``) and ``${name}`` placeholders.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from promptevo.errors import PromptevoError
from promptevo.llm.errors import LLMConfigError, LLMContextError, LLMError
from promptevo.llm.tokens import count_tokens
from promptevo.resources import prompts_dir
from promptevo.segments import PromptSet


def template_dir() -> Path:
    """The folder of the optimizer's prompt templates (``prompts/optimizer``)."""
    return prompts_dir() / "optimizer"


# -- shared helpers (also used by the mutator) -----------------------------------------------------


class TemplateError(PromptevoError, ValueError):
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


def schema_format(schema: type[BaseModel]) -> dict:
    """``response_format`` asking for one JSON object of ``schema`` (OpenAI's json_schema form; the local
    provider turns it into a llama.cpp grammar, other providers that support it enforce it)."""
    return {"type": "json_schema",
            "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": False}}


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
    schema: type[BaseModel] | None = None,
    constrained: bool | None = None,
    forbid: Iterable[str] = (),
) -> tuple[Any | None, str, str | None, dict]:
    """Call ``gateway`` and parse the reply with ``parse(json_obj)``; retry with a corrective message.

    Returns ``(parsed_or_None, raw_text_of_last_reply, error_or_None, usage)``, usage being
    ``{"calls", "prompt_tokens", "completion_tokens", "cost"}`` of these calls. LLM configuration errors
    (missing key, unknown model) are re-raised; any other LLM error ends the attempt with ``error`` set.
    A reply that contains one of the ``forbid`` strings (the template's example text) counts as unusable.
    With ``schema`` (and ``constrained`` not False) the reply is forced to that JSON schema where the
    provider can do it (grammar on local models, ``response_format`` elsewhere); the corrective retry stays
    as the fallback for providers that cannot.
    """
    forbid = [f for f in forbid if f]
    llm_error, config_error = LLMError, LLMConfigError
    usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}
    msgs = list(messages)
    raw, err = "", None
    for attempt in range(retries + 1):
        try:
            kw: dict[str, Any] = {}
            if schema is not None and constrained is not False:
                kw["response_format"] = schema_format(schema)
            comp = gateway.complete(
                msgs, role=role, temperature=temperature, max_tokens=max_tokens, seed=seed, **kw
            )
        except Exception as e:  # noqa: BLE001 - classified below
            if config_error is not None and isinstance(e, config_error) and not is_context_error(e):
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
                if not has_content(obj):
                    raise ValueError(
                        f"the answer repeats the example text ({copied[0]!r}) instead of describing the "
                        "actual episodes and prompts"
                    )
            return parse(obj), raw, None, usage
        except (ValueError, ValidationError, TypeError) as e:
            err = error_line(e)
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


def is_context_error(e: BaseException) -> bool:
    """The prompt did not fit the model's window: this call fails, the run goes on (with fallbacks)."""
    return isinstance(e, LLMContextError)


def scrub_copied(obj: Any, copied: Sequence[str]) -> Any:
    """``obj`` without the list items (at any depth) whose text contains one of the ``copied`` strings."""
    if isinstance(obj, dict):
        return {k: scrub_copied(v, copied) for k, v in obj.items()}
    if isinstance(obj, list):
        keep = [x for x in obj if not any(c in json.dumps(x, ensure_ascii=False) for c in copied)]
        return [scrub_copied(x, copied) for x in keep]
    return obj


def has_content(obj: Any) -> bool:
    """True when a top-level list of the reply still holds at least one item."""
    return isinstance(obj, dict) and any(isinstance(v, list) and v for v in obj.values())


def error_line(e: BaseException) -> str:
    if isinstance(e, ValidationError):
        parts = []
        for d in e.errors()[:3]:
            loc = ".".join(str(x) for x in d.get("loc", ()))
            parts.append(f"{loc}: {d.get('msg')}")
        return "schema error: " + "; ".join(parts)
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def estimate_tokens(messages: Sequence[dict], count: Callable[[Sequence[dict]], int] | None = None) -> int:
    """Prompt tokens of ``messages``: ``count`` (a gateway's ``count_tokens``: the model's own tokenizer)
    when given, else LiteLLM's counter (:func:`promptevo.llm.tokens.count_tokens`)."""
    return int(count(messages)) if count is not None else count_tokens(list(messages))


def fit_to_budget(build: Callable[..., tuple], settings: Sequence[tuple], budget: int | None,
                  count: Callable[[Sequence[dict]], int] | None = None) -> tuple:
    """``build(*setting)`` (a tuple whose first item is the messages) for the first of ``settings`` (longest
    first) whose prompt is estimated within ``budget``; the last setting when none fits or budget is None."""
    out: tuple = ()
    for setting in settings:
        out = build(*setting)
        if budget is None or estimate_tokens(out[0], count) <= budget:
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
