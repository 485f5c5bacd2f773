"""The optimization loop: analyse, mutate, evaluate on paired seeds, gate on held-out seeds.

One generation (the incumbent "best" is the parent):

1. play the parent on this generation's training seeds (episodes already in the store are reused);
2. :func:`promptevo.analyzer.analyze` its episodes (optimizer role ``analyzer``);
3. :func:`promptevo.mutator.propose` ``children`` edits (role ``mutator``), with the hereditary history
   of earlier edits and outcomes;
4. play every child on the SAME training seeds and :func:`accept` or reject it against the parent by
   the paired per-seed scores;
5. play the best accepted child on the fixed held-out seeds and :func:`promote` it to best only if it
   also beats the best there (no promotion on training-seed luck).

Everything is recorded under ``results/<run>/``: ``checkpoint.json`` (archive of every candidate with
lineage, scores and decisions; written atomically after every evaluated candidate),
``episodes.jsonl`` (every finished episode keyed by candidate fingerprint and seed, so a resumed run
never re-plays one), ``analyses/gen-NNN.json`` (analysis and mutation replies), and at the end
``report.json``/``report.md`` (held-out table: baseline vs initial vs best, Wilson 95% intervals) and
``best.md``/``best.json``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from promptevo.optim.reflect.analyzer import Analysis, analyze, build_analyzer_messages, estimate_tokens
from promptevo.optim.propose.mutator import propose_detailed
from promptevo.segments import Edit, PromptFormatError, PromptSet, apply_edit

CHECKPOINT = "checkpoint.json"
EPISODES = "episodes.jsonl"
CHECKPOINT_VERSION = 1

Metric = Literal["return", "success", "progression"]
Rule = Literal["margin", "paired", "always"]


class EvolveError(RuntimeError):
    """A run cannot start or continue; ``str(e)`` is one line meant for the user."""


# =================================================================================================
# Configuration
# =================================================================================================


class EvolveConfig(BaseModel):
    """Settings of one optimization run (stored in the checkpoint; ``extra`` keys are refused)."""

    model_config = ConfigDict(extra="forbid")

    task: str
    agent: str = "two-stage"
    init: Literal["plain", "guided"] = "plain"
    prompts: str | None = Field(default=None, description="initial PromptSet file (.md/.json); overrides init")
    model: str = "local/qwen2.5-coder-1.5b"
    api_base: str | None = None
    optimizer_model: str | None = Field(default=None, description="defaults to model")
    optimizer_api_base: str | None = Field(default=None, description="defaults to api_base when the models match")
    no_cache: bool = False
    max_steps: int | None = Field(default=None, ge=1, description="cap on steps per episode (default: the "
                                  "env's own limit, BALROG's 64/128 for BabyAI)")
    agent_max_tokens: int = Field(default=512, ge=16, description="max tokens per agent LLM call")
    generations: int = Field(default=10, ge=0)
    episodes: int = Field(default=6, ge=1, description="training seeds per evaluation (paired)")
    heldout_episodes: int = Field(default=20, ge=1)
    children: int = Field(default=3, ge=1, description="children proposed per generation")
    accept_rule: Rule = "margin"
    accept_margin: float = 0.05
    alpha: float = Field(default=0.05, gt=0, lt=1)
    promote_margin: float = 0.0
    metric: Metric = "return"
    fresh_train_seeds: bool = Field(default=True, description="new training seeds every generation")
    budget_llm_calls: int | None = Field(default=None, ge=1)
    budget_tokens: int | None = Field(default=None, ge=1)
    budget_dollars: float | None = Field(default=None, gt=0)
    budget_episodes: int | None = Field(default=None, ge=1)
    concurrency: int = Field(default=4, ge=1, description="episodes played in parallel per evaluation")
    parallel_candidates: bool = True
    seed: int = 0
    baseline: str | None = Field(default="robust-cot", description="agent shown as baseline in the report")
    ablate_best: bool = Field(default=False, description="at the end, re-run held-out seeds with each segment "
                              "of the best prompts removed (counterfactual ablation)")
    max_trajectories: int = Field(default=6, ge=1)
    max_steps_shown: int = Field(default=30, ge=4)
    optimizer_temperature: float = Field(default=0.7, ge=0)
    optimizer_max_tokens: int = Field(default=2048, ge=64)
    # optional strategies (all off by default: the plain loop)
    evidence: Literal["raw", "cards", "auto"] = Field(default="raw", description="what the analyzer reads: raw "
                                                      "trajectories, evidence cards (one per outcome group), or "
                                                      "auto: cards when the raw prompt is over cards_above tokens")
    cards_above: int = Field(default=4000, ge=0, description="with evidence auto: estimated analyzer prompt "
                             "tokens over which cards replace the raw trajectories")
    prune_at: float | None = Field(default=None, ge=0, le=1, description="once the parent's held-out success "
                                   "reaches this (0: from the first generation), generations propose removing "
                                   "guidance segments instead")
    skills: str | None = Field(default=None, description="skill library file (JSON): skills from other tasks "
                               "are offered to the mutator and inserted as children; promotions are added")
    skill_children: int = Field(default=1, ge=0, description="children per generation that insert a library skill")
    backtest: bool = Field(default=False, description="before a promotion, replay the candidate on earlier "
                           "generations' seeds and run the validity diagnostics (leak, gap, behaviour)")
    backtest_episodes: int | None = Field(default=None, ge=1, description="earlier seeds replayed (default: episodes)")
    ray: bool = Field(default=False, description="play episodes as Ray tasks (also when RAY_ADDRESS is set)")
    results_dir: str = "results"
    run: str | None = Field(default=None, description="run name; default <task>-<agent>-<timestamp>")
    resume: bool = False

    def run_path(self) -> Path:
        name = self.run or f"{self.task}-{self.agent}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        p = Path(name)
        return p if (p.is_absolute() or len(p.parts) > 1) else Path(self.results_dir) / name


#: Fields that must not change when a run is resumed (they define what the stored episodes mean).
IDENTITY_FIELDS = ("task", "agent", "init", "prompts", "model", "seed", "episodes", "heldout_episodes",
                   "fresh_train_seeds", "metric", "max_steps", "agent_max_tokens")


def resolve_run_dir(run: str, results_dir: str = "results") -> Path:
    """A run folder given as a path, or as a run name under ``results_dir`` (command-line convenience)."""
    run_dir = Path(run)
    if not (run_dir / CHECKPOINT).exists() and (Path(results_dir) / run / CHECKPOINT).exists():
        run_dir = Path(results_dir) / run
    return run_dir


def load_run_config(run_dir: str | Path) -> EvolveConfig:
    """The config stored in a run's checkpoint (for ``--resume RUN`` with overrides)."""
    return EvolveConfig.model_validate(_read_checkpoint(Path(run_dir))["config"])


# =================================================================================================
# Pure selection functions
# =================================================================================================


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    rule: str
    n: int
    mean_diff: float
    wins: int
    losses: int
    ties: int
    p_value: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def sign_test_p(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(X >= wins) for X ~ Binomial(wins + losses, 1/2); ties dropped."""
    n = wins + losses
    if n == 0:
        return 1.0
    return min(1.0, sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n)


def _paired(child: dict[int, float], parent: dict[int, float]) -> list[tuple[float, float]]:
    return [(float(child[s]), float(parent[s])) for s in sorted(set(child) & set(parent))]


def accept(
    child_scores: dict[int, float],
    parent_scores: dict[int, float],
    rule: Rule = "margin",
    margin: float = 0.05,
    *,
    alpha: float = 0.05,
) -> Verdict:
    """Compare per-seed scores on the seeds both were played on.

    Rules: ``margin`` accepts when mean(child - parent) > margin; ``paired`` when the one-sided sign
    test gives p < alpha and the mean difference is > 0 (and > margin when margin > 0); ``always``
    accepts anything (ablation). No common seed -> rejected.
    """
    pairs = _paired(child_scores, parent_scores)
    n = len(pairs)
    diffs = [c - p for c, p in pairs]
    eps = 1e-12
    wins = sum(1 for d in diffs if d > eps)
    losses = sum(1 for d in diffs if d < -eps)
    ties = n - wins - losses
    mean = sum(diffs) / n if n else 0.0
    p = sign_test_p(wins, losses)
    common = {"rule": rule, "n": n, "mean_diff": mean, "wins": wins, "losses": losses, "ties": ties, "p_value": p}
    if n == 0:
        return Verdict(accepted=False, reason="no paired seeds", **common)
    if rule == "always":
        return Verdict(accepted=True, reason="always-accept", **common)
    if rule == "margin":
        ok = mean > margin + eps
        return Verdict(accepted=ok, reason=f"mean diff {mean:+.3f} {'>' if ok else '<='} margin {margin:.3f}", **common)
    if rule == "paired":
        ok = p < alpha and mean > eps
        return Verdict(
            accepted=ok,
            reason=f"sign test p={p:.3g} ({wins}W/{losses}L/{ties}T), mean diff {mean:+.3f}"
            + ("" if ok else f"; needs p<{alpha} and mean diff>0"),
            **common,
        )
    raise ValueError(f"unknown accept rule {rule!r} (use margin, paired or always)")


def promote(
    heldout_child: dict[int, float],
    heldout_best: dict[int, float],
    *,
    margin: float = 0.0,
    rule: Rule = "margin",
    alpha: float = 0.05,
) -> Verdict:
    """Held-out gate: the child replaces the best only if it beats it on the held-out seeds
    (default: mean paired difference > 0). ``always`` is not a valid promotion rule."""
    if rule == "always":
        raise ValueError("promotion needs a real test (use margin or paired)")
    return accept(heldout_child, heldout_best, rule, margin, alpha=alpha)


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    try:
        from promptevo.evaluation.statistics import wilson_interval as _w

        lo, hi = _w(successes, n, z)
        return float(lo), float(hi)
    except ImportError:  # pragma: no cover - scoring.py is part of the package
        if n == 0:
            return (0.0, 1.0)
        ph = successes / n
        den = 1 + z * z / n
        c = (ph + z * z / (2 * n)) / den
        h = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
        return (max(0.0, c - h), min(1.0, c + h))


def score_of(ep: dict, metric: Metric) -> float:
    if metric == "success":
        return float(bool(ep.get("success")))
    if metric == "progression":
        return float(ep.get("progression") or 0.0)
    return float(ep.get("return_", ep.get("return", 0.0)) or 0.0)


def summarize_scores(scores: dict[str, dict]) -> dict:
    """Table row from per-seed records {seed: {"success","return","progression","tokens","cost"}}."""
    n = len(scores)
    succ = sum(1 for v in scores.values() if v.get("success"))
    lo, hi = wilson_interval(succ, n)
    mean = lambda k: (sum(float(v.get(k) or 0.0) for v in scores.values()) / n) if n else 0.0  # noqa: E731
    return {
        "n": n,
        "successes": succ,
        "success_rate": succ / n if n else 0.0,
        "ci95": [lo, hi],
        "mean_return": mean("return"),
        "mean_progression": mean("progression"),
        "tokens": int(sum(int(v.get("tokens") or 0) for v in scores.values())),
        "cost": float(sum(float(v.get("cost") or 0.0) for v in scores.values())),
    }


# =================================================================================================
# Episode store and checkpoint
# =================================================================================================


def _result_dict(r: Any) -> dict:
    if isinstance(r, dict):
        return dict(r)
    if hasattr(r, "to_dict"):
        return r.to_dict()
    return asdict(r)


def episode_from_dict(d: dict) -> Any:
    """An EpisodeResult (or a namespace with the same fields if rollout is unavailable)."""
    try:
        from promptevo.evaluation.rollout import EpisodeResult

        return EpisodeResult.from_dict(d)
    except (ImportError, TypeError, KeyError, ValueError):
        return SimpleNamespace(**d)


def _record(ep: dict) -> dict:
    """Compact per-seed record kept in the checkpoint."""
    return {
        "success": bool(ep.get("success")),
        "return": float(ep.get("return_", ep.get("return", 0.0)) or 0.0),
        "progression": float(ep.get("progression") or 0.0),
        "steps": int(ep.get("steps") or 0),
        "tokens": int(ep.get("prompt_tokens") or 0) + int(ep.get("completion_tokens") or 0),
        "cost": float(ep.get("cost") or 0.0),
    }


class EpisodeStore:
    """Append-only JSONL of finished episodes keyed by (candidate key, seed). Thread-safe."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[tuple[str, int], dict] = {}
        if path.exists():
            lines = path.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    key, seed, result = rec["key"], int(rec["seed"]), rec["result"]
                except (ValueError, KeyError, TypeError) as e:
                    if i == len(lines):  # a line cut short by a crash: that episode is simply re-run
                        continue
                    raise EvolveError(f"{path}:{i}: corrupt episode record ({e}); remove the line to continue") from None
                self._data[(key, seed)] = result

    def get(self, key: str, seed: int) -> dict | None:
        """A finished episode (one that aborted on an LLM error does not count)."""
        with self._lock:
            ep = self._data.get((key, int(seed)))
        return ep if ep is not None and not ep.get("error") else None

    def put(self, key: str, seed: int, result: Any) -> dict:
        d = _result_dict(result)
        with self._lock:
            if (key, int(seed)) in self._data and not self._data[(key, int(seed))].get("error"):
                return self._data[(key, int(seed))]
            self._data[(key, int(seed))] = d
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "seed": int(seed), "result": d}, ensure_ascii=False, default=str) + "\n")
                f.flush()
        return d

    def has(self, key: str, seed: int) -> bool:
        """True when any record (finished or aborted) exists for (key, seed)."""
        with self._lock:
            return (key, int(seed)) in self._data

    def __len__(self) -> int:
        return len(self._data)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _read_checkpoint(run_dir: Path) -> dict:
    path = run_dir / CHECKPOINT
    if not path.exists():
        raise EvolveError(f"no checkpoint to resume: {path} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION or "candidates" not in data:
            raise ValueError("not a promptevo checkpoint (version or candidates missing)")
        EvolveConfig.model_validate(data["config"])
    except (ValueError, KeyError, TypeError, ValidationError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise EvolveError(f"corrupt checkpoint {path}: {msg}") from None
    return data


# =================================================================================================
# Budget / usage
# =================================================================================================


def usage_totals(snapshot: Any) -> dict:
    """{calls, tokens, cost} from a gateway ``usage.snapshot()`` (total entry or the sum of roles)."""
    out = {"calls": 0, "tokens": 0, "cost": 0.0}
    if not isinstance(snapshot, dict):
        return out
    entries = [snapshot["total"]] if isinstance(snapshot.get("total"), dict) else [
        v for v in (snapshot.get("roles") or snapshot).values() if isinstance(v, dict)
    ]
    for e in entries:
        out["calls"] += int(e.get("calls") or 0)
        out["tokens"] += int(e.get("prompt_tokens") or 0) + int(e.get("completion_tokens") or 0)
        out["cost"] += float(e.get("cost") or 0.0)
    return out


def _gateway_usage(gw: Any) -> dict:
    u = getattr(gw, "usage", None)
    snap = u.snapshot() if u is not None and hasattr(u, "snapshot") else {}
    return usage_totals(snap)


# =================================================================================================
# Run state
# =================================================================================================


@dataclass
class Candidate:
    id: str
    fingerprint: str
    prompts: dict
    parent: str | None = None
    generation: int = 0
    edit: dict | None = None
    analysis: str | None = None  # path of the analysis file (relative to the run dir)
    train: dict[str, dict] = field(default_factory=dict)  # seed -> record
    heldout: dict[str, dict] = field(default_factory=dict)
    verdict: dict | None = None  # training-seed acceptance against the parent
    promotion: dict | None = None  # held-out gate
    status: str = "new"  # new | accepted | rejected | promoted | not-promoted | vetoed | error
    tokens: int = 0
    cost: float = 0.0
    kind: str = "mutation"  # mutation | prune | skill
    skill: str | None = None  # library skill id (kind "skill")
    prompt_tokens_saved: int | None = None  # prune children: static prompt tokens removed
    validity: dict | None = None  # --backtest: backtest + validity diagnostics before promotion

    def prompt_set(self) -> PromptSet:
        return PromptSet.from_dict(self.prompts)

    def scores(self, split: str, metric: Metric, seeds: Sequence[int] | None = None) -> dict[int, float]:
        recs = self.train if split == "train" else self.heldout
        out = {int(s): score_of({"success": r["success"], "return_": r["return"], "progression": r["progression"]}, metric)
               for s, r in recs.items()}
        return {s: v for s, v in out.items() if seeds is None or s in set(seeds)}


@dataclass
class RunResult:
    run_dir: Path
    best_id: str
    best_prompts: PromptSet
    report: dict
    stop_reason: str
    candidates: list[Candidate]


class _State:
    def __init__(self, config: EvolveConfig, run_dir: Path):
        self.config = config
        self.run_dir = run_dir
        self.candidates: dict[str, Candidate] = {}
        self.generations: list[dict] = []
        self.history: list[dict] = []
        self.initial_id = ""
        self.best_id = ""
        self.baseline: dict = {}
        self.usage_prior = {"calls": 0, "tokens": 0, "cost": 0.0}
        self.episodes_run_prior = 0
        self.stop_reason = ""
        self.created = time.time()

    def to_dict(self, usage_now: dict, episodes_run: int) -> dict:
        return {
            "version": CHECKPOINT_VERSION,
            "created": self.created,
            "updated": time.time(),
            "config": self.config.model_dump(),
            "initial_id": self.initial_id,
            "best_id": self.best_id,
            "baseline": self.baseline,
            "candidates": [asdict(c) for c in self.candidates.values()],
            "generations": self.generations,
            "history": self.history,
            "usage": usage_now,
            "episodes_run": episodes_run,
            "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_dict(cls, data: dict, config: EvolveConfig, run_dir: Path) -> "_State":
        st = cls(config, run_dir)
        try:
            for c in data["candidates"]:
                st.candidates[c["id"]] = Candidate(**c)
            st.generations = list(data.get("generations") or [])
            st.history = list(data.get("history") or [])
            st.initial_id = data["initial_id"]
            st.best_id = data["best_id"]
            st.baseline = dict(data.get("baseline") or {})
            st.usage_prior = dict(data.get("usage") or st.usage_prior)
            st.episodes_run_prior = int(data.get("episodes_run") or 0)
            st.created = float(data.get("created") or time.time())
            if st.initial_id not in st.candidates or st.best_id not in st.candidates:
                raise KeyError("initial_id/best_id not among candidates")
        except (KeyError, TypeError, ValueError) as e:
            raise EvolveError(f"corrupt checkpoint {run_dir / CHECKPOINT}: {e}") from None
        return st

    def gen(self, g: int) -> dict | None:
        for rec in self.generations:
            if rec["index"] == g:
                return rec
        return None


# =================================================================================================
# Progress display
# =================================================================================================


class _Display:
    def __init__(self, console: Any, quiet: bool):
        self.quiet = quiet
        self.console = console
        self.progress = None
        self.task_id = None
        if quiet:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=self.console, transient=False,
        )
        self.task_id = self.progress.add_task("starting", total=None)
        self.progress.start()

    def log(self, msg: str) -> None:
        if self.quiet:
            return
        self.progress.console.print(msg, markup=False, highlight=False)  # type: ignore[union-attr]

    def status(self, text: str, advance: int = 0) -> None:
        if self.quiet:
            return
        self.progress.update(self.task_id, description=text, advance=advance)  # type: ignore[union-attr]

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


# =================================================================================================
# The loop
# =================================================================================================

AgentBuilder = Callable[[str, "PromptSet | None"], Callable[[], Any]]
Runner = Callable[..., list[Any]]


class _Optimizer:
    def __init__(
        self,
        config: EvolveConfig,
        *,
        agent_gateway: Any,
        optimizer_gateway: Any,
        task: Any,
        agent_builder: AgentBuilder,
        runner: Runner,
        env_instructions: str,
        console: Any,
        quiet: bool,
    ):
        self.cfg = config
        self.agent_gw = agent_gateway
        self.opt_gw = optimizer_gateway
        self.task = task
        self.build = agent_builder
        self.runner = runner
        self.env_instructions = env_instructions
        self.run_dir = config.run_path()
        self.lock = threading.RLock()
        self.episodes_run = 0
        self._status_text = ""
        self.display = _Display(console, quiet)
        self.store: EpisodeStore
        self.state: _State
        self._skills: Any = None

    # -- usage & budget ---------------------------------------------------------------------------
    def usage(self) -> dict:
        now = {"calls": 0, "tokens": 0, "cost": 0.0}
        gws = [self.agent_gw] + ([self.opt_gw] if self.opt_gw is not self.agent_gw else [])
        for gw in gws:
            if gw is None:
                continue
            u = _gateway_usage(gw)
            for k in now:
                now[k] += u[k]
        prior = self.state.usage_prior
        return {k: prior.get(k, 0) + now[k] for k in now}

    def budget_exceeded(self) -> str | None:
        c, u = self.cfg, self.usage()
        if c.budget_llm_calls is not None and u["calls"] >= c.budget_llm_calls:
            return f"LLM-call budget reached ({u['calls']} >= {c.budget_llm_calls})"
        if c.budget_tokens is not None and u["tokens"] >= c.budget_tokens:
            return f"token budget reached ({u['tokens']} >= {c.budget_tokens})"
        if c.budget_dollars is not None and u["cost"] >= c.budget_dollars:
            return f"dollar budget reached (${u['cost']:.4f} >= ${c.budget_dollars})"
        total_eps = self.state.episodes_run_prior + self.episodes_run
        if c.budget_episodes is not None and total_eps >= c.budget_episodes:
            return f"episode budget reached ({total_eps} >= {c.budget_episodes})"
        return None

    # -- persistence ------------------------------------------------------------------------------
    def checkpoint(self) -> None:
        with self.lock:
            data = self.state.to_dict(self.usage(), self.state.episodes_run_prior + self.episodes_run)
            _atomic_write(self.run_dir / CHECKPOINT, json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n")

    def _status(self, gen: int, what: str) -> None:
        u = self.usage()
        best = self.state.candidates.get(self.state.best_id)
        best_s = ""
        if best is not None and best.heldout:
            row = summarize_scores(best.heldout)
            best_s = f" | best {best.id} held-out {row['success_rate']:.0%}"
        self._status_text = f"gen {gen}/{self.cfg.generations} | {what}{best_s} | tok {u['tokens']:,} | ${u['cost']:.4f}"
        self.display.status(self._status_text)

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self, key: str, agent_name: str, prompts: PromptSet | None, seeds: Sequence[int]) -> dict[int, dict]:
        """Per-seed episode dicts for ``key`` on ``seeds``; plays only the ones not in the store."""
        out: dict[int, dict] = {}
        missing = []
        for s in seeds:
            ep = self.store.get(key, s)
            if ep is None:
                missing.append(int(s))
            else:
                out[int(s)] = ep
        if missing:
            factory = self.build(agent_name, prompts)

            def on_result(r: Any) -> None:
                d = _result_dict(r)
                self.store.put(key, int(d["seed"]), d)
                with self.lock:
                    self.episodes_run += 1
                self.display.status(self._status_text, advance=1)

            results = self.runner(self.task, factory, missing, concurrency=self.cfg.concurrency, on_result=on_result)
            for r in results:
                d = _result_dict(r)
                seed = int(d["seed"])
                if not self.store.has(key, seed):  # the runner did not report it through on_result
                    with self.lock:
                        self.episodes_run += 1
                    self.store.put(key, seed, d)
                out[seed] = d
        return out

    def eval_candidate(self, cand: Candidate, split: str, seeds: Sequence[int]) -> None:
        eps = self.evaluate(cand.fingerprint, self.cfg.agent, cand.prompt_set(), seeds)
        with self.lock:
            target = cand.train if split == "train" else cand.heldout
            for s, ep in eps.items():
                if ep.get("error"):
                    continue  # aborted on an LLM error: left out of the comparison
                rec = _record(ep)
                if str(s) not in target:
                    cand.tokens += rec["tokens"]
                    cand.cost += rec["cost"]
                target[str(s)] = rec

    # -- seeds ------------------------------------------------------------------------------------
    def train_seeds(self, g: int) -> list[int]:
        pool = self.task.seed_list("train")
        n = min(self.cfg.episodes, len(pool))
        span = max(1, len(pool) - n + 1)
        offset = (self.cfg.seed * 7919 + ((g - 1) * n if self.cfg.fresh_train_seeds else 0)) % span
        return pool[offset : offset + n]

    def heldout_seeds(self) -> list[int]:
        pool = self.task.seed_list("heldout")
        return pool[: min(self.cfg.heldout_episodes, len(pool))]

    # -- setup ------------------------------------------------------------------------------------
    def setup(self, initial: PromptSet) -> None:
        ckpt = self.run_dir / CHECKPOINT
        if self.cfg.resume:
            data = _read_checkpoint(self.run_dir)
            old = EvolveConfig.model_validate(data["config"])
            for f in IDENTITY_FIELDS:
                if getattr(old, f) != getattr(self.cfg, f):
                    raise EvolveError(
                        f"cannot resume {self.run_dir}: {f} was {getattr(old, f)!r}, now {getattr(self.cfg, f)!r}"
                    )
            self.state = _State.from_dict(data, self.cfg, self.run_dir)
        else:
            if ckpt.exists():
                raise EvolveError(f"run directory {self.run_dir} already has a checkpoint; resume it or pick another run name")
            self.state = _State(self.cfg, self.run_dir)
            c0 = Candidate(id="c0", fingerprint=initial.fingerprint(), prompts=initial.to_dict(), status="initial")
            self.state.candidates[c0.id] = c0
            self.state.initial_id = self.state.best_id = c0.id
        self.store = EpisodeStore(self.run_dir / EPISODES)
        self.checkpoint()

    def next_id(self) -> str:
        return f"c{len(self.state.candidates)}"

    # -- one generation ---------------------------------------------------------------------------
    def run_generation(self, g: int) -> str | None:
        """Returns a stop reason when the budget ran out mid-generation, else None."""
        st, cfg = self.state, self.cfg
        rec = st.gen(g)
        if rec is None:
            rec = {"index": g, "parent": st.best_id, "seeds": self.train_seeds(g), "analysis": None,
                   "children": [], "proposed": False, "promotion": None, "done": False}
            st.generations.append(rec)
        parent = st.candidates[rec["parent"]]
        seeds = rec["seeds"]
        if "mode" not in rec:
            rec["mode"] = self.generation_mode(parent)
            if rec["mode"] == "prune":
                row = summarize_scores(parent.heldout)
                self.display.log(f"[gen {g}] {parent.id} held-out success {row['success_rate']:.0%} >= "
                                 f"{cfg.prune_at:.0%}: pruning generation")
        usage_rec = rec.setdefault("optimizer_usage", {})

        # 1. parent on training seeds
        self._status(g, f"parent {parent.id}")
        self.eval_candidate(parent, "train", seeds)
        self.checkpoint()

        # 2. analysis (evidence cards first when asked); a pruning generation needs no diagnosis
        if rec["analysis"] is None:
            if (why := self.budget_exceeded()):
                return why
            path = f"analyses/gen-{g:03d}.json"
            blob: dict[str, Any] = {"generation": g, "parent": parent.id, "mode": rec["mode"]}
            if rec["mode"] == "prune":
                analysis = Analysis(ok=False, error="pruning generation: no diagnosis needed",
                                    prompt_fingerprint=parent.fingerprint)
            else:
                episodes = [episode_from_dict(self.store.get(parent.fingerprint, s) or {}) for s in seeds
                            if self.store.get(parent.fingerprint, s) is not None]
                cards = None
                kind = choose_evidence(cfg.evidence, cfg.cards_above, self._raw_prompt_tokens(parent, episodes)
                                       if cfg.evidence == "auto" else None)
                blob["evidence"] = rec["evidence"] = kind
                if kind == "cards":
                    from promptevo.optim.reflect.cards import build_cards

                    self._status(g, "evidence cards")
                    cards = build_cards(
                        parent.prompt_set(), episodes, self.opt_gw, env_instructions=self.env_instructions,
                        temperature=cfg.optimizer_temperature, max_tokens=min(1024, cfg.optimizer_max_tokens),
                        seed=cfg.seed * 1000 + g,
                    )
                    blob["cards"] = cards.to_dict()
                    usage_rec["cards"] = dict(cards.usage)
                    self.display.log(f"[gen {g}] {len(cards.cards)} evidence cards"
                                     + ("" if cards.ok else f" (from statistics only: {cards.error})"))
                self._status(g, "analysing")
                analysis = analyze(
                    parent.prompt_set(), episodes, self.opt_gw,
                    max_trajectories=cfg.max_trajectories, max_steps_shown=cfg.max_steps_shown,
                    env_instructions=self.env_instructions, history=st.history,
                    temperature=cfg.optimizer_temperature, max_tokens=cfg.optimizer_max_tokens,
                    seed=cfg.seed * 1000 + g, evidence=cards,
                )
                usage_rec["analyzer"] = dict(analysis.usage)
                self.display.log(
                    f"[gen {g}] analysis of {parent.id}: "
                    + (f"{len(analysis.proposals)} proposals, {len(analysis.failure_modes)} failure modes" if analysis.ok
                       else f"unusable ({analysis.error})")
                )
            blob["analysis"] = json.loads(analysis.to_json())
            _atomic_write(self.run_dir / path, json.dumps(blob, indent=1) + "\n")
            rec["analysis"] = path
            self.checkpoint()
        analysis = Analysis.model_validate(json.loads((self.run_dir / rec["analysis"]).read_text())["analysis"])

        # 3. mutation: pruning edits, or skill insertions plus the mutator's edits
        if not rec["proposed"]:
            if (why := self.budget_exceeded()):
                return why
            self.propose_children(g, rec, parent, analysis)
            self.checkpoint()

        # 4. children on the same training seeds
        parent_scores = parent.scores("train", cfg.metric, seeds)
        todo = [st.candidates[cid] for cid in rec["children"] if st.candidates[cid].verdict is None]
        stop: list[str] = []

        def run_child(c: Candidate) -> None:
            if stop:
                return
            if (why := self.budget_exceeded()):
                stop.append(why)
                return
            self._status(g, f"child {c.id} ({Edit(**c.edit).describe() if c.edit else ''})")
            self.eval_candidate(c, "train", seeds)
            if c.kind == "prune":  # a removal only has to do no worse on the training seeds
                v = accept(c.scores("train", cfg.metric, seeds), parent_scores, "margin", -cfg.accept_margin)
            else:
                v = accept(c.scores("train", cfg.metric, seeds), parent_scores, cfg.accept_rule, cfg.accept_margin,
                           alpha=cfg.alpha)
            with self.lock:
                c.verdict = v.to_dict()
                c.status = "accepted" if v.accepted else "rejected"
                st.history.append({"generation": g, "candidate": c.id, "parent": parent.id, "edit": c.edit,
                                   "outcome": c.status, "train_diff": v.mean_diff})
            self.display.log(f"[gen {g}] {c.id} {Edit(**c.edit).describe() if c.edit else ''}: "
                             f"{c.status} ({v.reason})")
            self.checkpoint()

        if cfg.parallel_candidates and len(todo) > 1:
            with ThreadPoolExecutor(max_workers=len(todo)) as ex:
                for f in [ex.submit(run_child, c) for c in todo]:
                    f.result()
        else:
            for c in todo:
                run_child(c)
        if stop:
            return stop[0]

        # 5. held-out gate (and, with --backtest, backtest + validity diagnostics) for the best accepted child
        if rec["promotion"] is None:
            accepted = [st.candidates[cid] for cid in rec["children"] if st.candidates[cid].status == "accepted"]
            if accepted:
                if (why := self.budget_exceeded()):
                    return why
                if rec["mode"] == "prune":  # the removal that saves the most prompt tokens
                    top = max(accepted, key=lambda c: (c.prompt_tokens_saved or 0, c.verdict["mean_diff"], -int(c.id[1:])))
                else:
                    top = max(accepted, key=lambda c: (c.verdict["mean_diff"], -int(c.id[1:])))
                best = st.candidates[st.best_id]
                hs = self.heldout_seeds()
                self._status(g, f"held-out check of {top.id}")
                self.eval_candidate(best, "heldout", hs)
                self.eval_candidate(top, "heldout", hs)
                child_h, best_h = top.scores("heldout", cfg.metric, hs), best.scores("heldout", cfg.metric, hs)
                if top.kind == "prune":
                    from promptevo.optim.propose.pruner import prune_keep

                    pv = prune_keep(top.scores("heldout", "success", hs), best.scores("heldout", "success", hs))
                    gate = {"accepted": pv.accepted, "reason": pv.reason, "rule": "prune-within-interval",
                            **{k: v for k, v in pv.to_dict().items() if k not in ("accepted", "reason", "rule")}}
                else:
                    gate = promote(child_h, best_h, margin=cfg.promote_margin, alpha=cfg.alpha).to_dict()
                ok = bool(gate["accepted"])
                validity = None
                if cfg.backtest:
                    if (why := self.budget_exceeded()):
                        return why
                    validity = self.validity_report(g, top, best, gate, run_backtest=ok)
                    if not validity["ok"]:
                        ok = False
                with self.lock:
                    top.promotion = gate
                    top.validity = validity
                    top.status = "promoted" if ok else ("vetoed" if gate["accepted"] else "not-promoted")
                    outcome = {"promoted": "accepted and promoted",
                               "vetoed": "passed held-out check, vetoed by validity diagnostics",
                               "not-promoted": "accepted on training seeds, failed held-out check"}[top.status]
                    for h in st.history:
                        if h.get("candidate") == top.id:
                            h["outcome"] = outcome
                    rec["promotion"] = {"candidate": top.id, **gate, "promoted": ok,
                                        **({"validity": validity} if validity is not None else {})}
                    if ok:
                        st.best_id = top.id
                veto_s = ""
                if validity is not None and not validity["ok"]:
                    veto_s = " | vetoed: " + "; ".join(f"{v['check']}: {v['reason']}" for v in validity["vetoes"])
                self.display.log(f"[gen {g}] held-out check {top.id} vs {best.id}: "
                                 f"{'PROMOTED' if ok else 'not promoted'} ({gate['reason']}){veto_s}")
            else:
                rec["promotion"] = {"candidate": None, "accepted": False, "promoted": False, "reason": "no accepted child"}
            self.update_skills(g, rec)
        rec["done"] = True
        self.checkpoint()
        return None

    # -- strategies -------------------------------------------------------------------------------
    def _raw_prompt_tokens(self, parent: "Candidate", episodes: list) -> int:
        """Estimated tokens of the analyzer prompt with raw trajectories (for ``evidence = auto``)."""
        cfg = self.state.config
        msgs, _ = build_analyzer_messages(
            parent.prompt_set(), episodes, env_instructions=self.env_instructions, history=self.state.history,
            max_trajectories=cfg.max_trajectories, max_steps_shown=cfg.max_steps_shown)
        return estimate_tokens(msgs)

    def generation_mode(self, parent: Candidate) -> str:
        """``prune`` once the parent's held-out success reaches ``prune_at`` (scaffold pruning), else ``mutate``."""
        if self.cfg.prune_at is None or not parent.heldout:
            return "mutate"
        from promptevo.optim.propose.pruner import competent, prunable_segments

        row = summarize_scores(parent.heldout)
        if competent(row["successes"], row["n"], self.cfg.prune_at) and prunable_segments(parent.prompt_set()):
            return "prune"
        return "mutate"

    def propose_children(self, g: int, rec: dict, parent: Candidate, analysis: Analysis) -> None:
        st, cfg = self.state, self.cfg
        parent_ps = parent.prompt_set()
        tried = {c.fingerprint for c in st.candidates.values()}
        new: list[tuple[Edit, str, str | None]] = []  # (edit, kind, skill id)
        blob_key, props = "mutation", None
        if rec["mode"] == "prune":
            from promptevo.optim.propose.pruner import propose_prunes

            self._status(g, "pruning")
            row = summarize_scores(parent.heldout)
            props = propose_prunes(
                parent_ps, self.opt_gw, n=cfg.children, history=st.history, tried=tried,
                stats=f"held-out success {row['successes']}/{row['n']} ({row['success_rate']:.0%}), "
                      f"mean return {row['mean_return']:.3f}",
                env_instructions=self.env_instructions, temperature=cfg.optimizer_temperature,
                max_tokens=min(1024, cfg.optimizer_max_tokens), seed=cfg.seed * 1000 + g,
            )
            rec["optimizer_usage"]["pruner"] = dict(props.usage)
            new = [(e, "prune", None) for e in props.edits]
            blob_key = "pruning"
        else:
            skills_text = None
            if cfg.skills:
                from promptevo.optim.propose.skills import render, skill_edit

                lib = self.skill_library()
                family = getattr(self.task, "family", None) or ""
                chosen = lib.select(cfg.task, family, parent_ps, k=3)
                if chosen:
                    skills_text = render(chosen)
                for sk in chosen:
                    if len(new) >= min(cfg.skill_children, cfg.children):
                        break
                    e = skill_edit(sk, parent_ps)
                    child_ps = apply_edit(parent_ps, e)
                    if child_ps.fingerprint() in tried:
                        continue
                    tried.add(child_ps.fingerprint())
                    new.append((e, "skill", sk.id))
            n_llm = cfg.children - len(new)
            if n_llm > 0:
                self._status(g, "mutating")
                props = propose_detailed(
                    parent_ps, analysis, self.opt_gw, n=n_llm, history=st.history, tried=tried,
                    env_instructions=self.env_instructions, temperature=cfg.optimizer_temperature,
                    max_tokens=cfg.optimizer_max_tokens, seed=cfg.seed * 1000 + g, skills=skills_text,
                )
                rec["optimizer_usage"]["mutator"] = dict(props.usage)
                new += [(e, "mutation", None) for e in props.edits]
        parent_tokens = None
        if rec["mode"] == "prune":
            from promptevo.optim.propose.pruner import prompt_tokens

            parent_tokens = prompt_tokens(parent_ps)
        for e, kind, sid in new:
            child_ps = apply_edit(parent_ps, e)
            c = Candidate(id=self.next_id(), fingerprint=child_ps.fingerprint(), prompts=child_ps.to_dict(),
                          parent=parent.id, generation=g, edit=e.to_dict(), analysis=rec["analysis"], kind=kind,
                          skill=sid)
            if parent_tokens is not None:
                from promptevo.optim.propose.pruner import prompt_tokens

                c.prompt_tokens_saved = parent_tokens - prompt_tokens(child_ps)
            st.candidates[c.id] = c
            rec["children"].append(c.id)
        apath = self.run_dir / rec["analysis"]
        blob = json.loads(apath.read_text())
        if props is not None:
            blob[blob_key] = props.to_dict()
        blob["children"] = [{"id": cid, "kind": st.candidates[cid].kind, "skill": st.candidates[cid].skill}
                            for cid in rec["children"]]
        _atomic_write(apath, json.dumps(blob, indent=1) + "\n")
        rec["proposed"] = True
        n_skill = sum(1 for _, k, _ in new if k == "skill")
        self.display.log(
            f"[gen {g}] {len(new)} children: " + ", ".join(e.describe() for e, _, _ in new)
            + (f" ({n_skill} from the skill library)" if n_skill else "")
            + (f" ({len(props.rejected)} edits rejected)" if props is not None and props.rejected else "")
            + (f" [{blob_key}: {props.error}]" if props is not None and props.error and not new else "")
        )

    def skill_library(self) -> Any:
        from promptevo.optim.propose.skills import SkillLibrary, SkillLibraryError

        if self._skills is None:
            try:
                self._skills = SkillLibrary.load(self.cfg.skills)
            except SkillLibraryError as e:
                raise EvolveError(str(e)) from None
        return self._skills

    def update_skills(self, g: int, rec: dict) -> None:
        """Store a promoted edit as a skill; record how library skills tried this generation fared."""
        if not self.cfg.skills:
            return
        st, cfg = self.state, self.cfg
        lib = self.skill_library()
        family = getattr(self.task, "family", None) or ""
        run = self.run_dir.name
        changed = False
        for cid in rec["children"]:
            c = st.candidates[cid]
            if c.kind == "skill" and c.skill and c.skill in lib:
                gain = (c.promotion or {}).get("mean_diff", (c.verdict or {}).get("mean_diff"))
                lib.record_use(c.skill, cfg.task, run, c.status, gain)
                changed = True
        prom = rec.get("promotion") or {}
        top = st.candidates.get(prom.get("candidate") or "")
        if top is not None and prom.get("promoted") and top.kind == "mutation" and top.edit:
            sk = lib.from_promotion(top.edit, cfg.task, family, run, heldout_gain=float(prom.get("mean_diff") or 0.0),
                                    n=int(prom.get("n") or 0), train_gain=(top.verdict or {}).get("mean_diff"))
            if sk is not None:
                self.display.log(f"[gen {g}] skill {sk.id} added to {cfg.skills} ({top.edit.get('module')}."
                                 f"{top.edit.get('segment')}, held-out gain {sk.gain:+.3f})")
                changed = True
        if changed:
            lib.save(cfg.skills)

    def validity_report(self, g: int, top: Candidate, best: Candidate, gate: dict, *, run_backtest: bool) -> dict:
        """EvoTrainer-style checks before a promotion: the candidate replayed on earlier generations'
        seeds (backtest, only when the held-out gate passed), a leak check of the edit against the
        training missions, the train/held-out generalization gap and behaviour on the held-out seeds."""
        from promptevo.optim.diagnostics import backtest_seeds, missions, validity

        cfg = self.cfg
        rec = self.state.gen(g) or {}
        bt_child = bt_best = None
        bt_seeds: list[int] = []
        if run_backtest:
            bt_seeds = backtest_seeds(best.train, rec.get("seeds", []), limit=cfg.backtest_episodes or cfg.episodes)
            if bt_seeds:
                self._status(g, f"backtest of {top.id} on {len(bt_seeds)} earlier seeds")
                self.eval_candidate(top, "train", bt_seeds)
                bt_child = top.scores("train", cfg.metric, bt_seeds)
                bt_best = best.scores("train", cfg.metric, bt_seeds)
        train_eps = [e for s in sorted(int(x) for x in best.train) if (e := self.store.get(best.fingerprint, s))]
        hs = self.heldout_seeds()
        child_h = [e for s in hs if (e := self.store.get(top.fingerprint, s))]
        best_h = [e for s in hs if (e := self.store.get(best.fingerprint, s))]
        edit = top.edit or {}
        report = validity(
            edit_text=(edit.get("text") or "") if edit.get("op") != "delete" else None,
            parent_text=_prompt_text(best),
            train_missions=missions(train_eps), heldout_missions=missions(best_h),
            train_diff=(top.verdict or {}).get("mean_diff") if top.kind != "prune" else None,
            heldout_diff=gate.get("mean_diff") if top.kind != "prune" else None,
            min_train_gain=max(cfg.accept_margin, 1e-9),
            backtest_child=bt_child, backtest_best=bt_best,
            child_episodes=child_h, parent_episodes=best_h,
        )
        out = report.to_dict()
        out["backtest_seeds"] = bt_seeds
        out.setdefault("ok", report.ok)
        return out

    # -- counterfactual ablation of the best prompts ----------------------------------------------
    def ablate(self, cand: Candidate) -> list[dict]:
        """Held-out seeds with each segment of ``cand`` removed; episodes go through the store."""
        from promptevo.optim.reflect.analyzer import counterfactual_ablation

        hs = self.heldout_seeds()
        self._status(self.cfg.generations, f"ablation of {cand.id}")
        opt = self

        class _Factory:
            def __init__(self, ps: PromptSet):
                self.prompts = ps
                self._make = opt.build(opt.cfg.agent, ps)

            def __call__(self) -> Any:
                return self._make()

        def run(task: Any, factory: Any, seeds: Sequence[int], concurrency: int = 4) -> list[Any]:
            ps = factory.prompts
            eps = opt.evaluate(ps.fingerprint(), opt.cfg.agent, ps, seeds)
            return [episode_from_dict(eps[int(s)]) for s in seeds if int(s) in eps]

        rows = counterfactual_ablation(cand.prompt_set(), self.task, _Factory, hs, run=run,
                                       concurrency=self.cfg.concurrency)
        _atomic_write(self.run_dir / "ablation.json",
                      json.dumps({"candidate": cand.id, "seeds": hs, "rows": rows}, indent=1) + "\n")
        for r in rows:
            self.display.log(f"ablation {r['module']}.{r['segment']}: success {r['delta_success']:+.2f}, "
                             f"return {r['delta_return']:+.3f} (n={r['n']})")
        self.checkpoint()
        return rows

    # -- whole run --------------------------------------------------------------------------------
    def run(self, initial: PromptSet) -> RunResult:
        self.setup(initial)
        st, cfg = self.state, self.cfg
        try:
            self.display.log(f"run {self.run_dir} | task {cfg.task} | agent {cfg.agent} | "
                             f"{len(st.candidates)} candidates so far")
            # initial prompts and baseline on the held-out seeds (the report's reference rows)
            hs = self.heldout_seeds()
            init = st.candidates[st.initial_id]
            self._status(0, "initial on held-out")
            self.eval_candidate(init, "heldout", hs)
            self.checkpoint()
            if cfg.baseline:
                key = f"baseline:{cfg.baseline}"
                self._status(0, f"baseline {cfg.baseline}")
                eps = self.evaluate(key, cfg.baseline, None, hs)
                st.baseline = {"agent": cfg.baseline, "key": key,
                               "heldout": {str(s): _record(e) for s, e in eps.items() if not e.get("error")}}
                self.checkpoint()
            stop = ""
            for g in range(1, cfg.generations + 1):
                rec = st.gen(g)
                if rec is not None and rec.get("done"):
                    continue
                if (why := self.budget_exceeded()):
                    stop = why
                    break
                why = self.run_generation(g)
                if why:
                    stop = why
                    break
            st.stop_reason = stop or f"completed {cfg.generations} generations"
            self.display.log(f"stopped: {st.stop_reason}")
            self.checkpoint()
            if cfg.ablate_best and not stop:
                self.ablate(st.candidates[st.best_id])
            report = write_report(self.run_dir, st, self.usage())
            self.display.log(report_markdown_table(report))
            try:  # the HTML report is a convenience: its failure never fails the run
                from promptevo.reporting.html import write_html

                write_html(self.run_dir)
            except Exception as e:  # noqa: BLE001
                import logging

                msg = f"warning: report.html not written ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                (logging.getLogger(__name__).warning if self.display.quiet else self.display.log)(msg)
            best = st.candidates[st.best_id]
            return RunResult(self.run_dir, best.id, best.prompt_set(), report, st.stop_reason,
                             list(st.candidates.values()))
        finally:
            self.display.stop()


# =================================================================================================
# Reports
# =================================================================================================


def _prompt_text(c: Candidate) -> str:
    return "\n".join(seg.text for _, p in c.prompt_set().modules for seg in p.segments)


def _report_rows(st: _State) -> list[dict]:
    rows = []
    if st.baseline.get("heldout"):
        rows.append({"name": f"baseline ({st.baseline['agent']})", "candidate": None,
                     **summarize_scores(st.baseline["heldout"])})
    init, best = st.candidates[st.initial_id], st.candidates[st.best_id]
    rows.append({"name": f"initial ({st.config.agent}, {st.config.init})", "candidate": init.id,
                 "fingerprint": init.fingerprint, **summarize_scores(init.heldout)})
    rows.append({"name": f"best ({st.config.agent})", "candidate": best.id, "fingerprint": best.fingerprint,
                 **summarize_scores(best.heldout)})
    return rows


def lineage(candidates: dict[str, Candidate], cid: str) -> list[Candidate]:
    """Candidates from the initial prompt to ``cid`` (inclusive), oldest first."""
    out, seen = [], set()
    cur: str | None = cid
    while cur is not None and cur in candidates and cur not in seen:
        seen.add(cur)
        out.append(candidates[cur])
        cur = candidates[cur].parent
    return list(reversed(out))


def write_report(run_dir: Path, st: _State, usage: dict) -> dict:
    best = st.candidates[st.best_id]
    rows = _report_rows(st)
    report = {
        "run": str(run_dir),
        "task": st.config.task,
        "agent": st.config.agent,
        "model": st.config.model,
        "optimizer_model": st.config.optimizer_model or st.config.model,
        "heldout_seeds": sorted(int(s) for s in best.heldout) if best.heldout else [],
        "rows": rows,
        "best_id": best.id,
        "generations_done": sum(1 for g in st.generations if g.get("done")),
        "candidates": len(st.candidates),
        "accepted": sum(1 for c in st.candidates.values() if c.status in ("accepted", "promoted", "not-promoted", "vetoed")),
        "promoted": sum(1 for c in st.candidates.values() if c.status == "promoted"),
        "lineage": [c.id for c in lineage(st.candidates, best.id)],
        "usage": usage,
        "stop_reason": st.stop_reason,
        "config": st.config.model_dump(),
    }
    report["strategies"] = strategy_summary(st)
    abl = run_dir / "ablation.json"
    if abl.exists():
        report["ablation"] = json.loads(abl.read_text(encoding="utf-8"))
    _atomic_write(run_dir / "report.json", json.dumps(report, indent=2, default=str) + "\n")
    md = [f"# promptevo run {run_dir.name}", "",
          f"Task `{st.config.task}`, agent `{st.config.agent}`, model `{st.config.model}`, optimizer "
          f"`{report['optimizer_model']}`. Stopped: {st.stop_reason}.", "",
          f"Held-out seeds: {len(report['heldout_seeds'])}. Success with 95% Wilson interval.", "",
          report_markdown_table(report), "",
          f"Generations: {report['generations_done']}, candidates: {report['candidates']}, accepted on "
          f"training seeds: {report['accepted']}, promoted: {report['promoted']}.", "",
          f"Usage: {usage.get('calls', 0)} LLM calls, {usage.get('tokens', 0):,} tokens, ${usage.get('cost', 0.0):.4f}.", "",
          "Lineage of the best prompts: " + " -> ".join(report["lineage"]), ""]
    md += strategy_markdown(report["strategies"])
    if "ablation" in report:
        md += ["## Segment ablation of the best prompts (held-out seeds)", "",
               "| segment removed | n | change in success | change in return |", "|---|---|---|---|"]
        md += [f"| {r['module']}.{r['segment']} | {r['n']} | {r['delta_success']:+.1%} | {r['delta_return']:+.3f} |"
               for r in report["ablation"]["rows"]]
        md.append("")
    _atomic_write(run_dir / "report.md", "\n".join(md))
    meta = {"task": st.config.task, "agent": st.config.agent, "run": run_dir.name, "candidate": best.id}
    best_ps = PromptSet(best.prompt_set().modules, tuple(meta.items()))
    best_ps.save(run_dir / "best.md")
    best_ps.save(run_dir / "best.json")
    return report


def _usage_tokens(u: dict | None) -> int:
    u = u or {}
    return int(u.get("prompt_tokens") or 0) + int(u.get("completion_tokens") or 0)


def choose_evidence(mode: str, cards_above: int, raw_prompt_tokens: int | None) -> str:
    """What the analyzer reads this generation: ``mode`` unless it is ``auto``, which picks evidence cards
    when the raw-trajectory prompt is estimated above ``cards_above`` tokens (cards cost one extra call of
    about a fixed size, so they pay off only on long trajectories)."""
    if mode != "auto":
        return mode
    return "cards" if (raw_prompt_tokens or 0) > cards_above else "raw"


def strategy_summary(st: _State) -> dict:
    """Figures of the optional strategies (pure function of the run state): optimizer tokens per
    generation by step, prompt size of the initial and best prompts, pruning, vetoes and skills."""
    from promptevo.optim.propose.pruner import prompt_tokens

    cfg = st.config
    gens = []
    for rec in sorted(st.generations, key=lambda r: r["index"]):
        by_step = {k: _usage_tokens(v) for k, v in (rec.get("optimizer_usage") or {}).items()}
        gens.append({"generation": rec["index"], "mode": rec.get("mode", "mutate"), "evidence": rec.get("evidence"),
                     "optimizer_tokens": by_step,
                     "optimizer_tokens_total": sum(by_step.values())})
    init, best = st.candidates[st.initial_id], st.candidates[st.best_id]
    cands = list(st.candidates.values())
    def mean_tokens(gs: list[dict]) -> float:
        return sum(g["optimizer_tokens_total"] for g in gs) / len(gs) if gs else 0.0

    spent = [g for g in gens if g["optimizer_tokens"]]
    return {
        "enabled": {"evidence": cfg.evidence, "prune_at": cfg.prune_at, "skills": cfg.skills,
                    "backtest": cfg.backtest, "ray": cfg.ray},
        "generations": gens,
        # generations that called the optimizer LLM: all of them, and by mode (mutate / prune)
        "mean_optimizer_tokens_per_generation": mean_tokens(spent),
        "mean_optimizer_tokens_by_mode": {m: mean_tokens([g for g in spent if g["mode"] == m])
                                          for m in sorted({g["mode"] for g in spent})},
        "prompt_tokens": {"initial": prompt_tokens(init.prompt_set()), "best": prompt_tokens(best.prompt_set())},
        "pruned": [{"candidate": c.id, "edit": c.edit, "saved": c.prompt_tokens_saved, "status": c.status}
                   for c in cands if c.kind == "prune"],
        "vetoed": [{"candidate": c.id, "vetoes": (c.validity or {}).get("vetoes", [])} for c in cands
                   if c.status == "vetoed"],
        "validity_checked": sum(1 for c in cands if c.validity is not None),
        "skill_children": [{"candidate": c.id, "skill": c.skill, "status": c.status} for c in cands if c.kind == "skill"],
    }


def strategy_markdown(s: dict) -> list[str]:
    en = s["enabled"]
    if en["evidence"] == "raw" and en["prune_at"] is None and not en["skills"] and not en["backtest"] and not en["ray"]:
        return []
    prune = "off" if en["prune_at"] is None else f"at held-out success {en['prune_at']:.0%}"
    md = ["## Strategies", "",
          f"Evidence: {en['evidence']}; pruning: {prune}; skills: {en['skills'] or 'off'}; "
          f"backtest: {'on' if en['backtest'] else 'off'}; ray: {'on' if en['ray'] else 'off'}.", "",
          "| generation | mode | optimizer tokens |", "|---|---|---|"]
    for g in s["generations"]:
        parts = ", ".join(f"{k} {v:,}" for k, v in g["optimizer_tokens"].items()) or "-"
        md.append(f"| {g['generation']} | {g['mode']} | {g['optimizer_tokens_total']:,} ({parts}) |")
    pt = s["prompt_tokens"]
    md += ["", f"Prompt size: initial {pt['initial']:,} tokens, best {pt['best']:,} tokens."]
    if s["pruned"]:
        md.append("Pruning children: " + ", ".join(f"{p['candidate']} ({(p['edit'] or {}).get('op')} "
                  f"{(p['edit'] or {}).get('module')}.{(p['edit'] or {}).get('segment')}, -{p['saved'] or 0} tokens, "
                  f"{p['status']})" for p in s["pruned"]) + ".")
    if en["backtest"]:
        md.append(f"Validity diagnostics ran on {s['validity_checked']} candidate(s); vetoed: "
                  + (", ".join(f"{v['candidate']} ({'; '.join(x['check'] for x in v['vetoes'])})" for v in s["vetoed"])
                     or "none") + ".")
    if s["skill_children"]:
        md.append("Skill children: " + ", ".join(f"{c['candidate']} (skill {c['skill']}, {c['status']})"
                                                 for c in s["skill_children"]) + ".")
    md.append("")
    return md


def report_markdown_table(report: dict) -> str:
    lines = ["| prompts | n | success | 95% CI | mean return | tokens |", "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lo, hi = r["ci95"]
        lines.append(f"| {r['name']} | {r['n']} | {r['success_rate']:.1%} | [{lo:.1%}, {hi:.1%}] | "
                     f"{r['mean_return']:.3f} | {r['tokens']:,} |")
    return "\n".join(lines)


# =================================================================================================
# Public entry point
# =================================================================================================


def _default_env_instructions(task: Any) -> str:
    try:
        from promptevo.tasks import make_env

        env = make_env(task)
        try:
            env.reset(task.seed_list("train")[0])  # some envs describe the episode's own mission
            return env.instructions()
        finally:
            env.close()
    except Exception:  # noqa: BLE001 - instructions are optional context for the optimizer
        return ""


def _default_runner(task: Any, agent_factory: Callable[[], Any], seeds: Sequence[int], *, concurrency: int = 4,
                    on_result: Callable[[Any], None] | None = None) -> list[Any]:
    from promptevo.evaluation.rollout import run_episodes

    return run_episodes(task, agent_factory, list(seeds), concurrency=concurrency, on_result=on_result)


def _ray_builder_and_runner(config: EvolveConfig, task: Any, agent_gateway: Any,
                            setup: Callable[[], Any] | None = None) -> tuple[AgentBuilder, Runner]:
    """Agents as picklable :class:`~promptevo.scaleout.AgentSpec` s played as Ray tasks; the workers'
    LLM usage is added to ``agent_gateway`` so budgets and reports still see it."""
    from promptevo.evaluation.scaleout import AgentSpec, RayNotInstalledError, absorb_usage, ensure_ray, run_episodes_ray

    try:
        ensure_ray(num_cpus=None if os.environ.get("RAY_ADDRESS") else config.concurrency)
    except RayNotInstalledError as e:
        raise EvolveError(str(e)) from None

    def builder(name: str, prompts: PromptSet | None) -> Callable[[], Any]:
        return AgentSpec.create(name, llm=agent_gateway, prompts=prompts, task=task, setup=setup, init=config.init)

    def runner(task_: Any, factory: Any, seeds: Sequence[int], *, concurrency: int = 4,
               on_result: Callable[[Any], None] | None = None) -> list[Any]:
        def done(r: Any) -> None:
            absorb_usage(agent_gateway, [r])
            if on_result is not None:
                on_result(r)

        return run_episodes_ray(task_, factory, list(seeds), on_result=done, max_in_flight=concurrency)

    return builder, runner


def optimize(
    config: EvolveConfig,
    *,
    agent_gateway: Any = None,
    optimizer_gateway: Any = None,
    task: Any = None,
    initial_prompts: PromptSet | None = None,
    agent_builder: AgentBuilder | None = None,
    runner: Runner | None = None,
    env_instructions: str | None = None,
    console: Any = None,
    quiet: bool = False,
    worker_setup: Callable[[], Any] | None = None,
) -> RunResult:
    """Run (or, with ``config.resume``, continue) an optimization; returns the best prompts and report.

    Defaults: gateways built from ``config.model`` / ``config.optimizer_model``; ``task`` from
    :func:`promptevo.tasks.load_task`; initial prompts from ``config.prompts`` or
    :func:`promptevo.agents.default_prompts`; ``agent_builder(agent_name, prompts_or_None)`` returns an
    agent factory (``make_agent``); ``runner(task, factory, seeds, concurrency=, on_result=)`` is
    :func:`promptevo.rollout.run_episodes`. With ``config.ray`` (or RAY_ADDRESS) episodes run as Ray tasks;
    ``worker_setup`` (picklable) then runs once in each worker process before its first episode.
    Raises :class:`EvolveError` for unusable inputs.
    """
    if config.run is None:  # fix the run name now so every path below agrees
        config = config.model_copy(update={"run": config.run_path().name})
    if task is None:
        from promptevo.tasks import load_task

        task = load_task(config.task)
    if config.max_steps is not None:
        cap = config.max_steps if task.max_steps is None else min(task.max_steps, config.max_steps)
        task = task.model_copy(update={"max_steps": cap})
    if agent_gateway is None or optimizer_gateway is None:
        from promptevo.llm.gateway import Gateway, LLMConfig

        cache = {"cache_dir": None} if config.no_cache else {}
        if agent_gateway is None:
            agent_gateway = Gateway(LLMConfig(model=config.model, api_base=config.api_base,
                                              max_tokens=config.agent_max_tokens,
                                              concurrency=config.concurrency, seed=config.seed, **cache))
        if optimizer_gateway is None:
            opt_model = config.optimizer_model or config.model
            opt_base = config.optimizer_api_base or (config.api_base if opt_model == config.model else None)
            optimizer_gateway = Gateway(LLMConfig(model=opt_model, api_base=opt_base,
                                                  temperature=config.optimizer_temperature,
                                                  max_tokens=config.optimizer_max_tokens, seed=config.seed, **cache))
    # record the models actually used (gateways may be passed in by the caller)
    upd = {}
    a_model = getattr(getattr(agent_gateway, "config", None), "model", None)
    o_model = getattr(getattr(optimizer_gateway, "config", None), "model", None)
    if isinstance(a_model, str) and a_model != config.model:
        upd["model"] = a_model
    if isinstance(o_model, str) and o_model != (config.optimizer_model or config.model):
        upd["optimizer_model"] = o_model
    if upd:
        config = config.model_copy(update=upd)
    if initial_prompts is None:
        if config.prompts:
            try:
                initial_prompts = PromptSet.load(config.prompts)
            except PromptFormatError as e:
                raise EvolveError(str(e)) from None
        else:
            from promptevo.agents.registry import default_prompts

            initial_prompts = default_prompts(config.agent, task, config.init)
    if not initial_prompts.modules:
        raise EvolveError(f"agent {config.agent!r} has no prompts to optimize")
    from promptevo.evaluation.scaleout import use_ray

    if use_ray(config.ray):
        if agent_builder is not None or runner is not None:
            raise EvolveError("--ray plays episodes with the built-in agents and runner; a custom agent_builder "
                              "or runner cannot be shipped to Ray workers")
        agent_builder, runner = _ray_builder_and_runner(config, task, agent_gateway, worker_setup)
    if agent_builder is None:
        from promptevo.agents.registry import make_agent

        def agent_builder(name: str, prompts: PromptSet | None) -> Callable[[], Any]:
            return lambda: make_agent(name, agent_gateway, prompts=prompts, task=task, init=config.init)

    if env_instructions is None:
        env_instructions = _default_env_instructions(task)
    opt = _Optimizer(
        config, agent_gateway=agent_gateway, optimizer_gateway=optimizer_gateway, task=task,
        agent_builder=agent_builder, runner=runner or _default_runner, env_instructions=env_instructions,
        console=console, quiet=quiet,
    )
    return opt.run(initial_prompts)


# =================================================================================================
# Command line: `promptevo optimize ...` (cli.py delegates here)
# =================================================================================================


def _build_parser() -> Any:
    import argparse

    p = argparse.ArgumentParser(
        prog="promptevo optimize",
        description="Optimize an agent's prompts on a task: analyse episodes, mutate segments, accept on "
        "paired training seeds, promote after a held-out check. Writes results/<run>/.",
    )
    a = p.add_argument
    a("--task", "-t", help="task name from tasks/ (required unless --resume)")
    a("--agent", "-a", help="agent whose prompts are optimized (default two-stage)")
    a("--init", choices=["plain", "guided"], help="initial default prompts (default plain)")
    a("--prompts", help="initial PromptSet file (.md/.json) instead of the defaults")
    a("--model", "-m", help="agent LLM (LiteLLM model string; default the local model)")
    a("--api-base", help="server URL for the agent model")
    a("--optimizer-model", help="LLM for the analyser and mutator (default: --model)")
    a("--optimizer-api-base", help="server URL for the optimizer model")
    a("--max-steps", type=int, help="cap on steps per episode (default: the env's own limit)")
    a("--agent-max-tokens", type=int, help="max tokens per agent LLM call (default 512)")
    a("--generations", "-g", type=int, help="generations (default 10)")
    a("--episodes", "-n", type=int, help="training seeds per evaluation, paired (default 6)")
    a("--heldout-episodes", type=int, help="held-out seeds for promotion and the final table (default 20)")
    a("--children", "-k", type=int, help="children proposed per generation (default 3)")
    a("--accept-rule", choices=["margin", "paired", "always"], help="acceptance on training seeds (default margin)")
    a("--accept-margin", type=float, help="mean paired difference needed (default 0.05)")
    a("--alpha", type=float, help="sign-test level for --accept-rule paired (default 0.05)")
    a("--promote-margin", type=float, help="held-out mean difference needed to promote (default 0)")
    a("--metric", choices=["return", "success", "progression"], help="per-episode score (default return)")
    a("--optimizer-max-tokens", type=int, help="max tokens per analyzer/mutator reply (default 2048)")
    a("--budget-calls", type=int, dest="budget_llm_calls", help="stop after this many LLM calls")
    a("--budget-tokens", type=int, dest="budget_tokens", help="stop after this many tokens")
    a("--budget-dollars", type=float, dest="budget_dollars", help="stop after this much spend (USD)")
    a("--budget-episodes", type=int, dest="budget_episodes", help="stop after this many episodes")
    a("--concurrency", "-j", type=int, help="episodes in flight per evaluation (default 4)")
    a("--seed", type=int, help="run seed: chooses the training seeds (default 0)")
    a("--baseline", help="agent shown as baseline in the final table ('none' to skip; default robust-cot)")
    a("--results-dir", help="where run folders go (default results)")
    a("--run", help="run name (default <task>-<agent>-<timestamp>)")
    a("--resume", metavar="RUN", help="continue results/RUN (or a run folder path) with nothing re-run")
    a("--no-cache", action="store_true", default=None, help="do not use the LLM response cache")
    a("--ablate", action="store_true", dest="ablate_best", default=None,
      help="at the end, measure each segment of the best prompts by removing it (held-out seeds)")
    s = p.add_argument_group("strategies (optional; off by default)")
    s.add_argument("--evidence", choices=["raw", "cards", "auto"],
                   help="analyzer reads raw trajectories (default), evidence cards (one per outcome group), or "
                   "auto: cards only when the raw prompt would exceed --cards-above tokens")
    s.add_argument("--cards-above", type=int, metavar="TOKENS",
                   help="with --evidence auto: estimated raw analyzer prompt tokens above which cards are used "
                   "(default 4000)")
    s.add_argument("--prune-at", type=float, metavar="RATE",
                   help="scaffold pruning: once held-out success >= RATE, propose removing guidance segments; a "
                   "removal is kept only if held-out success stays within the 95%% interval")
    s.add_argument("--skills", metavar="FILE",
                   help="skill library (JSON, created if missing): offer skills learned on other tasks, store promotions")
    s.add_argument("--skill-children", type=int, help="children per generation that insert a skill (default 1)")
    s.add_argument("--backtest", action="store_true", default=None,
                   help="before promoting, replay on earlier generations' seeds and run validity diagnostics")
    s.add_argument("--backtest-episodes", type=int, help="earlier seeds replayed by --backtest (default: --episodes)")
    s.add_argument("--ray", action="store_true", default=None,
                   help="play episodes as Ray tasks (also when RAY_ADDRESS is set); needs promptevo[ray]")
    a("--quiet", "-q", action="store_true", help="no progress display")
    return p


def config_from_args(args: Sequence[str]) -> tuple[EvolveConfig, bool]:
    """(config, quiet) from command-line arguments; with --resume the stored config is the base."""
    ns = _build_parser().parse_args(list(args))
    given = {k: v for k, v in vars(ns).items() if v is not None and k not in ("resume", "quiet")}
    if given.get("baseline", "").lower() in ("none", "off", "") and "baseline" in given:
        given["baseline"] = None
    if ns.resume:
        path = Path(ns.resume)
        if not (path / CHECKPOINT).exists():
            path = Path(given.get("results_dir") or "results") / ns.resume
        base = load_run_config(path).model_dump()
        base.update(given)
        base.update({"resume": True, "run": str(path), "results_dir": str(path.parent)})
        return EvolveConfig.model_validate(base), bool(ns.quiet)
    if not given.get("task"):
        raise EvolveError("missing --task (see `promptevo tasks`), or --resume RUN")
    cfg = validate_config(given)
    if cfg.run is None:
        cfg = cfg.model_copy(update={"run": cfg.run_path().name})
    return cfg, bool(ns.quiet)


def validate_config(given: dict[str, Any]) -> EvolveConfig:
    """EvolveConfig from option values; a bad value is one EvolveError line naming its flag."""
    try:
        return EvolveConfig.model_validate(given)
    except ValidationError as e:
        d = e.errors()[0]
        flag = "-".join(str(x).replace("_", "-") for x in d.get("loc", ()))
        raise EvolveError(f"--{flag}: {d.get('msg')}") from None


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo optimize``; returns the exit code."""
    from rich.console import Console

    err = Console(stderr=True)
    try:
        cfg, quiet = config_from_args(args)
    except SystemExit as e:  # argparse --help / usage errors
        return int(e.code or 0)
    except EvolveError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    try:
        res = optimize(cfg, quiet=quiet)
    except EvolveError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: continue with `promptevo optimize --resume {cfg.run_path()}`")
        return 130
    Console().print(f"best prompts: {res.run_dir / 'best.md'} | report: {res.run_dir / 'report.md'}")
    return 0
