"""Hostile environments (session 41's hostile tester): a path variable set to "", one folder as both the vault and
the data dir, a data dir whose path holds a '?', no home directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import config
from pipeline.cli import app
from pipeline.config import Settings

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# ---- DOCSVAULT_DATA= (set, but empty)


@pytest.mark.parametrize("name,key,default", [("DOCSVAULT_DATA", "data_dir", "data"),
                                              ("DOCSVAULT_VAULT", "vault_dir", "vault"),
                                              ("DOCSVAULT_SOURCES", "sources_file", "sources.yaml"),
                                              ("DOCSVAULT_EVALS", "evals_dir", "evals")])
def test_an_empty_path_variable_is_its_default_not_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, key: str, default: str) -> None:
    """`export DOCSVAULT_DATA=$UNSET` made the working directory the data dir: a build wrote state/, cache/, raw/,
    notes/, dagster/ and warehouse.duckdb among the user's files."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(name, "")
    assert getattr(Settings.from_env(), key) == tmp_path / default


def test_an_empty_model_variable_is_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """`DOCSVAULT_MODEL=` failed every source with "empty embedding model spec: set DOCSVAULT_MODEL", which is set.
    An empty DOCSVAULT_CROSSLINGUAL_MODEL keeps meaning "no cross-lingual lane", as `none` does."""
    from pipeline import config

    for name in ("DOCSVAULT_MODEL", "DOCSVAULT_MULTILINGUAL_MODEL", "DOCSVAULT_CROSSLINGUAL_MODEL"):
        monkeypatch.setenv(name, "")
    settings = Settings.from_env()
    assert (settings.model, settings.multilingual_model, settings.crosslingual) == (
        config.DEFAULT_MODEL, config.DEFAULT_MULTILINGUAL_MODEL, None)


def test_a_build_with_an_empty_data_variable_writes_no_file_in_the_working_directory(
        tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tiny_env / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("DOCSVAULT_DATA", "")
    monkeypatch.setenv("DAGSTER_HOME", "")
    code, _, err = _invoke("build", "--quiet")
    assert (code, "Traceback" not in err) == (0, True), err
    assert sorted(os.listdir(work)) == ["data"]         # ./data, the documented default
    assert (work / "data" / "warehouse.duckdb").is_file()


# ---- one folder as the vault and the data dir


def test_one_folder_as_vault_and_data_dir_is_refused_in_one_line(tiny_env: Path) -> None:
    """`--data X --vault X` built: the vault's source folders lay among data/'s, a source named `notes` shared
    data/notes/ (the build called notes.jsonl a file of the user's), and Obsidian showed the data's clones."""
    both = tiny_env / "both"
    line = (f"error: the vault dir and the data dir are one folder, {both}: the vault's source folders would mix "
            "with the data's (notes/, cache/, raw/ …); give them separate folders (--vault / DOCSVAULT_VAULT, "
            "--data / DOCSVAULT_DATA), e.g. ./vault and ./data\n")
    code, out, err = _invoke("--data", str(both), "--vault", str(both), "build")
    assert (code, out, err) == (2, "", line)
    assert not (both / "tiny").exists() and not (both / "warehouse.duckdb").exists()
    assert _invoke("--data", str(both), "--vault", str(both), "sources", "validate") == (1, "", line)


# ---- a '?' in the data dir's path


def test_a_question_mark_in_the_dagster_home_path_is_one_line_and_nothing_is_written_beside_it(
        tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster's SQLite storage puts DAGSTER_HOME into an unquoted URL: a data dir `…/what?/data` made a SQLite
    file `what` next to the folder and every build ended in a SQLAlchemy traceback (no such table: event_logs)."""
    monkeypatch.delenv("DAGSTER_HOME")
    data = tiny_env / "what?" / "data"
    code, out, err = _invoke("--data", str(data), "build")
    assert (code, out, err) == (
        2, "", (f"error: cannot use the Dagster home {data / 'dagster'}: its path has a '?', which Dagster's SQLite "
                "storage cannot open (it cuts the path there); use a folder without '?' (check --data / "
                "DOCSVAULT_DATA, or set DAGSTER_HOME)\n"))
    assert not (tiny_env / "what").exists() and not data.exists()


# ---- no home directory


def _no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME unset and a user id without a passwd entry (a container's `--user 4242`): Path.home() raises."""
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("DOCSVAULT_SEARCH_CACHE", raising=False)
    monkeypatch.delenv("DOCSVAULT_ONNX_CACHE", raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))


def test_without_a_home_the_search_cache_is_off_and_the_onnx_cache_is_the_users_temp_folder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    _no_home(monkeypatch)
    assert config.search_cache_dir() is None
    assert config.onnx_cache_dir() == Path(tempfile.gettempdir()) / f"docsvault-{os.getuid()}" / "onnx"
    monkeypatch.setenv("XDG_CACHE_HOME", "/x/cache")
    assert config.search_cache_dir() == Path("/x/cache/docsvault/search")


def test_search_without_a_home_answers(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`docsvault search` ended in `RuntimeError: Could not determine home directory.` (the search cache's
    default folder is under ~/.cache)."""
    code, _, err = _invoke("build", "--quiet")
    assert code == 0, err
    _no_home(monkeypatch)
    code, out, err = _invoke("search", "--json", "-k", "1", "duck")
    assert (code, err) == (0, "")
    assert len(json.loads(out)) == 1


def test_a_switch_set_to_neither_on_nor_off_is_warned_about_once(monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """`DOCSVAULT_USAGE_LOG=disable` kept recording every read without a word, and `DOCSVAULT_USAGE_BOOST=enable`
    boosted nothing (found by the s42 hostile tester): such a value still counts as the default, and says so."""
    from pipeline.search.usage import boost_enabled, recording_enabled

    monkeypatch.setattr(config, "_flag_warned", set())
    monkeypatch.setenv("DOCSVAULT_USAGE_LOG", "disable")
    monkeypatch.setenv("DOCSVAULT_USAGE_BOOST", "enable")
    with caplog.at_level("WARNING", logger="docsvault"):
        assert recording_enabled() is True and recording_enabled() is True
        assert boost_enabled() is False
    assert [r.getMessage() for r in caplog.records] == [
        ("DOCSVAULT_USAGE_LOG='disable' is neither on (1/true/on/yes) nor off (0/false/off/no); it counts as on (or "
         "unset it)"),
        ("DOCSVAULT_USAGE_BOOST='enable' is neither on (1/true/on/yes) nor off (0/false/off/no); it counts as off (or "
         "unset it)")]
    caplog.clear()
    for value, on in (("OFF", False), (" yes ", True), ("", False)):
        monkeypatch.setenv("DOCSVAULT_USAGE_BOOST", value)
        assert boost_enabled() is on
    assert caplog.records == []
