"""The DuckDB warehouse: publish/swap, reopen read-only, HNSW == brute force, EC-19 WAL replay."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pytest

from pipeline import warehouse as wh
from pipeline.common.errors import (
    EmbeddingError,
    PipelineError,
    WarehouseCorruptError,
    WarehouseNotBuiltError,
)
from pipeline.index.bm25 import Bm25Index
from pipeline.models import Chunk, Edge, Note

N_CHUNKS = 300
DIM = 384
MODEL = "hash-384"


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def toy_data(n_notes: int = 30, tag: str = "") -> tuple[wh.WarehouseData, np.ndarray]:
    notes = [
        Note("docs", f"p{i}.md", f"p{i}.md", f"Page {i}{tag}",
             {"title": f"Page {i}", "aliases": [f"alias{i}"], "tags": ["t", f"n{i}"], "description": f"d{i}",
              "url": f"https://x/p{i}"}, f"body {i}")
        for i in range(n_notes)
    ]
    chunks = [
        Chunk(f"c{j:03d}", notes[j % n_notes].note_id, "docs", j // n_notes, (f"H{j}",), f"Page > H{j}", f"text {j}")
        for j in range(N_CHUNKS)
    ]
    edges = [Edge(notes[0].note_id, notes[1].note_id, "p1", "wikilink", 2), Edge(notes[1].note_id, None, "gone", "wikilink")]
    vecs = _unit(np.random.default_rng(7), N_CHUNKS, DIM)
    bm25 = Bm25Index.build([c.chunk_id for c in chunks], [c.text.split() for c in chunks])
    data = wh.WarehouseData(
        notes=notes,
        note_metrics={notes[1].note_id: (1, 0.25)},
        chunks=chunks,
        edges=edges,
        vectors={MODEL: ([c.chunk_id for c in chunks], vecs)},
        bm25_blobs=bm25.to_blobs(),
        run_info={"sources": "docs"},
    )
    return data, vecs


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, np.ndarray, dict]:
    path = tmp_path_factory.mktemp("wh") / "warehouse.duckdb"
    data, vecs = toy_data()
    counts = wh.publish(path, data)
    return path, vecs, counts


def test_publish_counts_and_tables(built):
    path, _, counts = built
    assert {k: counts[k] for k in ("notes", "chunks", "links", "models", "vectors", "bm25_blobs")} == {
        "notes": 30, "chunks": 300, "links": 2, "models": 1, "vectors": 300, "bm25_blobs": 6}
    assert not list(path.parent.glob("*.tmp-*"))
    con = wh.connect(path)
    try:
        st = wh.stats(con)
        assert st["notes"] == 30 and st["chunks"] == 300 and st["dangling_links"] == 1
        assert st["sources"] == {"docs": {"notes": 30, "chunks": 300}}
        assert st["meta"]["schema_version"] == wh.SCHEMA_VERSION and st["meta"]["sources"] == "docs"
        assert wh.list_models(con) == [{"model_id": MODEL, "table_name": "vec_hash_384", "dim": 384, "n": 300}]
        assert wh.list_sources(con) == ["docs"]
        note = wh.note_by_vault_path(con, "docs/p1.md")
        assert note is not None
        assert (note["title"], note["aliases"], note["tags"], note["in_degree"], note["pagerank"]) == (
            "Page 1", ["alias1"], ["t", "n1"], 1, 0.25)
        assert note["frontmatter"]["url"] == "https://x/p1" and note["url"] == "https://x/p1"
        assert wh.note_by_vault_path(con, "docs/nope.md") is None
        got = wh.fetch_chunks(con, ["c001", "c031", "missing"])
        assert set(got) == {"c001", "c031"}
        assert got["c031"]["text"] == "text 31" and got["c031"]["source_path"] == "p1.md"
        assert got["c031"]["vault_path"] == "docs/p1.md" and got["c031"]["ordinal"] == 1
        blobs = wh.load_bm25_blobs(con)
        assert Bm25Index.from_blobs(blobs).search(["31"], k=3)[0][0] == "c031"
        assert wh.load_chunk_keys(con).num_rows == 300
        assert wh.model_source_counts(con, "vec_hash_384") == {"docs": 300}
    finally:
        con.close()


def test_read_only(built):
    con = wh.connect(built[0])
    try:
        with pytest.raises(duckdb.Error):
            con.execute("DELETE FROM notes")
    finally:
        con.close()


def test_hnsw_top10_equals_brute_force(built):
    path, vecs, _ = built
    con = wh.connect(path)
    try:
        rng = np.random.default_rng(11)
        for q in list(_unit(rng, 8, DIM)) + [vecs[5], vecs[123]]:
            approx = wh.vector_search(con, "vec_hash_384", q, 10)
            exact = wh.brute_force_search(con, "vec_hash_384", q, 10)
            assert [c for c, _ in approx] == [c for c, _ in exact]
            np.testing.assert_allclose([d for _, d in approx], [d for _, d in exact], atol=1e-5)
            expected = [f"c{i:03d}" for i in np.argsort(-(vecs @ q), kind="stable")[:10]]
            assert [c for c, _ in exact] == expected
        assert wh.vector_search(con, "vec_hash_384", vecs[5], 1) == [("c005", pytest.approx(0.0, abs=1e-5))]
    finally:
        con.close()


def test_explain_uses_hnsw_index(built):
    con = wh.connect(built[0])
    try:
        plan = wh.explain_vector_search(con, "vec_hash_384", built[1][0], 10)
        assert "HNSW_INDEX_SCAN" in plan
        assert "HNSW_INDEX_SCAN" in wh.explain_vector_search(con, "vec_hash_384")
    finally:
        con.close()


def test_query_vector_of_wrong_dim(built):
    con = wh.connect(built[0])
    try:
        with pytest.raises(EmbeddingError, match="3 dims"):
            wh.vector_search(con, "vec_hash_384", np.ones(3, np.float32), 5)
        with pytest.raises(ValueError):
            wh.vector_search(con, "notes; DROP TABLE notes", np.ones(384, np.float32), 5)
    finally:
        con.close()


def test_missing_file(tmp_path: Path):
    with pytest.raises(WarehouseNotBuiltError, match="docsvault build"):
        wh.connect(tmp_path / "nope.duckdb")


def test_garbage_and_wrong_schema(tmp_path: Path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(WarehouseCorruptError, match="docsvault build"):
        wh.connect(junk)
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '0')")
    con.close()
    with pytest.raises(WarehouseCorruptError, match="schema version 0"):
        wh.connect(other)
    bare = tmp_path / "bare.duckdb"
    duckdb.connect(str(bare)).close()
    with pytest.raises(WarehouseCorruptError, match="not a docsvault warehouse"):
        wh.connect(bare)


def test_a_damaged_block_is_named_as_damage_not_as_another_file(tmp_path: Path):
    """Before session 40 a block failing its checksum read "is not a docsvault warehouse (no meta table: IO Error:
    Corrupt database file …)", as if the file were something else."""
    path = tmp_path / "w.duckdb"
    wh.publish(path, toy_data(30)[0])
    con = duckdb.connect(str(path))
    block = con.execute("SELECT min(block_id) FROM pragma_storage_info('meta') WHERE block_id >= 0").fetchone()[0]
    con.close()
    with open(path, "r+b") as f:             # DuckDB: a 12 KiB header, then 256 KiB blocks, each checksummed
        f.seek(12288 + block * 262144 + 8)
        f.write(b"\xff" * 64)
    with pytest.raises(WarehouseCorruptError) as err:
        wh.connect(path)
    assert str(err.value).startswith(f"the warehouse {path} is damaged (IO Error: Corrupt database file: computed "
                                     "checksum ")
    assert str(err.value).endswith("); run `docsvault build` to rebuild it")


def test_publish_over_open_reader(tmp_path: Path):
    path = tmp_path / "w.duckdb"
    wh.publish(path, toy_data(30)[0])
    reader = wh.connect(path)
    try:
        new, _ = toy_data(20, tag=" v2")
        wh.publish(path, new)
        # the old reader still answers from the file it opened
        assert reader.execute("SELECT count(*) FROM notes").fetchone() == (30,)
        assert wh.vector_search(reader, "vec_hash_384", np.eye(384, dtype=np.float32)[0], 3)
        fresh = wh.connect(path)
        try:
            assert fresh.execute("SELECT count(*) FROM notes").fetchone() == (20,)
            assert wh.note_by_vault_path(fresh, "docs/p1.md")["title"] == "Page 1 v2"
        finally:
            fresh.close()
    finally:
        reader.close()


def test_failed_publish_keeps_old_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "w.duckdb"
    wh.publish(path, toy_data(30)[0])

    def boom(edges):
        raise RuntimeError("disk full")

    from pipeline.warehouse import write as wh_write

    monkeypatch.setattr(wh_write, "_links_table", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        wh.publish(path, toy_data(20)[0])
    assert [p.name for p in tmp_path.iterdir()] == ["w.duckdb"]
    con = wh.connect(path)
    try:
        assert con.execute("SELECT count(*) FROM notes").fetchone() == (30,)
    finally:
        con.close()


def test_bad_vectors_are_refused(tmp_path: Path):
    data, vecs = toy_data()
    ids = [c.chunk_id for c in data.chunks]
    bad_shape = wh.WarehouseData(notes=data.notes, chunks=data.chunks, vectors={MODEL: (ids[:-1], vecs)})
    with pytest.raises(EmbeddingError, match="299 chunk ids but vectors of shape"):
        wh.publish(tmp_path / "w.duckdb", bad_shape)
    unknown = wh.WarehouseData(notes=data.notes, chunks=data.chunks[:10], vectors={MODEL: (ids, vecs)})
    with pytest.raises(EmbeddingError, match="not in the build"):
        wh.publish(tmp_path / "w.duckdb", unknown)
    assert not (tmp_path / "w.duckdb").exists()


def test_a_chunk_id_two_chunks_share_is_refused_naming_their_notes(tmp_path: Path):
    """The refusal named the id only ("two chunks share the id 'c000'; fix the duplicate"), which no user can
    find: it names the notes now, and the previous warehouse stays."""
    data, _ = toy_data()
    path = tmp_path / "w.duckdb"
    wh.publish(path, data)
    before = path.read_bytes()
    chunks = list(data.chunks)
    c = chunks[1]
    chunks[1] = Chunk(chunks[0].chunk_id, c.note_id, c.source, c.ordinal, c.heading_path, c.breadcrumb, c.text)
    dup = wh.WarehouseData(notes=data.notes, chunks=chunks, vectors={})
    with pytest.raises(PipelineError) as err:
        wh.publish(path, dup, incremental=True)
    assert str(err.value) == (
        "two chunks share the id 'c000' (in docs/p0.md, docs/p1.md): the warehouse is kept as it was; rename one "
        "of the headings they are under (two headings whose paths read alike, e.g. 'A > B' and 'A' over 'B') and "
        "build again")
    assert path.read_bytes() == before


_EC19_WRITER = textwrap.dedent(
    """
    import os, sys
    import duckdb, duckdb_ext
    path, checkpoint_schema = sys.argv[1], sys.argv[2] == "1"
    con = duckdb.connect(path)
    duckdb_ext.init(con)
    con.execute("LOAD vss")
    con.execute("SET hnsw_enable_experimental_persistence = true")
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [sys.argv[3]])
    con.execute("CREATE TABLE models (model_id VARCHAR, table_name VARCHAR, dim INTEGER, n BIGINT, n_base BIGINT, "
                "n_dead BIGINT, n_delta BIGINT)")
    con.execute("INSERT INTO models VALUES ('toy', 'vec_toy', 4, 3, 3, 0, 0)")
    con.execute("CREATE TABLE vec_dead (table_name VARCHAR, chunk_id VARCHAR)")
    con.execute("CREATE TABLE vec_toy (chunk_id VARCHAR, emb FLOAT[4])")
    con.execute("CREATE TABLE vec_toy_delta (chunk_id VARCHAR, emb FLOAT[4])")
    con.execute("CREATE INDEX vec_toy_hnsw ON vec_toy USING HNSW (emb) WITH (metric = 'cosine')")
    if checkpoint_schema:
        con.execute("CHECKPOINT")
    con.execute("INSERT INTO vec_toy VALUES ('c1', [1, 0, 0, 0]), ('c2', [0, 1, 0, 0]), ('c3', [0.6, 0.8, 0, 0])")
    os._exit(0)  # no CHECKPOINT, no close: the inserts live only in the WAL
    """
)


@pytest.mark.parametrize("checkpoint_schema", [True, False], ids=["inserts-in-wal", "all-in-wal"])
def test_ec19_wal_with_hnsw_replays(tmp_path: Path, checkpoint_schema: bool):
    path = tmp_path / "crashed.duckdb"
    subprocess.run(
        [sys.executable, "-c", _EC19_WRITER, str(path), "1" if checkpoint_schema else "0", wh.SCHEMA_VERSION],
        check=True, timeout=60,
    )
    assert Path(f"{path}.wal").exists()
    ro = wh.connect(path, read_only=True)
    try:
        assert ro.execute("SELECT count(*) FROM vec_toy").fetchone() == (3,)
    finally:
        ro.close()
    con = wh.connect(path, read_only=False)
    try:
        assert con.execute("SELECT count(*) FROM vec_toy").fetchone() == (3,)
        con.execute("DELETE FROM vec_toy WHERE chunk_id = 'c2'")
        hits = wh.vector_search(con, "vec_toy", np.array([0, 1, 0, 0], np.float32), 3)
        assert [c for c, _ in hits] == ["c3", "c1"]
        assert [d for _, d in hits] == pytest.approx([0.2, 1.0], abs=1e-6)
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------------------------
# incremental publish: delta + dead tables, same answers as a full publish


def _changed_data(data: wh.WarehouseData, vecs: np.ndarray, n_changed: int = 5) -> tuple[wh.WarehouseData, dict]:
    rng = np.random.default_rng(11)
    chunks = list(data.chunks)
    vec_of = {c.chunk_id: v for c, v in zip(chunks, vecs)}
    removed = {c.chunk_id for c in chunks[:n_changed]}
    chunks = [c for c in chunks if c.chunk_id not in removed]
    for i in range(n_changed):                     # edited texts -> new vectors
        c = chunks[10 + i]
        chunks[10 + i] = Chunk(c.chunk_id, c.note_id, c.source, c.ordinal, c.heading_path, c.breadcrumb, f"edited {i}")
        vec_of[c.chunk_id] = _unit(rng, 1, DIM)[0]
    for i in range(n_changed):                     # new chunks
        c = Chunk(f"n{i:03d}", data.notes[i % len(data.notes)].note_id, "docs", 99, ("New",), "Page > New", f"new text {i}")
        chunks.append(c)
        vec_of[c.chunk_id] = _unit(rng, 1, DIM)[0]
    ids = [c.chunk_id for c in chunks]
    bm25 = Bm25Index.build(ids, [c.text.split() for c in chunks])
    new = wh.WarehouseData(notes=data.notes, note_metrics=data.note_metrics, chunks=chunks, edges=data.edges[:1],
                           vectors={MODEL: (ids, np.stack([vec_of[i] for i in ids]))}, bm25_blobs=bm25.to_blobs(),
                           run_info={"sources": "docs"})
    return new, vec_of


@pytest.fixture
def no_growth_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A toy warehouse is a few 256 KiB blocks, so one update passes the 4 % growth bound (a full publish follows);
    tests of the delta logic lift the bound, tests of the bound keep or set it."""
    monkeypatch.setattr("pipeline.warehouse.write.MAX_GROWTH", 100.0)


def test_incremental_publish_answers_like_a_full_publish(tmp_path: Path, no_growth_bound):
    data, vecs = toy_data()
    inc, full = tmp_path / "inc.duckdb", tmp_path / "full.duckdb"
    assert wh.publish(inc, data)["mode"] == "full"
    new, vec_of = _changed_data(data, vecs)
    inode = inc.stat().st_ino
    st = wh.publish(inc, new, incremental=True)
    assert st["mode"] == "incremental" and st["reason"] == ""
    assert (st["changed_chunks"], st["removed_chunks"], st["vectors_added"], st["vectors_removed"]) == (10, 5, 10, 10)
    assert inc.stat().st_ino != inode and not list(tmp_path.glob("inc.duckdb.tmp-*"))   # swapped, not edited
    wh.publish(full, new)
    a, b = wh.connect(inc), wh.connect(full)
    try:
        sa, sb = wh.stats(a), wh.stats(b)
        assert {k: sa[k] for k in ("notes", "chunks", "links", "sources")} == \
               {k: sb[k] for k in ("notes", "chunks", "links", "sources")}
        (ma,), (mb,) = wh.list_models(a), wh.list_models(b)
        assert ma["n"] == mb["n"] == len(new.chunks)
        assert a.execute("SELECT n_base, n_dead, n_delta FROM models").fetchone() == (N_CHUNKS, 10, 10)
        assert wh.model_source_counts(a, ma["table_name"]) == wh.model_source_counts(b, mb["table_name"])
        assert a.execute("SELECT text FROM chunks WHERE chunk_id = ?", [new.chunks[10].chunk_id]).fetchone() == ("edited 0",)
        rng = np.random.default_rng(3)
        for q in [*_unit(rng, 8, DIM), vec_of["n000"], vec_of[new.chunks[10].chunk_id]]:
            exact = wh.brute_force_search(b, mb["table_name"], q, 10)
            assert wh.brute_force_search(a, ma["table_name"], q, 10) == exact
            got = wh.vector_search(a, ma["table_name"], q, 10)
            assert [c for c, _ in got] == [c for c, _ in exact]
        gone = {c.chunk_id for c in data.chunks[:5]}
        assert not gone & {c for c, _ in wh.brute_force_search(a, ma["table_name"], vecs[0], 1000)}
        assert wh.vectors_by_text_hash(a, MODEL, [new.chunks[10].text_hash]).keys() == {new.chunks[10].text_hash}
        assert "HNSW_INDEX_SCAN" in wh.explain_vector_search(a, ma["table_name"])
    finally:
        a.close()
        b.close()


def test_incremental_falls_back_to_full_when_the_delta_is_too_large(tmp_path: Path, no_growth_bound):
    data, vecs = toy_data()
    path = tmp_path / "w.duckdb"
    wh.publish(path, data)
    new, _ = _changed_data(data, vecs, n_changed=90)          # 270 vectors outside the index > max(10%, 200)
    st = wh.publish(path, new, incremental=True)
    assert st["mode"] == "full" and "outside the HNSW index" in st["reason"]
    con = wh.connect(path)
    try:
        assert con.execute("SELECT n_dead, n_delta FROM models").fetchone() == (0, 0)
    finally:
        con.close()


def test_incremental_needs_a_current_file_of_this_schema(tmp_path: Path, no_growth_bound):
    data, _ = toy_data()
    path = tmp_path / "w.duckdb"
    assert wh.publish(path, data, incremental=True)["reason"] == "no warehouse yet"
    con = wh.connect(path, read_only=False)
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.execute("CHECKPOINT")
    con.close()
    st = wh.publish(path, data, incremental=True)
    assert st["mode"] == "full" and "schema version 0" in st["reason"]
    wh.connect(path).close()


# ---------------------------------------------------------------------------------------------------------------
# size: blocks freed by an update are reused, and an update that would pass the growth bound is a full publish

_BLOCK = 256 * 1024


def _one_chunk_edited(data: wh.WarehouseData, vecs: np.ndarray, i: int, blob: bytes) -> wh.WarehouseData:
    chunks = list(data.chunks)
    c = chunks[i]
    chunks[i] = Chunk(c.chunk_id, c.note_id, c.source, c.ordinal, c.heading_path, c.breadcrumb, f"edited {i}")
    vecs = vecs.copy()
    vecs[i] = _unit(np.random.default_rng(i), 1, DIM)[0]
    return wh.WarehouseData(notes=data.notes, note_metrics=data.note_metrics, chunks=chunks, edges=data.edges,
                            vectors={MODEL: ([c.chunk_id for c in chunks], vecs)}, bm25_blobs={"data": blob},
                            run_info={"sources": "docs"})


def test_ten_updates_reuse_the_blocks_they_free(tmp_path: Path, no_growth_bound):
    """A 2 MiB BM25 blob (8 blocks) replaced by every update: it used to stay in the file (DELETE does not free the
    rows of a keyed table), +8 blocks per update; now the old blob is dropped and checkpointed before the new one is
    written into its blocks. What remains: the delta and dead tables (a few blocks once) and one partly filled block
    of appended chunk rows per update (measured: +4, +2, then +1 per update = 14 blocks)."""
    data, vecs = toy_data()
    rng = np.random.default_rng(5)
    blob = lambda: rng.bytes(2 << 20)     # random: DuckDB cannot compress it
    path = tmp_path / "w.duckdb"
    full = wh.publish(path, _one_chunk_edited(data, vecs, 0, blob()))
    for i in range(1, 11):
        st = wh.publish(path, _one_chunk_edited(data, vecs, i, blob()), incremental=True)
        assert (st["mode"], st["changed_chunks"], st["vectors_added"], st["vectors_removed"]) == ("incremental", 2, 2, 2)
    grown = path.stat().st_size - full["bytes"]
    assert grown <= 16 * _BLOCK, f"{grown / _BLOCK:.0f} blocks"
    con = wh.connect(path)
    try:
        assert con.execute("SELECT octet_length(data) FROM bm25_index").fetchall() == [(2 << 20,)]
        assert con.execute("SELECT value FROM meta WHERE key = 'updates'").fetchone() == ("10",)
    finally:
        con.close()


def test_full_bytes_is_the_size_of_the_published_full_file(tmp_path: Path, no_growth_bound):
    data, vecs = toy_data()
    path = tmp_path / "w.duckdb"
    st = wh.publish(path, data)
    assert st["bytes"] == path.stat().st_size
    new, _ = _changed_data(data, vecs)
    for _ in range(2):
        assert wh.publish(path, new, incremental=True)["mode"] == "incremental"
        con = wh.connect(path)
        try:
            assert con.execute("SELECT value FROM meta WHERE key = 'full_bytes'").fetchone() == (str(st["bytes"]),)
        finally:
            con.close()


def test_an_update_past_the_growth_bound_is_a_full_publish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    data, vecs = toy_data()
    path = tmp_path / "w.duckdb"
    full = wh.publish(path, data)
    monkeypatch.setattr("pipeline.warehouse.write.MAX_GROWTH", 0.0)      # any added block passes it
    new, _ = _changed_data(data, vecs)
    st = wh.publish(path, new, incremental=True)
    # a file within a block of the bound is not copied and updated at all
    assert st["mode"] == "full" and st["reason"] == (
        f"the file is {full['bytes'] / 1e6:.2f} MB and an update adds at least 256 KiB: more than 0% over its "
        f"{full['bytes'] / 1e6:.2f} MB after its last full build")
    assert not list(tmp_path.glob("w.duckdb.tmp-*"))
    con = wh.connect(path)
    try:
        assert con.execute("SELECT n_dead, n_delta FROM models").fetchone() == (0, 0)
        assert con.execute("SELECT value FROM meta WHERE key = 'updates'").fetchone() == ("0",)
    finally:
        con.close()


def test_an_update_that_fits_in_the_bound_is_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    data, vecs = toy_data()
    path = tmp_path / "w.duckdb"
    full = wh.publish(path, data)
    # room for 1.5 blocks: the pre-check lets the update through (it adds at least one), the file after it decides
    # (this toy's first update adds 2 blocks: the delta and dead tables)
    monkeypatch.setattr("pipeline.warehouse.write.MAX_GROWTH", 1.5 * _BLOCK / full["bytes"])
    st = wh.publish(path, _changed_data(data, vecs)[0], incremental=True)
    assert st["mode"] == "full" and st["reason"].startswith("an update would leave the file at ")
    assert st["reason"].endswith(f" MB (DuckDB reuses freed blocks but never shrinks a file), more than "
                                 f"{1.5 * _BLOCK / full['bytes']:.0%} over its "
                                 f"{full['bytes'] / 1e6:.2f} MB after its last full build")
    assert not list(tmp_path.glob("w.duckdb.tmp-*"))


# ---------------------------------------------------------------------------------------------------------------
# vectors read as a publish needs them (wh.VectorReader)


class _Reader:
    """A VectorReader over ``vecs`` that records the rows of each read."""

    def __init__(self, vecs: np.ndarray) -> None:
        self.vecs, self.reads = vecs, []

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        self.reads.append(rows.tolist())
        return self.vecs[rows]

    def of(self, data: wh.WarehouseData) -> wh.WarehouseData:
        ids, vecs = data.vectors[MODEL]
        self.vecs = vecs
        return wh.WarehouseData(notes=data.notes, note_metrics=data.note_metrics, chunks=data.chunks, edges=data.edges,
                                vectors={MODEL: (ids, wh.VectorReader(len(ids), vecs.shape[1], self))},
                                bm25_blobs=data.bm25_blobs, run_info=data.run_info)


def _content(path: Path) -> dict[str, list[tuple]]:
    """Every table's rows, sorted (meta without its times and sizes); vector tables as (chunk_id, emb)."""
    from tests.conftest import warehouse_rows

    return warehouse_rows(path)


def test_incremental_publish_reads_only_the_vectors_it_inserts(tmp_path: Path, no_growth_bound):
    data, vecs = toy_data()
    new, _ = _changed_data(data, vecs)
    by_reader, by_array = tmp_path / "reader.duckdb", tmp_path / "array.duckdb"
    first = _Reader(vecs)
    assert wh.publish(by_reader, first.of(data), incremental=True)["mode"] == "full"   # no file yet
    assert first.reads == [list(range(N_CHUNKS))]                                         # all of them, once
    wh.publish(by_array, data)
    assert _content(by_reader) == _content(by_array)
    second = _Reader(vecs)
    st = wh.publish(by_reader, second.of(new), incremental=True)
    assert (st["mode"], st["vectors_added"]) == ("incremental", 10)
    ids = new.vectors[MODEL][0]
    assert second.reads == [[ids.index(f"c{10 + 5 + i:03d}") for i in range(5)] + list(range(295, 300))]
    assert [ids[i] for i in second.reads[0]] == ["c015", "c016", "c017", "c018", "c019",
                                                  "n000", "n001", "n002", "n003", "n004"]
    st = wh.publish(by_array, new, incremental=True)
    assert (st["mode"], st["vectors_added"]) == ("incremental", 10)
    assert _content(by_reader) == _content(by_array)                                      # the same rows


def test_a_readers_vectors_are_checked_when_read(tmp_path: Path, no_growth_bound):
    data, vecs = toy_data()
    path = tmp_path / "w.duckdb"
    wh.publish(path, data)
    before = _content(path)
    new, _ = _changed_data(data, vecs)
    ids = new.vectors[MODEL][0]
    nan = wh.WarehouseData(notes=new.notes, chunks=new.chunks, bm25_blobs=new.bm25_blobs, vectors={
        MODEL: (ids, wh.VectorReader(len(ids), DIM, lambda rows: np.full((len(rows), DIM), np.nan, np.float32)))})
    with pytest.raises(EmbeddingError, match="NaN/inf"):
        wh.publish(path, nan, incremental=True)
    short = wh.WarehouseData(notes=new.notes, chunks=new.chunks, bm25_blobs=new.bm25_blobs, vectors={
        MODEL: (ids, wh.VectorReader(len(ids), DIM, lambda rows: np.ones((len(rows), DIM - 1), np.float32)))})
    with pytest.raises(EmbeddingError, match=r"10 chunk ids but vectors of shape \(10, 383\)"):
        wh.publish(path, short, incremental=True)
    assert _content(path) == before and not list(tmp_path.glob("w.duckdb.tmp-*"))      # nothing written
    unknown = wh.WarehouseData(notes=new.notes, chunks=new.chunks[:10], vectors={
        MODEL: (ids, wh.VectorReader(len(ids), DIM, lambda rows: pytest.fail("read before the ids were checked")))})
    with pytest.raises(EmbeddingError, match="290 vectors for chunks not in the build"):
        wh.publish(path, unknown, incremental=True)


def test_an_update_starts_from_the_copy_made_ahead(tmp_path: Path, no_growth_bound, monkeypatch):
    data, vecs = toy_data()
    new, _ = _changed_data(data, vecs)
    ahead_path, plain = tmp_path / "ahead.duckdb", tmp_path / "plain.duckdb"
    for p in (ahead_path, plain):
        wh.publish(p, data)
    wh.publish(plain, new, incremental=True)
    copies: list[tuple[str, str]] = []
    real = __import__("shutil").copyfile
    monkeypatch.setattr("shutil.copyfile", lambda a, b: (copies.append((Path(a).name, Path(b).name)), real(a, b))[1])
    with wh.CopyAhead(ahead_path) as ahead:
        st = wh.publish(ahead_path, new, incremental=True, ahead=ahead)
    assert (st["mode"], st["vectors_added"]) == ("incremental", 10)
    assert copies == [("ahead.duckdb", f"ahead.duckdb.tmp-{__import__('os').getpid()}.ahead")]    # no second copy
    assert _content(ahead_path) == _content(plain)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ahead.duckdb", "plain.duckdb"]


def test_a_copy_ahead_of_a_file_that_changed_is_not_used(tmp_path: Path, no_growth_bound):
    data, vecs = toy_data()
    new, _ = _changed_data(data, vecs)
    path, plain = tmp_path / "wh.duckdb", tmp_path / "plain.duckdb"
    wh.publish(path, data)
    wh.publish(plain, new)
    wh.publish(plain, new, incremental=True)
    with wh.CopyAhead(path) as ahead:
        ahead._thread.join()
        wh.publish(path, new)                           # another publish swapped a new file in meanwhile
        st = wh.publish(path, new, incremental=True, ahead=ahead)
    assert (st["mode"], st["changed_chunks"], st["removed_chunks"]) == ("incremental", 0, 0)   # from the new file
    assert _content(path) == _content(plain)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.duckdb", "wh.duckdb"]


def test_a_copy_ahead_no_publish_took_is_removed(tmp_path: Path):
    data, _ = toy_data()
    path = tmp_path / "wh.duckdb"
    wh.publish(path, data)
    with wh.CopyAhead(path) as ahead:
        assert wh.publish(path, data, ahead=ahead)["mode"] == "full"     # a full publish does not take the copy
        ahead._thread.join()
        assert ahead.tmp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wh.duckdb"]


def test_a_model_without_any_vector_does_not_replace_the_vectors_search_uses(built_tiny_env: Path) -> None:
    """With a model that cannot be loaded (``DOCSVAULT_MODEL=bogus-model``: its sources failed, the other sources
    were never embedded by it) the warehouse was published with no vector at all, and the vector lanes answered
    nothing until a good build (a hostile tester, session 40). Such a publish is refused and the warehouse kept;
    a model with some vectors, or one that only joins those served, is published as before."""
    from pipeline.common import artifacts
    from pipeline.common.errors import PipelineError
    from pipeline.config import Settings
    from pipeline.stages.warehouse import refuse_dropping_vectors

    s = Settings.from_env()
    chunks = artifacts.load_chunks(s, "tiny")
    with pytest.raises(PipelineError) as err:
        refuse_dropping_vectors(s, {"bogus-model": chunks}, {}, "")
    assert str(err.value) == (
        f"warehouse kept as published: no chunk has a vector of 'bogus-model' (its embeddings failed: see the "
        f"sources' errors), and publishing now would drop the {len(chunks)} vectors of 'hash-384' that search uses; "
        "fix the model setting (DOCSVAULT_MODEL, DOCSVAULT_MULTILINGUAL_MODEL, DOCSVAULT_CROSSLINGUAL_MODEL or a "
        "source's `embedding`) and build again")
    have = {"hash-384": ([c.chunk_id for c in chunks], None)}
    refuse_dropping_vectors(s, {"hash-384": chunks, "e5": chunks[:1]}, have, "")      # e5 joins: published
    refuse_dropping_vectors(s, {"bogus-model": chunks}, {}, "no meta table")           # unusable: rebuilt
    refuse_dropping_vectors(s, {"bogus-model": chunks, "hash-384": chunks}, have, "")  # nothing dropped
