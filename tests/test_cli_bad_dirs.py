"""A data dir or vault that cannot be made or written is one line before anything starts (nothing recorded); text
that starts with `-` gets how to pass it; `eval --history` refuses options it would ignore; `read` of a file the
fetch skipped (a symlink leaving the root) gives the reason."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import cli
from pipeline.cli import app
from pipeline.common.errors import PipelineError
from pipeline.common.lock import build_lock
from pipeline.config import Settings
from pipeline.service import writable_dir_problem, write_dirs_problem

runner = CliRunner()
NO_PROC = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc (mkdir under it fails)")


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# ---- the data dir and the vault (build, capture)


def test_build_with_a_data_dir_under_a_file_is_one_line(tiny_env: Path) -> None:
    (tiny_env / "somefile").write_text("x", encoding="utf-8")
    data = tiny_env / "somefile" / "data"
    assert _invoke("--data", str(data), "build", "--source", "tiny") == (
        2, "", f"error: cannot create the data dir {data}: Not a directory (check --data / DOCSVAULT_DATA)\n")
    assert not (tiny_env / "vault").exists()           # nothing made: the data dir is checked first


@NO_PROC
def test_build_with_a_data_dir_that_cannot_be_made_is_one_line(tiny_env: Path) -> None:
    assert _invoke("--data", "/proc/x", "build") == (
        2, "", ("error: cannot create the data dir /proc/x: No such file or directory (check --data / "
               "DOCSVAULT_DATA)\n"))


@NO_PROC
def test_build_with_a_vault_that_cannot_be_made_records_nothing(tiny_env: Path) -> None:
    assert _invoke("--vault", "/proc/x", "build", "--source", "tiny") == (
        2, "", ("error: cannot create the vault dir /proc/x: No such file or directory (check --vault / "
               "DOCSVAULT_VAULT)\n"))
    data = tiny_env / "data"
    assert sorted(os.listdir(data)) == []              # made (mkdir -p) and tested, but no state, no lock, no failure
    code, out, _ = _invoke("status", "--json")
    assert (code, [r["last_error"] for r in json.loads(out)["sources"]]) == (0, [None])


def test_build_with_a_file_as_the_vault_is_one_line(tiny_env: Path) -> None:
    (tiny_env / "vault").write_text("x", encoding="utf-8")
    assert _invoke("build") == (
        2, "", (f"error: cannot create the vault dir {tiny_env / 'vault'}: Not a directory (check --vault / "
               "DOCSVAULT_VAULT)\n"))


def test_capture_refuses_before_writing_the_note(tiny_env: Path, tmp_path: Path) -> None:
    notes = tmp_path / "inbox"
    notes.mkdir()
    (tiny_env / "sources.yaml").write_text(
        f"sources:\n  - name: inbox\n    kind: local\n    path: {notes}\n    format: obsidian\n", encoding="utf-8")
    (tiny_env / "somefile").write_text("x", encoding="utf-8")
    data = tiny_env / "somefile" / "data"
    assert _invoke("--data", str(data), "capture", "hello there", "--source", "inbox") == (
        2, "", f"error: cannot create the data dir {data}: Not a directory (check --data / DOCSVAULT_DATA)\n")
    assert os.listdir(notes) == []
    code, out, _ = _invoke("--data", str(data), "capture", "hello there", "--source", "inbox", "--no-build")
    assert code == 0 and out.startswith(f"captured {notes / 'hello there.md'} ")     # no build: the data dir unused


def test_writable_dir_problem_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "a" / "b"
    assert writable_dir_problem(folder, "data dir", "check --data / DOCSVAULT_DATA") is None
    assert folder.is_dir() and os.listdir(folder) == []

    import tempfile

    def denied(*_a: object, **_k: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", denied)      # root writes anywhere: a read-only folder, simulated
    assert writable_dir_problem(folder, "vault dir", "check --vault / DOCSVAULT_VAULT") == (
        f"cannot write in the vault dir {folder}: Permission denied (check --vault / DOCSVAULT_VAULT)")


def test_a_dagster_home_outside_the_data_dir_is_checked_too(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "file" / "home"))
    s = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    assert write_dirs_problem(s) == (f"cannot create the Dagster home {tmp_path / 'file' / 'home'}: Not a directory "
                                     "(check DAGSTER_HOME)")


def test_the_build_lock_under_a_file_is_a_pipeline_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(PipelineError) as err, build_lock(tmp_path / "file" / "data"):
        pass
    assert str(err.value) == (f"cannot create the build lock {tmp_path / 'file' / 'data' / 'build.lock'}: Not a "
                              "directory (check the data dir: --data / DOCSVAULT_DATA)")


# ---- text that starts with `-`


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[object, str]:
    monkeypatch.setattr(sys, "argv", ["docsvault", *args])
    monkeypatch.setattr(cli, "app", lambda **kw: app(prog_name="docsvault", **kw))    # not pytest's name
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    out, err = capsys.readouterr()
    assert out == ""
    return exit_.value.code, err


def test_capture_of_frontmatter_text_says_how_to_pass_it(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, capsys, "capture", "---\ntitle: x\n---\nbody", "--source", "notes") == (
        2, ("error: No such option: '---\\ntitle: x\\n---\\nbody': text that starts with '-' must come after '--' "
           "(options first: docsvault capture [OPTIONS] -- \"$TEXT\"), or pipe it or pass it with --file - "
           "(see `docsvault capture --help`)\n"))
    long = "---\ntitle: a very long title that goes on and on\n---\n"
    assert _main(monkeypatch, capsys, "capture", long)[1].startswith(
        "error: No such option: '---\\ntitle: a very long title that goes …': text that starts with '-'")


def test_a_search_query_starting_with_a_dash_says_how_to_pass_it(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, capsys, "search", "-plugin template") == (
        2, ("error: No such option: '-plugin template': text that starts with '-' must come after '--' (options "
           "first: docsvault search [OPTIONS] -- \"$TEXT\") (see `docsvault search --help`)\n"))


@pytest.mark.parametrize("args, line", [
    # session 49: `-word` excludes a word (README "Query syntax"), but a query of one `-word`, or one given as a
    # second argument, got Click's bare "No such option: -o"; one whose first letter is an option taking a value
    # (`-tea` is `-t ea`, a --tag) got "Missing argument 'QUERY'"
    (["search", "green tea", "-oolong"], ("error: No such option: '-oolong': text that starts with '-' must come "
                                         "after '--' (options first: docsvault search [OPTIONS] -- \"$TEXT\") "
                                         "(see `docsvault search --help`)\n")),
    (["search", "-tea"], ("error: Missing argument 'QUERY'. '-tea' was read as the option -t with the value 'ea': "
                          "text that starts with '-' must come after '--' (options first: docsvault search [OPTIONS] "
                          "-- \"$TEXT\") (see `docsvault search --help`)\n")),
])
def test_a_search_query_word_starting_with_a_dash_says_how_to_pass_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], line: str) -> None:
    assert _main(monkeypatch, capsys, *args) == (2, line)


@pytest.mark.parametrize("args, line", [
    (["search", "x", "--bogus"], "error: No such option: --bogus (see `docsvault search --help`)\n"),
    (["search", "x", "-p"], "error: No such option: -p (see `docsvault search --help`)\n"),
    (["capture", "--fiel=a b"], ("error: No such option: --fiel (Possible options: --file, --help, --title) "
                                 "(see `docsvault capture --help`)\n")),
])
def test_a_mistyped_option_gets_no_text_hint(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             args: list[str], line: str) -> None:
    assert _main(monkeypatch, capsys, *args) == (2, line)


# ---- eval --history


@pytest.mark.parametrize("args, other", [
    (["--lanes", "bm25"], "--lanes"), (["--both"], "--both"), (["--unscoped"], "--unscoped"),
    (["cases.yaml"], "FILE arguments"),
])
def test_eval_history_refuses_what_it_would_ignore(tmp_path: Path, args: list[str], other: str) -> None:
    assert _invoke("--data", str(tmp_path), "eval", "--history", *args) == (
        2, "", f"error: --history shows the recorded runs; it does not combine with {other}\n")


# ---- read of a file the fetch skipped


def _fetched(tmp_path: Path, roots: list[Path]) -> Settings:
    """The fetch of one local source ``mynotes`` over ``roots`` (no build: the warnings are in its fetch.json)."""
    from pipeline import stages
    from pipeline.ingest.sources import load_sources

    sources = tmp_path / "sources.yaml"
    paths = "".join(f"\n      - {r}" for r in roots)
    sources.write_text(f"sources:\n  - name: mynotes\n    kind: local\n    path:{paths}\n    format: obsidian\n",
                       encoding="utf-8")
    s = Settings(sources, tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    (tmp_path / "vault").mkdir()
    stages.fetch_stage(s, load_sources(sources)[0])
    return s


def _read(s: Settings, note: str) -> tuple[int, str, str]:
    return _invoke("--sources", str(s.sources_file), "--data", str(s.data_dir), "--vault", str(s.vault_dir),
                   "read", note)


def test_read_of_a_skipped_symlink_gives_the_reason(tmp_path: Path) -> None:
    root, outside = tmp_path / "notes", tmp_path / "outside"
    (root / "Weird").mkdir(parents=True)
    outside.mkdir()
    (root / "a.md").write_text("# a\n", encoding="utf-8")
    (outside / "o.md").write_text("# o\n", encoding="utf-8")
    (outside / "l.md").write_text("# l\n", encoding="utf-8")
    os.symlink(outside / "o.md", root / "Weird" / "symlink-out.md")
    os.symlink(outside, root / "Linked")
    os.symlink(root / "nowhere.md", root / "dangling.md")
    s = _fetched(tmp_path, [root])
    line = "error: mynotes/Weird/symlink-out.md is not in the vault: the last build skipped it (symlink leaving the root)\n"
    assert _read(s, "mynotes/Weird/symlink-out.md") == (2, "", line)
    assert _read(s, "Weird/symlink-out.md") == (2, "", line)                  # a source path too
    assert _read(s, "mynotes/dangling.md") == (
        2, "", ("error: mynotes/dangling.md is not in the vault: the last build skipped it (dangling or unreadable "
               "symlink)\n"))
    assert _read(s, "mynotes/Linked/l.md") == (
        2, "", (f"error: mynotes/Linked/l.md is not in the vault: the last build skipped it (symlinked folder "
               f"{root / 'Linked'}: its files are not read (move the folder into the source, or add its target as "
               "another path))\n"))
    code, _, err = _read(s, "mynotes/Weird/other.md")
    assert (code, err.startswith("error: no note 'mynotes/Weird/other.md' in the vault ")) == (2, True)

    from pipeline.mcp_server import ToolFailure, VaultService

    with pytest.raises(ToolFailure) as failure:
        VaultService(s).read("mynotes/Weird/symlink-out.md")
    assert str(failure.value) == line[len("error: "):-1]


def test_read_of_a_skipped_symlink_in_a_source_of_several_folders(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for root in (one, two):
        root.mkdir()
        (root / "a.md").write_text("# a\n", encoding="utf-8")
    (tmp_path / "o.md").write_text("# o\n", encoding="utf-8")
    os.symlink(tmp_path / "o.md", two / "out.md")
    s = _fetched(tmp_path, [one, two])
    assert _read(s, "mynotes/two/out.md") == (
        2, "", ("error: mynotes/two/out.md is not in the vault: the last build skipped it (symlink leaving the "
               "root)\n"))
    assert _read(s, "mynotes/one/out.md")[2].startswith("error: no note 'mynotes/one/out.md' in the vault ")


def test_a_source_folder_inside_the_vault_is_told_to_move_out(tmp_path: Path) -> None:
    """A user who wrote notes in vault/Inbox (as README "Your notes in the vault" says) and added that folder as a
    source was told to "put the vault dir outside the source", though the vault holds the source (session 43)."""
    (tmp_path / "vault" / "Inbox").mkdir(parents=True)
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  - name: inbox\n    kind: local\n    path: vault/Inbox\n", encoding="utf-8")
    common = ("--sources", str(sources), "--vault", str(tmp_path / "vault"), "--data", str(tmp_path / "data"))
    assert _invoke(*common, "sources", "validate") == (
        1, "", (f"error: {sources}: source 'inbox': its folder {tmp_path}/vault/Inbox is inside the vault dir "
               f"{tmp_path}/vault, which the build writes; move the folder out of it (notes of yours to search: an "
               "Obsidian vault of their own, added as a local source)\n"))
    sources.write_text("sources:\n  - name: all\n    kind: local\n    path: .\n", encoding="utf-8")
    assert _invoke(*common, "sources", "validate") == (             # the vault inside the source: as before
        1, "", (f"error: {sources}: source 'all': its folder {tmp_path} overlaps the vault dir {tmp_path}/vault; put "
               "the vault dir (--vault / DOCSVAULT_VAULT) outside the source\n"))
