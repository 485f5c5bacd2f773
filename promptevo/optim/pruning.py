"""Scaffold pruning (``--prune-at RATE``) as one policy the engine consults at each decision it changes.

A generation is a *pruning* generation when the parent's validation success reaches the threshold and it
has a segment that may go (:func:`~promptevo.optim.propose.pruner.competent`,
:func:`~promptevo.optim.propose.pruner.prunable_segments`). A ``prune`` child then

* races and is accepted on the training seeds by a margin rule that only asks it to do no worse
  (a removal has nothing to win);
* is chosen for the gate by the prompt tokens it saves, not by its training gain;
* is kept by :func:`~promptevo.optim.selection.prune_keep` on the validation seeds (no worse than the
  best, the initial and the peak prompts), not by the sequential promotion gate.

Every method is a pure function of its arguments; the engine plays the episodes they need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from promptevo.optim.propose.pruner import competent, prunable_segments
from promptevo.optim.selection import Scores, Verdict, accept, prune_keep
from promptevo.optim.state import Candidate
from promptevo.segments import PromptSet

#: the operator of a pruned child
PRUNE = "prune"
#: a pruned child may lose this much mean training score (at least) and still be accepted
PRUNE_TRAIN_SLACK = 0.05


@dataclass(frozen=True)
class PrunePolicy:
    """``prune_at``: validation success rate from which a generation prunes (None: never)."""

    prune_at: float | None = None

    @property
    def active(self) -> bool:
        return self.prune_at is not None

    @staticmethod
    def applies(c: Candidate) -> bool:
        return c.operator == PRUNE

    def mode(self, successes: int, n: int, prompts: PromptSet) -> str:
        """``prune`` or ``mutate`` for a generation whose parent has ``successes`` of ``n`` on validation."""
        if self.prune_at is None:
            return "mutate"
        return "prune" if competent(successes, n, self.prune_at) and prunable_segments(prompts) else "mutate"

    def race_rule(self, c: Candidate, rule: str, margin: float) -> tuple[str, float]:
        """The (rule, margin) with which ``c`` may be stopped early while racing."""
        return ("margin", -1.0) if self.applies(c) else (rule, margin)

    def accept(self, c: Candidate, child: Scores, parent: Scores, *, rule: str, margin: float,
               alpha: float) -> Verdict:
        """The training-seed verdict of ``c``."""
        if self.applies(c):
            return accept(child, parent, "margin", -max(margin, PRUNE_TRAIN_SLACK))
        return accept(child, parent, rule, margin, alpha=alpha)

    @staticmethod
    def top(accepted: Sequence[Candidate], mode: str) -> Candidate:
        """The accepted child that goes to the validation gate."""
        if mode == "prune":
            return max(accepted, key=lambda c: (c.prompt_tokens_saved or 0, c.verdict["mean_diff"], -int(c.id[1:])))
        return max(accepted, key=lambda c: (c.verdict["mean_diff"], -int(c.id[1:])))

    def keep(self, child_success: Scores, best_success: Scores, references: Mapping[str, Scores], *,
             alpha: float) -> Verdict:
        """The validation verdict of a pruned child (success scores, references: initial and peak)."""
        refs = {k: {s: float(v > 0.5) for s, v in r.items()} for k, r in references.items()}
        return prune_keep(child_success, best_success, references=refs, alpha=alpha)


__all__ = ["PRUNE", "PRUNE_TRAIN_SLACK", "PrunePolicy"]
