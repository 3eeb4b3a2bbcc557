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

from dataclasses import replace
from pathlib import Path

from pipeline.common.errors import FetchError
from pipeline.config import Settings
from pipeline.ingest.fetch.base import (
    DEFAULT_INCLUDE,
    GLOB_CHARS,
    STATE_FILE,
    atomic_write_text,
    glob_to_regex,
    is_glob,
    now_iso,
    path_matches,
    read_state,
    select_paths,
    source_dir,
    strategy_url,
    write_state,
)
from pipeline.models import FetchResult, RawFile, Source

__all__ = [
    "GLOB_CHARS",
    "STATE_FILE",
    "atomic_write_text",
    "is_glob",
    "now_iso",
    "read_state",
    "write_state",
    "DEFAULT_INCLUDE",
    "fetch_source",
    "glob_to_regex",
    "load_fetch_result",
    "path_matches",
    "select_paths",
    "source_dir",
    "strategy_url",
]


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

