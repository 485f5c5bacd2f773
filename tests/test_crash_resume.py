"""Crash safety: kill -9 `promptevo optimize` at random points, resume, and lose or repeat nothing.

The model is a scripted test double behind a real HTTP server on 127.0.0.1 (benchmarks'
fake OpenAI-compatible server), reached through LiteLLM as ``openai/fake`` — so the optimizer runs in a
separate process exactly as a user runs it, and can be killed with SIGKILL. Every reply is a function of
the request's messages only, so an uninterrupted run of the same command (played alongside, on the same
server) is the reference the killed-and-resumed run must equal: same candidates and decisions, same
episodes stored, each exactly once.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from fake_openai_server import FakeOpenAIServer  # noqa: E402

ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16)


def scripted_model_double():
    """Test double: analyzer/mutator get valid JSON, the agent a pseudo-random action; every reply depends
    only on the request's messages (the mutator's edit is named after a hash of what it was shown, the
    agent's action after a hash of its system prompt and last message), never on call order."""

    def reply(messages: list[dict]) -> str:
        system = str(messages[0].get("content") or "") if messages else ""
        last = str(messages[-1].get("content") or "") if messages else ""
        if '"edits"' in system:
            k = _h(last) % 10**6
            return json.dumps({"edits": [{
                "module": "system", "op": "add", "segment": f"hint_{k}{v}", "after": None,
                "text": f"When a wall is one step forward, turn instead of going forward (variant {k}{v}).",
                "rationale": "the agent walks into walls",
            } for v in ("a", "b")]})
        if "attributions" in system:
            return json.dumps({
                "attributions": [{"module": "system", "segment": "tips", "effect": "hurt",
                                  "evidence": [{"seed": 0, "step": 1, "note": "walked into a wall"}],
                                  "explanation": "the tips do not say how to avoid walls"}],
                "failure_modes": ["walks into walls"],
                "proposals": [{"module": "system", "segment": "tips", "op": "rewrite",
                               "idea": "tell the agent to turn at walls"}],
            })
        return f"Thinking.\n<|ACTION|>{ACTIONS[_h(system + last) % len(ACTIONS)]}<|END|>"

    return reply


def optimize_cmd(api_base: str, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "promptevo", "optimize", *extra,
            "--model", "openai/fake", "--api-base", api_base, "--results-dir", str(results), "--quiet"]


def read_store(run_dir: Path) -> list[tuple[str, int]]:
    keys = []
    for line in (run_dir / "episodes.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the kill: tolerated, re-played on resume
            continue
        keys.append((rec["key"], int(rec["seed"])))
    return keys


def stored_lines(run_dir: Path) -> int:
    try:
        return (run_dir / "episodes.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def kill_when_stored(proc: subprocess.Popen, run_dir: Path, target: int, rng: random.Random) -> int | None:
    """SIGKILL ``proc`` once the episode store holds ``target`` lines (more than before this start), after a
    random 0-0.4 s; returns the lines stored then, or None when the run finished first."""
    target = max(target, stored_lines(run_dir) + 1)
    while proc.poll() is None:
        if stored_lines(run_dir) >= target:
            time.sleep(rng.uniform(0.0, 0.4))
            if proc.poll() is not None:
                break
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            return stored_lines(run_dir)
        time.sleep(0.02)
    return None


def decisions(ckpt: dict) -> dict:
    return {cid: (c["fingerprint"], c["parent"], c["status"], sorted(c["train"]), sorted(c["validation"]),
                  sorted(c["test"])) for cid, c in ckpt["candidates"].items()}


def test_kill_9_at_random_points_then_resume_loses_and_repeats_nothing(tmp_path):
    rng = random.Random(1234)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1")
    env.pop("OPENAI_API_KEY", None)
    # every child is accepted and the gate promotes unless the child is much worse on validation: the best
    # prompt changes between generations, so a resumed generation must pick up the right parent
    args = ["--task", "goto", "--agent", "robust-cot", "--generations", "2", "--episodes", "3", "--evidence-episodes", "3", "--children", "2",
            "--validation-episodes", "3", "--test-episodes", "3", "--accept-rule", "always", "--promote-rule",
            "margin", "--promote-margin", "-0.5", "--allow-negative-margins", "--max-steps", "4", "--concurrency", "2", "--baseline", "none",
            "--no-cache"]
    run_dir = tmp_path / "crash"
    kills: list[int] = []  # episodes stored when each kill landed
    # kill points by progress, not wall time (start-up alone takes seconds on a busy machine): once the store
    # holds a random number of episodes, after a random extra delay (mid-episode, mid-reflection, mid-write)
    targets = sorted(rng.sample(range(2, 42), 3))
    killed_pids: set[int] = set()
    with FakeOpenAIServer(delay=0.01, reply=scripted_model_double(), max_seconds=280) as server:
        ref = subprocess.Popen(optimize_cmd(server.api_base, tmp_path, *args, "--run", "ref"), env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        cmd = optimize_cmd(server.api_base, tmp_path, *args, "--run", "crash")
        try:
            for target in [*targets, None]:
                proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
                at = None if target is None else kill_when_stored(proc, run_dir, target, rng)
                if at is None:  # not killed: it has to finish cleanly
                    out, _ = proc.communicate(timeout=240)
                    assert proc.returncode == 0, out
                    break
                kills.append(at)
                killed_pids.add(proc.pid)
                keys = read_store(run_dir)
                assert len(keys) == len(set(keys)), "an episode was stored twice"
                cmd = optimize_cmd(server.api_base, tmp_path, "--resume", "crash")  # every later start resumes
            ref_out, _ = ref.communicate(timeout=240)
            assert ref.returncode == 0, ref_out
        finally:
            for p in (ref, proc):
                if p.poll() is None:  # pragma: no cover - only when an assertion above failed
                    p.kill()
                    p.communicate()

    assert len(kills) >= 3 and kills == sorted(set(kills)), f"kills landed after {kills} stored episodes"
    keys = read_store(run_dir)
    assert keys and len(keys) == len(set(keys)), "a finished episode was re-run after a kill"
    # nothing lost, nothing extra: exactly the uninterrupted run's episodes and decisions
    assert set(keys) == set(read_store(tmp_path / "ref"))
    ckpt = json.loads((run_dir / "checkpoint.json").read_text(encoding="utf-8"))
    ref_ckpt = json.loads((tmp_path / "ref" / "checkpoint.json").read_text(encoding="utf-8"))
    assert decisions(ckpt) == decisions(ref_ckpt)
    assert ckpt["best_id"] == ref_ckpt["best_id"] and ckpt["history"] == ref_ckpt["history"]
    assert sum(c["status"] == "promoted" for c in ckpt["candidates"].values()) >= 2  # the lineage moved
    assert [(g["evidence_seeds"], g["accept_seeds"], g["children"], g["gate"]) for g in ckpt["generations"]] == \
        [(g["evidence_seeds"], g["accept_seeds"], g["children"], g["gate"]) for g in ref_ckpt["generations"]]
    assert ckpt["stop_reason"] == "completed 2 generations" and ckpt["phase"] == "done"
    assert len(ckpt["generations"]) == 2 and all(g["done"] for g in ckpt["generations"])
    # every per-seed record of every candidate has its episode in the store (test seeds played once, at the end)
    stored = set(keys)
    for cand in ckpt["candidates"].values():
        for split in ("train", "validation", "test"):
            for s in cand[split]:
                assert (cand["fingerprint"], int(s)) in stored, f"{cand['id']} {split} seed {s} not stored"
    assert set(ckpt["played"]["test"]) == set(ckpt["splits"]["test"])
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    ref_report = json.loads((tmp_path / "ref" / "report.json").read_text(encoding="utf-8"))
    assert [(r["name"], r["n"], r["successes"]) for r in report["rows"]] == \
        [(r["name"], r["n"], r["successes"]) for r in ref_report["rows"]]
    assert (run_dir / "report.md").exists() and (run_dir / "best.md").exists()
    # not compared: ckpt["episodes_run"] and ckpt["usage"] - the checkpoint's counters lose what a killed
    # process spent after its last checkpoint (the episodes themselves are in the store and are not re-run)
    # a kill in the middle of an atomic write can leave that write's temporary file (named after the killed
    # process); the file it was replacing is intact, and no finished process leaves one behind
    left = {int(p.name.split(".")[-3]) for p in run_dir.glob("*.tmp")}
    assert left <= killed_pids, f"temporary files of processes that were not killed: {left - killed_pids}"


def test_a_writer_killed_mid_record_loses_only_that_record_and_resumes_twice(tmp_path):
    """A partial last line (the writer killed mid-record) is cut off on open, said once, and the next
    records start on lines of their own: a second and a third open read every finished episode."""
    import subprocess
    import sys
    import textwrap

    from promptevo.evaluation.store import EpisodeStore

    path = tmp_path / "episodes.jsonl"
    script = textwrap.dedent(f"""
        import os, json, sys
        from promptevo.evaluation.store import EpisodeStore
        s = EpisodeStore({str(path)!r})
        for seed in range(3):
            s.put("k", seed, {{"seed": seed, "success": True}})
        with open({str(path)!r}, "a") as f:  # the fourth record, cut off mid-write
            f.write(json.dumps({{"key": "k", "seed": 3, "result": {{"seed": 3}}}})[:25])
            f.flush()
            os._exit(9)  # killed: no cleanup
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    first = EpisodeStore(path)
    assert first.recovered and "cut short" in first.recovered and first.lines == 3
    first.put("k", 3, {"seed": 3, "success": False})
    second = EpisodeStore(path)
    assert second.recovered is None and second.lines == 4 and second.get("k", 3) is not None
    second.put("k", 4, {"seed": 4, "success": True})
    third = EpisodeStore(path)
    assert third.recovered is None and [third.get("k", s)["seed"] for s in range(5)] == [0, 1, 2, 3, 4]


def test_sigterm_says_so_and_resume_finishes(tmp_path):
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1")
    args = ["--task", "goto", "--agent", "robust-cot", "--generations", "1", "--episodes", "3", "--evidence-episodes",
            "3", "--children", "1", "--validation-episodes", "3", "--test-episodes", "3", "--max-steps", "4",
            "--concurrency", "1", "--baseline", "none", "--no-cache"]
    run_dir = tmp_path / "term"
    with FakeOpenAIServer(delay=0.05, reply=scripted_model_double(), max_seconds=200) as server:
        proc = subprocess.Popen(optimize_cmd(server.api_base, tmp_path, *args, "--run", "term"), env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while proc.poll() is None and stored_lines(run_dir) < 2 and time.time() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "terminated (SIGTERM)" in err and f"--resume {run_dir}" in err
        again = subprocess.run(optimize_cmd(server.api_base, tmp_path, "--resume", "term"), env=env, cwd=ROOT,
                               capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
