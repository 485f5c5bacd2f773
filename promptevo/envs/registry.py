"""The env registry: a family name -> how to build and check its text environments.

A task file names a ``family`` and gives that family's parameters in its ``[env]`` table. A family is
registered with :func:`register_env`; promptevo's own families register themselves when their module is
imported, and :func:`get_family` imports ``promptevo.envs.<family>`` on first use, so a new built-in game
is one module (plus its task and prompt files) and nothing else. Families from other packages are found
through the entry-point group ``promptevo.envs`` (each entry point is a module that calls
:func:`register_env` when imported).
"""

from __future__ import annotations

import importlib
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from promptevo.envs.base import TextEnv
from promptevo.entrypoints import entry_point_names, load_entry_points
from promptevo.errors import PromptevoError

EnvMaker = Callable[[dict[str, Any]], TextEnv]
ParamsCheck = Callable[[dict[str, Any]], dict[str, Any]]


class EnvRegistryError(PromptevoError, ValueError):
    """Unknown family or bad family parameters; ``str(e)`` is one line."""


@dataclass(frozen=True)
class EnvFamily:
    """How to build one family's envs.

    ``make(params)`` returns a fresh :class:`TextEnv` (one per episode); ``check(params)`` returns the
    parameters normalised or raises ``ValueError`` with a one-line message (called when a task is
    loaded, so a bad task fails before any episode). ``signatures(episodes)`` optionally returns
    family-specific behaviour signatures (see :mod:`promptevo.evaluation.signatures`).
    """

    name: str
    make: EnvMaker
    check: ParamsCheck | None = None
    description: str = ""
    signatures: Callable[..., list] | None = None


_FAMILIES: dict[str, EnvFamily] = {}
_LOCK = threading.RLock()
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
ENTRY_POINT_GROUP = "promptevo.envs"


def register_env(name: str, make: EnvMaker, *, check: ParamsCheck | None = None, description: str = "",
                 signatures: Callable[..., list] | None = None, replace: bool = False) -> EnvFamily:
    """Register env family ``name``: tasks with ``family = name`` build their envs with ``make(params)``.

    ``name`` is lowercase letters, digits and underscores. Registering a name twice needs
    ``replace=True``.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise EnvRegistryError(f"env family name must match {_NAME_RE.pattern} (got {name!r})")
    if not callable(make):
        raise EnvRegistryError(f"env family {name!r}: make must be callable")
    fam = EnvFamily(name, make, check, description, signatures)
    with _LOCK:
        if name in _FAMILIES and not replace and _FAMILIES[name] != fam:
            raise EnvRegistryError(f"env family {name!r} is already registered (pass replace=True)")
        _FAMILIES[name] = fam
    return fam


def _load_builtin(name: str) -> None:
    try:
        importlib.import_module(f"promptevo.envs.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"promptevo.envs.{name}":
            raise


def _load_entry_points(name: str | None = None) -> None:
    load_entry_points(ENTRY_POINT_GROUP, EnvRegistryError, "env family", name)


BUILTIN = ("babyai", "mapf", "toytext")


def get_family(name: str) -> EnvFamily:
    """The registered family ``name`` (importing promptevo's own module or an entry point on first use)."""
    with _LOCK:
        fam = _FAMILIES.get(name)
    if fam is None and isinstance(name, str) and _NAME_RE.match(name):
        _load_builtin(name)
        with _LOCK:
            fam = _FAMILIES.get(name)
        if fam is None:
            _load_entry_points(name)
            with _LOCK:
                fam = _FAMILIES.get(name)
    if fam is None:
        raise EnvRegistryError(f"unknown env family {name!r}; known families: {', '.join(families())}")
    return fam


def families() -> list[str]:
    """Names of the families promptevo knows (built in, registered, or from entry points)."""
    with _LOCK:
        names = set(_FAMILIES)
    names.update(BUILTIN)
    names.update(entry_point_names(ENTRY_POINT_GROUP))
    return sorted(names)


def check_params(family: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked and normalised by the family (ValueError with one line on bad params)."""
    fam = get_family(family)
    if fam.check is None:
        return dict(params)
    return fam.check(dict(params))


def make_env(family: str, params: dict[str, Any]) -> TextEnv:
    """A fresh env of ``family`` with ``params``."""
    env = get_family(family).make(dict(params))
    if not isinstance(env, TextEnv):
        raise EnvRegistryError(f"env family {family!r}: make() returned {type(env).__name__}, not a TextEnv")
    return env
