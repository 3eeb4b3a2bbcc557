"""Fusion sweep: pooled and per-source MRR@10 of the hybrid search for a grid of fusion settings, on a built
warehouse and eval cases. Every row is the same warehouse and the same cases, one setting changed, so the rows
compare; the first row is the default.

    python bench/fusion.py --data /tmp/bench-data                         # ../shared/evals
    python bench/fusion.py --data data --evals evals/ --grid page_vector  # one grid

Grids (``FUSION_GRIDS`` of ``bench/_evalkit.py``): ``page_vector`` (weight of the page-vector cosine in the vector
lane), ``page_lane`` (RRF weight of the ``bm25_page`` lane), ``k`` (RRF k), ``lanes`` (each lane alone). Query
vectors are embedded once and reused by every row. ``--unscoped`` searches every case over all sources (as a user does by default) instead of within its
own; a hit must still be the case's page in the case's source. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import FUSION_GRIDS, SHARED, cached_embedder_factory, evaluate_setting, open_searcher

GRIDS = FUSION_GRIDS


def main() -> None:
    from pipeline.evaluate import load_cases

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="data dir of a build (its warehouse.duckdb)")
    ap.add_argument("--evals", type=Path, nargs="+", default=[SHARED / "evals"])
    ap.add_argument("--grid", choices=sorted(GRIDS), nargs="*", default=sorted(GRIDS))
    ap.add_argument("--unscoped", action="store_true", help="search each case over all sources")
    ap.add_argument("--by", choices=("source", "kind"), default="source", help="MRR columns per source or per kind")
    ap.add_argument("--foreign", metavar="SOURCE",
                    help="also count, per setting, the cases of the other sources whose unscoped top 3 (vector lane "
                         "and hybrid) holds a page of SOURCE (e.g. a Japanese source for English questions)")
    args = ap.parse_args()
    cases = load_cases(args.evals)
    factory = cached_embedder_factory()   # one embedder per model for every searcher (query vectors cached there)
    warehouse = args.data / "warehouse.duckdb"
    scope = "unscoped" if args.unscoped else "scoped"

    rows = [("default", {})] + [r for g in args.grid for r in GRIDS[g]]
    sources: list[str] = []
    print(f"{len(cases)} cases, warehouse {warehouse}" + (", each searched over all sources" if args.unscoped else ""))
    for name, kw in rows:
        report = evaluate_setting(warehouse, cases, kw, factory, scopes=(scope,))[scope]
        o = report["overall"]
        if args.foreign:
            searcher, _ = open_searcher(warehouse, {k: v for k, v in kw.items() if k != "lanes"}, factory)
            try:
                others = [c for c in cases if c.corpus != args.foreign]
                counts = {}
                for lane_set in (("vector",), None):
                    counts["vector" if lane_set else "hybrid"] = sum(
                        any(searcher.note_source(n) == args.foreign
                            for n, _, _ in searcher.rank_pages(c.query, None, lanes=lane_set, depth=3))
                        for c in others)
            finally:
                searcher.close()
            foreign = (f"  {args.foreign} page in the top 3 of other sources' cases: vector {counts['vector']}, "
                       f"hybrid {counts['hybrid']} of {len(others)}")
        else:
            foreign = ""
        if not sources:
            sources = list(report[f"by_{args.by}"])
            print(f"{'setting':28} {'hit@1':>6} {'hit@3':>6} {'MRR':>6}  " + " ".join(f"{s[:12]:>12}" for s in sources))
        per = " ".join(f"{report[f'by_{args.by}'].get(s, {}).get('mrr@10', float('nan')):>12.3f}" for s in sources)
        print(f"{name:28} {o['hit@1']:>6.3f} {o['hit@3']:>6.3f} {o['mrr@10']:>6.3f}  {per}{foreign}", flush=True)


if __name__ == "__main__":
    main()
