"""The ``compile-lines`` operator: the answer grammar with the copied line closed to the observation.

Like ``compile-grammar``, and the grammar's copied-line field accepts only "none" or one of the current
step's observation lines that starts by naming the mission's thing ("a {slot1} <line>"), so a local agent
can no longer copy a wall line or invent one; the fields after a "none" line are "none" too, the rule for
"none" comes first in the line field's words, and the child carries compile-demos' demonstrations. The
grammar is rebuilt every step from that step's observation (prompt text filled per step from the episode's
mission and observation only). It is an output-schema edit
that does the line-finding part of the rule for the agent: reported as such, never hidden."""

from __future__ import annotations

from promptevo.optim.propose.compile_demos import DEMOS
from promptevo.optim.propose.compile_table import CompileOperator
from promptevo.optim.propose.render_table import Rendering
from promptevo.optim.propose.registry import register_operator


class LinesOperator(CompileOperator):
    name = "compile-lines"
    summary = ("compile-grammar with the copied line closed to the step's observation lines that name the "
               "mission's thing, or none, the 'none' rule first, and compile-demos' demonstrations (local models)")
    how = Rendering(closed=True, slots=True, none_first=True)
    grammar = True
    lines = True
    demos = DEMOS


register_operator(LinesOperator())

__all__ = ["LinesOperator"]
