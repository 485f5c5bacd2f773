"""Crash safety: kill -9 `promptevo optimize` at random points, resume, and lose or repeat nothing.

The model is a scripted test double behind a real HTTP server on 127.0.0.1 (benchmarks'
fake OpenAI-compatible server), reached through LiteLLM as ``openai/fake`` — so the optimizer runs in a
separate process exactly as a user runs it, and can be killed with SIGKILL.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from fake_openai_server import FakeOpenAIServer  # noqa: E402

ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]


def scripted_model_double():
    """Test double: analyzer/mutator get valid JSON, the agent a deterministic pseudo-random action."""
    counter = itertools.count()

    def reply(messages: list[dict]) -> str:
        system = str(messages[0].get("content") or "") if messages else ""
        if '"edits"' in system:
            k = next(counter)
            return json.dumps({"edits": [{
                "module": "system", "op": "add", "segment": f"hint_{k}", "after": None,
                "text": f"When a wall is one step forward, turn instead of going forward (variant {k}).",
                "rationale": "the agent walks into walls",
            }]})
        if "attributions" in system:
            return json.dumps({
                "attributions": [{"module": "system", "segment": "tips", "effect": "hurt",
                                  "evidence": [{"seed": 0, "step": 1, "note": "walked into a wall"}],
                                  "explanation": "the tips do not say how to avoid walls"}],
                "failure_modes": ["walks into walls"],
                "proposals": [{"module": "system", "segment": "tips", "op": "rewrite",
                               "idea": "tell the agent to turn at walls"}],
            })
        last = str(messages[-1].get("content") or "") if messages else ""
        h = int(hashlib.sha256(last.encode("utf-8")).hexdigest(), 16)
        return f"Thinking.\n<|ACTION|>{ACTIONS[h % len(ACTIONS)]}<|END|>"

    return reply


def optimize_cmd(api_base: str, results: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", "from promptevo.cli.main import main; main()", "optimize", *extra,
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


def test_kill_9_at_random_points_then_resume_loses_and_repeats_nothing(tmp_path):
    rng = random.Random(1234)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONUNBUFFERED="1")
    env.pop("OPENAI_API_KEY", None)
    first = ["--task", "goto", "--agent", "robust-cot", "--generations", "3", "--episodes", "3",
             "--children", "2", "--heldout-episodes", "3", "--max-steps", "6", "--concurrency", "2",
             "--baseline", "none", "--no-cache", "--run", "crash"]
    run_dir = tmp_path / "crash"
    kills = 0
    with FakeOpenAIServer(delay=0.01, reply=scripted_model_double(), max_seconds=280) as server:
        cmd = optimize_cmd(server.api_base, tmp_path, *first)
        for attempt in range(12):
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            try:
                out, _ = proc.communicate(timeout=rng.uniform(2.0, 6.0) if attempt < 4 else 240)
                assert proc.returncode == 0, out
                break
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.communicate()
                kills += 1
            # every later start resumes the same run
            cmd = optimize_cmd(server.api_base, tmp_path, "--resume", "crash")
            if (run_dir / "episodes.jsonl").exists():
                keys = read_store(run_dir)
                assert len(keys) == len(set(keys)), "an episode was stored twice"
        else:  # pragma: no cover - the loop breaks when a run completes
            pytest.fail("the run never completed")

    assert kills >= 1, "the run finished before any kill: the test did not test anything"
    keys = read_store(run_dir)
    assert keys and len(keys) == len(set(keys)), "a finished episode was re-run after a kill"
    ckpt = json.loads((run_dir / "checkpoint.json").read_text(encoding="utf-8"))
    assert ckpt["stop_reason"] and len(ckpt["generations"]) == 3
    assert all(g.get("done") for g in ckpt["generations"])
    # every candidate that has training scores has its episodes in the store
    stored = {k for k, _ in keys}
    for cand in ckpt["candidates"]:
        if cand.get("train"):
            assert cand["fingerprint"] in stored, f"candidate {cand['id']} has scores but no stored episodes"
    assert (run_dir / "report.md").exists() and (run_dir / "best.md").exists()
    assert not list(run_dir.glob("*.tmp")), "a temporary checkpoint file was left behind"
