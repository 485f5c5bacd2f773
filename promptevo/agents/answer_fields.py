"""Answers in fields ("Line: ...", "Last word: ...", then the action), the grammar that forces them, and
the mission's things filled into a prompt per episode.

Two *directive* segments change how an agent works without being sent to the model (they are kept in the
prompt, exported and reported like any other segment, so such an edit is never hidden):

* ``answer-grammar`` - the answer's fields, one per line, ``Label: <text>`` (a copied line of text) or
  ``Label: a | b | c`` (one of these values; a value ending in `` <text>`` is that prefix, then free text,
  e.g. ``Line: none | a {slot1} <text>``: "none" or a line that starts by naming the mission's thing; a
  value ending in ``<line>`` is closed to this step's observation: one of its lines that starts with that
  prefix, copied whole, e.g. ``Line: none | a {slot1} <line>``; with no such line the value is not offered;
  a value ending in ``(if none)`` is what the field holds after a "none" line, e.g. ``Last word: forward |
  left | right | left (if none)``; a value ``<last word>``, ``<first word>`` or ``<words after the name>``
  binds the field to the copied line: after each of the step's lines the grammar offers only that line's
  own word(s), so the agent chooses the line and the grammar writes them; after a field that selects the
  copied line's thing, a value ``<at POSITION>`` binds the field to what stands at that position in the
  observation: its first value for the selected thing's line, its second for another line, its third for
  none), and a last line ``<|ACTION|>``. Slots are filled from the episode's mission before compiling. Where the agent decodes with
  a grammar (``local/`` models), :func:`grammar_of` compiles it to GBNF so a reply is always these
  fields in this order, then one valid action: always parseable and short.
* ``slot-words`` - the words that name things in this game's observations, comma separated. A prompt's
  ``{slot1}``, ``{slot2}``, ``{slot3}`` are replaced per episode by the mission's first, second and third
  thing (:func:`mission_things`: the runs of the mission's words that are slot words), e.g. "the red
  ball". Only the episode's mission text is read, never the env's state. A mission with fewer things
  leaves the slot's generic text and says so once (a warning in the log).

:func:`read_fields` reads the fields an agent wrote, for the compliance analysis.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence

from promptevo.envs.base import gbnf_literal

log = logging.getLogger(__name__)

GRAMMAR_SEGMENT = "answer-grammar"
SLOT_WORDS_SEGMENT = "slot-words"
DIRECTIVE_SEGMENTS = frozenset({GRAMMAR_SEGMENT, SLOT_WORDS_SEGMENT})
SLOT_PLACEHOLDERS = ("{slot1}", "{slot2}", "{slot3}")
TEXT_FIELD = "<text>"
#: a value closed to the current observation's lines (those starting with the value's prefix)
LINE_FIELD = "<line>"
#: a value marked ``left (if none)`` is what the field holds when the copied line before it is "none"
FOLD_MARK = "(if none)"
#: a value bound to the copied line before it: the grammar offers, after each of the step's lines, only
#: that line's first / last word, or the words after the line's prefix (the mission's thing) when they are
#: one of the field's values, else "other" (``Last word: forward | left | right | <last word>``; needs a
#: ``<line>`` value in the first field)
BOUND_WORDS = {"<first word>": "first", "<last word>": "last", "<words after the name>": "after"}
#: a value ``<at POSITION>``: the field holds what stands at that position (the target, something else, nothing)
AT_MARK = "<at "
#: longest copied line a grammar allows (characters)
TEXT_CHARS = 100
#: what a slot reads when the mission does not name that many things
GENERIC_SLOTS = ("the first thing your mission names", "the second thing your mission names",
                 "the third thing your mission names")

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_warned: set[tuple[int, int]] = set()


class AnswerSpecError(ValueError):
    """A malformed ``answer-grammar`` segment; ``str(e)`` is one line."""


# -- fields -----------------------------------------------------------------------------------------
def parse_spec(text: str) -> list[tuple[str, list[str] | None]]:
    """``[(label, values or None for a copied text)]`` of an ``answer-grammar`` segment."""
    fields: list[tuple[str, list[str] | None]] = []
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines or lines[-1] != "<|ACTION|>":
        raise AnswerSpecError("answer-grammar: the last line must be <|ACTION|>")
    for ln in lines[:-1]:
        if ":" not in ln:
            raise AnswerSpecError(f"answer-grammar: {ln!r} is not 'Label: <text>' or 'Label: a | b'")
        label, spec = (x.strip() for x in ln.split(":", 1))
        if not label or "<|" in label:
            raise AnswerSpecError(f"answer-grammar: {ln!r} has no usable label")
        if spec == TEXT_FIELD:
            fields.append((label, None))
        else:
            values = [v.strip() for v in spec.split("|") if v.strip()]
            if not values:
                raise AnswerSpecError(f"answer-grammar: {ln!r} lists no values")
            fields.append((label, values))
    return fields


def spec_text(fields: Sequence[tuple[str, Sequence[str] | None]]) -> str:
    """The ``answer-grammar`` segment text of ``fields``."""
    lines = [f"{label}: {TEXT_FIELD if values is None else ' | '.join(values)}" for label, values in fields]
    return "\n".join(lines + ["<|ACTION|>"])


def observation_lines(observation: str, prefix: str) -> list[str]:
    """The lines of ``observation`` that start with ``prefix`` (case-insensitive, whole words), stripped,
    without repeats, in their order; every line when ``prefix`` is empty."""
    p = " ".join(prefix.lower().split())
    out: list[str] = []
    for ln in (observation or "").splitlines():
        t = " ".join(ln.strip().split())
        if t and len(t) <= TEXT_CHARS and "<" not in t and t not in out and (
                not p or t.lower() == p or t.lower().startswith(p + " ")):
            out.append(t)
    return out


def grammar_of(spec: str, action_rules: str, observation: str | None = None) -> str:
    """GBNF for replies in the fields of ``spec`` (an ``answer-grammar`` text), then ``<|ACTION|>`` one
    valid action ``<|END|>``; ``action_rules`` define the rule ``action`` (``ActionSpace.gbnf_rules()``).
    A ``<line>`` value offers the lines of ``observation`` that start with its prefix (none offered: the
    value is left out; a field left with no value, or no observation given, accepts free text). When the
    first field is a copied line that may be "none", the fields after it (which describe that line) are
    "none" exactly when it is: "Line: none" is followed by "Last word: none" (or the field's ``(if none)``
    value), a copied line by a word."""
    text = f"[^\\n<]{{1,{TEXT_CHARS}}}"
    fields: list[tuple[str, list[str], bool]] = []  # (label, GBNF alternatives, copied-line field)
    folds: dict[str, str] = {}  # label -> what the field holds after a "none" line
    bound: dict[int, tuple[str, list[str]]] = {}  # field index -> (what of the copied line it holds, its values)
    offered: list[tuple[str, str]] = []  # (prefix, line) a <line> value offers
    raw: list[list[str] | None] = []  # each field's values as written (None: copied text)
    at_bound: dict[int, tuple[str, list[str]]] = {}  # field index -> (position, its values: target, else, nothing)
    by_prefix: dict[int, dict[str, list[str]]] = {}  # copied-line field -> prefix -> the lines it offers
    for label, values in parse_spec(spec):
        raw.append(values)
        if values is None:
            fields.append((label, [text], True))
            continue
        alts: list[str] = []
        copied = False
        for v in values:
            if v in BOUND_WORDS:
                bound[len(fields)] = (BOUND_WORDS[v], [x for x in values if x not in BOUND_WORDS])
            elif v.startswith(AT_MARK) and v.endswith(">"):
                at_bound[len(fields)] = (v[len(AT_MARK):-1].strip(), [x for x in values if x != v])
            elif v == LINE_FIELD or v.endswith(" " + LINE_FIELD):
                copied = True
                prefix = v[: -len(LINE_FIELD)].strip()
                if observation is None:
                    alts.append((gbnf_literal(prefix + " ") + " " if prefix else "") + text)
                else:
                    found = observation_lines(observation, prefix)
                    offered += [(prefix, ln) for ln in found]
                    alts += [gbnf_literal(ln) for ln in found]
                    by_prefix.setdefault(len(fields), {})[prefix] = list(found)
            elif v.endswith(" " + FOLD_MARK):
                folds[label] = gbnf_literal(v[: -len(FOLD_MARK)].strip())
                alts.append(folds[label])
            elif v.endswith(" " + TEXT_FIELD):
                copied = True
                alts.append(gbnf_literal(v[: -len(TEXT_FIELD)]) + " " + text)
            else:
                alts.append(gbnf_literal(v))
        fields.append((label, list(dict.fromkeys(alts)) or [text], copied))
    none = gbnf_literal("none")
    rules: list[str] = []

    def after_none(label: str, alts: list[str]) -> list[str]:
        if label in folds:
            return [folds[label]]
        return [none] if none in alts else alts

    first = fields[0] if fields else None
    split = (first is not None and first[2] and none in first[1] and len(first[1]) > 1 and len(fields) > 1)
    if first is not None and first[2] and first[1] == [none]:  # no line to copy: every later field none too
        fields = [fields[0]] + [(label, after_none(label, alts), c) for label, alts, c in fields[1:]]
    if split:
        # branch n: the line is none, so is every later field that can be; branch y: a line, later fields not none
        no = [[none]] + [after_none(label, alts) for label, alts, _ in fields[1:]]
        yes = [[a for a in first[1] if a != none]] + [[a for a in alts if a != none] or alts for _, alts, _ in fields[1:]]
        branches = [no, yes]
        body = []
        # bound words read the first field's line: only with one copied line (a multi-slot answer keeps its words free)
        bind = bool(bound) and bool(offered) and observation is not None and sum(c for _, _, c in fields) == 1
        for tag, br in zip("ny", branches):
            if tag == "y" and bind:
                rules += [f"f{i}y ::= " + " | ".join(alts) for i, alts in enumerate(br) if i]
                body.append(_bound_branch(fields, bound, offered))
                continue
            names = []
            for i, ((label, _, _), alts) in enumerate(zip(fields, br)):
                rules.append(f"f{i}{tag} ::= " + " | ".join(alts))
                names += [gbnf_literal(f"{label}: "), f"f{i}{tag}", '"\\n"']
            body.append("(" + " ".join(names) + ")")
        fields_rule = "(" + " | ".join(body) + ")"
    elif (sel := _selector(fields, raw, by_prefix)) is not None:
        fields_rule = _selected(fields, raw, by_prefix, sel, after_none, none, rules, bound, at_bound, observation)
    else:
        names = []
        for i, (label, alts, _) in enumerate(fields):
            rules.append(f"f{i} ::= " + " | ".join(alts))
            names += [gbnf_literal(f"{label}: "), f"f{i}", '"\\n"']
        fields_rule = " ".join(names)
    root = "root ::= " + " ".join(([fields_rule] if fields else []) + [gbnf_literal("<|ACTION|>"), "action",
                                                                       gbnf_literal("<|END|>")])
    return "\n".join([root] + rules) + "\n" + action_rules


def _selector(fields: Sequence[tuple[str, list[str], bool]], raw: Sequence[list[str] | None],
              by_prefix: dict[int, dict[str, list[str]]]) -> int | None:
    """The index of a closed field whose values each name the thing of one prefix of the copied-line
    field right after it ("Target: red ball | blue box" then "Line: none | a red ball <line> | a blue box
    <line>"), so that the line offered can follow the value written; None when there is no such pair."""
    for i in range(len(fields) - 1):
        vals, prefixes = raw[i], by_prefix.get(i + 1)
        if not vals or fields[i][2] or not prefixes or len(prefixes) < 2:
            continue
        if all(any(p == v or p.endswith(" " + v) for v in vals) for p in prefixes):
            return i
    return None


def _selected(fields: Sequence[tuple[str, list[str], bool]], raw: Sequence[list[str] | None],
              by_prefix: dict[int, dict[str, list[str]]], sel: int, after_none: Callable[[str, list[str]], list[str]],
              none: str, rules: list[str], bound: dict[int, tuple[str, list[str]]],
              at_bound: dict[int, tuple[str, list[str]]] | None = None, observation: str | None = None) -> str:
    """The fields rule where field ``sel`` selects the copied line's prefix: after each of its values the
    line is "none" or one of the step's lines naming that value, and the fields after the line are "none"
    exactly when it is (as for a first-field line); a bound field after the line holds that line's own
    word(s), and an ``<at POSITION>`` field what stands there (:func:`at_value`). Appends the field rules to
    ``rules``."""
    at_bound = at_bound or {}
    obs_lines = observation_lines(observation or "", "")
    head, line_i = fields[:sel], sel + 1
    names = []
    for i, (label, alts, _) in enumerate(head):
        rules.append(f"f{i} ::= " + " | ".join(alts))
        names += [gbnf_literal(f"{label}: "), f"f{i}", '"\\n"']
    tail = list(enumerate(fields[line_i + 1:], line_i + 1))
    for tag in "ny":
        for j, (label, alts, _) in tail:
            use = after_none(label, alts) if tag == "n" else ([a for a in alts if a != none] or alts)
            rules.append(f"f{j}{tag} ::= " + " | ".join(use))
    sel_label, line_label = fields[sel][0], fields[line_i][0]

    def branch(v: str, line: str, tag: str, prefix: str | None) -> str:
        part = [gbnf_literal(f"{sel_label}: "), gbnf_literal(v), '"\\n"', gbnf_literal(f"{line_label}: "),
                none if prefix is None else gbnf_literal(line), '"\\n"']
        for j, (label, _, _) in tail:
            value = bound_value(bound[j][0], line, prefix, bound[j][1]) if (prefix is not None and j in bound) else None
            if j in at_bound and observation is not None:
                value = at_value(at_bound[j][0], obs_lines, target_prefix[v], at_bound[j][1])
            part += [gbnf_literal(f"{label}: "), gbnf_literal(value) if value else f"f{j}{tag}", '"\\n"']
        return "(" + " ".join(part) + ")"

    target_prefix = {v: next((p for p in by_prefix[line_i] if p == v or p.endswith(" " + v)), v) for v in raw[sel] or []}

    branches = []
    for v in raw[sel] or []:
        branches.append(branch(v, "", "n", None))
        for p, found in by_prefix[line_i].items():
            if p == v or p.endswith(" " + v):
                branches += [branch(v, ln, "y", p) for ln in found]
    return " ".join(names + ["(" + " | ".join(branches) + ")"])


def line_position(line: str) -> str | None:
    """A line's words from its first number on ("a red ball 1 step left and 2 steps forward": "1 step left
    and 2 steps forward"), or None without a number."""
    words = _WORD.findall(line.lower())
    at = next((i for i, w in enumerate(words) if w.isdigit()), None)
    return None if at is None else " ".join(words[at:])


def at_value(position: str, lines: Sequence[str], prefix: str, values: Sequence[str]) -> str | None:
    """What an ``<at POSITION>`` field holds: its first value when a line at ``position`` starts with
    ``prefix`` (the target's line), its second when another line is there, its third when none is (None
    for a field without three values)."""
    if len(values) < 3:
        return None
    here = [ln for ln in lines if line_position(ln) == " ".join(position.lower().split())]
    p = " ".join(prefix.lower().split())
    if any(ln.lower() == p or ln.lower().startswith(p + " ") for ln in here):
        return values[0]
    return values[1] if here else values[2]


def bound_value(what: str, line: str, prefix: str, values: Sequence[str]) -> str | None:
    """What a bound field holds after ``line`` (copied from the observation; ``prefix`` is the thing's name
    it starts with): its first or last word, or the words after the prefix when they are one of ``values``,
    else "other" where that is a value (else those words); None when the line has no such part."""
    if what == "after":
        rest = " ".join(line[len(prefix):].split()).lower() if line.lower().startswith(prefix.lower()) else ""
        if not rest:
            return None
        return rest if rest in values or "other" not in values else "other"
    words = _WORD.findall(line.lower())
    return (words[0] if what == "first" else words[-1]) if words else None


def _bound_branch(fields: Sequence[tuple[str, list[str], bool]], bound: dict[int, tuple[str, list[str]]],
                  lines: Sequence[tuple[str, str]]) -> str:
    """The "a line was copied" branch of :func:`grammar_of` with bound fields: one alternative per offered
    line, that line then, in each bound field, its own word(s) (rules ``f<i>y`` of the free fields are
    defined by the caller; a line with no such part keeps the field's rule)."""
    alternatives = []
    for prefix, ln in dict.fromkeys(lines):
        names = [gbnf_literal(f"{fields[0][0]}: "), gbnf_literal(ln), '"\\n"']
        for i, (label, _, _) in enumerate(fields[1:], 1):
            value = bound_value(bound[i][0], ln, prefix, bound[i][1]) if i in bound else None
            names += [gbnf_literal(f"{label}: "), gbnf_literal(value) if value else f"f{i}y", '"\\n"']
        alternatives.append("(" + " ".join(names) + ")")
    return "(" + " | ".join(alternatives) + ")"


def read_fields(reply: str, labels: Iterable[str]) -> dict[str, str | None]:
    """The value written after each ``Label:`` (first occurrence, up to the line's end or an action tag),
    lowercased and stripped of quotes and a final full stop; None for a label the reply does not have."""
    out: dict[str, str | None] = {}
    for label in labels:
        m = re.search(rf"(?im)^\s*[*_-]*\s*{re.escape(label)}\s*[*_]*\s*:\s*(.*)$", reply or "")
        if m is None:
            out[label] = None
            continue
        v = m.group(1).split("<|", 1)[0].strip(" *_`\"'\t")
        out[label] = v.rstrip(".").strip(" *_`\"'\t").lower()
    return out


# -- mission slots ------------------------------------------------------------------------------------
def parse_slot_words(text: str) -> frozenset[str]:
    return frozenset(w for w in (x.strip().lower() for x in re.split(r"[,\n]", text or "")) if w)


def mission_things(mission: str, words: frozenset[str]) -> list[str]:
    """The things a mission names, in order: maximal runs of its words that are slot words."""
    out: list[str] = []
    run: list[str] = []
    for w in _WORD.findall((mission or "").lower()) + [""]:
        if w and w in words:
            run.append(w)
            continue
        if run and " ".join(run) not in out:
            out.append(" ".join(run))
        run = []
    return out


def fill_slots(text: str, mission: str, words: frozenset[str] | None, article: str = "the ") -> str:
    """``text`` with ``{slotK}`` replaced by ``article`` + the k-th thing of the mission ("the red ball";
    generic text, and one warning, where the mission names fewer things or there are no slot words)."""
    if "{slot" not in text:
        return text
    things = mission_things(mission, words) if words else []
    for k, ph in enumerate(SLOT_PLACEHOLDERS):
        if ph not in text:
            continue
        if k < len(things):
            text = text.replace(ph, f"{article}{things[k]}")
        else:
            key = (hash(words), k)  # once per slot-word set and slot, however many missions
            if key not in _warned:
                _warned.add(key)
                log.warning("slot filler: mission %r names no thing %d (slot words: %s); the slot keeps its generic "
                            "text (said once)", mission, k + 1, "none" if not words else len(words))
            text = text.replace(ph, GENERIC_SLOTS[k])
    return text


__all__ = ["AnswerSpecError", "BOUND_WORDS", "DIRECTIVE_SEGMENTS", "FOLD_MARK", "GENERIC_SLOTS", "GRAMMAR_SEGMENT", "SLOT_PLACEHOLDERS",
           "LINE_FIELD", "SLOT_WORDS_SEGMENT", "TEXT_FIELD", "fill_slots", "grammar_of", "mission_things",
           "observation_lines", "parse_slot_words", "parse_spec", "read_fields", "spec_text", "bound_value"]
