"""Loopback HTTP servers for the fetch tests: a static folder (real corpora) or a custom handler, on 127.0.0.1:0."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path


class QuietStaticHandler(http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler (Last-Modified + If-Modified-Since -> 304) without request logging; counts requests."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".md": "text/markdown",
                      ".txt": "text/plain", ".mdx": "text/markdown"}
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        super().do_GET()


class ScriptedHandler(http.server.BaseHTTPRequestHandler):
    """Base of hand-written test servers: no request logging, and ``_send`` for a whole response."""

    content_type = "text/plain"     # default Content-Type of ``_send``

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", ctype: str | None = None, **headers: str) -> None:
        """Status, Content-Type, Content-Length, ``headers`` (``ETag`` or ``Last_Modified`` style keys) and body."""
        self.send_response(status)
        self.send_header("Content-Type", ctype or self.content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serve(directory: Path | None = None, handler: type[http.server.BaseHTTPRequestHandler] | None = None
          ) -> Iterator[tuple[str, list[str]]]:
    """Serve ``directory`` (or run ``handler``) on 127.0.0.1:<free port>; yields (base URL without slash, request
    paths seen). The server thread stops when the block ends."""
    if handler is None:
        assert directory is not None
        handler = functools.partial(QuietStaticHandler, directory=str(directory))  # type: ignore[assignment]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)  # type: ignore[arg-type]
    server.daemon_threads = True
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
