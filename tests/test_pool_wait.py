"""A `docsvault build` whose step waits for a pool slot another live run holds (a UI, sensor or `dg launch` run)
waits asleep and stops on Ctrl-C (pipeline.defs.executor.PoolSlotWait). Dagster's in-process step loop spun at
100 % CPU and deferred Ctrl-C until the slot freed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.storage.dagster_run import DagsterRun
from dagster._utils.interrupts import capture_interrupts

from pipeline.defs.executor import POOL_POLL_SECONDS, PoolSlotWait

POOL = "docsvault_source_tiny"
OTHER = "ui-run"          # a live run of another launcher that holds the tiny source's pool slot
REPO = Path(__file__).resolve().parents[1]


def _hold_the_pool(instance: dg.DagsterInstance) -> None:
    """The state a UI run leaves while its tiny step runs: run STARTED, the pool's one slot claimed by its step."""
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=OTHER, status=dg.DagsterRunStatus.STARTED))
    instance.event_log_storage.initialize_concurrency_limit_to_default(POOL)
    assert instance.event_log_storage.claim_concurrency_slot(POOL, OTHER, "tiny__raw_docs").is_claimed


def _waiting_steps(instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """(run id, step key) of the steps queued for the pool slot (not assigned one)."""
    info = instance.event_log_storage.get_concurrency_info(POOL)
    return [(p.run_id, p.step_key) for p in info.pending_steps if p.assigned_timestamp is None]


def _until_a_step_waits(instance: dg.DagsterInstance, seconds: float = 60) -> list[tuple[str, str]]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if waiting := _waiting_steps(instance):
            return waiting
        time.sleep(0.1)
    raise AssertionError(f"no step waited for {POOL} within {seconds} s")


def _interrupt_in(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_held_slot_is_waited_for_asleep_and_ctrl_c_ends_the_wait(tmp_path: Path) -> None:
    """Each check sleeps until the next claim attempt (at most POOL_POLL_SECONDS) and returns 0; a SIGINT during the
    wait, or one recorded before it (Dagster records a Ctrl-C between steps), raises at once; leaving the context
    frees the queued claim."""
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides={
            "concurrency": {"pools": {"granularity": "op", "default_limit": 1}}}) as instance:
        _hold_the_pool(instance)
        build_run = instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="build-run",
                                                status=dg.DagsterRunStatus.STARTED))
        with capture_interrupts(), pytest.raises(DagsterExecutionInterruptedError), \
                PoolSlotWait(instance, build_run) as wait:
            assert wait.claim(POOL, "tiny__raw_docs") is False
            assert _waiting_steps(instance) == [("build-run", "tiny__raw_docs")]
            started, cpu = time.monotonic(), time.process_time()
            assert wait.interval_to_next_pending_claim_check() == 0.0
            slept = time.monotonic() - started
            assert 0.5 <= slept <= POOL_POLL_SECONDS + 0.2, slept
            assert time.process_time() - cpu < 0.1                     # asleep, not spinning
            assert wait.claim(POOL, "tiny__raw_docs") is False           # due again: claimed from the DB
            timer = _interrupt_in(0.2)
            started = time.monotonic()
            try:
                wait.interval_to_next_pending_claim_check()
            finally:
                timer.join()
        assert time.monotonic() - started < 0.5
        assert _waiting_steps(instance) == []
        assert instance.event_log_storage.get_concurrency_run_ids() == {OTHER}

        with capture_interrupts(), pytest.raises(DagsterExecutionInterruptedError), \
                PoolSlotWait(instance, build_run) as wait:
            assert wait.claim(POOL, "tiny__raw_docs") is False
            os.kill(os.getpid(), signal.SIGINT)                          # recorded by Dagster's handler
            wait.interval_to_next_pending_claim_check()
        assert _waiting_steps(instance) == []


def test_a_build_waits_asleep_for_the_slot_then_builds(tiny_env: Path) -> None:
    """The build's first step waits while the other run holds the source's pool; once that slot is freed the build
    runs to the end, and no slot stays claimed."""
    from pipeline.config import Settings
    from pipeline.defs.runner import ensure_instance, run_build

    settings = Settings.from_env()
    ensure_instance(settings)
    instance = dg.DagsterInstance.get()
    _hold_the_pool(instance)
    seen: dict[str, object] = {}

    def other_run() -> None:
        try:
            seen["waiting"] = [step for run_id, step in _until_a_step_waits(instance) if run_id != OTHER]
            cpu = time.process_time()
            time.sleep(2)
            seen["cpu"] = time.process_time() - cpu     # this process: the build's main thread and this one
            seen["still waiting"] = [step for run_id, step in _waiting_steps(instance) if run_id != OTHER]
        finally:
            instance.event_log_storage.free_concurrency_slots_for_run(OTHER)

    thread = threading.Thread(target=other_run)
    thread.start()
    try:
        report = run_build(settings)
    finally:
        thread.join()
    assert seen["waiting"] == seen["still waiting"] == ["tiny__raw_docs"]
    assert seen["cpu"] < 0.5, seen["cpu"]                  # was 2.0 s of CPU in 2 s: a busy loop
    assert report.ok and [s.name for s in report.sources] == ["tiny"]
    assert instance.event_log_storage.get_concurrency_run_ids() == set()
    statuses = {r.run_id: r.status for r in instance.get_runs()}
    assert statuses.pop(OTHER) == dg.DagsterRunStatus.STARTED
    assert list(statuses.values()) == [dg.DagsterRunStatus.SUCCESS]


def test_ctrl_c_of_a_cli_build_waiting_for_a_pool_slot(tiny_env: Path) -> None:
    """Ctrl-C while `docsvault build` waits for the slot: the usual one line and exit 130 at once, its run ended as
    canceled (not left STARTED; not FAILURE either since session 46: the user stopped it), no slot claimed or queued by it, the locks free, nothing recorded as a source
    failure."""
    from pipeline.common import artifacts
    from pipeline.common.lock import LOCK_NAME, RUN_LOCK_NAME, BuildLock
    from pipeline.config import Settings
    from pipeline.defs.runner import ensure_instance

    settings = Settings.from_env()
    ensure_instance(settings)
    instance = dg.DagsterInstance.get()
    _hold_the_pool(instance)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "build"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert [step for run_id, step in _until_a_step_waits(instance) if run_id != OTHER] == ["tiny__raw_docs"]
        os.killpg(proc.pid, signal.SIGINT)                 # what the terminal does on Ctrl-C
        started = time.monotonic()
        out, err = proc.communicate(timeout=20)
        stopped_in = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out, err) == (
        130, "", (f"warning: pool {POOL} is held by run {OTHER} (STARTED, step tiny__raw_docs): this build's steps of that "
                  "pool wait until it is done (the Dagster UI shows the run); if its process was killed, Dagster still "
                  "counts it as running: Terminate it in the Dagster UI (Force termination immediately) and this "
                  "build goes on\n"
                  "error: build interrupted: stopped, its locks released; run `docsvault build` again to finish it\n"))
    assert stopped_in < 5, stopped_in
    assert instance.event_log_storage.get_concurrency_run_ids() == {OTHER}
    assert _waiting_steps(instance) == []
    statuses = {r.run_id: r.status for r in instance.get_runs()}
    assert statuses.pop(OTHER) == dg.DagsterRunStatus.STARTED
    assert list(statuses.values()) == [dg.DagsterRunStatus.CANCELED]
    for name in (RUN_LOCK_NAME, LOCK_NAME):
        with BuildLock(settings.data_dir / name) as lock:
            assert lock.held and lock.took_over is None
    assert artifacts.load_state(settings, "tiny").get("last_error") is None


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its waited-for children (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@pytest.mark.integration      # a `dagster asset materialize` child process (multiprocess executor), ~15 s
def test_a_multiprocess_run_waits_asleep_for_a_held_slot(tiny_env: Path) -> None:
    """A run of Dagster's multiprocess executor (chosen in run config) whose only ready step waits
    for a pool slot another run holds: its loop has no child to poll and used to spin at 100 % CPU, one of the two
    cores the other run builds on. It now sleeps between looks; once the slot is freed the step runs."""
    from pipeline.config import Settings
    from pipeline.defs.runner import ensure_instance

    settings = Settings.from_env()
    ensure_instance(settings)
    instance = dg.DagsterInstance.get()
    _hold_the_pool(instance)
    multiprocess = '{"execution": {"config": {"multiprocess": {"max_concurrent": 4}}}}'
    proc = subprocess.Popen([str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m",
                             "pipeline.definitions", "--select", "tiny/raw_docs", "--config-json", multiprocess],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert [step for run_id, step in _until_a_step_waits(instance) if run_id != OTHER] == ["tiny__raw_docs"]
        cpu = _cpu_seconds(proc.pid)
        time.sleep(3)
        waiting_cpu = _cpu_seconds(proc.pid) - cpu
        instance.event_log_storage.free_concurrency_slots_for_run(OTHER)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert waiting_cpu < 0.5, waiting_cpu                 # was ~3 s of CPU in 3 s: a busy loop
    assert instance.event_log_storage.get_concurrency_run_ids() == set()
