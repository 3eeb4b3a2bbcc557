"""Eval cases, metric math (checked by hand) and the report."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeline.errors import EvalFileError
from pipeline.evaluate import (
    case_metrics,
    first_rank,
    format_report,
    hit_at,
    load_cases,
    ndcg_at,
    reciprocal_rank,
    run_eval,
)
from pipeline.models import EvalCase

RANKED = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]


def test_hit_and_rank():
    assert first_rank(RANKED, ["c", "e"]) == 3
    assert first_rank(RANKED, ["z"]) is None
    assert hit_at(RANKED, ["a"], 1) == 1.0
    assert hit_at(RANKED, ["b"], 1) == 0.0
    assert hit_at(RANKED, ["c"], 3) == 1.0
    assert hit_at(RANKED, ["d"], 3) == 0.0


def test_reciprocal_rank():
    assert reciprocal_rank(RANKED, ["c", "e"]) == pytest.approx(1 / 3)
    assert reciprocal_rank(RANKED, ["j"]) == pytest.approx(0.1)
    assert reciprocal_rank(RANKED, ["k"]) == 0.0  # rank 11: beyond 10
    assert reciprocal_rank([], ["a"]) == 0.0


def test_ndcg():
    # one relevant page at rank 1: perfect
    assert ndcg_at(RANKED, ["a"]) == 1.0
    # one relevant at rank 3: (1/log2 4) / 1 = 0.5
    assert ndcg_at(RANKED, ["c"]) == pytest.approx(0.5)
    # two relevant at ranks 2 and 4: (1/log2 3 + 1/log2 5) / (1 + 1/log2 3)
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_at(RANKED, ["b", "d"]) == pytest.approx(expected)
    assert ndcg_at(RANKED, ["b", "d"]) == pytest.approx(0.6509209, abs=1e-6)
    # three expected, only one found at rank 1: 1 / (1 + 1/log2 3 + 1/2)
    assert ndcg_at(RANKED, ["a", "y", "z"]) == pytest.approx(1 / (1 + 1 / math.log2(3) + 0.5))
    # beyond depth 10 counts nothing
    assert ndcg_at(RANKED, ["k"]) == 0.0


def test_case_metrics():
    assert case_metrics(RANKED, ["b"]) == {
        "hit@1": 0.0, "hit@3": 1.0, "mrr@10": 0.5, "ndcg@10": pytest.approx(1 / math.log2(3))}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_load_cases_file_and_dir(tmp_path: Path):
    d = tmp_path / "evals"
    d.mkdir()
    _write(d / "one.yaml", """
corpus: docs
cases:
  - id: docs-1
    query: "how to install"
    expected: ["install.md"]
    kind: task
  - id: docs-2
    query: "search"
    expected: search.md
""")
    _write(d / "two.yaml", """
corpus: other
cases:
  - {id: o-1, query: q, expected: [a.md, b.md, a.md], corpus: docs}
""")
    _write(d / "notes.txt", "ignored")
    cases = load_cases([d])
    assert [c.id for c in cases] == ["docs-1", "docs-2", "o-1"]
    assert cases[0] == EvalCase("docs-1", "docs", "how to install", ("install.md",), "task", str(d / "one.yaml"))
    assert cases[1].expected == ("search.md",) and cases[1].kind == "unknown"
    assert cases[2].corpus == "docs" and cases[2].expected == ("a.md", "b.md")
    assert load_cases([d / "one.yaml"])[0].id == "docs-1"


@pytest.mark.parametrize(
    "text, message",
    [
        ("corpus: d\ncases:\n  - {id: x, expected: [a]}\n", "case 'x': missing or empty `query`"),
        ("corpus: d\ncases:\n  - {id: x, query: q, expected: []}\n", "case 'x': `expected` must be"),
        ("corpus: d\ncases:\n  - {query: q, expected: [a]}\n", "case #1: missing `id`"),
        ("cases:\n  - {id: x, query: q, expected: [a]}\n", "case 'x': no corpus"),
        ("corpus: d\ncases: [\n", "invalid YAML"),
        ("- just a list\n", "expected a mapping"),
    ],
)
def test_load_cases_errors_name_file_and_case(tmp_path: Path, text: str, message: str):
    path = _write(tmp_path / "bad.yaml", text)
    with pytest.raises(EvalFileError) as err:
        load_cases([path])
    assert str(path) in str(err.value) and message in str(err.value)


def test_duplicate_ids_and_missing_path(tmp_path: Path):
    a = _write(tmp_path / "a.yaml", "corpus: d\ncases:\n  - {id: x, query: q, expected: [a]}\n")
    b = _write(tmp_path / "b.yaml", "corpus: d\ncases:\n  - {id: x, query: q2, expected: [b]}\n")
    with pytest.raises(EvalFileError, match="also defined in"):
        load_cases([a, b])
    with pytest.raises(EvalFileError, match="not found"):
        load_cases([tmp_path / "missing.yaml"])


def test_real_eval_files_load():
    cases = load_cases([Path("/work/shared/evals")])
    assert len(cases) == 126
    assert {c.corpus for c in cases} == {"obsidian-help", "duckdb", "prefect", "diffusers", "ja-react"}


class FakeSearcher:
    def __init__(self) -> None:
        self.sources = ["docs", "other"]
        self.calls: list[tuple[str, object, tuple[str, ...], int]] = []

    def rank_pages(self, query, source=None, lanes=("bm25", "vector"), depth=10):
        self.calls.append((query, source, tuple(lanes), depth))
        ranking = {"q1": ["a.md", "b.md"], "q2": ["x.md", "y.md", "b.md"], "q3": ["z.md"]}[query]
        return [(f"id-{p}", p, 1.0 / (i + 1)) for i, p in enumerate(ranking)]


def test_run_eval_report():
    cases = [
        EvalCase("c1", "docs", "q1", ("a.md",), "keyword"),
        EvalCase("c2", "docs", "q2", ("b.md",), "paraphrase"),
        EvalCase("c3", "other", "q3", ("nope.md",), "paraphrase"),
        EvalCase("c4", "gone", "q4", ("a.md",), "keyword"),
    ]
    fake = FakeSearcher()
    report = run_eval(fake, cases, lanes=("bm25",))
    assert fake.calls[0] == ("q1", "docs", ("bm25",), 10)
    assert report["overall"] == {
        "n": 3, "hit@1": round(1 / 3, 4), "hit@3": round(2 / 3, 4), "mrr@10": round((1 + 1 / 3) / 3, 4),
        "ndcg@10": round((1 + 0.5) / 3, 4)}
    assert report["by_source"]["docs"]["n"] == 2 and report["by_source"]["docs"]["mrr@10"] == round(2 / 3, 4)
    assert report["by_kind"]["paraphrase"] == {"n": 2, "hit@1": 0.0, "hit@3": 0.5, "mrr@10": round(1 / 6, 4),
                                               "ndcg@10": 0.25}
    assert report["cases"][1]["rank"] == 3 and report["cases"][1]["top"] == ["x.md", "y.md", "b.md"]
    assert report["cases"][2]["rank"] is None
    assert report["skipped"] == [{"id": "c4", "corpus": "gone", "reason": "source 'gone' is not in the warehouse"}]
    text = format_report(report)
    assert "overall" in text and "kind: paraphrase" in text and "c3" in text and "skipped (1" in text
    assert "0.444" in text  # MRR overall
