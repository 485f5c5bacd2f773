"""Printing tables and JSON so that nothing a user copies is cut, in a terminal or not.

rich lays a table out for the console's width, which is 80 columns when the output is not a terminal (a
log, a pipe, CI), and ends cells that do not fit with an ellipsis. Here:

* every column folds (a long word goes on the next line) instead of ending in ``…``;
* outside a terminal the table is printed at the width its content needs (no folding at all), so task
  names, model strings, install commands, seed ranges and intervals stay on one line, verbatim;
* :func:`print_json` writes one JSON document on stdout and nothing else.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

#: widest table printed outside a terminal (a safety cap, far above any real table)
MAX_WIDTH = 20000


def foldable(table: Table) -> Table:
    """``table`` with every column set to fold long words instead of cutting them."""
    for col in table.columns:
        col.overflow = "fold"
        col.no_wrap = False
    return table


def print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table`` on ``console`` (default stdout) without cutting any cell (see the module docstring)."""
    con = console or Console(emoji=False)
    foldable(table)
    if not con.is_terminal:
        wide = Console(emoji=False, width=MAX_WIDTH, file=con.file, color_system=None, force_terminal=False)
        need = wide.measure(table).maximum
        con = Console(emoji=False, width=max(80, min(MAX_WIDTH, need)), file=con.file, color_system=None, force_terminal=False,
                      soft_wrap=False)
    con.print(table)


def print_json(data: Any) -> None:
    """One JSON document on stdout (indented, UTF-8, a trailing newline)."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


__all__ = ["foldable", "print_json", "print_table"]
