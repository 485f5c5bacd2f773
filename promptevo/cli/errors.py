"""The errors a user can cause: each is printed as one line with exit code 2, never a traceback."""

from __future__ import annotations

import importlib


class UserError(Exception):
    """A problem with the user's input; printed as one line, exit code 2."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception types that mean bad input (unknown task or agent, bad file, bad model configuration)."""
    from promptevo.agents.base import AgentError
    from promptevo.envs.registry import EnvRegistryError
    from promptevo.llm.errors import LLMConfigError
    from promptevo.optim.config import ConfigError
    from promptevo.optim.state import RunError
    from promptevo.segments import PromptFormatError
    from promptevo.tasks import TaskError

    types: list[type[BaseException]] = [UserError, AgentError, PromptFormatError, TaskError, FileNotFoundError,
                                        LLMConfigError, EnvRegistryError, ConfigError, RunError]
    for mod, name in (("promptevo.envs.mapf.generator", "MAPFConfigError"), ("promptevo.llm.local", "LocalModelError"),
                      ("promptevo.optim.propose.hints", "HintLibraryError"),
                      ("promptevo.evaluation.store", "StoreError"), ("promptevo.resources", "ResourceError")):
        try:
            types.append(getattr(importlib.import_module(mod), name))
        except (ImportError, AttributeError):
            pass
    return tuple(types)
