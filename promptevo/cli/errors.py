"""The errors a user can cause: each is printed as one line with exit code 2, never a traceback."""

from __future__ import annotations

from promptevo.errors import PromptevoError


class UserError(PromptevoError):
    """A problem with the user's input; printed as one line, exit code 2."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Exception types that mean bad input: every :class:`~promptevo.errors.PromptevoError` (unknown task or
    agent, bad file, bad model configuration, a run that cannot start...) and a missing file."""
    return (PromptevoError, FileNotFoundError)
