"""promptevo compare and the GEPA baseline, with ScriptedLLM test doubles only (no real model).

* ``fake/agent`` answers the agents (always ``go forward``; ``turn left`` once a prompt holds the
  scripted rule), ``fake/optimizer`` answers promptevo's analyser/mutator and GEPA's reflection.
* Real BabyAI env (goto), episodes capped at a few steps to keep the file fast.
"""

from __future__ import annotations

import io
import json

import pytest

from promptevo.baselines.compare import (
    CompareConfig,
    CompareError,
    Comparison,
    parse_methods,
)
from promptevo.baselines.gepa import (
    INSTRUCTION_SEGMENT,
    compose_prompts,
    dspy_available,
    episode_feedback,
    optimizable_text,
    seed_texts,
)
from promptevo.cli.compare import cli_main
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
from promptevo.optim.state import load_checkpoint
from promptevo.segments import PromptSet

RULE = "SCRIPTED RULE: turn toward the target first."


def scripted(messages: list[dict], params: dict) -> str:
    first = str(messages[0]["content"])
    if params.get("model") == "fake/optimizer":
        if "new_instruction" in first:  # GEPA's reflection (DSPy JSON adapter): a JSON object
            return json.dumps({"new_instruction": "You are an agent in a grid world. " + RULE})
        if '"edits"' in first:  # promptevo's mutator
            return json.dumps({"edits": [{"module": "system", "op": "add", "segment": "rules",
                                          "text": RULE, "rationale": "test"}]})
        return json.dumps({"attributions": [], "failure_modes": ["walks into walls"], "proposals": []})
    if RULE in first:
        return "Turn first. <|ACTION|>turn left<|END|>"
    return "<|ACTION|>go forward<|END|>"


def _gateway_factory(created: list, *, enforce_budget: bool = True):
    """Fresh test-double gateways per purpose; ``enforce_budget=False`` drops the shared CallBudget the
    comparison hands over (what a method's own between-iteration checks alone would give)."""

    def make(purpose: str, budget=None) -> Gateway:
        model = "fake/optimizer" if purpose == "optimizer" else "fake/agent"
        gw = Gateway(LLMConfig(model=model, cache_dir=None, num_retries=0,
                               max_tokens=2048 if purpose == "optimizer" else 256),
                     budget=budget if enforce_budget else None)
        created.append((purpose, gw))
        return gw

    return make


def _cfg(tmp_path, methods, **kw) -> CompareConfig:
    base = dict(task="goto", methods=methods, budget_calls=40, agent="robust-cot", model="fake/agent",
                optimizer_model="fake/optimizer", test_episodes=3, train_episodes=2, val_episodes=2,
                max_steps=4, generations=2, children=1, concurrency=2, no_cache=True,
                results_dir=str(tmp_path), run="cmp")
    base.update(kw)
    return CompareConfig(**base)


def test_parse_methods_rejects_unknown_with_valid_list():
    assert parse_methods("robust-cot, promptevo,robust-cot") == ["robust-cot", "promptevo"]
    with pytest.raises(CompareError, match="unknown method 'dspy'; valid methods: robust-cot, promptevo, gepa"):
        parse_methods("robust-cot,dspy")


def test_unknown_method_is_one_line_exit_2(capsys):
    rc = cli_main(["--task", "goto", "--methods", "robust-cot,nope"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "unknown method 'nope'" in err and "promptevo" in err


def test_bad_flag_is_one_line_exit_2(capsys):
    rc = cli_main(["--task", "goto", "--budget-calls", "zero"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--budget-calls" in err


def test_compare_robust_cot_and_promptevo_writes_compare_json(tmp_path):
    pytest.importorskip("minigrid")
    created: list = []
    cfg = _cfg(tmp_path, ["robust-cot", "promptevo"])
    with ScriptedLLM.install(scripted):
        data = Comparison(cfg, gateway_factory=_gateway_factory(created), quiet=True).run()
    path = tmp_path / "cmp" / "compare.json"
    on_disk = json.loads(path.read_text())
    assert on_disk["methods"].keys() == data["methods"].keys() == {"robust-cot", "promptevo"}
    assert on_disk["pending"] == []
    # three disjoint splits shared by every method (was: train/validation/held-out)
    seeds = on_disk["seeds"]
    assert len(seeds["train"]) == 2 and len(seeds["validation"]) == 2 and len(seeds["test"]) == 3
    assert not set(seeds["test"]) & (set(seeds["train"]) | set(seeds["validation"]))
    assert not set(seeds["train"]) & set(seeds["validation"])
    for name, m in on_disk["methods"].items():
        assert m["test"]["seeds"] == seeds["test"], name  # same test seeds for every method
        s = m["test"]["summary"]
        assert s["n"] == 3 and 0.0 <= s["success_ci95"][0] <= s["success_ci95"][1] <= 1.0
        assert PromptSet.from_dict(m["prompts"]).fingerprint() == m["prompts_fingerprint"]
        assert m["test"]["usage"]["calls"] > 0  # the test eval is counted apart from optimization
    assert on_disk["methods"]["robust-cot"]["optimization"]["calls"] == 0
    opt = on_disk["methods"]["promptevo"]["optimization"]
    assert opt["calls"] > 0 and opt["tokens"] > 0 and opt["stop_reason"]
    assert any(r in opt["by_role"] for r in ("analyzer", "mutator"))
    assert opt["calls"] <= cfg.budget_calls and opt["budget_used"] <= cfg.budget_calls
    # one fresh gateway per purpose per method: robust-cot eval, promptevo agent + optimizer + eval
    assert [p for p, _ in created] == ["eval", "agent", "optimizer", "eval"]
    agw, ogw = created[1][1], created[2][1]
    assert agw.budget is not None and agw.budget is ogw.budget  # one shared call budget per method
    assert created[0][1].budget is None and created[3][1].budget is None  # the test eval is not budgeted
    # promptevo's own run saw only the comparison's training and validation seeds, and no test seed
    ck = load_checkpoint(tmp_path / "cmp" / "promptevo")
    assert set(ck.splits["train"]) <= set(seeds["train"])
    assert ck.splits["validation"] == seeds["validation"] and "test" not in ck.played
    assert (tmp_path / "cmp" / "promptevo" / "checkpoint.json").exists()
    assert (tmp_path / "cmp" / "robust-cot" / "test" / "episodes.jsonl").exists()


def test_results_table_renders(tmp_path):
    pytest.importorskip("minigrid")
    from rich.console import Console

    from promptevo.baselines.compare import results_table

    cfg = _cfg(tmp_path, ["robust-cot"])
    with ScriptedLLM.install(scripted):
        data = Comparison(cfg, gateway_factory=_gateway_factory([]), quiet=True).run()
    buf = io.StringIO()
    Console(file=buf, width=200).print(results_table(data))
    text = buf.getvalue()
    assert "robust-cot" in text and "test success" in text and "opt. LLM calls" in text
    assert "opt. tokens" in text and "opt. wall" in text
    with pytest.raises(CompareError, match="already holds a comparison"):  # no silent overwrite
        Comparison(cfg, gateway_factory=_gateway_factory([]), quiet=True).run()


def test_compose_prompts_keeps_fixed_segments_and_seed_is_unchanged():
    ps = PromptSet.from_markdown("# system\n\n## role\n\nGoal: {mission}\n\n## env\n\n{instructions}\n\n"
                                 "## tips\n\nBe brief.\n\n## format\n\n<|ACTION|>a<|END|>\n")
    texts = seed_texts(ps)
    assert texts == {"system": "Goal: {mission}\n\nBe brief."}
    assert compose_prompts(ps, texts) == ps  # the seed candidate is the original prompt, byte for byte
    new = compose_prompts(ps, {"system": "Do better."}).module("system")
    assert new.names == [INSTRUCTION_SEGMENT, "env", "format"]
    assert new.get("env") == "{instructions}" and new.get("format") == "<|ACTION|>a<|END|>"
    assert optimizable_text(new) == "Do better."


def test_episode_feedback_mentions_outcome_and_invalid_actions():
    from promptevo.evaluation.rollout import EpisodeResult

    traj = [{"observation": "a wall 1 step forward", "action": "go forward", "valid": True},
            {"observation": "a wall 1 step forward", "action": "dance", "valid": False}]
    r = EpisodeResult(task="goto", seed=1, mission="go to the red ball", success=False, progression=0.0,
                      return_=0.0, steps=2, invalid_actions=1, prompt_tokens=0, completion_tokens=0, cost=0.0,
                      llm_calls=2, wall_s=0.0, trajectory=traj, truncated=True)
    fb = episode_feedback(r)
    assert "go to the red ball" in fb and "FAILURE" in fb and "Invalid actions: 1 of 2" in fb and "dance" in fb


@pytest.mark.skipif(not dspy_available(), reason="dspy not installed (pip install 'promptevo[gepa]')")
def test_gepa_runs_through_our_gateway_and_returns_a_promptset(tmp_path):
    pytest.importorskip("minigrid")
    created: list = []
    cfg = _cfg(tmp_path, ["gepa"], budget_calls=30, test_episodes=2)
    with ScriptedLLM.install(scripted):
        data = Comparison(cfg, gateway_factory=_gateway_factory(created), quiet=True).run()
    m = data["methods"]["gepa"]
    opt = m["optimization"]
    # every LLM call of GEPA went through our gateways: agent episodes and reflection
    assert opt["by_role"]["gepa-agent"]["calls"] > 0
    assert opt["by_role"]["gepa-reflection"]["calls"] >= 1
    assert opt["calls"] == sum(r["calls"] for r in opt["by_role"].values())
    # the call budget is a hard cap inside the gateways (it used to be checked only between GEPA iterations,
    # so GEPA overshot it): GEPA spends exactly its budget here and says why it stopped
    assert opt["calls"] == opt["budget_used"] == 30 and "budget" in opt["stop_reason"]
    best = PromptSet.from_dict(m["prompts"])
    assert isinstance(best, PromptSet) and best.module("system").get("format")  # protocol kept
    assert m["test"]["seeds"] == data["seeds"]["test"]
    assert (tmp_path / "cmp" / "gepa" / "best.md").exists()
    # GEPA's reflection proposal was seen by an episode (the rule reaches the agent's prompt)
    assert opt["candidates"] >= 1


def _method_calls(created: list, purposes=("agent", "optimizer")) -> list[int]:
    """LLM calls counted on each optimizing method's own gateways (agent + optimizer), in method order."""
    opt = [gw for p, gw in created if p in purposes]
    return [sum(int(gw.usage.total()["calls"]) for gw in opt[i:i + 2]) for i in range(0, len(opt), 2)]


@pytest.mark.skipif(not dspy_available(), reason="dspy not installed (pip install 'promptevo[gepa]')")
def test_budget_is_a_hard_cap_for_gepa_and_promptevo_and_the_table_reports_usage(tmp_path):
    """N = 3 LLM calls: GEPA's first step (the seed candidate on 2 validation episodes of up to 4 steps,
    one call per step) and promptevo's first step (the parent on an evidence episode of up to 4 steps)
    each need more than N calls before any between-iteration check can run. With only those checks both
    overshoot; with the comparison's shared CallBudget in the gateways neither spends more than N."""
    pytest.importorskip("minigrid")
    n = 3
    kw = dict(budget_calls=n, test_episodes=2, val_episodes=2, train_episodes=2, max_steps=4, generations=3)
    # counterfactual: the same comparison whose gateways ignore the budget (between-iteration checks only)
    loose: list = []
    with ScriptedLLM.install(scripted):
        Comparison(_cfg(tmp_path, ["promptevo", "gepa"], run="loose", **kw),
                   gateway_factory=_gateway_factory(loose, enforce_budget=False), quiet=True).run()
    assert all(c > n for c in _method_calls(loose)), _method_calls(loose)
    # the real thing: every call beyond N is refused inside the gateways
    created: list = []
    with ScriptedLLM.install(scripted):
        data = Comparison(_cfg(tmp_path, ["promptevo", "gepa"], run="capped", **kw),
                          gateway_factory=_gateway_factory(created), quiet=True).run()
    counted = _method_calls(created)
    assert len(counted) == 2 and all(0 < c <= n for c in counted), counted
    for name, c in zip(["promptevo", "gepa"], counted):
        opt = data["methods"][name]["optimization"]
        assert opt["calls"] == c and opt["budget_used"] <= n, name  # compare.json counts what the gateways did
        assert "budget" in opt["stop_reason"], (name, opt["stop_reason"])
        assert data["methods"][name]["test"]["summary"]["n"] == 2  # the test eval still runs, unbudgeted
    # the table: calls, tokens and wall time of each method's optimization (and of its test eval)
    from rich.console import Console

    from promptevo.baselines.compare import results_table, table_rows

    rows = {r["method"]: r for r in table_rows(data)}
    assert set(rows) == {"promptevo", "gepa"}
    for name, r in rows.items():
        opt = data["methods"][name]["optimization"]
        assert r["calls"] == opt["calls"] and r["tokens"] == opt["tokens"] > 0
        assert r["wall_s"] == opt["wall_s"] > 0 and r["eval_wall_s"] > 0
    buf = io.StringIO()
    Console(file=buf, width=250).print(results_table(data))
    lines = buf.getvalue().splitlines()
    for name, r in rows.items():
        line = next(ln for ln in lines if ln.strip("│┃ ").startswith(name))
        cells = [c.strip() for c in line.replace("┃", "│").split("│") if c.strip()]
        assert cells[3] == f"{r['calls']:,}" and cells[4] == f"{r['tokens']:,}", cells
        assert cells[6] == f"{r['wall_s']:.1f}s" and cells[7] == f"{r['eval_wall_s']:.1f}s", cells


@pytest.mark.skipif(not dspy_available(), reason="dspy not installed (pip install 'promptevo[gepa]')")
def test_gateway_lm_is_a_dspy_lm_counted_by_the_gateway():
    import dspy

    from promptevo.baselines.gepa import gateway_lm_class

    gw = Gateway(LLMConfig(model="fake/optimizer", cache_dir=None, num_retries=0))
    lm = gateway_lm_class()(gw, "gepa-reflection")
    assert isinstance(lm, dspy.BaseLM)
    with ScriptedLLM.install(lambda messages: "hello"):
        out = lm(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert out == ["hello"]
    assert gw.usage.role("gepa-reflection")["calls"] == 1


def test_gepa_without_dspy_is_one_clear_line(monkeypatch, capsys):
    import promptevo.baselines.gepa as gb

    monkeypatch.setattr(gb, "dspy_available", lambda: False)
    rc = cli_main(["--task", "goto", "--methods", "robust-cot,gepa"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "install promptevo[gepa]" in err
