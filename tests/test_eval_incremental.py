"""Issue 19: the eval stage does no repeated work. Same warehouse content, cases and search settings -> the last
report; an incremental build (only the warehouse content moved) -> only ``hybrid`` and ``hybrid unscoped`` run, the
single-lane set-ups are carried and marked with the warehouse they were computed on; a forced build or
``DOCSVAULT_EVAL_ABLATION=1`` computes every set-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import pipeline.evaluate as ev
from pipeline import stages as b
from pipeline.config import Settings
from pipeline.index.embed import load_embedder
from pipeline.ingest.sources import load_sources
from pipeline.warehouse import read_eval_runs

SCOPED = ["bm25", "bm25_page", "vector", "graph", "hybrid"]


@pytest.fixture(autouse=True)
def _no_growth_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.warehouse.write.MAX_GROWTH", 100.0)   # keep the tiny warehouse incremental


@pytest.fixture
def settings(tiny_env: Path) -> Settings:
    return Settings.from_env()


@pytest.fixture
def evals_run(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(lanes, scope) of every run_eval call."""
    calls: list[tuple[str, str]] = []
    real = ev.run_eval

    def spy(searcher: Any, cases: Any, lanes: Any = None, scope: str = "scoped", ranked: Any = None,
            templates: Any = None) -> Any:
        calls.append(("+".join(lanes or ()), scope))
        if ranked is not None:      # only this set-up's searches were ranked
            assert {task for task in ranked if task[2] == (tuple(lanes) if lanes else None)
                    and (task[1] is None) == (scope == "unscoped")}, (lanes, scope)
        return real(searcher, cases, lanes=lanes, scope=scope, ranked=ranked, templates=templates)

    monkeypatch.setattr(ev, "run_eval", spy)
    return calls


class CountingEmbedder:
    """An embedder that counts the queries it embeds (``embedded``: every text, over all instances)."""

    embedded: list[str] = []

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def embed_query(self, text: str) -> Any:
        CountingEmbedder.embedded.append(text)
        return self._inner.embed_query(text)


def build(settings: Settings) -> dict[str, Any]:
    """Every stage once, as `docsvault build` runs them; the eval stage's report."""
    sources = load_sources(settings.sources_file)
    for s in sources:
        b.fetch_stage(settings, s)
        b.normalize_stage(settings, s)
        b.vault_stage(settings, s)
        b.chunk_stage(settings, s, load_embedder)
        b.embed_stage(settings, s, load_embedder)
    b.graph_stage(settings, sources)
    b.warehouse_stage(settings, sources, load_embedder)
    return b.eval_stage(settings, sources, embedder_factory=lambda spec: CountingEmbedder(load_embedder(spec)))


def edit(tiny_env: Path, n: int) -> None:
    guide = tiny_env / "tinyvault" / "Install guide.md"
    guide.write_text(guide.read_text(encoding="utf-8") + f"\n\nEdit {n}: a new paragraph about upgrades.\n",
                     encoding="utf-8")


def test_incremental_build_runs_only_the_fused_setups(settings: Settings, tiny_env: Path,
                                                      evals_run: list[tuple[str, str]]) -> None:
    history = ev.eval_history_path(settings.data_dir)
    CountingEmbedder.embedded.clear()
    first = build(settings)
    assert sorted(set(CountingEmbedder.embedded)) == ["install the tool on windows", "water bird in the pond"]
    assert [c[0] for c in evals_run] == ["bm25", "bm25_page", "vector", "graph", "bm25+bm25_page+vector",
                                         "bm25+bm25_page+vector"]
    assert first["ablation"]["carried"] is False and first["history_rows"] == 24
    assert list(first["setups"]) == [*SCOPED, "hybrid unscoped"]
    first_key = first["setups"]["bm25"]["warehouse_key"]
    ids = [c["id"] for c in first["cases"]]                             # each set-up's per-case MRR@10 is kept
    for name, entry in first["setups"].items():
        assert [c["id"] for c in entry["cases"]] == ids and all(set(c) == {"id", "mrr@10"} for c in entry["cases"])
    gain = ev.check_fusion_gain(first)                                  # decided on those pairs when behind
    assert gain.passed or "cases_lane_better" in gain.metadata
    assert first_key.startswith("input:") and first["ablation"]["warehouse_key"] == first_key

    evals_run.clear()                                   # nothing changed: nothing run, nothing appended
    again = build(settings)
    assert (again["skipped"], again["history_rows"], evals_run) == (True, 0, [])

    edit(tiny_env, 1)                                   # an incremental build: the fused set-ups only ...
    CountingEmbedder.embedded.clear()
    inc = build(settings)
    assert CountingEmbedder.embedded == []              # ... with the query vectors the last eval stored
    assert evals_run == [("bm25+bm25_page+vector", "scoped"), ("bm25+bm25_page+vector", "unscoped")]
    assert inc["skipped"] is False and inc["history_rows"] == 8          # 2 set-ups x 4 groups
    assert list(inc["setups"]) == [*SCOPED, "hybrid unscoped"]         # the same keys as a full run
    assert inc["ablation"] == {**first["ablation"], "carried": True}
    for lane in ("bm25", "bm25_page", "vector", "graph"):
        assert inc["setups"][lane] == first["setups"][lane]             # carried, marked with their warehouse
    new_key = inc["setups"]["hybrid"]["warehouse_key"]
    assert new_key.startswith("input:") and new_key != first_key
    assert inc["setups"]["hybrid unscoped"]["warehouse_key"] == new_key
    rows = read_eval_runs(history)
    assert len(rows) == 32 and {r["setup"] for r in rows[24:]} == {"hybrid", "hybrid unscoped"}


def test_ablation_flag_and_a_rewrite_of_the_same_content(settings: Settings, tiny_env: Path,
                                                         evals_run: list[tuple[str, str]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    build(settings)
    evals_run.clear()
    settings.warehouse_path.unlink()                    # written again in full, same content: the last report
    again = build(settings)
    assert (again["skipped"], evals_run) == (True, [])

    monkeypatch.setenv("DOCSVAULT_EVAL_ABLATION", "1")  # the explicit flag: every set-up when the eval runs
    edit(tiny_env, 2)
    full = build(settings)
    assert len(evals_run) == 6 and full["ablation"]["carried"] is False and full["history_rows"] == 24
    assert {s["warehouse_key"] for s in full["setups"].values()} == {full["ablation"]["warehouse_key"]}


def test_changed_cases_recompute_the_ablation(settings: Settings, tiny_env: Path,
                                              evals_run: list[tuple[str, str]]) -> None:
    build(settings)
    evals_run.clear()
    cases = tiny_env / "evals" / "tiny.yaml"
    cases.write_text(cases.read_text(encoding="utf-8").replace("install the tool on windows",
                                                               "install the tool on a windows machine"),
                     encoding="utf-8")
    again = build(settings)
    assert len(evals_run) == 6 and again["ablation"]["carried"] is False


def test_the_serves_queries_check_embeds_its_sample_query_once(settings: Settings, tiny_env: Path) -> None:
    counting = lambda spec: CountingEmbedder(load_embedder(spec))
    build(settings)
    CountingEmbedder.embedded.clear()
    first = b.search_index_stage(settings, embedder_factory=counting)
    assert CountingEmbedder.embedded == ["getting started"] and first.sample_hits
    edit(tiny_env, 3)                                   # a new warehouse file: checked again, the vector kept
    build(settings)
    CountingEmbedder.embedded.clear()
    again = b.search_index_stage(settings, embedder_factory=counting)
    assert (again.skipped, CountingEmbedder.embedded) == (False, [])
    assert again.sample_hits == first.sample_hits


def test_the_serves_queries_check_plans_again_only_when_the_indexed_tables_may_differ(
        settings: Settings, tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``hnsw_index_scan`` is carried over an incremental publish (the HNSW-indexed base tables are untouched),
    planned again after a full publish (new tables and indexes) and on a forced build."""
    import pipeline.warehouse as whm

    planned: list[str] = []
    real = whm.explain_vector_search
    monkeypatch.setattr(whm, "explain_vector_search",
                        lambda con, table, *a, **k: planned.append(table) or real(con, table, *a, **k))
    build(settings)
    first = b.search_index_stage(settings)
    assert (first.skipped, planned, first.hnsw_index_scan) == (False, ["vec_hash_384"], True)
    edit(tiny_env, 4)
    build(settings)                                     # an incremental publish: a new file, the same indexes
    again = b.search_index_stage(settings)
    assert (again.skipped, planned, again.hnsw_index_scan) == (False, ["vec_hash_384"], True)
    assert again.sample_hits
    settings.warehouse_path.unlink()
    build(settings)                                     # a full publish: planned again
    full = b.search_index_stage(settings)
    assert (full.skipped, planned, full.hnsw_index_scan) == (False, ["vec_hash_384"] * 2, True)
    edit(tiny_env, 5)
    build(settings)
    monkeypatch.setenv("DOCSVAULT_FORCE", "1")          # forced: planned again
    forced = b.search_index_stage(settings)
    assert (forced.skipped, planned, forced.hnsw_index_scan) == (False, ["vec_hash_384"] * 3, True)


def test_a_sample_hit_without_a_heading_is_its_vault_path_alone(settings: Settings, tiny_env: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A hit in a note's text before its first heading has no heading: its sample hit is the path, not ``path > ``."""
    from types import SimpleNamespace

    from pipeline.search.searcher import Searcher

    build(settings)
    hits = [SimpleNamespace(vault_path="tiny/a.md", heading=""), SimpleNamespace(vault_path="tiny/b.md", heading="Use")]
    monkeypatch.setattr(Searcher, "search", lambda self, query, k=10, **kw: hits)
    import pipeline.stages.evaluate as stage

    monkeypatch.setattr(stage, "shared_state", lambda s: {})   # not checked before: checked now
    assert b.search_index_stage(settings).sample_hits == ("tiny/a.md", "tiny/b.md > Use")
