"""Golden runs: fixed-seed optimization runs against the LLM test double (ScriptedLLM) whose candidates,
verdicts, seeds and final rows are compared with a committed file. A restructure of the engine, the
adapter or the operators must leave them unchanged; a deliberate change of behaviour regenerates the file
with ``PROMPTEVO_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`` and says why in its commit.

Nothing here is a measured result: the agent and the optimizer are test doubles.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine_doubles import CountingRunner, config, run
from run_double import make_run
from test_expert import TurnEnv, _rule_following_agent

from promptevo.segments import Prompt, PromptSet, Segment

GOLDEN = Path(__file__).parent / "golden" / "operator_runs.json"

HINTS = '''
[[hint]]
id = "face-first"
text = "Turn until the ball is in front, then pick up."
tasks = ["scripted-pickup"]
tags = []
'''


def _summary(res) -> dict:
    rep = res.report
    cands = []
    for c in res.candidates:
        cands.append({"id": c.id, "parent": c.parent, "operator": c.operator, "status": c.status,
                      "fingerprint": c.fingerprint, "generation": c.generation,
                      "screen_keep": (c.screen or {}).get("keep") if c.screen else None})
    rows = [{"name": r["name"], "n": r["n"], "successes": r["successes"]} for r in rep["rows"]]
    comp = {k: {x: v.get(x) for x in ("n", "wins", "losses", "ties", "seeds")}
            for k, v in (rep.get("comparisons") or {}).items() if isinstance(v, dict)}
    return {"candidates": cands, "rows": rows, "comparisons": comp, "best": rep["best_id"],
            "stop_reason": rep.get("stop_reason"), "promoted_edits": [
                {"operator": e.get("operator"), "author": e.get("author")} for e in rep.get("promoted_edits") or []]}


def _runs(tmp_path: Path) -> dict:
    out = {}
    res = make_run(tmp_path / "a", run="mutate-delete-crossover", operators=["mutate", "delete", "crossover"])
    out["two-stage: mutate, delete, crossover"] = _summary(res)
    hints = tmp_path / "hints.toml"
    hints.write_text(HINTS, encoding="utf-8")
    initial = PromptSet.of({"system": Prompt((Segment("role", "You pick up the ball."),
                                              Segment("format", "Mission: {mission}\n<|ACTION|>the action<|END|>")))})
    cfg = config(tmp_path / "b", agent="robust-cot", init="plain", operators=["induce", "hints", "rules", "mutate"],
                 generations=2, children=3, episodes=8, evidence_episodes=4, validation_episodes=24, test_episodes=12,
                 expert_episodes=12, agent_options={"history": 1}, hints=str(hints), gate="fixed")
    res = run(cfg, CountingRunner(env=TurnEnv), responder_fn=_rule_following_agent, initial_prompts=initial)
    out["robust-cot: induce, hints, rules, mutate"] = _summary(res)
    return out


def test_operator_runs_match_the_golden_file(tmp_path):
    got = json.loads(json.dumps(_runs(tmp_path)))
    if os.environ.get("PROMPTEVO_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for name in want:
        assert got[name] == want[name], name
    assert set(got) == set(want)
