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
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import SHARED, cached_embedder_factory, evaluate_setting, per_case_arrays
from cv import paired_bootstrap

#: the eval kinds asked in English about English pages (issue 13's "English questions")
ENGLISH_KINDS = ("paraphrase", "task", "keyword", "synonym")


def _interval(diff: np.ndarray) -> str:
    mean, lo, hi = paired_bootstrap(diff)
    return f"{mean:+.4f} [{lo:+.4f}, {hi:+.4f}]"


def compare_warehouses(a: Path, b: Path, evals: Sequence[Path], labels: tuple[str, str] = ("A", "B"),
                       slices: bool = True) -> None:
    """Print MRR@10 of ``a`` and ``b`` (default settings) with B − A's paired interval, scoped and unscoped; with
    ``slices`` also the English questions and every kind and corpus (only those that moved when False)."""
    from pipeline.evaluate import load_cases

    cases = load_cases(list(evals))
    factory = cached_embedder_factory()
    ra_all, rb_all = (evaluate_setting(w, cases, {}, factory, scopes=("scoped", "unscoped")) for w in (a, b))
    for scope in ("scoped", "unscoped"):
        ra, rb = per_case_arrays(ra_all[scope])["mrr@10"], per_case_arrays(rb_all[scope])["mrr@10"]
        print(f"{scope}: MRR@10 {labels[0]} {ra.mean():.4f}  {labels[1]} {rb.mean():.4f}  {_interval(rb - ra)}  "
              f"reciprocal rank moved for {int((ra != rb).sum())} of {len(ra)} cases")
        kinds = np.array([c["kind"] for c in ra_all[scope]["cases"]])
        english = np.isin(kinds, ENGLISH_KINDS)
        if english.any():
            print(f"  English questions n={int(english.sum()):3d}  {ra[english].mean():.3f} -> "
                  f"{rb[english].mean():.3f}  {_interval(rb[english] - ra[english])}")
        for key in ("kind", "corpus"):
            values = np.array([c[key] for c in ra_all[scope]["cases"]])
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
