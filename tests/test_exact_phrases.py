"""A query found verbatim in a page puts that page first (pipeline.search.searcher.Searcher._exact_first).

A Japanese note-taker's vault beside docs sources (session 38): `ダッシュボードの担当`, written so in one meeting note,
ranked that note 5th, after four English dashboard pages that the `vector` and `crosslingual` lanes both voted for
(a Japanese query has two dense votes for an English page); `毎週見直す` ranked the note holding it 2nd, after an
English note about weekly reviews. Among the fused top 30, the pages with a chunk holding the query verbatim — a
Japanese phrase or each space-separated part, an English phrase of two words or more, compared as quoted terms are
— now come first, above the pages holding its code identifiers."""

from __future__ import annotations

import pytest

from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import Bm25Index
from pipeline.search.query import holds_verbatim, verbatim_terms
from pipeline.search.searcher import EXACT_DEPTH, Searcher


@pytest.mark.parametrize(("query", "terms"), [
    ("ダッシュボードの担当", ("ダッシュボードの担当",)),
    ("ダッシュボードの担当？", ("ダッシュボードの担当",)),                     # a question mark is no part of it
    ("山田さん 担当", ("山田さん", "担当")),                                  # Japanese keywords, each on its own
    ("\u3000山田さん\u3000担当\u3000", ("山田さん", "担当")),                # ideographic spaces
    ("Parquet ファイル", ("parquet", "ファイル")),
    ("kubectl rollout restart", ("kubectl rollout restart",)),              # English: the whole phrase
    ("How do I read a CSV file?", ("how do i read a csv file",)),
    ("warning-wombat", ("warning-wombat",)),                                # two words
    ("ＤｕｃｋＤＢ ｍａｃｒｏｓ", ("duckdb macros",)),                       # NFKC, case-folded
    ("install", ()),                                                        # one Latin word: BM25 reads it
    ("猫", ()),                                                             # one kanji is in too many pages
    ("DuckDB で CSV を 読む", ("duckdb", "csv", "読む")),                    # particles written apart: left out
    ("ね こ", ()),
    ("   ", ()),
])
def test_verbatim_terms(query: str, terms: tuple[str, ...]) -> None:
    assert verbatim_terms(query) == terms


def test_holds_verbatim_compares_as_quoted_terms_do() -> None:
    assert holds_verbatim("新しいダッシュボードの担当は山田さん。", verbatim_terms("ダッシュボードの担当"))
    assert holds_verbatim("担当: 山田さん", verbatim_terms("山田さん 担当"))               # parts in any order
    assert not holds_verbatim("ダッシュボードを作った。担当は佐藤さん。", verbatim_terms("ダッシュボードの担当"))
    assert holds_verbatim("Run `kubectl rollout restart` after a change.", verbatim_terms("kubectl rollout restart"))
    assert not holds_verbatim("kubectl rollout restarted", verbatim_terms("kubectl rollout restart"))   # word ends
    assert not holds_verbatim("anything", ())


def test_docs_with_all_intersects_the_postings() -> None:
    index = Bm25Index.build(["a", "b", "c"], [["x", "y"], ["y", "z"], ["x", "y", "z"]])
    assert index.docs_with_all(["y", "z"]) == ["b", "c"]
    assert index.docs_with_all(["x", "x"]) == ["a", "c"]
    assert index.docs_with_all(["x", "unknown"]) == []
    assert index.docs_with_all([]) == []


CHUNKS = {   # chunk id -> (note id, title, breadcrumb, text)
    "dash-1": ("dash", "Dashboard", "Dashboard", "ダッシュボードを開き、担当者ごとの実行を見る。"),
    "runs-1": ("runs", "Task runs", "Task runs", "ダッシュボードで担当者の一覧を見る。"),
    "memo-1": ("memo", "定例会議", "定例会議 > 決定事項", "新しい **ダッシュボードの担当** は山田さん。"),
    "memo-2": ("memo", "定例会議", "定例会議 > 次回", "来週の月曜。"),
    "ops-1": ("ops", "Deploy checklist", "Deploy checklist", "Run kubectl rollout restart deployment/api."),
    "ops-2": ("other", "Rollouts", "Rollouts", "kubectl rollout status and restart."),
    "other-2": ("other", "Rollouts", "Rollouts > Owners", "山田さん owns the rollout."),
    "other-3": ("other", "Rollouts", "Rollouts > Review", "担当: the platform team."),
    "flags-1": ("flags", "Alarm flags", "Alarm flags", "Set the warning-wombat flag to silence the alarms."),
    "react-1": ("react", "警告", "警告", "warning は開発時だけ表示される。wombat の例。"),
}


@pytest.fixture
def searcher() -> Searcher:
    """A Searcher with only what ``_exact_first`` reads: the analyzer, a chunk index over CHUNKS and their rows."""
    sr = Searcher.__new__(Searcher)
    sr.analyzer = Analyzer()
    sr._bm25 = Bm25Index.build(list(CHUNKS), [sr.analyzer.tokens(f"{c[1]} {c[3]}") for c in CHUNKS.values()])
    sr._bm25_pages = None
    sr._note_of = {cid: c[0] for cid, c in CHUNKS.items()}
    sr.exact_identifiers = True
    sr.exact_phrases = True
    sr._chunk_rows = lambda ids: {cid: {"title": CHUNKS[cid][1], "breadcrumb": CHUNKS[cid][2],  # type: ignore[method-assign]
                                        "text": CHUNKS[cid][3]} for cid in ids}
    return sr


FUSED = [("dash", 0.149, {"vector": 1}), ("runs", 0.138, {"crosslingual": 1}), ("other", 0.12, {"bm25": 3}),
         ("memo", 0.0915, {"bm25": 1}), ("ops", 0.05, {"bm25": 9})]


def test_the_page_holding_the_query_verbatim_comes_first(searcher: Searcher) -> None:
    out = searcher._exact_first(list(FUSED), "ダッシュボードの担当")
    assert [p[0] for p in out] == ["memo", "dash", "runs", "other", "ops"]
    lift = 0.149 - 0.0915 + 1e-9        # the least that puts the moved page above every other
    assert [round(p[1], 12) for p in out] == [round(s, 12) for s in (0.0915 + lift, 0.149, 0.138, 0.12, 0.05)]
    assert out[0][2] == {"bm25": 1}                                           # lane ranks kept


def test_one_chunk_holds_every_part(searcher: Searcher) -> None:
    """`山田さん 担当`: the meeting note's decision holds both; `other` has them in two different sections."""
    assert [p[0] for p in searcher._exact_first(list(FUSED), "山田さん 担当")] == ["memo", "dash", "runs", "other",
                                                                                 "ops"]


def test_an_english_phrase_of_two_words_or_more(searcher: Searcher) -> None:
    out = searcher._exact_first(list(FUSED), "kubectl rollout restart")
    assert [p[0] for p in out] == ["ops", "dash", "runs", "other", "memo"]    # `other` has the words, not the phrase
    assert searcher._exact_first(list(FUSED), "restart") == FUSED            # one word: nothing to look up
    # session 14's small vault: a React page with one more dense vote stood above the only note holding the term
    fused = [("react", 0.1216, {"crosslingual": 4}), ("flags", 0.1190, {"bm25": 1})]
    assert [p[0] for p in searcher._exact_first(list(fused), "warning-wombat")] == ["flags", "react"]


@pytest.mark.parametrize("query", ["ダッシュボードの設定", "the of and", "how do I restart a pod"])
def test_a_query_no_page_holds_verbatim_changes_nothing(searcher: Searcher, query: str) -> None:
    assert searcher._exact_first(list(FUSED), query) == FUSED


def test_off_and_beyond_the_depth(searcher: Searcher) -> None:
    searcher.exact_phrases = False
    assert searcher._exact_first(list(FUSED), "ダッシュボードの担当") == FUSED
    searcher.exact_phrases = True
    deep = [(f"p{i}", 1.0 - i / 100, {}) for i in range(EXACT_DEPTH)] + [("memo", 0.1, {})]
    assert searcher._exact_first(list(deep), "ダッシュボードの担当") == deep          # only the top is reordered


def test_the_verbatim_page_comes_before_a_page_holding_the_identifier_only() -> None:
    sr = Searcher.__new__(Searcher)
    sr.analyzer = Analyzer()
    texts = {"ref": "deployment/api and restart_policy", "note": "Set restart_policy to always, then kubectl rollout "
             "restart restart_policy pods.", "misc": "Nothing here."}
    sr._bm25 = Bm25Index.build(list(texts), [sr.analyzer.tokens(t) for t in texts.values()])
    sr._bm25_pages = sr._bm25
    sr._note_of = {k: k for k in texts}
    sr.exact_identifiers = sr.exact_phrases = True
    sr._chunk_rows = lambda ids: {i: {"title": "", "breadcrumb": "", "text": texts[i]} for i in ids}  # type: ignore[method-assign]
    fused = [("misc", 0.3, {}), ("ref", 0.2, {}), ("note", 0.1, {})]
    assert [p[0] for p in sr._exact_first(list(fused), "rollout restart restart_policy")] == ["note", "ref", "misc"]
    assert [p[0] for p in sr._exact_first(list(fused), "restart_policy")] == ["ref", "note", "misc"]
