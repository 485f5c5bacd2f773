"""The one base class of the errors a user can cause or fix (bad input, a missing file or model, a run that
cannot start or continue). ``str(e)`` is one line meant for the user; the command line prints it and exits
with code 2 (3 for a run stopped by an LLM outage), never a traceback. Internal failures (bugs, an expert
that cannot plan a state, an LLM call that failed after its retries) are not PromptevoErrors.
"""

from __future__ import annotations


class PromptevoError(Exception):
    """A problem the user can fix; ``str(e)`` is one line."""


__all__ = ["PromptevoError"]
