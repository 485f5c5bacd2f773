"""The episode store: every finished episode of a run, one JSON line each, keyed by (key, seed).

``key`` names what played (a prompt fingerprint, ``baseline:<agent>``, a task name for ``promptevo
eval``); a store never plays anything itself. Lines are appended and fsynced as episodes finish, so a
crash loses at most the episode in flight; a last line cut short by a crash is cut off the file on open
(so the next record starts on a line of its own; :attr:`EpisodeStore.recovered` says so), a corrupt line
elsewhere is one clear error. An episode that ended on an LLM error is kept (for the record) but
does not count as finished: :meth:`EpisodeStore.get` returns None for it, so it is played again.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator

from promptevo.errors import PromptevoError
from promptevo.evaluation.episode import EpisodeResult
from promptevo.fileio import append_jsonl, write_json_atomic

EPISODES_FILE = "episodes.jsonl"


class StoreError(PromptevoError, RuntimeError):
    """A store file cannot be read; ``str(e)`` is one line."""


def as_dict(result: Any) -> dict:
    """An episode result (EpisodeResult, its dict, or a dataclass) as a plain dict."""
    if isinstance(result, dict):
        return dict(result)
    if hasattr(result, "to_dict"):
        return result.to_dict()
    return asdict(result)


class EpisodeStore:
    """Append-only JSONL of episodes keyed by (key, seed). Thread-safe."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._data: dict[tuple[str, int], dict] = {}
        self.lines = 0  # records in the file (every played episode is one line)
        self._order: list[dict] = []
        #: one line saying what was repaired on open (a partial last record cut off), else None
        self.recovered: str | None = None
        if self.path.exists():
            raw = self.path.read_bytes()
            lines = raw.decode("utf-8", errors="replace").splitlines()
            for i, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    key, seed, result = str(rec["key"]), int(rec["seed"]), rec["result"]
                    if not isinstance(result, dict):
                        raise TypeError("result is not an object")
                except (ValueError, KeyError, TypeError) as e:
                    if i == len(lines):  # a line cut short by a crash: cut it off, that episode is re-run
                        self._truncate_last(raw)
                        continue
                    raise StoreError(f"{self.path}:{i}: corrupt episode record ({e}); remove the line to continue") from None
                self.lines += 1
                self._order.append(result)
                old = self._data.get((key, seed))
                if old is None or old.get("error") or not result.get("error"):
                    self._data[(key, seed)] = result
            if raw and not raw.endswith(b"\n") and self.recovered is None:  # a complete last record, no newline
                with self.path.open("ab") as f:
                    f.write(b"\n")

    def _truncate_last(self, raw: bytes) -> None:
        """Cut the file after its last newline (the partial record of a writer killed mid-line)."""
        keep = raw.rstrip(b"\n").rfind(b"\n") + 1
        with self.path.open("r+b") as f:
            f.truncate(keep)
        self.recovered = (f"{self.path}: the last record was cut short (a crash while writing it); removed "
                          f"{len(raw) - keep} bytes, that episode will be played again")

    def get(self, key: str, seed: int) -> dict | None:
        """A finished episode (one that ended on an LLM error does not count)."""
        with self._lock:
            ep = self._data.get((key, int(seed)))
        return ep if ep is not None and not ep.get("error") else None

    def put(self, key: str, seed: int, result: Any) -> dict:
        """Record an episode; a finished episode already stored for (key, seed) is kept and returned."""
        d = as_dict(result)
        with self._lock:
            old = self._data.get((key, int(seed)))
            if old is not None and not old.get("error"):
                return old
            self._data[(key, int(seed))] = d
            append_jsonl(self.path, {"key": key, "seed": int(seed), "result": d})
            self.lines += 1
            self._order.append(d)
        return d

    def after(self, line: int) -> list[dict]:
        """The episodes recorded after the first ``line`` lines (in file order)."""
        with self._lock:
            return list(self._order[line:])

    def error(self, key: str, seed: int) -> str | None:
        """The error of the episode recorded for (key, seed), if it ended on one."""
        with self._lock:
            ep = self._data.get((key, int(seed)))
        return ep.get("error") if ep is not None else None

    def has(self, key: str, seed: int) -> bool:
        """True when any record (finished or errored) exists for (key, seed)."""
        with self._lock:
            return (key, int(seed)) in self._data

    def items(self, key: str | None = None) -> Iterator[tuple[str, int, dict]]:
        with self._lock:
            rows = list(self._data.items())
        for (k, s), d in rows:
            if key is None or k == key:
                yield k, s, d

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


def read_episodes(path: str | Path) -> list[Any]:
    """The episodes of a store file as :class:`~promptevo.evaluation.rollout.EpisodeResult` objects (for each
    (key, seed) the finished episode, else the last errored one)."""
    p = Path(path)
    if not p.exists():
        return []
    return [EpisodeResult.from_dict(d) for _, _, d in EpisodeStore(p).items()]


class RunWriter:
    """The results folder of ``promptevo eval``: the episode store (keyed by task name), ``summary.json``
    and ``config.json`` (atomic)."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.episodes_path = self.dir / EPISODES_FILE
        self.store = EpisodeStore(self.episodes_path)
        self._lock = threading.Lock()
        self.count = 0

    def add(self, result: Any) -> None:
        d = as_dict(result)
        self.store.put(str(d.get("task", "")), int(d["seed"]), d)
        with self._lock:
            self.count += 1

    def write_summary(self, summary: dict) -> Path:
        return write_json_atomic(self.dir / "summary.json", summary)

    def write_config(self, config: dict) -> Path:
        return write_json_atomic(self.dir / "config.json", config)
