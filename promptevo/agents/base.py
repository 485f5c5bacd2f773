"""The agent interface and how a prompt module becomes messages.

How a prompt module becomes messages (:func:`render_module`):

* All segments except ``format`` are joined (``Prompt.render``) into the instruction text.
* The ``format`` segment of the single-call agents (``system`` module) is the per-turn instruction that
  is appended (after a blank line) to the newest observation message, mirroring BALROG's layout.
* Placeholders, replaced literally wherever they appear: ``{mission}`` (goal text of the episode),
  ``{actions}`` (the valid actions), ``{instructions}`` (``env.instructions()``: the environment's own
  rules and action list). Nothing is appended implicitly.

Constrained decoding: for ``local/...`` models (or ``constrained=True``) the agents pass a GBNF
``grammar`` to the gateway (see :mod:`promptevo.agents.actions`). Remote providers ignore it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from promptevo.agents.actions import default_think_chars, tagged_action_grammar
from promptevo.agents.answer_fields import (
    DIRECTIVE_SEGMENTS,
    GRAMMAR_SEGMENT,
    SLOT_PLACEHOLDERS,
    SLOT_WORDS_SEGMENT,
    fill_slots,
    grammar_of,
    parse_slot_words,
)
from promptevo.envs.base import ActionSpace, TextEnv
from promptevo.errors import PromptevoError
from promptevo.segments import Prompt, PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.llm.gateway import Gateway
    from promptevo.llm.types import Completion

FORMAT_SEGMENT = "format"
PLACEHOLDERS = ("{mission}", "{actions}", "{instructions}") + SLOT_PLACEHOLDERS


class AgentError(PromptevoError, ValueError):
    """Unknown agent name or unusable agent options; ``str(e)`` is one line."""


# -- decisions -------------------------------------------------------------------------------------
@dataclass
class Decision:
    action: str  # the action string passed to env.step (may be invalid)
    reply: str  # raw final LLM reply (actor)
    calls: list[dict] = field(default_factory=list)  # one dict per LLM call, see _call_record
    parsed: bool = True  # False when the reply had no parsable action (fallback used)
    description: str | None = None  # two-stage agent: the descriptor's output


_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def unknown_placeholders(prompts: PromptSet) -> list[str]:
    """``{name}`` placeholders in ``prompts`` that no agent fills (they would reach the model literally)."""
    found = []
    for _, p in prompts.modules:
        for seg in p.segments:
            for m in _PLACEHOLDER_RE.finditer(seg.text):
                if "{" + m.group(1) + "}" not in PLACEHOLDERS and m.group(0) not in found:
                    found.append(m.group(0))
    return found


def check_placeholders(prompts: PromptSet) -> None:
    """AgentError (one line) when ``prompts`` use a placeholder no agent fills."""
    bad = unknown_placeholders(prompts)
    if bad:
        raise AgentError(f"unknown placeholder {bad[0]} in the prompts (known: {', '.join(PLACEHOLDERS)}); write "
                         f"it as text without braces or use a known one")


def fill_placeholders(text: str, *, mission: str, env: TextEnv) -> str:
    if "{mission}" in text:
        text = text.replace("{mission}", mission)
    if "{actions}" in text:
        text = text.replace("{actions}", env.action_space().describe())
    if "{instructions}" in text:
        text = text.replace("{instructions}", env.instructions().strip())
    return text


def render_module(prompt: Prompt, *, mission: str, env: TextEnv, split_format: bool) -> tuple[str, str]:
    """(instruction text, per-turn format text); the latter is '' unless ``split_format``. Directive
    segments (:data:`~promptevo.agents.answer_fields.DIRECTIVE_SEGMENTS`) are not sent; ``{slotK}`` is the
    mission's k-th thing (the module's ``slot-words``)."""
    if split_format:
        body = prompt.render(skip={FORMAT_SEGMENT} | DIRECTIVE_SEGMENTS)
        fmt = prompt.get(FORMAT_SEGMENT) or ""
    else:
        body, fmt = prompt.render(skip=DIRECTIVE_SEGMENTS), ""
    words = parse_slot_words(prompt.get(SLOT_WORDS_SEGMENT) or "") or None
    return tuple(fill_slots(fill_placeholders(t, mission=mission, env=env), mission, words)  # type: ignore[return-value]
                 for t in (body, fmt))


def answer_grammar(prompt: Prompt, space: ActionSpace, think_chars: int | None, mission: str = "",
                   observation: str | None = None) -> str:
    """The grammar of a tagged-action reply for ``prompt``: its ``answer-grammar`` fields (``{slotK}``
    filled from ``mission``, ``<line>`` values closed to ``observation``'s lines) when it has them (a
    malformed one falls back to free reasoning), else reasoning then the action block."""
    spec = prompt.get(GRAMMAR_SEGMENT)
    if spec:
        spec = fill_slots(spec, mission, parse_slot_words(prompt.get(SLOT_WORDS_SEGMENT) or "") or None, article="")
        try:
            return grammar_of(spec, space.gbnf_rules(), observation)
        except ValueError:
            pass
    return tagged_action_grammar(space, think_chars)


def _wants_constraint(gateway: Any, constrained: bool | None) -> bool:
    if constrained is not None:
        return constrained
    from promptevo.llm.types import is_local_model  # a gateway exists, so the llm package is loaded

    return is_local_model(getattr(getattr(gateway, "config", None), "model", ""))


def _call_record(module: str, messages: list[dict], c: "Completion", error: str | None = None) -> dict:
    rec = {
        "module": module,
        "messages": messages,
        "reply": c.text,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "cost": c.cost,
        "latency_s": c.latency_s,
        "cached": c.cached,
        "truncated": bool(getattr(c, "truncated", False)),
    }
    if error:
        rec["error"] = error
    return rec


class Agent(ABC):
    name: str = ""
    prompts: PromptSet

    def __init__(
        self,
        gateway: "Gateway | None",
        prompts: PromptSet,
        *,
        constrained: bool | None = None,
        think_chars: int | None = None,
    ):
        self.gateway = gateway
        self.prompts = prompts
        self.constrained = _wants_constraint(gateway, constrained)
        if think_chars is None:
            think_chars = default_think_chars(getattr(getattr(gateway, "config", None), "max_tokens", None))
        self.think_chars = think_chars
        self.env: TextEnv | None = None
        self.mission = ""
        self._space: ActionSpace | None = None

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        """Start a new episode (``seed`` is the episode seed; only the random agent uses it)."""
        self.env = env
        self.mission = mission
        self._space = env.action_space()

    @abstractmethod
    def act(self, observation: str, info: dict) -> Decision: ...

    @property
    def deterministic(self) -> bool:
        """True when the same input always gives the same reply: temperature 0, or the response cache on
        (a cached prompt is answered with its first reply at any temperature)."""
        cfg = getattr(self.gateway, "config", None)
        if cfg is None:
            return False
        return float(getattr(cfg, "temperature", 1.0) or 0.0) == 0.0 or getattr(self.gateway, "cache", None) is not None

    def memory_key(self) -> object | None:
        """A hashable snapshot of what the agent remembers between steps (None: unknown). With the same
        memory and the same observation a deterministic agent sends the same messages."""
        return None

    def state_key(self) -> object | None:
        """The agent's part of the loop cut-off key: its memory when it is deterministic, else None."""
        return self.memory_key() if self.deterministic else None

    def _complete(self, module: str, messages: list[dict], grammar: str | None) -> tuple["Completion", dict]:
        assert self.gateway is not None, f"agent {self.name} needs a gateway"
        kw: dict[str, Any] = {"role": module if module != "system" else "agent"}
        if grammar is not None and self.constrained:
            kw["grammar"] = grammar
        from promptevo.llm.gateway import Completion, LLMReplyError

        try:
            c = self.gateway.complete(messages, **kw)
        except LLMReplyError as e:
            # An empty reply (after the gateway's retries) is an invalid action, as in BALROG, not an
            # aborted episode; the call record keeps the error.
            model = getattr(getattr(self.gateway, "config", None), "model", "")
            c = Completion(text="", prompt_tokens=0, completion_tokens=0, cost=0.0, latency_s=0.0,
                           cached=False, model=str(model))
            return c, _call_record(module, messages, c, error=f"{type(e).__name__}: {e}")
        return c, _call_record(module, messages, c)

    @property
    def space(self) -> ActionSpace:
        assert self._space is not None, "call reset() first"
        return self._space
