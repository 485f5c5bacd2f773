"""Text environments. Every env implements :class:`promptevo.envs.base.TextEnv`."""

from promptevo.envs.base import StepResult, TextEnv

__all__ = ["StepResult", "TextEnv"]
