"""``promptevo eval``: the command line of :func:`promptevo.evaluate` (play an agent on the seeds of one task,
or of every BabyAI task, write ``results/<run>/`` and print the success table). Its flags that are settings
of a run (agent, model, prompts, reply tokens...) are generated from the same fields as optimize's."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from promptevo.cli.errors import UserError, print_error
from promptevo.cli.flags import Flag, field_flag, own_flag
from promptevo.cli.names import check_run_name
from promptevo.optim.config import SECTION_TITLES
from promptevo.reporting.console import print_json, print_table

console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

DOC = "Evaluate an agent on one task (or all BabyAI tasks) and write [bold]results/<run>/[/]."

EVAL_PANEL = "eval: what to play"
AGENT_PANEL = SECTION_TITLES["agent"]
EVAL_FLAGS: list[Flag] = [
    field_flag("task", help="task name (see `promptevo tasks`)", panel=EVAL_PANEL),
    own_flag("all_tasks", "--all-tasks", kind=bool, panel=EVAL_PANEL, help="evaluate every BabyAI task (the BALROG five)"),
    own_flag("episodes", "--episodes", "-n", kind=int, panel=EVAL_PANEL, help="episodes per task (default: the task's)"),
    own_flag("seeds", "--seeds", metavar="SPLIT", panel=EVAL_PANEL,
             help="seed split: test (default), validation or train"),
    own_flag("seed_offset", "--seed-offset", kind=int, panel=EVAL_PANEL, help="skip this many seeds of the split"),
    own_flag("resume", "--resume", kind=bool, panel=EVAL_PANEL,
             help="continue an existing --run, playing only the episodes not yet finished"),
    own_flag("as_json", "--json", kind=bool, panel=EVAL_PANEL,
             help="print the summary as one JSON document on stdout (progress and messages go to stderr)"),
    own_flag("quiet", "--quiet", "-q", kind=bool, panel=EVAL_PANEL, help="no progress display"),
    field_flag("agent", default="robust-cot", help="agent to play (`promptevo tasks` lists them)"),
    field_flag("init"),
    field_flag("prompts", help="PromptSet file (.md/.json) to play instead of the default prompts"),
    own_flag("history", "--history", kind=int, panel=AGENT_PANEL,
             help="naive/robust-cot: observations kept in the messages (default 16)"),
    own_flag("constrained", "--constrained/--no-constrained", kind=bool, panel=AGENT_PANEL,
             help="grammar-constrained action output (default: on for local/ models)"),
    field_flag("model"),
    field_flag("api_base"),
    field_flag("temperature"),
    field_flag("timeout"),
    field_flag("max_steps"),
    field_flag("agent_max_tokens", also=("--max-tokens",)),
    field_flag("concurrency"),
    field_flag("no_cache"),
    field_flag("ray"),
    field_flag("results_dir"),
    field_flag("run", also=("--run-name",), help="folder name under --results-dir (default <task>-<agent>-<timestamp>)"),
]


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


def task_names(values: dict[str, Any]) -> list[str]:
    """The tasks --task / --all-tasks name (one line when neither or both are given)."""
    from promptevo.tasks import list_tasks, load_task

    task, all_tasks = values.get("task"), bool(values.get("all_tasks"))
    if all_tasks and task:
        raise UserError("use either --task or --all-tasks, not both")
    if not all_tasks and not task:
        raise UserError("missing --task (or --all-tasks); valid tasks: " + ", ".join(list_tasks()))
    return [t for t in list_tasks() if load_task(t).family == "babyai"] if all_tasks else [task]


def run(values: dict[str, Any]) -> int:
    """The body of ``promptevo eval``: :func:`promptevo.evaluate` with a progress bar, then the table."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from promptevo.api import evaluate

    names = task_names(values)
    if values.get("run") is not None:
        check_run_name(values["run"], "--run")
    agent = values.get("agent", "robust-cot")
    options = {k: values[k] for k in ("history", "constrained") if values.get(k) is not None}
    quiet = bool(values.get("quiet"))
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("success {task.fields[succ]}/{task.fields[fin]}"), TextColumn("tokens {task.fields[tokens]:,}"),
        TimeElapsedColumn(), console=err_console, disable=quiet,
        transient=True,  # the final table says it all; an error stays one line
    )
    bars: dict[str, Any] = {}
    stats: dict[str, dict[str, int]] = {}

    def on_task(name: str, total: int, done: int) -> None:
        stats[name] = {"succ": 0, "fin": 0, "tokens": 0}
        bars[name] = progress.add_task(f"{name} ({agent})", total=total, completed=done, **stats[name])

    def on_result(name: str, r: Any) -> None:
        s = stats[name]
        s["succ"] += bool(r.success)
        s["fin"] += 1
        s["tokens"] += r.prompt_tokens + r.completion_tokens
        progress.update(bars[name], advance=1, **s)

    split = values.get("seeds", "test")
    t0 = time.perf_counter()
    try:
        with progress:
            summary = evaluate(
                names if len(names) > 1 or values.get("all_tasks") else names[0], agent=agent,
                prompts=values.get("prompts"), init=values.get("init", "plain"), model=values.get("model"),
                api_base=values.get("api_base"), episodes=values.get("episodes"), split=split,
                seed_offset=values.get("seed_offset", 0), concurrency=values.get("concurrency"),
                temperature=values.get("temperature"), max_tokens=values.get("agent_max_tokens"),
                max_steps=values.get("max_steps"), timeout=values.get("timeout"),
                no_cache=bool(values.get("no_cache")), results_dir=values.get("results_dir", "results"),
                run_name=values.get("run"), resume=bool(values.get("resume")), ray=values.get("ray") or None,
                command=["promptevo", *sys.argv[1:]], on_task=on_task, on_result=on_result, **options)
    except KeyboardInterrupt:
        err_console.print(
            "[yellow]interrupted:[/] the finished episodes are saved in the run folder's episodes.jsonl "
            "(summary.json covers them); rerun with the same --run and --resume to continue", soft_wrap=True)
        return 130
    run_dir = Path(summary["run_dir"])
    seconds = f"({time.perf_counter() - t0:.0f}s)"
    if values.get("as_json"):
        print_json({k: v for k, v in summary.items() if k in (
            "run", "agent", "model", "complete", "tasks", "overall", "usage", "faults", "updated_at")}
            | {"results_dir": str(run_dir), "seeds_split": split})
        err_console.print(f"results: {run_dir}  {seconds}", soft_wrap=True, highlight=False)
    else:
        print_table(results_table(f"{agent} · {summary['model'] or 'no LLM'} · {split} seeds", summary["tasks"],
                                  summary["overall"]), console)
        if len(summary["tasks"]) > 1:
            o = summary["overall"]
            console.print(f"BALROG-style overall progression: {o['balrog_progression_pct']:.1f} ± "
                          f"{o['balrog_progression_se']:.1f}")
        console.print(f"results: {run_dir}  {seconds}", soft_wrap=True, highlight=False)
    return outage_code(summary, run_dir)


#: share of an evaluation's episodes that may end on LLM errors before ``eval`` exits non-zero
EVAL_FAILURE_SHARE = 0.25


def outage_code(summary: dict, run_dir: Path) -> int:
    """3, with one line, when too many episodes could not be played because the LLM failed (they are not
    scored; ``--resume`` plays them again); else 0."""
    failed = int(summary["faults"].get("episodes_errored") or 0)
    played = int(summary["faults"].get("episodes") or 0)
    if not failed or failed <= EVAL_FAILURE_SHARE * played:
        return 0
    first = str(summary["faults"].get("first_error") or "")
    print_error(f"{failed} of {played} episodes could not be played: the LLM failed ({' '.join(first.split())[:160]}); "
                f"they are not scored. When it works again: --run {run_dir.name} --resume")
    return 3
