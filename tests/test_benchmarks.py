"""benchmarks/run.py: the measuring functions work at tiny sizes (structure only, nothing timed)."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str, filename: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / filename)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _load("promptevo_bench_run", "run.py")


@pytest.fixture(scope="module")
def server(bench):
    """The fake OpenAI-compatible server (test double) in a child process, 10 ms replies."""
    srv = bench.FakeServerProcess(delay=0.01, reply=bench.SERVER_REPLY, max_seconds=60)
    srv.start()
    yield srv
    srv.stop()


def test_overhead_breakdown_is_positive(bench):
    o = bench.bench_overhead(episodes=1, reps=1, max_steps=3)
    assert o["steps_per_rep"] == 3
    for key in ("step_ms", "overhead_ms", "litellm_ms", "env_ms", "cpu_step_ms", "cache_miss_cost_ms",
                "cache_hit_step_ms"):
        assert o[key] > 0, key
    assert o["overhead_ms"] <= o["step_ms"]
    assert o["overhead_pct_of_200ms"] == pytest.approx(100 * o["overhead_ms"] / 200)
    assert o["runs"]["hit"][0]["cached_calls"] == 3  # the second pass is served from the cache


def test_env_throughput_reuses_env_benchmark(bench):
    e = bench.bench_env(steps=200, goals=("goto",))
    assert e["per_goal"][0]["steps"] == 200
    assert e["steps_per_s"] > 0 and e["steps_per_cpu_s"] > 0


def test_fake_server_binds_localhost_and_answers(server):
    assert server.api_base.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(server.api_base + "/models", timeout=5) as r:
        assert json.load(r)["data"][0]["id"] == "fake"
    req = urllib.request.Request(server.api_base + "/chat/completions", method="POST",
                                 data=json.dumps({"model": "fake", "messages": [{"role": "user", "content": "hi"}]}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        body = json.load(r)
    assert body["choices"][0]["message"]["content"] == "<|ACTION|>turn left<|END|>"
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(server.api_base + "/nothing", timeout=5)


def test_fake_server_process_stops(bench):
    srv = bench.FakeServerProcess(delay=0.0, max_seconds=30).start()
    proc = srv.proc
    srv.stop()
    assert proc is not None and proc.poll() is not None


def test_concurrency_and_cache_through_litellm(bench, server):
    c = bench.bench_concurrency(server.api_base, levels=(1, 2), episodes_per_worker=1, max_steps=2, delay_s=0.01,
                                http_calls=1)
    assert set(c["per_call_beyond_delay"]) == {"openai_client_ms", "litellm_ms", "gateway_ms"}
    assert [row["concurrency"] for row in c["levels"]] == [1, 2]
    assert c["levels"][0]["speedup"] == 1.0
    assert all(row["steps"] == 2 * row["concurrency"] and row["steps_per_s"] > 0 for row in c["levels"])
    k = bench.bench_cache(server.api_base, episodes=2, max_steps=2, concurrency=2)
    assert k["cold"]["cached_calls"] == 0
    assert k["warm"]["cached_calls"] == k["warm"]["llm_calls"] == 4
    assert k["speedup"] > 0


def test_figures_table_and_results_file(bench, tmp_path):
    res = {"env": {"steps_per_s": 30_000.0, "steps_per_cpu_s": 60_000.0, "goal_steps_per_s": 20_000},
           "local": {"skipped": "no local model installed"},
           "cache": {"episodes": 2, "speedup": 60.0, "cold": {"wall_s": 1.0}, "warm": {"wall_s": 1 / 60},
                     "warm_step_ms": 0.3}}
    rows = bench.figures(res)
    assert {r["figure"].split(".")[0] for r in rows if r["figure"][0].isdigit()} == {"2", "4", "5"}
    assert [r["passed"] for r in rows if r["figure"].startswith(("2.", "4.", "5."))] == [True, True, None]
    out = tmp_path / "results.json"
    report = bench.main(["--quick", "--skip", "overhead", "--skip", "concurrency", "--skip", "cache",
                         "--skip", "local", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["mode"] == "quick" and saved["results"]["env"]["steps_per_s"] > 0
    assert [r["figure"] for r in saved["figures"]] == [r["figure"] for r in report["figures"]]


def test_pick_local_model_strict_and_fallback(bench, monkeypatch):
    pytest.importorskip("llama_cpp")
    # a stub localmodel module (importing the real one here would leak into other tests' stubs)
    stub = types.ModuleType("promptevo.llm.local")
    stub.list_local_models = lambda include_unknown=True: [  # type: ignore[attr-defined]
        types.SimpleNamespace(model="local/smollm2-135m", installed=True),
        types.SimpleNamespace(model="local/qwen2.5-coder-1.5b", installed=False)]
    monkeypatch.setitem(sys.modules, "promptevo.llm.local", stub)
    model, note = bench.pick_local_model("local/not-a-model")
    assert model is None and "not installed" in note
    assert bench.pick_local_model("local/not-a-model", strict=False) == ("local/smollm2-135m", "")
    assert bench.pick_local_model(None, strict=False) == ("local/smollm2-135m", "")


@pytest.mark.slow
def test_local_gateway_vs_raw_smollm(bench):
    model, note = bench.pick_local_model("local/smollm2-135m")
    if model is None:
        pytest.skip(note)
    r = bench.bench_local(model, max_tokens=8, rounds=1)
    assert r["raw_tokens_per_cpu_s"] > 0 and r["gateway_tokens_per_cpu_s"] > 0 and r["same_tokens"]
    assert r["ratio_cpu"] > 0 and r["ratio_wall_best"] > 0


def test_engineer_probe_counts_valid_and_kept_proposals(tmp_path):
    """benchmarks/engineer_probe.py with the LLM test double: a reply that changes one knob is a valid,
    changed configuration; a reply with no JSON is a parse failure that keeps the current one."""
    from promptevo.llm import ScriptedLLM

    probe = _load("promptevo_bench_engineer_probe", "engineer_probe.py")
    replies = iter(['{"changes": {"rows": 6}, "rationale": "the agents time out on small maps"}', "no idea"])
    out = tmp_path / "probe.json"
    with ScriptedLLM.install(lambda messages: next(replies)):
        assert probe.main(["--tasks", "mapf-open", "--episodes", "2", "--calls", "2", "--model", "fake/scripted",
                           "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["calls"] == 2 and d["valid_and_changed"] == 1 and d["parse_failed"] == 1
    assert d["rows"][0]["changes"] == {"rows": [4, 6]} and d["knobs_changed"] == {"rows": 1}


def test_more_test_seeds_joins_and_pairs_with_the_initial(tmp_path):
    """benchmarks/more_test_seeds.py on a finished run (test double): the best's added test seeds follow the
    run's own, the initial is played on the seeds no run covers, and the paired test counts them all."""
    import promptevo
    from promptevo.llm import ScriptedLLM

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_api import _toytext_llm

    more = _load("promptevo_bench_more_test_seeds", "more_test_seeds.py")
    with ScriptedLLM.install(_toytext_llm):
        promptevo.optimize(task="frozenlake", agent="two-stage", model="fake/scripted", generations=1, children=1,
                           episodes=8, evidence_episodes=4, validation_episodes=12, test_episodes=3, baseline=None,
                           results_dir=str(tmp_path), run="fl", quiet=True, agent_options={"recent_actions": 8},
                           no_cache=True, operators=["mutate"], screen="off")
        assert more.main(["--run", str(tmp_path / "fl"), "--episodes", "2", "--out", str(tmp_path / "fl-more")]) == 0
    s = json.loads((tmp_path / "fl-more" / "summary.json").read_text())
    assert s["own_test_seeds"] == 3 and s["added_test_seeds"] == 2
    assert s["best_row"]["n"] == 5 and s["best_row"]["successes"] == 5
    assert s["initial_row"]["n"] == 5 and s["initial_from"]["played_here"] == 2
    assert s["paired"]["n"] == 5 and s["paired"]["wins"] == 5 and s["compliance"] is None
