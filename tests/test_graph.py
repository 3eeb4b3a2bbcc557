"""Tests of pipeline.index.graph: link parsing (EC-05, EC-07), resolution (EC-08), graph building and export."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import networkx as nx
import pytest
import yaml

from pipeline.index.graph import LinkResolver, build_graph, export_graph, parse_links
from pipeline.models import Note, WikiLink

CORPUS = Path("/work/shared/corpora/obsidian-help")


def note(path: str, body: str, source: str = "v", **frontmatter: object) -> Note:
    title = path.rsplit("/", 1)[-1].removesuffix(".md")
    return Note(source, path, path, title, dict(frontmatter), body)


# ---- parsing ------------------------------------------------------------------------------------------------
EC05 = (
    "| Page | Why |\n"
    "| --- | --- |\n"
    "| [[Setup Guide#Install steps\\|Install]] | first |\n"
    "| [[Setup Guide#Install steps|Install]] | also seen in the wild |\n"
    "See [[Setup Guide#Install steps|Install]] and [[#Local heading]].\n"
)


def test_ec05_escaped_pipe_in_tables() -> None:
    links = parse_links(EC05)
    expected = WikiLink(target="Setup Guide", heading="Install steps", alias="Install")
    assert links == [expected, expected, expected, WikiLink(target="", heading="Local heading")]
    assert not any("\\" in (part or "") for link in links for part in (link.target, link.heading, link.alias))


def test_single_brackets_in_the_alias_keep_the_link() -> None:
    """normalize writes `[the [RFC] text](b.md)` as `[[b|the [RFC] text]]`; the graph lost that edge (two links in
    ja-react). `[[` inside an alias still starts the next link."""
    assert parse_links("See [[b|the [RFC] text]] and [[c|x]].") == [WikiLink(target="b", alias="the [RFC] text"),
                                                                   WikiLink(target="c", alias="x")]
    assert parse_links("[[a|[[b]]") == [WikiLink(target="b")]
    lg = build_graph([note("a.md", "See [[b|the [RFC] text]].\n"), note("b.md", "Body.\n")])
    assert list(lg.graph.edges) == [(note("a.md", "").note_id, note("b.md", "").note_id)]


def test_ec05_graph_one_edge_no_phantom_node() -> None:
    lg = build_graph([note("index.md", EC05), note("Setup Guide.md", "Steps.\n\n## Install steps\n")])
    index_id, guide_id = note("index.md", "").note_id, note("Setup Guide.md", "").note_id
    assert sorted(lg.graph.nodes) == sorted([index_id, guide_id])
    assert list(lg.graph.edges) == [(index_id, guide_id)]
    assert lg.graph.edges[index_id, guide_id]["count"] == 3
    assert lg.graph.edges[index_id, guide_id]["headings"] == "Install steps"
    assert lg.unresolved == []


EC07 = (
    "Real link: [[Shell Basics]]\n"
    "Inline example: `[[Note|Alias]]`\n"
    "```bash\n"
    'if [[ -f "$cfg" ]]; then echo ok; fi\n'
    "```\n"
    "~~~toml\n"
    "[[tool.entries]]\n"
    'name = "x"\n'
    "~~~\n"
    "````md\n"
    "```\n"
    "[[Nested Example]]\n"
    "```\n"
    "````\n"
)


def test_ec07_links_in_code_ignored() -> None:
    assert parse_links(EC07) == [WikiLink(target="Shell Basics")]


def test_ec07_graph_has_no_phantom_targets() -> None:
    lg = build_graph([note("shell-tips.md", EC07)])
    assert lg.unresolved == [("v/shell-tips.md", "Shell Basics")]
    assert [e.target for e in lg.edges] == ["Shell Basics"]


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("``[[a]] ` `` then [[b]]", ["b"]),  # double-backtick span containing a single backtick
        ("    [[indented code]]\n\n[[c]]", ["c"]),
        ("> ```\n> [[quoted code]]\n> ```\n[[d]]", ["d"]),
        ("- item\n\n  ```\n  [[list code]]\n  ```\n- [[e]]", ["e"]),
        ("unclosed `[[f]] tick", ["f"]),
        ("```\n[[unclosed fence]]\n", []),
    ],
)
def test_code_masking_variants(markdown: str, expected: list[str]) -> None:
    assert [link.target for link in parse_links(markdown)] == expected


def test_links_in_obsidian_comments_are_no_links() -> None:
    """An Obsidian power user's finding (session 46): `check-vault` named `Home.md:19 -> [[Hidden target]]` as a
    dangling link, and a `%%[[Draft]]%%` to a note made an edge (outlink, backlink, `related`), while Obsidian reads
    no link in a comment (inline, across lines, or unclosed to the end of the note)."""
    body = ("See [[A]]. %% secret: [[Hidden target]] %%\n\n%%\nDraft: [[B]] and [x](C.md)\n%%\n\n"
            "Then [[D]] and `%%` in code, [[E]].\n\n```\n%%\n```\n\n[[F]] %% unclosed [[G]]\n\n[[H]]")
    assert [link.target for link in parse_links(body)] == ["A", "D", "E", "F"]
    lg = build_graph([note("Home.md", body), note("B.md", "b")])
    assert lg.unresolved == [("v/Home.md", t) for t in ("A", "D", "E", "F")]
    assert not lg.graph.has_edge("v/Home.md", "v/B.md")


def test_link_forms() -> None:
    md = (
        "![[Diagram.png|300]] ![[Other note#Part]] [[Page#^abc123]] [[Page#Head#Sub]] [[folder/Page.md|x]]\n"
        "[rel](../x/My%20Note.md#Some%20Head) [angle](<a b.md>) [web](https://example.org/a.md) "
        "[mail](mailto:a@b.md) ![img](pic.md) [anchor](#local) [png](pic.png) [q](Note.md?raw=1)\n"
    )
    assert parse_links(md) == [
        WikiLink(target="Diagram.png", alias="300", embed=True),
        WikiLink(target="Other note", heading="Part", embed=True),
        WikiLink(target="Page", block="abc123"),
        WikiLink(target="Page", heading="Head#Sub"),
        WikiLink(target="folder/Page.md", alias="x"),
        WikiLink(target="../x/My Note.md", heading="Some Head", kind="markdown"),
        WikiLink(target="a b.md", kind="markdown"),
        WikiLink(target="Note.md", kind="markdown"),
    ]


# ---- resolution -----------------------------------------------------------------------------------------------
EC08_FILES = [
    "api/Install.md",
    "guides/Install.md",
    "api/v2/Install.md",
    "howto/deep/page.md",
    "guides/page.md",
    "top.md",
]


@pytest.mark.parametrize("order", [EC08_FILES, list(reversed(EC08_FILES)), sorted(EC08_FILES)])
def test_ec08_resolution(order: list[str]) -> None:
    r = LinkResolver([f"v/{p}" for p in order])
    assert r.resolve("Install", "v/guides/page.md") == "v/guides/Install.md"  # own folder
    assert r.resolve("install", "v/howto/deep/page.md") == "v/api/Install.md"  # shortest path (14 < 17 chars)
    assert r.resolve("INSTALL", "v/top.md") == "v/api/Install.md"
    assert r.resolve("guides/Install", "v/top.md") == "v/guides/Install.md"
    assert r.resolve("api/v2/Install", "v/top.md") == "v/api/v2/Install.md"
    assert r.resolve("Missing", "v/top.md") is None


def test_ec08_graph_dangling_not_bound() -> None:
    notes = [note(p, "") for p in EC08_FILES if p != "top.md"]
    notes.append(note("top.md", "[[INSTALL]] [[guides/Install]] [[api/v2/Install]] [[Nowhere]]"))
    lg = build_graph(notes)
    top = note("top.md", "").note_id
    dsts = sorted(lg.graph.nodes[d]["path"] for _, d in lg.graph.out_edges(top))
    assert dsts == ["v/api/Install.md", "v/api/v2/Install.md", "v/guides/Install.md"]
    assert lg.unresolved == [("v/top.md", "Nowhere")]
    assert next(e for e in lg.edges if e.dst is None).target == "Nowhere"


def test_resolution_details() -> None:
    paths = ["a/Notes/Café.md", "a/Home.md", "a/sub/home.md", "a/x/Page.md", "b/Page.md", "b/Home.md"]
    r = LinkResolver(
        [unicodedata.normalize("NFD", p) if "Café" in p else p for p in paths],
        {"a/x/Page.md": ["Start here"]},
    )
    assert r.resolve("Home.md", "a/sub/page.md") == "a/Home.md"  # exact path in own source vault wins
    assert (
        r.resolve("home", "a/sub/other.md") == "a/Home.md"
    )  # exact path (case-insensitive) before own folder
    assert r.resolve("Page", "a/Home.md") == "a/x/Page.md"  # same source folder preferred
    assert r.resolve("Page", "b/Home.md") == "b/Page.md"
    assert r.resolve(unicodedata.normalize("NFC", "Café"), "a/Home.md") == "a/Notes/Café.md"  # NFC vs NFD
    assert r.resolve("start HERE", "a/Home.md") == "a/x/Page.md"  # alias
    assert r.resolve("../x/Page.md", "a/sub/home.md", kind="markdown") == "a/x/Page.md"
    assert r.resolve("../x/Page", "a/sub/home.md") == "a/x/Page.md"
    assert r.resolve("tes/Café", "a/Home.md") is None  # suffix match is component-wise
    assert r.resolve("image.png", "a/Home.md") is None
    assert LinkResolver.is_attachment("image.png") and LinkResolver.is_attachment("Board.canvas")
    assert not LinkResolver.is_attachment("Obsidian 1.0")


def test_self_links_and_attachments() -> None:
    notes = [
        note("A.md", "[[#Top]] [[A]] [[A#Top]] ![[pic.png]] ![[doc.pdf#page=2]] [[B]] ![[B]]"),
        note("B.md", ""),
    ]
    lg = build_graph(notes)
    a, b = notes[0].note_id, notes[1].note_id
    assert list(lg.graph.edges(data=True)) == [(a, b, {"count": 2, "kind": "embed|wikilink", "headings": ""})]
    assert lg.attachments == 2
    assert lg.unresolved == []
    assert sorted((e.kind, e.count) for e in lg.edges) == [("embed", 1), ("wikilink", 1)]
    assert lg.graph.nodes[b]["in_degree"] == 1 and lg.graph.nodes[a]["in_degree"] == 0
    assert lg.graph.nodes[b]["pagerank"] > lg.graph.nodes[a]["pagerank"]



def test_a_note_made_from_a_canvas_or_mdx_file_is_linked_by_that_file_name() -> None:
    """``[[Board.canvas]]`` links the canvas's note ``Board.canvas.md`` (as Obsidian opens the file), with a
    label or a folder too; ``[[Intro.mdx]]`` the note of ``Intro.mdx``; a missing canvas stays an
    attachment."""
    def made(source_path: str, rel_path: str, body: str = "") -> Note:
        return Note("v", source_path, rel_path, rel_path.removesuffix(".md"), {}, body)

    home = made("Home.md", "Home.md", "Board: [[Board.canvas]], [[Board.canvas|the board]], "
                "[[folder/Plan.canvas]] [[Intro.mdx]] [[Intro]] [[Other.md]] [[Gone.canvas]] "
                "![[pic.png]] [[Board]]")
    notes = [home, made("Board.canvas", "Board.canvas.md"),
             made("folder/Plan.canvas", "folder/Plan.canvas.md"), made("Intro.mdx", "Intro.md"),
             made("Other.md", "Other.md")]
    lg = build_graph(notes)
    out = {lg.graph.nodes[d]["path"]: data["count"]
           for _, d, data in lg.graph.out_edges(home.note_id, data=True)}
    assert out == {"v/Board.canvas.md": 2, "v/folder/Plan.canvas.md": 1, "v/Intro.md": 2, "v/Other.md": 1}
    assert (lg.unresolved, lg.attachments) == ([("v/Home.md", "Board")], 2)

    # a Markdown file named Board.canvas.md beside the canvas (the vault writes it as "Board.canvas (2).md"):
    # the file name as written opens the canvas, with .md the Markdown note, as in Obsidian
    r = LinkResolver(["v/Board.canvas.md", "v/Board.canvas (2).md", "v/Home.md"], {},
                     {"v/Board.canvas.md": "Board.canvas.md", "v/Board.canvas (2).md": "Board.canvas"})
    assert r.resolve("Board.canvas", "v/Home.md") == "v/Board.canvas (2).md"
    assert r.resolve("Board.canvas.md", "v/Home.md") == "v/Board.canvas.md"
    assert LinkResolver(["v/Board.canvas.md"]).resolve("Board.canvas", "v/Home.md") is None  # no source paths

def test_a_note_whose_file_name_the_vault_changed_is_linked_by_that_file_name() -> None:
    """A Japanese note-taker's ``技術メモ/入門／応用.md`` (a full-width slash, which Obsidian allows in a name and the
    vault writes as ``-``): ``[[入門／応用]]``, which Obsidian resolves in the source vault, was dangling in the graph,
    ``status`` and ``check-vault`` (helper s45-ja). It links the note by its source file's name; a name a vault path
    already has (``ABC.md`` beside ``abc.md``, written ``abc (2).md``) keeps resolving as before."""
    def made(source_path: str, rel_path: str, body: str = "") -> Note:
        return Note("v", source_path, rel_path, rel_path.removesuffix(".md"), {}, body)

    home = made("Home.md", "Home.md", "[[入門／応用]] [[技術メモ/入門／応用|本]] [[入門／応用.md#見出し]] "
                "[md](技術メモ/入門／応用.md) [[abc]] [[入門-応用]]")
    notes = [home, made("技術メモ/入門／応用.md", "技術メモ/入門-応用.md"), made("ABC.md", "ABC.md"),
             made("abc.md", "abc (2).md")]
    lg = build_graph(notes)
    out = {lg.graph.nodes[d]["path"]: data["count"]
           for _, d, data in lg.graph.out_edges(home.note_id, data=True)}
    assert out == {"v/技術メモ/入門-応用.md": 5, "v/ABC.md": 1}
    assert lg.unresolved == []


# ---- export ---------------------------------------------------------------------------------------------------
def test_export_round_trip(tmp_path: Path) -> None:
    notes = [
        note("A.md", "[[B]] [[B#H1]] [[C|c]] [[Gone]]"),
        note("B.md", "[[A]] ![[C]]"),
        note("C.md", "[x](A.md)"),
    ]
    lg = build_graph(notes)
    paths = export_graph(lg, tmp_path / "graph")
    assert sorted(p.name for p in (tmp_path / "graph").iterdir()) == ["links.graphml", "links.json"]
    back = nx.read_graphml(paths["graphml"])
    assert back.number_of_nodes() == 3 and back.number_of_edges() == lg.graph.number_of_edges() == 5
    a, b = notes[0].note_id, notes[1].note_id
    assert back.edges[a, b]["count"] == 2 and back.edges[a, b]["headings"] == "H1"
    assert back.nodes[b]["path"] == "v/B.md" and back.nodes[b]["in_degree"] == 1
    data = json.loads(paths["json"].read_text("utf-8"))
    assert [n["id"] for n in data["nodes"]] == sorted(n.note_id for n in notes)
    assert data["unresolved"] == [{"path": "v/A.md", "target": "Gone"}]
    assert len(data["edges"]) == 6  # A->B, A->C, B->A, B->C (embed), C->A (markdown) + dangling A->Gone
    first = paths["json"].read_bytes()
    export_graph(build_graph(list(reversed(notes))), tmp_path / "graph")
    assert paths["json"].read_bytes() == first  # deterministic


# ---- real corpus ----------------------------------------------------------------------------------------------
def _load_obsidian_help() -> list[Note]:
    notes = []
    for f in sorted((CORPUS / "en").rglob("*.md")):
        text = f.read_text("utf-8").replace("\r\n", "\n")
        m = re.match(r"---\n(.*?\n)?---\n", text, re.DOTALL)
        fm = (yaml.safe_load(m.group(1) or "") or {}) if m else {}
        rel = f.relative_to(CORPUS).as_posix()
        notes.append(Note("obsidian-help", rel, rel, f.stem, fm, text[m.end() :] if m else text))
    return notes


@pytest.mark.integration
@pytest.mark.skipif(not CORPUS.exists(), reason="corpus not available")
def test_obsidian_help_links_resolve(tmp_path: Path) -> None:
    notes = _load_obsidian_help()
    lg = build_graph(notes)
    resolved = sum(e.count for e in lg.edges if e.dst is not None)
    dangling = sum(e.count for e in lg.edges if e.dst is None)
    ratio = resolved / (resolved + dangling)
    print(
        f"\nobsidian-help: {len(notes)} notes, {lg.graph.number_of_edges()} edges, links to notes resolved "
        f"{resolved}/{resolved + dangling} ({ratio:.2%}), attachments {lg.attachments}, unresolved {lg.unresolved}"
    )
    assert ratio >= 0.995
    paths = export_graph(lg, tmp_path)
    back = nx.read_graphml(paths["graphml"])
    assert (back.number_of_nodes(), back.number_of_edges()) == (len(notes), lg.graph.number_of_edges())


def test_links_cache_gives_the_same_graph_and_parses_only_changed_bodies(tmp_path: Path) -> None:
    from pipeline.index.graph import LinksCache

    notes = [note("a.md", "See [[b#Top|B]] and ![[c]].\n\n```\n[[not a link]]\n```\n"),
             note("b.md", "Back to [a](a.md) and `[[code]]`.\n", aliases=["Bee"]),
             note("c.md", "[[Bee]] [[missing]] [[pic.png]]\n")]
    plain = build_graph(notes)
    path = tmp_path / "links.json"
    first = LinksCache(path)
    cached = build_graph(notes, parse=first.parse)
    first.save()
    assert (first.hits, first.misses) == (0, 3)
    again = LinksCache(path)
    edited = [*notes[:2], note("c.md", "[[a]]\n")]
    build_graph(notes, parse=again.parse)
    rebuilt = build_graph(edited, parse=again.parse)
    assert (again.hits, again.misses) == (3, 1)           # 3 bodies from the file, only the edited one parsed
    assert cached.edges == plain.edges and cached.unresolved == plain.unresolved
    assert cached.attachments == plain.attachments
    assert dict(cached.graph.nodes(data=True)) == dict(plain.graph.nodes(data=True))
    assert sorted(cached.graph.edges(data=True)) == sorted(plain.graph.edges(data=True))
    assert rebuilt.edges == build_graph(edited).edges
    assert [parse_links(n.body) for n in notes] == [LinksCache(path).parse(n.body) for n in notes]


def test_ec05_a_plain_markdown_note_gets_its_table_wikilinks_escaped(tmp_path: Path) -> None:
    """A local note without Obsidian markers is normalized as Markdown; the wikilinks its author wrote in a table
    row still get ``\\|`` (an unescaped pipe splits the cell in Obsidian), prose keeps ``|``."""
    from pipeline.ingest.normalize import normalize_source
    from pipeline.models import RawFile, Source

    text = EC05.replace("See [[", "\nSee [[")        # a blank line ends the table
    disk = tmp_path / "index.md"
    disk.write_text(text, encoding="utf-8")
    (note_,) = normalize_source(Source(name="edge", kind="local"), [RawFile("edge", "index.md", disk)],
                                "2026-01-01T00:00:00+00:00").notes
    assert note_.body.splitlines()[2:6] == [
        "| [[Setup Guide#Install steps\\|Install]] | first |",
        "| [[Setup Guide#Install steps\\|Install]] | also seen in the wild |",
        "",
        "See [[Setup Guide#Install steps|Install]] and [[#Local heading]].",
    ]


def test_export_survives_control_characters_in_a_title(tmp_path: Path) -> None:
    """A note title with a terminal escape (a hostile file) made GraphML's writer raise, failing link_graph and
    so the whole warehouse; GraphML gets the title without the characters XML cannot hold."""
    import networkx as nx

    from pipeline.index.graph import build_graph, export_graph
    from pipeline.models import Note

    notes = [Note("s", "A.md", "A.md", "A \x1b[2J\x00title", {}, "See [[B]].\n"), Note("s", "B.md", "B.md", "B", {}, "x\n")]
    paths = export_graph(build_graph(notes), tmp_path)
    titles = sorted(d["title"] for _, d in nx.read_graphml(paths["graphml"]).nodes(data=True))
    assert titles == ["A [2Jtitle", "B"]


def test_missing_subpaths_names_links_whose_note_lacks_the_heading_or_block() -> None:
    """A new user's finding: `[[note#Heading]]` to a heading the note does not have did not show anywhere.
    Headings are compared with case, spacing and Obsidian's punctuation ignored (`## A: B` is `[[Guide#a b]]`,
    also as `[x](Guide.md#A%3A%20B)`), but not hyphens (the slug `#a-b` is no heading); setext and `{#id}`
    headings count, a heading inside code does not; `[[note#A#B]]` needs both; block ids as `^id` at a line's
    end (also right after an embed, as Obsidian's help writes one); a self-link is checked against its own
    note; a dangling link is not reported here."""
    from pipeline.index.graph import missing_subpaths

    target = ("# Guide\n\n## A: B\n\nSetext\n------\n\n## Options {#opts}\n\nA line ^blk-1\n\n```\n"
              "## In code\n^incode\n```\n\n![[pic.png]]^pic-id\n")
    home = ("[[Guide#a b]] [[Guide#Setext]] [[Guide#Options]] [[Guide#Guide#A B]] [[Guide#^BLK-1]] "
            "[[Guide#^pic-id]] [[Guide#Nope|alias]] [[Guide#Nope]] [[Guide#In code]] [[Guide#^incode]] "
            "[[Guide#Guide#Nope]] [[Gone#Nope]] [x](Guide.md#A%3A%20B) [y](Guide.md#a-b) [[#Home]] "
            "[[#Elsewhere]]\n\n# Home\n")
    found = missing_subpaths([note("Guide.md", target), note("Home.md", home)])
    assert [(p, link.target, link.heading, link.block, link.kind) for p, link in found] == [
        ("v/Home.md", "Guide", "Nope", None, "wikilink"),
        ("v/Home.md", "Guide", "In code", None, "wikilink"),
        ("v/Home.md", "Guide", None, "incode", "wikilink"),
        ("v/Home.md", "Guide", "Guide#Nope", None, "wikilink"),
        ("v/Home.md", "Guide.md", "a-b", None, "markdown"),
        ("v/Home.md", "", "Elsewhere", None, "wikilink"),
    ]


def test_missing_subpaths_knows_a_heading_whose_slug_an_earlier_heading_has() -> None:
    """A reviewer's finding: a note's headings were read from the slug map, where a heading whose GitHub slug an
    earlier heading had (`## NodeJS` after `## Node.js`, both `nodejs`; `## APIs` after `## API's`) was left out, so
    `check-vault` named `[[Guide#NodeJS]]` and `[[Guide#APIs]]`, links to existing headings, as missing."""
    from pipeline.index.graph import missing_subpaths

    guide = "# Guide\n\n## Node.js\n\n## NodeJS\n\n## API's\n\n## APIs\n"
    home = "[[Guide#NodeJS]] [[Guide#Node js]] [[Guide#APIs]] [[Guide#API's]] [[Guide#Nope]]\n"
    found = missing_subpaths([note("Guide.md", guide), note("Home.md", home)])
    assert [(p, link.heading) for p, link in found] == [("v/Home.md", "Nope")]


def test_inline_code_inside_a_wikilink_is_its_text() -> None:
    """A new user's finding: `check-vault` named 41 of duckdb's links to a heading with inline code as links to a
    missing heading, written without their code (`[[…/dot_commands#: Writing Results to a File|output to a file]]`
    for the heading ``## `.output`: Writing Results to a File``): the code masking blanked the code inside the
    link. Code inside a wikilink is its text, as Obsidian reads it; a wikilink that opens inside code is none."""
    from pipeline.index.graph import missing_subpaths

    home = ("See [[Dots#`.output`: Writing Results to a File|the `.output` command]], `[[Code|not a link]]`, "
            "`a [[Half` b]] and [[Dots#`.mode`|mode]].\n")
    assert parse_links(home) == [
        WikiLink(target="Dots", heading="`.output`: Writing Results to a File", alias="the `.output` command"),
        WikiLink(target="Dots", heading="`.mode`", alias="mode"),
    ]
    target = "# Dots\n\n## `.output`: Writing Results to a File\n\ntext\n"
    found = missing_subpaths([note("Dots.md", target), note("Home.md", home)])
    assert [(p, link.heading) for p, link in found] == [("v/Home.md", "`.mode`")]


def test_links_in_properties_count_as_obsidian_counts_them() -> None:
    """An Obsidian note-taker's ``up: "[[Home]]"`` (a map-of-content property) and ``related: ["[[A]]", …]``:
    Obsidian lists them among the note's outgoing links and backlinks; the graph did not (a finding of session
    39). Quoted text values and text items of lists count; YAML's nested list of an unquoted ``[[Home]]``,
    numbers and plain text do not; a property link to no note is dangling."""
    from pipeline.index.graph import property_links

    fm = {"up": "[[Home]]", "related": ["[[A|the a note]]", "plain", 3, "[[B#Part]]", "[[#Self]]"],
          "unquoted": [["Home"]], "when": "2026-12-06", "gone": "[[Nowhere]]"}
    assert property_links(fm) == [
        WikiLink(target="Home", kind="property"), WikiLink(target="A", alias="the a note", kind="property"),
        WikiLink(target="B", heading="Part", kind="property"), WikiLink(target="Nowhere", kind="property")]
    lg = build_graph([note("Day.md", "Went to [[A]].\n", **fm), note("Home.md", "# Home\n"), note("A.md", "# A\n"),
                      note("B.md", "# B\n\n## Part\n")])
    ids = {name: note(f"{name}.md", "").note_id for name in ("Day", "Home", "A", "B")}
    assert {(e.dst, e.target, e.kind, e.count) for e in lg.edges} == {
        (ids["Home"], "Home", "property", 1), (ids["A"], "A", "property", 1), (ids["A"], "A", "wikilink", 1),
        (ids["B"], "B", "property", 1), (None, "Nowhere", "property", 1)}
    assert lg.graph.edges[ids["Day"], ids["A"]]["kind"] == "property|wikilink"
    assert lg.graph.edges[ids["Day"], ids["A"]]["count"] == 2
    assert lg.graph.nodes[ids["Home"]]["in_degree"] == 1
    assert lg.unresolved == [("v/Day.md", "Nowhere")]


def test_tags_aliases_and_css_classes_hold_no_property_links() -> None:
    """Obsidian gives ``tags``, ``aliases`` and ``cssclasses`` types of their own (Tags, Aliases, a list of class
    names): a ``"[[x]]"`` there is a tag, a name or a class, no link. They counted as links (session 39), so an
    alias written ``"[[Old name]]"`` was a dangling link in status and check-vault."""
    from pipeline.index.graph import property_links

    fm = {"tags": ["[[Home]]"], "Aliases": "[[Old name]]", "alias": ["[[Other]]"], "cssclasses": ["[[wide]]"],
          "tag": "[[t]]", "cssclass": "[[c]]", "up": "[[Home]]"}
    assert property_links(fm) == [WikiLink(target="Home", kind="property")]


def test_a_property_is_a_link_only_when_its_whole_value_is_one_wikilink() -> None:
    """Obsidian counts a property as a link when its value (or a list item) is one quoted wikilink, ``up: "[[Home]]"``;
    text around it is plain text there. Any ``[[…]]`` inside a value counted, so a title or description quoting
    code (TOML's ``[[bin]]`` table, bash's ``[[ -f x ]]``) linked to notes 'bin' and '-f x', dangling in status
    and check-vault, and an edge of the graph lane. Nor is ``![[x]]`` in a property a link in Obsidian."""
    from pipeline.index.graph import property_links

    fm = {"title": "The [[bin]] table of Cargo.toml", "description": "Test a file with [[ -f x ]] in bash",
          "up": " [[Home]] ", "related": ["[[A|the a]]", "see [[B]]", "[[C]] and [[D]]", "[[E#Part]]"],
          "cover": "![[cover.png]]", "self": "[[#Heading]]"}
    assert property_links(fm) == [WikiLink(target="Home", kind="property"),
                                  WikiLink(target="A", alias="the a", kind="property"),
                                  WikiLink(target="E", heading="Part", kind="property")]


def test_a_markdown_link_to_a_name_without_extension_is_a_note_link() -> None:
    """A reviewer's finding: Obsidian's help ("Internal links") gives `[Three laws of motion](Three%20laws%20of%20motion)`
    and `[…](Three%20laws%20of%20motion.md)` as the same link, but only the `.md` form was read: the other made no
    edge and, when its note was missing, no dangling link. A name without extension is a note now (target as
    written); a file with another extension, a folder and a web address are still no note link."""
    home = ("[a](Three%20laws%20of%20motion) [b](Three%20laws%20of%20motion.md#Part) [c](../v/Gone#x) "
            "[d](pic.png) [e](v1.2) [f](docs/) [g](https://x.org/Page)\n")
    notes = [note("Three laws of motion.md", "# Laws\n\n## Part\n"), note("Home.md", home)]
    assert [(ln.target, ln.heading) for ln in parse_links(home)] == [
        ("Three laws of motion", None), ("Three laws of motion.md", "Part"), ("../v/Gone", "x")]
    lg = build_graph(notes)
    laws, src = notes[0].note_id, notes[1].note_id
    assert {(e.dst, e.target, e.count) for e in lg.edges} == {(laws, "Three laws of motion", 2), (None, "../v/Gone", 1)}
    assert lg.unresolved == [("v/Home.md", "../v/Gone")]
    assert lg.graph.edges[src, laws]["headings"] == "Part"


def test_a_name_hundreds_of_folders_share_resolves_without_ranking_them_all(monkeypatch) -> None:
    """A vault where every folder has its `index.md` and its notes link `[[index]]` (session 46, 3,000 notes, 1,000
    of them `index.md`): each link ranked every note of that name, so the link graph took 16 s instead of 0.8 s
    (2.1 s at 1,000 notes: quadratic), and check-vault and the vault step's ambiguity check the same again. The
    note in the linking note's folder, which wins, is now found directly; the result is Obsidian's as before."""
    from pipeline.index.graph import LinkResolver

    paths = [f"s/f{i}/index.md" for i in range(300)] + [f"s/f{i}/n{i}.md" for i in range(300)] + ["s/top/Index.md"]
    resolver = LinkResolver(paths)
    ranked: list[int] = []
    best = LinkResolver._best

    def counting(self, cands, *args, **kwargs):
        ranked.append(len(cands))
        return best(self, cands, *args, **kwargs)

    monkeypatch.setattr(LinkResolver, "_best", counting)
    assert [resolver.resolve("index", f"s/f{i}/n{i}.md") for i in (0, 7, 299)] == [
        "s/f0/index.md", "s/f7/index.md", "s/f299/index.md"]
    assert ranked == [1, 1, 1]                      # only the folder's own note, not the 301 of that name
    assert resolver.rivals("index", "s/f7/n7.md") == []
    assert resolver.resolve("Index", "s/top/x.md") == "s/top/Index.md"
    # from a folder without one, every note of the name is ranked, as before: the shortest path, and its rivals
    assert resolver.resolve("index", "s/other/x.md") == "s/f0/index.md"
    assert ranked[-1] == 301 and len(resolver.last_rivals) == 299
