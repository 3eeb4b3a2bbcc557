"""Link graph of the vault: parse wikilinks / embeds / relative Markdown links, resolve them as Obsidian does,
build a networkx DiGraph of notes and export it as GraphML and JSON.

Resolution (``LinkResolver.resolve``), each source folder ``vault/<source>/`` being a vault of its own:

1. exact path: the target (``.md`` optional) as a vault path, or as a path inside the linking note's source folder;
   Markdown links are first tried relative to the linking note's folder;
2. else every note whose path ends with ``/<target>`` (component-wise), best first by: same source folder, the
   linking note's own folder (ancestors do not count), exact case, shortest path string, lexical order;
3. else a note with a frontmatter alias equal to the target (case-insensitive), same ordering. Obsidian itself does
   not follow a bare ``[[Alias]]``; the vault stage writes such links with their note's path
   (:func:`pipeline.index.vaultlinks.qualify_ambiguous_links`), so the vault opens the note this resolves.

A note made from a file that is not ``.md`` (a ``.canvas`` file's note ``Board.canvas.md``, ``Intro.mdx``'s
``Intro.md``) is also found by that file's own name, extension and all, as Obsidian links the file:
``[[Board.canvas]]``, ``[[folder/Board.canvas|label]]``, ``[[Intro.mdx]]`` (steps 1 and 2 over the source file
names, tried first). So is a note whose file name the vault had to change (``入門／応用.md``, written
``入門-応用.md``: the vault replaces slash lookalikes such as the full-width ``／``), by its source file's name,
``[[入門／応用]]``, as Obsidian resolves it in the source vault (after steps 1 and 2, before the aliases).

Matching is case-insensitive and NFC/NFD-insensitive. Any other target whose extension is an attachment type
(``.png``, ``.pdf``, ``.canvas``, ``.base``, ...) never resolves and is counted as an attachment, not as a
dangling note.
"""

from __future__ import annotations

import bisect
import json
import posixpath
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote

import networkx as nx
from markdown_it import MarkdownIt

from pipeline.common.artifacts import write_atomic, write_atomic_with
from pipeline.common.markdown import WIKILINK_ALIAS
from pipeline.common.memo import MemoCache
from pipeline.models import Edge, Note, WikiLink

__all__ = [
    "ATTACHMENT_EXTENSIONS",
    "LinkGraph",
    "LinkResolver",
    "LinksCache",
    "build_graph",
    "export_graph",
    "graph_content",
    "heading_key",
    "link_spans",
    "missing_subpaths",
    "parse_links",
    "property_links",
    "whole_value_link",
]

_ATTACHMENTS_TEXT = (
    "png jpg jpeg gif bmp svg webp avif heic tif tiff ico mp3 wav m4a ogg flac 3gp webm mp4 ogv mov mkv "
    "avi pdf canvas base json csv tsv txt zip gz tar xml yaml yml html htm js css py ipynb docx xlsx "
    "pptx epub "
)
ATTACHMENT_EXTENSIONS: frozenset[str] = frozenset(_ATTACHMENTS_TEXT.split())

_MD = MarkdownIt("commonmark").enable("table")
#: ``[[target|alias]]``: group 1 ``!`` of an embed, group 2 the inner text (the alias as :data:`WIKILINK_ALIAS`)
_WIKILINK = re.compile(rf"(!?)\[\[([^\[\]|\n]+?(?:\\?\|{WIKILINK_ALIAS})?)\]\]")
# [text](dest "title") with one level of nested brackets in the text; dest either <...> or without spaces.
_MD_LINK = re.compile(
    r"(!?)\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]"
    r"\(\s*(<[^<>\n]*>|[^\s()<>]+(?:\([^\s()]*\)[^\s()<>]*)*)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_BACKTICKS = re.compile(r"`+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_EXTENSION = re.compile(r"\.([A-Za-z0-9]{1,8})$")
#: an Obsidian comment, ``%%hidden%%`` (across lines too; an unclosed ``%%`` runs to the end of the note)
_OBSIDIAN_COMMENT = re.compile(r"%%.*?(?:%%|\Z)", re.DOTALL)


# ---------------------------------------------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------------------------------------------
def _mask_blocks(markdown: str) -> str:
    """``markdown`` with fenced and indented code blocks replaced by spaces (offsets kept)."""
    lines = markdown.split("\n")
    for tok in _MD.parse(markdown):
        if tok.type in ("fence", "code_block") and tok.map:
            start, end = tok.map
            for i in range(start, min(end, len(lines))):
                lines[i] = " " * len(lines[i])
    return "\n".join(lines)


def _mask_inline(text: str) -> str:
    """``text`` (code blocks masked already: :func:`_mask_blocks`) with inline code spans replaced by spaces
    (offsets kept)."""
    chars = list(text)
    # inline code: a run of n backticks up to the next run of exactly n, within one paragraph (no blank line)
    para_ends = [m.start() for m in _BLANK_LINE.finditer(text)] + [len(text)]
    runs = [m for m in _BACKTICKS.finditer(text) if not (m.start() > 0 and text[m.start() - 1] == "\\")]
    i = 0
    while i < len(runs):
        opener = runs[i]
        limit = para_ends[bisect.bisect_left(para_ends, opener.end())]
        n = len(opener.group())
        j = i + 1
        while j < len(runs) and runs[j].start() < limit and len(runs[j].group()) != n:
            j += 1
        if j < len(runs) and runs[j].start() < limit:
            for k in range(opener.start(), runs[j].end()):
                if chars[k] != "\n":
                    chars[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(chars)


def _mask_comments(text: str) -> str:
    """``text`` (code masked already: :func:`_mask_inline`) with Obsidian's ``%%comments%%`` replaced by spaces
    (offsets and line breaks kept): Obsidian reads no link there (outgoing links, backlinks, the graph view)."""
    if "%%" not in text:
        return text
    return _OBSIDIAN_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def _parse_wikilink(inner: str, embed: bool) -> WikiLink | None:
    alias: str | None = None
    pipe = inner.find("|")
    if pipe >= 0:
        alias = inner[pipe + 1 :].strip().replace("\\|", "|") or None
        inner = inner[:pipe]
    inner = inner.rstrip("\\")  # the backslash of a table-escaped "\|"
    target, _, rest = inner.partition("#")
    heading: str | None = None
    block: str | None = None
    if rest:
        if rest.startswith("^"):
            block = rest[1:].strip() or None
        else:
            head, _, blk = rest.partition("#^")
            heading = head.strip() or None
            block = blk.strip() or None
    target = target.strip()
    if not target and heading is None and block is None:
        return None
    return WikiLink(target=target, heading=heading, block=block, alias=alias, embed=embed, kind="wikilink")


def _parse_md_link(dest: str) -> WikiLink | None:
    if dest.startswith("<") and dest.endswith(">"):
        dest = dest[1:-1]
    dest = dest.strip()
    if not dest or dest.startswith(("#", "//")) or _SCHEME.match(dest):
        return None
    path, _, fragment = dest.partition("#")
    path = path.split("?", 1)[0]
    path = unquote(path)
    name = path.rsplit("/", 1)[-1]
    if not path.lower().endswith(".md") and (not name or "." in name):
        return None     # a file (pic.png), a folder (docs/); a name without extension is a note, as in Obsidian
    heading: str | None = None
    block: str | None = None
    fragment = unquote(fragment).strip()
    if fragment.startswith("^"):
        block = fragment[1:] or None
    elif fragment:
        heading = fragment
    return WikiLink(target=path, heading=heading, block=block, alias=None, embed=False, kind="markdown")


def parse_links(markdown: str) -> list[WikiLink]:
    """Links of a note body, in order of appearance.

    Recognises ``[[target#heading|alias]]``, ``[[target#^block]]``, embeds ``![[...]]``, table-escaped pipes
    ``[[target\\|alias]]`` and self-links ``[[#Heading]]`` (target ""), plus relative Markdown links to notes:
    ``.md`` files or a name without extension, which Obsidian's help gives as the same link
    (``[text](../x/Note.md#h)``, ``[Three laws of motion](Three%20laws%20of%20motion)``; URL-decoded, kind
    "markdown", target as written; http(s)/mailto/other schemes, images, files with another extension, folders
    and anchor-only links are skipped). Nothing inside fenced code (``` or ~~~, any length), indented code or inline
    code counts, nor inside an Obsidian comment (``%%[[Draft]]%%``, across lines too), as in Obsidian; inline code
    inside a wikilink is part of it (``[[Note#`.output`: Files|the `x` page]]``).

    Args:
        markdown: a note body (Markdown, LF line endings; frontmatter already removed).

    Returns:
        One WikiLink per occurrence (duplicates kept).
    """
    return [link for _, _, link in link_spans(markdown)]


#: Obsidian's own properties with types of their own (Tags, Aliases, the list of CSS classes), whose values are
#: never links there, and their older singular names; compared case-insensitively.
NOT_LINK_PROPERTIES = frozenset({"tags", "tag", "aliases", "alias", "cssclasses", "cssclass"})


def whole_value_link(value: object) -> re.Match[str] | None:
    """The wikilink match (a ``_WIKILINK`` match: group 2 the link's inner text) of a property value that is one
    link as a whole, spaces around left out (``" [[Home]] "``), and no embed; None for any other value (text around
    a link, a number)."""
    if not isinstance(value, str) or "[[" not in value:
        return None
    m = _WIKILINK.fullmatch(value.strip())
    return m if m and not m.group(1) else None


def property_links(frontmatter: Mapping[str, Any]) -> list[WikiLink]:
    """Links of a note's properties, as Obsidian counts them among the note's links (outgoing links, backlinks,
    the graph view): a text property or a text item of a list property whose whole value (spaces around left
    out) is one ``[[target#heading|alias]]`` (``up: "[[Home]]"``, ``related: ["[[A]]", "[[B|b]]"]``), in key then
    item order, ``kind`` "property". Text around a link (``"see [[B]]"``, a title quoting TOML's ``[[bin]]``) is
    plain text in Obsidian, and so is ``![[x]]``: no link here either. Obsidian's help has links in properties
    quoted: YAML reads an unquoted ``up: [[Home]]`` as a nested list, which Obsidian shows as no link, and so has
    none here; nor do numbers, dates or mappings, nor the values of ``tags``, ``aliases`` and ``cssclasses``
    (:data:`NOT_LINK_PROPERTIES`), which Obsidian reads as tags, alternative names and CSS classes.

    Args:
        frontmatter: a note's frontmatter (:attr:`pipeline.models.Note.frontmatter`: JSON-safe values).

    Returns:
        One WikiLink per occurrence (self-links ``[[#Heading]]`` left out).
    """
    out: list[WikiLink] = []
    for key, value in frontmatter.items():
        if str(key).lower() in NOT_LINK_PROPERTIES:
            continue
        for text in [value] if isinstance(value, str) else value if isinstance(value, list) else ():
            m = whole_value_link(text)
            link = _parse_wikilink(m.group(2), embed=False) if m else None
            if link is not None and link.target:
                out.append(replace(link, kind="property"))
    return out


def link_spans(markdown: str) -> list[tuple[int, int, WikiLink]]:
    """:func:`parse_links` with where each link is: ``(start, end, link)``, ``markdown[start:end]`` the link as
    written (``[[Guide#Install|the install]]``, ``[text](Install%20guide.md#Nope)``), offsets in ``markdown``
    with its CRLF / CR line breaks read as LF (an LF-only text's own offsets)."""
    blocks = _mask_blocks(re.sub(r"\r\n?", "\n", markdown))   # line breaks as markdown-it counts them
    text = _mask_comments(_mask_inline(blocks))
    found: list[tuple[int, int, WikiLink]] = []
    for m in _WIKILINK.finditer(blocks):
        if text[m.start()] != blocks[m.start()]:     # opens inside inline code or a %%comment%%: no link
            continue
        # inline code inside the link is its text: [[Note#`.output`: Files]] links that heading, as Obsidian reads it
        link = _parse_wikilink(m.group(2), embed=bool(m.group(1)))
        if link is not None:
            found.append((m.start(), m.end(), link))
    # blank the wikilinks so their text cannot be read as Markdown links
    no_wiki = _WIKILINK.sub(lambda m: " " * len(m.group()), text)
    for m in _MD_LINK.finditer(no_wiki):
        if m.group(1):  # image
            continue
        link = _parse_md_link(m.group(2))
        if link is not None:
            found.append((m.start(), m.end(), link))
    found.sort(key=lambda item: item[0])
    return found


# ---------------------------------------------------------------------------------------------------------------
# resolution
# ---------------------------------------------------------------------------------------------------------------
def _key(text: str) -> str:
    return unicodedata.normalize("NFC", text).casefold()


def _strip_md(path: str) -> str:
    return path[:-3] if path.lower().endswith(".md") else path


class LinkResolver:
    """Resolves link targets to vault paths as Obsidian does (see module docstring); deterministic.

    Args:
        paths: vault paths ``<source>/<rel_path>`` (posix, ending ``.md``).
        aliases: vault path -> frontmatter aliases of that note.
        source_paths: vault path -> the note's source path (``Board.canvas`` of ``v/Board.canvas.md``); a
            note whose source file is not ``.md`` is also found by that file's name. Notes left out are found
            by their vault path only.
    """

    def __init__(self, paths: Iterable[str], aliases: Mapping[str, Sequence[str]] = {},
                 source_paths: Mapping[str, str] = {}) -> None:
        self.paths: list[str] = sorted({unicodedata.normalize("NFC", p) for p in paths})
        self._exact: dict[str, list[str]] = defaultdict(list)  # key of full path without .md -> paths
        self._by_name: dict[str, list[str]] = defaultdict(list)  # key of basename without .md -> paths
        for p in self.paths:
            stem = _strip_md(p)
            self._exact[_key(stem)].append(p)
            self._by_name[_key(posixpath.basename(stem))].append(p)
        # notes made from a file that is not .md: "<source>/<source path>" (extension kept) -> paths, by full
        # path and by file name, as self._exact and self._by_name are for the vault paths
        self._files: dict[str, str] = {}
        self._file_exact: dict[str, list[str]] = defaultdict(list)
        self._file_by_name: dict[str, list[str]] = defaultdict(list)
        known = set(self.paths)
        for path, sp in sorted(source_paths.items()):
            p, sp = unicodedata.normalize("NFC", path), unicodedata.normalize("NFC", sp).strip("/")
            if p not in known or not sp or sp.lower().endswith(".md"):
                continue
            self._files[p] = f"{p.split('/', 1)[0]}/{sp}"
            self._file_exact[_key(self._files[p])].append(p)
            self._file_by_name[_key(posixpath.basename(sp))].append(p)
        # notes whose vault name the vault changed (``入門／応用.md`` -> ``入門-応用.md``): "<source>/<source path
        # without .md>" -> paths, by full path and by file name, when no vault path has that name already
        self._renamed: dict[str, str] = {}
        self._renamed_exact: dict[str, list[str]] = defaultdict(list)
        self._renamed_by_name: dict[str, list[str]] = defaultdict(list)
        for path, sp in sorted(source_paths.items()):
            p, sp = unicodedata.normalize("NFC", path), unicodedata.normalize("NFC", sp).strip("/")
            if p not in known or not sp.lower().endswith(".md"):
                continue
            full = f"{p.split('/', 1)[0]}/{_strip_md(sp)}"
            if _key(full) != _key(_strip_md(p)) and _key(full) not in self._exact:
                self._renamed[p] = full
                self._renamed_exact[_key(full)].append(p)
                self._renamed_by_name[_key(posixpath.basename(full))].append(p)
        self.last_rivals: list[str] = []     # the notes the last resolved link could equally mean (see rivals)
        # (id of a by-name map, key of a name) -> folder -> the map's paths of that name in that folder
        self._by_dir: dict[tuple[int, str], dict[str, list[str]]] = {}
        self._aliases: dict[str, list[str]] = defaultdict(list)
        for path, names in aliases.items():
            p = unicodedata.normalize("NFC", path)
            for name in names:
                if name and p not in self._aliases[_key(name.strip())]:
                    self._aliases[_key(name.strip())].append(p)

    @staticmethod
    def is_attachment(target: str) -> bool:
        """True when ``target`` names a non-Markdown file (``.png``, ``.pdf``, ``.canvas``, ...)."""
        m = _EXTENSION.search(target.split("#", 1)[0].strip())
        return bool(m) and m.group(1).lower() in ATTACHMENT_EXTENSIONS

    def resolve(self, target: str, from_path: str, *, kind: str = "wikilink") -> str | None:
        """Vault path of the note ``target`` points to, or None (dangling, attachment or empty target).

        Args:
            target: link target as written, without ``#heading``/``|alias`` (``.md`` optional), or the name
                of a note's source file that is not ``.md`` (``Board.canvas``, ``folder/Board.canvas``), tried
                first.
            from_path: vault path of the linking note.
            kind: "markdown" first tries the target relative to the linking note's folder (so does a target
                starting with ``./`` or ``../``).

        Returns:
            A vault path from ``paths``, or None.
        """
        self.last_rivals = []
        target = unicodedata.normalize("NFC", target.strip())
        if not target:
            return None
        from_path = unicodedata.normalize("NFC", from_path)
        source = from_path.split("/", 1)[0]
        from_dir = posixpath.dirname(from_path)
        if self._files and not target.lower().endswith(".md"):     # a source file by its name: Board.canvas
            hit = self._find(target, source, from_dir, kind, self._file_exact, self._file_by_name,
                             self._files.__getitem__)
            if hit:
                return hit
        if self.is_attachment(target):
            return None
        stem = _strip_md(target)
        hit = self._find(stem, source, from_dir, kind, self._exact, self._by_name, _strip_md)   # (1), (2)
        if hit:
            return hit
        if self._renamed:                           # a note by its source file's name the vault changed
            hit = self._find(stem, source, from_dir, kind, self._renamed_exact, self._renamed_by_name,
                             self._renamed.__getitem__)
            if hit:
                return hit

        # (3) aliases
        cands = self._aliases.get(_key(target)) or self._aliases.get(_key(stem))
        if cands:
            return self._best(cands, stem, source, from_dir)
        return None

    def _find(self, stem: str, source: str, from_dir: str, kind: str, exact: Mapping[str, list[str]],
              by_name: Mapping[str, list[str]], name: Callable[[str], str]) -> str | None:
        """Steps (1) exact paths and (2) path suffix of :meth:`resolve` for ``stem`` over one pair of maps
        (``exact``: key of a full name -> vault paths, ``by_name``: key of its last component -> vault paths;
        ``name``: a vault path's full name in them)."""
        # (1) exact paths
        tries: list[str] = []
        if (kind == "markdown" and not stem.startswith("/")) or stem.startswith(("./", "../")):
            tries.append(posixpath.normpath(posixpath.join(from_dir, stem)))
        rooted = stem.lstrip("/")
        tries += [posixpath.normpath(f"{source}/{rooted}"), posixpath.normpath(rooted)]
        for t in tries:
            hits = exact.get(_key(t))
            if hits:
                return self._best(hits, stem, source, from_dir, exact=t, name=name)

        # (2) path-suffix match, component-wise
        parts = [p for p in rooted.split("/") if p not in ("", ".")]
        if len(parts) == 1:     # a bare name, which every note of that name matches: one in the linking note's
            same = self._in_folder(by_name, _key(parts[0]), from_dir)   # folder wins (see _best), found directly
            if same:            # (a name hundreds of folders' index.md share made every link of it scan them all)
                return self._best(same, stem, source, from_dir, name=name)
        if parts and ".." not in parts:
            suffix = _key("/" + "/".join(parts))
            cands = [p for p in by_name.get(_key(parts[-1]), ()) if _key("/" + name(p)).endswith(suffix)]
            if cands:
                return self._best(cands, stem, source, from_dir, name=name)
        return None

    def _in_folder(self, by_name: Mapping[str, list[str]], key: str, folder: str) -> list[str]:
        """The paths of ``by_name[key]`` (a by-name map of this resolver) in vault folder ``folder``, from an index
        made once per map and name."""
        index = self._by_dir.get((id(by_name), key))
        if index is None:
            index = self._by_dir[(id(by_name), key)] = defaultdict(list)
            for p in by_name.get(key, ()):
                index[posixpath.dirname(p)].append(p)
        return index.get(folder, [])

    def rivals(self, target: str, from_path: str, *, kind: str = "wikilink") -> list[str]:
        """The other notes ``target`` could equally mean: for a link :meth:`resolve` resolves, the candidates that
        tie with its choice on everything but path length and order (same source, same folder or not, the name as
        written) — ``[[Meeting]]`` from ``notes/`` when ``a/Meeting.md`` and ``b/Meeting.md`` both exist, where
        Obsidian's choice is not predictable either. Sorted; ``[]`` when the link is unambiguous or dangling. The
        last :meth:`resolve` call's are :attr:`last_rivals`."""
        self.resolve(target, from_path, kind=kind)
        return list(self.last_rivals)

    def _best(self, cands: Sequence[str], stem: str, source: str, from_dir: str, exact: str | None = None,
              name: Callable[[str], str] = _strip_md) -> str:
        wanted = (exact or stem).split("/")[-1]

        def rank(p: str) -> tuple[bool, bool, bool, int, str]:
            return (
                p.split("/", 1)[0] != source,
                posixpath.dirname(p) != from_dir,
                posixpath.basename(name(p)) != wanted,
                len(p),
                p,
            )

        best = min(cands, key=rank)
        if len(cands) > 1:
            top = rank(best)[:3]
            self.last_rivals = sorted(p for p in cands if p != best and rank(p)[:3] == top)
        return best


# ---------------------------------------------------------------------------------------------------------------
# graph
# ---------------------------------------------------------------------------------------------------------------
class LinkGraph(NamedTuple):
    """The vault's link graph.

    ``graph``: nodes = note ids (attrs source, path, title, in_degree, pagerank); one edge per linked pair (attrs
    count, kind, headings). ``edges``: resolved and dangling links counted per (src, dst or target, kind).
    ``unresolved``: sorted unique (vault_path, target) of dangling note links. ``attachments``: link occurrences
    pointing at non-Markdown files.
    """

    graph: nx.DiGraph
    edges: list[Edge]
    unresolved: list[tuple[str, str]]
    attachments: int


class LinksCache(MemoCache):
    """:func:`parse_links` results keyed by the sha1 of the note body, kept in one JSON file between builds.

    Parsing (markdown-it, for the code masking) is most of the graph's cost; a rebuild parses only the bodies that
    changed. :meth:`save` keeps only the entries used since the cache was opened and writes only when they changed.
    Pass :meth:`parse` to :func:`build_graph`.
    """

    def parse(self, markdown: str) -> list[WikiLink]:
        """``parse_links(markdown)``, from the cache when this body was parsed before."""
        import hashlib

        key = hashlib.sha1(markdown.encode("utf-8")).hexdigest()
        rows = self.memo(key, lambda: [[ln.target, ln.heading, ln.block, ln.alias, ln.embed, ln.kind]
                                       for ln in parse_links(markdown)])
        return [WikiLink(target=r[0], heading=r[1], block=r[2], alias=r[3], embed=bool(r[4]), kind=r[5])
                for r in rows]


def build_graph(notes: Sequence[Note], parse: Callable[[str], list[WikiLink]] = parse_links) -> LinkGraph:
    """Parse and resolve every note's links into a LinkGraph.

    Self-links (``[[#Heading]]``) and links from a note to itself make no edge. An edge between two notes carries
    ``count`` (occurrences), ``kind`` ("wikilink", "embed", "markdown", "property": a link in a frontmatter value,
    :func:`property_links`; several joined by "|" in sorted order) and
    ``headings`` (sorted distinct linked headings, block refs as ``^id``, joined by "|"). Node metrics:
    ``in_degree`` (distinct linking notes) and ``pagerank`` (weight = count).

    Args:
        notes: the vault's notes (any sources).
        parse: the link parser (:func:`parse_links`, or a cache's :meth:`LinksCache.parse`).

    Returns:
        LinkGraph.

    Long: link resolution needs the maps (paths, titles, aliases, headings) built in its first half; split, five
    maps would be passed around.
    """
    by_path = {unicodedata.normalize("NFC", n.vault_path): n for n in notes}
    resolver = LinkResolver(by_path, {p: n.aliases for p, n in by_path.items() if n.aliases},
                            {p: n.source_path for p, n in by_path.items()})
    g = nx.DiGraph()
    for n in sorted(notes, key=lambda n: n.note_id):
        g.add_node(n.note_id, source=n.source, path=n.vault_path, title=n.title)

    counts: dict[tuple[str, str | None, str, str], int] = defaultdict(int)  # (src, dst, target|"", kind)
    first_target: dict[tuple[str, str, str], str] = {}
    pair_kinds: dict[tuple[str, str], set[str]] = defaultdict(set)
    pair_headings: dict[tuple[str, str], set[str]] = defaultdict(set)
    pair_count: dict[tuple[str, str], int] = defaultdict(int)
    unresolved: set[tuple[str, str]] = set()
    attachments = 0

    for path, note in by_path.items():
        src = note.note_id
        for link in [*parse(note.body), *property_links(note.frontmatter)]:
            if not link.target:
                continue  # self-link
            kind = "embed" if link.embed else link.kind
            dst_path = resolver.resolve(link.target, path, kind=link.kind)
            if dst_path is None:
                if resolver.is_attachment(link.target):
                    attachments += 1
                else:
                    unresolved.add((note.vault_path, link.target))
                    counts[(src, None, link.target, kind)] += 1
                continue
            dst = by_path[dst_path].note_id
            if dst == src:
                continue
            counts[(src, dst, "", kind)] += 1
            first_target.setdefault((src, dst, kind), link.target)
            pair_kinds[(src, dst)].add(kind)
            pair_count[(src, dst)] += 1
            if link.heading:
                pair_headings[(src, dst)].add(link.heading)
            if link.block:
                pair_headings[(src, dst)].add("^" + link.block)

    edges: list[Edge] = []
    for (src, dst, target, kind), count in counts.items():
        if dst is not None:
            target = first_target[(src, dst, kind)]
        edges.append(Edge(src=src, dst=dst, target=target, kind=kind, count=count))
    edges.sort(key=lambda e: (e.src, e.dst or "", e.target if e.dst is None else "", e.kind))

    for (src, dst), count in sorted(pair_count.items()):
        g.add_edge(
            src,
            dst,
            count=count,
            kind="|".join(sorted(pair_kinds[(src, dst)])),
            headings="|".join(sorted(pair_headings[(src, dst)])),
        )
    pagerank: dict[str, float] = {}
    if g.number_of_nodes():
        try:
            pagerank = nx.pagerank(g, weight="count")
        except nx.PowerIterationFailedConvergence:
            pagerank = nx.pagerank(g, weight="count", max_iter=1000, tol=1e-4)
    for node in g.nodes:
        g.nodes[node]["in_degree"] = int(g.in_degree(node))
        g.nodes[node]["pagerank"] = round(float(pagerank.get(node, 0.0)), 10)
    return LinkGraph(graph=g, edges=edges, unresolved=sorted(unresolved), attachments=attachments)


# ---------------------------------------------------------------------------------------------------------------
# headings and block ids a link names
# ---------------------------------------------------------------------------------------------------------------
_HEADING_PUNCT = re.compile(r"[!\"#$%&()*+,.:;<=>?@^`{|}~/\[\]\\]")      # Obsidian's stripHeading set
#: a block id at a line's end, also right after an embed: `![[x.png]]^id`
_BLOCK_ID = re.compile(r"\^([A-Za-z0-9-]+)[ \t]*$", re.MULTILINE)


def heading_key(text: str) -> str:
    """A heading as ``[[note#Heading]]`` is compared with the note's headings here, as Obsidian compares them:
    its punctuation ``!"#$%&()*+,.:;<=>?@^`{|}~/[]\\`` read as spaces (``#``, ``:``, ``|``, ``[]`` and ``^``
    cannot stand in a link: ``## A: B`` is ``[[note#A B]]``), runs of spaces as one; NFC and case-folded too
    (a link that differs from its heading in case only is not named). Hyphens and underscores count, so a
    GitHub slug (``#getting-started``) is no heading ``Getting started``."""
    return " ".join(_HEADING_PUNCT.sub(" ", unicodedata.normalize("NFC", text)).split()).casefold()


def _subpaths(body: str) -> tuple[set[str], set[str]]:
    """``(heading keys, block ids)`` of a note body: its headings outside code as a link names them
    (:func:`pipeline.ingest.normalize.collect_headings`: ATX and setext, explicit ``{#id}`` anchors dropped,
    tags dropped), as :func:`heading_key`; its ``^block`` ids (at a line's end, outside code; Obsidian's help
    writes one right after an embed, ``![[x.png]]^id``), case-folded."""
    from pipeline.common.markdown import split_code
    from pipeline.ingest.normalize import collect_headings

    headings = {heading_key(h) for h in collect_headings(body).values()}
    blocks = {m.group(1).casefold() for is_code, piece in split_code(body) if not is_code
              for m in _BLOCK_ID.finditer(piece)}
    return headings, blocks


def missing_subpaths(notes: Sequence[Note], parse: Callable[[str], list[WikiLink]] = parse_links
                     ) -> list[tuple[str, WikiLink]]:
    """Links whose note exists but whose ``#heading`` or ``#^block`` is not in it, as Obsidian resolves them:
    the note resolved as :func:`build_graph` resolves it (a self-link ``[[#Heading]]`` is the linking note),
    the heading compared by :func:`heading_key` with the note's headings (each part of ``[[note#A#B]]``), the
    block id with its ``^id`` marks. A link to no note (dangling) is not one of them.

    Args:
        notes: the vault's notes (every source: links resolve across them).
        parse: the link parser, as for :func:`build_graph`.

    Returns:
        ``(linking note's vault path, link)``, one per note and distinct link (target, heading, block and
        kind; its first occurrence), in vault path order, then the links' order in the note.
    """
    by_path = {unicodedata.normalize("NFC", n.vault_path): n for n in notes}
    resolver = LinkResolver(by_path, {p: n.aliases for p, n in by_path.items() if n.aliases},
                            {p: n.source_path for p, n in by_path.items()})
    known: dict[str, tuple[set[str], set[str]]] = {}
    out: list[tuple[str, WikiLink]] = []
    for path in sorted(by_path):
        note = by_path[path]
        seen: set[tuple[str, str | None, str | None, bool, str]] = set()
        for link in parse(note.body):
            key = (link.target, link.heading, link.block, link.embed, link.kind)
            if not (link.heading or link.block) or key in seen:
                continue
            seen.add(key)
            dst = resolver.resolve(link.target, path, kind=link.kind) if link.target else path
            if dst is None:
                continue
            if dst not in known:
                known[dst] = _subpaths(by_path[dst].body)
            headings, blocks = known[dst]
            parts = [p for p in (link.heading or "").split("#") if p.strip()]
            if any(heading_key(p) not in headings for p in parts) or (
                    link.block and link.block.strip().casefold() not in blocks):
                out.append((note.vault_path, link))
    return out


# ---------------------------------------------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------------------------------------------
#: characters XML 1.0 cannot hold (C0 controls but tab/newline/CR, lone surrogates, U+FFFE/U+FFFF): a note title
#: carrying one (a terminal escape in a hostile file) made GraphML's writer fail the whole link_graph stage
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(value: Any) -> Any:
    """``value`` with the characters XML cannot hold removed when it is a string (GraphML only; links.json keeps
    the text as is)."""
    return _XML_INVALID.sub("", value) if isinstance(value, str) else value


def graph_content(lg: LinkGraph) -> list[Any]:
    """Everything :func:`export_graph` writes of ``lg``, as JSON-able lists (nodes and linked pairs with their
    attributes, sorted; the edges, unresolved links and attachment count): equal lists, equal files."""
    return [[[node, sorted(lg.graph.nodes[node].items())] for node in sorted(lg.graph.nodes)],
            [[src, dst, sorted(lg.graph.edges[src, dst].items())] for src, dst in sorted(lg.graph.edges)],
            [[e.src, e.dst, e.target, e.kind, e.count] for e in lg.edges], lg.unresolved, lg.attachments]


def export_graph(lg: LinkGraph, out_dir: Path) -> dict[str, Path]:
    """Write ``links.graphml`` and ``links.json`` into ``out_dir`` (created), each atomically (temp + replace).

    GraphML holds only str/int/float attributes and reads back with ``networkx.read_graphml``. JSON is
    ``{"nodes": [...], "edges": [...], "unresolved": [...], "attachments": n}`` sorted by id / (src, dst, kind);
    ``edges`` lists resolved and dangling links (``dst`` null for dangling).

    Args:
        lg: the graph from build_graph.
        out_dir: output folder.

    Returns:
        {"graphml": path, "json": path}.
    """
    out_dir = Path(out_dir)
    g = nx.DiGraph()
    for node in sorted(lg.graph.nodes):
        attrs = lg.graph.nodes[node]
        g.add_node(node, **{k: _xml_safe(v) for k, v in attrs.items() if isinstance(v, (str, int, float))})
    for src, dst in sorted(lg.graph.edges):
        attrs = lg.graph.edges[src, dst]
        g.add_edge(src, dst, **{k: _xml_safe(v) for k, v in attrs.items() if isinstance(v, (str, int, float))})

    graphml = out_dir / "links.graphml"
    write_atomic_with(graphml, lambda fh: nx.write_graphml(g, fh))

    data = {
        "nodes": [{"id": node, **g.nodes[node]} for node in g.nodes],
        "edges": [
            {"src": e.src, "dst": e.dst, "target": e.target, "kind": e.kind, "count": e.count}
            for e in lg.edges
        ],
        "unresolved": [{"path": p, "target": t} for p, t in lg.unresolved],
        "attachments": lg.attachments,
    }
    json_path = out_dir / "links.json"
    write_atomic(json_path, (json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return {"graphml": graphml, "json": json_path}
