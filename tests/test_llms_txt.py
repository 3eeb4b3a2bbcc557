"""llms.txt: spec parsing (real samples), Markdown-first page fetching, llms-full.txt, fallback chain; integration:
the real DuckDB llms.txt against the loopback DuckDB tree and prefect-site.llms.txt against a .md twin handler."""

from __future__ import annotations

import dataclasses
import http.server
import os
import time
from email.utils import formatdate
from pathlib import Path

import pytest

from pipeline.common.errors import FetchError
from pipeline.config import Settings
from pipeline.ingest.fetch import fetch_source, load_fetch_result
from pipeline.ingest.fetch.llms_txt import LlmsTxtError, markdown_candidates, parse_llms_txt, split_llms_full
from pipeline.ingest.normalize import normalize_source
from pipeline.models import Source
from tests.conftest import SHARED, shared_path
from tests.loopback import serve

SAMPLES = SHARED / "corpora" / "llms-txt-samples"


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                    vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals")


SPEC = """# Demo

> One line summary
> continued.

Some prose with a [prose link](/docs/prose).

## Docs

- [Quick start](https://demo.example/docs/quick.html.md): Start here
- [Guide](guide/): The guide
Prose inside a section is tolerated.
- DuckDB-style item with an [inline link](/docs/inline) in the text

```
- [not a link](/in/code)
```

## Optional

- [Extra](https://other.example/x.md)
"""


def test_parse_spec_shape():
    doc = parse_llms_txt(SPEC, "https://demo.example/llms.txt")
    assert doc.title == "Demo" and doc.summary == "One line summary continued."
    assert [s.name for s in doc.sections] == ["", "Docs", "Optional"]
    assert [(l.name, l.url, l.notes, l.optional) for l in doc.links] == [
        ("prose link", "https://demo.example/docs/prose", "Some prose with a [prose link](/docs/prose).", False),
        ("Quick start", "https://demo.example/docs/quick.html.md", "Start here", False),
        ("Guide", "https://demo.example/guide/", "The guide", False),
        ("inline link", "https://demo.example/docs/inline",
         "DuckDB-style item with an [inline link](/docs/inline) in the text", False),
        ("Extra", "https://other.example/x.md", "", True),
    ]
    with pytest.raises(LlmsTxtError, match=r"line 1: expected the H1 title"):
        parse_llms_txt("no title here\n- [a](b)\n")


@pytest.mark.parametrize("name, title, sections, n_links, n_optional", [
    ("duckdb-web.llms.txt", "DuckDB", ["", "Clients", "Extensions", "Examples", "Optional"], 18, 2),
    ("fasthtml.llms.txt", "FastHTML", ["Docs", "API", "Examples", "Optional"], None, None),
    ("llms-txt.llms.txt", "llms.txt", ["Docs"], 3, 0),
    ("fastcore.llms.txt", "fastcore", None, None, None),
    ("prefect-site.llms.txt", "Prefect", None, 781, 609),
])
def test_real_samples_parse(name, title, sections, n_links, n_optional):
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    doc = parse_llms_txt(path.read_text(encoding="utf-8"), "https://site.example/llms.txt")
    assert doc.title.lower() == title.lower()
    assert doc.links and all(l.url.startswith(("https://", "http://")) for l in doc.links)
    if sections is not None:
        assert [s.name for s in doc.sections] == sections
    if n_links is not None:
        assert len(doc.links) == n_links
        assert sum(l.optional for l in doc.links) == n_optional


def test_markdown_candidates():
    assert markdown_candidates("https://x/a/b") == ["https://x/a/b.md"]
    assert markdown_candidates("https://x/a/b.md") == ["https://x/a/b.md"]
    assert markdown_candidates("https://x/a/b.html.md.txt".replace(".html", "")) == ["https://x/a/b.md.txt"]
    assert markdown_candidates("https://x/a/") == ["https://x/a/index.md", "https://x/a/index.html.md"]
    assert markdown_candidates("https://x/a.html") == ["https://x/a.html.md", "https://x/a.md"]


def test_split_llms_full():
    text = ("intro dropped\n# First\nSource: https://s.example/docs/first\n\nBody 1\n```\n# not a page\n```\n"
            "# Second page\n\nBody 2\n# Second page\nagain\n")
    pages = split_llms_full(text, "https://s.example/llms-full.txt")
    assert [(p.title, p.source_path, p.url) for p in pages] == [
        ("First", "docs/first.md", "https://s.example/docs/first"),
        ("Second page", "second-page.md", None),
        ("Second page", "second-page-2.md", None),
    ]
    assert pages[0].markdown == "# First\n\nBody 1\n```\n# not a page\n```\n"


class SiteHandler(http.server.BaseHTTPRequestHandler):
    """/llms.txt, a Markdown twin (/docs/a.md), an HTML-only page (/docs/b), an SPA-style HTML 200 for any .md."""

    stamp = formatdate(time.time() - 60, usegmt=True)
    pages: dict[str, tuple[str, bytes]] = {}

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        found = SiteHandler.pages.get(self.path)
        if found is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("If-Modified-Since") == SiteHandler.stamp:
            self.send_response(304)
            self.end_headers()
            return
        ctype, body = found
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Last-Modified", SiteHandler.stamp)
        self.end_headers()
        self.wfile.write(body)


def _site_pages(base: str) -> dict[str, tuple[str, bytes]]:
    llms = (f"# Site\n\n> Demo.\n\n## Docs\n\n- [A]({base}/docs/a): twin\n- [B]({base}/docs/b): html only\n"
            f"- [C]({base}/docs/c): missing\n- [D](/docs/d.md): direct\n\n## Optional\n\n- [E]({base}/docs/e)\n"
            "- [X](https://elsewhere.example/x.md)\n- [](/docs/d.md)\n")
    return {
        "/llms.txt": ("text/plain", llms.encode()),
        "/docs/a.md": ("text/markdown", b"---\ntitle: A page\n---\n# A\n\nTwin body.\n"),
        "/docs/b": ("text/html", b"<html><nav>menu</nav><main><h1>B</h1><p>From <a href='a'>HTML</a>.</p></main>"),
        "/docs/d.md": ("text/markdown; charset=utf-8", b"# D\n"),
        "/docs/e.md": ("text/html", b"<html><body>SPA shell</body></html>"),
        "/docs/e": ("text/html", b"<html><main><h1>E</h1><p>optional page</p></main></html>"),
    }


def test_fetch_markdown_first_warnings_optional_and_incremental(tmp_path):
    settings = _settings(tmp_path)
    with serve(handler=SiteHandler) as (base, requests):
        SiteHandler.pages = _site_pages(base)
        source = Source(name="site", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0)
        result = fetch_source(source, settings)
        assert result.strategy == "llms_txt" and result.changed
        by_sp = {f.source_path: f for f in result.files}
        assert sorted(by_sp) == ["docs/a.md", "docs/b.md", "docs/d.md", "docs/e.md", "llms.txt.md"]
        assert by_sp["llms.txt.md"].path.read_bytes() == SiteHandler.pages["/llms.txt"][1]     # the index too
        assert (by_sp["llms.txt.md"].url, by_sp["llms.txt.md"].meta) == (f"{base}/llms.txt", {"llms_index": True})
        assert by_sp["docs/a.md"].path.read_bytes() == SiteHandler.pages["/docs/a.md"][1]
        assert by_sp["docs/b.md"].path.read_text() == f"# B\n\nFrom [HTML]({base}/docs/a).\n"
        assert by_sp["docs/e.md"].path.read_text() == "# E\n\noptional page\n"
        assert by_sp["docs/a.md"].url == f"{base}/docs/a"
        assert by_sp["docs/e.md"].meta == {"llms_section": "Optional", "llms_optional": True}
        assert by_sp["docs/a.md"].meta == {"llms_section": "Docs", "llms_optional": False}
        assert result.warnings == (
            f"source 'site': {base}/docs/c: page skipped: HTTP 404 Not Found",
            ("source 'site': https://elsewhere.example/x.md: skipped, host elsewhere.example is not allowed "
            "(add it to allowed_hosts)"),
        )
        assert result.stats["pages"] == 4 and result.stats["warnings"] == 2 and result.stats["bytes"] > 0
        requests.clear()
        again = fetch_source(source, settings)
        assert again.changed is False and again.stats["bytes"] == 0 and again.revision == result.revision
        assert "/docs/e.md" not in requests          # the winning URL is asked first, conditionally
    notes = normalize_source(source, load_fetch_result(source, settings).files, "2026-01-01T00:00:00+00:00").notes
    note_e = next(n for n in notes if n.source_path == "docs/e.md")
    assert note_e.frontmatter["llms_optional"] is True and note_e.frontmatter["llms_section"] == "Optional"
    assert next(n for n in notes if n.source_path == "docs/a.md").title == "A page"
    loaded = dataclasses.replace(source, site_url=f"{base}/")     # as sources.yaml defaults it: the llms.txt's folder
    index = next(n for n in normalize_source(loaded, load_fetch_result(source, settings).files,
                                             "2026-01-01T00:00:00+00:00").notes if n.source_path == "llms.txt.md")
    assert index.title == "Site" and index.frontmatter["llms_index"] is True
    assert index.body.startswith(f"# Site\n\n> Demo.\n\n## Docs\n\n- [[site/docs/a|A]]: twin\n- [[site/docs/b|B]]: html only\n"
                                 f"- [C]({base}/docs/c): missing\n")


def test_malformed_or_missing_llms_txt_fails_and_keeps_last_copy(tmp_path):
    settings = _settings(tmp_path)
    with serve(handler=SiteHandler) as (base, _):
        SiteHandler.pages = _site_pages(base)
        source = Source(name="site", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0)
        first = fetch_source(source, settings)
        SiteHandler.pages["/llms.txt"] = ("text/plain", b"not an llms file\n")
        SiteHandler.stamp = formatdate(time.time(), usegmt=True)
        with pytest.raises(FetchError, match=rf"^source 'site': {base}/llms.txt is not a valid llms.txt: line 1"):
            fetch_source(source, settings)
        del SiteHandler.pages["/llms.txt"]
        with pytest.raises(FetchError, match=rf"^source 'site': cannot fetch {base}/llms.txt: HTTP 404"):
            fetch_source(source, settings)
    kept = load_fetch_result(source, settings)
    assert kept is not None and kept.files == first.files and all(f.path.is_file() for f in kept.files)


def test_llms_full_used_when_llms_txt_missing(tmp_path):
    with serve(handler=SiteHandler) as (base, _):
        SiteHandler.pages = {"/llms-full.txt": ("text/plain", f"# One\nSource: {base}/docs/one\n\nx\n# Two\ny\n".encode())}
        result = fetch_source(Source(name="full", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0),
                              _settings(tmp_path))
    # a page without a `Source:` line is at the llms-full.txt's URL (its note said {base}/two, a page no one has)
    assert [(f.source_path, f.url) for f in result.files] == [("docs/one.md", f"{base}/docs/one"),
                                                              ("two.md", f"{base}/llms-full.txt")]
    assert result.files[0].path.read_text() == "# One\n\nx\n"


def test_fallback_chain_records_winner(tmp_path):
    with serve(handler=SiteHandler) as (base, _):
        SiteHandler.pages = {"/docs/": ("text/html", b"<html><main><h1>Home</h1><p>hi</p></main></html>")}
        source = Source(name="chain", kind="llms_txt", url=f"{base}/docs/", strategies=("llms_txt", "html"),
                        rate_limit=0)
        result = fetch_source(source, _settings(tmp_path))
    assert result.strategy == "html" and [f.source_path for f in result.files] == ["docs/index.md"]
    assert result.warnings[0].startswith(f"source 'chain': strategy llms_txt: source 'chain': cannot fetch "
                                         f"{base}/docs/llms-full.txt: HTTP 404") or "llms_txt" in result.warnings[0]
    assert result.stats["fallbacks"] == 1


# ---- integration: real files

@pytest.mark.integration
def test_duckdb_llms_txt_against_loopback_tree(tmp_path):
    corpus = shared_path("corpora", "duckdb")
    site = tmp_path / "site"
    site.mkdir()
    os.symlink(corpus / "docs", site / "docs")
    settings = _settings(tmp_path)
    with serve(site) as (base, _):
        text = (SAMPLES / "duckdb-web.llms.txt").read_text(encoding="utf-8").replace("https://duckdb.org", base)
        (site / "llms.txt").write_text(text, encoding="utf-8")
        source = Source(name="duckdb", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0, format="jekyll")
        result = fetch_source(source, settings)
        links = [l for l in parse_llms_txt(text, f"{base}/llms.txt").links if l.url.startswith(base)]
        assert len({l.url for l in links}) == 15
        assert len(result.files) == 13 and result.stats["pages"] == 12
        for f in result.files:
            if f.source_path == "llms.txt.md":
                assert f.path.read_text(encoding="utf-8") == text
                continue
            assert f.path.read_bytes() == (corpus / f.source_path).read_bytes(), f.source_path
        missing = [w for w in result.warnings if "page skipped: HTTP 404" in w]
        assert len(missing) == 3 and all("/20" in w for w in missing)
        again = fetch_source(source, settings)
        assert again.stats["bytes"] == 0 and again.changed is False and again.stats["seconds"] < 2


class PrefectHandler(http.server.BaseHTTPRequestHandler):
    """/llms.txt from ``llms``; /v3/<page>.md from the corpus file docs/v3/<page>.mdx (ETag + 304)."""

    root: Path = Path()
    llms: str = ""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/llms.txt":
            body, ctype = PrefectHandler.llms.encode(), "text/plain"
        elif self.path.startswith("/v3/") and self.path.endswith(".md") and ".." not in self.path:
            file = PrefectHandler.root / (self.path[1:-3] + ".mdx")
            if not file.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body, ctype = file.read_bytes(), "text/markdown"
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        etag = f'"{hash(body) & 0xffffffff:x}"'
        if self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.integration
def test_prefect_llms_txt_markdown_twins(tmp_path):
    PrefectHandler.root = shared_path("corpora", "prefect", "docs")
    settings = _settings(tmp_path)
    with serve(handler=PrefectHandler) as (base, _):
        text = (SAMPLES / "prefect-site.llms.txt").read_text(encoding="utf-8").replace("https://docs.prefect.io", base)
        source = Source(name="prefect", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0, format="mdx")
        PrefectHandler.llms = text
        result = fetch_source(source, settings)
        again = fetch_source(source, settings)
    assert again.stats["bytes"] == 0 and again.changed is False
    notes = normalize_source(source, result.files, "2026-01-01T00:00:00+00:00").notes
    assert len(notes) >= 0.99 * 781
    optional = [n for n in notes if n.frontmatter.get("llms_optional") is True]
    assert len(optional) >= 0.99 * 609 and all(n.source_path.startswith("v3/api-ref/") for n in optional)
    assert all(n.frontmatter["llms_section"] != "Optional" for n in notes
               if n not in optional and n.source_path != "llms.txt.md")


def test_a_page_that_failed_is_named_as_not_fetched_not_as_an_attachment(tmp_path):
    """A new user's finding: a 404 page of an llms.txt was reported by the build as "1 attachment(s)/link(s)
    not copied". Now the vault stage counts no page as an attachment, and the build names the pages not
    fetched, with their cause (HTTP status without its reason phrase) and URL."""
    from types import SimpleNamespace

    from pipeline import stages as build
    from pipeline.cli import vault_lines
    from pipeline.service import pages_not_fetched_line

    settings = _settings(tmp_path)
    with serve(handler=SiteHandler) as (base, _):
        SiteHandler.pages = _site_pages(base)
        source = Source(name="site", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0)
        fetched = build.fetch_stage(settings, source)
    build.normalize_stage(settings, source)
    vault = build.vault_stage(settings, source)
    assert vault.attachments_skipped == 0 and vault_lines("site", vault.as_dict()) == []
    st = SimpleNamespace(name="site", metadata={"raw_docs": fetched.as_dict()})
    assert pages_not_fetched_line(st) == (
        f"site: 2 page(s) not fetched (HTTP 404: {base}/docs/c; host elsewhere.example is not allowed "
        "(add it to allowed_hosts): https://elsewhere.example/x.md)")
    html = SimpleNamespace(name="h", metadata={"raw_docs": {"warnings": 30, "warning_lines": [
        ("source 'h': cannot fetch https://a.example/x: HTTP 500 Internal Server Error (kept the last good "
        "copy)"),
        "source 'h': https://a.example/y: skipped, disallowed by robots.txt",
        "source 'h': cannot fetch https://a.example/z: HTTP 404 Not Found",
        "source 'h': cannot fetch https://a.example/w: HTTP 410 Gone"]}})
    assert pages_not_fetched_line(html) == (
        "h: at least 4 page(s) not fetched (HTTP 500: https://a.example/x; disallowed by robots.txt: "
        "https://a.example/y; HTTP 404: https://a.example/z; … and 1 more)")


def test_pages_in_the_charset_their_server_declares_are_stored_as_utf8(tmp_path):
    """Before session 40 a page served as ``text/markdown; charset=iso-8859-1`` (or shift_jis) was stored as its
    bytes, and normalize skipped it: "not valid UTF-8 …; re-save the file as UTF-8", which nobody can do to a web
    page. The declared charset is used; a page that names its own (``<meta charset>``) keeps it."""
    settings = _settings(tmp_path)
    with serve(handler=SiteHandler) as (base, _):
        SiteHandler.pages = {
            "/llms.txt": ("text/plain; charset=iso-8859-1",
                          (f"# Site\n\n> Caf\u00e9 docs.\n\n## Docs\n\n- [L]({base}/l.md): latin-1\n"
                           f"- [J]({base}/j.md): shift_jis\n- [H]({base}/h): html, header charset only\n"
                           f"- [M]({base}/m): html with its own meta\n- [N]({base}/n.md): none declared\n"
                           ).encode("iso-8859-1")),
            "/l.md": ("text/markdown; charset=ISO-8859-1", "# Caf\u00e9\n\nna\u00efve cr\u00e8me\n".encode("latin-1")),
            "/j.md": ('text/markdown; charset="Shift_JIS"', "# 設定\n\n設定ファイルを編集します。\n".encode("shift_jis")),
            "/h.md": ("text/html", b"<html><body>SPA shell</body></html>"),
            "/h": ("text/html; charset=windows-1252",
                   "<html><main><h1>Stra\u00dfe</h1><p>\u201cquoted\u201d</p></main></html>".encode("cp1252")),
            "/m.md": ("text/html", b"<html><body>SPA shell</body></html>"),
            "/m": ("text/html; charset=iso-8859-1",
                   '<html><head><meta charset="utf-8"></head><main><h1>M\u00fcnchen</h1></main></html>'.encode()),
            "/n.md": ("text/markdown", "# N\n\ncaf\u00e9\n".encode("latin-1")),
        }
        source = Source(name="site", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0)
        result = fetch_source(source, settings)
    by_sp = {f.source_path: f.path.read_bytes() for f in result.files}
    assert by_sp["l.md"] == "# Caf\u00e9\n\nna\u00efve cr\u00e8me\n".encode()
    assert by_sp["j.md"] == "# 設定\n\n設定ファイルを編集します。\n".encode()
    assert by_sp["h.md"] == "# Stra\u00dfe\n\n\u201cquoted\u201d\n".encode()
    assert by_sp["m.md"] == "# M\u00fcnchen\n".encode()
    assert by_sp["n.md"] == "# N\n\ncaf\u00e9\n".encode("latin-1")      # no charset: as sent, normalize names it
    notes = normalize_source(source, load_fetch_result(source, settings).files, "2026-01-01T00:00:00+00:00")
    assert sorted(n.title for n in notes.notes) == sorted(["Caf\u00e9", "M\u00fcnchen", "Stra\u00dfe", "設定", "Site"])
    assert notes.errors == [("source 'site': n.md: not valid UTF-8 (byte 8: invalid continuation byte); re-save the "
                             "file as UTF-8")]


def test_credentials_in_the_llms_txt_url_stay_out_of_notes_and_warnings(tmp_path):
    """A relative link of an llms.txt fetched as ``http://bob:hunter2@host/llms.txt`` resolves with the credentials;
    before session 40 they went into the note's ``url:`` frontmatter and the build's warning lines."""
    settings = _settings(tmp_path)
    with serve(handler=SiteHandler) as (base, _):
        SiteHandler.pages = {
            "/llms.txt": ("text/plain", (b"# Site\n\n## Docs\n\n- [R](r.md): relative\n- [G](gone.md): missing\n"
                                        b"- [H](h): html\n")),
            "/r.md": ("text/markdown", b"# R\n\nrelative page\n"),
            "/h.md": ("text/html", b"<html><body>SPA shell</body></html>"),
            "/h": ("text/html", b"<html><main><h1>H</h1><p><a href='r.md'>r</a></p></main></html>"),
        }
        source = Source(name="site", kind="llms_txt", url=f"{base.replace('http://', 'http://bob:hunter2@')}/llms.txt",
                        rate_limit=0)
        result = fetch_source(source, settings)
    assert [(f.source_path, f.url) for f in result.files] == [("h.md", f"{base}/h"), ("llms.txt.md", f"{base}/llms.txt"),
                                                              ("r.md", f"{base}/r.md")]
    assert result.files[0].path.read_text() == f"# H\n\n[r]({base}/r.md)\n"
    assert result.warnings == (f"source 'site': {base}/gone.md: page skipped: HTTP 404 Not Found",)


def test_a_utf8_page_served_with_a_legacy_charset_stays_utf8():
    """A review finding (session 40): since pages are decoded in their server's declared charset, a UTF-8 page
    served as ``charset=iso-8859-1`` (a server's default for text files, common) was stored as mojibake (``café``
    as ``cafÃ©``) with no error, where before it was stored right. A body that is valid UTF-8 is kept as it is, as
    Latin-1 or Shift_JIS text almost never is; one that is not is decoded in the declared charset, as before."""
    from pipeline.ingest.fetch.http import Response

    def body(data: bytes, charset: str) -> bytes:
        return Response("u", "u", 200, data, "text/markdown", None, None, charset).utf8_body()

    assert body("# Caf\u00e9 \u2014 \u8a2d\u5b9a\n".encode(), "iso-8859-1") == "# Caf\u00e9 \u2014 \u8a2d\u5b9a\n".encode()
    assert body("# Caf\u00e9\n".encode(), "shift_jis") == "# Caf\u00e9\n".encode()
    assert body("# Caf\u00e9\n".encode("latin-1"), "iso-8859-1") == "# Caf\u00e9\n".encode()
    assert body("# \u8a2d\u5b9a\n".encode("shift_jis"), "shift_jis") == "# \u8a2d\u5b9a\n".encode()
    html = Response("u", "u", 200, "<p>Stra\u00dfe</p>".encode(), "text/html", None, None, "windows-1252")
    assert html.html_input() == "<p>Stra\u00dfe</p>"


def test_a_page_linked_in_the_prose_and_listed_in_a_section_gets_the_sections_name(tmp_path):
    """An llms.txt whose prose links its quick start ("Some prose with a [quick start](docs/quick.md) link.") and
    lists it under `## Docs`: the note said `llms_section: ''`; it now says `Docs`."""
    settings = _settings(tmp_path)
    with serve(handler=SiteHandler) as (base, _):
        SiteHandler.pages = {
            "/llms.txt": ("text/plain", (b"# Kiwi\n\nRead the [quick start](q.md) first.\n\n## Docs\n\n"
                                        b"- [Quick start](q.md): start here\n")),
            "/q.md": ("text/markdown", b"# Quick start\n"),
        }
        source = Source(name="site", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0)
        result = fetch_source(source, settings)
    assert [(f.source_path, f.meta) for f in result.files] == [
        ("llms.txt.md", {"llms_index": True}), ("q.md", {"llms_section": "Docs", "llms_optional": False})]
