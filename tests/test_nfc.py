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


def test_two_files_named_alike_in_nfc_and_nfd_the_skip_line_tells_them_apart(tmp_path: Path) -> None:
    from pipeline.ingest.fetch.local import _walk_root

    root = tmp_path / "notes"
    root.mkdir()
    nfc, nfd = "Crème.md", unicodedata.normalize("NFD", "Crème.md")
    (root / nfc).write_text("# one\n", encoding="utf-8")
    (root / nfd).write_text("# two\n", encoding="utf-8")
    warnings: list[str] = []
    found = _walk_root(root, warnings, "me")
    kept = found["Crème.md"].name
    skipped = nfd if kept == nfc else nfc
    forms = {nfc: ("NFC", "Cr\\xe8me.md"), nfd: ("NFD", "Cre\\u0300me.md")}
    assert warnings == [f"source 'me': skipped {root / skipped}: its name is another file's name in another Unicode "
                        f"normalization ({forms[skipped][0]} name {forms[skipped][1]}, the kept file's "
                        f"{forms[kept][0]} {forms[kept][1]}); rename one of them"]
