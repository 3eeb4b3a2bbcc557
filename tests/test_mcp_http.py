"""MCP over HTTP as a team service: beyond loopback only with a bearer token (401 without it), Host/Origin checks
kept, several reader processes over one published warehouse. Servers bind 0.0.0.0; the tests connect to 127.0.0.1
only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from pipeline.config import Settings
from pipeline.mcp_http import (
    MIN_TOKEN_CHARS,
    BearerAuth,
    HttpConfigError,
    HttpOptions,
    check_http_options,
    is_loopback,
    load_token,
)

REPO = Path(__file__).resolve().parents[1]
TOKEN = "s3cr3t-token-0123456789abcdef"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSVAULT_MCP_TOKEN")}
    env |= {"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return env | (extra or {})


@contextmanager
def mcp_server(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`docsvault mcp --http ARGS` until its port answers; stopped (and reaped) at the end."""
    port = int(args[args.index("--port") + 1])
    with open(log, "wb") as errlog:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "mcp", "--http", *args], env=env, cwd=REPO,
                                stdin=subprocess.DEVNULL, stdout=errlog, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post(url: str, headers: dict[str, str] | None = None, body: dict | None = None) -> tuple[int, str]:
    """POST a JSON-RPC message; (status, body text)."""
    req = urllib.request.Request(url, data=json.dumps(body or INIT).encode(), method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def _search(url: str, token: str | None, query: str) -> list[str]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with create_mcp_http_client(headers=headers) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("search", {"query": query, "k": 3})
    data = result.structured_content or json.loads(result.content[0].text)
    return [h["path"] for h in data["hits"]]


# ---------------------------------------------------------------- unit
@pytest.mark.parametrize(("host", "expected"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("docs.example.com", False), ("", False),
])
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected


def test_token_sources_and_their_errors(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n", encoding="utf-8")
    assert load_token(f, environ={}) == TOKEN
    assert load_token(None, environ={"DOCSVAULT_MCP_TOKEN_FILE": str(f), "DOCSVAULT_MCP_TOKEN": "x" * 20}) == TOKEN
    assert load_token(None, environ={"DOCSVAULT_MCP_TOKEN": f" {TOKEN} "}) == TOKEN
    assert load_token(None, environ={}) is None
    with pytest.raises(HttpConfigError) as short:
        load_token(None, environ={"DOCSVAULT_MCP_TOKEN": "abc123"})
    assert str(short.value) == (f"the MCP token in DOCSVAULT_MCP_TOKEN is too short: use at least {MIN_TOKEN_CHARS} "
                                "characters (e.g. `openssl rand -hex 32`)")
    assert "abc123" not in str(short.value)
    with pytest.raises(HttpConfigError, match=r"cannot read the MCP token file .*missing: No such file"):
        load_token(tmp_path / "missing", environ={})


def test_beyond_loopback_needs_a_token() -> None:
    check_http_options(HttpOptions(host="127.0.0.1"))
    check_http_options(HttpOptions(host="0.0.0.0", token=TOKEN))
    with pytest.raises(HttpConfigError, match=r"^refusing to serve MCP on 0\.0\.0\.0:8765 without a token"):
        check_http_options(HttpOptions(host="0.0.0.0"))
    assert TOKEN not in repr(HttpOptions(host="0.0.0.0", token=TOKEN))


def test_bearer_middleware_compares_scheme_and_token() -> None:
    auth = BearerAuth(None, TOKEN)
    assert auth.authorized([(b"authorization", f"Bearer {TOKEN}".encode())])
    assert auth.authorized([(b"Authorization", f"bearer {TOKEN}".encode())])
    assert not auth.authorized([])
    assert not auth.authorized([(b"authorization", f"Basic {TOKEN}".encode())])
    assert not auth.authorized([(b"authorization", f"Bearer {TOKEN}x".encode())])
    assert not auth.authorized([(b"authorization", b"Bearer ")])


def test_allowed_hosts_beyond_loopback() -> None:
    opts = HttpOptions(host="0.0.0.0", token=TOKEN, allow_hosts=("Docs.Example.com",))
    hosts = opts.allowed_hosts()
    assert hosts[:6] == ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
    assert "docs.example.com:*" in hosts and socket.gethostname() in hosts and "0.0.0.0" not in hosts
    assert "https://docs.example.com:*" in opts.allowed_origins()
    assert HttpOptions(host="127.0.0.1").allowed_hosts() == ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*",
                                                             "[::1]", "[::1]:*"]
    # a loopback bind address other than 127.0.0.1: its clients send it as their Host (got 421, session 45)
    assert HttpOptions(host="127.0.0.2", token=TOKEN).allowed_hosts() == [
        "127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*", "127.0.0.2", "127.0.0.2:*"]
    assert HttpOptions(host="::1").allowed_hosts() == ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*",
                                                       "[::1]", "[::1]:*"]


# ---------------------------------------------------------------- CLI and real servers
def test_cli_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    port = free_port()
    out = subprocess.run([sys.executable, "-m", "pipeline.cli", "mcp", "--http", "--host", "0.0.0.0", "--port",
                          str(port)], env=_env(), cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr == (f"error: refusing to serve MCP on 0.0.0.0:{port} without a token: beyond loopback every "
                          f"request must carry a bearer token; put one in a file and pass --token-file FILE (or set "
                          f"DOCSVAULT_MCP_TOKEN_FILE or DOCSVAULT_MCP_TOKEN), or serve on 127.0.0.1\n")
    with socket.socket() as s:                          # nothing listens
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_ctrl_c_prints_interrupted_and_exits_130(tmp_path: Path) -> None:
    """As every command: SIGINT stops `mcp --http` (uvicorn shuts down first) with `interrupted` and exit 130."""
    import signal

    port = free_port()
    log = tmp_path / "mcp.log"
    env = _env({"DOCSVAULT_DATA": str(tmp_path / "data"), "DOCSVAULT_VAULT": str(tmp_path / "vault"),
                "DOCSVAULT_SOURCES": str(tmp_path / "sources.yaml")})
    with mcp_server(["--port", str(port)], env, log) as proc:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    lines = log.read_text().splitlines()
    assert lines[0] == f"docsvault-mcp INFO serving MCP over streamable HTTP on http://127.0.0.1:{port}/mcp (no token: " \
                       "loopback only)"
    assert lines[-1] == "interrupted"


@pytest.fixture
def built_env(tiny_env: Path) -> Path:
    from pipeline.defs.runner import run_build

    report = run_build(Settings.from_env())
    assert report.ok, (report.sources, report.shared_error)
    return tiny_env


def test_token_server_401_without_token_serves_with_it(built_env: Path) -> None:
    port = free_port()
    token_file = built_env / "mcp.token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    log = built_env / "server.log"
    url = f"http://127.0.0.1:{port}/mcp"
    with mcp_server(["--host", "0.0.0.0", "--port", str(port), "--token-file", str(token_file)], _env(), log):
        assert post(url) == (401, "missing or wrong bearer token\n")
        assert post(url, {"Authorization": f"Bearer {TOKEN}-wrong"})[0] == 401
        assert post(url, {"Authorization": f"Basic {TOKEN}"})[0] == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        # the DNS-rebinding checks still apply behind the token
        assert post(url, {**good, "Host": "evil.example:80"}) == (421, "Invalid Host header")
        assert post(url, {**good, "Origin": "http://evil.example"}) == (403, "Invalid Origin header")
        status, body = post(url, {**good, "Origin": f"http://127.0.0.1:{port}"})
        assert status == 200 and '"serverInfo"' in body
        paths = anyio.run(_search, url, TOKEN, "water bird in the pond")
        assert paths[0] == "tiny/Ducks.md"
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "bearer token required" in text
    assert TOKEN not in text


@pytest.mark.integration   # two server processes behind a would-be balancer; one real server is in the fast suite
def test_two_stateless_readers_serve_one_warehouse(built_env: Path) -> None:
    ports = [free_port(), free_port()]
    env = _env({"DOCSVAULT_MCP_TOKEN": TOKEN})
    with mcp_server(["--host", "0.0.0.0", "--port", str(ports[0]), "--stateless"], env, built_env / "a.log"), \
            mcp_server(["--host", "0.0.0.0", "--port", str(ports[1]), "--stateless"], env, built_env / "b.log"):
        results = [anyio.run(_search, f"http://127.0.0.1:{p}/mcp", TOKEN, "install the tool on windows")
                   for p in ports]
        # stateless: a call without a session id is answered by either process (a round-robin balancer works)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        for p in ports:
            status, body = post(f"http://127.0.0.1:{p}/mcp", {"Authorization": f"Bearer {TOKEN}"}, listing)
            assert status == 200 and '"search"' in body
    assert results[0] == results[1]
    assert results[0][0] == "tiny/Install guide.md"
    for name in ("a.log", "b.log"):     # the MCP library's "Terminating session: None" after each call is left out
        text = (built_env / name).read_text()
        assert "serving MCP over streamable HTTP" in text and "Terminating session" not in text
