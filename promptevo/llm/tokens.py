"""Counting tokens: the model's own tokenizer where promptevo has it (``local/`` models: llama.cpp's), else
LiteLLM's ``token_counter`` (the provider's tokenizer for models LiteLLM knows, its bundled default
otherwise; offline). Used to fit optimizer prompts into a model's context window and to size prompts."""

from __future__ import annotations

from typing import Any, Sequence

from promptevo.llm.types import is_local_model

DEFAULT_TOKEN_MODEL = "gpt-3.5-turbo"  # LiteLLM's bundled tokenizer for models it does not know


def _text_of(messages: Sequence[dict]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


def count_tokens(content: str | Sequence[dict], model: str | None = None) -> int:
    """Tokens of a text or of chat messages (plus a few per message for the chat framing)."""
    is_text = isinstance(content, str)
    text = content if is_text else _text_of(content)  # type: ignore[arg-type]
    if not text:
        return 0
    framing = 0 if is_text else 4 * len(content)
    if is_local_model(model):
        try:
            from promptevo.llm.local import token_count

            return token_count(model, text) + framing
        except Exception:  # noqa: BLE001 - no llama.cpp here: LiteLLM's counter stands in
            pass
    try:
        import litellm

        kw: dict[str, Any] = {"text": text} if is_text else {"messages": list(content)}  # type: ignore[arg-type]
        known = model if model and not model.startswith(("local/", "fake/")) else DEFAULT_TOKEN_MODEL
        return int(litellm.token_counter(model=known, **kw))
    except Exception:  # noqa: BLE001 - a tokenizer failure must not stop a run: a cautious estimate
        return len(text) * 2 // 5 + framing
