"""Real servers for the deployment tests, started by the tests themselves: PostgreSQL (Debian `postgresql`) and Redis
(`redis-server`), each on a free loopback port in a temp dir, in its own session (``setsid``), stopped by pid.

A test that needs one skips with the reason only when the server binary is missing (``.ci/run`` installs both).
PostgreSQL refuses to run as root: under root the cluster is created and run as ``nobody``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    """Wait until 127.0.0.1:port accepts connections; fails with the server's log if the process exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"server did not listen on {port} within {timeout:g} s: {log.read_text()[-2000:]}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
    """Signal the process (by its pid) and reap it; SIGKILL after ``timeout``."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _postgres_bin() -> Path | None:
    """The folder of `postgres`/`initdb`: Debian keeps them in /usr/lib/postgresql/<v>/bin (newest first)."""
    found = shutil.which("postgres")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(d) / "postgres").exists() and (Path(d) / "initdb").exists():
            return Path(d)
    return None


@dataclass(frozen=True)
class Postgres:
    url: str          # postgresql://postgres@127.0.0.1:PORT/postgres (trust auth, loopback only)
    port: int
    pid: int


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    """A fresh PostgreSQL cluster in a temp dir on a free loopback port (fsync off: test data only); the dir is
    removed at the end."""
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    as_user: dict = {}
    if os.geteuid() == 0:       # initdb and postgres refuse root
        as_user = {"user": "nobody", "group": "nogroup", "extra_groups": []}
    # not under pytest's tmp_path: its root is private to the test user, and the server may run as nobody
    root = Path(tempfile.mkdtemp(prefix="docsvault-pg-"))
    data, sock, log = root / "pgdata", root / "sock", root / "postgres.log"
    sock.mkdir(exist_ok=True)
    if as_user:
        for p in (root, sock):
            os.chown(p, 65534, 65534)
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                    "--no-sync"], check=True, capture_output=True, env=env, **as_user)
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=100", "-c", "shared_buffers=32MB"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            **as_user)
    try:
        wait_port(port, proc, log)
        yield Postgres(url=f"postgresql://postgres@127.0.0.1:{port}/postgres", port=port, pid=proc.pid)
    finally:
        stop(proc, signal.SIGINT)     # fast shutdown
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class Redis:
    url: str          # redis://127.0.0.1:PORT
    port: int
    pid: int


@contextlib.contextmanager
def redis_server(root: Path) -> Iterator[Redis]:
    """A Redis server on a free loopback port, no persistence, working dir ``root``."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server not found (apt-get install redis-server)")
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = root / "redis.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                 "--dir", str(root), "--protected-mode", "yes"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_port(port, proc, log)
        yield Redis(url=f"redis://127.0.0.1:{port}", port=port, pid=proc.pid)
    finally:
        stop(proc)
