"""Tests of the MLflow tracker (promptevo.reporting.tracking): a short optimization with the test doubles of
``run_double.py`` and ``mlflow=True`` is found by ``mlflow.search_runs()`` with its params, per-generation
and test-split metrics and artifacts; a missing extra and an unreachable server are one-line errors, and
neither stops a run. Skipped when mlflow is not installed (``pip install promptevo[mlflow]``; the ``dev``
extra has it, so CI runs these tests)."""

from __future__ import annotations

import json
import sys
import time

import pytest
from run_double import make_run

pytest.importorskip("mlflow")

from promptevo.optim.events import Emitter  # noqa: E402
from promptevo.reporting.tracking import MLflowTracker, TrackingError, flatten_params  # noqa: E402

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A working folder whose default store (``./mlruns.db`` + ``./mlruns``) all tests share: creating the
    database takes a few seconds, so it is done once."""
    return tmp_path_factory.mktemp("mlflow")


@pytest.fixture(scope="module")
def tracked(store):
    mp = pytest.MonkeyPatch()
    mp.chdir(store)
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    try:
        res = make_run(store / "results", "tracked", generations=2, mlflow=True,
                       api_base="http://alice:s3cr3t-pass@proxy.example/v1")
    finally:
        mp.undo()
    return res


def _client(store):
    import mlflow

    return mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{store / 'mlruns.db'}")


def test_tracked_run_has_params_metrics_and_artifacts(store, tracked):
    import mlflow

    assert (store / "mlruns.db").is_file() and (store / "mlruns").is_dir()  # the offline default store
    mlflow.set_tracking_uri(f"sqlite:///{store / 'mlruns.db'}")
    try:
        runs = mlflow.search_runs(experiment_names=["scripted-pickup"])
    finally:
        mlflow.set_tracking_uri(None)
    assert len(runs) == 1
    row = runs.iloc[0]
    assert row["status"] == "FINISHED" and row["tags.mlflow.runName"] == "tracked"
    # the config, flattened, as params; URL credentials never
    assert row["params.task"] == "scripted-pickup" and row["params.generations"] == "2"
    assert row["params.model"] == "fake/agent" and row["params.operators"] == "induce,mutate"
    assert row["params.api_base"] == "http://***@proxy.example/v1"
    assert not any("s3cr3t" in str(v) for v in row.values)
    # the test split table and the paired comparisons
    assert row["metrics.test/best/success_rate"] == 1.0 and row["metrics.test/initial/success_rate"] == 0.25
    assert row["metrics.test/best/ci95_low"] == pytest.approx(0.8389, abs=1e-4)
    assert row["metrics.test/best/n"] == 20 and row["metrics.test/baseline/success_rate"] == 0.25
    assert row["metrics.test/best_vs_initial/p_value"] == pytest.approx(6.1035e-05, rel=1e-3)
    # per generation, step = generation
    client = _client(store)
    hist = client.get_metric_history(row["run_id"], "best_validation_success_rate")
    assert [(m.step, m.value) for m in hist] == [(1, 1.0), (2, 1.0)]
    assert [(m.step, m.value) for m in client.get_metric_history(row["run_id"], "accepted")] == [(1, 1.0), (2, 0.0)]
    assert [m.value for m in client.get_metric_history(row["run_id"], "promoted")] == [1.0, 0.0]
    tokens = [m.value for m in client.get_metric_history(row["run_id"], "tokens")]
    assert len(tokens) == 2 and 0 < tokens[0] < tokens[1]
    assert {m.step for m in client.get_metric_history(row["run_id"], "episodes")} == {1, 2}
    for key in ("llm_calls", "cost_usd", "children"):
        assert len(client.get_metric_history(row["run_id"], key)) == 2, key
    names = {a.path for a in client.list_artifacts(row["run_id"])}
    assert names == {"report.html", "report.json", "report.md", "best.md", "best.json"}


def test_resumed_run_goes_on_in_the_same_mlflow_run(store, tracked, monkeypatch):
    monkeypatch.chdir(store)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    saved = json.loads((tracked.run_dir / "mlflow.json").read_text())
    res = make_run(store / "results", "tracked", generations=3, mlflow=True, resume=True,
                   api_base="http://alice:s3cr3t-pass@proxy.example/v1")
    assert res.run_dir == tracked.run_dir
    client = _client(store)
    exp = client.get_experiment_by_name("scripted-pickup")
    runs = client.search_runs([exp.experiment_id], filter_string="attributes.run_name = 'tracked'")
    assert [r.info.run_id for r in runs] == [saved["run_id"]]
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.tags["promptevo.resumed"] == "True"
    assert run.data.params["generations"] == "2"  # params are immutable: the first value stays
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "best_validation_success_rate")]
    assert steps == [1, 2, 3]


def test_flatten_params_redacts_and_flattens(monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", "sk-verysecret123")
    p = flatten_params({"a": {"b": 1, "c": [1, 2]}, "api_base": "https://u:pw@h/x?key=abc",
                        "note": "uses sk-verysecret123", "none": None})
    assert p == {"a.b": "1", "a.c": "1,2", "api_base": "https://***@h/x?key=***", "note": "uses ***", "none": "None"}


def test_missing_extra_is_one_line(monkeypatch):
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow -> ImportError
    with pytest.raises(TrackingError) as e:
        MLflowTracker({"task": "goto"}, "results/x")
    assert str(e.value) == "MLflow is not installed: pip install promptevo[mlflow]"


def test_unreachable_server_fails_fast_with_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", UNREACHABLE)
    t0 = time.monotonic()
    with pytest.raises(TrackingError) as e:
        MLflowTracker({"task": "goto"}, tmp_path)
    assert time.monotonic() - t0 < 20
    msg = str(e.value)
    assert msg.startswith(f"MLflow tracking store {UNREACHABLE} unreachable") and "\n" not in msg
    # credentials in the URI are never shown
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://bob:hunter22@127.0.0.1:9")
    with pytest.raises(TrackingError) as e:
        MLflowTracker({"task": "goto"}, tmp_path)
    assert "hunter22" not in str(e.value) and "http://***@127.0.0.1:9" in str(e.value)


def test_unreachable_server_does_not_stop_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", UNREACHABLE)
    res = make_run(tmp_path, "untracked", generations=1, baseline=None, mlflow=True)
    assert res.best_id == "c1" and (res.run_dir / "report.json").exists()
    log = (res.run_dir / "run.log").read_text()
    assert f"MLflow tracking store {UNREACHABLE} unreachable" in log and "the run goes on without MLflow" in log


def test_logging_error_later_is_one_warning_and_close_marks_failed(store, tracked, monkeypatch):
    monkeypatch.chdir(store)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracker = MLflowTracker({"task": "scripted-pickup", "run": "broken"}, store / "results" / "broken")
    seen: list[tuple[str, dict]] = []

    class Recorder:
        def on_event(self, kind, data):
            seen.append((kind, data))

    emit = Emitter([tracker, Recorder()])
    emit("run_start", run_dir=str(store / "results" / "broken"), config={"task": "scripted-pickup", "run": "broken"})
    run_id = tracker.run_id

    def fail(*a, **k):
        raise ConnectionError("server went away")

    monkeypatch.setattr(tracker.client, "log_batch", fail)
    emit("generation_end", generation=1, generations=2, best="c0", usage={},
         best_validation="3/4 (75%)")  # raises inside: dropped
    emit("generation_end", generation=2, generations=2, best="c0", usage={})  # not called again
    warnings = [d["message"] for k, d in seen if k == "warning"]
    assert len(warnings) == 1 and "MLflowTracker stopped following the run" in warnings[0]
    assert "server went away" in warnings[0]
    emit.close()  # never reached run_end: FAILED
    assert _client(store).get_run(run_id).info.status == "FAILED"
