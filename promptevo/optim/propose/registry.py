"""The operator registry: every way of making a child is one :class:`Operator`, registered by name.

An operator is a small object with a ``name`` (what ``--operators`` lists), the ``author`` of the edits it
makes (``machine``: derived by the optimizer, an LLM call or a program, from evidence or the game's expert;
``person``: game knowledge a person typed, e.g. the hint library), what evidence it ``reads``, a one-line
``summary``, and ``propose(parent, evidence, ctx, k) -> list[Proposal]`` (at most ``k`` children). It
writes what it did into ``ctx.log`` (one line per notable event) and ``ctx.record`` (JSON-able details kept
in the generation's evidence file); it never raises on bad evidence: it says why there is no child.

promptevo's own operators live one per module under :mod:`promptevo.optim.propose` and register when
their module is imported (:func:`get_operator` imports them on first use). Operators from other packages
register with :func:`register_operator`, or through the entry-point group ``promptevo.operators`` (each
entry point is a module that calls :func:`register_operator` when imported)::

    from promptevo.optim.propose.registry import register_operator

    class Shout:
        name, author, reads, summary = "shout", "machine", (), "upper-cases the role segment"

        def propose(self, parent, evidence, ctx, k):
            ...

    register_operator(Shout())
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from promptevo.entrypoints import entry_point_names, load_entry_points
from promptevo.errors import PromptevoError
from promptevo.optim.adapter import Proposal, ProposalBatch, ProposalContext, optimizer_seed
from promptevo.optim.evidence import Evidence
from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.segments import PromptSet

ENTRY_POINT_GROUP = "promptevo.operators"
AUTHORS = ("machine", "person")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")

#: promptevo's own operators: name -> the module that registers it
BUILTIN: dict[str, str] = {
    "induce": "promptevo.optim.propose.compile_table",
    "rules": "promptevo.optim.propose.rules",
    "mutate": "promptevo.optim.propose.mutator",
    "delete": "promptevo.optim.propose.ablation",
    "crossover": "promptevo.optim.propose.crossover",
    "hints": "promptevo.optim.propose.hints",
    "compile-vocab": "promptevo.optim.propose.compile_vocab",
    "compile-slots": "promptevo.optim.propose.compile_slots",
    "compile-grammar": "promptevo.optim.propose.compile_grammar",
    "compile-lines": "promptevo.optim.propose.compile_lines",
    "compile-demos": "promptevo.optim.propose.compile_demos",
    "compile-fold": "promptevo.optim.propose.compile_fold",
    "compile-bind": "promptevo.optim.propose.compile_bind",
    "compile-key": "promptevo.optim.propose.compile_key",
    "compile-phase": "promptevo.optim.propose.compile_phase",
    "compile-paraphrase": "promptevo.optim.propose.compile_paraphrase",
    # not chosen with --operators: --skills adds library skills, pruning generations use the pruner
    "skills": "promptevo.optim.propose.skills",
    "prune": "promptevo.optim.propose.pruner",
}
#: operators the engine schedules itself (never named in --operators)
INTERNAL = frozenset({"skills", "prune"})


class OperatorError(PromptevoError, ValueError):
    """Unknown or malformed operator; ``str(e)`` is one line naming the valid choices."""


class GameServices(Protocol):
    """What an operator may ask of the game's adapter (:class:`~promptevo.optim.game_adapter.TextGameAdapter`
    provides it): the run's settings, the task, the optimizer's gateway, fresh envs, the env's own
    description, the person-written libraries, and one-time warnings."""

    cfg: Any
    task: Any
    opt_gw: Any
    #: the optimizer LLM every operator's call goes through (optional: made from ``opt_gw`` and ``cfg``)
    opt_lm: Any
    env_factory: Callable[[Any], Any]

    @property
    def env_instructions(self) -> str: ...

    def hint_library(self) -> Any: ...

    def skill_library(self) -> Any: ...

    def warn_once(self, key: str, msg: str) -> None: ...


@dataclass
class OperatorContext:
    """What an operator gets besides the parent and the evidence: the engine's proposal context (tried
    fingerprints, history, archive, seeds...), the game's services, and the batch being filled (its log,
    record and usage are written by the operators)."""

    proposal: ProposalContext
    game: GameServices
    batch: ProposalBatch = field(default_factory=lambda: ProposalBatch(proposals=[]))
    #: what operators of one generation share and do not persist (e.g. the induced table, fitted once)
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def cfg(self) -> Any:
        return self.game.cfg

    @property
    def tried(self) -> set[str]:
        return self.proposal.tried

    @property
    def log(self) -> list[str]:
        return self.batch.log

    @property
    def record(self) -> dict:
        return self.batch.record

    @property
    def usage(self) -> dict[str, dict]:
        return self.batch.usage

    @property
    def seed(self) -> int:
        """The optimizer LLM's sampling seed for this generation."""
        return optimizer_seed(self.cfg.seed, self.proposal.generation)

    @property
    def lm(self) -> OptimizerLM:
        """The run's optimizer LLM (the game's ``opt_lm``; one made from its gateway and settings where the
        game has none)."""
        lm = getattr(self.game, "opt_lm", None)
        if lm is None:
            lm = self.cache.get("optimizer-lm") or OptimizerLM.from_config(self.game.opt_gw, self.cfg)
            self.cache["optimizer-lm"] = lm
        return lm

    def first_call(self, operator: str) -> bool:
        """True the first time ``operator`` asks in this generation (operators that make one child per
        generation, however many slots are free)."""
        key = f"{operator}-done"
        if self.cache.get(key):
            return False
        self.cache[key] = True
        return True

    def new_child(self, child: PromptSet) -> bool:
        """True (and the child recorded as tried) unless a candidate with the same prompts was tried."""
        fp = child.fingerprint()
        if fp in self.proposal.tried:
            return False
        self.proposal.tried.add(fp)
        return True


@runtime_checkable
class Operator(Protocol):
    """One way of making children (see the module docstring)."""

    name: str
    author: str
    reads: Sequence[str]
    summary: str

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]: ...


_OPERATORS: dict[str, Operator] = {}
_LOCK = threading.RLock()


def register_operator(op: Operator, *, replace: bool = False) -> Operator:
    """Make ``op`` available as ``--operators <op.name>`` (and in the Python API's ``operators=[...]``)."""
    name = getattr(op, "name", None)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise OperatorError(f"operator name must match {_NAME_RE.pattern} (got {name!r})")
    if getattr(op, "author", None) not in AUTHORS:
        raise OperatorError(f"operator {name!r}: author must be one of {', '.join(AUTHORS)} "
                            f"(got {getattr(op, 'author', None)!r})")
    if not callable(getattr(op, "propose", None)):
        raise OperatorError(f"operator {name!r}: needs a propose(parent, evidence, ctx, k) method")
    with _LOCK:
        if name in _OPERATORS and not replace and _OPERATORS[name] is not op:
            raise OperatorError(f"operator {name!r} is already registered (pass replace=True)")
        _OPERATORS[name] = op
    return op


def _load_builtin(name: str) -> None:
    mod = BUILTIN.get(name)
    if mod is not None:
        importlib.import_module(mod)


def _load_entry_points(name: str | None = None) -> None:
    load_entry_points(ENTRY_POINT_GROUP, OperatorError, "operator", name)


def get_operator(name: str) -> Operator:
    """The registered operator ``name`` (importing promptevo's own module or an entry point on first use)."""
    with _LOCK:
        op = _OPERATORS.get(name)
    if op is None and isinstance(name, str):
        _load_builtin(name)
        with _LOCK:
            op = _OPERATORS.get(name)
        if op is None:
            _load_entry_points(name)
            with _LOCK:
                op = _OPERATORS.get(name)
    if op is None:
        raise OperatorError(f"unknown operator {name!r}; valid operators: {', '.join(operator_names())}")
    return op


def operator_names(*, internal: bool = False) -> list[str]:
    """Names ``--operators`` accepts (built in first, in their order, then registered ones)."""
    with _LOCK:
        extra = [n for n in _OPERATORS if n not in BUILTIN]
    extra += [n for n in entry_point_names(ENTRY_POINT_GROUP) if n not in extra]
    names = list(BUILTIN) + [n for n in extra if n not in BUILTIN]
    return names if internal else [n for n in names if n not in INTERNAL]


def check_operators(names: Sequence[str]) -> list[str]:
    """``names`` checked against the registry (OperatorError, one line, on an unknown or internal one)."""
    valid = operator_names()
    out = []
    for n in names:
        if n not in valid:
            get_operator(n)  # a registered or entry-point operator loads here; else one line naming the choices
            if n in INTERNAL:
                raise OperatorError(f"operator {n!r} is scheduled by the engine itself; valid operators: "
                                    f"{', '.join(valid)}")
        if n not in out:
            out.append(n)
    return out


def describe_operators() -> list[dict[str, Any]]:
    """One row per operator (``promptevo operators``, ``--operators`` help): name, author, reads, summary."""
    rows = []
    for n in operator_names(internal=True):
        op = get_operator(n)
        rows.append({"name": n, "author": op.author, "reads": list(op.reads), "summary": op.summary,
                     "internal": n in INTERNAL})
    return rows


__all__ = ["AUTHORS", "BUILTIN", "ENTRY_POINT_GROUP", "GameServices", "Operator", "OperatorContext",
           "OperatorError", "check_operators", "describe_operators", "get_operator", "operator_names",
           "optimizer_seed", "register_operator"]
