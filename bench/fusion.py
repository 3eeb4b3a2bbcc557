"""Fusion sweep: pooled and per-source MRR@10 of the hybrid search for a grid of fusion settings, on a built
warehouse and eval cases. Every row is the same warehouse and the same cases, one setting changed, so the rows
compare; the first row is the default.

    python bench/fusion.py --data /tmp/bench-data                         # ../shared/evals
    python bench/fusion.py --data data --evals evals/ --grid page_vector  # one grid

Grids: ``page_vector`` (weight of the page-vector cosine in the vector lane), ``page_lane`` (RRF weight of the
``bm25_page`` lane), ``k`` (RRF k), ``lanes`` (each lane alone). Query vectors are embedded once and reused by
every row. ``--unscoped`` searches every case over all sources (as a user does by default) instead of within its
own; a hit must still be the case's page in the case's source. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DOCSVAULT_SHARED", REPO.parent / "shared")).resolve()
sys.path.insert(0, str(REPO))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

GRIDS: dict[str, list[tuple[str, dict]]] = {
    "page_vector": [(f"page_vector_weight={w:g}", {"page_vector_weight": w}) for w in (0.0, 0.3, 0.5, 0.75, 1.5)],
    "page_lane": [("without bm25_page", {"lanes": ("bm25", "vector")})]
    + [(f"bm25_page weight={w:g}", {"weights": {"bm25_page": w}}) for w in (0.25, 1.0)],
    "k": [(f"k_rrf={k:g}", {"k_rrf": k}) for k in (20.0, 40.0, 100.0)],
    "lanes": [(f"{lane} alone", {"lanes": (lane,)}) for lane in ("bm25", "bm25_page", "vector")],
}


class Unscoped:
    """A searcher whose eval searches go over all sources; pages of other sources than the case's are renamed
    ``<source>:<path>`` so that they never count as hits."""

    def __init__(self, searcher) -> None:
        self.s = searcher
        self.sources = searcher.sources
        self.default_lanes = searcher.default_lanes

    def page_paths(self, source: str) -> set[str]:
        return self.s.page_paths(source)

    def rank_pages(self, query, source=None, lanes=None, depth=10):
        rows = self.s.rank_pages(query, None, lanes=lanes, depth=depth)
        return [(n, p if self.s._note_source.get(n) == source else f"{self.s._note_source.get(n)}:{p}", sc)
                for n, p, sc in rows]


def main() -> None:
    from pipeline.embed import load_embedder
    from pipeline.evaluate import load_cases, run_eval
    from pipeline.search import Searcher

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
    embedders: dict[str, object] = {}

    def factory(model_id: str):          # one embedder per model for every searcher (query vectors cached there)
        if model_id not in embedders:
            inner = load_embedder(model_id)
            memo: dict[str, object] = {}

            class Memo:
                model_id, dim = inner.model_id, inner.dim

                def embed_query(self, q: str):
                    if q not in memo:
                        memo[q] = inner.embed_query(q)
                    return memo[q]

            embedders[model_id] = Memo()
        return embedders[model_id]

    rows = [("default", {})] + [r for g in args.grid for r in GRIDS[g]]
    sources: list[str] = []
    print(f"{len(cases)} cases, warehouse {args.data / 'warehouse.duckdb'}"
          + (", each searched over all sources" if args.unscoped else ""))
    for name, kw in rows:
        lanes = kw.pop("lanes", None)
        with Searcher(args.data / "warehouse.duckdb", embedder_factory=factory, **kw) as searcher:
            report = run_eval(Unscoped(searcher) if args.unscoped else searcher, cases, lanes=lanes)
        o = report["overall"]
        if args.foreign:
            with Searcher(args.data / "warehouse.duckdb", embedder_factory=factory, **kw) as searcher:
                others = [c for c in cases if c.corpus != args.foreign]
                counts = {}
                for lane_set in (("vector",), None):
                    counts["vector" if lane_set else "hybrid"] = sum(
                        any(searcher._note_source.get(n) == args.foreign
                            for n, _, _ in searcher.rank_pages(c.query, None, lanes=lane_set, depth=3))
                        for c in others)
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
