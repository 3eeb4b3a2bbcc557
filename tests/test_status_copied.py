"""`docsvault status` on a reader host (docs/deploy.md: the warehouse and vault copied to a machine that did not build
them): the sources it never fetched are `copied`, with their last fetch where the warehouse was built and one line
naming that host, data dir and build time; before, they showed `never` and no last fetch."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app

runner = CliRunner()


def _reader(built: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recipe's reader: the vault and warehouse.duckdb copied into a data dir of their own, nothing else."""
    (root / "data").mkdir(parents=True)
    shutil.copytree(built / "vault", root / "vault")
    shutil.copy2(built / "data" / "warehouse.duckdb", root / "data" / "warehouse.duckdb")
    monkeypatch.setenv("DOCSVAULT_DATA", str(root / "data"))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(root / "vault"))
    monkeypatch.setenv("DAGSTER_HOME", str(root / "dagster"))
    return root


def _status() -> tuple[dict, list[str]]:
    result = runner.invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    text = runner.invoke(app, ["status"])
    assert text.exit_code == 0, text.output
    return json.loads(result.output), text.output.splitlines()


def test_status_on_a_reader_host_says_the_warehouse_was_copied(built_tiny_env: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    builder, _ = _status()
    host = socket.gethostname()
    fetched = builder["sources"][0]["last_fetch"]
    assert builder["sources"][0]["fetch_status"] == "ok" and fetched
    assert (builder["warehouse"]["built_on"], builder["warehouse"]["built_data_dir"]) == (
        host, str(built_tiny_env / "data"))
    _reader(built_tiny_env, tmp_path / "reader", monkeypatch)
    assert f"warehouse was built on this host in {built_tiny_env / 'data'} at " in _status()[1][3]   # copied here
    monkeypatch.setattr(socket, "gethostname", lambda: "reader-1")            # the reader is another host
    data, lines = _status()
    row = data["sources"][0]
    assert (row["name"], row["notes"], row["fetch_status"], row["last_fetch"]) == ("tiny", 5, "copied", fetched)
    built_at = data["warehouse"]["built_at"]
    assert lines[2:4] == [
        f"  tiny                     local         5       5       0  copied  {fetched}",
        (f"  tiny: not fetched in this data dir: the warehouse was built on host {host} in "
         f"{built_tiny_env / 'data'} at {built_at} and copied here (last fetch: there); build them there and copy it "
         "again to update them")]


def test_a_copied_warehouse_that_does_not_record_its_host(built_tiny_env: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A warehouse published before it recorded where: still `copied`, its host unknown, no last fetch."""
    import duckdb

    root = _reader(built_tiny_env, tmp_path / "reader", monkeypatch)
    con = duckdb.connect(str(root / "data" / "warehouse.duckdb"))
    con.execute("DELETE FROM meta WHERE key IN ('built_on', 'built_data_dir', 'fetched_at')")
    con.close()
    data, lines = _status()
    assert (data["sources"][0]["fetch_status"], data["sources"][0]["last_fetch"]) == ("copied", None)
    assert lines[2:4] == [
        "  tiny                     local         5       5       0  copied  -",
        ("  tiny: not fetched in this data dir: the warehouse was built on another host or data dir (this warehouse "
         f"does not record which) at {data['warehouse']['built_at']} and copied here (last fetch: there); build them "
         "there and copy it again to update them")]


def test_a_source_never_built_anywhere_is_still_never(tiny_env: Path) -> None:
    data, lines = _status()
    assert (data["sources"][0]["fetch_status"], data["sources"][0]["last_fetch"]) == ("never", None)
    assert not any("not fetched in this data dir" in line for line in lines)
