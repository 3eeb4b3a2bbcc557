"""Cold-start mechanisms of a search process (issue 19): BM25 scored without bm25s, the BM25 / page-vector / e5
vocabulary start-up caches, reading scattered vector rows without faulting the whole map in, the Python unigram
tokenizer of e5 queries, and the modules a search never imports. Each must give exactly what the path it replaces
gives."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline import warehouse as wh
from pipeline.index import fastcache
from pipeline.index.bm25 import Bm25Index, split_blobs
from pipeline.index.embed import E5QueryTokenizer, E5Tokenizer, load_embedder, read_e5_q4
from pipeline.index.unigram import PackedStrings, PrefixTable, UnigramViterbi
from pipeline.search.searcher import QUERY_WORKERS, Searcher
from tests.test_embed_multilingual import PIECES, SCORES, write_tiny_e5
from tests.test_search_fastcache import PAGES
from tests.tiny_warehouse import publish_pages

DOCS = [["cat", "purr", "cat"], ["dog", "bark"], ["fish", "swim", "cat"], [], ["purr"]]
IDS = ["c", "d", "f", "e", "p"]


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


# ---- BM25 ----

def test_bm25_scores_equal_bm25s_bit_for_bit():
    import bm25s

    index = Bm25Index.build(IDS, DOCS)
    ref = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    ref.index([d for d in DOCS], show_progress=False)
    for query in (["cat"], ["cat", "cat", "purr"], ["purr", "fish", "nope"], ["dog", "bark", "swim", "cat"]):
        ids = [ref.vocab_dict[t] for t in query if t in ref.vocab_dict]
        want = np.asarray(ref.get_scores_from_ids(ids), dtype=np.float32)
        got = index.scores(query)
        assert got.dtype == np.float32 and np.array_equal(got, want)
    assert np.array_equal(index.scores(["nope", ""]), np.zeros(5, dtype=np.float32))


def test_bm25_score_matrix_equals_bm25s_on_a_random_corpus():
    """Every (term, document) score of a Zipf-like corpus (400 documents of 0-120 tokens, empty tokens among
    them, one document without any) equals bm25s's float32 score, and every query scores the same bit for bit."""
    import bm25s

    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(900)]
    docs = [[words[min(int(x), 899)] for x in rng.zipf(1.3, size=rng.integers(0, 120))] for _ in range(400)]
    docs[3] = []
    docs[5] = ["", *docs[5], ""]
    index = Bm25Index.build([f"d{i}" for i in range(len(docs))], docs, k1=1.2, b=0.6)
    ref = bm25s.BM25(k1=1.2, b=0.6, method="lucene")
    ref.index([[t for t in d if t] for d in docs], show_progress=False)
    assert set(index._vocab) == set(ref.vocab_dict) - {""}
    for term, col in index._vocab.items():
        rcol = ref.vocab_dict[term]
        r0, r1 = ref.scores["indptr"][rcol], ref.scores["indptr"][rcol + 1]
        want = sorted(zip(ref.scores["indices"][r0:r1].tolist(), ref.scores["data"][r0:r1].tolist()))
        c0, c1 = index._indptr[col], index._indptr[col + 1]
        assert list(zip(index._indices[c0:c1].tolist(), index._data[c0:c1].tolist())) == want, term
    for _ in range(50):
        query = [words[min(int(x), 899)] for x in rng.zipf(1.3, size=4)]
        ids = [ref.vocab_dict[t] for t in query if t in ref.vocab_dict]
        assert np.array_equal(index.scores(query), np.asarray(ref.get_scores_from_ids(ids), dtype=np.float32))


def test_bm25_index_of_the_same_corpus_has_the_same_bytes():
    """The vocabulary follows first occurrence (bm25s's followed set order, which changes with the process's hash
    seed): building the same corpus again writes the same blobs, so a rebuild with nothing changed is idempotent."""
    first = Bm25Index.build(IDS, DOCS).to_blobs()
    assert Bm25Index.build(IDS, [list(d) for d in DOCS]).to_blobs() == first
    assert list(Bm25Index.build(IDS, DOCS)._vocab)[:3] == [t for t in dict.fromkeys(t for d in DOCS for t in d) if t][:3]


def test_caching_analyzer_gives_the_analyzers_tokens_once_per_text(tmp_path: Path):
    from pipeline.index.analysis import Analyzer
    from pipeline.stages.warehouse import TokenCache, caching_analyzer

    texts = ["Reading Parquet files", "read_csv_auto と Parquet を読む", "Reading Parquet files", ""]
    cache = TokenCache(tmp_path, "v1")
    analyzer = caching_analyzer(cache)
    want = [Analyzer().tokens(t) for t in texts]
    got = [analyzer.tokens(t) for t in texts]
    assert got == want and (cache.misses, cache.hits) == (2, 0)          # the repeated text: analysed once
    got[0].append("changed")                                            # a caller's list is its own
    assert analyzer.tokens(texts[0]) == want[0]
    cache.save()
    again = TokenCache(tmp_path, "v1")
    assert [caching_analyzer(again).tokens(t) for t in texts] == want and (again.misses, again.hits) == (0, 2)


def test_token_cache_is_marshal_of_ids_and_reads_the_caches_it_replaces(tmp_path: Path):
    """The cache file holds token ids (``tokens-<version>.ids.marshal``); the same version's caches of joined
    strings written before (marshal, JSON before it) are read without re-analysing and replaced by it."""
    import marshal

    from pipeline.stages.warehouse import TokenCache, caching_analyzer

    cache = TokenCache(tmp_path, "v1")
    want = caching_analyzer(cache).tokens("Reading Parquet files")
    cache.save()
    assert [p.name for p in (tmp_path / "bm25").iterdir()] == ["tokens-v1.ids.marshal"]
    written = (tmp_path / "bm25" / "tokens-v1.ids.marshal").read_bytes()
    key = TokenCache.key("Reading Parquet files")
    assert want == ["read", "parquet", "file"] and marshal.loads(written) == {
        "terms": want, "texts": {key: np.array([0, 1, 2], dtype="<i4").tobytes()}}
    (tmp_path / "bm25" / "tokens-v1.ids.marshal").unlink()
    for old in ("tokens-v1.marshal", "tokens-v1.json"):                  # as written before: joined strings
        joined = {key: TokenCache.SEP.join(want)}
        (tmp_path / "bm25" / old).write_bytes(marshal.dumps(joined) if old.endswith(".marshal")
                                              else json.dumps(joined).encode())
        again = TokenCache(tmp_path, "v1")
        assert caching_analyzer(again).tokens("Reading Parquet files") == want and (again.misses, again.hits) == (0, 1)
        again.save()                                                     # written as ids, the old file gone
        assert [p.name for p in (tmp_path / "bm25").iterdir()] == ["tokens-v1.ids.marshal"]
        assert (tmp_path / "bm25" / "tokens-v1.ids.marshal").read_bytes() == written
        (tmp_path / "bm25" / "tokens-v1.ids.marshal").unlink()
    (tmp_path / "bm25" / "tokens-v1.ids.marshal").write_bytes(written)
    same = TokenCache(tmp_path, "v1")
    caching_analyzer(same).tokens("Reading Parquet files")
    (tmp_path / "bm25" / "tokens-v1.ids.marshal").unlink()
    same.save()                                  # every entry used, nothing analysed: the file is not written
    assert not same.changed and list((tmp_path / "bm25").iterdir()) == []
    (tmp_path / "bm25" / "tokens-v1.ids.marshal").write_bytes(written)
    newer = TokenCache(tmp_path, "v2")
    caching_analyzer(newer).tokens("Reading Parquet files")
    newer.save()                                                         # the other version's files go
    assert [p.name for p in (tmp_path / "bm25").iterdir()] == ["tokens-v2.ids.marshal"]
    assert (tmp_path / "bm25" / "tokens-v2.ids.marshal").read_bytes() == written
    ids = np.array([0, 1, 2], dtype="<i4").tobytes()
    for broken in (b"\x00garbage", marshal.dumps({"terms": want[:1], "texts": {key: ids}}),     # ids outside terms
                   marshal.dumps({"terms": ["read", "read", "file"], "texts": {key: ids}}),      # a term twice
                   marshal.dumps({"terms": want, "texts": {key: ids[:-1]}}), marshal.dumps([want, {key: ids}])):
        (tmp_path / "bm25" / "tokens-v2.ids.marshal").write_bytes(broken)   # unreadable or inconsistent: empty
        cache = TokenCache(tmp_path, "v2")
        assert caching_analyzer(cache).tokens("Reading Parquet files") == want and (cache.misses, cache.hits) == (1, 0)


def test_bm25_cache_serves_the_stored_index(cache: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch):
    con = wh.connect(warehouse)
    try:
        chunk_blobs, _ = split_blobs(wh.load_bm25_blobs(con))
        ref = Bm25Index.from_blobs(chunk_blobs)
        first, pages = wh.load_bm25_cached(con, warehouse)                  # built, stored
        assert pages is None                                                 # this warehouse has no page index
        (entry,) = (cache / "bm25").iterdir()
        monkeypatch.setattr(Bm25Index, "from_blobs", lambda blobs: pytest.fail("not served from the cache"))
        again, _ = wh.load_bm25_cached(con, warehouse)
        assert isinstance(again._data, np.ndarray) and not again._data.flags.writeable    # memory-mapped
        for idx in (first, again):
            assert idx.doc_ids == ref.doc_ids and idx._vocab == ref._vocab and idx.to_blobs() == ref.to_blobs()
            for q in (["pip", "install"], ["hybrid", "search"], ["nothing"]):
                assert np.array_equal(idx.scores(q), ref.scores(q))
        monkeypatch.undo()
        (entry / "chunk.meta.marshal").write_bytes(b"\x00garbage")            # corrupt (same size is not kept)
        fixed, _ = wh.load_bm25_cached(con, warehouse)                      # rebuilt from the blobs
        assert fixed.to_blobs() == ref.to_blobs()
    finally:
        con.close()


def test_bm25_without_cache(tmp_path: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", "off")
    con = wh.connect(warehouse)
    try:
        chunks, pages = wh.load_bm25_cached(con, warehouse)
        assert pages is None and len(chunks) == 6
    finally:
        con.close()


# ---- generic cached state, page vectors ----

def test_cached_state_round_trip_and_corrupt_entry(cache: Path):
    calls = []

    def compute():
        calls.append(1)
        return {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "names": ["x", "y"], "extra": {b"\x00k": 3},
                "n": 7}

    first = fastcache.cached_state("k", "n", "key", compute)
    second = fastcache.cached_state("k", "n", "key", compute)
    assert len(calls) == 1
    assert second["names"] == ["x", "y"] and second["extra"] == {b"\x00k": 3} and second["n"] == 7
    assert np.array_equal(second["a"], first["a"]) and second["a"].dtype == np.float32
    assert not second["a"].flags.writeable                                   # memory-mapped read-only
    entry = fastcache.load_entry("k", "n", "key")
    (entry / "state.marshal").write_bytes(b"\xff" * (entry / "state.marshal").stat().st_size)
    third = fastcache.cached_state("k", "n", "key", compute)
    assert len(calls) == 2 and third["names"] == ["x", "y"]


def test_page_vectors_cached_equal_computed(cache: Path, warehouse: Path):
    with Searcher(warehouse) as s:
        for m in s.models:
            table = m["table_name"]
            fresh = s._compute_page_vectors(table)
            pv = s._page_vectors(table)                                      # computed, stored
        assert {p.name.split(".")[0] for p in (cache / "pagevec").iterdir()} == {m["table_name"] for m in s.models}
    with Searcher(warehouse) as s:
        for m in s.models:
            table = m["table_name"]
            fresh = s._compute_page_vectors(table)
            pv = s._page_vectors(table)                                      # read back
            assert list(pv.note_ids) == fresh["note_ids"] and list(pv.source) == fresh["source"]
            assert np.array_equal(pv.vectors, fresh["vectors"]) and np.array_equal(pv.background, fresh["background"])
            order, bounds = fresh["order"], fresh["bounds"]
            assert [list(r) for r in pv.rows] == [list(order[bounds[i]:bounds[i + 1]]) for i in range(len(pv.rows))]
            assert pv.position == {n: i for i, n in enumerate(fresh["note_ids"])}


# ---- scattered rows of a memory-mapped table ----

def test_take_rows_equals_fancy_indexing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import os

    reads = []
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, off: reads.append(off) or real(fd, bufs, off))
    vecs = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    np.save(tmp_path / "v.npy", vecs)
    mapped = np.asarray(np.load(tmp_path / "v.npy", mmap_mode="r"))
    for rows in ([0], [3, 4, 5, 9, 49], list(range(50)), [7, 20, 21]):
        r = np.array(rows)
        for src in (mapped, vecs):
            got = wh.take_rows(src, r)
            assert got.flags.c_contiguous and got.dtype == np.float32 and np.array_equal(got, vecs[r])
    assert reads                                                             # the mapped table was read, not mapped
    assert np.array_equal(wh.take_rows(mapped, np.array([5, 2])), vecs[[5, 2]])   # not ascending: plain gather
    assert wh.take_rows(mapped, np.array([], dtype=np.int64)).shape == (0, 8)
    # vectors read from DuckDB (DOCSVAULT_SEARCH_CACHE=off) are owned by an Arrow buffer, not a numpy array
    arrow = pa.array(vecs.reshape(-1)).to_numpy(zero_copy_only=True).reshape(50, 8)
    assert np.array_equal(wh.take_rows(arrow, np.array([3, 4, 9])), vecs[[3, 4, 9]])


# ---- e5 query tokenizer ----

def test_unigram_viterbi_picks_the_best_path_and_splits_unknowns():
    pieces = ["<unk>", "a", "b", "ab", "abc", "c", "\u2581"]
    scores = [0.0, -1.0, -1.0, -1.5, -5.0, -1.0, -0.5]
    v = UnigramViterbi.from_pieces(pieces, scores, unk=0)
    assert v.encode("abc") == [3, 5]                       # ab + c (-2.5) beats abc (-5) and a + b + c (-3)
    assert v.encode("\u2581xy") == [6, 0, 0]               # one <unk> per unknown character
    assert v.encode("") == []
    tie = UnigramViterbi.from_pieces(["<unk>", "a", "aa", "aaa"], [0.0, -1.0, -2.0, -3.0], unk=0)
    assert tie.encode("aaa") == [3]                        # equal scores: the earliest proposal stays


def test_prefix_table_answers_get_as_the_dict(monkeypatch: pytest.MonkeyPatch):
    mapping = {"▁": 1, "▁a": 0, "▁ab": 3, "b": 4, "東京": 5, "東": 0, "a\x00": 6, "\x00": 7, "": 8, "zz": 9}
    table = PrefixTable(*PrefixTable.arrays(mapping))
    probes = [*mapping, "▁abc", "a", "東京都", "c", "a\x00b", "\udcff", "x" * 100]
    want = [mapping.get(k, "none") for k in probes]
    assert [table.get(k, "none") for k in probes] == want and len(table) == len(mapping)
    assert table._dict is None                                           # answered by binary search
    monkeypatch.setattr(PrefixTable, "MATERIALIZE_AFTER", 3)
    many = PrefixTable(*PrefixTable.arrays(mapping))
    assert [many.get(k, "none") for k in probes] == want                 # the 4th lookup on: a dict
    assert many._dict == mapping


def test_packed_strings_read_as_the_list():
    words = ["▁the", "", "東京", "a\x00b", "é"]
    packed = PackedStrings(*PackedStrings.arrays(words))
    assert list(packed) == words and len(packed) == 5 and packed[-1] == "é" and packed[1:3] == ["", "東京"]
    with pytest.raises(IndexError):
        packed[5]
    with pytest.raises(ValueError, match="offsets end at"):
        PackedStrings(np.zeros(3, dtype=np.uint8), np.array([0, 2]))


def test_unigram_viterbi_equals_tokenizers_unigram():
    from tokenizers import Tokenizer, models

    pieces = ["<unk>", "\u2581", "\u2581a", "a", "b", "ab", "\u3042", "\u2581\u3042", "\x00<unk>\x00", "bb", "abb"]
    scores = [0.0, -2.0, -1.5, -3.0, -3.0, -2.5, -2.0, -1.8, 0.0, -4.0, -6.5]
    tk = Tokenizer(models.Unigram([(p, s) for p, s in zip(pieces, scores)], unk_id=0, byte_fallback=False))
    v = UnigramViterbi.from_pieces(pieces, scores, unk=0)
    for text in ["\u2581ab", "\u2581abba\u3042", "\u2581\u3042\u3042ab", "\u2581xyz", "\u2581abb\u2581a", "a\x00b",
                 "\u2581\x00<unk>\x00a"]:
        enc = tk.encode(text, add_special_tokens=False)
        want = [j for i, (a, b) in zip(enc.ids, enc.offsets) for j in ([i] if i != 0 else [i] * (b - a))]
        assert v.encode(text) == want, text


def test_e5_query_tokenizer_equals_e5_tokenizer(tmp_path: Path, cache: Path):
    path = tmp_path / "tiny.bin"
    write_tiny_e5(path)
    w = read_e5_q4(path)
    full = E5Tokenizer(w)
    texts = ["ab ab", "  a\tb  ", "\u3042 ab\u3000c", "xyz <unk> <s>", "\uff41b", "", "a\x01b", "abcabc" * 5]
    for _ in range(2):                                     # vocabulary built and stored, then read back
        quick = E5QueryTokenizer(read_e5_q4(path))
        assert quick.content_ids(texts) == full.content_ids(texts)
        assert (quick.bos, quick.eos, quick.unk) == (full.bos, full.eos, full.unk)
    assert len(list((cache / "e5vocab").iterdir())) == 1
    assert len(PIECES) == len(SCORES) == w.config.vocab


def test_e5_vocabulary_decoded_lazily(tmp_path: Path):
    path = tmp_path / "tiny.bin"
    write_tiny_e5(path)
    w = read_e5_q4(path)
    assert w._pieces is None                               # not decoded by reading the file
    assert w.piece_bytes() == [p.encode() for p in PIECES]
    assert w.pieces == PIECES and w._pieces is not None


# ---- what a search process imports ----

def test_search_path_imports_no_heavy_modules(tmp_path: Path, cache: Path):
    """Opening a searcher and searching (the CLI's modules loaded) imports neither torch, transformers,
    sentence-transformers, dagster nor bm25s/scipy, the normalize stage, the writer or yaml (no synonyms file); with
    its start-up caches written, not pyarrow.compute either."""
    path = tmp_path / "warehouse.duckdb"
    publish_pages(path, PAGES)
    code = (
        "import json, sys\n"
        "import pipeline.cli, pipeline.service\n"
        "from pipeline.search.searcher import Searcher\n"
        f"s = Searcher({str(path)!r}, query_threads=1)\n"
        "hits = s.search('hybrid search vectors', k=3)\n"
        "s.close()\n"
        "bad = ['torch', 'sentence_transformers', 'transformers', 'dagster', 'bm25s', 'scipy', 'pyarrow.compute',\n"
        "       'pipeline.ingest.normalize', 'pipeline.warehouse.write', 'pipeline.warehouse.eval_runs', 'yaml']\n"
        "print(json.dumps([len(hits), [m for m in bad if m in sys.modules]]))\n"
    )
    seen = []
    for _ in range(2):             # the first process writes the start-up caches, the second is a cold search
        out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                             timeout=300, cwd=Path(__file__).resolve().parents[1])
        assert out.returncode == 0, out.stderr[-2000:]
        seen.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert seen[1] == [3, []]
    assert seen[0][0] == 3 and set(seen[0][1]) <= {"pyarrow.compute"}        # building the caches may use it


# ---- DuckDB extensions loaded only when an HNSW index is queried ----

def test_searcher_attaches_without_vss_and_loads_it_for_hnsw(cache: Path, warehouse: Path):
    def loaded(con) -> set[str]:
        return {r[0] for r in con.execute(
            "SELECT extension_name FROM duckdb_extensions() WHERE loaded AND extension_name IN ('vss', 'fts')"
        ).fetchall()}

    with Searcher(warehouse, exact_max_rows=10**9) as exact:
        want = [h.vault_path for h in exact.search("hybrid search vectors", k=3, lanes=["vector"])]
        assert loaded(exact._con) == set()                                     # exact scan: never loaded
    with Searcher(warehouse, exact_max_rows=0) as hnsw:                       # every model through HNSW
        got = [h.vault_path for h in hnsw.search("hybrid search vectors", k=3, lanes=["vector"])]
        assert "vss" in loaded(hnsw._con)
        table = hnsw.models[0]["table_name"]
        assert "HNSW_INDEX_SCAN" in wh.explain_vector_search(hnsw._con, table)
    assert got == want                                                         # a 6-chunk corpus: HNSW is exact
    con = wh.connect(warehouse)                                                 # read-only: lazy by default
    try:
        assert loaded(con) == set()
    finally:
        con.close()
    con = wh.connect(warehouse, lazy_extensions=False)                          # vss only: fts is never used
    try:
        assert loaded(con) == {"vss"}
    finally:
        con.close()


# ---- query encoders preloaded on worker threads ----

class _Preloading:
    """A real embedder whose ``preload_query`` is recorded (and waits for ``gate``), as are its query embeddings."""

    def __init__(self, inner, events: list, gate: threading.Event, fail: bool = False) -> None:
        self._inner, self._events, self._gate, self._fail = inner, events, gate, fail

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def preload_query(self) -> None:
        self._events.append(("preload", self._inner.model_id, threading.current_thread().name))
        self._gate.wait(10)
        time.sleep(0.05)
        if self._fail:
            raise OSError("model file unreadable")
        self._events.append(("loaded", self._inner.model_id, threading.current_thread().name))

    def embed_query(self, text: str):
        self._events.append(("query", self._inner.model_id, threading.current_thread().name))
        return self._inner.embed_query(text)


def test_preload_query_encoders_runs_on_workers_and_first_queries_wait(cache: Path, warehouse: Path):
    events: list = []
    gate = threading.Event()
    with Searcher(warehouse, lambda mid: _Preloading(load_embedder(mid), events, gate)) as sr:
        want = [h.vault_path for h in Searcher(warehouse).search("hybrid search vectors", k=3, lanes=["vector"])]
        sr.preload_query_encoders()
        models = {m["model_id"] for m in sr.models}
        assert len(models) == 2
        gate.set()
        got = [h.vault_path for h in sr.search("hybrid search vectors", k=3, lanes=["vector"])]
    assert got == want
    for mid in models:
        kinds = [kind for kind, m, _ in events if m == mid]
        assert kinds == ["preload", "loaded", "query"], (mid, events)
    assert {t for kind, _, t in events if kind != "query"} <= {f"docsvault-query_{i}" for i in range(QUERY_WORKERS)}


def test_a_failing_preload_leaves_the_search_working(cache: Path, warehouse: Path):
    events: list = []
    gate = threading.Event()
    gate.set()
    with Searcher(warehouse, lambda mid: _Preloading(load_embedder(mid), events, gate, fail=True),
                  preload_encoders=True) as sr:                                # started while the indexes load
        hits = sr.search("hybrid search vectors", k=3, lanes=["vector"])
    assert hits and [kind for kind, *_ in events].count("query") == 2


KEY_FIELDS = ("_note_of", "_source_of", "_english_notes", "_other_language_chunks", "_first_chunk", "_neighbours",
              "_pagerank", "_not_results", "_note_path", "_note_source", "_vault_path", "_tags", "_page_no",
              "_model_sources")


def test_key_state_cached_equals_computed(cache: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch):
    with Searcher(warehouse) as first:                                          # computes and stores the entry
        want_hits = [(h.vault_path, h.chunk_id) for h in first.search("hybrid search vectors", k=5)]
    assert sorted(p.name.split(".")[0] for p in (cache / "keys").iterdir()) == ["keys", "models"]
    with Searcher(warehouse) as cached:                                         # reads it back
        got = {f: getattr(cached, f) for f in KEY_FIELDS}
        assert [(h.vault_path, h.chunk_id) for h in cached.search("hybrid search vectors", k=5)] == want_hits
        got_rows = {m["table_name"]: cached._flat(m["table_name"])[2:] for m in cached.models}
        got_bm25 = (cached._bm25_sources.tolist(), cached._bm25_page.tolist())
    assert sorted(p.name.split(".")[0] for p in (cache / "flatrows").iterdir()) == sorted([*got_rows, "bm25"])
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", "off")
    with Searcher(warehouse) as computed:
        want = {f: getattr(computed, f) for f in KEY_FIELDS}
        assert got_bm25 == (computed._bm25_sources.tolist(), computed._bm25_page.tolist())
        assert set(got_bm25[0]) == {"api", "guide", "ja"} and min(got_bm25[1]) == 0
        for table, (srcs, pages) in got_rows.items():                           # each row's source and page
            want_srcs, want_pages = computed._flat(table)[2:]
            assert srcs.tolist() == want_srcs.tolist() and pages.tolist() == want_pages.tolist()
            assert pages.dtype == np.int64 and set(srcs.tolist()) == {"api", "guide", "ja"}
    assert got == want and got["_note_of"] and got["_tags"] is not None
    assert list(got["_note_of"]) == list(want["_note_of"])                    # same order (page numbers follow it)
