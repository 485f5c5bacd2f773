"""Follow an optimization run in MLflow: ``optimize(..., mlflow=True)`` (``--mlflow``).

An optional dependency: ``pip install promptevo[mlflow]``. :class:`MLflowTracker` is a run listener
(:mod:`promptevo.optim.events`):

* created: connects to the tracking store and gets (or creates) the experiment named after the task. The
  store is ``$MLFLOW_TRACKING_URI`` when set, else ``sqlite:///<cwd>/mlruns.db`` with artifacts under
  ``<cwd>/mlruns``: a local database that needs no server and no network (recent MLflow versions refuse
  the plain-folder ``./mlruns`` file store unless ``MLFLOW_ALLOW_FILE_STORE=true``; SQLite works with every
  MLflow >= 2.10). Look at it with ``mlflow ui --backend-store-uri sqlite:///mlruns.db``. An unreachable
  server fails here, fast (no retries, a short timeout), with :class:`TrackingError`;
* ``run_start``: starts an MLflow run named after the promptevo run and logs the configuration as params
  (flattened, as strings; URL credentials and secret-looking values redacted). Its id is kept in
  ``<run>/mlflow.json``: a resumed run (``--resume``) goes on logging to the same MLflow run;
* ``generation_end``: metrics with ``step`` = generation: the best prompts' validation success rate,
  children accepted / promoted in the generation, LLM calls, tokens and cost so far, episodes played;
* ``final``: the TEST split table: success rate and 95% interval bounds per row (``test/<row>/...``), the
  p-values of best vs initial and best vs baseline;
* ``run_end``: logs ``report.html``, ``report.json``, ``report.md``, ``best.md`` and ``best.json`` as
  artifacts and ends the MLflow run. A run that ends otherwise (crash, interrupt) is marked FAILED.

An error while logging later makes the run's emitter drop this listener with one warning; the
optimization goes on. HTTP calls use few retries and a short timeout (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
/ ``MLFLOW_HTTP_REQUEST_TIMEOUT`` when the user set them), so a server that goes away cannot stall a run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from promptevo.errors import PromptevoError
from promptevo.fileio import write_json_atomic
from promptevo.llm.secrets import redact, redact_url
from promptevo.optim.events import make_event

DEFAULT_DB = "mlruns.db"
DEFAULT_ARTIFACTS = "mlruns"
ARTIFACTS = ("report.html", "report.json", "report.md", "best.md", "best.json")
RUN_FILE = "mlflow.json"  # in the run folder: the MLflow run a resumed run goes on logging to
_URL_KEYS = ("api_base", "optimizer_api_base")
_MAX_PARAM = 500  # longest param value logged (MLflow >= 2.10 accepts 6000; the UI is happier with less)
# (retries, timeout s) of the connection check, and of every later call
_PROBE = ("0", "5")
_LATER = ("2", "20")


class TrackingError(PromptevoError, RuntimeError):
    """MLflow cannot be used; ``str(e)`` is one line meant for the user."""


def _one_line(e: BaseException) -> str:
    s = " ".join(str(e).split())
    return (s[:300] + "…") if len(s) > 300 else (s or type(e).__name__)


@contextlib.contextmanager
def _http_limits(retries: str, timeout: str) -> Iterator[None]:
    """Few retries and a short timeout for MLflow's HTTP calls, unless the user chose their own."""
    keys = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": retries, "MLFLOW_HTTP_REQUEST_TIMEOUT": timeout,
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
    added = {k: v for k, v in keys.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextlib.contextmanager
def _quiet_setup() -> Iterator[None]:
    """Creating the local database logs INFO lines (mlflow, alembic) over the run's display: not now."""
    loggers = [logging.getLogger(n) for n in ("mlflow", "alembic")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI``, else a SQLite database ``mlruns.db`` in the current folder."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(DEFAULT_DB).resolve()}"


def flatten_params(config: dict, prefix: str = "") -> dict[str, str]:
    """``{"a.b": "value"}`` strings of a nested config, with credentials in URLs and secret values redacted."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_params(v, key + "."))
            continue
        if isinstance(v, str) and k in _URL_KEYS:
            v = redact_url(v)
        if isinstance(v, (list, tuple)):
            v = ",".join(map(str, v))
        text = redact(v if isinstance(v, str) else str(v))
        key = re.sub(r"[^A-Za-z0-9_\-. /]", "_", key)[:250]
        out[key] = text[:_MAX_PARAM]
    return out


def _metric_key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", name).strip("_")[:200] or "row"


def _rate(value: Any) -> float | None:
    """A success rate from a number, or from text such as ``'15/20 (75%)'``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = re.match(r"\s*(\d+)\s*/\s*(\d+)", str(value or ""))
    return int(m.group(1)) / int(m.group(2)) if m and int(m.group(2)) > 0 else None


class MLflowTracker:
    """Run listener that logs a promptevo run to MLflow (see the module docstring)."""

    def __init__(self, config: Any, run_dir: str | Path, tracking_uri: str | None = None):
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise TrackingError("MLflow is not installed: pip install promptevo[mlflow]") from None
        self.config = config.model_dump(mode="json") if hasattr(config, "model_dump") else dict(config)
        self.run_dir = Path(run_dir)
        self.uri = tracking_uri or default_tracking_uri()
        self.run_id: str | None = None
        self.ended = False
        self.experiment = str(self.config.get("task") or "promptevo")
        shown = redact_url(self.uri)
        try:
            with _http_limits(*_PROBE), _quiet_setup():
                self.client = MlflowClient(tracking_uri=self.uri)
                exp = self.client.get_experiment_by_name(self.experiment)
                if exp is None:
                    loc = None
                    if "MLFLOW_TRACKING_URI" not in os.environ and tracking_uri is None:
                        loc = Path(DEFAULT_ARTIFACTS).resolve().as_uri()
                    self.experiment_id = self.client.create_experiment(self.experiment, artifact_location=loc)
                else:
                    self.experiment_id = exp.experiment_id
        except TrackingError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure to reach the store is one line for the user
            raise TrackingError(f"MLflow tracking store {shown} unreachable ({type(e).__name__}: "
                                f"{redact(_one_line(e))})") from None

    # -- events ------------------------------------------------------------------------------------
    def on_event(self, kind: str, data: Mapping[str, Any]) -> None:
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            with _http_limits(*_LATER):
                handler(make_event(kind, data))  # a typed event (RunStart, GenerationEnd, ...), read as a mapping

    def _previous_run(self) -> Any:
        """The MLflow run this promptevo run logged to before it was resumed (same store), or None."""
        try:
            saved = json.loads((self.run_dir / RUN_FILE).read_text(encoding="utf-8"))
            if saved.get("tracking_uri") != redact_url(self.uri):
                return None
            run = self.client.get_run(str(saved["run_id"]))
        except Exception:  # noqa: BLE001 - no usable record: a new MLflow run
            return None
        return run if run.info.experiment_id == self.experiment_id else None

    def _on_run_start(self, data: dict[str, Any]) -> None:
        if self.run_id is not None:
            return
        cfg = data.get("config") if isinstance(data.get("config"), dict) else self.config
        previous = self._previous_run() if data.get("resumed") else None
        logged: dict[str, str] = {}
        if previous is not None:  # a resumed run goes on in the same MLflow run (metrics continue by step)
            self.run_id = previous.info.run_id
            logged = dict(previous.data.params)
            self.client.update_run(self.run_id, status="RUNNING")
            self.client.set_tag(self.run_id, "promptevo.resumed", "True")
        else:
            run = self.client.create_run(self.experiment_id, run_name=str(cfg.get("run") or self.run_dir.name),
                                         tags={"promptevo.run_dir": str(self.run_dir.resolve()),
                                               "promptevo.task": str(cfg.get("task")),
                                               "promptevo.agent": str(cfg.get("agent")),
                                               "promptevo.resumed": str(bool(data.get("resumed")))})
            self.run_id = run.info.run_id
            with contextlib.suppress(OSError):
                write_json_atomic(self.run_dir / RUN_FILE, {"tracking_uri": redact_url(self.uri),
                                                            "experiment_id": self.experiment_id,
                                                            "run_id": self.run_id})
        self.ended = False
        from mlflow.entities import Param

        # params are immutable in MLflow: on resume only the new ones are logged (a changed value, e.g. more
        # generations, keeps the first value; the checkpoint has the current configuration)
        params = [Param(k, v) for k, v in sorted(flatten_params(cfg).items()) if k not in logged]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])

    def _log_metrics(self, values: dict[str, float | None], step: int = 0) -> None:
        if self.run_id is None:
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        ms = [Metric(_metric_key(k), float(v), now, int(step)) for k, v in values.items() if v is not None]
        for i in range(0, len(ms), 500):
            self.client.log_batch(self.run_id, metrics=ms[i:i + 500])

    def _on_generation_end(self, data: dict[str, Any]) -> None:
        u = data.get("usage") or {}
        accepted = data.get("accepted")
        promoted = data.get("promoted")
        self._log_metrics({
            "best_validation_success_rate": _rate(data.get("best_validation")),
            "children": float(data["children"]) if isinstance(data.get("children"), (int, float)) else None,
            "accepted": float(accepted) if isinstance(accepted, (int, float)) else None,
            "promoted": float(promoted) if isinstance(promoted, (int, float)) else None,
            "llm_calls": float(u.get("calls") or 0),
            "tokens": float(u.get("tokens") or 0),
            "cost_usd": float(u.get("cost") or 0.0),
            "episodes": float(data.get("episodes") or 0),
        }, step=int(data.get("generation") or 0))

    def _on_final(self, data: dict[str, Any]) -> None:
        report = data.get("report") or {}
        values: dict[str, float | None] = {}
        for row in report.get("rows") or []:
            name = str(row.get("name", "row")).split(" (", 1)[0].replace(" ", "_")
            lo, hi = (list(row.get("ci95") or [None, None]) + [None, None])[:2]
            values[f"test/{name}/success_rate"] = row.get("success_rate")
            values[f"test/{name}/ci95_low"] = lo
            values[f"test/{name}/ci95_high"] = hi
            values[f"test/{name}/n"] = row.get("n")
        for name, comp in (report.get("comparisons") or {}).items():
            if isinstance(comp, dict):
                values[f"test/{name}/p_value"] = comp.get("p_value")
                values[f"test/{name}/mean_diff"] = comp.get("mean_diff")
        self._log_metrics({k: v for k, v in values.items() if isinstance(v, (int, float))})

    def _on_run_end(self, data: dict[str, Any]) -> None:
        if self.run_id is None or self.ended:
            return
        run_dir = Path(data.get("run_dir") or self.run_dir)
        for name in ARTIFACTS:
            path = run_dir / name
            if path.is_file():
                self.client.log_artifact(self.run_id, str(path))
        if data.get("stop_reason"):
            self.client.set_tag(self.run_id, "promptevo.stop_reason", redact(str(data["stop_reason"]))[:500])
        self.client.set_terminated(self.run_id, "FINISHED")
        self.ended = True

    def close(self) -> None:
        """Called when the run's emitter closes: a run that never reached ``run_end`` is marked FAILED."""
        if self.run_id is not None and not self.ended:
            self.ended = True
            with contextlib.suppress(Exception), _http_limits(*_PROBE):
                self.client.set_terminated(self.run_id, "FAILED")


__all__ = ["MLflowTracker", "TrackingError", "default_tracking_uri", "flatten_params"]
