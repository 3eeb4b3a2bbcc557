"""Shared seams: the one fence scanner (pipeline.common.markdown) and its users, the one memo cache, SearchConfig."""

from __future__ import annotations

from pipeline.common.markdown import code_lines, outside_fences, replace_code, split_code
from pipeline.index.chunk import strip_block_ids
from pipeline.index.language import detect_language
from pipeline.ingest.fetch.htmlmd import _tidy
from pipeline.search.snippet import clean_text
from pipeline.search.tags import inline_tags

DOC = ("intro #a\n"
       "````md\n"
       "```python\n"           # shorter, and with an info string: content, not a close
       "#b x ^id1\n"
       "```\n"
       "````\n"
       "> ```\n"
       "> #c\n"
       "> ```\n"
       "``` not`a fence\n"
       "#d ^id2\n"
       "~~~\n"
       "#e\n")                  # unclosed: runs to the end


def test_split_code_pieces() -> None:
    assert split_code(DOC) == [
        (False, "intro #a\n"),
        (True, "````md\n```python\n#b x ^id1\n```\n````\n"),
        (True, "> ```\n> #c\n> ```\n"),
        (False, "``` not`a fence\n#d ^id2\n"),
        (True, "~~~\n#e\n"),
    ]
    assert "".join(p for _, p in split_code(DOC)) == DOC


def test_line_views_agree() -> None:
    lines = DOC.split("\n")
    code = [n for n, (is_code, _) in enumerate(code_lines(lines)) if is_code]
    assert code == [1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13]
    assert [n for n, _ in outside_fences(lines)] == [0, 9, 10]


def test_replace_code_strips_quote_markers() -> None:
    assert replace_code(DOC, lambda c: f"<{c}>") == (
        "intro #a\n<```python\n#b x ^id1\n```\n>\n<#c\n>\n``` not`a fence\n#d ^id2\n<#e\n>\n")


def test_users_of_the_scanner() -> None:
    assert inline_tags(DOC) == {"a", "d"}
    assert strip_block_ids(DOC).split("\n")[3] == "#b x ^id1"
    assert strip_block_ids(DOC).split("\n")[10] == "#d"
    assert detect_language("```\n日本語のコード\n```\nplain English words here\n") == "en"
    assert clean_text("> ```\n> a  b\n> ```\nafter") == "`a b` after"
    assert _tidy("x  \n\n\n```\ncode  \n\n\n```\ny") == "x\n\n```\ncode  \n\n\n```\ny\n"


def test_memo_cache_round_trip(tmp_path) -> None:
    from pipeline.common.memo import MemoCache

    path = tmp_path / "memo.json"
    first = MemoCache(path)
    assert first.memo("a", lambda: [1]) == [1] and first.memo("a", lambda: [2]) == [1]
    first["b"] = "x"
    first.save()
    assert path.read_text(encoding="utf-8") == '{"a":[1],"b":"x"}'
    again = MemoCache(path)
    assert again.memo("a", lambda: [3]) == [1] and (again.hits, again.misses) == (1, 0)
    stale = tmp_path / "memo-old.json"
    stale.write_text("{}")
    again.save(stale=[stale])                     # only "a" used: rewritten without "b"; the old version removed
    assert path.read_text(encoding="utf-8") == '{"a":[1]}' and not stale.exists()


def test_search_config_has_every_searcher_option() -> None:
    """SearchConfig's fields are Searcher's keyword options, in order, with the same defaults."""
    import inspect
    from dataclasses import fields

    from pipeline.search.searcher import SearchConfig, Searcher

    params = [p for p in inspect.signature(Searcher.__init__).parameters.values() if p.kind == p.KEYWORD_ONLY]
    options = [(p.name, p.default) for p in params if p.name != "config"]
    assert options == [(f.name, f.default) for f in fields(SearchConfig)]
