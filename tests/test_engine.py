"""The optimization loop on test doubles (see engine_doubles.py): splits, acceptance, the validation gate,
the final test table, resume, budgets, faults."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
from engine_doubles import (
    RULE,
    CountingRunner,
    ScriptedPickupEnv,
    agent_reply,
    config,
    crashed_run,
    fp_of,
    make_task,
    run,
)

from promptevo.evaluation.store import EpisodeStore, StoreError
from promptevo.llm import LLMContextError
from promptevo.optim.state import RunError, load_checkpoint
from promptevo.segments import PromptSet


def test_rule_is_accepted_and_promoted_then_its_deletion_is_rejected(tmp_path):
    runner = CountingRunner()
    res = run(config(tmp_path), runner)
    cands = {c.id: c for c in res.candidates}
    assert set(cands) == {"c0", "c1", "c2", "c3"}
    c1, c2, c3 = cands["c1"], cands["c2"], cands["c3"]
    assert c1.edit["op"] == "rewrite" and c1.edit["segment"] == "rules" and c1.operator == "mutate"
    # accepted on paired training seeds, then promoted by the paired test on the validation seeds
    assert c1.verdict["accepted"] and c1.verdict["n"] == 8 and c1.verdict["losses"] == 0
    assert c1.status == "promoted" and c1.gate["accepted"] and c1.gate["rule"] == "sign"
    assert c1.gate["p_value"] < c1.gate["alpha"] == pytest.approx(0.05 / 2)  # Bonferroni over 2 generations
    assert c2.status == "rejected" and c2.verdict["mean_diff"] == pytest.approx(0.0)
    # generation 2: the parent is the promoted child; deleting the rule is stopped early by racing
    assert c3.parent == "c1" and c3.edit["op"] == "delete" and c3.status in ("rejected", "stopped")
    assert res.best_id == "c1" and RULE in res.best_prompts.module("actor").get("rules")
    ck = load_checkpoint(res.run_dir)
    g1, g2 = ck.generations
    assert g1.done and g2.done
    # fresh, disjoint evidence and acceptance seeds each generation
    assert not set(g1.evidence_seeds) & set(g1.accept_seeds)
    assert not (set(g1.evidence_seeds) | set(g1.accept_seeds)) & (set(g2.evidence_seeds) | set(g2.accept_seeds))
    # a child is played on its generation's acceptance seeds (c1, as gen 2's parent, on all of gen 2's too)
    assert {int(s) for s in c1.train} == set(g1.accept_seeds) | set(g2.evidence_seeds) | set(g2.accept_seeds)
    assert {int(s) for s in c3.train} <= set(g2.accept_seeds)
    assert {int(s) for s in cands["c0"].train} == set(g1.evidence_seeds) | set(g1.accept_seeds)
    assert max(Counter(runner.played).values()) == 1  # no (candidate, seed) played twice
    outcomes = [(h["candidate"], h["outcome"]) for h in ck.history]
    assert ("c1", "accepted and promoted") in outcomes
    analysis = json.loads((res.run_dir / g2.evidence).read_text())
    assert analysis["analysis"]["ok"] and analysis["signatures"]
    for name in ("report.json", "report.md", "best.md", "best.json", "episodes.jsonl", "run.log"):
        assert (res.run_dir / name).exists(), name
    assert PromptSet.load(res.run_dir / "best.md").fingerprint() == c1.fingerprint
    assert res.stop_reason == "completed 2 generations"


def test_the_test_split_is_played_once_at_the_end_and_is_all_the_table_shows(tmp_path):
    runner = CountingRunner()
    res = run(config(tmp_path), runner)
    ck = load_checkpoint(res.run_dir)
    task = make_task()
    train, val, test = (set(task.seed_list(s)) for s in ("train", "validation", "test"))
    # the checkpoint records the seeds of each split, pairwise disjoint
    assert set(ck.splits["validation"]) <= val and set(ck.splits["test"]) <= test and set(ck.splits["train"]) <= train
    assert not set(ck.splits["train"]) & set(ck.splits["validation"])
    assert not set(ck.splits["validation"]) & set(ck.splits["test"])
    # every test seed was played after the last training or validation episode, once per prompt
    order = [s for _, s in runner.played]
    first_test = next(i for i, s in enumerate(order) if s in test)
    assert all(s in test for s in order[first_test:])
    test_plays = [(fp, s) for fp, s in runner.played if s in test]
    assert max(Counter(test_plays).values()) == 1
    assert set(ck.played["test"]) == set(ck.splits["test"])
    # the final table holds only test-split numbers
    rep = res.report
    assert rep["test_split"]["n"] == 12 and rep["test_split"]["seeds"] == sorted(test)[:12]
    rows = {r["name"].split(" ")[0]: r for r in rep["rows"]}
    assert set(rows) == {"random", "baseline", "initial", "best"}
    assert all(r["n"] == 12 for r in rows.values())
    c = {x.id: x for x in res.candidates}
    assert {int(s) for s in c["c1"].test} == set(rep["test_split"]["seeds"])
    assert rows["initial"]["success_rate"] == pytest.approx(3 / 12)  # test seeds 2000, 2004, 2008: ball in front
    assert rows["best"]["success_rate"] == 1.0
    assert rep["comparisons"]["best_vs_initial"]["wins"] == 9
    assert rep["comparisons"]["best_vs_initial"]["p_value"] < 0.01
    md = (res.run_dir / "report.md").read_text()
    assert "Test split: n = 12" in md and "| best (two-stage, c1) | 12 | 100.0%" in md
    assert rep["operators"]["mutate"]["proposed"] == 3 and rep["operators"]["mutate"]["promoted"] == 1


def test_engine_refuses_a_test_seed_before_the_final_phase(tmp_path):
    from promptevo.optim.engine import Engine

    class PeekingAdapter:
        max_score = 1.0

        def evaluate(self, prompts, seeds, *, agent=None, on_episode=None):
            return [{"seed": s, "success": True} for s in seeds]

        def score(self, ep):
            return 1.0

    eng = Engine(config(tmp_path, run="peek"), PeekingAdapter(), task=make_task(), usage=dict,
                 emitter=lambda *a, **k: None)
    eng.setup(PromptSet())
    with pytest.raises(RunError, match="test seed"):
        eng.play("x", None, eng.test_seeds()[:1], "test")


def test_resume_continues_without_replaying_episodes(tmp_path):
    runner = CountingRunner()
    first = run(config(tmp_path, generations=1), runner)
    assert first.best_id == "c1"
    n_first = len(runner.played)
    cfg2 = load_checkpoint(first.run_dir).config.model_copy(update={"generations": 2, "resume": True})
    second = run(cfg2, runner)
    counts = Counter(runner.played)
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1]
    # the second session ran generation 2; the test seeds were already played for c0 and c1
    new_fps = {fp for fp, _ in runner.played[n_first:]}
    assert fp_of(second, "c3") in new_fps and fp_of(second, "c0") not in new_fps
    ck = load_checkpoint(second.run_dir)
    assert list(ck.candidates) == ["c0", "c1", "c2", "c3"]
    assert [g.index for g in ck.generations] == [1, 2] and all(g.done for g in ck.generations)
    assert ck.best_id == "c1" and ck.episodes_run == len(runner.played)
    with pytest.raises(RunError, match="episodes"):  # a changed identity field is refused
        run(cfg2.model_copy(update={"episodes": 4}), runner)
    with pytest.raises(RunError, match="already has a checkpoint"):  # so is a fresh run into the folder
        run(config(tmp_path), runner)


def test_resume_after_crash_mid_evaluation(tmp_path):
    ref, runner, target = crashed_run(tmp_path)
    assert sum(1 for fp, _ in runner.played if fp == target) == 1
    cfg = load_checkpoint(tmp_path / "crash").config.model_copy(update={"resume": True})
    res = run(cfg, runner)
    assert max(Counter(runner.played).values()) == 1
    assert {c.id: c.status for c in res.candidates} == {c.id: c.status for c in ref.candidates}
    assert res.report["rows"][-1]["success_rate"] == ref.report["rows"][-1]["success_rate"]


def test_corrupt_checkpoint_gives_clear_error(tmp_path):
    run_dir = tmp_path / "run1"
    run_dir.mkdir()
    (run_dir / "checkpoint.json").write_text('{"version": 2, "candidates": [')
    with pytest.raises(RunError, match=r"corrupt checkpoint .*run1/checkpoint\.json"):
        run(config(tmp_path, resume=True))
    with pytest.raises(RunError, match="no checkpoint to resume"):
        run(config(tmp_path, run="absent", resume=True))


def test_malformed_optimizer_replies_do_not_crash_the_loop(tmp_path):
    calls = {"optimizer": 0}

    def bad(messages, params):
        if params.get("model") == "fake/optimizer":
            calls["optimizer"] += 1
            return "Sorry, I think the prompt is fine {not json"
        return agent_reply(messages)

    res = run(config(tmp_path, generations=1, baseline=None), responder_fn=bad)
    assert calls["optimizer"] == 4  # analyzer: 1 + 1 retry; mutator: 1 + 1 retry
    assert res.best_id == "c0" and len(res.candidates) == 1
    analysis = json.loads((res.run_dir / "analyses/gen-001.json").read_text())
    assert analysis["analysis"]["ok"] is False and "not json" in analysis["analysis"]["raw"]
    assert analysis["mutation"]["edits"] == [] and analysis["mutation"]["error"]
    assert [r["name"].split(" ")[0] for r in res.report["rows"]] == ["random", "initial", "best"]


def test_budget_stops_the_run_and_still_reports(tmp_path):
    res = run(config(tmp_path, generations=5, budget_llm_calls=150))
    assert "LLM-call budget" in res.stop_reason
    ck = load_checkpoint(res.run_dir)
    assert ck.usage["calls"] >= 150 and sum(1 for g in ck.generations if g.done) < 5
    assert (res.run_dir / "report.md").exists() and res.report["rows"][-1]["n"] == 12  # the test table still runs
    res2 = run(config(tmp_path, run="eps", generations=5, budget_episodes=20))
    assert "episode budget" in res2.stop_reason


def test_dollar_budget_needs_a_known_price(tmp_path):
    from promptevo.api import optimize
    from promptevo.llm import Gateway, LLMConfig

    unpriced = Gateway(LLMConfig(model="openai/some-unreleased-model", api_key="sk-test", cache_dir=None))
    with pytest.raises(RunError, match="price of openai/some-unreleased-model is unknown"):
        optimize(config(tmp_path, budget_dollars=1.0), agent_gateway=unpriced, optimizer_gateway=unpriced,
                 task=make_task(), quiet=True)
    assert not (tmp_path / "run1").exists()  # refused before anything was written
    priced = Gateway(LLMConfig(model="openai/some-unreleased-model", api_key="sk-test", cache_dir=None,
                               price_in=0.1, price_out=0.4))
    assert priced.price_known() and not unpriced.price_known()
    assert Gateway(LLMConfig(model="fake/agent", cache_dir=None)).price_known()  # in-process: free


def test_context_overflow_is_a_failed_episode_and_the_run_finishes(tmp_path):
    """An agent call that no longer fits the model's window ends that episode as a failure (the prompt's
    fault, not an error); the run does not abort, and a resumed run finishes without re-playing it."""
    from promptevo.llm import ScriptedReply  # noqa: F401  (the double is registered by run())

    def overflow_when_long(messages, params):
        if params.get("model") == "fake/agent" and "LONG" in messages[0]["content"]:
            import litellm

            return litellm.ContextWindowExceededError(message="prompt too long", model="agent", llm_provider="fake")
        from engine_doubles import responder

        return responder(messages, params)

    from engine_doubles import initial_prompts

    base = initial_prompts()
    long = base.replace_module("actor", base.module("actor").with_segment("rules", "LONG " * 10))
    import promptevo
    from engine_doubles import gateways
    from promptevo.llm import ScriptedLLM

    agw, ogw = gateways()
    with ScriptedLLM.install(overflow_when_long):
        res = promptevo.optimize(config(tmp_path, generations=1, baseline=None), agent_gateway=agw,
                                 optimizer_gateway=ogw, task=make_task(), initial_prompts=long,
                                 runner=CountingRunner(), quiet=True)
    store = EpisodeStore(res.run_dir / "episodes.jsonl")
    eps = [d for _, _, d in store.items(long.fingerprint())]
    assert eps and all(not e["success"] and e["error"] is None and "context overflow" in e["failure"] for e in eps)
    assert res.stop_reason == "completed 1 generations"


def test_a_broken_custom_env_instructions_is_a_warning_not_a_crash(tmp_path):
    class NoInstructions(ScriptedPickupEnv):
        def instructions(self) -> str:
            raise ValueError("not implemented yet")

    from promptevo.envs.registry import register_env

    register_env("broken_instr", lambda params: NoInstructions(), replace=True)
    task = make_task(family="broken_instr", env={})

    def reply(messages, params):
        from engine_doubles import responder

        return responder(messages, params)

    res = run(config(tmp_path, generations=1, baseline=None), CountingRunner(env=lambda t: NoInstructions()),
              responder_fn=reply, task=task)
    assert any("could not describe itself" in w and "not implemented yet" in w for w in res.report["warnings"])
    assert "could not describe itself" in (res.run_dir / "run.log").read_text()


def test_concurrency_defaults_to_one_for_local_models():
    from promptevo.optim.config import OptimizeConfig

    assert OptimizeConfig(task="goto").effective_concurrency == 1  # the default model is local/
    assert OptimizeConfig(task="goto", model="openai/gpt-4o-mini").effective_concurrency == 4
    assert OptimizeConfig(task="goto", concurrency=3).effective_concurrency == 3


def test_progress_lines_without_a_terminal(tmp_path):
    from promptevo.optim.progress import PlainLines, RunLog

    out = io.StringIO()
    res = run(config(tmp_path), listeners=[PlainLines(out), RunLog(tmp_path / "x.log")])
    text = out.getvalue()
    assert "[gen 1] c1 rewrite actor.rules [mutate]: accepted" in text
    assert "[gen 1] validation gate c1" in text and "PROMOTED" in text
    assert "[gen 1] done:" in text and "[gen 2] done:" in text
    assert "Test split: n = 12" in text
    assert (tmp_path / "x.log").read_text().count("\n") >= text.count("\n") - 12
    assert res.best_id == "c1"


def test_episode_store_tolerates_a_cut_last_line_but_not_corruption(tmp_path):
    path = tmp_path / "episodes.jsonl"
    store = EpisodeStore(path)
    store.put("abc", 1, {"seed": 1, "success": True})
    store.put("abc", 2, {"seed": 2, "success": False, "error": "LLMError: timeout"})
    assert store.get("abc", 1)["success"] and store.get("abc", 2) is None  # errored = not finished
    with path.open("a") as f:
        f.write('{"key": "abc", "seed": 3, "res')
    again = EpisodeStore(path)
    assert again.get("abc", 1) and again.get("abc", 3) is None
    path.write_text("garbage\n" + path.read_text())
    with pytest.raises(StoreError, match="episodes.jsonl:1"):
        EpisodeStore(path)


def test_context_error_class_is_a_config_error_subclass():
    from promptevo.llm import LLMConfigError

    assert issubclass(LLMContextError, LLMConfigError)
