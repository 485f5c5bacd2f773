"""Where promptevo's data lives: task configs (``tasks/``) and prompt files (``prompts/``).

The repository keeps both folders at its top level. They ship inside the wheel as package data under
``promptevo/_data/tasks`` and ``promptevo/_data/prompts`` (``pyproject.toml`` maps the packages
``promptevo._data.tasks`` / ``promptevo._data.prompts`` to the top-level folders), and are found with
:func:`importlib.resources.files`. An editable install (``pip install -e .``) or a plain checkout on
``sys.path`` has no ``_data`` folder: there the top-level folders of the checkout are used.

The functions return real :class:`pathlib.Path` folders, since the rest of the code globs and reads them
as files. That assumes an unpacked install (a wheel installed by pip, an editable install, a checkout);
promptevo imported from a zip archive is not supported (:class:`ResourceError` says so).

A user's own folders replace the shipped ones through the environment variables ``PROMPTEVO_TASKS_DIR``
and ``PROMPTEVO_PROMPTS_DIR`` (set them with :func:`use_dirs`, which is what command-line options such as
``--tasks-dir`` / ``--prompts-dir`` should call). Environment variables, not module state, so that worker
processes (Ray, subprocesses) see the same folders.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from promptevo.errors import PromptevoError

TASKS_ENV = "PROMPTEVO_TASKS_DIR"
PROMPTS_ENV = "PROMPTEVO_PROMPTS_DIR"
DATA_PACKAGE = "_data"  # promptevo/_data/{tasks,prompts} inside an installed wheel


class ResourceError(PromptevoError, ValueError):
    """A data folder cannot be used; ``str(e)`` is one line meant for the user."""


def _package_root() -> Path:
    root = resources.files("promptevo")
    if not isinstance(root, Path):  # e.g. zipimport: no real folder to hand out
        raise ResourceError(f"promptevo is installed in a form without real files ({type(root).__name__}); "
                            "install it unpacked (pip install promptevo) to use its shipped tasks and prompts")
    return root


def shipped_dir(name: str) -> Path:
    """The shipped folder ``name`` (``tasks`` or ``prompts``): ``promptevo/_data/<name>`` in an installed
    wheel, else ``<checkout>/<name>`` for an editable install or a source checkout."""
    pkg = _package_root()
    packaged = pkg / DATA_PACKAGE / name
    if packaged.is_dir():
        return packaged
    checkout = pkg.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / name).is_dir():
        return checkout / name
    raise ResourceError(f"promptevo's {name} folder is missing from this installation (looked in {packaged} and "
                        f"{checkout / name}); reinstall promptevo or set "
                        f"{TASKS_ENV if name == 'tasks' else PROMPTS_ENV} to a folder of your own")


def shipped_tasks_dir() -> Path:
    """The task files that ship with promptevo."""
    return shipped_dir("tasks")


def shipped_prompts_dir() -> Path:
    """The prompt files that ship with promptevo."""
    return shipped_dir("prompts")


def _override(var: str) -> Path | None:
    value = os.environ.get(var)
    return Path(value).expanduser() if value else None


def tasks_dir() -> Path:
    """The folder of task files (``<name>.toml``; MAPF presets in ``mapf/``): ``$PROMPTEVO_TASKS_DIR``
    when set (it replaces the shipped folder), else the shipped one."""
    return _override(TASKS_ENV) or shipped_tasks_dir()


def prompts_dir() -> Path:
    """The folder of prompt files (``<family>/<init>/<agent>.md``, ``baselines/``, ``optimizer/``):
    ``$PROMPTEVO_PROMPTS_DIR`` when set (it replaces the shipped folder), else the shipped one."""
    return _override(PROMPTS_ENV) or shipped_prompts_dir()


def use_dirs(tasks: str | Path | None = None, prompts: str | Path | None = None) -> None:
    """Use the user's own ``tasks`` and/or ``prompts`` folder from now on (in this process and in the
    processes it starts): sets ``PROMPTEVO_TASKS_DIR`` / ``PROMPTEVO_PROMPTS_DIR`` to the absolute path.
    ``None`` leaves that folder as it is. Raises :class:`ResourceError` (one line) for a folder that does
    not exist; nothing is set then."""
    updates = {}
    for var, value, opt in ((TASKS_ENV, tasks, "--tasks-dir"), (PROMPTS_ENV, prompts, "--prompts-dir")):
        if value is None:
            continue
        path = Path(value).expanduser()
        if not path.is_dir():
            raise ResourceError(f"{opt} {value}: no such folder")
        updates[var] = str(path.resolve())
    os.environ.update(updates)


__all__ = ["PROMPTS_ENV", "TASKS_ENV", "ResourceError", "prompts_dir", "shipped_dir", "shipped_prompts_dir",
           "shipped_tasks_dir", "tasks_dir", "use_dirs"]
