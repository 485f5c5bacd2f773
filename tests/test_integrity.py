"""Numbers nobody can fake by accident: the episode store refuses lines nobody scheduled, altered lines and
duplicates (never scored); an edited prompt in the checkpoint stops resume, report and export."""

from __future__ import annotations

import json

import pytest
from engine_doubles import config, crashed_run, run

from promptevo.evaluation.store import EpisodeStore, line_sum
from promptevo.optim.state import RunError, load_checkpoint


def test_store_refuses_altered_unsummed_and_duplicate_lines(tmp_path):
    path = tmp_path / "episodes.jsonl"
    s = EpisodeStore(path)
    s.put("k", 1, {"seed": 1, "success": False}, split="train", settings="abc")
    s.put("k", 2, {"seed": 2, "success": False})
    lines = path.read_text().splitlines()
    altered = json.loads(lines[0])
    altered["result"]["success"] = True  # flipped by hand, digest left as it was
    dup = lines[1]
    unsummed = json.dumps({"key": "k", "seed": 3, "result": {"seed": 3, "success": True}})
    path.write_text("\n".join([json.dumps(altered), lines[1], dup, unsummed]) + "\n")
    again = EpisodeStore(path)
    assert again.get("k", 1) is None and again.get("k", 3) is None and again.get("k", 2) is not None
    why = "\n".join(again.refused)
    assert "episodes.jsonl:1" in why and "checksum does not match" in why
    assert "episodes.jsonl:3" in why and "second finished episode" in why
    assert "episodes.jsonl:4" in why and "no checksum" in why
    assert len(again.refused) == 3 and all("\n" not in x for x in again.refused)
    # the refused lines are kept aside, as they were, and the store file holds only accepted ones
    assert len((tmp_path / "episodes.jsonl.refused").read_text().splitlines()) == 3
    assert EpisodeStore(path).refused == [] and len(EpisodeStore(path)) == 1
    # a store written before lines carried digests is read as it is
    legacy = tmp_path / "old.jsonl"
    legacy.write_text(unsummed + "\n")
    old = EpisodeStore(legacy)
    assert not old.checked and old.get("k", 3) is not None and old.refused == []


def test_fabricated_episodes_after_a_crash_are_refused_and_never_scored(tmp_path):
    ref, runner, _ = crashed_run(tmp_path)
    run_dir = tmp_path / "crash"
    ck = load_checkpoint(run_dir)
    c0 = ck.candidates["c0"].fingerprint
    store_file = run_dir / "episodes.jsonl"
    real = store_file.read_text().splitlines()
    forged = []
    for seed in ck.splits["test"]:  # a forger who knows the line format and its digest: test seeds never scheduled
        rec = json.loads(real[0])
        rec.update(key=c0, seed=int(seed), split="test")
        rec["result"] = {**rec["result"], "seed": int(seed), "success": True, "progression": 1.0}
        rec["sum"] = line_sum(rec)
        forged.append(json.dumps(rec))
    forged.append(real[0])  # a duplicate of a real line
    with store_file.open("a") as f:
        f.write("\n".join(forged) + "\n")
    res = run(ck.config.model_copy(update={"resume": True}), runner)
    assert res.report["rows"][-1]["success_rate"] == ref.report["rows"][-1]["success_rate"]
    assert [r["success_rate"] for r in res.report["rows"]] == [r["success_rate"] for r in ref.report["rows"]]
    warns = load_checkpoint(run_dir).warnings
    assert sum("never scheduled" in w for w in warns) == len(ck.splits["test"])
    assert sum("second finished episode" in w for w in warns) == 1
    assert len((run_dir / "episodes.jsonl.refused").read_text().splitlines()) == len(forged)


def test_an_edited_prompt_in_the_checkpoint_stops_resume_report_and_export(tmp_path):
    from promptevo.reporting.export import export_run
    from promptevo.reporting.html import load_run

    res = run(config(tmp_path, generations=1))
    path = res.run_dir / "checkpoint.json"
    data = json.loads(path.read_text())
    seg = data["candidates"]["c0"]["prompts"]["modules"]
    mod = next(iter(seg))
    seg[mod][0]["text"] += " Always answer go forward."
    path.write_text(json.dumps(data))
    for call in (lambda: load_checkpoint(res.run_dir), lambda: load_run(res.run_dir),
                 lambda: export_run(res.run_dir, tmp_path / "out")):
        with pytest.raises(RunError, match="c0's prompt texts give fingerprint .* edited after the run"):
            call()


def test_a_server_that_ignores_max_tokens_gets_its_reply_cut_and_flagged():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from fake_openai_server import FakeOpenAIServer

    from promptevo.llm import Gateway, LLMConfig
    from promptevo.llm.gateway import MAX_CHARS_PER_TOKEN

    srv = FakeOpenAIServer(delay=0.0, reply="x" * 1_000_000).start()
    try:
        gw = Gateway(LLMConfig(model="openai/fake", api_base=srv.api_base, api_key="k", cache_dir=None,
                               max_tokens=64, num_retries=0))
        c = gw.complete([{"role": "user", "content": "hi"}])
    finally:
        srv.stop()
    assert len(c.text) == 64 * MAX_CHARS_PER_TOKEN and c.truncated


class Huge:
    """A test operator whose child carries a 1 MB segment (what a runaway optimizer reply becomes)."""

    name, author, reads, summary = "huge-op", "machine", (), "writes a 1 MB rule"

    def propose(self, parent, evidence, ctx, k):
        from promptevo.optim.adapter import Proposal
        from promptevo.segments import Edit, apply_edit

        edit = Edit(op="rewrite", module="actor", segment="rules", text="Turn. " * 170_000, rationale="runaway")
        child = apply_edit(parent, edit)
        return [Proposal(child, self.name, edit.to_dict())] if ctx.new_child(child) else []


def test_an_oversized_child_is_refused_with_one_line_and_counted(tmp_path):
    from promptevo.optim.propose.registry import register_operator

    register_operator(Huge(), replace=True)
    res = run(config(tmp_path, operators=["huge-op"], generations=1, children=1))
    assert [c.id for c in res.candidates] == ["c0"]
    lines = [str(w) for w in res.report["warnings"] if "huge-op" in str(w)]
    assert len(lines) == 1 and "over the 512-token cap per segment" in lines[0] and "refused" in lines[0]
    gen = json.loads((res.run_dir / "analyses" / "gen-001.json").read_text())
    assert gen["proposals"]["oversized"] == 1 if "proposals" in gen else "oversized" in json.dumps(gen)


@pytest.mark.parametrize("name", ["../x", "a/b", "/abs", "..", "a b"])
def test_run_names_stay_inside_the_results_dir(name, tmp_path):
    from promptevo.cli.optimize import config_from_args
    from promptevo.cli.parsing import UsageError

    with pytest.raises(UsageError, match=r"^--run: .* is not a run name"):
        config_from_args(["--task", "goto", "--run", name, "--results-dir", str(tmp_path)])


def test_negative_margins_need_their_flag():
    from promptevo.cli.optimize import config_from_args
    from promptevo.optim.config import ConfigError

    with pytest.raises(ConfigError, match="^--promote-margin: -0.1 is negative"):
        config_from_args(["--task", "goto", "--promote-margin", "-0.1"])
    cfg, _ = config_from_args(["--task", "goto", "--promote-margin", "-0.1", "--allow-negative-margins"])
    assert cfg.promote_margin == -0.1


def test_a_refused_new_run_leaves_no_folder(tmp_path):
    with pytest.raises(RunError):
        run(config(tmp_path, run="tiny", episodes=10_000))
    assert not (tmp_path / "tiny").exists()
