"""Retrieval evaluation: eval cases (query -> expected pages) scored on the fused page ranking.

Metrics (binary relevance; a page is relevant when its ``source_path`` is one of the case's ``expected``):
hit@1 / hit@3 (a relevant page in the top 1 / 3), MRR@10 (1 / rank of the first relevant page, 0 beyond 10) and
nDCG@10 (DCG = sum of 1 / log2(rank + 1) over relevant ranks <= 10; ideal DCG over min(len(expected), 10) pages).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from pipeline.errors import EvalFileError
from pipeline.models import EvalCase

__all__ = [
    "DEPTH",
    "METRICS",
    "case_metrics",
    "first_rank",
    "format_report",
    "hit_at",
    "load_cases",
    "ndcg_at",
    "reciprocal_rank",
    "run_eval",
]

DEPTH = 10
METRICS: tuple[str, ...] = ("hit@1", "hit@3", "mrr@10", "ndcg@10")


class PageRanker(Protocol):
    """What ``run_eval`` needs from a searcher (``pipeline.search.Searcher`` fits)."""

    sources: list[str]

    def rank_pages(
        self, query: str, source: str | Sequence[str] | None = None, lanes: Sequence[str] = ..., depth: int = 10
    ) -> list[tuple[str, str, float]]: ...


# ---------------------------------------------------------------------------------------------------------------
# cases


def _case_files(paths: Sequence[Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(list(p.glob("*.yaml")) + list(p.glob("*.yml"))))
        elif p.is_file():
            files.append(p)
        else:
            raise EvalFileError(f"eval cases not found: {p} (give a .yaml file or a directory of them)")
    return files


def _load_file(path: Path) -> list[EvalCase]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalFileError(f"{path}: cannot read eval cases ({exc})") from exc
    except yaml.YAMLError as exc:
        raise EvalFileError(f"{path}: invalid YAML: {exc}") from exc
    if doc is None:
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise EvalFileError(f"{path}: expected a mapping with `corpus: <source>` and `cases: [...]`")
    corpus = doc.get("corpus")
    if corpus is not None and not isinstance(corpus, str):
        raise EvalFileError(f"{path}: `corpus` must be a source name, got {corpus!r}")
    cases: list[EvalCase] = []
    for i, raw in enumerate(doc["cases"], start=1):
        where = f"{path}: case #{i}"
        if not isinstance(raw, dict):
            raise EvalFileError(f"{where}: expected a mapping with id, query, expected, got {raw!r}")
        if raw.get("id") is not None:
            where = f"{path}: case {raw['id']!r}"
        case_id, query, expected = raw.get("id"), raw.get("query"), raw.get("expected")
        if not isinstance(case_id, (str, int)) or str(case_id).strip() == "":
            raise EvalFileError(f"{where}: missing `id`")
        if not isinstance(query, str) or not query.strip():
            raise EvalFileError(f"{where}: missing or empty `query`")
        if isinstance(expected, str):
            expected = [expected]
        if not isinstance(expected, list) or not expected or not all(isinstance(e, str) and e for e in expected):
            raise EvalFileError(f"{where}: `expected` must be a non-empty list of source paths, got {expected!r}")
        case_corpus = raw.get("corpus", corpus)
        if not isinstance(case_corpus, str) or not case_corpus:
            raise EvalFileError(f"{where}: no corpus (set top-level `corpus:` or the case's `corpus:`)")
        kind = raw.get("kind") or "unknown"
        cases.append(
            EvalCase(
                id=str(case_id), corpus=case_corpus, query=query, expected=tuple(dict.fromkeys(expected)),
                kind=str(kind), file=str(path),
            )
        )
    return cases


def load_cases(paths: Sequence[Path]) -> list[EvalCase]:
    """Read eval cases from YAML files and/or directories of ``*.yaml``.

    File format: ``corpus: <source>`` and ``cases: [{id, query, expected: [source_path, ...], kind}]``; a case may
    override ``corpus``. ``expected`` may be a single string.

    Raises:
        EvalFileError: a path is missing, a file is not valid YAML, a case lacks id/query/expected, or two cases
            share an id (the message names file and case).
    """
    out: list[EvalCase] = []
    seen: dict[str, str] = {}
    for path in _case_files(paths):
        for case in _load_file(path):
            if case.id in seen:
                raise EvalFileError(f"{path}: case {case.id!r} is also defined in {seen[case.id]}; ids must be unique")
            seen[case.id] = str(path)
            out.append(case)
    return out


# ---------------------------------------------------------------------------------------------------------------
# metrics (pure)


def first_rank(ranked: Sequence[str], expected: Sequence[str]) -> int | None:
    """1-based rank of the first expected item in ``ranked``, None when absent."""
    wanted = set(expected)
    for i, item in enumerate(ranked, start=1):
        if item in wanted:
            return i
    return None


def hit_at(ranked: Sequence[str], expected: Sequence[str], k: int) -> float:
    """1.0 when an expected item is in the top k, else 0.0."""
    rank = first_rank(ranked[:k], expected)
    return 1.0 if rank is not None else 0.0


def reciprocal_rank(ranked: Sequence[str], expected: Sequence[str], k: int = DEPTH) -> float:
    """1 / rank of the first expected item within the top k, 0.0 when none."""
    rank = first_rank(ranked[:k], expected)
    return 1.0 / rank if rank is not None else 0.0


def ndcg_at(ranked: Sequence[str], expected: Sequence[str], k: int = DEPTH) -> float:
    """Binary-relevance nDCG@k; ideal DCG over min(len(set(expected)), k) relevant items. Repeats count once."""
    wanted = set(expected)
    if not wanted:
        return 0.0
    dcg, seen = 0.0, set()
    for i, item in enumerate(ranked[:k], start=1):
        if item in wanted and item not in seen:
            seen.add(item)
            dcg += 1.0 / math.log2(i + 1)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(wanted), k) + 1))
    return dcg / ideal


def case_metrics(ranked: Sequence[str], expected: Sequence[str]) -> dict[str, float]:
    """All metrics of one case: ``{"hit@1", "hit@3", "mrr@10", "ndcg@10"}``."""
    return {
        "hit@1": hit_at(ranked, expected, 1),
        "hit@3": hit_at(ranked, expected, 3),
        "mrr@10": reciprocal_rank(ranked, expected, DEPTH),
        "ndcg@10": ndcg_at(ranked, expected, DEPTH),
    }


def _aggregate(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    n = len(rows)
    out: dict[str, float] = {"n": n}
    for m in METRICS:
        out[m] = round(sum(r[m] for r in rows) / n, 4) if n else 0.0
    return out


# ---------------------------------------------------------------------------------------------------------------
# run


def run_eval(searcher: PageRanker, cases: Sequence[EvalCase], lanes: Sequence[str] = ("bm25", "vector")
             ) -> dict[str, Any]:
    """Run every case through ``searcher.rank_pages(query, source=case.corpus, lanes, depth=10)``.

    Cases whose corpus is not a source of the warehouse are listed under ``"skipped"`` and not scored.

    Returns:
        ``{"overall": {"n", "hit@1", "hit@3", "mrr@10", "ndcg@10"}, "by_source": {source: {...}},
        "by_kind": {kind: {...}}, "cases": [{"id", "query", "corpus", "kind", "rank", "top", **metrics}],
        "skipped": [{"id", "corpus", "reason"}], "lanes": [...]}``; ``rank`` is the first expected page's rank
        (None beyond 10), ``top`` the first 3 source paths.
    """
    known = set(searcher.sources)
    per_case: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for case in cases:
        if case.corpus not in known:
            skipped.append({"id": case.id, "corpus": case.corpus,
                            "reason": f"source {case.corpus!r} is not in the warehouse"})
            continue
        ranked = [path for _, path, _ in searcher.rank_pages(case.query, source=case.corpus, lanes=lanes,
                                                             depth=DEPTH)]
        metrics = case_metrics(ranked, case.expected)
        per_case.append({
            "id": case.id, "query": case.query, "corpus": case.corpus, "kind": case.kind,
            "rank": first_rank(ranked[:DEPTH], case.expected), "top": ranked[:3], **metrics,
        })
    by_source: dict[str, list[dict[str, Any]]] = {}
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in per_case:
        by_source.setdefault(row["corpus"], []).append(row)
        by_kind.setdefault(row["kind"], []).append(row)
    return {
        "lanes": list(lanes),
        "overall": _aggregate(per_case),
        "by_source": {k: _aggregate(v) for k, v in sorted(by_source.items())},
        "by_kind": {k: _aggregate(v) for k, v in sorted(by_kind.items())},
        "cases": per_case,
        "skipped": skipped,
    }


def format_report(report: dict[str, Any], show_misses: bool = True) -> str:
    """A plain-text table of a :func:`run_eval` report (overall, per source, per kind, misses, skipped)."""
    header = f"{'':<24}{'n':>5}" + "".join(f"{m:>10}" for m in METRICS)
    lines = [f"lanes: {', '.join(report.get('lanes', []))}", header, "-" * len(header)]

    def row(name: str, agg: dict[str, float]) -> str:
        return f"{name[:24]:<24}{int(agg['n']):>5}" + "".join(f"{agg[m]:>10.3f}" for m in METRICS)

    lines.append(row("overall", report["overall"]))
    if report["by_source"]:
        lines.append("")
        lines.extend(row(name, agg) for name, agg in report["by_source"].items())
    if report["by_kind"]:
        lines.append("")
        lines.extend(row(f"kind: {name}", agg) for name, agg in report["by_kind"].items())
    if show_misses:
        misses = [c for c in report["cases"] if c["rank"] is None or c["rank"] > 3]
        if misses:
            lines += ["", f"not in top 3 ({len(misses)}):"]
            for c in misses:
                rank = "-" if c["rank"] is None else str(c["rank"])
                lines.append(f"  {c['id']:<22} rank {rank:>2}  {c['query'][:60]}")
                lines.append(f"  {'':<22} top: {' | '.join(c['top'])}")
    if report.get("skipped"):
        lines += ["", f"skipped ({len(report['skipped'])}, source not in the warehouse):"]
        for s in report["skipped"]:
            lines.append(f"  {s['id']:<22} {s['corpus']}")
    return "\n".join(lines)
