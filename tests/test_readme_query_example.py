"""The README's query-syntax example returns what the README says on the obsidian-help corpus (a local copy of a
few of its pages, hash embedder), and options go before `--` (after it everything is the query)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app, main
from tests.conftest import _tiny_setenv, shared_path

runner = CliRunner()
README = Path(__file__).resolve().parents[1] / "README.md"
PAGES = ("Editing and formatting/Tags.md", "Editing and formatting/Properties.md", "Plugins/Daily notes.md",
         "Plugins/Templates.md", "Obsidian Web Clipper/Templates.md", "Obsidian Web Clipper/Logic.md",
         "Obsidian Web Clipper/Variables.md",
         "Obsidian Sync/Sync settings and selective syncing.md")


@pytest.fixture
def help_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local source named obsidian-help holding a few en/ pages of the corpus (vault paths as the git source's:
    ``obsidian-help/en/...``), built."""
    corpus = shared_path("corpora", "obsidian-help")
    root = tmp_path / "obsidian-help"
    for rel in PAGES:
        (root / "en" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus / "en" / rel, root / "en" / rel)
    (tmp_path / "sources.yaml").write_text(
        f"sources:\n  - name: obsidian-help\n    kind: local\n    path: {root}\n    format: obsidian\n"
        "    include: ['en/**/*.md']\n", encoding="utf-8")
    (tmp_path / "evals").mkdir()
    _tiny_setenv(tmp_path, monkeypatch)
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    return tmp_path


def test_the_readme_query_example_finds_what_it_says(help_env: Path) -> None:
    readme = " ".join(README.read_text(encoding="utf-8").split())
    m = re.search(r"Example, on the obsidian-help source: `docsvault search '(.+?)'` finds `([^`]+)`", readme)
    assert m, "the README's query example moved: update this test"
    query, finds = m.groups()
    assert query == '"nested tags" hierarchy -sync tag:kebab-case path:obsidian-help/'
    result = runner.invoke(app, ["search", query, "--files"])
    assert result.exit_code == 0, result.output
    assert [line.split("\t")[0] for line in result.output.splitlines()] == [finds]
    old = runner.invoke(app, ["search", '"daily note" template -plugin tag:howto path:obsidian-help/'])
    assert (old.exit_code, old.output) == (           # the example it replaces
        1, "No results: no note has the tag 'howto' (frontmatter or inline #tag)\n")


def test_options_go_before_the_double_dash(help_env: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    result = runner.invoke(app, ["search", "-k", "2", "--files", "--", "-plugin template"])
    assert result.exit_code == 0, result.output
    assert sorted(line.split("\t")[0] for line in result.output.splitlines()) == [
        "obsidian-help/en/Obsidian Web Clipper/Logic.md", "obsidian-help/en/Obsidian Web Clipper/Variables.md"]
    monkeypatch.setattr(sys, "argv", ["docsvault", "search", "--", "-plugin template", "-k", "2"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2
    err = capsys.readouterr().err          # the program name in "(see `... search --help`)" is the runner's
    assert err.startswith("error: Got unexpected extra argument(s) (-k 2) (see `"), err
    assert err.endswith(" search --help`)\n") and len(err.splitlines()) == 1, err
