"""The query surface as the two shells show it (session 42 review): `docsvault search --json` and the MCP search
tool answer one query alike, however long it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.models import Chunk, Note
from tests.tiny_warehouse import publish_chunks

runner = CliRunner()

PAGES = {
    "Pelican.md": "A pelican is a large water bird.",
    "Stork.md": "A stork wades; it is no water bird.",
    "Zebra.md": "A zebra crossing is a road marking.",
}


@pytest.fixture
def birds(tiny_env: Path) -> Settings:
    """A warehouse of three one-chunk notes of source ``tiny`` and their vault files."""
    settings = Settings.from_env()
    notes, chunks = [], []
    for rel, text in PAGES.items():
        note = Note("tiny", rel, rel, rel[:-3], {"title": rel[:-3]}, text)
        notes.append(note)
        chunks.append(Chunk(f"{note.note_id}-0", note.note_id, "tiny", 0, (rel[:-3],), rel[:-3], text))
        (settings.vault_dir / "tiny").mkdir(parents=True, exist_ok=True)
        (settings.vault_dir / "tiny" / rel).write_text(f"# {rel[:-3]}\n\n{text}\n", encoding="utf-8")
    settings.warehouse_path.parent.mkdir(parents=True, exist_ok=True)
    publish_chunks(settings.warehouse_path, notes, chunks, dims=(384,))
    return settings


def _cli_paths(query: str) -> tuple[int, list[str], str]:
    result = runner.invoke(app, ["search", "--json", "--", query])
    paths = [h["vault_path"] for h in json.loads(result.stdout)] if result.exit_code == 0 else []
    return result.exit_code, paths, result.stderr


FILLER = "word " * 399          # 1,995 characters: what follows straddles or passes the 2,000 the lanes rank


def test_a_long_query_with_a_phrase_past_2000_chars_is_no_syntax_error_in_mcp(birds: Settings) -> None:
    from pipeline.mcp_server import VaultService

    query = FILLER + '"water bird" -stork'
    assert _cli_paths(query)[:2] == (0, ["tiny/Pelican.md"])
    hits = VaultService(birds).search(query)["hits"]
    assert [h["path"] for h in hits] == ["tiny/Pelican.md"]


def test_a_filter_past_2000_chars_applies_in_mcp_as_in_the_cli(birds: Settings) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    query = FILLER + "water source:nope"
    code, _, err = _cli_paths(query)
    assert code == 2 and err.startswith("error: unknown source 'nope'")
    with pytest.raises(ToolFailure) as exc:
        VaultService(birds).search(query)
    assert str(exc.value).startswith("unknown source 'nope'")


# ---------------------------------------------------------------------------------------------------------------
# an unknown source: the closest known one is suggested


@pytest.mark.parametrize(("typed", "said"), [
    ("tinny", "unknown source 'tinny' (did you mean 'tiny'?)"),
    ("Tiny", "unknown source 'Tiny' (did you mean 'tiny'?)"),
    ("zzz", "unknown source 'zzz'"),
])
def test_an_unknown_source_names_the_closest_one(birds: Settings, typed: str, said: str) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    whole = f"{said}; the warehouse {birds.warehouse_path} has: tiny"
    result = runner.invoke(app, ["search", f"water source:{typed}"])
    assert (result.exit_code, result.stderr) == (2, f"error: {whole}\n")
    with pytest.raises(ToolFailure) as exc:
        VaultService(birds).search("water", source=typed)
    assert str(exc.value) == whole


# ---------------------------------------------------------------------------------------------------------------
# full-width syntax: a Japanese IME in full-width mode types the filter keys and OR in full-width letters


@pytest.mark.parametrize(("typed", "tags", "sources", "paths", "text"), [
    ("ｔａｇ：鳥", ("鳥",), (), (), ""),
    ("ＴＡＧ:鳥 水鳥", ("鳥",), (), (), "水鳥"),
    ("水鳥 ｓｏｕｒｃｅ：tiny", (), ("tiny",), (), "水鳥"),
    ("ｐａｔｈ：日記/ 天気", (), (), ("日記/",), "天気"),
    ("－ｔａｇ：x 天気", None, None, None, None),          # a negated filter stays an error
    ("ｔａｇｓ：x", (), (), (), "ｔａｇｓ：x"),            # no filter key: words
])
def test_full_width_filter_keys_are_filters(typed: str, tags: tuple[str, ...] | None,
                                           sources: tuple[str, ...] | None, paths: tuple[str, ...] | None,
                                           text: str | None) -> None:
    from pipeline.search.query import QuerySyntaxError, parse_query

    if tags is None:
        with pytest.raises(QuerySyntaxError, match="^-tag: is not supported"):
            parse_query(typed)
        return
    parsed = parse_query(typed)
    assert (parsed.tags, parsed.sources, parsed.paths, parsed.text) == (tags, sources, paths, text)


def test_a_full_width_or_is_or() -> None:
    from pipeline.search.query import parse_query

    assert parse_query('"水鳥" ＯＲ "白鳥"').required == (("水鳥", "白鳥"),)
    assert parse_query("ＯＲＡＣＬＥ").text == "ＯＲＡＣＬＥ"


# ---------------------------------------------------------------------------------------------------------------
# what the CLI highlights: the words as the page writes them (full-width, ß, stems)


def _marked(query: str, text: str, tokens: list[str] | None = None) -> str:
    from pipeline.cli import highlight, query_terms, term_pattern
    from pipeline.index.analysis import Analyzer

    tokens = Analyzer().tokens(query) if tokens is None else tokens
    return highlight(text, term_pattern(query_terms(query, tokens)), color=True).replace(
        "\x1b[1;33m", "[").replace("\x1b[0m", "]")


@pytest.mark.parametrize(("query", "text", "marked"), [
    ("ＤｕｃｋＤＢ", "DuckDB is fast", "[DuckDB] is fast"),                      # typed full-width (an IME)
    ("duckdb", "ＤｕｃｋＤＢで読む", "[ＤｕｃｋＤＢ]で読む"),                    # written full-width
    ("straße", "Die Straße", "Die [Straße]"),                                  # casefold made it 'strasse'
    ("ducks feeding", "A duck feeds.", "A [duck] [feeds]."),                   # the analyzer's stems
    ("C++ tips", "C++ tips and ｔｉｐｓ", "C++ [tips] and [ｔｉｐｓ]"),
    ("コーヒーを飲む", "ｺｰﾋｰを２杯飲んだ", "[ｺｰﾋｰ]を２杯[飲]んだ"),          # written in half-width katakana
    ("エスプレッソ", "ｴｽﾌﾟﾚｯｿとエスプレッソ", "[ｴｽﾌﾟﾚｯｿ]と[エスプレッソ]"),    # a voiced kana: two characters
])
def test_the_cli_highlights_the_words_as_the_page_writes_them(query: str, text: str, marked: str) -> None:
    assert _marked(query, text) == marked


def test_the_snippet_is_cut_around_a_full_width_match() -> None:
    from pipeline.search.snippet import match_position

    text = "前置き。" * 10 + "ＤｕｃｋＤＢでCSVを読む"
    assert match_position(text, "duckdb") == text.index("ＤｕｃｋＤＢ")


def test_the_snippet_is_cut_around_a_half_width_katakana_match() -> None:
    """A note typed with a half-width IME (ｴｽﾌﾟﾚｯｿﾏｼﾝ) is found by BM25 (NFKC), but until session 43 its snippet
    began at the chunk's start, far from the word, and the CLI highlighted nothing there."""
    from pipeline.search.snippet import half_width_kana, match_position

    text = "前置き。" * 10 + "昨日買ったｴｽﾌﾟﾚｯｿﾏｼﾝが届いた。ｺｰﾋｰを淹れた。"
    assert match_position(text, "エスプレッソマシン") == text.index("ｴｽﾌﾟﾚｯｿﾏｼﾝ")
    assert match_position(text, "コーヒー") == text.index("ｺｰﾋｰ")
    assert match_position("ガイドとｶﾞｲﾄﾞ", "ガイド") == 0
    assert half_width_kana("パーケット・ファイルのガイド") == "ﾊﾟｰｹｯﾄ･ﾌｧｲﾙのｶﾞｲﾄﾞ"
    assert half_width_kana("京都が好き") == "京都が好き"


# ---------------------------------------------------------------------------------------------------------------
# the note on words no note has stays one short line, however long the word


def test_the_missing_words_note_cuts_a_long_word() -> None:
    from pipeline.service import missing_words_message

    assert missing_words_message(["x" * 2000, "otter"], True) == (
        f"no note contains '{'x' * 39}…' or 'otter': these notes are only near in meaning")
    assert missing_words_message(["x" * 40], False) == f"no note contains '{'x' * 40}'"


def test_a_pasted_10_kb_word_gives_a_short_note_in_both_shells(birds: Settings) -> None:
    from pipeline.mcp_server import VaultService

    query = "pelican " + "x" * 10_000
    result = runner.invoke(app, ["search", "--files", query])
    assert result.exit_code == 0
    assert result.stderr == f"(no note contains '{'x' * 39}…')\n"
    answer = VaultService(birds).search(query)
    assert answer["message"] == f"no note contains '{'x' * 39}…'"


# ---------------------------------------------------------------------------------------------------------------
# one search flow for both shells (pipeline.service.run_search)


def test_run_search_merges_the_callers_and_the_querys_filters(birds: Settings) -> None:
    from pipeline.index.embed import HashEmbedder
    from pipeline.search.query import parse_query
    from pipeline.search.searcher import Searcher
    from pipeline.service import run_search

    with Searcher(birds.warehouse_path, embedder_factory=lambda m: HashEmbedder(384)) as searcher:  # type: ignore[arg-type]
        listed = run_search(birds, searcher, parse_query("source:tiny -zebra"), 1, ["", "tiny"])
        assert ([h.vault_path for h in listed.hits], listed.more, listed.sources, listed.tags) == (
            ["tiny/Pelican.md"], True, ["tiny", "tiny"], [])
        ranked = run_search(birds, searcher, parse_query('"water bird" -stork'), 5)
        assert ([h.vault_path for h in ranked.hits], ranked.more) == (["tiny/Pelican.md"], False)


# ---------------------------------------------------------------------------------------------------------------
# a tag with a comma (frontmatter's `tags: a, b` written as one filter) is refused, as one with a space


COMMA = "has a comma; Obsidian tags cannot contain commas or spaces (give 'animals', '鳥' as 2 separate tags)"


def test_a_tag_with_a_comma_is_refused_in_the_query_the_cli_and_mcp(birds: Settings) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService
    from pipeline.search.query import QuerySyntaxError, parse_query, tag_problem

    with pytest.raises(QuerySyntaxError) as err:
        parse_query("water tag:animals,鳥")
    assert str(err.value) == f'tag:"animals,鳥" in the query {COMMA}'
    result = runner.invoke(app, ["search", "water", "--tag", "animals,鳥"])
    assert (result.exit_code, result.stderr) == (2, f"error: --tag 'animals,鳥' {COMMA}\n")
    with pytest.raises(ToolFailure) as exc:
        VaultService(birds).search("water", tag="#animals,鳥")
    assert str(exc.value) == f"tag '#animals,鳥' {COMMA}"
    assert tag_problem("a,") is None and tag_problem("animals/birds") is None
