"""Fetch stage: bring a source's files onto local disk and say what changed.

``fetch_source`` dispatches on ``source.kind``; each strategy writes its state to ``<raw>/<name>/fetch.json`` (written
atomically) so ``load_fetch_result`` can serve the last good copy when upstream is unreachable.

File selection (both kinds): ``include`` / ``exclude`` globs on the posix ``source_path``, gitignore-like:
``*`` and ``?`` stay within one path component, ``**`` matches any depth (``docs/**/*.md`` matches ``docs/a.md`` and
``docs/x/y/b.md``), a pattern without ``/`` matches the file name at any depth (``*.md``), and a pattern also matches
every file below a folder it matches (``exclude: [api-ref]``). With no ``include`` the default is Markdown-ish files
and Obsidian canvases (``*.md``, ``*.mdx``, ``*.markdown``, ``*.canvas``).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from pipeline.config import Settings
from pipeline.common.errors import FetchError
from pipeline.models import FetchResult, RawFile, Source

DEFAULT_INCLUDE: tuple[str, ...] = ("*.md", "*.mdx", "*.markdown", "*.canvas")
STATE_FILE = "fetch.json"
GLOB_CHARS = frozenset("*?[")

__all__ = [
    "DEFAULT_INCLUDE",
    "fetch_source",
    "glob_to_regex",
    "load_fetch_result",
    "path_matches",
    "select_paths",
    "source_dir",
    "strategy_url",
]


def source_dir(source: Source, settings: Settings) -> Path:
    """``<raw>/<name>/``: where a source's clone / downloads and its ``fetch.json`` live."""
    return settings.raw_dir / source.name


def fetch_source(source: Source, settings: Settings) -> FetchResult:
    """Fetch one source into ``<raw>/<name>/`` (git clone, downloaded pages) or list it in place (local).

    Strategies: ``source.strategies`` (a fallback chain such as ``[llms_txt, html]``) are tried in order, else the
    source's ``kind``; the first that succeeds wins and is ``FetchResult.strategy``; the failures before it become
    warnings. URLs per strategy: see :func:`strategy_url`.

    Args:
        source: a validated source block.
        settings: paths; the destination is ``settings.raw_dir / source.name``.

    Returns:
        FetchResult with ``files`` sorted by ``source_path``, ``changed`` False when nothing moved upstream since the
        last recorded fetch, and ``stats`` with keys ``requests`` (network round trips), ``bytes`` (bytes
        downloaded; git/local: bytes of the selected files when changed, else 0), ``seconds`` (wall time),
        ``files`` (count) and, for llms_txt/html, ``pages``, ``not_modified`` and ``warnings`` (count).

    Raises:
        FetchError: the source cannot be fetched (one line naming source, URL/path and cause; with a chain, every
            strategy's cause), or selects zero files (git, llms_txt, html: probably a config error; a local folder
            with no notes is an empty source instead). The previous copy and ``fetch.json`` are left untouched.
    """
    chain = source.strategies or (source.kind,)
    failures: list[str] = []
    for strategy in chain:
        try:
            result = _fetch_with(strategy, source, settings)
        except FetchError as exc:
            if len(chain) == 1:
                raise
            failures.append(f"{strategy}: {exc}")
            continue
        if failures:
            notes = tuple(f"source '{source.name}': strategy {f} (fell back to {strategy})" for f in failures)
            stats = {**result.stats, "warnings": int(result.stats.get("warnings", 0)) + len(notes),
                     "fallbacks": len(notes)}
            result = replace(result, warnings=notes + result.warnings, stats=stats)
        return result
    raise FetchError(f"source '{source.name}': every strategy failed: " + " | ".join(failures))


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


def _fetch_with(strategy: str, source: Source, settings: Settings) -> FetchResult:
    if strategy == "git":
        from pipeline.ingest.fetch.git import fetch_git

        return fetch_git(source, settings)
    if strategy == "local":
        from pipeline.ingest.fetch.local import fetch_local

        return fetch_local(source, settings)
    if strategy == "llms_txt":
        from pipeline.ingest.fetch.llms_txt import fetch_llms_txt

        return fetch_llms_txt(source, settings, url=strategy_url(source, "llms_txt"))
    if strategy == "html":
        from pipeline.ingest.fetch.html import fetch_html

        return fetch_html(source, settings, start_url=strategy_url(source, "html"))
    raise FetchError(f"source '{source.name}': unknown fetch strategy '{strategy}'; use git, local, llms_txt or html")


def load_fetch_result(source: Source, settings: Settings) -> FetchResult | None:
    """Rebuild the last recorded FetchResult of a source from ``<raw>/<name>/fetch.json``.

    Returns:
        The last good result (``changed=False``; files whose disk copy has since vanished are dropped), or None when
        the source was never fetched or its state file is unreadable.
    """
    state = read_state(source, settings)
    if state is None or not isinstance(state.get("files"), list):
        return None
    files: list[RawFile] = []
    for entry in state["files"]:
        try:
            raw = RawFile(source=source.name, source_path=str(entry["source_path"]), path=Path(entry["path"]),
                          url=entry.get("url"), meta=dict(entry.get("meta") or {}))
        except (KeyError, TypeError):
            return None
        if raw.path.is_file():
            files.append(raw)
    files.sort(key=lambda f: f.source_path)
    stats = dict(state.get("stats") or {})
    stats["files"] = len(files)
    return FetchResult(
        source=source.name,
        strategy=str(state.get("strategy", source.kind)),
        revision=state.get("revision"),
        files=tuple(files),
        changed=False,
        stats=stats,
        warnings=tuple(state.get("warnings") or ()),
    )


# ---- shared helpers for the strategies ----

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


def select_paths(source: Source, paths: Iterable[str]) -> list[str]:
    """Apply ``include`` (default Markdown-ish) and ``exclude`` to posix source paths; sorted, deduplicated."""
    include = source.include or DEFAULT_INCLUDE
    keep = {p for p in paths if path_matches(p, include) and not path_matches(p, source.exclude)}
    return sorted(keep)
