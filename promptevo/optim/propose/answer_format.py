"""Where a new rule goes in a prompt, and how an edit changes the answer format with it.

A small agent follows a rule once its answer format makes it write the facts the rule reads before the
action, so the operators that add rules (hint library, induced rules) often change two segments of one
module in the same child: the rule, inserted before the answer-format segment, and the format itself.
"""

from __future__ import annotations

from promptevo.segments import Edit, PromptSet

#: segments that carry the answer format the agents parse
FORMAT_SEGMENTS = ("format", "output_format")
ACTION_TAG = "<|ACTION|>"


def acting_module(prompts: PromptSet, target: str = "act") -> str:
    """The module a rule goes into: the descriptor for ``perceive`` when there is one, else the module
    that picks the action (``actor``, or the single module of a one-call agent)."""
    names = prompts.module_names
    if target == "perceive" and "descriptor" in names:
        return "descriptor"
    return "actor" if "actor" in names else names[0]


def format_segment(prompts: PromptSet, module: str) -> str | None:
    """The name of ``module``'s answer-format segment, or None."""
    return next((n for n in prompts.module(module).names if n in FORMAT_SEGMENTS), None)


def rule_edit(prompts: PromptSet, module: str, segment: str, text: str, rationale: str) -> Edit:
    """Add ``segment`` before the module's answer-format segment, or rewrite it where it exists."""
    names = prompts.module(module).names
    if segment in names:
        return Edit(op="rewrite", module=module, segment=segment, text=text, rationale=rationale)
    fmt = next((i for i, n in enumerate(names) if n in FORMAT_SEGMENTS), len(names))
    after = names[fmt - 1] if fmt > 0 else None
    return Edit(op="add", module=module, segment=segment, text=text, rationale=rationale, after=after)


def format_rewrite(prompts: PromptSet, module: str, text: str, rationale: str) -> Edit | None:
    """The rewrite of ``module``'s answer-format segment to ``text``, or None when the module has no
    format segment in the tagged-action protocol (e.g. the naive agent answers with the action only).
    ``text`` must keep the ``<|ACTION|>`` protocol; a ``{mission}`` the old text had is kept."""
    name = format_segment(prompts, module)
    old = prompts.module(module).get(name) if name else None
    if not name or not old or ACTION_TAG not in old or ACTION_TAG not in text:
        return None
    if "{mission}" in old and "{mission}" not in text:
        text = "Mission: {mission}\n" + text
    return Edit(op="rewrite", module=module, segment=name, text=text, rationale=rationale)


__all__ = ["ACTION_TAG", "FORMAT_SEGMENTS", "acting_module", "format_rewrite", "format_segment", "rule_edit"]
