"""promptevo: environment-grounded prompt optimization for LLM agents that play text games.

The public API (loaded on first use, so ``import promptevo`` stays cheap):

* :func:`optimize` - optimize an agent's prompts on a task (train / validation / test seed splits);
* :func:`evaluate` - play an agent on a task's seeds and summarise (success with a 95% interval);
* :func:`register_env` / :func:`register_agent` - add a text game or an agent;
* :class:`PromptSet`, :class:`OptimizeConfig`, :func:`load_task`.

Importing promptevo also registers its gymnasium environments (``promptevo/MAPFFrozenLake-v0``).
"""

import os as _os
from typing import Any as _Any

# LiteLLM fetches a remote price map at import time unless told not to; promptevo must work offline.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.2.0"

_API = {
    "optimize": ("promptevo.api", "optimize"),
    "evaluate": ("promptevo.api", "evaluate"),
    "OptimizeConfig": ("promptevo.optim.config", "OptimizeConfig"),
    "RunResult": ("promptevo.optim.engine", "RunResult"),
    "register_env": ("promptevo.envs.registry", "register_env"),
    "register_agent": ("promptevo.agents.registry", "register_agent"),
    "PromptSet": ("promptevo.segments", "PromptSet"),
    "load_task": ("promptevo.tasks", "load_task"),
    "TextEnv": ("promptevo.envs.base", "TextEnv"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> _Any:
    if name in _API:
        import importlib

        mod, attr = _API[name]
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'promptevo' has no attribute {name!r}")


def _register_gymnasium() -> None:
    try:
        import gymnasium as gym
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        return
    env_id = "promptevo/MAPFFrozenLake-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point="promptevo.envs.mapf.env:MAPFFrozenLakeGymEnv")


_register_gymnasium()
