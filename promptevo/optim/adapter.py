"""The interface between the optimization engine and what it optimizes (after GEPA's adapters).

The engine knows prompts (:class:`~promptevo.segments.PromptSet`), seeds and scores; everything about the
game, the agent and the optimizer LLM is behind an :class:`Adapter`:

* :meth:`Adapter.evaluate` - play a prompt set (or a baseline agent) on seeds; one episode dict per seed;
* :meth:`Adapter.score` - the per-episode fitness the loop optimizes;
* :meth:`Adapter.make_reflective_dataset` - the evidence the proposers read about a parent's episodes
  (behaviour signatures, an LLM analysis, evidence cards...), as a JSON-able dict;
* :meth:`Adapter.propose` - children of a parent, each a :class:`Proposal` naming the operator that made it.

:class:`~promptevo.optim.game_adapter.TextGameAdapter` is the adapter for text games
(:mod:`promptevo.envs`); tests and the statistics benchmark use adapters that simulate episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from promptevo.segments import PromptSet

EpisodeCallback = Callable[[dict], None]


def optimizer_seed(run_seed: int, generation: int) -> int:
    """The optimizer LLM's sampling seed in one generation of a run (one formula for every call)."""
    return int(run_seed) * 1000 + int(generation)


@dataclass
class Proposal:
    """One child: its prompts and how they were made."""

    prompts: PromptSet
    operator: str  # mutate | delete | crossover | hint | skill | prune | induce | rule
    edit: dict | None = None  # Edit.to_dict() of a single-segment edit (None for crossover)
    source: dict | None = None  # operator details (hint id, skill id, crossover parents, ablation row)
    prompt_tokens_saved: int | None = None
    screen: dict | None = None  # ScreenResult.to_dict() when the child was screened before racing


@dataclass
class ProposalContext:
    """What the engine tells the proposers besides the parent and the evidence."""

    generation: int
    mode: str  # mutate | prune
    n: int
    history: list[dict]
    tried: set[str]  # fingerprints of every candidate tried so far
    archive: list[tuple[str, PromptSet]] = field(default_factory=list)  # accepted candidates (id, prompts)
    archive_parent: str = ""  # the parent's candidate id (crossover skips its own lineage entry)
    parent_stats: str = ""  # e.g. "validation success 12/40 (30%)"
    seed: int = 0
    evidence_seeds: list[int] = field(default_factory=list)  # training seeds the parent was analysed on
    #: store-backed scoring of any prompt set on training seeds (what ablation-guided deletion plays)
    evaluate: Callable[[PromptSet, Sequence[int]], dict[int, float]] | None = None


@dataclass
class ProposalBatch:
    proposals: list[Proposal]
    usage: dict[str, dict] = field(default_factory=dict)  # optimizer usage per step (mutator, pruner, ...)
    log: list[str] = field(default_factory=list)  # one line per notable event (rejected edits, fallbacks)
    record: dict = field(default_factory=dict)  # JSON-able details kept in the generation's evidence file


@runtime_checkable
class Adapter(Protocol):
    max_score: float | None  # largest per-episode score (None: unbounded); lets racing stop futile children

    def evaluate(self, prompts: PromptSet | None, seeds: Sequence[int], *, agent: str | None = None,
                 on_episode: EpisodeCallback | None = None) -> list[dict]:
        """Play ``prompts`` (or, with ``agent``, that agent's default prompts: baselines) on ``seeds``;
        returns one episode dict per seed (keys at least seed, success, return, steps, error), calling
        ``on_episode`` as each finishes."""
        ...

    def score(self, episode: dict) -> float:
        """The fitness of one episode."""
        ...

    def make_reflective_dataset(self, parent: PromptSet, episodes: list[dict], *, generation: int,
                                history: list[dict], expert_seeds: Sequence[int] = (), mode: str = "mutate") -> dict:
        """Evidence about the parent's episodes for the proposers (JSON-able; key ``usage`` holds the
        optimizer usage per step). ``expert_seeds``: training seeds on which the game's expert may play
        its own episodes (labelled states; an adapter without an expert ignores them). ``mode``: the
        generation's mode, ``mutate`` or ``prune`` (scaffold pruning needs less evidence)."""
        ...

    def propose(self, parent: PromptSet, evidence: dict, ctx: ProposalContext) -> ProposalBatch:
        """Up to ``ctx.n`` children of ``parent``."""
        ...


def describe(adapter: Any) -> dict[str, Any]:
    """What the adapter says about itself for the run log (``describe()`` if it has one)."""
    fn = getattr(adapter, "describe", None)
    return dict(fn()) if callable(fn) else {"adapter": type(adapter).__name__}
