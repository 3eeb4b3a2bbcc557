"""The project's Dagster event log storage (``pipeline.defs.event_log``): Dagster's SQLite layout, one open engine per
run shard (bounded), synchronous=NORMAL, and files interchangeable with Dagster's default storage."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from sqlalchemy import text

from pipeline.defs.event_log import OPEN_SHARDS, WalSqliteEventLogStorage
from pipeline.defs.runner import instance_config

REPO = Path(__file__).resolve().parents[1]


def _event(run_id: str, i: int) -> EventLogEntry:
    return EventLogEntry(error_info=None, level=20, user_message=f"message {i}", run_id=run_id, timestamp=time.time(),
                         step_key="step", job_name="job",
                         dagster_event=DagsterEvent(DagsterEventType.ENGINE_EVENT.value, "job", message=f"event {i}",
                                                    event_specific_data=EngineEventData()))


def test_project_instance_uses_it_and_a_job_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(instance_config(), encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(home))

    @dg.asset
    def one() -> int:
        return 1

    with dg.DagsterInstance.get() as instance:
        assert type(instance.event_log_storage) is WalSqliteEventLogStorage
        result = dg.materialize([one], instance=instance)
        assert result.success
        mats = instance.fetch_materializations(dg.AssetKey("one"), limit=10).records
        assert len(mats) == 1
        logs = instance.all_logs(result.run_id)
        assert [e.dagster_event.event_type_value for e in logs if e.dagster_event][-1] == "PIPELINE_SUCCESS"   # RUN_SUCCESS
    assert (home / "history" / "runs" / f"{result.run_id}.db").is_file()


def test_open_engines_are_bounded_and_events_readable(tmp_path: Path) -> None:
    storage = WalSqliteEventLogStorage(str(tmp_path))
    runs = [f"run{i}" for i in range(OPEN_SHARDS + 3)]
    for run in runs:
        for i in range(3):
            storage.store_event(_event(run, i))
    assert len(storage._engines) == OPEN_SHARDS
    assert [len(storage.get_logs_for_run(run)) for run in runs] == [3] * len(runs)
    with storage.run_connection("run0") as conn:
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 1      # NORMAL
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    storage.wipe()
    assert list(storage._engines) == ["index"]          # closed before the files went; wipe reopens the index
    assert sorted(p.name for p in tmp_path.glob("run*.db")) == []
    storage.dispose()
    assert len(storage._engines) == 0


def test_files_are_interchangeable_with_dagsters_default(tmp_path: Path) -> None:
    default = SqliteEventLogStorage(str(tmp_path))
    default.store_event(_event("a", 0))
    ours = WalSqliteEventLogStorage(str(tmp_path))
    ours.store_event(_event("a", 1))
    ours.store_event(_event("b", 0))
    assert [e.user_message for e in default.get_logs_for_run("a")] == ["message 0", "message 1"]
    assert [e.user_message for e in ours.get_logs_for_run("b")] == ["message 0"]
    ours.dispose()


def test_the_checkouts_dagster_yaml_opens_without_dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """Dagster's throw-away instances (`dg check defs`, `dg dev` without DAGSTER_HOME) read the checkout's
    dagster.yaml with no DAGSTER_HOME: it must not need it (the event log block is appended to instance copies only)."""
    from dagster._core.instance.ref import InstanceRef

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path), config_dir=str(REPO))) as instance:
        assert type(instance.event_log_storage) is SqliteEventLogStorage
    assert instance_config() == ((REPO / "dagster.yaml").read_text(encoding="utf-8")
                                 + (REPO / "dagster-event-log.yaml").read_text(encoding="utf-8"))


_STORE_AND_EXIT = """
import sys, time
from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
from dagster._core.events.log import EventLogEntry
from pipeline.defs.event_log import WalSqliteEventLogStorage
storage = WalSqliteEventLogStorage(sys.argv[1])
for i in range(200):
    storage.store_event(EventLogEntry(error_info=None, level=20, user_message=f"message {i}", run_id="run1",
                                      timestamp=time.time(), step_key="step", job_name="job",
                                      dagster_event=DagsterEvent(DagsterEventType.ENGINE_EVENT.value, "job",
                                                                 event_specific_data=EngineEventData())))
# no dispose: `docsvault build` never disposes its instance
"""


def test_a_process_that_ends_without_dispose_leaves_no_wal_file(tmp_path: Path) -> None:
    """Before session 40 every run left its ``<run>.db-wal`` (~4 MB after a build) in DAGSTER_HOME for good: the
    engines kept open were never closed, and SQLite deletes a WAL file only when its last connection closes."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", _STORE_AND_EXIT, str(tmp_path)], check=True, cwd=REPO, timeout=120)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.db", "run1.db"]
    ours = WalSqliteEventLogStorage(str(tmp_path))
    assert len(ours.get_logs_for_run("run1")) == 200
    ours.dispose()
