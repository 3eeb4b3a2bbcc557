"""`docsvault eval --unscoped / --both` on a two-source warehouse (fake hash embedder, the real BM25 analyzer).

Both sources have a page at the same path ``Ducks.md``; beta's page is the better match for alpha's duck case, so
over all sources it ranks first and alpha's expected page second: the unscoped figures drop, the scoped ones do not
(a page of another source never counts, even with the case's path).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import warehouse as wh
from pipeline.cli import app
from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import build_chunk_index
from pipeline.index.embed import HashEmbedder, embed_chunks
from pipeline.models import Chunk, Note

runner = CliRunner()

PAGES = {
    ("alpha", "Ducks.md", "Ducks"): "Ducks swim and eat bread. A duck is a water bird.",
    ("alpha", "Geese.md", "Geese"): "Geese fly south in winter in long lines.",
    ("beta", "Ducks.md", "Water bird pond"): "Water bird in the pond: the water bird in the pond.",
}

CASES = (
    "corpus: alpha\ncases:\n"
    "  - id: a1\n    query: water bird in the pond\n    expected: ['Ducks.md']\n    kind: paraphrase\n"
    "  - id: a2\n    query: geese fly south in winter\n    expected: ['Geese.md']\n    kind: keyword\n"
)


def _publish(path: Path) -> None:
    notes, chunks = [], []
    for (source, rel, title), text in PAGES.items():
        note = Note(source, rel, rel, title, {"title": title}, text)
        notes.append(note)
        chunks.append(Chunk(f"{note.note_id}-0", note.note_id, source, 0, (title,), title, text))
    embedder = HashEmbedder(384)
    res = embed_chunks(chunks, embedder, None)
    bm25 = build_chunk_index(chunks, notes, Analyzer())
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks,
                                      vectors={embedder.model_id: (res.chunk_ids, res.vectors)},
                                      bm25_blobs=bm25.to_blobs()))


@pytest.fixture
def two_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    _publish(data / "warehouse.duckdb")
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "alpha.yaml").write_text(CASES, encoding="utf-8")
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")
    monkeypatch.setenv("DOCSVAULT_SOURCES", str(tmp_path / "sources.yaml"))
    monkeypatch.setenv("DOCSVAULT_DATA", str(data))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(tmp_path / "vault"))
    monkeypatch.setenv("DOCSVAULT_EVALS", str(tmp_path / "evals"))
    monkeypatch.setenv("DOCSVAULT_MODEL", "hash")
    return tmp_path


def _run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_a_page_of_another_source_lowers_unscoped_only(two_sources: Path) -> None:
    scoped = json.loads(_run("eval", "--json"))
    assert scoped["scope"] == "scoped"
    assert scoped["overall"] == {"n": 2, "hit_at_1": 1.0, "hit_at_3": 1.0, "mrr_at_10": 1.0, "ndcg_at_10": 1.0}

    unscoped = json.loads(_run("eval", "--unscoped", "--json"))
    assert unscoped["scope"] == "unscoped"
    # a1: beta's Ducks.md first, alpha's second: RR 1/2, nDCG 1/log2(3); a2 unchanged
    assert unscoped["overall"] == {"n": 2, "hit_at_1": 0.5, "hit_at_3": 1.0, "mrr_at_10": 0.75, "ndcg_at_10": 0.8155}
    assert unscoped["by_kind"]["paraphrase"] == {"n": 1, "hit_at_1": 0.0, "hit_at_3": 1.0, "mrr_at_10": 0.5,
                                                 "ndcg_at_10": 0.6309}
    assert unscoped["by_kind"]["keyword"]["mrr_at_10"] == 1.0
    assert unscoped["by_source"] == {"alpha": unscoped["overall"]}

    both = json.loads(_run("eval", "--both", "--json"))
    assert set(both) == {"scoped", "unscoped"}
    assert both["scoped"] == scoped and both["unscoped"] == unscoped


def test_both_side_by_side_text(two_sources: Path) -> None:
    out = _run("eval", "--both")
    assert out.splitlines()[:6] == [
        "lanes: bm25, bm25_page, vector",
        "s = scoped: each case searched within its own source (as `search --source <corpus>`)",
        ("u = unscoped: each case searched over all sources (as `search` by default); a page of another source "
         "is a miss"),
        f"{'':<24}{'n':>5}    hit@1 s    hit@1 u    hit@3 s    hit@3 u   mrr@10 s   mrr@10 u  ndcg@10 s  ndcg@10 u",
        "-" * 117,
        (f"{'overall':<24}{2:>5}      1.000      0.500      1.000      1.000      1.000      0.750      1.000"
         "      0.816"),
    ]
    assert out.endswith(
        "kind: paraphrase            1      1.000      0.000      1.000      1.000      1.000      0.500      1.000"
        "      0.631\n")
    unscoped = _run("eval", "--unscoped")
    assert unscoped.splitlines()[:2] == [
        "lanes: bm25, bm25_page, vector",
        "unscoped: each case searched over all sources (as `search` by default); a page of another source is a miss"]
    # with --lanes: one ablation table per scope, each headed by its scope
    tables = _run("eval", "--lanes", "bm25,hybrid", "--both")
    assert tables.startswith("scoped: each case searched within its own source")
    assert "\n\nunscoped: each case searched over all sources" in tables
    assert tables.endswith("pooled MRR@10: hybrid 0.750 vs best single lane bm25 0.750 (+0.000)\n")
    assert json.loads(_run("eval", "--lanes", "bm25", "--unscoped", "--json"))["bm25"]["scope"] == "unscoped"


def test_unscoped_and_both_exclude_each_other(two_sources: Path) -> None:
    result = runner.invoke(app, ["eval", "--unscoped", "--both"])
    assert (result.exit_code, result.output) == (
        2, "error: --unscoped and --both exclude each other: --both already includes the unscoped figures\n")


def test_eval_embeds_its_queries_once_across_runs(two_sources: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.stages.base import code_version
    from pipeline.stages.evaluate import load_query_vectors

    first = json.loads(_run("eval", "--both", "--json"))
    stored = two_sources / "data" / "cache" / "eval-query-vectors.npz"
    assert stored.is_file()
    held = load_query_vectors(stored, code_version("eval"))
    assert {text for _, text in held} == {"water bird in the pond", "geese fly south in winter"}
    embedded: list[str] = []
    real = HashEmbedder.embed_query
    monkeypatch.setattr(HashEmbedder, "embed_query", lambda self, text: embedded.append(text) or real(self, text))
    assert json.loads(_run("eval", "--both", "--json")) == first           # the stored vectors, primed: same figures
    assert embedded == []
    stored.unlink()
    assert json.loads(_run("eval", "--json")) == first["scoped"]
    assert sorted(embedded) == ["geese fly south in winter", "water bird in the pond"]   # embedded when not stored
