"""Capture of what real texts look like: names long in UTF-8 bytes (Japanese), a text with its own frontmatter,
titles from Chinese/Japanese sentences (``。！？``).

The vault path capture returns is the one the build gives the note (``read`` opens it); a text's own frontmatter
is merged into the note's, never written as a second block. Unit tests on ``write_capture`` (no build), then the
CLI and the MCP service end to end on one tiny build (fake hash embedder).
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.ingest.capture import CaptureError, check_text, name_from_title, title_of, write_capture
from pipeline.ingest.normalize import rel_path_for
from pipeline.models import Source
from tests.conftest import _tiny_env_at, _write_tiny, built_once

runner = CliRunner()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LONG_NAME = "ナマケモノ" + "の観察記録" * 15                       # 80 characters, 240 UTF-8 bytes
LONG_VAULT_NAME = "ナマケモノ" + "の観察記録" * 11 + "の観-165217ed.md"  # the vault's cut + hash (200 bytes at most)


def _local(root: Path, name: str = "inbox") -> Source:
    root.mkdir(parents=True, exist_ok=True)
    return Source(name=name, kind="local", path=(root,))


def _files(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


# ---------------------------------------------------------------------------------------------------------------
# titles and names: 。！？ end a sentence; the terminator stays in the title (as "." does), the name drops 。 and ？


@pytest.mark.parametrize("text, title, name", [
    ("日本語のメモ。カワウソは手をつないで寝る。", "日本語のメモ。", "日本語のメモ"),
    ("なぜ？ 理由は簡単。", "なぜ？", "なぜ"),
    ("すごい！カワウソは石で遊ぶ。", "すごい！", "すごい！"),
    ("本当？！次の文。", "本当？！", "本当？！"),
    ("「こんにちは。」と言った。", "「こんにちは。」", "「こんにちは。」"),
    ("中文笔记。水獭睡觉时手拉手。", "中文笔记。", "中文笔记"),
    ("一文だけの行", "一文だけの行", "一文だけの行"),
    # English as before: the period stays in the title, the name drops it; no sentence end without a space after
    ("First sentence here. Second one.", "First sentence here.", "First sentence here"),
    ("Wow! Great.", "Wow!", "Wow!"),
    ("v1.2 is out", "v1.2 is out", "v1.2 is out"),
    # a thematic break above the first line is no title
    ("---\n\nAfter a rule. More.", "After a rule.", "After a rule"),
    # inline Markdown is titled and named as its text: `[[ウィンドウ関数]] の復習` was named `ウィンドウ関数-- の復習.md`
    # (found by a Japanese note-taker, helper s36-nu2)
    ("[[ウィンドウ関数]] の復習。rank の違い。", "ウィンドウ関数 の復習。", "ウィンドウ関数 の復習"),
    ("[[Guide#Install|the install]] notes. More.", "the install notes.", "the install notes"),
    ("**重要**: [docs](https://x.y/z) を読む", "重要: docs を読む", "重要- docs を読む"),
    ("# `read_csv` と ~~旧~~ [[新 API]]\n本文", "read_csv と 旧 新 API", "read_csv と 旧 新 API"),
    ("![[図.png]] 図の説明。続き", "図の説明。", "図の説明"),
    ("# ![[only.png]]\n\n本文の一行目。", "本文の一行目。", "本文の一行目"),
    ("__init__.py で x==1 のとき", "__init__.py で x==1 のとき", "__init__.py で x==1 のとき"),
    # a heading's closing #s follow a space (CommonMark): `# Learn C#` was titled `Learn C` (reviewer, s40)
    ("# Learn C#\n本文", "Learn C#", "Learn C"),
    ("# Closed heading ##\n本文", "Closed heading", "Closed heading"),
])
def test_title_and_name_of_a_first_sentence(text: str, title: str, name: str) -> None:
    assert title_of(text) == title
    assert name_from_title(title) == name


def test_write_capture_japanese_sentence_title(tmp_path: Path) -> None:
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "日本語のメモ。カワウソは手をつないで寝る。\n", agent="a", correlation_id="c1", now=NOW)
    assert (got.path.name, got.vault_path) == ("日本語のメモ.md", "inbox/日本語のメモ.md")
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: 日本語のメモ。\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\n"
        "---\n\n日本語のメモ。カワウソは手をつないで寝る。\n")


# ---------------------------------------------------------------------------------------------------------------
# vault paths: what the build gives the note, for read


def test_long_given_name_returns_the_vault_path_the_build_gives(tmp_path: Path) -> None:
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "ナマケモノは一日に二十時間眠る。", name=LONG_NAME, agent="a", correlation_id="c1")
    assert got.path == tmp_path / "inbox" / f"{LONG_NAME}.md"                 # the file keeps the name given
    assert got.vault_path == f"inbox/{LONG_VAULT_NAME}"
    assert got.vault_path == "inbox/" + rel_path_for(f"{LONG_NAME}.md")


def test_long_title_gives_a_name_the_vault_keeps(tmp_path: Path) -> None:
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "アイアイ" + "の長い名前" * 20 + "です。次の文。", agent="a", correlation_id="c1")
    name = "アイアイ" + "の長い名前" * 12 + "の"                              # 65 characters, 195 bytes (+ .md: 198)
    assert _files(tmp_path / "inbox") == [f"{name}.md"]
    assert got.vault_path == f"inbox/{name}.md" and rel_path_for(f"{name}.md") == f"{name}.md"
    assert got.path.read_text(encoding="utf-8").startswith(
        "---\ntitle: アイアイ" + "の長い名前" * 15 + "…\n")                 # the title: 80 chars, with …


def test_names_the_vault_changes(tmp_path: Path) -> None:
    root = tmp_path / "inbox"
    src = _local(root)
    # a given name keeps its file name; the vault path is the vault's (# is - there)
    assert write_capture(src, "x", name="C# tips").vault_path == "inbox/C- tips.md"
    # a name from the title is one the vault keeps
    got = write_capture(src, "# [WIP] F# ^notes\n\ntext")
    assert (got.path.name, got.vault_path) == ("WIP- F- -notes.md", "inbox/WIP- F- -notes.md")
    assert write_capture(src, "# CON\n\ntext").vault_path == "inbox/CON_.md"
    assert _files(root) == ["C# tips.md", "CON_.md", "WIP- F- -notes.md"]
    # a name that would take or share another note's vault path is refused, nothing written
    (root / "Foo.md").write_text("# Foo\n", encoding="utf-8")
    with pytest.raises(CaptureError) as err:
        write_capture(src, "x", name="foo")
    assert str(err.value) == ("a note named 'foo.md' would collide in the vault with 'Foo.md' (vault path "
                              "inbox/Foo.md): pass another --name (nothing was written)")
    with pytest.raises(CaptureError, match=r"^a note named 'C- tips.md' would collide in the vault with "
                                           r"'C# tips.md' \(vault path inbox/C- tips.md\)"):
        write_capture(src, "x", name="C- tips")
    assert _files(root) == ["C# tips.md", "CON_.md", "Foo.md", "WIP- F- -notes.md"]


def test_a_name_in_a_folder_that_exists_says_it_exists(tmp_path: Path) -> None:
    # `capture --name daily/2026-12-05` over an existing daily note said it "would collide in the vault with
    # '2026-12-05.md' (the same name in NFC form …)": the file name was compared with the name and its folder
    root = tmp_path / "inbox"
    src = _local(root)
    (root / "daily").mkdir(parents=True)
    (root / "daily" / "2026-12-05.md").write_text("# mine\n", encoding="utf-8")
    with pytest.raises(CaptureError) as err:
        write_capture(src, "x", name="daily/2026-12-05")
    assert str(err.value) == (f"a note named 'daily/2026-12-05.md' already exists in {root.resolve()}: pass another "
                              "--name (nothing was overwritten)")
    assert (root / "daily" / "2026-12-05.md").read_text(encoding="utf-8") == "# mine\n"
    nfd = unicodedata.normalize("NFD", "ダウンロード.md")      # another normalization in a folder is still named
    (root / "daily" / nfd).write_text("# Downloads\n", encoding="utf-8")
    with pytest.raises(CaptureError) as err:
        write_capture(src, "x", name="daily/ダウンロード")
    assert str(err.value).startswith(f"a note named 'daily/ダウンロード.md' would collide in the vault with {nfd!r} "
                                     "(the same name in NFD form, ")


def test_a_name_in_another_unicode_normalization_is_refused(tmp_path: Path) -> None:
    # macOS writes NFD names: the build reads ダウンロード.md (NFD) as the NFC name and would skip one of the two
    root = tmp_path / "inbox"
    src = _local(root, "myvault")
    nfd = unicodedata.normalize("NFD", "ダウンロード.md")
    (root / nfd).write_text("# Downloads\n", encoding="utf-8")
    with pytest.raises(CaptureError) as err:
        write_capture(src, "NFC collision", name="ダウンロード")
    assert str(err.value) == (
        f"a note named 'ダウンロード.md' would collide in the vault with {nfd!r} (the same name in NFD "
        "form, \\u30bf\\u3099\\u30a6\\u30f3\\u30ed\\u30fc\\u30c8\\u3099.md; vault path myvault/ダウンロード.md): "
        "pass another --name (nothing was written)")
    with pytest.raises(CaptureError, match=r"^a note named 'ダウンロード.md' would collide in the vault with "):
        write_capture(src, "# ダウンロード\n\nfrom the title", name_option="`name`")     # a name from the title too
    with pytest.raises(CaptureError, match=r"; vault path multi/inbox/ダウンロード.md\): pass another `name` "):
        write_capture(Source(name="multi", kind="local", path=(root, _local(tmp_path / "other").path[0])),
                      "x", name="ダウンロード", name_option="`name`")
    assert [ascii(n) for n in _files(root)] == [ascii(nfd)]                # nothing written
    # an NFC name that folds to an existing NFD one with another case: the case-insensitive check names it
    (root / unicodedata.normalize("NFD", "Café.md")).write_text("x", encoding="utf-8")
    with pytest.raises(CaptureError, match=r"^a note named 'café.md' would collide in the vault with 'Café.md' "):
        write_capture(src, "x", name="café")
    assert write_capture(src, "x", name="Cafe").vault_path == "myvault/Cafe.md"   # no accent: another name


def test_vault_path_of_a_source_with_several_folders(tmp_path: Path) -> None:
    src = Source(name="multi", kind="local", path=(tmp_path / "inbox", tmp_path / "other"))
    for p in src.path:
        p.mkdir()
    assert write_capture(src, "# Hello\n\nx").vault_path == "multi/inbox/Hello.md"


# ---------------------------------------------------------------------------------------------------------------
# a text with its own frontmatter


def test_text_frontmatter_is_merged(tmp_path: Path) -> None:
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "---\ntitle: Pre\ntags: [x]\n---\n# Has FM\n\nBody about voles.\n", agent="a",
                        correlation_id="c1", now=NOW)
    assert got.vault_path == "inbox/Pre.md"
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: Pre\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\ntags:\n- x\n"
        "---\n\n# Has FM\n\nBody about voles.\n")


def test_text_frontmatter_merge_rules(tmp_path: Path) -> None:
    src = _local(tmp_path / "inbox")
    text = ("\n---\ntitle: Their title\naliases: [otter]\nstatus: draft\ncorrelation_id: theirs\ncreated: 2025-05-06\n"
            "related: notes/a.md\ntags: [x, Til]\nrating: 5\n---\n\nOtters hold hands.\n")
    got = write_capture(src, text, title="My title", agent="a", correlation_id="c1", related=["tiny/Ducks.md"],
                        tags=["#til", "new"], now=NOW)
    assert got.vault_path == "inbox/My title.md"
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: My title\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\n"
        "related:\n- notes/a.md\n- '[[tiny/Ducks]]'\ntags:\n- x\n- Til\n- new\n"
        "original_title: Their title\noriginal_created: '2025-05-06'\noriginal_status: draft\n"
        "original_correlation_id: theirs\naliases:\n- otter\nrating: 5\n---\n\n# My title\n\nOtters hold hands.\n")
    with pytest.raises(CaptureError, match="nothing to capture: the text is empty"):
        write_capture(src, "---\n---\n\n")


def test_an_empty_text_is_told_what_to_give() -> None:
    """`docsvault capture '　'` (an IME's full-width space alone) said only "nothing to capture: the text is empty"
    (helper s49-ja)."""
    for text in ("\u3000\u3000", "", "---\n---\n"):
        with pytest.raises(CaptureError) as err:
            check_text(text)
        assert str(err.value) == ("nothing to capture: the text is empty; give the note's text (`docsvault capture "
                                  "TEXT`, `--file FILE` or piped stdin; the save_note tool's text)")


def test_a_tags_string_of_the_text_is_merged_as_its_tags(tmp_path: Path) -> None:
    # `tags: alpha, beta` with --tag til was written as the list item 'alpha, beta' (one tag Obsidian cannot read)
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "---\ntags: alpha, beta  gamma\n---\n# Voles\n\ntext\n", agent="a",
                        correlation_id="c1", tags=["til", "Beta"], now=NOW)
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: Voles\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\ntags:\n"
        "- alpha\n- beta\n- gamma\n- til\n---\n\n# Voles\n\ntext\n")


@pytest.mark.parametrize("text, title, error", [
    ("---", None, "the text has no words, only '---'"),
    ("\n---\n\n", "T", "the text has no words, only '---'"),
    ("***\n- - -\n#", None, "the text has no words, only '*** - - - #'"),
    ("---\ntitle: Only a title\n---\n", None, "the text is only a frontmatter block"),
    ("---\ntitle: Only a title\n---\n\n", "T", "the text is only a frontmatter block"),
    ("---\ntags: [x]\n...\n---\n", None, "the text has no words besides its frontmatter, only '---'"),
    # Japanese punctuation is none either (session 41: "。。。" and "「」" were notes, "？" an error that
    # 'capture.md' already exists)
    ("。。。", None, "the text has no words, only '。。。'"),
    ("「」\n・・・", None, "the text has no words, only '「」 ・・・'"),
    ("？", "T", "the text has no words, only '？'"),
    ("---\ntitle: 題\n---\n……！", None, "the text has no words besides its frontmatter, only '……！'"),
])
def test_a_text_without_words_is_refused(tmp_path: Path, text: str, title: str | None, error: str) -> None:
    # as a blank text is: one line, nothing written (a lone '---' made notes/capture.md with title '')
    src = _local(tmp_path / "inbox")
    with pytest.raises(CaptureError) as err:
        write_capture(src, text, title=title)
    assert str(err.value) == f"nothing to capture: {error}; write the note's text (nothing was written)"
    assert _files(tmp_path / "inbox") == []


def test_a_text_of_one_emoji_or_one_word_after_its_frontmatter_is_kept(tmp_path: Path) -> None:
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "---\ntitle: Short\n---\nok\n", agent="a", correlation_id="c1", now=NOW)
    assert got.path.read_text(encoding="utf-8").endswith("correlation_id: c1\n---\n\nok\n")
    assert write_capture(src, "🦦", agent="a", correlation_id="c1", now=NOW).path.name == "🦦.md"


@pytest.mark.parametrize("text, error", [
    ("---\ntitle: [oops\n---\nbody\n", ("the text: line 2: invalid YAML frontmatter: the flow sequence ([…]) "
                                         "that starts on line 2 is never closed; add the closing ']' (nothing was "
                                         "written)")),
    ("---\n- a\n- b\n---\nbody\n", ("the text: line 2: frontmatter must be a YAML mapping (key: value lines), "
                                     "got list (nothing was written)")),
    ("---\ntitle: a\ntitle: b\n---\nbody\n", ("the text: line 3: invalid YAML frontmatter: duplicate key "
                                               "'title' on lines 2 and 3; remove or rename one of the two "
                                               "keys (nothing was written)")),
])
def test_malformed_text_frontmatter_is_a_one_line_error(tmp_path: Path, text: str, error: str) -> None:
    src = _local(tmp_path / "inbox")
    with pytest.raises(CaptureError) as err:
        write_capture(src, text)
    assert str(err.value) == error
    assert _files(tmp_path / "inbox") == []


def test_an_unclosed_rule_is_kept_as_text(tmp_path: Path) -> None:
    got = write_capture(_local(tmp_path / "inbox"), "---\nA rule, then text. More.\n", agent="a",
                        correlation_id="c1", now=NOW)
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: A rule, then text.\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\n"
        "---\n\n---\nA rule, then text. More.\n")


# ---------------------------------------------------------------------------------------------------------------
# CLI and MCP end to end: read the returned path, search the merged tags


@pytest.fixture
def cap_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny env with a local source ``mynotes`` (no format), after one build (conftest.built_once)."""

    def build(root: Path) -> None:
        env = _tiny_env_at(root, _write_tiny(root), monkeypatch)
        (env / "mynotes").mkdir()
        (env / "mynotes" / "Seed.md").write_text("# Seed\n\nThe first note.\n", encoding="utf-8")
        with (env / "sources.yaml").open("a", encoding="utf-8") as f:
            f.write(f"  - name: mynotes\n    kind: local\n    path: {env / 'mynotes'}\n")
        result = runner.invoke(app, ["build"])
        assert result.exit_code == 0, result.output

    root = built_once("capture-text-built", tmp_path_factory, monkeypatch, build)[0]
    monkeypatch.delenv("DOCSVAULT_CAPTURE_SOURCE", raising=False)
    return root


def run(*args: str, code: int = 0, stdin: str | None = None) -> str:
    result = runner.invoke(app, list(args), input=stdin)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def test_cli_capture_long_name_and_frontmatter(cap_env: Path) -> None:
    got = json.loads(run("capture", "--source", "mynotes", "--json", "--name", LONG_NAME,
                         "ナマケモノは一日に二十時間眠る。"))
    assert got["vault_path"] == f"mynotes/{LONG_VAULT_NAME}" and got["build"]["ok"] is True
    assert got["file"] == str(cap_env / "mynotes" / f"{LONG_NAME}.md")
    page = json.loads(run("read", got["vault_path"], "--json"))
    assert page["path"] == got["vault_path"] and "二十時間" in page["text"]
    # no --name, a long Japanese first line: a name the vault keeps
    got = json.loads(run("capture", "--source", "mynotes", "--json", "アイアイ" + "の長い名前" * 20 + "です。"))
    assert got["vault_path"] == "mynotes/アイアイ" + "の長い名前" * 12 + "の.md"
    assert json.loads(run("read", got["vault_path"], "--json"))["path"] == got["vault_path"]
    # a text's own frontmatter: one block, its tags searchable
    out = run("capture", "--source", "mynotes", stdin="---\ntitle: Pre\ntags: [x]\n---\n# Has FM\n\nBody about voles.\n")
    assert out.startswith(f"captured {cap_env / 'mynotes' / 'Pre.md'} (mynotes/Pre.md, correlation id ")
    text = (cap_env / "mynotes" / "Pre.md").read_text(encoding="utf-8")
    assert text.count("---\n") == 2 and "\ntags:\n- x\n---\n\n# Has FM\n\nBody about voles.\n" in text
    assert run("search", "--tag", "x", "voles", "--files").startswith("mynotes/Pre.md\t")
    # Japanese first sentence, no build
    out = run("capture", "--source", "mynotes", "--no-build", stdin="日本語のメモ。カワウソは手をつないで寝る。\n")
    assert out.startswith(f"captured {cap_env / 'mynotes' / '日本語のメモ.md'} (mynotes/日本語のメモ.md, ")
    assert "\ntitle: 日本語のメモ。\n" in (cap_env / "mynotes" / "日本語のメモ.md").read_text(encoding="utf-8")
    # no words, only a fence or a frontmatter block: one line, exit 2, nothing written
    assert run("capture", "--source", "mynotes", "--", "---", code=2) == (
        "error: nothing to capture: the text has no words, only '---'; write the note's text (nothing was "
        "written)\n")
    assert run("capture", "--source", "mynotes", stdin="---\ntitle: Empty\n---\n", code=2) == (
        "error: nothing to capture: the text is only a frontmatter block; write the note's text (nothing was "
        "written)\n")
    # a malformed frontmatter: one line, exit 2, nothing written
    assert run("capture", "--source", "mynotes", "--no-build", stdin="---\ntags: [x\n---\nbody\n", code=2) == (
        "error: the text: line 2: invalid YAML frontmatter: the flow sequence ([…]) that starts on line 2 is never "
        "closed; add the closing ']' (nothing was written)\n")
    assert sorted(p.name for p in (cap_env / "mynotes").iterdir()) == sorted(
        ["Seed.md", f"{LONG_NAME}.md", "アイアイ" + "の長い名前" * 12 + "の.md", "Pre.md", "日本語のメモ.md"])


def test_cli_capture_reads_shift_jis_and_bom_texts_as_one_line_errors_or_clean_text(cap_env: Path) -> None:
    """A Japanese note-taker (helper s36-nu2) piped a Shift_JIS memo to `capture`: a traceback
    (UnicodeEncodeError); `--file` of it gave Python's codec message and no fix. A file saved with a BOM (Windows
    Notepad) was titled '\\uFEFF# BOM付き' and its `# heading` kept the BOM in front, so it was no heading."""
    sjis = "シフトJISのメモ。".encode("shift_jis")
    (cap_env / "memo.txt").write_bytes(sjis)
    fix = ("not valid UTF-8 (byte 0: invalid start byte); convert it to UTF-8 first, e.g. `iconv -f SHIFT_JIS -t "
           "UTF-8` (nothing was written)\n")
    result = runner.invoke(app, ["capture", "--source", "mynotes", "--no-build"], input=sjis)
    assert (result.exit_code, result.output) == (2, "error: the text on stdin: " + fix)
    assert run("capture", "--source", "mynotes", "--no-build", "--file", str(cap_env / "memo.txt"), code=2) == (
        f"error: {cap_env / 'memo.txt'}: " + fix)
    result = runner.invoke(app, ["capture", "--source", "mynotes", "--no-build"], input=b"a\x00b")
    assert (result.exit_code, result.output) == (2, "error: the text on stdin: binary data (it holds NUL bytes), "
                                                    "not a note's text (nothing was written)\n")
    assert sorted(p.name for p in (cap_env / "mynotes").iterdir()) == ["Seed.md"]
    bom = "\ufeff# BOM付き\r\n\r\n本文。\r\n".encode()                # Notepad: a BOM and CRLF line ends
    (cap_env / "bom.md").write_bytes(bom)
    run("capture", "--source", "mynotes", "--no-build", "--file", str(cap_env / "bom.md"))
    result = runner.invoke(app, ["capture", "--source", "mynotes", "--no-build", "--name", "piped"], input=bom)
    assert result.exit_code == 0, result.output
    for name in ("BOM付き.md", "piped.md"):
        text = (cap_env / "mynotes" / name).read_text(encoding="utf-8")
        assert "\ufeff" not in text and "\ntitle: BOM付き\n" in text and text.endswith("---\n\n# BOM付き\n\n本文。\n")


def test_mcp_save_note_long_name_is_readable(cap_env: Path) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    svc = VaultService(Settings.from_env())
    name = "アイアイ" + "の長い名前" * 16
    out = svc.save_note("アイアイは中指が長い。", name=name, source="mynotes")
    assert out["path"] == "mynotes/アイアイ" + "の長い名前" * 11 + "の長い-19ed1f19.md"
    assert out["file"] == str(cap_env / "mynotes" / f"{name}.md") and out["searchable"] is True
    assert svc.read(out["path"])["path"] == out["path"]
    with pytest.raises(ToolFailure, match=r"^nothing to capture: the text has no words, only '---'"):
        svc.save_note("---", source="mynotes")
    assert not (cap_env / "mynotes" / "capture.md").exists()


def test_a_name_no_link_reaches_is_kept_and_said_at_once(cap_env: Path) -> None:
    """`capture --name '料理 #1'` (or save_note's `name`) keeps the name, but Obsidian reads [[料理 #1]] as heading
    1 of note 料理: the capture said nothing, and every later build told the user to rename the file. The
    capture now gives the build's line at once: `warning:` on stderr, `warning` in --json and in save_note's
    result; a name without # ^ [ ] has none."""
    from pipeline.mcp_server import VaultService

    line = ("source 'mynotes': 料理 #1.md is written as '料理 -1.md': a name Obsidian can link cannot hold '#' "
            "(Obsidian reads [[料理 #1]] as heading '1' of note '料理'), so no [[…]] link reaches this note by its "
            "name; rename the file without '#' to link to it")
    result = CliRunner().invoke(app, ["capture", "--source", "mynotes", "--no-build", "--name", "料理 #1",
                                      "肉じゃが。"])
    assert result.exit_code == 0 and result.stderr == f"warning: {line}\n"
    assert result.stdout.startswith(f"captured {cap_env / 'mynotes' / '料理 #1.md'} (mynotes/料理 -1.md, ")
    got = json.loads(CliRunner().invoke(app, ["capture", "--source", "mynotes", "--no-build", "--json", "--name",
                                              "Plain", "x"]).stdout)
    assert "warning" not in got
    out = VaultService(Settings.from_env()).save_note("caret", name="日記/F^x", source="mynotes")
    assert out["warning"] == ("source 'mynotes': 日記/F^x.md is written as '日記/F-x.md': a name Obsidian can link "
                              "cannot hold '^' (Obsidian reads '^' in a link as a block id), so no [[…]] link reaches "
                              "this note by its name; rename the file without '^' to link to it")
    assert out["path"] == "mynotes/日記/F-x.md" and out["searchable"] is True


def test_tags_surrounding_spaces_are_dropped(tmp_path: Path) -> None:
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "Body about voles.\n", title="Voles", agent="a", correlation_id="c1",
                        tags=[" journal ", " #til"], now=NOW)
    assert "tags:\n- journal\n- til\n" in got.path.read_text(encoding="utf-8")


def test_a_name_s_folder_is_the_existing_one_that_differs_only_in_case_or_unicode_form(tmp_path: Path) -> None:
    """`--name "english notes/新規"` beside `English notes/` made a second folder (helper s36-nu2): one folder on
    macOS and Windows, two on Linux, which a synced vault cannot hold. The existing folder is used as spelled,
    also one named in NFD (a vault synced from macOS); a missing folder is still made as given."""
    src = _local(tmp_path / "inbox")
    (tmp_path / "inbox" / "English notes").mkdir()
    nfd = unicodedata.normalize("NFD", "データ")
    (tmp_path / "inbox" / nfd).mkdir()
    got = {n: write_capture(src, "テキスト", name=n, agent="a", correlation_id="c", now=NOW)
           for n in ("english notes/新規", "データ/メモ", "daily/2026/x")}
    assert {n: (g.path.relative_to(tmp_path / "inbox").as_posix(), g.vault_path) for n, g in got.items()} == {
        "english notes/新規": ("English notes/新規.md", "inbox/English notes/新規.md"),
        "データ/メモ": (f"{nfd}/メモ.md", "inbox/データ/メモ.md"),
        "daily/2026/x": ("daily/2026/x.md", "inbox/daily/2026/x.md")}
    assert sorted(p.name for p in (tmp_path / "inbox").iterdir()) == sorted(["English notes", nfd, "daily"])
    with pytest.raises(CaptureError, match="already exists"):
        write_capture(src, "もう一つ", name="ENGLISH NOTES/新規", agent="a", correlation_id="c", now=NOW)


def test_a_full_width_hash_before_a_tag_is_dropped_as_hash_is(tmp_path: Path) -> None:
    """`--tag ＃学び` (a Japanese IME types # as ＃) was written as the tag `＃学び`, which Obsidian reads as a tag
    of its own, not 学び (found by helper s36-nu2); the text's own `学び` and ours are then one tag."""
    src = _local(tmp_path / "inbox")
    got = write_capture(src, "---\ntags: [学び]\n---\nタグのテスト。\n", agent="a", correlation_id="c1",
                        tags=["＃学び", "＃＃til", "＃"], now=NOW)
    assert "tags:\n- 学び\n- til\n" in got.path.read_text(encoding="utf-8")


def test_a_named_note_without_a_title_of_its_own_is_titled_by_its_file_name(tmp_path: Path) -> None:
    """`save_note(text="今日は晴れ。…", name="日記/2026-12-06")` was titled `今日は晴れ。` (its first sentence) beside
    the user's daily notes titled by their date, as Obsidian titles a note by its file name; a title, the text's
    frontmatter title or its first heading still win, and without a name the first sentence stays the title."""
    src = _local(tmp_path, "inbox")
    got = write_capture(src, "今日は晴れ。[[週次レビュー]]を見直した。", name="日記/2026-12-06", agent="a",
                        correlation_id="c1", now=NOW)
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: '2026-12-06'\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\n---\n\n"
        "今日は晴れ。[[週次レビュー]]を見直した。\n")
    assert "\ntitle: 見出し\n" in write_capture(src, "# 見出し\n\n本文。", name="n1").path.read_text(encoding="utf-8")
    assert "\ntitle: Given\n" in write_capture(src, "本文。", name="n2", title="Given").path.read_text(encoding="utf-8")
    assert "\ntitle: Theirs\n" in write_capture(src, "---\ntitle: Theirs\n---\n本文。", name="n3").path.read_text(
        encoding="utf-8")
    assert "\ntitle: 本文。\n" in write_capture(src, "本文。続き").path.read_text(encoding="utf-8")


def test_related_is_a_list_of_wikilinks_as_obsidian_writes_a_link_property(tmp_path: Path) -> None:
    """`related:` held vault paths (`- tiny/Ducks.md`), which Obsidian shows as text: an Obsidian user writes a
    link property as `"[[Note]]"`. Another source's note is linked from the vault root, a note of the capture
    source from the source's own root (it resolves in the user's vault too); a path no wikilink can hold stays."""
    src = _local(tmp_path / "inbox")
    related = ["duckdb/data/parquet/overview.md", "inbox/日記/2026-01-01.md", "inbox/Board.canvas.md",
               "tiny/a|b.md"]
    got = write_capture(src, "Otters hold hands.", title="Otters", agent="a", correlation_id="c1",
                        related=related, now=NOW)
    assert got.related == tuple(related)                          # what capture --json and save_note return
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: Otters\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\n"
        "related:\n- '[[duckdb/data/parquet/overview]]'\n- '[[日記/2026-01-01]]'\n- '[[Board.canvas]]'\n"
        "- tiny/a|b.md\n---\n\n# Otters\n\nOtters hold hands.\n")


def test_related_of_an_older_capture_or_a_link_is_not_repeated(tmp_path: Path) -> None:
    """A text that carries `related` as an older capture wrote it (plain vault paths) or as a user writes it (a
    link with an alias) keeps its entries as written; capture adds only the notes they do not name."""
    src = _local(tmp_path / "inbox")
    text = ("---\nrelated: [tiny/Ducks.md, '[[notes/Otter|otters]]', '[[Kb/Seal#Diet]]', inbox/旅行.md, '[[Fish]]']\n"
            "---\nSeals and otters.\n")
    got = write_capture(src, text, title="Seals", agent="a", correlation_id="c1", now=NOW,
                        related=["tiny/Ducks.md", "notes/otter.md", "kb/Seal.md", "inbox/旅行.md", "inbox/Fish.md",
                                 "tiny/Home.md"])
    assert got.path.read_text(encoding="utf-8") == (
        "---\ntitle: Seals\ncreated: '2026-01-02T03:04:05Z'\nagent: a\nstatus: raw\ncorrelation_id: c1\n"
        "related:\n- tiny/Ducks.md\n- '[[notes/Otter|otters]]'\n- '[[Kb/Seal#Diet]]'\n- inbox/旅行.md\n- '[[Fish]]'\n"
        "- '[[tiny/Home]]'\n---\n\n"
        "# Seals\n\nSeals and otters.\n")


def test_each_related_link_of_a_capture_reads_its_note(built_tiny_env: Path) -> None:
    """The links capture writes are ones `read` (CLI and MCP) opens: the same note as the vault path returned."""
    from pipeline.ingest.capture import split_text
    from pipeline.search.reader import read_link

    s = Settings.from_env()
    result = CliRunner().invoke(app, ["capture", "--source", "tiny", "--no-build", "--json", "--title",
                                      "Pond birds", "Ducks swim in the pond; a duck is a water bird."])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    fm, _ = split_text((built_tiny_env / "tinyvault" / "Pond birds.md").read_text(encoding="utf-8"))
    assert out["related"] and len(fm["related"]) == len(out["related"])
    assert "[[Ducks]]" in fm["related"] and "tiny/Ducks.md" in out["related"]
    for link, path in zip(fm["related"], out["related"], strict=True):
        assert link == f"[[{path.removeprefix('tiny/')[:-3]}]]"
        assert read_link(s.vault_dir, link, 1, s.warehouse_path).path == path


def test_a_note_the_disk_could_not_take_leaves_no_part_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """A full disk while the note is written: before session 40 the part written (60 KB of a 200 KB text) stayed as
    the note, and the retry was refused ("a note named … already exists"). Now nothing stays, and the retry
    writes it."""
    import errno

    from pipeline.ingest import capture

    src = _local(tmp_path / "inbox")
    real_open = open

    class _Full:
        def __init__(self, fh: object) -> None:
            self.fh = fh

        def __enter__(self) -> _Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()      # type: ignore[attr-defined]

        def write(self, text: str) -> int:
            self.fh.write(text[: len(text) // 2])      # type: ignore[attr-defined]
            self.fh.flush()                            # type: ignore[attr-defined]
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(capture, "open", lambda *a, **k: _Full(real_open(*a, **k)), raising=False)
    with pytest.raises(CaptureError) as err:
        write_capture(src, "words " * 1000, name="big", now=NOW)
    target = tmp_path / "inbox" / "big.md"
    assert str(err.value) == f"cannot write {target}: No space left on device (nothing was written)"
    assert list((tmp_path / "inbox").iterdir()) == []
    monkeypatch.undo()
    assert write_capture(src, "words " * 1000, name="big", now=NOW).path == target


def test_a_name_too_long_in_bytes_is_refused_before_the_file_system_does(tmp_path: Path) -> None:
    """90 kanji are within the 120-character cap but 273 bytes with .md: the note failed with the OS's "File name
    too long" (session 41). One line says the limit in bytes and what to do; nothing is written."""
    src = _local(tmp_path / "inbox")
    with pytest.raises(CaptureError) as err:
        write_capture(src, "長い名前", name="長" * 90)
    assert str(err.value) == (
        "note name too long: the file name '" + "長" * 37 + "...' is 273 bytes in UTF-8 with .md (90 characters), "
        "more than the 255 a file system takes (about 84 Japanese characters); pass a shorter --name (nothing was "
        "written)")
    with pytest.raises(CaptureError, match=r"^note name too long: the folder name '日+\.\.\.' is 258 bytes in UTF-8 "
                                           r"\(86 characters\), .* pass a shorter `name` \(nothing was written\)$"):
        write_capture(src, "x", name="日" * 86 + "/memo", name_option="`name`")
    assert _files(tmp_path / "inbox") == []
    assert write_capture(src, "ok", name="長" * 84, agent="a", correlation_id="c1", now=NOW).path.name == \
        "長" * 84 + ".md"                                                   # 255 bytes with .md: taken


def test_capture_related_searches_the_title_the_text_gives_when_none_is_passed(built_tiny_env: Path) -> None:
    """Review of session 47: the CLI and the MCP server each worked out the related search's title (one with
    `one_line`, one without); `capture_related` now does, from the title passed or, without one, the text's."""
    from pipeline.service import capture_related

    s = Settings.from_env()
    text = "# Ducks in the pond\n\nA water bird.\n"
    assert capture_related(s, None, text) == ["tiny/Ducks.md", "tiny/Home.md", "tiny/Install guide.md"]
    assert capture_related(s, "Ducks in the pond", text) == ["tiny/Ducks.md", "tiny/Home.md", "tiny/Install guide.md"]
