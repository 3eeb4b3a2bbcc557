"""One writer: the build lock refuses or waits for a live holder, names it, and takes over a dead holder's lock."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline.common.errors import BuildLockedError
from pipeline.common.lock import LOCK_NAME, RUN_LOCK_NAME, BuildLock, build_lock, build_run_lock, lock_holder
from pipeline.ingest import sources as _sources  # noqa: F401 - sets lock.source_kinds, as every build's process does

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pipeline.common.lock import build_lock
    with build_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def _hold(data: Path, seconds: float, script: str = HOLDER) -> subprocess.Popen:
    """A child running ``script`` (HOLDER: the build lock) on ``data`` for ``seconds``, once it says "locked"
    (killed when it does not)."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(data), str(seconds)], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def test_second_build_refuses_naming_the_holder(tmp_path: Path) -> None:
    proc = _hold(tmp_path, 30)
    try:
        info = lock_holder(tmp_path / LOCK_NAME)
        assert info["pid"] == proc.pid and info["started_at"]
        with pytest.raises(BuildLockedError) as exc, build_lock(tmp_path, wait=0):
            pass
        msg = str(exc.value)
        assert f"pid {proc.pid}" in msg and info["started_at"] in msg
        assert "; wait for it to finish, or pass --wait SECONDS. A lock" in msg
        with pytest.raises(BuildLockedError) as exc:      # a wait that ran out: no advice to pass --wait
            with build_lock(tmp_path, wait=0.3):
                pass
        msg = str(exc.value)
        assert "still held after waiting 0.3 s; wait longer: pass a larger --wait SECONDS. A lock" in msg
        assert "pass --wait" not in msg
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


SENSOR_HOLD = textwrap.dedent(
    """
    import sys, time
    from pipeline.common.lock import build_run_lock
    with build_run_lock(sys.argv[1], brief="the upstream_change sensor's tick"):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def test_a_build_waits_out_the_sensor_tick_s_moment_at_the_run_lock(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream_change sensor's tick holds build-run.lock a moment to release dead builds' runs: a build (or a
    capture) that came then was refused as if "another docsvault build" ran, naming the Dagster code server's pid
    (session 43). Now it waits the tick out, and a tick that holds on names itself."""
    from pipeline.common import lock as lock_mod

    proc = _hold(tmp_path, 1.0, SENSOR_HOLD)
    try:
        assert lock_holder(tmp_path / RUN_LOCK_NAME)["brief"] == "the upstream_change sensor's tick"
        with build_run_lock(tmp_path, wait=0) as lock:           # refused at once before
            assert lock.held and lock_holder(tmp_path / RUN_LOCK_NAME)["pid"] == os.getpid()
            assert "brief" not in lock_holder(tmp_path / RUN_LOCK_NAME)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    monkeypatch.setattr(lock_mod, "BRIEF_HOLD_WAIT", 0.2)
    proc = _hold(tmp_path, 30, SENSOR_HOLD)
    try:
        with pytest.raises(BuildLockedError) as exc, build_run_lock(tmp_path, wait=0):
            pass
        assert str(exc.value).startswith(
            f"another process holds {(tmp_path / RUN_LOCK_NAME).resolve()} (the upstream_change sensor's tick, "
            f"pid {proc.pid} on ")
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


def _force_hints(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "was killed before it finished" in r.getMessage()]


def _hint(command: str, holder: str, mcp: str | None = "refresh(full=true)") -> str:
    offer = f" (or MCP {mcp})" if mcp else ""
    return (f"the forced rebuild `{command}` ({holder}) was killed before it finished; run `{command}` again to "
            f"finish it{offer}: a plain build redoes only what changed, so what the forced one had not "
            "redone yet stays as it was")


@pytest.fixture
def fresh_hints(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No forced build in this process, and no dead holder warned about yet (each test is a new build
    process); sources.yaml lists the local sources a and b."""
    from pipeline.common import lock

    monkeypatch.delenv("DOCSVAULT_FORCE", raising=False)
    monkeypatch.setattr(lock, "_force_warned", set())
    root = tmp_path_factory.mktemp("sources")
    sources = root / "sources.yaml"
    blocks = [f"  - name: {n}\n    kind: local\n    path: {root}\n    format: obsidian\n" for n in ("a", "b")]
    sources.write_text("sources:\n" + "".join(blocks), encoding="utf-8")
    monkeypatch.setenv("DOCSVAULT_SOURCES", str(sources))


MATERIALIZE = "/venv/bin/dagster asset materialize -m pipeline.definitions --select 'a/raw_docs+'"


@pytest.mark.parametrize(("force", "argv", "command"), [
    ("*", "/venv/bin/docsvault build --force --data /d", "/venv/bin/docsvault build --force --data /d"),
    ("a,b", MATERIALIZE, f"DOCSVAULT_FORCE=a,b {MATERIALIZE}"),             # the recorded command, as it was run
    ("*", "/venv/bin/dg launch --assets '*'", "DOCSVAULT_FORCE='*' /venv/bin/dg launch --assets '*'"),
    ("a", "/venv/bin/docsvault build --source a", "DOCSVAULT_FORCE=a /venv/bin/docsvault build --source a"),
    # a daemon's run worker, the MCP server, a cut command line, none: the CLI's forced build of those sources
    ("a,b", "/venv/bin/dagster api execute_run '{}'", "docsvault build --force --source a --source b"),
    ("*", "/venv/bin/docsvault mcp", "docsvault build --force"),
    ("a", "/venv/bin/dagster asset materialize --select " + "x" * 20 + "…", "docsvault build --force --source a"),
    ("a", None, "docsvault build --force --source a")])
def test_taking_over_a_killed_forced_rebuild_says_to_force_it_again(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                     fresh_hints: None, force: str, argv: str | None,
                                                                     command: str) -> None:
    """The warning names the killed build's own command when a user runs it again (a `docsvault build`, a
    `dagster asset materialize` or `dg launch`, forced by DOCSVAULT_FORCE unless it says --force)."""
    dead = {"pid": 999_999_998, "started_at": f"t-{force}", "host": f"h-{force}", "argv": argv, "force": force}
    (tmp_path / LOCK_NAME).write_text(json.dumps(dead))
    (tmp_path / RUN_LOCK_NAME).write_text(json.dumps({**dead, "started_at": "earlier"}))    # each lock its own time
    with caplog.at_level(logging.WARNING, logger="docsvault"):
        with build_run_lock(tmp_path), build_lock(tmp_path):       # both files name it: one hint, not two
            pass
    mcp = "refresh(source='a', full=true)" if force == "a" else "refresh(full=true)"    # a, b: local sources
    assert _force_hints(caplog) == [_hint(command, f"pid 999999998 on h-{force}, started at earlier", mcp)]


@pytest.mark.parametrize(("sources", "force", "mcp"), [
    ({"a": "local", "gitdocs": "git"}, "a", "refresh(source='a', full=true)"),
    ({"a": "local", "gitdocs": "git"}, "gitdocs", None),        # MCP refresh refuses a git source
    ({"a": "local", "gitdocs": "git"}, "a,gitdocs", None),
    ({"a": "local", "gitdocs": "git"}, "*", None),              # every source, one of them git
    ({"a": "local", "b": "local"}, "*", "refresh(full=true)"),
    ({"a": "local"}, "gone", None),                            # no longer in sources.yaml
    (None, "a", None)])                                        # sources.yaml unreadable: the command alone
def test_the_force_hint_offers_mcp_refresh_only_for_local_sources(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, fresh_hints: None,
        sources: dict[str, str] | None, force: str, mcp: str | None) -> None:
    """MCP refresh rebuilds local sources only: `refresh(source='obsidian-help', full=true)` of a git source
    answers 'refresh rebuilds local sources only', so the warning offered a call that refuses (found by a new
    user)."""
    path = tmp_path / "sources.yaml"
    if sources is not None:
        where = {"local": f"    path: {tmp_path}\n", "git": "    url: https://example.com/x.git\n"}
        blocks = [f"  - name: {n}\n    kind: {k}\n{where[k]}    format: obsidian\n"
                  for n, k in sources.items()]
        path.write_text("sources:\n" + "".join(blocks), encoding="utf-8")
    monkeypatch.setenv("DOCSVAULT_SOURCES", str(path))
    quoted = "'*'" if force == "*" else force
    command = f"DOCSVAULT_FORCE={quoted} /venv/bin/dagster asset materialize --select '*'"
    dead = {"pid": 999_999_990, "started_at": "T", "host": "h", "force": force,
            "argv": "/venv/bin/dagster asset materialize --select '*'"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(dead))
    with caplog.at_level(logging.WARNING, logger="docsvault"), build_lock(tmp_path):
        pass
    assert _force_hints(caplog) == [_hint(command, "pid 999999990 on h, started at T", mcp)]


def test_a_build_s_force_hint_reads_the_sources_file_it_was_given(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
        fresh_hints: None) -> None:
    """`docsvault build --sources FILE`: the hint judges the forced sources by FILE, not by DOCSVAULT_SOURCES
    (which lists a as local here)."""
    from pipeline.config import Settings
    from pipeline.defs import runner

    given = tmp_path / "given.yaml"
    given.write_text("sources:\n  - name: a\n    kind: git\n    url: https://example.com/a.git\n"
                     "    format: obsidian\n", encoding="utf-8")
    settings = Settings.from_env(sources_file=given, data_dir=tmp_path / "data")
    settings.data_dir.mkdir()
    dead = {"pid": 999_999_989, "started_at": "T", "host": "h", "force": "a"}
    (settings.data_dir / RUN_LOCK_NAME).write_text(json.dumps(dead))

    def stop(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("stop before the run")
    monkeypatch.setattr(runner, "_prepare", stop)
    with caplog.at_level(logging.WARNING, logger="docsvault"), pytest.raises(RuntimeError):
        runner.run_build(settings)
    holder = "pid 999999989 on h, started at T"
    assert _force_hints(caplog) == [_hint("docsvault build --force --source a", holder, None)]


def test_the_lock_records_the_command_line_shell_quoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the forced-rebuild warning names: a `--select '*'` must not come back as a glob; a line longer than
    1000 characters is cut and marked (then never named as a command)."""
    monkeypatch.setattr(sys, "argv", ["/venv/bin/dagster", "asset", "materialize", "--select", "a/*"])
    with build_lock(tmp_path):
        assert lock_holder(tmp_path / LOCK_NAME)["argv"] == "/venv/bin/dagster asset materialize --select 'a/*'"
    monkeypatch.setattr(sys, "argv", ["dagster", "x" * 2000])
    with build_lock(tmp_path):
        assert lock_holder(tmp_path / LOCK_NAME)["argv"] == "dagster " + "x" * 991 + "…"


def test_the_killed_forced_rebuild_is_kept_until_a_forced_build_takes_the_lock(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, fresh_hints: None) -> None:
    """Whoever takes the stale lock first (the Dagster sensor's tick, a shared stage of a Dagster run) keeps the
    killed forced rebuild in the file: the next `docsvault build` says it too, every build until a forced one."""
    from pipeline.common import lock

    dead = {"pid": 999_999_996, "started_at": "T", "host": "h", "argv": "docsvault build --force", "force": "*"}
    (tmp_path / RUN_LOCK_NAME).write_text(json.dumps(dead))
    with build_run_lock(tmp_path) as held:                    # the sensor's tick takes it over
        assert held.took_over == dead and lock_holder(tmp_path / RUN_LOCK_NAME)["unfinished_force"] == dead
    assert json.loads((tmp_path / RUN_LOCK_NAME).read_text()) == {"unfinished_force": dead}   # names no holder
    for _ in range(2):                                        # two later plain builds (processes): each says it
        monkeypatch.setattr(lock, "_force_warned", set())
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="docsvault"), build_run_lock(tmp_path) as held:
            assert held.took_over is None
        assert _force_hints(caplog) == [_hint("docsvault build --force", "pid 999999996 on h, started at T")]
    monkeypatch.setenv("DOCSVAULT_FORCE", "only-a")           # a forced build of one source does not cover it
    with build_run_lock(tmp_path):
        assert lock_holder(tmp_path / RUN_LOCK_NAME)["unfinished_force"] == dead
    monkeypatch.setenv("DOCSVAULT_FORCE", "*")                # the full forced rebuild redoes it: nothing to say
    monkeypatch.setattr(lock, "_force_warned", set())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="docsvault"), build_run_lock(tmp_path):
        assert "unfinished_force" not in lock_holder(tmp_path / RUN_LOCK_NAME)
    assert _force_hints(caplog) == [] and (tmp_path / RUN_LOCK_NAME).read_text() == ""


def test_a_killed_forced_rebuild_after_another_forces_what_both_forced(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh_hints: None) -> None:
    first = {"pid": 999_999_995, "started_at": "T1", "host": "h", "force": "a"}
    second = {"pid": 999_999_994, "started_at": "T2", "host": "h", "force": "b", "unfinished_force": first,
              "argv": "/venv/bin/docsvault build --force --source b"}     # redoes b only: not named, not kept
    (tmp_path / RUN_LOCK_NAME).write_text(json.dumps(second))     # the second forced build was killed too
    with caplog.at_level(logging.WARNING, logger="docsvault"), build_run_lock(tmp_path):
        pass
    assert _force_hints(caplog) == [_hint("docsvault build --force --source a --source b",
                                          "pid 999999994 on h, started at T2")]
    assert json.loads((tmp_path / RUN_LOCK_NAME).read_text()) == {
        "unfinished_force": {"pid": 999_999_994, "started_at": "T2", "host": "h", "force": "a,b"}}


def test_a_forced_build_covering_the_killed_one_says_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             fresh_hints: None) -> None:
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 999_999_993, "started_at": "T", "host": "h",
                                                  "force": "a"}))
    monkeypatch.setenv("DOCSVAULT_FORCE", "a,b")
    with caplog.at_level(logging.WARNING, logger="docsvault"), build_lock(tmp_path) as held:
        assert held.took_over is not None and held.unfinished_force is None
    assert _force_hints(caplog) == [] and (tmp_path / LOCK_NAME).read_text() == ""


SHARED_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pipeline.common.lock import build_lock
    with build_lock(sys.argv[1], shared=True):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def test_a_lock_naming_only_a_killed_forced_rebuild_is_held_by_nobody(tmp_path: Path, fresh_hints: None) -> None:
    """The released file of a taken-over forced rebuild names no holder: a build refused by a Dagster run's shared
    step says who that is, not "pid ?"."""
    (tmp_path / LOCK_NAME).write_text(json.dumps({"unfinished_force": {"pid": 999_999_992, "force": "*"}}))
    from pipeline.common.lock import running_build

    assert running_build(tmp_path) is None
    proc = _hold(tmp_path, 30, SHARED_HOLDER)
    try:
        with pytest.raises(BuildLockedError) as exc, build_lock(tmp_path, wait=0):
            pass
    finally:
        proc.kill()
        proc.wait()
    assert str(exc.value) == (
        f"another docsvault build holds {(tmp_path / LOCK_NAME).resolve()} (a step of a Dagster run (per-source "
        "steps hold it shared and are not named: see the runs in the UI)); wait for it to finish, or pass --wait "
        "SECONDS. A lock left by a process that died is taken over automatically")


def test_a_plain_build_s_stale_lock_gets_no_force_hint(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                       fresh_hints: None) -> None:
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 999_999_997, "started_at": "x"}))
    with caplog.at_level(logging.WARNING, logger="docsvault"), build_lock(tmp_path) as lock:
        assert lock.took_over is not None and lock.unfinished_force is None
    assert _force_hints(caplog) == [] and (tmp_path / LOCK_NAME).read_text() == ""


def test_a_forced_rebuild_is_named_in_the_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSVAULT_FORCE", "docs")
    with build_lock(tmp_path):
        assert lock_holder(tmp_path / LOCK_NAME)["force"] == "docs"
    monkeypatch.delenv("DOCSVAULT_FORCE")
    with build_lock(tmp_path):
        assert "force" not in lock_holder(tmp_path / LOCK_NAME)


def test_reentrant_in_one_process(tmp_path: Path) -> None:
    with build_lock(tmp_path) as outer:
        with build_lock(tmp_path, wait=0) as inner:     # a stage inside the build takes it again
            assert inner is outer
        assert outer.held
    assert not outer.held
    assert (tmp_path / LOCK_NAME).read_text() == ""


RUN_HOLDER = HOLDER.replace("build_lock", "build_run_lock")


def test_run_build_refuses_while_another_build_runs(tiny_env: Path) -> None:
    """Another `docsvault build` holds build-run.lock for its whole run: refused at once, naming it."""
    from pipeline.config import Settings
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    proc = _hold(settings.data_dir, 30, RUN_HOLDER)
    try:
        with pytest.raises(BuildLockedError, match=f"pid {proc.pid}"):
            run_build(settings)
        assert not settings.warehouse_path.exists()
    finally:
        proc.kill()
        proc.wait()


def test_run_build_takes_its_turn_after_a_dagster_step(tiny_env: Path, caplog: pytest.LogCaptureFixture) -> None:
    """build.lock held by a Dagster run's per-source step (shared, for as long as the step runs): the build waits
    its turn (at least DOCSVAULT_LOCK_WAIT), saying who holds it, and then builds; it is not refused."""
    from pipeline.config import Settings
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    proc = subprocess.Popen([sys.executable, "-c", SHARED_HOLDER, str(settings.data_dir), "1.5"],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with caplog.at_level("WARNING", logger="docsvault"):
            report = run_build(settings, wait=0)
        assert proc.wait(timeout=30) == 0
        assert report.ok and settings.warehouse_path.exists()
        assert any("is held by a step of a Dagster run (per-source steps hold it shared and are not named: see the "
                   "runs in the UI); waiting up to 3600 s" in r.getMessage() for r in caplog.records)
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
    assert result.exit_code == 2
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
    proc = _hold(tmp_path, 30, SHARED_HOLDER)
    try:
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


SLOT_THEN_LOCK = textwrap.dedent(
    """
    import json, sys, time
    import dagster as dg
    from pipeline.common.lock import build_lock
    from pipeline.defs.assets import WAREHOUSE_POOL
    instance = dg.DagsterInstance.get()
    # a sensor run's warehouse step: its pool slot first, then the build lock (as every Dagster step takes them)
    instance.event_log_storage.initialize_concurrency_limit_to_default(WAREHOUSE_POOL)
    claim = instance.event_log_storage.claim_concurrency_slot(WAREHOUSE_POOL, "sensor-run", "warehouse")
    print(json.dumps({"slot": bool(claim.is_claimed)}), flush=True)
    try:
        with build_lock(sys.argv[1], wait=float(sys.argv[2])):
            got = True
            time.sleep(1)
    except Exception as exc:
        got = repr(exc)
    instance.event_log_storage.free_concurrency_slots_for_run("sensor-run")
    print(json.dumps({"lock": got}), flush=True)
    """
)


def test_a_build_and_a_dagster_step_holding_a_pool_slot_take_turns(tiny_env: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """While a `docsvault build` runs, a step of another run takes the warehouse pool slot and waits for the build
    lock: it gets the lock between the build's stages, and the build's link_graph then gets the slot (a build that
    held the lock throughout deadlocked with it until the step's lock wait ran out)."""
    from pipeline import stages
    from pipeline.config import Settings
    from pipeline.defs.runner import ensure_instance, run_build

    settings = Settings.from_env()
    ensure_instance(settings)
    steps: list[subprocess.Popen] = []
    chunk_stage = stages.chunk_stage

    def chunk_then_start_the_other_step(*args: object, **kwargs: object) -> object:
        if not steps:     # mid-build: the other run's step claims the slot, then asks for the lock
            steps.append(subprocess.Popen([sys.executable, "-c", SLOT_THEN_LOCK, str(settings.data_dir), "30"],
                                          stdout=subprocess.PIPE, text=True))
            assert json.loads(steps[0].stdout.readline()) == {"slot": True}
        return chunk_stage(*args, **kwargs)

    monkeypatch.setattr(stages, "chunk_stage", chunk_then_start_the_other_step)
    try:
        report = run_build(settings)
        assert json.loads(steps[0].stdout.readline()) == {"lock": True}
        assert report.sources[0].ok and report.shared_ok
    finally:
        for step in steps:
            step.kill()
            step.wait()


def test_the_sensor_releases_a_killed_builds_run_only_when_no_build_runs(tiny_env: Path) -> None:
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from pipeline.common.lock import build_run_lock
    from pipeline.config import Settings
    from pipeline.defs.executor import release_dead_builds
    from pipeline.defs.runner import ensure_instance

    settings = Settings.from_env()
    ensure_instance(settings)
    instance = dg.DagsterInstance.get()
    instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="killed-build", status=dg.DagsterRunStatus.STARTED,
                                tags={"docsvault/run": "build"}))
    with build_run_lock(settings.data_dir):             # a live build: its run is not touched
        holder = subprocess.run([sys.executable, "-c", "import dagster as dg, sys; from pipeline.config import "
                                 "Settings; from pipeline.defs.executor import release_dead_builds; print("
                                 "release_dead_builds(Settings.from_env(), dg.DagsterInstance.get()))"],
                                capture_output=True, text=True, check=True)
        assert holder.stdout == "[]\n"
    assert release_dead_builds(settings, instance) == ["killed-build"]
    assert instance.get_run_by_id("killed-build").status == dg.DagsterRunStatus.FAILURE


def test_the_pool_slot_of_a_run_that_ended_is_freed_also_while_a_build_runs(tiny_env: Path) -> None:
    """A UI run whose worker was killed is marked failed, but the slot its step claimed stays claimed and every later
    run of the pool would queue for good: the sensor's tick (and every build) frees the slots of ended or deleted
    runs, and never those of a run still going."""
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRun

    from pipeline.common.lock import build_run_lock
    from pipeline.config import Settings
    from pipeline.defs.executor import release_dead_builds
    from pipeline.defs.runner import ensure_instance

    settings = Settings.from_env()
    ensure_instance(settings)
    instance = dg.DagsterInstance.get()
    storage = instance.event_log_storage
    pool = "docsvault_source_notes"
    storage.set_concurrency_slots(pool, 2)
    for run_id, status in (("killed-ui-run", dg.DagsterRunStatus.FAILURE), ("live-ui-run", dg.DagsterRunStatus.STARTED)):
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, status=status))
        assert storage.claim_concurrency_slot(pool, run_id, "notes__embeddings").is_claimed
    assert storage.claim_concurrency_slot(pool, "deleted-run", "notes__chunks").is_claimed is False   # queued
    with build_run_lock(settings.data_dir):             # while a build runs too
        assert release_dead_builds(settings, instance) == ["deleted-run", "killed-ui-run"]
    assert [s.run_id for s in storage.get_concurrency_info(pool).claimed_slots] == ["live-ui-run"]
    assert storage.get_concurrency_run_ids() == {"live-ui-run"}
    from pipeline.defs.runner import pools_held_by_other_runs

    assert pools_held_by_other_runs(instance, [pool, "docsvault_warehouse"]) == [
        "pool docsvault_source_notes is held by run live-ui-run (STARTED, step notes__embeddings): this build's "
        "steps of that pool wait until it is done (the Dagster UI shows the run); if its process was killed, "
        "Dagster still counts it as running: Terminate it in the Dagster UI (Force termination immediately) and "
        "this build goes on"]


def _stderr_line(proc: subprocess.Popen, seconds: float) -> str:
    """The next line the process writes on stderr ("" when it ends or `seconds` pass first)."""
    import selectors

    assert proc.stderr is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        if not sel.select(timeout=seconds):
            return ""
    return proc.stderr.readline()


def test_a_cli_build_waiting_for_a_lock_stops_on_sigint_and_sigterm(tiny_env: Path) -> None:
    """Ctrl-C / SIGTERM stop a waiting `docsvault build` at once with one line, whether it waits for another build
    (before its run) or inside a stage (a Dagster step waiting for the source's lock), and it leaves no lock held
    and no failure recorded."""
    from pipeline.common.lock import RUN_LOCK_NAME
    from pipeline.config import Settings

    settings = Settings.from_env()
    data = settings.data_dir
    cli = [sys.executable, "-m", "pipeline.cli", "build", "--wait", "600"]
    cwd = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    for lock, sig, code, how in ((RUN_LOCK_NAME, signal.SIGINT, 130, " by SIGINT"),
                                 ("locks/tiny.lock", signal.SIGTERM, 130, "")):
        holder = BuildLock(data / lock).acquire()           # another build (or a sensor run's step) holds it
        proc = subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
        try:
            line = _stderr_line(proc, 300)
            assert line == (f"warning: build lock {data / lock} is held by pid {os.getpid()} on {socket.gethostname()}, "
                            f"started at {lock_holder(data / lock)['started_at']}; waiting up to "
                            f"{600 if lock == RUN_LOCK_NAME else 3600} s for it (Ctrl-C stops)\n")
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
            proc.wait()
            holder.release()
        assert (proc.returncode, out, err) == (code, "", f"error: build interrupted{how}: stopped, its locks released; "
                                                         "run `docsvault build` again to finish it\n")
        for name in (RUN_LOCK_NAME, LOCK_NAME):                 # free, and naming nobody
            with BuildLock(data / name) as lock:
                assert lock.held and lock.took_over is None
    from pipeline.common import artifacts

    assert artifacts.load_state(settings, "tiny").get("last_error") is None      # not a failure of the source


def test_ctrl_c_of_a_cli_build_inside_a_step_prints_one_line_and_no_traceback(tiny_env: Path) -> None:
    """Ctrl-C sends SIGINT to the terminal's whole foreground process group. While a step runs, Dagster's
    compute-log processes (``tail -F`` and its ``watch_orphans.py`` watcher) run too; in that group each watcher
    printed a KeyboardInterrupt traceback under the build's one line. They run in a group of their own now. A
    forced build says to run it forced again (a plain build would find what it had redone unchanged)."""
    from pipeline.config import Settings

    data = Settings.from_env().data_dir
    cwd = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    holder = BuildLock(data / "locks/tiny.lock").acquire()      # the step waits for the source's lock
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "build", "--wait", "600", "--force"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env,
                            start_new_session=True)
    try:
        line = _stderr_line(proc, 300)
        assert line.startswith(f"warning: build lock {data / 'locks/tiny.lock'} is held by pid {os.getpid()}"), line
        os.killpg(proc.pid, signal.SIGINT)                      # what the terminal does on Ctrl-C
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        holder.release()
    assert (proc.returncode, out, err) == (130, "", "error: build interrupted: stopped, its locks released; "
                                                    "run `docsvault build --force` again to finish it\n")
    # its Dagster run ends CANCELED, as a Terminate in the UI: before, FAILURE ("No user initiated termination
    # request was found, treating as failure"), a red run on the Runs page, whose unfinished chain the
    # upstream_change sensor then started again (it leaves only a CANCELED run's chain alone)
    import dagster as dg

    from pipeline.defs.runner import INTERRUPTED_MESSAGE

    instance = dg.DagsterInstance.get()
    [run] = instance.get_runs(dg.RunsFilter(tags={"docsvault/run": "build"}), limit=1)
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert [e.message for e in instance.all_logs(run.run_id)
            if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_CANCELED"] == [INTERRUPTED_MESSAGE]


def test_a_file_system_without_locks_is_named_not_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flock failing with ENOLCK (a shared volume mounted without lock support) was taken for a holder: a step
    waited DOCSVAULT_LOCK_WAIT (an hour) for nobody, then said another build held the lock. It fails at once,
    naming the lock, the errno and what to do; a real holder (EWOULDBLOCK) is still waited for."""
    import errno

    from pipeline.common import lock as lock_mod
    from pipeline.common.errors import PipelineError

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock_mod.fcntl, "flock", no_locks)
    path = tmp_path / "locks" / "handbook.lock"
    with pytest.raises(PipelineError) as err:
        BuildLock(path, wait=30).acquire()
    assert not isinstance(err.value, BuildLockedError)
    assert str(err.value) == (
        f"cannot lock the build lock {path}: No locks available (errno ENOLCK): the file system of the data dir "
        "does not support file locks (flock); mount it with lock support (NFS: v4, or v3 with lockd/statd running, "
        "not 'nolock' across hosts) or use another data dir (--data / DOCSVAULT_DATA)")

    def held(fd: int, op: int) -> None:
        raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable")

    monkeypatch.setattr(lock_mod.fcntl, "flock", held)
    with pytest.raises(BuildLockedError):
        BuildLock(path, wait=0).acquire()


def test_a_per_source_step_s_lock_timeout_names_docsvault_lock_wait(tmp_path: Path) -> None:
    """A Dagster step (a Celery worker's) that waited out ``locks/<source>.lock`` was told to "pass a larger
    --wait SECONDS", an option no step has; it names DOCSVAULT_LOCK_WAIT, as the stages' build.lock does."""
    from pipeline.defs.assets import source_lock

    holder = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from pipeline.defs.assets import source_lock
        with source_lock(Path(sys.argv[1]), "handbook"):
            print("locked", flush=True)
            time.sleep(float(sys.argv[2]))
        """)
    proc = _hold(tmp_path, 30, holder)
    try:
        waiter = source_lock(tmp_path, "handbook")
        assert waiter.path == (tmp_path / "locks" / "handbook.lock").resolve()
        waiter.wait = 0.2
        with pytest.raises(BuildLockedError) as exc:
            waiter.acquire()
    finally:
        proc.kill()
        proc.wait()
    assert f"pid {proc.pid}" in str(exc.value)
    assert "it is still held after waiting 0.2 s; wait longer: pass a larger DOCSVAULT_LOCK_WAIT (seconds). A lock" \
        in str(exc.value)


def test_a_dagster_home_without_locks_is_named_not_taken_for_a_running_ui(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of session 47: the build lock's ENOLCK was fixed, but `hold_across_exec` (the lock of `docsvault ui`)
    still took any flock error for a holder: on a DAGSTER_HOME without file locks `docsvault ui` refused with
    "another `docsvault ui` (pid ?, http://127.0.0.1:?) runs the Dagster daemon", of nobody. It names the lock,
    the errno and what to do; a real holder (EWOULDBLOCK) is still named as one."""
    import errno

    from pipeline.cli import UI_LOCK, ui_daemon_problem
    from pipeline.common import lock as lock_mod

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock_mod.fcntl, "flock", no_locks)
    home = tmp_path / "dagster"
    assert ui_daemon_problem(home, 3000, None) == (
        f"cannot lock {home / UI_LOCK}: No locks available (errno ENOLCK): the file system of its folder {home} does "
        "not support file locks (flock); mount it with lock support (NFS: v4, or v3 with lockd/statd running, not "
        f"'nolock' across hosts) or point DAGSTER_HOME ({home}) at a folder on another file system")

    def held(fd: int, op: int) -> None:
        raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable")

    monkeypatch.setattr(lock_mod.fcntl, "flock", held)
    assert ui_daemon_problem(home, 3000, None) == (
        f"another `docsvault ui` (pid ?, http://127.0.0.1:?) runs the Dagster daemon for DAGSTER_HOME={home}: open "
        "its UI or stop it first (a second UI on this instance without a second daemon: --port PORT --webserver-only)")
