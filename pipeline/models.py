"""The nouns passed between stages: frozen records, no behaviour beyond derived fields.

IDs are stable: a note's id derives from (source, source_path); a chunk's id from (note id, heading path, ordinal).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

SourceKind = Literal["git", "llms_txt", "html", "local"]
DocFormat = Literal["obsidian", "markdown", "mdx", "docbuilder", "jekyll", "html"]


def stable_id(*parts: str, length: int = 16) -> str:
    """Hex id (``length`` chars) of sha1 over the parts joined by NUL; stable across runs and machines."""
    return hashlib.sha1("\x00".join(parts).encode("utf-8")).hexdigest()[:length]


def text_hash(text: str) -> str:
    """sha256 hex of the UTF-8 text: the content key of caches."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


IMAGE = frozenset("png jpg jpeg gif bmp svg webp avif heic tif tiff ico".split())
AUDIO = frozenset("mp3 wav m4a ogg flac 3gp".split())
VIDEO = frozenset("webm mp4 ogv mov mkv avi".split())
COPY_EXTENSIONS: frozenset[str] = IMAGE | AUDIO | VIDEO | {"pdf", "canvas"}
"""Extensions (lower case, no dot) of the files copied into the vault when a note uses them
(:mod:`pipeline.ingest.attachments`); a local source's revision covers its files of these extensions too."""


@dataclass(frozen=True)
class Source:
    """One block of sources.yaml, validated (see pipeline.ingest.sources)."""

    name: str
    kind: SourceKind
    url: str | None = None
    ref: str | None = None
    paths: tuple[str, ...] = ()
    path: tuple[Path, ...] = ()          # local roots, absolute (kind: local)
    format: DocFormat | None = None      # None: guessed per file
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    site_url: str | None = None
    language: str | None = None          # e.g. "en", "ja"; None: detected per chunk
    embedding: str | None = None         # model spec for this source; None: the default model
    token_env: str | None = None         # name of an env var holding a token for private git repos / HTTP sites
    strategies: tuple[str, ...] = ()     # fetch strategies tried in order (e.g. llms_txt, html); () = (kind,)
    sitemap: str | None = None           # html: "auto" (<start dir>/sitemap.xml) or a sitemap URL; None: links only
    rate_limit: float | None = None      # seconds between two requests to one host; None: the default (1.0)
    max_pages: int | None = None         # page cap per fetch (llms_txt / html); None: the default (1000)
    allowed_hosts: tuple[str, ...] = ()  # extra hosts (host or host:port) whose pages may be fetched


@dataclass(frozen=True)
class RawFile:
    """A fetched file: where it lives on disk and what it is called in its source."""

    source: str
    source_path: str                      # posix path in the repository or site, e.g. "en/Home.md"
    path: Path                            # absolute path on disk
    url: str | None = None                # page URL when known
    meta: dict[str, Any] = field(default_factory=dict, hash=False)   # extra frontmatter from the fetcher
                                                                      # (e.g. llms_section, llms_optional)


@dataclass(frozen=True)
class FetchResult:
    """What a fetch produced for one source."""

    source: str
    strategy: str                         # "git", "local", "llms_txt", "html"
    revision: str | None                  # git commit id, or a content hash of the listing
    files: tuple[RawFile, ...]
    changed: bool                         # False when nothing moved upstream since the last fetch
    stats: dict[str, Any] = field(default_factory=dict)   # requests, bytes, seconds, warnings
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Note:
    """A normalized note, as written to (and read back from) the vault.

    ``rel_path`` is the note's path inside ``vault/<source>/`` (posix, ends in ``.md``); ``frontmatter`` holds every
    key (the page's own keys merged with title/source/source_path/url/...), JSON-safe values only (dates as ISO
    strings); ``body`` is the Markdown after the frontmatter, LF line endings.
    """

    source: str
    source_path: str
    rel_path: str
    title: str
    frontmatter: dict[str, Any]
    body: str

    @property
    def note_id(self) -> str:
        return stable_id(self.source, self.source_path)

    @property
    def vault_path(self) -> str:
        """Path relative to the vault root: ``<source>/<rel_path>``."""
        return f"{self.source}/{self.rel_path}"

    @property
    def url(self) -> str | None:
        value = self.frontmatter.get("url")
        return str(value) if value else None

    @property
    def aliases(self) -> tuple[str, ...]:
        """Frontmatter ``aliases`` as strings: a list's items, or a single value of any YAML type as one item
        (``aliases: 2024`` -> ``("2024",)``, ``true`` -> ``("True",)``, as the items of ``[2024, true]``); empty
        and false-y values (``""``, ``0``, ``false``, null) give none. As Obsidian reads them (its
        ``parseFrontMatterAliases``): a string value is a comma-separated list (``aliases: ベツメイ, other`` is two
        aliases), and its deprecated ``alias`` key (its help, Properties: "Deprecated alias for aliases"), which
        older vaults still have, adds its values after them."""
        out: list[str] = []
        for key in ("aliases", "alias"):
            value = self.frontmatter.get(key) or ()
            if isinstance(value, str):
                value = [part.strip() for part in value.split(",")]
            elif not isinstance(value, (list, tuple)):
                value = [value]
            out += [str(v) for v in value if v and str(v) not in out]
        return tuple(out)

    @property
    def description(self) -> str:
        value = self.frontmatter.get("description") or ""
        return str(value) if not isinstance(value, (list, dict)) else ""


@dataclass(frozen=True)
class WikiLink:
    """One ``[[target#heading|alias]]`` (or ``![[...]]`` embed, or a converted Markdown link) found in a note."""

    target: str                           # link path as written, without heading/block; "" for a self-link
    heading: str | None = None            # "#Heading" part (without '#'), None when absent
    block: str | None = None              # "#^block" id (without '#^'), None when absent
    alias: str | None = None
    embed: bool = False
    kind: Literal["wikilink", "markdown", "property"] = "wikilink"   # property: in a frontmatter value


@dataclass(frozen=True)
class Edge:
    """A resolved (or dangling) link between notes, counted."""

    src: str                              # note id
    dst: str | None                       # note id, None when unresolved
    target: str                           # the link text as written
    kind: str                             # "wikilink" | "embed" | "markdown"
    count: int = 1


@dataclass(frozen=True)
class Chunk:
    """A heading section (or a piece of one) of a note.

    ``text`` is the chunk's body text as in the note (Obsidian block ids left out, a table's delimiter row with its
    dashes cut to three: :func:`pipeline.index.chunk.compact_table_delimiters`); ``breadcrumb`` is ``Title > H2 > H3``; what gets embedded and
    BM25-indexed is ``embed_text`` (breadcrumb, blank line, text). Sizes are in the embedding model's tokens.
    """

    chunk_id: str
    note_id: str
    source: str
    ordinal: int                          # position in the note, 0-based
    heading_path: tuple[str, ...]         # headings above the chunk, outermost first (title not included)
    breadcrumb: str
    text: str
    language: str = ""                    # the note's language (pipeline.index.language): decides its embedding model

    @property
    def heading(self) -> str:
        return self.heading_path[-1] if self.heading_path else ""

    @property
    def embed_text(self) -> str:
        return f"{self.breadcrumb}\n\n{self.text}" if self.text else self.breadcrumb

    @property
    def text_hash(self) -> str:
        return text_hash(self.embed_text)


@dataclass(frozen=True)
class Hit:
    """One search result: a chunk of a note, with its fused score (higher is better)."""

    rank: int
    source: str
    source_path: str
    vault_path: str
    title: str
    heading: str              # the section the match is in (the chunk's heading, or a heading line in its
                              # text above the match); as shown: HTML, links and control characters made plain
    score: float
    snippet: str
    chunk_id: str = ""
    note_id: str = ""
    lanes: dict[str, int] = field(default_factory=dict)   # lane -> page rank in that lane (1-based)
    context: str = ""                                     # snippet of the note's second-best chunk ("" if none)
    chunk_text: str = ""                                  # the hit chunk's Markdown (to place the hit in its note)
    boost: float = 0.0                                    # usage boost in ``score`` (RRF + boost; 0.0: none)


@dataclass(frozen=True)
class EvalCase:
    id: str
    corpus: str                           # = source name
    query: str
    expected: tuple[str, ...]             # source_paths; a hit when any appears
    kind: str = "unknown"
    file: str = ""


def model_slug(model_id: str) -> str:
    """Filesystem- and SQL-identifier-safe form of a model id: lowercase ``[a-z0-9_]``, at most 60 chars.

    ``"sentence-transformers/all-MiniLM-L6-v2"`` -> ``"sentence_transformers_all_minilm_l6_v2"``; a longer id is
    cut and suffixed with 8 hex chars of its sha1 so it stays unique.
    """
    slug = re.sub(r"[^a-z0-9]+", "_", model_id.lower()).strip("_") or "model"
    if len(slug) > 60:
        slug = f"{slug[:51]}_{hashlib.sha1(model_id.encode('utf-8')).hexdigest()[:8]}"
    return slug


# ---------------------------------------------------------------------------------------------------------------
# typed records of what the pipeline reports (status, eval reports): ``as_dict()`` is the JSON the shells print


def plain(value: Any) -> Any:
    """A record's value as JSON-ready data: records -> dicts (``as_dict``), tuples -> lists, mappings -> dicts."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


class Record:
    """Base of the frozen report dataclasses: ``as_dict()`` gives the fields in declaration order (the JSON key
    order), nested records and tuples made plain."""

    def as_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


class MappingRecord(Record, Mapping[str, Any]):
    """A Record that also reads as the mapping :meth:`as_dict` gives (``report["overall"]``, ``{**report}``), for
    the code and files that took the plain dict before. Declare subclasses with ``eq=False`` (mapping equality)."""

    def __getitem__(self, key: str) -> Any:
        # one field made plain, not the whole record (an eval report's per-case rows): what as_dict()[key] gives
        # unless a subclass's as_dict adds or changes keys
        if type(self).as_dict is Record.as_dict and key in _field_names(type(self)):
            return plain(getattr(self, key))
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

