"""Reading an action out of a reply, and the grammars that force a local model to write one.

* :func:`parse_tagged_action` - the first ``<|ACTION|>...<|END|>`` block (BALROG's RobustCoT format);
* :func:`parse_plain_action` - the whole reply is one action (BALROG's naive format);
* :data:`FALLBACK_ACTION` - what is sent when nothing valid could be read: no env accepts it, so the
  env's default action runs (and, for BabyAI, the next observation carries the invalid-action feedback);
* :func:`tagged_action_grammar` / :func:`plain_action_grammar` - GBNF grammars for llama.cpp.
"""

from __future__ import annotations

import re

from promptevo.envs.base import ActionSpace

FALLBACK_ACTION = "No valid action could be read from the reply."

ACTION_OPEN, ACTION_CLOSE = "<|ACTION|>", "<|END|>"
ACTION_RE = re.compile(r"<\|ACTION\|>(.*?)<\|END\|>", re.DOTALL)


def first_action_block(reply: str) -> str | None:
    """Text of the first ``<|ACTION|>...<|END|>`` block (same result as ``ACTION_RE.search``), found in
    linear time: the regex is quadratic on a degenerate reply that repeats ``<|ACTION|>`` without
    ``<|END|>`` (10k repeats took ~10 s)."""
    start = reply.find(ACTION_OPEN)
    if start < 0:
        return None
    end = reply.find(ACTION_CLOSE, start + len(ACTION_OPEN))
    return None if end < 0 else reply[start + len(ACTION_OPEN) : end]


def parse_tagged_action(reply: str, space: ActionSpace) -> tuple[str, bool]:
    """First ``<|ACTION|>...<|END|>`` block of ``reply`` -> (action, parsed); fallback if none/invalid."""
    block = first_action_block(reply if isinstance(reply, str) else "")
    if block is not None:
        action = space.match(block.strip())
        if action is not None:
            return action, True
    return FALLBACK_ACTION, False


def parse_plain_action(reply: str, space: ActionSpace) -> tuple[str, bool]:
    """The whole reply must be one valid action (tolerant normalisation) -> (action, parsed)."""
    action = space.match(reply or "")
    return (action, True) if action is not None else (FALLBACK_ACTION, False)


def tagged_action_grammar(space: ActionSpace, think_chars: int | None = None) -> str:
    """Reasoning (no ``<``, at most ``think_chars`` characters; unbounded if None), then
    ``<|ACTION|>`` one valid action ``<|END|>``. The bound makes sure the action fits in max_tokens."""
    think = "[^<]*" if think_chars is None else f"[^<]{{0,{max(0, int(think_chars))}}}"
    return f'root ::= think "<|ACTION|>" action "<|END|>"\nthink ::= {think}\n' + space.gbnf_rules()


def default_think_chars(max_tokens: int | None) -> int | None:
    """Reasoning budget for the grammar: 2 characters per token of ``max_tokens`` minus 40 tokens kept
    for the action block (2 chars/token is a cautious lower bound, so the reply is not cut off)."""
    if not max_tokens:
        return None
    return max(0, (int(max_tokens) - 40) * 2)


def plain_action_grammar(space: ActionSpace) -> str:
    """Exactly one valid action."""
    return "root ::= action\n" + space.gbnf_rules()


