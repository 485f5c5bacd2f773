"""The episode store: every finished episode of a run, one JSON line each, keyed by (key, seed).

``key`` names what played (a prompt fingerprint, ``baseline:<agent>``, a task name for ``promptevo
eval``); a store never plays anything itself. Lines are appended and fsynced as episodes finish, so a
crash loses at most the episode in flight; a last line cut short by a crash is cut off the file on open
(so the next record starts on a line of its own; :attr:`EpisodeStore.recovered` says so), a line that is
not JSON elsewhere is one clear error. An episode that ended on an LLM error is kept (for the record) but
does not count as finished: :meth:`EpisodeStore.get` returns None for it, so it is played again.

Integrity. Every line carries what scheduled it (``split`` and ``settings``, a digest of the agent
settings, where the writer gives them) and ``sum``, a digest of the line's own content. On open, a line
whose digest does not match (altered after it was written), a line without one in a file whose lines have
them, and a second finished episode for the same (key, seed) are refused; :meth:`EpisodeStore.refuse`
refuses the lines a caller did not schedule (the engine: episodes its checkpoint never asked for). A
refused line is never scored: it is moved, as it was, to ``<file>.refused`` and named in
:attr:`EpisodeStore.refused` (one line each, file and line number); its episode is played again.

Why JSON lines and not SQLite: the store is append-only with one writer per folder (the folder lock),
a crash can only cut the last line, and the file is read by people and by ``jq``; the checks above are
what a unique key and a transaction would add, and they also catch a line edited by hand.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from promptevo.errors import PromptevoError
from promptevo.evaluation.episode import EpisodeResult
from promptevo.fileio import append_line, write_json_atomic, write_text_atomic

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


def line_sum(record: dict) -> str:
    """The digest of a store line's content (every field but ``sum``)."""
    body = {k: v for k, v in record.items() if k != "sum"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:24]


@dataclass(frozen=True)
class Entry:
    """One accepted line of the store: where it was in the file when opened and what it says."""

    line: int  # 1-based line number in the file as opened (0: appended since)
    n: int  # 1-based record number in the file as opened (0: appended since)
    key: str
    seed: int
    split: str | None
    settings: str | None
    result: dict
    raw: str


class EpisodeStore:
    """Append-only JSONL of episodes keyed by (key, seed), every line checked. Thread-safe."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: list[Entry] = []
        self._data: dict[tuple[str, int], dict] = {}
        self.lines = 0  # records in the file (every played episode is one line)
        #: one line saying what was repaired on open (a partial last record cut off), else None
        self.recovered: str | None = None
        #: one line per refused line (file:line and why); refused lines are moved to ``<file>.refused``
        self.refused: list[str] = []
        #: False for a file written before lines carried digests (nothing to check them against)
        self.checked = True
        if self.path.exists():
            self._open()

    # -- opening ------------------------------------------------------------------------------------
    def _open(self) -> None:
        raw = self.path.read_bytes()
        lines = raw.decode("utf-8", errors="replace").splitlines()
        parsed: list[tuple[int, dict, str]] = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise TypeError("not an object")
                str(rec["key"]), int(rec["seed"])
                if not isinstance(rec["result"], dict):
                    raise TypeError("result is not an object")
            except (ValueError, KeyError, TypeError) as e:
                if i == len(lines):  # a line cut short by a crash: cut it off, that episode is re-run
                    self._truncate_last(raw)
                    continue
                raise StoreError(f"{self.path}:{i}: corrupt episode record ({e}); remove the line to continue") from None
            parsed.append((i, rec, line))
        self.checked = any("sum" in rec for _, rec, _ in parsed) or not parsed
        bad: list[tuple[int, str, str]] = []
        finished: dict[tuple[str, int], int] = {}
        for n, (i, rec, line) in enumerate(parsed, 1):
            key, seed = str(rec["key"]), int(rec["seed"])
            if self.checked and "sum" not in rec:
                bad.append((i, line, "it carries no checksum (written by hand or by another program)"))
                continue
            if "sum" in rec and rec["sum"] != line_sum(rec):
                bad.append((i, line, "its checksum does not match its content (altered after it was written)"))
                continue
            if not rec["result"].get("error"):
                if (key, seed) in finished:
                    bad.append((i, line, f"a second finished episode for the same key and seed (line "
                                         f"{finished[(key, seed)]} has the first)"))
                    continue
                finished[(key, seed)] = i
            self._entries.append(Entry(i, n, key, seed, rec.get("split"), rec.get("settings"), rec["result"], line))
        self.lines = len(parsed)
        if raw and not raw.endswith(b"\n") and self.recovered is None:  # a complete last record, no newline
            with self.path.open("ab") as f:
                f.write(b"\n")
        self._rebuild()
        if bad:
            self._set_aside(bad)

    def _rebuild(self) -> None:
        self._data = {}
        for e in self._entries:
            old = self._data.get((e.key, e.seed))
            if old is None or old.get("error") or not e.result.get("error"):
                self._data[(e.key, e.seed)] = e.result

    def _set_aside(self, bad: list[tuple[int, str, str]]) -> None:
        """Move refused lines to ``<file>.refused`` and rewrite the file with the accepted ones."""
        aside = self.path.with_name(self.path.name + ".refused")
        for i, line, why in bad:
            where = f"{self.path}:{i}" if i else f"{self.path} (a line written by this process)"
            self.refused.append(f"{where}: refused, never scored: {why}; moved to {aside.name}")
            append_line(aside, line)
        write_text_atomic(self.path, "".join(e.raw + "\n" for e in self._entries))
        self.lines = len(self._entries)

    def _truncate_last(self, raw: bytes) -> None:
        """Cut the file after its last newline (the partial record of a writer killed mid-line)."""
        keep = raw.rstrip(b"\n").rfind(b"\n") + 1
        with self.path.open("r+b") as f:
            f.truncate(keep)
        self.recovered = (f"{self.path}: the last record was cut short (a crash while writing it); removed "
                          f"{len(raw) - keep} bytes, that episode will be played again")

    def refuse(self, reason: Callable[[Entry], str | None]) -> list[str]:
        """Refuse every line for which ``reason(entry)`` returns a reason (e.g. an episode nobody
        scheduled): moved aside, never returned again. Returns the new lines of :attr:`refused`."""
        with self._lock:
            bad = [(e, why) for e in self._entries if (why := reason(e))]
            if not bad:
                return []
            gone = {id(e) for e, _ in bad}
            self._entries = [e for e in self._entries if id(e) not in gone]
            self._rebuild()
            n = len(self.refused)
            self._set_aside([(e.line, e.raw, why) for e, why in bad])
            return self.refused[n:]

    # -- reading and writing ------------------------------------------------------------------------
    def get(self, key: str, seed: int) -> dict | None:
        """A finished episode (one that ended on an LLM error does not count)."""
        with self._lock:
            ep = self._data.get((key, int(seed)))
        return ep if ep is not None and not ep.get("error") else None

    def put(self, key: str, seed: int, result: Any, *, split: str | None = None,
            settings: str | None = None) -> dict:
        """Record an episode (with the split and agent settings that scheduled it, where known); a finished
        episode already stored for (key, seed) is kept and returned."""
        rec: dict[str, Any] = {"key": key, "seed": int(seed)}
        if split is not None:
            rec["split"] = split
        if settings is not None:
            rec["settings"] = settings
        rec["result"] = as_dict(result)
        rec = json.loads(json.dumps(rec, ensure_ascii=True, default=str))  # what a reader will parse
        rec["sum"] = line_sum(rec)
        line = json.dumps(rec, ensure_ascii=True)
        d = rec["result"]
        with self._lock:
            old = self._data.get((key, int(seed)))
            if old is not None and not old.get("error"):
                return old
            self._data[(key, int(seed))] = d
            append_line(self.path, line)
            self.lines += 1
            self._entries.append(Entry(0, 0, key, int(seed), split, settings, d, line))
        return d

    def after(self, line: int) -> list[dict]:
        """The accepted episodes that were past the first ``line`` lines of the file when it was opened
        (what a crash after the last checkpoint left), in file order."""
        with self._lock:
            return [e.result for e in self._entries if e.n > line]

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


def iter_records(path: str | Path) -> Iterator[dict]:
    """The records of an episodes file as stored (``key``, ``seed``, ``split``, ``result``...), one per line,
    from ``episodes.jsonl`` or a committed ``episodes.jsonl.gz``; unchecked (for reading finished runs)."""
    import gzip

    p = Path(path)
    opener: Callable[..., Any] = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                if isinstance(rec, dict):
                    yield rec


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
