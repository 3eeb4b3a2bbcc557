"""What an agent driving the MCP tools meets (session 44, an agent's developer over stdio and streamable HTTP): a
result that says it worked when it did not."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.models import Chunk, Note
from tests.tiny_warehouse import publish_chunks, publish_pages


def test_save_note_refuses_a_text_with_a_nul_character(tmp_path: Path) -> None:
    """``save_note(text="nul \\x00 inside")`` wrote the note and answered ``searchable: true``, but the build skips a
    file holding a NUL byte (``binary file (contains NUL bytes)``), so no search found it; ``capture`` refused such
    a file or stdin already. Now the text is refused in one line and nothing is written."""
    from pipeline.mcp_server import ToolFailure, VaultService

    (tmp_path / "inbox").mkdir()
    (tmp_path / "sources.yaml").write_text("sources:\n  - name: inbox\n    kind: local\n    path: inbox\n",
                                           encoding="utf-8")
    svc = VaultService(Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals"))
    with pytest.raises(ToolFailure) as err:
        svc.save_note("nul \x00 inside", name="nul", source="inbox")
    assert str(err.value) == ("the text holds a NUL character (at character 4): binary data, not a note's text; "
                              "drop it (nothing was written)")
    assert list((tmp_path / "inbox").iterdir()) == []


def test_save_note_says_when_the_capture_source_is_the_servers_variable(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the server's ``DOCSVAULT_CAPTURE_SOURCE=nope``, ``save_note(text=…)`` answered ``unknown capture source
    'nope'``, a name the agent never passed, and nothing said how to go on. Now the line names the variable and
    the ``source`` argument; a name the agent passed is told as before."""
    from pipeline.mcp_server import ToolFailure, VaultService

    (tmp_path / "inbox").mkdir()
    (tmp_path / "sources.yaml").write_text("sources:\n  - name: inbox\n    kind: local\n    path: inbox\n",
                                           encoding="utf-8")
    svc = VaultService(Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals"))
    monkeypatch.setenv("DOCSVAULT_CAPTURE_SOURCE", "nope")
    with pytest.raises(ToolFailure) as err:
        svc.save_note("a note about kiwis")
    assert str(err.value) == ("unknown capture source 'nope' (set in DOCSVAULT_CAPTURE_SOURCE; fix it, or pass the "
                              "`source` argument); sources that can take a capture: inbox")
    with pytest.raises(ToolFailure) as err:
        svc.save_note("a note about kiwis", source="nope2")
    assert str(err.value) == "unknown capture source 'nope2'; sources that can take a capture: inbox"
    assert list((tmp_path / "inbox").iterdir()) == []


def test_read_and_related_of_a_saved_note_not_built_yet_say_so(tmp_path: Path) -> None:
    """``save_note`` answered ``path: inbox/Kiwi.md, searchable: false`` (another build held the lock); ``read`` and
    ``related`` of that path then said "no note 'inbox/Kiwi.md' in the vault; use a vault_path from search
    results", as if the agent had made the path up. Now they say the file is in the source, not built yet, and
    how to rebuild it; a path no file of the source has is told as before."""
    from pipeline.mcp_server import ToolFailure, VaultService

    (tmp_path / "inbox" / "sub").mkdir(parents=True)
    (tmp_path / "inbox" / "sub" / "Kiwi.md").write_text("# Kiwi\n\nA kiwi note.\n", encoding="utf-8")
    (tmp_path / "inbox" / "page.html").write_text("<p>x</p>", encoding="utf-8")
    (tmp_path / "vault" / "inbox").mkdir(parents=True)
    (tmp_path / "vault" / "inbox" / "Emu.md").write_text("# Emu\n\nAn emu note.\n", encoding="utf-8")
    publish_pages(tmp_path / "data" / "warehouse.duckdb", {("inbox", "Emu.md", "Emu"): ["An emu note."]})
    (tmp_path / "sources.yaml").write_text("sources:\n  - name: inbox\n    kind: local\n    path: inbox\n",
                                           encoding="utf-8")
    svc = VaultService(Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals"))
    unbuilt = (f"inbox/sub/Kiwi.md is not in the vault yet: its file {tmp_path / 'inbox' / 'sub' / 'Kiwi.md'} is in "
               "source 'inbox', but no build has read it since it was written; rebuild the source (the refresh "
               "tool, or `docsvault build --source inbox`)")
    for tool in (svc.read, svc.related):
        with pytest.raises(ToolFailure) as err:
            tool("inbox/sub/Kiwi.md")
        assert str(err.value) == unbuilt
    # a file built under a name the vault cleaned: its vault path (it would be "not in the vault yet" otherwise)
    (tmp_path / "inbox" / 'He said "hi".md').write_text("# Hi\n\nA quote.\n", encoding="utf-8")
    notes = [Note("inbox", "Emu.md", "Emu.md", "Emu", {"title": "Emu"}, "An emu note."),
             Note("inbox", 'He said "hi".md', "He said -hi-.md", "Hi", {"title": "Hi"}, "A quote.")]
    publish_chunks(tmp_path / "data" / "warehouse.duckdb", notes,
                   [Chunk(f"{n.note_id}-0", n.note_id, "inbox", 0, (), n.title, n.body) for n in notes])
    with pytest.raises(ToolFailure) as err:
        svc.read('inbox/He said "hi".md')
    assert str(err.value) == ("no note 'inbox/He said \"hi\".md' at that vault path: the file 'He said \"hi\".md' of "
                              "source 'inbox' is the note 'inbox/He said -hi-.md' in the vault; read it by that path")
    with pytest.raises(ToolFailure) as err:
        svc.read("inbox/sub/Moa.md")      # no such file
    assert str(err.value) == (f"no note 'inbox/sub/Moa.md' in the vault {tmp_path / 'vault'}; use a vault_path from "
                              "search results (`docsvault search ...` / the search tool)")


def test_read_of_a_built_note_whose_vault_folder_does_not_exist_names_the_folder(tmp_path: Path) -> None:
    """`docsvault --vault /tmp/none read my-notes/Home.md` (the vault left at another folder's default) said "no
    note 'my-notes/Home.md' at that vault path: the file 'Home.md' of source 'my-notes' is the note
    'my-notes/Home.md' in the vault; read it by that path": the very path given. Now it names the missing vault
    folder and where to point, as for a note's name (README "read")."""
    from pipeline.mcp_server import ToolFailure, VaultService

    (tmp_path / "inbox").mkdir()
    (tmp_path / "inbox" / "Home.md").write_text("# Home\n\nA home note.\n", encoding="utf-8")
    (tmp_path / "sources.yaml").write_text("sources:\n  - name: inbox\n    kind: local\n    path: inbox\n",
                                           encoding="utf-8")
    note = Note("inbox", "Home.md", "Home.md", "Home", {"title": "Home"}, "A home note.")
    publish_chunks(tmp_path / "data" / "warehouse.duckdb", [note],
                   [Chunk(f"{note.note_id}-0", note.note_id, "inbox", 0, (), note.title, note.body)])
    svc = VaultService(Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals"))
    for path in ("inbox/Home.md", "Home"):
        with pytest.raises(ToolFailure) as err:
            svc.read(path)
        assert str(err.value) == (f"no note 'inbox/Home.md': the vault folder {tmp_path / 'vault'} does not exist; "
                                  "point --vault / DOCSVAULT_VAULT at the vault the build wrote (the CLI and the MCP "
                                  "server read notes there)")


def test_a_stopped_refresh_names_the_build_of_all_its_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``refresh(full=true)`` of two local sources, stopped at its time limit, said "Run `docsvault build --source
    notes` in a terminal": the first source only, and no ``--force``, so the command did not do what the refresh
    was asked. Now it is the refresh's own build."""
    import subprocess
    import sys

    from pipeline import mcp_server
    from pipeline.mcp_server import ToolFailure, VaultService

    for name in ("notes", "help"):
        (tmp_path / name).mkdir()
    (tmp_path / "sources.yaml").write_text(
        "sources:\n  - name: notes\n    kind: local\n    path: notes\n  - name: help\n    kind: local\n    path: help\n",
        encoding="utf-8")
    real = subprocess.Popen
    monkeypatch.setattr(mcp_server.subprocess, "Popen",
                        lambda cmd, **kw: real([sys.executable, "-c", "import time; time.sleep(60)"], **kw))
    svc = VaultService(Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals"), refresh_timeout=0.5)
    with pytest.raises(ToolFailure) as err:
        svc.refresh(full=True)
    assert str(err.value) == ("refresh of notes, help took longer than 0.5 s and was stopped; the previous index "
                              "still serves. Run `docsvault build --force --source notes --source help` in a terminal")
    with pytest.raises(ToolFailure) as err:
        svc.refresh(source="help")
    assert str(err.value).endswith("Run `docsvault build --source help` in a terminal")


def test_did_you_mean_offers_what_read_takes_back(tmp_path: Path) -> None:
    """Two notes named Home: ``read("vault/notes/Home.md")`` (the vault folder in front, as an agent writes it)
    said "did you mean 'Home'?", and ``read("Home")`` then failed: 'Home' is several notes'. Now a name several
    notes have is offered as their vault paths, the one the typed path ends with alone when there is one."""
    from pipeline.mcp_server import ToolFailure, VaultService

    for source in ("notes", "help"):
        (tmp_path / "vault" / source).mkdir(parents=True)
        (tmp_path / "vault" / source / "Home.md").write_text("# Home\n\nStart here.\n", encoding="utf-8")
    publish_pages(tmp_path / "data" / "warehouse.duckdb", {("notes", "Home.md", "Home"): ["Start here."],
                                                           ("help", "Home.md", "Home"): ["Start here."]})
    (tmp_path / "sources.yaml").write_text("sources: []\n", encoding="utf-8")
    svc = VaultService(Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                                vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals"))
    tail = "? Else use a vault_path from search results (`docsvault search ...` / the search tool)"
    with pytest.raises(ToolFailure) as err:
        svc.read("vault/notes/Home.md")
    assert str(err.value) == (f"no note 'vault/notes/Home.md' in the vault {tmp_path / 'vault'}; did you mean "
                              f"'notes/Home.md'{tail}")
    with pytest.raises(ToolFailure) as err:
        svc.read("Hme")
    assert str(err.value) == ("no note 'Hme': no vault path, source path, note name, title or alias is 'Hme'; did "
                              f"you mean 'help/Home.md' or 'notes/Home.md'{tail}")
    assert svc.read("notes/Home.md")["path"] == "notes/Home.md"
