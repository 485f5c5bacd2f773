"""Stop conditions: small objects the engine asks, each naming why a run stops.

A condition looks at a :class:`Progress` (what the run has spent and decided so far) and returns a stop
reason or None. Budgets (LLM calls, tokens, dollars, episodes, the time limit) are checked between any two
steps; convergence conditions (patience, target) between generations. Every stopped run still plays its
final test split; :func:`raised` says whether a resumed run that stopped on a condition may go on (its limit
was raised or removed). Pure functions of their inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from promptevo.optim.config import OptimizeConfig


@dataclass
class Progress:
    """What a run has spent and decided so far."""

    calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    episodes: int = 0
    wall_s: float = 0.0
    promoted: Sequence[bool] = field(default_factory=list)  # per finished generation, oldest first
    best_validation: float | None = None  # the best prompts' validation success rate, if measured


class Condition(Protocol):
    prefix: str  # the start of the reason it gives (to recognise it on resume)

    def check(self, p: Progress) -> str | None: ...

    def raised(self, reason: str, p: Progress) -> bool: ...


@dataclass(frozen=True)
class Limit:
    """Stop once ``what`` reaches ``limit`` (a budget)."""

    prefix: str
    what: str  # attribute of Progress
    limit: float
    unit: str = ""
    scale: float = 1.0  # limit is in units of ``scale`` x the progress value (hours: 3600 s)

    def check(self, p: Progress) -> str | None:
        v = getattr(p, self.what)
        if v >= self.limit * self.scale:
            shown = v / self.scale
            return (f"{self.prefix} reached ({shown:.2f}{self.unit} >= {self.limit:g}{self.unit})" if self.scale != 1
                    else f"{self.prefix} reached ({shown:g} >= {self.limit:g})")
        return None

    def raised(self, reason: str, p: Progress) -> bool:
        return getattr(p, self.what) < self.limit * self.scale


@dataclass(frozen=True)
class Patience:
    """Stop after ``n`` finished generations in a row without a promotion."""

    n: int
    prefix: str = "no improvement"

    def check(self, p: Progress) -> str | None:
        tail = list(p.promoted)[-self.n:]
        if len(tail) == self.n and not any(tail):
            return f"{self.prefix} in {self.n} generation(s)"
        return None

    def raised(self, reason: str, p: Progress) -> bool:
        return f"in {self.n} generation" not in reason


@dataclass(frozen=True)
class Target:
    """Stop once the best prompts' validation success rate reaches ``rate``."""

    rate: float
    prefix: str = "target reached"

    def check(self, p: Progress) -> str | None:
        if p.best_validation is not None and p.best_validation >= self.rate:
            return f"{self.prefix} (validation success {p.best_validation:.0%} >= {self.rate:.0%})"
        return None

    def raised(self, reason: str, p: Progress) -> bool:
        return f">= {self.rate:.0%}" not in reason


def budgets(cfg: OptimizeConfig) -> list[Condition]:
    """The budget conditions of ``cfg`` (checked between any two steps)."""
    out: list[Condition] = []
    if cfg.budget_llm_calls is not None:
        out.append(Limit("LLM-call budget", "calls", cfg.budget_llm_calls))
    if cfg.budget_tokens is not None:
        out.append(Limit("token budget", "tokens", cfg.budget_tokens))
    if cfg.budget_dollars is not None:
        out.append(Limit("dollar budget", "cost", cfg.budget_dollars))
    if cfg.budget_episodes is not None:
        out.append(Limit("episode budget", "episodes", cfg.budget_episodes))
    if cfg.max_hours is not None:
        out.append(Limit("time limit", "wall_s", cfg.max_hours, " h", 3600.0))
    return out


def convergence(cfg: OptimizeConfig) -> list[Condition]:
    """The conditions checked between generations."""
    out: list[Condition] = []
    if cfg.patience is not None:
        out.append(Patience(cfg.patience))
    if cfg.target_success is not None:
        out.append(Target(cfg.target_success))
    return out


#: reasons a condition gives (to recognise a run stopped by one)
PREFIXES = ("LLM-call budget", "token budget", "dollar budget", "episode budget", "time limit", "no improvement",
            "target reached")


def first_reason(conditions: Sequence[Condition], p: Progress) -> str | None:
    for c in conditions:
        if (why := c.check(p)) is not None:
            return why
    return None


def stopped_by_condition(reason: str) -> bool:
    return reason.startswith(PREFIXES)


def raised(cfg: OptimizeConfig, reason: str, p: Progress) -> bool:
    """True when a run that stopped with ``reason`` may go on under ``cfg``: the condition that stopped it
    is gone or its limit is no longer reached."""
    for c in budgets(cfg) + convergence(cfg):
        if reason.startswith(c.prefix):
            return c.raised(reason, p)
    return stopped_by_condition(reason)  # the condition was removed


__all__ = ["Condition", "Limit", "PREFIXES", "Patience", "Progress", "Target", "budgets", "convergence",
           "first_reason", "raised", "stopped_by_condition"]
