"""Bare wikilinks that are ambiguous in the merged vault -> path form, so Obsidian opens the note the link table
resolved.

A source's ``[[Home|Open]]`` resolves within its source (the link table does this), but in a vault that holds
several sources (and the user's own folders) Obsidian resolves a bare name across the whole vault and may open
another source's ``Home.md``. Such links are written qualified: ``[[<source>/<path>|Open]]`` (display text kept:
the alias, else the name as written, ``Note > Heading`` for a heading link). Links whose name is unique in the vault
are left as written, as are links that do not resolve within the source.

Which names are taken elsewhere is the caller's input (``others``): the vault stage builds it from the other
sources' notes, not from their vault folders (:func:`pipeline.stages.ingest.vault_names`), so the result does not
depend on the order in which sources are written.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import os
import posixpath
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from pipeline.models import Note, text_hash

_WIKI = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")


def _key(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def note_names(rel_paths: Iterable[str]) -> set[str]:
    """Casefolded NFC names (file name without ``.md``) of these note paths (posix, ending in ``.md``)."""
    return {_key(posixpath.basename(rel)[:-3]) for rel in rel_paths if rel.endswith(".md")}


def other_note_names(vault_dir: Path, source: str | Collection[str]) -> set[str]:
    """Casefolded NFC names (without ``.md``) of the Markdown files in the vault outside ``vault/<source>/`` (other
    sources and the user's own folders; dot folders skipped). ``source`` may be several folder names, all skipped.
    """
    skip = {source} if isinstance(source, str) else set(source)
    names: set[str] = set()
    vault_dir = Path(vault_dir)
    if not vault_dir.is_dir():
        return names
    for entry in sorted(vault_dir.iterdir()):
        if entry.name.startswith(".") or entry.name in skip:
            continue
        if entry.is_file() and entry.name.endswith(".md"):
            names.add(_key(entry.name[:-3]))
        elif entry.is_dir() and not entry.is_symlink():
            for dirpath, dirnames, filenames in os.walk(entry):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                names.update(_key(f[:-3]) for f in filenames if f.endswith(".md") and not f.startswith("."))
    return names


def qualify_ambiguous_links(source: str, notes: Sequence[Note], others: set[str]) -> tuple[list[Note], int]:
    """Rewrite bare links of ``notes`` whose name is also a note name in ``others`` (see
    :func:`other_note_names`) to path form when they resolve within the source; returns ``(notes, links
    rewritten)``. So is a link by an alias that no note of the source has as its name (``[[AI]]`` for the note
    ``Artificial intelligence.md`` with ``aliases: [AI]``): the link table resolves it, Obsidian does not (it
    offers an alias when a link is typed and writes ``[[Artificial intelligence|AI]]``; a bare ``[[AI]]`` is
    unresolved there, and a click makes an empty ``AI.md``), so it becomes ``[[<source>/Artificial
    intelligence|AI]]``. So is a link by a note's file name that the vault changed (``[[入門／応用]]`` for the
    source's ``入門／応用.md``, written ``入門-応用.md``): ``[[<source>/入門-応用|入門／応用]]``. A rewritten note's
    ``content_hash`` is recomputed. The links are those the link graph reads:
    in the body (:func:`pipeline.index.graph.link_spans`: a ``[[name]]`` in code, fenced, indented or inline, is
    text and stays as written) and in the properties (:func:`pipeline.index.graph.property_links`: ``up:
    "[[Home]]"``; not the build's own keys, such as ``title``)."""
    from pipeline.index.graph import LinkResolver

    paths = [n.vault_path for n in notes]
    resolver = LinkResolver(paths, {n.vault_path: n.aliases for n in notes if n.aliases},
                            {n.vault_path: n.source_path for n in notes})
    names = note_names(paths) | {_key(posixpath.basename(n.source_path)) for n in notes}
    # a note's name in its source when the vault changed it (入門／応用.md is written 入門-応用.md): Obsidian resolves
    # [[入門／応用]] in the source vault, but no file of the built vault has that name
    renamed = {_key(posixpath.basename(n.source_path)[:-3]) for n in notes if n.source_path.lower().endswith(".md")}
    wanted = others | ({_key(a.strip()) for n in notes for a in n.aliases} | renamed) - names
    count = 0
    out: list[Note] = []
    for note in notes:
        body, changed = _qualified_body(source, note, wanted, resolver)
        fm, in_fm = _qualified_properties(source, note, wanted, resolver)
        if changed:
            fm = {**fm, "content_hash": text_hash(body)} if "content_hash" in fm else fm
        if changed or in_fm:
            count += changed + in_fm
            note = dataclasses.replace(note, body=body, frontmatter=fm)
        out.append(note)
    return out, count


def _may_qualify(inner: str, source: str, others: set[str]) -> bool:
    """Whether ``[[inner]]`` is a bare link whose name ``others`` holds (a cheap test before parsing a note)."""
    target = re.split(r"\\?\||#", inner, maxsplit=1)[0].strip()
    return bool(target) and not target.startswith(f"{source}/") and \
        _key(posixpath.basename(target.removesuffix(".md"))) in others


def _qualified_link(m: re.Match[str], note: Note, resolver: Any, pipe: str = "|") -> str | None:
    """The path form of the wikilink ``m`` (a :data:`_WIKI` match) of ``note``, its display text kept (the name as
    written, ``Note > Heading`` for a heading link, when it had none); None when it resolves to no note of the
    source or names an attachment. ``pipe``: ``\\|`` in a table row."""
    from pipeline.index.graph import LinkResolver

    parts = re.split(r"\\?\|", m.group(2), maxsplit=1)
    target_sub, alias = parts[0], (parts[1] if len(parts) > 1 else None)
    target, hash_, sub = target_sub.partition("#")
    target = target.strip()
    resolved = None if LinkResolver.is_attachment(target) else resolver.resolve(target, note.vault_path)
    if resolved is None:
        return None
    new_target = resolved[:-3] + (f"#{sub}" if hash_ else "")
    if alias is None and not m.group(1):
        alias = target + (" > " + sub.lstrip("^") if hash_ and sub else "")
    return f"{m.group(1)}[[{new_target}" + (f"{pipe}{alias}" if alias is not None else "") + "]]"


def _qualified_body(source: str, note: Note, others: set[str], resolver: Any) -> tuple[str, int]:
    """``(body, links rewritten)`` of one note for :func:`qualify_ambiguous_links`; ``resolver``: a
    :class:`pipeline.index.graph.LinkResolver` of the source's notes."""
    from pipeline.index.graph import link_spans

    body = note.body
    if "[[" not in body or not any(_may_qualify(m.group(2), source, others) for m in _WIKI.finditer(body)):
        return body, 0
    line_starts = [0] + [i + 1 for i, c in enumerate(body) if c == "\n"]
    rows = _prose_table_rows(body) if "|" in body else [False] * len(line_starts)
    pieces: list[str] = []
    pos = changed = 0
    for start, end, link in link_spans(body):
        m = _WIKI.fullmatch(body, start, end)
        if m is None or link.kind != "wikilink" or not _may_qualify(m.group(2), source, others):
            continue
        new = _qualified_link(m, note, resolver, "\\|" if rows[bisect.bisect_right(line_starts, start) - 1] else "|")
        if new is not None:
            pieces += [body[pos:start], new]
            pos = end
            changed += 1
    return "".join(pieces) + body[pos:], changed


def _prose_table_rows(body: str) -> list[bool]:
    """Which lines of ``body`` (``body.split("\\n")``) are rows of a table in its prose: fenced code reads as blank
    lines, so a table shown inside code is none and a fence ends a table (as GFM reads them, and as the rewrite
    did when it ran on the prose between fences: a paragraph right after a fence got a table's ``\\|``)."""
    from pipeline.common.markdown import split_code
    from pipeline.ingest.normalize import _table_rows

    masked = "".join("\n" * piece.count("\n") if is_code else piece for is_code, piece in split_code(body))
    return _table_rows(masked.split("\n"))


def _qualified_properties(source: str, note: Note, others: set[str], resolver: Any) -> tuple[dict[str, Any], int]:
    """``(frontmatter, links rewritten)`` of one note for :func:`qualify_ambiguous_links`: a text property, or a
    text item of a list property, that is one link as a whole (:func:`pipeline.index.graph.property_links`),
    spaces around it dropped once rewritten; the build's own keys (``title``, ``source``…) are left alone, and so
    are ``tags``, ``aliases`` and ``cssclasses``, whose values the link graph reads as no link
    (:data:`pipeline.index.graph.NOT_LINK_PROPERTIES`)."""
    from pipeline.index.graph import NOT_LINK_PROPERTIES, whole_value_link
    from pipeline.ingest.normalize import OWN_KEYS

    def kept(k: Any) -> bool:
        return k in OWN_KEYS or str(k).lower() in NOT_LINK_PROPERTIES

    changed = 0

    def one(value: Any) -> Any:
        nonlocal changed
        m = whole_value_link(value)
        new = _qualified_link(m, note, resolver) if m and _may_qualify(m.group(2), source, others) else None
        changed += new is not None
        return value if new is None else new

    fm = note.frontmatter
    if not any(isinstance(v, (str, list)) and "[[" in str(v) for k, v in fm.items() if not kept(k)):
        return fm, 0
    out = {k: v if kept(k) else [one(x) for x in v] if isinstance(v, list) else one(v) for k, v in fm.items()}
    return (out, changed) if changed else (fm, 0)


def ambiguous_names(notes: Sequence[Note], others: set[str]) -> list[str]:
    """The names of ``notes`` that are also in ``others`` (sorted): what the qualification depends on."""
    return sorted({_key(posixpath.basename(n.rel_path)[:-3]) for n in notes} & others)


def _link_line(path: Path | None, target: str) -> int | None:
    """The first line (1-based) of the file at ``path`` holding a wikilink to ``target`` as written (``[[target]]``,
    ``[[target|``, ``[[target#``; not ``[[target notes]]``); None when there is none or the file is unreadable."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path else ""
    except OSError:
        return None
    link = re.compile(r"\[\[\s*" + re.escape(target) + r"\s*(?:\]\]|\\?\||#)")
    return next((n for n, line in enumerate(text.splitlines(), 1) if link.search(line)), None)


#: at most this many ambiguous links are named one by one per source in :func:`ambiguous_link_lines`
AMBIGUOUS_LINES = 5


def ambiguous_link_lines(source: str, notes: Sequence[Note], files: dict[str, Path] | None = None,
                         parse: Callable[[str], list[Any]] | None = None) -> list[str]:
    """One warning line per wikilink of ``notes`` (one source) whose name several of the source's notes share
    equally (:meth:`pipeline.index.graph.LinkResolver.rivals`: ``[[Meeting]]`` with ``a/Meeting.md`` and
    ``b/Meeting.md``, neither in the linking note's folder): the note, the link, its line (when ``files`` maps the
    note's source path to its file and the link is written there as is), the note it resolves to and the others,
    and how to choose. At most :data:`AMBIGUOUS_LINES` links, then one ``… and N more`` line. Deterministic (notes
    and links in order). Only notes whose body links a name two notes share are parsed (``parse``, default
    :func:`pipeline.index.graph.parse_links`; the vault stage passes the graph's link cache, so an unchanged note is
    not parsed again: a vault whose folders share index.md parsed every note linking it on every build): a source
    without such names costs one pass over its paths."""
    from pipeline.index.graph import LinkResolver, parse_links
    from pipeline.ingest.fetch.local import printable_path

    def names(n: Note) -> set[str]:                          # its vault name, its file's (Board.canvas)
        return {_key(posixpath.basename(n.rel_path).removesuffix(".md")),
                _key(posixpath.basename(n.source_path))}

    counts = Counter(name for n in notes for name in names(n))
    shared = {name for name, c in counts.items() if c > 1}
    if not shared:
        return []
    resolver: LinkResolver | None = None                     # built for the first note that may need it

    @functools.lru_cache(maxsize=4096)
    def links_shared(inner: str) -> bool:                    # `[[inner]]` names a shared name
        target = re.split(r"\\?\||#", inner, maxsplit=1)[0].strip().removesuffix(".md")
        return _key(posixpath.basename(target)) in shared

    prefix = f"{source}/"
    found: list[tuple[str, str, str, list[str]]] = []        # (note source path, link text, chosen, rivals)
    for note in sorted(notes, key=lambda n: n.vault_path):
        if "[[" not in note.body or not any(links_shared(m.group(2)) for m in _WIKI.finditer(note.body)):
            continue                            # a regex pass; only a note that may link a shared name is parsed
        if resolver is None:
            resolver = LinkResolver([n.vault_path for n in notes],
                                    {n.vault_path: n.aliases for n in notes if n.aliases},
                                    {n.vault_path: n.source_path for n in notes})
        seen: set[str] = set()
        for link in (parse or parse_links)(note.body):
            if link.kind != "wikilink" or not link.target or link.target in seen:
                continue
            seen.add(link.target)
            rivals = resolver.rivals(link.target, note.vault_path)
            if rivals:
                chosen = resolver.resolve(link.target, note.vault_path) or ""
                found.append((note.source_path, link.target, chosen, rivals))
    # a note made from a file that is not .md (a/Board.canvas, a/Intro.mdx) is named by that file, as linked
    made_from = {unicodedata.normalize("NFC", n.vault_path): n.source_path for n in notes
                 if not n.source_path.lower().endswith(".md")}

    def name(p: str) -> str:
        return made_from.get(p) or p.removeprefix(prefix)

    lines = []
    for sp, target, chosen, rivals in found[:AMBIGUOUS_LINES]:
        at = _link_line((files or {}).get(sp), target)
        where = f" (line {at})" if at else ""
        others = ", ".join(printable_path(name(r)) for r in rivals)
        choose = " or ".join(f"[[{name(p).removesuffix('.md')}]]" for p in [chosen, *rivals][:3])
        why = "the shortest path" if all(len(chosen) < len(r) for r in rivals) else "the first in path order"
        lines.append(f"source '{source}': {printable_path(sp)}: [[{target}]]{where} could mean {len(rivals) + 1} "
                     f"notes: it links to {printable_path(name(chosen))} ({why}), not "
                     f"{others}; write {choose} to choose")
    if len(found) > AMBIGUOUS_LINES:
        lines.append(f"source '{source}': … and {len(found) - AMBIGUOUS_LINES} more links whose name several notes "
                     "share")
    return lines
