"""``promptevo curriculum``: optimize across MAPF stages whose configuration an LLM environment engineer
proposes (``--engineer llm``) or keeps fixed (``--engineer fixed``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from promptevo.cli.errors import print_error, user_error_types
from promptevo.cli.flags import Flag, own_flag, parse, run_args
from promptevo.cli.names import check_run_name
from promptevo.cli.optimize import optimize_flags, split_given
from promptevo.optim.config import ConfigError, OptimizeConfig, validate_config
from promptevo.curriculum import curriculum_table, load_mapf_task, run_curriculum
from promptevo.optim.state import RunError


DOC = ("Optimize an agent's prompts over a curriculum of MAPF-FrozenLake configurations: after each stage an "
       "LLM environment engineer reads the failures and sets the next stage's generator knobs. Writes "
       "results/<run>/stage-k/ and curriculum.json/.md.")
PANEL = "curriculum"
STAGE_FLAGS = [
    own_flag("stages", "--stages", kind=int, panel=PANEL, help="stages (default 3); --generations is per stage"),
    own_flag("engineer", "--engineer", kind=Literal["llm", "fixed"], panel=PANEL,
             help="llm: the optimizer LLM sets the next configuration; fixed: it never changes (default llm)"),
    own_flag("target", "--target", panel=PANEL,
             help="task whose test seeds judge the initial and final prompts (default --task)"),
    own_flag("max_changes", "--max-changes", kind=int, panel=PANEL,
             help="knobs the engineer may change per stage (default 2)"),
]


def curriculum_flags() -> list[Flag]:
    """optimize's flags (a stage is an optimize run) and the curriculum's own."""
    return [f for f in optimize_flags() if f.dest not in ("config", "dry_run", "seconds_per_call")] + STAGE_FLAGS


def curriculum_args(args: Sequence[str]) -> tuple[OptimizeConfig, dict[str, Any], bool]:
    """(base config, run_curriculum keyword arguments, quiet) from command-line arguments."""
    return curriculum_given(parse(curriculum_flags(), args, "promptevo curriculum", DOC))


def curriculum_given(values: dict[str, Any]) -> tuple[OptimizeConfig, dict[str, Any], bool]:
    """(base config, run_curriculum keyword arguments, quiet) from the values the command line gave."""
    stage_options = {f.dest for f in STAGE_FLAGS}
    settings, own = split_given({k: v for k, v in values.items() if k not in stage_options})
    stage = {k: values.get(k) for k in stage_options}
    given = dict(settings)
    if given.get("run") is not None:
        check_run_name(given["run"])
    if "baseline" in given and given["baseline"].lower() in ("none", "off", ""):
        given["baseline"] = None
    if own.get("history") is not None:
        given["agent_options"] = {"history": own["history"]}
    stored: dict[str, Any] = {}
    if own.get("resume"):
        path = Path(own["resume"])
        if not (path / "curriculum.json").exists():
            path = Path(given.get("results_dir") or "results") / own["resume"]
        if not (path / "curriculum.json").exists():
            raise RunError(f"no curriculum to resume: {path / 'curriculum.json'} does not exist")
        try:
            stored = json.loads((path / "curriculum.json").read_text(encoding="utf-8"))
            base_d = dict(stored["config"])
        except (ValueError, KeyError, TypeError) as e:
            raise RunError(f"corrupt curriculum file {path / 'curriculum.json'}: {e}") from None
        base_d.update(given)
        base_d.update({"resume": True, "run": str(path), "results_dir": str(path.parent)})
        given = base_d
    elif not given.get("task"):
        raise RunError("missing --task (a MAPF task, see `promptevo tasks`), or --resume RUN")
    cfg = validate_config(given)
    if cfg.run is None:
        cfg = cfg.model_copy(update={"run": f"{cfg.task}-curriculum-{datetime.now().strftime('%Y%m%d-%H%M%S')}"})
    stages = stage["stages"] if stage["stages"] is not None else int(stored.get("stages_planned") or 3)
    mode = {"llm": "engineer", "fixed": "fixed"}[stage["engineer"]] if stage["engineer"] else stored.get("mode", "engineer")
    max_changes = stage["max_changes"] if stage["max_changes"] is not None else int(stored.get("max_changes") or 2)
    if stages < 1:
        raise RunError(f"--stages must be >= 1 (got {stages})")
    if max_changes < 0:
        raise RunError(f"--max-changes must be >= 0 (got {max_changes})")
    target = stage["target"] or (stored.get("target_task") if stored else None)
    load_mapf_task(cfg.task, "task")
    if target:
        load_mapf_task(target, "target task")
    return cfg, {"stages": stages, "mode": mode, "target_task": target, "max_changes": max_changes}, bool(own.get("quiet"))


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo curriculum`` with its arguments; returns the exit code."""
    return run_args(curriculum_flags(), args, run, "promptevo curriculum", DOC)


def run(values: dict[str, Any]) -> int:
    """``promptevo curriculum`` with the values its command line gave; returns the exit code."""
    from rich.console import Console

    err = Console(stderr=True, emoji=False)
    try:
        cfg, kw, quiet = curriculum_given(values)
    except (RunError, ConfigError, *user_error_types()) as e:
        print_error(e)
        return 2
    try:
        res = run_curriculum(cfg, quiet=quiet, **kw)
    except user_error_types() as e:
        print_error(str(e).splitlines()[0] if str(e) else type(e).__name__)
        return 2
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: continue with `promptevo curriculum --resume {cfg.run_path()}`")
        return 130
    out = Console(emoji=False)
    out.print(curriculum_table(res.data), markup=False, highlight=False, soft_wrap=True)
    out.print(f"curriculum: {res.run_dir / 'curriculum.md'} | best prompts: "
              f"{res.run_dir / f'stage-{len(res.stages)}' / 'best.md'}", markup=False, highlight=False, soft_wrap=True)
    return 0


