"""`related` of a note whose links all name notes the vault does not have said "this note has no outlinks or
backlinks" (session 48, an agent over MCP: `related(path="ja/会議メモ.md")` of a note linking [[存在しないノート]]),
so an agent took the note for unlinked. Now the message names those links and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.models import Chunk, Edge, Note
from pipeline.service import related_notes
from tests.tiny_warehouse import publish_chunks

TEXTS = {
    "会議メモ.md": "# 会議メモ\n\n- [[存在しないノート]] を後で書く\n",
    "Plans.md": "# Plans\n\nSee [[Zeta]], [[Alpha]], [[Beta]], [[Gamma]], [[Delta]], [[Epsilon]] and [[Alpha]].\n",
    "Alone.md": "# Alone\n\nNo links here.\n",
}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    s = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    notes = [Note("me", rel, rel, rel[:-3], {"title": rel[:-3]}, text) for rel, text in TEXTS.items()]
    for note in notes:
        (s.vault_dir / "me").mkdir(parents=True, exist_ok=True)
        (s.vault_dir / "me" / note.source_path).write_text(TEXTS[note.source_path], encoding="utf-8")
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "me", 0, (n.title,), n.title, TEXTS[n.source_path]) for n in notes]
    memo, plans = notes[0].note_id, notes[1].note_id
    edges = [Edge(memo, None, "存在しないノート", "wikilink")]
    edges += [Edge(plans, None, t, "wikilink", 2 if t == "Alpha" else 1)
              for t in ("Zeta", "Alpha", "Beta", "Gamma", "Delta", "Epsilon")]
    s.data_dir.mkdir(parents=True)
    publish_chunks(s.warehouse_path, notes, chunks, edges=edges)
    return s


def test_related_names_the_dangling_links_of_a_note_without_linked_notes(settings: Settings) -> None:
    assert related_notes(settings, "me/会議メモ.md") == {"path": "me/会議メモ.md", "related": [], "message": (
        "no linked notes: this note has no backlinks, and its links name no note of the vault ([[存在しないノート]]: "
        "create the note, or fix the link; `docsvault check-vault` lists every dangling link)")}
    assert related_notes(settings, "Plans")["message"] == (
        "no linked notes: this note has no backlinks, and its links name no note of the vault ([[Alpha]], "
        "[[Beta]], [[Delta]], [[Epsilon]], [[Gamma]] and 1 more: create the notes, or fix the links; "
        "`docsvault check-vault` lists every dangling link)")
    # a note with no link at all: and what to do (it ended at "backlinks", helper s49-ja)
    assert related_notes(settings, "me/Alone.md")["message"] == (
        "no linked notes: this note has no outlinks or backlinks; link it from another note ([[Alone]]), or find the "
        "notes near it in meaning with a search: `docsvault search Alone` / the search tool")


def test_related_points_a_dangling_link_at_the_note_read_finds_by_that_title(tmp_path: Path) -> None:
    """A user renamed `Camping.md` to `Outdoors.md` (its `# Camping` title kept): `[[Camping]]` in `Hiking.md` is
    dangling, as in Obsidian, but `read Camping` opens `me/Outdoors.md`. `related Hiking` told them to "create the
    note" Camping, a second note of that title; now it names the note and the link that reaches it."""
    s = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    texts = {"Hiking.md": "# Hiking\n\nBring layers. See [[Camping]] and [[Nowhere]].\n",
             "Outdoors.md": "# Camping\n\nPitch the tent on high ground.\n"}
    titles = {"Hiking.md": "Hiking", "Outdoors.md": "Camping"}
    (s.vault_dir / "me").mkdir(parents=True)
    notes = [Note("me", rel, rel, titles[rel], {"title": titles[rel]}, text) for rel, text in texts.items()]
    for rel, text in texts.items():
        (s.vault_dir / "me" / rel).write_text(text, encoding="utf-8")
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "me", 0, (n.title,), n.title, texts[n.source_path]) for n in notes]
    edges = [Edge(notes[0].note_id, None, t, "wikilink") for t in ("Camping", "Nowhere")]
    s.data_dir.mkdir(parents=True)
    publish_chunks(s.warehouse_path, notes, chunks, edges=edges)
    assert related_notes(s, "Hiking")["message"] == (
        "no linked notes: this note has no backlinks, and its links name no note of the vault ([[Camping]], "
        "[[Nowhere]]: create the notes, or fix the links; `docsvault check-vault` lists every dangling link); "
        "no note's file is called 'Camping', but the note me/Outdoors.md has that title or alias (`read Camping` "
        "opens it): to link it, write [[Outdoors]]")
