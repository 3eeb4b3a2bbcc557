"""A source whose vault stage fails keeps serving its notes as built (the warehouse's ``_with_notes_as_built``)."""

from __future__ import annotations

from pathlib import Path

import duckdb
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings

runner = CliRunner()


def _vault_paths(warehouse: Path) -> list[str]:
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        return [r[0] for r in con.execute("SELECT vault_path FROM notes ORDER BY vault_path").fetchall()]
    finally:
        con.close()


def test_a_vault_folder_replaced_by_a_symlink_keeps_its_notes_in_search(built_tiny_env: Path) -> None:
    """A user moved vault/tiny/sub elsewhere and linked it back (a synced folder). The source's vault stage fails
    ("resolves outside vault/tiny/ (a symlink?); remove the link") and the build says its last good copy keeps
    serving search; but the warehouse, published from what the vault gave back, dropped the folder's notes
    (session 48: 36 notes became 33). They are served as built until the link is removed."""
    s = Settings.from_env()
    before = _vault_paths(s.warehouse_path)
    assert "tiny/sub/Parquet files.md" in before
    moved = built_tiny_env / "elsewhere"
    (s.vault_dir / "tiny" / "sub").rename(moved)
    (s.vault_dir / "tiny" / "sub").symlink_to(moved, target_is_directory=True)
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 2
    assert ("failed at vault: source 'tiny': note path 'sub/Parquet files.md' resolves outside vault/tiny/ (a "
            "symlink?); remove the link") in result.output
    assert _vault_paths(s.warehouse_path) == before
    (s.vault_dir / "tiny" / "sub").unlink()                   # the link removed: the build writes the folder again
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert (s.vault_dir / "tiny" / "sub" / "Parquet files.md").is_file()
    assert _vault_paths(s.warehouse_path) == before
