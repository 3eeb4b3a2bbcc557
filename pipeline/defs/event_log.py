"""Dagster's SQLite event log, one engine per run shard kept open: ~1 ms an event instead of ~12.

Dagster 1.13's ``SqliteEventLogStorage`` (the default of a local instance: one SQLite file per run under
``<DAGSTER_HOME>/history/runs/``, plus ``index.db``) creates a SQLAlchemy engine for every event it stores, connects,
commits and disposes the engine again. Closing the last connection to a WAL database checkpoints it, so every event
costs two fsyncs (commit ~5 ms, close ~4 ms on this machine) and a fresh statement compilation: 12.2 ms an event, and
a `docsvault build` that changes a 15-note source writes ~330 events (~3-4 s of its ~20 s).

:class:`WalSqliteEventLogStorage` is that storage with one engine per shard kept open (at most
:data:`OPEN_SHARDS`, least recently used closed first) and ``PRAGMA synchronous=NORMAL`` on its connections, the
setting SQLite recommends with WAL: a commit no longer waits for the disk; a killed process loses nothing it
committed, a power cut can lose the last events, never corrupt the file. Measured: 1.2 ms an event
(``tests/test_event_log.py`` checks the behaviour; the figure is from ``bench``-style timing, not asserted).

The project's ``dagster.yaml`` selects it::

    event_log_storage:
      module: pipeline.defs.event_log
      class: WalSqliteEventLogStorage
      config:
        dagster_home: {env: DAGSTER_HOME}

Everything else (run storage, schedules, the file layout) is Dagster's default, so an instance written by the
default storage is read by this one and the other way round.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Iterator
from multiprocessing.util import Finalize
from typing import Any

from dagster._config import StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine

__all__ = ["OPEN_SHARDS", "WalSqliteEventLogStorage"]

#: run shards (SQLite files) whose engine stays open in one process; the index shard is one of them
OPEN_SHARDS = 8


def _dispose_all(engines: OrderedDict[str, Engine], lock: Any, timeout: float = -1) -> None:
    """Dispose every open engine (their connections closed: SQLite checkpoints each WAL file and deletes it).
    ``timeout`` (seconds): give up when the storage's lock is not free by then (at exit, a daemon thread may hold it
    mid-write: the WAL files then stay, which loses nothing); -1 waits."""
    if not lock.acquire(timeout=timeout):
        return
    try:
        while engines:
            engines.popitem()[1].dispose()
    finally:
        lock.release()


def _synchronous_normal(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


class WalSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` with an engine per shard kept open (see the module docstring).

    Args:
        base_dir: the folder of the run shards (Dagster's default: ``<DAGSTER_HOME>/history/runs/``).
        inst_data: Dagster's configurable-class data.
    """

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        super().__init__(base_dir, inst_data)
        # closed when the process ends (atexit, or a multiprocessing child's own exit), also when nobody disposes the
        # instance (`docsvault build` does not): closing a WAL database's last connection checkpoints it and deletes
        # its -wal file; an engine left open kept ~4 MB of `<run>.db-wal` per run in DAGSTER_HOME for good
        Finalize(self, _dispose_all, args=(self._engines, self._db_lock, 5.0), exitpriority=0)

    @classmethod
    def config_type(cls) -> Any:
        return {"dagster_home": StringSource}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> WalSqliteEventLogStorage:  # type: ignore[override]
        """The storage of the instance at ``config_value["dagster_home"]``, in Dagster's default folder."""
        return cls(os.path.join(config_value["dagster_home"], "history", "runs", ""), inst_data=inst_data)

    def _engine(self, shard: str) -> Engine:
        """The open engine of ``shard`` (created on first use; the least recently used beyond
        :data:`OPEN_SHARDS` is disposed). Called under ``self._db_lock``."""
        engine = self._engines.get(shard)
        if engine is not None:
            self._engines.move_to_end(shard)
            return engine
        engine = create_engine(self.conn_string_for_shard(shard),
                               connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False})
        event.listen(engine, "connect", _synchronous_normal)
        self._engines[shard] = engine
        while len(self._engines) > OPEN_SHARDS:
            self._engines.popitem(last=False)[1].dispose()
        return engine

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _close_engines(self) -> None:
        _dispose_all(self._engines, self._db_lock)

    def wipe(self) -> None:
        self._close_engines()           # the shard files are deleted: no connection may stay open on them
        super().wipe()

    def dispose(self) -> None:
        self._close_engines()
        super().dispose()
