"""Embedders and the embedding cache (HashEmbedder; one integration test with the bundled MiniLM)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.common.errors import EmbeddingError
from pipeline.index.embed import (
    EmbeddingCache,
    HashEmbedder,
    SentenceTransformerEmbedder,
    embed_chunks,
    load_embedder,
    model_slug,
)
from pipeline.models import Chunk


def _chunk(i: int, text: str) -> Chunk:
    return Chunk(chunk_id=f"c{i}", note_id="n", source="s", ordinal=i, heading_path=("H",), breadcrumb="T > H",
                 text=text)


CHUNKS = [_chunk(i, f"chunk number {i} about topic {i % 3}") for i in range(10)]


class Calls:
    def __init__(self, inner: HashEmbedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.max_tokens = inner.max_tokens
        self.batches: list[int] = []

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def embed_documents(self, texts):
        self.batches.append(len(texts))
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        return self.inner.embed_query(text)


def test_hash_embedder_is_deterministic_and_normalised():
    e = HashEmbedder(64)
    a = e.embed_documents(["alpha beta", "gamma", ""])
    assert a.shape == (3, 64) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(a[0], HashEmbedder(64).embed_query("Alpha BETA"))
    assert e.model_id == "hash-64"
    assert e.count_tokens("a b  c") == 3


def test_load_embedder_specs():
    assert load_embedder("hash").dim == 384
    assert load_embedder("hash:16").model_id == "hash-16"
    assert load_embedder("hash-16").dim == 16
    st = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    assert st.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert st._model is None  # constructing is cheap: nothing loaded yet
    assert load_embedder("sentence-transformers/all-MiniLM-L6-v2").model_id == st.model_id   # ONNX or torch
    assert load_embedder("all-MiniLM-L6-v2").model_id == "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
    with pytest.raises(EmbeddingError, match="hash:<dim>"):
        load_embedder("hash:x")
    with pytest.raises(EmbeddingError):
        load_embedder("  ")


def test_model_slug():
    assert model_slug("sentence-transformers/all-MiniLM-L6-v2") == "sentence_transformers_all_minilm_l6_v2"
    assert len(model_slug("x" * 100)) == 60


def test_cache_hit_on_second_call(tmp_path: Path):
    e = Calls(HashEmbedder(32))
    cache = EmbeddingCache(tmp_path, e.model_id)
    first = embed_chunks(CHUNKS, e, cache, batch_size=4)
    assert (first.n_embedded, first.n_cached) == (10, 0)
    assert first.chunk_ids == [c.chunk_id for c in CHUNKS]
    assert first.vectors.shape == (10, 32) and first.vectors.dtype == np.float32
    # a fresh cache object reads the shards from disk
    second = embed_chunks(CHUNKS, e, EmbeddingCache(tmp_path, e.model_id), batch_size=4)
    assert (second.n_embedded, second.n_cached) == (0, 10)
    np.testing.assert_array_equal(first.vectors, second.vectors)
    assert e.batches == [4, 4, 2]


def test_one_changed_chunk_is_the_only_one_embedded(tmp_path: Path):
    e = HashEmbedder(32)
    embed_chunks(CHUNKS, e, EmbeddingCache(tmp_path, e.model_id))
    changed = list(CHUNKS)
    changed[3] = _chunk(3, "completely new text")
    res = embed_chunks(changed, e, EmbeddingCache(tmp_path, e.model_id))
    assert (res.n_embedded, res.n_cached) == (1, 9)
    np.testing.assert_array_equal(res.vectors[3], e.embed_documents([changed[3].embed_text])[0])


def test_vectors_follow_chunk_order_and_duplicates_embed_once(tmp_path: Path):
    e = Calls(HashEmbedder(16))
    chunks = [_chunk(0, "same"), _chunk(1, "other words here"), _chunk(2, "same")]
    res = embed_chunks(chunks, e, None)
    assert res.n_embedded == 2 and sum(e.batches) == 2
    np.testing.assert_array_equal(res.vectors[0], res.vectors[2])
    np.testing.assert_array_equal(res.vectors[1], e.inner.embed_documents([chunks[1].embed_text])[0])


def test_one_shard_written_per_batch_with_progress(tmp_path: Path):
    e = HashEmbedder(8)
    cache = EmbeddingCache(tmp_path, e.model_id)
    seen: list[tuple[int, int]] = []
    embed_chunks(CHUNKS, e, cache, batch_size=3, progress=lambda d, t: seen.append((d, t)))
    assert [p.name for p in cache.shards()] == ["shard-0.npz", "shard-1.npz", "shard-2.npz", "shard-3.npz"]
    assert cache.dir == tmp_path / "hash_8"
    assert seen == [(0, 10), (3, 10), (6, 10), (9, 10), (10, 10)]
    assert not [p for p in cache.dir.iterdir() if p.name.startswith(".")]  # no temp files left


def test_a_shard_never_replaces_one_a_concurrent_writer_placed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache = EmbeddingCache(tmp_path, "hash-4")
    cache.put_many(["a"], np.ones((1, 4), dtype=np.float32))
    theirs = (cache.dir / "shard-0.npz").read_bytes()
    monkeypatch.setattr(cache, "shards", list)      # it picks shard-0 as another writer takes it
    cache.put_many(["b"], np.zeros((1, 4), dtype=np.float32))
    assert sorted(p.name for p in cache.dir.iterdir()) == ["shard-0.npz", "shard-1.npz"]   # no temp files left
    assert (cache.dir / "shard-0.npz").read_bytes() == theirs
    monkeypatch.undo()
    fresh = EmbeddingCache(tmp_path, "hash-4")
    assert {h: v.tolist() for h, v in fresh.get_many(["a", "b"]).items()} == {"a": [1.0] * 4, "b": [0.0] * 4}


def test_exclusive_atomic_write_refuses_an_existing_file(tmp_path: Path):
    from pipeline.common.artifacts import write_atomic, write_atomic_with

    path = tmp_path / "sub" / "f.bin"
    write_atomic(path, b"first")
    with pytest.raises(FileExistsError):
        write_atomic_with(path, lambda fh: fh.write(b"second"), exclusive=True)
    assert path.read_bytes() == b"first" and [p.name for p in path.parent.iterdir()] == ["f.bin"]
    write_atomic_with(tmp_path / "g.bin", lambda fh: fh.write(b"new"), exclusive=True)
    assert (tmp_path / "g.bin").read_bytes() == b"new"


def test_crash_after_some_batches_keeps_finished_ones(tmp_path: Path):
    class Dies(Calls):
        def embed_documents(self, texts):
            if len(self.batches) == 2:
                raise KeyboardInterrupt  # stands in for a kill mid-run
            return super().embed_documents(texts)

    e = Dies(HashEmbedder(8))
    with pytest.raises(KeyboardInterrupt):
        embed_chunks(CHUNKS, e, EmbeddingCache(tmp_path, e.model_id), batch_size=4)
    res = embed_chunks(CHUNKS, HashEmbedder(8), EmbeddingCache(tmp_path, e.model_id), batch_size=4)
    assert (res.n_embedded, res.n_cached) == (2, 8)


def test_unreadable_shard_is_ignored(tmp_path: Path, caplog):
    e = HashEmbedder(8)
    cache = EmbeddingCache(tmp_path, e.model_id)
    embed_chunks(CHUNKS[:4], e, cache)
    (cache.dir / "shard-7.npz").write_bytes(b"not a zip file")
    res = embed_chunks(CHUNKS[:4], e, EmbeddingCache(tmp_path, e.model_id))
    assert (res.n_embedded, res.n_cached) == (0, 4)
    assert "ignoring unreadable shard" in caplog.text


def test_compact_merges_when_more_than_20_shards(tmp_path: Path):
    e = HashEmbedder(8)
    cache = EmbeddingCache(tmp_path, e.model_id)
    for i in range(21):
        cache.put_many([f"h{i}"], e.embed_documents([f"text {i}"]))
    assert len(cache.shards()) == 21
    assert cache.compact() is True
    assert len(cache.shards()) == 1
    fresh = EmbeddingCache(tmp_path, e.model_id)
    got = fresh.get_many([f"h{i}" for i in range(21)] + ["absent"])
    assert len(got) == 21
    np.testing.assert_array_equal(got["h5"], e.embed_documents(["text 5"])[0])
    assert fresh.compact() is False


def test_cache_of_another_model_is_refused(tmp_path: Path):
    with pytest.raises(EmbeddingError, match="hash-8"):
        embed_chunks(CHUNKS, HashEmbedder(8), EmbeddingCache(tmp_path, "hash-16"))


@pytest.mark.integration
def test_bundled_minilm():
    e = SentenceTransformerEmbedder("all-MiniLM-L6-v2")      # the torch path (ONNX: tests/test_embed_onnx.py)
    assert e.count_tokens("hello world") == 4
    assert e.max_tokens == 256
    vecs = e.embed_documents(["a short text", "a much longer text " * 20, "hello world"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    q = e.embed_query("hello world")
    assert e.dim == 384 and q.shape == (384,)
    np.testing.assert_allclose(q, vecs[2], atol=1e-5)  # order restored after length sorting


def test_compact_keeps_the_large_oldest_shard_and_merges_the_small_later_ones(tmp_path: Path):
    e = HashEmbedder(8)
    cache = EmbeddingCache(tmp_path, e.model_id)
    cache.put_many([f"base{i}" for i in range(1000)], e.embed_documents([f"base {i}" for i in range(1000)]))
    base = (cache.dir / "shard-0.npz").read_bytes()
    for i in range(20):                 # an edited text is embedded again: the later vector must keep winning
        cache.put_many([f"h{i}", "base3"], np.full((2, 8), float(i), dtype=np.float32))
    assert cache.compact() is True
    assert [p.name for p in cache.shards()] == ["shard-0.npz", "shard-21.npz"]
    assert (cache.dir / "shard-0.npz").read_bytes() == base
    fresh = EmbeddingCache(tmp_path, e.model_id)
    got = fresh.get_many([f"h{i}" for i in range(20)] + ["base3", "base7"])
    assert {h: float(v[0]) for h, v in got.items() if h.startswith("h")} == {f"h{i}": float(i) for i in range(20)}
    assert got["base3"].tolist() == [19.0] * 8
    np.testing.assert_array_equal(got["base7"], e.embed_documents(["base 7"])[0])


def test_take_gathers_the_found_vectors_in_the_order_asked(tmp_path: Path):
    cache = EmbeddingCache(tmp_path, "hash-2")
    cache.put_many(["a", "b"], np.array([[1, 1], [2, 2]], dtype=np.float32))
    cache.put_many(["c", "a"], np.array([[3, 3], [4, 4]], dtype=np.float32))
    positions, vectors = EmbeddingCache(tmp_path, "hash-2").take(["c", "absent", "a", "b"])
    assert positions.tolist() == [0, 2, 3]
    assert vectors.tolist() == [[3.0, 3.0], [4.0, 4.0], [2.0, 2.0]] and vectors.dtype == np.float32
    nothing = EmbeddingCache(tmp_path, "hash-2").take(["absent"])
    assert nothing[0].tolist() == [] and nothing[1].shape == (0, 0)


def test_take_gathers_block_by_block_and_from_one_shard_directly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(EmbeddingCache, "_TAKE_BLOCK", 3)              # blocks of 3 rows: several per shard
    cache = EmbeddingCache(tmp_path, "hash-1")
    cache.put_many([f"x{i}" for i in range(10)], np.arange(10, dtype=np.float32).reshape(10, 1))
    only_first = EmbeddingCache(tmp_path, "hash-1").take(["x9", "x0", "x9", "x4"])     # one shard, a repeat
    assert only_first[0].tolist() == [0, 1, 2, 3] and only_first[1].ravel().tolist() == [9.0, 0.0, 9.0, 4.0]
    cache.put_many(["x3", "y"], np.array([[30], [40]], dtype=np.float32))          # a later shard wins for x3
    asked = ["y", "x1", "x3", "nope", "x8", "x3", "x2", "x5", "x7"]
    positions, vectors = EmbeddingCache(tmp_path, "hash-1").take(asked)
    assert positions.tolist() == [0, 1, 2, 4, 5, 6, 7, 8]
    assert vectors.ravel().tolist() == [40.0, 1.0, 30.0, 8.0, 30.0, 2.0, 5.0, 7.0]


def test_take_refuses_shards_of_different_dims(tmp_path: Path):
    cache = EmbeddingCache(tmp_path, "hash-2")
    cache.put_many(["a"], np.ones((1, 2), dtype=np.float32))
    cache.put_many(["b"], np.ones((1, 3), dtype=np.float32))
    with pytest.raises(EmbeddingError, match=r"dims \[2, 3\]"):
        cache.take(["a", "b"])


def test_locate_finds_what_take_finds_without_reading_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache = EmbeddingCache(tmp_path, "hash-2")
    cache.put_many(["a", "b"], np.array([[1, 1], [2, 2]], dtype=np.float32))
    cache.put_many(["c", "a"], np.array([[3, 3], [4, 4]], dtype=np.float32))
    asked = ["c", "absent", "a", "b", "c"]
    fresh = EmbeddingCache(tmp_path, "hash-2")
    read: list[str] = []
    real = EmbeddingCache._shard_vectors
    monkeypatch.setattr(EmbeddingCache, "_shard_vectors", lambda self, name: read.append(name) or real(self, name))
    positions, dim = fresh.locate(asked)
    assert (positions.tolist(), positions.dtype, dim, read) == ([0, 2, 3, 4], np.int64, 2, [])   # headers only
    assert fresh.take(asked)[0].tolist() == [0, 2, 3, 4]
    assert sorted(read) == ["shard-0.npz", "shard-1.npz"]
    nothing = EmbeddingCache(tmp_path, "hash-2").locate(["absent"])
    assert (nothing[0].tolist(), nothing[1]) == ([], 0)


def test_locate_leaves_out_the_shards_take_refuses(tmp_path: Path, caplog):
    cache = EmbeddingCache(tmp_path, "hash-2")
    cache.put_many(["a", "b"], np.array([[1, 1], [2, 2]], dtype=np.float32))
    with open(cache.dir / "shard-5.npz", "wb") as fh:              # 2 hashes but 3 vectors: refused by take
        np.savez(fh, hashes=np.asarray(["c", "d"]), vectors=np.ones((3, 2), dtype=np.float32))
    (cache.dir / "shard-6.npz").write_bytes(b"not a zip file")     # unreadable: ignored
    fresh = EmbeddingCache(tmp_path, "hash-2")
    assert fresh.locate(["a", "c", "d", "b"])[0].tolist() == [0, 3]
    assert fresh.take(["a", "c", "d", "b"])[0].tolist() == [0, 3]
    assert "ignoring unreadable shard" in caplog.text
    cache.put_many(["e"], np.ones((1, 3), dtype=np.float32))
    with pytest.raises(EmbeddingError, match=r"dims \[2, 3\]"):
        EmbeddingCache(tmp_path, "hash-2").locate(["a", "e"])
