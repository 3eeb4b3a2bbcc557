"""BM25 index over token lists: known rankings, masks, blob round-trip."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.common.errors import WarehouseCorruptError
from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import Bm25Index, build_chunk_index, chunk_token_lists
from pipeline.models import Chunk, Note

IDS = ["cat", "dog", "bird", "fish", "empty"]
DOCS = [
    ["a", "cat", "is", "a", "feline", "and", "likes", "to", "purr"],
    ["a", "dog", "is", "the", "human's", "best", "friend", "and", "loves", "to", "play"],
    ["a", "bird", "is", "a", "beautiful", "animal", "that", "can", "fly"],
    ["a", "fish", "is", "a", "creature", "that", "lives", "in", "water", "and", "swims"],
    [],
]


@pytest.fixture(scope="module")
def index() -> Bm25Index:
    return Bm25Index.build(IDS, DOCS)


def test_known_ranking(index: Bm25Index):
    hits = index.search(["does", "the", "fish", "purr", "like", "a", "cat"], k=5)
    # cat: "cat"+"purr"+"a"x2; fish: rare "fish"+"a"x2; dog: rare "the"; bird: only the common "a"; empty: nothing
    assert [d for d, _ in hits] == ["cat", "fish", "dog", "bird"]
    assert all(s > 0 for _, s in hits)


def test_only_positive_scores_and_k(index: Bm25Index):
    assert [d for d, _ in index.search(["purr"], k=10)] == ["cat"]
    assert index.search(["unknown", "words"], k=3) == []
    assert index.search([], k=3) == []
    assert len(index.search(["a"], k=2)) == 2


def test_mask_excludes_documents(index: Bm25Index):
    mask = np.array([False, True, True, True, True])
    assert [d for d, _ in index.search(["cat", "fish"], k=5, mask=mask)] == ["fish"]
    with pytest.raises(ValueError, match="mask has 2 entries for 5 documents"):
        index.search(["cat"], k=5, mask=np.array([True, False]))


def test_scores_are_lucene_bm25(index: Bm25Index):
    # one term, tf=1 in a 9-token doc; avgdl = 40/5 = 8; N=5, df=1
    idf = np.log(1 + (5 - 1 + 0.5) / (1 + 0.5))
    tf_part = 1 / (1 + 1.5 * (1 - 0.75 + 0.75 * 9 / 8))
    assert index.search(["purr"], k=1)[0][1] == pytest.approx(idf * tf_part, rel=1e-5)


def test_round_trip_blobs(index: Bm25Index):
    blobs = index.to_blobs()
    assert set(blobs) == {"data", "indices", "indptr", "vocab", "doc_ids", "params"}
    assert all(isinstance(v, bytes) for v in blobs.values())
    again = Bm25Index.from_blobs(blobs)
    for q in (["cat"], ["a", "fish", "that", "swims"], ["play", "fly"]):
        assert again.search(q, k=5) == index.search(q, k=5)
    assert again.doc_ids == IDS


def test_corrupt_blobs_raise():
    blobs = Bm25Index.build(IDS, DOCS).to_blobs()
    del blobs["vocab"]
    with pytest.raises(WarehouseCorruptError, match="docsvault build"):
        Bm25Index.from_blobs(blobs)


def test_build_errors_and_empty_corpus():
    with pytest.raises(ValueError, match="2 doc ids but 1 token lists"):
        Bm25Index.build(["a", "b"], [["x"]])
    with pytest.raises(ValueError, match="unique"):
        Bm25Index.build(["a", "a"], [["x"], ["y"]])
    empty = Bm25Index.build(["a", "b"], [[], []])
    assert empty.search(["x"], k=3) == []
    assert Bm25Index.from_blobs(empty.to_blobs()).search(["x"], k=3) == []
    nothing = Bm25Index.build([], [])
    assert nothing.search(["x"], k=1) == [] and len(Bm25Index.from_blobs(nothing.to_blobs())) == 0


def test_chunk_index_weights_page_fields():
    notes = [
        Note("s", "a.md", "a.md", "Installing", {"aliases": ["setup"]}, "body"),
        Note("s", "b.md", "b.md", "Other page", {}, "body"),
    ]
    chunks = [
        Chunk("ca", notes[0].note_id, "s", 0, (), "Installing", "run the installer"),
        Chunk("cb", notes[1].note_id, "s", 0, ("Setup",), "Other page > Setup", "setup once"),
    ]
    analyzer = Analyzer()
    lists = chunk_token_lists(chunks, notes, analyzer)
    # title and alias appear twice in front of the chunk text
    assert lists[0].count(analyzer.tokens("setup")[0]) == 2
    index = build_chunk_index(chunks, notes, analyzer)
    assert [d for d, _ in index.search(analyzer.tokens("installing"), k=2)] == ["ca"]


def test_scores_in_scope_count_idf_within_the_scope():
    """A term rare in the scope but common elsewhere weighs as rare: with documents of equal length (so the average
    length, which stays the whole index's, is the same), the scoped scores are those of an index of the scope
    alone, and documents outside the scope score 0."""
    ids = ["s1", "s2", "s3", "o1", "o2", "o3"]
    docs = [["alpha", "beta"], ["alpha", "gamma"], ["delta", "gamma"],
            ["beta", "zeta"], ["beta", "eta"], ["beta", "theta"]]
    whole = Bm25Index.build(ids, docs)
    alone = Bm25Index.build(ids[:3], docs[:3])
    scope = np.array([True, True, True, False, False, False])
    query = ["alpha", "beta", "omega"]
    scoped = whole.scores_in_scope(query, scope)
    np.testing.assert_allclose(scoped[:3], alone.scores(query), rtol=1e-6)
    assert scoped[3:].tolist() == [0.0, 0.0, 0.0]
    # "beta" is in 4 of 6 documents, 1 of the scope's 3: it weighs more in the scope
    assert whole.scores_in_scope(["beta"], scope)[0] > whole.scores(["beta"])[0]
    everything = np.ones(6, dtype=bool)
    assert whole.scores_in_scope(query, everything).tolist() == whole.scores(query).tolist()
