"""The adapter for text games: episodes of an agent in a :class:`~promptevo.envs.base.TextEnv`, reflection
by behaviour signatures and an optimizer LLM, and children from the proposal operators.

Nothing here knows a particular game: the task's env family builds the envs (:mod:`promptevo.envs.registry`),
family-specific behaviour signatures come from the family, and hint libraries are files named after it.

Children come from the operator registry (:mod:`promptevo.optim.propose.registry`, one module per
operator under :mod:`promptevo.optim.propose`; ``promptevo operators`` lists them): this adapter gives the
operators the game's services (``cfg``, ``task``, ``opt_gw``, ``env_factory``, ``env_instructions``, the hint
and skill libraries, ``warn_once``), and replays recorded states for the engine's screen phase
(:mod:`promptevo.optim.screen`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from promptevo.agents.base import check_placeholders
from promptevo.evaluation.rollout import EpisodeResult, run_episodes
from promptevo.evaluation.signatures import render_signatures, signatures_to_dict, summarize_signatures
from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.optim.adapter import EpisodeCallback, ProposalBatch, ProposalContext, optimizer_seed
from promptevo.optim.config import OptimizeConfig
from promptevo.optim.propose.hints import HintLibrary, HintLibraryError, builtin_path, load_hints
from promptevo.optim.propose.schedule import propose_children
from promptevo.optim.propose.induce import RuleTable
from promptevo.optim.reflect.analyzer import Analysis, analyze, build_analyzer_messages
from promptevo.optim.reflect.compliance import analyse as analyse_compliance
from promptevo.optim.reflect.expert import Problems, label_episode, render_clusters, states_of, task_has_expert
from promptevo.optim.reflect.expert import collect as collect_expert
from promptevo.optim.reflect.features import Vocabulary
from promptevo.optim.reflect.follower import Explorer
from promptevo.optim.reflect.llm_json import estimate_tokens
from promptevo.optim.screen import choose_states
from promptevo.optim.selection import max_score_of
from promptevo.segments import PromptSet
from promptevo.tasks import TaskConfig, make_env

log = logging.getLogger(__name__)

AgentBuilder = Callable[[str, "PromptSet | None"], Callable[[], Any]]
Runner = Callable[..., list[Any]]
Warn = Callable[[str], None]

def rule_compliance(task: TaskConfig, rule: dict, episodes: list[dict], *,
                    env_factory: Callable[[TaskConfig], Any] = make_env) -> dict:
    """The compliance analysis (:mod:`~promptevo.optim.reflect.compliance`) of ``episodes`` (dicts with
    their trajectories) played on ``task`` with a prompt carrying the induced ``rule`` (an induction
    record), the expert's action of every step from a replay of each episode."""
    vocab = Vocabulary.from_words(rule["vocabulary"]["words"], rule["vocabulary"]["structural"])
    experts: dict[tuple[int, int], str] = {}
    if task_has_expert(task, env_factory):
        problems = Problems()
        for ep in episodes:
            for s in label_episode(task, ep, problems, env_factory=env_factory):
                experts[(s.seed, s.t)] = s.expert
    return analyse_compliance(episodes, vocab, RuleTable.from_dict(rule["table"]), rule["fields"],
                              explorer=Explorer.from_dict(rule.get("explorer")), experts=experts)


def choose_evidence(mode: str, cards_above: int, raw_prompt_tokens: int | None) -> str:
    """What the analyzer reads: ``mode`` unless it is ``auto``, which picks evidence cards when the raw
    trajectory prompt is estimated above ``cards_above`` tokens (cards cost one extra call of about a fixed
    size, so they pay off only on long trajectories)."""
    if mode != "auto":
        return mode
    return "cards" if (raw_prompt_tokens or 0) > cards_above else "raw"


def default_runner(task: Any, agent_factory: Callable[[], Any], seeds: Sequence[int], *, concurrency: int = 4,
                   on_result: Callable[[Any], None] | None = None, loop_cutoff: bool = True) -> list[Any]:
    return run_episodes(task, agent_factory, list(seeds), concurrency=concurrency, on_result=on_result,
                        loop_cutoff=loop_cutoff)


class TextGameAdapter:
    """:class:`~promptevo.optim.adapter.Adapter` for an agent playing a text game task."""

    def __init__(self, config: OptimizeConfig, task: TaskConfig, *, agent_gateway: Any, optimizer_gateway: Any,
                 agent_builder: AgentBuilder, runner: Runner = default_runner, env_instructions: str | None = None,
                 warn: Warn | None = None):
        self.cfg = config
        self.task = task
        self.agent_gw = agent_gateway
        self.opt_gw = optimizer_gateway
        #: how every optimizer call is made (temperature, reply caps, retries, schema, budget)
        self.opt_lm = OptimizerLM.from_config(optimizer_gateway, config)
        self.build = agent_builder
        self.runner = runner
        #: builds the envs the runner plays (a runner may carry its own: test doubles, replays)
        self.env_factory: Callable[[TaskConfig], Any] = getattr(runner, "env_factory", make_env)
        self.warn = warn or (lambda msg: log.warning(msg))
        self.max_score = max_score_of(config.fitness)
        self._instructions = env_instructions
        self._hints: HintLibrary | None = None
        self._warned: set[str] = set()
        self._skills: Any = None

    # -- context ------------------------------------------------------------------------------------
    def route_warnings(self, warn: Warn) -> None:
        """Send this adapter's warnings to ``warn`` from now on (the engine's: run log and report)."""
        self.warn = warn

    def warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warn(msg)

    @property
    def env_instructions(self) -> str:
        """The env's own description of the game, shown to the optimizer LLM ("" with a warning when the
        env cannot give it)."""
        if self._instructions is None:
            try:
                env = self.env_factory(self.task)
                try:
                    env.reset(self.task.seed_list("train")[0])  # some envs describe the episode's mission
                    self._instructions = str(env.instructions() or "")
                finally:
                    env.close()
            except Exception as e:  # noqa: BLE001 - a custom env's bug: say so, go on without the text
                first = str(e).splitlines()[0] if str(e) else ""
                self.warn_once("instructions", f"warning: env {self.task.family!r} could not describe itself "
                               f"({type(e).__name__}: {first}); the optimizer LLM works without the game's rules")
                self._instructions = ""
        return self._instructions

    def describe(self) -> dict[str, Any]:
        return {"adapter": "text-game", "task": self.task.name, "family": self.task.family,
                "agent": self.cfg.agent, "fitness": self.cfg.fitness, "operators": list(self.cfg.operators)}

    # -- evaluate -----------------------------------------------------------------------------------
    def evaluate(self, prompts: PromptSet | None, seeds: Sequence[int], *, agent: str | None = None,
                 on_episode: EpisodeCallback | None = None) -> list[dict]:
        factory = self.build(agent or self.cfg.agent, prompts)

        def done(r: Any) -> None:
            if on_episode is not None:
                on_episode(_as_dict(r))

        kw = {"loop_cutoff": self.cfg.loop_cutoff} if self.runner is default_runner else {}
        results = self.runner(self.task, factory, list(seeds), concurrency=self.cfg.effective_concurrency,
                              on_result=done, **kw)
        return [_as_dict(r) for r in results]

    def score(self, episode: dict) -> float:
        f = self.cfg.fitness
        if f == "success":
            return float(bool(episode.get("success")))
        if f == "progression":
            return float(episode.get("progression") or 0.0)
        if f == "progress":
            p = episode.get("progress")
            if p is None:
                self.warn_once("progress", f"warning: env {self.task.family!r} gives no progress signal for some "
                               "episodes; their fitness is success (0/1)")
                return float(bool(episode.get("success")))
            return float(p)
        return float(episode.get("return", episode.get("return_", 0.0)) or 0.0)

    # -- reflect ------------------------------------------------------------------------------------
    def make_reflective_dataset(self, parent: PromptSet, episodes: list[dict], *, generation: int,
                                history: list[dict], expert_seeds: Sequence[int] = (), mode: str = "mutate") -> dict:
        cfg = self.cfg
        sigs = summarize_signatures(episodes, family=self.task.family)
        out: dict[str, Any] = {"signatures": signatures_to_dict(sigs), "usage": {}}
        if mode == "prune":
            out["analysis"] = Analysis(ok=False, error="pruning generation: no diagnosis needed",
                                       prompt_fingerprint=parent.fingerprint()).model_dump(mode="json")
            out["evidence_kind"] = "none"
            return out
        out["expert"] = self.expert_evidence(episodes, expert_seeds)
        expert_text = render_clusters(out["expert"])
        sig_text = render_signatures(sigs) + (f"\n\nWhere the agent departs from the game's expert:\n{expert_text}"
                                              if expert_text else "")
        raw_tokens = None
        if cfg.evidence == "auto":
            msgs, _ = build_analyzer_messages(parent, episodes, env_instructions=self.env_instructions,
                                              history=history, max_trajectories=cfg.max_trajectories,
                                              max_steps_shown=cfg.max_steps_shown, signatures=sig_text)
            raw_tokens = estimate_tokens(msgs)
        kind = choose_evidence(cfg.evidence, cfg.cards_above, raw_tokens)
        out["evidence_kind"] = kind
        cards = None
        if kind == "cards":
            from promptevo.optim.reflect.cards import build_cards

            cards = build_cards(parent, episodes, self.opt_lm, env_instructions=self.env_instructions,
                                seed=optimizer_seed(cfg.seed, generation))
            out["cards"] = cards.to_dict()
            out["usage"]["cards"] = dict(cards.usage)
        analysis = analyze(parent, episodes, self.opt_lm, max_trajectories=cfg.max_trajectories,
                           max_steps_shown=cfg.max_steps_shown, env_instructions=self.env_instructions,
                           history=history, seed=optimizer_seed(cfg.seed, generation), evidence=cards,
                           signatures=sig_text)
        out["analysis"] = analysis.model_dump(mode="json")
        out["usage"]["analyzer"] = dict(analysis.usage)
        return out

    def expert_evidence(self, episodes: list[dict], expert_seeds: Sequence[int]) -> dict:
        """Expert-labelled states of the evidence episodes and of episodes the expert plays on
        ``expert_seeds`` (:func:`~promptevo.optim.reflect.expert.collect`); problems are said once each."""
        try:
            ev = collect_expert(self.task, episodes, expert_seeds, env_factory=self.env_factory)
        except Exception as e:  # noqa: BLE001 - a broken env or expert must not stop the run
            first = str(e).splitlines()[0] if str(e) else ""
            self.warn_once("expert-broken", f"warning: expert evidence unavailable ({type(e).__name__}: {first}); the "
                           "loop goes on without it")
            return {"available": False, "note": f"{type(e).__name__}: {first}"}
        if not ev.get("available"):
            self.warn_once("no-expert", f"note: {ev.get('note')}")
        for line in ev.get("problems") or []:
            self.warn_once(f"expert:{line.split(':', 1)[0]}:{line[:60]}", f"note: {line}")
        return ev

    def compliance(self, rule: dict, episodes: list[dict]) -> dict:
        """:func:`rule_compliance` of ``episodes`` on this adapter's task."""
        return rule_compliance(self.task, rule, episodes, env_factory=self.env_factory)

    # -- propose ------------------------------------------------------------------------------------
    def hint_library(self) -> HintLibrary | None:
        if self._hints is None and self.cfg.hints:
            path = builtin_path(self.task.family) if self.cfg.hints == "builtin" else self.cfg.hints
            self._hints = load_hints(path)  # HintLibraryError: one line, the run stops before any episode
        return self._hints

    def check(self, prompts: PromptSet | None = None) -> None:
        """Fail before any episode (and before the run folder exists) on unusable inputs: agent options the
        agent does not take or prompts it cannot play (AgentError), a malformed hint or skill file."""
        if prompts is not None:
            check_placeholders(prompts)
            self.build(self.cfg.agent, prompts)()
        if "hints" in self.cfg.operators:
            self.hint_library()
        if self.cfg.skills:
            self.skill_library()

    def skill_library(self) -> Any:
        if self._skills is None and self.cfg.skills:
            from promptevo.optim.propose.skills import SkillLibrary

            self._skills = SkillLibrary.load(self.cfg.skills)
        return self._skills

    def propose(self, parent: PromptSet, evidence: dict, ctx: ProposalContext) -> ProposalBatch:
        """Children from the registered operators the run names (:mod:`~promptevo.optim.propose.schedule`);
        the engine's screen phase (:func:`~promptevo.optim.screen.screen_phase`) replays them next."""
        return propose_children(parent, evidence, ctx, self, self.cfg.operators)

    # -- what the screen phase reads (:class:`~promptevo.optim.screen.Replayer`) ------------------------
    def screen_states(self, evidence: dict, k: int) -> list | None:
        """Up to ``k`` recorded states of the parent's evidence episodes with the expert's action
        (:func:`~promptevo.optim.screen.choose_states`); None where this game has no expert."""
        expert = evidence.get("expert") or {}
        return choose_states(states_of(expert), k) if expert.get("available") else None

    @contextmanager
    def replay(self) -> Iterator[tuple[Callable[[PromptSet, Any], tuple[str, bool]], dict]]:
        """``(decide, cost)``: ``decide(prompts, state)`` is the agent's one decision with ``prompts`` in a
        recorded state (an env reset to the state's seed, the state's observation); the envs close on exit."""
        envs: dict[int, Any] = {}
        cost = {"decisions": 0, "calls": 0, "tokens": 0}

        def decide(prompts: PromptSet, st: Any) -> tuple[str, bool]:
            env = envs.get(st.seed)
            if env is None:
                env = envs[st.seed] = self.env_factory(self.task)
                env.reset(st.seed)
            agent = self.build(self.cfg.agent, prompts)()
            agent.reset(env, st.mission, seed=st.seed)
            d = agent.act(st.observation, {"mission": st.mission})
            if getattr(agent, "gateway", None) not in (None, self.agent_gw):  # an agent built for Ray workers
                from promptevo.evaluation.scaleout import absorb_usage

                absorb_usage(self.agent_gw, [{"trajectory": [{"calls": d.calls}]}])
            cost["decisions"] += 1
            cost["calls"] += len(d.calls)
            cost["tokens"] += sum(int(c.get("prompt_tokens") or 0) + int(c.get("completion_tokens") or 0)
                                  for c in d.calls)
            return env.action_space().match(d.action) or env.default_action, d.parsed

        try:
            yield decide, cost
        finally:
            for env in envs.values():
                env.close()


def _as_dict(r: Any) -> dict:
    if isinstance(r, dict):
        return r
    if isinstance(r, EpisodeResult):
        return r.to_dict()
    return r.to_dict() if hasattr(r, "to_dict") else dict(vars(r))


__all__ = ["TextGameAdapter", "choose_evidence", "default_runner", "HintLibraryError"]
