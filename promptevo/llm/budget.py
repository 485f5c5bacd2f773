"""A hard cap on LLM calls, shared by every gateway that holds it (thread-safe).

``promptevo compare`` gives each method one :class:`CallBudget` for all of its gateways (agent, optimizer,
reflection): the call that would exceed it is refused with :class:`~promptevo.llm.errors.LLMBudgetError`
before it is made, so no method can overshoot, whatever its loop does between checks. Cache hits count:
a call answered from the cache is still a call the method asked for.
"""

from __future__ import annotations

import threading


class CallBudget:
    def __init__(self, limit: int):
        if int(limit) < 0:
            raise ValueError(f"call budget must be >= 0 (got {limit})")
        self.limit = int(limit)
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Reserve one call; False (and nothing reserved) when the budget is spent."""
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    @property
    def left(self) -> int:
        with self._lock:
            return self.limit - self.used
