"""What every stage shares: code versions (cache keys), the force switch, progress hooks, the build lock, the JSON memo cache."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import asdict
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from pipeline import config
from pipeline.common.lock import build_lock
from pipeline.common.memo import MemoCache
from pipeline.config import Settings, force_spec, forced_names, lock_wait_seconds, stage_lock_on
from pipeline.models import Source

log = logging.getLogger("docsvault")


Progress = Callable[[int, int], None]

#: Extra progress listeners (the CLI's progress bar): called as ``hook(stage, source, done, total)``.
PROGRESS_HOOKS: list[Callable[[str, str, int, int], None]] = []

#: Seconds a stage waits for the build lock held by another process (the CLI's own build already holds it).
STAGE_LOCK_WAIT = lock_wait_seconds()

SHARED_STATE = ".shared"        # <data>/state/.shared.json (a source name cannot start with a dot)

_PKG = Path(__file__).resolve().parent.parent   # the pipeline package: _CODE paths are relative to it
_CODE = {
    "normalize": ("ingest/normalize.py", "common/frontmatter.py", "models.py", "ingest/fetch/htmlmd.py",
                  "ingest/fetch/htmltable.py", "ingest/fetch/pages.py", "ingest/htmlblocks.py", "common/markdown.py"),
    # vault_stage itself, the writer, the attachment plan, link qualification and its resolver (graph), the
    # link scan of prose (normalize's map_prose over markdown's code split), the warning lines' paths (local)
    "vault": ("stages/ingest.py", "ingest/vault.py", "common/frontmatter.py", "ingest/ownership.py",
              "ingest/attachments.py", "index/vaultlinks.py", "index/graph.py", "ingest/normalize.py",
              "common/markdown.py", "models.py", "ingest/fetch/local.py"),
    "chunk": ("index/chunk.py", "models.py", "ingest/vault.py", "common/frontmatter.py", "index/language.py",
              "common/markdown.py", "index/unigram.py",      # e5's token counts of a few texts (E5Embedder)
              "common/display.py"),        # char_start: where a hard cut may fall (never inside a character)
    "graph": ("index/graph.py", "ingest/vault.py", "common/frontmatter.py"),
    "bm25": ("index/analysis.py",),
    # the embed stage's skip key: which chunks each model embeds (chunk_models, Settings.crosslingual_embeds) and
    # how they reach the cache (the vectors themselves are keyed by model id + text, never by this)
    "embed": ("stages/index.py", "config.py", "index/embed.py", "index/embed_child.py"),
    "eval": ("evaluate.py", "search/searcher.py", "search/query.py", "search/synonyms.py", "search/translate.py",
             "search/tags.py", "index/analysis.py", "index/bm25.py", "index/embed.py", "index/onnx_embed.py",
             "index/unigram.py"),
    # the publish, BM25, the links (graph), and the notes rows: read_notes (vault, frontmatter, which files the
    # manifest says are notes) as Note values (models: aliases, description, url)
    "warehouse": ("warehouse/schema.py", "warehouse/write.py", "warehouse/vectors.py", "index/bm25.py",
                  "index/analysis.py", "index/graph.py", "stages/warehouse.py", "stages/index.py", "models.py",
                  "ingest/vault.py", "common/frontmatter.py", "ingest/ownership.py"),
}


#: the libraries whose output is part of a stage's: the BM25 analyzer's tokens come from Sudachi's dictionary and
#: PyStemmer's stemmer, so a new dictionary must analyse every text again (the token cache, the warehouse's BM25
#: and the eval are keyed on these versions too)
_LIBRARIES = {stage: ("SudachiPy", "SudachiDict-core", "PyStemmer")
              for stage, files in _CODE.items() if "index/analysis.py" in files}


def library_versions(stage: str) -> list[str]:
    """``name==version`` of each library of :data:`_LIBRARIES` for ``stage`` (``name==missing``: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in _LIBRARIES.get(stage, ()):
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            out.append(f"{name}==missing")
    return out


def now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def digest(*parts: Any) -> str:
    """sha256 hex of the parts as canonical JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8")).hexdigest()


@cache
def code_version(stage: str) -> str:
    """Hash of the source files whose code shapes a stage's output (+ the package version, + the versions of the
    libraries whose output is part of it: :data:`_LIBRARIES`): a code change redoes the stage. Unknown stage: the
    package version only."""
    from pipeline import __version__

    h = hashlib.sha256(__version__.encode())
    for lib in library_versions(stage):
        h.update(lib.encode() + b"\0")
    for rel in _CODE.get(stage, ()):
        try:
            h.update(rel.encode() + b"\0" + (_PKG / rel).read_bytes())
        except OSError:
            h.update(rel.encode() + b"\0missing")
    return h.hexdigest()[:16]


def links_cache_path(settings: Settings) -> Path:
    """The graph's link cache (:class:`pipeline.index.graph.LinksCache`): ``<cache>/graph/links-<graph code>.json``,
    written by the graph stage (every note's parsed links, keyed by its body's sha1), read by the vault stage too."""
    return settings.cache_dir / "graph" / f"links-{code_version('graph')}.json"


@cache
def loaded_code_version() -> str:
    """The code version of every stage (:func:`code_version`) together, as this process first read it: the code it
    runs (a Celery worker left running across a ``git pull`` keeps the code it loaded, and keeps this). 16 hex."""
    return hashlib.sha256("\0".join(code_version(stage) for stage in sorted(_CODE)).encode()).hexdigest()[:16]


def file_sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def source_config(source: Source) -> str:
    data = asdict(source)
    data.pop("token_env", None)
    return digest(data)


def file_stats(root: Path, *, recurse: bool = True, dot_dirs: tuple[str, ...] = (),
               keep: Callable[[str], bool] = lambda name: True) -> list[tuple[str, int, int]]:
    """(path relative to ``root``, size, mtime_ns) of the files under ``root`` whose name ``keep`` accepts, sorted;
    folders whose name starts with a dot are skipped unless named in ``dot_dirs``; only ``root``'s own files when
    not ``recurse``; [] when ``root`` does not exist. A file that vanishes while listed is left out."""
    rows = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if recurse and (not d.startswith(".") or d in dot_dirs)]
        for name in filenames:
            if keep(name):
                p = os.path.join(dirpath, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                rows.append((os.path.relpath(p, root), st.st_size, st.st_mtime_ns))
    return sorted(rows)


def vault_listing(settings: Settings, source: str) -> str:
    """Signature of the notes of ``vault/<source>/``: sha over the sorted (path, size, mtime_ns) of its
    ``.md`` files that are notes of the source ("" when the folder does not exist): with a manifest, the ones it
    lists (the files the build wrote, as :func:`pipeline.ingest.vault.read_notes` reads them), so a note of the
    user's own there, which no stage reads, moves nothing; without one, every ``.md`` file. The vault stage
    writes a file only when its bytes change, so this moves only when a note changed (or someone edited or
    deleted one by hand), never for an attachment: it is what the chunk, graph and warehouse stages compare. The
    vault stage's own skip check is :func:`vault_listings`."""
    root = settings.vault_dir / source
    if not root.is_dir():
        return ""
    return digest(_note_rows(root, file_stats(root, keep=lambda name: name.endswith(".md"))))


def _note_rows(root: Path, rows: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """The rows of :func:`file_stats` of ``root`` (a source folder of the vault) that are notes of the source:
    ``.md`` files its manifest lists (every ``.md`` file when it has no readable manifest)."""
    import unicodedata

    from pipeline.ingest.ownership import load_manifest

    owned = load_manifest(root)
    return [row for row in rows if row[0].endswith(".md") and (
        owned is None or unicodedata.normalize("NFC", Path(row[0]).as_posix()) in owned)]


def vault_listings(settings: Settings, source: str) -> tuple[str, str]:
    """``(notes, files)`` signatures of ``vault/<source>/`` from one listing (stats only, no file read, and the
    source's manifest): ``notes`` is :func:`vault_listing`; ``files`` the sha over the sorted (path, size,
    mtime_ns) of every file there (attachments, the user's own files, the ``(edited)`` copies; dot folders such as the manifest's
    ``.docsvault`` left out), which moves when any file is edited, added or deleted. ``("", "")`` when the
    folder does not exist."""
    root = settings.vault_dir / source
    if not root.is_dir():
        return "", ""
    rows = file_stats(root)
    return digest(_note_rows(root, rows)), digest(rows)


#: ``DOCSVAULT_FORCE``: ``*`` (or ``1``) forces every source, else a comma-separated list of source names: their
#: normalize, vault and chunk stages run although their inputs are unchanged, every chunk is embedded again (the
#: embedding cache is written, not read) and the warehouse is written in full. ``docsvault build --force`` sets it.
FORCE_ENV = config.FORCE_ENV


def forced(source: str | None = None) -> bool:
    """Whether ``source`` (None: any source, i.e. the shared stages) is forced by ``DOCSVAULT_FORCE``."""
    names = forced_names(force_spec())
    return bool(names) and (source is None or "*" in names or source in names)


class WriteOnlyCache:
    """An embedding cache that finds nothing and stores what is embedded (a forced re-embed refreshes the cache)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.model_id = cache.model_id

    def get_many(self, hashes: Sequence[str]) -> dict[str, Any]:
        return {}

    def missing(self, hashes: Sequence[str]) -> list[str]:
        return list(hashes)

    def put_many(self, hashes: Sequence[str], vectors: Any) -> None:
        self.cache.put_many(hashes, vectors)

    def compact(self) -> None:
        self.cache.compact()


#: the prefix of the normalize link conversion's cache keys (``pipeline.ingest.normalize._converted_cached``)
LINKS_KEY_PREFIX = "links:"


class CountingCache:
    """A normalize cache that reports each page's parse lookup (one per file) as progress and counts them:
    ``misses`` (files parsed now) and ``hits`` (parse results reused). The link conversion's lookups (keys starting
    ``LINKS_KEY_PREFIX``, a second pass over the same files for every format but obsidian) are neither: they were
    counted too, so a Markdown source of 6 files recorded ``parsed: 12`` and its progress read 6/6 before the
    second pass began (found by a Dagster user, session 42)."""

    def __init__(self, cache: Any, on_lookup: Callable[[int], None]) -> None:
        self.cache = cache
        self.on_lookup = on_lookup
        self.n = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> Any:
        value = self.cache.get(key)
        if key.startswith(LINKS_KEY_PREFIX):
            return value
        self.n += 1
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        if self.n % 25 == 0:
            self.on_lookup(self.n)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.cache[key] = value


def notify(stage: str, source: str, done: int, total: int) -> None:
    for hook in PROGRESS_HOOKS.copy():          # a hook may remove itself
        try:
            hook(stage, source, done, total)
        except Exception:  # a display problem never fails a build
            log.debug("progress hook failed", exc_info=True)


#: True while a per-source stage runs under an orchestrator that keeps one step per source at a time (the Dagster
#: shell's pools): the stage then takes the build lock shared, so several sources build at once, while a
#: ``docsvault build`` or a shared stage (exclusive) still excludes them all. Default: exclusive.
PER_SOURCE_LOCK_SHARED: ContextVar[bool] = ContextVar("docsvault_per_source_lock_shared", default=False)


def stage_lock(settings: Settings) -> Any:
    """The stage's hold on ``<data>/build.lock`` — none when DOCSVAULT_STAGE_LOCK=off: the distributed deployment
    (``pipeline.distributed``), where Dagster pools serialize the single-writer stages and each per-source step
    writes only its own source's files, so no host-local lock is needed (nor visible to other hosts)."""
    if not stage_lock_on():
        from contextlib import nullcontext

        return nullcontext()
    return build_lock(settings.data_dir, wait=STAGE_LOCK_WAIT, shared=PER_SOURCE_LOCK_SHARED.get(),
                      wait_arg="DOCSVAULT_LOCK_WAIT (seconds)")

#: the normalize stage's per-file parse cache (:class:`pipeline.common.memo.MemoCache`)
JsonCache = MemoCache


def versioned_cache(settings: Settings, kind: str, name: str, stage: str, *more: str,
                    binary: bool = False, fresh: bool = False) -> tuple[JsonCache, list[Path]]:
    """(``<cache>/<kind>/<name>.<code version of stage>.json``, the same cache's files of other code versions).
    With ``more`` stages, the version is a hash of all their code versions (a change of any of them starts a new
    file). ``binary``: the memo is kept in :mod:`marshal` form (``MemoCache(binary=True)``: JSON values only,
    they read back as equal values), in ``<name>.<version>.marshal``; the other form's files count as stale.
    ``fresh``: the file is not read (``MemoCache(fresh=True)``; pass ``forced(source)``)."""
    import re

    folder = settings.cache_dir / kind
    version = code_version(stage) if not more else digest([code_version(s) for s in (stage, *more)])[:16]
    cache = JsonCache(folder / f"{name}.{version}.{'marshal' if binary else 'json'}", binary=binary, fresh=fresh)
    pattern = re.compile(rf"^{re.escape(name)}\.[0-9a-f]{{16}}\.(?:json|marshal)$")
    stale = [p for p in folder.iterdir() if pattern.match(p.name)] if folder.is_dir() else []
    return cache, stale
