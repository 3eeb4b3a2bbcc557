"""A query's code identifiers are looked up exactly (pipeline.search.searcher.Searcher._exact_first).

A Dagster user's mixed vault (helper s37-nu1): `search minimum_interval_seconds` ranked the only English note holding
it #1 in bm25, bm25_page and vector, yet after two Japanese pages without it that the cross-lingual lane voted for
(0.119 against 0.142). Among the fused top 30, the pages that hold every identifier of the query now come first,
their scores raised alike so that scores stay in order; `search --explain` shows the raise as `exact`."""

from __future__ import annotations

import pytest

from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import Bm25Index
from pipeline.search.searcher import Searcher

PAGES = {
    "ja-1": "スケジュールの間隔を設定する。schedule の interval を秒で指定します。",
    "ja-2": "デプロイメントの最小間隔についての説明。",
    "note": "Set minimum_interval_seconds on the sensor so it does not run more often than that.",
    "both": "minimum_interval_seconds and default_status of a sensor.",
    "other": "Sensors and schedules.",
}


def stub_searcher(**attributes: object) -> Searcher:
    """A Searcher with only the analyzer and ``attributes`` (what ``_exact_first`` reads), both lookups on."""
    sr = Searcher.__new__(Searcher)
    sr.analyzer = Analyzer()
    sr._query_token_memo = (None, {})
    sr.exact_identifiers = sr.exact_phrases = True
    for name, value in attributes.items():
        setattr(sr, name, value)
    return sr


def identifier_searcher() -> Searcher:
    """A page index over PAGES; the verbatim lookup (tests/test_exact_phrases.py) off."""
    return stub_searcher(_bm25_pages=Bm25Index.build(list(PAGES), [Analyzer().tokens(t) for t in PAGES.values()]),
                         exact_phrases=False)


@pytest.fixture
def searcher() -> Searcher:
    return identifier_searcher()


FUSED = [("ja-1", 0.142, {"crosslingual": 1}), ("ja-2", 0.141, {"crosslingual": 2}),
         ("note", 0.119, {"bm25": 1}), ("other", 0.05, {"bm25": 9}), ("both", 0.04, {"bm25": 12})]


def test_pages_holding_the_identifier_come_first_with_scores_in_order(searcher: Searcher) -> None:
    out = searcher._exact_first(list(FUSED), "minimum_interval_seconds")
    assert [p[0] for p in out] == ["note", "both", "ja-1", "ja-2", "other"]
    lift = 0.142 - 0.04 + 1e-9                   # the least that puts the lowest moved page above every other
    assert [round(p[1], 12) for p in out] == [round(s, 12) for s in (0.119 + lift, 0.04 + lift, 0.142, 0.141, 0.05)]
    assert [p[1] for p in out] == sorted((p[1] for p in out), reverse=True)
    assert out[0][2] == {"bm25": 1}                                      # lane ranks kept


def test_every_identifier_of_the_query_is_needed(searcher: Searcher) -> None:
    out = searcher._exact_first(list(FUSED), "minimum_interval_seconds default_status sensor")
    assert [p[0] for p in out] == ["both", "ja-1", "ja-2", "note", "other"]


@pytest.mark.parametrize("query", ["how often does a sensor run", "unknown_identifier_xyz", "Sensors"])
def test_a_query_without_an_identifier_the_pages_hold_changes_nothing(searcher: Searcher, query: str) -> None:
    assert searcher._exact_first(list(FUSED), query) == FUSED


def test_explain_shows_the_raise_as_exact(searcher: Searcher) -> None:
    from pipeline.cli import _explain_line, explain_parts
    from pipeline.models import Hit
    from pipeline.search.searcher import DEFAULT_WEIGHTS, K_RRF

    searcher.weights, searcher.k_rrf, searcher.default_lanes = dict(DEFAULT_WEIGHTS), K_RRF, ("bm25", "vector")
    hit = Hit(rank=1, source="s", source_path="n.md", vault_path="s/n.md", title="n", heading="", score=1 / 21 + 0.05,
              snippet="", lanes={"bm25": 1})
    assert explain_parts(hit, searcher) == {"bm25": {"rank": 1, "weight": 1.0, "score": 0.047619},
                                            "exact": {"score": 0.05}}
    assert _explain_line(hit, searcher) == ("explain: bm25 #1 (1/(20+1)=0.0476) + vector - + exact match first 0.0500 "
                                            "= 0.0976")
    plain = Hit(rank=1, source="s", source_path="n.md", vault_path="s/n.md", title="n", heading="", score=1 / 21,
                snippet="", lanes={"bm25": 1})
    assert "exact" not in explain_parts(plain, searcher)
