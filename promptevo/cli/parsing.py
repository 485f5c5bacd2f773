"""The argument parser of the commands with many options (``optimize``, ``curriculum``, ``compare``,
``export``, ``report``): a usage error is one line naming the option, exit code 2, like every other user
error, instead of argparse's usage block."""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

from promptevo.cli.errors import UserError


class UsageError(UserError):
    """An unknown option, a missing argument or a value of the wrong type on the command line."""


class CommandParser(argparse.ArgumentParser):
    """``argparse`` with one-line usage errors (raised as :class:`UsageError`); ``--help`` is unchanged."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def check_run_name(name: str, flag: str = "--run") -> str:
    """A run name is one folder name inside --results-dir (letters, digits, ``.``, ``_``, ``-``; not ``.``
    or ``..``): anything else is one line naming the flag, so a run never writes outside --results-dir."""
    text = str(name)
    if text in (".", "..") or not re.fullmatch(r"[A-Za-z0-9._-]{1,120}", text):
        raise UsageError(f"{flag}: {text!r} is not a run name: a run is one folder name inside --results-dir "
                         "(letters, digits, '.', '_', '-'); choose where runs go with --results-dir")
    return text
