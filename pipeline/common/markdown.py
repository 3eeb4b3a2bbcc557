"""Plain-text helpers on Markdown source shared by the ingest modules (no parsing library, no state)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

#: a fence line: optional indent, then 3+ backticks or tildes
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def dedent(text: str) -> str:
    """Remove the common leading whitespace of the non-blank lines (tabs count as 4 spaces)."""
    lines = text.split("\n")
    lines = [ln.replace("\t", "    ") if ln[:1] == "\t" else ln for ln in lines]
    indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()]
    cut = min(indents) if indents else 0
    return "\n".join(ln[cut:] if ln.strip() else "" for ln in lines)


def outside_fences(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """``(index, line)`` of the lines outside fenced code blocks; fence lines themselves are not yielded.

    A fence opens with a line of 3+ backticks or tildes (after optional whitespace, :data:`FENCE`) and closes with
    a line of the same character at least as long; an unclosed fence runs to the end.
    """
    in_fence: str | None = None
    for n, line in enumerate(lines):
        m = FENCE.match(line)
        if in_fence:
            if m and m.group(1)[0] == in_fence[0] and len(m.group(1)) >= len(in_fence):
                in_fence = None
            continue
        if m:
            in_fence = m.group(1)
            continue
        yield n, line
