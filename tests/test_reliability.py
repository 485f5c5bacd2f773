"""Reliability: fault injection through the gateway, config validation, secrets, determinism, fuzzing.

Every LLM here is the ``fake/scripted`` test double (:class:`promptevo.llm.ScriptedLLM`) driven by a
scripted responder, or a remote model pointed at a closed local port; nothing leaves the machine.
The gateway's retry backoff is patched to zero so retried faults cost no wall time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import litellm
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import promptevo.llm.gateway as llm_mod
from promptevo.agents import (
    FALLBACK_ACTION,
    make_agent,
    match_action,
    parse_plain_action,
    parse_tagged_action,
)
from promptevo.cli.app import app
from doubles import FakeSeedEnv
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM, ScriptedReply, redact, redact_url
from promptevo.evaluation.store import RunWriter, read_episodes
from promptevo.evaluation.rollout import (
    CLIP_MARKER,
    MAX_STORED_TEXT_CHARS,
    evaluate,
)
from promptevo.segments import Prompt, PromptSet, Segment
from promptevo.tasks import TaskConfig

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
PROMPTS = PromptSet.of({"system": Prompt((Segment("role", "Play. {mission}"), Segment("format", "Tag it.")))})
TASK = TaskConfig(name="fake", family="babyai", env={"goal": "goto"})
SEED_RE = re.compile(r"seed (\d+) step (\d+)")


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch):
    monkeypatch.setattr(llm_mod, "_backoff", lambda cfg, i: 0.0)


class FaultEnv(FakeSeedEnv):
    """Test double: FakeSeedEnv with a 4-step limit."""

    def __init__(self, max_steps: int = 4):
        super().__init__(max_steps)


def _err(cls: type, msg: str) -> Exception:
    return cls(message=msg, model="scripted", llm_provider="fake")


class FaultScript:
    """Scripted responder (test double): the fault depends on the seed and step in the newest message
    and on how many times that (seed, step) was asked already (so retries can recover)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempts: dict[tuple[int, int], int] = {}
        self.injected: dict[str, int] = {}

    def _count(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1

    def __call__(self, messages: list[dict]) -> Any:
        m = SEED_RE.findall(str(messages[-1]["content"]))
        seed, step = (int(m[-1][0]), int(m[-1][1])) if m else (-1, -1)
        with self.lock:
            n = self.attempts[(seed, step)] = self.attempts.get((seed, step), 0) + 1
            ok = "I wait.<|ACTION|>wait<|END|>"
            if seed == 0 and n == 1:  # rate limited once per step, then fine
                self._count("rate_limit")
                return _err(litellm.RateLimitError, "429 slow down")
            if seed == 1 and n <= 2:  # two 5xx per step, then fine
                self._count("server_5xx")
                return _err(litellm.InternalServerError, "503 upstream overloaded")
            if seed == 2 and step == 2:  # times out on every attempt: the episode is marked failed
                self._count("timeout")
                return _err(litellm.Timeout, "request timed out")
            if seed == 3:  # always empty: fallback action after retries
                self._count("empty")
                return ""
            if seed == 4:  # 100k characters, the action at the very end
                self._count("huge_reply")
                return "x" * 100_000 + "<|ACTION|>wait<|END|>"
            if seed == 5:  # wrong format
                self._count("wrong_format")
                return "I would like to win now!"
            if seed == 6:  # raw non-UTF-8 bytes as content
                self._count("non_utf8")
                return ScriptedReply(b"\xff\xfe\xc3(<|ACTION|>wait<|END|>")  # type: ignore[arg-type]
            if seed == 7:  # lone surrogates and control characters
                self._count("surrogates_control")
                return "\ud800\x00\x1b[2J\x07<|ACTION|>wait<|END|>\udfff\x7f"
            if seed == 8:  # a 5xx whose body has a lone surrogate, every attempt: episode failed
                self._count("server_5xx_bad_body")
                return _err(litellm.InternalServerError, "boom \udcff body")
            return ok


def _gateway(tmp_path: Path | None = None, **kw: Any) -> Gateway:
    cfg = dict(model="fake/scripted", cache_dir=None, num_retries=3, max_tokens=200_000)
    cfg.update(kw)
    return Gateway(LLMConfig(**cfg))


FAULT_SEEDS = list(range(10))  # seed 9 has no fault (control)


def test_fault_injection_through_evaluate(tmp_path: Path):
    script = FaultScript()
    gw = _gateway()
    writer = RunWriter(tmp_path / "run")
    with ScriptedLLM.install(script):
        results, summary = evaluate(TASK, lambda: make_agent("robust-cot", gw, PROMPTS), FAULT_SEEDS, concurrency=4,
                                    writer=writer, env_factory=lambda _t: FaultEnv(), gateway=gw)
    by_seed = {r.seed: r for r in results}
    # no finished episode lost: every seed is in the results and in episodes.jsonl, readable
    stored = read_episodes(tmp_path / "run" / "episodes.jsonl")
    assert sorted(r.seed for r in stored) == FAULT_SEEDS
    assert len((tmp_path / "run" / "episodes.jsonl").read_text(encoding="utf-8").splitlines()) == len(FAULT_SEEDS)
    # retried faults are invisible to the episode
    for s in (0, 1, 9):
        assert by_seed[s].error is None and by_seed[s].steps == 4 and by_seed[s].parse_failures == 0
    # exhausted retries: that episode (only) is marked failed, with its finished steps kept
    assert by_seed[2].error and by_seed[2].error.startswith("LLMError") and "Timeout" in by_seed[2].error
    assert by_seed[2].steps == 2
    assert by_seed[8].error and "InternalServerError" in by_seed[8].error and "\udcff" not in by_seed[8].error
    # every reply empty (a server that returns nothing) -> fallback actions, counted, and the episode is an
    # infrastructure failure: not scored
    assert by_seed[3].error.startswith("LLMReplyError: all 4 replies") and by_seed[3].parse_failures == 4
    assert by_seed[3].faults["empty_replies"] == 4
    assert all(st_["action"] == FALLBACK_ACTION for st_ in by_seed[3].trajectory)
    # wrong format -> fallback, invalid action, parse failure
    assert by_seed[5].parse_failures == 4 and by_seed[5].invalid_actions == 4
    # 100k reply: the agent read it (action parsed), the stored copy is clipped and records the length
    huge = by_seed[4]
    assert huge.parse_failures == 0 and huge.faults["clipped_texts"] >= 4
    for step in huge.trajectory:
        assert len(step["reply"]) == MAX_STORED_TEXT_CHARS + len(CLIP_MARKER)
        assert step["reply_chars"] == 100_000 + len("<|ACTION|>wait<|END|>")
        assert step["calls"][0]["reply_chars"] == step["reply_chars"]
    # only the parsed action enters the history, so no stored line grows with the huge replies
    line_sizes = [len(x) for x in (tmp_path / "run" / "episodes.jsonl").read_bytes().splitlines()]
    assert max(line_sizes) < 60_000
    # bad bytes / surrogates / control characters: parsed, and stored as valid UTF-8 JSON
    for s in (6, 7):
        assert by_seed[s].error is None and by_seed[s].parse_failures == 0, by_seed[s].trajectory[0]["reply"]
    raw = (tmp_path / "run" / "episodes.jsonl").read_bytes()
    raw.decode("utf-8")  # strict: must not raise
    # counts in summary.json
    faults = json.loads((tmp_path / "run" / "summary.json").read_text())["faults"]
    assert faults["episodes"] == 10 and faults["episodes_errored"] == 3
    assert faults["episode_errors_by_kind"] == {"LLMError": 2, "LLMReplyError": 1}
    assert faults["parse_failures"] == sum(r.parse_failures for r in results) >= 8
    assert faults["invalid_actions"] == sum(r.invalid_actions for r in results)
    assert faults["empty_replies"] == 4 and faults["clipped_texts"] >= 4
    rk, ek = faults["llm_retries_by_kind"], faults["llm_errors_by_kind"]
    assert rk["RateLimitError"] == 4 and rk["InternalServerError"] >= 8 + 3 and rk["Timeout"] == 3
    assert rk["empty_reply"] == 4 * 3 and ek == {"InternalServerError": 1, "Timeout": 1, "empty_reply": 4}
    assert faults["llm_retries"] == sum(rk.values()) and faults["llm_errors"] == sum(ek.values())
    assert summary["errors"] == 3
    _FAULT_LEDGER.update(injected=sum(script.injected.values()), kinds=len(script.injected),
                         survived=sum(1 for r in results if r.error is None),
                         lost=len(FAULT_SEEDS) - len(stored))


_FAULT_LEDGER: dict[str, int] = {}


def test_fault_injection_two_stage_description_is_clipped(tmp_path: Path):
    """Two-stage agent: a 100k-char *description* is clipped in every stored place (step and messages)."""
    ps = PromptSet.of({"descriptor": Prompt((Segment("role", "Describe. {mission}"),)),
                       "actor": Prompt((Segment("role", "Act. {mission}"),))})

    def responder(messages):
        if messages[0]["content"].startswith("Describe"):
            return "d" * 100_000
        return "<|ACTION|>win<|END|>"

    gw = _gateway()
    writer = RunWriter(tmp_path / "r2")
    with ScriptedLLM.install(responder):
        results, _ = evaluate(TASK, lambda: make_agent("two-stage", gw, ps), [0, 1], concurrency=2, writer=writer,
                              env_factory=lambda _t: FaultEnv(), gateway=gw, keep_messages="all")
    assert all(r.success and r.error is None for r in results)
    step = results[0].trajectory[0]
    assert step["description_chars"] == 100_000 and len(step["description"]) <= MAX_STORED_TEXT_CHARS + 20
    actor_msgs = step["calls"][1]["messages"]
    assert any(m.get("content_chars", 0) > 100_000 for m in actor_msgs)
    assert max(len(x) for x in (tmp_path / "r2" / "episodes.jsonl").read_bytes().splitlines()) < 60_000


def _write_tasks_dir(d: Path, **extra: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "tiny.toml").write_text('family = "babyai"\nmax_steps = 3\nepisodes = 2\n[env]\ngoal = "goto"\n')
    for name, body in extra.items():
        (d / f"{name}.toml").write_text(body)
    return d


def test_fault_injection_through_cli_eval(tmp_path: Path, monkeypatch):
    """`promptevo eval` on a real BabyAI task: rate limits, 5xx, timeouts, empty, huge and garbage replies."""
    monkeypatch.setenv("PROMPTEVO_TASKS_DIR", str(_write_tasks_dir(tmp_path / "tasks")))
    lock = threading.Lock()
    calls = {"n": 0}
    faults = [
        _err(litellm.RateLimitError, "429"), _err(litellm.InternalServerError, "500"),
        _err(litellm.Timeout, "timeout"), "", "y" * 100_000, "wrong format!",
        ScriptedReply(b"\xff<|ACTION|>turn left<|END|>"), "\ud800\x00<|ACTION|>turn left<|END|>",  # type: ignore[arg-type]
    ]

    def responder(messages):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        return faults[(n // 2) % len(faults)] if n % 2 else "<|ACTION|>turn left<|END|>"

    with ScriptedLLM.install(responder):
        r = runner.invoke(app, ["eval", "--agent", "robust-cot", "--task", "tiny", "-n", "6", "--model",
                                "fake/scripted", "--no-cache", "--max-tokens", "100000", "--results-dir",
                                str(tmp_path), "--run-name", "cli", "--seeds", "train", "-j", "3"],
                          env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    run = tmp_path / "cli"
    eps = [json.loads(x) for x in (run / "episodes.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted(e["seed"] for e in eps) == list(range(6))
    summary = json.loads((run / "summary.json").read_text())
    f = summary["faults"]
    assert summary["complete"] and f["episodes"] == 6 and f["llm_retries"] > 0
    assert set(f["llm_retries_by_kind"]) >= {"RateLimitError", "InternalServerError", "Timeout", "empty_reply"}
    assert f["parse_failures"] >= 1 and f["clipped_texts"] >= 1
    assert summary["usage"]["total"]["retries"] == f["llm_retries"]


# -- 2. configuration validation ----------------------------------------------------------------------
def _cli(*args: str, env: dict | None = None, code: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})}
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "promptevo", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120)


def _main(capfd, monkeypatch, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``promptevo.cli.app`` in-process (fast); stdout/stderr captured at the file-descriptor level."""
    from promptevo.cli.app import main

    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(sys, "argv", ["promptevo", *args])
    capfd.readouterr()
    with pytest.raises(SystemExit) as ex:
        main()
    out = capfd.readouterr()
    return subprocess.CompletedProcess(args, ex.value.code, out.out, out.err)


def _one_line_exit_2(r: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


BAD_TASKS = {
    "unknown_key": ('family = "babyai"\ncolour = "red"\n[env]\ngoal = "goto"\n', ["unknown key 'colour'"]),
    "wrong_type": ('family = "babyai"\nepisodes = "ten"\n[env]\ngoal = "goto"\n', ["field episodes", "'ten'"]),
    "out_of_range": ('family = "babyai"\nmax_steps = 0\n[env]\ngoal = "goto"\n', ["field max_steps", "greater than"]),
    "bad_seeds": ('family = "babyai"\ntrain_seeds = { start = -5, count = 3 }\n[env]\ngoal = "goto"\n',
                  ["field train_seeds.start"]),
    "bad_family": ('family = "chess"\n', ["field family", "unknown env family 'chess'"]),
    "bad_goal": ('family = "babyai"\n[env]\ngoal = "fly"\n', ["field env", "goal must be one of"]),
    "bad_preset": ('family = "mapf"\n[env]\npreset = "nope"\n', ["field env", "unknown MAPF preset"]),
    "bad_preset_values": ('family = "mapf"\n[env]\npreset = "broken"\n', ["field env", "hole_density"]),
    "overlap": ('family = "babyai"\ntrain_seeds = [1, 2]\nvalidation_seeds = [2, 3]\n[env]\ngoal = "goto"\n',
                ["train_seeds and validation_seeds overlap"]),
    "not_toml": ('family = "babyai\n', ["invalid TOML"]),
}


def test_bad_task_files_one_line_exit_2(tmp_path: Path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default LLM cache (.cache/) goes under tmp_path
    bodies = {k: v[0] for k, v in BAD_TASKS.items()}
    d = _write_tasks_dir(tmp_path / "tasks", **bodies)
    (d / "mapf").mkdir()
    (d / "mapf" / "broken.toml").write_text("rows = 4\ncols = 4\nhole_density = 2.5\n")
    env = {"PROMPTEVO_TASKS_DIR": str(d)}
    for i, (name, (_body, needles)) in enumerate(BAD_TASKS.items()):
        args = ("eval", "--task", name, "--model", "fake/scripted", "--results-dir", str(tmp_path / "res"))
        # the first two through a real subprocess (tracebacks would show there), the rest in-process
        r = _cli(*args, env=env) if i < 2 else _main(capfd, monkeypatch, *args, env=env)
        _one_line_exit_2(r, f"{name}.toml", *needles)
    assert not (tmp_path / "res").exists()  # nothing written for a bad task
    r = _main(capfd, monkeypatch, "tasks", env=env)  # listing also reports the first bad file in one line
    _one_line_exit_2(r, ".toml")


BAD_FLAGS = [
    (["-n", "-3"], ["--episodes"]),
    (["-n", "ten"], ["--episodes"]),
    (["--concurrency", "0"], ["--concurrency must be >= 1"]),
    (["--temperature", "-1"], ["--temperature must be between 0 and 2"]),
    (["--temperature", "nan"], ["--temperature"]),
    (["--max-tokens", "0"], ["--max-tokens must be >= 1"]),
    (["--history", "0"], ["--history must be >= 1"]),
    (["--seed-offset", "-1"], ["--seed-offset"]),
    (["--seeds", "holdout"], ["--seeds must be train, validation or test"]),
    (["--seeds", "heldout"], ["--seeds heldout was renamed"]),
    (["--init", "fancy"], ["--init must be one of compact, guided, plain"]),
    (["--agent", "genius"], ["unknown agent 'genius'"]),
    (["--bogus-flag"], ["No such option: --bogus-flag"]),
]


def test_bad_cli_flags_one_line_exit_2(tmp_path: Path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default LLM cache (.cache/) goes under tmp_path
    d = _write_tasks_dir(tmp_path / "tasks")
    env = {"PROMPTEVO_TASKS_DIR": str(d)}
    for i, (flags, needles) in enumerate(BAD_FLAGS):
        args = ("eval", "--task", "tiny", "--model", "fake/scripted", "--results-dir", str(tmp_path / "res"), *flags)
        r = _cli(*args, env=env) if i == 0 else _main(capfd, monkeypatch, *args, env=env)
        _one_line_exit_2(r, *needles)
    _one_line_exit_2(_main(capfd, monkeypatch, "eval", "--task", "nope", env=env), "unknown task 'nope'", "tiny")
    assert not (tmp_path / "res").exists()


def test_bad_prompts_files_one_line_exit_2(tmp_path: Path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default LLM cache (.cache/) goes under tmp_path
    d = _write_tasks_dir(tmp_path / "tasks")
    env = {"PROMPTEVO_TASKS_DIR": str(d)}
    bad_json = tmp_path / "p.json"
    bad_json.write_text("{not json")
    list_json = tmp_path / "l.json"
    list_json.write_text("[1, 2, 3]")
    binary = tmp_path / "b.md"
    binary.write_bytes(b"\xff\xfe\x00garbage\x80")
    empty = tmp_path / "e.md"
    empty.write_text("")
    cases = [(tmp_path / "missing.md", "prompt file not found"), (tmp_path, "is a folder"),
             (bad_json, "invalid JSON"), (list_json, "l.json"), (binary, "not UTF-8"), (empty, "e.md: no '# module'")]
    for path, needle in cases:
        r = _main(capfd, monkeypatch, "eval", "--task", "tiny", "--model", "fake/scripted", "--prompts", str(path),
                  "--results-dir", str(tmp_path / "res"), env=env)
        _one_line_exit_2(r, needle)
    assert not (tmp_path / "res").exists()


# -- 3. secrets -----------------------------------------------------------------------------------------
SECRET_KEY = "sk-test-SECRET123"
SECRET_PASS = "hunter2pass"
API_BASE = f"http://alice:{SECRET_PASS}@127.0.0.1:9/v1"

# Runs the CLI in a subprocess with the retry backoff set to zero (a test-only patch of the gateway).
_RUN_CLI_NO_BACKOFF = (
    "import sys, promptevo.llm as L; L._backoff = lambda c, i: 0.0\n"
    "from promptevo.cli.app import main; sys.argv = ['promptevo', *sys.argv[1:]]; main()\n"
)


def _grep_tree(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            hits += [f"{p}: {n}" for n in needles if n.encode() in data]
    return hits


def test_secrets_never_written(tmp_path: Path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default LLM cache (.cache/) goes under tmp_path
    d = _write_tasks_dir(tmp_path / "tasks")
    cache = tmp_path / "cache"
    env = {"PROMPTEVO_TASKS_DIR": str(d), "OPENAI_API_KEY": SECRET_KEY}
    # (a) a remote model behind a closed port: connection errors are retried, then written as episode errors
    r1 = _cli("eval", "--task", "tiny", "-n", "1", "--model", "openai/gpt-4o-mini", "--api-base", API_BASE,
              "--results-dir", str(tmp_path / "res"), "--run-name", "remote", env=env, code=_RUN_CLI_NO_BACKOFF,
              cwd=tmp_path)
    assert r1.returncode == 3, r1.stderr  # every episode failed: not a result, exit 3
    # (b) the scripted model echoing the request's key and URL in a server error (a leaky provider), in-process
    def leak(messages, params):
        if len(messages) > 2:  # from the second step on
            return litellm.InternalServerError(message=f"bad key {SECRET_KEY} for {params.get('api_base')}",
                                               model="x", llm_provider="fake")
        return "<|ACTION|>turn left<|END|>"

    with ScriptedLLM.install(leak):
        r2 = _main(capfd, monkeypatch, "eval", "--task", "tiny", "-n", "2", "--model", "fake/scripted",
                   "--api-base", API_BASE, "--results-dir", str(tmp_path / "res"), "--run-name", "scripted",
                   "--seeds", "train", env=env)
    assert r2.returncode == 3, r2.stderr  # all episodes ended on LLM errors: not a result
    eps = [json.loads(x)["result"] for x in (tmp_path / "res" / "scripted" / "episodes.jsonl").read_text().splitlines()]
    assert all(e["error"] and "InternalServerError" in e["error"] and "***" in e["error"] for e in eps)
    # (c) the response cache of a scripted run with the same credentials
    with ScriptedLLM.install(lambda m: "<|ACTION|>turn left<|END|>"):
        gw = Gateway(LLMConfig(model="fake/scripted", api_base=API_BASE, api_key=SECRET_KEY, cache_dir=str(cache)))
        gw.complete([{"role": "user", "content": "hi"}])
        assert SECRET_PASS not in repr(gw) and SECRET_KEY not in repr(gw.config)
        gw.close()
    config = json.loads((tmp_path / "res" / "remote" / "config.json").read_text())
    assert config["llm"]["api_base"] == "http://***@127.0.0.1:9/v1"
    remote_eps = (tmp_path / "res" / "remote" / "episodes.jsonl").read_text()
    assert "APIConnectionError" in remote_eps or "Connection" in remote_eps
    assert (tmp_path / ".cache" / "promptevo-llm").is_dir()  # the CLI runs' default cache
    leaks = _grep_tree(tmp_path, [SECRET_KEY, SECRET_PASS])  # run dirs, both caches, everything written
    assert not leaks, leaks
    for out in (r1.stdout, r1.stderr, r2.stdout, r2.stderr):
        assert SECRET_KEY not in out and SECRET_PASS not in out


def test_redaction_helpers():
    assert redact_url("https://u:p@host:1/v1?api_key=abc&x=1") == "https://***@host:1/v1?api_key=***&x=1"
    assert redact_url(None) is None and redact_url("http://localhost:8000/v1") == "http://localhost:8000/v1"
    os.environ["PROMPTEVO_TEST_API_KEY"] = "zz-secret-value"
    try:
        assert redact("error: key zz-secret-value rejected") == "error: key *** rejected"
    finally:
        del os.environ["PROMPTEVO_TEST_API_KEY"]
    assert LLMConfig(model="fake/scripted", api_base=API_BASE).public_dict()["api_base"] == "http://***@127.0.0.1:9/v1"


# -- 4. determinism -------------------------------------------------------------------------------------
TIMING_KEYS = re.compile(r"latency|wall|timestamp|_at$")


def _mask(obj: Any, extra: tuple[str, ...] = ()) -> Any:
    if isinstance(obj, dict) and "sum" in obj and "result" in obj:  # a store line's digest covers the timings
        obj = {k: v for k, v in obj.items() if k != "sum"}
    if isinstance(obj, dict):
        return {k: _mask(v, extra) for k, v in obj.items() if not TIMING_KEYS.search(k) and k not in extra}
    if isinstance(obj, list):
        return [_mask(v, extra) for v in obj]
    return obj


def _deterministic_responder(messages: list[dict]) -> str:
    """Temperature-0 stand-in: the reply is a pure function of the prompt."""
    h = sum(ord(c) for c in json.dumps(messages)) % 3
    return ["I turn.<|ACTION|>turn left<|END|>", "Go.<|ACTION|>go forward<|END|>", "hmm"][h]


def _run(tmp: Path, name: str, cache: Path, seeds: list[int], concurrency: int) -> Path:
    task = TaskConfig(name="goto3", family="babyai", env={"goal": "goto"}, max_steps=4)
    gw = Gateway(LLMConfig(model="fake/scripted", cache_dir=str(cache), temperature=0.0))
    writer = RunWriter(tmp / name)
    with ScriptedLLM.install(_deterministic_responder):
        evaluate(task, lambda: make_agent("robust-cot", gw, PROMPTS), seeds, concurrency=concurrency, writer=writer)
    gw.close()
    return tmp / name / "episodes.jsonl"


def test_same_seeds_same_prompts_same_episodes(tmp_path: Path):
    """Byte-identical episodes.jsonl across runs, after dropping the inherently timing fields (keys matching
    latency / wall / timestamp / *_at: ``wall_s``, ``latency_s``). Episodes are appended as they finish, so
    line order is only fixed with concurrency 1; with concurrency > 1 the lines are compared sorted by seed.
    A run answered from a warm cache differs only in ``cached`` / ``cached_calls`` (also masked there)."""
    seeds = [0, 1, 2]
    a = _run(tmp_path, "a", tmp_path / "cache-a", seeds, 1)
    b = _run(tmp_path, "b", tmp_path / "cache-b", seeds, 1)

    def canon(path: Path, extra: tuple[str, ...] = ()) -> bytes:
        rows = [_mask(json.loads(x), extra) for x in path.read_text(encoding="utf-8").splitlines()]
        return "\n".join(json.dumps(r, sort_keys=False, ensure_ascii=False) for r in rows).encode()

    assert canon(a) == canon(b)
    raw_a, raw_b = a.read_bytes(), b.read_bytes()
    assert len(raw_a.splitlines()) == len(raw_b.splitlines()) == 3
    # parallel run: same episodes (sorted by seed)
    c = _run(tmp_path, "c", tmp_path / "cache-c", seeds, 3)
    by_seed = lambda p: sorted(p.read_text().splitlines(), key=lambda x: json.loads(x)["seed"])  # noqa: E731
    assert [json.dumps(_mask(json.loads(x))) for x in by_seed(c)] == [json.dumps(_mask(json.loads(x))) for x in by_seed(a)]
    # warm cache: identical apart from the cache flags
    w = _run(tmp_path, "w", tmp_path / "cache-a", seeds, 1)
    assert canon(w, ("cached", "cached_calls")) == canon(a, ("cached", "cached_calls"))
    assert all(json.loads(x)["result"]["cached_calls"] > 0 for x in w.read_text().splitlines())


# -- 5. fuzzing -------------------------------------------------------------------------------------------
# max_examples per fuzz test ("parsers" is used by two tests: the parsers and the tag finder)
FUZZ = {"parsers": 400, "joint": 300, "babyai_describe": 300, "babyai_env": 40, "mapf_render": 150}
_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=300)
_actiony = st.lists(st.sampled_from(["<|ACTION|>", "<|END|>", "turn left", "go forward", "pick up", "agent 1:",
                                     "agent 2:", "up", "west", "stay", "\n", " ", "**", "`", "'", ".", ",", "1:",
                                     "\x00", "\ud800", "é", "🚀"]), max_size=12).map("".join)
_reply = st.one_of(_text, _actiony, st.tuples(_text, _actiony, _text).map("".join))


class _SpaceEnv(FaultEnv):
    valid_actions = property(lambda self: ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"])  # type: ignore[assignment]


@settings(max_examples=FUZZ["parsers"], deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(reply=_reply)
def test_fuzz_action_parsers(reply):
    space = _SpaceEnv().action_space()
    for parse in (parse_tagged_action, parse_plain_action):
        action, ok = parse(reply, space)
        assert isinstance(action, str) and (action in space.valid if ok else action == FALLBACK_ACTION)
    m = match_action(reply, space.valid)
    assert m is None or m in space.valid


@settings(max_examples=FUZZ["parsers"], deadline=None, database=None, derandomize=True)
@given(reply=_reply)
def test_fuzz_tag_finder_matches_the_regex(reply):
    from promptevo.agents import ACTION_RE, first_action_block

    m = ACTION_RE.search(reply)
    assert first_action_block(reply) == (m.group(1) if m else None)


def test_degenerate_long_replies_parse_fast():
    """Replies of ~100k characters built to make backtracking parsers slow are parsed in well under a second."""
    import time

    from promptevo.envs.mapf.env import parse_joint_action

    space = _SpaceEnv().action_space()
    for reply in ("<|ACTION|>" * 10_000, "<|ACTION|>" + "x" * 100_000, "agent 1 " * 12_000, "1: " * 30_000,
                  " " * 100_000 + "turn left", "up, " * 25_000, "*" * 100_000):
        t0 = time.perf_counter()
        parse_tagged_action(reply, space)
        parse_plain_action(reply, space)
        parse_joint_action(reply, 3)
        assert time.perf_counter() - t0 < 1.0, reply[:30]


@settings(max_examples=FUZZ["joint"], deadline=None, database=None, derandomize=True)
@given(reply=_reply, n=st.integers(1, 9))
def test_fuzz_joint_action_parser(reply, n):
    from promptevo.envs.mapf.env import MOVES, parse_joint_action

    p = parse_joint_action(reply, n)
    assert p.moves is None or (len(p.moves) == n and all(m in MOVES for m in p.moves))
    assert parse_joint_action(None, n).moves is None  # type: ignore[arg-type]


_cell = st.tuples(st.integers(0, 10), st.integers(0, 5), st.integers(0, 2))


@settings(max_examples=FUZZ["babyai_describe"], deadline=None, database=None, derandomize=True)
@given(cells=st.lists(_cell, min_size=49, max_size=49), carry=st.sampled_from([None, "key", "ball", "box"]))
def test_fuzz_babyai_describe(cells, carry):
    from types import SimpleNamespace

    from promptevo.envs.babyai.env import describe

    image = np.array(cells, dtype=np.uint8).reshape(7, 7, 3)
    carrying = None if carry is None else SimpleNamespace(color="red", type=carry)
    lines = describe(image, carrying)
    assert all(isinstance(x, str) and x for x in lines)


@settings(max_examples=FUZZ["babyai_env"], deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(goal=st.sampled_from(["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"]), seed=st.integers(0, 10**6),
       actions=st.lists(st.one_of(st.sampled_from(["turn left", "turn right", "go forward", "pick up", "drop",
                                                   "toggle"]), _text), max_size=12))
def test_fuzz_babyai_env_positions(goal, seed, actions):
    """Random levels and random walks (random agent positions/carrying) render without an exception."""
    from promptevo.envs.babyai.env import BabyAITextEnv

    env = BabyAITextEnv(goal)
    obs, _ = env.reset(seed)
    assert isinstance(obs, str)
    for a in actions:
        res = env.step(a)
        assert isinstance(res.observation, str)
        if res.done:
            break
    env.close()


@st.composite
def _mapf_state(draw):
    from promptevo.envs.mapf.env import MAPFConfig, MAPFInstance

    rows, cols = draw(st.integers(2, 12)), draw(st.integers(2, 12))
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    n = draw(st.integers(1, min(9, len(cells) // 2)))
    order = draw(st.permutations(cells))
    starts, goals, rest = order[:n], order[n:2 * n], order[2 * n:]
    holes = frozenset(draw(st.lists(st.sampled_from(rest), max_size=len(rest), unique=True))) if rest else frozenset()
    walls = frozenset(c for c in rest if c not in holes and draw(st.booleans()))
    cfg = MAPFConfig(rows=rows, cols=cols, n_agents=n, hole_density=0.0, wall_density=0.0,
                     goal_assignment=draw(st.sampled_from(["own", "any"])),
                     observation=draw(st.sampled_from(["full", "local"])), view_radius=draw(st.integers(1, 4)),
                     slip_prob=draw(st.sampled_from([0.0, 0.3])), max_steps=draw(st.integers(1, 20)))
    inst = MAPFInstance(rows=rows, cols=cols, holes=holes, walls=walls, starts=tuple(starts), goals=tuple(goals))
    moves = draw(st.lists(st.one_of(_actiony, _text), max_size=8))
    return cfg, inst, moves, draw(st.integers(0, 1000))


@settings(max_examples=FUZZ["mapf_render"], deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(state=_mapf_state())
def test_fuzz_mapf_render(state):
    from promptevo.envs.mapf.env import MAPFFrozenLakeEnv

    cfg, inst, moves, seed = state
    env = MAPFFrozenLakeEnv(cfg)
    obs, info = env.load_instance(inst, seed)
    assert isinstance(obs, str) and env.render() == obs
    for mv in moves:
        res = env.step(mv)
        assert isinstance(res.observation, str) and 0.0 <= env.progression <= 1.0
        if res.done:
            break
    assert isinstance(env.instructions(), str) and isinstance(env.episode_stats(), dict)


def test_zz_report_counts(capsys):
    """Prints the reliability ledger (faults injected / survived / lost, fuzz cases) for the record."""
    with capsys.disabled():
        total = sum(FUZZ.values()) + FUZZ["parsers"]
        print(f"\nreliability: faults={_FAULT_LEDGER} fuzz max_examples={FUZZ} total={total}")
    assert sum(FUZZ.values()) >= 1000


#: arguments that satisfy each command's required ones, so that the wrong option is the only error
_REQUIRED = {"compare": ["--task", "goto"], "export": ["some-run"], "report": ["some-run"]}


def test_every_command_refuses_a_wrong_option_in_one_line(tmp_path: Path, capfd, monkeypatch):
    """Every command of the one entry point (typer's and the argparse ones in cli/): an unknown option and
    a value of the wrong type are one line naming the option, exit code 2, no traceback, nothing written."""
    from promptevo.cli.app import app

    monkeypatch.chdir(tmp_path)
    names = sorted(c.name for c in app.registered_commands)
    assert {"eval", "models", "tasks", "optimize", "curriculum", "compare", "export", "report"} <= set(names)
    for i, name in enumerate(names):
        args = (name, *_REQUIRED.get(name, []), "--no-such-option")
        r = _cli(*args, cwd=tmp_path) if i < 2 else _main(capfd, monkeypatch, *args)
        _one_line_exit_2(r, "--no-such-option", f"promptevo {name} --help")
    for name, flag in (("optimize", "--generations"), ("curriculum", "--episodes"), ("compare", "--budget-calls"),
                       ("eval", "--episodes")):
        r = _main(capfd, monkeypatch, name, *_REQUIRED.get(name, []), flag, "many")
        _one_line_exit_2(r, flag)
    assert list(tmp_path.iterdir()) == [] or not (tmp_path / "results").exists()
