"""Issue 14: a bare link whose name is also a note elsewhere in the merged vault is written in path form, so
Obsidian opens the note the link table resolved; unique names stay as written."""

from __future__ import annotations

from pathlib import Path

from pipeline.index.vaultlinks import ambiguous_names, other_note_names, qualify_ambiguous_links
from pipeline.ingest.vault import write_source
from pipeline.models import Note, text_hash

BODY = ("See [[Home|Open]] and [[Home#Setup]], [[Unique]], [[en/Home]].\n\n![[Home#^b1]]\n\n"
        "| a | b |\n|---|---|\n| [[Translations]] | [[Home\\|Start]] |\n\n`[[Home]]` in code\n")


def _n(source: str, rel: str, body: str = "x\n") -> Note:
    return Note(source, rel, rel, rel[:-3], {"source": source, "source_path": rel, "content_hash": text_hash(body)},
                body)


def test_ambiguous_bare_links_are_qualified(tmp_path: Path) -> None:
    write_source(tmp_path, "other", [_n("other", "Home.md"), _n("other", "Translations.md")])
    (tmp_path / "Inbox").mkdir()
    (tmp_path / "Inbox" / "Unique2.md").write_text("mine\n", encoding="utf-8")
    notes = [_n("help", "en/Start.md", BODY), _n("help", "en/Home.md"), _n("help", "en/Translations.md"),
             _n("help", "en/Unique.md")]
    others = other_note_names(tmp_path, "help")
    assert others == {"_index", "home", "translations", "unique2"}
    assert ambiguous_names(notes, others) == ["home", "translations"]
    out, n = qualify_ambiguous_links("help", notes, others)
    assert n == 6
    start = out[0]
    assert start.body == (
        "See [[help/en/Home|Open]] and [[help/en/Home#Setup|Home > Setup]], [[Unique]], [[help/en/Home|en/Home]].\n\n"
        "![[help/en/Home#^b1]]\n\n"
        "| a | b |\n|---|---|\n| [[help/en/Translations\\|Translations]] | [[help/en/Home\\|Start]] |\n\n"
        "`[[Home]]` in code\n")
    assert start.frontmatter["content_hash"] == text_hash(start.body)
    assert out[1:] == notes[1:]


# ---------------------------------------------------------------------------------------------------------------
# a link that could mean several of the source's own notes: resolved as before, and said


def test_a_link_several_notes_could_mean_is_named(tmp_path: Path) -> None:
    from pipeline.index.graph import LinkResolver
    from pipeline.index.vaultlinks import ambiguous_link_lines

    plan = tmp_path / "Plan.md"
    body = "# Plan\n\nSee [[Meeting]] and [[Meeting|again]], [[work/Meeting]], [[Solo]].\n\n`[[Meeting]]` in code\n"
    plan.write_text(body, encoding="utf-8")
    notes = [_n("me", "notes/Plan.md", body), _n("me", "work/Meeting.md"), _n("me", "home/Meeting.md"),
             _n("me", "Solo.md"), _n("me", "notes/Tasks.md", "[[Meeting]] is here too\n"),
             _n("me", "home/Log.md", "[[Meeting]] from its own folder\n")]
    lines = ambiguous_link_lines("me", notes, {"notes/Plan.md": plan})
    assert lines == [
        ("source 'me': notes/Plan.md: [[Meeting]] (line 3) could mean 2 notes: it links to home/Meeting.md (the "
        "first in path order), not work/Meeting.md; write [[home/Meeting]] or [[work/Meeting]] to choose"),
        ("source 'me': notes/Tasks.md: [[Meeting]] could mean 2 notes: it links to home/Meeting.md (the first in "
        "path order), not work/Meeting.md; write [[home/Meeting]] or [[work/Meeting]] to choose")]
    # the choice itself is unchanged, whatever order the notes come in
    paths = [n.vault_path for n in notes]
    assert {LinkResolver(order).resolve("Meeting", "me/notes/Plan.md") for order in (paths, paths[::-1])} == {
        "me/home/Meeting.md"}
    # names no two notes share: nothing to say, nothing parsed
    assert ambiguous_link_lines("me", [n for n in notes if n.rel_path != "work/Meeting.md"]) == []


def test_an_ambiguous_link_is_placed_on_its_own_line_not_on_a_longer_name(tmp_path: Path) -> None:
    """Line 3 holds ``[[Meeting Notes]]``: it begins as ``[[Meeting`` does, and was named as the link's line."""
    from pipeline.index.vaultlinks import ambiguous_link_lines

    plan = tmp_path / "Plan.md"
    body = "# Plan\n\n[[Meeting Notes]] and [[Meetings]]\n\nAgenda: [[Meeting#Agenda|the agenda]]\n"
    plan.write_text("---\ntags: [x]\n---\n" + body, encoding="utf-8")      # the file's lines, frontmatter too
    notes = [_n("me", "Plan.md", body), _n("me", "a/Meeting.md"), _n("me", "b/Meeting.md")]
    assert ambiguous_link_lines("me", notes, {"Plan.md": plan}) == [
        ("source 'me': Plan.md: [[Meeting]] (line 8) could mean 2 notes: it links to a/Meeting.md (the first in path "
        "order), not b/Meeting.md; write [[a/Meeting]] or [[b/Meeting]] to choose")]


def test_ambiguous_links_are_capped_at_five_lines() -> None:
    from pipeline.index.vaultlinks import ambiguous_link_lines

    notes = [_n("me", "a/X.md"), _n("me", "b/X.md")] + [_n("me", f"n{i}.md", "[[X]]\n") for i in range(7)]
    lines = ambiguous_link_lines("me", notes + [_n("me", "c/d/X.md")])
    assert lines[0] == ("source 'me': n0.md: [[X]] could mean 3 notes: it links to a/X.md (the first in path order), "
                        "not b/X.md, c/d/X.md; write [[a/X]] or [[b/X]] or [[c/d/X]] to choose")
    notes = [_n("me", "a/X.md"), _n("me", "bb/X.md"), _n("me", "n0.md", "[[X]]\n")]
    assert ambiguous_link_lines("me", notes) == [
        ("source 'me': n0.md: [[X]] could mean 2 notes: it links to a/X.md (the shortest path), not bb/X.md; write "
        "[[a/X]] or [[bb/X]] to choose")]
    lines = ambiguous_link_lines("me", [_n("me", "a/X.md"), _n("me", "b/X.md")] +
                                 [_n("me", f"n{i}.md", "[[X]]\n") for i in range(7)])
    assert len(lines) == 6 and lines[-1] == "source 'me': … and 2 more links whose name several notes share"


def test_build_warns_about_a_link_two_of_the_users_notes_could_mean(tmp_path: Path, monkeypatch) -> None:
    import logging

    import dagster as dg
    from typer.testing import CliRunner

    from pipeline.cli import app
    from tests.conftest import _tiny_setenv

    root = tmp_path / "me"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        (root / folder / "Meeting.md").write_text(f"# Meeting\n\nnotes of {folder}\n", encoding="utf-8")
    (root / "Plan.md").write_text("# Plan\n\nAgenda: [[Meeting]]\n", encoding="utf-8")
    (tmp_path / "sources.yaml").write_text(f"sources:\n  - name: me\n    kind: local\n    path: {root}\n",
                                           encoding="utf-8")
    _tiny_setenv(tmp_path, monkeypatch)
    warning = ("warning: source 'me': Plan.md: [[Meeting]] (line 3) could mean 2 notes: it links to a/Meeting.md "
               "(the first in path order), not b/Meeting.md; write [[a/Meeting]] or [[b/Meeting]] to choose")
    for _ in range(2):                                  # said again on a build with nothing changed, until fixed
        result = CliRunner().invoke(app, ["build"])
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines() == [warning]
        # and in the Dagster run's log (the UI's), as the vault step's warning
        instance = dg.DagsterInstance.get()
        (run,) = instance.get_runs(limit=1)
        assert [(e.step_key, e.level, e.user_message) for e in instance.all_logs(run.run_id)
                if (e.user_message or "").startswith("source 'me': ")] == [("me__vault", logging.WARNING,
                                                                     warning.removeprefix("warning: "))]
    (root / "Plan.md").write_text("# Plan\n\nAgenda: [[b/Meeting]]\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["build"])
    assert (result.exit_code, result.stderr) == (0, "")


def test_the_vault_step_reads_the_links_of_an_unchanged_note_from_the_graphs_cache(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """The ambiguous-link warning parsed (markdown-it) every note linking a name two notes share on every build:
    ~0.5 s a build in a 3,000-note vault whose folders share index.md (helper-147). An unchanged note's links now
    come from the graph's link cache; the warning is the same."""
    from typer.testing import CliRunner

    from pipeline.index import graph
    from pipeline.cli import app
    from tests.conftest import _tiny_setenv

    root = tmp_path / "me"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        (root / folder / "Meeting.md").write_text(f"# Meeting\n\nnotes of {folder}\n", encoding="utf-8")
    (root / "Plan.md").write_text("# Plan\n\nAgenda: [[Meeting]]\n", encoding="utf-8")
    (root / "Other.md").write_text("# Other\n\nfirst\n", encoding="utf-8")
    (tmp_path / "sources.yaml").write_text(f"sources:\n  - name: me\n    kind: local\n    path: {root}\n",
                                           encoding="utf-8")
    _tiny_setenv(tmp_path, monkeypatch)
    assert CliRunner().invoke(app, ["build"]).exit_code == 0
    parsed: list[str] = []
    real = graph.parse_links
    monkeypatch.setattr(graph, "parse_links", lambda body: parsed.append(body.split("\n", 1)[0]) or real(body))
    (root / "Other.md").write_text("# Other\n\nsecond\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert "[[Meeting]] (line 3) could mean 2 notes" in result.stderr
    assert parsed == ["# Other"]                        # the graph's parse of the changed note alone


def test_a_link_several_notes_could_mean_is_named_when_another_source_has_the_name_too(tmp_path: Path) -> None:
    """``[[Meeting]]`` with ``a/`` and ``b/Meeting.md`` in the user's folder and a ``Meeting.md`` in another
    source: the vault stage writes the link in path form (the same choice) and said nothing, as the warning was
    looked for in the links it had qualified; it is looked for in the links as written."""
    from pipeline import stages as build
    from pipeline.config import Settings
    from pipeline.ingest.sources import load_sources

    root, docs = tmp_path / "me", tmp_path / "docs"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        (root / folder / "Meeting.md").write_text(f"# Meeting\n\nnotes of {folder}\n", encoding="utf-8")
    (root / "Plan.md").write_text("# Plan\n\nAgenda: [[Meeting]]\n", encoding="utf-8")
    docs.mkdir()
    (docs / "Meeting.md").write_text("# Meeting\n\nhow to run one\n", encoding="utf-8")
    (tmp_path / "sources.yaml").write_text(f"sources:\n  - name: me\n    kind: local\n    path: {root}\n"
                                           f"  - name: docs\n    kind: local\n    path: {docs}\n", encoding="utf-8")
    settings = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    me, other = load_sources(settings.sources_file)
    for source in (me, other):
        build.fetch_stage(settings, source)
        build.normalize_stage(settings, source)
    result = build.vault_stage(settings, me)
    assert (result.qualified_links, result.warning_lines) == (1, (
        ("source 'me': Plan.md: [[Meeting]] (line 3) could mean 2 notes: it links to a/Meeting.md (the first in path "
        "order), not b/Meeting.md; write [[a/Meeting]] or [[b/Meeting]] to choose"),))
    assert "Agenda: [[me/a/Meeting|Meeting]]" in (settings.vault_dir / "me" / "Plan.md").read_text(encoding="utf-8")


def test_a_link_to_a_canvas_or_mdx_file_several_notes_were_made_from_is_named_by_those_files() -> None:
    """``[[Board.canvas]]`` links a canvas's note (``Board.canvas.md``); with ``a/Board.canvas`` and
    ``b/Board.canvas`` it could mean either, and the line names the files as the link does."""
    from pipeline.index.vaultlinks import ambiguous_link_lines

    def made(sp: str, rel: str) -> Note:
        return Note("me", sp, rel, rel[:-3], {}, "x\n")

    notes = [_n("me", "Plan.md", "[[Board.canvas]] and [[Intro.mdx]]\n"),
             made("a/Board.canvas", "a/Board.canvas.md"), made("b/Board.canvas", "b/Board.canvas.md"),
             made("a/Intro.mdx", "a/Intro.md"), made("b/Intro.mdx", "b/Intro.md")]
    assert ambiguous_link_lines("me", notes) == [
        ("source 'me': Plan.md: [[Board.canvas]] could mean 2 notes: it links to a/Board.canvas (the first in "
        "path order), not b/Board.canvas; write [[a/Board.canvas]] or [[b/Board.canvas]] to choose"),
        ("source 'me': Plan.md: [[Intro.mdx]] could mean 2 notes: it links to a/Intro.mdx (the first in path "
        "order), not b/Intro.mdx; write [[a/Intro.mdx]] or [[b/Intro.mdx]] to choose")]


def test_a_link_in_code_is_not_qualified_as_the_graph_reads_no_link_there() -> None:
    """A reviewer's finding: the rewrite skipped fenced and inline code only, so a `[[Home]]` in an indented code
    block (an example of Obsidian's syntax; the link graph and Obsidian read no link there) was rewritten to
    `[[s/Home|Home]]` inside the code. The links rewritten are now those the link graph reads; a paragraph of a
    list item, indented as much, is prose and its link is qualified."""
    body = ("See [[Home]].\n\nExample:\n\n    [[Home]] written in code\n\n- item\n\n    [[Home]] in the item\n\n"
            "```\n[[Home]]\n```\n\n`[[Home]]` and [[Nowhere]]\n")
    notes = [_n("s", "Home.md"), _n("s", "A.md", body)]
    out, n = qualify_ambiguous_links("s", notes, {"home", "nowhere"})
    assert n == 2
    assert out[1].body == ("See [[s/Home|Home]].\n\nExample:\n\n    [[Home]] written in code\n\n- item\n\n"
                           "    [[s/Home|Home]] in the item\n\n```\n[[Home]]\n```\n\n`[[Home]]` and [[Nowhere]]\n")


def test_a_property_link_is_qualified_as_a_link_of_the_body_is() -> None:
    """A reviewer's finding: `up: "[[Home]]"` is a link in Obsidian (and in the link graph), resolved over the whole
    vault as a body link is, but only the body's links were written in path form, so with another source's
    `Home.md` in the vault the property could open that note. A text property or list item that is one link as a
    whole is qualified now; text around a link, an embed and the build's own keys (`title`) are left alone."""
    fm = {"source": "s", "source_path": "A.md", "title": "[[Home]]", "up": " [[Home]] ",
          "related": ["[[Home#Setup|the setup]]", "see [[Home]]", "![[Home]]", 3], "next": "[[Unique]]",
          "content_hash": text_hash("x\n")}
    notes = [_n("s", "Home.md"), _n("s", "Unique.md"), Note("s", "A.md", "A.md", "A", fm, "x\n")]
    out, n = qualify_ambiguous_links("s", notes, {"home"})
    assert n == 2
    assert out[2].frontmatter == {**fm, "up": "[[s/Home|Home]]",
                                  "related": ["[[s/Home#Setup|the setup]]", "see [[Home]]", "![[Home]]", 3]}
    assert out[2].body == "x\n" and out[:2] == notes[:2]


def test_the_vault_stage_memo_sees_a_property_link_added_to_an_unchanged_body() -> None:
    """The vault stage skips a note the qualification left as it was for the same body; a property link added
    later (same body) is qualified all the same: the memo key holds the properties too."""
    from pipeline.common.memo import MemoCache
    from pipeline.stages.ingest import _qualify_links

    memo = MemoCache()
    plain = Note("s", "A.md", "A.md", "A", {"source": "s"}, "x\n")
    notes = [_n("s", "Home.md"), plain]
    assert _qualify_links("s", notes, {"home"}, memo) == (notes, 0)
    linked = Note("s", "A.md", "A.md", "A", {"source": "s", "up": "[[Home]]"}, "x\n")
    out, n = _qualify_links("s", [notes[0], linked], {"home"}, memo)
    assert (n, out[1].frontmatter["up"]) == (1, "[[s/Home|Home]]")


def test_a_link_by_an_alias_is_written_with_its_notes_path() -> None:
    """A reviewer's finding: the link table resolves `[[AI]]` to the note with `aliases: [AI]`, but Obsidian does
    not (it offers the alias while a link is typed and writes `[[Artificial intelligence|AI]]`; a bare `[[AI]]` is
    unresolved and a click makes an empty `AI.md`), so the vault showed a broken link where the graph had an edge.
    Such a link is written with its note's path, the alias as its text; a name that is a note's own is not."""
    ai = Note("s", "Artificial intelligence.md", "Artificial intelligence.md", "Artificial intelligence",
              {"aliases": ["AI", "Home"]}, "x\n")
    body = "[[AI]], [[ai#History|its history]], ![[AI]], [[Home]], [[Nowhere]]\n"
    notes = [ai, _n("s", "Home.md"), Note("s", "A.md", "A.md", "A", {"up": "[[AI]]"}, body)]
    out, n = qualify_ambiguous_links("s", notes, set())
    assert n == 4
    assert out[2].body == ("[[s/Artificial intelligence|AI]], [[s/Artificial intelligence#History|its history]], "
                           "![[s/Artificial intelligence]], [[Home]], [[Nowhere]]\n")
    assert out[2].frontmatter == {"up": "[[s/Artificial intelligence|AI]]"}
    assert out[:2] == notes[:2]


def test_a_link_by_a_file_name_the_vault_changed_is_written_with_its_notes_path() -> None:
    """``[[入門／応用]]`` of a Japanese note-taker reaches ``入門／応用.md`` in Obsidian; the vault writes that file
    as ``入門-応用.md`` (no slash lookalike in a vault name), so in the built vault the link was broken (helper
    s45-ja). It is written with the note's vault path, the name as typed as its text."""
    renamed = Note("s", "技術メモ/入門／応用.md", "技術メモ/入門-応用.md", "入門／応用", {}, "x\n")
    body = "[[入門／応用]]、[[入門／応用#応用編|応用]]、[[Home]]\n"
    notes = [renamed, _n("s", "Home.md"), Note("s", "A.md", "A.md", "A", {}, body)]
    out, n = qualify_ambiguous_links("s", notes, set())
    assert n == 2
    assert out[2].body == "[[s/技術メモ/入門-応用|入門／応用]]、[[s/技術メモ/入門-応用#応用編|応用]]、[[Home]]\n"
    assert out[:2] == notes[:2]


def test_a_table_shown_in_code_does_not_make_the_next_line_a_table_row() -> None:
    """A review finding (session 40): the rewrite read table rows over the whole body, code too, so a Markdown
    table shown in a fenced block made every line after it up to a blank line a "row": a paragraph right after the
    closing fence (and a table right before an opening one) got `[[s/Home\\|the home]]`, a table's escaped pipe
    outside any table, which Obsidian does not read as `|`. Fenced code ends a table, as in GFM, and a table
    inside code is none; a real table's row still escapes its pipe."""
    body = ("```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\nSee [[Home|the home]].\n\n"
            "| x | y |\n|---|---|\n| [[Home]] | 1 |\n~~~\ncode\n~~~\n[[Home]] after the fence\n")
    notes = [_n("s", "Home.md"), _n("s", "A.md", body)]
    out, n = qualify_ambiguous_links("s", notes, {"home"})
    assert n == 3
    assert out[1].body == ("```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\nSee [[s/Home|the home]].\n\n"
                           "| x | y |\n|---|---|\n| [[s/Home\\|Home]] | 1 |\n~~~\ncode\n~~~\n"
                           "[[s/Home|Home]] after the fence\n")


def test_tags_aliases_and_css_classes_are_not_rewritten_as_property_links() -> None:
    """A review finding (session 40): the link graph reads no link in `tags`, `aliases` and `cssclasses` (nor their
    singular forms, any case: Obsidian gives them types of their own), but the vault stage qualified a `[[Home]]`
    there as a property link, so an alias written "[[Home]]" became "[[s/Home|Home]]" in the vault: a value the
    user wrote, changed, though no link is read there. They are left as written; `up` is still qualified."""
    fm = {"source": "s", "aliases": ["[[Home]]"], "Tags": ["[[Home]]"], "cssclasses": "[[Home]]",
          "alias": "[[Home]]", "up": "[[Home]]"}
    notes = [_n("s", "Home.md"), Note("s", "A.md", "A.md", "A", fm, "x\n")]
    out, n = qualify_ambiguous_links("s", notes, {"home"})
    assert n == 1
    assert out[1].frontmatter == {**fm, "up": "[[s/Home|Home]]"}
