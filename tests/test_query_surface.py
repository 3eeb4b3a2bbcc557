"""The query surface as the two shells show it (session 42 review): `docsvault search --json` and the MCP search
tool answer one query alike, however long it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.models import Chunk, Note
from tests.tiny_warehouse import publish_chunks

runner = CliRunner()

PAGES = {
    "Pelican.md": "A pelican is a large water bird.",
    "Stork.md": "A stork wades; it is no water bird.",
    "Zebra.md": "A zebra crossing is a road marking.",
}


@pytest.fixture
def birds(tiny_env: Path) -> Settings:
    """A warehouse of three one-chunk notes of source ``tiny`` and their vault files."""
    settings = Settings.from_env()
    notes, chunks = [], []
    for rel, text in PAGES.items():
        note = Note("tiny", rel, rel, rel[:-3], {"title": rel[:-3]}, text)
        notes.append(note)
        chunks.append(Chunk(f"{note.note_id}-0", note.note_id, "tiny", 0, (rel[:-3],), rel[:-3], text))
        (settings.vault_dir / "tiny").mkdir(parents=True, exist_ok=True)
        (settings.vault_dir / "tiny" / rel).write_text(f"# {rel[:-3]}\n\n{text}\n", encoding="utf-8")
    settings.warehouse_path.parent.mkdir(parents=True, exist_ok=True)
    publish_chunks(settings.warehouse_path, notes, chunks, dims=(384,))
    return settings


def _cli_paths(query: str) -> tuple[int, list[str], str]:
    result = runner.invoke(app, ["search", "--json", "--", query])
    paths = [h["vault_path"] for h in json.loads(result.stdout)] if result.exit_code == 0 else []
    return result.exit_code, paths, result.stderr


FILLER = "word " * 399          # 1,995 characters: what follows straddles or passes the 2,000 the lanes rank


def test_a_long_query_with_a_phrase_past_2000_chars_is_no_syntax_error_in_mcp(birds: Settings) -> None:
    from pipeline.mcp_server import VaultService

    query = FILLER + '"water bird" -stork'
    assert _cli_paths(query)[:2] == (0, ["tiny/Pelican.md"])
    hits = VaultService(birds).search(query)["hits"]
    assert [h["path"] for h in hits] == ["tiny/Pelican.md"]


def test_a_filter_past_2000_chars_applies_in_mcp_as_in_the_cli(birds: Settings) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    query = FILLER + "water source:nope"
    code, _, err = _cli_paths(query)
    assert code == 1 and err.startswith("error: unknown source 'nope'")
    with pytest.raises(ToolFailure) as exc:
        VaultService(birds).search(query)
    assert str(exc.value).startswith("unknown source 'nope'")
