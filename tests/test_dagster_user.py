"""What a Dagster user of a small personal vault saw (session 37): the run's log of the vault step names the edits
it moved aside and the notes it removed, as `docsvault build` prints them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest


def _vault_step_logs(source: str) -> list[tuple[int, str]]:
    """(level, message) of the last run's ``<source>__vault`` step messages that start with ``source '<source>'``."""
    import dagster as dg

    instance = dg.DagsterInstance.get()
    (run,) = instance.get_runs(limit=1)
    return [(e.level, e.user_message) for e in instance.all_logs(run.run_id)
            if e.step_key == f"{source}__vault" and (e.user_message or "").startswith(f"source '{source}': ")]


def test_a_dagster_run_logs_the_edits_it_moved_aside_and_the_notes_it_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app
    from tests.conftest import _tiny_setenv

    root = tmp_path / "me"
    root.mkdir()
    (root / "Home.md").write_text("# Home\n\n私のメモ。\n", encoding="utf-8")
    (root / "Old.md").write_text("# Old\n\nsoon gone\n", encoding="utf-8")
    (tmp_path / "sources.yaml").write_text(f"sources:\n  - name: me\n    kind: local\n    path: {root}\n",
                                           encoding="utf-8")
    _tiny_setenv(tmp_path, monkeypatch)
    assert CliRunner().invoke(app, ["build"]).exit_code == 0
    assert _vault_step_logs("me") == []
    home = tmp_path / "vault" / "me" / "Home.md"
    home.write_text(home.read_text(encoding="utf-8") + "vault で追記した行\n", encoding="utf-8")
    (root / "Old.md").unlink()
    (root / "Home.md").write_text("# Home\n\n私のメモ。更新。\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    # `docsvault build` names them once, in its table (the run's log is not repeated on stderr)
    assert [ln for ln in result.stdout.splitlines() if ln.startswith("  me: ")] == [
        "  me: vault/me/Home.md was edited since the build wrote it: your version is kept as vault/me/Home (edited).md",
        "  me: removed (their pages left the source): Old.md"]
    assert result.stderr == ""
    assert "vault で追記した行" in (tmp_path / "vault" / "me" / "Home (edited).md").read_text(encoding="utf-8")
    assert _vault_step_logs("me") == [
        (logging.WARNING, "source 'me': vault/me/Home.md was edited since the build wrote it: your version is kept "
                          "as vault/me/Home (edited).md"),
        (logging.INFO, "source 'me': removed from vault/me/ (their pages left the source): Old.md"),
    ]
