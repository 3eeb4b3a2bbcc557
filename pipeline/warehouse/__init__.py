"""
One file (``Settings.warehouse_path``) holds notes, chunks, links, one vector table per embedding model with an
HNSW index (cosine), and the serialized BM25 index. It is never modified in place: :func:`publish` writes a new file
next to it (or, incrementally, a copy of the current one) and swaps it in with ``os.replace``, so a reader keeps
querying the file it opened and never sees a half-built one; a failed or killed build leaves the previous file
untouched. The build makes that copy in a background thread while it prepares the update (``write.CopyAhead``).

Incremental updates and the HNSW index. Modifying an HNSW-indexed table makes DuckDB rewrite the whole index at the
next checkpoint without freeing the old blocks (measured: +44 MB per update on a 25k x 384 table, unbounded), and
rebuilding the index costs ~10-25 s for 25k vectors. So a model's vectors live in three tables:

* ``vec_<slug>``: the base table with the HNSW index, written only by a full publish;
* ``vec_<slug>_delta``: vectors of chunks added or changed since (no index; scanned exactly, it stays small);
* ``vec_dead``: ``(table_name, chunk_id)`` of base rows that were removed or replaced.

The live vectors are ``base - dead + delta``; :func:`vector_search` asks the HNSW index for ``k + n_dead`` rows,
drops dead ones and merges the exact delta scan. When delta + dead exceed ``max_delta`` of the base, or the file
is (or would be after the update) more than ``write.MAX_GROWTH`` (4 %) larger than after its last full publish,
:func:`publish` writes a fresh file instead (full rebuild).

Size. DuckDB never returns blocks to the file system, and ``DELETE`` does not free the rows of a table with a key.
An update therefore drops and re-creates the small tables it replaces whole (meta, BM25 blobs, notes and links when
they changed), commits and checkpoints that, and only then writes the new rows: they go into the blocks just freed.
What still grows is about one 256 KiB block per update (appended chunk rows) plus the delta/dead tables; the growth
bound turns that into a compact full publish every few updates for a small warehouse and every few dozen for a
large one.

Opening (:func:`connect`) goes ``:memory:`` -> ``ATTACH`` the file read-only when no write-ahead log is beside it
(``vss`` is loaded on the first HNSW query), else ``:memory:`` -> load ``vss`` -> ``ATTACH``: a write-ahead log that
touches an HNSW index can only be replayed once ``vss`` is loaded (EC-19, duckdb-vss#65). DuckDB's ``fts`` is not
used (BM25 is :mod:`pipeline.index.bm25`).

Modules: ``schema`` (tables, :func:`connect`), ``write`` (:func:`publish`), ``vectors`` (k-NN and vector reads),
``queries`` (note/chunk/link reads), ``eval_runs`` (the eval history file). Import the face, ``from pipeline import
warehouse as wh``, unless a test patches a module's private name.
"""

from pipeline.warehouse.queries import (
    chunk_texts_with_tags,
    dangling_linkers,
    dangling_targets,
    fetch_chunks,
    list_sources,
    load_bm25_blobs,
    load_bm25_cached,
    load_chunk_keys,
    load_chunk_rows_cached,
    load_graph,
    load_note_keys,
    model_source_counts,
    note_by_vault_path,
    note_changes,
    note_hashes,
    note_hashes_of,
    note_links,
    note_names,
    note_tags,
    note_texts,
    note_vectors,
    notes_by_name,
    notes_by_source_path,
    notes_by_url,
    notes_named,
    read_meta,
    rows_from_table,
    stats,
    text_holds,
    warehouse_cache_key,
)
from pipeline.warehouse.schema import (
    SCHEMA_VERSION,
    VectorReader,
    WarehouseData,
    connect,
    vector_table_name,
)
from pipeline.warehouse.vectors import (
    brute_force_search,
    explain_vector_search,
    indexed_tables,
    list_models,
    load_live_vectors,
    load_live_vectors_cached,
    take_rows,
    vector_search,
    vectors_by_text_hash,
)

#: names of the writing modules, imported on first use: a search process never writes, and ``write`` (with
#: ``eval_runs``, which imports it) costs a cold search ~0.1-0.4 s of imports
_LAZY = {"EVAL_RUN_COLUMNS": "eval_runs", "append_eval_runs": "eval_runs", "read_eval_runs": "eval_runs",
         "publish": "write", "CopyAhead": "write"}


def __getattr__(name: str) -> object:
    """``EVAL_RUN_COLUMNS``, ``append_eval_runs``, ``read_eval_runs``, ``publish`` and ``CopyAhead``, imported on
    first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

__all__ = [
    "CopyAhead",
    "EVAL_RUN_COLUMNS",
    "SCHEMA_VERSION",
    "VectorReader",
    "WarehouseData",
    "append_eval_runs",
    "brute_force_search",
    "chunk_texts_with_tags",
    "connect",
    "dangling_linkers",
    "dangling_targets",
    "explain_vector_search",
    "fetch_chunks",
    "indexed_tables",
    "list_models",
    "list_sources",
    "load_bm25_blobs",
    "load_bm25_cached",
    "load_chunk_keys",
    "load_chunk_rows_cached",
    "load_graph",
    "load_live_vectors",
    "load_live_vectors_cached",
    "take_rows",
    "load_note_keys",
    "model_source_counts",
    "note_by_vault_path",
    "note_changes",
    "note_hashes",
    "note_hashes_of",
    "note_links",
    "note_names",
    "note_tags",
    "note_texts",
    "note_vectors",
    "notes_by_name",
    "notes_by_url",
    "notes_by_source_path",
    "notes_named",
    "publish",
    "read_eval_runs",
    "read_meta",
    "rows_from_table",
    "stats",
    "text_holds",
    "vector_search",
    "vector_table_name",
    "vectors_by_text_hash",
    "warehouse_cache_key",
]
