"""Normalize stage: fetched files -> Notes (frontmatter + Obsidian-flavoured Markdown body).

Pure functions over text; the only I/O is reading the fetched files. Per file:

1. decode (UTF-8, BOM dropped, CRLF -> LF) and split the YAML frontmatter (``pipeline.frontmatter``);
2. pick the format (``source.format`` or :func:`guess_format`) and clean the body for it
   (mdx components -> callouts/headings/links, Jekyll Liquid tags, doc-builder directives — see the ``_mdx``,
   ``_jekyll`` and ``_docbuilder`` helpers); Obsidian notes are kept as they are;
3. turn internal Markdown links into wikilinks ``[[<source>/<rel_path without .md>#Heading|text]]`` when they resolve
   to another file of the same source (non-obsidian formats only);
4. build the frontmatter (page keys + ``title``, ``source``, ``source_path``, ``url``, ``content_hash``,
   ``fetched_at``).

Nothing inside fenced code blocks (``` or ~~~ of any length) or inline code spans is ever rewritten: code is split off
first (:func:`split_code`) and only the prose in between is transformed.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import unquote, urljoin, urlsplit

from pipeline.errors import NoteError
from pipeline.frontmatter import canonical_body, decode_bytes, split_frontmatter
from pipeline.models import DocFormat, Note, RawFile, Source, text_hash

MARKDOWN_EXTS = (".md", ".mdx", ".markdown", ".html", ".htm", ".txt")
OWN_KEYS = ("title", "source", "source_path", "url", "content_hash", "fetched_at")


class NormalizeResult(NamedTuple):
    """Notes of one source (sorted by source_path) and one error line per skipped file."""

    notes: list[Note]
    errors: list[str]      # "source 'x': path: reason"


# =====================================================================================================================
# Code protection: fences and inline code
# =====================================================================================================================

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?:>[ \t]?)*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def _fence_open(line: str) -> tuple[str, int] | None:
    """(fence char, length) when the line opens a fenced code block."""
    m = _FENCE_OPEN.match(line)
    if not m:
        return None
    fence = m.group("fence")
    if fence[0] == "`" and "`" in m.group("info"):
        return None
    return fence[0], len(fence)


def _fence_closes(line: str, char: str, length: int) -> bool:
    s = line.strip()
    while s.startswith(">"):
        s = s[1:].lstrip()
    return len(s) >= length and set(s) == {char}


def split_code(text: str) -> list[tuple[bool, str]]:
    """Split text into ``(is_fenced_code, chunk)`` pieces of whole lines; ``"".join`` gives back the text.

    A fence opens with 3+ backticks or tildes (any indentation, also inside ``>`` quotes) and closes with the same
    character repeated at least as often; an unclosed fence runs to the end.
    """
    pieces: list[tuple[bool, str]] = []
    lines = text.splitlines(keepends=True)
    buf: list[str] = []
    i = 0
    while i < len(lines):
        opened = _fence_open(lines[i].rstrip("\n"))
        if opened is None:
            buf.append(lines[i])
            i += 1
            continue
        if buf:
            pieces.append((False, "".join(buf)))
            buf = []
        code = [lines[i]]
        i += 1
        while i < len(lines):
            code.append(lines[i])
            i += 1
            if _fence_closes(code[-1].rstrip("\n"), *opened):
                break
        pieces.append((True, "".join(code)))
    if buf:
        pieces.append((False, "".join(buf)))
    return pieces


_BACKTICKS = re.compile(r"`+")


def _protect_inline_code(text: str) -> tuple[str, list[str]]:
    """Replace inline code spans by ``\\x00<n>\\x00`` placeholders (CommonMark pairing, not across blank lines)."""
    spans: list[str] = []
    out: list[str] = []
    pos = 0
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
        out.append(text[pos:m.start()])
        out.append(f"\x00{len(spans)}\x00")
        spans.append(text[m.start():end])
        pos = i = end
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

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*#*[ \t]*$")
_ANCHOR_JSX = re.compile(r"\s*\{/\*\s*(.*?)\s*\*/\}\s*$")
_ANCHOR_ID = re.compile(r"\s*\{#([^}\s]+)\}\s*$")
_ANCHOR_DOCBUILDER = re.compile(r"\s*\[\[([\w.-]+)\]\]\s*$")


def slugify(text: str) -> str:
    """GitHub/kramdown-style heading slug: lower-case, punctuation dropped, spaces -> '-' (unicode letters kept)."""
    text = _PLACEHOLDER.sub("", text)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _heading_display(text: str) -> str:
    """Heading text as used in a ``[[note#Heading]]`` link: characters Obsidian cannot link replaced."""
    text = re.sub(r"[\[\]|#^]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def collect_headings(body: str) -> dict[str, str]:
    """Map slug / explicit anchor id -> heading text for the ATX headings of a body (outside fences).

    Explicit ids (``{/*id*/}``, ``{#id}``, ``[[id]]``) and the GitHub-style slug of the heading text both map to the
    heading text without the anchor.
    """
    found: dict[str, str] = {}
    for is_code, chunk in split_code(body):
        if is_code:
            continue
        for line in chunk.split("\n"):
            m = _ATX.match(line)
            if not m or not m.group(2):
                continue
            text = m.group(2)
            ids: list[str] = []
            for rx in (_ANCHOR_JSX, _ANCHOR_ID, _ANCHOR_DOCBUILDER):
                am = rx.search(text)
                if am:
                    ids.append(am.group(1))
                    text = text[:am.start()]
            display = _heading_display(text)
            for key in [*ids, slugify(text)]:
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


def _parse_tag(text: str, start: int) -> _Tag | None:
    """Parse a tag starting at ``text[start] == '<'`` (attributes may span lines; quotes and {braces} skipped)."""
    m = _TAG_START.match(text, start)
    if not m:
        return None
    i = m.end()
    depth = 0
    quote = ""
    while i < len(text):
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
            return _Tag(m.group(2), attrs, self_closing, m.group(1) == "/", i + 1)
        elif c == "<" or (c == "\n" and text[i + 1:i + 2] == "\n"):
            return None
        i += 1
    return None


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
    ranges = []
    pos = 0
    for is_code, chunk in split_code(text):
        if is_code:
            ranges.append((pos, pos + len(chunk)))
        pos += len(chunk)
    return ranges


def _dedent(text: str) -> str:
    """Remove the common leading whitespace of the non-blank lines (tabs count as 4 spaces)."""
    lines = text.split("\n")
    lines = [ln.replace("\t", "    ") if ln[:1] == "\t" else ln for ln in lines]
    indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()]
    cut = min(indents) if indents else 0
    return "\n".join(ln[cut:] if ln.strip() else "" for ln in lines)


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
        if before_char.isalnum() or before_char in "`\\":
            out.append(text[pos:m.end()])
            pos = m.end()
            continue
        tag = _parse_tag(text, m.start())
        if tag is None:
            out.append(text[pos:m.end()])
            pos = m.end()
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

_JSX_COMMENT = re.compile(r"[ \t]*\{/\*.*?\*/\}", re.DOTALL)
_HEADING_ID = re.compile(r"^( {0,3}#{1,6}[ \t].*?)[ \t]*\{#[^}\s]+\}[ \t]*$", re.MULTILINE)


def _mdx(body: str) -> str:
    # 1. imports/exports at top level (outside fences, column 0)
    parts = []
    for is_code, chunk in split_code(body):
        if is_code or not re.search(r"^(?:import|export)\s", chunk, re.MULTILINE):
            parts.append(chunk)
        else:
            parts.append("\n".join(_strip_imports(chunk.split("\n"))))
    body = "".join(parts)
    # 2. JSX comments and heading ids (prose only)
    body = map_prose(body, lambda t: _HEADING_ID.sub(r"\1", _JSX_COMMENT.sub("", t)))
    # 3. components
    body = render_components(body, _Dialect(_is_mdx_component, True), 1)
    # 4. lines made of nothing but a JSX expression like {' '}
    body = map_prose(body, lambda t: re.sub(r"^[ \t]*\{['\"][ \t]*['\"]\}[ \t]*$", "", t, flags=re.MULTILINE))
    return body


_LIQUID_LINK = re.compile(r"\{%-?\s*link\s+(\S+?)\s*-?%\}")
_LIQUID_POST = re.compile(r"\{%-?\s*post_url\s+(\d{4})-(\d{2})-(\d{2})-(\S+?)\s*-?%\}")
_LIQUID_TAG = re.compile(r"\{%-?.*?-?%\}", re.DOTALL)
_LIQUID_VAR = re.compile(r"\{\{-?\s*(?:site|page|layout|include)\.[\w.]+(?:\s*\|[^}]*)?\s*-?\}\}")
_KRAMDOWN_LINE = re.compile(r"^[ \t]*\{:(?:\s*[.#][^}]*|\s*[\w-]+=[^}]*|:[^}]*|\s*toc\s*)\}[ \t]*\n?", re.MULTILINE)
_KRAMDOWN_SPAN = re.compile(r"\{:\s*[.#][\w.# -]*\}|\{:\s*[\w-]+=\"[^\"]*\"[^}]*\}")
_JEKYLL_CALLOUT = re.compile(r"^> (Warning|Tip|Note|Bestpractice|Deprecated|Important|Caution) (?=\S)", re.MULTILINE)
_JEKYLL_KINDS = {"Warning": ("warning", ""), "Tip": ("tip", ""), "Note": ("note", ""),
                 "Bestpractice": ("tip", "Best practice"), "Deprecated": ("warning", "Deprecated"),
                 "Important": ("important", ""), "Caution": ("warning", "")}


def _jekyll(body: str, frontmatter: dict[str, Any]) -> str:
    title = str(frontmatter.get("title", "")) if frontmatter.get("title") is not None else ""

    def fix(text: str) -> str:
        text = _LIQUID_LINK.sub(lambda m: "/" + m.group(1).lstrip("/"), text)
        text = _LIQUID_POST.sub(lambda m: f"/{m.group(1)}/{m.group(2)}/{m.group(3)}/{m.group(4)}.html", text)
        text = re.sub(r"^[ \t]*\{%-?.*?-?%\}[ \t]*\n", "", text, flags=re.MULTILINE)
        text = _LIQUID_TAG.sub("", text)
        text = re.sub(r"\{\{-?\s*page\.title\s*-?\}\}", lambda m: title, text)
        text = _LIQUID_VAR.sub("", text)
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

_LINK = re.compile(
    r"(?<![!\\\]])\[(?P<text>(?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]"
    r"\(\s*(?P<target><[^<>\n]*>|(?:[^\s()]|\([^\s()]*\))*)(?P<title>\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)"
)
_TABLE_DELIM = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$")


@dataclass
class _LinkIndex:
    """Resolves link targets to (source_path, rel_path) inside one source."""

    source: Source
    rel_paths: dict[str, str]                       # source_path -> rel_path
    headings: dict[str, dict[str, str]]             # source_path -> slug -> heading text
    stems: dict[str, list[str]] = field(default_factory=dict)      # link key -> source_paths
    suffixes: dict[str, list[str]] = field(default_factory=dict)   # trailing components of a key -> source_paths

    def __post_init__(self) -> None:
        for sp in sorted(self.rel_paths):
            for key in _stem_keys(sp):
                self.stems.setdefault(key, []).append(sp)
                parts = key.split("/")
                for i in range(1, len(parts)):
                    self.suffixes.setdefault("/".join(parts[i:]), []).append(sp)

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


def _wikilink(index: _LinkIndex, sp: str, fragment: str, text: str, in_table: bool) -> str:
    rel = index.rel_paths[sp]
    target = f"{index.source.name}/{rel.removesuffix('.md')}"
    if fragment:
        heading = index.headings.get(sp, {}).get(fragment) or index.headings.get(sp, {}).get(unquote(fragment))
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


def _convert_link(m: re.Match[str], index: _LinkIndex, sp: str, page_url: str | None, in_table: bool) -> str:
    text = m.group("text")
    target = m.group("target").strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if not target or target.startswith("#") or "![" in text or "\x00" in target:
        return m.group(0)
    parts = urlsplit(target)
    fragment = parts.fragment
    origin = _site_origin(index.source.site_url)
    kind = None
    if parts.scheme or target.startswith("//"):
        if origin and parts.scheme in ("http", "https") and f"{parts.scheme}://{parts.netloc}" == origin:
            kind, path = "absolute", parts.path
        else:
            return m.group(0)
    elif target.startswith("/"):
        kind, path = "absolute", parts.path
    else:
        kind = "relative"
        path = posixpath.normpath(posixpath.join(posixpath.dirname(sp), unquote(parts.path)))
    path = unquote(path)
    resolved = None
    if kind == "relative":
        if not path.startswith("../") and path != "..":
            resolved = index.exact(path)
    else:
        resolved = index.suffix(path)
    if resolved is not None:
        return _wikilink(index, resolved, fragment, text, in_table)
    # unresolvable internal link: point at the site when known
    new = None
    if kind == "absolute" and origin and target.startswith("/") and not target.startswith("//"):
        new = origin + target
    elif kind == "relative" and page_url:
        new = urljoin(page_url, target)
    if new is None:
        return m.group(0)
    title = m.group("title") or ""
    return f"[{text}]({new}{title})"


def convert_links(body: str, index: _LinkIndex, sp: str, page_url: str | None) -> str:
    """Rewrite internal Markdown links of one note (prose only) to wikilinks; ``\\|`` alias pipes in table rows."""

    def fix(text: str) -> str:
        lines = text.split("\n")
        table = [False] * len(lines)
        for i in range(1, len(lines)):
            if _TABLE_DELIM.match(lines[i]) and "|" in lines[i - 1] and "-" in lines[i]:
                j = i - 1
                while j < len(lines) and lines[j].strip():
                    table[j] = True
                    j += 1
        return "\n".join(
            _LINK.sub(lambda m, t=table[i]: _convert_link(m, index, sp, page_url, t), line) if "](" in line else line
            for i, line in enumerate(lines)
        )

    return map_prose(body, fix)


# =====================================================================================================================
# Paths, format, URL, title
# =====================================================================================================================

_ILLEGAL = re.compile(r'[*"\\<>:|?#^\[\]\x00-\x1f\x7f]')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}


def _clean_component(part: str) -> str:
    part = _ILLEGAL.sub("-", part).rstrip(" .")
    if not part:
        return "_"
    if part.split(".")[0].upper() in _RESERVED:
        part = f"{part}_"
    return part


def rel_path_for(source_path: str) -> str:
    """Vault path (inside ``vault/<source>/``) of a source path, before collision handling.

    Extension replaced by ``.md`` (``.md``/``.mdx``/``.markdown``/``.html``/``.htm``/``.txt``; other names get
    ``.md`` appended), NFC-normalized, every component made legal on Windows/macOS/Linux and for Obsidian links
    (``* " \\ < > : | ? # ^ [ ]`` and control characters -> ``-``, trailing dots/spaces dropped, empty -> ``_``).
    """
    sp = unicodedata.normalize("NFC", source_path).strip("/")
    parts = [p for p in sp.split("/") if p not in ("", ".")]
    parts = [p if p != ".." else "_" for p in parts] or ["_"]
    name = parts[-1]
    lower = name.lower()
    stem = name
    for ext in MARKDOWN_EXTS:
        if lower.endswith(ext) and len(name) > len(ext):
            stem = name[: -len(ext)]
            break
    cleaned = [_clean_component(p) for p in parts[:-1]] + [_clean_component(stem)]
    return "/".join(cleaned) + ".md"


def assign_rel_paths(source_paths: Sequence[str]) -> dict[str, str]:
    """source_path -> unique rel_path; case-insensitive collisions get `` (2)``, `` (3)``… in source_path order."""
    taken: set[str] = set()
    out: dict[str, str] = {}
    for sp in sorted(set(source_paths)):
        rel = rel_path_for(sp)
        candidate = rel
        n = 2
        while candidate.casefold() in taken:
            candidate = f"{rel[:-3]} ({n}).md"
            n += 1
        taken.add(candidate.casefold())
        out[sp] = candidate
    return out


def guess_format(source_path: str, frontmatter: dict[str, Any], body: str) -> DocFormat:
    """``.mdx`` -> mdx; Jekyll ``layout:`` key or Liquid ``{%`` -> jekyll; ``<!--Copyright`` header or
    ``[[autodoc]]`` -> docbuilder; otherwise markdown."""
    if source_path.lower().endswith(".mdx"):
        return "mdx"
    if "layout" in frontmatter or "{%" in body:
        return "jekyll"
    if body.lstrip().startswith("<!--Copyright") or "[[autodoc]]" in body:
        return "docbuilder"
    return "markdown"


def page_url(source: Source, source_path: str) -> str | None:
    """``site_url`` + the page path without extension (relative to the sparse folder that holds it; ``…/index``
    maps to the folder URL), or None without ``site_url``."""
    if not source.site_url:
        return None
    path = source_path
    for root in sorted((p.strip("/") for p in source.paths if p and not any(c in p for c in "*?[")),
                       key=len, reverse=True):
        if root and path.startswith(root + "/"):
            path = path[len(root) + 1:]
            break
    key = _stem_keys(path)
    stem = key[0]
    if len(key) > 1 and stem.lower().endswith(("index", "_index")):
        stem = key[1] + "/" if key[1] else ""
    elif stem.lower() in ("index", "_index"):
        stem = ""
    return source.site_url.rstrip("/") + "/" + stem


def _title(frontmatter: dict[str, Any], body: str, source_path: str) -> str:
    value = frontmatter.get("title")
    if isinstance(value, (str, int, float)) and str(value).strip():
        return str(value).strip()
    h1 = first_h1(body)
    if h1:
        h1 = _ANCHOR_JSX.sub("", _ANCHOR_ID.sub("", _ANCHOR_DOCBUILDER.sub("", h1))).strip()
        if h1:
            return h1
    name = source_path.rsplit("/", 1)[-1]
    for ext in MARKDOWN_EXTS:
        if name.lower().endswith(ext) and len(name) > len(ext):
            return name[: -len(ext)]
    return name


def clean_body(fmt: DocFormat, body: str, frontmatter: dict[str, Any]) -> str:
    """Format-specific cleaning of a body (LF text), links excluded; obsidian/markdown/html bodies are kept."""
    if fmt == "mdx":
        body = _mdx(body)
    elif fmt == "jekyll":
        body = _jekyll(body, frontmatter)
    elif fmt == "docbuilder":
        body = _docbuilder(body)
    return body


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


def normalize_text(source: Source, raw: RawFile, text: str) -> _Parsed:
    """Split and clean one file's text (no link conversion). Raises NoteError for invalid frontmatter."""
    where = f"source '{source.name}': {raw.source_path}"
    fm, body = split_frontmatter(text, where)
    fmt: DocFormat = source.format or guess_format(raw.source_path, fm, body)
    return _Parsed(raw, fmt, fm, clean_body(fmt, body, fm), collect_headings(body))


def normalize_source(source: Source, files: Sequence[RawFile], fetched_at: str) -> NormalizeResult:
    """Turn the fetched files of one source into Notes.

    Args:
        source: the source block (format, site_url, name).
        files: its fetched files (any order; duplicates by source_path keep the first).
        fetched_at: ISO UTC timestamp written into every note's frontmatter.

    Returns:
        NormalizeResult: notes sorted by source_path; errors holds one line ``source 'x': path: reason`` per file
        that was skipped (unreadable, invalid UTF-8, binary, invalid YAML frontmatter). Output is deterministic.
    """
    unique: dict[str, RawFile] = {}
    for f in sorted(files, key=lambda f: f.source_path):
        unique.setdefault(f.source_path, f)
    rel_paths = assign_rel_paths(list(unique))
    parsed: list[_Parsed] = []
    errors: list[str] = []
    for sp, raw in unique.items():
        where = f"source '{source.name}': {sp}"
        try:
            data = raw.path.read_bytes()
            parsed.append(normalize_text(source, raw, decode_bytes(data, where)))
        except NoteError as exc:
            errors.append(str(exc))
        except OSError as exc:
            errors.append(f"{where}: cannot read {raw.path}: {exc.strerror or exc}")
    ok = {p.raw.source_path: rel_paths[p.raw.source_path] for p in parsed}
    index = _LinkIndex(source, ok, {p.raw.source_path: p.headings for p in parsed})
    notes: list[Note] = []
    for p in parsed:
        sp = p.raw.source_path
        url = p.raw.url or page_url(source, sp)
        body = p.body
        if p.fmt != "obsidian":
            body = convert_links(body, index, sp, url)
            body = _tidy(body)
        else:
            body = canonical_body(body)
        title = _title(p.frontmatter, body, sp)
        fm: dict[str, Any] = {"title": title}
        fm.update({k: v for k, v in p.frontmatter.items() if k not in OWN_KEYS})
        fm.update({k: v for k, v in p.raw.meta.items() if k not in OWN_KEYS and k not in p.frontmatter})
        fm["source"] = source.name
        fm["source_path"] = sp
        if url:
            fm["url"] = url
        elif p.frontmatter.get("url") is not None:
            fm["url"] = p.frontmatter["url"]
        fm["content_hash"] = text_hash(body)
        fm["fetched_at"] = fetched_at
        notes.append(Note(source=source.name, source_path=sp, rel_path=rel_paths[sp], title=title,
                          frontmatter=fm, body=body))
    return NormalizeResult(notes, errors)
