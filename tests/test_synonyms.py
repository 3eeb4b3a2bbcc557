"""Query-side synonyms for the BM25 lane (pipeline.synonyms) and their use by search, CLI and eval."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.analysis import Analyzer
from pipeline.errors import SynonymsError
from pipeline.synonyms import Synonyms, load_synonyms

AN = Analyzer()


def _load(tmp_path: Path, text: str) -> Synonyms:
    path = tmp_path / "synonyms.yaml"
    path.write_text(text, encoding="utf-8")
    return load_synonyms(path, AN.tokens)


def test_groups_are_two_way_and_expand_one_way(tmp_path: Path) -> None:
    syn = _load(tmp_path, "groups:\n  - [refund, money back]\nexpand:\n  k8s: [kubernetes]\n")
    assert syn.expand(AN.tokens("can I get my money back")) == ["can", "i", "get", "my", "money", "back", "refund"]
    assert syn.expand(AN.tokens("Refunds for Sync")) == ["refund", "sync", "money", "back"]
    assert syn.expand(AN.tokens("deploy on k8s")) == ["deploy", "k8s", "k8", "s", "kubernet"]
    assert syn.expand(AN.tokens("kubernetes deploy")) == ["kubernet", "deploy"]       # one-way
    assert syn.expand(AN.tokens("back money")) == ["back", "money"]                     # phrase order matters
    assert (syn.groups, syn.one_way, len(syn.rules)) == (1, 1, 3)


def test_japanese_phrases(tmp_path: Path) -> None:
    syn = _load(tmp_path, "groups:\n  - [保管庫, vault]\n")
    assert syn.expand(AN.tokens("保管庫を開く")) == AN.tokens("保管庫を開く") + ["vault"]


def test_missing_file_means_none(tmp_path: Path) -> None:
    syn = load_synonyms(tmp_path / "nope.yaml", AN.tokens)
    assert not syn and syn.expand(["a", "b"]) == ["a", "b"]
    assert not load_synonyms(None, AN.tokens)
    assert not _load(tmp_path, "")


@pytest.mark.parametrize("text, message", [
    ("groups: [a, b]\n", "groups entry 1 must be a list of at least two phrases"),
    ("groups:\n  - [refund]\n", "groups entry 1 must be a list of at least two phrases"),
    ("groups:\n  - [refund, the]\n", "'the' has no searchable term"),
    ("expand:\n  k8s: 3\n", "expand entry 'k8s' must map to a list of phrases"),
    ("synonyms:\n  - [a, b]\n", "expected a mapping with `groups:`"),
    ("groups:\n  - [a, b\n", "line 3 is not valid YAML"),
    ("groups:\n  - [[a], b]\n", "every phrase must be a string"),
])
def test_malformed_file_names_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SynonymsError) as err:
        _load(tmp_path, text)
    assert str(tmp_path / "synonyms.yaml") in str(err.value)
    assert message in str(err.value)


def test_search_uses_synonyms_in_bm25_lane(tmp_path: Path) -> None:
    from tests.test_search import _build, CountingFactory
    from pipeline.search import Searcher

    path = tmp_path / "warehouse.duckdb"
    _build(path)
    syn_file = tmp_path / "synonyms.yaml"
    syn_file.write_text("groups:\n  - [setup, installation]\n", encoding="utf-8")
    with Searcher(path, embedder_factory=CountingFactory()) as plain, \
            Searcher(path, embedder_factory=CountingFactory(), synonyms=syn_file) as expanded:
        assert plain.rank_pages("setup", lanes=["bm25"]) == []
        assert [p for _, p, _ in expanded.rank_pages("setup", lanes=["bm25"])][:1] == ["install.md"]
        hit = expanded.search("setup", k=1, lanes=["bm25"])[0]
        assert hit.source_path == "install.md"


def test_cli_reports_a_malformed_synonyms_file_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    bad = tmp_path / "syn.yaml"
    bad.write_text("groups:\n  - [only-one]\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["--data", str(tmp_path / "d"), "--synonyms", str(bad), "search", "x"])
    assert result.exit_code == 1
    assert result.output == (f"error: {bad}: groups entry 1 must be a list of at least two phrases, "
                             f"got list ['only-one']\n")
