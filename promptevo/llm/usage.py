"""Token, cost and fault accounting per role (thread-safe)."""

from __future__ import annotations

import threading

from promptevo.llm.types import Completion

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

    def merge(self, role: str, counters: dict, *, retries_by_kind: dict | None = None,
              errors_by_kind: dict | None = None) -> None:
        """Add counters measured elsewhere (a worker process's tracker, a trajectory's call records):
        ``counters`` holds some of ``calls``, ``cache_hits``, tokens, ``cost``, ``latency_s``, ``retries``,
        ``errors``; the two ``*_by_kind`` maps add to the fault kinds."""
        row = {k: v for k, v in counters.items() if v}
        if row:
            self._add(role, **row)
        with self._lock:
            for source, target in ((retries_by_kind, self._retry_kinds), (errors_by_kind, self._error_kinds)):
                for kind, n in (source or {}).items():
                    target[kind] = target.get(kind, 0) + n

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


