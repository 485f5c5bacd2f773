"""The argument parser of the commands with many options (``optimize``, ``curriculum``, ``compare``,
``export``, ``report``): a usage error is one line naming the option, exit code 2, like every other user
error, instead of argparse's usage block."""

from __future__ import annotations

import argparse
from typing import NoReturn

from promptevo.cli.errors import UserError


class UsageError(UserError):
    """An unknown option, a missing argument or a value of the wrong type on the command line."""


class CommandParser(argparse.ArgumentParser):
    """``argparse`` with one-line usage errors (raised as :class:`UsageError`); ``--help`` is unchanged."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")
