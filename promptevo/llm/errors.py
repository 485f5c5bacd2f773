"""Errors of the LLM gateway; ``str(e)`` is always one line meant for the user."""

from __future__ import annotations

from promptevo.errors import PromptevoError


def one_line(text: str, limit: int = 400) -> str:
    """``text`` with whitespace collapsed, cut to ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class LLMError(Exception):
    """Base error of the gateway; ``str(e)`` is one clear line."""

    def __init__(self, message: str, *, model: str | None = None, role: str | None = None,
                 attempts: int = 0):
        super().__init__(one_line(message))
        self.model = model
        self.role = role
        self.attempts = attempts


class LLMConfigError(PromptevoError, LLMError):
    """Unknown model/provider, missing API key, bad api_base or bad request: never retried."""


class LLMContextError(LLMConfigError):
    """Prompt plus max_tokens do not fit in the model's context window (not retried: same prompt, same
    result). The optimizer's calls (analyzer.call_json) count it as a failed call and fall back."""


class LLMReplyError(LLMError):
    """The model kept returning an empty (or whitespace-only) reply after all retries."""


class LLMBudgetError(LLMError):
    """The gateway's call budget (``LLMConfig.max_calls``) is spent: no further call is made."""
