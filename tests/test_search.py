"""Hybrid search on a toy warehouse (HashEmbedder vectors + the real Analyzer for BM25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import warehouse as wh
from pipeline.common.errors import UnknownSourceError
from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import build_chunk_index
from pipeline.index.embed import HashEmbedder, embed_chunks
from pipeline.models import Chunk, Note
from pipeline.search.searcher import Searcher, make_snippet, page_ranking

PAGES = {
    ("guide", "install.md", "Installation"): [
        "Install docsvault with pip install docsvault.",
        "Upgrading an existing installation: run pip install with the upgrade flag.",
    ],
    ("guide", "search.md", "Searching"): [
        "Hybrid search combines BM25 keyword search and vector search.",
        "Filters restrict a search to one source.",
        "Snippets show the search terms in context.",
    ],
    ("guide", "graph.md", "Link graph"): ["The link graph counts wikilinks between notes and finds dangling links."],
    ("api", "connect.md", "connect"): ["connect opens the warehouse file read only."],
    ("api", "publish.md", "publish"): ["publish writes a new warehouse file and swaps it in atomically."],
    ("ja", "vector.md", "ベクトル検索"): ["ベクトル検索は埋め込みの類似度で文書を探します。"],
}


def _build(path: Path) -> None:
    notes, chunks = [], []
    for (source, rel, title), texts in PAGES.items():
        note = Note(source, rel, rel, title, {"title": title}, "\n\n".join(texts))
        notes.append(note)
        for i, text in enumerate(texts):
            chunks.append(Chunk(f"{note.note_id}-{i}", note.note_id, source, i, (f"Part {i}",),
                                f"{title} > Part {i}", text))
    embedder = HashEmbedder(64)
    res = embed_chunks(chunks, embedder, None)
    bm25 = build_chunk_index(chunks, notes, Analyzer())
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, vectors={embedder.model_id: (res.chunk_ids,
                                                                                                res.vectors)},
                                      bm25_blobs=bm25.to_blobs()))


class CountingFactory:
    def __init__(self) -> None:
        self.created: list[str] = []
        self.queries = 0

    def __call__(self, model_id: str):
        self.created.append(model_id)
        outer = self
        inner = HashEmbedder(int(model_id.split("-")[1]))

        class Counting(HashEmbedder):
            def embed_query(self, text):
                outer.queries += 1
                return inner.embed_query(text)

        return Counting(inner.dim)


@pytest.fixture(scope="module")
def searcher(tmp_path_factory):
    path = tmp_path_factory.mktemp("search") / "warehouse.duckdb"
    _build(path)
    factory = CountingFactory()
    s = Searcher(path, embedder_factory=factory)
    s.factory = factory  # type: ignore[attr-defined]
    yield s
    s.close()


def test_known_ranking(searcher: Searcher):
    hits = searcher.search("pip upgrade flag", k=10)
    assert [h.source_path for h in hits][:1] == ["install.md"]
    assert [h.source_path for h in hits].count("install.md") == 1      # one hit per note
    assert hits[0].context == "Install docsvault with pip install docsvault."   # its second chunk
    assert hits[0].title == "Installation" and hits[0].lanes == {"bm25": 1, "vector": 1}
    assert hits[0].score == pytest.approx(2 / 21)
    assert hits[0].heading == "Part 1"  # the upgrade chunk matches best
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert hits[0].vault_path == "guide/install.md" and hits[0].source == "guide"


def test_one_hit_per_note_so_k_counts_notes(searcher: Searcher):
    hits = searcher.search("search", k=10)
    paths = [h.source_path for h in hits]
    assert paths[0] == "search.md" and len(paths) == len(set(paths))
    assert len(searcher.search("search", k=3)) == 3
    assert hits[0].context and hits[0].context != hits[0].snippet


def test_at_most_two_chunks_per_page_when_asked(tmp_path_factory):
    path = tmp_path_factory.mktemp("search2") / "warehouse.duckdb"
    _build(path)
    with Searcher(path, embedder_factory=CountingFactory(), chunks_per_page=2) as s:
        hits = s.search("search", k=10)
    paths = [h.source_path for h in hits]
    assert paths[:2] == ["search.md", "search.md"]
    assert paths.count("search.md") == 2
    assert len({h.chunk_id for h in hits}) == len(hits)
    assert all(h.context == "" for h in hits)


def test_k_truncates_hits(searcher: Searcher):
    assert len(searcher.search("search", k=1)) == 1
    with pytest.raises(ValueError):
        searcher.search("search", k=0)


def test_source_filter(searcher: Searcher):
    hits = searcher.search("warehouse file", k=10, source="api")
    assert {h.source for h in hits} == {"api"}
    assert {h.source_path for h in hits} == {"connect.md", "publish.md"}
    both = searcher.search("warehouse file search", k=10, source=["api", "guide"])
    assert {h.source for h in both} <= {"api", "guide"}
    guide = searcher.search("warehouse file search", k=10, source="guide")
    assert guide and {h.source for h in guide} == {"guide"}


def test_unknown_source_names_known_ones(searcher: Searcher):
    with pytest.raises(UnknownSourceError, match="'nope'.*api, guide, ja"):
        searcher.search("anything", source="nope")


def test_empty_query(searcher: Searcher):
    assert searcher.search("") == []
    assert searcher.search("   \n") == []
    assert searcher.rank_pages("  ") == []


def test_single_lanes(searcher: Searcher):
    bm25 = searcher.search("dangling wikilinks", lanes=("bm25",))
    assert bm25[0].source_path == "graph.md" and set(bm25[0].lanes) == {"bm25"}
    assert bm25[0].score == pytest.approx(1 / 21)
    vec = searcher.search("dangling wikilinks", lanes=("vector",))
    assert vec[0].source_path == "graph.md" and set(vec[0].lanes) == {"vector"}
    with pytest.raises(ValueError, match="unknown lanes"):
        searcher.search("x", lanes=("fts",))


def test_japanese_query(searcher: Searcher):
    hits = searcher.search("ベクトル検索", lanes=("bm25",))
    assert hits[0].source_path == "vector.md"
    # the dictionary translation ("vector ... search ...") also reaches the English pages that speak of search
    assert "search.md" in [h.source_path for h in hits]
    searcher.translate_bm25 = False
    try:
        assert [h.source_path for h in searcher.search("ベクトル検索", lanes=("bm25",))] == ["vector.md"]
    finally:
        searcher.translate_bm25 = True


def test_rank_pages(searcher: Searcher):
    pages = searcher.rank_pages("pip install upgrade", source="guide", depth=2)
    assert len(pages) <= 2
    assert pages[0][1] == "install.md" and pages[0][2] == pytest.approx(2 / 21)


def test_query_embedded_once_per_model(searcher: Searcher):
    factory = searcher.factory  # type: ignore[attr-defined]
    before = factory.queries
    searcher.search("publish atomically")
    assert factory.queries == before + 1
    assert factory.created == ["hash-64"]  # one embedder for the one model table, created once
    searcher.search("publish atomically", lanes=["vector"])          # a repeated query: its vector is remembered
    searcher.rank_pages("publish atomically")
    assert factory.queries == before + 1


def test_page_ranking_best_plus_tenth_of_second():
    note_of = {"a1": "A", "a2": "A", "b1": "B", "c1": "C"}.__getitem__
    pages = page_ranking([("b1", 1.0), ("a1", 0.95), ("a2", 0.6), ("c1", 0.2)], note_of)
    assert [(p.note_id, round(p.score, 6), p.chunks) for p in pages] == [
        ("A", 1.01, ["a1", "a2"]), ("B", 1.0, ["b1"]), ("C", 0.2, ["c1"])]


def test_make_snippet():
    text = ("intro words " * 40) + "the Configuration of things " + ("tail words " * 40)
    snip = make_snippet(text, "configure the app", extra_terms=["configur"])
    assert "Configuration" in snip and snip.startswith("…") and snip.endswith("…")
    assert len(snip) <= 242
    assert make_snippet("short\ntext", "x") == "short text"
    assert make_snippet("a " * 300, "zzz").startswith("a a")
    ja = "前置き" * 100 + "ベクトル検索の説明" + "後書き" * 100
    assert "ベクトル検索" in make_snippet(ja, "ベクトル検索")


def _graph_warehouse(path: Path) -> None:
    """hub.md links to a.md and b.md; a.md links to b.md; index.md (docsvault: index) links to all."""
    from pipeline.models import Edge

    specs = {
        "hub.md": ("Hub", "The hub talks about otters and rivers.", {}),
        "a.md": ("Alpha", "Alpha covers beavers building dams.", {}),
        "b.md": ("Beta", "Beta is about something unrelated: tea ceremonies.", {}),
        "index.md": ("Index", "Index of otters beavers tea.", {"docsvault": "index"}),
        "kw.md": ("Gamma", "Plain text without the label.", {"keywords": ["zeppelin"], "tags": ["#airship"]}),
    }
    notes, chunks = [], []
    for rel, (title, text, extra) in specs.items():
        note = Note("g", rel, rel, title, {"title": title, **extra}, text)
        notes.append(note)
        chunks.append(Chunk(f"{note.note_id}-0", note.note_id, "g", 0, (), title, text))
    nid = {n.rel_path: n.note_id for n in notes}
    edges = [Edge(nid["hub.md"], nid["a.md"], "Alpha", "wikilink"), Edge(nid["hub.md"], nid["b.md"], "Beta", "wikilink"),
             Edge(nid["a.md"], nid["b.md"], "Beta", "wikilink")]
    edges += [Edge(nid["index.md"], nid[r], r, "wikilink") for r in ("hub.md", "a.md", "b.md")]
    embedder = HashEmbedder(64)
    res = embed_chunks(chunks, embedder, None)
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, edges=edges,
                                      vectors={embedder.model_id: (res.chunk_ids, res.vectors)},
                                      bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs()))


def test_graph_lane_expands_one_hop_and_skips_index_notes(tmp_path: Path):
    path = tmp_path / "g.duckdb"
    _graph_warehouse(path)
    with Searcher(path, embedder_factory=lambda m: HashEmbedder(64)) as s:
        default = [h.source_path for h in s.search("otters rivers", k=10)]
        assert "index.md" not in default                      # index notes are never results
        assert default[0] == "hub.md"
        with_graph = s.search("otters rivers", k=10, lanes=("bm25", "graph"))
        paths = [h.source_path for h in with_graph]
        assert set(paths) == {"hub.md", "a.md", "b.md"}      # the seed and its one-hop neighbours, no index note
        beta = next(h for h in with_graph if h.source_path == "b.md")
        assert set(beta.lanes) == {"graph"}                   # reached only through the graph lane
        assert beta.snippet.startswith("Beta is about")       # a graph-only page shows its first chunk


def test_keywords_and_tags_are_bm25_fields(tmp_path: Path):
    path = tmp_path / "g.duckdb"
    _graph_warehouse(path)
    with Searcher(path, embedder_factory=lambda m: HashEmbedder(64)) as s:
        assert [h.source_path for h in s.search("zeppelin", k=3, lanes=("bm25",))] == ["kw.md"]
        assert [h.source_path for h in s.search("airship", k=3, lanes=("bm25",))] == ["kw.md"]


def test_exact_vector_lane_equals_brute_force_and_hnsw_path(tmp_path: Path):
    """The in-memory exact scan (default below EXACT_MAX_ROWS) ranks chunks exactly as the warehouse's brute-force
    scan, with the source filter applied before ranking; the HNSW path (exact_max_rows=0) finds the same pages on a
    toy corpus."""
    import numpy as np

    path = tmp_path / "warehouse.duckdb"
    _build(path)
    factory = CountingFactory()
    with Searcher(path, embedder_factory=factory) as exact, \
            Searcher(path, embedder_factory=factory, exact_max_rows=0) as hnsw:
        table = exact.models[0]["table_name"]
        for query in ("warehouse file", "search filters", "ベクトル検索"):
            q = factory(exact.models[0]["model_id"]).embed_query(query)
            kept = exact._exact_knn(table, q, None, None)
            con = wh.connect(path, read_only=True)
            try:
                brute = wh.brute_force_search(con, table, q, 100)
            finally:
                con.close()
            assert [c for c, _ in kept] == [c for c, _ in brute]
            assert np.allclose([s for _, s in kept], [1.0 - d for _, d in brute], atol=1e-5)
            only_api = exact._exact_knn(table, q, frozenset({"api"}), None)
            assert [c for c, _ in only_api] == [c for c, _ in brute if exact._source_of[c] == "api"]
            for source in (None, "guide"):   # same pages (tied scores of the toy vectors may order differently)
                assert ({p for p, *_ in exact.rank_pages(query, source=source, lanes=["vector"])}
                        == {p for p, *_ in hnsw.rank_pages(query, source=source, lanes=["vector"])})


def test_one_huge_page_cannot_crowd_the_others_out_of_a_lane(tmp_path: Path):
    """A 4,100-chunk page (more than the old 4,000-chunk fetch cap) matching the query everywhere still leaves room for every other matching page in both
    lanes (at most PER_PAGE_IN_LANE chunks per page, however many score high)."""
    import numpy as np

    from pipeline.search.searcher import PER_PAGE_IN_LANE, top_per_page

    notes, chunks = [], []
    pages = {"huge.md": [f"platypus section {i} platypus platypus" for i in range(4100)],
             "a.md": ["a platypus lives here"], "b.md": ["one platypus"], "c.md": ["platypus facts"]}
    for rel, texts in pages.items():
        note = Note("zoo", rel, rel, rel[:-3], {"title": rel[:-3]}, "\n\n".join(texts))
        notes.append(note)
        chunks += [Chunk(f"{note.note_id}-{i:04d}", note.note_id, "zoo", i, (f"S{i}",), f"{rel} > S{i}", t)
                   for i, t in enumerate(texts)]
    embedder = HashEmbedder(64)
    res = embed_chunks(chunks, embedder, None)
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, vectors={embedder.model_id: (res.chunk_ids,
                                                                                                res.vectors)},
                                      bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs()))
    with Searcher(path, embedder_factory=CountingFactory(), lane_depth=20) as s:
        for lane in ("bm25", "vector"):
            assert {p for _, p, _ in s.rank_pages("platypus", lanes=[lane])} == set(pages), lane
        hits = s.search("platypus", k=10)
        assert [h.source_path for h in hits].count("huge.md") == 1      # one hit per note
        assert {h.source_path for h in hits} == set(pages)
    # the helper itself: 3 per page, depth 5, ties by position
    scores = np.array([9, 8, 7, 6, 5, 4, 1], dtype=np.float32)
    page_of = np.array([0, 0, 0, 0, 1, 2, 1])
    assert top_per_page(scores, page_of, 5, per_page=3).tolist() == [0, 1, 2, 4, 5]
    assert top_per_page(scores, page_of, 10, per_page=1, candidates=np.array([1, 4, 6])).tolist() == [1, 4]
    assert PER_PAGE_IN_LANE == 5


def test_a_pasted_long_text_is_ranked_on_its_first_max_query_chars(searcher: Searcher):
    from pipeline.search.searcher import MAX_QUERY_CHARS, clip_query

    assert clip_query("short query") == "short query"
    words = ("publish warehouse atomically " * 200).strip()          # 5,999 characters
    clipped = clip_query(words)
    assert len(clipped) <= MAX_QUERY_CHARS and words.startswith(clipped) and not clipped.endswith(" ")
    assert clip_query("x" * 2500) == "x" * MAX_QUERY_CHARS             # no space near the end: a hard cut
    long = words + " " + "otterwombat " * 10_000
    assert [h.vault_path for h in searcher.search(long, k=3)] == [h.vault_path for h in searcher.search(clipped, k=3)]
    assert searcher.rank_pages(long) == searcher.rank_pages(clipped)


def test_invisible_characters_of_a_pasted_query_are_dropped(searcher: Searcher):
    """`Excel\\u200bの読み込み` (a zero-width space from a web page) searched as two words no note has together."""
    from pipeline.search.searcher import clip_query

    assert clip_query("Excel\u200bの読み込み\u2060\ufeff") == "Excelの読み込み"
    assert clip_query("pub\u00adlish") == "publish"
    assert clip_query("#👨\u200d💻") == "#👨\u200d💻"                    # the zero-width joiner holds an emoji
    assert searcher.rank_pages("publish ware\u200bhouse") == searcher.rank_pages("publish warehouse")
    assert [h.snippet for h in searcher.search("publish ware\u200bhouse", k=2)] == [
        h.snippet for h in searcher.search("publish warehouse", k=2)]


def test_invisible_characters_in_a_phrase_are_dropped() -> None:
    from pipeline.search.query import parse_query

    assert parse_query('"ware\u200bhouse" tag:日\u200b記').required == parse_query('"warehouse" tag:日記').required
    assert parse_query('"ware\u200bhouse" tag:日\u200b記').tags == ("日記",)
