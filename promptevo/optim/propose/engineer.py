"""The environment engineer: an LLM reads a stage's failure report and proposes the next stage's MAPF
generator configuration, validated against :class:`Bounds` (clipped, at most ``max_changes`` knobs,
solvable instances) with a fallback to the current configuration."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.envs.mapf.failures import KNOBS, render_report
from promptevo.envs.mapf.generator import (
    MAPFConfig,
    MAPFConfigError,
    MAPFGenerationError,
    generate_instance,
    make_mapf_config,
)
from promptevo.optim.reflect.llm_json import example_strings, load_template, render_template
from promptevo.segments import PromptFormatError


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


class EngineerReply(BaseModel):
    """The schema the engineer's reply is forced to (parse_engineer_reply still accepts looser shapes)."""

    changes: dict[str, float | int | str | bool]
    rationale: str


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
    parsed, raw, err, usage = OptimizerLM.of(gateway).json(
        msgs, role="engineer", parse=parse_engineer_reply, temperature=temperature,
        max_tokens=max_tokens, seed=seed, retries=retries, schema=EngineerReply, constrained=constrained,
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


