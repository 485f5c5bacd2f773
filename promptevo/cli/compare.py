"""``promptevo compare``: the command line of :mod:`promptevo.baselines.compare`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from promptevo.baselines.compare import (
    METHODS,
    CompareConfig,
    Comparison,
    check_methods_available,
    parse_methods,
    results_table,
)
from promptevo.cli.errors import UsageError, print_error, user_error_types
from promptevo.cli.flags import Flag, field_flag, own_flag, parse, run_args
from promptevo.cli.names import check_run_name
from promptevo.reporting.console import print_json, print_table


DOC = ("Run methods with the same model, LLM-call budget (enforced in the gateways), training, validation and "
       "test seeds, and print one table (test success with 95% Wilson interval, optimization calls, tokens, cost, "
       "wall time). Writes results/<run>/compare.json.")
P_RUN, P_AGENT, P_SIZES = "run", "agent and models", "sizes and seeds"
#: (flag, default); defaults are applied here, after parsing, so a flag left out is absent like optimize's
FLAGS: list[tuple[Flag, Any]] = [
    (field_flag("task", help="task name (see `promptevo tasks`; required)", panel=P_RUN), None),
    (own_flag("methods", "--methods", panel=P_RUN, help=f"comma-separated: {', '.join(METHODS)} (default "
              "robust-cot,promptevo,gepa)"), "robust-cot,promptevo,gepa"),
    (own_flag("budget_calls", "--budget-calls", kind=int, panel=P_RUN,
              help="LLM calls each optimizer may spend (default 500)"), 500),
    (field_flag("agent", default="robust-cot", panel=P_AGENT), "robust-cot"),
    (field_flag("init", panel=P_AGENT), "plain"),
    (own_flag("history", "--history", kind=int, panel=P_AGENT, help="naive/robust-cot: observations kept in the "
              "messages, for every method (default the agent's, 16)"), None),
    (field_flag("agent_max_tokens", panel=P_AGENT), 512),
    (field_flag("operators", default="induce,mutate", panel=P_RUN,
                help="promptevo's proposal operators (the person-written hint library is not used unless named)"),
     ["induce", "mutate"]),
    (field_flag("model", panel=P_AGENT), None),
    (field_flag("api_base", panel=P_AGENT), None),
    (field_flag("optimizer_model", panel=P_AGENT, help="LLM for promptevo's analyser/mutator and GEPA's "
                "reflection (default the agent's)"), None),
    (field_flag("optimizer_api_base", panel=P_AGENT), None),
    (field_flag("test_episodes", default=20, panel=P_SIZES, help="test seeds for the final table"), 20),
    (own_flag("train_episodes", "--train-episodes", "--episodes", kind=int, panel=P_SIZES,
              help="training seeds shared by the optimizers (default 6)"), 6),
    (field_flag("validation_episodes", default=6, also=("--val-episodes",), panel=P_SIZES,
                help="validation seeds (promotion gate / GEPA valset)"), 6),
    (field_flag("max_steps", panel=P_SIZES), None),
    (field_flag("fitness", panel=P_SIZES, help="per-episode score the optimizers maximise"), "success"),
    (field_flag("generations", default=100, panel=P_SIZES,
                help="promptevo generation cap (the budget usually stops first)"), 100),
    (field_flag("concurrency", default=4, panel=P_AGENT, help="episodes in parallel"), 4),
    (field_flag("seed", default=0, panel=P_SIZES, help="LLM sampling seed and GEPA's seed"), 0),
    (field_flag("no_cache", panel=P_AGENT), False),
    (field_flag("results_dir", panel=P_RUN), "results"),
    (field_flag("run", also=("--run-name",), panel=P_RUN, help="run name (default compare-<task>-<timestamp>)"),
     None),
    (own_flag("quiet", "--quiet", "-q", kind=bool, panel=P_RUN, help="only the final table"), False),
    (own_flag("as_json", "--json", kind=bool, panel=P_RUN, help="print compare.json as one JSON document on stdout "
              "(progress goes to stderr)"), False),
]
COMPARE_FLAGS = [f for f, _ in FLAGS]


def config_from_args(args: Sequence[str]) -> tuple[CompareConfig, bool, bool]:
    """(config, quiet, as_json) from command-line arguments."""
    return config_from_given(parse(COMPARE_FLAGS, args, "promptevo compare", DOC))


def config_from_given(given: dict[str, Any]) -> tuple[CompareConfig, bool, bool]:
    """(config, quiet, as_json) from the values the command line gave."""
    from promptevo.llm.gateway import LLMConfig

    v = {f.dest: given.get(f.dest, default) for f, default in FLAGS}
    if not v["task"]:
        raise UsageError("missing --task (see `promptevo tasks`)")
    if v["run"] is not None:
        check_run_name(v["run"])
    cfg = CompareConfig(
        task=v["task"], methods=parse_methods(v["methods"]), budget_calls=v["budget_calls"], agent=v["agent"],
        init=v["init"], model=v["model"] or LLMConfig().model, api_base=v["api_base"],
        optimizer_model=v["optimizer_model"], optimizer_api_base=v["optimizer_api_base"],
        test_episodes=v["test_episodes"], train_episodes=v["train_episodes"], val_episodes=v["validation_episodes"],
        max_steps=v["max_steps"], metric=v["fitness"], generations=v["generations"], concurrency=v["concurrency"],
        seed=v["seed"], no_cache=v["no_cache"], results_dir=v["results_dir"], run=v["run"], history=v["history"],
        max_tokens=v["agent_max_tokens"], operators=v["operators"],
    )
    return cfg, bool(v["quiet"]), bool(v["as_json"])


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo compare`` with its arguments; returns the exit code."""
    return run_args(COMPARE_FLAGS, args, run, "promptevo compare", DOC)


def run(values: dict[str, Any]) -> int:
    """``promptevo compare`` with the values its command line gave; returns the exit code."""
    from rich.console import Console

    err = Console(stderr=True, emoji=False)
    out = Console(emoji=False)
    try:
        cfg, quiet, as_json = config_from_given(values)
        check_methods_available(cfg.methods)
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
