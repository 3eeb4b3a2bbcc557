"""One writer: the build lock refuses or waits for a live holder, names it, and takes over a dead holder's lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.common.errors import BuildLockedError
from pipeline.common.lock import LOCK_NAME, BuildLock, build_lock, lock_holder

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pipeline.common.lock import build_lock
    with build_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def _hold(data: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data), str(seconds)], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[1])
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_second_build_refuses_naming_the_holder(tmp_path: Path) -> None:
    proc = _hold(tmp_path, 30)
    try:
        info = lock_holder(tmp_path / LOCK_NAME)
        assert info["pid"] == proc.pid and info["started_at"]
        with pytest.raises(BuildLockedError) as exc:
            with build_lock(tmp_path, wait=0):
                pass
        msg = str(exc.value)
        assert f"pid {proc.pid}" in msg and info["started_at"] in msg and "--wait" in msg
    finally:
        proc.kill()
        proc.wait()


def test_second_build_waits_for_the_first(tmp_path: Path) -> None:
    proc = _hold(tmp_path, 1.0)
    try:
        started = time.monotonic()
        with build_lock(tmp_path, wait=30) as lock:
            assert lock.held and lock_holder(tmp_path / LOCK_NAME)["pid"] == os.getpid()
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started > 0.2      # it did wait (not a timing bound, a sanity check)
    finally:
        proc.kill()
        proc.wait()


def test_stale_lock_of_a_killed_build_is_taken_over(tmp_path: Path) -> None:
    proc = _hold(tmp_path, 60)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert lock_holder(tmp_path / LOCK_NAME)["pid"] == proc.pid      # the dead holder is still named in the file
    lock = BuildLock(tmp_path / LOCK_NAME, wait=0).acquire()
    try:
        assert lock.took_over is not None and lock.took_over["pid"] == proc.pid
        assert lock_holder(tmp_path / LOCK_NAME)["pid"] == os.getpid()
    finally:
        lock.release()
    assert (tmp_path / LOCK_NAME).read_text() == ""                   # released: names nobody


def test_lock_file_with_garbage_or_a_dead_pid_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 999_999_999, "started_at": "x"}))
    with build_lock(tmp_path) as lock:
        assert lock.took_over == {"pid": 999_999_999, "started_at": "x"}
    (tmp_path / LOCK_NAME).write_text("not json")
    with build_lock(tmp_path) as lock:
        assert lock.held and lock.took_over is None


def test_reentrant_in_one_process(tmp_path: Path) -> None:
    with build_lock(tmp_path) as outer:
        with build_lock(tmp_path, wait=0) as inner:     # a stage inside the build takes it again
            assert inner is outer
        assert outer.held
    assert not outer.held
    assert (tmp_path / LOCK_NAME).read_text() == ""


def test_run_build_refuses_while_another_build_runs(tiny_env: Path) -> None:
    from pipeline.config import Settings
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    proc = _hold(settings.data_dir, 30)
    try:
        with pytest.raises(BuildLockedError, match=f"pid {proc.pid}"):
            run_build(settings)
        assert not settings.warehouse_path.exists()
    finally:
        proc.kill()
        proc.wait()


def test_search_before_the_first_build_finishes_says_it_is_running(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.common.lock import running_build

    data = tmp_path / "data"
    data.mkdir()
    assert running_build(data) is None
    with build_lock(data):
        running = running_build(data)
        assert running is not None and running.startswith(f"pid {os.getpid()} on ")
        result = CliRunner().invoke(app, ["--data", str(data), "search", "anything"])
    assert result.exit_code == 1
    assert result.output == (f"error: no warehouse at {data / 'warehouse.duckdb'} yet: the first build is running "
                             f"({running}); search works when it has finished\n")
    assert running_build(data) is None
    result = CliRunner().invoke(app, ["--data", str(data), "search", "anything"])
    assert result.output == f"error: no warehouse at {data / 'warehouse.duckdb'}: run `docsvault build` first\n"


SHARED_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pipeline.common.lock import build_lock
    with build_lock(sys.argv[1], shared=True):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def test_shared_holders_coexist_and_exclude_an_exclusive_one(tmp_path: Path) -> None:
    """Per-source steps of different sources (shared) run at once; a build or a shared stage (exclusive) waits."""
    proc = subprocess.Popen([sys.executable, "-c", SHARED_HOLDER, str(tmp_path), "30"], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with build_lock(tmp_path, shared=True) as lock:          # a second shared holder: at once
            assert lock.held
        with pytest.raises(BuildLockedError):
            with build_lock(tmp_path):                           # exclusive: refused while a shared holder runs
                pass
    finally:
        proc.kill()
        proc.wait()
    with build_lock(tmp_path) as lock:                           # the holder died: free again
        assert lock.held


def test_a_shared_request_reenters_a_held_exclusive_lock(tmp_path: Path) -> None:
    """`docsvault build` holds the lock exclusively and runs every step in its own process: the per-source steps'
    shared requests re-enter it."""
    with build_lock(tmp_path) as outer:
        with build_lock(tmp_path, shared=True) as inner:
            assert inner is outer
        assert outer.held
