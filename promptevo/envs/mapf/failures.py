"""Why MAPF-FrozenLake episodes fail: one cause per failed episode, counted over a stage's episodes, with
example failures and their events (what the environment engineer reads)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from promptevo.envs.mapf.generator import MAPFConfig

#: failure causes, one per failed episode, in the order they are checked
FAILURE_CAUSES: tuple[str, ...] = ("fell_in_hole", "invalid_actions", "collisions", "timeout", "other")

#: knobs the engineer may change, in display order
KNOBS: tuple[str, ...] = ("rows", "cols", "n_agents", "hole_density", "wall_density", "slip_prob", "max_steps",
                          "min_goal_distance", "observation", "view_radius", "goal_assignment")


def field_of(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        if name == "return_" and "return" in obj:
            return obj.get("return", default)
        return obj.get(name, default)
    return getattr(obj, name, default)


def num(x: Any, default: float = 0.0) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def config_knobs(config: MAPFConfig) -> dict[str, Any]:
    """The generator knobs of ``config`` that a curriculum may change (see :class:`Bounds`)."""
    return {k: getattr(config, k) for k in KNOBS}


def _invalid_steps(ep: Any, stats: Mapping) -> int:
    traj = field_of(ep, "trajectory") or []
    if traj:
        return sum(1 for s in traj
                   if isinstance(s, Mapping) and (not s.get("parsed", True) or not s.get("valid", True)))
    return int(max(num(field_of(ep, "parse_failures")), num(field_of(ep, "invalid_actions")),
                   num(stats.get("invalid_actions"))))


def _events(ep: Any, limit: int = 4) -> list[str]:
    """Env events the agent was shown (``Last step: ...`` lines of its observations), latest last."""
    out: list[str] = []
    for s in field_of(ep, "trajectory") or []:
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
    stats = field_of(ep, "env_stats") or {}
    if not isinstance(stats, Mapping):
        stats = {}
    steps = int(num(field_of(ep, "steps"), num(stats.get("steps"))))
    counts = {
        "steps": steps,
        "invalid_actions": _invalid_steps(ep, stats),
        "hole_falls": int(num(stats.get("hole_falls"))),
        "collisions": int(num(stats.get("collisions"))),
        "wall_bumps": int(num(stats.get("wall_bumps"))),
        "slips": int(num(stats.get("slips"))),
        "timeout": bool(stats.get("timeout")) or bool(field_of(ep, "truncated")),
        "error": bool(field_of(ep, "error")),
    }
    if bool(field_of(ep, "success")):
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
        stats = field_of(ep, "env_stats") or {}
        stats = stats if isinstance(stats, Mapping) else {}
        ok = cause is None
        p = num(field_of(ep, "progression"))
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
            makespans.append(num(stats["solver_makespan"]))
        if ok and stats.get("optimality_ratio") is not None:
            ratios.append(num(stats["optimality_ratio"]))
        rows = int(num(stats.get("rows"), config.rows))
        cols = int(num(stats.get("cols"), config.cols))
        agents = int(num(stats.get("n_agents"), config.n_agents))
        key = f"{rows}x{cols}, {agents} agent{'s' if agents != 1 else ''}"
        row = per_size.setdefault(key, {"n": 0, "successes": 0, "progression": 0.0, "causes": Counter()})
        row["n"] += 1
        row["successes"] += ok
        row["progression"] += p
        if not ok:
            causes[cause] += 1
            row["causes"][cause] += 1
            if len(examples) < max_examples:
                examples.append({"seed": field_of(ep, "seed"), "cause": cause, "steps": c["steps"], "progression": p,
                                 "events": _events(ep), "error": (str(field_of(ep, "error"))[:160] if c["error"] else None)})
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


