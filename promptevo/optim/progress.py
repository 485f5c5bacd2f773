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
import time
from pathlib import Path
from typing import IO, Any

from promptevo.optim.config import OptimizeConfig


def planned_episodes(cfg: OptimizeConfig, generations_left: int | None = None) -> int:
    """An upper estimate of the episodes a run plays (racing and the store usually make it fewer)."""
    g = cfg.generations if generations_left is None else generations_left
    per_gen = cfg.effective_evidence_episodes + cfg.episodes * (1 + cfg.children) + 2 * cfg.validation_episodes
    return g * per_gen + cfg.validation_episodes + 3 * cfg.test_episodes


def _dur(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def format_line(kind: str, d: dict[str, Any]) -> str | None:
    """The plain line for an event (None for events that get no line)."""
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


class PlainLines:
    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream or sys.stderr

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        line = format_line(kind, data)
        if line:
            print(line, file=self.stream, flush=True)


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
        self.console = console or Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=4, transient=True)
        self.t0 = time.time()
        self.done = 0
        self.planned = planned_episodes(cfg)
        self.gen = "-"
        self.phase = "starting"
        self.best = "-"
        self.usage: dict = {}
        self.started = False

    def _render(self) -> Any:
        from rich.table import Table

        elapsed = time.time() - self.t0
        rate = self.done / elapsed if elapsed > 0 and self.done else 0.0
        left = (self.planned - self.done) / rate if rate > 0 else None
        t = Table.grid(padding=(0, 2))
        t.add_row("generation", f"{self.gen}/{self.cfg.generations}", "episodes", f"{self.done}/~{self.planned}")
        t.add_row("now", self.phase, "best (validation)", self.best)
        t.add_row("tokens", f"{self.usage.get('tokens', 0):,}", "cost", f"${self.usage.get('cost', 0.0):.4f}")
        t.add_row("elapsed", _dur(elapsed), "left (estimate)", _dur(left) if left is not None else "-")
        return t

    def on_event(self, kind: str, data: dict[str, Any]) -> None:
        if not self.started:
            self.live.start()
            self.started = True
        if kind == "episode":
            self.done += 1
        elif kind == "phase":
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
        self.live.update(self._render())
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
        out.append(PlainLines())
    return out
