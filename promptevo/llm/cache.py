"""The on-disk response cache (sqlite3): the same request is answered with the same reply."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time

from promptevo.llm.errors import LLMConfigError


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


