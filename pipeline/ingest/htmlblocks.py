"""Raw HTML left in Markdown sources -> Markdown (prose only; code is never touched).

Docs written in Markdown still carry HTML: Rouge/Pygments-highlighted code (``<div class="language-c
highlighter-rouge">…<span class="kt">``), Sphinx API dumps (``<dl class="py class"><dt>…<span class="pre">``),
layout wrappers (``<div className="…">``, ``<div style={{…}}>`` in MDX), video embeds (``<iframe>``) and inline
styling (``<span class="badge">Cloud</span>``). In a vault they are noise for search and break Obsidian's
rendering of the Markdown around them. :func:`convert_html` turns them into Markdown:

* an **HTML block** — a line that starts with an HTML element (``<div``, ``<dl``, ``<table``, ``<p``, ``<figure``,
  ``<iframe``, …) up to the line where its element closes (tags counted; without a close, up to the next blank
  line, as CommonMark ends such a block) — is converted with markdownify (the converter of the HTML fetcher, so
  ``<pre>`` becomes a fenced block in the language of its ``language-*`` class, code text verbatim, and a
  ``<table>`` one GFM table by :mod:`pipeline.ingest.fetch.htmltable`, as in an HTML page); JSX
  attributes (``className=``, ``style={{…}}``) are dropped first; ``<iframe>``/``<video>``/``<audio>`` become a
  link to their ``src``;
* **inline** ``<span …>``/``</span>`` and ``<div …>``/``</div>`` tags left in a line are removed, their text kept,
  and so are elements left empty (``<sup><a href="…"></a></sup>`` once an icon component is gone);
* **inline elements** of :data:`INLINE_TAGS` (``<a href>``, ``<code>``, ``<strong>``, ``<em>``, ``<kbd>``, …) that
  open and close on one line become Markdown through the same markdownify converter (``[text](href)``, so an
  internal link then resolves to a wikilink like any Markdown link; `` `code` ``; ``**bold**``), and ``<br>``
  becomes a hard line break (markdownify's two spaces before the line's end), except in a GFM table row, where
  ``<br>`` is the only way to break a cell, and on a line of its own (a spacer Markdown cannot write): there it
  stays.

Escaped tags (``\\<div\\>``) are text and stay.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

BLOCK_TAGS = frozenset((
    "address", "article", "aside", "blockquote", "center", "details", "dialog", "dd", "div", "dl", "dt", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "iframe", "li",
    "main", "nav", "ol", "p", "picture", "pre", "section", "span", "summary", "table", "tbody", "td", "tfoot", "th",
    "thead", "tr", "ul", "video", "audio", "font", "small", "sup", "sub",
))
"""Elements whose opening tag at the start of a line starts an HTML block."""
VOID_TAGS = frozenset(("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
                       "track", "wbr"))
MAX_BLOCK_LINES = 5_000

_TAG = re.compile(r"<(/?)([A-Za-z][\w:-]*)((?:[^<>\"'{}]|\"[^\"]*\"|'[^']*'|\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\})*)>")
_BLOCK_START = re.compile(r"^[ \t]{0,3}<([a-z][a-z0-9]*)(?=[\s>/])")
_INLINE = re.compile(r"(?<!\\)</?(?:span|div)\b(?:[^<>\"'{}\n]|\"[^\"\n]*\"|'[^'\n]*'|\{[^{}\n]*(?:\{[^{}\n]*\}[^{}\n]*)*\})*>",
                     re.IGNORECASE)
_EMPTY = re.compile(r"<(a|sup|sub|small|b|i|em|strong|p)\b[^<>\n]*>[ \t]*</\1>", re.IGNORECASE)
_JSX_STYLE = re.compile(r"\s(?:style|sx|css)=\{\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}\}")
_JSX_EXPR_ATTR = re.compile(r"\s[A-Za-z_][\w-]*=\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")
_PLACEHOLDER = re.compile(r"\x00(\d+)\x00")
INLINE_TAGS = frozenset(("a", "b", "strong", "i", "em", "code", "kbd", "samp", "var", "s", "del", "br"))
"""Inline elements converted to Markdown where they open and close on one line (``br``: void, alone)."""
_INLINE_OPEN = re.compile(r"(?<!\\)<(?:" + "|".join(sorted(INLINE_TAGS, key=len, reverse=True)) + r")\b", re.IGNORECASE)
HARD_BREAK = "  \n"
"""A Markdown hard line break, as markdownify writes ``<br>`` (its default ``newline_style``)."""


def _block_end(lines: list[str], start: int) -> int:
    """Index of the last line of the HTML block starting at ``lines[start]``."""
    depth = 0
    opened = False
    for i in range(start, min(len(lines), start + MAX_BLOCK_LINES)):
        if i > start and not lines[i].strip() and not opened:
            return i - 1
        for m in _TAG.finditer(lines[i]):
            name = m.group(2).lower()
            if name in VOID_TAGS or m.group(3).rstrip().endswith("/"):
                continue
            if m.group(1):
                depth -= 1
            else:
                depth += 1
                opened = True
        if opened and depth <= 0:
            return i
    # never closed: CommonMark's rule for such blocks, up to the next blank line
    for i in range(start + 1, len(lines)):
        if not lines[i].strip():
            return i - 1
    return len(lines) - 1


def _converter() -> Any:
    """The markdownify converter of this module: the HTML fetch's (fenced code, GFM tables by
    :func:`pipeline.ingest.fetch.htmltable.html_table_to_gfm`), without escapes, built once."""
    global _CONVERTER
    if _CONVERTER is None:
        from pipeline.ingest.fetch.htmlmd import _Converter

        _CONVERTER = _Converter(heading_style="ATX", bullets="-", escape_underscores=False, escape_asterisks=False,
                                escape_misc=False)
    return _CONVERTER


_CONVERTER: Any = None
_URL_UNSAFE = {" ": "%20", "\t": "%09", "(": "%28", ")": "%29", "<": "%3C", ">": "%3E"}


def _soup(html: str) -> Any:
    """BeautifulSoup of an HTML fragment, JSX attributes dropped, link targets made safe for ``[text](target)``
    (spaces and parentheses percent-encoded, which link resolution decodes)."""
    from bs4 import BeautifulSoup

    html = _JSX_STYLE.sub("", html)
    html = _JSX_EXPR_ATTR.sub("", html).replace("className=", "class=").replace("{' '}", " ")
    soup = BeautifulSoup(html, "html.parser")
    for a in soup.find_all("a", href=True):
        href = str(a["href"]).strip()
        a["href"] = "".join(_URL_UNSAFE.get(c, c) for c in href)
    return soup


def _to_markdown(html: str) -> str:
    from pipeline.ingest.fetch.htmlmd import _fix_code

    soup = _soup(html)
    for el in soup.find_all(["script", "style", "noscript", "template", "button", "svg"]):
        el.decompose()
    for el in soup.find_all(["iframe", "video", "audio", "embed"]):
        src = el.get("src") or (el.find("source") or {}).get("src") if el.name != "embed" else el.get("src")
        label = el.get("title") or el.name
        if isinstance(src, str) and src.strip():
            link = soup.new_tag("a", href=src.strip())
            link.string = str(label)
            el.replace_with(link)
        else:
            el.decompose()
    for el in soup.select("a.headerlink, .headerlink"):
        el.decompose()
    _fix_code(soup, soup)
    md = _converter().convert_soup(soup)
    md = re.sub(r"[ \t]+\n", "\n", md)
    md = re.sub(r"\n{3,}", "\n\n", md)
    return md.strip("\n")


_PRE = re.compile(r"<pre\b.*?</pre>", re.DOTALL | re.IGNORECASE)


def _strip_tags(line: str) -> str:
    return _TAG.sub("", line).strip()


_TABLE_DELIM = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_HEADING_LINE = re.compile(r"^ {0,3}#{1,6}[ \t]")
_CONTINUATION = re.compile(r"^([ \t]*(?:>[ \t]?)*)((?:[-*+]|\d{1,9}[.)])[ \t]+)?")


def _table_lines(lines: list[str]) -> set[int]:
    """Indexes of the lines of GFM tables: each run of non-blank lines holding a delimiter row (``|---|``)."""
    rows: set[int] = set()
    start = 0
    for i in range(len(lines) + 1):
        if i == len(lines) or not lines[i].strip():
            run = range(start, i)
            if any("|" in lines[k] and "-" in lines[k] and _TABLE_DELIM.match(lines[k]) for k in run):
                rows.update(run)
            start = i + 1
    return rows


def _element_end(line: str, start: int, name: str) -> int | None:
    """End offset of the element whose opening tag starts at ``line[start]`` (same-name tags counted), or None when
    it does not close on this line."""
    depth = 0
    for m in _TAG.finditer(line, start):
        if m.group(2).lower() != name or m.group(3).rstrip().endswith("/"):
            continue
        depth += -1 if m.group(1) else 1
        if depth == 0:
            return m.end()
    return None


def _keeping_placeholders(fragment: str, convert: Callable[[str], str]) -> str:
    """``convert(fragment)`` with the inline-code placeholders (``\\x00<n>\\x00``) of ``fragment`` kept as they are
    (hidden from the HTML parser as ``DVCODE<n>X`` meanwhile)."""
    codes: list[str] = []

    def hide(m: re.Match[str]) -> str:
        codes.append(m.group())
        return f"DVCODE{len(codes) - 1}X"

    md = convert(_PLACEHOLDER.sub(hide, fragment))
    return re.sub(r"DVCODE(\d+)X", lambda m: codes[int(m.group(1))], md)


def _inline_markdown(fragment: str) -> str:
    """markdownify of one inline element (``<a href>``, ``<code>``, ``<strong>``, ``<br>``…); inline-code
    placeholders kept."""
    return _keeping_placeholders(fragment, lambda html: _converter().convert_soup(_soup(html)))


def _convert_inline_line(line: str, in_table: bool) -> str:
    """One line with its :data:`INLINE_TAGS` elements converted (see module doc); anything else kept as it is."""
    out: list[str] = []
    pos = 0
    for m in _INLINE_OPEN.finditer(line):
        if m.start() < pos:
            continue
        tag = _TAG.match(line, m.start())
        if tag is None or tag.group(1):
            continue
        name = tag.group(2).lower()
        if name == "br":
            if in_table or _CONTINUATION.fullmatch(line[:m.start()]):
                continue        # the only line break a table cell can have; a spacer line (Markdown has none)
            before, after = line[pos:m.start()], tag.end()
            hard = HARD_BREAK
            if _HEADING_LINE.match(line):
                md = " "                                        # a heading is one line
            elif not line[after:].strip():
                md = hard.rstrip("\n")                          # the line ends here anyway
            else:                                               # go on below, under the same list item / quote
                cont = _CONTINUATION.match(line)
                md = hard + (cont.group(1) + " " * len(cont.group(2) or "") if cont else "")
                before = before.rstrip(" \t")
                after += len(line[after:]) - len(line[after:].lstrip(" \t"))
            out.append(before + md)
            pos = after
            continue
        end = _element_end(line, m.start(), name)
        if end is None:
            continue
        md = _inline_markdown(line[m.start():end])
        if "\n" in md.strip("\n"):
            continue                                            # not inline after all: leave it
        if in_table:
            md = re.sub(r"(?<!\\)\|", r"\\|", md)
        out.append(line[pos:m.start()] + md.strip("\n"))
        pos = end
    out.append(line[pos:])
    return "".join(out)


def convert_inline(text: str) -> str:
    """``text`` (prose) with the :data:`INLINE_TAGS` elements that open and close on one line converted to
    Markdown (see module doc). Escaped tags (``\\<a>``) and elements spanning lines stay as they are."""
    if "<" not in text:
        return text
    lines = text.split("\n")
    tables = _table_lines(lines) if "|" in text else set()
    return "\n".join(_convert_inline_line(line, i in tables) if "<" in line else line
                     for i, line in enumerate(lines))


def convert_html(text: str) -> str:
    """Markdown for the HTML in a piece of prose (see module doc). Inline-code placeholders (``\\x00<n>\\x00``, see
    :func:`pipeline.ingest.normalize.map_prose`) are kept as they are.

    A block whose element holds blank lines (outside ``<pre>``) wraps Markdown (``<div className="x">``, blank line,
    Markdown, blank line, ``</div>``): only its tags go, and what it wraps is converted in turn (dedented)."""
    from pipeline.common.markdown import dedent as _dedent

    if "<" not in text:
        return text
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _BLOCK_START.match(line)
        if not m or m.group(1) not in BLOCK_TAGS:
            out.append(line)
            i += 1
            continue
        end = _block_end(lines, i)
        block = "\n".join(lines[i:end + 1])
        if out and out[-1].strip():
            out.append("")
        if end > i and re.search(r"\n[ \t]*\n", _PRE.sub("", block)):
            first, last = _strip_tags(lines[i]), _strip_tags(lines[end])
            inner = convert_html(_dedent("\n".join(lines[i + 1:end])))
            out.extend([x for x in (first, "") if first])
            out.extend(inner.split("\n"))
            out.extend([x for x in ("", last) if last])
        else:
            md = _keeping_placeholders(block, _to_markdown)
            out.extend(md.split("\n") if md else [])
        if end + 1 < len(lines) and lines[end + 1].strip():
            out.append("")
        i = end + 1
    text = _INLINE.sub("", "\n".join(out))
    for _ in range(3):              # <sup><a href="…"><Icon/></a></sup> once the component is gone
        text = _EMPTY.sub("", text)
    return convert_inline(text)
