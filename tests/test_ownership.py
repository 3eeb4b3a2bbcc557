"""Issue 14: the vault is the user's too. The build owns exactly the files it wrote (manifest with content hashes);
a file it did not write, or a generated note edited since, is never deleted or overwritten silently."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from pipeline import stages as build
from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.ingest.ownership import audit, conflict_name, load_manifest, manifest_path
from pipeline.ingest.vault import read_notes, write_source
from pipeline.models import Note
from tests.conftest import local_source


def _note(rel: str, body: str) -> Note:
    fm = {"title": rel[:-3], "source": "demo", "source_path": rel}
    return Note(source="demo", source_path=rel, rel_path=rel, title=rel[:-3], frontmatter=fm, body=body)


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_edit_new_note_and_deleted_note_survive_a_rebuild(tmp_path: Path, umask022) -> None:
    root = tmp_path / "demo"
    first = write_source(tmp_path, "demo", [_note("a.md", "A one.\n"), _note("b.md", "B.\n"), _note("c.md", "C.\n")])
    assert (first.written, first.kept, first.conflicts) == (["a.md", "b.md", "c.md"], [], [])
    assert stat.S_IMODE((root / "a.md").stat().st_mode) == 0o644
    assert stat.S_IMODE(manifest_path(root).stat().st_mode) == 0o644
    edited_a = (root / "a.md").read_bytes() + b"\nmy line\n"
    (root / "a.md").write_bytes(edited_a)                     # the user appends to a generated note
    edited_b = (root / "b.md").read_bytes() + b"\nmy thoughts on b\n"
    (root / "b.md").write_bytes(edited_b)                     # ... and to one whose page will leave the source
    (root / "sub").mkdir()
    (root / "sub" / "mine.md").write_text("# Mine\n\nmy own note\n", encoding="utf-8")   # a note of their own
    (root / "pic.png").write_bytes(b"\x89PNG")
    (root / "c.md").unlink()                                  # and deletes a generated note
    assert audit(root, "demo")._replace(owned=[]) == ([("pic.png"), "sub/mine.md"], ["a.md", "b.md"], ["c.md"], [],
                                                      True, [])

    second = write_source(tmp_path, "demo", [_note("a.md", "A two.\n"), _note("c.md", "C.\n")])
    assert second.written == ["a.md", "c.md"]
    assert second.removed == []
    assert second.conflicts == [("a.md", "a (edited).md")]
    assert second.kept == ["a (edited).md", "b.md", "pic.png", "sub/mine.md"]
    assert (root / "a (edited).md").read_bytes() == edited_a          # nothing the user wrote is lost
    after = audit(root, "demo")          # the copy of the user's edit: a category of its own, not "yours"
    assert (after.user_files, after.copies) == (["b.md", "pic.png", "sub/mine.md"], ["a (edited).md"])
    assert (root / "b.md").read_bytes() == edited_b
    assert (root / "sub" / "mine.md").read_text(encoding="utf-8") == "# Mine\n\nmy own note\n"
    assert (root / "a.md").read_text(encoding="utf-8").endswith("\nA two.\n")
    assert (root / "c.md").is_file()
    assert stat.S_IMODE((root / "a.md").stat().st_mode) == 0o644
    # the source's notes are the generated ones; the user's files are not notes of the source
    assert [n.rel_path for n in read_notes(tmp_path, ["demo"])] == ["a.md", "c.md"]
    assert sorted(load_manifest(root)) == ["_index.md", "a.md", "c.md"]

    # a second edit of the same note gets the next free name; an unedited removal still removes
    (root / "a.md").write_bytes(b"rewritten by hand\n")
    third = write_source(tmp_path, "demo", [_note("a.md", "A two.\n")])
    assert third.conflicts == [("a.md", "a (edited 2).md")]
    assert third.removed == ["c.md"]
    assert (root / "a (edited 2).md").read_bytes() == b"rewritten by hand\n"


def test_source_removed_from_config_keeps_the_users_files(tmp_path: Path) -> None:
    write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("b.md", "B.\n")])
    (tmp_path / "demo" / "mine.md").write_text("mine\n", encoding="utf-8")
    (tmp_path / "demo" / "b.md").write_text("edited\n", encoding="utf-8")
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources: []\n", encoding="utf-8")
    settings = Settings(sources, tmp_path / "data", tmp_path, tmp_path / "evals")
    lines = build.remove_dropped_sources(settings, [], remove_all=True)
    assert lines == [("removed vault/demo/: source 'demo' is no longer in sources.yaml (kept 2 file(s) docsvault "
                     "did not write, or that were edited since: b.md, mine.md)")]
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["b.md", "mine.md"]     # no .docsvault/ left
    write_source(tmp_path, "gone", [Note("gone", "x.md", "x.md", "x", {"source": "gone", "source_path": "x.md"},
                                         "x\n")])
    build.remove_dropped_sources(settings, [], remove_all=True)
    assert not (tmp_path / "gone").exists()                  # nothing of the user's: the folder goes


def test_a_renamed_copy_survives_its_source_removed_and_added_back(tmp_path: Path) -> None:
    """A user renamed a generated note in Obsidian (`C- tips.md` -> `CSharp tips.md`, unedited), then removed the
    source from sources.yaml and added it back. The removal kept the renamed copy as theirs and took the manifest
    with it; the next build read the folder as one written before manifests, counted the copy (its frontmatter
    and content_hash are the build's) as a generated note whose page had left the source, and deleted it
    ("removed (their pages left the source): CSharp tips.md"). Now a file whose source_path the build writes at
    another path is the user's copy: kept."""
    from pipeline.models import text_hash

    def tips() -> Note:
        fm = {"title": "C# tips", "source": "demo", "source_path": "C# tips.md",
              "content_hash": text_hash("Use var.\n")}
        return Note(source="demo", source_path="C# tips.md", rel_path="C- tips.md", title="C# tips", frontmatter=fm,
                    body="Use var.\n")

    def plain(rel: str, body: str) -> Note:
        note = _note(rel, body)
        return dataclasses.replace(note, frontmatter={**note.frontmatter, "content_hash": text_hash(body)})

    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [tips(), plain("a.md", "A.\n")])
    (root / "C- tips.md").rename(root / "CSharp tips.md")          # Obsidian's rename: the bytes stay the same
    renamed = (root / "CSharp tips.md").read_bytes()
    settings = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path, tmp_path / "evals")
    assert build.remove_dropped_sources(settings, [], remove_all=True) == [
        ("removed vault/demo/: source 'demo' is no longer in sources.yaml (kept 1 file(s) docsvault did not write, "
         "or that were edited since: CSharp tips.md)")]
    back = write_source(tmp_path, "demo", [tips(), plain("a.md", "A.\n")])
    assert (back.written, back.removed, back.kept) == (["C- tips.md", "a.md"], [], ["CSharp tips.md"])
    assert (root / "CSharp tips.md").read_bytes() == renamed
    # a generated note of a page that left the source is still the build's when the manifest is gone
    (root / ".docsvault" / "manifest.json").unlink()
    assert write_source(tmp_path, "demo", [tips()]).removed == ["a.md"]


def test_vault_without_manifest_keeps_edited_and_foreign_files(tmp_path: Path) -> None:
    """A vault written before manifests: unedited generated notes are recognised by their content_hash."""
    from pipeline.models import text_hash

    def gen(rel: str, body: str) -> Note:
        n = _note(rel, body)
        return dataclasses.replace(n, frontmatter={**n.frontmatter, "content_hash": text_hash(body)})

    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [gen("a.md", "A.\n"), gen("b.md", "B.\n"), gen("old.md", "Old.\n")])
    manifest_path(root).unlink()
    (root / "a.md").write_text((root / "a.md").read_text() + "my line\n", encoding="utf-8")
    (root / "note.md").write_text("no frontmatter\n", encoding="utf-8")
    result = write_source(tmp_path, "demo", [gen("a.md", "A.\n"), gen("b.md", "B.\n")])
    assert result.conflicts == [("a.md", "a (edited).md")]
    assert result.removed == ["old.md"]
    assert result.kept == ["a (edited).md", "note.md"]
    assert (root / "a (edited).md").read_text().endswith("A.\nmy line\n")


def test_a_property_added_to_a_generated_note_survives_a_missing_manifest(tmp_path: Path) -> None:
    """Helper-141 (session 45): a vault copied without its ``.docsvault/`` folder, a property typed into a
    generated note in Obsidian (``myprop: keep me``), the source edited: the next build overwrote the note and the
    property was gone without a word, since ``content_hash`` covers the body only. A key the build does not write
    there now makes the note the user's: it is kept as an edited copy, as an edit of the body is."""
    from pipeline.models import text_hash

    def gen(rel: str, body: str, **extra: str) -> Note:
        n = _note(rel, body)
        return dataclasses.replace(n, frontmatter={**n.frontmatter, **extra, "content_hash": text_hash(body)})

    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [gen("jazz.md", "Jazz.\n", genre="music"), gen("tea.md", "Tea.\n")])
    manifest_path(root).unlink()
    jazz = (root / "jazz.md").read_text(encoding="utf-8")
    (root / "jazz.md").write_text(jazz.replace("genre: music\n", "genre: music\nmyprop: keep me\n"), encoding="utf-8")
    result = write_source(tmp_path, "demo", [gen("jazz.md", "Jazz, edited.\n", genre="music"),
                                             gen("tea.md", "Tea, edited.\n")])
    assert result.conflicts == [("jazz.md", "jazz (edited).md")]
    assert "myprop: keep me\n" in (root / "jazz (edited).md").read_text(encoding="utf-8")
    assert (root / "jazz.md").read_text(encoding="utf-8").endswith("Jazz, edited.\n")
    assert (root / "tea.md").read_text(encoding="utf-8").endswith("Tea, edited.\n")   # no key added: the build's
    assert not (root / "tea (edited).md").exists()


def test_conflict_names() -> None:
    assert conflict_name("x/Note.md", set()) == "x/Note (edited).md"
    assert conflict_name("x/Note.md", {"x/note (edited).md"}) == "x/Note (edited 2).md"
    assert conflict_name("pic.png", set()) == "pic (edited).png"
    assert conflict_name("README", set()) == "README (edited)"


def test_killed_build_between_files_and_manifest_owns_both_versions(tmp_path: Path, monkeypatch) -> None:
    write_source(tmp_path, "demo", [_note("a.md", "A.\n")])
    import pipeline.ingest.ownership as own

    real = own.save_manifest
    calls = []

    def crash_on_final(root, source, files, conflicts=None, yours=None):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        real(root, source, files, conflicts, yours)

    monkeypatch.setattr(own, "save_manifest", crash_on_final)
    with pytest.raises(KeyboardInterrupt):
        write_source(tmp_path, "demo", [_note("a.md", "A2.\n")])
    monkeypatch.setattr(own, "save_manifest", real)
    again = write_source(tmp_path, "demo", [_note("a.md", "A3.\n")])
    assert (again.written, again.conflicts, again.kept) == (["a.md"], [], [])


def test_build_reports_kept_files_and_conflicts(tmp_path: Path, tiny_vault: Path) -> None:
    """Through the build's stages: the vault stage names the user's files and the moved edit; status lists them."""
    settings, source = local_source(tmp_path, "tiny", tiny_vault)
    assert build.vault_stage(settings, source)["kept"] == 0
    root = settings.vault_dir / "tiny"
    (root / "Ducks.md").write_text((root / "Ducks.md").read_text() + "\nI saw one today.\n", encoding="utf-8")
    (root / "Inbox.md").write_text("# Inbox\n", encoding="utf-8")
    meta = build.vault_stage(settings, source)
    assert (meta["written"], meta["conflicts"], meta["kept_files"]) == (
        1, ["Ducks.md -> Ducks (edited).md"], ["Ducks (edited).md", "Inbox.md"])
    state = artifacts.load_state(settings, "tiny")
    assert state["vault_kept"] == ["Ducks (edited).md", "Inbox.md"]
    assert (root / "Ducks (edited).md").read_text().endswith("I saw one today.\n")
    from pipeline.ingest.vault_check import user_files_lines

    assert user_files_lines(settings, source) == [
        ("tiny: 1 file(s) in vault/tiny/ that docsvault did not write are kept (never changed or removed by a "
        "build): Inbox.md"),
        ("tiny: 1 copy(ies) of your edits to generated notes, kept as a build replaced the note (never changed or "
        "removed by a build; merge and delete them when done): Ducks (edited).md")]
    from pipeline.ingest.vault_check import check_vault, format_report

    row = check_vault(settings, [source])["sources"][0]       # `docsvault check-vault`: the copy is not "yours"
    assert (row["user_files"], row["edited"], row["edited_copies"]) == (1, 0, 1)
    assert format_report(check_vault(settings, [source]))[1:3] == [
        "  source                    notes attach. unresolved  markup  mode  yours edited copies",
        "  tiny                          5       0          0       -     0      1      0      1"]
    assert json.loads(manifest_path(root).read_text())["conflicts"] == {"Ducks (edited).md": "Ducks.md"}
    (root / "Ducks (edited).md").rename(root / "Merged.md")      # the user merged it: no longer a copy
    build.vault_stage(settings, source)
    assert "conflicts" not in json.loads(manifest_path(root).read_text())
    assert json.loads(manifest_path(root).read_text())["source"] == "tiny"
    # the user's note has no frontmatter: it is not a generated note, so the frontmatter check does not fail on it
    assert (build.frontmatter_check(settings, source)["invalid"], build.frontmatter_check(settings, source)["notes"]) \
        == (0, 6)


def test_your_file_where_the_source_gets_a_note_is_moved_aside_and_not_called_an_edit(tmp_path: Path,
                                                                                        tiny_vault: Path) -> None:
    """A file you wrote in vault/<source>/ at a path where the source later gets a note: the note needs the path,
    so your file is moved aside (never lost), and the report says it was yours, not an edit of a generated note."""
    from pipeline.cli import vault_lines

    settings, source = local_source(tmp_path, "tiny", tiny_vault)
    build.vault_stage(settings, source)
    root = settings.vault_dir / "tiny"
    (root / "Future.md").write_text("# Future (mine)\n", encoding="utf-8")
    (tiny_vault / "Future.md").write_text("# Future\n\nThe source's note.\n", encoding="utf-8")
    build.fetch_stage(settings, source)
    build.normalize_stage(settings, source)
    meta = build.vault_stage(settings, source)
    assert meta["conflicts"] == ["Future.md -> Future (edited).md (not written by the build)"]
    assert (root / "Future (edited).md").read_text(encoding="utf-8") == "# Future (mine)\n"
    assert vault_lines("tiny", meta)[0] == (
        "tiny: vault/tiny/Future.md is a file docsvault did not write, and the source now has a note at that path: "
        "your file is kept as vault/tiny/Future (edited).md")
    skipped = {"attachments_skipped": 2, "attachment_skip_lines": ["source 'tiny': a.png: too big"]}
    assert vault_lines("tiny", skipped, settings.state_dir) == [    # the real folder, not a "<data>" placeholder
        f"tiny: 2 attachment(s)/link(s) not copied, each with its reason in {settings.state_dir}/tiny.vault-skipped.txt",
        "  source 'tiny': a.png: too big"]


def test_build_table_uses_the_json_words_and_names_an_edited_note_once(tiny_env: Path) -> None:
    """`docsvault build` says built/unchanged/failed in its table, as `--json` does; the moved edit is named in one
    line (not again on stderr, nor among the kept files)."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    runner = CliRunner()
    first = runner.invoke(app, ["build"])
    assert first.exit_code == 0, first.output
    assert first.stdout.splitlines()[1].split()[:2] == ["tiny", "built"]
    root = tiny_env / "vault" / "tiny"
    (root / "Ducks.md").write_text((root / "Ducks.md").read_text() + "\nI saw one today.\n", encoding="utf-8")
    (tiny_env / "tinyvault" / "Ducks.md").write_text("# Ducks\n\nDucks swim in the pond.\n", encoding="utf-8")
    second = runner.invoke(app, ["build"])
    assert second.exit_code == 0, second.output
    out = second.stdout.splitlines()
    assert out[1].split()[:2] == ["tiny", "built"]
    edited = [ln for ln in second.stdout.splitlines() + second.stderr.splitlines() if "Ducks (edited).md" in ln]
    assert edited == [("  tiny: vault/tiny/Ducks.md was edited since the build wrote it: your version is kept as "
                      "vault/tiny/Ducks (edited).md")]
    third = runner.invoke(app, ["build"])
    assert (third.exit_code, third.stdout.splitlines()[1].split()[:2]) == (0, ["tiny", "unchanged"])
    assert third.stdout.splitlines()[1].endswith("nothing changed since the last build")
    # `build --json` says "unchanged" for such a source: tests/test_dropped_source.py, test_search_ux_cli.py


def test_a_folder_at_a_notes_path_and_a_file_at_a_folders_path_are_moved_aside(tmp_path: Path) -> None:
    """A folder of the user's named like a generated note (vault/demo/Ducks.md/) and a file where the source's
    notes have a folder (vault/demo/Projects) failed the source's vault step on every build ([Errno 21] Is a
    directory, [Errno 17] File exists); they are moved aside as a file of the user's at a note's path is, with
    everything in them, and the notes are written."""
    from pipeline.stages.ingest import FOREIGN, conflict_line

    notes = [_note("Ducks.md", "Ducks quack.\n"), _note("Projects/Alpha.md", "Alpha.\n")]
    write_source(tmp_path, "demo", notes)
    root = tmp_path / "demo"
    (root / "Ducks.md").unlink()
    (root / "Ducks.md").mkdir()
    (root / "Ducks.md" / "mine.txt").write_text("my stuff", encoding="utf-8")
    (root / "Projects" / "Alpha.md").unlink()
    (root / "Projects").rmdir()
    (root / "Projects").write_text("my file", encoding="utf-8")

    result = write_source(tmp_path, "demo", notes)

    assert result.conflicts == [("Ducks.md", "Ducks (edited).md/"), ("Projects/", "Projects (edited)")]
    assert result.foreign == ["Ducks.md", "Projects/"]
    assert (root / "Ducks (edited).md" / "mine.txt").read_text(encoding="utf-8") == "my stuff"
    assert (root / "Projects (edited)").read_text(encoding="utf-8") == "my file"
    assert read_notes(tmp_path, ["demo"])[0].body == "Ducks quack.\n"
    assert (root / "Projects" / "Alpha.md").is_file()
    # your file moved out of the folder's way is yours, not a copy of an edit (session 43)
    assert sorted(audit(root, "demo").user_files) == ["Ducks (edited).md/mine.txt", "Projects (edited)"]
    assert [conflict_line("demo", f"{rel} -> {copy}{FOREIGN}") for rel, copy in result.conflicts] == [
        ("vault/demo/Ducks.md is a folder docsvault did not write, and the source now has a note at that path: "
         "your folder is kept as vault/demo/Ducks (edited).md/"),
        ("vault/demo/Projects is a file docsvault did not write, and the source now has a folder of notes at that "
         "path: your file is kept as vault/demo/Projects (edited)")]
    again = write_source(tmp_path, "demo", notes)                      # the next build has nothing to move
    assert (again.conflicts, again.written) == ([], [])


def test_a_page_that_left_the_source_is_not_removed_through_a_symlinked_folder(tmp_path: Path) -> None:
    """The user moved ``guide/`` out of the vault and linked it back: the page leaving the source removed the file
    at the link's target, outside ``vault/<source>/`` (session 43)."""
    vault, outside = tmp_path / "vault", tmp_path / "elsewhere" / "guide"
    write_source(vault, "demo", [_note("a.md", "A.\n"), _note("guide/g.md", "G.\n")])
    outside.parent.mkdir()
    (vault / "demo" / "guide").rename(outside)
    os.symlink(outside, vault / "demo" / "guide")
    kept = (outside / "g.md").read_bytes()
    result = write_source(vault, "demo", [_note("a.md", "A.\n")])
    assert result.removed == []
    assert (outside / "g.md").read_bytes() == kept
    assert (vault / "demo" / "guide").is_symlink()


def test_a_file_made_while_the_build_runs_is_not_replaced_by_a_conflict_copy(tmp_path: Path) -> None:
    """The user wrote ``b (edited).md`` after the build listed the folder, then the build moved their edited ``b.md``
    to that name with os.replace: the file they had just written was gone (session 43)."""
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("b.md", "B.\n")])
    (root / "b.md").write_text("my edit of b\n", encoding="utf-8")

    def user_writes(done: int, total: int) -> None:
        if done == 1:           # after a.md, before b.md
            (root / "b (edited).md").write_text("my own note\n", encoding="utf-8")

    result = write_source(tmp_path, "demo", [_note("a.md", "A2.\n"), _note("b.md", "B2.\n")], progress=user_writes)
    assert result.conflicts == [("b.md", "b (edited 2).md")]
    assert (root / "b (edited).md").read_text(encoding="utf-8") == "my own note\n"
    assert (root / "b (edited 2).md").read_text(encoding="utf-8") == "my edit of b\n"


@pytest.mark.parametrize("target", ["mine.md", "../../outside.md"])
def test_a_symlink_of_the_users_at_a_notes_path_is_moved_aside(tmp_path: Path, target: str) -> None:
    """A symlink the user made where the source now has a note was deleted without a word when it pointed into the
    folder, and failed the source's vault step on every build when it pointed out of it (session 43)."""
    root = tmp_path / "vault" / "demo"
    write_source(root.parent, "demo", [_note("a.md", "A.\n")])
    (root / "mine.md").write_text("mine\n", encoding="utf-8")
    (tmp_path / "outside.md").write_text("outside\n", encoding="utf-8")
    os.symlink(target, root / "Future.md")
    result = write_source(root.parent, "demo", [_note("a.md", "A.\n"), _note("Future.md", "F.\n")])
    assert (result.conflicts, result.foreign) == ([("Future.md", "Future (edited).md")], ["Future.md"])
    assert os.readlink(root / "Future (edited).md") == target
    assert not (root / "Future.md").is_symlink()
    assert (root / "Future.md").read_text(encoding="utf-8").endswith("\nF.\n")
    assert (root / "mine.md").read_text(encoding="utf-8") == "mine\n"
    assert (tmp_path / "outside.md").read_text(encoding="utf-8") == "outside\n"


def test_a_file_the_build_cannot_read_at_a_notes_path_is_moved_aside(tmp_path: Path, monkeypatch) -> None:
    """A file of another user (mode 0600) at a note's path hashed as None, "no file", and was replaced (session 43)."""
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note("a.md", "A.\n")])
    (root / "Future.md").write_text("theirs\n", encoding="utf-8")
    real_open = Path.open

    def open_(self, *args, **kwargs):
        if self.name == "Future.md" and args[:1] == ("rb",):
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_)
    result = write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("Future.md", "F.\n")])
    monkeypatch.undo()
    assert result.conflicts == [("Future.md", "Future (edited).md")]
    assert (root / "Future (edited).md").read_text(encoding="utf-8") == "theirs\n"


def test_an_empty_folder_the_user_made_is_kept(tmp_path: Path) -> None:
    """Every build removed every empty folder of ``vault/<source>/``: a folder the user had just made in Obsidian
    (to write in) was gone after the next build (session 43); a folder a removed page leaves empty still goes."""
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("old/deep/b.md", "B.\n")])
    (root / "Drafts" / "2026").mkdir(parents=True)
    (root / "old" / "Mine").mkdir()
    result = write_source(tmp_path, "demo", [_note("a.md", "A.\n")])
    assert result.removed == ["old/deep/b.md"]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir()) == [
        ".docsvault", "Drafts", "Drafts/2026", "old", "old/Mine"]


def test_a_note_whose_name_a_macos_sync_left_in_nfd_is_rewritten_in_place(tmp_path: Path) -> None:
    """``café.md`` with its name decomposed (NFD, as a sync from a macOS vault leaves it on Linux): the build wrote
    an NFC ``café.md`` beside it, both were read as notes of the source, and the NFD one stayed stale for good
    (session 43). It is renamed to the note's NFC path and updated there; of two such twins one note is read."""
    import unicodedata

    nfc, nfd = "café.md", unicodedata.normalize("NFD", "café.md")
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note(nfc, "A.\n"), _note("Entrées/b.md", "B.\n")])
    os.rename(root / nfc, root / nfd)
    os.rename(root / "Entrées", root / unicodedata.normalize("NFD", "Entrées"))
    result = write_source(tmp_path, "demo", [_note(nfc, "A2.\n"), _note("Entrées/b.md", "B2.\n")])
    assert (result.written, result.kept, result.conflicts) == (["Entrées/b.md", nfc], [], [])
    assert sorted(p.name for p in root.iterdir()) == [".docsvault", "Entrées", "_index.md", nfc]
    assert [n.rel_path for n in read_notes(tmp_path, ["demo"])] == ["Entrées/b.md", nfc]
    assert (root / nfc).read_text(encoding="utf-8").endswith("\nA2.\n")

    (root / nfd).write_bytes((root / nfc).read_bytes().replace(b"A2.", b"old"))      # twins, as before the fix
    assert [(n.rel_path, n.body) for n in read_notes(tmp_path, ["demo"]) if n.rel_path != "Entrées/b.md"] == [
        (nfc, "A2.\n")]


def test_a_case_only_rename_on_a_file_system_that_ignores_case_is_no_conflict(tmp_path: Path) -> None:
    """The source renames ``Foo.md`` to ``foo.md``: on macOS or Windows ``vault/demo/foo.md`` is the build's
    ``Foo.md``, which was moved aside as "a file docsvault did not write" (``foo (edited).md``, a stale copy of a
    generated note, session 43). Simulated here by a hard link: both names reach one file, as there."""
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note("Foo.md", "Foo.\n")])
    os.link(root / "Foo.md", root / "foo.md")
    result = write_source(tmp_path, "demo", [_note("foo.md", "Foo, renamed.\n")])
    assert (result.written, result.conflicts, result.foreign) == (["foo.md"], [], [])
    assert (root / "foo.md").read_text(encoding="utf-8").endswith("\nFoo, renamed.\n")
    assert sorted(load_manifest(root)) == ["_index.md", "foo.md"]


def test_a_folder_the_build_may_not_write_is_one_line_naming_the_file_and_what_to_do(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """The vault step failed with ``[Errno 1] Operation not permitted: '…/sub/.B.md.et9lsevi.tmp'``: a hidden temp
    file's name and no hint (session 43)."""
    from pipeline.common.errors import NoteError
    from pipeline.ingest import vault

    write_source(tmp_path, "demo", [_note("sub/b.md", "B.\n")])

    def refuse(path: Path, fill, **kwargs) -> None:
        raise PermissionError(1, "Operation not permitted", str(path.parent / f".{path.name}.et9lsevi.tmp"))

    monkeypatch.setattr(vault, "write_atomic_with", refuse)
    with pytest.raises(NoteError) as err:
        write_source(tmp_path, "demo", [_note("sub/b.md", "B2.\n")])
    assert str(err.value) == (
        "source 'demo': cannot write vault/demo/sub/b.md: Operation not permitted; make vault/demo/sub/ writable for "
        "docsvault (its owner and permissions, an immutable flag, a read-only mount) and build again")


def test_a_rename_or_removal_the_folder_refuses_is_one_line_too(tmp_path: Path, monkeypatch) -> None:
    """The NFD name a macOS sync left renamed to the note's NFC path, and a page that left the source removed, in a
    folder the build may not change (an immutable flag): the vault step failed with ``[Errno 1] Operation not
    permitted: '…/café.md' -> '…/café.md'`` (two names that look alike), not the one line a write gets."""
    import unicodedata

    from pipeline.common.errors import NoteError

    nfc = "café.md"
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note(nfc, "A.\n"), _note("gone.md", "G.\n")])
    os.rename(root / nfc, root / unicodedata.normalize("NFD", nfc))

    real_replace, real_unlink = os.replace, Path.unlink

    def refuse(src, *args, **kwargs) -> None:         # the folder's entries only: not the manifest's write
        if Path(src).parent != root or Path(src).name.startswith("."):
            return (real_unlink if isinstance(src, Path) and not args else real_replace)(src, *args, **kwargs)
        raise PermissionError(1, "Operation not permitted", str(src))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(NoteError) as err:
        write_source(tmp_path, "demo", [_note(nfc, "A2.\n"), _note("gone.md", "G.\n")])
    assert str(err.value) == (
        "source 'demo': cannot write vault/demo/café.md: Operation not permitted; make vault/demo/ writable for "
        "docsvault (its owner and permissions, an immutable flag, a read-only mount) and build again")
    monkeypatch.undo()
    write_source(tmp_path, "demo", [_note(nfc, "A2.\n"), _note("gone.md", "G.\n")])
    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(NoteError) as err:
        write_source(tmp_path, "demo", [_note(nfc, "A2.\n")])
    assert str(err.value).startswith("source 'demo': cannot write vault/demo/gone.md: Operation not permitted; ")


def test_an_edit_saved_while_the_build_flushes_the_new_version_is_kept(tmp_path: Path, monkeypatch) -> None:
    """The build hashed ``b.md`` (the build's, unedited), then wrote and fsynced the new version, then replaced
    the file: an edit the user saved meanwhile (Obsidian saves every ~2 s while one types) was replaced without a
    copy (session 43). The file is now judged right before the replace."""
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("b.md", "B.\n")])
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1].startswith(".b.md."):    # b.md's new version
            (root / "b.md").write_text("saved while the build ran\n", encoding="utf-8")

    monkeypatch.setattr(os, "fsync", fsync)
    result = write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("b.md", "B2.\n")])
    monkeypatch.undo()
    assert result.conflicts == [("b.md", "b (edited).md")]
    assert (root / "b (edited).md").read_text(encoding="utf-8") == "saved while the build ran\n"
    assert (root / "b.md").read_text(encoding="utf-8").endswith("\nB2.\n")


def test_temp_files_a_killed_write_left_in_the_folder_go(tmp_path: Path) -> None:
    """A build killed between writing a note's temp file and replacing the note left ``.b.md.k2j4x9_q.tmp`` in
    ``vault/<source>/`` for good (hidden in Obsidian, not by git or a sync tool; session 43); the next write of
    the source removes it. A dot file of the user's stays, one shaped like a temp file too when the file it would
    be the temp of is none the build writes (``.plan.draft_v2.tmp`` was deleted before session 49)."""
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("sub/b.md", "B.\n")])
    (root / "sub" / ".b.md.k2j4x9_q.tmp").write_text("---\ntitle: b\n", encoding="utf-8")
    (root / ".mine.tmp").write_text("mine\n", encoding="utf-8")
    (root / ".plan.draft_v2.tmp").write_text("mine too\n", encoding="utf-8")    # a temp's shape, of no note here
    write_source(tmp_path, "demo", [_note("a.md", "A.\n"), _note("sub/b.md", "B.\n")])
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob(".*") if p.is_file()) == [
        ".mine.tmp", ".plan.draft_v2.tmp"]


def test_the_edited_line_says_where_your_version_stays(tmp_path: Path) -> None:
    """``status`` and ``check-vault`` said that the next build keeps an edited generated note as ``<name>
    (edited).md``; when its page has left the source it stays where it is (session 43)."""
    from types import SimpleNamespace

    from pipeline.ingest.vault_check import user_files_lines

    write_source(tmp_path / "vault", "demo", [_note("a.md", "A.\n")])
    (tmp_path / "vault" / "demo" / "a.md").write_text("mine now\n", encoding="utf-8")
    settings = SimpleNamespace(vault_dir=tmp_path / "vault")
    assert user_files_lines(settings, SimpleNamespace(name="demo")) == [(
        "demo: 1 generated file(s) edited since the last build: a.md; the next build keeps your version, as "
        "'<name> (edited).md' next to the note, or where it is when its page has left the source")]


def test_a_deleted_note_of_the_templates_folder_is_not_said_to_come_back(tmp_path: Path) -> None:
    """A template's note an earlier version wrote (builds leave an Obsidian vault's templates folder out since
    session 47), deleted from the vault before the upgraded build: ``status`` said the next build writes it again,
    which none does; it is named apart, as left out by that build."""
    from types import SimpleNamespace

    from pipeline.ingest.vault_check import user_files_lines
    from pipeline.models import Source

    (tmp_path / "src" / ".obsidian").mkdir(parents=True)
    (tmp_path / "src" / ".obsidian" / "templates.json").write_text('{"folder": "Templates"}', encoding="utf-8")
    write_source(tmp_path / "vault", "demo", [_note("a.md", "A.\n"), _note("Templates/Daily.md", "D.\n")])
    (tmp_path / "vault" / "demo" / "a.md").unlink()
    (tmp_path / "vault" / "demo" / "Templates" / "Daily.md").unlink()
    source = Source(name="demo", kind="local", path=(tmp_path / "src",), format="obsidian")
    assert user_files_lines(SimpleNamespace(vault_dir=tmp_path / "vault"), source) == [
        ("demo: 1 generated file(s) deleted since the last build: a.md; search still serves them, and the next "
         "build writes them again"),
        ("demo: 1 generated file(s) of the Obsidian vault's templates folder 'Templates/' deleted since the last "
         "build: Templates/Daily.md; search still serves them until the next build, which leaves that folder out")]


def test_your_file_moved_out_of_a_notes_way_stays_yours(tmp_path: Path) -> None:
    """A file of the user's at the path of a new note, moved to ``Future (edited).md``, was from then on called "a
    copy of your edits to generated notes (merge and delete them when done)" by ``status``, ``check-vault`` and
    each build (session 43): it is the user's own file, named with their other files."""
    from types import SimpleNamespace

    from pipeline.cli import vault_lines
    from pipeline.ingest.vault_check import user_files_lines

    root = tmp_path / "vault" / "demo"
    write_source(root.parent, "demo", [_note("a.md", "A.\n")])
    (root / "Future.md").write_text("my plans\n", encoding="utf-8")
    (root / "a.md").write_text("edited\n", encoding="utf-8")
    first = write_source(root.parent, "demo", [_note("a.md", "A2.\n"), _note("Future.md", "F.\n")])
    assert first.conflicts == [("Future.md", "Future (edited).md"), ("a.md", "a (edited).md")]
    assert audit(root, "demo")[::5] == (["Future (edited).md"], ["a (edited).md"])
    again = write_source(root.parent, "demo", [_note("a.md", "A2.\n"), _note("Future.md", "F.\n")])
    assert again.kept == ["Future (edited).md", "a (edited).md"]
    meta = {"kept": 2, "kept_files": list(again.kept), "conflicts": [], "vault_dir": str(root)}
    assert vault_lines("demo", meta) == [
        "demo: kept 1 file(s) in vault/demo/ that docsvault did not write: Future (edited).md",
        "demo: kept 1 copy(ies) of your edits to generated notes (merge and delete them when done): a (edited).md"]
    assert [line.split(":")[1] for line in user_files_lines(SimpleNamespace(vault_dir=root.parent),
                                                            SimpleNamespace(name="demo"))] == [
        " 1 file(s) in vault/demo/ that docsvault did not write are kept (never changed or removed by a build)",
        (" 1 copy(ies) of your edits to generated notes, kept as a build replaced the note (never changed or "
         "removed by a build; merge and delete them when done)")]


def test_frontmatter_check_leaves_out_a_generated_note_the_user_is_editing(tmp_path: Path, tiny_vault: Path) -> None:
    """A generated note the user saves (in Obsidian) after the vault step wrote it, also while the build runs and
    caught half written (empty), is the user's edit, not the build's output: the vault asset's blocking
    ``frontmatter_valid`` check does not fail the source on it (in session 45 a build failed `me` with
    'blocking asset check failed … me/vault: frontmatter_valid' while the user kept saving its notes)."""
    settings, source = local_source(tmp_path, "tiny", tiny_vault)
    build.vault_stage(settings, source)
    root = settings.vault_dir / "tiny"
    assert (build.frontmatter_check(settings, source)["invalid"], build.frontmatter_check(settings, source)["notes"]) \
        == (0, 6)
    (root / "Ducks.md").write_text("", encoding="utf-8")                      # a save caught half written
    text = (root / "Install guide.md").read_text(encoding="utf-8")
    (root / "Install guide.md").write_text("\n".join(ln for ln in text.split("\n") if not ln.startswith("source_path:")),
                                         encoding="utf-8")                   # a property removed in Obsidian
    check = build.frontmatter_check(settings, source)
    assert (check["invalid"], check["notes"], list(check["first_invalid"])) == (0, 4, [])
    (root / "Home.md").write_text("---\ntitle: x\n", encoding="utf-8")     # a generated note damaged …
    build.vault_stage(settings, source)                                      # … is moved aside and written again
    assert (build.frontmatter_check(settings, source)["invalid"], build.frontmatter_check(settings, source)["notes"]) \
        == (0, 6)


def test_status_of_a_source_added_back_names_your_copies_before_its_build(tmp_path: Path) -> None:
    """A source removed from sources.yaml and added back, not built yet (no manifest): `status` (audit) counted
    your renamed copy (`Ben 2.md`, a sync's copy) as one of the build's notes, so it did not name it among your
    files, though the next build keeps it as yours."""
    from pipeline.models import text_hash

    fm = {"title": "Ben", "source": "demo", "source_path": "Ben.md", "content_hash": text_hash("Ben.\n")}
    root = tmp_path / "demo"
    write_source(tmp_path, "demo", [Note("demo", "Ben.md", "Ben.md", "Ben", fm, "Ben.\n")])
    (root / "Ben 2.md").write_bytes((root / "Ben.md").read_bytes())
    manifest_path(root).unlink()
    found = audit(root, "demo")
    assert (found.user_files, found.owned, found.has_manifest) == (["Ben 2.md"], ["Ben.md", "_index.md"], False)


def test_an_edited_note_whose_page_left_the_source_is_named_as_kept_where_it_is(tmp_path: Path) -> None:
    """A generated note you edited whose page then left the source stays where it is, as your file; the build only
    counted it among "kept N file(s) … that docsvault did not write" (fifth or later: `and 8 more`), so nothing
    said that the page had gone and your edit was no longer a note of the source (session 49). Now one line names
    it, and it is not named again among your own files."""
    from pipeline.cli import vault_lines

    root = tmp_path / "vault" / "demo"
    write_source(root.parent, "demo", [_note("a.md", "A.\n"), _note("b.md", "B.\n"), _note("c.md", "C.\n")])
    (root / "a.md").write_text("A.\n\nmy notes on a\n", encoding="utf-8")
    (root / "Mine.md").write_text("# mine\n", encoding="utf-8")
    result = write_source(root.parent, "demo", [_note("c.md", "C.\n")])
    assert (result.removed, result.left_edited, result.kept) == (["b.md"], ("a.md",), ["Mine.md", "a.md"])
    assert (root / "a.md").read_text(encoding="utf-8") == "A.\n\nmy notes on a\n"
    meta = {"kept": 2, "kept_files": list(result.kept), "conflicts": [], "vault_dir": str(root), "removed": 1,
            "removed_files": list(result.removed), "left_edited": list(result.left_edited)}
    assert vault_lines("demo", meta) == [
        "demo: kept 1 file(s) in vault/demo/ that docsvault did not write: Mine.md",
        "demo: removed (their pages left the source): b.md",
        ("demo: kept where they are, as your files (their pages left the source, but you edited them since the "
         "build wrote them): a.md")]
    assert write_source(root.parent, "demo", [_note("c.md", "C.\n")]).left_edited == ()     # said once
