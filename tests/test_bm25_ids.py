"""BM25 indexes built from token ids (the warehouse's path: texts' tokens as ids from the token cache, documents
gathered from pieces, pairs grouped by a radix sort) equal, byte for byte, the indexes of the token lists built the
way they were before: ``field_text`` per chunk, ``np.unique`` of term x document keys."""

from __future__ import annotations

import marshal
import math
from pathlib import Path

import numpy as np
import pytest

from pipeline.index.analysis import Analyzer, field_text
from pipeline.index.bm25 import (
    PAGE_PREFIX,
    Bm25Index,
    build_chunk_index,
    build_page_index,
    chunk_token_lists,
    page_labels,
    page_token_lists,
)
from pipeline.models import Chunk, Note
from pipeline.stages.warehouse import TokenCache, bm25_index_blobs, caching_analyzer


def _corpus() -> tuple[list[Note], list[Chunk]]:
    """Pages with aliases, a description, keywords and tags; a chunk without its note, an empty chunk text, chunks
    out of ordinal order, a text and a breadcrumb repeated, Japanese."""
    a = Note("s", "a.md", "a.md", "Reading Parquet", {"aliases": ["parquet files", 2024], "description":
                                                      "How to read_csv_auto and Parquet", "keywords": "io",
                                                      "tags": ["#format", True]}, "")
    b = Note("s", "b.md", "b.md", "検索機能", {"tags": "日本語"}, "")
    c = Note("s", "c.md", "c.md", "Empty", {}, "")
    chunks = [
        Chunk("a1", a.note_id, "s", 1, ("Usage",), "Reading Parquet > Usage", "Use read_parquet('x.parquet')."),
        Chunk("a0", a.note_id, "s", 0, (), "Reading Parquet", "Parquet is columnar. Parquet files are fast."),
        Chunk("b0", b.note_id, "s", 0, (), "検索機能", "全文検索とベクトル検索を使う。Parquet も読める。"),
        Chunk("x0", "no-such-note", "s", 0, ("Lost",), "Lost > Lost", "orphan chunk text"),
        Chunk("a2", a.note_id, "s", 2, ("Usage",), "Reading Parquet > Usage", ""),
        Chunk("c0", c.note_id, "s", 0, (), "Empty", "Use read_parquet('x.parquet')."),
    ]
    return [a, b, c], chunks


def _field_text_lists(chunks: list[Chunk], notes: list[Note], analyzer: Analyzer) -> list[list[str]]:
    """The chunk token lists as built before pieces: ``field_text`` of every chunk."""
    by_id = {n.note_id: n for n in notes}
    return [field_text(n.title, n.aliases, n.description, c.breadcrumb, c.text, keywords=page_labels(n),
                       analyzer=analyzer) if (n := by_id.get(c.note_id)) else
            field_text("", (), "", c.breadcrumb, c.text, analyzer=analyzer) for c in chunks]


def _unique_score_matrix(token_lists: list[list[str]], k1: float = 1.5, b: float = 0.75
                         ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The score matrix as built before the radix sort: ``np.unique`` of term x document keys."""
    n_docs = len(token_lists)
    words = [t for tokens in token_lists for t in tokens if t]
    lengths = np.array([sum(1 for t in tokens if t) for tokens in token_lists], dtype=np.int64)
    vocab = {t: i for i, t in enumerate(dict.fromkeys(words))}
    terms = np.array([vocab[t] for t in words], dtype=np.int64)
    docs = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    pairs, tf = np.unique(terms * n_docs + docs, return_counts=True)
    term, doc = np.divmod(pairs, n_docs)
    df = np.bincount(term, minlength=len(vocab))
    idf = np.array([math.log(1 + (n_docs - int(x) + 0.5) / (int(x) + 0.5)) for x in df], dtype=np.float32)
    tfs = tf.astype(np.float32).astype(np.float64)
    norm = k1 * ((1 - b) + b * lengths.astype(np.float64) / lengths.mean())
    data = (idf[term].astype(np.float64) * (tfs / (norm[doc] + tfs))).astype(np.float32)
    indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    return {"data": data, "indices": doc.astype(np.int32), "indptr": indptr}, vocab


def _assert_same_index(index: Bm25Index, token_lists: list[list[str]]) -> None:
    arrays, vocab = _unique_score_matrix(token_lists)
    assert index._vocab == vocab and list(index._vocab) == list(vocab)
    for name in ("data", "indices", "indptr"):
        got = getattr(index, f"_{name}")
        assert got.dtype == arrays[name].dtype and np.array_equal(got, arrays[name]), name


def test_token_lists_are_field_text_of_each_chunk_and_the_pages_fields_then_their_chunks():
    notes, chunks = _corpus()
    analyzer = Analyzer()
    assert chunk_token_lists(chunks, notes, analyzer) == _field_text_lists(chunks, notes, analyzer)
    ids, lists = page_token_lists(chunks, notes, analyzer)
    assert ids == [notes[0].note_id, notes[1].note_id, "no-such-note", notes[2].note_id]
    fields = ["read", "parquet", "parquet", "file", "2024", "how", "read_csv_auto", "read", "csv", "auto",
              "parquet", "io", "format", "true"]
    body = ["parquet", "columnar", "parquet", "file", "fast", "usag", "use", "read_parquet", "read", "parquet",
            "x.parquet", "x", "parquet"]
    # chunks by ordinal, each section heading once before the first chunk it heads; the empty chunk adds nothing
    assert lists[0] == fields + fields + body
    assert lists[2] == ["lost", "orphan", "chunk", "text"]
    assert lists[3] == ["empti", "empti", "use", "read_parquet", "read", "parquet", "x.parquet", "x", "parquet"]


@pytest.mark.parametrize("cached", [False, True])
def test_indexes_from_token_ids_equal_the_indexes_of_the_token_lists(tmp_path: Path, cached: bool):
    notes, chunks = _corpus()
    analyzer = caching_analyzer(TokenCache(tmp_path, "v1")) if cached else Analyzer()
    lists = _field_text_lists(chunks, notes, Analyzer())
    index = build_chunk_index(chunks, notes, analyzer)
    _assert_same_index(index, lists)
    assert index.to_blobs() == Bm25Index.build([c.chunk_id for c in chunks], lists).to_blobs()
    ids, page_lists = page_token_lists(chunks, notes, Analyzer())
    pages = build_page_index(chunks, notes, analyzer)
    _assert_same_index(pages, page_lists)
    assert pages.doc_ids == ids and pages.to_blobs() == Bm25Index.build(ids, page_lists).to_blobs()
    with pytest.raises(ValueError, match="unique"):
        build_chunk_index([*chunks, chunks[0]], notes, analyzer)


def test_score_matrix_groups_pairs_over_more_than_65536_terms():
    """Two radix passes (term columns past 2**16), empty tokens, an empty document, repeated tokens."""
    rng = np.random.default_rng(3)
    docs = [[f"t{int(x)}" for x in rng.zipf(1.05, size=rng.integers(0, 400))] for _ in range(600)]
    docs[7] = []
    docs[9] = ["", *docs[9], "", "t1", "t1"]
    docs.append([f"u{i}" for i in range(70_000)])
    index = Bm25Index.build([f"d{i}" for i in range(len(docs))], docs, k1=1.5, b=0.75)
    assert index.vocab_size > 70_000
    _assert_same_index(index, docs)


def test_warehouse_bm25_blobs_are_the_two_indexes_and_reuse_the_token_cache(tmp_path: Path):
    notes, chunks = _corpus()
    want = build_chunk_index(chunks, notes, Analyzer()).to_blobs()
    want.update({PAGE_PREFIX + k: v for k, v in build_page_index(chunks, notes, Analyzer()).to_blobs().items()})
    texts = {t for n in notes for t in (n.title, *n.aliases, n.description, *page_labels(n))}
    texts |= {t for c in chunks for t in (c.breadcrumb, c.text, *c.heading_path)}
    texts.discard("")
    assert bm25_index_blobs(TokenCache(tmp_path, "v1"), chunks, notes) == (want, 0, len(texts))
    assert bm25_index_blobs(TokenCache(tmp_path, "v1"), chunks, notes) == (want, len(texts), 0)
    # a forced build does not read the file (it could hold wrong but well-formed tokens): all analysed again
    assert bm25_index_blobs(TokenCache(tmp_path, "v1", fresh=True), chunks, notes) == (want, 0, len(texts))


def test_token_cache_keeps_only_the_terms_of_the_texts_used(tmp_path: Path):
    cache = TokenCache(tmp_path, "v1")
    analyzer = caching_analyzer(cache)
    assert analyzer.tokens("cats purr") == ["cat", "purr"] and analyzer.tokens("dogs bark") == ["dog", "bark"]
    cache.save()
    again = TokenCache(tmp_path, "v1")
    ids, lengths, terms = caching_analyzer(again).term_ids(["dogs bark", "", "dogs bark"])
    assert ids.tolist() == [2, 3, 2, 3] and lengths.tolist() == [2, 0, 2] and terms[2:4] == ["dog", "bark"]
    again.save()                                    # "cats purr" not used: its entry and its terms go
    saved = marshal.loads((tmp_path / "bm25" / "tokens-v1.ids.marshal").read_bytes())
    assert saved == {"terms": ["dog", "bark"],
                     "texts": {TokenCache.key("dogs bark"): np.array([0, 1], dtype="<i4").tobytes()}}
    last = TokenCache(tmp_path, "v1")
    assert caching_analyzer(last).tokens("dogs bark") == ["dog", "bark"] and (last.hits, last.misses) == (1, 0)
