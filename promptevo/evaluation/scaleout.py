"""Scale-out of rollouts on Ray (optional extra: ``pip install 'promptevo[ray]'``).

Each episode is one Ray task. The driver ships a small picklable :class:`AgentSpec` (agent name,
prompts, task, agent options, LLM config *without* the API key) and every worker process builds its
own agent with its own :class:`~promptevo.llm.Gateway` (one per LLM config and process, cached), so
episodes play exactly as in :func:`promptevo.rollout.run_episodes`; only the wall-clock fields differ.
Workers read API keys from their own environment (a local Ray instance inherits the driver's).

* :func:`use_ray` -- whether Ray is wanted (``--ray`` or the ``RAY_ADDRESS`` environment variable).
* :func:`ensure_ray` -- ``ray.init`` once (the cluster at ``RAY_ADDRESS`` when set, else a local one).
* :func:`run_episodes_ray` -- one Ray task per seed; results in seed order, like ``run_episodes``.
* :func:`absorb_usage` -- the workers' LLM calls are not seen by the driver's gateway; this adds them
  to the driver gateway's :class:`~promptevo.llm.UsageTracker`, so budgets and reports keep working.

``ray`` is imported only by :func:`ensure_ray` / :func:`run_episodes_ray`; importing this module
never needs it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, TypeVar

from promptevo.errors import PromptevoError
from promptevo.evaluation.rollout import EpisodeResult, KeepMessages, run_episode
from promptevo.llm.gateway import LLMConfig, LLMConfigError
from promptevo.tasks import TaskConfig

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.agents.base import Agent
    from promptevo.llm.gateway import Gateway, UsageTracker
    from promptevo.segments import PromptSet

__all__ = [
    "RAY_MISSING",
    "AgentSpec",
    "RayNotInstalledError",
    "absorb_usage",
    "ensure_ray",
    "keep_entered",
    "reset_process_state",
    "run_episodes_ray",
    "use_ray",
]

RAY_MISSING = "Ray is not installed: pip install 'promptevo[ray]'"

T = TypeVar("T")

# -- per-process state (driver and every worker) ----------------------------------------------------
_STATE_LOCK = threading.RLock()
_GATEWAYS: dict[str, "Gateway"] = {}  # LLM config (JSON, no key) -> this process's gateway
_SETUP_DONE: set[str] = set()  # AgentSpec.setup_id values whose setup ran in this process
_KEPT = contextlib.ExitStack()  # context managers kept entered for the life of the process


def keep_entered(cm: ContextManager[T]) -> T:
    """Enter ``cm`` and keep it entered until the process ends (or :func:`reset_process_state`).

    For an :attr:`AgentSpec.setup` that installs something scoped by a context manager in a worker,
    e.g. ``keep_entered(ScriptedLLM.install(responder))``.
    """
    with _STATE_LOCK:
        return _KEPT.enter_context(cm)


def reset_process_state() -> None:
    """Exit the context managers of :func:`keep_entered`, close the cached gateways and forget which
    setups ran (in this process only; mainly for tests)."""
    global _KEPT
    with _STATE_LOCK:
        _KEPT.close()
        _KEPT = contextlib.ExitStack()
        for gw in _GATEWAYS.values():
            with contextlib.suppress(Exception):
                gw.close()
        _GATEWAYS.clear()
        _SETUP_DONE.clear()


atexit.register(lambda: _KEPT.close())


# -- the agent spec ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentSpec:
    """A picklable recipe for an agent, buildable in any process: ``spec()`` returns a fresh agent.

    ``prompts`` is ``PromptSet.to_dict()`` (``None``: the agent's default prompts for ``task``);
    ``task`` is ``TaskConfig.model_dump(mode="json")`` (needed only for default prompts);
    ``agent_kwargs`` are :func:`promptevo.agents.make_agent` options (``init``, ``history``,
    ``constrained``, ...); ``llm`` holds the :class:`~promptevo.llm.LLMConfig` fields except
    ``api_key`` (``None`` for the random agent). ``setup`` (optional, picklable) runs once per process
    before that process builds its first agent from this spec (tests install the LLM test double's
    responder with it). Being a zero-argument callable, a spec is also an agent factory for
    :func:`promptevo.rollout.run_episodes`.
    """

    agent: str
    prompts: dict[str, Any] | None = None
    task: dict[str, Any] | None = None
    agent_kwargs: dict[str, Any] = field(default_factory=dict)
    llm: dict[str, Any] | None = None
    setup: Callable[[], Any] | None = None
    setup_id: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.llm is not None:
            if "api_key" in self.llm:
                raise ValueError("AgentSpec.llm must not contain api_key (workers read keys from their environment)")
            LLMConfig(**self.llm)  # bad fields fail here, in the driver
        if self.setup is not None and not self.setup_id:
            object.__setattr__(self, "setup_id", uuid.uuid4().hex)

    @classmethod
    def create(
        cls,
        agent: str,
        *,
        llm: "LLMConfig | Gateway | None" = None,
        prompts: "PromptSet | dict | None" = None,
        task: TaskConfig | dict | None = None,
        setup: Callable[[], Any] | None = None,
        **agent_kwargs: Any,
    ) -> "AgentSpec":
        """A spec from live objects: ``llm`` is an LLMConfig or a Gateway (its config is used, its
        API key dropped), ``prompts`` a PromptSet, ``task`` a TaskConfig."""
        cfg = getattr(llm, "config", llm)
        llm_dict = None
        if cfg is not None:
            llm_dict = {k: v for k, v in vars(cfg).items() if k != "api_key"}
        if prompts is not None and not isinstance(prompts, dict):
            prompts = prompts.to_dict()
        if isinstance(task, TaskConfig):
            task = task.model_dump(mode="json")
        return cls(agent=agent, prompts=prompts, task=task, agent_kwargs=dict(agent_kwargs), llm=llm_dict,
                   setup=setup)

    def llm_config(self) -> LLMConfig | None:
        return None if self.llm is None else LLMConfig(**self.llm)

    def task_config(self) -> TaskConfig | None:
        return None if self.task is None else TaskConfig(**self.task)

    def run_setup(self) -> None:
        """Run ``setup`` unless it already ran in this process."""
        if self.setup is None:
            return
        with _STATE_LOCK:
            if self.setup_id in _SETUP_DONE:
                return
            self.setup()
            _SETUP_DONE.add(self.setup_id)

    def gateway(self) -> "Gateway | None":
        """This process's gateway for ``llm`` (created on first use, then shared by its episodes)."""
        if self.llm is None:
            return None
        from promptevo.llm.gateway import Gateway

        key = json.dumps(self.llm, sort_keys=True, default=str)
        with _STATE_LOCK:
            gw = _GATEWAYS.get(key)
            if gw is None:
                gw = _GATEWAYS[key] = Gateway(LLMConfig(**self.llm))
            return gw

    def __call__(self) -> "Agent":
        from promptevo.agents.registry import make_agent
        from promptevo.segments import PromptSet

        self.run_setup()
        kw = dict(self.agent_kwargs)
        task = self.task_config()
        if task is not None:
            kw.setdefault("task", task)
        ps = PromptSet.from_dict(self.prompts) if self.prompts is not None else None
        return make_agent(self.agent, self.gateway(), ps, **kw)


# -- Ray --------------------------------------------------------------------------------------------
def use_ray(flag: bool | None = None) -> bool:
    """True when ``flag`` is true or the ``RAY_ADDRESS`` environment variable is set (non-empty)."""
    return bool(flag) or bool(os.environ.get("RAY_ADDRESS", "").strip())


class RayNotInstalledError(PromptevoError, ImportError):
    """The optional ``ray`` package is missing; ``str(e)`` is :data:`RAY_MISSING`."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayNotInstalledError(RAY_MISSING) from None
    return ray


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """``ray.init`` unless Ray is already initialized; returns the ``ray`` module.

    ``address`` (default: ``RAY_ADDRESS``) joins an existing cluster (``auto``, ``ray://host:10001``,
    ``host:6379``); without one a local Ray instance starts with ``num_cpus`` CPUs (default: all).
    A missing ``ray`` package raises :class:`RayNotInstalledError` (one line, ``RAY_MISSING``).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return ray
    address = address or os.environ.get("RAY_ADDRESS", "").strip() or None
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False)
    return ray


def _usage_state(gw: "Gateway | None") -> dict[str, Any]:
    if gw is None:
        return {"by_role": {}, "retries_by_kind": {}, "errors_by_kind": {}}
    u = gw.usage
    roles = list(u.snapshot()["by_role"])
    f = u.faults()
    return {"by_role": {r: u.role(r) for r in roles}, "retries_by_kind": f["retries_by_kind"],
            "errors_by_kind": f["errors_by_kind"]}


def _diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    by_role = {}
    for role, row in after["by_role"].items():
        prev = before["by_role"].get(role, {})
        d = {k: v - prev.get(k, 0) for k, v in row.items()}
        if any(d.values()):
            by_role[role] = d
    kinds = {}
    for name in ("retries_by_kind", "errors_by_kind"):
        kinds[name] = {k: v - before[name].get(k, 0) for k, v in after[name].items()
                       if v - before[name].get(k, 0)}
    return {"by_role": by_role, **kinds}


def _play(task: TaskConfig, spec: AgentSpec, seed: int, keep_messages: KeepMessages) -> tuple[EpisodeResult, dict]:
    """Body of the Ray task: one episode in this worker, plus the LLM usage it caused here.

    A Ray worker process runs one task at a time, so the difference of the process gateway's counters
    before and after the episode is exactly this episode's usage (retries and errors included).
    """
    spec.run_setup()
    gw = spec.gateway()
    before = _usage_state(gw)
    result = run_episode(task, spec, seed, keep_messages=keep_messages)
    return result, _diff(_usage_state(gw), before)


_REMOTE: Any = None


def _remote_play(ray: Any) -> Any:
    global _REMOTE
    if _REMOTE is None:
        _REMOTE = ray.remote(_play)
    return _REMOTE


def _unwrap(ray: Any, exc: BaseException) -> BaseException:
    """The worker's own exception for a configuration error (same type and message), else ``exc``."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, LLMConfigError):
            return cause
    return exc


def run_episodes_ray(
    task: TaskConfig,
    spec: AgentSpec,
    seeds: Iterable[int],
    *,
    on_result: Callable[[EpisodeResult], None] | None = None,
    progress: Callable[[int, int, EpisodeResult], None] | None = None,
    max_in_flight: int | None = None,
    keep_messages: KeepMessages = "first",
    address: str | None = None,
    num_cpus: int | None = None,
) -> list[EpisodeResult]:
    """Play one episode per seed, each as a Ray task; results come back in seed order.

    Same contract as :func:`promptevo.rollout.run_episodes`: ``on_result(result)`` and
    ``progress(done, total, result)`` run in the calling thread in completion order; on
    KeyboardInterrupt the outstanding tasks are cancelled and the interrupt is re-raised. An
    ``LLMConfigError`` in a worker is re-raised here as the same type and message (other worker errors
    as Ray's ``RayTaskError``, which is also an instance of the original exception class).
    ``max_in_flight`` bounds the tasks submitted at once (default: all). Ray is initialized on first
    use (:func:`ensure_ray` with ``address`` / ``num_cpus``).

    Each result carries the LLM usage of its episode in the worker (attribute ``worker_usage``, not a
    dataclass field, so results files are unchanged); :func:`absorb_usage` adds it to a gateway.
    """
    seeds = list(seeds)
    if not seeds:
        return []
    ray = ensure_ray(address, num_cpus)
    remote = _remote_play(ray)
    limit = len(seeds) if max_in_flight is None else max(1, int(max_in_flight))
    results: dict[int, EpisodeResult] = {}
    index: dict[Any, int] = {}
    next_i = 0

    def submit_more() -> None:
        nonlocal next_i
        while next_i < len(seeds) and len(index) < limit:
            index[remote.remote(task, spec, seeds[next_i], keep_messages)] = next_i
            next_i += 1

    try:
        submit_more()
        while index:
            # wake on the first finished episode (short timeout: Ctrl-C stays responsive), then take
            # every other one that is already done
            ready, rest = ray.wait(list(index), num_returns=1, timeout=0.5)
            if not ready:
                continue
            if rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in sorted(ready, key=index.__getitem__):  # seed order within a batch
                i = index.pop(ref)
                try:
                    result, usage = ray.get(ref)
                except BaseException as e:  # noqa: BLE001 - unwrapped below, re-raised
                    err = _unwrap(ray, e)
                    if err is e:
                        raise
                    raise err from None
                result.worker_usage = usage  # type: ignore[attr-defined]
                results[i] = result
                if on_result is not None:
                    on_result(result)
                if progress is not None:
                    progress(len(results), len(seeds), result)
            submit_more()
    except BaseException:
        for ref in index:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        raise
    return [results[i] for i in range(len(seeds))]


# -- usage accounting -------------------------------------------------------------------------------
def _role_of(module: str | None) -> str:
    return "agent" if not module or module == "system" else str(module)


def _usage_from_trajectory(r: EpisodeResult | dict) -> dict[str, Any]:
    """Usage of one episode rebuilt from its per-call records (no retries: those are not stored)."""
    get = (lambda k, d=None: r.get(k, d)) if isinstance(r, dict) else (lambda k, d=None: getattr(r, k, d))
    by_role: dict[str, dict[str, float]] = {}
    errors_by_kind: dict[str, int] = {}

    def add(role: str, **delta: float) -> None:
        row = by_role.setdefault(role, {})
        for k, v in delta.items():
            row[k] = row.get(k, 0) + v

    for step in get("trajectory") or []:
        for c in step.get("calls") or []:
            role = _role_of(c.get("module"))
            if c.get("error"):  # an empty reply after the retries: counted as an error, not a call
                add(role, errors=1)
                errors_by_kind["empty_reply"] = errors_by_kind.get("empty_reply", 0) + 1
            elif c.get("cached"):
                add(role, calls=1, cache_hits=1)
            else:
                add(role, calls=1, prompt_tokens=int(c.get("prompt_tokens") or 0),
                    completion_tokens=int(c.get("completion_tokens") or 0), cost=float(c.get("cost") or 0.0),
                    latency_s=float(c.get("latency_s") or 0.0))
    err = get("error")
    if err and str(err) != "interrupted":  # an LLM error ended the episode
        add("agent", errors=1)
    return {"by_role": by_role, "retries_by_kind": {}, "errors_by_kind": errors_by_kind}


def absorb_usage(gateway: "Gateway | UsageTracker", results: Iterable[EpisodeResult | dict]) -> dict[str, Any]:
    """Add the LLM usage of episodes played elsewhere (Ray workers) to ``gateway``'s usage tracker.

    Per episode: the exact counters measured in the worker (``result.worker_usage``, set by
    :func:`run_episodes_ray`) when present, else the counters rebuilt from the trajectory's call
    records (calls, cache hits, tokens, cost, latency and empty-reply errors per role; retries are not
    stored there). Roles are the agents' own (``agent``; ``descriptor`` / ``actor`` for two-stage).
    Returns the totals added (the counters of ``UsageTracker.total()``).
    """
    usage = getattr(gateway, "usage", gateway)
    added: dict[str, float] = {}
    for r in results:
        u = getattr(r, "worker_usage", None) if not isinstance(r, dict) else r.get("worker_usage")
        if u is None:
            u = _usage_from_trajectory(r)
        for role, row in u["by_role"].items():
            row = {k: v for k, v in row.items() if v}
            usage.merge(role, row)
            for k, v in row.items():
                added[k] = added.get(k, 0) + v
        usage.merge("agent", {}, retries_by_kind=u.get("retries_by_kind"), errors_by_kind=u.get("errors_by_kind"))
    return added

