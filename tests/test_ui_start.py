"""`docsvault ui` refuses at once (exit 2, nothing started) on a taken port or when another `docsvault ui` runs
the daemon of the same DAGSTER_HOME, and starts Dagster from DAGSTER_HOME so the project's dagster.yaml in the
current folder brings no spurious warning (a different one still does). ``cli.run_until_stopped`` is replaced:
nothing real starts here (tests/test_ui.py starts it for real); Ctrl-C gives `interrupted` and exit 130."""

from __future__ import annotations

import os
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import pipeline
from pipeline import cli
from pipeline.cli import UI_LOCK, app, unused_instance_file
from pipeline.common.lock import hold_across_exec

runner = CliRunner()
REPO = Path(pipeline.__file__).resolve().parents[1]


class _Exec(Exception):
    """Raised by the stand-in for cli.run_until_stopped: what would have been started, from where."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        super().__init__(argv[0])
        self.argv, self.env, self.cwd = argv, env, cwd


@pytest.fixture
def ui_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """DAGSTER_HOME under tmp_path (not created), the Dagster child and signal replaced, the current folder restored
    after."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("DOCSVAULT_DATA", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")     # the code location loads it

    def start(argv: list[str], env: dict[str, str], cwd: Path) -> None:
        raise _Exec(argv, env, cwd)

    monkeypatch.setattr(cli, "run_until_stopped", start)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    return tmp_path / "dagster"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def other_ui(ui_env: Path) -> Iterator[dict[str, Any]]:
    """Another `docsvault ui` holding the DAGSTER_HOME's lock (pid 4242, port 3000)."""
    info = {"pid": 4242, "host": "127.0.0.1", "port": 3000, "started_at": "2026-01-02T03:04:05+00:00"}
    lock = hold_across_exec(ui_env / UI_LOCK, info)
    assert lock.fd is not None
    yield info
    os.close(lock.fd)


def _lock_fds(home: Path) -> list[int]:
    """This process's descriptors open on ``home``'s ui lock file."""
    path = str(home / UI_LOCK)
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                out.append(int(fd))
        except OSError:
            continue
    return out


def test_a_busy_port_exits_at_once_and_starts_nothing(ui_env: Path, busy_port: int) -> None:
    result = runner.invoke(app, ["ui", "--port", str(busy_port)])
    assert (result.exit_code, result.output) == (2, (
        f"error: 127.0.0.1:{busy_port} is already in use: stop what listens there, or pass --port PORT (a free "
        "port)\n"))
    assert not ui_env.exists()
    result = runner.invoke(app, ["ui", "--port", str(busy_port), "--webserver-only"])
    assert result.exit_code == 2 and f"127.0.0.1:{busy_port} is already in use" in result.output


def test_a_sources_file_the_code_location_cannot_load_is_refused_in_one_line(ui_env: Path, tmp_path: Path) -> None:
    """Finding of a new user's run (session 46): `make ui` with `kind: lcoal` in sources.yaml (or from a folder
    with no sources.yaml) started Dagster anyway: a 40-line ComponentTreeException traceback with the typo's line
    in its middle, and a UI whose code location "Failed" (no assets, jobs, sensor or schedule). It is now the
    sources file's one-line error, and nothing starts (no DAGSTER_HOME made, no lock taken)."""
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  - name: my-notes\n    kind: lcoal\n    path: notes\n", encoding="utf-8")
    result = runner.invoke(app, ["ui", "--port", str(_free_port())])
    assert (result.exit_code, result.output) == (2, (
        f"error: {sources}: line 3: sources[1] (source 'my-notes'): 'kind' must be one of ['git', 'llms_txt', "
        "'html', 'local'], got 'lcoal'; did you mean 'local'?; the Dagster UI's code location loads its assets from "
        "it and would not load: fix it (`docsvault sources validate`) and run `docsvault ui` again\n"))
    sources.unlink()
    result = runner.invoke(app, ["ui", "--port", str(_free_port()), "--webserver-only"])
    assert (result.exit_code, result.output) == (2, (
        f"error: {sources}: sources file not found; create it (see README) or point DOCSVAULT_SOURCES / --sources at "
        "one; the Dagster UI's code location loads its assets from it and would not load: fix it (`docsvault "
        "sources validate`) and run `docsvault ui` again\n"))
    assert not ui_env.exists()


def test_a_second_daemon_on_one_dagster_home_is_refused(ui_env: Path, other_ui: dict[str, Any],
                                                        busy_port: int) -> None:
    running = (f"another `docsvault ui` (pid 4242, http://127.0.0.1:3000) runs the Dagster daemon for "
               f"DAGSTER_HOME={ui_env}: open its UI or stop it first (a second UI on this instance without a second "
               "daemon: --port PORT --webserver-only)")
    result = runner.invoke(app, ["ui", "--port", str(_free_port())])
    assert (result.exit_code, result.output) == (2, f"error: {running}\n")
    result = runner.invoke(app, ["ui", "--port", str(busy_port)])      # both: the port first, the daemon too
    assert (result.exit_code, result.output) == (2, (
        f"error: 127.0.0.1:{busy_port} is already in use: stop what listens there, or pass --port PORT (a free "
        f"port); also, {running}\n"))
    port = _free_port()
    result = runner.invoke(app, ["ui", "--port", str(port), "--webserver-only"])   # a UI without a daemon: allowed
    assert isinstance(result.exception, _Exec)
    assert result.exception.argv[1:] == ["-m", "pipeline.definitions", "-d", str(REPO), "-h", "127.0.0.1", "-p",
                                         str(port)]


def test_ui_holds_the_lock_into_dg_dev_and_runs_in_dagster_home(ui_env: Path) -> None:
    port = _free_port()
    shutil.copyfile(REPO / "dagster.yaml", Path.cwd() / "dagster.yaml")    # as in a checkout's root
    result = runner.invoke(app, ["ui", "--port", str(port)])
    fds = _lock_fds(ui_env)
    try:
        assert isinstance(result.exception, _Exec), result.output
        assert result.exception.argv[1:] == ["dev", "-m", "pipeline.definitions", "-d", str(REPO), "-h",
                                             "127.0.0.1", "-p", str(port)]
        assert result.exception.cwd == ui_env      # dg dev warns of a dagster.yaml in its folder that is not this one
        assert result.output == f"Dagster UI on http://127.0.0.1:{port} (webserver + daemon; DAGSTER_HOME={ui_env})\n"
        assert (ui_env / "dagster.yaml").read_bytes() == ((REPO / "dagster.yaml").read_bytes()
                                                         + (REPO / "dagster-event-log.yaml").read_bytes())
        assert len(fds) == 1 and os.get_inheritable(fds[0])                  # dg dev inherits the lock
        again = hold_across_exec(ui_env / UI_LOCK, {})
        assert again.fd is None and (again.holder["pid"], again.holder["port"]) == (os.getpid(), port)
    finally:
        for fd in fds:
            os.close(fd)


def test_only_a_different_dagster_yaml_in_the_current_folder_is_warned_of(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    here = tmp_path / "here"
    here.mkdir()
    assert unused_instance_file(here, home) is None
    (here / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    assert unused_instance_file(here, home) is None                     # the same file: nothing to say
    assert unused_instance_file(home, home) is None
    (here / "dagster.yaml").write_text("telemetry:\n  enabled: true\n", encoding="utf-8")
    assert unused_instance_file(here, home) == (
        f"{here / 'dagster.yaml'} is not used: Dagster reads {home / 'dagster.yaml'}; copy it there to apply it")
    (home / "dagster.yaml").unlink()
    assert unused_instance_file(here, home) == (
        f"{here / 'dagster.yaml'} is not used: Dagster reads {home / 'dagster.yaml'} (missing); copy it there to "
        "apply it")


def test_ui_warns_of_a_different_dagster_yaml_here(ui_env: Path) -> None:
    ui_env.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", ui_env / "dagster.yaml")
    here = Path.cwd() / "dagster.yaml"
    here.write_text("telemetry:\n  enabled: true\n", encoding="utf-8")
    result = runner.invoke(app, ["ui", "--port", str(_free_port()), "--webserver-only"])
    assert isinstance(result.exception, _Exec)
    assert result.output.splitlines()[0] == (
        f"warning: {here} is not used: Dagster reads {ui_env / 'dagster.yaml'}; copy it "
        "there to apply it")


@pytest.mark.parametrize("stopped_by, code, line, exit_code", [
    (signal.SIGINT, 130, "interrupted", 130), (signal.SIGTERM, 143, "error: docsvault ui stopped by SIGTERM", 143),
    (None, 0, None, 0), (None, 1, None, 2),
])
def test_ui_stopped_by_a_signal_says_so_in_one_line_with_128_plus_its_number(
        ui_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        stopped_by: int | None, code: int, line: str | None, exit_code: int) -> None:
    """Dagster exits 0 on Ctrl-C; `docsvault ui` prints `interrupted` and exits 130 (as every command), 143 for
    SIGTERM; a Dagster that exits by itself with an error is an error of the command: exit 2 (README: Exit codes)."""
    import sys

    monkeypatch.setattr(cli, "run_until_stopped", lambda argv, env, cwd: (code if stopped_by is None else 0, stopped_by))
    port = _free_port()
    monkeypatch.setattr(sys, "argv", ["docsvault", "ui", "--port", str(port)])
    try:
        with pytest.raises(SystemExit) as exit_:
            cli._main()
    finally:
        for fd in _lock_fds(ui_env):
            os.close(fd)
    started = f"Dagster UI on http://127.0.0.1:{port} (webserver + daemon; DAGSTER_HOME={ui_env})\n"
    assert (exit_.value.code, capsys.readouterr()) == (exit_code, ("", started + (f"{line}\n" if line else "")))


CHILD = r"""
import json, os, signal, subprocess, sys, time
report, ready = sys.argv[1], sys.argv[1] + ".ready"
state = {"ignored_at_start": signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
         "own_group": os.getpgid(0) == os.getpid(), "got": []}
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda n, _f: state["got"].append(signal.Signals(n).name))
grandchild = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
    "signal.signal(signal.SIGINT, lambda *a: sys.exit(3)); signal.signal(signal.SIGTERM, lambda *a: sys.exit(4)); "
    f"open({ready!r}, 'w').close(); time.sleep(30)"])
while not os.path.exists(ready):
    time.sleep(0.02)
os.kill(os.getppid(), int(sys.argv[2]))          # the signal reaches `docsvault ui` (its process, or its group)
deadline = time.monotonic() + 10
while not state["got"] and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.3)                                   # a second forwarded signal would arrive by now
state["grandchild"] = grandchild.wait(timeout=10)
json.dump(state, open(report, "w"))
"""


@pytest.mark.parametrize("sent, passed_on", [("SIGINT", "SIGINT"), ("SIGTERM", "SIGTERM"), ("SIGHUP", "SIGTERM")])
def test_a_stop_signal_reaches_the_dagster_process_group_once(tmp_path: Path, sent: str, passed_on: str) -> None:
    """run_until_stopped, with a stand-in for dg dev that has a child of its own: the signal `docsvault ui` gets is
    passed on once to the whole group (SIGHUP as SIGTERM); the child starts in a group of its own, with SIGINT not
    ignored although this process ignores it (as a background job of a script does); the handlers come back."""
    import json
    import sys

    from pipeline.cli import run_until_stopped

    report = tmp_path / "report.json"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code, stopped_by = run_until_stopped(
            [sys.executable, "-c", CHILD, str(report), str(int(signal.Signals[sent]))], dict(os.environ), tmp_path)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
    assert (code, stopped_by) == (0, signal.Signals[sent])
    grandchild = 3 if passed_on == "SIGINT" else 4
    assert json.loads(report.read_text()) == {"ignored_at_start": False, "own_group": True, "got": [passed_on],
                                              "grandchild": grandchild}
