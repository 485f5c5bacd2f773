"""LLM as environment engineer: a curriculum of MAPF-FrozenLake configurations chosen between stages.

The prompts are the policy being trained. A curriculum runs ``stages`` optimizations
(:func:`promptevo.evolve.optimize`), each on its own MAPF generator configuration, each starting from the
previous stage's best prompts. Between two stages the optimizer LLM (gateway role ``"engineer"``,
template ``prompts/optimizer/engineer.md``) reads a :func:`failure_report` of the stage's best prompts
(failure causes counted from the per-episode MAPF statistics, example failures with their events, the
current knobs) and proposes the next configuration with :func:`propose_config`. Proposals are validated:
known knobs only, values clipped to :class:`Bounds`, at most ``max_changes`` knobs changed (the others are
kept, so a configuration that works is not thrown away), and the result must be a valid
:class:`~promptevo.envs.mapf.MAPFConfig` that generates solvable instances within its step limit;
otherwise the current configuration is kept and ``info["fallback"]`` says why. In ``fixed`` mode the
configuration never changes (the control condition).

Run folder of :func:`run_curriculum` (``results/<run>/``)::

    stage-1/ stage-2/ ...   one optimize() run folder each, plus stage.json (the stage's MAPF config,
                            initial prompts and the engineer call that produced the config)
    final/episodes.jsonl    initial and final prompts played on the target task's held-out seeds
    curriculum.json         every stage: config, changes, failure report, engineer info, best id,
                            held-out success; the final comparison on the target task
    curriculum.md           the same as tables

A stage whose folder has a ``report.json`` is finished and is not run again on ``--resume``; a stage
interrupted mid-run is resumed through optimize's own checkpoint; finished target episodes are kept.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from promptevo.optim.reflect.analyzer import call_json, example_strings, json_grammar_for, load_template, render_template
from promptevo.envs.mapf.env import (
    MAPFConfig,
    MAPFConfigError,
    MAPFGenerationError,
    generate_instance,
    make_mapf_config,
)
from promptevo.optim.engine import (
    CHECKPOINT,
    EPISODES,
    EpisodeStore,
    EvolveConfig,
    EvolveError,
    _atomic_write,
    _record,
    _result_dict,
    optimize,
    summarize_scores,
    usage_totals,
    validate_config,
)
from promptevo.segments import PromptFormatError, PromptSet
from promptevo.tasks import TaskConfig, TaskError, load_task, mapf_config_for, with_mapf_config

Mode = Literal["engineer", "fixed"]

#: failure causes, one per failed episode, in the order they are checked
FAILURE_CAUSES: tuple[str, ...] = ("fell_in_hole", "invalid_actions", "collisions", "timeout", "other")
CURRICULUM_VERSION = 1
STAGE_FILE = "stage.json"

# =================================================================================================
# Failure report
# =================================================================================================


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        if name == "return_" and "return" in obj:
            return obj.get("return", default)
        return obj.get(name, default)
    return getattr(obj, name, default)


def _num(x: Any, default: float = 0.0) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def config_knobs(config: MAPFConfig) -> dict[str, Any]:
    """The generator knobs of ``config`` that a curriculum may change (see :class:`Bounds`)."""
    return {k: getattr(config, k) for k in KNOBS}


def _invalid_steps(ep: Any, stats: Mapping) -> int:
    traj = _get(ep, "trajectory") or []
    if traj:
        return sum(1 for s in traj
                   if isinstance(s, Mapping) and (not s.get("parsed", True) or not s.get("valid", True)))
    return int(max(_num(_get(ep, "parse_failures")), _num(_get(ep, "invalid_actions")),
                   _num(stats.get("invalid_actions"))))


def _events(ep: Any, limit: int = 4) -> list[str]:
    """Env events the agent was shown (``Last step: ...`` lines of its observations), latest last."""
    out: list[str] = []
    for s in _get(ep, "trajectory") or []:
        obs = s.get("observation") if isinstance(s, Mapping) else None
        if not isinstance(obs, str):
            continue
        for line in obs.splitlines():
            if line.startswith("Last step: "):
                out += [e.strip() for e in line[len("Last step: "):].rstrip(".").split("; ") if e.strip()]
    return [e[:160] for e in out[-limit:]]


def classify_episode(ep: Any) -> tuple[str | None, dict[str, Any]]:
    """``(cause, counts)`` of one episode: cause is None for a success, else one of :data:`FAILURE_CAUSES`.

    Checked in order: an agent fell into a hole; a quarter or more of the steps had an unreadable or
    invalid action; a quarter or more of the steps ended in an agent collision; the step limit was
    reached; anything else (an aborted episode, ...). ``counts`` are the episode's event counts.
    """
    stats = _get(ep, "env_stats") or {}
    if not isinstance(stats, Mapping):
        stats = {}
    steps = int(_num(_get(ep, "steps"), _num(stats.get("steps"))))
    counts = {
        "steps": steps,
        "invalid_actions": _invalid_steps(ep, stats),
        "hole_falls": int(_num(stats.get("hole_falls"))),
        "collisions": int(_num(stats.get("collisions"))),
        "wall_bumps": int(_num(stats.get("wall_bumps"))),
        "slips": int(_num(stats.get("slips"))),
        "timeout": bool(stats.get("timeout")) or bool(_get(ep, "truncated")),
        "error": bool(_get(ep, "error")),
    }
    if bool(_get(ep, "success")):
        return None, counts
    quarter = max(1, steps // 4)
    if counts["hole_falls"] > 0:
        return "fell_in_hole", counts
    if counts["invalid_actions"] >= quarter:
        return "invalid_actions", counts
    if counts["collisions"] >= quarter:
        return "collisions", counts
    if counts["timeout"] and not counts["error"]:
        return "timeout", counts
    return "other", counts


def failure_report(episodes: Sequence[Any], config: MAPFConfig, *, max_examples: int = 6) -> dict[str, Any]:
    """Statistics of ``episodes`` (episode dicts or EpisodeResults) played on ``config``.

    Success rate, mean progression and steps; one failure cause per failed episode
    (:func:`classify_episode`); event totals (invalid actions, hole falls, collisions, wall bumps, slips,
    timeouts, aborted episodes); rows per map size and agent count; the oracle's mean optimal makespan and
    how much longer successful episodes took; a few example failures with the events the agent saw; and
    the configuration's knobs.
    """
    eps = list(episodes)
    n = len(eps)
    causes: Counter[str] = Counter({c: 0 for c in FAILURE_CAUSES})
    events = {"invalid_actions": 0, "episodes_with_invalid_actions": 0, "hole_falls": 0, "collisions": 0,
              "wall_bumps": 0, "slips": 0, "timeouts": 0, "aborted": 0}
    per_size: dict[str, dict[str, Any]] = {}
    examples: list[dict[str, Any]] = []
    succ, prog, steps_total = 0, 0.0, 0
    makespans: list[float] = []
    ratios: list[float] = []
    for ep in eps:
        cause, c = classify_episode(ep)
        stats = _get(ep, "env_stats") or {}
        stats = stats if isinstance(stats, Mapping) else {}
        ok = cause is None
        p = _num(_get(ep, "progression"))
        succ += ok
        prog += p
        steps_total += c["steps"]
        events["invalid_actions"] += c["invalid_actions"]
        events["episodes_with_invalid_actions"] += c["invalid_actions"] > 0
        for k in ("hole_falls", "collisions", "wall_bumps", "slips"):
            events[k] += c[k]
        events["timeouts"] += c["timeout"]
        events["aborted"] += c["error"]
        if stats.get("solver_makespan") is not None:
            makespans.append(_num(stats["solver_makespan"]))
        if ok and stats.get("optimality_ratio") is not None:
            ratios.append(_num(stats["optimality_ratio"]))
        rows = int(_num(stats.get("rows"), config.rows))
        cols = int(_num(stats.get("cols"), config.cols))
        agents = int(_num(stats.get("n_agents"), config.n_agents))
        key = f"{rows}x{cols}, {agents} agent{'s' if agents != 1 else ''}"
        row = per_size.setdefault(key, {"n": 0, "successes": 0, "progression": 0.0, "causes": Counter()})
        row["n"] += 1
        row["successes"] += ok
        row["progression"] += p
        if not ok:
            causes[cause] += 1
            row["causes"][cause] += 1
            if len(examples) < max_examples:
                examples.append({"seed": _get(ep, "seed"), "cause": cause, "steps": c["steps"], "progression": p,
                                 "events": _events(ep), "error": (str(_get(ep, "error"))[:160] if c["error"] else None)})
    sizes = {
        k: {"n": r["n"], "successes": r["successes"], "success_rate": r["successes"] / r["n"],
            "mean_progression": r["progression"] / r["n"],
            "failure_causes": {c: v for c, v in r["causes"].items() if v}}
        for k, r in per_size.items()
    }
    return {
        "n": n,
        "successes": succ,
        "success_rate": succ / n if n else 0.0,
        "mean_progression": prog / n if n else 0.0,
        "mean_steps": steps_total / n if n else 0.0,
        "failures": n - succ,
        "failure_causes": dict(causes),
        "events": events,
        "invalid_action_rate": events["invalid_actions"] / steps_total if steps_total else 0.0,
        "per_size": sizes,
        "mean_optimal_makespan": sum(makespans) / len(makespans) if makespans else None,
        "mean_optimality_ratio": sum(ratios) / len(ratios) if ratios else None,
        "examples": examples,
        "config": config_knobs(config),
        "config_summary": config.summary(),
    }


def render_report(report: Mapping[str, Any]) -> str:
    """The failure report as plain text for the engineer's prompt (and people)."""
    n = int(report.get("n") or 0)
    if not n:
        return "No episodes were played."
    cfg = report.get("config") or {}
    lines = [
        f"Episodes: {n}; successes: {report['successes']} ({report['success_rate']:.0%}); mean progression "
        f"(share of agents home at the end) {report['mean_progression']:.2f}; mean steps {report['mean_steps']:.1f}"
        + (f" of at most {cfg['max_steps']}" if "max_steps" in cfg else "") + ".",
    ]
    causes = {k: v for k, v in (report.get("failure_causes") or {}).items() if v}
    lines.append("Failure causes (one per failed episode): "
                 + (", ".join(f"{k.replace('_', ' ')} {v}" for k, v in causes.items()) if causes else "none") + ".")
    ev = report.get("events") or {}
    lines.append(
        f"Events in all episodes: invalid or unreadable actions {ev.get('invalid_actions', 0)} "
        f"({report.get('invalid_action_rate', 0.0):.0%} of steps, in {ev.get('episodes_with_invalid_actions', 0)} "
        f"episodes), agents fallen into holes {ev.get('hole_falls', 0)}, agent collisions {ev.get('collisions', 0)}, "
        f"wall/edge bumps {ev.get('wall_bumps', 0)}, slips {ev.get('slips', 0)}, episodes out of steps "
        f"{ev.get('timeouts', 0)}, aborted episodes {ev.get('aborted', 0)}."
    )
    if report.get("step_cap") is not None:
        lines.append(f"Note: the harness stops every episode after {report['step_cap']} steps, whatever max_steps is.")
    for key, row in (report.get("per_size") or {}).items():
        lines.append(f"Map {key}: {row['n']} episodes, success {row['success_rate']:.0%}, mean progression "
                     f"{row['mean_progression']:.2f}.")
    if report.get("mean_optimal_makespan") is not None:
        s = f"Optimal joint plans (oracle) take {report['mean_optimal_makespan']:.1f} steps on average"
        if report.get("mean_optimality_ratio") is not None:
            s += f"; successful episodes took {report['mean_optimality_ratio']:.2f}x the optimal number of steps"
        lines.append(s + ".")
    ex = report.get("examples") or []
    if ex:
        lines.append("Example failures (events the agent was shown, latest last):")
        for e in ex:
            what = "; ".join(e.get("events") or []) or "no events"
            err = f" (aborted: {e['error']})" if e.get("error") else ""
            lines.append(f"- seed {e.get('seed')}: {str(e['cause']).replace('_', ' ')} after {e['steps']} steps, "
                         f"progression {e['progression']:.2f}{err}; events: {what}")
    return "\n".join(lines)


# =================================================================================================
# Bounds and proposals
# =================================================================================================

#: knobs the engineer may change, in display order
KNOBS: tuple[str, ...] = ("rows", "cols", "n_agents", "hole_density", "wall_density", "slip_prob", "max_steps",
                          "min_goal_distance", "observation", "view_radius", "goal_assignment")
_INT_KNOBS = frozenset({"rows", "cols", "n_agents", "max_steps", "min_goal_distance", "view_radius"})
_CHOICE_KNOBS = frozenset({"observation", "goal_assignment"})
_ALIASES = {"agents": "n_agents", "num_agents": "n_agents", "n_agent": "n_agents", "height": "rows",
            "width": "cols", "columns": "cols", "slip": "slip_prob", "slippery": "slip_prob",
            "steps": "max_steps", "step_limit": "max_steps", "holes": "hole_density", "walls": "wall_density",
            "goal_distance": "min_goal_distance", "view": "observation"}


@dataclass(frozen=True)
class Bounds:
    """Allowed range of each knob (inclusive); choices for the categorical ones.

    A proposed value outside its range is clipped to it; knobs the engineer does not change keep their
    value even when it lies outside (a preset is never altered behind the engineer's back).
    """

    rows: tuple[int, int] = (3, 12)
    cols: tuple[int, int] = (3, 12)
    n_agents: tuple[int, int] = (1, 6)
    hole_density: tuple[float, float] = (0.0, 0.35)
    wall_density: tuple[float, float] = (0.0, 0.3)
    slip_prob: tuple[float, float] = (0.0, 0.3)
    max_steps: tuple[int, int] = (5, 150)
    min_goal_distance: tuple[int, int] = (1, 12)
    view_radius: tuple[int, int] = (1, 6)
    observation: tuple[str, ...] = ("full", "local")
    goal_assignment: tuple[str, ...] = ("own", "any")

    def __post_init__(self) -> None:
        for k in KNOBS:
            v = getattr(self, k)
            if k in _CHOICE_KNOBS:
                if not v or not all(isinstance(x, str) for x in v):
                    raise ValueError(f"bounds.{k}: needs at least one choice")
            elif len(v) != 2 or not v[0] <= v[1]:
                raise ValueError(f"bounds.{k}: needs (low, high) with low <= high, got {v!r}")

    def knobs(self) -> tuple[str, ...]:
        return KNOBS

    def describe(self, knob: str) -> str:
        v = getattr(self, knob)
        if knob in _CHOICE_KNOBS:
            return "one of " + ", ".join(v)
        return f"{v[0]:g} to {v[1]:g}"

    def clamp(self, knob: str, value: Any) -> tuple[Any, bool]:
        """``(value coerced to the knob's type and clipped, whether it was clipped)``.

        Raises ValueError (one line) for an unknown knob or a value of the wrong kind.
        """
        if knob not in KNOBS:
            raise ValueError(f"unknown knob {knob!r}")
        b = getattr(self, knob)
        if knob in _CHOICE_KNOBS:
            s = str(value).strip().lower() if isinstance(value, str) else None
            if s not in b:
                raise ValueError(f"{knob}: {value!r} is not one of {', '.join(b)}")
            return s, False
        if isinstance(value, bool):
            raise ValueError(f"{knob}: expected a number, got {value!r}")
        if isinstance(value, str):
            try:
                value = float(value.strip().rstrip("%")) / (100 if value.strip().endswith("%") else 1)
            except ValueError:
                raise ValueError(f"{knob}: expected a number, got {value!r}") from None
        if not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise ValueError(f"{knob}: expected a number, got {value!r}")
        lo, hi = b
        x: Any = int(round(float(value))) if knob in _INT_KNOBS else round(float(value), 4)
        y = min(max(x, lo), hi)
        y = int(y) if knob in _INT_KNOBS else float(y)
        return y, y != x

    def to_dict(self) -> dict[str, list]:
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}


DEFAULT_BOUNDS = Bounds()


def _knob_name(name: Any) -> str:
    k = re.sub(r"[\s\-]+", "_", str(name).strip().lower())
    return _ALIASES.get(k, k)


def apply_changes(
    current: MAPFConfig, changes: Mapping[str, Any], *, max_changes: int = 2, bounds: Bounds = DEFAULT_BOUNDS,
    step_cap: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Validate requested ``changes`` against ``current``: ``(knob values to set, notes)``.

    Unknown knobs and unusable values are dropped, values are clipped to ``bounds``, changes that keep the
    current value are ignored, and only the first ``max_changes`` real changes are kept. A ``max_steps``
    change is dropped when the harness ``step_cap`` is at or below both the current and the asked value
    (it would have no effect). ``notes`` has ``dropped`` (knob -> reason), ``clamped`` (knob -> [asked,
    used]) and ``trimmed`` (knobs cut by ``max_changes``). Pure; the result still has to pass MAPFConfig
    validation.
    """
    dropped: dict[str, str] = {}
    clamped: dict[str, list] = {}
    accepted: dict[str, Any] = {}
    for raw_k, v in changes.items():
        k = _knob_name(raw_k)
        if k not in KNOBS:
            dropped[str(raw_k)] = "unknown knob" if k not in MAPFConfig.model_fields else "not a curriculum knob"
            continue
        try:
            val, was_clipped = bounds.clamp(k, v)
        except ValueError as e:
            dropped[str(raw_k)] = str(e)
            continue
        if was_clipped:
            clamped[k] = [v, val]
        if val == getattr(current, k):
            dropped.setdefault(str(raw_k), "same as the current value")
            continue
        if k == "max_steps" and step_cap is not None and min(val, current.max_steps) >= step_cap:
            dropped[str(raw_k)] = f"no effect: the harness stops every episode after {step_cap} steps"
            continue
        accepted[k] = val
    keep = dict(list(accepted.items())[: max(0, max_changes)])
    trimmed = [k for k in accepted if k not in keep]
    return keep, {"dropped": dropped, "clamped": {k: v for k, v in clamped.items() if k in keep}, "trimmed": trimmed}


def check_solvable(config: MAPFConfig, seeds: Iterable[int] = (0,)) -> str | None:
    """None when ``config`` generates a solvable instance for every seed whose optimal plan fits in
    ``max_steps``; else a one-line reason."""
    for s in seeds:
        try:
            inst = generate_instance(config, int(s))
        except MAPFGenerationError as e:
            return str(e)
        if inst.plan is not None and inst.plan.makespan > config.max_steps:
            return (f"max_steps {config.max_steps} is shorter than the optimal plan ({inst.plan.makespan} steps) "
                    f"on seed {s}")
    return None


def step_cap_binds(config: MAPFConfig, step_cap: int | None) -> bool:
    """True when the harness step cap, not ``config.max_steps``, ends the episodes."""
    return step_cap is not None and step_cap <= config.max_steps


def render_knobs(config: MAPFConfig, bounds: Bounds = DEFAULT_BOUNDS, step_cap: int | None = None) -> str:
    lines = [f"- {k} = {getattr(config, k)}  [{bounds.describe(k)}]"
             + (f" (no effect: the harness stops every episode after {step_cap} steps)"
                if k == "max_steps" and step_cap_binds(config, step_cap) else "")
             for k in KNOBS]
    lines.append(f"(hole_density + wall_density must stay <= 0.75; every agent needs a free start and goal cell; "
                 f"view_radius only matters with observation = local; {config.free_cells} free cells now)")
    return "\n".join(lines)


def render_curriculum_history(history: Iterable[Mapping[str, Any]] | None) -> str:
    out = []
    for h in history or ():
        cfg = h.get("config") or {}
        desc = ", ".join(f"{k}={cfg[k]}" for k in KNOBS if k in cfg)
        ch = h.get("changes") or {}
        chs = ", ".join(f"{k} {v[0]} -> {v[1]}" if isinstance(v, (list, tuple)) and len(v) == 2 else f"{k} -> {v}"
                        for k, v in ch.items()) or "none"
        causes = {k: v for k, v in (h.get("failure_causes") or {}).items() if v}
        line = f"- stage {h.get('stage', '?')}: {desc}; changes before it: {chs}"
        if h.get("success_rate") is not None:
            line += f"; success {float(h['success_rate']):.0%}"
        if h.get("mean_progression") is not None:
            line += f", progression {float(h['mean_progression']):.2f}"
        if causes:
            line += "; failures: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in causes.items())
        out.append(line)
    return "\n".join(out) if out else "(this is the first stage)"


def example_change(current: MAPFConfig, report: Mapping[str, Any], bounds: Bounds = DEFAULT_BOUNDS) -> tuple[str, Any]:
    """(knob, value) shown as the example of the engineer's reply; never a change that does nothing."""
    if step_cap_binds(current, report.get("step_cap")):
        return "rows", min(current.rows + 1, bounds.rows[1])
    return "max_steps", min(current.max_steps + 10, bounds.max_steps[1])


def build_engineer_messages(
    current: MAPFConfig, report: Mapping[str, Any], *, history: Iterable[Mapping[str, Any]] = (),
    max_changes: int = 2, bounds: Bounds = DEFAULT_BOUNDS, template_path: str | Path | None = None,
) -> list[dict]:
    system_t, user_t = load_template("engineer", template_path)
    cap = report.get("step_cap")
    example = example_change(current, report, bounds)
    values = {
        "knobs": render_knobs(current, bounds, cap),
        "report": render_report(report),
        "history": render_curriculum_history(history),
        "max_changes": max_changes,
        "example_knob": example[0],
        "example_value": example[1],
    }
    return [{"role": "system", "content": render_template(system_t, **values)},
            {"role": "user", "content": render_template(user_t, **values)}]


def parse_engineer_reply(obj: Any) -> dict[str, Any]:
    """``{"changes": {...}, "rationale": str}`` from a reply object; tolerant of knobs given at the top
    level or as a list of ``{"knob", "value"}``. Raises ValueError when no changes object is found."""
    if not isinstance(obj, dict):
        raise ValueError("the reply is not a JSON object")
    rationale = obj.get("rationale", obj.get("reason", ""))
    changes = obj.get("changes", obj.get("config"))
    if changes is None:
        top = {k: v for k, v in obj.items() if _knob_name(k) in KNOBS}
        if not top:
            raise ValueError('the reply has no "changes" object')
        changes = top
    if isinstance(changes, list):
        items = {}
        for it in changes:
            if not isinstance(it, dict) or not ({"knob", "value"} <= set(it) or {"name", "value"} <= set(it)):
                raise ValueError('"changes" must map knob names to values')
            items[it.get("knob", it.get("name"))] = it["value"]
        changes = items
    if not isinstance(changes, dict):
        raise ValueError('"changes" must be an object mapping knob names to values')
    return {"changes": changes, "rationale": rationale if isinstance(rationale, str) else json.dumps(rationale)}


def propose_config(
    current: MAPFConfig,
    report: Mapping[str, Any],
    gateway: Any,
    *,
    history: Iterable[Mapping[str, Any]] = (),
    max_changes: int = 2,
    bounds: Bounds = DEFAULT_BOUNDS,
    temperature: float | None = None,
    max_tokens: int | None = 512,
    seed: int | None = None,
    constrained: bool | None = None,
    retries: int = 0,
    probe_seeds: Sequence[int] = (0,),
    template_path: str | Path | None = None,
) -> tuple[MAPFConfig, dict[str, Any]]:
    """Ask the engineer (one LLM call, role ``"engineer"``) for the next stage's configuration.

    Returns ``(config, info)``; never raises on a bad reply (only LLM configuration errors propagate).
    ``info``: ``changes`` (knob -> [old, new], the changes applied), ``requested`` (as the reply gave
    them), ``dropped``, ``clamped``, ``trimmed`` (see :func:`apply_changes`), ``rationale``, ``raw``,
    ``error``, ``usage`` and ``fallback`` (None, or why the current config was kept).
    """
    history = list(history)
    info: dict[str, Any] = {"requested": {}, "changes": {}, "dropped": {}, "clamped": {}, "trimmed": [],
                            "rationale": "", "fallback": None, "error": None, "raw": "", "usage": {}}

    def keep(why: str) -> tuple[MAPFConfig, dict[str, Any]]:
        info["changes"] = {}
        info["fallback"] = why
        return current, info

    try:
        msgs = build_engineer_messages(current, report, history=history, max_changes=max_changes, bounds=bounds,
                                       template_path=template_path)
    except (ValueError, PromptFormatError) as e:
        return keep(f"engineer template unusable: {e}")
    parsed, raw, err, usage = call_json(
        gateway, msgs, role="engineer", parse=parse_engineer_reply, temperature=temperature,
        max_tokens=max_tokens, seed=seed, retries=retries, grammar=json_grammar_for(gateway, constrained),
    )
    info.update(raw=raw, usage=usage, error=err)
    if parsed is None:
        return keep(f"unusable reply: {err}")
    info["requested"] = dict(parsed["changes"])
    info["rationale"] = parsed["rationale"].strip()[:2000]
    copied = [x for x in example_strings(msgs[0]["content"]) if x in info["rationale"]]
    if copied:  # small models return the template's example; its change is not based on any evidence
        return keep(f"the reply repeats the template's example ({copied[0]!r})")
    ex_knob, ex_value = example_change(current, report, bounds)
    asked = {_knob_name(k): v for k, v in parsed["changes"].items()}
    if asked == {ex_knob: ex_value}:  # measured: the 1.5B local model returned the example change twice
        return keep(f"the reply is the template's example change ({ex_knob} = {ex_value}), not a reading of the evidence")
    values, notes = apply_changes(current, parsed["changes"], max_changes=max_changes, bounds=bounds,
                                  step_cap=report.get("step_cap"))
    info.update(notes)
    if not values:
        if parsed["changes"]:
            return keep("no usable change: " + "; ".join(f"{k}: {v}" for k, v in notes["dropped"].items()))
        return current, info  # the engineer chose to keep the configuration
    try:
        new = make_mapf_config({**current.model_dump(), **values}, "proposed by the engineer")
    except MAPFConfigError as e:
        return keep(str(e))
    why = check_solvable(new, probe_seeds)
    if why:
        return keep(f"proposed config is not solvable: {why}")
    info["changes"] = {k: [getattr(current, k), v] for k, v in values.items()}
    return new, info


# =================================================================================================
# Curriculum
# =================================================================================================


@dataclass
class CurriculumResult:
    run_dir: Path
    stages: list[dict]
    final: dict
    initial_prompts: PromptSet
    best_prompts: PromptSet
    configs: list[MAPFConfig] = field(default_factory=list)
    data: dict = field(default_factory=dict)


def _say(display: Any, msg: str) -> None:
    if display is not None:
        display.print(msg, markup=False, highlight=False)


def _make_gateways(base: EvolveConfig, agent_gateway: Any, optimizer_gateway: Any) -> tuple[Any, Any]:
    if agent_gateway is not None and optimizer_gateway is not None:
        return agent_gateway, optimizer_gateway
    from promptevo.llm.gateway import Gateway, LLMConfig

    cache = {"cache_dir": None} if base.no_cache else {}
    if agent_gateway is None:
        agent_gateway = Gateway(LLMConfig(model=base.model, api_base=base.api_base, max_tokens=base.agent_max_tokens,
                                          concurrency=base.concurrency, seed=base.seed, **cache))
    if optimizer_gateway is None:
        opt_model = base.optimizer_model or base.model
        opt_base = base.optimizer_api_base or (base.api_base if opt_model == base.model else None)
        optimizer_gateway = Gateway(LLMConfig(model=opt_model, api_base=opt_base, temperature=base.optimizer_temperature,
                                              max_tokens=base.optimizer_max_tokens, seed=base.seed, **cache))
    return agent_gateway, optimizer_gateway


def _load_mapf_task(name: str, what: str) -> TaskConfig:
    try:
        task = load_task(name)
    except TaskError as e:
        raise EvolveError(str(e)) from None
    if task.family != "mapf":
        raise EvolveError(f"the curriculum needs a MAPF task (family mapf); {what} {name!r} is a {task.family} task")
    return task


def _capped(task: TaskConfig, max_steps: int | None) -> TaskConfig:
    if max_steps is None:
        return task
    cap = max_steps if task.max_steps is None else min(task.max_steps, max_steps)
    return task.model_copy(update={"max_steps": cap})


def _best_episodes(stage_dir: Path, best_id: str) -> tuple[list[dict], str]:
    """Episodes of the stage's best candidate: its held-out episodes, else its training episodes."""
    try:
        ck = json.loads((stage_dir / CHECKPOINT).read_text(encoding="utf-8"))
        cand = next(c for c in ck["candidates"] if c["id"] == best_id)
    except (OSError, ValueError, KeyError, StopIteration, TypeError):
        return [], "none"
    store = EpisodeStore(stage_dir / EPISODES)
    for split in ("heldout", "train"):
        eps = [store.get(cand["fingerprint"], int(s)) for s in sorted(cand.get(split) or {}, key=int)]
        eps = [e for e in eps if e is not None]
        if eps:
            return eps, split
    return [], "none"


def _diff(before: MAPFConfig | None, after: MAPFConfig) -> dict[str, list]:
    if before is None:
        return {}
    return {k: [getattr(before, k), getattr(after, k)] for k in KNOBS if getattr(before, k) != getattr(after, k)}


def _heldout_row(report: Mapping[str, Any]) -> dict:
    rows = report.get("rows") or []
    best = next((r for r in rows if str(r.get("name", "")).startswith("best")), rows[-1] if rows else {})
    return {k: best.get(k) for k in ("n", "successes", "success_rate", "ci95", "mean_return", "mean_progression")}


def _usage(*gateways: Any) -> dict:
    out = {"calls": 0, "tokens": 0, "cost": 0.0}
    seen: list[Any] = []
    for gw in gateways:
        if gw is None or any(gw is s for s in seen):
            continue
        seen.append(gw)
        u = getattr(gw, "usage", None)
        tot = usage_totals(u.snapshot() if u is not None and hasattr(u, "snapshot") else {})
        for k in out:
            out[k] += tot[k]
    return out


def _write_json(path: Path, data: Any) -> None:
    _atomic_write(path, json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n")


def run_curriculum(
    base: EvolveConfig,
    *,
    stages: int,
    mode: Mode = "engineer",
    target_task: str | None = None,
    agent_gateway: Any = None,
    optimizer_gateway: Any = None,
    console: Any = None,
    quiet: bool = False,
    max_changes: int = 2,
    bounds: Bounds = DEFAULT_BOUNDS,
    **optimize_kwargs: Any,
) -> CurriculumResult:
    """Optimize the prompts over ``stages`` MAPF configurations (see the module docstring).

    Stage k runs :func:`promptevo.evolve.optimize` with ``run = <run>/stage-k``, ``base.generations``
    generations, seed ``base.seed + k - 1`` (fresh training seeds per stage), the base task with the
    stage's MAPF config, and the previous stage's best prompts as initial prompts. ``optimize_kwargs``
    are passed on (``runner``, ``agent_builder``, ``env_instructions``; ``task`` and ``initial_prompts``
    replace the base task object and the stage-1 prompts). Budgets apply to the shared gateways, i.e. to
    the whole curriculum so far. Raises :class:`EvolveError` (one line) for unusable inputs.
    """
    if stages < 1:
        raise EvolveError(f"--stages must be >= 1 (got {stages})")
    if mode not in ("engineer", "fixed"):
        raise EvolveError(f"unknown curriculum mode {mode!r} (use engineer or fixed)")
    task = optimize_kwargs.pop("task", None)
    if task is None:
        task = _load_mapf_task(base.task, "task")
    elif task.family != "mapf":
        raise EvolveError(f"the curriculum needs a MAPF task (family mapf); task {task.name!r} is a {task.family} task")
    target = task if target_task in (None, base.task) else _load_mapf_task(target_task, "target task")
    try:
        start_cfg = mapf_config_for(task)
        mapf_config_for(target)
    except MAPFConfigError as e:
        raise EvolveError(str(e)) from None
    initial_prompts: PromptSet | None = optimize_kwargs.pop("initial_prompts", None)
    runner = optimize_kwargs.get("runner")
    agent_builder = optimize_kwargs.get("agent_builder")

    if base.run is None:
        base = base.model_copy(update={"run": f"{base.task}-curriculum-{datetime.now().strftime('%Y%m%d-%H%M%S')}"})
    cdir = base.run_path()
    meta_path = cdir / "curriculum.json"
    started = meta_path.exists() or (cdir / "stage-1" / STAGE_FILE).exists()
    if started and not base.resume:
        raise EvolveError(f"{cdir} already holds a curriculum; resume it or pick another run name")
    if started and meta_path.exists():
        old = json.loads(meta_path.read_text(encoding="utf-8"))
        for key, now in (("mode", mode), ("target", target.name), ("task", base.task)):
            if old.get(key) not in (None, now):
                raise EvolveError(f"cannot resume {cdir}: {key} was {old.get(key)!r}, now {now!r}")

    display = None
    if not quiet:
        from rich.console import Console

        display = console or Console(stderr=True)
    agent_gateway, optimizer_gateway = _make_gateways(base, agent_gateway, optimizer_gateway)

    if initial_prompts is None:
        if base.prompts:
            try:
                initial_prompts = PromptSet.load(base.prompts)
            except PromptFormatError as e:
                raise EvolveError(str(e)) from None
        else:
            from promptevo.agents.registry import default_prompts

            initial_prompts = default_prompts(base.agent, task, base.init)
    s1 = cdir / "stage-1" / STAGE_FILE
    if s1.exists():  # resume: the prompts the curriculum really started from
        initial_prompts = PromptSet.from_dict(json.loads(s1.read_text(encoding="utf-8"))["initial_prompts"])

    data: dict[str, Any] = {
        "version": CURRICULUM_VERSION, "run": str(cdir), "task": base.task, "target": target.name,
        "target_task": target_task or base.task, "mode": mode,
        "stages_planned": stages, "max_changes": max_changes, "bounds": bounds.to_dict(), "complete": False,
        "config": base.model_dump(), "stages": [], "final": None, "usage": {},
    }
    history: list[dict] = []
    configs: list[MAPFConfig] = []
    cfg_k, prompts_k, engineer_in = start_cfg, initial_prompts, None
    prev_cfg: MAPFConfig | None = None
    best_ps = initial_prompts
    _write_json(meta_path, data)  # from here on the run can be resumed, even after a crash in stage 1
    for k in range(1, stages + 1):
        sdir = cdir / f"stage-{k}"
        sfile = sdir / STAGE_FILE
        if sfile.exists():
            srec = json.loads(sfile.read_text(encoding="utf-8"))
            cfg_k = make_mapf_config(srec["config"], str(sfile))
            prompts_k = PromptSet.from_dict(srec["initial_prompts"])
            engineer_in = srec.get("engineer")
        else:
            _write_json(sfile, {"stage": k, "config": cfg_k.model_dump(), "initial_prompts": prompts_k.to_dict(),
                                "engineer": engineer_in})
        configs.append(cfg_k)
        _say(display, f"== stage {k}/{stages}: {cfg_k.summary()}")
        if (sdir / "report.json").exists():
            report = json.loads((sdir / "report.json").read_text(encoding="utf-8"))
            best_ps = PromptSet.load(sdir / "best.json")
            best_id = report["best_id"]
            _say(display, f"stage {k} already finished; best {best_id}")
        else:
            ecfg = base.model_copy(update={"run": str(sdir), "seed": base.seed + k - 1,
                                           "resume": (sdir / CHECKPOINT).exists()})
            res = optimize(ecfg, agent_gateway=agent_gateway, optimizer_gateway=optimizer_gateway,
                           task=with_mapf_config(task, cfg_k), initial_prompts=prompts_k, console=console,
                           quiet=quiet, **optimize_kwargs)
            report, best_ps, best_id = res.report, res.best_prompts, res.best_id
        eps, split = _best_episodes(sdir, best_id)
        frep = failure_report(eps, cfg_k)
        if base.max_steps is not None or task.max_steps is not None:
            frep["step_cap"] = min(x for x in (base.max_steps, task.max_steps) if x is not None)
        held = _heldout_row(report)
        rec: dict[str, Any] = {
            "stage": k, "run_dir": str(sdir), "config": config_knobs(cfg_k), "config_summary": cfg_k.summary(),
            "changes": _diff(prev_cfg, cfg_k), "engineer_in": engineer_in, "best_id": best_id,
            "initial_fingerprint": prompts_k.fingerprint(), "best_fingerprint": best_ps.fingerprint(),
            "heldout": held, "heldout_success": held.get("success_rate"), "stop_reason": report.get("stop_reason"),
            "evidence": split, "report": frep, "engineer": None,
        }
        history.append({"stage": k, "config": rec["config"], "changes": rec["changes"],
                        "success_rate": frep["success_rate"], "mean_progression": frep["mean_progression"],
                        "failure_causes": frep["failure_causes"]})
        if k < stages:
            nfile = cdir / f"stage-{k + 1}" / STAGE_FILE
            if nfile.exists():
                nrec = json.loads(nfile.read_text(encoding="utf-8"))
                next_cfg, info = make_mapf_config(nrec["config"], str(nfile)), nrec.get("engineer")
            elif mode == "engineer":
                next_cfg, info = propose_config(
                    cfg_k, frep, optimizer_gateway, history=history, max_changes=max_changes, bounds=bounds,
                    temperature=base.optimizer_temperature, max_tokens=base.optimizer_max_tokens,
                    seed=base.seed * 1000 + 900 + k,
                    probe_seeds=task.seed_list("train")[:1] + task.seed_list("heldout")[:1],
                )
                info = {"mode": "engineer", **info}
            else:
                next_cfg, info = cfg_k, {"mode": "fixed", "changes": {}, "fallback": None}
            if not nfile.exists():
                _write_json(nfile, {"stage": k + 1, "config": next_cfg.model_dump(),
                                    "initial_prompts": best_ps.to_dict(), "engineer": info})
            rec["engineer"] = info
            if info and info.get("mode") == "engineer":
                what = ", ".join(f"{kk} {a} -> {b}" for kk, (a, b) in (info.get("changes") or {}).items())
                _say(display, f"engineer after stage {k}: " + (what or "no change")
                     + (f" (fallback: {info['fallback']})" if info.get("fallback") else ""))
            engineer_in = info
            prev_cfg, cfg_k = cfg_k, next_cfg
        else:
            prev_cfg = cfg_k
        prompts_k = best_ps
        data["stages"].append(rec)
        data["usage"] = _usage(agent_gateway, optimizer_gateway)
        _write_json(meta_path, data)

    # -- the initial and the final prompts on the target task's held-out seeds ----------------------
    target_t = _capped(target, base.max_steps)
    seeds = target_t.seed_list("heldout")[: base.heldout_episodes]
    store = EpisodeStore(cdir / "final" / EPISODES)
    if agent_builder is None:
        from promptevo.agents.registry import make_agent

        def agent_builder(name: str, prompts: PromptSet | None) -> Any:
            return lambda: make_agent(name, agent_gateway, prompts=prompts, task=target_t, init=base.init)

    if runner is None:
        from promptevo.optim.engine import _default_runner as runner  # noqa: N813
    final: dict[str, Any] = {"target": target.name, "config_summary": mapf_config_for(target).summary(),
                             "seeds": seeds, "rows": {}}
    for name, ps in (("initial", initial_prompts), ("best", best_ps)):
        key = ps.fingerprint()
        missing = [s for s in seeds if store.get(key, s) is None]
        if missing:
            _say(display, f"final: {name} prompts on {len(missing)} held-out seeds of {target.name}")
            results = runner(target_t, agent_builder(base.agent, ps), missing, concurrency=base.concurrency,
                             on_result=lambda r, key=key: store.put(key, int(_result_dict(r)["seed"]), r))
            for r in results:
                d = _result_dict(r)
                if not store.has(key, int(d["seed"])):
                    store.put(key, int(d["seed"]), d)
        eps = {s: store.get(key, s) for s in seeds}
        done = {str(s): _record(e) for s, e in eps.items() if e is not None}
        final["rows"][name] = {"fingerprint": key, **summarize_scores(done)}
        if name == "best":
            final["best_report"] = failure_report([e for e in eps.values() if e is not None], mapf_config_for(target))
    data["final"] = final
    data["complete"] = True
    data["usage"] = _usage(agent_gateway, optimizer_gateway)
    _write_json(meta_path, data)
    _atomic_write(cdir / "curriculum.md", render_curriculum_md(data))
    return CurriculumResult(cdir, data["stages"], final, initial_prompts, best_ps, configs, data)


# =================================================================================================
# Output
# =================================================================================================


def _pct(x: Any) -> str:
    return "-" if x is None else f"{float(x):.0%}"


def _changes_text(ch: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in (ch or {}).items()) or "-"


def _main_causes(rep: Mapping[str, Any] | None, top: int = 2) -> str:
    causes = sorted(((v, k) for k, v in ((rep or {}).get("failure_causes") or {}).items() if v), reverse=True)
    return ", ".join(f"{k.replace('_', ' ')} {v}" for v, k in causes[:top]) or "-"


def short_summary(knobs: Mapping[str, Any]) -> str:
    """Compact one-line description of a knob dict (``config_knobs``)."""
    k = knobs
    s = (f"{k.get('rows')}x{k.get('cols')} a{k.get('n_agents')} holes {k.get('hole_density')} "
         f"walls {k.get('wall_density')} slip {k.get('slip_prob')} steps {k.get('max_steps')}")
    if k.get("observation") == "local":
        s += f" local r{k.get('view_radius')}"
    if k.get("goal_assignment") == "any":
        s += " any-goal"
    return s


def curriculum_table(data: Mapping[str, Any]) -> str:
    """Short plain-text table: one line per stage, then the target comparison."""
    lines = [f"curriculum {data.get('run')} ({data.get('mode')}): {len(data.get('stages') or [])} stage(s)",
             f"{'stage':<6} {'config':<48} {'best':<6} {'held-out':>8}  changes before the stage"]
    for s in data.get("stages") or []:
        lines.append(f"{s['stage']:<6} {short_summary(s['config']):<48} {s['best_id']:<6} "
                     f"{_pct(s.get('heldout_success')):>8}  {_changes_text(s.get('changes'))}")
    fin = data.get("final") or {}
    for name, row in (fin.get("rows") or {}).items():
        lines.append(f"target {fin.get('target')}, {name} prompts: {row['successes']}/{row['n']} "
                     f"({_pct(row['success_rate'])}), mean progression {row['mean_progression']:.2f}")
    return "\n".join(lines)


def render_curriculum_md(data: Mapping[str, Any]) -> str:
    md = [f"# promptevo curriculum {Path(str(data.get('run'))).name}", "",
          f"Task `{data.get('task')}`, target `{data.get('target')}`, mode `{data.get('mode')}`, "
          f"{len(data.get('stages') or [])} stage(s), at most {data.get('max_changes')} knob change(s) per stage.", "",
          "| stage | configuration | changes before the stage | best | held-out success | main failures |",
          "|---|---|---|---|---|---|"]
    for s in data.get("stages") or []:
        md.append(f"| {s['stage']} | {s['config_summary']} | {_changes_text(s.get('changes'))} | {s['best_id']} | "
                  f"{_pct(s.get('heldout_success'))} | {_main_causes(s.get('report'))} |")
    md.append("")
    fin = data.get("final") or {}
    if fin:
        md += [f"## Target `{fin.get('target')}` ({fin.get('config_summary')}), {len(fin.get('seeds') or [])} "
               "held-out seeds", "", "| prompts | n | success | 95% CI | mean progression |", "|---|---|---|---|---|"]
        for name, r in (fin.get("rows") or {}).items():
            lo, hi = r["ci95"]
            md.append(f"| {name} | {r['n']} | {r['success_rate']:.1%} | [{lo:.1%}, {hi:.1%}] | "
                      f"{r['mean_progression']:.2f} |")
        md.append("")
    eng = [s for s in data.get("stages") or [] if s.get("engineer") and s["engineer"].get("mode") == "engineer"]
    if eng:
        md += ["## Engineer decisions", ""]
        for s in eng:
            e = s["engineer"]
            md.append(f"- after stage {s['stage']}: {_changes_text(e.get('changes'))}"
                      + (f" (fallback: {e['fallback']})" if e.get("fallback") else "")
                      + (f". {e['rationale']}" if e.get("rationale") else ""))
        md.append("")
    return "\n".join(md)


# =================================================================================================
# Command line: `promptevo curriculum ...`
# =================================================================================================


def _build_curriculum_parser() -> Any:
    from promptevo.optim.engine import _build_parser

    p = _build_parser()
    p.prog = "promptevo curriculum"
    p.description = ("Optimize an agent's prompts over a curriculum of MAPF-FrozenLake configurations: after each "
                     "stage an LLM environment engineer reads the failures and sets the next stage's generator "
                     "knobs. Writes results/<run>/stage-k/ and curriculum.json/.md.")
    p.add_argument("--stages", type=int, help="stages (default 3); --generations is per stage")
    p.add_argument("--engineer", choices=["llm", "fixed"],
                   help="llm: the optimizer LLM sets the next configuration; fixed: it never changes (default llm)")
    p.add_argument("--target", help="task whose held-out seeds judge the initial and final prompts (default --task)")
    p.add_argument("--max-changes", type=int, help="knobs the engineer may change per stage (default 2)")
    return p


def curriculum_args(args: Sequence[str]) -> tuple[EvolveConfig, dict[str, Any], bool]:
    """(base config, run_curriculum keyword arguments, quiet) from command-line arguments."""
    ns = _build_curriculum_parser().parse_args(list(args))
    extra = {"stages", "engineer", "target", "max_changes", "resume", "quiet"}
    given = {k: v for k, v in vars(ns).items() if v is not None and k not in extra}
    if "baseline" in given and given["baseline"].lower() in ("none", "off", ""):
        given["baseline"] = None
    stored: dict[str, Any] = {}
    if ns.resume:
        path = Path(ns.resume)
        if not (path / "curriculum.json").exists():
            path = Path(given.get("results_dir") or "results") / ns.resume
        if not (path / "curriculum.json").exists():
            raise EvolveError(f"no curriculum to resume: {path / 'curriculum.json'} does not exist")
        try:
            stored = json.loads((path / "curriculum.json").read_text(encoding="utf-8"))
            base_d = dict(stored["config"])
        except (ValueError, KeyError, TypeError) as e:
            raise EvolveError(f"corrupt curriculum file {path / 'curriculum.json'}: {e}") from None
        base_d.update(given)
        base_d.update({"resume": True, "run": str(path), "results_dir": str(path.parent)})
        given = base_d
    elif not given.get("task"):
        raise EvolveError("missing --task (a MAPF task, see `promptevo tasks`), or --resume RUN")
    cfg = validate_config(given)
    if cfg.run is None:
        cfg = cfg.model_copy(update={"run": f"{cfg.task}-curriculum-{datetime.now().strftime('%Y%m%d-%H%M%S')}"})
    stages = ns.stages if ns.stages is not None else int(stored.get("stages_planned") or 3)
    mode = {"llm": "engineer", "fixed": "fixed"}[ns.engineer] if ns.engineer else stored.get("mode", "engineer")
    max_changes = ns.max_changes if ns.max_changes is not None else int(stored.get("max_changes") or 2)
    if stages < 1:
        raise EvolveError(f"--stages must be >= 1 (got {stages})")
    if max_changes < 0:
        raise EvolveError(f"--max-changes must be >= 0 (got {max_changes})")
    target = ns.target or (stored.get("target_task") if stored else None)
    _load_mapf_task(cfg.task, "task")
    if target:
        _load_mapf_task(target, "target task")
    return cfg, {"stages": stages, "mode": mode, "target_task": target, "max_changes": max_changes}, bool(ns.quiet)


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo curriculum``; returns the exit code."""
    from rich.console import Console

    from promptevo.llm.gateway import LLMConfigError

    err = Console(stderr=True)
    try:
        cfg, kw, quiet = curriculum_args(args)
    except SystemExit as e:  # argparse --help / usage errors
        return int(e.code or 0)
    except EvolveError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        return 2
    try:
        res = run_curriculum(cfg, quiet=quiet, **kw)
    except (EvolveError, TaskError, MAPFConfigError, LLMConfigError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        err.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: continue with `promptevo curriculum --resume {cfg.run_path()}`")
        return 130
    out = Console()
    out.print(curriculum_table(res.data), markup=False, highlight=False, soft_wrap=True)
    out.print(f"curriculum: {res.run_dir / 'curriculum.md'} | best prompts: "
              f"{res.run_dir / f'stage-{len(res.stages)}' / 'best.md'}", markup=False, highlight=False, soft_wrap=True)
    return 0


__all__ = [
    "Bounds", "CurriculumResult", "DEFAULT_BOUNDS", "FAILURE_CAUSES", "KNOBS", "apply_changes", "build_engineer_messages",
    "check_solvable", "classify_episode", "cli_main", "config_knobs", "curriculum_args", "curriculum_table",
    "failure_report", "parse_engineer_reply", "propose_config", "render_curriculum_md", "render_report",
    "run_curriculum", "short_summary",
]
