"""Dagster definitions load, have the expected assets, and build the tiny vault end to end (fake embedder)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from pipeline.config import Settings
from pipeline.definitions import build_definitions


def test_definitions_load_with_expected_assets(tiny_env: Path) -> None:
    defs = build_definitions(Settings.from_env())
    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {
        "raw_docs/tiny", "notes/tiny", "vault/tiny", "chunks/tiny", "embeddings/tiny",
        "link_graph", "warehouse", "search_index", "retrieval_eval",
    }
    assert defs.resolve_schedule_def("daily_refresh") is not None


def test_build_end_to_end_and_noop_rebuild(tiny_env: Path) -> None:
    from pipeline.defs.runner import run_build
    from pipeline.search import Searcher

    settings = Settings.from_env()
    report = run_build(settings)
    assert report.ok, (report.sources, report.shared_error)
    (st,) = report.sources
    assert st.metadata["vault"]["notes"] == 5                       # .obsidian/ skipped
    first_embedded = st.metadata["embeddings"]["embedded"]
    assert first_embedded == st.metadata["embeddings"]["chunks"] > 0
    note = settings.vault_dir / "tiny" / "Install guide.md"
    fm = yaml.safe_load(note.read_text(encoding="utf-8").split("---\n")[1])
    assert fm["source"] == "tiny" and fm["source_path"] == "Install guide.md" and fm["title"] == "Install guide"
    assert (settings.graph_dir / "links.graphml").exists() and (settings.graph_dir / "links.json").exists()
    ev = report.shared_metadata["retrieval_eval"]
    assert ev["n"] == 2
    hits = Searcher(settings.warehouse_path).search("install the tool on windows", k=3)
    assert hits[0].source_path == "Install guide.md"

    mtime = note.stat().st_mtime_ns
    again = run_build(settings)
    assert again.ok
    assert again.sources[0].metadata["embeddings"]["embedded"] == 0       # nothing re-embedded
    assert again.sources[0].metadata["vault"]["written"] == 0             # nothing rewritten
    assert note.stat().st_mtime_ns == mtime


def test_failing_source_fails_alone(tiny_env: Path, tmp_path: Path) -> None:
    from pipeline.defs.runner import run_build

    sources = Path(tiny_env) / "sources.yaml"
    sources.write_text(
        sources.read_text() + f"  - name: dead\n    kind: git\n    url: file://{tmp_path}/nowhere.git\n    paths: [docs]\n",
        encoding="utf-8",
    )
    report = run_build(Settings.from_env())
    status = {s.name: s for s in report.sources}
    assert status["tiny"].ok and not status["dead"].ok
    assert status["dead"].failed_stage == "raw_docs"
    assert "dead" in status["dead"].error and "nowhere.git" in status["dead"].error
    assert report.shared_ok and not report.ok
