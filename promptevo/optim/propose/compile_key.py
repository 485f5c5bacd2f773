"""The ``compile-key`` operator: ``compile-bind`` with one condition per row.

On pickup, ``compile-bind``'s probe wrote the right values in every in-view step and then chose another
action in 87 of 92 (lookup errors): the table's split row reads two conditions ("Last word is "forward"
and After the name is "1 step forward": pick up.") and its other side an "otherwise". Where the shape
test implies the key's value (the shape "a ... 1 step forward" ends with the key's word "forward"), this
rendering writes the test alone as its own row, before the key's row, and says that the first matching
row decides: every row has one condition. The table, its fields and the grammar are ``compile-bind``'s."""

from __future__ import annotations

from promptevo.optim.propose.compile_bind import BindOperator
from promptevo.optim.propose.registry import register_operator
from promptevo.optim.propose.render_table import Rendering


class KeyOperator(BindOperator):
    name = "compile-key"
    summary = ("compile-bind with one condition per row: a shape test that implies the key's value is its own "
               "row before the key's, and the first matching row decides")
    how = Rendering(closed=True, slots=True, fold=True, flat=True)


register_operator(KeyOperator())

__all__ = ["KeyOperator"]
