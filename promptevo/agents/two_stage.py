"""promptevo's two-stage agent: a goal-conditioned descriptor call, then an actor call (RAPOA's split of
perception and action).

The descriptor turns mission + recent actions + observation into a focused description; the actor turns
mission + recent actions + description into ``<|ACTION|>action<|END|>``. Both modules' prompts are
optimized.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from promptevo.agents.actions import parse_tagged_action
from promptevo.agents.base import Agent, Decision, answer_grammar, render_module
from promptevo.envs.base import TextEnv
from promptevo.segments import PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.llm.gateway import Gateway


class TwoStageAgent(Agent):
    """Descriptor (perception) call, then actor (decision) call; prompts ``descriptor`` and ``actor``.

    Descriptor user message: ``Mission``, ``Recent actions`` (oldest first, at most ``recent_actions``),
    then the raw observation. Actor user message: ``Mission``, ``Recent actions``, then the description.
    If the descriptor returns nothing, the raw observation is used as the description.
    """

    name = "two-stage"

    def __init__(
        self,
        gateway: "Gateway",
        prompts: PromptSet,
        *,
        recent_actions: int = 4,
        constrained: bool | None = None,
        think_chars: int | None = None,
    ):
        super().__init__(gateway, prompts, constrained=constrained, think_chars=think_chars)
        prompts.module("descriptor"), prompts.module("actor")  # fail early
        self.recent_actions = recent_actions
        self._recent: deque[str] = deque(maxlen=max(recent_actions, 1))
        self._sys_descriptor = ""
        self._sys_actor = ""

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        super().reset(env, mission, seed)
        self._recent.clear()
        self._sys_descriptor, _ = render_module(
            self.prompts.module("descriptor"), mission=mission, env=env, split_format=False
        )
        self._sys_actor, _ = render_module(self.prompts.module("actor"), mission=mission, env=env, split_format=False)

    def memory_key(self) -> object | None:
        return tuple(self._recent)

    def _recent_text(self) -> str:
        if self.recent_actions <= 0 or not self._recent:
            return "Recent actions: none yet"
        return "Recent actions (oldest first): " + ", ".join(self._recent)

    def act(self, observation: str, info: dict) -> Decision:
        head = f"Mission: {self.mission}\n{self._recent_text()}"
        d_msgs = [
            {"role": "system", "content": self._sys_descriptor},
            {"role": "user", "content": f"{head}\n\nObservation:\n{observation}"},
        ]
        d, d_rec = self._complete("descriptor", d_msgs, None)
        description = d.text.strip() or observation
        a_msgs = [
            {"role": "system", "content": self._sys_actor},
            {"role": "user", "content": f"{head}\n\nDescription:\n{description}"},
        ]
        grammar = answer_grammar(self.prompts.module("actor"), self.space, self.think_chars, self.mission, observation)
        a, a_rec = self._complete("actor", a_msgs, grammar)
        action, parsed = parse_tagged_action(a.text, self.space)
        self._recent.append(action if parsed else "(invalid reply)")
        return Decision(action=action, reply=a.text, calls=[d_rec, a_rec], parsed=parsed, description=description)
