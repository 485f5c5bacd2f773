"""BALROG's single-call baselines: ``naive`` (the reply is the action) and ``robust-cot`` (reason, then
``<|ACTION|>action<|END|>``).

Message layout (after BALROG's agents; independent code): the instruction message first, then the last
``history`` observations (the newest labelled as current) interleaved with the agent's earlier actions,
then the per-turn ``format`` text appended to the newest observation. Robust-cot parses the FIRST
action block; no block or no valid action -> :data:`~promptevo.agents.actions.FALLBACK_ACTION`. The
reasoning is not kept in the history; only the extracted action is.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import deque
from typing import TYPE_CHECKING, Literal

from promptevo.agents.actions import (
    parse_plain_action,
    parse_tagged_action,
    plain_action_grammar,
)
from promptevo.agents.base import Agent, AgentError, Decision, answer_grammar, render_module
from promptevo.envs.base import TextEnv
from promptevo.segments import PromptSet

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.llm.gateway import Gateway


class HistoryAgent(Agent):
    """Shared BALROG-style history layout for the naive and robust-cot agents."""

    def __init__(
        self,
        gateway: "Gateway",
        prompts: PromptSet,
        *,
        history: int = 16,
        instruction_role: Literal["user", "system"] = "user",
        constrained: bool | None = None,
        think_chars: int | None = None,
    ):
        super().__init__(gateway, prompts, constrained=constrained, think_chars=think_chars)
        if history < 1:
            raise AgentError(f"history must be >= 1 (got {history})")
        if instruction_role not in ("user", "system"):
            raise AgentError(f"instruction_role must be 'user' or 'system' (got {instruction_role!r})")
        prompts.module("system")  # fail early if the module is missing
        self.history = history
        self.instruction_role = instruction_role
        # events: ("obs", text) | ("act", text); history observations + history actions
        self._events: deque[tuple[str, str]] = deque(maxlen=2 * history)
        self._last_action: str | None = None
        self._instructions = ""
        self._format = ""

    def reset(self, env: TextEnv, mission: str, seed: int | None = None) -> None:
        super().reset(env, mission, seed)
        self._events.clear()
        self._last_action = None
        self._instructions, self._format = render_module(
            self.prompts.module("system"), mission=mission, env=env, split_format=True
        )

    def build_messages(self, observation: str) -> list[dict]:
        """Record the previous action and ``observation``, then lay out the messages for this step."""
        if self._last_action:
            self._events.append(("act", self._last_action))
        self._events.append(("obs", observation))
        # keep at most `history` observations (blank replies leave no action between two of them)
        kept: list[tuple[str, str]] = []
        n_obs = 0
        for kind, text in reversed(self._events):
            if kind == "obs":
                if n_obs == self.history:
                    break
                n_obs += 1
            kept.append((kind, text))
        kept.reverse()
        msgs: list[dict] = [{"role": self.instruction_role, "content": self._instructions}]
        for i, (kind, text) in enumerate(kept):
            if kind == "act":
                msgs.append({"role": "assistant", "content": text})
            else:
                label = "Current Observation:\n" if i == len(kept) - 1 else "Observation:\n"
                msgs.append({"role": "user", "content": label + text})
        if self._format:
            msgs[-1] = {"role": "user", "content": msgs[-1]["content"] + "\n\n" + self._format}
        return msgs

    def memory_key(self) -> object | None:
        return (tuple(self._events), self._last_action)

    @abstractmethod
    def _parse(self, reply: str) -> tuple[str, bool]: ...

    @abstractmethod
    def _grammar(self, observation: str) -> str: ...

    def act(self, observation: str, info: dict) -> Decision:
        messages = self.build_messages(observation)
        c, rec = self._complete("system", messages, self._grammar(observation))
        action, parsed = self._parse(c.text)
        # BALROG keeps the parsed action string (not the executed default) and skips empty replies.
        self._last_action = action if c.text.strip() else None
        return Decision(action=action, reply=c.text, calls=[rec], parsed=parsed)


class NaiveAgent(HistoryAgent):
    name = "naive"

    def _parse(self, reply: str) -> tuple[str, bool]:
        return parse_plain_action(reply, self.space)

    def _grammar(self, observation: str) -> str:
        return plain_action_grammar(self.space)


class RobustCoTAgent(HistoryAgent):
    name = "robust-cot"

    def _parse(self, reply: str) -> tuple[str, bool]:
        return parse_tagged_action(reply, self.space)

    def _grammar(self, observation: str) -> str:
        return answer_grammar(self.prompts.module("system"), self.space, self.think_chars, self.mission, observation)
