"""The contract a script relies on (README "Exit codes"): grep's exit codes (0 found, 1 nothing found or a problem
found by a check, 2 an error of any kind, a bug's too), a reader that closes the pipe early changes none of them,
`--json` is the only thing on stdout, and one JSON spelling per concept across commands.

Before session 47 an error and "nothing found" were both exit 1 (search, check-vault), a bug was a traceback with
exit 1, `docsvault search … | head -1` exited 1 under `set -o pipefail`, `eval --json` said `hit@1` where
`build --json` said `hit_at_1`, and `status --json` said `skipped` for the count `build --json` calls
`skipped_files`, and `capture --json` called the note's file `path`, every other JSON's vault path."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import cli
from pipeline.cli import EXIT_ERROR, EXIT_NONE, EXIT_OK, ClosedPipeTolerant, app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


def _code(*args: str) -> int:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code


def test_the_codes_are_greps() -> None:
    assert (EXIT_OK, EXIT_NONE, EXIT_ERROR) == (0, 1, 2)


# ---- each command: success, nothing found, bad input


def test_search_found_none_found_and_errors(built_tiny_env: Path) -> None:
    assert _code("search", "ducks") == 0
    assert _code("search", "ducks", "--json") == 0
    assert _code("search", "ducks", "--files") == 0
    for mode in ([], ["--json"], ["--files"], ["--files", "--json"]):     # nothing found: 1, in every output mode
        assert _code("search", "ducks", "--tag", "nothing-has-it", *mode) == 1, mode
    assert _code("search", "ducks", "--source", "nope") == 2            # an unknown source: an error, not "none"
    assert _code("search", "ducks", "--source", "nope", "--json") == 2
    assert _code("search", "") == 2
    assert _code("search", "ducks", "-k", "0") == 2
    assert _code("--data", str(built_tiny_env / "nodata"), "search", "ducks") == 2     # no warehouse


def test_eval_history_without_a_recorded_run_is_nothing_found(tmp_path: Path) -> None:
    """`eval --history` of a data dir where no eval has run exited 0 (helper s47-leftovers): nothing found is 1."""
    data = ["--data", str(tmp_path / "data"), "--sources", str(tmp_path / "sources.yaml")]
    result = runner.invoke(app, [*data, "eval", "--history"])
    assert (result.exit_code, result.stdout) == (1, (
        "no eval has run in this data dir: `docsvault build` scores your eval cases and records the run (the "
        "retrieval_eval asset records one per build that changes the warehouse; a capture's build and `build "
        "--no-eval` leave it out)\n"))
    result = runner.invoke(app, [*data, "eval", "--history", "--json"])
    assert (result.exit_code, result.stdout) == (1, "[]\n")


def test_check_vault_tells_a_problem_found_from_an_error(built_tiny_env: Path) -> None:
    assert _code("check-vault") == 0
    assert _code("check-vault", "--source", "nope") == 2
    os.chmod(built_tiny_env / "vault" / "tiny" / "Ducks.md", 0o600)     # a note Obsidian's sync may not read
    result = runner.invoke(app, ["check-vault", "--json"])
    assert (result.exit_code, json.loads(result.stdout)["ok"]) == (1, False)
    assert _code("check-vault") == 1


def test_read_related_embed_status_eval(built_tiny_env: Path) -> None:
    assert _code("read", "Ducks") == 0
    assert _code("read", "Nowhere") == 2
    assert _code("read", "Ducks", "--page", "9") == 2
    assert _code("related", "Ducks") == 0
    assert _code("related", "Nowhere") == 2
    assert _code("embed", "ducks") == 0
    assert _code("embed", "ducks", "--source", "nope") == 2
    assert _code("status") == 0
    assert _code("eval") == 0
    assert _code("eval", "--lanes", "colbert") == 2
    assert _code("eval", str(built_tiny_env / "no-such.yaml")) == 2
    (built_tiny_env / "sources.yaml").write_text("sources:\n  - name: [oops\n", encoding="utf-8")
    assert _code("status") == 2                                         # printed, then the file's error
    assert _code("status", "--json") == 2


def test_sources_validate_valid_invalid_and_a_bad_option(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    good = tmp_path / "good.yaml"
    good.write_text("sources:\n  - name: a\n    kind: local\n    path: notes\n", encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - name: a\n    kind: lcoal\n    path: notes\n", encoding="utf-8")
    no_yaml = tmp_path / "no.yaml"
    no_yaml.write_text("sources: [\n", encoding="utf-8")
    base = ["--data", str(tmp_path / "d"), "--vault", str(tmp_path / "v")]
    assert _code("--sources", str(good), *base, "sources", "validate") == 0
    assert _code("--sources", str(bad), *base, "sources", "validate") == 1         # the file has a problem
    assert _code("--sources", str(no_yaml), *base, "sources", "validate") == 1
    assert _code("--sources", str(tmp_path / "none.yaml"), *base, "sources", "validate") == 1
    assert _code("--sources", str(good), *base, "sources", "validate", "--bogus") == 2
    assert _code("--sources", str(bad), *base, "sources", "list") == 2             # list cannot list it: an error


def test_a_failed_build_is_an_error(tiny_env: Path) -> None:
    (tiny_env / "sources.yaml").write_text(
        f"sources:\n  - name: gone\n    kind: local\n    path: {tiny_env / 'missing'}\n", encoding="utf-8")
    assert _code("build", "--quiet") == 2


# ---- an internal error (a bug): its traceback, one last line, exit 2 (was a bare traceback, exit 1)


def test_a_bug_in_a_command_exits_2_with_one_last_line(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def bug(*_a: object, **_k: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(cli, "status_data", bug)
    monkeypatch.setattr(sys, "argv", ["docsvault", "--data", str(tmp_path), "status", "--json"])
    with pytest.raises(SystemExit) as exit_:
        cli._main()
    out, err = capsys.readouterr()
    assert (exit_.value.code, out) == (2, "")
    assert err.startswith("Traceback (most recent call last):\n")
    assert err.splitlines()[-1] == ("error: internal error: KeyError: 'boom' (a bug in docsvault: please report it "
                                    "with the traceback above and the command that gave it)")


# ---- a reader that closes the pipe early


def test_a_closed_pipe_sends_the_rest_to_dev_null() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8")
    wrapped = ClosedPipeTolerant(stream)
    wrapped.write("x" * 100_000)          # more than the buffer: written at once, into the closed pipe
    wrapped.write("more\n")
    wrapped.flush()
    assert os.path.samefile(f"/dev/fd/{write_end}", os.devnull)
    stream.close()                        # what it still buffered goes to /dev/null: no error at exit either


@pytest.mark.parametrize(("args", "code"), [(["search", "ducks"], 0), (["search", "ducks", "--json"], 0),
                                            (["search", "ducks", "--tag", "nothing-has-it"], 1)])
def test_search_into_a_closed_pipe_keeps_its_exit_code(built_tiny_env: Path, args: list[str], code: int) -> None:
    """`set -o pipefail; docsvault search … | head -1`: the reader has gone when the hits are printed; the exit
    code is still the search's (was 1, from Click's broken-pipe handling), with nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=120, check=False, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (code, "")


# ---- --json: the only thing on stdout, one spelling per concept


@pytest.mark.parametrize(("args", "code"), [
    (["search", "ducks", "--json"], 0), (["search", "ducks", "--json", "--files"], 0),
    (["search", "ducks", "--json", "--explain"], 0),
    (["search", "ducks", "--tag", "nothing-has-it", "--json"], 1),     # nothing found: `[]`, exit 1
    (["search", "ducks zzyzx", "--json"], 0),                          # one word found, one not: found
    (["embed", "ducks", "--json"], 0), (["read", "Ducks", "--json"], 0), (["related", "Ducks", "--json"], 0),
    (["status", "--json"], 0), (["check-vault", "--json"], 0),         # the tiny vault has no problem
    (["eval", "--json"], 0), (["eval", "--json", "--both"], 0), (["eval", "--json", "--lanes", "bm25,hybrid"], 0),
    (["eval", "--json", "--history"], 0),                              # the fixture's build recorded a run
    (["capture", "Herons stand still.", "--title", "Herons", "--source", "tiny", "--no-build", "--json"], 0),
])
def test_json_is_alone_on_stdout(built_tiny_env: Path, args: list[str], code: int) -> None:
    """Each command's exact exit code in the built tiny env (accepted 0 or 1 before session 48), and one JSON
    document on stdout, nothing before or after it."""
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    json.loads(result.stdout)


def test_one_spelling_of_the_eval_metrics_and_the_skipped_files(built_tiny_env: Path) -> None:
    metrics = {"n", "hit_at_1", "hit_at_3", "mrr_at_10", "ndcg_at_10"}
    report = json.loads(runner.invoke(app, ["eval", "--json"]).stdout)
    assert set(report["overall"]) == metrics                            # was hit@1, hit@3, mrr@10, ndcg@10
    assert {k for k in report["cases"][0] if k in metrics | {"hit@1"}} == metrics - {"n"}
    lanes = json.loads(runner.invoke(app, ["eval", "--json", "--lanes", "bm25"]).stdout)
    assert set(lanes["bm25"]["by_source"]["tiny"]) == metrics
    history = json.loads(runner.invoke(app, ["eval", "--json", "--history"]).stdout)
    assert metrics - {"n"} <= set(history[0])
    status = json.loads(runner.invoke(app, ["status", "--json"]).stdout)
    assert status["sources"][0]["skipped_files"] == 0 and "skipped" not in status["sources"][0]
    captured = json.loads(runner.invoke(app, ["capture", "Egrets are white.", "--title", "Egrets", "--source", "tiny",
                                              "--no-build", "--json"]).stdout)
    assert (captured["file"], captured["vault_path"]) == (
        str(built_tiny_env / "tinyvault" / "Egrets.md"), "tiny/Egrets.md")             # `path`: the file, before
    assert "path" not in captured
    build = json.loads(runner.invoke(app, ["build", "--json", "--quiet"]).stdout)
    assert build["sources"][0]["skipped_files"] == 0
    assert set(build["shared"]["eval"] or {}) <= metrics | {"unreachable", "skipped_cases", "skipped_corpora"}
