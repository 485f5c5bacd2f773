"""Counterfactual ablation: what each prompt segment is worth, measured by playing without it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from promptevo.optim.reflect.render import field_of
from promptevo.segments import PromptSet

Play = Callable[[PromptSet, list[int]], list[Any]]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def ablatable_segments(prompts: PromptSet) -> list[tuple[str, str]]:
    """Every segment whose removal leaves its module non-empty."""
    return [(m, s.name) for m, p in prompts.modules if len(p.segments) > 1 for s in p.segments]


def counterfactual_ablation(prompts: PromptSet, seeds: Sequence[int], play: Play,
                            segments: Sequence[tuple[str, str]] | None = None) -> list[dict]:
    """Re-run ``seeds`` with each segment removed; report the change against the full prompt.

    ``play(prompts, seeds)`` returns the episodes (a store-backed player reuses finished ones);
    ``segments`` is a list of ``(module, segment)`` (default: :func:`ablatable_segments`). Episodes that
    ended on an LLM error are left out of both sides. Returns ``[{"module", "segment", "delta_success",
    "delta_return", "n"}]`` sorted by delta_return (most useful segment first).
    """
    seeds = [int(s) for s in seeds]
    full = {int(field_of(r, "seed")): r for r in play(prompts, seeds)}
    out: list[dict] = []
    for module, seg in (segments if segments is not None else ablatable_segments(prompts)):
        ablated = prompts.replace_module(module, prompts.module(module).without(seg))
        res = {int(field_of(r, "seed")): r for r in play(ablated, seeds)}
        common = [s for s in seeds if s in full and s in res and not field_of(full[s], "error")
                  and not field_of(res[s], "error")]
        ds = [float(bool(field_of(res[s], "success"))) - float(bool(field_of(full[s], "success"))) for s in common]
        dr = [float(field_of(res[s], "return", 0.0) or 0.0) - float(field_of(full[s], "return", 0.0) or 0.0)
              for s in common]
        out.append({"module": module, "segment": seg, "delta_success": _mean(ds), "delta_return": _mean(dr),
                    "n": len(common)})
    out.sort(key=lambda d: (d["delta_return"], d["delta_success"]))
    return out
