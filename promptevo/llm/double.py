"""The LLM test double: ``ScriptedLLM``, LiteLLM provider ``fake`` (model string ``fake/scripted``).

It tests mechanics only: replies come from a Python callable, never from a model, and no figure
produced with it is ever reported as a result.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from promptevo.llm.providers import litellm_module, register_provider


@dataclass
class ScriptedReply:
    """What a responder may return instead of a plain string, to script the finish reason."""

    text: str
    finish_reason: str = "stop"


_RESPONDER_LOCK = threading.Lock()
_RESPONDER: Callable[[list[dict], dict], Any] | None = None


def _wrap_responder(fn: Callable) -> Callable[[list[dict], dict], Any]:
    """Accept ``responder(messages, params)`` and the shorter ``responder(messages)``."""
    try:
        sig = inspect.signature(fn)
        positional = [p for p in sig.parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_two = len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL
                                                for p in sig.parameters.values())
    except (TypeError, ValueError):
        takes_two = True
    return fn if takes_two else (lambda messages, params: fn(messages))


def _scripted_tokens(text: str) -> int:
    return len(text) // 4


def _build_scripted_class() -> type:
    litellm = litellm_module()
    from litellm.types.utils import Usage

    class ScriptedLLM(litellm.CustomLLM):
        """Test double: LiteLLM custom provider ``fake`` (model string ``fake/scripted``).

        Replies come from the responder installed with ``with ScriptedLLM.install(fn): ...``;
        ``fn(messages, params) -> str | ScriptedReply | Exception`` (``fn(messages)`` also works).
        An Exception instance that the responder returns is raised, so tests can inject
        ``litellm.RateLimitError`` etc. Token usage is ``len(text) // 4``; a reply longer than
        ``max_tokens`` tokens is cut and flagged with finish_reason "length".
        """

        PROVIDER = "fake"
        MODEL = "fake/scripted"

        @staticmethod
        @contextlib.contextmanager
        def install(responder: Callable) -> Iterator[None]:
            global _RESPONDER
            wrapped = _wrap_responder(responder)
            with _RESPONDER_LOCK:
                previous, _RESPONDER = _RESPONDER, wrapped
            register_scripted_provider()
            try:
                yield
            finally:
                with _RESPONDER_LOCK:
                    _RESPONDER = previous

        def _reply(self, model: str, messages: list, optional_params: dict, model_response: Any,
                   api_base: Any = None) -> Any:
            with _RESPONDER_LOCK:
                responder = _RESPONDER
            if responder is None:
                raise litellm.BadRequestError(
                    message="no responder installed (use `with ScriptedLLM.install(fn):`)",
                    model=model, llm_provider="fake")
            params = dict(optional_params or {})
            params.setdefault("model", f"fake/{model}")
            params.setdefault("api_base", api_base)
            out = responder(messages, params)
            if isinstance(out, BaseException):
                raise out
            reply = out if isinstance(out, ScriptedReply) else ScriptedReply(str(out))
            text, finish = reply.text, reply.finish_reason
            max_tokens = params.get("max_tokens")
            if max_tokens is not None and _scripted_tokens(text) > int(max_tokens):
                text, finish = text[: int(max_tokens) * 4], "length"
            prompt_text = "".join(str(m.get("content") or "") for m in messages)
            prompt_tokens = _scripted_tokens(prompt_text)
            completion_tokens = _scripted_tokens(text)
            model_response.choices[0].message.content = text
            model_response.choices[0].finish_reason = finish
            model_response.model = f"fake/{model}"
            model_response.usage = Usage(prompt_tokens=prompt_tokens,
                                         completion_tokens=completion_tokens,
                                         total_tokens=prompt_tokens + completion_tokens)
            return model_response

        def completion(self, model, messages, api_base, custom_prompt_dict, model_response,
                       print_verbose, encoding, api_key, logging_obj, optional_params,
                       acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                       timeout=None, client=None):
            return self._reply(model, messages, optional_params, model_response, api_base)

        async def acompletion(self, model, messages, api_base, custom_prompt_dict, model_response,
                              print_verbose, encoding, api_key, logging_obj, optional_params,
                              acompletion=None, litellm_params=None, logger_fn=None, headers=None,
                              timeout=None, client=None):
            return self._reply(model, messages, optional_params, model_response, api_base)

    ScriptedLLM.__module__ = __name__
    ScriptedLLM.__qualname__ = "ScriptedLLM"
    return ScriptedLLM


_SCRIPTED_CLASS: type | None = None


def _scripted_class() -> type:
    global _SCRIPTED_CLASS
    if _SCRIPTED_CLASS is None:
        with _RESPONDER_LOCK:
            if _SCRIPTED_CLASS is None:
                _SCRIPTED_CLASS = _build_scripted_class()
    return _SCRIPTED_CLASS


def register_scripted_provider() -> None:
    """Register ScriptedLLM as LiteLLM provider ``fake`` (idempotent)."""
    register_provider("fake", lambda: _scripted_class()())


def __getattr__(name: str) -> Any:  # PEP 562: build ScriptedLLM (and import litellm) on demand
    if name == "ScriptedLLM":
        return _scripted_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


