"""A note named by its source and its path in the source, as a search hit gives them (`source`: prefect,
`source_path`: concepts/caching.mdx), was no note (session 48, an agent over MCP): `read(path="prefect/concepts/
caching.mdx")` answered "no note … did you mean 'Caching'?", while `concepts/caching.mdx` and the vault path
`prefect/concepts/caching.md` opened it. Now the joined form opens that source's note too."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.models import Chunk, Note
from pipeline.search.reader import NoteNotFoundError, find_note
from tests.tiny_warehouse import publish_chunks


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path]:
    vault, warehouse = tmp_path / "vault", tmp_path / "warehouse.duckdb"
    notes = [Note("prefect", "concepts/caching.mdx", "concepts/caching.md", "Caching", {"title": "Caching"},
                  "Caching lets a task reuse results."),
             Note("other", "concepts/caching.mdx", "concepts/caching.md", "Caching", {"title": "Caching"},
                  "Another source's page of the same path.")]
    for n in notes:
        (vault / n.vault_path).parent.mkdir(parents=True, exist_ok=True)
        (vault / n.vault_path).write_text(f"# Caching\n\n{n.body}\n", encoding="utf-8")
    publish_chunks(warehouse, notes, [Chunk(f"{n.note_id}-0", n.note_id, n.source, 0, ("Caching",), "Caching",
                                            n.body) for n in notes])
    return vault, warehouse


def test_a_source_and_its_source_path_name_the_note(built: tuple[Path, Path]) -> None:
    vault, warehouse = built
    assert find_note(vault, "prefect/concepts/caching.mdx", warehouse) == "prefect/concepts/caching.md"
    assert find_note(vault, "other/concepts/caching.mdx", warehouse) == "other/concepts/caching.md"
    with pytest.raises(NoteNotFoundError):              # a source that has no such file: still no note
        find_note(vault, "nosource/concepts/caching.mdx", warehouse)
