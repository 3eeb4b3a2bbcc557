"""HTTP for the llms_txt and html strategies: one polite client per source fetch (requests underneath).

- Only ``http``/``https`` URLs; every request (and every redirect hop, followed by hand) must pass the client's
  ``allow`` check (scheme + host), so a redirect cannot lead the crawler off the allowed hosts.
- Timeouts (connect, read, and a total time per response body), retries with exponential backoff on 429/5xx and connection errors (``Retry-After``
  honoured up to 30 s), a per-host minimum interval between requests (``rate_limit`` seconds, 0 on loopback tests),
  a size cap per response (streamed, aborted past the cap), a ``User-Agent`` naming docsvault.
- Conditional GET: pass the stored ``etag`` / ``last_modified``; a 304 comes back as ``Response.not_modified``.
- Credentials: a token (``token_env``) is sent as ``Authorization: Bearer`` to the source's own hosts only; URLs in
  messages have ``user:password@`` replaced by ``***@`` and the token replaced by ``***``. Nothing is logged here.
- ``stats`` counts ``requests`` (round trips, retries included), ``bytes`` (body bytes downloaded), ``not_modified``
  and ``retries``.
"""

from __future__ import annotations

import re
import time
import urllib.robotparser
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from urllib.parse import urljoin, urlsplit

import requests

from pipeline.common.errors import FetchError
from pipeline.config import env_value

USER_AGENT = "docsvault/0.1 (docs-to-vault fetcher; +https://github.com/docsvault/docsvault)"
ROBOTS_AGENT = "docsvault"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
HTML_TYPES = ("text/html", "application/xhtml+xml")
#: the statuses a GET follows through ``Location`` (304 Not Modified is not one)
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class HttpPolicy:
    """Knobs of the client. Times in seconds, sizes in bytes."""

    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    retries: int = 3                  # extra attempts after the first, on 429/5xx/connection errors
    backoff: float = 0.5              # first retry waits backoff, then 2x, 4x ...
    max_bytes: int = 10_000_000       # per response body, after decompression (gzip/deflate bombs stop here too)
    max_seconds: float = 120.0        # wall time to read one response body (a slow drip cannot hold a fetch forever)
    rate_limit: float = 1.0           # min interval between two requests to one host
    max_redirects: int = 5


class PageError(FetchError):
    """One URL could not be fetched (status or cause in the message). ``transient`` for 429/5xx/network causes."""

    def __init__(self, message: str, url: str, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.transient = transient


@dataclass(frozen=True)
class Response:
    """A fetched URL. ``body`` is empty for a 304 (``not_modified``)."""

    url: str                  # requested URL
    final_url: str            # after redirects
    status: int
    body: bytes
    content_type: str         # media type only, lower-case ("text/html")
    etag: str | None
    last_modified: str | None
    charset: str | None = None  # the Content-Type's charset parameter, lower-case ("iso-8859-1"), None when absent

    @property
    def not_modified(self) -> bool:
        return self.status == 304

    @property
    def is_html(self) -> bool:
        return self.content_type in HTML_TYPES

    def text(self) -> str:
        """Body decoded in the declared charset (:meth:`utf8_body`), as UTF-8 (BOM dropped, invalid bytes
        replaced)."""
        return self.utf8_body().decode("utf-8-sig", errors="replace")

    def html_input(self) -> str | bytes:
        """What to give the HTML parser: the body as text in the header's charset when the page itself names none
        (no ``charset`` in its first 2 KiB: a ``<meta charset>`` or ``http-equiv`` one, which lxml reads, wins, as
        it did before); else the bytes."""
        if self.charset and b"charset" not in self.body[:2048].lower():
            return self.text()
        return self.body

    def utf8_body(self) -> bytes:
        """The body as UTF-8 bytes: decoded from the charset the server declared (``text/markdown;
        charset=iso-8859-1``, ``shift_jis``) and encoded as UTF-8; the body as received when it declares UTF-8 or
        none, names a charset Python does not know, or does not decode in it (normalize then names the bad byte),
        and when it is valid UTF-8 under a one- or two-byte legacy charset: a UTF-8 page served with a server's
        default ``charset=iso-8859-1`` (Latin-1 or Shift_JIS text is almost never valid UTF-8; decoded in the
        declared charset, such a page was stored as mojibake, ``café`` as ``cafÃ©``)."""
        import codecs

        if not self.charset:
            return self.body
        try:
            name = codecs.lookup(self.charset).name
            if name == "utf-8" or (not name.startswith(("utf-16", "utf-32")) and _is_utf8(self.body)):
                return self.body
            return self.body.decode(self.charset).encode("utf-8")
        except (LookupError, UnicodeDecodeError):
            return self.body


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Text with URL user-info and the given secrets replaced by ``***``."""
    import re

    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return re.sub(r"(?<=://)[^/@\s]+@", "***@", text)


def userinfo(url: str) -> str:
    """The ``user:password@`` part of a URL (``""`` when it has none): the credentials a source's ``url`` may carry."""
    from urllib.parse import urlsplit

    netloc = urlsplit(url).netloc
    return netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""


def scrub(value: str, info: str) -> str:
    """``value`` (a page's URL, Markdown or a warning line) without the credentials ``info`` (:func:`userinfo` of
    the source's URL): what the vault, the build's output and Dagster's log keep of a fetched page. The client
    keeps them, for the requests."""
    return value.replace(info, "") if info else value


def host_of(url: str) -> str:
    """``host[:port]`` of a URL, lower-case (default ports dropped)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port
    if port and not ((parts.scheme == "http" and port == 80) or (parts.scheme == "https" and port == 443)):
        return f"{host}:{port}"
    return host


def is_http_url(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https") and bool(urlsplit(url).hostname)


@dataclass
class HttpClient:
    """A polite HTTP client for one source (see module doc).

    Args:
        source: source name, for messages.
        hosts: hosts (``host[:port]``) that may be requested; empty = any http(s) host.
        policy: timeouts, retries, caps, rate limit.
        token_env: name of an environment variable holding a bearer token for ``hosts`` (never logged).
        sleep: injectable sleep (tests).
    """

    source: str
    hosts: frozenset[str] = frozenset()
    policy: HttpPolicy = field(default_factory=HttpPolicy)
    token_env: str | None = None
    sleep: Callable[[float], None] = time.sleep
    stats: dict[str, int] = field(default_factory=lambda: {"requests": 0, "bytes": 0, "not_modified": 0,
                                                           "retries": 0})

    def __post_init__(self) -> None:
        self._session = requests.Session()
        self._session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"})
        self._session.trust_env = False          # no netrc credentials / proxies leaking into requests
        self._last: dict[str, float] = {}
        self._secrets: tuple[str, ...] = ()
        self._token: str | None = None
        self._robots: dict[str, urllib.robotparser.RobotFileParser | None] = {}
        # host -> {"etag", "last_modified", "text"}: robots.txt copies kept by the caller for conditional GETs
        self.robots_cache: dict[str, dict[str, str | None]] = {}
        if self.token_env:
            token = env_value(self.token_env)
            if not token:
                raise FetchError(f"source '{self.source}': environment variable {self.token_env} (token_env) is not "
                                 "set or empty; export it with a token for this site")
            self._token = token
            self._secrets = (token,)

    # ---- helpers
    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def allows(self, url: str) -> bool:
        """True for an http(s) URL on an allowed host."""
        return is_http_url(url) and (not self.hosts or host_of(url) in self.hosts)

    def _error(self, url: str, cause: str, status: int | None = None, transient: bool = False) -> PageError:
        return PageError(self.redact(f"source '{self.source}': cannot fetch {url}: {cause}"), url, status, transient)

    def _wait_turn(self, host: str, interval: float) -> None:
        if interval > 0:
            last = self._last.get(host)
            if last is not None:
                delay = last + interval - time.monotonic()
                if delay > 0:
                    self.sleep(delay)
        self._last[host] = time.monotonic()

    def crawl_delay(self, url: str) -> float:
        """Seconds between requests to the URL's host: max(rate_limit, robots.txt Crawl-delay)."""
        rp = self._robots.get(host_of(url))
        delay = rp.crawl_delay(ROBOTS_AGENT) if rp is not None else None
        return max(self.policy.rate_limit, float(delay or 0))

    # ---- robots.txt
    def robots_allows(self, url: str) -> bool:
        """robots.txt of the URL's origin allows ``docsvault`` to fetch it (fetched once per host; a missing
        robots.txt (4xx) allows everything; a 5xx disallows, as RFC 9309 asks; a network error leaves the verdict to
        the page request, which then reports the real cause)."""
        host = host_of(url)
        if host not in self._robots:
            parts = urlsplit(url)
            robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
            rp: urllib.robotparser.RobotFileParser | None = urllib.robotparser.RobotFileParser()
            cached = self.robots_cache.get(host) or {}
            try:
                resp = self.get(robots_url, accept="text/plain", etag=cached.get("etag"),
                                last_modified=cached.get("last_modified"))
                assert rp is not None
                text = str(cached.get("text") or "") if resp.not_modified else resp.text()
                if not resp.not_modified:
                    self.robots_cache[host] = {"etag": resp.etag, "last_modified": resp.last_modified, "text": text}
                rp.parse(text.splitlines())
            except PageError as exc:
                if exc.status is None or 400 <= exc.status < 500:
                    rp = None                    # no robots.txt (or host unreachable: the page fetch reports it)
                else:
                    rp = urllib.robotparser.RobotFileParser()
                    rp.disallow_all = True
            self._robots[host] = rp
        rp = self._robots[host]
        return True if rp is None else rp.can_fetch(ROBOTS_AGENT, url)

    # ---- GET
    def get(self, url: str, *, etag: str | None = None, last_modified: str | None = None,
            accept: str | None = None, follow: Callable[[str], bool] | None = None) -> Response:
        """GET ``url`` following up to ``max_redirects`` redirects, each hop re-checked with :meth:`allows`.

        Args:
            url: absolute http(s) URL.
            etag, last_modified: validators of the copy we hold (conditional GET).
            accept: ``Accept`` header value.
            follow: called with each redirect target; False stops there and returns the 3xx response (empty body,
                ``final_url`` = the target) — a crawler uses it to skip pages it already has.

        Returns:
            Response with status 200 (body read, at most ``max_bytes``), 304 (empty body), or a 3xx when ``follow``
            declined the redirect.

        Raises:
            PageError: not http(s) / host not allowed (also after a redirect), 4xx/5xx after retries (``status`` set),
                timeout or connection error (``transient``), body larger than ``max_bytes``, too many redirects.
        """
        current = url
        for _hop in range(self.policy.max_redirects + 1):
            if not self.allows(current):
                why = "not an http(s) URL" if not is_http_url(current) else f"host {host_of(current)} is not allowed"
                raise self._error(url if current == url else f"{url} (redirected to {current})", why)
            headers: dict[str, str] = {}
            if accept:
                headers["Accept"] = accept
            if etag:
                headers["If-None-Match"] = etag
            if last_modified:
                headers["If-Modified-Since"] = last_modified
            if self._token and (not self.hosts or host_of(current) in self.hosts):
                headers["Authorization"] = f"Bearer {self._token}"
            resp = self._send(current, headers)
            if resp.status_code in REDIRECT_STATUS and resp.headers.get("Location"):
                resp.close()
                target = urljoin(current, resp.headers["Location"])
                if follow is not None and not follow(target):
                    return Response(url=url, final_url=target, status=resp.status_code, body=b"",
                                    content_type="", etag=None, last_modified=None)
                current = target
                continue
            return self._read(url, current, resp)
        raise self._error(url, f"more than {self.policy.max_redirects} redirects")

    def _send(self, url: str, headers: dict[str, str]) -> requests.Response:
        attempt = 0
        while True:
            self._wait_turn(host_of(url), self.crawl_delay(url))
            self.stats["requests"] += 1
            try:
                resp = self._session.get(url, headers=headers, stream=True, allow_redirects=False,
                                         timeout=(self.policy.connect_timeout, self.policy.read_timeout))
            except requests.RequestException as exc:
                cause = f"{exc.__class__.__name__}: {_short(exc)}"
                if attempt < min(self.policy.retries, 1):     # network errors: one retry, then report
                    attempt += 1
                    self.stats["retries"] += 1
                    self.sleep(self.policy.backoff * 2 ** (attempt - 1))
                    continue
                raise self._error(url, cause, transient=True) from None
            if resp.status_code in RETRY_STATUS and attempt < self.policy.retries:
                wait = _retry_after(resp.headers.get("Retry-After"))
                resp.close()
                attempt += 1
                self.stats["retries"] += 1
                self.sleep(wait if wait is not None else self.policy.backoff * 2 ** (attempt - 1))
                continue
            return resp

    def _read(self, url: str, final: str, resp: requests.Response) -> Response:
        try:
            status = resp.status_code
            ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            common = {"url": url, "final_url": final, "status": status, "content_type": ctype,
                      "charset": _charset(resp.headers.get("Content-Type", "")),
                      "etag": resp.headers.get("ETag"), "last_modified": resp.headers.get("Last-Modified")}
            if status == 304:
                self.stats["not_modified"] += 1
                return Response(body=b"", **common)  # type: ignore[arg-type]
            if status != 200:
                raise self._error(url, f"HTTP {status} {resp.reason or ''}".strip(), status=status,
                                  transient=status in RETRY_STATUS)
            declared = resp.headers.get("Content-Length")
            cap = self.policy.max_bytes
            if declared and declared.isdigit() and int(declared) > cap:
                raise self._error(url, f"response of {declared} bytes is larger than the cap of {cap} bytes")
            chunks: list[bytes] = []
            size = 0
            deadline = time.monotonic() + self.policy.max_seconds
            try:
                for chunk in resp.iter_content(65536):   # decoded (decompressed) bytes: the cap holds after gunzip
                    size += len(chunk)
                    self.stats["bytes"] += len(chunk)
                    if size > cap:
                        self.stats["capped"] = self.stats.get("capped", 0) + 1
                        raise self._error(url, f"response larger than the cap of {cap} bytes (stopped reading)")
                    if time.monotonic() > deadline:
                        raise self._error(url, f"response took longer than {self.policy.max_seconds:g} s to read "
                                               "(stopped reading)", transient=True)
                    chunks.append(chunk)
            except requests.RequestException as exc:
                raise self._error(url, f"{exc.__class__.__name__}: {_short(exc)}", transient=True) from None
            return Response(body=b"".join(chunks), **common)  # type: ignore[arg-type]
        finally:
            resp.close()


def _charset(content_type: str) -> str | None:
    """The ``charset`` parameter of a Content-Type header, lower-case and unquoted (``text/markdown;
    charset="Shift_JIS"`` -> ``shift_jis``); None when there is none."""
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').strip("'"):
            return value.strip().strip('"').strip("'").lower()
    return None


_OS_ERROR = re.compile(r"\[Errno -?\d+\] [^'\")\]]+")
_HOST = re.compile(r"host='([^']+)', port=(\d+)")


def _short(exc: BaseException) -> str:
    """One line for a request error: the operating system's reason when it has one (``[Errno 111] Connection
    refused (127.0.0.1:9)``, which urllib3 wraps deep inside its message), else the message, at most ~200 chars
    (its start and end kept)."""
    text = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    reason = _OS_ERROR.search(text)
    if reason:
        host = _HOST.search(text)
        return reason.group(0).strip() + (f" ({host.group(1)}:{host.group(2)})" if host else "")
    return text if len(text) <= 200 else f"{text[:130]} … {text[-60:]}"


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta or HTTP date), capped at 30 s; None when absent/invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), 30.0)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    import datetime as _dt

    return max(0.0, min((when - _dt.datetime.now(_dt.UTC)).total_seconds(), 30.0))
