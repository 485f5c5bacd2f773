"""The optimization loop. It knows prompts, seeds and scores; the game is behind an
:class:`~promptevo.optim.adapter.Adapter`.

Seeds come in three disjoint splits (:mod:`promptevo.tasks`). Each generation, with the best prompt so
far as the parent:

1. draw fresh training seeds: an *evidence* batch and a disjoint *acceptance* batch;
2. play the parent on the evidence batch and build the evidence the proposers read
   (:meth:`Adapter.make_reflective_dataset`);
3. propose children (:meth:`Adapter.propose`), each recording the operator that made it;
4. race the children on the acceptance batch against the parent (paired): growing batches, a child that
   cannot be accepted any more or is significantly worse stops early (:mod:`promptevo.optim.selection`);
   the rest are accepted or rejected by the acceptance rule;
5. the best accepted child meets the validation gate: it replaces the best prompt only if a paired test
   on the validation seeds says it is better, at the run-wide ``alpha`` split over the generations.

The test split is played once, after the last generation, for the baseline agent, the initial and the
best prompt; the final table (``report.json``) holds only those numbers. The engine refuses to play a
test seed before that phase.

Everything is recorded under ``results/<run>/``: ``checkpoint.json`` (written atomically after every
step; a resumed run continues exactly where it stopped), ``episodes.jsonl`` (every finished episode, so
nothing is played twice), ``analyses/gen-NNN.json`` (evidence and proposals), ``run.log``, the report.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promptevo.evaluation.signatures import signatures_to_dict, summarize_signatures
from promptevo.evaluation.statistics import call_cost, cost_comparison, summarize_records
from promptevo.evaluation.store import EPISODES_FILE, EpisodeStore
from promptevo.fileio import read_json, write_json_atomic
from promptevo.optim.adapter import Adapter, ProposalContext, describe, optimizer_seed
from promptevo.optim.config import IDENTITY_FIELDS, OptimizeConfig, settings_digest
from promptevo.optim.events import Emitter
from promptevo.optim.evidence import Evidence
from promptevo.optim.hooks import GenerationHook, ValidityHook
from promptevo.optim.pruning import PrunePolicy
from promptevo.optim.reflect.ablation import counterfactual_ablation
from promptevo.optim.screen import screen_phase
from promptevo.optim.selection import (gate_alpha, look_levels, look_sizes, promote, race_check, race_schedule,
                                       sequential_gate)
from promptevo.optim.state import (
    ACCEPTED_STATUSES,
    CHECKPOINT,
    Candidate,
    GenerationRecord,
    RunError,
    RunState,
    RunStopped,
    final_compliance,
    load_checkpoint,
    record_of,
    open_run_store,
    save_checkpoint,
)
from promptevo.optim.stopping import Progress, budgets, convergence, first_reason, raised, stopped_by_condition
from promptevo.segments import PromptSet

UsageFn = Callable[[], dict]
#: the agent whose test-split row is the random floor of every report
FLOOR_AGENT = "random"


class InfraFailure(RuntimeError):
    """Too many episodes of one evaluation could not be played (the LLM failed): the run stops, resumable."""


@dataclass
class RunResult:  # what optimize() returns
    run_dir: Path
    best_id: str
    best_prompts: PromptSet
    report: dict
    stop_reason: str
    candidates: list[Candidate]


def _rate(c: Candidate, split: str) -> str:
    row = summarize_records(c.records(split))  # type: ignore[arg-type]
    return f"{row['successes']}/{row['n']} ({row['success_rate']:.0%})" if row["n"] else "-"


class Engine:
    """One optimization run (see the module docstring). ``usage`` returns the LLM usage of this process
    so far: ``{"calls", "tokens", "cost"}``."""

    def __init__(self, config: OptimizeConfig, adapter: Adapter, *, task: Any, usage: UsageFn,
                 emitter: Emitter, finish: Callable[["Engine"], dict] | None = None,
                 skills_hook: GenerationHook | None = None, validity_hook: ValidityHook | None = None):
        self.cfg = config
        self.pruning = PrunePolicy(config.prune_at)
        self.adapter = adapter
        self.task = task
        self._usage_now = usage
        self.emit, self.finish = emitter, finish
        self.skills_hook, self.validity_hook = skills_hook, validity_hook
        self.run_dir = config.run_path()
        self.lock = threading.RLock()
        self.state: RunState
        self.store: EpisodeStore
        self.episodes_run = 0
        self._usage_base = {"calls": 0, "tokens": 0, "cost": 0.0}
        self._episodes_base, self._wall_base = 0, 0.0
        self.t0 = time.time()

    # -- bookkeeping --------------------------------------------------------------------------------
    def usage(self) -> dict:
        now = self._usage_now()
        return {k: self._usage_base.get(k, 0) + now.get(k, 0) for k in ("calls", "tokens", "cost")}

    @property
    def episodes_total(self) -> int:
        """Episodes played by this run, over every resume."""
        return self._episodes_base + self.episodes_run

    @property
    def wall_s(self) -> float:
        """Seconds spent in this run, over every resume."""
        return self._wall_base + (time.time() - self.t0)

    def checkpoint(self) -> None:
        with self.lock:
            self.state.usage = self.usage()
            self.state.episodes_run = self.episodes_total
            self.state.wall_s = self.wall_s
            self.state.store_lines = self.store.lines if hasattr(self, "store") else 0
            save_checkpoint(self.run_dir, self.state)

    def warn(self, msg: str) -> None:
        with self.lock:
            if msg not in self.state.warnings:
                self.state.warnings.append(msg)
        self.emit("warning", message=msg)

    def progress(self) -> Progress:
        """What the run has spent and decided so far (what the stop conditions read)."""
        u, st = self.usage(), self.state
        done = [g for g in sorted(st.generations, key=lambda r: r.index) if g.done]
        best_v = summarize_records(st.best.validation)["success_rate"] if st.best.validation else None
        return Progress(calls=u["calls"], tokens=u["tokens"], cost=u["cost"], episodes=self.episodes_total,
                        wall_s=self.wall_s, promoted=[bool((g.gate or {}).get("promoted")) for g in done],
                        best_validation=best_v)

    def budget_exceeded(self) -> str | None:
        """The budget that stops the run now (checked between any two steps), or None."""
        conds = budgets(self.cfg)
        return first_reason(conds, self.progress()) if conds else None

    def converged(self) -> str | None:
        """The convergence condition (patience, target) that stops the run before the next generation."""
        conds = convergence(self.cfg)
        return first_reason(conds, self.progress()) if conds else None

    # -- seeds --------------------------------------------------------------------------------------
    def _train_order(self) -> list[int]:
        pool = list(self.task.seed_list("train"))
        random.Random(f"train-order:{self.cfg.seed}").shuffle(pool)
        return pool

    def draw_train(self, g: int) -> tuple[list[int], list[int]]:
        """(evidence seeds, acceptance seeds) of generation ``g``: consecutive, disjoint slices of the run's
        shuffled training pool, fresh every generation (wrapping around when the pool is used up)."""
        pool = self._train_order()
        e, a = self.cfg.effective_evidence_episodes, self.cfg.episodes
        if e + a > len(pool):
            raise RunError(f"task {self.task.name!r} has {len(pool)} training seeds; a generation needs "
                           f"{e} evidence + {a} acceptance seeds")
        start = ((g - 1) * (e + a)) % len(pool)
        seq = [pool[(start + i) % len(pool)] for i in range(e + a)]
        return seq[:e], seq[e:]

    def draw_expert(self, g: int) -> list[int]:
        """Training seeds the game's expert plays in generation ``g`` (expert-labelled states for the
        proposers): fresh slices from the far end of the run's shuffled training pool, away from the
        evidence and acceptance seeds, which are taken from its start."""
        k = self.cfg.expert_episodes
        if k <= 0:
            return []
        if self.cfg.expert_seeds is not None:  # given explicitly (e.g. by a comparison with shared splits)
            return [int(s) for s in self.cfg.expert_seeds][:k]
        pool = self._train_order()
        end = len(pool) - ((g - 1) * k) % len(pool)
        return [pool[(end - k + i) % len(pool)] for i in range(k)]

    def validation_seeds(self) -> list[int]:
        return self.task.seeds("validation", self.cfg.validation_episodes)

    def test_seeds(self) -> list[int]:
        return self.task.seeds("test", self.cfg.test_episodes)

    # -- playing ------------------------------------------------------------------------------------
    def play(self, key: str, prompts: PromptSet | None, seeds: Sequence[int], split: str, *,
             agent: str | None = None) -> dict[int, dict]:
        """Finished episodes of ``key`` on ``seeds``, playing only those not in the store. An episode that
        ended on an LLM error is played once more; if it fails again it is left out (and said so)."""
        if split == "test" and self.state.phase == "optimize":
            raise RunError("internal error: a test seed was requested before the final evaluation")
        with self.lock:
            played = self.state.played.setdefault(split, [])
            played.extend(int(s) for s in seeds if int(s) not in played)
            self.state.scheduled = self.state.scheduled or {}
            sched = self.state.scheduled.setdefault(key, {}).setdefault(split, [])
            new = [int(s) for s in seeds if int(s) not in sched]
            sched.extend(new)
        if new:  # the schedule is on disk before any of its episodes is
            self.checkpoint()
        out: dict[int, dict] = {}
        for attempt in range(2):
            missing = [int(s) for s in seeds if int(s) not in out and self.store.get(key, int(s)) is None]
            if missing:
                def on_episode(ep: dict) -> None:
                    self.store.put(key, int(ep["seed"]), ep, split=split, settings=settings_digest(self.cfg))
                    with self.lock:
                        self.episodes_run += 1
                    self.emit("episode", seed=int(ep["seed"]), success=bool(ep.get("success")),
                              error=ep.get("error"), split=split, calls=int(ep.get("llm_calls") or 0))

                results = self.adapter.evaluate(prompts, missing, agent=agent, on_episode=on_episode)
                for ep in results:  # an adapter that did not report some episode through on_episode
                    if not self.store.has(key, int(ep["seed"])):
                        on_episode(ep)
            for s in seeds:
                ep = self.store.get(key, int(s))
                if ep is not None:
                    out[int(s)] = ep
            if len(out) == len(seeds):
                break
        lost = [int(s) for s in seeds if int(s) not in out]
        if lost:
            errs = {str((self.store.error(key, s) or "")).split(":")[0] for s in lost}
            outage = [x for x in lost if not str(self.store.error(key, x) or "").startswith("LLMBudgetError")]
            if len(outage) > self.cfg.failure_share * len(seeds):  # a spent call budget is a budget stop, not this
                first = str(self.store.error(key, outage[0]) or "no error recorded")
                raise InfraFailure(f"{len(outage)} of {len(seeds)} episodes of {key[:12]} on {split} seeds could not be "
                                   f"played: the LLM failed ({' '.join(first.split())[:160]})")
            self.warn(f"{len(lost)} episode(s) of {key[:12]} on {split} seeds ended on LLM errors twice "
                      f"({', '.join(sorted(errs))}); they are left out of the comparison (seeds {lost[:6]})")
        return out

    def check_parsing(self, episodes: Any) -> None:
        """The initial prompts' replies must parse: a warning when most steps did not, a stop when none did."""
        eps = list(episodes)
        steps, bad = sum(int(e.get("steps") or 0) for e in eps), sum(int(e.get("parse_failures") or 0) for e in eps)
        if steps and bad * 2 > steps:
            msg = (f"the initial prompts' replies could not be parsed in {bad} of {steps} steps: check their answer "
                   "format (the agent falls back to its default action)")
            if bad >= steps and len(eps) >= 2:
                raise RunError(msg)
            self.warn(f"warning: {msg}")

    def eval_candidate(self, cand: Candidate, split: str, seeds: Sequence[int]) -> None:
        eps = self.play(cand.fingerprint, cand.prompt_set(), seeds, split)
        if cand.id == "c0" and eps:
            self.check_parsing(eps.values())
        with self.lock:
            target = cand.records(split)  # type: ignore[arg-type]
            for s, ep in eps.items():
                if str(s) not in target:
                    rec = record_of(ep, self.adapter.score(ep))
                    cand.tokens += rec["tokens"]
                    cand.cost += rec["cost"]
                    target[str(s)] = rec

    def scores_on(self, prompts: PromptSet, seeds: Sequence[int]) -> dict[int, float]:
        """Store-backed fitness of any prompt set on training seeds (ablation-guided deletion uses it)."""
        eps = self.play(prompts.fingerprint(), prompts, seeds, "train")
        return {s: self.adapter.score(ep) for s, ep in eps.items()}

    # -- setup --------------------------------------------------------------------------------------
    def setup(self, initial: PromptSet) -> None:
        ckpt = self.run_dir / CHECKPOINT
        if self.cfg.resume:
            state = load_checkpoint(self.run_dir)
            old = state.config
            for f in IDENTITY_FIELDS:
                if getattr(old, f) != getattr(self.cfg, f):
                    raise RunError(f"cannot resume {self.run_dir}: {f} was {getattr(old, f)!r}, now "
                                   f"{getattr(self.cfg, f)!r}")
            state.config = self.cfg
            self.state = state
            done = sum(1 for g in state.generations if g.done)
            budget_stop = stopped_by_condition(state.stop_reason)
            then = Progress(calls=state.usage["calls"], tokens=state.usage["tokens"], cost=state.usage["cost"],
                            episodes=state.episodes_run, wall_s=state.wall_s)
            if state.phase != "optimize" and done < self.cfg.generations and (
                    not budget_stop or raised(self.cfg, state.stop_reason, then)):
                state.phase = "optimize"
                state.warnings.append(
                    f"warning: the test split was reported after generation {done}; this run then went on to "
                    f"{self.cfg.generations} generations, so its final test numbers come from a split that was "
                    "already looked at once")
            self._usage_base = dict(state.usage)
            self._episodes_base = state.episodes_run
            self._wall_base = state.wall_s
        else:
            if ckpt.exists():
                raise RunError(f"run directory {self.run_dir} already has a checkpoint; resume it "
                               f"(--resume {self.run_dir}) or pick another run name")
            c0 = Candidate(id="c0", fingerprint=initial.fingerprint(), prompts=initial.to_dict(), status="initial")
            self.state = RunState(config=self.cfg, candidates={"c0": c0},
                                  splits={"train": [], "validation": self.validation_seeds(),
                                          "test": self.test_seeds()})
        self.store, notes = open_run_store(self.run_dir / EPISODES_FILE, self.state, settings_digest(self.cfg))
        for line in notes:
            self.warn(line)
        if self.cfg.resume:
            # a crash after the last checkpoint: its episodes are in the store; count their usage too
            for ep in self.store.after(self.state.store_lines):
                self._episodes_base += 1
                self._usage_base["calls"] += int(ep.get("llm_calls") or 0)
                self._usage_base["tokens"] += int(ep.get("prompt_tokens") or 0) + int(ep.get("completion_tokens") or 0)
                self._usage_base["cost"] += float(ep.get("cost") or 0.0)
            for tmp in self.run_dir.glob("*.tmp"):  # half-written files of a killed process
                tmp.unlink(missing_ok=True)
        self.checkpoint()

    # -- one generation -----------------------------------------------------------------------------
    def new_generation(self, g: int) -> GenerationRecord:
        ev, ac = self.draw_train(g)
        parent = self.state.best
        rec = GenerationRecord(index=g, parent=parent.id, evidence_seeds=ev, accept_seeds=ac,
                               expert_seeds=self.draw_expert(g), mode=self.generation_mode(parent))
        with self.lock:
            self.state.generations.append(rec)
            train = set(self.state.splits.get("train", []))
            self.state.splits["train"] = sorted(train | set(ev) | set(ac))  # expert seeds: in the record
        if rec.mode == "prune":
            self.emit("note", generation=g, message=f"{parent.id} validation success {_rate(parent, 'validation')} "
                      f">= {self.cfg.prune_at:.0%}: pruning generation")
        return rec

    def generation_mode(self, parent: Candidate) -> str:
        if not self.pruning.active:
            return "mutate"
        self.eval_candidate(parent, "validation", self.validation_seeds())
        row = summarize_records(parent.validation)
        return self.pruning.mode(row["successes"], row["n"], parent.prompt_set())

    def run_generation(self, g: int) -> str | None:
        """Returns a stop reason when the budget ran out mid-generation, else None."""
        st, cfg = self.state, self.cfg
        rec = st.gen(g) or self.new_generation(g)
        parent = st.candidates[rec.parent]
        self.emit("generation_start", generation=g, generations=cfg.generations, parent=parent.id, mode=rec.mode)

        # 1. evidence about the parent
        if rec.evidence is None:
            if (why := self.budget_exceeded()):
                return why
            self.emit("phase", generation=g, text=f"parent {parent.id} on {len(rec.evidence_seeds)} evidence seeds")
            self.eval_candidate(parent, "train", rec.evidence_seeds)
            episodes = [e for s in rec.evidence_seeds if (e := self.store.get(parent.fingerprint, s)) is not None]
            self.emit("phase", generation=g, text="reflecting")
            evidence = self.adapter.make_reflective_dataset(parent.prompt_set(), episodes, generation=g,
                                                            history=st.history, expert_seeds=rec.expert_seeds,
                                                            mode=rec.mode)
            path = f"analyses/gen-{g:03d}.json"
            write_json_atomic(self.run_dir / path, {"generation": g, "parent": parent.id, "mode": rec.mode,
                                                    "evidence_seeds": rec.evidence_seeds, **evidence}, indent=1)
            rec.evidence = path
            rec.evidence_kind = evidence.get("evidence_kind")
            rec.optimizer_usage.update(evidence.get("usage") or {})
            an = evidence.get("analysis") or {}
            self.emit("note", generation=g, message=(
                f"analysis of {parent.id}: {len(an.get('proposals') or [])} proposals, "
                f"{len(an.get('failure_modes') or [])} failure modes, {len(evidence.get('signatures') or [])} "
                "behaviour signatures" if an.get("ok") else
                f"evidence: {len(evidence.get('signatures') or [])} behaviour signatures"
                + (f"; analysis unusable ({an.get('error')})" if an.get("error") and rec.mode != "prune" else "")))
            self.checkpoint()

        # 2. children
        if not rec.proposed:
            if (why := self.budget_exceeded()):
                return why
            self.emit("phase", generation=g, text="proposing")
            evidence = Evidence.of(read_json(self.run_dir / rec.evidence))
            self.propose_children(g, rec, parent, evidence)
            self.checkpoint()

        # 3. race the children against the parent on the acceptance seeds
        if not rec.raced:
            why = self.race(g, rec, parent)
            if why:
                return why
            rec.raced = True
            self.checkpoint()

        # 4. the validation gate
        if rec.gate is None:
            if (why := self.budget_exceeded()):
                return why
            self.gate(g, rec)
            self.checkpoint()

        # 5. skill library (idempotent, so a crash between the library and the checkpoint loses nothing)
        if self.skills_hook is not None and not rec.skills_applied:
            self.skills_hook(self, rec)
            rec.skills_applied = True
        rec.done = True
        self.checkpoint()
        self.emit("generation_end", generation=g, generations=cfg.generations, best=st.best_id,
                  best_validation=_rate(st.best, "validation"), usage=self.usage(),
                  episodes=self.episodes_total, elapsed_s=self.wall_s,
                  children=len(rec.children), accepted=sum(1 for c in rec.children
                                                           if st.candidates[c].status in ACCEPTED_STATUSES),
                  promoted=bool((rec.gate or {}).get("promoted")))
        return None

    def propose_children(self, g: int, rec: GenerationRecord, parent: Candidate, evidence: Evidence) -> None:
        st, cfg = self.state, self.cfg
        tried = {c.fingerprint for c in st.candidates.values()}
        archive = [(c.id, c.prompt_set()) for c in st.candidates.values()
                   if c.status in ("accepted", "promoted", "not-promoted") and c.id != parent.id]
        stats = ""
        if parent.validation:
            row = summarize_records(parent.validation)
            stats = f"validation success {row['successes']}/{row['n']} ({row['success_rate']:.0%})"
        ctx = ProposalContext(generation=g, mode=rec.mode, n=cfg.children, history=st.history, tried=tried,
                              archive=archive, archive_parent=parent.id, parent_stats=stats,
                              seed=optimizer_seed(cfg.seed, g), evidence_seeds=list(rec.evidence_seeds),
                              evaluate=self.scores_on)
        batch = self.adapter.propose(parent.prompt_set(), evidence, ctx)
        if rec.mode != "prune":  # the screen phase: children replayed on recorded states before any race
            screen_phase(self.adapter, cfg.screen, cfg.screen_states, parent.prompt_set(), evidence, batch)
        rec.optimizer_usage.update(batch.usage)
        for p in batch.proposals:
            c = Candidate(id=st.next_id(), fingerprint=p.prompts.fingerprint(), prompts=p.prompts.to_dict(),
                          parent=parent.id, generation=g, operator=p.operator, source=p.source, edit=p.edit,
                          analysis=rec.evidence, prompt_tokens_saved=p.prompt_tokens_saved, screen=p.screen)
            if p.screen is not None and not p.screen.get("keep", True) and cfg.screen == "filter":
                c.status = "screened-out"
                c.verdict = {"accepted": False, "n": 0, "mean_diff": 0.0, "reason": f"screen: {p.screen.get('reason')}"}
                st.history.append({"generation": g, "candidate": c.id, "parent": parent.id, "edit": c.edit,
                                   "operator": c.operator, "source": c.source, "outcome": "screened out before racing",
                                   "train_diff": None})
            st.candidates[c.id] = c
            rec.children.append(c.id)
        blob = read_json(self.run_dir / rec.evidence)
        blob.update(batch.record)
        blob["children"] = [{"id": cid, "operator": st.candidates[cid].operator, "edit": st.candidates[cid].edit,
                             "source": st.candidates[cid].source, "screen": st.candidates[cid].screen}
                            for cid in rec.children]
        write_json_atomic(self.run_dir / rec.evidence, blob, indent=1)
        rec.proposed = True
        ops: dict[str, int] = {}
        for cid in rec.children:
            ops[st.candidates[cid].operator] = ops.get(st.candidates[cid].operator, 0) + 1
        self.emit("note", generation=g, message=f"{len(rec.children)} children ("
                  + (", ".join(f"{k} {v}" for k, v in ops.items()) or "none") + ")"
                  + ("; " + "; ".join(batch.log) if batch.log else ""))

    def race(self, g: int, rec: GenerationRecord, parent: Candidate) -> str | None:
        st, cfg = self.state, self.cfg
        seeds = list(rec.accept_seeds)
        self.emit("phase", generation=g, text=f"parent {parent.id} on {len(seeds)} acceptance seeds")
        self.eval_candidate(parent, "train", seeds)
        parent_scores = parent.scores("train", seeds)
        alive = [st.candidates[c] for c in rec.children if st.candidates[c].verdict is None]
        schedule = race_schedule(len(seeds), cfg.race)
        for i, size in enumerate(schedule):
            batch = seeds[:size]
            for c in list(alive):
                if (why := self.budget_exceeded()):
                    return why
                self.emit("phase", generation=g, text=f"child {c.id} ({c.operator}) on {size}/{len(seeds)} seeds")
                self.eval_candidate(c, "train", batch)
                played = c.scores("train", batch)
                last = i == len(schedule) - 1
                rule, margin = self.pruning.race_rule(c, cfg.accept_rule, cfg.accept_margin)
                stop, reason = (False, "") if last else race_check(
                    played, parent_scores, seeds, rule=rule, margin=margin, alpha=cfg.alpha,
                    race_alpha=cfg.race_alpha, max_score=self.adapter.max_score)
                if stop or last:
                    self.decide(g, c, parent, played, parent_scores, stopped=reason if stop else "",
                                rounds=schedule[: i + 1])
                    alive.remove(c)
                    if stop:
                        rec.episodes_saved += len(seeds) - size
                self.checkpoint()
        return None

    def decide(self, g: int, c: Candidate, parent: Candidate, child_scores: dict[int, float],
               parent_scores: dict[int, float], *, stopped: str, rounds: list[int]) -> None:
        cfg = self.cfg
        v = self.pruning.accept(c, child_scores, parent_scores, rule=cfg.accept_rule, margin=cfg.accept_margin,
                                alpha=cfg.alpha)
        with self.lock:
            c.race = {"rounds": rounds, "stopped": stopped or None}
            c.verdict = v.to_dict()
            if stopped:
                c.status = "stopped"
                c.verdict["accepted"] = False
                c.verdict["reason"] = f"stopped early: {stopped}"
            else:
                c.status = "accepted" if v.accepted else "rejected"
            self.state.history.append({"generation": g, "candidate": c.id, "parent": parent.id, "edit": c.edit,
                                       "operator": c.operator, "source": c.source, "outcome": c.status,
                                       "train_diff": v.mean_diff})
        self.emit("candidate", generation=g, id=c.id, operator=c.operator, split="train", n=v.n,
                  mean_diff=v.mean_diff, status=c.status, reason=c.verdict["reason"],
                  edit=(c.edit or {}).get("op", "") + " " + (c.edit or {}).get("module", "") + "." +
                  (c.edit or {}).get("segment", "") if c.edit else c.operator)

    def gate(self, g: int, rec: GenerationRecord) -> None:
        st, cfg = self.state, self.cfg
        accepted = [st.candidates[c] for c in rec.children if st.candidates[c].status == "accepted"]
        if not accepted:
            rec.gate = {"candidate": None, "promoted": False, "reason": "no accepted child"}
            return
        top = self.pruning.top(accepted, rec.mode)
        best, vs = st.best, self.validation_seeds()
        level = gate_alpha(cfg.alpha, cfg.generations, cfg.correction)
        self.emit("phase", generation=g, text=f"validation gate: {top.id} vs {best.id} on {len(vs)} seeds")
        looks: dict = {}
        if cfg.gate == "sequential" and not self.pruning.applies(top) and cfg.promote_rule in ("sign", "wilcoxon"):
            verdict, looks = self.sequential_gate(top, best, vs, level)
        else:
            self.eval_candidate(best, "validation", vs)
            self.eval_candidate(top, "validation", vs)
        child_v, best_v = top.scores("validation", vs), best.scores("validation", vs)
        if looks:
            pass  # decided by the sequential gate
        elif self.pruning.applies(top):
            init, peak = st.initial, self.peak()
            self.eval_candidate(init, "validation", vs)
            refs = {"initial": init.scores("validation", vs), "peak": peak.scores("validation", vs)}
            verdict = self.pruning.keep(top.scores("validation", vs, "success"),
                                        best.scores("validation", vs, "success"), refs, alpha=level)
        else:
            verdict = promote(child_v, best_v, rule=cfg.promote_rule, alpha=level, margin=cfg.promote_margin)
        gate = {**verdict.to_dict(), **looks}
        if looks:  # the run-wide level of this gate; the look's nominal level beside it
            gate.update(alpha=level, look_alpha=verdict.alpha)
        ok = verdict.accepted
        validity = None
        if cfg.backtest and self.validity_hook is not None:
            validity = self.validity_hook(self, g, top, best, gate, run_backtest=ok)
            if validity is not None and not validity.get("ok", True):
                ok = False
        with self.lock:
            top.gate, top.validity = gate, validity
            top.status = "promoted" if ok else ("vetoed" if verdict.accepted else "not-promoted")
            for h in st.history:
                if h.get("candidate") == top.id:
                    h["outcome"] = {"promoted": "accepted and promoted",
                                    "vetoed": "passed the validation gate, vetoed by validity diagnostics",
                                    "not-promoted": "accepted on training seeds, failed the validation gate"}[top.status]
            rec.gate = {"candidate": top.id, **gate, "promoted": ok, "level": level,
                        **({"validity": validity} if validity is not None else {})}
            if ok:
                st.best_id = top.id
        self.emit("gate", generation=g, id=top.id, against=best.id, promoted=ok, reason=gate["reason"],
                  child=_rate(top, "validation"), best=_rate(best, "validation"))

    def sequential_gate(self, top: Candidate, best: Candidate, vs: list[int], level: float) -> tuple[Any, dict]:
        """The validation gate in looks (:func:`~promptevo.optim.selection.sequential_gate`): both are played
        on a growing prefix of the validation seeds, and the gate stops as soon as the evidence decides."""
        sizes = look_sizes(len(vs))
        levels = look_levels(level, [n / len(vs) for n in sizes])
        for k, n in enumerate(sizes):
            part = vs[:n]
            self.eval_candidate(best, "validation", part)
            self.eval_candidate(top, "validation", part)
            decision, verdict = sequential_gate(top.scores("validation", part), best.scores("validation", part), vs, k,
                                                levels=levels, rule=self.cfg.promote_rule,
                                                max_score=self.adapter.max_score)
            if decision != "continue":
                break
        return verdict, {"sequential": True, "looks": k + 1, "of_looks": len(sizes), "seeds_played": n,
                         "look_levels": [round(x, 6) for x in levels]}

    def peak(self) -> Candidate:
        """The candidate with the highest validation success among those played on the validation seeds."""
        played = [c for c in self.state.candidates.values() if c.validation]
        return max(played, key=lambda c: (summarize_records(c.validation)["success_rate"], -int(c.id[1:])))

    # -- whole run ----------------------------------------------------------------------------------
    def run(self, initial: PromptSet) -> RunResult:
        self.setup(initial)
        try:
            return self._run()
        except InfraFailure as e:
            st = self.state
            st.stop_reason = f"stopped: {e}"
            self.checkpoint()
            self.emit("note", generation=None, message=f"run stopped: {e}")
            self.emit("run_end", run_dir=str(self.run_dir), stop_reason=st.stop_reason, report={})
            raise RunStopped(f"{e}; nothing finished is lost: when the LLM works again, continue with "
                             f"`promptevo optimize --resume {self.run_dir}`") from None

    def _run(self) -> RunResult:
        st, cfg = self.state, self.cfg
        self.emit("run_start", run_dir=str(self.run_dir), config=cfg.model_dump(), adapter=describe(self.adapter),
                  resumed=cfg.resume, candidates=len(st.candidates),
                  splits={k: len(v) for k, v in st.splits.items()})
        if st.phase == "optimize":
            stop = ""
            for g in range(1, cfg.generations + 1):
                rec = st.gen(g)
                if rec is not None and rec.done:
                    continue
                if (why := self.budget_exceeded() or (self.converged() if g > 1 else None)):
                    stop = why
                    break
                why = self.run_generation(g)
                if why:
                    stop = why
                    break
            st.stop_reason = stop or f"completed {cfg.generations} generations"
            st.final["optimization_stop"] = st.stop_reason
            self.emit("note", generation=None, message=f"optimization stopped: {st.stop_reason}")
            st.phase = "final"
            self.checkpoint()
        elif st.stop_reason.startswith("stopped: "):  # resumed after an LLM outage in the final phase
            st.stop_reason = st.final.get("optimization_stop", f"completed {cfg.generations} generations")
        self.final_phase()
        report = self.finish(self) if self.finish is not None else {}
        st.phase = "done"
        self.checkpoint()
        self.emit("run_end", run_dir=str(self.run_dir), stop_reason=st.stop_reason, report=report)
        best = st.best
        return RunResult(self.run_dir, best.id, best.prompt_set(), report, st.stop_reason,
                         list(st.candidates.values()))

    def final_phase(self) -> None:
        """The run's last phase, all played here and recorded in the state (the report only renders it): the
        test split once for the random floor, the baseline agent, the initial and the best prompts; with
        ``ablate_best`` the best's segment ablation on validation seeds; signatures and cost per call."""
        st, cfg = self.state, self.cfg
        ts = self.test_seeds() if cfg.final_test else []
        if cfg.final_test and "floor" not in st.final:
            self.emit("phase", generation=None, text=f"test: random floor on {len(ts)} seeds")
            eps = self.play(f"floor:{FLOOR_AGENT}", None, ts, "test", agent=FLOOR_AGENT)
            st.final["floor"] = {str(s): record_of(e, self.adapter.score(e)) for s, e in eps.items()}
        if cfg.final_test:
            self.final_evaluation(cfg.baseline)
        if cfg.ablate_best and not st.final.get("ablated"):
            self.ablate_best()
            st.final["ablated"] = True
        sigs, played = {}, {}
        for who, c in (("initial", st.initial), ("best", st.best)):
            eps = [e for s in ts if (e := self.store.get(c.fingerprint, s)) is not None]
            sigs[who] = signatures_to_dict(summarize_signatures(eps, family=getattr(self.task, "family", None)))
            played[who] = (c, eps)
        st.final["signatures"] = sigs
        st.final["cost"] = cost_comparison({who: call_cost(eps) for who, (_, eps) in played.items()})
        analyse = getattr(self.adapter, "compliance", None)
        if analyse is not None and (comp := final_compliance(st.candidates, played, analyse, self.warn)):
            st.final["compliance"] = comp
        self.checkpoint()

    def ablate_best(self) -> list[dict]:
        """``--ablate``: each segment of the best prompts measured without it on the validation seeds."""
        best, vs = self.state.best, self.validation_seeds()
        self.emit("phase", generation=None, text=f"ablation of {best.id} on {len(vs)} validation seeds")

        def run(ps: PromptSet, seeds: list[int]) -> list[dict]:
            eps = self.play(ps.fingerprint(), ps, seeds, "validation")
            return [eps[s] for s in seeds if s in eps]

        rows = counterfactual_ablation(best.prompt_set(), vs, run)
        write_json_atomic(self.run_dir / "ablation.json", {"candidate": best.id, "seeds": vs, "rows": rows})
        for r in rows:
            self.emit("note", generation=None, message=f"ablation {r['module']}.{r['segment']}: success "
                      f"{r['delta_success']:+.2f}, score {r['delta_return']:+.3f} (n={r['n']})")
        return rows

    def final_evaluation(self, baseline: str | None) -> None:
        """Play the test seeds once: baseline agent, initial prompts, best prompts."""
        st = self.state
        ts = self.test_seeds()
        if baseline:
            key = f"baseline:{baseline}"
            self.emit("phase", generation=None, text=f"test: baseline {baseline} on {len(ts)} seeds")
            eps = self.play(key, None, ts, "test", agent=baseline)
            st.baseline = {"agent": baseline, "key": key,
                           "test": {str(s): record_of(e, self.adapter.score(e)) for s, e in eps.items()}}
            self.checkpoint()
        for cand, label in ((st.initial, "initial"), (st.best, "best")):
            self.emit("phase", generation=None, text=f"test: {label} {cand.id} on {len(ts)} seeds")
            self.eval_candidate(cand, "test", ts)
            self.checkpoint()


__all__ = ["FLOOR_AGENT", "Engine", "RunResult", "RunError"]
