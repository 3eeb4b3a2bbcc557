"""html (the scraping fallback): crawl a site from a start URL and/or its sitemap, convert each page to Markdown.

- Scope: the start URL's host (plus ``allowed_hosts``) and its folder as path prefix (``https://x/docs/index.html``
  -> ``/docs/``); only http(s); URLs with a query string or an asset extension are not followed; robots.txt is
  honoured (user agent ``docsvault``), with a per-host interval of ``rate_limit`` seconds (default 1.0) or the
  site's ``Crawl-delay`` if larger; at most ``max_pages`` pages (default 1000; a warning when the cap cuts).
- ``sitemap``: ``auto`` (``<start folder>/sitemap.xml``, silently skipped when missing) or a URL (an error when it
  cannot be read); ``<sitemapindex>`` files are followed one level.
- Conditional GET with the ETag / Last-Modified recorded per page: a 304 keeps the page's last Markdown and the
  links recorded with it, so an unchanged site downloads nothing (``stats.bytes == 0``).
- De-duplication: a page whose ``<link rel=canonical>`` names a page already taken is skipped; redirects land on
  their target URL.
- Each page -> :func:`pipeline.ingest.fetch.htmlmd.html_to_markdown`, saved as ``pages/<url path>.md`` (``/a/b/`` ->
  ``a/b/index.md``); ``RawFile.url`` is the page URL.
- Failures: the start page (or an explicit sitemap) unreachable, 404 or not HTML -> FetchError naming source, URL
  and cause; a single other page failing -> a warning (a transient failure keeps that page's last good copy).
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections import deque
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

from pipeline.common.errors import FetchError
from pipeline.config import Settings
from pipeline.ingest.fetch.base import now_iso, read_state, write_state
from pipeline.ingest.fetch.http import (
    REDIRECT_STATUS,
    HttpClient,
    HttpPolicy,
    PageError,
    host_of,
    scrub,
    userinfo,
)
from pipeline.ingest.fetch.pages import PageStage, revision_of, sha256, url_source_path
from pipeline.models import FetchResult, RawFile, Source

DEFAULT_MAX_PAGES = 1000
DEFAULT_RATE_LIMIT = 1.0
ASSET_EXTS = (
    ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".ico", ".css", ".js", ".mjs", ".json", ".xml", ".zip",
    ".gz", ".tgz", ".tar", ".pdf", ".mp4", ".webm", ".mp3", ".wav", ".woff", ".woff2", ".ttf", ".eot", ".map",
    ".txt", ".ipynb", ".py", ".whl", ".csv", ".parquet", ".rss", ".atom",
)
HTML_ACCEPT = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1"
#: what a page is whose redirects lead back to it (directly, or through other pages), in errors and warnings
REDIRECT_LOOP = "redirects back to itself (a redirect loop)"


def make_client(source: Source, hosts: set[str], client: HttpClient | None = None) -> HttpClient:
    """The source's HTTP client: given one (tests) or a new one with the source's rate limit and hosts."""
    if client is not None:
        return client
    rate = source.rate_limit if source.rate_limit is not None else DEFAULT_RATE_LIMIT
    return HttpClient(source=source.name, hosts=frozenset(hosts), policy=HttpPolicy(rate_limit=rate),
                      token_env=source.token_env)


def scope_of(start_url: str) -> tuple[str, str]:
    """(origin, path prefix) of a start URL: ``https://x/docs/a.html`` -> (``https://x``, ``/docs/``)."""
    parts = urlsplit(start_url)
    path = parts.path or "/"
    prefix = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
    return f"{parts.scheme}://{parts.netloc}", prefix


def normalize_url(url: str) -> str:
    """Fragment dropped; ``…/index.html`` -> ``…/``; empty path -> ``/``."""
    url = urldefrag(url)[0]
    parts = urlsplit(url)
    path = parts.path or "/"
    if path.endswith(("/index.html", "/index.htm")):
        path = path.rsplit("/", 1)[0] + "/"
    return parts._replace(path=path, fragment="").geturl()


def _twin_taken(url: str, digest: str | None, taken: dict[str, dict[str, Any]]) -> bool:
    """Whether the crawl already took this page under its other spelling, ``/page`` for ``/page/`` or the reverse,
    with the same converted text (``digest``: its sha256): a server that answers both without a redirect serves one
    page twice, and it would be two notes. Different text under the two spellings stays two notes."""
    parts = urlsplit(url)
    if not digest or parts.path in ("", "/"):
        return False
    path = parts.path[:-1] if parts.path.endswith("/") else parts.path + "/"
    twin = taken.get(parts._replace(path=path).geturl())
    return twin is not None and twin.get("sha256") == digest


class _Scope:
    def __init__(self, start_url: str, extra_hosts: tuple[str, ...]) -> None:
        self.origin, self.prefix = scope_of(start_url)
        self.hosts = {host_of(start_url), *extra_hosts}

    def follows(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or parts.query:
            return False
        if host_of(url) not in self.hosts:
            return False
        if host_of(url) == host_of(self.origin) and not (parts.path or "/").startswith(self.prefix):
            return False
        return not parts.path.lower().endswith(ASSET_EXTS)


def parse_sitemap(data: bytes) -> tuple[list[str], list[str]]:
    """(page URLs, nested sitemap URLs) of a sitemap or sitemap index. Raises ValueError when not a sitemap."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ValueError(f"not XML: {exc}") from None
    tag = root.tag.rsplit("}", 1)[-1]
    locs = [el.text.strip() for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "loc" and el.text]
    if tag == "urlset":
        return locs, []
    if tag == "sitemapindex":
        return [], locs
    raise ValueError(f"root element <{tag}> is neither <urlset> nor <sitemapindex>")


def _sitemap_urls(source: Source, client: HttpClient, start: str, warnings: list[str]) -> list[str]:
    if not source.sitemap:
        return []
    explicit = source.sitemap != "auto"
    url = source.sitemap if explicit else urljoin(scope_of(start)[0] + scope_of(start)[1], "sitemap.xml")
    pages: list[str] = []
    queue = [(url, 0)]
    while queue:
        current, depth = queue.pop(0)
        try:
            resp = client.get(current, accept="application/xml,text/xml;q=0.9,*/*;q=0.1")
            found, nested = parse_sitemap(resp.body)
        except (PageError, ValueError) as exc:
            if explicit and current == url:
                raise FetchError(f"source '{source.name}': cannot read sitemap {current}: {exc}") from None
            if current != url or explicit:
                warnings.append(f"source '{source.name}': sitemap {current} skipped: {exc}")
            continue
        pages.extend(found)
        if depth < 1:
            queue.extend((n, depth + 1) for n in nested)
    return pages


def fetch_html(source: Source, settings: Settings, client: HttpClient | None = None,
               start_url: str | None = None) -> FetchResult:
    """Crawl and convert an HTML site (see module doc).

    Args:
        source: an html source (or the html step of a fallback chain).
        settings: paths; pages go to ``<raw>/<name>/pages``.
        client: an HttpClient to use (tests); default one built from the source.
        start_url: overrides ``source.url`` (the fallback chain passes the site folder of an llms.txt URL).

    Returns:
        FetchResult(strategy="html"); ``stats``: requests, bytes, seconds, pages, not_modified, warnings, files.

    Raises:
        FetchError: start page unreachable / not HTML, explicit sitemap unreadable, no page converted.

    Long: one crawl loop whose state (queue, seen URLs, validators of conditional requests, the page stage,
    counters) every branch updates; split, the pieces would pass that state around without reading better alone.
    """
    started = time.monotonic()
    start = start_url or source.url
    if not start:
        raise FetchError(f"source '{source.name}': kind html needs 'url' (the start page)")
    scope = _Scope(start, source.allowed_hosts)
    info = userinfo(start)          # credentials in the URL: for the requests, never in a note or a warning
    own_client = client is None
    client = make_client(source, scope.hosts, client)
    state = read_state(source, settings) or {}
    same = state.get("strategy") == "html"
    old_pages: dict[str, dict[str, Any]] = state.get("pages", {}) if same else {}
    old_aliases: dict[str, str] = state.get("aliases", {}) if same else {}
    aliases: dict[str, str] = {}
    max_pages = source.max_pages or DEFAULT_MAX_PAGES
    if same and isinstance(state.get("robots"), dict):
        client.robots_cache.update(state["robots"])
    warnings: list[str] = []
    stage = PageStage(source, settings)
    try:
        start_norm = normalize_url(start)
        # errors about the start page name it as configured (`…/index.html`), and the URL crawled for it when that
        # differs (normalize_url: `…/`, the key every page is known by)
        start_named = start if start_norm in (start, f"{start}/") else f"{start} (requested as {start_norm})"
        queue: deque[str] = deque([start_norm])
        for u in _sitemap_urls(source, client, start, warnings):
            if scope.follows(u):
                queue.append(normalize_url(u))
        seen: set[str] = set(queue)
        taken: dict[str, dict[str, Any]] = {}
        canon_taken: set[str] = set()
        capped = False
        while queue:
            url = queue.popleft()
            if len(taken) >= max_pages:
                capped = True
                break
            if not client.robots_allows(url):
                if url == start_norm:
                    raise FetchError(f"source '{source.name}': robots.txt of {scope.origin} disallows {start_named}")
                warnings.append(f"source '{source.name}': {url}: skipped, disallowed by robots.txt")
                continue
            alias = old_aliases.get(url)
            if alias and alias != url:                       # a known redirect: go straight to its target
                aliases[url] = alias
                if alias not in seen and scope.follows(alias):
                    seen.add(alias)
                    queue.append(alias)
                continue
            old = old_pages.get(url)
            has_old = bool(old) and stage.has_old(old["source_path"])
            try:
                resp = client.get(url, etag=old.get("etag") if has_old and old else None,
                                  last_modified=old.get("last_modified") if has_old and old else None,
                                  accept=HTML_ACCEPT, follow=lambda u: normalize_url(u) not in seen)
            except PageError as exc:
                if url == start_norm:
                    raise FetchError(f"source '{source.name}': cannot fetch start page {start_named}: "
                                     f"{str(exc).split(': ', 2)[-1]}") from None
                if exc.transient and has_old and old is not None and stage.keep(old["source_path"]):
                    taken[url] = dict(old)
                    warnings.append(f"{exc} (kept the last good copy)")
                else:
                    warnings.append(str(exc))
                continue
            final = normalize_url(resp.final_url)
            if resp.status in REDIRECT_STATUS and final == url:     # a -> b -> a: declined, a page seen: a loop
                if url == start_norm:
                    raise FetchError(f"source '{source.name}': start page {start_named} {REDIRECT_LOOP}: fix the "
                                     "site's redirects, or set url: to the page they should end at")
                warnings.append(f"source '{source.name}': cannot fetch {url}: redirect loop (its redirects lead "
                                f"back to it)")
                continue
            if final != url:
                aliases[url] = final
                if 300 <= resp.status < 400 or final in taken or not scope.follows(final):
                    continue                                 # redirect to a page we have (or will) fetch
                seen.add(final)
            if resp.not_modified and old is not None:
                if _twin_taken(final, old.get("sha256"), taken):
                    continue
                stage.keep(old["source_path"])
                entry = dict(old)
                links = list(old.get("links", []))
                canonical = old.get("canonical")
            else:
                if not resp.is_html:
                    if url == start_norm:
                        ctype = resp.content_type or "of unknown type"
                        raise FetchError(f"source '{source.name}': start page {start_named} is {ctype}, not HTML")
                    warnings.append(f"source '{source.name}': {url}: skipped, content type "
                                    f"{resp.content_type or 'unknown'} is not HTML")
                    continue
                from pipeline.ingest.fetch.htmlmd import TOO_DEEP, html_to_markdown

                try:
                    doc = html_to_markdown(resp.html_input(), final)
                except RecursionError:                       # one such page failed the whole site's fetch
                    warnings.append(f"source '{source.name}': {url}: skipped, {TOO_DEEP}")   # as build names it
                    continue
                if doc.refresh and doc.refresh != final:     # a redirect stub: follow it, keep no note
                    target = normalize_url(doc.refresh)
                    aliases[url] = target
                    if target not in seen and scope.follows(target):
                        seen.add(target)
                        queue.append(target)
                    continue
                canonical = normalize_url(doc.canonical) if doc.canonical and scope.follows(doc.canonical) else None
                links = [normalize_url(u) for u in doc.links]
                sp = url_source_path(final, host_prefix=host_of(final) != host_of(scope.origin))
                data = scrub(doc.markdown, info).encode("utf-8")
                entry = {"source_path": sp, "fetched_url": final, "etag": resp.etag,
                         "last_modified": resp.last_modified, "sha256": sha256(data), "kind": "html",
                         "title": doc.title, "canonical": canonical, "links": links}
                if canonical and canonical != final and canonical in canon_taken:
                    aliases[url] = canonical                   # duplicate of a page already taken
                    continue
                if sp in stage.paths or _twin_taken(final, entry["sha256"], taken):
                    continue
                stage.write(sp, data)
            if canonical:
                canon_taken.add(canonical)
                seen.add(canonical)
            canon_taken.add(final)
            taken[final] = entry
            for link in links:
                if link not in seen and scope.follows(link):
                    seen.add(link)
                    queue.append(link)
        if capped:
            warnings.append(f"source '{source.name}': stopped at max_pages={max_pages}; "
                            f"{len(queue) + 1} more page(s) not fetched")
        if not taken:
            raise FetchError(f"source '{source.name}': no HTML page could be fetched from {start}")
        files = tuple(sorted(
            (RawFile(source=source.name, source_path=e["source_path"], path=stage.final_path(e["source_path"]),
                     url=scrub(u, info)) for u, e in taken.items()),
            key=lambda f: f.source_path))
        revision = revision_of(taken)
        changed = revision != state.get("revision") or state.get("strategy") != "html"
        stats = {**client.stats, "seconds": round(time.monotonic() - started, 3), "pages": len(files),
                 "warnings": len(warnings), "files": len(files)}
        result = FetchResult(source=source.name, strategy="html", revision=revision, files=files, changed=changed,
                             stats=stats, warnings=tuple(scrub(w, info) for w in warnings))
        stage.commit()
    except BaseException:
        stage.abort()
        raise
    finally:
        if own_client:
            client.close()
    write_state(source, settings, result, now_iso(), {"start_url": start, "pages": taken, "aliases": aliases,
                                                     "robots": client.robots_cache})
    return result
