"""Names a user types that become paths: a run name is one folder inside --results-dir."""

from __future__ import annotations

import re

from promptevo.cli.errors import UsageError


def check_run_name(name: str, flag: str = "--run") -> str:
    """A run name is one folder name inside --results-dir (letters, digits, ``.``, ``_``, ``-``; not ``.``
    or ``..``): anything else is one line naming the flag, so a run never writes outside --results-dir."""
    text = str(name)
    if text in (".", "..") or not re.fullmatch(r"[A-Za-z0-9._-]{1,120}", text):
        raise UsageError(f"{flag}: {text!r} is not a run name: a run is one folder name inside --results-dir "
                         "(letters, digits, '.', '_', '-'); choose where runs go with --results-dir")
    return text
