"""Local usage log (which notes were read, how often, when) and the opt-in recency/frequency boost of search.

The log is ``<data>/usage.json`` (``{"version": 1, "notes": {vault_path: {"reads": int, "last": epoch seconds}}}``),
written by ``docsvault read`` and the MCP ``read`` tool (an agent opening a hit), replaced atomically; it never
leaves the machine. ``DOCSVAULT_USAGE_LOG=0`` stops recording. At most ``MAX_NOTES`` notes are kept (the least
recently used go first).

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
import math
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
_lock = threading.Lock()


def usage_path(data_dir: Path) -> Path:
    """``<data>/usage.json``."""
    return Path(data_dir) / "usage.json"


def recording_enabled() -> bool:
    """False when ``DOCSVAULT_USAGE_LOG`` is ``0``/``false``/``off``/``no``."""
    return env_flag("DOCSVAULT_USAGE_LOG", True)


def boost_enabled() -> bool:
    """True when ``DOCSVAULT_USAGE_BOOST`` is ``1``/``true``/``on``/``yes``."""
    return env_flag("DOCSVAULT_USAGE_BOOST", False)


def load(data_dir: Path) -> dict[str, dict[str, float]]:
    """vault path -> ``{"reads", "last"}``; empty when there is no log or it cannot be read (a broken log is
    ignored, never an error: it only ever boosts)."""
    try:
        data = json.loads(usage_path(data_dir).read_text(encoding="utf-8"))
        notes = data.get("notes", {}) if isinstance(data, dict) else {}
        return {str(k): {"reads": float(v.get("reads", 0)), "last": float(v.get("last", 0))}
                for k, v in notes.items() if isinstance(v, dict)}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def record(data_dir: Path, vault_path: str, now: float | None = None) -> bool:
    """Count one read of a note (``reads`` + 1, ``last`` = now). Best effort: False when recording is off, the data
    folder does not exist (a mistyped ``--data`` is not made) or the file cannot be written (a read never fails
    because of the log)."""
    if not recording_enabled() or not Path(data_dir).is_dir():
        return False
    now = time.time() if now is None else now
    path = usage_path(data_dir)
    with _lock:
        notes = load(data_dir)
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
