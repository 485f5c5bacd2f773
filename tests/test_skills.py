"""Skill library: storage, dedupe, selection and insertion of skills into prompt sets."""

import json

import pytest

from promptevo.segments import Edit, Prompt, PromptSet, Segment, apply_edit
from promptevo.optim.propose.skills import (
    Skill,
    SkillLibrary,
    SkillLibraryError,
    family_of,
    outcome_kind,
    render,
    skill_edit,
    skill_id,
    skill_id_from_rationale,
)


def _ps(**modules: list[tuple[str, str]]) -> PromptSet:
    return PromptSet.of({m: Prompt(tuple(Segment(n, t) for n, t in segs)) for m, segs in modules.items()})


def _two_stage() -> PromptSet:
    return _ps(
        descriptor=[("role", "Describe what you see."), ("output_format", "At most five lines.")],
        actor=[("role", "You control a player."), ("strategy", "Scan by turning."),
               ("format", "Reply with one action.")],
    )


def _skill(text: str, *, task: str = "pickup", family: str = "babyai", gain: float = 0.2,
           module: str = "actor", segment: str = "strategy", **kw) -> Skill:
    return Skill(module=module, segment=segment, text=text, task=task, family=family, run="r1", gain=gain,
                 n=8, train_gain=0.3, created="2025-01-01T00:00:00Z", **kw)


def test_skill_id_is_stable_and_depends_on_content():
    a = _skill("Face the target before acting.")
    b = _skill("Face the target before acting.", task="open", gain=0.9)
    c = _skill("Face the target before acting!")
    assert a.id == b.id == skill_id("actor", "strategy", "Face the target before acting.")
    assert len(a.id) == 12 and a.id != c.id
    assert _skill("x", segment="rules").id != _skill("x").id


def test_round_trip_keeps_everything(tmp_path):
    lib = SkillLibrary()
    s = lib.from_promotion({"op": "add", "module": "actor", "segment": "doors", "text": "Open closed doors first.",
                            "rationale": "r"}, task="open", family="babyai", run="run-a", heldout_gain=0.25, n=10,
                           train_gain=0.5, created="2025-02-03T04:05:06Z")
    assert s is not None
    lib.record_use(s.id, "goto", "run-b", "promoted", 0.1)
    path = lib.save(tmp_path / "sub" / "skills.json")
    raw = path.read_text(encoding="utf-8")
    assert raw.startswith("{\n")  # indented, human-readable
    assert "Open closed doors first." in raw
    assert not list(path.parent.glob("*.tmp"))  # temporary file replaced, none left behind
    back = SkillLibrary.load(path)
    assert [k.model_dump() for k in back] == [k.model_dump() for k in lib]
    got = back.get(s.id)
    assert got.gain == 0.25 and got.n == 10 and got.train_gain == 0.5 and got.task == "open"
    assert got.uses[0].task == "goto" and got.uses[0].outcome == "promoted" and got.successes == 1
    back.save()  # saves to the path it was loaded from
    assert json.loads(path.read_text())["skills"][0]["id"] == s.id


def test_missing_file_is_empty_and_corrupt_file_is_one_clear_line(tmp_path):
    lib = SkillLibrary.load(tmp_path / "none.json")
    assert len(lib) == 0 and lib.path == tmp_path / "none.json"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(SkillLibraryError) as e:
        SkillLibrary.load(bad)
    msg = str(e.value)
    assert "corrupt skill library" in msg and str(bad) in msg and "\n" not in msg
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"skills": [{"module": "actor"}]}), encoding="utf-8")
    with pytest.raises(SkillLibraryError, match=r"corrupt skill library .*skills\.segment"):
        SkillLibrary.load(wrong)
    wrong.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SkillLibraryError, match="no 'skills' list"):
        SkillLibrary.load(wrong)


def test_add_dedupes_by_id_keeping_best_gain_and_all_uses():
    lib = SkillLibrary()
    low = lib.add(_skill("Turn toward the target.", gain=0.1, task="goto"))
    lib.record_use(low.id, "open", "x", "rejected", -0.1)
    high = _skill("Turn toward the target.", gain=0.4, task="putnext")
    stored = lib.add(high)
    assert len(lib) == 1
    assert stored.gain == 0.4 and stored.task == "putnext"
    assert [u.outcome for u in stored.uses] == ["rejected"]
    again = lib.add(_skill("Turn toward the target.", gain=0.05, task="open"))  # lower gain: kept as is
    assert again.gain == 0.4 and len(again.uses) == 1


def test_from_promotion_only_keeps_useful_edits():
    lib = SkillLibrary()
    base = {"module": "actor", "segment": "strategy", "text": "Check the cell ahead.", "rationale": ""}
    assert lib.from_promotion({**base, "op": "delete", "text": ""}, "goto", "babyai", "r", 0.3, 5, 0.2) is None
    assert lib.from_promotion({**base, "op": "rewrite", "text": "  \n"}, "goto", "babyai", "r", 0.3, 5, 0.2) is None
    assert lib.from_promotion({**base, "op": "rewrite"}, "goto", "babyai", "r", 0.0, 5, 0.2) is None
    assert lib.from_promotion({**base, "op": "rewrite"}, "goto", "babyai", "r", -0.1, 5, 0.2) is None
    assert len(lib) == 0
    s = lib.from_promotion(Edit("rewrite", "actor", "strategy", "Check the cell ahead."), "goto", "BabyAI", "r", 0.3, 5, 0.2)
    assert s is not None and s.family == "babyai" and s.gain == 0.3 and s.train_gain == 0.2 and len(lib) == 1
    assert s.created.endswith("Z")


def test_record_use_unknown_id():
    with pytest.raises(SkillLibraryError, match="no skill with id"):
        SkillLibrary().record_use("deadbeef0000", "goto", "r", "promoted", 0.1)


def test_outcome_kinds_and_family():
    assert outcome_kind("promoted") == "success"
    assert outcome_kind("accepted and promoted") == "success"
    assert outcome_kind("not-promoted") == "failure"
    assert outcome_kind("accepted on training seeds, failed held-out check") == "failure"
    assert outcome_kind("accepted") == "neutral"
    assert family_of("mapf-easy") == "mapf" and family_of("putnext") == "babyai"


def test_select_ranks_same_family_then_gain_then_successes_and_excludes():
    lib = SkillLibrary()
    own = lib.add(_skill("Learned here.", task="goto", gain=0.9))
    other_family = lib.add(_skill("Plan paths for all agents.", task="mapf-easy", family="mapf", gain=0.8))
    a = lib.add(_skill("Keys open doors of their colour.", task="open", gain=0.3))
    b = lib.add(_skill("Drop next to, not onto, the target.", task="putnext", gain=0.3))
    c = lib.add(_skill("Finish the first part first.", task="pick_up_seq_go_to", gain=0.5))
    present = lib.add(_skill("Scan by turning.", task="pickup", gain=0.95))
    failed = lib.add(_skill("Always toggle.", task="open", gain=0.7))
    lib.record_use(b.id, "pickup", "r0", "promoted", 0.2)
    lib.record_use(failed.id, "goto", "r0", "rejected", -0.2)
    lib.record_use(a.id, "goto", "r0", "accepted", 0.1)  # neutral: not a failure
    got = lib.select("goto", "babyai", _two_stage(), k=10)
    ids = [s.id for s in got]
    assert ids == [c.id, b.id, a.id, other_family.id]
    assert own.id not in ids and present.id not in ids and failed.id not in ids
    assert [s.id for s in lib.select("goto", "babyai", _two_stage(), k=2)] == [c.id, b.id]
    assert lib.select("goto", "babyai", _two_stage(), k=0) == []
    # the failure was on goto only: on another task the skill is offered again (and ranks by gain)
    assert [s.id for s in lib.select("pickup", "babyai", _ps(actor=[("role", "x")]), k=2)] == [own.id, failed.id]
    # for a MAPF task the MAPF skill comes first
    assert lib.select("mapf-hard", "mapf", _two_stage(), k=1)[0].id == other_family.id


def test_select_offers_a_text_once():
    lib = SkillLibrary()
    lib.add(_skill("Same text.", task="open", gain=0.2, segment="rules"))
    lib.add(_skill("Same text.", task="pickup", gain=0.4, segment="strategy"))
    got = lib.select("goto", "babyai", _two_stage())
    assert len(got) == 1 and got[0].gain == 0.4


def test_render_lists_id_origin_gain_and_text():
    s = _skill("Line one.\nLine two.", task="open", gain=0.25)
    out = render([s])
    assert s.id in out and "learned on open (babyai)" in out and "+0.250" in out and "8 seeds" in out
    assert "    Line one.\n    Line two." in out
    long = _skill("word " * 200, task="open")
    assert render([long], max_chars=50).splitlines()[1].endswith("...")
    assert len(render([long], max_chars=50).splitlines()[1]) <= 54
    assert render([]) == "(no skills)"


def test_skill_edit_goes_before_format_with_unique_name_and_applies():
    ps = _two_stage()
    s = _skill("Walk until the target is level, then turn.", task="open")
    e = skill_edit(s, ps)
    assert (e.op, e.module, e.segment, e.after) == ("add", "actor", "skill-strategy", "strategy")
    assert s.id in e.rationale and skill_id_from_rationale(e.rationale) == s.id
    child = apply_edit(ps, e)
    assert child.module("actor").names == ["role", "strategy", "skill-strategy", "format"]
    assert child.module("actor").get("skill-strategy") == s.text
    # a second skill for the same segment gets a fresh name, still before the format segment
    s2 = _skill("Prefer open doors.", task="open")
    e2 = skill_edit(s2, child)
    assert e2.segment == "skill-strategy-2"
    grand = apply_edit(child, e2)
    assert grand.module("actor").names == ["role", "strategy", "skill-strategy", "skill-strategy-2", "format"]
    assert grand.module("descriptor") == ps.module("descriptor")


def test_skill_edit_module_fallbacks():
    ps = _two_stage()
    # unknown module, but a module has a segment of that name -> that module, before output_format
    s = _skill("Name colours.", module="describer", segment="role")
    e = skill_edit(s, ps)
    assert e.module == "descriptor" and e.segment == "skill-role"
    assert apply_edit(ps, e).module("descriptor").names == ["role", "skill-role", "output_format"]
    # nothing matches -> last module; without a format segment -> at the end
    single = _ps(system=[("rules", "Be brief."), ("tips", "Think.")])
    s = _skill("Count steps.", module="planner", segment="plan")
    e = skill_edit(s, single)
    assert (e.module, e.segment, e.after) == ("system", "skill-plan", "tips")
    assert apply_edit(single, e).module("system").names == ["rules", "tips", "skill-plan"]
    # a skill that is itself a skill segment keeps its name (no skill-skill-...)
    s = _skill("Reuse.", segment="skill-doors")
    assert skill_edit(s, ps).segment == "skill-doors"


def test_selected_skills_apply_to_the_prompts_they_were_selected_for():
    lib = SkillLibrary()
    for i, t in enumerate(["open", "putnext", "pickup"]):
        lib.add(_skill(f"Tip {i} from {t}.", task=t, gain=0.1 * (i + 1)))
    ps = _two_stage()
    for s in lib.select("goto", "babyai", ps, k=3):
        ps = apply_edit(ps, skill_edit(s, ps))
    names = ps.module("actor").names
    assert names[-1] == "format"
    assert names.count("skill-strategy") == 1 and "skill-strategy-3" in names
    assert lib.select("goto", "babyai", ps) == []  # all three are now in the prompts
