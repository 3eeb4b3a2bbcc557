"""Staging of downloaded pages (llms_txt, html): write into a temp folder, swap into ``<raw>/<name>/pages`` only when
the fetch succeeded, so a failed fetch leaves the last good copy (and its ``fetch.json``) untouched.

Page state (one entry per page URL, kept in ``fetch.json`` under ``pages``): ``source_path``, ``fetched_url``,
``etag``, ``last_modified``, ``sha256``, ``kind`` and strategy-specific keys (``links``, ``meta``...).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from pipeline.config import Settings
from pipeline.ingest.fetch.base import source_dir
from pipeline.models import Source

PAGES_DIR = "pages"


def url_source_path(url: str, markdown: bool = True, host_prefix: bool = False) -> str:
    """The page URL's path as a posix source path (no leading ``/``).

    ``/a/b/`` -> ``a/b/index.md``, ``/a/b.html`` -> ``a/b.md``, ``/a/b`` -> ``a/b.md``, ``/a/b.md`` -> ``a/b.md``,
    ``/a/b.md.txt`` -> ``a/b.md``, ``/`` -> ``index.md``. With ``host_prefix`` the host comes first
    (``raw.example.org/a/b.md``, for pages on other allowed hosts). ``..`` and empty parts are dropped.
    """
    parts = urlsplit(url)
    path = unquote(parts.path or "/")
    segs = [s for s in PurePosixPath(path).parts if s not in ("/", "", ".", "..")]
    if path.endswith("/") or not segs:
        segs.append("index")
    name = segs[-1]
    low = name.lower()
    if low.endswith(".md.txt"):
        name = name[:-4]
    elif markdown:
        for ext in (".html", ".htm"):
            if low.endswith(ext):
                name = name[: -len(ext)]
                break
        if not name.lower().endswith((".md", ".mdx", ".markdown")):
            name += ".md"
    segs[-1] = name
    sp = "/".join(segs)
    if host_prefix:
        sp = f"{(parts.hostname or 'host').lower()}/{sp}"
    return sp


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class PageStage:
    """A temp folder next to ``pages/``; :meth:`commit` swaps it in."""

    def __init__(self, source: Source, settings: Settings) -> None:
        self.base = source_dir(source, settings)
        self.base.mkdir(parents=True, exist_ok=True)
        self.final = self.base / PAGES_DIR
        self.tmp = self.base / f"{PAGES_DIR}.tmp-{os.getpid()}"
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir()
        self.paths: set[str] = set()

    def _target(self, source_path: str) -> Path:
        target = (self.tmp / source_path).resolve()
        if not str(target).startswith(str(self.tmp.resolve()) + os.sep):
            raise ValueError(f"source path {source_path!r} leaves the pages folder")
        return target

    def write(self, source_path: str, data: bytes) -> None:
        target = self._target(source_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self.paths.add(source_path)

    def keep(self, source_path: str) -> bool:
        """Carry the last good copy of a page over (hard link, else copy); False when there is none."""
        old = self.final / source_path
        if not old.is_file():
            return False
        target = self._target(source_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(old, target)
        except OSError:
            shutil.copy2(old, target)
        self.paths.add(source_path)
        return True

    def has_old(self, source_path: str) -> bool:
        return (self.final / source_path).is_file()

    def final_path(self, source_path: str) -> Path:
        return self.final / source_path

    def commit(self) -> None:
        old = self.base / f"{PAGES_DIR}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        if self.final.exists():
            os.replace(self.final, old)
        os.replace(self.tmp, self.final)
        shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def revision_of(pages: dict[str, dict[str, Any]]) -> str:
    """sha256 over the sorted (source_path, content sha256) pairs: the listing's content hash."""
    h = hashlib.sha256()
    for sp, digest in sorted((p["source_path"], p.get("sha256", "")) for p in pages.values()):
        h.update(f"{sp}\x00{digest}\n".encode())
    return h.hexdigest()
