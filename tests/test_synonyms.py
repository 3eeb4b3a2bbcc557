"""Query-side synonyms for the BM25 lane (pipeline.search.synonyms) and their use by search, CLI and eval."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.common.errors import SynonymsError
from pipeline.index.analysis import Analyzer
from pipeline.search.synonyms import Synonyms, load_synonyms

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
    # the line where the bracket opens (the file has 2 lines: it said "line 3", the end of the stream)
    ("groups:\n  - [a, b\n", ("line 2 is not valid YAML (the flow sequence ([…]) that starts on line 2 is never "
                               "closed; add the closing ']')")),
    ("a: b\n\tc: d\n", ("line 2 is not valid YAML (found character '\\t' that cannot start any token; replace "
                         "the tab with spaces)")),
    ("groups:\n  - [[a], b]\n", "every phrase must be a string"),
])
def test_malformed_file_names_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SynonymsError) as err:
        _load(tmp_path, text)
    assert str(tmp_path / "synonyms.yaml") in str(err.value)
    assert message in str(err.value)


def test_search_uses_synonyms_in_bm25_lane(tmp_path: Path) -> None:
    from pipeline.search.searcher import Searcher
    from tests.test_search import CountingFactory, _build

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
    assert result.exit_code == 2
    assert result.output == (f"error: {bad}: groups entry 1 must be a list of at least two phrases, "
                             f"got list ['only-one']\n")


def test_duplicate_key_names_both_lines(tmp_path: Path) -> None:
    with pytest.raises(SynonymsError) as err:
        _load(tmp_path, "groups:\n  - [a, b]\nexpand:\n  k8s: [kubernetes]\n  k8s: [kube]\n")
    assert str(err.value) == (f"{tmp_path / 'synonyms.yaml'}: duplicate key 'k8s' at line 5 (first at line 4); "
                              f"keep one")


def test_required_missing_file_is_an_error(tmp_path: Path) -> None:
    from pipeline.search.synonyms import check_synonyms_file

    missing = tmp_path / "nonexist.yaml"
    message = f"synonyms file {missing} not found (--synonyms / DOCSVAULT_SYNONYMS): fix the path or unset it"
    with pytest.raises(SynonymsError) as err:
        load_synonyms(missing, AN.tokens, required=True)
    assert str(err.value) == message
    with pytest.raises(SynonymsError) as err:
        check_synonyms_file(missing, True)
    assert str(err.value) == message
    check_synonyms_file(missing, False)                 # the default location stays optional
    assert not load_synonyms(missing, AN.tokens)


def test_settings_require_only_an_explicit_synonyms_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.config import Settings

    monkeypatch.delenv("DOCSVAULT_SYNONYMS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert not Settings.from_env().synonyms_required
    assert Settings.from_env(synonyms=Path("x.yaml")).synonyms_required
    monkeypatch.setenv("DOCSVAULT_SYNONYMS", "y.yaml")
    assert Settings.from_env().synonyms_required


@pytest.mark.parametrize("via", ["flag", "env"])
def test_cli_explicit_missing_synonyms_file_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             via: str) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOCSVAULT_SYNONYMS", raising=False)
    args = ["--data", str(tmp_path / "d"), "search", "x"]
    if via == "flag":
        args = ["--synonyms", "nonexist.yaml", *args]
    else:
        monkeypatch.setenv("DOCSVAULT_SYNONYMS", "nonexist.yaml")
    result = CliRunner().invoke(app, args)
    missing = tmp_path.resolve() / "nonexist.yaml"
    expected = (f"error: synonyms file {missing} not found (--synonyms / DOCSVAULT_SYNONYMS): "
                f"fix the path or unset it\n")
    assert (result.exit_code, result.output) == (2, expected)


def test_cli_default_synonyms_location_stays_optional(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOCSVAULT_SYNONYMS", raising=False)
    result = CliRunner().invoke(app, ["--data", str(tmp_path / "d"), "search", "x"])
    assert result.exit_code == 2 and "synonyms file" not in result.output     # fails on the missing warehouse only
    assert result.output.startswith("error: no warehouse at ")


def test_mcp_searcher_refuses_an_explicit_missing_synonyms_file(tmp_path: Path) -> None:
    from pipeline.config import Settings
    from pipeline.mcp_server import ToolFailure, VaultService

    missing = tmp_path / "nonexist.yaml"
    svc = VaultService(Settings.from_env(data_dir=tmp_path / "d", synonyms=missing))
    with pytest.raises(ToolFailure) as err:
        svc.searcher()
    assert str(err.value) == (f"synonyms file {missing} not found (--synonyms / DOCSVAULT_SYNONYMS): "
                              f"fix the path or unset it")
