"""The adapter for text games: episodes of an agent in a :class:`~promptevo.envs.base.TextEnv`, reflection
by behaviour signatures and an optimizer LLM, and children from the proposal operators.

Nothing here knows a particular game: the task's env family builds the envs (:mod:`promptevo.envs.registry`),
family-specific behaviour signatures come from the family, and hint libraries are files named after it.

Proposal operators (``--operators``), each child recording the operator that made it:

* ``mutate`` - the optimizer LLM rewrites, adds or deletes one segment (reply forced to a JSON schema);
* ``delete`` - deletion guided by counterfactual ablation: the parent is played without each of a few
  candidate segments on some of the evidence seeds, and the segments whose removal cost nothing are
  proposed for deletion (the child is then raced on fresh training seeds like any other);
* ``crossover`` - a segment-wise mix of the parent and another accepted lineage;
* ``hints`` - one rule from the family's hint library (``prompts/hints/<family>.toml`` or ``--hints``);
* ``induce`` - where the env has an expert: a rule table fitted to the expert's actions on labelled
  training states, with an answer format that makes the agent write the features the table reads;
* ``rules`` - the optimizer LLM writes one rule per disagreement cluster with the expert (narrow,
  schema-forced requests, several samples, instance-specific and already-tried rules dropped);
* with ``--skills`` a library skill learned on another task; in pruning generations the pruner's edits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from promptevo.agents.base import check_placeholders
from promptevo.evaluation.rollout import EpisodeResult, run_episodes
from promptevo.evaluation.signatures import render_signatures, signatures_to_dict, summarize_signatures
from promptevo.optim.adapter import EpisodeCallback, Proposal, ProposalBatch, ProposalContext
from promptevo.optim.config import OptimizeConfig
from promptevo.optim.propose.answer_format import acting_module, format_rewrite, rule_edit
from promptevo.optim.propose.crossover import propose_crossovers
from promptevo.optim.propose.hints import HintLibrary, HintLibraryError, builtin_path, load_hints, propose_hints
from promptevo.optim.propose.induce import SEGMENT as INDUCED_SEGMENT
from promptevo.optim.propose.induce import induce, load_phrases, render
from promptevo.optim.propose.mutator import propose_detailed
from promptevo.optim.propose.rules import segment_name as rule_segment
from promptevo.optim.propose.rules import write_rules
from promptevo.optim.propose.pruner import prompt_tokens, propose_prunes, prunable_segments
from promptevo.optim.reflect.analyzer import Analysis, analyze, build_analyzer_messages
from promptevo.optim.reflect.expert import collect as collect_expert
from promptevo.optim.reflect.expert import render_clusters, states_of
from promptevo.optim.reflect.llm_json import estimate_tokens
from promptevo.optim.screen import choose_states, screen
from promptevo.optim.selection import max_score_of
from promptevo.segments import Edit, PromptSet, apply_edit
from promptevo.tasks import TaskConfig, make_env

log = logging.getLogger(__name__)

AgentBuilder = Callable[[str, "PromptSet | None"], Callable[[], Any]]
Runner = Callable[..., list[Any]]
Warn = Callable[[str], None]

#: how many segments the delete operator ablates per generation, and on how many evidence seeds
ABLATE_SEGMENTS = 3
ABLATE_SEEDS = 4


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

            cards = build_cards(parent, episodes, self.opt_gw, env_instructions=self.env_instructions,
                                temperature=cfg.optimizer_temperature, max_tokens=min(1024, cfg.optimizer_max_tokens),
                                seed=cfg.seed * 1000 + generation)
            out["cards"] = cards.to_dict()
            out["usage"]["cards"] = dict(cards.usage)
        analysis = analyze(parent, episodes, self.opt_gw, max_trajectories=cfg.max_trajectories,
                           max_steps_shown=cfg.max_steps_shown, env_instructions=self.env_instructions,
                           history=history, temperature=cfg.optimizer_temperature,
                           max_tokens=cfg.optimizer_max_tokens, seed=cfg.seed * 1000 + generation, evidence=cards,
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
        if ctx.mode == "prune":
            return self._propose_prunes(parent, ctx)
        batch = ProposalBatch(proposals=[])
        want = ctx.n
        if self.cfg.skills and self.cfg.skill_children > 0:
            batch.proposals += self._skill_children(parent, ctx, min(self.cfg.skill_children, want))
        ops = [op for op in self.cfg.operators]
        quota = _quotas(ops, want - len(batch.proposals))
        sig_kinds = [s["kind"] for s in evidence.get("signatures", [])]
        for op in ops:
            if op != "mutate":
                self._run_operator(op, parent, evidence, ctx, quota.get(op, 0), batch, sig_kinds)
        # the LLM mutator fills what the other operators could not
        n_llm = want - len(batch.proposals)
        if n_llm > 0 and "mutate" in ops:
            analysis = Analysis.model_validate(evidence["analysis"]) if evidence.get("analysis") else None
            skills_text = None
            if self.cfg.skills:
                from promptevo.optim.propose.skills import render

                lib = self.skill_library()
                chosen = lib.select(self.task.name, self.task.family, parent, k=3)
                skills_text = render(chosen) if chosen else None
            props = propose_detailed(parent, analysis, self.opt_gw, n=n_llm, history=ctx.history, tried=ctx.tried,
                                     env_instructions=self.env_instructions,
                                     temperature=self.cfg.optimizer_temperature,
                                     max_tokens=self.cfg.optimizer_max_tokens, seed=self.cfg.seed * 1000 + ctx.generation,
                                     skills=skills_text, expert=render_clusters(evidence.get("expert") or {}))
            batch.usage["mutator"] = dict(props.usage)
            batch.record["mutation"] = props.to_dict()
            for e in props.edits:
                child = apply_edit(parent, e)
                ctx.tried.add(child.fingerprint())
                batch.proposals.append(Proposal(child, "mutate", e.to_dict()))
            if props.rejected:
                batch.log.append(f"{len(props.rejected)} mutator edits rejected")
            if props.error and not props.edits:
                batch.log.append(f"mutator: {props.error}")
        # a weak optimizer LLM often returns nothing usable: the other operators fill the free slots
        for op in ops:
            free = want - len(batch.proposals)
            if free <= 0:
                break
            if op != "mutate":
                before = len(batch.proposals)
                self._run_operator(op, parent, evidence, ctx, free, batch, sig_kinds)
                if len(batch.proposals) > before:
                    batch.log.append(f"{op} filled {len(batch.proposals) - before} slot(s) the mutator left")
        self._screen(parent, evidence, batch)
        return batch

    # -- screen -------------------------------------------------------------------------------------
    def _screen(self, parent: PromptSet, evidence: dict, batch: ProposalBatch) -> None:
        """Replay recorded states with each child and the parent (:mod:`~promptevo.optim.screen`); the
        verdicts go with the proposals (the engine drops the failing ones in ``filter`` mode)."""
        expert = evidence.get("expert") or {}
        if self.cfg.screen == "off" or not batch.proposals or not expert.get("available"):
            return
        states = choose_states(states_of(expert), self.cfg.screen_states)
        if not states:
            batch.log.append("screen: no recorded states to replay; children go to the race unscreened")
            return
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

        rows = []
        try:
            for p in batch.proposals:
                res = screen(p.prompts, parent, states, decide)
                p.screen = res.to_dict()
                rows.append({"operator": p.operator, **{k: v for k, v in p.screen.items() if k != "details"}})
                if not res.keep:
                    batch.log.append(f"screen: {p.operator} child {'dropped' if self.cfg.screen == 'filter' else 'would be dropped'}"
                                     f" ({res.reason})")
        finally:
            for env in envs.values():
                env.close()
        batch.record["screen"] = {"mode": self.cfg.screen, "states": len(states), "children": rows, **cost}

    def _run_operator(self, op: str, parent: PromptSet, evidence: dict, ctx: ProposalContext, k: int,
                      batch: ProposalBatch, sig_kinds: list[str]) -> None:
        """Add up to ``k`` children of one non-LLM operator to ``batch``."""
        if k <= 0:
            return
        if op == "hints":
            lib = self.hint_library()
            tried_hints = {((h.get("source") or {}).get("hint")) for h in ctx.history}
            tried_hints |= {(p.source or {}).get("hint") for p in batch.proposals}
            for hint, edit, child in propose_hints(parent, lib, task=self.task.name, n=k, tried=ctx.tried,
                                                   signature_kinds=sig_kinds, skip=tried_hints):
                batch.proposals.append(Proposal(child, "hint", edit.to_dict(), {"hint": hint.id, "author": "person"}))
        elif op == "induce":
            if "induce" not in batch.record:  # one table per generation, however many slots are free
                self._induced_child(parent, evidence, ctx, batch)
        elif op == "rules":
            if "rules" not in batch.record:
                self._rule_children(parent, evidence, ctx, k, batch)
        elif op == "crossover":
            for other, child in propose_crossovers(parent, ctx.archive, parent_id=ctx.archive_parent, n=k,
                                                   tried=ctx.tried, seed=ctx.seed):
                batch.proposals.append(Proposal(child, "crossover", None, {"parents": [ctx.archive_parent, other]}))
        elif op == "delete":
            batch.proposals += self._ablation_deletions(parent, evidence, ctx, k, batch)

    def _induced_child(self, parent: PromptSet, evidence: dict, ctx: ProposalContext, batch: ProposalBatch) -> None:
        """One child from a rule table fitted to the expert's actions (:mod:`~promptevo.optim.propose.induce`),
        or one log line saying why there is none."""
        expert = evidence.get("expert") or {}
        if not expert.get("available"):
            batch.record["induce"] = {"reason": "no expert for this game"}
            batch.log.append("induce: no expert for this game, no child")
            return
        ind = induce(states_of(expert))
        record = ind.to_dict()
        batch.record["induce"] = record
        if not ind.useful or ind.table is None:
            batch.log.append(f"induce: {ind.reason}; no child")
            return
        rule, fmt = render(ind.table, load_phrases())
        record["rule"], record["format"] = rule, fmt
        module = acting_module(parent)
        fmt_edit = format_rewrite(parent, module, fmt, "induced rule: the answer fields it reads")
        if fmt_edit is None:
            batch.log.append(f"induce: module {module!r} has no answer format with <|ACTION|> to write the features "
                             "in before the action; no child")
            return
        why = (f"fitted to {ind.n_fit + ind.n_heldout} expert-labelled states; held-out accuracy {ind.accuracy:.0%} "
               f"vs {ind.majority:.0%} for the majority action (n = {ind.n_heldout})")
        edit = rule_edit(parent, module, INDUCED_SEGMENT, rule, why)
        try:
            child = apply_edit(apply_edit(parent, edit), fmt_edit)
        except ValueError as e:
            batch.log.append(f"induce: the rendered rule does not fit the prompt ({e}); no child")
            return
        if child.fingerprint() in ctx.tried:
            batch.log.append("induce: the same rule as a child tried before; no child")
            return
        ctx.tried.add(child.fingerprint())
        batch.proposals.append(Proposal(child, "induce", edit.to_dict(), {"author": "machine", "induce": record}))

    def _rule_children(self, parent: PromptSet, evidence: dict, ctx: ProposalContext, k: int,
                       batch: ProposalBatch) -> None:
        """Up to ``k`` children, each one rule the optimizer LLM wrote for one disagreement cluster
        (:mod:`~promptevo.optim.propose.rules`), or a log line saying why there is none."""
        clusters = (evidence.get("expert") or {}).get("clusters") or []
        if not clusters:
            batch.record["rules"] = {"note": "no disagreement clusters"}
            batch.log.append("rules: no disagreement clusters with the expert (no expert, or the agent agrees); no child")
            return
        tried = [str((h.get("edit") or {}).get("text") or "") for h in ctx.history]
        env = self.env_factory(self.task)
        try:
            env.reset(self.task.seed_list("train")[0])
            actions = env.action_space().describe()
        finally:
            env.close()
        rnd = write_rules(clusters, self.opt_gw, actions=actions, tried=tried, samples=self.cfg.rule_samples,
                          temperature=self.cfg.optimizer_temperature, seed=self.cfg.seed * 1000 + ctx.generation)
        batch.record["rules"] = rnd.to_dict()
        batch.usage["rules"] = dict(rnd.usage)
        module = acting_module(parent)
        made = 0
        for sample in rnd.kept:
            if made >= k:
                break
            edit = rule_edit(parent, module, rule_segment(sample.rule), sample.rule,
                             f"written by the optimizer for disagreement cluster {sample.cluster}")
            try:
                child = apply_edit(parent, edit)
                fmt = format_rewrite(child, module, sample.format, "the answer shape the rule needs") if sample.format else None
                if fmt is not None:
                    child = apply_edit(child, fmt)
            except ValueError:
                continue
            if child.fingerprint() in ctx.tried:
                continue
            ctx.tried.add(child.fingerprint())
            batch.proposals.append(Proposal(child, "rule", edit.to_dict(), {"author": "machine", "cluster": sample.cluster,
                                                                           "format": sample.format}))
            made += 1
        dropped = len(rnd.samples) - len(rnd.kept)
        batch.log.append(f"rules: {len(rnd.samples)} written, {dropped} dropped before any episode"
                         + (f" ({'; '.join(sorted({s.reason for s in rnd.samples if not s.kept}))})" if dropped else "")
                         + (f"; {len(rnd.errors)} unusable replies" if rnd.errors else ""))

    def _propose_prunes(self, parent: PromptSet, ctx: ProposalContext) -> ProposalBatch:
        props = propose_prunes(parent, self.opt_gw, n=ctx.n, history=ctx.history, tried=ctx.tried,
                               stats=ctx.parent_stats, env_instructions=self.env_instructions,
                               temperature=self.cfg.optimizer_temperature,
                               max_tokens=min(1024, self.cfg.optimizer_max_tokens),
                               seed=self.cfg.seed * 1000 + ctx.generation)
        before = prompt_tokens(parent)
        batch = ProposalBatch(proposals=[], usage={"pruner": dict(props.usage)}, record={"pruning": props.to_dict()})
        for e in props.edits:
            child = apply_edit(parent, e)
            ctx.tried.add(child.fingerprint())
            batch.proposals.append(Proposal(child, "prune", e.to_dict(), prompt_tokens_saved=before - prompt_tokens(child)))
        return batch

    def _skill_children(self, parent: PromptSet, ctx: ProposalContext, k: int) -> list[Proposal]:
        from promptevo.optim.propose.skills import skill_edit

        lib = self.skill_library()
        out = []
        for sk in lib.select(self.task.name, self.task.family, parent, k=3):
            if len(out) >= k:
                break
            e = skill_edit(sk, parent)
            child = apply_edit(parent, e)
            if sk.format:  # the answer shape the rule was found with
                fmt = format_rewrite(child, e.module, sk.format, f"skill {sk.id}: the answer shape it needs")
                child = apply_edit(child, fmt) if fmt is not None else child
            if child.fingerprint() in ctx.tried:
                continue
            ctx.tried.add(child.fingerprint())
            out.append(Proposal(child, "skill", e.to_dict(), {"skill": sk.id, "author": sk.author}))
        return out

    def _ablation_deletions(self, parent: PromptSet, evidence: dict, ctx: ProposalContext, k: int,
                            batch: ProposalBatch) -> list[Proposal]:
        """Play the parent without each of a few prunable segments on some evidence seeds (counterfactual
        ablation) and propose deleting those whose removal did not lower the score, best first."""
        if ctx.evaluate is None or not ctx.evidence_seeds:
            return []
        candidates = prunable_segments(parent)
        hurt = []
        for a in ((evidence.get("analysis") or {}).get("attributions") or []):
            if a.get("effect") == "hurt" and a.get("segment"):
                hurt.append((a["module"], a["segment"]))
        tried_del = {((h.get("edit") or {}).get("module"), (h.get("edit") or {}).get("segment"))
                     for h in ctx.history if (h.get("edit") or {}).get("op") == "delete"}
        ordered = [t for t in hurt if t in candidates] + sorted(
            (t for t in candidates if t not in hurt),
            key=lambda t: -len(parent.module(t[0]).get(t[1]) or ""))
        ordered = [t for t in dict.fromkeys(ordered) if t not in tried_del][:ABLATE_SEGMENTS]
        seeds = list(ctx.evidence_seeds)[:ABLATE_SEEDS]
        base = ctx.evaluate(parent, seeds)
        rows = []
        for module, seg in ordered:
            edit = Edit(op="delete", module=module, segment=seg, rationale="counterfactual ablation")
            try:
                child = apply_edit(parent, edit)
            except ValueError:
                continue
            if child.fingerprint() in ctx.tried:
                continue
            scores = ctx.evaluate(child, seeds)
            common = [s for s in seeds if s in scores and s in base]
            delta = sum(scores[s] - base[s] for s in common) / len(common) if common else 0.0
            rows.append({"module": module, "segment": seg, "delta": delta, "n": len(common), "child": child})
        batch.record["ablation"] = [{k2: v for k2, v in r.items() if k2 != "child"} for r in rows]
        out = []
        for r in sorted(rows, key=lambda r: -r["delta"]):
            if len(out) >= k or r["delta"] < 0:
                break
            ctx.tried.add(r["child"].fingerprint())
            edit = Edit(op="delete", module=r["module"], segment=r["segment"],
                        rationale=f"ablation on {r['n']} seeds: removing it changed the score by {r['delta']:+.2f}")
            out.append(Proposal(r["child"], "delete", edit.to_dict(),
                                {"ablation": {"delta": r["delta"], "n": r["n"], "seeds": seeds}}))
        return out


def _quotas(ops: list[str], n: int) -> dict[str, int]:
    """Children per operator: round-robin over the non-LLM operators first; ``mutate`` takes what is left
    (and what the others could not fill)."""
    others = [op for op in ops if op != "mutate"]
    q = {op: 0 for op in ops}
    if not others:
        q["mutate"] = n
        return q
    share = n if "mutate" not in ops else max(1, n - 1) if n > 1 else n
    for i in range(share):
        q[others[i % len(others)]] += 1
    if "mutate" in ops:
        q["mutate"] = n - share
    return q


def _as_dict(r: Any) -> dict:
    if isinstance(r, dict):
        return r
    if isinstance(r, EpisodeResult):
        return r.to_dict()
    return r.to_dict() if hasattr(r, "to_dict") else dict(vars(r))


__all__ = ["TextGameAdapter", "choose_evidence", "default_runner", "HintLibraryError"]
