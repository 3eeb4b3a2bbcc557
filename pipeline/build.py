"""One function per build stage: read the previous stage's files, run the stage, write its output, return metadata.

These are what the Dagster assets (``pipeline/defs``) call; they hold the I/O between stages so asset bodies stay a
line or two and the chain can also run (and be tested) without Dagster. Every function returns a plain dict of
JSON-safe metadata (counts, paths, timings).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline import artifacts
from pipeline.config import Settings
from pipeline.errors import FetchError, PipelineError
from pipeline.models import Chunk, Note, Source

log = logging.getLogger("docsvault")

Progress = Callable[[int, int], None]


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


# ---------------------------------------------------------------- per source
def fetch_stage(settings: Settings, source: Source) -> dict[str, Any]:
    """Fetch one source into <data>/raw/<source>/; on failure the last good copy stays (FetchError propagates)."""
    from pipeline.fetch import fetch_source

    started = time.perf_counter()
    try:
        result = fetch_source(source, settings)
    except FetchError as exc:
        artifacts.update_state(settings, source.name, fetch_status="failed", fetch_error=str(exc), failed_at=_now())
        raise
    seconds = round(time.perf_counter() - started, 3)
    artifacts.update_state(
        settings, source.name, fetch_status="ok", fetch_error=None, revision=result.revision,
        strategy=result.strategy, fetched_at=_now(), files=len(result.files),
    )
    return {
        "strategy": result.strategy,
        "revision": result.revision or "",
        "changed": result.changed,
        "files": len(result.files),
        "requests": int(result.stats.get("requests", 0)),
        "bytes": int(result.stats.get("bytes", 0)),
        "seconds": seconds,
        **{k: v for k, v in result.stats.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("requests", "bytes", "seconds")},
        "warnings": len(result.warnings),
        "warning_lines": list(result.warnings[:20]),
    }


def normalize_stage(settings: Settings, source: Source) -> dict[str, Any]:
    """Normalize the fetched files of one source into <data>/notes/<source>.jsonl (per-file errors are reported)."""
    from pipeline.fetch import load_fetch_result
    from pipeline.normalize import normalize_source

    fetched = load_fetch_result(source, settings)
    if fetched is None:
        raise FetchError(f"source '{source.name}': nothing fetched yet; its fetch must succeed once first")
    state = artifacts.load_state(settings, source.name)
    result = normalize_source(source, fetched.files, fetched_at=state.get("fetched_at") or _now())
    if not result.notes and fetched.files:
        raise PipelineError(
            f"source '{source.name}': none of its {len(fetched.files)} files could be normalized; "
            f"first error: {result.errors[0] if result.errors else 'unknown'}"
        )
    artifacts.save_notes(settings, source.name, result.notes)
    return {"notes": len(result.notes), "errors": len(result.errors), "error_lines": result.errors[:50]}


def vault_stage(settings: Settings, source: Source) -> dict[str, Any]:
    """Write the source's notes to vault/<source>/ (only changed files; removed pages removed)."""
    from pipeline.vault import write_source

    notes = artifacts.load_notes(settings, source.name)
    result = write_source(settings.vault_dir, source.name, notes)
    return {
        "notes": len(notes),
        "written": len(result.written),
        "unchanged": len(result.unchanged),
        "removed": len(result.removed),
        "vault_dir": str(settings.vault_dir / source.name),
    }


def chunk_stage(settings: Settings, source: Source, count_tokens: Callable[[str], int], max_tokens: int) -> dict[str, Any]:
    """Chunk the source's vault notes into <data>/chunks/<source>.jsonl."""
    from pipeline.chunk import chunk_note
    from pipeline.vault import read_notes

    notes = read_notes(settings.vault_dir, [source.name])
    chunks: list[Chunk] = []
    for note in notes:
        chunks.extend(chunk_note(note, count_tokens=count_tokens, max_tokens=max_tokens))
    artifacts.save_chunks(settings, source.name, chunks)
    return {"notes": len(notes), "chunks": len(chunks)}


def embed_stage(settings: Settings, source: Source, embedder: Any, progress: Progress | None = None) -> dict[str, Any]:
    """Embed the source's chunks through the content-hash cache; ``embedded`` counts new model calls."""
    from pipeline.embed import EmbeddingCache, embed_chunks

    chunks = artifacts.load_chunks(settings, source.name)
    cache = EmbeddingCache(settings.cache_dir, embedder.model_id)
    started = time.perf_counter()
    result = embed_chunks(chunks, embedder, cache, progress=progress)
    seconds = time.perf_counter() - started
    artifacts.update_state(settings, source.name, embedded=result.n_embedded, chunks=len(chunks))
    return {
        "model": embedder.model_id,
        "chunks": len(chunks),
        "embedded": result.n_embedded,
        "cached": result.n_cached,
        "seconds": round(seconds, 3),
        "chunks_per_s": round(result.n_embedded / seconds, 2) if result.n_embedded and seconds > 0 else 0.0,
    }


# ---------------------------------------------------------------- all sources
def built_sources(settings: Settings, sources: Sequence[Source]) -> list[str]:
    """Sources of sources.yaml that have a vault folder (their last good copy, possibly from an earlier build)."""
    return [s.name for s in sources if (settings.vault_dir / s.name).is_dir()]


def graph_stage(settings: Settings, sources: Sequence[Source]) -> dict[str, Any]:
    """Link graph over every built source's vault notes -> <data>/graph/links.graphml and links.json."""
    from pipeline.graph import build_graph, export_graph
    from pipeline.vault import read_notes

    notes = read_notes(settings.vault_dir, built_sources(settings, sources))
    lg = build_graph(notes)
    paths = export_graph(lg, settings.graph_dir)
    resolved = sum(e.count for e in lg.edges if e.dst is not None)
    dangling = sum(e.count for e in lg.edges if e.dst is None)
    return {
        "nodes": lg.graph.number_of_nodes(),
        "edges": lg.graph.number_of_edges(),
        "links_resolved": resolved,
        "links_dangling": dangling,
        "attachments": lg.attachments,
        "graphml": str(paths["graphml"]),
        "json": str(paths["json"]),
    }


def warehouse_stage(settings: Settings, sources: Sequence[Source], embedder_factory: Callable[[str], Any]
                    ) -> dict[str, Any]:
    """Publish notes, chunks, links, vectors (one HNSW-indexed table per model) and the BM25 index into one DuckDB
    file, atomically. Vectors come from the embedding cache; a chunk whose vector is missing stays BM25-searchable."""
    import numpy as np

    from pipeline.analysis import Analyzer
    from pipeline.bm25 import build_chunk_index
    from pipeline.embed import EmbeddingCache
    from pipeline.graph import build_graph
    from pipeline.models import text_hash
    from pipeline.vault import read_notes
    from pipeline.warehouse import WarehouseData, publish

    names = built_sources(settings, sources)
    by_name = {s.name: s for s in sources}
    notes = read_notes(settings.vault_dir, names)
    note_ids = {n.note_id for n in notes}
    lg = build_graph(notes)
    metrics = {
        nid: (int(attrs.get("in_degree", 0)), float(attrs.get("pagerank", 0.0)))
        for nid, attrs in lg.graph.nodes(data=True)
    }
    chunks: list[Chunk] = []
    vectors: dict[str, tuple[list[str], Any]] = {}
    missing = 0
    for name in names:
        source_chunks = [c for c in artifacts.load_chunks(settings, name) if c.note_id in note_ids]
        chunks.extend(source_chunks)
        embedder = embedder_factory(settings.model_for(by_name[name]))
        found = EmbeddingCache(settings.cache_dir, embedder.model_id).get_many(
            [text_hash(c.embed_text) for c in source_chunks])
        ids, vecs = vectors.setdefault(embedder.model_id, ([], []))
        for c in source_chunks:
            vec = found.get(text_hash(c.embed_text))
            if vec is None:
                missing += 1
            else:
                ids.append(c.chunk_id)
                vecs.append(vec)
    arrays = {m: (ids, np.asarray(vecs, dtype="float32").reshape(len(ids), -1)) for m, (ids, vecs) in vectors.items()
              if ids}
    bm25 = build_chunk_index(chunks, notes, Analyzer())
    data = WarehouseData(
        notes=notes,
        note_metrics=metrics,
        chunks=chunks,
        edges=lg.edges,
        vectors=arrays,
        bm25_blobs=bm25.to_blobs(),
        run_info={"built_at": _now(), "sources": ",".join(names)},
    )
    stats = publish(settings.warehouse_path, data)
    return {
        "sources": names,
        "models": sorted(arrays),
        "notes": len(notes),
        "chunks": len(chunks),
        "vectors": sum(len(ids) for ids, _ in arrays.values()),
        "missing_vectors": missing,
        "links": len(lg.edges),
        "path": str(settings.warehouse_path),
        "size_mb": round(settings.warehouse_path.stat().st_size / 1e6, 2),
        **{k: v for k, v in stats.items() if isinstance(v, (int, float, str))},
    }


def eval_files(settings: Settings) -> list[Path]:
    """The eval files named by DOCSVAULT_EVALS (a file or folder; several separated by the OS path separator)."""
    import os

    raw = os.environ.get("DOCSVAULT_EVALS")
    paths = [Path(p).resolve() for p in raw.split(os.pathsep) if p] if raw else [settings.evals_dir]
    return [p for p in paths if p.exists()]


def search_index_stage(settings: Settings, embedder_factory: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Open the published warehouse as search does and run one sample query per lane: proves the indexes serve."""
    from pipeline.search import Searcher
    from pipeline.warehouse import connect, explain_vector_search, list_models, stats

    con = connect(settings.warehouse_path, read_only=True)
    try:
        counts = stats(con)
        models = list_models(con)
        plans = {m["model_id"]: explain_vector_search(con, m["table_name"]) for m in models}
    finally:
        con.close()
    searcher = Searcher(settings.warehouse_path, **({"embedder_factory": embedder_factory} if embedder_factory else {}))
    try:
        started = time.perf_counter()
        hits = searcher.search("getting started", k=3)
        seconds = time.perf_counter() - started
    finally:
        close = getattr(searcher, "close", None)
        if close:
            close()
    return {
        **{k: v for k, v in counts.items() if isinstance(v, (int, float, str))},
        "models": [m["model_id"] for m in models],
        "hnsw_index_scan": all("HNSW_INDEX_SCAN" in p for p in plans.values()) if plans else False,
        "sample_query_ms": round(seconds * 1000, 1),
        "sample_hits": [f"{h.vault_path} > {h.heading}" for h in hits],
    }


def eval_stage(settings: Settings, sources: Sequence[Source], embedder_factory: Callable[[str], Any] | None = None
               ) -> dict[str, Any]:
    """Run the eval cases of DOCSVAULT_EVALS (default evals/) whose corpus is a built source; returns the report."""
    from pipeline.evaluate import load_cases, run_eval
    from pipeline.search import Searcher

    files = eval_files(settings)
    cases = load_cases(files) if files else []
    names = set(built_sources(settings, sources))
    cases = [c for c in cases if c.corpus in names]
    if not cases:
        return {"overall": {"n": 0}, "by_source": {}, "by_kind": {}, "files": [str(f) for f in files]}
    searcher = Searcher(settings.warehouse_path, **({"embedder_factory": embedder_factory} if embedder_factory else {}))
    try:
        report = run_eval(searcher, cases)
    finally:
        close = getattr(searcher, "close", None)
        if close:
            close()
    report["files"] = [str(f) for f in files]
    return report
