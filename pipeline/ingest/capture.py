"""Capture: write what a person or an agent learned as a new note into a local "capture" source.

The capture source is a ``local`` source of sources.yaml, named by ``--source`` / the MCP tool's ``source``, else by
``DOCSVAULT_CAPTURE_SOURCE``; only a source whose next build reads the note is taken (:func:`capture_problem`: not
a ``format: html`` source, nor git/llms_txt/html ones, nor one whose ``include``/``exclude`` leave the note out),
and nothing is written otherwise. A note is written as ``<first root of the source>/<name>.md``, never anywhere else:
the name is one file name (no ``/``, ``\\``, ``..``, leading ``.``, control or ``:*?"<>|`` characters, at most
:data:`MAX_NAME_CHARS`), the resolved file must be inside the root, and an existing file is never overwritten (the
file is created exclusively). Frontmatter (``created``, ``agent``, ``status: raw``, ``correlation_id``,
``related``, ``tags``) comes first, the text after it: under a ``# <title>`` heading when a title is given and the
text does not start with a level-1 heading, without leading blank lines, ending with exactly one newline.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from pipeline.common.errors import PipelineError
from pipeline.config import env_value
from pipeline.models import Source

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_TEXT_CHARS",
    "CaptureError",
    "Captured",
    "capture_problem",
    "capture_source",
    "capture_targets",
    "check_name",
    "name_from_title",
    "write_capture",
]

MAX_NAME_CHARS = 120           # file name length without ``.md``
MAX_TEXT_CHARS = 1_000_000     # a captured note's text (chars)
ENV_SOURCE = "DOCSVAULT_CAPTURE_SOURCE"
_UNSAFE = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|]')


class CaptureError(PipelineError):
    """A capture that cannot be written (no capture source, unsafe or taken name, empty text)."""


@dataclass(frozen=True)
class Captured:
    """A written note: ``path`` (the file), ``source``, ``vault_path`` (``<source>/<name>.md``, searchable after a
    build of the source), ``correlation_id``, ``related`` (vault paths)."""

    path: Path
    source: str
    vault_path: str
    correlation_id: str
    related: tuple[str, ...]


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
    (default: Markdown files; ``*.html``/``*.htm`` for ``format: html``) select it. git, llms_txt and html sources
    are fetched from elsewhere: a file written into their copy is never read.
    """
    from pipeline.ingest.fetch.base import select_default, select_paths

    fmt = source.format or "auto"
    if source.kind != "local" or not source.path:
        return (f"capture source {source.name!r} is kind {source.kind}, format {fmt}: its files come from "
                f"{source.url or 'elsewhere'}, notes are captured into a local Markdown source only")
    where = _root_path(source, fname)
    if select_paths(source, [where]):
        return None
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
    lists the sources that can take a capture (:func:`capture_targets`).

    Raises:
        CaptureError: none named, unknown, or a source a captured Markdown note would not be read from (not
            ``local``, ``format: html``, or an ``include``/``exclude`` that leaves out ``<name>.md`` in its first
            folder: :func:`capture_problem`).
    """
    name = name or env_value(ENV_SOURCE).strip() or None
    if not name:
        targets = capture_targets(sources)
        raise CaptureError(f"no capture source: set {ENV_SOURCE} to a local source of sources.yaml "
                           f"({', '.join(targets) or 'none yet: add one'}) or pass {arg}")
    found = next((s for s in sources if s.name == name), None)
    if found is None:
        raise CaptureError(f"unknown capture source {name!r}; sources that can take a capture: "
                           f"{_targets_line(sources)}")
    problem = capture_problem(found)
    if problem:
        raise CaptureError(f"{problem}; sources that can take a capture: {_targets_line(sources)}")
    return found


def check_name(name: str) -> str:
    """A safe note file name (without ``.md``; a trailing ``.md`` is dropped).

    Raises:
        CaptureError: empty, too long, a path (``/``, ``\\``, ``..``), hidden (leading ``.``), or holding control or
            ``:*?"<>|`` characters.
    """
    raw = name
    name = unicodedata.normalize("NFC", name.strip())
    if name.lower().endswith(".md"):
        name = name[:-3].rstrip()
    if not name:
        raise CaptureError("the note name is empty: pass --name or a title")
    shown = raw if len(raw) <= 80 else raw[:77] + "..."
    if _UNSAFE.search(name) or ".." in name:
        raise CaptureError(f"unsafe note name {shown!r}: a name is one file name, without / \\ .. : * ? \" < > | "
                           "or control characters")
    if name.startswith("."):
        raise CaptureError(f"unsafe note name {shown!r}: hidden names (a leading '.') are not notes")
    if len(name) > MAX_NAME_CHARS:
        raise CaptureError(f"note name too long ({len(name)} chars, at most {MAX_NAME_CHARS}): pass a shorter --name")
    return name


def name_from_title(title: str) -> str:
    """A file name from a title: unsafe characters become ``-``, whitespace collapses, at most MAX_NAME_CHARS."""
    name = _UNSAFE.sub("-", unicodedata.normalize("NFC", title))
    name = re.sub(r"\.{2,}", ".", " ".join(name.split())).strip(" .-")
    return name[:MAX_NAME_CHARS].rstrip(" .-")


def title_of(text: str) -> str:
    """The first Markdown heading of ``text``, else the first sentence of its first non-empty line; at most 80
    chars, a longer one cut at a word boundary and ended with ``…``."""
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if m:
            return _cut_title(m.group(1))
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    sentence = re.match(r"(.+?[.!?。！？])(?:\s|$)", first)
    return _cut_title(sentence.group(1) if sentence else first)


def _cut_title(title: str, limit: int = 80) -> str:
    """``title`` when at most ``limit`` chars, else cut at the last space before the limit (or at the limit) + ``…``."""
    if len(title) <= limit:
        return title
    cut = title[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:-") + "…"


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
        text: the note's Markdown (without frontmatter; a leading ``---`` block is kept as text).
        title: the note's title (default: its first heading or line); when given, a text that does not start with
            a level-1 heading gets ``# <title>`` on top.
        name: the file name (default: from the title; checked by :func:`check_name`).
        agent: who wrote it (the model or agent name; ``agent`` in the frontmatter).
        correlation_id: ties the note to a conversation/run (default: a new UUID4 hex).
        related: vault paths of related notes (the top search hits of the text).
        tags: frontmatter tags.
        now: the creation time (default: now, UTC).
        name_option: how the caller's interface passes ``name``, for the errors (``--name``; MCP: ```name```).

    Returns:
        What was written.

    Raises:
        CaptureError: empty or too long text, unsafe or taken name, a file that would land outside the root, or
            one the source would not read (:func:`capture_problem`: its ``include``/``exclude`` leave the name out).
    """
    if not text or not text.strip():
        raise CaptureError("nothing to capture: the text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise CaptureError(f"the text is {len(text)} chars, more than the {MAX_TEXT_CHARS}-char cap of a captured note")
    heading = bool(title and title.strip())
    title = " ".join((title or title_of(text)).split())
    fname = check_name(name) if name else check_name(name_from_title(title) or "capture")
    problem = capture_problem(source, fname)
    if problem:
        raise CaptureError(f"{problem}: pass another {name_option} or source (nothing was written)")
    root = source.path[0].resolve()
    if not root.is_dir():
        raise CaptureError(f"capture source {source.name!r}: its folder {root} does not exist; create it or fix "
                           "sources.yaml")
    target = (root / f"{fname}.md")
    if not target.resolve().parent == root:
        raise CaptureError(f"refused: {fname!r} would be written outside {root}")
    created = (now or datetime.now(UTC)).replace(microsecond=0)
    cid = correlation_id or uuid.uuid4().hex
    fm: dict[str, object] = {"title": title, "created": created.isoformat().replace("+00:00", "Z"), "agent": agent,
                             "status": "raw", "correlation_id": cid}
    if related:
        fm["related"] = list(related)
    if tags:
        fm["tags"] = [t.lstrip("#") for t in tags if t.strip("# ")]
    head = yaml.safe_dump(fm, allow_unicode=True, sort_keys=False, width=1000)
    body = re.sub(r"\A(?:[ \t]*\r?\n)+", "", text.rstrip())
    if heading and not _starts_with_h1(body):
        body = f"# {title}\n\n{body}"
    content = f"---\n{head}---\n\n{body}\n"
    try:
        with open(target, "x", encoding="utf-8", newline="\n") as fh:
            fh.write(content)
    except FileExistsError:
        raise CaptureError(f"a note named {fname + '.md'!r} already exists in {root}: pass another {name_option} "
                           "(nothing was overwritten)") from None
    except OSError as exc:
        raise CaptureError(f"cannot write {target}: {exc.strerror or exc}") from None
    return Captured(path=target, source=source.name, vault_path=f"{source.name}/{fname}.md", correlation_id=cid,
                    related=tuple(related))


def related_for(searcher: object, title: str, text: str, k: int = 3) -> list[str]:
    """Vault paths of the top ``k`` notes a search for the title and the text's start finds (``searcher`` a
    :class:`pipeline.search.searcher.Searcher`); [] when nothing is found."""
    query = f"{title} {' '.join(text.split())[:300]}".strip()
    hits = searcher.search(query, k=k)  # type: ignore[attr-defined]
    return [h.vault_path for h in hits]
