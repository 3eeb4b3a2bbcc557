"""Vector reads: k-nearest neighbours over the HNSW base + delta tables, exact scans, cached vectors by text hash."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from pipeline.common.errors import (
    EmbeddingError,
    WarehouseCorruptError,
)
from pipeline.warehouse.schema import _TABLE_RE, load_vss

log = logging.getLogger("pipeline.warehouse")


# ---------------------------------------------------------------------------------------------------------------
# read helpers


def list_models(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The vector tables of the warehouse (one per embedding model), by model id.

    Returns:
        ``[{"model_id": str, "table_name": str, "dim": int, "n": int}]`` (n = rows).
    """
    rows = con.execute("SELECT model_id, table_name, dim, n FROM models ORDER BY model_id").fetchall()
    return [{"model_id": r[0], "table_name": r[1], "dim": int(r[2]), "n": int(r[3])} for r in rows]


def indexed_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, int, int]]:
    """``[(model_id, table_name, dim, n_base)]`` by model id: each vector table's base part, the rows its HNSW index
    was built over (only a full publish writes it; an incremental one adds delta rows and dead ids beside it)."""
    rows = con.execute("SELECT model_id, table_name, dim, n_base FROM models ORDER BY model_id").fetchall()
    return [(str(r[0]), str(r[1]), int(r[2]), int(r[3] or 0)) for r in rows]


def _table_dim(con: duckdb.DuckDBPyConnection, table: str) -> int:
    if not _TABLE_RE.match(table):
        raise ValueError(f"not a vector table name: {table!r}")
    row = con.execute("SELECT dim FROM models WHERE table_name = ?", [table]).fetchone()
    if row is None:
        raise WarehouseCorruptError(f"vector table {table!r} is not in the models registry; run `docsvault build`")
    return int(row[0])


def _knn_sql(table: str, dim: int, k: int) -> str:
    # exactly one parameter, in the SELECT list, ordered by its alias: the only form the HNSW optimizer rewrites
    return (
        f"SELECT chunk_id, array_cosine_distance(emb, ?::FLOAT[{dim}]) AS d "
        f"FROM {table} ORDER BY d LIMIT {int(k)}"
    )


def _qparam(qvec: np.ndarray, dim: int) -> str:
    """The query vector as one text parameter, ``'[0.1, ...]'``, cast by ``?::FLOAT[dim]`` in SQL.

    Passing a Python list (or numpy array) makes duckdb's parameter conversion try ``import pandas`` twice per
    element when pandas is not installed (~23 ms per 384-d query); a string converts in ~0.1 ms. Floats are
    written with ``repr`` (round-trips float32 exactly) and the plan still uses HNSW.
    """
    q = np.asarray(qvec, dtype=np.float32).reshape(-1)
    if q.shape[0] != dim:
        raise EmbeddingError(f"query vector has {q.shape[0]} dims, the vector table has {dim}")
    if not np.isfinite(q).all():
        raise EmbeddingError("query vector contains NaN/inf")
    return "[" + ",".join(map(repr, q.tolist())) + "]"


def _vec_counts(con: duckdb.DuckDBPyConnection, table: str) -> tuple[int, int, int]:
    """(dim, n_dead, n_delta) of a vector table, from the models registry."""
    if not _TABLE_RE.match(table):
        raise ValueError(f"not a vector table name: {table!r}")
    row = con.execute("SELECT dim, n_dead, n_delta FROM models WHERE table_name = ?", [table]).fetchone()
    if row is None:
        raise WarehouseCorruptError(f"vector table {table!r} is not in the models registry; run `docsvault build`")
    return int(row[0]), int(row[1] or 0), int(row[2] or 0)


def _live_sql(table: str) -> str:
    """The live vectors of a model: base rows not marked dead, plus the delta rows."""
    return (
        f"(SELECT chunk_id, emb FROM {table} WHERE chunk_id NOT IN "
        f"(SELECT chunk_id FROM vec_dead WHERE table_name = '{table}') "
        f"UNION ALL SELECT chunk_id, emb FROM {table}_delta)"
    )


def vector_search(
    con: duckdb.DuckDBPyConnection, table: str, qvec: np.ndarray, k: int, dim: int | None = None
) -> list[tuple[str, float]]:
    """k nearest chunks by cosine distance through the table's HNSW index (approximate).

    The HNSW index covers the base rows; when an incremental build replaced or removed some of them (``vec_dead``)
    it is asked for ``k + n_dead`` rows and the dead ones are dropped, and the (small, unindexed) delta table of
    vectors added since is scanned exactly and merged.

    Args:
        con: from :func:`connect`.
        table: a vector table name from :func:`list_models`.
        qvec: float32 (dim,) query vector.
        k: number of neighbours (k >= 1).
        dim: the table's dimension (checked against the registry).

    Returns:
        ``[(chunk_id, cosine_distance)]`` nearest first; distance = 1 - cosine similarity, in [0, 2].
    """
    tdim, n_dead, n_delta = _vec_counts(con, table)
    dim = tdim
    q = _qparam(qvec, dim)
    load_vss(con)                          # a searcher's connection attaches without it (schema.connect)
    rows = [(r[0], float(r[1])) for r in con.execute(_knn_sql(table, dim, k + n_dead), [q]).fetchall()]
    if n_dead:
        dead = {r[0] for r in con.execute("SELECT chunk_id FROM vec_dead WHERE table_name = ?", [table]).fetchall()}
        rows = [r for r in rows if r[0] not in dead]
    if n_delta:
        rows += [(r[0], float(r[1])) for r in con.execute(
            f"SELECT chunk_id, array_cosine_distance(emb, ?::FLOAT[{dim}]) AS d FROM {table}_delta "
            f"ORDER BY d LIMIT {int(k)}", [q]).fetchall()]
        rows.sort(key=lambda r: (r[1], r[0]))
    return rows[: int(k)]


def brute_force_search(
    con: duckdb.DuckDBPyConnection, table: str, qvec: np.ndarray, k: int
) -> list[tuple[str, float]]:
    """Exact k nearest chunks (full scan of the live vectors, no index); ties by chunk id. For tests and benchmarks.

    Returns:
        ``[(chunk_id, cosine_distance)]`` nearest first.
    """
    dim = _table_dim(con, table)
    rows = con.execute(
        f"SELECT chunk_id, array_cosine_distance(emb, ?::FLOAT[{dim}]) AS d FROM {_live_sql(table)}",
        [_qparam(qvec, dim)],
    ).fetchall()
    rows.sort(key=lambda r: (r[1], r[0]))
    return [(r[0], float(r[1])) for r in rows[: int(k)]]


def load_live_vectors(con: duckdb.DuckDBPyConnection, table: str) -> tuple[list[str], np.ndarray]:
    """All live vectors of a model (base rows not marked dead, plus the delta rows), for an exact in-memory scan.

    Returns:
        ``(chunk_ids, vectors)``: ids in row order and float32 (n, dim), L2-normalised as stored. Memory: n x dim x 4
        bytes (30k chunks x 384-d = 46 MB).
    """
    dim = _table_dim(con, table)
    tbl = con.execute(f"SELECT chunk_id, emb FROM {_live_sql(table)} ORDER BY chunk_id").fetch_arrow_table()
    ids = tbl.column("chunk_id").to_pylist()
    emb = tbl.column("emb").combine_chunks()
    if len(ids) == 0:
        return [], np.zeros((0, dim), dtype=np.float32)
    flat = emb.flatten().to_numpy(zero_copy_only=False)      # FixedSizeList -> its values, offsets respected
    return ids, np.ascontiguousarray(flat, dtype=np.float32).reshape(len(ids), dim)


def _vector_cache_key(con: duckdb.DuckDBPyConnection, table: str, warehouse_path: Path) -> str:
    """Digest of what a table's live vectors depend on: the warehouse file and its WAL (path, size, mtime_ns), the
    table's registry row (dim, rows, dead, delta) and the build facts of ``meta`` (any write changes one of them)."""
    from pipeline.index.fastcache import entry_key, file_stamp

    reg = con.execute("SELECT dim, n, n_dead, n_delta FROM models WHERE table_name = ?", [table]).fetchone()
    meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('built_at', 'updates', 'input_key')"
                            ).fetchall())
    wal = Path(f"{warehouse_path}.wal")
    return entry_key(VECTOR_CACHE_FORMAT, table, file_stamp(Path(warehouse_path)), file_stamp(wal), list(reg or ()),
                     sorted(meta.items()))


#: bumped when the layout of a cached vector entry changes
VECTOR_CACHE_FORMAT = 1


def load_live_vectors_cached(con: duckdb.DuckDBPyConnection, table: str, warehouse_path: Path | None
                             ) -> tuple[list[str], np.ndarray]:
    """:func:`load_live_vectors` through a disk cache (:mod:`pipeline.index.fastcache`, kind ``vectors``): the
    vectors as a raw ``.npy`` memory-mapped read-only (pages are read on first touch and shared with the page cache,
    no second copy), the chunk ids as JSON. Keyed on the warehouse file + WAL stamp and the table's registry row,
    so a rebuilt or updated warehouse never serves stale vectors; a missing or corrupt entry is rebuilt from the
    warehouse. ``warehouse_path`` None (or the cache off / unwritable): plain :func:`load_live_vectors`.

    Returns:
        ``(chunk_ids, vectors)`` exactly as :func:`load_live_vectors` (same ids, same float32 values, row order by
        chunk id); the array is read-only.
    """
    from pipeline.index.fastcache import entry_key, load_entry, store_entry

    if warehouse_path is None:
        return load_live_vectors(con, table)
    key = _vector_cache_key(con, table, warehouse_path)
    # one entry per warehouse file and table (a newer one replaces it): two projects never evict each other
    name = f"{table}.{entry_key(str(Path(warehouse_path).resolve()))[:10]}"
    directory = load_entry("vectors", name, key)
    if directory is not None:
        try:
            ids = json.loads((directory / "ids.json").read_text("utf-8"))
            vecs = np.asarray(np.load(directory / "vectors.npy", mmap_mode="r", allow_pickle=False))
            if (isinstance(ids, list) and vecs.dtype == np.float32 and vecs.ndim == 2
                    and vecs.shape[0] == len(ids)):
                return ids, vecs
        except (OSError, ValueError) as exc:
            log.debug("vector cache %s unreadable (%s): rebuilding it", directory, exc)
    ids, vecs = load_live_vectors(con, table)
    if _vector_cache_key(con, table, warehouse_path) != key:     # the file was replaced while we read: no entry
        return ids, vecs

    def write(tmp: Path) -> None:
        np.save(tmp / "vectors.npy", vecs, allow_pickle=False)
        (tmp / "ids.json").write_text(json.dumps(ids), "utf-8")

    stored = store_entry("vectors", name, key, write, {"table": table, "rows": len(ids)})
    if stored is None:
        return ids, vecs
    # serve the mapped copy: one copy in memory, shared with the page cache; a plain ndarray view of the mapping
    # (numpy.memmap's per-slice overhead is ~70 us, paid per page scored)
    try:
        return ids, np.asarray(np.load(stored / "vectors.npy", mmap_mode="r", allow_pickle=False))
    except (OSError, ValueError) as exc:      # removed by a writer of a newer warehouse before we read it
        log.debug("vector cache %s gone before it was read (%s): serving the vectors read", stored, exc)
        return ids, vecs


def take_rows(vecs: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``vecs[rows]`` (a new C-contiguous array, the same values), read with ``os.preadv`` when ``vecs`` is a
    read-only memory map of a ``.npy`` file (:func:`load_live_vectors_cached`): a gather over the mapping faults in
    every page around each row (the kernel maps 64 KB around a fault), so the 3.6k scattered rows of one language
    cost a search process the whole 56 MB table in resident memory instead of their own 7 MB.

    Args:
        vecs: float (n, dim), C-contiguous, possibly memory-mapped.
        rows: int (m,) row positions, ascending.
    """
    rows = np.asarray(rows, dtype=np.int64)
    base = vecs
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base            # None, a memmap, or another owner (an Arrow buffer: DOCSVAULT_SEARCH_CACHE=off)
    if not isinstance(base, np.memmap):
        base = None
    filename = getattr(base, "filename", None)
    if (base is None or filename is None or not vecs.flags.c_contiguous or vecs.ndim != 2 or not len(rows)
            or vecs.ctypes.data != base.ctypes.data or (len(rows) > 1 and bool(np.any(np.diff(rows) <= 0)))):
        return vecs[rows]
    out = np.empty((len(rows), vecs.shape[1]), dtype=vecs.dtype)
    row_bytes = vecs.shape[1] * vecs.dtype.itemsize
    # runs of consecutive rows: one read each
    starts = np.flatnonzero(np.r_[True, np.diff(rows) != 1])
    ends = np.r_[starts[1:], len(rows)]
    flat = out.reshape(-1).view(np.uint8)
    try:
        fd = os.open(filename, os.O_RDONLY)
    except OSError:
        return vecs[rows]
    try:
        # a cache entry's path only ever holds the same content (its key); a different size means another file
        if os.fstat(fd).st_size != base.offset + vecs.nbytes:
            return vecs[rows]
        for a, b in zip(starts.tolist(), ends.tolist()):
            want = (b - a) * row_bytes
            got = os.preadv(fd, [memoryview(flat[a * row_bytes: b * row_bytes])], base.offset + int(rows[a]) * row_bytes)
            if got != want:
                return vecs[rows]
    except OSError:
        return vecs[rows]
    finally:
        os.close(fd)
    return out


def vectors_by_text_hash(con: duckdb.DuckDBPyConnection, model_id: str, hashes: Sequence[str]
                         ) -> dict[str, np.ndarray]:
    """Stored vectors of a model for chunk text hashes (the warehouse doubles as an embedding cache).

    Args:
        con: from :func:`connect`.
        model_id: the embedding model id (as in :func:`list_models`).
        hashes: ``models.text_hash(chunk.embed_text)`` values wanted.

    Returns:
        text hash -> float32 (dim,) vector, for the hashes found (none when the model has no table).
    """
    row = con.execute("SELECT table_name FROM models WHERE model_id = ?", [model_id]).fetchone()
    if row is None or not hashes:
        return {}
    table = row[0]
    if not _TABLE_RE.match(table):
        return {}
    con.register("_hashes_in", pa.table({"text_hash": pa.array(list(hashes), pa.string())}))
    try:
        # the chunks first (a small scan): texts new to the warehouse, the usual case, never read the vectors
        found = con.execute("SELECT chunk_id, text_hash FROM chunks WHERE text_hash IN "
                            "(SELECT text_hash FROM _hashes_in)").fetch_arrow_table()
        if found.num_rows == 0:
            return {}
        con.register("_found_in", found)
        res = con.execute(
            f"SELECT c.text_hash, any_value(v.emb) FROM {_live_sql(table)} v JOIN _found_in c USING (chunk_id) "
            "GROUP BY c.text_hash"
        ).fetch_arrow_table()
    finally:
        con.unregister("_hashes_in")
        con.unregister("_found_in")     # a no-op when it was never registered
    if res.num_rows == 0:
        return {}
    emb = res.column(1).combine_chunks()
    dim = emb.type.list_size
    flat = emb.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)
    return dict(zip(res.column(0).to_pylist(), flat))


def explain_vector_search(
    con: duckdb.DuckDBPyConnection, table: str, qvec: np.ndarray | None = None, k: int = 10
) -> str:
    """The physical plan of :func:`vector_search` (contains ``HNSW_INDEX_SCAN`` when the index is used).

    Args:
        qvec: a query vector (dim,); default (or a scalar) a unit vector, which plans the same.
    """
    dim = _table_dim(con, table)
    if qvec is None or np.ndim(qvec) == 0:
        qvec = np.eye(1, dim, dtype=np.float32)[0]
    load_vss(con)
    rows = con.execute("EXPLAIN " + _knn_sql(table, dim, k), [_qparam(qvec, dim)]).fetchall()
    return "\n".join(str(r[1]) for r in rows)
