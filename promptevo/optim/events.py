"""Events of a run, for whoever follows it: the progress display, the run log, experiment trackers.

The engine calls ``emit(kind, **data)``; every listener's ``on_event(kind, data)`` gets it. Kinds:
``run_start``, ``generation_start``, ``phase`` (what is being played now), ``episode``, ``candidate``
(a child's training verdict), ``gate`` (a validation gate), ``note``, ``warning``, ``generation_end``,
``final`` (the test table), ``run_end``. A listener that raises is reported once and then ignored: a
display or tracker bug never stops an optimization.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Listener(Protocol):
    def on_event(self, kind: str, data: dict[str, Any]) -> None: ...


class Emitter:
    def __init__(self, listeners: list[Listener] | None = None):
        self.listeners: list[Listener] = list(listeners or [])
        self._broken: set[int] = set()

    def add(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def __call__(self, kind: str, **data: Any) -> None:
        for i, lst in enumerate(self.listeners):
            if i in self._broken:
                continue
            try:
                lst.on_event(kind, data)
            except Exception as e:  # noqa: BLE001 - a listener's bug must not stop the run
                self._broken.add(i)
                msg = f"warning: {type(lst).__name__} stopped following the run ({type(e).__name__}: {e})"
                log.warning(msg)
                for j, other in enumerate(self.listeners):
                    if j not in self._broken:
                        try:
                            other.on_event("warning", {"message": msg})
                        except Exception:  # noqa: BLE001
                            self._broken.add(j)

    def close(self) -> None:
        for lst in self.listeners:
            close = getattr(lst, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # noqa: BLE001
                    pass
