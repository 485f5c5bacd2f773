"""Typed events: one dataclass per kind, read as a mapping too; a bad event is one clear line."""

from __future__ import annotations

import pytest

from promptevo.optim.events import EVENTS, Emitter, EpisodeDone, EventError, GenerationEnd, make_event
from promptevo.optim.progress import Tally, format_line


def test_an_emitted_event_reaches_listeners_typed_and_as_a_mapping():
    seen = []

    class Recorder:
        def on_event(self, kind, event):
            seen.append((kind, event))

    emit = Emitter([Recorder()])
    emit("episode", seed=3, success=True, split="train", calls=4)
    kind, e = seen[0]
    assert kind == "episode" and isinstance(e, EpisodeDone) and e.seed == 3 and e.calls == 4
    assert e["success"] is True and e.get("error") is None and dict(e)["split"] == "train"


def test_an_unknown_kind_or_field_is_one_line_naming_the_valid_ones():
    with pytest.raises(EventError, match="unknown event kind 'episod'; valid: run_start"):
        make_event("episod", {})
    with pytest.raises(EventError, match="event 'episode' has no field 'seeds'; its fields: seed"):
        make_event("episode", {"seeds": 1, "success": True, "split": "train"})
    with pytest.raises(EventError, match="missing"):
        make_event("generation_end", {"generation": 1})
    assert set(EVENTS) == {"run_start", "generation_start", "phase", "episode", "candidate", "gate", "note",
                           "warning", "generation_end", "final", "run_end"}


def test_listeners_read_typed_fields():
    t = Tally(None)
    t.on_event("episode", {"seed": 1, "success": False, "split": "train", "calls": 5})
    t.on_event("generation_end", GenerationEnd(1, 2, "c1", usage={"calls": 9}))
    assert (t.done, t.calls) == (1, 9)
    line = format_line("generation_end", {"generation": 1, "generations": 2, "best": "c1", "children": 2,
                                          "accepted": 1, "promoted": True, "usage": {"tokens": 1200}})
    assert line.startswith("[gen 1] done: 2 children, 1 accepted, 1 promoted | best c1") and "1,200 tokens" in line
    assert format_line("phase", {"generation": 1, "text": "proposing"}) is None
