"""Safe note reading (EC-21): traversal refused, Markdown only, bounded pages that reassemble the note."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.search.reader import (
    PAGE_CHARS,
    NoteNotFoundError,
    PathRefusedError,
    excerpt,
    find_link,
    find_note,
    link_parts,
    locate,
    page_of,
    paginate,
    read_link,
    read_note,
    resolve_note_path,
)

SECRET = "TOPSECRET-42"


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    """EC-21's layout: V/a.md, secret.txt beside V/, V/link.md -> ../secret.txt, V/big.md of 2 MB."""
    v = tmp_path / "V"
    (v / "src" / "sub").mkdir(parents=True)
    (v / "src" / ".obsidian").mkdir()
    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text(SECRET, encoding="utf-8")
    (v / "a.md").write_text("---\ntitle: A note\ncreated: 2026-04-05\n---\n# A\n\nHello.\n", encoding="utf-8")
    (v / "src" / "sub" / "b.md").write_text("# B\n\nInside.\n", encoding="utf-8")
    (v / "src" / ".obsidian" / "x.md").write_text("hidden", encoding="utf-8")
    (v / "src" / "notes.txt").write_text("not markdown", encoding="utf-8")
    (v / "link.md").symlink_to(tmp_path / "secret.txt")
    (v / "link2.md").symlink_to(tmp_path / "outside" / "secret.md")
    (v / "outdir").symlink_to(tmp_path / "outside", target_is_directory=True)
    (v / "inner.md").symlink_to(v / "a.md")                       # a symlink that stays inside is fine
    (v / "big.md").write_text(("word " * 199 + "end.\n\n") * 2000, encoding="utf-8")   # ~2 MB
    return v


REFUSED = [
    "../secret.txt", "/etc/hostname", "..%2Fsecret.txt", "link.md", "%2e%2e/secret.txt", "%2E%2E%2Fsecret.txt",
    "src/../../secret.txt", "src/../../../etc/passwd", "..\\secret.txt", "src/%2e%2e/%2e%2e/secret.txt",
    "%252e%252e/secret.txt", "~/secret.md", "C:/Windows/win.ini", "src/notes.txt", "src/.obsidian/x.md",
    "outdir/secret.md", "link2.md", "../V/a.md", "a.md\x00.txt", "", "   ", ".", "..",
]


@pytest.mark.parametrize("note", REFUSED)
def test_traversal_and_non_notes_are_refused(vault: Path, note: str) -> None:
    with pytest.raises(PathRefusedError) as info:
        read_note(vault, note)
    assert SECRET not in str(info.value)
    assert "refused" in str(info.value)


def test_absolute_path_to_a_real_note_is_refused(vault: Path) -> None:
    with pytest.raises(PathRefusedError, match="absolute paths are not accepted"):
        resolve_note_path(vault, str(vault / "a.md"))


@pytest.mark.parametrize("note, expected", [("a.md", "a.md"), ("sub/../a.md", "a.md"), ("./a.md", "a.md"),
                                            ("src/sub/b.md", "src/sub/b.md"), ("inner.md", "inner.md")])
def test_paths_inside_the_vault_are_read(vault: Path, note: str, expected: str) -> None:
    page = read_note(vault, note)
    assert page.path == expected
    assert page.pages == 1


def _publish_one_chunk_each(notes: list, path: Path, edges: tuple = ()) -> Path:
    """A warehouse at ``path`` of ``notes`` (and their link ``edges``), one chunk each (title + body), hash
    vectors."""
    from pipeline import warehouse as wh
    from pipeline.index.analysis import Analyzer
    from pipeline.index.bm25 import build_chunk_index
    from pipeline.index.embed import HashEmbedder, embed_chunks
    from pipeline.models import Chunk

    chunks = [Chunk(f"{n.note_id}-0", n.note_id, n.source, 0, (), n.title, n.body) for n in notes]
    emb = HashEmbedder(16)
    res = embed_chunks(chunks, emb, None)
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, edges=edges,
                                      vectors={emb.model_id: (res.chunk_ids, res.vectors)},
                                      bm25_blobs=build_chunk_index(chunks, notes, Analyzer()).to_blobs()))
    return path


def test_a_unique_source_path_that_is_no_md_file_reads_its_note(vault: Path, tmp_path: Path) -> None:
    """`read Board.canvas` (the source path search shows) reads src/Board.canvas.md; a non-.md path that is no
    note's source path, and a refused one, keep their refusal."""
    from pipeline.models import Note

    (vault / "src" / "Board.canvas.md").write_text("# Board\n\nCanvas text.\n", encoding="utf-8")
    (vault / "src" / "Board.canvas").write_text("{}", encoding="utf-8")       # the attachment copy: never read
    notes = [Note("src", "Board.canvas", "Board.canvas.md", "Board", {"title": "Board"}, "Canvas text."),
             Note("src", "sub/b.md", "sub/b.md", "B", {"title": "B"}, "Inside."),
             Note("other", "sub/b.md", "sub/b.md", "B", {"title": "B"}, "Inside.")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    assert find_note(vault, "Board.canvas", path) == "src/Board.canvas.md"
    assert read_note(vault, find_note(vault, "Board.canvas", path)).text == "# Board\n\nCanvas text.\n"
    # the vault path of the canvas file itself (a new user copied it from the vault folder): the note made from it
    assert find_note(vault, "src/Board.canvas", path) == find_note(vault, "src/Board.canvas") == "src/Board.canvas.md"
    hint = "; give a note's vault path as search returns it, e.g. 'source/folder/Note.md'"
    for note, why in [("src/notes.txt", "only Markdown notes (.md) can be read"),     # a vault file, no note
                      ("../Board.canvas", "the path leaves the vault"),
                      (".Board.canvas", "hidden files and folders are not notes")]:
        with pytest.raises(PathRefusedError) as info:
            find_note(vault, note, path)
        assert str(info.value) == f"refused {note!r}: {why}{hint}"
    with pytest.raises(PathRefusedError, match="only Markdown notes"):
        find_note(vault, "Board.canvas")                                      # no warehouse: refused as before
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "sub/b.md", path)
    assert str(info.value) == ("'sub/b.md' is a source path in several sources; give one of the vault paths: "
                               "other/sub/b.md, src/sub/b.md")


def test_a_name_reads_its_note_as_an_obsidian_link_would(vault: Path, tmp_path: Path) -> None:
    """`read Home` (a note's name, as in [[Home]]) reads the one note of that file name, case-insensitively, also
    with a partial path; several notes of that name are listed; an unknown name keeps its refusal."""
    from pipeline.models import Note
    from pipeline.search.reader import find_link

    (vault / "src" / "guide").mkdir()
    (vault / "src" / "guide" / "Home.md").write_text("# Home\n\nWelcome.\n", encoding="utf-8")
    notes = [Note("src", "guide/Home.md", "guide/Home.md", "Home", {"title": "Home"}, "Welcome."),
             Note("src", "sub/b.md", "sub/b.md", "B", {"title": "B"}, "Inside."),
             Note("other", "sub/b.md", "sub/b.md", "B", {"title": "B"}, "Inside."),
             Note("src", "日記.md", "日記.md", "日記", {"title": "日記"}, "今日の散歩。")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    for name in ("Home", "home", "Home.md", "guide/Home", "src/guide/home"):
        assert find_note(vault, name, path) == "src/guide/Home.md", name
    assert read_note(vault, find_note(vault, "Home", path)).text == "# Home\n\nWelcome.\n"
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "b", path)
    assert str(info.value) == "'b' is the name of several notes; give one of the vault paths: other/sub/b.md, src/sub/b.md"
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "Nowhere", path)
    assert str(info.value) == ("no note 'Nowhere': no vault path, source path, note name, title or alias is "
                               "'Nowhere'; use a vault_path from search results (`docsvault search ...` / "
                               "the search tool)")
    with pytest.raises(NoteNotFoundError) as info:                           # misspelled: the close names
        find_note(vault, "Hmoe", path)
    assert str(info.value) == ("no note 'Hmoe': no vault path, source path, note name, title or alias is "
                               "'Hmoe'; did you mean 'Home'? Else use a vault_path from search results (`docsvault "
                               "search ...` / the search tool)")
    with pytest.raises(NoteNotFoundError) as info:       # a two-character Japanese name one character apart
        find_note(vault, "日紀", path)
    assert str(info.value).startswith("no note '日紀': no vault path, source path, note name, title or alias is "
                                      "'日紀'; did you mean '日記'? Else use")
    # a link into the note that writes it, copied from a page's text: it names no note; what to put before the #
    for link in ("#Fixed-Point Decimals", "[[#Fixed-Point Decimals|`DECIMAL` type]]"):
        with pytest.raises(NoteNotFoundError) as info:
            find_link(vault, link, path)
        assert str(info.value) == (f"no note {link!r}: a link that starts with # points into the note it is written "
                                   "in; put that note's vault path or name before the #, e.g. "
                                   "'Note#Fixed-Point Decimals' (the path the page was read by)")
    # a link by the path a note had before it moved ([[old/Home]], dangling as in Obsidian): its name is offered
    with pytest.raises(NoteNotFoundError) as info:
        find_link(vault, "[[old/Home|start]]", path)
    assert str(info.value) == ("no note 'old/Home': no vault path, source path, note name, title or alias is "
                               "'old/Home'; did you mean 'Home'? Else use a vault_path from search results "
                               "(`docsvault search ...` / the search tool)")
    # the vault path a note had before it moved or was renamed (a search hit copied before the move): its name is
    # offered as for a link (session 44; before, "no note … in the vault" alone); an unknown name still gets none
    for old, shown in (("src/old/Home.md", "src/old/Home.md"), ("Home (old).md", "Home (old).md")):
        with pytest.raises(NoteNotFoundError) as info:
            find_note(vault, old, path)
        hint = "did you mean 'Home'? Else use" if old == "src/old/Home.md" else "use"
        assert str(info.value) == (f"no note {shown!r} in the vault {vault.resolve()}; {hint} a vault_path from "
                                   "search results (`docsvault search ...` / the search tool)")
    # a file of yours in the vault (no build wrote it, so it is no note of the warehouse): named, with its path
    (vault / "src" / "projects").mkdir()
    (vault / "src" / "projects" / "Ideas.md").write_text("# Ideas\n", encoding="utf-8")
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "ideas", path)
    assert str(info.value) == ("no note 'ideas' among the built notes; the vault has src/projects/Ideas.md, a file no "
                               "build wrote (your own, not searched): read it by that path, e.g. `docsvault read "
                               "'src/projects/Ideas.md'` (the MCP read tool: path 'src/projects/Ideas.md')")
    assert read_note(vault, find_note(vault, "src/projects/Ideas.md", path)).text == "# Ideas\n"
    # named with its folder, as an Obsidian link names it ([[projects/Ideas#^b1]]: a generated note you edited whose
    # page then left the source stays as your file): the same answer; it was "did you mean …" another note, or
    # "no note 'projects/Ideas.md' in the vault" (session 43)
    for name in ("projects/Ideas", "Projects/ideas.md", "[[projects/Ideas#^b1]]"):
        with pytest.raises(NoteNotFoundError) as info:
            find_link(vault, name, path)
        assert str(info.value) == (f"no note {link_parts(name)[0]!r} among the built notes; the vault has "
                                   "src/projects/Ideas.md, a file no build wrote (your own, not searched): read it by "
                                   "that path, e.g. `docsvault read 'src/projects/Ideas.md'` (the MCP read tool: "
                                   "path 'src/projects/Ideas.md')"), name
    with pytest.raises(NoteNotFoundError) as info:                           # at a folder boundary only
        find_note(vault, "jects/Ideas", path)
    assert "among the built notes" not in str(info.value)
    # a symlink of yours out of the vault: `read` refuses its path, so it is not offered as one to read
    (tmp_path / "secret.md").write_text("# Secret\n", encoding="utf-8")
    (vault / "src" / "projects" / "Evil.md").symlink_to(tmp_path / "secret.md")
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "evil", path)
    assert str(info.value) == ("no note 'evil': no vault path, source path, note name, title or alias is 'evil'; "
                               "use a vault_path from search results (`docsvault search ...` / the search tool)")



def test_a_vault_path_a_width_apart_offers_the_note(vault: Path, tmp_path: Path) -> None:
    """A note written in half-width katakana (`memo/ｶﾀｶﾅ メモ.md`) asked for by its vault path in full-width, as an
    agent or an IME normalises it (`memo/カタカナ メモ.md`), was "no note … in the vault" with no hint, though the
    name alone (`カタカナ メモ`) opens it and the README offers a name a width apart (session 49, an agent over
    MCP). The close names are now compared in NFKC, both ways: the note's name is offered."""
    from pipeline.models import Note

    (vault / "memo").mkdir()
    (vault / "memo" / "ｶﾀｶﾅ メモ.md").write_text("# ｶﾀｶﾅ メモ\n\nﾃﾞｰﾀﾍﾞｰｽ\n", encoding="utf-8")
    (vault / "memo" / "ホーム.md").write_text("# ホーム\n\n入り口\n", encoding="utf-8")
    notes = [Note("memo", "ｶﾀｶﾅ メモ.md", "ｶﾀｶﾅ メモ.md", "ｶﾀｶﾅ メモ", {"title": "ｶﾀｶﾅ メモ"}, "ﾃﾞｰﾀﾍﾞｰｽ"),
             Note("memo", "ホーム.md", "ホーム.md", "ホーム", {"title": "ホーム"}, "入り口")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    for typed, meant in (("memo/カタカナ メモ.md", "ｶﾀｶﾅ メモ"), ("memo/ﾎｰﾑ.md", "ホーム")):
        with pytest.raises(NoteNotFoundError) as info:
            find_note(vault, typed, path)
        assert str(info.value) == (f"no note {typed!r} in the vault {vault.resolve()}; did you mean {meant!r}? Else "
                                   "use a vault_path from search results (`docsvault search ...` / the search tool)")
        assert find_note(vault, meant, path) == f"memo/{meant}.md"

def test_a_name_only_dangling_links_give_says_so_and_names_the_notes_that_link_it(vault: Path, tmp_path: Path) -> None:
    """Finding of a new user's run (session 46): `read Tea`, `read '[[Tea]]'` (copied from Home's `[[Tea]]`, a
    link to a note no source has) said "no vault path, source path, note name, title or alias is 'Tea'; use a
    vault_path from search results", as of a made-up name. It now says the link dangles and which notes hold it
    (case and `.md` ignored, as Obsidian links); a name no link gives keeps the old line."""
    from pipeline.models import Edge, Note

    notes = [Note("src", "Home.md", "Home.md", "Home", {"title": "Home"}, "See [[Tea]] and [[B]]."),
             Note("src", "sub/b.md", "sub/b.md", "B", {"title": "B"}, "Inside [[tea.md|tea]].")]
    home, b = (n.note_id for n in notes)
    edges = (Edge(home, None, "Tea", "wikilink"), Edge(home, b, "B", "wikilink"), Edge(b, None, "tea.md", "markdown"))
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb", edges)
    for name, said in (("Tea", "Tea"), ("[[Tea|green tea]]", "Tea"), ("tea", "tea"), ("Tea#Brewing", "Tea")):
        with pytest.raises(NoteNotFoundError) as info:
            find_link(vault, name, path)
        assert str(info.value) == (
            f"no note {said!r}: no vault path, source path, note name, title or alias is {said!r}; it is a dangling "
            "link of src/Home.md, src/sub/b.md (a note no source has: create it, or fix the link; `docsvault "
            "check-vault` lists every dangling link)"), name
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "Coffee", path)
    assert str(info.value) == ("no note 'Coffee': no vault path, source path, note name, title or alias is "
                               "'Coffee'; use a vault_path from search results (`docsvault search ...` / "
                               "the search tool)")


def test_a_link_by_path_reads_the_note_at_that_path_though_another_folder_shares_its_name(
        vault: Path, tmp_path: Path) -> None:
    """`[[DuckDB 入門]]` in a note is the source root's DuckDB 入門.md, as Obsidian and the build resolve it, also
    beside Ideas/DuckDB 入門.md (a note-taker's second note of that title): `read` and `related` open it by that
    name and by the link as written (before, both were "the name of several notes", although the note's
    backlinks said where the link goes); two notes of the name in two folders, neither at that path, stay
    listed; the other note opens by its own path."""
    from pipeline.models import Note
    from pipeline.search.reader import find_link

    (vault / "src" / "Ideas").mkdir()
    (vault / "src" / "DuckDB 入門.md").write_text("# DuckDB 入門\n\n## インストール\n\npip.\n", encoding="utf-8")
    (vault / "src" / "Ideas" / "DuckDB 入門.md").write_text("# DuckDB 入門\n\nアイデア。\n", encoding="utf-8")
    notes = [Note("src", "DuckDB 入門.md", "DuckDB 入門.md", "DuckDB 入門", {}, "pip."),
             Note("src", "Ideas/DuckDB 入門.md", "Ideas/DuckDB 入門.md", "DuckDB 入門", {}, "アイデア。"),
             Note("src", "a/Meeting.md", "a/Meeting.md", "Meeting", {}, "A."),
             Note("src", "b/Meeting.md", "b/Meeting.md", "Meeting", {}, "B.")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    for name in ("DuckDB 入門", "[[DuckDB 入門]]", "![[DuckDB 入門|入門]]"):
        assert find_link(vault, name, path) == ("src/DuckDB 入門.md", ""), name
    assert find_link(vault, "[[DuckDB 入門#インストール|x]]", path) == ("src/DuckDB 入門.md", "インストール")
    assert find_link(vault, "Ideas/DuckDB 入門", path) == ("src/Ideas/DuckDB 入門.md", "")
    for name in ("Meeting", "[[Meeting]]"):
        with pytest.raises(NoteNotFoundError) as info:
            find_link(vault, name, path)
        assert str(info.value) == ("'Meeting' is the name of several notes; give one of the vault paths: "
                                   "src/a/Meeting.md, src/b/Meeting.md"), name


def test_a_title_or_alias_reads_its_note_as_search_names_it(vault: Path, tmp_path: Path) -> None:
    """`read Foo` reads the note whose frontmatter has ``aliases: [Foo]`` (or whose title is Foo), compared as
    search compares page names (case, punctuation and spacing ignored); an alias two notes share lists both; a
    file name still wins over another note's alias, as in an Obsidian link."""
    from pipeline.models import Note

    (vault / "src" / "Foo Page.md").write_text("# Foo Page\n\nOtters.\n", encoding="utf-8")
    foo_names = {"aliases": ["Foo", "The Otter-Guide", "x2"]}
    notes = [Note("src", "Foo Page.md", "Foo Page.md", "Foo Page", foo_names, "Otters."),
             Note("src", "x1.md", "x1.md", "Setup notes", {"title": "Setup notes", "aliases": ["Shared"]},
                  "One."),
             Note("src", "x2.md", "x2.md", "X2", {"title": "X2", "aliases": "Shared"}, "Two."),
             Note("src", "sub/b.md", "sub/b.md", "B", {"title": "B", "aliases": ["a.md"]}, "Inside.")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    for name in ("Foo", "foo", "the otter guide", "THE OTTER-GUIDE!", "Foo Page"):
        assert find_note(vault, name, path) == "src/Foo Page.md", name
    assert find_note(vault, "setup  notes", path) == "src/x1.md"               # the title
    assert read_note(vault, find_note(vault, "Foo", path)).text == "# Foo Page\n\nOtters.\n"
    assert find_note(vault, "a.md", path) == "a.md"                             # a vault path is never a name
    assert find_note(vault, "x2", path) == "src/x2.md"                          # a file name before an alias
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "Shared", path)
    assert str(info.value) == ("'Shared' is the title or alias of several notes; give one of the vault "
                               "paths: src/x1.md, src/x2.md")


def test_a_name_as_written_wins_over_one_that_matches_only_case_folded(vault: Path, tmp_path: Path) -> None:
    """`read abc` opens the source's own abc.md, which the vault writes as `abc (2).md` (vault names ignore
    case, ABC.md took `abc.md`), not ABC.md, whose name is `abc` only case-folded (found by a Japanese new
    user); a title as written wins over another note's file name that matches only case-folded; with no exact
    match the case-folded one still opens its note."""
    from pipeline.models import Note

    notes = [Note("src", "ABC.md", "ABC.md", "ABC", {"title": "ABC"}, "Upper."),
             Note("src", "abc.md", "abc (2).md", "abc", {"title": "abc"}, "Lower."),
             Note("src", "Home.md", "Home.md", "Home", {"title": "Home"}, "Welcome."),
             Note("src", "t.md", "t.md", "home", {"title": "home"}, "Lower-case title.")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    expected = {"abc": "src/abc (2).md", "abc.md": "src/abc (2).md", "ABC": "src/ABC.md",
                "ABC.md": "src/ABC.md", "Abc": "src/ABC.md", "abc (2)": "src/abc (2).md",
                "Home": "src/Home.md", "home": "src/t.md", "HOME": "src/Home.md"}
    assert {name: find_note(vault, name, path) for name in expected} == expected


def test_an_obsidian_link_as_written_reads_its_note_at_its_heading(vault: Path, tmp_path: Path) -> None:
    """An agent copies `[[メモ#CSV の自動検出|CSV]]` from a note's text into read: it was "no note" (found by a
    Japanese note-taker driving MCP, helper s36-nu2). The link's note is read, page 1 of a link with a heading or
    block opens the page where it starts (headings compared as Obsidian does: punctuation as spaces, case
    ignored; one inside a code fence is none), an explicit page wins, a missing heading opens page 1; a title with
    `#` in it is found as written; a link to no note names the note's name."""
    from pipeline.models import Note

    sections = "".join(f"## 節 {i}\n\n" + "カワウソの話。" * 60 + "\n\n" for i in range(1, 9))
    body = "# メモ\n\n```\n## Setup: quick\n```\n\n" + sections + "## Setup: quick\n\nRun it. ^run-1\n"
    (vault / "src" / "メモ.md").write_text(body, encoding="utf-8")
    (vault / "src" / "C-.md").write_text("# C# tips\n", encoding="utf-8")
    notes = [Note("src", "メモ.md", "メモ.md", "メモ", {"title": "メモ"}, "カワウソ"),
             Note("src", "C#.md", "C-.md", "C# tips", {"title": "C# tips"}, "Tips.")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    starts = paginate(body)
    last = len(starts)
    at = {n: read_link(vault, n, warehouse_path=path).page for n in (
        "メモ#節 5", "[[メモ#節 5|five]]", "![[src/メモ.md#節 5]]", "メモ#SETUP quick", "[[メモ#^run-1]]",
        "メモ#節 5#Setup: quick", "メモ#節 9", "[[メモ|the memo]]", "メモ#^nope")}
    assert at == {"メモ#節 5": page_of(starts, body.index("## 節 5")), "[[メモ#節 5|five]]": at["メモ#節 5"],
                  "![[src/メモ.md#節 5]]": at["メモ#節 5"], "メモ#SETUP quick": last, "[[メモ#^run-1]]": last,
                  "メモ#節 5#Setup: quick": last, "メモ#節 9": 1, "[[メモ|the memo]]": 1, "メモ#^nope": 1}
    assert 1 < at["メモ#節 5"] < last
    assert read_link(vault, "メモ#節 5", 2, path).page == 2                  # an explicit page wins
    assert find_link(vault, "C# tips", path) == ("src/C-.md", "")          # a title with # in it, as written
    assert find_link(vault, "[[メモ#節 5|five]]", path) == ("src/メモ.md", "節 5")
    # an IME's full-width ＃ (helper s49-ja: "no note 'メモ＃節 5'", the heading lost)
    assert find_link(vault, "メモ＃節 5", path) == ("src/メモ.md", "節 5")
    assert find_link(vault, "[[メモ＃節 5|five]]", path) == ("src/メモ.md", "節 5")
    assert read_link(vault, "メモ＃節 9", warehouse_path=path).warning.startswith(
        "heading '節 9' not found in 'メモ' (src/メモ.md); showing page 1; closest headings: '節 8'")
    warnings = {n: read_link(vault, n, warehouse_path=path).warning for n in (
        "メモ#節 9", "メモ#^nope", "[[メモ#Setup quik|q]]", "メモ#節 5", "メモ#Zebra")}
    assert warnings == {
        "メモ#節 9": "heading '節 9' not found in 'メモ' (src/メモ.md); showing page 1; closest headings: '節 8', "
                     "'節 7', '節 6'; e.g. read 'メモ#節 8'",
        "メモ#^nope": "block '^nope' not found in 'メモ' (src/メモ.md); showing page 1; its block ids: '^run-1'",
        "[[メモ#Setup quik|q]]": "heading 'Setup quik' not found in 'メモ' (src/メモ.md); showing page 1; closest "
                                 "headings: 'Setup: quick'; e.g. read 'メモ#Setup: quick'",
        "メモ#節 5": "",
        "メモ#Zebra": "heading 'Zebra' not found in 'メモ' (src/メモ.md); showing page 1; its headings: 'メモ', "
                      "'節 1', '節 2', '節 3', '節 4', '節 5' … (10 in all)"}
    assert read_link(vault, "メモ#Zebra", 3, path).warning.split("; ")[0:2] == [
        "heading 'Zebra' not found in 'メモ' (src/メモ.md)", "showing page 3"]       # an explicit page is kept
    with pytest.raises(NoteNotFoundError) as info:
        find_link(vault, "Nowhere#節 5", path)
    assert str(info.value).startswith("no note 'Nowhere': ")
    # no warning for a link without a heading; a nested heading path the note has not gets one
    assert read_link(vault, "[[メモ|the memo]]", warehouse_path=path).warning == ""
    assert read_link(vault, "メモ#節 5#節 4", warehouse_path=path).warning == (
        "heading '節 5#節 4' not found in 'メモ' (src/メモ.md); showing page 1; closest headings: '節 4', '節 8', "
        "'節 7'; e.g. read 'メモ#節 4'")
    assert read_link(vault, "メモ#節 9", warehouse_path=path).to_dict()["warning"] == warnings["メモ#節 9"]
    assert "warning" not in read_link(vault, "メモ#節 5", warehouse_path=path).to_dict()


def test_missing_note_is_not_found_with_a_hint(vault: Path) -> None:
    with pytest.raises(NoteNotFoundError, match="no note 'src/nope.md'.*search"):
        read_note(vault, "src/nope.md")


def test_a_vault_folder_that_does_not_exist_is_named_as_such(tmp_path: Path) -> None:
    """`docsvault --data D read Home` from another folder read the default ./vault there: "no note 'notes/Home.md'
    in the vault /tmp/vault; use a vault_path from search results", a path search had just given (helper-146)."""
    with pytest.raises(NoteNotFoundError) as info:
        read_note(tmp_path / "vault", "notes/Home.md")
    assert str(info.value) == (
        f"no note 'notes/Home.md': the vault folder {tmp_path / 'vault'} does not exist; point --vault / "
        "DOCSVAULT_VAULT at the vault the build wrote (the CLI and the MCP server read notes there)")


def test_a_generated_note_deleted_from_the_vault_says_so_and_how_to_write_it_again(tmp_path: Path) -> None:
    """A note the build wrote and the user deleted in Obsidian: `read 'Linux tips'` said "no note 'me/Linux tips.md'
    in the vault …; use a vault_path from search results", while search still gave that very path (session 47)."""
    from pipeline.ingest.ownership import save_manifest

    vault = tmp_path / "vault"
    (vault / "me").mkdir(parents=True)
    save_manifest(vault / "me", "me", {"Linux tips.md": ["0" * 64]})
    with pytest.raises(NoteNotFoundError) as info:
        read_note(vault, "me/Linux tips.md")
    assert str(info.value) == (
        f"no note 'me/Linux tips.md' in the vault {vault.resolve()}: the build wrote it and its file was deleted "
        "since (search still serves it); rebuild the source to write it again (the refresh tool, or `docsvault "
        "build --source me`)")
    with pytest.raises(NoteNotFoundError, match="use a vault_path from search results"):    # never written
        read_note(vault, "me/Other.md")


def test_page_one_has_title_and_json_safe_frontmatter(vault: Path) -> None:
    page = read_note(vault, "a.md")
    assert page.to_dict() == {
        "path": "a.md", "title": "A note", "page": 1, "pages": 1, "next_page": None, "total_chars": 12,
        "text": "# A\n\nHello.\n", "frontmatter": {"title": "A note", "created": "2026-04-05"},   # EC-11
    }


def test_big_note_is_paged_never_returned_whole(vault: Path) -> None:
    first = read_note(vault, "big.md")
    assert first.total_chars == 2_002_000
    assert len(first.text) <= PAGE_CHARS
    assert first.pages >= 2000
    assert first.next_page == 2
    last = read_note(vault, "big.md", first.pages)
    assert last.next_page is None and last.text.endswith("end.\n\n")
    with pytest.raises(ValueError, match=f"page {first.pages + 1} is out of range: big.md has {first.pages} page"):
        read_note(vault, "big.md", first.pages + 1)


def test_pages_cut_at_paragraphs_then_lines_then_words() -> None:
    text = "a" * 600 + "\n\n" + "b" * 600
    assert paginate(text, 1000) == [0, 602]
    text = "a" * 600 + "\n" + "b" * 600
    assert paginate(text, 1000) == [0, 601]
    text = ("word " * 300).strip()
    starts = paginate(text, 1000)
    assert len(starts) == 2 and text[starts[1] - 1] == " "   # cut after a space, never inside a word
    assert paginate("x" * 2500, 1000) == [0, 1000, 2000]      # no boundary: hard cuts
    assert paginate("", 1000) == [0]


def test_a_japanese_line_without_punctuation_is_not_cut_inside_a_link_or_a_character() -> None:
    """A Japanese note-taker's long line without 。 or spaces: its page was cut at 1,000 characters inside
    ``[[吾輩は猫である|猫のノート]]`` (page 1 ended ``[[``, page 2 began ``吾輩は猫である|猫のノート]]``), inside inline code,
    and between a decomposed ガ (NFD, as macOS writes a pasted file name) and its voiced mark (helper s45-ja)."""
    text = "あいうえおかきくけこ" * 99 + "[[吾輩は猫である|猫のノート]]" + "さしすせそ" * 200
    assert paginate(text, 1000)[1] == 990 and text[990:].startswith("[[吾輩は猫である|猫のノート]]")
    text = "あ" * 995 + "`read_parquet('x')`" + "い" * 600
    assert paginate(text, 1000)[1] == 995
    text = "あ" * 999 + "\u30ab\u3099" + "い" * 600            # カ + combining ゛ at 999-1000
    assert paginate(text, 1000)[1] == 999
    # a Japanese comma is a boundary where there is no other: the page ends after the last one
    text = "あ" * 700 + "、" + "い" * 700
    assert paginate(text, 1000)[1] == 701
    assert paginate("x" * 2500, 1000) == [0, 1000, 2000]      # still a hard cut when nothing is split


def test_a_page_never_ends_with_a_heading_so_a_heading_link_opens_its_section(vault: Path, tmp_path: Path) -> None:
    """A Japanese note-taker's long note of chapters (`## 第N章` then ~530 characters each): page 41 ended with
    `## 第42章`, its text on page 42, and `read '長いメモ#第42章'` opened page 41, chapter 41 (helper s43-ja)."""
    body = "# 長いメモ\n\n" + "".join(f"## 第{i}章\n\n" + "これは長いメモの本文です。" * 40 + f" キーワード{i}。\n\n"
                                   for i in range(1, 60))
    starts = paginate(body)
    assert [body[s:].split("\n", 1)[0] for s in starts[1:4]] == ["## 第2章", "## 第3章", "## 第4章"]
    assert not any(body[:s].rstrip("\n").rsplit("\n", 1)[-1].startswith("## ") for s in starts[1:])
    from pipeline.models import Note

    (vault / "src" / "長いメモ.md").write_text(body, encoding="utf-8")
    path = _publish_one_chunk_each([Note("src", "長いメモ.md", "長いメモ.md", "長いメモ", {"title": "長いメモ"}, "本文")],
                                   tmp_path / "warehouse.duckdb")
    page = read_link(vault, "長いメモ#第42章", warehouse_path=path)
    assert page.page == 42 and page.text.startswith("## 第42章\n\nこれは")
    # a heading line is not cut inside either: a page of a long heading ends before it
    text = "a" * 600 + "\n\n## " + "word " * 100 + "\n\nbody"
    assert paginate(text, 1000)[1] == 602


def test_an_outline_of_heading_lines_only_is_cut_between_two_headings_not_inside_one() -> None:
    """A note of empty chapters (`## 第N章` lines only, a draft's outline): with no boundary but after a heading in
    a page's second half, the page was cut at 1,000 characters, inside a heading (page 2 began `# 第124章`, page 3
    ` 第235章`, no heading); it is cut after a heading line, as before session 43."""
    text = "".join(f"## 第{i}章\n" for i in range(1, 300))
    starts = paginate(text)
    assert starts == [0, 999, 1998]
    assert [text[s:].split("\n", 1)[0] for s in starts[1:]] == ["## 第124章", "## 第235章"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n。x"), max_size=5000), st.integers(min_value=10, max_value=1200))
def test_pages_reassemble_the_text_and_are_bounded(text: str, size: int) -> None:
    starts = paginate(text, size)
    bounds = [*starts, len(text)]
    pieces = [text[bounds[i]:bounds[i + 1]] for i in range(len(starts))]
    assert "".join(pieces) == text
    assert all(0 < len(p) <= size for p in pieces) or text == ""
    assert all(page_of(starts, s) == i for i, s in enumerate(starts, start=1))


def test_locate_and_excerpt() -> None:
    body = "# T\n\nIntro.\n\n## Setup\n\nFirst run the installer.\n\n## Usage\n\nCall it.\n"
    assert locate(body, "Setup") == body.index("## Setup")
    assert locate(body, "Setup", "…run the installer.") == body.index("run the installer")
    assert locate(body, "Nope") == 0
    assert excerpt("one two three four", 0, 10) == "one two…"
    assert excerpt("short", 0, 10) == "short"


def test_reader_is_core_no_shell_framework() -> None:
    import subprocess
    import sys

    code = ("import sys\nimport pipeline.search.reader\n"
            "print([m for m in ('dagster', 'typer', 'click', 'mcp', 'duckdb') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_title_or_alias_that_reads_like_a_refused_path_still_opens_its_note(vault: Path, tmp_path: Path) -> None:
    """`.NET`, `C:\\Windows tips` and `50%2F50` are refused as paths, but a note's title or alias may be written
    so: the warehouse names the note, whose own vault path is read. A refused path no note is named stays
    refused."""
    from pipeline.models import Note

    (vault / "src" / "dotnet.md").write_text("# .NET\n\nRuntime.\n", encoding="utf-8")
    notes = [Note("src", "dotnet.md", "dotnet.md", ".NET", {"title": ".NET", "aliases": ["C:\\Windows tips",
                                                                                          "50%2F50"]}, "Runtime.")]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    for name in (".NET", "C:\\Windows tips", "50%2F50"):
        assert find_note(vault, name, path) == "src/dotnet.md", name
    with pytest.raises(PathRefusedError):
        find_note(vault, "../../etc/passwd", path)
    with pytest.raises(PathRefusedError):
        find_note(vault, ".hidden", path)


def _methods_note() -> str:
    """A note whose docstring block (about 1,850 chars) is longer than a page, as a new user's methods
    note."""
    return ("# Methods\n\n" + "Intro words here. " * 30 + "\n\n```python\ndef f(config):\n"
            + '    """Do it.\n\n' + "        Args:\n            config: the thing.\n" * 40
            + '    """\n```\n\nAfter.\n')


def test_a_page_inside_a_long_code_block_reopens_and_closes_its_fence(tmp_path: Path) -> None:
    body = _methods_note()
    (tmp_path / "m.md").write_text(body, encoding="utf-8")
    pages = [read_note(tmp_path, "m.md", n) for n in (1, 2, 3)]
    assert [(p.start, p.added_before, p.added_after) for p in pages] == [
        (0, "", ""), (553, "", "```\n"), (1552, "```python\n", "")]
    assert pages[1].text.startswith("```python\ndef f(config):") and pages[1].text.endswith("Args:\n```\n")
    assert pages[2].text.startswith("```python\n            config: the thing.\n")
    assert "".join(p.body_text for p in pages) == body          # the added fence lines stripped: the note
    added = {k: v for k, v in pages[2].to_dict().items() if k.startswith("added")}
    assert added == {"added_before": "```python\n"}
    assert "added_before" not in pages[0].to_dict()


def test_a_code_block_that_fits_starts_the_next_page_and_quoted_fences_reopen_quoted() -> None:
    block = "~~~~ sh extra\n" + "echo hi\n" * 60 + "~~~~\n"            # 493 chars: fits in a page
    text = "Intro line.\n" * 50 + block + "Done.\n"
    assert paginate(text, 1000) == [0, 600]
    assert text[600:].startswith("~~~~ sh")
    quoted = "> ```js\n" + "> let a = 1;\n" * 100 + "> ```\n"
    starts = paginate(quoted, 500)
    from pipeline.search.reader import _fence_lines, fenced_blocks

    assert _fence_lines(quoted, fenced_blocks(quoted), starts[1], starts[2]) == ("> ```js\n", "> ```\n")


_LINES = st.sampled_from(["```py\n", "~~~\n", "```\n", "> ```\n", "plain words here.\n", "\n", "code(x)\n",
                          "a" * 30 + "\n", "x y z "])


@settings(max_examples=200, deadline=None)
@given(st.lists(_LINES, max_size=300), st.integers(min_value=40, max_value=600))
def test_pages_with_fences_reassemble_and_never_leave_a_block_open(lines: list[str], size: int) -> None:
    from pipeline.common.markdown import fence_closes, fence_open
    from pipeline.search.reader import _fence_lines, fenced_blocks

    def open_at_end(page: str) -> bool:
        opened = None
        for line in page.split("\n"):
            if opened is None:
                opened = fence_open(line)
            elif fence_closes(line, *opened):
                opened = None
        return opened is not None

    text = "".join(lines)
    starts = paginate(text, size)
    bounds = [*starts, len(text)]
    blocks = fenced_blocks(text)
    rebuilt = []
    for i in range(len(starts)):
        before, after = _fence_lines(text, blocks, bounds[i], bounds[i + 1])
        rebuilt.append(text[bounds[i]:bounds[i + 1]])
        if i < len(starts) - 1:        # only the note's own unclosed block stays open, on its last page
            assert not open_at_end(before + text[bounds[i]:bounds[i + 1]] + after)
        assert len(text[bounds[i]:bounds[i + 1]]) <= size
    assert "".join(rebuilt) == text


def test_a_name_of_many_notes_says_how_many_and_how_to_narrow_it(vault: Path, tmp_path: Path) -> None:
    """A new user's `read index` listed 10 of about 70 `index.md` paths without saying more exist: the message
    now gives the count, the first 10 and how to narrow the name (more of the path), which then reads one."""
    from pipeline.models import Note

    notes = [Note("docs", f"d{i:02}/index.md", f"d{i:02}/index.md", f"I{i}", {}, "Text.") for i in range(12)]
    path = _publish_one_chunk_each(notes, tmp_path / "warehouse.duckdb")
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "index", path)
    listed = ", ".join(f"docs/d{i:02}/index.md" for i in range(10))
    assert str(info.value) == (f"'index' is the name of 12 notes: {listed} and 2 more; give more of the path "
                               "to narrow it (a vault path ends in it), e.g. 'd00/index', or one whole vault "
                               "path")
    assert find_note(vault, "d11/index", path) == "docs/d11/index.md"


def test_a_name_without_a_warehouse_says_to_build_not_that_only_md_can_be_read(vault: Path, tmp_path: Path) -> None:
    """`read Home` while the warehouse is missing (before the first build, or moved away): names are looked up
    there, so the error says to build (and names the vault file of that name); it said "refused 'Home': only
    Markdown notes (.md) can be read". A link to it says the same of its note; a vault path still reads."""
    (vault / "src" / "ホーム.md").write_text("# ホーム\n", encoding="utf-8")
    missing = tmp_path / "none.duckdb"
    start = "at that vault path, and note names, titles and aliases are looked up in the warehouse, which is not built"
    build = f"(no warehouse at {missing}): run `docsvault build` first (or the refresh tool), or "
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "ホーム", missing)
    assert str(info.value) == f"no note 'ホーム' {start} {build}read it by its vault path, e.g. 'src/ホーム.md'"
    with pytest.raises(NoteNotFoundError) as info:
        find_link(vault, "[[ホーム#見出し|家]]", missing)
    assert str(info.value) == f"no note 'ホーム' {start} {build}read it by its vault path, e.g. 'src/ホーム.md'"
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "Nowhere", missing)
    assert str(info.value) == (f"no note 'Nowhere' {start} {build}give a note's vault path, e.g. "
                               "'source/folder/Note.md'")
    assert find_note(vault, "src/ホーム.md", missing) == "src/ホーム.md"
    with pytest.raises(PathRefusedError, match="only Markdown notes"):
        find_note(vault, "src/notes.txt", missing)            # a vault file that is no note: refused as before


def test_a_heading_misspelled_in_its_first_words_suggests_the_heading_it_begins() -> None:
    """`read 'Internal links#Link to a blok'` offered 'Link to a file' first (difflib's ratio favours a heading of
    the same length), and an agent retried with it; the heading the link begins is now offered first."""
    from pipeline.search.reader import subpath_missing

    body = ("# Internal links\n\n## Link to a file\n\nx\n\n## Link to a heading in a note\n\ny\n\n"
            "## Link to a block in a note\n\nz\n")
    assert subpath_missing(body, "Internal links", "h/Internal links.md", "Link to a blok", 1) == (
        "heading 'Link to a blok' not found in 'Internal links' (h/Internal links.md); showing page 1; closest "
        "headings: 'Link to a block in a note', 'Link to a file', 'Link to a heading in a note'; e.g. read "
        "'Internal links#Link to a block in a note'")
    assert subpath_missing(body, "Internal links", "h/Internal links.md", "Link to a fil", 1).endswith(
        "closest headings: 'Link to a file', 'Link to a block in a note', 'Link to a heading in a note'; e.g. read "
        "'Internal links#Link to a file'")


def test_a_heading_ending_in_a_hash_keeps_it() -> None:
    """``## Learn C#`` is the heading "Learn C#" (CommonMark drops a closing run of ``#`` only after a space), as
    the build titles it; read named it "Learn C" among the closest headings, and a search hit under it (heading
    "Learn C#") was not located in its note. A closing sequence after a space still goes."""
    from pipeline.search.reader import subpath_missing, subpath_offset

    body = "# Languages\n\n## Learn C#\n\nx\n\n## Learn F# ##\n\ny\n"
    assert locate(body, "Learn C#") == body.index("## Learn C#")
    assert subpath_offset(body, "Learn C") == body.index("## Learn C#")   # Obsidian's link: [[Languages#Learn C]]
    assert subpath_missing(body, "Languages", "l/Languages.md", "Lern C", 1) == (
        "heading 'Lern C' not found in 'Languages' (l/Languages.md); showing page 1; closest headings: 'Learn C#', "
        "'Learn F#'; e.g. read 'Languages#Learn C#'")


def test_a_source_index_named_by_read_is_not_called_the_users_own_file(vault: Path, tmp_path: Path) -> None:
    """`read _index` said the vault's `src/_index.md` (each source's index, written by the build) was "a file no
    build wrote (your own, not searched)"; a file the manifest lists is now named as the build's. The path to read
    it by is given for the MCP read tool too (an agent got only the CLI command before session 43)."""
    from pipeline.ingest.ownership import save_manifest, sha256_file
    from pipeline.models import Note

    (vault / "src" / "_index.md").write_text("---\ndocsvault: index\nsource: src\n---\n# src\n", encoding="utf-8")
    save_manifest(vault / "src", "src", {"_index.md": {sha256_file(vault / "src" / "_index.md") or ""}})
    (vault / "src" / "Mine.md").write_text("# Mine\n", encoding="utf-8")
    path = _publish_one_chunk_each([Note("src", "sub/b.md", "sub/b.md", "B", {"title": "B"}, "Inside.")],
                                   tmp_path / "warehouse.duckdb")
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "_index", path)
    assert str(info.value) == ("no note '_index' among the built notes; the vault has src/_index.md, written by the "
                               "build, not searched (a source's index of its notes): read it by that path, e.g. "
                               "`docsvault read 'src/_index.md'` (the MCP read tool: path 'src/_index.md')")
    with pytest.raises(NoteNotFoundError) as info:
        find_note(vault, "mine", path)
    assert str(info.value) == ("no note 'mine' among the built notes; the vault has src/Mine.md, a file no build "
                               "wrote (your own, not searched): read it by that path, e.g. `docsvault read "
                               "'src/Mine.md'` (the MCP read tool: path 'src/Mine.md')")


def test_a_folder_named_by_read_says_how_to_list_its_notes(vault: Path, tmp_path: Path) -> None:
    """An agent's `read('日記')` (a folder of daily notes) got "no note '日記'"; a folder of the vault, named by its
    vault path or by its path inside a source folder, now says it is one and gives the query that lists it."""
    from pipeline.models import Note

    (vault / "src" / "日記").mkdir()
    (vault / "src" / "日記" / "2026-11-28.md").write_text("# 2026-11-28\n", encoding="utf-8")
    path = _publish_one_chunk_each([Note("src", "日記/2026-11-28.md", "日記/2026-11-28.md", "2026-11-28",
                                         {"title": "2026-11-28"}, "雨。")], tmp_path / "warehouse.duckdb")
    listing = ("it is a folder of the vault (src/日記/); list its notes with the query `path:src/日記/` (`docsvault "
               "search 'path:src/日記/'` / the search tool)")
    for name in ("日記", "日記/", "src/日記", "src/日記/"):
        with pytest.raises(NoteNotFoundError) as info:
            find_note(vault, name, path)
        assert str(info.value) == f"no note {name!r}: {listing}", name
    with pytest.raises(PathRefusedError, match="^refused 'src/.obsidian': hidden files and folders are not notes"):
        find_note(vault, "src/.obsidian", path)                   # a hidden folder is no folder to list
    with pytest.raises(NoteNotFoundError, match="^no note '会議': no vault path"):
        find_note(vault, "会議", path)                             # no folder of that name


def test_a_heading_typed_in_another_width_is_offered_as_the_closest() -> None:
    """`read 'DuckDB 入門#ｲﾝｽﾄｰﾙ'` (half-width katakana) named no close heading and listed the note's first ones
    (session 41); the heading it spells is offered to retry with. The link itself still does not reach it, as in
    Obsidian, which compares headings as written."""
    from pipeline.search.reader import subpath_missing, subpath_offset

    body = "# DuckDB 入門\n\n## インストール\n\npip\n\n## Setup guide\n\nx\n\n## 参考\n"
    assert subpath_offset(body, "ｲﾝｽﾄｰﾙ") is None
    assert subpath_missing(body, "DuckDB 入門", "notes/DuckDB 入門.md", "ｲﾝｽﾄｰﾙ", 1) == (
        "heading 'ｲﾝｽﾄｰﾙ' not found in 'DuckDB 入門' (notes/DuckDB 入門.md); showing page 1; closest headings: "
        "'インストール'; e.g. read 'DuckDB 入門#インストール'")
    assert subpath_missing(body, "DuckDB 入門", "notes/DuckDB 入門.md", "ＳＥＴＵＰ　ｇｕｉｄｅ", 1).endswith(
        "closest headings: 'Setup guide'; e.g. read 'DuckDB 入門#Setup guide'")


def test_a_heading_with_an_ideographic_space_is_offered_as_written_to_copy_back() -> None:
    """`## 第１章　はじめに` (U+3000 between, as a Japanese IME types it) was offered as `'第１章\\u3000はじめに'`, which an
    agent or a user copied back into read and did not reach (helper s43-ja); controls stay escaped."""
    from pipeline.search.reader import subpath_missing, subpath_offset

    body = "# 見出し\n\n## 第１章　はじめに\n\n本文。\n"
    line = subpath_missing(body, "見出し", "notes/見出し.md", "第1章 はじめに", 1)
    assert line == ("heading '第1章 はじめに' not found in '見出し' (notes/見出し.md); showing page 1; closest headings: "
                    "'第１章　はじめに'; e.g. read '見出し#第１章　はじめに'")
    assert subpath_offset(body, line.rsplit("#", 1)[1].rstrip("'")) == body.index("## 第１章")
    assert subpath_missing(body, "見出し", "notes/見出し.md", "第1章\x1b[31m", 1).startswith(
        "heading '第1章\\x1b[31m' not found")


def test_a_vault_path_typed_in_nfd_is_found_as_the_vault_writes_it(vault: Path) -> None:
    """macOS input gives `notes/ガイド.md` in NFD (カ + U+3099): read opened the note, but find_note handed the path
    on as typed, and `related` (CLI and MCP) said "no note 'notes/ガイド.md' in the warehouse" (helper s43-ja)."""
    import unicodedata

    (vault / "src" / "ガイド.md").write_text("# ガイド\n", encoding="utf-8")
    typed = unicodedata.normalize("NFD", "src/ガイド.md")
    assert typed != "src/ガイド.md"
    assert find_note(vault, typed) == "src/ガイド.md"
    assert find_note(vault, "src/./sub/b.md") == "src/sub/b.md"


def test_a_read_call_or_a_quoted_path_passed_as_the_path_says_what_to_pass(vault: Path, tmp_path: Path) -> None:
    """An agent passed a search hit's `continue_with` whole, or the path in quotes, and was told only that no note
    has that name (helper s43-ja); the error now gives the arguments to pass. A name nobody has stays "no note"."""
    from pipeline.models import Note

    (vault / "src" / "ホーム.md").write_text("# ホーム\n", encoding="utf-8")
    path = _publish_one_chunk_each([Note("src", "ホーム.md", "ホーム.md", "ホーム", {"title": "ホーム"}, "入口")],
                                   tmp_path / "warehouse.duckdb")
    call = "it is the read call itself; pass its arguments: path='src/ホーム.md', page=2"
    for note, said in (('read(path="src/ホーム.md", page=2)', call),
                       ('"src/ホーム.md"', "the quotes are no part of the path; pass path='src/ホーム.md'")):
        with pytest.raises(NoteNotFoundError) as info:
            find_note(vault, note, path)
        assert str(info.value) == f"no note {note!r}: {said}"
    for note in ('"nowhere"', '"' * 2000 + "src/ホーム.md" + '"' * 2000):     # one layer of quotes is unwrapped
        with pytest.raises(NoteNotFoundError) as info:
            find_note(vault, note, path)
        assert "no vault path, source path, note name, title or alias is" in str(info.value)
