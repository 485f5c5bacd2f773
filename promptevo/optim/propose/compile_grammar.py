"""The ``compile-grammar`` operator: the induced table with an answer grammar (constrained answers).

A compile operator (the rule content is this generation's induced table). On top of slots and closed
vocabularies, the child carries an ``answer-grammar`` segment (an output-schema edit, shown in the prompt
and the report like any segment): where the agent decodes with a grammar (``local/`` models through
llama.cpp) it is compiled to GBNF, so a reply is always the table's fields with the table's values, then one
valid action: parseable and short. Remote models ignore the grammar and read the same text."""

from __future__ import annotations

from promptevo.optim.propose.compile_table import CompileOperator
from promptevo.optim.propose.render_table import Rendering
from promptevo.optim.propose.registry import register_operator


class GrammarOperator(CompileOperator):
    name = "compile-grammar"
    summary = ("the induced table with slots and closed vocabularies, and an answer grammar (local models decode only those fields, their values and a valid action)")
    how = Rendering(closed=True, slots=True)
    grammar = True


register_operator(GrammarOperator())

__all__ = ["GrammarOperator"]
