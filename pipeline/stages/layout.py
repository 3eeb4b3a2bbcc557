"""The data/vault layout around a build: leftovers of killed builds, folders of dropped sources, layout checks."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from pipeline.common import artifacts
from pipeline.config import Settings, resolve_path
from pipeline.models import Source
from pipeline.stages.index import chunk_index_path
from pipeline.stages.ingest import note_names_path, vault_skipped_path

log = logging.getLogger("docsvault")


def cleanup_leftovers(settings: Settings) -> list[str]:
    """Remove temp files a killed build left in the data dir (call only while holding the build lock).

    Returns:
        The removed paths.
    """
    data = settings.data_dir
    if not data.is_dir():
        return []
    patterns = [(data, f"{settings.warehouse_path.name}.tmp-*")]
    for sub in (settings.notes_dir, settings.chunks_dir, settings.state_dir, settings.graph_dir):
        patterns.append((sub, ".*.tmp"))
    cache = settings.cache_dir
    if cache.is_dir():
        for d in cache.iterdir():
            if d.is_dir():
                patterns.append((d, ".shard-tmp-*"))
                patterns.append((d, ".*.tmp"))
    removed = _unlink_matching(patterns)
    if removed:
        log.info("removed %d temp files left by an interrupted build", len(removed))
    return removed


def _unlink_matching(patterns: list[tuple[Path, str]]) -> list[str]:
    """Remove the files matching each ``(folder, glob pattern)`` (a missing folder skipped, a file that cannot be
    removed left); returns the removed paths."""
    removed: list[str] = []
    for folder, pattern in patterns:
        if not folder.is_dir():
            continue
        for p in sorted(folder.glob(pattern)):
            try:
                p.unlink()
                removed.append(str(p))
            except OSError:
                pass
    return removed


def remove_warehouse_temps(settings: Settings) -> list[str]:
    """Remove every ``warehouse.duckdb.tmp-*`` in the data dir, whatever process or host left it (call only while
    no other process can publish this warehouse: holding the build lock, or the distributed warehouse step's
    ``locks/.warehouse.lock``). A publish removes only the temps of pids that are gone on its own host; on a
    shared volume, the temp of a writer killed on another host (a worker's pod or container, whose pids are
    small numbers alive on every host) stayed for good, as big as the warehouse.

    Returns:
        The removed paths.
    """
    return _unlink_matching([(settings.data_dir, f"{settings.warehouse_path.name}.tmp-*")])


def _generated_vault_folder(folder: Path) -> bool:
    """True when ``folder`` is a real directory (not a symlink) holding docsvault's index note for a source of that
    name (``_index.md`` or ``_index (N).md`` whose frontmatter has ``docsvault: index`` and ``source: <folder>``), or
    a manifest (``.docsvault/manifest.json``) that names the source: the folder of a source whose last build had no
    note (no index note then), or one whose index note the user deleted (before session 43 such a folder stayed,
    with every generated note in it, when the source left sources.yaml)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    if _source_manifest(folder):
        return True
    return bool(_index_notes(folder))


def _index_notes(folder: Path) -> list[Path]:
    """The index notes of the source of ``folder``'s name in it: files named as a build names them (``_index.md``,
    ``_index (2).md``…) whose frontmatter has ``docsvault: index`` and ``source: <folder>``. A copy of your edit,
    ``_index (edited).md``, carries the same frontmatter but is yours: it made a dropped source's folder look
    generated again after its removal, and every later build removed the folder once more without its manifest."""
    from pipeline.common.errors import NoteError
    from pipeline.common.frontmatter import INDEX_KEY, INDEX_VALUE, parse_note
    from pipeline.ingest.ownership import INDEX_NOTE_NAME

    found: list[Path] = []
    for path in sorted(folder.glob("_index*.md")):
        if not INDEX_NOTE_NAME.match(path.name) or path.is_symlink() or not path.is_file():
            continue
        try:
            fm, _ = parse_note(path.read_bytes(), str(path))
        except (OSError, NoteError):
            continue
        if isinstance(fm, dict) and fm.get(INDEX_KEY) == INDEX_VALUE and fm.get("source") == folder.name:
            found.append(path)
    return found


def _source_manifest(folder: Path) -> bool:
    """True when ``folder`` has a manifest (a real file in a real ``.docsvault`` folder) written for the source of
    that name (what every vault stage of the source leaves, also of one with no note)."""
    import json

    from pipeline.ingest.ownership import MANIFEST_DIR, manifest_path

    path = manifest_path(folder)
    if (folder / MANIFEST_DIR).is_symlink() or path.is_symlink() or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("source") == folder.name and isinstance(data.get("files"), dict)


def _remove_generated(folder: Path) -> list[str]:
    """Remove what the build wrote in a dropped source's vault folder (files as it wrote them, per the folder's
    manifest) and the temp files of killed writes (:func:`pipeline.ingest.vault.write_source`), the bookkeeping
    folder ``.docsvault/`` (the manifest and its temp files; the folder itself when that leaves it empty: a file
    someone else put there stays), the folders those removals leave empty (``write_source``), and the source's
    folder when nothing else is in it; returns the rel paths of what is kept (the user's own files, generated files
    edited since, any other file or symlink left: a dot file, a symlinked folder; an empty folder of the user's as
    ``name/``: before session 43 every empty folder went).
    Nothing is removed recursively: before session 43 a folder whose only files of the user's were dot files
    (``.private.md``) or symlinked folders went with them (``shutil.rmtree``)."""
    from pipeline.common.errors import NoteError
    from pipeline.ingest.vault import write_source

    try:
        result = write_source(folder.parent, folder.name, [], index=False)
    except (NoteError, OSError) as exc:         # not a name docsvault could have written: leave it all
        log.warning("vault/%s/ kept: %s", folder.name, exc)
        return [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    # an index note kept (you edited it since the last build) goes aside as a build moves your edits, else the
    # folder still looks generated and the next build removes it again, without the manifest (_index_notes); before
    # the manifest goes: a removal killed in between is done again with it (it lists no file by then)
    from pipeline.ingest.ownership import conflict_name

    taken = {p.name.casefold() for p in folder.iterdir()}
    moved: set[str] = set()
    for path in _index_notes(folder):
        copy = conflict_name(path.name, taken)
        taken.add(copy.casefold())
        try:
            os.replace(path, folder / copy)
            moved.add(path.name)
        except OSError as exc:
            log.warning("vault/%s/%s kept under its name: %s", folder.name, path.name, exc)
    _remove_bookkeeping(folder)
    left: set[str] = set(result.kept) - moved
    for dirpath, dirnames, filenames in os.walk(folder):     # symlinked folders are not entered
        here = Path(dirpath)
        left.update((here / name).relative_to(folder).as_posix() for name in filenames)
        left.update((here / d).relative_to(folder).as_posix() for d in dirnames if (here / d).is_symlink())
        if here != folder and not dirnames and not filenames:      # a folder you made (write_source removed
            left.add(here.relative_to(folder).as_posix() + "/")     # those its removals emptied)
    try:
        folder.rmdir()                  # only when nothing is left in it
    except OSError:
        pass
    return sorted(left)


def _remove_bookkeeping(folder: Path) -> None:
    """Remove ``<folder>/.docsvault/manifest.json`` and the temp files its atomic writes leave
    (``.manifest.json.*.tmp``), then the ``.docsvault`` folder if nothing else is in it."""
    from pipeline.ingest.ownership import MANIFEST_DIR, MANIFEST_NAME

    book = folder / MANIFEST_DIR
    if book.is_symlink() or not book.is_dir():
        return
    for path in [book / MANIFEST_NAME, *book.glob(f".{MANIFEST_NAME}.*.tmp")]:
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
    try:
        book.rmdir()                # only when empty
    except OSError:
        pass


#: the build option that removes every built source when sources.yaml lists none (refused without it)
REMOVE_ALL_OPTION = "--remove-all-sources"


def built_source_names(settings: Settings, *, vault: bool = True) -> list[str]:
    """Sources earlier builds wrote, sorted: those with a state file ``<data>/state/<name>.json`` and (``vault``)
    those with a vault folder docsvault generated."""
    state_dir = settings.state_dir
    names = {p.name[:-5] for p in state_dir.glob("*.json") if not p.name.startswith(".")} \
        if state_dir.is_dir() else set()
    if vault and settings.vault_dir.is_dir():
        names |= {f.name for f in settings.vault_dir.iterdir()
                  if not f.name.startswith(".") and _generated_vault_folder(f)}
    return sorted(names)


def refuse_removing_every_source(settings: Settings, sources: Sequence[Source], *, vault: bool = True) -> None:
    """Refuse a build that would remove every built source because sources.yaml lists none (``sources: []``: almost
    always a truncated file or a bad merge). Nothing is removed.

    Raises:
        SourceConfigError: ``<file>: lists no sources, but N source(s) are built (a, b, …): this build would remove
            them all …`` naming the option that does remove them all (:data:`REMOVE_ALL_OPTION`).
    """
    from pipeline.common.errors import SourceConfigError

    built = [] if sources else built_source_names(settings, vault=vault)
    if built:
        raise SourceConfigError(
            f"{settings.sources_file}: {no_sources_problem(built)}: this build would remove them all (their vault "
            f"folders and data), so it stopped before removing anything; restore the file's sources, or run "
            f"`docsvault build {REMOVE_ALL_OPTION}` to remove them all")


def refuse_sources_built_elsewhere(settings: Settings, names: Sequence[str]) -> None:
    """Refuse to publish a warehouse over sources whose vault folder is here but that were never built in this
    data dir (no ``<data>/state/<name>.json``): a vault copied from the host that built it (an MCP reader's copy,
    docs/deploy.md), or a data dir removed since. Their chunks are not here, so the warehouse would drop them from
    search; on a reader, one ``save_note`` or ``refresh`` left the team's search with the reader's local notes only.

    Raises:
        SourceConfigError: one line naming the sources (the first five), the data dir and what to do; the
            published warehouse is left as it is.
    """
    from pipeline.common.errors import SourceConfigError

    elsewhere = [n for n in names if not artifacts.state_path(settings, n).is_file()]
    if elsewhere:
        raise SourceConfigError(
            f"{len(elsewhere)} source(s) have a vault folder but were never built in data dir "
            f"{settings.data_dir} ({_first_five(elsewhere)}): publishing would drop them from search, so "
            f"{settings.warehouse_path.name} is left as it is; build them here (`docsvault build --source "
            f"{elsewhere[0]}`), or, on a host serving a copied warehouse, give it a sources.yaml without `local` "
            f"sources (docs/deploy.md, \"Read-only copies per reader host\")")


def no_sources_problem(built: Sequence[str]) -> str:
    """``lists no sources, but 3 source(s) are built (a, b, c)``: the first five names, then ``and N more``."""
    return f"lists no sources, but {len(built)} source(s) are built ({_first_five(built)})"


def _first_five(names: Sequence[str]) -> str:
    """``a, b, c, d, e and 2 more``: the first five, then how many more."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def remove_dropped_sources(settings: Settings, sources: Sequence[Source], *, remove_all: bool = False) -> list[str]:
    """Remove what earlier builds wrote for sources that are no longer in sources.yaml (call only while holding
    the build lock): the vault folder ``vault/<name>/`` — only one docsvault generated (its index note carries
    ``docsvault: index``; any other folder is left alone), and in it only the files the build wrote and nobody
    edited since (the others are kept and named in the line) — and the per-source files under the data dir (state,
    skip report, notes, chunks, dangling links, fetched copy). The caches (embeddings, parse, BM25 tokens) stay:
    they are keyed by content and help if the source comes back. Each removed source is recorded with the time
    (:func:`pipeline.common.artifacts.record_removed`): back in sources.yaml unchanged, it counts as a new
    version for the upstream sensor (:func:`pipeline.ingest.fetch.watch.check_upstream`).

    Args:
        remove_all: allow ``sources`` to be empty while sources are built (``build --remove-all-sources``).

    Returns:
        One line per removed vault folder: ``removed vault/<name>/: source '<name>' is no longer in sources.yaml``.

    Raises:
        SourceConfigError: ``sources`` is empty, sources are built and ``remove_all`` is False (nothing removed;
            see :func:`refuse_removing_every_source`).
    """
    import shutil
    from datetime import UTC, datetime

    if not remove_all:
        refuse_removing_every_source(settings, sources)
    keep = {s.name for s in sources}
    lines: list[str] = []
    gone: set[str] = set()
    vault = settings.vault_dir
    if vault.is_dir():
        for folder in sorted(vault.iterdir()):
            if folder.name.startswith(".") or folder.name in keep or not _generated_vault_folder(folder):
                continue
            kept = _remove_generated(folder)
            gone.add(folder.name)
            line = f"removed vault/{folder.name}/: source '{folder.name}' is no longer in sources.yaml"
            if kept:
                line += (f" (kept {len(kept)} file(s) docsvault did not write, or that were edited since: "
                         f"{_first_five(kept)})")
            lines.append(line)
            log.info("%s", lines[-1])       # the CLI prints the returned lines; info: not twice in a merged log
    state_dir = settings.state_dir
    dropped = [name for name in built_source_names(settings, vault=False) if name not in keep]
    artifacts.record_removed(settings, sorted(gone | set(dropped)), datetime.now(UTC).isoformat())
    for name in dropped:
        for path in (state_dir / f"{name}.errors.txt", vault_skipped_path(settings, name),
                     artifacts.notes_path(settings, name), note_names_path(settings, name),
                     artifacts.chunks_path(settings, name), chunk_index_path(settings, name),
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
    its own output back as notes (vault/x/x/x/...); and one folder as both the vault and the data dir: the vault's
    source folders would mix with the data's (a source named ``notes`` or ``cache`` would share its folder with
    the data's ``notes/`` or ``cache/``, and Obsidian would show the data's clones as notes).

    Raises:
        SourceConfigError: naming the source, its folder and the overlapping output folder (or the one folder).
    """
    from pipeline.common.errors import SourceConfigError

    outputs = {"vault": resolve_path(settings.vault_dir), "data": resolve_path(settings.data_dir)}
    if outputs["vault"] == outputs["data"]:
        raise SourceConfigError(
            f"the vault dir and the data dir are one folder, {outputs['vault']}: the vault's source folders would "
            "mix with the data's (notes/, cache/, raw/ …); give them separate folders (--vault / DOCSVAULT_VAULT, "
            "--data / DOCSVAULT_DATA), e.g. ./vault and ./data"
        )
    for source in sources:
        for root in source.path:
            root = resolve_path(root)
            for what, out in outputs.items():
                if out in root.parents:      # the source's folder inside the output (your notes in vault/Inbox)
                    raise SourceConfigError(
                        f"{settings.sources_file}: source '{source.name}': its folder {root} is inside the {what} "
                        f"dir {out}, which the build writes; move the folder out of it (notes of yours to search: "
                        "an Obsidian vault of their own, added as a local source)"
                    )
                if out == root or root in out.parents:
                    raise SourceConfigError(
                        f"{settings.sources_file}: source '{source.name}': its folder {root} overlaps the {what} "
                        f"dir {out}; put the {what} dir (--{what} / DOCSVAULT_{what.upper()}) outside the source"
                    )
