"""A run whose process was killed (`kill -9` of a `dagster asset materialize`) stays STARTED for good and keeps its
pool slot: nothing watches an in-process run. Every run docsvault's executor executes records its process (host,
pid, start) in its tags, and a run of this host whose process is gone is reported failed and its slots freed
(pipeline.defs.executor.release_runs_of_dead_processes): at a build's start, on the sensor's ticks and while a step
waits for the slot it holds. A run of another host, or whose process still runs, is never touched."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun

from pipeline.defs import executor
from pipeline.defs.executor import (
    HOST_TAG,
    PID_RUN_TAG,
    PID_START_TAG,
    PID_TAG,
    MultiprocessPoolSlotWait,
    PoolSlotWait,
    process_alive,
    process_start,
    process_tags,
    release_runs_of_dead_processes,
)

POOL = "docsvault_source_tiny"
HOST = socket.gethostname()


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides={
            "concurrency": {"pools": {"granularity": "op", "default_limit": 1}}}) as inst:
        yield inst


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _run(instance: dg.DagsterInstance, run_id: str, pid: int, start: str = "", host: str = HOST,
         tagged_for: str | None = None, pool: str | None = None, step: str = "tiny__raw_docs") -> None:
    """A STARTED run whose process tags name ``pid`` on ``host`` (recorded for ``tagged_for``, default itself),
    holding ``pool``'s slot when given."""
    tags = {HOST_TAG: host, PID_TAG: str(pid), PID_RUN_TAG: tagged_for or run_id}
    if start:
        tags[PID_START_TAG] = start
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, status=dg.DagsterRunStatus.STARTED, tags=tags))
    if pool is not None:
        instance.event_log_storage.initialize_concurrency_limit_to_default(pool)
        assert instance.event_log_storage.claim_concurrency_slot(pool, run_id, step).is_claimed


def _failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    [record] = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    return record.event_log_entry.dagster_event.message


def test_process_alive_tells_a_dead_a_zombie_and_a_reused_pid() -> None:
    me = process_start(os.getpid())
    assert me and process_alive(os.getpid(), me) is True
    assert process_alive(os.getpid()) is True                # no start recorded: the pid alone
    assert process_alive(os.getpid(), "another-boot:1") is False   # a later process with that pid
    assert process_alive(_dead_pid(), "") is False
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])       # ended, not reaped: still in /proc, state Z
    deadline = time.monotonic() + 30
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_alive(zombie.pid) is False
    zombie.wait()


def test_runs_of_dead_processes_on_this_host_are_released_and_no_other(instance: dg.DagsterInstance,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    dead = _dead_pid()
    me, mine = os.getpid(), process_start(os.getpid())
    _run(instance, "killed-materialize", dead, "x:1", pool=POOL)                        # released
    _run(instance, "reused-pid", me, "another-boot:1", pool="docsvault_warehouse", step="warehouse")   # released
    _run(instance, "live-run", me, mine, pool="docsvault_source_live")                 # its process runs
    _run(instance, "other-host", dead, "x:1", host="another-host", pool="docsvault_source_far")
    _run(instance, "re-execution", dead, "x:1", tagged_for="its-parent")              # the parent's copied tags
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="untagged", status=dg.DagsterRunStatus.STARTED))
    with caplog.at_level(logging.WARNING, logger="pipeline.defs.executor"):
        assert release_runs_of_dead_processes(instance) == ["killed-materialize", "reused-pid"]
    statuses = {r.run_id: r.status.value for r in instance.get_runs()}
    assert statuses == {"killed-materialize": "FAILURE", "reused-pid": "FAILURE", "live-run": "STARTED",
                        "other-host": "STARTED", "re-execution": "STARTED", "untagged": "STARTED"}
    assert instance.event_log_storage.get_concurrency_run_ids() == {"live-run", "other-host"}
    assert _failure_message(instance, "killed-materialize") == (
        f"the process of this run (pid {dead} on {HOST}) is gone (killed); docsvault marked the run failed and "
        "freed its pool slots")
    assert [r.getMessage() for r in caplog.records] == [
        f"run {run_id}: its process (pid {pid} on this host) is gone (killed); marked it failed and freed its pool "
        "slots" for run_id, pid in (("killed-materialize", dead), ("reused-pid", me))]
    assert release_runs_of_dead_processes(instance) == []                               # once


def test_a_killed_run_tagged_before_session_37_is_released(instance: dg.DagsterInstance) -> None:
    """The process tags moved under Dagster's hidden prefix (off the UI's Runs page); a run of an older docsvault,
    tagged ``docsvault/host`` …, whose process is gone is still released, and a live one is not."""
    assert (HOST_TAG, PID_TAG) == (".dagster/docsvault/host", ".dagster/docsvault/pid")
    dead = _dead_pid()
    for run_id, pid, start in (("old-killed", dead, "x:1"), ("old-live", os.getpid(), process_start(os.getpid()))):
        tags = {"docsvault/host": HOST, "docsvault/pid": str(pid), "docsvault/pid_start": start,
                "docsvault/pid_run": run_id}
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, status=dg.DagsterRunStatus.STARTED,
                                    tags=tags))
    assert release_runs_of_dead_processes(instance) == ["old-killed"]
    assert process_tags({"docsvault/pid": "7", PID_RUN_TAG: "r", "docsvault/run": "build"}) == {
        PID_TAG: "7", PID_RUN_TAG: "r"}


@pytest.mark.parametrize("context", [PoolSlotWait, MultiprocessPoolSlotWait])
def test_a_run_records_its_process_when_its_steps_start(instance: dg.DagsterInstance, context: type) -> None:
    """In process and multiprocess, the run's concurrency context is made in the run's process as its steps start."""
    run = instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="a-run", status=dg.DagsterRunStatus.STARTED,
                                      tags={"docsvault/run": "build"}))
    with context(instance, run):
        pass
    assert instance.get_run_by_id("a-run").tags == {
        "docsvault/run": "build", HOST_TAG: HOST, PID_TAG: str(os.getpid()),
        PID_START_TAG: process_start(os.getpid()), PID_RUN_TAG: "a-run"}


def test_a_step_waiting_for_a_killed_runs_slot_goes_on(instance: dg.DagsterInstance,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The waiting step looks for dead and ended runs at its first refused claim, then every
    DEAD_RUN_CHECK_SECONDS: a holder killed while it waits, or terminated in the UI (CANCELED), is let go of and
    the next attempt gets the slot."""
    holder = _sleeper()
    try:
        _run(instance, "materialize", holder.pid, process_start(holder.pid), pool=POOL)
        build_run = instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="build-run",
                                                status=dg.DagsterRunStatus.STARTED))
        with PoolSlotWait(instance, build_run) as wait:
            assert wait.claim(POOL, "tiny__raw_docs") is False                     # its process runs
            holder.kill()
            holder.wait()
            assert wait.claim(POOL, "tiny__raw_docs") is False                     # not looked again yet
            monkeypatch.setattr(executor, "DEAD_RUN_CHECK_SECONDS", 0.0)
            assert wait.claim(POOL, "tiny__raw_docs") is False                     # looks: released
            assert instance.get_run_by_id("materialize").status == dg.DagsterRunStatus.FAILURE
            assert wait.claim(POOL, "tiny__raw_docs") is True                      # due at once
            wait.free_step("tiny__raw_docs")
    finally:
        holder.kill()
        holder.wait()

    _run(instance, "ui-run", holder.pid, "x:1", host="another-host", pool=POOL)   # another host: not judged
    with PoolSlotWait(instance, build_run) as wait:
        assert wait.claim(POOL, "tiny__raw_docs") is False
        assert wait.claim(POOL, "tiny__raw_docs") is False
        instance.report_run_canceled(instance.get_run_by_id("ui-run"))            # the UI's Terminate
        assert wait.claim(POOL, "tiny__raw_docs") is False                         # looks: its slot freed
        assert wait.claim(POOL, "tiny__raw_docs") is True
    assert instance.get_run_by_id("ui-run").status == dg.DagsterRunStatus.CANCELED


def test_a_build_waiting_for_a_materialize_that_is_killed_goes_on(tiny_env: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """`docsvault build` while a `dagster asset materialize` of this host holds the source's pool: the build says
    so and waits; once that process is killed (kill -9) the build releases its run by itself and builds."""
    from pipeline.config import Settings
    from pipeline.defs.runner import ensure_instance, run_build

    settings = Settings.from_env()
    ensure_instance(settings)
    inst = dg.DagsterInstance.get()
    holder = _sleeper()
    _run(inst, "materialize", holder.pid, process_start(holder.pid), pool=POOL)
    seen: dict[str, object] = {}

    def kill_when_waiting() -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not seen.get("waiting"):
                info = inst.event_log_storage.get_concurrency_info(POOL)
                seen["waiting"] = [p.step_key for p in info.pending_steps
                                   if p.assigned_timestamp is None and p.run_id != "materialize"]
                time.sleep(0.1)
        finally:
            holder.kill()
            holder.wait()

    thread = threading.Thread(target=kill_when_waiting)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING):
            report = run_build(settings)
    finally:
        thread.join()
    assert seen["waiting"] == ["tiny__raw_docs"]
    assert report.ok and [s.name for s in report.sources] == ["tiny"]
    statuses = {r.run_id: r.status for r in inst.get_runs()}
    assert statuses.pop("materialize") == dg.DagsterRunStatus.FAILURE
    assert list(statuses.values()) == [dg.DagsterRunStatus.SUCCESS]
    assert inst.event_log_storage.get_concurrency_run_ids() == set()
    messages = [r.getMessage() for r in caplog.records if "materialize" in r.getMessage()]
    assert messages == [
        (f"pool {POOL} is held by run materialize (STARTED, step tiny__raw_docs): this build's steps of that pool "
         "wait until it is done (the Dagster UI shows the run); it runs in pid "
         f"{holder.pid} on this host: if that process is killed, the run is released automatically and this build "
         "goes on"),
        (f"run materialize: its process (pid {holder.pid} on this host) is gone (killed); marked it failed and freed "
         "its pool slots")]


def test_the_sensor_releases_a_killed_materialize_also_while_a_build_runs(tiny_env: Path) -> None:
    from pipeline.common.lock import build_run_lock
    from pipeline.config import Settings
    from pipeline.defs.executor import release_dead_builds
    from pipeline.defs.runner import ensure_instance

    settings = Settings.from_env()
    ensure_instance(settings)
    inst = dg.DagsterInstance.get()
    _run(inst, "killed-materialize", _dead_pid(), pool=POOL)
    _run(inst, "far-materialize", _dead_pid(), host="another-host", pool="docsvault_warehouse", step="warehouse")
    with build_run_lock(settings.data_dir):              # a live build holds the run lock
        assert release_dead_builds(settings, inst) == ["killed-materialize"]
    assert inst.get_run_by_id("killed-materialize").status == dg.DagsterRunStatus.FAILURE
    assert inst.event_log_storage.get_concurrency_run_ids() == {"far-materialize"}
