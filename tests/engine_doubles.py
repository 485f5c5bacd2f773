"""Test doubles for the optimization loop (named as such; they test mechanics, never report results).

* ``ScriptedPickupEnv``: a tiny text env. The ball is in front of the player on seeds divisible by 4,
  else to its left; "pick up" only works when facing the ball.
* The agent LLM is ``fake/agent`` (ScriptedLLM): the real two-stage agent plays; its actor reply turns
  toward the ball first ONLY if the actor prompt contains the rule "face the object before pick up",
  otherwise it always answers "pick up". So the rule lifts success from 25% to 100%.
* The optimizer LLM is ``fake/optimizer`` (ScriptedLLM): the analyzer returns a fixed diagnosis; the
  mutator proposes adding the rule while it is absent (plus a harmless rewording), and deleting it
  once it is present.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from promptevo.envs.base import StepResult, TextEnv
from promptevo.evaluation.rollout import run_episodes
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.optim.config import OptimizeConfig
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import SeedRange, TaskConfig

RULE = "Always face the object before pick up."


class ScriptedPickupEnv(TextEnv):
    """Test double env: pick up the ball; it is in front on seeds % 4 == 0, else to the left."""

    family = "test"
    ACTIONS = ["turn left", "turn right", "go forward", "pick up"]

    def __init__(self, task: Any = None):
        self._front = False
        self._done = False
        self._t = 0

    @property
    def valid_actions(self) -> list[str]:
        return list(self.ACTIONS)

    @property
    def default_action(self) -> str:
        return "turn right"

    @property
    def max_steps(self) -> int:
        return 5

    @property
    def mission(self) -> str:
        return "pick up the ball"

    @property
    def progression(self) -> float:
        return 1.0 if self._done else 0.0

    def _obs(self) -> str:
        return "the ball is right in front of you" if self._front else "the ball is 1 step to your left"

    def reset(self, seed: int):
        self._front, self._done, self._t = seed % 4 == 0, False, 0
        return self._obs(), {"mission": self.mission}

    def step(self, action: str) -> StepResult:
        self._t += 1
        valid = action in self.ACTIONS
        executed = action if valid else self.default_action
        reward = 0.0
        if executed == "turn left":
            self._front = not self._front
        elif executed == "pick up" and self._front:
            self._done = True
            reward = 1.0 - 0.9 * self._t / self.max_steps
        return StepResult(self._obs(), reward, self._done, False,
                          {"valid_action": valid, "executed_action": executed, "progression": self.progression})

    def instructions(self) -> str:
        return "Actions: " + ", ".join(self.ACTIONS)


def initial_prompts() -> PromptSet:
    return PromptSet.of(
        {
            "descriptor": Prompt((Segment("role", "Describe where the ball is."),)),
            "actor": Prompt(
                (
                    Segment("role", "You choose the next action for {mission}."),
                    Segment("rules", "Move toward the ball."),
                    Segment("output_format", "Answer as <|ACTION|>action<|END|>."),
                )
            ),
        }
    )


def agent_reply(messages: list[dict]) -> str:
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    user = messages[-1]["content"]
    if system.startswith("Describe"):  # descriptor: echo the observation
        return user.split("Observation:\n", 1)[-1]
    if "face the object before pick up" in system.lower() and "to your left" in user:
        return "The ball is left. <|ACTION|>turn left<|END|>"
    return "<|ACTION|>pick up<|END|>"  # actor without the rule, and the robust-cot baseline


ANALYSIS_REPLY = {
    "attributions": [{"module": "actor", "segment": "rules", "effect": "missing",
                      "evidence": [{"seed": 1, "step": 0, "note": "picked up while the ball was to the left"}],
                      "explanation": "nothing says to face the ball first"}],
    "failure_modes": ["pick up while not facing the ball"],
    "proposals": [{"module": "actor", "segment": "rules", "op": "rewrite", "idea": "face the object first"}],
}


def mutator_reply(messages: list[dict]) -> str:
    user = messages[-1]["content"]
    if RULE in user:  # the parent already has the rule: propose removing it (must be rejected)
        edits = [{"module": "actor", "op": "delete", "segment": "rules", "rationale": "the rules look redundant"}]
    else:
        edits = [
            {"module": "actor", "op": "rewrite", "segment": "rules", "text": "Move toward the ball. " + RULE,
             "rationale": "episodes fail by picking up while the ball is to the left"},
            {"module": "actor", "op": "rewrite", "segment": "role", "text": "You pick the next action for {mission}.",
             "rationale": "clearer wording (no behavioural change)"},
        ]
    return "```json\n" + json.dumps({"edits": edits}) + "\n```"


def optimizer_reply(messages: list[dict]) -> str:
    if '"edits"' in messages[0]["content"]:
        return mutator_reply(messages)
    return json.dumps(ANALYSIS_REPLY)


def responder(messages: list[dict], params: dict) -> str:
    if params.get("model") == "fake/optimizer":
        return optimizer_reply(messages)
    return agent_reply(messages)


def make_task(**kw: Any) -> TaskConfig:
    base = dict(name="scripted-pickup", family="babyai", env={"goal": "pickup"},
                train_seeds=SeedRange(start=0, count=200), validation_seeds=SeedRange(start=1000, count=100),
                test_seeds=SeedRange(start=2000, count=100))
    base.update(kw)
    return TaskConfig(**base)


class CountingRunner:
    """Real run_episodes on the test-double env; records every (prompt fingerprint, seed) played, and can
    interrupt (KeyboardInterrupt) after ``interrupt_after`` episodes of the candidate ``interrupt_on``."""

    def __init__(self, interrupt_on: str | None = None, interrupt_after: int = 0, env: type = None):
        self.played: list[tuple[str, int]] = []
        self.interrupt_on = interrupt_on
        self.interrupt_after = interrupt_after
        self.env = env or ScriptedPickupEnv

    def env_factory(self, task: Any) -> TextEnv:
        return self.env(task)

    def __call__(self, task, agent_factory, seeds, *, concurrency=4, on_result=None, **kw):
        fp = agent_factory().prompts.fingerprint()
        seeds = list(seeds)

        def record(r):
            self.played.append((fp, r.seed))
            if on_result is not None:
                on_result(r)

        if self.interrupt_on is not None and fp == self.interrupt_on:
            self.interrupt_on = None
            part = run_episodes(task, agent_factory, seeds[: self.interrupt_after], concurrency=concurrency,
                                on_result=record, env_factory=self.env)
            assert len(part) == self.interrupt_after
            raise KeyboardInterrupt("simulated crash in the middle of an evaluation")
        return run_episodes(task, agent_factory, seeds, concurrency=concurrency, on_result=record,
                            env_factory=self.env)


def gateways(cache_dir: str | None = None) -> tuple[Gateway, Gateway]:
    return (Gateway(LLMConfig(model="fake/agent", cache_dir=cache_dir, num_retries=0)),
            Gateway(LLMConfig(model="fake/optimizer", cache_dir=cache_dir, num_retries=0, max_tokens=2048)))


def config(tmp_path: Path, **kw: Any) -> OptimizeConfig:
    base = dict(task="scripted-pickup", agent="two-stage", generations=2, episodes=8, validation_episodes=16,
                test_episodes=12, children=2, concurrency=4, results_dir=str(tmp_path), run="run1",
                operators=["mutate"])
    base.update(kw)
    return OptimizeConfig(**base)


def run(cfg: OptimizeConfig, runner: CountingRunner | None = None, *, responder_fn=None, task: TaskConfig | None = None,
        **kw: Any):
    """One optimize() call with the doubles; quiet unless ``listeners`` is given."""
    import promptevo

    agw, ogw = gateways()
    kw.setdefault("quiet", True)
    kw.setdefault("initial_prompts", initial_prompts())
    with ScriptedLLM.install(responder_fn or responder):
        return promptevo.optimize(cfg, agent_gateway=agw, optimizer_gateway=ogw, task=task or make_task(),
                                  runner=runner or CountingRunner(), **kw)


def fp_of(res, cid: str) -> str:
    return next(c.fingerprint for c in res.candidates if c.id == cid)


def crashed_run(tmp_path: Path) -> tuple[Any, CountingRunner, str]:
    """(reference run, runner, c1's fingerprint): an uninterrupted run ``ref`` and the same run ``crash``
    interrupted (KeyboardInterrupt) after c1's first episode, its checkpoint left for a resume."""
    ref = run(config(tmp_path, run="ref"), CountingRunner())
    target = fp_of(ref, "c1")
    runner = CountingRunner(interrupt_on=target, interrupt_after=1)
    try:
        run(config(tmp_path, run="crash"), runner)
    except KeyboardInterrupt:
        return ref, runner, target
    raise AssertionError("the run was not interrupted")
