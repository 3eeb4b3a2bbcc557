"""A build that ended on a full disk where Dagster records the run (`error: cannot write Dagster's run storage …`)
left its run "started": `status` said nothing of it and the next build said it "was killed" (session 47). The failure
is now recorded in the data dir; status prints it until a build publishes, and the next build says what stopped the
last one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app, resumed_line
from pipeline.config import Settings
from pipeline.service import build_failure, record_build_failure, status_data
from pipeline.stages.results import BuildReport

LINE = ("cannot write Dagster's run storage in DAGSTER_HOME /d/dagster: disk I/O error (is the disk full?); free "
        "space there (or make it writable) and run the command again: what the last build published still serves "
        "search")


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data", vault_dir=tmp_path / "vault",
                    evals_dir=tmp_path / "evals")


def test_a_build_stopped_by_a_full_disk_is_told_by_status_and_the_next_build(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    (tmp_path / "notes").mkdir()
    (tmp_path / "sources.yaml").write_text("sources:\n  - name: me\n    kind: local\n    path: notes\n",
                                           encoding="utf-8")

    def full_disk(*_a: object, **_k: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")
    monkeypatch.setattr("pipeline.defs.runner.run_build", full_disk)
    args = ["--sources", str(tmp_path / "sources.yaml"), "--data", str(tmp_path / "data"), "--vault",
            str(tmp_path / "vault")]
    with pytest.raises(sqlite3.OperationalError):       # _main prints its one line (README: Commands)
        CliRunner().invoke(app, [*args, "build"], catch_exceptions=False)
    s = _settings(tmp_path)
    recorded = build_failure(s)
    assert recorded is not None and recorded["cause"] == (       # what the next build's resumed line quotes
        f"cannot write Dagster's run storage in DAGSTER_HOME {tmp_path / 'data' / 'dagster'}: disk I/O error (is "
        "the disk full?)")
    failed = {k: v for k, v in recorded.items() if k != "cause"}           # as status shows it
    assert failed is not None and failed["error"].startswith(
        f"cannot write Dagster's run storage in DAGSTER_HOME {tmp_path / 'data' / 'dagster'}: disk I/O error")
    lines = CliRunner().invoke(app, [*args, "status"]).stdout.splitlines()
    assert lines[3] == f"last build failed ({failed['at']}): {failed['error']}"
    assert json.loads(CliRunner().invoke(app, [*args, "status", "--json"]).stdout)["build_failed"] == failed
    assert build_failure(s, clear=True) == recorded and build_failure(s) is None      # a build that succeeded
    assert status_data(s)["build_failed"] is None


def test_the_next_build_says_the_last_one_stopped_on_the_disk_not_that_it_was_killed(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    record_build_failure(s, LINE, cause="cannot write Dagster's run storage in DAGSTER_HOME /d/dagster: disk I/O "
                         "error (is the disk full?)")
    failed = build_failure(s)
    assert failed is not None
    report = BuildReport(sources=[], shared_ok=True, resumed=["2026-01-01T10:00:00+00:00"])
    assert resumed_line(report, failed) == (
        "finished the build started at 2026-01-01T10:00:00+00:00, which stopped on a full or failing disk (cannot "
        "write Dagster's run storage in DAGSTER_HOME /d/dagster: disk I/O error (is the disk full?)): search now has "
        "what it had built")
    older = {"error": LINE, "at": "2025-12-31T00:00:00+00:00"}          # before that build started: not its end
    assert resumed_line(report, older) == ("finished the build started at 2026-01-01T10:00:00+00:00, which was "
                                           "killed: search now has what it had built")


def test_the_next_build_quotes_the_recorded_cause_not_a_cut_of_the_line(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The resumed line took the failure's cause by cutting the recorded error at '; free space there' (session
    48): an error worded otherwise was quoted whole, advice and all. The build now records the cause
    (StorageProblem.cause) beside the line, and the resumed line quotes that; status's JSON keeps {"error", "at"}."""
    from pipeline.common.errors import StorageProblem, storage_problem

    problem = storage_problem(sqlite3.OperationalError("database or disk is full"), dagster_home="/d/dagster")
    assert problem == StorageProblem("Dagster's run storage in DAGSTER_HOME /d/dagster", "no space left on the device")
    assert problem.cause == "cannot write Dagster's run storage in DAGSTER_HOME /d/dagster: no space left on the device"
    assert problem.line == (
        "cannot write Dagster's run storage in DAGSTER_HOME /d/dagster: no space left on the device; free space "
        "there (or make it writable) and run the command again: what the last build published still serves search")
    s = _settings(tmp_path)
    record_build_failure(s, "cannot write /d/x: no space left on the device; then build again", cause="cannot write "
                         "/d/x: no space left on the device")
    failed = build_failure(s)
    report = BuildReport(sources=[], shared_ok=True, resumed=["2026-01-01T10:00:00+00:00"])
    assert resumed_line(report, failed) == (
        "finished the build started at 2026-01-01T10:00:00+00:00, which stopped on a full or failing disk (cannot "
        "write /d/x: no space left on the device): search now has what it had built")
    assert set(status_data(s)["build_failed"]) == {"error", "at"}
