"""The ``induce`` operator: a rule fitted to the expert's actions, written as an answer format and a table.

From expert-labelled decision states of training seeds (:mod:`promptevo.optim.reflect.expert`), the
features of :mod:`promptevo.optim.reflect.features` (which observation line names the mission's thing,
its first and last word, its shape...) and the expert's action:

1. **Fit** (:func:`fit_table`, pure): a value table over one feature, where a value's branch may be
   refined by one yes/no test on another feature (a tree of depth <= 2 that reads as a table). The
   structure is chosen by accuracy under cross-validation by seed on the fitting states; values seen in
   fewer than ``min_support`` states go to the default action. Only states where some line names the
   mission's things are fitted; the rest ("no such line") get the expert's most common action there.
   A hand-written fitter rather than a CART library: CART splits one-hot features in two, so a
   three-valued table needs depth 3 and reads as nested conditions; a multiway table is what the agent
   is asked to follow.
2. **Measure** (:func:`induce`): states of a share of the seeds are held out; the table fitted on the
   others is scored on them against the fitting states' majority action. No child unless it beats the
   majority on held-out states by :data:`MIN_GAIN` with at least :data:`MIN_HELDOUT` states.
3. **Render** (:func:`render`): an answer format whose fields make the agent write the feature values
   before the action, and a rule segment mapping values to actions. The template phrases are generic
   (``prompts/optimizer/induce.toml``); every word, value and action in the edit comes from the data.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptevo.errors import PromptevoError
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.answer_format import acting_module, format_rewrite, rule_edit
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.optim.propose.reply_cap import reply_fits
from promptevo.optim.reflect.expert import LabelledState, states_of
from promptevo.agents.answer_fields import GRAMMAR_SEGMENT, LINE_FIELD, SLOT_WORDS_SEGMENT, TEXT_FIELD, spec_text
from promptevo.optim.reflect.follower import Explorer, choose_explorer, play, success_rate
from promptevo.optim.reflect.features import (
    NONE,
    PLACEHOLDER,
    Vocabulary,
    defined,
    mission_slots,
    state_features,
    thing_words,
    vocabulary,
)
from promptevo.optim.reflect.llm_json import template_dir
from promptevo.resources import shipped_dir
from promptevo.segments import PromptSet, apply_edit

#: fewest fitting states, held-out states, and the held-out gain over the majority action a child needs
MIN_FIT = 12
MIN_HELDOUT = 6
MIN_GAIN = 0.10
HOLDOUT_SHARE = 0.3
FOLDS = 5
SEGMENT = "induced-rule"

Row = tuple[dict[str, str], str]  # (features, expert action)


class InduceError(PromptevoError, ValueError):
    """The phrase file of the induce operator is missing or malformed; ``str(e)`` is one line."""


# -- the model --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Split:
    """A yes/no test inside one branch of the table: ``feature == value``."""

    feature: str
    value: str
    yes: str
    no: str


@dataclass
class RuleTable:
    """``root`` value -> action (or a :class:`Split`); ``default`` for values not in the table;
    ``none_action`` where no line names the mission's things (None: the table says nothing there)."""

    root: str
    branches: dict[str, str | Split]
    default: str
    none_action: str | None = None

    def predict(self, feats: dict[str, str]) -> str | None:
        if not defined(feats):
            return self.none_action
        b = self.branches.get(feats.get(self.root, NONE), self.default)
        if isinstance(b, Split):
            return b.yes if feats.get(b.feature, NONE) == b.value else b.no
        return b

    def features(self) -> list[str]:
        used = [self.root] + [b.feature for b in self.branches.values() if isinstance(b, Split)]
        return list(dict.fromkeys(used))

    def to_dict(self) -> dict:
        return {"root": self.root, "default": self.default, "none": self.none_action,
                "branches": {v: (b if isinstance(b, str) else {"if": f"{b.feature} = {b.value}", "yes": b.yes,
                                                                "no": b.no}) for v, b in self.branches.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "RuleTable":
        """The table :meth:`to_dict` wrote."""
        branches: dict[str, str | Split] = {}
        for v, b in (d.get("branches") or {}).items():
            if isinstance(b, str):
                branches[v] = b
            else:
                feature, value = str(b["if"]).split(" = ", 1)
                branches[v] = Split(feature, value, b["yes"], b["no"])
        return cls(str(d["root"]), branches, str(d["default"]), d.get("none"))


def _majority(actions: Sequence[str]) -> str:
    counts = Counter(actions)
    return max(sorted(counts), key=lambda a: counts[a])


def _build(rows: Sequence[Row], root: str, splits: dict[str, tuple[str, str]], min_support: int) -> RuleTable:
    """Fit the table of a given structure (root feature, per-value split tests) to ``rows``."""
    default = _majority([a for _, a in rows])
    by_value: dict[str, list[Row]] = defaultdict(list)
    for f, a in rows:
        by_value[f.get(root, NONE)].append((f, a))
    branches: dict[str, str | Split] = {}
    for v, members in sorted(by_value.items()):
        if len(members) < min_support:
            continue
        act = _majority([a for _, a in members])
        if v in splits:
            g, w = splits[v]
            yes = [a for f, a in members if f.get(g, NONE) == w]
            no = [a for f, a in members if f.get(g, NONE) != w]
            branches[v] = Split(g, w, _majority(yes) if yes else act, _majority(no) if no else act)
        else:
            branches[v] = act
    return RuleTable(root, branches, default)


def _accuracy(table: RuleTable, rows: Sequence[Row]) -> float:
    return sum(table.predict(f) == a for f, a in rows) / len(rows) if rows else 0.0


def _fold(seed: int, k: int) -> int:
    return int(hashlib.sha256(f"fold:{seed}".encode()).hexdigest(), 16) % k


def _cv(rows: Sequence[Row], seeds: Sequence[int], root: str, splits: dict[str, tuple[str, str]],
        min_support: int) -> float:
    """Cross-validated accuracy (folds by seed) of a structure; resubstitution when there is one fold."""
    folds = {_fold(s, FOLDS) for s in seeds}
    if len(folds) < 2:
        return _accuracy(_build(rows, root, splits, min_support), rows)
    hits = 0
    for k in folds:
        train = [r for r, s in zip(rows, seeds) if _fold(s, FOLDS) != k]
        test = [r for r, s in zip(rows, seeds) if _fold(s, FOLDS) == k]
        t = _build(train, root, splits, min_support)
        hits += sum(t.predict(f) == a for f, a in test)
    return hits / len(rows)


def complexity(table: RuleTable) -> int:
    """How much the agent must read: values the table lists plus its yes/no tests."""
    return len(table.branches) + sum(isinstance(b, Split) for b in table.branches.values())


def _grow(rows: Sequence[Row], seeds: Sequence[int], root: str, candidates: Sequence[str], min_support: int,
          max_splits: int) -> tuple[float, dict[str, tuple[str, str]]]:
    """Greedy yes/no tests under one root: each round adds the test that raises the cross-validated
    accuracy most (by at least half a state); returns (accuracy, tests)."""
    score = _cv(rows, seeds, root, {}, min_support)
    splits: dict[str, tuple[str, str]] = {}
    for _ in range(max_splits):
        table = _build(rows, root, splits, min_support)
        errors: Counter[str] = Counter(f.get(root, NONE) for f, a in rows if table.predict(f) != a)
        best: tuple[float, str, str, str] | None = None
        for v, _n in errors.most_common(4):
            if v in splits:
                continue
            members = [(f, a) for f, a in rows if f.get(root, NONE) == v]
            cands = []  # tests ranked by how many of the branch's states they would get right
            for g in candidates:
                if g == root:
                    continue
                for w, c in Counter(f.get(g, NONE) for f, _ in members).items():
                    if c < min_support or c == len(members):
                        continue
                    yes = [a for f, a in members if f.get(g, NONE) == w]
                    no = [a for f, a in members if f.get(g, NONE) != w]
                    right = Counter(yes).most_common(1)[0][1] + Counter(no).most_common(1)[0][1]
                    cands.append((right, g, w))
            for _right, g, w in sorted(cands, reverse=True)[:4]:
                sc = _cv(rows, seeds, root, {**splits, v: (g, w)}, min_support)
                if best is None or sc > best[0]:
                    best = (sc, v, g, w)
        if best is None or best[0] <= score + 0.5 / len(rows):
            break
        score = best[0]
        splits[best[1]] = (best[2], best[3])
    return score, splits


def fit_table(rows: Sequence[Row], seeds: Sequence[int], *, min_support: int = 2, max_splits: int = 3,
              tolerance: float = 0.03) -> RuleTable:
    """The simplest table (fewest values and tests, :func:`complexity`) whose cross-validated accuracy is
    within ``tolerance`` of the best found; every feature is tried as the root, each grown greedily
    (:func:`_grow`). ``rows`` are states where some line names the mission's things; ``seeds`` their
    episode seeds (the folds)."""
    if not rows:
        raise ValueError("no states to fit")
    names = sorted({k for f, _ in rows for k in f})
    candidates = [n for n in names if len({f.get(n, NONE) for f, _ in rows}) > 1]
    if not candidates:
        return RuleTable(names[0] if names else "1.line", {}, _majority([a for _, a in rows]))
    models = []
    for root in candidates:
        score, splits = _grow(rows, seeds, root, candidates, min_support, max_splits)
        table = _build(rows, root, splits, min_support)
        models.append((score, complexity(table), root, table))
    top = max(m[0] for m in models)
    return min((m for m in models if m[0] >= top - tolerance), key=lambda m: (m[1], -m[0], m[2]))[3]


# -- induction from labelled states -----------------------------------------------------------------
@dataclass
class Induction:
    """What the operator found: the table (fitted on all usable states), its held-out accuracy (fitted on
    the other seeds) beside the majority action's, the state counts and why there is no child, if none."""

    table: RuleTable | None = None
    accuracy: float | None = None
    majority: float | None = None
    majority_action: str | None = None
    n_fit: int = 0
    n_heldout: int = 0
    left_out: int = 0  # states where no line names the mission's things
    none_accuracy: float | None = None  # of none_action on the left-out states
    slots: dict[str, str] = field(default_factory=dict)  # slot -> an example of the thing it names
    vocab: Vocabulary | None = None  # the vocabulary the features were computed with
    reason: str = ""

    @property
    def useful(self) -> bool:
        return self.table is not None and not self.reason

    def to_dict(self) -> dict:
        return {"table": self.table.to_dict() if self.table else None, "heldout_accuracy": self.accuracy,
                "majority_accuracy": self.majority, "majority_action": self.majority_action,
                "fit_states": self.n_fit, "heldout_states": self.n_heldout, "left_out_states": self.left_out,
                "none_accuracy": self.none_accuracy, "slots": self.slots, "reason": self.reason or None,
                "vocabulary": ({"structural": sorted(self.vocab.structural), "words": sorted(self.vocab.line_words)}
                               if self.vocab else None)}


def _heldout(seed: int) -> bool:
    return int(hashlib.sha256(f"heldout:{seed}".encode()).hexdigest(), 16) % 100 < HOLDOUT_SHARE * 100


def induce(states: Sequence[LabelledState], *, vocab: Vocabulary | None = None, min_fit: int = MIN_FIT,
           min_heldout: int = MIN_HELDOUT, min_gain: float = MIN_GAIN, min_support: int = 2) -> Induction:
    """Fit and measure a rule table on expert-labelled states (distinct by mission, observation and
    expert action)."""
    seen: set[tuple[str, str, str]] = set()
    uniq = []
    for s in states:
        if (s.mission, s.observation, s.expert) not in seen:
            seen.add((s.mission, s.observation, s.expert))
            uniq.append(s)
    if not uniq:
        return Induction(reason="no expert-labelled states")
    vocab = vocab or vocabulary(s.observation for s in uniq)
    feats = [state_features(s.observation, s.mission, vocab) for s in uniq]
    rows = [(f, s.expert, s.seed) for f, s in zip(feats, uniq) if defined(f)]
    left = [(s.expert, s) for f, s in zip(feats, uniq) if not defined(f)]
    out = Induction(left_out=len(left), vocab=vocab)
    for s in uniq:
        for k, thing in enumerate(mission_slots(s.mission, vocab), 1):
            out.slots.setdefault(str(k), " ".join(thing))
    fit = [(f, a, sd) for f, a, sd in rows if not _heldout(sd)]
    held = [(f, a, sd) for f, a, sd in rows if _heldout(sd)]
    out.n_fit, out.n_heldout = len(fit), len(held)
    if len(fit) < min_fit or len(held) < min_heldout:
        out.reason = (f"too few labelled states where a line names the mission's things ({len(fit)} to fit, "
                      f"{len(held)} held out; need {min_fit} and {min_heldout})")
        return out
    probe = fit_table([(f, a) for f, a, _ in fit], [sd for *_, sd in fit], min_support=min_support)
    out.majority_action = _majority([a for _, a, _ in fit])
    out.accuracy = round(_accuracy(probe, [(f, a) for f, a, _ in held]), 4)
    out.majority = round(sum(a == out.majority_action for _, a, _ in held) / len(held), 4)
    table = fit_table([(f, a) for f, a, _ in rows], [sd for *_, sd in rows], min_support=min_support)
    if left:
        table.none_action = _majority([a for a, _ in left])
        out.none_accuracy = round(sum(a == table.none_action for a, _ in left) / len(left), 4)
    out.table = table
    if out.accuracy < out.majority + min_gain:
        out.reason = (f"the fitted table is no better than the majority action on held-out states "
                      f"({out.accuracy:.0%} vs {out.majority:.0%} for always {out.majority_action!r}, "
                      f"n = {len(held)})")
    return out


# -- rendering ----------------------------------------------------------------------------------------
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

    r = phrases["rule"]
    groups: dict[str | Split, list[str]] = {}
    for v, b in table.branches.items():
        groups.setdefault(b, []).append(v)
    lines = [r["intro"]]
    for b, values in groups.items():
        either = r["or"].join(cond(table.root, v) for v in values)
        if isinstance(b, str):
            lines.append(r["case"].format(cond=either, action=b))
        else:
            lines.append(r["case"].format(cond=r["and"].join([either, cond(b.feature, b.value)]), action=b.yes))
            lines.append(r["case"].format(cond=r["otherwise"].format(cond=either), action=b.no))
    ex = how.explorer
    line_label = next((f.label for f in fields if f.feature == f"{slots[0]}.line"), None) if slots else None
    if how.none_first and line_label and "none_field" in r:
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


# -- children ---------------------------------------------------------------------------------------------
#: expert-played training seeds the "no line" explorers are simulated on, at most
EXPLORER_SEEDS = 20
DEMO_SEGMENT = "induced-examples"


def _parent_table(ctx: OperatorContext) -> tuple[RuleTable, Explorer | None] | None:
    """The induced table (and explorer) the parent's lineage carries, from the run's history."""
    for h in reversed(ctx.proposal.history):
        if h.get("candidate") == ctx.proposal.archive_parent:
            rec = (h.get("source") or {}).get("induce") or {}
            if rec.get("table"):
                return RuleTable.from_dict(rec["table"]), Explorer.from_dict(rec.get("explorer"))
    return None


def generation_induction(evidence: dict, ctx: OperatorContext) -> tuple[Induction | None, Explorer | None, dict]:
    """This generation's induced table, fitted once and shared by ``induce`` and the compile operators:
    (the induction, the "no line" explorer chosen by simulating the candidates with the program follower on
    the expert-played training seeds, the record). No table (None and a ``reason`` in the record) when no
    expert, no useful fit, or a refit whose simulated success is below the parent's table."""
    if "induction" in ctx.cache:
        return ctx.cache["induction"]
    expert = evidence.get("expert") or {}
    if not expert.get("available"):
        out: tuple = (None, None, {"reason": "no expert for this game"})
        ctx.cache["induction"] = out
        return out
    states = states_of(expert)
    ind = induce(states)
    record = ind.to_dict()
    explorer = None
    if ind.useful and ind.table is not None and ind.vocab is not None:
        game = ctx.game
        seeds = list(dict.fromkeys(s.seed for s in states if s.agent is None))[:EXPLORER_SEEDS]
        if seeds:
            env = game.env_factory(game.task)
            try:
                env.reset(seeds[0])
                actions = list(env.valid_actions)
            finally:
                env.close()
            explorer, scores = choose_explorer(game.task, ind.table, ind.vocab, actions, seeds,
                                               env_factory=game.env_factory)
            sim = success_rate(play(game.task, ind.table, explorer, ind.vocab, seeds, env_factory=game.env_factory))
            record.update({"explorer": explorer.to_dict(), "explorer_scores": scores,
                           "simulated": {"success": round(sim, 4), "n": len(seeds)}})
            parent = _parent_table(ctx)
            if parent is not None:
                psim = success_rate(play(game.task, parent[0], parent[1], ind.vocab, seeds,
                                         env_factory=game.env_factory))
                record["simulated"]["parent_success"] = round(psim, 4)
                if sim < psim:
                    ind.reason = (f"the refit plays worse than the parent's table with the program follower "
                                  f"({sim:.0%} vs {psim:.0%} on {len(seeds)} training seeds)")
                    record["reason"] = ind.reason
    out = (ind if ind.useful else None, explorer, record)
    if not ind.useful:
        record.setdefault("reason", ind.reason)
    ctx.cache["induction"] = out
    return out


def demonstrations(states: Sequence[LabelledState], table: RuleTable, explorer: Explorer | None,
                   vocab: Vocabulary, k: int) -> list[LabelledState]:
    """Up to ``k`` expert-labelled states on which the table (with its explorer) gives the expert's action,
    one per table row first (each branch value, each side of a split, the "no line" rule), shortest
    observations first."""
    rows: dict[str, LabelledState] = {}
    for s in sorted(states, key=lambda x: (len(x.observation), x.seed, x.t)):
        feats = state_features(s.observation, s.mission, vocab)
        if not defined(feats):
            if explorer is not None and s.expert == explorer.action:
                rows.setdefault("none", s)
            continue
        v = feats.get(table.root, NONE)
        b = table.branches.get(v)
        if b is None or table.predict(feats) != s.expert:
            continue
        key = v if isinstance(b, str) else f"{v}|{feats.get(b.feature, NONE) == b.value}"
        rows.setdefault(key, s)
    return list(rows.values())[:k]


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
                   slots: bool, lines: bool = False) -> list[tuple[str, list[str] | None]]:
    """The ``answer-grammar`` fields of a rendering: closed fields keep their values; with ``slots``, a
    copied-line field becomes "none" or a line that starts by naming the mission's thing, preceded by the
    word the expert's lines most often put before it (learnt from the data: "a {slot1} <text>"); with
    ``lines`` that line must be one of the step's observation lines ("a {slot1} <line>")."""
    out: list[tuple[str, list[str] | None]] = []
    for f in fields:
        slot, kind = f.feature.split(".", 1) if f.feature else ("", "")
        if kind == "line" and slots:
            before = Counter(b for s in states
                             if (b := state_features(s.observation, s.mission, vocab).get(f"{slot}.before"))
                             and b != NONE)
            word = before.most_common(1)[0][0] if before else "-"
            lead = "" if word == "-" else word + " "
            out.append((f.label, [NONE, f"{lead}{{slot{min(int(slot), 3)}}} {LINE_FIELD if lines else TEXT_FIELD}"]))
        else:
            out.append((f.label, f.values))
    return out


def compile_child(parent: PromptSet, ctx: OperatorContext, evidence: dict, operator: str, how: Rendering, *,
                  grammar: bool = False, demos: int = 0, lines: bool = False) -> list[Proposal]:
    """One child of ``parent`` carrying this generation's induced table rendered ``how`` (with an
    ``answer-grammar`` for constrained decoding, its copied line closed to the step's observation lines
    with ``lines``, ``demos`` demonstrations), or a log line saying why not."""
    ind, explorer, record = generation_induction(evidence, ctx)
    if operator == "induce" or "induce" not in ctx.record:
        ctx.record.setdefault("induce", record)
    if ind is None or ind.table is None or ind.vocab is None:
        ctx.log.append(f"{operator}: {record.get('reason') or 'no induced table'}; no child")
        return []
    phrases = load_phrases()
    how = Rendering(how.closed, how.slots, explorer, how.none_first)
    fields, rule = render_fields(ind.table, phrases, how)
    _, fmt = render(ind.table, phrases, how=how)
    need, cap = reply_fits(fields, states_of(evidence.get("expert") or {}), ctx.cfg)
    if cap and need > cap:
        ctx.log.append(f"{operator}: a full answer in this format takes up to {need} tokens, over the agent's "
                       f"reply cap of {cap} (--agent-max-tokens); no child")
        return []
    module = acting_module(parent)
    fmt_edit = format_rewrite(parent, module, fmt, f"{operator}: the answer fields the induced rule reads")
    if fmt_edit is None:
        ctx.log.append(f"{operator}: module {module!r} has no answer format with <|ACTION|> to write the features "
                       "in before the action; no child")
        return []
    why = (f"fitted to {ind.n_fit + ind.n_heldout} expert-labelled states; held-out accuracy {ind.accuracy:.0%} "
           f"vs {ind.majority:.0%} for the majority action (n = {ind.n_heldout})")
    edit = rule_edit(parent, module, SEGMENT, rule, why)
    try:
        child = apply_edit(apply_edit(parent, edit), fmt_edit)
        if how.slots:
            # the words of the things the expert's missions name (never "and", "left"... of the lines)
            words = sorted(thing_words(states_of(evidence.get("expert") or {}), ind.vocab))
            child = apply_edit(child, rule_edit(child, module, SLOT_WORDS_SEGMENT, ", ".join(words),
                                                "the words that name things in the observations (fills {slot1}... "
                                                "per episode)"))
        if grammar:
            child = apply_edit(child, rule_edit(child, module, GRAMMAR_SEGMENT,
                                                spec_text(grammar_fields(fields, states_of(evidence.get("expert") or {}),
                                                                         ind.vocab, how.slots, lines)),
                                                "answer grammar: the induced fields and their values, then one "
                                                "valid action"))
        if demos > 0:
            chosen = demonstrations(states_of(evidence.get("expert") or {}), ind.table, explorer, ind.vocab, demos)
            if chosen:
                child = apply_edit(child, rule_edit(child, module, DEMO_SEGMENT,
                                                    demo_text(chosen, fields, ind.table, ind.vocab, phrases, explorer),
                                                    f"{len(chosen)} expert-labelled training states in the answer "
                                                    "format"))
    except ValueError as e:
        ctx.log.append(f"{operator}: the rendered rule does not fit the prompt ({e}); no child")
        return []
    if not ctx.new_child(child):
        ctx.log.append(f"{operator}: the same rendering as a child tried before; no child")
        return []
    rec = dict(record)
    rec.update({"rule": rule, "format": fmt, "rendering": {"closed": how.closed, "slots": how.slots,
                                                           "grammar": grammar, "lines": lines, "demos": demos},
                "reply_tokens": {"longest_answer": need, "cap": cap},
                "fields": [{"label": f.label, "values": f.values, "feature": f.feature, "test": f.test,
                            "after": f.after} for f in fields]})
    return [Proposal(child, operator, edit.to_dict(), {"author": "machine", "induce": rec})]


# -- the operators ---------------------------------------------------------------------------------------
class CompileOperator:
    """An operator whose child carries this generation's induced table rendered ``how`` (with an answer
    grammar, with ``demos`` demonstrations): ``induce`` and the ``compile-*`` modules set only these."""

    name = "induce"
    author = "machine"
    reads: tuple[str, ...] = ("expert",)
    summary = ("a rule table fitted to the game's expert on labelled training states, with the answer format "
               "that makes the agent write the features it reads (games with an expert)")
    how = Rendering()
    grammar = False
    lines = False
    demos = 0

    def propose(self, parent: PromptSet, evidence: dict, ctx: OperatorContext, k: int) -> list[Proposal]:
        if ctx.cache.get(f"{self.name}-done"):  # one child per generation, however many slots are free
            return []
        ctx.cache[f"{self.name}-done"] = True
        return compile_child(parent, ctx, evidence, self.name, self.how, grammar=self.grammar, demos=self.demos,
                             lines=self.lines)


class InduceOperator(CompileOperator):
    """``induce``: one child per generation from a rule table fitted to the expert's actions, or one log
    line saying why there is none."""


register_operator(InduceOperator())

__all__ = ["CompileOperator", "DEMO_SEGMENT", "Field", "Induction", "InduceError", "InduceOperator", "Rendering",
           "RuleTable", "SEGMENT", "Split", "compile_child", "complexity", "demonstrations", "fit_table",
           "generation_induction", "induce", "load_phrases", "render", "render_fields"]
