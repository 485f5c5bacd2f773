"""Following a run: a live view in a terminal, plain lines elsewhere, and the run's own log file.

* :class:`LiveView` (stderr is a terminal): a rich live panel with the generation, what is being played,
  episodes done / planned, the best validation score, tokens, cost, elapsed time and an estimate of the
  time left; notes, verdicts and warnings scroll above it.
* :class:`PlainLines` (no terminal, e.g. a log file): one line per evaluated candidate, per gate, per
  generation, per note and warning. Nothing else, so a log stays readable.
* :class:`RunLog`: the same plain lines, appended to ``<run>/run.log``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from collections.abc import Mapping
from typing import IO, Any

from promptevo.optim.config import OptimizeConfig
from promptevo.optim.events import (
    CandidateVerdict,
    EpisodeDone,
    Event,
    Final,
    GateVerdict,
    GenerationEnd,
    GenerationStart,
    Note,
    Phase,
    RunEnd,
    RunStart,
    RunWarning,
    make_event,
)
from promptevo.safetext import strip_control


#: with no terminal, a progress line at least this often (seconds)
HEARTBEAT_S = 60.0


def planned_episodes(cfg: OptimizeConfig, generations_left: int | None = None) -> int:
    """An upper estimate of the episodes a run plays (racing and the store usually make it fewer)."""
    g = cfg.generations if generations_left is None else generations_left
    per_gen = cfg.effective_evidence_episodes + cfg.episodes * (1 + cfg.children) + 2 * cfg.validation_episodes
    return g * per_gen + cfg.validation_episodes + 3 * cfg.test_episodes


def _dur(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def format_line(kind: str, d: Mapping[str, Any]) -> str | None:
    """The plain line for an event (None for events that get no line), without control sequences (an
    LLM's text in a warning must not drive the terminal)."""
    line = _line_of(make_event(kind, d))
    return None if line is None else strip_control(line)


def _line_of(e: Event) -> str | None:
    g = getattr(e, "generation", None)
    tag = f"[gen {g}] " if g is not None else ""
    if isinstance(e, RunStart):
        cfg, sp = e.config or {}, e.splits or {}
        return (f"run {e.run_dir} | task {cfg.get('task')} | agent {cfg.get('agent')} | model {cfg.get('model')}"
                f" | splits: validation {sp.get('validation', 0)}, test {sp.get('test', 0)} seeds"
                + (" | resumed" if e.resumed else ""))
    if isinstance(e, CandidateVerdict):
        return f"{tag}{e.id} {e.edit or e.operator} [{e.operator}]: {e.status} ({e.reason})"
    if isinstance(e, GateVerdict):
        return (f"{tag}validation gate {e.id} {e.child} vs {e.against} {e.best}: "
                f"{'PROMOTED' if e.promoted else 'not promoted'} ({e.reason})")
    if isinstance(e, GenerationEnd):
        u = e.usage or {}
        return (f"{tag}done: {e.children} children, {e.accepted} accepted, "
                f"{'1 promoted' if e.promoted else '0 promoted'} | best {e.best} validation "
                f"{e.best_validation} | {e.episodes} episodes | {u.get('tokens', 0):,} tokens | "
                f"${u.get('cost', 0.0):.4f} | {_dur(e.elapsed_s or 0)}")
    if isinstance(e, (Note, RunWarning)):
        return f"{tag}{e.message}"
    if isinstance(e, Final):
        return e.table
    if isinstance(e, RunEnd):
        return f"finished: {e.stop_reason} | results in {e.run_dir}"
    return None


class Tally:
    """Episodes done against the plan, elapsed time and the estimate left (the live panel and the plain
    lines' heartbeat share it)."""

    def __init__(self, cfg: OptimizeConfig | None):
        self.t0 = time.time()
        self.done = 0
        self.planned = planned_episodes(cfg) if cfg is not None else 0
        self.calls = 0

    def on_event(self, kind: str, data: Mapping[str, Any]) -> None:
        e = make_event(kind, data)
        if isinstance(e, EpisodeDone):
            self.done += 1
            self.calls += int(e.calls or 0)
        elif isinstance(e, GenerationEnd) and e.usage.get("calls") is not None:  # every call, the optimizer's too
            self.calls = max(self.calls, int(e.usage["calls"]))

    def left_s(self) -> float | None:
        elapsed = time.time() - self.t0
        if not self.done or elapsed <= 0 or not self.planned:
            return None
        return max(0, self.planned - self.done) * elapsed / self.done

    def line(self) -> str:
        left = self.left_s()
        return (f"progress: {self.done}/~{self.planned} episodes, {self.calls} LLM calls so far, elapsed "
                f"{_dur(time.time() - self.t0)}, left (estimate from the episodes so far) "
                f"{_dur(left) if left is not None else '-'}")


class PlainLines:
    """Plain lines on stderr (no terminal): every event's line, and a progress line whenever
    ``heartbeat_s`` passed without one (a long LLM call still shows the run is alive)."""

    def __init__(self, stream: IO[str] | None = None, cfg: OptimizeConfig | None = None,
                 heartbeat_s: float = HEARTBEAT_S):
        self.stream = stream or sys.stderr
        self.tally = Tally(cfg)
        self.heartbeat_s = heartbeat_s
        self.last = time.time()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _print(self, line: str) -> None:
        with self._lock:
            print(line, file=self.stream, flush=True)
            self.last = time.time()

    def _beat(self) -> None:
        while not self._stop.wait(min(5.0, self.heartbeat_s / 4)):
            if time.time() - self.last >= self.heartbeat_s:
                self._print(self.tally.line())

    def on_event(self, kind: str, data: Mapping[str, Any]) -> None:
        if self._thread is None and self.heartbeat_s > 0:
            self._thread = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._thread.start()
        self.tally.on_event(kind, data)
        line = format_line(kind, data)
        if line:
            self._print(line)
        if kind == "run_end":
            self._stop.set()


class RunLog:
    def __init__(self, path: Path):
        self.path = path

    def on_event(self, kind: str, data: Mapping[str, Any]) -> None:
        line = format_line(kind, data)
        if line:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8", errors="replace") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


class LiveView:
    """A rich live panel on stderr; the plain lines are printed above it."""

    def __init__(self, cfg: OptimizeConfig, console: Any = None):
        from rich.console import Console
        from rich.live import Live

        self.cfg = cfg
        self.console = console or Console(stderr=True, emoji=False)
        # the panel is rendered afresh at every refresh: its clock ticks during a long LLM call too
        self.live = Live(console=self.console, refresh_per_second=2, transient=True, get_renderable=self._render)
        self.tally = Tally(cfg)
        self.gen = "-"
        self.phase = "starting"
        self.best = "-"
        self.usage: dict = {}
        self.started = False

    def _render(self) -> Any:
        from rich.table import Table

        elapsed = time.time() - self.tally.t0
        left = self.tally.left_s()
        t = Table.grid(padding=(0, 2))
        t.add_row("generation", f"{self.gen}/{self.cfg.generations}", "episodes",
                  f"{self.tally.done}/~{self.tally.planned}")
        t.add_row("now", self.phase, "best (validation)", self.best)
        t.add_row("tokens", f"{self.usage.get('tokens', 0):,}", "cost", f"${self.usage.get('cost', 0.0):.4f}")
        t.add_row("elapsed", _dur(elapsed), "left (estimate)", _dur(left) if left is not None else "-")
        return t

    def on_event(self, kind: str, data: Mapping[str, Any]) -> None:
        if not self.started:
            self.live.start()
            self.started = True
        e = make_event(kind, data)
        self.tally.on_event(kind, e)
        if isinstance(e, Phase):
            self.phase = e.text
        elif isinstance(e, GenerationStart):
            self.gen = str(e.generation)
        elif isinstance(e, GenerationEnd):
            self.best = f"{e.best} {e.best_validation}"
            self.usage = e.usage or {}
        elif isinstance(e, GateVerdict) and e.promoted:
            self.best = f"{e.id} {e.child}"
        line = format_line(kind, e)
        if line:
            self.console.print(line, markup=False, highlight=False)
        self.live.refresh()
        if isinstance(e, RunEnd):
            self.close()

    def close(self) -> None:
        if self.started:
            self.live.stop()
            self.started = False


def default_listeners(cfg: OptimizeConfig, run_dir: Path, *, quiet: bool = False, console: Any = None) -> list:
    """The run log always; a live view in a terminal, plain lines otherwise; nothing on screen if quiet."""
    out: list = [RunLog(run_dir / "run.log")]
    if quiet:
        return out
    if console is not None or sys.stderr.isatty():
        out.append(LiveView(cfg, console))
    else:
        out.append(PlainLines(cfg=cfg))
    return out
