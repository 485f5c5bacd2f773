"""Every table readable outside a terminal, and ``--json`` for scripts (the CLI run as a user runs it, with
stdout redirected to a pipe: not a terminal, no COLUMNS)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from promptevo.tasks import list_tasks, load_task


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    env["TERM"] = "dumb"
    return subprocess.run([sys.executable, "-m", "promptevo", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def span(seeds: list[int]) -> str:
    return f"{seeds[0]}..{seeds[-1]} ({len(seeds)})"


@pytest.fixture(scope="module")
def tasks_out():
    return cli("tasks")


def test_tasks_table_is_not_cut_in_a_pipe(tasks_out):
    assert tasks_out.returncode == 0, tasks_out.stderr
    assert "…" not in tasks_out.stdout
    for name in list_tasks():
        cfg = load_task(name)
        row = next(ln for ln in tasks_out.stdout.splitlines() if re.search(rf"[│|] {re.escape(name)} +[│|]", ln))
        for sp in ("train", "validation", "test"):
            assert span(cfg.seed_list(sp)) in row


def test_tasks_json_holds_the_same_figures(tasks_out):
    r = cli("tasks", "--json")
    assert r.returncode == 0
    data = json.loads(r.stdout)  # stdout is one JSON document and nothing else
    assert [t["name"] for t in data["tasks"]] == list_tasks()
    for t in data["tasks"]:
        seeds = load_task(t["name"]).seed_list("test")
        assert t["splits"]["test"] == {"start": seeds[0], "count": len(seeds)}
        assert span(seeds) in tasks_out.stdout
    assert "robust-cot" in data["agents"]


def test_models_table_shows_every_model_string_and_install_command():
    from promptevo.llm.models import list_local_models

    r = cli("models")
    assert r.returncode == 0 and "…" not in r.stdout
    rows = [m.to_dict() for m in list_local_models()]
    for m in rows:
        assert m["model"] in r.stdout
        if m.get("install_command") and not m.get("installed"):  # the table shows how to install what is missing
            assert m["install_command"] in r.stdout
    j = cli("models", "--json")
    data = json.loads(j.stdout)
    assert [m["model"] for m in data["local"]] == [m["model"] for m in rows]


def test_eval_interval_is_verbatim_and_json_matches(tmp_path):
    r = cli("eval", "--task", "goto", "--agent", "random", "--episodes", "6", "--results-dir", str(tmp_path),
            "--run-name", "plain")
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout and "progression ± SE" in r.stdout
    j = cli("eval", "--task", "goto", "--agent", "random", "--episodes", "6", "--results-dir", str(tmp_path),
            "--run-name", "js", "--json")
    assert j.returncode == 0, j.stderr
    data = json.loads(j.stdout)
    s = data["tasks"]["goto"]
    lo, hi = s["success_ci95"]
    interval = f"{100 * s['success_rate']:.1f}% ({100 * lo:.1f}%-{100 * hi:.1f}%)"
    assert interval in r.stdout  # same seeds, same random agent: the table shows the same figures
    assert s["n"] == 6 and "results:" in j.stderr


@pytest.mark.parametrize("args", [("eval", "--task", "nope", "--agent", "random", "--json"),
                                  ("eval", "--task", "goto", "--agent", "robust-cot", "--model", "local/nope",
                                   "--json", "--episodes", "1")])
def test_json_with_an_error_is_one_line_on_stderr_and_nothing_on_stdout(args, tmp_path):
    r = cli(*args, "--results-dir", str(tmp_path))
    assert r.returncode != 0 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.strip().startswith("error")
