"""Crash-safe file writes (one implementation for the whole package).

* :func:`write_text_atomic` / :func:`write_json_atomic` - write a temporary file, fsync, rename over the
  target: a reader (or a resumed run) sees the old file or the new one, never half of one;
* :func:`append_jsonl` - append one JSON line and fsync it.

Text is written as UTF-8 with ``errors="replace"``: a lone surrogate (e.g. from a server's error body)
becomes "?" instead of aborting the write.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8", errors="replace") as f:
        f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
