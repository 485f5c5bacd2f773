"""The ``compile-fold`` operator: the "no line" rule folded into the table's own key.

Like ``compile-lines`` (the copied line closed to the step's observation lines that name the mission's
thing, demonstrations), and where no line names the thing the key field holds the value whose row gives
the explorer's action: "Line: none" is followed by "Last word: left", and the row "Last word is left: turn
left" applies, so the agent does the same lookup in every state instead of a separate rule for "none"
(which the 1.5B agent skipped: it wrote "Line: none" and went forward). Only for a constant explorer that
is one of the table's rows; otherwise no child, with a log line. The grammar writes the folded value after
a "none" line: an output-schema edit, reported as such, never hidden."""

from __future__ import annotations

from promptevo.optim.propose.compile_demos import DEMOS
from promptevo.optim.propose.compile_table import CompileOperator
from promptevo.optim.propose.registry import register_operator
from promptevo.optim.propose.render_table import Rendering


class FoldOperator(CompileOperator):
    name = "compile-fold"
    summary = ("compile-lines with the 'no line' rule folded into the table's key: after 'Line: none' the key "
               "field holds the value whose row gives the explorer's action, so every step is one lookup")
    how = Rendering(closed=True, slots=True, fold=True)
    grammar = True
    lines = True
    demos = DEMOS


register_operator(FoldOperator())

__all__ = ["FoldOperator"]
