"""Dagster's per-step ``tail -F`` of a `docsvault build` never outlives the build, even after a ``kill -9``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="GNU tail's --pid")

CHILD = """
import subprocess, sys, time
from pipeline.defs.runner import _own_group_popen
tail = _own_group_popen(["tail", "-F", "-c", "+0", sys.argv[1]], stdout=subprocess.DEVNULL)
print(tail.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_log_tail_of_a_killed_build_ends_by_itself(tmp_path: Path) -> None:
    """Killed between Dagster's two spawns (the tail up, its watcher not yet), the build left a ``tail -F`` running
    for good, in a process group of its own; GNU tail's ``--pid`` ends it once the build is gone."""
    log = tmp_path / "step.err"
    log.write_text("", encoding="utf-8")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parent.parent)
    assert child.stdout is not None
    tail = int(child.stdout.readline())
    try:
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 15                       # tail checks the pid every second
        while _alive(tail) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(tail)
    finally:
        if _alive(tail):
            os.kill(tail, signal.SIGKILL)


def test_a_tail_gets_the_pid_of_its_build_and_every_command_its_own_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.defs import runner

    calls: list[tuple[object, dict]] = []
    monkeypatch.setattr(runner.subprocess, "Popen", lambda args, **kw: calls.append((args, kw)))
    runner._own_group_popen(["tail", "-F", "-c", "+0", "step.err"], stdout=None)
    runner._own_group_popen([sys.executable, "watch_orphans.py", "1", "2"])
    assert calls == [
        (["tail", f"--pid={os.getpid()}", "-F", "-c", "+0", "step.err"], {"stdout": None, "process_group": 0}),
        ([sys.executable, "watch_orphans.py", "1", "2"], {"process_group": 0})]


def test_a_build_starts_the_step_log_processes_with_it() -> None:
    from dagster._core.execution import compute_logs

    from pipeline.defs.runner import _log_tails_outside_the_terminal_group, _own_group_popen

    with _log_tails_outside_the_terminal_group():
        assert compute_logs.subprocess.Popen is _own_group_popen
    assert compute_logs.subprocess is subprocess
