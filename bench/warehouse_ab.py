"""Two warehouses, one eval: the public cases searched with the default settings on warehouse A and on warehouse B
(scoped and unscoped), MRR@10 of each, the paired bootstrap 95% interval of B − A, pooled, over the English
questions (paraphrase, task, keyword, synonym) and per kind and corpus. For a change that makes other vectors or
another index (a model, its precision, a chunking rule): build a copy of the data dir with the change, then compare.

    source <bench data>/env.sh
    PYTHONPATH=$PWD python bench/warehouse_ab.py <data dir A>/warehouse.duckdb <data dir B>/warehouse.duckdb

Each warehouse's queries are embedded by the models its own ``models`` table names (``load_embedder``), so a
warehouse built with ``DOCSVAULT_MODEL=minilm-fp32`` is searched with float32 MiniLM queries.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import SHARED, cached_embedder_factory, evaluate_setting
from cv import paired_bootstrap

#: the eval kinds asked in English about English pages (issue 13's "English questions")
ENGLISH_KINDS = ("paraphrase", "task", "keyword", "synonym")


def _interval(diff: np.ndarray) -> str:
    mean, lo, hi = paired_bootstrap(diff)
    return f"{mean:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def paired_cases(ra: Mapping[str, Any], rb: Mapping[str, Any], metric: str = "mrr@10"
                 ) -> tuple[np.ndarray, np.ndarray, list[Mapping[str, Any]], list[str]]:
    """Per-case ``metric`` of two run_eval reports of the same cases, paired by case id: ``(a values, b values,
    the case rows, ids scored by one report only)``, over the cases both scored, in ``ra``'s order. A case whose
    source one warehouse lacks is skipped there; pairing the reports' case lists by position would then set one
    case's figure against another's (two lists of one length are paired silently: before session 42, a wrong
    interval).
    """
    b_by_id = {c["id"]: c for c in rb["cases"]}
    rows = [c for c in ra["cases"] if c["id"] in b_by_id]
    a_ids = {c["id"] for c in ra["cases"]}
    only = [c["id"] for c in ra["cases"] if c["id"] not in b_by_id] + [i for i in b_by_id if i not in a_ids]
    a = np.array([c[metric] for c in rows], dtype=np.float64)
    b = np.array([b_by_id[c["id"]][metric] for c in rows], dtype=np.float64)
    return a, b, rows, only


def compare_warehouses(a: Path, b: Path, evals: Sequence[Path], labels: tuple[str, str] = ("A", "B"),
                       slices: bool = True) -> None:
    """Print MRR@10 of ``a`` and ``b`` (default settings) with B − A's paired interval, scoped and unscoped; with
    ``slices`` also the English questions and every kind and corpus (only those that moved when False)."""
    from pipeline.evaluate import load_cases

    cases = load_cases(list(evals))
    factory = cached_embedder_factory()
    ra_all, rb_all = (evaluate_setting(w, cases, {}, factory, scopes=("scoped", "unscoped")) for w in (a, b))
    for scope in ("scoped", "unscoped"):
        ra, rb, rows, only = paired_cases(ra_all[scope], rb_all[scope])
        if only:
            print(f"{scope}: {len(only)} case(s) scored on one warehouse only (its source is not in the other), "
                  f"left out: {', '.join(only[:10])}{' …' if len(only) > 10 else ''}")
        if not rows:
            print(f"{scope}: no case scored on both warehouses")
            continue
        print(f"{scope}: MRR@10 {labels[0]} {ra.mean():.4f}  {labels[1]} {rb.mean():.4f}  {_interval(rb - ra)}  "
              f"reciprocal rank moved for {int((ra != rb).sum())} of {len(ra)} cases")
        kinds = np.array([c["kind"] for c in rows])
        english = np.isin(kinds, ENGLISH_KINDS)
        if english.any():
            print(f"  English questions n={int(english.sum()):3d}  {ra[english].mean():.3f} -> "
                  f"{rb[english].mean():.3f}  {_interval(rb[english] - ra[english])}")
        for key in ("kind", "corpus"):
            values = np.array([c[key] for c in rows])
            for value in sorted(set(values)):
                m = values == value
                if slices or (ra[m] != rb[m]).any():
                    print(f"  {key} {value:14s} n={int(m.sum()):3d}  {ra[m].mean():.3f} -> {rb[m].mean():.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="warehouse A (the baseline)")
    ap.add_argument("b", type=Path, help="warehouse B (the change)")
    ap.add_argument("--evals", type=Path, nargs="+", default=[SHARED / "evals"])
    args = ap.parse_args()
    compare_warehouses(args.a, args.b, args.evals)


if __name__ == "__main__":
    main()
