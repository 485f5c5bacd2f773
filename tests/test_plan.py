"""Stop conditions, presets, runs as files and the plan printed before a run (test doubles, no real LLM)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from engine_doubles import config, run

from promptevo.optim.config import PRESETS, ConfigError, OptimizeConfig, config_toml, load_config_file, validate_config
from promptevo.optim.plan import describe, make_plan
from promptevo.optim.state import load_checkpoint


def test_time_limit_stops_the_run_plays_the_test_split_and_resume_with_more_time_continues(tmp_path):
    cfg = config(tmp_path, generations=3, max_hours=1e-9)
    res = run(cfg)
    st = load_checkpoint(cfg.run_path())
    assert res.stop_reason.startswith("time limit reached") and st.phase == "done"
    assert res.report["rows"] and all(r["n"] == cfg.test_episodes for r in res.report["rows"])
    assert sum(1 for g in st.generations if g.done) == 0
    res2 = run(cfg.model_copy(update={"resume": True, "max_hours": 10.0}))
    st2 = load_checkpoint(cfg.run_path())
    assert res2.stop_reason == "completed 3 generations" and sum(1 for g in st2.generations if g.done) == 3


def test_patience_and_target_stop_between_generations(tmp_path):
    res = run(config(tmp_path, generations=4, patience=1, run="p"))  # gen 1 promotes the rule, gen 2 nothing
    st = load_checkpoint(res.run_dir)
    assert res.stop_reason == "no improvement in 1 generation(s)" and len(st.generations) == 2
    assert not (st.generations[-1].gate or {}).get("promoted") and res.report["rows"]
    res = run(config(tmp_path, generations=4, target_success=0.5, run="t"))
    assert res.stop_reason.startswith("target reached") and res.report["rows"]  # the rule is promoted at once


def test_preset_sizes_and_explicit_options_win():
    cfg = validate_config({"task": "goto", "preset": "quick", "validation_episodes": 30})
    assert cfg.generations == PRESETS["quick"]["generations"] and cfg.validation_episodes == 30
    with pytest.raises(ConfigError, match="--preset"):
        validate_config({"task": "goto", "preset": "huge"})
    plan = make_plan(cfg, 64, seconds=2.0, source="test")
    lines = describe(plan, cfg, {"validation_episodes", "preset"})
    assert any("explicit options win: --validation-episodes" in ln for ln in lines)
    assert plan.phases["validation"] == 30 * 2 + 30 and plan.phases["test"] == 50 * 3


def test_plan_names_a_time_limit_shorter_than_one_episode():
    cfg = OptimizeConfig(task="goto", max_hours=0.0001)
    lines = describe(make_plan(cfg, 64, seconds=3.0, source="test"), cfg)
    assert any("shorter than one episode" in ln for ln in lines)


def test_config_file_round_trip_and_errors(tmp_path):
    cfg = OptimizeConfig(task="goto", agent="robust-cot", agent_options={"history": 1}, operators=["induce"],
                         validation_episodes=40, max_hours=2.0)
    p = tmp_path / "c.toml"
    p.write_text(config_toml(cfg))
    again = validate_config(load_config_file(p))
    assert again.model_dump(exclude={"run", "resume"}) == cfg.model_dump(exclude={"run", "resume"})
    (tmp_path / "bad.toml").write_text('task = "goto"\nvalidation-episodez = 3\n')
    with pytest.raises(ConfigError, match="unknown setting 'validation-episodez'"):
        load_config_file(tmp_path / "bad.toml")
    with pytest.raises(ConfigError, match="no such file"):
        load_config_file(tmp_path / "nope.toml")


def test_config_file_is_in_sections_and_a_misplaced_key_names_its_section(tmp_path):
    """The file has one table per section of SECTIONS; flat keys (older run folders) still load; a key
    in the wrong table, an unknown table or an unknown key is one line naming the valid choices."""
    from promptevo.optim.config import SECTIONS

    text = config_toml(OptimizeConfig(task="goto", alpha=0.1, agent_options={"history": 2}))
    assert "[gate]\npromote_rule" in text and "alpha = 0.1" in text and "agent_options = {history = 2}" in text
    tables = [line[1:-1] for line in text.splitlines() if line.startswith("[")]
    assert tables == [s for s in SECTIONS if s in tables] and "gate" in tables
    p = tmp_path / "c.toml"
    p.write_text('[loop]\ntask = "goto"\n[gate]\nalpha = 0.1\n[agent]\nhistory = 3\n')
    assert load_config_file(p) == {"task": "goto", "alpha": 0.1, "agent_options": {"history": 3}}
    p.write_text('task = "goto"\nalpha = 0.1\n')  # flat, as earlier versions wrote it
    assert load_config_file(p) == {"task": "goto", "alpha": 0.1}
    for body, needle in (('[race]\nalpha = 0.1\n', "[race] has no setting 'alpha' (it is in [gate])"),
                         ('[rase]\nrace = true\n', "unknown section [rase] (did you mean 'race'?)"),
                         ('[gate]\nalpah = 0.1\n', "[gate] has no setting 'alpah' (did you mean 'alpha'?)")):
        p.write_text(body)
        with pytest.raises(ConfigError) as e:
            load_config_file(p)
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_every_run_writes_its_settings_and_config_repeats_it(tmp_path):
    from promptevo.cli.optimize import config_from_args

    res = run(config(tmp_path, generations=1))
    written = res.run_dir / "config.toml"
    assert written.is_file() and "run =" not in written.read_text()
    cfg, _ = config_from_args(["--config", str(written), "--run", "again"])
    assert cfg.generations == 1 and cfg.task == "scripted-pickup" and cfg.run == "again"
    cfg2, _ = config_from_args(["--config", str(written), "--generations", "3"])
    assert cfg2.generations == 3  # the command line wins


def test_dry_run_prints_the_plan_and_creates_nothing(tmp_path):
    r = subprocess.run([sys.executable, "-m", "promptevo", "optimize", "--task", "goto", "--agent", "naive",
                        "--model", "fake/scripted", "--seconds-per-call", "1", "--preset", "quick", "--dry-run",
                        "--results-dir", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "plan: goto" in r.stderr and "final test" in r.stderr and not (tmp_path / "res").exists()


def test_a_local_model_gets_the_quick_sizes_unless_told_otherwise():
    from promptevo.cli.optimize import config_from_args
    from promptevo.optim.config import LOCAL_PRESET

    local, _ = config_from_args(["--task", "goto"])  # the default model is local/
    assert local.preset == LOCAL_PRESET and local.generations == PRESETS[LOCAL_PRESET]["generations"]
    assert config_from_args(["--task", "goto", "--validation-episodes", "30"])[0].validation_episodes == 30
    assert config_from_args(["--task", "goto", "--preset", "standard"])[0].generations == PRESETS["standard"]["generations"]
    remote, _ = config_from_args(["--task", "goto", "--model", "openai/gpt-4o-mini"])
    assert remote.preset is None and remote.generations == PRESETS["standard"]["generations"]
    api_default = validate_config({"task": "goto"})  # the Python API keeps the standard defaults
    assert api_default.preset is None and api_default.generations == PRESETS["standard"]["generations"]
    lines = describe(make_plan(local, 64, seconds=2.0, source="test"), local, set())
    assert any("a local model: the sizes of --preset quick" in ln for ln in lines)
    assert not any("--preset quick, or" in ln for ln in lines)


def test_seconds_per_call_gives_the_estimate_and_a_failed_probe_leaves_it_unknown(tmp_path):
    base = [sys.executable, "-m", "promptevo", "optimize", "--task", "goto", "--model", "openai/gpt-4o-mini",
            "--concurrency", "8", "--dry-run", "--results-dir", str(tmp_path / "res")]
    env = {k: v for k, v in __import__("os").environ.items() if k != "OPENAI_API_KEY"}
    r = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "time: unknown (the probe failed: OPENAI_API_KEY" in r.stderr and "--seconds-per-call" in r.stderr
    r = subprocess.run(base + ["--seconds-per-call", "1.5"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and "1.50 s per call, given with --seconds-per-call" in r.stderr, r.stderr
    r = subprocess.run(base + ["--seconds-per-call", "-1"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--seconds-per-call" in r.stderr
    assert not (tmp_path / "res").exists()


def test_plan_reads_parsed_options_short_flags_and_abbreviations_included(tmp_path):
    r = subprocess.run([sys.executable, "-m", "promptevo", "optimize", "--task", "goto", "--agent", "naive", "--model", "fake/scripted",
                        "--preset", "quick", "-g", "3", "--dry", "--seconds-per-call", "1",
                        "--results-dir", str(tmp_path / "res")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "preset quick: explicit options win: --generations" in r.stderr  # -g is an explicit size
    assert not (tmp_path / "res").exists()  # --dry (argparse's abbreviation of --dry-run) plays nothing
