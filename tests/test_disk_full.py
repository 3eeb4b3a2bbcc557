"""A full (or read-only, or failing) disk is one line naming where and what to do, never a traceback: the lock file's
write, Dagster's SQLite run storage (SQLAlchemy wraps sqlite3's error, which names no file) and any OSError with a
file name, in every command (found by filling a small tmpfs under a build, session 40)."""

from __future__ import annotations

import errno
import sqlite3
import sys
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.cli import app
from pipeline.common.errors import storage_error_line

AGAIN = ("free space there (or make it writable) and run the command again: what the last build published still "
         "serves search")


def _wrapped(inner: BaseException) -> Exception:
    """``inner`` as SQLAlchemy raises it: another exception whose ``__cause__`` it is."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise RuntimeError("(sqlite3.OperationalError) …\n[SQL: PRAGMA main.table_xinfo(\"runs\")]") from exc
    except RuntimeError as outer:
        return outer


def test_the_line_names_the_file_or_the_folder_and_what_happened() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/d/data/state/me.json")
    assert storage_error_line(full) == f"cannot write /d/data/state/me.json: no space left on the device; {AGAIN}"
    no_name = OSError(errno.ENOSPC, "No space left on device")          # os.write() to the open lock file
    assert storage_error_line(no_name, data_dir=Path("/d/data")) == (
        f"cannot write in the data dir /d/data: no space left on the device; {AGAIN}")
    assert storage_error_line(OSError(errno.EROFS, "Read-only file system", "/d/v/x.md")) == (
        f"cannot write /d/v/x.md: the file system is read-only; {AGAIN}")
    assert storage_error_line(OSError(errno.EDQUOT, "Disk quota exceeded", "/d/x")) == (
        f"cannot write /d/x: disk quota exceeded; {AGAIN}")


def test_sqlites_errors_under_sqlalchemy_name_dagster_home() -> None:
    assert storage_error_line(_wrapped(sqlite3.OperationalError("database or disk is full")),
                              dagster_home=Path("/d/data/dagster")) == (
        f"cannot write Dagster's run storage in DAGSTER_HOME /d/data/dagster: no space left on the device; {AGAIN}")
    assert storage_error_line(_wrapped(sqlite3.OperationalError("disk I/O error")), dagster_home=Path("/h")) == (
        f"cannot write Dagster's run storage in DAGSTER_HOME /h: disk I/O error (is the disk full?); {AGAIN}")


def test_other_errors_are_not_taken_for_a_full_disk() -> None:
    assert storage_error_line(ValueError("x")) is None
    assert storage_error_line(OSError(errno.ENOENT, "No such file or directory", "/x")) is None
    assert storage_error_line(_wrapped(sqlite3.OperationalError("no such table: runs"))) is None


def test_a_build_that_fills_the_disk_is_one_line_and_exit_2(tiny_env: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "noop_build", full)
    monkeypatch.setattr(sys, "argv", ["docsvault", "build"])
    monkeypatch.setattr(cli, "app", lambda **kw: app(prog_name="docsvault", **kw))
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    out, err = capsys.readouterr()
    data = cli.settings().data_dir
    assert (exit_.value.code, out, err) == (
        2, "", f"error: cannot write in the data dir {data}: no space left on the device; {AGAIN}\n")


def test_a_stage_that_fills_the_disk_in_a_build_is_the_same_line(tiny_env: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's data dir on a small volume: the warehouse step of `docsvault build` filled it, and the build
    said `error: shared stages failed: warehouse: [Errno 28] No space left on device: '…/tokens-….ids.marshal'`,
    not what to do (session 43, a 10 MB tmpfs). A step's storage error is now the line of every other command;
    DuckDB's own (no errno) names the data dir."""
    from pipeline import stages
    from pipeline.config import Settings
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    target = settings.cache_dir / "bm25" / "tokens-x.ids.marshal"

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    monkeypatch.setattr(stages, "warehouse_stage", full)
    report = run_build(settings)
    assert report.shared_error == (f"warehouse: cannot write {target}: no space left on the device; {AGAIN}; "
                                   "retrieval_eval: retrieval_eval was not built")

    def duckdb_full(*_a: object, **_k: object) -> None:
        raise RuntimeError('IO Error: Could not write file "x.duckdb.tmp-1": No space left on device')

    monkeypatch.setattr(stages, "warehouse_stage", duckdb_full)
    report = run_build(settings)
    assert report.shared_error.startswith(
        f"warehouse: cannot write in the data dir {settings.data_dir}: no space left on the device; {AGAIN}")


def test_any_other_error_is_a_bug_with_its_traceback_and_exit_2(tiny_env: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Not a disk error: not told as one. A bug keeps its traceback, then one line, exit 2 (README: Exit codes)."""
    def bug(*_a: object, **_k: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "noop_build", bug)
    monkeypatch.setattr(sys, "argv", ["docsvault", "build"])
    monkeypatch.setattr(cli, "app", lambda **kw: app(prog_name="docsvault", **kw))
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" in err and "space" not in err
    assert err.splitlines()[-1].startswith("error: internal error: ZeroDivisionError: a bug (a bug in docsvault")


def test_a_file_write_that_fills_the_disk_names_the_file(tmp_path: Path) -> None:
    """A vault or state file whose write failed on a full disk raised ``[Errno 28] No space left on device`` with
    no file in it, so the failed stage's line named nothing (a hostile tester, session 40). The error now names
    the file being written; no temp file is left, and an error that names its file keeps it."""
    from pipeline.common.artifacts import write_atomic_with

    def full(fh: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "vault" / "me" / "Note.md"
    with pytest.raises(OSError) as err:
        write_atomic_with(target, full)
    assert str(err.value) == f"[Errno 28] No space left on device: '{target}'"
    assert list(target.parent.iterdir()) == []

    def denied(fh: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", "/elsewhere")

    with pytest.raises(PermissionError) as err:
        write_atomic_with(target, denied)
    assert err.value.filename == "/elsewhere"
