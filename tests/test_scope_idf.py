"""A scoped search weighs BM25 terms by their rarity in the searched sources, not in every source built: adding
another source does not reorder a scoped search (English query); a Japanese query keeps the index-wide IDF."""

from __future__ import annotations

from pathlib import Path

from pipeline.search.searcher import Searcher
from tests.tiny_warehouse import publish_pages

DOCS = {
    ("docs", "one.md", "One"): ["alpha filler words here"],
    ("docs", "two.md", "Two"): ["beta filler words here"],
    ("docs", "three.md", "Three"): ["alpha other words here"],
    ("docs", "four.md", "Four"): ["gamma other words here"],
}
# "beta" is common in the other source, so over both sources "alpha" is the rarer term
OTHER = {("other", f"o{i}.md", f"O{i}"): [f"beta noise text {i}"] for i in range(8)}


def _order(path: Path, query: str, **attrs: object) -> list[str]:
    with Searcher(path) as s:
        for k, v in attrs.items():
            setattr(s, k, v)
        return [p for _, p, _ in s.rank_pages(query, source="docs", lanes=["bm25"])]


def test_scoped_ranking_does_not_depend_on_other_sources(tmp_path: Path):
    alone, both = tmp_path / "alone.duckdb", tmp_path / "both.duckdb"
    publish_pages(alone, DOCS)
    publish_pages(both, {**DOCS, **OTHER})
    # within docs, "beta" (1 of 4 pages) is rarer than "alpha" (2 of 4)
    assert _order(alone, "alpha beta") == ["two.md", "one.md", "three.md"]
    assert _order(both, "alpha beta") == ["two.md", "one.md", "three.md"]
    # counted over both sources (the previous behaviour) "beta" is common and "alpha" wins
    assert _order(both, "alpha beta", scope_idf=False) == ["one.md", "three.md", "two.md"]


def test_japanese_query_keeps_index_wide_idf(tmp_path: Path):
    both = tmp_path / "both.duckdb"
    publish_pages(both, {**DOCS, **OTHER})
    with Searcher(both, translator=None) as s:
        assert s._scope_idf_for("alpha beta") is True
        assert s._scope_idf_for("状態の管理") is False
