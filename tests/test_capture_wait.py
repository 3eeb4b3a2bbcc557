"""Capture while another build runs: ``docsvault capture --wait SECONDS`` (as ``build --wait``), the MCP
``save_note`` / ``refresh`` ``wait`` argument (0 to MAX_WAIT seconds), and a lock error that names the option of
the tool actually used. The note stays saved when its build cannot run."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.common.lock import RUN_LOCK_NAME, lock_holder
from pipeline.config import Settings

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pipeline.common.lock import build_run_lock
    with build_run_lock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)
TAKEN_OVER = "A lock left by a process that died is taken over automatically"


@pytest.fixture
def held(tiny_env: Path) -> tuple[subprocess.Popen, str]:
    """Another process holds the tiny env's ``build-run.lock`` (as a running ``docsvault build`` does) for 60 s:
    the process and the lock error's "another docsvault build holds …" part."""
    data = tiny_env / "data"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data), "60"], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    info = lock_holder(data / RUN_LOCK_NAME)
    assert info["pid"] == proc.pid
    holds = (f"another docsvault build holds {(data / RUN_LOCK_NAME).resolve()} (pid {proc.pid} on "
             f"{socket.gethostname()}, started at {info['started_at']})")
    yield proc, holds
    proc.kill()
    proc.wait()


# the note is saved: "pass --wait" alone led a new user to capture it again, refused as "already exists"
NEXT = (" (to make this note searchable run `docsvault build --source tiny`; a second capture of it would be refused: "
        "its name is taken)")


def test_cli_capture_refuses_at_once_naming_its_wait_option(tiny_env: Path, held: tuple) -> None:
    _, holds = held
    note = tiny_env / "tinyvault" / "Lemmings.md"
    result = runner.invoke(app, ["capture", "Concurrent capture test about lemmings.", "--source", "tiny",
                                 "--name", "Lemmings", "--correlation-id", "c1"])
    assert result.exit_code == 2
    assert result.stdout == f"captured {note} (tiny/Lemmings.md, correlation id c1)\n"
    assert result.stderr == (f"error: the note is saved but the build of tiny failed: {holds}; wait for it to finish, "
                             f"or pass --wait SECONDS. {TAKEN_OVER}{NEXT}\n")
    assert note.exists()                                                        # saved either way
    result = runner.invoke(app, ["capture", "Voles too.", "--source", "tiny", "--name", "Voles",
                                 "--correlation-id", "c2", "--wait", "0.3"])
    assert result.exit_code == 2
    assert result.stderr == (f"error: the note is saved but the build of tiny failed: {holds}; it is still held "
                             f"after waiting 0.3 s; wait longer: pass a larger --wait SECONDS. {TAKEN_OVER}{NEXT}\n")
    assert (tiny_env / "tinyvault" / "Voles.md").exists()


def test_cli_capture_wait_is_checked_as_builds(tiny_env: Path) -> None:
    before = sorted(p.name for p in (tiny_env / "tinyvault").iterdir())
    result = runner.invoke(app, ["capture", "x", "--source", "tiny", "--name", "Neg", "--wait", "-1"])
    assert result.exit_code == 2 and "Invalid value for '--wait'" in result.output
    assert sorted(p.name for p in (tiny_env / "tinyvault").iterdir()) == before      # nothing written
    assert "--wait" in runner.invoke(app, ["capture", "--help"]).output


@pytest.mark.parametrize("wait", [-1, 121, True, "5", float("nan")])
def test_mcp_wait_is_bounded_and_nothing_is_written(tiny_env: Path, wait: object) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    svc = VaultService(Settings.from_env())
    before = sorted(p.name for p in (tiny_env / "tinyvault").iterdir())
    with pytest.raises(ToolFailure) as err:
        svc.save_note("A note about voles.", name="Voles", source="tiny", wait=wait)   # type: ignore[arg-type]
    assert str(err.value) == f"wait must be between 0 and 120 seconds, got {wait!r}"
    with pytest.raises(ToolFailure) as err:
        svc.refresh("tiny", wait=wait)                                                  # type: ignore[arg-type]
    assert str(err.value) == f"wait must be between 0 and 120 seconds, got {wait!r}"
    assert sorted(p.name for p in (tiny_env / "tinyvault").iterdir()) == before


def test_mcp_tools_take_a_wait_argument(tiny_env: Path) -> None:
    from pipeline.mcp_server import create_server

    tools = {t.name: t for t in anyio.run(create_server(Settings.from_env()).list_tools)}
    for name in ("save_note", "refresh"):
        wait = dict(tools[name].input_schema["properties"]["wait"])
        assert wait.pop("description").startswith("Seconds (0-120, default 0) to wait for another running build")
        assert wait == {"default": 0, "title": "Wait", "type": "number", "minimum": 0, "maximum": 120}
        assert "`wait` (seconds, 0-120, default 0)" in (tools[name].description or "")


def test_mcp_save_note_and_refresh_name_the_wait_argument(tiny_env: Path, held: tuple) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    _, holds = held
    svc = VaultService(Settings.from_env())
    out = svc.save_note("A note about voles.", name="Voles", source="tiny", correlation_id="c3")
    assert (out["path"], out["searchable"]) == ("tiny/Voles.md", False)
    assert out["error"] == (f"the note is saved but the rebuild failed: refresh of tiny failed (exit 2): error: "
                            f"{holds}; wait for it to finish, or pass `wait` (seconds, at most 120). {TAKEN_OVER}"
                            "; the note stays saved: do not save it again (its name is taken); make it searchable "
                            'with refresh(source="tiny") (its `wait` waits for a running build)')
    # saving it again, as an agent read "pass `wait`", was told its name is taken and saved it twice (session 49)
    assert (tiny_env / "tinyvault" / "Voles.md").exists()
    with pytest.raises(ToolFailure) as err:
        svc.refresh("tiny", wait=0.5)
    assert str(err.value) == (f"refresh of tiny failed (exit 2): error: {holds}; it is still held after waiting "
                              f"0.5 s; wait longer: pass a larger `wait` (seconds, at most 120). {TAKEN_OVER}")


def test_cli_capture_waits_for_the_running_build_then_builds(tiny_env: Path) -> None:
    data = tiny_env / "data"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(data), "1.5"], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        result = runner.invoke(app, ["capture", "Lemmings migrate in large groups.", "--source", "tiny",
                                     "--name", "Lemmings", "--correlation-id", "c4", "--wait", "60"])
        assert proc.wait(timeout=10) == 0           # the holder ended on its own: the capture's build waited for it
    finally:
        proc.kill()
        proc.wait()
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"captured {tiny_env / 'tinyvault' / 'Lemmings.md'} (tiny/Lemmings.md, correlation id c4)",
        "  searchable now: source tiny rebuilt"]
