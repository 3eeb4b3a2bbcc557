"""HTML page -> Markdown: main content only, code verbatim, links absolute (markdownify + BeautifulSoup/lxml).

1. Parse (lxml). ``<base href>`` (the first with an href, resolved against the page URL) is the base for relative
   links; ``<link rel=canonical>`` and every ``<a href>`` of the *whole* page (navigation included: that is where a
   crawler finds the other pages) are collected first.
2. Main content: the semantic container that holds the page's first ``<h1>`` — ``<article>``, ``<main>``,
   ``[role=main]``, then common content ids/classes; a site logo in an ``<h1>`` (a link around an image) is
   not the page's h1 — else, when the page marks its banner/footer/navigation (``<header>``, ``<footer>``,
   ``<nav>``, ``<aside>`` or their roles), the body, whose boilerplate is then stripped as below
   (jekyllrb.com's home page); else trafilatura's extraction (fallback for pages without such markup). Inside
   it, navigation, sidebars, footers, search boxes, forms, buttons, scripts, heading permalinks (``¶``) and
   "edit this page" links are dropped (tags, ARIA roles and class/id words; never inside ``<pre>``). A
   class/id word (``search``, ``share``, ``toc``, ``footer`` …) drops only wrappers (div, span, ul, a …),
   never a content element (:data:`CONTENT_TAGS`: headings, sections, paragraphs, list items, tables …:
   generators make ids from heading text), nor a wrapper that holds a heading and is not mostly link text
   (:func:`_holds_sections`). Why not trafilatura or readability for every page: compared on the real txtai
   (MkDocs Material) and jekyllrb pages, readability-lxml 0.9 dropped tables (txtai
   ``pipeline/text/summary``'s notebook table) and on jekyll's ``configuration/options`` kept one table
   without the H1 or prose; trafilatura 2.3 kept the text but rewrites the tree into its own elements:
   ``language-*`` / ``highlighttable`` classes are gone (no fence languages, line numbers mixed into code) and
   inline ``<code>`` became fenced blocks. Documentation generators mark their content well, so the container
   rule is exact there, and trafilatura (the better of the two on recall) is the fallback.
3. Fix-ups before conversion: mkdocstrings' collapsed "Source code in ``path``" listings go (the API docs
   stay; :func:`_drop_api_source`); an admonition (``<div class="admonition note">``) becomes an Obsidian
   callout (``> [!note] Title``); of mkdocs-material's ``#only-light``/``#only-dark`` image pair the light one
   stays, without the fragment; a ``<ul>``/``<ol>`` placed directly inside a list moves into the preceding
   ``<li>`` (EC-01); a Pygments ``highlighttable`` keeps only its code cell (no line-number column) and
   ``span.linenos`` go; each ``<pre>`` gets the language of the nearest self/ancestor/child class among
   ``language-*``, ``lang-*``, ``highlight-*`` and ``brush: *`` (EC-02; none found: no language); links and
   images become absolute against the base (fragment-only ``#x`` and ``mailto:``/``tel:`` left as they are;
   without any URL, unchanged: EC-04).
4. markdownify (ATX headings, ``*``/``+``/``-`` bullets by depth; text that would start a Markdown block at
   the start of a line, ``# =>``, ``> x``, ``- x``, ``1. x``, ``---``, gets a backslash); ``<pre>`` becomes a
   fence (longer than any backtick run inside) holding the code text verbatim: no escapes, whitespace kept; a
   ``<table>`` becomes one GFM table by :mod:`pipeline.ingest.fetch.htmltable` (the converter of HTML tables
   in Markdown notes too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urldefrag, urljoin, urlsplit

from bs4 import BeautifulSoup, Comment, NavigableString, PageElement, Tag
from markdownify import MarkdownConverter

from pipeline.common.markdown import code_lines, heading_slug
from pipeline.ingest.fetch.htmltable import html_table_to_gfm

__all__ = ["HtmlDoc", "code_language", "html_to_markdown"]

CONTENT_SELECTORS = (
    "article", "main", "[role=main]", "#content", ".content", "#main-content", ".main-content", ".md-content",
    ".rst-content", ".document", ".markdown-body", ".post-content", ".page-content", ".docs-content",
)
DROP_TAGS = ("script", "style", "noscript", "template", "nav", "aside", "footer", "form", "button", "input",
             "select", "textarea", "iframe", "dialog", "label", "svg")
DROP_ROLES = {"navigation", "search", "banner", "contentinfo", "complementary", "menu", "menubar", "dialog"}
_DROP_WORD = re.compile(
    r"^(?:.*[-_])?(?:sidebar|sidenav|toc|breadcrumbs?|headerlink|header-link|anchorjs-link|skip-link|search(?:box)?"
    r"|navbar|nav|menu|footer|edit(?:-page|-link|-this-page)?|improve|feedback|pagination|cookie(?:-banner)?"
    r"|source-file|announce|banner|share|social)(?:[-_].*)?$"
)
_KEEP_WORD = re.compile(r"highlight|language-|lang-|code|admonition|table")
#: content elements: never dropped for an id/class word, only for their tag or ARIA role (generators make
#: ids from heading text: Sphinx, mkdocs and kramdown give ``<h2 id="search">``, ``<section id="share-it">``)
CONTENT_TAGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "main", "p", "pre",
                          "code", "table", "thead", "tbody", "tr", "td", "th", "dl", "dt", "dd", "blockquote",
                          "figure", "figcaption", "li", "details", "summary", "img"})
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_LANG_CLASS = re.compile(r"^(?:language|lang|highlight|sourceCode)-([A-Za-z0-9_+#.-]+)$")
_NO_LANG = {"default", "none", "text", "plain", "plaintext", "nohighlight", "source", "notranslate", "txt"}


@dataclass(frozen=True)
class HtmlDoc:
    """A converted page. ``links`` are absolute, fragment-free, in document order, deduplicated (whole page)."""

    title: str
    markdown: str                 # starts with "# <title>" when the page has a title; LF, one final newline
    canonical: str | None         # absolute canonical URL, if declared
    links: tuple[str, ...]
    base_url: str | None          # the URL relative references were resolved against
    extractor: str                # "container" (may be the body: see module doc) or "trafilatura"
    refresh: str | None = None    # absolute target of a <meta http-equiv=refresh> redirect stub, if any


def _classes(el: Tag) -> list[str]:
    value = el.get("class") or []
    return list(value) if isinstance(value, list) else str(value).split()


def code_language(pre: Tag) -> str:
    """Language of a ``<pre>`` block (EC-02): nearest class among ``language-*``, ``lang-*``, ``highlight-*``,
    ``sourceCode-*`` or ``brush: x`` on the ``<code>`` child, the ``<pre>`` itself, then up to 4 ancestors;
    "" when none (never guessed)."""
    chain: list[Tag] = []
    code = pre.find("code")
    if isinstance(code, Tag):
        chain.append(code)
    chain.append(pre)
    parent = pre.parent
    for _ in range(4):
        if not isinstance(parent, Tag):
            break
        chain.append(parent)
        parent = parent.parent
    for el in chain:
        classes = _classes(el)
        for i, cls in enumerate(classes):
            m = _LANG_CLASS.match(cls)
            if m and m.group(1).lower() not in _NO_LANG:
                return m.group(1).lower()
            if cls.rstrip(":").lower() == "brush" and i + 1 < len(classes):
                lang = classes[i + 1].rstrip(";").lower()
                if lang and lang not in _NO_LANG:
                    return lang
        data = el.get("data-lang") or el.get("data-language")
        if isinstance(data, str) and data.strip() and data.strip().lower() not in _NO_LANG:
            return data.strip().lower()
    return ""


#: inline elements: text inside them continues the line of the text before them
_INLINE_TAGS = frozenset({"a", "abbr", "b", "bdi", "bdo", "big", "cite", "code", "data", "del", "dfn", "em",
                          "font", "i", "ins", "kbd", "mark", "q", "s", "samp", "small", "span", "strike",
                          "strong", "sub", "sup", "time", "tt", "u", "var"})
#: what would start a Markdown block at the start of a line: ATX heading, block quote, bullet, thematic break
#: or setext underline, code fence, ordered item (``1.``: the ``.`` gets it); group 2 the character that gets
#: the backslash
_BLOCK_MARK = r"(#{1,6}(?=\s|$)|>|[-+*](?=\s|$)|[-=](?=[-= \t]*(?:\n|$))|`(?=``)|~(?=~~)|(?<=\d)[.)](?=\s|$))"
_LINE_START_MARK = re.compile(r"(\n[ \t]*(?:\d{1,9}(?=[.)]))?)" + _BLOCK_MARK)
_TEXT_START_MARK = re.compile(r"^([ \t]*(?:\d{1,9}(?=[.)]))?)" + _BLOCK_MARK)


def _at_line_start(node: NavigableString) -> bool:
    """True when ``node``'s text starts a line of the Markdown: nothing but whitespace before it in its block,
    or a ``<br>``, a block element or a newline of the source text (markdownify keeps those) just before it.
    Text of a heading follows its ``#``s and text in a table cell its ``|``: False there."""
    cur: Tag | NavigableString = node
    while True:
        sib = cur.previous_sibling
        while sib is not None:
            if isinstance(sib, Tag):
                if sib.name == "img":
                    return False
                if sib.name == "br" or sib.name not in _INLINE_TAGS:
                    return True
                text = sib.get_text()
            else:
                text = "" if isinstance(sib, Comment) else str(sib)
            if text.strip():
                return text.rstrip(" \t").endswith("\n")
            sib = sib.previous_sibling
        parent = cur.parent
        if parent is None:
            return True
        if parent.name in _INLINE_TAGS:
            cur = parent
            continue
        return parent.name not in (*_HEADINGS, "td", "th")


class _Converter(MarkdownConverter):
    """markdownify with verbatim fenced code and GFM tables
    (:func:`pipeline.ingest.fetch.htmltable.html_table_to_gfm`: one header row, spans expanded, one line per
    cell, ``|`` escaped). Option ``escape_line_starts`` (default off): text that would start a Markdown block
    where it lands at the start of a line (``# =>``, ``> x``, ``- x``, ``1. x``, ``---``, a code fence) gets a
    backslash, so a paragraph stays a paragraph."""

    def process_text(self, el: NavigableString,  # type: ignore[override]
                     parent_tags: set[str] | None = None) -> str:
        text = super().process_text(el, parent_tags)
        if not self.options.get("escape_line_starts") or {"pre", "_noformat"} & (parent_tags or set()):
            return text
        text = _LINE_START_MARK.sub(r"\1\\\2", text)
        if _at_line_start(el):
            text = _TEXT_START_MARK.sub(r"\1\\\2", text)
        return text

    def convert_hN(self, n: int, el: Tag, text: str, parent_tags: set[str]) -> str:  # type: ignore[override]
        anchor = el.get("data-dv-id")
        if isinstance(anchor, str) and "_inline" not in parent_tags and text.strip():
            text = f"{text.strip()} {{#{anchor}}}"       # read as the heading's anchor (:func:`_mark_heading_ids`)
        return super().convert_hN(n, el, text, parent_tags)

    def process_tag(self, node: Tag, parent_tags: set[str] | None = None) -> str:  # type: ignore[override]
        if node.name == "table":      # rendered from its cells: markdownify's row-by-row output is never built
            return self.convert_table(node, "", parent_tags or set())
        kind = node.get("data-dv-callout")
        if isinstance(kind, str):
            return self._callout(node, kind, parent_tags or set())
        return super().process_tag(node, parent_tags)

    def _callout(self, node: Tag, kind: str, parent_tags: set[str]) -> str:
        """An admonition marked by :func:`_mark_admonitions` as an Obsidian callout: ``> [!kind] Title`` (the
        title as inline Markdown, none when the admonition has none), then its body, every line behind ``>
        ``."""
        del node["data-dv-callout"]
        title_el = node.find(class_="admonition-title", recursive=False)
        title = ""
        if isinstance(title_el, Tag):
            title = " ".join(self.process_tag(title_el, parent_tags | {"_inline"}).split())
            title_el.decompose()
        body = super().process_tag(node, parent_tags).strip("\n")
        lines = [f"[!{kind}] {title}".rstrip(), *(body.split("\n") if body else [])]
        return "\n\n" + "\n".join(f"> {line}".rstrip() for line in lines) + "\n\n"

    @cached_property
    def _cell_converter(self) -> _Converter:
        """This converter for table cells: soft line breaks of the HTML source are spaces (markdownify's
        ``wrap`` without a width), so only ``<br>`` and block boundaries (paragraphs, list items) break a
        cell's line; no line-start escapes (a cell holds inline text only)."""
        return type(self)(**{**self.options, "wrap": True, "wrap_width": None, "escape_line_starts": False})

    def convert_table(self, el: Tag, text: str, parent_tags: set[str]) -> str:  # type: ignore[override]
        def cell(c: Tag) -> str:
            return self._cell_converter.convert_soup(BeautifulSoup(c.decode_contents(), "html.parser"))

        return "\n\n" + html_table_to_gfm(el, cell) + "\n\n"

    def convert_pre(self, el: Tag, text: str, parent_tags: set[str]) -> str:  # type: ignore[override]
        code = el.get_text()
        code = code.replace("\r\n", "\n").strip("\n")
        if not code.strip():
            return ""
        lang = el.get("data-dv-lang") or ""
        longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"\n\n{fence}{lang}\n{code}\n{fence}\n\n"


def _mark_heading_ids(container: Tag) -> None:
    """Each heading whose anchor is not the slug of its text gets ``data-dv-id``, which the converter writes as
    ``{#anchor}`` after the heading: normalize reads it as the heading's explicit anchor, so a link to
    ``page#anchor`` names the heading (``[[page#__call__(text)]]``), and drops it from the note. The anchor: the
    heading's ``id``, else that of an ``<a id>``/``<a name>`` in it, else the ``id`` of the section, article or
    div it opens (Sphinx). mkdocstrings gives ``<h2 id="txtai.agent.base.Agent.__call__">__call__(...)</h2>``;
    its pages link there, and those links named no heading."""
    for h in container.find_all(_HEADINGS):
        anchor = _heading_anchor(h)
        if anchor and anchor != heading_slug(h.get_text(" ", strip=True)) and not re.search(r"[\s{}]", anchor):
            h["data-dv-id"] = anchor


def _heading_anchor(h: Tag) -> str | None:
    own = h.get("id")
    if isinstance(own, str) and own:
        return own
    for a in h.find_all("a"):
        named = a.get("id") or (a.get("name") if not a.get("href") else None)
        if isinstance(named, str) and named:
            return named
    parent = h.parent
    if isinstance(parent, Tag) and parent.name in ("section", "article", "div") and parent.find(_HEADINGS) is h:
        pid = parent.get("id")
        if isinstance(pid, str) and pid:
            return pid
    return None


def _is_in_pre(el: Tag) -> bool:
    return any(p.name == "pre" for p in el.parents if isinstance(p, Tag))


def _should_drop(el: Tag) -> bool:
    if el.name in DROP_TAGS:
        return True
    role = el.get("role")
    if isinstance(role, str) and role.lower() in DROP_ROLES:
        return True
    if el.name == "a" and set(_classes(el)) & {"headerlink", "header-link", "anchor", "anchorjs-link",
                                                  "heading-anchor", "hash-link"}:
        return True
    if el.name in CONTENT_TAGS:
        return False
    words = _classes(el) + ([str(el.get("id"))] if el.get("id") else [])
    if any(_DROP_WORD.match(w.lower()) and not _KEEP_WORD.search(w.lower()) for w in words):
        return not _holds_sections(el)
    return False


def _holds_sections(el: Tag) -> bool:
    """True when a wrapper is part of the page's text whatever its class or id says: it holds a non-empty
    heading (h1-h6) and at most half of its text is link text. Menus, tables of contents, "related" sidebars
    and footers are lists of links (their headings, such as "On this page", head links); a Sphinx ``<div
    class="section" id="search-function">`` or a layout column named ``sidebar-content`` that holds the page's
    h2s holds prose."""
    if not any(h.get_text(strip=True) for h in el.find_all(_HEADINGS)):
        return False
    text = len(el.get_text("", strip=True))
    linked = sum(len(a.get_text("", strip=True)) for a in el.find_all("a"))
    return linked * 2 <= text


#: what a page whose elements nest too deep to convert is told (thousands of unclosed ``<div>``s: each opens
#: inside the last); the conversion walks the tree recursively and stops at Python's recursion limit
TOO_DEEP = "nested too deeply to convert (thousands of elements inside one another, e.g. unclosed <div> tags)"


def _decomposed(el: PageElement) -> bool:
    """``el.decomposed`` in constant time: BeautifulSoup's property reads ``_decomposed`` with ``getattr``, which
    on a Tag never decomposed falls through to ``Tag.__getattr__``, a search of its whole subtree for a tag named
    ``_decomposed``; asked of every element of a deeply nested page that is quadratic (a page of 2,000 unclosed
    ``<div>``s took 6 s, one of 200,000 hours)."""
    return bool(vars(el).get("_decomposed", False))


def _strip_boilerplate(root: Tag) -> None:
    """Drop the boilerplate elements under ``root`` (:func:`_should_drop`), never inside ``<pre>``. Linear in a
    deeply nested page: the elements inside a ``<pre>`` are found once, not by walking each element's ancestors,
    and :func:`_decomposed` is asked, not BeautifulSoup's ``decomposed``."""
    in_pre = {id(d) for pre in root.find_all("pre") for d in pre.descendants} if not _is_in_pre(root) else None
    for el in list(root.find_all(True)):
        if _decomposed(el) or not isinstance(el, Tag) or el.name in ("pre", "code", "table", "h1"):
            continue
        if el.name in ("header",) and not _h1s(el):
            el.decompose()
            continue
        if in_pre is None or id(el) in in_pre:
            continue
        if _should_drop(el) and not _h1s(el):
            el.decompose()


def _is_logo(h1: Tag) -> bool:
    """A site logo marked up as an ``<h1>`` outside ``<article>``/``<main>``: all its text inside one link
    that holds an image (Jekyll's theme: ``<h1><a href="/" class="logo"><span
    class="sr-only">Jekyll</span><img …>``); not the page's title."""
    links = h1.find_all("a")
    if len(links) != 1 or links[0].find(["img", "svg"]) is None:
        return False
    if any(p.name in ("article", "main") or p.get("role") == "main"
           for p in h1.parents if isinstance(p, Tag)):
        return False
    return len(h1.get_text("", strip=True)) == len(links[0].get_text("", strip=True))


def _h1s(root: Tag) -> list[Tag]:
    """The non-empty ``<h1>`` elements under ``root`` that are not a site logo (:func:`_is_logo`)."""
    return [h for h in root.find_all("h1") if h.get_text(strip=True) and not _is_logo(h)]


def _marks_boilerplate(body: Tag) -> bool:
    """True when a page without a content container marks its banner, footer or navigation (``<header>``,
    ``<footer>``, ``<nav>``, ``<aside>`` or their ARIA roles): the rest of its body is then the content."""
    if body.find(["header", "footer", "nav", "aside"]) is not None:
        return True
    return body.find(attrs={"role": ["banner", "contentinfo", "navigation", "complementary"]}) is not None


def _contains(el: Tag, node: Tag) -> bool:
    return any(p is el for p in node.parents)


def _pick_container(soup: BeautifulSoup) -> Tag | None:
    """The innermost semantic container holding a non-empty <h1> that is not a site logo (selectors tried in
    order); with no such h1 anywhere, the only match of a selector, which must hold all matches of an earlier
    selector that matched several times (a listing of ``<article>`` excerpts is not the ``.post-content`` of
    its first one); else None."""
    body = soup.body or soup
    h1s = _h1s(body)
    several: list[Tag] = []
    for selector in CONTENT_SELECTORS:
        found = [el for el in body.select(selector) if isinstance(el, Tag)]
        if not found:
            continue
        holding = [el for el in found if any(_contains(el, h) for h in h1s)]
        if holding:
            return min(holding, key=lambda el: sum(1 for _ in el.descendants))
        if not h1s and len(found) == 1 and all(_contains(found[0], el) for el in several):
            return found[0]
        if not h1s and len(found) > 1 and not several:
            several = found
    return None


_CALLOUT_KIND = re.compile(r"^[a-z][a-z0-9-]*$")


def _mark_admonitions(root: Tag) -> None:
    """A ``<div class="admonition note">`` (mkdocs, Sphinx: ``<p class="admonition-title">`` holds its title)
    is marked to become an Obsidian callout; its kind is its other class (note, warning, tip, danger, info …,
    as written: Obsidian shows unknown kinds as notes), ``note`` when it has none. So is Jekyll's
    ``<div class="note info"><h5>Title</h5>…</div>`` (a ``div.note`` whose first child is a heading h2-h6: the
    callout's title)."""
    for div in root.find_all("div", class_="admonition"):
        kinds = [c for c in (c.lower() for c in _classes(div))
                 if c != "admonition" and not c.startswith("admonition-") and _CALLOUT_KIND.match(c)]
        div["data-dv-callout"] = kinds[0] if kinds else "note"
    for div in root.find_all("div", class_="note"):
        # Jekyll's docs theme (jekyllrb.com): <div class="note warning"><h5>Title</h5><p>…</p></div>; a title
        # heading that is its first child is the callout's title, not a heading of the page
        if div.has_attr("data-dv-callout"):
            continue
        first = next((c for c in div.children if isinstance(c, Tag)), None)
        if first is None or first.name not in ("h2", "h3", "h4", "h5", "h6") or any(
                isinstance(c, NavigableString) and c.strip() for c in div.children):
            continue
        kinds = [c for c in (c.lower() for c in _classes(div)) if c != "note" and _CALLOUT_KIND.match(c)]
        div["data-dv-callout"] = kinds[0] if kinds else "note"
        first["class"] = [*_classes(first), "admonition-title"]


#: mkdocs-material's (and GitHub's) theme variants of one image: the light one is kept, without its fragment
_DARK_ONLY = {"only-dark", "gh-dark-mode-only"}
_LIGHT_ONLY = {"only-light", "gh-light-mode-only"}


def _keep_light_images(root: Tag) -> None:
    """``<img src="x.png#only-dark">`` goes (with a link around it and nothing else); ``x.png#only-light``
    loses its fragment."""
    for img in list(root.find_all("img")):
        src = img.get("src")
        if not isinstance(src, str):
            continue
        plain, fragment = urldefrag(src.strip())
        if fragment in _DARK_ONLY:
            parent = img.parent
            img.decompose()
            if isinstance(parent, Tag) and parent.name == "a" and not parent.get_text(strip=True) \
                    and parent.find(["img", "svg"]) is None:
                parent.decompose()
        elif fragment in _LIGHT_ONLY:
            img["src"] = plain


def _drop_api_source(root: Tag) -> None:
    """mkdocstrings' collapsed source listings go: a ``<details class="mkdocstrings-source">``, or (older
    versions, ``class="quote"``) a ``<details>`` whose ``<summary>`` reads "Source code in ``path``". The API
    docs around them stay, and so does any other ``<details>``."""
    for details in list(root.find_all("details")):
        if _decomposed(details):
            continue
        summary = details.find("summary", recursive=False)
        label = summary.get_text(" ", strip=True) if isinstance(summary, Tag) else ""
        if "mkdocstrings-source" in _classes(details) or (
                label.startswith("Source code in") and isinstance(summary, Tag) and summary.find("code")):
            details.decompose()


def _fix_nested_lists(root: Tag, soup: BeautifulSoup) -> None:
    """EC-01: a list directly inside a list moves into the preceding <li> (or a new one)."""
    for lst in list(root.find_all(["ul", "ol"])):
        parent = lst.parent
        if not isinstance(parent, Tag) or parent.name not in ("ul", "ol"):
            continue
        prev = lst.find_previous_sibling()
        if isinstance(prev, Tag) and prev.name == "li":
            prev.append(lst.extract())
        else:
            li = soup.new_tag("li")
            lst.replace_with(li)
            li.append(lst)


def _fix_code(root: Tag, soup: BeautifulSoup) -> None:
    for table in list(root.select("table.highlighttable")):
        cells = table.find_all("td")
        code_cell = table.select_one("td.code") or (cells[-1] if cells else None)
        pre = code_cell.find("pre") if isinstance(code_cell, Tag) else None
        if isinstance(pre, Tag):
            lang = code_language(pre) or code_language_from(table)
            pre = pre.extract()
            if lang:
                pre["data-dv-lang"] = lang
            table.replace_with(pre)
    for span in list(root.select("span.linenos, span.lineno, td.linenos, .gutter")):
        span.decompose()
    for pre in root.find_all("pre"):
        if not pre.get("data-dv-lang"):
            lang = code_language(pre)
            if lang:
                pre["data-dv-lang"] = lang


def code_language_from(el: Tag) -> str:
    """Language from the classes of ``el`` and its ancestors (used for a highlighttable's wrapper)."""
    node: Tag | None = el
    for _ in range(4):
        if not isinstance(node, Tag):
            break
        for cls in _classes(node):
            m = _LANG_CLASS.match(cls)
            if m and m.group(1).lower() not in _NO_LANG:
                return m.group(1).lower()
        node = node.parent
    return ""


def _absolute(value: str, base: str | None) -> str:
    v = value.strip()
    if not base or not v or v.startswith("#"):
        return v
    scheme = urlsplit(v).scheme.lower()
    if scheme and scheme not in ("http", "https"):
        return v                                   # mailto:, tel:, data:, javascript: ... untouched
    return urljoin(base, v)


def _absolutize(root: Tag, base: str | None) -> None:
    for a in root.find_all("a"):
        href = a.get("href")
        if isinstance(href, str):
            if href.strip().lower().startswith("javascript:"):
                del a["href"]
            else:
                a["href"] = _absolute(href, base)
    for img in root.find_all("img"):
        src = img.get("src")
        if isinstance(src, str):
            img["src"] = _absolute(src, base)


def _tidy(md: str) -> str:
    """Outside fenced code (:func:`pipeline.common.markdown.code_lines`): trailing whitespace dropped and runs of
    blank lines collapsed to one; code lines verbatim. No leading/trailing blank lines, one final newline."""
    out: list[str] = []
    blank = 0
    for is_code, line in code_lines(md.replace("\r\n", "\n").split("\n")):
        if is_code:
            blank = 0
        else:
            line = line.rstrip()
            blank = blank + 1 if not line else 0
            if blank > 1:
                continue
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def html_to_markdown(html: str | bytes, url: str | None = None) -> HtmlDoc:
    """Convert one HTML page to Markdown (see module doc).

    Args:
        html: the page (bytes are decoded by lxml using the declared charset).
        url: the page URL, for ``<base href>`` resolution and absolute links; None leaves relative refs as they are.

    Returns:
        HtmlDoc; ``markdown`` starts with the page's H1 (``# <title>`` is prepended when the content has none but the
        page has a ``<title>``).

    Long: the ordered clean-up steps of the module doc (1-4) over one DOM; each is a few lines and their order
    matters.
    """
    soup = BeautifulSoup(html, "lxml")
    base = url
    base_tag = soup.find("base", href=True)
    if isinstance(base_tag, Tag):
        href = str(base_tag["href"]).strip()
        base = urljoin(url, href) if url else (href if urlsplit(href).scheme in ("http", "https") else None)
    canonical = None
    for link in soup.find_all("link", href=True):
        rel = link.get("rel") or []
        rels = rel if isinstance(rel, list) else str(rel).split()
        if "canonical" in [r.lower() for r in rels]:
            canonical = urldefrag(_absolute(str(link["href"]), base or url))[0] or None
            break
    links: list[str] = []
    seen: set[str] = set()
    if base:
        for a in soup.find_all("a", href=True):
            target = urldefrag(_absolute(str(a["href"]), base))[0]
            if target and urlsplit(target).scheme in ("http", "https") and target not in seen:
                seen.add(target)
                links.append(target)
    page_title = soup.title.get_text(" ", strip=True) if soup.title else ""
    refresh = None
    for meta in soup.find_all("meta"):
        if str(meta.get("http-equiv", "")).lower() == "refresh":
            m = re.search(r"url\s*=\s*['\"]?([^'\";]+)", str(meta.get("content", "")), re.IGNORECASE)
            if m:
                refresh = urldefrag(_absolute(m.group(1), base or url))[0] or None
            break

    container = _pick_container(soup)
    extractor = "container"
    if container is None and soup.body is not None and _marks_boilerplate(soup.body):
        container = soup.body          # landmarks mark the boilerplate (jekyllrb.com's home page): the body
    if container is None:
        extractor = "trafilatura"
        container = _trafilatura_main(soup, str(soup), url)
        soup_for_tags = BeautifulSoup("", "lxml")
    else:
        soup_for_tags = soup
    for el in container.find_all(["script", "style", "noscript", "template"]):
        el.decompose()
    _strip_boilerplate(container)
    _drop_api_source(container)
    _mark_admonitions(container)
    _keep_light_images(container)
    _fix_nested_lists(container, soup_for_tags)
    _fix_code(container, soup_for_tags)
    _absolutize(container, base)
    _mark_heading_ids(container)
    for empty in [h for h in container.find_all("h1") if not h.get_text(strip=True)]:
        empty.decompose()
    found_h1 = _h1s(container)
    h1 = found_h1[0] if found_h1 else None
    title = h1.get_text(" ", strip=True) if h1 is not None else page_title
    if isinstance(h1, Tag):
        # nothing before the page's H1 (breadcrumbs, version badges, "edit" links that survived)
        for prev in list(h1.find_all_previous()):
            if _decomposed(prev) or prev is container or container not in prev.parents:
                continue
            if h1 not in prev.descendants:
                prev.decompose()
        for text in list(h1.find_all_previous(string=True)):
            if isinstance(text, NavigableString) and container in text.parents and h1 not in text.parents:
                text.extract()
    md = _Converter(heading_style="ATX", bullets="*+-", escape_underscores=True, escape_asterisks=True,
                    escape_line_starts=True).convert_soup(container)
    md = _tidy(md)
    if not isinstance(h1, Tag) and title:
        md = f"# {title}\n\n{md}"
    return HtmlDoc(title=title, markdown=md, canonical=canonical, links=tuple(links), base_url=base,
                   extractor=extractor, refresh=refresh)


def _trafilatura_main(soup: BeautifulSoup, html: str, url: str | None) -> Tag:
    """Main content by trafilatura (pages without semantic containers); the whole body when it finds nothing."""
    import trafilatura

    extracted = trafilatura.extract(html, url=url, output_format="html", include_tables=True, include_links=True,
                                    include_images=True, include_formatting=True, favor_recall=True)
    if extracted:
        tree = BeautifulSoup(extracted, "lxml")
        if tree.body is not None:
            return tree.body
    return soup.body or soup
