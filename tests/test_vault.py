"""Vault: idempotent atomic writes, removal, traversal refusal, read-back round trip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.common.errors import NoteError
from pipeline.ingest.normalize import normalize_source
from pipeline.ingest.vault import VaultResult, read_notes, write_source
from pipeline.models import Note, RawFile, Source


def _note(rel: str, body: str = "# T\n\nText.\n", source: str = "demo", **fm) -> Note:
    sp = rel
    front = {"title": rel.rsplit("/", 1)[-1][:-3], "source": source, "source_path": sp,
             "created": "2026-04-05", **fm}
    return Note(source=source, source_path=sp, rel_path=rel, title=front["title"], frontmatter=front, body=body)


def test_write_then_idempotent_rewrite(tmp_path):
    notes = [_note("a.md"), _note("sub/b.md", "Body ü\n")]
    first = write_source(tmp_path, "demo", notes)
    assert first == VaultResult(["a.md", "sub/b.md"], [], [], "_index.md")
    path = tmp_path / "demo" / "sub" / "b.md"
    assert path.read_text(encoding="utf-8") == (
        "---\ntitle: b\nsource: demo\nsource_path: sub/b.md\ncreated: '2026-04-05'\n---\n\nBody ü\n"
    )
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    second = write_source(tmp_path, "demo", notes)
    assert second == VaultResult([], ["a.md", "sub/b.md"], [], "_index.md")
    assert path.stat().st_mtime_ns == 1_000_000_000
    changed = [_note("a.md", "# T\n\nNew.\n"), notes[1]]
    assert write_source(tmp_path, "demo", changed) == VaultResult(["a.md"], ["sub/b.md"], [], "_index.md")
    assert path.stat().st_mtime_ns == 1_000_000_000
    assert not [p for p in (tmp_path / "demo").rglob("*") if p.name.endswith(".tmp")]


def test_removal_of_stale_notes_and_empty_folders(tmp_path):
    write_source(tmp_path, "demo", [_note("a.md"), _note("old/deep/gone.md")])
    (tmp_path / "demo" / ".obsidian").mkdir()
    (tmp_path / "demo" / ".obsidian" / "keep.md").write_text("x")
    (tmp_path / "demo" / "image.png").write_bytes(b"png")
    result = write_source(tmp_path, "demo", [_note("a.md")])
    assert result == VaultResult([], ["a.md"], ["old/deep/gone.md"], "_index.md", kept=["image.png"])
    assert not (tmp_path / "demo" / "old").exists()
    assert (tmp_path / "demo" / ".obsidian" / "keep.md").exists()
    assert (tmp_path / "demo" / "image.png").exists()


def test_other_sources_untouched(tmp_path):
    write_source(tmp_path, "other", [_note("x.md", source="other")])
    (tmp_path / "README.md").write_text("vault readme")
    write_source(tmp_path, "demo", [_note("a.md")])
    write_source(tmp_path, "demo", [])
    assert (tmp_path / "other" / "x.md").exists()
    assert (tmp_path / "README.md").read_text() == "vault readme"
    assert not (tmp_path / "demo" / "a.md").exists()


@pytest.mark.parametrize("rel", ["../escape.md", "/etc/passwd.md", "a/../../x.md", "sub\\..\\..\\x.md", "", "a.txt"])
def test_traversal_refused(tmp_path, rel):
    bad = Note(source="demo", source_path="x", rel_path=rel, title="x", frontmatter={}, body="")
    with pytest.raises(NoteError):
        write_source(tmp_path / "vault", "demo", [_note("ok.md"), bad])
    assert not (tmp_path / "escape.md").exists()
    assert not (tmp_path / "vault" / "demo" / "ok.md").exists()


def test_symlinked_folder_escape_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "vault" / "demo").mkdir(parents=True)
    os.symlink(outside, tmp_path / "vault" / "demo" / "link")
    with pytest.raises(NoteError, match="outside"):
        write_source(tmp_path / "vault", "demo", [_note("link/x.md")])
    assert list(outside.iterdir()) == []


def test_bad_source_name_and_foreign_note(tmp_path):
    with pytest.raises(NoteError):
        write_source(tmp_path, "../x", [])
    with pytest.raises(NoteError, match="belongs to source"):
        write_source(tmp_path, "demo", [_note("a.md", source="other")])
    with pytest.raises(NoteError, match="share"):
        write_source(tmp_path, "demo", [_note("a.md"), _note("a.md")])


def test_read_notes_round_trip(tmp_path):
    src = tmp_path / "src"
    files = {
        "docs/guide.md": "---\ntitle: Guide\ncreated: 2026-04-05\ntags: [a, b]\n---\n# Guide\n\nSee [x](other.md).\n",
        "docs/other.mdx": "<Note>\nHi\n</Note>\n",
        "docs/日本語.md": "# 見出し\n\n本文。\n",
    }
    raws = []
    for sp, text in files.items():
        (src / sp).parent.mkdir(parents=True, exist_ok=True)
        (src / sp).write_text(text, encoding="utf-8")
        raws.append(RawFile("demo", sp, src / sp))
    notes = normalize_source(Source(name="demo", kind="local", format="mdx"), raws, "2026-01-01T00:00:00+00:00").notes
    vault = tmp_path / "vault"
    write_source(vault, "demo", notes)
    write_source(vault, "b-src", [_note("z.md", source="b-src")])
    (vault / "README.md").write_text("top-level readme")
    (vault / "empty").mkdir()
    (vault / ".obsidian").mkdir()
    (vault / ".obsidian" / "x.md").write_text("# not a note")
    back = read_notes(vault)
    assert [(n.source, n.rel_path) for n in back] == [
        ("b-src", "z.md"), ("demo", "docs/guide.md"), ("demo", "docs/other.md"), ("demo", "docs/日本語.md")]
    assert back[1:] == notes
    assert read_notes(vault, ["demo"]) == notes
    assert read_notes(vault, ["missing"]) == []


def test_read_notes_fallbacks(tmp_path):
    (tmp_path / "s" / "sub").mkdir(parents=True)
    (tmp_path / "s" / "sub" / "Plain.md").write_text("just text\n")
    (tmp_path / "s" / ".trash").mkdir()
    (tmp_path / "s" / ".trash" / "old.md").write_text("x")
    (note,) = read_notes(tmp_path)
    assert (note.source, note.source_path, note.rel_path, note.title, note.frontmatter, note.body) == (
        "s", "sub/Plain.md", "sub/Plain.md", "Plain", {}, "just text\n")


# ---- index note (map of content) ----

def test_index_note_maps_top_level_sections_and_is_not_read_back(tmp_path):
    notes = [_note("docs/Home.md"), _note("docs/guide/index.md"), _note("docs/guide/Install.md"),
             _note("docs/guide/deep/x.md"), _note("docs/api/api.md"), _note("docs/api/v2/index.md")]
    result = write_source(tmp_path, "demo", notes)
    assert result.index == "_index.md" and "_index.md" not in result.written
    text = (tmp_path / "demo" / "_index.md").read_text(encoding="utf-8")
    assert text == (
        "---\ntitle: demo index\ndocsvault: index\nsource: demo\nsource_path: _index.md\n---\n\n"
        "# demo\n\nMap of content of the source `demo`: 6 notes.\n\n- [[demo/docs/Home|Home]]\n\n"
        "## api\n\n- [[demo/docs/api/api|api]]\n- [[demo/docs/api/v2/index|index]] — v2/ (1 notes)\n\n"
        "## guide\n\n- [[demo/docs/guide/index|index]]\n- [[demo/docs/guide/Install|Install]]\n- deep/ (1 notes)\n"
    )
    assert [n.rel_path for n in read_notes(tmp_path)] == sorted(n.rel_path for n in notes)
    # a note already called _index.md keeps its path; the map moves aside
    again = write_source(tmp_path, "demo", [*notes, _note("_index.md")])
    assert again.index == "_index (2).md" and "_index.md" in again.written
    assert write_source(tmp_path, "demo", [*notes, _note("_index.md")]).written == []


def test_deleting_a_page_removes_exactly_its_note(tmp_path):
    notes = [_note("a.md"), _note("sub/b.md"), _note("sub/c.md")]
    write_source(tmp_path, "demo", notes)
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "demo").rglob("*.md")}
    result = write_source(tmp_path, "demo", [notes[0], notes[2]])
    assert (result.written, result.removed) == ([], ["sub/b.md"])
    left = {p: p.stat().st_mtime_ns for p in (tmp_path / "demo").rglob("*.md")}
    assert sorted(p.relative_to(tmp_path).as_posix() for p in left) == ["demo/_index.md", "demo/a.md", "demo/sub/c.md"]
    assert all(left[p] == mtimes[p] for p in left if p.name != "_index.md")


@pytest.mark.parametrize("name", ["../x", "a/b", "a\\b", "C:", ".", "..", "x\x00", "con", "nul.txt", "abc.", "A", ""])
def test_source_names_that_cannot_be_folders(tmp_path, name):
    with pytest.raises(NoteError):
        write_source(tmp_path / "vault", name, [])
    assert not (tmp_path / "vault").exists() or list((tmp_path / "vault").iterdir()) == []


def test_a_source_with_no_note_gets_its_folder_and_an_empty_manifest(tmp_path):
    """An empty source's first write leaves vault/<source>/ (the record that its vault was written, which its
    chunk stage reads), as a source that lost its last note keeps it."""
    assert write_source(tmp_path, "demo", []) == VaultResult([], [], [], None)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "demo", "demo/.docsvault", "demo/.docsvault/manifest.json"]
    assert (tmp_path / "demo" / ".docsvault" / "manifest.json").read_text(encoding="utf-8") == (
        '{\n "version": 1,\n "source": "demo",\n "files": {}\n}\n')
    assert write_source(tmp_path, "demo", []) == VaultResult([], [], [], None)
    assert read_notes(tmp_path) == []


def test_a_generated_note_whose_frontmatter_you_broke_is_named_with_the_build_that_fixes_it(tmp_path: Path) -> None:
    """A generated note whose frontmatter you broke in Obsidian (or a sync left half-written): a build of another
    source reads every source's notes for the link graph and the warehouse, and failed with the YAML error alone
    ("fix or quote the value"); the error now says the file was edited and which build keeps your version aside
    and writes the note again. A note of your own vault folder without a manifest keeps the plain error."""
    from pipeline.common.errors import NoteError
    from pipeline.ingest.vault import read_notes, write_source
    from pipeline.models import Note

    fm = {"title": "Home", "source": "me", "source_path": "Home.md"}
    write_source(tmp_path, "me", [Note("me", "Home.md", "Home.md", "Home", fm, "# Home\n")])
    (tmp_path / "me" / "Home (edited).md").write_text("# an older copy\n", encoding="utf-8")
    path = tmp_path / "me" / "Home.md"
    path.write_bytes(path.read_bytes().replace(b"title: Home", b"title: [Home"))
    with pytest.raises(NoteError) as err:
        read_notes(tmp_path, ["me"])
    assert str(err.value).startswith("vault/me/Home.md: line 2: invalid YAML frontmatter: ")
    assert str(err.value).endswith(
        " (vault/me/Home.md was edited since the build wrote it: `docsvault build --source me` keeps your version "
        "as vault/me/Home (edited 2).md and writes the note again)")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "A.md").write_text("---\ntitle: [A\n---\n", encoding="utf-8")
    with pytest.raises(NoteError) as err:
        read_notes(tmp_path, ["mine"])
    assert "edited since" not in str(err.value)
