"""`docsvault status` says when the warehouse does not serve what the data dir built: after a Dagster run of one
source's assets without `warehouse` (the README's partial selection, `dagster asset materialize --select
'group:<source>'`) it is behind the vault, and after a publish over a source whose embeddings step did not finish
(a run terminated in the UI while another run published) some chunks have no vector. Before, status showed the
counts as if search served the vault (an operator found both, session 40)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.defs import build_definitions

runner = CliRunner()

BEHIND = ("  behind: what it is published from changed since (notes or chunks built here by a Dagster run of some "
          "sources' assets without `warehouse` or one stopped before it, another version of docsvault, files copied "
          "without their times); search may not see those changes until `docsvault build` publishes it again")


def _status() -> tuple[dict, list[str]]:
    data = runner.invoke(app, ["status", "--json"])
    text = runner.invoke(app, ["status"])
    assert (data.exit_code, text.exit_code) == (0, 0), text.output
    return json.loads(data.output)["warehouse"], text.output.splitlines()


def _materialize(*keys: str) -> None:
    job = build_definitions(Settings.from_env()).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(asset_selection=[dg.AssetKey(k.split("/")) for k in keys],
                                    instance=dg.DagsterInstance.ephemeral())
    assert result.success


def test_status_says_the_warehouse_is_behind_or_lacks_vectors(built_tiny_env: Path) -> None:
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["missing_vectors_in"]) == (False, "")
    assert not [line for line in lines if "behind" in line or "without a vector" in line]

    with (built_tiny_env / "tinyvault" / "Ducks.md").open("a", encoding="utf-8") as f:
        f.write("\n## Geese\n\nGeese honk loudly at dawn.\n")
    _materialize("tiny/raw_docs", "tiny/notes", "tiny/vault", "tiny/chunks")      # no embeddings, no warehouse
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["missing_vectors_in"]) == (True, "")
    assert BEHIND in lines

    _materialize("link_graph", "warehouse")           # published over chunks whose embeddings step never ran
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["missing_vectors_in"]) == (False, "tiny 1 of 5")
    assert ("  chunks without a vector (their embeddings step did not finish): tiny 1 of 5; keyword search finds "
            "them, the vector lanes do not until `docsvault build --source <name>` embeds them") in lines
    assert BEHIND not in lines

    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["missing_vectors_in"]) == (False, "")
    assert not [line for line in lines if "behind" in line or "without a vector" in line]


def test_status_says_behind_after_a_run_stopped_between_a_source_s_fetch_and_its_embeddings(
        built_tiny_env: Path) -> None:
    """A run terminated in the UI after a source's `notes` (or one that failed or was killed before its vault)
    changed nothing the warehouse is published from (vault listing, chunks), so status said `behind: false` and
    `fetch ok` while the sensor's tick said the run "was terminated before it published" and search lacked the
    edit (a new user, session 43)."""
    with (built_tiny_env / "tinyvault" / "Ducks.md").open("a", encoding="utf-8") as f:
        f.write("\n## Swans\n\nSwans glide in pairs.\n")
    _materialize("tiny/raw_docs", "tiny/notes")                  # stopped before tiny/vault
    warehouse, lines = _status()
    assert warehouse["behind"] is True
    assert BEHIND in lines
    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, lines = _status()
    assert warehouse["behind"] is False
    assert BEHIND not in lines


def test_status_names_a_source_the_warehouse_serves_that_sources_yaml_no_longer_lists(built_tiny_env: Path) -> None:
    """A review finding (session 40): with a source removed from sources.yaml, status listed only the others, said
    `behind` with causes that were not it (a Dagster run without `warehouse`, another version, copied files), and
    nothing said that search still served the removed source's notes. It names it now, until a build removes it."""
    other = built_tiny_env / "other"
    other.mkdir()
    (other / "Geese.md").write_text("# Geese\n\nGeese honk.\n", encoding="utf-8")
    listed = (built_tiny_env / "sources.yaml").read_text(encoding="utf-8")
    (built_tiny_env / "sources.yaml").write_text(
        listed + f"  - name: other\n    kind: local\n    path: {other}\n    format: obsidian\n", encoding="utf-8")
    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, _ = _status()
    assert (warehouse["behind"], warehouse["not_in_sources"]) == (False, [])

    (built_tiny_env / "sources.yaml").write_text(listed, encoding="utf-8")
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["not_in_sources"]) == (True, ["other"])
    assert ("  serves a source no longer in sources.yaml: other; search finds its notes until "
            "`docsvault build` removes it") in lines
    assert BEHIND not in lines                  # the line above says why

    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["not_in_sources"]) == (False, [])
    assert not [line for line in lines if "no longer in sources.yaml" in line or "behind" in line]


def test_status_names_a_publish_that_failed_until_one_succeeds(built_tiny_env: Path, monkeypatch) -> None:
    """An operator's unattended run failed at its warehouse step (a full disk, session 43): `status` gave only the
    `behind` line, whose causes were not it, and nothing said the last publish had failed. The failure is now
    recorded (`publish_failed` in status --json, one line in status) until a warehouse step succeeds."""
    import errno

    from pipeline.stages import warehouse as stage

    publish = stage.publish_stage

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/d/cache/bm25/tokens.marshal")

    with (built_tiny_env / "tinyvault" / "Ducks.md").open("a", encoding="utf-8") as f:
        f.write("\n## Geese\n\nGeese honk loudly at dawn.\n")
    monkeypatch.setattr(stage, "publish_stage", full)
    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 2
    warehouse, lines = _status()
    error = ("cannot write /d/cache/bm25/tokens.marshal: no space left on the device; free space there (or make it "
             "writable) and run the command again: what the last build published still serves search")
    assert (warehouse["publish_failed"]["error"], warehouse["behind"]) == (error, True)
    assert [line for line in lines if "publish" in line or "behind" in line] == [
        f"  last publish failed ({warehouse['publish_failed']['at']}): {error}"]

    def bug(*_a: object, **_k: object) -> None:
        raise RuntimeError("IO Error: Could not read\nfrom file")

    monkeypatch.setattr(stage, "publish_stage", bug)
    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 2
    warehouse, lines = _status()
    assert warehouse["publish_failed"]["error"] == "IO Error: Could not read from file"
    assert (f"  last publish failed ({warehouse['publish_failed']['at']}): IO Error: Could not read from file; "
            "search serves this file until a build publishes again") in lines

    monkeypatch.setattr(stage, "publish_stage", publish)
    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, lines = _status()
    assert (warehouse["publish_failed"], warehouse["behind"]) == (None, False)
    assert not [line for line in lines if "publish" in line or "behind" in line]


def test_a_publish_interrupted_by_ctrl_c_is_no_failed_publish(built_tiny_env: Path, monkeypatch) -> None:
    """Ctrl-C while DuckDB ran the publish's query raised DuckDB's InterruptException, which was recorded as a
    failed publish: `status` said "last publish failed (…): INTERRUPT Error: Interrupted!" until the next build,
    though an interrupted build records nothing as a failure (helper-146, session 46)."""
    import duckdb

    from pipeline.stages import warehouse as stage

    def interrupted(*_a: object, **_k: object) -> None:
        raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")

    monkeypatch.setattr(stage, "publish_stage", interrupted)
    with pytest.raises(duckdb.InterruptException):
        stage.warehouse_stage(Settings.from_env(), [], lambda spec: None)
    warehouse, lines = _status()
    assert warehouse["publish_failed"] is None
    assert not [line for line in lines if "publish" in line]


OTHER_VERSION = ("  behind: published by another version of docsvault (an upgrade or a downgrade since); search, read "
                 "and related serve it as it is until `docsvault build` runs again the stages whose code changed and "
                 "publishes it (cached embeddings of unchanged text are reused)")


def test_status_says_the_warehouse_was_published_by_another_version_after_an_upgrade(built_tiny_env: Path) -> None:
    """A user who upgraded docsvault (`git pull`, `make install`; session 44, from data dirs of sessions 34 and 41)
    got the `behind` line listing every cause it may have (a Dagster run without `warehouse`, copied files, another
    version), though the only one was the upgrade. A warehouse published before session 44 (no
    `warehouse_code_version` in its meta, an older `input_key`, as the test writes it) or by other warehouse code
    (a downgrade) now gets one line naming that cause, `other_version` in `--json`, until a build publishes it."""
    import duckdb

    from pipeline.stages.warehouse import CODE_META

    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["other_version"]) == (False, False)
    path = built_tiny_env / "data" / "warehouse.duckdb"
    assert Path(warehouse["path"]) == path

    con = duckdb.connect(str(path))                 # the meta an older docsvault wrote: no code version of its own
    con.execute("DELETE FROM meta WHERE key = ?", [CODE_META])
    con.execute("UPDATE meta SET value = 'key of the old warehouse code' WHERE key = 'input_key'")
    con.close()
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["other_version"]) == (True, True)
    assert [line for line in lines if "behind" in line] == [OTHER_VERSION]

    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["other_version"]) == (False, False)
    assert not [line for line in lines if "behind" in line]

    con = duckdb.connect(str(path))                 # a downgrade's: another code version, another key
    con.execute("UPDATE meta SET value = '0123456789abcdef' WHERE key = ?", [CODE_META])
    con.execute("UPDATE meta SET value = 'key of the other warehouse code' WHERE key = 'input_key'")
    con.close()
    warehouse, lines = _status()
    assert (warehouse["behind"], warehouse["other_version"]) == (True, True)
    assert OTHER_VERSION in lines and BEHIND not in lines


def test_a_file_of_yours_in_a_source_folder_leaves_the_warehouse_current(built_tiny_env: Path) -> None:
    """A note of your own in `vault/<source>/` (the README lets you keep files there; they are not notes of the
    source) moved the vault listing the chunk, graph and warehouse stages compare, so status said `behind` with
    causes that were none of them (a Dagster run without `warehouse`, another version, copied files) and the next
    build re-ran the link graph and published the warehouse again, unchanged (a 3,000-note vault, session 46).
    Only the notes the build wrote count; an edit of one of them still does."""
    from pipeline.stages import vault_listing

    settings = Settings.from_env()
    before = vault_listing(settings, "tiny")
    (settings.vault_dir / "tiny" / "My own note.md").write_text("# Mine\n\nNot a note of the source.\n",
                                                                encoding="utf-8")
    assert vault_listing(settings, "tiny") == before
    warehouse, lines = _status()
    assert warehouse["behind"] is False
    assert BEHIND not in lines
    assert "  tiny: 1 file(s) in vault/tiny/ that docsvault did not write are kept (never changed or removed by a " \
           "build): My own note.md" in lines

    with (settings.vault_dir / "tiny" / "Ducks.md").open("a", encoding="utf-8") as f:   # a note the build wrote
        f.write("\nedited by hand\n")
    assert vault_listing(settings, "tiny") != before


EDITED = ("  behind: generated notes of tiny were edited or deleted in the vault since the build wrote them (named "
          "above): search serves them as built, and the next build keeps each edit as '<name> (edited).md' and writes "
          "the notes again")      # the cause known: no "(else: … a Dagster run without `warehouse` …)" (s47-leftovers)


def test_status_names_a_generated_note_deleted_from_the_vault_and_why_it_is_behind(built_tiny_env: Path) -> None:
    """A generated note deleted by hand (in Obsidian) was named nowhere: status said only `behind` with causes that
    had not happened, and `read` "use a vault_path from search results" of the path search gave (session 47)."""
    (Settings.from_env().vault_dir / "tiny" / "Ducks.md").unlink()
    warehouse, lines = _status()
    assert warehouse["behind"] is True
    assert [line for line in lines if "behind" in line] == [EDITED]
    assert ("  tiny: 1 generated file(s) deleted since the last build: Ducks.md; search still serves them, and the "
            "next build writes them again") in lines
    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, lines = _status()
    assert warehouse["behind"] is False
    assert not [line for line in lines if "behind" in line or "deleted" in line]


def test_status_names_a_generated_note_edited_in_the_vault_as_why_it_is_behind(built_tiny_env: Path) -> None:
    """A line added by hand to a generated note of the vault (as a new user does in Obsidian) made status say
    `behind: what it is published from changed since (notes or chunks built here by a Dagster run …, another version
    of docsvault, files copied …)`, none of which had happened, and "search may not see those changes" of an edit
    search never serves (session 47). The line now names the edit as the cause and what the next build does."""
    note = Settings.from_env().vault_dir / "tiny" / "Ducks.md"
    with note.open("a", encoding="utf-8") as f:
        f.write("\nMy own line.\n")
    warehouse, lines = _status()
    assert warehouse["behind"] is True
    assert [line for line in lines if "behind" in line] == [EDITED]
    assert BEHIND not in lines

    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    warehouse, lines = _status()
    assert warehouse["behind"] is False
    assert not [line for line in lines if "behind" in line]
