"""``promptevo report RUN``: (re)write a run's report (:mod:`promptevo.reporting.report`,
:mod:`promptevo.reporting.html`)."""

from __future__ import annotations

from collections.abc import Sequence

from promptevo.cli.errors import print_error, user_error_types
from promptevo.cli.parsing import CommandParser
from promptevo.optim.state import CHECKPOINT, RunError, resolve_run_dir
from promptevo.reporting.html import write_html
from promptevo.reporting.report import rebuild_report


def build_parser() -> CommandParser:
    p = CommandParser(prog="promptevo report",
                      description="(Re)write results/<run>/report.html (a static HTML report of a run) and, for a "
                      "finished run, report.json and report.md from its checkpoint.")
    p.add_argument("run", help="run folder, or a run name under --results-dir")
    p.add_argument("--results-dir", default="results", help="where run folders are (default results)")
    return p


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo report RUN [--results-dir DIR]``; returns the exit code."""
    from rich.console import Console

    try:
        ns = build_parser().parse_args(list(args))
        run_dir = resolve_run_dir(ns.run, ns.results_dir)
        if (run_dir / CHECKPOINT).is_file():
            rebuild_report(run_dir)
        path = write_html(run_dir)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except (RunError, OSError, *user_error_types()) as e:
        print_error(e)
        return 2
    Console(emoji=False).print(str(path), highlight=False, markup=False, soft_wrap=True)
    return 0
