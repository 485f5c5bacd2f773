"""Play episodes: one agent, one env, one seed -> an :class:`EpisodeResult` with a full trajectory.

* :func:`run_episode` builds a fresh env (``make_env(task)``) and a fresh agent (``agent_factory()``)
  per episode, so episodes can run in parallel threads; the LLM gateway is shared and thread-safe.
* Step limit: ``min(env.max_steps, task.max_steps)`` (``task.max_steps`` is an optional override).
* Success: ``info["success"]`` from the final step when the env reports it, else ``progression >= 1``.
* An :class:`~promptevo.llm.LLMError` inside an episode ends that episode with ``error`` set, and so
  does an episode in which every reply was empty (a server that returns nothing; the run goes on; :mod:`promptevo.evaluation.statistics` leaves errored episodes out of the rates and counts them).
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

Results files: :class:`~promptevo.evaluation.store.RunWriter` (the episode store of an eval run, plus
``summary.json`` / ``config.json`` written atomically).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

from promptevo.evaluation.episode import EpisodeResult
from promptevo.llm.errors import LLMConfigError, LLMContextError, LLMError
from promptevo.tasks import TaskConfig, make_env

if TYPE_CHECKING:  # pragma: no cover
    from promptevo.agents.base import Agent
    from promptevo.envs.base import TextEnv


KeepMessages = Literal["first", "all", "none"]

#: Longest reply / description / message content stored in a trajectory (characters).
MAX_STORED_TEXT_CHARS = 4000
CLIP_MARKER = "...[clipped]"


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


def _step_record(t: int, obs: str, decision: Any, step: Any, keep: bool, keep_messages: str,
                 faults: dict) -> tuple[dict, int, int]:
    """The trajectory record of one played step, with its prompt and completion tokens."""
    s_ptok = sum(int(c.get("prompt_tokens") or 0) for c in decision.calls)
    s_ctok = sum(int(c.get("completion_tokens") or 0) for c in decision.calls)
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
        "truncated": any(bool(c.get("truncated")) for c in decision.calls),  # a reply cut by the token cap
        "valid": bool(step.info.get("valid_action", True)),
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
    return record, s_ptok, s_ctok


def _loop_key(env: "TextEnv", agent: "Agent", obs: str) -> tuple | None:
    """The loop cut-off key of the state before a step, or None when the env or the agent cannot tell."""
    try:
        ek = env.state_key()
        ak = agent.state_key() if hasattr(agent, "state_key") else None
    except Exception:  # noqa: BLE001 - a key that cannot be computed just disables the cut-off
        return None
    if ek is None or ak is None:
        return None
    return (ek, ak, obs)


def run_episode(
    task: TaskConfig,
    agent_factory: Callable[[], "Agent"],
    seed: int,
    *,
    env_factory: Callable[[TaskConfig], "TextEnv"] = make_env,
    keep_messages: KeepMessages = "first",
    stop: StopFlag | None = None,
    loop_cutoff: bool = True,
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
    failure: str | None = None
    success_flag: bool | None = None
    done = False
    loop_cut: dict | None = None
    seen: dict[tuple, int] = {}
    faults = {"empty_replies": 0, "call_errors": 0, "clipped_texts": 0, "length_truncated": 0}
    try:
        t = 0
        while t < limit:
            if stop is not None and stop.is_set():
                error = "interrupted"
                break
            key = _loop_key(env, agent, obs) if loop_cutoff else None
            if key is not None:
                first = seen.get(key)
                if first is not None:  # the same state again: the rest of the episode is this cycle
                    cycle = traj[first:t]
                    replayed = 0
                    while t < limit:
                        src = cycle[(t - first) % len(cycle)]
                        step = env.step(src["action"])
                        valid = bool(step.info.get("valid_action", True))
                        invalid += not valid
                        parse_fail += not src["parsed"]
                        ret += float(step.reward)
                        traj.append({"t": t, "observation": obs, "action": src["action"],
                                     "executed_action": step.info.get("executed_action", src["action"]),
                                     "parsed": src["parsed"], "valid": valid, "reward": step.reward,
                                     "done": step.done, "replayed": True, "replay_of": src["t"]})
                        obs, info = step.observation, step.info
                        replayed += 1
                        t += 1
                        if "success" in step.info:
                            success_flag = bool(step.info["success"])
                        if step.done:
                            done = True
                            break
                    loop_cut = {"at": len(traj) - replayed, "first": first, "period": len(cycle),
                                "replayed_steps": replayed}
                    break
                seen[key] = t
            try:
                decision = agent.act(obs, info)
            except LLMContextError as e:
                failure = f"context overflow at step {t}: {e}"
                break
            except LLMConfigError:
                raise
            except LLMError as e:
                error = f"{type(e).__name__}: {e}"
                break
            step = env.step(decision.action)
            keep = keep_messages == "all" or (keep_messages == "first" and t == 0)
            record, s_ptok, s_ctok = _step_record(t, obs, decision, step, keep, keep_messages, faults)
            invalid += not record["valid"]
            parse_fail += not decision.parsed
            ret += float(step.reward)
            ptok += s_ptok
            ctok += s_ctok
            cost += sum(float(c.get("cost") or 0.0) for c in decision.calls)
            calls_n += len(decision.calls)
            cached += sum(bool(c.get("cached")) for c in decision.calls)
            traj.append(record)
            obs, info = step.observation, step.info
            t += 1
            if "success" in step.info:
                success_flag = bool(step.info["success"])
            if step.done:
                done = True
                break
        progression = float(env.progression)
        stats = dict(env.episode_stats())
        try:
            progress = env.progress()
            if hasattr(env, "plan_lengths"):  # BabyAI: the bot's remaining plan at the start and the end
                start, end = env.plan_lengths()
                stats["progress_detail"] = {"plan_start": start, "plan_end": end}
        except Exception:  # noqa: BLE001 - the dense signal is optional; success stands in for it
            progress = None
    finally:
        env.close()
    if error is None and calls_n and faults["empty_replies"] >= calls_n:  # the server answered nothing, ever
        error = f"LLMReplyError: all {calls_n} replies of the episode were empty (the server returns nothing)"
    success = success_flag if success_flag is not None else progression >= 1.0
    if progress is not None:
        progress = 1.0 if success else max(0.0, min(1.0, float(progress)))
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
        progress=progress,
        failure=failure,
        loop_cut=loop_cut,
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
    loop_cutoff: bool = True,
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
                run_episode, task, agent_factory, s, env_factory=env_factory, keep_messages=keep_messages, stop=stop,
                loop_cutoff=loop_cutoff,
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


def fault_summary(results: Iterable[Any], usage: Any = None) -> dict[str, Any]:
    """What went wrong in a run, for ``summary.json["faults"]``.

    From the episodes (EpisodeResult objects or their dicts): episodes that ended on an LLM error
    (``episodes_errored``, by exception kind, and the first one's message), invalid actions, parse failures, empty replies, other
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
    first = next((str(get(r, "error", None)) for r in rs if get(r, "error", None)), None)
    out: dict[str, Any] = {
        "episodes": len(rs),
        "episodes_errored": sum(errored.values()),
        "first_error": " ".join(first.split())[:200] if first else None,
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
    writer: Any = None,
    progress: Callable[[int, int, EpisodeResult], None] | None = None,
    keep_messages: KeepMessages = "first",
    env_factory: Callable[[TaskConfig], "TextEnv"] = make_env,
    gateway: Any = None,
    loop_cutoff: bool = True,
) -> tuple[list[EpisodeResult], dict[str, Any]]:
    """Play ``seeds`` and summarise: ``(results in seed order, scoring.summarize(results))``.

    With ``writer``, every finished episode is appended to its episodes.jsonl and the summary (plus a
    ``faults`` section, :func:`fault_summary`; with the gateway's retries/errors by kind when
    ``gateway`` is given) is written to its summary.json.
    """
    from promptevo.evaluation.statistics import summarize

    results = run_episodes(
        task, agent_factory, seeds, concurrency=concurrency, progress=progress, keep_messages=keep_messages,
        on_result=writer.add if writer is not None else None, env_factory=env_factory, loop_cutoff=loop_cutoff,
    )
    summary = summarize(results)
    if writer is not None:
        usage = getattr(gateway, "usage", None)
        writer.write_summary({"task": task.name, **summary, "faults": fault_summary(results, usage)})
    return results, summary
