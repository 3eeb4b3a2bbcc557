"""The eval history: its own small file ``<data>/eval_runs.duckdb``, appended under the build lock."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from pipeline.common.errors import (
    PipelineError,
)
from pipeline.warehouse.write import _swap

log = logging.getLogger("pipeline.warehouse")


# eval history (its own small file, <data>/eval_runs.duckdb)
#
# The history lives apart from the warehouse file on purpose: the warehouse is replaced by every publish (a full
# publish writes a new file; a corrupt or other-schema warehouse is rebuilt from scratch), so a table inside it
# would have to be carried over by every write path and would still be lost with a deleted or rebuilt warehouse.
# The history outlives all of that, and the warehouse schema stays about search. Written like the warehouse:
# copy -> append -> os.replace, under the build lock (one writer), so `docsvault eval --history` (read-only) never
# waits for or sees a half-written file, and a killed write leaves the previous history intact.

EVAL_RUN_COLUMNS: tuple[str, ...] = (
    "run_id", "run_at", "warehouse_built_at", "warehouse_key", "cases_key", "setup", "lanes", "group_kind",
    "group_name", "n", "hit_at_1", "hit_at_3", "mrr_at_10", "ndcg_at_10", "k_rrf", "weights", "models",
)

_EVAL_RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS eval_runs (
    run_id VARCHAR NOT NULL, run_at VARCHAR NOT NULL, warehouse_built_at VARCHAR, warehouse_key VARCHAR,
    cases_key VARCHAR, setup VARCHAR NOT NULL, lanes VARCHAR, group_kind VARCHAR NOT NULL, group_name VARCHAR NOT NULL,
    n INTEGER, hit_at_1 DOUBLE, hit_at_3 DOUBLE, mrr_at_10 DOUBLE, ndcg_at_10 DOUBLE,
    k_rrf DOUBLE, weights VARCHAR, models VARCHAR
)
"""


def append_eval_runs(path: Path, rows: Sequence[Mapping[str, Any]]) -> int:
    """Append eval-run rows to the ``eval_runs`` table of the history file (created on first use), atomically.

    The caller holds the build lock. A history file that DuckDB cannot open is moved aside to
    ``<path>.corrupt-<unix time>`` (kept for inspection, logged) and a new history is started.

    Args:
        path: the history file (``<data>/eval_runs.duckdb``).
        rows: dicts keyed by :data:`EVAL_RUN_COLUMNS` (missing keys are NULL); ``run_at`` is ISO-8601 UTC text.

    Returns:
        The number of rows in the table after the append.
    """
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{path.name}.tmp-*"):       # left by a killed writer
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        if path.exists():
            shutil.copyfile(path, tmp)
        try:
            con = duckdb.connect(str(tmp))
        except duckdb.Error as exc:
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            log.warning("eval history %s cannot be opened (%s): moved to %s, starting a new history", path, exc, aside)
            os.replace(path, aside)
            tmp.unlink(missing_ok=True)
            con = duckdb.connect(str(tmp))
        try:
            con.execute(_EVAL_RUNS_SCHEMA)
            if rows:
                cols = ", ".join(EVAL_RUN_COLUMNS)
                marks = ", ".join("?" for _ in EVAL_RUN_COLUMNS)
                con.executemany(f"INSERT INTO eval_runs ({cols}) VALUES ({marks})",
                                [[row.get(c) for c in EVAL_RUN_COLUMNS] for row in rows])
            total = int(con.execute("SELECT count(*) FROM eval_runs").fetchone()[0])  # type: ignore[index]
            con.execute("CHECKPOINT")
        finally:
            con.close()
        Path(f"{tmp}.wal").unlink(missing_ok=True)
        _swap(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return total


def read_eval_runs(path: Path, last: int | None = None) -> list[dict[str, Any]]:
    """Rows of the eval history, oldest run first (rows of a run in the order they were appended).

    Args:
        path: the history file; a missing file or one without the table gives [].
        last: only the last this many runs (by ``run_at``); None: all.

    Returns:
        Dicts keyed by :data:`EVAL_RUN_COLUMNS`.

    Raises:
        PipelineError: the file is not a DuckDB database.
    """
    path = Path(path)
    if not path.exists():
        return []
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise PipelineError(f"cannot read the eval history {path}: {exc}; move it aside (the next build starts a "
                            "new one)") from exc
    try:
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'eval_runs'").fetchone()[0]:  # type: ignore[index]
            return []
        cols = ", ".join(EVAL_RUN_COLUMNS)
        where, params = "", []
        if last is not None:
            where = ("WHERE run_id IN (SELECT run_id FROM eval_runs GROUP BY run_id "
                     "ORDER BY max(run_at) DESC, max(rowid) DESC LIMIT ?)")
            params = [max(int(last), 0)]
        rows = con.execute(f"SELECT {cols} FROM eval_runs {where} ORDER BY run_at, rowid", params).fetchall()
    finally:
        con.close()
    return [dict(zip(EVAL_RUN_COLUMNS, r)) for r in rows]
