"""Value types of the gateway: the configuration of a model and one completion."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from promptevo.llm.errors import LLMConfigError
from promptevo.llm.secrets import redact_url

EXAMPLE_MODELS = "openai/gpt-4o-mini, ollama/qwen3:4b or local/qwen2.5-coder-1.5b"
LOCAL_PREFIX = "local/"  # models run in-process by llama-cpp-python (promptevo.llm.local)


def is_local_model(model: str | None) -> bool:
    return str(model or "").startswith(LOCAL_PREFIX)


def default_concurrency(model: str | None) -> int:
    """In-flight calls when the user gave no number: 1 for local models (llama.cpp serializes calls, and
    interleaved episodes defeat its prefix reuse), else 4."""
    return 1 if is_local_model(model) else 4


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
    price_in: float | None = None  # USD per million prompt tokens (overrides LiteLLM's price map)
    price_out: float | None = None  # USD per million completion tokens

    @classmethod
    def from_options(cls, *, model: str | None = None, api_base: str | None = None,
                     temperature: float | None = None, max_tokens: int | None = None, no_cache: bool = False,
                     concurrency: int | None = None, timeout: float | None = None) -> LLMConfig:
        """The config of command-line style options: an option left unset keeps its default, and the
        concurrency defaults per model (:func:`default_concurrency`)."""
        kw: dict = {"model": model or cls.model}
        if api_base:
            kw["api_base"] = api_base
        if temperature is not None:
            kw["temperature"] = temperature
        if max_tokens is not None:
            kw["max_tokens"] = max_tokens
        if no_cache:
            kw["cache_dir"] = None
        if timeout is not None:
            kw["timeout"] = timeout
        kw["concurrency"] = default_concurrency(kw["model"]) if concurrency is None else concurrency
        return cls(**kw)

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
        for name in ("price_in", "price_out"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and v >= 0):
                raise LLMConfigError(f"LLMConfig.{name} must be a number >= 0 (USD per million tokens), got {v!r}")
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


