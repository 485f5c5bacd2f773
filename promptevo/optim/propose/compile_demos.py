"""The ``compile-demos`` operator: the induced table with demonstrations (after DSPy's BootstrapFewShot).

A compile operator (the rule content is this generation's induced table). On top of slots and closed
vocabularies, the child carries up to ``DEMOS`` expert-labelled training states written in the answer
format with their true field values and the expert's action, one per row of the table first
(:func:`~promptevo.optim.propose.compile_table.demonstrations`)."""

from __future__ import annotations

from promptevo.optim.propose.compile_table import CompileOperator
from promptevo.optim.propose.render_table import Rendering
from promptevo.optim.propose.registry import register_operator

#: demonstrations per child, at most
DEMOS = 4


class DemosOperator(CompileOperator):
    name = "compile-demos"
    summary = ("the induced table with slots, closed vocabularies and expert-labelled demonstrations covering every row of the table")
    how = Rendering(closed=True, slots=True)
    demos = DEMOS


register_operator(DemosOperator())

__all__ = ["DemosOperator"]
