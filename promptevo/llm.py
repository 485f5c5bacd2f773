"""The one gateway through which every LLM call of promptevo passes.

Built on LiteLLM: any LiteLLM model string works (``openai/gpt-4o-mini``, ``ollama/qwen3:4b``,
``hosted_vllm/<name>`` with ``api_base``), plus two in-process custom providers:

* ``local/<name>``: llama.cpp models served by :mod:`promptevo.localmodel` (registered on first use);
* ``fake/scripted``: :class:`ScriptedLLM`, a test double whose replies come from a Python callable.

The gateway adds what every run needs on top of LiteLLM: retries with exponential backoff on
transient errors, one-line errors for configuration mistakes, a response cache on disk, a
concurrency limit, and token/cost accounting per role.

Cache semantics: the cache is for reproducibility. A prompt that was answered before is answered
from the cache at *any* temperature (the key includes the temperature, so the same call returns the
same reply). Disable the cache (``cache_dir=None``) to sample several different replies.

``litellm`` is imported lazily (it takes seconds to import), so ``import promptevo.llm`` is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import logging
import os
import random
import re
import sqlite3
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import urlparse

import promptevo  # noqa: F401  (sets LITELLM_LOCAL_MODEL_COST_MAP before litellm is imported)

if TYPE_CHECKING:  # pragma: no cover
    import litellm as _litellm_mod

log = logging.getLogger(__name__)

__all__ = [
    "LLMError",
    "LLMConfigError",
    "LLMContextError",
    "LLMReplyError",
    "LLMConfig",
    "Completion",
    "UsageTracker",
    "ResponseCache",
    "Gateway",
    "ScriptedLLM",
    "ScriptedReply",
]

EXAMPLE_MODELS = "openai/gpt-4o-mini, ollama/qwen3:4b or local/qwen2.5-coder-1.5b"
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
# errors


class LLMError(Exception):
    """Base error of the gateway; ``str(e)`` is one clear line."""

    def __init__(self, message: str, *, model: str | None = None, role: str | None = None,
                 attempts: int = 0):
        super().__init__(_one_line(message))
        self.model = model
        self.role = role
        self.attempts = attempts


class LLMConfigError(LLMError):
    """Unknown model/provider, missing API key, bad api_base or bad request: never retried."""


class LLMContextError(LLMConfigError):
    """Prompt plus max_tokens do not fit in the model's context window (not retried: same prompt, same
    result). The optimizer's calls (analyzer.call_json) count it as a failed call and fall back."""


class LLMReplyError(LLMError):
    """The model kept returning an empty (or whitespace-only) reply after all retries."""


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------------
# config and results


@dataclass
class LLMConfig:
    model: str = "local/qwen2.5-coder-1.5b"  # any LiteLLM model string
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never logged / written
    temperature: float = 0.0
    max_tokens: int = 512
    timeout: float = 120.0  # seconds per attempt, passed to litellm
    num_retries: int = 3  # retries after the first attempt, on transient errors only
    cache_dir: str | None = ".cache/promptevo-llm"  # None disables the cache
    concurrency: int = 4  # max in-flight calls per gateway
    seed: int | None = None
    backoff_base: float = 1.0  # seconds; retry k waits ~ backoff_base * 2**k (+ jitter)
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise LLMConfigError("LLMConfig.model must be a non-empty LiteLLM model string, "
                                 f"such as {EXAMPLE_MODELS}")
        if self.concurrency < 1:
            raise LLMConfigError(f"LLMConfig.concurrency must be >= 1, got {self.concurrency}")
        if self.num_retries < 0:
            raise LLMConfigError(f"LLMConfig.num_retries must be >= 0, got {self.num_retries}")
        if self.max_tokens < 1:
            raise LLMConfigError(f"LLMConfig.max_tokens must be >= 1, got {self.max_tokens}")
        if self.timeout <= 0:
            raise LLMConfigError(f"LLMConfig.timeout must be > 0, got {self.timeout}")
        if not isinstance(self.temperature, (int, float)) or not 0.0 <= float(self.temperature) < float("inf"):
            raise LLMConfigError(f"LLMConfig.temperature must be a finite number >= 0, got {self.temperature}")

    def public_dict(self) -> dict:
        """All fields except the API key (replaced by ``api_key_set``); safe for summary.json.

        Credentials inside ``api_base`` (``http://user:pass@host``) and secret-looking query
        parameters are replaced by ``***`` (see :func:`redact_url`)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "api_key"}
        d["api_base"] = redact_url(self.api_base)
        d["api_key_set"] = self.api_key is not None
        return d

    def __repr__(self) -> str:  # dataclass repr already hides api_key; make it explicit
        inner = ", ".join(f"{k}={v!r}" for k, v in self.public_dict().items())
        return f"LLMConfig({inner})"

    @property
    def provider(self) -> str | None:
        return self.model.split("/", 1)[0] if "/" in self.model else None


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float  # USD spent by this call; 0.0 for cache hits, local/fake and unpriced models
    latency_s: float  # duration of the successful attempt (cache lookup time for cache hits)
    cached: bool
    model: str
    truncated: bool = False  # finish_reason == "length": the reply hit max_tokens
    finish_reason: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# accounting

_COUNTERS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "cost", "errors",
             "retries", "latency_s")


def _zero() -> dict:
    return {k: (0.0 if k in ("cost", "latency_s") else 0) for k in _COUNTERS}


class UsageTracker:
    """Thread-safe counters per role and in total.

    ``calls`` counts every completion returned (cache hits included); ``cache_hits`` the subset
    answered from the cache. Tokens, cost and latency count only real model calls (a cache hit
    spends nothing). ``errors`` counts calls that raised, ``retries`` every retried attempt.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_role: dict[str, dict] = {}
        self._retry_kinds: dict[str, int] = {}
        self._error_kinds: dict[str, int] = {}

    def _add(self, role: str, **delta: float) -> None:
        with self._lock:
            row = self._by_role.setdefault(role, _zero())
            for k, v in delta.items():
                row[k] += v

    def record(self, role: str, completion: Completion) -> None:
        if completion.cached:
            self._add(role, calls=1, cache_hits=1)
        else:
            self._add(role, calls=1, prompt_tokens=completion.prompt_tokens,
                      completion_tokens=completion.completion_tokens, cost=completion.cost,
                      latency_s=completion.latency_s)

    def record_retry(self, role: str, kind: str | None = None) -> None:
        self._add(role, retries=1)
        if kind:
            with self._lock:
                self._retry_kinds[kind] = self._retry_kinds.get(kind, 0) + 1

    def record_error(self, role: str, kind: str | None = None) -> None:
        self._add(role, errors=1)
        if kind:
            with self._lock:
                self._error_kinds[kind] = self._error_kinds.get(kind, 0) + 1

    def faults(self) -> dict:
        """``{"retries", "errors", "retries_by_kind", "errors_by_kind"}``; a kind is the exception
        class name (``RateLimitError``, ``InternalServerError``, ``Timeout``, ...) or ``empty_reply``.
        ``errors`` counts calls that raised after all retries (plus configuration errors)."""
        tot = self.total()
        with self._lock:
            return {"retries": int(tot["retries"]), "errors": int(tot["errors"]),
                    "retries_by_kind": dict(sorted(self._retry_kinds.items())),
                    "errors_by_kind": dict(sorted(self._error_kinds.items()))}

    def role(self, role: str) -> dict:
        with self._lock:
            return dict(self._by_role.get(role, _zero()))

    def total(self) -> dict:
        with self._lock:
            tot = _zero()
            for row in self._by_role.values():
                for k in _COUNTERS:
                    tot[k] += row[k]
            return tot

    def snapshot(self) -> dict:
        """Plain dict: ``{"total": {...}, "by_role": {role: {...}}}`` with the counters above."""
        with self._lock:
            by_role = {r: dict(row) for r, row in sorted(self._by_role.items())}
        tot = _zero()
        for row in by_role.values():
            for k in _COUNTERS:
                tot[k] += row[k]
        for row in [tot, *by_role.values()]:
            row["cost"] = round(row["cost"], 8)
            row["latency_s"] = round(row["latency_s"], 4)
        return {"total": tot, "by_role": by_role}

    def reset(self) -> None:
        with self._lock:
            self._by_role.clear()
            self._retry_kinds.clear()
            self._error_kinds.clear()


# --------------------------------------------------------------------------------------------------
# cache


def cache_key(*, model: str, api_base: str | None, messages: list[dict], temperature: float,
              max_tokens: int, seed: int | None, stop: list[str] | None,
              grammar: str | None) -> str:
    """sha256 over the request fields that determine the reply (never the API key)."""
    payload = {"v": 1, "model": model, "api_base": api_base, "messages": messages,
               "temperature": float(temperature), "max_tokens": int(max_tokens), "seed": seed,
               "stop": stop, "grammar": grammar}
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """sqlite3 file ``<cache_dir>/llm-cache.sqlite3``: one row per key, value = Completion JSON."""

    FILENAME = "llm-cache.sqlite3"

    def __init__(self, cache_dir: str | os.PathLike):
        os.makedirs(cache_dir, exist_ok=True)
        self.path = os.path.join(os.fspath(cache_dir), self.FILENAME)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False,
                                         isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, "
                               "value TEXT NOT NULL, created REAL NOT NULL)")
        except sqlite3.Error as e:
            raise LLMConfigError(f"cannot open the LLM cache at {self.path}: {e}") from e

    def get(self, key: str) -> dict | None:
        with self._lock:
            row = self._conn.execute("SELECT value FROM completions WHERE key = ?",
                                     (key,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except json.JSONDecodeError:
            return None

    def put(self, key: str, value: dict) -> None:
        blob = json.dumps(value, ensure_ascii=True)
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO completions (key, value, created) "
                               "VALUES (?, ?, ?)", (key, blob, time.time()))

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


# --------------------------------------------------------------------------------------------------
# litellm access (lazy)

_LITELLM_LOCK = threading.Lock()
_LITELLM: Any = None


def _litellm() -> "_litellm_mod":
    """Import litellm on first use (slow import) and quieten its stdout debug hints."""
    global _LITELLM
    if _LITELLM is None:
        with _LITELLM_LOCK:
            if _LITELLM is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm

                litellm.suppress_debug_info = True
                _LITELLM = litellm
    return _LITELLM


def _register_provider(name: str, handler_factory: Callable[[], Any]) -> None:
    """Add ``name`` to litellm.custom_provider_map once (keeps other entries)."""
    litellm = _litellm()
    with _LITELLM_LOCK:
        cpm = litellm.custom_provider_map
        if not any(item.get("provider") == name for item in cpm):
            cpm.append({"provider": name, "custom_handler": handler_factory()})
        _custom_llm_setup()


def _custom_llm_setup() -> None:
    litellm = _litellm()
    try:
        from litellm.utils import custom_llm_setup

        custom_llm_setup()
    except ImportError:  # pragma: no cover - older/newer litellm layouts
        for item in litellm.custom_provider_map:
            if item["provider"] not in litellm.provider_list:
                litellm.provider_list.append(item["provider"])
            if item["provider"] not in litellm._custom_providers:
                litellm._custom_providers.append(item["provider"])


# --------------------------------------------------------------------------------------------------
# the ScriptedLLM test double (class built lazily: it subclasses litellm.CustomLLM)


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
    litellm = _litellm()
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
    _register_provider("fake", lambda: _scripted_class()())


def __getattr__(name: str) -> Any:  # PEP 562: build ScriptedLLM (and import litellm) on demand
    if name == "ScriptedLLM":
        return _scripted_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------------------------------
# secrets: never written to results, logs or error lines

#: Environment variables whose values are treated as secrets by :func:`redact` (by name suffix/part).
_SECRET_ENV_RE = re.compile(r"(API_KEY|_KEY|TOKEN|SECRET|PASSWORD|PASSWD)", re.IGNORECASE)
_SECRET_QUERY_RE = re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|secret|password|sig)=)[^&#\s]*")
_URL_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")
_MIN_SECRET_LEN = 6


def redact_url(url: str | None) -> str | None:
    """``url`` with its userinfo (``user:pass@``) and secret query parameters replaced by ``***``."""
    if not url:
        return url
    out = _URL_USERINFO_RE.sub(r"\1***@", str(url))
    return _SECRET_QUERY_RE.sub(r"\1***", out)


def _url_secrets(url: str | None) -> list[str]:
    if not url:
        return []
    try:
        parsed = urlparse(url if "://" in url else f"http://{url}")
    except ValueError:
        return []
    return [x for x in (parsed.password, parsed.username if len(parsed.username or "") >= 8 else None) if x]


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with the given secrets, every ``*_API_KEY``/``*TOKEN``/``*SECRET``/``*PASSWORD``
    environment variable value, URL userinfo and secret query parameters replaced by ``***``."""
    if not text:
        return text
    values = {v for v in secrets if v and len(v) >= 3}
    values |= {v for k, v in os.environ.items() if v and len(v) >= _MIN_SECRET_LEN and _SECRET_ENV_RE.search(k)}
    for v in sorted(values, key=len, reverse=True):
        if v in text:
            text = text.replace(v, "***")
    return redact_url(text) or text


# --------------------------------------------------------------------------------------------------
# error classification


def _is_transient(exc: BaseException) -> bool:
    litellm = _litellm()
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
    return _one_line(first, 300)


def fault_kind(exc: BaseException) -> str:
    """Short label of a failed attempt for the fault counters: ``empty_reply`` or the class name."""
    return "empty_reply" if isinstance(exc, _EmptyReply) else type(exc).__name__


def _config_error_kind(exc: BaseException) -> str:
    litellm = _litellm()
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

    def __init__(self, config: LLMConfig | None = None, *, usage: UsageTracker | None = None):
        self.config = config if config is not None else LLMConfig()
        self.usage = usage if usage is not None else UsageTracker()
        self.cache = ResponseCache(self.config.cache_dir) if self.config.cache_dir else None
        self._sem = threading.BoundedSemaphore(self.config.concurrency)
        self._async_sems: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]" \
            = weakref.WeakKeyDictionary()
        self._async_lock = threading.Lock()
        self._checked = False
        self._check_lock = threading.Lock()
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
            from promptevo import localmodel  # noqa: PLC0415

            return int(localmodel.OPTIONS.n_ctx)
        if self.provider == "fake":
            return None
        try:
            info = _litellm().get_model_info(self.config.model)
        except Exception:  # noqa: BLE001 - unknown models simply have no known window
            return None
        n = info.get("max_input_tokens") or info.get("max_tokens")
        return int(n) if n else None

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
            register_scripted_provider()
        elif provider == "local":
            try:
                from promptevo import localmodel  # lazy: llm.py works without it
            except ImportError as e:
                raise LLMConfigError(
                    f"model {self.config.model!r} needs promptevo.localmodel, which failed to "
                    f"import: {_one_line(str(e), 200)}", model=self.config.model) from e
            try:
                localmodel.ensure_registered()
            except LLMError:
                raise
            except Exception as e:  # noqa: BLE001 - surface as one clear line
                raise LLMConfigError(f"model {self.config.model!r}: cannot set up the local "
                                     f"provider: {_one_line(str(e), 250)}",
                                     model=self.config.model) from e
            _custom_llm_setup()

    def _check_model_string(self) -> None:
        litellm = _litellm()
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
        litellm = _litellm()
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

    def _to_completion(self, response: Any, latency: float) -> Completion:
        try:
            choice = response.choices[0]
            text = _clean_text(choice.message.content)
            finish = getattr(choice, "finish_reason", None)
        except (AttributeError, IndexError, TypeError):
            text, finish = "", None
        if not text.strip():
            raise _EmptyReply()
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
        try:
            hidden = getattr(response, "_hidden_params", None) or {}
            cost = hidden.get("response_cost")
            if cost is None:
                cost = _litellm().completion_cost(completion_response=response)
            cost = float(cost or 0.0)
            return cost if cost >= 0 and cost == cost else 0.0
        except Exception:  # noqa: BLE001 - unknown prices must never crash a run
            return 0.0

    def _store(self, key: str | None, c: Completion) -> None:
        if self.cache is None or key is None:
            return
        try:
            self.cache.put(key, c.to_dict())
        except sqlite3.Error as e:
            log.warning("LLM cache write failed: %s", e)

    def _clean(self, exc: BaseException) -> str:
        """One line for ``exc`` without the API key, api_base credentials or secret env values."""
        return _clean_error(exc, self.config.api_key, *_url_secrets(self.config.api_base))

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
        if isinstance(exc, _litellm().exceptions.ContextWindowExceededError):
            return LLMContextError(f"model {model}: {kind}: {detail}", model=model, role=role,
                                   attempts=attempts)
        return LLMConfigError(f"model {model}: {kind}: {detail}", model=model, role=role,
                              attempts=attempts)

    def _prepare(self, messages: list[dict], temperature: float | None, max_tokens: int | None,
                 seed: int | None, stop: str | list[str] | None, grammar: str | None,
                 role: str) -> tuple[dict, str | None]:
        if not isinstance(messages, list) or not messages:
            raise LLMConfigError("messages must be a non-empty list of {'role', 'content'} dicts",
                                 model=self.config.model, role=role)
        try:
            self.check()
        except LLMError as e:
            self.usage.record_error(role, type(e).__name__)
            raise
        t, mt, sd, st = self._resolve(temperature, max_tokens, seed, stop)
        kw = self._call_kwargs(messages, t, mt, sd, st, grammar)
        key = self._key(messages, t, mt, sd, st, grammar) if self.cache is not None else None
        return kw, key

    # ---- public calls ---------------------------------------------------------------------------

    def complete(self, messages: list[dict], *, role: str = "agent",
                 temperature: float | None = None, max_tokens: int | None = None,
                 seed: int | None = None, stop: str | list[str] | None = None,
                 grammar: str | None = None) -> Completion:
        """One chat completion; cached, retried, counted under ``role``.

        Raises LLMConfigError (not retried), LLMReplyError (empty reply after retries) or
        LLMError (transient errors after all retries).
        """
        t0 = time.perf_counter()
        kw, key = self._prepare(messages, temperature, max_tokens, seed, stop, grammar, role)
        hit = self._from_cache(key, t0)
        if hit is not None:
            self.usage.record(role, hit)
            return hit
        litellm = _litellm()
        attempts = self.config.num_retries + 1
        for attempt in range(attempts):
            try:
                with self._sem:
                    start = time.perf_counter()
                    response = litellm.completion(**kw)
                    latency = time.perf_counter() - start
                result = self._to_completion(response, latency)
            except Exception as exc:  # noqa: BLE001 - classified in _retry_delay
                time.sleep(self._retry_delay(exc, role, attempt, attempts))
                continue
            self._store(key, result)
            self.usage.record(role, result)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _retry_delay(self, exc: Exception, role: str, attempt: int, attempts: int) -> float:
        """Seconds to wait before retrying a failed call, counted as a retry; or, for a permanent error
        or the last attempt, count the error and raise the one-line LLMError for it."""
        if (isinstance(exc, _EmptyReply) or _is_transient(exc)) and attempt + 1 < attempts:
            self.usage.record_retry(role, fault_kind(exc))
            delay = _backoff(self.config, attempt)
            log.info("LLM %s (role %s): %s; retry %d/%d in %.2fs", self.config.model, role,
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
                        grammar: str | None = None) -> Completion:
        """Async twin of :meth:`complete` (litellm.acompletion, asyncio semaphore)."""
        t0 = time.perf_counter()
        kw, key = self._prepare(messages, temperature, max_tokens, seed, stop, grammar, role)
        hit = self._from_cache(key, t0)
        if hit is not None:
            self.usage.record(role, hit)
            return hit
        litellm = _litellm()
        sem = self._async_sem()
        attempts = self.config.num_retries + 1
        for attempt in range(attempts):
            try:
                async with sem:
                    start = time.perf_counter()
                    response = await litellm.acompletion(**kw)
                    latency = time.perf_counter() - start
                result = self._to_completion(response, latency)
            except Exception as exc:  # noqa: BLE001 - classified in _retry_delay
                await asyncio.sleep(self._retry_delay(exc, role, attempt, attempts))
                continue
            self._store(key, result)
            self.usage.record(role, result)
            return result
        raise AssertionError("unreachable")  # pragma: no cover
