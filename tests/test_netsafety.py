"""Network safety of fetched content (issue 8, acceptance 4): an llms.txt whose links point at other hosts, file://,
a redirect to another host, a 1 GB response, a gzip bomb and a slow drip — none is fetched beyond the limits, and
every one is named in the fetch's warnings. Everything runs against loopback servers."""

from __future__ import annotations

import http.server
import time
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.ingest.fetch import fetch_source
from pipeline.ingest.fetch.http import HttpClient, HttpPolicy, PageError
from pipeline.models import Source
from tests.loopback import ScriptedHandler, serve

GB = 1 << 30


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                    vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals")


class Hostile(ScriptedHandler):
    """The llms.txt site: one good page, links elsewhere, a cross-host redirect and an endless body."""

    content_type = "text/markdown"
    other = ""                     # base URL of the other server (set by the test)
    sent: dict[str, int] = {}      # path -> body bytes written before the client hung up

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/llms.txt":
            text = (
                "# Hostile\n\n> test\n\n## Docs\n\n"
                "- [Good](/docs/good.md)\n"
                f"- [Elsewhere]({self.other}/docs/stolen.md)\n"
                "- [Local file](file:///etc/passwd)\n"
                "- [Redirect](/docs/redirect.md)\n"
                "- [Huge](/docs/huge.md)\n"
                "- [Declared huge](/docs/declared.md)\n"
                "- [Bomb](/docs/bomb.md)\n"
            )
            self._send(200, text.encode(), "text/plain")
        elif self.path == "/docs/good.md":
            self._send(200, b"# Good\n\nA good page.\n")
        elif self.path.startswith("/docs/redirect"):
            self._send(302, Location=f"{self.other}/docs/stolen.md")
        elif self.path.startswith("/docs/huge"):
            # 1 GB, no Content-Length: streamed until the client stops reading
            self.send_response(200)
            self.send_header("Content-Type", "text/markdown")
            self.end_headers()
            block = b"x" * 65536
            sent = 0
            try:
                while sent < GB:
                    self.wfile.write(block)
                    sent += len(block)
            except OSError:
                pass
            Hostile.sent[self.path] = sent
        elif self.path.startswith("/docs/declared"):
            self.send_response(200)
            self.send_header("Content-Type", "text/markdown")
            self.send_header("Content-Length", str(GB))
            self.end_headers()
            try:
                self.wfile.write(b"y" * 65536)
            except OSError:
                pass
        elif self.path.startswith("/docs/bomb"):
            # 1 GB of zeros gzip-compressed (~1 MB on the wire)
            body = _bomb()
            self._send(200, body, Content_Encoding="gzip")
        else:
            self._send(404, b"")


_BOMB: list[bytes] = []


def _bomb() -> bytes:
    if not _BOMB:
        import zlib

        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
        zeros = b"\0" * (1 << 20)
        parts = [comp.compress(zeros) for _ in range(1024)]
        parts.append(comp.flush())
        _BOMB.append(b"".join(parts))
    return _BOMB[0]


class Other(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        body = b"# Stolen\n\nmust never be fetched\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/markdown")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_llms_txt_with_hostile_links_fetches_only_the_allowed_page(tmp_path: Path) -> None:
    with serve(handler=Other) as (other, other_requests), serve(handler=Hostile) as (base, requests):
        Hostile.other = other
        Hostile.sent = {}
        source = Source(name="hostile", kind="llms_txt", url=f"{base}/llms.txt", rate_limit=0)
        started = time.monotonic()
        result = fetch_source(source, _settings(tmp_path))
        took = time.monotonic() - started
    assert [f.source_path for f in result.files] == ["docs/good.md", "llms.txt.md"]     # the page and the llms.txt
    assert other_requests == []                                   # the other host never saw a request
    warnings = "\n".join(result.warnings)
    assert f"{other}/docs/stolen.md: skipped, host 127.0.0.1:{other.rsplit(':', 1)[1]} is not allowed" in warnings
    assert "file:///etc/passwd: skipped" in warnings
    assert "/docs/redirect.md: page skipped" in warnings and "is not allowed" in warnings
    assert "/docs/huge.md: page skipped" in warnings and "larger than the cap of 10000000 bytes" in warnings
    assert f"response of {GB} bytes is larger than the cap" in warnings
    assert "/docs/bomb.md: page skipped" in warnings
    # the 1 GB body was abandoned near the 10 MB cap: the client read at most cap + one 64 KiB block per attempt
    assert result.stats["bytes"] < 4 * 10_000_000
    assert len(result.warnings) == 6
    assert took < 60
    # nothing but the good page (and the llms.txt itself) was written under the data dir
    pages = sorted(p.name for p in (tmp_path / "data").rglob("*.md"))
    assert pages == ["good.md", "llms.txt.md"]


def test_gzip_bomb_is_capped_after_decompression() -> None:
    with serve(handler=Hostile) as (base, _):
        client = HttpClient(source="t", hosts=frozenset({base.split("//")[1]}),
                            policy=HttpPolicy(rate_limit=0, max_bytes=5_000_000, retries=0))
        with pytest.raises(PageError, match="larger than the cap of 5000000 bytes"):
            client.get(f"{base}/docs/bomb.md")
        assert client.stats["bytes"] <= 5_000_000 + (1 << 20) * 2   # decoded bytes, one block past the cap at most


class Drip(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/markdown")
        self.end_headers()
        try:
            for _ in range(200):
                self.wfile.write(b"z" * 70000)
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass


def test_slow_drip_is_cut_by_the_total_time_cap() -> None:
    with serve(handler=Drip) as (base, _):
        client = HttpClient(source="t", hosts=frozenset({base.split("//")[1]}),
                            policy=HttpPolicy(rate_limit=0, max_seconds=0.5, retries=0))
        with pytest.raises(PageError, match=r"took longer than 0.5 s"):
            client.get(f"{base}/slow.md")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1/", "//127.0.0.1/x",
                                 "http:///nohost"])
def test_non_http_urls_are_refused_before_any_io(url: str) -> None:
    client = HttpClient(source="t", policy=HttpPolicy(rate_limit=0, retries=0))
    with pytest.raises(PageError, match="not an http"):
        client.get(url)
    assert client.stats["requests"] == 0
