"""The warehouse stage: BM25 tokens (cached by text hash) + notes, chunks, links and vectors published in one file."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.common import artifacts
from pipeline.common.errors import WarehouseCorruptError, WarehouseNotBuiltError
from pipeline.common.gcpause import collector_paused
from pipeline.common.memo import MemoCache
from pipeline.config import Settings
from pipeline.models import Chunk, Source
from pipeline.stages.base import (
    SHARED_STATE,
    code_version,
    digest,
    file_sha,
    forced,
    notify,
    now,
    stage_lock,
    vault_listing,
)
from pipeline.stages.index import (
    build_link_graph,
    built_sources,
    chunk_models,
    graph_from_export,
    graph_inputs_key,
    shared_state,
)
from pipeline.stages.layout import refuse_removing_every_source
from pipeline.stages.results import WarehouseResult

log = logging.getLogger("docsvault")


class TokenCache(MemoCache):
    """Analyzer tokens of texts, keyed by text hash, in ``<cache_dir>/bm25/tokens-<code version>.marshal``
    (:mod:`marshal`: key and value strings only).

    Re-analysing every chunk (Sudachi for Japanese) is the slowest part of a BM25 rebuild; with this cache a
    rebuild analyses only new texts. :meth:`save` keeps only the entries used by the current build.
    """

    SEP = "\x1f"

    def __init__(self, cache_dir: Path, version: str) -> None:
        super().__init__(Path(cache_dir) / "bm25" / f"tokens-{version}.marshal", binary=True)
        self._from_json = False
        if not self._data:      # the same version's cache as written before marshal: read once, not re-analysed
            self._data = MemoCache(Path(cache_dir) / "bm25" / f"tokens-{version}.json")._data
            self._from_json = bool(self._data)

    @property
    def changed(self) -> bool:
        """As :attr:`MemoCache.changed`, and True once after a JSON cache was read (saved as marshal then)."""
        return super().changed or self._from_json

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:24]

    def tokens(self, text: str, compute: Callable[[str], list[str]]) -> list[str]:
        """``compute(text)``, from the cache when this text was analysed before."""
        joined = self.memo(self.key(text), lambda: self.SEP.join(compute(text)))
        return joined.split(self.SEP) if joined else []

    def save(self, stale: Sequence[Path] = ()) -> None:
        """Write the used entries (when changed) and remove the token files of other code versions."""
        if self.changed and self.path is not None and self.path.parent.is_dir():
            stale = [*stale, *(p for pattern in ("tokens-*.marshal", "tokens-*.json")   # other versions; JSON before
                               for p in self.path.parent.glob(pattern))]
        super().save(stale)


def caching_analyzer(cache: TokenCache) -> Any:
    """An ``Analyzer`` whose ``tokens`` go through ``cache`` (same tokens as a plain Analyzer)."""
    from pipeline.index.analysis import Analyzer

    seen: dict[str, list[str]] = {}     # this build's texts: a title or breadcrumb repeats in every chunk of its
    #                                   page, and the page index reads each chunk's text again after the chunk index

    class _CachingAnalyzer(Analyzer):
        def tokens(self, text: str) -> list[str]:
            if not text:
                return super().tokens(text)
            got = seen.get(text)
            if got is None:
                got = seen[text] = cache.tokens(text, super().tokens)
            return list(got)

    return _CachingAnalyzer()


def _warehouse_key(settings: Settings, names: Sequence[str], by_name: dict[str, Source]) -> str:
    from pipeline.warehouse import SCHEMA_VERSION

    parts = []
    for name in names:
        st = artifacts.load_state(settings, name)
        parts.append((name, vault_listing(settings, name), file_sha(artifacts.chunks_path(settings, name)),
                      settings.models_of(by_name[name]), settings.crosslingual, st.get("models"),
                      st.get("embed_key")))
    return digest(SCHEMA_VERSION, code_version("warehouse"), parts)


def _current_warehouse(settings: Settings) -> tuple[dict[str, str], str]:
    """(meta of the current warehouse, problem) — problem is "" when it opens fine, else why it must be rebuilt."""
    from pipeline.warehouse import connect, read_meta

    path = settings.warehouse_path
    if not path.exists():
        return {}, ""
    try:
        con = connect(path, read_only=True)
    except (WarehouseCorruptError, WarehouseNotBuiltError) as exc:
        return {}, str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure to open means: rebuild
        return {}, f"cannot open {path}: {exc}"
    try:
        return read_meta(con), ""
    except Exception as exc:  # noqa: BLE001
        return {}, f"cannot read {path}: {exc}"
    finally:
        con.close()


def warehouse_stage(settings: Settings, sources: Sequence[Source], embedder_factory: Callable[[str], Any]
                    ) -> WarehouseResult:
    """Publish notes, chunks, links, vectors (one HNSW-indexed table per model) and the BM25 index into one DuckDB
    file, atomically. Vectors come from the embedding cache; a chunk whose vector is missing stays BM25-searchable.

    Nothing is written when no input changed since the warehouse was published (``skipped``). Refused
    (SourceConfigError) when ``sources`` is empty while sources are built (see
    :func:`pipeline.stages.layout.refuse_removing_every_source`). A warehouse file
    that is corrupt or of another schema version is reported (``rebuilt_because``, a warning in the log) and
    rebuilt from the vault and the caches, never used.

    Long: one sequence under the build lock (skip check, read every source, BM25 tokens, publish with its fallback,
    record the key) whose order is the crash-safety argument: the key is recorded only after the file is swapped in.
    """
    import numpy as np

    from pipeline.index.bm25 import PAGE_PREFIX, build_chunk_index, build_page_index
    from pipeline.index.embed import EmbeddingCache, release_models, trim_heap
    from pipeline.ingest.vault import read_notes
    from pipeline.warehouse import WarehouseData, publish

    with stage_lock(settings), collector_paused():     # ~1M objects built and kept to the end: no GC passes
        refuse_removing_every_source(settings, sources, vault=False)     # `sources: []` from the UI or a schedule
        started = time.perf_counter()
        names = built_sources(settings, sources)
        by_name = {s.name: s for s in sources}
        key = _warehouse_key(settings, names, by_name)
        meta, problem = _current_warehouse(settings)
        if problem:
            log.warning("warehouse %s cannot be used (%s): rebuilding it from the vault and the caches",
                        settings.warehouse_path, problem)
        elif meta.get("input_key") == key and not forced():
            last = shared_state(settings).get("warehouse") or {}
            if last.get("input_key") == key:
                kept = WarehouseResult.from_dict(last.get("meta") or {})
                return replace(kept, publish={**kept.publish, "mode": "unchanged"}, rebuilt_because="",
                               skipped=True, seconds=round(time.perf_counter() - started, 3))
        # the per-source stages keep a model loaded after a few texts (embed.KEEP_LOADED_MAX_TEXTS, for the next
        # source); from here on no document is embedded: their memory goes back before the largest steps
        release_models(embedder_factory(spec) for spec in sorted(
            {spec for name in names for spec in settings.embedding_specs(by_name[name])}))
        timings: dict[str, float] = {}
        t = time.perf_counter()
        notify("warehouse", "all", 0, 5)
        notes = read_notes(settings.vault_dir, names)
        note_ids = {n.note_id for n in notes}
        notify("warehouse", "all", 1, 5)
        timings["read_s"] = time.perf_counter() - t
        t = time.perf_counter()
        graph_key = graph_inputs_key(settings, names)
        exported = graph_from_export(settings, graph_key)
        if exported is not None:
            edges, metrics = exported
        else:
            lg = build_link_graph(settings, notes)
            edges = lg.edges
            metrics = {nid: (int(a.get("in_degree", 0)), float(a.get("pagerank", 0.0)))
                       for nid, a in lg.graph.nodes(data=True)}
        timings["graph_s"] = time.perf_counter() - t
        notify("warehouse", "all", 2, 5)
        t = time.perf_counter()
        chunks: list[Chunk] = []
        wanted: dict[str, list[Chunk]] = {}     # model id -> its chunks over every source, in source order
        for name in names:
            source_chunks = [c for c in artifacts.load_chunks(settings, name) if c.note_id in note_ids]
            chunks.extend(source_chunks)
            for spec, group in chunk_models(settings, by_name[name], source_chunks).items():
                wanted.setdefault(embedder_factory(spec).model_id, []).extend(group)
        arrays: dict[str, tuple[list[str], Any]] = {}     # model id -> chunk ids, their vectors (n, dim)
        missing = 0
        unembedded: dict[str, set[str]] = {}     # source -> its chunk ids without a vector of some model
        for model_id, group in wanted.items():
            # one gather per model into one array (a join of per-source blocks copied ~100 MB once more)
            found, block = EmbeddingCache(settings.cache_dir, model_id).take([c.text_hash for c in group])
            missing += len(group) - len(found)
            if len(found) < len(group):
                have = np.zeros(len(group), dtype=bool)
                have[found] = True
                for i in np.flatnonzero(~have).tolist():
                    unembedded.setdefault(group[i].source, set()).add(group[i].chunk_id)
            if len(found):
                arrays[model_id] = ([group[i].chunk_id for i in found.tolist()], block)
        del wanted
        timings["vectors_s"] = time.perf_counter() - t
        notify("warehouse", "all", 3, 5)
        t = time.perf_counter()
        tokens = TokenCache(settings.cache_dir, code_version("bm25"))
        analyzer = caching_analyzer(tokens)
        bm25 = build_chunk_index(chunks, notes, analyzer)
        bm25_blobs = bm25.to_blobs()
        bm25_blobs.update({PAGE_PREFIX + k: v for k, v in build_page_index(chunks, notes, analyzer).to_blobs().items()})
        tokens.save()
        hits, misses = tokens.hits, tokens.misses
        del bm25, analyzer, tokens          # the token lists and index arrays: only the blobs are published
        trim_heap()
        timings["bm25_s"] = time.perf_counter() - t
        notify("warehouse", "all", 4, 5)
        data = WarehouseData(
            notes=notes,
            note_metrics=metrics,
            chunks=chunks,
            edges=edges,
            vectors=arrays,
            bm25_blobs=bm25_blobs,
            run_info={"built_at": now(), "sources": ",".join(names), "input_key": key,
                      "crosslingual_model": (embedder_factory(settings.crosslingual).model_id
                                             if settings.crosslingual else "")},
        )
        t = time.perf_counter()
        stats = publish(settings.warehouse_path, data, incremental=not problem and not forced())
        timings["publish_s"] = time.perf_counter() - t
        notify("warehouse", "all", 5, 5)
        out = WarehouseResult(
            sources=tuple(names), models=tuple(sorted(arrays)), notes=len(notes), chunks=len(chunks),
            vectors=sum(len(ids) for ids, _ in arrays.values()), missing_vectors=missing, links=len(edges),
            path=str(settings.warehouse_path), size_mb=round(settings.warehouse_path.stat().st_size / 1e6, 2),
            tokens_cached=hits, tokens_analysed=misses, rebuilt_because=problem,
            publish={k: v for k, v in stats.items() if isinstance(v, (int, float, str)) and k != "models"},
            timings={k: round(v, 3) for k, v in timings.items()},
            missing_vectors_in=", ".join(
                f"{name} {len(unembedded[name])} of {sum(c.source == name for c in chunks)}"
                for name in names if name in unembedded),
        )
        if out.missing_vectors_in:
            log.warning("chunks without a vector (their embeddings step did not finish; BM25 finds them, the "
                        "vector lanes do not): %s; `docsvault build --source <name>` embeds them",
                        out.missing_vectors_in)
        meta = {k: v for k, v in out.as_dict().items() if k != "skipped"}
        artifacts.update_state(settings, SHARED_STATE, warehouse={"input_key": key, "meta": meta})
    return replace(out, skipped=False, seconds=round(time.perf_counter() - started, 3))
