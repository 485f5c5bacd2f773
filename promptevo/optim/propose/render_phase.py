"""How a phase-rooted rule (:class:`~promptevo.optim.propose.induce_phase.PhasedTable`) is written into a
prompt: the agent writes what it carries first, then which thing is its target, then the target's line
and the fields the phase tables read, and the rule gives one block of rows per phase.

The template phrases are generic (``[phase]`` and ``[fields.*]`` of ``prompts/optimizer/induce.toml``);
every value, word and action comes from the fitted rule. The mission's things are named per episode
(``{slot1}``, ``{slot2}``, filled from the episode's mission alone)."""

from __future__ import annotations

from dataclasses import dataclass

from promptevo.agents.answer_fields import AT_MARK, BOUND_WORDS, FOLD_MARK, LINE_FIELD
from promptevo.optim.propose.induce import RuleTable, Split
from promptevo.optim.propose.induce_phase import PhasedTable
from promptevo.optim.reflect.features import NONE, after_name
from promptevo.optim.reflect.follower import Explorer
from promptevo.optim.reflect.phases import NOTHING, OTHER, at_word

#: the grammar's bound marks by the part of the copied line a field holds ("<last word>" ...)
_MARKS = {v: k for k, v in BOUND_WORDS.items()}


@dataclass
class PhaseField:
    """One answer field of a phased rendering: label, the text asking for it, its feature (``carry``,
    ``target``, ``a.line``, ``a.last``, ``at:<position>`` ...) and its closed values (None: free text)."""

    label: str
    ask: str
    feature: str
    values: list[str] | None = None
    #: the value this field holds where no line names the target (the explorer folded into the key)
    fold: str | None = None


def _features(table: PhasedTable) -> list[str]:
    used: list[str] = []
    for p, t in sorted(table.tables.items()):
        used += t.features()
        used += [f"at:{g.position}" for g in table.guards.get(p, ())]
    return [f for f in dict.fromkeys(used) if f != "a.line"]



def fold_of(table: PhasedTable, explorer: Explorer | None) -> tuple[str, str] | None:
    """(the key feature, its value) whose row in every phase gives the constant explorer's action, so the
    "no line" case is one more lookup ("Line is none: write Last word: right"); None when the explorer is
    not constant or the phases disagree."""
    if explorer is None or explorer.turns or explorer.at or not table.tables:
        return None
    roots = {t.root for t in table.tables.values()}
    if len(roots) != 1:
        return None
    values = set()
    for t in table.tables.values():
        # a split row counts by its "otherwise" side: its test (the target's line, or the target at a
        # position) cannot hold where no line names the target
        v = next((v for v, b in t.branches.items() if v != NONE and (b == explorer.action or (
            isinstance(b, Split) and b.no == explorer.action and b.value not in (NONE, NOTHING)))), None)
        if v is None:
            return None
        values.add(v)
    return (roots.pop(), values.pop()) if len(values) == 1 else None


def render_phase_fields(table: PhasedTable, phrases: dict, slot_count: int = 2,
                        fold: tuple[str, str] | None = None) -> tuple[list[PhaseField], str]:
    """(the answer fields in order, the rule text); ``fold``: see :func:`fold_of`."""
    ph, fl, r = phrases["phase"], phrases["fields"], phrases["rule"]
    first, second = "{slot1}", "{slot2}" if slot_count > 1 else "{slot1}"
    if table.fetch is not None:
        thing = " ".join(table.fetch.own)
        first = ph["fetch"].format(own=thing, slot="{slot1}") if table.fetch.offset is not None else f"a {thing}"
        second = "{slot1}"
    carry = ph["carry_label"]
    target = ph["target_label"]
    fields = [PhaseField(carry, ph["carry_ask"].format(label=carry, first="{slot1}", second="{slot2}"), "carry")]
    if table.order.word:
        ask = ph["target_ask_order"].format(label=target, word=table.order.word, first=first, second=second, carry=carry)
    else:
        ask = ph["target_ask"].format(label=target, first=first, second=second, carry=carry)
    fields.append(PhaseField(target, ask, "target"))
    line = fl["line"]["label"]
    fields.append(PhaseField(line, ph["line_ask"].format(label=line, target=target), "a.line"))
    labels: dict[str, str] = {}
    for f in _features(table):
        if f.startswith("at:"):
            pos = f[3:]
            label = ph["at_label"].format(position=pos)
            vals = list(ph["at_values"])
            fields.append(PhaseField(label, ph["at_ask"].format(label=label, target=target, position=pos), f, vals))
        else:
            kind = f.split(".", 1)[1]
            label = fl[kind]["label"] if kind != "rest" else fl["rest"]["after_label"]
            vals = _values(table, f)
            ask = phrases["format"]["closed"].format(label=label, values=phrases["format"]["or"].join(
                [", ".join(vals[:-1]), vals[-1]]) if len(vals) > 1 else vals[0])
            folded = fold[1] if fold and fold[0] == f else None
            if folded is not None and "closed_fold" in phrases["format"]:
                shown = [v for v in vals if v != NONE]
                ask = phrases["format"]["closed_fold"].format(label=label, values=phrases["format"]["or"].join(
                    [", ".join(shown[:-1]), shown[-1]]) if len(shown) > 1 else shown[0], value=folded, line=line)
            fields.append(PhaseField(label, ask, f, vals, folded))
        labels[f] = fields[-1].label

    def cond(feature: str, value: str) -> str:
        if feature.startswith("at:"):
            return r["is"].format(label=labels[feature], value=at_word(phrases["phase"]["at_values"], value))
        if feature.endswith(".rest"):
            return r["is"].format(label=labels[feature], value=after_name(value))
        return r["is"].format(label=labels[feature], value=value)

    lines = [r["intro"]]
    heads = {"0": ph["when_nothing"].format(carry=carry), "1": ph["when_first"], OTHER: ph["when_other"]}
    for p in ("0", "1", OTHER):
        t = table.tables.get(p)
        if t is None:
            continue
        lines.append(heads[p])
        for g in table.guards.get(p, ()):
            lines.append(ph["guard"].format(label=labels[f"at:{g.position}"], when=g.when, instead=g.instead))
        lines += _rows(t, cond, r, line, (labels[fold[0]], fold[1]) if fold else None)
        lines.append(r["default"].format(action=t.default))
    return fields, "\n".join(lines)


def _values(table: PhasedTable, feature: str) -> list[str]:
    vals: list[str] = []
    for t in table.tables.values():
        if t.root == feature:
            vals += list(t.branches)
        for b in t.branches.values():
            if isinstance(b, Split) and b.feature == feature:
                vals.append(b.value)
    shown = [after_name(v) if feature.endswith(".rest") else v for v in dict.fromkeys(vals)]
    extra = ["other"] if any(isinstance(b, Split) and b.feature == feature
                              for t in table.tables.values() for b in t.branches.values()) else []
    return list(dict.fromkeys(shown + extra + [NONE]))


def _rows(t: RuleTable, cond, r: dict, line_label: str, fold: tuple[str, str] | None = None) -> list[str]:
    out = []
    if fold is not None:
        out.append(r["none_fold"].format(label=line_label, field=fold[0], value=fold[1]))
    elif t.none_action:
        out.append(r["none_field"].format(label=line_label, action=t.none_action))
    groups: dict = {}
    for v, b in t.branches.items():
        groups.setdefault(b, []).append(v)
    for b, values in groups.items():
        either = r["or"].join(cond(t.root, v) for v in values)
        if isinstance(b, str):
            out.append(r["case"].format(cond=either, action=b))
        else:
            out.append(r["case"].format(cond=r["and"].join([either, cond(b.feature, b.value)]), action=b.yes))
            out.append(r["case"].format(cond=r["otherwise"].format(cond=either), action=b.no))
    return out


def phase_grammar(table: PhasedTable, fields: list[PhaseField], phrases: dict, lead: str,
                  slot_count: int = 2) -> list[tuple[str, list[str] | None]]:
    """The ``answer-grammar`` fields of a phased rendering: what is carried and the target closed to the
    mission's things (``{slot1}``...; "something else"), the copied line closed to this step's lines that
    start by naming one of them (``lead``: the word lines put before a thing's name, learnt from the data;
    a fetched thing's line: any of the step's lines) and, after the target is written, to the lines naming
    it; the fields that report a part of the line are bound to it (its last word, the words after the
    name) and the near-position fields to what stands there in the step's observation; the other fields
    to their values. Perception done by the grammar, reported as an output-schema edit."""
    ph = phrases["phase"]
    slots = [f"{{slot{k}}}" for k in range(1, slot_count + 1)]
    prefix = f"{lead} " if lead and lead != "-" else ""
    out: list[tuple[str, list[str] | None]] = []
    for f in fields:
        if f.feature == "carry":
            out.append((f.label, [ph["nothing"], *slots, ph["something_else"]]))
        elif f.feature == "target":
            out.append((f.label, ([" ".join(table.fetch.own)] if table.fetch else []) + slots))
        elif f.feature == "a.line":
            lines = [LINE_FIELD] if table.fetch else [f"{prefix}{s} {LINE_FIELD}" for s in slots]
            out.append((f.label, [NONE, *lines]))
        elif f.feature.startswith("at:") and f.values:
            out.append((f.label, list(f.values) + [f"{AT_MARK}{f.feature[3:]}>"]))
        else:
            kind = f.feature.split(".", 1)[1] if f.feature.startswith("a.") else ""
            mark = _MARKS.get("after" if kind == "rest" else kind)
            vals = f.values
            if vals and f.fold is not None:
                vals = [v for v in vals if v != NONE] + [f"{f.fold} {FOLD_MARK}"]
            out.append((f.label, (vals or []) + [mark] if (mark and vals) else vals))
    return out


def render_phase(table: PhasedTable, phrases: dict, explorer: Explorer | None = None, *,
                 action_tag: str = "<|ACTION|>the action<|END|>") -> tuple[str, str, list[PhaseField]]:
    """``(rule text, answer-format text, fields)``; with an explorer, its action replaces the tables'
    "no line" rows."""
    if explorer is not None:
        table = PhasedTable(table.order, table.near, {p: _with_none(t, explorer) for p, t in table.tables.items()},
                            table.default, table.guards, table.fetch)
    fields, rule = render_phase_fields(table, phrases, fold=fold_of(table, explorer))
    fmt = [phrases["format"]["intro"]] + [f.ask for f in fields] + [action_tag]
    return rule, "\n".join(fmt), fields


def _with_none(t: RuleTable, explorer: Explorer) -> RuleTable:
    return RuleTable(t.root, dict(t.branches), t.default, explorer.describe())


__all__ = ["PhaseField", "fold_of", "phase_grammar", "render_phase", "render_phase_fields"]
