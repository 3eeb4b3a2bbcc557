"""One memo cache: key -> JSON value in one file, kept between builds (the normalize parse cache, the BM25 token
cache, the graph's link cache)."""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline.common.artifacts import write_atomic

__all__ = ["MemoCache"]


class MemoCache:
    """key -> JSON value in one file (``path``; None: in memory only). :meth:`save` keeps only the entries read or
    written since it was opened, written atomically and only when they differ from what was loaded; the file name
    should carry the code version of what produced the values. A missing or unreadable file is an empty cache.

    ``hits`` / ``misses`` count values found / computed: :meth:`get` counts every lookup that finds a value,
    :meth:`memo` only the values taken from the file (a key looked up twice in one run counts once).

    ``binary=True`` keeps the file in :mod:`marshal` form instead of JSON: for JSON-safe values only (they read back
    as equal values; the normalize cache, and the BM25 token cache's older file: ~43k entries, 21 MB as JSON for
    the five shared corpora, read in 0.016 s instead of 0.22 s). A file of another Python's marshal version reads
    as empty.
    """

    def __init__(self, path: Path | None = None, separators: tuple[str, str] | None = (",", ":"),
                 binary: bool = False, fresh: bool = False) -> None:
        """``fresh``: the file is not read (every value computed again, the file rewritten: a forced build, which
        must not trust a cache file holding wrong but well-formed values)."""
        self.path = Path(path) if path is not None else None
        self.hits = 0
        self.misses = 0
        self._separators = separators
        self._binary = binary
        self._used: dict[str, Any] = {}
        self._data: dict[str, Any] = {}
        if self.path is not None and not fresh:
            try:
                raw = self.path.read_bytes()
                data = marshal.loads(raw) if binary else json.loads(raw.decode("utf-8"))
                self._data = data if isinstance(data, dict) else {}
            except (OSError, ValueError, EOFError, TypeError):
                self._data = {}

    def get(self, key: str) -> Any:
        """The value of ``key`` (None: not cached); a found value is kept by :meth:`save`."""
        value = self._used.get(key, self._data.get(key))
        if value is not None:
            self.hits += 1
            self._used[key] = value
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.misses += 1
        self._used[key] = value

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value of ``key``, from this run, else the file, else ``compute()`` (then stored)."""
        value = self._used.get(key)
        if value is None:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                value = compute()
            else:
                self.hits += 1
            self._used[key] = value
        return value

    @property
    def changed(self) -> bool:
        """True when the used entries differ from the loaded ones (something computed, or something not used)."""
        return bool(self.misses) or len(self._used) != len(self._data)

    def save(self, stale: Sequence[Path] = ()) -> None:
        """Write the used entries (when :attr:`changed`) and remove ``stale`` files (older versions of this cache)."""
        if self.path is not None and self.changed:
            write_atomic(self.path, marshal.dumps(self._used) if self._binary else
                         json.dumps(self._used, ensure_ascii=False, separators=self._separators).encode("utf-8"))
        for old in stale:
            if old != self.path:
                old.unlink(missing_ok=True)
