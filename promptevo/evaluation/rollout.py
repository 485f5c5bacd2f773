"""Play episodes: one agent, one env, one seed -> an :class:`EpisodeResult` with a full trajectory.

* :func:`run_episode` builds a fresh env (``make_env(task)``) and a fresh agent (``agent_factory()``)
  per episode, so episodes can run in parallel threads; the LLM gateway is shared and thread-safe.
* Step limit: ``min(env.max_steps, task.max_steps)`` (``task.max_steps`` is an optional override).
* Success: ``info["success"]`` from the final step when the env reports it, else ``progression >= 1``.
* An :class:`~promptevo.llm.LLMError` inside an episode ends that episode with ``error`` set (the run
  goes on; :mod:`promptevo.evaluation.statistics` leaves errored episodes out of the rates and counts them).
  An ``LLMConfigError`` (bad model name, missing key) is re-raised: no episode can succeed.

Trajectory records (one dict per step): ``t``, ``observation`` (what the agent saw), ``action`` (sent
to the env), ``executed_action``, ``reply`` (raw final LLM reply), ``parsed``, ``valid``, ``reward``,
``done``, ``description`` (two-stage), ``prompt_tokens``, ``completion_tokens``, ``latency_s`` and
``calls``. To keep episode files small, the full prompt ``messages`` of each call are stored only on
the FIRST step (``keep_messages="first"``, default); later steps store ``messages_sha`` (sha256 of
the message list, 16 hex chars), ``n_messages`` and ``last_message`` (the newest message, i.e. what is
new this step). ``keep_messages="all"`` keeps every message list, ``"none"`` only hashes.

Stored text is capped: replies, descriptions and message contents longer than
:data:`MAX_STORED_TEXT_CHARS` (4000) characters are cut to that length plus a marker, and the
original length is kept next to them (``reply_chars``, ``description_chars``; messages:
``content_chars``), so a runaway 100k-character reply cannot blow up the episode files. The agent
itself saw the full text. Per-episode fault counts are in ``faults`` (``empty_replies``,
``call_errors``, ``clipped_texts``, ``length_truncated``); :func:`fault_summary` adds them up with the
gateway's retries/errors by kind for ``summary.json``.

Results files (:class:`RunWriter`): ``episodes.jsonl`` (one EpisodeResult per line, appended and
fsynced as each episode finishes) and ``summary.json`` / ``config.json`` (written atomically).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

from promptevo.tasks import TaskConfig, make_env

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.agents.base import Agent
    from promptevo.envs.base import TextEnv

try:
    from promptevo.llm.gateway import LLMConfigError, LLMError
except ImportError:  # pragma: no cover - the gateway module is written in parallel

    class LLMError(Exception):  # type: ignore[no-redef]
        pass

    class LLMConfigError(LLMError):  # type: ignore[no-redef]
        pass


KeepMessages = Literal["first", "all", "none"]

#: Longest reply / description / message content stored in a trajectory (characters).
MAX_STORED_TEXT_CHARS = 4000
CLIP_MARKER = "...[clipped]"


@dataclass
class EpisodeResult:
    task: str
    seed: int
    mission: str
    success: bool
    progression: float
    return_: float
    steps: int
    invalid_actions: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    llm_calls: int
    wall_s: float
    env_stats: dict = field(default_factory=dict)
    trajectory: list[dict] = field(default_factory=list)
    error: str | None = None
    parse_failures: int = 0
    cached_calls: int = 0
    agent: str = ""
    truncated: bool = False
    faults: dict = field(default_factory=dict)  # empty_replies, call_errors, clipped_texts, length_truncated

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["return"] = d.pop("return_")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpisodeResult":
        d = dict(d)
        if "return" in d:
            d["return_"] = d.pop("return")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def without_trajectory(self) -> "EpisodeResult":
        return EpisodeResult.from_dict({**self.to_dict(), "trajectory": []})


def _messages_sha(messages: list[dict]) -> str:
    blob = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def clip_text(text: Any, limit: int = MAX_STORED_TEXT_CHARS) -> tuple[Any, int | None]:
    """``(text cut to limit chars + marker, original length)`` or ``(text, None)`` when short enough."""
    if not isinstance(text, str) or len(text) <= limit:
        return text, None
    return text[:limit] + CLIP_MARKER, len(text)


def _clip_message(msg: Any, counter: list[int]) -> Any:
    if not isinstance(msg, dict):
        return msg
    content, n = clip_text(msg.get("content"))
    if n is None:
        return msg
    counter[0] += 1
    return {**msg, "content": content, "content_chars": n}


def _compact_call(call: dict, keep: bool, counter: list[int] | None = None) -> dict:
    counter = counter if counter is not None else [0]
    out = {k: v for k, v in call.items() if k != "messages"}
    reply, n = clip_text(out.get("reply"))
    if n is not None:
        out["reply"], out["reply_chars"] = reply, n
        counter[0] += 1
    msgs = call.get("messages") or []
    out["messages_sha"] = _messages_sha(msgs)
    out["n_messages"] = len(msgs)
    if keep:
        out["messages"] = [_clip_message(m, counter) for m in msgs]
    else:
        out["last_message"] = _clip_message(msgs[-1], counter) if msgs else None
    return out


class StopFlag:
    """Set from the main thread (Ctrl-C) so running episodes stop at their next step."""

    def __init__(self) -> None:
        self._ev = threading.Event()

    def set(self) -> None:
        self._ev.set()

    def is_set(self) -> bool:
        return self._ev.is_set()


class EpisodeInterrupted(Exception):
    """The episode was stopped by a :class:`StopFlag`."""


def run_episode(
    task: TaskConfig,
    agent_factory: Callable[[], "Agent"],
    seed: int,
    *,
    env_factory: Callable[[TaskConfig], "TextEnv"] = make_env,
    keep_messages: KeepMessages = "first",
    stop: StopFlag | None = None,
) -> EpisodeResult:
    """Play one episode of ``task`` with a fresh agent on ``seed``."""
    t0 = time.perf_counter()
    env = env_factory(task)
    agent = agent_factory()
    obs, info = env.reset(seed)
    mission = str(info.get("mission") or env.mission)
    agent.reset(env, mission, seed=seed)
    limit = env.max_steps if task.max_steps is None else min(env.max_steps, task.max_steps)

    traj: list[dict] = []
    ret = 0.0
    invalid = parse_fail = 0
    ptok = ctok = calls_n = cached = 0
    cost = 0.0
    error: str | None = None
    success_flag: bool | None = None
    done = False
    faults = {"empty_replies": 0, "call_errors": 0, "clipped_texts": 0, "length_truncated": 0}
    try:
        for t in range(limit):
            if stop is not None and stop.is_set():
                error = "interrupted"
                break
            try:
                decision = agent.act(obs, info)
            except LLMConfigError:
                raise
            except LLMError as e:
                error = f"{type(e).__name__}: {e}"
                break
            step = env.step(decision.action)
            valid = bool(step.info.get("valid_action", True))
            invalid += not valid
            parse_fail += not decision.parsed
            ret += float(step.reward)
            s_ptok = sum(int(c.get("prompt_tokens") or 0) for c in decision.calls)
            s_ctok = sum(int(c.get("completion_tokens") or 0) for c in decision.calls)
            ptok += s_ptok
            ctok += s_ctok
            cost += sum(float(c.get("cost") or 0.0) for c in decision.calls)
            calls_n += len(decision.calls)
            cached += sum(bool(c.get("cached")) for c in decision.calls)
            keep = keep_messages == "all" or (keep_messages == "first" and t == 0)
            for c in decision.calls:
                err = str(c.get("error") or "")
                faults["call_errors"] += bool(err)
                faults["empty_replies"] += err.startswith("LLMReplyError")
                faults["length_truncated"] += bool(c.get("truncated"))
            clipped = [0]
            reply, reply_n = clip_text(decision.reply)
            description, desc_n = clip_text(decision.description)
            record = {
                "t": t,
                "observation": obs,
                "action": decision.action,
                "executed_action": step.info.get("executed_action", decision.action),
                "reply": reply,
                "parsed": decision.parsed,
                "valid": valid,
                "reward": step.reward,
                "done": step.done,
                "description": description,
                "prompt_tokens": s_ptok,
                "completion_tokens": s_ctok,
                "latency_s": round(sum(float(c.get("latency_s") or 0.0) for c in decision.calls), 4),
                "calls": [_compact_call(c, keep and keep_messages != "none", clipped) for c in decision.calls],
            }
            if reply_n is not None:
                record["reply_chars"] = reply_n
            if desc_n is not None:
                record["description_chars"] = desc_n
            faults["clipped_texts"] += clipped[0] + (reply_n is not None) + (desc_n is not None)
            traj.append(record)
            obs, info = step.observation, step.info
            if "success" in step.info:
                success_flag = bool(step.info["success"])
            if step.done:
                done = True
                break
        progression = float(env.progression)
        stats = dict(env.episode_stats())
    finally:
        env.close()
    success = success_flag if success_flag is not None else progression >= 1.0
    return EpisodeResult(
        task=task.name,
        seed=seed,
        mission=mission,
        success=bool(success),
        progression=progression,
        return_=ret,
        steps=len(traj),
        invalid_actions=invalid,
        prompt_tokens=ptok,
        completion_tokens=ctok,
        cost=cost,
        llm_calls=calls_n,
        wall_s=round(time.perf_counter() - t0, 3),
        env_stats=stats,
        trajectory=traj,
        error=error,
        parse_failures=parse_fail,
        cached_calls=cached,
        agent=getattr(agent, "name", ""),
        truncated=not done and error is None,
        faults=faults,
    )


def run_episodes(
    task: TaskConfig,
    agent_factory: Callable[[], "Agent"],
    seeds: Iterable[int],
    *,
    concurrency: int = 4,
    on_result: Callable[[EpisodeResult], None] | None = None,
    progress: Callable[[int, int, EpisodeResult], None] | None = None,
    keep_messages: KeepMessages = "first",
    env_factory: Callable[[TaskConfig], "TextEnv"] = make_env,
    stop: StopFlag | None = None,
) -> list[EpisodeResult]:
    """Play one episode per seed on a thread pool; results come back in seed order.

    ``on_result`` sees the episodes in completion order (seed order when ``concurrency`` is 1).

    ``on_result(result)`` and ``progress(done, total, result)`` run in the calling thread as each
    episode finishes (safe for file writes). On KeyboardInterrupt, queued episodes are cancelled,
    running ones stop at their next step, and the interrupt is re-raised (finished episodes have
    already been passed to ``on_result``).
    """
    seeds = list(seeds)
    stop = stop or StopFlag()
    results: dict[int, EpisodeResult] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="episode")
    futures: dict[Future, int] = {}
    try:
        for i, s in enumerate(seeds):
            fut = pool.submit(
                run_episode, task, agent_factory, s, env_factory=env_factory, keep_messages=keep_messages, stop=stop
            )
            futures[fut] = i
        pending = set(futures)
        while pending:
            done_set, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            # seed order within a batch (a set iterates in arbitrary order): with concurrency 1 the
            # results files are written in seed order, byte for byte the same on every run
            for fut in sorted(done_set, key=futures.__getitem__):
                res = fut.result()  # re-raises LLMConfigError and bugs
                results[futures[fut]] = res
                if on_result is not None:
                    on_result(res)
                if progress is not None:
                    progress(len(results), len(seeds), res)
    except BaseException:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [results[i] for i in range(len(seeds))]


# -- results files ---------------------------------------------------------------------------------
def write_json_atomic(path: str | Path, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    # errors="replace": a lone surrogate (e.g. from a server's error body) becomes "?" instead of
    # aborting the write
    with open(tmp, "w", encoding="utf-8", errors="replace") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    return path


def append_jsonl(path: str | Path, record: dict) -> None:
    with open(path, "a", encoding="utf-8", errors="replace") as f:  # lone surrogates -> "?"
        f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_episodes(path: str | Path) -> list[EpisodeResult]:
    """Read an ``episodes.jsonl`` (a truncated last line from a crash is skipped)."""
    out: list[EpisodeResult] = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            out.append(EpisodeResult.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return out


class RunWriter:
    """``results/<run>/``: episodes.jsonl (append + fsync), summary.json and config.json (atomic)."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.episodes_path = self.dir / "episodes.jsonl"
        self._lock = threading.Lock()
        self.count = 0

    def add(self, result: EpisodeResult) -> None:
        with self._lock:
            append_jsonl(self.episodes_path, result.to_dict())
            self.count += 1

    def write_summary(self, summary: dict) -> Path:
        return write_json_atomic(self.dir / "summary.json", summary)

    def write_config(self, config: dict) -> Path:
        return write_json_atomic(self.dir / "config.json", config)


def fault_summary(results: Iterable[Any], usage: Any = None) -> dict[str, Any]:
    """What went wrong in a run, for ``summary.json["faults"]``.

    From the episodes (EpisodeResult objects or their dicts): episodes that ended on an LLM error
    (``episodes_errored``, by exception kind), invalid actions, parse failures, empty replies, other
    call errors, replies cut by max_tokens and stored texts clipped to MAX_STORED_TEXT_CHARS. From the
    gateway's usage tracker when given: retries and errors by kind (see ``UsageTracker.faults``).
    """
    rs = list(results)

    def get(r: Any, k: str, default: Any = 0) -> Any:
        return r.get(k, default) if isinstance(r, dict) else getattr(r, k, default)

    errored: dict[str, int] = {}
    for r in rs:
        err = get(r, "error", None)
        if err:
            kind = str(err).split(":", 1)[0].strip() or "error"
            errored[kind] = errored.get(kind, 0) + 1
    out: dict[str, Any] = {
        "episodes": len(rs),
        "episodes_errored": sum(errored.values()),
        "episode_errors_by_kind": dict(sorted(errored.items())),
        "invalid_actions": sum(int(get(r, "invalid_actions") or 0) for r in rs),
        "parse_failures": sum(int(get(r, "parse_failures") or 0) for r in rs),
    }
    for k in ("empty_replies", "call_errors", "length_truncated", "clipped_texts"):
        out[k] = sum(int((get(r, "faults", None) or {}).get(k, 0)) for r in rs)
    if usage is not None and hasattr(usage, "faults"):
        g = usage.faults()
        out.update({"llm_retries": g["retries"], "llm_errors": g["errors"],
                    "llm_retries_by_kind": g["retries_by_kind"], "llm_errors_by_kind": g["errors_by_kind"]})
    return out


def evaluate(
    task: TaskConfig,
    agent_factory: Callable[[], "Agent"],
    seeds: Iterable[int],
    *,
    concurrency: int = 4,
    writer: RunWriter | None = None,
    progress: Callable[[int, int, EpisodeResult], None] | None = None,
    keep_messages: KeepMessages = "first",
    env_factory: Callable[[TaskConfig], "TextEnv"] = make_env,
    gateway: Any = None,
) -> tuple[list[EpisodeResult], dict[str, Any]]:
    """Play ``seeds`` and summarise: ``(results in seed order, scoring.summarize(results))``.

    With ``writer``, every finished episode is appended to its episodes.jsonl and the summary (plus a
    ``faults`` section, :func:`fault_summary`; with the gateway's retries/errors by kind when
    ``gateway`` is given) is written to its summary.json.
    """
    from promptevo.evaluation.statistics import summarize

    results = run_episodes(
        task, agent_factory, seeds, concurrency=concurrency, progress=progress, keep_messages=keep_messages,
        on_result=writer.add if writer is not None else None, env_factory=env_factory,
    )
    summary = summarize(results)
    if writer is not None:
        usage = getattr(gateway, "usage", None)
        writer.write_summary({"task": task.name, **summary, "faults": fault_summary(results, usage)})
    return results, summary
