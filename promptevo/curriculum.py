"""LLM as environment engineer: a curriculum of MAPF-FrozenLake configurations chosen between stages.

The prompts are the policy being trained. A curriculum runs ``stages`` optimizations
(:func:`promptevo.optimize`), each on its own MAPF generator configuration, each starting from the
previous stage's best prompts. Between two stages the optimizer LLM (gateway role ``"engineer"``,
template ``prompts/optimizer/engineer.md``) reads a :func:`failure_report` of the stage's best prompts
(failure causes counted from the per-episode MAPF statistics, example failures with their events, the
current knobs) and proposes the next configuration with :func:`propose_config`. Proposals are validated:
known knobs only, values clipped to :class:`Bounds`, at most ``max_changes`` knobs changed (the others are
kept, so a configuration that works is not thrown away), and the result must be a valid
:class:`~promptevo.envs.mapf.MAPFConfig` that generates solvable instances within its step limit;
otherwise the current configuration is kept and ``info["fallback"]`` says why. In ``fixed`` mode the
configuration never changes (the control condition).

Run folder of :func:`run_curriculum` (``results/<run>/``)::

    stage-1/ stage-2/ ...   one optimize() run folder each, plus stage.json (the stage's MAPF config,
                            initial prompts and the engineer call that produced the config)
    final/episodes.jsonl    initial and final prompts played on the target task's test seeds (once)
    curriculum.json         every stage: config, changes, failure report, engineer info, best id,
                            validation success; the final comparison on the target task's test seeds
    curriculum.md           the same as tables

A stage whose folder has a ``report.json`` is finished and is not run again on ``--resume``; a stage
interrupted mid-run is resumed through optimize's own checkpoint; finished target episodes are kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from promptevo.optim.optimizer_lm import OptimizerLM
from promptevo.envs.mapf.failures import KNOBS, config_knobs, failure_report
from promptevo.envs.mapf.family import mapf_config, params_for
from promptevo.envs.mapf.generator import MAPFConfig, MAPFConfigError, make_mapf_config
from promptevo.evaluation.statistics import summarize_records
from promptevo.evaluation.store import EPISODES_FILE, EpisodeStore
from promptevo.fileio import write_json_atomic, write_text_atomic
from promptevo.optim.config import OptimizeConfig
from promptevo.optim.propose.engineer import DEFAULT_BOUNDS, Bounds, propose_config
from promptevo.optim.state import CHECKPOINT, RunError, load_checkpoint, record_of
from promptevo.segments import PromptFormatError, PromptSet
from promptevo.tasks import TaskConfig, TaskError, load_task

Mode = Literal["engineer", "fixed"]
CURRICULUM_VERSION = 2
STAGE_FILE = "stage.json"


@dataclass
class CurriculumResult:
    run_dir: Path
    stages: list[dict]
    final: dict
    initial_prompts: PromptSet
    best_prompts: PromptSet
    configs: list[MAPFConfig] = field(default_factory=list)
    data: dict = field(default_factory=dict)


def _say(display: Any, msg: str) -> None:
    if display is not None:
        display.print(msg, markup=False, highlight=False)


def load_mapf_task(name: str, what: str) -> TaskConfig:
    try:
        task = load_task(name)
    except TaskError as e:
        raise RunError(str(e)) from None
    if task.family != "mapf":
        raise RunError(f"the curriculum needs a MAPF task (family mapf); {what} {name!r} is a {task.family} task")
    return task


def _capped(task: TaskConfig, max_steps: int | None) -> TaskConfig:
    if max_steps is None:
        return task
    cap = max_steps if task.max_steps is None else min(task.max_steps, max_steps)
    return task.model_copy(update={"max_steps": cap})


def _best_episodes(stage_dir: Path, best_id: str) -> tuple[list[dict], str]:
    """Episodes of the stage's best candidate: its validation episodes, else its training episodes (never
    test episodes: a stage plays none)."""
    try:
        cand = load_checkpoint(stage_dir).candidates[best_id]
    except (RunError, KeyError):
        return [], "none"
    store = EpisodeStore(stage_dir / EPISODES_FILE)
    for split in ("validation", "train"):
        eps = [store.get(cand.fingerprint, int(s)) for s in sorted(cand.records(split), key=int)]
        eps = [e for e in eps if e is not None]
        if eps:
            return eps, split
    return [], "none"


def _diff(before: MAPFConfig | None, after: MAPFConfig) -> dict[str, list]:
    if before is None:
        return {}
    return {k: [getattr(before, k), getattr(after, k)] for k in KNOBS if getattr(before, k) != getattr(after, k)}


def _validation_row(stage_dir: Path, best_id: str) -> dict:
    """The stage's best prompts on its validation seeds (what the stage selected on; not a test score)."""
    try:
        cand = load_checkpoint(stage_dir).candidates[best_id]
    except (RunError, KeyError):
        return {}
    row = summarize_records(cand.validation)
    return {k: row.get(k) for k in ("n", "successes", "success_rate", "ci95", "mean_return", "mean_progression")}


def _seed(r: Any) -> int:
    return int(r["seed"] if isinstance(r, dict) else r.seed)


def _write_json(path: Path, data: Any) -> None:
    write_json_atomic(path, data, indent=1)


def run_curriculum(
    base: OptimizeConfig,
    *,
    stages: int,
    mode: Mode = "engineer",
    target_task: str | None = None,
    agent_gateway: Any = None,
    optimizer_gateway: Any = None,
    console: Any = None,
    quiet: bool = False,
    max_changes: int = 2,
    bounds: Bounds = DEFAULT_BOUNDS,
    **optimize_kwargs: Any,
) -> CurriculumResult:
    """Optimize the prompts over ``stages`` MAPF configurations (see the module docstring).

    Stage k runs :func:`promptevo.optimize` (without a test evaluation) with ``run = <run>/stage-k``, ``base.generations``
    generations, seed ``base.seed + k - 1`` (fresh training seeds per stage), the base task with the
    stage's MAPF config, and the previous stage's best prompts as initial prompts. ``optimize_kwargs``
    are passed on (``runner``, ``agent_builder``, ``env_instructions``; ``task`` and ``initial_prompts``
    replace the base task object and the stage-1 prompts). Budgets apply to the shared gateways, i.e. to
    the whole curriculum so far. Raises :class:`RunError` (one line) for unusable inputs.
    """
    if stages < 1:
        raise RunError(f"--stages must be >= 1 (got {stages})")
    if mode not in ("engineer", "fixed"):
        raise RunError(f"unknown curriculum mode {mode!r} (use engineer or fixed)")
    task = optimize_kwargs.pop("task", None)
    if task is None:
        task = load_mapf_task(base.task, "task")
    elif task.family != "mapf":
        raise RunError(f"the curriculum needs a MAPF task (family mapf); task {task.name!r} is a {task.family} task")
    target = task if target_task in (None, base.task) else load_mapf_task(target_task, "target task")
    try:
        start_cfg = mapf_config(task.env)
        mapf_config(target.env)
    except MAPFConfigError as e:
        raise RunError(str(e)) from None
    initial_prompts: PromptSet | None = optimize_kwargs.pop("initial_prompts", None)
    runner = optimize_kwargs.get("runner")
    agent_builder = optimize_kwargs.get("agent_builder")

    if base.run is None:
        base = base.model_copy(update={"run": f"{base.task}-curriculum-{datetime.now().strftime('%Y%m%d-%H%M%S')}"})
    cdir = base.run_path()
    meta_path = cdir / "curriculum.json"
    started = meta_path.exists() or (cdir / "stage-1" / STAGE_FILE).exists()
    if started and not base.resume:
        raise RunError(f"{cdir} already holds a curriculum; resume it or pick another run name")
    if started and meta_path.exists():
        old = json.loads(meta_path.read_text(encoding="utf-8"))
        for key, now in (("mode", mode), ("target", target.name), ("task", base.task)):
            if old.get(key) not in (None, now):
                raise RunError(f"cannot resume {cdir}: {key} was {old.get(key)!r}, now {now!r}")

    display = None
    if not quiet:
        from rich.console import Console

        display = console or Console(stderr=True, emoji=False)
    if agent_gateway is None or optimizer_gateway is None:
        from promptevo.api import build_gateways

        a, o = build_gateways(base)
        agent_gateway, optimizer_gateway = agent_gateway or a, optimizer_gateway or o
    from promptevo.api import optimize, usage_of

    usage = usage_of(agent_gateway, optimizer_gateway)

    if initial_prompts is None:
        if base.prompts:
            try:
                initial_prompts = PromptSet.load(base.prompts)
            except PromptFormatError as e:
                raise RunError(str(e)) from None
        else:
            from promptevo.agents.registry import default_prompts

            initial_prompts = default_prompts(base.agent, task, base.init)
    s1 = cdir / "stage-1" / STAGE_FILE
    if s1.exists():  # resume: the prompts the curriculum really started from
        initial_prompts = PromptSet.from_dict(json.loads(s1.read_text(encoding="utf-8"))["initial_prompts"])

    data: dict[str, Any] = {
        "version": CURRICULUM_VERSION, "run": str(cdir), "task": base.task, "target": target.name,
        "target_task": target_task or base.task, "mode": mode,
        "stages_planned": stages, "max_changes": max_changes, "bounds": bounds.to_dict(), "complete": False,
        "config": base.model_dump(), "stages": [], "final": None, "usage": {},
    }
    history: list[dict] = []
    configs: list[MAPFConfig] = []
    cfg_k, prompts_k, engineer_in = start_cfg, initial_prompts, None
    prev_cfg: MAPFConfig | None = None
    best_ps = initial_prompts
    _write_json(meta_path, data)  # from here on the run can be resumed, even after a crash in stage 1
    for k in range(1, stages + 1):
        sdir = cdir / f"stage-{k}"
        sfile = sdir / STAGE_FILE
        if sfile.exists():
            srec = json.loads(sfile.read_text(encoding="utf-8"))
            cfg_k = make_mapf_config(srec["config"], str(sfile))
            prompts_k = PromptSet.from_dict(srec["initial_prompts"])
            engineer_in = srec.get("engineer")
        else:
            _write_json(sfile, {"stage": k, "config": cfg_k.model_dump(), "initial_prompts": prompts_k.to_dict(),
                                "engineer": engineer_in})
        configs.append(cfg_k)
        _say(display, f"== stage {k}/{stages}: {cfg_k.summary()}")
        if (sdir / "report.json").exists():
            report = json.loads((sdir / "report.json").read_text(encoding="utf-8"))
            best_ps = PromptSet.load(sdir / "best.json")
            best_id = report["best_id"]
            _say(display, f"stage {k} already finished; best {best_id}")
        else:
            ecfg = base.model_copy(update={"run": str(sdir), "seed": base.seed + k - 1, "final_test": False,
                                           "resume": (sdir / CHECKPOINT).exists()})
            res = optimize(ecfg, agent_gateway=agent_gateway, optimizer_gateway=optimizer_gateway,
                           task=task.with_env(params_for(cfg_k, task.env['preset'])), initial_prompts=prompts_k, console=console,
                           quiet=quiet, **optimize_kwargs)
            report, best_ps, best_id = res.report, res.best_prompts, res.best_id
        eps, split = _best_episodes(sdir, best_id)
        frep = failure_report(eps, cfg_k)
        if base.max_steps is not None or task.max_steps is not None:
            frep["step_cap"] = min(x for x in (base.max_steps, task.max_steps) if x is not None)
        held = _validation_row(sdir, best_id)
        rec: dict[str, Any] = {
            "stage": k, "run_dir": str(sdir), "config": config_knobs(cfg_k), "config_summary": cfg_k.summary(),
            "changes": _diff(prev_cfg, cfg_k), "engineer_in": engineer_in, "best_id": best_id,
            "initial_fingerprint": prompts_k.fingerprint(), "best_fingerprint": best_ps.fingerprint(),
            "validation": held, "validation_success": held.get("success_rate"),
            "stop_reason": report.get("stop_reason"),
            "evidence": split, "report": frep, "engineer": None,
        }
        history.append({"stage": k, "config": rec["config"], "changes": rec["changes"],
                        "success_rate": frep["success_rate"], "mean_progression": frep["mean_progression"],
                        "failure_causes": frep["failure_causes"]})
        if k < stages:
            nfile = cdir / f"stage-{k + 1}" / STAGE_FILE
            if nfile.exists():
                nrec = json.loads(nfile.read_text(encoding="utf-8"))
                next_cfg, info = make_mapf_config(nrec["config"], str(nfile)), nrec.get("engineer")
            elif mode == "engineer":
                next_cfg, info = propose_config(
                    cfg_k, frep, OptimizerLM.from_config(optimizer_gateway, base), history=history,
                    max_changes=max_changes, bounds=bounds, seed=base.seed * 1000 + 900 + k,
                    probe_seeds=task.seed_list("train")[:1] + task.seed_list("validation")[:1],
                )
                info = {"mode": "engineer", **info}
            else:
                next_cfg, info = cfg_k, {"mode": "fixed", "changes": {}, "fallback": None}
            if not nfile.exists():
                _write_json(nfile, {"stage": k + 1, "config": next_cfg.model_dump(),
                                    "initial_prompts": best_ps.to_dict(), "engineer": info})
            rec["engineer"] = info
            if info and info.get("mode") == "engineer":
                what = ", ".join(f"{kk} {a} -> {b}" for kk, (a, b) in (info.get("changes") or {}).items())
                _say(display, f"engineer after stage {k}: " + (what or "no change")
                     + (f" (fallback: {info['fallback']})" if info.get("fallback") else ""))
            engineer_in = info
            prev_cfg, cfg_k = cfg_k, next_cfg
        else:
            prev_cfg = cfg_k
        prompts_k = best_ps
        data["stages"].append(rec)
        data["usage"] = usage()
        _write_json(meta_path, data)

    # -- the initial and the final prompts on the target task's test seeds, played once ----------------
    from promptevo.agents.registry import make_agent
    from promptevo.evaluation.rollout import run_episodes

    target_t = _capped(target, base.max_steps)
    seeds = target_t.seeds("test", base.test_episodes)
    store = EpisodeStore(cdir / "final" / EPISODES_FILE)
    final: dict[str, Any] = {"target": target.name, "config_summary": mapf_config(target.env).summary(),
                             "split": "test", "seeds": seeds, "rows": {}}
    for name, ps in (("initial", initial_prompts), ("best", best_ps)):
        key = ps.fingerprint()
        missing = [s for s in seeds if store.get(key, s) is None]
        if missing:
            _say(display, f"final: {name} prompts on {len(missing)} test seeds of {target.name}")
            factory = (agent_builder(base.agent, ps) if agent_builder is not None else
                       (lambda ps=ps: make_agent(base.agent, agent_gateway, prompts=ps, task=target_t,
                                                 **base.agent_options)))
            play = runner or run_episodes
            results = play(target_t, factory, missing, concurrency=base.effective_concurrency,
                           on_result=lambda r, key=key: store.put(key, int(_seed(r)), r))
            for r in results:
                if not store.has(key, int(_seed(r))):
                    store.put(key, int(_seed(r)), r)
        eps = {s: store.get(key, s) for s in seeds}
        done = {str(s): record_of(e, float(bool(e.get("success")))) for s, e in eps.items() if e is not None}
        final["rows"][name] = {"fingerprint": key, **summarize_records(done)}
        if name == "best":
            final["best_report"] = failure_report([e for e in eps.values() if e is not None], mapf_config(target.env))
    data["final"] = final
    data["complete"] = True
    data["usage"] = usage()
    _write_json(meta_path, data)
    write_text_atomic(cdir / "curriculum.md", render_curriculum_md(data))
    return CurriculumResult(cdir, data["stages"], final, initial_prompts, best_ps, configs, data)


# =================================================================================================
# Output
# =================================================================================================


def _pct(x: Any) -> str:
    return "-" if x is None else f"{float(x):.0%}"


def _changes_text(ch: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k} {v[0]} -> {v[1]}" for k, v in (ch or {}).items()) or "-"


def _main_causes(rep: Mapping[str, Any] | None, top: int = 2) -> str:
    causes = sorted(((v, k) for k, v in ((rep or {}).get("failure_causes") or {}).items() if v), reverse=True)
    return ", ".join(f"{k.replace('_', ' ')} {v}" for v, k in causes[:top]) or "-"


def short_summary(knobs: Mapping[str, Any]) -> str:
    """Compact one-line description of a knob dict (``config_knobs``)."""
    k = knobs
    s = (f"{k.get('rows')}x{k.get('cols')} a{k.get('n_agents')} holes {k.get('hole_density')} "
         f"walls {k.get('wall_density')} slip {k.get('slip_prob')} steps {k.get('max_steps')}")
    if k.get("observation") == "local":
        s += f" local r{k.get('view_radius')}"
    if k.get("goal_assignment") == "any":
        s += " any-goal"
    return s


def curriculum_table(data: Mapping[str, Any]) -> str:
    """Short plain-text table: one line per stage, then the target comparison."""
    lines = [f"curriculum {data.get('run')} ({data.get('mode')}): {len(data.get('stages') or [])} stage(s)",
             f"{'stage':<6} {'config':<48} {'best':<6} {'valid.':>8}  changes before the stage"]
    for s in data.get("stages") or []:
        lines.append(f"{s['stage']:<6} {short_summary(s['config']):<48} {s['best_id']:<6} "
                     f"{_pct(s.get('validation_success')):>8}  {_changes_text(s.get('changes'))}")
    fin = data.get("final") or {}
    for name, row in (fin.get("rows") or {}).items():
        lines.append(f"target {fin.get('target')}, {name} prompts: {row['successes']}/{row['n']} "
                     f"({_pct(row['success_rate'])}), mean progression {row['mean_progression']:.2f}")
    return "\n".join(lines)


def render_curriculum_md(data: Mapping[str, Any]) -> str:
    md = [f"# promptevo curriculum {Path(str(data.get('run'))).name}", "",
          f"Task `{data.get('task')}`, target `{data.get('target')}`, mode `{data.get('mode')}`, "
          f"{len(data.get('stages') or [])} stage(s), at most {data.get('max_changes')} knob change(s) per stage.", "",
          "| stage | configuration | changes before the stage | best | validation success | main failures |",
          "|---|---|---|---|---|---|"]
    for s in data.get("stages") or []:
        md.append(f"| {s['stage']} | {s['config_summary']} | {_changes_text(s.get('changes'))} | {s['best_id']} | "
                  f"{_pct(s.get('validation_success'))} | {_main_causes(s.get('report'))} |")
    md.append("")
    fin = data.get("final") or {}
    if fin:
        md += [f"## Target `{fin.get('target')}` ({fin.get('config_summary')}), {len(fin.get('seeds') or [])} "
               "test seeds (played once)", "", "| prompts | n | success | 95% CI | mean progression |", "|---|---|---|---|---|"]
        for name, r in (fin.get("rows") or {}).items():
            lo, hi = r["ci95"]
            md.append(f"| {name} | {r['n']} | {r['success_rate']:.1%} | [{lo:.1%}, {hi:.1%}] | "
                      f"{r['mean_progression']:.2f} |")
        md.append("")
    eng = [s for s in data.get("stages") or [] if s.get("engineer") and s["engineer"].get("mode") == "engineer"]
    if eng:
        md += ["## Engineer decisions", ""]
        for s in eng:
            e = s["engineer"]
            md.append(f"- after stage {s['stage']}: {_changes_text(e.get('changes'))}"
                      + (f" (fallback: {e['fallback']})" if e.get("fallback") else "")
                      + (f". {e['rationale']}" if e.get("rationale") else ""))
        md.append("")
    return "\n".join(md)


