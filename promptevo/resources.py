"""Where promptevo's data lives: task configs (``tasks/``) and prompt files (``prompts/``).

Both folders ship inside the package; a user's own folders override them through the environment
variables ``PROMPTEVO_TASKS_DIR`` and ``PROMPTEVO_PROMPTS_DIR`` (or the ``--tasks-dir`` and
``--prompts-dir`` options, which set those variables).
"""

from __future__ import annotations

import os
from pathlib import Path

TASKS_ENV = "PROMPTEVO_TASKS_DIR"
PROMPTS_ENV = "PROMPTEVO_PROMPTS_DIR"

_REPO_ROOT = Path(__file__).resolve().parent.parent


def shipped_tasks_dir() -> Path:
    """The task files that ship with promptevo."""
    return _REPO_ROOT / "tasks"


def tasks_dir() -> Path:
    """The folder of task files (``<name>.toml``; MAPF presets in ``mapf/``)."""
    env = os.environ.get(TASKS_ENV)
    return Path(env) if env else shipped_tasks_dir()


def prompts_dir() -> Path:
    """The folder of prompt files (``<family>/<init>/<agent>.md``, ``baselines/``, ``optimizer/``)."""
    env = os.environ.get(PROMPTS_ENV)
    return Path(env) if env else _REPO_ROOT / "prompts"
