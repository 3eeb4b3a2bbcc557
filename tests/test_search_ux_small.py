"""Small search UX fixes: ``path:`` compared in Unicode NFC, a corrupt usage log moved aside (not reset), tags with
a space refused (CLI search and capture, MCP search and save_note, ``tag:"a b"`` in the query)."""

from __future__ import annotations

import json
import logging
import os
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.index.embed import HashEmbedder
from pipeline.models import Chunk, Note
from pipeline.search import usage
from pipeline.search.query import QuerySyntaxError, parse_query, tag_problem
from pipeline.search.searcher import Searcher
from tests.tiny_warehouse import publish_chunks

runner = CliRunner()
NFC = unicodedata.normalize("NFC", "ダウンロード")
NFD = unicodedata.normalize("NFD", "ダウンロード")
SPACE_MESSAGE = "has a space; Obsidian tags cannot contain spaces (use my-tag or my/tag)"

# ---------------------------------------------------------------------------------------------------------------
# path: in NFC


def test_the_two_forms_differ() -> None:
    assert (len(NFC), len(NFD), NFC == NFD) == (6, 8, False)


@pytest.mark.parametrize(("typed", "stored"), [(NFD, NFC), (NFC, NFD), (NFC, NFC), (NFD, NFD)])
def test_path_prefix_matches_in_either_form(typed: str, stored: str) -> None:
    q = parse_query(f"memo path:{typed}/")
    assert q.paths == (f"{NFC}/",)                                  # kept in NFC
    assert q.keeps_path(f"{stored}/a.md") is True                   # vault path
    assert q.keeps_path("s/a.md", f"{stored}/a.md") is True         # source path
    assert q.keeps_path("s/other/a.md", "other/a.md") is False


@pytest.mark.parametrize(("typed", "stored"), [(NFD, NFC), (NFC, NFD)])
def test_path_glob_matches_in_either_form(typed: str, stored: str) -> None:
    q = parse_query(f'memo path:"s/*{typed}*.md"')
    assert q.keeps_path(f"s/x/{stored}メモ.md") is True
    assert q.keeps_path("s/x/メモ.md") is False


def test_path_case_is_still_ignored() -> None:
    assert parse_query(f"memo path:Docs/{NFD}/").keeps_path(f"docs/{NFC}/a.md") is True
    assert parse_query("memo path:DOCS/*.md").keeps_path("docs/a.md") is True


@pytest.fixture(scope="module")
def jp_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two notes; the one in the Japanese folder has its source path in NFD (read from a macOS folder), its vault
    path in NFC (as the vault stage writes it)."""
    path = tmp_path_factory.mktemp("nfc") / "warehouse.duckdb"
    specs = {(f"{NFD}/Memo.md", f"{NFC}/Memo.md"): "Otters hold hands while they sleep.",
             ("other/Memo.md", "other/Memo.md"): "Otters eat sea urchins."}
    notes, chunks = [], []
    for (source_path, rel), text in specs.items():
        note = Note("g", source_path, rel, "Memo", {"title": "Memo"}, text)
        notes.append(note)
        chunks.append(Chunk(f"{note.note_id}-0", note.note_id, "g", 0, (), "Memo", text))
    publish_chunks(path, notes, chunks)
    return path


@pytest.mark.parametrize("query", [f"otters path:g/{NFD}/", f"otters path:g/{NFC}/", f"otters path:{NFD}/",
                                   f"otters path:{NFC}/", f'otters path:"g/{NFD}/*.md"'])
def test_search_finds_the_note_by_a_path_in_either_form(jp_warehouse: Path, query: str) -> None:
    parsed = parse_query(query)
    with Searcher(jp_warehouse, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        hits = s.search(parsed.text, k=5, filters=parsed)
    assert [h.vault_path for h in hits] == [f"g/{NFC}/Memo.md"]


# ---------------------------------------------------------------------------------------------------------------
# a corrupt usage log


def _log_records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records]


@pytest.mark.parametrize("content", [b"not json", b'{"version": 1, "notes": {"a.md": {"reads": 2', b"\xff\xfe{}",
                                     b"[1, 2]", b'{"version": 1, "notes": []}'])
def test_a_corrupt_log_is_moved_aside_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                      content: bytes) -> None:
    (tmp_path / "usage.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="pipeline.search.usage"):
        assert usage.load(tmp_path) == {}
        assert usage.load(tmp_path) == {}                           # gone now: the second load is silent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["usage.json.corrupt"]
    assert (tmp_path / "usage.json.corrupt").read_bytes() == content
    (record,) = caplog.records
    assert (record.name, record.levelno) == ("pipeline.search.usage", logging.WARNING)
    message = record.getMessage()
    assert message.startswith(f"usage log {tmp_path / 'usage.json'} cannot be parsed (")
    assert message.endswith(f"): moved it to {tmp_path / 'usage.json.corrupt'} and started an empty reading "
                            "history")
    assert "\n" not in message


def test_the_warning_names_the_parse_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "usage.json").write_text("not json")
    with caplog.at_level(logging.WARNING, logger="pipeline.search.usage"):
        usage.load(tmp_path)
    assert _log_records(caplog) == [("pipeline.search.usage", logging.WARNING,
                                     (f"usage log {tmp_path / 'usage.json'} cannot be parsed (Expecting value: line 1 "
                                      f"column 1 (char 0)): moved it to {tmp_path / 'usage.json.corrupt'} and "
                                      "started an empty reading history"))]


def test_a_read_after_a_corrupt_log_starts_a_new_one_and_keeps_the_old(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "usage.json.corrupt").write_text("an older corrupt log")
    (tmp_path / "usage.json").write_text('{"version": 1, "notes": {"s/a.md": {"reads": 3, "last": 1')
    with caplog.at_level(logging.WARNING, logger="pipeline.search.usage"):
        assert usage.record(tmp_path, "s/b.md", now=1_800_000_000.0) is True
    assert len(caplog.records) == 1
    assert json.loads((tmp_path / "usage.json").read_text()) == {
        "version": 1, "notes": {"s/b.md": {"reads": 1, "last": 1_800_000_000.0}}}
    # the older .corrupt file is replaced (one copy kept)
    assert (tmp_path / "usage.json.corrupt").read_text() == '{"version": 1, "notes": {"s/a.md": {"reads": 3, "last": 1'


def test_a_missing_log_is_silent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        assert usage.load(tmp_path) == {}
        assert usage.load(tmp_path / "no-such-dir") == {}
    assert caplog.records == []
    assert list(tmp_path.iterdir()) == []


def test_a_bad_entry_is_skipped_and_the_rest_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "usage.json").write_text(json.dumps({"version": 1, "notes": {
        "s/a.md": {"reads": 2, "last": 5}, "s/b.md": {"reads": "many"}, "s/c.md": 7, "s/d.md": {"reads": None}}}))
    with caplog.at_level(logging.WARNING):
        assert usage.load(tmp_path) == {"s/a.md": {"reads": 2.0, "last": 5.0}}
    assert caplog.records == []
    assert [p.name for p in tmp_path.iterdir()] == ["usage.json"]


def test_an_empty_object_is_an_empty_history(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "usage.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        assert usage.load(tmp_path) == {}
    assert (caplog.records, [p.name for p in tmp_path.iterdir()]) == ([], ["usage.json"])


def test_an_unreadable_log_is_never_written_over(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "usage.json").mkdir()                               # open() fails with an OSError, as without rights
    with caplog.at_level(logging.WARNING):
        assert usage.load(tmp_path) == {}
        assert usage.record(tmp_path, "s/b.md") is False
    assert (caplog.records, (tmp_path / "usage.json").is_dir()) == ([], True)


def test_a_corrupt_log_that_cannot_be_moved_stays(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    (tmp_path / "usage.json").write_text("not json")
    monkeypatch.setattr(usage.os, "replace", refuse)
    with caplog.at_level(logging.WARNING, logger="pipeline.search.usage"):
        assert usage.load(tmp_path) == {}
        assert usage.record(tmp_path, "s/b.md") is False            # never written over
    monkeypatch.undo()
    assert (tmp_path / "usage.json").read_text() == "not json"
    assert [r.getMessage() for r in caplog.records] == 2 * [(
        f"usage log {tmp_path / 'usage.json'} cannot be parsed (Expecting value: line 1 column 1 (char 0)) nor moved "
        "aside (Permission denied): the reading history is ignored until it is repaired or removed")]


def test_the_cli_says_it_once_on_stderr_and_searches_on(tmp_path: Path) -> None:
    """Through the console script (no pytest log capture): the warning is the one stderr line of a search that
    fails later for its own reason (no warehouse)."""
    import subprocess
    import sys

    data = tmp_path / "data"
    data.mkdir()
    (data / "usage.json").write_text("not json")
    env = {**os.environ, "DOCSVAULT_USAGE_BOOST": "1"}
    proc = subprocess.run([sys.executable, "-c", "from pipeline.cli import main; main()", "--data", str(data),
                           "search", "otters"], check=False, capture_output=True, text=True, env=env, timeout=120)
    lines = proc.stderr.splitlines()
    assert lines[0] == (f"warning: usage log {data / 'usage.json'} cannot be parsed (Expecting value: line 1 column 1 (char "
                        f"0)): moved it to {data / 'usage.json.corrupt'} and started an empty reading history")
    assert len(lines) == 2 and lines[1].startswith("error: ") and "Traceback" not in proc.stderr
    assert sorted(p.name for p in data.iterdir()) == ["usage.json.corrupt"]


# ---------------------------------------------------------------------------------------------------------------
# tags with a space


@pytest.mark.parametrize(("tag", "problem"), [
    ("my tag", f"tag 'my tag' {SPACE_MESSAGE}"),
    ("#my tag", f"tag '#my tag' {SPACE_MESSAGE}"),
    ("  my   tag ", f"tag 'my   tag' {SPACE_MESSAGE}"),
    ("my\ttag", f"tag 'my\\ttag' {SPACE_MESSAGE}"),
    ("日記\u3000メモ", "tag '日記\\u3000メモ' has a space; Obsidian tags cannot contain spaces (use 日記-メモ or 日記/メモ)"),
    ("a b c", "tag 'a b c' has a space; Obsidian tags cannot contain spaces (use a-b-c or a/b/c)"),
    ("journal", None), ("#life/family", None), (" journal ", None), ("", None), ("kebab-case", None),
    # a list in one value: the MCP `tag` 'journal, urgent' was told to use 'journal,-urgent or journal,/urgent'
    ("journal, #urgent", "tag 'journal, #urgent' has a space; Obsidian tags cannot contain spaces or commas (give "
                         "'journal', 'urgent' as 2 separate tags)"),
])
def test_tag_problem(tag: str, problem: str | None) -> None:
    assert tag_problem(tag) == problem


def test_a_quoted_tag_with_a_space_in_the_query_is_a_syntax_error() -> None:
    with pytest.raises(QuerySyntaxError) as err:
        parse_query('otters tag:"my tag"')
    assert str(err.value) == f'tag:"my tag" in the query {SPACE_MESSAGE}'
    assert parse_query('otters tag:"#my-tag"').tags == ("my-tag",)


@pytest.mark.parametrize("args", [["search", "otters", "--tag", "my tag"],
                                  ["search", "otters", "--tag", "journal", "--tag", "my tag"],
                                  ["capture", "some text", "--tag", "my tag", "--no-build"]])
def test_the_cli_refuses_a_tag_with_a_space(tmp_path: Path, args: list[str]) -> None:
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), *args])
    assert (result.exit_code, result.output) == (2, f"error: --tag 'my tag' {SPACE_MESSAGE}\n")
    assert not (tmp_path / "data").exists()


def test_the_cli_refuses_a_query_tag_with_a_space(tmp_path: Path) -> None:
    result = runner.invoke(app, ["--data", str(tmp_path / "data"), "search", 'otters tag:"my tag"'])
    assert (result.exit_code, result.output) == (2, f'error: tag:"my tag" in the query {SPACE_MESSAGE}\n')


def test_mcp_search_refuses_a_tag_with_a_space(tiny_env: Path) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    svc = VaultService(Settings.from_env())
    for tag, shown in (("my tag", "'my tag'"), ("#my tag", "'#my tag'")):
        with pytest.raises(ToolFailure) as err:
            svc.search("ducks", tag=tag)
        assert str(err.value) == f"tag {shown} {SPACE_MESSAGE}"
    with pytest.raises(ToolFailure) as err:
        svc.search('ducks tag:"my tag"')
    assert str(err.value) == f'tag:"my tag" in the query {SPACE_MESSAGE}'


def test_mcp_save_note_refuses_a_tag_with_a_space_and_writes_nothing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (tmp_path / "sources.yaml").write_text(f"sources:\n  - name: inbox\n    kind: local\n    path: {inbox}\n",
                                           encoding="utf-8")
    svc = VaultService(Settings.from_env(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                         vault_dir=tmp_path / "vault"))
    with pytest.raises(ToolFailure) as err:
        svc.save_note("Otters sleep holding hands.", source="inbox", tags=["otters", "my tag"])
    assert str(err.value) == f"tag 'my tag' {SPACE_MESSAGE}"
    assert list(inbox.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------
# what a hit shows: a heading without its HTML, no terminal escapes in any field


def test_a_hit_shows_its_heading_without_html_and_no_control_characters(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    note = Note("g", "Setup.md", "Setup.md", "Setup \x1b[2J", {"title": "Setup \x1b[2J"},
                '## Install <Badge text="beta"/> &amp; a < b\n\nRun \x1b[31mpip install otter\x1b[0m\x07 now.')
    heading = 'Install <Badge text="beta"/> &amp; a < b'
    chunk = Chunk(f"{note.note_id}-0", note.note_id, "g", 0, (heading,), f"Setup > {heading}",
                  "Run \x1b[31mpip install otter\x1b[0m\x07 now.\x1b]0;owned\x07")
    publish_chunks(path, [note], [chunk])
    with Searcher(path, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        (hit,) = s.search("pip install otter", k=5)
    assert (hit.title, hit.heading, hit.snippet) == ("Setup ", "Install & a < b", "Run pip install otter now.")



def test_cli_json_and_mcp_hits_show_the_same_clean_heading_and_text(tiny_env: Path) -> None:
    """Through the two outputs that print a hit's fields as they are (``search --json``, MCP ``search``): headings
    without their HTML (``<a id>`` anchors, components; ``a < b`` stays), no escape sequences in any field."""
    from pipeline.mcp_server import VaultService

    settings = Settings.from_env()
    body = ('# Odd\n\n## <a id="x"></a>Setup <Badge text="beta"/> when a < b\n\n'
            "Run pip install \x1b[31motterkit\x1b[0m\x07 now.\x1b]0;owned\x07\n")
    note = Note("tiny", "Odd.md", "Odd.md", "Odd", {"title": "Odd"}, body)
    heading = '<a id="x"></a>Setup <Badge text="beta"/> when a < b'
    chunk = Chunk(f"{note.note_id}-0", note.note_id, "tiny", 0, ("Odd", heading), f"Odd > {heading}",
                  "Run pip install \x1b[31motterkit\x1b[0m\x07 now.\x1b]0;owned\x07")
    settings.warehouse_path.parent.mkdir(parents=True)
    publish_chunks(settings.warehouse_path, [note], [chunk], dims=(384,))
    (settings.vault_dir / "tiny").mkdir(parents=True)
    (settings.vault_dir / "tiny" / "Odd.md").write_text(f"---\ntitle: Odd\n---\n{body}", encoding="utf-8")

    result = runner.invoke(app, ["search", "otterkit", "--json"])
    assert result.exit_code == 0, result.output
    (hit,) = json.loads(result.stdout)         # JSON on stdout; notes (words no note has) go to stderr
    assert (hit["heading"], hit["snippet"], hit["title"]) == ("Setup when a < b", "Run pip install otterkit now.",
                                                              "Odd")
    (mcp_hit,) = VaultService(settings).search("otterkit")["hits"]
    assert (mcp_hit["heading"], mcp_hit["text"], mcp_hit["title"]) == ("Setup when a < b",
                                                                       "Run pip install otterkit now.", "Odd")

def test_a_shown_heading_still_places_the_hit_in_its_note() -> None:
    from pipeline.search.reader import locate

    body = '# Setup\n\nIntro.\n\n## Install <Badge text="beta"/>\n\nRun pip.\n'
    assert locate(body, "Install") == body.index("## Install")


@pytest.mark.parametrize(("heading", "plain"), [
    ("[Install](https://x)", "Install"),
    ('<a href="x">Install</a>', "Install"),
    ('[Install](https://x "t") it', "Install it"),
    ("[[Setup guide|Install]]", "Install"),
    ("[[Setup guide#Step]] notes", "Setup guide notes"),
    ("Install [pip][1]", "Install pip"),
    ("![logo](logo.png) Install", "Install"),
    ("[![badge](b.svg)](https://ci) Install", "Install"),
    ("a[0] and __init__.py", "a[0] and __init__.py"),             # no link: kept as written
])
def test_a_heading_that_is_a_link_is_shown_as_its_text(heading: str, plain: str) -> None:
    from pipeline.search.reader import locate
    from pipeline.search.snippet import plain_heading

    assert plain_heading(heading) == plain
    body = f"# T\n\nIntro.\n\n## {heading}\n\nRun pip.\n"
    assert locate(body, plain) == body.index("## ")                 # the shown heading still places the hit


def test_a_hit_under_a_link_heading_shows_its_text(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    heading = "[Install](https://x)"
    note = Note("g", "Setup.md", "Setup.md", "Setup", {"title": "Setup"}, f"## {heading}\n\nRun pip.")
    chunk = Chunk(f"{note.note_id}-0", note.note_id, "g", 0, (heading,), f"Setup > {heading}",
                  "Run pip install otter now.")
    publish_chunks(path, [note], [chunk])
    with Searcher(path, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        (hit,) = s.search("pip install otter", k=5)
    assert hit.heading == "Install"


@pytest.mark.parametrize(("text", "plain"), [
    ("x \x1b[1;31mred\x1b[0m y", "x red y"),          # CSI (colours, cursor moves, clear screen)
    ("a\x1b]0;title\x07b", "ab"),                       # OSC (window title), BEL-terminated
    ("a\x1b]8;;http://x\x1b\\b", "ab"),                 # OSC ST-terminated (hyperlink)
    ("a\x00b\x08c\x7fd\x9be", "abcde"),                 # NUL, backspace, DEL, C1 CSI
    ("tab\tand\nnewline", "tab\tand\nnewline"),         # kept
    ("a\x1b]0;unclosed\nnext line", "a\nnext line"),    # an unclosed OSC ends with its line
])
def test_strip_controls(text: str, plain: str) -> None:
    from pipeline.search.snippet import strip_controls

    assert strip_controls(text) == plain


# ---------------------------------------------------------------------------------------------------------------
# read by a title or an alias, as search names pages


def test_cli_and_mcp_read_a_note_by_its_alias(tiny_env: Path) -> None:
    """`docsvault read Foo` and the MCP read tool open the note with ``aliases: [Foo]`` (search finds it by
    that name); an alias two notes share is an error naming both."""
    from pipeline.mcp_server import ToolFailure, VaultService

    settings = Settings.from_env()
    specs = {"Foo Page.md": ({"aliases": ["Foo"]}, "Otters are great swimmers."),
             "Bar.md": ({"aliases": ["Shared"]}, "Beavers."), "Baz.md": ({"aliases": ["Shared"]}, "Badgers.")}
    notes, chunks = [], []
    (settings.vault_dir / "tiny").mkdir(parents=True)
    for rel, (fm, text) in specs.items():
        note = Note("tiny", rel, rel, rel[:-3], fm, text)
        notes.append(note)
        chunks.append(Chunk(f"{note.note_id}-0", note.note_id, "tiny", 0, (), rel[:-3], text))
        (settings.vault_dir / "tiny" / rel).write_text(f"{text}\n", encoding="utf-8")
    settings.warehouse_path.parent.mkdir(parents=True)
    publish_chunks(settings.warehouse_path, notes, chunks, dims=(384,))

    result = runner.invoke(app, ["read", "Foo"])
    assert result.exit_code == 0, result.output
    assert result.output == "tiny/Foo Page.md — Foo Page (page 1/1)\n\nOtters are great swimmers.\n"
    assert VaultService(settings).read("foo")["path"] == "tiny/Foo Page.md"
    several = ("'Shared' is the title or alias of several notes; give one of the vault paths: tiny/Bar.md, "
               "tiny/Baz.md")
    result = runner.invoke(app, ["read", "Shared"])
    assert (result.exit_code, result.output) == (2, f"error: {several}\n")
    with pytest.raises(ToolFailure) as err:
        VaultService(settings).read("Shared")
    assert str(err.value) == several


# ---------------------------------------------------------------------------------------------------------------
# read: the body, the title and the link titles as shown, without terminal escapes


def test_read_shows_body_title_and_link_titles_without_escapes(tiny_env: Path) -> None:
    """`docsvault read` (plain and --json) and the MCP read tool print a note's text, its title and its
    neighbours' titles without terminal escape sequences or control characters; the vault file keeps them."""
    from pipeline.mcp_server import VaultService
    from pipeline.models import Edge

    settings = Settings.from_env()
    esc_body = "# Esc\n\nBody with \x1b[2J clear and \x1b]0;owned\x07 title.\x1b]8;;http://x\nNext line.\n"
    title = "Esc \x1b[31mRed\x1b[0m\x07"
    esc = Note("tiny", "Esc.md", "Esc.md", title, {"title": title}, esc_body)
    points = Note("tiny", "Points.md", "Points.md", "Points", {"title": "Points"}, "Links to [[Esc]].\n")
    files = {"Esc.md": '---\ntitle: "Esc \\e[31mRed\\e[0m\\a"\n---\n' + esc_body,
             "Points.md": "Links to [[Esc]].\n"}
    (settings.vault_dir / "tiny").mkdir(parents=True)
    for rel, text in files.items():
        (settings.vault_dir / "tiny" / rel).write_text(text, encoding="utf-8")
    chunks = [Chunk(f"{n.note_id}-0", n.note_id, "tiny", 0, (), n.title, n.body) for n in (esc, points)]
    settings.warehouse_path.parent.mkdir(parents=True)
    publish_chunks(settings.warehouse_path, [esc, points], chunks, dims=(384,),
                   edges=[Edge(points.note_id, esc.note_id, "Esc", "wikilink")])
    shown = "# Esc\n\nBody with  clear and  title.\nNext line.\n"

    result = runner.invoke(app, ["read", "tiny/Esc.md"])
    assert result.exit_code == 0, result.output
    assert result.output == (f"tiny/Esc.md — Esc Red (page 1/1)\n\n{shown.rstrip()}\n\n"
                             "-- linked from: Points (tiny/Points.md)\n")
    result = runner.invoke(app, ["read", "tiny/Points.md"])
    assert result.output.endswith("\n-- links to: Esc Red (tiny/Esc.md)\n"), result.output
    page = json.loads(runner.invoke(app, ["read", "tiny/Esc.md", "--json"]).output)
    assert (page["title"], page["text"], page["total_chars"]) == ("Esc Red", shown, len(shown))
    assert json.loads(runner.invoke(app, ["read", "tiny/Points.md", "--json"]).output)["outlinks"] == [
        {"path": "tiny/Esc.md", "title": "Esc Red", "links": 1}]
    mcp = VaultService(settings)
    assert mcp.read("tiny/Esc.md")["text"] == shown
    assert mcp.read("tiny/Points.md")["outlinks"][0]["title"] == "Esc Red"
    assert [r["title"] for r in mcp.related("tiny/Points.md")["related"]] == ["Esc Red"]
    assert (settings.vault_dir / "tiny" / "Esc.md").read_text(encoding="utf-8") == files["Esc.md"]


# ---------------------------------------------------------------------------------------------------------------
# a short note's first heading


@pytest.mark.parametrize(("query", "heading"), [("zebrakit", "Setup"), ("koala command", "Use"),
                                                ("ibis", "Setup"), ("emu", "")])
def test_a_hit_in_a_short_notes_first_section_shows_its_heading(tmp_path: Path, query: str,
                                                                heading: str) -> None:
    """Short notes chunked as the build chunks them: a hit in the first section shows that section's heading
    (it was "": the title's H1 merged with it, or its small siblings merged into one chunk headed by their
    parent); text before the first heading has none."""
    bodies = {"Two.md": "# Two\n\n## Setup\n\nInstall zebrakit.\n\n## Use\n\nRun the koala command.\n",
              "One.md": "# One\n\n## Setup\n\nInstall the ibis tool.\n",
              "Pre.md": "Feed the emu first.\n\n## Later\n\nThen rest.\n"}
    assert _bm25_heading(tmp_path, {rel: (rel[:-3], body) for rel, body in bodies.items()}, query) == heading


@pytest.mark.parametrize(("query", "heading"), [("hands", ""), ("crabs", "Food"), ("flightless", "Kiwi"),
                                                ("madagascar", ""), ("tails", "Intro")])
def test_text_under_the_title_h1_has_no_heading(tmp_path: Path, query: str, heading: str) -> None:
    """What README "JSON output" says of ``heading``: "" under the H1 that is the note's title (no section),
    an H1 that differs from the title named like any heading; a title H1 below text in its chunk is named."""
    bodies = {"Otter.md": ("Otter", "# Otter\n\nOtters hold hands.\n\n## Food\n\nThey eat crabs.\n"),
              "Kiwi.md": ("Birds of NZ", "# Kiwi\n\nKiwis are flightless.\n\n## Eggs\n\nLarge eggs.\n"),
              "Intro.md": ("Intro", "Lemurs live in Madagascar.\n\n# Intro\n\nLemur tails are long.\n")}
    assert _bm25_heading(tmp_path, bodies, query) == heading


def test_heading_at_names_the_heading_line_above_an_offset_outside_code() -> None:
    from pipeline.search.snippet import heading_at

    text = "Intro.\n\n## Setup\n\nInstall.\n\n```sh\n# a comment\n```\n\n## Use ##\n\nRun it."
    assert [heading_at(text, text.index(w)) for w in ("Intro", "Install", "comment", "Run")] == [
        None, "Setup", "Setup", "Use"]


def _bm25_heading(tmp_path: Path, bodies: dict[str, tuple[str, str]], query: str) -> str:
    """The heading of the BM25 top hit for ``query`` over notes ``{rel: (title, body)}`` chunked as the build does."""
    from pipeline.index.chunk import chunk_note

    notes = [Note("g", rel, rel, title, {"title": title}, body) for rel, (title, body) in bodies.items()]
    chunks = [c for n in notes for c in chunk_note(n, count_tokens=lambda t: len(t.split()))]
    path = tmp_path / "warehouse.duckdb"
    publish_chunks(path, notes, chunks)
    with Searcher(path, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        return s.search(query, k=1, lanes=["bm25"])[0].heading
