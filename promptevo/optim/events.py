"""Events of a run, for whoever follows it: the progress display, the run log, experiment trackers.

The engine calls ``emit(kind, **data)``; the emitter builds the kind's typed event (one frozen dataclass
per kind below; an unknown kind or a field the kind does not have is a :class:`EventError` naming the valid
ones) and every listener's ``on_event(kind, event)`` gets it. An event is also a read-only mapping of its
fields (``event["seed"]``, ``event.get("usage")``), so a listener written against plain dicts keeps
working. A listener that raises is reported once and then ignored: a display or tracker bug never stops
an optimization.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol

log = logging.getLogger(__name__)


class EventError(ValueError):
    """An event of an unknown kind, or with a field its kind does not have; ``str(e)`` is one line."""


class Event(Mapping):
    """Base of the typed events: a frozen dataclass that reads as a mapping of its fields."""

    kind: ClassVar[str] = ""

    def __getitem__(self, key: str) -> Any:
        if key in self._names():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]


@dataclass(frozen=True)
class RunStart(Event):
    kind: ClassVar[str] = "run_start"
    run_dir: str
    config: dict = field(default_factory=dict)
    adapter: dict = field(default_factory=dict)
    resumed: Any = None
    candidates: int = 0
    splits: dict = field(default_factory=dict)


@dataclass(frozen=True)
class GenerationStart(Event):
    kind: ClassVar[str] = "generation_start"
    generation: int
    generations: int
    parent: str
    mode: str = "mutate"


@dataclass(frozen=True)
class Phase(Event):
    """What is being played now."""

    kind: ClassVar[str] = "phase"
    generation: int | None
    text: str


@dataclass(frozen=True)
class EpisodeDone(Event):
    kind: ClassVar[str] = "episode"
    seed: int
    success: bool
    split: str
    calls: int = 0
    error: str | None = None


@dataclass(frozen=True)
class CandidateVerdict(Event):
    """A child's training verdict (its race on the acceptance seeds)."""

    kind: ClassVar[str] = "candidate"
    generation: int
    id: str
    operator: str
    split: str
    n: int
    mean_diff: float
    status: str
    reason: str
    edit: str = ""


@dataclass(frozen=True)
class GateVerdict(Event):
    """A validation gate: the top child against the best so far."""

    kind: ClassVar[str] = "gate"
    generation: int
    id: str
    against: str
    promoted: bool
    reason: str
    child: Any = None
    best: Any = None


@dataclass(frozen=True)
class Note(Event):
    kind: ClassVar[str] = "note"
    generation: int | None
    message: str


@dataclass(frozen=True)
class RunWarning(Event):
    kind: ClassVar[str] = "warning"
    message: str


@dataclass(frozen=True)
class GenerationEnd(Event):
    kind: ClassVar[str] = "generation_end"
    generation: int
    generations: int
    best: str
    best_validation: Any = None
    usage: dict = field(default_factory=dict)
    episodes: int = 0
    elapsed_s: float = 0.0
    children: int = 0
    accepted: int = 0
    promoted: bool = False


@dataclass(frozen=True)
class Final(Event):
    """The test table."""

    kind: ClassVar[str] = "final"
    table: str
    report: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunEnd(Event):
    kind: ClassVar[str] = "run_end"
    run_dir: str = ""
    stop_reason: str = ""
    report: dict = field(default_factory=dict)


#: kind -> its event class
EVENTS: dict[str, type[Event]] = {c.kind: c for c in (RunStart, GenerationStart, Phase, EpisodeDone, CandidateVerdict,
                                                       GateVerdict, Note, RunWarning, GenerationEnd, Final, RunEnd)}


def make_event(kind: str, data: Mapping[str, Any]) -> Event:
    """The typed event of ``kind`` with ``data``'s fields (an :class:`Event` passes through)."""
    if isinstance(data, Event) and data.kind == kind:
        return data
    cls = EVENTS.get(kind)
    if cls is None:
        raise EventError(f"unknown event kind {kind!r}; valid: {', '.join(EVENTS)}")
    names = cls._names()
    extra = sorted(set(data) - set(names))
    if extra:
        raise EventError(f"event {kind!r} has no field {', '.join(map(repr, extra))}; its fields: {', '.join(names)}")
    try:
        return cls(**dict(data))
    except TypeError as e:
        raise EventError(f"event {kind!r}: {e}; its fields: {', '.join(names)}") from None


class Listener(Protocol):
    def on_event(self, kind: str, event: Event) -> None: ...


class Emitter:
    def __init__(self, listeners: list[Listener] | None = None):
        self.listeners: list[Listener] = list(listeners or [])
        self._broken: set[int] = set()

    def add(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def __call__(self, kind: str, **data: Any) -> None:
        event = make_event(kind, data)
        for i, lst in enumerate(self.listeners):
            if i in self._broken:
                continue
            try:
                lst.on_event(kind, event)
            except Exception as e:  # noqa: BLE001 - a listener's bug must not stop the run
                self._broken.add(i)
                msg = f"warning: {type(lst).__name__} stopped following the run ({type(e).__name__}: {e})"
                log.warning(msg)
                for j, other in enumerate(self.listeners):
                    if j not in self._broken:
                        try:
                            other.on_event("warning", RunWarning(msg))
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


__all__ = ["CandidateVerdict", "EVENTS", "Emitter", "EpisodeDone", "Event", "EventError", "Final", "GateVerdict",
           "GenerationEnd", "GenerationStart", "Listener", "Note", "Phase", "RunEnd", "RunStart", "RunWarning",
           "make_event"]
