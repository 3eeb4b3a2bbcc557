"""A query found verbatim in a page puts that page first (pipeline.search.searcher.Searcher._exact_first).

A Japanese note-taker's vault beside docs sources (session 38): `ダッシュボードの担当`, written so in one meeting note,
ranked that note 5th, after four English dashboard pages that the `vector` and `crosslingual` lanes both voted for
(a Japanese query has two dense votes for an English page); `毎週見直す` ranked the note holding it 2nd, after an
English note about weekly reviews. Among the fused top 30, the pages with a chunk holding the query verbatim — a
Japanese phrase or each space-separated part, an English phrase of two words or more, compared as quoted terms are
— now come first, above the pages holding its code identifiers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import Bm25Index
from pipeline.search.query import holds_verbatim, verbatim_terms
from pipeline.search.searcher import EXACT_DEPTH, Searcher
from tests.test_exact_identifiers import FUSED as IDENTIFIER_FUSED
from tests.test_exact_identifiers import identifier_searcher, stub_searcher


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


def phrase_searcher() -> Searcher:
    """A chunk index over CHUNKS and their rows (``_chunk_rows``), no page index."""
    return stub_searcher(
        _bm25=Bm25Index.build(list(CHUNKS), [Analyzer().tokens(f"{c[1]} {c[3]}") for c in CHUNKS.values()]),
        _bm25_pages=None, _note_of={cid: c[0] for cid, c in CHUNKS.items()},
        _chunk_rows=lambda ids: {cid: dict(zip(("title", "breadcrumb", "text"), CHUNKS[cid][1:])) for cid in ids})


@pytest.fixture
def searcher() -> Searcher:
    return phrase_searcher()


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


@pytest.mark.parametrize(("make", "fused", "switch", "query", "moved"), [
    (phrase_searcher, FUSED, "exact_phrases", "ダッシュボードの担当", "memo"),
    (identifier_searcher, IDENTIFIER_FUSED, "exact_identifiers", "minimum_interval_seconds", "note"),
])
def test_off_and_beyond_the_depth(make: Callable[[], Searcher], fused: list, switch: str, query: str,
                                  moved: str) -> None:
    searcher = make()
    setattr(searcher, switch, False)
    assert searcher._exact_first(list(fused), query) == fused
    setattr(searcher, switch, True)
    assert searcher._exact_first(list(fused), query)[0][0] == moved
    deep = [(f"p{i}", 1.0 - i / 100, {}) for i in range(EXACT_DEPTH)] + [(moved, 0.1, {})]
    assert searcher._exact_first(list(deep), query) == deep          # only the top is reordered


def test_the_verbatim_page_comes_before_a_page_holding_the_identifier_only() -> None:
    texts = {"ref": "deployment/api and restart_policy", "note": "Set restart_policy to always, then kubectl rollout "
             "restart restart_policy pods.", "misc": "Nothing here."}
    index = Bm25Index.build(list(texts), [Analyzer().tokens(t) for t in texts.values()])
    sr = stub_searcher(_bm25=index, _bm25_pages=index, _note_of={k: k for k in texts},
                       _chunk_rows=lambda ids: {i: {"title": "", "breadcrumb": "", "text": texts[i]} for i in ids})
    fused = [("misc", 0.3, {}), ("ref", 0.2, {}), ("note", 0.1, {})]
    assert [p[0] for p in sr._exact_first(list(fused), "rollout restart restart_policy")] == ["note", "ref", "misc"]
    assert [p[0] for p in sr._exact_first(list(fused), "restart_policy")] == ["ref", "note", "misc"]
