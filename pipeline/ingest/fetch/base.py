"""What every fetch strategy shares: where a source's files go, its fetch state (``fetch.json``), the URL a
strategy starts from, and include/exclude file selection (globs, see the package docstring)."""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from pipeline.config import Settings
from pipeline.models import FetchResult, Source

DEFAULT_INCLUDE: tuple[str, ...] = ("*.md", "*.mdx", "*.markdown", "*.canvas")


DEFAULT_INCLUDE: tuple[str, ...] = ("*.md", "*.mdx", "*.markdown", "*.canvas")
STATE_FILE = "fetch.json"
#: the first line of a Git LFS pointer file (and of the spec's pre-release name), and the largest pointer file
LFS_POINTER_STARTS = (b"version https://git-lfs.github.com/spec/", b"version https://hawser.github.com/spec/")
LFS_POINTER_MAX_BYTES = 1024


def is_lfs_pointer(data: bytes) -> bool:
    """True when ``data`` (a file's first bytes, at least :data:`LFS_POINTER_MAX_BYTES` of them, or all) is a Git
    LFS pointer: the few lines (``version …``, ``oid sha256:…``, ``size N``) a repository holds in place of a file
    it keeps in LFS. A clone without ``git lfs`` (docsvault's own, a checkout made without it) has these where the
    notes and images are."""
    return len(data) < LFS_POINTER_MAX_BYTES and data.startswith(LFS_POINTER_STARTS) and b"\noid sha256:" in data


def lfs_pointer_reason() -> str:
    """What a note or attachment that is an LFS pointer is told (after ``source 'x': path: ``)."""
    return ("a Git LFS pointer, not the file (the repository keeps it in Git LFS, which docsvault does not fetch); "
            "build it from a checkout where `git lfs pull` has run (a local source), or exclude it")
GLOB_CHARS = frozenset("*?[")


def source_dir(source: Source, settings: Settings) -> Path:
    """``<raw>/<name>/``: where a source's clone / downloads and its ``fetch.json`` live."""
    return settings.raw_dir / source.name


def strategy_url(source: Source, strategy: str) -> str | None:
    """The URL a strategy starts from: llms_txt -> ``url`` when it names a ``.txt`` file, else ``<url folder>/llms.txt``;
    html -> ``url``, or the folder of an ``llms.txt`` / ``llms-full.txt`` URL; git -> ``url``."""
    url = source.url
    if not url:
        return None
    path = urlsplit(url).path
    if strategy == "llms_txt":
        if path.lower().endswith(".txt"):
            return url
        last = path.rsplit("/", 1)[-1]
        return urljoin(url if url.endswith("/") or "." in last else url + "/", "llms.txt")
    if strategy == "html":
        return urljoin(url, "./") if path.lower().endswith((".txt",)) else url
    return url


def now_iso() -> str:
    """Current UTC time, ISO 8601 with seconds and a ``Z``-free ``+00:00`` offset."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def read_state(source: Source, settings: Settings) -> dict[str, Any] | None:
    """The parsed ``fetch.json`` of a source, or None when missing or unreadable."""
    path = source_dir(source, settings) / STATE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(source: Source, settings: Settings, result: FetchResult, fetched_at: str,
                extra: dict[str, Any] | None = None) -> None:
    """Atomically write ``<raw>/<name>/fetch.json`` (temp file in the same folder + ``os.replace``)."""
    folder = source_dir(source, settings)
    folder.mkdir(parents=True, exist_ok=True)
    state: dict[str, Any] = {
        "source": source.name,
        "strategy": result.strategy,
        "revision": result.revision,
        "fetched_at": fetched_at,
        "file_count": len(result.files),
        "stats": result.stats,
        "warnings": list(result.warnings),
        **(extra or {}),
        "files": [{"source_path": f.source_path, "path": str(f.path), "url": f.url, **({"meta": f.meta} if f.meta else {})}
                  for f in result.files],
    }
    atomic_write_text(folder / STATE_FILE, json.dumps(state, ensure_ascii=False, indent=1) + "\n")


def atomic_write_text(path: Path, text: str) -> None:
    """Write text (UTF-8) through a temp file in the same folder and ``os.replace``."""
    from pipeline.common.artifacts import write_atomic

    write_atomic(path, text.encode("utf-8"))


def is_glob(pattern: str) -> bool:
    """True when the pattern contains a glob character (``*``, ``?`` or ``[``)."""
    return any(c in GLOB_CHARS for c in pattern)


@functools.lru_cache(maxsize=512)
def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a gitignore-like glob (see module doc) to a regex matched against a whole posix path."""
    pat = pattern.strip()
    anchored = pat.startswith("/") or "/" in pat.rstrip("/")
    pat = pat.strip("/")
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            if pat.startswith("**", i):
                j = i + 2
                if j < n and pat[j] == "/":
                    out.append("(?:.*/)?")
                    i = j + 1
                else:
                    out.append(".*")
                    i = j
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pat.find("]", i + 2 if pat[i + 1:i + 2] in ("!", "^") else i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pat[i + 1:j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    prefix = "" if anchored else "(?:.*/)?"
    return re.compile(f"^{prefix}{''.join(out)}(?:/.*)?$", re.DOTALL)


def path_matches(path: str, patterns: Iterable[str]) -> bool:
    """True when the posix ``path`` matches any of the globs (see module doc)."""
    return any(glob_to_regex(p).match(path) for p in patterns)


#: the default ``include`` of a local source with ``format: html`` (a built HTML site on disk)
HTML_INCLUDE: tuple[str, ...] = ("*.html", "*.htm")


def select_default(source: Source) -> tuple[str, ...]:
    """The ``include`` globs of ``source`` when it sets none."""
    return HTML_INCLUDE if source.kind == "local" and source.format == "html" else DEFAULT_INCLUDE


#: where an Obsidian vault names its templates folder: the core Templates plugin, then the Templater plugin
TEMPLATE_SETTINGS: tuple[tuple[str, str], ...] = ((".obsidian/templates.json", "folder"),
                                                  (".obsidian/plugins/templater-obsidian/data.json",
                                                   "templates_folder"))


def template_folders(source: Source) -> tuple[str, ...]:
    """The templates folders of a local ``format: obsidian`` source, as source paths (``Templates``, or
    ``<root folder>/Templates`` for a source of several roots): the folder the vault's core Templates plugin
    (``.obsidian/templates.json``'s ``folder``) and its Templater plugin (``templates_folder`` of
    ``.obsidian/plugins/templater-obsidian/data.json``) name, relative to the vault (the folder holding
    ``.obsidian/``, the source's root or one above it), when it is inside the source's root. Each is left out
    unless an ``include`` glob starts with it or is it (``include: ["Templates/**", "**/*.md"]``, or
    ``include: [Templates, "**/*.md"]``: a glob naming a folder matches what it holds). () for other sources;
    settings files that cannot be read or are not JSON objects name no folder."""
    if source.kind != "local" or source.format != "obsidian" or not source.path:
        return ()
    roots = sorted(Path(p) for p in source.path)
    out: list[str] = []
    for root in roots:
        vault = next((d for d in (root, *root.parents) if (d / ".obsidian").is_dir()), None)
        if vault is None:
            continue
        for rel, key in TEMPLATE_SETTINGS:
            try:
                folder = json.loads((vault / rel).read_text(encoding="utf-8")).get(key)
            except (OSError, ValueError, AttributeError):
                continue
            if not isinstance(folder, str) or not folder.strip("/ "):
                continue
            try:
                inside = (vault / folder.strip("/ ")).relative_to(root).as_posix()
            except ValueError:              # the templates folder is elsewhere in the vault
                continue
            inside = unicodedata.normalize("NFC", inside)        # source paths are NFC
            if inside != ".":
                out.append(f"{root.name}/{inside}" if len(roots) > 1 else inside)
    return tuple(dict.fromkeys(out))


def select_paths(source: Source, paths: Iterable[str]) -> list[str]:
    """Apply ``include`` (default Markdown-ish; ``*.html``/``*.htm`` for a local ``format: html`` source) and
    ``exclude`` to posix source paths, and leave out an Obsidian vault's templates folders
    (:func:`template_folders`: a template's ``{{title}}`` and ``{{date}}`` are no note to search); sorted,
    deduplicated."""
    include = source.include or select_default(source)
    templates = tuple(f"{t}/" for t in left_out_templates(source))
    keep = {p for p in paths if path_matches(p, include) and not path_matches(p, source.exclude)
            and not p.startswith(templates)}
    return sorted(keep)


def left_out_templates(source: Source) -> tuple[str, ...]:
    """The templates folders of ``source`` (:func:`template_folders`) that :func:`select_paths` leaves out: all but
    those an ``include`` glob starts with or is (``Templates/**``, or ``Templates``)."""
    return tuple(t for t in template_folders(source)
                 if not any(f"{g.lstrip('/')}/".startswith(f"{t}/") for g in source.include))
