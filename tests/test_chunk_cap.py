"""A huge note is cut at MAX_CHUNKS_PER_NOTE chunks by the chunk stage: one warning line naming it, the note kept
whole in the vault, its first chunks searchable, the warning repeated while the note is unchanged."""

from __future__ import annotations

from pathlib import Path

from pipeline import stages as b
from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.index.chunk import MAX_CHUNKS_PER_NOTE
from pipeline.index.embed import load_embedder
from pipeline.ingest.sources import load_sources
from pipeline.stages.results import ChunkResult

WARNING = ("source 'tiny': tiny/Log.md: only its first 1,500 chunks are searchable (0.5 MB of text, not indexed "
           "from section 'Entry 1500' on); split it into smaller notes to make all of it searchable (the note stays "
           "whole in the vault)")


def _chunk(settings: Settings) -> ChunkResult:
    (source,) = load_sources(settings.sources_file)
    b.fetch_stage(settings, source)
    b.normalize_stage(settings, source)
    b.vault_stage(settings, source)
    return b.chunk_stage(settings, source, load_embedder)


def test_huge_note_is_cut_with_one_warning_and_kept_whole(tiny_env: Path) -> None:
    # 1,600 sections of 30 words: one chunk each with the fake embedder (one token per word, 256 per chunk)
    text = "# Log\n\n" + "".join(f"## Entry {i}\n\n" + f"event{i} " * 30 + "\n\n" for i in range(1600))
    (tiny_env / "tinyvault" / "Log.md").write_text(text, encoding="utf-8")
    settings = Settings.from_env()
    meta = _chunk(settings)
    assert meta.warning_lines == (WARNING,) and MAX_CHUNKS_PER_NOTE == 1500
    log_chunks = [c for c in artifacts.load_chunks(settings, "tiny") if c.breadcrumb.startswith("Log")]
    assert len(log_chunks) == 1500
    assert log_chunks[-1].heading_path == ("Entry 1499",)
    assert "event1599" in (settings.vault_dir / "tiny" / "Log.md").read_text(encoding="utf-8")   # nothing lost
    # another note changes: the cut note is reused, and still reported
    (tiny_env / "tinyvault" / "Ducks.md").write_text("# Ducks\n\nDucks quack.\n", encoding="utf-8")
    again = _chunk(settings)
    assert (again.rechunked, again.warning_lines) == (1, (WARNING,))
    # nothing changes: the stage is skipped and says it again
    assert _chunk(settings).warning_lines == (WARNING,)
