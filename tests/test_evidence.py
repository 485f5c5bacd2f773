"""The typed evidence the operators read (issue "One shape for every operator", item 3)."""

from __future__ import annotations

import json

from promptevo.optim.evidence import Evidence


def test_evidence_round_trips_through_its_file_and_reads_as_a_mapping():
    blob = {"generation": 2, "evidence_seeds": [1, 2], "signatures": [{"kind": "loop"}],
            "analysis": {"attributions": [{"effect": "hurt"}]}, "evidence_kind": "raw", "usage": {"analyzer": {}},
            "expert": {"available": True, "clusters": [{"agent": "go forward", "expert": "turn left"}],
                       "states": [{"seed": 1, "t": 0, "mission": "m", "observation": "o", "expert": "turn left"}]}}
    ev = Evidence.of(json.loads(json.dumps(blob)))
    assert ev.extra == {"generation": 2, "evidence_seeds": [1, 2]} and ev.evidence_kind == "raw"
    assert ev.has_expert and ev.clusters[0]["expert"] == "turn left" and ev.expert_states[0].expert == "turn left"
    assert ev.get("analysis") == blob["analysis"] and ev["signatures"] == [{"kind": "loop"}] and "cards" not in ev
    assert ev.to_dict() == blob and {**ev} == blob and Evidence.of(ev) is ev


def test_empty_evidence_has_no_expert():
    ev = Evidence.of(None)
    assert not ev.has_expert and ev.expert_states == [] and ev.clusters == [] and ev.get("expert") is None
