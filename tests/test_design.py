"""Shared seams: the one fence scanner (pipeline.common.markdown) and its users, the one memo cache, SearchConfig."""

from __future__ import annotations

from typing import ClassVar

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


class _Ranker:
    """A fixed ranking per query (what run_eval needs from a Searcher)."""

    sources = ("docs",)
    default_lanes = ("bm25", "vector")
    pages: ClassVar[dict[str, list[str]]] = {"install": ["b.md", "a.md"], "ducks": ["c.md"]}

    def rank_pages(self, query, source=None, lanes=None, depth=10):
        return [(f"n-{p}", p, 1.0) for p in self.pages[query]]

    def note_source(self, note_id):
        return "docs"


def test_eval_report_json_is_pinned() -> None:
    """The typed EvalReport prints exactly the JSON the dict report printed (keys, order, values), and since
    session 45 each scored case's rank: ``eval --json`` gave the pooled figures only, so a user could neither check
    an MRR@10 by hand nor see which of their cases moved."""
    import json

    from pipeline.evaluate import EvalReport, run_eval
    from pipeline.models import EvalCase

    cases = [EvalCase(id="i1", query="install", corpus="docs", expected=("a.md",), kind="task"),
             EvalCase(id="d1", query="ducks", corpus="docs", expected=("c.md",), kind="keyword"),
             EvalCase(id="x1", query="ducks", corpus="gone", expected=("c.md",), kind="keyword")]
    report = run_eval(_Ranker(), cases)
    assert isinstance(report, EvalReport) and report.lanes == ("bm25", "vector")
    metrics = '"n": 2, "hit@1": 0.5, "hit@3": 1.0, "mrr@10": 0.75, "ndcg@10": 0.8155'
    assert json.dumps(report.public()) == (
        '{"scope": "scoped", "overall": {' + metrics + '}, "by_source": {"docs": {' + metrics + '}}, '
        '"by_kind": {"keyword": {"n": 1, "hit@1": 1.0, "hit@3": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0}, '
        '"task": {"n": 1, "hit@1": 0.0, "hit@3": 1.0, "mrr@10": 0.5, "ndcg@10": 0.6309}}, '
        '"cases": [{"id": "i1", "query": "install", "corpus": "docs", "kind": "task", "rank": 2, '
        '"top": ["b.md", "a.md"], "hit@1": 0.0, "hit@3": 1.0, "mrr@10": 0.5, "ndcg@10": 0.6309297535714575}, '
        '{"id": "d1", "query": "ducks", "corpus": "docs", "kind": "keyword", "rank": 1, "top": ["c.md"], '
        '"hit@1": 1.0, "hit@3": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0}], '
        '"skipped": [{"id": "x1", "corpus": "gone", "reason": "source \'gone\' is not in the warehouse"}]}')
    assert list(report) == ["lanes", "overall", "by_source", "by_kind", "cases", "skipped", "unreachable", "scope",
                            "partly_unreachable"]
    assert report["cases"][0] == {"id": "i1", "query": "install", "corpus": "docs", "kind": "task", "rank": 2,
                                  "top": ["b.md", "a.md"], "hit@1": 0.0, "hit@3": 1.0, "mrr@10": 0.5,
                                  "ndcg@10": 0.6309297535714575}
    assert json.dumps({**report}) == json.dumps(report.as_dict())


def test_build_outcome_json_is_pinned() -> None:
    """``build --json`` from the typed BuildOutcome: exactly the JSON the dict version printed (keys, order), and
    since session 44 each source's ``warnings``: the ``warning:`` lines the table prints below its row (a note's
    missing attachment, an ambiguous link, a file serving its last good version), which ``--json`` and the MCP
    ``refresh`` dropped, so a script or an agent never learned that a note's embed was broken."""
    import json
    from types import SimpleNamespace as NS

    from pipeline.service import BuildOutcome, build_outcome

    built = NS(name="docs", ok=True, failed_stage="", error="", metadata={
        "raw_docs": {"files": 3}, "notes": {"errors": 2, "kept_last_good": ["Trip.md"]},
        "vault": {"notes": 3, "skipped": False, "conflicts": ["Home.md -> Home (edited).md"],
                  "warning_lines": ["source 'docs': Plan.md: map.png (line 5) is not in the source (deleted or moved?)"]},
        "chunks": {"skipped": False}, "embeddings": {"chunks": 7, "embedded": 5}})
    empty = NS(name="empty", ok=True, failed_stage="", error="", metadata={
        "raw_docs": {"files": 0, "warning_lines": ["source 'empty' has no notes: folder is empty"]},
        "vault": {"notes": 0, "skipped": True}, "chunks": {"skipped": True}, "embeddings": {"chunks": 0, "embedded": 0}})
    failed = NS(name="bad", ok=False, failed_stage="normalize", error="boom", metadata={"raw_docs": {"files": 2}})
    report = NS(sources=[built, empty, failed], ok=False, shared_ok=True, shared_error="", removed=["removed vault/old/: gone"],
                check_warnings=["asset check eval_floors of retrieval_eval failed: mrr@10 0.625 < 0.700 (see the Dagster UI)"],
                shared_metadata={"warehouse": {"notes": 3, "chunks": 7, "path": "/d/warehouse.duckdb", "mode": "incremental"},
                                 "retrieval_eval": {"n": 4, "hit_at_1": 0.5, "mrr_at_10": 0.625, "other": 1}},
                noop=False, note_changes={"added": ["docs/New.md"], "changed": ["docs/Home.md"], "removed": []})
    out = build_outcome(report)
    assert isinstance(out, BuildOutcome) and out.sources[2].failed_stage == "normalize"
    assert json.dumps(out.as_dict(), ensure_ascii=False, indent=2) + "\n" == EXPECTED_BUILD_JSON


EXPECTED_BUILD_JSON = """{
  "ok": false,
  "sources": [
    {
      "name": "docs",
      "status": "built",
      "notes": 3,
      "chunks": 7,
      "embedded": 5,
      "skipped_files": 2,
      "warning": null,
      "failed_stage": null,
      "error": null,
      "kept_edits": [
        "vault/docs/Home.md was edited since the build wrote it: your version is kept as vault/docs/Home (edited).md"
      ],
      "warnings": [
        "source 'docs': 1 file(s) failed to normalize; serving their last good version: Trip.md",
        "source 'docs': Plan.md: map.png (line 5) is not in the source (deleted or moved?)"
      ]
    },
    {
      "name": "empty",
      "status": "unchanged",
      "notes": 0,
      "chunks": 0,
      "embedded": 0,
      "skipped_files": 0,
      "warning": "source 'empty' has no notes: folder is empty",
      "failed_stage": null,
      "error": null,
      "kept_edits": [],
      "warnings": []
    },
    {
      "name": "bad",
      "status": "failed",
      "notes": null,
      "chunks": null,
      "embedded": null,
      "skipped_files": 0,
      "warning": null,
      "failed_stage": "normalize",
      "error": "boom",
      "kept_edits": [],
      "warnings": []
    }
  ],
  "removed": [
    "removed vault/old/: gone"
  ],
  "shared": {
    "ok": true,
    "error": null,
    "warehouse": {
      "notes": 3,
      "chunks": 7,
      "path": "/d/warehouse.duckdb",
      "mode": "incremental"
    },
    "eval": {
      "n": 4,
      "hit_at_1": 0.5,
      "mrr_at_10": 0.625
    },
    "warnings": [
      "asset check eval_floors of retrieval_eval failed: mrr@10 0.625 < 0.700 (see the Dagster UI)"
    ]
  },
  "resumed": [],
  "note_changes": {
    "added": [
      "docs/New.md"
    ],
    "changed": [
      "docs/Home.md"
    ],
    "removed": []
  },
  "upgraded": []
}
"""
