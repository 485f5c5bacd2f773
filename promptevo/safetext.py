"""Text that an LLM (or a file) wrote, made safe where it lands: a terminal, a markdown file, a code fence.

* :func:`strip_control` - drop terminal escape sequences (CSI, OSC such as OSC-8 hidden links) and every
  other control character except newline and tab: ``cat`` of an export can no longer clear the screen;
* :func:`markdown_safe` - a markdown document with raw HTML escaped outside its code fences (``<script>``
  and ``<img onerror>`` show as text in any renderer) and no control characters anywhere;
* :func:`fence` - a code block whose backtick fence is longer than any backtick run inside it.
"""

from __future__ import annotations

import re

_ESCAPES = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL / ST
                      r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
                      r"|\x1b[@-_]?")  # any other ESC sequence (or a lone ESC)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def strip_control(text: str) -> str:
    """``text`` without escape sequences and control characters (newline and tab kept; CR dropped)."""
    return _CONTROL.sub("", _ESCAPES.sub("", str(text)))


def markdown_safe(doc: str) -> str:
    """A markdown document safe to render or ``cat``: control characters stripped everywhere, ``<`` escaped
    outside fenced code blocks (no raw HTML tag can start; inside fences markdown shows text as it is)."""
    out, closing = [], None
    for line in strip_control(doc).split("\n"):
        m = _FENCE.match(line)
        if closing is None:
            if m:
                closing = m.group(1)
                out.append(line)
            else:
                out.append(line.replace("<", "&lt;"))
        else:
            if m and m.group(1)[0] == closing[0] and len(m.group(1)) >= len(closing) and not line.strip()[len(m.group(1)):]:
                closing = None
            out.append(line)
    return "\n".join(out)


def fence(lines: list[str], lang: str = "") -> list[str]:
    """``lines`` as a fenced code block whose fence no line inside can close."""
    longest = max((len(r) for ln in lines for r in re.findall(r"`+", ln)), default=0)
    bar = "`" * max(3, longest + 1)
    return [bar + lang, *lines, bar]
