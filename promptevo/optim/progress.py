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
from typing import IO, Any

from promptevo.optim.config import OptimizeConfig
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


def format_line(kind: str, d: dict[str, Any]) -> str | None:
    """The plain line for an event (None for events that get no line), without control sequences (an
    LLM's text in a warning must not drive the terminal)."""
    line = _line_of(kind, d)
    return None if line is None else strip_control(line)


def _line_of(kind: str, d: dict[str, Any]) -> str | None:
    g = d.get("generation")
    tag = f"[gen {g}] " if g is not None else ""
    if kind == "run_start":
        cfg = d.get("config") or {}
        sp = d.get("splits") or {}
        return (f"run {d.get('run_dir')} | task {cfg.get('task')} | agent {cfg.get('agent')} | model {cfg.get('model')}"
                f" | splits: validation {sp.get('validation', 0)}, test {sp.get('test', 0)} seeds"
                + (" | resumed" if d.get("resumed") else ""))
    if kind == "candidate":
        return (f"{tag}{d['id']} {d.get('edit') or d.get('operator')} [{d.get('operator')}]: {d['status']} "
                f"({d.get('reason')})")
    if kind == "gate":
        return (f"{tag}validation gate {d['id']} {d.get('child')} vs {d['against']} {d.get('best')}: "
                f"{'PROMOTED' if d['promoted'] else 'not promoted'} ({d.get('reason')})")
    if kind == "generation_end":
        u = d.get("usage") or {}
        return (f"{tag}done: {d.get('children')} children, {d.get('accepted')} accepted, "
                f"{'1 promoted' if d.get('promoted') else '0 promoted'} | best {d.get('best')} validation "
                f"{d.get('best_validation')} | {d.get('episodes')} episodes | {u.get('tokens', 0):,} tokens | "
                f"${u.get('cost', 0.0):.4f} | {_dur(d.get('elapsed_s', 0))}")
    if kind in ("note", "warning"):
        return f"{tag}{d.get('message')}"
    if kind == "final":
        return d.get("table")
    if kind == "run_end":
        return f"finished: {d.get('stop_reason')} | results in {d.get('run_dir')}"
    return None


class Tally:
    """Episodes done against the plan, elapsed time and the estimate left (the live panel and the plain
    lines' heartbeat share it)."""

    def __init__(self, cfg: OptimizeConfig | None):
        self.t0 = time.time()
        self.done = 0
        self.planned = planned_episodes(cfg) if cfg is not None else 0
        self.calls = 0

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "episode":
            self.done += 1
            self.calls += int(data.get("calls") or 0)
        usage = data.get("usage")
        if isinstance(usage, dict) and usage.get("calls") is not None:  # every call, the optimizer's too
            self.calls = max(self.calls, int(usage["calls"]))

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

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
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

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
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

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if not self.started:
            self.live.start()
            self.started = True
        self.tally.on_event(kind, data)
        if kind == "phase":
            self.phase = data.get("text", "")
        elif kind == "generation_start":
            self.gen = str(data.get("generation"))
        elif kind == "generation_end":
            self.best = f"{data.get('best')} {data.get('best_validation')}"
            self.usage = data.get("usage") or {}
        elif kind == "gate" and data.get("promoted"):
            self.best = f"{data.get('id')} {data.get('child')}"
        line = format_line(kind, data)
        if line:
            self.console.print(line, markup=False, highlight=False)
        self.live.refresh()
        if kind == "run_end":
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
