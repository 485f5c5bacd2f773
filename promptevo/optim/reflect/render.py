"""Compact text views of prompts, episodes and edit history for the optimizer's LLM prompts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from promptevo.segments import PromptSet


def flat(text: Any, limit: int) -> str:
    s = " / ".join(line.strip() for line in str(text or "").splitlines() if line.strip())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def field_of(obj: Any, name: str, default: Any = None) -> Any:
    """A field of an episode given as a dict or an object (``return_`` and ``return`` are one field)."""
    if isinstance(obj, dict):
        if name in ("return_", "return"):
            return obj.get("return_", obj.get("return", default))
        return obj.get(name, default)
    if name == "return":
        name = "return_"
    return getattr(obj, name, default)


def render_prompt_segments(prompts: PromptSet, max_chars_per_segment: int | None = None) -> str:
    out: list[str] = []
    for m, p in prompts.modules:
        out.append(f"[module {m}]")
        for s in p.segments:
            text = s.text
            if max_chars_per_segment and len(text) > max_chars_per_segment:
                text = text[: max_chars_per_segment - 3] + "..."
            out.append(f"<<{m}.{s.name}>>\n{text}")
        out.append("")
    return "\n".join(out).strip()


def render_episode(result: Any, *, max_steps_shown: int = 30, obs_chars: int = 300) -> str:
    """Compact text of one episode: header, mission, steps (head and tail when long), outcome."""
    seed = field_of(result, "seed")
    traj = list(field_of(result, "trajectory", []) or [])
    steps = field_of(result, "steps", len(traj))
    success = bool(field_of(result, "success", False))
    if success:
        head = f"=== Episode seed={seed}: SUCCESS in {steps} steps ==="
    else:
        prog = field_of(result, "progression", 0.0)
        head = f"=== Episode seed={seed}: FAILED after {steps} steps (progression {prog}) ==="
    lines = [head, f"Mission: {field_of(result, 'mission', '')}"]
    prev_sig: tuple = ()
    err = field_of(result, "error")
    if err:
        lines.append(f"(episode aborted: {flat(err, 200)})")
    # collapse runs of identical steps (same observation, description and action) into one entry
    groups: list[tuple[int, int]] = []  # (first index, run length)
    for i, st in enumerate(traj):
        st = st or {}
        sig = (st.get("observation", st.get("obs")), st.get("description"), st.get("action"), st.get("valid"))
        if groups and sig == prev_sig:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1)
        else:
            groups.append((i, 1))
        prev_sig = sig
    gidx = list(range(len(groups)))
    if len(gidx) > max_steps_shown:
        first = max(1, max_steps_shown // 4)
        last = max_steps_shown - first
        shown = gidx[:first] + [-1] + gidx[-last:]
        omitted = sum(groups[g][1] for g in gidx[first:-last])
    else:
        shown, omitted = gidx, 0
    for g in shown:
        if g == -1:
            lines.append(f"  ... ({omitted} steps omitted) ...")
            continue
        i, run = groups[g]
        st = traj[i] or {}
        n = st.get("t", st.get("step", i))
        label = f"S{seed}.{n}" if run == 1 else f"S{seed}.{n}-{n + run - 1} (same step repeated {run} times)"
        flags = []
        if st.get("valid") is False:
            flags.append("[INVALID]")
        if st.get("parsed") is False:
            flags.append("[UNPARSED]")
        lines.append(f"{label} obs: {flat(st.get('obs', st.get('observation', '')), obs_chars)}")
        if st.get("description"):
            lines.append(f"    description: {flat(st['description'], obs_chars)}")
        action = st.get("action", "")
        executed = st.get("executed_action")
        act = f"    action: {action}"
        if executed and executed != action:
            act += f" (executed: {executed})"
        if flags:
            act += " " + " ".join(flags)
        if st.get("reward"):
            act += f" reward={st['reward']}"
        lines.append(act)
        reply = st.get("reply")
        if reply and st.get("parsed") is False:
            lines.append(f"    reply: {flat(reply, 200)}")
    lines.append(
        f"Outcome: {'success' if success else 'failure'}, return {round(float(field_of(result, 'return_', 0.0) or 0.0), 3)}, "
        f"invalid actions {field_of(result, 'invalid_actions', 0)}"
    )
    return "\n".join(lines)


def select_episodes(results: Sequence[Any], max_trajectories: int = 6, max_successes: int = 2) -> list[Any]:
    """Failures first (lowest return first), then up to ``max_successes`` successes; deterministic."""
    fails = sorted((r for r in results if not field_of(r, "success")), key=lambda r: (field_of(r, "return_", 0.0) or 0.0, field_of(r, "seed", 0)))
    wins = sorted((r for r in results if field_of(r, "success")), key=lambda r: field_of(r, "seed", 0))
    n_wins = min(max_successes, len(wins), max_trajectories)
    if len(fails) < max_trajectories - n_wins:
        n_wins = min(len(wins), max_trajectories - len(fails))
    picked = fails[: max_trajectories - n_wins] + wins[:n_wins]
    return picked


def render_history(history: Iterable[dict] | None, last: int = 10) -> str:
    items = list(history or [])[-last:]
    if not items:
        return "(none yet)"
    out = []
    for h in items:
        e = h.get("edit") or {}
        diff = h.get("train_diff")
        diff_s = f", train diff {diff:+.3f}" if isinstance(diff, (int, float)) else ""
        out.append(
            f"- gen {h.get('generation')}: {e.get('op')} {e.get('module')}.{e.get('segment')} -> "
            f"{h.get('outcome', 'pending')}{diff_s}; why: {flat(e.get('rationale', ''), 200)}"
        )
    return "\n".join(out)


def stats_line(results: Sequence[Any]) -> str:
    n = len(results)
    if not n:
        return "no episodes"
    succ = sum(1 for r in results if field_of(r, "success"))
    ret = sum(float(field_of(r, "return_", 0.0) or 0.0) for r in results) / n
    return f"{succ}/{n} successes, mean return {ret:.3f}"


