"""The operator registry: operators registered from outside the package run in a loop like promptevo's
own; an operator that raises is logged and skipped; unknown names get one line naming the choices.

The LLM here is a test double (ScriptedLLM); nothing in this file stands in for a measured result.
"""

from __future__ import annotations

import pytest
from engine_doubles import config, run

from promptevo.optim.adapter import Proposal
from promptevo.optim.config import ConfigError, validate_config
from promptevo.optim.propose.registry import (
    OperatorError,
    describe_operators,
    get_operator,
    operator_names,
    register_operator,
)
from promptevo.optim.propose.schedule import quotas
from promptevo.segments import Edit, apply_edit


class FaceFirst:
    """A user's operator in ~20 lines: adds one fixed rule to the actor (what the README shows)."""

    name, author, reads = "face-first", "person", ()
    summary = "adds the rule 'Always face the object before pick up.'"

    def propose(self, parent, evidence, ctx, k):
        edit = Edit(op="rewrite", module="actor", segment="rules",
                    text="Always face the object before pick up.", rationale="a user's operator")
        child = apply_edit(parent, edit)
        return [Proposal(child, self.name, edit.to_dict())] if ctx.new_child(child) else []


class Broken:
    name, author, reads, summary = "broken-op", "machine", (), "always raises"

    def propose(self, parent, evidence, ctx, k):
        raise RuntimeError("bug in a user's operator\nsecond line")


register_operator(FaceFirst(), replace=True)
register_operator(Broken(), replace=True)


def test_every_builtin_operator_is_a_module_of_its_own_with_one_line():
    rows = {r["name"]: r for r in describe_operators()}
    for name in ("induce", "rules", "mutate", "delete", "crossover", "hints", "skills", "prune"):
        op = get_operator(name)
        assert type(op).__module__.startswith("promptevo.optim.propose."), name
        assert rows[name]["summary"] and "\n" not in rows[name]["summary"]
    assert rows["hints"]["author"] == "person" and rows["induce"]["author"] == "machine"
    assert "face-first" in operator_names() and "prune" not in operator_names()


def test_an_operator_registered_from_outside_runs_in_a_loop_and_is_reported(tmp_path):
    res = run(config(tmp_path, operators=["face-first"], generations=1, children=1))
    c1 = next(c for c in res.candidates if c.id == "c1")
    assert c1.operator == "face-first" and c1.source == {"author": "person"}
    assert c1.status == "promoted"
    assert res.report["promoted_edits"][0]["author"] == "person"


def test_an_operator_that_raises_is_logged_and_skipped(tmp_path):
    res = run(config(tmp_path, operators=["broken-op", "face-first"], generations=1, children=2))
    lines = [str(w) for w in res.report["warnings"]]
    assert any("'broken-op' raised RuntimeError: bug in a user's operator" in ln for ln in lines), lines
    assert [c.operator for c in res.candidates if c.id != "c0"] == ["face-first"]


def test_unknown_and_engine_only_operator_names_get_one_line():
    with pytest.raises(ConfigError, match=r"^--operators: unknown operator 'nope'; valid operators: induce, "):
        validate_config({"task": "goto", "operators": ["nope"]})
    with pytest.raises(ConfigError, match="scheduled by the engine itself"):
        validate_config({"task": "goto", "operators": ["prune"]})
    with pytest.raises(OperatorError, match="author must be one of machine, person"):
        register_operator(type("X", (), {"name": "x-op", "author": "someone", "propose": lambda *a: []})())


def test_quotas_share_slots_round_robin_and_leave_the_rest_to_the_mutator():
    assert quotas(["induce", "mutate"], 3) == {"induce": 2, "mutate": 1}
    assert quotas(["mutate"], 3) == {"mutate": 3}
    assert quotas(["induce", "hints"], 3) == {"induce": 2, "hints": 1}
    assert quotas([], 2) == {}
