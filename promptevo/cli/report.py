"""``promptevo report RUN``: (re)write a run's report (:mod:`promptevo.reporting.report`,
:mod:`promptevo.reporting.html`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from promptevo.cli.errors import print_error, user_error_types
from promptevo.cli.flags import own_flag, run_args
from promptevo.optim.state import CHECKPOINT, RunError, resolve_run_dir
from promptevo.reporting.html import write_html
from promptevo.reporting.report import rebuild_report


DOC = ("(Re)write results/<run>/report.html (a static HTML report of a run) and, for a finished run, report.json "
       "and report.md from its checkpoint.")
REPORT_FLAGS = [
    own_flag("run", argument=True, metavar="RUN", panel="", help="run folder, or a run name under --results-dir"),
    own_flag("results_dir", "--results-dir", panel="output", help="where run folders are (default results)"),
]


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo report RUN [--results-dir DIR]`` with its arguments; returns the exit code."""
    return run_args(REPORT_FLAGS, args, run, "promptevo report", DOC)


def run(values: dict[str, Any]) -> int:
    """``promptevo report`` with the values its command line gave; returns the exit code."""
    from rich.console import Console

    try:
        run_dir = resolve_run_dir(values["run"], values.get("results_dir") or "results")
        if (run_dir / CHECKPOINT).is_file():
            rebuild_report(run_dir)
        path = write_html(run_dir)
    except (RunError, OSError, *user_error_types()) as e:
        print_error(e)
        return 2
    Console(emoji=False).print(str(path), highlight=False, markup=False, soft_wrap=True)
    return 0
