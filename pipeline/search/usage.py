"""Local usage log (which notes were read, how often, when) and the opt-in recency/frequency boost of search.

The log is ``<data>/usage.json`` (``{"version": 1, "notes": {vault_path: {"reads": int, "last": epoch seconds}}}``),
written by ``docsvault read`` and the MCP ``read`` tool (an agent opening a hit), replaced atomically; it never
leaves the machine. ``DOCSVAULT_USAGE_LOG=0`` stops recording. At most ``MAX_NOTES`` notes are kept (the least
recently used go first). A log that cannot be parsed (not JSON, not UTF-8, not the shape above) is moved aside to
``<data>/usage.json.corrupt`` (replacing an older one) with one warning, and the history starts empty: the next read
never writes over the user's history. A missing log is an empty history, silently.

The boost is off by default (``docsvault search --usage-boost`` or ``DOCSVAULT_USAGE_BOOST=1``, which the MCP
server reads too). A note's boost, added to its fused RRF score, is

    ``USAGE_WEIGHT / (k_rrf + 1) x tier x frequency``

with ``tier`` = ``HOT_BOOST`` (1.0) when last read within ``HOT_DAYS`` (7), ``WARM_BOOST`` (0.5) within
``WARM_DAYS`` (30), else ``COLD_BOOST`` (0); ``frequency`` = ``min(1, log2(1 + reads) / log2(1 + FULL_READS))``
(1 read 0.43, 2 reads 0.68, 4+ reads 1.0). With ``USAGE_WEIGHT`` 0.2 a hot, often read note gains a fifth of what
a first rank in one lane gives at k 60 (0.2/61 = 0.0033; ``boosts`` keeps k_rrf 60 while the search fuses with
k 20, where a first rank gives 1/21), and only inside the first ``usage_window`` (10) fused
pages of the query (:class:`pipeline.search.searcher.Searcher`): it breaks near-ties among pages the query found, and never
lifts a page from further down.

Measured with ``bench/usage_boost.py`` on obsidian-help (88 public cases; README "Usage boost"): weight 0.2 gains
MRR@10 0.675 -> 0.718 on cases whose answer was read before and costs 0.688 -> 0.672 on the others (overall 0.681 ->
0.695); an unrelated history (30 notes read 4 times this week) costs 0.681 -> 0.587. Weight 0.5: 0.741 / 0.592 /
0.396 (too strong); 0.05: no effect either way.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.common.artifacts import write_atomic
from pipeline.config import env_flag

__all__ = ["COLD_BOOST", "FULL_READS", "HOT_BOOST", "HOT_DAYS", "USAGE_WEIGHT", "WARM_BOOST", "WARM_DAYS",
           "boost_enabled", "boosts", "load", "record", "usage_path"]

HOT_DAYS = 7.0
WARM_DAYS = 30.0
HOT_BOOST = 1.0
WARM_BOOST = 0.5
COLD_BOOST = 0.0
FULL_READS = 4
USAGE_WEIGHT = 0.2
MAX_NOTES = 10_000
CORRUPT_SUFFIX = ".corrupt"
_lock = threading.RLock()       # load() inside record() takes it again
log = logging.getLogger(__name__)

_Notes = dict[str, dict[str, float]]


def usage_path(data_dir: Path) -> Path:
    """``<data>/usage.json``."""
    return Path(data_dir) / "usage.json"


def recording_enabled() -> bool:
    """False when ``DOCSVAULT_USAGE_LOG`` is ``0``/``false``/``off``/``no``."""
    return env_flag("DOCSVAULT_USAGE_LOG", True)


def boost_enabled() -> bool:
    """True when ``DOCSVAULT_USAGE_BOOST`` is ``1``/``true``/``on``/``yes``."""
    return env_flag("DOCSVAULT_USAGE_BOOST", False)


def load(data_dir: Path) -> _Notes:
    """vault path -> ``{"reads", "last"}``; never an error (the log only ever boosts).

    Empty when there is no log (silently), when it cannot be read (e.g. no permission; left as it is) or when it
    cannot be parsed: then it is renamed to ``usage.json.corrupt`` (an older ``.corrupt`` file is replaced: one
    copy is kept, the disk use stays bounded) and one warning is logged naming both files, so the user can
    repair it and the next :func:`record` starts a new log instead of writing over the old history. An entry whose
    counts are not numbers is skipped; the others are kept.
    """
    return _read(usage_path(data_dir)) or {}


def _read(path: Path) -> _Notes | None:
    """The log at ``path`` as :func:`load` returns it, or None when the file is there but cannot be read (nothing
    may write over it then)."""
    with _lock:
        try:
            with open(path, "rb") as fh:
                seen = os.fstat(fh.fileno())
                raw = fh.read()
        except FileNotFoundError:
            return {}
        except OSError:
            return None
        try:
            return _parse(raw)
        except (ValueError, TypeError, RecursionError) as exc:     # RecursionError: nested too deep
            return {} if _move_aside(path, seen, exc) else None


def _parse(raw: bytes) -> _Notes:
    """The notes of a log file's bytes.

    Raises:
        ValueError: not UTF-8 JSON.
        TypeError: not ``{"notes": {vault_path: {...}}}``.
    """
    data = json.loads(raw.decode("utf-8"))
    notes = data.get("notes", {}) if isinstance(data, dict) else None
    if not isinstance(notes, dict):
        raise TypeError('not {"version": 1, "notes": {...}}')
    out: _Notes = {}
    for k, v in notes.items():
        try:
            out[str(k)] = {"reads": float(v.get("reads", 0)), "last": float(v.get("last", 0))}
        except (AttributeError, TypeError, ValueError):
            continue
    return out


def _move_aside(path: Path, seen: os.stat_result, why: Exception) -> bool:
    """Rename the unparsable log ``path`` (as ``seen`` when read) to ``usage.json.corrupt`` and log one warning;
    False when it could not be moved (it stays; nothing may write over it)."""
    aside = path.with_name(path.name + CORRUPT_SUFFIX)
    reason = " ".join(str(why).split())[:120]
    try:
        now = os.stat(path)
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (seen.st_ino, seen.st_size, seen.st_mtime_ns):
            return False                # another process replaced it meanwhile: not the file that was read
        os.replace(path, aside)
    except OSError as exc:
        log.warning("usage log %s cannot be parsed (%s) nor moved aside (%s): the reading history is ignored "
                    "until it is repaired or removed", path, reason, exc.strerror or exc)
        return False
    log.warning("usage log %s cannot be parsed (%s): moved it to %s and started an empty reading history",
                path, reason, aside)
    return True


def record(data_dir: Path, vault_path: str, now: float | None = None) -> bool:
    """Count one read of a note (``reads`` + 1, ``last`` = now). Best effort: False when recording is off, the data
    folder does not exist (a mistyped ``--data`` is not made), the log is there but cannot be read (or is unparsable
    and cannot be moved aside: :func:`load`), or it cannot be written (a read never fails because of the log)."""
    if not recording_enabled() or not Path(data_dir).is_dir():
        return False
    now = time.time() if now is None else now
    path = usage_path(data_dir)
    with _lock:
        notes = _read(path)
        if notes is None:           # unreadable, or unparsable and not moved aside: never written over
            return False
        entry = notes.get(vault_path, {"reads": 0.0, "last": 0.0})
        notes[vault_path] = {"reads": entry["reads"] + 1, "last": now}
        if len(notes) > MAX_NOTES:
            notes = dict(sorted(notes.items(), key=lambda kv: -kv[1]["last"])[:MAX_NOTES])
        data = {"version": 1, "notes": {k: {"reads": int(v["reads"]), "last": round(v["last"], 3)}
                                        for k, v in notes.items()}}
        try:
            write_atomic(path, json.dumps(data).encode("utf-8"), mode=0o600)    # reading history: the user's only
        except OSError:
            return False
    return True


def tier(last: float, now: float) -> float:
    """HOT_BOOST, WARM_BOOST or COLD_BOOST by the days since ``last`` (epoch seconds)."""
    days = (now - last) / 86400.0
    if days <= HOT_DAYS:
        return HOT_BOOST
    if days <= WARM_DAYS:
        return WARM_BOOST
    return COLD_BOOST


def boosts(usage: Mapping[str, Mapping[str, Any]], now: float | None = None, k_rrf: float = 60.0,
           weight: float = USAGE_WEIGHT) -> dict[str, float]:
    """vault path -> score to add to its fused RRF score (see the module docstring); notes with 0 left out."""
    now = time.time() if now is None else now
    out = {}
    for path, u in usage.items():
        reads = float(u.get("reads", 0))
        if reads <= 0:
            continue
        freq = min(1.0, math.log2(1 + reads) / math.log2(1 + FULL_READS))
        b = weight / (k_rrf + 1) * tier(float(u.get("last", 0)), now) * freq
        if b > 0:
            out[path] = b
    return out
