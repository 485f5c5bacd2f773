"""The errors a user can cause: each is printed as one line with exit code 2, never a traceback."""

from __future__ import annotations

from promptevo.errors import PromptevoError


class UserError(PromptevoError):
    """A problem with the user's input; printed as one line, exit code 2."""


class UsageError(UserError):
    """An unknown option, a missing argument, a value of the wrong type or a bad name on the command line."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception types that mean bad input: every :class:`~promptevo.errors.PromptevoError` (unknown task or
    agent, bad file, bad model configuration, a run that cannot start...) and a missing file."""
    return (PromptevoError, FileNotFoundError)


def print_error(message: object) -> None:
    """One red line on stderr: the whole message with its whitespace folded."""
    from rich.console import Console
    from rich.markup import escape

    from promptevo.safetext import strip_control

    line = " ".join(strip_control(str(message)).split()) or "error"
    Console(stderr=True, emoji=False).print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
