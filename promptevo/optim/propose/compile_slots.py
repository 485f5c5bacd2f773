"""The ``compile-slots`` operator: the induced table naming the mission's own things, per episode.

A compile operator (the rule content is this generation's induced table). On top of the closed
vocabularies, the answer format and the rule refer to the mission's things by their words in the current
episode ("copy the observation line that names the red ball"): ``{slot1}``... placeholders the agent
fills from the episode's mission alone, with the ``slot-words`` segment (the words that name things in the
observations, learnt from the expert's states) telling it which mission words name things."""

from __future__ import annotations

from promptevo.optim.propose.compile_table import CompileOperator
from promptevo.optim.propose.render_table import Rendering
from promptevo.optim.propose.registry import register_operator


class SlotsOperator(CompileOperator):
    name = "compile-slots"
    summary = ("the induced table with closed vocabularies and the mission's things named per episode ({slot1}: the red ball)")
    how = Rendering(closed=True, slots=True)


register_operator(SlotsOperator())

__all__ = ["SlotsOperator"]
