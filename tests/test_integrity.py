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
    from promptevo.cli.errors import UsageError

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
    from promptevo.api import remove_if_unstarted
    from promptevo.optim.config import ConfigError

    with pytest.raises(ConfigError, match="needs 10008 train seeds"):  # refused before the folder exists
        run(config(tmp_path, run="tiny", episodes=10_000))
    assert not (tmp_path / "tiny").exists()
    res = run(config(tmp_path, generations=0, test_episodes=2))  # a run that played: its folder stays
    remove_if_unstarted(res.run_dir)
    assert (res.run_dir / "episodes.jsonl").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.toml").write_text("")
    (bare / "checkpoint.json").write_text("{}")
    remove_if_unstarted(bare)
    assert not bare.exists()


HOSTILE = "Turn <script>alert(1)</script> <img src=x onerror=alert(2)> \x1b[2J\x1b]8;;http://evil\x07link\x1b]8;;\x07 ```` end"


def test_exports_hold_no_raw_markup_and_no_escape_bytes(tmp_path):
    from promptevo.reporting.export import export_run
    from promptevo.segments import PromptSet

    res = run(config(tmp_path, generations=1))
    path = res.run_dir / "checkpoint.json"
    data = json.loads(path.read_text())
    for c in data["candidates"].values():  # what a hostile optimizer reply would have written
        if c["edit"]:
            c["edit"]["rationale"] = HOSTILE
    path.write_text(json.dumps(data))
    best = load_checkpoint(res.run_dir).best.prompt_set()
    mod, prompt = best.modules[0]
    hostile = PromptSet.from_dict({"meta": {}, "modules": {mod: [{"name": "x", "text": HOSTILE}]}})
    out = export_run(res.run_dir, tmp_path / "out")
    texts = {p.name: p.read_text() for p in out if p.suffix == ".md"}
    texts["hostile.md"] = hostile.to_markdown()
    for name, text in texts.items():
        assert "\x1b" not in text and "<script" not in text and "<img" not in text, name
    assert "&lt;script&gt;" in texts["hostile.md"]
    back = PromptSet.from_markdown(texts["hostile.md"]).to_dict()["modules"][mod][0]["text"]
    assert "<script>alert(1)</script>" in back and "\x1b" not in back  # the text itself, minus escapes
    from promptevo.safetext import fence

    block = fence(["a ```` b"], "diff")
    assert block[0] == "`````diff" and block[-1] == "`````"


def test_export_out_refuses_a_folder_with_files(tmp_path):
    from promptevo.cli.export import cli_main

    res = run(config(tmp_path, generations=1))
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert cli_main([str(res.run_dir), "--out", str(other)]) == 2
    assert (other / "notes.txt").read_text() == "keep me" and not (other / "best.md").exists()
    assert cli_main([str(res.run_dir), "--out", str(other), "--force"]) == 0 and (other / "best.md").exists()


def test_dry_run_refuses_what_the_run_refuses(tmp_path, capsys):
    from promptevo.cli.optimize import cli_main

    base = ["--task", "goto", "--dry-run", "--results-dir", str(tmp_path), "--model", "fake/scripted"]
    for extra, says in ((["--agent", "robust-cot", "--history", "-1"], "history"),
                        (["--episodes", "5000"], "--episodes"), (["--init", "nosuch"], "nosuch"),
                        (["--prompts", __file__], "--prompts")):
        assert cli_main(base + extra) == 2, extra
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_error_lines_print_file_contents_literally(capsys):
    from promptevo.cli.errors import print_error

    print_error("bad line 'root:x:0:0' [bold]x[/] \x1b[2Jend")
    err = capsys.readouterr().err
    assert "root:x:0:0" in err and "[bold]x[/]" in err and "\x1b[2J" not in err


def test_plain_progress_lines_keep_coming_during_a_long_silence():
    import io
    import time

    from promptevo.optim.progress import PlainLines

    out = io.StringIO()
    lines = PlainLines(out, cfg=config(__import__("pathlib").Path("/tmp")), heartbeat_s=0.2)
    lines.on_event("episode", {"seed": 1, "success": True, "split": "train", "calls": 3})
    time.sleep(1.2)  # a long LLM call: no event
    lines.on_event("run_end", {"stop_reason": "done"})
    beats = [ln for ln in out.getvalue().splitlines() if ln.startswith("progress:")]
    assert beats and "1/~" in beats[0] and "3 LLM calls" in beats[0] and "elapsed" in beats[0]


def test_a_silent_server_is_named_while_the_call_waits(monkeypatch, caplog):
    import logging
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from fake_openai_server import FakeOpenAIServer

    import promptevo.llm.gateway as gateway
    from promptevo.llm import Gateway, LLMConfig

    monkeypatch.setattr(gateway, "SILENT_AFTER_S", 0.2)
    srv = FakeOpenAIServer(delay=0.8, reply="ok").start()
    try:
        gw = Gateway(LLMConfig(model="openai/fake", api_base=srv.api_base, api_key="k", cache_dir=None, num_retries=0))
        with caplog.at_level(logging.WARNING, logger="promptevo.llm.gateway"):
            gw.complete([{"role": "user", "content": "hi"}])
    finally:
        srv.stop()
    said = [r.getMessage() for r in caplog.records if "no answer" in r.getMessage()]
    assert said and said[0].startswith(f"waiting for {srv.api_base}: no answer for 0") and "attempt 1 of 1" in said[0]
