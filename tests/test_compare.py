"""promptevo compare and the GEPA baseline, with ScriptedLLM test doubles only (no real model).

* ``fake/agent`` answers the agents (always ``go forward``; ``turn left`` once a prompt holds the
  scripted rule), ``fake/optimizer`` answers promptevo's analyser/mutator and GEPA's reflection.
* Real BabyAI env (goto), episodes capped at a few steps to keep the file fast.
"""

from __future__ import annotations

import io
import json

import pytest

from promptevo.baselines.compare import CompareConfig, CompareError, Comparison, cli_main, parse_methods
from promptevo.baselines.gepa import (
    INSTRUCTION_SEGMENT,
    compose_prompts,
    dspy_available,
    episode_feedback,
    optimizable_text,
    seed_texts,
)
from promptevo.llm import Gateway, LLMConfig, ScriptedLLM
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


def _gateway_factory(created: list):
    def make(purpose: str) -> Gateway:
        model = "fake/optimizer" if purpose == "optimizer" else "fake/agent"
        gw = Gateway(LLMConfig(model=model, cache_dir=None, num_retries=0,
                               max_tokens=2048 if purpose == "optimizer" else 256))
        created.append((purpose, gw))
        return gw

    return make


def _cfg(tmp_path, methods, **kw) -> CompareConfig:
    base = dict(task="goto", methods=methods, budget_calls=40, agent="robust-cot", model="fake/agent",
                optimizer_model="fake/optimizer", heldout_episodes=3, train_episodes=2, val_episodes=2,
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
    seeds = on_disk["seeds"]
    assert len(seeds["train"]) == 2 and len(seeds["validation"]) == 2 and len(seeds["heldout"]) == 3
    assert not set(seeds["heldout"]) & (set(seeds["train"]) | set(seeds["validation"]))
    for name, m in on_disk["methods"].items():
        assert m["heldout"]["seeds"] == seeds["heldout"], name  # same held-out seeds for every method
        s = m["heldout"]["summary"]
        assert s["n"] == 3 and 0.0 <= s["success_ci95"][0] <= s["success_ci95"][1] <= 1.0
        assert PromptSet.from_dict(m["prompts"]).fingerprint() == m["prompts_fingerprint"]
        assert m["heldout"]["usage"]["calls"] > 0  # the held-out eval is counted apart from optimization
    assert on_disk["methods"]["robust-cot"]["optimization"]["calls"] == 0
    opt = on_disk["methods"]["promptevo"]["optimization"]
    assert opt["calls"] > 0 and opt["tokens"] > 0 and opt["stop_reason"]
    assert any(r in opt["by_role"] for r in ("analyzer", "mutator"))
    # one fresh gateway per purpose per method: robust-cot eval, promptevo agent + optimizer + eval
    assert [p for p, _ in created] == ["eval", "agent", "optimizer", "eval"]
    # the optimizer's own run files live inside the compare run
    assert (tmp_path / "cmp" / "promptevo" / "checkpoint.json").exists()
    assert (tmp_path / "cmp" / "robust-cot" / "heldout" / "episodes.jsonl").exists()


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
    assert "robust-cot" in text and "held-out success" in text and "opt. LLM calls" in text
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
    cfg = _cfg(tmp_path, ["gepa"], budget_calls=30, heldout_episodes=2)
    with ScriptedLLM.install(scripted):
        data = Comparison(cfg, gateway_factory=_gateway_factory(created), quiet=True).run()
    m = data["methods"]["gepa"]
    opt = m["optimization"]
    # every LLM call of GEPA went through our gateways: agent episodes and reflection
    assert opt["by_role"]["gepa-agent"]["calls"] > 0
    assert opt["by_role"]["gepa-reflection"]["calls"] >= 1
    assert opt["calls"] == sum(r["calls"] for r in opt["by_role"].values())
    assert opt["calls"] >= 30 and "budget" in opt["stop_reason"]
    best = PromptSet.from_dict(m["prompts"])
    assert isinstance(best, PromptSet) and best.module("system").get("format")  # protocol kept
    assert m["heldout"]["seeds"] == data["seeds"]["heldout"]
    assert (tmp_path / "cmp" / "gepa" / "best.md").exists()
    # GEPA's reflection proposal was seen by an episode (the rule reaches the agent's prompt)
    assert opt["candidates"] >= 1


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
