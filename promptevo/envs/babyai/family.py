"""The ``babyai`` env family: task parameters ``goal`` (one of the five BALROG goals), ``num_dists``
(distractors; BALROG: 0), ``feedback_on_invalid`` and ``feedback_style``."""

from __future__ import annotations

from typing import Any

from promptevo.envs.babyai.spec import BABYAI_GOALS, FEEDBACK_STYLES
from promptevo.envs.base import TextEnv
from promptevo.envs.registry import register_env

PARAMS = ("goal", "num_dists", "feedback_on_invalid", "feedback_style")


def check(params: dict[str, Any]) -> dict[str, Any]:
    unknown = [k for k in params if k not in PARAMS]
    if unknown:
        raise ValueError(f"unknown babyai parameter {unknown[0]!r} (valid: {', '.join(PARAMS)})")
    goal = params.get("goal")
    if goal not in BABYAI_GOALS:
        raise ValueError(f"goal must be one of {', '.join(BABYAI_GOALS)} (got {goal!r})")
    nd = params.get("num_dists", 0)
    if isinstance(nd, bool) or not isinstance(nd, int) or nd < 0:
        raise ValueError(f"num_dists must be an integer >= 0 (got {nd!r})")
    if params.get("feedback_style", "current") not in FEEDBACK_STYLES:
        raise ValueError(f"feedback_style must be one of {', '.join(FEEDBACK_STYLES)}")
    return {"goal": goal, "num_dists": nd, **{k: params[k] for k in PARAMS[2:] if k in params}}


def make(params: dict[str, Any]) -> TextEnv:
    from promptevo.envs.babyai.env import BabyAITextEnv  # minigrid is imported only to play

    return BabyAITextEnv(**check(params))


register_env("babyai", make, check=check, description="BabyAI tasks of BALROG (text exactly as BALROG renders it)",
             signatures=lambda eps: __import__("promptevo.envs.babyai.signatures", fromlist=["_"]).detect(eps))
