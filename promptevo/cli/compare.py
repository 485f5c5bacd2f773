"""``promptevo compare``: the command line of :mod:`promptevo.baselines.compare`."""

from __future__ import annotations

from collections.abc import Sequence

from promptevo.baselines.compare import (
    METHODS,
    CompareConfig,
    Comparison,
    check_methods_available,
    parse_methods,
    results_table,
)
from promptevo.cli.errors import print_error, user_error_types
from promptevo.cli.parsing import CommandParser, check_run_name
from promptevo.reporting.console import print_json, print_table


def build_parser() -> CommandParser:
    p = CommandParser(prog="promptevo compare",
                      description="Run methods with the same model, LLM-call budget (enforced in the gateways), "
                      "training, validation and test seeds, and print one table (test success with 95%% Wilson "
                      "interval, optimization calls, tokens, cost, wall time). Writes results/<run>/compare.json.")
    a = p.add_argument
    a("--task", "-t", required=True, help="task name (see `promptevo tasks`)")
    a("--methods", default="robust-cot,promptevo,gepa", help=f"comma-separated: {', '.join(METHODS)}")
    a("--budget-calls", type=int, default=500, help="LLM calls each optimizer may spend (default 500)")
    a("--agent", "-a", default="robust-cot", help="agent whose prompts are optimized (default robust-cot)")
    a("--init", default="plain", help="initial prompts: plain, guided or compact (default plain)")
    a("--history", type=int, default=None, help="naive/robust-cot: observations kept in the messages, for every "
      "method (default the agent's, 16)")
    a("--agent-max-tokens", type=int, default=512, help="max tokens per agent LLM call (default 512)")
    a("--operators", default="induce,mutate", help="promptevo's proposal operators (default induce,mutate; the "
      "person-written hint library is not used unless named)")
    a("--model", "-m", default=None, help="agent LLM, a LiteLLM model string (default the local model)")
    a("--api-base", default=None, help="server URL for the agent model")
    a("--optimizer-model", default=None, help="LLM for promptevo's analyser/mutator and GEPA's reflection")
    a("--optimizer-api-base", default=None, help="server URL for the optimizer model")
    a("--test-episodes", type=int, default=20, help="test seeds for the final table (default 20)")
    a("--train-episodes", type=int, default=6, help="training seeds shared by the optimizers (default 6)")
    a("--val-episodes", type=int, default=6, help="validation seeds (promotion gate / GEPA valset; default 6)")
    a("--max-steps", type=int, default=None, help="cap on episode length (default: the task's)")
    a("--metric", choices=["success", "progression", "return"], default="success",
      help="per-episode score the optimizers maximise (default success)")
    a("--generations", type=int, default=100, help="promptevo generation cap (the budget usually stops first)")
    a("--concurrency", "-j", type=int, default=4, help="episodes in parallel (default 4)")
    a("--seed", type=int, default=0, help="LLM sampling seed and GEPA's seed (default 0)")
    a("--no-cache", action="store_true", help="do not use the LLM response cache")
    a("--results-dir", default="results", help="where run folders go (default results)")
    a("--run-name", "--run", dest="run", default=None, help="run name (default compare-<task>-<timestamp>)")
    a("--quiet", "-q", action="store_true", help="only the final table")
    a("--json", action="store_true", dest="as_json", help="print compare.json as one JSON document on stdout "
      "(progress goes to stderr)")
    return p


def config_from_args(args: Sequence[str]) -> tuple[CompareConfig, bool, bool]:
    """(config, quiet, as_json) from command-line arguments."""
    from promptevo.llm.gateway import LLMConfig

    ns = build_parser().parse_args(list(args))
    if ns.run is not None:
        check_run_name(ns.run)
    cfg = CompareConfig(
        task=ns.task, methods=parse_methods(ns.methods), budget_calls=ns.budget_calls, agent=ns.agent,
        init=ns.init, model=ns.model or LLMConfig().model, api_base=ns.api_base, optimizer_model=ns.optimizer_model,
        optimizer_api_base=ns.optimizer_api_base, test_episodes=ns.test_episodes,
        train_episodes=ns.train_episodes, val_episodes=ns.val_episodes, max_steps=ns.max_steps, metric=ns.metric,
        generations=ns.generations, concurrency=ns.concurrency, seed=ns.seed, no_cache=ns.no_cache,
        results_dir=ns.results_dir, run=ns.run, history=ns.history, max_tokens=ns.agent_max_tokens,
        operators=[x.strip() for x in ns.operators.split(",") if x.strip()],
    )
    return cfg, bool(ns.quiet), bool(ns.as_json)


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo compare``; returns the exit code."""
    from rich.console import Console

    err = Console(stderr=True, emoji=False)
    out = Console(emoji=False)
    try:
        cfg, quiet, as_json = config_from_args(args)
        check_methods_available(cfg.methods)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except user_error_types() as e:
        print_error(e)
        return 2
    try:
        data = Comparison(cfg, console=err if as_json else out, quiet=quiet).run()
    except user_error_types() as e:
        print_error(e)
        return 2
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted[/]: finished methods are in {cfg.run_dir() / 'compare.json'}")
        return 130
    if as_json:
        print_json(data)
        return 0
    print_table(results_table(data), out)
    out.print(f"results: {cfg.run_dir() / 'compare.json'}", highlight=False, soft_wrap=True)
    return 0
