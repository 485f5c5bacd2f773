"""The ``compile-phase`` operator: a phase-rooted rule (:mod:`promptevo.optim.propose.induce_phase`) for
games whose missions have steps ("put the X next to the Y", "open the door" behind a locked door).

Fitted on this generation's expert-labelled training states, refined by dataset aggregation with the
program follower on the expert-played training seeds (:func:`promptevo.optim.reflect.follower.refine`: the
expert labels the states the program's own mistakes lead to; no LLM), tables kept short enough to read
(:data:`MAX_VALUES` values per phase), its "no line" explorer stateless (a constant, or "A; when something
is 1 step forward, B": what the agent writes this step decides it; the probe's agent could not count
"up to k times in a row" against a wall), and rendered (:mod:`promptevo.optim.propose.render_phase`): the
agent writes what it carries, its current target, the target's line and the fields the phase's table
reads, then follows that phase's rows. The mission's things are named per episode from its own text
(``{slot1}``, ``{slot2}`` and the ``slot-words`` segment). Machine-written: every value, word and action
comes from the data; the phrases are the generic ``[phase]`` templates of ``induce.toml``. An
``answer-grammar`` (for agents that decode with one: local models) closes what is carried and the target to
the mission's things and the copied line to the step's own lines that name one of them: an output-schema
edit, reported as such (``grammar`` in the child's record)."""

from __future__ import annotations

from promptevo.agents.answer_fields import GRAMMAR_SEGMENT, SLOT_WORDS_SEGMENT, spec_text
from promptevo.optim.adapter import Proposal
from promptevo.optim.evidence import Evidence
from promptevo.optim.propose.answer_format import rule_edit
from promptevo.optim.propose.compile_table import (
    EXPLORER_SEEDS,
    SEGMENT,
    WORD_SEEDS,
    answer_format_edit,
    reset_states,
    valid_actions,
)
from promptevo.optim.propose.induce_phase import induce_phased
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.optim.propose.render_phase import phase_grammar, render_phase
from promptevo.optim.propose.render_table import load_phrases
from promptevo.optim.reflect.features import lead_word, thing_words
from promptevo.optim.reflect.follower import refine
from promptevo.segments import PromptSet, apply_edit

#: most values a phase's table may list (a table a small agent can read; the ceiling is measured for it)
MAX_VALUES = 6
#: dataset-aggregation rounds
ROUNDS = 2


class PhaseOperator:
    name = "compile-phase"
    author = "machine"
    reads: tuple[str, ...] = ("expert",)
    summary = ("a phase-rooted rule fitted to the expert (what you carry picks the target and the table; "
               "obstacle rows), refined with the program follower, rendered with closed fields")

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        if not ctx.first_call(self.name):  # one child per generation
            return []
        ev = Evidence.of(evidence)
        if not ev.has_expert:
            ctx.log.append(f"{self.name}: no expert for this game; no child")
            return []
        states = ev.expert_states
        game = ctx.game
        seeds = list(dict.fromkeys(s.seed for s in states if s.agent is None))[:EXPLORER_SEEDS]
        if not states or not seeds:
            ctx.log.append(f"{self.name}: no expert-played states; no child")
            return []
        first = induce_phased(states, max_values=MAX_VALUES)
        if first.table is None:
            ctx.log.append(f"{self.name}: {first.reason}; no child")
            return []

        def fit(pool):
            ind = induce_phased(pool, vocab=first.vocab, max_values=MAX_VALUES)
            return ind.table, ind.vocab

        ref = refine(game.task, fit, states, valid_actions(game, seeds[0]), seeds, env_factory=game.env_factory,
                     rounds=ROUNDS, stateless=True, start=(first.table, first.vocab))
        if ref.problem:
            ctx.log.append(f"{self.name}: {ref.problem}")
        # the chosen explorer's score on these seeds is the follower's success with the final table
        sim = next(x["success"] for x in ref.explorer_scores if x["explorer"] == ref.explorer.describe())
        phrases = load_phrases()
        rule, fmt, fields = render_phase(ref.table, phrases, ref.explorer)
        checked = answer_format_edit(parent, ctx, self.name, fields, fmt, states, "the answer fields the phased rule reads")
        if checked is None:
            return []
        module, fmt_edit, need, cap = checked
        why = (f"fitted to {first.n_fit + first.n_heldout} expert-labelled states (held-out accuracy "
               f"{first.accuracy if first.accuracy is not None else '-'}), refined on {len(seeds)} training seeds; "
               f"the program follower solves {sim:.0%} of them")
        edit = rule_edit(parent, module, SEGMENT, rule, why)
        if "resets" not in ctx.cache:
            ctx.cache["resets"] = reset_states(game, game.task.seed_list("train")[:WORD_SEEDS])
        words = sorted(thing_words([*states, *ctx.cache["resets"]], ref.vocab))
        try:
            child = apply_edit(apply_edit(parent, edit), fmt_edit)
            child = apply_edit(child, rule_edit(child, module, SLOT_WORDS_SEGMENT, ", ".join(words),
                                                "the words that name things in the observations (fills {slot1}... "
                                                "per episode)"))
            child = apply_edit(child, rule_edit(child, module, GRAMMAR_SEGMENT,
                                                spec_text(phase_grammar(ref.table, fields, phrases,
                                                                        lead_word(states, ref.vocab))),
                                                "answer grammar: the phased rule's fields, the copied line closed "
                                                "to the step's lines naming the mission's things, then one valid "
                                                "action"))
        except ValueError as e:
            ctx.log.append(f"{self.name}: the rendered rule does not fit the prompt ({e}); no child")
            return []
        if not ctx.new_child(child):
            ctx.log.append(f"{self.name}: the same rendering as a child tried before; no child")
            return []
        rec = {"phased": ref.table.to_dict(), "explorer": ref.explorer.to_dict(), "rounds": ref.rounds,
               "heldout_accuracy": first.accuracy, "notes": first.notes, "simulated": {"success": round(sim, 4),
                                                                                      "n": len(seeds)},
               "rule": rule, "format": fmt, "grammar": True, "reply_tokens": {"longest_answer": need, "cap": cap},
               "fields": [{"label": f.label, "feature": f.feature, "values": f.values, "fold": f.fold} for f in fields],
               "vocabulary": {"structural": sorted(ref.vocab.structural), "words": sorted(ref.vocab.line_words),
                              "leading": sorted(ref.vocab.leading)}}
        return [Proposal(child, self.name, edit.to_dict(), {"author": "machine", "induce": rec})]


register_operator(PhaseOperator())

__all__ = ["MAX_VALUES", "PhaseOperator", "ROUNDS"]
