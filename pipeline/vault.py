"""Vault stage: write a source's Notes to ``vault/<source>/`` and read the vault back.

Writes are atomic (temp file in the same folder + ``os.replace``) and happen only when the bytes differ, so unchanged
notes keep their mtime (Obsidian and file watchers see no churn). Notes that left the source are removed, together
with folders they leave empty. Each source owns exactly its folder: nothing outside ``vault/<source>/`` is touched.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from pipeline.errors import NoteError
from pipeline.frontmatter import decode_bytes, render_note, split_frontmatter
from pipeline.models import Note


class VaultResult(NamedTuple):
    """rel_paths (posix, inside ``vault/<source>/``) written, left as they were, and removed; each sorted."""

    written: list[str]
    unchanged: list[str]
    removed: list[str]


def _safe_target(root: Path, rel_path: str, source: str) -> Path:
    """``root / rel_path`` after checking it stays inside ``root`` (no absolute paths, ``..``, or symlink escapes)."""
    pure = PurePosixPath(rel_path)
    if (not rel_path or pure.is_absolute() or "\\" in rel_path or ".." in pure.parts or "\x00" in rel_path
            or not rel_path.endswith(".md") or (pure.parts and pure.parts[0].endswith(":"))):
        raise NoteError(f"source '{source}': note path {rel_path!r} would leave vault/{source}/; "
                        "rel_paths must be relative .md paths without '..'")
    target = root.joinpath(*pure.parts)
    try:
        target.resolve().relative_to(root.resolve())
    except ValueError:
        raise NoteError(f"source '{source}': note path {rel_path!r} resolves outside vault/{source}/ "
                        "(a symlink?); remove the link") from None
    return target


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


VOLATILE_KEYS = ("fetched_at",)


def _same_content(old: bytes, new: bytes, where: str) -> bool:
    """True when two renderings differ only in volatile keys (``fetched_at``): the note is not rewritten then."""
    try:
        old_fm, old_body = split_frontmatter(decode_bytes(old, where), where)
        new_fm, new_body = split_frontmatter(decode_bytes(new, where), where)
    except NoteError:
        return False
    strip = lambda fm: {k: v for k, v in fm.items() if k not in VOLATILE_KEYS}  # noqa: E731
    return old_body == new_body and strip(old_fm) == strip(new_fm)


def write_source(vault_dir: Path, source: str, notes: Sequence[Note]) -> VaultResult:
    """Make ``vault_dir/<source>/`` hold exactly these notes.

    Args:
        vault_dir: the vault root.
        source: the source name (its folder).
        notes: the source's notes; each is written to ``<source>/<rel_path>`` as ``render_note(frontmatter, body)``.

    Returns:
        VaultResult of rel_paths: written (new or different bytes), unchanged (same bytes, or differing only in ``fetched_at``: file not touched), removed
        (``.md`` files under the folder that are not in ``notes``; folders left empty are removed too).

    Raises:
        NoteError: a note belongs to another source, two notes share a rel_path, or a rel_path would resolve outside
            ``vault_dir/<source>/`` (checked for every note before anything is written).
    """
    if not source or "/" in source or "\\" in source or source in (".", "..") or source.startswith("."):
        raise NoteError(f"source name {source!r} cannot be a vault folder")
    vault_dir = Path(vault_dir)
    root = vault_dir / source
    targets: dict[str, tuple[Path, bytes]] = {}
    for note in notes:
        if note.source != source:
            raise NoteError(f"source '{source}': note {note.source_path!r} belongs to source '{note.source}'")
        if note.rel_path in targets:
            raise NoteError(f"source '{source}': two notes share the vault path {note.rel_path!r}")
        targets[note.rel_path] = (_safe_target(root, note.rel_path, source),
                                  render_note(note.frontmatter, note.body).encode("utf-8"))
    written: list[str] = []
    unchanged: list[str] = []
    for rel, (path, data) in sorted(targets.items()):
        try:
            old = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        except OSError:
            old = None
        same = old is not None and (old == data or _same_content(old, data, str(path)))
        if same:
            unchanged.append(rel)
            continue
        if path.is_symlink():
            path.unlink()
        _atomic_write(path, data)
        written.append(rel)
    removed: list[str] = []
    if root.is_dir():
        keep = set(targets)
        for path in sorted(root.rglob("*.md")):
            if path.is_file() or path.is_symlink():
                rel = path.relative_to(root).as_posix()
                if rel not in keep and not any(part.startswith(".") for part in PurePosixPath(rel).parts):
                    path.unlink()
                    removed.append(rel)
        for folder in sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()),
                             key=lambda p: len(p.parts), reverse=True):
            rel_parts = folder.relative_to(root).parts
            if any(part.startswith(".") for part in rel_parts):
                continue
            try:
                folder.rmdir()          # only succeeds when empty
            except OSError:
                pass
    return VaultResult(written, unchanged, removed)


def read_notes(vault_dir: Path, sources: Iterable[str] | None = None) -> list[Note]:
    """Read the vault back into Notes.

    Args:
        vault_dir: the vault root.
        sources: source folders to read; None reads every non-dot subfolder that holds notes. Top-level files (e.g.
            ``vault/README.md``) are not notes.

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
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for fn in filenames:
                if fn.endswith(".md") and not fn.startswith("."):
                    path = Path(dirpath) / fn
                    found.append((path.relative_to(root).as_posix(), path))
        for rel, path in sorted(found):
            where = f"vault/{name}/{rel}"
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise NoteError(f"{where}: cannot read: {exc.strerror or exc}") from None
            fm, body = split_frontmatter(decode_bytes(data, where), where)
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
