"""How long a reply in an answer format can get, against the agent's reply cap (checked before a compile
operator proposes a child: a format whose full answer does not fit would be cut mid-field every step)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def longest_answer(fields: Sequence[Any], states: Sequence[Any]) -> str:
    """The longest reply that follows the answer format to the letter on ``states``: each field with its
    longest value (a copied line: the longest observation line), then the longest expert action tagged."""
    lines = [ln.strip() for s in states for ln in s.observation.splitlines() if ln.strip()]
    longest_line = max(lines, key=len, default="")
    out = []
    for f in fields:
        vals = f.values if f.values is not None else [longest_line]
        out.append(f"{f.label}: {max(vals, key=len, default='')}")
    action = max((s.expert for s in states), key=len, default="")
    return "\n".join(out + [f"<|ACTION|>{action}<|END|>"])


def reply_fits(fields: Sequence[Any], states: Sequence[Any], cfg: Any) -> tuple[int, int]:
    """(tokens of :func:`longest_answer` in the agent model's tokenizer, the agent's reply cap)."""
    from promptevo.llm.tokens import count_tokens

    cap = int(getattr(cfg, "agent_max_tokens", 0) or 0)
    return count_tokens(longest_answer(fields, states), getattr(cfg, "model", None)), cap


__all__ = ["longest_answer", "reply_fits"]
