"""The ``compile-bind`` operator: ``compile-fold`` with the line's word bound to the line in the grammar.

In ``compile-fold``'s proof run the remaining errors were all of one kind: on a two-part line ("a purple key
1 step right and 2 steps forward") the 1.5B agent wrote the line's *first* direction word in the "Last
word" field. Here the answer grammar, rebuilt every step from that step's observation, offers after each
copied line only that line's own last (or first) word, so the agent chooses the line (or "none") and does
the table's lookup; the word is written by the grammar. An output-schema edit that takes the word-reading
part of the rule off the agent: reported as such (``rendering.bind`` in the child's record), never hidden."""

from __future__ import annotations

from promptevo.optim.propose.compile_fold import FoldOperator
from promptevo.optim.propose.registry import register_operator


class BindOperator(FoldOperator):
    name = "compile-bind"
    summary = ("compile-fold with the key word bound to the copied line: the grammar offers after each of the "
               "step's lines only that line's own last word, so the agent picks the line and does the lookup")
    bind = True


register_operator(BindOperator())

__all__ = ["BindOperator"]
