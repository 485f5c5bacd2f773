"""``promptevo optimize``: the command line of :func:`promptevo.optimize`."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from promptevo.cli.errors import print_error, user_error_types
from promptevo.cli.parsing import CommandParser, check_run_name
from promptevo.optim.config import (
    ConfigError,
    OptimizeConfig,
    load_config_file,
    validate_config,
    with_local_preset,
)
from promptevo.optim.propose.registry import operator_names
from promptevo.optim.state import CHECKPOINT, RunError, RunStopped, load_checkpoint


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def build_parser(prog: str = "promptevo optimize") -> CommandParser:
    p = CommandParser(
        prog=prog,
        description="Optimize an agent's prompts on a task: reflect on episodes, propose segment edits, race "
        "children on paired training seeds, promote through a statistical gate on validation seeds, and "
        "report the test split played once at the end. Writes results/<run>/.",
    )
    run = p.add_argument_group("run").add_argument
    run("--task", "-t", help="task name (see `promptevo tasks`; required unless --resume)")
    run("--config", metavar="FILE", help="settings from a TOML file (keys as options: validation-episodes = 40); "
      "options on the command line win. Every run writes its resolved settings to results/<run>/config.toml")
    run("--preset", choices=["quick", "standard", "thorough"], help="named run sizes: quick = 2 generations x 2 "
      "children x 10 training seeds, 40 validation, 50 test seeds (for a local model: about an hour); standard = "
      "the defaults (4 x 3 x 32, 150 validation, 100 test; power 0.84 for a +20-point edit); thorough = 6 x 4 x "
      "48, 300 validation, 200 test. Explicit size options win. A new run on a local/ model without --preset "
      "gets quick")
    run("--dry-run", action="store_true", default=None, help="print the plan (episodes per phase, LLM calls, time estimate) and exit")
    run("--seconds-per-call", type=float, metavar="S", help="for the plan's time estimate: seconds one agent call takes "
      "(default: from earlier runs of the model under --results-dir, else a probe of 3 calls with --dry-run)")
    run("--seed", type=int, help="run seed: draws the training seeds (default 0)")
    run("--resume", metavar="RUN", help="continue results/RUN (or a run folder path) with nothing re-run")
    agent = p.add_argument_group("agent (the prompts' player)").add_argument
    agent("--agent", "-a", help="agent whose prompts are optimized (default two-stage)")
    agent("--init", help="initial default prompts: plain, guided or compact (prompts/<family>/<init>/; default plain)")
    agent("--prompts", help="initial PromptSet file (.md/.json) instead of the defaults")
    agent("--history", type=int, help="naive/robust-cot: observations kept in the messages (default 16)")
    agent("--model", "-m", help="agent LLM (LiteLLM model string; default the local model)")
    agent("--api-base", help="server URL for the agent model")
    agent("--temperature", type=float, help="agent sampling temperature, 0 to 2 (default 0)")
    agent("--timeout", type=float, help="seconds one LLM call may take before it is retried (default 120; a "
      "retry prints one line)")
    agent("--max-steps", type=int, help="cap on steps per episode (default: the env's own limit)")
    agent("--agent-max-tokens", type=int, help="max tokens per agent LLM call (default 512)")
    agent("--no-loop-cutoff", dest="loop_cutoff", action="store_false", default=None,
      help="play looping episodes to the step limit instead of replaying the cycle")
    agent("--concurrency", "-j", type=int, help="episodes in flight (default 1 for local/ models, else 4)")
    agent("--no-cache", action="store_true", default=None, help="do not use the LLM response cache")
    sizes = p.add_argument_group("loop sizes").add_argument
    sizes("--generations", "-g", type=int, help="generations (default 4)")
    sizes("--children", "-k", type=int, help="children proposed per generation (default 3)")
    sizes("--episodes", "-n", type=int, help="training seeds a child is compared on, paired (default 32)")
    sizes("--evidence-episodes", type=int, help="training seeds the parent is analysed on (default 8)")
    sizes("--validation-episodes", type=int, help="validation seeds of the promotion gate (default 150)")
    sizes("--test-episodes", type=int, help="test seeds played once at the end (default 100)")
    sizes("--fitness", "--metric", dest="fitness", choices=["success", "return", "progress", "progression"],
      help="per-episode score the loop optimizes (default success; progress: the env's dense signal)")
    race = p.add_argument_group("race (acceptance on paired training seeds)").add_argument
    race("--accept-rule", choices=["margin", "sign", "wilcoxon", "bootstrap", "always"],
      help="training-seed acceptance of a child (default margin)")
    race("--accept-margin", type=float, help="mean paired training difference needed (default 0)")
    race("--allow-negative-margins", action="store_true", default=None,
      help="accept a negative --accept-margin / --promote-margin (a worse child may then win)")
    race("--no-race", dest="race", action="store_false", default=None, help="play every child on all training seeds")
    race("--race-alpha", type=float, help="level at which a child worse than its parent stops early (default 0.2)")
    gate = p.add_argument_group("gate (promotion on validation seeds)").add_argument
    gate("--promote-rule", choices=["sign", "wilcoxon", "bootstrap", "margin"],
      help="paired test of the validation gate (default sign)")
    gate("--gate", choices=["sequential", "fixed"], help="validation gate: sequential (default: looks at 25/50/75/100%% "
      "of the validation seeds with alpha spending, stops early in either direction) or fixed (every seed, one test)")
    gate("--promote-margin", type=float, help="with --promote-rule margin: validation mean difference needed")
    gate("--alpha", type=float, help="run-wide level of the promotion tests (default 0.05)")
    gate("--correction", choices=["bonferroni", "none"], help="split --alpha over the generations (default bonferroni)")
    operators = p.add_argument_group("operators and the optimizer LLM").add_argument
    operators("--optimizer-model", help="LLM for the analyzer and mutator (default: --model)")
    operators("--optimizer-api-base", help="server URL for the optimizer model")
    operators("--max-segment-tokens", type=int, metavar="TOKENS", help="longest segment an operator may write (default: "
      "twice the parent's prompts, at least 512); a longer child is refused and counted")
    operators("--operators", type=_list, help="proposal operators, comma separated, from the operator registry: "
      + ", ".join(operator_names()) + " (default induce,mutate; `promptevo operators` says what each does; "
      "hints is the person-written library)")
    operators("--rule-samples", type=int, help="rules operator: optimizer replies per disagreement cluster (default 3)")
    operators("--expert-episodes", type=int, help="training seeds the game's expert plays per generation for induce "
      "(default 20; no LLM calls)")
    operators("--hints", help="hint library file (default with --operators hints: the family's shipped library)")
    operators("--optimizer-max-tokens", type=int, help="max tokens per analyzer/mutator reply (default 2048)")
    screen = p.add_argument_group("screen (recorded states, before racing)").add_argument
    screen("--screen", choices=["filter", "audit", "off"], help="replay recorded states with each child before racing: "
      "filter drops children that fix nothing (default), audit only records the verdict")
    screen("--screen-states", type=int, help="recorded states the screen replays per child (default 24)")
    budget = p.add_argument_group("budget and stopping").add_argument
    budget("--budget-calls", type=int, dest="budget_llm_calls", help="stop after this many LLM calls")
    budget("--budget-tokens", type=int, dest="budget_tokens", help="stop after this many tokens")
    budget("--budget-dollars", type=float, dest="budget_dollars", help="stop after this much spend (USD)")
    budget("--budget-episodes", type=int, dest="budget_episodes", help="stop after this many episodes")
    budget("--max-hours", type=float, help="time limit over every resume; the final test split is still played and "
      "--resume with a larger limit continues")
    budget("--patience", type=int, help="stop after this many generations in a row without a promotion")
    budget("--target-success", type=float, help="stop once the best prompts' validation success rate reaches this (0-1)")
    budget("--price-in", type=float, help="USD per million prompt tokens (models without a known price)")
    budget("--price-out", type=float, help="USD per million completion tokens")
    output = p.add_argument_group("output").add_argument
    output("--baseline", help="agent shown as baseline in the final table ('none' to skip; default robust-cot)")
    output("--results-dir", help="where run folders go (default results)")
    output("--run", help="run name (default <task>-<agent>-<timestamp>)")
    output("--ablate", action="store_true", dest="ablate_best", default=None,
      help="at the end, measure each segment of the best prompts by removing it (validation seeds)")
    output("--mlflow", action="store_true", default=None,
      help="log the run to MLflow (./mlruns or MLFLOW_TRACKING_URI); needs promptevo[mlflow]")
    s = p.add_argument_group("strategies (optional; off by default)")
    s.add_argument("--evidence", choices=["raw", "cards", "auto"],
                   help="analyzer reads raw trajectories (default), evidence cards, or auto")
    s.add_argument("--cards-above", type=int, metavar="TOKENS", help="with --evidence auto: raw prompt tokens above "
                   "which cards are used (default 4000)")
    s.add_argument("--prune-at", type=float, metavar="RATE", help="scaffold pruning once validation success >= RATE")
    s.add_argument("--skills", dest="skills", metavar="FILE", help="rule bank / skill library (JSON, "
                   "created if missing): machine-written rules accepted or promoted here are kept with their "
                   "evidence and counters, and offered as children to runs on other tasks")
    s.add_argument("--skill-children", type=int, help="children per generation that insert a skill (default 1)")
    s.add_argument("--backtest", action="store_true", default=None,
                   help="before promoting, replay on earlier generations' seeds and run validity diagnostics")
    s.add_argument("--backtest-episodes", type=int, help="earlier seeds replayed by --backtest (default: --episodes)")
    s.add_argument("--ray", action="store_true", default=None,
                   help="play episodes as Ray tasks (also when RAY_ADDRESS is set); needs promptevo[ray]")
    p.add_argument_group("display").add_argument("--quiet", "-q", action="store_true", help="no progress display")
    return p


_NOT_CONFIG = ("resume", "quiet", "history", "config", "dry_run", "seconds_per_call")


def given_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line gave (by field name, short flags and abbreviations resolved)."""
    return {k: v for k, v in vars(ns).items() if v is not None and k not in _NOT_CONFIG}


def config_from_args(args: Sequence[str]) -> tuple[OptimizeConfig, bool]:
    """(config, quiet) from command-line arguments; with --resume the stored config is the base."""
    return config_from_namespace(build_parser().parse_args(list(args)))


def config_from_namespace(ns: argparse.Namespace) -> tuple[OptimizeConfig, bool]:
    """(config, quiet) from parsed arguments; with --resume the stored config is the base."""
    given = given_options(ns)
    if ns.config:
        from_file = load_config_file(ns.config)
        for key in ("api_base", "optimizer_api_base"):
            if "***" in str(from_file.get(key) or "") and key not in given:
                raise ConfigError(f"--{key.replace('_', '-')}: {ns.config} has a masked server URL ({from_file[key]}); "
                                  f"give --{key.replace('_', '-')} with its credentials")
        given = {**from_file, **given}
    if given.get("run") is not None:
        check_run_name(given["run"])
    if "baseline" in given and str(given["baseline"]).lower() in ("none", "off", ""):
        given["baseline"] = None
    if ns.history is not None:
        given["agent_options"] = {**(given.get("agent_options") or {}), "history": ns.history}
    if ns.resume:
        path = Path(ns.resume)
        if not (path / CHECKPOINT).exists():
            path = Path(given.get("results_dir") or "results") / ns.resume
        base = load_checkpoint(path).config.model_dump()
        for key in ("api_base", "optimizer_api_base"):
            if "***" in str(base.get(key) or "") and key not in given:
                raise ConfigError(f"--{key.replace('_', '-')}: this run's server URL had credentials, which are never "
                                  f"stored ({base[key]}); give --{key.replace('_', '-')} again to resume")
        base.update(given)
        base.update({"resume": True, "run": str(path), "results_dir": str(path.parent)})
        return validate_config(base), bool(ns.quiet)
    if not given.get("task"):
        raise ConfigError("missing --task (see `promptevo tasks`), or --resume RUN")
    cfg = validate_config(with_local_preset(given))
    if cfg.run is None:
        cfg = cfg.model_copy(update={"run": cfg.run_path().name})
    return cfg, bool(ns.quiet)


def run_plan(cfg: OptimizeConfig, given: set[str], *, probe: bool = False,
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
            from promptevo.api import build_gateways

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
    plan = make_plan(cfg, steps, calls_per_step=calls_per_step(cfg.agent), has_expert=expert, seconds=seconds,
                     source=source, calls_per_episode=calls_from_runs(cfg.results_dir, cfg.model, cfg.task, cfg.agent))
    return describe(plan, cfg, given)


def _seconds_per_call(s: float | None) -> float | None:
    if s is not None and not (s > 0 and s < float("inf")):
        raise ConfigError(f"--seconds-per-call must be a positive number of seconds (got {s})")
    return s


def cli_main(args: Sequence[str]) -> int:
    """Entry point of ``promptevo optimize``; returns the exit code."""
    from rich.console import Console

    from promptevo.api import optimize

    err = Console(stderr=True, emoji=False)
    try:
        ns = build_parser().parse_args(list(args))
        cfg, quiet = config_from_namespace(ns)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except (ConfigError, RunError, *user_error_types()) as e:
        print_error(e)
        return 2
    dry = bool(ns.dry_run)
    try:
        if dry:  # every check the run makes before its folder exists
            from promptevo.api import prepare

            prepare(cfg)
        for line in run_plan(cfg, set(given_options(ns)), probe=dry,
                             seconds_per_call=_seconds_per_call(ns.seconds_per_call)):
            err.print(line, highlight=False, markup=False, soft_wrap=True)
    except (ConfigError, RunError, *user_error_types()) as e:
        print_error(e)
        return 2
    if dry:
        return 0
    terminated = []

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: the default handler stays
        previous = None
    try:
        res = optimize(cfg, quiet=quiet)
    except KeyboardInterrupt:
        what = "terminated (SIGTERM)" if terminated else "interrupted"
        err.print(f"[yellow]{what}[/]: nothing finished is lost; continue with `promptevo optimize --resume "
                  f"{cfg.run_path()}`", highlight=False, soft_wrap=True)
        return 143 if terminated else 130
    except (RunError, ConfigError, *user_error_types()) as e:
        print_error(e)
        return 3 if isinstance(e, RunStopped) else 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    Console(emoji=False).print(f"best prompts: {res.run_dir / 'best.md'} | report: {res.run_dir / 'report.md'}")
    return 0
