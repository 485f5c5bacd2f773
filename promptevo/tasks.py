"""Task configurations: which environment to build and which seeds each split plays.

A task is a small TOML file in the tasks folder (the file stem is the task name)::

    name = "goto"
    family = "babyai"              # an env family (promptevo.envs.registry)
    episodes = 10                  # default number of episodes for `promptevo eval`
    description = "Go to the named object in a single room."
    train_seeds = { start = 0, count = 1000 }
    validation_seeds = { start = 50000, count = 1000 }
    test_seeds = { start = 100000, count = 1000 }

    [env]                          # the family's own parameters, checked by the family
    goal = "goto"

Three disjoint seed splits (checked on load; a seed field is a ``{start, count}`` range or a list):

* **train**: what the optimizer learns from (paired acceptance of children, the analyzer's evidence);
* **validation**: the promotion gate (a child replaces the best prompt only if it wins here);
* **test**: played once, at the end, for the baseline, the initial and the best prompt; the only
  numbers a run reports. ``promptevo eval`` plays test seeds unless told otherwise.

A task file written before the validation split existed (``heldout_seeds``) is read with its held-out
range as the test split and the default validation range, and a warning says so.

``max_steps`` (optional) caps the number of steps the harness plays per episode; the effective limit is
``min(env.max_steps, task.max_steps)``.

The tasks folder is the one shipped with promptevo unless ``PROMPTEVO_TASKS_DIR`` points elsewhere
(see :mod:`promptevo.resources`). :func:`load_task` also accepts a path to a ``.toml`` file.
"""

from __future__ import annotations

import logging
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from promptevo.envs.base import TextEnv
from promptevo.envs.registry import EnvRegistryError, check_params, get_family
from promptevo.envs.registry import make_env as registry_make_env
from promptevo.errors import PromptevoError
from promptevo.resources import tasks_dir

log = logging.getLogger(__name__)

DEFAULT_TRAIN = {"start": 0, "count": 1000}
DEFAULT_VALIDATION = {"start": 50_000, "count": 1000}
DEFAULT_TEST = {"start": 100_000, "count": 1000}

Split = Literal["train", "validation", "test"]
SPLITS: tuple[str, ...] = ("train", "validation", "test")


class TaskError(PromptevoError, ValueError):
    """A task name or task file is wrong; ``str(e)`` is one line meant for the user."""


class SeedRange(BaseModel):
    """``count`` consecutive seeds starting at ``start``."""

    model_config = ConfigDict(extra="forbid")
    start: int = Field(ge=0)
    count: int = Field(ge=1)

    def as_list(self) -> list[int]:
        return list(range(self.start, self.start + self.count))


Seeds = list[int] | SeedRange


class TaskConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    family: str
    env: dict[str, Any] = Field(default_factory=dict, description="the family's parameters")
    max_steps: int | None = Field(default=None, ge=1)
    train_seeds: Seeds = Field(default_factory=lambda: SeedRange(**DEFAULT_TRAIN))
    validation_seeds: Seeds = Field(default_factory=lambda: SeedRange(**DEFAULT_VALIDATION))
    test_seeds: Seeds = Field(default_factory=lambda: SeedRange(**DEFAULT_TEST))
    episodes: int = Field(default=10, ge=1)
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _renamed_heldout(cls, data: Any) -> Any:
        if isinstance(data, dict) and "heldout_seeds" in data:
            data = dict(data)
            held = data.pop("heldout_seeds")
            if "test_seeds" in data:
                raise ValueError("heldout_seeds was renamed test_seeds; give only test_seeds")
            data["test_seeds"] = held
            log.warning("task %s: heldout_seeds is read as test_seeds (the validation split uses the default "
                        "range unless validation_seeds is given)", data.get("name", "?"))
        return data

    @field_validator("family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        try:
            get_family(v)
        except EnvRegistryError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("env")
    @classmethod
    def _check_env(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        family = info.data.get("family")
        if family is None:  # the family itself was refused; that is the error to show
            return v
        try:
            return check_params(family, v)
        except ValueError as e:
            raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None

    @model_validator(mode="after")
    def _check(self) -> "TaskConfig":
        sets = {s: set(self.seed_list(s)) for s in SPLITS}
        for s, v in sets.items():
            if not v:
                raise ValueError(f"{s}_seeds must not be empty")
        for i, a in enumerate(SPLITS):
            for b in SPLITS[i + 1:]:
                if sets[a] & sets[b]:
                    raise ValueError(f"{a}_seeds and {b}_seeds overlap (e.g. seed {min(sets[a] & sets[b])})")
        return self

    def seed_list(self, split: Split) -> list[int]:
        if split not in SPLITS:
            raise TaskError(f"unknown seed split {split!r} (use {', '.join(SPLITS)})")
        s = getattr(self, f"{split}_seeds")
        return s.as_list() if isinstance(s, SeedRange) else list(s)

    def seeds(self, split: Split = "test", n: int | None = None, offset: int = 0) -> list[int]:
        """The first ``n`` seeds (default ``episodes``) of ``split`` after skipping ``offset``."""
        all_seeds = self.seed_list(split)
        n = self.episodes if n is None else n
        if n < 1:
            raise TaskError(f"number of episodes must be >= 1 (got {n})")
        if offset + n > len(all_seeds):
            raise TaskError(
                f"task {self.name!r}: asked for {n} {split} seeds after offset {offset}, "
                f"but only {len(all_seeds)} are defined"
            )
        return all_seeds[offset : offset + n]

    def with_env(self, params: dict[str, Any]) -> "TaskConfig":
        """A copy whose env parameters are ``params`` (names, seeds and limits unchanged)."""
        data = self.model_dump()
        data["env"] = dict(params)
        try:
            return TaskConfig(**data)
        except ValidationError as e:
            raise TaskError(f"task {self.name!r}: {_first_error_line(e)}") from None


_FIELD_NAMES = ", ".join(TaskConfig.model_fields)


def _first_error_line(e: ValidationError) -> str:
    """One line naming the first bad field: unknown key, wrong type (with the value) or bad value."""
    errors = e.errors()
    err = errors[0]
    if err.get("type") == "list_type" and "list[int]" in err.get("loc", ()):
        # a table was given for a seed field: report what is wrong with it as a SeedRange
        field_name = err["loc"][0]
        err = next((x for x in errors if x.get("loc", ())[:2] == (field_name, "SeedRange")), err)
    loc_parts = [str(p) for p in err.get("loc", ())]
    # drop pydantic's union-branch labels such as "list[int]" / "SeedRange" from the location
    loc = ".".join(p for p in loc_parts if p not in ("list[int]", "SeedRange")) or "(file)"
    msg = err.get("msg", "invalid value").removeprefix("Value error, ")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        top = len(loc_parts) == 1
        valid = _FIELD_NAMES if top else "start, count"
        return f"unknown key {loc!r} (valid keys: {valid})"
    if kind == "missing":
        return f"field {loc}: required but missing"
    if kind != "value_error" and "input" in err and not isinstance(err["input"], dict):
        return f"field {loc}: {msg} (got {err['input']!r})"
    return f"field {loc}: {msg}"


def load_task_file(path: str | Path) -> TaskConfig:
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"task file not found: {path}")
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{path}: invalid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{path}: cannot read: {e}") from None
    data.setdefault("name", path.stem)
    try:
        return TaskConfig(**data)
    except ValidationError as e:
        raise TaskError(f"{path}: {_first_error_line(e)}") from None


def list_tasks() -> list[str]:
    d = tasks_dir()
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def load_task(name: str) -> TaskConfig:
    """Load ``<tasks dir>/<name>.toml`` (or a path to a .toml file)."""
    if name.endswith(".toml") or os.sep in name:
        return load_task_file(name)
    path = tasks_dir() / f"{name}.toml"
    if not path.is_file():
        valid = ", ".join(list_tasks()) or "(none found in " + str(tasks_dir()) + ")"
        raise TaskError(f"unknown task {name!r}; valid tasks: {valid}")
    return load_task_file(path)


def make_env(task: TaskConfig) -> TextEnv:
    """Build a fresh environment for ``task`` (one per episode; envs are not thread-safe)."""
    return registry_make_env(task.family, task.env)
