"""``promptevo export RUN``: the command line of :func:`promptevo.reporting.export.export_run`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from promptevo.cli.errors import UserError, print_error, user_error_types
from promptevo.cli.parsing import CommandParser
from promptevo.optim.state import RunError, resolve_run_dir
from promptevo.reporting.export import export_run


def build_parser() -> CommandParser:
    p = CommandParser(prog="promptevo export",
                      description="Write a run's best prompts (md + json), agent.json and LINEAGE.md.")
    p.add_argument("run", help="run folder, or a run name under --results-dir")
    p.add_argument("--out", "-o", help="output folder (default <run>/export); an existing folder that is not an "
                   "export needs --force")
    p.add_argument("--force", action="store_true", help="write into an existing --out folder")
    p.add_argument("--results-dir", default="results", help="where run folders are (default results)")
    return p


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo export RUN [--out DIR]``; returns the exit code."""
    from rich.console import Console

    try:
        ns = build_parser().parse_args(list(args))
        if ns.out and not ns.force and Path(ns.out).exists() and (not Path(ns.out).is_dir() or any(Path(ns.out).iterdir())):
            raise UserError(f"--out: {ns.out} exists and is not empty; its files would be overwritten (give --force "
                            "to write there anyway, or choose another folder)")
        paths = export_run(resolve_run_dir(ns.run, ns.results_dir), ns.out)
    except SystemExit as e:  # --help
        return int(e.code or 0)
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
