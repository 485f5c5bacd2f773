"""Scale-out on Ray: episodes played as Ray tasks equal the local thread pool's, usage is absorbed,
configuration errors come back as themselves, the agent spec is picklable and holds no API key.

The Ray tests share one local Ray instance (2 CPUs, no dashboard) and skip when ``ray`` is not
installed (``pip install 'promptevo[ray]'``). The LLM is the ScriptedLLM test double; its responder
reaches the Ray workers through ``AgentSpec.setup`` (a function defined inside the test, so it is
shipped by value).
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from promptevo.evaluation import scaleout
from promptevo.llm import Gateway, LLMConfig, LLMConfigError
from promptevo.evaluation.rollout import EpisodeResult, run_episodes
from promptevo.evaluation.scaleout import AgentSpec, absorb_usage, run_episodes_ray, use_ray
from promptevo.segments import PromptSet
from promptevo.tasks import load_task

FAKE = LLMConfig(model="fake/scripted", cache_dir=None, max_tokens=64)
SEEDS = [0, 1, 2, 3]


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(autouse=True)
def _clean_process_state():
    scaleout.reset_process_state()
    yield
    scaleout.reset_process_state()  # no responder or gateway left behind for other tests


def scripted_setup():
    """A worker setup installing a deterministic responder (defined here, in a function, so that
    cloudpickle ships it by value: the workers cannot import this test module)."""

    def setup() -> None:
        import hashlib

        from promptevo.llm import ScriptedLLM
        from promptevo.evaluation.scaleout import keep_entered

        moves = ["go forward", "turn left", "go forward", "turn right", "up", "left", "down", "right"]

        def responder(messages: list[dict]) -> str:
            h = hashlib.sha256(messages[-1]["content"].encode()).digest()[0]
            return f"Thinking about step {h}.\n<|ACTION|>{moves[h % len(moves)]}<|END|>"

        keep_entered(ScriptedLLM.install(responder))

    return setup


def strip_timing(x: Any) -> Any:
    """``x`` without the wall-clock fields (wall_s, latency_s) and a store line's digest of them, recursively."""
    if isinstance(x, dict):
        return {k: strip_timing(v) for k, v in x.items() if k not in ("wall_s", "latency_s", "sum")}
    if isinstance(x, list):
        return [strip_timing(v) for v in x]
    return x


def usage_rows(snapshot: dict) -> dict:
    return {role: strip_timing(row) for role, row in snapshot["by_role"].items()}


# -- no Ray needed ----------------------------------------------------------------------------------
def test_spec_pickles_and_holds_no_api_key():
    gw = Gateway(LLMConfig(model="fake/scripted", api_key="sk-very-secret-123", cache_dir=None))
    task = load_task("goto")
    spec = AgentSpec.create("robust-cot", llm=gw, task=task, history=4)
    blob = pickle.dumps(spec)
    assert b"sk-very-secret" not in blob and "api_key" not in spec.llm
    back = pickle.loads(blob)
    assert back == spec and back.task_config() == task and back.llm_config().model == "fake/scripted"
    assert back.llm_config().api_key is None and back.agent_kwargs == {"history": 4}
    ps = PromptSet.load(Path(__file__).resolve().parents[1] / "prompts" / "baselines" / "naive.md")
    with_prompts = AgentSpec.create("naive", llm=FAKE, prompts=ps)
    assert pickle.loads(pickle.dumps(with_prompts)).prompts == ps.to_dict()
    with pytest.raises(ValueError, match="api_key"):
        AgentSpec("naive", llm={"model": "fake/scripted", "api_key": "x"})
    with pytest.raises(LLMConfigError):
        AgentSpec("naive", llm={"model": "fake/scripted", "max_tokens": 0})


def test_spec_is_an_agent_factory_with_one_gateway_per_process():
    spec = AgentSpec.create("robust-cot", llm=FAKE, task=load_task("goto"))
    a, b = spec(), spec()
    assert a is not b and a.gateway is b.gateway and a.name == "robust-cot"
    assert pickle.loads(pickle.dumps(spec)).gateway() is a.gateway  # same config, same process
    assert AgentSpec.create("random")().name == "random"


def test_use_ray_flag_and_env(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not use_ray(None) and not use_ray(False) and use_ray(True)
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert use_ray(None)


def test_missing_ray_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(scaleout.RayNotInstalledError) as e:
        scaleout.ensure_ray()
    assert str(e.value) == "Ray is not installed: pip install 'promptevo[ray]'"


def test_absorb_usage_from_trajectories():
    setup = scripted_setup()
    spec = AgentSpec.create("two-stage", llm=FAKE, task=load_task("mapf-single"), setup=setup)
    task = load_task("mapf-single").model_copy(update={"max_steps": 3})
    local = run_episodes(task, spec, [0, 1], concurrency=1)
    target = Gateway(FAKE)
    absorb_usage(target, [EpisodeResult.from_dict(r.to_dict()) for r in local])  # no worker_usage
    assert usage_rows(target.usage.snapshot()) == usage_rows(spec.gateway().usage.snapshot())
    assert set(target.usage.snapshot()["by_role"]) == {"descriptor", "actor"}


# -- on Ray ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "task_name,agent,max_in_flight",
    [("goto", "robust-cot", None), ("mapf-single", "two-stage", 1)],
)
def test_ray_episodes_equal_local_pool(ray_session, task_name, agent, max_in_flight):
    task = load_task(task_name).model_copy(update={"max_steps": 10})
    spec = AgentSpec.create(agent, llm=FAKE, task=task, setup=scripted_setup())

    local = run_episodes(task, spec, SEEDS, concurrency=2)
    local_usage = spec.gateway().usage.snapshot()

    seen: list[int] = []
    ticks: list[tuple[int, int]] = []
    remote = run_episodes_ray(task, spec, SEEDS, on_result=lambda r: seen.append(r.seed),
                              progress=lambda d, n, r: ticks.append((d, n)), max_in_flight=max_in_flight)

    assert [r.seed for r in remote] == SEEDS and sorted(seen) == SEEDS
    assert ticks == [(i, len(SEEDS)) for i in range(1, len(SEEDS) + 1)]
    if max_in_flight == 1:
        assert seen == SEEDS
    for a, b in zip(local, remote):
        assert b.error is None and b.steps > 0 and b.llm_calls > 0
        assert (a.success, a.return_, a.steps) == (b.success, b.return_, b.steps)
        assert [s["action"] for s in a.trajectory] == [s["action"] for s in b.trajectory]
        assert [s["observation"] for s in a.trajectory] == [s["observation"] for s in b.trajectory]
        assert strip_timing(a.to_dict()) == strip_timing(b.to_dict())  # everything but the clock
    assert len({r.trajectory[0]["observation"] for r in remote}) == len(SEEDS)  # seeds really differ

    # the workers' LLM usage, absorbed by a driver gateway, equals the local run's gateway usage
    driver = Gateway(FAKE)
    added = absorb_usage(driver, remote)
    assert usage_rows(driver.usage.snapshot()) == usage_rows(local_usage)
    assert added["calls"] == local_usage["total"]["calls"] == sum(r.llm_calls for r in remote)
    assert driver.usage.faults() == Gateway(FAKE).usage.faults() == {
        "retries": 0, "errors": 0, "retries_by_kind": {}, "errors_by_kind": {}}


def test_ray_config_error_propagates_as_itself(ray_session):
    task = load_task("goto").model_copy(update={"max_steps": 2})
    spec = AgentSpec.create("naive", llm=LLMConfig(model="nosuchprovider/x", cache_dir=None), task=task)
    with pytest.raises(LLMConfigError) as local:
        run_episodes(task, spec, [0], concurrency=1)
    with pytest.raises(LLMConfigError) as remote:
        run_episodes_ray(task, spec, [0, 1])
    assert type(remote.value) is LLMConfigError
    assert str(remote.value) == str(local.value) and "unknown provider 'nosuchprovider'" in str(remote.value)


def test_ray_interrupt_cancels_and_reraises(ray_session):
    task = load_task("goto").model_copy(update={"max_steps": 4})
    spec = AgentSpec.create("random", task=task)

    def stop(_r: EpisodeResult) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_episodes_ray(task, spec, [0, 1, 2, 3, 4, 5], on_result=stop, max_in_flight=2)
    assert [r.seed for r in run_episodes_ray(task, spec, [7])] == [7]  # Ray still usable


def test_cli_eval_with_ray_matches_local(ray_session, tmp_path: Path):
    from promptevo.api import evaluate

    common = dict(agent="random", episodes=3, concurrency=2, split="train", results_dir=tmp_path, no_cache=True)
    evaluate("mapf-single", run_name="local", ray=False, **common)
    evaluate("mapf-single", run_name="ray", ray=True, **common)

    def episodes(name: str) -> list[dict]:
        rows = [json.loads(x) for x in (tmp_path / name / "episodes.jsonl").read_text().splitlines()]
        return sorted((strip_timing(r) for r in rows), key=lambda r: r["seed"])

    assert episodes("ray") == episodes("local") and len(episodes("ray")) == 3
    config = json.loads((tmp_path / "ray" / "config.json").read_text())
    assert config["scaleout"] == "ray"
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["complete"]


def test_cli_eval_with_ray_counts_worker_usage(ray_session, tmp_path: Path, monkeypatch):
    from promptevo.api import evaluate

    create = AgentSpec.create.__func__  # the CLI's specs get the scripted responder for the workers
    setup = scripted_setup()
    monkeypatch.setattr(AgentSpec, "create", classmethod(lambda cls, *a, **kw: create(cls, *a, setup=setup, **kw)))
    evaluate("goto", agent="robust-cot", episodes=2, model="fake/scripted", concurrency=2, split="train",
             results_dir=tmp_path, run_name="llm", no_cache=True, ray=True)
    summary = json.loads((tmp_path / "llm" / "summary.json").read_text())
    calls = summary["tasks"]["goto"]["llm_calls"]
    assert summary["complete"] and calls > 0 and summary["usage"]["total"]["calls"] == calls
    assert summary["usage"]["by_role"]["agent"]["prompt_tokens"] > 0


# -- optimize() with --ray ---------------------------------------------------------------------------


def scripted_everything():
    """A responder for agent and optimizer calls (nested so cloudpickle ships it to Ray workers by value).

    Agent: the descriptor echoes the observation; the actor walks to the target greedily when its prompt
    has the tip "Prefer going forward toward the target." (the mutator's edit), else picks a move by a
    hash of its messages. Optimizer: a fixed diagnosis and that one edit.
    """

    def responder(messages: list[dict]) -> str:
        import hashlib
        import json as _json
        import re as _re

        system, user = messages[0]["content"], messages[-1]["content"]
        if '"attributions"' in system:
            return _json.dumps({"attributions": [], "failure_modes": ["wanders"], "proposals": []})
        if '"edits"' in system:
            return _json.dumps({"edits": [{"module": "actor", "op": "add", "segment": "tips",
                                           "text": "Prefer going forward toward the target.", "rationale": "test"}]})
        if "\nObservation:\n" in user:
            return user.split("\nObservation:\n", 1)[1]
        if "Prefer going forward toward the target." in system:
            m = _re.search(r"Mission: go to the (\w+ \w+)", user)
            target = f"a {m.group(1)} " if m else "?"
            for line in user.split("Description:", 1)[-1].splitlines():
                if line.strip().startswith(target):
                    if _re.search(r"\d+ steps? forward", line):
                        return "<|ACTION|>go forward<|END|>"
                    return "<|ACTION|>turn right<|END|>" if "right" in line else "<|ACTION|>turn left<|END|>"
            return "<|ACTION|>turn left<|END|>"
        moves = ["go forward", "turn left", "go forward", "turn right"]
        h = hashlib.sha256((system + user).encode()).digest()[0]
        return f"Step {h}. <|ACTION|>{moves[h % len(moves)]}<|END|>"

    return responder


def ray_worker_setup():
    def setup() -> None:
        from promptevo.llm import ScriptedLLM
        from promptevo.evaluation.scaleout import keep_entered

        keep_entered(ScriptedLLM.install(responder))

    responder = scripted_everything()
    return setup


def test_optimize_with_ray_equals_the_local_run(ray_session, tmp_path, monkeypatch):
    """A whole optimization (evidence, child, validation gate, final test table) with ``ray=True`` plays
    every episode as a Ray task and gives exactly the local run's candidates, records and usage."""
    pytest.importorskip("minigrid")
    import promptevo
    from promptevo.llm import ScriptedLLM
    from promptevo.optim.config import OptimizeConfig
    from promptevo.optim.state import load_checkpoint

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    task = load_task("goto").model_copy(update={"max_steps": 8})
    ray_calls = []
    real = scaleout.run_episodes_ray

    def counting(*a, **kw):
        ray_calls.append(len(a[2]))
        return real(*a, **kw)

    monkeypatch.setattr(scaleout, "run_episodes_ray", counting)

    def go(name: str, ray: bool):
        # the validation gate needs a paired test at alpha 0.05: with 3 validation seeds the margin rule
        # (mean validation difference > 0) stands in for the sign test, which cannot reach p < 0.05 on 3 seeds
        cfg = OptimizeConfig(task="goto", model="fake/scripted", no_cache=True, generations=1, episodes=3,
                             evidence_episodes=3, validation_episodes=3, test_episodes=3, promote_rule="margin", children=1,
                             baseline=None, concurrency=2, results_dir=str(tmp_path), run=name, ray=ray,
                             operators=["mutate"])
        with ScriptedLLM.install(scripted_everything()):
            return promptevo.optimize(cfg, task=task, quiet=True, worker_setup=ray_worker_setup())

    try:
        local = go("local", False)
        assert ray_calls == []
        remote = go("ray", True)
    finally:
        scaleout.reset_process_state()
    # every episode went through Ray: parent on 3 evidence + 3 acceptance seeds, the child on 3, both on
    # 3 validation seeds, then random floor, initial and best on 3 test seeds
    assert sum(ray_calls) == load_checkpoint(remote.run_dir).episodes_run == 6 + 3 + 2 * 3 + 3 * 3

    def view(res):
        return {c.id: (c.fingerprint, c.status, c.train, c.validation, c.test) for c in res.candidates}

    assert set(view(local)) == {"c0", "c1"}
    assert view(remote) == view(local)
    assert local.best_id == remote.best_id == "c1"  # the greedy tip is promoted in both runs
    assert all(r["steps"] > 0 and r["tokens"] > 0 for c in remote.candidates for r in c.validation.values())
    assert remote.report["rows"] == local.report["rows"]  # the same final test table
    # the workers' LLM usage reached the driver's accounting
    assert load_checkpoint(remote.run_dir).usage["tokens"] == load_checkpoint(local.run_dir).usage["tokens"] > 0
