"""Compliance with a phase-rooted rule (:mod:`promptevo.optim.propose.induce_phase`), per phase: for each
recorded decision, the true value of every answer field (from that step's observation and mission alone),
what the agent wrote, and the rule's action on the true values. A step is ``format`` (a field missing, a
reply cut by the token cap, no parsable action), ``perception`` (the first field written wrong, named),
``lookup`` (every field right, another action) or ``correct``; compliance = correct / decisions. Split by
the true phase, so a report says which phase loses the episodes. No LLM."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from promptevo.agents.answer_fields import read_fields
from promptevo.optim.reflect.features import NONE, after_name, defined, find, observation_lines, tokens
from promptevo.optim.reflect.phases import NOTHING, at_word, is_status

CLASSES = ("correct", "perception", "lookup", "format")
#: the value of "what you carry" for a thing the mission does not name (the phrase file's ``something_else``)
SOMETHING_ELSE = "something else"
_EMPTY = {"", "none", "nothing", "-"}


def _norm(text: str | None) -> str:
    return " ".join(tokens(text or ""))


def step_truth(observation: str, mission: str, table: Any, vocab: Any, fields: Sequence[dict],
               at_values: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the step's features, the true value of each field by label). A carried thing is its status line;
    a target is its words; a copied line is the line itself ("none" without one)."""
    feats = table.featurize(observation, mission, vocab)
    body = [ln for ln in observation_lines(observation) if not is_status(tokens(ln), vocab)]
    target = table.target_words(observation, mission, vocab)
    truth: dict[str, str] = {}
    for f in fields:
        feat, label = f["feature"], f["label"]
        if feat == "carry":
            c = feats.get("carry")
            slots = table.slots(mission, vocab)
            truth[label] = (NOTHING if c == NOTHING else " ".join(slots[int(c) - 1]) if c and c.isdigit()
                            else SOMETHING_ELSE)
        elif feat == "target":
            truth[label] = " ".join(target)
        elif feat == "a.line":
            line = next((ln for ln in body if target and find(tokens(ln), target) >= 0), None)
            truth[label] = _norm(line) if line else NONE
        elif feat.startswith("at:"):
            raw = feats.get(feat, NOTHING)
            truth[label] = at_word(at_values, raw)
        elif feat.endswith(".rest"):
            v = feats.get(feat)
            shown = after_name(v) if v else NONE
            truth[label] = shown if (f.get("values") is None or shown in f["values"]) else "other"
        else:
            truth[label] = feats.get(feat, NONE)
        if f.get("fold") and feats.get("a.line") == NONE:
            truth[label] = f["fold"]  # the explorer folded into the key: the key holds its row's value
    return feats, truth


def _right(feature: str, wrote: str | None, true: str) -> bool:
    w = _norm(wrote)
    if feature == "carry":
        if true == NOTHING:
            return w in _EMPTY
        if true == SOMETHING_ELSE:
            return w == SOMETHING_ELSE
        return all(x in w.split() for x in true.split())
    if feature == "target":
        return bool(true) and all(x in w.split() for x in true.split())
    if feature == "a.line":
        return (w in _EMPTY) if true == NONE else w == true
    return w == _norm(true)


def analyse_phased(episodes: Sequence[dict], table: Any, vocab: Any, fields: Sequence[dict], explorer: Any,
                   at_values: Sequence[str]) -> dict:
    """Counts per class and per field error, overall and per true phase (JSON-able)."""
    overall: Counter[str] = Counter()
    by_phase: dict[str, Counter[str]] = {}
    wrong: dict[str, Counter[str]] = {}
    for ep in episodes:
        mission = str(ep.get("mission") or "")
        for step in ep.get("trajectory") or []:
            if step.get("replayed"):
                continue
            obs = str(step.get("observation") or "")
            feats, truth = step_truth(obs, mission, table, vocab, fields, at_values)
            phase = feats.get("phase", "0")
            wrote = read_fields(str(step.get("reply") or ""), [f["label"] for f in fields])
            agent = str(step.get("executed_action") or step.get("action") or "")
            rule = table.predict(feats) if (defined(feats) or explorer is None) else explorer.action
            if step.get("truncated") or not step.get("parsed", True) or any(wrote.get(f["label"]) is None for f in fields):
                c = "format"
            else:
                bad = next((f for f in fields if not _right(f["feature"], wrote.get(f["label"]), truth[f["label"]])), None)
                if bad is not None:
                    c = "perception"
                    wrong.setdefault(phase, Counter())[bad["label"]] += 1
                else:
                    c = "correct" if agent == rule else "lookup"
            overall[c] += 1
            by_phase.setdefault(phase, Counter())[c] += 1

    def rates(cn: Counter[str]) -> dict:
        n = sum(cn.values())
        return {"n": n, **{c: cn.get(c, 0) for c in CLASSES},
                "compliance": round(cn.get("correct", 0) / n, 4) if n else None}

    return {**rates(overall), "phases": {p: {**rates(c), "first_wrong_field": dict(wrong.get(p, Counter()).most_common())}
                                         for p, c in sorted(by_phase.items())}}


__all__ = ["CLASSES", "analyse_phased", "step_truth"]
