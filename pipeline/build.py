"""One function per build stage: read the previous stage's files, run the stage, write its output, return metadata.

These are what the Dagster assets (``pipeline/defs``) call; they hold the I/O between stages so asset bodies stay a
line or two and the chain can also run (and be tested) without Dagster. Every function returns a plain dict of
JSON-safe metadata (counts, paths, timings).

Change-only work. Every stage records, in ``<data>/state/<source>.json``, a key of its inputs (content hashes of
the previous stage's output, the source's configuration and a hash of the code that shapes its output) and skips
when the key is unchanged and its output is still there (``"skipped": True`` in the metadata):

* normalize: the fetch revision (git commit / listing hash) + the fetched file list + source config + code;
* vault: the notes file's hash + code, and the vault folder's listing (a hand-deleted or edited vault file is
  rewritten);
* chunk: the vault folder's listing + model + code; when it must run, notes whose content hash is unchanged reuse
  their previous chunks (``<data>/chunks/<source>.notes.json`` maps note id -> content hash), so only edited notes
  are re-chunked;
* embed: the embedding cache (model id + chunk text hash) means only new texts are embedded; texts missing from
  the cache are first looked up in the warehouse (which keeps every vector with its chunk's text hash), so a
  deleted or moved cache is re-seeded instead of re-embedded;
* graph: the listings of every built source's vault folder;
* warehouse: a key of all of the above; unchanged -> nothing is published. Otherwise BM25 tokens come from a token
  cache keyed by text hash (``<data>/cache/bm25/``) and :func:`pipeline.warehouse.publish` updates a copy of the
  current file incrementally (vectors of changed chunks go to a small delta table, the HNSW index is not rebuilt)
  before swapping it in, or writes a new file when that is not possible (first build, new schema, model change).
* search_index / eval: re-run only when the warehouse changed (or the eval files did).

Every write is atomic and every key is recorded after its output is written, so a build killed at any moment
(SIGKILL) redoes at most the interrupted stage next time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import asdict
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline import artifacts
from pipeline.config import Settings
from pipeline.errors import FetchError, PipelineError, WarehouseCorruptError, WarehouseNotBuiltError
from pipeline.lock import build_lock
from pipeline.models import Chunk, Note, Source, text_hash

log = logging.getLogger("docsvault")

Progress = Callable[[int, int], None]

#: Extra progress listeners (the CLI's progress bar): called as ``hook(stage, source, done, total)``.
PROGRESS_HOOKS: list[Callable[[str, str, int, int], None]] = []

#: Seconds a stage waits for the build lock held by another process (the CLI's own build already holds it).
STAGE_LOCK_WAIT = float(os.environ.get("DOCSVAULT_LOCK_WAIT", "3600"))

_CJK = frozenset({"ja", "zh", "ko"})
SHARED_STATE = ".shared"        # <data>/state/.shared.json (a source name cannot start with a dot)

_PKG = Path(__file__).resolve().parent
_CODE = {
    "normalize": ("normalize.py", "frontmatter.py", "models.py", "fetch/htmlmd.py", "fetch/pages.py", "htmlblocks.py"),
    "vault": ("vault.py", "frontmatter.py", "ownership.py", "attachments.py", "vaultlinks.py"),
    "chunk": ("chunk.py", "models.py", "vault.py", "language.py"),
    "graph": ("graph.py", "vault.py"),
    "bm25": ("analysis.py",),
    "warehouse": ("warehouse.py", "bm25.py", "analysis.py", "graph.py", "build.py"),
}


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _digest(*parts: Any) -> str:
    """sha256 hex of the parts as canonical JSON."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8")).hexdigest()


@lru_cache(maxsize=None)
def code_version(stage: str) -> str:
    """Hash of the source files whose code shapes a stage's output (+ the package version): a code change redoes
    the stage. Unknown stage: the package version only."""
    from pipeline import __version__

    h = hashlib.sha256(__version__.encode())
    for rel in _CODE.get(stage, ()):
        try:
            h.update(rel.encode() + b"\0" + (_PKG / rel).read_bytes())
        except OSError:
            h.update(rel.encode() + b"\0missing")
    return h.hexdigest()[:16]


def _file_sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _source_config(source: Source) -> str:
    data = asdict(source)
    data.pop("token_env", None)
    return _digest(data)


def vault_listing(settings: Settings, source: str) -> str:
    """Signature of ``vault/<source>/``: sha over the sorted (path, size, mtime_ns) of its ``.md`` files ("" when
    the folder does not exist). The vault stage writes a file only when its bytes change, so this moves only when
    a note changed (or someone edited the vault by hand)."""
    root = settings.vault_dir / source
    if not root.is_dir():
        return ""
    rows = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.endswith(".md"):
                p = os.path.join(dirpath, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                rows.append((os.path.relpath(p, root), st.st_size, st.st_mtime_ns))
    rows.sort()
    return _digest(rows)


#: ``DOCSVAULT_FORCE``: ``*`` (or ``1``) forces every source, else a comma-separated list of source names: their
#: normalize, vault and chunk stages run although their inputs are unchanged, every chunk is embedded again (the
#: embedding cache is written, not read) and the warehouse is written in full. ``docsvault build --force`` sets it.
FORCE_ENV = "DOCSVAULT_FORCE"


def forced(source: str | None = None) -> bool:
    """Whether ``source`` (None: any source, i.e. the shared stages) is forced by ``DOCSVAULT_FORCE``."""
    raw = os.environ.get(FORCE_ENV, "").strip()
    if not raw or raw.lower() in ("0", "false", "no", "off"):
        return False
    names = {n.strip() for n in raw.split(",") if n.strip()}
    return source is None or bool(names & {"*", "1", "true", "yes", "on", source})


class _WriteOnlyCache:
    """An embedding cache that finds nothing and stores what is embedded (a forced re-embed refreshes the cache)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.model_id = cache.model_id

    def get_many(self, hashes: Sequence[str]) -> dict[str, Any]:
        return {}

    def put_many(self, hashes: Sequence[str], vectors: Any) -> None:
        self.cache.put_many(hashes, vectors)

    def compact(self) -> None:
        self.cache.compact()


class _CountingCache:
    """A normalize parse cache that reports each lookup (one per parsed file) as progress."""

    def __init__(self, cache: Any, on_lookup: Callable[[int], None]) -> None:
        self.cache = cache
        self.on_lookup = on_lookup
        self.n = 0

    def get(self, key: str) -> Any:
        self.n += 1
        if self.n % 25 == 0:
            self.on_lookup(self.n)
        return self.cache.get(key)

    def __setitem__(self, key: str, value: Any) -> None:
        self.cache[key] = value


def _notify(stage: str, source: str, done: int, total: int) -> None:
    for hook in list(PROGRESS_HOOKS):
        try:
            hook(stage, source, done, total)
        except Exception:  # noqa: BLE001 - a display problem never fails a build
            log.debug("progress hook failed", exc_info=True)


#: True while a per-source stage runs under an orchestrator that keeps one step per source at a time (the Dagster
#: shell's pools): the stage then takes the build lock shared, so several sources build at once, while a
#: ``docsvault build`` or a shared stage (exclusive) still excludes them all. Default: exclusive.
PER_SOURCE_LOCK_SHARED: ContextVar[bool] = ContextVar("docsvault_per_source_lock_shared", default=False)


def _locked(settings: Settings) -> Any:
    """The stage's hold on ``<data>/build.lock`` — none when DOCSVAULT_STAGE_LOCK=off: the distributed deployment
    (``pipeline.distributed``), where Dagster pools serialize the single-writer stages and each per-source step
    writes only its own source's files, so no host-local lock is needed (nor visible to other hosts)."""
    if os.environ.get("DOCSVAULT_STAGE_LOCK", "on").strip().lower() in ("off", "0", "false", "no"):
        from contextlib import nullcontext

        return nullcontext()
    return build_lock(settings.data_dir, wait=STAGE_LOCK_WAIT, shared=PER_SOURCE_LOCK_SHARED.get())


def cleanup_leftovers(settings: Settings) -> list[str]:
    """Remove temp files a killed build left in the data dir (call only while holding the build lock).

    Returns:
        The removed paths.
    """
    removed: list[str] = []
    data = settings.data_dir
    if not data.is_dir():
        return removed
    patterns = [(data, f"{settings.warehouse_path.name}.tmp-*")]
    for sub in (settings.notes_dir, settings.chunks_dir, settings.state_dir, settings.graph_dir):
        patterns.append((sub, ".*.tmp"))
    cache = settings.cache_dir
    if cache.is_dir():
        for d in cache.iterdir():
            if d.is_dir():
                patterns.append((d, ".shard-tmp-*"))
                patterns.append((d, ".*.tmp"))
    for folder, pattern in patterns:
        if not folder.is_dir():
            continue
        for p in folder.glob(pattern):
            try:
                p.unlink()
                removed.append(str(p))
            except OSError:
                pass
    if removed:
        log.info("removed %d temp files left by an interrupted build", len(removed))
    return removed


def _generated_vault_folder(folder: Path) -> bool:
    """True when ``folder`` is a real directory (not a symlink) holding docsvault's index note for a source of that
    name (``_index.md`` or ``_index (N).md`` whose frontmatter has ``docsvault: index`` and ``source: <folder>``)."""
    from pipeline.errors import NoteError
    from pipeline.vault import INDEX_KEY, INDEX_VALUE, parse_note

    if folder.is_symlink() or not folder.is_dir():
        return False
    for path in sorted(folder.glob("_index*.md")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            fm, _ = parse_note(path.read_bytes(), str(path))
        except (OSError, NoteError):
            continue
        if isinstance(fm, dict) and fm.get(INDEX_KEY) == INDEX_VALUE and fm.get("source") == folder.name:
            return True
    return False


def _remove_generated(folder: Path) -> list[str]:
    """Remove what the build wrote in a dropped source's vault folder (files as it wrote them, per the folder's
    manifest) and the folder itself when nothing else is left; returns the rel paths of the files kept (the
    user's own, or generated files edited since)."""
    import shutil

    from pipeline.vault import write_source

    from pipeline.errors import NoteError

    try:
        result = write_source(folder.parent, folder.name, [], index=False)
    except (NoteError, OSError) as exc:         # not a name docsvault could have written: leave it all
        log.warning("vault/%s/ kept: %s", folder.name, exc)
        return [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    if not result.kept:
        shutil.rmtree(folder, ignore_errors=True)
    return list(result.kept)


def remove_dropped_sources(settings: Settings, sources: Sequence[Source]) -> list[str]:
    """Remove what earlier builds wrote for sources that are no longer in sources.yaml (call only while holding
    the build lock): the vault folder ``vault/<name>/`` — only one docsvault generated (its index note carries
    ``docsvault: index``; any other folder is left alone), and in it only the files the build wrote and nobody
    edited since (the others are kept and named in the line) — and the per-source files under the data dir (state,
    skip report, notes, chunks, dangling links, fetched copy). The caches (embeddings, parse, BM25 tokens) stay:
    they are keyed by content and help if the source comes back.

    Returns:
        One line per removed vault folder: ``removed vault/<name>/: source '<name>' is no longer in sources.yaml``.
    """
    import shutil

    keep = {s.name for s in sources}
    lines: list[str] = []
    vault = settings.vault_dir
    if vault.is_dir():
        for folder in sorted(vault.iterdir()):
            if folder.name.startswith(".") or folder.name in keep or not _generated_vault_folder(folder):
                continue
            kept = _remove_generated(folder)
            line = f"removed vault/{folder.name}/: source '{folder.name}' is no longer in sources.yaml"
            if kept:
                shown = ", ".join(kept[:5]) + (f" and {len(kept) - 5} more" if len(kept) > 5 else "")
                line += (f" (kept {len(kept)} file(s) docsvault did not write, or that were edited since: {shown})")
            lines.append(line)
            log.warning("%s", lines[-1])
    state_dir = settings.state_dir
    dropped = sorted(p.name[:-5] for p in state_dir.glob("*.json")
                     if not p.name.startswith(".") and p.name[:-5] not in keep) if state_dir.is_dir() else []
    for name in dropped:
        for path in (state_dir / f"{name}.errors.txt", vault_skipped_path(settings, name),
                     artifacts.notes_path(settings, name),
                     artifacts.chunks_path(settings, name), _chunk_index_path(settings, name),
                     settings.graph_dir / f"dangling-{name}.json"):
            path.unlink(missing_ok=True)
        raw = settings.raw_dir / name
        if raw.is_symlink():
            raw.unlink()
        elif raw.is_dir():
            shutil.rmtree(raw, ignore_errors=True)
        artifacts.state_path(settings, name).unlink(missing_ok=True)     # last: a killed build redoes the rest
    return lines


def check_layout(settings: Settings, sources: Sequence[Source]) -> None:
    """Refuse a vault or data dir inside a local source's folder (or a folder inside them): each build would read
    its own output back as notes (vault/x/x/x/...).

    Raises:
        SourceConfigError: naming the source, its folder and the overlapping output folder.
    """
    from pipeline.errors import SourceConfigError

    outputs = {"vault": settings.vault_dir.resolve(), "data": settings.data_dir.resolve()}
    for source in sources:
        for root in source.path:
            root = root.resolve()
            for what, out in outputs.items():
                if out == root or root in out.parents or out in root.parents:
                    raise SourceConfigError(
                        f"{settings.sources_file}: source '{source.name}': its folder {root} overlaps the {what} "
                        f"dir {out}; put the {what} dir (--{what} / DOCSVAULT_{what.upper()}) outside the source"
                    )


class JsonCache:
    """key -> JSON value in one file; :meth:`save` keeps only the entries read or written since it was opened
    (written atomically, and only when they differ from what was loaded). For per-file parse results that a
    rebuild reuses for unchanged inputs; the file name carries the code version of what produced the values."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hits = 0
        self.misses = 0
        self._used: dict[str, Any] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            self._data: dict[str, Any] = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            self._data = {}

    def get(self, key: str) -> Any:
        value = self._used.get(key, self._data.get(key))
        if value is not None:
            self.hits += 1
            self._used[key] = value
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.misses += 1
        self._used[key] = value

    def save(self, stale: Sequence[Path] = ()) -> None:
        """Write the used entries (when changed) and remove ``stale`` files (older versions of this cache)."""
        if self.misses or len(self._used) != len(self._data):
            artifacts.write_atomic(self.path, json.dumps(self._used, ensure_ascii=False,
                                                         separators=(",", ":")).encode("utf-8"))
        for old in stale:
            if old != self.path:
                old.unlink(missing_ok=True)


def _versioned_cache(settings: Settings, kind: str, name: str, stage: str) -> tuple[JsonCache, list[Path]]:
    """(``<cache>/<kind>/<name>.<code version of stage>.json``, the same cache's files of other code versions)."""
    import re

    folder = settings.cache_dir / kind
    cache = JsonCache(folder / f"{name}.{code_version(stage)}.json")
    pattern = re.compile(rf"^{re.escape(name)}\.[0-9a-f]{{16}}\.json$")
    stale = [p for p in folder.iterdir() if pattern.match(p.name)] if folder.is_dir() else []
    return cache, stale


# ---------------------------------------------------------------- per source
def fetch_stage(settings: Settings, source: Source) -> dict[str, Any]:
    """Fetch one source into <data>/raw/<source>/; on failure the last good copy stays (FetchError propagates)."""
    from pipeline.fetch import fetch_source

    with _locked(settings):
        started = time.perf_counter()
        _notify("fetch", source.name, 0, 0)            # total unknown: a running line until it ends
        try:
            result = fetch_source(source, settings)
        except FetchError as exc:
            _notify("fetch", source.name, 1, 1)
            artifacts.update_state(settings, source.name, fetch_status="failed", fetch_error=str(exc),
                                   failed_at=_now())
            raise
        seconds = round(time.perf_counter() - started, 3)
        _notify("fetch", source.name, max(1, len(result.files)), max(1, len(result.files)))
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


KEPT_SUFFIX = "; its last good version stays in the vault and search until the file is fixed"


def _keep_last_good(settings: Settings, source: Source, files: Sequence[Any], result: Any) -> tuple[Any, list[str]]:
    """A file that normalized before and fails now (broken frontmatter, bad encoding, emptied...) keeps its last
    good note: one typo must not silently delete a page from the vault, the graph and search. Its error line says
    so (``KEPT_SUFFIX``). A file removed from the source is not in ``files`` and goes away as usual.

    Returns:
        ``(result with the kept notes added, sorted by source_path; kept source paths)``.
    """
    failed = {f.source_path for f in files} - {n.source_path for n in result.notes}
    if not failed:
        return result, []
    previous = {n.source_path: n for n in artifacts.load_notes(settings, source.name) if n.source_path in failed}
    if not previous:
        return result, []
    kept = sorted(previous)
    notes = sorted([*result.notes, *previous.values()], key=lambda n: n.source_path)
    errors = []
    for line in result.errors:
        if any(f": {sp}:" in line or f": {sp!r}:" in line for sp in kept):
            line += KEPT_SUFFIX
        errors.append(line)
    log.warning("source '%s': %d file(s) failed to normalize; serving their last good version: %s",
                source.name, len(kept), ", ".join(kept[:5]) + (" …" if len(kept) > 5 else ""))
    return result._replace(notes=notes, errors=errors), kept


def normalize_stage(settings: Settings, source: Source) -> dict[str, Any]:
    """Normalize the fetched files of one source into <data>/notes/<source>.jsonl (per-file errors are reported).

    Skipped (``skipped: True``) when the fetch revision, the fetched file list, the source's configuration and the
    normalizer code are those of the last run and its notes file exists.
    """
    from pipeline.fetch import load_fetch_result
    from pipeline.normalize import normalize_source, write_report

    with _locked(settings):
        fetched = load_fetch_result(source, settings)
        if fetched is None:
            raise FetchError(f"source '{source.name}': nothing fetched yet; its fetch must succeed once first")
        state = artifacts.load_state(settings, source.name)
        key = _digest(fetched.revision, [(f.source_path, f.url, f.meta) for f in fetched.files],
                      _source_config(source), code_version("normalize"))
        path = artifacts.notes_path(settings, source.name)
        if state.get("normalize_key") == key and path.is_file() and state.get("notes_sha") == _file_sha(path) \
                and not forced(source.name):
            return {"notes": int(state.get("notes", 0)), "errors": int(state.get("normalize_errors", 0)),
                    "error_lines": list(state.get("normalize_error_lines") or [])[:50], "skipped": True}
        started = time.perf_counter()
        cache, stale = _versioned_cache(settings, "normalize", source.name, "normalize")
        n_files = len(fetched.files)
        _notify("normalize", source.name, 0, n_files)
        result = normalize_source(source, fetched.files, fetched_at=state.get("fetched_at") or _now(),
                                  cache=_CountingCache(cache, lambda n: _notify("normalize", source.name,
                                                                                min(n, n_files), n_files)))
        _notify("normalize", source.name, n_files, n_files)
        result, kept = _keep_last_good(settings, source, fetched.files, result)
        if not result.notes and fetched.files:
            raise PipelineError(
                f"source '{source.name}': none of its {len(fetched.files)} files could be normalized; "
                f"first error: {result.errors[0] if result.errors else 'unknown'}"
            )
        artifacts.save_notes(settings, source.name, result.notes)
        cache.save(stale)
        report = write_report(settings, source.name, result)   # every skipped file, every dangling link
        artifacts.update_state(settings, source.name, normalize_key=key, notes_sha=_file_sha(path),
                               notes=len(result.notes), normalize_errors=len(result.errors),
                               normalize_error_lines=list(result.errors[:50]), dangling=len(result.dangling))
    return {"notes": len(result.notes), "errors": len(result.errors), "error_lines": result.errors[:50],
            "kept_last_good": kept, "parsed": cache.misses, "parse_cached": cache.hits,
            "dangling": len(result.dangling), "errors_file": str(report["errors"]),
            "dangling_file": str(report["dangling"]), "skipped": False,
            "seconds": round(time.perf_counter() - started, 3)}


def vault_skipped_path(settings: Settings, source: str) -> Path:
    """``<data>/state/<source>.vault-skipped.txt``: one line per attachment (or symlink) the last vault stage did
    not copy, with the reason (no file when there was none)."""
    return settings.state_dir / f"{source}.vault-skipped.txt"


def vault_stage(settings: Settings, source: Source) -> dict[str, Any]:
    """Write the source's notes and the attachments they use to vault/<source>/ (only changed files; removed pages
    removed), keeping every file the user wrote there (see :func:`pipeline.vault.write_source`).

    Skipped when the notes file, the attachments to copy (path, size, mtime) and the vault folder's listing are
    those recorded after the last write. Metadata: ``notes``, ``written``, ``unchanged``, ``removed`` (counts),
    ``removed_files`` (up to 50 rel paths), ``kept`` (files in the folder the build did not write) and
    ``kept_files`` (up to 50), ``conflicts`` (``"<rel> -> <copy>"`` lines: edited generated files moved aside),
    ``attachments`` / ``attachments_written`` / ``attachment_bytes``, ``attachments_skipped`` and
    ``attachment_skip_lines`` (up to 50; all in ``<data>/state/<source>.vault-skipped.txt``), ``unresolved_embeds``
    (attachment links whose file is not in the source), ``qualified_links`` (bare links written in path form
    because their name is also a note elsewhere in the vault, see :mod:`pipeline.vaultlinks`).
    """
    from pipeline.attachments import plan_attachments
    from pipeline.fetch import read_state
    from pipeline.vault import write_source
    from pipeline.vaultlinks import ambiguous_names, other_note_names, qualify_ambiguous_links

    with _locked(settings):
        state = artifacts.load_state(settings, source.name)
        notes = artifacts.load_notes(settings, source.name)
        others = other_note_names(settings.vault_dir, source.name)
        shared_names = ambiguous_names(notes, others)
        notes, qualified = qualify_ambiguous_links(source.name, notes, others)
        plan = plan_attachments(source, notes, settings.raw_dir)
        fetch_state = read_state(source, settings) or {}
        symlinks = [w for w in fetch_state.get("warnings") or [] if isinstance(w, str) and "skipped" in w]
        skip_lines = [*plan.skipped, *symlinks]
        att_rows = []
        for rel, path in sorted(plan.files.items()):
            try:
                st = path.stat()
                att_rows.append((rel, str(path), st.st_size, st.st_mtime_ns))
            except OSError:
                att_rows.append((rel, str(path), -1, -1))
        key = _digest(state.get("notes_sha"), code_version("vault"), att_rows, shared_names)
        vault_dir = str(settings.vault_dir / source.name)
        if state.get("vault_key") == key and state.get("vault_listing") == vault_listing(settings, source.name) \
                and state.get("vault_listing") and not forced(source.name):
            return {"notes": int(state.get("vault_notes", 0)), "written": 0, "unchanged": int(state.get("vault_notes", 0)),
                    "removed": 0, "removed_files": [], "conflicts": [],
                    "kept": len(state.get("vault_kept") or []), "kept_files": list(state.get("vault_kept") or [])[:50],
                    "attachments": len(att_rows), "attachments_written": 0, "attachment_bytes": plan.bytes,
                    "attachments_skipped": len(skip_lines), "attachment_skip_lines": skip_lines[:50],
                    "unresolved_embeds": len(plan.unresolved), "qualified_links": qualified,
                    "vault_dir": vault_dir, "skipped": True}
        result = write_source(settings.vault_dir, source.name, notes, attachments=plan.files)
        conflicts = [f"{rel} -> {copy}" for rel, copy in result.conflicts]
        if skip_lines:
            artifacts.write_atomic(vault_skipped_path(settings, source.name),
                                   "".join(line.replace("\n", "\\n") + "\n" for line in skip_lines).encode("utf-8"))
        else:
            vault_skipped_path(settings, source.name).unlink(missing_ok=True)
        artifacts.update_state(settings, source.name, vault_key=key, vault_notes=len(notes),
                               vault_listing=vault_listing(settings, source.name), vault_kept=result.kept,
                               vault_conflicts=conflicts, vault_attachments=result.attachments,
                               vault_attachments_skipped=len(skip_lines))
    for line in conflicts:
        log.warning("source '%s': vault/%s/%s was edited since the build wrote it; your version is kept as %s",
                    source.name, source.name, *line.split(" -> ", 1))
    return {
        "notes": len(notes),
        "written": len(result.written),
        "unchanged": len(result.unchanged),
        "removed": len(result.removed),
        "removed_files": result.removed[:50],
        "kept": len(result.kept),
        "kept_files": result.kept[:50],
        "conflicts": conflicts,
        "attachments": result.attachments,
        "attachments_written": len(result.attachments_written),
        "attachment_bytes": plan.bytes,
        "attachments_skipped": len(skip_lines),
        "attachment_skip_lines": skip_lines[:50],
        "unresolved_embeds": len(plan.unresolved),
        "qualified_links": qualified,
        "vault_dir": vault_dir,
        "skipped": False,
    }


def frontmatter_check(settings: Settings, source: Source) -> dict[str, Any]:
    """Every generated ``.md`` file under ``vault/<source>/`` (those in its manifest; all of them in a folder
    without one) has frontmatter that parses and carries ``source_path``.

    Returns ``notes`` (files checked), ``invalid`` (their count) and ``first_invalid`` (up to 10 rel paths). The
    result is kept with the files' (path, size, mtime) and reused while none of them changed (``cached``).
    """
    from pipeline.errors import NoteError
    from pipeline.vault import parse_note

    from pipeline.ownership import load_manifest

    root = settings.vault_dir / source.name
    files = sorted(root.rglob("*.md")) if root.is_dir() else []
    owned = load_manifest(root) if root.is_dir() else None
    if owned is not None:           # the user's own files there are not generated notes (pipeline.ownership)
        files = [p for p in files if p.relative_to(root).as_posix() in owned]
    rows = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            rows.append((str(path.relative_to(root)), -1, -1))
        else:
            rows.append((str(path.relative_to(root)), st.st_size, st.st_mtime_ns))
    key = _digest(rows, code_version("vault"))
    last = artifacts.load_state(settings, source.name).get("frontmatter_check") or {}
    if last.get("key") == key:
        return {**last.get("result", {}), "cached": True}
    bad: list[str] = []
    for path in files:
        rel = str(path.relative_to(root))
        try:
            fm, _ = parse_note(path.read_bytes(), rel)
        except (OSError, NoteError):
            fm = None
        if not isinstance(fm, dict) or not fm.get("source_path"):
            bad.append(rel)
    result = {"notes": len(files), "invalid": len(bad), "first_invalid": bad[:10]}
    with _locked(settings):
        artifacts.update_state(settings, source.name, frontmatter_check={"key": key, "result": result})
    return {**result, "cached": False}


def _note_hash(note: Note) -> str:
    return _digest(note.source_path, note.rel_path, note.title, note.frontmatter, note.body)


def _chunk_index_path(settings: Settings, source: str) -> Path:
    return settings.chunks_dir / f"{source}.notes.json"


def chunk_stage(settings: Settings, source: Source, embedder_factory: Callable[[str], Any]) -> dict[str, Any]:
    """Chunk the source's vault notes into <data>/chunks/<source>.jsonl, each note within the token window of the
    model its language chooses (:meth:`Settings.model_for` over :func:`pipeline.language.detect_language`).

    Skipped when the vault folder's listing, the models and the chunker code are unchanged; otherwise only notes
    whose content hash changed are chunked again (``rechunked`` counts them), the others keep their chunks.
    ``embedder_factory`` (model spec -> embedder) is called only when a note is chunked again (so a skipped stage
    never loads a tokenizer). ``languages`` counts the notes per detected language; ``language_warning`` says when a
    configured `language:` disagrees with what most notes are written in (the configured one is used).
    """
    from dataclasses import replace

    from pipeline.chunk import chunk_note
    from pipeline.language import detect_language, majority_language
    from pipeline.vault import read_notes

    with _locked(settings):
        state = artifacts.load_state(settings, source.name)
        config = _digest(settings.models_of(source), source.language, code_version("chunk"))
        listing = vault_listing(settings, source.name)
        path = artifacts.chunks_path(settings, source.name)
        key = _digest(listing, config)
        if state.get("chunk_key") == key and path.is_file() and state.get("chunks_sha") == _file_sha(path) \
                and not forced(source.name):
            return {"notes": int(state.get("chunk_notes", 0)), "chunks": int(state.get("chunks", 0)),
                    "rechunked": 0, "skipped": True, "languages": dict(state.get("languages") or {}),
                    "language_warning": str(state.get("language_warning") or "")}
        notes = read_notes(settings.vault_dir, [source.name])
        index_path = _chunk_index_path(settings, source.name)
        previous: dict[str, str] = {}
        old_chunks: dict[str, list[Chunk]] = {}
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            if index.get("config") == config and path.is_file():
                previous = dict(index.get("notes") or {})
                for c in artifacts.load_chunks(settings, source.name):
                    old_chunks.setdefault(c.note_id, []).append(c)
        except (OSError, ValueError, TypeError, KeyError):
            previous = {}
        chunks: list[Chunk] = []
        hashes: dict[str, str] = {}
        detected: dict[str, str] = {}
        rechunked = 0
        _notify("chunk", source.name, 0, len(notes))
        for i, note in enumerate(notes, start=1):
            if i % 50 == 0:
                _notify("chunk", source.name, i, len(notes))
            h = _note_hash(note)
            hashes[note.note_id] = h
            if previous.get(note.note_id) == h and note.note_id in old_chunks:
                kept = sorted(old_chunks[note.note_id], key=lambda c: c.ordinal)
                detected[note.note_id] = kept[0].language
                chunks.extend(kept)
                continue
            if previous.get(note.note_id) == h and not old_chunks.get(note.note_id) and note.note_id in previous:
                continue     # the note had no chunks last time (empty note)
            rechunked += 1
            language = detected[note.note_id] = detect_language(f"{note.title}\n{note.body}")
            embedder = embedder_factory(settings.model_for(source, language))
            chunks.extend(replace(c, language=language) for c in
                          chunk_note(note, count_tokens=embedder.count_tokens, max_tokens=embedder.max_tokens))
        languages: dict[str, int] = {}
        for lang in detected.values():
            languages[lang or "none"] = languages.get(lang or "none", 0) + 1
        warning = ""
        majority = majority_language(detected.values())
        configured = (source.language or "").split("-")[0].lower()
        if configured and majority and (configured in _CJK) != (majority in _CJK):
            warning = (f"source '{source.name}': configured language '{source.language}' but most notes "
                       f"({languages.get(majority, 0)} of {len(detected)}) read as '{majority}'; the configured one "
                       f"decides the embedding model (remove `language:` from sources.yaml to use the detected one)")
            log.warning(warning)
        _notify("chunk", source.name, len(notes), len(notes))
        artifacts.save_chunks(settings, source.name, chunks)
        artifacts.write_atomic(index_path, json.dumps({"config": config, "notes": hashes}).encode("utf-8"))
        artifacts.update_state(settings, source.name, chunk_key=key, chunks_sha=_file_sha(path), chunks=len(chunks),
                               chunk_notes=len(notes), languages=languages, language_warning=warning)
    return {"notes": len(notes), "chunks": len(chunks), "rechunked": rechunked, "skipped": False,
            "languages": languages, "language_warning": warning}


def chunk_models(settings: Settings, source: Source, chunks: Sequence[Chunk]) -> dict[str, list[Chunk]]:
    """Model spec -> the chunks it embeds: each chunk by its note's language (:meth:`Settings.model_for`), and every
    chunk again by the cross-lingual model (``Settings.crosslingual``) when that is on."""
    out: dict[str, list[Chunk]] = {}
    for c in chunks:
        out.setdefault(settings.model_for(source, c.language), []).append(c)
    cross = settings.crosslingual
    if cross and chunks:
        out.setdefault(cross, [])
        if len(out[cross]) != len(chunks):
            out[cross] = list(chunks)
    return out


def _seed_from_warehouse(settings: Settings, model_id: str, hashes: Sequence[str]) -> dict[str, Any]:
    """Vectors of ``model_id`` for these text hashes stored in the current warehouse ({} when none/unreadable)."""
    if not hashes or not settings.warehouse_path.exists():
        return {}
    from pipeline.warehouse import connect, vectors_by_text_hash

    try:
        con = connect(settings.warehouse_path, read_only=True)
    except (WarehouseCorruptError, WarehouseNotBuiltError, Exception):  # noqa: BLE001 - only a cache miss
        return {}
    try:
        return vectors_by_text_hash(con, model_id, hashes)
    except Exception:  # noqa: BLE001
        log.debug("cannot read vectors from the warehouse", exc_info=True)
        return {}
    finally:
        con.close()


def embed_stage(settings: Settings, source: Source, embedder_factory: Callable[[str], Any],
                progress: Progress | None = None) -> dict[str, Any]:
    """Embed the source's chunks through the content-hash caches; ``embedded`` counts new model calls.

    Each chunk is embedded by the model of its note's language, and every chunk by the cross-lingual model too
    (:func:`chunk_models`); ``models`` maps each model id to its chunk count. Texts missing from a cache are first
    taken from the current warehouse (``seeded``). When the source's models differ from those of its last build,
    ``model_changed`` says ``"old -> new"`` (the vectors of two models never mix: each model has its own cache and
    vector table). ``embedder_factory``: model spec -> embedder (loaded only when something is missing).
    """
    import numpy as np

    from pipeline.embed import EmbeddingCache, embed_chunks

    with _locked(settings):
        chunks = artifacts.load_chunks(settings, source.name)
        state = artifacts.load_state(settings, source.name)
        groups = chunk_models(settings, source, chunks)
        embedders = {spec: embedder_factory(spec) for spec in groups}
        model_ids = sorted({e.model_id for e in embedders.values()})
        previous = state.get("models") or ([state["model"]] if state.get("model") else [])
        model_changed = (f"{', '.join(previous)} -> {', '.join(model_ids)}"
                         if previous and model_ids and sorted(previous) != model_ids else "")
        if model_changed:
            log.warning("source '%s': embedding models changed (%s)", source.name, model_changed)
        todo: list[tuple[Any, EmbeddingCache, list[Chunk]]] = []
        seeded = 0
        for spec, group in groups.items():
            embedder = embedders[spec]
            cache = EmbeddingCache(settings.cache_dir, embedder.model_id)
            hashes = sorted({text_hash(c.embed_text) for c in group})
            have = cache.get_many(hashes)
            missing = [h for h in hashes if h not in have]
            if forced(source.name):         # --force: embed every chunk again, refreshing the cache
                cache, missing = _WriteOnlyCache(cache), []
            if missing:
                found = _seed_from_warehouse(settings, embedder.model_id, missing)
                if found:
                    hs = sorted(found)
                    cache.put_many(hs, np.stack([found[h] for h in hs]))
                    seeded += len(hs)
                    log.info("source '%s': %d %s vectors taken from the warehouse into the embedding cache",
                             source.name, len(hs), embedder.model_id)
            todo.append((embedder, cache, group))
        done_before = [0]
        total_missing = [0]

        def both(done: int, total: int) -> None:
            if progress is not None:
                progress(done_before[0] + done, total_missing[0] or total)
            _notify("embed", source.name, done_before[0] + done, total_missing[0] or total)

        started = time.perf_counter()
        n_embedded = n_cached = 0
        per_model: dict[str, int] = {}
        for embedder, cache, group in todo:
            result = embed_chunks(group, embedder, cache, progress=both)
            done_before[0] += result.n_embedded
            n_embedded += result.n_embedded
            n_cached += result.n_cached
            per_model[embedder.model_id] = per_model.get(embedder.model_id, 0) + len(group)
        seconds = time.perf_counter() - started
        primary = sorted({embedders[settings.model_for(source, c.language)].model_id for c in chunks})
        artifacts.update_state(settings, source.name, embedded=n_embedded, chunks=len(chunks),
                               models=model_ids or previous,
                               model=", ".join(primary),
                               embed_key=_digest(state.get("chunks_sha"), model_ids))
    return {
        "model": ", ".join(primary),
        "models": per_model,
        "model_changed": model_changed,
        "chunks": len(chunks),
        "embedded": n_embedded,
        "cached": n_cached,
        "seeded": seeded,
        "seconds": round(seconds, 3),
        "chunks_per_s": round(n_embedded / seconds, 2) if n_embedded and seconds > 0 else 0.0,
    }


# ---------------------------------------------------------------- all sources
def built_sources(settings: Settings, sources: Sequence[Source]) -> list[str]:
    """Sources of sources.yaml that have a vault folder (their last good copy, possibly from an earlier build)."""
    return [s.name for s in sources if (settings.vault_dir / s.name).is_dir()]


def _shared_state(settings: Settings) -> dict[str, Any]:
    return artifacts.load_state(settings, SHARED_STATE)


def _graph_key(settings: Settings, names: Sequence[str]) -> str:
    return _digest([(n, vault_listing(settings, n)) for n in names], code_version("graph"))


def _build_graph(settings: Settings, notes: Sequence[Note]) -> Any:
    """``graph.build_graph`` with the links of unchanged note bodies taken from ``<cache>/graph/links-<code>.json``."""
    from pipeline.graph import LinksCache, build_graph

    folder = settings.cache_dir / "graph"
    path = folder / f"links-{code_version('graph')}.json"
    cache = LinksCache(path)
    lg = build_graph(notes, parse=cache.parse)
    cache.save()
    for old in folder.glob("links-*.json") if cache.misses and folder.is_dir() else ():
        if old != path:
            old.unlink(missing_ok=True)
    return lg


def graph_stage(settings: Settings, sources: Sequence[Source]) -> dict[str, Any]:
    """Link graph over every built source's vault notes -> <data>/graph/links.graphml and links.json.

    Skipped when no vault folder changed since the last export (the metadata is the last run's).
    """
    from pipeline.graph import export_graph
    from pipeline.vault import read_notes

    with _locked(settings):
        names = built_sources(settings, sources)
        key = _graph_key(settings, names)
        shared = _shared_state(settings)
        last = shared.get("graph") or {}
        paths = {"graphml": settings.graph_dir / "links.graphml", "json": settings.graph_dir / "links.json"}
        if last.get("key") == key and all(p.is_file() for p in paths.values()) \
                and last.get("json_sha") == _file_sha(paths["json"]):
            return {**last.get("meta", {}), "skipped": True}
        notes = read_notes(settings.vault_dir, names)
        lg = _build_graph(settings, notes)
        paths = export_graph(lg, settings.graph_dir)
        meta = {
            "nodes": lg.graph.number_of_nodes(),
            "edges": lg.graph.number_of_edges(),
            "links_resolved": sum(e.count for e in lg.edges if e.dst is not None),
            "links_dangling": sum(e.count for e in lg.edges if e.dst is None),
            "attachments": lg.attachments,
            "graphml": str(paths["graphml"]),
            "json": str(paths["json"]),
        }
        artifacts.update_state(settings, SHARED_STATE,
                               graph={"key": key, "json_sha": _file_sha(Path(paths["json"])), "meta": meta})
    return {**meta, "skipped": False}


def _graph_from_export(settings: Settings, key: str) -> tuple[list[Any], dict[str, tuple[int, float]]] | None:
    """(edges, note metrics) from links.json when it was exported for exactly this vault state, else None."""
    from pipeline.models import Edge

    last = _shared_state(settings).get("graph") or {}
    path = settings.graph_dir / "links.json"
    if last.get("key") != key or last.get("json_sha") != _file_sha(path):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        edges = [Edge(src=e["src"], dst=e["dst"], target=e["target"], kind=e["kind"], count=int(e["count"]))
                 for e in data["edges"]]
        metrics = {n["id"]: (int(n.get("in_degree", 0)), float(n.get("pagerank", 0.0))) for n in data["nodes"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return edges, metrics


class TokenCache:
    """Analyzer tokens of texts, keyed by text hash, in ``<cache_dir>/bm25/tokens-<code version>.json``.

    Re-analysing every chunk (Sudachi for Japanese) is the slowest part of a BM25 rebuild; with this cache a
    rebuild analyses only new texts. :meth:`save` keeps only the entries used by the current build.
    """

    SEP = "\x1f"

    def __init__(self, cache_dir: Path, version: str) -> None:
        self.path = Path(cache_dir) / "bm25" / f"tokens-{version}.json"
        self.hits = 0
        self.misses = 0
        self._used: dict[str, str] = {}
        try:
            self._data: dict[str, str] = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(self._data, dict):
                self._data = {}
        except (OSError, ValueError):
            self._data = {}
        self._loaded = len(self._data)

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:24]

    def get(self, text: str, compute: Callable[[str], list[str]]) -> list[str]:
        k = self.key(text)
        joined = self._used.get(k)
        if joined is None:
            joined = self._data.get(k)
            if joined is None:
                self.misses += 1
                joined = self.SEP.join(compute(text))
            else:
                self.hits += 1
            self._used[k] = joined
        return joined.split(self.SEP) if joined else []

    def save(self) -> None:
        if self.misses == 0 and len(self._used) == self._loaded:
            return
        for old in self.path.parent.glob("tokens-*.json") if self.path.parent.is_dir() else ():
            if old != self.path:
                old.unlink(missing_ok=True)
        artifacts.write_atomic(self.path, json.dumps(self._used, ensure_ascii=False).encode("utf-8"))


def caching_analyzer(cache: TokenCache) -> Any:
    """An ``Analyzer`` whose ``tokens`` go through ``cache`` (same tokens as a plain Analyzer)."""
    from pipeline.analysis import Analyzer

    class _CachingAnalyzer(Analyzer):
        def tokens(self, text: str) -> list[str]:
            if not text:
                return super().tokens(text)
            return cache.get(text, super().tokens)

    return _CachingAnalyzer()


def _warehouse_key(settings: Settings, names: Sequence[str], by_name: dict[str, Source]) -> str:
    from pipeline.warehouse import SCHEMA_VERSION

    parts = []
    for name in names:
        st = artifacts.load_state(settings, name)
        parts.append((name, vault_listing(settings, name), _file_sha(artifacts.chunks_path(settings, name)),
                      settings.models_of(by_name[name]), settings.crosslingual, st.get("models"),
                      st.get("embed_key")))
    return _digest(SCHEMA_VERSION, code_version("warehouse"), parts)


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
                    ) -> dict[str, Any]:
    """Publish notes, chunks, links, vectors (one HNSW-indexed table per model) and the BM25 index into one DuckDB
    file, atomically. Vectors come from the embedding cache; a chunk whose vector is missing stays BM25-searchable.

    Nothing is written when no input changed since the warehouse was published (``skipped``). A warehouse file
    that is corrupt or of another schema version is reported (``rebuilt_because``, a warning in the log) and
    rebuilt from the vault and the caches, never used.
    """
    import numpy as np

    from pipeline.bm25 import PAGE_PREFIX, build_chunk_index, build_page_index
    from pipeline.embed import EmbeddingCache
    from pipeline.vault import read_notes
    from pipeline.warehouse import WarehouseData, publish

    with _locked(settings):
        started = time.perf_counter()
        names = built_sources(settings, sources)
        by_name = {s.name: s for s in sources}
        key = _warehouse_key(settings, names, by_name)
        meta, problem = _current_warehouse(settings)
        if problem:
            log.warning("warehouse %s cannot be used (%s): rebuilding it from the vault and the caches",
                        settings.warehouse_path, problem)
        elif meta.get("input_key") == key and not forced():
            last = _shared_state(settings).get("warehouse") or {}
            if last.get("input_key") == key:
                return {**last.get("meta", {}), "skipped": True, "mode": "unchanged", "rebuilt_because": "",
                        "seconds": round(time.perf_counter() - started, 3)}
        timings: dict[str, float] = {}
        t = time.perf_counter()
        _notify("warehouse", "all", 0, 5)
        notes = read_notes(settings.vault_dir, names)
        note_ids = {n.note_id for n in notes}
        _notify("warehouse", "all", 1, 5)
        timings["read_s"] = time.perf_counter() - t
        t = time.perf_counter()
        graph_key = _graph_key(settings, names)
        exported = _graph_from_export(settings, graph_key)
        if exported is not None:
            edges, metrics = exported
        else:
            lg = _build_graph(settings, notes)
            edges = lg.edges
            metrics = {nid: (int(a.get("in_degree", 0)), float(a.get("pagerank", 0.0)))
                       for nid, a in lg.graph.nodes(data=True)}
        timings["graph_s"] = time.perf_counter() - t
        _notify("warehouse", "all", 2, 5)
        t = time.perf_counter()
        chunks: list[Chunk] = []
        vectors: dict[str, tuple[list[str], Any]] = {}
        missing = 0
        for name in names:
            source_chunks = [c for c in artifacts.load_chunks(settings, name) if c.note_id in note_ids]
            chunks.extend(source_chunks)
            for spec, group in chunk_models(settings, by_name[name], source_chunks).items():
                model_id = embedder_factory(spec).model_id
                found = EmbeddingCache(settings.cache_dir, model_id).get_many([c.text_hash for c in group])
                ids, vecs = vectors.setdefault(model_id, ([], []))
                for c in group:
                    vec = found.get(c.text_hash)
                    if vec is None:
                        missing += 1
                    else:
                        ids.append(c.chunk_id)
                        vecs.append(vec)
        arrays = {m: (ids, np.asarray(vecs, dtype="float32").reshape(len(ids), -1))
                  for m, (ids, vecs) in vectors.items() if ids}
        timings["vectors_s"] = time.perf_counter() - t
        _notify("warehouse", "all", 3, 5)
        t = time.perf_counter()
        tokens = TokenCache(settings.cache_dir, code_version("bm25"))
        analyzer = caching_analyzer(tokens)
        bm25 = build_chunk_index(chunks, notes, analyzer)
        bm25_blobs = bm25.to_blobs()
        bm25_blobs.update({PAGE_PREFIX + k: v for k, v in build_page_index(chunks, notes, analyzer).to_blobs().items()})
        tokens.save()
        timings["bm25_s"] = time.perf_counter() - t
        _notify("warehouse", "all", 4, 5)
        data = WarehouseData(
            notes=notes,
            note_metrics=metrics,
            chunks=chunks,
            edges=edges,
            vectors=arrays,
            bm25_blobs=bm25_blobs,
            run_info={"built_at": _now(), "sources": ",".join(names), "input_key": key,
                      "crosslingual_model": (embedder_factory(settings.crosslingual).model_id
                                             if settings.crosslingual else "")},
        )
        t = time.perf_counter()
        stats = publish(settings.warehouse_path, data, incremental=not problem and not forced())
        timings["publish_s"] = time.perf_counter() - t
        _notify("warehouse", "all", 5, 5)
        out = {
            "sources": names,
            "models": sorted(arrays),
            "notes": len(notes),
            "chunks": len(chunks),
            "vectors": sum(len(ids) for ids, _ in arrays.values()),
            "missing_vectors": missing,
            "links": len(edges),
            "path": str(settings.warehouse_path),
            "size_mb": round(settings.warehouse_path.stat().st_size / 1e6, 2),
            "tokens_cached": tokens.hits,
            "tokens_analysed": tokens.misses,
            "rebuilt_because": problem,
            **{k: v for k, v in stats.items() if isinstance(v, (int, float, str)) and k != "models"},
            **{k: round(v, 3) for k, v in timings.items()},
        }
        artifacts.update_state(settings, SHARED_STATE, warehouse={"input_key": key, "meta": out})
    return {**out, "skipped": False, "seconds": round(time.perf_counter() - started, 3)}


def eval_files(settings: Settings) -> list[Path]:
    """The eval files named by DOCSVAULT_EVALS (a file or folder; several separated by the OS path separator)."""
    raw = os.environ.get("DOCSVAULT_EVALS")
    paths = [Path(p).resolve() for p in raw.split(os.pathsep) if p] if raw else [settings.evals_dir]
    return [p for p in paths if p.exists()]


def _warehouse_version(settings: Settings) -> str:
    """Identity of the published warehouse file (inode, size, mtime): changes whenever a build publishes."""
    try:
        st = settings.warehouse_path.stat()
    except OSError:
        return ""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def search_index_stage(settings: Settings, embedder_factory: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Open the published warehouse as search does and run one sample query per lane: proves the indexes serve.

    Skipped when the warehouse file is the one checked last time.
    """
    from pipeline.search import Searcher
    from pipeline.warehouse import connect, explain_vector_search, list_models, stats

    version = _warehouse_version(settings)
    last = _shared_state(settings).get("search_index") or {}
    if version and last.get("version") == version:
        return {**last.get("meta", {}), "skipped": True}
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
    meta = {
        **{k: v for k, v in counts.items() if isinstance(v, (int, float, str))},
        "models": [m["model_id"] for m in models],
        "hnsw_index_scan": all("HNSW_INDEX_SCAN" in p for p in plans.values()) if plans else False,
        "sample_query_ms": round(seconds * 1000, 1),
        "sample_hits": [f"{h.vault_path} > {h.heading}" for h in hits],
    }
    with _locked(settings):
        artifacts.update_state(settings, SHARED_STATE, search_index={"version": version, "meta": meta})
    return {**meta, "skipped": False}


def eval_stage(settings: Settings, sources: Sequence[Source], embedder_factory: Callable[[str], Any] | None = None
               ) -> dict[str, Any]:
    """Run the ablation over the eval cases of DOCSVAULT_EVALS (default evals/) whose corpus is a built source: each
    lane alone (bm25, vector, and graph when the warehouse has resolved links) and ``hybrid`` (the default fusion),
    each case searched within its corpus, plus ``hybrid unscoped`` (the default fusion with every case searched over
    all sources, as users search; a page of another source is a miss), scored overall (pooled), per source and per
    kind; the run's rows (every set-up, ``hybrid unscoped`` included) are appended to the eval history
    (``<data>/eval_runs.duckdb``, :func:`pipeline.warehouse.append_eval_runs`: a file of its own, so it survives
    every warehouse publish).

    Skipped (the last report, ``skipped: True``, nothing appended) when neither the warehouse file, the eval
    files nor the synonyms file changed. Searches use the synonyms file, as the CLI and MCP do.

    Returns:
        The hybrid set-up's report (``overall``, ``by_source``, ``by_kind``, ``cases``, ``lanes``, as
        :func:`pipeline.evaluate.run_eval`) plus ``setups`` (set-up -> ``{lanes, scope, overall, by_source,
        by_kind}``; the scoped ablation, then ``hybrid unscoped`` with ``scope: "unscoped"``), ``unscoped`` (the
        ``hybrid unscoped`` report: ``overall``, ``by_source``, ``by_kind``, ``cases``),
        ``config`` (``k_rrf``, ``weights``, ``models``), ``run_id``, ``run_at``, ``warehouse_built_at``, ``files``,
        ``history`` (the history file), ``history_rows`` (rows appended), ``skipped``. No scored case:
        ``overall = {"n": 0}`` and empty ``setups``.
    """
    from pipeline.evaluate import (
        HYBRID,
        UNSCOPED_SETUP,
        ablation_setups,
        eval_history_path,
        history_rows,
        load_cases,
        run_ablation,
        run_eval,
    )
    from pipeline.search import LANES, Searcher
    from pipeline.warehouse import append_eval_runs, connect, load_graph, read_meta

    files = eval_files(settings)
    names = sorted(built_sources(settings, sources))
    listing = []
    for f in files:
        for p in sorted(f.rglob("*")) if f.is_dir() else [f]:
            if p.is_file():
                st = p.stat()
                listing.append((str(p), st.st_size, st.st_mtime_ns))
    syn = settings.synonyms_file
    key = _digest("ablation-2", _warehouse_version(settings), listing, names,
                  _file_sha(syn) if syn.is_file() else None)
    last = _shared_state(settings).get("eval") or {}
    if last.get("key") == key and isinstance(last.get("report"), dict):
        return {**last["report"], "skipped": True, "history_rows": 0}
    history = eval_history_path(settings.data_dir)
    cases = load_cases(files) if files else []
    cases = [c for c in cases if c.corpus in set(names)]
    report: dict[str, Any] = {"overall": {"n": 0}, "by_source": {}, "by_kind": {}, "setups": {},
                              "files": [str(f) for f in files], "history": str(history), "history_rows": 0}
    rows: list[dict[str, Any]] = []
    if cases:
        con = connect(settings.warehouse_path, read_only=True)
        try:
            meta = read_meta(con)
            has_graph = load_graph(con)[0].num_rows > 0
        finally:
            con.close()
        searcher = Searcher(settings.warehouse_path, synonyms=settings.synonyms_file,
                            **({"embedder_factory": embedder_factory} if embedder_factory else {}))
        try:
            setups = ablation_setups(graph=has_graph, lanes=searcher.default_lanes)
            reports = run_ablation(searcher, cases, setups)
            reports[UNSCOPED_SETUP] = run_eval(searcher, cases, lanes=setups[HYBRID], scope="unscoped")
            config = {"k_rrf": float(searcher.k_rrf), "weights": {lane: float(searcher.weights[lane]) for lane in LANES},
                      "models": [m["model_id"] for m in searcher.models]}
        finally:
            searcher.close()
        run_at = _now()
        run_id = _digest(run_at, key)[:16]
        hybrid = {k: v for k, v in reports[HYBRID].items() if k != "skipped"}   # cases are of built sources only
        report.update(hybrid)
        report.update({
            "setups": {name: {k: r[k] for k in ("lanes", "scope", "overall", "by_source", "by_kind")}
                       for name, r in reports.items()},
            "unscoped": {k: v for k, v in reports[UNSCOPED_SETUP].items() if k != "skipped"},
            "config": config, "run_id": run_id, "run_at": run_at, "warehouse_built_at": meta.get("built_at", ""),
        })
        rows = history_rows(reports, run_id=run_id, run_at=run_at, built_at=meta.get("built_at", ""),
                            warehouse_key=meta.get("input_key", ""), cases_key=_digest(listing)[:16], config=config)
    with _locked(settings):
        if rows:
            append_eval_runs(history, rows)
            report["history_rows"] = len(rows)
        artifacts.update_state(settings, SHARED_STATE, eval={"key": key, "report": report})
    return {**report, "skipped": False}
