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
        (logging.WARNING, ("source 'me': vault/me/Home.md was edited since the build wrote it: your version is "
                           "kept as vault/me/Home (edited).md")),
        (logging.INFO, "source 'me': removed from vault/me/ (their pages left the source): Old.md"),
    ]


def test_read_says_when_the_links_heading_is_not_in_the_note(built_tiny_env: Path) -> None:
    """`read 'Home#Nowhere'` showed page 1 as if it held the heading (left open in session 36)."""
    import json

    from typer.testing import CliRunner

    from pipeline.cli import app

    line = "heading 'Nowhere' not found in 'Home' (tiny/Home.md); showing page 1; its headings: 'Home'"
    result = CliRunner().invoke(app, ["read", "Home#Nowhere"])
    assert (result.exit_code, result.stderr) == (0, f"warning: {line}\n")
    assert result.stdout.startswith("tiny/Home.md — Home (page 1/1)\n")
    result = CliRunner().invoke(app, ["read", "[[Home#Nowhere|x]]", "--json"])
    assert json.loads(result.stdout)["warning"] == line
    result = CliRunner().invoke(app, ["read", "Home#Home"])
    assert (result.exit_code, result.stderr) == (0, "")
    from pipeline.config import Settings
    from pipeline.mcp_server import VaultService

    assert VaultService(Settings.from_env()).read("Home#Nowhere")["warning"] == line     # the MCP read tool


def test_related_is_a_command_as_it_is_an_mcp_tool(built_tiny_env: Path) -> None:
    """`docsvault related NOTE` was "No such command 'related'. Did you mean 'read'?": only the MCP server had it.
    It gives the MCP tool's rows (the same service function), one line each, or the tool's object with --json."""
    import json

    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.config import Settings
    from pipeline.mcp_server import VaultService

    result = CliRunner().invoke(app, ["related", "Home", "--json", "-k", "3"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out == VaultService(Settings.from_env()).related("Home", 3)
    assert out["path"] == "tiny/Home.md" and {r["path"] for r in out["related"]} >= {"tiny/Ducks.md"}
    result = CliRunner().invoke(app, ["related", "Home", "-k", "3"])
    lines = result.stdout.splitlines()
    assert lines[0] == "related to tiny/Home.md:"
    first = out["related"][0]
    assert lines[1] == (f" 1. {first['score']:.3f}  {first['path']} — {first['title']} ({first['hops']} hop"
                        f"{'' if first['hops'] == 1 else 's'}, link weight {first['link_weight']}, similarity "
                        f"{first['similarity']})")
    assert len(lines) == 1 + len(out["related"])
    result = CliRunner().invoke(app, ["related", "Nowhere"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no note 'Nowhere': ")


def test_make_runs_dagster_on_the_instance_of_the_data_dir_docsvault_uses(tmp_path: Path) -> None:
    """With DOCSVAULT_DATA exported (README "Start"), `make ui` ran Dagster on <checkout>/data/dagster while
    `docsvault build` recorded into $DOCSVAULT_DATA/dagster: two instances, and a second daemon over one data dir."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "DOCSVAULT_DATA", "DATA")}

    def home(**extra: str) -> str:
        out = subprocess.run(["make", "-s", "-f", "Makefile", "-f", "-", "print-home"], cwd=repo, env={**env, **extra},
                             input="print-home: ; @echo $(DAGSTER_HOME)\n", capture_output=True, text=True, check=True)
        return out.stdout.strip()

    assert home(DOCSVAULT_DATA=str(tmp_path / "d")) == f"{tmp_path}/d/dagster"
    assert home() == f"{repo}/data/dagster"
    assert home(DOCSVAULT_DATA=str(tmp_path / "d"), DAGSTER_HOME="/elsewhere") == "/elsewhere"
    for page, count in (("README.md", 1), ("docs/reference/dagster.md", 2)):     # the README's commands, the page's two
        text = (repo / page).read_text(encoding="utf-8")
        assert "DAGSTER_HOME=$PWD/data/dagster" not in text
        assert text.count("DAGSTER_HOME=${DOCSVAULT_DATA:-$PWD/data}/dagster") == count, page


def test_make_ui_takes_another_port() -> None:
    """`make ui` had port 3000 fixed: when it was taken, docsvault said to pass --port, which make gave no way to
    (session 43); `make ui UI_PORT=N` now passes it."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("UI_PORT", "MAKEFLAGS", "MAKELEVEL")}

    def ui_line(*args: str) -> str:
        out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "ui", *args], cwd=repo, env=env,
                             capture_output=True, text=True, check=True)
        return next(line for line in out.stdout.splitlines() if " ui --port" in line)

    assert ui_line().endswith("/docsvault ui --port 3000")
    assert ui_line("UI_PORT=3743").endswith("/docsvault ui --port 3743")


def test_a_build_after_an_upgrade_says_which_stages_another_version_built(
        built_tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an upgrade of docsvault, `docsvault build` redid the stages whose code changed and said only
    "4 notes re-chunked", not why, while the sensor's run said "chunks last built by other code than this
    version's (an upgrade)" (found by an operator upgrading a data folder built 80 commits earlier, session 41). The
    build now names those stages in one line before its table; a build after it has nothing to say."""
    import dagster as dg
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.config import Settings
    from pipeline.defs.runner import run_build
    from pipeline.stages.results import BuildReport

    instance = dg.DagsterInstance.get()
    for asset in (["tiny", "chunks"], ["warehouse"]):      # last materialized by an older version of the code
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=dg.AssetKey(asset), tags={"dagster/code_version": "older"}))
    instance.report_runless_asset_event(dg.AssetMaterialization(
        asset_key=dg.AssetKey(["retrieval_eval"]), tags={"dagster/code_version": "older"}))
    # a build without the eval (a capture's) does not name it: it does not run it (session 42)
    report = run_build(Settings.from_env(), evaluate=False)
    assert report.ok and report.upgraded == ["tiny: chunks", "warehouse"]
    report = run_build(Settings.from_env())
    assert report.ok and report.upgraded == ["retrieval_eval"]
    assert run_build(Settings.from_env()).upgraded == []          # rebuilt by this version: nothing to say

    monkeypatch.setattr("pipeline.cli.noop_build", lambda *a, **k: BuildReport(
        sources=[], shared_ok=True, upgraded=["tiny: notes, vault, chunks", "link_graph, warehouse"]))
    result = CliRunner().invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (
        "upgrade: stages last built by another version of docsvault run again: tiny: notes, vault, chunks; "
        "link_graph, warehouse (only what their new code changes is rewritten; cached embeddings of unchanged text "
        "are reused)")


def test_a_capture_after_an_upgrade_says_which_stages_another_version_built(
        built_tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user who upgraded docsvault and captured a note before any build (session 44, from a data dir of
    session 41) waited for its source's stages and the warehouse to be redone, and capture said only
    "searchable now": the build's `upgrade:` line was left out. It is printed now (`build.upgraded` in --json)."""
    import json

    import dagster as dg
    from typer.testing import CliRunner

    from pipeline.cli import app

    instance = dg.DagsterInstance.get()
    for asset in (["tiny", "chunks"], ["warehouse"], ["retrieval_eval"]):   # last built by an older version
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=dg.AssetKey(asset), tags={"dagster/code_version": "older"}))
    monkeypatch.setenv("DOCSVAULT_CAPTURE_SOURCE", "tiny")
    result = CliRunner().invoke(app, ["capture", "--title", "Herons", "Herons stand still in shallow water."])
    assert result.exit_code == 0, result.output
    upgrade = ("  upgrade: stages last built by another version of docsvault run again: tiny: chunks; warehouse (only "
               "what their new code changes is rewritten; cached embeddings of unchanged text are reused)")
    assert result.stdout.splitlines()[-2:] == [upgrade, "  searchable now: source tiny rebuilt"]

    result = CliRunner().invoke(app, ["capture", "--json", "--title", "Egrets", "Egrets are white herons."])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["build"]["upgraded"] == []      # rebuilt by this version: nothing to say
