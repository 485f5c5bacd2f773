"""Behaviour signatures of played episodes: recurring patterns of play found by rules, without an LLM.

A signature names a kind of behaviour (``no_effect_action``, ``turn_oscillation``, ...), the episodes
and steps that show it (cited ``S<seed>.<t>``: step ``t`` of the episode with ``seed``), how often it
occurs and in what share of the episodes. They are pure, deterministic functions of the episode dicts
(:meth:`~promptevo.evaluation.rollout.EpisodeResult.to_dict`). :func:`summarize_signatures` runs the
generic detectors of :mod:`promptevo.envs.behaviour` (where the types and helpers live, so that a game
family's detectors can use them), then the family's own (``signatures=`` of
:func:`~promptevo.envs.registry.register_env`).

A family detector is ``detector(episodes) -> list`` over the episode dicts; it may return
:class:`Signature` objects (typically built with :func:`aggregate`) or bare :class:`Occurrence` objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from promptevo.envs.behaviour import GENERIC_DETECTORS, Occurrence, Signature, aggregate, episode_dicts

__all__ = ["render_signatures", "signatures_to_dict", "summarize_signatures"]

log = logging.getLogger(__name__)


def _sort(sigs: list[Signature]) -> list[Signature]:
    return sorted(sigs, key=lambda s: (-s.share, -s.count, s.kind))


Detector = Callable[[list[dict[str, Any]]], Any]


def _run_detector(name: str, detector: Detector, eps: list[dict[str, Any]]) -> list[Signature]:
    try:
        found = list(detector(eps) or [])
    except Exception as e:  # noqa: BLE001 - a broken detector costs its signatures, not the run
        log.warning("signature detector %s failed: %s: %s", name, type(e).__name__, str(e)[:200])
        return []
    sigs = [x for x in found if isinstance(x, Signature)]
    occ = [x for x in found if isinstance(x, Occurrence)]
    if len(sigs) + len(occ) < len(found):
        log.warning("signature detector %s returned %d items that are neither Signature nor Occurrence",
                    name, len(found) - len(sigs) - len(occ))
    return sigs + aggregate(occ, len(eps))


def summarize_signatures(episodes: Iterable[Any], *, family: str | None = None,
                         extra: Sequence[Detector] | None = None) -> list[Signature]:
    """The behaviour signatures of ``episodes`` (dicts or EpisodeResult objects), most widespread first
    (share, then count). Runs the generic detectors, then the env family's own detectors
    (``get_family(family).signatures``) and each of ``extra`` (``detector(episodes) -> list`` of
    Signature / Occurrence); a detector that raises is skipped with a one-line warning."""
    eps = episode_dicts(episodes)
    if not eps:
        return []
    occ: list[Occurrence] = []
    for idx, ep in enumerate(eps):
        for det in GENERIC_DETECTORS:
            try:
                occ.extend(Occurrence(o.kind, o.seed, o.t, o.note, idx) for o in det(ep))
            except Exception as e:  # noqa: BLE001 - malformed trajectory data
                log.warning("signature detector %s failed on seed %s: %s: %s", det.__name__, ep.get("seed"),
                            type(e).__name__, str(e)[:200])
    sigs = aggregate(occ, len(eps))
    detectors: list[tuple[str, Detector]] = []
    if family:
        from promptevo.envs.registry import get_family

        try:
            fam_detector = get_family(family).signatures
        except Exception as e:  # noqa: BLE001 - unknown family: generic signatures only
            log.warning("no signature detectors for env family %r: %s", family, str(e)[:200])
            fam_detector = None
        if fam_detector is not None:
            detectors.append((f"of env family {family!r}", fam_detector))
    for i, det in enumerate(extra or ()):
        detectors.append((getattr(det, "__name__", f"extra #{i + 1}"), det))
    for name, det in detectors:
        sigs.extend(_run_detector(name, det, eps))
    return _sort(sigs)


# -- output -----------------------------------------------------------------------------------------------
def render_signatures(sigs: Sequence[Signature], max_items: int = 8, max_steps: int = 4) -> str:
    """Compact text for an LLM prompt, one line per signature:
    ``- 60% of episodes (6), 14x wall_bump: <detail> [S3.4 S3.9 S7.2]``; "" when there are none."""
    lines = []
    for s in list(sigs)[: max(0, max_items)]:
        cites = " ".join(s.steps[:max_steps])
        lines.append(f"- {round(100 * s.share)}% of episodes ({s.episodes}), {s.count}x {s.kind}: {s.detail}"
                     + (f" [{cites}]" if cites else ""))
    if len(sigs) > max_items:
        lines.append(f"- ({len(sigs) - max_items} more kinds left out)")
    return "\n".join(lines)


def signatures_to_dict(sigs: Iterable[Signature]) -> list[dict[str, Any]]:
    """JSON-ready dicts of ``sigs``."""
    return [s.to_dict() for s in sigs]
