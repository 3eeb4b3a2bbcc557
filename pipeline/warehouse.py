"""The DuckDB warehouse: the only module with SQL.

One file (``Settings.warehouse_path``) holds notes, chunks, links, one vector table per embedding model with an
HNSW index (cosine), and the serialized BM25 index. It is never modified in place: :func:`publish` writes a new file
next to it (or, incrementally, a copy of the current one) and swaps it in with ``os.replace``, so a reader keeps
querying the file it opened and never sees a half-built one; a failed or killed build leaves the previous file
untouched.

Incremental updates and the HNSW index. Modifying an HNSW-indexed table makes DuckDB rewrite the whole index at the
next checkpoint without freeing the old blocks (measured: +44 MB per update on a 25k x 384 table, unbounded), and
rebuilding the index costs ~10-25 s for 25k vectors. So a model's vectors live in three tables:

* ``vec_<slug>``: the base table with the HNSW index, written only by a full publish;
* ``vec_<slug>_delta``: vectors of chunks added or changed since (no index; scanned exactly, it stays small);
* ``vec_dead``: ``(table_name, chunk_id)`` of base rows that were removed or replaced.

The live vectors are ``base - dead + delta``; :func:`vector_search` asks the HNSW index for ``k + n_dead`` rows,
drops dead ones and merges the exact delta scan. When delta + dead exceed ``max_delta`` of the base (or the file
grew past 1.5x its size after the last full publish), :func:`publish` writes a fresh file instead (full rebuild).

Opening (:func:`connect`) always goes ``:memory:`` -> load ``vss``/``fts`` -> ``ATTACH`` the file: a write-ahead
log that touches an HNSW index can only be replayed once ``vss`` is loaded (EC-19, duckdb-vss#65).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from pipeline.embed import model_slug
from pipeline.errors import EmbeddingError, PipelineError, WarehouseCorruptError, WarehouseNotBuiltError
from pipeline.models import Chunk, Edge, Note, text_hash

log = logging.getLogger(__name__)

__all__ = [
    "EVAL_RUN_COLUMNS",
    "SCHEMA_VERSION",
    "WarehouseData",
    "append_eval_runs",
    "brute_force_search",
    "connect",
    "explain_vector_search",
    "fetch_chunks",
    "list_models",
    "list_sources",
    "load_bm25_blobs",
    "load_chunk_keys",
    "load_note_keys",
    "model_source_counts",
    "note_by_vault_path",
    "note_hashes",
    "note_tags",
    "notes_by_source_path",
    "publish",
    "read_eval_runs",
    "stats",
    "vector_search",
    "vector_table_name",
    "vectors_by_text_hash",
]

SCHEMA_VERSION = "3"
_TABLE_RE = re.compile(r"^vec_[a-z0-9_]+$")

_SCHEMA = """
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE notes (
    note_id VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, source_path VARCHAR NOT NULL, vault_path VARCHAR NOT NULL,
    title VARCHAR, url VARCHAR, aliases VARCHAR[], tags VARCHAR[], description VARCHAR, frontmatter JSON,
    content_hash VARCHAR, in_degree INTEGER, pagerank DOUBLE
);
CREATE TABLE chunks (
    chunk_id VARCHAR PRIMARY KEY, note_id VARCHAR NOT NULL, source VARCHAR NOT NULL, ordinal INTEGER,
    heading VARCHAR, breadcrumb VARCHAR, text VARCHAR, text_hash VARCHAR, language VARCHAR
);
CREATE TABLE links (src VARCHAR NOT NULL, dst VARCHAR, target VARCHAR, kind VARCHAR, count INTEGER);
CREATE TABLE models (
    model_id VARCHAR PRIMARY KEY, table_name VARCHAR NOT NULL, dim INTEGER NOT NULL, n BIGINT,
    n_base BIGINT, n_dead BIGINT, n_delta BIGINT
);
CREATE TABLE vec_dead (table_name VARCHAR NOT NULL, chunk_id VARCHAR NOT NULL);
CREATE TABLE bm25_index (name VARCHAR PRIMARY KEY, data BLOB);
"""


@dataclass(frozen=True, kw_only=True)
class WarehouseData:
    """Everything one warehouse file holds, as produced by the earlier stages.

    Attributes:
        notes: all notes of all sources.
        note_metrics: note_id -> (in_degree, pagerank) from the link graph; missing notes get (0, 0.0).
        chunks: all chunks (``chunk.note_id`` must be a note's id).
        edges: resolved and dangling links.
        vectors: model_id -> (chunk_ids, float32 (n, dim) L2-normalised vectors); one vector table per model.
        bm25_blobs: serialized BM25 index (``Bm25Index.to_blobs()``).
        run_info: free str -> str facts stored in ``meta`` (e.g. sources, revisions, build id).
    """

    notes: Sequence[Note]
    chunks: Sequence[Chunk]
    note_metrics: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    edges: Sequence[Edge] = ()
    vectors: Mapping[str, tuple[Sequence[str], np.ndarray]] = field(default_factory=dict)
    bm25_blobs: Mapping[str, bytes] = field(default_factory=dict)
    run_info: Mapping[str, str] = field(default_factory=dict)


def vector_table_name(model_id: str) -> str:
    """``vec_<slug>`` for a model id (the slug is ``[a-z0-9_]``, so the name is a safe SQL identifier)."""
    return f"vec_{model_slug(model_id)}"


def _quote_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _init(con: duckdb.DuckDBPyConnection) -> None:
    import duckdb_ext

    duckdb_ext.init(con)
    con.execute("LOAD vss")
    con.execute("LOAD fts")
    con.execute("SET hnsw_enable_experimental_persistence = true")


# ---------------------------------------------------------------------------------------------------------------
# open


def _attach(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    try:
        _init(con)
        mode = " (READ_ONLY)" if read_only else ""
        con.execute(f"ATTACH {_quote_path(path)} AS wh{mode}")
        con.execute("USE wh")
    except BaseException:
        con.close()
        raise
    return con


def connect(path: Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the warehouse file.

    Order matters: an in-memory connection loads ``vss``/``fts`` first, then the file is attached as ``wh`` and made
    the default catalog, so a WAL that touches an HNSW index replays (EC-19). A WAL that a read-only attach cannot
    replay (one that creates tables) is replayed once read-write and checkpointed, then the file is attached
    read-only.

    Args:
        path: the warehouse file.
        read_only: attach read-only (search, CLI, MCP); False only for maintenance.

    Returns:
        A connection whose default database is the warehouse. The caller closes it.

    Raises:
        WarehouseNotBuiltError: the file does not exist.
        WarehouseCorruptError: the file cannot be attached, has no ``meta`` table, or another ``schema_version``.
    """
    path = Path(path)
    if not path.exists():
        raise WarehouseNotBuiltError(f"no warehouse at {path}: run `docsvault build` first")
    try:
        con = _attach(path, read_only)
    except duckdb.Error as exc:
        wal = Path(f"{path}.wal")
        if not (read_only and wal.exists()):
            raise WarehouseCorruptError(
                f"cannot open the warehouse {path}: {exc}. Run `docsvault build` to rebuild it"
            ) from exc
        # a crashed writer left a WAL that cannot be replayed read-only: replay it once read-write, checkpoint
        log.warning("warehouse %s: replaying the write-ahead log left by an interrupted writer (%s)", path, exc)
        try:
            writer = _attach(path, read_only=False)
            writer.execute("CHECKPOINT")
            writer.close()
            con = _attach(path, read_only)
        except duckdb.Error as exc2:
            raise WarehouseCorruptError(
                f"cannot open the warehouse {path}: {exc2} (its write-ahead log {wal} could not be replayed). "
                "Run `docsvault build` to rebuild it"
            ) from exc2
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except duckdb.Error as exc:
        con.close()
        raise WarehouseCorruptError(
            f"{path} is not a docsvault warehouse (no meta table: {exc}); run `docsvault build` to rebuild it"
        ) from exc
    if row is None or row[0] != SCHEMA_VERSION:
        con.close()
        found = row[0] if row else "none"
        raise WarehouseCorruptError(
            f"{path} has schema version {found}, this docsvault needs {SCHEMA_VERSION}: run `docsvault build`"
        )
    return con


# ---------------------------------------------------------------------------------------------------------------
# publish


def _insert(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table) -> None:
    con.register("_arrow_in", data)
    try:
        cols = ", ".join(data.column_names)
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _arrow_in")
    finally:
        con.unregister("_arrow_in")


def _str_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def _notes_table(notes: Sequence[Note], metrics: Mapping[str, tuple[int, float]]) -> pa.Table:
    ids = [n.note_id for n in notes]
    m = [metrics.get(i, (0, 0.0)) for i in ids]
    return pa.table(
        {
            "note_id": pa.array(ids, pa.string()),
            "source": pa.array([n.source for n in notes], pa.string()),
            "source_path": pa.array([n.source_path for n in notes], pa.string()),
            "vault_path": pa.array([n.vault_path for n in notes], pa.string()),
            "title": pa.array([n.title for n in notes], pa.string()),
            "url": pa.array([n.url for n in notes], pa.string()),
            "aliases": pa.array([list(n.aliases) for n in notes], pa.list_(pa.string())),
            "tags": pa.array([_str_list(n.frontmatter.get("tags")) for n in notes], pa.list_(pa.string())),
            "description": pa.array([n.description for n in notes], pa.string()),
            "frontmatter": pa.array(
                [json.dumps(n.frontmatter, ensure_ascii=False, default=str) for n in notes], pa.string()
            ),
            "content_hash": pa.array([text_hash(n.body) for n in notes], pa.string()),
            "in_degree": pa.array([int(x[0]) for x in m], pa.int32()),
            "pagerank": pa.array([float(x[1]) for x in m], pa.float64()),
        }
    )


def _chunks_table(chunks: Sequence[Chunk]) -> pa.Table:
    return pa.table(
        {
            "chunk_id": pa.array([c.chunk_id for c in chunks], pa.string()),
            "note_id": pa.array([c.note_id for c in chunks], pa.string()),
            "source": pa.array([c.source for c in chunks], pa.string()),
            "ordinal": pa.array([c.ordinal for c in chunks], pa.int32()),
            "heading": pa.array([c.heading for c in chunks], pa.string()),
            "breadcrumb": pa.array([c.breadcrumb for c in chunks], pa.string()),
            "text": pa.array([c.text for c in chunks], pa.string()),
            "text_hash": pa.array([c.text_hash for c in chunks], pa.string()),
            "language": pa.array([c.language for c in chunks], pa.string()),
        }
    )


def _links_table(edges: Sequence[Edge]) -> pa.Table:
    return pa.table(
        {
            "src": pa.array([e.src for e in edges], pa.string()),
            "dst": pa.array([e.dst for e in edges], pa.string()),
            "target": pa.array([e.target for e in edges], pa.string()),
            "kind": pa.array([e.kind for e in edges], pa.string()),
            "count": pa.array([e.count for e in edges], pa.int32()),
        }
    )


def _vectors_table(model_id: str, chunk_ids: Sequence[str], vecs: np.ndarray, known: set[str]) -> pa.Table:
    vecs = np.ascontiguousarray(vecs, dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape[0] != len(chunk_ids) or vecs.shape[1] < 1:
        raise EmbeddingError(
            f"model {model_id!r}: {len(chunk_ids)} chunk ids but vectors of shape {vecs.shape}; re-run the embed step"
        )
    unknown = [c for c in chunk_ids if c not in known]
    if unknown:
        raise EmbeddingError(
            f"model {model_id!r}: {len(unknown)} vectors for chunks not in the build (e.g. {unknown[0]!r}); "
            "re-run the embed step"
        )
    if not np.isfinite(vecs).all():
        raise EmbeddingError(f"model {model_id!r}: vectors contain NaN/inf; re-run the embed step")
    flat = pa.array(vecs.reshape(-1), pa.float32())
    return pa.table(
        {
            "chunk_id": pa.array(list(chunk_ids), pa.string()),
            "emb": pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1]),
        }
    )


class _NotIncremental(Exception):
    """Why an incremental update is not possible (a full publish follows)."""


def _leftovers(path: Path) -> None:
    """Remove temp files of earlier publishes whose process is gone (a killed build)."""
    from pipeline.lock import pid_alive

    for p in path.parent.glob(f"{path.name}.tmp-*"):
        m = re.match(rf"^{re.escape(path.name)}\.tmp-(\d+)", p.name)
        if m and (int(m.group(1)) == os.getpid() or not pid_alive(int(m.group(1)))):
            p.unlink(missing_ok=True)


def _ids_table(ids: Sequence[str]) -> pa.Table:
    return pa.table({"chunk_id": pa.array(list(ids), pa.string())})


def _delete_ids(con: duckdb.DuckDBPyConnection, table: str, ids: Sequence[str], extra: str = "") -> None:
    if not ids:
        return
    con.register("_ids_in", _ids_table(ids))
    try:
        con.execute(f"DELETE FROM {table} WHERE chunk_id IN (SELECT chunk_id FROM _ids_in){extra}")
    finally:
        con.unregister("_ids_in")


def _write_common(con: duckdb.DuckDBPyConnection, data: WarehouseData, meta: Mapping[str, str],
                  notes: Sequence[dict[str, Any]] | None = None, links: bool = True) -> None:
    """Insert meta, notes (all, or only these rows of ``_notes_table``), links (unless ``links`` is False), BM25."""
    _insert(con, "meta", pa.table({"key": list(meta), "value": [str(v) for v in meta.values()]}))
    if notes is None:
        _insert(con, "notes", _notes_table(data.notes, data.note_metrics))
    elif notes:
        table = _notes_table(data.notes[:0], {})
        _insert(con, "notes", pa.Table.from_pylist(list(notes), schema=table.schema))
    if links:
        _insert(con, "links", _links_table(data.edges))
    if data.bm25_blobs:
        blobs = data.bm25_blobs
        _insert(con, "bm25_index", pa.table({"name": list(blobs), "data": pa.array(list(blobs.values()), pa.binary())}))


def _remove_temp(tmp: Path) -> None:
    """Delete an unpublished warehouse file and its WAL (a failed or abandoned publish)."""
    for leftover in (tmp, Path(f"{tmp}.wal")):
        leftover.unlink(missing_ok=True)


def _swap(tmp: Path, path: Path) -> None:
    # a WAL left by an earlier crashed writer of the old file must not be replayed onto the new one
    Path(f"{path}.wal").unlink(missing_ok=True)
    os.replace(tmp, path)
    try:  # make the rename durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _publish_full(path: Path, tmp: Path, data: WarehouseData, vec_tables: Mapping[str, pa.Table],
                  meta: dict[str, str]) -> dict[str, int]:
    con = duckdb.connect(str(tmp))
    try:
        _init(con)
        con.execute(_SCHEMA)
        meta = {**meta, "full_built_at": meta["built_at"], "updates": "0"}
        _write_common(con, data, meta)
        _insert(con, "chunks", _chunks_table(data.chunks))
        n_vectors = 0
        for model_id, table in vec_tables.items():
            name = vector_table_name(model_id)
            dim = table.schema.field("emb").type.list_size
            con.execute(f"CREATE TABLE {name} (chunk_id VARCHAR NOT NULL, emb FLOAT[{dim}] NOT NULL)")
            con.execute(f"CREATE TABLE {name}_delta (chunk_id VARCHAR NOT NULL, emb FLOAT[{dim}] NOT NULL)")
            _insert(con, name, table)
            con.execute(f"CREATE INDEX {name}_hnsw ON {name} USING HNSW (emb) WITH (metric = 'cosine')")
            n = table.num_rows
            _insert(
                con,
                "models",
                pa.table({"model_id": [model_id], "table_name": [name], "dim": pa.array([dim], pa.int32()),
                          "n": pa.array([n], pa.int64()), "n_base": pa.array([n], pa.int64()),
                          "n_dead": pa.array([0], pa.int64()), "n_delta": pa.array([0], pa.int64())}),
            )
            n_vectors += n
        con.execute("CHECKPOINT")
        con.execute("INSERT INTO meta VALUES ('full_bytes', ?)", [str(tmp.stat().st_size)])
        con.execute("CHECKPOINT")
        con.close()
        _swap(tmp, path)
    except BaseException:
        con.close()
        _remove_temp(tmp)
        raise
    return {"vectors": n_vectors, "changed_chunks": len(data.chunks), "removed_chunks": 0,
            "vectors_added": n_vectors, "vectors_removed": 0}


def _publish_incremental(path: Path, tmp: Path, data: WarehouseData, vec_tables: Mapping[str, pa.Table],
                         meta: dict[str, str], max_delta: float) -> dict[str, int]:
    import shutil

    if not path.exists():
        raise _NotIncremental("no warehouse yet")
    if Path(f"{path}.wal").exists():
        raise _NotIncremental("the current file has a write-ahead log of an interrupted writer")
    shutil.copyfile(path, tmp)
    try:
        con = _attach(tmp, read_only=False)
    except duckdb.Error as exc:
        raise _NotIncremental(f"the current file cannot be opened ({exc})") from None
    try:
        try:
            old_meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        except duckdb.Error as exc:
            raise _NotIncremental(f"the current file has no meta table ({exc})") from None
        if old_meta.get("schema_version") != SCHEMA_VERSION:
            raise _NotIncremental(f"schema version {old_meta.get('schema_version')} -> {SCHEMA_VERSION}")
        full_bytes = int(old_meta.get("full_bytes") or 0)
        size = path.stat().st_size
        if full_bytes and size > 1.5 * full_bytes:
            raise _NotIncremental(f"the file grew to {size} bytes from {full_bytes} after its last full build")
        models = {r[0]: (r[1], int(r[2])) for r in
                  con.execute("SELECT model_id, table_name, dim FROM models").fetchall()}
        if set(models) != set(vec_tables):
            raise _NotIncremental(f"embedding models changed: {sorted(models)} -> {sorted(vec_tables)}")
        for model_id, table in vec_tables.items():
            if models[model_id][1] != table.schema.field("emb").type.list_size:
                raise _NotIncremental(f"model {model_id}: dimension changed")

        old = {r[0]: tuple(r[1:]) for r in con.execute(
            "SELECT chunk_id, note_id, source, ordinal, heading, breadcrumb, text_hash FROM chunks").fetchall()}
        new_chunks = {c.chunk_id: c for c in data.chunks}
        new = {cid: (c.note_id, c.source, c.ordinal, c.heading, c.breadcrumb, c.text_hash)
               for cid, c in new_chunks.items()}
        changed = [cid for cid, t in new.items() if old.get(cid) != t]
        removed = [cid for cid in old if cid not in new]
        text_changed = {cid for cid in changed if cid not in old or old[cid][5] != new[cid][5]}

        plans: dict[str, dict[str, Any]] = {}
        for model_id, table in vec_tables.items():
            name = models[model_id][0]
            base = {r[0] for r in con.execute(f"SELECT chunk_id FROM {name}").fetchall()}
            dead = {r[0] for r in con.execute("SELECT chunk_id FROM vec_dead WHERE table_name = ?", [name]).fetchall()}
            delta = {r[0] for r in con.execute(f"SELECT chunk_id FROM {name}_delta").fetchall()}
            live = (base - dead) | delta
            ids = table.column("chunk_id").to_pylist()
            wanted = set(ids)
            remove = (live - wanted) | (live & wanted & text_changed)
            add = (wanted - live) | (wanted & text_changed)
            from_delta = remove & delta
            to_dead = remove - delta
            n_dead = len(dead | to_dead)
            n_delta = len(delta - from_delta) + len(add)
            limit = max(max_delta * len(base), 200)
            if n_dead + n_delta > limit:
                raise _NotIncremental(f"model {model_id}: {n_dead + n_delta} vectors outside the HNSW index "
                                      f"(limit {int(limit)}); rebuilding the index")
            rows = [i for i, cid in enumerate(ids) if cid in add]
            plans[name] = {"model_id": model_id, "from_delta": sorted(from_delta), "to_dead": sorted(to_dead),
                           "add": table.take(pa.array(rows, pa.int64())), "n_base": len(base),
                           "n_dead": n_dead, "n_delta": n_delta}

        # notes and links: only rows that differ (a rewrite would leave the old blocks unused in the file)
        notes_new = _notes_table(data.notes, data.note_metrics)
        note_rows = {r["note_id"]: r for r in notes_new.to_pylist()}
        notes_sql = f"SELECT {', '.join(notes_new.column_names)} FROM notes"
        notes_old = {r["note_id"]: r for r in con.execute(notes_sql).fetch_arrow_table().to_pylist()}
        notes_changed = [nid for nid, r in note_rows.items() if notes_old.get(nid) != r]
        notes_removed = [nid for nid in notes_old if nid not in note_rows]
        links_new = _links_table(data.edges)
        links_old = con.execute(f"SELECT {', '.join(links_new.column_names)} FROM links").fetch_arrow_table()
        links_same = Counter(tuple(r.values()) for r in links_old.to_pylist()) == \
            Counter(tuple(r.values()) for r in links_new.to_pylist())

        con.execute("BEGIN TRANSACTION")
        _delete_ids(con, "chunks", removed + changed)
        _insert(con, "chunks", _chunks_table([new_chunks[cid] for cid in changed]))
        for table in ("meta", "bm25_index", *(() if links_same else ("links",))):
            con.execute(f"DELETE FROM {table}")
        if notes_changed or notes_removed:
            con.register("_notes_out", pa.table({"note_id": pa.array(notes_changed + notes_removed, pa.string())}))
            try:
                con.execute("DELETE FROM notes WHERE note_id IN (SELECT note_id FROM _notes_out)")
            finally:
                con.unregister("_notes_out")
        meta = {**meta, "full_built_at": old_meta.get("full_built_at", ""), "full_bytes": str(full_bytes or size),
                "updates": str(int(old_meta.get("updates") or 0) + 1)}
        _write_common(con, data, meta, notes=[note_rows[nid] for nid in notes_changed], links=not links_same)
        n_vectors = added = dropped = 0
        for name, plan in plans.items():
            _delete_ids(con, f"{name}_delta", plan["from_delta"])
            if plan["to_dead"]:
                _insert(con, "vec_dead", pa.table({"table_name": pa.array([name] * len(plan["to_dead"]), pa.string()),
                                                   "chunk_id": pa.array(plan["to_dead"], pa.string())}))
            if plan["add"].num_rows:
                _insert(con, f"{name}_delta", plan["add"])
            live = plan["n_base"] - plan["n_dead"] + plan["n_delta"]
            con.execute("UPDATE models SET n = ?, n_base = ?, n_dead = ?, n_delta = ? WHERE table_name = ?",
                        [live, plan["n_base"], plan["n_dead"], plan["n_delta"], name])
            n_vectors += live
            added += plan["add"].num_rows
            dropped += len(plan["from_delta"]) + len(plan["to_dead"])
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        con.close()
        _swap(tmp, path)
    except BaseException:
        con.close()
        _remove_temp(tmp)
        raise
    return {"vectors": n_vectors, "changed_chunks": len(changed), "removed_chunks": len(removed),
            "vectors_added": added, "vectors_removed": dropped, "notes_rewritten": len(notes_changed),
            "links_rewritten": int(not links_same)}


def publish(path: Path, data: WarehouseData, *, incremental: bool = False, max_delta: float = 0.1
            ) -> dict[str, Any]:
    """Write the warehouse and swap it in atomically.

    Full: builds ``<path>.tmp-<pid>`` from scratch (tables loaded through Arrow, one HNSW index per vector table,
    CHECKPOINT). Incremental (``incremental=True`` and possible): copies the current file to the temp path and
    applies only the differences (changed/removed chunks, vectors of changed texts into the delta table, notes,
    links, BM25 and meta replaced) — see the module doc. Either way the temp file is closed, then ``os.replace``-d
    onto ``path``: readers that opened the old file keep working on it; if anything fails (or the process is
    killed) the old file stays and the temp file is removed (by the next publish when killed).

    An incremental update falls back to a full publish (``reason`` says why) when there is no current file, it
    cannot be opened, has another schema version, other embedding models or dimensions, grew past 1.5x its size
    after its last full publish, or more than ``max_delta`` of a model's vectors (at least 200) would sit outside
    its HNSW index.

    Args:
        path: the warehouse file (its directory is created).
        data: everything the warehouse must hold after the publish.
        incremental: try an incremental update first.
        max_delta: share of a model's base vectors allowed in its delta + dead tables.

    Returns:
        ``notes``, ``chunks``, ``links``, ``models``, ``vectors`` (live rows over all models), ``bm25_blobs``,
        ``bytes`` (file size), ``ms`` (wall time), ``mode`` ("full" | "incremental"), ``reason`` (why full),
        ``changed_chunks``, ``removed_chunks``, ``vectors_added``, ``vectors_removed``.

    Raises:
        EmbeddingError: a vector array has the wrong shape, NaNs, or ids of unknown chunks.
        PipelineError: two notes or two chunks share an id.
        duckdb.Error: the database write failed (disk full, ...); the old file is untouched.
    """
    started = time.monotonic()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    _leftovers(path)

    for what, ids in (("note", [n.note_id for n in data.notes]), ("chunk", [c.chunk_id for c in data.chunks])):
        if len(set(ids)) != len(ids):
            dup = Counter(ids).most_common(1)[0][0]
            raise PipelineError(f"two {what}s share the id {dup!r}; fix the duplicate before publishing")
    known = {c.chunk_id for c in data.chunks}
    vec_tables = {
        model_id: _vectors_table(model_id, ids, vecs, known) for model_id, (ids, vecs) in data.vectors.items()
    }
    names = [vector_table_name(m) for m in vec_tables]
    if len(set(names)) != len(names):
        raise EmbeddingError(f"two model ids map to the same vector table: {sorted(vec_tables)}")

    from pipeline import __version__

    meta = {
        "schema_version": SCHEMA_VERSION,
        "docsvault_version": __version__,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **{str(k): str(v) for k, v in data.run_info.items()
           if k not in ("schema_version", "full_bytes", "full_built_at", "updates")},
    }
    mode, reason = "full", "requested"
    result: dict[str, int] | None = None
    if incremental:
        try:
            result = _publish_incremental(path, tmp, data, vec_tables, meta, max_delta)
            mode, reason = "incremental", ""
        except _NotIncremental as why:
            reason = str(why)
            _remove_temp(tmp)
            log.info("warehouse %s: full publish (%s)", path, reason)
        except duckdb.Error as exc:
            reason = f"incremental update failed: {exc}"
            log.warning("warehouse %s: %s; writing a new file", path, reason)
    if result is None:
        result = _publish_full(path, tmp, data, vec_tables, meta)
    return {
        "notes": len(data.notes),
        "chunks": len(data.chunks),
        "links": len(data.edges),
        "models": len(vec_tables),
        "bm25_blobs": len(data.bm25_blobs),
        **result,
        "bytes": path.stat().st_size,
        "ms": int((time.monotonic() - started) * 1000),
        "mode": mode,
        "reason": reason,
    }


# ---------------------------------------------------------------------------------------------------------------
# read helpers


def list_models(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The vector tables of the warehouse (one per embedding model), by model id.

    Returns:
        ``[{"model_id": str, "table_name": str, "dim": int, "n": int}]`` (n = rows).
    """
    rows = con.execute("SELECT model_id, table_name, dim, n FROM models ORDER BY model_id").fetchall()
    return [{"model_id": r[0], "table_name": r[1], "dim": int(r[2]), "n": int(r[3])} for r in rows]


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
        res = con.execute(
            f"SELECT c.text_hash, any_value(v.emb) FROM {_live_sql(table)} v JOIN chunks c USING (chunk_id) "
            "WHERE c.text_hash IN (SELECT text_hash FROM _hashes_in) GROUP BY c.text_hash"
        ).fetch_arrow_table()
    finally:
        con.unregister("_hashes_in")
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
    rows = con.execute("EXPLAIN " + _knn_sql(table, dim, k), [_qparam(qvec, dim)]).fetchall()
    return "\n".join(str(r[1]) for r in rows)


def load_bm25_blobs(con: duckdb.DuckDBPyConnection) -> dict[str, bytes]:
    """The serialized BM25 index (name -> bytes); empty when the build stored none."""
    return {r[0]: bytes(r[1]) for r in con.execute("SELECT name, data FROM bm25_index").fetchall()}


def load_chunk_keys(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Every chunk's ``chunk_id``, ``note_id``, ``source``, ``ordinal``, ``language`` (its note's detected language,
    :mod:`pipeline.language`) as an Arrow table in chunk id order, for in-memory lookups."""
    return con.execute(
        "SELECT chunk_id, note_id, source, ordinal, language FROM chunks ORDER BY chunk_id").fetch_arrow_table()


def load_note_keys(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Every note's ``note_id``, ``source``, ``source_path``, ``vault_path``, ``title`` (Arrow table)."""
    return con.execute("SELECT note_id, source, source_path, vault_path, title FROM notes ORDER BY note_id").fetch_arrow_table()


def read_meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The ``meta`` table as a dict (schema version, build time, input key, ...)."""
    return dict(con.execute("SELECT key, value FROM meta").fetchall())


def load_graph(con: duckdb.DuckDBPyConnection) -> tuple[pa.Table, pa.Table]:
    """Resolved links ``(src, dst, count)`` between distinct notes, and per note ``(note_id, in_degree, pagerank,
    frontmatter)`` (Arrow tables) - what the graph lane of search needs."""
    links = con.execute(
        "SELECT src, dst, sum(count)::INTEGER AS count FROM links WHERE dst IS NOT NULL AND dst <> src "
        "GROUP BY src, dst ORDER BY src, dst"
    ).fetch_arrow_table()
    notes = con.execute(
        "SELECT note_id, in_degree, pagerank, frontmatter FROM notes ORDER BY note_id"
    ).fetch_arrow_table()
    return links, notes


def model_source_counts(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, int]:
    """Rows of a vector table per source (to size over-fetching when a source filter applies)."""
    _table_dim(con, table)  # validates the name
    rows = con.execute(
        f"SELECT c.source, count(*) FROM {_live_sql(table)} v JOIN chunks c USING (chunk_id) GROUP BY c.source"
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def list_sources(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Names of the sources with notes in the warehouse, sorted."""
    return [r[0] for r in con.execute("SELECT DISTINCT source FROM notes ORDER BY source").fetchall()]


_CHUNK_COLS = (
    "chunk_id", "note_id", "source", "ordinal", "heading", "breadcrumb", "text",
    "source_path", "vault_path", "title", "url",
)


def fetch_chunks(con: duckdb.DuckDBPyConnection, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Chunks with their note's fields.

    Returns:
        chunk_id -> dict with keys chunk_id, note_id, source, ordinal, heading, breadcrumb, text, source_path,
        vault_path, title, url. Unknown ids are absent.
    """
    if not chunk_ids:
        return {}
    rows = con.execute(
        "SELECT c.chunk_id, c.note_id, c.source, c.ordinal, c.heading, c.breadcrumb, c.text, "
        "n.source_path, n.vault_path, n.title, n.url "
        "FROM chunks c JOIN notes n USING (note_id) WHERE list_contains(string_split(?, chr(31)), c.chunk_id)",
        ["\x1f".join(chunk_ids)],  # one text parameter: a list parameter costs ~0.1 ms per element
    ).fetchall()
    return {r[0]: dict(zip(_CHUNK_COLS, r)) for r in rows}


def stats(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Counts per table and per source, the models and the ``meta`` facts (JSON-safe dict)."""
    out: dict[str, Any] = {
        "meta": dict(con.execute("SELECT key, value FROM meta ORDER BY key").fetchall()),
        "notes": con.execute("SELECT count(*) FROM notes").fetchone()[0],  # type: ignore[index]
        "chunks": con.execute("SELECT count(*) FROM chunks").fetchone()[0],  # type: ignore[index]
        "links": con.execute("SELECT count(*) FROM links").fetchone()[0],  # type: ignore[index]
        "dangling_links": con.execute("SELECT count(*) FROM links WHERE dst IS NULL").fetchone()[0],  # type: ignore[index]
    }
    per_source = con.execute(
        "SELECT n.source, count(DISTINCT n.note_id), count(c.chunk_id) "
        "FROM notes n LEFT JOIN chunks c USING (note_id) GROUP BY n.source ORDER BY n.source"
    ).fetchall()
    out["sources"] = {r[0]: {"notes": int(r[1]), "chunks": int(r[2])} for r in per_source}
    out["models"] = list_models(con)
    return out


def note_by_vault_path(con: duckdb.DuckDBPyConnection, vault_path: str) -> dict[str, Any] | None:
    """The note stored under ``<source>/<rel_path>`` (keys: the ``notes`` columns, frontmatter parsed), or None."""
    cur = con.execute("SELECT * FROM notes WHERE vault_path = ?", [vault_path])
    row = cur.fetchone()
    if row is None:
        return None
    cols = [d[0] for d in cur.description]
    note = dict(zip(cols, row))
    if isinstance(note.get("frontmatter"), str):
        note["frontmatter"] = json.loads(note["frontmatter"])
    return note


def note_tags(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, ...]]:
    """Every note's frontmatter tags: note_id -> tags as written (without a leading ``#``); notes without tags absent."""
    rows = con.execute("SELECT note_id, tags FROM notes WHERE len(coalesce(tags, [])) > 0").fetchall()
    return {r[0]: tuple(str(t).lstrip("#") for t in r[1] if t) for r in rows}


def note_hashes(con: duckdb.DuckDBPyConnection, sources: Sequence[str] | None = None) -> dict[str, str]:
    """vault_path -> content_hash of the notes (of ``sources`` only, when given): to tell what a rebuild changed."""
    rows = con.execute("SELECT source, vault_path, content_hash FROM notes").fetchall()
    wanted = set(sources) if sources is not None else None
    return {r[1]: r[2] or "" for r in rows if wanted is None or r[0] in wanted}


def notes_by_source_path(con: duckdb.DuckDBPyConnection, source_path: str) -> list[dict[str, str]]:
    """Notes whose ``source_path`` is this path, any source: ``[{"source", "source_path", "vault_path"}]``."""
    rows = con.execute(
        "SELECT source, source_path, vault_path FROM notes WHERE source_path = ? ORDER BY source", [source_path]
    ).fetchall()
    return [{"source": r[0], "source_path": r[1], "vault_path": r[2]} for r in rows]



# ---- search UX helpers (neighbours, query filters, inline tags; issue 17) ----
__all__ += ["chunk_texts_with_tags", "note_links", "note_texts", "note_vectors"]


def note_links(con: duckdb.DuckDBPyConnection, note_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A note's resolved links to other notes: ``(outlinks, backlinks)``, each ``[{"note_id", "path" (vault path),
    "title", "count" (links between the two notes)}]``, most links first, then by path."""
    def rows(sql: str) -> list[dict[str, Any]]:
        return [{"note_id": r[0], "path": r[1], "title": r[2] or "", "count": int(r[3])}
                for r in con.execute(sql, [note_id]).fetchall()]

    out = rows("SELECT n.note_id, n.vault_path, n.title, sum(l.count) AS c FROM links l JOIN notes n "
               "ON n.note_id = l.dst WHERE l.src = ? AND l.dst <> l.src GROUP BY ALL ORDER BY c DESC, n.vault_path")
    back = rows("SELECT n.note_id, n.vault_path, n.title, sum(l.count) AS c FROM links l JOIN notes n "
                "ON n.note_id = l.src WHERE l.dst = ? AND l.dst <> l.src GROUP BY ALL ORDER BY c DESC, n.vault_path")
    return out, back


def note_texts(con: duckdb.DuckDBPyConnection, note_ids: Sequence[str]) -> dict[str, str]:
    """note_id -> the note's title and its chunks' text in order (joined by blank lines); unknown ids absent."""
    if not note_ids:
        return {}
    rows = con.execute(
        "SELECT n.note_id, any_value(n.title), string_agg(c.text, chr(10) || chr(10) ORDER BY c.ordinal) "
        "FROM notes n LEFT JOIN chunks c USING (note_id) "
        "WHERE list_contains(string_split(?, chr(31)), n.note_id) GROUP BY n.note_id",
        ["\x1f".join(note_ids)],
    ).fetchall()
    return {r[0]: f"{r[1] or ''}\n\n{r[2] or ''}" for r in rows}


def chunk_texts_with_tags(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """``[(note_id, chunk text)]`` of the chunks that may hold an inline ``#tag`` (a ``#`` after whitespace or at
    the start, followed by a non-space); the caller parses them (:func:`pipeline.tags.inline_tags`)."""
    return [(r[0], r[1]) for r in con.execute(
        "SELECT note_id, text FROM chunks WHERE regexp_matches(text, '(^|\\s)#[^\\s#]')").fetchall()]


def note_vectors(con: duckdb.DuckDBPyConnection, table: str, note_ids: Sequence[str]) -> dict[str, np.ndarray]:
    """note_id -> float32 (dim,): the L2-normalised mean of the note's live chunk vectors in a model's table
    (notes without vectors there are absent)."""
    dim = _table_dim(con, table)
    if not note_ids:
        return {}
    tbl = con.execute(
        f"SELECT c.note_id, v.emb FROM {_live_sql(table)} v JOIN chunks c USING (chunk_id) "
        "WHERE list_contains(string_split(?, chr(31)), c.note_id)", ["\x1f".join(note_ids)]).fetch_arrow_table()
    ids = tbl.column("note_id").to_pylist()
    if not ids:
        return {}
    flat = tbl.column("emb").combine_chunks().flatten().to_numpy(zero_copy_only=False)
    vecs = np.ascontiguousarray(flat, dtype=np.float32).reshape(len(ids), dim)
    out: dict[str, np.ndarray] = {}
    for nid in dict.fromkeys(ids):
        mean = vecs[[i for i, x in enumerate(ids) if x == nid]].mean(axis=0)
        norm = float(np.linalg.norm(mean))
        out[nid] = mean / norm if norm > 0 else mean
    return out

# ---------------------------------------------------------------------------------------------------------------
# eval history (its own small file, <data>/eval_runs.duckdb)
#
# The history lives apart from the warehouse file on purpose: the warehouse is replaced by every publish (a full
# publish writes a new file; a corrupt or other-schema warehouse is rebuilt from scratch), so a table inside it
# would have to be carried over by every write path and would still be lost with a deleted or rebuilt warehouse.
# The history outlives all of that, and the warehouse schema stays about search. Written like the warehouse:
# copy -> append -> os.replace, under the build lock (one writer), so `docsvault eval --history` (read-only) never
# waits for or sees a half-written file, and a killed write leaves the previous history intact.

EVAL_RUN_COLUMNS: tuple[str, ...] = (
    "run_id", "run_at", "warehouse_built_at", "warehouse_key", "cases_key", "setup", "lanes", "group_kind",
    "group_name", "n", "hit_at_1", "hit_at_3", "mrr_at_10", "ndcg_at_10", "k_rrf", "weights", "models",
)

_EVAL_RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS eval_runs (
    run_id VARCHAR NOT NULL, run_at VARCHAR NOT NULL, warehouse_built_at VARCHAR, warehouse_key VARCHAR,
    cases_key VARCHAR, setup VARCHAR NOT NULL, lanes VARCHAR, group_kind VARCHAR NOT NULL, group_name VARCHAR NOT NULL,
    n INTEGER, hit_at_1 DOUBLE, hit_at_3 DOUBLE, mrr_at_10 DOUBLE, ndcg_at_10 DOUBLE,
    k_rrf DOUBLE, weights VARCHAR, models VARCHAR
)
"""


def append_eval_runs(path: Path, rows: Sequence[Mapping[str, Any]]) -> int:
    """Append eval-run rows to the ``eval_runs`` table of the history file (created on first use), atomically.

    The caller holds the build lock. A history file that DuckDB cannot open is moved aside to
    ``<path>.corrupt-<unix time>`` (kept for inspection, logged) and a new history is started.

    Args:
        path: the history file (``<data>/eval_runs.duckdb``).
        rows: dicts keyed by :data:`EVAL_RUN_COLUMNS` (missing keys are NULL); ``run_at`` is ISO-8601 UTC text.

    Returns:
        The number of rows in the table after the append.
    """
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{path.name}.tmp-*"):       # left by a killed writer
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        if path.exists():
            shutil.copyfile(path, tmp)
        try:
            con = duckdb.connect(str(tmp))
        except duckdb.Error as exc:
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            log.warning("eval history %s cannot be opened (%s): moved to %s, starting a new history", path, exc, aside)
            os.replace(path, aside)
            tmp.unlink(missing_ok=True)
            con = duckdb.connect(str(tmp))
        try:
            con.execute(_EVAL_RUNS_SCHEMA)
            if rows:
                cols = ", ".join(EVAL_RUN_COLUMNS)
                marks = ", ".join("?" for _ in EVAL_RUN_COLUMNS)
                con.executemany(f"INSERT INTO eval_runs ({cols}) VALUES ({marks})",
                                [[row.get(c) for c in EVAL_RUN_COLUMNS] for row in rows])
            total = int(con.execute("SELECT count(*) FROM eval_runs").fetchone()[0])  # type: ignore[index]
            con.execute("CHECKPOINT")
        finally:
            con.close()
        Path(f"{tmp}.wal").unlink(missing_ok=True)
        _swap(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return total


def read_eval_runs(path: Path, last: int | None = None) -> list[dict[str, Any]]:
    """Rows of the eval history, oldest run first (rows of a run in the order they were appended).

    Args:
        path: the history file; a missing file or one without the table gives [].
        last: only the last this many runs (by ``run_at``); None: all.

    Returns:
        Dicts keyed by :data:`EVAL_RUN_COLUMNS`.

    Raises:
        PipelineError: the file is not a DuckDB database.
    """
    path = Path(path)
    if not path.exists():
        return []
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise PipelineError(f"cannot read the eval history {path}: {exc}; move it aside (the next build starts a "
                            "new one)") from exc
    try:
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'eval_runs'").fetchone()[0]:  # type: ignore[index]
            return []
        cols = ", ".join(EVAL_RUN_COLUMNS)
        where, params = "", []
        if last is not None:
            where = ("WHERE run_id IN (SELECT run_id FROM eval_runs GROUP BY run_id "
                     "ORDER BY max(run_at) DESC, max(rowid) DESC LIMIT ?)")
            params = [max(int(last), 0)]
        rows = con.execute(f"SELECT {cols} FROM eval_runs {where} ORDER BY run_at, rowid", params).fetchall()
    finally:
        con.close()
    return [dict(zip(EVAL_RUN_COLUMNS, r)) for r in rows]
