"""A data folder (and vault) moved or copied to another path: a build there that finds nothing to redo names the
files where they are now, not where the build that wrote them had them."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.config import Settings


def test_a_build_of_a_moved_data_folder_names_its_files_where_they_are_now(built_tiny_env: Path, monkeypatch):
    """Seen by an operator (session 39): after `cp -a data data-moved` and a build with DOCSVAULT_DATA=data-moved,
    the build printed `warehouse: … -> <old data>/warehouse.duckdb (unchanged, not republished)`, and the Dagster
    metadata of the skipped warehouse, link_graph and retrieval_eval named the old folder's files."""
    from pipeline.defs.runner import run_build

    root = built_tiny_env
    moved = root / "moved"
    shutil.copytree(root / "data", moved / "data", symlinks=True)
    shutil.copytree(root / "vault", moved / "vault", symlinks=True)
    monkeypatch.setenv("DOCSVAULT_DATA", str(moved / "data"))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(moved / "vault"))
    monkeypatch.setenv("DAGSTER_HOME", str(moved / "dagster"))
    shutil.rmtree(root / "data")          # the old folder is gone: nothing may still point there

    report = run_build(Settings.from_env())

    assert report.ok, (report.sources, report.shared_error)
    wh, graph, ev = (report.shared_metadata[k] for k in ("warehouse", "link_graph", "retrieval_eval"))
    assert (wh.get("skipped"), graph.get("skipped"), ev.get("skipped")) == (True, True, True)
    data = moved / "data"
    assert wh["path"] == str(data / "warehouse.duckdb")
    assert wh["size_mb"] == round((data / "warehouse.duckdb").stat().st_size / 1e6, 2)
    assert (graph["graphml"], graph["json"]) == (str(data / "graph" / "links.graphml"),
                                                 str(data / "graph" / "links.json"))
    assert ev["history"] == str(data / "eval_runs.duckdb")
