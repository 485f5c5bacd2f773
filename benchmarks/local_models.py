"""Compare the installed offline GGUF models (run by hand; several minutes on a 2-core CPU).

    python benchmarks/local_models.py [--models qwen2.5-coder-1.5b,smollm2-135m] [--out benchmarks/local_models.json]

For each installed model of promptevo/data/local_models.toml (or --model-path FILE) it measures:
  * resolve_s / load_s: chunk join + sha check (cached after the first run) and llama.cpp load time;
  * prompt tok/s and generation tok/s (median of 2, no prefix reuse);
  * one-step BabyAI-style probes: how often the reply is exactly one valid action, free-form and with a
    GBNF grammar limited to the action list, and how often it is the right action;
  * per-step latency of a ~600-token system prompt + a short changing user turn:
      - "no_reuse": KV cache dropped before every call,
      - "prefix":   llama.cpp reuses the KV of the previous call for the shared prefix (default),
      - "prefix+ram": as "prefix" plus llama_cpp.LlamaRAMCache,
    and, for two interleaved system prompts (two episodes or two agent modules taking turns),
      - "interleaved": prefix reuse only, "interleaved+ram": plus LlamaRAMCache.
Results go to a JSON file and a markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptevo.llm import local as lm  # noqa: E402

ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]
ACTION_GRAMMAR = "root ::= " + " | ".join(f'"{a}"' for a in ACTIONS)

PROBE_SYSTEM = (
    "You steer a robot in a small grid world seen from above. Each turn you get the mission and a list "
    "of what the robot sees, with distances counted from the robot's own position and facing direction. "
    "Possible actions: turn left, turn right, go forward, pick up, drop, toggle. 'pick up' and 'toggle' act "
    "on the cell right in front of the robot (1 step forward); 'toggle' opens doors. "
    "Reply with exactly one action and nothing else."
)

# (mission, observation, acceptable actions)
PROBES: list[tuple[str, str, set[str]]] = [
    ("pick up the red ball", "a red ball 1 step forward", {"pick up"}),
    ("go to the blue key", "a blue key 3 steps forward", {"go forward"}),
    ("pick up the green box", "a green box 1 step left", {"turn left"}),
    ("go to the purple ball", "a purple ball 2 steps right", {"turn right"}),
    ("open the yellow door", "a closed yellow door 1 step forward", {"toggle"}),
    ("put the grey key down", "you are carrying a grey key; the cell 1 step forward is empty", {"drop"}),
    ("go to the green door", "a wall 1 step forward; a green door 4 steps right", {"turn right"}),
    ("pick up the yellow key", "a yellow key 2 steps forward", {"go forward"}),
    ("go to the red box", "a red box 2 steps behind you", {"turn left", "turn right"}),
    ("pick up the blue ball", "a blue ball 3 steps left and 1 step forward", {"turn left", "go forward"}),
]

LONG_RULES = [
    "You control an agent in a BabyAI-style grid world, shown to you as text.",
    "The world is a grid of square cells surrounded by walls. Some rooms are joined by doors.",
    "Objects are balls, boxes and keys, each with one of six colours: red, green, blue, purple, yellow, grey.",
    "Doors can be open, closed or locked; a locked door opens only with the key of the same colour.",
    "The agent faces one of four directions and sees a 7 by 7 square in front of it; walls block the view.",
    "Every observation lists the visible things with their position relative to the agent: how many steps "
    "forward and how many steps left or right.",
    "Actions: 'turn left' and 'turn right' rotate the agent by a quarter turn without moving it.",
    "'go forward' moves one cell ahead unless the cell is a wall, a closed door or an object.",
    "'pick up' takes the object in the cell right in front of the agent; the agent carries one object at most.",
    "'drop' puts the carried object in the empty cell in front of the agent.",
    "'toggle' opens or closes the door in front of the agent, or opens a box.",
    "A mission such as 'go to the red ball' is done when the agent faces the object from the next cell.",
    "A mission such as 'pick up the blue key' is done when the agent holds that object.",
    "A mission such as 'open the yellow door' is done when that door is open.",
    "A mission such as 'put the green ball next to the grey box' is done when the first object lies on a "
    "cell next to the second.",
    "Missions can be chained with 'and', 'then' or 'after you'; do the parts in the stated order.",
    "The episode ends after a fixed number of steps; fewer steps give a higher reward.",
    "Plan the shortest path: turn towards the target first, then go forward until it is in front of you.",
    "If a wall is right in front of you, going forward wastes a step; turn instead.",
    "If the target is not visible, explore: walk through open doors and turn to look around.",
    "Keep track of what you carry; drop an object before picking up another one.",
    "Reply with one action only, written exactly as listed, in lower case, with no punctuation.",
]

STEP_TURNS = [
    "Mission: go to the red ball.\nYou see: a red ball 3 steps forward and 1 step left; a wall 4 steps forward.",
    "Mission: go to the red ball.\nYou see: a red ball 2 steps forward and 1 step left; a wall 3 steps forward.",
    "Mission: go to the red ball.\nYou see: a red ball 1 step forward and 1 step left; a wall 2 steps forward.",
    "Mission: go to the red ball.\nYou see: a red ball 1 step left; a wall 1 step forward.",
    "Mission: go to the red ball.\nYou see: a red ball 1 step forward; a wall 2 steps right.",
]


def long_system_prompt(llm: Any, target_tokens: int = 600, variant: int = 0) -> str:
    """The game rules repeated with numbered sections until the prompt has ~target_tokens tokens."""
    lines: list[str] = [f"Instructions (set {variant})."]
    i = 0
    while True:
        section = f"{i // len(LONG_RULES) + 1}.{i % len(LONG_RULES) + 1} {LONG_RULES[i % len(LONG_RULES)]}"
        trial = "\n".join([*lines, section])
        if len(llm.tokenize(trial.encode())) > target_tokens:
            return "\n".join(lines)
        lines.append(section)
        i += 1


def normalize(reply: str) -> str:
    return reply.strip().strip(".!\"'`").strip().lower()


def timed_completion(llm: Any, prompt: str, max_tokens: int) -> tuple[float, int, int]:
    llm.reset()  # no prefix reuse
    t0 = time.perf_counter()
    out = llm.create_completion(prompt, max_tokens=max_tokens, temperature=0.0)
    dt = time.perf_counter() - t0
    return dt, out["usage"]["prompt_tokens"], out["usage"]["completion_tokens"]


def measure_speed(llm: Any, system: str) -> dict[str, float]:
    prompt = system + "\n\nNow count from 1 to 200, separated by commas: 1, 2, 3,"
    p_rates, g_rates = [], []
    for _ in range(2):
        t1, n_prompt, _ = timed_completion(llm, prompt, 1)
        tn, _, n_gen = timed_completion(llm, prompt, 64)
        p_rates.append(n_prompt / t1)
        if n_gen > 1 and tn > t1:
            g_rates.append((n_gen - 1) / (tn - t1))
    return {
        "prompt_tokens": n_prompt,
        "prompt_tok_s": round(statistics.median(p_rates), 1),
        "gen_tok_s": round(statistics.median(g_rates), 1) if g_rates else 0.0,
    }


def run_probes(model: str, grammar: str | None) -> dict[str, Any]:
    valid = correct = 0
    replies = []
    for mission, seen, ok in PROBES:
        msgs = [{"role": "system", "content": PROBE_SYSTEM},
                {"role": "user", "content": f"Mission: {mission}.\nYou see: {seen}.\nYour action:"}]
        res = lm.chat(model, msgs, max_tokens=12, temperature=0.0, seed=0, grammar=grammar)
        reply = normalize(res.text)
        valid += reply in ACTIONS
        correct += reply in ok
        replies.append(res.text)
    return {"valid": valid, "correct": correct, "n": len(PROBES), "replies": replies}


STEP_MODES = ("no_reuse", "prefix", "prefix+ram", "interleaved", "interleaved+ram")


def step_latency(model: str, llm: Any, loaded: lm.LoadedModel, mode: str, turns: int) -> dict[str, Any]:
    interleaved = mode.startswith("interleaved")
    systems = [long_system_prompt(llm, 600, v) for v in ((0, 1) if interleaved else (0,))]
    use_ram = mode.endswith("+ram")
    llm.set_cache(lm._llama_cpp().LlamaRAMCache(capacity_bytes=2 << 30) if use_ram else None)
    llm.reset()
    times, prompt_tokens = [], []
    calls = [(systems[k % len(systems)], turn) for turn in STEP_TURNS[:turns] for k in range(len(systems))]
    for system, turn in calls:
        if mode == "no_reuse":
            llm.reset()
        res = lm.chat(model, [{"role": "system", "content": system}, {"role": "user", "content": turn}],
                      max_tokens=8, temperature=0.0, seed=0)
        times.append(res.latency_s)
        prompt_tokens.append(res.prompt_tokens)
    llm.set_cache(None)
    print(f"  {mode}: " + " ".join(f"{t:.2f}" for t in times), flush=True)
    warm = times[len(systems):]  # the first call of each system prompt has nothing to reuse
    return {"median_s": round(statistics.median(warm), 3), "first_s": round(times[0], 3),
            "prompt_tokens": prompt_tokens[0], "calls": len(times)}


def bench_model(model: str, modes: list[str], turns: int, speed: bool = True) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    lm.unload_all()
    t0 = time.perf_counter()
    resolved = lm.resolve_model(model)
    resolve_s = time.perf_counter() - t0
    loaded = lm.load_model(resolved)
    llm = loaded.llm
    row: dict[str, Any] = {
        "model": model, "path": str(resolved.path), "size_mb": round(resolved.path.stat().st_size / 1e6),
        "resolve_s": round(resolve_s, 2), "load_s": round(loaded.load_s, 2),
        "has_chat_template": bool(llm.metadata.get("tokenizer.chat_template")),
        "chat_format": resolved.chat_format or "gguf template",
    }
    print(f"[{model}] loaded in {loaded.load_s:.2f}s; measuring speed", flush=True)
    if speed:
        row.update(measure_speed(llm, long_system_prompt(llm, 600)))
    print(f"[{model}] {row.get('prompt_tok_s')} prompt tok/s, {row.get('gen_tok_s')} gen tok/s; probes", flush=True)
    row["probe_free"] = run_probes(model, None)
    row["probe_grammar"] = run_probes(model, ACTION_GRAMMAR)
    print(f"[{model}] valid free {row['probe_free']['valid']}, grammar {row['probe_grammar']['valid']}; "
          f"correct free {row['probe_free']['correct']}, grammar {row['probe_grammar']['correct']}", flush=True)
    print(f"[{model}] step latency", flush=True)
    row["step"] = {m: step_latency(model, llm, loaded, m, turns) for m in modes}
    # other processes on the machine skew the timings: keep the 1-minute load average before/after
    row["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps({k: v for k, v in row.items() if not k.startswith("probe")}, indent=None), flush=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | size | load | prompt tok/s | gen tok/s | valid free | valid grammar | correct free "
            "| correct grammar | step: no reuse | step: prefix | step: prefix+RAM | interleaved | interleaved+RAM |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        s = {m: r["step"].get(m, {"median_s": "-"}) for m in STEP_MODES}
        r = {"prompt_tok_s": "-", "gen_tok_s": "-", **r}
        out.append(
            f"| {r['model']} | {r['size_mb']} MB | {r['load_s']} s | {r['prompt_tok_s']} | {r['gen_tok_s']} "
            f"| {r['probe_free']['valid']}/10 | {r['probe_grammar']['valid']}/10 "
            f"| {r['probe_free']['correct']}/10 | {r['probe_grammar']['correct']}/10 "
            f"| {s['no_reuse']['median_s']} s | {s['prefix']['median_s']} s | {s['prefix+ram']['median_s']} s "
            f"| {s['interleaved']['median_s']} s | {s['interleaved+ram']['median_s']} s |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: every installed known model)")
    ap.add_argument("--model-path", default=None, help="also benchmark this GGUF file")
    ap.add_argument("--out", default=str(Path(__file__).with_name("local_models.json")))
    ap.add_argument("--turns", type=int, default=5, help="user turns per step-latency run (max 5)")
    ap.add_argument("--modes", default=",".join(STEP_MODES), help="step-latency modes ('' for none)")
    ap.add_argument("--no-speed", action="store_true", help="skip the prompt/generation speed test")
    args = ap.parse_args()
    if args.models:
        models = [f"local/{m}" for m in args.models.split(",")]
    else:
        models = [r.model for r in lm.list_local_models(include_unknown=False) if r.installed]
    if args.model_path:
        models.append(lm.set_model_path(args.model_path))
    out = Path(args.out)
    previous = json.loads(out.read_text())["models"] if out.exists() else []
    rows = [r for r in previous if r["model"] not in models]
    for m in models:
        modes = [x for x in args.modes.split(",") if x]
        rows.append(bench_model(m, modes, args.turns, speed=not args.no_speed))
        save(out, rows)
    print(table(rows))
    print(f"wrote {out}")


def save(out: Path, rows: list[dict[str, Any]]) -> None:
    result = {
        "machine": {"cpus": os.cpu_count(), "n_threads": lm.OPTIONS.n_threads, "n_ctx": lm.OPTIONS.n_ctx,
                    "python": platform.python_version(), "platform": platform.platform()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "models": rows,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
