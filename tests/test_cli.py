"""The CLI as users meet it: help for every command, one-line errors, JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app

runner = CliRunner()


@pytest.mark.parametrize("cmd", [[], ["build"], ["search"], ["eval"], ["status"], ["sources"],
                                 ["sources", "validate"], ["sources", "list"]])
def test_help_exists(cmd: list[str]) -> None:
    result = runner.invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_search_without_warehouse_says_build_first(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--data", str(tmp_path / "nodata"), "search", "anything"])
    assert result.exit_code == 1
    assert "docsvault build" in result.output
    assert "Traceback" not in result.output


def test_bad_sources_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  - name: x\n    kind: ftp\n    url: https://x\n", encoding="utf-8")
    result = runner.invoke(app, ["--sources", str(bad), "sources", "validate"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: {bad}: sources[1] (source 'x'): 'kind' must be one of ['git', 'llms_txt', 'html', 'local'], got 'ftp'"
    ]


def test_build_search_eval_through_cli(tiny_env: Path) -> None:
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert "tiny" in result.output and "ok" in result.output
    result = runner.invoke(app, ["search", "water bird in the pond", "--json", "-k", "3"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert hits[0]["source_path"] == "Ducks.md"
    assert set(hits[0]) == {"rank", "source", "source_path", "vault_path", "title", "heading", "score", "snippet"}
    assert hits[0]["vault_path"] == "tiny/Ducks.md"
    result = runner.invoke(app, ["eval", str(tiny_env / "evals"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["overall"]["n"] == 2
    assert set(report["overall"]) == {"n", "hit@1", "hit@3", "mrr@10", "ndcg@10"}
    result = runner.invoke(app, ["search", "ducks", "--source", "nope"])
    assert result.exit_code == 1
    assert "tiny" in result.output           # names the known sources
