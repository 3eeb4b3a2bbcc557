"""Local folders (e.g. an Obsidian vault): list files in place, never copy or modify anything.

Walks each root in sorted order, skips dot-folders (``.obsidian``, ``.trash``, ``.git``, any ``.*``) and dot-files,
and — each with a warning naming the file or folder — symlinked folders, symlinks that resolve outside the root, symlink loops,
dangling symlinks, symlinks to a file the source lists anyway (one note, not two) and names that are not valid UTF-8 (they could not be written to the vault or the state files: a note's or a folder of notes' is a skipped note, :func:`bad_name_lines`).
Of two files whose names differ only in Unicode normalization (``café.md`` written in NFC and in NFD) the first in
name order is read; the other is skipped with a line (:func:`twin_line`): a note's is kept under
:data:`SKIPPED_NOTES` in ``fetch.json`` so the build reports it as a skipped note, not as an attachment.
Names with control characters are listed (the vault path is sanitized by the normalizer). Source paths are NFC
(macOS writes decomposed NFD names; the vault, the warehouse and JSON output all use NFC). ``revision`` is a sha256 over the sorted
``(source_path, content sha256)`` listing of its notes and of the files a note could embed (images, PDFs…); a
file's content hash is remembered under its stat (size, mtime, ctime, inode: :class:`ContentHashes`), so a
listing that did not change reads no file, an edit is seen whatever times it keeps, and a copy that keeps the
files' times (``cp -a``, a restored backup) reads each file once and is unchanged.

Empty vs missing: a folder with no note is an empty source (its notes leave the vault and the index, with a
``has no notes`` warning); a root that does not exist or cannot be listed is a FetchError, so the last good copy stays,
and so is a root with nothing in it at all whose last fetch listed files (an unmounted drive's mount point:
:func:`_empty_source_line`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pipeline.common.artifacts import write_atomic
from pipeline.common.errors import FetchError
from pipeline.config import Settings
from pipeline.ingest.fetch.base import (
    now_iso,
    path_matches,
    read_state,
    select_default,
    select_paths,
    source_dir,
    write_state,
)
from pipeline.ingest.sources import near_folder, nested_root_problem
from pipeline.models import COPY_EXTENSIONS, FetchResult, RawFile, Source


def printable_path(path: object) -> str:
    """A path for a message: as is when printable, else quoted with escapes (control characters cannot forge lines)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def _form(name: str) -> str:
    """"NFC", "NFD" or "mixed NFC/NFD": which Unicode normalization a file name is in (NFC when it is both: no
    accent)."""
    return "NFC" if unicodedata.is_normalized("NFC", name) else "NFD" if unicodedata.is_normalized("NFD", name) \
        else "mixed NFC/NFD"


def twin_line(source: str, source_path: str, kept: str, skipped: str, note: bool) -> str:
    """The line for a file not read because another file has the same name in another Unicode normalization
    (``café.md`` written both ways; macOS writes NFD names): ``source_path`` the NFC name both take, ``kept`` and
    ``skipped`` the two names as they are on disk (only their forms are shown: the characters look the same).
    ``note``: the file is a note of the source (else a file a note may embed)."""
    what, used = ("notes", "read") if note else ("files", "copied")
    return (f"source '{source}': {printable_path(source_path)}: two {what} have this name, in {_form(kept)} and "
            f"{_form(skipped)} form (macOS writes names in NFD); the {_form(kept)} one is {used} (first in name "
            f"order), the {_form(skipped)} one is skipped, since the vault keeps one per name; rename one of the two "
            "to keep both")


def _twin_lines(source: Source, twins: dict[str, tuple[str, list[str]]], notes: Sequence[str],
                warnings: list[str]) -> list[str]:
    """The lines of the skipped notes among the files :func:`_walk_root` skipped as a name twin (``twins``: NFC
    source path -> the kept file's and the skipped files' names as on disk); those lines and the skipped
    attachments' are added to ``warnings``. A twin that is neither a note (``notes``: the selected source paths)
    nor a file a note could embed is not reported: nothing would read it anyway."""
    selected = set(notes)
    skipped_notes: list[str] = []
    skipped_files: list[str] = []
    for sp, (kept, skipped) in sorted(twins.items()):
        is_note = sp in selected
        name = sp.rsplit("/", 1)[-1]
        if not is_note and ("." not in name or name.rsplit(".", 1)[1].lower() not in COPY_EXTENSIONS
                            or path_matches(sp, source.exclude)):
            continue
        for other in skipped:
            (skipped_notes if is_note else skipped_files).append(twin_line(source.name, sp, kept, other, is_note))
    warnings += [*skipped_notes, *skipped_files]
    return skipped_notes


def _readable_file(path: Path, root: Path, warnings: list[str], source: str) -> Path | None:
    """``path`` itself when it is a regular file, its resolved target when it is a symlink to a file inside
    ``root``, else None with a warning (loop, dangling, leaving the root, not a regular file, unreadable)."""
    try:
        if not path.is_symlink():
            if path.is_file():
                return path
            warnings.append(f"source '{source}': skipped {printable_path(path)}: not a regular file")
            return None
        try:
            target = path.resolve(strict=True)
        except RuntimeError:          # Python 3.11: "Symlink loop"
            warnings.append(f"source '{source}': skipped symlink loop: {printable_path(path)}")
            return None
        except OSError:
            warnings.append(f"source '{source}': skipped dangling or unreadable symlink: {printable_path(path)}")
            return None
        try:
            target.relative_to(root.resolve())
        except ValueError:
            warnings.append(f"source '{source}': skipped symlink leaving the root: {printable_path(path)}")
            return None
        return target if target.is_file() else None
    except OSError as exc:
        warnings.append(f"source '{source}': skipped unreadable entry {printable_path(path)}: {exc.strerror or exc}")
        return None


def _walk_root(root: Path, warnings: list[str], source: str,
               twins: dict[str, tuple[str, list[str]]] | None = None,
               bad_names: list[tuple[str, bool]] | None = None) -> dict[str, Path]:
    """Posix relative path (NFC) -> absolute path of every regular file under root (dot entries skipped). Of files
    whose names differ only in Unicode normalization the first in name order is kept; the others are recorded in
    ``twins`` (relative path -> the kept file's relative path and theirs, as on disk) for the caller to report.
    A name that is not valid UTF-8 is skipped: given ``bad_names``, recorded there as (its relative path, with the
    undecodable bytes as surrogates, as ``os`` gives it; whether it is a folder) for the caller to report (see
    :func:`bad_name_lines`), else as a warning line.

    Raises:
        FetchError: the root itself cannot be listed (an unreadable folder is not an empty one: its last good copy
            must stay). An unreadable subfolder is skipped with a warning.
    """
    found: dict[str, Path] = {}
    link_targets: dict[str, str] = {}       # rel path of a symlink -> rel path of its target (inside the root)

    def unreadable(exc: OSError) -> None:
        where = Path(exc.filename) if exc.filename else root
        if where == root:
            raise FetchError(f"source '{source}': cannot read local path {printable_path(root)}: {exc.strerror or exc}; "
                             "check the folder's permissions (or that its drive is mounted)")
        warnings.append(f"source '{source}': skipped unreadable folder {printable_path(where)}: {exc.strerror or exc}")

    def utf8(name: str, path: Path, folder: bool = False) -> bool:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            if bad_names is not None:
                bad_names.append((path.relative_to(root).as_posix(), folder))
            else:
                warnings.append(f"source '{source}': skipped a name that is not valid UTF-8: {ascii(str(path))}")
            return False
        return True

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=False):
        here = Path(dirpath)
        for d in dirnames:
            if not d.startswith(".") and (here / d).is_symlink():
                warnings.append(f"source '{source}': skipped symlinked folder {printable_path(here / d)}: its files are not "
                                "read (move the folder into the source, or add its target as another path)")
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (here / d).is_symlink()
                             and utf8(d, here / d, folder=True))
        for name in sorted(filenames):
            if name.startswith(".") or not utf8(name, here / name):
                continue
            path = here / name
            kept = _readable_file(path, root, warnings, source)
            if kept is None:
                continue
            if kept != path:
                link_targets[unicodedata.normalize("NFC", path.relative_to(root).as_posix())] = \
                    unicodedata.normalize("NFC", kept.relative_to(root.resolve()).as_posix())
            rel = unicodedata.normalize("NFC", path.relative_to(root).as_posix())     # macOS writes NFD names
            if rel in found:        # the same name in another Unicode normalization: reported by the caller
                twin = (twins if twins is not None else {}).setdefault(
                    rel, (found[rel].relative_to(root).as_posix(), []))
                twin[1].append(path.relative_to(root).as_posix())
                continue
            found[rel] = path
    for rel, target_rel in link_targets.items():     # one note once: a link to a file the source lists anyway
        if rel in found and target_rel in found and target_rel not in link_targets:
            del found[rel]
            warnings.append(f"source '{source}': skipped symlink {printable_path(root / rel)}: it points to {printable_path(target_rel)}, "
                            "which this source reads already (one note, not two)")
    return found


#: the key of ``fetch.json`` that lists the notes a local fetch skipped as name twins (:func:`twin_line`): the
#: normalize stage reports them with the source's other skipped files, the vault stage not as attachments
SKIPPED_NOTES = "skipped_notes"


#: in ``<raw>/<name>/``: the content hashes of a local source's files under their stat (:class:`ContentHashes`)
HASHES_FILE = "content-hashes.json"


class ContentHashes:
    """sha256 of a local source's files, each remembered under its stat key ``(size, mtime_ns, ctime_ns, inode)``
    in ``<raw>/<name>/content-hashes.json`` (``{absolute path: [size, mtime_ns, ctime_ns, inode, sha256 hex]}``):
    a file is read again only when one of them changed, as git's index does. So an edit that keeps the length and
    puts the old mtime back (``touch -r``, a sync tool that keeps times) is read again (its ctime moved) and seen,
    and a copy that keeps the times (``cp -a``, ``rsync -a``: new ctimes and inodes) is read once and, its content
    the same, no change. A missing or unreadable file means every file is read once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raw = {}
        self._known: dict[str, list] = raw if isinstance(raw, dict) else {}
        self._used: dict[str, list] = {}

    @classmethod
    def of(cls, source: Source, settings: Settings) -> ContentHashes:
        """The hashes of ``source`` under ``settings``' raw folder."""
        return cls(source_dir(source, settings) / HASHES_FILE)

    def sha(self, path: Path, st: os.stat_result) -> str | None:
        """The sha256 hex of ``path``'s bytes, whose ``os.stat`` is ``st``; None when it cannot be read."""
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        name = str(path)
        entry = self._known.get(name)
        if isinstance(entry, list) and len(entry) == 5 and entry[:4] == key and isinstance(entry[4], str):
            self._used[name] = entry
            return entry[4]
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except OSError:
            return None
        self._used[name] = [*key, digest.hexdigest()]
        return digest.hexdigest()

    def save(self) -> None:
        """Write the hashes used since loading (files no longer listed are dropped), when they differ from the
        file's; an unwritable folder is left as it is (the hashes are only a cache)."""
        if self._used == self._known:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(self._used, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        except OSError:
            pass


def bad_name_lines(source: Source, root: Path, bad_names: Sequence[tuple[str, bool]], prefix: str = "") -> \
        tuple[list[str], list[str]]:
    """The lines of the names :func:`_walk_root` skipped as not valid UTF-8 (``bad_names``, relative to ``root``;
    ``prefix``: the root's folder name before them, for a source of several roots), the name shown with its bytes
    as written (``caf\\xe9.md``): (a note's, or a folder's that holds notes of the source, with how many), and
    (a file's a note could embed). The first are skipped notes (:data:`SKIPPED_NOTES`), the second attachments not
    copied; a name that is neither is not reported (nothing would read it)."""
    def shown(rel: str) -> str:
        return rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

    notes: list[str] = []
    files: list[str] = []
    where = f"{prefix}/" if prefix else ""
    for rel, folder in sorted(bad_names):
        if folder:
            inside = [shown(Path(d, f).relative_to(root).as_posix())
                      for d, _, names in os.walk(root / rel) for f in names]
            count = len(select_paths(source, [where + p for p in inside]))
            if count:
                notes.append(f"source '{source.name}': {where}{shown(rel)}/: a folder name that is not valid UTF-8; "
                             f"its {count} note(s) are not read: rename it in UTF-8 to keep them")
        elif select_paths(source, [where + shown(rel)]):
            notes.append(f"source '{source.name}': {where}{shown(rel)}: a file name that is not valid UTF-8; the "
                         "note is not read: rename it in UTF-8 to keep it")
        elif "." in rel and rel.rsplit(".", 1)[1].lower() in COPY_EXTENSIONS:
            files.append(f"source '{source.name}': {where}{shown(rel)}: a file name that is not valid UTF-8; "
                         "skipped (not copied into the vault): rename it in UTF-8 to keep it")
    return notes, files


def listing_revision(source: Source, listing: dict[str, Path], notes: Sequence[tuple[str, os.stat_result]],
                     hashes: ContentHashes, skipped: Sequence[str] = ()) -> str:
    """A local source's revision: sha256 over its notes' ``(source path, content sha256)`` (``notes``, in order,
    with their ``os.stat``; a note that cannot be read counts by its size and mtime) and then those of every file
    of ``listing`` a note could embed (an extension of :data:`pipeline.models.COPY_EXTENSIONS`, not excluded; an
    unreadable one left out), in path order: an image added or changed after the note that embeds it is a change
    (it was copied into the vault only when a note changed too); first ``skipped``, the lines of the notes whose
    names are not valid UTF-8 (:func:`bad_name_lines`), so such a note added is a change the build reports. The
    contents are read through ``hashes`` (only files whose stat changed; saved at the end). :func:`fetch_local`
    records it; the upstream check (:mod:`pipeline.ingest.fetch.watch`) compares it."""
    digest = hashlib.sha256()
    for line in skipped:
        digest.update(f"u\x00{line}\n".encode())
    for sp, st in notes:
        sha = hashes.sha(listing[sp], st) or f"{st.st_size}\x00{st.st_mtime_ns}"
        digest.update(f"{sp}\x00{sha}\n".encode())
    for sp in sorted(listing):
        name = sp.rsplit("/", 1)[-1]
        if "." not in name or name.rsplit(".", 1)[1].lower() not in COPY_EXTENSIONS or \
                path_matches(sp, source.exclude):
            continue
        try:
            st = listing[sp].stat()
        except OSError:
            continue
        sha = hashes.sha(listing[sp], st)
        if sha is not None:
            digest.update(f"a\x00{sp}\x00{sha}\n".encode())
    hashes.save()
    return digest.hexdigest()


def _empty_source_line(source: Source, settings: Settings, roots: Sequence[Path]) -> str:
    """The ``has no notes`` warning of a source that selects no file, after checking that it is not unmounted: a
    root that holds nothing at all, not even a dot-file, while the source's last fetch listed files under it is
    how the mount point of an unmounted drive (or a network share that is down) looks, and building it as an
    empty source would remove every note it had from the vault and search. A folder that still holds something
    (``.obsidian/``, a subfolder, a file that is no note) is mounted: its notes were deleted.

    Raises:
        FetchError: such a root, naming the folder, how many files the last fetch listed under it, and what to do.
    """
    previous = read_state(source, settings) or {}
    listed = [str(f.get("path", "")) for f in previous.get("files", []) if isinstance(f, dict)]
    for root in roots:
        try:
            with os.scandir(root) as entries:
                if next(entries, None) is not None:
                    continue
        except OSError:
            continue                # unreadable: _walk_root has raised already
        under = str(root.resolve()) + os.sep
        before = sum(1 for p in listed if p.startswith(under))
        if before:
            raise FetchError(
                f"source '{source.name}': local path {printable_path(root)} is empty (nothing in it at all) but "
                f"held {before} file(s) at the last fetch; is its drive or share unmounted? Its notes keep serving "
                "search; if you emptied it on purpose, remove the source from sources.yaml, or put any file in the "
                "folder (e.g. .keep) and build again")
    return (f"source '{source.name}' has no notes: no files match under {', '.join(printable_path(r) for r in roots)} "
            f"(include={list(source.include) or 'default ' + '/'.join(select_default(source))}, "
            f"exclude={list(source.exclude)})")


def overlapping_sources(sources: Sequence[Source]) -> list[str]:
    """Local sources that read the same notes, one line each (``docsvault sources validate`` warns): a root of one
    that is, or is inside, a root of another (``path: notes`` and ``path: notes/daily``) whose include/exclude
    still read that folder (probed with a ``<folder>/x.md`` under it); each such note is then a note of both
    sources, two search hits. Not an error: a subset may be a source of its own on purpose."""
    lines: list[str] = []
    local = [s for s in sources if s.kind == "local"]
    for outer in local:
        for inner in local:
            if inner is outer:
                continue
            for o_root in outer.path:
                for i_root in inner.path:
                    if not Path(i_root).is_relative_to(o_root) or (Path(i_root) == Path(o_root)
                                                                      and local.index(inner) < local.index(outer)):
                        continue
                    rel = Path(i_root).relative_to(o_root).as_posix()
                    prefix = f"{Path(o_root).name}/" if len(outer.path) > 1 else ""
                    probe = f"{prefix}{rel}/x.md" if rel != "." else f"{prefix}x.md"
                    if not select_paths(outer, [probe]):
                        continue
                    what = (f"both read {i_root}" if rel == "." else
                            f"{inner.name}'s folder {i_root} is inside {outer.name}'s {o_root}")
                    todo = ("remove one of them" if rel == "." else
                            f"exclude it from '{outer.name}' (exclude: ['{prefix}{rel}/**'])")
                    lines.append(f"sources '{outer.name}' and '{inner.name}' read the same notes: {what}, so each "
                                 f"note there is in both sources (two search hits); if that is not meant, {todo}")
    return lines


def _check_roots(source: Source, roots: Sequence[Path]) -> None:
    """Raise :class:`FetchError` when two of a local source's roots share a folder name (their source paths would
    collide) or one is inside another (:func:`pipeline.ingest.sources.nested_root_problem`)."""
    names = [r.name for r in roots]
    if len(roots) > 1 and len(set(names)) != len(names):
        raise FetchError(
            f"source '{source.name}': local roots {[str(r) for r in roots]} share a folder name; "
            "source paths would collide — split them into separate sources"
        )
    nested = nested_root_problem(source)
    if nested:
        raise FetchError(nested)


class LocalListing(NamedTuple):
    """:func:`list_local`: a local source's files as its roots hold them now."""

    listing: dict[str, Path]                            # source path (NFC) -> file
    twins: dict[str, tuple[str, list[str]]]             # name twins in another Unicode normalization (_walk_root)
    bad_notes: list[str]                                # lines of the notes whose names are not UTF-8 (skipped)
    warnings: list[str]                                 # the walk's lines, then those of such attachments


def list_local(source: Source, hint: str = "") -> LocalListing:
    """Walk every root of a local source (:func:`_walk_root`), the source paths of a source of several roots
    prefixed with the root's folder name in NFC. The one listing both the fetch and the upstream check
    (:mod:`pipeline.ingest.fetch.watch`) take the revision of.

    Raises:
        FetchError: a root does not exist or is not a folder (its line ends with ``hint``), or cannot be listed.
    """
    roots = sorted(Path(p) for p in source.path)
    multi = len(roots) > 1
    found = LocalListing({}, {}, [], [])
    for root in roots:
        if not root.is_dir():
            if root.is_symlink() and not root.exists():
                raise FetchError(f"source '{source.name}': local path {root} is a symlink that leads to no folder "
                                 f"(a symlink loop, or its target is gone){hint}")
            near = near_folder(root) if not root.exists() else None
            meant = f" (did you mean {near}?)" if near else ""
            raise FetchError(f"source '{source.name}': local path {root} does not exist or is not a folder{meant}{hint}")
        prefix = unicodedata.normalize("NFC", root.name)
        root = root.resolve()
        twins: dict[str, tuple[str, list[str]]] = {}
        bad: list[tuple[str, bool]] = []
        for rel, path in _walk_root(root, found.warnings, source.name, twins, bad).items():
            found.listing[f"{prefix}/{rel}" if multi else rel] = path
        bad_lines, bad_files = bad_name_lines(source, root, bad, prefix if multi else "")
        found.bad_notes.extend(bad_lines)
        found.warnings.extend(bad_files)
        found.twins.update({f"{prefix}/{rel}" if multi else rel: twin for rel, twin in twins.items()})
    return found


def stat_notes(source: Source, listing: dict[str, Path], selected: Sequence[str], warnings: list[str]
               ) -> list[tuple[str, os.stat_result]]:
    """``(source path, os.stat)`` of each selected note that can be stat'ed, in order; one line in ``warnings``
    for each that cannot (then it is not read)."""
    stamps: list[tuple[str, os.stat_result]] = []
    for sp in selected:
        try:
            stamps.append((sp, listing[sp].stat()))
        except OSError as exc:
            warnings.append(f"source '{source.name}': skipped {printable_path(sp)}: {exc.strerror or exc}")
    return stamps


def fetch_local(source: Source, settings: Settings) -> FetchResult:
    """List a local source's files (see module doc and :func:`pipeline.ingest.fetch.fetch_source`).

    A folder that selects no file is an empty source (``files`` empty, a ``has no notes`` warning): its notes
    leave the vault and the index. A missing or unreadable root is an error instead, so a folder that is
    unmounted for a while keeps serving its last good copy.

    Raises:
        FetchError: a root is missing, not a folder or unreadable, two roots share a folder name, or one root is
            inside another (:func:`pipeline.ingest.sources.nested_root_problem`).
    """
    started = time.monotonic()
    if not source.path:
        raise FetchError(f"source '{source.name}': kind local needs 'path' (one or more folders)")
    roots = sorted(Path(p) for p in source.path)
    _check_roots(source, roots)
    found = list_local(source, hint="; fix 'path' in sources.yaml")
    warnings = list(found.warnings)
    selected = select_paths(source, found.listing)
    skipped_notes = _twin_lines(source, found.twins, selected, warnings)
    skipped_notes += found.bad_notes
    warnings += found.bad_notes
    if not selected:      # an empty vault (or its last note deleted): built as an empty source, not an error
        warnings.append(_empty_source_line(source, settings, roots))
    listing = found.listing
    stamps = stat_notes(source, listing, selected, warnings)
    files = [RawFile(source=source.name, source_path=sp, path=listing[sp]) for sp, _ in stamps]
    total = sum(st.st_size for _, st in stamps)
    revision = listing_revision(source, listing, stamps, ContentHashes.of(source, settings), found.bad_notes)
    previous = read_state(source, settings)
    changed = previous is None or previous.get("revision") != revision
    result = FetchResult(
        source=source.name,
        strategy="local",
        revision=revision,
        files=tuple(files),
        changed=changed,
        stats={"requests": 0, "bytes": total if changed else 0,
               "seconds": round(time.monotonic() - started, 3), "files": len(files)},
        warnings=tuple(warnings),
    )
    write_state(source, settings, result, now_iso(), {"roots": [str(r) for r in roots], SKIPPED_NOTES: skipped_notes})
    return result
