"""promptevo performance figures, each measured as a ratio within one run (the machine is noisy).

    python benchmarks/run.py [--quick] [--local-model local/NAME] [--out benchmarks/results.json]

1. overhead   framework time per step beside a zero-latency test-double LLM (``fake/scripted``,
              ScriptedLLM, cache off): BabyAI episodes with the robust-cot agent through the real
              Gateway; everything except the LLM call, as a % of a 200 ms LLM call (goal < 1 %).
              Broken down into env, LiteLLM (inside ``litellm.completion``) and promptevo's own code,
              plus the extra cost of the response cache on a miss and the cost of a step on a hit.
2. env        BabyAI text-env steps/s (``benchmarks/env_throughput.measure``; goal 20,000/s).
3. concurrency rollout steps/s at concurrency 1/2/4/8 against a fake OpenAI-compatible server
              (``benchmarks/fake_openai_server.py`` in a child process, fixed 100 ms reply) reached
              through LiteLLM as ``openai/fake``; speed-up relative to concurrency 1 (goal >= 0.8 N).
4. cache      wall time of evaluating episodes against the fake server with a fresh cache, divided by
              the wall time of re-evaluating the same prompt and seeds (goal >= 50x).
5. local      generation tokens/s of a local GGUF model through promptevo's Gateway vs raw
              llama-cpp-python on the same file, prompt, max_tokens and greedy settings (goal: within
              10 %), as tokens per CPU second of this process (wall-clock ratios shown too), one
              llama.cpp thread each. Skipped with a note when no local model is installed.

Prints a rich table and writes benchmarks/results.json. About 1.5-3 minutes (most of it figure 5 with
qwen2.5-coder-1.5b); ``--quick`` (smollm2-135m for figure 5) about 25 s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import promptevo  # noqa: E402,F401  (offline LiteLLM defaults)
from env_throughput import GOAL_STEPS_PER_S, measure as measure_env  # noqa: E402
from fake_openai_server import FakeServerProcess  # noqa: E402

from promptevo.llm import gateway as llm_mod  # noqa: E402
from promptevo.llm.providers import litellm_module  # noqa: E402
from promptevo.agents import agent_factory  # noqa: E402
from promptevo.envs.babyai.env import BABYAI_GOALS  # noqa: E402
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM  # noqa: E402
from promptevo.evaluation.rollout import run_episode, run_episodes  # noqa: E402
from promptevo.tasks import TaskConfig, load_task  # noqa: E402

REALISTIC_LLM_S = 0.200
REPLY = "<|ACTION|>go forward<|END|>"  # the scripted test double's reply (figure 1)
SERVER_REPLY = "<|ACTION|>turn left<|END|>"  # fake server: turning in place (almost) never ends a goto episode early (3, 4)
FAKE_DELAY_S = 0.100
AGENT = "robust-cot"


@dataclass
class Sizes:
    overhead_episodes: int = 12
    overhead_reps: int = 3
    env_steps: int = 20_000
    conc_levels: tuple[int, ...] = (1, 2, 4, 8)
    conc_episodes_per_worker: int = 3
    conc_max_steps: int = 10
    cache_episodes: int = 8
    cache_max_steps: int = 10
    cache_concurrency: int = 4
    local_max_tokens: int = 32
    local_rounds: int = 4
    local_default: str | None = None  # None: qwen2.5-coder-1.5b if installed, else smollm2-135m


QUICK = Sizes(overhead_episodes=4, overhead_reps=2, env_steps=3_000, conc_episodes_per_worker=2,
              conc_max_steps=5, cache_episodes=8, cache_max_steps=10, local_max_tokens=24, local_rounds=3,
              local_default="local/smollm2-135m")


def small_task(goal: str = "goto", max_steps: int | None = None) -> TaskConfig:
    task = load_task(goal)
    return task if max_steps is None else task.model_copy(update={"max_steps": max_steps})


# ------------------------------------------------------------------------------------------ 1. overhead


class _Timers:
    """Accumulated seconds spent in litellm.completion, the test-double responder and env.step."""

    def __init__(self) -> None:
        self.litellm = self.llm = self.env = 0.0

    def reset(self) -> None:
        self.litellm = self.llm = self.env = 0.0


@contextmanager
def _instrumented(timers: _Timers) -> Iterator[Callable[[TaskConfig], Any]]:
    """Time ``litellm.completion`` (patched on the module the gateway calls) and env steps."""
    from promptevo.tasks import make_env

    lit = litellm_module()
    orig = lit.completion

    def timed_completion(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return orig(*a, **kw)
        finally:
            timers.litellm += time.perf_counter() - t

    def env_factory(task: TaskConfig) -> Any:
        env = make_env(task)
        step = env.step

        def timed_step(action: str) -> Any:
            t = time.perf_counter()
            try:
                return step(action)
            finally:
                timers.env += time.perf_counter() - t

        env.step = timed_step  # type: ignore[method-assign]
        return env

    lit.completion = timed_completion
    try:
        yield env_factory
    finally:
        lit.completion = orig


def _per_step_run(task: TaskConfig, factory: Callable[[], Any], seeds: list[int], timers: _Timers,
                  env_factory: Callable[[TaskConfig], Any]) -> dict[str, float]:
    timers.reset()
    t0, c0 = time.perf_counter(), time.process_time()
    steps = cached = 0
    for s in seeds:
        r = run_episode(task, factory, s, env_factory=env_factory)
        if r.error:
            raise RuntimeError(f"overhead episode failed: {r.error}")
        steps += r.steps
        cached += r.cached_calls
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"steps": steps, "wall_s": wall, "step_s": wall / steps, "cpu_step_s": cpu / steps,
            "litellm_s": timers.litellm / steps, "llm_s": timers.llm / steps, "env_s": timers.env / steps,
            "cached_calls": cached}


def _cache_miss_cost(gw: Gateway, message_lists: list[list[dict]]) -> float:
    """Seconds per call the response cache adds on a miss: key + lookup (miss) + write."""
    from promptevo.llm import Completion

    assert gw.cache is not None
    comp = Completion(text=REPLY, prompt_tokens=100, completion_tokens=7, cost=0.0, latency_s=0.2,
                      cached=False, model=gw.config.model).to_dict()
    t0 = time.perf_counter()
    for msgs in message_lists:
        key = gw._key(msgs, 0.0, gw.config.max_tokens, None, None, None)
        if gw.cache.get(key) is None:
            gw.cache.put(key, comp)
    return (time.perf_counter() - t0) / len(message_lists)


def bench_overhead(episodes: int = 12, reps: int = 3, goal: str = "goto", max_steps: int | None = None) -> dict:
    """Per-step framework time with an instant test-double LLM (cache off), plus the cache's costs."""
    task = small_task(goal, max_steps)
    seeds = list(range(episodes))
    timers = _Timers()

    def responder(messages: list[dict]) -> str:
        t = time.perf_counter()
        out = REPLY
        timers.llm += time.perf_counter() - t
        return out

    runs: dict[str, list[dict]] = {"off": [], "hit": []}
    miss_costs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="promptevo-bench-") as tmp, ScriptedLLM.install(responder), \
            _instrumented(timers) as env_factory:
        gw_off = Gateway(LLMConfig(model="fake/scripted", cache_dir=None, num_retries=0))
        fac_off = agent_factory(AGENT, gw_off, task=task)
        warm = run_episode(task, fac_off, seeds[0], env_factory=env_factory, keep_messages="all")
        message_lists = [c["messages"] for step in warm.trajectory for c in step["calls"]]
        for rep in range(reps):
            runs["off"].append(_per_step_run(task, fac_off, seeds, timers, env_factory))
            with Gateway(LLMConfig(model="fake/scripted", cache_dir=os.path.join(tmp, f"c{rep}"),
                                   num_retries=0)) as gw_on:
                miss_costs.append(_cache_miss_cost(gw_on, message_lists))
                fac_on = agent_factory(AGENT, gw_on, task=task)
                _per_step_run(task, fac_on, seeds, timers, env_factory)  # fill the cache
                runs["hit"].append(_per_step_run(task, fac_on, seeds, timers, env_factory))
        gw_off.close()

    def med(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[kind])

    step = med("off", "step_s")
    llm = med("off", "llm_s")
    lit = med("off", "litellm_s") - llm  # the responder runs inside litellm.completion
    env = med("off", "env_s")
    overhead = step - llm
    own = overhead - lit - env
    return {
        "agent": AGENT, "goal": goal, "episodes": episodes, "reps": reps,
        "steps_per_rep": runs["off"][0]["steps"],
        "step_ms": step * 1e3,
        "overhead_ms": overhead * 1e3,
        "overhead_pct_of_200ms": 100 * overhead / REALISTIC_LLM_S,
        "cpu_step_ms": med("off", "cpu_step_s") * 1e3,
        "litellm_ms": lit * 1e3,
        "env_ms": env * 1e3,
        "promptevo_ms": own * 1e3,
        "promptevo_pct_of_200ms": 100 * own / REALISTIC_LLM_S,
        "cache_miss_cost_ms": statistics.median(miss_costs) * 1e3,
        "cache_hit_step_ms": med("hit", "step_s") * 1e3,
        "runs": runs,
    }


# ------------------------------------------------------------------------------------------ 2. env


def bench_env(steps: int = 20_000, goals: tuple[str, ...] = tuple(BABYAI_GOALS)) -> dict:
    rows = [measure_env(g, steps) for g in goals]
    total = sum(r["steps"] for r in rows)
    wall = sum(r["wall_s"] for r in rows)
    cpu = sum(r["cpu_s"] for r in rows)
    return {"steps_per_s": total / wall, "steps_per_cpu_s": total / max(cpu, 1e-9),
            "goal_steps_per_s": GOAL_STEPS_PER_S, "per_goal": rows}


# ------------------------------------------------------------------------------------------ 3. concurrency


def _eval_wall(task: TaskConfig, gw: Gateway, seeds: list[int], concurrency: int) -> dict:
    fac = agent_factory(AGENT, gw, task=task)
    t0 = time.perf_counter()
    results = run_episodes(task, fac, seeds, concurrency=concurrency)
    wall = time.perf_counter() - t0
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"{len(errors)} episode(s) failed: {errors[0]}")
    steps = sum(r.steps for r in results)
    return {"episodes": len(seeds), "steps": steps, "wall_s": wall, "steps_per_s": steps / wall,
            "episodes_per_s": len(seeds) / wall, "cached_calls": sum(r.cached_calls for r in results),
            "llm_calls": sum(r.llm_calls for r in results)}


def http_call_costs(api_base: str, calls: int = 8, delay_s: float = FAKE_DELAY_S) -> dict:
    """Median ms per call beyond the server's delay: openai client vs litellm vs Gateway (alternated)."""
    import openai

    msgs = [{"role": "user", "content": "Observation: a wall 2 steps forward. " * 40}]
    client = openai.OpenAI(base_url=api_base, api_key=llm_mod.PLACEHOLDER_LOCAL_KEY, max_retries=0)
    lit = litellm_module()
    gw = Gateway(LLMConfig(model="openai/fake", api_base=api_base, cache_dir=None, num_retries=0))
    fns: dict[str, Callable[[], Any]] = {
        "openai_client": lambda: client.chat.completions.create(model="fake", messages=msgs, temperature=0.0,
                                                                max_tokens=512),
        "litellm": lambda: lit.completion(model="openai/fake", api_base=api_base, messages=msgs, temperature=0.0,
                                          max_tokens=512, api_key=llm_mod.PLACEHOLDER_LOCAL_KEY, num_retries=0),
        "gateway": lambda: gw.complete(msgs),
    }
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn()  # warm-up: client set-up, first connection
    for _ in range(calls):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t - delay_s)
    gw.close()
    client.close()
    return {f"{k}_ms": 1e3 * statistics.median(v) for k, v in times.items()}


def bench_concurrency(api_base: str, levels: tuple[int, ...] = (1, 2, 4, 8), episodes_per_worker: int = 3,
                      max_steps: int = 10, delay_s: float = FAKE_DELAY_S, http_calls: int = 8) -> dict:
    task = small_task("goto", max_steps)
    rows = []
    for n in levels:
        with Gateway(LLMConfig(model="openai/fake", api_base=api_base, cache_dir=None, num_retries=0,
                               concurrency=n, timeout=30.0)) as gw:
            gw.complete([{"role": "user", "content": "warm-up"}])  # client set-up, first connection
            row = _eval_wall(task, gw, list(range(n * episodes_per_worker)), n)
        row["concurrency"] = n
        rows.append(row)
    base = rows[0]["steps_per_s"]
    for row in rows:
        row["speedup"] = row["steps_per_s"] / base
        row["efficiency"] = row["speedup"] / (row["concurrency"] / rows[0]["concurrency"])
    out = {"delay_s": delay_s, "max_steps": max_steps, "ideal_steps_per_s_at_1": 1 / delay_s, "levels": rows}
    if http_calls:
        out["per_call_beyond_delay"] = http_call_costs(api_base, http_calls, delay_s)
    return out


# ------------------------------------------------------------------------------------------ 4. cache


def bench_cache(api_base: str, episodes: int = 8, max_steps: int = 10, concurrency: int = 4) -> dict:
    task = small_task("goto", max_steps)
    seeds = list(range(episodes))
    with tempfile.TemporaryDirectory(prefix="promptevo-bench-cache-") as tmp:
        cfg = LLMConfig(model="openai/fake", api_base=api_base, cache_dir=tmp, num_retries=0,
                        concurrency=concurrency, timeout=30.0)
        with Gateway(cfg) as gw:
            gw.complete([{"role": "user", "content": "warm-up"}], max_tokens=7)
            cold = _eval_wall(task, gw, seeds, concurrency)
        with Gateway(cfg) as gw:  # a later run: new gateway, same cache directory
            warm = _eval_wall(task, gw, seeds, concurrency)
    if warm["cached_calls"] != warm["llm_calls"]:
        raise RuntimeError(f"re-evaluation missed the cache: {warm['cached_calls']}/{warm['llm_calls']} hits")
    return {"episodes": episodes, "max_steps": max_steps, "concurrency": concurrency, "cold": cold,
            "warm": warm, "speedup": cold["wall_s"] / warm["wall_s"],
            "warm_step_ms": 1e3 * warm["wall_s"] / warm["steps"]}


# ------------------------------------------------------------------------------------------ 5. local model

LOCAL_MESSAGES = [
    {"role": "system", "content": "You steer a robot in a grid world. Think briefly, then answer with "
                                  "<|ACTION|>one action<|END|>. Actions: turn left, turn right, go forward, "
                                  "pick up, drop, toggle."},
    {"role": "user", "content": "Mission: go to the red ball.\nObservation: a wall 3 steps forward, a red "
                                "ball 2 steps left and 1 step forward. First describe the room and your plan in "
                                "three full sentences, then act."},
]


def pick_local_model(preferred: str | None = None, strict: bool = True) -> tuple[str | None, str]:
    """(model string, note): ``preferred`` if installed (``strict=False``: else qwen2.5-coder-1.5b,
    else smollm2-135m); ``(None, reason)`` when there is nothing to run."""
    try:
        from promptevo.llm.local import list_local_models
    except ImportError as e:
        return None, f"promptevo.llm.local unavailable: {e}"
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return None, "llama-cpp-python not installed"
    installed = {m.model for m in list_local_models(include_unknown=False) if m.installed}
    fallbacks = [] if strict and preferred else ["local/qwen2.5-coder-1.5b", "local/smollm2-135m"]
    for cand in [preferred, *fallbacks]:
        if cand and cand in installed:
            return cand, ""
    if preferred and strict:
        return None, f"{preferred} is not installed (installed: {', '.join(sorted(installed)) or 'none'})"
    return None, "no local model installed (see `promptevo models`)"


def bench_local(model: str, max_tokens: int = 32, rounds: int = 4, n_threads: int = 1) -> dict:
    """Alternate raw llama-cpp-python and Gateway calls (same prompt, greedy); compare tokens/s.

    Both sides use their own ``llama_cpp.Llama`` on the same GGUF with the same options (n_ctx,
    ``n_threads``, chat format); after one warm-up call each, the identical prompt comes from
    llama.cpp's prefix reuse on both sides, so a call is generation plus per-call overhead. The
    figure is the ratio of the best (least disturbed) call of each side; the median of the per-round
    ratios is reported too. One thread by default: on a busy 2-core machine llama.cpp's per-layer
    thread barriers stall whenever one of its threads is descheduled, which swamps the comparison.
    """
    import llama_cpp

    from promptevo.llm import local as lm

    lm.configure(n_threads=n_threads)
    resolved = lm.resolve_model(model)
    raw = llama_cpp.Llama(model_path=str(resolved.path), n_ctx=lm.OPTIONS.n_ctx, n_threads=n_threads,
                          n_threads_batch=n_threads, chat_format=resolved.chat_format, verbose=False)
    gw = Gateway(LLMConfig(model=model, cache_dir=None, temperature=0.0, max_tokens=max_tokens, num_retries=0))

    def raw_call() -> tuple[float, float, int, str]:
        t, c = time.perf_counter(), time.process_time()
        out = raw.create_chat_completion(messages=LOCAL_MESSAGES, max_tokens=max_tokens, temperature=0.0)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        return wall, cpu, int(out["usage"]["completion_tokens"]), out["choices"][0]["message"]["content"] or ""

    def gw_call() -> tuple[float, float, int, str]:
        t, c = time.perf_counter(), time.process_time()
        comp = gw.complete(LOCAL_MESSAGES)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        return wall, cpu, comp.completion_tokens, comp.text

    t0 = time.perf_counter()
    raw_call()
    gw_call()  # warm-up: loads the gateway's model, fills both prompt caches
    warm_s = time.perf_counter() - t0
    tps: dict[str, dict[str, list[float]]] = {"raw": {"wall": [], "cpu": []}, "gateway": {"wall": [], "cpu": []}}
    texts: dict[str, set[str]] = {"raw": set(), "gateway": set()}
    tokens: set[int] = set()
    calls = {"raw": raw_call, "gateway": gw_call}
    for i in range(rounds):
        for side in (("raw", "gateway") if i % 2 == 0 else ("gateway", "raw")):
            wall, cpu, ntok, text = calls[side]()
            tps[side]["wall"].append(ntok / wall)
            tps[side]["cpu"].append(ntok / max(cpu, 1e-9))
            texts[side].add(text.strip())
            tokens.add(ntok)
    gw.close()
    raw.close()
    lm.unload_all()  # free both models now, not at interpreter exit (llama_cpp's __del__ fails then)
    gc.collect()
    med = {side: {k: statistics.median(v) for k, v in d.items()} for side, d in tps.items()}
    best = {side: max(d["wall"]) for side, d in tps.items()}
    return {"model": model, "max_tokens": max_tokens, "rounds": rounds, "n_threads": n_threads,
            "completion_tokens": max(tokens), "same_tokens": len(tokens) == 1,
            "same_text": texts["raw"] == texts["gateway"] and len(texts["raw"]) == 1,
            "raw_tokens_per_cpu_s": med["raw"]["cpu"], "gateway_tokens_per_cpu_s": med["gateway"]["cpu"],
            "ratio_cpu": med["gateway"]["cpu"] / med["raw"]["cpu"],
            "raw_tokens_per_s_best": best["raw"], "gateway_tokens_per_s_best": best["gateway"],
            "ratio_wall_best": best["gateway"] / best["raw"],
            "ratio_wall_median": med["gateway"]["wall"] / med["raw"]["wall"],
            "per_call_tokens_per_s": tps, "warmup_s": warm_s}


# ------------------------------------------------------------------------------------------ report


def figures(res: dict) -> list[dict]:
    """One row per figure: name, value (text), goal (text), passed (bool | None for informational)."""
    rows: list[dict] = []

    def add(name: str, value: str, goal: str = "", passed: bool | None = None) -> None:
        rows.append({"figure": name, "value": value, "goal": goal, "passed": passed})

    if "overhead" in res:
        o = res["overhead"]
        add("1. framework overhead / step (fake LLM, cache off)",
            f"{o['overhead_ms']:.2f} ms = {o['overhead_pct_of_200ms']:.2f}% of 200 ms", "< 1%",
            o["overhead_pct_of_200ms"] < 1.0)
        add("   of which LiteLLM (inside litellm.completion)", f"{o['litellm_ms']:.2f} ms")
        add("   of which BabyAI env.step", f"{o['env_ms']:.3f} ms")
        add("   of which promptevo (agent, gateway, rollout)",
            f"{o['promptevo_ms']:.2f} ms = {o['promptevo_pct_of_200ms']:.2f}% of 200 ms", "< 1%",
            o["promptevo_pct_of_200ms"] < 1.0)
        add("   same in CPU time (all threads; robust to load)",
            f"{o['cpu_step_ms']:.2f} ms = {o['cpu_step_ms'] / 2:.2f}% of 200 ms", "< 1%", o["cpu_step_ms"] / 2 < 1.0)
        add("   response cache on a miss (key + lookup + write)", f"{o['cache_miss_cost_ms']:.3f} ms")
        add("   whole step on a cache hit", f"{o['cache_hit_step_ms']:.2f} ms")
    if "env" in res:
        e = res["env"]
        add("2. BabyAI text-env steps/s (wall)", f"{e['steps_per_s']:,.0f}", f">= {e['goal_steps_per_s']:,}",
            e["steps_per_s"] >= e["goal_steps_per_s"])
        add("   per CPU second (robust to load)", f"{e['steps_per_cpu_s']:,.0f}")
    if "concurrency" in res:
        levels = res["concurrency"]["levels"]
        base = levels[0]
        add(f"3. rollout steps/s, concurrency {base['concurrency']} (fake server {res['concurrency']['delay_s'] * 1e3:.0f} ms)",
            f"{base['steps_per_s']:.2f} (ideal {1 / res['concurrency']['delay_s']:.1f})")
        extra = (1 / base["steps_per_s"] - res["concurrency"]["delay_s"]) * 1e3
        add("   time / step beyond the server's delay (HTTP path)", f"{extra:.1f} ms = {extra / 2:.2f}% of 200 ms")
        pc = res["concurrency"].get("per_call_beyond_delay")
        if pc:
            add("   per call beyond delay: openai client / litellm / gateway",
                f"{pc['openai_client_ms']:.1f} / {pc['litellm_ms']:.1f} / {pc['gateway_ms']:.1f} ms")
        for row in levels[1:]:
            n = row["concurrency"] / base["concurrency"]
            add(f"   concurrency {row['concurrency']}: speed-up vs 1", f"{row['speedup']:.2f}x ({row['steps_per_s']:.1f}/s)",
                f">= {0.8 * n:.1f}x", row["speedup"] >= 0.8 * n)
    if "cache" in res:
        c = res["cache"]
        add(f"4. cache speed-up, re-evaluating {c['episodes']} episodes", f"{c['speedup']:.0f}x "
            f"({c['cold']['wall_s']:.2f} s -> {c['warm']['wall_s'] * 1e3:.0f} ms, {c['warm_step_ms']:.2f} ms/step)",
            ">= 50x", c["speedup"] >= 50)
    if "local" in res:
        loc = res["local"]
        if loc.get("skipped"):
            add("5. local model tokens/s, gateway vs raw", f"skipped: {loc['skipped']}", "within 10%", None)
        else:
            ok = loc["ratio_cpu"] >= 0.90
            add(f"5. local tokens/s gateway/raw ({loc['model']}, {loc['completion_tokens']} tok, per CPU s)",
                f"{loc['ratio_cpu']:.3f} ({loc['gateway_tokens_per_cpu_s']:.1f} vs {loc['raw_tokens_per_cpu_s']:.1f})",
                ">= 0.90", ok)
            add("   same, wall clock: best call / median", f"{loc['ratio_wall_best']:.3f} / {loc['ratio_wall_median']:.3f} "
                f"({loc['gateway_tokens_per_s_best']:.1f} vs {loc['raw_tokens_per_s_best']:.1f} tok/s best)")
    return rows


def print_table(rows: list[dict], title: str) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency of promptevo
        for r in rows:
            print(f"{r['figure']:<60} {r['value']:<45} {r['goal']:<10} {_verdict(r['passed'])}")
        return
    table = Table(title=title)
    for col in ("Figure", "Value", "Goal", "Pass"):
        table.add_column(col)
    for r in rows:
        v = _verdict(r["passed"])
        style = {"PASS": "green", "FAIL": "red"}.get(v, "")
        table.add_row(r["figure"], r["value"], r["goal"], f"[{style}]{v}[/{style}]" if style else v)
    Console().print(table)


def _verdict(passed: bool | None) -> str:
    return "" if passed is None else ("PASS" if passed else "FAIL")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (under a minute)")
    ap.add_argument("--local-model", default=None, help="local/NAME for figure 5 (default: qwen2.5-coder-1.5b "
                                                         "if installed, else smollm2-135m; --quick: smollm2-135m)")
    ap.add_argument("--local-threads", type=int, default=1, help="llama.cpp threads, both sides (default 1)")
    ap.add_argument("--skip", action="append", default=[], choices=["overhead", "env", "concurrency", "cache", "local"])
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args(argv)
    sz = QUICK if args.quick else Sizes()
    t_start = time.perf_counter()
    res: dict[str, Any] = {}
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    def stage(name: str, fn: Callable[[], dict]) -> None:
        if name in args.skip:
            return
        t = time.perf_counter()
        print(f"[{name}] ...", flush=True)
        res[name] = fn()
        res[name]["bench_wall_s"] = round(time.perf_counter() - t, 2)

    stage("overhead", lambda: bench_overhead(sz.overhead_episodes, sz.overhead_reps))
    stage("env", lambda: bench_env(sz.env_steps))
    if not {"concurrency", "cache"} <= set(args.skip):
        with FakeServerProcess(delay=FAKE_DELAY_S, reply=SERVER_REPLY, max_seconds=240) as server:
            stage("concurrency", lambda: bench_concurrency(server.api_base, sz.conc_levels,
                                                           sz.conc_episodes_per_worker, sz.conc_max_steps))
            stage("cache", lambda: bench_cache(server.api_base, sz.cache_episodes, sz.cache_max_steps,
                                               sz.cache_concurrency))
    if "local" not in args.skip:
        wanted = args.local_model if not args.local_model or "/" in args.local_model else f"local/{args.local_model}"
        model, note = pick_local_model(wanted or sz.local_default, strict=bool(wanted))
        if model is None:
            res["local"] = {"skipped": note}
        else:
            stage("local", lambda: bench_local(model, sz.local_max_tokens, sz.local_rounds,
                                                   args.local_threads))

    rows = figures(res)
    total = time.perf_counter() - t_start
    print_table(rows, f"promptevo benchmarks ({'quick' if args.quick else 'full'}, {total:.0f} s, "
                      f"load avg {load0 if load0 is None else round(load0, 1)}, {os.cpu_count()} CPUs)")
    report = {
        "mode": "quick" if args.quick else "full",
        "total_wall_s": round(total, 1),
        "load_avg_1m_start": load0,
        "load_avg_1m_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "figures": rows,
        "results": res,
    }
    Path(args.out).write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
