"""The ``compile-paraphrase`` operator: the optimizer LLM rewords an induced rule; a program keeps only
rewordings that still carry every value and action of the table.

The rule is the parent's ``induced-rule`` segment when its lineage has one, otherwise this generation's
``compile-fold`` rendering (the child then carries that rendering with the reworded rule). The optimizer
LLM (``prompts/optimizer/paraphrase.md``, a generic template) is asked for up to ``k`` rewordings; each is
checked by :func:`check_paraphrase` (every quoted text and every action of the original present, one line
per case, not over twice as long, no tags) and refused with its reason in the log otherwise. What the
small model does here is wording only: the rule's content stays the fitted table's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from promptevo.optim.evidence import Evidence
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.answer_format import acting_module, rule_edit
from promptevo.optim.propose.compile_fold import FoldOperator
from promptevo.optim.propose.compile_table import SEGMENT, compile_child, valid_actions
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.optim.reflect.llm_json import load_template, render_template
from promptevo.segments import PromptSet, apply_edit

_QUOTED = re.compile(r'"([^"\n]+)"')


def required_texts(rule: str, actions: Sequence[str]) -> list[str]:
    """What a rewording must keep: every quoted text of ``rule`` and every action of ``actions`` it names."""
    low = rule.lower()
    keep = [f'"{q}"' for q in _QUOTED.findall(rule)]
    keep += [a for a in actions if re.search(rf"(?<![a-z]){re.escape(a.lower())}(?![a-z])", low)]
    return list(dict.fromkeys(keep))


def check_paraphrase(original: str, text: str, keep: Sequence[str]) -> str | None:
    """Why ``text`` is not a faithful rewording of ``original`` (None: it is)."""
    if not text.strip():
        return "empty"
    if "<|" in text or "```" in text:
        return "it holds tags or code fences"
    if len(text) > 2 * len(original) + 40:
        return f"over twice as long ({len(text)} vs {len(original)} characters)"
    low = text.lower()
    lost = [k for k in keep if k.lower() not in low]
    if lost:
        return "drops " + ", ".join(lost[:4]) + (" ..." if len(lost) > 4 else "")
    cases = sum(1 for ln in original.splitlines() if ln.strip().startswith("- "))
    if sum(1 for ln in text.splitlines() if ln.strip().startswith("- ")) < cases:
        return f"fewer cases than the original ({cases} lines starting with '- ')"
    if " ".join(text.split()).lower() == " ".join(original.split()).lower():
        return "the same text"
    return None


class ParaphraseOperator:
    name = "compile-paraphrase"
    author = "machine"
    reads = ("expert",)
    summary = ("the optimizer LLM rewords the induced rule (the parent's, else this generation's compile-fold "
               "rendering); kept only if every value and action of the table is still there")

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        if not ctx.first_call(self.name):  # one child per generation
            return []
        module = acting_module(parent)
        base, source, rendered = parent, {}, None
        if parent.module(module).get(SEGMENT) is None:
            fold = FoldOperator()
            kids = compile_child(parent, ctx, evidence, self.name, fold.how, grammar=fold.grammar,
                                 demos=fold.demos, lines=fold.lines)
            if not kids:
                ctx.log.append(f"{self.name}: no induced rule in the parent and none rendered; no child")
                return []
            base, source, rendered = kids[0].prompts, dict(kids[0].source), kids[0]
        original = base.module(module).get(SEGMENT) or ""
        keep = required_texts(original, valid_actions(ctx.game, ctx.game.task.seed_list("train")[0]))
        system_t, user_t = load_template("paraphrase")
        msgs = [{"role": "system", "content": render_template(system_t, rule=original, keep=", ".join(keep))},
                {"role": "user", "content": render_template(user_t, rule=original, keep=", ".join(keep))}]
        out: list[Proposal] = []
        refused: list[str] = []
        usage = ctx.usage.setdefault("paraphrase", {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0})
        for i in range(max(1, k)):
            reply = ctx.lm.text(msgs, role="paraphrase", seed=ctx.seed * 10 + i)
            if reply.text is None:  # an LLM failure costs this operator its child, not the run
                refused.append(f"call {i + 1}: {reply.error}")
                continue
            for key in usage:
                usage[key] += reply.usage[key]
            text = "\n".join(ln.rstrip() for ln in reply.text.strip().splitlines())
            why = "cut by the token cap" if reply.truncated else check_paraphrase(original, text, keep)
            if why:
                refused.append(f"sample {i + 1}: {why}")
                continue
            child = apply_edit(base, rule_edit(base, module, SEGMENT, text, "the induced rule reworded by the "
                                                                              "optimizer LLM, every value and action kept"))
            if not ctx.new_child(child):
                refused.append(f"sample {i + 1}: the same prompts as a child tried before")
                continue
            edit = rule_edit(parent, module, SEGMENT, text, "paraphrase of the induced rule")
            src = dict(source) if rendered is not None else {}
            src.update({"author": "machine", "paraphrase": {"original": original, "keep": keep,
                                                            "rendered_with": "compile-fold" if rendered else None}})
            out.append(Proposal(child, self.name, edit.to_dict(), src))
            break  # one child per generation: the screen and the race judge it
        ctx.record["paraphrase"] = {"keep": keep, "refused": refused, "children": len(out)}
        for r in refused:
            ctx.log.append(f"{self.name}: refused {r}")
        return out


register_operator(ParaphraseOperator())

__all__ = ["ParaphraseOperator", "check_paraphrase", "required_texts"]
