"""The hint library (candidate rules as data) and the proposal operators that need no strong optimizer:
hints, ablation-guided deletion, crossover."""

from __future__ import annotations

import random

import pytest

from promptevo.optim.propose.crossover import crossover, propose_crossovers
from promptevo.optim.propose.hints import (
    HintLibraryError,
    builtin_path,
    hint_edit,
    load_hints,
    propose_hints,
    rank_hints,
)
from promptevo.segments import Prompt, PromptSet, Segment, apply_edit

GOOD = '''
[[hint]]
id = "wall"
text = "If a wall is 1 step forward, turn."
tags = ["wall_bump"]

[[hint]]
id = "look"
text = "If you cannot see your target, turn left."
target = "act"
tasks = ["goto"]

[[hint]]
id = "name-target"
text = "Name the target's line first."
target = "perceive"
'''


def two_stage() -> PromptSet:
    return PromptSet.of({
        "descriptor": Prompt((Segment("role", "Describe."), Segment("output_format", "Reply."))),
        "actor": Prompt((Segment("role", "Act."), Segment("rules", "Be careful."),
                         Segment("output_format", "<|ACTION|>a<|END|>"))),
    })


def test_load_rank_and_insert_hints(tmp_path):
    f = tmp_path / "h.toml"
    f.write_text(GOOD)
    lib = load_hints(f)
    assert [h.id for h in lib.hints] == ["wall", "look", "name-target"]
    assert [h.id for h in lib.for_task("pickup")] == ["wall", "name-target"]
    assert [h.id for h in rank_hints(lib.hints, ["turn_oscillation", "wall_bump"])][0] == "wall"
    ps = two_stage()
    e = hint_edit(lib.hints[0], ps)
    assert (e.op, e.module, e.segment, e.after) == ("add", "actor", "hint-wall", "rules")
    child = apply_edit(ps, e)
    assert child.module("actor").names == ["role", "rules", "hint-wall", "output_format"]
    assert hint_edit(lib.hints[2], ps).module == "descriptor"
    single = PromptSet.of({"system": Prompt((Segment("role", "Act."), Segment("format", "x")))})
    assert hint_edit(lib.hints[2], single).module == "system"  # no descriptor: the acting module
    tried: set[str] = set()
    out = propose_hints(ps, lib, task="goto", n=2, tried=tried, signature_kinds=["wall_bump"])
    assert [h.id for h, _, _ in out] == ["wall", "look"] and len(tried) == 2
    again = propose_hints(ps, lib, task="goto", n=5, tried=tried)  # the same children are not proposed twice
    assert [h.id for h, _, _ in again] == ["name-target"]
    assert propose_hints(child, lib, task="goto", n=5, tried=set(), skip={"look"})[0][0].id == "name-target"


@pytest.mark.parametrize("body,needle", [
    ("", "no [[hint]] entries"),
    ("[[hint]]\nid = 'Bad Id'\ntext = 'x'\n", "hint #1: id must be"),
    ("[[hint]]\nid = 'a'\ntext = ''\n", "hint #1 (a): text must be a non-empty string"),
    ("[[hint]]\nid = 'a'\ntext = 'x'\ntarget = 'think'\n", "target must be act or perceive"),
    ("[[hint]]\nid = 'a'\ntext = 'x'\ntags = 'wall'\n", "tags must be a list of strings"),
    ("[[hint]]\nid = 'a'\ntext = 'x'\ncolour = 1\n", "unknown key 'colour'"),
    ("[[hint]]\nid = 'a'\ntext = 'x'\n[[hint]]\nid = 'a'\ntext = 'y'\n", "hint #2: duplicate id 'a'"),
    ("[[hint]\n", "not valid TOML"),
])
def test_malformed_hint_files_are_one_clear_line(tmp_path, body, needle):
    f = tmp_path / "bad.toml"
    f.write_text(body)
    with pytest.raises(HintLibraryError) as e:
        load_hints(f)
    assert needle in str(e.value) and "\n" not in str(e.value) and "bad.toml" in str(e.value)
    with pytest.raises(HintLibraryError, match="not found"):
        load_hints(tmp_path / "missing.toml")


def test_the_shipped_babyai_library_loads_and_is_not_in_the_prompt_initializations():
    lib = load_hints(builtin_path("babyai"))
    assert len(lib.hints) >= 10
    from promptevo.resources import prompts_dir

    inits = "\n".join(p.read_text() for p in (prompts_dir() / "babyai").rglob("*.md"))
    inits += "\n".join(p.read_text() for p in (prompts_dir() / "baselines").glob("*.md"))
    for h in lib.hints:
        assert h.text not in inits, h.id


def test_a_run_with_a_malformed_hint_file_stops_before_any_episode(tmp_path):
    from engine_doubles import config, run

    from promptevo.optim.state import RunError

    bad = tmp_path / "h.toml"
    bad.write_text("[[hint]]\nid = 'x'\n")
    with pytest.raises(RunError, match="text must be a non-empty string"):
        run(config(tmp_path, operators=["hints"], hints=str(bad)))
    assert not (tmp_path / "run1" / "episodes.jsonl").exists()


def test_hint_operator_in_the_loop(tmp_path):
    """The hints operator inserts the library's rule; the rule (the test double's agent obeys it) is
    accepted, promoted and counted per operator; a run without hints still works (test_engine)."""
    from engine_doubles import RULE, config, run

    lib = tmp_path / "h.toml"
    lib.write_text(f'[[hint]]\nid = "face"\ntext = "{RULE}"\n\n[[hint]]\nid = "noop"\ntext = "Be calm."\n')
    res = run(config(tmp_path, generations=1, children=2, operators=["hints"], hints=str(lib)))
    c = {x.id: x for x in res.candidates}
    assert c["c1"].operator == "hint" and c["c1"].source == {"hint": "face", "author": "person"} and c["c1"].status == "promoted"
    assert c["c2"].source == {"hint": "noop", "author": "person"} and c["c2"].status in ("rejected", "stopped")
    ops = res.report["operators"]["hint"]
    assert ops == {"proposed": 2, "screened_out": 0, "stopped": ops["stopped"], "accepted": 1, "promoted": 1}


def test_crossover_mixes_segments_and_differs_from_both_parents():
    a = PromptSet.of({"actor": Prompt((Segment("role", "A role"), Segment("rules", "A rules"),
                                        Segment("format", "F")))})
    b = PromptSet.of({"actor": Prompt((Segment("role", "B role"), Segment("rules", "B rules"),
                                        Segment("tips", "B tips"), Segment("format", "F")))})
    rng = random.Random(0)
    kids = {c.fingerprint() for c in (crossover(a, b, rng) for _ in range(30)) if c is not None}
    assert len(kids) > 2 and a.fingerprint() not in kids and b.fingerprint() not in kids
    child = next(c for c in (crossover(a, b, rng) for _ in range(30)) if c is not None)
    assert child.module("actor").names[-1] == "format"  # b-only segments go before the format segment
    tried: set[str] = set()
    out = propose_crossovers(a, [("c1", a), ("c2", b)], parent_id="c1", n=2, tried=tried, seed=1)
    assert [o for o, _ in out] == ["c2"] and len(tried) == 1


def test_ablation_guided_deletion_in_the_loop(tmp_path):
    """The delete operator plays the parent without a few segments on evidence seeds and proposes the
    deletions that cost nothing; the paired race then measures them like any child."""
    from engine_doubles import config, run

    res = run(config(tmp_path, generations=1, children=1, operators=["delete"], evidence_episodes=4))
    c = {x.id: x for x in res.candidates}
    import json

    blob = json.loads((res.run_dir / "analyses" / "gen-001.json").read_text())
    rows = {(r["module"], r["segment"]): r for r in blob["ablation"]}
    assert rows and all(r["n"] == 4 for r in rows.values())
    assert c["c1"].operator == "delete" and c["c1"].edit["op"] == "delete"
    assert (c["c1"].edit["module"], c["c1"].edit["segment"]) in rows
    assert c["c1"].source["ablation"]["delta"] >= 0


def test_a_hint_with_an_answer_shape_rewrites_the_format_segment(tmp_path):
    f = tmp_path / "h.toml"
    f.write_text('[[hint]]\nid = "shape"\ntext = "Copy the target line first."\n'
                 'format = """Answer:\\nTarget line: <line>\\n<|ACTION|>the action<|END|>"""\n')
    lib = load_hints(f)
    cot = PromptSet.of({"system": Prompt((Segment("role", "Act."),
                                          Segment("format", "Mission: {mission}\nThink. <|ACTION|>a<|END|>")))})
    (hint, edit, child), = propose_hints(cot, lib, task="goto", n=1, tried=set())
    fmt = child.module("system").get("format")
    assert fmt.startswith("Mission: {mission}\nAnswer:") and "Target line" in fmt and "<|ACTION|>" in fmt
    assert child.module("system").names == ["role", "hint-shape", "format"]
    naive = PromptSet.of({"system": Prompt((Segment("role", "Act."), Segment("format", "Reply with the action.")))})
    assert propose_hints(naive, lib, task="goto", n=1, tried=set()) == []  # no <|ACTION|> protocol: not offered
    bad = tmp_path / "bad.toml"
    bad.write_text('[[hint]]\nid = "x"\ntext = "y"\nformat = "Just answer."\n')
    with pytest.raises(HintLibraryError, match="must be text that keeps"):
        load_hints(bad)


def test_rank_hints_weighs_every_observed_signature_a_hint_addresses_then_prefers_the_task():
    from promptevo.optim.propose.hints import Hint

    hints = [Hint("generic", "g", tags=("wall_bump",)), Hint("two", "t", tags=("wall_bump", "repeated_state")),
             Hint("mine", "m", tags=("wall_bump",), tasks=("goto",)), Hint("none", "n", tags=("other",))]
    order = [h.id for h in rank_hints(hints, ["wall_bump", "repeated_state"], "goto")]
    assert order == ["two", "mine", "generic", "none"]
