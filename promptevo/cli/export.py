"""``promptevo export RUN``: the command line of :func:`promptevo.reporting.export.export_run`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from promptevo.cli.errors import UserError, print_error, user_error_types
from promptevo.cli.flags import own_flag, run_args
from promptevo.optim.state import RunError, resolve_run_dir
from promptevo.reporting.export import export_run


DOC = "Export a run's best prompts (md + json), agent.json and LINEAGE.md."
EXPORT_FLAGS = [
    own_flag("run", argument=True, metavar="RUN", panel="", help="run folder, or a run name under --results-dir"),
    own_flag("out", "--out", "-o", panel="output", help="output folder (default <run>/export); an existing folder "
             "that is not an export needs --force"),
    own_flag("force", "--force", kind=bool, panel="output", help="write into an existing --out folder"),
    own_flag("results_dir", "--results-dir", panel="output", help="where run folders are (default results)"),
]


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo export RUN [--out DIR]`` with its arguments; returns the exit code."""
    return run_args(EXPORT_FLAGS, args, run, "promptevo export", DOC)


def run(values: dict[str, Any]) -> int:
    """``promptevo export`` with the values its command line gave; returns the exit code."""
    from rich.console import Console

    out_dir, results_dir = values.get("out"), values.get("results_dir") or "results"
    try:
        if out_dir and not values.get("force") and Path(out_dir).exists() \
                and (not Path(out_dir).is_dir() or any(Path(out_dir).iterdir())):
            raise UserError(f"--out: {out_dir} exists and is not empty; its files would be overwritten (give --force "
                            "to write there anyway, or choose another folder)")
        paths = export_run(resolve_run_dir(values["run"], results_dir), out_dir)
    except (RunError, OSError, *user_error_types()) as e:
        print_error(str(e).splitlines()[0] if str(e) else type(e).__name__)
        return 2
    out = Console(emoji=False)
    for path in paths:
        out.print(str(path), highlight=False, markup=False, soft_wrap=True)
    data = json.loads(paths[2].read_text(encoding="utf-8"))
    t = data.get("test")
    if t:
        lo, hi = t["ci95"]
        out.print(f"best prompts {data['candidate']}: TEST split {t['successes']}/{t['n']} = {t['success_rate']:.0%} "
                  f"[{lo:.0%}, {hi:.0%}]", highlight=False, markup=False, soft_wrap=True)
    out.print(f"play them: promptevo eval --agent {data['agent']} --task {data['task']} --prompts {paths[0]}",
              highlight=False, markup=False, soft_wrap=True)
    return 0
