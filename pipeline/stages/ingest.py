"""Per-source ingest stages: fetch -> normalize -> vault (and the frontmatter check)."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.common import artifacts
from pipeline.common.errors import FetchError, PipelineError
from pipeline.config import Settings
from pipeline.models import Note, Source
from pipeline.stages.base import (
    CountingCache,
    code_version,
    digest,
    file_sha,
    forced,
    links_cache_path,
    notify,
    now,
    source_config,
    stage_lock,
    vault_listings,
    versioned_cache,
)
from pipeline.stages.results import FetchStageResult, FrontmatterCheck, NormalizeResult, VaultResult

log = logging.getLogger("docsvault")


# ---------------------------------------------------------------- per source

#: the end of a conflict record (``"<rel> -> <copy>"``) whose file the build had never written
FOREIGN = " (not written by the build)"


def conflict_line(source: str, record: str) -> str:
    """One line for a vault conflict record ``"<rel> -> <copy>[ (not written by the build)]"``: your edit of a
    generated note, or your own file where the source now has a note, and where your version is now."""
    foreign = record.endswith(FOREIGN)
    rel, copy = record.removesuffix(FOREIGN).split(" -> ", 1)
    if copy.endswith("/"):          # pipeline.ingest.vault._move_in_the_way: a folder at a note's path
        return (f"vault/{source}/{rel} is a folder docsvault did not write, and the source now has a note at that "
                f"path: your folder is kept as vault/{source}/{copy}")
    if rel.endswith("/"):           # a file at the path of a folder the source's notes go in
        return (f"vault/{source}/{rel[:-1]} is a file docsvault did not write, and the source now has a folder of "
                f"notes at that path: your file is kept as vault/{source}/{copy}")
    if foreign:
        return (f"vault/{source}/{rel} is a file docsvault did not write, and the source now has a note at that path: "
                f"your file is kept as vault/{source}/{copy}")
    return f"vault/{source}/{rel} was edited since the build wrote it: your version is kept as vault/{source}/{copy}"

def fetch_stage(settings: Settings, source: Source) -> FetchStageResult:
    """Fetch one source into <data>/raw/<source>/; on failure the last good copy stays (FetchError
    propagates).

    Recorded in ``<data>/state/<source>.json``: ``fetch_status`` (ok / failed), ``fetch_error``, ``failed_at``
    (the last failure) and ``failing_since`` (the first failure since the last fetch that succeeded: what the
    upstream sensor requests a retry for once, :func:`pipeline.defs.automation.upstream_change_sensor`; None
    once a fetch succeeds)."""
    from pipeline.ingest.fetch import fetch_source
    from pipeline.ingest.fetch.watch import config_token

    with stage_lock(settings):
        started = time.perf_counter()
        notify("fetch", source.name, 0, 0)            # total unknown: a running line until it ends
        try:
            result = fetch_source(source, settings)
        except FetchError as exc:
            notify("fetch", source.name, 1, 1)
            since = artifacts.load_state(settings, source.name).get("failing_since") \
                or datetime.now(UTC).isoformat()        # to the microsecond: two failures, two retries
            artifacts.update_state(settings, source.name, fetch_status="failed", fetch_error=str(exc),
                                   failed_at=now(), failing_since=since)
            raise
        seconds = round(time.perf_counter() - started, 3)
        notify("fetch", source.name, max(1, len(result.files)), max(1, len(result.files)))
        artifacts.update_state(
            settings, source.name, fetch_status="ok", fetch_error=None, failing_since=None,
            revision=result.revision, strategy=result.strategy, fetched_at=now(), files=len(result.files),
            config=config_token(source),        # an edit of its sources.yaml entry: the sensor requests a run
        )
    return FetchStageResult(
        strategy=result.strategy, revision=result.revision or "", changed=result.changed, files=len(result.files),
        requests=int(result.stats.get("requests", 0)), bytes=int(result.stats.get("bytes", 0)), seconds=seconds,
        stats={k: v for k, v in result.stats.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("requests", "bytes", "seconds")},
        warnings=len(result.warnings), warning_lines=tuple(result.warnings[:20]),
    )


KEPT_SUFFIX = "; its last good version stays in the vault and search until the file is fixed"


def _keep_last_good(settings: Settings, source: Source, files: Sequence[Any], result: Any) -> tuple[Any, list[str]]:
    """A file that normalized before and fails now (broken frontmatter, bad encoding, emptied...) keeps its last
    good note: one typo must not silently delete a page from the vault, the graph and search. Its error line says
    so (``KEPT_SUFFIX``) and the stage's ``kept_last_good`` names it (:func:`kept_line`: the run's warning).
    A file removed from the source is not in ``files`` and goes away as usual, and so does one that is no note by
    design now (``result.left_out``: a page of a built site that became a redirect stub).

    Returns:
        ``(result with the kept notes added, sorted by source_path; kept source paths)``.
    """
    failed = {f.source_path for f in files} - {n.source_path for n in result.notes} - set(result.left_out)
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
    return result._replace(notes=notes, errors=errors), kept


def kept_line(source: str, kept: Sequence[str]) -> str:
    """The warning of a normalize run whose files ``kept`` (source paths, at least one) failed and kept
    their last good note (:func:`_keep_last_good`), naming up to 5 of them: the CLI prints it as a
    ``warning:`` line, the Dagster notes step logs it as a warning."""
    return (f"source '{source}': {len(kept)} file(s) failed to normalize; serving their last good version: "
            + ", ".join(kept[:5]) + (" …" if len(kept) > 5 else ""))


def normalize_stage(settings: Settings, source: Source) -> NormalizeResult:
    """Normalize the fetched files of one source into <data>/notes/<source>.jsonl (per-file errors are reported).

    Skipped (``skipped: True``) when the fetch revision, the fetched file list, the source's configuration and the
    normalizer code are those of the last run and its notes file exists.
    """
    from pipeline.ingest.fetch import load_fetch_result, read_state
    from pipeline.ingest.normalize import normalize_source, write_report

    with stage_lock(settings):
        fetched = load_fetch_result(source, settings)
        if fetched is None:
            raise FetchError(f"source '{source.name}': nothing fetched yet; its fetch must succeed once first")
        state = artifacts.load_state(settings, source.name)
        twins = fetch_skipped_notes(read_state(source, settings))
        key = digest(fetched.revision, [(f.source_path, f.url, f.meta) for f in fetched.files],
                      source_config(source), code_version("normalize"), twins)
        path = artifacts.notes_path(settings, source.name)
        if state.get("normalize_key") == key and path.is_file() and state.get("notes_sha") == file_sha(path) \
                and not forced(source.name):
            return NormalizeResult(notes=int(state.get("notes", 0)), errors=int(state.get("normalize_errors", 0)),
                                   error_lines=tuple(state.get("normalize_error_lines") or [])[:50], skipped=True)
        started = time.perf_counter()
        # marshal: the parse results hold every page's body twice (parsed, links converted); JSON cost ~0.5 s of a
        # 5-page rebuild to read and write, marshal a tenth (the values are JSON-safe: they read back the same)
        cache, stale = versioned_cache(settings, "normalize", source.name, "normalize", binary=True,
                                       fresh=forced(source.name))
        n_files = len(fetched.files)
        if n_files:     # (0, 0) is "total unknown": an empty source's step read "running for 44 s" all build long
            notify("normalize", source.name, 0, n_files)
        counting = CountingCache(cache, lambda n: notify("normalize", source.name, min(n, n_files), n_files))
        result = normalize_source(source, fetched.files, fetched_at=state.get("fetched_at") or now(), cache=counting)
        if n_files:
            notify("normalize", source.name, n_files, n_files)
        result, kept = _keep_last_good(settings, source, fetched.files, result)
        result = result._replace(errors=[*twins, *result.errors])      # notes the fetch skipped: skipped files too
        if not result.notes and fetched.files:
            raise PipelineError(
                f"source '{source.name}': none of its {len(fetched.files)} files could be normalized; "
                f"first error: {result.errors[0] if result.errors else 'unknown'}"
            )
        artifacts.save_notes(settings, source.name, result.notes)
        cache.save(stale)
        report = write_report(settings, source.name, result)   # every skipped file, every dangling link
        artifacts.update_state(settings, source.name, normalize_key=key, notes_sha=file_sha(path),
                               notes=len(result.notes), normalize_errors=len(result.errors),
                               normalize_error_lines=list(result.errors[:50]), dangling=len(result.dangling))
    return NormalizeResult(
        notes=len(result.notes), errors=len(result.errors), error_lines=tuple(result.errors[:50]),
        kept_last_good=tuple(kept), parsed=counting.misses, parse_cached=counting.hits,
        dangling=len(result.dangling),
        errors_file=str(report["errors"]), dangling_file=str(report["dangling"]), skipped=False,
        seconds=round(time.perf_counter() - started, 3))


def fetch_skipped_notes(fetch_state: dict[str, Any] | None) -> list[str]:
    """The lines of the notes a fetch skipped (``fetch_state``: its ``fetch.json``; a local source's name twins,
    see :func:`pipeline.ingest.fetch.local.twin_line`): the normalize stage counts them with the files it
    skipped, the vault stage leaves them out of its attachments not copied."""
    from pipeline.ingest.fetch.local import SKIPPED_NOTES

    lines = (fetch_state or {}).get(SKIPPED_NOTES)
    return [line for line in lines if isinstance(line, str)] if isinstance(lines, list) else []


def note_names_path(settings: Settings, source: str) -> Path:
    """``<data>/notes/<source>.names.json``: the names cache of :func:`source_note_names`."""
    return settings.notes_dir / f"{source}.names.json"


def source_note_names(settings: Settings, source: str) -> list[str]:
    """The names the notes of ``source`` take in the vault: casefolded NFC file names without ``.md``, its index
    note's (``_index``) included; sorted, ``[]`` when the source has no notes file (never normalized).

    Read from its notes file (what its vault stage will write), cached in ``<data>/notes/<source>.names.json``
    under the notes file's (size, mtime_ns).
    """
    import json

    from pipeline.index.vaultlinks import note_names
    from pipeline.ingest.vault import index_rel_path

    path = artifacts.notes_path(settings, source)
    try:
        st = path.stat()
    except OSError:
        return []
    stamp = [st.st_size, st.st_mtime_ns]
    cache = note_names_path(settings, source)
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached.get("stamp") == stamp:
            return list(cached["names"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    rels = [str(r["rel_path"]) for r in artifacts.read_jsonl(path)]
    names = sorted(note_names(rels) | (note_names([index_rel_path(rels)]) if rels else set()))
    artifacts.write_atomic(cache, json.dumps({"stamp": stamp, "names": names}, ensure_ascii=False).encode("utf-8"))
    return names


def vault_names(settings: Settings, source: str) -> set[str]:
    """What a bare link's name may also open in the merged vault, besides a note of ``source`` (casefolded NFC
    names, see :mod:`pipeline.index.vaultlinks`): the notes of every other source that has a notes file (from that
    file, :func:`source_note_names`, not from its vault folder) and the user's files there (``vault_kept`` of its
    last vault write), plus the Markdown files of the vault's other folders (the user's own).

    Taken from the sources' content, never from what another source's vault folder holds now, so a source's notes
    do not depend on the order in which the sources' vault stages run: `docsvault build` normalizes every source
    before it writes any vault folder (the in-process executor runs the steps breadth first), so the first build
    already writes what a rebuild would.
    """
    from pipeline.index.vaultlinks import note_names, other_note_names

    others = sorted(p.name[:-len(".jsonl")] for p in settings.notes_dir.glob("*.jsonl")
                    if p.name[:-len(".jsonl")] != source and not p.name.startswith(".")) \
        if settings.notes_dir.is_dir() else []
    names = other_note_names(settings.vault_dir, {source, *others})
    for name in others:
        names.update(source_note_names(settings, name))
        names.update(note_names(str(rel) for rel in artifacts.load_state(settings, name).get("vault_kept") or []))
    return names


def vault_skipped_path(settings: Settings, source: str) -> Path:
    """``<data>/state/<source>.vault-skipped.txt``: one line per attachment (or symlink) the last vault stage did
    not copy, with the reason (no file when there was none)."""
    return settings.state_dir / f"{source}.vault-skipped.txt"


def vault_stage(settings: Settings, source: Source) -> VaultResult:
    """Write the source's notes and the attachments they use to vault/<source>/ (only changed files; removed pages
    removed), keeping every file the user wrote there (see :func:`pipeline.ingest.vault.write_source`).

    Skipped when the notes file, the attachments to copy (path, size, mtime) and the listing of every file in
    the vault folder (:func:`pipeline.stages.base.vault_listings`: a copied attachment edited or deleted there
    too) are those recorded after the last write. Returns a :class:`VaultResult`: ``notes``, ``written``,
    ``unchanged``, ``removed`` (counts),
    ``removed_files`` (up to 50 rel paths), ``kept`` (files in the folder the build did not write) and
    ``kept_files`` (up to 50), ``conflicts`` (``"<rel> -> <copy>"`` lines: edited generated files moved aside),
    ``attachments`` / ``attachments_written`` / ``attachment_bytes``, ``attachments_skipped`` and
    ``attachment_skip_lines`` (up to 50; all in ``<data>/state/<source>.vault-skipped.txt``), ``unresolved_embeds``
    (attachment links whose file is not in the source), ``qualified_links`` (bare links written in path form
    because their name is also a note elsewhere in the vault, see :func:`vault_names` and
    :mod:`pipeline.index.vaultlinks`), ``warning_lines`` (a local source's notes whose attachment is missing, see
    :func:`pipeline.ingest.attachments.missing_lines`, then its wikilinks, as written, that several of its notes
    could mean, see :func:`pipeline.index.vaultlinks.ambiguous_link_lines`, then its files whose name no link
    can reach, see :func:`pipeline.ingest.normalize.unlinkable_lines`; left out when there is none).

    Long: skip check, write, record the key: one sequence in the order that makes a killed build redo the stage.
    """
    from pipeline.index.vaultlinks import ambiguous_names
    from pipeline.ingest.attachments import missing_lines, plan_attachments, source_roots
    from pipeline.ingest.fetch import read_state
    from pipeline.ingest.vault import write_source

    with stage_lock(settings):
        state = artifacts.load_state(settings, source.name)
        others = vault_names(settings, source.name)
        vault_dir = str(settings.vault_dir / source.name)
        # every file of the folder, not only its notes: an attachment edited or deleted there is the stage's
        # to restore (the notes-only listing, recorded too, is what the chunk, graph, warehouse stages read)
        listing = state.get("vault_file_listing") if not forced(source.name) else None
        # the skip check without reading the notes: same notes file, fetch, code and shared names as the last
        # run, and the attachments it copied unchanged (their list depends on those; the files themselves may move)
        pre = digest(state.get("notes_sha"), state.get("revision"), code_version("vault"),
                     sorted(set(source_note_names(settings, source.name)) & others))
        fast = state.get("vault_fast") or {}
        if listing and fast.get("pre") == pre and fast.get("key") == digest(pre, _stat_rows(fast.get("files") or [])) \
                and listing == vault_listings(settings, source.name)[1]:
            return _vault_skipped(state, fast["plan"], vault_dir)
        given = artifacts.load_notes(settings, source.name)
        shared_names = ambiguous_names(given, others)
        links_memo, links_stale = versioned_cache(settings, "vaultlinks", source.name, "vault", "graph", "normalize",
                                                  fresh=forced(source.name))
        notes, qualified = _qualify_links(source.name, given, others, links_memo)
        plan = plan_attachments(source, notes, settings.raw_dir, memo=links_memo)
        fetch_state = read_state(source, settings) or {}
        notes_skipped = set(fetch_skipped_notes(fetch_state))     # the normalize stage reports those
        # a local folder's files the fetch left out (symlinks, name twins); a site's pages that were not
        # fetched are no attachments (the build names them: pipeline.service.pages_not_fetched_line)
        symlinks = [w for w in fetch_state.get("warnings") or []
                    if isinstance(w, str) and "skipped" in w and w not in notes_skipped] \
            if source.kind == "local" else []
        skip_lines = [*plan.skipped, *symlinks]
        att_rows = _stat_rows([(rel, str(path)) for rel, path in sorted(plan.files.items())])
        key = digest(state.get("notes_sha"), code_version("vault"), att_rows, shared_names)
        # a missing file of the user's own folder is theirs to restore, a link that could mean several of their
        # notes theirs to choose; a git source's, upstream's (not warned)
        missing: list[str] = []
        if source.kind == "local":
            from pipeline.index.graph import LinksCache
            from pipeline.index.vaultlinks import ambiguous_link_lines
            from pipeline.ingest.normalize import unlinkable_lines

            files = {str(f.get("source_path")): Path(str(f.get("path"))) for f in fetch_state.get("files") or []
                     if isinstance(f, dict)}
            folders = [prefix for prefix, _ in source_roots(source, settings.raw_dir) if prefix]
            # the links as written: qualifying one whose name another source also has keeps the same choice
            # the graph's parses of unchanged bodies (read only: the graph stage keeps the file)
            links = LinksCache(links_cache_path(settings))
            missing = missing_lines(source.name, plan.missing, files, folders, plan.moved) + ambiguous_link_lines(
                source.name, given, files, parse=links.parse) + unlinkable_lines(source.name,
                                                              {n.source_path: n.rel_path for n in given})
        facts = {"attachments": len(att_rows), "bytes": plan.bytes, "skipped": len(skip_lines),
                 "skip_lines": skip_lines[:50], "unresolved": len(plan.unresolved), "qualified": qualified,
                 "warning_lines": missing}
        fast = {"pre": pre, "files": [[rel, path] for rel, path, _, _ in att_rows], "key": digest(pre, att_rows),
                "plan": facts}
        if listing and state.get("vault_key") == key and listing == vault_listings(settings, source.name)[1]:
            if state.get("vault_fast") != fast:
                artifacts.update_state(settings, source.name, vault_fast=fast)
            return _vault_skipped(state, facts, vault_dir)
        memo, stale = versioned_cache(settings, "vault", source.name, "vault", fresh=forced(source.name))
        result = write_source(settings.vault_dir, source.name, notes, attachments=plan.files, render_memo=memo,
                              progress=lambda done, total: notify("vault", source.name, done, total))
        memo.save(stale)
        links_memo.save(links_stale)
        conflicts = [f"{rel} -> {copy}" + (FOREIGN if rel in result.foreign else "") for rel, copy in result.conflicts]
        if skip_lines:
            artifacts.write_atomic(vault_skipped_path(settings, source.name),
                                   "".join(line.replace("\n", "\\n") + "\n" for line in skip_lines).encode("utf-8"))
        else:
            vault_skipped_path(settings, source.name).unlink(missing_ok=True)
        notes_listing, files_listing = vault_listings(settings, source.name)
        artifacts.update_state(settings, source.name, vault_key=key, vault_notes=len(notes),
                               vault_listing=notes_listing, vault_file_listing=files_listing,
                               vault_kept=result.kept,
                               vault_conflicts=conflicts, vault_written_at=now(),
                               vault_attachments=result.attachments,
                               vault_attachments_skipped=len(skip_lines), vault_fast=fast)
    for line in conflicts:      # info: the build's own report names each once (its table; Dagster's metadata)
        log.info("source '%s': %s", source.name, conflict_line(source.name, line))
    return VaultResult(
        notes=len(notes), written=len(result.written), unchanged=len(result.unchanged), removed=len(result.removed),
        removed_files=tuple(result.removed[:50]), kept=len(result.kept), kept_files=tuple(result.kept[:50]),
        conflicts=tuple(conflicts), attachments=result.attachments,
        attachments_written=len(result.attachments_written), attachment_bytes=plan.bytes,
        attachments_skipped=len(skip_lines), attachment_skip_lines=tuple(skip_lines[:50]),
        unresolved_embeds=len(plan.unresolved), qualified_links=qualified, vault_dir=vault_dir, skipped=False,
        warning_lines=tuple(missing) or None, left_edited=tuple(result.left_edited[:50]),
    )


def unreported_conflicts(settings: Settings, source: str, killed_since: str) -> list[str]:
    """The ``"<rel> -> <copy>"`` lines of edited notes the vault stage moved aside in a build that was killed
    before it reported them: those its last write recorded, when that write came at or after ``killed_since``
    (the earliest start of the killed builds a build finished, ISO 8601 UTC); [] otherwise. The build that
    finishes a killed one skips the vault stage (done already) and would name none of them (before session 40 a
    ``kill -9`` after the vault step left 80 edits moved to ``(edited)`` copies without a word)."""
    state = artifacts.load_state(settings, source)
    written = state.get("vault_written_at")
    try:
        if not written or datetime.fromisoformat(str(written)) < datetime.fromisoformat(killed_since):
            return []
    except ValueError:
        return []
    return [str(c) for c in state.get("vault_conflicts") or []]


def _qualify_links(source: str, notes: Sequence[Note], others: set[str], memo: Any) -> tuple[list[Note], int]:
    """:func:`pipeline.index.vaultlinks.qualify_ambiguous_links` of ``notes``, skipping each note it left as it was
    the last time it saw the same body and properties at the same path with the same names elsewhere (``others``)
    and the same link table (every note's path, aliases and source path): such a note is passed with an empty body (it
    still resolves links: its path, aliases and source path are what the link table reads) and returned as
    given. Recorded in ``memo`` (the vault stage's ``<cache>/vaultlinks`` memo: ``"q:" + sha1`` -> 0).
    Returns ``(notes, links rewritten)``, those of the call on every note."""
    import hashlib
    from dataclasses import replace

    from pipeline.index.vaultlinks import qualify_ambiguous_links

    scope = digest(source, sorted(others), [(n.vault_path, n.aliases, n.source_path) for n in notes])
    keys = ["q:" + hashlib.sha1(f"{scope}\0{n.vault_path}\0{n.body}\0{_props(n)}".encode("utf-8", "surrogatepass"))
            .hexdigest() for n in notes]
    same = [memo.get(k) is not None for k in keys]
    given = [replace(n, body="") if kept else n for n, kept in zip(notes, same)]
    out, count = qualify_ambiguous_links(source, given, others)
    result = []
    for note, passed, got, kept, k in zip(notes, given, out, same, keys):
        if not kept and got is passed:
            memo[k] = 0
        result.append(note if kept else got)
    return result, count


def _props(note: Note) -> str:
    """A note's frontmatter as one string, for a memo key ("" when it holds no ``[[``: no property link)."""
    import json

    text = json.dumps(note.frontmatter, ensure_ascii=False, sort_keys=True, default=str)
    return text if "[[" in text else ""


def _stat_rows(files: Sequence[Sequence[str]]) -> list[tuple[str, str, int, int]]:
    """``(rel, path)`` pairs -> ``(rel, path, size, mtime_ns)``, ``-1, -1`` for a file that cannot be read."""
    rows = []
    for rel, path in files:
        try:
            st = os.stat(path)
            rows.append((rel, path, st.st_size, st.st_mtime_ns))
        except OSError:
            rows.append((rel, path, -1, -1))
    return rows


def _vault_skipped(state: dict[str, Any], facts: dict[str, Any], vault_dir: str) -> VaultResult:
    """The vault stage's metadata when nothing was written: counts of its last write, ``facts`` of the
    attachment plan and the link qualification (as the stage computed them)."""
    kept = list(state.get("vault_kept") or [])
    return VaultResult(
        notes=int(state.get("vault_notes", 0)), written=0, unchanged=int(state.get("vault_notes", 0)), removed=0,
        removed_files=(), kept=len(kept), kept_files=tuple(kept[:50]), conflicts=(),
        attachments=int(facts["attachments"]), attachments_written=0, attachment_bytes=facts["bytes"],
        attachments_skipped=int(facts["skipped"]), attachment_skip_lines=tuple(facts["skip_lines"]),
        unresolved_embeds=int(facts["unresolved"]), qualified_links=int(facts["qualified"]), vault_dir=vault_dir,
        skipped=True, warning_lines=tuple(str(ln) for ln in facts.get("warning_lines") or ()) or None)


def frontmatter_check(settings: Settings, source: Source) -> FrontmatterCheck:
    """Every generated ``.md`` file under ``vault/<source>/`` (those in its manifest whose bytes are still what the
    build wrote: one the user edited since, or is saving right now, is theirs until the next build moves it aside;
    all of them in a folder without a manifest) has frontmatter that parses and carries ``source_path``.

    Returns a :class:`FrontmatterCheck`: ``notes`` (files checked), ``invalid`` (their count) and ``first_invalid``
    (up to 10 rel paths). The result is kept with the files' (path, size, mtime) and reused while none of them changed (``cached``).
    """
    from pipeline.common.errors import NoteError
    from pipeline.common.frontmatter import parse_note
    from pipeline.ingest.ownership import load_manifest

    root = settings.vault_dir / source.name
    files = sorted(root.rglob("*.md")) if root.is_dir() else []
    owned = load_manifest(root) if root.is_dir() else None
    if owned is not None:           # the user's own files there are not generated notes (pipeline.ingest.ownership)
        files = [p for p in files if p.relative_to(root).as_posix() in owned]
    rows = []
    for path in files:
        try:
            st = path.stat()
        except OSError:
            rows.append((str(path.relative_to(root)), -1, -1))
        else:
            rows.append((str(path.relative_to(root)), st.st_size, st.st_mtime_ns))
    # which files are the build's as written is the manifest's hashes: other hashes check again
    key = digest(rows, sorted((rel, sorted(h)) for rel, h in (owned or {}).items()), code_version("vault"))
    last = artifacts.load_state(settings, source.name).get("frontmatter_check") or {}
    if last.get("key") == key:
        return FrontmatterCheck.from_dict(last.get("result") or {}, cached=True)
    bad: list[str] = []
    checked = 0
    for path in files:
        rel = str(path.relative_to(root))
        try:
            data = path.read_bytes()
        except OSError:
            data = None
        if data is not None and owned is not None \
                and hashlib.sha256(data).hexdigest() not in owned.get(path.relative_to(root).as_posix(), ()):
            # the user changed it since the build wrote it (a save in Obsidian, also one while this build ran, caught
            # half written): it is their edit, which the next build moves aside, not the build's output
            continue
        checked += 1
        try:
            fm = parse_note(data, rel)[0] if data is not None else None
        except NoteError:
            fm = None
        if not isinstance(fm, dict) or not fm.get("source_path"):
            bad.append(rel)
    result = FrontmatterCheck(notes=checked, invalid=len(bad), first_invalid=tuple(bad[:10]))
    recorded = {k: v for k, v in result.as_dict().items() if k != "cached"}
    with stage_lock(settings):
        artifacts.update_state(settings, source.name, frontmatter_check={"key": key, "result": recorded})
    return result
