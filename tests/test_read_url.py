"""A docs page's URL reads the note made from that page, its ``#anchor`` at the heading the site gives that anchor
(session 44, probing the five docs corpora): `docsvault read https://duckdb.org/docs/stable/data/parquet/overview`
said "no note …; did you mean 'Overview' or 'JSON Overview'?" though the note's `url` is that address, and
`read 'https://docs.prefect.io/v3/concepts/flows#running-a-flow'` warned that no heading 'running-a-flow' exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.models import Note
from pipeline.search.reader import NoteNotFoundError, find_link, find_note, read_link
from tests.test_reader import _publish_one_chunk_each

BODY = "# Flows\n\n" + "".join(f"## Part {i}\n\n" + "Words about flows. " * 80 + "\n\n" for i in range(1, 4)) + \
    "## Running a flow\n\nCall it.\n\n## `COPY ... TO`\n\nCopy out.\n"


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    vault = tmp_path / "vault"
    (vault / "docs" / "concepts").mkdir(parents=True)
    (vault / "docs" / "concepts" / "flows.md").write_text(BODY, encoding="utf-8")
    (vault / "docs" / "index.md").write_text("# Home\n", encoding="utf-8")
    notes = [Note("docs", "concepts/flows.mdx", "concepts/flows.md", "Flows",
                  {"title": "Flows", "url": "https://docs.example.org/v3/concepts/flows"}, "Words about flows."),
             Note("docs", "index.mdx", "index.md", "Home", {"title": "Home", "url": "https://docs.example.org/v3/"},
                  "Home."),
             Note("docs", "nourl.md", "nourl.md", "No URL", {"title": "No URL"}, "None.")]
    return vault, _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")


@pytest.mark.parametrize("url", [
    "https://docs.example.org/v3/concepts/flows",
    "http://docs.example.org/v3/concepts/flows/",           # scheme, trailing slash
    "https://DOCS.example.org/v3/concepts/flows.html",      # case, .html
    "https://docs.example.org/v3/concepts/flows?tab=python",
])
def test_a_page_url_reads_its_note(site: tuple[Path, Path], url: str) -> None:
    vault, wh = site
    assert find_note(vault, url, wh) == "docs/concepts/flows.md"


def test_a_site_root_and_its_index_page(site: tuple[Path, Path]) -> None:
    vault, wh = site
    assert {u: find_note(vault, u, wh) for u in ("https://docs.example.org/v3", "https://docs.example.org/v3/index.html")
            } == dict.fromkeys(("https://docs.example.org/v3", "https://docs.example.org/v3/index.html"), "docs/index.md")


def test_an_anchor_opens_the_page_of_its_heading(site: tuple[Path, Path]) -> None:
    vault, wh = site
    url = "https://docs.example.org/v3/concepts/flows"
    assert find_link(vault, url + "#running-a-flow", wh) == ("docs/concepts/flows.md", "running-a-flow")
    running = read_link(vault, url + "#running-a-flow", warehouse_path=wh)
    copy = read_link(vault, url + "#copy--to", warehouse_path=wh)
    assert (running.warning, copy.warning) == ("", "")
    assert "## Running a flow" in running.text and running.page > 1
    assert "## `COPY ... TO`" in copy.text


def test_an_unknown_url_says_a_page_url_was_looked_for(site: tuple[Path, Path]) -> None:
    vault, wh = site
    with pytest.raises(NoteNotFoundError, match="no note 'https://docs.example.org/v3/nope': no vault path, source "
                                                "path, note name, title, alias or page URL is "):
        find_link(vault, "https://docs.example.org/v3/nope", wh)
