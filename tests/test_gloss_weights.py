"""A Japanese question's English glosses of one word share that word's weight in BM25 (Pirkola's structured query):
the eight terms of 持ち物's glosses no longer outvote the word itself in the note that has it (a new user's `持ち物`
put their own note at #15, below English pages matching "property")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.index.bm25 import Bm25Index
from pipeline.search.searcher import GLOSS_WEIGHT_POWER, Searcher
from pipeline.search.translate import Translator
from tests.tiny_warehouse import publish_pages

NOTES = {
    ("notes", "旅行.md", "北海道旅行"): ["## 持ち物\n\nタオルと水筒とカメラを持っていく。"],
    ("notes", "料理.md", "料理"): ["カレーを作った。玉ねぎを炒める。"],
    ("docs", "schedules.md", "Schedules"): ["How the day_or property of a schedule works with personal calendars."],
    ("docs", "flows.md", "Flows"): ["A flow has a property for each of its settings."],
    ("docs", "tasks.md", "Tasks"): ["Tasks run work and return results."],
}

needs_dictionary = pytest.mark.skipif(not Translator.shared().available, reason="jamdict-data not installed")


def test_bm25_scores_take_one_weight_per_term() -> None:
    index = Bm25Index.build(["a", "b", "c"], [["x", "y"], ["y"], ["z"]])
    plain, weighted = index.scores(["x", "y"]), index.scores(["x", "y"], [1.0, 0.5])
    assert weighted[0] == pytest.approx(index.scores(["x"])[0] + 0.5 * index.scores(["y"])[0])
    assert np.array_equal(index.scores(["x", "y"], [1.0, 1.0]), plain)          # weight 1: the same floats
    scope = np.array([True, True, False])
    assert np.array_equal(index.scores_in_scope(["x", "y"], scope, [1.0, 1.0]),
                          index.scores_in_scope(["x", "y"], scope))
    with pytest.raises(ValueError, match="2 weights for 1 query tokens"):
        index.scores(["x"], [1.0, 1.0])


@needs_dictionary
def test_glosses_of_one_word_share_its_weight(tmp_path: Path) -> None:
    path = tmp_path / "wh.duckdb"
    publish_pages(path, NOTES)
    with Searcher(path) as s:
        s.exact_phrases = False         # the BM25 lane's own order (旅行.md holds 持ち物 verbatim: it would come first)
        terms, weights = s._bm25_query("持ち物")
        english = s.analyzer.tokens(Translator.shared().translate("持ち物") or "")
        assert terms[0] == "持ち物" and list(terms[1:]) == english and len(english) >= 4
        assert weights == (1.0, *[len(english) ** -GLOSS_WEIGHT_POWER] * len(english)) and GLOSS_WEIGHT_POWER == 0.5
        assert s._bm25_query("personal property")[1] is None                 # an English query: every term 1
        assert [p for _, p, _ in s.rank_pages("持ち物", lanes=["bm25"])][0] == "旅行.md"
        s.gloss_weight_power = 0                                                # every gloss term 1, as before
        assert [p for _, p, _ in s.rank_pages("持ち物", lanes=["bm25"])][0] == "schedules.md"


@needs_dictionary
def test_an_english_page_found_by_a_japanese_question_shows_the_text_its_translation_matched(tmp_path: Path) -> None:
    """The snippet of an English page hit by a Japanese question is cut around the first word of the question's
    translation when no word of the question itself is in it (before: always the chunk's start); a Japanese page's
    snippet still follows the question's own words."""
    filler = "Nothing about it here. " * 20
    path = tmp_path / "wh.duckdb"
    publish_pages(path, {("docs", "camera.md", "Gear"): [filler + "Pack a camera for the trip."],
                         ("notes", "旅.md", "旅"): ["カメラ " + "あいうえお。" * 60 + "カメラを持っていく。"]})
    with Searcher(path) as s:
        assert "camera" in s.translation_terms("カメラ") and s.translation_terms("camera") == ()
        hits = {h.source_path: h.snippet for h in s.search("カメラ", k=2, lanes=["bm25"])}
        assert hits["camera.md"].endswith("Pack a camera for the trip.") and hits["camera.md"].startswith("…")
        assert hits["旅.md"].startswith("カメラ あいうえお")


@needs_dictionary
def test_a_question_in_half_width_katakana_is_translated_as_its_full_width_form(tmp_path: Path) -> None:
    """ﾌﾟﾛﾊﾟﾃｨ (half-width, as an old IME or a pasted form writes it) is プロパティ for BM25, so its translation is the
    same too: before, it had no Japanese character of the translator's ranges, so the English pages about "property"
    were not found by keyword and the word was named as in no note."""
    path = tmp_path / "wh.duckdb"
    publish_pages(path, NOTES)
    with Searcher(path) as s:
        full = s.translation_terms("プロパティ")
        assert full and s.translation_terms("ﾌﾟﾛﾊﾟﾃｨ") == full
        assert s._bm25_query("ﾌﾟﾛﾊﾟﾃｨ") == s._bm25_query("プロパティ")
        assert s.missing_words("ﾌﾟﾛﾊﾟﾃｨ").missing == ()
        assert [p for _, p, _ in s.rank_pages("ﾌﾟﾛﾊﾟﾃｨ", lanes=["bm25"])][:2] == \
            [p for _, p, _ in s.rank_pages("プロパティ", lanes=["bm25"])][:2]


def test_a_question_in_half_width_katakana_is_ranked_as_its_full_width_form(tmp_path: Path) -> None:
    """Every lane reads ｶﾀｶﾅ as カタカナ (NFKC, as BM25 always did): before, the vector lanes embedded the
    half-width text and the question counted as English for the cross-lingual bridge, so ｺｰﾙｱｳﾄ put Obsidian's
    Callouts page 3rd where コールアウト put it 1st (a Japanese note-taker, session 42)."""
    path = tmp_path / "wh.duckdb"
    publish_pages(path, NOTES)
    with Searcher(path) as s:
        assert s.rank_pages("ｶﾚｰの作り方") == s.rank_pages("カレーの作り方")
        assert [h.source_path for h in s.search("ｶﾚｰ")] == [h.source_path for h in s.search("カレー")]
