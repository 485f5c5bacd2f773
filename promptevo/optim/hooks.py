"""What the engine shows the optional strategies it calls (the rule bank, the validity diagnostics):
a narrow, typed view of the loop instead of the whole mutable engine.

:class:`~promptevo.optim.engine.Engine` satisfies :class:`LoopView` structurally; a hook reads the
settings, the run state and recorded episodes, may play a candidate on seeds through the engine's store
(so nothing is played twice) and may emit events, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from promptevo.evaluation.store import EpisodeStore
from promptevo.optim.config import OptimizeConfig
from promptevo.optim.state import Candidate, GenerationRecord, RunState


class LoopView(Protocol):
    """The part of the engine a strategy hook may use."""

    cfg: OptimizeConfig
    state: RunState
    run_dir: Path
    task: Any  # the TaskConfig (its ``family`` and ``name``)
    store: EpisodeStore

    def emit(self, kind: str, **fields: Any) -> None: ...

    def eval_candidate(self, cand: Candidate, split: str, seeds: Sequence[int]) -> None: ...

    def validation_seeds(self) -> list[int]: ...


#: called after a generation's gate: ``hook(loop, record)``
GenerationHook = Callable[[LoopView, GenerationRecord], None]
#: called before a promotion: ``hook(loop, generation, top, best, gate, run_backtest=...) -> report | None``
ValidityHook = Callable[..., "dict | None"]

__all__ = ["GenerationHook", "LoopView", "ValidityHook"]
