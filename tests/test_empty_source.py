"""An emptied local source builds as an empty source; a missing folder is an error that keeps the last good copy;
skipped files show in status; MCP refresh reports every source's outcome."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings

runner = CliRunner()


def _run(*args: str, code: int = 0) -> tuple[str, str]:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.stdout, result.stderr


def test_emptied_folder_builds_empty_and_missing_folder_keeps_the_last_copy(tiny_env: Path) -> None:
    folder = tiny_env / "tinyvault"
    (folder / "Blank.md").write_text("", encoding="utf-8")          # an empty file: skipped, with its reason
    _run("build")
    row = json.loads(_run("status", "--json")[0])["sources"][0]
    assert (row["notes"], row["skipped_files"], row["fetch_status"]) == (5, 1, "ok")
    errors = tiny_env / "data" / "state" / "tiny.errors.txt"
    lines = _run("status")[0].splitlines()
    assert lines[1:4] == [
        "  name                     kind      notes  chunks skipped  fetch   last fetch",
        f"  tiny                     local         5       5       1  ok      {row['last_fetch']}",
        f"  tiny: 1 file(s) skipped, each with its reason in {errors}",
    ]

    skipped = ("error: tiny/Blank.md is not in the vault: the last build skipped it (empty file (no text); add "
               "content or exclude it)\n")
    assert runner.invoke(app, ["read", "Blank.md"]).output == skipped           # a source path, or a vault path
    assert runner.invoke(app, ["read", "tiny/Blank.md"]).output == skipped
    assert runner.invoke(app, ["read", "Blank"]).output == skipped                # a name, as a wikilink gives it
    assert runner.invoke(app, ["read", "tiny/Blank"]).output == skipped
    from pipeline.mcp_server import ToolFailure, VaultService

    try:
        VaultService(Settings.from_env()).read("tiny/Blank.md")
    except ToolFailure as exc:
        assert str(exc) == skipped[len("error: "):-1]
    else:
        raise AssertionError("reading a skipped note must be a tool error")

    # a missing folder (unmounted drive, renamed folder): an error, the last good copy keeps serving
    moved = tiny_env / "moved"
    folder.rename(moved)
    out, _ = _run("build", code=2)
    assert (f"tiny                     failed         -       -         -  failed at raw_docs: source 'tiny': local "
            f"path {folder} does not exist or is not a folder; fix 'path' in sources.yaml") in out.splitlines()
    assert _run("search", "water bird in the pond", "--files", "-k", "1")[0].startswith("tiny/Ducks.md\t")
    row = json.loads(_run("status", "--json")[0])["sources"][0]
    assert (row["notes"], row["fetch_status"]) == (5, "failed")
    assert row["fetch_error"].startswith(f"source 'tiny': local path {folder} does not exist")
    assert f"  tiny: last fetch failed: {row['fetch_error']}; its last good copy (5 notes) still serves search" \
        in _run("status")[0].splitlines()

    # the folder back, every note deleted: an empty source, exit 0, one warning
    moved.rename(folder)
    for note in folder.rglob("*.md"):
        note.unlink()
    out, err = _run("build")
    assert err == (f"warning: source 'tiny' has no notes: no files match under {folder} "
                   "(include=default *.md/*.mdx/*.markdown/*.canvas, exclude=[])\n")
    assert out.splitlines()[1] == "tiny                     built          0       0         0  0 written, 6 removed"
    assert out.splitlines()[2] == ("  tiny: removed (their pages left the source): Ducks.md, Home.md, Install guide.md, "
                                   "_index.md, ja/検索.md and 1 more")
    assert out.splitlines()[3].startswith("warehouse: 0 notes, 0 chunks -> ")
    assert _run("search", "ducks", code=1)[0] == "No results: no note contains 'ducks'\n"     # exit 1 as grep
    assert VaultService(Settings.from_env()).search("ducks") == {
        "query": "ducks", "hits": [], "message": "No results: no note contains 'ducks'", "missing": ["ducks"]}
    assert list((tiny_env / "vault").rglob("*.md")) == []
    row = json.loads(_run("status", "--json")[0])["sources"][0]
    assert (row["notes"], row["chunks"], row["skipped_files"], row["fetch_status"]) == (0, 0, 0, "ok")


def test_a_name_several_notes_share_lists_them_even_when_a_skipped_file_has_it(tiny_env: Path) -> None:
    folder = tiny_env / "tinyvault"
    (folder / "Blank.md").write_text("", encoding="utf-8")          # skipped: empty
    for sub in ("a", "b"):
        (folder / sub).mkdir()
        (folder / sub / "Blank.md").write_text(f"# Blank {sub}\n\nNot blank at all.\n", encoding="utf-8")
    _run("build")
    several = ("error: 'Blank' is the name of several notes; give one of the vault paths: tiny/a/Blank.md, "
               "tiny/b/Blank.md\n")
    assert runner.invoke(app, ["read", "Blank"]).output == several
    from pipeline.mcp_server import ToolFailure, VaultService

    with pytest.raises(ToolFailure) as failure:                                   # the MCP read tool says the same
        VaultService(Settings.from_env()).read("Blank")
    assert str(failure.value) == several[len("error: "):-1]
    assert runner.invoke(app, ["read", "tiny/Blank"]).output == (
        "error: tiny/Blank.md is not in the vault: the last build skipped it (empty file (no text); add content or "
        "exclude it)\n")
    assert runner.invoke(app, ["read", "tiny/a/"]).output.startswith("error: no note 'tiny/a/'")


def test_a_new_empty_folder_builds_empty_and_leaves_with_its_folder(tiny_env: Path) -> None:
    """A `local` source whose folder never held a note: its first build succeeds (0 notes, one warning, exit 0),
    like a source that lost its last note; dropped from sources.yaml, its vault folder goes."""
    folder = tiny_env / "diary"
    folder.mkdir()
    sources = tiny_env / "sources.yaml"
    tiny = sources.read_text(encoding="utf-8")
    sources.write_text(f"sources:\n  - name: diary\n    kind: local\n    path: {folder}\n", encoding="utf-8")
    out, err = _run("build")
    assert err == (f"warning: source 'diary' has no notes: no files match under {folder} "
                   "(include=default *.md/*.mdx/*.markdown/*.canvas, exclude=[])\n")
    assert out.splitlines()[:3] == [
        "source                   status     notes  chunks  embedded  detail",
        "diary                    built          0       0         0  0 written, 0 removed",
        f"warehouse: 0 notes, 0 chunks -> {tiny_env / 'data' / 'warehouse.duckdb'} (written in full (no warehouse "
        "yet))"]
    vault = tiny_env / "vault"
    assert sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*")) == [
        "diary", "diary/.docsvault", "diary/.docsvault/manifest.json"]
    state = json.loads((tiny_env / "data" / "state" / "diary.json").read_text(encoding="utf-8"))
    assert (state["failed_stages"], state.get("last_error"), state["vault_notes"]) == ({}, None, 0)
    row = json.loads(_run("status", "--json")[0])["sources"][0]
    assert (row["name"], row["notes"], row["chunks"], row["skipped_files"], row["fetch_status"], row["fetch_error"],
            row["last_error"]) == ("diary", 0, 0, 0, "ok", None, None)
    lines = _run("status")[0].splitlines()
    assert lines[2] == f"  diary                    local         0       0       0  ok      {row['last_fetch']}"
    assert not [ln for ln in lines if "failed" in ln]
    assert _run("search", "ducks", code=1)[0] == "No results: no note contains 'ducks'\n"     # exit 1 as grep
    again = json.loads(_run("build", "--json")[0])
    assert [(s["name"], s["status"], s["notes"]) for s in again["sources"]] == [("diary", "unchanged", 0)]

    sources.write_text(tiny, encoding="utf-8")                        # diary leaves sources.yaml
    out, _ = _run("build")
    assert out.splitlines()[0] == "removed vault/diary/: source 'diary' is no longer in sources.yaml"
    assert sorted(p.name for p in vault.iterdir()) == ["tiny"]
    assert sorted(p.name for p in (tiny_env / "data" / "state").glob("diary*")) == []


def test_refresh_without_source_reports_every_outcome(tiny_env: Path, tmp_path: Path) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    other = tmp_path / "othervault"
    other.mkdir()
    (other / "Heron.md").write_text("# Heron\n\nA heron stands still in shallow water.\n", encoding="utf-8")
    sources = tiny_env / "sources.yaml"
    sources.write_text(sources.read_text(encoding="utf-8")
                       + f"  - name: other\n    kind: local\n    path: {other}\n", encoding="utf-8")
    svc = VaultService(Settings.from_env())
    first = svc.refresh()
    assert first["ok"] is True
    assert [(o["name"], o["status"]) for o in first["outcomes"]] == [("tiny", "built"), ("other", "built")]
    assert first["shared"]["ok"] is True and first["shared"]["warehouse"]["notes"] == 5 + 1

    (other / "Heron.md").unlink()
    other.rmdir()
    (tiny_env / "tinyvault" / "Ducks.md").write_text("# Ducks\n\nDucks quack loudly.\n", encoding="utf-8")
    report = svc.refresh()
    assert report["ok"] is False
    assert report["outcomes"] == [
        {"name": "tiny", "status": "built", "notes": 5, "skipped_files": 0, "warning": None, "failed_stage": None,
         "error": None},
        {"name": "other", "status": "failed", "notes": None, "skipped_files": 0, "warning": None,
         "failed_stage": "raw_docs",
         "error": f"source 'other': local path {other} does not exist or is not a folder; fix 'path' in sources.yaml"},
    ]
    assert report["shared"]["ok"] is True and report["shared"]["error"] is None
    assert report["changed"] == ["tiny/Ducks.md"]
    assert [h["path"] for h in svc.search("heron shallow water", k=1)["hits"]] == ["other/Heron.md"]  # last copy

    try:
        svc.refresh("other")
    except ToolFailure as exc:
        assert str(exc) == (f"refresh failed: other: failed at raw_docs: source 'other': local path {other} does "
                            "not exist or is not a folder; fix 'path' in sources.yaml; the last good copy keeps "
                            "serving search")
    else:
        raise AssertionError("refresh of a failing source alone must be a tool error")


def test_a_note_that_breaks_keeps_its_last_good_version(tiny_env: Path) -> None:
    """One frontmatter typo must not delete a page: the last good note stays in vault and search, the error says
    so; fixing the file updates the note; deleting the file removes it."""
    runner = CliRunner()
    home = tiny_env / "tinyvault" / "Home.md"
    _build_lists_three_skipped_files_and_says_how_many_more(tiny_env)      # the first build (one for both)
    for blank in (tiny_env / "tinyvault").glob("Blank *.md"):
        blank.unlink()
    from pipeline.common import artifacts

    settings = Settings.from_env()          # and a vault stage whose last run failed, in a folder with a note of yours
    (settings.vault_dir / "tiny" / "My own thoughts.md").write_text("Written in Obsidian.\n", encoding="utf-8")
    artifacts.update_state(settings, "tiny", failed_stages={"vault": "source 'tiny': disk full"})
    home.write_text("---\ntitle: Home\ntags: [start\n---\n# Home\n\nWelcome back.\n", encoding="utf-8")
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert artifacts.load_state(settings, "tiny")["failed_stages"] == {}      # the recovered vault stage is cleared
    assert (settings.vault_dir / "tiny" / "My own thoughts.md").read_text(encoding="utf-8") == "Written in Obsidian.\n"
    assert "its last good version stays in the vault and search until the file is fixed" in result.output
    kept = "warning: source 'tiny': 1 file(s) failed to normalize; serving their last good version: Home.md"
    assert kept in result.stderr.splitlines()           # a warning: line as the others (it had no prefix)
    again = runner.invoke(app, ["build"])               # nothing normalized: the warning was that run's
    assert "no Dagster run was needed" in again.stdout and "failed to normalize" not in again.output
    vault_home = tiny_env / "vault" / "tiny" / "Home.md"
    assert "Welcome. See [[Install guide]]" in vault_home.read_text(encoding="utf-8")
    files = runner.invoke(app, ["search", "welcome", "--files", "-k", "1"]).output
    assert files.startswith("tiny/Home.md\t")
    errors = (tiny_env / "data" / "state" / "tiny.errors.txt").read_text(encoding="utf-8")
    assert "Home.md: line 3: invalid YAML frontmatter" in errors and "last good version" in errors

    home.write_text("---\ntitle: Home\n---\n# Home\n\nWelcome back.\n", encoding="utf-8")
    assert runner.invoke(app, ["build"]).exit_code == 0
    assert "Welcome back." in vault_home.read_text(encoding="utf-8")
    home.unlink()
    assert runner.invoke(app, ["build"]).exit_code == 0
    assert not vault_home.exists()


def _build_lists_three_skipped_files_and_says_how_many_more(tiny_env: Path) -> None:
    folder = tiny_env / "tinyvault"
    for name in ("A", "B", "C", "D"):
        (folder / f"Blank {name}.md").write_text("", encoding="utf-8")
    out, _ = _run("build")
    errors = tiny_env / "data" / "state" / "tiny.errors.txt"
    lines = out.splitlines()
    at = lines.index(f"  tiny: 4 file(s) skipped, each with its reason in {errors}")
    assert len([line for line in lines[at + 1:at + 4] if line.startswith("    ")]) == 3
    assert lines[at + 4] == f"    … and 1 more (see {errors})"


def test_a_refresh_stopped_at_its_timeout_says_what_the_build_waited_for(tiny_env: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # the child build waits for a pool a killed run holds: its warning line, not only "took longer", reaches the agent
    import subprocess
    import sys

    from pipeline import mcp_server
    from pipeline.mcp_server import ToolFailure, VaultService

    real = subprocess.Popen
    waiting = ("import sys, time; print('progress: fetch tiny', file=sys.stderr); print('warning: pool "
               "docsvault_source_tiny is held by run 87cd9b08 (STARTED, step tiny__raw_docs)', file=sys.stderr, "
               "flush=True); time.sleep(60)")
    monkeypatch.setattr(mcp_server.subprocess, "Popen",
                        lambda cmd, **kw: real([sys.executable, "-c", waiting], **kw))
    with pytest.raises(ToolFailure) as err:
        VaultService(Settings.from_env(), refresh_timeout=1.5).refresh()
    assert str(err.value) == (
        "refresh of tiny took longer than 1.5 s and was stopped; the previous index still serves. The build's last "
        "warning: pool docsvault_source_tiny is held by run 87cd9b08 (STARTED, step tiny__raw_docs). Run "
        "`docsvault build --source tiny` in a terminal")


def test_a_folder_with_nothing_in_it_keeps_the_last_copy_as_an_unmounted_drive(tiny_env: Path) -> None:
    """A mount point whose drive is not mounted is an empty folder: the build fails the source and keeps its notes;
    a folder that still holds anything (here a dot-file) is mounted and builds as an empty source."""
    import shutil

    folder = tiny_env / "tinyvault"
    _run("build")
    shutil.rmtree(folder)
    folder.mkdir()                                                   # the bare mount point
    out, _ = _run("build", code=2)
    assert (f"tiny                     failed         -       -         -  failed at raw_docs: source 'tiny': local "
            f"path {folder} is empty (nothing in it at all) but held 5 file(s) at the last fetch; is its drive or "
            "share unmounted? Its notes keep serving search; if you emptied it on purpose, remove the source from "
            "sources.yaml, or put any file in the folder (e.g. .keep) and build again") in out.splitlines()
    assert _run("search", "water bird in the pond", "--files", "-k", "1")[0].startswith("tiny/Ducks.md\t")
    assert len(list((tiny_env / "vault" / "tiny").rglob("*.md"))) == 6
    _run("build", code=2)                                            # still refused on the next build

    (folder / ".keep").write_text("", encoding="utf-8")
    out, err = _run("build")
    assert err == (f"warning: source 'tiny' has no notes: no files match under {folder} "
                   "(include=default *.md/*.mdx/*.markdown/*.canvas, exclude=[])\n")
    assert out.splitlines()[1] == "tiny                     built          0       0         0  0 written, 6 removed"
    assert _run("search", "ducks", code=1)[0] == "No results: no note contains 'ducks'\n"
