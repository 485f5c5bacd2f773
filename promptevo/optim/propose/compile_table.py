"""The ``induce`` operator and the base of the ``compile-*`` operators: one child per generation carrying
this generation's induced table (:mod:`promptevo.optim.propose.induce`), rendered
(:mod:`promptevo.optim.propose.render_table`) as the operator asks, after the "no line" explorer is chosen
and the refit checked against its parent's table by simulation with the program follower."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from promptevo.optim.evidence import Evidence
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.answer_format import acting_module, format_rewrite, rule_edit
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.optim.propose.reply_cap import reply_fits
from promptevo.optim.reflect.expert import LabelledState
from promptevo.agents.answer_fields import GRAMMAR_SEGMENT, SLOT_WORDS_SEGMENT, spec_text
from promptevo.optim.reflect.follower import Explorer, choose_explorer, play, success_rate
from promptevo.optim.reflect.features import (
    NONE,
    Vocabulary,
    defined,
    state_features,
    thing_words,
)
from promptevo.segments import Edit, PromptSet, apply_edit
from promptevo.optim.propose.induce import Induction, RuleTable, induce
from promptevo.optim.propose.render_table import Rendering, demo_text, grammar_fields, load_phrases, render, render_fields


SEGMENT = "induced-rule"
#: expert-played training seeds the "no line" explorers are simulated on, at most
EXPLORER_SEEDS = 20
DEMO_SEGMENT = "induced-examples"


def valid_actions(game, seed: int) -> list[str]:
    """The game's valid actions, read from a fresh env reset to ``seed``."""
    env = game.env_factory(game.task)
    try:
        env.reset(seed)
        return list(env.valid_actions)
    finally:
        env.close()


#: training seeds whose first observation is read (env reset, no LLM) for the words that name things
WORD_SEEDS = 200


@dataclass(frozen=True)
class _Reset:
    mission: str
    observation: str


def reset_states(game, seeds: Sequence[int]) -> list[_Reset]:
    """``(mission, first observation)`` of fresh env resets to ``seeds`` (what the agent would see at step
    0; no LLM, no hidden state): the words that name things come from more missions than the expert played
    ("the yellow key" where no expert episode had a yellow object). A seed whose reset fails is skipped."""
    out: list[_Reset] = []
    env = game.env_factory(game.task)
    try:
        for seed in seeds:
            try:
                obs, info = env.reset(seed)
            except Exception:  # noqa: BLE001 - a seed the env cannot reset adds no words
                continue
            out.append(_Reset(str(info.get("mission") or env.mission), obs or ""))
    finally:
        env.close()
    return out


def _parent_table(ctx: OperatorContext) -> tuple[RuleTable, Explorer | None] | None:
    """The induced table (and explorer) the parent's lineage carries, from the run's history."""
    for h in reversed(ctx.proposal.history):
        if h.get("candidate") == ctx.proposal.archive_parent:
            rec = (h.get("source") or {}).get("induce") or {}
            if rec.get("table"):
                return RuleTable.from_dict(rec["table"]), Explorer.from_dict(rec.get("explorer"))
    return None


def generation_induction(evidence: Evidence | dict, ctx: OperatorContext) -> tuple[Induction | None, Explorer | None, dict]:
    """This generation's induced table, fitted once and shared by ``induce`` and the compile operators:
    (the induction, the "no line" explorer chosen by simulating the candidates with the program follower on
    the expert-played training seeds, the record). No table (None and a ``reason`` in the record) when no
    expert, no useful fit, or a refit whose simulated success is below the parent's table."""
    if "induction" in ctx.cache:
        return ctx.cache["induction"]
    ev = Evidence.of(evidence)
    if not ev.has_expert:
        out: tuple = (None, None, {"reason": "no expert for this game"})
        ctx.cache["induction"] = out
        return out
    states = ev.expert_states
    ind = induce(states)
    record = ind.to_dict()
    explorer = None
    if ind.useful and ind.table is not None and ind.vocab is not None:
        game = ctx.game
        seeds = list(dict.fromkeys(s.seed for s in states if s.agent is None))[:EXPLORER_SEEDS]
        if seeds:
            actions = valid_actions(game, seeds[0])
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


def answer_format_edit(parent: PromptSet, ctx: OperatorContext, operator: str, fields: Sequence[Any], fmt: str,
                       states: Sequence[LabelledState], why: str) -> tuple[str, Edit, int, int] | None:
    """(the acting module, the rewrite of its answer format to ``fmt``, the longest answer's tokens, the
    agent's reply cap), or None and a log line: a full answer over the reply cap, or no answer format with
    ``<|ACTION|>`` in the module."""
    need, cap = reply_fits(fields, states, ctx.cfg)
    if cap and need > cap:
        ctx.log.append(f"{operator}: a full answer in this format takes up to {need} tokens, over the agent's "
                       f"reply cap of {cap} (--agent-max-tokens); no child")
        return None
    module = acting_module(parent)
    fmt_edit = format_rewrite(parent, module, fmt, f"{operator}: {why}")
    if fmt_edit is None:
        ctx.log.append(f"{operator}: module {module!r} has no answer format with <|ACTION|> to write the features "
                       "in before the action; no child")
        return None
    return module, fmt_edit, need, cap


def compile_child(parent: PromptSet, ctx: OperatorContext, evidence: dict, operator: str, how: Rendering, *,
                  grammar: bool = False, demos: int = 0, lines: bool = False, bind: bool = False) -> list[Proposal]:
    """One child of ``parent`` carrying this generation's induced table rendered ``how`` (with an
    ``answer-grammar`` for constrained decoding, its copied line closed to the step's observation lines
    with ``lines``, its line-word fields bound to that line with ``bind``, ``demos`` demonstrations), or a log
    line saying why not."""
    ind, explorer, record = generation_induction(evidence, ctx)
    if operator == "induce" or "induce" not in ctx.record:
        ctx.record.setdefault("induce", record)
    if ind is None or ind.table is None or ind.vocab is None:
        ctx.log.append(f"{operator}: {record.get('reason') or 'no induced table'}; no child")
        return []
    phrases = load_phrases()
    how = replace(how, explorer=explorer)
    fields, rule = render_fields(ind.table, phrases, how)
    if how.fold and not any(f.fold for f in fields):
        ctx.log.append(f"{operator}: the 'no line' rule ({explorer.describe() if explorer else 'none'}) is not one "
                       "row of the table (a constant explorer whose action a value gives); no child")
        return []
    _, fmt = render(ind.table, phrases, how=how)
    checked = answer_format_edit(parent, ctx, operator, fields, fmt, Evidence.of(evidence).expert_states,
                                 "the answer fields the induced rule reads")
    if checked is None:
        return []
    module, fmt_edit, need, cap = checked
    why = (f"fitted to {ind.n_fit + ind.n_heldout} expert-labelled states; held-out accuracy {ind.accuracy:.0%} "
           f"vs {ind.majority:.0%} for the majority action (n = {ind.n_heldout})")
    edit = rule_edit(parent, module, SEGMENT, rule, why)
    try:
        child = apply_edit(apply_edit(parent, edit), fmt_edit)
        if how.slots:
            # the words of the things the expert's missions name (never "and", "left"... of the lines)
            if "resets" not in ctx.cache:  # once per generation, shared by the compile operators
                ctx.cache["resets"] = reset_states(ctx.game, ctx.game.task.seed_list("train")[:WORD_SEEDS])
            words = sorted(thing_words([*Evidence.of(evidence).expert_states, *ctx.cache["resets"]], ind.vocab))
            child = apply_edit(child, rule_edit(child, module, SLOT_WORDS_SEGMENT, ", ".join(words),
                                                "the words that name things in the observations (fills {slot1}... "
                                                "per episode)"))
        if grammar:
            child = apply_edit(child, rule_edit(child, module, GRAMMAR_SEGMENT,
                                                spec_text(grammar_fields(fields, Evidence.of(evidence).expert_states,
                                                                         ind.vocab, how.slots, lines, bind)),
                                                "answer grammar: the induced fields and their values, then one "
                                                "valid action"))
        if demos > 0:
            chosen = demonstrations(Evidence.of(evidence).expert_states, ind.table, explorer, ind.vocab, demos)
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
                                                           "grammar": grammar, "lines": lines, "demos": demos,
                                                           "fold": how.fold, "bind": bind, "flat": how.flat},
                "reply_tokens": {"longest_answer": need, "cap": cap},
                "fields": [{"label": f.label, "values": f.values, "feature": f.feature, "test": f.test,
                            "after": f.after, "fold": f.fold} for f in fields]})
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
    bind = False
    demos = 0

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        if not ctx.first_call(self.name):  # one child per generation, however many slots are free
            return []
        return compile_child(parent, ctx, evidence, self.name, self.how, grammar=self.grammar, demos=self.demos,
                             lines=self.lines, bind=self.bind)


class InduceOperator(CompileOperator):
    """``induce``: one child per generation from a rule table fitted to the expert's actions, or one log
    line saying why there is none."""


register_operator(InduceOperator())


__all__ = ["CompileOperator", "DEMO_SEGMENT", "EXPLORER_SEEDS", "InduceOperator", "SEGMENT", "WORD_SEEDS",
           "answer_format_edit", "compile_child", "demonstrations", "generation_induction", "reset_states", "valid_actions"]
