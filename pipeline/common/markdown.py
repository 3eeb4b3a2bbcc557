"""Plain-text helpers on Markdown source (no parsing library, no state), and the one fence scanner.

The fence scanner (:func:`fence_open`, :func:`fence_closes`, :func:`split_code`, :func:`code_lines`,
:func:`outside_fences`, :func:`replace_code`) is the only place that decides which lines are fenced code; normalize,
the llms.txt and HTML fetches, the chunker, language detection, inline tags and snippets all use it. It follows
CommonMark's fence rules line by line:

- a fence opens with 3+ backticks or 3+ tildes, after optional indentation and optional ``>`` blockquote markers;
  a backtick fence's info string may not contain a backtick (then the line is inline code, not a fence);
- it closes with a line of the same character, at least as long as the opening, with nothing after it but
  whitespace (also behind ``>`` markers); a line like ````` ```python ````` inside a block is content, not a close;
- an unclosed fence runs to the end of the text.

One deliberate difference from CommonMark: indentation is not limited to three spaces, because the scanner does not
track list items (a fence indented under a list item is a fence there); a four-space-indented fence at the top level,
which CommonMark reads as indented code, is code either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

#: an opening fence line: indentation, blockquote markers, 3+ backticks or tildes, the info string
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?:>[ \t]?)*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
#: blockquote markers (and indentation) at the start of a line
QUOTE_PREFIX = re.compile(r"^[ \t]*(?:>[ \t]?)+")
#: a GFM table's delimiter row (``| --- | :---: |``) once its blockquote markers (:data:`QUOTE_PREFIX`) are gone;
#: a line without ``|`` that matches is a setext underline or a thematic break, no table row
TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")

# inline links and embeds, for what shows a note's text plainly (search snippets and headings, capture titles)
#: an image ``![alt](url)``
IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
#: an Obsidian embed ``![[target]]``
EMBED = re.compile(r"!\[\[[^\]\n]*\]\]")
#: a link ``[text](url)``, its text group 1 (a URL may hold one level of parentheses)
LINK = re.compile(r"\[([^\]\n]+)\]\((?:[^()\n]|\([^)\n]*\))*\)")
#: a wikilink's alias (the text after ``|``): it may hold single brackets (``[[b|the [RFC] text]]``, as normalize
#: writes ``[the [RFC] text](b.md)``), not ``[[`` or ``]]``, nor a line break
WIKILINK_ALIAS = r"(?:[^\[\]\n]|\[(?!\[)|\](?!\]))*"
#: a wikilink ``[[target#heading|alias]]``: target group 1, alias group 2 (``\|``: the alias pipe in a table row)
WIKILINK = re.compile(rf"\[\[([^\]|\n]+?)(?:\\?\|({WIKILINK_ALIAS}))?\]\]")


def shortest_named(by_key: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The path an Obsidian link's note name names: ``by_key`` maps each path's key (NFC, case-folded) to the path,
    ``names`` are the keys of the name to try in order (``name``, ``name.md``). A path whose key is one of them,
    else the shortest path (then the first in order) whose key ends in ``/<name>``, as Obsidian breaks the tie;
    None when none does."""
    for name in names:
        if name in by_key:
            return by_key[name]
    ends = tuple(f"/{name}" for name in names)
    hits = [path for key, path in by_key.items() if key.endswith(ends)]
    return min(hits, key=lambda path: (len(path), path)) if hits else None


#: one Obsidian ``#tag`` (group 1: the tag without ``#``): letters, digits, ``_``, ``-`` or ``/``, one of them no
#: digit (``#42`` is no tag); the lookahead checks that once, so a long run of word characters is read in linear
#: time (``[\w/-]*[^\W\d][\w/-]*`` tried every split of it: an H1 of 4,000 characters took seconds)
TAG = re.compile(r"#((?=[\w/-]*[^\W\d])[\w/-]+)")
#: a :data:`TAG` in a heading's text: ``#`` at the start or after whitespace (``C#`` holds none)
HEADING_TAG = re.compile(r"(?<!\S)" + TAG.pattern)


def without_heading_tags(heading: str) -> str:
    """``heading`` without the run of ``#tags`` (:data:`TAG`, each after whitespace or at the start) that ends it, as
    Obsidian shows them: tags, not words of the heading (``Home #project #todo`` -> ``Home``; ``Learn C#``,
    ``Issue #42`` and ``The #hashtag trend`` stay); ``""`` when the heading is only tags. Linear in its length: the
    last word is dropped while it is a tag."""
    end = len(heading.rstrip())
    while end:
        start = end
        while start and not heading[start - 1].isspace():
            start -= 1
        if not TAG.fullmatch(heading, start, end):
            break
        end = start
        while end and heading[end - 1].isspace():
            end -= 1
    return heading[:end].strip()


def heading_tags(heading: str) -> list[str]:
    """The ``#tags`` in a heading's text (:data:`HEADING_TAG`), without ``#``, in order (``Home #project #todo`` ->
    ``["project", "todo"]``; ``Learn C#`` and ``Issue #42`` hold none): Obsidian indexes a tag in a heading as a tag
    of the note, also in the H1 that is the note's title, which no chunk's heading or text keeps."""
    return HEADING_TAG.findall(heading)


def wikilink_text(m: re.Match[str]) -> str:
    """What a :data:`WIKILINK` match reads as: its alias, else its note's name (``[[Note#Part]]`` -> ``Note``),
    else its target (``[[#Part]]`` -> ``#Part``)."""
    return (m.group(2) or m.group(1).split("#")[0] or m.group(1)).replace("\\|", "|").strip()


def split_tag_list(value: str) -> list[str]:
    """A tags string as Obsidian reads it (``tags: project/alpha, urgent``, a ``--tag`` given as a list): its tags,
    split at commas and whitespace, empty parts dropped (a tag holds neither)."""
    return [part for part in re.split(r"[,\s]+", value) if part]


def heading_slug(text: str) -> str:
    """GitHub/kramdown-style slug of a heading's text: HTML tags dropped, lower-case, punctuation dropped, spaces
    -> ``-`` (unicode letters kept): ``Install on Windows`` -> ``install-on-windows``."""
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def dedent(text: str) -> str:
    """Remove the common leading whitespace of the non-blank lines (tabs count as 4 spaces)."""
    lines = text.split("\n")
    lines = [ln.replace("\t", "    ") if ln[:1] == "\t" else ln for ln in lines]
    indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()]
    cut = min(indents) if indents else 0
    return "\n".join(ln[cut:] if ln.strip() else "" for ln in lines)


def fence_open(line: str) -> tuple[str, int] | None:
    """``(fence character, length)`` when ``line`` (without its newline) opens a fenced code block, else None."""
    m = FENCE.match(line)
    if not m:
        return None
    fence = m.group("fence")
    if fence[0] == "`" and "`" in m.group("info"):
        return None
    return fence[0], len(fence)


def fence_closes(line: str, char: str, length: int) -> bool:
    """Whether ``line`` (without its newline) closes a block opened by ``char`` x ``length``."""
    s = line.strip()
    while s.startswith(">"):
        s = s[1:].lstrip()
    return len(s) >= length and set(s) == {char}


def code_lines(lines: Iterable[str]) -> Iterator[tuple[bool, str]]:
    """``(is_code, line)`` for every line: fence lines and the lines between them are code. Lines may keep their
    newline (it is ignored when matching)."""
    opened: tuple[str, int] | None = None
    for line in lines:
        bare = line.rstrip("\r\n")
        if opened is not None:
            if fence_closes(bare, *opened):
                opened = None
            yield True, line
            continue
        opened = fence_open(bare)
        yield opened is not None, line


def outside_fences(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """``(index, line)`` of the lines outside fenced code blocks; fence lines themselves are not yielded."""
    for n, (is_code, line) in enumerate(code_lines(lines)):
        if not is_code:
            yield n, line


def split_code(text: str) -> list[tuple[bool, str]]:
    """Split text into ``(is_fenced_code, piece)`` pieces of whole lines; ``"".join`` gives back the text. Each
    fenced block (opening line to closing line) is one piece; the prose between two blocks is one piece."""
    pieces: list[tuple[bool, str]] = []
    opened: tuple[str, int] | None = None
    buf: list[str] = []
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if opened is not None:
            buf.append(line)
            if fence_closes(bare, *opened):
                pieces.append((True, "".join(buf)))
                buf, opened = [], None
            continue
        opened = fence_open(bare)
        if opened is not None and buf:
            pieces.append((False, "".join(buf)))
            buf = []
        buf.append(line)
    if buf:
        pieces.append((opened is not None, "".join(buf)))
    return pieces


def fenced_content(block: str) -> str:
    """The code inside one fenced block of :func:`split_code` (opening and closing fence lines dropped; for a fence
    inside a blockquote, the ``>`` markers of its lines dropped too)."""
    lines = block.splitlines(keepends=True)
    opened = fence_open(lines[0].rstrip("\r\n"))
    inner = lines[1:]
    if opened is not None and len(inner) > 0 and fence_closes(inner[-1].rstrip("\r\n"), *opened):
        inner = inner[:-1]
    if QUOTE_PREFIX.match(lines[0]):
        inner = [QUOTE_PREFIX.sub("", ln) for ln in inner]
    return "".join(inner)


def replace_code(text: str, fn: Callable[[str], str]) -> str:
    """``text`` with each fenced block replaced by ``fn(code inside it)`` (:func:`fenced_content`); the newline
    that ends a block's closing line is kept."""
    out: list[str] = []
    for is_code, piece in split_code(text):
        if is_code:
            end = "\n" if piece.endswith("\n") else ""
            piece = fn(fenced_content(piece)) + end
        out.append(piece)
    return "".join(out)


# ---- Obsidian Excalidraw drawings (``Drawing 2026-12-08.excalidraw.md``) ----------------------------------------
#: the frontmatter key the Excalidraw plugin writes into every drawing it saves as Markdown
EXCALIDRAW_KEY = "excalidraw-plugin"
#: the plugin's banner line, the same in every drawing (``==⚠  Switch to EXCALIDRAW VIEW in the MORE OPTIONS …``)
_EXCALIDRAW_BANNER = re.compile(r"^==⚠[ \t]*Switch to EXCALIDRAW VIEW\b[^\n]*\n?", re.MULTILINE)
#: the drawing's scene: a ``# Drawing`` (1.x) or ``## Drawing`` (2.x) heading, usually after a ``%%`` line, then one
#: fenced block (``json``, or base64 ``compressed-json``), then the ``%%`` that closes the comment
_EXCALIDRAW_SCENE = re.compile(
    r"^(?:%%[ \t]*\n)?#{1,6}[ \t]+Drawing[ \t]*\n[ \t]*(?P<fence>`{3,}|~{3,})[^\n]*\n.*?^[ \t]*(?P=fence)[ \t]*$\n?"
    r"(?:[ \t\n]*^%%[ \t]*$\n?)?",
    re.MULTILINE | re.DOTALL)


def is_excalidraw(frontmatter: Mapping[str, object]) -> bool:
    """True for a drawing of Obsidian's Excalidraw plugin: its frontmatter has ``excalidraw-plugin`` (any value:
    the plugin writes ``parsed`` or ``raw``)."""
    return EXCALIDRAW_KEY in frontmatter


def excalidraw_text(body: str) -> str:
    """A drawing's readable text: ``body`` (a drawing's Markdown) without the plugin's banner line and without the
    scene (the ``Drawing`` heading and its fenced ``json``/``compressed-json`` block, with the ``%%`` lines of the
    comment around it), which are the same words in every drawing or base64; the ``Text Elements``, ``Element
    Links`` and ``Embedded Files`` sections stay. A scene whose fence is never closed is left as it is."""
    return _EXCALIDRAW_SCENE.sub("", _EXCALIDRAW_BANNER.sub("", body))
