"""The optimizer's LLM: one object that owns how every optimizer call is made (analysis, evidence cards,
mutation, pruning, rule writing, paraphrase, the environment engineer).

:class:`OptimizerLM` holds the gateway (the model), the temperature, the reply cap (with a lower cap per
role where the reply is short by design: cards and pruning), the retries, whether replies are forced to
the JSON schema (grammar on local models, ``response_format`` elsewhere), and the prompt budget (the
model's window less the reply cap). :meth:`OptimizerLM.json` is the structured call with its small-model
fallbacks (a corrective retry, replies that copy the template's example text scrubbed or refused, the
window error answered with ``None``); :meth:`OptimizerLM.text` a plain one. Both count usage per role.

Modules that take a ``gateway`` accept either a gateway or an OptimizerLM (:meth:`OptimizerLM.of`); an
argument given to a call overrides the LM's setting for that call only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from promptevo.optim.reflect.llm_json import call_json, prompt_budget

#: replies that are short by design get a lower cap (at most this many tokens) than the run's
ROLE_MAX_TOKENS = {"cards": 1024, "pruner": 1024, "rules": 256}


@dataclass(frozen=True)
class TextReply:
    """What :meth:`OptimizerLM.text` returns: the reply (None when the call failed), whether the reply cap
    cut it, the call's one-line error, and its usage."""

    text: str | None
    truncated: bool
    error: str | None
    usage: dict


class OptimizerLM:
    """How the optimizer's calls are made; see the module docstring."""

    def __init__(self, gateway: Any, *, temperature: float | None = None, max_tokens: int | None = None,
                 retries: int = 1, constrained: bool | None = None,
                 role_max_tokens: dict[str, int] | None = None):
        if isinstance(gateway, OptimizerLM):
            raise TypeError("OptimizerLM wraps a gateway, not another OptimizerLM (use OptimizerLM.of)")
        self.gateway = gateway
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.retries = retries
        self.constrained = constrained
        self.role_max_tokens = dict(ROLE_MAX_TOKENS if role_max_tokens is None else role_max_tokens)
        #: role -> {"calls", "prompt_tokens", "completion_tokens", "cost"} over this LM's life
        self.usage: dict[str, dict] = {}

    @classmethod
    def of(cls, gateway_or_lm: Any) -> "OptimizerLM":
        """``gateway_or_lm`` itself when it is an OptimizerLM, else one around the gateway with no settings
        of its own (the call's arguments decide temperature and reply cap)."""
        if isinstance(gateway_or_lm, OptimizerLM):
            return gateway_or_lm
        return cls(gateway_or_lm)

    @classmethod
    def from_config(cls, gateway: Any, cfg: Any) -> "OptimizerLM":
        """The run's optimizer LLM from an :class:`~promptevo.optim.config.OptimizeConfig`."""
        return cls(gateway, temperature=getattr(cfg, "optimizer_temperature", None),
                   max_tokens=getattr(cfg, "optimizer_max_tokens", None))

    # -- settings --------------------------------------------------------------------------------------
    def cap(self, role: str, max_tokens: int | None = None) -> int | None:
        """The reply cap of a call of ``role``: the call's own, else the LM's (lowered for short roles)."""
        if max_tokens is not None:
            return max_tokens
        if self.max_tokens is None:
            return self.role_max_tokens.get(role)
        return min(self.max_tokens, self.role_max_tokens.get(role, self.max_tokens))

    def temp(self, temperature: float | None = None) -> float | None:
        return self.temperature if temperature is None else temperature

    def prompt_budget(self, role: str = "", max_tokens: int | None = None) -> int | None:
        """Prompt tokens a call of ``role`` may use (the window less its reply cap; None: unknown)."""
        return prompt_budget(self.gateway, self.cap(role, max_tokens))

    @property
    def count_tokens(self) -> Callable[[Sequence[dict]], int] | None:
        """The model's own token counter, where the gateway has one."""
        return getattr(self.gateway, "count_tokens", None)

    def _count(self, role: str, usage: dict) -> None:
        tot = self.usage.setdefault(role, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0})
        for k in tot:
            tot[k] += usage.get(k, 0) or 0

    # -- calls ----------------------------------------------------------------------------------------
    def json(self, messages: list[dict], *, role: str, parse: Callable[[Any], Any],
             schema: type[BaseModel] | None = None, forbid: Iterable[str] = (), temperature: float | None = None,
             max_tokens: int | None = None, seed: int | None = None, retries: int | None = None,
             constrained: bool | None = None) -> tuple[Any | None, str, str | None, dict]:
        """A structured call: ``(parsed or None, the last raw reply, error or None, usage of these calls)``
        (see :func:`promptevo.optim.reflect.llm_json.call_json` for the fallbacks)."""
        out = call_json(self.gateway, messages, role=role, parse=parse, temperature=self.temp(temperature),
                        max_tokens=self.cap(role, max_tokens), seed=seed,
                        retries=self.retries if retries is None else retries, schema=schema,
                        constrained=self.constrained if constrained is None else constrained, forbid=forbid)
        self._count(role, out[3])
        return out

    def text(self, messages: list[dict], *, role: str, temperature: float | None = None,
             max_tokens: int | None = None, seed: int | None = None) -> TextReply:
        """A plain call. Any failure of the call is its one-line ``error`` (the run goes on)."""
        usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}
        try:
            comp = self.gateway.complete(messages, role=role, temperature=self.temp(temperature),
                                         max_tokens=self.cap(role, max_tokens), seed=seed)
        except Exception as e:  # noqa: BLE001 - an LLM failure costs this call, not the run
            first = str(e).splitlines()[0][:120] if str(e) else ""
            return TextReply(None, False, f"{type(e).__name__}: {first}", usage)
        usage.update(calls=1, prompt_tokens=int(getattr(comp, "prompt_tokens", 0) or 0),
                     completion_tokens=int(getattr(comp, "completion_tokens", 0) or 0),
                     cost=float(getattr(comp, "cost", 0.0) or 0.0))
        self._count(role, usage)
        return TextReply(comp.text or "", bool(getattr(comp, "truncated", False)), None, usage)


__all__ = ["OptimizerLM", "ROLE_MAX_TOKENS", "TextReply"]
