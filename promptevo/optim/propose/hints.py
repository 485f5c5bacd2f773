"""The hint library: candidate rules shipped as data, one file per env family, that the ``hints``
operator inserts into a prompt, one rule per child.

A weak optimizer LLM cannot be relied on to write the rule that fixes a failure; it can be relied on to
try rules someone wrote down and keep the ones that win on paired seeds. The library is an explicit,
optional source (``--operators hints``, ``--hints FILE``); prompt initializations never contain it.

File format (TOML; ``prompts/hints/<family>.toml`` ships with promptevo)::

    [[hint]]
    id = "turn-to-side"                 # unique, lowercase; the inserted segment is named hint-<id>
    text = "If your target ... turn towards it."
    target = "act"                      # act: the module that picks the action; perceive: the descriptor
    tags = ["target_visible_not_approached"]   # behaviour signatures it addresses (ranking)
    tasks = ["goto", "pickup"]          # optional; empty or absent: every task of the family
    format = "Answer in this form: ... <|ACTION|>the action<|END|>"   # optional, see below

A rule that needs the agent to write its reasoning in a given shape carries ``format``: the text that
replaces the module's answer-format segment in the same child (only where that segment uses the
``<|ACTION|>`` protocol, which the new text must keep; a ``{mission}`` the old text had is kept too).

A malformed entry is one clear error naming the file and the entry.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from promptevo.optim.evidence import Evidence
from promptevo.errors import PromptevoError
from promptevo.optim.adapter import Proposal
from promptevo.optim.propose.answer_format import acting_module, format_rewrite, rule_edit
from promptevo.optim.propose.registry import OperatorContext, register_operator
from promptevo.resources import prompts_dir
from promptevo.segments import Edit, PromptSet, apply_edit, sanitize_text

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")


class HintLibraryError(PromptevoError, ValueError):
    """The hint file is missing or malformed; ``str(e)`` is one line."""


@dataclass(frozen=True)
class Hint:
    id: str
    text: str
    target: str = "act"
    tags: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    format: str | None = None

    @property
    def segment(self) -> str:
        return f"hint-{self.id}"


@dataclass
class HintLibrary:
    path: Path
    hints: list[Hint] = field(default_factory=list)

    def for_task(self, task: str) -> list[Hint]:
        return [h for h in self.hints if not h.tasks or task in h.tasks]


def builtin_path(family: str) -> Path:
    return prompts_dir() / "hints" / f"{family}.toml"


def load_hints(path: str | Path) -> HintLibrary:
    """Read and check a hint file (HintLibraryError, one line, on any problem)."""
    path = Path(path)
    if not path.is_file():
        raise HintLibraryError(f"hint library not found: {path}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise HintLibraryError(f"{path}: not valid TOML: {e}") from None
    raw = data.get("hint")
    if not isinstance(raw, list) or not raw:
        raise HintLibraryError(f"{path}: no [[hint]] entries")
    hints: list[Hint] = []
    seen: set[str] = set()
    for i, h in enumerate(raw, 1):
        where = f"{path}: hint #{i}"
        if not isinstance(h, dict):
            raise HintLibraryError(f"{where}: not a table")
        unknown = set(h) - {"id", "text", "target", "tags", "tasks", "format"}
        if unknown:
            raise HintLibraryError(f"{where}: unknown key {sorted(unknown)[0]!r} (valid: id, text, target, tags, tasks, "
                                   "format)")
        hid, text = h.get("id"), h.get("text")
        if not isinstance(hid, str) or not _ID_RE.match(hid):
            raise HintLibraryError(f"{where}: id must be lowercase letters, digits and '-' (got {hid!r})")
        if hid in seen:
            raise HintLibraryError(f"{where}: duplicate id {hid!r}")
        if not isinstance(text, str) or not sanitize_text(text).strip():
            raise HintLibraryError(f"{where} ({hid}): text must be a non-empty string")
        target = h.get("target", "act")
        if target not in ("act", "perceive"):
            raise HintLibraryError(f"{where} ({hid}): target must be act or perceive (got {target!r})")
        lists = {}
        for key in ("tags", "tasks"):
            v = h.get(key, [])
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise HintLibraryError(f"{where} ({hid}): {key} must be a list of strings")
            lists[key] = tuple(v)
        fmt = h.get("format")
        if fmt is not None and (not isinstance(fmt, str) or "<|ACTION|>" not in fmt or "<|END|>" not in fmt):
            raise HintLibraryError(f"{where} ({hid}): format must be text that keeps <|ACTION|>the action<|END|>")
        seen.add(hid)
        hints.append(Hint(hid, sanitize_text(text).strip(), target, lists["tags"], lists["tasks"],
                          sanitize_text(fmt).strip() if fmt else None))
    return HintLibrary(path, hints)


def target_module(prompts: PromptSet, target: str) -> str:
    """The module a hint goes into (see :func:`~promptevo.optim.propose.answer_format.acting_module`)."""
    return acting_module(prompts, target)


def hint_edit(hint: Hint, prompts: PromptSet) -> Edit:
    """The ``add`` edit inserting ``hint`` before the module's answer-format segment."""
    return rule_edit(prompts, target_module(prompts, hint.target), hint.segment, hint.text,
                     f"hint library rule {hint.id}" + (f" (for {', '.join(hint.tags)})" if hint.tags else ""))


def format_edit(hint: Hint, prompts: PromptSet, module: str) -> Edit | None:
    """The rewrite of ``module``'s answer-format segment a hint with ``format`` brings, or None when the
    module has no tagged-action format segment (e.g. the naive agent, which answers with the action only)."""
    if not hint.format:
        return None
    return format_rewrite(prompts, module, hint.format, f"hint library rule {hint.id}: the answer shape it needs")


def rank_hints(hints: Iterable[Hint], signature_kinds: Iterable[str], task: str | None = None) -> list[Hint]:
    """Hints ordered by how much of the parent's observed behaviour their tags address: each matching tag
    adds the weight of its signature (1 for the most prevalent, 1/2 for the next, ...), so a rule for two
    observed failures ranks above a rule for one. Ties: a hint written for ``task`` before a generic one,
    then file order."""
    weight: dict[str, float] = {}
    for i, k in enumerate(signature_kinds):
        weight.setdefault(k, 1.0 / (1 + i))

    def key(h: tuple[int, Hint]) -> tuple[float, int, int]:
        idx, hint = h
        score = sum(weight.get(t, 0.0) for t in set(hint.tags))
        return (-score, 0 if task is not None and task in hint.tasks else 1, idx)

    return [h for _, h in sorted(enumerate(hints), key=key)]


def propose_hints(prompts: PromptSet, library: HintLibrary, *, task: str, n: int, tried: set[str],
                  signature_kinds: Iterable[str] = (), skip: Iterable[str] = ()) -> list[tuple[Hint, Edit, PromptSet]]:
    """Up to ``n`` children, each inserting one hint the prompt does not hold yet and whose child was not
    tried before (by fingerprint). ``skip``: hint ids already tried in this run."""
    present = {s.name for _, p in prompts.modules for s in p.segments}
    skip = set(skip)
    out = []
    for hint in rank_hints(library.for_task(task), signature_kinds, task):
        if len(out) >= n:
            break
        if hint.segment in present or hint.id in skip:
            continue
        edit = hint_edit(hint, prompts)
        fmt = format_edit(hint, prompts, edit.module)
        if hint.format and fmt is None:
            continue  # the rule needs an answer shape this agent cannot write
        try:
            child = apply_edit(prompts, edit)
            if fmt is not None:
                child = apply_edit(child, fmt)
        except ValueError:
            continue
        if child.fingerprint() in tried:
            continue
        tried.add(child.fingerprint())
        out.append((hint, edit, child))
    return out


def describe_library(library: HintLibrary) -> dict[str, Any]:
    return {"path": str(library.path), "hints": len(library.hints)}


class HintsOperator:
    """``hints``: one rule from the hint library per child (person-written game knowledge)."""

    name = "hints"
    author = "person"
    reads = ("signatures",)
    summary = ("one rule per child from the person-written hint library (prompts/hints/<family>.toml or --hints); "
               "off in any claim about the optimizer")

    def propose(self, parent: PromptSet, evidence: Evidence, ctx: OperatorContext, k: int) -> list[Proposal]:
        lib = ctx.game.hint_library()
        tried_hints = {((h.get("source") or {}).get("hint")) for h in ctx.proposal.history}
        tried_hints |= {(p.source or {}).get("hint") for p in ctx.batch.proposals}
        sig_kinds = [s["kind"] for s in Evidence.of(evidence).signatures]
        return [Proposal(child, "hint", edit.to_dict(), {"hint": hint.id, "author": "person"})
                for hint, edit, child in propose_hints(parent, lib, task=ctx.game.task.name, n=k, tried=ctx.tried,
                                                       signature_kinds=sig_kinds, skip=tried_hints)]


register_operator(HintsOperator())
