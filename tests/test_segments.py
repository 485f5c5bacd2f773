"""Segmented prompts: markdown round trip, edits, diffs and clear errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promptevo.segments import (
    Edit,
    Prompt,
    PromptFormatError,
    PromptSet,
    Segment,
    apply_edit,
    diff_prompts,
    sanitize_text,
)

MD = """<!-- {"agent": "two-stage", "init": "plain"} -->
# descriptor

## role

You describe the scene.

## rules

Lead with the target.
### a sub heading stays

# actor

## role

You choose one action.
"""


def test_markdown_round_trip_keeps_modules_segments_and_meta():
    ps = PromptSet.from_markdown(MD)
    assert ps.module_names == ["descriptor", "actor"]
    assert ps.module("descriptor").names == ["role", "rules"]
    assert ps.module("descriptor").get("rules") == "Lead with the target.\n### a sub heading stays"
    assert dict(ps.meta) == {"agent": "two-stage", "init": "plain"}
    again = PromptSet.from_markdown(ps.to_markdown())
    assert again == ps
    assert again.fingerprint() == ps.fingerprint()


def test_json_and_file_round_trip(tmp_path):
    ps = PromptSet.from_markdown(MD)
    for name in ("p.md", "p.json"):
        path = ps.save(tmp_path / name)
        assert PromptSet.load(path) == ps


def test_render_joins_segment_texts_and_can_skip():
    p = PromptSet.from_markdown(MD).module("descriptor")
    assert p.render() == "You describe the scene.\n\nLead with the target.\n### a sub heading stays"
    assert p.render(skip={"rules"}) == "You describe the scene."


@pytest.mark.parametrize(
    "text, message",
    [
        ("## role\nx\n", "segment before any"),
        ("hello\n# actor\n", "text outside"),
        ("# actor\nstray text\n", "text outside"),
        ("# Actor Module\n## role\nx\n", "invalid module name"),
        ("# actor\n## role\nx\n## role\ny\n", "duplicate segment"),
        ("# actor\n## role\nx\n# actor\n## b\ny\n", "appears twice"),
        ("", "no '# module'"),
    ],
)
def test_malformed_markdown_gives_clear_error(text, message):
    with pytest.raises(PromptFormatError, match=message):
        PromptSet.from_markdown(text, source="bad.md")


def test_missing_file_error_names_the_path(tmp_path):
    with pytest.raises(PromptFormatError, match="not found"):
        PromptSet.load(tmp_path / "nope.md")


def test_edits_rewrite_add_delete_and_diff():
    ps = PromptSet.from_markdown(MD)
    added = apply_edit(ps, Edit("add", "actor", "strategy", "Face the object, then pick up.", after="role"))
    assert added.module("actor").names == ["role", "strategy"]
    rewritten = apply_edit(added, Edit("rewrite", "actor", "role", "You pick actions."))
    deleted = apply_edit(rewritten, Edit("delete", "descriptor", "rules"))
    kinds = {(d.module, d.segment, d.kind) for d in diff_prompts(ps, deleted)}
    assert kinds == {
        ("actor", "strategy", "added"),
        ("actor", "role", "changed"),
        ("descriptor", "rules", "removed"),
    }
    changed = [d for d in diff_prompts(ps, deleted) if d.kind == "changed"][0]
    assert "-You choose one action." in changed.unified() and "+You pick actions." in changed.unified()
    assert ps.module("actor").names == ["role"]  # the original is untouched


@pytest.mark.parametrize(
    "edit, message",
    [
        (Edit("rewrite", "actor", "nosuch", "x"), "no such segment"),
        (Edit("add", "actor", "role", "x"), "already exists"),
        (Edit("delete", "actor", "nosuch"), "no segment named"),
        (Edit("add", "nomodule", "x", "x"), "no module"),
        (Edit("add", "actor", "new", "   \n"), "empty text"),
        (Edit("bogus", "actor", "role", "x"), "unknown edit op"),  # type: ignore[arg-type]
        (Edit("add", "actor", "Bad Name", "x"), "invalid segment name"),
    ],
)
def test_bad_edits_raise_prompt_format_error(edit, message):
    with pytest.raises(PromptFormatError, match=message):
        apply_edit(PromptSet.from_markdown(MD), edit)


def test_segment_text_headings_are_demoted():
    assert sanitize_text("# top\n## second\nbody") == "### top\n### second\nbody"
    p = Prompt((Segment("a", "x"),)).with_segment("b", "## sneaky\ntext")
    assert PromptSet.of({"m": p}).to_markdown().count("\n## ") == 2


_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
    min_size=1,
    max_size=80,
).filter(lambda t: sanitize_text(t) != "")


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_names, st.dictionaries(_names, _texts, min_size=1, max_size=4), min_size=1, max_size=3))
def test_round_trip_property(spec):
    ps = PromptSet.of({m: Prompt(tuple(Segment(n, sanitize_text(t)) for n, t in segs.items())) for m, segs in spec.items()})
    assert PromptSet.from_markdown(ps.to_markdown()) == ps
    assert PromptSet.from_dict(ps.to_dict()) == ps
