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
