"""Writing the warehouse: :func:`publish` (a new file, or an incremental copy) swapped in with ``os.replace``."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from pipeline.common.errors import (
    EmbeddingError,
    PipelineError,
)
from pipeline.common.markdown import heading_tags
from pipeline.models import Chunk, Edge, Note, text_hash
from pipeline.warehouse.schema import (
    _SCHEMA,
    _TABLES,
    SCHEMA_VERSION,
    VectorReader,
    WarehouseData,
    _attach,
    _init,
    vector_table_name,
)

log = logging.getLogger("pipeline.warehouse")


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


def _frontmatter_tags(fm: Mapping[str, Any]) -> list[str]:
    """A note's frontmatter ``tags`` values, then those of Obsidian's deprecated ``tag`` key (its help, Properties:
    "Deprecated alias for tags"), which older vaults still have: ``--tag`` finds a note by either."""
    return _str_list(fm.get("tags")) + _str_list(fm.get("tag"))


def _note_tags(note: Note) -> list[str]:
    """The tags a note's ``tags`` column holds: its frontmatter's (:func:`_frontmatter_tags`), then the ``#tags``
    of the H1 that heads it (``# Home #project``: the title is ``Home``, the tag Obsidian's, so the heading is in no
    chunk's heading or text, where ``--tag`` finds the inline ones: ``--tag project`` finds the note); each tag
    once, in that order."""
    from pipeline.ingest.normalize import leading_h1

    return list(dict.fromkeys(_frontmatter_tags(note.frontmatter) + heading_tags(leading_h1(note.body) or "")))


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
            "tags": pa.array([_note_tags(n) for n in notes], pa.list_(pa.string())),
            "description": pa.array([n.description for n in notes], pa.string()),
            "frontmatter": pa.array(
                [json.dumps(n.frontmatter, ensure_ascii=False, default=str) for n in notes], pa.string()
            ),
            "content_hash": pa.array([text_hash(n.body) for n in notes], pa.string()),
            "in_degree": pa.array([int(x[0]) for x in m], pa.int32()),
            "pagerank": pa.array([float(x[1]) for x in m], pa.float64()),
        }
    )


def _attr_table(items: Sequence[Any], columns: Mapping[str, pa.DataType]) -> pa.Table:
    """An Arrow table with one column per attribute of ``items``: ``{name: type}`` in column order."""
    return pa.table({name: pa.array([getattr(x, name) for x in items], typ) for name, typ in columns.items()})


_CHUNK_COLUMNS = {"chunk_id": pa.string(), "note_id": pa.string(), "source": pa.string(), "ordinal": pa.int32(),
                  "heading": pa.string(), "breadcrumb": pa.string(), "text": pa.string(),
                  "text_hash": pa.string(), "language": pa.string()}
_LINK_COLUMNS = {"src": pa.string(), "dst": pa.string(), "target": pa.string(), "kind": pa.string(),
                 "count": pa.int32()}


def _chunks_table(chunks: Sequence[Chunk]) -> pa.Table:
    return _attr_table(chunks, _CHUNK_COLUMNS)


def _links_table(edges: Sequence[Edge]) -> pa.Table:
    return _attr_table(edges, _LINK_COLUMNS)


def _check_shape(model_id: str, n: int, shape: tuple[int, ...], dim: int | None = None) -> None:
    """Raises EmbeddingError unless ``shape`` is ``(n, dim)`` (``dim`` >= 1; any when None)."""
    if len(shape) != 2 or shape[0] != n or shape[1] < 1 or (dim is not None and shape[1] != dim):
        raise EmbeddingError(f"model {model_id!r}: {n} chunk ids but vectors of shape {shape}; re-run the embed step")


def _check_known(model_id: str, chunk_ids: Sequence[str], known: set[str]) -> None:
    """Raises EmbeddingError when a chunk id is not one of ``known`` (the build's chunks)."""
    unknown = [c for c in chunk_ids if c not in known]
    if unknown:
        raise EmbeddingError(
            f"model {model_id!r}: {len(unknown)} vectors for chunks not in the build (e.g. {unknown[0]!r}); "
            "re-run the embed step"
        )


def _check_finite(model_id: str, vecs: np.ndarray) -> None:
    """Raises EmbeddingError when ``vecs`` holds a NaN or an infinity."""
    if not np.isfinite(vecs).all():
        raise EmbeddingError(f"model {model_id!r}: vectors contain NaN/inf; re-run the embed step")


def _vectors_table(chunk_ids: Sequence[str], vecs: np.ndarray) -> pa.Table:
    """Arrow ``(chunk_id, emb FLOAT[dim])`` of checked float32 (n, dim) C-contiguous vectors."""
    flat = pa.array(vecs.reshape(-1), pa.float32())
    return pa.table(
        {
            "chunk_id": pa.array(list(chunk_ids), pa.string()),
            "emb": pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1]),
        }
    )


@dataclass(frozen=True)
class _Vectors:
    """One model's vectors as a publish takes them: ``ids`` (chunk ids), ``dim``, and ``source``: the vectors,
    float32 (len(ids), dim) and checked, or a :class:`~pipeline.warehouse.schema.VectorReader` whose rows are read
    (and checked) only when a publish inserts them."""

    model_id: str
    ids: list[str]
    dim: int
    source: np.ndarray | VectorReader

    def table(self, rows: np.ndarray | None = None) -> pa.Table:
        """Arrow ``(chunk_id, emb)`` of every row, or of ``rows`` (int64 (m,) ascending positions in ``ids``).

        Raises:
            EmbeddingError: vectors read of another shape than ``(m, dim)``, or with NaN/inf.
        """
        ids = self.ids if rows is None else [self.ids[i] for i in rows.tolist()]
        if isinstance(self.source, np.ndarray):
            return _vectors_table(ids, self.source if rows is None else self.source[rows])
        if not ids:
            return _vectors_table(ids, np.zeros((0, self.dim), dtype=np.float32))
        vecs = np.ascontiguousarray(self.source.read(np.arange(len(ids), dtype=np.int64) if rows is None else rows),
                                    dtype=np.float32)
        _check_shape(self.model_id, len(ids), vecs.shape, self.dim)
        _check_finite(self.model_id, vecs)
        return _vectors_table(ids, vecs)


class _NotIncremental(Exception):
    """Why an incremental update is not possible (a full publish follows)."""


def _leftovers(path: Path, keep: Path | None = None) -> None:
    """Remove temp files of earlier publishes whose process is gone (a killed build), and this process's own but
    ``keep`` (a :class:`CopyAhead`'s copy)."""
    from pipeline.common.lock import pid_alive

    for p in path.parent.glob(f"{path.name}.tmp-*"):
        m = re.match(rf"^{re.escape(path.name)}\.tmp-(\d+)", p.name)
        if p != keep and m and (int(m.group(1)) == os.getpid() or not pid_alive(int(m.group(1)))):
            p.unlink(missing_ok=True)


class CopyAhead:
    """The copy an incremental :func:`publish` starts from, made in a background thread while the caller prepares
    the publish (reads notes and chunks, builds BM25): ``shutil.copyfile`` runs in the kernel (``sendfile``) without
    the GIL, so the copy (~0.6 s for a 230 MB warehouse) overlaps that Python work instead of following it.

    Use as a context manager around the preparation and the :func:`publish` given ``ahead=``; leaving it waits for
    the thread and removes a copy no publish took. The copy is used only when ``path`` still has the size and
    mtime it had when the copy started (:func:`pipeline.index.fastcache.file_stamp`; the build lock keeps other
    writers out; a changed file is copied again). A killed process leaves ``<path>.tmp-<pid>.ahead``, removed by the next publish.
    """

    def __init__(self, path: Path) -> None:
        import threading

        from pipeline.index.fastcache import file_stamp

        self.path = Path(path)
        self.tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}.ahead")
        self._stamp = file_stamp(self.path)
        self._error: BaseException | None = None
        self._taken = False
        self._thread = threading.Thread(target=self._copy, name="docsvault-warehouse-copy", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        import shutil

        try:
            shutil.copyfile(self.path, self.tmp)
        except BaseException as exc:   # noqa: BLE001 - reported by take(): the publish copies the file itself
            self._error = exc

    def take(self, tmp: Path) -> bool:
        """Wait for the copy and move it to ``tmp``; False (nothing at ``tmp``, the copy removed) when it failed or
        ``path`` changed since it started."""
        from pipeline.index.fastcache import file_stamp

        self._thread.join()
        self._taken = True
        if self._error is not None or file_stamp(self.path) != self._stamp:
            if self._error is not None:
                log.debug("warehouse copy ahead of the publish failed (%s): copying it now", self._error)
            _remove_temp(self.tmp)
            return False
        os.replace(self.tmp, tmp)
        return True

    def __enter__(self) -> CopyAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join()
        if not self._taken:
            _remove_temp(self.tmp)


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
                  notes: pa.Table | None, links: pa.Table | None) -> None:
    """Insert meta, BM25, and the ``notes`` / ``links`` rows (:func:`_notes_table`, :func:`_links_table`) unless
    None."""
    _insert(con, "meta", pa.table({"key": list(meta), "value": [str(v) for v in meta.values()]}))
    if notes is not None:
        _insert(con, "notes", notes)
    if links is not None:
        _insert(con, "links", links)
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


def _swap_in(con: duckdb.DuckDBPyConnection, tmp: Path, path: Path) -> None:
    """A finished write: checkpoint and close the temp file's connection, then swap the file in as ``path``."""
    con.execute("CHECKPOINT")
    con.close()
    _swap(tmp, path)


def _abandon(con: duckdb.DuckDBPyConnection, tmp: Path) -> None:
    """A failed write: close the connection and remove the temp file (the previous warehouse stays)."""
    con.close()
    _remove_temp(tmp)


def _publish_full(path: Path, tmp: Path, data: WarehouseData, vec_tables: Mapping[str, _Vectors],
                  meta: dict[str, str]) -> dict[str, int]:
    """Write ``tmp`` from scratch (every vector read, one model at a time) and swap it in as ``path``; returns the
    counts :func:`publish` reports."""
    con = duckdb.connect(str(tmp))
    try:
        _init(con)
        con.execute(_SCHEMA)
        meta = {**meta, "full_built_at": meta["built_at"], "updates": "0"}
        _write_common(con, data, meta, _notes_table(data.notes, data.note_metrics), _links_table(data.edges))
        _insert(con, "chunks", _chunks_table(data.chunks))
        n_vectors = 0
        for model_id, vectors in vec_tables.items():
            name = vector_table_name(model_id)
            dim = vectors.dim
            table = vectors.table()
            con.execute(f"CREATE TABLE {name} (chunk_id VARCHAR NOT NULL, emb FLOAT[{dim}] NOT NULL)")
            con.execute(f"CREATE TABLE {name}_delta (chunk_id VARCHAR NOT NULL, emb FLOAT[{dim}] NOT NULL)")
            _insert(con, name, table)
            con.execute(f"CREATE INDEX {name}_hnsw ON {name} USING HNSW (emb) WITH (metric = 'cosine')")
            n = table.num_rows
            del table
            _insert(
                con,
                "models",
                pa.table({"model_id": [model_id], "table_name": [name], "dim": pa.array([dim], pa.int32()),
                          "n": pa.array([n], pa.int64()), "n_base": pa.array([n], pa.int64()),
                          "n_dead": pa.array([0], pa.int64()), "n_delta": pa.array([0], pa.int64())}),
            )
            n_vectors += n
        con.execute("CHECKPOINT")
        # an estimate (closing truncates free blocks, this row may add one): the first update measures the file
        con.execute("INSERT INTO meta VALUES ('full_bytes', ?)", [str(tmp.stat().st_size)])
        _swap_in(con, tmp, path)
    except BaseException:
        _abandon(con, tmp)
        raise
    return {"vectors": n_vectors, "changed_chunks": len(data.chunks), "removed_chunks": 0,
            "vectors_added": n_vectors, "vectors_removed": 0}


MAX_GROWTH = 0.04
"""An incremental update is published only while the file stays within this share above its size at the last full
publish (the issue's bound for 10 updates is 5 %; the margin covers content that grew a little). DuckDB never shrinks
a file: each update leaves at least one partly filled 256 KiB block (the appended chunk rows), so a small warehouse
reaches the bound after a few updates and a large one after dozens; then a full publish writes a compact file."""


_BLOCK = 256 * 1024      # DuckDB's block size (bytes)


def _check_growth(size: int, full_bytes: int, *, before: bool = False) -> None:
    """Raises ``_NotIncremental`` when ``size`` (bytes) exceeds ``full_bytes`` by more than :data:`MAX_GROWTH`.

    ``before``: ``size`` is the current file's; an update adds at least one block (its chunk rows), so a file
    within a block of the bound is not updated at all (a small warehouse: every update is a full publish, without
    first trying an update that would be thrown away)."""
    if not full_bytes:
        return
    limit = (1 + MAX_GROWTH) * full_bytes
    if before and size + _BLOCK > limit:
        raise _NotIncremental(f"the file is {_mb(size)} and an update adds at least {_BLOCK // 1024} KiB: more than "
                              f"{MAX_GROWTH:.0%} over its {_mb(full_bytes)} after its last full build")
    if size > limit:
        raise _NotIncremental(f"an update would leave the file at {_mb(size)} (DuckDB reuses freed blocks but never "
                              f"shrinks a file), more than {MAX_GROWTH:.0%} over its "
                              f"{_mb(full_bytes)} after its last full build")


def _mb(n: int) -> str:
    """Bytes as megabytes for a message: ``"11.81 MB"``."""
    return f"{n / 1e6:.2f} MB"


def _current_models(con: duckdb.DuckDBPyConnection, path: Path, vec_tables: Mapping[str, _Vectors]
                    ) -> tuple[dict[str, str], int, dict[str, tuple[str, int]]]:
    """The current file's meta, size at its last full publish and ``{model_id: (table, dim)}``.

    Raises:
        _NotIncremental: no meta table, another schema version, a file grown past :data:`MAX_GROWTH`, or other
            embedding models or dimensions than ``vec_tables``.
    """
    try:
        old_meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    except duckdb.Error as exc:
        raise _NotIncremental(f"the current file has no meta table ({exc})") from None
    if old_meta.get("schema_version") != SCHEMA_VERSION:
        raise _NotIncremental(f"schema version {old_meta.get('schema_version')} -> {SCHEMA_VERSION}")
    size = path.stat().st_size
    # the first update after a full publish measures that file (a full publish can only estimate its own size)
    full_bytes = size if old_meta.get("updates") == "0" else int(old_meta.get("full_bytes") or 0)
    _check_growth(size, full_bytes, before=True)
    models = {r[0]: (r[1], int(r[2])) for r in con.execute("SELECT model_id, table_name, dim FROM models").fetchall()}
    if set(models) != set(vec_tables):
        raise _NotIncremental(f"embedding models changed: {sorted(models)} -> {sorted(vec_tables)}")
    for model_id, vectors in vec_tables.items():
        if models[model_id][1] != vectors.dim:
            raise _NotIncremental(f"model {model_id}: dimension changed")
    return old_meta, full_bytes or size, models


_KEY_COLUMNS = {k: _CHUNK_COLUMNS[k] for k in ("chunk_id", "note_id", "source", "ordinal", "heading", "breadcrumb",
                                                 "text_hash", "language")}
"""The chunk columns an update compares: a chunk whose values differ is replaced (its text follows its text hash).
The language is compared too: it is its note's, so an edit elsewhere in the note can change it (a section rewritten
in Japanese makes the note's unchanged English sections chunks of a Japanese note)."""


def _chunk_diff(con: duckdb.DuckDBPyConnection, chunks: Sequence[Chunk]) -> tuple[list[str], list[str], set[str]]:
    """``(changed, removed, text_changed)`` chunk ids: new or changed rows (in ``chunks`` order), rows gone, rows
    whose text is new. Compared in the database (a join of the file's rows with ``chunks``' :data:`_KEY_COLUMNS`:
    ~0.1 s for 27k chunks, most of it hashing their texts, against ~0.2 s with the file's rows fetched as Python
    tuples)."""
    keys = _attr_table(chunks, _KEY_COLUMNS).append_column("pos", pa.array(np.arange(len(chunks)), pa.int64()))
    differs = " OR ".join(f"o.{c} IS DISTINCT FROM n.{c}" for c in _KEY_COLUMNS if c != "chunk_id")
    con.register("_keys_in", keys)
    try:
        rows = con.execute(
            "SELECT n.chunk_id, o.chunk_id IS NULL OR o.text_hash IS DISTINCT FROM n.text_hash FROM _keys_in n "
            f"LEFT JOIN chunks o ON o.chunk_id = n.chunk_id WHERE o.chunk_id IS NULL OR {differs} ORDER BY n.pos"
        ).fetchall()
        removed = [r[0] for r in con.execute(
            "SELECT chunk_id FROM chunks WHERE chunk_id NOT IN (SELECT chunk_id FROM _keys_in)").fetchall()]
    finally:
        con.unregister("_keys_in")
    return [r[0] for r in rows], removed, {r[0] for r in rows if r[1]}


def _vector_plans(con: duckdb.DuckDBPyConnection, vec_tables: Mapping[str, _Vectors],
                  models: Mapping[str, tuple[str, int]], text_changed: set[str], max_delta: float
                  ) -> dict[str, dict[str, Any]]:
    """Per vector table: delta rows to delete (``from_delta``), base rows to mark dead (``to_dead``), rows to add
    (``add``, an Arrow table): only the added rows' vectors are read (:meth:`_Vectors.table`), once every model's
    plan is within its bound.

    Raises:
        _NotIncremental: more than ``max_delta`` of a model's base vectors (at least 200) would sit outside its
            HNSW index.
        EmbeddingError: a vector read is of the wrong shape or not finite.
    """
    plans: dict[str, dict[str, Any]] = {}
    for model_id, vectors in vec_tables.items():
        name = models[model_id][0]
        base = set(con.execute(f"SELECT chunk_id FROM {name}").fetch_arrow_table().column(0).to_pylist())
        dead = {r[0] for r in con.execute("SELECT chunk_id FROM vec_dead WHERE table_name = ?", [name]).fetchall()}
        delta = {r[0] for r in con.execute(f"SELECT chunk_id FROM {name}_delta").fetchall()}
        live = (base - dead) | delta
        ids = vectors.ids
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
        rows = np.asarray([i for i, cid in enumerate(ids) if cid in add], dtype=np.int64)
        plans[name] = {"model_id": model_id, "from_delta": sorted(from_delta), "to_dead": sorted(to_dead),
                       "add": rows, "n_base": len(base), "n_dead": n_dead, "n_delta": n_delta}
    for plan in plans.values():
        plan["add"] = vec_tables[plan["model_id"]].table(plan["add"])
    return plans


def _notes_and_links(con: duckdb.DuckDBPyConnection, notes: pa.Table, links: pa.Table) -> tuple[int, bool]:
    """``(notes that differ from the file's rows, links unchanged)`` for the new ``notes`` and ``links`` rows
    (:func:`_notes_table`, :func:`_links_table`): which small tables must be replaced. Compared in the database
    (rows as multisets, NULL equal to NULL, ``frontmatter`` as text)."""
    note_cols = ", ".join(f"{c}::VARCHAR" if c == "frontmatter" else c for c in notes.column_names)
    link_cols = ", ".join(links.column_names)
    con.register("_notes_in", notes)
    con.register("_links_in", links)
    try:
        n_changed, links_differ = con.execute(
            f"SELECT (SELECT count(*) FROM (SELECT {note_cols} FROM _notes_in EXCEPT ALL SELECT {note_cols} FROM notes))"
            " + (SELECT count(*) FROM notes WHERE note_id NOT IN (SELECT note_id FROM _notes_in)), "
            f"(SELECT count(*) FROM (SELECT {link_cols} FROM _links_in EXCEPT ALL SELECT {link_cols} FROM links)) "
            f"+ (SELECT count(*) FROM (SELECT {link_cols} FROM links EXCEPT ALL SELECT {link_cols} FROM _links_in))"
        ).fetchone()
    finally:
        con.unregister("_notes_in")
        con.unregister("_links_in")
    return int(n_changed), not links_differ


def _recreate(con: duckdb.DuckDBPyConnection, tables: Sequence[str]) -> None:
    """Drop these fixed tables and create them empty: their blocks (BLOB overflow and key index included) are freed
    at the next checkpoint. ``DELETE FROM`` would not free them: DuckDB does not vacuum a table with a key."""
    for table in tables:
        con.execute(f"DROP TABLE {table}")
        con.execute(_TABLES[table])


def _apply_removals(con: duckdb.DuckDBPyConnection, plans: Mapping[str, Mapping[str, Any]],
                    chunk_ids: Sequence[str], replaced: Sequence[str]) -> None:
    """Phase 1 of an incremental update, committed and checkpointed on its own: delete these chunk rows and delta
    vectors, empty the ``replaced`` tables. The checkpoint puts the freed blocks on DuckDB's free list, so phase 2
    writes into them instead of growing the file (one checkpoint for both would keep the old blocks in use while
    the new ones are written: the file would grow by the replaced data, BM25 blobs included, on every update)."""
    con.execute("BEGIN TRANSACTION")
    _delete_ids(con, "chunks", chunk_ids)
    _recreate(con, replaced)
    for name, plan in plans.items():
        _delete_ids(con, f"{name}_delta", plan["from_delta"])
    con.execute("COMMIT")
    con.execute("CHECKPOINT")


def _apply_additions(con: duckdb.DuckDBPyConnection, data: WarehouseData, plans: Mapping[str, Mapping[str, Any]],
                     chunks: Sequence[Chunk], meta: Mapping[str, str], notes: pa.Table | None,
                     links: pa.Table | None) -> tuple[int, int]:
    """Phase 2 of an incremental update, one transaction: insert the changed chunks, meta, BM25, the ``notes`` and
    ``links`` rows unless None, dead marks and delta vectors; update ``models``. Returns ``(live vectors, vectors
    added)``."""
    con.execute("BEGIN TRANSACTION")
    _insert(con, "chunks", _chunks_table(chunks))
    _write_common(con, data, meta, notes, links)
    n_vectors = added = 0
    for name, plan in plans.items():
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
    con.execute("COMMIT")
    return n_vectors, added


def _publish_incremental(path: Path, tmp: Path, data: WarehouseData, vec_tables: Mapping[str, _Vectors],
                         meta: dict[str, str], max_delta: float, ahead: CopyAhead | None = None) -> dict[str, int]:
    """Copy ``path`` to ``tmp`` (or take ``ahead``'s copy), apply the differences in two checkpointed phases, swap
    ``tmp`` in.

    Returns the counts :func:`publish` reports. Raises ``_NotIncremental`` (nothing written) when an update is not
    possible, ``duckdb.Error`` when the write failed (``tmp`` removed, ``path`` untouched)."""
    import shutil

    if not path.exists():
        raise _NotIncremental("no warehouse yet")
    if Path(f"{path}.wal").exists():
        raise _NotIncremental("the current file has a write-ahead log of an interrupted writer")
    if ahead is None or not ahead.take(tmp):
        shutil.copyfile(path, tmp)
    try:
        con = _attach(tmp, read_only=False)
    except duckdb.Error as exc:
        raise _NotIncremental(f"the current file cannot be opened ({exc})") from None
    try:
        old_meta, full_bytes, models = _current_models(con, path, vec_tables)
        changed, removed, text_changed = _chunk_diff(con, data.chunks)
        plans = _vector_plans(con, vec_tables, models, text_changed, max_delta)
        notes, links = _notes_table(data.notes, data.note_metrics), _links_table(data.edges)
        notes_changed, links_same = _notes_and_links(con, notes, links)
        replaced = ["meta", "bm25_index", *(["notes"] if notes_changed else []), *([] if links_same else ["links"])]
        _apply_removals(con, plans, removed + changed, replaced)
        meta = {**meta, "full_built_at": old_meta.get("full_built_at", ""), "full_bytes": str(full_bytes),
                "updates": str(int(old_meta.get("updates") or 0) + 1)}
        new_chunks = {c.chunk_id: c for c in data.chunks}
        n_vectors, added = _apply_additions(con, data, plans, [new_chunks[cid] for cid in changed], meta,
                                            notes if notes_changed else None, None if links_same else links)
        con.execute("CHECKPOINT")
        con.close()                     # truncates trailing free blocks: the size a reader would see
        _check_growth(tmp.stat().st_size, full_bytes)
        _swap(tmp, path)
    except BaseException:
        _abandon(con, tmp)
        raise
    dropped = sum(len(p["from_delta"]) + len(p["to_dead"]) for p in plans.values())
    return {"vectors": n_vectors, "changed_chunks": len(changed), "removed_chunks": len(removed),
            "vectors_added": added, "vectors_removed": dropped, "notes_rewritten": notes_changed,
            "links_rewritten": int(not links_same)}


def _refuse_shared_ids(data: WarehouseData) -> None:
    """Raises PipelineError naming the notes (vault paths) when two notes or two chunks share an id: the publish
    would fail on the table's key, or serve one row for two."""
    paths = {n.note_id: n.vault_path for n in data.notes}
    fixes = {"note": "rename one of the files",
             "chunk": "rename one of the headings they are under (two headings whose paths read alike, e.g. "
                      "'A > B' and 'A' over 'B')"}
    for what, items in (("note", [(n.note_id, n.vault_path) for n in data.notes]),
                        ("chunk", [(c.chunk_id, paths.get(c.note_id, c.note_id)) for c in data.chunks])):
        counts = Counter(i for i, _ in items)
        if len(counts) != len(items):
            dup = counts.most_common(1)[0][0]
            where = ", ".join(sorted({path for i, path in items if i == dup}))
            raise PipelineError(f"two {what}s share the id {dup!r} (in {where}): the warehouse is kept as it was; "
                                f"{fixes[what]} and build again")


def _checked_vectors(data: WarehouseData) -> dict[str, _Vectors]:
    """``{model_id: its vectors}`` after checking ids and vectors: shape, chunk ids of the build and finite values
    of arrays now; a :class:`~pipeline.warehouse.schema.VectorReader`'s size and ids now, the vectors it reads when
    they are read.

    Raises:
        PipelineError: two notes or two chunks share an id.
        EmbeddingError: vectors of the wrong shape, for chunks not in the build, or with NaN/inf; or two model ids
            map to one vector table.
    """
    _refuse_shared_ids(data)
    known = {c.chunk_id for c in data.chunks}
    vec_tables: dict[str, _Vectors] = {}
    for model_id, (chunk_ids, vecs) in data.vectors.items():
        ids = list(chunk_ids)
        if isinstance(vecs, VectorReader):
            _check_shape(model_id, len(ids), (vecs.n, vecs.dim))
            _check_known(model_id, ids, known)
            vec_tables[model_id] = _Vectors(model_id, ids, vecs.dim, vecs)
            continue
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        _check_shape(model_id, len(ids), vecs.shape)
        _check_known(model_id, ids, known)
        _check_finite(model_id, vecs)
        vec_tables[model_id] = _Vectors(model_id, ids, vecs.shape[1], vecs)
    names = [vector_table_name(m) for m in vec_tables]
    if len(set(names)) != len(names):
        raise EmbeddingError(f"two model ids map to the same vector table: {sorted(vec_tables)}")
    return vec_tables


def _meta(data: WarehouseData) -> dict[str, str]:
    """The ``meta`` rows of this publish: schema and program version, build time, ``data.run_info``."""
    from pipeline import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "docsvault_version": __version__,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **{str(k): str(v) for k, v in data.run_info.items()
           if k not in ("schema_version", "full_bytes", "full_built_at", "updates")},
    }


def publish(path: Path, data: WarehouseData, *, incremental: bool = False, max_delta: float = 0.1,
            ahead: CopyAhead | None = None) -> dict[str, Any]:
    """Write the warehouse and swap it in atomically.

    Full: builds ``<path>.tmp-<pid>`` from scratch (tables loaded through Arrow, one HNSW index per vector table,
    CHECKPOINT). Incremental (``incremental=True`` and possible): copies the current file to the temp path and
    applies only the differences (changed/removed chunks, vectors of changed texts into the delta table, notes,
    links, BM25 and meta replaced) — see the module doc. Vectors given as a
    :class:`~pipeline.warehouse.schema.VectorReader` are read as needed: all of them by a full publish, only the
    rows inserted by an incremental one. Either way the temp file is closed, then ``os.replace``-d
    onto ``path``: readers that opened the old file keep working on it; if anything fails (or the process is
    killed) the old file stays and the temp file is removed (by the next publish when killed).

    An incremental update falls back to a full publish (``reason`` says why) when there is no current file, it
    cannot be opened, has another schema version, other embedding models or dimensions, is (or would be after the
    update) more than :data:`MAX_GROWTH` (4 %) larger than after its last full publish, or more than ``max_delta``
    of a model's vectors (at least 200) would sit outside its HNSW index.

    Args:
        path: the warehouse file (its directory is created).
        data: everything the warehouse must hold after the publish.
        incremental: try an incremental update first.
        max_delta: share of a model's base vectors allowed in its delta + dead tables.
        ahead: a :class:`CopyAhead` of ``path`` started earlier; an incremental update starts from its copy.

    Returns:
        ``notes``, ``chunks``, ``links``, ``models``, ``vectors`` (live rows over all models), ``bm25_blobs``,
        ``bytes`` (file size), ``ms`` (wall time), ``mode`` ("full" | "incremental"), ``reason`` (why full),
        ``changed_chunks``, ``removed_chunks``, ``vectors_added``, ``vectors_removed``.

    Raises:
        EmbeddingError: a vector array (or the rows a reader returns) has the wrong shape, NaNs, or ids of unknown
            chunks.
        PipelineError: two notes or two chunks share an id.
        duckdb.Error: the database write failed (disk full, ...); the old file is untouched.
    """
    started = time.monotonic()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    _leftovers(path, keep=ahead.tmp if ahead is not None else None)

    vec_tables = _checked_vectors(data)
    meta = _meta(data)
    mode, reason = "full", "requested"
    result: dict[str, int] | None = None
    if incremental:
        try:
            result = _publish_incremental(path, tmp, data, vec_tables, meta, max_delta, ahead)
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
