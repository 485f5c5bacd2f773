"""Failures are failures: an LLM outage stops a run (resumable) instead of finishing it, a run folder has one
owner, credentials are never serialized, bad prompts and options are refused before the folder exists.

The LLMs here are test doubles (ScriptedLLM); nothing in this file stands in for a measured result."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from engine_doubles import CountingRunner, config, run

from promptevo.fileio import FolderLock, FolderLockError
from promptevo.optim.config import ConfigError, OptimizeConfig, validate_config
from promptevo.optim.state import RunStopped, load_checkpoint


class Outage:
    """The scripted agent LLM works for ``ok_calls`` agent calls, then every call fails (a server gone)."""

    def __init__(self, ok_calls: int):
        self.ok_calls, self.calls, self.down = ok_calls, 0, True

    def __call__(self, messages, params):
        import litellm

        from engine_doubles import responder

        first = messages[0]["content"]
        if '"edits"' in first or '"attributions"' in first:
            return responder(messages, params)
        self.calls += 1
        if self.down and self.calls > self.ok_calls:
            return litellm.InternalServerError(message="connection refused", model="x", llm_provider="fake")
        return responder(messages, params)


def test_an_outage_stops_the_run_and_resume_finishes_it_with_every_episode_once(tmp_path):
    outage = Outage(ok_calls=40)
    cfg = config(tmp_path, generations=1)
    with pytest.raises(RunStopped, match=r"could not be played: the LLM failed.*--resume"):
        run(cfg, CountingRunner(), responder_fn=outage)
    st = load_checkpoint(cfg.run_path())
    assert st.phase != "done" and st.stop_reason.startswith("stopped: ")
    outage.down = False  # the server is back
    res = run(cfg.model_copy(update={"resume": True}), CountingRunner(), responder_fn=outage)
    st = load_checkpoint(cfg.run_path())
    assert st.phase == "done" and st.stop_reason == "completed 1 generations"
    finished: dict[tuple, int] = {}
    for line in (cfg.run_path() / "episodes.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if not rec["result"].get("error"):
            finished[(rec["key"], rec["seed"])] = finished.get((rec["key"], rec["seed"]), 0) + 1
    assert max(finished.values()) == 1  # nothing played twice
    assert all(r["n"] == cfg.test_episodes for r in res.report["rows"])  # no row lost episodes


def test_folder_lock_refuses_a_second_owner_and_takes_over_a_stale_one(tmp_path):
    script = ("import sys, time; from promptevo.fileio import FolderLock; FolderLock(sys.argv[1]).acquire(); "
              "print('locked', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    with pytest.raises(FolderLockError, match=f"in use by process {p.pid}"):
        FolderLock(tmp_path).acquire()
    p.kill()  # kill -9: the lock is never released by its owner
    p.wait()
    lock = FolderLock(tmp_path)
    note = lock.acquire()
    assert note and f"process {p.pid}" in note
    lock.release()


def test_credentials_in_the_server_url_are_never_serialized_and_resume_asks_for_the_url(tmp_path):
    from promptevo.cli.optimize import config_from_args

    cfg = OptimizeConfig(task="goto", api_base="http://alice:sk-very-secret-42@host/v1", results_dir=str(tmp_path))
    assert "sk-very-secret-42" not in cfg.model_dump_json() and cfg.api_base.endswith("@host/v1")
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    from promptevo.optim.state import Candidate, RunState, save_checkpoint
    from promptevo.segments import PromptSet

    ps = PromptSet()
    c0 = Candidate(id="c0", fingerprint=ps.fingerprint(), prompts=ps.to_dict(), status="initial")
    save_checkpoint(run_dir, RunState(config=cfg, candidates={"c0": c0}))
    assert "sk-very-secret-42" not in (run_dir / "checkpoint.json").read_text()
    with pytest.raises(ConfigError, match="--api-base: this run's server URL had credentials"):
        config_from_args(["--resume", str(run_dir)])
    again, _ = config_from_args(["--resume", str(run_dir), "--api-base", "http://alice:sk-very-secret-42@host/v1"])
    assert again.api_base == "http://alice:sk-very-secret-42@host/v1"


@pytest.mark.parametrize("given, flag", [({"budget_llm_calls": 0}, "--budget-calls"), ({"operators": ["foo"]}, "--operators"),
                                         ({"temperature": 100}, "--temperature"),
                                         ({"accept_margin": float("nan")}, "--accept-margin")])
def test_bad_values_name_the_flag_as_typed(given, flag):
    with pytest.raises(ConfigError) as e:
        validate_config({"task": "goto", **given})
    assert str(e.value).startswith(flag + ":") and "\n" not in str(e.value)


def test_bad_agent_options_and_placeholders_are_refused_before_the_run_folder_exists(tmp_path):
    import promptevo
    from promptevo.optim.state import RunError
    from promptevo.segments import Prompt, PromptSet, Segment

    with pytest.raises(RunError, match="has no option 'history'"):
        promptevo.optimize(task="goto", agent="two-stage", agent_options={"history": 2}, model="fake/scripted",
                           results_dir=str(tmp_path), run="a", quiet=True)
    bad = PromptSet.of({"system": Prompt((Segment("role", "Reach {goal}."), Segment("format", "<|ACTION|>x<|END|>")))})
    with pytest.raises(RunError, match=r"unknown placeholder \{goal\}"):
        promptevo.optimize(task="goto", agent="robust-cot", model="fake/scripted", initial_prompts=bad,
                           results_dir=str(tmp_path), run="b", quiet=True)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_unwritable_results_folder_is_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    r = subprocess.run([sys.executable, "-m", "promptevo", "optimize", "--task", "goto", "--results-dir", str(ro / "x"),
                        "--run", "r", "--model", "fake/scripted"], capture_output=True, text=True, timeout=120)
    ro.chmod(0o700)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "cannot write" in r.stderr
