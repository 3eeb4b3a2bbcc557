"""The MCP tools' input schemas as an agent reads them through the mcp client: every argument has a description,
the numeric ones the bounds the server enforces (one table, ``mcp_server.BOUNDS``), and an argument out of them
is refused in the same one line whether the schema's check or the service's catches it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from pipeline.config import Settings

#: per tool, per argument: the schema fields besides ``description`` and ``title`` (exact)
EXPECTED: dict[str, dict[str, dict[str, Any]]] = {
    "search": {
        "query": {"type": "string"},
        "k": {"type": "integer", "default": 8, "minimum": 1, "maximum": 20},
        "source": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                   "default": None},
        "tag": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None},
        "lanes": {"anyOf": [{"type": "array", "items": {"type": "string", "enum": [
            "bm25", "bm25_page", "vector", "crosslingual", "graph", "hybrid", "hybrid+graph"]}}, {"type": "null"}],
            "default": None},
    },
    "read": {"path": {"type": "string"}, "page": {"type": "integer", "default": 1, "minimum": 1},
             "links": {"type": "integer", "default": 10, "minimum": 1, "maximum": 500}},
    "related": {"path": {"type": "string"}, "k": {"type": "integer", "default": 10, "minimum": 1, "maximum": 20}},
    "save_note": {
        "text": {"type": "string"},
        **{arg: {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
           for arg in ("title", "name", "source")},
        "correlation_id": {"anyOf": [{"type": "string", "maxLength": 200}, {"type": "null"}], "default": None},
        "agent": {"type": "string", "default": "mcp agent"},
        "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
        "wait": {"type": "number", "default": 0, "minimum": 0, "maximum": 120},
    },
    "status": {},
    "refresh": {
        "source": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "full": {"type": "boolean", "default": False},
        "wait": {"type": "number", "default": 0, "minimum": 0, "maximum": 120},
    },
}

#: words each argument's description must carry: its unit, default, format or valid values
SAYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("search", "query"): ('"exact phrase"', "-word", " OR ", "source:NAME", "tag:TAG", "path:PREFIX", "Japanese"),
    ("search", "k"): ("1-20", "default 8", "one per note"),
    ("search", "source"): ("status", "list", "Default: every source"),
    ("search", "tag"): ("frontmatter", "#tag", "list", "project/alpha"),
    ("search", "lanes"): ("bm25", "bm25_page", "vector", "crosslingual", "graph", "hybrid+graph", "Default: hybrid"),
    ("read", "path"): ("vault path", "alias", "[[Note#Heading|text]]"),
    ("read", "page"): ("1,000 characters", "default 1", "`next`"),
    ("read", "links"): ("1-500", "default 10", "`backlinks_total`"),
    ("related", "path"): ("vault path", "alias"),
    ("related", "k"): ("1-20", "default 10"),
    ("save_note", "text"): ("Markdown", "1,000,000 characters", "frontmatter"),
    ("save_note", "title"): ("# title", "Default"),
    ("save_note", "name"): ("without .md", "120 characters", "252 UTF-8 bytes", "daily/2026-12-04", "never overwritten"),
    ("save_note", "source"): ("local source", "DOCSVAULT_CAPTURE_SOURCE"),
    ("save_note", "agent"): ("frontmatter", '"mcp agent"'),
    ("save_note", "correlation_id"): ("correlation_id", "at most 200 characters", "Default"),
    ("save_note", "tags"): ("project/alpha", "no spaces"),
    ("save_note", "wait"): ("Seconds", "0-120", "default 0"),
    ("refresh", "source"): ("local source", "Default: every local source", "Git"),
    ("refresh", "full"): ("true", "Default false"),
    ("refresh", "wait"): ("Seconds", "0-120", "default 0"),
}


def _tools(settings: Settings) -> dict[str, Any]:
    from pipeline.mcp_server import create_server

    async def listed() -> dict[str, Any]:
        async with Client(create_server(settings)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    return anyio.run(listed)


def test_every_argument_has_a_description_and_the_enforced_bounds(tiny_env: Path) -> None:
    tools = _tools(Settings.from_env())
    assert set(tools) == set(EXPECTED)
    for name, args in EXPECTED.items():
        props = tools[name].input_schema["properties"]
        assert set(props) == set(args), name
        for arg, fields in args.items():
            schema = dict(props[arg])
            description = schema.pop("description")
            schema.pop("title")
            assert schema == fields, (name, arg)
            for words in SAYS[(name, arg)]:
                assert words in description, (name, arg, words)
    assert tools["search"].input_schema["required"] == ["query"]
    assert tools["save_note"].input_schema["required"] == ["text"]
    # read returns the note's links: an agent walking the graph learns it from the description (session 41)
    assert "`outlinks`/`backlinks`" in tools["read"].description


def test_the_lane_names_of_the_schema_are_the_searchers() -> None:
    from pipeline.mcp_server import LANE_CHOICES
    from pipeline.search.searcher import LANES
    from pipeline.service import parse_lanes

    assert LANE_CHOICES == (*LANES, "hybrid", "hybrid+graph")
    assert set(parse_lanes(",".join(LANE_CHOICES))) == set(LANE_CHOICES)


@pytest.mark.parametrize(("tool", "arguments", "line"), [
    ("search", {"query": "ducks", "k": 99}, "search: k must be between 1 and 20, got 99"),
    ("search", {"query": "ducks", "k": 0}, "search: k must be between 1 and 20, got 0"),
    ("related", {"path": "Ducks", "k": 21}, "related: k must be between 1 and 20, got 21"),
    ("read", {"path": "Ducks", "page": 0}, "read: page must be 1 or more, got 0"),
    ("read", {"path": "Ducks", "links": 501}, "read: links must be between 1 and 500, got 501"),
    ("refresh", {"wait": 121}, "refresh: wait must be between 0 and 120 seconds, got 121"),
    ("save_note", {"text": "x", "wait": -1}, "save_note: wait must be between 0 and 120 seconds, got -1"),
])
def test_an_argument_out_of_its_bounds_is_one_line(tiny_env: Path, tool: str, arguments: dict[str, Any],
                                                   line: str) -> None:
    from pipeline.mcp_server import create_server

    async def called() -> Any:
        async with Client(create_server(Settings.from_env())) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(called)
    assert result.is_error and [c.text for c in result.content] == [line]
    assert not list((tiny_env / "tinyvault").rglob("x.md"))


@pytest.mark.parametrize(("arg", "value", "problem"), [
    ("k", 20, None), ("k", 1, None), ("k", 21, "k must be between 1 and 20, got 21"),
    ("k", 2.0, "k must be between 1 and 20, got 2.0"), ("k", True, "k must be between 1 and 20, got True"),
    ("page", 1000, None), ("page", -3, "page must be 1 or more, got -3"),
    ("wait", 0.5, None), ("wait", 120, None), ("wait", "5", "wait must be between 0 and 120 seconds, got '5'"),
])
def test_range_problem_reads_the_one_table(arg: str, value: Any, problem: str | None) -> None:
    from pipeline.mcp_server import range_problem

    assert range_problem(arg, value) == problem



LONG = "z" * 100_000
CUT = "z" * 117 + "..."


@pytest.mark.parametrize(("tool", "arguments", "line"), [
    ("refresh", {"source": LONG}, f"refresh: unknown source '{CUT}'; sources: tiny"),
    ("save_note", {"text": "Voles.", "correlation_id": "c" * 201},
     "save_note: argument 'correlation_id' is 201 characters; at most 200"),
])
def test_an_error_echoing_a_long_argument_is_one_short_line(tiny_env: Path, tool: str, arguments: dict[str, Any],
                                                            line: str) -> None:
    """A 100,000-character source came back whole in the error (and a correlation id was written whole into the
    note's frontmatter): a quoted value is cut at 117 characters, a correlation id is at most 200."""
    from pipeline.mcp_server import create_server

    async def called() -> Any:
        async with Client(create_server(Settings.from_env())) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(called)
    assert result.is_error and [c.text for c in result.content] == [line]
    assert not list((tiny_env / "tinyvault").rglob("Voles*.md"))


def test_a_long_correlation_id_is_refused_by_capture(tmp_path: Path) -> None:
    from pipeline.ingest.capture import CaptureError, write_capture
    from pipeline.models import Source

    root = tmp_path / "inbox"
    root.mkdir()
    src = Source(name="inbox", kind="local", path=(root,))
    with pytest.raises(CaptureError) as err:
        write_capture(src, "Voles.", correlation_id="c" * 201)
    assert str(err.value) == "the correlation id is 201 characters; at most 200 (nothing was written)"
    assert list(root.iterdir()) == []
    assert write_capture(src, "Voles.", correlation_id="c" * 200).correlation_id == "c" * 200


def test_shorten_quoted_cuts_only_long_quoted_values() -> None:
    from pipeline.mcp_server import shorten_quoted

    assert shorten_quoted(f"no tag '{LONG}' or 'ok' here", {"tag": LONG}) == f"no tag '{CUT}' or 'ok' here"
    assert shorten_quoted("a 'short' one", {"tag": "short"}) == "a 'short' one"


def test_search_quotes_a_long_source_or_tag_cut(built_tiny_env: Path) -> None:
    from pipeline.mcp_server import create_server

    async def called() -> list[Any]:
        async with Client(create_server(Settings.from_env())) as client:
            return [await client.call_tool("search", {"query": "ducks", "source": LONG}),
                    await client.call_tool("search", {"query": "ducks", "tag": LONG})]

    source, tag = anyio.run(called)
    assert source.is_error and source.content[0].text.startswith(f"search: unknown source '{CUT}'; the warehouse ")
    assert len(source.content[0].text) < 400
    assert tag.structured_content["message"] == (f"No results: no note has the tag '{CUT}' (frontmatter or inline "
                                                 "#tag)")


#: a note name of 128 characters with an apostrophe in it
LONG_NAME = ("How the nightly export of the team's shared reading list is rebuilt when a source moves and what the "
             "operator should check first")


def test_an_error_keeps_a_long_name_it_suggests_and_text_between_apostrophes(tiny_env: Path) -> None:
    """Every span of over 120 characters between two apostrophes was cut as a 'quoted value': the suggestion of a
    note with a long name ('did you mean "…"?', which the agent is to call read with) came back cut, and an
    apostrophe in a name (team's) made the cut take the message's own words out between two of them ('no vault
    path, source...'s shared reading list'). Only an echo of the call's own long argument is cut."""
    from pipeline.defs.runner import run_build
    from pipeline.mcp_server import create_server

    (tiny_env / "tinyvault" / f"{LONG_NAME}.md").write_text("# Export\n\nThe export is rebuilt nightly.\n")
    assert run_build(Settings.from_env()).ok
    typo = LONG_NAME[:-6] + "firsts"

    async def called() -> Any:
        async with Client(create_server(Settings.from_env())) as client:
            return await client.call_tool("read", {"path": typo})

    result = anyio.run(called)
    echo = typo[:117] + "..."                           # the call's own 128-character argument, cut
    assert result.is_error and [c.text for c in result.content] == [(
        f'read: no note "{echo}": no vault path, source path, note name, title or alias is "{echo}"; did you mean '
        f'"{LONG_NAME}"? Else use the `path` of a search tool hit')]


def test_a_tool_error_names_the_field_of_a_search_tool_hit() -> None:
    """An agent whose read or related named no note was told to "use a vault_path from search results", a field
    the search tool's hits do not have (theirs is `path`; `vault_path` is `docsvault search --json`'s)."""
    from pipeline.mcp_server import tool_error

    assert tool_error("read", "no note 'Nowhere': no vault path, source path, note name, title or alias is "
                              "'Nowhere'; use a vault_path from search results (`docsvault search ...` / the "
                              "search tool)") == (
        "read: no note 'Nowhere': no vault path, source path, note name, title or alias is 'Nowhere'; use the "
        "`path` of a search tool hit")
    assert tool_error("related", "no note 'a.md' in the warehouse; use a vault_path from search results (or run "
                                 "`docsvault build` if the note is new)") == (
        "related: no note 'a.md' in the warehouse; use the `path` of a search tool hit (or call the refresh tool if "
        "the note is new)")


def test_shorten_quoted_cuts_the_echoes_of_long_arguments_only() -> None:
    from pipeline.mcp_server import shorten_quoted

    line = f"no note {LONG_NAME!r}: did you mean '{'y' * 150}'?"
    assert shorten_quoted(line, {"path": LONG_NAME[:-1]}) == line
    assert shorten_quoted(line, {"path": LONG_NAME}) == f"no note {LONG_NAME[:117] + '...'!r}: did you mean " \
                                                         f"'{'y' * 150}'?"
    assert shorten_quoted(f"unknown source '{LONG}'", {"source": [LONG]}) == f"unknown source '{CUT}'"
    assert shorten_quoted(f"bad {'a' * 130!r}", {"k": 3}) == f"bad {'a' * 130!r}"
