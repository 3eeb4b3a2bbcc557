"""The warehouse file: its schema, vector table names, and opening it (:func:`connect`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

from pipeline.common.errors import (
    WarehouseCorruptError,
    WarehouseNotBuiltError,
)
from pipeline.models import Chunk, Edge, Note, model_slug

log = logging.getLogger("pipeline.warehouse")


SCHEMA_VERSION = "3"
_TABLE_RE = re.compile(r"^vec_[a-z0-9_]+$")

_TABLES: dict[str, str] = {
    "meta": "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "notes": """CREATE TABLE notes (
    note_id VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, source_path VARCHAR NOT NULL, vault_path VARCHAR NOT NULL,
    title VARCHAR, url VARCHAR, aliases VARCHAR[], tags VARCHAR[], description VARCHAR, frontmatter JSON,
    content_hash VARCHAR, in_degree INTEGER, pagerank DOUBLE
)""",
    "chunks": """CREATE TABLE chunks (
    chunk_id VARCHAR PRIMARY KEY, note_id VARCHAR NOT NULL, source VARCHAR NOT NULL, ordinal INTEGER,
    heading VARCHAR, breadcrumb VARCHAR, text VARCHAR, text_hash VARCHAR, language VARCHAR
)""",
    "links": "CREATE TABLE links (src VARCHAR NOT NULL, dst VARCHAR, target VARCHAR, kind VARCHAR, count INTEGER)",
    "models": """CREATE TABLE models (
    model_id VARCHAR PRIMARY KEY, table_name VARCHAR NOT NULL, dim INTEGER NOT NULL, n BIGINT,
    n_base BIGINT, n_dead BIGINT, n_delta BIGINT
)""",
    "vec_dead": "CREATE TABLE vec_dead (table_name VARCHAR NOT NULL, chunk_id VARCHAR NOT NULL)",
    "bm25_index": "CREATE TABLE bm25_index (name VARCHAR PRIMARY KEY, data BLOB)",
}
"""The warehouse's fixed tables: name -> ``CREATE TABLE`` statement (an incremental publish drops and re-creates the
small ones it replaces whole, so their blocks are freed; see :mod:`pipeline.warehouse.write`)."""

_SCHEMA = ";\n".join(_TABLES.values()) + ";\n"


@dataclass(frozen=True)
class VectorReader:
    """A model's vectors read only as a publish needs them: all of them by a full publish, by an incremental one only
    the rows it inserts (the vectors of new or changed texts).

    Attributes:
        n: rows, one per chunk id of its :attr:`WarehouseData.vectors` entry, in that order.
        dim: their dimension (>= 1).
        read: ``read(rows)`` -> float32 (len(rows), dim) vectors of ``rows``, int64 (m,) ascending positions in
            ``[0, n)``, m >= 1. Whatever it raises fails the publish (nothing written, the old file kept).
    """

    n: int
    dim: int
    read: Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, kw_only=True)
class WarehouseData:
    """Everything one warehouse file holds, as produced by the earlier stages.

    Attributes:
        notes: all notes of all sources.
        note_metrics: note_id -> (in_degree, pagerank) from the link graph; missing notes get (0, 0.0).
        chunks: all chunks (``chunk.note_id`` must be a note's id).
        edges: resolved and dangling links.
        vectors: model_id -> (chunk_ids, float32 (n, dim) L2-normalised vectors, or a :class:`VectorReader` of
            them); one vector table per model.
        bm25_blobs: serialized BM25 index (``Bm25Index.to_blobs()``).
        run_info: free str -> str facts stored in ``meta`` (e.g. sources, revisions, build id).
    """

    notes: Sequence[Note]
    chunks: Sequence[Chunk]
    note_metrics: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    edges: Sequence[Edge] = ()
    vectors: Mapping[str, tuple[Sequence[str], np.ndarray | VectorReader]] = field(default_factory=dict)
    bm25_blobs: Mapping[str, bytes] = field(default_factory=dict)
    run_info: Mapping[str, str] = field(default_factory=dict)


def vector_table_name(model_id: str) -> str:
    """``vec_<slug>`` for a model id (the slug is ``[a-z0-9_]``, so the name is a safe SQL identifier)."""
    return f"vec_{model_slug(model_id)}"


def _quote_path(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _init(con: duckdb.DuckDBPyConnection, extensions: bool = True) -> None:
    import duckdb_ext

    duckdb_ext.init(con)
    if extensions:                 # vss only: nothing here uses DuckDB's full-text search (BM25 is pipeline.index.bm25)
        con.execute("LOAD vss")
        con.execute("SET hnsw_enable_experimental_persistence = true")


def load_vss(con: duckdb.DuckDBPyConnection) -> None:
    """Load ``vss`` into a connection opened with ``lazy_extensions`` (a no-op when it is loaded): the HNSW index of
    an attached file is bound on first use, so k-NN queries use it as with ``vss`` loaded before the attach."""
    con.execute("LOAD vss")
    con.execute("SET hnsw_enable_experimental_persistence = true")


# ---------------------------------------------------------------------------------------------------------------
# open


def _attach(path: Path, read_only: bool, extensions: bool = True) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    try:
        _init(con, extensions)
        mode = " (READ_ONLY)" if read_only else ""
        con.execute(f"ATTACH {_quote_path(path)} AS wh{mode}")
        con.execute("USE wh")
    except BaseException:
        con.close()
        raise
    return con


def connect(path: Path, read_only: bool = True, *, lazy_extensions: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the warehouse file.

    Order matters: when ``vss`` is loaded, an in-memory connection loads it first, then the file is attached as
    ``wh`` and made the default catalog, so a WAL that touches an HNSW index replays (EC-19). A WAL that a read-only
    attach cannot replay (one that creates tables) is replayed once read-write and checkpointed, then the file is
    attached read-only.

    Args:
        path: the warehouse file.
        read_only: attach read-only (search, CLI, MCP, the stages' reads); False only for maintenance.
        lazy_extensions: read-only and no write-ahead log beside the file: attach without loading ``vss`` (its
            signature check hashes the extension file: 0.1-0.25 s per connection, several per build); a caller that
            queries an HNSW index calls :func:`load_vss` first (:func:`pipeline.warehouse.vector_search` and
            :func:`~pipeline.warehouse.explain_vector_search` do). False, a writer, a WAL beside the file, or a
            failed lazy attach: ``vss`` loaded before the attach.

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
        con = None
        if lazy_extensions and read_only and not Path(f"{path}.wal").exists():
            try:
                con = _attach(path, read_only, extensions=False)
            except duckdb.Error:
                con = None                       # e.g. the file needs an extension to attach: the full way
        if con is None:
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
        if isinstance(exc, duckdb.CatalogException):
            raise WarehouseCorruptError(
                f"{path} is not a docsvault warehouse (no meta table: {exc}); run `docsvault build` to rebuild it"
            ) from exc
        # a block that fails its checksum (a disk error, a copy cut short): the file is a warehouse, a damaged one
        raise WarehouseCorruptError(
            f"the warehouse {path} is damaged ({exc}); run `docsvault build` to rebuild it"
        ) from exc
    if row is None or row[0] != SCHEMA_VERSION:
        con.close()
        found = row[0] if row else "none"
        raise WarehouseCorruptError(
            f"{path} has schema version {found}, this docsvault needs {SCHEMA_VERSION}: run `docsvault build`"
        )
    return con
