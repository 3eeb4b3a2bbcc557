"""Which files of ``vault/<source>/`` the build owns: a manifest of the files it wrote, with their content hashes.

The vault is the user's too. A build may overwrite or delete a file in a source's folder only when the build wrote
that file and nobody changed it since; everything else there is the user's and is kept:

* a file the build did not write (a note created in ``vault/<source>/``, a pasted image) is never touched, and is
  listed (build output, ``docsvault status``, ``docsvault check-vault``);
* a generated note (or copied attachment) edited since the build wrote it is moved to a conflict copy next to it,
  ``<name> (edited).md`` (``(edited 2)``, ... when taken), before the build writes its new version; a generated file
  whose page left the source but which was edited is kept where it is (and becomes the user's).

The manifest is ``vault/<source>/.docsvault/manifest.json`` (a dot folder: Obsidian, ``read_notes`` and the vault
listing ignore it), JSON ``{"version": 1, "source": name, "files": {rel_path: [sha256 hex, ...]}, "conflicts":
{copy rel_path: rel_path}, "yours": [copy rel_path, ...]}`` (``conflicts``: the ``(edited)`` copies the build made of
your edits, still there; ``yours``: your own files it moved out of a note's way, named so too); a
file is the
build's while its bytes hash to one of its listed values (normally one; two while a write is in progress, so a
build killed between writing a file and the manifest still knows both versions). It lives with the vault, so
moving or restoring the vault keeps ownership. A vault written before manifests existed (no manifest): a ``.md``
file counts as the build's when its frontmatter says ``source: <source>`` and its ``content_hash`` matches its body
(or it is the source's ``docsvault: index`` note, named as a build names it), it has no frontmatter key the build does not write there now (a
property the user added), and it is not a renamed or moved copy (its ``source_path`` is
written elsewhere); any other file is the user's.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

MANIFEST_DIR = ".docsvault"
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
CONFLICT_TAG = "edited"

Manifest = dict[str, set[str]]
"""rel_path (posix, NFC, inside ``vault/<source>/``) -> the sha256 hex values that mean "as the build wrote it"."""


def manifest_path(root: Path) -> Path:
    """``<root>/.docsvault/manifest.json`` for a source folder ``root`` (= ``vault/<source>``)."""
    return Path(root) / MANIFEST_DIR / MANIFEST_NAME


def sha256_file(path: Path) -> str | None:
    """sha256 hex of a regular file's bytes (streamed), None when it is missing, not a file or unreadable."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def load_manifest(root: Path) -> Manifest | None:
    """The manifest of a source folder, or None when it has none (or it cannot be read: then the folder is treated
    like one written before manifests existed, see :func:`legacy_owned`)."""
    try:
        data = json.loads(manifest_path(root).read_text(encoding="utf-8"))
        files = data["files"]
        return {unicodedata.normalize("NFC", str(rel)): {str(h) for h in (hashes if isinstance(hashes, list)
                                                                          else [hashes])}
                for rel, hashes in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def load_conflicts(root: Path) -> dict[str, str]:
    """The manifest's ``conflicts``: copy rel_path (``a/Note (edited).md``) -> the generated file's rel_path whose
    edited version the build moved there; {} when none is recorded or there is no readable manifest."""
    try:
        data = json.loads(manifest_path(root).read_text(encoding="utf-8"))
        found = data.get("conflicts") or {}
        return {unicodedata.normalize("NFC", str(k)): unicodedata.normalize("NFC", str(v))
                for k, v in found.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def load_yours(root: Path) -> set[str]:
    """The manifest's ``yours``: the ``(edited)`` names the build gave files of the user's that were in a note's
    way (their own files, not copies of edits to generated notes); empty when none is recorded or there is no
    readable manifest."""
    try:
        data = json.loads(manifest_path(root).read_text(encoding="utf-8"))
        return {unicodedata.normalize("NFC", str(rel)) for rel in data.get("yours") or ()}
    except (OSError, ValueError, TypeError, AttributeError):
        return set()


def save_manifest(root: Path, source: str, files: Mapping[str, set[str] | list[str]],
                  conflicts: Mapping[str, str] | None = None, yours: Iterable[str] | None = None) -> None:
    """Write the manifest atomically (keys sorted, hash lists sorted). ``conflicts`` (copy -> original rel_path)
    replaces the recorded ones, ``yours`` (:func:`load_yours`) too; None keeps those recorded now."""
    from pipeline.common.artifacts import write_atomic

    if conflicts is None:
        conflicts = load_conflicts(root)
    yours = load_yours(root) if yours is None else set(yours)
    data: dict[str, object] = {"version": MANIFEST_VERSION, "source": source,
                               "files": {rel: sorted(files[rel]) for rel in sorted(files)}}
    if conflicts:
        data["conflicts"] = {rel: conflicts[rel] for rel in sorted(conflicts)}
    if yours:
        data["yours"] = sorted(yours)
    write_atomic(manifest_path(root), (json.dumps(data, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))


def legacy_owned(root: Path, source: str, written: Mapping[str, str] | None = None,
                 keys: Mapping[str, Iterable[str]] | None = None,
                 rendered: Mapping[str, bytes] | None = None) -> Manifest:
    """Ownership of a source folder written before manifests (or of a dropped source's folder, whose manifest went
    when it was removed, added back): its ``.md`` files whose frontmatter has ``source: <source>`` and a
    ``content_hash`` equal to the hash of their body (unedited generated notes), and its ``docsvault: index``
    note; each with its current hash.

    Args:
        written: source path -> vault rel path of the notes the build writes now. A file whose ``source_path`` is
            written at another rel path is a copy someone renamed or moved (Obsidian's rename), the user's: it
            counted as the build's, so a source removed and added back deleted that copy as "left the source".
        keys: vault rel path -> the frontmatter keys of the note the build writes there now. A file at that path
            with a key besides these (and the build's own, ``normalize.OWN_KEYS``) has a property someone added
            (``myprop: keep me``, typed in Obsidian): the user's, so it is moved aside, not overwritten; the
            ``content_hash`` covers the body only, so before session 45 such a note counted as the build's and the
            property was lost without a word when the manifest was missing (a vault copied without ``.docsvault/``).
        rendered: vault rel path -> the bytes the build writes there now. A file there whose frontmatter differs
            from the one written now (the keys docsvault computes, ``normalize.REPLACED_KEYS``, aside: a new
            ``site_url`` changes ``url``; and, when the body written now is another, a ``title`` that is the old
            body's first heading or the file name, as such a title follows the text) has a property value someone changed (an alias or tag typed in Obsidian): the
            user's, moved aside. Its ``content_hash`` covers the body only and the key set is the same, so such an
            edit was overwritten without a word when a source was removed and added back (the removal takes the
            manifest); until session 49 only when the body written now was the old one, so a tag typed into a note
            whose page's text changed meanwhile was lost. A page whose properties changed in the source along with
            its text is then taken for edited too: an ``(edited)`` copy nobody needs, never a loss.

    A file whose page is not written now (``written`` given) counts as the build's only at the path the build gives
    its ``source_path`` (:func:`pipeline.ingest.normalize.rel_path_for`, or that path with a `` (N)`` of a name
    clash): a copy someone made (Obsidian's "Make a copy", ``Recipes 1.md``, a sync's ``Recipes 2.md``) of a page
    that later left the source was deleted as "left the source" when the source came back.
    """
    from pipeline.common.errors import NoteError
    from pipeline.common.frontmatter import INDEX_KEY, INDEX_VALUE, parse_note
    from pipeline.ingest.normalize import OWN_KEYS, REPLACED_KEYS, _title
    from pipeline.models import text_hash

    owned: Manifest = {}
    for rel, path in walk_files(root).items():
        if not rel.endswith(".md"):
            continue
        try:
            data = path.read_bytes()
            fm, body = parse_note(data, rel)
        except (OSError, NoteError):
            continue
        if not isinstance(fm, dict) or fm.get("source") != source:
            continue
        at = (written or {}).get(unicodedata.normalize("NFC", str(fm.get("source_path", ""))))
        if at is not None and at != rel:
            continue
        if at is None and written is not None and not INDEX_NOTE_NAME.match(rel) \
                and not _built_path(rel, str(fm.get("source_path", ""))):
            continue
        if keys is not None and rel in keys and set(fm) - set(keys[rel]) - set(OWN_KEYS):
            continue
        if rendered is not None and rel in rendered:
            try:
                new_fm, new_body = parse_note(rendered[rel], rel)
            except NoteError:
                new_fm, new_body = None, None
            # the keys docsvault computes aside, and, when the text changed, a title that follows the text (its
            # first heading or the file name; one typed in Obsidian does not)
            computed = REPLACED_KEYS if new_body == body or fm.get("title") != _title(
                {}, body, str(fm.get("source_path") or rel)) else (*REPLACED_KEYS, "title")
            if isinstance(new_fm, dict) and _without(fm, computed) != _without(new_fm, computed):
                continue
        if (fm.get(INDEX_KEY) == INDEX_VALUE and INDEX_NOTE_NAME.match(rel)) \
                or fm.get("content_hash") == text_hash(body):
            owned[rel] = {hashlib.sha256(data).hexdigest()}
    return owned


#: the names :func:`pipeline.ingest.vault.index_rel_path` gives a source's index note, at the folder's top (not
#: ``_index (edited).md``, the copy a build keeps of your edit to it: yours, though its frontmatter says
#: ``docsvault: index``)
INDEX_NOTE_NAME = re.compile(r"^_index(?: \([2-9][0-9]*\))?\.md$")


def _without(fm: Mapping[str, object], keys: Iterable[str]) -> dict[str, object]:
    """The frontmatter without ``keys``."""
    drop = set(keys)
    return {k: v for k, v in fm.items() if k not in drop}


def _built_path(rel: str, source_path: str) -> bool:
    """True when ``rel`` is where a build puts the page ``source_path``: its :func:`~pipeline.ingest.normalize.
    rel_path_for`, or that path with the `` (N)`` a name clash gives (compared casefolded)."""
    from pipeline.ingest.normalize import rel_path_for

    if not source_path:
        return False
    base = rel_path_for(source_path)[:-3].casefold()
    got = unicodedata.normalize("NFC", rel)[:-3].casefold()
    return got == base or re.fullmatch(re.escape(base) + r" \([2-9]\d*\)", got) is not None


#: the temp file of an atomic write (``.<name>.<8 random>.tmp``: tempfile.mkstemp's) that a killed build left;
#: ``name``: the file it was written for (only a temp of a file the build writes is docsvault's: ``write_source``)
WRITE_TEMP = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")


def walk_files(root: Path, temps: list[Path] | None = None) -> dict[str, Path]:
    """rel_path (posix, NFC) -> path of every file (and file symlink) under ``root``; dot files and dot folders
    (``.obsidian``, ``.docsvault``, ``.trash``) skipped, symlinked folders not entered. ``temps``: gets the
    temp files of killed writes found (:data:`WRITE_TEMP`, regular files)."""
    found: dict[str, Path] = {}
    root = Path(root)
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not (here / d).is_symlink())
        for name in sorted(filenames):
            if name.startswith("."):
                if temps is not None and WRITE_TEMP.match(name) and not (here / name).is_symlink():
                    temps.append(here / name)
                continue
            path = here / name
            rel = unicodedata.normalize("NFC", path.relative_to(root).as_posix())
            found[rel] = path
    return found


def conflict_name(rel: str, taken: set[str]) -> str:
    """The conflict copy's rel_path for ``rel``: ``a/Note (edited).md``, then ``(edited 2)``, ... so that its
    casefolded form is not in ``taken`` (casefolded rel_paths already used)."""
    folder, name = posixpath.split(rel)
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    n = 1
    while True:
        tag = CONFLICT_TAG if n == 1 else f"{CONFLICT_TAG} {n}"
        candidate = posixpath.join(folder, f"{stem} ({tag})" + (f".{ext}" if ext else ""))
        if candidate.casefold() not in taken:
            return candidate
        n += 1


_CONFLICT_NAME = re.compile(rf"^(?P<stem>.+) \({CONFLICT_TAG}(?: [2-9]| [1-9][0-9]+)?\)(?P<ext>\.[^./]+)?$")


def conflict_original(rel: str) -> str | None:
    """The rel_path a name made by :func:`conflict_name` was made for (``a/Note (edited 2).md`` -> ``a/Note.md``),
    None for any other name."""
    folder, name = posixpath.split(rel)
    m = _CONFLICT_NAME.match(name)
    return posixpath.join(folder, m.group("stem") + (m.group("ext") or "")) if m else None


class Audit(NamedTuple):
    """The state of a source folder against its manifest, without changing anything.

    ``user_files``: files the build did not write (sorted rel_paths), conflict copies excepted; ``edited``: files
    the build wrote that were changed since (the next build moves them to a conflict copy, or keeps them when their
    page is gone); ``missing``: files the build wrote that are gone (the next build writes them again); ``owned``:
    files as the build wrote them; ``has_manifest``: False for a folder written before manifests (ownership then by
    :func:`legacy_owned`); ``copies``: the ``<name> (edited).md`` copies the build made of your edits (recorded in the
    manifest, or, made before it recorded them, named so after a file it owns; not your own files it moved out of a
    note's way, its ``yours``: those are ``user_files``), sorted. Neither ``user_files`` nor
    ``copies`` is ever changed or removed by a build."""

    user_files: list[str]
    edited: list[str]
    missing: list[str]
    owned: list[str]
    has_manifest: bool
    copies: list[str] = []


def audit(root: Path, source: str) -> Audit:
    """Compare ``vault/<source>/`` (``root``) with its manifest (see :class:`Audit`)."""
    root = Path(root)
    manifest = load_manifest(root)
    has = manifest is not None
    if manifest is None:        # {}: a file not at the path the build gives its page is a copy of yours
        manifest = legacy_owned(root, source, {})
    files = walk_files(root)
    recorded, yours = load_conflicts(root), load_yours(root)
    user, edited, owned, copies = [], [], [], []
    for rel, path in files.items():
        hashes = manifest.get(rel)
        if hashes is None:
            mine = rel in yours or (rel not in recorded and conflict_original(rel) not in manifest)
            (user if mine else copies).append(rel)
        elif sha256_file(path) in hashes:
            owned.append(rel)
        else:
            edited.append(rel)
    missing = sorted(rel for rel in manifest if rel not in files)
    return Audit(user, edited, missing, owned, has, copies)
