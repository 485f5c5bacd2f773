"""Tests of the LLM environment engineer (promptevo.optim.propose.engineer, .failures), the MAPF curriculum
(promptevo.curriculum, promptevo.cli.curriculum), and of MAPF generator knobs in a task's
``[env]`` table (promptevo.envs.mapf.family).

Test doubles (all LLM calls go to ``fake/scripted`` through :class:`ScriptedLLM`; calls are told apart by
their system message):
* descriptor: echoes the observation;
* actor (MAPF, one agent): walks greedily toward its goal; only when its prompt contains SAFETY_RULE does
  it skip moves into a HOLE, wall or edge (so the rule turns "fell in hole" failures into successes);
* analyzer: a fixed diagnosis; mutator: adds SAFETY_RULE while it is absent, else a harmless tip;
* engineer: whatever the test sets in ``Script.engineer``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from promptevo.cli.curriculum import cli_main, curriculum_args
from promptevo.envs.mapf.env import MAPFConfig, load_mapf_preset
from promptevo.envs.mapf.failures import FAILURE_CAUSES, classify_episode, failure_report, render_report
from promptevo.envs.mapf.family import mapf_config, params_for
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.optim.config import OptimizeConfig
from promptevo.curriculum import run_curriculum
from promptevo.optim.propose.engineer import DEFAULT_BOUNDS, Bounds, apply_changes, propose_config
from promptevo.optim.state import RunError, RunState, load_checkpoint
from promptevo.tasks import TaskConfig, TaskError, load_task, load_task_file, make_env

SAFETY_RULE = "Never step onto a HOLE, a wall or the edge."

# -- scripted LLM --------------------------------------------------------------------------------------

_AGENT_LINE = re.compile(r"agent 1: at \((\d+),(\d+)\), goal a at \((\d+),(\d+)\); next to it: (.*)")


def actor_reply(system: str, user: str) -> str:
    m = _AGENT_LINE.search(user)
    if not m:
        return "<|ACTION|>stay<|END|>"
    r, c, gr, gc = (int(x) for x in m.groups()[:4])
    around = dict(part.strip().split(" ", 1) for part in m.group(5).split(","))
    wanted = ([("down" if gr > r else "up")] if gr != r else []) + ([("right" if gc > c else "left")] if gc != c else [])
    if SAFETY_RULE.lower() in system.lower():
        safe = [mv for mv in wanted if around.get(mv) in ("ice", "goal a")]
        others = [mv for mv in ("up", "down", "left", "right") if around.get(mv) in ("ice", "goal a")]
        move = (safe or others or ["stay"])[0]
    else:
        move = wanted[0] if wanted else "stay"
    return f"<|ACTION|>{move}<|END|>"


class Script:
    """The scripted LLM; records the engineer's prompts and counts calls per kind."""

    def __init__(self, engineer: Any = None):
        self.engineer = engineer if engineer is not None else {"changes": {}, "rationale": "keep"}
        self.engineer_prompts: list[list[dict]] = []
        self.calls = {"engineer": 0, "analyzer": 0, "mutator": 0, "agent": 0}

    def __call__(self, messages: list[dict], params: dict) -> str:
        system = messages[0]["content"] if messages[0]["role"] == "system" else ""
        user = messages[-1]["content"]
        if "environment engineer" in system:
            self.calls["engineer"] += 1
            self.engineer_prompts.append(messages)
            e = self.engineer
            return e if isinstance(e, str) else "```json\n" + json.dumps(e) + "\n```"
        if '"edits"' in system:
            self.calls["mutator"] += 1
            if SAFETY_RULE in user:
                edit = {"module": "actor", "op": "add", "segment": "tips", "text": "Go straight to the goal.",
                        "rationale": "shorter paths"}
            else:
                edit = {"module": "actor", "op": "add", "segment": "safety", "text": SAFETY_RULE,
                        "rationale": "agents walk into holes"}
            return json.dumps({"edits": [edit]})
        if '"attributions"' in system:
            self.calls["analyzer"] += 1
            return json.dumps({"attributions": [], "failure_modes": ["walks into holes"], "proposals": []})
        self.calls["agent"] += 1
        if system.startswith("You describe"):
            return user.split("Observation:\n", 1)[-1]
        return actor_reply(system, user)


def gateway() -> Gateway:
    return Gateway(LLMConfig(model="fake/scripted", cache_dir=None, num_retries=0))


#: stage-1 map of the curriculum tests: 4x4, one agent, a quarter of the cells are holes. On the first four
#: test seeds the greedy actor falls into a hole 3 times; with the safety rule it wins 3 and runs out of
#: steps once (the harness stops episodes after max_steps=6 of base_config).
START_TOML = ('family = "mapf"\n[env]\npreset = "single"\n'
              'name = "start"\nhole_density = 0.25\nmin_goal_distance = 3\nmax_steps = 8\n')


def start_task(tmp_path: Path) -> TaskConfig:
    path = tmp_path / "start.toml"
    path.write_text(START_TOML)
    return load_task_file(path)


def base_config(tmp_path: Path, **kw: Any) -> OptimizeConfig:
    # every child is accepted and promoted unless it is much worse on the validation seeds (margin rule):
    # the curriculum, not the gate, is under test here
    d = dict(task="mapf-single", agent="two-stage", model="fake/scripted", generations=1, episodes=2,
             evidence_episodes=2, validation_episodes=4, test_episodes=4, children=1, accept_rule="always", promote_rule="margin",
             promote_margin=-0.5, allow_negative_margins=True, max_steps=6, concurrency=2, baseline=None, no_cache=True,
             results_dir=str(tmp_path), run="cur", operators=["mutate"], screen="off")
    d.update(kw)
    return OptimizeConfig(**d)


def curriculum(tmp_path: Path, script: Script, **kw: Any):
    cfg_kw = {k: kw.pop(k) for k in list(kw) if k in OptimizeConfig.model_fields and not isinstance(kw[k], TaskConfig)}
    with ScriptedLLM.install(script):
        return run_curriculum(base_config(tmp_path, **cfg_kw), agent_gateway=gateway(),
                              optimizer_gateway=gateway(), quiet=True, **kw)


# -- tasks: MAPF knobs in the [env] table ----------------------------------------------------------------


def test_mapf_knobs_in_env_are_merged_over_the_preset(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text('family = "mapf"\n[env]\npreset = "easy"\nrows = 4\nn_agents = 1\nslip_prob = 0.1\n')
    task = load_task_file(path)
    cfg = mapf_config(task.env)
    easy = load_mapf_preset("easy")
    assert (cfg.rows, cfg.n_agents, cfg.slip_prob) == (4, 1, 0.1)
    assert (cfg.cols, cfg.hole_density, cfg.max_steps) == (easy.cols, easy.hole_density, easy.max_steps)
    env = make_env(task)
    obs, _ = env.reset(0)
    assert env.config.rows == 4 and "grid of 4 rows x 5 columns" in env.instructions()
    # shipped task files are the preset itself
    assert load_task("mapf-easy").env == {"preset": "easy"} and mapf_config(load_task("mapf-easy").env) == easy
    # params_for + with_env: the env is exactly the given config; names and seeds are kept
    tiny = MAPFConfig(rows=3, cols=3, n_agents=1, hole_density=0.0, max_steps=9)
    t2 = load_task("mapf-easy").with_env(params_for(tiny, "easy"))
    assert mapf_config(t2.env) == tiny and make_env(t2).config == tiny
    assert t2.name == "mapf-easy" and t2.seed_list("test") == load_task("mapf-easy").seed_list("test")
    with pytest.raises(TaskError, match="unknown babyai parameter 'preset'"):
        load_task("goto").with_env(params_for(tiny, "easy"))


@pytest.mark.parametrize("body, needles", [
    ('preset = "easy"\ncolour = 1\n', ["field env", "unknown MAPF knob 'colour'"]),
    ('preset = "easy"\nrows = "big"\n', ["field env", "rows"]),
    ('preset = "easy"\nhole_density = 0.5\nwall_density = 0.5\n', ["field env", "exceeds 0.75"]),
    ("rows = 3\n", ["field env", "needs preset"]),
])
def test_bad_mapf_knobs_are_one_clear_line(tmp_path, body, needles):
    path = tmp_path / "bad.toml"
    path.write_text('family = "mapf"\n[env]\n' + body)
    with pytest.raises(TaskError) as ei:
        load_task_file(path)
    msg = str(ei.value)
    assert "\n" not in msg and "bad.toml" in msg
    for n in needles:
        assert n in msg, msg
    with pytest.raises(ValueError, match="unknown babyai parameter 'rows'"):  # MAPF knobs only for family mapf
        TaskConfig(name="x", family="babyai", env={"goal": "goto", "rows": 3})


# -- failure report ------------------------------------------------------------------------------------


def _ep(seed: int, *, success: bool = False, steps: int = 8, prog: float = 0.0, traj: list | None = None,
        error: str | None = None, **stats: Any) -> dict:
    env_stats = {"n_agents": 2, "hole_falls": 0, "collisions": 0, "wall_bumps": 0, "slips": 0,
                 "timeout": False, "solver_makespan": 4, "optimality_ratio": None, **stats}
    return {"seed": seed, "success": success, "progression": prog, "steps": steps, "return": prog,
            "env_stats": env_stats, "trajectory": traj or [], "error": error, "invalid_actions": 0,
            "parse_failures": 0, "truncated": False}


def _steps(n: int, bad: int = 0, event: str | None = None) -> list[dict]:
    out = []
    for t in range(n):
        obs = "Step %d.\n" % t + (f"Last step: {event}.\n" if event and t == n - 1 else "") + "Map ..."
        out.append({"t": t, "observation": obs, "parsed": t >= bad, "valid": t >= bad})
    return out


def test_failure_report_counts_causes_and_events():
    cfg = load_mapf_preset("easy")
    eps = [
        _ep(1, success=True, steps=5, prog=1.0, optimality_ratio=1.25),
        _ep(2, steps=3, prog=0.5, hole_falls=1, collisions=1,
            traj=_steps(3, event="agent 2 fell into the hole at (1,1) and is out of the game")),
        _ep(3, traj=_steps(8, bad=3), timeout=True),  # 3 of 8 steps unreadable -> invalid actions
        _ep(4, collisions=4, timeout=True, prog=0.5),  # half the steps blocked by collisions
        _ep(5, collisions=1, timeout=True),  # one collision only: a plain timeout
        _ep(6, steps=2, error="LLMError: boom"),
    ]
    rep = failure_report(eps, cfg)
    assert rep["n"] == 6 and rep["successes"] == 1 and rep["success_rate"] == pytest.approx(1 / 6)
    assert rep["mean_progression"] == pytest.approx(2 / 6)
    assert rep["failure_causes"] == {"fell_in_hole": 1, "invalid_actions": 1, "collisions": 1, "timeout": 1, "other": 1}
    assert sum(rep["failure_causes"].values()) == rep["failures"] == 5
    ev = rep["events"]
    assert (ev["invalid_actions"], ev["episodes_with_invalid_actions"], ev["hole_falls"]) == (3, 1, 1)
    assert (ev["collisions"], ev["timeouts"], ev["aborted"]) == (6, 3, 1)
    assert rep["per_size"] == {"5x5, 2 agents": {"n": 6, "successes": 1, "success_rate": pytest.approx(1 / 6),
                                                 "mean_progression": pytest.approx(2 / 6),
                                                 "failure_causes": {c: 1 for c in FAILURE_CAUSES}}}
    assert rep["mean_optimal_makespan"] == 4 and rep["mean_optimality_ratio"] == 1.25
    assert rep["config"]["rows"] == 5 and rep["config"]["hole_density"] == cfg.hole_density
    hole = next(e for e in rep["examples"] if e["seed"] == 2)
    assert hole["cause"] == "fell_in_hole" and hole["events"] == ["agent 2 fell into the hole at (1,1) and is out of the game"]
    text = render_report(rep)
    assert "successes: 1 (17%)" in text and "fell in hole 1" in text and "agent collisions 6" in text
    assert "seed 2: fell in hole after 3 steps" in text and "aborted: LLMError: boom" in text
    assert classify_episode(eps[0])[0] is None
    assert render_report(failure_report([], cfg)) == "No episodes were played."


# -- propose_config ------------------------------------------------------------------------------------

SINGLE = load_mapf_preset("single")  # 4x4, 1 agent, holes 0.2, max_steps 20


def _report() -> dict:
    return failure_report([_ep(1, steps=3, hole_falls=1), _ep(2, success=True, prog=1.0)], SINGLE)


def propose(reply: Any, current: MAPFConfig = SINGLE, **kw: Any):
    script = Script(engineer=reply)
    gw = gateway()
    with ScriptedLLM.install(script):
        cfg, info = propose_config(current, _report(), gw, **kw)
    return cfg, info, script, gw


def test_propose_config_applies_a_valid_change():
    history = [{"stage": 1, "config": {"rows": 4, "hole_density": 0.2}, "changes": {}, "success_rate": 0.5,
                "failure_causes": {"fell_in_hole": 1}}]
    cfg, info, script, gw = propose({"changes": {"hole_density": 0.1, "rows": 5}, "rationale": "agents fall into holes"},
                                    history=history)
    assert script.calls["engineer"] == 1 and gw.usage.role("engineer")["calls"] == 1
    assert (cfg.hole_density, cfg.rows) == (0.1, 5)
    assert cfg.model_dump(exclude={"hole_density", "rows"}) == SINGLE.model_dump(exclude={"hole_density", "rows"})
    assert info["changes"] == {"hole_density": [0.2, 0.1], "rows": [4, 5]} and info["fallback"] is None
    assert info["rationale"] == "agents fall into holes"
    # the engineer saw the knobs with bounds, the failure report and the earlier stages
    system, user = (m["content"] for m in script.engineer_prompts[0])
    assert "at most 2 knobs" in system
    assert "- hole_density = 0.2  [0 to 0.35]" in user and "fell in hole 1" in user
    assert "- stage 1: rows=4, hole_density=0.2" in user and "success 50%" in user


def test_propose_config_clamps_to_bounds_and_trims_extra_changes():
    cfg, info, _, _ = propose({"changes": {"hole_density": 0.9, "max_steps": 1000}, "rationale": "x"})
    assert cfg.hole_density == DEFAULT_BOUNDS.hole_density[1] and cfg.max_steps == DEFAULT_BOUNDS.max_steps[1]
    assert info["clamped"] == {"hole_density": [0.9, 0.35], "max_steps": [1000, 150]}
    # four changes, at most two kept (the first two, in the reply's order); the rest of the config is kept
    cfg, info, _, _ = propose({"changes": {"slip_prob": 0.1, "cols": 5, "n_agents": 2, "max_steps": 30},
                               "rationale": "harder"}, max_changes=2)
    assert (cfg.slip_prob, cfg.cols, cfg.n_agents, cfg.max_steps) == (0.1, 5, 1, 20)
    assert info["trimmed"] == ["n_agents", "max_steps"] and set(info["changes"]) == {"slip_prob", "cols"}
    # custom bounds, aliases, unknown knobs and same-as-current values are dropped, not fatal
    cfg, info, _, _ = propose({"changes": {"agents": 3, "colour": "red", "rows": 4, "observation": "x-ray"}},
                              bounds=Bounds(n_agents=(1, 2)))
    assert cfg.n_agents == 2 and info["changes"] == {"n_agents": [1, 2]}
    assert set(info["dropped"]) == {"colour", "rows", "observation"}
    keep, notes = apply_changes(SINGLE, {"rows": "6", "slip_prob": True}, max_changes=1)
    assert keep == {"rows": 6} and "expected a number" in notes["dropped"]["slip_prob"]


@pytest.mark.parametrize("reply, why", [
    ("I would make it harder, maybe?", "unusable reply"),
    ({"rationale": "no changes object"}, "unusable reply"),
    ({"changes": {"colour": "red"}}, "no usable change"),
    ({"changes": {"max_steps": 30}, "rationale": "which failures you saw and why this change addresses them"},
     "repeats the template's example"),
    ({"changes": {"n_agents": 6, "rows": 3}}, "free cells"),  # 3x4 grid with 20% holes cannot hold 6 agents
    ({"changes": {"max_steps": 5, "min_goal_distance": 6}}, "shorter than the optimal plan"),
])
def test_bad_replies_fall_back_to_the_current_config(reply, why):
    cfg, info, script, _ = propose(reply)
    assert cfg == SINGLE and info["changes"] == {}
    assert why in info["fallback"], info["fallback"]
    assert script.calls["engineer"] == 1  # one call, no retry by default


def test_empty_changes_keep_the_config_without_fallback():
    cfg, info, _, _ = propose({"changes": {}, "rationale": "the agent succeeds, keep it"})
    assert cfg == SINGLE and info["fallback"] is None and info["rationale"].startswith("the agent succeeds")


def test_more_steps_under_a_binding_harness_cap_is_dropped_as_having_no_effect():
    """Measured on the local model: with the harness capping episodes at 8 steps, the engineer raised
    max_steps 20 -> 30 (the template's example knob) against timeouts, a change that did nothing."""
    script = Script(engineer={"changes": {"max_steps": 30}, "rationale": "episodes time out"})
    report = {**_report(), "step_cap": 8}
    with ScriptedLLM.install(script):
        cfg, info = propose_config(SINGLE, report, gateway())
    assert cfg == SINGLE and "no effect" in info["fallback"] and "after 8 steps" in info["dropped"]["max_steps"]
    system, user = (m["content"] for m in script.engineer_prompts[0])
    assert "- max_steps = 20  [" in user and "(no effect: the harness stops every episode after 8 steps)" in user
    assert '"max_steps"' not in system and '"rows": 5' in system  # the example uses a knob that matters
    # the example change itself is not taken for a decision (the local model returned it with its own rationale)
    script = Script(engineer={"changes": {"rows": 5}, "rationale": "more room against timeouts"})
    with ScriptedLLM.install(script):
        cfg, info = propose_config(SINGLE, report, gateway())
    assert cfg == SINGLE and "example change (rows = 5)" in info["fallback"]
    # a cap above max_steps does not bind: the knob works and is the example again
    keep, notes = apply_changes(SINGLE, {"max_steps": 30}, step_cap=100)
    assert keep == {"max_steps": 30}
    keep, notes = apply_changes(SINGLE, {"max_steps": 5}, step_cap=8)  # shorter than the cap: takes effect
    assert keep == {"max_steps": 5}


# -- the curriculum ------------------------------------------------------------------------------------


def _checkpoint(stage_dir: Path) -> RunState:
    return load_checkpoint(stage_dir)


def test_fixed_curriculum_keeps_config_and_carries_prompts(tmp_path):
    script = Script(engineer={"changes": {"rows": 6}, "rationale": "must not be asked"})
    start_task(tmp_path)
    task_file = str(tmp_path / "start.toml")  # the base task is a task file with MAPF knobs in [env]
    res = curriculum(tmp_path, script, stages=2, mode="fixed", task=task_file)
    assert script.calls["engineer"] == 0
    assert res.configs[0] == res.configs[1] == mapf_config(load_task_file(task_file).env)
    assert res.configs[0].name == "start" and res.configs[0].hole_density == 0.25
    data = json.loads((tmp_path / "cur" / "curriculum.json").read_text())
    assert data["complete"] and data["mode"] == "fixed" and [s["stage"] for s in data["stages"]] == [1, 2]
    assert data["stages"][0]["config"] == data["stages"][1]["config"] and data["stages"][1]["changes"] == {}
    assert data["stages"][0]["engineer"] == {"mode": "fixed", "changes": {}, "fallback": None}
    # stage 2 starts from stage 1's best prompts (which gained the safety rule)
    s1, s2 = _checkpoint(tmp_path / "cur" / "stage-1"), _checkpoint(tmp_path / "cur" / "stage-2")
    best1, init2 = s1.best, s2.initial
    assert s1.best_id != "c0" and init2.fingerprint == best1.fingerprint
    assert data["stages"][1]["initial_fingerprint"] == data["stages"][0]["best_fingerprint"] == best1.fingerprint
    assert SAFETY_RULE in init2.prompt_set().module("actor").get("safety")
    # each stage has its own run folder and its own training seeds
    assert s1.config.run.endswith("stage-1") and s2.config.seed == s1.config.seed + 1
    assert (s1.generations[0].evidence_seeds, s1.generations[0].accept_seeds) != \
        (s2.generations[0].evidence_seeds, s2.generations[0].accept_seeds)
    # stages select on their validation seeds and never play a test seed (new: final_test is off in stages)
    for st in (s1, s2):
        assert not st.config.final_test and "test" not in st.played
        assert all(not c.test for c in st.candidates.values())
        assert st.played["validation"] and set(st.played["validation"]) <= set(st.splits["validation"])
    assert data["stages"][0]["validation"]["n"] == 4 and data["stages"][0]["validation_success"] is not None
    # final comparison on the target's test seeds, played once: the carried rule makes the agent better
    rows = data["final"]["rows"]
    assert data["final"]["target"] == "start" and data["final"]["split"] == "test"
    assert data["final"]["seeds"] == [100000, 100001, 100002, 100003]
    assert (rows["initial"]["n"], rows["initial"]["successes"], rows["best"]["successes"]) == (4, 1, 3)
    assert data["final"]["best_report"]["failure_causes"]["timeout"] == 1
    assert rows["best"]["fingerprint"] == res.best_prompts.fingerprint()
    final_keys = [json.loads(x)["key"] for x in (tmp_path / "cur" / "final" / "episodes.jsonl").read_text().splitlines()]
    assert sorted(final_keys) == sorted([rows["initial"]["fingerprint"]] * 4 + [rows["best"]["fingerprint"]] * 4)
    md = (tmp_path / "cur" / "curriculum.md").read_text()
    assert "| 1 | start: 4x4" in md and "| initial | 4 | 25.0%" in md and "| best | 4 | 75.0%" in md
    assert "4 test seeds (played once)" in md


def test_engineer_curriculum_changes_config_per_reply_and_resumes(tmp_path):
    # max_steps 5 is below the 6-step harness cap, so it takes effect
    script = Script(engineer={"changes": {"hole_density": 0.0, "max_steps": 5, "rows": 9},
                              "rationale": "agents fell into holes"})
    task = start_task(tmp_path)
    res = curriculum(tmp_path, script, stages=2, mode="engineer", max_changes=2, task=task)
    assert script.calls["engineer"] == 1
    c1, c2 = res.configs
    assert c1.hole_density == 0.25 and (c2.hole_density, c2.max_steps, c2.rows) == (0.0, 5, c1.rows)
    data = json.loads((tmp_path / "cur" / "curriculum.json").read_text())
    st1, st2 = data["stages"]
    eng = st1["engineer"]
    assert eng["mode"] == "engineer" and eng["changes"] == {"hole_density": [0.25, 0.0], "max_steps": [8, 5]}
    assert eng["trimmed"] == ["rows"] and eng["rationale"] == "agents fell into holes"
    assert st2["changes"] == eng["changes"] and st2["engineer_in"]["changes"] == eng["changes"]
    assert st2["config"]["hole_density"] == 0.0
    # the engineer read the failure report of stage 1's best prompts on its validation episodes (was: held-out;
    # a stage never plays test seeds)
    rep = st1["report"]
    s1 = _checkpoint(tmp_path / "cur" / "stage-1")
    best_val = s1.best.validation
    assert st1["evidence"] == "validation" and rep["n"] == len(best_val) == 4
    assert rep["successes"] == sum(r["success"] for r in best_val.values())
    assert rep["successes"] == 3  # the safety rule: no hole falls, one episode runs out of steps
    assert rep["failure_causes"] == {"fell_in_hole": 0, "invalid_actions": 0, "collisions": 0, "timeout": 1, "other": 0}
    assert st1["best_fingerprint"] != st1["initial_fingerprint"]  # the best (with the rule) was judged
    user = script.engineer_prompts[0][-1]["content"]
    assert f"Episodes: 4; successes: {rep['successes']} ({rep['success_rate']:.0%})" in user
    assert "- hole_density = 0.25" in user and "stops every episode after 6 steps" in user
    assert "Failure causes (one per failed episode): timeout 1." in user
    # stage 2 really played the new config: no holes on its maps
    lines = (tmp_path / "cur" / "stage-2" / "episodes.jsonl").read_text().splitlines()
    obs = json.loads(lines[0])["result"]["trajectory"][0]["observation"]
    grid = [ln for ln in obs.splitlines() if re.match(r"^ {0,2}\d+ [.#H\dab ]+$", ln)]
    assert len(grid) == c2.rows and not any("H" in ln for ln in grid)
    assert "after stage 1: hole_density 0.25 -> 0.0, max_steps 8 -> 5" in (tmp_path / "cur" / "curriculum.md").read_text()
    # resume: finished stages, the engineer call and the final episodes are all reused
    again = Script(engineer={"changes": {"rows": 8}, "rationale": "different"})
    with ScriptedLLM.install(again):
        res2 = run_curriculum(base_config(tmp_path, resume=True), stages=2, mode="engineer", task=task,
                              agent_gateway=gateway(), optimizer_gateway=gateway(), quiet=True)
    assert sum(again.calls.values()) == 0
    assert res2.configs == res.configs and res2.final["rows"] == res.final["rows"]
    with pytest.raises(RunError, match="already holds a curriculum"):
        curriculum(tmp_path, Script(), stages=2, mode="engineer", task=task)
    with pytest.raises(RunError, match="mode was 'engineer'"):
        curriculum(tmp_path, Script(), stages=2, mode="fixed", resume=True, task=task)


def test_cli_refuses_non_mapf_tasks_and_parses_curriculum_flags(tmp_path, capsys):
    assert cli_main(["--task", "goto", "--results-dir", str(tmp_path), "-q"]) == 2
    err = capsys.readouterr().err
    assert "MAPF task" in err and "'goto' is a babyai task" in err and len(err.strip().splitlines()) == 1
    assert cli_main(["--task", "mapf-single", "--target", "pickup", "--results-dir", str(tmp_path)]) == 2
    assert "target task 'pickup'" in capsys.readouterr().err
    cfg, kw, quiet = curriculum_args(["--task", "mapf-single", "--stages", "4", "--engineer", "fixed",
                                      "--target", "mapf-easy", "-g", "2", "--results-dir", str(tmp_path), "-q"])
    assert kw == {"stages": 4, "mode": "fixed", "target_task": "mapf-easy", "max_changes": 2}
    assert cfg.generations == 2 and quiet and cfg.run.startswith("mapf-single-curriculum-")
    _, kw, _ = curriculum_args(["--task", "mapf-single"])
    assert kw["stages"] == 3 and kw["mode"] == "engineer" and kw["target_task"] is None
    with pytest.raises(RunError, match="--stages"):
        curriculum_args(["--task", "mapf-single", "--stages", "0"])
    assert cli_main(["--task", "mapf-single", "--validation-episodes", "0", "--results-dir", str(tmp_path)]) == 2
    assert "--validation-episodes" in capsys.readouterr().err  # a bad option names its flag
    assert not any(tmp_path.iterdir())  # nothing written for refused runs


CLI_ARGS = ["--model", "fake/scripted", "-g", "1", "-n", "2", "--evidence-episodes", "2", "--validation-episodes", "2", "--test-episodes", "2",
            "--max-steps", "6", "-k", "1", "--accept-rule", "always", "--baseline", "none", "--no-cache", "-j", "2",
            "--run", "c", "-q"]


def test_cli_runs_then_extends_a_curriculum_on_resume(tmp_path, capsys):
    start_task(tmp_path)
    args = ["--task", str(tmp_path / "start.toml"), *CLI_ARGS, "--results-dir", str(tmp_path)]
    script = Script(engineer={"changes": {"hole_density": 0.1}, "rationale": "fewer holes"})
    with ScriptedLLM.install(script):
        assert cli_main(args + ["--stages", "1"]) == 0
        out = capsys.readouterr().out
        assert "1      4x4 a1 holes 0.25 walls 0.0 slip 0.0 steps 8" in out and "target start, best prompts" in out
        assert script.calls["engineer"] == 0
        stage1 = tmp_path / "c" / "stage-1" / "checkpoint.json"
        before = stage1.stat().st_mtime_ns
        assert cli_main(["--resume", "c", "--results-dir", str(tmp_path), "--stages", "2", "-q"]) == 0
    data = json.loads((tmp_path / "c" / "curriculum.json").read_text())
    assert script.calls["engineer"] == 1 and [s["stage"] for s in data["stages"]] == [1, 2]
    assert data["stages"][1]["config"]["hole_density"] == 0.1 and data["stages"][1]["changes"] == {"hole_density": [0.25, 0.1]}
    assert stage1.stat().st_mtime_ns == before  # the finished stage was not run again
    assert data["target_task"] == str(tmp_path / "start.toml") and data["config"]["generations"] == 1
    assert data["final"]["seeds"] == [100000, 100001]  # the target's first 2 test seeds (--test-episodes)
    assert "2      4x4 a1 holes 0.1" in capsys.readouterr().out


def test_a_crash_in_stage_one_leaves_a_resumable_curriculum(tmp_path, monkeypatch):
    import promptevo.api as api

    start_task(tmp_path)
    args = ["--task", str(tmp_path / "start.toml"), *CLI_ARGS, "--results-dir", str(tmp_path), "--stages", "1"]
    real = api.optimize

    def crash(*a, **kw):
        raise RuntimeError("simulated crash inside stage 1")

    monkeypatch.setattr(api, "optimize", crash)  # the curriculum looks optimize() up at each run
    script = Script(engineer={"changes": {}, "rationale": "keep"})
    with ScriptedLLM.install(script):
        with pytest.raises(RuntimeError, match="simulated crash"):
            cli_main(args)
        data = json.loads((tmp_path / "c" / "curriculum.json").read_text())
        assert data["complete"] is False and data["stages"] == []
        monkeypatch.setattr(api, "optimize", real)
        assert cli_main(["--resume", "c", "--results-dir", str(tmp_path), "-q"]) == 0
    data = json.loads((tmp_path / "c" / "curriculum.json").read_text())
    assert data["complete"] is True and [s["stage"] for s in data["stages"]] == [1]
