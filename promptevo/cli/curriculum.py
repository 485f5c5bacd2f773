"""``promptevo curriculum``: optimize across MAPF stages whose configuration an LLM environment engineer
proposes (``--engineer llm``) or keeps fixed (``--engineer fixed``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from promptevo.cli.errors import print_error, user_error_types
from promptevo.cli.optimize import build_parser, given_options
from promptevo.cli.parsing import CommandParser, check_run_name
from promptevo.optim.config import ConfigError, OptimizeConfig, validate_config
from promptevo.curriculum import curriculum_table, load_mapf_task, run_curriculum
from promptevo.optim.state import RunError


def build_curriculum_parser() -> CommandParser:
    p = build_parser("promptevo curriculum")
    p.description = ("Optimize an agent's prompts over a curriculum of MAPF-FrozenLake configurations: after each "
                     "stage an LLM environment engineer reads the failures and sets the next stage's generator "
                     "knobs. Writes results/<run>/stage-k/ and curriculum.json/.md.")
    p.add_argument("--stages", type=int, help="stages (default 3); --generations is per stage")
    p.add_argument("--engineer", choices=["llm", "fixed"],
                   help="llm: the optimizer LLM sets the next configuration; fixed: it never changes (default llm)")
    p.add_argument("--target", help="task whose test seeds judge the initial and final prompts (default --task)")
    p.add_argument("--max-changes", type=int, help="knobs the engineer may change per stage (default 2)")
    return p


def curriculum_args(args: Sequence[str]) -> tuple[OptimizeConfig, dict[str, Any], bool]:
    """(base config, run_curriculum keyword arguments, quiet) from command-line arguments."""
    ns = build_curriculum_parser().parse_args(list(args))
    stage_options = {"stages", "engineer", "target", "max_changes"}
    given = {k: v for k, v in given_options(ns).items() if k not in stage_options}
    if given.get("run") is not None:
        check_run_name(given["run"])
    if "baseline" in given and given["baseline"].lower() in ("none", "off", ""):
        given["baseline"] = None
    if ns.history is not None:
        given["agent_options"] = {"history": ns.history}
    stored: dict[str, Any] = {}
    if ns.resume:
        path = Path(ns.resume)
        if not (path / "curriculum.json").exists():
            path = Path(given.get("results_dir") or "results") / ns.resume
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
    stages = ns.stages if ns.stages is not None else int(stored.get("stages_planned") or 3)
    mode = {"llm": "engineer", "fixed": "fixed"}[ns.engineer] if ns.engineer else stored.get("mode", "engineer")
    max_changes = ns.max_changes if ns.max_changes is not None else int(stored.get("max_changes") or 2)
    if stages < 1:
        raise RunError(f"--stages must be >= 1 (got {stages})")
    if max_changes < 0:
        raise RunError(f"--max-changes must be >= 0 (got {max_changes})")
    target = ns.target or (stored.get("target_task") if stored else None)
    load_mapf_task(cfg.task, "task")
    if target:
        load_mapf_task(target, "target task")
    return cfg, {"stages": stages, "mode": mode, "target_task": target, "max_changes": max_changes}, bool(ns.quiet)


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo curriculum``; returns the exit code."""
    from rich.console import Console

    err = Console(stderr=True, emoji=False)
    try:
        cfg, kw, quiet = curriculum_args(args)
    except SystemExit as e:  # --help
        return int(e.code or 0)
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


