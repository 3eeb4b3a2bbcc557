"""What ``link_graph``'s counts count, as its description says: a vault of two sources showed ``links_dangling:
102`` on the asset while `docsvault status` said ``72 dangling`` and `check-vault` listed 72: the asset counts
each link as written, the others each note's dangling target once (found by a Dagster user, session 42)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipeline import service
from pipeline.config import Settings
from pipeline.defs import build_definitions
from tests.test_incremental import run_chain


def test_link_graph_counts_links_as_written_and_says_so(tiny_env: Path) -> None:
    settings = Settings.from_env()

    def counts() -> tuple[int, int]:
        graph = run_chain(settings)["graph"]
        return graph.links_dangling, service.status_data(settings)["warehouse"]["dangling_links"]

    before = counts()
    (tiny_env / "tinyvault" / "Geese.md").write_text(
        "# Geese\n\nSee [[Swans]] and again [[Swans]], and [[Ducks]].\n", encoding="utf-8")
    after = counts()
    assert (after[0] - before[0], after[1] - before[1]) == (2, 1)   # the asset: each time; status: once
    key = dg.AssetKey(["link_graph"])
    description = build_definitions(settings).resolve_assets_def(key).descriptions_by_key[key]
    assert description.endswith("`links_resolved` / `links_dangling`: links as written, each time (a note linking a "
                                "missing note twice counts 2; `docsvault status` and `docsvault check-vault` count "
                                "each note's dangling target once).")
