"""promptevo's Python API: :func:`optimize` and :func:`evaluate` (the CLI is a thin layer over them).

Example (the LLM test double answers "go forward"; any LiteLLM model string works the same way)::

    import promptevo
    from promptevo.llm import ScriptedLLM

    with ScriptedLLM.install(lambda messages: "<|ACTION|>go forward<|END|>"):
        summary = promptevo.evaluate("goto", agent="robust-cot", model="fake/scripted", episodes=5)
    print(summary["success_rate"], summary["success_ci95"])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from promptevo.fileio import FolderLock, FolderLockError, io_error_line, write_text_atomic
from promptevo.optim.config import ConfigError, OptimizeConfig, config_toml, default_run_name, validate_config
from promptevo.optim.engine import Engine, RunResult
from promptevo.optim.events import Emitter
from promptevo.optim.state import CHECKPOINT, RunError, RunStopped
from promptevo.segments import PromptFormatError, PromptSet
from promptevo.tasks import TaskConfig, load_task


def build_gateways(cfg: OptimizeConfig) -> tuple[Any, Any]:
    from promptevo.llm.gateway import Gateway
    from promptevo.llm.types import LLMConfig

    cache = {"cache_dir": None} if cfg.no_cache else {}
    price = {"price_in": cfg.price_in, "price_out": cfg.price_out, "timeout": cfg.timeout}
    agent = Gateway(LLMConfig(model=cfg.model, api_base=cfg.api_base, max_tokens=cfg.agent_max_tokens,
                              temperature=cfg.temperature, concurrency=cfg.effective_concurrency, seed=cfg.seed,
                              **cache, **price))
    opt_model = cfg.optimizer_model or cfg.model
    opt_base = cfg.optimizer_api_base or (cfg.api_base if opt_model == cfg.model else None)
    optimizer = Gateway(LLMConfig(model=opt_model, api_base=opt_base, temperature=cfg.optimizer_temperature,
                                  max_tokens=cfg.optimizer_max_tokens, seed=cfg.seed, **cache, **price))
    return agent, optimizer


def usage_of(*gateways: Any) -> Callable[[], dict]:
    """``{"calls", "tokens", "cost"}`` summed over distinct gateways' usage trackers."""
    gws = [g for i, g in enumerate(gateways) if g is not None and all(g is not h for h in gateways[:i])]

    def now() -> dict:
        out = {"calls": 0, "tokens": 0, "cost": 0.0}
        for gw in gws:
            tot = gw.usage.total()
            out["calls"] += int(tot["calls"])
            out["tokens"] += int(tot["prompt_tokens"]) + int(tot["completion_tokens"])
            out["cost"] += float(tot["cost"])
        return out

    return now


def prepare(config: OptimizeConfig | None = None, *, task: TaskConfig | str | None = None,
            initial_prompts: PromptSet | None = None, agent_gateway: Any = None, optimizer_gateway: Any = None,
            adapter: Any = None, agent_builder: Callable | None = None, runner: Callable | None = None,
            worker_setup: Callable[[], Any] | None = None, **settings: Any) -> tuple:
    """Every check a run makes before its folder exists (settings, task, seed counts, prompts, agent options,
    libraries), with nothing played or written: ``optimize --dry-run`` calls it, so it refuses what the run
    would. Returns ``(config, task, adapter, initial_prompts, agent_gateway, optimizer_gateway)``; raises
    :class:`RunError` / :class:`ConfigError` (one line)."""
    if isinstance(task, str):
        settings.setdefault("task", task)
        task = None
    elif task is not None:
        settings.setdefault("task", task.name)
    if config is None:
        config = validate_config(settings)
    elif settings:
        config = validate_config({**config.model_dump(), **settings})
    if config.run is None:  # fix the run name now so every path below agrees
        config = config.model_copy(update={"run": config.run_path().name})
    if task is None:
        task = load_task(config.task)
    if config.max_steps is not None:
        cap = config.max_steps if task.max_steps is None else min(task.max_steps, config.max_steps)
        task = task.model_copy(update={"max_steps": cap})
    if adapter is None and (agent_gateway is None or optimizer_gateway is None):
        a, o = build_gateways(config)
        agent_gateway = agent_gateway or a
        optimizer_gateway = optimizer_gateway or o
    if config.budget_dollars is not None:
        for gw in (agent_gateway, optimizer_gateway):
            if gw is not None and hasattr(gw, "price_known") and not gw.price_known():
                raise RunError(f"--budget-dollars: the price of {gw.config.model} is unknown, so spending cannot be "
                               "counted; pass --price-in and --price-out (USD per million tokens) or use another budget")
    upd = {}
    for gw, field in ((agent_gateway, "model"), (optimizer_gateway, "optimizer_model")):
        m = getattr(getattr(gw, "config", None), "model", None)
        if isinstance(m, str) and m != getattr(config, field) and not (field == "optimizer_model" and m == config.model
                                                                      and config.optimizer_model is None):
            upd[field] = m
    if upd:
        config = config.model_copy(update=upd)
    if initial_prompts is None:
        if config.prompts:
            try:
                initial_prompts = PromptSet.load(config.prompts)
            except (PromptFormatError, OSError) as e:
                raise RunError(f"--prompts {config.prompts}: {e}") from None
        else:
            from promptevo.agents.registry import default_prompts

            initial_prompts = default_prompts(config.agent, task, config.init)
    if not initial_prompts.modules:
        raise RunError(f"agent {config.agent!r} has no prompts to optimize")
    if adapter is None:
        adapter = _text_game_adapter(config, task, agent_gateway, optimizer_gateway, agent_builder, runner,
                                     worker_setup)
    check = getattr(adapter, "check", None)
    if callable(check):
        import inspect

        from promptevo.agents.base import AgentError
        from promptevo.optim.propose.hints import HintLibraryError
        from promptevo.optim.propose.skills import SkillLibraryError

        try:
            check(initial_prompts) if inspect.signature(check).parameters else check()
        except (HintLibraryError, SkillLibraryError, AgentError) as e:
            raise RunError(str(e)) from None
    check_seed_counts(config, task)
    return config, task, adapter, initial_prompts, agent_gateway, optimizer_gateway


def check_seed_counts(config: OptimizeConfig, task: TaskConfig) -> None:
    """The seeds a run asks of each split exist (one line naming the option otherwise)."""
    need = {"train": (config.effective_evidence_episodes + config.episodes,
                      f"--episodes {config.episodes} + --evidence-episodes {config.effective_evidence_episodes}"),
            "validation": (config.validation_episodes, f"--validation-episodes {config.validation_episodes}"),
            "test": (config.test_episodes, f"--test-episodes {config.test_episodes}")}
    for split, (n, what) in need.items():
        have = len(task.seed_list(split))  # type: ignore[arg-type]
        if n > have:
            raise ConfigError(f"{what.split()[0]}: {what} needs {n} {split} seeds; task {task.name!r} has {have}")


def optimize(config: OptimizeConfig | None = None, *, task: TaskConfig | str | None = None,
             initial_prompts: PromptSet | None = None, agent_gateway: Any = None, optimizer_gateway: Any = None,
             adapter: Any = None, agent_builder: Callable | None = None, runner: Callable | None = None,
             listeners: Sequence[Any] | None = None, quiet: bool = False, console: Any = None,
             worker_setup: Callable[[], Any] | None = None, **settings: Any) -> RunResult:
    """Optimize an agent's prompts on a task; returns the best prompts and the report (test split).

    Give an :class:`~promptevo.optim.config.OptimizeConfig` or its fields as keywords
    (``optimize(task="goto", generations=3, model="openai/gpt-4o-mini")``). Defaults: gateways built from
    the models in the config; the task loaded by name; the agent's default prompts (or ``prompts=FILE``);
    the text-game adapter. ``task`` is a task name or a :class:`~promptevo.tasks.TaskConfig` (for a task that
    has no file). Pass ``adapter`` to optimize something else (see
    :class:`promptevo.optim.adapter.Adapter`). Raises :class:`RunError` / :class:`ConfigError` (one line).
    """
    config, task, adapter, initial_prompts, agent_gateway, optimizer_gateway = prepare(
        config, task=task, initial_prompts=initial_prompts, agent_gateway=agent_gateway,
        optimizer_gateway=optimizer_gateway, adapter=adapter, agent_builder=agent_builder, runner=runner,
        worker_setup=worker_setup, **settings)
    run_dir = config.run_path()
    fresh = not run_dir.exists()
    lock = FolderLock(run_dir)  # every option is checked above, before the run folder exists
    try:
        lock_note = lock.acquire()
    except FolderLockError as e:
        raise RunError(str(e)) from None
    except OSError as e:
        raise RunError(io_error_line(e)) from None
    finished = False
    try:
        write_text_atomic(run_dir / "config.toml", config_toml(config))  # `--config` repeats the run
        result = _run_engine(config, task, adapter, initial_prompts, agent_gateway, optimizer_gateway, run_dir,
                           listeners=listeners, quiet=quiet, console=console, lock_note=lock_note)
        finished = True
        return result
    except (RunError, ConfigError) as e:  # a refusal (not an outage, which --resume continues)
        finished = isinstance(e, RunStopped)
        raise
    except OSError as e:
        finished = True  # the folder is kept for --resume
        raise RunError(f"{io_error_line(e)}; finished episodes and the last checkpoint are kept: fix the folder, then "
                       f"`promptevo optimize --resume {run_dir}`") from None
    except BaseException:
        finished = True  # interrupted or crashed: the folder is kept for --resume
        raise
    finally:
        lock.release()
        if fresh and not finished:
            remove_if_unstarted(run_dir)


def plan(cfg: OptimizeConfig, given: set[str] = frozenset(), *, probe: bool = False,
         seconds_per_call: float | None = None) -> list[str]:
    """The plan of a run as lines (:mod:`promptevo.optim.plan`): seconds per call from ``seconds_per_call``,
    else from earlier runs of the model, else (with ``probe``) measured on a few agent calls, else unknown.
    ``given``: the settings the user gave explicitly (the plan names the ones that override a preset)."""
    from promptevo.agents.registry import calls_per_step
    from promptevo.envs.base import has_expert
    from promptevo.optim.plan import (
        calls_from_runs,
        describe,
        make_plan,
        probe_seconds,
        seconds_from_runs,
    )
    from promptevo.tasks import load_task, make_env

    task = load_task(cfg.task)
    env = make_env(task)
    try:
        obs, info = env.reset(task.seed_list("train")[0])
        steps = min(env.max_steps, cfg.max_steps or env.max_steps, task.max_steps or env.max_steps)
        expert = has_expert(env)
        found: tuple[float, str] | None = None
        probe_note = ""
        if seconds_per_call is not None:
            found = (seconds_per_call, "given with --seconds-per-call")
        else:
            found = seconds_from_runs(cfg.results_dir, cfg.model)
        if found is None and probe:
            from promptevo.agents.registry import make_agent

            try:
                gw, _ = build_gateways(cfg.model_copy(update={"no_cache": True}))
                agent = make_agent(cfg.agent, gw, task=task, init=cfg.init, **cfg.agent_options)
                agent.reset(env, str(info.get("mission") or env.mission), seed=0)
                found = probe_seconds(lambda: agent.act(obs, info), n=3)
            except Exception as e:  # noqa: BLE001 - the plan still prints, without a time
                probe_note = "the probe failed: " + (" ".join(str(e).split())[:160] or type(e).__name__)
    finally:
        env.close()
    seconds, source = found if found else (None, probe_note)
    earlier = calls_from_runs(cfg.results_dir, cfg.model, cfg.task, cfg.agent)
    the_plan = make_plan(cfg, steps, calls_per_step=calls_per_step(cfg.agent), has_expert=expert, seconds=seconds,
                         source=source, calls_per_episode=earlier)
    return describe(the_plan, cfg, given)


def remove_if_unstarted(run_dir: Path) -> None:
    """A new run that stopped before it played any episode leaves no folder behind (it held only its
    settings, its log and a checkpoint of nothing)."""
    if not run_dir.is_dir():
        return
    leftovers = {"config.toml", "run.lock", "run.log", CHECKPOINT}
    if all(p.name in leftovers for p in run_dir.iterdir()):
        for p in run_dir.iterdir():
            p.unlink(missing_ok=True)
        run_dir.rmdir()


def _run_engine(config: OptimizeConfig, task: TaskConfig, adapter: Any, initial_prompts: PromptSet,
                agent_gateway: Any, optimizer_gateway: Any, run_dir: Any, *, listeners: Sequence[Any] | None,
                quiet: bool, console: Any, lock_note: str | None) -> RunResult:
    if listeners is None:
        from promptevo.optim.progress import default_listeners

        listeners = default_listeners(config, run_dir, quiet=quiet, console=console)
    emitter = Emitter(list(listeners))
    if config.mlflow:
        from promptevo.reporting.tracking import MLflowTracker, TrackingError

        try:
            emitter.add(MLflowTracker(config, run_dir))
        except TrackingError as e:
            emitter("warning", message=f"warning: {e}; the run goes on without MLflow")
    from promptevo.optim.strategies import update_skills, validity_report
    from promptevo.reporting.report import finish_run

    engine = Engine(config, adapter, task=task, usage=usage_of(agent_gateway, optimizer_gateway), emitter=emitter,
                    finish=finish_run, skills_hook=update_skills if config.skills else None,
                    validity_hook=validity_report if config.backtest else None)
    if hasattr(adapter, "route_warnings"):
        adapter.route_warnings(engine.warn)  # the adapter's warnings reach the run log and the report
    if lock_note:
        emitter("warning", message=f"note: {lock_note}")
    try:
        return engine.run(initial_prompts)
    except RunStopped:
        try:  # the HTML report of a stopped run says so, and why
            from promptevo.reporting.html import write_html

            write_html(run_dir)
        except Exception:  # noqa: BLE001 - a convenience; the stop is what the user must see
            pass
        raise
    finally:
        emitter.close()


def _text_game_adapter(config: OptimizeConfig, task: TaskConfig, agent_gateway: Any, optimizer_gateway: Any,
                       agent_builder: Callable | None, runner: Callable | None,
                       worker_setup: Callable[[], Any] | None) -> Any:
    from promptevo.evaluation.scaleout import use_ray
    from promptevo.optim.game_adapter import TextGameAdapter, default_runner

    if use_ray(config.ray):
        if agent_builder is not None or runner is not None:
            raise RunError("--ray plays episodes with the built-in agents and runner; a custom agent_builder or "
                           "runner cannot be shipped to Ray workers")
        agent_builder, runner = _ray_builder_and_runner(config, task, agent_gateway, worker_setup)
    if agent_builder is None:
        from promptevo.agents.registry import make_agent, needs_llm, options_for

        options = dict(config.agent_options)

        def agent_builder(name: str, prompts: PromptSet | None) -> Callable[[], Any]:
            # the optimized agent plays the prompts it is given; the baseline plays its own plain (BALROG)
            # prompts with the run's message settings where it shares them (history, constrained decoding)
            if name == config.agent:
                opts = options
            else:
                opts = options_for(name, {k: v for k, v in options.items() if k in ("history", "constrained")})
            return lambda: make_agent(name, agent_gateway if needs_llm(name) else None, prompts=prompts, task=task,
                                      init="plain", **opts)

    return TextGameAdapter(config, task, agent_gateway=agent_gateway, optimizer_gateway=optimizer_gateway,
                           agent_builder=agent_builder, runner=runner or default_runner)


def _ray_builder_and_runner(config: OptimizeConfig, task: TaskConfig, agent_gateway: Any,
                            setup: Callable[[], Any] | None) -> tuple[Callable, Callable]:
    """Agents as picklable specs played as Ray tasks; the workers' LLM usage is added to ``agent_gateway``."""
    import os

    from promptevo.agents.registry import needs_llm
    from promptevo.evaluation.scaleout import AgentSpec, RayNotInstalledError, absorb_usage, ensure_ray, run_episodes_ray

    try:
        ensure_ray(num_cpus=None if os.environ.get("RAY_ADDRESS") else config.effective_concurrency)
    except RayNotInstalledError as e:
        raise RunError(str(e)) from None

    def builder(name: str, prompts: PromptSet | None) -> Callable[[], Any]:
        return AgentSpec.create(name, llm=agent_gateway if needs_llm(name) else None, prompts=prompts, task=task,
                                setup=setup, init=config.init, **(config.agent_options if name == config.agent else {}))

    def runner(task_: Any, factory: Any, seeds: Sequence[int], *, concurrency: int = 4,
               on_result: Callable[[Any], None] | None = None, **_: Any) -> list[Any]:
        def done(r: Any) -> None:
            absorb_usage(agent_gateway, [r])
            if on_result is not None:
                on_result(r)

        return run_episodes_ray(task_, factory, list(seeds), on_result=done, max_in_flight=concurrency)

    return builder, runner


class EvalError(RunError):
    """A setting of :func:`evaluate` out of range, or a run folder it may not write (one line)."""


def check_eval_settings(*, episodes: int | None = None, concurrency: int | None = 1, split: str = "test",
                        seed_offset: int = 0, temperature: float | None = None, max_tokens: int | None = None,
                        history: int | None = None, init: str = "plain") -> None:
    """Raise :class:`EvalError` (one line naming the flag) for an out-of-range evaluation setting."""
    import math

    from promptevo.agents.registry import prompt_inits

    checks = [
        (episodes is not None and episodes < 1, f"--episodes must be >= 1 (got {episodes})"),
        (concurrency is not None and concurrency < 1, f"--concurrency must be >= 1 (got {concurrency})"),
        (split == "heldout", "--seeds heldout was renamed: use test (the split played once at the end), or validation"),
        (split not in ("train", "validation", "test", "heldout"),
         f"--seeds must be train, validation or test (got {split!r})"),
        (seed_offset < 0, f"--seed-offset must be >= 0 (got {seed_offset})"),
        (temperature is not None and not (math.isfinite(temperature) and 0.0 <= temperature <= 2.0),
         f"--temperature must be between 0 and 2 (got {temperature})"),
        (max_tokens is not None and max_tokens < 1, f"--max-tokens must be >= 1 (got {max_tokens})"),
        (history is not None and history < 1, f"--history must be >= 1 (got {history})"),
        (init not in prompt_inits(), f"--init must be one of {', '.join(prompt_inits())} (got {init!r})"),
    ]
    for bad, line in checks:
        if bad:
            raise EvalError(line)


def load_prompts(path: str | Path) -> PromptSet:
    """``PromptSet.load(path)`` checked for the agents' placeholders; an unreadable file (a folder, not UTF-8,
    no permission, not a prompt set) is one :class:`EvalError` line naming it."""
    from promptevo.agents.base import check_placeholders
    from promptevo.errors import PromptevoError

    path = Path(path)
    if path.is_dir():
        raise EvalError(f"--prompts {path}: is a folder, not a prompt file (.md or .json)")
    try:
        prompts = PromptSet.load(path)
        check_placeholders(prompts)
        return prompts
    except UnicodeDecodeError as e:
        raise EvalError(f"--prompts {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except PromptFormatError as e:
        if str(path) in str(e):
            raise
        raise EvalError(f"--prompts {path}: {e}") from None
    except (FileNotFoundError, PromptevoError):
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise EvalError(f"--prompts {path}: cannot read a prompt set: {type(e).__name__}: {e}") from None


def name_part(text: str) -> str:
    """``text`` as a part of a folder name (runs of other characters become one ``_``)."""
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


def evaluate(task: str | TaskConfig | Sequence[str | TaskConfig], *, agent: str = "robust-cot",
             prompts: PromptSet | str | Path | None = None, init: str = "plain", model: str | None = None,
             api_base: str | None = None, episodes: int | None = None, split: str = "test", seed_offset: int = 0,
             concurrency: int | None = None, temperature: float | None = None, max_tokens: int | None = None,
             max_steps: int | None = None, timeout: float | None = None, gateway: Any = None, no_cache: bool = False,
             results_dir: str | Path | None = None, run_name: str | None = None, resume: bool = False,
             ray: bool | None = None, command: Sequence[str] | None = None,
             on_task: Callable[[str, int, int], Any] | None = None,
             on_result: Callable[[str, Any], Any] | None = None, **agent_options: Any) -> dict:
    """Play ``agent`` on ``episodes`` seeds of ``split`` (test by default) of one task, or of each task of a
    list, and return the summary.

    For one task the summary's top level is that task's figures (n, success rate with its 95% Wilson
    interval, BALROG progression, mean progress, steps, tokens, cost, ``task``, ``split``, ``seeds``); every
    summary also has ``tasks`` (the same per task), ``overall``, ``usage``, ``faults`` and ``complete``.
    ``agent_options`` reach the agents that take them (``history`` the single-call agents').

    With ``results_dir`` the run is written to ``results_dir/run_name`` (default: a timestamped name):
    config.json, prompts/<task>.md, every finished episode as it ends (episodes.jsonl) and summary.json after
    each task; a folder that has episodes is refused unless ``resume``, which plays only the seeds not yet
    finished. With ``ray`` (or ``RAY_ADDRESS`` set) every episode is a Ray task, at most ``concurrency`` in
    flight. ``on_task(name, total, done)`` is called before a task's episodes, ``on_result(name, result)``
    after each. On Ctrl-C the summary is written with ``complete: false`` and KeyboardInterrupt propagates.
    """
    from datetime import datetime

    from promptevo import __version__
    from promptevo.agents.registry import check_agent_name, default_prompt_path, make_agent, needs_llm, options_for
    from promptevo.evaluation.rollout import fault_summary, run_episodes
    from promptevo.evaluation.statistics import aggregate_tasks, summarize, summarize_by_task
    from promptevo.evaluation.store import RunWriter, read_episodes
    from promptevo.llm.gateway import Gateway, redact
    from promptevo.llm.types import LLMConfig, default_concurrency

    check_agent_name(agent)
    if concurrency is None:  # interleaved episodes defeat llama.cpp's prefix reuse: one at a time locally
        concurrency = gateway.config.concurrency if gateway is not None else \
            default_concurrency(model or LLMConfig.model)
    check_eval_settings(episodes=episodes, concurrency=concurrency, split=split, seed_offset=seed_offset,
                        temperature=temperature, max_tokens=max_tokens, history=agent_options.get("history"),
                        init=init)
    single = isinstance(task, (str, TaskConfig))
    tasks = [load_task(t) if isinstance(t, str) else t for t in ([task] if single else task)]  # type: ignore[list-item]
    if not tasks:
        raise EvalError("no task to evaluate")
    if max_steps is not None:
        tasks = [t.model_copy(update={"max_steps": max_steps if t.max_steps is None else min(t.max_steps, max_steps)})
                 for t in tasks]
    custom = load_prompts(prompts) if isinstance(prompts, (str, Path)) else prompts
    prompts_source = str(prompts) if isinstance(prompts, (str, Path)) else "given" if prompts is not None else None

    from promptevo.evaluation.scaleout import (
        AgentSpec,
        RayNotInstalledError,
        absorb_usage,
        ensure_ray,
        run_episodes_ray,
        use_ray,
    )

    ray_mode = ray is not False and use_ray(ray)
    gw = gateway
    if gw is None and needs_llm(agent):
        gw = Gateway(LLMConfig.from_options(model=model, api_base=api_base, temperature=temperature, timeout=timeout,
                                            max_tokens=max_tokens, no_cache=no_cache, concurrency=concurrency))
        gw.check()  # fail fast on a bad model string / missing key
    llm_cfg = gw.config if gw is not None else None
    agent_kw = options_for(agent, agent_options) if needs_llm(agent) else dict(agent_options)

    plan = []
    for t in tasks:
        ps, src = custom, prompts_source
        if ps is None and needs_llm(agent):
            path = default_prompt_path(agent, t, init)
            ps, src = PromptSet.load(path), str(path)
        make_agent(agent, gw, ps, **agent_kw)  # fail before anything is written (missing module, bad option)
        plan.append((t, ps, src, t.seeds(split, episodes if episodes is not None else t.episodes, seed_offset)))  # type: ignore[arg-type]

    if ray_mode:  # start (or join) Ray before anything is written; a missing package is one line
        try:
            ensure_ray(num_cpus=concurrency)
        except RayNotInstalledError as e:
            raise EvalError(str(e)) from None

    writer = run_dir = None
    done: dict[tuple[str, int], Any] = {}
    if results_dir is not None:
        name = run_name or default_run_name(tasks[0].name if len(tasks) == 1 else "all-tasks", agent)
        run_dir = Path(results_dir) / name_part(name)
        if (run_dir / "episodes.jsonl").exists():
            if not resume:
                raise EvalError(f"run directory {run_dir} already has episodes; use another --run or --resume")
            done = {(r.task, r.seed): r for r in read_episodes(run_dir / "episodes.jsonl") if not r.error}
        writer = RunWriter(run_dir)
        for t, ps, _, _ in plan:
            if ps is not None:
                ps.save(run_dir / "prompts" / f"{t.name}.md")
        writer.write_config({
            "promptevo_version": __version__,
            "command": [redact(a) for a in command] if command is not None else None,
            "started_at": datetime.now().isoformat(timespec="seconds"),
            "agent": agent,
            "agent_options": agent_kw,
            "init": init,
            "llm": llm_cfg.public_dict() if llm_cfg else None,
            "seed_split": split,
            "seed_offset": seed_offset,
            **({"scaleout": "ray"} if ray_mode else {}),
            "tasks": {t.name: {"config": t.model_dump(mode="json"), "seeds": s, "prompts_source": src,
                               "prompts_fingerprint": ps.fingerprint() if ps is not None else None}
                      for t, ps, src, s in plan},
        })

    results: list[Any] = list(done.values())

    def summary_now(final: bool) -> dict:
        per_task = summarize_by_task(results)
        overall = {**summarize(results), **{"balrog_" + k: v for k, v in aggregate_tasks(per_task).items()}}
        out = {"run": run_dir.name if run_dir else None, "agent": agent, "model": llm_cfg.model if llm_cfg else None,
               "complete": final, "split": split, "tasks": per_task, "overall": overall,
               "usage": gw.usage.snapshot() if gw is not None else {},
               "faults": fault_summary(results, gw.usage if gw is not None else None),
               "updated_at": datetime.now().isoformat(timespec="seconds")}
        if writer is not None:
            writer.write_summary(out)
        return out

    try:
        for t, ps, _, seeds in plan:
            todo = [s for s in seeds if (t.name, s) not in done]
            if on_task is not None:
                on_task(t.name, len(seeds), len(seeds) - len(todo))

            def finished(r: Any, name: str = t.name) -> None:
                if ray_mode and gw is not None:  # the LLM calls ran in Ray workers
                    absorb_usage(gw, [r])
                if writer is not None:
                    writer.add(r)
                results.append(r.without_trajectory())
                if on_result is not None:
                    on_result(name, r)

            if todo and ray_mode:
                spec = AgentSpec.create(agent, llm=llm_cfg, prompts=ps, task=t, **agent_kw)
                run_episodes_ray(t, spec, todo, on_result=finished, max_in_flight=concurrency)
            elif todo:
                def factory(ps: Any = ps) -> Any:
                    return make_agent(agent, gw, ps, **agent_kw)

                run_episodes(t, factory, todo, concurrency=concurrency, on_result=finished)
            summary_now(final=False)
    except KeyboardInterrupt:
        summary_now(final=False)
        raise
    summary = summary_now(final=True)
    summary["run_dir"] = str(run_dir) if run_dir else None
    if single:
        t, _, _, seeds = plan[0]
        summary = {**summary["tasks"].get(t.name, summarize([])), "task": t.name, "seeds": seeds, **summary}
    return summary


__all__ = ["ConfigError", "EvalError", "OptimizeConfig", "RunError", "RunResult", "evaluate", "optimize", "plan"]
