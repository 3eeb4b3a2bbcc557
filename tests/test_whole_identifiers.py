"""An identifier typed in lower case finds the pages that write it (session 44, a probe of the five docs corpora).

Seen: `docsvault search stablediffusionpipeline` got nothing from either BM25 lane: the analyzer stems the typed
word as a plain one (`stablediffusionpipelin`), while the page's `StableDiffusionPipeline` is indexed whole and
unstemmed (`stablediffusionpipeline`) and in its parts. The top 3 were vector-only hits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.index.analysis import Analyzer
from pipeline.index.embed import HashEmbedder
from pipeline.search.searcher import Searcher
from tests.tiny_warehouse import publish_pages

PAGES = {
    ("g", "pipe.md", "Pipelines"): ["Load a StableDiffusionPipeline from the hub and call it."],
    ("g", "state.md", "State"): ["Call useState to keep a value between renders."],
    ("g", "stable.md", "Stable releases"): ["The stable diffusion of releases through channels."],
    ("g", "other.md", "Other"): ["Nothing about either of them here."],
}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ident") / "warehouse.duckdb"
    publish_pages(path, PAGES)
    return path


def _titles(path: Path, query: str) -> list[str]:
    with Searcher(path, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        return [h.title for h in s.search(query, k=3, lanes=["bm25"])]


def test_the_analyzer_stems_a_lower_case_identifier_as_a_plain_word() -> None:
    # the set-up: a typed `usestate` and a page's `useState` share no term without the lookup
    assert Analyzer().tokens("usestate") == ["usest"]
    assert Analyzer().tokens("useState")[0] == "usestate"
    assert Analyzer.whole("StableＤiffusion") == "stablediffusion"


@pytest.mark.parametrize(("query", "first"), [("usestate", "State"), ("stablediffusionpipeline", "Pipelines"),
                                               ("how to call usestate", "State")])
def test_an_identifier_typed_in_lower_case_finds_its_page(warehouse: Path, query: str, first: str) -> None:
    assert _titles(warehouse, query)[0] == first


def test_plain_words_are_searched_as_before(warehouse: Path) -> None:
    # `stable` and `releases` are no identifier of any page: their stems only (`stabl` is also a part of the
    # pipeline's identifier), and the page that says both comes first
    assert _titles(warehouse, "stable releases") == ["Stable releases", "Pipelines"]
