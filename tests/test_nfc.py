"""Issue 14: paths are NFC everywhere (fetch, notes, vault), and `read` accepts NFC or NFD."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from pipeline import stages as build
from pipeline.common import artifacts
from pipeline.search.reader import read_note
from tests.conftest import local_source

NFC = "ガイドブック"
NFD = unicodedata.normalize("NFD", NFC)


def test_nfd_file_names_become_nfc_and_read_takes_both(tmp_path: Path) -> None:
    assert NFD != NFC
    root = tmp_path / "notes"
    (root / f"章{NFD}").mkdir(parents=True)
    (root / f"章{NFD}" / f"{NFD}.md").write_text("# ガイド\n\n本文です。\n", encoding="utf-8")
    settings, source = local_source(tmp_path, "ja", root)
    build.vault_stage(settings, source)
    note = artifacts.load_notes(settings, "ja")[0]
    want = f"章{NFC}/{NFC}.md"
    assert (note.source_path, note.rel_path, note.frontmatter["source_path"]) == (want, want, want)
    assert [p.relative_to(settings.vault_dir / "ja").as_posix() for p in (settings.vault_dir / "ja").rglob("*.md")
            if p.name != "_index.md"] == [want]
    for form in (f"ja/{want}", unicodedata.normalize("NFD", f"ja/{want}")):
        page = read_note(settings.vault_dir, form)
        assert (page.path, page.text) == (f"ja/{want}", "# ガイド\n\n本文です。\n")


def test_two_notes_named_alike_in_nfc_and_nfd_one_is_a_skipped_note_not_an_attachment(tmp_path: Path) -> None:
    """Finding of a new user's run: ``Crème.md`` written in NFC and in NFD (macOS writes NFD names). The fetch reads
    the first in name order and skips the other; the skipped note is reported once, readable (no escapes), as a
    skipped file of the normalize stage, not among the attachments not copied. A twin attachment is one of those."""
    from pipeline.cli import vault_lines
    from pipeline.config import Settings
    from pipeline.ingest.sources import load_sources

    root = tmp_path / "notes"
    root.mkdir()
    nfc, nfd = "Crème.md", unicodedata.normalize("NFD", "Crème.md")
    (root / nfc).write_text("# one\n", encoding="utf-8")
    (root / nfd).write_text("# two\n\n![[Crème.png]]\n", encoding="utf-8")
    (root / "Crème.png").write_bytes(b"PNG nfc")
    (root / unicodedata.normalize("NFD", "Crème.png")).write_bytes(b"PNG nfd")
    (root / unicodedata.normalize("NFD", "x\u00e9.txt")).write_text("x")      # a twin no note reads: not reported
    (root / "x\u00e9.txt").write_text("x")
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: me\n    kind: local\n    path: {root}\n    format: obsidian\n",
                       encoding="utf-8")
    settings = Settings(sources, tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    source = load_sources(sources)[0]
    note_line = ("source 'me': Crème.md: two notes have this name, in NFD and NFC form (macOS writes names in NFD); "
                 "the NFD one is read (first in name order), the NFC one is skipped, since the vault keeps one per "
                 "name; rename one of the two to keep both")
    file_line = ("source 'me': Crème.png: two files have this name, in NFD and NFC form (macOS writes names in NFD); "
                 "the NFD one is copied (first in name order), the NFC one is skipped, since the vault keeps one per "
                 "name; rename one of the two to keep both")
    assert build.fetch_stage(settings, source).warning_lines == (note_line, file_line)
    normalized = build.normalize_stage(settings, source)
    assert (normalized.errors, normalized.error_lines) == (1, (note_line,))
    assert Path(normalized.errors_file or "").read_text(encoding="utf-8").splitlines() == [note_line]
    assert build.normalize_stage(settings, source).error_lines == (note_line,)        # a rebuild says it again
    assert [n.body for n in artifacts.load_notes(settings, "me")] == ["# two\n\n![[Crème.png]]\n"]
    meta = build.vault_stage(settings, source)
    assert (meta.attachments_written, meta.attachments_skipped, meta.attachment_skip_lines) == (1, 1, (file_line,))
    assert (settings.vault_dir / "me" / "Crème.png").read_bytes() == b"PNG nfd"       # the file the fetch keeps
    assert vault_lines("me", meta.as_dict(), settings.state_dir) == [
        "me: 1 attachment(s) copied (1 in the vault, 0.0 MiB)",
        f"me: 1 attachment(s)/link(s) not copied, each with its reason in {settings.state_dir}/me.vault-skipped.txt",
        f"  {file_line}"]


def test_a_note_whose_name_is_not_utf8_is_a_skipped_note_not_an_attachment(tmp_path: Path) -> None:
    """Finding of a new user's run (session 44): ``caf\\xe9.md`` (a Latin-1 name from an old zip) and a folder
    ``dir\\xff/`` of notes were listed under "attachment(s)/link(s) not copied", as ``'…/caf\\udce9.md'``, and not
    counted among the files the build skipped (status, errors file, ``all_files_read``); a build after adding
    only such a note said nothing changed. Now each is a skipped note, its name shown with the byte as written."""
    import os

    from pipeline.config import Settings
    from pipeline.ingest.fetch.watch import check_upstream
    from pipeline.ingest.sources import load_sources

    root = tmp_path / "notes"
    root.mkdir()
    (root / "Home.md").write_text("# Home\n", encoding="utf-8")
    raw = os.fsencode(root)
    bad_dir = raw + b"/dir\xff"
    os.mkdir(bad_dir)
    with open(bad_dir + b"/inner.md", "w", encoding="utf-8") as fh:
        fh.write("# inner\n")
    with open(raw + b"/x\xe9.txt", "w", encoding="utf-8") as fh:     # no note and nothing a note embeds
        fh.write("x")
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: me\n    kind: local\n    path: {root}\n", encoding="utf-8")
    settings = Settings(sources, tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    source = load_sources(sources)[0]
    dir_line = ("source 'me': dir\\xff/: a folder name that is not valid UTF-8; its 1 note(s) are not read: rename "
                "it in UTF-8 to keep them")
    build.fetch_stage(settings, source)
    assert build.normalize_stage(settings, source).error_lines == (dir_line,)
    assert build.vault_stage(settings, source).attachment_skip_lines == ()
    assert check_upstream(source, settings).changed is False
    with open(raw + b"/caf\xe9.md", "w", encoding="utf-8") as fh:
        fh.write("# cafe\n")
    assert check_upstream(source, settings).changed is True         # a new note, if unreadable, is a change
    note_line = ("source 'me': caf\\xe9.md: a file name that is not valid UTF-8; the note is not read: rename it in "
                 "UTF-8 to keep it")
    build.fetch_stage(settings, source)
    normalized = build.normalize_stage(settings, source)
    assert (normalized.errors, normalized.error_lines) == (2, (note_line, dir_line))
    assert Path(normalized.errors_file or "").read_text(encoding="utf-8").splitlines() == [note_line, dir_line]
    assert build.vault_stage(settings, source).attachment_skip_lines == ()
