"""Capture only into a source whose next build reads the note: an HTML-only local source, a git source or an
``include``/``exclude`` that leaves the note out are refused (CLI and MCP, one line naming the source, its format
and the sources that can take a capture), nothing is written, and only valid targets are ever offered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.ingest.capture import (
    CaptureError,
    capture_problem,
    capture_source,
    capture_targets,
    write_capture,
)
from pipeline.ingest.sources import load_sources

runner = CliRunner()

HTML_REFUSED = ("capture source 'edgehtml' is kind local, format html: it reads only *.html/*.htm files, so a "
                "captured Markdown note would never be searchable; sources that can take a capture: inbox, docs")


@pytest.fixture
def mixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sources.yaml with a Markdown inbox, an HTML site on disk, a git source, a local source reading only
    ``guides/`` and one that excludes drafts; every folder exists."""
    for folder in ("inbox", "site", "wiki", "docs"):
        (tmp_path / folder).mkdir()
    (tmp_path / "site" / "index.html").write_text("<html><body><h1>Edge</h1></body></html>\n", encoding="utf-8")
    (tmp_path / "sources.yaml").write_text(
        "sources:\n"
        f"  - name: inbox\n    kind: local\n    path: {tmp_path / 'inbox'}\n"
        f"  - name: edgehtml\n    kind: local\n    format: html\n    path: {tmp_path / 'site'}\n"
        "  - name: gitdocs\n    kind: git\n    url: https://example.com/docs.git\n    format: markdown\n"
        f"  - name: wiki\n    kind: local\n    path: {tmp_path / 'wiki'}\n    include: ['guides/**/*.md']\n"
        f"  - name: docs\n    kind: local\n    format: markdown\n    path: {tmp_path / 'docs'}\n"
        "    exclude: ['Draft*']\n",
        encoding="utf-8")
    monkeypatch.setenv("DOCSVAULT_SOURCES", str(tmp_path / "sources.yaml"))
    monkeypatch.setenv("DOCSVAULT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(tmp_path / "vault"))
    monkeypatch.delenv("DOCSVAULT_CAPTURE_SOURCE", raising=False)
    return tmp_path


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != "sources.yaml")


def test_only_sources_that_read_the_note_are_targets(mixed: Path) -> None:
    sources = load_sources(mixed / "sources.yaml")
    assert capture_targets(sources) == ["inbox", "docs"]
    by_name = {s.name: s for s in sources}
    assert capture_problem(by_name["inbox"]) is None and capture_problem(by_name["docs"], "Notes") is None
    assert capture_problem(by_name["gitdocs"]) == (
        "capture source 'gitdocs' is kind git, format markdown: its files come from https://example.com/docs.git, "
        "notes are captured into a local Markdown source only")
    assert capture_problem(by_name["wiki"]) == (
        "capture source 'wiki' (kind local, format auto) does not read 'Note.md' (include=['guides/**/*.md'], "
        "exclude=[]), so the note would never be searchable")
    assert capture_problem(by_name["docs"], "Draft ideas") == (
        "capture source 'docs' (kind local, format markdown) does not read 'Draft ideas.md' "
        "(include=['*.md', '*.mdx', '*.markdown', '*.canvas'], exclude=['Draft*']), so the note would never be "
        "searchable")


def test_a_capture_into_the_templates_folder_names_that_folder(tmp_path: Path) -> None:
    """``capture --name Templates/Idea`` into an Obsidian vault whose templates folder is Templates was refused
    with the source's include (``does not read 'Templates/Idea.md' (include=['*.md', …])``), which reads it: the
    templates folder, which builds leave out (session 47), is what keeps it out, and the line says so now."""
    from pipeline.models import Source

    (tmp_path / ".obsidian").mkdir()
    (tmp_path / ".obsidian" / "templates.json").write_text('{"folder": "Templates"}', encoding="utf-8")
    source = Source(name="me", kind="local", path=(tmp_path,), format="obsidian")
    assert capture_problem(source, "Templates/Idea") == (
        "capture source 'me' (kind local, format obsidian) leaves out 'Templates/', the Obsidian vault's templates "
        "folder (.obsidian/templates.json or Templater's templates_folder), where 'Templates/Idea.md' would be, so "
        "the note would never be searchable")
    assert capture_problem(source, "Templatesx/Idea") is None


def test_capture_source_refuses_with_the_valid_targets(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = load_sources(mixed / "sources.yaml")
    with pytest.raises(CaptureError) as err:
        capture_source(sources, "edgehtml")
    assert str(err.value) == HTML_REFUSED
    monkeypatch.setenv("DOCSVAULT_CAPTURE_SOURCE", "wiki")          # the environment's choice is checked the same
    with pytest.raises(CaptureError, match=r"^capture source 'wiki' \(kind local, format auto\) does not read "):
        capture_source(sources)
    monkeypatch.delenv("DOCSVAULT_CAPTURE_SOURCE")
    with pytest.raises(CaptureError) as err:
        capture_source(sources)
    assert str(err.value) == ("no capture source: set DOCSVAULT_CAPTURE_SOURCE to a local source of sources.yaml "
                              "(inbox, docs) or pass --source NAME")
    with pytest.raises(CaptureError) as err:
        capture_source(sources, "nope")
    assert str(err.value) == "unknown capture source 'nope'; sources that can take a capture: inbox, docs"


def test_write_capture_refuses_a_name_the_source_excludes(mixed: Path) -> None:
    docs = next(s for s in load_sources(mixed / "sources.yaml") if s.name == "docs")
    with pytest.raises(CaptureError) as err:
        write_capture(docs, "# Draft ideas\n\ntext\n")
    assert str(err.value) == (
        "capture source 'docs' (kind local, format markdown) does not read 'Draft ideas.md' "
        "(include=['*.md', '*.mdx', '*.markdown', '*.canvas'], exclude=['Draft*']), so the note would never be "
        "searchable: pass another --name or source (nothing was written)")
    assert write_capture(docs, "# Ideas\n\ntext\n").vault_path == "docs/Ideas.md"
    assert _files(mixed / "docs") == ["Ideas.md"]


def test_cli_capture_into_an_html_source_writes_nothing(mixed: Path) -> None:
    result = runner.invoke(app, ["capture", "text", "--title", "Zander", "--source", "edgehtml"])
    assert (result.exit_code, result.output) == (2, f"error: {HTML_REFUSED}\n")
    result = runner.invoke(app, ["capture", "text", "--title", "Zander", "--source", "gitdocs", "--no-build"])
    assert result.exit_code == 2 and result.output.startswith("error: capture source 'gitdocs' is kind git, format ")
    assert _files(mixed) == ["site/index.html"]


def test_mcp_save_note_into_an_html_source_writes_nothing(mixed: Path) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    svc = VaultService(Settings.from_env())
    with pytest.raises(ToolFailure) as err:
        svc.save_note("text", title="Zander", source="edgehtml")
    assert str(err.value) == HTML_REFUSED
    with pytest.raises(ToolFailure) as err:
        svc.save_note("text", title="Zander")
    assert str(err.value) == ("no capture source: set DOCSVAULT_CAPTURE_SOURCE to a local source of sources.yaml "
                              "(inbox, docs) or pass the `source` argument")
    assert _files(mixed) == ["site/index.html"]


def _no_time(text: str) -> str:
    return re.sub(r"^created: '\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ'$", "created: T", text, count=1,
                  flags=re.MULTILINE)


def test_cli_capture_from_stdin_gets_the_title_heading_and_its_final_newline(mixed: Path) -> None:
    result = runner.invoke(app, ["capture", "--title", "Heron facts", "--source", "inbox", "--correlation-id", "c1",
                                 "--no-build"], input="A heron stands still.\n")
    assert result.exit_code == 0, result.output
    assert _no_time((mixed / "inbox" / "Heron facts.md").read_text(encoding="utf-8")) == (
        "---\ntitle: Heron facts\ncreated: T\nagent: docsvault capture\nstatus: raw\ncorrelation_id: c1\n---\n\n"
        "# Heron facts\n\nA heron stands still.\n")
    result = runner.invoke(app, ["capture", "--source", "inbox", "--correlation-id", "c2", "--no-build"],
                           input="# Egrets\n\nWhite.\n")
    assert result.exit_code == 0, result.output
    assert _no_time((mixed / "inbox" / "Egrets.md").read_text(encoding="utf-8")) == (
        "---\ntitle: Egrets\ncreated: T\nagent: docsvault capture\nstatus: raw\ncorrelation_id: c2\n---\n\n"
        "# Egrets\n\nWhite.\n")


def test_cli_capture_dash_reads_stdin(mixed: Path) -> None:
    """`capture -` reads the text from stdin, as `--file -` and Unix tools do: before session 43 it captured the
    text '-' ("no words, only '-'")."""
    result = runner.invoke(app, ["capture", "-", "--source", "inbox", "--correlation-id", "c3", "--no-build"],
                           input="# Cranes\n\nTall.\n")
    assert result.exit_code == 0, result.output
    assert _no_time((mixed / "inbox" / "Cranes.md").read_text(encoding="utf-8")) == (
        "---\ntitle: Cranes\ncreated: T\nagent: docsvault capture\nstatus: raw\ncorrelation_id: c3\n---\n\n"
        "# Cranes\n\nTall.\n")
    result = runner.invoke(app, ["capture", "-", "--file", "-", "--source", "inbox", "--no-build"], input="x\n")
    assert result.exit_code == 2
    assert "not both" in result.output


def test_mcp_save_note_gets_the_title_heading(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.mcp_server import VaultService

    svc = VaultService(Settings.from_env())
    monkeypatch.setattr(svc, "refresh", lambda source=None, full=False, wait=0, evaluate=True: {"ok": True})
    out = svc.save_note("A heron stands still.", title="Heron facts", source="inbox", agent="x",
                        correlation_id="c1")
    assert (out["path"], out["searchable"]) == ("inbox/Heron facts.md", True)
    assert _no_time((mixed / "inbox" / "Heron facts.md").read_text(encoding="utf-8")) == (
        "---\ntitle: Heron facts\ncreated: T\nagent: x\nstatus: raw\ncorrelation_id: c1\n---\n\n"
        "# Heron facts\n\nA heron stands still.\n")


def test_mcp_save_note_says_why_the_rebuild_left_it_unsearchable(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh whose source built but whose warehouse was not published (a reader host's copied warehouse):
    save_note answered `searchable: false` with no word of why; now its `error` carries the warehouse's line."""
    from pipeline.mcp_server import VaultService

    svc = VaultService(Settings.from_env())
    line = "warehouse: 1 source(s) have a vault folder but were never built in data dir /d (tiny): …"
    monkeypatch.setattr(svc, "refresh", lambda source=None, full=False, wait=0, evaluate=True: {
        "ok": False, "seconds": 1.0, "counts": {"added": 0, "changed": 0, "removed": 0},
        "outcomes": [{"name": "inbox", "status": "built", "error": None}],
        "shared": {"ok": False, "error": line}})
    out = svc.save_note("Kites hover.", title="Kites", source="inbox")
    after = ("; the note stays saved: do not save it again (its name is taken); make it searchable with "
             'refresh(source="inbox") (its `wait` waits for a running build)')
    assert (out["searchable"], out["error"]) == (False, f"the note is saved but the rebuild failed: {line}{after}")
    assert (mixed / "inbox" / "Kites.md").is_file()
    monkeypatch.setattr(svc, "refresh", lambda source=None, full=False, wait=0, evaluate=True: {
        "ok": False, "outcomes": [{"name": "inbox", "status": "failed", "error": "inbox: no file"}],
        "shared": {"ok": True, "error": None}})
    assert svc.save_note("Owls.", title="Owls", source="inbox")["error"] == \
        "the note is saved but the rebuild failed: inbox: no file" + after


def test_mcp_save_note_names_the_rebuilds_warnings_about_the_note(mixed: Path) -> None:
    """An agent saved a note embedding `![[diagram.png]]`, which the capture source does not have: the rebuild
    warned (`docsvault build` printed the line) but `save_note` answered only `searchable: true`. It now returns
    the rebuild's warning lines about its note, and none about the source's other notes."""
    from pipeline.mcp_server import VaultService

    svc = VaultService(Settings.from_env())
    ours = ("source 'inbox': Heron facts.md: diagram.png (line 8) is not in the source (deleted or moved?): the "
            "note's embed/link of it is broken in the vault; restore the file or fix the link")
    other = "source 'inbox': Other.md: [[Meeting]] (line 3) could mean 2 notes: …"
    outcome = {"name": "inbox", "status": "built", "warnings": [other, ours]}
    svc.refresh = lambda *a, **kw: {"ok": True, "seconds": 1.0, "added": ["inbox/Heron facts.md"],  # type: ignore
                                    "counts": {"added": 1, "changed": 0, "removed": 0}, "outcomes": [outcome]}
    out = svc.save_note("A heron.\n\n![[diagram.png]]\n", title="Heron facts", source="inbox")
    assert (out["searchable"], out["warnings"]) == (True, [ours])
    outcome["warnings"] = [other]
    assert "warnings" not in svc.save_note("A stork.\n", title="Stork facts", source="inbox")


def test_cli_capture_names_the_builds_warnings_about_the_note(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`docsvault capture` of text embedding `![[diagram.png]]` said "searchable now" and nothing of the broken
    embed the build had warned about; it prints the build's `warning:` lines about its note (not the others)."""
    from types import SimpleNamespace

    import pipeline.defs.runner as runner_mod
    from pipeline import cli

    ours = "source 'inbox': Heron facts.md: diagram.png (line 8) is not in the source (deleted or moved?): …"
    other = "source 'inbox': Other.md: [[Meeting]] (line 3) could mean 2 notes: …"
    monkeypatch.setattr(runner_mod, "run_build", lambda *a, **kw: None)
    monkeypatch.setattr(cli, "build_outcome", lambda report: SimpleNamespace(as_dict=lambda: {
        "ok": True, "shared": {"error": None},
        "sources": [{"name": "inbox", "status": "built", "error": None, "warnings": [other, ours]}]}))
    result = runner.invoke(app, ["capture", "A heron.\n\n![[diagram.png]]", "--title", "Heron facts",
                                 "--source", "inbox"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [f"warning: {ours}", "  searchable now: source inbox rebuilt"]


def test_a_name_starting_with_the_source_name_is_the_vault_path(mixed: Path) -> None:
    """An agent passed the vault path it saw in search results (helper-137, session 44): ``save_note(name=
    "inbox/ideas")`` into source ``inbox`` wrote ``inbox/inbox/ideas.md`` without a word. With no folder of the
    source's name in its root, the name is the vault path: the note is ``inbox/ideas.md``, and a warning says so; a
    folder ``inbox`` the user made in the root is still written into."""
    sources = {s.name: s for s in load_sources(mixed / "sources.yaml")}
    note = write_capture(sources["inbox"], "An idea.", name="Inbox/ideas")
    assert (note.vault_path, note.path) == ("inbox/ideas.md", mixed / "inbox" / "ideas.md")
    assert note.warning == ("--name 'Inbox/ideas' starts with the source's name 'inbox', which is the vault's folder "
                            "of the source, not a folder in it: written as 'ideas.md' (vault path inbox/ideas.md); to "
                            "write into a folder 'Inbox' of the source, make it first")
    (mixed / "inbox" / "inbox").mkdir()
    note = write_capture(sources["inbox"], "Another idea.", name="inbox/ideas")
    assert (note.vault_path, note.path, note.warning) == ("inbox/inbox/ideas.md", mixed / "inbox" / "inbox" / "ideas.md",
                                                          "")
    assert write_capture(sources["inbox"], "Third.", name="inboxes/x").vault_path == "inbox/inboxes/x.md"


EDITED = ("vault/inbox/Ducks.md was edited since the build wrote it: your version is kept as "
          "vault/inbox/Ducks (edited).md")


def test_cli_capture_says_where_the_builds_moved_aside_hand_edit_is(mixed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user edited a generated note of the capture source in the vault, then ran `docsvault capture`: its build
    replaced the note and kept the edit as `Ducks (edited).md`, but capture printed only "searchable now" (the
    `build` command names the move); it now prints the build's line, as `build` does under the source's row."""
    from types import SimpleNamespace

    import pipeline.defs.runner as runner_mod
    from pipeline import cli

    monkeypatch.setattr(runner_mod, "run_build", lambda *a, **kw: None)
    monkeypatch.setattr(cli, "build_outcome", lambda report: SimpleNamespace(as_dict=lambda: {
        "ok": True, "shared": {"error": None},
        "sources": [{"name": "inbox", "status": "built", "error": None, "kept_edits": [EDITED]}]}))
    result = runner.invoke(app, ["capture", "A heron.", "--title", "Heron facts", "--source", "inbox"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-2:] == [f"  inbox: {EDITED}", "  searchable now: source inbox rebuilt"]


def test_mcp_save_note_says_where_the_rebuilds_moved_aside_hand_edit_is(mixed: Path) -> None:
    """save_note's rebuild moved a user's hand edit of a generated note to `Ducks (edited).md` without a word (the
    refresh tool names it in `kept_edits`); save_note now returns the lines as `kept_edits`, absent when none."""
    from pipeline.mcp_server import VaultService

    svc = VaultService(Settings.from_env())
    outcome: dict[str, object] = {"name": "inbox", "status": "built", "kept_edits": [EDITED]}
    svc.refresh = lambda *a, **kw: {"ok": True, "seconds": 1.0, "added": ["inbox/Heron facts.md"],  # type: ignore
                                    "counts": {"added": 1, "changed": 0, "removed": 0}, "outcomes": [outcome]}
    assert svc.save_note("A heron.\n", title="Heron facts", source="inbox")["kept_edits"] == [EDITED]
    del outcome["kept_edits"]
    assert "kept_edits" not in svc.save_note("A stork.\n", title="Stork facts", source="inbox")
