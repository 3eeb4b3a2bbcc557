"""One writer at a time: the build lock ``<data>/build.lock``.

The lock is an advisory ``flock`` on the file (POSIX), so the kernel releases it when its holder dies, even by
SIGKILL: a stale lock left by a dead build is simply taken over by the next one (and logged). While held, the file
names the holder: ``{"pid": 1234, "started_at": "2026-01-01T10:00:00+00:00", "host": "...", "argv": "..."}``
(``argv``: its command line, shell-quoted), plus ``"force": "*"`` (or the forced source names) during a forced
rebuild, so the build that takes over a forced rebuild's stale lock says to force it again (naming its command).
That dead forced holder stays in the file as ``"unfinished_force"``
(also once released: ``{"unfinished_force": {...}}``, which names no holder) until a forced build covering its
sources takes the lock, so every build says it until then, also when another process (the Dagster sensor's tick,
a shared stage of a Dagster run) took the stale lock over first.

A waiting process sleeps in short steps (``poll``), so SIGINT/SIGTERM stop it at once: ``docsvault build`` turns
both into :class:`~pipeline.common.errors.BuildInterrupted`, whose unwinding releases every lock it holds.

The lock is re-entrant inside one process (a stage function inside a step that holds it takes it again). A
``docsvault build`` holds ``<data>/build-run.lock`` for its whole run and ``build.lock`` only while it cleans up and
while each of its stages runs, like any Dagster run's step (see :data:`RUN_LOCK_NAME`). A second process either waits up to ``wait``
seconds or gets :class:`~pipeline.common.errors.BuildLockedError` naming the holder's pid and start time.

On systems without ``fcntl`` (Windows) the file is created with ``O_EXCL`` and a lock whose pid is not alive is
taken over.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pipeline.common.errors import BuildLockedError, PipelineError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("docsvault")

#: what a non-blocking ``flock`` fails with while another process holds the lock (any other error: no locks here)
_HELD_ERRNOS = frozenset({errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES})


def _no_locks(what: str, exc: OSError, folder: str, instead: str) -> PipelineError:
    """The one-line error of a ``flock`` of ``what`` that failed with another error than :data:`_HELD_ERRNOS`: the
    file system of ``folder`` has no file locks (taken for a holder, it was waited for or named as running)."""
    return PipelineError(
        f"cannot lock {what}: {exc.strerror or exc} (errno {errno.errorcode.get(exc.errno or 0, exc.errno)}): the "
        f"file system of {folder} does not support file locks (flock); mount it with lock support (NFS: v4, or v3 "
        f"with lockd/statd running, not 'nolock' across hosts) or {instead}")

__all__ = ["BRIEF_HOLD_WAIT", "LOCK_NAME", "RUN_LOCK_NAME", "TURN_WAIT_ARG", "BuildLock", "ExecLock", "build_lock", "build_run_lock",
           "hold_across_exec", "lock_holder", "pid_alive", "turn_wait"]

LOCK_NAME = "build.lock"
#: held by a ``docsvault build`` for its whole run (one at a time); its stages take ``build.lock`` each in turn, as a
#: Dagster run's steps do, so both take a Dagster pool slot first and the lock second (the other order deadlocked:
#: the CLI build held the lock and waited for the pool slot that a sensor run's step held while waiting for the lock)
RUN_LOCK_NAME = "build-run.lock"

_held: dict[Path, BuildLock] = {}          # path -> the lock this process holds (re-entrancy)
_held_guard = threading.Lock()


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (on this host)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def lock_holder(path: Path) -> dict[str, Any]:
    """The holder info written in a lock file (``pid``, ``started_at``, ``host``, ``argv``); {} when unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8") or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


#: how a user lengthens a build's wait for its turn at ``build.lock`` (:func:`turn_wait`)
TURN_WAIT_ARG = "--wait SECONDS or DOCSVAULT_LOCK_WAIT (seconds)"


def turn_wait(wait: float) -> float:
    """Seconds a build waits for ``build.lock`` once it holds ``build-run.lock``: at least a stage's wait
    (``DOCSVAULT_LOCK_WAIT``, default 3600). Another CLI build is refused at the run lock (after ``wait``); who else
    holds ``build.lock`` is a Dagster run's step (UI, schedule, sensor, ``dagster asset materialize``), which holds
    it only while that step runs, so the build takes its turn after it, as each of its own stages does."""
    from pipeline.config import lock_wait_seconds

    return max(float(wait), lock_wait_seconds())


def _describe(info: dict[str, Any]) -> str:
    if not info.get("pid"):      # empty, or only what a dead forced build left (``unfinished_force``)
        return "a step of a Dagster run (per-source steps hold it shared and are not named: see the runs in the UI)"
    who = f"{info['brief']}, " if isinstance(info.get("brief"), str) else ""
    return f"{who}pid {info.get('pid', '?')} on {info.get('host', '?')}, started at {info.get('started_at', '?')}"


#: seconds a process waits, beyond its own ``wait``, for a holder that holds the lock only for a moment (``brief``:
#: the upstream_change sensor's tick takes ``build-run.lock`` to release dead builds' runs), instead of being refused
BRIEF_HOLD_WAIT = 30.0


_force_warned: set[tuple[Any, Any]] = set()      # (pid, host) of dead forced builds already warned about


def _unfinished_force(previous: dict[str, Any], taken_over: bool) -> dict[str, Any] | None:
    """The forced rebuild a lock file says did not finish: its dead holder when that was a forced build
    (``taken_over``), merged with the one it carried (``unfinished_force``), the forced sources of both; None
    when there is none, or when this process's own forced build (``DOCSVAULT_FORCE``) covers it (it redoes it)."""
    from pipeline.config import force_spec, forced_names

    carried = previous.get("unfinished_force") if isinstance(previous.get("unfinished_force"), dict) else None
    dead = ({k: previous[k] for k in ("pid", "host", "started_at", "argv", "force") if k in previous}
            if taken_over and previous.get("force") else None)
    if dead is None or carried is None:
        pending = dead or carried
    else:                                        # the later killed build, forcing what both forced
        names = forced_names(str(dead["force"])) | forced_names(str(carried.get("force") or ""))
        pending = {**dead, "force": "*" if "*" in names else ",".join(sorted(names))}
        if names != forced_names(str(dead["force"])):   # its command redoes only its own sources
            pending.pop("argv", None)
    if pending is None or not forced_names(str(pending.get("force") or "")):
        return None
    mine = forced_names(force_spec())
    if "*" in mine or (mine and forced_names(str(pending["force"])) <= mine):
        return None
    return pending


def _force_again_command(info: dict[str, Any]) -> str:
    """The command that redoes the killed forced rebuild ``info`` (a lock file's holder: ``force``, a
    ``DOCSVAULT_FORCE`` value, and ``argv``): the recorded command when it was one a user runs again, a
    ``docsvault build`` or a ``dagster asset materialize`` / ``dg launch``, led by ``DOCSVAULT_FORCE=<force>`` unless
    it says ``--force`` (e.g. ``DOCSVAULT_FORCE=obsidian-help /venv/bin/dagster asset materialize -m
    pipeline.definitions --select ...``); else (a UI or daemon run's process, the MCP server, a truncated or missing
    command line) ``docsvault build --force [--source NAME]...``."""
    from pipeline.config import forced_names

    force = str(info.get("force") or "")
    argv = info.get("argv")
    try:
        words = shlex.split(argv) if isinstance(argv, str) and not argv.endswith("…") else []
    except ValueError:
        words = []
    program = os.path.basename(words[0]) if words else ""
    if (program == "docsvault" and "build" in words[1:]) or (program == "dagster" and words[1:3] == [
            "asset", "materialize"]) or (program == "dg" and words[1:2] == ["launch"]):
        return str(argv) if "--force" in words else f"DOCSVAULT_FORCE={shlex.quote(force)} {argv}"
    names = forced_names(force)
    return "docsvault build --force" + ("" if "*" in names else "".join(f" --source {n}" for n in sorted(names)))


def _warn_unfinished_force(info: dict[str, Any]) -> None:
    """Warn once per dead holder (and process) about a forced rebuild that was killed before it finished: a plain
    build redoes only what changed, so the stages the forced one had not redone yet stay as they were; the user has
    to force it again (as Ctrl-C's message says)."""
    key = (info.get("pid"), info.get("host"))     # one process: its run lock and stage locks name other times
    if key in _force_warned:
        return
    _force_warned.add(key)
    command = _force_again_command(info)
    mcp = _mcp_refresh_call(str(info.get("force") or ""))
    log.warning("the forced rebuild `%s` (%s) was killed before it finished; run `%s` again to finish it%s: "
                "a plain build redoes only what changed, so what the forced one had not redone yet stays as "
                "it was", command, _describe(info), command, f" (or MCP {mcp})" if mcp else "")


#: source name -> kind of the sources of ``Settings.from_env().sources_file``; set by
#: :mod:`pipeline.ingest.sources` when it is imported (this foundation module may not import the sources layer).
#: None: unknown, and the forced-rebuild warning offers no MCP call.
source_kinds: Callable[[], dict[str, str]] | None = None


def _mcp_refresh_call(force: str) -> str | None:
    """The MCP call that redoes the forced rebuild of ``force`` (a ``DOCSVAULT_FORCE`` value), or None when
    there is none: MCP ``refresh`` rebuilds local sources only, so every source it forces (``*``: every source
    of sources.yaml, read from ``Settings.from_env().sources_file``) must be of kind local; None too when
    sources.yaml cannot be read or does not list a forced name. One source: ``refresh(source='a',
    full=true)``; several or all: ``refresh(full=true)`` (every local source)."""
    from pipeline.config import forced_names

    names = forced_names(force)
    if source_kinds is None:
        return None
    try:
        kinds = source_kinds()
    except Exception:      # noqa: BLE001 - an unreadable sources.yaml: the CLI command alone is offered
        return None
    forced = set(kinds) if "*" in names else names
    if not forced or any(kinds.get(name) != "local" for name in forced):
        return None
    return f"refresh(source={next(iter(forced))!r}, full=true)" if len(forced) == 1 else "refresh(full=true)"


def _command_line() -> str:
    """This process's command line, shell-quoted (at most 1000 characters: a longer one ends with "…")."""
    line = shlex.join(sys.argv)
    return line if len(line) <= 1000 else line[:999] + "…"


class BuildLock:
    """The build lock of one data dir (see module doc).

    Args:
        path: the lock file (normally ``<data>/build.lock``; its folder is created).
        wait: seconds to wait for another holder to finish; 0 refuses at once.
        poll: seconds between two attempts while waiting.
        wait_arg: how the caller's user sets ``wait``, for the error's advice (``--wait SECONDS`` in the CLI; the
            MCP tools pass their ``wait`` argument's wording).
        brief: set by a holder that keeps the lock only a moment (the sensor's tick): what it is, written in the
            file; another process finding such a holder waits up to ``BRIEF_HOLD_WAIT`` more before refusing.

    Raises (from :meth:`acquire`):
        BuildLockedError: another live process holds the lock after ``wait`` seconds (names its pid and start).
        PipelineError: the lock file or its folder cannot be created (a file in the way, no permission: the message
            names it and the data dir's option; never a traceback).
    """

    def __init__(self, path: Path, wait: float = 0.0, poll: float = 0.2, shared: bool = False,
                 wait_arg: str = "--wait SECONDS", brief: str | None = None) -> None:
        self.path = Path(os.path.realpath(path))     # a symlink loop stays as written (Path.resolve raises)
        self.brief = brief         # what holds it for a moment only (written as ``brief``: others wait it out)
        self.wait = wait
        self.wait_arg = wait_arg
        self.poll = poll
        self.shared = shared and fcntl is not None     # shared needs flock; elsewhere it is exclusive
        self._fd: int | None = None
        self._pid: int | None = None
        self._depth = 0
        self.took_over: dict[str, Any] | None = None   # holder info of a dead process whose lock was taken over
        self.unfinished_force: dict[str, Any] | None = None   # a killed forced rebuild, kept in the file (module doc)

    # ---- acquire / release
    def acquire(self) -> BuildLock:
        with _held_guard:
            mine = _held.get(self.path)
            if mine is not None and mine._fd is not None and mine._pid == os.getpid():
                mine._depth += 1
                return mine
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._unusable(exc) from None
        deadline = time.monotonic() + max(self.wait, 0.0)
        told = brief_waited = False
        while True:
            if self._try():
                with _held_guard:
                    _held[self.path] = self
                return self
            if not told and self.wait > 0:        # once: why nothing happens (a signal stops the wait, see below)
                told = True
                log.warning("build lock %s is held by %s; waiting up to %g s for it (Ctrl-C stops)", self.path,
                            _describe(lock_holder(self.path)), self.wait)
            if time.monotonic() >= deadline:
                info = lock_holder(self.path)
                if info.get("brief") and self.brief is None and not brief_waited:   # a moment's hold: wait it out
                    brief_waited = True
                    deadline = time.monotonic() + BRIEF_HOLD_WAIT
                    continue
                advice = (f"it is still held after waiting {self.wait:g} s; wait longer: pass a larger "
                          f"{self.wait_arg}" if self.wait > 0 else f"wait for it to finish, or pass {self.wait_arg}")
                raise BuildLockedError(
                    f"{'another docsvault build' if not info.get('brief') else 'another process'} holds {self.path} "
                    f"({_describe(info)}); {advice}. A lock left by a "
                    f"process that died is taken over automatically"
                )
            time.sleep(self.poll)

    def _unusable(self, exc: OSError) -> PipelineError:
        """The one-line error of a lock file that cannot be created (its folder or the file itself)."""
        return PipelineError(f"cannot create the build lock {self.path}: {exc.strerror or exc} (check the data dir: "
                             "--data / DOCSVAULT_DATA)")

    def _try(self) -> bool:
        if fcntl is not None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise self._unusable(exc) from None
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in _HELD_ERRNOS:
                    return False
                # not "held": the file system refuses locks (an NFS mount without lock support, ENOLCK); taken
                # for a holder, a step would wait DOCSVAULT_LOCK_WAIT (an hour) for nobody
                raise _no_locks(f"the build lock {self.path}", exc, "the data dir",
                                "use another data dir (--data / DOCSVAULT_DATA)") from None
            if self.shared:            # several holders: the file keeps naming the last exclusive holder (if any)
                self._fd, self._pid, self._depth = fd, os.getpid(), 1
                return True
            previous = lock_holder(self.path)
            dead = bool(previous.get("pid")) and previous.get("pid") != os.getpid()
            if dead:
                # the file still names a holder but nobody holds the flock: that build died (kill -9, power loss)
                self.took_over = previous
                log.warning("build lock %s: taking over the stale lock of %s (process no longer holds it)",
                            self.path, _describe(previous))
            self.unfinished_force = _unfinished_force(previous, dead)
            if self.unfinished_force is not None:
                _warn_unfinished_force(self.unfinished_force)
            self._write(fd)
            self._fd = fd
        else:  # pragma: no cover - Windows
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                info = lock_holder(self.path)
                pid = int(info.get("pid") or 0)
                if pid and not pid_alive(pid):
                    self.took_over = info
                    log.warning("build lock %s: taking over the stale lock of %s", self.path, _describe(info))
                    unfinished = _unfinished_force(info, True)      # not kept: the released file is removed
                    if unfinished is not None:
                        _warn_unfinished_force(unfinished)
                    Path(self.path).unlink(missing_ok=True)
                return False
            self._write(fd)
            self._fd = fd
        self._pid = os.getpid()
        self._depth = 1
        return True

    def _write(self, fd: int) -> None:
        from pipeline.config import force_spec

        info = {
            "pid": os.getpid(),
            "started_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "host": socket.gethostname(),
            "argv": _command_line(),
        }
        if self.brief:
            info["brief"] = self.brief
        if force_spec():                       # a forced rebuild (`build --force`, MCP `refresh(full=true)`)
            info["force"] = force_spec()[:300]
        if self.unfinished_force is not None:
            info["unfinished_force"] = self.unfinished_force
        self._write_info(fd, info)

    @staticmethod
    def _write_info(fd: int, info: dict[str, Any]) -> None:
        """Replace the file's content by ``info`` as JSON (synced), or empty it when ``info`` is empty."""
        os.ftruncate(fd, 0)
        if info:
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(info).encode("utf-8"))
            os.fsync(fd)

    def release(self) -> None:
        with _held_guard:
            if self._fd is None:
                return
            self._depth -= 1
            if self._depth > 0:
                return
            fd, self._fd = self._fd, None
            _held.pop(self.path, None)
        try:
            if not self.shared:           # nobody holds it: no pid in the file (never a stale pid to misread)
                self._write_info(fd, {} if self.unfinished_force is None else
                                 {"unfinished_force": self.unfinished_force})
        except OSError:
            pass
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        else:  # pragma: no cover - Windows
            os.close(fd)
            Path(self.path).unlink(missing_ok=True)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> BuildLock:  # noqa: PYI034 - acquire() returns the lock already held when re-entered
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextmanager
def build_lock(data_dir: Path, wait: float = 0.0, shared: bool = False,
               wait_arg: str = "--wait SECONDS") -> Iterator[BuildLock]:
    """Hold ``<data_dir>/build.lock`` for the block (re-entrant in one process).

    Args:
        data_dir: the data dir the build writes (``Settings.data_dir``).
        wait: seconds to wait for another build; 0 refuses at once.
        shared: take it shared (``flock`` LOCK_SH): any number of shared holders at once, none while an
            exclusive holder (a ``docsvault build``, a shared stage) has it. The Dagster shell's per-source steps
            take it shared so several sources build in parallel (Dagster pools keep one step per source).
            A process that already holds the lock (either mode) re-enters it.
        wait_arg: how the caller's user sets ``wait`` (the error's advice: :class:`BuildLock`).

    Raises:
        BuildLockedError: another live build holds it (the message names its pid and start time).
    """
    lock = BuildLock(Path(data_dir) / LOCK_NAME, wait=wait, shared=shared, wait_arg=wait_arg).acquire()
    try:
        yield lock
    finally:
        lock.release()


@contextmanager
def build_run_lock(data_dir: Path, wait: float = 0.0, wait_arg: str = "--wait SECONDS",
                   brief: str | None = None) -> Iterator[BuildLock]:
    """Hold ``<data_dir>/build-run.lock`` for a whole ``docsvault build`` (see :data:`RUN_LOCK_NAME`); ``wait_arg``:
    how the caller's user sets ``wait`` (the error's advice: :class:`BuildLock`); ``brief``: what holds it for a
    moment only (the sensor's tick: :class:`BuildLock`), which a build then waits for instead of refusing.

    Raises:
        BuildLockedError: another ``docsvault build`` runs (the message names its pid and start time).
    """
    with BuildLock(Path(data_dir) / RUN_LOCK_NAME, wait=wait, wait_arg=wait_arg, brief=brief) as lock:
        yield lock


def running_build(data_dir: Path) -> str | None:
    """``"pid N on HOST, started at T"`` when a live ``docsvault build`` or a stage holds its lock, else None.

    Best effort, for messages (a reader never waits for the lock): the holder's pid must be alive on this host.
    """
    import socket

    for name in (RUN_LOCK_NAME, LOCK_NAME):
        info = lock_holder(Path(data_dir) / name)
        pid = info.get("pid")
        if isinstance(pid, int) and info.get("host") in (None, socket.gethostname()) and pid_alive(pid):
            return _describe(info)
    return None


class ExecLock(NamedTuple):
    """:func:`hold_across_exec`'s answer: ``fd`` the held descriptor (None: another process holds the lock, and
    ``holder`` is what it wrote, ``{}`` when unreadable)."""

    fd: int | None
    holder: dict[str, Any]

    def release(self) -> None:
        """Let go of a held lock at once (its file emptied, so it names nobody); no-op when not held."""
        if self.fd is not None and self.fd >= 0:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)


def hold_across_exec(path: Path, info: dict[str, Any], instead: str = "use a folder on another file system"
                     ) -> ExecLock:
    """Take ``path``'s ``flock`` without waiting, for this process and the program it ``exec``s next: the
    descriptor stays open and inheritable, so the lock lasts until that program exits (the kernel releases it then,
    even on SIGKILL). ``info`` is written into the file as JSON, for the next one's message. ``instead``: what the
    error of a file system without locks tells to do, after "mount it with lock support or".

    Without ``fcntl`` (Windows) nothing is locked: ``fd`` -1.

    Raises:
        OSError: the file cannot be created or opened.
        PipelineError: its file system does not support ``flock`` (ENOLCK: an NFS mount without lock support).
    """
    if fcntl is None:  # pragma: no cover - Windows
        return ExecLock(-1, {})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in _HELD_ERRNOS:       # no locks on that file system: nobody holds it
            raise _no_locks(str(path), exc, f"its folder {Path(path).parent}", instead) from None
        return ExecLock(None, lock_holder(Path(path)))
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(info).encode("utf-8"))
    os.set_inheritable(fd, True)
    return ExecLock(fd, {})
