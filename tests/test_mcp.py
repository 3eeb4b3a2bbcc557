"""The MCP server over stdio, driven by the mcp package's own client: tools, search -> read, traversal refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from pipeline.config import Settings

REPO = Path(__file__).resolve().parents[1]
SECRET = "TOPSECRET-42"


def _payload(result: Any) -> dict[str, Any]:
    """The tool's JSON result (structured content, else the text block)."""
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if set(data) == {"result"} else data
    return json.loads(result.content[0].text)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def built_env(built_tiny_env: Path) -> Path:
    tiny_env = built_tiny_env                     # after a first build (run_build) of every source
    # EC-21 bait: secrets outside the vault, symlinks pointing at them from inside
    (tiny_env / "secret.txt").write_text(SECRET, encoding="utf-8")
    (tiny_env / "outside").mkdir()
    (tiny_env / "outside" / "secret.md").write_text(SECRET, encoding="utf-8")
    vault = tiny_env / "vault" / "tiny"
    (vault / "link.md").symlink_to(tiny_env / "secret.txt")
    (vault / "link2.md").symlink_to(tiny_env / "outside" / "secret.md")
    (vault / "outdir").symlink_to(tiny_env / "outside", target_is_directory=True)
    return tiny_env


TRAVERSALS = [
    "../secret.txt", "/etc/hostname", "..%2Fsecret.txt", "tiny/link.md", "%2e%2e/secret.txt",
    "%2E%2E%2Fsecret.txt", "tiny/../../secret.txt", "tiny/../../../etc/passwd", "..\\secret.txt",
    "tiny/%2e%2e/%2e%2e/secret.txt", "%252e%252e%252fsecret.txt", "~/secret.md", "C:/Windows/win.ini",
    "../sources.yaml", "tiny/.obsidian/app.json", "tiny/outdir/secret.md", "tiny/link2.md", "../vault/tiny/Ducks.md",
    "../outside/secret.md", "tiny/Ducks.md\x00.txt",
]


def test_stdio_server_search_read_and_refused_traversal(built_env: Path) -> None:
    assert len(TRAVERSALS) == 20
    env = {k: os.environ[k] for k in ("DOCSVAULT_SOURCES", "DOCSVAULT_DATA", "DOCSVAULT_VAULT", "DOCSVAULT_EVALS",
                                      "DOCSVAULT_MODEL", "DOCSVAULT_MULTILINGUAL_MODEL",
                                      "DOCSVAULT_CROSSLINGUAL_MODEL", "DAGSTER_HOME")}     # the build's fake models
    env |= {"OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "pipeline.cli", "mcp"], env=env, cwd=str(REPO))
    (built_env / "vault" / "tiny" / "absolute.md").write_text("x", encoding="utf-8")
    absolute = str(built_env / "vault" / "tiny" / "Ducks.md")       # a real note, but absolute: refused too

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        with open(built_env / "server-stderr.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    init = await session.initialize()
                    out["server"] = init.server_info.name
                    tools = await session.list_tools()
                    out["tools"] = {t.name: t for t in tools.tools}
                    out["search"] = await session.call_tool("search", {"query": "water bird in the pond", "k": 3})
                    hit = _payload(out["search"])["hits"][0]
                    out["read"] = await session.call_tool("read", hit["read"])
                    out["read_src"] = await session.call_tool("read", {"path": "Ducks.md"})   # a source path
                    # a link as a note writes it, which an agent copies: its note (it was "no note")
                    out["read_link"] = await session.call_tool("read", {"path": "[[Ducks#Ducks|the ducks]]"})
                    out["related_link"] = await session.call_tool("related", {"path": "Ducks#Ducks"})
                    out["read_no_heading"] = await session.call_tool("read", {"path": "Install guide#Windos"})
                    out["tagged"] = await session.call_tool("search", {"query": "welcome", "tag": "start"})
                    out["bad_source"] = await session.call_tool("search", {"query": "ducks", "source": "nope"})
                    out["list_source"] = await session.call_tool("search", {"query": "ducks", "source": ["tiny"]})
                    out["bad_k"] = await session.call_tool("search", {"query": "ducks", "k": 500})
                    out["read_links"] = await session.call_tool("read", {"path": "tiny/Home.md", "links": 1})
                    out["bad_links"] = await session.call_tool("read", {"path": "tiny/Home.md", "links": 0})
                    out["status"] = await session.call_tool("status", {})
                    out["refused"] = [await session.call_tool("read", {"path": p}) for p in [*TRAVERSALS, absolute]]
                    out["page_oob"] = await session.call_tool("read", {"path": "tiny/Ducks.md", "page": 9})
        return out

    out = anyio.run(scenario)
    assert out["server"] == "docsvault"
    assert set(out["tools"]) == {"search", "read", "related", "status", "refresh", "save_note"}
    for tool in out["tools"].values():
        assert tool.description and len(tool.description) > 80          # a sentence an agent can act on

    found = _payload(out["search"])
    assert not out["search"].is_error
    assert set(found) == {"query", "hits"}                  # the fields README's MCP table lists
    first = found["hits"][0]
    assert first["path"] == "tiny/Ducks.md" and first["source_path"] == "Ducks.md" and first["title"] == "Ducks"
    assert set(first) == {"rank", "path", "source", "source_path", "title", "heading", "score", "text", "read",
                          "continue_with", "context", "outlinks", "backlinks"}
    assert first["backlinks"] == [{"path": "tiny/Home.md", "title": "Home", "links": 1}]
    assert first["read"] == {"path": "tiny/Ducks.md", "page": 1}
    assert first["continue_with"] == 'read(path="tiny/Ducks.md", page=1)'
    assert "water bird" in first["text"] and len(first["text"]) <= 601
    assert len(found["hits"]) <= 3

    page = _payload(out["read"])
    assert set(page) == {"path", "title", "page", "pages", "next_page", "total_chars", "text", "frontmatter",
                         "outlinks", "backlinks", "outlinks_total", "backlinks_total", "next"}
    assert page["next_page"] is None and page["total_chars"] == len(page["text"])
    assert page["path"] == "tiny/Ducks.md" and page["page"] == 1 and page["pages"] == 1 and page["next"] is None
    assert page["text"] == "# Ducks\n\nDucks swim in the pond and eat bread. A duck is a water bird.\n"
    assert page["backlinks"] == [{"path": "tiny/Home.md", "title": "Home", "links": 1}] and page["outlinks"] == []
    assert _payload(out["read_src"])["path"] == "tiny/Ducks.md"
    home = _payload(out["read_links"])                  # `links`: how many neighbours each way (default 10)
    assert (home["outlinks"], home["outlinks_total"]) == ([{"path": "tiny/Ducks.md", "title": "Ducks", "links": 1}], 2)
    assert out["bad_links"].is_error
    assert out["bad_links"].content[0].text.endswith("links must be between 1 and 500, got 0")
    assert (_payload(out["read_link"])["path"], _payload(out["read_link"])["page"]) == ("tiny/Ducks.md", 1)
    assert _payload(out["related_link"])["path"] == "tiny/Ducks.md"
    no_heading = _payload(out["read_no_heading"])         # the note, and one line naming the missing heading
    assert (no_heading["path"], no_heading["page"], no_heading["warning"]) == (
        "tiny/Install guide.md", 1, ("heading 'Windos' not found in 'Install guide' (tiny/Install guide.md); "
                                     "showing page 1; closest headings: 'Windows'; e.g. read 'Install guide#Windows'"))
    assert "warning" not in _payload(out["read_link"])

    assert [h["path"] for h in _payload(out["tagged"])["hits"]] == ["tiny/Home.md"]
    assert out["bad_source"].is_error and "tiny" in _text(out["bad_source"])
    assert not out["list_source"].is_error and _payload(out["list_source"])["hits"][0]["source"] == "tiny"
    assert out["bad_k"].is_error
    status = _payload(out["status"])
    assert status["sources"][0]["name"] == "tiny" and status["sources"][0]["notes"] == 5
    assert status["warehouse"]["built"] is True

    assert len(out["refused"]) == 21
    for path, result in zip([*TRAVERSALS, "absolute"], out["refused"]):
        assert result.is_error, path
        assert SECRET not in _text(result), path
        assert "refused" in _text(result), (path, _text(result))
    assert out["page_oob"].is_error and "1 page" in _text(out["page_oob"])


def test_refresh_rebuilds_a_local_source_and_reports_changes(built_env: Path) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    settings = Settings.from_env()
    svc = VaultService(settings)
    assert [h["path"] for h in svc.search("heron", k=3)["hits"]][:1] != ["tiny/Heron.md"]
    (built_env / "tinyvault" / "Heron.md").write_text("# Heron\n\nA heron stands still in shallow water.\n",
                                                     encoding="utf-8")
    (built_env / "tinyvault" / "Ducks.md").write_text("# Ducks\n\nDucks quack loudly.\n", encoding="utf-8")
    parquet = built_env / "tinyvault" / "sub" / "Parquet files.md"        # retagged in Obsidian: the body unchanged
    parquet.write_text("---\ntags: [tech/duckdb]\n---\n" + parquet.read_text(encoding="utf-8"), encoding="utf-8")
    home = built_env / "vault" / "tiny" / "Home.md"                        # the user writes in a generated note
    home.write_text(home.read_text(encoding="utf-8") + "\nMy own line.\n", encoding="utf-8")
    # the changes are the build's own, compared under its lock; not this process's view of the warehouse, which
    # counted another build's changes when the refresh had waited for it (here: a view that never moves)
    frozen = svc._note_hashes(["tiny"])
    svc._note_hashes = lambda names: frozen                             # type: ignore[method-assign]
    report = svc.refresh("tiny")
    assert report["sources"] == ["tiny"]
    assert report["outcomes"][0]["kept_edits"] == [              # refresh said nothing of the edit it moved aside
        "vault/tiny/Home.md was edited since the build wrote it: your version is kept as vault/tiny/Home (edited).md"]
    assert "My own line." in (built_env / "vault" / "tiny" / "Home (edited).md").read_text(encoding="utf-8")
    assert report["counts"] == {"added": 1, "changed": 2, "removed": 0}       # the retagged note was not "changed"
    assert report["added"] == ["tiny/Heron.md"] and report["changed"] == ["tiny/Ducks.md", "tiny/sub/Parquet files.md"]
    assert svc.search("heron shallow water", k=3)["hits"][0]["path"] == "tiny/Heron.md"   # searchable at once
    with pytest.raises(ToolFailure, match="unknown source 'nope'; sources: tiny"):
        svc.refresh("nope")
    # on the same build (one build for the three): search by source, then a configured source without notes
    _search_takes_one_source_or_several()
    _search_names_a_configured_source_without_notes(built_env)


def test_refresh_names_the_files_it_skipped_and_why(built_env: Path) -> None:
    """An agent that wrote a note with a frontmatter typo and called refresh got `ok: true, skipped_files: 1` and
    nothing else: not which note, nor why it is not searchable. Each outcome with skipped files now lists them with
    their reasons (the lines `docsvault build` prints), none when there are none."""
    from pipeline.ingest.normalize import errors_file
    from pipeline.mcp_server import VaultService

    settings = Settings.from_env()
    svc = VaultService(settings)
    errors_file(settings, "tiny").write_text(
        "source 'tiny': 壊れたメモ.md: line 2: invalid YAML frontmatter: the flow sequence ([…]) that starts on line 2 "
        "is never closed; add the closing ']'\nsource 'tiny': Empty.md: empty file (no text); add content or "
        "exclude it\n", encoding="utf-8")
    outcome = {"name": "tiny", "status": "built", "notes": 5, "skipped_files": 2, "warning": None,
               "failed_stage": None, "error": None, "embedded": 1}
    assert svc._outcome(outcome) == {
        **{k: v for k, v in outcome.items() if k != "embedded"},
        "skipped": [{"file": "壊れたメモ.md", "reason": "line 2: invalid YAML frontmatter: the flow sequence ([…]) "
                     "that starts on line 2 is never closed; add the closing ']'"},
                    {"file": "Empty.md", "reason": "empty file (no text); add content or exclude it"}]}
    assert "skipped" not in svc._outcome({**outcome, "skipped_files": 0})


def _search_names_a_configured_source_without_notes(built_env: Path) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    settings = Settings.from_env()
    (built_env / "empty").mkdir()
    with settings.sources_file.open("a", encoding="utf-8") as f:
        f.write(f"  - name: later\n    kind: local\n    path: {built_env / 'empty'}\n    format: obsidian\n")
    svc = VaultService(settings)
    with pytest.raises(ToolFailure, match=r"^source 'later' is in sources.yaml but has no notes in the warehouse "):
        svc.search("ducks", source="later")
    with pytest.raises(ToolFailure, match=r"^unknown source 'nope'; the warehouse "):
        svc.search("ducks", source="nope")


def _search_takes_one_source_or_several() -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    svc = VaultService(Settings.from_env())
    one = svc.search("ducks", source="tiny")["hits"]
    assert one and {h["source"] for h in one} == {"tiny"}
    assert svc.search("ducks", source=["tiny"])["hits"] == one
    assert svc.search("ducks", source=[])["hits"] == svc.search("ducks")["hits"]
    with pytest.raises(ToolFailure, match=r"^unknown source 'nope'; the warehouse "):
        svc.search("ducks", source=["tiny", "nope"])


def test_tool_errors_name_the_tool_arguments_not_cli_flags(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    monkeypatch.delenv("DOCSVAULT_CAPTURE_SOURCE", raising=False)
    svc = VaultService(Settings.from_env())
    with pytest.raises(ToolFailure) as err:
        svc.search("ducks", lanes=["bm25", "colbert"])
    assert str(err.value) == ("unknown lane 'colbert' in the `lanes` argument; available: bm25, bm25_page, vector, "
                              "crosslingual, graph, hybrid, hybrid+graph")
    with pytest.raises(ToolFailure) as err:
        svc.save_note("a note")
    assert str(err.value) == ("no capture source: set DOCSVAULT_CAPTURE_SOURCE to a local source of sources.yaml "
                              "(tiny) or pass the `source` argument")


@pytest.mark.parametrize("arguments, message", [
    ({"query": "ducks", "k": "abc"}, "search: argument 'k' must be an integer, got 'abc'"),
    ({"query": "ducks", "k": 1.5}, "search: argument 'k' must be an integer, got 1.5"),
    ({}, "search: missing argument 'query'"),
    ({"k": 3}, "search: missing argument 'query'"),
    ({"query": 5}, "search: argument 'query' must be a string, got 5"),
    ({"query": "ducks", "source": 5}, "search: argument 'source' must be a string or a list, got 5"),
    ({"query": "ducks", "lanes": "bm25"}, "search: argument 'lanes' must be a list, got 'bm25'"),
    ({"query": "ducks", "lanes": ["bm25", 3]}, "search: argument 'lanes' must be a list of strings, got ['bm25', 3]"),
    ({"query": "ducks", "k": True}, "search: argument 'k' must be an integer, got True"),
    ({"query": "ducks", "limit": 3}, "search: unknown argument 'limit'; its arguments: query, k, source, tag, "
                                     "lanes"),
])
def test_argument_type_errors_are_one_line(tiny_env: Path, arguments: dict[str, Any], message: str) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from pipeline.mcp_server import create_server

    server = create_server(Settings.from_env())

    async def call() -> None:
        await server.call_tool("search", arguments)

    with pytest.raises(ToolError) as err:
        anyio.run(call)
    assert str(err.value) == message


def test_an_empty_tag_is_refused_as_in_the_cli(tiny_env: Path) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    svc = VaultService(Settings.from_env())
    for tag in ("", "  ", "#"):
        with pytest.raises(ToolFailure) as err:
            svc.search("ducks", tag=tag)
        assert str(err.value) == "the `tag` argument is empty: pass a tag, e.g. journal, or leave `tag` out"


def test_the_tag_argument_is_compared_as_the_cli_compares_tags(built_env: Path) -> None:
    """search's ``tag`` goes through the same NFKC, case-folded comparison as ``--tag`` and ``tag:``
    (full-width ``ＳＴＡＲＴ`` is Home's ``start``), in the argument and in the query alike."""
    from pipeline.mcp_server import VaultService

    svc = VaultService(Settings.from_env())
    for tag, query in (("ＳＴＡＲＴ", "welcome"), ("#Start", "welcome"), (None, "welcome tag:ＳＴＡＲＴ")):
        assert [h["path"] for h in svc.search(query, tag=tag)["hits"]] == ["tiny/Home.md"], (tag, query)


def test_the_tag_argument_takes_a_list_as_the_cli_takes_several_tags(built_env: Path) -> None:
    """Finding of an agent user (s37-nu3): ``--tag`` repeats in the CLI and ``source`` takes a list, but
    ``tag: ["日記", "journal"]`` was refused (``argument 'tag' must be a string``). A list now means any of its tags;
    each is checked as one tag is."""
    from mcp.server.mcpserver.exceptions import ToolError

    from pipeline.mcp_server import ToolFailure, VaultService, create_server

    svc = VaultService(Settings.from_env())
    assert [h["path"] for h in svc.search("welcome", tag=["nobody", "ＳＴＡＲＴ"])["hits"]] == ["tiny/Home.md"]
    assert svc.search("welcome", tag=["nobody"])["message"] == (
        "No results: no note has the tag 'nobody' (frontmatter or inline #tag)")
    for tag, message in ((["start", " "], "the `tag` argument is empty: pass a tag, e.g. journal, or leave `tag` out"),
                         (["start", 5], "the `tag` argument must be a tag or a list of tags, got 5 in it")):
        with pytest.raises(ToolFailure) as err:
            svc.search("welcome", tag=tag)
        assert str(err.value) == message
    server = create_server(Settings.from_env())

    async def call(tag: Any) -> Any:
        return await server.call_tool("search", {"query": "welcome", "tag": tag})

    out = anyio.run(call, ["nobody", "start"])
    assert '"path": "tiny/Home.md"' in json.dumps(out, default=str).replace('\\"', '"')
    with pytest.raises(ToolError) as terr:
        anyio.run(call, 5)
    assert str(terr.value) == "search: argument 'tag' must be a string or a list, got 5"


def test_a_line_that_is_not_json_rpc_gets_a_parse_error_and_the_server_goes_on(built_env: Path) -> None:
    """JSON-RPC's parse error (-32700, id null) for a line that is not JSON, Invalid Request (-32600, with the
    line's id) for JSON that is no JSON-RPC 2.0 message, nothing for a blank line, one warning on stderr per reply,
    and the next request is served; the SDK used to drop such lines without a reply."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
        lines = ["this is not json", "", "   ", '{"jsonrpc": "2.0", "id": 18}',
                 '{"jsonrpc": "1.0", "id": "a", "method": "tools/list"}', json.dumps(init)]
        out, err = proc.communicate("\n".join(lines) + "\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    first, second, third, last = [json.loads(line) for line in out.splitlines()]     # blank lines: no reply
    assert first == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32700, "message": "Parse error: Invalid JSON: expected ident at line 1 column 2"}}
    assert second == {"jsonrpc": "2.0", "id": 18, "error": {"code": -32600, "message": (
        "Invalid Request: not a JSON-RPC 2.0 request, notification or response (method: Field required)")}}
    assert third == {"jsonrpc": "2.0", "id": "a", "error": {"code": -32600, "message": (
        "Invalid Request: not a JSON-RPC 2.0 request, notification or response (jsonrpc: Input should be '2.0')")}}
    assert last["id"] == 1 and last["result"]["serverInfo"]["name"] == "docsvault"
    assert proc.returncode == 0
    assert ("a line on stdin is not a JSON-RPC message (Parse error: Invalid JSON: expected ident at line 1 column "
            "2): answered with error -32700") in err


def test_a_line_that_is_not_utf8_gets_a_parse_error_not_a_note_of_replacement_characters(built_env: Path) -> None:
    """A client writing Shift_JIS on stdio: the SDK decoded the line with "replace", and save_note wrote the note
    '�V�t�gJIS.md' of U+FFFD (helper s43-ja; HTTP answered -32700). Now the line gets the parse error, naming the
    first byte that is no UTF-8, and the server goes on."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env)
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "save_note", "arguments": {"text": "シフトJISのメモ", "title": "シフトJIS"}}}
        data = (json.dumps(call, ensure_ascii=False).encode("cp932") + b"\n"
                + json.dumps(init, ensure_ascii=False).encode("utf-8") + b"\n")
        out, err = proc.communicate(data, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    first, last = [json.loads(line) for line in out.decode("utf-8").splitlines()]
    at = json.dumps(call, ensure_ascii=False).index("シ") + 1
    assert first == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": (
        f"Parse error: the line is not UTF-8 (byte 0x83 at character {at}): send JSON-RPC messages in UTF-8")}}
    assert last["id"] == 1 and last["result"]["serverInfo"]["name"] == "docsvault"
    assert proc.returncode == 0 and b"answered with error -32700" in err


def test_search_tool_lists_the_notes_of_a_query_of_filters_alone(built_env: Path) -> None:
    """``source:tiny`` alone: the notes by vault path, score 0, with a message saying the hits are a listing."""
    from pipeline.mcp_server import LISTING_MESSAGE, VaultService

    out = VaultService(Settings.from_env()).search("source:tiny -pond", k=2)
    assert ([h["path"] for h in out["hits"]], [h["score"] for h in out["hits"]], out["message"], out["more"]) == (
        ["tiny/Home.md", "tiny/Install guide.md"], [0.0, 0.0],
        LISTING_MESSAGE + "; more notes pass them: raise k (at most 20) or add a filter", True)  # was ") More notes"
    out = VaultService(Settings.from_env()).search("source:tiny -pond", k=4)
    assert (len(out["hits"]), out["message"], out["more"]) == (4, LISTING_MESSAGE, False)


def test_a_tag_no_note_has_is_named_as_such(built_env: Path) -> None:
    """`tag:nobody` found nothing and said only "No results": now it says no note has the tag (CLI and MCP)."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.mcp_server import VaultService

    out = VaultService(Settings.from_env()).search("ducks tag:nobody", k=2)
    assert (out["hits"], out["message"]) == ([], "No results: no note has the tag 'nobody' (frontmatter or inline #tag)")
    result = CliRunner().invoke(app, ["search", "tag:nobody", "--source", "tiny"])
    assert (result.exit_code, result.output) == (
        1, "No results: no note of tiny has the tag 'nobody' (frontmatter or inline #tag)\n")
    # scoped to a source, MCP said "no note has the tag" of a tag other sources' notes have (session 44: an agent
    # read that the tag did not exist); now the sources searched, as the CLI names them
    out = VaultService(Settings.from_env()).search("ducks", k=2, source="tiny", tag="nobody")
    assert (out["hits"], out["message"]) == (
        [], "No results: no note of tiny has the tag 'nobody' (frontmatter or inline #tag)")


def test_words_no_note_contains_are_named(built_env: Path) -> None:
    """Hybrid search always answers with the notes nearest in meaning; a word no note has passed unnoticed (a new
    user's agent read `platypus-lantern`'s hits as matches). Now the CLI and MCP name such words, and say when
    that is every word of the query."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.mcp_server import VaultService

    service = VaultService(Settings.from_env())
    out = service.search("ducks platypus", k=2)
    assert (out["missing"], out["message"]) == (["platypus"], "no note contains 'platypus'")
    out = service.search("the platypus-lantern?", k=2, source="tiny")
    assert out["hits"]
    assert (out["missing"], out["message"]) == (
        ["platypus-lantern"], "no note of tiny contains 'platypus-lantern': these notes are only near in meaning")
    assert "missing" not in service.search("ducks pond", k=2)
    runner = CliRunner()
    result = runner.invoke(app, ["search", "ducks platypus", "-k", "1"])
    assert result.exit_code == 0 and result.output.splitlines()[0] == "(no note contains 'platypus')"
    result = runner.invoke(app, ["search", "platypus", "-k", "1", "--files"])
    assert result.exit_code == 0
    assert result.stderr == "(no note contains 'platypus': these notes are only near in meaning)\n"
    assert "platypus" not in result.stdout
    # a file the build skipped (a malformed note) may hold the word: the line says so (a new user searched the
    # word of a note skipped at its first build and was told only that no note contains it)
    from pipeline.ingest.normalize import errors_file

    errors_file(Settings.from_env(), "tiny").write_text("source 'tiny': Broken.md: invalid frontmatter\n",
                                                        encoding="utf-8")
    skipped = "; 1 file the build skipped is not searched (`docsvault status` names them)"
    assert service.search("ducks platypus", k=2)["message"] == "no note contains 'platypus'" + skipped
    result = runner.invoke(app, ["search", "ducks platypus", "-k", "1"])
    assert result.output.splitlines()[0] == f"(no note contains 'platypus'{skipped})"


def test_missing_words_are_those_of_the_searched_part_of_a_long_query(built_env: Path) -> None:
    """A search ranks a query's first 2,000 characters, but the missing-words check read all of it: a pasted
    20,000-character query answered with 3,000 words past that part in `missing` and a 36,000-character `message`
    (session 44, an agent over MCP). Now only the words of the searched part are looked at, on the CLI too."""
    from pipeline.mcp_server import VaultService
    from pipeline.search.searcher import MAX_QUERY_CHARS

    words = [f"zq{i:05d}" for i in range(3000)]             # 8 characters with the space: 250 in 2,000
    query = "ducks " + " ".join(words)
    out = VaultService(Settings.from_env()).search(query, k=2)
    assert len(query) == 24_005 and out["hits"]
    assert out["missing"] == words[:249]                    # "ducks " + 249 words: 1,997 characters
    assert len(out["message"]) == 3_250 and out["message"].endswith("or 'zq00248'")
    huge = VaultService(Settings.from_env()).search("x" * 100_000, k=1)
    assert [len(w) for w in huge["missing"]] == [MAX_QUERY_CHARS]   # was the whole 100,000-character word


def test_a_skipped_file_serving_its_last_good_version_is_not_called_unsearched(built_env: Path) -> None:
    """A note whose file broke (a frontmatter typo, an emptied file) keeps its last good version in search, but a
    missing word's line said "2 files the build skipped are not searched" of those two: they are searched, as they
    last built. A file never built is still "not searched"; both kinds together are told apart."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.ingest.normalize import errors_file
    from pipeline.mcp_server import VaultService
    from pipeline.stages import KEPT_SUFFIX

    service = VaultService(Settings.from_env())
    kept = [f"source 'tiny': {name}: invalid frontmatter{KEPT_SUFFIX}" for name in ("旅行.md", "Shopping.md")]
    errors_file(Settings.from_env(), "tiny").write_text("\n".join(kept) + "\n", encoding="utf-8")
    stale = "; 2 files the build skipped are searched as they last built, not as they are now"
    assert service.search("ducks platypus", k=2)["message"] == (
        f"no note contains 'platypus'{stale} (`docsvault status` names them)")
    result = CliRunner().invoke(app, ["search", "ducks platypus", "-k", "1"])
    assert result.output.splitlines()[0] == f"(no note contains 'platypus'{stale} (`docsvault status` names them))"
    errors_file(Settings.from_env(), "tiny").write_text(
        "\n".join([kept[0], "source 'tiny': Broken.md: invalid frontmatter"]) + "\n", encoding="utf-8")
    assert service.search("ducks platypus", k=2, source="tiny")["message"] == (
        "no note of tiny contains 'platypus'; of the files the build skipped, 1 is not searched and 1 is searched "
        "as it last built, not as it is now (`docsvault status` names them)")


def test_missing_words_split_and_translate_as_bm25_does(built_env: Path) -> None:
    """A word is in a note when one of its BM25 terms is (stemmed, split); stopwords are never searched for."""
    from pipeline.service import open_searcher

    with open_searcher(Settings.from_env()) as searcher:
        assert searcher.missing_words("Ducking the ponds of platypus")[:2] == (
            ("Ducking", "ponds", "platypus"), ("platypus",))
        assert searcher.missing_words("the of")[:2] == ((), ())
        assert not searcher.missing_words("the of").every
        assert searcher.missing_words('"platypus"').every
        # Japanese written without spaces: each word Sudachi finds; 池 is in through its translation ("pond")
        assert searcher.missing_words("ピカチュウの池")[:2] == (("ピカチュウ", "池"), ("ピカチュウ",))
        # named as typed, not in Sudachi's normalised form (ずんどこ), English words in it too
        assert searcher.missing_words("ズンドコのPondsを")[:2] == (("ズンドコ", "Ponds"), ("ズンドコ",))
        # an English question's words are no names a note is looked for by, as a Japanese question's どう: "how do I
        # read parquet" said "(no note contains 'how')" over a vault of notes (session 43)
        assert searcher.missing_words("How do I keep my ducks?")[:2] == (("keep", "ducks"), ("keep",))
        assert searcher.missing_words("what did you do with platypus")[:2] == (("platypus",), ("platypus",))
        # also with the typographic apostrophe macOS types: "(no note contains 'I’m' or 'what’s')" before
        assert searcher.missing_words("I’m asking what’s with platypus, don’t I")[:2] == (
            ("asking", "platypus"), ("asking", "platypus"))


def test_keyword_only_search_that_finds_nothing_names_the_words_no_note_has(built_env: Path) -> None:
    """An agent searching by keyword only (`lanes=["bm25"]`, the README's keyword-only search) for a typo got
    `{"hits": [], "message": "No results"}` (session 49): it could not tell a misspelt word from a topic the notes
    lack, while the hybrid search of the same word says "did you mean 'parquet'?". Now "No results" names the
    words no note contains, with the word a typo meant (`missing` too), in the MCP tool and the CLI (plain; on
    stderr with --json/--files); a query of words too common to search for says so."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.mcp_server import VaultService

    service = VaultService(Settings.from_env())
    out = service.search("paruqet", k=2, lanes=["bm25"])
    assert out == {"query": "paruqet", "hits": [], "missing": ["paruqet"],
                   "message": "No results: no note contains 'paruqet' (did you mean 'parquet'?)"}
    out = service.search("platypus", k=2, source="tiny", lanes=["bm25"])
    assert (out["missing"], out["message"]) == (["platypus"], "No results: no note of tiny contains 'platypus'")
    # a filter that explains the empty answer keeps its own message
    assert service.search('"no such phrase" ducks', k=2, lanes=["bm25"])["message"].startswith(
        'No results: no note contains "no such phrase"')
    runner = CliRunner()
    result = runner.invoke(app, ["search", "paruqet", "--lanes", "bm25"])
    assert (result.exit_code, result.output) == (1, "No results: no note contains 'paruqet' (did you mean 'parquet'?)\n")
    result = runner.invoke(app, ["search", "paruqet", "--lanes", "bm25", "--json"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        1, "[]\n", "(No results: no note contains 'paruqet' (did you mean 'parquet'?))\n")
    result = runner.invoke(app, ["search", "これは何ですか", "--lanes", "bm25"])
    assert (result.exit_code, result.output) == (1, ("No results: every word of the query is too common to search "
                                                     "for ('これは何ですか'); add a word that names what you look for\n"))


def test_a_misspelt_word_gets_the_word_of_the_notes_spelt_nearly_so(built_env: Path) -> None:
    """``paruqet`` is in no note: search says so and offers ``parquet`` as the notes write it (the BM25 term is
    stemmed or whole; the word shown is read from a chunk holding it), in the CLI and the MCP search tool alike.
    No offer for a word nothing is near, a Japanese word, or in a scope whose notes lack the near word. Before
    session 46 a typo got "no note contains 'paruqet'" alone (helper-135)."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.mcp_server import VaultService
    from pipeline.service import open_searcher

    with open_searcher(Settings.from_env()) as searcher:
        assert searcher.missing_words("read paruqet files") == (
            ("read", "paruqet", "files"), ("paruqet",), (("paruqet", "parquet"),))
        assert searcher.missing_words("instal on windws") == (
            ("instal", "windws"), ("windws",), (("windws", "windows"),))
        assert searcher.missing_words("platypus ducks").closest == ()
        assert searcher.missing_words("ピカチュウ").closest == ()
        assert searcher.closest_word("Duks") == "ducks"
        assert searcher.closest_word("x7") == ""
        # an English word the notes lack is no typo of one they have: "stage" is near "storage" (helper-150: "hot"
        # got "did you mean 'host'?")
        assert (searcher.closest_word("stroage"), searcher.closest_word("stage")) == ("storage", "")
    result = CliRunner().invoke(app, ["search", "paruqet", "-k", "1"])
    assert result.output.splitlines()[0] == (
        "(no note contains 'paruqet' (did you mean 'parquet'?): these notes are only near in meaning)")
    service = VaultService(Settings.from_env())
    assert service.search("paruqet files", k=1)["message"] == "no note contains 'paruqet' (did you mean 'parquet'?)"


def test_a_query_of_common_words_only_says_its_hits_are_near_in_meaning(built_env: Path) -> None:
    """``what is the`` or ``これは何ですか`` has no word keyword search looks for, so its hits come from the vector
    lanes alone; they were shown with no word said, as if they matched (helper-137, session 44). The CLI and the MCP
    search tool now say it, as they say words no note contains."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.mcp_server import VaultService

    line = ("every word of the query is too common to search for ('what', 'is', 'the'): these notes are only near "
            "in meaning; add a word that names what you look for")
    out = VaultService(Settings.from_env()).search("what is the?", k=2)
    assert out["hits"] and out["message"] == line and "missing" not in out
    result = CliRunner().invoke(app, ["search", "what is the?", "-k", "1"])
    assert result.exit_code == 0 and result.output.splitlines()[0] == f"({line})"
    result = CliRunner().invoke(app, ["search", "これは何ですか", "-k", "1", "--json"])
    assert result.exit_code == 0 and result.stderr.splitlines() == [(
        "(every word of the query is too common to search for ('これは何ですか'): these notes are only near in "
        "meaning; add a word that names what you look for)")]
    assert "message" not in VaultService(Settings.from_env()).search("what is the duck", k=2)


def test_note_hashes_tell_a_retagged_note_and_not_a_new_fetch_time() -> None:
    """refresh's `changed` compares these: a note whose frontmatter alone changed (retagged in Obsidian) is
    changed; a new `fetched_at` (set by every fetch) is not."""
    import json

    import duckdb

    from pipeline.warehouse import note_hashes
    from pipeline.warehouse.schema import _TABLES

    def hashes(tags: list[str], fetched: str) -> dict[str, str]:
        con = duckdb.connect(":memory:")
        con.execute(_TABLES["notes"])
        fm = {"title": "A", "tags": tags, "content_hash": "h1", "fetched_at": fetched}
        con.execute("INSERT INTO notes (note_id, source, source_path, vault_path, content_hash, frontmatter) VALUES "
                    "('1', 'me', 'A.md', 'me/A.md', 'h1', ?), ('2', 'other', 'B.md', 'other/B.md', 'h2', NULL)",
                    [json.dumps(fm)])
        return note_hashes(con, ["me"])

    first = hashes(["x"], "2026-01-01T00:00:00+00:00")
    assert list(first) == ["me/A.md"]
    assert hashes(["x"], "2026-02-02T00:00:00+00:00") == first
    assert hashes(["x", "y/z"], "2026-01-01T00:00:00+00:00") != first


def test_read_and_related_of_an_overlong_name_are_one_bounded_line(built_env: Path) -> None:
    """A name longer than a file name can be (300 chars: ENAMETOOLONG from the file system) was an internal error
    of `read`; a pasted 100,000-character one was that, or a 200,000-character "no note" line quoting it twice."""
    from pipeline.mcp_server import ToolFailure, VaultService
    from pipeline.search.reader import PathRefusedError, read_link

    svc = VaultService(Settings.from_env())
    settings = Settings.from_env()
    for name in ("x" * 300, "日" * 300, "a/" + "x" * 300 + ".md"):
        for call in (lambda n: svc.read(n), lambda n: svc.related(n)):
            with pytest.raises(ToolFailure, match="^no note ") as err:
                call(name)
            assert len(str(err.value)) < 2200
    huge = "x" * 100_000
    for call in (lambda n: svc.read(n), lambda n: svc.related(n)):
        with pytest.raises((ToolFailure, PathRefusedError)) as err:     # either is the tool's one error line
            call(huge)
        assert str(err.value) == (f"refused {'x' * 117 + '...'!r}: it is 100,000 characters; a vault path, note "
                                  "name, title, alias or link is at most 4,096; give a note's vault path as search "
                                  "returns it, e.g. 'source/folder/Note.md'")
    with pytest.raises(PathRefusedError):
        read_link(settings.vault_dir, huge, 1, settings.warehouse_path)


def test_related_of_a_file_of_yours_in_the_vault_says_no_build_reads_it(built_env: Path) -> None:
    """A note-taker's `vault/Inbox/受信箱.md` (outside the source folders) and `vault/tiny/私のファイル.md` (in one,
    not written by the build) open with `read`, but `related` said "run `docsvault build` if the note is new",
    which never makes them notes; it now says whose file it is and where to put it. A note the build wrote keeps
    its neighbours."""
    from pipeline.mcp_server import ToolFailure, VaultService

    vault = built_env / "vault"
    (vault / "Inbox").mkdir()
    (vault / "Inbox" / "受信箱.md").write_text("# 受信箱\n\nvault に直接書いた。\n", encoding="utf-8")
    (vault / "tiny" / "私のファイル.md").write_text("# mine\n", encoding="utf-8")
    svc = VaultService(Settings.from_env())
    assert svc.read("Inbox/受信箱.md")["title"] == "受信箱"
    move = (f"no build reads it, so it has no links or related notes; to have it searched and linked, move it into "
            f"the folder a `local` source of {built_env / 'sources.yaml'} reads (not the vault) and run "
            "`docsvault build` (or the refresh tool)")
    for note, where in [("Inbox/受信箱.md", "outside the source folders of the vault"),
                        ("tiny/私のファイル.md", "in the source folder vault/tiny/ (a file docsvault did not write)")]:
        with pytest.raises(ToolFailure) as failure:
            svc.related(note)
        assert str(failure.value) == f"{note!r} is your own file {where}: {move}"
    assert svc.related("tiny/Ducks.md")["path"] == "tiny/Ducks.md"


def test_refresh_outcome_names_the_warning_lines_of_the_build() -> None:
    """An agent that saved a note embedding an image not in the vault, or linking `[[Meeting notes]]` that two
    notes are named, got `"warning": null` from `refresh` while `docsvault build` printed both lines: the
    outcome now carries the build's `warnings` (at most LIST_CAP), and none when there are none."""
    from pipeline.mcp_server import LIST_CAP, VaultService

    svc = VaultService(Settings.from_env())
    lines = ["source 'me': Plan.md: map.png (line 5) is not in the source (deleted or moved?): …",
             "source 'me': Garden.md: [[Meeting notes]] (line 6) could mean 2 notes: …"]
    base = {"name": "me", "status": "built", "notes": 3, "skipped_files": 0, "warning": None,
            "failed_stage": None, "error": None, "kept_edits": []}
    assert svc._outcome({**base, "warnings": lines})["warnings"] == lines
    assert len(svc._outcome({**base, "warnings": lines * LIST_CAP})["warnings"]) == LIST_CAP
    assert "warnings" not in svc._outcome({**base, "warnings": []})
