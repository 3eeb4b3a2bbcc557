"""Read helpers over notes, chunks, links, tags and the BM25 blobs (what search, read and status ask)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from pipeline.warehouse.vectors import _live_sql, _table_dim, list_models

log = logging.getLogger("pipeline.warehouse")


def load_bm25_blobs(con: duckdb.DuckDBPyConnection) -> dict[str, bytes]:
    """The serialized BM25 index (name -> bytes); empty when the build stored none."""
    return {r[0]: bytes(r[1]) for r in con.execute("SELECT name, data FROM bm25_index").fetchall()}


def load_chunk_keys(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Every chunk's ``chunk_id``, ``note_id``, ``source``, ``ordinal``, ``language`` (its note's detected language,
    :mod:`pipeline.index.language`) as an Arrow table in chunk id order, for in-memory lookups."""
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


#: bumped when the layout of a cached chunk-rows entry changes
ROWS_CACHE_FORMAT = 1


def load_chunk_rows_cached(con: duckdb.DuckDBPyConnection, warehouse_path: Path) -> pa.Table | None:
    """Every chunk with its note's fields (the columns of :func:`fetch_chunks`, in chunk id order) as an Arrow
    table memory-mapped from a disk cache (:mod:`pipeline.index.fastcache`, kind ``rows``; an uncompressed Arrow
    IPC file, ~2x the chunks' text): a search looks its hits up in it instead of one DuckDB query per search
    (~8 ms). Keyed like the vector cache (warehouse file + WAL stamp, build facts), so it is never stale; a
    missing or corrupt entry is rebuilt (one full read, ~0.3 s for 30k chunks).

    Returns:
        The table (zero-copy over the mapped file), or None when the cache is off or cannot be written (callers use
        :func:`fetch_chunks`).
    """
    from pipeline.index.fastcache import entry_key, file_stamp, load_entry, store_entry

    def key() -> str:
        meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('built_at', 'updates', 'input_key')"
                                ).fetchall())
        return entry_key(ROWS_CACHE_FORMAT, file_stamp(Path(warehouse_path)),
                         file_stamp(Path(f"{warehouse_path}.wal")), sorted(meta.items()))

    k = key()
    name = f"chunks.{entry_key(str(Path(warehouse_path).resolve()))[:10]}"
    directory = load_entry("rows", name, k)
    if directory is not None:
        try:
            return _read_ipc(directory / "chunks.arrow")
        except (OSError, ValueError, pa.ArrowException) as exc:
            log.debug("chunk rows cache %s unreadable (%s): rebuilding it", directory, exc)
    tbl = con.execute(
        "SELECT c.chunk_id, c.note_id, c.source, c.ordinal, c.heading, c.breadcrumb, c.text, "
        "n.source_path, n.vault_path, n.title, n.url "
        "FROM chunks c JOIN notes n USING (note_id) ORDER BY c.chunk_id").fetch_arrow_table()
    if key() != k:                         # the file was replaced while we read: no entry
        return None

    def write(tmp: Path) -> None:
        with pa.OSFile(str(tmp / "chunks.arrow"), "wb") as sink, pa.ipc.new_file(sink, tbl.schema) as writer:
            writer.write_table(tbl)

    stored = store_entry("rows", name, k, write, {"rows": tbl.num_rows})
    if stored is None:
        return None
    try:
        return _read_ipc(stored / "chunks.arrow")       # the mapped copy: shared with the page cache
    except (OSError, ValueError, pa.ArrowException) as exc:   # removed by a writer of a newer warehouse
        log.debug("chunk rows cache %s gone before it was read (%s): serving the table read", stored, exc)
        return tbl


def _read_ipc(path: Path) -> pa.Table:
    """An Arrow IPC file as a table over its memory mapping (no copy)."""
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()


#: bumped when the layout of a cached BM25 entry changes
BM25_CACHE_FORMAT = 1


def warehouse_cache_key(con: duckdb.DuckDBPyConnection, warehouse_path: Path, *parts: Any) -> str:
    """Cache key of data derived from the whole warehouse: the file and WAL stamps and the build facts of ``meta``
    (any write changes one of them), plus ``parts``."""
    from pipeline.index.fastcache import entry_key, file_stamp

    meta = dict(con.execute("SELECT key, value FROM meta WHERE key IN ('built_at', 'updates', 'input_key')"
                            ).fetchall())
    return entry_key(*parts, file_stamp(Path(warehouse_path)), file_stamp(Path(f"{warehouse_path}.wal")),
                     sorted(meta.items()))


def load_bm25_cached(con: duckdb.DuckDBPyConnection, warehouse_path: Path | None) -> tuple[Any, Any]:
    """The warehouse's BM25 indexes ``(chunk index, page index)`` (:class:`pipeline.index.bm25.Bm25Index`, either
    None when the build stored none), through a disk cache (:mod:`pipeline.index.fastcache`, kind ``bm25``): the
    score arrays as raw ``.npy`` memory-mapped read-only, vocabulary and ids as ``marshal``, instead of fetching,
    decompressing and JSON-parsing the blobs on every start (~0.3 s of a cold search for 30k chunks). The indexes
    score exactly as the ones :meth:`Bm25Index.from_blobs` gives (the same arrays). Keyed on the warehouse file +
    WAL stamp and its build facts; a missing or corrupt entry is rebuilt; ``warehouse_path`` None, or a cache that
    is off or unwritable: straight from the blobs.

    Raises:
        WarehouseCorruptError: the stored blobs are unreadable (see :meth:`Bm25Index.from_blobs`).
    """
    from pipeline.index.bm25 import Bm25Index, split_blobs
    from pipeline.index.fastcache import entry_key, load_entry, store_entry

    def from_warehouse() -> tuple[Any, Any]:
        chunk_blobs, page_blobs = split_blobs(load_bm25_blobs(con))
        return (Bm25Index.from_blobs(chunk_blobs) if chunk_blobs else None,
                Bm25Index.from_blobs(page_blobs) if page_blobs else None)

    if warehouse_path is None:
        return from_warehouse()
    key = warehouse_cache_key(con, warehouse_path, BM25_CACHE_FORMAT)
    name = f"bm25.{entry_key(str(Path(warehouse_path).resolve()))[:10]}"
    directory = load_entry("bm25", name, key)
    if directory is not None:
        try:
            return (Bm25Index.load_dir(directory, "chunk"), Bm25Index.load_dir(directory, "page"))
        except (OSError, ValueError, EOFError, TypeError, KeyError) as exc:
            log.debug("BM25 cache %s unreadable (%s): rebuilding it", directory, exc)
    indexes = from_warehouse()
    if warehouse_cache_key(con, warehouse_path, BM25_CACHE_FORMAT) != key:   # replaced while we read: no entry
        return indexes

    def write(tmp: Path) -> None:
        for prefix, index in zip(("chunk", "page"), indexes):
            if index is not None:
                index.save_dir(tmp, prefix)

    store_entry("bm25", name, key, write)
    return indexes


def rows_from_table(tbl: pa.Table, index: dict[str, int], chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """:func:`fetch_chunks` over a table from :func:`load_chunk_rows_cached` (``index``: chunk id -> row)."""
    rows = [index[c] for c in dict.fromkeys(chunk_ids) if c in index]
    if not rows:
        return {}
    # one zero-copy slice per row: ``Table.take`` would import pyarrow.compute (~0.15-0.4 s of a cold search)
    taken = [tbl.slice(i, 1).to_pylist()[0] for i in rows]
    return {r["chunk_id"]: {col: r[col] for col in _CHUNK_COLS} for r in taken}


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
    """Every note's frontmatter tags and those of the H1 that heads it (``# Home #project``): note_id -> tags as
    written (without a leading ``#``); notes without tags absent."""
    rows = con.execute("SELECT note_id, tags FROM notes WHERE len(coalesce(tags, [])) > 0").fetchall()
    return {r[0]: tuple(str(t).lstrip("#") for t in r[1] if t) for r in rows}


def note_names(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, ...]]:
    """Every note's names: note_id -> (title, file name without ``.md``, *aliases) — the file name is the page's
    name in Obsidian and in every ``[[wikilink]]`` even when its first heading says otherwise; empty names left out;
    notes without any absent."""
    rows = con.execute("SELECT note_id, title, source_path, aliases FROM notes").fetchall()
    out = {}
    for nid, title, source_path, aliases in rows:
        stem = str(source_path or "").rsplit("/", 1)[-1]
        stem = stem[:-3] if stem.lower().endswith(".md") else stem.rsplit(".", 1)[0] if "." in stem else stem
        names = tuple(str(n) for n in (title, stem, *(aliases or ())) if n and str(n).strip())
        if names:
            out[nid] = names
    return out


def notes_named(con: duckdb.DuckDBPyConnection, name: str, key: Callable[[str], str],
                limit: int = 10) -> list[dict[str, str]]:
    """Notes one of whose names (:func:`note_names`: title, file name without ``.md``, aliases) is ``name`` as
    ``key`` compares names (search's ``name_key``: NFKC, case-folded, punctuation ignored); at most ``limit``,
    ``[{"source", "source_path", "vault_path"}]`` by vault path; [] when ``key(name)`` is empty."""
    wanted = key(name)
    if not wanted:
        return []
    ids = sorted(nid for nid, names in note_names(con).items() if any(key(n) == wanted for n in names))
    if not ids:
        return []
    rows = con.execute(
        "SELECT source, source_path, vault_path FROM notes WHERE list_contains(?, note_id) "
        "ORDER BY vault_path LIMIT ?", [ids, limit]
    ).fetchall()
    return [{"source": r[0], "source_path": r[1], "vault_path": r[2]} for r in rows]


def note_changes(before: dict[str, str], after: dict[str, str]) -> dict[str, list[str]]:
    """What a rebuild changed between two :func:`note_hashes` snapshots: ``{"added", "changed", "removed"}``, each
    a sorted list of vault paths."""
    return {"added": sorted(set(after) - set(before)), "removed": sorted(set(before) - set(after)),
            "changed": sorted(p for p in set(after) & set(before) if after[p] != before[p])}


def note_hashes_of(path: Path, sources: Sequence[str] | None = None) -> dict[str, str]:
    """:func:`note_hashes` of the warehouse file at ``path``; {} when there is none or it cannot be read (a first
    build; a corrupt file, which the build replaces)."""
    from pipeline.warehouse.schema import connect

    if not path.exists():
        return {}
    try:
        con = connect(path, read_only=True)
    except (duckdb.Error, OSError):
        return {}
    try:
        return note_hashes(con, sources)
    except duckdb.Error:
        return {}
    finally:
        con.close()


def note_hashes(con: duckdb.DuckDBPyConnection, sources: Sequence[str] | None = None) -> dict[str, str]:
    """vault_path -> a digest of each note's body (its ``content_hash``) and frontmatter (of ``sources`` only, when
    given): to tell what a rebuild changed. The frontmatter counts (a retagged note, a new alias or date is a
    changed note: before, only a body change was), except ``fetched_at``, which a fetch sets without a change."""
    import hashlib
    import json

    rows = con.execute("SELECT source, vault_path, content_hash, frontmatter FROM notes").fetchall()
    wanted = set(sources) if sources is not None else None
    out: dict[str, str] = {}
    for source, vault_path, content_hash, frontmatter in rows:
        if wanted is not None and source not in wanted:
            continue
        try:
            fm = json.loads(frontmatter) if frontmatter else {}
        except ValueError:
            fm = {"frontmatter": frontmatter}
        if isinstance(fm, dict):
            fm.pop("fetched_at", None)
        digest = json.dumps([content_hash or "", fm], sort_keys=True, ensure_ascii=False, default=str)
        out[vault_path] = hashlib.sha256(digest.encode("utf-8")).hexdigest()
    return out


def notes_by_source_path(con: duckdb.DuckDBPyConnection, source_path: str) -> list[dict[str, str]]:
    """Notes whose ``source_path`` is this path, any source: ``[{"source", "source_path", "vault_path"}]``."""
    rows = con.execute(
        "SELECT source, source_path, vault_path FROM notes WHERE source_path = ? ORDER BY source", [source_path]
    ).fetchall()
    return [{"source": r[0], "source_path": r[1], "vault_path": r[2]} for r in rows]


def notes_by_url(con: duckdb.DuckDBPyConnection, url: str, limit: int = 10) -> list[dict[str, str]]:
    """Notes whose page ``url`` (where the docs site serves it) is ``url``, compared without the scheme, a query
    string, a trailing ``/``, ``.html``/``.htm``/``.md`` or ``index``, case-insensitively (``http://duckdb.org/docs/stable/
    data/parquet/overview.html`` is ``https://duckdb.org/docs/stable/data/parquet/overview``); a ``#fragment`` is
    no part of a page's URL: such a ``url`` finds nothing (the caller reads it as a link's heading). At most
    ``limit``, ``[{"source", "source_path", "vault_path"}]`` by vault path."""
    norm = ("lower(rtrim(regexp_replace(regexp_replace(regexp_replace({}, '^[a-zA-Z][a-zA-Z0-9+.-]*://', ''), "
            "'[?].*$', ''), '(/index)?([.](html?|md))?/*$', ''), '/'))")
    rows = con.execute(
        f"SELECT source, source_path, vault_path FROM notes WHERE coalesce(url, '') <> '' AND {norm.format('url')} = "
        f"{norm.format('?')} ORDER BY vault_path LIMIT ?", [url, limit]).fetchall()
    return [{"source": r[0], "source_path": r[1], "vault_path": r[2]} for r in rows]


def notes_by_name(con: duckdb.DuckDBPyConnection, name: str, limit: int = 10,
                  case_sensitive: bool = False) -> list[dict[str, str]]:
    """Notes a bare name or partial path means, as an Obsidian link ``[[Home]]`` does: those whose vault path is
    ``name`` or ends in ``/name`` (``.md`` added when missing), compared case-insensitively (with
    ``case_sensitive`` exactly: ``abc`` is then not ``ABC.md``); at most ``limit``, ``[{"source",
    "source_path", "vault_path"}]`` by vault path."""
    tail = name if name.lower().endswith(".md") else name + ".md"
    path, arg = ("vault_path", "?") if case_sensitive else ("lower(vault_path)", "lower(?)")
    rows = con.execute(
        f"SELECT source, source_path, vault_path FROM notes WHERE {path} = {arg} OR suffix({path}, {arg}) "
        "ORDER BY vault_path LIMIT ?", [tail, "/" + tail, limit]
    ).fetchall()
    return [{"source": r[0], "source_path": r[1], "vault_path": r[2]} for r in rows]



def dangling_linkers(con: duckdb.DuckDBPyConnection, target: str, limit: int = 3) -> list[str]:
    """Vault paths of the notes (sorted, at most ``limit``) holding a dangling link whose target is ``target``
    (as written in the link, ``.md`` and case ignored: ``[[Tea]]``, ``[[tea.md]]``): a note no source has."""
    want = target[:-3] if target.lower().endswith(".md") else target
    rows = con.execute(
        "SELECT DISTINCT n.vault_path FROM links l JOIN notes n ON n.note_id = l.src WHERE l.dst IS NULL AND "
        "lower(CASE WHEN lower(l.target) LIKE '%.md' THEN l.target[:-4] ELSE l.target END) = lower(?) "
        "ORDER BY n.vault_path LIMIT ?", [want, limit]).fetchall()
    return [r[0] for r in rows]


def dangling_targets(con: duckdb.DuckDBPyConnection, vault_path: str, limit: int = 5) -> tuple[list[str], int]:
    """The targets of the dangling links of the note at ``vault_path`` (links to a note no source has), as written
    in the links (``存在しないノート``), sorted, at most ``limit``; and how many distinct targets there are."""
    rows = con.execute(
        "SELECT DISTINCT l.target FROM links l JOIN notes n ON n.note_id = l.src "
        "WHERE n.vault_path = ? AND l.dst IS NULL AND l.target IS NOT NULL ORDER BY l.target", [vault_path]
    ).fetchall()
    return [r[0] for r in rows[:limit]], len(rows)


# ---- search UX helpers (neighbours, query filters, inline tags; issue 17) ----


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
    """note_id -> the note's title, its aliases and its chunks in order (joined by blank lines), each section's
    heading before its first chunk (a chunk's text does not hold its heading line: without it a quoted heading
    matched nothing; an alias is one of the note's names, so a quoted alias finds it too); unknown ids absent."""
    if not note_ids:
        return {}
    rows = con.execute(
        "WITH c AS (SELECT note_id, ordinal, CASE WHEN coalesce(heading, '') <> '' AND heading IS DISTINCT FROM "
        "lag(heading) OVER (PARTITION BY note_id ORDER BY ordinal) THEN heading || chr(10) || chr(10) ELSE '' END "
        "|| coalesce(text, '') AS body FROM chunks WHERE list_contains(string_split(?, chr(31)), note_id)) "
        "SELECT n.note_id, any_value(n.title), array_to_string(any_value(n.aliases), chr(10) || chr(10)), "
        "string_agg(c.body, chr(10) || chr(10) ORDER BY c.ordinal) "
        "FROM notes n LEFT JOIN c USING (note_id) "
        "WHERE list_contains(string_split(?, chr(31)), n.note_id) GROUP BY n.note_id",
        ["\x1f".join(note_ids), "\x1f".join(note_ids)],
    ).fetchall()
    return {r[0]: "\n\n".join(part for part in (r[1] or "", r[2] or "", r[3] or "") if part) for r in rows}


def text_holds(con: duckdb.DuckDBPyConnection, word: str, sources: Sequence[str] | None = None,
               note_ids: Sequence[str] | None = None) -> bool:
    """Whether a chunk of the sources (None: all) and of the notes ``note_ids`` (None: any) holds ``word`` as
    written, in its text or its breadcrumb (title and headings), or a note's alias does: a plain substring test, no
    analysis."""
    scoped = "" if sources is None else " AND list_contains(string_split(?, chr(31)), n.source)"
    params: list[Any] = [word, word, word]
    if sources is not None:
        params.append("\x1f".join(sources))
    if note_ids is not None:
        scoped += " AND list_contains(?, n.note_id)"
        params.append(list(note_ids))
    return con.execute(
        "SELECT EXISTS (SELECT 1 FROM chunks c JOIN notes n USING (note_id) WHERE (strpos(c.text, ?) > 0 "
        "OR strpos(c.breadcrumb, ?) > 0 OR strpos(array_to_string(n.aliases, chr(10)), ?) > 0)" + scoped + ")",
        params).fetchone()[0]


def chunk_texts_with_tags(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """``[(note_id, the chunk's heading, a line break and its text)]`` of the chunks that may hold an inline
    ``#tag`` (a ``#`` after whitespace or at the start, followed by a non-space) in their text or their heading (a
    tag in a heading, ``## Standup #meeting``, is a tag of the note, as in Obsidian; a chunk's text holds no heading
    line of its own); the caller parses them (:func:`pipeline.search.tags.inline_tags`)."""
    return [(r[0], r[1]) for r in con.execute(
        "SELECT note_id, coalesce(heading, '') || chr(10) || text FROM chunks "
        "WHERE regexp_matches(text, '(^|\\s)#[^\\s#]') OR regexp_matches(coalesce(heading, ''), '(^|\\s)#[^\\s#]')"
    ).fetchall()]


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
