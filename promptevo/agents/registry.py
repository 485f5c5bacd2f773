"""The agent registry: names -> agent classes, and where each agent's default prompts live.

Built in: ``naive`` and ``robust-cot`` (BALROG's baselines), ``random`` (the floor) and ``two-stage``
(promptevo's descriptor + actor). :func:`register_agent` adds one; :func:`make_agent` builds one.

Default prompts: ``prompts/<family>/<init>/<agent>.md`` when present, else (plain init only)
``prompts/baselines/<agent>.md`` (env-agnostic prompts that take the env's rules from
``{instructions}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from promptevo.agents.balrog import NaiveAgent, RobustCoTAgent
from promptevo.agents.base import Agent, AgentError
from promptevo.agents.random_agent import RandomAgent
from promptevo.agents.two_stage import TwoStageAgent
from promptevo.resources import prompts_dir
from promptevo.segments import PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.llm.gateway import Gateway
    from promptevo.tasks import TaskConfig


@dataclass(frozen=True)
class AgentEntry:
    """One registered agent: ``factory(gateway, prompts, **options) -> Agent``."""

    name: str
    factory: Callable[..., Agent]
    description: str
    needs_llm: bool = True
    calls_per_step: int = 1  # LLM calls one decision takes (two-stage: descriptor + actor)


_REGISTRY: dict[str, AgentEntry] = {}
_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")


def register_agent(name: str, factory: Callable[..., Agent], *, description: str = "",
                   needs_llm: bool = True, calls_per_step: int = 1, replace: bool = False) -> None:
    """Make ``factory(gateway, prompts, **options)`` available as agent ``name`` (CLI ``--agent``,
    :func:`make_agent`, the optimizer). Its default prompts are looked up as for the built-in agents."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise AgentError(f"agent name must match {_NAME_RE.pattern} (got {name!r})")
    if not callable(factory):
        raise AgentError(f"agent {name!r}: factory must be callable (got {type(factory).__name__})")
    if name in _REGISTRY and not replace:
        raise AgentError(f"agent {name!r} is already registered (pass replace=True to replace it)")
    _REGISTRY[name] = AgentEntry(name, factory, description or getattr(factory, "__doc__", "") or "", needs_llm,
                                 calls_per_step if needs_llm else 0)


def agents() -> dict[str, str]:
    """``{name: description}`` of every registered agent."""
    return {k: v.description for k, v in _REGISTRY.items()}


def check_agent_name(name: str) -> str:
    if name not in _REGISTRY:
        raise AgentError(f"unknown agent {name!r}; valid agents: {', '.join(_REGISTRY)}")
    return name


def needs_llm(name: str) -> bool:
    return _REGISTRY[check_agent_name(name)].needs_llm


def calls_per_step(name: str) -> int:
    """LLM calls one decision of agent ``name`` takes (0 for an agent without an LLM)."""
    return _REGISTRY[check_agent_name(name)].calls_per_step


def agent_options(name: str) -> frozenset[str] | None:
    """The keyword options agent ``name`` takes (its factory's keyword-only parameters); None when the
    factory takes any keyword."""
    import inspect

    params = inspect.signature(_REGISTRY[check_agent_name(name)].factory).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(k for k, p in params.items() if p.kind is p.KEYWORD_ONLY)


def options_for(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The part of ``options`` that agent ``name`` takes (a shared setting such as ``history`` reaches only
    the agents that have it)."""
    taken = agent_options(name)
    return dict(options) if taken is None else {k: v for k, v in options.items() if k in taken}


def make_agent(name: str, gateway: "Gateway | None", prompts: PromptSet | None = None, **kw: Any) -> Agent:
    """Build an agent. ``prompts=None`` -> the default prompts (needs ``task=`` in ``kw``; ``init=``
    picks the initialization, see :func:`prompt_inits`) or empty for an agent without an LLM.

    Keyword options: naive/robust-cot ``history`` (16), ``instruction_role`` ("user"),
    ``constrained`` (None = auto: on for local/ models); two-stage ``recent_actions`` (4),
    ``constrained``; random ``seed`` (0). Unknown options raise :class:`AgentError`.
    """
    entry = _REGISTRY[check_agent_name(name)]
    task = kw.pop("task", None)
    init = kw.pop("init", "plain")
    if prompts is None:
        if not entry.needs_llm:
            prompts = PromptSet()
        elif task is None:
            raise AgentError(f"agent {name!r} needs prompts (or task= to load the default prompts)")
        else:
            prompts = default_prompts(name, task, init)
    if entry.needs_llm and gateway is None:
        raise AgentError(f"agent {name!r} needs an LLM gateway")
    taken = agent_options(name)
    if taken is not None:
        for k in kw:
            if k not in taken:
                raise AgentError(f"agent {name!r} has no option {k!r} (--{k.replace('_', '-')}); its options: "
                                 + (", ".join(sorted(taken)) or "none"))
    try:
        return entry.factory(gateway, prompts, **kw)
    except TypeError as e:
        raise AgentError(f"bad option for agent {name!r}: {e}") from None


def default_prompt_path(agent_name: str, task: "TaskConfig", init: str = "plain") -> Path | None:
    """``prompts/<family>/<init>/<agent>.md`` if present, else ``prompts/baselines/<agent>.md`` (plain
    init only). ``None`` for an agent without an LLM."""
    check_agent_name(agent_name)
    if not isinstance(init, str) or not _NAME_RE.match(init):
        raise AgentError(f"unknown prompt init {init!r} (use one of {', '.join(prompt_inits())})")
    if not needs_llm(agent_name):
        return None
    root = prompts_dir()
    candidates = [root / task.family / init / f"{agent_name}.md"]
    if init == "plain":
        candidates.append(root / "baselines" / f"{agent_name}.md")
    for p in candidates:
        if p.is_file():
            return p
    raise AgentError(
        f"no {init} prompts for agent {agent_name!r} on {task.family} tasks (looked for "
        + ", ".join(str(p) for p in candidates)
        + ")"
    )


def prompt_inits(family: str | None = None) -> list[str]:
    """Prompt initializations shipped (the sub-folders of ``prompts/<family>/``, plus ``plain``), for one
    env family or all of them."""
    root = prompts_dir()
    families = [root / family] if family else [d for d in root.iterdir() if d.is_dir() and d.name != "baselines"]
    found = {"plain"}
    for fam in families:
        if fam.is_dir():
            found |= {d.name for d in fam.iterdir() if d.is_dir() and _NAME_RE.match(d.name)}
    return sorted(found)


def default_prompts(agent_name: str, task: "TaskConfig", init: str = "plain") -> PromptSet:
    path = default_prompt_path(agent_name, task, init)
    return PromptSet() if path is None else PromptSet.load(path)


def agent_factory(name: str, gateway: "Gateway | None", prompts: PromptSet | None = None, **kw: Any):
    """A zero-argument callable building a fresh agent per episode (what rollout.run_episodes wants).

    Validates the name and options once, up front, so errors surface before any episode starts.
    """
    make_agent(name, gateway, prompts, **dict(kw))  # fail early on bad names/options/prompts

    def build() -> Agent:
        return make_agent(name, gateway, prompts, **dict(kw))

    return build


register_agent("naive", NaiveAgent,
               description="one call per step; the model answers with the action only (BALROG NaiveAgent protocol)")
register_agent("robust-cot", RobustCoTAgent,
               description="one call per step; reason, then <|ACTION|>a<|END|> (BALROG RobustCoTAgent protocol)")
register_agent("random", RandomAgent, description="uniform random valid action (seeded); the floor", needs_llm=False)
register_agent("two-stage", TwoStageAgent, calls_per_step=2,
               description="descriptor call (focused scene description) + actor call (action); RAPOA-style")
