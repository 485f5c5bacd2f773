"""What a run will play before it plays it: episodes per phase, LLM calls, and a time estimate.

:func:`make_plan` is a pure function of the settings, the episode step limit and the seconds one agent
call takes; :func:`seconds_per_call` finds the last from earlier runs of the same model in the results
folder (their recorded call latencies) or from a short measured probe. ``promptevo optimize`` prints the
plan before the first episode; ``--dry-run`` prints it and exits.

Racing and the loop cut-off make real runs shorter than the maximum; the expected figure assumes episodes
of half the step limit and children raced on all their seeds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptevo.evaluation.store import iter_records
from promptevo.optim.config import PRESETS, OptimizeConfig

#: a plan longer than this is a long run: the plan names the flags that shrink it
LONG_RUN_HOURS = 2.0
EXPECTED_STEP_SHARE = 0.5


@dataclass
class Plan:
    steps: int  # step limit of one episode
    calls_per_step: int
    phases: dict[str, int] = field(default_factory=dict)  # LLM episodes per phase, at most
    no_llm_episodes: int = 0  # random floor, expert episodes
    optimizer_calls: int = 0
    screen_calls: int = 0
    seconds_per_call: float | None = None
    seconds_source: str = ""
    calls_per_episode: float | None = None  # observed in earlier runs of this task and model (else: half the limit)

    @property
    def llm_episodes(self) -> int:
        return sum(self.phases.values())

    @property
    def max_calls(self) -> int:
        return self.llm_episodes * self.steps * self.calls_per_step + self.optimizer_calls + self.screen_calls

    @property
    def expected_calls(self) -> int:
        per = self.calls_per_episode
        if per is None:
            per = self.steps * self.calls_per_step * EXPECTED_STEP_SHARE
        return int(self.llm_episodes * per + self.optimizer_calls + self.screen_calls)

    def hours(self, calls: int, concurrency: int) -> float | None:
        if self.seconds_per_call is None:
            return None
        return calls * self.seconds_per_call / max(1, concurrency) / 3600

    def to_dict(self, concurrency: int = 1) -> dict[str, Any]:
        return {"steps": self.steps, "calls_per_step": self.calls_per_step, "phases": self.phases,
                "llm_episodes": self.llm_episodes, "no_llm_episodes": self.no_llm_episodes,
                "max_calls": self.max_calls, "expected_calls": self.expected_calls,
                "seconds_per_call": self.seconds_per_call, "seconds_source": self.seconds_source,
                "max_hours": self.hours(self.max_calls, concurrency),
                "expected_hours": self.hours(self.expected_calls, concurrency)}


def make_plan(cfg: OptimizeConfig, steps: int, *, calls_per_step: int = 1, has_expert: bool = False,
              seconds: float | None = None, source: str = "", calls_per_episode: float | None = None) -> Plan:
    """The most a run with ``cfg`` plays (see the module docstring)."""
    g, k = cfg.generations, cfg.children
    e, a, v, t = cfg.effective_evidence_episodes, cfg.episodes, cfg.validation_episodes, cfg.test_episodes
    phases = {"evidence": g * e, "acceptance": g * (k + 1) * a, "validation": (v * 2 + (g - 1) * v) if g else 0}
    if cfg.final_test:
        phases["test"] = t * (2 + (1 if cfg.baseline else 0))
    screen = g * k * cfg.screen_states * 2 if has_expert and cfg.screen != "off" else 0
    per_gen_opt = 2 + (2 * cfg.rule_samples if "rules" in cfg.operators else 0)  # analyzer + mutator (+ rules)
    return Plan(steps=steps, calls_per_step=calls_per_step, phases=phases,
                no_llm_episodes=(t if cfg.final_test else 0) + (g * cfg.expert_episodes if has_expert else 0),
                optimizer_calls=g * per_gen_opt, screen_calls=screen, seconds_per_call=seconds,
                seconds_source=source, calls_per_episode=calls_per_episode)


def _latencies(path: Path, limit: int = 400, calls: list[int] | None = None) -> list[float]:
    out: list[float] = []
    try:
        for record in iter_records(path):
            rec = record.get("result") or {}
            if calls is not None and not rec.get("error"):
                calls.append(int(rec.get("llm_calls") or 0))
            for step in rec.get("trajectory") or []:
                for c in step.get("calls") or []:
                    if not c.get("cached") and c.get("latency_s"):
                        out.append(float(c["latency_s"]))
            if len(out) >= limit:
                break
    except (OSError, ValueError):
        return []
    return out


def calls_from_runs(results_dir: str | Path, model: str, task: str, agent: str) -> float | None:
    """Mean LLM calls per episode in the most recent run of ``task`` with ``model`` and ``agent``."""
    root = Path(results_dir)
    if not root.is_dir():
        return None
    for ck in sorted(root.glob("*/checkpoint.json"), key=lambda p: p.stat().st_mtime, reverse=True)[:20]:
        try:
            c = json.loads(ck.read_text(encoding="utf-8")).get("config", {})
        except (OSError, ValueError):
            continue
        if (c.get("model"), c.get("task"), c.get("agent")) != (model, task, agent):
            continue
        for name in ("episodes.jsonl", "episodes.jsonl.gz"):
            calls: list[int] = []
            _latencies(ck.parent / name, limit=10**9, calls=calls)
            if len(calls) >= 10:
                return sum(calls) / len(calls)
    return None


def seconds_from_runs(results_dir: str | Path, model: str, max_runs: int = 5) -> tuple[float, str] | None:
    """Mean uncached agent-call latency of the most recent runs of ``model`` under ``results_dir``."""
    root = Path(results_dir)
    if not root.is_dir():
        return None
    runs = sorted((p for p in root.glob("*/checkpoint.json")), key=lambda p: p.stat().st_mtime, reverse=True)
    for ck in runs[: max_runs * 4]:
        try:
            if json.loads(ck.read_text(encoding="utf-8")).get("config", {}).get("model") != model:
                continue
        except (OSError, ValueError):
            continue
        for name in ("episodes.jsonl", "episodes.jsonl.gz"):
            lat = _latencies(ck.parent / name)
            if len(lat) >= 20:
                return sum(lat) / len(lat), f"{len(lat)} calls of {ck.parent.name}"
    return None


def probe_seconds(call: Callable[[], Any], n: int = 3) -> tuple[float, str]:
    """Seconds per call measured on ``n`` agent calls (the first, which may load the model, is not counted
    when there is more than one)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    used = times[1:] if len(times) > 1 else times
    return sum(used) / len(used), f"measured on {len(used)} probe call(s)"


def describe(plan: Plan, cfg: OptimizeConfig, given: set[str] | None = None) -> list[str]:
    """The plan as lines for the user."""
    conc = cfg.effective_concurrency
    d = plan.to_dict(conc)
    ph = plan.phases
    lines = [f"plan: {cfg.task}, agent {cfg.agent}, model {cfg.model}, concurrency {conc}, {plan.steps} steps per "
             f"episode x {plan.calls_per_step} call(s)",
             f"  per run, at most: evidence {ph['evidence']} + acceptance {ph['acceptance']} + validation "
             f"{ph['validation']} episodes over {cfg.generations} generation(s)"
             + (f"; final test {ph['test']} episodes" if "test" in ph else "")
             + f"; {plan.no_llm_episodes} episodes without LLM (random floor, expert)",
             f"  LLM calls: at most {plan.max_calls:,}, expected about {plan.expected_calls:,} ("
             + (f"{plan.calls_per_episode:.1f} calls per episode, as in the last run of this task and model"
                if plan.calls_per_episode is not None else "episodes of half the step limit; racing and the loop "
                "cut-off usually save more") + ")"]
    cap = (f"{cfg.max_segment_tokens} tokens" if cfg.max_segment_tokens
           else "twice the parent's prompts, at least 512 tokens")
    lines.append(f"  written text: a child's segment holds at most {cap} (--max-segment-tokens), an optimizer reply "
                 f"at most {cfg.optimizer_max_tokens} tokens; the time estimate counts prompts of the initial size")
    if plan.seconds_per_call is not None:
        lines.append(f"  time: expected about {d['expected_hours']:.1f} h, at most {d['max_hours']:.1f} h "
                     f"({plan.seconds_per_call:.2f} s per call, {plan.seconds_source})")
        if d["expected_hours"] > LONG_RUN_HOURS:
            lines.append("  a long run: " + ("" if cfg.preset == "quick" else "--preset quick, or ")
                         + "fewer --generations, --validation-episodes, --test-episodes or --max-steps shrink it; "
                         "--max-hours stops it in time")
        if cfg.max_hours is not None and cfg.max_hours * 3600 < plan.seconds_per_call * plan.steps * plan.calls_per_step:
            lines.append(f"  note: --max-hours {cfg.max_hours:g} is shorter than one episode; the run will stop at once "
                         "and still play its final test split")
    else:
        lines.append("  time: unknown (" + (plan.seconds_source or "no earlier run of this model and no probe")
                     + "; --seconds-per-call S gives an estimate)")
    if given is not None and cfg.preset and "preset" not in given and cfg.model.startswith("local/"):
        lines.append(f"  a local model: the sizes of --preset {cfg.preset} (--preset standard for the full defaults)")
    if given is not None and cfg.preset:
        over = sorted(k for k in PRESETS[cfg.preset] if k in given)
        if over:
            lines.append(f"  preset {cfg.preset}: explicit options win: " + ", ".join(f"--{k.replace('_', '-')}"
                                                                                  for k in over))
    return lines


__all__ = ["LONG_RUN_HOURS", "PRESETS", "Plan", "calls_from_runs", "describe", "make_plan", "probe_seconds",
           "seconds_from_runs"]
