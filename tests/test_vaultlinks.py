"""Issue 14: a bare link whose name is also a note elsewhere in the merged vault is written in path form, so
Obsidian opens the note the link table resolved; unique names stay as written."""

from __future__ import annotations

from pathlib import Path

from pipeline.models import Note, text_hash
from pipeline.ingest.vault import write_source
from pipeline.index.vaultlinks import ambiguous_names, other_note_names, qualify_ambiguous_links

BODY = ("See [[Home|Open]] and [[Home#Setup]], [[Unique]], [[en/Home]].\n\n![[Home#^b1]]\n\n"
        "| a | b |\n|---|---|\n| [[Translations]] | [[Home\\|Start]] |\n\n`[[Home]]` in code\n")


def _n(source: str, rel: str, body: str = "x\n") -> Note:
    return Note(source, rel, rel, rel[:-3], {"source": source, "source_path": rel, "content_hash": text_hash(body)},
                body)


def test_ambiguous_bare_links_are_qualified(tmp_path: Path) -> None:
    write_source(tmp_path, "other", [_n("other", "Home.md"), _n("other", "Translations.md")])
    (tmp_path / "Inbox").mkdir()
    (tmp_path / "Inbox" / "Unique2.md").write_text("mine\n", encoding="utf-8")
    notes = [_n("help", "en/Start.md", BODY), _n("help", "en/Home.md"), _n("help", "en/Translations.md"),
             _n("help", "en/Unique.md")]
    others = other_note_names(tmp_path, "help")
    assert others == {"_index", "home", "translations", "unique2"}
    assert ambiguous_names(notes, others) == ["home", "translations"]
    out, n = qualify_ambiguous_links("help", notes, others)
    assert n == 6
    start = out[0]
    assert start.body == (
        "See [[help/en/Home|Open]] and [[help/en/Home#Setup|Home > Setup]], [[Unique]], [[help/en/Home|en/Home]].\n\n"
        "![[help/en/Home#^b1]]\n\n"
        "| a | b |\n|---|---|\n| [[help/en/Translations\\|Translations]] | [[help/en/Home\\|Start]] |\n\n"
        "`[[Home]]` in code\n")
    assert start.frontmatter["content_hash"] == text_hash(start.body)
    assert out[1:] == notes[1:]
