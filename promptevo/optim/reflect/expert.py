"""Expert-grounded evidence: decision states labelled with what the game's expert would do.

Two sources of labelled states, both from training seeds only:

* the parent's own evidence episodes, replayed action by action in a fresh env (the recorded
  observations must come back exactly, else the replay stops there) with the expert asked in every
  state (:meth:`~promptevo.envs.base.TextEnv.expert_action`): where the agent and the expert differ;
* episodes the expert plays itself (no LLM, milliseconds a step): states the agent rarely reaches, so
  that rules induced from them cover more than the agent's habits.

:func:`disagreement_clusters` groups the agent's states where it departs from the expert by
(agent action -> expert action), each with counts, seed.step citations and the observation lines that
name the mission's things (anonymised), which the analyzer, the mutator and the rule writer read.

An env without an expert gives no states and one line saying so; an expert that raises in some state
leaves that state unlabelled (one line per mission, at most a few).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from promptevo.envs.base import ExpertError, has_expert
from promptevo.optim.reflect.features import Vocabulary, anonymise, relevant_lines, vocabulary
from promptevo.tasks import TaskConfig, make_env

log = logging.getLogger(__name__)

#: most problems (expert failures, replay divergences) listed per evidence file
MAX_PROBLEMS = 8


@dataclass
class LabelledState:
    """One decision state with the expert's action (and the agent's, for states the agent played)."""

    seed: int
    t: int
    mission: str
    observation: str
    expert: str
    agent: str | None = None  # None: a state of an expert-played episode
    valid: bool = True  # the agent's answer was a valid action

    @property
    def cite(self) -> str:
        return f"S{self.seed}.{self.t}"

    @property
    def key(self) -> tuple[str, str]:
        return self.mission, self.observation

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LabelledState":
        return cls(**{k: d[k] for k in ("seed", "t", "mission", "observation", "expert")},
                   agent=d.get("agent"), valid=bool(d.get("valid", True)))


class Problems:
    """One line per distinct problem (per mission), capped."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._seen: set[str] = set()

    def add(self, key: str, line: str) -> None:
        if key not in self._seen and len(self.lines) < MAX_PROBLEMS:
            self._seen.add(key)
            self.lines.append(line)


def _ask(env: Any, seed: int, t: int, mission: str, problems: Problems) -> str | None:
    try:
        action = env.expert_action()
    except ExpertError as e:
        problems.add(f"{mission}|{e}", f"expert: no action for S{seed}.{t} ({mission!r}): {e}")
        return None
    except Exception as e:  # noqa: BLE001 - an expert's bug must not stop the run
        problems.add(f"{mission}|{type(e).__name__}", f"expert raised at S{seed}.{t} ({mission!r}): "
                     f"{type(e).__name__}: {str(e)[:160]}")
        return None
    return action if isinstance(action, str) and action else None


def label_episode(task: TaskConfig, episode: dict, problems: Problems, *,
                  env_factory: Callable[[TaskConfig], Any] = make_env) -> list[LabelledState]:
    """The states of a played episode, each with the expert's action, by replaying its actions."""
    seed = int(episode["seed"])
    env = env_factory(task)
    out: list[LabelledState] = []
    try:
        obs, info = env.reset(seed)
        mission = str(info.get("mission") or env.mission)
        for rec in episode.get("trajectory") or []:
            if rec.get("observation") != obs:
                problems.add(f"diverged|{seed}", f"replay of S{seed} diverged at step {rec.get('t')}; its later "
                             "states are not labelled")
                break
            expert = _ask(env, seed, int(rec.get("t", len(out))), mission, problems)
            if expert is not None:
                out.append(LabelledState(seed, int(rec.get("t", 0)), mission, obs, expert,
                                         agent=str(rec.get("executed_action") or rec.get("action") or ""),
                                         valid=bool(rec.get("valid", True))))
            step = env.step(rec.get("action"))
            obs = step.observation
            if step.done:
                break
    finally:
        env.close()
    return out


def expert_episode(task: TaskConfig, seed: int, problems: Problems, *,
                   env_factory: Callable[[TaskConfig], Any] = make_env) -> list[LabelledState]:
    """The states of an episode the expert plays itself (until it ends or the expert cannot go on)."""
    env = env_factory(task)
    out: list[LabelledState] = []
    try:
        obs, info = env.reset(int(seed))
        mission = str(info.get("mission") or env.mission)
        limit = env.max_steps if task.max_steps is None else min(env.max_steps, task.max_steps)
        for t in range(limit):
            expert = _ask(env, seed, t, mission, problems)
            if expert is None:
                break
            out.append(LabelledState(int(seed), t, mission, obs, expert))
            step = env.step(expert)
            obs = step.observation
            if step.done:
                break
    finally:
        env.close()
    return out


def task_has_expert(task: TaskConfig, env_factory: Callable[[TaskConfig], Any] = make_env) -> bool:
    env = env_factory(task)
    try:
        return has_expert(env)
    finally:
        env.close()


def unique(states: Iterable[LabelledState]) -> list[LabelledState]:
    """The first state of each distinct (mission, observation)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for s in states:
        if s.key not in seen:
            seen.add(s.key)
            out.append(s)
    return out


def agreement(states: Sequence[LabelledState]) -> dict[str, Any]:
    """Per agent-played episode and overall: states where the agent's action equals the expert's."""
    per: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for s in states:
        if s.agent is None:
            continue
        per[s.seed][0] += s.agent == s.expert
        per[s.seed][1] += 1
    agree = sum(a for a, _ in per.values())
    total = sum(n for _, n in per.values())
    return {"agree": agree, "states": total, "rate": round(agree / total, 3) if total else None,
            "episodes": {str(k): {"agree": a, "states": n, "rate": round(a / n, 3) if n else None}
                         for k, (a, n) in sorted(per.items())}}


def disagreement_clusters(states: Sequence[LabelledState], vocab: Vocabulary, *, examples: int = 3,
                          cites: int = 6) -> list[dict]:
    """The agent's distinct states where it departs from the expert, grouped by (agent -> expert) action,
    largest first. Each cluster: ``agent``, ``expert``, ``count`` (distinct states), ``episodes``,
    ``with_line`` (states where some line names the mission's things), ``cites`` (seed.step),
    ``patterns`` (the anonymised relevant lines, most common first, with counts) and ``examples``
    (mission and relevant lines of a few states, verbatim)."""
    groups: dict[tuple[str, str], list[LabelledState]] = defaultdict(list)
    for s in unique(x for x in states if x.agent is not None):
        if s.agent != s.expert:
            groups[(str(s.agent), s.expert)].append(s)
    out = []
    for (agent, expert), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        patterns: Counter[str] = Counter()
        with_line = 0
        shown = []
        for s in members:
            lines = relevant_lines(s.observation, s.mission, vocab)
            with_line += bool(lines)
            patterns.update({anonymise(ln, s.mission, vocab) for ln in lines} or {"(no line names the mission's things)"})
            if len(shown) < examples:
                shown.append({"cite": s.cite, "mission": s.mission, "lines": lines or ["(none)"]})
        out.append({"agent": agent, "expert": expert, "count": len(members),
                    "episodes": len({s.seed for s in members}), "with_line": with_line,
                    "cites": [s.cite for s in members[:cites]],
                    "patterns": [[p, c] for p, c in patterns.most_common(6)], "examples": shown})
    return out


def render_clusters(evidence: dict, *, max_clusters: int = 4) -> str:
    """The expert comparison as text for the optimizer LLM ('' when there is none)."""
    clusters = evidence.get("clusters") or []
    agree = evidence.get("agreement") or {}
    if not clusters and not agree.get("states"):
        return ""
    lines = [f"The game's expert was asked in {agree.get('states', 0)} states the agent played; the agent chose "
             f"the expert's action in {agree.get('agree', 0)}."]
    for i, c in enumerate(clusters[:max_clusters], 1):
        lines.append(f"Cluster {i}: the agent chose \"{c['agent']}\" where the expert chose \"{c['expert']}\" in "
                     f"{c['count']} states ({c['episodes']} episodes; {', '.join(c['cites'][:4])}); a line names "
                     f"the mission's things in {c['with_line']} of them.")
        for p, n in c["patterns"][:3]:
            lines.append(f"  {n} x {p}")
    return "\n".join(lines)


def collect(task: TaskConfig, episodes: Sequence[dict], expert_seeds: Sequence[int], *,
            env_factory: Callable[[TaskConfig], Any] = make_env) -> dict[str, Any]:
    """The expert evidence of one generation (JSON-able): ``available``, ``states`` (labelled, agent's
    and expert's), ``agreement``, ``clusters``, ``vocabulary``, ``counts`` and ``problems``."""
    if not task_has_expert(task, env_factory):
        return {"available": False, "note": f"env family {task.family!r} has no expert: expert evidence and "
                "induced rules are skipped"}
    problems = Problems()
    agent_states: list[LabelledState] = []
    for ep in episodes:
        if ep.get("trajectory"):
            agent_states += label_episode(task, ep, problems, env_factory=env_factory)
    expert_states: list[LabelledState] = []
    for s in expert_seeds:
        expert_states += expert_episode(task, int(s), problems, env_factory=env_factory)
    states = agent_states + expert_states
    vocab = vocabulary(s.observation for s in unique(states))
    return {
        "available": True,
        "states": [s.to_dict() for s in states],
        "agreement": agreement(agent_states),
        "clusters": disagreement_clusters(agent_states, vocab),
        "vocabulary": vocab.to_dict(),
        "counts": {"agent_states": len(agent_states), "agent_unique": len(unique(agent_states)),
                   "expert_states": len(expert_states), "expert_episodes": len(list(expert_seeds)),
                   "evidence_episodes": len(episodes)},
        "problems": problems.lines,
    }


def states_of(evidence: dict) -> list[LabelledState]:
    """The labelled states stored in an evidence dict (``collect``'s output)."""
    return [LabelledState.from_dict(d) for d in (evidence.get("states") or [])]


__all__ = ["LabelledState", "Problems", "agreement", "collect", "disagreement_clusters", "expert_episode", "label_episode",
           "render_clusters", "states_of", "task_has_expert", "unique"]
