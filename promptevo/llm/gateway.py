"""The one gateway through which every LLM call of promptevo passes.

Built on LiteLLM: any LiteLLM model string works (``openai/gpt-4o-mini``, ``ollama/qwen3:4b``,
``hosted_vllm/<name>`` with ``api_base``), plus two in-process custom providers:

* ``local/<name>``: llama.cpp models served by :mod:`promptevo.llm.local` (registered on first use);
* ``fake/scripted``: :class:`ScriptedLLM`, a test double whose replies come from a Python callable.

The gateway adds what every run needs on top of LiteLLM: retries with exponential backoff on
transient errors, one-line errors for configuration mistakes, a response cache on disk, a
concurrency limit, and token/cost accounting per role.

Cache semantics: the cache is for reproducibility. A prompt that was answered before is answered
from the cache at *any* temperature (the key includes the temperature, so the same call returns the
same reply). Disable the cache (``cache_dir=None``) to sample several different replies.

``litellm`` is imported lazily (it takes seconds to import), so ``import promptevo.llm.gateway`` is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from promptevo.llm.budget import CallBudget
from promptevo.llm.cache import ResponseCache, cache_key
from promptevo.llm.errors import LLMBudgetError, LLMConfigError, LLMContextError, LLMError, LLMReplyError, one_line
from promptevo.llm.providers import custom_llm_setup_all, litellm_module
from promptevo.llm.secrets import redact, redact_url, url_secrets
from promptevo.llm.tokens import count_tokens
from promptevo.llm.types import EXAMPLE_MODELS, Completion, LLMConfig
from promptevo.llm.usage import UsageTracker

log = logging.getLogger(__name__)

# Providers whose calls run in-process (no cost, accept the extra ``grammar`` kwarg).
IN_PROCESS_PROVIDERS = ("local", "fake")
# Providers that authenticate without an *_API_KEY variable (cloud identities, AD tokens, ...).
_NO_KEY_CHECK_PROVIDERS = {"azure", "azure_ai", "azure_text", "bedrock", "sagemaker", "vertex_ai",
                           "vertex_ai_beta"}
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}
# Sent to a localhost OpenAI-compatible server (llama.cpp, vLLM) when no key is configured: the
# OpenAI client refuses to run without one and such servers ignore it. It is not a secret.
PLACEHOLDER_LOCAL_KEY = "sk-no-key-required"


# --------------------------------------------------------------------------------------------------
# error classification


#: seconds of silence from a server before a call says it is still waiting
SILENT_AFTER_S = 30

#: a reply longer than max_tokens * this many characters came from a server that ignored max_tokens: it is
#: cut there and flagged truncated (no tokenizer writes 8 characters per token on average)
MAX_CHARS_PER_TOKEN = 8


def _is_transient(exc: BaseException) -> bool:
    litellm = litellm_module()
    ex = litellm.exceptions
    if _looks_like_missing_credentials(exc):
        return False
    transient = (ex.RateLimitError, ex.InternalServerError, ex.ServiceUnavailableError, ex.Timeout,
                 ex.APIConnectionError, ex.BadGatewayError, TimeoutError, ConnectionError,
                 asyncio.TimeoutError)
    if isinstance(exc, transient):
        return True
    fatal = (ex.AuthenticationError, ex.PermissionDeniedError, ex.NotFoundError, ex.BadRequestError,
             ex.UnprocessableEntityError, ex.UnsupportedParamsError)
    if isinstance(exc, fatal):
        return False
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status in (408, 409, 425, 429) or status >= 500
    return False


def _looks_like_missing_credentials(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "missing credentials" in msg or "api_key client option must be set" in msg


def _clean_error(exc: BaseException, secret: str | None, *more_secrets: str | None) -> str:
    msg = str(exc) or type(exc).__name__
    first = next((ln for ln in msg.splitlines() if ln.strip()), msg)
    first = first.strip()
    for prefix in ("litellm.",):
        if first.startswith(prefix):
            first = first[len(prefix):]
    first = redact(first, secret, *more_secrets)
    first = first.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates from a server body
    return one_line(first, 300)


def fault_kind(exc: BaseException) -> str:
    """Short label of a failed attempt for the fault counters: ``empty_reply`` or the class name."""
    return "empty_reply" if isinstance(exc, _EmptyReply) else type(exc).__name__


def _config_error_kind(exc: BaseException) -> str:
    litellm = litellm_module()
    ex = litellm.exceptions
    if isinstance(exc, (ex.AuthenticationError, ex.PermissionDeniedError)) \
            or _looks_like_missing_credentials(exc):
        return "authentication failed"
    if isinstance(exc, ex.NotFoundError):
        return "model or endpoint not found"
    if isinstance(exc, ex.ContextWindowExceededError):
        return "prompt too long for the model"
    if isinstance(exc, ex.BadRequestError):
        return "bad request"
    return "request rejected"


def _clean_text(content: Any) -> str:
    """Reply content as a valid str: bytes decoded with replacement, lone surrogates replaced."""
    if content is None:
        return ""
    if isinstance(content, bytes):
        return content.decode("utf-8", errors="replace")
    if not isinstance(content, str):
        content = str(content)
    return content.encode("utf-8", errors="replace").decode("utf-8")


def _backoff(cfg: LLMConfig, retry_index: int) -> float:
    base = cfg.backoff_base * (2 ** retry_index)
    return min(cfg.backoff_max, base + random.uniform(0, cfg.backoff_base))


def _is_local_url(api_base: str | None) -> bool:
    if not api_base:
        return False
    try:
        host = urlparse(api_base if "://" in api_base else f"http://{api_base}").hostname
    except ValueError:
        return False
    return host in _LOCAL_HOSTS



# --------------------------------------------------------------------------------------------------
# gateway


class _EmptyReply(Exception):
    pass


class Gateway:
    """Retrying, caching, rate-limited LiteLLM client with per-role accounting.

    Thread-safe: ``complete`` may be called from many worker threads; at most
    ``config.concurrency`` calls are in flight (per gateway; a separate asyncio semaphore of the
    same size bounds ``acomplete`` per event loop).
    """

    def __init__(self, config: LLMConfig | None = None, *, usage: UsageTracker | None = None,
                 budget: CallBudget | None = None):
        self.config = config if config is not None else LLMConfig()
        self.usage = usage if usage is not None else UsageTracker()
        self.cache = ResponseCache(self.config.cache_dir) if self.config.cache_dir else None
        self._sem = threading.BoundedSemaphore(self.config.concurrency)
        self._async_sems: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" \
            = weakref.WeakKeyDictionary()
        self._async_lock = threading.Lock()
        self._checked = False
        self._check_lock = threading.Lock()
        self.budget = budget  # shared hard cap on calls (cache hits included)
        self._api_key_to_send: str | None = self.config.api_key

    def __repr__(self) -> str:
        c = self.config
        return (f"Gateway(model={c.model!r}, api_base={redact_url(c.api_base)!r}, "
                f"cache={'off' if self.cache is None else self.cache.path!r}, "
                f"concurrency={c.concurrency})")

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> "Gateway":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- validation -----------------------------------------------------------------------------

    @property
    def provider(self) -> str | None:
        return self.config.provider

    @property
    def in_process(self) -> bool:
        """True for local/ and fake/ models: no cost, ``grammar`` is honoured."""
        return self.provider in IN_PROCESS_PROVIDERS

    def context_window(self) -> int | None:
        """Prompt tokens the model accepts (None when unknown): the local model's n_ctx, else LiteLLM's
        model info. Callers use it to shorten long prompts before calling."""
        if self.provider == "local":
            from promptevo.llm import local as localmodel  # noqa: PLC0415

            return int(localmodel.OPTIONS.n_ctx)
        if self.provider == "fake":
            return None
        try:
            info = litellm_module().get_model_info(self.config.model)
        except Exception:  # noqa: BLE001 - unknown models simply have no known window
            return None
        n = info.get("max_input_tokens") or info.get("max_tokens")
        return int(n) if n else None

    def count_tokens(self, messages: list[dict]) -> int:
        """Prompt tokens of ``messages`` for this model (its own tokenizer where promptevo has it)."""
        return count_tokens(messages, self.config.model)

    def check(self) -> None:
        """Validate the model string and credentials without calling the model.

        Registers the local/fake provider when needed. Raises LLMConfigError (one line).
        Called automatically before the first call; call it early to fail fast.
        """
        if self._checked:
            self._ensure_provider()
            return
        with self._check_lock:
            if self._checked:
                return
            self._ensure_provider()
            self._check_model_string()
            self._check_credentials()
            self._checked = True

    def _ensure_provider(self) -> None:
        provider = self.provider
        if provider == "fake":
            _register_fake()
        elif provider == "local":
            try:
                from promptevo.llm import local as localmodel  # lazy: llm.py works without it
            except ImportError as e:
                raise LLMConfigError(
                    f"model {self.config.model!r} needs promptevo.llm.local, which failed to "
                    f"import: {one_line(str(e), 200)}", model=self.config.model) from e
            try:
                localmodel.ensure_registered()
            except LLMError:
                raise
            except Exception as e:  # noqa: BLE001 - surface as one clear line
                raise LLMConfigError(f"model {self.config.model!r}: cannot set up the local "
                                     f"provider: {one_line(str(e), 250)}",
                                     model=self.config.model) from e
            custom_llm_setup_all()

    def _check_model_string(self) -> None:
        litellm = litellm_module()
        model = self.config.model
        try:
            litellm.get_llm_provider(model=model, api_base=self.config.api_base)
        except Exception as e:  # noqa: BLE001 - litellm raises BadRequestError here
            if "/" in model:
                what = f"unknown provider {model.split('/', 1)[0]!r}"
            else:
                what = "no provider prefix and not a model LiteLLM knows"
            raise LLMConfigError(f"model {model!r}: {what} — use a LiteLLM model string such as "
                                 f"{EXAMPLE_MODELS}", model=model) from e

    def _check_credentials(self) -> None:
        cfg = self.config
        if cfg.api_key is not None or self.in_process:
            return
        provider = self.provider
        if provider in _NO_KEY_CHECK_PROVIDERS:
            return
        litellm = litellm_module()
        try:
            env = litellm.validate_environment(model=cfg.model, api_base=cfg.api_base)
        except Exception:  # noqa: BLE001 - litellm cannot tell: let the call decide
            return
        missing = [k for k in env.get("missing_keys") or [] if k.endswith("_API_KEY")]
        if not missing:
            return
        if _is_local_url(cfg.api_base):
            # llama.cpp / vLLM servers on this machine need no key, but the OpenAI client does.
            self._api_key_to_send = PLACEHOLDER_LOCAL_KEY
            return
        names = " or ".join(missing)
        raise LLMConfigError(f"{names} is not set for model {cfg.model} (export it or pass "
                             f"api_key)", model=cfg.model)

    # ---- request building -----------------------------------------------------------------------

    def _resolve(self, temperature: float | None, max_tokens: int | None, seed: int | None,
                 stop: str | list[str] | None) -> tuple[float, int, int | None, list[str] | None]:
        cfg = self.config
        t = cfg.temperature if temperature is None else float(temperature)
        mt = cfg.max_tokens if max_tokens is None else int(max_tokens)
        sd = cfg.seed if seed is None else seed
        st = [stop] if isinstance(stop, str) else (list(stop) if stop else None)
        return t, mt, sd, st

    def _call_kwargs(self, messages: list[dict], temperature: float, max_tokens: int,
                     seed: int | None, stop: list[str] | None, grammar: str | None) -> dict:
        """Keyword arguments for litellm.completion / acompletion (one attempt, no retries)."""
        cfg = self.config
        kw: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "timeout": cfg.timeout,
            "num_retries": 0,  # the gateway retries itself
            "drop_params": True,  # e.g. seed on providers that do not support it
        }
        if seed is not None:
            kw["seed"] = seed
        if stop:
            kw["stop"] = stop
        if cfg.api_base:
            kw["api_base"] = cfg.api_base
        if self._api_key_to_send is not None:
            kw["api_key"] = self._api_key_to_send
        if grammar is not None and self.in_process:
            kw["grammar"] = grammar  # arrives in the custom provider's optional_params["grammar"]
        return kw

    def _key(self, messages: list[dict], temperature: float, max_tokens: int, seed: int | None,
             stop: list[str] | None, grammar: str | None) -> str:
        return cache_key(model=self.config.model, api_base=self.config.api_base,
                         messages=messages, temperature=temperature, max_tokens=max_tokens,
                         seed=seed, stop=stop, grammar=grammar)

    def _from_cache(self, key: str | None, t0: float) -> Completion | None:
        if self.cache is None or key is None:
            return None
        hit = self.cache.get(key)
        if hit is None:
            return None
        try:
            return Completion(text=hit["text"], prompt_tokens=int(hit["prompt_tokens"]),
                              completion_tokens=int(hit["completion_tokens"]), cost=0.0,
                              latency_s=time.perf_counter() - t0, cached=True,
                              model=hit.get("model", self.config.model),
                              truncated=bool(hit.get("truncated", False)),
                              finish_reason=hit.get("finish_reason"))
        except (KeyError, TypeError, ValueError):
            return None

    def _to_completion(self, response: Any, latency: float, max_tokens: int | None = None) -> Completion:
        try:
            choice = response.choices[0]
            text = _clean_text(choice.message.content)
            finish = getattr(choice, "finish_reason", None)
        except (AttributeError, IndexError, TypeError):
            text, finish = "", None
        if not text.strip():
            raise _EmptyReply()
        if max_tokens and len(text) > max_tokens * MAX_CHARS_PER_TOKEN:  # a server that ignored max_tokens
            text, finish = text[: max_tokens * MAX_CHARS_PER_TOKEN], "length"
            log.warning("LLM %s sent a reply longer than max_tokens=%d allows; cut to %d characters and "
                        "flagged truncated", self.config.model, max_tokens, len(text))
        usage = getattr(response, "usage", None)
        pt = int(getattr(usage, "prompt_tokens", 0) or 0)
        ct = int(getattr(usage, "completion_tokens", 0) or 0)
        return Completion(text=text, prompt_tokens=pt, completion_tokens=ct,
                          cost=self._cost(response), latency_s=latency, cached=False,
                          model=self.config.model, truncated=finish == "length",
                          finish_reason=finish)

    def _cost(self, response: Any) -> float:
        if self.in_process:
            return 0.0
        cfg = self.config
        if cfg.price_in is not None or cfg.price_out is not None:
            usage = getattr(response, "usage", None)
            pt = int(getattr(usage, "prompt_tokens", 0) or 0)
            ct = int(getattr(usage, "completion_tokens", 0) or 0)
            return (pt * (cfg.price_in or 0.0) + ct * (cfg.price_out or 0.0)) / 1e6
        try:
            hidden = getattr(response, "_hidden_params", None) or {}
            cost = hidden.get("response_cost")
            if cost is None:
                cost = litellm_module().completion_cost(completion_response=response)
            cost = float(cost or 0.0)
            return cost if cost >= 0 and cost == cost else 0.0
        except Exception:  # noqa: BLE001 - unknown prices are caught up front by price_known()
            return 0.0

    def price_known(self) -> bool:
        """True when this gateway can price its calls: in-process models (free), a price given in the
        config, or a model in LiteLLM's price map. A dollar budget refuses to start otherwise."""
        cfg = self.config
        if self.in_process or cfg.price_in is not None or cfg.price_out is not None:
            return True
        try:
            info = litellm_module().get_model_info(cfg.model)
        except Exception:  # noqa: BLE001 - not in the map
            return False
        return bool(info.get("input_cost_per_token") is not None or info.get("output_cost_per_token") is not None)

    def _store(self, key: str | None, c: Completion) -> None:
        if self.cache is None or key is None:
            return
        try:
            self.cache.put(key, c.to_dict())
        except sqlite3.Error as e:
            log.warning("LLM cache write failed: %s", e)

    def _clean(self, exc: BaseException) -> str:
        """One line for ``exc`` without the API key, api_base credentials or secret env values."""
        return _clean_error(exc, self.config.api_key, *url_secrets(self.config.api_base))

    def _fail(self, exc: BaseException, role: str, attempts: int) -> LLMError:
        model = self.config.model
        if isinstance(exc, _EmptyReply):
            return LLMReplyError(f"model {model} returned an empty reply {attempts} time(s) "
                                 f"(role {role})", model=model, role=role, attempts=attempts)
        detail = self._clean(exc)
        if _is_transient(exc):
            return LLMError(f"model {model}: gave up after {attempts} attempt(s) (role {role}): "
                            f"{detail}", model=model, role=role, attempts=attempts)
        kind = _config_error_kind(exc)
        if isinstance(exc, litellm_module().exceptions.ContextWindowExceededError):
            return LLMContextError(f"model {model}: {kind}: {detail}", model=model, role=role,
                                   attempts=attempts)
        return LLMConfigError(f"model {model}: {kind}: {detail}", model=model, role=role,
                              attempts=attempts)

    def _prepare(self, messages: list[dict], temperature: float | None, max_tokens: int | None,
                 seed: int | None, stop: str | list[str] | None, grammar: str | None,
                 role: str, response_format: dict | None = None) -> tuple[dict, str | None]:
        if not isinstance(messages, list) or not messages:
            raise LLMConfigError("messages must be a non-empty list of {'role', 'content'} dicts",
                                 model=self.config.model, role=role)
        try:
            self.check()
        except LLMError as e:
            self.usage.record_error(role, type(e).__name__)
            raise
        if self.budget is not None and not self.budget.take():
            self.usage.record_error(role, "LLMBudgetError")
            raise LLMBudgetError(f"call budget of {self.budget.limit} LLM calls spent (role {role})",
                                 model=self.config.model, role=role)
        t, mt, sd, st = self._resolve(temperature, max_tokens, seed, stop)
        rf = response_format if response_format is not None and self.supports_schema() else None
        kw = self._call_kwargs(messages, t, mt, sd, st, grammar)
        if rf is not None:
            kw["response_format"] = rf
        key = self._key(messages, t, mt, sd, st, grammar if rf is None else f"{grammar}|{rf}") \
            if self.cache is not None else None
        return kw, key

    def supports_schema(self) -> bool:
        """True when replies can be forced to a JSON schema (``response_format``): in-process models
        (a grammar built from the schema) and providers LiteLLM knows to support it."""
        if self.in_process:
            return True
        try:
            return bool(litellm_module().supports_response_schema(model=self.config.model))
        except Exception:  # noqa: BLE001 - unknown model: ask in the prompt only
            return False

    # ---- public calls ---------------------------------------------------------------------------

    def complete(self, messages: list[dict], *, role: str = "agent",
                 temperature: float | None = None, max_tokens: int | None = None,
                 seed: int | None = None, stop: str | list[str] | None = None,
                 grammar: str | None = None, response_format: dict | None = None) -> Completion:
        """One chat completion; cached, retried, counted under ``role``.

        Raises LLMConfigError (not retried), LLMReplyError (empty reply after retries) or
        LLMError (transient errors after all retries).
        """
        t0 = time.perf_counter()
        kw, key = self._prepare(messages, temperature, max_tokens, seed, stop, grammar, role, response_format)
        hit = self._from_cache(key, t0)
        if hit is not None:
            self.usage.record(role, hit)
            return hit
        litellm = litellm_module()
        attempts = self.config.num_retries + 1
        for attempt in range(attempts):
            try:
                with self._sem, self._watchdog(attempt, attempts):
                    start = time.perf_counter()
                    response = litellm.completion(**kw)
                    latency = time.perf_counter() - start
                result = self._to_completion(response, latency, kw.get("max_tokens"))
            except Exception as exc:  # noqa: BLE001 - classified in _retry_delay
                time.sleep(self._retry_delay(exc, role, attempt, attempts))
                continue
            self._store(key, result)
            self.usage.record(role, result)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.contextmanager
    def _watchdog(self, attempt: int, attempts: int) -> Iterator[None]:
        """Name a server that does not answer: one warning after :data:`SILENT_AFTER_S` seconds of a call
        (in-process models are slow by nature and get none)."""
        if self.in_process:
            yield
            return
        where = redact_url(self.config.api_base) or self.config.model
        timer = threading.Timer(SILENT_AFTER_S, lambda: log.warning(
            "waiting for %s: no answer for %d s, attempt %d of %d", where, SILENT_AFTER_S, attempt + 1, attempts))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _retry_delay(self, exc: Exception, role: str, attempt: int, attempts: int) -> float:
        """Seconds to wait before retrying a failed call, counted as a retry; or, for a permanent error
        or the last attempt, count the error and raise the one-line LLMError for it."""
        if (isinstance(exc, _EmptyReply) or _is_transient(exc)) and attempt + 1 < attempts:
            self.usage.record_retry(role, fault_kind(exc))
            delay = _backoff(self.config, attempt)
            log.warning("LLM %s (role %s): %s; retry %d/%d in %.2fs", self.config.model, role,
                     "empty reply" if isinstance(exc, _EmptyReply) else self._clean(exc),
                     attempt + 1, attempts - 1, delay)
            return delay
        self.usage.record_error(role, fault_kind(exc))
        raise self._fail(exc, role, attempt + 1) from (None if isinstance(exc, _EmptyReply) else exc)

    def _async_sem(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._async_lock:
            sem = self._async_sems.get(loop)
            if sem is None:
                sem = asyncio.Semaphore(self.config.concurrency)
                self._async_sems[loop] = sem
            return sem

    async def acomplete(self, messages: list[dict], *, role: str = "agent",
                        temperature: float | None = None, max_tokens: int | None = None,
                        seed: int | None = None, stop: str | list[str] | None = None,
                        grammar: str | None = None, response_format: dict | None = None) -> Completion:
        """Async twin of :meth:`complete` (litellm.acompletion, asyncio semaphore)."""
        t0 = time.perf_counter()
        kw, key = self._prepare(messages, temperature, max_tokens, seed, stop, grammar, role, response_format)
        hit = self._from_cache(key, t0)
        if hit is not None:
            self.usage.record(role, hit)
            return hit
        litellm = litellm_module()
        sem = self._async_sem()
        attempts = self.config.num_retries + 1
        for attempt in range(attempts):
            try:
                async with sem:
                    start = time.perf_counter()
                    with self._watchdog(attempt, attempts):
                        response = await litellm.acompletion(**kw)
                    latency = time.perf_counter() - start
                result = self._to_completion(response, latency, kw.get("max_tokens"))
            except Exception as exc:  # noqa: BLE001 - classified in _retry_delay
                await asyncio.sleep(self._retry_delay(exc, role, attempt, attempts))
                continue
            self._store(key, result)
            self.usage.record(role, result)
            return result
        raise AssertionError("unreachable")  # pragma: no cover


def _register_fake() -> None:
    from promptevo.llm.double import register_scripted_provider  # noqa: PLC0415 - only for fake/ models

    register_scripted_provider()
