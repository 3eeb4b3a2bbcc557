"""A read-only MCP server for a team's readers (`docsvault mcp --read-only`, DOCSVAULT_MCP_READ_ONLY=1): the write
tools save_note and refresh are not offered, a call of one is refused in one line naming the option; without the
option every tool is there as before (before, a valid token granted save_note and refresh too)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.mcp_server import ReadOnlyConfigError, create_server, read_only_env
from tests.test_mcp_http import TOKEN, _env, free_port, mcp_server

REPO = Path(__file__).resolve().parents[1]
READERS = ["read", "related", "search", "status"]
REFUSED = ("save_note: this server is read-only (docsvault mcp --read-only or DOCSVAULT_MCP_READ_ONLY=1): it does "
           "not save notes or refresh sources; its tools: search, read, related, status")


def _tools_and_refusal(server: Any) -> tuple[list[str], str]:
    from mcp.server.mcpserver.exceptions import ToolError

    async def scenario() -> tuple[list[str], str]:
        names = sorted(t.name for t in await server.list_tools())
        try:
            await server.call_tool("save_note", {"text": "# Leak\n\nwritten by a reader"})
        except ToolError as exc:
            return names, str(exc)
        return names, ""

    return anyio.run(scenario)


def test_a_read_only_server_offers_no_write_tool_and_refuses_one_in_a_line(tiny_env: Path) -> None:
    names, refusal = _tools_and_refusal(create_server(Settings.from_env(), read_only=True))
    assert (names, refusal) == (READERS, REFUSED)
    assert not list((tiny_env / "tinyvault").rglob("Leak*.md"))            # nothing was written
    default = create_server(Settings.from_env())                            # the default is unchanged

    async def listed() -> list[str]:
        return sorted(t.name for t in await default.list_tools())

    assert anyio.run(listed) == sorted([*READERS, "refresh", "save_note"])


@pytest.mark.parametrize(("value", "expected"), [
    (None, False), ("", False), ("0", False), ("false", False), ("No", False), ("off", False),
    ("1", True), ("true", True), ("YES", True), (" on ", True),
])
def test_read_only_env_values(value: str | None, expected: bool) -> None:
    assert read_only_env({} if value is None else {"DOCSVAULT_MCP_READ_ONLY": value}) is expected


def test_a_read_only_env_typo_stops_the_server_instead_of_serving_writes(tiny_env: Path) -> None:
    with pytest.raises(ReadOnlyConfigError):
        read_only_env({"DOCSVAULT_MCP_READ_ONLY": "ture"})
    result = CliRunner().invoke(app, ["mcp"], env={"DOCSVAULT_MCP_READ_ONLY": "ture"})
    assert (result.exit_code, result.output) == (2, (
        "error: DOCSVAULT_MCP_READ_ONLY='ture' is not a yes or no: set it to 1 (a read-only server: no save_note, "
        "no refresh) or 0, or unset it\n"))


def test_stdio_with_the_env_lists_only_the_read_tools(tiny_env: Path) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    lines = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
             {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "refresh", "arguments": {}}}]
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "mcp"], cwd=REPO, capture_output=True, text=True,
                          check=False,
                          input="".join(json.dumps(m) + "\n" for m in lines), timeout=120,
                          env=_env({"DOCSVAULT_MCP_READ_ONLY": "1"}))
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert sorted(t["name"] for t in replies[2]["result"]["tools"]) == READERS
    assert "save_note" not in replies[1]["result"]["instructions"]
    assert replies[3]["result"]["isError"] is True
    assert replies[3]["result"]["content"][0]["text"] == REFUSED.replace("save_note:", "refresh:")


def test_a_team_reader_with_a_valid_token_cannot_save_a_note(tiny_env: Path, tmp_path: Path) -> None:
    """The docs/deploy.md reader: `--host 0.0.0.0 --token-file F --read-only` over HTTP."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN, encoding="utf-8")
    port = free_port()

    async def scenario(url: str) -> tuple[list[str], Any]:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as client, \
                streamable_http_client(url, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            names = sorted(t.name for t in (await session.list_tools()).tools)
            return names, await session.call_tool("save_note", {"text": "# Leak\n\nx"})

    args = ["--host", "0.0.0.0", "--port", str(port), "--token-file", str(token_file), "--read-only"]
    with mcp_server(args, _env(), tmp_path / "server.log"):
        names, saved = anyio.run(scenario, f"http://127.0.0.1:{port}/mcp")
    assert names == READERS
    assert saved.is_error and saved.content[0].text == REFUSED
    assert "read-only: no save_note or refresh" in (tmp_path / "server.log").read_text()
    assert not list((tiny_env / "tinyvault").rglob("Leak*.md"))
