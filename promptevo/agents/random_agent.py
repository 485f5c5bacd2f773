"""The random agent: a uniformly random valid action each step, seeded per episode; the floor."""

from __future__ import annotations

import random
from typing import Any

from promptevo.agents.base import Agent, Decision
from promptevo.envs.base import TextEnv
from promptevo.segments import PromptSet


class RandomAgent(Agent):
    """Uniformly random valid actions; deterministic given (seed, episode seed)."""

    name = "random"

    def __init__(self, gateway: Any = None, prompts: PromptSet | None = None, *, seed: int = 0, **_: Any):
        super().__init__(gateway, prompts or PromptSet(), constrained=False)
        self.seed = seed
        self._rng = random.Random(seed)

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        super().reset(env, mission, seed)
        self._rng = random.Random(f"{self.seed}:{seed}")

    def act(self, observation: str, info: dict) -> Decision:
        action = self.space.sample(self._rng)
        return Decision(action=action, reply=action, calls=[], parsed=True)
