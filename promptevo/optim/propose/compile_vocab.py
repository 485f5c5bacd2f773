"""The ``compile-vocab`` operator: the induced table, each answer field with its closed vocabulary.

A compile operator: the rule content is this generation's induced table (the same one ``induce``
proposes); only how it is written changes. Each field of the answer format lists the values the table
reads ("Last word: <forward, left, right or none>"), all taken from the fitted table."""

from __future__ import annotations

from promptevo.optim.propose.compile_table import CompileOperator
from promptevo.optim.propose.render_table import Rendering
from promptevo.optim.propose.registry import register_operator


class VocabOperator(CompileOperator):
    name = "compile-vocab"
    summary = ("the induced table with closed vocabularies: each answer field lists the values the table reads")
    how = Rendering(closed=True)


register_operator(VocabOperator())

__all__ = ["VocabOperator"]
