"""Start-up caches of a search process: decoded model state and warehouse vectors as raw files, read back with
``numpy.load(mmap_mode="r")`` / ``marshal`` instead of decompressing, parsing or querying on every start.

Every entry is derived data: a directory ``<root>/<kind>/<key>/`` whose ``key`` is a digest of everything the content
depends on (package version, source file size + mtime, warehouse generation ...), written to a temporary directory
and renamed into place (atomic: a reader sees a whole entry or none), with a ``manifest.json`` listing each file's size.
A missing, partial or corrupt entry is rebuilt from the source; an entry that cannot be written (read-only home, full
disk) only costs the speed-up (logged at debug level). Stale entries of the same kind and name are removed when a new
one is written.

Root: ``DOCSVAULT_SEARCH_CACHE``, else ``$XDG_CACHE_HOME/docsvault/search``, else ``~/.cache/docsvault/search``;
``DOCSVAULT_SEARCH_CACHE=off`` disables these caches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import marshal
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipeline.config import search_cache_dir

log = logging.getLogger(__name__)

__all__ = ["cache_root", "cached_state", "entry_key", "file_stamp", "load_entry", "store_entry"]

MANIFEST = "manifest.json"


def cache_root() -> Path | None:
    """The cache root directory (not created), or None when ``DOCSVAULT_SEARCH_CACHE=off`` (``config.search_cache_dir``)."""
    return search_cache_dir()


def file_stamp(path: Path) -> list[Any]:
    """What a cache key needs to know of a source file: ``[absolute path, size, mtime_ns]`` (``[path, -1, -1]``
    when it does not exist). Any rewrite changes size or mtime."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return [str(p), -1, -1]
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


def entry_key(*parts: Any) -> str:
    """A 24-hex digest of JSON-serialisable ``parts`` (the entry's inputs)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:24]


def _entry_dir(kind: str, name: str, key: str) -> Path | None:
    root = cache_root()
    return None if root is None else root / kind / f"{name}-{key}"


def load_entry(kind: str, name: str, key: str) -> Path | None:
    """The directory of a complete entry (every file of its manifest present with its recorded size), else None.

    Args:
        kind: cache kind (``"usem3"``, ``"vectors"``).
        name: the entry's name within the kind (a model or table name, ``[A-Za-z0-9_.-]``).
        key: :func:`entry_key` of its inputs.
    """
    directory = _entry_dir(kind, name, key)
    if directory is None:
        return None
    try:
        manifest = json.loads((directory / MANIFEST).read_text("utf-8"))
        files = manifest["files"]
        if not isinstance(files, dict) or not files:
            return None
        for fname, size in files.items():
            if (directory / fname).stat().st_size != size:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return directory


def store_entry(kind: str, name: str, key: str, write: Callable[[Path], None],
                meta: Mapping[str, Any] | None = None) -> Path | None:
    """Write an entry atomically: ``write(tmp_dir)`` creates its files, then the directory is renamed into place
    and older entries ``<kind>/<name>-*`` are removed. A complete entry of the same key that a concurrent writer
    put there first is kept (a reader may be opening it) and ours is dropped. Another process may still remove the
    returned entry (it writes a newer key): callers that read it back fall back to what they computed.

    Returns:
        The entry's directory, or None when the cache is off or cannot be written (the reason is logged at debug
        level; callers carry on with what they computed).
    """
    directory = _entry_dir(kind, name, key)
    if directory is None:
        return None
    parent = directory.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=parent))
        try:
            write(tmp)
            files = {p.name: p.stat().st_size for p in tmp.iterdir() if p.is_file()}
            (tmp / MANIFEST).write_text(json.dumps({"files": files, **dict(meta or {})}), "utf-8")
            if load_entry(kind, name, key) is None:   # else a concurrent writer won: keep its entry (readers may
                if directory.exists():                # hold it open), drop ours; a corrupt entry is replaced
                    shutil.rmtree(directory, ignore_errors=True)
                try:
                    os.replace(tmp, directory)
                except OSError:
                    if load_entry(kind, name, key) is None:   # not a writer that won between rmtree and rename
                        raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        log.debug("search cache %s not written: %s", directory, exc)
        return None
    for old in parent.glob(f"{name}-*"):
        if old != directory and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    return directory


def cached_state(kind: str, name: str, key: str, compute: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """A derived state through an entry: loaded when a complete entry exists, else ``compute()``d and stored.

    Values that are numpy arrays (numeric dtypes) are stored as raw ``.npy`` and come back memory-mapped read-only
    (equal dtype, shape and values); every other value is stored with ``marshal`` (str, int, float, lists, dicts,
    tuples ... of those) and comes back equal. A corrupt entry is recomputed (and rewritten); an entry that cannot
    be written costs only the speed-up.

    Args:
        kind, name, key: as :func:`load_entry`.
        compute: builds the state ``{field: value}`` (field names ``[A-Za-z0-9_]``).

    Returns:
        The state: the loaded entry's, else what ``compute`` returned (as a new dict).
    """
    import numpy as np

    directory = load_entry(kind, name, key)
    if directory is not None:
        try:
            state: dict[str, Any] = marshal.loads((directory / "state.marshal").read_bytes())
            for field in state.pop("__arrays__"):
                state[field] = np.asarray(np.load(directory / f"{field}.npy", mmap_mode="r", allow_pickle=False))
            return state
        except (OSError, ValueError, EOFError, TypeError, KeyError) as exc:
            log.debug("search cache %s unreadable (%s): recomputing it", directory, exc)
    state = dict(compute())
    arrays = [f for f, v in state.items() if isinstance(v, np.ndarray) and v.dtype != object]

    def write(tmp: Path) -> None:
        for field in arrays:
            np.save(tmp / f"{field}.npy", state[field], allow_pickle=False)
        rest = {f: v for f, v in state.items() if f not in arrays}
        (tmp / "state.marshal").write_bytes(marshal.dumps({**rest, "__arrays__": arrays}))

    store_entry(kind, name, key, write)
    return state
