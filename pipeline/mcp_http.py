"""`docsvault mcp --http`: the MCP tools over streamable HTTP, on loopback by default or as a team service.

Rules (checked by :func:`check_http_options` before anything listens):

* Loopback (``127.0.0.0/8``, ``::1``, ``localhost``): no token needed, as before. A token, when one is configured,
  is required there too.
* Any other address (``0.0.0.0``, a LAN address, ``::``): the server refuses to start without a bearer token. The
  token comes from ``--token-file FILE``, else the file named by ``DOCSVAULT_MCP_TOKEN_FILE``, else the variable
  ``DOCSVAULT_MCP_TOKEN``; at least :data:`MIN_TOKEN_CHARS` characters (``openssl rand -hex 32`` gives 64).
* Every request must then carry ``Authorization: Bearer <token>``; anything else gets ``401`` (with
  ``WWW-Authenticate: Bearer``). The comparison is constant-time (:func:`hmac.compare_digest`) and the token is
  never logged nor echoed.
* The Host / Origin checks against DNS rebinding stay on (the SDK's: ``421`` for a Host that is not allowed,
  ``403`` for a foreign Origin). Allowed hosts: the loopback names, the bind address when it is a specific one,
  this machine's host name and FQDN, and each ``--allow-host NAME`` (the name clients put in the URL, e.g. the
  load balancer's). Origins: ``http(s)://`` + the same names.

Several reader processes can serve one published warehouse: each opens it read-only and reopens it when a build
swaps the file. ``--stateless`` answers every request on its own (no MCP session id), so a plain round-robin load
balancer can spread one client's calls over several processes.

Order: the ``tools/call`` requests of one MCP session run one at a time in the order their POST bodies arrived
(:class:`ArrivalOrder`, :class:`pipeline.mcp_server.CallQueues`), as on stdio; other requests are not held. Without a
session (``--stateless``) there is no order to keep: each request may reach another process.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.common.errors import PipelineError
from pipeline.config import Settings
from pipeline.config import environ as config_environ

log = logging.getLogger("docsvault.mcp")

TOKEN_ENV = "DOCSVAULT_MCP_TOKEN"
TOKEN_FILE_ENV = "DOCSVAULT_MCP_TOKEN_FILE"
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


class HttpConfigError(PipelineError):
    """The HTTP server's options cannot be served safely (no token beyond loopback, unreadable token file...)."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (``127.0.0.0/8``, ``::1``); False for ``0.0.0.0``, ``::``
    and every other name or address."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def load_token(token_file: Path | None = None, environ: dict[str, str] | None = None) -> str | None:
    """The bearer token: ``token_file``, else the file named by DOCSVAULT_MCP_TOKEN_FILE, else DOCSVAULT_MCP_TOKEN;
    None when none is set. Surrounding whitespace (a trailing newline) is stripped.

    Raises:
        HttpConfigError: the file cannot be read, or the token is empty or shorter than MIN_TOKEN_CHARS (the
            message never contains the token).
    """
    env = config_environ() if environ is None else environ
    path = token_file or (Path(env[TOKEN_FILE_ENV]) if env.get(TOKEN_FILE_ENV) else None)
    if path is not None:
        try:
            token = Path(path).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise HttpConfigError(f"cannot read the MCP token file {path}: {getattr(exc, 'strerror', None) or exc}; "
                                  f"write the token (e.g. `openssl rand -hex 32`) into it") from None
        where = f"token file {path}"
    elif env.get(TOKEN_ENV) is not None:
        token, where = env[TOKEN_ENV].strip(), TOKEN_ENV
    else:
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise HttpConfigError(f"the MCP token in {where} is {'empty' if not token else 'too short'}: use at least "
                              f"{MIN_TOKEN_CHARS} characters (e.g. `openssl rand -hex 32`)")
    return token


@dataclass(frozen=True)
class HttpOptions:
    """How the HTTP server listens. ``token`` None = no authentication (loopback only)."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = field(default=None, repr=False)
    allow_hosts: tuple[str, ...] = ()
    stateless: bool = False
    #: no write tools (save_note, refresh): ``docsvault mcp --read-only`` / DOCSVAULT_MCP_READ_ONLY=1
    read_only: bool = False

    def allowed_hosts(self) -> list[str]:
        """Host header values accepted (``name`` and ``name:*``)."""
        names: list[str] = list(LOOPBACK_NAMES)
        bind = self.host.strip("[]")
        # the bind address itself, a loopback one too (127.0.0.2: clients send it as their Host, which got 421)
        if bind not in ("0.0.0.0", "::", "") and (f"[{bind}]" if ":" in bind else bind) not in names:
            names.append(f"[{bind}]" if ":" in bind else bind)
        if not is_loopback(self.host):
            for name in (socket.gethostname(), socket.getfqdn()):
                if name and name not in names:
                    names.append(name)
        for name in self.allow_hosts:
            name = name.strip().lower()
            if name and name not in names:
                names.append(name)
        out: list[str] = []
        for name in names:
            out += [name, f"{name}:*"]
        return out

    def allowed_origins(self) -> list[str]:
        """Origin header values accepted (browsers send one; other clients usually none)."""
        return [f"{scheme}://{h}" for h in self.allowed_hosts() for scheme in ("http", "https")]


def check_http_options(opts: HttpOptions) -> None:
    """Refuse options that would serve without protection.

    Raises:
        HttpConfigError: a non-loopback address without a token.
    """
    if not is_loopback(opts.host) and not opts.token:
        raise HttpConfigError(
            f"refusing to serve MCP on {opts.host}:{opts.port} without a token: beyond loopback every request must "
            f"carry a bearer token; put one in a file and pass --token-file FILE (or set {TOKEN_FILE_ENV} or "
            f"{TOKEN_ENV}), or serve on 127.0.0.1"
        )


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401.

    Args:
        app: the wrapped ASGI app.
        token: the expected token (compared in constant time; never logged).
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")

    def authorized(self, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        value = b""
        for name, raw in headers:
            if name.lower() == b"authorization":
                value = raw
                break
        scheme, _, given = value.partition(b" ")
        ok_scheme = scheme.lower() == b"bearer"
        # compare_digest on every request, whatever the scheme, so the time does not tell what was wrong
        ok_token = hmac.compare_digest(given.strip(), self._token)
        return ok_scheme and ok_token

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and not self.authorized(scope.get("headers") or []):
            body = b"missing or wrong bearer token\n"
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                    (b"content-length", str(len(body)).encode()),
                                    (b"www-authenticate", b'Bearer realm="docsvault"')]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def invalid_message_reply(reply: bytes, request: bytes) -> bytes | None:
    """The body that replaces the SDK's reply to a POST body that is JSON but no JSON-RPC message, None for every
    other reply. The SDK answers such a body (HTTP 400) with ``-32602 Validation error: <pydantic's multi-line
    dump>``; stdio answers it with ``-32600 Invalid Request: …`` naming the first field in error and keeping the
    message's ``id`` (:func:`pipeline.mcp_server.bad_line_reply`), and so does HTTP now."""
    import json

    from mcp_types import INVALID_PARAMS, jsonrpc_message_adapter
    from pydantic import ValidationError

    from pipeline.mcp_server import bad_line_reply

    try:
        error = json.loads(reply).get("error") or {}
    except (ValueError, AttributeError):
        return None
    if error.get("code") != INVALID_PARAMS or not str(error.get("message", "")).startswith("Validation error:"):
        return None
    try:
        jsonrpc_message_adapter.validate_json(request, by_name=False)
    except ValidationError as exc:
        mine = bad_line_reply(exc)
        return mine.model_dump_json(by_alias=True, exclude_unset=True).encode() if mine is not None else None
    return None


class InvalidMessageReply:
    """ASGI middleware: the reply to a POST body that is no JSON-RPC message is :func:`invalid_message_reply`'s
    (the SDK's checks and their order are kept: only the body of its ``400`` reply is replaced).

    Args:
        app: the wrapped ASGI app.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        held: list[dict] = []

        async def recording_receive() -> dict:
            message = await receive()
            if message.get("type") == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def checked_send(message: dict) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 400:
                held.append(message)            # until its body shows what it answers
                return
            if held and message["type"] == "http.response.body":
                start, text = held.pop(), bytes(message.get("body", b""))
                mine = None if message.get("more_body") else invalid_message_reply(text, bytes(body))
                if mine is not None:
                    start = {**start, "headers": [(k, v) for k, v in start.get("headers", [])
                                                  if k.lower() != b"content-length"]
                             + [(b"content-length", str(len(mine)).encode())]}
                    message = {**message, "body": mine}
                await send(start)
            await send(message)

        await self.app(scope, recording_receive, checked_send)


def note_arrival(queues: Any, key: str, body: bytes) -> list[Any]:
    """Note the JSON-RPC message(s) of one POST body in session ``key``'s queue
    (:meth:`pipeline.mcp_server.CallQueues.arrived`): the ids of the ``tools/call`` requests that took a ticket. A
    body that is not JSON-RPC takes none (the transport refuses it)."""
    import json

    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return []
    admitted = []
    for message in data if isinstance(data, list) else [data]:
        if isinstance(message, dict) and isinstance(message.get("method"), str) and \
                queues.arrived(key, message["method"], message.get("id"), message.get("params")):
            admitted.append(message.get("id"))
    return admitted


class ArrivalOrder:
    """ASGI middleware: a POSTed ``tools/call`` of an MCP session takes its ticket in the session's queue
    (:class:`pipeline.mcp_server.CallQueues`) as soon as its body has arrived, before the transport hands it to a
    handler task; a ``notifications/cancelled`` drops the ticket of a call that has not started. When the POST
    ends, a ticket its call never claimed (the transport refused the request, or the client went away) is dropped,
    so it holds no later call. Requests without ``Mcp-Session-Id`` (initialize, stateless) pass unchanged.

    Args:
        app: the wrapped ASGI app.
        queues: the server's :class:`pipeline.mcp_server.CallQueues`.
    """

    def __init__(self, app: Any, queues: Any) -> None:
        self.app = app
        self.queues = queues

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from pipeline.mcp_server import http_session_key

        sid = next((v for k, v in scope.get("headers") or [] if k.lower() == b"mcp-session-id"), b"") \
            if scope.get("type") == "http" and scope.get("method") == "POST" else b""
        if not sid:
            await self.app(scope, receive, send)
            return
        key = http_session_key(sid.decode("latin-1"))
        body = bytearray()
        admitted: list[Any] = []

        async def noting_receive() -> dict:
            message = await receive()
            if message.get("type") == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    admitted.extend(note_arrival(self.queues, key, bytes(body)))
            return message

        try:
            await self.app(scope, noting_receive, send)
        finally:
            for rid in admitted:
                self.queues.drop(key, rid)


class NoSessionToEnd(logging.Filter):
    """For the MCP library's ``mcp.server.streamable_http`` logger of a ``--stateless`` server: it logs
    ``Terminating session: None`` at INFO after every call (a stateless call has no session to end), so a team's
    reader log was one such line per search and nothing else. Only that line is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Terminating session: None"


def http_app(settings: Settings, opts: HttpOptions, service: Any = None) -> Any:
    """The ASGI app: the MCP server's streamable HTTP app (path ``/mcp``) with the Host/Origin checks,
    :class:`ArrivalOrder` and :class:`InvalidMessageReply`, wrapped in :class:`BearerAuth` when ``opts.token`` is
    set.

    Raises:
        HttpConfigError: see :func:`check_http_options`.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    from pipeline.mcp_server import create_server

    check_http_options(opts)
    server = create_server(settings, service, read_only=opts.read_only)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                         allowed_hosts=opts.allowed_hosts(), allowed_origins=opts.allowed_origins())
    app = InvalidMessageReply(ArrivalOrder(server.streamable_http_app(host=opts.host, transport_security=security,
                                                                      stateless_http=opts.stateless),
                                           server.call_queues))
    return BearerAuth(app, opts.token) if opts.token else app


def serve_http(settings: Settings, opts: HttpOptions) -> None:
    """Serve until the process is stopped (SIGINT / SIGTERM).

    Raises:
        HttpConfigError: see :func:`check_http_options`.
        KeyboardInterrupt: stopped by SIGINT, once uvicorn has shut down (uvicorn handles the signal itself and
            returns normally; the CLI then prints ``interrupted`` and exits 130, as every command does).
    """
    import sys

    import uvicorn

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="docsvault-mcp %(levelname)s %(message)s",
                        force=True)         # over the CLI's bare warning lines (cli._log_lines)
    if opts.stateless:
        noisy = logging.getLogger("mcp.server.streamable_http")
        if not any(isinstance(f, NoSessionToEnd) for f in noisy.filters):
            noisy.addFilter(NoSessionToEnd())
    app = http_app(settings, opts)
    shown = f"[{opts.host}]" if ":" in opts.host else opts.host
    log.info("serving MCP over streamable HTTP on http://%s:%d/mcp (%s%s%s)", shown, opts.port,
             "bearer token required" if opts.token else "no token: loopback only",
             ", stateless" if opts.stateless else "",
             ", read-only: no save_note or refresh" if opts.read_only else "")

    class Server(uvicorn.Server):
        """Records the signals that stopped it (uvicorn handles SIGINT / SIGTERM itself and returns normally)."""

        stopped_by: tuple[int, ...] = ()

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.stopped_by += (sig,)
            super().handle_exit(sig, frame)

    # access_log off: request lines are noise at load; headers (the token) are never logged either way
    server = Server(uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning", access_log=False))
    server.run()
    if signal.SIGINT in server.stopped_by:
        raise KeyboardInterrupt
