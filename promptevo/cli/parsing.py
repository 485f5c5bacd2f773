"""The argument parser of the commands with many options (``optimize``, ``curriculum``, ``compare``,
``export``, ``report``): a usage error is one line naming the option, exit code 2, like every other user
error, instead of argparse's usage block."""

from __future__ import annotations

import argparse
import difflib
import re
from typing import NoReturn

from promptevo.cli.errors import UserError


class UsageError(UserError):
    """An unknown option, a missing argument or a value of the wrong type on the command line."""


class CommandParser(argparse.ArgumentParser):
    """``argparse`` with one-line usage errors (raised as :class:`UsageError`); ``--help`` is unchanged."""

    def __init__(self, *args, **kwargs) -> None:
        self.option_names: list[str] = []  # every --flag, for "did you mean" (argparse keeps its own private)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **kwargs):
        self.option_names += [n for n in names if isinstance(n, str) and n.startswith("--")]
        return super().add_argument(*names, **kwargs)

    def add_argument_group(self, *args, **kwargs):
        """A help section whose options count for "did you mean" like the parser's own."""
        group = super().add_argument_group(*args, **kwargs)
        add = group.add_argument

        def recorded(*names, **kw):
            self.option_names += [n for n in names if isinstance(n, str) and n.startswith("--")]
            return add(*names, **kw)

        group.add_argument = recorded  # type: ignore[method-assign]
        return group

    def closest(self, flag: str) -> str | None:
        """The valid flag nearest to ``flag`` (``--no-live`` -> ``--live``), or None."""
        name = flag.split("=", 1)[0]
        found = difflib.get_close_matches(name, self.option_names, n=1, cutoff=0.6)
        return found[0] if found else None

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            hints = [f"{a} -> {c}" for a in message.split(":", 1)[1].split() if a.startswith("--")
                     and (c := self.closest(a))]
            if hints:
                message += f" (closest valid: {', '.join(hints)})"
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def check_run_name(name: str, flag: str = "--run") -> str:
    """A run name is one folder name inside --results-dir (letters, digits, ``.``, ``_``, ``-``; not ``.``
    or ``..``): anything else is one line naming the flag, so a run never writes outside --results-dir."""
    text = str(name)
    if text in (".", "..") or not re.fullmatch(r"[A-Za-z0-9._-]{1,120}", text):
        raise UsageError(f"{flag}: {text!r} is not a run name: a run is one folder name inside --results-dir "
                         "(letters, digits, '.', '_', '-'); choose where runs go with --results-dir")
    return text
