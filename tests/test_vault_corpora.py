"""Issue 14 on the five shared corpora (integration): normalize leaves no source-format markup outside code (an
Obsidian note's HTML stays as written: Obsidian renders it).

Each corpus tree is normalized in place through :func:`pipeline.ingest.normalize.normalize_source` (no fetch, no vault,
no embedding), with the format and site of its real source."""

from __future__ import annotations

import collections

import pytest

from pipeline.ingest.normalize import normalize_source
from pipeline.ingest.vault_check import markup_residue
from pipeline.models import RawFile, Source

from .conftest import shared_path

pytestmark = pytest.mark.integration

CORPORA = {
    "obsidian-help": ("en", "obsidian", None),
    "duckdb": ("docs/stable", "jekyll", "https://duckdb.org/docs/stable"),
    "prefect": ("docs/v3", "mdx", "https://docs.prefect.io/v3"),
    "diffusers": ("docs/source/en", "docbuilder", "https://huggingface.co/docs/diffusers/main/en"),
    "ja-react": ("src/content", "mdx", "https://ja.react.dev"),
}


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_no_span_div_liquid_or_mdx_left_outside_code(name: str) -> None:
    folder, fmt, site = CORPORA[name]
    root = shared_path("corpora", name)
    files = [RawFile(name, p.relative_to(root).as_posix(), p) for p in sorted((root / folder).rglob("*"))
             if p.suffix in (".md", ".mdx") and p.is_file()]
    result = normalize_source(Source(name=name, kind="git", paths=(folder,), format=fmt, site_url=site), files,
                              "2026-01-01T00:00:00+00:00")
    assert result.errors == []
    left: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for note in result.notes:
        for kind, _ in markup_residue(note.body):
            left[kind][note.source_path] += 1
    if fmt == "obsidian":           # an Obsidian note keeps its HTML, which Obsidian renders (session 46)
        assert set(left) == {"span", "div"}
        credits = next(n for n in result.notes if n.source_path == "en/Obsidian/Credits.md")
        assert "<span class=" in credits.body
        return
    assert {kind: dict(files) for kind, files in left.items()} == {}
    if name == "ja-react":          # <CodeStep step={1}>x</CodeStep> after Japanese text: its text stays
        use_ref = next(n for n in result.notes if n.source_path.endswith("reference/react/useRef.md"))
        assert "唯一のプロパティである`current`に、指定された初期値が設定された状態の ref オブジェクトを返します。" in use_ref.body
    if name == "duckdb":            # Rouge-highlighted C becomes a fenced block; Sphinx API output becomes text
        api = next(n for n in result.notes if n.source_path.endswith("clients/c/api.md"))
        assert "```c\nduckdb_instance_cache duckdb_create_instance_cache();\n" in api.body
        ref = next(n for n in result.notes if n.source_path.endswith("clients/python/reference/index.md"))
        assert "*class* duckdb.BinaryValue" in ref.body and "Bases: " in ref.body
