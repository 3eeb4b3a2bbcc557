"""Quoted phrases and ``path:`` filters see every note of the scope, not only the pages the lanes rank, and a
search they leave empty says which filter no note passes (session 44, probing the five docs corpora).

Seen: `docsvault search 'react hooks useEffect "in this section"'` said "No results" (exit 1) though five pages
hold "in this section": the phrase was only checked on the ~300 pages the lanes ranked for the query's words, and
`path:duckdb/docs/stable/dev/ react hooks useEffect -k 3` gave 1 of the folder's 26 notes. A pasted error message
with a quoted name (`Binder Error: Referenced column "usr_id" not found`) requires the phrase and answered a bare
"No results", as did `path:nothere/ foo`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.index.embed import HashEmbedder
from pipeline.models import Chunk, Note
from pipeline.search.query import parse_query
from pipeline.search.searcher import FilterMisses, Searcher
from pipeline.service import no_results_message
from tests.tiny_warehouse import publish_chunks

runner = CliRunner()

#: rel path -> chunk texts; the duck notes hold neither "is the" nor "due"; Target holds "is the" in its 2nd chunk
PAGES: dict[str, list[str]] = {
    **{f"n{i:02}.md": [f"Ducks swim in pond {i}."] for i in range(40)},
    "deep/Target.md": ["Tax forms arrive in spring.", "This is the form for taxes, due in April."],
    "deep/Other.md": ["Rivers flow to the sea; the rent is due monthly."],
}


def _notes_and_chunks() -> tuple[list[Note], list[Chunk]]:
    """PAGES as notes of source ``g`` and one chunk per text."""
    notes, chunks = [], []
    for rel, texts in PAGES.items():
        title = rel.rsplit("/", 1)[-1].removesuffix(".md")
        note = Note("g", rel, rel, title, {"title": title}, "\n\n".join(texts))
        notes.append(note)
        chunks += [Chunk(f"{note.note_id}-{i}", note.note_id, "g", i, (title,), title, t) for i, t in enumerate(texts)]
    return notes, chunks


def _publish(path: Path, dims: tuple[int, ...] = (64,)) -> None:
    publish_chunks(path, *_notes_and_chunks(), dims)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("depth") / "warehouse.duckdb"
    _publish(path)
    return path


def _searcher(path: Path) -> Searcher:
    return Searcher(path, embedder_factory=lambda m: HashEmbedder(64))  # type: ignore[arg-type]


def test_the_keyword_lane_ranks_no_page_of_the_phrase_or_folder(warehouse: Path) -> None:
    # the set-up the two tests below rely on: "ducks" ranks only the duck notes ("is", "the" are stopwords)
    with _searcher(warehouse) as s:
        hits = s.search("ducks is the", k=100, lanes=["bm25"])
    assert {h.vault_path for h in hits} == {f"g/n{i:02}.md" for i in range(40)}


def test_a_phrase_held_by_a_page_no_lane_ranked_is_found_at_its_chunk(warehouse: Path) -> None:
    parsed = parse_query('ducks "is the"')
    with _searcher(warehouse) as s:
        hits = s.search(parsed.text, k=5, lanes=["bm25"], filters=parsed)
    # was []: "No results"; the page comes after any ranked one, with score 0, its snippet at the phrase's chunk
    assert [(h.vault_path, h.score, h.snippet) for h in hits] == [
        ("g/deep/Target.md", 0.0, "This is the form for taxes, due in April.")]


def test_a_path_filter_lists_the_folder_past_the_ranked_pages(warehouse: Path) -> None:
    parsed = parse_query("ducks path:g/deep/")
    with _searcher(warehouse) as s:
        hits = s.search(parsed.text, k=5, lanes=["bm25"], filters=parsed)
        ranked_first = s.search("ducks", k=5, lanes=["bm25"], filters=parse_query("ducks path:g/n0"))
    assert [h.vault_path for h in hits] == ["g/deep/Other.md", "g/deep/Target.md"]       # was []
    # enough ranked pages pass: they alone, as ranked (scores above 0), nothing listed after them
    assert [(h.vault_path.startswith("g/n0"), h.score > 0) for h in ranked_first] == [(True, True)] * 5


def test_exclusions_alone_add_no_unranked_page(warehouse: Path) -> None:
    parsed = parse_query("ducks -pond")
    with _searcher(warehouse) as s:
        assert s.search(parsed.text, k=5, lanes=["bm25"], filters=parsed) == []


@pytest.mark.parametrize(("query", "misses"), [
    ("foo path:nothere/", FilterMisses(paths=("nothere/",))),
    ('foo path:"g/*/x*.md"', FilterMisses(paths=("g/*/x*.md",))),
    ('column "usr_id"', FilterMisses(absent=(("usr_id",),))),
    ('"is the" "usr_id" OR "zz top"', FilterMisses(absent=(("usr_id", "zz top"),))),
    ('"is the" path:g/n', FilterMisses(absent=(("is the",),))),             # not in the duck notes
    ('"ducks swim" "due in april"', FilterMisses(apart=True)),             # each in a note, never together
    ('"due in april" -taxes', FilterMisses(excluded=True)),
    ('"is the"', FilterMisses()),                                            # a note passes: no miss
])
def test_filter_misses_names_the_filter_no_note_passes(warehouse: Path, query: str, misses: FilterMisses) -> None:
    with _searcher(warehouse) as s:
        assert s.filter_misses(parse_query(query)) == misses


def test_after_an_empty_search_one_phrase_is_absent_without_reading_the_notes(warehouse: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline import warehouse as wh

    def unread(*_: object) -> dict[str, str]:
        raise AssertionError("read the notes again")

    with _searcher(warehouse) as s:
        monkeypatch.setattr(wh, "note_texts", unread)
        assert s.filter_misses(parse_query('x "usr_id"'), searched=True) == FilterMisses(absent=(("usr_id",),))


@pytest.mark.parametrize(("query", "sources", "message"), [
    ("foo path:nothere/", ["g"], "No results: no note of g has a path starting with 'nothere/'"),
    ('foo path:"g/*/x*.md" path:a/', [], "No results: no note has a path matching 'g/*/x*.md' or starting with 'a/'"),
    ('Referenced column "usr_id" not found', [],
     ('No results: no note contains "usr_id" (a quoted phrase must be in the note as typed; drop the quotes to rank '
      'by its words)')),
    ('"is the" path:g/n', [], ('No results: no note in path:g/n contains "is the" (a quoted phrase must be in the '
                               'note as typed; drop the quotes to rank by its words)')),
    ('"ducks swim" "due in april"', [], ('No results: no note contains "ducks swim" and "due in april" together '
                                         '(a quoted phrase must be in the note as typed; drop the quotes to rank by '
                                         'its words)')),
    ('"due in april" -taxes -"the form"', ["g"],
     'No results: every note of g holding "due in april" contains an excluded term: -taxes or -"the form"'),
])
def test_the_message_says_why(warehouse: Path, query: str, sources: list[str], message: str) -> None:
    parsed = parse_query(query)
    with _searcher(warehouse) as s:
        assert no_results_message(s.filter_misses(parsed, sources or None), parsed, sources) == message


@pytest.mark.parametrize(("query", "meant", "message"), [
    ("foo path:g/deep／", ("g/deep/",), ("No results: no note has a path starting with 'g/deep／' (did you mean "
                                         "path:g/deep/?)")),
    ("foo path:g/deap/", ("g/deep/",), ("No results: no note has a path starting with 'g/deap/' (did you mean "
                                        "path:g/deep/?)")),
    ("foo path:ｇ/ｄｅｅｐ/Ｔａｒ path:zzz/", ("g/deep/Tar",),
     ("No results: no note has a path starting with 'ｇ/ｄｅｅｐ/Ｔａｒ' or starting with 'zzz/' (did you mean "
      "path:g/deep/Tar?)")),
    ('foo path:"g/*/x*.md"', (), "No results: no note has a path matching 'g/*/x*.md'"),
])
def test_a_path_filter_no_note_passes_offers_the_folder_it_meant(warehouse: Path, query: str, meant: tuple[str, ...],
                                                                 message: str) -> None:
    """`search 'path:技術／'` (an IME's full-width slash) or a misspelt folder said only `no note has a path
    starting with '技術／'` (helper s49-ja): the folder it probably meant is offered, compared in NFKC, else by
    spelling."""
    parsed = parse_query(query)
    with _searcher(warehouse) as s:
        misses = s.filter_misses(parsed)
    assert misses.meant == meant
    assert no_results_message(misses, parsed) == message


def test_meant_folders_of_japanese_paths() -> None:
    from pipeline.search.searcher import meant_folders

    paths = ["me/技術/DuckDB 入門.md", "技術/DuckDB 入門.md", "me/料理/カレーのレシピ.md", "料理/カレーのレシピ.md",
             "me/カタカナ/メモ.md", "カタカナ/メモ.md"]
    assert meant_folders(["技術／"], paths) == ("技術/",)
    assert meant_folders(["me/技術／", "技術x/"], paths) == ("me/技術/", "技術/")
    assert meant_folders(["料理／カレー"], paths) == ("料理/カレー",)
    assert meant_folders(["ｶﾀｶﾅ"], paths) == ("カタカナ",)
    assert meant_folders(["zzz/", "*/x.md", ""], paths) == ()


def test_cli_and_mcp_say_which_filter_left_nothing(tiny_env: Path) -> None:
    from pipeline.mcp_server import VaultService

    settings = Settings.from_env()
    settings.warehouse_path.parent.mkdir(parents=True)
    _publish(settings.warehouse_path, dims=(384,))
    pasted = 'Binder Error: Referenced column "usr_id" not found in FROM clause!'
    why = ('No results: no note contains "usr_id" (a quoted phrase must be in the note as typed; drop the quotes '
           'to rank by its words)')
    result = runner.invoke(app, ["search", pasted])
    assert (result.exit_code, result.output) == (1, why + "\n")
    result = runner.invoke(app, ["search", "ducks path:nothere/", "--json"])     # JSON: [] as before
    assert (result.exit_code, result.stdout) == (1, "[]\n")
    svc = VaultService(settings)
    assert svc.search(pasted) == {"query": pasted, "hits": [], "message": why}
    assert svc.search("ducks path:nothere/")["message"] == "No results: no note has a path starting with 'nothere/'"
    found = svc.search('ducks "is the"', lanes=["bm25"])["hits"]
    assert [(h["path"], h["text"]) for h in found] == [("g/deep/Target.md", "This is the form for taxes, due in April.")]
    assert json.loads(runner.invoke(app, ["search", "ducks path:g/deep/", "--lanes", "bm25", "--files", "--json"]
                                    ).stdout)[0]["vault_path"] == "g/deep/Other.md"
    result = runner.invoke(app, ["search", "ducks path:g/deep/", "--lanes", "bm25", "--explain", "-k", "1"])
    lines = result.output.splitlines()                # none of path:g/deep/'s notes holds the word: said first
    assert (result.exit_code, lines[0], lines[1::2]) == (0, (
        "(no note in path:g/deep/ contains 'ducks': these notes are only near in meaning)"), [
        " 1. 0.0000  g/deep/Other.md > Other",
        "    explain: no lane ranked it: it passes the query's filters, listed by vault path = 0.0000"])


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PAGES published as a build publishes them: with the whole-page BM25 index (``bm25_page``) too."""
    from pipeline import warehouse as wh
    from pipeline.index.analysis import Analyzer
    from pipeline.index.bm25 import PAGE_PREFIX, build_chunk_index, build_page_index
    from pipeline.index.embed import embed_chunks

    path = tmp_path_factory.mktemp("paged") / "warehouse.duckdb"
    notes, chunks = _notes_and_chunks()
    emb = HashEmbedder(64)
    res = embed_chunks(chunks, emb, None)
    blobs = build_chunk_index(chunks, notes, Analyzer()).to_blobs()
    blobs.update({PAGE_PREFIX + k: v for k, v in build_page_index(chunks, notes, Analyzer()).to_blobs().items()})
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, vectors={emb.model_id: (res.chunk_ids, res.vectors)},
                                      bm25_blobs=blobs))
    return path


def test_only_the_notes_whose_words_allow_a_phrase_are_read(paged: Path) -> None:
    """The notes past the lanes are read only when their page's BM25 document has every term of a phrase (a
    superset: a phrase no note holds was a pass over every note's text); a phrase in CJK script, or of stopwords
    only, cannot be told that way and reads them all (None)."""
    target = Note("g", "deep/Target.md", "deep/Target.md", "Target", {}, "").note_id
    other = Note("g", "deep/Other.md", "deep/Other.md", "Other", {}, "").note_id
    with _searcher(paged) as s:
        assert s._may_hold(parse_query('"form for taxes"')) == [{target}]
        assert s._may_hold(parse_query('"due" "taxes"')) == [{target, other}, {target}]
        assert s._may_hold(parse_query('"no such words"')) == [set()]
        assert s._may_hold(parse_query('"is the"')) is None            # stopwords only
        assert s._may_hold(parse_query('"税金の書類"')) is None
        assert s._may_hold(parse_query("ducks")) is None               # nothing required
    with _searcher(paged) as s:                  # the search reads those past the lanes: Target, that "ducks" misses
        parsed = parse_query('ducks "form for taxes"')
        hits = s.search(parsed.text, k=5, lanes=["bm25"], filters=parsed)
    assert [h.title for h in hits] == ["Target"]
