"""What the loop cut-off saved in a run, and a check that it lost nothing.

For an optimization run folder: counts the episodes the rollout cut (a deterministic agent back in a state
it had been in, so the rest could only cycle), the LLM steps it replayed instead of asking the model, and
the seconds that saved (replayed steps x the run's mean seconds per LLM step). Then it replays up to
``--check`` of the cut episodes in full, without the cut-off, with the run's own agent, prompts and model
(the response cache answers the cycle's prompts), and compares success, return, steps, progression and
progress with the stored episodes.

Usage: ``python benchmarks/loop_cutoff.py results/<run> [--check 10]``; writes ``<run>/loop_cutoff.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptevo.agents.registry import make_agent  # noqa: E402
from promptevo.evaluation.rollout import run_episode  # noqa: E402
from promptevo.evaluation.store import EPISODES_FILE, EpisodeStore  # noqa: E402
from promptevo.fileio import write_json_atomic  # noqa: E402
from promptevo.llm.gateway import Gateway  # noqa: E402
from promptevo.llm.types import LLMConfig  # noqa: E402
from promptevo.optim.state import load_checkpoint  # noqa: E402
from promptevo.tasks import load_task  # noqa: E402

FIELDS = ("success", "return", "steps", "progression", "progress")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--check", type=int, default=10, help="cut episodes to replay in full (default 10)")
    ns = ap.parse_args(argv)
    run_dir = Path(ns.run_dir)
    state = load_checkpoint(run_dir)
    cfg = state.config
    store = EpisodeStore(run_dir / EPISODES_FILE)
    by_fp = {c.fingerprint: c for c in state.candidates.values()}
    episodes = [(k, s, d) for k, s, d in store.items() if not d.get("error")]
    cut = [(k, s, d) for k, s, d in episodes if d.get("loop_cut")]
    llm_steps = sum(int(d.get("steps") or 0) - int((d.get("loop_cut") or {}).get("replayed_steps") or 0)
                    for _, _, d in episodes)
    calls = sum(int(d.get("llm_calls") or 0) for _, _, d in episodes)
    latency = sum(float(st.get("latency_s") or 0.0) for _, _, d in episodes for st in d.get("trajectory") or []
                  if not st.get("replayed"))
    replayed = sum(int(d["loop_cut"]["replayed_steps"]) for _, _, d in cut)
    s_per_step = latency / llm_steps if llm_steps else 0.0
    out = {"run": str(run_dir), "episodes": len(episodes), "cut_episodes": len(cut),
           "steps_played_with_the_llm": llm_steps, "steps_replayed": replayed, "llm_calls": calls,
           "seconds_per_llm_step": round(s_per_step, 3), "seconds_saved_estimate": round(replayed * s_per_step, 1),
           "checked": []}
    task = load_task(cfg.task)
    if cfg.max_steps is not None:
        task = task.model_copy(update={"max_steps": min(task.max_steps or cfg.max_steps, cfg.max_steps)})
    gw = Gateway(LLMConfig(model=cfg.model, api_base=cfg.api_base, max_tokens=cfg.agent_max_tokens,
                           temperature=cfg.temperature, concurrency=1, seed=cfg.seed))
    t0 = time.time()
    for key, seed, d in cut[: ns.check]:
        cand = by_fp.get(key)
        if cand is not None:
            prompts, agent, options = cand.prompt_set(), cfg.agent, cfg.agent_options
        elif key.startswith("baseline:"):
            prompts, agent, options = None, key.split(":", 1)[1], {}
        else:
            continue
        full = run_episode(task, lambda: make_agent(agent, gw, prompts, task=task, **options), seed,
                           loop_cutoff=False).to_dict()
        same = all(full.get(f) == d.get(f) for f in FIELDS)
        out["checked"].append({"key": key[:16], "seed": seed, "identical": same,
                               **{f: [d.get(f), full.get(f)] for f in FIELDS if full.get(f) != d.get(f)}})
    out["identical"] = all(c["identical"] for c in out["checked"])
    out["check_wall_s"] = round(time.time() - t0, 1)
    write_json_atomic(run_dir / "loop_cutoff.json", out)
    print(f"{run_dir}: {len(cut)} of {len(episodes)} episodes cut; {replayed:,} steps replayed instead of asking "
          f"the LLM ({llm_steps:,} played with it); about {out['seconds_saved_estimate']:,.0f} s saved at "
          f"{s_per_step:.2f} s per LLM step")
    print(f"identity check: {sum(c['identical'] for c in out['checked'])}/{len(out['checked'])} cut episodes "
          f"replayed in full give the same success, return, steps, progression and progress "
          f"({out['check_wall_s']:.0f} s)")
    return out


if __name__ == "__main__":
    main()
