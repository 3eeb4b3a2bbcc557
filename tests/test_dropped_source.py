"""A source removed from sources.yaml loses its generated vault folder and data files; a source's last build
failure stays visible in `status` until a build of it succeeds."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from dagster import DagsterInstance
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.models import Note, text_hash

runner = CliRunner()


def _run(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.output


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.iterdir())


def test_renamed_source_loses_its_generated_folder_only(built_tiny_env: Path) -> None:
    tiny_env = built_tiny_env                    # after a first build of every source (conftest.built_once)
    vault, data = tiny_env / "vault", tiny_env / "data"
    assert (vault / "tiny" / "Ducks.md").is_file()
    # folders docsvault did not generate: no index note / an index note without the marker / another source's
    (vault / "mine").mkdir()
    (vault / "mine" / "x.md").write_text("# mine\n", encoding="utf-8")
    (vault / "handmade").mkdir()
    (vault / "handmade" / "_index.md").write_text("---\ntitle: my index\nsource: handmade\n---\n# x\n")
    (vault / "copy").mkdir()
    (vault / "copy" / "_index.md").write_bytes((vault / "tiny" / "_index.md").read_bytes())   # source: tiny
    assert "Ducks swim" in _run("read", "tiny/Ducks.md")

    sources = tiny_env / "sources.yaml"
    sources.write_text(sources.read_text().replace("name: tiny", "name: tiny2"), encoding="utf-8")
    out = _run("build")
    assert out.splitlines()[0] == "removed vault/tiny/: source 'tiny' is no longer in sources.yaml"
    assert out.count("removed vault/") == 1
    assert _files(vault) == ["copy", "handmade", "mine", "tiny2"]
    assert (vault / "mine" / "x.md").is_file() and (vault / "handmade" / "_index.md").is_file()
    assert (vault / "tiny2" / "Ducks.md").is_file()
    assert _files(data / "state") == [".noop.json", ".removed.json", ".shared.json", "tiny2.errors.txt", "tiny2.json"]
    assert list(json.loads((data / "state" / ".removed.json").read_text())) == ["tiny"]     # when: for the sensor
    assert _files(data / "notes") == ["tiny2.jsonl", "tiny2.names.json"]     # tiny's names cache went too
    assert _files(data / "chunks") == ["tiny2.jsonl", "tiny2.notes.json"]
    assert _files(data / "raw") == ["tiny2"]
    assert sorted(p.name for p in (data / "graph").glob("dangling-*")) == ["dangling-tiny2.json"]
    assert list((data / "cache").rglob("shard-*.npz"))          # the embedding cache stays

    result = runner.invoke(app, ["read", "tiny/Ducks.md"])
    assert result.exit_code == 2
    assert result.output == (f"error: no note 'tiny/Ducks.md' in the vault {vault.resolve()}; did you mean 'Ducks'? "
                             "Else use a vault_path from search results (`docsvault search ...` / the search tool)\n")
    assert [r["name"] for r in json.loads(_run("status", "--json"))["sources"]] == ["tiny2"]
    catalog = {k.to_user_string() for k in DagsterInstance.get().get_asset_keys()}
    assert {k for k in catalog if k.startswith("tiny/")} == set()             # wiped from the Dagster catalog
    assert "tiny2/embeddings" in catalog and "warehouse" in catalog

    again = json.loads(_run("build", "--json"))
    assert again["removed"] == [] and again["sources"][0]["status"] == "unchanged"
    assert _files(vault) == ["copy", "handmade", "mine", "tiny2"]

    # a dropped source whose folder holds the user's files: they stay, the bookkeeping folder goes with the rest
    (vault / "tiny2" / "Ducks.md").write_text("# Ducks\n\nmy own words\n", encoding="utf-8")
    (vault / "tiny2" / "Inbox.md").write_text("# Inbox\n", encoding="utf-8")
    from pipeline.config import Settings
    from pipeline.stages import remove_dropped_sources

    # what `build` does first (under its lock) when tiny2 leaves sources.yaml (the CLI path is checked above)
    assert remove_dropped_sources(Settings.from_env(), [], remove_all=True) == [
        ("removed vault/tiny2/: source 'tiny2' is no longer in sources.yaml (kept 2 file(s) docsvault did not "
         "write, or that were edited since: Ducks.md, Inbox.md)")]
    assert _files(vault / "tiny2") == ["Ducks.md", "Inbox.md"]                # no .docsvault/ left behind


def test_a_dropped_sources_bookkeeping_folder_keeps_a_file_someone_put_there(tmp_path: Path) -> None:
    from pipeline.ingest.vault import write_source
    from pipeline.models import Note
    from pipeline.stages.layout import _remove_generated

    fm = {"title": "A", "source": "gone", "source_path": "a.md"}
    write_source(tmp_path, "gone", [Note("gone", "a.md", "a.md", "A", fm, "A.\n")])
    folder = tmp_path / "gone"
    (folder / "mine.md").write_text("# mine\n", encoding="utf-8")
    (folder / ".docsvault" / "notes.txt").write_text("mine too\n", encoding="utf-8")
    (folder / ".docsvault" / ".manifest.json.x1.tmp").write_text("{", encoding="utf-8")    # a killed write's temp
    assert _remove_generated(folder) == [".docsvault/notes.txt", "mine.md"]
    assert _files(folder) == [".docsvault", "mine.md"]
    assert _files(folder / ".docsvault") == ["notes.txt"]


def test_a_dropped_sources_folder_keeps_your_dot_files_and_symlinked_folders(tmp_path: Path) -> None:
    """A folder whose only files of the user's were a dot file and a symlinked folder (none of them listed as
    kept) was removed with ``shutil.rmtree``: ``.private.md`` and the link were gone (session 43); a killed write's
    temp file is docsvault's and goes."""
    from pipeline.ingest.vault import write_source
    from pipeline.models import Note
    from pipeline.stages.layout import _remove_generated

    fm = {"title": "A", "source": "gone", "source_path": "sub/a.md"}
    write_source(tmp_path / "vault", "gone", [Note("gone", "sub/a.md", "sub/a.md", "A", fm, "A.\n")])
    folder, mine = tmp_path / "vault" / "gone", tmp_path / "mine"
    mine.mkdir()
    (folder / ".private.md").write_text("my hidden note\n", encoding="utf-8")
    os.symlink(mine, folder / "linked")
    (folder / "sub" / ".a.md.k2j4x9_q.tmp").write_text("half", encoding="utf-8")
    assert _remove_generated(folder) == [".private.md", "linked"]
    assert _files(folder) == [".private.md", "linked"]
    assert (folder / ".private.md").read_text(encoding="utf-8") == "my hidden note\n"


def test_a_dropped_sources_folder_keeps_an_empty_folder_you_made(tmp_path: Path) -> None:
    """An empty folder you made in vault/<source>/ stays when the source is dropped, as on every build (README: "nor
    is a folder you made there, an empty one too"), and is named; the folders the removal empties go. Before
    session 43 every empty folder went."""
    from pipeline.ingest.vault import write_source
    from pipeline.models import Note
    from pipeline.stages.layout import _remove_generated

    fm = {"title": "A", "source": "gone", "source_path": "sub/deep/a.md"}
    write_source(tmp_path / "vault", "gone", [Note("gone", "sub/deep/a.md", "sub/deep/a.md", "A", fm, "A.\n")])
    folder = tmp_path / "vault" / "gone"
    (folder / "Mine" / "Later").mkdir(parents=True)
    assert _remove_generated(folder) == ["Mine/Later/"]
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["Mine", "Mine/Later"]


def test_a_dropped_empty_sources_folder_goes_and_keeps_a_file_of_yours(tmp_path: Path) -> None:
    """The folder of a source whose last build had no note (no index note, a manifest listing no file) is the
    source's: dropped, it goes, or only its bookkeeping when you put a file there; a folder whose manifest names
    another source, or one not from a build, stays as it is."""
    from pipeline.config import Settings
    from pipeline.ingest.vault import write_source
    from pipeline.stages import remove_dropped_sources

    settings = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    vault = settings.vault_dir
    for name in ("empty", "mine", "other"):
        write_source(vault, name, [])
    (vault / "mine" / "Inbox.md").write_text("# Inbox\n", encoding="utf-8")
    (vault / "other" / ".docsvault" / "manifest.json").write_text(
        '{"version": 1, "source": "someone", "files": {}}\n', encoding="utf-8")       # not this folder's source
    (vault / "plain" / ".docsvault").mkdir(parents=True)                              # no manifest
    assert remove_dropped_sources(settings, [], remove_all=True) == [
        "removed vault/empty/: source 'empty' is no longer in sources.yaml",
        "removed vault/mine/: source 'mine' is no longer in sources.yaml (kept 1 file(s) docsvault did not write, "
        "or that were edited since: Inbox.md)"]
    assert _files(vault) == ["mine", "other", "plain"]
    assert _files(vault / "mine") == ["Inbox.md"]                             # no .docsvault/ left behind
    assert _files(vault / "other" / ".docsvault") == ["manifest.json"]
    assert _files(vault / "plain") == [".docsvault"]


def test_status_shows_last_build_failure_until_a_build_succeeds(tiny_env: Path) -> None:
    sources = tiny_env / "sources.yaml"
    good = sources.read_text()
    not_a_model = tiny_env / "not-a-model"       # a folder passes validation (sources.yaml), then fails to load
    not_a_model.mkdir()
    sources.write_text(good + f"    embedding: {not_a_model}\n", encoding="utf-8")
    report = json.loads(_run("build", "--json", code=2))
    src = report["sources"][0]
    assert (src["status"], src["failed_stage"]) == ("failed", "chunks")
    assert src["error"].startswith(f"cannot load embedding model '{not_a_model}'")

    row = json.loads(_run("status", "--json"))["sources"][0]
    assert (row["fetch_status"], row["fetch_error"]) == ("ok", None)
    err = row["last_error"]
    assert err == {"stage": "chunks", "error": src["error"], "at": err["at"]} and err["at"]
    text = _run("status").splitlines()
    assert f"  tiny: last build failed at chunks ({err['at']}): {src['error']}" in text

    sources.write_text(good, encoding="utf-8")
    assert json.loads(_run("build", "--json"))["sources"][0]["status"] == "built"
    row = json.loads(_run("status", "--json"))["sources"][0]
    assert row["last_error"] is None
    assert not [ln for ln in _run("status").splitlines() if "last build failed" in ln]
    # sources.yaml broken while the warehouse is fine: status still shows what is built, then the error (exit 2)
    sources.write_text(good + "  - name: [oops\n", encoding="utf-8")
    data = json.loads(_run("status", "--json", code=2))
    assert data["sources_error"].startswith(f"{sources}: ")
    assert [(r["name"], r["kind"], r["notes"] > 0) for r in data["sources"]] == [("tiny", "?", True)]
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 2
    assert "(sources.yaml is invalid, see the error below: the sources listed are the warehouse's)" in result.stdout
    assert result.stderr == f"error: {data['sources_error']}\n"
    sources.write_text(good, encoding="utf-8")
    assert json.loads(_run("status", "--json"))["sources_error"] is None


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


def test_an_empty_sources_list_is_refused_until_remove_all_sources(built_tiny_env: Path) -> None:
    vault, data = built_tiny_env / "vault", built_tiny_env / "data"
    sources = built_tiny_env / "sources.yaml"
    sources.write_text("sources: []\n", encoding="utf-8")
    before = (_listing(vault), _listing(data / "state"), _listing(data / "notes"), _listing(data / "raw"),
              (data / "warehouse.duckdb").read_bytes())
    built = f"{sources}: lists no sources, but 1 source(s) are built (tiny)"

    result = runner.invoke(app, ["sources", "validate"])
    assert (result.exit_code, result.stdout) == (0, f"{sources}: 0 source(s), valid\n")
    assert result.stderr == (f"warning: {built}: `docsvault build` will refuse to remove them all; restore the "
                             "file's sources, or run `docsvault build --remove-all-sources` to remove them all\n")
    refused = (f"error: {built}: this build would remove them all (their vault folders and data), so it stopped "
               "before removing anything; restore the file's sources, or run `docsvault build "
               "--remove-all-sources` to remove them all\n")
    for args in (["build"], ["build", "--json"], ["build", "--force"]):
        result = runner.invoke(app, args)
        assert (result.exit_code, result.stdout, result.stderr) == (2, "", refused), args
    assert (_listing(vault), _listing(data / "state"), _listing(data / "notes"), _listing(data / "raw"),
            (data / "warehouse.duckdb").read_bytes()) == before
    assert "Ducks swim" in _run("read", "tiny/Ducks.md")

    from pipeline.common.errors import SourceConfigError
    from pipeline.config import Settings
    from pipeline.stages import warehouse_stage

    # the Dagster UI and the schedules run the shared stages without `build`: the warehouse is not emptied either
    with pytest.raises(SourceConfigError) as err:
        warehouse_stage(Settings.from_env(), [], lambda spec: None)
    assert str(err.value) == refused[len("error: "):-1]
    assert (data / "warehouse.duckdb").read_bytes() == before[-1]

    out = _run("build", "--remove-all-sources")
    assert out.splitlines()[0] == "removed vault/tiny/: source 'tiny' is no longer in sources.yaml"
    assert _files(vault) == []
    assert json.loads(_run("status", "--json"))["sources"] == []
    assert (_files(data / "state"), _files(data / "raw")) == ([".noop.json", ".removed.json", ".shared.json"], [])
    result = runner.invoke(app, ["sources", "validate"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"{sources}: 0 source(s), valid\n", "")
    assert _run("build").count("removed vault/") == 0       # nothing built any more: an empty list builds


def test_the_refusal_names_the_first_five_built_sources() -> None:
    from pipeline.stages import no_sources_problem

    assert no_sources_problem(["a", "b", "c", "d", "e"]) == "lists no sources, but 5 source(s) are built (a, b, c, d, e)"
    assert no_sources_problem(list("abcdefg")) == \
        "lists no sources, but 7 source(s) are built (a, b, c, d, e and 2 more)"


def test_a_build_on_a_copied_vault_keeps_the_warehouse_of_the_sources_built_elsewhere(
        built_tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An MCP reader host as docs/deploy.md sets it up: a copy of the vault and of warehouse.duckdb, nothing else
    of the data dir. A capture (the save_note tool) there built its local source and published a warehouse of
    that source alone: the team's search lost every other source (1,502 chunks -> 3). Now the build refuses to
    publish, naming the sources it never built here, the published warehouse stays, and the note is kept."""
    import shutil

    from pipeline.common.errors import SourceConfigError
    from pipeline.config import Settings
    from pipeline.ingest.sources import load_sources
    from pipeline.stages import warehouse_stage

    reader = built_tiny_env / "reader"
    (reader / "data").mkdir(parents=True)
    shutil.copytree(built_tiny_env / "vault", reader / "vault")
    shutil.copy(built_tiny_env / "data" / "warehouse.duckdb", reader / "data" / "warehouse.duckdb")
    (reader / "inbox").mkdir()
    sources = built_tiny_env / "sources.yaml"
    sources.write_text(sources.read_text(encoding="utf-8")
                       + f"  - name: inbox\n    kind: local\n    path: {reader / 'inbox'}\n", encoding="utf-8")
    monkeypatch.setenv("DOCSVAULT_DATA", str(reader / "data"))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(reader / "vault"))
    published = (reader / "data" / "warehouse.duckdb").read_bytes()
    line = (f"1 source(s) have a vault folder but were never built in data dir {reader / 'data'} "
            "(tiny): publishing would drop them from search, so warehouse.duckdb is left as it is; build them "
            "here (`docsvault build --source tiny`), or, on a host serving a copied warehouse, give it a "
            'sources.yaml without `local` sources (docs/deploy.md, "Read-only copies per reader host")')

    result = runner.invoke(app, ["capture", "Geese fly south.", "--title", "Geese", "--source", "inbox", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["build"]["error"] == f"warehouse: {line}"
    assert (reader / "inbox" / "Geese.md").read_text(encoding="utf-8").endswith("# Geese\n\nGeese fly south.\n")
    assert (reader / "data" / "warehouse.duckdb").read_bytes() == published
    assert "Ducks" in _run("search", "ducks swim")
    with pytest.raises(SourceConfigError) as err:        # the Dagster warehouse asset's call
        warehouse_stage(Settings.from_env(), load_sources(sources), lambda spec: None)
    assert str(err.value) == line
    assert (reader / "data" / "warehouse.duckdb").read_bytes() == published


def test_a_dropped_sources_folder_whose_index_note_you_deleted_goes(tmp_path: Path) -> None:
    """The folder was recognised as docsvault's by its ``_index.md`` (or an empty manifest): with the index note
    deleted in Obsidian, a dropped source's folder stayed with every generated note in it, without a line (session
    43). Its manifest names the source: it goes, your files stay."""
    from pipeline.config import Settings
    from pipeline.ingest.vault import write_source
    from pipeline.models import Note
    from pipeline.stages import remove_dropped_sources

    settings = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    fm = {"title": "A", "source": "gone", "source_path": "a.md"}
    write_source(settings.vault_dir, "gone", [Note("gone", "a.md", "a.md", "A", fm, "A.\n")])
    (settings.vault_dir / "gone" / "_index.md").unlink()
    (settings.vault_dir / "gone" / "mine.md").write_text("# mine\n", encoding="utf-8")
    assert remove_dropped_sources(settings, [], remove_all=True) == [
        ("removed vault/gone/: source 'gone' is no longer in sources.yaml (kept 1 file(s) docsvault did not write, "
         "or that were edited since: mine.md)")]
    assert _files(settings.vault_dir / "gone") == ["mine.md"]


def _page(rel: str, body: str, **extra: object) -> Note:
    fm = {"title": rel[:-3], **extra, "source": "me", "source_path": rel, "content_hash": text_hash(body)}
    return Note("me", rel, rel, rel[:-3], fm, body)


def test_a_source_removed_and_added_back_keeps_an_alias_you_typed_into_a_note(tmp_path: Path) -> None:
    """An alias (a property's value) typed into a generated note in Obsidian, then the source removed from
    sources.yaml (the note is kept: edited) and added back: the build overwrote the note without a word, the alias
    lost (the removal takes the manifest, and the old rule looked at the body's content_hash and the key set only).
    Now the edit is kept as `Ann (edited).md`, as with a manifest."""
    from pipeline.ingest.vault import write_source
    from pipeline.stages.layout import _remove_generated

    vault = tmp_path / "vault"
    ann = _page("Ann.md", "# Ann\n\nWorks on the kitchen.\n", aliases=["Ann Smith"])
    write_source(vault, "me", [ann])
    path = vault / "me" / "Ann.md"
    mine = path.read_bytes().replace(b"- Ann Smith\n", b"- Ann Smith\n- Annie\n")
    path.write_bytes(mine)
    assert _remove_generated(vault / "me") == ["Ann.md"]
    result = write_source(vault, "me", [ann])
    assert result.conflicts == [("Ann.md", "Ann (edited).md")]
    assert (vault / "me" / "Ann (edited).md").read_bytes() == mine
    assert b"Annie" not in path.read_bytes()


def test_a_source_added_back_keeps_your_copy_of_a_page_that_left(tmp_path: Path) -> None:
    """A copy of a generated note (Obsidian's "Make a copy": `Recipes 1.md`, same bytes) whose page then left the
    source, the source removed and added back: the copy was deleted as "removed (their pages left the source)"
    (its frontmatter names the page, its content_hash matches). Now it is yours and kept."""
    from pipeline.ingest.vault import write_source
    from pipeline.stages.layout import _remove_generated

    vault = tmp_path / "vault"
    recipes, kitchen = _page("Recipes.md", "# Recipes\n\nMiso soup.\n"), _page("Kitchen.md", "# Kitchen\n")
    write_source(vault, "me", [recipes, kitchen])
    copy = vault / "me" / "Recipes 1.md"
    copy.write_bytes((vault / "me" / "Recipes.md").read_bytes())
    write_source(vault, "me", [kitchen])                 # the page left the source: its note goes, the copy stays
    assert _remove_generated(vault / "me") == ["Recipes 1.md"]
    result = write_source(vault, "me", [kitchen])
    assert result.removed == [] and result.kept == ["Recipes 1.md"]
    assert copy.read_bytes().startswith(b"---\ntitle: Recipes\n")


def test_a_dropped_sources_folder_is_removed_once_your_index_copy_or_edit_stays_and_so_do_your_notes(
        tmp_path: Path) -> None:
    """A dropped source's folder with your copy of its index note (`_index (edited).md`, kept by a build when you
    wrote in `_index.md`), or with `_index.md` edited since the last build: both still carry `docsvault: index`, so
    every later build took the folder for a generated one again and removed it once more, now without a manifest:
    the old rule counted your renamed copy of a note (`Benjamin.md`), your conflict copy (`Kitchen
    (conflict).md`), an `(edited)` copy whose edit was a tag, and the index copy itself as the build's, and deleted
    them (a line in the Dagster run's log only). Now the removal moves an edited index note aside as it keeps it,
    a copy named `(edited)` does not mark the folder as docsvault's, and a second build leaves the folder alone."""
    from pipeline.config import Settings
    from pipeline.ingest.vault import write_source
    from pipeline.stages import remove_dropped_sources
    from pipeline.stages.layout import _generated_vault_folder

    settings = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    for name in ("me", "you"):
        vault, folder = settings.vault_dir, settings.vault_dir / name
        pages = [_page("Ben.md", "# Ben\n"), _page("Kitchen.md", "# Kitchen\n"), _page("Ideas.md", "# Ideas\n",
                                                                                       tags=["idea"])]
        pages = [dataclasses.replace(p, source=name, frontmatter={**p.frontmatter, "source": name}) for p in pages]
        write_source(vault, name, pages)
        index = folder / "_index.md"
        index.write_bytes(index.read_bytes() + b"\nmy comment\n")
        if name == "me":                         # a build keeps your edit as `_index (edited).md`
            assert write_source(vault, name, pages).conflicts == [("_index.md", "_index (edited).md")]
        (folder / "Benjamin.md").write_bytes((folder / "Ben.md").read_bytes())
        (folder / "Kitchen (conflict 2026-12-01).md").write_bytes((folder / "Kitchen.md").read_bytes())
        (folder / "Ideas.md").write_bytes((folder / "Ideas.md").read_bytes().replace(b"- idea\n", b"- idea\n- mine\n"))
    mine = {p: p.read_bytes() for p in settings.vault_dir.rglob("*.md")
            if p.name in ("_index (edited).md", "Benjamin.md", "Ideas.md") or "conflict" in p.name}
    mine[settings.vault_dir / "you" / "_index.md"] = (settings.vault_dir / "you" / "_index.md").read_bytes()
    assert len(mine) == 8
    first = remove_dropped_sources(settings, [], remove_all=True)
    assert [line.split(" (kept")[0] for line in first] == [
        "removed vault/me/: source 'me' is no longer in sources.yaml",
        "removed vault/you/: source 'you' is no longer in sources.yaml"]
    assert _files(settings.vault_dir / "me") == [
        "Benjamin.md", "Ideas.md", "Kitchen (conflict 2026-12-01).md", "_index (edited).md"]
    assert _files(settings.vault_dir / "you") == [
        "Benjamin.md", "Ideas.md", "Kitchen (conflict 2026-12-01).md", "_index (edited).md"]
    assert not _generated_vault_folder(settings.vault_dir / "me")
    assert not _generated_vault_folder(settings.vault_dir / "you")
    assert remove_dropped_sources(settings, [], remove_all=True) == []
    moved = {settings.vault_dir / "you" / "_index.md": settings.vault_dir / "you" / "_index (edited).md"}
    assert {p: moved.get(p, p).read_bytes() for p in mine} == mine
    # added back: the index copy is yours too (it was removed as the build's index note), and so are the others
    result = write_source(settings.vault_dir, "me", [_page("Ben.md", "# Ben\n"), _page("Ideas.md", "# Ideas\n",
                                                                                     tags=["idea"])])
    assert result.removed == [] and result.conflicts == [("Ideas.md", "Ideas (edited).md")]
    assert result.kept == ["Benjamin.md", "Ideas (edited).md", "Kitchen (conflict 2026-12-01).md",
                           "_index (edited).md"]
    moved[settings.vault_dir / "me" / "Ideas.md"] = settings.vault_dir / "me" / "Ideas (edited).md"
    assert {p: moved.get(p, p).read_bytes() for p in mine} == mine


def test_a_source_added_back_with_a_new_site_url_takes_its_unedited_notes_back(tmp_path: Path) -> None:
    """The keys docsvault computes (`url` from `site_url`, `fetched_at`…) may change while a source is out of
    sources.yaml: a note nobody edited is still the build's, rewritten without an `(edited)` copy."""
    from pipeline.ingest.vault import write_source
    from pipeline.stages.layout import _remove_generated

    vault = tmp_path / "vault"
    ann = _page("Ann.md", "# Ann\n", aliases=["Ann Smith"], url="https://old.example/Ann")
    write_source(vault, "me", [ann])
    (vault / "me" / "Ann.md").write_bytes((vault / "me" / "Ann.md").read_bytes() + b"\n")   # kept: edited
    assert _remove_generated(vault / "me") == ["Ann.md"]
    (vault / "me" / "Ann.md").write_bytes((vault / "me" / "Ann.md").read_bytes()[:-1])     # edit undone
    moved = dataclasses.replace(ann, frontmatter={**ann.frontmatter, "url": "https://new.example/Ann"})
    result = write_source(vault, "me", [moved])
    assert result.conflicts == [] and result.written == ["Ann.md"]
    assert b"url: https://new.example/Ann\n" in (vault / "me" / "Ann.md").read_bytes()


def test_a_source_added_back_with_a_changed_page_keeps_a_tag_you_typed_into_its_note(tmp_path: Path) -> None:
    """A tag typed into a generated note in Obsidian (its body untouched), the source removed from sources.yaml (the
    removal keeps the note: edited since) and added back after the page's text changed in the source: the build
    overwrote the note without a word and the tag was gone (without the manifest, a property value counted as an
    edit only when the body written now was the old one; the note's content_hash covers the body only). Now the
    note is kept as `Music (edited).md`, as with a manifest."""
    from pipeline.ingest.vault import write_source
    from pipeline.stages.layout import _remove_generated

    vault = tmp_path / "vault"
    music = _page("Music.md", "# Music\n\nGuitar scales.\n", tags=["hobby"])
    write_source(vault, "me", [music])
    path = vault / "me" / "Music.md"
    mine = path.read_bytes().replace(b"- hobby\n", b"- hobby\n- practice\n")
    path.write_bytes(mine)
    assert _remove_generated(vault / "me") == ["Music.md"]
    changed = _page("Music.md", "# Music\n\nGuitar scales. Also bass.\n", tags=["hobby"])
    result = write_source(vault, "me", [changed])
    assert result.conflicts == [("Music.md", "Music (edited).md")]
    assert (vault / "me" / "Music (edited).md").read_bytes() == mine
    assert path.read_bytes().endswith(b"\n# Music\n\nGuitar scales. Also bass.\n")


def test_a_source_added_back_with_a_new_heading_takes_its_unedited_note_back(tmp_path: Path) -> None:
    """The page's heading (its title) and text changed while the source was out of sources.yaml, and the edit that
    kept the note at the removal was undone: the note is still the build's, rewritten without an `(edited)` copy."""
    from pipeline.ingest.vault import write_source
    from pipeline.stages.layout import _remove_generated

    vault = tmp_path / "vault"
    write_source(vault, "me", [_page("Bike.md", "# Bike\n\nChain lube.\n")])
    path = vault / "me" / "Bike.md"
    path.write_bytes(path.read_bytes() + b"\n")                      # kept at the removal: edited
    assert _remove_generated(vault / "me") == ["Bike.md"]
    path.write_bytes(path.read_bytes()[:-1])                         # edit undone
    new = _page("Bike.md", "# Bike care\n\nChain lube every 300 km.\n")
    new = dataclasses.replace(new, title="Bike care", frontmatter={**new.frontmatter, "title": "Bike care"})
    result = write_source(vault, "me", [new])
    assert result.conflicts == [] and result.written == ["Bike.md"]
    assert path.read_bytes().startswith(b"---\ntitle: Bike care\n")


def test_a_source_added_back_with_a_changed_page_keeps_a_title_you_typed_into_its_note(tmp_path: Path) -> None:
    """A title typed into a generated note's properties (not its heading), the source removed and added back after
    the page's text changed: the title, which otherwise follows the first heading, is yours: kept as `(edited)`."""
    from pipeline.ingest.vault import write_source
    from pipeline.stages.layout import _remove_generated

    vault = tmp_path / "vault"
    write_source(vault, "me", [_page("Bike.md", "# Bike\n\nChain lube.\n")])
    path = vault / "me" / "Bike.md"
    mine = path.read_bytes().replace(b"title: Bike\n", b"title: My bicycle\n")
    path.write_bytes(mine)
    assert _remove_generated(vault / "me") == ["Bike.md"]
    new = _page("Bike.md", "# Bike\n\nChain lube every 300 km.\n")
    new = dataclasses.replace(new, title="Bike", frontmatter={**new.frontmatter, "title": "Bike"})
    result = write_source(vault, "me", [new])
    assert result.conflicts == [("Bike.md", "Bike (edited).md")]
    assert (vault / "me" / "Bike (edited).md").read_bytes() == mine
