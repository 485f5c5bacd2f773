"""How each rendering of an induced table is executed by an agent: success and compliance per rendering.

The table is fitted as the engine fits it (the expert plays ``--expert-episodes`` training seeds; the "no
line" explorer is chosen by simulating the candidates), then each compile operator's rendering is applied
to the initial prompt and the agent plays ``--episodes`` *training* seeds (disjoint from the expert's; a
probe to choose defaults, never a reported score: reported scores come from a run's test split). For each
rendering: success, the compliance analysis (classes, kinds, in view / out of view), seconds and tokens per
decision. With ``--no-llm`` only the children are built and printed.

    python benchmarks/compile_probe.py --task goto --episodes 20 [--renderings induce,compile-slots,...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from promptevo.agents.registry import agent_factory, default_prompts
from promptevo.evaluation.rollout import evaluate as play
from promptevo.optim.adapter import ProposalContext
from promptevo.optim.propose.registry import OperatorContext, get_operator
from promptevo.optim.reflect.compliance import analyse
from promptevo.optim.reflect.expert import Problems, collect, label_episode
from promptevo.optim.reflect.features import Vocabulary
from promptevo.optim.reflect.follower import Explorer
from promptevo.optim.propose.induce import RuleTable
from promptevo.optim.propose.induce_phase import PhasedTable
from promptevo.optim.propose.render_table import load_phrases
from promptevo.optim.reflect.phase_compliance import analyse_phased
from promptevo.tasks import load_task, make_env

RENDERINGS = ["induce", "compile-vocab", "compile-slots", "compile-grammar", "compile-lines", "compile-demos",
              "compile-fold", "compile-bind", "compile-key", "compile-phase"]


class _Game:
    """The game services an operator reads, without an adapter."""

    def __init__(self, task, seed: int = 0):
        self.task, self.env_factory, self.opt_gw = task, make_env, None
        self.cfg = type("Cfg", (), {"seed": seed, "skills": None})()
        self.env_instructions = ""

    def warn_once(self, key: str, msg: str) -> None:
        print(msg)


def children(task, initial, expert_seeds):
    ev = collect(task, [], expert_seeds)
    out = {}
    shared: dict = {}
    for name in RENDERINGS:
        pctx = ProposalContext(generation=1, mode="mutate", n=1, history=[], tried=set())
        ctx = OperatorContext(proposal=pctx, game=_Game(task), cache=shared)
        props = get_operator(name).propose(initial, {"expert": ev}, ctx, 1)
        if props:
            out[name] = props[0]
        else:
            print(f"{name}: no child ({'; '.join(ctx.log)})")
    return out, ev


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="goto")
    ap.add_argument("--agent", default="robust-cot")
    ap.add_argument("--init", default="compact")
    ap.add_argument("--model", default="local/qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--history", type=int, default=1)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--expert-episodes", type=int, default=20)
    ap.add_argument("--renderings", default=",".join(RENDERINGS))
    ap.add_argument("--no-llm", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    ap.add_argument("--episodes-out", default=None, help="folder: each rendering's episodes (replies) as JSONL")
    a = ap.parse_args()
    task = load_task(a.task)
    train = task.seed_list("train")
    expert_seeds = train[-a.expert_episodes:]
    probe_seeds = train[-(a.expert_episodes + a.episodes):-a.expert_episodes]
    initial = default_prompts(a.agent, task=task, init=a.init)
    kids, _ = children(task, initial, expert_seeds)
    if a.no_llm:
        for name, p in kids.items():
            print(f"== {name}\n{p.prompts.to_markdown()}")
        return
    from promptevo.llm.gateway import Gateway
    from promptevo.llm.types import LLMConfig

    gw = Gateway(LLMConfig.from_options(model=a.model, max_tokens=a.max_tokens, temperature=0.0))
    rows = []
    for name in [r for r in a.renderings.split(",") if r in kids]:
        p = kids[name]
        rec = p.source["induce"]
        factory = agent_factory(a.agent, gw, p.prompts, task=task, history=a.history)
        t0 = time.perf_counter()
        results, summary = play(task, factory, probe_seeds, concurrency=1, gateway=gw)
        secs = time.perf_counter() - t0
        eps = [r.to_dict() if hasattr(r, "to_dict") else r for r in results]
        if a.episodes_out:
            Path(a.episodes_out).mkdir(parents=True, exist_ok=True)
            (Path(a.episodes_out) / f"{name}.jsonl").write_text("".join(json.dumps(e, default=str) + "\n" for e in eps),
                                                               encoding="utf-8")
        experts = {}
        for ep in eps:
            for s in label_episode(task, ep, Problems()):
                experts[(s.seed, s.t)] = s.expert
        vocab = Vocabulary(frozenset(rec["vocabulary"]["words"]), frozenset(rec["vocabulary"]["structural"]),
                           frozenset(rec["vocabulary"].get("leading") or ()))
        if "phased" in rec:
            comp = analyse_phased(eps, PhasedTable.from_dict(rec["phased"]), vocab, rec["fields"],
                                  Explorer.from_dict(rec.get("explorer")), load_phrases()["phase"]["at_values"])
            comp["decisions"] = comp["n"]
            comp["by_view"] = {"in view": {"compliance": None}, "out of view": {"compliance": None}}
            comp["kinds"] = {p: v["first_wrong_field"] for p, v in comp["phases"].items()}
        else:
            comp = analyse(eps, vocab, RuleTable.from_dict(rec["table"]), rec["fields"],
                           explorer=Explorer.from_dict(rec.get("explorer")), experts=experts)
        decisions = max(1, comp["decisions"])
        row = {"rendering": name, "n": summary["n"], "success": summary["success_rate"],
               "successes": summary["successes"], "compliance": comp, "seconds_per_decision": round(secs / decisions, 2),
               "tokens_per_decision": round(summary.get("total_tokens", 0) / decisions, 1),
               "completion_tokens_per_decision": round(summary.get("completion_tokens", 0) / decisions, 1)}
        rows.append(row)
        print(f"{name:<16} success {summary['successes']}/{summary['n']}  compliance {comp['compliance']}  "
              f"in view {comp['by_view']['in view']['compliance']}  out of view {comp['by_view']['out of view']['compliance']}  "
              f"kinds {dict(list(comp['kinds'].items())[:3])}  {row['seconds_per_decision']} s/decision", flush=True)
        Path(a.out).write_text(json.dumps({"task": a.task, "agent": a.agent, "model": a.model, "seeds": probe_seeds,
                                           "note": "training seeds: a probe to choose defaults, not a reported score",
                                           "rows": rows}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
