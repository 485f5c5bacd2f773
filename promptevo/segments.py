"""Segmented prompts: a prompt is an ordered list of named segments; an agent owns one prompt per module.

A :class:`PromptSet` maps module names (``system`` for single-call agents, ``descriptor`` and ``actor``
for the two-stage agent) to a :class:`Prompt`. Prompt sets are stored as readable markdown::

    # actor
    ## role
    You pick the next action ...
    ## format
    ...

``# name`` starts a module, ``## name`` a segment; everything up to the next heading is the segment
text. Segment text may use ``###`` and deeper headings but not ``#`` or ``##`` (they would be read back
as structure), which :func:`sanitize_text` demotes. All functions here are pure.
"""

from __future__ import annotations

import difflib
import hashlib
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from promptevo.errors import PromptevoError
from promptevo.safetext import strip_control

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,63}$")
#: the key of the prompt file's first-line comment that says its texts are HTML-escaped
ESCAPED_KEY = "promptevo-text"
_HEAD_RE = re.compile(r"^(#{1,2})[ \t]+(\S.*?)\s*$")


class PromptFormatError(PromptevoError, ValueError):
    """A prompt file or prompt edit is malformed."""


def check_name(name: str, what: str = "segment") -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise PromptFormatError(
            f"invalid {what} name {name!r}: use lowercase letters, digits, '_' or '-' (max 64 chars)"
        )
    return name


def sanitize_text(text: str) -> str:
    """Strip surrounding blank lines, control characters and terminal escapes (newline and tab kept), and
    demote '#'/'##' headings inside segment text to '###'."""
    lines = []
    for line in strip_control(text).strip("\n").splitlines():
        m = _HEAD_RE.match(line)
        if m:
            line = "### " + m.group(2)
        lines.append(line.rstrip())
    return "\n".join(lines).strip()


@dataclass(frozen=True)
class Segment:
    name: str
    text: str

    def __post_init__(self) -> None:
        check_name(self.name)


@dataclass(frozen=True)
class Prompt:
    """An ordered list of named segments."""

    segments: tuple[Segment, ...] = ()

    def __post_init__(self) -> None:
        names = [s.name for s in self.segments]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise PromptFormatError(f"duplicate segment names: {sorted(dup)}")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.segments]

    def get(self, name: str) -> str | None:
        for s in self.segments:
            if s.name == name:
                return s.text
        return None

    def render(self, skip: frozenset[str] | set[str] = frozenset()) -> str:
        """The text sent to the LLM: segment texts joined by blank lines (headings are not sent)."""
        return "\n\n".join(s.text for s in self.segments if s.name not in skip and s.text.strip())

    def with_segment(self, name: str, text: str, after: str | None = None) -> "Prompt":
        """Replace segment ``name`` in place, or add it (after ``after``, else at the end)."""
        text = sanitize_text(text)
        if name in self.names:
            return Prompt(tuple(Segment(s.name, text) if s.name == name else s for s in self.segments))
        segs = list(self.segments)
        idx = len(segs)
        if after is not None and after in self.names:
            idx = self.names.index(after) + 1
        segs.insert(idx, Segment(name, text))
        return Prompt(tuple(segs))

    def without(self, name: str) -> "Prompt":
        if name not in self.names:
            raise PromptFormatError(f"no segment named {name!r} (have {self.names})")
        return Prompt(tuple(s for s in self.segments if s.name != name))

    def token_estimate(self) -> int:
        """Rough token count (4 chars per token); used for reporting prompt size."""
        return (len(self.render()) + 3) // 4


@dataclass(frozen=True)
class PromptSet:
    """Prompts of one agent, one per module, in order."""

    modules: tuple[tuple[str, Prompt], ...] = ()
    meta: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, mapping: dict[str, Prompt], meta: dict[str, str] | None = None) -> "PromptSet":
        for m in mapping:
            check_name(m, "module")
        return cls(tuple(mapping.items()), tuple((meta or {}).items()))

    def as_dict(self) -> dict[str, Prompt]:
        return dict(self.modules)

    @property
    def module_names(self) -> list[str]:
        return [m for m, _ in self.modules]

    def module(self, name: str) -> Prompt:
        d = self.as_dict()
        if name not in d:
            raise PromptFormatError(f"prompt set has no module {name!r} (have {self.module_names})")
        return d[name]

    def replace_module(self, name: str, prompt: Prompt) -> "PromptSet":
        d = self.as_dict()
        if name not in d:
            raise PromptFormatError(f"prompt set has no module {name!r} (have {self.module_names})")
        d[name] = prompt
        return PromptSet(tuple(d.items()), self.meta)

    def fingerprint(self) -> str:
        """Stable short hash of the content (module and segment names and texts)."""
        blob = json.dumps(self.to_dict()["modules"], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]

    def token_estimate(self) -> int:
        return sum(p.token_estimate() for _, p in self.modules)

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "meta": dict(self.meta),
            "modules": {m: [{"name": s.name, "text": s.text} for s in p.segments] for m, p in self.modules},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PromptSet":
        try:
            mods = {
                m: Prompt(tuple(Segment(s["name"], sanitize_text(s["text"])) for s in segs))
                for m, segs in data["modules"].items()
            }
        except (KeyError, TypeError, AttributeError) as e:
            raise PromptFormatError(f"malformed prompt set data: {e}") from e
        return cls.of(mods, {str(k): str(v) for k, v in (data.get("meta") or {}).items()})

    def to_markdown(self) -> str:
        """The prompt file: ``# module`` / ``## segment`` headings, each segment's text under its own. The
        texts are HTML-escaped (``&``, ``<``, ``>``) so a renderer shows a ``<script>`` an LLM wrote as text;
        the first line's comment says so and :meth:`from_markdown` reads them back as written."""
        meta = {**dict(self.meta), ESCAPED_KEY: "html"}
        out = ["<!-- " + json.dumps(meta, ensure_ascii=False).replace(">", "\\u003e") + " -->", ""]
        for m, p in self.modules:
            out.append(f"# {m}")
            out.append("")
            for s in p.segments:
                out.append(f"## {s.name}")
                out.append("")
                out.append(html.escape(sanitize_text(s.text), quote=False))
                out.append("")
        return "\n".join(out).rstrip() + "\n"

    @classmethod
    def from_markdown(cls, text: str, source: str = "<string>") -> "PromptSet":
        meta: dict[str, str] = {}
        mods: dict[str, list[Segment]] = {}
        cur_mod: str | None = None
        cur_seg: str | None = None
        buf: list[str] = []
        escaped = False  # written by to_markdown: texts are HTML-escaped

        def flush() -> None:
            nonlocal buf
            if cur_seg is not None and cur_mod is not None:
                text = "\n".join(buf)
                mods[cur_mod].append(Segment(cur_seg, sanitize_text(html.unescape(text) if escaped else text)))
            buf = []

        lines = text.splitlines()
        if lines and lines[0].startswith("<!--") and lines[0].rstrip().endswith("-->"):
            body = lines[0].strip()[4:-3].strip()
            try:
                meta = {str(k): str(v) for k, v in json.loads(body).items()}
            except (ValueError, AttributeError):
                meta = {}
            lines = lines[1:]
            escaped = meta.pop(ESCAPED_KEY, None) == "html"
        for lineno, line in enumerate(lines, 1):
            m = _HEAD_RE.match(line)
            if m and len(m.group(1)) == 1:
                flush()
                cur_mod = check_name(m.group(2).strip(), "module")
                if cur_mod in mods:
                    raise PromptFormatError(f"{source}:{lineno}: module {cur_mod!r} appears twice")
                mods[cur_mod] = []
                cur_seg = None
            elif m and len(m.group(1)) == 2:
                if cur_mod is None:
                    raise PromptFormatError(f"{source}:{lineno}: segment before any '# module' heading")
                flush()
                cur_seg = check_name(m.group(2).strip())
            else:
                if cur_seg is None and line.strip():
                    raise PromptFormatError(
                        f"{source}:{lineno}: text outside a '## segment' section: {line.strip()[:60]!r}"
                    )
                buf.append(line)
        flush()
        if not mods:
            raise PromptFormatError(f"{source}: no '# module' heading found")
        try:
            return cls.of({m: Prompt(tuple(segs)) for m, segs in mods.items()}, meta)
        except PromptFormatError as e:
            raise PromptFormatError(f"{source}: {e}") from e

    @classmethod
    def load(cls, path: str | Path) -> "PromptSet":
        path = Path(path)
        if not path.exists():
            raise PromptFormatError(f"prompt file not found: {path}")
        if path.suffix == ".json":
            try:
                return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
            except json.JSONDecodeError as e:
                raise PromptFormatError(f"{path}: invalid JSON: {e}") from e
        return cls.from_markdown(path.read_text(encoding="utf-8"), source=str(path))

    def save(self, path: str | Path) -> Path:
        """Write as JSON (``.json``) or markdown (anything else), atomically."""
        from promptevo.fileio import write_text_atomic

        path = Path(path)
        text = (
            json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"
            if path.suffix == ".json"
            else self.to_markdown()
        )
        return write_text_atomic(path, text)


# -- edits -----------------------------------------------------------------------------------------
EditOp = Literal["rewrite", "add", "delete"]


@dataclass(frozen=True)
class Edit:
    """A targeted change to one segment of one module, with the reason it was proposed."""

    op: EditOp
    module: str
    segment: str
    text: str = ""
    rationale: str = ""
    after: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "module": self.module,
            "segment": self.segment,
            "text": self.text,
            "rationale": self.rationale,
            "after": self.after,
        }

    def describe(self) -> str:
        return f"{self.op} {self.module}.{self.segment}"


def apply_edit(ps: PromptSet, edit: Edit) -> PromptSet:
    """Return a new prompt set with ``edit`` applied; raises PromptFormatError if it does not fit."""
    prompt = ps.module(edit.module)
    check_name(edit.segment)
    if edit.op == "delete":
        return ps.replace_module(edit.module, prompt.without(edit.segment))
    if edit.op not in ("rewrite", "add"):
        raise PromptFormatError(f"unknown edit op {edit.op!r} (use rewrite, add or delete)")
    if not sanitize_text(edit.text):
        raise PromptFormatError(f"{edit.describe()}: empty text")
    if edit.op == "rewrite" and edit.segment not in prompt.names:
        raise PromptFormatError(f"{edit.describe()}: no such segment (have {prompt.names})")
    if edit.op == "add" and edit.segment in prompt.names:
        raise PromptFormatError(f"{edit.describe()}: segment already exists")
    return ps.replace_module(edit.module, prompt.with_segment(edit.segment, sanitize_text(edit.text), after=edit.after))


# -- diff ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentDiff:
    module: str
    segment: str
    kind: Literal["added", "removed", "changed"]
    old: str
    new: str

    def unified(self) -> str:
        return "\n".join(
            difflib.unified_diff(
                self.old.splitlines(),
                self.new.splitlines(),
                fromfile=f"a/{self.module}/{self.segment}",
                tofile=f"b/{self.module}/{self.segment}",
                lineterm="",
            )
        )


def diff_prompts(a: PromptSet, b: PromptSet) -> list[SegmentDiff]:
    """Segment-level differences from ``a`` to ``b`` (module order of b, then modules only in a)."""
    out: list[SegmentDiff] = []
    da, db = a.as_dict(), b.as_dict()
    for m in list(db) + [m for m in da if m not in db]:
        pa, pb = da.get(m, Prompt()), db.get(m, Prompt())
        for s in pb.segments:
            old = pa.get(s.name)
            if old is None:
                out.append(SegmentDiff(m, s.name, "added", "", s.text))
            elif old != s.text:
                out.append(SegmentDiff(m, s.name, "changed", old, s.text))
        for s in pa.segments:
            if pb.get(s.name) is None:
                out.append(SegmentDiff(m, s.name, "removed", s.text, ""))
    return out
