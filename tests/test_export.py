"""Tests of ``promptevo export`` (promptevo.reporting.export) on a real run made with the test doubles of
``run_double.py``: the best prompts as files that load again, agent.json with the TEST split result (never
a validation score as one), LINEAGE.md, the copy of report.html, and one-line errors."""

from __future__ import annotations

import json

import pytest
from run_double import RULE, make_run

from promptevo.cli.export import cli_main
from promptevo.optim.state import RunError
from promptevo.reporting.export import export_run, load_agent_config
from promptevo.segments import PromptSet


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("export"), "r1", generations=2).run_dir


def best_fingerprint(run_dir) -> str:
    ck = json.loads((run_dir / "checkpoint.json").read_text())
    return ck["candidates"][ck["best_id"]]["fingerprint"]


def test_export_writes_loadable_files_and_lineage(run_dir, tmp_path):
    out = tmp_path / "out"
    paths = export_run(run_dir, out)
    assert sorted(p.name for p in paths) == ["LINEAGE.md", "agent.json", "best.json", "best.md", "report.html"]
    fp = best_fingerprint(run_dir)
    assert fp == json.loads((run_dir / "checkpoint.json").read_text())["candidates"]["c1"]["fingerprint"]
    assert PromptSet.load(out / "best.md").fingerprint() == fp
    assert PromptSet.load(out / "best.json").fingerprint() == fp
    assert PromptSet.load(out / "agent.json").fingerprint() == fp  # `promptevo eval --prompts agent.json`
    agent, ps, data = load_agent_config(out / "agent.json")
    assert agent == "two-stage" and ps.fingerprint() == fp and data["task"] == "scripted-pickup"
    assert data["model"] == "fake/agent" and data["candidate"] == "c1" and data["init"] == "plain"
    assert (out / data["prompts_file"]).exists()
    # the score is the test split's: 20/20 with its Wilson interval; no validation figure passed off as one
    assert data["test"]["n"] == 20 and data["test"]["successes"] == 20 and data["test"]["success_rate"] == 1.0
    assert data["test"]["ci95"][0] == pytest.approx(0.8389, abs=1e-4)
    assert not {"validation", "heldout"} & set(data)
    assert (out / "report.html").read_text() == (run_dir / "report.html").read_text()
    lineage = (out / "LINEAGE.md").read_text()
    assert "c0 -> c1" in lineage and "`rewrite` `actor.rules`" in lineage
    assert "episodes fail by picking up while the ball is to the left" in lineage
    assert "+Move toward the ball. " + RULE in lineage  # the segment diff
    assert "training seeds (n=8, paired with c0): mean diff +1.000, 8 wins / 0 losses / 0 ties -> accepted" in lineage
    assert "validation gate (n=20): mean diff +0.750 -> promoted" in lineage
    assert "TEST split: 20/20 = 100% [84%, 100%]" in lineage and "TEST split: 5/20 = 25%" in lineage
    assert "| c2 | 1 | c0 | mutate | `rewrite` `actor.role` | +0.000 | rejected |" in lineage
    assert "| c3 | 2 | c1 | mutate | `delete` `actor.rules` | -1.000 | stopped |" in lineage
    # default output folder
    assert all(p.parent == run_dir / "export" for p in export_run(run_dir))


def test_run_without_test_split_exports_no_score(run_dir, tmp_path):
    cut = tmp_path / "cut"
    cut.mkdir()
    ck = json.loads((run_dir / "checkpoint.json").read_text())
    for c in ck["candidates"].values():
        c["test"] = {}
    ck["phase"], ck["final"], ck["baseline"] = "optimize", {}, {}
    (cut / "checkpoint.json").write_text(json.dumps(ck))
    names = [p.name for p in export_run(cut)]
    assert "report.html" not in names  # the run has none
    data = json.loads((cut / "export" / "agent.json").read_text())
    assert data["test"] is None and data["candidate"] == "c1"
    assert "TEST split" not in (cut / "export" / "LINEAGE.md").read_text().split("played once at the end")[1]


def test_errors_are_one_line(tmp_path):
    with pytest.raises(RunError, match="not a promptevo run") as e:
        export_run(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "checkpoint.json").write_text('{"version": 2, "candidates": [')
    with pytest.raises(RunError, match=r"corrupt checkpoint .*bad/checkpoint\.json") as e:
        export_run(bad)
    assert "\n" not in str(e.value)
    (tmp_path / "agent.json").write_text('{"task": "x"}')
    with pytest.raises(RunError, match="not a promptevo agent config") as e:
        load_agent_config(tmp_path / "agent.json")
    assert "\n" not in str(e.value)


def test_export_cli(run_dir, tmp_path, capsys):
    assert cli_main([str(run_dir), "--out", str(tmp_path / "exp")]) == 0
    out = capsys.readouterr().out
    assert "LINEAGE.md" in out and "--prompts" in out and "TEST split 20/20 = 100% [84%, 100%]" in out
    assert cli_main(["nope", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: not a promptevo run") and len(err.splitlines()) == 1
    # a run name under --results-dir
    assert cli_main([run_dir.name, "--results-dir", str(run_dir.parent), "-o", str(tmp_path / "exp2")]) == 0
    assert (tmp_path / "exp2" / "agent.json").exists()
