"""What the proposers read about a parent's episodes: one typed object instead of a dict.

The game adapter builds it (:meth:`~promptevo.optim.game_adapter.TextGameAdapter.make_reflective_dataset`),
the engine writes it to ``analyses/gen-NNN.json`` and reads it back (so a resumed run proposes from the
same evidence), and every operator's ``propose(parent, evidence, ctx, k)`` gets an :class:`Evidence`:

============== ===============================================================================
field          what it holds
============== ===============================================================================
signatures     the computed behaviour signatures of the parent's evidence episodes
analysis       the analyzer's diagnosis (attributions to segments, failure modes), or None
expert         the game expert's evidence (labelled states, where the agent departs from the
               expert, clusters), or None where the game has no expert
cards          the evidence cards the analyzer read instead of raw trajectories, or None
evidence_kind  ``raw``, ``cards`` or ``none`` (pruning generations)
usage          the optimizer's token usage per role for building it
============== ===============================================================================

Keys a file holds besides these (the generation, its seeds) are kept in ``extra``. An Evidence also reads
as a mapping (``evidence.get("expert")``, ``evidence["analysis"]``), so an operator written against the
dict it used to be still works.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from promptevo.optim.reflect.expert import LabelledState, states_of

FIELDS = ("signatures", "analysis", "expert", "cards", "evidence_kind", "usage")


@dataclass(frozen=True)
class Evidence(Mapping):
    """See the module docstring."""

    signatures: list[dict] = field(default_factory=list)
    analysis: dict | None = None
    expert: dict | None = None
    cards: dict | None = None
    evidence_kind: str | None = None
    usage: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def of(cls, data: Any) -> "Evidence":
        """``data`` itself when it is an Evidence, else the Evidence of a dict (None: empty)."""
        if isinstance(data, Evidence):
            return data
        d = dict(data or {})
        return cls(signatures=list(d.pop("signatures", None) or []), analysis=d.pop("analysis", None),
                   expert=d.pop("expert", None), cards=d.pop("cards", None),
                   evidence_kind=d.pop("evidence_kind", None), usage=dict(d.pop("usage", None) or {}), extra=d)

    def to_dict(self) -> dict:
        out = dict(self.extra)
        out.update({k: getattr(self, k) for k in FIELDS if getattr(self, k) is not None})
        return out

    # -- what operators ask most ------------------------------------------------------------------------
    @property
    def has_expert(self) -> bool:
        return bool((self.expert or {}).get("available"))

    @property
    def expert_states(self) -> list[LabelledState]:
        """The expert-labelled states (the agent's and the expert's own episodes), [] without an expert."""
        return states_of(self.expert or {})

    @property
    def clusters(self) -> list[dict]:
        """Where the agent departs from the expert, grouped (agent action -> expert action)."""
        return list((self.expert or {}).get("clusters") or [])

    # -- the mapping view ------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


__all__ = ["Evidence", "FIELDS"]
