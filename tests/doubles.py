"""Test doubles shared by several test files (named as such; never used for reported results)."""

from __future__ import annotations

from typing import Any

from promptevo.envs.base import StepResult, TextEnv


class FakeSeedEnv(TextEnv):
    """Test double: obs 'seed S step T'; action 'win' succeeds (reward 1), 'wait' does nothing."""

    family = "fake"

    def __init__(self, max_steps: int = 6):
        self._max, self.seed, self.t, self._prog = max_steps, 0, 0, 0.0

    valid_actions = property(lambda self: ["wait", "win"])  # type: ignore[assignment]
    default_action = property(lambda self: "wait")  # type: ignore[assignment]
    max_steps = property(lambda self: self._max)  # type: ignore[assignment]
    mission = property(lambda self: f"win game {self.seed}")  # type: ignore[assignment]
    progression = property(lambda self: self._prog)  # type: ignore[assignment]

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self.seed, self.t, self._prog = seed, 0, 0.0
        return f"seed {seed} step 0", {"mission": self.mission}

    def step(self, action: str) -> StepResult:
        self.t += 1
        valid = action in self.valid_actions
        won = action == "win"
        self._prog = 1.0 if won else self._prog
        return StepResult(f"seed {self.seed} step {self.t}", 1.0 if won else 0.0, won, self.t >= self._max,
                          {"valid_action": valid, "executed_action": action if valid else "wait"})

    def instructions(self) -> str:
        return "rules"

    def episode_stats(self) -> dict[str, Any]:
        return {"t": self.t}
