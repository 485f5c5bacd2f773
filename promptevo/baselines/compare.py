"""``promptevo compare``: methods side by side with the same model, budget and seeds.

Methods (:data:`METHODS`):

``robust-cot``
    BALROG's reason-then-act baseline prompt, no optimization; test evaluation only.
``promptevo``
    :func:`promptevo.optimize` with at most ``budget_calls`` LLM calls (agent + optimizer), then the best
    prompts on the test seeds.
``gepa``
    GEPA through DSPy (:mod:`promptevo.baselines.gepa`) optimizing the same agent's prompts with the
    same call budget, then the best prompts on the test seeds. Needs ``promptevo[gepa]``.

Equal budgets: each optimizing method's gateways share one :class:`~promptevo.llm.budget.CallBudget` of
``budget_calls``; the call that would exceed it is refused inside the gateway, so no method can spend
more than the others, whatever its loop checks between iterations.

Seeds, shared by every method (all from the task's seed splits):

* training seeds: the first ``train_episodes`` train seeds (promptevo draws its evidence and acceptance
  batches from them; GEPA samples its reflection minibatches from them);
* validation seeds: the first ``val_episodes`` validation seeds: promptevo's promotion gate and GEPA's
  Pareto/validation set;
* test seeds: the first ``test_episodes`` test seeds, played once per method at the end.

Every method has its own gateways (same model settings, own usage trackers), so the LLM calls, tokens,
cost and wall time of its optimization and of its test evaluation are reported separately. All
gateways share the response cache (``--no-cache`` turns it off), as a user's runs would: a cache hit
counts as a call (so the call budget means the same for every method) but spends no tokens, cost or
model time, so a method that replays prompts another method already played looks cheaper. The table
shows the cache hits; use ``--no-cache`` when tokens, cost and wall time are the point.

Output: one table on the console and ``results/<run>/compare.json`` (written atomically after every
method), plus per method ``results/<run>/<method>/`` (test episodes and summary, and the optimizer's
own files).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from promptevo.agents.registry import needs_llm, options_for
from promptevo.errors import PromptevoError
from promptevo.segments import PromptSet

METHODS: dict[str, str] = {
    "robust-cot": "BALROG robust-CoT baseline prompt, no optimization",
    "promptevo": "promptevo's optimizer (analyse, mutate, paired acceptance, promotion gate)",
    "gepa": "GEPA via DSPy (reflective instruction evolution, Pareto selection); needs promptevo[gepa]",
}
COMPARE_VERSION = 1


class CompareError(PromptevoError, ValueError):
    """Bad compare input; ``str(e)`` is one line meant for the user."""


@dataclass
class CompareConfig:
    task: str
    methods: list[str] = field(default_factory=lambda: ["robust-cot", "promptevo", "gepa"])
    budget_calls: int = 500  # per optimizing method: LLM calls of its optimization (agent + optimizer)
    agent: str = "robust-cot"  # the agent whose prompts promptevo and GEPA optimize
    init: str = "plain"
    model: str = "local/qwen2.5-coder-1.5b"
    api_base: str | None = None
    optimizer_model: str | None = None  # default: model
    optimizer_api_base: str | None = None
    test_episodes: int = 20
    train_episodes: int = 6
    val_episodes: int = 6
    max_steps: int | None = None  # cap on episode length (default: the task's/env's)
    metric: str = "success"  # per-episode score both optimizers maximise: success | progression | return
    generations: int = 100  # promptevo's generation cap (the call budget normally stops it first)
    children: int = 3
    concurrency: int = 4
    seed: int = 0
    temperature: float = 0.0
    max_tokens: int = 512
    optimizer_temperature: float = 0.7
    optimizer_max_tokens: int = 2048
    history: int | None = None  # naive/robust-cot: observations kept in the messages (every method alike)
    operators: list[str] = field(default_factory=lambda: ["induce", "mutate"])  # promptevo's proposal operators
    no_cache: bool = False
    results_dir: str = "results"
    run: str | None = None

    def __post_init__(self) -> None:
        self.methods = parse_methods(self.methods)
        for name in ("budget_calls", "test_episodes", "train_episodes", "val_episodes", "concurrency"):
            if int(getattr(self, name)) < 1:
                raise CompareError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.max_steps is not None and self.max_steps < 1:
            raise CompareError(f"--max-steps must be >= 1 (got {self.max_steps})")
        if self.metric not in ("success", "progression", "return"):
            raise CompareError(f"unknown metric {self.metric!r} (use success, progression or return)")
        if not needs_llm(self.agent):
            raise CompareError("agent 'random' has no prompts to optimize; use robust-cot, naive or two-stage")

    def run_name(self) -> str:
        return self.run or f"compare-{self.task}-{datetime.now():%Y%m%d-%H%M%S}"

    def agent_options(self, agent: str) -> dict:
        """Message settings every method's agent shares (``history`` for the single-call agents)."""
        return options_for(agent, {"history": self.history}) if self.history is not None and needs_llm(agent) else {}

    def run_dir(self) -> Path:
        p = Path(self.run_name())
        return p if (p.is_absolute() or len(p.parts) > 1) else Path(self.results_dir) / p


def parse_methods(methods: str | Sequence[str]) -> list[str]:
    """``"robust-cot,promptevo"`` or a list -> validated, de-duplicated list (order kept)."""
    items = methods.split(",") if isinstance(methods, str) else list(methods)
    out: list[str] = []
    for m in (str(x).strip().lower() for x in items):
        if not m:
            continue
        if m not in METHODS:
            raise CompareError(f"unknown method {m!r}; valid methods: {', '.join(METHODS)}")
        if m not in out:
            out.append(m)
    if not out:
        raise CompareError(f"no methods given; valid methods: {', '.join(METHODS)}")
    return out


def check_methods_available(methods: Sequence[str]) -> None:
    """Fail before anything runs when a method's optional dependency is missing."""
    if "gepa" in methods:
        from promptevo.baselines.gepa import GepaUnavailable, require_dspy

        try:
            require_dspy()
        except GepaUnavailable as e:
            raise CompareError(str(e)) from None


@dataclass
class Seeds:
    train: list[int]
    validation: list[int]
    test: list[int]


def split_seeds(task: Any, cfg: CompareConfig) -> Seeds:
    from promptevo.tasks import TaskError

    try:
        train = task.seeds("train", cfg.train_episodes)
        val = task.seeds("validation", cfg.val_episodes)
        test = task.seeds("test", cfg.test_episodes)
    except TaskError as e:
        raise CompareError(str(e)) from None
    return Seeds(train=list(train), validation=list(val), test=list(test))


# -- usage helpers ---------------------------------------------------------------------------------
def _usage(*gateways: Any) -> dict:
    """Summed {calls, cache_hits, prompt_tokens, completion_tokens, tokens, cost} + by_role."""
    tot = {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}
    by_role: dict[str, dict] = {}
    seen: list[Any] = []
    for gw in gateways:
        u = getattr(gw, "usage", None)
        if u is None or any(u is s for s in seen):
            continue
        seen.append(u)
        snap = u.snapshot()
        for k in tot:
            tot[k] += snap["total"].get(k, 0)
        for role, row in snap["by_role"].items():
            r = by_role.setdefault(role, {k: 0 for k in tot})
            for k in tot:
                r[k] += row.get(k, 0)
    tot["tokens"] = int(tot["prompt_tokens"]) + int(tot["completion_tokens"])
    tot["cost"] = round(float(tot["cost"]), 8)
    return {**tot, "by_role": by_role}


# -- the runner ------------------------------------------------------------------------------------
GatewayFactory = Callable[..., Any]  # (purpose "agent" | "optimizer" | "eval", budget=CallBudget|None) -> Gateway


class Comparison:
    """Runs the methods one after another and keeps ``compare.json`` up to date."""

    def __init__(self, cfg: CompareConfig, *, task: Any = None, console: Any = None,
                 gateway_factory: GatewayFactory | None = None, env_factory: Callable | None = None,
                 quiet: bool = False):
        from promptevo.tasks import TaskError, load_task

        self.cfg = cfg
        if task is None:
            try:
                task = load_task(cfg.task)
            except TaskError as e:
                raise CompareError(str(e)) from None
        if cfg.max_steps is not None:
            task = task.model_copy(update={"max_steps": cfg.max_steps})
        self.task = task
        self.seeds = split_seeds(task, cfg)
        self.run_dir = cfg.run_dir()
        self.console = console
        self.quiet = quiet
        self.gateway_factory = gateway_factory or self._default_gateway
        self.env_factory = env_factory
        self.results: dict[str, dict] = {}
        self.started = time.time()

    # gateways: every call builds a fresh gateway with its own usage tracker
    def _default_gateway(self, purpose: str, budget: Any = None) -> Any:
        from promptevo.llm.gateway import Gateway
        from promptevo.llm.types import LLMConfig

        c = self.cfg
        cache = {"cache_dir": None} if c.no_cache else {}
        if purpose == "optimizer":
            model = c.optimizer_model or c.model
            base = c.optimizer_api_base or (c.api_base if model == c.model else None)
            return Gateway(LLMConfig(model=model, api_base=base, temperature=c.optimizer_temperature,
                                     max_tokens=c.optimizer_max_tokens, seed=c.seed, **cache), budget=budget)
        return Gateway(LLMConfig(model=c.model, api_base=c.api_base, temperature=c.temperature,
                                 max_tokens=c.max_tokens, concurrency=c.concurrency, seed=c.seed, **cache),
                       budget=budget)

    def budgeted_gateways(self) -> tuple[Any, Any, Any]:
        """(agent gateway, optimizer gateway, their shared CallBudget of ``budget_calls``)."""
        from promptevo.llm.budget import CallBudget

        budget = CallBudget(self.cfg.budget_calls)
        return self.gateway_factory("agent", budget=budget), self.gateway_factory("optimizer", budget=budget), budget

    def log(self, msg: str) -> None:
        if self.console is not None and not self.quiet:
            self.console.print(msg, highlight=False)

    # -- shared pieces ----------------------------------------------------------------------------
    def initial_prompts(self) -> PromptSet:
        from promptevo.agents.registry import default_prompts

        return default_prompts(self.cfg.agent, self.task, self.cfg.init)

    def test_eval(self, method: str, agent: str, prompts: PromptSet) -> dict:
        from promptevo.agents.registry import agent_factory
        from promptevo.evaluation.rollout import evaluate
        from promptevo.evaluation.store import RunWriter
        from promptevo.tasks import make_env

        gw = self.gateway_factory("eval")
        out_dir = self.run_dir / method / "test"
        if (out_dir / "episodes.jsonl").exists():
            (out_dir / "episodes.jsonl").unlink()  # a re-run of the same run name starts clean
        writer = RunWriter(out_dir)
        factory = agent_factory(agent, gw, prompts, **self.cfg.agent_options(agent))
        t0 = time.perf_counter()
        results, summary = evaluate(self.task, factory, self.seeds.test, concurrency=self.cfg.concurrency,
                                    writer=writer, env_factory=self.env_factory or make_env, gateway=gw)
        wall = time.perf_counter() - t0
        return {"summary": summary, "seeds": [int(r.seed) for r in results],
                "per_seed_success": {str(r.seed): bool(r.success) for r in results if not r.error},
                "usage": _usage(gw), "wall_s": round(wall, 3), "dir": str(out_dir)}

    def record(self, method: str, entry: dict) -> None:
        self.results[method] = entry
        self.write()

    def to_dict(self) -> dict:
        c = self.cfg
        return {
            "version": COMPARE_VERSION,
            "run": self.run_dir.name,
            "created": self.started,
            "updated": time.time(),
            "task": self.task.name,
            "agent": c.agent,
            "model": c.model,
            "optimizer_model": c.optimizer_model or c.model,
            "budget_calls": c.budget_calls,
            "metric": c.metric,
            "seeds": asdict(self.seeds),
            "methods": {m: self.results[m] for m in c.methods if m in self.results},
            "pending": [m for m in c.methods if m not in self.results],
            "config": asdict(c),
        }

    def write(self) -> Path:
        from promptevo.fileio import write_json_atomic

        return write_json_atomic(self.run_dir / "compare.json", self.to_dict())

    # -- methods ----------------------------------------------------------------------------------
    def run_robust_cot(self) -> dict:
        from promptevo.agents.registry import default_prompts

        self.log("[bold]robust-cot[/]: test evaluation of the baseline prompt")
        ps = default_prompts("robust-cot", self.task, "plain")
        ev = self.test_eval("robust-cot", "robust-cot", ps)
        return {"method": "robust-cot", "agent": "robust-cot", "test": ev,
                "optimization": {"calls": 0, "tokens": 0, "cost": 0.0, "wall_s": 0.0, "by_role": {},
                                 "stop_reason": "no optimization"},
                "prompts": ps.to_dict(), "prompts_fingerprint": ps.fingerprint()}

    def run_promptevo(self) -> dict:
        from promptevo.api import optimize
        from promptevo.optim.config import ConfigError, OptimizeConfig
        from promptevo.optim.state import RunError

        c = self.cfg
        self.log(f"[bold]promptevo[/]: optimizing {c.agent} prompts, budget {c.budget_calls} LLM calls")
        agw, ogw, budget = self.budgeted_gateways()
        # promptevo sees the comparison's training and validation seeds as its own splits; the comparison
        # plays the test seeds itself, once, for every method
        opt_task = self.task.model_copy(update={"train_seeds": list(self.seeds.train),
                                                "validation_seeds": list(self.seeds.validation)})
        run_dir = self.run_dir / "promptevo"
        per_gen = max(1, len(self.seeds.train) // 2)
        ecfg = OptimizeConfig(
            task=self.task.name, agent=c.agent, init=c.init, model=c.model, api_base=c.api_base,
            optimizer_model=c.optimizer_model, optimizer_api_base=c.optimizer_api_base, no_cache=c.no_cache,
            generations=c.generations, episodes=per_gen, evidence_episodes=max(1, len(self.seeds.train) - per_gen),
            validation_episodes=len(self.seeds.validation), children=c.children, fitness=c.metric,
            budget_llm_calls=c.budget_calls, concurrency=c.concurrency, seed=c.seed, baseline=None,
            optimizer_temperature=c.optimizer_temperature, optimizer_max_tokens=c.optimizer_max_tokens,
            final_test=False, results_dir=str(self.run_dir), run=str(run_dir), agent_options=c.agent_options(c.agent),
            operators=c.operators, agent_max_tokens=c.max_tokens,
            # the game's expert plays other training seeds than the shared ones (no LLM calls, outside the budget)
            expert_seeds=[s for s in self.task.seed_list("train")[::-1] if s not in set(self.seeds.train)][:20],
        )
        kw: dict[str, Any] = {}
        if self.env_factory is not None:
            from promptevo.evaluation.rollout import run_episodes

            env_factory = self.env_factory

            def runner(task: Any, factory: Any, seeds: Any, *, concurrency: int = 4, on_result: Any = None,
                       **_: Any) -> Any:
                return run_episodes(task, factory, list(seeds), concurrency=concurrency, on_result=on_result,
                                    env_factory=env_factory)

            kw["runner"] = runner
        t0 = time.perf_counter()
        try:
            res = optimize(ecfg, agent_gateway=agw, optimizer_gateway=ogw, task=opt_task,
                           initial_prompts=self.initial_prompts(), quiet=True, **kw)
        except (RunError, ConfigError) as e:
            raise CompareError(f"promptevo: {e}") from None
        wall = time.perf_counter() - t0
        opt = {**_usage(agw, ogw), "wall_s": round(wall, 3), "stop_reason": res.stop_reason,
               "budget_calls": c.budget_calls, "budget_used": budget.used, "run_dir": str(res.run_dir),
               "best_id": res.best_id, "candidates": len(res.candidates)}
        self.log(f"  stopped: {res.stop_reason}; best {res.best_id}")
        ev = self.test_eval("promptevo", c.agent, res.best_prompts)
        return {"method": "promptevo", "agent": c.agent, "test": ev, "optimization": opt,
                "prompts": res.best_prompts.to_dict(), "prompts_fingerprint": res.best_prompts.fingerprint()}

    def run_gepa(self) -> dict:
        from promptevo.baselines.gepa import GepaConfig, GepaError, run_gepa

        c = self.cfg
        self.log(f"[bold]gepa[/]: optimizing {c.agent} prompts with dspy.GEPA, budget {c.budget_calls} LLM calls")
        agw, rgw, budget = self.budgeted_gateways()
        gcfg = GepaConfig(budget_calls=c.budget_calls, metric=c.metric, concurrency=c.concurrency,  # type: ignore[arg-type]
                          agent_options=c.agent_options(c.agent),
                          seed=c.seed, log_dir=str(self.run_dir / "gepa" / "gepa-state"))
        try:
            res = run_gepa(self.task, c.agent, self.initial_prompts(), agent_gateway=agw, reflection_gateway=rgw,
                           train_seeds=self.seeds.train, val_seeds=self.seeds.validation, config=gcfg,
                           env_factory=self.env_factory)
        except GepaError as e:
            raise CompareError(f"gepa: {e}") from None
        best_path = self.run_dir / "gepa" / "best.md"
        res.best_prompts.save(best_path)
        opt = {**_usage(agw, rgw), "wall_s": round(res.wall_s, 3), "stop_reason": res.stop_reason,
               "budget_calls": c.budget_calls, "budget_used": budget.used, "episodes": res.episodes, "max_metric_calls": res.max_metric_calls,
               "candidates": len(res.candidates), "best_index": res.best_index, "candidate_scores": res.candidates}
        self.log(f"  stopped: {res.stop_reason}; {len(res.candidates)} candidates")
        ev = self.test_eval("gepa", c.agent, res.best_prompts)
        return {"method": "gepa", "agent": c.agent, "test": ev, "optimization": opt,
                "prompts": res.best_prompts.to_dict(), "prompts_fingerprint": res.best_prompts.fingerprint(),
                "best_prompts_file": str(best_path)}

    def run(self) -> dict:
        check_methods_available(self.cfg.methods)
        if (self.run_dir / "compare.json").exists():
            raise CompareError(f"{self.run_dir} already holds a comparison (compare.json); pick another --run-name")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.write()
        runners = {"robust-cot": self.run_robust_cot, "promptevo": self.run_promptevo, "gepa": self.run_gepa}
        for m in self.cfg.methods:
            self.record(m, runners[m]())
        self.write()
        return self.to_dict()


def compare(cfg: CompareConfig, **kw: Any) -> dict:
    """Run the comparison; returns what is written to ``compare.json``."""
    return Comparison(cfg, **kw).run()


# -- table -----------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table_rows(data: dict) -> list[dict]:
    rows = []
    for name, m in data["methods"].items():
        s = m["test"]["summary"]
        o = m["optimization"]
        lo, hi = s["success_ci95"]
        rows.append({"method": name, "n": s["n"], "success": s["success_rate"], "ci95": [lo, hi],
                     "progression": s["progression_pct"], "calls": int(o.get("calls", 0)),
                     "cache_hits": int(o.get("cache_hits", 0)),
                     "tokens": int(o.get("tokens", 0)), "cost": float(o.get("cost", 0.0)),
                     "wall_s": float(o.get("wall_s", 0.0)), "eval_wall_s": float(m["test"].get("wall_s", 0.0))})
    return rows


def results_table(data: dict) -> Any:
    from rich.table import Table

    t = Table(title=f"compare {data['task']} | agent {data['agent']} | model {data['model']} | "
                    f"budget {data['budget_calls']} LLM calls | {len(data['seeds']['test'])} test seeds (played once)",
              title_justify="left")
    for col in ("method", "test success (95% CI)", "n", "opt. LLM calls", "opt. tokens", "opt. cost $",
                "opt. wall", "eval wall"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for r in table_rows(data):
        lo, hi = r["ci95"]
        calls = f"{r['calls']:,}" + (f" ({r['cache_hits']:,} cached)" if r["cache_hits"] else "")
        t.add_row(r["method"], f"{_pct(r['success'])} ({_pct(lo)}-{_pct(hi)})", str(r["n"]), calls,
                  f"{r['tokens']:,}", f"{r['cost']:.4f}", f"{r['wall_s']:.1f}s", f"{r['eval_wall_s']:.1f}s")
    return t
