"""The LLM layer: one gateway for every call (LiteLLM), the local llama.cpp provider, the test double.

* :mod:`promptevo.llm.gateway` - :class:`Gateway` (retries, cache, concurrency, accounting);
* :mod:`promptevo.llm.types` - :class:`LLMConfig`, :class:`Completion`;
* :mod:`promptevo.llm.errors` - the one-line errors;
* :mod:`promptevo.llm.local` - ``local/<name>`` models on llama-cpp-python;
* :mod:`promptevo.llm.double` - ``ScriptedLLM`` (``fake/scripted``), the test double.
"""

from __future__ import annotations

from typing import Any

from promptevo.llm.budget import CallBudget
from promptevo.llm.cache import ResponseCache, cache_key
from promptevo.llm.errors import LLMBudgetError, LLMConfigError, LLMContextError, LLMError, LLMReplyError
from promptevo.llm.gateway import Gateway, fault_kind
from promptevo.llm.secrets import redact, redact_url
from promptevo.llm.types import Completion, LLMConfig
from promptevo.llm.usage import UsageTracker

__all__ = [
    "CallBudget", "Completion", "Gateway", "LLMBudgetError", "LLMConfig", "LLMConfigError", "LLMContextError", "LLMError", "LLMReplyError",
    "ResponseCache", "ScriptedLLM", "ScriptedReply", "UsageTracker", "cache_key", "fault_kind", "redact",
    "redact_url",
]


def __getattr__(name: str) -> Any:  # the test double imports litellm: only on demand
    if name in ("ScriptedLLM", "ScriptedReply", "register_scripted_provider"):
        from promptevo.llm import double

        return getattr(double, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
