"""Rule 6's character cap: a run without spaces, which a WordPiece tokenizer reads as one [UNK] per word, is cut
into chunks of at most max_tokens x MAX_CHARS_PER_TOKEN characters (breadcrumb included)."""

from __future__ import annotations

from pipeline.index.chunk import MAX_CHARS_PER_TOKEN, chunk_note
from pipeline.models import Note


def _wordpiece_like(text: str) -> int:
    """One token per word however long, plus [CLS]/[SEP]: how WordPiece counts a word over 100 characters."""
    return len(text.split()) + 2


def _note(body: str) -> Note:
    return Note("notes", "long.md", "long.md", "Long", {"title": "Long"}, body)


def test_a_two_million_character_run_is_cut_at_the_character_cap():
    run = "x" * 2_000_000
    chunks = chunk_note(_note(run), count_tokens=_wordpiece_like, max_tokens=256)
    cap = 256 * MAX_CHARS_PER_TOKEN
    assert cap == 8192
    assert all(len(c.embed_text) <= cap for c in chunks)
    assert "".join(c.text for c in chunks) == run
    assert len(chunks) == 2_000_000 // (cap - len("Long\n\n")) + 1 == 245


def test_a_japanese_run_without_spaces_is_capped_too():
    run = "あ" * 50_000
    chunks = chunk_note(_note(run), count_tokens=_wordpiece_like, max_tokens=512)
    assert all(len(c.embed_text) <= 512 * MAX_CHARS_PER_TOKEN for c in chunks)
    assert "".join(c.text for c in chunks) == run
    assert len(chunks) == 4


def test_a_normal_note_is_unchanged_by_the_cap(monkeypatch):
    from pipeline.index import chunk

    body = "# Long\n\n" + "\n\n".join(f"Paragraph {i} has a few words about otters." for i in range(40))
    capped = chunk_note(_note(body), count_tokens=_wordpiece_like, max_tokens=64)
    monkeypatch.setattr(chunk, "MAX_CHARS_PER_TOKEN", 10**9)
    assert chunk_note(_note(body), count_tokens=_wordpiece_like, max_tokens=64) == capped
    assert len(capped) == 6
