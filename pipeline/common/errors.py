"""Named errors of the library core.

Every message says what went wrong, where (file/line/source/URL) and what to do. The shells translate them:
the CLI prints one line and exits 2, the MCP server returns a tool error, Dagster fails the step.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

from pipeline.common.display import one_line as display_line

#: an escape ``repr`` writes for a character it does not print (``\u3000``, ``\xa0``), not one whose backslash is
#: itself escaped (``\\u3000``: a backslash the text holds); group 1: the escaped backslashes before it
_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


def one_line(message: object) -> str:
    r"""The first line of ``message`` as a shell prints an error: runs of ASCII whitespace as one space, a run of
    ideographic or no-break spaces kept as written (:func:`pipeline.common.display.one_line`), and a space
    of another width that a quoted value holds (``repr`` writes the ideographic space U+3000 as ``\u3000``, the
    no-break space as ``\xa0``) as the character, which the user typed and copies back: ``unknown source
    'mine　'``, not ``'mine\u3000'``. Control and other invisible characters stay escaped."""
    line = display_line(str(message).split("\n")[0])

    def shown(m: re.Match[str]) -> str:
        ch = chr(int(m.group(2)[1:], 16))
        return m.group(1) + ch if unicodedata.category(ch) == "Zs" and ch != " " else m.group(0)

    return _ESCAPE.sub(shown, line)


class PipelineError(Exception):
    """Base class of every error the core raises on purpose."""


class SourceConfigError(PipelineError):
    """sources.yaml is missing, unreadable or invalid (the message names file, source, key and what is allowed)."""


class FetchError(PipelineError):
    """A source could not be fetched (the message names source, URL and cause)."""


class NoteError(PipelineError):
    """One file could not be turned into a note (the message names source and path); the rest of the source builds."""


class WarehouseNotBuiltError(PipelineError):
    """The warehouse file does not exist yet or holds no index: run `docsvault build` first."""


class WarehouseCorruptError(PipelineError):
    """The warehouse file cannot be opened or has another schema version; it is rebuilt by the next build."""


class EmbeddingError(PipelineError):
    """The embedding model could not be loaded or returned vectors of the wrong shape."""


class EvalFileError(PipelineError):
    """An eval cases file is missing or malformed (the message names file and case)."""


class BuildLockedError(PipelineError):
    """Another build holds the warehouse lock (the message names its pid and start time)."""


class UnknownSourceError(PipelineError):
    """A search or eval named a source that is not in the warehouse (the message lists the known sources)."""


class SynonymsError(PipelineError):
    """The synonyms file is malformed (the message names the file, the line when known, and what to fix)."""


class BuildInterrupted(KeyboardInterrupt):
    """A build stopped by SIGINT (Ctrl-C) or SIGTERM, while it waited for a lock or ran a stage; what it held is
    released (locks, a Dagster step's pool slot). ``signum`` is the signal when known (the CLI exits 128 + it)."""

    def __init__(self, signum: int | None = None, terminated: bool = False) -> None:
        super().__init__(signum)
        self.signum = signum
        #: the build's Dagster run was terminated (the UI's Terminate), not the process signalled
        self.terminated = terminated

    def __str__(self) -> str:
        return self.line()

    def line(self, again: str = "docsvault build") -> str:
        """The one line the CLI prints; ``again``: the command that finishes the build (``docsvault build --force``
        for a forced one: a plain build would find the sources it had already redone unchanged and stop there)."""
        import signal

        if self.terminated:
            return (f"build terminated: its Dagster run was terminated (Terminate in the UI); stopped after the step "
                    f"that was running, its locks released; run `{again}` again to finish it")
        how = f" by {signal.Signals(self.signum).name}" if self.signum else ""
        return f"build interrupted{how}: stopped, its locks released; run `{again}` again to finish it"


#: errno values of a storage that cannot take a write: the disk is full, a quota is reached, it is read-only, or it
#: failed; what to do is the user's (free space, remount), not a bug to report
_STORAGE_ERRNOS = {28: "no space left on the device", 122: "disk quota exceeded", 30: "the file system is read-only",
                   5: "input/output error"}
#: SQLite's own texts for the same (Dagster's run storage in DAGSTER_HOME is SQLite: it names no file)
_SQLITE_STORAGE = {"database or disk is full": "no space left on the device",
                   "disk i/o error": "disk I/O error (is the disk full?)"}


class StorageProblem(NamedTuple):
    """A write a full, read-only or failing disk refused (:func:`storage_problem`): ``where`` (a file, ``in the data
    dir …``, or ``Dagster's run storage in DAGSTER_HOME …``) and ``what`` (``no space left on the device``, …)."""

    where: str
    what: str

    @property
    def cause(self) -> str:
        """``cannot write <where>: <what>``: what happened, without what to do (a build's resumed line quotes it)."""
        return f"cannot write {self.where}: {self.what}"

    @property
    def line(self) -> str:
        """The error line: :attr:`cause`, then what to do."""
        return (f"{self.cause}; free space there (or make it writable) and run the command again: what the last "
                "build published still serves search")


def storage_problem(exc: BaseException, dagster_home: object = None, data_dir: object = None
                    ) -> StorageProblem | None:
    """The :class:`StorageProblem` that a full, read-only or failing disk caused, found anywhere in ``exc``'s chain
    (``__cause__``/``__context__``, as SQLAlchemy wraps sqlite3's error); None for any other error.

    Args:
        exc: the error a command did not catch.
        dagster_home: DAGSTER_HOME, named for SQLite's errors (Dagster's run storage names no file).
        data_dir: the data dir, named for an OSError without a file name (a write to an open lock file).
    """
    import sqlite3

    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in _STORAGE_ERRNOS:
            where = err.filename or (f"in the data dir {data_dir}" if data_dir else "a file")
            return StorageProblem(str(where), _STORAGE_ERRNOS[err.errno])
        if isinstance(err, sqlite3.OperationalError):
            what = next((v for k, v in _SQLITE_STORAGE.items() if k in str(err).lower()), None)
            if what is not None:
                where = f"Dagster's run storage in DAGSTER_HOME {dagster_home}" if dagster_home else \
                    "Dagster's run storage (DAGSTER_HOME)"
                return StorageProblem(where, what)
        err = err.__cause__ or err.__context__
    return None


def storage_error_line(exc: BaseException, dagster_home: object = None, data_dir: object = None) -> str | None:
    """One line for an error that a full, read-only or failing disk caused (:func:`storage_problem`'s
    :attr:`StorageProblem.line`); None for any other error.

    Returns:
        ``cannot write <where>: <what>; free space there (or make it writable) and run the command again: what the
        last build published still serves search``, or None.
    """
    problem = storage_problem(exc, dagster_home, data_dir)
    return problem.line if problem is not None else None
