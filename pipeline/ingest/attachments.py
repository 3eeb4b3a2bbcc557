"""Attachments: the images, audio, video, PDFs and canvases a source's notes use, found in the source's tree so
the vault stage can copy them next to their notes (every embed of an existing file then resolves in Obsidian).

Which files: the targets of embeds and links in the notes (``![[pic.png]]``, ``[[Board.canvas]]``,
``![alt](img/pic.png)``, ``[report](files/a.pdf)``) whose extension is in :data:`COPY_EXTENSIONS`, plus every
``.canvas`` file of the source (canvases are Obsidian documents in their own right). A target is looked up as
Obsidian does: relative to the note (Markdown links and ``./``/``../`` wikilinks), from the source root, then as a
path suffix / bare file name anywhere in the source (shortest path first). Each file keeps its path in the source
(components cleaned like note paths), so relative links and Obsidian's path-suffix links keep working.

Where the source tree is: a ``local`` source's folders; a ``git`` source's checkout (``<raw>/<name>/repo``, only its
sparse ``paths``). ``llms_txt``/``html`` sources have none (their images stay remote URLs).

Limits: a file above :data:`MAX_FILE_BYTES` (``DOCSVAULT_ATTACHMENT_MAX_MB``, default 50 MiB) or beyond the source's
total :data:`MAX_TOTAL_BYTES` (``DOCSVAULT_ATTACHMENTS_MAX_MB``, default 1024 MiB) is not copied; a symlink leaving
the source, a symlinked folder, or two files whose vault paths differ only in case are skipped too. Each skip is a
line ``source 'x': path: reason`` in :attr:`AttachmentPlan.skipped`.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote

from pipeline.config import megabytes_env
from pipeline.ingest.fetch.base import LFS_POINTER_MAX_BYTES, is_lfs_pointer, lfs_pointer_reason
from pipeline.models import COPY_EXTENSIONS, Note, Source

MAX_FILE_BYTES = megabytes_env("DOCSVAULT_ATTACHMENT_MAX_MB", 50)
MAX_TOTAL_BYTES = megabytes_env("DOCSVAULT_ATTACHMENTS_MAX_MB", 1024)

_WIKI = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
_MD = re.compile(r"(!?)\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]\(\s*(<[^<>\n]*>|[^\s()<>]+(?:\([^\s()]*\)[^\s()<>]*)*)"
                 r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)")
_HTML_SRC = re.compile(r"<(?:img|video|audio|source|embed)\b[^>\n]*?\bsrc=[\"']([^\"'\n]+)[\"']", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


class AttachmentPlan(NamedTuple):
    """What to copy for one source.

    ``files``: vault rel_path (inside ``vault/<source>/``) -> file on disk; ``bytes``: their total size;
    ``skipped``: one line per file not copied (``source 'x': path: reason``); ``unresolved``: ``(note source_path,
    target)`` of attachment links whose file is not in the source (nothing to copy); ``missing``: those of them
    whose target is no file of the source's tree at all (not a symlink the fetch skipped, which it reports):
    deleted or moved files, see :func:`missing_lines`; ``moved``: for those of them written with a folder whose
    file name a file of the source has elsewhere (``attachments/a.png`` moved to ``img/a.png``), that file's source
    path (the shortest), which the warning names."""

    files: dict[str, Path]
    bytes: int
    skipped: list[str]
    unresolved: list[tuple[str, str]]
    missing: list[tuple[str, str]]
    moved: Mapping[tuple[str, str], str] = {}


def extension(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def source_roots(source: Source, raw_dir: Path) -> list[tuple[str, Path]]:
    """``(prefix, folder)`` pairs whose files are the source's tree: a source path is ``prefix + rel`` (prefix ""
    or ``"<folder name>/"`` for a local source with several folders)."""
    if source.kind == "local":
        roots = sorted(Path(p) for p in source.path)
        multi = len(roots) > 1
        return [((r.name + "/") if multi else "", r) for r in roots if r.is_dir()]
    if source.kind == "git":
        repo = Path(raw_dir) / source.name / "repo"
        plain = [p.strip("/") for p in source.paths if p.strip("/") and not any(c in p for c in "*?[")]
        if not plain or len(plain) != len(source.paths):
            return [("", repo)] if repo.is_dir() else []
        return [(p + "/", repo / p) for p in plain if (repo / p).is_dir()]
    return []


def list_candidates(source: Source, roots: Sequence[tuple[str, Path]], skipped: list[str],
                    rejected: set[str] | None = None) -> dict[str, Path]:
    """Source path (posix, NFC) -> file, for every file with a :data:`COPY_EXTENSIONS` extension under the roots
    (dot entries skipped; symlinks to files inside the root followed, other symlinks skipped with a reason, and
    their source paths added to ``rejected``)."""
    found: dict[str, Path] = {}
    report = source.kind != "local"         # a local fetch already reports every symlink it skips
    for prefix, root in roots:
        real_root = root.resolve()
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            keep = []
            for d in sorted(dirnames):
                if d.startswith("."):
                    continue
                if (here / d).is_symlink():
                    rel = prefix + (here / d).relative_to(root).as_posix()
                    if report:
                        skipped.append(f"source '{source.name}': {rel}/: a symlinked folder; its files are not "
                                       "copied (link the files, or move the folder into the source)")
                    continue
                keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                if name.startswith(".") or extension(name) not in COPY_EXTENSIONS:
                    continue
                path = here / name
                sp = unicodedata.normalize("NFC", prefix + path.relative_to(root).as_posix())
                if path.is_symlink():
                    try:
                        target = path.resolve(strict=True)
                        target.relative_to(real_root)
                    except (OSError, RuntimeError, ValueError):
                        if rejected is not None:
                            rejected.add(sp)
                        if report:
                            skipped.append(f"source '{source.name}': {sp}: a symlink that is dangling or leaves "
                                           "the source; not copied")
                        continue
                found.setdefault(sp, path)      # names that differ only in Unicode normalization: the first, as
    return found                                # the local fetch keeps (it reports the other)


#: A body can link an attachment only if it holds ``.<extension>`` literally (or a ``%`` escape, which could spell
#: it): most pages hold neither and skip the link scan (1,931 pages: 1.5 s of a rebuild).
_MAY_LINK = re.compile(r"\.(?:" + "|".join(sorted(COPY_EXTENSIONS, key=lambda e: (-len(e), e))) + ")|%", re.IGNORECASE)


def _targets(body: str) -> list[tuple[str, bool]]:
    """(target path, is_markdown_link) of the links of a body outside code, URL-decoded, without #fragment."""
    from pipeline.ingest.normalize import map_prose

    if not _MAY_LINK.search(body):
        return []
    out: list[tuple[str, bool]] = []

    def collect(text: str) -> str:
        out.extend(_link_targets(text))
        return text

    map_prose(body, collect)
    return [(t, md) for t, md in out if t and extension(t) in COPY_EXTENSIONS]


def _link_targets(text: str) -> list[tuple[str, bool]]:
    """(target path, is_markdown_link) of every wikilink, Markdown link and HTML ``src`` in ``text`` (code
    included: :func:`_targets` passes only prose), in that order, as :func:`_targets` reads them (URL-decoded,
    without #fragment, ?query or |alias; URLs left out; any extension)."""
    out: list[tuple[str, bool]] = []
    for m in _WIKI.finditer(text):
        inner = m.group(2).split("|", 1)[0].rstrip("\\")
        out.append((inner.split("#", 1)[0].strip(), False))
    for m in _MD.finditer(_WIKI.sub(" ", text)):
        dest = m.group(2)
        if dest.startswith("<") and dest.endswith(">"):
            dest = dest[1:-1]
        if not dest or dest.startswith("//") or _SCHEME.match(dest):
            continue
        out.append((unquote(dest.split("#", 1)[0].split("?", 1)[0]).strip(), True))
    for m in _HTML_SRC.finditer(text):
        dest = m.group(1)
        if not dest.startswith("//") and not _SCHEME.match(dest):
            out.append((unquote(dest.split("#", 1)[0].split("?", 1)[0]).strip(), True))
    return out


class _Index:
    def __init__(self, files: dict[str, Path]) -> None:
        self.exact = {sp.casefold(): sp for sp in files}
        self.by_name: dict[str, list[str]] = {}
        for sp in sorted(files, key=lambda p: (p.count("/"), len(p), p)):
            self.by_name.setdefault(sp.rsplit("/", 1)[-1].casefold(), []).append(sp)

    def resolve(self, target: str, note_sp: str, markdown: bool) -> str | None:
        t = unicodedata.normalize("NFC", target.replace("\\", "/"))
        here = posixpath.dirname(note_sp)
        tries = []
        if markdown or t.startswith(("./", "../")):
            tries.append(posixpath.normpath(posixpath.join(here, t)))
        tries.append(posixpath.normpath(t.lstrip("/")))
        for cand in tries:
            hit = self.exact.get(cand.casefold())
            if hit:
                return hit
        parts = [p for p in t.lstrip("/").split("/") if p not in ("", ".", "..")]
        if not parts:
            return None
        suffix = "/" + "/".join(parts).casefold()
        cands = [sp for sp in self.by_name.get(parts[-1].casefold(), ()) if ("/" + sp.casefold()).endswith(suffix)]
        if not cands:
            return None
        same = [sp for sp in cands if posixpath.dirname(sp) == here]
        return (same or cands)[0]


def vault_rel_path(source_path: str) -> str:
    """The attachment's path inside ``vault/<source>/``: its source path, NFC, each component cleaned as note paths
    are (the name keeps its extension)."""
    from pipeline.ingest.normalize import _clean_component

    parts = [p for p in unicodedata.normalize("NFC", source_path).split("/") if p not in ("", ".", "..")]
    return "/".join(_clean_component(p) for p in parts)


def _memo_targets(body: str, memo: Any) -> list[tuple[str, bool]]:
    """:func:`_targets` of ``body`` through ``memo`` (``get(key)`` and item assignment of JSON-safe values, e.g. a
    :class:`pipeline.common.memo.MemoCache`), keyed ``"a:" + sha1(body)``; ``memo`` None: computed. An entry of
    another shape (a hand-edited cache file) is a miss."""
    if memo is None or not _MAY_LINK.search(body):
        return _targets(body)
    key = "a:" + hashlib.sha1(body.encode("utf-8", "surrogatepass")).hexdigest()
    got = memo.get(key)
    if not (isinstance(got, list) and all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) for e in got)):
        got = memo[key] = [[t, md] for t, md in _targets(body)]     # an entry of another shape is a miss
    return [(str(t), bool(md)) for t, md in got]


def _lfs_pointer(path: Path) -> bool:
    """Whether the file is a Git LFS pointer (:func:`pipeline.ingest.fetch.base.is_lfs_pointer`): copied, it was
    an image Obsidian cannot show, without a word."""
    try:
        with open(path, "rb") as fh:
            return is_lfs_pointer(fh.read(LFS_POINTER_MAX_BYTES))
    except OSError:
        return False


def plan_attachments(source: Source, notes: Sequence[Note], raw_dir: Path,
                     max_file_bytes: int | None = None, max_total_bytes: int | None = None,
                     memo: Any = None) -> AttachmentPlan:
    """The attachments of one source's notes (see module doc).

    Args:
        source: the source block (kind, folders, sparse paths).
        notes: its notes (bodies are scanned for links; ``source_path`` gives each note's folder in the source).
        raw_dir: ``<data>/raw`` (where a git source's checkout lives).
        max_file_bytes / max_total_bytes: limits in bytes (default :data:`MAX_FILE_BYTES` / :data:`MAX_TOTAL_BYTES`).
        memo: optional store of each body's links (``get(key)`` / item assignment, JSON-safe values; the vault stage's
            ``<cache>/vaultlinks`` memo), so a rebuild scans only changed bodies; the plan is the same without it.

    Returns:
        AttachmentPlan; deterministic (files chosen in sorted source-path order).
    """
    per_file = MAX_FILE_BYTES if max_file_bytes is None else max_file_bytes
    total_cap = MAX_TOTAL_BYTES if max_total_bytes is None else max_total_bytes
    skipped: list[str] = []
    roots = source_roots(source, raw_dir)
    if not roots:
        return AttachmentPlan({}, 0, [], [], [])
    rejected: set[str] = set()
    candidates = list_candidates(source, roots, skipped, rejected)
    index, skipped_index = _Index(candidates), _Index(dict.fromkeys(rejected, Path()))
    wanted: set[str] = {sp for sp in candidates if extension(sp) == "canvas"}
    unresolved: list[tuple[str, str]] = []
    missing: set[tuple[str, str]] = set()
    moved: dict[tuple[str, str], str] = {}
    for note in notes:
        sp = unicodedata.normalize("NFC", note.source_path)
        for target, markdown in _memo_targets(note.body, memo):
            hit = index.resolve(target, sp, markdown)
            if hit is None:
                unresolved.append((note.source_path, target))
                if skipped_index.resolve(target, sp, markdown) is None:
                    missing.add((note.source_path, target))
                    elsewhere = index.by_name.get(posixpath.basename(target.replace("\\", "/")).casefold())
                    if elsewhere:
                        moved[(note.source_path, target)] = elsewhere[0]
            else:
                wanted.add(hit)
    files: dict[str, Path] = {}
    taken: set[str] = set()
    total = 0
    for sp in sorted(wanted):
        path = candidates[sp]
        try:
            size = path.stat().st_size
        except OSError as exc:
            skipped.append(f"source '{source.name}': {sp}: cannot read: {exc.strerror or exc}")
            continue
        if size < LFS_POINTER_MAX_BYTES and _lfs_pointer(path):
            skipped.append(f"source '{source.name}': {sp}: {lfs_pointer_reason()}; not copied")
            continue
        if size > per_file:
            skipped.append(f"source '{source.name}': {sp}: {size / 2**20:.1f} MiB, above the "
                           f"{per_file / 2**20:g} MiB limit for one attachment (DOCSVAULT_ATTACHMENT_MAX_MB); "
                           "not copied")
            continue
        if total + size > total_cap:
            skipped.append(f"source '{source.name}': {sp}: the source's attachments would exceed "
                           f"{total_cap / 2**20:g} MiB (DOCSVAULT_ATTACHMENTS_MAX_MB); not copied")
            continue
        rel = vault_rel_path(sp)
        if not rel or rel.casefold() in taken or rel.lower().endswith(".md"):
            skipped.append(f"source '{source.name}': {sp}: its vault path {rel!r} is taken by another attachment "
                           "(names that differ only in case); not copied")
            continue
        taken.add(rel.casefold())
        files[rel] = path
        total += size
    return AttachmentPlan(files, total, skipped, sorted(set(unresolved)), sorted(missing), moved)


#: at most this many notes with a missing attachment are named one by one per source in :func:`missing_lines`
MISSING_LINES = 5
#: at most this many missing files are named in one note's line
MISSING_PER_NOTE = 3


def _line_numbers(path: Path | None, targets: Sequence[str]) -> dict[str, int]:
    """Target -> the first line (1-based) of the file at ``path`` with a link (wikilink, Markdown link or
    HTML ``src``) to it, read as :func:`_targets` reads links (``[[gone.png|100]]``, ``(my%20file.png)``), not
    a line that merely contains the text (``[[agone.png]]`` is no link to ``gone.png``); a target in no link
    on one line (a link split over lines), or an unreadable file, has none."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path else []
    except OSError:
        return {}
    wanted, found = set(targets), {}
    for n, line in enumerate(lines, 1):
        if _MAY_LINK.search(line):
            for target, _ in _link_targets(line):
                if target in wanted:
                    found.setdefault(target, n)
    return found


def _leaves_source(note_sp: str, target: str, folders: Sequence[str] = ()) -> bool:
    """True when ``target``, read from the note's folder, climbs above the source's root (``../../secret.png``
    from a note at the root): never copied, whether the file exists or not. ``folders``: the source path prefixes
    of a local source with several folders (``"me/"``, ``"work/"``, see :func:`source_roots`): there a target that
    climbs out of the note's folder into none of them (``../secret.png`` from ``work/Top.md``) leaves it too."""
    target = target.replace("\\", "/")
    path = posixpath.normpath(posixpath.join(posixpath.dirname(note_sp), target))
    if path == ".." or path.startswith("../"):
        return True
    return bool(folders) and ".." in target.split("/") and not path.startswith(tuple(folders))


def _where_missing(line: int | None, elsewhere: str | None) -> str:
    """`` (line 3; a file of that name is at img/a.png)`` after a missing target in :func:`missing_lines`: the line
    of the note that links it and the file of its name elsewhere in the source, each when known; "" when neither."""
    from pipeline.ingest.fetch.local import printable_path

    parts = ([f"line {line}"] if line else []) + (
        [f"a file of that name is at {printable_path(elsewhere)}"] if elsewhere else [])
    return f" ({'; '.join(parts)})" if parts else ""


def missing_lines(source: str, unresolved: Sequence[tuple[str, str]], files: dict[str, Path] | None = None,
                  folders: Sequence[str] = (), moved: Mapping[tuple[str, str], str] | None = None) -> list[str]:
    """One warning line per note that embeds or links an attachment file that is not in the source (an image
    deleted or moved while a note still shows it: its embed is broken in the vault), naming the note's source
    path and the missing targets (with the line of the note's file that holds each, when ``files`` maps the
    note's source path to it and the target is written there as is); at most :data:`MISSING_LINES` notes, then
    one ``… and N more`` line. A target that climbs out of the source (``../``) gets a line of its own saying so.
    ``unresolved``: :attr:`AttachmentPlan.missing`; ``folders``: the source path prefixes of a source with several
    folders (:func:`_leaves_source`); ``moved``: :attr:`AttachmentPlan.moved`, a file of the same name elsewhere
    in the source, named after the target (``attachments/a.png (line 3; a file of that name is at img/a.png)``).
    A link to a missing *note* is a dangling link instead, counted by the graph and the warehouse, not warned
    about."""
    from pipeline.ingest.fetch.local import printable_path

    by_note: dict[str, list[str]] = {}
    for note, target in sorted(unresolved):
        by_note.setdefault(note, []).append(target)
    lines = []
    for note, all_targets in list(by_note.items())[:MISSING_LINES]:
        at = _line_numbers((files or {}).get(note), all_targets)
        outside = [t for t in all_targets if _leaves_source(note, t, folders)]
        for targets in ([t for t in all_targets if t not in outside], outside):
            if not targets:
                continue
            targets.sort(key=lambda t: (at.get(t, float("inf")), t))     # in the note's order
            shown = ", ".join(printable_path(t) + _where_missing(at.get(t), (moved or {}).get((note, t)))
                              for t in targets[:MISSING_PER_NOTE])
            more = f" and {len(targets) - MISSING_PER_NOTE} more" if len(targets) > MISSING_PER_NOTE else ""
            one = len(targets) == 1
            broken = (f"the note's {'embed/link' if one else 'embeds/links'} of {'it' if one else 'them'} "
                      f"{'is' if one else 'are'} broken in the vault")
            if targets is outside:
                lines.append(f"source '{source}': {printable_path(note)}: {shown}{more} "
                             f"{'points' if one else 'point'} outside the source (only files inside it are "
                             f"copied): {broken}; move the {'file' if one else 'files'} into the source and link "
                             f"{'it' if one else 'them'} from there")
                continue
            lines.append(f"source '{source}': {printable_path(note)}: {shown}{more} {'is' if one else 'are'} not in "
                         f"the source (deleted or moved?): {broken}; restore the {'file' if one else 'files'} or fix "
                         f"the {'link' if one else 'links'}")
    if len(by_note) > MISSING_LINES:
        lines.append(f"source '{source}': … and {len(by_note) - MISSING_LINES} more notes with a missing attachment")
    return lines
