"""Capture: write what a person or an agent learned as a new note into a local "capture" source.

The capture source is a ``local`` source of sources.yaml, named by ``--source`` / the MCP tool's ``source``, else by
``DOCSVAULT_CAPTURE_SOURCE``; only a source whose next build reads the note is taken (:func:`capture_problem`: not
a ``format: html`` source, nor git/llms_txt/html ones, nor one whose ``include``/``exclude`` leave the note out),
and nothing is written otherwise. A note is written as ``<first root of the source>/<name>.md``, never anywhere else:
the name is one file name (no ``/``, ``\\``, ``..``, leading ``.``, control or ``:*?"<>|`` characters, at most
:data:`MAX_NAME_CHARS`), the resolved file must be inside the root, and an existing file is never overwritten (the
file is created exclusively). Frontmatter (``created``, ``agent``, ``status: raw``, ``correlation_id``,
``related``, ``tags``) comes first, the text after it: under a ``# <title>`` heading when a title is given and the
text does not start with a level-1 heading, without leading blank lines, ending with exactly one newline. A text
that starts with its own frontmatter block has it merged into the note's (:func:`merge_frontmatter`), never written
as a second block.

The vault path returned (``Captured.vault_path``) is the one the next build gives the note: the vault stage's own
naming (:func:`pipeline.ingest.normalize.assign_rel_paths` over the source's files and the new one), so a name the
vault has to change (too long in UTF-8 bytes, ``#^[]``…) is reported as the vault has it; a name derived from the
title is one the vault keeps unchanged, and a name that would collide in the vault with another note is refused.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from pipeline.common.display import char_start, one_line
from pipeline.common.errors import PipelineError
from pipeline.common.frontmatter import kept_originals
from pipeline.common.markdown import EMBED, IMAGE, LINK, WIKILINK, split_tag_list, wikilink_text
from pipeline.config import env_value, resolve_path
from pipeline.models import Source

__all__ = [
    "MAX_CORRELATION_CHARS",
    "MAX_NAME_BYTES",
    "MAX_NAME_CHARS",
    "MAX_TEXT_CHARS",
    "CaptureError",
    "Captured",
    "capture_problem",
    "capture_source",
    "capture_targets",
    "check_name",
    "decode_text",
    "folders_as_spelled",
    "merge_frontmatter",
    "name_from_title",
    "related_link",
    "split_text",
    "title_of",
    "vault_rel_path",
    "write_capture",
]

MAX_NAME_CHARS = 120           # file name length without ``.md``
MAX_TEXT_CHARS = 1_000_000     # a captured note's text (chars)
MAX_CORRELATION_CHARS = 200    # a correlation id (chars): it is written in the frontmatter and returned
ENV_SOURCE = "DOCSVAULT_CAPTURE_SOURCE"
_UNSAFE = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|]')


class CaptureError(PipelineError):
    """A capture that cannot be written (no capture source, unsafe or taken name, empty text)."""


@dataclass(frozen=True)
class Captured:
    """A written note: ``path`` (the file), ``source``, ``vault_path`` (the path the source's next build gives it
    in the vault, for ``read``: ``<source>/<name>.md`` unless the vault has to shorten or clean the name),
    ``correlation_id``, ``related`` (vault paths)."""

    path: Path
    source: str
    vault_path: str
    correlation_id: str
    related: tuple[str, ...]
    warning: str = ""          # the build's line for a name no [[link]] reaches (``C# tips``), "" for most


def _root_path(source: Source, fname: str) -> str:
    """The source path a note ``<fname>.md`` in the source's first root gets when the source is listed (with the
    root's folder name in front when the source has several roots, as :func:`pipeline.ingest.fetch.local.fetch_local`
    names it)."""
    rel = f"{fname}.md"
    return f"{unicodedata.normalize('NFC', source.path[0].name)}/{rel}" if len(source.path) > 1 else rel


def capture_problem(source: Source, fname: str = "Note") -> str | None:
    """Why a note ``<fname>.md`` written into ``source`` would never be searchable (one clause naming the source,
    its kind and format), or None when it would be read by the source's next build.

    A note goes into a ``local`` source's first root; it is read only when the source's ``include``/``exclude``
    (default: Markdown files; ``*.html``/``*.htm`` for ``format: html``) select it and it is not in an Obsidian
    vault's templates folder it leaves out (:func:`pipeline.ingest.fetch.base.left_out_templates`). git, llms_txt and html sources
    are fetched from elsewhere: a file written into their copy is never read.
    """
    from pipeline.ingest.fetch.base import left_out_templates, select_default, select_paths

    fmt = source.format or "auto"
    if source.kind != "local" or not source.path:
        return (f"capture source {source.name!r} is kind {source.kind}, format {fmt}: its files come from "
                f"{source.url or 'elsewhere'}, notes are captured into a local Markdown source only")
    where = _root_path(source, fname)
    if select_paths(source, [where]):
        return None
    if folder := next((t for t in left_out_templates(source) if where.startswith(f"{t}/")), None):
        return (f"capture source {source.name!r} (kind local, format {fmt}) leaves out {folder + '/'!r}, the Obsidian "
                f"vault's templates folder (.obsidian/templates.json or Templater's templates_folder), where "
                f"{where!r} would be, so the note would never be searchable")
    if not source.include and source.format == "html":
        return (f"capture source {source.name!r} is kind local, format html: it reads only "
                f"{'/'.join(select_default(source))} files, so a captured Markdown note would never be searchable")
    return (f"capture source {source.name!r} (kind local, format {fmt}) does not read {where!r} "
            f"(include={list(source.include) or list(select_default(source))}, exclude={list(source.exclude)}), "
            "so the note would never be searchable")


def capture_targets(sources: Sequence[Source]) -> list[str]:
    """Names of the sources a note can be captured into (:func:`capture_problem` finds nothing), in sources.yaml
    order."""
    return [s.name for s in sources if capture_problem(s) is None]


def _targets_line(sources: Sequence[Source]) -> str:
    targets = capture_targets(sources)
    return ", ".join(targets) if targets else "none: add a local Markdown source to sources.yaml"


def capture_source(sources: Sequence[Source], name: str | None = None, arg: str = "--source NAME") -> Source:
    """The local source notes are captured into: ``name``, else ``$DOCSVAULT_CAPTURE_SOURCE``. ``arg``: how the
    caller's user passes a source, for the error (``--source NAME`` in the CLI, ``source`` in MCP). Every error
    lists the sources that can take a capture (:func:`capture_targets`); one about the variable's source names
    the variable and ``arg`` (before session 44 an MCP agent was told "unknown capture source 'nope'" of a name
    it never passed).

    Raises:
        CaptureError: none named, unknown, or a source a captured Markdown note would not be read from (not
            ``local``, ``format: html``, or an ``include``/``exclude`` that leaves out ``<name>.md`` in its first
            folder: :func:`capture_problem`).
    """
    from_env = not name
    name = name or env_value(ENV_SOURCE).strip() or None
    if not name:
        targets = capture_targets(sources)
        raise CaptureError(f"no capture source: set {ENV_SOURCE} to a local source of sources.yaml "
                           f"({', '.join(targets) or 'none yet: add one'}) or pass {arg}")
    # a name the caller did not give (the server's or shell's variable) is said to be the variable's, with the
    # way around it: an agent told "unknown capture source 'nope'" never passed 'nope'
    whose = f" (set in {ENV_SOURCE}; fix it, or pass {arg})" if from_env else ""
    found = next((s for s in sources if s.name == name), None)
    if found is None:
        raise CaptureError(f"unknown capture source {name!r}{whose}; sources that can take a capture: "
                           f"{_targets_line(sources)}")
    problem = capture_problem(found)
    if problem:
        raise CaptureError(f"{problem}{whose}; sources that can take a capture: {_targets_line(sources)}")
    return found


MAX_NAME_FOLDERS = 4           # folders a captured note's name may put it in (``daily/2026/12/04``)


#: bytes a file or folder name may have on Linux and macOS (NAME_MAX); a longer one is ENAMETOOLONG
MAX_NAME_BYTES = 255


def _name_bytes_problem(parts: list[str], name_option: str) -> str | None:
    """The error of the first part of a name whose UTF-8 bytes (the file's with ``.md``) no file system takes: 120
    Japanese characters are 360 bytes, so a name within :data:`MAX_NAME_CHARS` failed with the OS's "File name too
    long" (session 41); None when every part fits."""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        size = len((part + ".md" if last else part).encode("utf-8"))
        if size > MAX_NAME_BYTES:
            shown = part if len(part) <= 40 else part[:37] + "..."
            what = "file name" if last else "folder name"
            return (f"note name too long: the {what} {shown!r} is {size} bytes in UTF-8{' with .md' if last else ''} "
                    f"({len(part)} characters), more than the {MAX_NAME_BYTES} a file system takes (about "
                    f"{(MAX_NAME_BYTES - (3 if last else 0)) // 3} Japanese characters); pass a shorter {name_option} "
                    "(nothing was written)")
    return None


def check_name(name: str, name_option: str = "--name") -> str:
    """A safe note name (without ``.md``; a trailing ``.md`` is dropped): a file name, or folders of the source
    and a file name joined by ``/`` (``daily/2026-12-04``: the note goes into that folder, made when missing), at
    most :data:`MAX_NAME_FOLDERS` folders.

    Raises:
        CaptureError: empty, too long (over :data:`MAX_NAME_CHARS` characters, or a part over :data:`MAX_NAME_BYTES`
            UTF-8 bytes), an absolute path or one with an empty, ``.``/``..`` or hidden (leading ``.``)
            part, ``\\``, or holding control or ``:*?"<>|`` characters.
    """
    raw = name
    name = unicodedata.normalize("NFC", name.strip())
    if name.lower().endswith(".md"):
        name = name[:-3].rstrip()
    if not name:
        raise CaptureError("the note name is empty: pass --name or a title")
    shown = raw if len(raw) <= 80 else raw[:77] + "..."
    parts = name.split("/")
    if len(parts) > MAX_NAME_FOLDERS + 1 or any(not p.strip() or p != p.strip() for p in parts) \
            or any(_UNSAFE.search(p) or ".." in p for p in parts):
        raise CaptureError(f"unsafe note name {shown!r}: a name is a file name, or up to {MAX_NAME_FOLDERS} folders "
                           "and a file name joined by / (daily/2026-12-04), without \\ .. : * ? \" < > | or control "
                           "characters, no part empty or with spaces around it")
    if any(p.startswith(".") for p in parts):
        raise CaptureError(f"unsafe note name {shown!r}: hidden names (a leading '.') are not notes")
    if len(parts[-1]) > MAX_NAME_CHARS:
        raise CaptureError(f"note name too long ({len(parts[-1])} chars, at most {MAX_NAME_CHARS}): pass a shorter "
                           f"{name_option}")
    if problem := _name_bytes_problem(parts, name_option):
        raise CaptureError(problem)
    return name


_NAME_END = re.compile(r"[\s.\-。？]+$")


def name_from_title(title: str) -> str:
    """A file name from a title that the vault keeps as it is: characters unsafe in a file name or a vault path
    (``/ \\ : * ? " < > |``, ``# ^ [ ]``, control and invisible characters) become ``-``, whitespace collapses, a
    trailing sentence end (``.``, ``。``, ``？``) is dropped, at most :data:`MAX_NAME_CHARS` characters and at most
    :data:`pipeline.ingest.normalize.MAX_COMPONENT_BYTES` UTF-8 bytes with ``.md`` (longer names would get a hash
    in the vault), ``_`` after a Windows device name (``CON``…) as the vault adds it."""
    from pipeline.ingest.normalize import _ILLEGAL, _RESERVED, MAX_COMPONENT_BYTES

    name = _ILLEGAL.sub("-", _UNSAFE.sub("-", unicodedata.normalize("NFC", plain_title(title) or title)))
    name = _NAME_END.sub("", re.sub(r"\.{2,}", ".", one_line(name))).lstrip(" .-")
    budget = MAX_COMPONENT_BYTES - len(".md")
    name = name[:MAX_NAME_CHARS].encode("utf-8")[:budget].decode("utf-8", "ignore")
    name = _NAME_END.sub("", name)
    if name and name.split(".")[0].upper() in _RESERVED:
        name += "_"
    return name


_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")       # a thematic break (``---``) is no title
# a sentence ends at . ! ? followed by a space or the line's end, or at 。！？ (no space follows them in Chinese or
# Japanese), closing brackets or quotes after them included; the terminator stays in the title
_SENTENCE = re.compile(r"(.+?(?:[.!?](?=\s|$)|[。！？]+[」』）〕】]*))")


def title_of(text: str) -> str:
    """The title of a text: the ``title`` of its own frontmatter block (:func:`split_text`), else its first
    Markdown heading, else the first sentence of its first non-empty line (``First one. Second`` -> ``First
    one.``, ``日本語のメモ。カワウソは…`` -> ``日本語のメモ。``); a heading or sentence is at most 80 chars, a longer
    one cut at a word boundary and ended with ``…``."""
    fm, body = split_text(text, strict=False)
    return _fm_title(fm) or _title_of_body(body)


def _fm_title(fm: dict[str, Any]) -> str:
    """The frontmatter's ``title`` as one line, "" when it has none (or not a string or number)."""
    value = fm.get("title")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return ""
    return one_line(str(value))


_ATX = re.compile(r"^#{1,6}\s+(.+?)(?:\s+#+)?\s*$")     # closing #s after a space: `# Learn C#` is `Learn C#`


def _heading_of_body(text: str) -> str:
    """The first heading of a text without frontmatter, as :func:`plain_title` shows it ("" when none)."""
    heading = next((t for m in map(_ATX.match, text.splitlines()) if m and (t := plain_title(m.group(1)))), "")
    return _cut_title(heading) if heading else ""


def _title_of_name(name: str | None) -> str:
    """The title a note ``name`` gives when the text has none of its own: its file name, as Obsidian titles a
    note (``daily/2026-12-04`` -> ``2026-12-04``; before, the text's first sentence, so a daily note saved
    as ``今日は晴れ。…`` was titled ``今日は晴れ。`` beside daily notes titled by their date); "" without a name."""
    return one_line((name or "").replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".md"))


def _title_of_body(text: str) -> str:
    """:func:`title_of` of a text without frontmatter: the first heading, else the first sentence of the first line,
    as :func:`plain_title` shows them (a heading or line that is only an embed is passed over)."""
    heading = _heading_of_body(text)
    if heading:
        return heading
    lines = text.splitlines()
    first = next((t for ln in lines if ln.strip() and not _RULE.match(ln) and not _ATX.match(ln)
                  and (t := plain_title(ln))), "") \
        or next((ln.strip() for ln in lines if ln.strip() and not _RULE.match(ln)), "")
    sentence = _SENTENCE.match(first)
    return _cut_title(sentence.group(1) if sentence else first)


#: inline Markdown a title shows as its text: embeds and images (gone), wikilinks (their text), links, bold, code
_TITLE_MARKUP: tuple[tuple[re.Pattern[str], Any], ...] = (
    (EMBED, " "),
    (IMAGE, " "),
    (WIKILINK, wikilink_text),
    (LINK, r"\1"),
    (re.compile(r"(\*\*|~~)(?=\S)(.+?)(?<=\S)\1"), r"\2"),      # not __ or ==: `__init__.py`, `x==1 or y==2`
    (re.compile(r"(`+)(.+?)\1"), r"\2"),
)


def plain_title(text: str) -> str:
    """``text`` (a heading or a first line) as a title shows it: ``[[ウィンドウ関数]] の復習`` -> ``ウィンドウ関数 の復習``,
    ``[[a#b|text]]`` -> ``text``, ``[x](url)`` -> ``x``, ``**bold**``, ``~~del~~`` and `` `code` `` as their
    text, embeds and images dropped; whitespace collapsed. Before, a first line ``[[ウィンドウ関数]] の復習``
    was titled with its brackets and named ``ウィンドウ関数-- の復習.md``."""
    for pattern, repl in _TITLE_MARKUP:
        text = pattern.sub(repl, text)
    return one_line(text)


def split_text(text: str, *, strict: bool = True) -> tuple[dict[str, Any], str]:
    """``(frontmatter, rest)``: the text's own YAML frontmatter block and the text after it, as a note file's
    frontmatter is read (:func:`pipeline.common.frontmatter.split_frontmatter`: line 1 ``---``, closed by the next
    ``---`` or ``...`` line; leading blank lines and a BOM before it are ignored). ``({}, text)`` when the text has
    none (its leading BOM dropped); an opening ``---`` never closed is a thematic break, kept as text.

    Raises:
        CaptureError: ``strict`` and the block is not valid YAML or not a mapping (one line naming the line of the
            text); without ``strict`` the text is returned as it is then.
    """
    from pipeline.common.errors import NoteError
    from pipeline.common.frontmatter import normalize_newlines, split_frontmatter

    text = text.lstrip("\ufeff")  # a file saved with a BOM (Windows Notepad): it hid the text's `# heading`
    lead = normalize_newlines(re.sub(r"\A(?:[ \t]*(?:\r\n|\r|\n))+", "", text))
    if not (lead.startswith("---\n") or lead == "---"):
        return {}, text
    if not any(line.rstrip(" \t") in ("---", "...") for line in lead.split("\n")[1:]):
        return {}, text
    try:
        return split_frontmatter(lead, "the text")
    except NoteError as exc:
        if not strict:
            return {}, text
        raise CaptureError(f"{' '.join(str(exc).split())} (nothing was written)") from None


#: a character that is no part of a word: whitespace or ASCII punctuation (Markdown marks: ``---``, ``#``); any
#: other punctuation (Unicode category P: ``。、「」・…？！``) is none either (:func:`_no_word`)
_NO_WORD = re.compile(r"[\s!-/:-@\[-`{-~]")


def _no_word(c: str) -> bool:
    """Whether ``c`` is no part of a word: :data:`_NO_WORD`, or punctuation of any script (a Japanese memo of
    ``。。。`` or ``？`` has no word, as ``---`` has none; an emoji is a word: ``🦦`` is a note)."""
    return bool(_NO_WORD.match(c)) or unicodedata.category(c).startswith("P")


def decode_text(data: bytes, where: str) -> str:
    """The bytes of a text to capture (a file, stdin) as text: UTF-8, a leading BOM dropped, line ends ``\\n`` (as
    Python's text mode reads them: ``\\r\\n`` and ``\\r`` too).

    Raises:
        CaptureError: NUL bytes (binary data) or not UTF-8 (the byte, and how to convert a Shift_JIS text); one
            line naming ``where`` (``memo.txt``, ``the text on stdin``). Before, Shift_JIS piped to ``capture``
            ended in a traceback.
    """
    if b"\x00" in data:
        raise CaptureError(f"{where}: binary data (it holds NUL bytes), not a note's text (nothing was written)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CaptureError(f"{where}: not valid UTF-8 (byte {exc.start}: {exc.reason}); convert it to UTF-8 first, "
                           "e.g. `iconv -f SHIFT_JIS -t UTF-8` (nothing was written)") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")   # as text-mode reads give it


#: what an empty text is told to give (`capture "　"`, a full-width space alone, said only "the text is empty")
GIVE_TEXT = ("give the note's text (`docsvault capture TEXT`, `--file FILE` or piped stdin; the save_note tool's "
             "text)")


def check_text(text: str) -> tuple[dict[str, Any], str]:
    """``(frontmatter, rest)`` of a text to capture (:func:`split_text`) once it is known to say something.

    Raises:
        CaptureError: an empty or blank text ("nothing to capture: the text is empty"), one over
            :data:`MAX_TEXT_CHARS`, a frontmatter block that is not valid YAML or not a mapping, or a text
            with no words once its frontmatter block is taken off: only whitespace and punctuation
            (``---``, ``。。。``, a block and nothing after it), or one holding a NUL character (binary data, as
            :func:`decode_text` refuses a file's: the build skips such a file, so MCP's ``save_note`` wrote a note
            no search finds and answered ``searchable: true``); nothing is written then.
    """
    if not text or not text.strip():
        raise CaptureError(f"nothing to capture: the text is empty; {GIVE_TEXT}")
    if "\x00" in text:
        raise CaptureError(f"the text holds a NUL character (at character {text.index(chr(0))}): binary data, not a "
                           "note's text; drop it (nothing was written)")
    if len(text) > MAX_TEXT_CHARS:
        raise CaptureError(f"the text is {len(text)} chars, more than the {MAX_TEXT_CHARS}-char cap of a "
                           "captured note")
    text_fm, rest = split_text(text)
    if not rest.strip() and not text_fm:
        raise CaptureError(f"nothing to capture: the text is empty; {GIVE_TEXT}")
    if all(_no_word(c) for c in rest):
        marks = " ".join(rest.split())
        besides = " besides its frontmatter" if text_fm else ""
        what = (f"has no words{besides}, only {_cut_title(marks, 20)!r}" if marks else
                "is only a frontmatter block")
        raise CaptureError(f"nothing to capture: the text {what}; write the note's text "
                           "(nothing was written)")
    return text_fm, rest


def _cut_title(title: str, limit: int = 80) -> str:
    """``title`` when at most ``limit`` chars, else cut at the last space before the limit (or at the limit, never
    between a kana and its voiced mark: a first line copied in NFD was titled ``…ト…`` for ``…ド``) + ``…``."""
    if len(title) <= limit:
        return title
    cut = title[: char_start(title, limit - 1)]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:-") + "…"


def _source_files(source: Source) -> dict[str, Path]:
    """Source path -> file of the files a build of the local ``source`` reads now (as
    :func:`pipeline.ingest.fetch.local.fetch_local` lists and selects them: source paths NFC, the file as named on
    disk, e.g. in NFD); a root that cannot be listed is left out (its build fails anyway)."""
    from pipeline.ingest.fetch.base import select_paths
    from pipeline.ingest.fetch.local import _walk_root

    multi = len(source.path) > 1
    files: dict[str, Path] = {}
    for root in source.path:
        prefix = unicodedata.normalize("NFC", Path(root).name)
        try:
            found = _walk_root(resolve_path(Path(root)), [], source.name)
        except (PipelineError, OSError):
            continue
        files.update({(f"{prefix}/{rel}" if multi else rel): path for rel, path in found.items()})
    return {sp: files[sp] for sp in select_paths(source, files)}


def vault_rel_path(source: Source, fname: str, name_option: str = "--name") -> str:
    """The path inside ``vault/<source>/`` that the source's next build gives a new note ``<fname>.md`` in its first
    folder: the vault stage's own naming (:func:`pipeline.ingest.normalize.assign_rel_paths` over the source's
    files and the new one), e.g. a name over :data:`pipeline.ingest.normalize.MAX_COMPONENT_BYTES` UTF-8 bytes cut
    with a hash, ``#`` turned into ``-``.

    Raises:
        CaptureError: the note would not get its own vault path (an existing note has it, ignoring case, or would
            have to give it up: ``a#b.md`` is ``a-b.md`` in the vault; or its file name is ``<fname>.md`` in another
            Unicode normalization, e.g. NFD as macOS writes it, which the build reads as the same name and skips
            one of the two): nothing is written then.
    """
    from pipeline.ingest.fetch.local import _form
    from pipeline.ingest.normalize import assign_rel_paths, rel_path_for

    mine = _root_path(source, fname)
    rel = rel_path_for(mine)
    files = _source_files(source)
    same = files.get(mine)                     # the source path is NFC: an NFD-named file has the new note's one
    if same is not None and same.name != f"{PurePosixPath(fname).name}.md":     # fname may hold folders
        raise CaptureError(f"a note named {fname + '.md'!r} would collide in the vault with {same.name!r} (the "
                           f"same name in {_form(same.name)} form, {ascii(same.name)[1:-1]}; vault path "
                           f"{source.name}/{assign_rel_paths(list(files))[mine]}): pass another {name_option} "
                           "(nothing was written)")
    existing = [sp for sp in files if sp != mine]
    if not existing:
        return rel
    before = assign_rel_paths(existing)
    after = assign_rel_paths([*existing, mine])
    if after[mine] == rel and all(after[sp] == before[sp] for sp in existing):
        return rel
    clash = next((sp for sp in existing if before[sp].casefold() == rel.casefold()), None) or \
        next((sp for sp in existing if after[sp] != before[sp]), None) or \
        next((sp for sp in existing if before[sp].casefold() == after[mine].casefold()), existing[0])
    raise CaptureError(f"a note named {fname + '.md'!r} would collide in the vault with {clash!r} (vault path "
                       f"{source.name}/{before[clash]}): pass another {name_option} (nothing was written)")


#: capture's own keys that replace the text's frontmatter values (they record this capture); a differing value of
#: the text stays as ``original_<key>``
CAPTURE_KEYS = ("title", "created", "agent", "status", "correlation_id")
#: the ``status`` every captured note is saved with (the user or an agent changes it once the note is worked on)
CAPTURE_STATUS = "raw"


def _as_list(value: Any) -> list[str] | None:
    """A frontmatter list value (``tags``, ``related``) as strings: None -> [], a scalar -> [it]; None when it is
    no list (a mapping, a nested list)."""
    if value is None:
        return []
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) or v is None for v in value):
        return [str(v) for v in value if v is not None and not isinstance(v, bool)]
    return None


def related_link(vault_path: str, source: str) -> str:
    """A related note's vault path as the wikilink the ``related`` property holds, as an Obsidian user writes a
    link property (``related: ["[[Note]]"]``, which Obsidian shows as a link and counts as one): the note's path
    without ``.md``, from the vault root for another source's note (``duckdb/data/overview.md`` ->
    ``[[duckdb/data/overview]]``, which resolves in docsvault's vault) and from the source's own root for a note of
    the capture source itself (``inbox/sub/Otter.md`` -> ``[[sub/Otter]]``, which resolves in the user's own vault
    and, by its end, in docsvault's). A path a wikilink cannot hold (``|``, ``[``, ``]``) stays a plain path.
    ``read`` and ``related`` take either form."""
    rel = vault_path.removeprefix(f"{source}/")
    target = rel[:-3] if rel.lower().endswith(".md") else rel
    return vault_path if re.search(r"[\[\]|#^\n]", target) or not target else f"[[{target}]]"


def _related_key(item: str) -> str:
    """What a ``related`` entry names, to tell a text's entry from one of capture's: ``[[a/b|x]]``, ``[[a/b]]``,
    ``a/b.md`` and ``a/b`` (a capture before links, or a path an agent wrote) are one note ``a/b``."""
    m = re.fullmatch(r"\s*\[\[([^\]|#]*)(?:#[^\]|]*)?(?:\|[^\]]*)?\]\]\s*", item)
    target = (m.group(1) if m else item).strip()
    return unicodedata.normalize("NFC", target[:-3] if target.lower().endswith(".md") else target).casefold()


def _new_related_links(related: Sequence[str], source: str, text_fm: dict[str, Any]) -> list[str]:
    """The vault paths ``related`` as the ``related`` property's wikilinks (:func:`related_link`), leaving out the
    notes the text's own ``related`` names already, in either form (a path of an older capture or a link)."""
    named = {_related_key(t) for t in _as_list(text_fm.get("related")) or ()}
    return [related_link(p, source) for p in related
            if not {_related_key(p), _related_key(related_link(p, source))} & named]


def merge_frontmatter(own: dict[str, Any], text_fm: dict[str, Any]) -> dict[str, Any]:
    """The note's frontmatter: capture's keys (``own``: title, created, agent, status, correlation_id, related,
    tags) first, then the text's own keys in their order.

    ``tags`` and ``related`` are merged (a ``tags`` string is its tags split at commas and whitespace, as Obsidian
    reads ``tags: a, b``): the text's entries first, then capture's (``--tag``, the search hits)
    that are not there yet (tags compared without ``#`` and case). The keys of :data:`CAPTURE_KEYS` are
    capture's; a text value that differs stays as ``original_<key>`` (unless the text has that key itself), so
    nothing of the text is lost. Every other key (``aliases``, ``description``…) is the text's, unchanged.
    """
    fm = {k: v for k, v in own.items() if k not in ("related", "tags")}
    replaced: dict[str, Any] = {}
    for key in ("related", "tags"):
        theirs, ours = _as_list(text_fm.get(key)), _as_list(own.get(key)) or []
        if key == "tags" and isinstance(text_fm.get(key), str):     # `tags: a, b` is two tags, as Obsidian reads it
            theirs = split_tag_list(text_fm[key])
        if theirs is None:                      # a mapping: cannot merge, capture's list wins, theirs is kept
            replaced[key] = text_fm[key]
            theirs = []
        norm = (lambda t: t.lstrip("#＃").casefold()) if key == "tags" else _related_key
        merged = list(theirs)
        seen = {norm(t) for t in merged}
        for item in ours:
            if norm(item) not in seen:
                merged.append(item)
                seen.add(norm(item))
        if merged:
            fm[key] = merged
    for key in CAPTURE_KEYS:
        value = text_fm.get(key)
        if value is None or key not in fm:
            continue
        same = _fm_title(text_fm) == fm[key] if key == "title" else value == fm[key]
        if not same:
            replaced[key] = value
    fm.update(kept_originals(text_fm, replaced))
    for key, value in text_fm.items():
        if key not in fm and key not in CAPTURE_KEYS and key not in ("related", "tags"):
            fm[key] = value
    return fm


def _starts_with_h1(text: str) -> bool:
    """True when the first block of ``text`` is a level-1 heading (``# Title``, or ``Title`` over ``===``) as
    CommonMark reads it (markdown-it-py); only the text up to the first blank line is parsed."""
    from markdown_it import MarkdownIt

    first = re.split(r"\n[ \t\r]*\n", text.lstrip("\r\n"), maxsplit=1)[0]
    tokens = MarkdownIt("commonmark").parse(first)
    return bool(tokens) and tokens[0].type == "heading_open" and tokens[0].tag == "h1"


def write_capture(source: Source, text: str, *, title: str | None = None, name: str | None = None,
                  agent: str = "docsvault capture", correlation_id: str | None = None,
                  related: Sequence[str] = (), tags: Sequence[str] = (), now: datetime | None = None,
                  name_option: str = "--name") -> Captured:
    """Write a captured note into the source's first root.

    Args:
        source: a local source that reads Markdown (:func:`capture_source`).
        text: the note's Markdown; a frontmatter block it starts with (:func:`split_text`) is merged into the
            note's frontmatter (:func:`merge_frontmatter`).
        title: the note's title (default: the ``title`` of the text's frontmatter, else its first heading, else
            ``name``'s file name (:func:`_title_of_name`), else the first sentence of its first line:
            :func:`title_of`); when given, a text that does not start with a
            level-1 heading gets ``# <title>`` on top.
        name: the file name (default: from the title, one the vault keeps unchanged: :func:`name_from_title`;
            checked by :func:`check_name`).
        agent: who wrote it (the model or agent name; ``agent`` in the frontmatter).
        correlation_id: ties the note to a conversation/run (default: a new UUID4 hex); at most
            :data:`MAX_CORRELATION_CHARS`.
        related: vault paths of related notes (the top search hits of the text); the frontmatter's ``related``
            holds them as wikilinks (:func:`related_link`), ``Captured.related`` as given.
        tags: frontmatter tags.
        now: the creation time (default: now, UTC).
        name_option: how the caller's interface passes ``name``, for the errors (``--name``; MCP: ```name```).

    Returns:
        What was written.

    Raises:
        CaptureError: empty or too long text, or one with no words besides its frontmatter
            (:func:`check_text`), a frontmatter block that is not valid YAML or not a mapping, unsafe
            or taken name (also one that collides in the vault: :func:`vault_rel_path`), a file that would land
            outside the root, or one the source would not read (:func:`capture_problem`: its
            ``include``/``exclude`` leave the name out).
    """
    if correlation_id and len(correlation_id) > MAX_CORRELATION_CHARS:
        raise CaptureError(f"the correlation id is {len(correlation_id):,} characters; at most "
                           f"{MAX_CORRELATION_CHARS} (nothing was written)")
    text_fm, text = check_text(text)
    heading = bool(title and title.strip())
    title = one_line(title or "") if heading else (
        _fm_title(text_fm) or _heading_of_body(text) or _title_of_name(name) or _title_of_body(text))
    fname = check_name(name, name_option) if name else check_name(name_from_title(title) or "capture")
    root = resolve_path(source.path[0])
    if not root.is_dir():
        raise CaptureError(f"capture source {source.name!r}: its folder {root} does not exist; create it or fix "
                           "sources.yaml")
    fname, renamed = _without_source_prefix(root, source.name, fname, name_option)
    fname = folders_as_spelled(root, fname)
    problem = capture_problem(source, fname)
    if problem:
        raise CaptureError(f"{problem}: pass another {name_option} or source (nothing was written)")
    target = (root / f"{fname}.md")

    def refuse_outside() -> None:      # a folder of the name that is (or was just made) a link out of the source
        if root not in target.resolve().parents:
            raise CaptureError(f"refused: {fname!r} would be written outside {root}")

    refuse_outside()
    rel = vault_rel_path(source, fname, name_option)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)   # daily/: made when missing, as Obsidian makes it
    except OSError as exc:
        raise CaptureError(f"cannot make the folder {target.parent}: {exc.strerror or exc}") from None
    refuse_outside()
    created = (now or datetime.now(UTC)).replace(microsecond=0)
    cid = correlation_id or uuid.uuid4().hex
    own: dict[str, Any] = {"title": title, "created": created.isoformat().replace("+00:00", "Z"), "agent": agent,
                           "status": CAPTURE_STATUS, "correlation_id": cid}
    if links := _new_related_links(related, source.name, text_fm):
        own["related"] = links
    if tags:
        # a Japanese IME types `#` as `＃`: Obsidian would read `＃学び` as a tag of its own, not 学び
        own["tags"] = [t.strip().lstrip("#＃") for t in tags if t.strip("#＃ ")]
    fm = merge_frontmatter(own, text_fm)
    head = yaml.safe_dump(fm, allow_unicode=True, sort_keys=False, width=1000)
    body = re.sub(r"\A(?:[ \t]*\r?\n)+", "", text.rstrip())
    if heading and not _starts_with_h1(body):
        body = f"# {title}\n\n{body}" if body else f"# {title}"
    content = f"---\n{head}---\n\n{body}\n" if body else f"---\n{head}---\n"
    _write_new(target, content, f"a note named {fname + '.md'!r} already exists in {root}: pass another "
                                f"{name_option} (nothing was overwritten)")
    return Captured(path=target, source=source.name, vault_path=f"{source.name}/{rel}", correlation_id=cid,
                    related=tuple(related), warning=" ".join(w for w in (renamed, _unlinkable(source, fname, rel)) if w))


def _without_source_prefix(root: Path, source_name: str, fname: str, name_option: str) -> tuple[str, str]:
    """``fname`` without a first folder that is the source's own name when ``root`` has no folder of that name, and
    the warning that says so ("" when kept): an agent that passed the vault path it saw in search results
    (``notes/ideas`` for ``vault/notes/ideas.md``) got ``notes/notes/ideas.md`` without a word (helper-137, session
    44). A folder of that name in the root is the user's: the name goes into it, as given."""
    head, sep, rest = fname.partition("/")
    if not sep or unicodedata.normalize("NFC", head).casefold() != unicodedata.normalize("NFC", source_name).casefold():
        return fname, ""
    try:
        if any(p.is_dir() and unicodedata.normalize("NFC", p.name).casefold() == head.casefold()
               for p in root.iterdir()):
            return fname, ""
    except OSError:
        return fname, ""
    return rest, (f"{name_option} {fname!r} starts with the source's name {source_name!r}, which is the vault's "
                  f"folder of the source, not a folder in it: written as {rest + '.md'!r} (vault path "
                  f"{source_name}/{rest}.md); to write into a folder {head!r} of the source, make it first")


def _unlinkable(source: Source, fname: str, rel: str) -> str:
    """The build's warning for a captured note named ``fname`` that no ``[[link]]`` reaches by its name (it holds
    ``# ^ [ ]``: ``C# tips`` is written ``C- tips.md`` in the vault; :func:`pipeline.ingest.normalize.
    unlinkable_lines`), "" for any other: the name is kept, and now said at once, as every build of the source
    says it (before session 42 capture and save_note said nothing, and the next build told the user to rename)."""
    from pipeline.ingest.normalize import unlinkable_lines

    lines = unlinkable_lines(source.name, {_root_path(source, fname): rel})
    return lines[0] if lines else ""


def _write_new(target: Path, content: str, taken: str) -> None:
    """Write ``content`` to ``target``, a file that must not exist yet (``taken``: the error when it does).

    Raises:
        CaptureError: ``target`` exists (nothing overwritten), or it could not be written: then nothing of it stays
            (a full disk: 60 KB of a 200 KB text), so the name is free for the retry; before session 40 the part
            stayed, and the retry was refused as "already exists".
    """
    try:
        fh = open(target, "x", encoding="utf-8", newline="\n")
    except FileExistsError:
        raise CaptureError(taken) from None
    except OSError as exc:
        raise CaptureError(f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        with fh:
            fh.write(content)
    except BaseException as exc:
        target.unlink(missing_ok=True)          # the file is this call's (made with "x")
        if isinstance(exc, OSError):
            raise CaptureError(f"cannot write {target}: {exc.strerror or exc} (nothing was written)") from None
        raise


def folders_as_spelled(root: Path, name: str) -> str:
    """``name`` (``folder/…/file``) with each folder that exists in ``root`` under another case or Unicode form
    spelled as it is there: ``english notes/新規`` goes into ``English notes/`` (found by helper s36-nu2: a
    second folder ``english notes`` was made beside it, one folder on macOS and Windows, two on Linux, which a
    synced vault cannot hold); a folder not there yet stays as given (it is made)."""
    parts = name.split("/")
    here = root
    for i, part in enumerate(parts[:-1]):
        try:
            names = sorted(p.name for p in here.iterdir() if p.is_dir())
        except OSError:
            break
        if part not in names:
            key = unicodedata.normalize("NFC", part).casefold()
            same = [n for n in names if unicodedata.normalize("NFC", n).casefold() == key]
            if not same:
                break
            parts[i] = same[0]
        here = here / parts[i]
    return "/".join(parts)


def related_for(searcher: object, title: str, text: str, k: int = 3) -> list[str]:
    """Vault paths of the top ``k`` notes a search for the title and the text's start finds (``searcher`` a
    :class:`pipeline.search.searcher.Searcher`); [] when nothing is found."""
    query = f"{title} {' '.join(split_text(text, strict=False)[1].split())[:300]}".strip()
    hits = searcher.search(query, k=k)  # type: ignore[attr-defined]
    return [h.vault_path for h in hits]
