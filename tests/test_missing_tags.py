"""The words a search names missing are looked for in the notes it searched, tag and path: filters included (session
48, an agent over MCP): `search(query="キャッシュ", tag="学習")` returned the two notes tagged 学習, neither of which says
キャッシュ, with no `missing` and no `message`, since the check looked in every note of the sources and another,
untagged note has the word. Now a word no note carrying one of the tags contains is named, as for a source filter:
`no note with the tag '学習' contains 'キャッシュ': these notes are only near in meaning`; and with a `path:` filter,
`no note in path:prefect/ contains 'parquet'`."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.index.embed import HashEmbedder
from pipeline.models import Chunk, Note
from pipeline.search.searcher import Searcher
from tests.tiny_warehouse import publish_chunks


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tagged") / "warehouse.duckdb"
    specs = [
        ("DuckDB入門.md", {"tags": ["学習"]}, "DuckDB は組み込み型の分析用データベースです。"),
        ("日記.md", {}, "今日はキャッシュの仕組みを調べた。Retries come later. #diary"),
        ("Otters.md", {"tags": ["animals"]}, "Sea otters float on their backs."),
    ]
    notes = [Note("g", rel, rel, rel[:-3], {"title": rel[:-3], **meta}, text) for rel, meta, text in specs]
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "g", 0, (n.title,), n.title, text)
              for n, (_, _, text) in zip(notes, specs, strict=True)]
    publish_chunks(path, notes, chunks)
    return path


@pytest.mark.parametrize(("query", "tags", "missing"), [
    ("キャッシュ", None, ()),
    ("キャッシュ", ["学習"], ("キャッシュ",)),                 # was (): 日記.md, untagged, has it
    ("キャッシュ", ["学習", "diary"], ()),                    # an inline #tag counts, as the filter reads it
    ("retries otters", ["animals"], ("retries",)),           # was (): BM25 terms are looked up in the tag's notes
    ("retries otters", ["#Animals"], ("retries",)),          # compared as the tag filter compares
    ("retries otters", [], ()),                              # no tag: every note
    ("DuckDB", ["nosuchtag"], ("DuckDB",)),                  # no note has the tag: none has the word
])
def test_missing_words_are_looked_for_in_the_tagged_notes(warehouse: Path, query: str, tags: list[str] | None,
                                                           missing: tuple[str, ...]) -> None:
    with Searcher(warehouse, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        assert s.missing_words(query, None, tags).missing == missing


@pytest.mark.parametrize(("query", "paths", "tags", "missing"), [
    ("キャッシュ otters", ("g/Otters",), None, ("キャッシュ",)),     # was (): 日記.md has it
    ("キャッシュ otters", ("g/*.md",), None, ()),                  # a glob: every note
    ("キャッシュ otters", ("g/Otters", "g/日記"), None, ()),       # any of the path: filters
    ("キャッシュ otters", ("G/OTTERS",), None, ("キャッシュ",)),    # compared casefolded, as the filter compares
    ("otters", ("g/Otters",), ["学習"], ("otters",)),              # with a tag: the notes passing both
])
def test_missing_words_are_looked_for_in_the_notes_under_the_path_filter(
        warehouse: Path, query: str, paths: tuple[str, ...], tags: list[str] | None, missing: tuple[str, ...]) -> None:
    with Searcher(warehouse, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        assert s.missing_words(query, None, tags, paths).missing == missing


def test_the_search_tool_and_the_cli_name_a_word_the_tagged_notes_lack(built_tiny_env: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.mcp_server import VaultService

    service = VaultService(Settings.from_env())
    out = service.search("pond", k=2, tag="start")          # Ducks.md says pond; only Home.md has the tag
    assert [h["path"] for h in out["hits"]] == ["tiny/Home.md"]
    assert (out["missing"], out["message"]) == (
        ["pond"], "no note with the tag 'start' contains 'pond': these notes are only near in meaning")
    out = service.search("検索", k=1, tag=["start"], source="tiny")   # a Japanese word written in an untagged note
    assert (out["missing"], out["message"]) == (
        ["検索"], "no note of tiny with the tag 'start' contains '検索': these notes are only near in meaning")
    assert "missing" not in service.search("pond", k=1)
    result = CliRunner().invoke(app, ["search", "pond tag:start", "-k", "1"])
    assert result.output.splitlines()[0] == (
        "(no note with the tag 'start' contains 'pond': these notes are only near in meaning)")
    out = service.search("pond read path:tiny/sub/", k=1)    # only sub/Parquet files.md passes the filter
    assert ([h["path"] for h in out["hits"]], out["missing"], out["message"]) == (
        ["tiny/sub/Parquet files.md"], ["pond"], "no note in path:tiny/sub/ contains 'pond'")
    result = CliRunner().invoke(app, ["search", "pond read path:tiny/sub/", "-k", "1", "--json"])
    assert result.stderr.splitlines()[-1] == "(no note in path:tiny/sub/ contains 'pond')"
