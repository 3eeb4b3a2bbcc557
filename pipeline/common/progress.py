"""Build progress as plain lines, for logs (output that is not a terminal); the terminal bar lives in the CLI.

The build reports progress through one core callback, ``progress(stage, source, done, total)`` (``build.
PROGRESS_HOOKS``; stages ``fetch``, ``normalize``, ``chunk``, ``embed``, ``warehouse``; ``total`` 0 = unknown, e.g. a
git clone), so any shell can show it: the CLI's rich bar on a terminal, :class:`PlainProgress` in a log, the MCP
``refresh`` result (which reads the lines), a Dagster logger.

:class:`PlainProgress` writes at most one line per ``interval`` seconds (10), from a timer thread too, so a long step
with no updates (a clone) still shows it is alive, plus one line when a task that was reported finishes::

    progress: embed duckdb 1,200/25,345 vectors (5%), 127.0/s, ETA 3 min 10 s
    progress: fetch duckdb running for 40 s
    progress: embed duckdb done: 25,345 vectors in 3 min 20 s
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["PREFIX", "UNITS", "PlainProgress", "format_seconds"]

PREFIX = "progress: "
#: what a stage counts
UNITS = {"fetch": "files", "normalize": "files", "vault": "notes", "chunk": "notes", "embed": "vectors",
         "warehouse": "steps"}


def format_seconds(seconds: float) -> str:
    """``"42 s"``, ``"3 min 10 s"``, ``"1 h 5 min"``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


class _Task:
    __slots__ = ("base", "done", "reported", "started", "total")

    def __init__(self, now: float) -> None:
        self.started = now
        self.done = 0
        self.total = 0
        self.reported = False
        self.base: tuple[float, int] | None = None    # (when, done) of the first update with work done: the rate's start


class PlainProgress:
    """Progress lines on ``stream`` at most every ``interval`` seconds (see the module docstring).

    Use as a context manager (starts/stops the timer thread) and pass :meth:`update` as the progress callback.

    Args:
        stream: where lines go (stderr).
        interval: seconds between lines (> 0).
        clock: monotonic seconds (tests pass a fake one).
        timer: run the timer thread (tests drive :meth:`tick` themselves).
    """

    def __init__(self, stream: TextIO, interval: float = 10.0, clock: Callable[[], float] = time.monotonic,
                 timer: bool = True) -> None:
        self.stream = stream
        self.interval = interval
        self.clock = clock
        self._timer = timer
        self._tasks: dict[tuple[str, str], _Task] = {}
        self._last_line = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PlainProgress:
        if self._timer:
            self._thread = threading.Thread(target=self._run, name="docsvault-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(min(1.0, self.interval)):
            self.tick()

    def _write(self, line: str) -> None:
        try:
            self.stream.write(PREFIX + line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
        self._last_line = self.clock()

    def _describe(self, stage: str, source: str, t: _Task, now: float) -> str:
        unit = UNITS.get(stage, "")
        elapsed = max(now - t.started, 1e-9)
        if t.total <= 0:
            if t.done:
                return f"{stage} {source} {t.done:,} {unit}, running for {format_seconds(elapsed)}"
            return f"{stage} {source} running for {format_seconds(elapsed)}"
        line = f"{stage} {source} {t.done:,}/{t.total:,} {unit} ({100 * t.done // t.total}%)"
        # the rate since the first units came (cached vectors come at once, then the model loads): counted from the
        # start, 1 vector before a 70 s model load read "0.0/s, ETA 3 h 47 min" for a stage of 1 min 31 s
        since, base = t.base if t.base is not None else (t.started, 0)
        if t.done > base and now - since >= 1:
            rate = (t.done - base) / (now - since)
            line += f", {rate:.1f}/s, ETA {format_seconds((t.total - t.done) / rate)}"
        else:
            line += f", running for {format_seconds(elapsed)}"
        return line

    def update(self, stage: str, source: str, done: int, total: int) -> None:
        """The progress callback: ``done`` of ``total`` units of ``stage`` for ``source`` (total 0: unknown)."""
        now = self.clock()
        with self._lock:
            t = self._tasks.get((stage, source))
            if t is None:
                t = self._tasks[(stage, source)] = _Task(now)
            t.done, t.total = int(done), int(total)
            if t.base is None and t.done > 0:
                t.base = (now, t.done)
            finished = t.total > 0 and t.done >= t.total
            if finished:
                if t.reported:
                    self._write(f"{stage} {source} done: {t.total:,} {UNITS.get(stage, '')} in "
                                f"{format_seconds(now - t.started)}")
                del self._tasks[(stage, source)]
            elif now - self._last_line >= self.interval:
                t.reported = True
                self._write(self._describe(stage, source, t, now))

    def tick(self) -> None:
        """Write the state of the running tasks when no line was written for ``interval`` seconds."""
        now = self.clock()
        with self._lock:
            if not self._tasks or now - self._last_line < self.interval:
                return
            parts = []
            for (stage, source), t in self._tasks.items():
                t.reported = True
                parts.append(self._describe(stage, source, t, now))
            self._write("; ".join(parts))
