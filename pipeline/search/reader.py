"""Safe reading of vault notes, in pages: the one place the CLI ``read`` and the MCP ``read`` tool open note files.

A note is addressed by its vault path, ``<source>/<rel_path>`` (the ``vault_path`` of a search hit). Only Markdown
files inside the vault are served (EC-21): ``..`` that leaves the vault, absolute paths, percent-encoded
separators or dots (``%2e``, ``%2F``, ``%5c``, double-encoded ``%25``), backslashes, hidden folders, symlinks that
resolve outside the vault and non-``.md`` files are refused with :class:`PathRefusedError` before any file content
is read. ``sub/../a.md`` normalises inside the vault and is allowed.

Every output is bounded: a note's body is cut into pages of about :data:`PAGE_CHARS` characters (chars, not
tokens; cut at a paragraph, line, sentence or word boundary when one is near, not in or right after a heading line,
outside fenced code blocks when one is there or a block fits on the next page), frontmatter is capped at :data:`FRONTMATTER_CHARS`, and files
larger than :data:`MAX_NOTE_BYTES` are refused. A page that starts inside a fenced code block too long for one
page re-opens the fence and one that ends inside it closes it (:attr:`NotePage.added_before` /
:attr:`NotePage.added_after`, the only text a page has that the note has not).
"""

from __future__ import annotations

import bisect
import json
import posixpath
import re
import unicodedata
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipeline.common.display import char_start
from pipeline.common.errors import NoteError, PipelineError
from pipeline.common.frontmatter import decode_bytes, split_frontmatter
from pipeline.common.markdown import FENCE, WIKILINK, heading_slug, split_code
from pipeline.config import resolve_path
from pipeline.search.snippet import strip_controls

__all__ = [
    "FRONTMATTER_CHARS",
    "MAX_NOTE_BYTES",
    "PAGE_CHARS",
    "NoteNotFoundError",
    "NotePage",
    "PathRefusedError",
    "excerpt",
    "find_link",
    "find_note",
    "link_parts",
    "locate",
    "note_body",
    "page_of",
    "paginate",
    "read_link",
    "read_note",
    "resolve_note_path",
    "subpath_missing",
]

PAGE_CHARS = 1000                 # target page size, chars
FRONTMATTER_CHARS = 2000          # cap of the JSON frontmatter returned with page 1
MAX_NOTE_BYTES = 20_000_000       # bigger files are refused (no note is that big; a dump is)

_ENCODED = re.compile(r"%(2e|2f|5c|25|00)", re.IGNORECASE)
_DRIVE = re.compile(r"^[A-Za-z]:")


class PathRefusedError(PipelineError):
    """A read asked for something that is not a Markdown note inside the vault (traversal, absolute, encoded, ...)."""


class NoteNotFoundError(PipelineError):
    """The path is acceptable but no note exists there."""


class AmbiguousNoteError(NoteNotFoundError):
    """Several notes have that source path or name; the message lists their vault paths."""


class _NotMarkdownError(PathRefusedError):
    """A path that passed every other check but does not end in ``.md``: refused as a vault path, yet it may be a
    note's source path (``Board.canvas`` of ``src/Board.canvas.md``), which :func:`find_note` looks up."""


@dataclass(frozen=True)
class NotePage:
    """One page of a note.

    Attributes:
        path: the vault path (``<source>/<rel_path>``, posix).
        title: frontmatter ``title``, else the file name without ``.md`` (control characters removed).
        page: 1-based page number.
        pages: number of pages (>= 1; an empty body has one empty page).
        text: this page's text: ``added_before`` + the body's ``start``:``start + len`` slice (at most
            ``PAGE_CHARS`` chars) + ``added_after``; the slices concatenate to the body exactly, the body as
            shown: without terminal escape sequences and control characters but tab and newline, as search
            shows a note's text: :func:`~pipeline.search.snippet.strip_controls`; the file keeps them.
        start: offset of the page in the body (chars).
        total_chars: length of the body (chars).
        frontmatter: the note's frontmatter (JSON-safe: dates are ISO strings), on page 1 only; values are cut so
            its JSON is at most ``FRONTMATTER_CHARS`` chars.
        added_before: the fence line re-opening the fenced code block the page starts inside (its indentation,
            ``>`` markers, fence characters and language, e.g. ``"```python\n"``), else ``""``.
        added_after: the fence line closing the block the page ends inside (``"```\n"``, with a newline before
            it when the page does not end at a line end), else ``""``.
        warning: one line when the page was asked for by a link whose ``#heading`` or ``#^block`` the note has
            not (:func:`read_link`: it names the note and its closest headings), else ``""``.
    """

    path: str
    title: str
    page: int
    pages: int
    text: str
    start: int
    total_chars: int
    frontmatter: dict[str, Any] | None = None
    added_before: str = ""
    added_after: str = ""
    warning: str = ""

    @property
    def next_page(self) -> int | None:
        return self.page + 1 if self.page < self.pages else None

    @property
    def body_text(self) -> str:
        """The page's text as the note has it: :attr:`text` without the fence lines added around it."""
        return self.text[len(self.added_before):len(self.text) - len(self.added_after)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: path, title, page, pages, next_page, total_chars, text, frontmatter (page 1),
        added_before / added_after (only when the page re-opens / closes a fenced code block), warning (only
        when the link's heading or block was not found)."""
        out: dict[str, Any] = {
            "path": self.path, "title": self.title, "page": self.page, "pages": self.pages,
            "next_page": self.next_page, "total_chars": self.total_chars, "text": self.text,
        }
        if self.frontmatter is not None:
            out["frontmatter"] = self.frontmatter
        if self.added_before:
            out["added_before"] = self.added_before
        if self.added_after:
            out["added_after"] = self.added_after
        if self.warning:
            out["warning"] = self.warning
        return out


# ---------------------------------------------------------------------------------------------------------------
# paths


#: the longest note argument ``read``/``related`` look up (chars): Linux's PATH_MAX; a longer one names no note,
#: and its "no note '…'" error quoted it whole (twice: 200,000 characters for a pasted 100,000-character path)
MAX_NOTE_ARG_CHARS = 4096


def _refuse(note: str, why: str) -> PathRefusedError:
    shown = note if len(note) <= 120 else note[:117] + "..."
    return PathRefusedError(
        f"refused {shown!r}: {why}; give a note's vault path as search returns it, e.g. 'source/folder/Note.md'"
    )


def _on_disk(path: Path, folder: bool = False) -> bool:
    """Whether ``path`` is a file (``folder``: a folder); False when the file system cannot even look it up: a
    name the client gave that is longer than a file name can be (ENAMETOOLONG) names no file, and must not
    crash ``read`` (it was an internal error)."""
    try:
        return path.is_dir() if folder else path.is_file()
    except OSError:
        return False


def resolve_note_path(vault_dir: Path, note: str) -> tuple[Path, str]:
    """Validate a client-supplied note path and resolve it inside the vault.

    Args:
        vault_dir: the vault root.
        note: ``<source>/<rel_path>`` (posix; ``./`` and inner ``..`` that stay inside the vault are allowed).

    Returns:
        ``(file, vault_path)``: the resolved file (symlinks followed, inside the vault) and the normalised vault path.

    Raises:
        PathRefusedError: empty, NUL, backslash, percent-encoded ``.``/``/``/``\\``/``%``, absolute or ``~`` path,
            ``..`` leaving the vault, a hidden folder or file, not ``.md``, or a symlink resolving outside the vault.
        NoteNotFoundError: the path is acceptable but no file exists there.
    """
    if not isinstance(note, str) or not note.strip():
        raise _refuse(str(note), "empty path")
    if "\x00" in note:
        raise _refuse(note.replace("\x00", "\\0"), "NUL byte in path")
    if _ENCODED.search(note):
        raise _refuse(note, "percent-encoded path characters are not accepted")
    if "\\" in note:
        raise _refuse(note, "backslashes are not path separators here")
    if note.startswith(("/", "~")) or _DRIVE.match(note):
        raise _refuse(note, "absolute paths are not accepted (paths are relative to the vault)")
    norm = unicodedata.normalize("NFC", posixpath.normpath(note))     # vault paths are NFC; accept NFD too
    if norm == ".." or norm.startswith("../") or norm in ("", "."):
        raise _refuse(note, "the path leaves the vault")
    parts = norm.split("/")
    if any(p.startswith(".") for p in parts):
        raise _refuse(note, "hidden files and folders are not notes")
    if not norm.lower().endswith(".md"):
        raise _NotMarkdownError(*_refuse(note, "only Markdown notes (.md) can be read").args)
    root = resolve_path(Path(vault_dir))
    candidate = root.joinpath(*parts)
    try:
        real = candidate.resolve(strict=False)
    except (OSError, RuntimeError) as exc:          # symlink loop
        raise _refuse(note, f"cannot resolve ({exc.__class__.__name__})") from None
    if not real.is_relative_to(root):
        raise _refuse(note, "it resolves outside the vault (symlink)")
    if not _on_disk(real):
        if not root.is_dir():       # `--data D` given, the vault left at its default ./vault of another folder
            raise NoteNotFoundError(
                f"no note {norm!r}: the vault folder {root} does not exist; point --vault / DOCSVAULT_VAULT at the "
                "vault the build wrote (the CLI and the MCP server read notes there)")
        if _written_by_build(root, norm):     # a generated note deleted by hand: search still finds it there
            raise NoteNotFoundError(
                f"no note {norm!r} in the vault {root}: the build wrote it and its file was deleted since (search "
                f"still serves it); rebuild the source to write it again (the refresh tool, or `docsvault build "
                f"--source {parts[0]}`)")
        raise NoteNotFoundError(
            f"no note {norm!r} in the vault {root}; use a vault_path from search results "
            "(`docsvault search ...` / the search tool)"
        )
    return real, norm


# ---------------------------------------------------------------------------------------------------------------
# pages


_BREAKS = (re.compile(r"\n\n+"), re.compile(r"\n"), re.compile(r"(?<=[.!?。！？])\s*"), re.compile(r"\s+"),
           re.compile(r"(?<=[、，])"))     # Japanese and Chinese text has no spaces: a clause ends at its comma
#: what a page cut at its size must not split: a link (``[[…]]``, ``![[…]]``, ``[text](url)``), inline code, a
#: web address; none longer than this many chars is kept whole
_UNSPLIT = re.compile(r"!?\[\[[^\]\n]*\]\]|!?\[[^\]\n]*\]\([^)\n]*\)|`[^`\n]+`|https?://\S+")
_UNSPLIT_CHARS = 300


def fenced_blocks(text: str) -> list[tuple[int, int, int]]:
    """The fenced code blocks of ``text`` (:func:`pipeline.common.markdown.split_code`, the project's one
    fence scanner) as ``(start, content_start, end)`` offsets: the opening fence line's start, the end of that
    line (newline included) and the end of the block (after its closing line's newline; the text's end when
    the block is not closed)."""
    blocks: list[tuple[int, int, int]] = []
    pos = 0
    for is_code, piece in split_code(text):
        if is_code:
            first = piece.find("\n")
            blocks.append((pos, pos + (first + 1 if first != -1 else len(piece)), pos + len(piece)))
        pos += len(piece)
    return blocks


def _block_at(blocks: list[tuple[int, int, int]], offset: int) -> tuple[int, int, int] | None:
    """The block ``offset`` lies strictly inside (after its first char, before its end), else None."""
    i = bisect.bisect_left(blocks, (offset,)) - 1
    if i >= 0 and blocks[i][0] < offset < blocks[i][2]:
        return blocks[i]
    return None


def paginate(text: str, size: int = PAGE_CHARS) -> list[int]:
    """Page start offsets of ``text``: pages of at most ``size`` chars, cut at a boundary when one is near,
    and outside fenced code blocks when possible.

    A page ends after the last paragraph break in its second half, else the last line break, else the last sentence
    end, else the last whitespace, each taken outside fenced code blocks (:func:`fenced_blocks`) when there is
    one, else after the last Japanese comma (``、``). When the second half has none outside a block, a block that
    starts on the page and fits in ``size`` starts the next page; else the page is cut inside the block at the same
    boundaries (:func:`read_note` re-opens and closes the fence around such a cut). With no boundary at all (one
    long word, CJK without punctuation) a page is cut at ``size``, or before a link or inline code it would split,
    and never inside a decomposed character (:func:`_hard_cut`). Pages concatenate back to ``text`` exactly.

    Args:
        text: the body.
        size: maximum page length, chars (>= 10).

    Returns:
        Start offsets, first is 0; ``[0]`` for an empty text.
    """
    if size < 10:
        raise ValueError(f"page size must be >= 10 chars, got {size}")
    blocks = fenced_blocks(text)
    starts = [0]
    pos = 0
    n = len(text)
    while n - pos > size:
        window_end = pos + size
        lo = pos + size // 2
        cut = _last_break(text, lo, window_end, blocks)
        if cut is None:
            block = _block_at(blocks, window_end)
            if block is not None and pos < block[0] and block[2] - block[0] <= size:
                cut = block[0]                          # the block fits on the next page: start it there
            else:
                cut = _last_break(text, lo, window_end)
        if cut is None:     # only heading lines near the end (an outline): after one, never inside one
            cut = _last_break(text, lo, window_end, after_headings=True)
        pos = cut if cut is not None else _hard_cut(text, lo, window_end)
        starts.append(pos)
    return starts


def _hard_cut(text: str, lo: int, hi: int) -> int:
    """Where a page with no boundary in ``(lo, hi]`` ends: at ``hi``, or before the link, inline code or web
    address (:data:`_UNSPLIT`) that ``hi`` falls inside when it starts after ``lo``, and never between a character
    and the combining marks, joiners or variation selectors that follow it (a decomposed ``ガ``, an emoji
    sequence). A Japanese line without punctuation was cut at 1,000 characters inside ``[[吾輩は猫である|猫]]``:
    page 1 ended ``[[`` and page 2 began ``吾輩は猫である|猫]]``, no link on either (before session 45)."""
    cut = hi
    for m in _UNSPLIT.finditer(text, max(lo, hi - _UNSPLIT_CHARS), min(len(text), hi + _UNSPLIT_CHARS)):
        if m.start() < hi < m.end():
            if m.start() > lo:
                cut = m.start()
            break
    return char_start(text, cut, lo)


def _last_break(text: str, lo: int, hi: int, blocks: list[tuple[int, int, int]] | None = None,
                after_headings: bool = False) -> int | None:
    """The end of the last boundary in ``(lo, hi]`` of the first kind of :data:`_BREAKS` that has one; with
    ``blocks``, only a boundary whose end is not inside a fenced block counts. A boundary in or right after a
    heading line does not count: a page that ended with ``## 第42章`` left the section to the next page, and
    ``read 'Note#第42章'`` opened the page of chapter 41 (before session 43). ``after_headings``: it does, for a
    stretch of heading lines only (an outline of empty chapters), which was otherwise cut inside a heading."""
    for pattern in _BREAKS:
        ends = [m for m in pattern.finditer(text, lo, hi)
                if lo < m.end() <= hi and (blocks is None or _block_at(blocks, m.end()) is None)]
        for m in reversed(ends):
            if after_headings or not _HEADING_LINE.match(text, text.rfind("\n", 0, m.start()) + 1):
                return m.end()
    return None


#: an ATX heading line's start (``## 第42章``), as :data:`_HEADING` reads one
_HEADING_LINE = re.compile(r"#{1,6}[ \t]")


def _fence_lines(text: str, blocks: list[tuple[int, int, int]], start: int, end: int) -> tuple[str, str]:
    """``(added_before, added_after)`` for the page ``text[start:end]``: the line re-opening the fenced block
    it starts inside and the one closing the block it ends inside (after the block's opening line, before its
    end), each ``""`` when there is none. The re-opening line keeps the opening's indentation, ``>`` markers,
    fence and language (the info string's first word, at most 40 chars)."""
    def fence(block: tuple[int, int, int]) -> tuple[str, str]:
        m = FENCE.match(text[block[0]:block[1]].rstrip("\r\n"))
        assert m is not None                     # split_code opened the block on this line
        lang = (m.group("info").split() or [""])[0]
        return text[block[0]:block[0] + m.start("fence")] + m.group("fence"), lang

    before = after = ""
    opened = _block_at(blocks, start)
    if opened is not None and start >= opened[1]:
        head, lang = fence(opened)
        before = f"{head}{lang[:40]}\n"
    closed = _block_at(blocks, end)
    if closed is not None and end >= closed[1]:
        head, _ = fence(closed)
        after = f"{head}\n" if text[start:end].endswith("\n") else f"\n{head}\n"
    return before, after


def page_of(starts: list[int], offset: int) -> int:
    """1-based page number containing the body offset ``offset`` (from :func:`paginate`)."""
    page = 1
    for i, s in enumerate(starts, start=1):
        if s <= offset:
            page = i
        else:
            break
    return page


def _cap_frontmatter(fm: dict[str, Any], limit: int = FRONTMATTER_CHARS) -> dict[str, Any]:
    out: dict[str, Any] = {}
    used = 2
    for k, v in fm.items():
        item = json.dumps({k: v}, ensure_ascii=False)
        if used + len(item) > limit:
            text = json.dumps(v, ensure_ascii=False)
            room = limit - used - len(k) - 10
            if room < 20:
                out["…"] = f"{len(fm) - len(out)} more keys cut"
                break
            v = text[:room] + "…"
            item = json.dumps({k: v}, ensure_ascii=False)
        out[k] = v
        used += len(item)
    return out


def _load(vault_dir: Path, note: str) -> tuple[str, dict[str, Any], str]:
    path, vault_path = resolve_note_path(vault_dir, note)
    size = path.stat().st_size
    if size > MAX_NOTE_BYTES:
        raise _refuse(note, f"the file is {size} bytes, more than the {MAX_NOTE_BYTES}-byte cap")
    try:
        text = decode_bytes(path.read_bytes(), f"vault note {vault_path}")
        fm, body = split_frontmatter(text, f"vault note {vault_path}")
    except NoteError:
        raise
    except OSError as exc:
        raise NoteNotFoundError(f"cannot read vault note {vault_path}: {exc}") from None
    return vault_path, fm, strip_controls(body)     # as shown: no terminal escapes (the file keeps them)


def read_note(vault_dir: Path, note: str, page: int = 1, size: int = PAGE_CHARS) -> NotePage:
    """Read one page of a vault note.

    Args:
        vault_dir: the vault root.
        note: the note's vault path (see :func:`resolve_note_path`).
        page: 1-based page number.
        size: page size, chars.

    Returns:
        The page (its text at most ``size`` chars of the body, plus the fence lines re-opening and closing a
        fenced code block the page starts or ends inside; frontmatter on page 1 only, capped).

    Raises:
        PathRefusedError, NoteNotFoundError: see :func:`resolve_note_path`; also a file over ``MAX_NOTE_BYTES``.
        NoteError: the file is not UTF-8 or its frontmatter is invalid (the message names the note).
        ValueError: ``page`` is out of range (the message gives the number of pages).
    """
    vault_path, fm, body = _load(vault_dir, note)
    starts = paginate(body, size)
    pages = len(starts)
    if not isinstance(page, int) or page < 1 or page > pages:
        raise ValueError(f"page {page} is out of range: {vault_path} has {pages} page(s) of ~{size} chars")
    start = starts[page - 1]
    end = starts[page] if page < pages else len(body)
    title = strip_controls(str(fm.get("title") or posixpath.basename(vault_path)[:-3]))
    before, after = _fence_lines(body, fenced_blocks(body), start, end)
    return NotePage(
        path=vault_path, title=title, page=page, pages=pages, text=before + body[start:end] + after,
        start=start, total_chars=len(body), frontmatter=_cap_frontmatter(fm) if page == 1 else None,
        added_before=before, added_after=after,
    )


# ---------------------------------------------------------------------------------------------------------------
# where a search hit sits in its note

#: an ATX heading line; its optional closing ``#``s follow a space or tab (CommonMark): ``## Learn C#`` is ``Learn C#``
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
_MD_NOISE = re.compile(r"[*_`\[\]]")


def _plain(text: str) -> str:
    """A heading compared loosely: as a hit shows it (:func:`~pipeline.search.snippet.plain_heading`: a hit's
    heading comes without its HTML), Markdown noise and case left out."""
    from pipeline.search.snippet import plain_heading

    return " ".join(_MD_NOISE.sub("", plain_heading(text)).split()).casefold()


def locate(body: str, heading: str = "", snippet: str = "") -> int:
    """Best-effort body offset of a search hit: its snippet's opening words after its heading, else the heading.

    Args:
        body: the note body.
        heading: the hit's heading ("" for text before the first heading).
        snippet: the hit's snippet (``…`` marks are ignored).

    Returns:
        Offset in ``body`` (chars); 0 when nothing is found.
    """
    offset = 0
    if heading:
        want = _plain(heading)
        for m in _HEADING.finditer(body):
            if _plain(m.group(2)) == want:
                offset = m.start()
                break
    words = strip_controls(snippet).strip("…").split()[:6]      # as the body a reader shows
    if len(words) >= 2:
        pattern = r"\s+".join(re.escape(w) for w in words)
        m = re.compile(pattern).search(body, offset)
        if m:
            return m.start()
    return offset


def locate_match(body: str, heading: str, chunk_text: str, query: str) -> int:
    """Body offset of a hit's best query match: :func:`locate` finds its chunk, then within the chunk's length
    (plus a margin for the note's Markdown) the match gathering the most query terms
    (:func:`pipeline.search.snippet.match_position`); the chunk's start when no term is there. A long chunk
    (a code block of 200 lines) can start pages before the line that matched."""
    from pipeline.search.snippet import match_position

    at = locate(body, heading, chunk_text)
    if not query:
        return at
    pos = match_position(body[at:at + len(chunk_text) + 200], query)
    return at + (pos or 0)


def excerpt(body: str, offset: int, limit: int = 600) -> str:
    """At most ``limit`` chars of ``body`` from ``offset``, cut at whitespace, ``…`` marking a cut end."""
    text = body[offset:offset + limit + 1]
    if len(text) <= limit:
        return text.strip()
    cut = text.rfind(" ", limit // 2, limit)
    if cut == -1:
        cut = text.rfind("\n", limit // 2, limit)
    return text[: cut if cut != -1 else limit].rstrip() + "…"


def note_body(vault_dir: Path, note: str) -> tuple[str, str]:
    """``(vault_path, body)`` of a note, validated like :func:`read_note` (same errors); the body as its pages
    show it (control characters removed), so an offset in it is one in :func:`read_note`'s pages."""
    vault_path, _, body = _load(vault_dir, note)
    return vault_path, body


def find_note(vault_dir: Path, note: str, warehouse_path: Path | None = None) -> str:
    """The vault path to read for ``note``: ``note`` itself when it is a note in the vault, else (with a warehouse)
    the one note whose ``source_path`` is ``note`` (also a source file that is no ``.md``, e.g. ``Board.canvas``,
    whose vault note is ``<source>/Board.canvas.md``), else the one note that ``note`` names as an Obsidian link
    does (``Home`` or ``guide/Home``: a vault path ending in ``Home.md``; see
    :func:`pipeline.warehouse.queries.notes_by_name`), else the one note whose title, file name or an alias
    is ``note`` as search compares a page's names (:func:`pipeline.search.searcher.name_key`: case,
    punctuation and spacing ignored; :func:`pipeline.warehouse.queries.notes_named`). A name that matches as
    written (case-sensitive: link name, then title, source file name or alias) wins over those that match only
    case-folded, so ``abc`` opens the source's ``abc.md`` (written ``abc (2).md`` beside ``ABC.md``), not
    ``ABC.md``.

    Raises:
        PathRefusedError: ``note`` is refused (see :func:`resolve_note_path`); no warehouse lookup happens then,
            except for a path refused only for not ending in ``.md``: it is refused when no note has it as its
            source path.
        NoteNotFoundError: no such note.
        AmbiguousNoteError: several notes have that source path, name, title or alias (the message lists their
            vault paths).
    """
    try:           # the vault path as the vault writes it (NFC): a path typed in NFD (macOS) was "no note" to related
        return resolve_note_path(vault_dir, note)[1]
    except (NoteNotFoundError, PathRefusedError) as exc:
        if isinstance(exc, _NotMarkdownError):        # `src/Board.canvas`: the note made from that file
            try:
                resolve_note_path(vault_dir, f"{note}.md")
                return f"{note}.md"
            except (NoteNotFoundError, PathRefusedError):
                pass
        if warehouse_path is None:
            raise
        if not Path(warehouse_path).exists():
            if isinstance(exc, _NotMarkdownError) and not _on_disk(Path(vault_dir) / note):
                raise NoteNotFoundError(_unbuilt_name(Path(vault_dir), note, Path(warehouse_path))) from None
            raise
        # refused as a path (`.NET`, `C:\Windows tips`, `50%2F50`): only a note's title or alias may be written so
        # (the warehouse names the note's own vault path, which is read and checked as any other); a file of the
        # vault that is no note (an attachment's copy) is not read as a name either
        refused = isinstance(exc, PathRefusedError) and not isinstance(exc, _NotMarkdownError)
        file_here = isinstance(exc, _NotMarkdownError) and _on_disk(Path(vault_dir) / note)
        found, what = _notes_called(Path(warehouse_path), unicodedata.normalize("NFC", note),
                                    paths=not refused, names=not file_here)
        if len(found) == 1:
            return found[0]["vault_path"]
        if len(found) > 1:
            raise AmbiguousNoteError(_ambiguous(note, what, [f["vault_path"] for f in found])) from None
        if refused or file_here:
            raise
        files = _vault_files_named(Path(vault_dir), note)       # also `daily/x.md`, a source path of your file
        if files:
            whose = ("written by the build, not searched (a source's index of its notes)"
                     if all(_written_by_build(Path(vault_dir), f) for f in files[:3])
                     else "a file no build wrote (your own, not searched)")
            raise NoteNotFoundError(
                f"no note {note!r} among the built notes; the vault has {', '.join(files[:3])}, {whose}: read it "
                f"by that path, e.g. `docsvault read {_quoted(files[0])}` (the MCP read tool: path {_quoted(files[0])})") from None
        if not isinstance(exc, _NotMarkdownError):
            moved = _moved_path_error(exc, note, Path(warehouse_path))
            if moved is None:
                raise
            raise moved from None
        folders = _vault_folders_named(Path(vault_dir), note)
        if folders:
            raise NoteNotFoundError(
                f"no note {note!r}: it is a folder of the vault ({', '.join(f + '/' for f in folders[:3])}); list its "
                f"notes with the query `path:{folders[0]}/` (`docsvault search 'path:{folders[0]}/'` / the search tool)"
            ) from None
        if (unwrapped := _unwrapped(vault_dir, note, warehouse_path)) is not None:
            raise NoteNotFoundError(f"no note {note!r}: {unwrapped}") from None
        near = _close_names(Path(warehouse_path), note)
        if not near and "/" in note.strip("/"):     # a link by a path the note left: [[読書メモ/猫]] after a move
            near = _close_names(Path(warehouse_path), note.strip("/").rsplit("/", 1)[-1])
        near = _passable(Path(warehouse_path), near, note)
        raise NoteNotFoundError(_no_note(Path(warehouse_path), note, near)) from None


def _no_note(warehouse_path: Path, note: str, near: list[str]) -> str:
    """The "no note" line of a name no note has: the ``near`` names it probably meant, and, when only dangling
    links give it (``[[Tea]]`` copied from a note, no note called Tea), the notes that hold them (before session 46
    "use a vault_path from search results", as of a made-up name)."""
    hint = f"; did you mean {' or '.join(_quoted(n) for n in near)}?" if near else ""
    names = "title, alias or page URL" if _URL.match(note.partition("#")[0]) else "title or alias"
    head = f"no note {note!r}: no vault path, source path, note name, {names} is {note!r}"
    linkers = _dangling_linkers(warehouse_path, note)
    if linkers:
        return (f"{head}; it is a dangling link of {', '.join(linkers)} (a note no source has: create it, or fix the "
                f"link; `docsvault check-vault` lists every dangling link){hint}")
    return (f"{head}{hint + ' Else' if near else ';'} use a vault_path from search results (`docsvault search ...` / "
            "the search tool)")


def _dangling_linkers(warehouse_path: Path, note: str) -> list[str]:
    """The notes (vault paths, at most 3) whose dangling link targets ``note`` (a link as a note writes it, its
    heading or block and display text dropped: ``[[Tea#Green|tea]]`` is ``Tea``), or []."""
    from pipeline import warehouse as wh

    target = note.strip()
    if target.startswith("[[") and target.endswith("]]"):
        target = target[2:-2]
    target = target.split("|", 1)[0].split("#", 1)[0].strip()
    if not target:
        return []
    con = wh.connect(warehouse_path, read_only=True)
    try:
        return wh.dangling_linkers(con, unicodedata.normalize("NFC", target))
    finally:
        con.close()


def _moved_path_error(exc: Exception, note: str, warehouse_path: Path) -> NoteNotFoundError | None:
    """``exc`` (no note at the vault path ``note``) with "did you mean" the names close to its file name, when
    there are any: the vault path a note had before it moved or was renamed (a search hit copied earlier, an
    agent's memory) gets its name, as a link by an old path does; before session 44, no hint. None otherwise."""
    stem = note.strip("/").rsplit("/", 1)[-1]
    if not isinstance(exc, NoteNotFoundError) or not stem.lower().endswith(".md") or len(stem) <= 3:
        return None
    near = _passable(warehouse_path, _close_names(warehouse_path, stem[:-3]), note)
    text = str(exc)
    if not near or "; use a vault_path" not in text:
        return None
    return NoteNotFoundError(text.replace("; use a vault_path", f"; did you mean "
                                          f"{' or '.join(_quoted(n) for n in near)}? Else use a vault_path", 1))


def _passable(warehouse_path: Path, near: list[str], typed: str) -> list[str]:
    """``near`` (:func:`_close_names`) as ``read`` takes them back: a name several notes have is their vault paths
    instead, only the one ``typed`` ends with when there is one (``vault/notes/Home.md``: ``notes/Home.md``). Before
    session 44 "did you mean 'Home'?" of two Home notes was, passed back, the error that 'Home' is several notes'."""
    typed = typed.strip().strip("/")
    out: list[str] = []
    for name in near:
        paths = [f["vault_path"] for f in _notes_called(warehouse_path, name, paths=True, names=True)[0]]
        if len(paths) <= 1:
            out.append(name)
        else:
            out += [p for p in paths if typed == p or typed.endswith("/" + p)] or paths[:3]
    return list(dict.fromkeys(out))


#: a web address: a docs page's URL (``notes.url``), read as the note made from that page
_URL = re.compile(r"https?://[^\s#]+\Z", re.IGNORECASE)

#: a search hit's ``continue_with`` passed whole as the path (``read(path="notes/ホーム.md", page=2)``), and a path
#: in quotes or backticks: what an agent copies with the path
_READ_CALL = re.compile(r"""read\(\s*path\s*=\s*(["'])(?P<path>.+?)\1\s*(?:,\s*page\s*=\s*(?P<page>\d+)\s*)?\)""")
_QUOTED = re.compile(r"""(["'`“「])(?P<path>.+)[”」"'`]""")


def _unwrapped(vault_dir: Path, note: str, warehouse_path: Path | None) -> str | None:
    """What to pass instead of ``note`` when it is a read call or a quoted path whose path is a note (``pass its
    arguments: path='notes/ホーム.md', page=2``), else None. Before session 43 an agent that passed a hit's
    ``continue_with`` as the path was told only that no note has that name."""
    call = _READ_CALL.fullmatch(note.strip())
    m = call or _QUOTED.fullmatch(note.strip())
    if m is None or _READ_CALL.fullmatch(m.group("path").strip()) or _QUOTED.fullmatch(m.group("path").strip()):
        return None                     # one layer only: '""…""' of 4,000 quotes would recurse as deep
    try:
        path = find_note(vault_dir, m.group("path"), warehouse_path)
    except PipelineError:
        return None
    page = f", page={call.group('page')}" if call and call.group("page") else ""
    what = "it is the read call itself; pass its arguments:" if call else "the quotes are no part of the path; pass"
    return f"{what} path={_quoted(path)}{page}"


def link_parts(note: str) -> tuple[str, str]:
    """``(note name, subpath)`` of ``note`` written as an Obsidian link, as an agent copies it from a note's text:
    ``[[Guide#Install|the install]]``, ``[[Guide#Install]]`` and ``Guide#Install`` give ``("Guide", "Install")``,
    ``Guide#^b1`` gives ``("Guide", "^b1")``, ``[[Guide|text]]`` ``("Guide", "")``; anything else is ``(note, "")``."""
    m = WIKILINK.fullmatch(note.strip().removeprefix("!"))       # ``[[Guide#Install|the install]]``, ``![[…]]``
    target = m.group(1) if m else note
    name, _, sub = target.partition("#")
    return name.strip(), sub.strip()


def _half_width_hash(note: str) -> str:
    """``note`` with an IME's full-width ``＃`` as ``#`` when it is no link as written (``吾輩は猫である＃感想``:
    before, "no note", the heading lost; helper s49-ja); else ``note``."""
    return note.replace("\uff03", "#") if "\uff03" in note and not link_parts(note)[1] else note


def find_link(vault_dir: Path, note: str, warehouse_path: Path | None = None) -> tuple[str, str]:
    """``(vault path, subpath)`` of ``note``: :func:`find_note`'s note with no subpath; else, when no note has
    that name and ``note`` is an Obsidian link (:func:`link_parts`: ``Guide#Install``, ``[[Guide#Install|text]]``),
    the note it links to and the ``#heading`` or ``#^block`` it names (a vault path has no ``#``: the vault
    writes it as ``-``); a full-width ``＃`` as an IME types it (``吾輩は猫である＃感想``) is one too. A title or
    alias with ``#`` (or ``＃``) in it (``C# tips``) is found as written first.

    Raises:
        As :func:`find_note`; a link to no note raises the error of the note's name (``no note 'Guide'``);
        PathRefusedError: ``note`` is longer than :data:`MAX_NOTE_ARG_CHARS`.
    """
    if isinstance(note, str) and len(note) > MAX_NOTE_ARG_CHARS:
        raise _refuse(note, f"it is {len(note):,} characters; a vault path, note name, title, alias or link is "
                            f"at most {MAX_NOTE_ARG_CHARS:,}")
    try:
        return find_note(vault_dir, note, warehouse_path), ""
    except NoteNotFoundError as exc:
        name, sub = link_parts(_half_width_hash(note))
        # `[[Guide]]` whole is compared as a title too (punctuation ignored), which several notes may share;
        # the link's own name then decides, as Obsidian resolves the link (a `C# tips` title stays as written)
        bracketed = note.strip().removeprefix("!").startswith("[[")
        if not name and sub and not isinstance(exc, AmbiguousNoteError):
            # `[[#Fixed-Point Decimals|DECIMAL]]`, copied from a page's text: a link into the note that writes it,
            # which names no note (before session 46, "no note" with nothing more)
            raise NoteNotFoundError(
                f"no note {note!r}: a link that starts with # points into the note it is written in; put that "
                f"note's vault path or name before the #, e.g. {_quoted('Note#' + sub)} (the path the page was "
                "read by)") from None
        if (isinstance(exc, AmbiguousNoteError) and not bracketed) or not name or (name, sub) == (note, ""):
            raise
    return find_note(vault_dir, name, warehouse_path), sub


def subpath_offset(body: str, subpath: str) -> int | None:
    """Body offset of the line a link's subpath names, as Obsidian opens it: ``^id`` the line ending in that block
    id, ``A#B`` the heading B after the heading A (headings outside fenced code, compared as
    :func:`pipeline.index.graph.heading_key` compares them: punctuation as spaces, case ignored); None when the
    note has no such heading or block."""
    from pipeline.index.graph import heading_key

    blocks = fenced_blocks(body)
    if subpath.startswith("^"):
        want = re.compile(rf"[ \t]\^{re.escape(subpath[1:])}[ \t]*$|^\^{re.escape(subpath[1:])}[ \t]*$",
                          re.MULTILINE | re.IGNORECASE)
        for m in want.finditer(body):
            if _block_at(blocks, m.start()) is None:
                return body.rfind("\n", 0, m.start() + 1) + 1
        return None
    at = None
    pos = 0
    for part in (p for p in subpath.split("#") if p.strip()):
        want_key = heading_key(part)
        at = next((m.start() for m in _HEADING.finditer(body, pos)
                   if _block_at(blocks, m.start()) is None and heading_key(m.group(2)) == want_key), None)
        if at is None and (want_slug := heading_slug(part)):     # a web page's #anchor: `…/flows#running-a-flow`
            at = next((m.start() for m in _HEADING.finditer(body, pos)
                       if _block_at(blocks, m.start()) is None and heading_slug(m.group(2)) == want_slug), None)
        if at is None:
            return None
        pos = at + 1
    return at


def read_link(vault_dir: Path, note: str, page: int = 1, warehouse_path: Path | None = None,
              size: int = PAGE_CHARS) -> NotePage:
    """:func:`read_note` of the note :func:`find_link` finds, at ``page``; page 1 (the default) of a link with a
    ``#heading`` or ``#^block`` is the page where that heading or block starts (``read('Guide#Install')`` opens
    Install's page; page 1 when the note has no such heading)."""
    vault_path, sub = find_link(vault_dir, note, warehouse_path)
    warning = ""
    if sub:
        body = note_body(vault_dir, vault_path)[1]
        at = subpath_offset(body, sub)
        if page == 1 and at is not None:
            page = page_of(paginate(body, size), at)
        if at is None:
            warning = subpath_missing(body, link_parts(_half_width_hash(note))[0], vault_path, sub, page)
    pg = read_note(vault_dir, vault_path, page, size)
    return replace(pg, warning=warning) if warning else pg


#: at most this many headings (or block ids) are named when a link's heading is not found
CLOSEST_LISTED = 3
#: at most this many of the note's headings are named when none is close to the link's
LISTED_WHEN_NONE_CLOSE = 6


def _headings(body: str) -> list[str]:
    """The note's headings outside fenced code, as written (``Install: quickly``), in order, each once."""
    blocks = fenced_blocks(body)
    seen = [m.group(2).strip() for m in _HEADING.finditer(body) if _block_at(blocks, m.start()) is None]
    return list(dict.fromkeys(seen))


def _quoted(text: str) -> str:
    """``repr(text)``, but a space of another width (the ideographic space U+3000 of ``第１章　はじめに``, a no-break
    space) stays as written: the line's ``e.g. read '…'`` is to be copied back, and ``'第１章\\u3000はじめに'`` was not
    the heading (before session 43). Control and other invisible characters stay escaped."""
    shown = repr(text)
    for ch in {c for c in text if unicodedata.category(c) == "Zs" and not c.isprintable()}:
        shown = shown.replace(repr(ch)[1:-1], ch)
    return shown


def subpath_missing(body: str, name: str, vault_path: str, subpath: str, page: int) -> str:
    """The one line :func:`read_link` adds when the note has no heading (or block) ``subpath``: which one, in
    which note (``name`` as the link gave it and its ``vault_path``), the page shown instead, and the closest of
    its headings (or ``^block`` ids; :func:`_closest` on :func:`~pipeline.index.graph.heading_key`, ratio >= 0.5,
    of the heading or of its start) with the first written as a link to retry with (``e.g. read
    'Guide#Install'``); else its first headings (or block ids)."""
    from pipeline.index.graph import heading_key

    block = subpath.startswith("^")
    what = f"block {_quoted(subpath)}" if block else f"heading {_quoted(subpath)}"
    if block:
        blocks = fenced_blocks(body)
        have = list(dict.fromkeys(
            "^" + m.group(1) for m in re.finditer(r"(?:^|[ \t])\^([\w-]+)[ \t]*$", body, re.MULTILINE)
            if _block_at(blocks, m.start()) is None))
    else:
        have = _headings(body)
    # the note as the link named it and its vault path; once when the link gave the vault path
    named = _quoted(name) if name == vault_path else f"{_quoted(name)} ({vault_path})"
    where = f"{what} not found in {named}; showing page {page}"
    if not have:
        return f"{where}; the note has no {'block ids' if block else 'headings'}"
    # compared in NFKC: a heading typed in half-width katakana or full-width Latin (ｲﾝｽﾄｰﾙ, ＳＥＴＵＰ) is closest to
    # the one it spells (インストール), which the link does not reach (Obsidian compares headings as written)
    keys = {unicodedata.normalize("NFKC", heading_key(h) if not block else h.casefold()): h
            for h in reversed(have)}                                              # first one of a key wins
    want = unicodedata.normalize("NFKC", heading_key(subpath.split("#")[-1]) if not block else subpath.casefold())
    close = [keys[k] for k in _closest(want, list(keys), CLOSEST_LISTED, 0.5)]
    kind = "block ids" if block else "headings"
    if not close:                                   # nothing like it: the note's own, to pick from
        more = f" … ({len(have)} in all)" if len(have) > LISTED_WHEN_NONE_CLOSE else ""
        return f"{where}; its {kind}: " + ", ".join(map(_quoted, have[:LISTED_WHEN_NONE_CLOSE])) + more
    return (f"{where}; closest {kind}: " + ", ".join(map(_quoted, close))
            + f"; e.g. read {_quoted(name + '#' + close[0])}")


#: a heading's start as long as the wanted one counts as close at this ratio (:func:`_closest`)
PREFIX_CUTOFF = 0.75


def _closest(want: str, keys: list[str], n: int, cutoff: float) -> list[str]:
    """:func:`difflib.get_close_matches`, each key scored by the better of its ratio and that of its start as long
    as ``want`` (a heading written short or misspelled in its first words: ``Link to a blok`` is closest to ``Link
    to a block in a note``, which it begins, not to ``Link to a file``, which was offered first to retry with)."""
    import difflib
    import heapq

    m = difflib.SequenceMatcher()
    m.set_seq2(want)
    scored = []
    for key in keys:
        score = 0.0
        # the start counts only when close (0.75): short starts of unrelated headings share a few letters
        for seq, least in dict.fromkeys(((key, cutoff), (key[: len(want)], max(cutoff, PREFIX_CUTOFF)))):
            m.set_seq1(seq)
            if m.real_quick_ratio() >= least and m.quick_ratio() >= least and m.ratio() >= least:
                score = max(score, m.ratio())
        if score >= cutoff:
            scored.append((score, key))
    return [key for _, key in heapq.nlargest(n, scored)]


#: at most this many vault paths are listed for a name several notes have
AMBIGUOUS_LISTED = 10


def _ambiguous(note: str, what: str, paths: list[str]) -> str:
    """The message for ``note`` that several notes' ``paths`` match (``what`` they share): all the paths when
    at most :data:`AMBIGUOUS_LISTED`, else that many, how many more, and how to narrow the name (more of the
    path, e.g. ``stable/index`` for ``index``: a vault path ends in it)."""
    if len(paths) <= AMBIGUOUS_LISTED:
        return f"{note!r} is {what}; give one of the vault paths: " + ", ".join(paths)
    example = "/".join(paths[0].removesuffix(".md").split("/")[-2:])
    return (f"{note!r} is {what.replace('several', str(len(paths)))}: "
            + ", ".join(paths[:AMBIGUOUS_LISTED]) + f" and {len(paths) - AMBIGUOUS_LISTED} more; give more "
            f"of the path to narrow it (a vault path ends in it), e.g. {_quoted(example)}, or one whole vault path")


def _close_names(warehouse_path: Path, note: str, n: int = 3) -> list[str]:
    """The notes' names closest to a misspelled ``note`` (:func:`difflib.get_close_matches`, ratio >= 0.75,
    compared case-folded in NFKC, so a width apart is close both ways: ``カタカナ メモ`` -> ``ｶﾀｶﾅ メモ``, as tags
    and sources are offered (before session 49 only NFC: the vault path ``memo/カタカナ メモ.md`` of the note
    ``memo/ｶﾀｶﾅ メモ.md`` got no hint); else the one name of the same length one CJK character apart,
    :func:`pipeline.ingest.sources.one_cjk_apart`: ``日紀`` -> ``日記``): their titles, file names and aliases
    (:func:`pipeline.warehouse.note_names`), as ``read`` takes them; at most ``n``."""
    import difflib

    from pipeline import warehouse as wh
    from pipeline.ingest.sources import one_cjk_apart

    con = wh.connect(warehouse_path, read_only=True)
    try:
        every = wh.note_names(con)
    finally:
        con.close()
    names: dict[str, str] = {}                   # case-folded name -> as written
    for name in sorted(n for group in every.values() for n in group):
        names.setdefault(unicodedata.normalize("NFKC", name).casefold(), name)
    want = unicodedata.normalize("NFKC", note.strip()).casefold()
    close = difflib.get_close_matches(want, sorted(names), n=n, cutoff=0.75)
    if not close and (near := one_cjk_apart(want, sorted(names))):
        close = [near]
    return [names[k] for k in close]


def _vault_files_named(vault_dir: Path, note: str, limit: int = 50_000) -> list[str]:
    """Vault paths (sorted, POSIX) of the Markdown files anywhere in ``vault_dir`` whose name is ``note`` (with or
    without ``.md``; compared NFC and case-folded), or, for a name written with folders (``daily/2026-12-02``, as
    an Obsidian link names a note), whose vault path ends with it at a folder boundary; dot folders skipped, at
    most ``limit`` files looked at: what ``read`` names when no built note has that name (a user's own file in
    the vault is not in the warehouse)."""
    import os

    want = unicodedata.normalize("NFC", note.strip().strip("/")).casefold()
    want = want if want.endswith(".md") else want + ".md"
    parts = want.split("/")
    if not parts[-1].strip(".md") or any(p in ("", ".", "..") for p in parts):
        return []
    name = parts[-1]
    found: list[str] = []
    seen = 0
    root = resolve_path(vault_dir)
    for folder, dirs, names in os.walk(vault_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        seen += len(names)
        # a symlink out of the vault is refused by `read`: not named as a file to read (before session 40 it was,
        # and the command the error offered was then refused)
        found += [rel for n in names if unicodedata.normalize("NFC", n).casefold() == name
                  and (rel := Path(folder, n).relative_to(vault_dir).as_posix())
                  and (len(parts) == 1 or f"/{unicodedata.normalize('NFC', rel).casefold()}".endswith(f"/{want}"))
                  and resolve_path(Path(folder, n)).is_relative_to(root)]
        if seen >= limit:
            break
    return sorted(found)


def _vault_folders_named(vault_dir: Path, note: str) -> list[str]:
    """Vault paths (sorted) of the folders ``note`` names: ``note`` itself as a vault path (``memo/日記``), else a
    folder of that path in a source folder (``日記``, ``仕事/会議``): what ``read`` names instead of "no note" (an
    agent reads a folder to list it). Hidden folders and paths leaving the vault are none."""
    want = unicodedata.normalize("NFC", note.strip().strip("/"))
    parts = want.split("/")
    if not want or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return []
    if _on_disk(vault_dir / want, folder=True):
        return [want]
    try:
        sources = sorted(d.name for d in vault_dir.iterdir() if d.is_dir() and not d.name.startswith("."))
    except OSError:
        return []
    return [f"{src}/{want}" for src in sources if _on_disk(vault_dir / src / want, folder=True)]


def _written_by_build(vault_dir: Path, vault_path: str) -> bool:
    """Whether the build wrote the vault file ``vault_path`` (its source folder's manifest lists it: a source's
    ``_index.md``, which is no note of the warehouse), not the user."""
    from pipeline.ingest.ownership import load_manifest

    source, _, rel = vault_path.partition("/")
    return bool(rel) and rel in (load_manifest(vault_dir / source) or {})


def _unbuilt_name(vault_dir: Path, note: str, warehouse_path: Path) -> str:
    """Why ``note``, no vault path, opens nothing while there is no warehouse: names, titles, aliases and source
    paths are looked up there (before, ``read Home`` was refused as "only Markdown notes (.md) can be read");
    with the vault files of that name, the path to read instead."""
    files = _vault_files_named(vault_dir, link_parts(note)[0])
    instead = (f"read it by its vault path, e.g. {_quoted(files[0])}" if files
               else "give a note's vault path, e.g. 'source/folder/Note.md'")
    return (f"no note {note!r} at that vault path, and note names, titles and aliases are looked up in the "
            f"warehouse, which is not built (no warehouse at {warehouse_path}): run `docsvault build` first "
            f"(or the refresh tool), or {instead}")


def _exact_name(name: str) -> str:
    """A note name as compared exactly: NFC, surrounding whitespace dropped, case kept."""
    return unicodedata.normalize("NFC", name).strip()


def _notes_called(warehouse_path: Path, wanted: str, paths: bool, names: bool) -> tuple[list[dict[str, str]], str]:
    """The notes :func:`find_note` finds for ``wanted`` in the warehouse, first kind that finds any: a source
    path (when ``paths``); an Obsidian link name (when ``paths``), then a title, source file name or alias
    (when ``names``), each first as written (case-sensitive) and then case-folded (as search names pages);
    with what several of them would be, for the ambiguity message."""
    from pipeline import warehouse as wh
    from pipeline.search.searcher import name_key

    found: list[dict[str, str]] = []
    what = ""
    many = 100_000                                         # every note of that name: the message counts them
    con = wh.connect(warehouse_path, read_only=True)
    try:
        if paths:
            found, what = wh.notes_by_source_path(con, wanted), "a source path in several sources"
        if paths and not found and "/" in wanted:
            # a hit's `source` and `source_path` joined (prefect/concepts/caching.mdx): that source's note
            source, rest = wanted.split("/", 1)
            found = [n for n in wh.notes_by_source_path(con, rest) if n["source"] == source]
        if paths and not found and not wanted.lower().endswith(".md"):
            # a link by its path in the source, `[[DuckDB 入門]]` for the root's DuckDB 入門.md, is that note, as
            # Obsidian resolves it, also when Ideas/DuckDB 入門.md shares its name (before, "several notes")
            found = wh.notes_by_source_path(con, wanted + ".md")
        # a name as written (case and all) wins over one that matches only case-folded: `read abc` opens the
        # source's abc.md (written as `abc (2).md`, its vault name taken by ABC.md), `read ABC` opens ABC.md
        if paths and names and not found:                  # a name, as an Obsidian link: `read Home`
            found = wh.notes_by_name(con, wanted, many, case_sensitive=True)
            what = "the name of several notes"
        if names and not found:                            # a title, source file name or alias, exactly
            found = wh.notes_named(con, wanted, _exact_name, many)
            what = "the title or alias of several notes"
        if paths and names and not found:                  # the same, case-insensitively
            found, what = wh.notes_by_name(con, wanted, many), "the name of several notes"
        if names and not found:                            # a title or alias, as search names: `read Foo`
            found, what = wh.notes_named(con, wanted, name_key, many), "the title or alias of several notes"
        if paths and not found and _URL.match(wanted):     # a docs page's URL: the note made from that page
            found, what = wh.notes_by_url(con, wanted, many), "the URL of several notes"
    finally:
        con.close()
    return found, what
