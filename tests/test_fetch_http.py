"""HTTP client: retries, caps, redirects re-checked, conditional GET, robots.txt, credentials kept out of messages."""

from __future__ import annotations

import pytest

from pipeline.ingest.fetch.http import USER_AGENT, HttpClient, HttpPolicy, PageError, host_of, redact
from tests.loopback import ScriptedHandler, serve

FAST = HttpPolicy(rate_limit=0, backoff=0, retries=2, max_bytes=1000)


class Handler(ScriptedHandler):
    hits: dict[str, int] = {}
    seen_headers: list[dict[str, str]] = []

    def do_GET(self) -> None:
        n = Handler.hits[self.path] = Handler.hits.get(self.path, 0) + 1
        Handler.seen_headers.append(dict(self.headers))
        if self.path == "/flaky":
            return self._send(503) if n == 1 else self._send(200, b"ok")
        if self.path == "/always503":
            return self._send(503, b"down")
        if self.path == "/big":
            return self._send(200, b"x" * 5000)
        if self.path == "/etag":
            if self.headers.get("If-None-Match") == '"v1"':
                return self._send(304, ETag='"v1"')
            return self._send(200, b"hello", ETag='"v1"')
        if self.path == "/away":
            self.send_response(302)
            self.send_header("Location", "http://example.invalid/x")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if self.path == "/hop":
            self.send_response(301)
            self.send_header("Location", "/etag")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if self.path == "/robots.txt":
            return self._send(200, b"User-agent: docsvault\nDisallow: /private/\n")
        return self._send(404, b"nope")


@pytest.fixture()
def site():
    Handler.hits, Handler.seen_headers = {}, []
    with serve(handler=Handler) as (base, _):
        yield base


def _client(base: str, **kw) -> HttpClient:
    return HttpClient(source="s", hosts=frozenset({host_of(base)}), policy=kw.pop("policy", FAST), **kw)


def test_retry_on_503_then_ok_and_user_agent(site):
    with _client(site) as c:
        resp = c.get(site + "/flaky")
    assert resp.status == 200 and resp.body == b"ok"
    assert c.stats["requests"] == 2 and c.stats["retries"] == 1 and c.stats["bytes"] == 2
    assert Handler.seen_headers[-1]["User-Agent"] == USER_AGENT and "docsvault" in USER_AGENT


def test_gives_up_after_retries_with_status(site):
    with _client(site) as c, pytest.raises(PageError) as exc:
        c.get(site + "/always503")
    assert exc.value.status == 503 and exc.value.transient
    assert str(exc.value) == f"source 's': cannot fetch {site}/always503: HTTP 503 Service Unavailable"
    assert Handler.hits["/always503"] == 3


def test_404_is_not_retried(site):
    with _client(site) as c, pytest.raises(PageError) as exc:
        c.get(site + "/missing")
    assert exc.value.status == 404 and not exc.value.transient
    assert Handler.hits["/missing"] == 1


def test_size_cap(site):
    with _client(site) as c, pytest.raises(PageError, match="larger than the cap of 1000 bytes"):
        c.get(site + "/big")


def test_conditional_get_304(site):
    with _client(site) as c:
        first = c.get(site + "/etag")
        again = c.get(site + "/etag", etag=first.etag)
    assert first.etag == '"v1"' and first.body == b"hello"
    assert again.not_modified and again.body == b"" and c.stats["not_modified"] == 1 and c.stats["bytes"] == 5


def test_redirect_rechecked_against_allowed_hosts(site):
    with _client(site) as c:
        assert c.get(site + "/hop").final_url == site + "/etag"
        with pytest.raises(PageError, match="redirected to http://example.invalid/x.*host example.invalid is not"):
            c.get(site + "/away")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "http://other.invalid/"])
def test_only_http_on_allowed_hosts(site, url):
    with _client(site) as c, pytest.raises(PageError):
        c.get(url)
    assert Handler.hits == {}


def test_robots_txt_honoured(site):
    with _client(site) as c:
        assert c.robots_allows(site + "/docs/a.html")
        assert not c.robots_allows(site + "/private/b.html")
    assert Handler.hits["/robots.txt"] == 1


def test_token_sent_only_to_own_host_and_never_in_messages(site, monkeypatch):
    monkeypatch.setenv("SITE_TOKEN", "s3cr3t-value")
    with _client(site, token_env="SITE_TOKEN") as c:
        c.get(site + "/etag")
        assert Handler.seen_headers[-1]["Authorization"] == "Bearer s3cr3t-value"
        with pytest.raises(PageError) as exc:
            c.get(site.replace("http://", "http://user:s3cr3t-value@") + "/missing")
    assert "s3cr3t" not in str(exc.value)
    assert redact("https://u:p@h/x") == "https://***@h/x"
    monkeypatch.delenv("SITE_TOKEN")
    with pytest.raises(Exception, match="SITE_TOKEN"):
        _client(site, token_env="SITE_TOKEN")


def test_rate_limit_sleeps_between_requests(site):
    waits: list[float] = []
    with _client(site, policy=HttpPolicy(rate_limit=5.0), sleep=waits.append) as c:
        c.get(site + "/etag")
        c.get(site + "/etag")
    assert len(waits) == 1 and 4.0 < waits[0] <= 5.0


def test_a_request_error_keeps_the_operating_systems_reason():
    """urllib3 wraps the reason deep in a long message ("... Max retries exceeded ... Caused by NewConnectionError(
    '<... object at 0x...>: Failed to establish a new connection: [Errno 111] Connection refused')"); the one line
    a build shows is that reason and the host, not the first 200 characters."""
    import requests

    from pipeline.ingest.fetch.http import _short

    wrapped = requests.ConnectionError(
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /llms.txt (Caused by "
        "NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f3a2c1d5e10>: Failed to establish a "
        "new connection: [Errno 111] Connection refused'))")
    assert _short(wrapped) == "[Errno 111] Connection refused (127.0.0.1:9)"
    assert _short(requests.ReadTimeout("read timed out")) == "read timed out"
    assert _short(requests.RequestException("x" * 300)) == f"{'x' * 130} … {'x' * 60}"
