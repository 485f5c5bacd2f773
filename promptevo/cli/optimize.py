"""``promptevo optimize``: the command line of :func:`promptevo.optimize`."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from promptevo.cli.errors import print_error, user_error_types
from promptevo.cli.flags import Flag, config_flags, own_flag, parse, run_args
from promptevo.cli.names import check_run_name
from promptevo.optim.config import (
    SECTION_TITLES,
    ConfigError,
    OptimizeConfig,
    load_config_file,
    validate_config,
    with_local_preset,
)
from promptevo.optim.state import CHECKPOINT, RunError, RunStopped, load_checkpoint


DOC = ("Optimize an agent's prompts on a task: reflect on episodes, propose segment edits, race children on "
       "paired training seeds, promote through a statistical gate on validation seeds, and report the test split "
       "played once at the end. Writes results/<run>/.")

#: the parameters of this command that are not settings of the run
RUN_PANEL = "run: this invocation"
OWN_FLAGS = [
    own_flag("config", "--config", metavar="FILE", panel=RUN_PANEL, help="settings from a TOML file, one table "
             "per section ([loop] generations = 3) or flat keys; options on the command line win. Every run writes "
             "its resolved settings to results/<run>/config.toml"),
    own_flag("dry_run", "--dry-run", kind=bool, panel=RUN_PANEL,
             help="print the plan (episodes per phase, LLM calls, time estimate) and exit"),
    own_flag("seconds_per_call", "--seconds-per-call", kind=float, metavar="S", panel=RUN_PANEL,
             help="for the plan's time estimate: seconds one agent call takes (default: from earlier runs of the "
             "model under --results-dir, else a probe of 3 calls with --dry-run)"),
    own_flag("resume", "--resume", metavar="RUN", panel=RUN_PANEL,
             help="continue results/RUN (or a run folder path) with nothing re-run"),
    own_flag("history", "--history", kind=int, panel=SECTION_TITLES["agent"],
             help="naive/robust-cot: observations kept in the messages (default 16)"),
    own_flag("quiet", "--quiet", "-q", kind=bool, panel=RUN_PANEL, help="no progress display"),
]
NOT_CONFIG = tuple(f.dest for f in OWN_FLAGS)


def optimize_flags() -> list[Flag]:
    """This command's flags: its own, then every setting's (generated from the config fields)."""
    return OWN_FLAGS + config_flags()


def split_given(given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(settings, the command's own values) from what the command line gave."""
    return ({k: v for k, v in given.items() if k not in NOT_CONFIG},
            {k: v for k, v in given.items() if k in NOT_CONFIG})


def config_from_args(args: Sequence[str]) -> tuple[OptimizeConfig, bool]:
    """(config, quiet) from command-line arguments; with --resume the stored config is the base."""
    return config_from_given(parse(optimize_flags(), args, "promptevo optimize", DOC))


def config_from_given(values: dict[str, Any]) -> tuple[OptimizeConfig, bool]:
    """(config, quiet) from the values the command line gave; with --resume the stored config is the base."""
    given, own = split_given(values)
    if own.get("config"):
        from_file = load_config_file(own["config"])
        for key in ("api_base", "optimizer_api_base"):
            if "***" in str(from_file.get(key) or "") and key not in given:
                raise ConfigError(f"--{key.replace('_', '-')}: {own['config']} has a masked server URL "
                                  f"({from_file[key]}); give --{key.replace('_', '-')} with its credentials")
        given = {**from_file, **given}
    if given.get("run") is not None:
        check_run_name(given["run"])
    if "baseline" in given and str(given["baseline"]).lower() in ("none", "off", ""):
        given["baseline"] = None
    if own.get("history") is not None:
        given["agent_options"] = {**(given.get("agent_options") or {}), "history": own["history"]}
    quiet = bool(own.get("quiet"))
    if own.get("resume"):
        path = Path(own["resume"])
        if not (path / CHECKPOINT).exists():
            path = Path(given.get("results_dir") or "results") / own["resume"]
        base = load_checkpoint(path).config.model_dump()
        for key in ("api_base", "optimizer_api_base"):
            if "***" in str(base.get(key) or "") and key not in given:
                raise ConfigError(f"--{key.replace('_', '-')}: this run's server URL had credentials, which are never "
                                  f"stored ({base[key]}); give --{key.replace('_', '-')} again to resume")
        base.update(given)
        base.update({"resume": True, "run": str(path), "results_dir": str(path.parent)})
        return validate_config(base), quiet
    if not given.get("task"):
        raise ConfigError("missing --task (see `promptevo tasks`), or --resume RUN")
    cfg = validate_config(with_local_preset(given))
    if cfg.run is None:
        cfg = cfg.model_copy(update={"run": cfg.run_path().name})
    return cfg, quiet


def _seconds_per_call(s: float | None) -> float | None:
    if s is not None and not (s > 0 and s < float("inf")):
        raise ConfigError(f"--seconds-per-call must be a positive number of seconds (got {s})")
    return s


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo optimize`` with its arguments; returns the exit code."""
    return run_args(optimize_flags(), args, run, "promptevo optimize", DOC)


def run(values: dict[str, Any]) -> int:
    """``promptevo optimize`` with the values its command line gave; returns the exit code."""
    from rich.console import Console

    from promptevo.api import optimize, plan

    err = Console(stderr=True, emoji=False)
    try:
        cfg, quiet = config_from_given(values)
    except (ConfigError, RunError, *user_error_types()) as e:
        print_error(e)
        return 2
    given, own = split_given(values)
    dry = bool(own.get("dry_run"))
    try:
        if dry:  # every check the run makes before its folder exists
            from promptevo.api import prepare

            prepare(cfg)
        for line in plan(cfg, set(given), probe=dry, seconds_per_call=_seconds_per_call(own.get("seconds_per_call"))):
            err.print(line, highlight=False, markup=False, soft_wrap=True)
    except (ConfigError, RunError, *user_error_types()) as e:
        print_error(e)
        return 2
    if dry:
        return 0
    terminated = []

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: the default handler stays
        previous = None
    try:
        res = optimize(cfg, quiet=quiet)
    except KeyboardInterrupt:
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        err.print(f"[yellow]{what}[/]: nothing finished is lost; continue with `promptevo optimize --resume "
                  f"{cfg.run_path()}`", highlight=False, soft_wrap=True)
        return 143 if terminated else 130
    except (RunError, ConfigError, *user_error_types()) as e:
        print_error(e)
        return 3 if isinstance(e, RunStopped) else 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    Console(emoji=False).print(f"best prompts: {res.run_dir / 'best.md'} | report: {res.run_dir / 'report.md'}")
    return 0
