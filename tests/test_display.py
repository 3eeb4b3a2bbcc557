"""Japanese text as the user sees it (session 47): spaces of another width kept in messages and capture titles,
no cut between a character and its combining marks (a note written in NFD), table columns by display width."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
import typer
import yaml

from pipeline.common.display import char_start, fit, one_line, pad, width
from pipeline.evaluate import format_report
from pipeline.index.chunk import chunk_note
from pipeline.ingest.capture import name_from_title, write_capture
from pipeline.models import Note, Source
from pipeline.search.snippet import cut_around

NFD = unicodedata.normalize


def test_one_line_keeps_an_ideographic_space_and_collapses_the_rest() -> None:
    assert one_line(" a\u3000b \n\tc  \u3000 d\u00a0e\n") == "a\u3000b c d\u00a0e"
    assert one_line("\u3000計画\u3000") == "計画"
    assert one_line(" \n ") == ""


def test_width_fit_and_pad_count_columns() -> None:
    assert width("日本語") == 6 and width("ｶﾅ") == 2 and width(NFD("NFD", "ガ")) == 2 and width("ＡＢ") == 4
    assert fit("kind: 日本語", 14) == "kind: 日本語  "
    assert fit("日本語です", 5) == "日本 "                    # a wide character that does not fit is left out
    assert fit(NFD("NFD", "ガガ"), 3) == NFD("NFD", "ガ") + " "
    assert pad("会議-1", 8) == "会議-1  " and pad("long-id", 3) == "long-id"


def test_char_start_never_splits_a_voiced_mark() -> None:
    text = NFD("NFD", "ドコ")                          # ト, U+3099, コ
    assert [char_start(text, i) for i in range(4)] == [0, 0, 2, 3]
    assert char_start(text, 1, floor=0) == 1                 # a piece cut from 0 keeps a character


def test_the_cli_error_line_keeps_the_ideographic_space_of_a_note_name(capsys: pytest.CaptureFixture[str]) -> None:
    """`read 'プロジェクト 計画.md'` said "did you mean 'プロジェクト 計画'?", the name with an ASCII space, which
    is not the note's: the line collapsed every Unicode space."""
    from pipeline.cli import fail

    with pytest.raises(typer.Exit):
        fail("no note 'x.md'; did you mean 'プロジェクト\u3000計画'?\nsecond line")
    assert capsys.readouterr().err == "error: no note 'x.md'; did you mean 'プロジェクト\u3000計画'?\n"


def test_the_mcp_tool_error_keeps_the_ideographic_space() -> None:
    from pipeline.mcp_server import tool_error

    assert tool_error("read", "Error executing tool read: no note 'a';  did you mean\n'会議メモ\u3000１月'?") == (
        "read: no note 'a'; did you mean")
    assert tool_error("read", "no note 'a'; did you mean '会議メモ\u3000１月'?") == (
        "read: no note 'a'; did you mean '会議メモ\u3000１月'?")


def test_a_capture_title_keeps_its_ideographic_space(tmp_path: Path) -> None:
    """`capture --title 'プロジェクト　計画'` wrote `プロジェクト 計画.md` titled with an ASCII space: the vault's
    `[[プロジェクト　計画]]` links, typed as the user types the name, did not reach it."""
    assert name_from_title("Ｄｏｃｋｅｒ\u3000再起動：原因／メモ\n") == "Ｄｏｃｋｅｒ\u3000再起動：原因-メモ"
    root = tmp_path / "notes"
    root.mkdir()
    src = Source(name="notes", kind="local", path=(str(root),))
    note = write_capture(src, "本文です。", title="プロジェクト\u3000計画", correlation_id="c1")
    written = sorted(p.name for p in root.iterdir())
    assert written == ["プロジェクト\u3000計画.md"]
    text = (root / written[0]).read_text(encoding="utf-8")
    assert yaml.safe_load(text.split("---\n")[1])["title"] == "プロジェクト\u3000計画"
    assert "\n# プロジェクト\u3000計画\n" in text
    assert note is not None


def test_a_note_written_in_nfd_is_never_chunked_between_a_kana_and_its_voiced_mark() -> None:
    """A note written decomposed (macOS): a hard cut put ズント in one chunk and ゙コ in the next, so ズンドコ was
    in no chunk: BM25 and `(no note contains 'ズンドコ')` missed it."""
    body = NFD("NFD", "## メモ\n" + "ガ" * 10 + "ズンドコ" * 30)
    note = Note("src", "m.md", "m.md", "メモ", {}, body)
    for max_tokens in (25, 30, 41):
        chunks = chunk_note(note, count_tokens=len, max_tokens=max_tokens)
        assert [c.text[0] for c in chunks if unicodedata.combining(c.text[0])] == []
        assert "".join(c.text for c in chunks) == body.split("\n", 1)[1]


def test_a_snippet_of_an_nfd_note_starts_and_ends_on_whole_characters() -> None:
    text = NFD("NFD", "ガジェットのレビュー、" * 30 + "ズンドコの話題")
    snip = cut_around(text, text.index(NFD("NFD", "ズンドコ")), 40)
    # not ゙ュー (a voiced mark cut from its ビ), and after a 、 (not ュー、…, mid-word)
    assert snip == "…" + NFD("NFD", "ガジェットのレビュー、ガジェットのレビュー、ズンドコの話題")
    whole = NFD("NFC", text)
    for pos in range(0, 60, 3):                     # every cut is of whole characters: its NFC is in the text's
        assert NFD("NFC", cut_around(text, pos, 24).strip("…")) in whole


def test_a_long_phrase_no_note_contains_is_shown_cut_between_whole_characters() -> None:
    """`search '"テスト…ア👨‍👩‍👧です"'` said `no note contains "…ア👨\u200d…"`: the 40-character cut kept the man
    and the joiner of the family emoji (helper s49-ja); a decomposed ガ lost its voiced mark alike."""
    from pipeline.search.query import parse_query
    from pipeline.search.searcher import FilterMisses
    from pipeline.service import no_results_message

    def said(phrase: str) -> str:
        return no_results_message(FilterMisses(absent=((phrase,),)), parse_query(f'"{phrase}"'))

    head = "テスト" * 12 + "ア"
    assert said(head + "👨\u200d👩\u200d👧です") == (
        f'No results: no note contains "{head}…" (a quoted phrase must be in the note as typed; drop the quotes '
        "to rank by its words)")
    assert said(head + "イ" + NFD("NFD", "ガジェット")).startswith(f'No results: no note contains "{head}イ…" (')


def test_a_cut_never_splits_a_flag_or_a_keycap() -> None:
    """A snippet or page cut between the two regional indicators of 🇯🇵 showed 🇯, a lone letter in a box, and one
    after `1️` lost the keycap's U+20E3 (helper s49-ja): both are one character as a terminal shows them."""
    text = "ab🇯🇵🇫🇷cd"
    assert [char_start(text, i) for i in range(len(text) + 1)] == [0, 1, 2, 2, 4, 4, 6, 7, 8]
    keycap = "x1\ufe0f\u20e3y"
    assert [char_start(keycap, i) for i in range(len(keycap) + 1)] == [0, 1, 1, 1, 4, 5]


def test_an_emoji_sequence_takes_the_two_columns_a_terminal_gives_it() -> None:
    """`width` counted each code point: 👨‍👩‍👧 (three emoji and two joiners) as 8 columns, 👍🏽 as 4, so an eval kind
    or id holding one pushed its row's figures out of line (helper s49-ja)."""
    assert [width(t) for t in ("👨\u200d👩\u200d👧", "👍🏽", "🇯🇵", "1\ufe0f\u20e3", "📷", "家族", "ｶﾅ")] == [2, 2, 2, 2, 2, 4, 2]
    assert fit("家族👨\u200d👩\u200d👧テスト", 7) == "家族👨\u200d👩\u200d👧 "     # the emoji whole, then a space
    assert fit("ab🇯🇵cd", 3) == "ab " and fit("ab🇯🇵cd", 4) == "ab🇯🇵"
    assert pad("旅行🏃", 8) == "旅行🏃  "


def test_the_eval_table_aligns_japanese_kinds_and_ids() -> None:
    agg = {"n": 1, "hit@1": 1.0, "hit@3": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0}
    rep = {"lanes": ["bm25"], "overall": agg, "by_source": {}, "by_kind": {"半角ｶﾅ": agg, "日本語・全角": agg},
           "cases": [{"id": "会議-1", "rank": None, "query": "会議で決まったこと", "top": ["a.md"]}]}
    lines = format_report(rep).splitlines()
    assert lines[3] == "overall                     1     1.000     1.000     1.000     1.000"
    assert lines[5] == "kind: 半角ｶﾅ                1     1.000     1.000     1.000     1.000"
    assert lines[6] == "kind: 日本語・全角          1     1.000     1.000     1.000     1.000"
    assert lines[9] == "  会議-1                 rank  -  会議で決まったこと"
    assert {width(line) for line in lines[3:7] if line} == {69}


def test_a_long_japanese_sentence_is_chunked_after_its_commas() -> None:
    """A sentence over the budget with no space and no 。 was cut by characters: ズンドコ became ズン | ドコ (and a
    link `[RedwoodJS](h` | `ttps://…)` in ja-react's React Conf 2024 recap); it is cut after a 、 now."""
    for form in ("NFC", "NFD"):
        body = NFD(form, "## メモ\n" + "データベースのパフォーマンスチューニングについて詳しく書いたノートで、" * 20
                   + "ズンドコの話題。")
        chunks = chunk_note(Note("src", "m.md", "m.md", "メモ", {}, body), count_tokens=len, max_tokens=200)
        texts = [NFD("NFC", c.text) for c in chunks]
        assert [t[-1] for t in texts] == ["、"] * (len(texts) - 1) + ["。"]
        assert texts[-1].endswith("ノートで、ズンドコの話題。") and "".join(c.text for c in chunks) == body.split("\n", 1)[1]


def test_a_long_nfd_first_line_is_titled_with_whole_characters() -> None:
    from pipeline.ingest.capture import title_of

    assert title_of(NFD("NFD", "ガ" * 50)) == NFD("NFD", "ガ" * 39) + "…"      # not 39 ガ and a カ


def test_one_line_keeps_every_space_of_another_width_on_its_fast_path_too() -> None:
    """one_line joins a text without such a space with str.split (a search's snippets: the per-run regex cost a
    search ~5 % of its time); every Unicode space but ASCII's must send a text to the path that keeps it."""
    import sys
    import unicodedata

    from pipeline.common.display import _OTHER_SPACE, one_line

    others = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Zs" and c != 0x20]
    assert [c for c in others if not _OTHER_SPACE.search(c)] == []
    assert one_line(" a \t b\n\nc ") == "a b c"
    assert [one_line(f"a{c}b \n c") for c in ("\u3000", "\xa0", "\u2009")] == ["a\u3000b c", "a\xa0b c", "a\u2009b c"]
    assert one_line("\u3000a\u3000") == "a"
