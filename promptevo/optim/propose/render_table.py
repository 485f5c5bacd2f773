"""How an induced table is written into a prompt: the answer fields that make the agent write the
feature values before the action, the rule segment mapping values to actions, demonstrations and the
answer grammar (:class:`Rendering` holds the compile operators' knobs; the rule content is the same).
The template phrases are generic (``prompts/optimizer/induce.toml``); every word, value and action in an
edit comes from the data."""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promptevo.optim.reflect.expert import LabelledState
from promptevo.agents.answer_fields import BOUND_WORDS, FOLD_MARK, LINE_FIELD, TEXT_FIELD
from promptevo.optim.reflect.follower import Explorer
from promptevo.optim.reflect.features import (
    NONE,
    PLACEHOLDER,
    Vocabulary,
    lead_word,
)
from promptevo.optim.reflect.llm_json import template_dir
from promptevo.resources import shipped_dir
from promptevo.optim.propose.induce import InduceError, RuleTable, Split


def load_phrases(path: Any = None) -> dict[str, Any]:
    """The generic template phrases (``prompts/optimizer/induce.toml``; the shipped file when a user's
    prompts folder has none)."""
    p = Path(path) if path is not None else template_dir() / "induce.toml"
    if not p.is_file():
        p = shipped_dir("prompts") / "optimizer" / "induce.toml"
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InduceError(f"{p}: cannot read the induce phrases: {e}") from None
    for key in ("format", "rule", "fields", "slots"):
        if key not in data:
            raise InduceError(f"{p}: missing [{key}]")
    return data


def _label(feature: str, phrases: dict, multi: bool, key: str = "label") -> str:
    slot, kind = feature.split(".", 1)
    base = phrases["fields"][kind][key]
    return f"{base} {slot}" if multi else base


@dataclass(frozen=True)
class Rendering:
    """How a table is written into a prompt (the compile operators' knobs; the rule content is the same):
    ``closed`` lists each field's values in the answer format ("<forward, left, right or none>"); ``slots``
    names the mission's things per episode (``{slot1}``: "the red ball") instead of "the first thing your
    mission names"; ``explorer`` is the "no line" rule chosen by simulation (None: the table's own)."""

    closed: bool = False
    slots: bool = False
    explorer: Explorer | None = None
    #: the "no line" case written first and in the answer's own field ("Line is "none": turn left.")
    none_first: bool = False
    #: the "no line" case folded into the table's own key: where the line is none, the key field holds the
    #: value whose row gives the explorer's action ("Last word: left"), so the agent does one lookup for every
    #: state (a constant explorer only; the grammar writes that value after a "none" line)
    fold: bool = False
    #: one condition per row where a shape test implies the key's value ("After the name is "1 step
    #: forward": pick up." before "Last word is "forward": go forward."), the first matching row applies
    flat: bool = False


@dataclass
class Field:
    """One answer field: its label, the text asking for it, its values (None: copied text), the feature
    it reports and, for a yes/no shape test, the shape; ``after``: the field holds the words after the name."""

    label: str
    ask: str
    values: list[str] | None
    feature: str = ""
    test: str | None = None
    after: bool = False
    #: the value this field holds where no line names the target (:attr:`Rendering.fold`)
    fold: str | None = None


def fold_key(table: RuleTable, explorer: Explorer | None) -> str | None:
    """The table value whose row gives the constant explorer's action ("left" for "turn left"), or None
    (no explorer, an explorer that counts turns, or no such row)."""
    if explorer is None or explorer.turns:
        return None
    return next((v for v, b in table.branches.items() if v != NONE and b == explorer.action), None)


def render_fields(table: RuleTable, phrases: dict, how: Rendering = Rendering()) -> tuple[list[Field], str]:
    """(the answer fields in order, the rule text) of a table."""
    used = table.features()
    slots = sorted({f.split(".", 1)[0] for f in used}, key=int)
    multi = len(slots) > 1 or slots != ["1"]
    slot_names = phrases["slots"]["names"]

    def slot_name(k: str) -> str:
        i = int(k) - 1
        if how.slots:
            return "{slot" + str(min(i, 2) + 1) + "}"
        return slot_names[i] if i < len(slot_names) else slot_names[-1]

    def is_test(feature: str) -> bool:
        return feature.split(".", 1)[1] == "rest" and feature != table.root

    tests = list(dict.fromkeys((b.feature, b.value) for b in table.branches.values() if isinstance(b, Split)))

    def after(pattern: str) -> str:
        """The words after the name in a shape ("a ... 1 step forward" -> "1 step forward")."""
        parts = pattern.split(PLACEHOLDER, 1)
        return parts[1].strip() if len(parts) == 2 else ""

    def after_form(feature: str) -> bool:
        """A shape test the agent answers by copying the words after the name (easier for a small model
        than judging whether a whole line matches a shape)."""
        return is_test(feature) and all(after(w) for g, w in tests if g == feature)

    def closed_values(feature: str) -> list[str]:
        if feature == table.root:
            vals = list(table.branches)
        else:
            vals = [after(w) if after_form(feature) else w for g, w in tests if g == feature] + ["other"]
        return list(dict.fromkeys(vals + [NONE]))

    def ask(text: str, label: str, feature: str) -> Field:
        af = after_form(feature)
        if how.closed:
            vals = closed_values(feature)
            c = phrases["format"]
            text = c["closed"].format(label=label, values=c["or"].join([", ".join(vals[:-1]), vals[-1]])
                                      if len(vals) > 1 else vals[0])
            return Field(label, text, vals, feature, after=af)
        return Field(label, text, None, feature, after=af)

    fields: list[Field] = []
    for k in slots:
        label = _label(f"{k}.line", phrases, multi)
        fields.append(Field(label, phrases["fields"]["line"]["ask"].format(label=label, slot=slot_name(k)), None,
                            f"{k}.line"))
        for f in used:
            if f.split(".", 1)[0] != k or f.endswith(".line"):
                continue
            if after_form(f):
                label = _label(f, phrases, multi, "after_label")
                fields.append(ask(phrases["fields"]["rest"]["ask_after"].format(label=label, slot=slot_name(k)),
                                  label, f))
            elif is_test(f):
                for g, w in tests:
                    if g == f:
                        label = _label(f, phrases, multi, "test_label") + f' "{w}"'
                        fields.append(Field(label, phrases["fields"]["rest"]["ask_test"].format(
                            label=_label(f, phrases, multi, "test_label"), pattern=w), ["yes", "no"], f, test=w))
            else:
                label = _label(f, phrases, multi)
                fields.append(ask(phrases["fields"][f.split(".", 1)[1]]["ask"].format(label=label, slot=slot_name(k)),
                                  label, f))

    def cond(feature: str, value: str) -> str:
        if after_form(feature):
            return phrases["rule"]["is"].format(label=_label(feature, phrases, multi, "after_label"), value=after(value))
        if is_test(feature):
            return phrases["rule"]["test"].format(label=_label(feature, phrases, multi, "test_label"), pattern=value)
        return phrases["rule"]["is"].format(label=_label(feature, phrases, multi), value=value)

    def implies(b: Split, values: list[str]) -> bool:
        """The shape test can only hold where the key has its one value (the shape "a ... 1 step forward"
        ends with the key's last word "forward"), so its row needs no key condition."""
        kind = table.root.split(".", 1)[1]
        words = after(b.value).split() if after_form(b.feature) else []
        return len(values) == 1 and bool(words) and (
            (kind == "last" and words[-1] == values[0]) or (kind == "first" and words[0] == values[0]))

    r = phrases["rule"]
    groups: dict[str | Split, list[str]] = {}
    for v, b in table.branches.items():
        groups.setdefault(b, []).append(v)
    lines = [r["intro_first"] if how.flat and "intro_first" in r else r["intro"]]
    for b, values in groups.items():
        either = r["or"].join(cond(table.root, v) for v in values)
        if isinstance(b, str):
            lines.append(r["case"].format(cond=either, action=b))
        elif how.flat and implies(b, values):
            lines.append(r["case"].format(cond=cond(b.feature, b.value), action=b.yes))
            lines.append(r["case"].format(cond=either, action=b.no))
        else:
            lines.append(r["case"].format(cond=r["and"].join([either, cond(b.feature, b.value)]), action=b.yes))
            lines.append(r["case"].format(cond=r["otherwise"].format(cond=either), action=b.no))
    ex = how.explorer
    line_label = next((f.label for f in fields if f.feature == f"{slots[0]}.line"), None) if slots else None
    key = fold_key(table, ex) if how.fold else None
    root = next((f for f in fields if f.feature == table.root), None)
    if key is not None and line_label and root is not None and "none_fold" in r:
        # "Line is "none": write "Last word: left"." then the row of "left" applies like any other
        root.fold = key
        if root.values is not None and "closed_fold" in phrases["format"]:
            c = phrases["format"]
            root.values = [v for v in root.values if v != NONE]
            shown = c["or"].join([", ".join(root.values[:-1]), root.values[-1]]) if len(root.values) > 1 else root.values[0]
            root.ask = c["closed_fold"].format(label=root.label, values=shown, value=key, line=line_label)
        lines.insert(1, r["none_fold"].format(label=line_label, field=root.label, value=key))
    elif how.none_first and line_label and "none_field" in r:
        # the "no line" case read from the answer's own field, before the cases (a small model reads the
        # first matching line): "Line is "none": turn left."
        if ex is not None and ex.turns:
            lines.insert(1, r["none_field_then"].format(label=line_label, action=ex.action, k=ex.turns, then=ex.then))
        elif ex is not None or table.none_action:
            lines.insert(1, r["none_field"].format(label=line_label, action=ex.action if ex else table.none_action))
    elif ex is not None and ex.turns:
        lines.append(r["none_then"].format(slot=slot_name(slots[0]), action=ex.action, k=ex.turns, then=ex.then))
    elif ex is not None or table.none_action:
        lines.append(r["none"].format(slot=slot_name(slots[0]), action=ex.action if ex else table.none_action))
    lines.append(r["default"].format(action=table.default))
    return fields, "\n".join(lines)


def render(table: RuleTable, phrases: dict, *, action_tag: str = "<|ACTION|>the action<|END|>",
           how: Rendering = Rendering()) -> tuple[str, str]:
    """``(rule text, answer-format text)`` of a table: one answer field per feature the table reads (a
    yes/no field per shape test), then one rule line per action, values with the same outcome merged."""
    fields, rule = render_fields(table, phrases, how)
    fmt = [phrases["format"]["intro"]] + [f.ask for f in fields] + [action_tag]
    return rule, "\n".join(fmt)




def demo_text(states: Sequence[LabelledState], fields: Sequence[Field], table: RuleTable, vocab: Vocabulary,
              phrases: dict, explorer: Explorer | None) -> str:
    """The demonstrations as one segment: each state's mission, observation, the true field values and
    the expert's action, in the answer format."""
    from promptevo.optim.reflect.compliance import true_values

    blocks = [phrases["examples"]["intro"]]
    for s in states:
        values = true_values(s.observation, s.mission, vocab, table, fields)
        lines = [f"Mission: {s.mission}", "Observation:", s.observation.strip()]
        lines += [f"{f.label}: {values.get(f.label) or NONE}" for f in fields]
        lines.append(f"<|ACTION|>{s.expert}<|END|>")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def grammar_fields(fields: Sequence[Field], states: Sequence[LabelledState], vocab: Vocabulary,
                   slots: bool, lines: bool = False, bind: bool = False) -> list[tuple[str, list[str] | None]]:
    """The ``answer-grammar`` fields of a rendering: closed fields keep their values; with ``slots``, a
    copied-line field becomes "none" or a line that starts by naming the mission's thing, preceded by the
    word the expert's lines most often put before it (learnt from the data: "a {slot1} <text>"); with
    ``lines`` that line must be one of the step's observation lines ("a {slot1} <line>"); with ``bind`` (and
    ``lines``) a field holding the line's first or last word, or the words after the name, is bound to the
    copied line ("<last word>")."""
    out: list[tuple[str, list[str] | None]] = []
    marks = {v: k for k, v in BOUND_WORDS.items()}
    for f in fields:
        slot, kind = f.feature.split(".", 1) if f.feature else ("", "")
        if kind == "line" and slots:
            word = lead_word(states, vocab, int(slot))
            lead = "" if word == "-" else word + " "
            out.append((f.label, [NONE, f"{lead}{{slot{min(int(slot), 3)}}} {LINE_FIELD if lines else TEXT_FIELD}"]))
        elif f.fold is not None and f.values:
            out.append((f.label, [v for v in f.values if v != NONE] + [f"{f.fold} {FOLD_MARK}"]
                        + _bound(kind, bind and lines, marks)))
        else:
            out.append((f.label, f.values if f.values is None
                        else f.values + _bound("after" if f.after else kind, bind and lines, marks)))
    return out


def _bound(kind: str, bind: bool, marks: dict[str, str]) -> list[str]:
    """The bound mark of a field reporting the line's first or last word or the words after the name
    (``["<last word>"]``)."""
    return [marks[kind]] if bind and kind in marks else []


__all__ = ["Field", "Rendering", "demo_text", "grammar_fields", "load_phrases", "render", "render_fields"]
