"""Compliance analysis: does the agent execute the induced rule it was given? (No LLM.)

For every recorded decision of a candidate whose prompt carries an induced table and its answer fields:
the true field values (computed from that step's observation and mission with the same features the table
was fitted on), the values the agent wrote in each field, the table's action for the written values and
for the true values, the expert's action (where known) and the agent's action. Each step is one of:

=============  ========================================================================  ==============
class          what happened                                                             owner
=============  ========================================================================  ==============
correct        right values, the table's action, and the table agrees with the expert     -
perception     a wrong value (kinds: ``another line``, ``wrong word``, ``none while       format
               visible``, ``line while none``)
lookup         right values, another action than the table gives for them                rule
table          the agent followed the table; the table is wrong here (expert differs)     table
format         a field missing or outside its values, no parsable action, a cut reply     format
=============  ========================================================================  ==============

A step whose expert action is unknown and that is otherwise right counts as correct (the table cannot be
checked there). Steps are cited ``S<seed>.<t>``; per episode the step of the first error is kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from promptevo.agents.answer_fields import read_fields
from promptevo.optim.reflect.features import (
    NONE,
    PLACEHOLDER,
    Vocabulary,
    defined,
    mission_slots,
    observation_lines,
    slot_lines,
    state_features,
    tokens,
)

CLASSES = ("correct", "perception", "lookup", "table", "format")
OWNER = {"perception": "format", "format": "format", "lookup": "induced-rule", "table": "the table itself"}
MAX_CITES = 8


@dataclass
class FieldSpec:
    label: str
    values: list[str] | None
    feature: str
    test: str | None = None
    after: bool = False
    fold: str | None = None  # the value the field holds where no line names the target

    @classmethod
    def of(cls, d: Any) -> "FieldSpec":
        if isinstance(d, dict):
            return cls(d["label"], d.get("values"), d.get("feature", ""), d.get("test"), bool(d.get("after")),
                       d.get("fold"))
        return cls(d.label, d.values, d.feature, d.test, d.after, getattr(d, "fold", None))


def _after(rest: str) -> str:
    parts = rest.split(PLACEHOLDER, 1)
    return parts[1].strip() if len(parts) == 2 else ""


def _norm(text: str | None) -> str:
    return " ".join(tokens(text or "")) or NONE


def true_values(observation: str, mission: str, vocab: Vocabulary, table: Any, fields: Iterable[Any]) -> dict[str, str]:
    """The value each field should hold in this state (label -> value)."""
    feats = state_features(observation, mission, vocab)
    things = mission_slots(mission, vocab)
    out: dict[str, str] = {}
    for f in map(FieldSpec.of, fields):
        slot, kind = f.feature.split(".", 1)
        present = feats.get(f"{slot}.line") == "yes"
        if kind == "line":
            k = int(slot) - 1
            found = slot_lines(observation, things[k]) if k < len(things) else []
            out[f.label] = found[0][0] if found else NONE
        elif not present:
            out[f.label] = f.fold or ("no" if f.test is not None else NONE)
        elif f.test is not None:
            out[f.label] = "yes" if feats.get(f.feature) == f.test else "no"
        elif f.after:
            v = _after(feats.get(f.feature, ""))
            out[f.label] = v if not f.values or v in f.values else "other"
        else:
            v = feats.get(f.feature, NONE)
            out[f.label] = v if not f.values or v in f.values or "other" not in f.values else "other"
    return out


def table_action(values: dict[str, str | None], table: Any, fields: Iterable[Any], explorer: Any = None) -> str | None:
    """What the table (and its explorer, where no line names the target) says for the written values."""
    feats: dict[str, str] = {}
    for f in map(FieldSpec.of, fields):
        v = values.get(f.label)
        slot, kind = f.feature.split(".", 1)
        if kind == "line":
            feats[f"{slot}.line"] = "yes" if v and _norm(v) != NONE else NONE
        elif f.test is not None:
            if v == "yes":
                feats[f.feature] = f.test
        elif f.after:
            for b in table.branches.values():
                if getattr(b, "feature", None) == f.feature and _after(b.value) == (v or ""):
                    feats[f.feature] = b.value
        elif v is not None:
            feats[f.feature] = v
    if not defined(feats):
        return explorer.action if explorer is not None else table.predict(feats)
    return table.predict(feats)


def _perception_kind(label_is_line: bool, wrote: str | None, truth: str, observation: str) -> str:
    if label_is_line:
        if truth == NONE:
            return "line while none"
        if _norm(wrote) == NONE:
            return "none while visible"
        lines = {_norm(ln) for ln in observation_lines(observation)}
        return "another line" if _norm(wrote) in lines else "text not in the observation"
    if truth == NONE:
        return "line while none"
    if _norm(wrote) == NONE:
        return "none while visible"
    return "wrong word"


def classify(step: dict, mission: str, vocab: Vocabulary, table: Any, fields: Sequence[Any], *,
             explorer: Any = None, expert: str | None = None) -> dict:
    """One step's analysis: the class, the kind of a perception or format error, true and written values,
    the table's action for both, the expert's and the agent's action."""
    specs = [FieldSpec.of(f) for f in fields]
    obs = str(step.get("observation") or "")
    reply = str(step.get("reply") or "")
    truth = true_values(obs, mission, vocab, table, specs)
    wrote = read_fields(reply, [f.label for f in specs])
    agent = str(step.get("executed_action") or step.get("action") or "")
    out: dict[str, Any] = {"t": step.get("t"), "true": truth, "wrote": wrote, "agent": agent, "expert": expert,
                           "table_true": table_action(truth, table, specs, explorer)}
    out["table_written"] = table_action(wrote, table, specs, explorer)
    fmt_kind = None
    if step.get("truncated"):
        fmt_kind = "reply cut by the token cap"
    elif not step.get("parsed", True):
        fmt_kind = "no parsable action"
    else:
        for f in specs:
            v = wrote.get(f.label)
            if v is None:
                fmt_kind = f"field {f.label!r} missing"
                break
            if f.values and v not in f.values:
                fmt_kind = f"{f.label!r} value outside its values"
                break
    if fmt_kind:
        out.update({"class": "format", "kind": fmt_kind})
        return out
    for f in specs:
        line = f.feature.endswith(".line")
        w, t = wrote.get(f.label), truth[f.label]
        if (_norm(w) != _norm(t)) if line else (w != t):
            out.update({"class": "perception", "kind": _perception_kind(line, w, t, obs), "field": f.label})
            return out
    if agent != out["table_written"]:
        out["class"] = "lookup"
    elif expert is not None and out["table_true"] != expert:
        out["class"] = "table"
    else:
        out["class"] = "correct"
    return out


def analyse(episodes: Sequence[dict], vocab: Vocabulary, table: Any, fields: Sequence[Any], *, explorer: Any = None,
            experts: dict[tuple[int, int], str] | None = None, visible_split: bool = True) -> dict:
    """The compliance of a candidate over its recorded episodes (JSON-able): counts and rates per class,
    perception and format kinds, each class's owner segment, cited steps, per episode the step of the
    first error, and the same split by whether some line named the target (``in view`` / ``out of view``)."""
    experts = experts or {}
    counts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    cites: dict[str, list[str]] = {c: [] for c in CLASSES}
    view: dict[str, Counter[str]] = {"in view": Counter(), "out of view": Counter()}
    first_error: dict[str, int | None] = {}
    for ep in episodes:
        seed = int(ep.get("seed", 0))
        mission = str(ep.get("mission") or "")
        first_error[str(seed)] = None
        for step in ep.get("trajectory") or []:
            if step.get("replayed"):
                continue
            t = int(step.get("t", 0))
            r = classify(step, mission, vocab, table, fields, explorer=explorer, expert=experts.get((seed, t)))
            c = r["class"]
            counts[c] += 1
            if r.get("kind"):
                kinds[f"{c}: {r['kind']}"] += 1
            if len(cites[c]) < MAX_CITES:
                cites[c].append(f"S{seed}.{t}")
            visible = defined(state_features(str(step.get("observation") or ""), mission, vocab))
            view["in view" if visible else "out of view"][c] += 1
            if c != "correct" and first_error[str(seed)] is None:
                first_error[str(seed)] = t
    n = sum(counts.values())

    def rates(cn: Counter[str]) -> dict:
        tot = sum(cn.values())
        return {"n": tot, **{c: cn.get(c, 0) for c in CLASSES},
                "compliance": round((cn.get("correct", 0) + cn.get("table", 0)) / tot, 4) if tot else None}

    return {"decisions": n, **rates(counts), "kinds": dict(kinds.most_common()), "owners": OWNER,
            "cites": {c: v for c, v in cites.items() if v}, "first_error": first_error,
            "by_view": {k: rates(v) for k, v in view.items()} if visible_split else None}


__all__ = ["CLASSES", "FieldSpec", "OWNER", "analyse", "classify", "table_action", "true_values"]
