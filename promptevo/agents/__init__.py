"""LLM agents that play a :class:`~promptevo.envs.base.TextEnv`.

* :mod:`~promptevo.agents.base` - the :class:`Agent` interface, :class:`Decision`, prompt rendering;
* :mod:`~promptevo.agents.actions` - reading actions out of replies; grammars for constrained decoding;
* :mod:`~promptevo.agents.balrog` - BALROG's ``naive`` and ``robust-cot`` baselines;
* :mod:`~promptevo.agents.two_stage` - promptevo's descriptor + actor agent;
* :mod:`~promptevo.agents.random_agent` - the random floor;
* :mod:`~promptevo.agents.registry` - :func:`register_agent`, :func:`make_agent`, default prompts.
"""

from promptevo.agents.actions import (
    ACTION_RE,
    FALLBACK_ACTION,
    first_action_block,
    parse_plain_action,
    parse_tagged_action,
    plain_action_grammar,
    tagged_action_grammar,
)
from promptevo.agents.balrog import NaiveAgent, RobustCoTAgent
from promptevo.agents.base import PLACEHOLDERS, Agent, AgentError, Decision, fill_placeholders, render_module
from promptevo.agents.random_agent import RandomAgent
from promptevo.agents.registry import (
    agent_factory,
    agents,
    check_agent_name,
    default_prompt_path,
    default_prompts,
    make_agent,
    register_agent,
)
from promptevo.agents.two_stage import TwoStageAgent
from promptevo.envs.base import ActionSpace, match_action, normalize_action

__all__ = [
    "ACTION_RE", "FALLBACK_ACTION", "PLACEHOLDERS", "ActionSpace", "Agent", "AgentError", "Decision", "NaiveAgent",
    "RandomAgent", "RobustCoTAgent", "TwoStageAgent", "agent_factory", "agents", "check_agent_name",
    "default_prompt_path", "default_prompts", "fill_placeholders", "first_action_block", "make_agent",
    "match_action", "normalize_action", "parse_plain_action", "parse_tagged_action", "plain_action_grammar", "register_agent",
    "render_module", "tagged_action_grammar",
]
