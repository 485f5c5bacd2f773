"""Crash-safe file writes (one implementation for the whole package).

* :func:`write_text_atomic` / :func:`write_json_atomic` - write a temporary file, fsync, rename over the
  target: a reader (or a resumed run) sees the old file or the new one, never half of one;
* :func:`append_jsonl` / :func:`append_line` - append one JSON line (or any line) and fsync it;
* :class:`FolderLock` - one process at a time in a run folder; :func:`io_error_line` - an OSError as one line.

Text is written as UTF-8 with ``errors="replace"``: a lone surrogate (e.g. from a server's error body)
becomes "?" instead of aborting the write.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from promptevo.errors import PromptevoError


def write_text_atomic(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # unique per writer
    try:
        with open(tmp, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any, *, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False, default=str) + "\n")


def append_jsonl(path: str | Path, record: dict) -> None:
    append_line(path, json.dumps(record, ensure_ascii=False, default=str))


def append_line(path: str | Path, line: str) -> None:
    """Append one line (a newline is added) and fsync it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", errors="replace") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


class FolderLockError(PromptevoError, RuntimeError):
    """Another live process owns the folder; ``str(e)`` is one line naming its PID."""


def io_error_line(e: OSError, doing: str = "write") -> str:
    """One line for a file-system error, naming the path: ``cannot write /x/y: Read-only file system``."""
    where = e.filename or "a file"
    return f"cannot {doing} {where}: {e.strerror or type(e).__name__}"


class FolderLock:
    """An exclusive lock on a run folder, held while a process works in it (``<folder>/run.lock``).

    The lock is an ``flock`` on the file, so the kernel releases it when the owner dies (``kill -9``):
    a later process takes a stale lock over and :meth:`acquire` says so. The file records the owner's PID
    for the message a second process gets.
    """

    NAME = "run.lock"

    def __init__(self, folder: str | Path):
        self.path = Path(folder) / self.NAME
        self._fd: int | None = None

    def acquire(self) -> str | None:
        """Take the lock; returns a note when a stale lock of a dead process was taken over, raises
        :class:`FolderLockError` when a live process holds it and :class:`OSError` when the folder cannot
        be written."""
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
            os.close(fd)
            who = f"process {owner[0]}" if owner else "another process"
            raise FolderLockError(f"{self.path.parent} is in use by {who}; wait for it to finish or stop it "
                                  "(a second optimize, resume or eval on the same run folder is refused)") from None
        old = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        if old and old[0] != str(os.getpid()):
            return f"took over the lock of process {old[0]}, which ended without releasing it"
        return None

    def release(self) -> None:
        if self._fd is not None:
            try:
                self.path.unlink(missing_ok=True)  # while still held: no other process can be mid-acquire on it
            except OSError:
                pass
            os.close(self._fd)  # closing releases the flock
            self._fd = None

    def __enter__(self) -> "FolderLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
