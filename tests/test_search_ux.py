"""Search UX (issue 17): clean snippets, query syntax, inline tags, one hit per note, neighbours, usage, capture.

Unit tests on a toy warehouse (HashEmbedder vectors, the real Analyzer); the CLI/MCP end to end in
tests/test_search_ux_cli.py.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline import warehouse as wh
from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import build_chunk_index
from pipeline.index.embed import HashEmbedder, embed_chunks
from pipeline.ingest.capture import (
    CaptureError,
    capture_source,
    check_name,
    name_from_title,
    title_of,
    write_capture,
)
from pipeline.models import Chunk, Edge, Note, Source
from pipeline.search import usage
from pipeline.search.neighbours import links_of, related
from pipeline.search.query import QuerySyntaxError, parse_query, text_contains
from pipeline.search.searcher import Searcher
from pipeline.search.snippet import clean_text, cut_around, make_snippet, match_position
from pipeline.search.tags import frontmatter_tags, inline_tags, tag_matches
from tests.tiny_warehouse import publish_chunks

# ---------------------------------------------------------------------------------------------------------------
# snippets


def test_clean_text_drops_markup_and_keeps_code_as_code() -> None:
    md = (
        "> [!abstract] Summary\n> Obsidian stores notes as **Markdown** files.\n\n"
        "```sql\nSELECT *\nFROM t;\n```\n"
        '<img src="https://ev/images/docs/x.jpg" alt="pic" width=3> See [the docs](https://x.y/z(a)) and '
        "[[Internal links#Heading|links]] or [[Canvas]]. ![[img.png]] ![alt](u.png)\n"
        "## Next\n- item *one*\n1. `inline` code\n<!-- hidden -->\n"
    )
    assert clean_text(md) == ("Summary Obsidian stores notes as Markdown files. `SELECT * FROM t;` See the docs and "
                              "links or Canvas. Next item one `inline` code")


def test_clean_text_drops_footnote_markers_and_keeps_their_text() -> None:
    md = ("You can add footnotes[^footnote] to notes.[^1] Inline too.^[An inline note.]\n\n"
          "[^footnote]: This is a footnote.\n[^1]: The text about controllers.\n`a[^2]` stays code.")
    assert clean_text(md) == ("You can add footnotes to notes. Inline too.An inline note. This is a footnote. "
                              "The text about controllers. `a[^2]` stays code.")


def test_clean_text_drops_obsidian_comments_but_not_code() -> None:
    assert clean_text("Before %%a hidden comment: secret%% after. Code `50%%` stays.\n%%\nblock\ncomment\n%%\nend") \
        == "Before after. Code `50%%` stays. end"


def test_clean_text_html_attributes_never_leak() -> None:
    out = clean_text('<p align="center"><a href="/a?b=1"><img alt="x" src="ev/images/docs/a.jpg"/></a>Text</p>')
    assert out == "Text"


@pytest.mark.parametrize("md, expected", [
    # in a table row Obsidian escapes the alias pipe: [[Page\|alias]] reads as [[Page|alias]]
    ("| Page | Why |\n| --- | --- |\n| [[Setup Guide#Install steps\\|Install]] | first |\n",
     "Page | Why | Install | first"),
    ("| [[Home\\|Start]] | [[Translations]] |", "Start | Translations"),
    ("[[Home\\|Start]] and [[Home|Start]]", "Start and Start"),
    ("| [[Home\\|]] | x |", "Home | x"),                      # an empty alias: the page
    ("| [[Home\\|a\\|b]] | x |", "a | b | x"),                 # as [[Home|a|b]]
    ("| ![[pic.png\\|200]] | x |", "x"),                       # an embed with a size goes
    # an embedded note shows as its name, as a link to it does: `See ![[Guide#Install]].` read `See .` (helper s36-nu2)
    ("See ![[DuckDB メモ#Parquet の読み込み]].", "See DuckDB メモ."),
    ("Intro\n![[Guide.md|alias]]\n![[#見出し]]\n![[Board.canvas]] ![[doc.pdf#page=2]] end", "Intro Guide 見出し end"),
])
def test_clean_text_wikilink_with_an_escaped_pipe(md: str, expected: str) -> None:
    assert clean_text(md) == expected


def test_a_snippet_keeps_an_ideographic_space_as_written() -> None:
    """A hit on a note linking `[[プロジェクト　計画]]` showed `プロジェクト 計画` (helper s47-leftovers), a note the
    vault does not have; other whitespace is still one ASCII space."""
    md = "今日は[[プロジェクト\u3000計画]]について。\n\n`a\u3000b`  and\tmore\u00a0text\n# 第１章\u3000はじめに"
    assert clean_text(md) == "今日はプロジェクト\u3000計画について。 `a\u3000b` and more\u00a0text 第１章\u3000はじめに"
    assert make_snippet("x " * 200 + "[[プロジェクト\u3000計画]] の話。", "計画", width=40).endswith(
        "プロジェクト\u3000計画 の話。")
    from pipeline.search.snippet import plain_heading
    assert plain_heading("第１章\u3000はじめに  <b>x</b>") == "第１章\u3000はじめに x"


def test_cut_around_starts_at_the_sentence_and_ends_on_a_boundary() -> None:
    text = "word " * 60 + "Parquet files are columnar. They are fast to scan and compress well. " + "tail " * 60
    snip = cut_around(text, text.index("Parquet"), 120)
    assert snip.startswith("…") and snip.endswith("…") and len(snip) <= 122
    assert " Parquet files are columnar." in snip or snip.startswith("…Parquet") or "word Parquet" in snip
    assert not snip[1:-1].startswith(" ") and "wor…" not in snip
    sentence = "First sentence here. " * 3 + "Second has the parquet word in it. " + "x " * 200
    s2 = cut_around(sentence, sentence.index("parquet"), 100)
    assert s2.startswith("…Second has the parquet word")


def test_a_japanese_snippet_that_ends_the_chunk_starts_at_a_sentence() -> None:
    """A match at the end of a long Japanese chunk (`キーワード42` of a note of chapters): the cut went back a width
    from the end and, with no space to start at, began mid-sentence (`…が続きます。これは…`, helper s43-ja)."""
    text = "これは長いメモの本文です。日本語の文章が続きます。" * 20 + " キーワード42。"
    snip = cut_around(text, text.index("キーワード42"), 240)
    assert snip.startswith("…これは長いメモの本文です。") and snip.endswith(" キーワード42。") and len(snip) <= 242


def test_a_japanese_snippet_without_a_sentence_end_is_cut_at_a_clause() -> None:
    """A long Japanese sentence (only 、, no 。 or space in reach): the cut began and ended mid-word
    (`…ヒーを淹れて` of `コーヒー`, `…この本は戦前…`; helper s49-ja); now after a 、 on both ends."""
    text = ("私は毎朝七時に起きて、コーヒーを淹れてから散歩に出かけるのが習慣になっているのだが、" * 6
            + "その途中で見つけた古本屋で珍しい全集を手に入れたことが今年いちばんの収穫であり、"
            + "店主の話によるとこの本は戦前に刷られたもので、" * 6 + "家に帰ってから辞書を引きながら少しずつ読み進めている。")
    assert cut_around(text, text.index("古本屋"), 120) == (
        "…コーヒーを淹れてから散歩に出かけるのが習慣になっているのだが、その途中で見つけた古本屋で珍しい全集を手に入れたこと"
        "が今年いちばんの収穫であり、" + "店主の話によるとこの本は戦前に刷られたもので、" * 2 + "…")
    assert cut_around(text, text.index("古本屋"), 60) == "…その途中で見つけた古本屋で珍しい全集を手に入れたことが今年いちばんの収穫であり、…"


def test_a_table_delimiter_row_of_single_hyphens_leaves_no_hyphens_in_the_snippet() -> None:
    """Obsidian's help writes tables with `|-|-|` (one hyphen a cell, valid GFM): the snippet of `この前のあれ` showed
    `Action | Shortcut | - | - | Insert new line` (helper s49-ja)."""
    assert clean_text("| Action | Shortcut |\n|-|-|\n| Insert new line| `Enter` |") == (
        "Action | Shortcut | Insert new line | `Enter`")
    assert clean_text("a|b\n:-|-:\n1|2") == "a | b 1 | 2"
    assert clean_text("- item\n- | x\n\n---\n\ny") == "item | x y"       # a list item and a rule: as before


def test_make_snippet_short_text_is_clean_and_whole() -> None:
    assert make_snippet("# Title\n\nSome **bold** [link](http://x)", "bold") == "Title Some bold link"
    ja = "前置き" * 100 + "ベクトル検索の説明。" + "後書き" * 100
    assert "ベクトル検索" in make_snippet(ja, "ベクトル検索")


def test_cut_inside_a_code_span_closes_it() -> None:
    text = "Intro text here. " + "`" + "code " * 80 + "`" + " after"
    snip = cut_around(text, 0, 60)
    assert snip.count("`") % 2 == 0


# ---------------------------------------------------------------------------------------------------------------
# query syntax


def test_parse_query_phrases_exclusions_or_and_filters() -> None:
    q = parse_query('sync "end to end" -mobile -"dark mode" tag:#howto source:docs path:"en/Linking notes"')
    assert (q.text, q.required, q.excluded) == ("sync end to end", (("end to end",),), ("mobile", "dark mode"))
    assert (q.sources, q.tags, q.paths) == (("docs",), ("howto",), ("en/Linking notes",))
    q = parse_query('"a b" OR "c d" x')
    assert (q.text, q.required) == ("a b c d x", (("a b", "c d"),))
    assert parse_query("a OR b").required == ()                 # bare words are never required
    assert parse_query("built-in http://x.y/#z C:").text == "built-in http://x.y/#z C:"


def test_smart_and_full_width_quotes_minus_and_colon_are_the_ascii_syntax() -> None:
    # macOS/iOS type “ ” for ", a Japanese keyboard ＂ － ：; 「」 stay words (a question is often written in them)
    for typed in ("“手をつないで” 寝る", "＂手をつないで＂ 寝る", "„手をつないで“ 寝る"):
        q = parse_query(typed)
        assert (q.text, q.required) == ("手をつないで 寝る", (("手をつないで",),))
    q = parse_query("リトライ\u3000－Prefect tag：日記")
    assert (q.text, q.excluded, q.tags) == ("リトライ", ("Prefect",), ("日記",))
    assert parse_query("A－B 「手をつないで」").text == "A－B 「手をつないで」"     # inside a word: not a minus
    # macOS' Japanese input types its full-width minus as U+2212 (`JSON −便利` excluded nothing; helper s36-nu2)
    q = parse_query("JSON \u2212便利 tag：日記")
    assert (q.text, q.excluded, q.tags) == ("JSON", ("便利",), ("日記",))
    assert parse_query("A\u2212B").text == "A\u2212B"
    with pytest.raises(QuerySyntaxError, match="unclosed"):
        parse_query("“手をつないで")


def test_a_word_starting_with_two_dashes_is_a_word_not_an_exclusion() -> None:
    q = parse_query("frobnicate --warp-speed")
    assert (q.text, q.required, q.excluded) == ("frobnicate --warp-speed", (), ())
    assert q.keeps_text("Run frobnicate --warp-speed 9 to go.")
    q = parse_query("deploy --force -staging -- --tag:x")
    assert (q.text, q.excluded, q.tags) == ("deploy --force -- --tag:x", ("staging",), ())
    assert not q.keeps_text("deploy --force to staging") and q.keeps_text("deploy --force to prod")


@pytest.mark.parametrize(("query", "message"), [
    ('sync "abc', 'unclosed " in the query: close the phrase, e.g. "exact words", or drop the quote'),
    ("ducks tag:", "empty filter tag: in the query: give a value, e.g. tag:journal"),
    ("source: ducks", "empty filter source: in the query: give a value, e.g. source:duckdb"),
    ("ducks OR", 'OR needs a word or a phrase on both sides, e.g. "sync" OR "backup"'),
    ("OR ducks", 'OR needs a word or a phrase on both sides, e.g. "sync" OR "backup"'),
    ('x ""', 'empty phrase "" in the query: put words between the quotes'),
    ("tag:a OR source:b", ("OR between a tag: and a source: filter: filters of different kinds all apply; OR works "
                           "between words or phrases, or between filters of one kind (tag:a OR tag:b, the same as "
                           "tag:a tag:b)")),
    ("tag:a OR ducks", 'OR needs a word or a phrase on both sides, e.g. "sync" OR "backup"'),
    ("-ducks -geese", "nothing to search for: the query has only exclusions; add words or a filter, e.g. "
                      "`sync -mobile` or `tag:howto -mobile`"),
])
def test_bad_query_syntax_is_one_line(query: str, message: str) -> None:
    with pytest.raises(QuerySyntaxError) as err:
        parse_query(query)
    assert str(err.value) == message


def test_or_between_filters_of_one_kind_is_what_they_mean_alone() -> None:
    """`tag:日記 OR tag:books` (Obsidian's search writes it so) was an error, "OR needs a word or a phrase on both
    sides", though two tag filters already match any of them: now it is `tag:日記 tag:books`, for path: and source:
    too, and words and phrases around it keep their OR."""
    assert parse_query("tag:日記 OR tag:books") == parse_query("tag:日記 tag:books")
    q = parse_query("path:me/日記 OR path:me/Projects draft")
    assert (q.text, q.paths, q.required) == ("draft", ("me/日記", "me/Projects"), ())
    q = parse_query('"a b" OR "c d" source:x OR source:y')
    assert (q.text, q.required, q.sources) == ("a b c d", (("a b", "c d"),), ("x", "y"))
    q = parse_query('"a b" tag:x OR "c d"')       # an OR between phrases, a filter beside it: as before
    assert (q.text, q.required, q.tags) == ("a b c d", (("a b", "c d"),), ("x",))


def test_text_matching_is_word_bounded_for_latin_and_substring_for_cjk() -> None:
    assert text_contains("the category list", "category") and not text_contains("the category list", "cat")
    assert text_contains("朝ご飯を食べた", "ご飯")
    # an English word written against Japanese text is a word (found by a Japanese new user: -LoRA kept the note)
    assert text_contains("stable diffusion でloraを学習する", "lora") and not text_contains("でloraxを", "lora")
    assert not parse_query("tag:project -LoRA").keeps_text("Stable Diffusion でLoRAを学習するときは、VRAMが足りない")
    assert parse_query('"LoRA"').keeps_text("Stable Diffusion でLoRAを学習する")
    assert match_position("学習ではLoRAを使う", "lora") == 4
    q = parse_query('"parquet file" -csv')
    assert q.keeps_text("Read a Parquet  file quickly") and not q.keeps_text("parquet file or CSV")
    p = parse_query("x path:guide/ path:*/api/*.md")
    assert p.keeps_path("guide/install.md") and p.keeps_path("src/api/connect.md") and not p.keeps_path("api/x.md")



def test_phrases_and_exclusions_compare_nfkc_as_bm25_and_tags_do() -> None:
    """A Japanese note-taker (helper s36-nu2) wrote `ＤｕｃｋＤＢ　を採用` with the IME's full-width letters and
    space: `"DuckDB を採用"` found no note, though BM25 (NFKC) ranked it; a phrase typed in NFD (macOS) missed
    every NFC note, and `-ＪＳＯＮ` kept the notes that say JSON. Both sides now compare in NFKC."""
    import unicodedata

    nfd = unicodedata.normalize("NFD", "データベース")
    assert parse_query('"DuckDB を採用"').keeps_text("議事録。ＤｕｃｋＤＢ\u3000を採用。")
    assert parse_query('"ＤｕｃｋＤＢ を採用"').keeps_text("議事録。DuckDB を採用。")
    assert parse_query(f'"{nfd}"').keeps_text("分析用データベースです")
    assert parse_query('"データベース"').keeps_text(f"分析用{nfd}です")
    assert parse_query('"ｶﾀｶﾅ"').keeps_text("カタカナのメモ")
    assert not parse_query("DuckDB -ＪＳＯＮ").keeps_text("DuckDB の JSON 読み込み")
    assert parse_query("DuckDB -ＪＳＯＮ").keeps_text("DuckDB の JSONL 読み込み")          # still a whole word
    assert not parse_query('"DuckDB を採用"').keeps_text("DuckDBを不採用")


def test_a_phrase_matches_through_inline_html_and_inline_code() -> None:
    from pipeline.search.snippet import clean_text

    note = "Press <kbd>Ctrl</kbd>+<kbd>C</kbd> or `Ctrl`+`V`; <u>underline</u>, <mark>marked</mark>, H<sub>2</sub>O"
    plain = clean_text(note)
    assert plain == "Press Ctrl+C or `Ctrl`+`V`; underline, marked, H2O"
    for phrase in ('"Ctrl+C"', '"Ctrl+V"', '"`Ctrl`+`V`"', '"underline, marked"', '"H2O"'):
        assert parse_query(phrase).keeps_text(plain), phrase
    assert not parse_query('-"ctrl+v" x').keeps_text(plain)
    assert clean_text("<p>one</p><p>two</p>") == "one two"          # block tags still separate words


# ---------------------------------------------------------------------------------------------------------------
# tags


def test_inline_tags_as_obsidian_reads_them() -> None:
    body = ("# Heading\nToday #日記 and #project/alpha, #Mixed-Case.\n"
            "see page#anchor, #123 is not a tag, `#code` neither\n```\n#include <x>\n```\n")
    assert inline_tags(body) == {"日記", "project/alpha", "mixed-case"}
    assert tag_matches({"project/alpha"}, ["#project"]) and tag_matches({"日記"}, ["日記"])
    assert not tag_matches({"projects"}, ["project"])


def test_tags_are_compared_nfkc_and_casefolded_on_both_sides(tmp_path: Path) -> None:
    """A half-width katakana tag (``ｶﾀｶﾅ``, frontmatter or inline) is the full-width one and the other way
    round, as ``read`` compares names; full-width Latin is ASCII (found by a Japanese new user)."""
    assert inline_tags("猫が寝ている #ﾈｺ と #ＴＩＬ") == {"ネコ", "til"}
    assert tag_matches({"カタカナ"}, ["ｶﾀｶﾅ"]) and tag_matches({"til"}, ["#ＴＩＬ"])
    notes = [Note("g", "otter.md", "otter.md", "カワウソ観察", {"title": "カワウソ観察", "tags": ["ｶﾀｶﾅ"]},
                  "カワウソが岩の上で魚を食べていた。"),
             Note("g", "cat.md", "cat.md", "猫", {"title": "猫", "tags": ["カタカナ/ネコ"]}, "猫が寝ている。 #ﾈｺ"),
             Note("g", "dog.md", "dog.md", "犬", {"title": "犬"}, "犬が走っている。")]
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "g", 0, (), n.title, n.body) for n in notes]
    path = tmp_path / "warehouse.duckdb"
    publish_chunks(path, notes, chunks)
    with _searcher(path) as s:
        def tagged(tag: str) -> list[str]:
            return sorted(h.vault_path for h in s.search("カワウソ 猫 犬", k=10, tags=[tag]))

        assert tagged("カタカナ") == ["g/cat.md", "g/otter.md"]         # frontmatter ｶﾀｶﾅ, and nested under it
        assert tagged("ｶﾀｶﾅ") == ["g/cat.md", "g/otter.md"]
        assert tagged("ネコ") == ["g/cat.md"]                           # inline #ﾈｺ
        assert tagged("#ﾈｺ") == ["g/cat.md"]


def test_a_frontmatter_tags_string_is_split_at_commas_as_obsidian_does(tmp_path: Path) -> None:
    """``tags: project/alpha, Urgent`` is two tags in Obsidian; search read it as the one tag
    ``project/alpha, urgent``, so ``tag:urgent`` said no note has the tag (found by a new user)."""
    assert frontmatter_tags(["project/alpha, Urgent", "#til  日記", ",", "ｶﾀｶﾅ"]) == (
        "project/alpha", "urgent", "til", "日記", "カタカナ")
    notes = [Note("g", "a.md", "a.md", "Alpha", {"title": "Alpha", "tags": "project/alpha, Urgent"}, "otters swim."),
             Note("g", "b.md", "b.md", "Beta", {"title": "Beta", "tags": ["later"]}, "otters sleep.")]
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "g", 0, (), n.title, n.body) for n in notes]
    path = tmp_path / "warehouse.duckdb"
    publish_chunks(path, notes, chunks)
    with _searcher(path) as s:
        for tag in ("urgent", "project", "project/alpha"):
            assert [h.vault_path for h in s.search("otters", k=10, tags=[tag])] == ["g/a.md"]
        assert s.search("otters", k=10, tags=["alpha, urgent"]) == []


def test_obsidians_deprecated_tag_and_alias_keys_still_tag_and_name_a_note(tmp_path: Path) -> None:
    """Finding of a Japanese note-taker (s37-nu3): an older vault's ``tag: 旧タグ`` and ``alias: 旧名`` (Obsidian's
    help, Properties: "Deprecated alias for tags / aliases", which Obsidian still reads) were ignored: ``--tag 旧タグ``
    found nothing and ``read 旧名`` said "no note". Now they count as ``tags``/``aliases`` do, after them. And
    ``aliases: ベツメイ, another name`` is two aliases, as Obsidian splits a string alias at commas (``read ベツメイ``
    said "no note; did you mean 'ベツメイ, another name'?")."""
    from pipeline.warehouse import note_names
    from pipeline.warehouse.queries import note_tags

    fm = {"title": "古い", "tags": ["新"], "tag": "旧タグ, other", "aliases": ["A"], "alias": ["旧名", "A"]}
    notes = [Note("g", "a.md", "a.md", "古い", fm, "otters swim."),
             Note("g", "b.md", "b.md", "Beta", {"title": "Beta", "alias": "ベータ"}, "otters sleep."),
             Note("g", "c.md", "c.md", "Gamma", {"aliases": "ベツメイ, another name,, ", "alias": 2024}, "c.")]
    assert [n.aliases for n in notes] == [("A", "旧名"), ("ベータ",), ("ベツメイ", "another name", "2024")]
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "g", 0, (), n.title, n.body) for n in notes]
    path = tmp_path / "warehouse.duckdb"
    publish_chunks(path, notes, chunks)
    import duckdb

    with duckdb.connect(str(path), read_only=True) as con:
        assert note_tags(con)[notes[0].note_id] == ("新", "旧タグ, other")
        assert note_names(con)[notes[1].note_id] == ("Beta", "b", "ベータ")
        assert note_names(con)[notes[2].note_id] == ("Gamma", "c", "ベツメイ", "another name", "2024")
    with _searcher(path) as s:
        for tag in ("旧タグ", "other", "新"):
            assert [h.vault_path for h in s.search("otters", k=10, tags=[tag])] == ["g/a.md"]


# ---------------------------------------------------------------------------------------------------------------
# a toy warehouse with links and inline tags

SPECS = {
    "hub.md": ("Hub", ["The hub talks about otters and rivers.", "Rivers flow to the sea; otters swim there."], {}),
    "a.md": ("Alpha", ["Alpha covers beavers building dams in rivers.", "Dams hold water."], {}),
    "b.md": ("Beta", ["Beta is about tea ceremonies. #日記 #project/alpha"], {}),
    "c.md": ("Gamma", ["Gamma: rivers in the mobile app, end to end."], {"tags": ["travel"]}),
    "guide/d.md": ("Delta", ["Delta explains rivers and otters end to end."], {}),
}


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ux") / "warehouse.duckdb"
    notes, chunks = [], []
    for rel, (title, texts, extra) in SPECS.items():
        note = Note("g", rel, rel, title, {"title": title, **extra}, "\n\n".join(texts))
        notes.append(note)
        for i, text in enumerate(texts):
            chunks.append(Chunk(f"{note.note_id}-{i}", note.note_id, "g", i, (), title, text))
    nid = {n.rel_path: n.note_id for n in notes}
    edges = [Edge(nid["hub.md"], nid["a.md"], "Alpha", "wikilink", 2), Edge(nid["hub.md"], nid["b.md"], "Beta", "wikilink"),
             Edge(nid["a.md"], nid["c.md"], "Gamma", "wikilink"), Edge(nid["guide/d.md"], nid["hub.md"], "Hub", "wikilink")]
    embedder = HashEmbedder(64)
    res = embed_chunks(chunks, embedder, None)
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, edges=edges,
                                      vectors={embedder.model_id: (res.chunk_ids, res.vectors)},
                                      bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs()))
    return path


def _searcher(path: Path, **kw: object) -> Searcher:
    return Searcher(path, embedder_factory=lambda m: HashEmbedder(64), **kw)  # type: ignore[arg-type]


def test_one_hit_per_note_with_the_second_chunk_as_context(toy: Path) -> None:
    with _searcher(toy) as s:
        hits = s.search("otters rivers", k=3)
    assert len(hits) == 3 and len({h.vault_path for h in hits}) == 3
    hub = next(h for h in hits if h.vault_path == "g/hub.md")
    assert {hub.snippet, hub.context} == {"The hub talks about otters and rivers.",
                                          "Rivers flow to the sea; otters swim there."}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pages whose best chunk for a query is only an image or an embed."""
    path = tmp_path_factory.mktemp("images") / "warehouse.duckdb"
    specs = {
        "shots.md": ("Screenshots", ["Every option of the app in one place.", "![250](settings-dialog.png)",
                                     "Open the dialog with Ctrl+comma."]),
        "pic.md": ("Pic", ["![[kingfisher.jpg]]"]),
        "plain.md": ("Plain", ["A kingfisher dives for fish."]),
    }
    notes, chunks = [], []
    for rel, (title, texts) in specs.items():
        note = Note("g", rel, rel, title, {"title": title}, "\n\n".join(texts))
        notes.append(note)
        chunks += [Chunk(f"{note.note_id}-{i}", note.note_id, "g", i, (), title, text) for i, text in enumerate(texts)]
    publish_chunks(path, notes, chunks)
    return path


def test_an_image_only_chunk_gets_a_snippet_from_its_page(images: Path) -> None:
    with _searcher(images) as s:
        # the best chunk is only an image; the page's next-best chunk (the context) is shown
        hit, = s.search("dialog png", k=1, lanes=["bm25"])
        assert (hit.vault_path, hit.chunk_text, hit.snippet, hit.context) == (
            "g/shots.md", "![250](settings-dialog.png)", "Open the dialog with Ctrl+comma.",
            "Open the dialog with Ctrl+comma.")
        # no other chunk of the page matches: the page's first text
        hit, = s.search("png", k=1, lanes=["bm25"])
        assert (hit.vault_path, hit.snippet, hit.context) == ("g/shots.md", "Every option of the app in one place.", "")
        # a page that is one embed: its breadcrumb (the title); a page with text keeps its own snippet
        hits = s.search("kingfisher", k=2, lanes=["bm25"])
        assert sorted((h.vault_path, h.snippet) for h in hits) == [
            ("g/pic.md", "Pic"), ("g/plain.md", "A kingfisher dives for fish.")]
        # every lane: no empty snippet
        assert [bool(h.snippet) for h in s.search("kingfisher png", k=3)] == [True, True, True]


def test_query_filters_in_search(toy: Path) -> None:
    with _searcher(toy) as s:
        def paths(q: str) -> list[str]:
            p = parse_query(q)
            return [h.vault_path for h in s.search(p.text, k=10, tags=list(p.tags) or None, filters=p)]

        assert paths('rivers "end to end"') == ["g/c.md", "g/guide/d.md"] or \
            sorted(paths('rivers "end to end"')) == ["g/c.md", "g/guide/d.md"]
        assert sorted(paths('rivers "end to end" -mobile')) == ["g/guide/d.md"]
        assert paths("rivers path:g/guide/") == ["g/guide/d.md"]
        assert sorted(paths('"tea ceremonies" OR "beavers building"')) == ["g/a.md", "g/b.md"]
        assert paths("ceremonies tag:日記") == ["g/b.md"]                   # inline #tag
        assert paths("tea tag:project") == ["g/b.md"]                       # nested inline #project/alpha
        assert paths("rivers tag:travel") == ["g/c.md"]                     # frontmatter tag still works
        assert paths('"no such phrase anywhere" rivers') == []


def test_a_query_of_filters_alone_lists_the_notes_that_pass_them_by_path(toy: Path) -> None:
    """``tag:x`` / ``path:p`` / ``source:s`` alone (Obsidian's ``tag:#x``) list the notes, in vault-path order, each
    hit its first chunk with score 0.0 and no lanes; exclusions still apply; k caps the list."""
    with _searcher(toy) as s:
        def listed(q: str, k: int = 10) -> list[str]:
            p = parse_query(q)
            assert p.text == ""
            return [h.vault_path for h in s.search(p.text, k=k, source=list(p.sources) or None,
                                                   tags=list(p.tags) or None,
                                                   filters=p if (p.excluded or p.paths) else None)]

        assert listed("tag:travel") == ["g/c.md"]
        assert listed("tag:project") == ["g/b.md"]                          # nested inline #project/alpha
        assert listed("path:g/guide/") == ["g/guide/d.md"]
        assert listed("source:g") == ["g/a.md", "g/b.md", "g/c.md", "g/guide/d.md", "g/hub.md"]
        assert listed("source:g", k=2) == ["g/a.md", "g/b.md"]
        assert listed("source:g -mobile -dams") == ["g/b.md", "g/guide/d.md", "g/hub.md"]
        assert listed("tag:nothing-tagged-so") == []
        hit, = s.search("", k=1, tags=["travel"])
        assert (hit.rank, hit.score, hit.lanes, hit.snippet) == (1, 0.0, {}, "Gamma: rivers in the mobile app, end to end.")
        assert s.search("", k=5) == [] and s.search("   ", k=5) == []        # no filter: nothing to list


def test_lanes_pass_through(toy: Path) -> None:
    with _searcher(toy) as s:
        hits = s.search("beavers", k=5, lanes=["bm25"])
    assert [h.vault_path for h in hits] == ["g/a.md"]
    assert hits[0].lanes == {"bm25": 1}


def test_usage_boost_off_changes_nothing_and_on_lifts_a_used_note(toy: Path) -> None:
    with _searcher(toy) as s:
        plain = s.rank_pages("rivers otters", depth=5)
    with _searcher(toy, usage_boost={}) as s:
        assert s.rank_pages("rivers otters", depth=5) == plain
    last = plain[-1]
    last_path = {v: k for k, v in {"g/" + r: r for r in SPECS}.items()}[last[1]]
    with _searcher(toy, usage_boost={last_path: 1.0}) as s:
        boosted = s.rank_pages("rivers otters", depth=5)
        assert boosted[0][1] == last[1] and boosted[0][2] == pytest.approx(last[2] + 1.0)
        assert s.search("rivers otters", k=1)[0].vault_path == last_path


def test_usage_log_and_boost_tiers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1_800_000_000.0
    day = 86400.0
    assert usage.record(tmp_path, "s/a.md", now=now - 40 * day)
    for _ in range(4):
        usage.record(tmp_path, "s/b.md", now=now - 1 * day)
    usage.record(tmp_path, "s/c.md", now=now - 10 * day)
    log = usage.load(tmp_path)
    assert log["s/b.md"] == {"reads": 4.0, "last": now - day}
    assert json.loads((tmp_path / "usage.json").read_text())["version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["usage.json"]           # replaced atomically, no temp left
    assert (tmp_path / "usage.json").stat().st_mode & 0o777 == 0o600       # reading history: the user's only
    b = usage.boosts(log, now=now)
    assert set(b) == {"s/b.md", "s/c.md"}                                   # a.md is cold: no boost
    assert b["s/b.md"] == pytest.approx(0.2 / 61)                           # hot, 4 reads: full
    assert b["s/c.md"] == pytest.approx(0.2 / 61 * 0.5 * 0.43067655807339306)   # warm, 1 read
    monkeypatch.setenv("DOCSVAULT_USAGE_LOG", "0")
    assert not usage.record(tmp_path, "s/d.md")
    assert "s/d.md" not in usage.load(tmp_path)
    (tmp_path / "usage.json").write_text("not json")
    assert usage.load(tmp_path) == {}                                       # a broken log never breaks search
    monkeypatch.delenv("DOCSVAULT_USAGE_LOG")
    assert not usage.record(tmp_path / "mistyped", "s/e.md")                # a data folder is never made for it
    assert not (tmp_path / "mistyped").exists()


# ---------------------------------------------------------------------------------------------------------------
# neighbours


def test_links_of_a_note(toy: Path) -> None:
    con = wh.connect(toy, read_only=True)
    try:
        got = links_of(con, "g/hub.md", cap=1)
        none = links_of(con, "g/missing.md")
    finally:
        con.close()
    assert got == {"outlinks": [{"path": "g/a.md", "title": "Alpha", "links": 2}],
                   "backlinks": [{"path": "g/guide/d.md", "title": "Delta", "links": 1}],
                   "outlinks_total": 2, "backlinks_total": 1}
    assert none["outlinks"] == [] and none["backlinks_total"] == 0


def test_related_ranks_one_and_two_hop_neighbours(toy: Path) -> None:
    rows = related(toy, "g/hub.md", k=10)
    assert [(r["path"], r["hops"]) for r in rows if r["hops"] == 2] == [("g/c.md", 2)]
    assert {r["path"] for r in rows} == {"g/a.md", "g/b.md", "g/guide/d.md", "g/c.md"}
    assert rows == sorted(rows, key=lambda r: (-r["score"], r["path"]))
    a = next(r for r in rows if r["path"] == "g/a.md")
    assert a["link_weight"] == round(2 / 3.5, 4)                    # 2 outlinks of 2 + 1 + 0.5 backlink
    with pytest.raises(Exception, match="no note 'g/nope.md' in the warehouse"):
        related(toy, "g/nope.md")


def _unit(*xs: float) -> list[float]:
    """An 8-d vector starting with ``xs`` (the caller keeps it of length 1)."""
    return [*xs, *([0.0] * (8 - len(xs)))]


def test_related_compares_every_pair_in_the_cross_lingual_model(tmp_path: Path) -> None:
    """A Japanese note's Japanese and English neighbours, one link each: multilingual-e5 gives the two Japanese
    notes 0.92 (its cosines of any two Japanese texts are 0.85-0.95), the cross-lingual model 0.1, and puts the
    English one at 0.6. The cross-lingual model's cosines rank both (before session 41 the best over the models
    did: 0.92 against 0.6, and the Japanese neighbour came first)."""
    import numpy as np

    notes = [Note("me", rel, rel, title, {"title": title}, title) for rel, title in
             (("home.md", "ホーム"), ("ja.md", "日記"), ("en.md", "Move checklist"))]
    nid = {n.rel_path: n.note_id for n in notes}
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "me", 0, (), n.title, n.title) for n in notes]
    cid = {rel: f"{nid[rel]}-0" for rel in nid}
    e5 = ([cid["home.md"], cid["ja.md"]], np.array([_unit(1.0), _unit(0.92, (1 - 0.92 ** 2) ** 0.5)], np.float32))
    minilm = ([cid["en.md"]], np.array([_unit(1.0)], np.float32))
    cross = ([cid["home.md"], cid["ja.md"], cid["en.md"]],
             np.array([_unit(1.0), _unit(0.1, (1 - 0.01) ** 0.5), _unit(0.6, 0.8)], np.float32))
    edges = [Edge(nid["home.md"], nid["ja.md"], "日記", "wikilink"), Edge(nid["home.md"], nid["en.md"], "Move", "wikilink")]
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, edges=edges,
                                      vectors={"e5-test": e5, "minilm-test": minilm, "usem3-test": cross},
                                      run_info={"crosslingual_model": "usem3-test"}))
    rows = related(path, "me/home.md")
    assert [(r["path"], r["similarity"], r["score"]) for r in rows] == [("me/en.md", 0.6, 0.8), ("me/ja.md", 0.1, 0.55)]
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, edges=edges,            # no cross-lingual model:
                                      vectors={"e5-test": e5, "minilm-test": minilm}))    # the best model both have
    assert [(r["path"], r["similarity"]) for r in related(path, "me/home.md")] == [("me/ja.md", 0.92), ("me/en.md", 0.0)]
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, edges=edges[:1],         # one language: as before,
                                      vectors={"e5-test": e5, "minilm-test": minilm, "usem3-test": cross},
                                      run_info={"crosslingual_model": "usem3-test"}))       # the best of the models
    assert [(r["path"], r["similarity"]) for r in related(path, "me/home.md")] == [("me/ja.md", 0.92)]


# ---------------------------------------------------------------------------------------------------------------
# capture


def _local(root: Path, name: str = "inbox") -> Source:
    return Source(name=name, kind="local", path=(root,))


def test_write_capture_frontmatter_and_safety(tmp_path: Path) -> None:
    root = tmp_path / "inbox"
    root.mkdir()
    src = _local(root)
    got = write_capture(src, "# What I learned\n\nDuckDB reads parquet.\n", agent="claude-x", correlation_id="c1",
                        related=["docs/a.md"], tags=["#til"], now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert got.path == root / "What I learned.md" and got.vault_path == "inbox/What I learned.md"
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: What I learned\ncreated: '2026-01-02T03:04:05Z'\nagent: claude-x\nstatus: raw\n"
        "correlation_id: c1\nrelated:\n- '[[docs/a]]'\ntags:\n- til\n---\n\n# What I learned\n\nDuckDB reads parquet.\n")
    with pytest.raises(CaptureError, match="already exists"):
        write_capture(src, "# What I learned\nagain")
    assert "again" not in got.path.read_text(encoding="utf-8")           # never overwritten
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    for bad in ("../escape", "..", ".hidden", "con:x", "a\\b", "x" * 200, "/abs", "a//b", "a/../b", "a/.git/x",
                "a /b", "a/b/c/d/e/f", "link/escape"):
        with pytest.raises(CaptureError):
            write_capture(src, "text", name=bad)
    assert sorted(p.name for p in root.iterdir()) == ["What I learned.md", "link"]
    assert not (tmp_path / "escape.md").exists() and not list((tmp_path / "outside").iterdir())
    # folders of the source and a file name: the note goes there, the folder made when missing (a daily note)
    got = write_capture(src, "Rain all day.", name="daily/2026-12-04")
    assert (got.path, got.vault_path) == (root / "daily" / "2026-12-04.md", "inbox/daily/2026-12-04.md")
    with pytest.raises(CaptureError, match="nothing to capture"):
        write_capture(src, "   ")
    assert name_from_title("a/b: c?") == "a-b- c" and check_name("Note.md") == "Note"
    assert title_of("first line\n# Real title") == "Real title"
    # no heading: the first sentence of the first line; a long title ends at a word, with an ellipsis
    assert title_of("Another lesson. The pelican-orchid rule says: always checkpoint after bulk deletes.") == \
        "Another lesson."
    assert title_of("word " * 30) == ("word " * 15).strip() + "…"
    assert title_of("v1.2 is out") == "v1.2 is out"


CAPTURE_HEAD = "---\ntitle: {}\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\n---\n\n"


@pytest.mark.parametrize("text, title, expected_title, expected_body", [
    # a given title heads a text without a level-1 heading; the file ends with exactly one newline
    ("A heron stands still.\n", "Heron facts", "Heron facts", "# Heron facts\n\nA heron stands still.\n"),
    ("A heron stands still.", "Heron facts", "Heron facts", "# Heron facts\n\nA heron stands still.\n"),
    ("\n\nA heron.\n\n\n", "Heron facts", "Heron facts", "# Heron facts\n\nA heron.\n"),
    ("## Wading\n\nSlowly.\n", "Heron facts", "Heron facts", "# Heron facts\n\n## Wading\n\nSlowly.\n"),
    ("    # indented: code\n", "Heron facts", "Heron facts", "# Heron facts\n\n    # indented: code\n"),
    ("#hashtag first\n", "Heron facts", "Heron facts", "# Heron facts\n\n#hashtag first\n"),
    # a text that starts with a level-1 heading (ATX or setext) keeps it, whatever the title
    ("# Herons\n\nA heron.\n", "Heron facts", "Heron facts", "# Herons\n\nA heron.\n"),
    ("\n# Herons\nA heron.\n", "Heron facts", "Heron facts", "# Herons\nA heron.\n"),
    ("Herons\n======\n\nA heron.\n", "Heron facts", "Heron facts", "Herons\n======\n\nA heron.\n"),
    # no title given: the title is the first heading or line, already in the text
    ("A heron stands still.\nMore.\n", None, "A heron stands still.", "A heron stands still.\nMore.\n"),
    ("## Wading\n\nSlowly.", None, "Wading", "## Wading\n\nSlowly.\n"),
    ("A heron.\n", "", "A heron.", "A heron.\n"),
])
def test_write_capture_heading_and_final_newline(tmp_path: Path, text: str, title: str | None,
                                                 expected_title: str, expected_body: str) -> None:
    got = write_capture(_local(tmp_path), text, title=title, agent="a", correlation_id="c1",
                        now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert got.path.read_text(encoding="utf-8") == CAPTURE_HEAD.format(expected_title) + expected_body


def test_capture_source_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [_local(tmp_path, "inbox"), Source(name="web", kind="git", url="https://x/y.git")]
    monkeypatch.delenv("DOCSVAULT_CAPTURE_SOURCE", raising=False)
    with pytest.raises(CaptureError, match="no capture source: set DOCSVAULT_CAPTURE_SOURCE"):
        capture_source(sources)
    monkeypatch.setenv("DOCSVAULT_CAPTURE_SOURCE", "inbox")
    assert capture_source(sources).name == "inbox"
    with pytest.raises(CaptureError, match="is kind git"):
        capture_source(sources, "web")
    with pytest.raises(CaptureError, match="unknown capture source 'nope'"):
        capture_source(sources, "nope")
    assert os.environ["DOCSVAULT_CAPTURE_SOURCE"] == "inbox"


def test_force_env_names_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.stages import forced

    monkeypatch.delenv("DOCSVAULT_FORCE", raising=False)
    assert not forced("a") and not forced()
    monkeypatch.setenv("DOCSVAULT_FORCE", "a,b")
    assert forced("a") and forced("b") and not forced("c") and forced()
    monkeypatch.setenv("DOCSVAULT_FORCE", "*")
    assert forced("zzz")


# ---------------------------------------------------------------------------------------------------------------
# progress


def test_plain_progress_lines_every_interval() -> None:
    import io

    from pipeline.common.progress import PlainProgress

    now = [0.0]
    out = io.StringIO()
    p = PlainProgress(out, interval=10, clock=lambda: now[0], timer=False)
    p.update("fetch", "docs", 0, 0)
    now[0] = 5.0
    p.tick()                                           # under 10 s since the last line: nothing
    now[0] = 12.0
    p.tick()                                           # a clone that reports nothing still shows it is alive
    p.update("fetch", "docs", 3, 3)                    # a reported task that ends gets a line
    p.update("embed", "docs", 0, 1000)
    now[0] = 20.0
    p.update("embed", "docs", 400, 1000)               # 8 s after the last line: nothing yet
    now[0] = 22.0
    p.update("embed", "docs", 500, 1000)
    now[0] = 30.0
    p.update("embed", "docs", 1000, 1000)
    p.update("chunk", "docs", 0, 10)
    p.update("chunk", "docs", 10, 10)                  # never reported: no "done" line either
    assert out.getvalue().splitlines() == [
        "progress: fetch docs running for 12 s",
        "progress: fetch docs done: 3 files in 12 s",
        "progress: embed docs 500/1,000 vectors (50%), 50.0/s, ETA 10 s",
        "progress: embed docs done: 1,000 vectors in 18 s",
    ]


def test_plain_progress_rate_starts_with_the_first_units_not_before_a_model_load() -> None:
    """A Japanese vault's build: 1 vector came at once, then multilingual-e5 loaded for 70 s on a busy machine, and
    the line read `embed notes 1/192 vectors (0%), 0.0/s, ETA 3 h 47 min` for a stage that took 1 min 31 s (helper
    s43-ja); the rate is counted from the first units done."""
    import io

    from pipeline.common.progress import PlainProgress

    now = [0.0]
    out = io.StringIO()
    p = PlainProgress(out, interval=10, clock=lambda: now[0], timer=False)
    p.update("embed", "notes", 0, 192)
    now[0] = 1.0
    p.update("embed", "notes", 1, 192)
    now[0] = 71.0
    p.tick()                                           # the model still loading: no rate to tell
    now[0] = 81.0
    p.update("embed", "notes", 96, 192)
    assert out.getvalue().splitlines() == [
        "progress: embed notes 1/192 vectors (0%), running for 1 min 11 s",
        "progress: embed notes 96/192 vectors (50%), 1.2/s, ETA 1 min 21 s",
    ]


def test_mcp_save_note_writes_then_refreshes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.config import Settings
    from pipeline.mcp_server import ToolFailure, VaultService

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (tmp_path / "sources.yaml").write_text(f"sources:\n  - name: inbox\n    kind: local\n    path: {inbox}\n",
                                           encoding="utf-8")
    settings = Settings.from_env(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                 vault_dir=tmp_path / "vault")
    svc = VaultService(settings)
    calls: list[tuple[str | None, bool, bool]] = []

    def fake_refresh(source: str | None = None, full: bool = False, wait: float = 0, *, evaluate: bool = True) -> dict:
        calls.append((source, full, evaluate))
        return {"ok": True, "seconds": 1.0, "counts": {"added": 1, "changed": 0, "removed": 0},
                "added": ["inbox/Learned.md"]}

    monkeypatch.setattr(svc, "refresh", fake_refresh)
    monkeypatch.setenv("DOCSVAULT_CAPTURE_SOURCE", "inbox")
    out = svc.save_note("# Learned\n\nA fact.", agent="agent-7", correlation_id="run-1", tags=["til"])
    assert out == {"path": "inbox/Learned.md", "source": "inbox", "file": str(inbox / "Learned.md"),
                   "correlation_id": "run-1", "related": [], "searchable": True,
                   "refresh": {"ok": True, "seconds": 1.0, "counts": {"added": 1, "changed": 0, "removed": 0}}}
    assert calls == [("inbox", False, False)]      # the build without the eval (the next build runs it)
    assert "agent: agent-7\nstatus: raw\ncorrelation_id: run-1\n" in (inbox / "Learned.md").read_text("utf-8")
    with pytest.raises(ToolFailure) as taken:
        svc.save_note("# Learned\n\nother")
    assert str(taken.value) == (f"a note named 'Learned.md' already exists in {inbox.resolve()}: pass another `name` "
                                "(nothing was overwritten)")           # the MCP's argument, not the CLI's --name

    def failing(source: str | None = None, full: bool = False, wait: float = 0, *, evaluate: bool = True) -> dict:
        raise ToolFailure("refresh of inbox failed (exit 1): error: boom")

    monkeypatch.setattr(svc, "refresh", failing)
    kept = svc.save_note("second", name="Second")
    assert kept["searchable"] is False and kept["error"].startswith("the note is saved but the rebuild failed")
    assert (inbox / "Second.md").exists()


def _publish_note(path: Path, note: Note, chunks: list[Chunk]) -> None:
    """A warehouse at ``path`` of one note and its chunks, hash vectors."""
    embedder = HashEmbedder(64)
    res = embed_chunks(chunks, embedder, None)
    wh.publish(path, wh.WarehouseData(notes=[note], chunks=chunks, edges=[],
                                      vectors={embedder.model_id: (res.chunk_ids, res.vectors)},
                                      bm25_blobs=build_chunk_index(chunks, [note], Analyzer()).to_blobs()))


def test_a_quoted_alias_finds_its_note(tmp_path: Path) -> None:
    """An alias is one of the note's names: `"Kochbuch"` finds the note whose alias it is, as `Kochbuch` does."""
    path = tmp_path / "warehouse.duckdb"
    note = Note("g", "Recipes.md", "Recipes.md", "Recipes", {"title": "Recipes", "aliases": ["Kochbuch", "Cookbook"]},
                "Pancakes and soup.")
    chunks = [Chunk(f"{note.note_id}-0", note.note_id, "g", 0, (), "Recipes", "Pancakes and soup.")]
    _publish_note(path, note, chunks)
    with _searcher(path) as s:
        assert wh.note_texts(s._con, [note.note_id]) == {
            note.note_id: "Recipes\n\nKochbuch\n\nCookbook\n\nPancakes and soup."}
        for query, found in (('"Kochbuch"', ["g/Recipes.md"]), ('soup -"cookbook"', []), ('"Kochbuch pancakes"', [])):
            p = parse_query(query)
            assert [h.vault_path for h in s.search(p.text, k=5, filters=p)] == found, query


def test_a_quoted_heading_finds_its_note(tmp_path: Path) -> None:
    """A chunk's text does not hold its heading line (the breadcrumb does): the text a phrase is checked on puts
    each section's heading before its first chunk, as the note has it."""
    path = tmp_path / "warehouse.duckdb"
    note = Note("g", "callouts.md", "callouts.md", "Callouts", {"title": "Callouts"}, "x")
    chunks = [Chunk(f"{note.note_id}-0", note.note_id, "g", 0, (), "Callouts", "Use a callout to stand out."),
              Chunk(f"{note.note_id}-1", note.note_id, "g", 1, ("Foldable callouts",),
                    "Callouts > Foldable callouts", "Add a plus sign to fold it."),
              Chunk(f"{note.note_id}-2", note.note_id, "g", 2, ("Foldable callouts",),
                    "Callouts > Foldable callouts", "Its second part.")]
    _publish_note(path, note, chunks)
    with _searcher(path) as s:
        assert wh.note_texts(s._con, [note.note_id]) == {note.note_id: (
            "Callouts\n\nUse a callout to stand out.\n\nFoldable callouts\n\nAdd a plus sign to fold it.\n\n"
            "Its second part.")}
        for query, found in (('"Foldable callouts"', ["g/callouts.md"]), ('fold -"foldable callouts"', []),
                             ('"callouts add a plus"', ["g/callouts.md"]), ('"no such heading"', [])):
            p = parse_query(query)
            assert [h.vault_path for h in s.search(p.text, k=5, filters=p)] == found, query


def test_a_long_chunk_shows_the_match_that_gathers_the_query_not_its_first_term() -> None:
    """Finding of a new user: in a 200-line code note, `"quoted line 40"` showed `quoted line 20 …` (the chunk's
    first match of any term), `-C` marked lines 20-22, and MCP's read page was the chunk's start. The match with
    the most distinct query terms within a window wins; the first one on a tie."""
    from pipeline.cli import _best_lines, term_pattern
    from pipeline.search.reader import locate_match
    from pipeline.search.snippet import make_snippet, match_position

    code = "\n".join(f"echo quoted line {i}" for i in range(20, 60))
    assert code[match_position(code, '"quoted line 40"'):].startswith("quoted line 40")
    assert match_position(code, '"quoted line 40"', window=0) == code.index("quoted line 20")
    assert match_position(code, "quoted") == code.index("quoted line 20")       # one term: the first match
    # in raw Markdown a run does not cross a heading line: "install windows" is the Windows section's
    md = "Run the package manager to install it.\n\n## Windows\n\nDownload the installer."
    assert md[match_position(md, "install windows"):].startswith("Windows\n\nDownload")
    assert make_snippet(code, '"quoted line 40"', width=60) == "…line 39 echo quoted line 40 echo quoted line 41 echo quoted…"
    lines = code.split("\n")
    assert _best_lines(lines, 0, len(lines), term_pattern(["quoted", "line", "40"])) == [0, 1, 20]
    assert _best_lines(lines, 0, 2, term_pattern(["quoted", "40"])) == [0, 1, 2]    # after the chunk: grep order
    body = "# Code\n\n```sh\n" + code + "\n```\n"
    assert body[locate_match(body, "Code", code, '"quoted line 40"'):].startswith("quoted line 40")
    assert locate_match(body, "Code", code, "") == body.index("echo quoted line 20")


def test_term_matches_latin_at_word_starts_cjk_anywhere():
    from pipeline.search.snippet import term_matches

    text = "Category: でLoRAを使う。concat lora 入門LoRA"
    assert term_matches(text, ["lora", "cat"]) == [(0, "cat"), (11, "lora"), (26, "lora"), (33, "lora")]
    # a CJK term is found inside a word; the longer term wins at one offset
    assert term_matches("react入門 react", ["react入門", "react"]) == [(0, "react入門"), (8, "react")]
    assert term_matches("xlora", ["lora"]) == []


def test_clean_text_shows_escaped_characters_as_themselves():
    """`\\_`, `\\#`, `\\*` (the HTML converter writes them so text does not read as Markdown) show as `_`, `#`, `*`
    and are never emphasis; in code they stay as written; `\\|` stays for the table steps."""
    assert clean_text(r"read\_csv\_auto and \# not a heading, \*not emphasis\*") == \
        "read_csv_auto and # not a heading, *not emphasis*"
    assert clean_text("code `a\\_b` stays") == "code `a\\_b` stays"
    assert clean_text(r"a \\ backslash") == "a \\ backslash"


def test_inline_tags_may_hold_emoji():
    """Obsidian's "Tag format" allows emoji: `#🚀` is a tag (it was none, found by a new user); punctuation ends a
    tag, a heading and a number are none."""
    from pipeline.search.tags import inline_tags

    assert inline_tags("Launch #🚀 and #idea💡 #✅done, #日記。 #a/b #1984 #❤️\n# Heading") == {
        "🚀", "idea💡", "✅done", "日記", "a/b", "❤️"}


def test_a_japanese_word_written_inside_a_longer_word_is_not_named_missing(tmp_path: Path) -> None:
    """肩 in a note that writes 肩こり (one Sudachi word, term 肩凝り), 担当 in 担当者: no BM25 term, but the notes hold
    the word as written, so it is not named missing (a note-taker's 「肩が痛い」 was told "no note contains '肩'"
    above their two notes about 肩こり); within the scope only, and a word no note holds is still named."""
    from tests.tiny_warehouse import publish_pages

    path = tmp_path / "warehouse.duckdb"
    publish_pages(path, {("me", "健康.md", "健康"): ["肩こりにはストレッチが効く。"],
                         ("me", "会議.md", "会議"): ["ダッシュボードの担当者が決まった。"],
                         ("docs", "Tags.md", "Tags"): ["Tags help you find notes."]})
    assert Analyzer().tokens("肩こり 担当者") == ["肩凝り", "担当者"]
    with _searcher(path) as s:
        assert s.missing_words("肩が痛い")[:2] == (("肩",), ())
        assert s.missing_words("担当は誰")[:2] == (("担当",), ())
        assert s.missing_words("膝と肩")[:2] == (("膝", "肩"), ("膝",))
        assert s.missing_words("肩", source="docs")[:2] == (("肩",), ("肩",))
        assert s.missing_words("担当", source=["me"])[:2] == (("担当",), ())


def test_an_mcp_hit_text_is_at_most_600_characters_with_its_cut_marks(tmp_path: Path) -> None:
    """The search tool promises "up to 600 characters of `text`"; a long Japanese chunk cut at both ends gave 601
    or 602 (the two … marks came on top, helper s43-ja)."""
    from types import SimpleNamespace

    from pipeline.config import Settings
    from pipeline.mcp_server import HIT_TEXT_CHARS, VaultService

    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")
    svc = VaultService(Settings.from_env(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                         vault_dir=tmp_path / "vault"))
    chunk = "前置きの文" * 400 + "キーワードはここ" + "後ろの文" * 400          # no 。 or space to cut at
    hit = SimpleNamespace(chunk_text=chunk, snippet="", vault_path="notes/長い.md", heading="", rank=1,
                          source="notes", source_path="長い.md", title="長い", score=0.1, context="")
    text = svc._hit(hit, "キーワード", (), {})["text"]
    assert text.startswith("…") and text.endswith("…") and "キーワードはここ" in text
    assert len(text) <= HIT_TEXT_CHARS == 600


def test_a_tag_in_a_heading_is_a_tag_of_the_note(tmp_path: Path) -> None:
    """An Obsidian user's daily note with ``## Standup #meeting`` (a tag in a heading, which Obsidian indexes as a
    tag) was not found by ``tag:meeting``: the chunker puts a heading in the chunk's heading, not its text, and
    only the texts were read for inline tags. A tag in the text still counts, and ``#`` in a heading that is no
    tag (``C# tips``, ``Issue #42``) still does not."""
    from pipeline.index.chunk import chunk_note

    notes = [Note("g", "Daily/2026-12-07.md", "Daily/2026-12-07.md", "2026-12-07", {"title": "2026-12-07"},
                  "# 2026-12-07\n\n## Standup #meeting\nTalked about the otter enclosure with Yamada.\n\n"
                  "## Lunch\nRamen with the team, #food/ramen.\n"),
             Note("g", "tips.md", "tips.md", "tips", {"title": "tips"},
                  "## C# tips\nOtter facts for C programmers.\n\n## Issue #42\nThe otter bug.\n")]
    chunks = [c for n in notes for c in chunk_note(n, count_tokens=len, max_tokens=200, min_tokens=0)]
    assert [c.heading for c in chunks] == ["Standup #meeting", "Lunch", "C# tips", "Issue #42"]
    path = tmp_path / "warehouse.duckdb"
    publish_chunks(path, notes, chunks)
    with _searcher(path) as s:
        def tagged(tag: str) -> list[str]:
            return sorted(h.vault_path for h in s.search("otter", k=10, tags=[tag]))

        assert tagged("meeting") == ["g/Daily/2026-12-07.md"]
        assert tagged("food") == ["g/Daily/2026-12-07.md"]
        assert tagged("tips") == [] and tagged("42") == []


def test_a_tag_in_the_title_heading_is_a_tag_of_the_note(tmp_path: Path) -> None:
    """``# Home #project`` is titled ``Home`` (session 47) and its H1 is the title's, in no chunk's heading or text,
    so ``--tag project`` said "no note has the tag 'project'" of a note Obsidian lists under it (break2). The
    title H1's tags are the note's now, beside its frontmatter's; ``# C# tips`` and ``# Issue #42`` hold none."""
    from pipeline.index.chunk import chunk_note

    notes = [Note("g", "Home.md", "Home.md", "Home", {"title": "Home", "tags": ["start"]},
                  "# Home #project #todo/next\n\nWelcome, otter keepers.\n"),
             Note("g", "tips.md", "tips.md", "C# tips", {"title": "C# tips"}, "# C# tips\n\nOtters in C#.\n"),
             Note("g", "42.md", "42.md", "Issue #42", {"title": "Issue #42"}, "# Issue #42\n\nThe otter bug.\n")]
    chunks = [c for n in notes for c in chunk_note(n, count_tokens=len, max_tokens=200, min_tokens=0)]
    assert [c.heading for c in chunks] == ["", "", ""]
    path = tmp_path / "warehouse.duckdb"
    publish_chunks(path, notes, chunks)
    with _searcher(path) as s:
        def tagged(tag: str) -> list[str]:
            return sorted(h.vault_path for h in s.search("otter", k=10, tags=[tag]))

        assert tagged("project") == ["g/Home.md"]
        assert tagged("todo") == ["g/Home.md"] and tagged("start") == ["g/Home.md"]
        assert tagged("tips") == [] and tagged("42") == []
    from pipeline.warehouse.write import _note_tags

    both = Note("g", "B.md", "B.md", "B", {"title": "B", "tags": ["project", "x"]}, "# B #project #y\n\nText.\n")
    assert _note_tags(both) == ["project", "x", "y"]          # a tag written in both places is held once


def test_a_link_whose_text_runs_over_a_line_break_shows_its_text() -> None:
    """jekyllrb's credits wrap an avatar image and a name in one link over two lines; the snippet showed
    ``[ ashmaroli](https://github.com/ashmaroli)`` (helper-144, session 46). A blank line still ends a link's text,
    as in CommonMark."""
    from pipeline.search.snippet import clean_text

    assert clean_text("Thanks to [![ashmaroli](https://a.example/1.png)\nashmaroli](https://github.com/ashmaroli) "
                      "and [two\nlines](x.md).\n\n[not\n\nthis](y)") == (
        "Thanks to ashmaroli and two lines. [not this](y)")


def test_a_link_cut_by_a_chunk_boundary_shows_its_text_not_its_target() -> None:
    """A sentence too long for one chunk is cut between its words, also inside a link: ja-react's TypeScript page
    holds ``[こちらの TypeScript プレイグラウンド](<an 800-character URL>)で、…``, and the hit's snippet began
    ``プレイグラウンド](https://www.typescriptlang.org/play?#code/JYWwDg9g…`` and was the URL to its end (session 45).
    The tail of a link whose ``[`` is in the chunk before, and the head of one whose target runs into the next,
    keep their text, as a whole link does."""
    from pipeline.search.snippet import clean_text, make_snippet

    url = "https://www.typescriptlang.org/play?#code/" + "JYWwDg9gTgLgBAJQ" * 50
    assert clean_text(f"プレイグラウンド]({url})で、`React.ReactNode` を確認できます。") == (
        "プレイグラウンドで、`React.ReactNode` を確認できます。")
    assert clean_text("See [the docs](https://exa") == "See the docs"
    assert clean_text("a](b) and [c](d (x)) then e](f)") == "a and c then e](f)"    # only at the chunk's start
    assert make_snippet(f"TypeScript プレイグラウンド]({url})で確認。", "プレイグラウンド", width=80) == (
        "TypeScript プレイグラウンドで確認。")
