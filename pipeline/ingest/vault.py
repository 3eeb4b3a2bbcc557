"""Vault stage: write a source's Notes to ``vault/<source>/`` and read the vault back.

Writes are atomic (temp file in the same folder + ``os.replace``, the umask's mode) and happen only when the bytes
differ, so unchanged notes keep their mtime (Obsidian and file watchers see no churn). Notes that left the source are
removed, together with folders they leave empty. Each source owns exactly the files it wrote in its folder
(:mod:`pipeline.ingest.ownership`): a file the user put there is kept, a generated file the user edited is moved to
``<name> (edited).md`` before it is replaced; nothing outside ``vault/<source>/`` is touched.

Each source folder also gets one index note, ``_index.md`` (a map of content: its top-level sections and the notes
in them; see :func:`index_note`). Its frontmatter carries ``docsvault: index`` (:data:`INDEX_KEY` /
:data:`INDEX_VALUE`); :func:`read_notes` skips it, so it is for people browsing the vault in Obsidian and never
reaches the graph, the chunks, search or the eval.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, NamedTuple

from pipeline.common.artifacts import write_atomic_with
from pipeline.common.errors import NoteError
from pipeline.common.frontmatter import (
    INDEX_KEY,
    INDEX_VALUE,
    decode_bytes,
    parse_note,
    render_note,
    split_frontmatter,
)
from pipeline.ingest.ownership import load_manifest
from pipeline.models import Note


class VaultResult(NamedTuple):
    """rel_paths (posix, inside ``vault/<source>/``) of notes written, left as they were, and removed; each sorted.
    ``index`` is the rel_path of the source's index note (not counted in the lists), None when not written.

    ``kept``: files in the folder the build did not write (or wrote and someone edited since, whose page is gone),
    and the ``(edited)`` copies it made of your edits, left as they are (sorted); ``conflicts``: ``(rel_path, copy)`` for each generated file edited since the build
    wrote it, whose edited version was moved to ``copy`` before the new version was written;
    ``attachments_written`` / ``attachments``: attachment files copied this time / in the folder after the write;
    ``foreign``: the rel_paths of ``conflicts`` whose file the build had never written (your own file at the path
    where the source now has a note, moved aside all the same). Two kinds of such conflicts are marked by a
    trailing ``/`` (:func:`_move_in_the_way`): ``(rel, "<copy>/")``, your folder at a note's path, and
    ``("<folder>/", copy)``, your file at the path of a folder the source's notes go in. ``left_edited``: the
    generated files whose page left the source this time but that were edited since the build wrote them, kept
    where they are as your files (sorted; before session 49 no line said so: they were only counted among
    ``kept``)."""

    written: list[str]
    unchanged: list[str]
    removed: list[str]
    index: str | None = None
    kept: list[str] = []
    conflicts: list[tuple[str, str]] = []
    attachments_written: list[str] = []
    attachments: int = 0
    foreign: list[str] = []
    left_edited: Sequence[str] = ()


INDEX_NAME = "_index.md"


def _link(note: Note) -> str:
    target = f"{note.source}/{note.rel_path[:-3]}"
    alias = re.sub(r"[\[\]|#^\n]", " ", note.title)
    alias = " ".join(alias.split())
    return f"[[{target}|{alias}]]" if alias else f"[[{target}]]"


def index_note(source: str, notes: Sequence[Note], rel_path: str = INDEX_NAME) -> Note:
    """The source's map of content: its top-level sections (first folders below the folder all notes share) as
    ``## headings``, each with links to the section's landing note (``index``/``README``/same-name note) and the
    notes directly in it, then one line per sub-folder linking its landing note; notes at the top are listed first.

    Returns:
        A Note with frontmatter ``{title: "<source> index", docsvault: index, source: <source>, source_path:
        <rel_path>}`` and a body of
        ``[[<source>/<path>|Title]]`` links, deterministic (sorted by path).
    """
    by_rel = sorted(notes, key=lambda n: n.rel_path)
    folders = [PurePosixPath(n.rel_path).parent.parts for n in by_rel]
    common: tuple[str, ...] = ()
    if folders:
        common = folders[0]
        for parts in folders[1:]:
            k = 0
            while k < min(len(common), len(parts)) and common[k] == parts[k]:
                k += 1
            common = common[:k]
    top: list[Note] = []
    sections: dict[str, list[Note]] = {}
    for n in by_rel:
        parts = PurePosixPath(n.rel_path).parts[len(common):]
        if len(parts) == 1:
            top.append(n)
        else:
            sections.setdefault(parts[0], []).append(n)
    lines = [f"# {source}", "", f"Map of content of the source `{source}`: {len(notes)} notes."]
    if top:
        lines += [""] + [f"- {_link(n)}" for n in top]
    for name, members in sections.items():
        depth = len(common) + 1
        landing = {"index", "readme", "_index", name.casefold()}
        direct = [n for n in members if len(PurePosixPath(n.rel_path).parts) == depth + 1]
        lead = [n for n in direct if PurePosixPath(n.rel_path).stem.casefold() in landing]
        subs: dict[str, list[Note]] = {}
        for n in members:
            parts = PurePosixPath(n.rel_path).parts
            if len(parts) > depth + 1:
                subs.setdefault(parts[depth], []).append(n)
        lines += ["", f"## {' '.join(name.split())}", ""]
        lines += [f"- {_link(n)}" for n in lead + [n for n in direct if n not in lead]]
        for sub, sub_notes in subs.items():
            sub_landing = [n for n in sub_notes if len(PurePosixPath(n.rel_path).parts) == depth + 2
                           and PurePosixPath(n.rel_path).stem.casefold() in {"index", "readme", "_index",
                                                                              sub.casefold()}]
            label = f"{sub}/ ({len(sub_notes)} notes)"
            lines.append(f"- {_link(sub_landing[0])} — {label}" if sub_landing else f"- {label}")
    fm = {"title": f"{source} index", INDEX_KEY: INDEX_VALUE, "source": source, "source_path": rel_path}
    return Note(source=source, source_path=rel_path, rel_path=rel_path, title=fm["title"], frontmatter=fm,
                body="\n".join(lines) + "\n")


def index_rel_path(rel_paths: Iterable[str]) -> str:
    """Where :func:`write_source` puts the index note among these note rel_paths: ``_index.md``, or ``_index (2).md``,
    ``_index (3).md``… when a note already has that path (compared casefolded)."""
    taken = {rel.casefold() for rel in rel_paths}
    rel, n = INDEX_NAME, 2
    while rel.casefold() in taken:
        rel, n = f"{INDEX_NAME[:-3]} ({n}).md", n + 1
    return rel


def _safe_target(root: Path, rel_path: str, source: str, resolved: dict[Path, Path] | None = None) -> Path:
    """``root / rel_path`` after checking it stays inside ``root`` (no absolute paths, ``..``, or symlink escapes).

    ``resolved``: a memo of resolved folders (path -> ``path.resolve()``) shared by the calls of one write: the
    target resolves as its resolved folder joined with its name (one ``realpath`` per folder instead of one per
    note); a symlink at the name itself is the user's file, which :func:`write_source` moves aside."""
    pure = PurePosixPath(rel_path)
    if (not rel_path or pure.is_absolute() or "\\" in rel_path or ".." in pure.parts or "\x00" in rel_path
            or not rel_path.endswith(".md") or (pure.parts and pure.parts[0].endswith(":"))):
        raise NoteError(f"source '{source}': note path {rel_path!r} would leave vault/{source}/; "
                        "rel_paths must be relative .md paths without '..'")
    target = root.joinpath(*pure.parts)
    memo: dict[Path, Path] = {} if resolved is None else resolved

    def real(path: Path) -> Path:
        if path not in memo:
            memo[path] = path.resolve()
        return memo[path]

    try:
        # the folder only: a symlink at the path itself is the user's, moved aside, never written through
        (real(target.parent) / target.name).relative_to(real(root))
    except ValueError:
        raise NoteError(f"source '{source}': note path {rel_path!r} resolves outside vault/{source}/ "
                        "(a symlink?); remove the link") from None
    return target


def _ordered(fm: dict) -> dict:
    """The frontmatter with docsvault's keys first in their fixed order (``pipeline.ingest.normalize.FIRST_KEYS``), then the
    others as given (JSON Lines between stages may have sorted them)."""
    from pipeline.ingest.normalize import FIRST_KEYS

    return {**{k: fm[k] for k in FIRST_KEYS if k in fm}, **{k: v for k, v in fm.items() if k not in FIRST_KEYS}}


VOLATILE_KEYS = ("fetched_at",)
_VOLATILE_PREFIXES = tuple(f"{k}:".encode() for k in VOLATILE_KEYS)


def _without_volatile(data: bytes) -> bytes | None:
    """The bytes with the top-level ``fetched_at:`` lines of the leading frontmatter block dropped (None: no block)."""
    if not data.startswith(b"---\n"):
        return None
    end = data.find(b"\n---\n", 3)
    if end < 0:
        return None
    lines = data[4:end + 1].split(b"\n")
    kept = [ln for ln in lines if not ln.startswith(_VOLATILE_PREFIXES)]
    return data[:4] + b"\n".join(kept) + data[end + 1:]


def _same_content(old: bytes, new: bytes, where: str) -> bool:
    """True when two renderings differ only in volatile keys (``fetched_at``): the note is not rewritten then.

    Fast path: equal bytes once the volatile lines of both frontmatter blocks are dropped (no YAML parsing: a
    rebuild of a source whose fetch time moved compares all its notes); otherwise both are parsed and compared.
    """
    a, b = _without_volatile(old), _without_volatile(new)
    if a is not None and a == b:
        return True
    try:
        old_fm, old_body = split_frontmatter(decode_bytes(old, where), where)
        new_fm, new_body = split_frontmatter(decode_bytes(new, where), where)
    except NoteError:
        return False
    strip = lambda fm: {k: v for k, v in fm.items() if k not in VOLATILE_KEYS}
    return old_body == new_body and strip(old_fm) == strip(new_fm)


def _write_bytes(data: bytes, out: BinaryIO) -> None:
    out.write(data)


def _copy_from(src: Path, out: BinaryIO) -> None:
    """Copy a file's bytes into ``out`` (an attachment's temp file in the vault)."""
    import shutil

    with open(src, "rb") as inp:
        shutil.copyfileobj(inp, out, 1 << 20)


def _unwritable(source: str, rel: str, exc: OSError) -> NoteError:
    """The error of a file of ``vault/<source>/`` that could not be written (or moved aside), naming it and what
    to do."""
    import errno

    where = f"vault/{source}/{rel}"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        todo = (f"make {where.rsplit('/', 1)[0]}/ writable for docsvault (its owner and permissions, an immutable "
                "flag, a read-only mount) and build again")
    elif exc.errno == errno.ENOSPC:
        todo = "free space on its disk and build again"
    else:
        todo = "fix that and build again"
    return NoteError(f"source '{source}': cannot write {where}: {exc.strerror or exc}; {todo}")


def _same_file(a: Path, b: Path) -> bool:
    """True when both paths reach one file (``Foo.md`` and ``foo.md`` on a file system that ignores case)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _move_aside(root: Path, rel: str, taken: set[str]) -> str:
    """Move ``root/rel`` (a file, symlink or folder) to its conflict name (:func:`pipeline.ingest.ownership.
    conflict_name`), one neither in ``taken`` (updated) nor on disk now: a file the user made there while the build
    ran is never replaced (``os.replace`` replaces one silently). Returns the copy's rel_path."""
    from pipeline.ingest.ownership import conflict_name

    path = root.joinpath(*PurePosixPath(rel).parts)
    while True:
        copy = conflict_name(rel, taken)
        taken.add(copy.casefold())
        dest = path.with_name(PurePosixPath(copy).name)
        if not os.path.lexists(dest):
            os.replace(path, dest)
            return copy


def _move_in_the_way(root: Path, rel: str, taken: set[str], owned: Mapping[str, set[str]]
                     ) -> list[tuple[str, str]]:
    """Before ``root/rel`` is written: a file of the user's where one of its folders goes (``Projects`` where
    ``Projects/Alpha.md`` goes) and a folder of the user's at its path (``Ducks.md/``) are moved aside to their
    conflict names (:func:`pipeline.ingest.ownership.conflict_name`; ``taken`` updated), as a file of the user's at
    a note's path is; a file the build wrote there, unchanged (``owned``), is removed. Both made the source's
    vault step fail on every build (``[Errno 17] File exists``, ``[Errno 21] Is a directory``).

    Returns:
        ``("<folder>/", copy)`` for a file moved out of a folder's way, ``(rel, "<copy>/")`` for a folder moved
        out of a note's (the trailing ``/`` marks which; see :class:`VaultResult`).
    """
    from pipeline.ingest.ownership import sha256_file

    moved: list[tuple[str, str]] = []
    parts = PurePosixPath(rel).parts
    for depth in range(1, len(parts) + 1):
        sub, path = "/".join(parts[:depth]), root.joinpath(*parts[:depth])
        last = depth == len(parts)
        if path.is_symlink() or not (path.is_dir() if last else path.exists() and not path.is_dir()):
            continue
        if not last and sha256_file(path) in owned.get(sub, ()):
            path.unlink()
            continue
        copy = _move_aside(root, sub, taken)
        moved.append((sub, copy + "/") if last else (sub + "/", copy))
    return moved


def write_source(vault_dir: Path, source: str, notes: Sequence[Note], *, index: bool = True,
                 attachments: Mapping[str, Path] | None = None, render_memo: Any = None,
                 progress: Callable[[int, int], None] | None = None) -> VaultResult:
    """Make ``vault_dir/<source>/`` hold these notes (and attachments), never losing a file the user wrote there.

    What the build wrote is recorded in the folder's manifest (:mod:`pipeline.ingest.ownership`). A file is overwritten or
    removed only when the manifest says the build wrote exactly these bytes; a generated file edited since is
    first moved to ``<name> (edited).<ext>`` next to it (``VaultResult.conflicts``), a file the build did not write
    is left alone (``VaultResult.kept``).

    Args:
        vault_dir: the vault root.
        source: the source name (its folder).
        notes: the source's notes; each is written to ``<source>/<rel_path>`` as ``render_note(frontmatter, body)``.
        index: also write the index note (:func:`index_note`) as ``_index.md`` (``_index (2).md``… when a note
            already has that path); False removes it with the other files that are not notes.
        attachments: rel_path (inside the folder, not ``.md``) -> file on disk to copy there (images, PDFs,
            canvases the notes use; see :mod:`pipeline.ingest.attachments`); copied only when the bytes differ.
        render_memo: optional memo of frontmatter YAML dumps (``render_note``'s ``memo``).
        progress: called with (notes gone through, notes to write: the index note counts) before each and
            once at the end (not called when there is no note).

    The folder and its manifest exist after the call, also when there is no note (an empty source): its manifest
    then lists no file, and a folder left with no file at all is still the source's (:mod:`pipeline.stages.layout`
    removes it when the source leaves sources.yaml).

    Returns:
        VaultResult of rel_paths: written (new or different bytes), unchanged (same bytes, or differing only in
        ``fetched_at``: file not touched), removed (files the build wrote, unchanged since, that are no longer
        notes or attachments; folders left empty are removed too), kept, conflicts, attachments.

    Raises:
        NoteError: a note belongs to another source, two notes share a rel_path, or a rel_path would resolve outside
            ``vault_dir/<source>/`` (checked for every note before anything is written).

    Long: the ownership protocol is one transaction over shared sets (manifest read, conflict moves, writes,
    removals, manifest write), ordered by what the manifest must say if the process dies between two steps.
    """
    import hashlib

    from pipeline.ingest.ownership import (
        WRITE_TEMP,
        audit,
        legacy_owned,
        load_conflicts,
        load_manifest,
        load_yours,
        save_manifest,
        sha256_file,
        walk_files,
    )
    from pipeline.ingest.sources import valid_name

    if not valid_name(source):
        raise NoteError(f"source name {source!r} cannot be a vault folder (see pipeline.ingest.sources.valid_name)")
    vault_dir = Path(vault_dir)
    root = vault_dir / source
    targets: dict[str, tuple[Path, bytes]] = {}
    resolved: dict[Path, Path] = {}             # folder -> its resolved path (_safe_target)
    for note in notes:
        if note.source != source:
            raise NoteError(f"source '{source}': note {note.source_path!r} belongs to source '{note.source}'")
        if note.rel_path in targets:
            raise NoteError(f"source '{source}': two notes share the vault path {note.rel_path!r}")
        targets[note.rel_path] = (_safe_target(root, note.rel_path, source, resolved),
                                  render_note(_ordered(note.frontmatter), note.body, render_memo).encode("utf-8"))
    index_rel = None
    if index and notes:
        index_rel = index_rel_path(targets)
        idx = index_note(source, notes, index_rel)
        targets[index_rel] = (_safe_target(root, index_rel, source, resolved), render_note(idx.frontmatter, idx.body).encode())
    copies: dict[str, tuple[Path, Path, str]] = {}          # rel -> (vault path, source file, sha256)
    for rel, src in sorted((attachments or {}).items()):
        if rel in targets or rel.endswith(".md"):
            continue
        path = _safe_target(root, rel + ".md", source, resolved).with_name(PurePosixPath(rel).name)
        digest = sha256_file(Path(src))
        if digest is not None:
            copies[rel] = (path, Path(src), digest)
    new_hash = {rel: hashlib.sha256(data).hexdigest() for rel, (_, data) in targets.items()}
    new_hash.update({rel: digest for rel, (_, _, digest) in copies.items()})

    manifest = load_manifest(root)
    owned = manifest if manifest is not None else legacy_owned(
        root, source, {unicodedata.normalize("NFC", n.source_path): n.rel_path for n in notes},
        {n.rel_path: n.frontmatter.keys() for n in notes}, {rel: data for rel, (_, data) in targets.items()})
    leftovers: list[Path] = []              # temp files of writes a killed build left (hidden in Obsidian)
    before = walk_files(root, leftovers)
    # before anything changes: the manifest also accepts the bytes about to be written (a killed build still
    # knows them next time)
    pending = {rel: set(hashes) for rel, hashes in owned.items()}
    for rel, digest in new_hash.items():
        pending.setdefault(rel, set()).add(digest)
    # always, with no note too: the folder and its manifest record that the source's vault was written (an empty
    # source's chunk stage reads that folder; once the source is dropped, its manifest marks the folder as docsvault's)
    try:
        save_manifest(root, source, pending)
    except OSError as exc:
        raise _unwritable(source, ".docsvault/manifest.json", exc) from None
    taken = {rel.casefold() for rel in before} | {rel.casefold() for rel in new_hash}
    final: dict[str, set[str]] = {}
    written: list[str] = []
    unchanged: list[str] = []
    conflicts: list[tuple[str, str]] = []
    foreign: list[str] = []
    att_written: list[str] = []

    def put(rel: str, path: Path, fill: Callable[[BinaryIO], object]) -> None:
        """Write ``rel``: a file or folder of the user's in its way moved aside first (:func:`_move_in_the_way`),
        the file at its path judged right before the replace (:func:`make_room`). An OSError (a folder the build
        may not write) is one line naming the file and what to do, not the hidden temp file's name
        (``.B.md.et9lsevi.tmp``)."""
        try:
            for moved in _move_in_the_way(root, rel, taken, owned):
                conflicts.append(moved)
                foreign.append(moved[0])
            write_atomic_with(path, fill, before_replace=lambda: make_room(rel, path))
        except OSError as exc:
            raise _unwritable(source, rel, exc) from None

    folded: dict[str, list[str]] = {}
    for rel in owned:
        folded.setdefault(rel.casefold(), []).append(rel)

    def case_twin(rel: str, path: Path) -> str | None:
        """The build's file under another case of ``rel``'s name that is the very file at ``path`` (a file system
        that ignores case: macOS, Windows), None when there is none: a page renamed in case only in the source
        (``Foo.md`` -> ``foo.md``) is still the build's file, not one of the user's to move aside."""
        for other in folded.get(rel.casefold(), ()):
            if other != rel and (at := before.get(other)) is not None and _same_file(at, path):
                return other
        return None

    def make_room(rel: str, path: Path) -> None:
        """Right before the new version replaces ``path`` (its bytes are on disk by then: an edit saved while
        they were written is seen): moves an edited or foreign file there away."""
        if not os.path.lexists(path):
            return
        # the build never writes symlinks: one here is the user's, moved aside as their file is (its target is
        # not touched); so is a file the build cannot read (sha256_file: None), never replaced unseen
        if not path.is_symlink() and (current := sha256_file(path)) is not None and (
                current in owned.get(rel, ()) or current in owned.get(case_twin(rel, path) or rel, ())):
            return
        copy = _move_aside(root, rel, taken)
        conflicts.append((rel, copy))
        if rel not in owned:
            foreign.append(rel)

    emptied: set[Path] = set()              # folders a move or removal may leave empty, up to (not incl.) root

    def adopt(rel: str, path: Path) -> None:
        """The file of ``rel`` listed under another Unicode form of its name (an NFD name a sync from a macOS vault
        left, on a file system that tells the forms apart) is renamed to the note's (NFC) path, which then holds
        it: writing beside it left two notes of one name in the folder, both read as the source's, the other one
        stale for good."""
        on_disk = before.get(rel)
        if on_disk is None or on_disk == path or os.path.lexists(path) or on_disk.is_symlink():
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(on_disk, path)
        except OSError as exc:          # one line naming the file, as a write's (:func:`put`)
            raise _unwritable(source, rel, exc) from None
        emptied.update(on_disk.parents[:len(PurePosixPath(rel).parts) - 1])

    for done, (rel, (path, data)) in enumerate(sorted(targets.items())):
        if progress is not None:
            progress(done, len(targets))
        adopt(rel, path)
        try:
            old = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        except OSError:
            old = None
        if old is not None and (old == data or _same_content(old, data, str(path))):
            unchanged.append(rel)
            final[rel] = {hashlib.sha256(old).hexdigest()}
            continue
        put(rel, path, partial(_write_bytes, data))
        written.append(rel)
        final[rel] = {new_hash[rel]}
    if progress is not None and targets:
        progress(len(targets), len(targets))
    for rel, (path, src, digest) in copies.items():
        adopt(rel, path)
        if sha256_file(path) == digest:
            final[rel] = {digest}
            continue
        put(rel, path, partial(_copy_from, src))
        att_written.append(rel)
        final[rel] = {digest}
    if index_rel is not None:
        for bucket in (written, unchanged):
            if index_rel in bucket:
                bucket.remove(index_rel)
    removed: list[str] = []
    left_edited: list[str] = []
    folded_final: dict[str, list[str]] = {}
    for rel in final:
        folded_final.setdefault(rel.casefold(), []).append(rel)
    for rel, hashes in sorted(owned.items()):
        if rel in final:
            continue
        # as listed before the write: never through a symlinked folder (walk_files does not enter one: the
        # file there is not in the vault), and by its name on disk (an NFD name a macOS sync left)
        path = before.get(rel)
        if path is None or any(_same_file(path, targets[t][0] if t in targets else copies[t][0])
                               for t in folded_final.get(rel.casefold(), ())):
            continue                    # Foo.md, where the note is foo.md now, on a file system ignoring case
        if sha256_file(path) in hashes:
            try:
                path.unlink()
            except OSError as exc:
                raise _unwritable(source, rel, exc) from None
            emptied.update(path.parents[:len(PurePosixPath(rel).parts) - 1])
            if rel.endswith(".md"):
                removed.append(rel)
        else:                           # edited since the build wrote it: yours now, where it is
            left_edited.append(rel)
    for temp in leftovers:      # only the temp of a file the source writes: a dot file of that shape may be yours
        match = WRITE_TEMP.match(temp.name)
        meant = unicodedata.normalize("NFC", (temp.parent / match["name"]).relative_to(root).as_posix()) \
            if match else None
        if meant in pending:
            temp.unlink(missing_ok=True)
    # only the folders a removal may have left empty: an empty folder the user made (Obsidian's "New folder")
    # is theirs
    for folder in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()              # only succeeds when empty
        except OSError:
            pass
    if root.is_dir():
        recorded = {copy: rel for copy, rel in load_conflicts(root).items()
                    if root.joinpath(*PurePosixPath(copy).parts).is_file()}      # the copies still there
        # the user's own files moved out of a note's way: theirs, not copies of edits (status, the build's lines)
        moved_foreign = set(foreign)
        yours = {copy for copy in load_yours(root) if os.path.lexists(root.joinpath(*PurePosixPath(copy).parts))}
        yours |= {copy.rstrip("/") for rel, copy in conflicts if rel in moved_foreign}
        save_manifest(root, source, final, {**recorded, **{copy.rstrip("/"): rel.rstrip("/") for rel, copy in conflicts
                                                          if rel not in moved_foreign}}, yours)
    after = audit(root, source) if root.is_dir() else None
    kept = sorted(after.user_files + after.copies) if after is not None else []
    return VaultResult(written, unchanged, removed, index_rel, kept, conflicts, sorted(att_written), len(copies),
                       foreign, tuple(left_edited))


def _edited_note_error(exc: NoteError, source: str, rel: str, path: Path, data: bytes,
                       owned: Mapping[str, set[str]] | None) -> NoteError:
    """The error of a note :func:`read_notes` cannot parse: when its bytes are not those the build wrote (you edited
    it in Obsidian, or a sync left it half-written), what fixes it without touching your edit: a build of its
    source moves your version aside and writes the note again. A build of another source (``--source``, a sensor
    run) reads every source's notes for the link graph and the warehouse, and failed with the YAML error alone,
    whose advice ("fix or quote the value") was to edit the file again."""
    import hashlib

    from pipeline.ingest.ownership import conflict_name

    if owned is None or hashlib.sha256(data).hexdigest() in owned.get(rel, ()):
        return exc
    folder = PurePosixPath(rel).parent
    try:
        taken = {(folder / p.name).as_posix().casefold() for p in path.parent.iterdir()}
    except OSError:
        taken = set()
    copy = conflict_name(rel, taken)
    return NoteError(f"{exc} (vault/{source}/{rel} was edited since the build wrote it: `docsvault build --source "
                     f"{source}` keeps your version as vault/{source}/{copy} and writes the note again)")


def read_notes(vault_dir: Path, sources: Iterable[str] | None = None) -> list[Note]:
    """Read the vault back into Notes.

    Args:
        vault_dir: the vault root.
        sources: source folders to read; None reads every non-dot subfolder that holds notes. Top-level files (e.g.
            ``vault/README.md``) are not notes. In a folder with a manifest (:mod:`pipeline.ingest.ownership`) only the
            notes the build wrote are read: the user's own files there (and conflict copies) are not notes of
            the source.

    Returns:
        Notes in (source, rel_path) order; ``source_path`` and ``title`` from the frontmatter, falling back to the
        rel_path and the file stem. Dot-folders (``.obsidian``, ``.trash``) are skipped.

    Raises:
        NoteError: a note is not valid UTF-8 or has invalid frontmatter (message names the file and line).
    """
    vault_dir = Path(vault_dir)
    if sources is None:
        names = sorted(p.name for p in vault_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) \
            if vault_dir.is_dir() else []
    else:
        names = sorted(set(sources))
    notes: list[Note] = []
    for name in names:
        root = vault_dir / name
        if not root.is_dir():
            continue
        found: list[tuple[str, Path]] = []
        owned = load_manifest(root)     # None: a folder without a manifest (hand-made, or from older builds)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for fn in filenames:
                if fn.endswith(".md") and not fn.startswith("."):
                    path = Path(dirpath) / fn
                    rel = path.relative_to(root).as_posix()
                    if owned is None or unicodedata.normalize("NFC", rel) in owned:
                        found.append((rel, path))
        # one note per name: of two files whose names differ only in Unicode form (NFC and NFD twins, which a
        # file system that tells them apart can hold), the NFC one, the name the build writes
        seen: set[str] = set()
        nfc = {rel: unicodedata.normalize("NFC", rel) for rel, _ in found}
        for rel, path in sorted(found, key=lambda f: (nfc[f[0]], f[0] != nfc[f[0]], f[0])):
            if nfc[rel] in seen:
                continue
            seen.add(nfc[rel])
            where = f"vault/{name}/{rel}"
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise NoteError(f"{where}: cannot read: {exc.strerror or exc}") from None
            try:
                fm, body = parse_note(data, where)
            except NoteError as exc:
                raise _edited_note_error(exc, name, nfc[rel], path, data, owned) from None
            if fm.get(INDEX_KEY) == INDEX_VALUE:
                continue                # the generated map of content is not a note of the source
            title = fm.get("title")
            stem = rel.rsplit("/", 1)[-1][:-3]
            notes.append(Note(
                source=name,
                source_path=str(fm.get("source_path") or rel),
                rel_path=rel,
                title=str(title) if title not in (None, "") else stem,
                frontmatter=fm,
                body=body,
            ))
    return notes
