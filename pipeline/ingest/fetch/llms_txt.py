"""llms_txt: read a site's ``/llms.txt`` (https://llmstxt.org) and fetch the pages it links, Markdown first.

Parsing (:func:`parse_llms_txt`): an H1 title (required), an optional ``>`` blockquote summary, free prose, then H2
sections whose list items ``- [name](url): notes`` are the links; the section named ``Optional`` marks its links
optional; prose lines and other Markdown inside sections are tolerated; relative URLs resolve against the llms.txt
URL. Tolerated variants seen in real files: links inside the prose before the first H2 (a first section named ``""``)
and list items whose link is not their first text (DuckDB's ``- DuckDB has a powerful [extension mechanism](…)``).

Fetching each link (same host as the llms.txt, or ``allowed_hosts``; other hosts are skipped with a warning):

1. the URL itself when its path ends in ``.md`` or ``.md.txt``;
2. else its Markdown twin: ``<url>.md`` (``…/`` -> ``…/index.md`` then ``…/index.html.md``; ``x.html`` ->
   ``x.html.md`` then ``x.md``), accepted only when the answer is not HTML (sites that answer every path with their
   HTML shell are caught);
3. else the HTML page, converted by :mod:`pipeline.ingest.fetch.htmlmd`.

A page that cannot be had in any form is a warning, not a failed source. The Markdown is stored byte for byte under
``pages/<source_path>`` where ``source_path`` is the fetched URL's path (``/docs/a.md`` -> ``docs/a.md``; pages on
other allowed hosts get the host as first folder). Each RawFile carries ``meta`` = ``{"llms_section": name,
"llms_optional": bool}`` (merged into the note's frontmatter). The llms.txt itself is a page too (its title,
summary, guidance and annotated links: ``llms.txt.md`` beside the pages, ``meta`` ``{"llms_index": True}``),
once at least one of its links could be fetched. A link listed both in the prose and under a section gets the
section's name.

``llms-full.txt``: when ``url`` names one, or when ``llms.txt`` is missing (404) and ``llms-full.txt`` exists, the
file is split into pages at its H1 headings (outside code fences); a ``Source: <url>`` line right after the heading
gives the page's path and URL, else a slug of the title is its path and the llms-full.txt its URL.

Conditional GET per link (ETag / Last-Modified of the URL that won last time) and of llms.txt itself.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from pipeline.common.errors import FetchError
from pipeline.common.markdown import outside_fences
from pipeline.config import Settings
from pipeline.ingest.fetch.base import atomic_write_text, now_iso, read_state, write_state
from pipeline.ingest.fetch.html import DEFAULT_MAX_PAGES, HTML_ACCEPT, make_client
from pipeline.ingest.fetch.http import HttpClient, PageError, Response, host_of, scrub, userinfo
from pipeline.ingest.fetch.pages import PageStage, revision_of, sha256, url_source_path
from pipeline.models import FetchResult, RawFile, Source

INDEX_COPY = "index.txt"          # last good llms.txt / llms-full.txt, beside pages/ (for 304 answers)
MD_ACCEPT = "text/markdown,text/x-markdown;q=0.9,text/plain;q=0.8,*/*;q=0.1"
_LINK_ITEM = re.compile(r"^\s*[-*+]\s+\[(?P<name>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<url>[^)\s]+)(?:\s+\"[^\"]*\")?\)"
                        r"(?:\s*:\s*(?P<notes>.*))?\s*$")
_INLINE_LINK = re.compile(r"(?<!!)\[(?P<name>(?:[^\[\]]|\[[^\]]*\])+)\]\((?P<url>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


class LlmsTxtError(ValueError):
    """llms.txt does not follow the format (the message names the line)."""


@dataclass(frozen=True)
class LlmsLink:
    name: str
    url: str              # absolute
    notes: str
    section: str
    optional: bool


@dataclass(frozen=True)
class LlmsSection:
    name: str
    optional: bool
    links: tuple[LlmsLink, ...]


@dataclass(frozen=True)
class LlmsTxt:
    title: str
    summary: str
    details: str                       # prose between the summary and the first H2
    sections: tuple[LlmsSection, ...]

    @property
    def links(self) -> tuple[LlmsLink, ...]:
        return tuple(link for s in self.sections for link in s.links)


def _join(base_url: str | None, url: str) -> str | None:
    """``urljoin`` that returns None for a URL Python cannot parse (e.g. ``http://[bad``): such links are skipped."""
    try:
        joined = urljoin(base_url or "", url)
        urlsplit(joined)
    except ValueError:
        return None
    return joined


def parse_llms_txt(text: str, base_url: str | None = None) -> LlmsTxt:
    """Parse an llms.txt (see module doc).

    Raises:
        LlmsTxtError: no ``# Title`` as the first non-blank line (``line N`` named).
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff").split("\n")
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not re.match(r"^#\s+\S", lines[i]):
        found = lines[i][:60] if i < len(lines) else "end of file"
        raise LlmsTxtError(f"line {i + 1}: expected the H1 title ('# Name'), found {found!r}")
    title = lines[i].lstrip("#").strip()
    i += 1
    summary: list[str] = []
    details: list[str] = []
    sections: list[LlmsSection] = []
    current: tuple[str, list[LlmsLink]] | None = None
    prose_links: list[LlmsLink] = []
    for _, line in outside_fences(lines[i:]):
        if re.match(r"^##\s+\S", line) and not line.startswith("###"):
            if current is not None:
                sections.append(_section(*current))
            current = (line.lstrip("#").strip(), [])
            continue
        if current is None:
            if line.startswith(">") and not details:
                summary.append(line.lstrip(">").strip())
            elif line.strip() or details:
                details.append(line)
                for m in _INLINE_LINK.finditer(line):      # links in the prose are pages too (not optional)
                    joined = _join(base_url, m.group("url"))
                    if joined is not None:
                        prose_links.append(LlmsLink(name=m.group("name").strip(), url=joined,
                                                    notes=line.strip(), section="", optional=False))
            continue
        name, optional = current[0], current[0].strip().lower() == "optional"
        item = _LINK_ITEM.match(line)
        if item:
            url = item.group("url").strip("<>")
            joined = _join(base_url, url)
            if joined is not None:
                current[1].append(LlmsLink(name=item.group("name").strip() or url.rstrip("/").rsplit("/", 1)[-1],
                                           url=joined,
                                           notes=(item.group("notes") or "").strip(), section=name,
                                           optional=optional))
        elif re.match(r"^\s*[-*+]\s", line):
            # tolerated variant: a list item whose link is not first ("- DuckDB has a [mechanism](url) ...")
            for m in _INLINE_LINK.finditer(line):
                joined = _join(base_url, m.group("url"))
                if joined is not None:
                    current[1].append(LlmsLink(name=m.group("name").strip(), url=joined,
                                               notes=line.strip().lstrip("-*+ ").strip(), section=name,
                                               optional=optional))
    if current is not None:
        sections.append(_section(*current))
    if prose_links:
        sections.insert(0, LlmsSection(name="", optional=False, links=tuple(prose_links)))
    return LlmsTxt(title=title, summary=" ".join(s for s in summary if s), details="\n".join(details).strip(),
                   sections=tuple(sections))


def _section(name: str, links: list[LlmsLink]) -> LlmsSection:
    return LlmsSection(name=name, optional=name.strip().lower() == "optional", links=tuple(links))


@dataclass(frozen=True)
class FullPage:
    title: str
    source_path: str
    url: str | None
    markdown: str


def _slug(title: str) -> str:
    s = re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")
    return re.sub(r"-{2,}", "-", s) or "page"


def split_llms_full(text: str, base_url: str | None = None) -> list[FullPage]:
    """Split an llms-full.txt into pages at its H1 headings (outside fences). Each page keeps its H1; a
    ``Source: <url>`` line right after the heading sets its URL and source path (else ``<slug of title>.md``);
    duplicate paths get ``-2``, ``-3``... Text before the first H1 is dropped."""
    lines = text.replace("\r\n", "\n").split("\n")
    starts: list[int] = []
    for n, line in outside_fences(lines):
        if re.match(r"^#\s+\S", line):
            starts.append(n)
    pages: list[FullPage] = []
    used: set[str] = set()
    for k, s in enumerate(starts):
        block = lines[s: starts[k + 1] if k + 1 < len(starts) else len(lines)]
        title = block[0].lstrip("#").strip()
        url = None
        j = 1
        while j < len(block) and not block[j].strip():
            j += 1
        m = re.match(r"^\s*Source:\s*(\S+)\s*$", block[j]) if j < len(block) else None
        if m:
            url = _join(base_url, m.group(1))
            del block[j]
        sp = url_source_path(url) if url and urlsplit(url).path.strip("/") else f"{_slug(title)}.md"
        base, n = sp, 2
        while sp in used:
            sp = f"{base[:-3]}-{n}.md"
            n += 1
        used.add(sp)
        pages.append(FullPage(title=title, source_path=sp, url=url, markdown="\n".join(block).strip() + "\n"))
    return pages


def markdown_candidates(url: str) -> list[str]:
    """URLs to try for a link's Markdown, in order (see module doc, steps 1-2)."""
    parts = urlsplit(url)
    path = parts.path or "/"
    low = path.lower()
    if low.endswith((".md", ".md.txt", ".markdown")):
        return [url]
    if path.endswith("/"):
        return [parts._replace(path=path + "index.md").geturl(), parts._replace(path=path + "index.html.md").geturl()]
    if low.endswith((".html", ".htm")):
        return [parts._replace(path=path + ".md").geturl(), parts._replace(path=path.rsplit(".", 1)[0] + ".md").geturl()]
    return [parts._replace(path=path + ".md", fragment="").geturl()]


def _is_markdown_response(resp: Response) -> bool:
    return not resp.is_html and not resp.body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))


def _fetch_link(client: HttpClient, link: LlmsLink, old: dict[str, Any] | None, stage: PageStage,
                own_host: str, info: str = "") -> dict[str, Any]:
    """Fetch one link into the stage; returns its page entry. Raises PageError (last cause) when nothing worked."""
    other = host_of(link.url) != own_host
    meta = {"llms_section": link.section, "llms_optional": link.optional}
    tries: list[tuple[str, str]] = []
    if old and stage.has_old(old["source_path"]):
        tries.append((old["fetched_url"], old["kind"]))
    for cand in markdown_candidates(link.url):
        if (cand, "markdown") not in tries:
            tries.append((cand, "markdown"))
    if (link.url, "html") not in tries and markdown_candidates(link.url) != [link.url]:
        tries.append((link.url, "html"))
    last: PageError | None = None
    for n, (url, kind) in enumerate(tries):
        conditional = n == 0 and old is not None and old.get("fetched_url") == url and stage.has_old(old["source_path"])
        try:
            resp = client.get(url, etag=old.get("etag") if conditional and old else None,
                              last_modified=old.get("last_modified") if conditional and old else None,
                              accept=MD_ACCEPT if kind == "markdown" else HTML_ACCEPT)
        except PageError as exc:
            if exc.transient and conditional and old is not None and stage.keep(old["source_path"]):
                return {**old, "kept": str(exc)}
            last = exc
            continue
        if resp.not_modified and conditional and old is not None:
            stage.keep(old["source_path"])
            return {**old, "meta": meta}
        if kind == "markdown":
            if not _is_markdown_response(resp):
                last = PageError(f"{url}: answered with HTML, not Markdown", url)
                continue
            data = resp.utf8_body()          # a page served as iso-8859-1 or shift_jis is stored as UTF-8
            sp = url_source_path(resp.final_url, host_prefix=other)
        else:
            if not resp.is_html:
                last = PageError(f"{url}: content type {resp.content_type or 'unknown'} is neither Markdown nor HTML",
                                 url)
                continue
            from pipeline.ingest.fetch.htmlmd import TOO_DEEP, html_to_markdown

            try:
                data = html_to_markdown(resp.html_input(), resp.final_url).markdown.encode("utf-8")
            except RecursionError:
                last = PageError(f"{url}: {TOO_DEEP}", url)
                continue
            sp = url_source_path(resp.final_url, host_prefix=other)
        if info:                    # a page's links made absolute against a URL with credentials
            data = scrub(data.decode("utf-8", "surrogateescape"), info).encode("utf-8", "surrogateescape")
        stage.write(sp, data)
        return {"source_path": sp, "fetched_url": url, "kind": kind, "etag": resp.etag,
                "last_modified": resp.last_modified, "sha256": sha256(data), "meta": meta}
    assert last is not None
    raise last


def fetch_llms_txt(source: Source, settings: Settings, client: HttpClient | None = None,
                   url: str | None = None) -> FetchResult:
    """Fetch an llms.txt source (see module doc).

    Args:
        source: an llms_txt source (or the llms_txt step of a fallback chain).
        settings: paths; pages go to ``<raw>/<name>/pages``.
        client: an HttpClient (tests); default one built from the source.
        url: overrides ``source.url`` (the fallback chain passes ``<site>/llms.txt`` for an html source).

    Returns:
        FetchResult(strategy="llms_txt"); ``stats``: requests, bytes, seconds, pages, links, optional,
        not_modified, warnings, files; ``warnings`` one line per page that was skipped or missing.

    Raises:
        FetchError: llms.txt (and llms-full.txt) unreachable or malformed, or none of its links could be fetched.

    Long: one fetch loop over the index and its linked pages with shared state (old state, page stage, counters,
    warnings), as fetch_html.
    """
    started = time.monotonic()
    index_url = url or source.url
    if not index_url:
        raise FetchError(f"source '{source.name}': kind llms_txt needs 'url' (the llms.txt URL)")
    own_host = host_of(index_url)
    info = userinfo(index_url)      # credentials in the URL: for the requests, never in a note or a warning
    hosts = {own_host, *source.allowed_hosts}
    own_client = client is None
    client = make_client(source, hosts, client)
    state = read_state(source, settings) or {}
    same = state.get("strategy") == "llms_txt" and state.get("index_url") == index_url
    old_pages: dict[str, dict[str, Any]] = state.get("pages", {}) if same else {}
    warnings: list[str] = []
    stage = PageStage(source, settings)
    try:
        index_entry, full, links, text, used_url = _read_index(source, client, index_url, state if same else {},
                                                               stage.base / INDEX_COPY)
        taken: dict[str, dict[str, Any]] = {}
        if full:
            for page in split_llms_full(text, used_url):
                data = page.markdown.encode("utf-8")
                stage.write(page.source_path, data)
                taken[page.url or page.source_path] = {"source_path": page.source_path, "fetched_url": used_url,
                                                       "kind": "llms-full", "sha256": sha256(data), "meta": {},
                                                       "url": page.url}
        else:
            max_pages = source.max_pages or DEFAULT_MAX_PAGES
            done: set[str] = set()
            listed = {}                  # a page the prose links and a section lists: the section's entry
            for link in links:
                if link.section:
                    listed.setdefault(link.url, link)
            for link in links:
                link = listed.get(link.url, link)
                if link.url in done:
                    continue
                done.add(link.url)
                if len(taken) >= max_pages:
                    warnings.append(f"source '{source.name}': stopped at max_pages={max_pages}")
                    break
                if not client.allows(link.url):
                    warnings.append(f"source '{source.name}': {link.url}: skipped, host {host_of(link.url) or '?'} "
                                    "is not allowed (add it to allowed_hosts)")
                    continue
                try:
                    entry = _fetch_link(client, link, old_pages.get(link.url), stage, own_host, info)
                except PageError as exc:
                    warnings.append(f"source '{source.name}': {link.url}: page skipped: "
                                    f"{str(exc).split(': ', 2)[-1] if str(exc).startswith('source ') else exc}")
                    continue
                if "kept" in entry:
                    warnings.append(f"source '{source.name}': {link.url}: kept the last good copy: {entry.pop('kept')}")
                if any(e["source_path"] == entry["source_path"] for e in taken.values()):
                    continue
                taken[link.url] = entry
            if not taken:
                raise FetchError(scrub(f"source '{source.name}': none of the {len(links)} link(s) of {index_url} "
                                       f"could be fetched; first problem: {warnings[0] if warnings else 'no links'}",
                                       info))
            # the llms.txt itself is a page too: its summary, its guidance and its annotated list of links
            index_sp = url_source_path(used_url)
            if not any(e["source_path"] == index_sp for e in taken.values()):
                data = scrub(text, info).encode("utf-8")
                stage.write(index_sp, data)
                taken[used_url] = {"source_path": index_sp, "fetched_url": used_url, "kind": "index",
                                   "sha256": sha256(data), "meta": {"llms_index": True}}
        files = tuple(sorted(
            (RawFile(source=source.name, source_path=e["source_path"], path=stage.final_path(e["source_path"]),
                     url=scrub((e.get("url") or e["fetched_url"]) if e.get("kind") == "llms-full" else u, info),
                     meta=dict(e.get("meta") or {}))
             for u, e in taken.items()),
            key=lambda f: f.source_path))
        revision = revision_of(taken)
        changed = not same or revision != state.get("revision")
        stats = {**client.stats, "seconds": round(time.monotonic() - started, 3), "pages": sum(1 for f in files if not f.meta.get("llms_index")),
                 "links": len(links), "optional": sum(1 for f in files if f.meta.get("llms_optional")),
                 "warnings": len(warnings), "files": len(files)}
        result = FetchResult(source=source.name, strategy="llms_txt", revision=revision, files=files,
                             changed=changed, stats=stats, warnings=tuple(scrub(w, info) for w in warnings))
        stage.commit()
    except BaseException:
        stage.abort()
        raise
    finally:
        if own_client:
            client.close()
    write_state(source, settings, result, now_iso(), {"index_url": index_url, "index": index_entry, "pages": taken})
    return result


def _read_index(source: Source, client: HttpClient, index_url: str, state: dict[str, Any], copy: Path
                ) -> tuple[dict[str, Any], bool, list[LlmsLink], str, str]:
    """(index state entry, is llms-full, links, text, URL read). Falls back to llms-full.txt on a 404.
    Conditional GET against the recorded validators; a 304 re-reads the kept copy."""
    old = state.get("index") or {}
    candidates = [index_url]
    if urlsplit(index_url).path.endswith("/llms.txt"):
        candidates.append(index_url[: -len("llms.txt")] + "llms-full.txt")
    first_error: PageError | None = None
    for url in candidates:
        conditional = old.get("url") == url and copy.is_file()
        try:
            resp = client.get(url, accept=MD_ACCEPT, etag=old.get("etag") if conditional else None,
                              last_modified=old.get("last_modified") if conditional else None)
        except PageError as exc:
            first_error = first_error or exc
            if exc.status == 404:
                continue
            break
        if resp.is_html:
            first_error = first_error or PageError(f"source '{source.name}': cannot fetch {url}: answered with "
                                                   "HTML, not an llms.txt", url)
            continue
        if resp.not_modified:
            body = copy.read_bytes()
            entry = dict(old)
        else:
            body = resp.utf8_body()
            entry = {"url": url, "etag": resp.etag, "last_modified": resp.last_modified, "sha256": sha256(body)}
            atomic_write_text(copy, body.decode("utf-8-sig", errors="replace"))
        text = body.decode("utf-8-sig", errors="replace")
        full = urlsplit(url).path.endswith("llms-full.txt")
        if full:
            return entry, True, [], text, url
        try:
            parsed = parse_llms_txt(text, url)
        except LlmsTxtError as exc:
            raise FetchError(f"source '{source.name}': {url} is not a valid llms.txt: {exc}") from None
        if not parsed.links:
            raise FetchError(f"source '{source.name}': {url} is not a valid llms.txt: it lists no links "
                             "('- [name](url)' items under '## Section' headings)")
        return entry, False, list(parsed.links), text, url
    assert first_error is not None
    raise FetchError(str(first_error)) from None
