"""bench/warehouse_ab.py pairs the two warehouses' per-case figures by case id, not by position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_cv import _load

wab = _load("warehouse_ab")


def _report(rows: list[tuple[str, float]], kind: str = "keyword") -> dict[str, Any]:
    metrics = ("mrr@10", "hit@1", "hit@3", "ndcg@10")
    return {"cases": [{"id": i, "kind": kind, "corpus": "c", **dict.fromkeys(metrics, rr)} for i, rr in rows]}


#: A lacks the source of x4, B that of x2: both score three cases, but only x1 and x3 are the same cases
A = _report([("x1", 1.0), ("x2", 0.5), ("x3", 0.0)])
B = _report([("x1", 1.0), ("x3", 0.0), ("x4", 1.0)])


def test_paired_cases_pairs_by_id_and_names_the_cases_of_one_warehouse() -> None:
    a, b, rows, only = wab.paired_cases(A, B)
    assert a.tolist() == [1.0, 0.0] and b.tolist() == [1.0, 0.0]
    assert [r["id"] for r in rows] == ["x1", "x3"]
    assert only == ["x2", "x4"]


def test_compare_warehouses_compares_the_same_cases(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    reports = {Path("a"): A, Path("b"): B}
    monkeypatch.setattr(wab, "cached_embedder_factory", lambda: None)
    monkeypatch.setattr(wab, "evaluate_setting", lambda w, cases, setting, factory, scopes: {
        s: reports[w] for s in scopes})
    wab.compare_warehouses(Path("a"), Path("b"), [tmp_path], slices=False)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "scoped: 2 case(s) scored on one warehouse only (its source is not in the other), left out: x2, x4"
    assert out[1] == ("scoped: MRR@10 A 0.5000  B 0.5000  +0.0000 [+0.0000, +0.0000]  "
                      "reciprocal rank moved for 0 of 2 cases")
