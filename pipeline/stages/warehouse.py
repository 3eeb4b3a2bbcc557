"""The warehouse stage: BM25 tokens (cached by text hash) + notes, chunks, links and vectors published in one file."""

from __future__ import annotations

import hashlib
import json
import logging
import marshal
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from pipeline.common import artifacts
from pipeline.common.errors import WarehouseCorruptError, WarehouseNotBuiltError
from pipeline.common.gcpause import collector_paused
from pipeline.common.memo import MemoCache
from pipeline.config import Settings
from pipeline.models import Chunk, Note, Source
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
from pipeline.stages.layout import refuse_removing_every_source, refuse_sources_built_elsewhere
from pipeline.stages.results import WarehouseResult

log = logging.getLogger("docsvault")


class TokenCache:
    """Analyzer tokens of texts, keyed by text hash, in ``<cache_dir>/bm25/tokens-<code version>.ids.marshal``:
    :mod:`marshal` of ``{"terms": [term, ...], "texts": {key: ids}}``, a text's ``ids`` its tokens as
    little-endian int32 positions in ``terms`` (bytes, 4 per token). A build reads the texts' tokens as ids (one
    ``bytes.join``, no string made per token: 0.02 s for the 1.7 M tokens of the five shared corpora, against
    0.3 s to split and number them as strings).

    Re-analysing every chunk (Sudachi for Japanese) is the slowest part of a BM25 rebuild; with this cache a
    rebuild analyses only new texts. :meth:`save` keeps only the entries used by the current build (and the terms
    they use). The same version's cache as written before ids (``tokens-<version>.marshal`` of joined strings, or
    JSON before that) is read as well: its texts are converted as used, not re-analysed.

    ``hits`` / ``misses``: texts found in the file / analysed (a text looked up twice counts once).
    """

    SEP = "\x1f"        # joins a text's tokens in the caches written before ids

    def __init__(self, cache_dir: Path, version: str, fresh: bool = False) -> None:
        """``fresh``: start empty, every text analysed again and the file rewritten (``build --force``: a cache
        file that holds wrong but well-formed tokens would otherwise survive every build)."""
        folder = Path(cache_dir) / "bm25"
        self.path = folder / f"tokens-{version}.ids.marshal"
        self.hits = 0
        self.misses = 0
        self.terms, self._data = ([], {}) if fresh else _read_token_ids(self.path)
        self._used: dict[str, bytes] = {}
        self._numbers: dict[str, int] | None = None      # term -> its position in terms, made on the first miss
        self._joined: dict[str, Any] = {}
        if not self._data and not fresh:    # the same version's cache of joined strings (marshal, JSON before it)
            self._joined = (MemoCache(folder / f"tokens-{version}.marshal", binary=True)._data
                            or MemoCache(folder / f"tokens-{version}.json")._data)

    @property
    def changed(self) -> bool:
        """True when the used entries differ from the loaded ones (something analysed, something not used, or read
        from a cache of joined strings: saved as ids then)."""
        return bool(self.misses) or len(self._used) != len(self._data) or bool(self._joined)

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:24]

    def ids(self, texts: Sequence[str], compute: Callable[[str], list[str]]) -> list[bytes]:
        """The ids of ``compute(text)`` in :attr:`terms` (little-endian int32 bytes) of each text, from the cache
        when the text was analysed before."""
        used, data = self._used, self._data
        out = []
        for text in texts:
            key = hashlib.sha1(text.encode("utf-8")).hexdigest()[:24]     # :meth:`key`, inline: ~43k texts a build
            got = used.get(key)
            if got is None:
                got = data.get(key)
                if got is None:
                    got = self._convert_or_compute(key, text, compute)
                else:
                    self.hits += 1
                used[key] = got
            out.append(got)
        return out

    def tokens(self, text: str, compute: Callable[[str], list[str]]) -> list[str]:
        """``compute(text)``, from the cache when this text was analysed before."""
        import numpy as np

        terms = self.terms
        return [terms[i] for i in np.frombuffer(self.ids([text], compute)[0], dtype="<i4").tolist()]

    def _convert_or_compute(self, key: str, text: str, compute: Callable[[str], list[str]]) -> bytes:
        """The ids of a text not in the file: from the cache of joined strings (a hit), else ``compute(text)``."""
        joined = self._joined.get(key)
        if isinstance(joined, str):
            self.hits += 1
            return self._encode(joined.split(self.SEP) if joined else [])
        self.misses += 1
        return self._encode(compute(text))

    def _encode(self, tokens: list[str]) -> bytes:
        """The ids of ``tokens``, new terms appended to :attr:`terms`."""
        import numpy as np

        if self._numbers is None:
            self._numbers = dict(zip(self.terms, range(len(self.terms))))
        numbers, terms = self._numbers, self.terms
        out = []
        for t in tokens:
            i = numbers.get(t)
            if i is None:
                i = numbers[t] = len(terms)
                terms.append(t)
            out.append(i)
        return np.asarray(out, dtype="<i4").tobytes()

    def save(self, stale: Sequence[Path] = ()) -> None:
        """Write the used entries (when changed) and remove the token files of other code versions and formats."""
        if self.changed:
            if self.path.parent.is_dir():
                stale = [*stale, *(p for pattern in ("tokens-*.marshal", "tokens-*.json")   # other versions, formats
                                   for p in self.path.parent.glob(pattern))]
            terms, texts = _used_terms(self.terms, self._used)
            artifacts.write_atomic(self.path, marshal.dumps({"terms": terms, "texts": texts}))
        for old in stale:
            if old != self.path:
                old.unlink(missing_ok=True)


def _read_token_ids(path: Path) -> tuple[list[str], dict[str, bytes]]:
    """``(terms, texts)`` of a token cache file (:class:`TokenCache`); empty when the file is missing, unreadable
    or inconsistent (an id outside ``terms``, a term twice)."""
    import numpy as np

    try:
        data = marshal.loads(path.read_bytes())
        terms, texts = data["terms"], data["texts"]
        if not (isinstance(terms, list) and isinstance(texts, dict) and all(type(t) is str for t in terms)
                and len(set(terms)) == len(terms) and all(len(v) % 4 == 0 for v in texts.values())):
            return [], {}
        ids = np.frombuffer(b"".join(texts.values()), dtype="<i4")
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        return [], {}
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= len(terms)):
        return [], {}
    return terms, texts


def _used_terms(terms: list[str], texts: dict[str, bytes]) -> tuple[list[str], dict[str, bytes]]:
    """``(terms, texts)`` with only the terms the texts use (in their order) and the ids renumbered to match."""
    import numpy as np

    ids = np.frombuffer(b"".join(texts.values()), dtype="<i4")
    used = np.zeros(len(terms), dtype=bool)
    used[ids] = True
    if used.all():
        return terms, texts
    renumbered = (np.cumsum(used, dtype=np.int64) - 1)[ids].astype("<i4").tobytes()
    ends = np.cumsum([len(v) for v in texts.values()]).tolist()
    starts = [0, *ends[:-1]]
    return ([t for t, keep in zip(terms, used.tolist()) if keep],
            {k: renumbered[a:b] for k, a, b in zip(texts, starts, ends)})


def caching_analyzer(cache: TokenCache) -> Any:
    """An ``Analyzer`` whose ``tokens`` go through ``cache`` (same tokens as a plain Analyzer), with
    ``term_ids(texts)`` for ``pipeline.index.bm25``: the texts' tokens as ids in ``cache.terms`` (see
    :meth:`TokenCache.ids`), no string made per token."""
    import numpy as np

    from pipeline.index.analysis import Analyzer

    seen: dict[str, list[str]] = {}     # this build's texts: a title or breadcrumb repeats in every chunk of its
    #                                   page, and the page index reads each chunk's text again after the chunk index
    seen_ids: dict[str, bytes] = {"": b""}

    class _CachingAnalyzer(Analyzer):
        def tokens(self, text: str) -> list[str]:
            if not text:
                return super().tokens(text)
            got = seen.get(text)
            if got is None:
                got = seen[text] = cache.tokens(text, super().tokens)
            return list(got)

        def term_ids(self, texts: Sequence[str]) -> tuple[Any, Any, list[str]]:
            """``(ids, lengths, terms)``: the tokens of every text one after the other as int32 (n_tokens,)
            positions in ``terms``, and tokens per text, int64 (n_texts,)."""
            new = [t for t in dict.fromkeys(texts) if t not in seen_ids]
            seen_ids.update(zip(new, cache.ids(new, super().tokens)))
            blobs = list(map(seen_ids.__getitem__, texts))
            ids = np.frombuffer(b"".join(blobs), dtype="<i4")
            return ids, np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)) // 4, cache.terms

    return _CachingAnalyzer()


def bm25_index_blobs(tokens: TokenCache, chunks: Sequence[Chunk], notes: Sequence[Note]
                     ) -> tuple[dict[str, bytes], int, int]:
    """The warehouse's ``bm25_index`` blobs (the chunk index's, then the page index's under ``PAGE_PREFIX``) with
    tokens from ``tokens`` (saved after), and the cache's hits and misses.

    The chunk index is serialized in a second thread while the page index is built (~0.2 s for the five shared
    corpora, mostly zlib, which lets go of the GIL): 0.52 s instead of 0.65 s for the whole step there."""
    from pipeline.index.bm25 import PAGE_PREFIX, build_chunk_index, build_page_index

    analyzer = caching_analyzer(tokens)
    with ThreadPoolExecutor(max_workers=1) as pool:
        chunk_blobs = pool.submit(build_chunk_index(chunks, notes, analyzer).to_blobs)
        page_blobs = build_page_index(chunks, notes, analyzer).to_blobs()
        blobs = chunk_blobs.result()
    blobs.update({PAGE_PREFIX + k: v for k, v in page_blobs.items()})
    tokens.save()
    return blobs, tokens.hits, tokens.misses


class _VectorsUnreadable(Exception):
    """Vectors the embedding cache located (:meth:`~pipeline.index.embed.EmbeddingCache.locate`) could not be read
    when the publish needed them: a shard damaged past its header, or compacted away by a concurrent build."""


def _read_cached(cache: Any, hashes: Sequence[str], rows: Any) -> Any:
    """float32 (len(rows), dim): the cached vectors of ``hashes[rows]`` (``rows`` int64 positions); the shards
    read are let go after (a full publish reads one model at a time).

    Raises:
        _VectorsUnreadable: one of them is not in the cache any more, or its shard is unreadable.
    """
    wanted = [hashes[i] for i in rows.tolist()]
    found, block = cache.take(wanted)
    cache.drop_vectors()
    if len(found) != len(wanted):
        raise _VectorsUnreadable(f"{cache.dir}: {len(wanted) - len(found)} of {len(wanted)} vectors could not be read")
    return block


def _cached_vectors(settings: Settings, wanted: dict[str, list[Chunk]], *, lazy: bool = True
                   ) -> tuple[dict[str, tuple[list[str], Any]], int, dict[str, set[str]]]:
    """The vectors of each model's chunks (``wanted``: model id -> chunks) in its embedding cache.

    ``lazy`` (a build): the cache only says which texts it holds (:meth:`EmbeddingCache.locate
    <pipeline.index.embed.EmbeddingCache.locate>`: hashes and headers, no vector) and each model's vectors are a
    :class:`~pipeline.warehouse.VectorReader` that the publish reads: every row for a full publish, only the rows it
    inserts for an incremental one (~75 of 55k after five edited pages, instead of gathering ~100 MB). Its ``read``
    raises ``_VectorsUnreadable`` when a located vector cannot be read. Not lazy: every vector gathered now.

    Returns:
        ``(vectors, missing, unembedded)``: model id -> (chunk ids with a vector, in ``wanted`` order; their vectors,
        float32 (n, dim) or a reader), only models with a vector; chunks without a vector over all models; source
        -> its chunk ids without a vector of some model.

    Raises:
        EmbeddingError: a cache holds vectors of two dims for these texts.
    """
    import numpy as np

    from pipeline.index.embed import EmbeddingCache
    from pipeline.stages.index import _embedding_cache
    from pipeline.warehouse import VectorReader

    arrays: dict[str, tuple[list[str], Any]] = {}
    missing = 0
    unembedded: dict[str, set[str]] = {}
    text_hashes: dict[str, str] = {}     # chunk id -> text hash (a property that hashes the text: once per chunk)
    for model_id, group in wanted.items():
        hashes = [text_hashes.get(c.chunk_id) or text_hashes.setdefault(c.chunk_id, c.text_hash) for c in group]
        if lazy:        # the embed stage's cache of this process when still valid: its shards' hashes already read
            cache = _embedding_cache(settings, model_id)
            found, dim = cache.locate(hashes)
        else:           # one gather per model into one array (a join of per-source blocks copied ~100 MB once more)
            found, block = EmbeddingCache(settings.cache_dir, model_id).take(hashes)
        missing += len(group) - len(found)
        if len(found) < len(group):
            have = np.zeros(len(group), dtype=bool)
            have[found] = True
            for i in np.flatnonzero(~have).tolist():
                unembedded.setdefault(group[i].source, set()).add(group[i].chunk_id)
        if len(found):
            rows = found.tolist()
            arrays[model_id] = ([group[i].chunk_id for i in rows], VectorReader(
                len(rows), dim, partial(_read_cached, cache, [hashes[i] for i in rows])) if lazy else block)
    return arrays, missing, unembedded


def _with_notes_as_built(settings: Settings, notes: list[Note], built_chunks: Mapping[str, Sequence[Chunk]]
                         ) -> list[Note]:
    """``notes`` (read from the vault) and, of each source, the notes its chunks file holds that the vault does not
    give back, as its last normalize made them (``<data>/notes/<source>.jsonl``): a generated note deleted in
    Obsidian, a folder of it replaced by a symlink (its vault stage fails: "remove the link"), until a build of
    the source writes them again. Before session 48 every publish meanwhile (a build of another source, or of that
    one, whose vault stage failed) dropped them from search, though the build said the failed source's last good copy
    keeps serving and ``status`` that search still serves deleted generated notes. A note its last normalize no
    longer has (its page left the source) stays out. (source, rel_path) order, as :func:`read_notes`."""
    have = {n.note_id for n in notes}
    extra: list[Note] = []
    for name, chunks in built_chunks.items():
        wanted = {c.note_id for c in chunks} - have
        if wanted:
            extra += [n for n in artifacts.load_notes(settings, name) if n.note_id in wanted]
    return sorted([*notes, *extra], key=lambda n: (n.source, n.rel_path)) if extra else notes


def _built_chunks(settings: Settings, name: str) -> list[Chunk]:
    """The chunks of source ``name`` from its chunks file, when that is the file its last chunk stage wrote (the
    sha256 it recorded; a state without one, from an older build: the file as it is).

    Raises:
        PipelineError: the file was edited, cut or replaced since (the chunk stage would chunk the source again
            rather than serve it; a run of the warehouse alone published it).
    """
    path = artifacts.chunks_path(settings, name)
    recorded = artifacts.load_state(settings, name).get("chunks_sha")
    if recorded and path.is_file() and file_sha(path) != recorded:
        from pipeline.common.errors import PipelineError

        raise PipelineError(f"{path}: not the chunks file the chunk stage wrote (edited or replaced since: its sha256 "
                            f"is not the one recorded in {artifacts.state_path(settings, name)}); the warehouse is "
                            f"kept as published: run `docsvault build --source {name}` to chunk the source again")
    return artifacts.load_chunks(settings, name)


def _missing_in(names: Sequence[str], chunks: Sequence[Chunk], unembedded: dict[str, Any]) -> str:
    """``"<source> <n> of <chunks>, ..."``: the sources with chunks that have no vector of some model; "" when none."""
    return ", ".join(f"{name} {len(unembedded[name])} of {sum(c.source == name for c in chunks)}"
                     for name in names if name in unembedded)


def _where_built(settings: Settings, names: Sequence[str]) -> dict[str, str]:
    """The ``meta`` facts of where and from what a warehouse is built: ``built_on`` (host), ``built_data_dir`` and
    ``fetched_at`` (JSON ``{source: its last fetch}``, from the sources' state files): what ``status`` shows on a
    host the warehouse was copied to (docs/deploy.md's readers), which has no state of those sources."""
    fetched = {name: artifacts.load_state(settings, name).get("fetched_at") for name in names}
    return {"built_on": socket.gethostname(), "built_data_dir": str(settings.data_dir),
            "fetched_at": json.dumps(fetched, sort_keys=True)}


def _warehouse_key(settings: Settings, names: Sequence[str], by_name: dict[str, Source]) -> str:
    from pipeline.warehouse import SCHEMA_VERSION

    parts = []
    for name in names:
        st = artifacts.load_state(settings, name)
        parts.append((name, vault_listing(settings, name), file_sha(artifacts.chunks_path(settings, name)),
                      settings.models_of(by_name[name]), settings.crosslingual, settings.crosslingual_depth,
                      st.get("models"),
                      st.get("embed_key")))
    return digest(SCHEMA_VERSION, code_version("warehouse"), parts)


def warehouse_behind(settings: Settings, sources: Sequence[Source], meta: dict[str, str]) -> bool | None:
    """Whether the sources built in this data dir changed since the warehouse whose ``meta`` is given was
    published (its ``input_key`` is not what the warehouse stage would compute now: a Dagster run of one source's
    group, a run stopped before ``warehouse``, a source removed from sources.yaml, a new program version), so the
    next build publishes it again. None when it cannot be told: no ``input_key``, no source built here, or a
    source whose vault folder is here but whose state is not (a vault copied from the host that built it).
    Behind too when a source's last fetch is not the one its chunk stage last carried through
    (``chain_revision``): a run stopped between them (terminated in the UI after ``notes``) changed nothing the
    warehouse is published from, yet its fetch is not in search."""
    names = built_sources(settings, sources)
    states = [artifacts.load_state(settings, n) for n in names]
    if not meta.get("input_key") or not names or not all(states):
        return None
    return meta["input_key"] != _warehouse_key(settings, names, {s.name: s for s in sources}) or any(
        "chain_revision" in st and st["chain_revision"] != st.get("revision") for st in states)


#: the warehouse ``meta`` key of the warehouse stage's :func:`code_version` that published it (since session 44)
CODE_META = "warehouse_code_version"


def built_by_other_version(meta: dict[str, str]) -> bool:
    """Whether the warehouse whose ``meta`` is given was published by another version of docsvault than this one:
    its warehouse code was not this code (:data:`CODE_META` differs, or is absent: a version before session 44),
    as after an upgrade (`git pull`, `make install`) or a downgrade. False without a warehouse (empty ``meta``)."""
    return bool(meta) and meta.get(CODE_META) != code_version("warehouse")


def refuse_dropping_vectors(settings: Settings, wanted: dict[str, list[Chunk]],
                            arrays: dict[str, tuple[list[str], Any]], problem: str) -> None:
    """Refuse a publish that would serve no vector of a model its chunks want while dropping the vectors of a model
    the current warehouse serves: a model that cannot be loaded (``DOCSVAULT_MODEL=bogus-model``: its sources
    failed, the others were not embedded by it) replaced every source's vectors with none, so the vector lanes
    answered nothing until a good build. A model that has some vectors (a partial re-embedding), or one that only
    joins the models served (a new source's first embedding killed early), is published as before.

    Args:
        wanted: model id -> the chunks that want its vectors; ``arrays``: the models with some vector
            (:func:`_cached_vectors`); ``problem``: why the current warehouse cannot be used ("" when it can).

    Raises:
        PipelineError: the publish would drop served vectors; the warehouse is kept as it is.
    """
    absent = sorted(m for m, group in wanted.items() if group and m not in arrays)
    if not absent or problem or not settings.warehouse_path.is_file():
        return
    from pipeline.warehouse import connect, list_models

    try:
        con = connect(settings.warehouse_path, read_only=True)
    except Exception:  # noqa: BLE001 - unreadable: the publish rebuilds it, nothing of it to keep
        return
    try:
        served = {m["model_id"]: m["n"] for m in list_models(con)}
    finally:
        con.close()
    dropped = sorted(m for m, n in served.items() if n and m not in wanted)
    if dropped:
        from pipeline.common.errors import PipelineError

        raise PipelineError(
            f"warehouse kept as published: no chunk has a vector of {', '.join(repr(m) for m in absent)} (its "
            f"embeddings failed: see the sources' errors), and publishing now would drop the "
            f"{sum(served[m] for m in dropped)} vectors of {', '.join(repr(m) for m in dropped)} that search uses; "
            "fix the model setting (DOCSVAULT_MODEL, DOCSVAULT_MULTILINGUAL_MODEL, DOCSVAULT_CROSSLINGUAL_MODEL or a "
            "source's `embedding`) and build again")


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


#: the key of ``<data>/state/.shared.json`` that holds the last failed publish, ``{"error", "at"}``, until a
#: warehouse stage succeeds (``status`` shows it: a run whose warehouse step failed left only a "behind" line)
PUBLISH_FAILED = "publish_failed"


def warehouse_stage(settings: Settings, sources: Sequence[Source], embedder_factory: Callable[[str], Any]
                    ) -> WarehouseResult:
    """:func:`publish_stage`, its failure recorded as :data:`PUBLISH_FAILED` (an interrupted build is no
    failure), which a success clears."""
    from pipeline.common.errors import storage_error_line

    try:
        out = publish_stage(settings, sources, embedder_factory)
    except Exception as exc:
        import duckdb

        if isinstance(exc, duckdb.InterruptException):
            # Ctrl-C while DuckDB ran a query: DuckDB raises its own error for the KeyboardInterrupt, and the
            # build was interrupted, not failed (before session 46 `status` said "last publish failed: Query
            # interrupted" until the next build)
            raise
        line = storage_error_line(exc, data_dir=settings.data_dir) or \
            " ".join(str(exc).split())[:500] or type(exc).__name__
        try:
            artifacts.update_state(settings, SHARED_STATE, **{PUBLISH_FAILED: {"error": line, "at": now()}})
        except OSError as again:          # the disk that failed the publish: the step's own error says it
            log.warning("cannot record the failed publish in %s: %s", settings.state_dir, again)
        raise
    if shared_state(settings).get(PUBLISH_FAILED):
        artifacts.update_state(settings, SHARED_STATE, **{PUBLISH_FAILED: None})
    return out


def publish_stage(settings: Settings, sources: Sequence[Source], embedder_factory: Callable[[str], Any]
                  ) -> WarehouseResult:
    """Publish notes, chunks, links, vectors (one HNSW-indexed table per model) and the BM25 index into one DuckDB
    file, atomically. Vectors come from the embedding cache, read by the publish as it needs them (an incremental
    one reads only the vectors it inserts: :func:`_cached_vectors`); a chunk whose vector is missing stays
    BM25-searchable.

    Nothing is written when no input changed since the warehouse was published (``skipped``). Refused
    (SourceConfigError) when ``sources`` is empty while sources are built (see
    :func:`pipeline.stages.layout.refuse_removing_every_source`). A warehouse file
    that is corrupt or of another schema version is reported (``rebuilt_because``, a warning in the log) and
    rebuilt from the vault and the caches, never used.

    Long: one sequence under the build lock (skip check, read every source, BM25 tokens, publish with its fallback,
    record the key) whose order is the crash-safety argument: the key is recorded only after the file is swapped in.
    """
    from pipeline.index.embed import release_models, trim_heap
    from pipeline.ingest.vault import read_notes
    from pipeline.warehouse import CopyAhead, WarehouseData, publish

    with stage_lock(settings), collector_paused(), ExitStack() as stack:    # ~1M objects kept: no GC passes
        refuse_removing_every_source(settings, sources, vault=False)     # `sources: []` from the UI or a schedule
        started = time.perf_counter()
        names = built_sources(settings, sources)
        refuse_sources_built_elsewhere(settings, names)
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
                # the file as it is now, where it is now (a data folder moved or copied elsewhere: not the
                # path and size its last publish recorded)
                return replace(kept, publish={**kept.publish, "mode": "unchanged"}, rebuilt_because="",
                               path=str(settings.warehouse_path),
                               size_mb=round(settings.warehouse_path.stat().st_size / 1e6, 2),
                               skipped=True, seconds=round(time.perf_counter() - started, 3))
        incremental = not problem and not forced()
        # the copy an incremental publish starts from is made while the notes, chunks and BM25 are prepared
        ahead = (stack.enter_context(CopyAhead(settings.warehouse_path))
                 if incremental and settings.warehouse_path.is_file() else None)
        # the per-source stages keep a model loaded after a few texts (embed.KEEP_LOADED_MAX_TEXTS, for the next
        # source); from here on no document is embedded: their memory goes back before the largest steps
        release_models(embedder_factory(spec) for spec in sorted(
            {spec for name in names for spec in settings.embedding_specs(by_name[name])}))
        timings: dict[str, float] = {}
        t = time.perf_counter()
        notify("warehouse", "all", 0, 5)
        built_chunks = {name: _built_chunks(settings, name) for name in names}
        notes = _with_notes_as_built(settings, read_notes(settings.vault_dir, names), built_chunks)
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
        # model id -> its chunks over every source, in source order, each once: two specs of one model (the
        # cross-lingual lane on an alias of the notes' model) list a chunk twice
        by_model: dict[str, dict[str, Chunk]] = {}
        for name in names:
            source_chunks = [c for c in built_chunks.pop(name) if c.note_id in note_ids]
            chunks.extend(source_chunks)
            for spec, group in chunk_models(settings, by_name[name], source_chunks).items():
                by_model.setdefault(embedder_factory(spec).model_id, {}).update((c.chunk_id, c) for c in group)
        wanted = {model_id: list(group.values()) for model_id, group in by_model.items()}
        del by_model
        # model id -> chunk ids, a reader of their vectors (read by the publish: only the inserted ones when it
        # is incremental); source -> its chunk ids without a vector of some model
        arrays, missing, unembedded = _cached_vectors(settings, wanted)
        refuse_dropping_vectors(settings, wanted, arrays, problem)
        timings["vectors_s"] = time.perf_counter() - t
        notify("warehouse", "all", 3, 5)
        t = time.perf_counter()
        tokens = TokenCache(settings.cache_dir, code_version("bm25"), fresh=forced())
        bm25_blobs, hits, misses = bm25_index_blobs(tokens, chunks, notes)
        del tokens
        trim_heap()                         # the index arrays are gone: only the blobs are published
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
                      CODE_META: code_version("warehouse"),
                      "missing_vectors_in": _missing_in(names, chunks, unembedded),
                      **_where_built(settings, names),
                      "crosslingual_model": (embedder_factory(settings.crosslingual).model_id
                                             if settings.crosslingual else ""),
                      "crosslingual_depth": str(max(settings.crosslingual_depth, 0))},
        )
        t = time.perf_counter()
        try:
            stats = publish(settings.warehouse_path, data, incremental=incremental, ahead=ahead)
        except _VectorsUnreadable as exc:      # nothing written: every vector gathered now, as the cache reads them
            log.warning("embedding cache changed or unreadable while publishing (%s): gathering every vector", exc)
            arrays, missing, unembedded = _cached_vectors(settings, wanted, lazy=False)
            data = replace(data, vectors=arrays, run_info={
                **data.run_info, "missing_vectors_in": _missing_in(names, chunks, unembedded)})
            stats = publish(settings.warehouse_path, data, incremental=incremental)
        del wanted
        timings["publish_s"] = time.perf_counter() - t
        notify("warehouse", "all", 5, 5)
        out = WarehouseResult(
            sources=tuple(names), models=tuple(sorted(arrays)), notes=len(notes), chunks=len(chunks),
            vectors=sum(len(ids) for ids, _ in arrays.values()), missing_vectors=missing, links=len(edges),
            path=str(settings.warehouse_path), size_mb=round(settings.warehouse_path.stat().st_size / 1e6, 2),
            tokens_cached=hits, tokens_analysed=misses, rebuilt_because=problem,
            publish={k: v for k, v in stats.items() if isinstance(v, (int, float, str)) and k != "models"},
            timings={k: round(v, 3) for k, v in timings.items()},
            missing_vectors_in=_missing_in(names, chunks, unembedded),
        )
        if out.missing_vectors_in:
            log.warning("chunks without a vector (their embeddings step did not finish; BM25 finds them, the "
                        "vector lanes do not): %s; `docsvault build --source <name>` embeds them",
                        out.missing_vectors_in)
        meta = {k: v for k, v in out.as_dict().items() if k != "skipped"}
        artifacts.update_state(settings, SHARED_STATE, warehouse={"input_key": key, "meta": meta})
    return replace(out, skipped=False, seconds=round(time.perf_counter() - started, 3))
