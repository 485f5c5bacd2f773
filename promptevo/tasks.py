"""Task configurations: which environment to build and which seeds to play.

A task is a small TOML file in ``tasks/`` (one file per task, the file stem is the task name)::

    name = "putnext"
    family = "babyai"
    goal = "putnext"
    episodes = 10
    description = "Put one object next to another (BALROG BabyAI)."
    train_seeds = { start = 0, count = 1000 }
    heldout_seeds = { start = 100000, count = 1000 }

MAPF tasks name a preset instead of a goal (``mapf_preset = "easy"``); the preset file
``tasks/mapf/<preset>.toml`` belongs to :mod:`promptevo.envs.mapf.env`. A MAPF task may also carry an inline
``[mapf_config]`` table of generator knobs merged over the preset (``rows = 4``, ``slip_prob = 0.1``, ...;
the fields of :class:`promptevo.envs.mapf.MAPFConfig`); :func:`mapf_config_for` gives the effective config
and :func:`with_mapf_config` returns a task whose environment is exactly a given config (used by the
curriculum of :mod:`promptevo.envs.mapf.curriculum`).

Seeds (fixed, documented, so every run is reproducible):

* **train** seeds default to ``0 .. 999``: used by the optimizer (validation bags, selection pools).
* **held-out** seeds default to ``100000 .. 100999``: used only for final evaluation, never seen while
  optimizing. The two ranges never overlap (checked on load).

``TaskConfig.seeds(split, n, offset)`` returns the first ``n`` seeds of a split (after ``offset``), so
``promptevo eval --seeds heldout --episodes 20`` always plays the same 20 episodes.

``max_steps`` (optional) caps the number of steps the harness plays per episode; ``None`` keeps the
env's own limit (BabyAI: 64 or 128). The effective limit is ``min(env.max_steps, task.max_steps)``.

The tasks folder is ``<repo>/tasks`` unless the environment variable ``PROMPTEVO_TASKS_DIR`` points
elsewhere. :func:`load_task` also accepts a path to a ``.toml`` file.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from promptevo.envs.base import TextEnv
from promptevo.resources import tasks_dir

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.envs.mapf.env import MAPFConfig

#: The five BALROG BabyAI goals (mirrors ``promptevo.envs.babyai.BABYAI_GOALS``; kept here so task files
#: can be validated without importing minigrid).
BABYAI_GOAL_NAMES = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")

DEFAULT_TRAIN = {"start": 0, "count": 1000}
DEFAULT_HELDOUT = {"start": 100_000, "count": 1000}

Split = Literal["train", "heldout"]


class TaskError(ValueError):
    """A task name or task file is wrong; ``str(e)`` is one line meant for the user."""




class SeedRange(BaseModel):
    """``count`` consecutive seeds starting at ``start``."""

    model_config = ConfigDict(extra="forbid")
    start: int = Field(ge=0)
    count: int = Field(ge=1)

    def as_list(self) -> list[int]:
        return list(range(self.start, self.start + self.count))


class TaskConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    family: Literal["babyai", "mapf"]
    goal: str | None = None  # babyai
    num_dists: int = Field(default=0, ge=0)  # babyai distractors (BALROG: 0)
    mapf_preset: str | None = None  # mapf
    mapf_config: dict[str, Any] | None = None  # mapf: generator knobs merged over the preset
    max_steps: int | None = Field(default=None, ge=1)
    train_seeds: list[int] | SeedRange = Field(default_factory=lambda: SeedRange(**DEFAULT_TRAIN))
    heldout_seeds: list[int] | SeedRange = Field(default_factory=lambda: SeedRange(**DEFAULT_HELDOUT))
    episodes: int = Field(default=10, ge=1)
    description: str = ""

    @field_validator("mapf_config", mode="after")
    @classmethod
    def _check_mapf_config(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if value is None:
            return None
        from promptevo.envs.mapf.env import MAPFConfig, MAPFConfigError, load_mapf_preset, make_mapf_config

        unknown = [k for k in value if k not in MAPFConfig.model_fields]
        if unknown:
            raise ValueError(f"unknown MAPF knob {unknown[0]!r} (valid knobs: {', '.join(MAPFConfig.model_fields)})")
        preset = info.data.get("mapf_preset")
        if info.data.get("family") == "mapf" and preset:
            try:
                base = load_mapf_preset(preset)
            except MAPFConfigError:
                return dict(value)  # the preset itself is reported by load_task_file / make_env
            try:
                make_mapf_config({**base.model_dump(), **value}, f"{preset!r} + mapf_config")
            except MAPFConfigError as e:
                raise ValueError(str(e)) from None
        return dict(value)

    @model_validator(mode="after")
    def _check(self) -> "TaskConfig":
        if self.family == "babyai":
            if self.goal not in BABYAI_GOAL_NAMES:
                raise ValueError(f"goal must be one of {', '.join(BABYAI_GOAL_NAMES)} (got {self.goal!r})")
            if self.mapf_preset is not None:
                raise ValueError("mapf_preset is only for family 'mapf'")
            if self.mapf_config is not None:
                raise ValueError("mapf_config is only for family 'mapf'")
        else:
            if not self.mapf_preset:
                raise ValueError("family 'mapf' needs mapf_preset (a preset name in tasks/mapf/)")
            if self.goal is not None:
                raise ValueError("goal is only for family 'babyai'")
        tr, ho = set(self.seed_list("train")), set(self.seed_list("heldout"))
        if not tr or not ho:
            raise ValueError("train_seeds and heldout_seeds must not be empty")
        if tr & ho:
            raise ValueError(f"train_seeds and heldout_seeds overlap (e.g. seed {min(tr & ho)})")
        return self

    def seed_list(self, split: Split) -> list[int]:
        s = self.train_seeds if split == "train" else self.heldout_seeds
        return s.as_list() if isinstance(s, SeedRange) else list(s)

    def seeds(self, split: Split = "heldout", n: int | None = None, offset: int = 0) -> list[int]:
        """The first ``n`` seeds (default ``episodes``) of ``split`` after skipping ``offset``."""
        if split not in ("train", "heldout"):
            raise TaskError(f"unknown seed split {split!r} (use train or heldout)")
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
    data.setdefault("name", path.stem)
    try:
        task = TaskConfig(**data)
    except ValidationError as e:
        raise TaskError(f"{path}: {_first_error_line(e)}") from None
    if task.family == "mapf":  # a bad or missing preset fails here, not in the middle of a run
        from promptevo.envs.mapf.env import MAPFConfigError, load_mapf_preset

        try:
            load_mapf_preset(task.mapf_preset)  # type: ignore[arg-type]
        except MAPFConfigError as e:
            raise TaskError(f"{path}: field mapf_preset: {e}") from None
        try:
            mapf_config_for(task)
        except MAPFConfigError as e:
            raise TaskError(f"{path}: field mapf_config: {e}") from None
    return task


def list_tasks() -> list[str]:
    d = tasks_dir()
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def load_task(name: str) -> TaskConfig:
    """Load ``tasks/<name>.toml`` (or a path to a .toml file)."""
    if name.endswith(".toml") or os.sep in name:
        return load_task_file(name)
    path = tasks_dir() / f"{name}.toml"
    if not path.is_file():
        valid = ", ".join(list_tasks()) or "(none found in " + str(tasks_dir()) + ")"
        raise TaskError(f"unknown task {name!r}; valid tasks: {valid}")
    return load_task_file(path)


def make_env(task: TaskConfig) -> TextEnv:
    """Build a fresh environment for ``task`` (one per episode; envs are not thread-safe)."""
    if task.family == "babyai":
        from promptevo.envs.babyai.env import BabyAITextEnv

        return BabyAITextEnv(task.goal, num_dists=task.num_dists)
    from promptevo.envs.mapf.env import MAPFFrozenLakeEnv

    return MAPFFrozenLakeEnv(mapf_config_for(task))


def mapf_config_for(task: TaskConfig) -> "MAPFConfig":
    """The effective MAPF generator config of a MAPF task: its preset with ``mapf_config`` merged over it.

    Raises :class:`TaskError` for a non-MAPF task and ``MAPFConfigError`` (one line) for a bad preset or
    bad knobs.
    """
    if task.family != "mapf":
        raise TaskError(f"task {task.name!r} is a {task.family} task, not a MAPF task")
    from promptevo.envs.mapf.env import load_mapf_preset, make_mapf_config

    base = load_mapf_preset(task.mapf_preset)  # type: ignore[arg-type]
    if not task.mapf_config:
        return base
    return make_mapf_config({**base.model_dump(), **task.mapf_config}, f"{task.mapf_preset!r} + mapf_config")


def with_mapf_config(task: TaskConfig, config: "MAPFConfig") -> TaskConfig:
    """A copy of MAPF ``task`` whose environment is generated from ``config`` (all knobs, preset kept as
    the named base). Names, seeds, episodes and ``max_steps`` of the task are unchanged."""
    from promptevo.envs.mapf.env import MAPFConfig

    if task.family != "mapf":
        raise TaskError(f"task {task.name!r} is a {task.family} task; only MAPF tasks take a MAPF config")
    if not isinstance(config, MAPFConfig):
        raise TypeError(f"config must be a MAPFConfig, not {type(config).__name__}")
    data = task.model_dump()
    data["mapf_config"] = config.model_dump()
    try:
        return TaskConfig(**data)
    except ValidationError as e:
        raise TaskError(f"task {task.name!r}: {_first_error_line(e)}") from None
