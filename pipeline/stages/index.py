"""Index stages: chunk and embed (per source), the link graph (all sources)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline.common import artifacts
from pipeline.common.errors import WarehouseCorruptError, WarehouseNotBuiltError
from pipeline.config import MULTILINGUAL_LANGUAGES, Settings
from pipeline.models import Chunk, Note, Source, text_hash
from pipeline.stages.base import (
    SHARED_STATE,
    Progress,
    WriteOnlyCache,
    code_version,
    digest,
    file_sha,
    forced,
    links_cache_path,
    notify,
    stage_lock,
    vault_listing,
)
from pipeline.stages.results import ChunkResult, EmbedResult, GraphResult

log = logging.getLogger("docsvault")


def _note_hash(note: Note) -> str:
    return digest(note.source_path, note.rel_path, note.title, note.frontmatter, note.body)


def chunk_index_path(settings: Settings, source: str) -> Path:
    return settings.chunks_dir / f"{source}.notes.json"


def chunk_stage(settings: Settings, source: Source, embedder_factory: Callable[[str], Any]) -> ChunkResult:
    """Chunk the source's vault notes into <data>/chunks/<source>.jsonl, each note within the token window of the
    model its language chooses (:meth:`Settings.model_for` over :func:`pipeline.index.language.detect_language`).

    Skipped when the vault folder's listing, the models and the chunker code are unchanged; otherwise only notes
    whose content hash changed are chunked again (``rechunked`` counts them), the others keep their chunks.
    ``embedder_factory`` (model spec -> embedder) is called only when a note is chunked again (so a skipped stage
    never loads a tokenizer). ``languages`` counts the notes per detected language; ``language_warning`` says when a
    configured `language:` disagrees with what most notes are written in (the configured one is used).
    ``warning_lines``: one line per note cut at :data:`pipeline.index.chunk.MAX_CHUNKS_PER_NOTE` chunks (kept for
    an unchanged note, so every build that runs the stage says it again).

    Long: skip check, reuse of unchanged notes' chunks, language warning, record: one sequence in the order the
    cache's correctness needs.
    """
    from dataclasses import replace

    from pipeline.index.chunk import chunk_note
    from pipeline.index.embed import KEEP_LOADED_MAX_TEXTS, release_models
    from pipeline.index.language import detect_language, majority_language
    from pipeline.ingest.vault import read_notes

    with stage_lock(settings):
        state = artifacts.load_state(settings, source.name)
        config = digest(settings.models_of(source), source.language, code_version("chunk"))
        listing = vault_listing(settings, source.name)
        path = artifacts.chunks_path(settings, source.name)
        key = digest(listing, config)
        if state.get("chunk_key") == key and path.is_file() and state.get("chunks_sha") == file_sha(path) \
                and not forced(source.name):
            if state.get("chain_revision") != state.get("revision"):     # the chain carried this fetch to chunks
                artifacts.update_state(settings, source.name, chain_revision=state.get("revision"))
            return ChunkResult(notes=int(state.get("chunk_notes", 0)), chunks=int(state.get("chunks", 0)),
                               rechunked=0, skipped=True, languages=dict(state.get("languages") or {}),
                               language_warning=str(state.get("language_warning") or ""),
                               warning_lines=tuple((state.get("chunk_warnings") or {}).values()))
        notes = read_notes(settings.vault_dir, [source.name])
        index_path = chunk_index_path(settings, source.name)
        previous, old_chunks = ({}, {}) if forced(source.name) else _previous_chunks(
            settings, source.name, config, state.get("chunks_sha"))
        chunks: list[Any] = []          # Chunk, or ChunkLine (an unchanged note's chunk as its line of the file)
        hashes: dict[str, str] = {}
        detected: dict[str, str] = {}
        rechunked = 0
        old_warnings: dict[str, str] = dict(state.get("chunk_warnings") or {}) if previous else {}
        cut: dict[str, str] = {}          # note id -> the line of a note cut at the chunk cap
        used: dict[str, Any] = {}        # model spec -> embedder whose tokenizer counted tokens
        if notes:       # (0, 0) is "total unknown" (see normalize): no line for a source without notes
            notify("chunk", source.name, 0, len(notes))
        for i, note in enumerate(notes, start=1):
            if i % 50 == 0:
                notify("chunk", source.name, i, len(notes))
            h = _note_hash(note)
            hashes[note.note_id] = h
            if previous.get(note.note_id) == h and note.note_id in old_chunks:
                kept = sorted(old_chunks[note.note_id], key=lambda c: c.ordinal)
                detected[note.note_id] = kept[0].language
                chunks.extend(kept)
                if note.note_id in old_warnings:
                    cut[note.note_id] = old_warnings[note.note_id]
                continue
            if previous.get(note.note_id) == h and not old_chunks.get(note.note_id) and note.note_id in previous:
                continue     # the note had no chunks last time (empty note)
            rechunked += 1
            language = detected[note.note_id] = detect_language(f"{note.title}\n{note.body}")
            spec = settings.model_for(source, language)
            embedder = used.setdefault(spec, embedder_factory(spec))
            lines: list[str] = []
            chunks.extend(replace(c, language=language) for c in
                          chunk_note(note, count_tokens=embedder.count_tokens, max_tokens=embedder.max_tokens,
                                     warnings=lines, token_starts=getattr(embedder, "token_starts", None)))
            for line in lines:          # shown by the chunks asset's log and `docsvault build`, not logged twice
                cut[note.note_id] = f"source '{source.name}': {line}"
        languages: dict[str, int] = {}
        for lang in detected.values():
            languages[lang or "none"] = languages.get(lang or "none", 0) + 1
        warning = ""
        majority = majority_language(detected.values())
        configured = (source.language or "").split("-")[0].lower()
        if configured and majority and (configured in MULTILINGUAL_LANGUAGES) != (majority in MULTILINGUAL_LANGUAGES):
            warning = (f"source '{source.name}': configured language '{source.language}' but most notes "
                       f"({languages.get(majority, 0)} of {len(detected)}) read as '{majority}'; the configured one "
                       f"decides the embedding model (remove `language:` from sources.yaml to use the detected one)")
            log.warning(warning)
        if used and rechunked > KEEP_LOADED_MAX_TEXTS:
            release_models(used.values())       # e5's tokenizer alone holds ~0.3 GB; a few notes keep it for embed
        if notes:
            notify("chunk", source.name, len(notes), len(notes))
        sha = artifacts.write_lines(path, [c.line if isinstance(c, artifacts.ChunkLine) else artifacts.chunk_line(c)
                                           for c in chunks])
        artifacts.write_atomic(index_path, json.dumps({"config": config, "notes": hashes}).encode("utf-8"))
        artifacts.update_state(settings, source.name, chunk_key=key, chunks_sha=sha, chunks=len(chunks),
                               chunk_notes=len(notes), languages=languages, language_warning=warning,
                               chunk_warnings=cut, chain_revision=state.get("revision"))
    return ChunkResult(notes=len(notes), chunks=len(chunks), rechunked=rechunked, skipped=False,
                       languages=languages, language_warning=warning, warning_lines=tuple(cut.values()))


def _previous_chunks(settings: Settings, source: str, config: str, chunks_sha: str | None
                     ) -> tuple[dict[str, str], dict[str, list[Any]]]:
    """What the last chunk stage of ``source`` left, when it ran with this ``config``: ``(note id -> content
    hash, note id -> its chunks in file order)``; ``({}, {})`` when its index or chunks file is missing, unreadable
    or of another config.

    The chunks are the file's lines (:class:`pipeline.common.artifacts.ChunkLine`: kept as written, no JSON
    decoded or encoded again), and only when the file is the one the last stage wrote (sha256 ``chunks_sha``): a
    file edited or cut since by anyone else is not trusted (``({}, {})``: every note is chunked again; the
    embedding cache keeps that cheap), or its edited text would be served, and a deleted line lost, for good."""
    path = artifacts.chunks_path(settings, source)
    old_chunks: dict[str, list[Any]] = {}
    try:
        index = json.loads(chunk_index_path(settings, source).read_text(encoding="utf-8"))
        if index.get("config") != config or not path.is_file():
            return {}, {}
        previous = dict(index.get("notes") or {})
        lines = artifacts.read_chunk_lines(path, chunks_sha)
        if lines is None:
            return {}, {}
        for c in lines:
            old_chunks.setdefault(c.note_id, []).append(c)
    except (OSError, ValueError, TypeError, KeyError):
        return {}, {}
    return previous, old_chunks


def chunk_models(settings: Settings, source: Source, chunks: Sequence[Chunk]) -> dict[str, list[Chunk]]:
    """Model spec -> the chunks it embeds, in ``chunks`` order: each chunk by its note's language
    (:meth:`Settings.model_for`), and again by the cross-lingual model (``Settings.crosslingual``) when that is on:
    every chunk of a note not in English, the first ``Settings.crosslingual_depth`` of an English note
    (:meth:`Settings.crosslingual_embeds`; all of them when the cross-lingual model is also that note's model)."""
    out: dict[str, list[Chunk]] = {}
    for c in chunks:
        out.setdefault(settings.model_for(source, c.language), []).append(c)
    cross = settings.crosslingual
    if cross and chunks:
        own = {c.chunk_id for c in out.get(cross, ())}
        group = [c for c in chunks if c.chunk_id in own or settings.crosslingual_embeds(c.language, c.ordinal)]
        if group:
            out[cross] = group
    return out


#: The warehouse is searched for vectors missing from the embedding caches only when more texts than this are
#: missing (a deleted cache, a warehouse copied from another machine): a few missing texts are edited ones, which no
#: warehouse holds, and the look-up (DuckDB opened, one scan per model) cost 0.1-0.6 s per source of a rebuild.
SEED_MIN_TEXTS = 64


def _seed_from_warehouse(settings: Settings, wanted: dict[str, Sequence[str]]) -> dict[str, dict[str, Any]]:
    """Vectors stored in the current warehouse for the texts missing from the embedding caches: ``{model id: {text
    hash: vector}}`` for ``wanted`` (``{model id: text hashes}``); a model absent or {} when none are stored, the
    file is missing or unreadable, or at most :data:`SEED_MIN_TEXTS` texts are wanted. One read-only connection
    without the search extensions (no HNSW is read)."""
    wanted = {m: hs for m, hs in wanted.items() if hs}
    if sum(len(hs) for hs in wanted.values()) <= SEED_MIN_TEXTS or not settings.warehouse_path.exists():
        return {}
    from pipeline.warehouse import connect, vectors_by_text_hash

    try:
        con = connect(settings.warehouse_path, read_only=True)
    except (WarehouseCorruptError, WarehouseNotBuiltError, Exception):  # noqa: BLE001 - only a cache miss
        return {}
    out: dict[str, dict[str, Any]] = {}
    try:
        for model_id, hashes in wanted.items():
            out[model_id] = vectors_by_text_hash(con, model_id, hashes)
    except Exception:
        log.debug("cannot read vectors from the warehouse", exc_info=True)
    finally:
        con.close()
    return out


def embed_stage(settings: Settings, source: Source, embedder_factory: Callable[[str], Any],
                progress: Progress | None = None) -> EmbedResult:
    """Embed the source's chunks through the content-hash caches; ``embedded`` counts new model calls.

    Each chunk is embedded by the model of its note's language, and every chunk by the cross-lingual model too
    (:func:`chunk_models`); ``models`` maps each model id to its chunk count. Texts missing from a cache are first
    taken from the current warehouse (``seeded``). When the source's models differ from those of its last build,
    ``model_changed`` says ``"old -> new"`` (the vectors of two models never mix: each model has its own cache and
    vector table). ``embedder_factory``: model spec -> embedder (loaded only when something is missing).

    Long: the per-model passes share the caches, the progress total and the warehouse seeding; the pass itself is
    the nested helper.
    """
    import numpy as np

    from pipeline.index.embed import KEEP_LOADED_MAX_TEXTS, EmbeddingCache, embed_chunks, release_models

    with stage_lock(settings):
        state = artifacts.load_state(settings, source.name)
        specs = sorted(settings.embedding_specs(source))
        skip_key = digest(state.get("chunks_sha"), [(s, embedder_factory(s).model_id) for s in specs],
                          settings.crosslingual_depth, code_version("embed"))
        last = state.get("embed_done") or {}
        if state.get("chunks_sha") and last.get("key") == skip_key and isinstance(last.get("meta"), dict) \
                and not forced(source.name) \
                and _shards_kept(settings, last.get("shards") or {}):
            meta = last["meta"]
            return EmbedResult.from_dict(meta, model_changed="", embedded=0,
                                         cached=sum((meta.get("models") or {}).values()), seeded=0, seconds=0.0,
                                         chunks_per_s=0.0, skipped=True)
        chunks = artifacts.load_chunks(settings, source.name)
        groups = chunk_models(settings, source, chunks)
        embedders = {spec: embedder_factory(spec) for spec in groups}
        model_ids = sorted({e.model_id for e in embedders.values()})
        previous = state.get("models") or ([state["model"]] if state.get("model") else [])
        added, dropped = sorted(set(model_ids) - set(previous)), sorted(set(previous) - set(model_ids))
        # a model replaced is a change (every chunk embedded again); one joining or leaving with the notes of a
        # language is not: the other vectors stay
        model_changed = (f"{', '.join(previous)} -> {', '.join(model_ids)}"
                         if previous and model_ids and added and dropped else "")
        if model_changed:
            log.warning("source '%s': embedding models changed (%s)", source.name, model_changed)
        elif previous and (added or dropped):
            log.info("source '%s': the notes' languages changed: models %s", source.name,
                     ", ".join([*(f"+{m}" for m in added), *(f"-{m}" for m in dropped)]))
        todo: list[tuple[str, Any, EmbeddingCache, list[Chunk]]] = []
        seeded = 0
        total_missing = [0]     # texts to embed over every pass (per language, then cross-lingual): one task
        missing: list[list[str]] = []           # per pass: text hashes not in its model's cache
        for spec, group in groups.items():
            embedder = embedders[spec]
            cache = _embedding_cache(settings, embedder.model_id)
            hashes = sorted({text_hash(c.embed_text) for c in group})
            missing.append(cache.missing(hashes))
            if forced(source.name):         # --force: embed every chunk again, refreshing the cache
                cache, missing[-1] = WriteOnlyCache(cache), []
                total_missing[0] += len(hashes)
            todo.append((spec, embedder, cache, group))
        wanted: dict[str, list[str]] = {}
        for (_, embedder, _, _), hashes in zip(todo, missing):
            wanted.setdefault(embedder.model_id, []).extend(hashes)
        stored = _seed_from_warehouse(settings, wanted)
        pending: list[list[str]] = []           # per pass: the text hashes it embeds
        for (_, embedder, cache, group), hashes in zip(todo, missing):
            held = stored.get(embedder.model_id) or {}
            found = {h: held.pop(h) for h in hashes if h in held}     # popped: a second pass of the model re-puts none
            if found:
                hs = sorted(found)
                cache.put_many(hs, np.stack([found[h] for h in hs]))
                seeded += len(hs)
                log.info("source '%s': %d %s vectors taken from the warehouse into the embedding cache",
                         source.name, len(hs), embedder.model_id)
            total_missing[0] += len(hashes) - len(found)
            pending.append(sorted({text_hash(c.embed_text) for c in group}) if isinstance(cache, WriteOnlyCache)
                           else [h for h in hashes if h not in found])
        done_before = [0]

        def both(done: int, total: int) -> None:
            whole = max(total_missing[0], done_before[0] + total)
            if progress is not None:
                progress(done_before[0] + done, whole)
            notify("embed", source.name, done_before[0] + done, whole)

        started = time.perf_counter()
        n_embedded = n_cached = 0
        per_model: dict[str, set[str]] = {}     # model id -> its chunk ids (two specs of one model: counted once)
        for (spec, embedder, cache, group), hashes in zip(todo, pending):
            in_child = _embed_in_child(settings, spec, embedder, group, hashes, both)
            if in_child:        # the vectors are in the model's cache now
                cache = cache.cache if isinstance(cache, WriteOnlyCache) else cache
                done_before[0] += in_child
            result = embed_chunks(group, embedder, cache, progress=both, vectors=False)   # the warehouse reads them
            if result.n_embedded > KEEP_LOADED_MAX_TEXTS:
                release_models([embedder])      # before the next model loads: one model's memory at a time
            done_before[0] += result.n_embedded
            n_embedded += result.n_embedded + in_child
            n_cached += result.n_cached - in_child
            per_model.setdefault(embedder.model_id, set()).update(c.chunk_id for c in group)
        seconds = time.perf_counter() - started
        _keep_caches(settings, model_ids)
        primary = sorted({embedders[settings.model_for(source, c.language)].model_id for c in chunks})
        out = EmbedResult(
            model=", ".join(primary), models={m: len(ids) for m, ids in per_model.items()},
            model_changed=model_changed, chunks=len(chunks),
            embedded=n_embedded, cached=n_cached, seeded=seeded, seconds=round(seconds, 3),
            chunks_per_s=round(n_embedded / seconds, 2) if n_embedded and seconds > 0 else 0.0,
        )
        artifacts.update_state(settings, source.name, embedded=n_embedded, chunks=len(chunks),
                               models=model_ids or previous,
                               model=", ".join(primary),
                               embed_key=digest(state.get("chunks_sha"), model_ids),
                               embed_done={"key": skip_key, "meta": out.as_dict(),
                                           "shards": _shard_listing(settings, model_ids)})
    return out


#: (cache dir, model id) -> the embedding cache the last embed stage of this process used, and the (size, mtime_ns,
#: inode) of each shard it had read then
_CACHES: dict[tuple[str, str], tuple[Any, dict[str, tuple[int, int, int]]]] = {}


def _embedding_cache(settings: Settings, model_id: str) -> Any:
    """The model's :class:`pipeline.index.embed.EmbeddingCache`: the one the previous embed stage of this process
    used when every shard it had read is still there unchanged (it reads only shards added since: the usem3 cache's
    27k hashes were read again by each source's stage), else a new one. Shards are only ever added (a new file per
    write, never one rewritten) or, by ``compact``, removed: a removed one makes a new cache."""
    from pipeline.index.embed import EmbeddingCache

    key = (str(settings.cache_dir), model_id)
    held = _CACHES.get(key)
    if held is not None and held[0].scanned_stats() == held[1]:
        return held[0]
    cache = EmbeddingCache(settings.cache_dir, model_id)
    _CACHES[key] = (cache, {})
    return cache


def _keep_caches(settings: Settings, model_ids: Sequence[str]) -> None:
    """Record the shards the caches of ``model_ids`` have read now (see :func:`_embedding_cache`); the vectors they
    hold in memory (a full build's, put there as they were embedded) are dropped: only the hashes are kept."""
    for model_id in model_ids:
        held = _CACHES.get((str(settings.cache_dir), model_id))
        if held is not None:
            held[0].drop_vectors()
            _CACHES[(str(settings.cache_dir), model_id)] = (held[0], held[0].scanned_stats())


def _embed_in_child(settings: Settings, spec: str, embedder: Any, group: Sequence[Chunk], hashes: Sequence[str],
                    progress: Callable[[int, int], None]) -> int:
    """Embed the texts ``hashes`` of ``group`` into the model's cache in a child process when the model asks for it
    (``embeds_in_child``: torch models) and they are at least ``CHILD_MIN_TEXTS``; returns how many it embedded (0:
    not done there, the caller embeds them)."""
    from pipeline.index.embed import CHILD_MIN_TEXTS
    from pipeline.index.embed_child import embed_in_child

    if not getattr(embedder, "embeds_in_child", False) or CHILD_MIN_TEXTS <= 0 or len(hashes) < CHILD_MIN_TEXTS:
        return 0
    texts = {text_hash(c.embed_text): c.embed_text for c in group}
    return embed_in_child(spec, embedder.model_id, settings.cache_dir, [(h, texts[h]) for h in hashes],
                          progress=progress)


def _shard_listing(settings: Settings, model_ids: Sequence[str]) -> dict[str, list[list[Any]]]:
    """model id -> ``[shard file name, size]`` of its embedding cache now (what holds the vectors just stored)."""
    from pipeline.index.embed import EmbeddingCache

    out: dict[str, list[list[Any]]] = {}
    for model_id in model_ids:
        rows = []
        for path in EmbeddingCache(settings.cache_dir, model_id).shards():
            try:
                rows.append([path.name, path.stat().st_size])
            except OSError:
                continue
        out[model_id] = rows
    return out


def _shards_kept(settings: Settings, recorded: dict[str, list[list[Any]]]) -> bool:
    """Every shard recorded by :func:`_shard_listing` is still there with its size (the caches only grow; a
    compacted, deleted or rewritten cache makes the embed stage check every chunk again)."""
    if not recorded:
        return False
    now_ = _shard_listing(settings, list(recorded))
    return all({tuple(r) for r in rows} <= {tuple(r) for r in now_.get(model_id, [])}
               for model_id, rows in recorded.items())


# ---------------------------------------------------------------- all sources
def built_sources(settings: Settings, sources: Sequence[Source]) -> list[str]:
    """Sources of sources.yaml that have a vault folder (their last good copy, possibly from an earlier build)."""
    return [s.name for s in sources if (settings.vault_dir / s.name).is_dir()]


def shared_state(settings: Settings) -> dict[str, Any]:
    return artifacts.load_state(settings, SHARED_STATE)


def graph_inputs_key(settings: Settings, names: Sequence[str]) -> str:
    return digest([(n, vault_listing(settings, n)) for n in names], code_version("graph"))


def build_link_graph(settings: Settings, notes: Sequence[Note]) -> Any:
    """``graph.build_graph`` with the links of unchanged note bodies taken from ``<cache>/graph/links-<code>.json``."""
    from pipeline.index.graph import LinksCache, build_graph

    path = links_cache_path(settings)
    folder = path.parent
    cache = LinksCache(path)
    lg = build_graph(notes, parse=cache.parse)
    cache.save()
    for old in folder.glob("links-*.json") if cache.misses and folder.is_dir() else ():
        if old != path:
            old.unlink(missing_ok=True)
    return lg


def graph_stage(settings: Settings, sources: Sequence[Source]) -> GraphResult:
    """Link graph over every built source's vault notes -> <data>/graph/links.graphml and links.json.

    Skipped when no vault folder changed since the last export (the metadata is the last run's). When a folder
    changed but the graph did not (an edit of a note's text, not of its links), the files are not written again:
    the GraphML export alone took ~0.25 s of a 5-page rebuild.
    """
    from pipeline.index.graph import export_graph, graph_content
    from pipeline.ingest.vault import read_notes

    with stage_lock(settings):
        names = built_sources(settings, sources)
        key = graph_inputs_key(settings, names)
        shared = shared_state(settings)
        last = shared.get("graph") or {}
        paths = {"graphml": settings.graph_dir / "links.graphml", "json": settings.graph_dir / "links.json"}
        if last.get("key") == key and all(p.is_file() for p in paths.values()) \
                and last.get("json_sha") == file_sha(paths["json"]):
            # the export files where they are now (not the paths recorded by the build that wrote them)
            return GraphResult.from_dict(last.get("meta") or {}, skipped=True, graphml=str(paths["graphml"]),
                                         json=str(paths["json"]))
        notes = read_notes(settings.vault_dir, names)
        lg = build_link_graph(settings, notes)
        content = digest(graph_content(lg), code_version("graph"))
        if not (last.get("content") == content and all(p.is_file() for p in paths.values())
                and last.get("json_sha") == file_sha(paths["json"])):
            paths = export_graph(lg, settings.graph_dir)   # else: the files hold this very graph (a text-only edit)
        result = GraphResult(
            nodes=lg.graph.number_of_nodes(), edges=lg.graph.number_of_edges(),
            links_resolved=sum(e.count for e in lg.edges if e.dst is not None),
            links_dangling=sum(e.count for e in lg.edges if e.dst is None),
            attachments=lg.attachments, graphml=str(paths["graphml"]), json=str(paths["json"]),
        )
        meta = {k: v for k, v in result.as_dict().items() if k != "skipped"}
        artifacts.update_state(settings, SHARED_STATE,
                               graph={"key": key, "json_sha": file_sha(Path(paths["json"])), "content": content,
                                      "meta": meta})
    return result


def graph_from_export(settings: Settings, key: str) -> tuple[list[Any], dict[str, tuple[int, float]]] | None:
    """(edges, note metrics) from links.json when it was exported for exactly this vault state, else None."""
    from pipeline.models import Edge

    last = shared_state(settings).get("graph") or {}
    path = settings.graph_dir / "links.json"
    if last.get("key") != key or last.get("json_sha") != file_sha(path):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        edges = [Edge(src=e["src"], dst=e["dst"], target=e["target"], kind=e["kind"], count=int(e["count"]))
                 for e in data["edges"]]
        metrics = {n["id"]: (int(n.get("in_degree", 0)), float(n.get("pagerank", 0.0))) for n in data["nodes"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return edges, metrics
