"""A real optimization run in a few seconds, with test doubles only (never used for reported results).

:func:`make_run` calls :func:`promptevo.optimize` with the doubles of ``engine_doubles.py``:
``ScriptedPickupEnv`` (pick up the ball; it is in front of the agent on seeds divisible by 4, else to the
left) played by the ``two-stage`` agent, with ``ScriptedLLM`` replies for the models ``fake/agent`` and
``fake/optimizer``. The mutator's first edit adds the rule "Always face the object before pick up."
(promoted: the best prompts win every test seed); its second rewrites a role (rejected); in the next
generation it proposes deleting the rule again (stopped early by racing). Used by the report, export and
tracking tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine_doubles import RULE, CountingRunner, gateways, initial_prompts, make_task, responder

import promptevo
from promptevo.llm import ScriptedLLM

TASK = make_task()

__all__ = ["RULE", "TASK", "make_run"]


def make_run(results_dir: str | Path, run: str = "r1", generations: int = 2, **settings: Any) -> Any:
    """Run :func:`promptevo.optimize` with the doubles; returns its :class:`RunResult`."""
    agw, ogw = gateways()
    kw: dict[str, Any] = {"episodes": 8, "validation_episodes": 20, "test_episodes": 20, "children": 2, "gate": "fixed"}
    kw.update(settings)
    with ScriptedLLM.install(responder):
        return promptevo.optimize(task=TASK, generations=generations, results_dir=str(results_dir), run=run,
                                  agent_gateway=agw, optimizer_gateway=ogw, initial_prompts=initial_prompts(),
                                  runner=CountingRunner(), quiet=True, **kw)
