"""Normalize stage: fetched files -> Notes (frontmatter + Obsidian-flavoured Markdown body).

Pure functions over text; the only I/O is reading the fetched files. Per file:

1. decode (UTF-8, BOM dropped, CRLF -> LF) and split the YAML frontmatter (``pipeline.common.frontmatter``);
2. pick the format (``source.format`` or :func:`guess_format`) and clean the body for it
   (mdx components -> callouts/headings/links, Jekyll Liquid tags, doc-builder directives — see the ``_mdx``,
   ``_jekyll`` and ``_docbuilder`` helpers); Obsidian notes are kept as they are;
3. turn internal Markdown links into wikilinks ``[[<source>/<rel_path without .md>#Heading|text]]`` when they resolve
   to another file of the same source (non-obsidian formats only);
4. build the frontmatter (page keys + ``title``, ``source``, ``source_path``, ``url``, ``content_hash``,
   ``fetched_at``).

Nothing inside fenced code blocks (``` or ~~~ of any length) or inline code spans is ever rewritten: code is split off
first (:func:`pipeline.common.markdown.split_code`, the one fence scanner) and only the prose in between is transformed.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import logging
import posixpath
import re
import stat
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple
from urllib.parse import unquote, urljoin, urlsplit

from markdown_it import MarkdownIt

from pipeline.common.errors import NoteError
from pipeline.common.frontmatter import (
    INDEX_KEY,
    canonical_body,
    decode_bytes,
    kept_originals,
    split_frontmatter,
)
from pipeline.common.markdown import (
    QUOTE_PREFIX,
    TABLE_DELIMITER,
    heading_slug,
    is_excalidraw,
    split_code,
    without_heading_tags,
)
from pipeline.common.markdown import dedent as _dedent
from pipeline.config import Settings
from pipeline.ingest.fetch.base import is_lfs_pointer, lfs_pointer_reason
from pipeline.models import DocFormat, Note, RawFile, Source, text_hash

log = logging.getLogger(__name__)

MARKDOWN_EXTS = (".md", ".mdx", ".markdown", ".html", ".htm", ".txt")
OWN_KEYS = ("title", "source", "source_path", "url", "content_hash", "fetched_at", INDEX_KEY)


class DanglingLink(NamedTuple):
    """An internal link (relative, site-absolute or to the source's ``site_url`` host) whose page is not in the
    source: it stays a Markdown link (to the site when the URL is known) and is reported."""

    source_path: str       # the linking page
    target: str            # the link target as written
    url: str | None        # what the link was rewritten to (None: kept as written)


class NormalizeResult(NamedTuple):
    """Notes of one source (sorted by source_path), one error line per skipped file, and the dangling internal
    links (sorted by source_path, then order of appearance)."""

    notes: list[Note]
    errors: list[str]      # "source 'x': path: reason"
    dangling: tuple[DanglingLink, ...] = ()
    #: source paths of files that are no note by design, not by failure: a built site's redirect stubs and 404 page
    left_out: tuple[str, ...] = ()


# =====================================================================================================================
# Code protection: fences and inline code
# =====================================================================================================================

_BACKTICKS = re.compile(r"`+")


def _inline_code_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each inline code span of ``text`` (CommonMark pairing of equal backtick runs, an escaped
    opening run skipped, never across a blank line)."""
    found: list[tuple[int, int]] = []
    i = 0
    while True:
        m = _BACKTICKS.search(text, i)
        if not m:
            break
        if m.start() > 0 and text[m.start() - 1] == "\\":
            i = m.end()
            continue
        n = len(m.group())
        j = m.end()
        end = None
        while True:
            m2 = _BACKTICKS.search(text, j)
            if not m2:
                break
            if "\n\n" in text[m.end():m2.start()]:
                break
            if len(m2.group()) == n:
                end = m2.end()
                break
            j = m2.end()
        if end is None:
            i = m.end()
            continue
        found.append((m.start(), end))
        i = end
    return found


def _protect_inline_code(text: str) -> tuple[str, list[str]]:
    """Replace inline code spans by ``\\x00<n>\\x00`` placeholders (:func:`_inline_code_spans`)."""
    spans: list[str] = []
    out: list[str] = []
    pos = 0
    for start, end in _inline_code_spans(text):
        out.append(text[pos:start])
        out.append(f"\x00{len(spans)}\x00")
        spans.append(text[start:end])
        pos = end
    out.append(text[pos:])
    return "".join(out), spans


_PLACEHOLDER = re.compile(r"\x00(\d+)\x00")


def _restore_inline_code(text: str, spans: list[str]) -> str:
    return _PLACEHOLDER.sub(lambda m: spans[int(m.group(1))], text)


def map_prose(text: str, fn: Callable[[str], str]) -> str:
    """Apply ``fn`` to the prose of ``text`` only: fenced code and inline code spans are passed through verbatim.

    ``fn`` sees inline code as ``\\x00<n>\\x00`` placeholders and must keep them.
    """
    out: list[str] = []
    for is_code, chunk in split_code(text):
        if is_code:
            out.append(chunk)
            continue
        protected, spans = _protect_inline_code(chunk)
        out.append(_restore_inline_code(fn(protected), spans))
    return "".join(out)


def _tidy(text: str) -> str:
    """Collapse runs of blank lines outside code to one; no leading/trailing blank lines; one final newline."""
    out = []
    for is_code, chunk in split_code(text):
        if not is_code:
            chunk = re.sub(r"\n(?:[ \t]*\n){2,}", "\n\n", chunk)
            if out:
                chunk = re.sub(r"\A(?:[ \t]*\n){2,}", "\n", chunk)
        out.append(chunk)
    return canonical_body("".join(out))


# =====================================================================================================================
# Headings
# =====================================================================================================================

_COMMONMARK = MarkdownIt("commonmark")
#: an ATX heading; its optional closing ``#``s follow a space or tab (CommonMark): ``# Learn C#`` is ``Learn C#``
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*$")
_ANCHOR_JSX = re.compile(r"\s*\{/\*\s*(.*?)\s*\*/\}\s*$")
_ANCHOR_ID = re.compile(r"\s*\{#([^}\s]+)\}\s*$")
#: a title that is only template placeholders (an Obsidian templates folder's ``# {{title}}``, ``{{date:YYYY-MM-DD}}``,
#: Templater's ``<% tp.file.title %>``): it names no note, so the note is titled by its file name
_PLACEHOLDER_TITLE = re.compile(r"(?:\s*(?:\{\{[^{}]*\}\}|<%.*?%>))+\s*")
_ANCHOR_DOCBUILDER = re.compile(r"\s*\[\[([\w.-]+)\]\]\s*$")


def slugify(text: str) -> str:
    """GitHub/kramdown-style heading slug: lower-case, punctuation dropped, spaces -> '-' (unicode letters kept)."""
    return heading_slug(_PLACEHOLDER.sub("", text))


def _heading_display(text: str) -> str:
    """Heading text as used in a ``[[note#Heading]]`` link: HTML/JSX tags dropped (the note's heading loses them
    too, see :mod:`pipeline.ingest.htmlblocks`), characters Obsidian cannot link replaced."""
    text = re.sub(r"</?[A-Za-z][\w.:-]*(?:\s[^<>\n]*)?/?>", "", text)
    text = re.sub(r"[\[\]|#^]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def _setext_headings(prose: str) -> dict[int, str]:
    """Line index (0-based, in ``prose``) -> text of each setext heading (``Title`` over a ``---``/``===`` line),
    as markdown-it-py (CommonMark) reads them: a ``---`` after a paragraph underlines it, one after a blank line or
    a thematic break is a rule, so ``---\nTitle\n-----`` is a rule and then the heading ``Title``."""
    if "-" not in prose and "=" not in prose:
        return {}
    tokens = _COMMONMARK.parse(prose)
    return {tok.map[0]: " ".join(tokens[i + 1].content.split())
            for i, tok in enumerate(tokens)
            if tok.type == "heading_open" and tok.markup in ("-", "=") and tok.map is not None}


def collect_headings(body: str) -> dict[str, str]:
    """Map slug / explicit anchor id -> heading text for the headings of a body (outside fences): ATX headings
    (``## Title``, read line by line, so an indented one inside an MDX component counts) and setext headings
    (:func:`_setext_headings`).

    Explicit ids (``{/*id*/}``, ``{#id}``, ``[[id]]``) and the GitHub-style slug of the heading text both map to the
    heading text without the anchor. A slug taken by an earlier heading gets ``-1``, ``-2``… as GitHub, kramdown and
    Docusaurus number it (the second ``## Example`` is ``#example-1``; ``## NodeJS`` after ``## Node.js`` is
    ``#nodejs-1``), so every heading is in the map.
    """
    found: dict[str, str] = {}
    slugs: set[str] = set()
    for is_code, chunk in split_code(body):
        if is_code:
            continue
        setext = _setext_headings(chunk)
        for n, line in enumerate(chunk.split("\n")):
            m = _ATX.match(line)
            if n in setext and setext[n]:
                text = setext[n]
            elif not m or not m.group(2):
                continue
            else:
                text = m.group(2)
            ids: list[str] = []
            for rx in (_ANCHOR_JSX, _ANCHOR_ID, _ANCHOR_DOCBUILDER):
                am = rx.search(text)
                if am:
                    ids.append(am.group(1))
                    text = text[:am.start()]
            display = _heading_display(text)
            slug = base = slugify(text)
            n = 0
            while slug and slug in slugs:
                n += 1
                slug = f"{base}-{n}"
            slugs.add(slug)
            for key in [*ids, slug]:
                if key and key not in found:
                    found[key] = display
    return found


def first_h1(body: str) -> str | None:
    """Text of the first ``# H1`` outside code, inline markup kept, or None."""
    for is_code, chunk in split_code(body):
        if is_code:
            continue
        for line in chunk.split("\n"):
            m = _ATX.match(line)
            if m and len(m.group(1)) == 1 and m.group(2):
                return m.group(2).strip()
    return None


def leading_h1(body: str) -> str | None:
    """The first ``# H1`` when it heads the page, else None: no code block and no other heading comes before it
    (HTML comments ignored). An H1 after a code block or a heading is a section or an example inside the page
    (Obsidian's help shows ``<h1>This is a heading 1</h1>`` after its fenced Markdown examples halfway down "Basic
    formatting syntax"), not its title; a line of text or badges before a title is common and allowed."""
    text = re.sub(r"<!--.*?-->", "", body, flags=re.S)
    for is_code, chunk in split_code(text):
        if is_code:
            return None
        for line in chunk.split("\n"):
            m = _ATX.match(line)
            if m and m.group(2):
                return m.group(2).strip() if len(m.group(1)) == 1 else None
    return None


# =====================================================================================================================
# JSX-ish components (mdx, doc-builder)
# =====================================================================================================================

CALLOUTS: dict[str, str] = {
    "note": "note", "tip": "tip", "warning": "warning", "info": "info", "check": "success", "pitfall": "warning",
    "deepdive": "example", "intro": "abstract", "callout": "note", "danger": "danger", "caution": "warning",
    "important": "important", "youwilllearn": "abstract", "recap": "summary",
}
HEADING_COMPONENTS = {"tab", "step", "accordion", "hfoption", "expandable"}
_ATTR = re.compile(r"""([A-Za-z_][\w.:-]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}))?""")
_TAG_START = re.compile(r"<(/?)([A-Za-z][\w.]*)")


@dataclass
class _Tag:
    name: str
    attrs: dict[str, str]
    self_closing: bool
    closing: bool
    end: int                      # offset just after '>' in the joined text


MAX_TAG_CHARS = 8_000
"""A JSX tag (``<Name attrs…>``) longer than this is not a tag: bounds the scan on hostile input."""


def _parse_tag(text: str, start: int) -> _Tag | None:
    """Parse a tag starting at ``text[start] == '<'`` (attributes may span lines; quotes and {braces} skipped)."""
    return _scan_tag(text, start)[0]


def _scan_tag(text: str, start: int) -> tuple[_Tag | None, int]:
    """(tag or None, offset where the scan stopped). A failed scan stops at the end of the text, a blank line or a
    ``<`` outside quotes and braces, or after :data:`MAX_TAG_CHARS`."""
    m = _TAG_START.match(text, start)
    if not m:
        return None, start + 1
    i = m.end()
    depth = 0
    quote = ""
    stop = min(len(text), start + MAX_TAG_CHARS)
    while i < stop:
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
        elif depth:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c in "\"'`":
                quote = c
        elif c in "\"'":
            quote = c
        elif c == "{":
            depth += 1
        elif c == ">":
            raw = text[m.end():i]
            self_closing = raw.rstrip().endswith("/")
            attrs: dict[str, str] = {}
            for am in _ATTR.finditer(raw.rstrip().rstrip("/")):
                value = next((g for g in am.groups()[1:] if g is not None), "true")
                attrs[am.group(1)] = value
            return _Tag(m.group(2), attrs, self_closing, m.group(1) == "/", i + 1), i + 1
        elif c == "<" or (c == "\n" and text[i + 1:i + 2] == "\n"):
            return None, i
        i += 1
    return None, i


@dataclass
class _Dialect:
    """Which tags a component pass handles and how."""

    is_component: Callable[[str], bool]
    strip_imports: bool                        # mdx: also turn JSX <img .../> into Markdown images


def _is_mdx_component(name: str) -> bool:
    return name[:1].isupper()


def _is_docbuilder_component(name: str) -> bool:
    return name.lower() in {"tip", "hfoptions", "hfoption"}


def _find_close(text: str, name: str, start: int, pieces: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(start, end) of the ``</name>`` matching an open tag whose content begins at ``start`` (fences skipped)."""
    depth = 1
    pos = start
    rx = re.compile(rf"<(/?){re.escape(name)}(?=[\s>/])")
    while True:
        m = rx.search(text, pos)
        if not m:
            return None
        inside = next((r for r in pieces if r[0] <= m.start() < r[1]), None)
        if inside:
            pos = inside[1]
            continue
        if m.group(1):
            close_end = text.find(">", m.end())
            if close_end == -1:
                return None
            depth -= 1
            if depth == 0:
                return m.start(), close_end + 1
            pos = close_end + 1
        else:
            tag = _parse_tag(text, m.start())
            if tag and not tag.self_closing:
                depth += 1
            pos = tag.end if tag else m.end()


def _code_ranges(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every fenced code block and every inline code span of the prose, in order: component
    tags inside them are code (`` `{cond && <A />}` `` stays as written)."""
    ranges = []
    pos = 0
    for is_code, chunk in split_code(text):
        if is_code:
            ranges.append((pos, pos + len(chunk)))
        else:
            ranges.extend((pos + a, pos + b) for a, b in _inline_code_spans(chunk))
        pos += len(chunk)
    return ranges


def _callout(kind: str, title: str, inner: str) -> str:
    head = f"> [!{kind}]" + (f" {title}" if title else "")
    body = [(f"> {ln}" if ln.strip() else ">") for ln in inner.strip("\n").split("\n")] if inner.strip() else []
    return "\n".join([head, *body])


def _heading(level: int, text: str) -> str:
    return f"{'#' * max(1, min(6, level))} {text.strip()}"


_HEADING_LINE = re.compile(r"^ {0,3}(#{1,6})[ \t]")


def _last_heading_level(text: str, default: int) -> int:
    level = default
    for is_code, chunk in split_code(text):
        if is_code:
            continue
        for line in chunk.split("\n"):
            m = _HEADING_LINE.match(line)
            if m:
                level = len(m.group(1))
    return level


def _render_component(tag: _Tag, inner: str, level: int) -> str:
    """Markdown for one component given its rendered inner text; ``level`` is the enclosing heading level."""
    name = tag.name.lower()
    attrs = tag.attrs
    title = attrs.get("title", "").strip()
    if name in CALLOUTS:
        kind = CALLOUTS[name]
        if name == "tip" and attrs.get("warning") in ("true", "{true}"):
            kind = "warning"
        return _callout(kind, title, inner)
    if name in HEADING_COMPONENTS:
        label = title or attrs.get("id", "") or attrs.get("name", "")
        return f"{_heading(level + 1, label)}\n\n{inner}" if label else inner
    if name == "card":
        href = attrs.get("href", "")
        if title and href:
            head = f"[{title}]({href})"
        elif title:
            head = f"**{title}**"
        else:
            head = ""
        return f"{head}\n\n{inner}" if head else inner
    if name in ("responsefield", "paramfield"):
        label = attrs.get("name") or attrs.get("path") or attrs.get("query") or attrs.get("body") or ""
        extra = ", ".join(x for x in (attrs.get("type", ""), "required" if "required" in attrs else "") if x)
        head = f"- `{label}`" + (f" ({extra})" if extra else "") if label else ""
        body = "\n".join(f"  {ln}" if ln.strip() else "" for ln in inner.strip("\n").split("\n")) if inner.strip() else ""
        return f"{head}\n{body}".rstrip() if head else inner
    if name in ("tree.folder", "tree.file"):
        label = attrs.get("name", "")
        line = f"- {label}{'/' if name == 'tree.folder' else ''}"
        body = "\n".join(f"  {ln}" if ln.strip() else "" for ln in inner.strip("\n").split("\n")) if inner.strip() else ""
        return f"{line}\n{body}".rstrip()
    return inner


def _render_self_closing(tag: _Tag) -> str:
    name = tag.name.lower()
    if name == "card":
        return _render_component(tag, "", 0)
    if name in ("tree.file", "tree.folder"):
        return _render_component(tag, "", 0)
    if name == "img" and tag.attrs.get("src"):
        return f"![{tag.attrs.get('alt', '')}]({tag.attrs['src']})"
    return ""


_IMPORT_END = re.compile(r"""\bfrom\s*['"][^'"]*['"]\s*;?\s*$|^import\s*['"][^'"]*['"]\s*;?\s*$""")


def _strip_imports(lines: list[str]) -> list[str]:
    """Drop top-level ``import …`` / ``export …`` statements (multi-line ones too)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^import\s", line) and not line.startswith("import\x00"):
            while i < len(lines) and not _IMPORT_END.search(lines[i]) and lines[i].strip():
                i += 1
            i += 1
            continue
        if re.match(r"^export\s", line):
            depth = 0
            while i < len(lines):
                depth += lines[i].count("{") + lines[i].count("(") + lines[i].count("[")
                depth -= lines[i].count("}") + lines[i].count(")") + lines[i].count("]")
                i += 1
                if depth <= 0:
                    break
            continue
        out.append(line)
        i += 1
    return out


def render_components(text: str, dialect: _Dialect, level: int = 1) -> str:
    """Replace component tags outside code by Markdown (recursive; inner text dedented).

    ``level`` is the level of the heading enclosing ``text``; headings made for tabs/steps/accordions are one deeper
    than the last real heading above them.

    Long: one recursive rewrite: each component kind is a branch over the same match state and recursion.
    """
    out: list[str] = []
    pos = 0
    current = level
    ranges = _code_ranges(text)
    rx = re.compile(r"<(/?)([A-Za-z][\w.]*)")
    while True:
        m = rx.search(text, pos)
        if not m:
            break
        inside = next((r for r in ranges if r[0] <= m.start() < r[1]), None)
        if inside:
            out.append(text[pos:inside[1]])
            current = _last_heading_level(text[pos:inside[1]], current)
            pos = inside[1]
            continue
        name = m.group(2)
        before_char = text[m.start() - 1] if m.start() else "\n"
        if not dialect.is_component(name) and not (
            name == "img" and dialect.strip_imports  # mdx <img ... /> with JSX attributes
        ):
            out.append(text[pos:m.end()])
            pos = m.end()
            continue
        if (before_char.isascii() and before_char.isalpha()) or before_char in "`\\_":     # List<T>, not 2<MathI>
            out.append(text[pos:m.end()])
            pos = m.end()
            continue
        tag, stop = _scan_tag(text, m.start())
        if tag is None:
            # a long failed scan (unbalanced quote or brace): its span is text, so hostile input stays linear
            end = stop if stop - m.start() > 1000 else m.end()
            out.append(text[pos:end])
            pos = end
            continue
        prefix = text[pos:m.start()]
        out.append(prefix)
        current = _last_heading_level(prefix, current)
        if name == "img":
            out.append(_render_self_closing(tag) if tag.self_closing else text[m.start():tag.end])
            pos = tag.end
            continue
        if tag.closing:
            pos = tag.end                       # stray closing tag: drop it
            continue
        if tag.self_closing:
            out.append(_render_self_closing(tag))
            pos = tag.end
            continue
        close = _find_close(text, tag.name, tag.end, ranges)
        if close is None:
            pos = tag.end                       # unclosed: drop the opening tag, keep what follows
            continue
        inner_raw = text[tag.end:close[0]]
        block = "\n" in inner_raw
        if block:
            inner = render_components(_dedent(inner_raw).strip("\n"), dialect, current + 1
                                      if tag.name.lower() in HEADING_COMPONENTS else current)
            rendered = _render_component(tag, inner, current)
            start_of_line = not prefix or prefix.endswith("\n") or not prefix.split("\n")[-1].strip()
            if start_of_line and prefix.split("\n")[-1]:
                out[-1] = prefix[: len(prefix) - len(prefix.split("\n")[-1])]
            out.append(f"\n{rendered}\n\n")
        else:
            inner = render_components(inner_raw, dialect, current)
            if tag.name.lower() in CALLOUTS and (not prefix or prefix.endswith("\n")):
                out.append(_render_component(tag, inner.strip(), current) + "\n")
            else:
                out.append(inner)
        pos = close[1]
        if pos < len(text) and text[pos] == "\n" and block:
            pos += 1
    out.append(text[pos:])
    return "".join(out)


# =====================================================================================================================
# Per-format cleaning
# =====================================================================================================================

def _drop_delimited(text: str, opener: str, closer: str, eat_blanks_before: bool = False) -> str:
    """Remove every ``opener … closer`` span (shortest, may span lines), like ``re.sub(opener.*?closer)`` with DOTALL
    but linear: once no closer follows, no later opener can match either."""
    out: list[str] = []
    pos = 0
    while True:
        i = text.find(opener, pos)
        if i < 0:
            break
        j = text.find(closer, i + len(opener))
        if j < 0:
            break
        before = text[pos:i]
        out.append(before.rstrip(" \t") if eat_blanks_before else before)
        pos = j + len(closer)
    out.append(text[pos:])
    return "".join(out)


def _drop_jsx_comments(text: str) -> str:
    return _drop_delimited(text, "{/*", "*/}", eat_blanks_before=True)
_HEADING_ID = re.compile(r"^( {0,3}#{1,6}[ \t].*?)[ \t]*\{#[^}\s]+\}[ \t]*$", re.MULTILINE)


def _mdx(body: str) -> str:
    # 1. imports/exports at top level (outside fences, column 0)
    parts = []
    for is_code, chunk in split_code(body):
        if is_code or not re.search(r"^(?:import|export)\s", chunk, re.MULTILINE):
            parts.append(chunk)
        else:
            kept = "\n".join(_strip_imports(chunk.split("\n")))
            if chunk.endswith("\n") and not kept.endswith("\n"):
                kept += "\n"                   # a fence after the chunk must stay at the start of a line
            parts.append(kept)
    body = "".join(parts)
    # 2. JSX comments and heading ids (prose only)
    body = map_prose(body, lambda t: _HEADING_ID.sub(r"\1", _drop_jsx_comments(t)))
    # 3. components
    body = render_components(body, _Dialect(_is_mdx_component, True), 1)
    # 4. lines made of nothing but a JSX expression like {' '}
    body = map_prose(body, lambda t: re.sub(r"^[ \t]*\{['\"][ \t]*['\"]\}[ \t]*$", "", t, flags=re.MULTILINE))
    return body


_LIQUID_LINK = re.compile(r"\{%-?\s*link\s+(\S+?)\s*-?%\}")
_LIQUID_POST = re.compile(r"\{%-?\s*post_url\s+(\d{4})-(\d{2})-(\d{2})-(\S+?)\s*-?%\}")
_LIQUID_VAR = re.compile(r"\{\{-?\s*(?:site|page|layout|include)\.[\w.]+(?:\s*\|[^}\n]{0,500})?\s*-?\}\}")
_KRAMDOWN_LINE = re.compile(r"^[ \t]*\{:(?:\s*[.#][^}]*|\s*[\w-]+=[^}]*|:[^}]*|\s*toc\s*)\}[ \t]*\n?", re.MULTILINE)
_KRAMDOWN_SPAN = re.compile(r"\{:\s*[.#][\w.# -]*\}|\{:\s*[\w-]+=\"[^\"]*\"[^}]*\}")
_JEKYLL_CALLOUT = re.compile(r"^> (Warning|Tip|Note|Bestpractice|Deprecated|Important|Caution) (?=\S)", re.MULTILINE)
_JEKYLL_KINDS = {"Warning": ("warning", ""), "Tip": ("tip", ""), "Note": ("note", ""),
                 "Bestpractice": ("tip", "Best practice"), "Deprecated": ("warning", "Deprecated"),
                 "Important": ("important", ""), "Caution": ("warning", "")}


_HTML_ANCHOR = re.compile(r"""<a\s+href=(?:"([^"\n<>]*)"|'([^'\n<>]*)')[^>\n]{0,200}>([^\n]{0,500}?)</a>""",
                          re.IGNORECASE)


def _anchor_to_markdown(m: re.Match[str]) -> str:
    """``<a href="x">text</a>`` -> ``[text](x)`` (inner tags dropped), so site links in HTML become wikilinks too."""
    href = m.group(1) if m.group(1) is not None else m.group(2)
    text = re.sub(r"<[^>]*>", "", m.group(3)).replace("[", "(").replace("]", ")").strip()
    if not href or any(c in href for c in " ()"):
        return m.group(0)
    return f"[{text}]({href})"


_PRE_SPLIT = re.compile(r"(<pre\b.*?</pre>)", re.DOTALL | re.IGNORECASE)
_SITE_VAR = re.compile(r"\{\{-?\s*site\.([\w.]+)(?:\s*\|[^}\n]{0,500})?\s*-?\}\}")


def _site_value(site: dict[str, Any] | None, dotted: str) -> str | None:
    """``site.a.b`` from the source's ``_config.yml`` as text (scalars only), None when absent."""
    value: Any = site or {}
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def site_config(files: Sequence[RawFile]) -> dict[str, Any]:
    """The Jekyll ``_config.yml`` at the root of a source's tree (the folder a file's ``source_path`` is relative
    to: a git checkout's root, a local folder), as a dict; {} when there is none or it does not parse."""
    import yaml

    for f in files[:1]:
        depth = len(PurePosixPath(f.source_path).parts)
        root = f.path.parents[depth - 1] if depth >= 1 and len(f.path.parents) >= depth else None
        if root is None:
            continue
        try:
            data = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}
    return {}


def _jekyll(body: str, frontmatter: dict[str, Any], site: dict[str, Any] | None = None) -> str:
    """Jekyll Markdown -> Markdown: ``{% link %}``/``{% post_url %}`` to paths, other Liquid tags dropped,
    ``{{ page.title }}`` and ``{{ site.x }}`` (from ``site``, the source's ``_config.yml``) resolved, other Liquid
    variables removed, kramdown attribute lists dropped, ``> Note …`` blockquotes to callouts."""
    title = str(frontmatter.get("title", "")) if frontmatter.get("title") is not None else ""

    def fix(text: str) -> str:
        text = _LIQUID_LINK.sub(lambda m: "/" + m.group(1).lstrip("/"), text)
        text = "".join(part if part.lower().startswith("<pre") else _HTML_ANCHOR.sub(_anchor_to_markdown, part)
                       for part in _PRE_SPLIT.split(text))     # links inside highlighted code stay code
        text = _LIQUID_POST.sub(lambda m: f"/{m.group(1)}/{m.group(2)}/{m.group(3)}/{m.group(4)}.html", text)
        text = re.sub(r"^[ \t]*\{%-?.*?-?%\}[ \t]*\n", "", text, flags=re.MULTILINE)
        text = _drop_delimited(text, "{%", "%}")
        text = re.sub(r"\{\{-?\s*page\.title\s*-?\}\}", lambda m: title, text)
        text = _SITE_VAR.sub(lambda m: _site_value(site, m.group(1)) or m.group(), text)
        text = _LIQUID_VAR.sub("", text)
        text = _drop_delimited(text, "{{", "}}")
        text = _KRAMDOWN_LINE.sub("", text)
        text = _KRAMDOWN_SPAN.sub("", text)
        text = _HEADING_ID.sub(r"\1", text)

        def callout(m: re.Match[str]) -> str:
            kind, label = _JEKYLL_KINDS[m.group(1)]
            return f"> [!{kind}]" + (f" {label}" if label else "") + "\n> "

        return _JEKYLL_CALLOUT.sub(callout, text)

    return map_prose(body, fix)


_COPYRIGHT = re.compile(r"\A\s*<!--\s*Copyright.*?-->\s*", re.DOTALL | re.IGNORECASE)
_AUTODOC = re.compile(r"^[ \t]*\[\[autodoc\]\][ \t]+(\S+)[ \t]*\n((?:[ \t]+-[ \t]*\S.*\n?)*)", re.MULTILINE)
_DOCBUILDER_MARKER = re.compile(r"^[ \t]*\[\[[\w-]+\]\][ \t]*\n?", re.MULTILINE)
_DOCBUILDER_ANCHOR = re.compile(r"^( {0,3}#{1,6}[ \t].*?)[ \t]*\[\[[\w.-]+\]\][ \t]*$", re.MULTILINE)
_DOCBUILDER_XREF = re.compile(r"\[(\x00\d+\x00)\](?![(\[:])")


def _docbuilder(body: str) -> str:
    body = _COPYRIGHT.sub("", body)

    def fix(text: str) -> str:
        def autodoc(m: re.Match[str]) -> str:
            members = re.findall(r"-[ \t]*(\S+)", m.group(2))
            lines = [f"API reference: `{m.group(1)}`"]
            if members:
                lines += [""] + [f"- `{x}`" for x in members]
            return "\n".join(lines) + "\n"

        text = _AUTODOC.sub(autodoc, text)
        text = _DOCBUILDER_ANCHOR.sub(r"\1", text)
        text = _DOCBUILDER_MARKER.sub("", text)
        return text

    body = map_prose(body, fix)
    body = render_components(body, _Dialect(_is_docbuilder_component, False), 1)
    # [`~pkg.Name`] auto-references -> `Name` (inline code itself is never changed, only the brackets around it)
    out = []
    for is_code, chunk in split_code(body):
        if is_code:
            out.append(chunk)
            continue
        protected, spans = _protect_inline_code(chunk)

        def xref(m: re.Match[str], spans: list[str] = spans) -> str:
            code = spans[int(m.group(1)[1:-1])]
            if code.startswith("`~"):
                spans[int(m.group(1)[1:-1])] = "`" + code[2:-1].rsplit(".", 1)[-1] + "`"
            return m.group(1)

        protected = _DOCBUILDER_XREF.sub(xref, protected)
        out.append(_restore_inline_code(protected, spans))
    return "".join(out)


# =====================================================================================================================
# Links
# =====================================================================================================================

#: a link ``[text](target "title")``; its text may go on over single line breaks, as a paragraph's soft breaks, but
#: not into a blank line, a heading, a quote, a table row or a list item
_LINK = re.compile(
    r"(?<![!\\\]])\[(?P<text>(?:[^\[\]\n]|\n(?![ \t]*(?:\n|$|[#>|]|[-*+][ \t]|\d{1,9}[.)][ \t]))|\[[^\[\]\n]*\])*)\]"
    r"\(\s*(?P<target><[^<>\n]*>|(?:[^\s()]|\([^\s()]*\))*)(?P<title>\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)"
)


@dataclass
class _LinkIndex:
    """Resolves link targets to (source_path, rel_path) inside one source."""

    source: Source
    rel_paths: dict[str, str]                       # source_path -> rel_path
    headings: dict[str, dict[str, str]]             # source_path -> slug -> heading text
    stems: dict[str, list[str]] = field(default_factory=dict)      # link key -> source_paths
    suffixes: dict[str, list[str]] = field(default_factory=dict)   # trailing components of a key -> source_paths
    site: dict[str, list[str]] = field(default_factory=dict)       # site path key (see site_path) -> source_paths
    #: a built site's redirect stubs (no notes): stub source_path -> the source_path of the page it redirects to
    redirects: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for sp in sorted(self.rel_paths):
            for key in _stem_keys(sp):
                self.stems.setdefault(key, []).append(sp)
                parts = key.split("/")
                for i in range(1, len(parts)):
                    self.suffixes.setdefault("/".join(parts[i:]), []).append(sp)
            for key in _stem_keys(site_path(self.source, sp)):
                self.site.setdefault(key.casefold(), []).append(sp)

    def site_match(self, path: str) -> str | None:
        """Longest path-suffix match of a site-absolute URL path against the pages' site paths.

        ``path`` (e.g. ``/docs/diffusers/using-diffusers/loading``) is cut into ``head + rest`` with ``rest`` as long
        as possible such that ``rest`` is a page's site path (its path under the sparse folder, extension optional,
        ``index`` optional) and ``head`` is a leading part of the ``site_url`` path, version components
        (``main``, ``stable``, ``v1.2``, ``0.31.0``…) ignored on both sides (so ``/docs/x`` and ``/docs/preview/x``
        match a ``…/docs/stable`` site, and links into other sites on the same host do not).
        Case-insensitive; None when nothing matches.
        """
        parts = [p for p in path.strip("/").split("/") if p not in ("", ".")]
        if ".." in parts:
            return None
        base = [p.casefold() for p in urlsplit(self.source.site_url or "").path.strip("/").split("/")
                if p and not _VERSION.match(p)]
        for i in range(len(parts) + 1):
            head = [p.casefold() for p in parts[:i] if not _VERSION.match(p)]
            if head != base[: len(head)]:
                break
            rest = "/".join(parts[i:])
            for key in _stem_keys(rest):
                hits = self.site.get(key.casefold())
                if hits:
                    return hits[0]
        return None

    def exact(self, path: str) -> str | None:
        """The source path a repository path names (with or without extension, or as a folder with an index)."""
        path = path.strip("/")
        if path in self.rel_paths:
            return path
        for key in _stem_keys(path):
            hits = self.stems.get(key)
            if hits:
                return hits[0]
        return None

    def suffix(self, path: str) -> str | None:
        """Exact match, else the shortest source path whose trailing components equal ``path`` (sans extension)."""
        path = path.strip("/")
        if not path:
            return None
        direct = self.exact(path)
        if direct:
            return direct
        best = {sp for key in _stem_keys(path) for sp in self.suffixes.get(key, ())}
        return min(best, key=lambda sp: (len(sp), sp)) if best else None

    @cached_property
    def stub_index(self) -> _LinkIndex:
        """The redirect stubs as pages (each at the vault path of the page it redirects to): a link that names
        no page but a stub reaches that page."""
        return _LinkIndex(self.source, {stub: self.rel_paths[to] for stub, to in self.redirects.items()}, {})


_VERSION = re.compile(r"^(?:main|master|stable|latest|preview|nightly|next|dev|v?\d+(?:\.(?:\d+|x))*)$",
                      re.IGNORECASE)


def _stem_keys(path: str) -> list[str]:
    """Keys a path can be linked by: without a Markdown extension, and without a trailing /index or /README."""
    p = path.strip("/")
    lower = p.lower()
    for ext in MARKDOWN_EXTS:
        if lower.endswith(ext):
            p = p[: -len(ext)]
            break
    keys = [p]
    for tail in ("/index", "/readme", "/_index"):
        if p.lower().endswith(tail):
            keys.append(p[: -len(tail)])
        elif p.lower() in (tail[1:],):
            keys.append("")
    return [k for k in keys]


def _heading_of(index: _LinkIndex, sp: str, fragment: str) -> str | None:
    """The text of the heading of page ``sp`` that the anchor ``fragment`` (a slug or an explicit id, URL-encoded
    or not) names, or None."""
    return index.headings.get(sp, {}).get(fragment) or index.headings.get(sp, {}).get(unquote(fragment))


def _wikilink(index: _LinkIndex, sp: str, fragment: str, text: str, in_table: bool, own: bool = False) -> str:
    """``[[source/page#Heading|text]]`` for a link to page ``sp``; ``own``: a link inside ``sp`` itself,
    ``[[#Heading|text]]``."""
    target = "" if own else f"{index.source.name}/{index.rel_paths[sp].removesuffix('.md')}"
    if fragment and re.fullmatch(r"\^[A-Za-z0-9-]+", unquote(fragment)):
        target += "#" + unquote(fragment)               # a block reference stays one: [[note#^id]]
    elif fragment:
        heading = _heading_of(index, sp, fragment)
        target += "#" + (heading if heading else _heading_display(unquote(fragment)))
    alias = re.sub(r"\s+", " ", text).strip()
    if alias:
        alias = alias.replace("|", "-") if not in_table else alias.replace("\\|", "-").replace("|", "-")
        pipe = "\\|" if in_table else "|"
        return f"[[{target}{pipe}{alias}]]"
    return f"[[{target}]]"


def _site_origin(site_url: str | None) -> str | None:
    if not site_url:
        return None
    parts = urlsplit(site_url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


_PAGE_EXT = re.compile(r"\.(?:md|mdx|markdown|html?|txt)$|(?:^|/)[^./]*$|/$", re.IGNORECASE)


def _is_page_path(path: str) -> bool:
    """True when a link path names a page (no extension, a Markdown/HTML one, or a folder), not a file download."""
    return bool(_PAGE_EXT.search(path)) or not path


def _lookup(index: _LinkIndex, kind: str, path: str) -> str | None:
    """The source path a link's unquoted ``path`` names: ``kind`` ``relative`` (a path in the source, already
    joined to the page's folder) or ``absolute`` (a site path); None when no page matches."""
    if kind == "relative":
        return index.exact(path) if not path.startswith("../") and path != ".." else None
    resolved = index.site_match(path) if index.source.site_url else None
    return resolved if resolved is not None else index.suffix(path)


def _link_place(index: _LinkIndex, sp: str, target: str) -> tuple[str, str] | None:
    """Where a link's URL points in the source, for :func:`_lookup`: ``("absolute", site path)`` for a URL of the
    source's own site or a site-absolute one, ``("relative", path in the source)`` joined to page ``sp``'s folder
    (unquoted); None for another site."""
    parts = urlsplit(target)
    if parts.scheme or target.startswith("//"):
        origin = _site_origin(index.source.site_url)
        if not (origin and parts.scheme in ("http", "https") and f"{parts.scheme}://{parts.netloc}" == origin):
            return None
        return "absolute", unquote(parts.path)
    if target.startswith("/"):
        return "absolute", unquote(parts.path)
    return "relative", unquote(posixpath.normpath(posixpath.join(posixpath.dirname(sp), unquote(parts.path))))


def _link_target(index: _LinkIndex, sp: str, target: str) -> str | None:
    """The source path of the page a URL (absolute on the site, site-absolute or relative to page ``sp``)
    names, or None (another site, or no page)."""
    place = _link_place(index, sp, target)
    return _lookup(index, *place) if place is not None else None


def _convert_link(m: re.Match[str], index: _LinkIndex, sp: str, page_url: str | None, in_table: bool,
                  dangling: list[DanglingLink] | None = None) -> str:
    text = m.group("text")
    target = m.group("target").strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if target.startswith("#") and "![" not in text and _heading_of(index, sp, target[1:]):
        # [x](#creating-structs): Obsidian follows no slug; [[#Creating Structs|x]] reaches the heading
        return _wikilink(index, sp, target[1:], text, in_table, own=True)
    if not target or target.startswith("#") or "![" in text or "\x00" in target:
        return m.group(0)
    parts = urlsplit(target)
    fragment = parts.fragment
    origin = _site_origin(index.source.site_url)
    place = _link_place(index, sp, target)
    if place is None:
        return m.group(0)
    kind, path = place
    resolved = _lookup(index, kind, path)
    if resolved is None and index.redirects:     # a page's link to a redirect stub: the page the stub sends to
        stub = _lookup(index.stub_index, kind, path)
        resolved = index.redirects[stub] if stub is not None else None
    if resolved is not None:
        return _wikilink(index, resolved, fragment, text, in_table)
    # unresolvable internal link: point at the site when known
    new = None
    if kind == "absolute" and origin and target.startswith("/") and not target.startswith("//"):
        new = origin + target
    elif kind == "relative" and page_url:
        try:
            new = urljoin(page_url, target)
        except ValueError:
            new = None
    if dangling is not None and _is_page_path(parts.path):
        dangling.append(DanglingLink(sp, target, new))
    if new is None:
        return m.group(0)
    title = m.group("title") or ""
    return f"[{text}]({new}{title})"


def _table_rows(lines: list[str]) -> list[bool]:
    """Which lines belong to a GFM table (a header line with ``|``, a delimiter row with ``|``, the rows up to a
    blank line), also one inside a blockquote or callout (``> | a | b |``: its ``>`` markers are not part of the
    row). A ``---`` line without ``|`` under a line with one is a setext heading's underline, not a table."""
    table = [False] * len(lines)
    if not any("|" in line for line in lines):
        return table
    bare = [QUOTE_PREFIX.sub("", line, count=1) if line.lstrip().startswith(">") else line for line in lines]
    for i in range(1, len(bare)):
        if TABLE_DELIMITER.match(bare[i]) and "|" in bare[i - 1] and "-" in bare[i] and "|" in bare[i]:
            j = i - 1
            while j < len(bare) and bare[j].strip():
                table[j] = True
                j += 1
    return table


_WIKI_IN_ROW = re.compile(r"(!?\[\[)([^\[\]\n]*?)(\]\])")


def escape_table_wikilinks(body: str) -> str:
    """``[[target|alias]]`` inside a GFM table row -> ``[[target\\|alias]]`` (prose only): an unescaped pipe ends
    the cell, so Obsidian shows a broken row. Pipes already escaped stay as they are."""

    def fix(text: str) -> str:
        if "[[" not in text or "|" not in text:
            return text
        lines = text.split("\n")
        rows = _table_rows(lines)
        for i, line in enumerate(lines):
            if rows[i] and "[[" in line:
                lines[i] = _WIKI_IN_ROW.sub(lambda m: m.group(1) + re.sub(r"(?<!\\)\|", r"\\|", m.group(2))
                                            + m.group(3), line)
        return "\n".join(lines)

    return map_prose(body, fix)


def convert_links(body: str, index: _LinkIndex, sp: str, page_url: str | None,
                  dangling: list[DanglingLink] | None = None) -> str:
    """Rewrite internal Markdown links of one note (prose only) to wikilinks; ``\\|`` alias pipes in table rows.

    Internal links whose page is not in the source are appended to ``dangling`` (when given).
    """

    def fix(text: str) -> str:
        if "](" not in text:
            return text
        lines = text.split("\n")
        table = _table_rows(lines)
        starts = list(itertools.accumulate((len(line) + 1 for line in lines[:-1]), initial=0))

        def one(m: re.Match[str]) -> str:
            first = bisect.bisect_right(starts, m.start()) - 1
            rows = table[first:first + m.group().count("\n") + 1]
            if len(rows) > 1 and any(rows):
                return m.group()            # a link that would run into or out of a table row is none
            return _convert_link(m, index, sp, page_url, rows[0], dangling)

        return _LINK.sub(one, text)

    return map_prose(body, fix)


# =====================================================================================================================
# Paths, format, URL, title
# =====================================================================================================================

_ILLEGAL = re.compile(r'[*"\\<>:|?#^\[\]\x00-\x1f\x7f\u2215\u2044\u29f8\uff0f\uff3c\u2216\ufe68\u0338\u2060\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
MAX_COMPONENT_BYTES = 200
"""A vault path component (folder or file name, ``.md`` included) is at most this many UTF-8 bytes; longer ones
are cut and get an 8-hex hash of the full name so different long names stay different (file systems allow 255)."""
MAX_DEPTH = 32


def _clean_component(part: str, suffix: str = "") -> str:
    part = _ILLEGAL.sub("-", part).strip(" ").rstrip(" .")
    part = re.sub(r"^\.+", lambda m: "_" * len(m.group()), part)      # no hidden (dot) files or folders
    if not part:
        part = "_"
    if part.split(".")[0].upper() in _RESERVED:
        part = f"{part}_"
    if len((part + suffix).encode("utf-8")) > MAX_COMPONENT_BYTES:
        import hashlib

        tag = "-" + hashlib.sha1(part.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        budget = MAX_COMPONENT_BYTES - len((tag + suffix).encode("utf-8"))
        cut = part.encode("utf-8", "surrogatepass")[:budget].decode("utf-8", "ignore").rstrip(" .")
        part = cut + tag
    return part


def rel_path_for(source_path: str) -> str:
    """Vault path (inside ``vault/<source>/``) of a source path, before collision handling.

    Extension replaced by ``.md`` (``.md``/``.mdx``/``.markdown``/``.html``/``.htm``/``.txt``; other names get
    ``.md`` appended), NFC-normalized, every component made legal on Windows/macOS/Linux and for Obsidian links
    (``* " \\ < > : | ? # ^ [ ]``, control and invisible format characters and look-alikes of ``/`` and ``\\`` ->
    ``-``, trailing dots/spaces dropped, leading dots -> ``_``, ``..`` and empty -> ``_``, Windows device names get
    ``_``, components cut to :data:`MAX_COMPONENT_BYTES` with a hash, at most :data:`MAX_DEPTH` folders). The result
    is always a relative path that stays inside the source folder.
    """
    sp = unicodedata.normalize("NFC", source_path).replace("\\", "/").strip("/")
    parts = [p for p in sp.split("/") if p not in ("", ".")]
    parts = [p if p != ".." else "_" for p in parts] or ["_"]
    if len(parts) > MAX_DEPTH + 1:
        parts = parts[:MAX_DEPTH] + ["-".join(parts[MAX_DEPTH:])]
    name = parts[-1]
    lower = name.lower()
    stem = name
    for ext in MARKDOWN_EXTS:
        if lower.endswith(ext) and len(name) > len(ext):
            stem = name[: -len(ext)]
            break
    cleaned = [_clean_component(p) for p in parts[:-1]] + [_clean_component(stem, ".md")]
    return "/".join(cleaned) + ".md"


def _kept_as_is(source_path: str, rel: str) -> bool:
    """True when :func:`rel_path_for` changed nothing of ``source_path`` but its Markdown extension (and NFC)."""
    sp = unicodedata.normalize("NFC", source_path).replace("\\", "/").strip("/")
    lower = sp.lower()
    stem = next((sp[: -len(ext)] for ext in MARKDOWN_EXTS if lower.endswith(ext) and len(sp) > len(ext)), sp)
    return rel == stem + ".md"


def assign_rel_paths(source_paths: Sequence[str]) -> dict[str, str]:
    """source_path -> unique rel_path; case-insensitive collisions get `` (2)``, `` (3)``…: first the source paths
    whose name the vault keeps as it is, then those it had to change (``x#1.md`` becomes ``x-1.md`` only when no
    ``x-1.md`` exists, else ``x-1 (2).md``: the file that has the name keeps it), each in source_path order."""
    taken: set[str] = set()
    out: dict[str, str] = {}
    rels = {sp: rel_path_for(sp) for sp in set(source_paths)}
    for sp in sorted(rels, key=lambda sp: (not _kept_as_is(sp, rels[sp]), sp)):
        rel = rels[sp]
        candidate = rel
        n = 2
        while candidate.casefold() in taken:
            candidate = f"{rel[:-3]} ({n}).md"
            n += 1
        taken.add(candidate.casefold())
        out[sp] = candidate
    return out


#: at most this many renamed files are named one by one in :func:`renamed_lines` (the rest are counted)
RENAMED_LINES = 5


def renamed_lines(source: str, rel_paths: dict[str, str]) -> list[str]:
    """One warning line per source file that :func:`assign_rel_paths` renamed because its vault name clashes with
    another file's (``a#b.md`` and ``a-b.md``, or names that differ only in case): which file, its vault name, and
    the file that keeps the name; at most :data:`RENAMED_LINES`, then one line counting the rest. A renamed note's
    wikilinks by name reach the other file, so the user is told rather than left to find out."""
    keeps = {rel.casefold(): sp for sp, rel in rel_paths.items() if rel == rel_path_for(sp)}
    renamed = [(sp, rel) for sp, rel in sorted(rel_paths.items()) if rel != rel_path_for(sp)]
    lines = [f"source '{source}': {sp} is written as {rel!r}: its vault name {rel_path_for(sp)!r} is taken by "
             f"{keeps.get(rel_path_for(sp).casefold(), 'another file')} (vault names ignore case and replace "
             "characters such as #); rename one of the two to keep both names" for sp, rel in renamed[:RENAMED_LINES]]
    if len(renamed) > RENAMED_LINES:
        lines.append(f"source '{source}': {len(renamed) - RENAMED_LINES} more files renamed the same way")
    return lines


#: the characters of Obsidian's link syntax that :func:`rel_path_for` replaces with ``-``: a file whose name
#: holds one cannot be linked by its name (character -> what a link reads it as)
LINK_SYNTAX = {"#": "a heading", "^": "a block id", "|": "the start of the link's text", "[": "a bracket",
               "]": "a bracket"}


def unlinkable_lines(source: str, rel_paths: dict[str, str]) -> list[str]:
    """One warning line per source file whose name holds a character of Obsidian's link syntax
    (:data:`LINK_SYNTAX`, ``#`` above all): the vault writes it with ``-`` instead (``料理 #1.md`` as
    ``料理 -1.md``) and no ``[[…]]`` link can reach it by its name, since Obsidian reads ``[[料理 #1]]`` as
    heading ``1`` of note ``料理``. The line names the file, the vault name it got, why, and to rename the
    file; at most :data:`RENAMED_LINES`, then one line counting the rest. A folder's name does not count
    (``[[Note]]`` still reaches ``a#b/Note.md``).

    Args:
        source: the source's name.
        rel_paths: source path -> its vault path inside ``vault/<source>/`` (:func:`assign_rel_paths`).

    Returns:
        The lines, in source path order.
    """
    from pipeline.ingest.fetch.local import printable_path

    found = []
    for sp, rel in sorted(rel_paths.items()):
        name = posixpath.basename(unicodedata.normalize("NFC", sp))
        chars = [c for c in dict.fromkeys(name) if c in LINK_SYNTAX]
        if chars:
            found.append((sp, rel, name, chars))
    lines = []
    for sp, rel, name, chars in found[:RENAMED_LINES]:
        stem = next((name[: -len(ext)] for ext in MARKDOWN_EXTS if name.lower().endswith(ext)), name)
        if "#" in chars:
            before, _, after = stem.partition("#")
            how = (f"Obsidian reads [[{printable_path(stem)}]] as heading {after.strip()!r} of note "
                   f"{before.strip()!r}")
        else:
            how = "Obsidian reads " + ", ".join(f"{c!r} in a link as {LINK_SYNTAX[c]}" for c in chars)
        which = " or ".join(repr(c) for c in chars)
        lines.append(f"source '{source}': {printable_path(sp)} is written as {rel!r}: a name Obsidian can "
                     f"link cannot hold {which} ({how}), so no [[…]] link reaches this note by its name; "
                     f"rename the file without {which} to link to it")
    if len(found) > RENAMED_LINES:
        lines.append(f"source '{source}': … and {len(found) - RENAMED_LINES} more files whose name holds "
                     f"{' '.join(LINK_SYNTAX)}, renamed the same way")
    return lines


#: MDX written in a ``.md`` file (react.dev keeps its pages so): outside fenced code, a JSX comment ``{/* … */}`` or
#: a component's tag alone on its line (``<Sandpack>``, ``</Intro>``, ``<Note />``; HTML's tags are lower-case).
_MDX_IN_MD = re.compile(r"\{/\*.*?\*/\}|^[ \t]*</?[A-Z][A-Za-z0-9]*(?:[ \t][^<>\n]*)?/?>[ \t]*$", re.MULTILINE)


def guess_format(source_path: str, frontmatter: dict[str, Any], body: str) -> DocFormat:
    """``.mdx`` -> mdx; Jekyll ``layout:`` key or Liquid ``{%`` -> jekyll; ``<!--Copyright`` header or
    ``[[autodoc]]`` -> docbuilder; a ``.md`` file with MDX outside its code (:data:`_MDX_IN_MD`) -> mdx; otherwise
    markdown."""
    if source_path.lower().endswith(".mdx"):
        return "mdx"
    if "layout" in frontmatter or "{%" in body:
        return "jekyll"
    if body.lstrip().startswith("<!--Copyright") or "[[autodoc]]" in body:
        return "docbuilder"
    if ("{/*" in body or "<" in body) and any(
            not code and _MDX_IN_MD.search(piece) for code, piece in split_code(body)):
        return "mdx"
    return "markdown"


def site_path(source: Source, source_path: str) -> str:
    """A page's path on its site: the source path relative to the sparse folder (``paths``) that holds it."""
    path = source_path
    for root in sorted((p.strip("/") for p in source.paths if p and not any(c in p for c in "*?[")),
                       key=len, reverse=True):
        if root and path.startswith(root + "/"):
            return path[len(root) + 1:]
    return path


def page_url(source: Source, source_path: str) -> str | None:
    """``site_url`` + the page path without extension (relative to the sparse folder that holds it; ``…/index``
    maps to the folder URL), or None without ``site_url``."""
    if not source.site_url:
        return None
    path = site_path(source, source_path)
    key = _stem_keys(path)
    stem = key[0]
    if len(key) > 1 and stem.lower().endswith(("index", "_index")):
        stem = key[1] + "/" if key[1] else ""
    elif stem.lower() in ("index", "_index"):
        stem = ""
    return source.site_url.rstrip("/") + "/" + stem


def _title(frontmatter: dict[str, Any], body: str, source_path: str) -> str:
    """A note's title: its frontmatter ``title``, else its leading level-1 heading, else its file name without the
    extension; a title or heading that is only template placeholders (``# {{title}}`` in a templates folder) is
    none, and the ``#tags`` that end the heading are no part of it (``# Home #project`` is titled ``Home``). A ``.canvas`` file is titled by its file name without ``.canvas``, as Obsidian names it
    (``Plan.canvas`` is ``Plan``; its first card's heading is a card, not the canvas's title). So is a drawing of
    the Excalidraw plugin (``Sketch.excalidraw.md`` is ``Sketch.excalidraw``): its ``# Excalidraw Data`` (or, before
    its 2.0, ``# Text Elements``) heading is the plugin's, the same in every drawing."""
    name = source_path.rsplit("/", 1)[-1]
    if name.lower().endswith(".canvas") and len(name) > len(".canvas"):
        return name[: -len(".canvas")]
    value = frontmatter.get("title")
    if isinstance(value, (str, int, float)) and str(value).strip() and not _PLACEHOLDER_TITLE.fullmatch(str(value)):
        return str(value).strip()
    h1 = None if is_excalidraw(frontmatter) else leading_h1(body)
    if h1:
        h1 = _ANCHOR_JSX.sub("", _ANCHOR_ID.sub("", _ANCHOR_DOCBUILDER.sub("", h1))).strip()
        h1 = without_heading_tags(h1)           # `# Home #project`: the tag is Obsidian's, not the title's
        if h1 and not _PLACEHOLDER_TITLE.fullmatch(h1):
            return h1
    for ext in MARKDOWN_EXTS:
        if name.lower().endswith(ext) and len(name) > len(ext):
            return name[: -len(ext)]
    return name


def clean_body(fmt: DocFormat, body: str, frontmatter: dict[str, Any], site: dict[str, Any] | None = None) -> str:
    """Format-specific cleaning of a body (LF text), links excluded (mdx components, Jekyll Liquid with ``site``
    variables from the source's ``_config.yml``, doc-builder directives), then raw HTML -> Markdown for every
    format but ``obsidian`` (:func:`pipeline.ingest.htmlblocks.convert_html`, prose only): Obsidian renders a note's
    HTML (``<details>``, ``<iframe>``, ``<span style>``), so an Obsidian note keeps it as written."""
    from pipeline.ingest.htmlblocks import convert_html

    if fmt == "obsidian":
        return body
    if fmt == "mdx":
        body = _mdx(body)
    elif fmt == "jekyll":
        body = _jekyll(body, frontmatter, site)
    elif fmt == "docbuilder":
        body = _docbuilder(body)
    return map_prose(body, convert_html) if "<" in body else body


# =====================================================================================================================
# The stage
# =====================================================================================================================

@dataclass
class _Parsed:
    raw: RawFile
    fmt: DocFormat
    frontmatter: dict[str, Any]
    body: str
    headings: dict[str, str]       # slug / explicit anchor id -> heading text (from the uncleaned body)


MAX_FILE_BYTES = 4 * 1024 * 1024
"""Files larger than this (bytes) are skipped with an error line: no real docs page comes close, and every later
stage (link conversion, chunking, embedding) stays bounded. Decided for issue 8 (a 50 MB note is reported, not
cut, so a truncated page never silently enters the vault)."""
MAX_CANVAS_NODES = 10_000


def canvas_to_markdown(text: str, where: str) -> str:
    """Body of a note made from an Obsidian ``.canvas`` file (JSON Canvas 1.0).

    Nodes in reading order (top to bottom, then left to right): ``text`` cards give their Markdown, ``file`` cards a
    link ``[[path]]`` to the note they place (``![[file]]`` for attachments, ``#subpath`` kept), ``link`` cards their
    URL as ``<url>``, ``group`` cards their label as a ``## heading``.

    Raises:
        NoteError: not JSON, or not a JSON Canvas object (``{"nodes": [...]}``).
    """
    import json

    try:
        data = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise NoteError(f"{where}: not a valid .canvas file (JSON: {exc}); fix or exclude it") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes", []), list):
        raise NoteError(f"{where}: not a JSON Canvas file (expected an object with a 'nodes' list)")
    nodes = [n for n in data.get("nodes", []) if isinstance(n, dict)][:MAX_CANVAS_NODES]

    def num(value: Any) -> float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0

    parts: list[str] = []
    for node in sorted(nodes, key=lambda n: (num(n.get("y")), num(n.get("x")), str(n.get("id", "")))):
        kind = node.get("type")
        if kind == "text" and isinstance(node.get("text"), str) and node["text"].strip():
            parts.append(normalize_newlines_text(node["text"]).strip("\n"))
        elif kind == "file" and isinstance(node.get("file"), str) and node["file"].strip():
            target = re.sub(r"[\[\]|\n]", " ", node["file"]).strip()
            is_md = target.lower().endswith(".md")
            sub = node.get("subpath") if isinstance(node.get("subpath"), str) else ""
            sub = re.sub(r"[\[\]|\n]", " ", sub).strip()
            if is_md:
                parts.append(f"[[{target[:-3]}{sub}]]")
            else:
                parts.append(f"![[{target}{sub}]]")
        elif kind == "link" and isinstance(node.get("url"), str) and re.match(r"^https?://\S+$", node["url"]):
            parts.append(f"<{node['url']}>")
        elif kind == "group" and isinstance(node.get("label"), str) and node["label"].strip():
            parts.append("## " + " ".join(node["label"].split()))
    return "\n\n".join(parts) + ("\n" if parts else "")


def normalize_newlines_text(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


#: the format of a parsed page of a built HTML site on disk that only redirects (``<meta http-equiv="refresh">``, as
#: mkdocs-redirects and jekyll-redirect-from write them): it becomes no note (a crawl follows such a stub instead)
REDIRECT_STUB = "redirect-stub"
#: the format of a built HTML site's own "page not found" page (``404.html`` at the source's root, as Jekyll,
#: MkDocs, Hugo and Docusaurus write it for the web server): no documentation, so no note
NOT_FOUND_PAGE = "not-found-page"


def normalize_text(source: Source, raw: RawFile, text: str, site: dict[str, Any] | None = None) -> _Parsed:
    """Split and clean one file's text (no link conversion); ``site``: Jekyll site variables (:func:`site_config`).
    A redirect stub of a ``format: html`` local source parses as :data:`REDIRECT_STUB` (no body), its root
    ``404.html`` as :data:`NOT_FOUND_PAGE`.
    Raises NoteError for invalid frontmatter."""
    where = f"source '{source.name}': {raw.source_path}"
    if raw.source_path.lower().endswith(".canvas"):
        body = canvas_to_markdown(text, where)
        return _Parsed(raw, "obsidian", {}, body, collect_headings(body))
    if source.kind == "local" and source.format == "html" and raw.source_path.lower().endswith((".html", ".htm")):
        # a page of a built HTML site on disk: converted as the html fetch converts a crawled page, at its URL under
        # site_url (its <base href> and relative links and images resolve there; without site_url they stay as written)
        from pipeline.ingest.fetch.htmlmd import html_to_markdown

        if raw.source_path.lower() in ("404.html", "404.htm"):
            return _Parsed(raw, NOT_FOUND_PAGE, {}, "", {})
        doc = html_to_markdown(text, url=page_url(source, raw.source_path))
        if doc.refresh:                 # a redirect stub ("Redirecting..."): the page it names is the note
            return _Parsed(raw, REDIRECT_STUB, {"redirect": doc.refresh}, "", {})
        text = doc.markdown
    fm, body = split_frontmatter(text, where)
    fmt: DocFormat = source.format or guess_format(raw.source_path, fm, body)
    cleaned = clean_body(fmt, body, fm, site)
    if source.kind in ("html", "llms_txt") or source.format == "html":
        # a page the HTML converter wrote: a heading's ``{#id}`` (its anchor, when not its text's slug) is read
        # by collect_headings below, so links to page#id name the heading; the note shows the heading alone
        cleaned = map_prose(cleaned, lambda t: _HEADING_ID.sub(r"\1", t)) if "{#" in cleaned else cleaned
    return _Parsed(raw, fmt, fm, cleaned, collect_headings(body))


FIRST_KEYS = ("title", "aliases", "description", "tags", "source", "source_path", "url", "content_hash",
              "fetched_at")
#: docsvault's own keys whose page values it replaces; a differing page value stays as ``original_<key>``
REPLACED_KEYS = ("source", "source_path", "url", "content_hash", "fetched_at")
"""Frontmatter keys docsvault writes first, in this order; the page's own keys follow in their order, then keys from
the fetcher (``RawFile.meta``). ``aliases``/``description``/``tags`` appear only when the page has them."""


def build_frontmatter(source: Source, raw: RawFile, page_fm: dict[str, Any], title: str, url: str | None,
                      body: str, fetched_at: str) -> dict[str, Any]:
    """The note's frontmatter: :data:`FIRST_KEYS` first, then the page's own keys, then fetcher keys. Never lost:
    the page's own ``source``/``source_path``/``url``/``content_hash``/``fetched_at``, which docsvault's values
    replace, stay under ``original_<key>`` when they differ (the Obsidian Web Clipper writes the clipped page's
    address as ``source:``), unless the page has that key too; so does a ``title`` that is no text (a list, a
    mapping, empty), which the note's first heading or file name replaces. The build's own marker key ``docsvault``
    (``docsvault: index`` marks a generated index note, which is never indexed) is never taken from a page: the
    page's value, whatever it is, stays as ``original_docsvault``, so a user's note cannot drop out of search."""
    fm: dict[str, Any] = {"title": title}
    for key in ("aliases", "description", "tags"):
        if key in page_fm:
            fm[key] = page_fm[key]
    fm["source"] = source.name
    fm["source_path"] = raw.source_path
    if url:
        fm["url"] = url
    elif page_fm.get("url") is not None:
        fm["url"] = page_fm["url"]
    fm["content_hash"] = text_hash(body)
    fm["fetched_at"] = fetched_at
    replaced = {key: page_fm[key] for key in REPLACED_KEYS
                if page_fm.get(key) is not None and page_fm[key] != fm.get(key)}
    own_title = page_fm.get("title")
    if own_title is not None and not (isinstance(own_title, (str, int, float)) and str(own_title).strip() == title):
        replaced["title"] = own_title           # a title that is no text (`title: [1, 2]`): the heading's instead
    if INDEX_KEY in page_fm:
        replaced[INDEX_KEY] = page_fm[INDEX_KEY]
    fm.update(kept_originals(page_fm, replaced))
    for key, value in page_fm.items():
        if key not in fm and key not in OWN_KEYS:
            fm[key] = value
    for key, value in raw.meta.items():
        if key not in fm and key not in OWN_KEYS and key not in page_fm:
            fm[key] = value
    return fm


def _parse_cached(source: Source, raw: RawFile, text: str, cache: Any, site: dict[str, Any] | None = None
                  ) -> _Parsed:
    """:func:`normalize_text` through ``cache`` (``get(key)`` / ``cache[key] = value``; JSON-safe values), keyed by
    the format, the source path and the text: what the result depends on. Failures are never cached."""
    if cache is None:
        return normalize_text(source, raw, text, site)
    key = hashlib.sha1(json.dumps([source.format or "", raw.source_path, text, site or {}], ensure_ascii=False,
                                  sort_keys=True, default=str)
                       .encode("utf-8", "surrogatepass")).hexdigest()
    hit = cache.get(key)
    if isinstance(hit, list) and len(hit) == 4:
        fmt, fm, body, headings = hit
        # a well-formed entry of the wrong shape (a hand-edited or foreign cache file) is a miss, not a failure
        if isinstance(fmt, str) and isinstance(fm, dict) and isinstance(body, str) and isinstance(headings, dict):
            return _Parsed(raw, fmt, fm, body, headings)
    p = normalize_text(source, raw, text, site)
    cache[key] = [p.fmt, p.frontmatter, p.body, p.headings]
    return p


def _links_key(source: Source, index: _LinkIndex) -> str:
    """What every page's link conversion resolves against: the source's configuration and every page's path and
    headings. With those unchanged, an unchanged page's body converts the same, so :func:`_converted_cached` keeps
    it (a rebuild after one edited page converted every page's links again: 2.2 s of the five corpora's 5-page
    rebuild)."""
    return hashlib.sha1(json.dumps([repr(source), sorted(index.rel_paths.items()),
                                    sorted((sp, sorted(h.items())) for sp, h in index.headings.items()),
                                    sorted(index.redirects.items())],
                                   ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")).hexdigest()


def _converted_cached(body: str, index: _LinkIndex, sp: str, url: str, cache: Any, links_key: str
                      ) -> tuple[str, list[DanglingLink]]:
    """``convert_links`` then ``escape_table_wikilinks`` and ``_tidy`` of a page's body, with its dangling links,
    through ``cache`` (as :func:`_parse_cached`), keyed by the body, the page, its URL and ``links_key`` (what
    the index resolves against: every page's path and headings, the whole source configuration)."""
    def convert() -> tuple[str, list[DanglingLink]]:
        found: list[DanglingLink] = []
        converted = convert_links(body, index, sp, url, found)
        return _tidy(escape_table_wikilinks(converted)), found      # wikilinks a user wrote in a table row, too

    if cache is None:
        return convert()
    key = "links:" + hashlib.sha1(json.dumps([links_key, sp, url, body], ensure_ascii=False)
                                  .encode("utf-8", "surrogatepass")).hexdigest()
    hit = cache.get(key)
    if (isinstance(hit, list) and len(hit) == 2 and isinstance(hit[0], str) and isinstance(hit[1], list)
            and all(isinstance(d, list) and len(d) == len(DanglingLink._fields) for d in hit[1])):
        return hit[0], [DanglingLink(*d) for d in hit[1]]          # any other entry is a miss, not a failure
    out, found = convert()
    cache[key] = [out, [list(d) for d in found]]
    return out, found


def _parse_files(source: Source, unique: dict[str, RawFile], cache: Any, site: dict[str, Any]
                 ) -> tuple[list[_Parsed], list[str], dict[str, str], list[str]]:
    """Read and parse every file of ``unique`` (source path -> file): the parsed pages, one error line per
    file skipped (see :func:`normalize_source`), the redirect stubs (:data:`REDIRECT_STUB`: source path -> the
    URL it redirects to), which are neither (logged as a count), and the source paths of the files left out by
    design: those stubs and a site's 404 page (:data:`NOT_FOUND_PAGE`)."""
    parsed: list[_Parsed] = []
    errors: list[str] = []
    stubs: dict[str, str] = {}
    left_out: list[str] = []
    for sp, raw in unique.items():
        where = f"source '{source.name}': {sp!r}" if _needs_quoting(sp) else f"source '{source.name}': {sp}"
        try:
            st = raw.path.stat()
            size = st.st_size
            if not stat.S_ISREG(st.st_mode):
                errors.append(f"{where}: not a regular file (a device, pipe or folder); exclude it")
                continue
            if size > MAX_FILE_BYTES:
                errors.append(f"{where}: file is {size / 2**20:.1f} MiB, above the {MAX_FILE_BYTES // 2**20} MiB "
                              "limit for one note; split it or exclude it from the source")
                continue
            data = raw.path.read_bytes()
            if is_lfs_pointer(data):
                errors.append(f"{where}: {lfs_pointer_reason()}")
                continue
            text = decode_bytes(data, where)
            if not text.strip():
                errors.append(f"{where}: empty file (no text); add content or exclude it")
                continue
            p = _parse_cached(source, raw, text, cache, site)
            if p.fmt == REDIRECT_STUB:
                stubs[sp] = str(p.frontmatter.get("redirect") or "")
                left_out.append(sp)
                continue
            if p.fmt == NOT_FOUND_PAGE:
                log.info("source '%s': %s is the site's 'page not found' page: not a note", source.name, sp)
                left_out.append(sp)
                continue
            parsed.append(p)
        except NoteError as exc:
            errors.append(str(exc))
        except OSError as exc:
            errors.append(f"{where}: cannot read {raw.path}: {exc.strerror or exc}")
        except RecursionError:
            errors.append(f"{where}: too deeply nested to normalize; simplify or exclude the file")
    if stubs:
        log.info("source '%s': %d redirect stub page(s) (<meta http-equiv=refresh>) left out: not notes",
                 source.name, len(stubs))
    return parsed, errors, stubs, left_out


def normalize_source(source: Source, files: Sequence[RawFile], fetched_at: str, cache: Any = None
                     ) -> NormalizeResult:
    """Turn the fetched files of one source into Notes.

    Args:
        source: the source block (format, site_url, name).
        files: its fetched files (any order; duplicates by source_path keep the first). ``.canvas`` files become
            notes of their cards (:func:`canvas_to_markdown`).
        fetched_at: ISO UTC timestamp written into every note's frontmatter.
        cache: optional store of per-file parse results (``get(key)`` and item assignment, JSON-safe values, e.g. a
            dict loaded from disk) so a rebuild re-parses only changed files; the output is the same with or
            without it.

    Returns:
        NormalizeResult: notes sorted by source_path; errors holds one line ``source 'x': path: reason`` per file
        that was skipped (unreadable, empty or blank, larger than :data:`MAX_FILE_BYTES`, invalid UTF-8, binary,
        invalid or hostile YAML frontmatter, invalid canvas; a frontmatter-only file is a note, not an error); dangling lists internal links whose page is not in the source. Output is
        deterministic. Never raises for a bad file: every per-file failure becomes an error line.
    """
    unique: dict[str, RawFile] = {}
    for f in sorted(files, key=lambda f: f.source_path):
        unique.setdefault(f.source_path, f)
    rel_paths = assign_rel_paths(list(unique))
    for line in renamed_lines(source.name, rel_paths):
        log.warning("%s", line)
    site = site_config(list(unique.values())) if source.format in (None, "jekyll") else {}
    parsed, errors, stubs, left_out = _parse_files(source, unique, cache, site)
    ok = {p.raw.source_path: rel_paths[p.raw.source_path] for p in parsed}
    index = _LinkIndex(source, ok, {p.raw.source_path: p.headings for p in parsed})
    for stub, to in sorted(stubs.items()):       # a link to a stub reaches the page the stub redirects to
        target = _link_target(index, stub, to) if to else None
        if target is not None:
            index.redirects[stub] = target
    links_key = _links_key(source, index)
    notes: list[Note] = []
    dangling: list[DanglingLink] = []
    for p in parsed:
        sp = p.raw.source_path
        url = p.raw.url or page_url(source, sp)
        body = p.body
        try:
            if p.fmt != "obsidian":
                body, found = _converted_cached(body, index, sp, url, cache, links_key)
                dangling.extend(found)
            else:
                body = canonical_body(escape_table_wikilinks(body))
        except RecursionError:
            errors.append(f"source '{source.name}': {sp}: too deeply nested to normalize; simplify or exclude it")
            continue
        title = _title(p.frontmatter, body, sp)
        fm = build_frontmatter(source, p.raw, p.frontmatter, title, url, body, fetched_at)
        notes.append(Note(source=source.name, source_path=sp, rel_path=rel_paths[sp], title=title,
                          frontmatter=fm, body=body))
    return NormalizeResult(notes, errors, tuple(dangling), tuple(sorted(left_out)))


def _needs_quoting(text: str) -> bool:
    return any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text)


ERRORS_SUFFIX = ".errors.txt"


def errors_file(settings: Settings, source: str) -> Path:
    """``<data>/state/<source>.errors.txt``: one line per file the last normalize skipped, with its reason
    (written by :func:`write_report`, read by :func:`skipped_lines`)."""
    return settings.state_dir / f"{source}{ERRORS_SUFFIX}"


def skipped_lines(settings: Settings, source: str) -> list[str]:
    """The lines of the source's errors file (:func:`errors_file`), one per file its last normalize skipped
    (malformed notes, undecodable files), blank lines left out; [] when there is no record."""
    try:
        text = errors_file(settings, source).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def skipped_count(settings: Settings, source: str) -> int:
    """Files the source's last normalize skipped: lines of its errors file (:func:`skipped_lines`); 0 when there
    is none."""
    return len(skipped_lines(settings, source))


_SKIPPED_LINE = re.compile(r"(.+?\.[A-Za-z0-9]+): (.*)\Z")


def skipped_files(settings: Settings, source: str) -> dict[str, str]:
    """The files the source's last normalize skipped, ``{source path: reason}`` in the errors file's order (lines
    ``source 'x': path: reason``); empty when there is no record."""
    prefix = f"source '{source}': "
    out: dict[str, str] = {}
    for line in skipped_lines(settings, source):
        m = _SKIPPED_LINE.match(line.removeprefix(prefix)) if line.startswith(prefix) else None
        if m:                               # the path ends at its extension: ``a: b.md: reason`` is ``a: b.md``
            out.setdefault(m.group(1), m.group(2))
    return out


def skipped_by_name(skipped: Mapping[str, str], name: str) -> str | None:
    """The source path in ``skipped`` (:func:`skipped_files`) that ``name`` names as an Obsidian link names a
    note: the path itself, else a path ending in ``/<name>`` (``壊れたYAML.md`` is ``Inbox/壊れたYAML.md``),
    compared in NFC and case-folded, the shortest path first (Obsidian's tie-break); None when none is.

    >>> skipped_by_name({"Inbox/a/Broken.md": "x", "b/broken.md": "y"}, "Broken.md")
    'b/broken.md'
    >>> skipped_by_name({"Inbox/Broken.md": "x"}, "nbox/Broken.md") is None
    True
    """
    def fold(text: str) -> str:
        return unicodedata.normalize("NFC", text).strip().strip("/").casefold()

    from pipeline.common.markdown import shortest_named

    want = fold(name)
    if not want:
        return None
    if name in skipped:
        return name
    return shortest_named({fold(sp): sp for sp in skipped}, [want])


def skipped_reason(settings: Settings, note: str) -> str | None:
    """Why the last build skipped ``note`` (a vault path ``source/path.md``, a source path, or a note's path as a
    link names it, ``Broken.md`` for ``Inbox/Broken.md``: :func:`skipped_by_name`), from the sources' errors files
    (lines ``source 'x': path: reason``); None when no build skipped it. A path as written wins over a name."""
    if not settings.state_dir.is_dir():
        return None
    note = note.strip().strip("/")
    sources = [path.name[: -len(ERRORS_SUFFIX)] for path in sorted(settings.state_dir.glob(f"*{ERRORS_SUFFIX}"))]
    records = {source: skipped_files(settings, source) for source in sources}
    for exact in (True, False):
        for source, skipped in records.items():
            for want in dict.fromkeys([note.removeprefix(f"{source}/"), note]):
                sp = (want if want in skipped else None) if exact else skipped_by_name(skipped, want)
                if sp is not None:
                    return f"{source}/{sp} is not in the vault: the last build skipped it ({skipped[sp]})"
    return None


def write_report(settings: Settings, source: str, result: NormalizeResult) -> dict[str, Path]:
    """Write the per-source normalize report, each file atomically (temp + rename).

    Files: ``<data>/state/<source>.errors.txt`` (one line per skipped file: ``source 'x': path: reason``; empty
    when none) and ``<data>/graph/dangling-<source>.json`` (``[{"source_path", "target", "url"}, ...]``: internal
    links whose page does not exist in the source, kept as Markdown links to the site).

    Returns:
        {"errors": path, "dangling": path}.
    """
    import json

    from pipeline.common.artifacts import write_atomic

    def atomic(path: Path, text: str) -> None:
        write_atomic(path, text.encode("utf-8", errors="backslashreplace"))

    errors_path = errors_file(settings, source)
    dangling_path = settings.graph_dir / f"dangling-{source}.json"
    errors_path.parent.mkdir(parents=True, exist_ok=True)
    dangling_path.parent.mkdir(parents=True, exist_ok=True)
    atomic(errors_path, "".join(line.replace("\n", "\\n") + "\n" for line in result.errors))
    atomic(dangling_path, json.dumps([d._asdict() for d in result.dangling], ensure_ascii=False, indent=1) + "\n")
    return {"errors": errors_path, "dangling": dangling_path}
