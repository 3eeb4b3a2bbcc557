"""``parsed`` / ``parse_cached`` of a normalize and its progress count files, not cache lookups: a Markdown source
(any format but obsidian: its links are converted through the same cache, keyed ``links:…``) of 6 files recorded
``parsed: 12`` in Dagster and `docsvault build --json`, and its progress read 6/6 before the second pass began
(found by a Dagster user, session 42)."""

from __future__ import annotations

from pathlib import Path

from pipeline import stages as build
from pipeline.config import Settings
from pipeline.ingest.sources import load_sources


def test_a_markdown_source_counts_each_file_once(tiny_env: Path) -> None:
    (tiny_env / "sources.yaml").write_text(
        f"sources:\n  - name: tiny\n    kind: local\n    path: {tiny_env / 'tinyvault'}\n    format: markdown\n",
        encoding="utf-8")
    settings = Settings.from_env()
    source = load_sources(settings.sources_file)[0]
    progress: list[tuple[str, int, int]] = []

    def hook(stage: str, name: str, done: int, total: int) -> None:
        if stage == "normalize":
            progress.append((name, done, total))

    build.PROGRESS_HOOKS.append(hook)
    try:
        files = build.fetch_stage(settings, source).files
        first = build.normalize_stage(settings, source)
        assert (first.notes, first.parsed, first.parse_cached) == (files, files, 0)
        assert progress == [("tiny", 0, files), ("tiny", files, files)]
        edited = tiny_env / "tinyvault" / "Ducks.md"
        edited.write_text(edited.read_text(encoding="utf-8") + "\nDucks also dabble.\n", encoding="utf-8")
        build.fetch_stage(settings, source)
        again = build.normalize_stage(settings, source)
    finally:
        build.PROGRESS_HOOKS.remove(hook)
    assert (again.notes, again.parsed, again.parse_cached) == (files, 1, files - 1)
