"""A program that follows an induced rule exactly (the *perfect follower*), and what it scores.

Separates a rule from its execution: :func:`play` plays a :class:`~promptevo.optim.propose.induce.RuleTable`
(plus an :class:`Explorer` for states where no line names the mission's things) in fresh envs, reading the
same text features the agent is asked to write (:mod:`promptevo.optim.reflect.features`), with no LLM. Its
success rate is the rule's *ceiling*: what an agent that executes the rule without error would score.

:func:`choose_explorer` picks the "no line" rule among candidates (each valid action as a constant, and
"A up to k times in a row, then B" for the best constants) by simulating each on training seeds; the
simplest within :data:`EXPLORER_TOLERANCE` of the best wins. An explorer that loops scores 0 and is never
chosen over one that solves episodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from promptevo.optim.reflect.expert import LabelledState
from promptevo.optim.reflect.features import Vocabulary, defined, state_features

#: an explorer within this share of the best candidate's success is preferred when simpler
EXPLORER_TOLERANCE = 0.02
#: turns in a row the "A up to k times, then B" explorers try
EXPLORER_TURNS = (1, 2, 3)


class Table(Protocol):
    def predict(self, feats: dict[str, str]) -> str | None: ...


#: what a table reads from a state: ``(observation, mission, vocabulary) -> features``
Featurizer = Callable[[str, str, Vocabulary], dict[str, str]]


def featurizer(table: Any) -> Featurizer:
    """The table's own feature function (a phase-rooted table reads phase features), else
    :func:`~promptevo.optim.reflect.features.state_features`."""
    return getattr(table, "featurize", None) or state_features


@dataclass(frozen=True)
class Explorer:
    """What to do where no line names the mission's things: ``action``; with ``turns`` > 0, after
    ``turns`` such steps in a row, ``then`` once (and the count starts again); with ``at`` (a near
    position of :mod:`promptevo.optim.reflect.phases`), ``then`` whenever some line is at ``at``."""

    action: str
    turns: int = 0
    then: str | None = None
    at: str | None = None

    def decide(self, streak: int, feats: dict[str, str] | None = None) -> str:
        if self.at and self.then:
            return self.then if (feats or {}).get(f"at:{self.at}", "-") != "-" else self.action
        if self.turns and self.then and streak >= self.turns:
            return self.then
        return self.action

    @property
    def complexity(self) -> int:
        return 1 if not (self.turns or self.at) else 2

    def to_dict(self) -> dict:
        d = {"action": self.action, "turns": self.turns, "then": self.then}
        if self.at:
            d["at"] = self.at
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> "Explorer | None":
        if not d or not d.get("action"):
            return None
        return cls(str(d["action"]), int(d.get("turns") or 0), d.get("then"), d.get("at"))

    def describe(self) -> str:
        if self.at:
            return f"{self.action}; when something is {self.at}, {self.then}"
        if not self.turns:
            return self.action
        return f"{self.action} up to {self.turns} times in a row, then {self.then}"


def decide(table: Table, explorer: Explorer | None, observation: str, mission: str, vocab: Vocabulary,
           streak: int) -> tuple[str | None, bool]:
    """(the rule's action in this state, whether the explorer decided it)."""
    feats = featurizer(table)(observation, mission, vocab)
    if defined(feats) or explorer is None:
        return table.predict(feats), False
    return explorer.decide(streak, feats), True


def play_episode(env: Any, seed: int, table: Table, explorer: Explorer | None, vocab: Vocabulary,
                 max_steps: int | None = None, *, label: bool = False) -> dict:
    """One episode of the follower: ``{seed, success, steps, explored}`` (``explored``: steps the explorer
    decided); with ``label``, also ``states``: every state it met with the expert's action there (a state
    the expert cannot plan is left out)."""
    obs, info = env.reset(int(seed))
    mission = str(info.get("mission") or env.mission)
    limit = env.max_steps if max_steps is None else min(env.max_steps, max_steps)
    streak = explored = 0
    success = False
    t = 0
    states: list[LabelledState] = []
    unlabelled: list[str] = []
    for t in range(1, limit + 1):
        action, by_explorer = decide(table, explorer, obs, mission, vocab, streak)
        if label:
            try:
                expert = env.expert_action()
            except Exception as e:  # noqa: BLE001 - an expert that cannot plan this state labels nothing
                expert = None
                unlabelled.append(f"S{seed}.{t - 1}: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
            if isinstance(expert, str) and expert:
                states.append(LabelledState(int(seed), t - 1, mission, obs, expert, agent=action))
        if by_explorer:
            explored += 1
            streak = 0 if (explorer and explorer.turns and streak >= explorer.turns) else streak + 1
        else:
            streak = 0
        step = env.step(action or env.default_action)
        obs = step.observation
        if step.done:
            success = bool(step.info.get("success", step.reward > 0)) if step.terminated else False
            break
    out = {"seed": int(seed), "success": success, "steps": t, "explored": explored}
    if label:
        out["states"] = states
        out["unlabelled"] = unlabelled
    return out


def play(task: Any, table: Table, explorer: Explorer | None, vocab: Vocabulary, seeds: Sequence[int], *,
         env_factory: Callable[[Any], Any], label: bool = False) -> list[dict]:
    """The follower on ``seeds`` (one fresh env each); ``label``: see :func:`play_episode`."""
    out = []
    for s in seeds:
        env = env_factory(task)
        try:
            out.append(play_episode(env, int(s), table, explorer, vocab, getattr(task, "max_steps", None),
                                    label=label))
        finally:
            env.close()
    return out


def success_rate(rows: Sequence[dict]) -> float:
    return sum(bool(r["success"]) for r in rows) / len(rows) if rows else 0.0


def candidates(actions: Sequence[str], best: Sequence[str], near: Sequence[str] = (), *,
               stateless: bool = False) -> list[Explorer]:
    """Constant explorers for every action, then "A up to k times, then B" for ordered pairs of ``best``
    (not with ``stateless``: they count steps, which an agent that sees only this step cannot), and "A; when
    something is at p, B" for each near position ``p``."""
    out = [Explorer(a) for a in actions]
    for a in best:
        for b in best:
            if a != b:
                out += [] if stateless else [Explorer(a, k, b) for k in EXPLORER_TURNS]
                out += [Explorer(a, 0, b, p) for p in near]
    return out


def choose_explorer(task: Any, table: Table, vocab: Vocabulary, actions: Sequence[str], seeds: Sequence[int], *,
                    env_factory: Callable[[Any], Any], tolerance: float = EXPLORER_TOLERANCE,
                    best: int = 2, stateless: bool = False) -> tuple[Explorer, list[dict]]:
    """The "no line" rule chosen by simulation on ``seeds``: every constant first, then two-step explorers
    built from the ``best`` best constants (and, for a table with near positions, "A; when something is
    at p, B"); returns (the simplest within ``tolerance`` of the best, every candidate's score)."""
    scores: list[tuple[float, Explorer]] = []
    for e in candidates(actions, []):
        scores.append((success_rate(play(task, table, e, vocab, seeds, env_factory=env_factory)), e))
    top_k = [e.action for _, e in sorted(scores, key=lambda x: -x[0])[:best]]
    for e in candidates([], top_k, tuple(getattr(table, "near", ())), stateless=stateless):
        scores.append((success_rate(play(task, table, e, vocab, seeds, env_factory=env_factory)), e))
    top = max(s for s, _ in scores)
    chosen = min((x for x in scores if x[0] >= top - tolerance), key=lambda x: (x[1].complexity, -x[0]))[1]
    return chosen, [{"explorer": e.describe(), "success": round(s, 4), "n": len(seeds)} for s, e in scores]





@dataclass
class Refined:
    """What :func:`refine` ends with: the table, its vocabulary and explorer, the follower's training
    success per round, the number of states fitted, and one line when the expert could not label some of
    the states the follower met (those states are left out; the rest is used)."""

    table: Any
    vocab: Vocabulary
    explorer: Explorer
    explorer_scores: list[dict]
    rounds: list[dict]
    states: int
    problem: str | None = None


def refine(task: Any, fit: Callable[[Sequence[LabelledState]], tuple[Any, Vocabulary]],
           states: Sequence[LabelledState], actions: Sequence[str], seeds: Sequence[int], *,
           env_factory: Callable[[Any], Any], rounds: int = 2, best: int = 3, stateless: bool = False,
           start: tuple[Any, Vocabulary] | None = None) -> Refined:
    """Fit a table to ``states``, then ``rounds`` times: choose its explorer on ``seeds``, let the
    follower play them with the expert labelling every state it meets, and fit again on all states so
    far (dataset aggregation: the table learns the states its own mistakes lead to, which the expert's
    episodes never show). Stops early once the follower solves every seed; the last fit's explorer is
    chosen again at the end. ``fit(states) -> (table, vocabulary)``; ``start``: ``fit(states)`` when the
    caller has it already."""
    pool = list(states)
    log: list[dict] = []
    missed: list[str] = []
    table, vocab = start if start is not None else fit(pool)
    for r in range(rounds):
        explorer, _ = choose_explorer(task, table, vocab, actions, seeds, env_factory=env_factory, best=best,
                                   stateless=stateless)
        rows = play(task, table, explorer, vocab, seeds, env_factory=env_factory, label=True)
        log.append({"round": r, "states": len(pool), "success": round(success_rate(rows), 4), "n": len(rows)})
        if all(x["success"] for x in rows):
            break
        pool += [s for x in rows for s in x["states"]]
        missed += [m for x in rows for m in x["unlabelled"]]
        table, vocab = fit(pool)
    explorer, scores = choose_explorer(task, table, vocab, actions, seeds, env_factory=env_factory, best=best,
                                   stateless=stateless)
    problem = (f"the expert could not label {len(missed)} state(s) the follower met (first: {missed[0]}); they are "
               "left out" if missed else None)
    return Refined(table, vocab, explorer, scores, log, len(pool), problem)


__all__ = ["EXPLORER_TOLERANCE", "Explorer", "Featurizer", "Refined", "candidates", "choose_explorer", "decide", "featurizer",
           "play", "play_episode", "refine",
           "success_rate"]
