"""``promptevo eval``: play an agent on the seeds of one task (or every BabyAI task), write
``results/<run>/`` (episodes, summary) and print the success table."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from promptevo import __version__
from promptevo.cli.errors import UserError, print_error, user_error_types
from promptevo.cli.names import check_run_name
from promptevo.reporting.console import print_json, print_table

console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


def default_run_name(agent: str, model: str, tasks: list[str]) -> str:
    what = tasks[0] if len(tasks) == 1 else "all-tasks"
    return f"{datetime.now():%Y%m%d-%H%M%S}_{_slug(agent)}_{_slug(what)}_{_slug(model)}"


def _fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def results_table(title: str, per_task: dict[str, dict], overall: dict | None = None) -> Table:
    t = Table(title=title, title_justify="left")
    for col, just in (
        ("task", "left"),
        ("n", "right"),
        ("success (95% CI)", "right"),
        ("progression ± SE", "right"),
        ("mean steps", "right"),
        ("invalid", "right"),
        ("tokens", "right"),
        ("cost $", "right"),
        ("errors", "right"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]

    def row(name: str, s: dict, style: str | None = None) -> None:
        lo, hi = s["success_ci95"]
        t.add_row(
            name,
            str(s["n"]),
            f"{_fmt_pct(s['success_rate'])} ({_fmt_pct(lo)}-{_fmt_pct(hi)})" if s["n"] else "no episode played",
            f"{s['progression_pct']:.1f} ± {s['progression_se']:.1f}",
            f"{s['mean_steps']:.1f}",
            _fmt_pct(s["invalid_action_rate"]),
            f"{s['total_tokens']:,}",
            f"{s['cost']:.4f}",
            str(s["errors"]),
            style=style,
        )

    for name, s in per_task.items():
        row(name, s)
    if overall is not None and len(per_task) > 1:
        row("overall", overall, style="bold")
    return t


def check_eval_flags(
    *,
    episodes: Optional[int] = None,
    concurrency: int = 1,
    seeds: str = "test",
    seed_offset: int = 0,
    temperature: Optional[float] = None,
    max_tokens: Optional[int] = None,
    history: Optional[int] = None,
    init: str = "plain",
) -> None:
    """Raise :class:`UserError` (one line naming the flag) for an out-of-range eval option."""
    import math

    if episodes is not None and episodes < 1:
        raise UserError(f"--episodes must be >= 1 (got {episodes})")
    if concurrency < 1:
        raise UserError(f"--concurrency must be >= 1 (got {concurrency})")
    if seeds == "heldout":
        raise UserError("--seeds heldout was renamed: use test (the split played once at the end), or validation")
    if seeds not in ("train", "validation", "test"):
        raise UserError(f"--seeds must be train, validation or test (got {seeds!r})")
    if seed_offset < 0:
        raise UserError(f"--seed-offset must be >= 0 (got {seed_offset})")
    if temperature is not None and not (math.isfinite(temperature) and 0.0 <= temperature <= 2.0):
        raise UserError(f"--temperature must be between 0 and 2 (got {temperature})")
    if max_tokens is not None and max_tokens < 1:
        raise UserError(f"--max-tokens must be >= 1 (got {max_tokens})")
    if history is not None and history < 1:
        raise UserError(f"--history must be >= 1 (got {history})")
    from promptevo.agents.registry import prompt_inits

    inits = prompt_inits()
    if init not in inits:
        raise UserError(f"--init must be one of {', '.join(inits)} (got {init!r})")


def load_prompts_file(path: Path) -> Any:
    """``PromptSet.load(path)`` with unreadable files (a folder, not UTF-8, no permission) as one line."""
    from promptevo.segments import PromptSet

    if path.is_dir():
        raise UserError(f"--prompts {path}: is a folder, not a prompt file (.md or .json)")
    from promptevo.agents.base import check_placeholders
    from promptevo.segments import PromptFormatError

    try:
        prompts = PromptSet.load(path)
        check_placeholders(prompts)
        return prompts
    except UnicodeDecodeError as e:
        raise UserError(f"--prompts {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except PromptFormatError as e:
        if str(path) in str(e):
            raise
        raise UserError(f"--prompts {path}: {e}") from None
    except (FileNotFoundError, *user_error_types()):
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"--prompts {path}: cannot read a prompt set: {type(e).__name__}: {e}") from None


def redact_argv(argv: list[str]) -> list[str]:
    """The command line with credentials removed (``--api-base http://user:pass@host`` -> ``***@``)."""
    from promptevo.llm.gateway import redact

    return [redact(a) for a in argv]


def run_eval(
    *,
    agent: str,
    tasks: list[str],
    episodes: Optional[int],
    model: Optional[str],
    api_base: Optional[str],
    concurrency: Optional[int],
    seeds: str,
    seed_offset: int,
    prompts_file: Optional[Path],
    init: str,
    run_name: Optional[str],
    results_dir: Path,
    no_cache: bool,
    temperature: Optional[float],
    max_tokens: Optional[int],
    history: Optional[int],
    constrained: Optional[bool],
    resume: bool,
    show_progress: bool = True,
    ray: Optional[bool] = None,
    as_json: bool = False,
    timeout: Optional[float] = None,
) -> Path:
    """The body of ``promptevo eval``; returns the run directory.

    With ``ray`` (or the ``RAY_ADDRESS`` environment variable set) every episode is a Ray task
    (:mod:`promptevo.evaluation.scaleout`); at most ``concurrency`` episodes are in flight.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from promptevo.agents.registry import (
        check_agent_name,
        default_prompt_path,
        make_agent,
        needs_llm,
        options_for,
    )
    from promptevo.evaluation.rollout import fault_summary, run_episodes
    from promptevo.evaluation.scaleout import (
        AgentSpec,
        RayNotInstalledError,
        absorb_usage,
        ensure_ray,
        run_episodes_ray,
        use_ray,
    )
    from promptevo.evaluation.statistics import (
        aggregate_tasks,
        summarize,
        summarize_by_task,
    )
    from promptevo.evaluation.store import RunWriter, read_episodes
    from promptevo.llm.gateway import Gateway, LLMConfig
    from promptevo.llm.types import default_concurrency
    from promptevo.segments import PromptSet
    from promptevo.tasks import load_task

    check_agent_name(agent)
    if concurrency is None:  # interleaved episodes defeat llama.cpp's prefix reuse: one at a time locally
        concurrency = default_concurrency(model or LLMConfig.model)
    check_eval_flags(episodes=episodes, concurrency=concurrency, seeds=seeds, seed_offset=seed_offset,
                     temperature=temperature, max_tokens=max_tokens, history=history, init=init)
    task_cfgs = [load_task(t) for t in tasks]
    ray_mode = ray is not False and use_ray(ray)
    custom_prompts = load_prompts_file(prompts_file) if prompts_file is not None else None

    llm_cfg = LLMConfig.from_options(model=model, api_base=api_base, temperature=temperature, timeout=timeout,
                                     max_tokens=max_tokens, no_cache=no_cache, concurrency=concurrency)
    gateway = Gateway(llm_cfg) if needs_llm(agent) else None
    if gateway is not None:
        gateway.check()  # fail fast on a bad model string / missing key

    # the message settings reach the agents that take them (history: the single-call agents)
    agent_kw: dict[str, Any] = options_for(agent, {k: v for k, v in (("history", history), ("constrained", constrained))
                                                   if v is not None}) if needs_llm(agent) else {}

    plan = []
    for task in task_cfgs:
        ps = custom_prompts if custom_prompts is not None else None
        src = str(prompts_file) if prompts_file else None
        if ps is None and needs_llm(agent):
            path = default_prompt_path(agent, task, init)
            ps, src = PromptSet.load(path), str(path)
        make_agent(agent, gateway, ps, **agent_kw)  # fail before anything is written (missing module, bad option)
        n = episodes if episodes is not None else task.episodes
        plan.append((task, ps, src, task.seeds(seeds, n, seed_offset)))

    if ray_mode:  # start (or join) Ray before anything is written; a missing package is one line
        try:
            ensure_ray(num_cpus=concurrency)
        except RayNotInstalledError as e:
            raise UserError(str(e)) from None

    if run_name is not None:
        check_run_name(run_name, "--run-name")
    name = run_name or default_run_name(agent, llm_cfg.model if gateway else "none", [t.name for t in task_cfgs])
    run_dir = results_dir / _slug(name)
    done: dict[tuple[str, int], Any] = {}
    if (run_dir / "episodes.jsonl").exists():
        if not resume:
            raise UserError(f"run directory {run_dir} already has episodes; use another --run-name or --resume")
        done = {(r.task, r.seed): r for r in read_episodes(run_dir / "episodes.jsonl") if not r.error}
    writer = RunWriter(run_dir)
    if writer.store.recovered:
        err_console.print(f"note: {writer.store.recovered}", soft_wrap=True, highlight=False, markup=False)
    for task, ps, _, _ in plan:
        if ps is not None:
            ps.save(run_dir / "prompts" / f"{task.name}.md")
    config = {
        "promptevo_version": __version__,
        "command": ["promptevo", *redact_argv(sys.argv[1:])],
        "started_at": datetime.now().isoformat(timespec="seconds"),
        "agent": agent,
        "agent_options": agent_kw,
        "init": init,
        "llm": llm_cfg.public_dict() if gateway else None,
        "seed_split": seeds,
        "seed_offset": seed_offset,
        **({"scaleout": "ray"} if ray_mode else {}),
        "tasks": {
            t.name: {
                "config": t.model_dump(mode="json"),
                "seeds": s,
                "prompts_source": src,
                "prompts_fingerprint": ps.fingerprint() if ps is not None else None,
            }
            for t, ps, src, s in plan
        },
    }
    writer.write_config(config)

    all_results: list[Any] = list(done.values())

    def write_summary(final: bool) -> dict:
        per_task = summarize_by_task(all_results)
        overall = {**summarize(all_results), **{"balrog_" + k: v for k, v in aggregate_tasks(per_task).items()}}
        summary = {
            "run": run_dir.name,
            "agent": agent,
            "model": llm_cfg.model if gateway else None,
            "complete": final,
            "tasks": per_task,
            "overall": overall,
            "usage": gateway.usage.snapshot() if gateway is not None else {},
            "faults": fault_summary(all_results, gateway.usage if gateway is not None else None),
            "updated_at": datetime.now().isoformat(timespec="seconds"),
        }
        writer.write_summary(summary)
        return summary

    t0 = time.perf_counter()
    interrupted = False
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("success {task.fields[succ]}/{task.fields[fin]}"),
        TextColumn("tokens {task.fields[tokens]:,}"),
        TimeElapsedColumn(),
        console=err_console,
        disable=not show_progress,
        transient=True,  # the final table says it all; an error stays one line
    )
    try:
        with progress:
            for task, ps, _, task_seeds in plan:
                todo = [s for s in task_seeds if (task.name, s) not in done]
                bar = progress.add_task(
                    f"{task.name} ({agent})", total=len(task_seeds), succ=0, fin=0, tokens=0,
                    completed=len(task_seeds) - len(todo),
                )
                stats = {"succ": 0, "fin": 0, "tokens": 0}

                def on_result(r: Any, bar: Any = bar, stats: dict = stats) -> None:
                    if ray_mode and gateway is not None:  # the LLM calls ran in Ray workers
                        absorb_usage(gateway, [r])
                    writer.add(r)
                    all_results.append(r.without_trajectory())
                    stats["succ"] += bool(r.success)
                    stats["fin"] += 1
                    stats["tokens"] += r.prompt_tokens + r.completion_tokens
                    progress.update(bar, advance=1, **stats)

                def factory(task: Any = task, ps: Any = ps) -> Any:
                    return make_agent(agent, gateway, ps, **agent_kw)

                if todo and ray_mode:
                    spec = AgentSpec.create(agent, llm=llm_cfg if gateway is not None else None, prompts=ps,
                                            task=task, **agent_kw)
                    run_episodes_ray(task, spec, todo, on_result=on_result, max_in_flight=concurrency)
                elif todo:
                    run_episodes(task, factory, todo, concurrency=concurrency, on_result=on_result)
                write_summary(final=False)
    except KeyboardInterrupt:
        interrupted = True
    summary = write_summary(final=not interrupted)
    if interrupted:
        err_console.print(
            f"[yellow]interrupted:[/] {writer.count} finished episode(s) saved in {run_dir}/episodes.jsonl "
            f"(summary.json covers them); rerun with --run-name {run_dir.name} --resume to continue",
            soft_wrap=True,
        )
        raise typer.Exit(130)
    failed = int(summary["faults"].get("episodes_errored") or 0)
    played = int(summary["faults"].get("episodes") or 0)
    if as_json:
        print_json({**summary, "results_dir": str(run_dir), "seeds_split": seeds})
        err_console.print(f"results: {run_dir}  ({time.perf_counter() - t0:.0f}s)", soft_wrap=True, highlight=False)
        fail_on_outage(failed, played, all_results, run_dir)
        return run_dir
    print_table(
        results_table(f"{agent} · {summary['model'] or 'no LLM'} · {seeds} seeds", summary["tasks"], summary["overall"]),
        console,
    )
    if len(summary["tasks"]) > 1:
        o = summary["overall"]
        console.print(f"BALROG-style overall progression: {o['balrog_progression_pct']:.1f} ± {o['balrog_progression_se']:.1f}")
    console.print(f"results: {run_dir}  ({time.perf_counter() - t0:.0f}s)", soft_wrap=True, highlight=False)
    fail_on_outage(failed, played, all_results, run_dir)
    return run_dir


#: share of an evaluation's episodes that may end on LLM errors before ``eval`` exits non-zero
EVAL_FAILURE_SHARE = 0.25


def fail_on_outage(failed: int, played: int, results: list[Any], run_dir: Path) -> None:
    """Exit 3 with one line when too many episodes could not be played because the LLM failed (they are
    not scored; ``--resume`` plays them again)."""
    if not failed or failed <= EVAL_FAILURE_SHARE * played:
        return
    first = next((str(e) for r in results
                  if (e := getattr(r, "error", None) or (r.get("error") if isinstance(r, dict) else None))), "")
    print_error(f"{failed} of {played} episodes could not be played: the LLM failed ({' '.join(first.split())[:160]}); "
                f"they are not scored. When it works again: --run-name {run_dir.name} --resume")
    raise typer.Exit(3)
