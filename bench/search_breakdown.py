"""Where a search's time goes: per-stage timers of one cold search process, or of warm queries over the eval cases.

    source /work/benchrun/env.sh
    PYTHONPATH=$PWD python bench/search_breakdown.py cold ["query"] [--source NAME]   # one fresh process
    PYTHONPATH=$PWD python bench/search_breakdown.py warm [N]                          # N eval cases, unscoped

Stages are wall milliseconds, inclusive (a stage that calls another counts it too); the wrapped functions are listed
in ``STAGES``. Query embedding is timed per model on the embedder's ``embed_query`` (warm: every case's query vectors
are dropped first, as bench/search_latency.py does). Measuring only: nothing is written.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

T0 = time.perf_counter()
TOTALS: dict[str, float] = defaultdict(float)
COUNTS: dict[str, int] = defaultdict(int)

#: (module, class or "", attribute, label)
STAGES = [
    ("pipeline.search.searcher", "Searcher", "_load_keys", "init: chunk/note keys + graph"),
    ("pipeline.search.searcher", "Searcher", "_compute_graph", "init: graph (when not cached)"),
    ("pipeline.search.searcher", "Searcher", "_load_indexes", "init: BM25 indexes + models"),
    ("pipeline.search.searcher", "Searcher", "__init__", "init: Searcher total"),
    ("pipeline.search.searcher", "Searcher", "embedder", "embedder objects (factory)"),
    ("pipeline.search.searcher", "Searcher", "_start_model_pages", "start the models' threads"),
    ("pipeline.search.searcher", "Searcher", "_bm25_lane", "lane bm25 (chunks)"),
    ("pipeline.search.searcher", "Searcher", "_bm25_page_lane", "lane bm25_page"),
    ("pipeline.search.searcher", "Searcher", "_bm25_query", "bm25 query terms (+translation)"),
    ("pipeline.search.searcher", "Searcher", "_vector_plan", "vector plan"),
    ("pipeline.search.searcher", "Searcher", "_vector_lane", "lane vector+crosslingual (incl. embedding)"),
    ("pipeline.search.searcher", "Searcher", "_flat", "vectors: exact-scan arrays (first use loads)"),
    ("pipeline.search.searcher", "Searcher", "_exact_knn", "vectors: exact kNN"),
    ("pipeline.search.searcher", "Searcher", "_hnsw_knn", "vectors: HNSW kNN"),
    ("pipeline.search.searcher", "Searcher", "_page_vectors", "page vectors (first use builds)"),
    ("pipeline.search.searcher", "Searcher", "_with_page_vectors", "page-vector rescoring"),
    ("pipeline.search.searcher", "Searcher", "_background", "z-score background"),
    ("pipeline.search.searcher", "", "page_ranking", "page_ranking (chunks -> pages)"),
    ("pipeline.search.searcher", "Searcher", "_lane_pages", "all lanes"),
    ("pipeline.search.searcher", "Searcher", "_named_first", "named-first (title match)"),
    ("pipeline.search.searcher", "Searcher", "_fused", "lanes + fusion"),
    ("pipeline.search.searcher", "Searcher", "_chunk_rows", "hit rows (DB / cache)"),
    ("pipeline.search.searcher", "", "make_snippet", "snippets"),
    ("pipeline.search.searcher", "Searcher", "search", "search total"),
]


def _wrap(owner: object, attr: str, label: str) -> None:
    fn = getattr(owner, attr)

    def timed(*a, **kw):
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            TOTALS[label] += time.perf_counter() - t
            COUNTS[label] += 1

    setattr(owner, attr, timed)


def _wrap_embedders() -> None:
    """Time every embedder's ``embed_query`` per model class (wraps the classes the registry can build)."""
    from pipeline.index import embed

    classes = [embed.E5Embedder, embed.UsemEmbedder, embed.SentenceTransformerEmbedder]
    try:
        from pipeline.index.onnx_embed import OnnxEmbedder
        classes.append(OnnxEmbedder)
    except ImportError:
        pass
    for cls in classes:
        if "embed_query" in vars(cls):
            _wrap(cls, "embed_query", f"embed_query {cls.__name__}")


def install() -> None:
    import importlib

    for mod, cls, attr, label in STAGES:
        m = importlib.import_module(mod)
        _wrap(getattr(m, cls) if cls else m, attr, label)
    _wrap_embedders()


def report(n: int, title: str) -> None:
    print(title)
    for label, total in sorted(TOTALS.items(), key=lambda kv: -kv[1]):
        print(f"  {label:48s} {1000 * total / n:9.1f} ms  ({COUNTS[label] / n:.1f} calls)")


def cold(query: str, source: str | None) -> None:
    t_imp = time.perf_counter()
    import pipeline.search.searcher  # noqa: F401
    from pipeline.config import Settings
    from pipeline.service import open_searcher
    imports = time.perf_counter() - t_imp
    install()
    t = time.perf_counter()
    sr = open_searcher(Settings.from_env())
    opened = time.perf_counter() - t
    t = time.perf_counter()
    hits = sr.search(query, k=10, source=source)
    searched = time.perf_counter() - t
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"process start -> script {1000 * (t_imp - T0):.0f} ms; imports (searcher, service) {1000 * imports:.0f} ms;"
          f" open_searcher {1000 * opened:.0f} ms; first search {1000 * searched:.0f} ms; {len(hits)} hits;"
          f" peak RSS {rss:.0f} MB; total {1000 * (time.perf_counter() - T0):.0f} ms")
    report(1, "stages (ms, one cold process):")


def warm(limit: int) -> None:
    from pipeline.config import Settings, eval_paths
    from pipeline.evaluate import load_cases
    from pipeline.search.searcher import Searcher

    s = Settings.from_env()
    cases = load_cases(eval_paths(s))[:limit]
    sr = Searcher(s.warehouse_path, query_threads=1)
    for c in cases[:30]:
        sr.search("warm " + c.query, k=10)
    install()
    TOTALS.clear()
    COUNTS.clear()
    for c in cases:
        sr._qcache.clear()
        sr.search(c.query, k=10)
    report(len(cases), f"stages (ms per query, mean over {len(cases)} warm unscoped queries):")


if __name__ == "__main__":
    if not os.environ.get("PYTHONPATH"):     # PYTHONPATH picks the tree to measure
        sys.path.insert(0, str(Path.cwd()))
    args = sys.argv[1:]
    if args and args[0] == "warm":
        warm(int(args[1]) if len(args) > 1 else 50)
    else:
        src = args[args.index("--source") + 1] if "--source" in args else None
        query = args[1] if len(args) > 1 and not args[1].startswith("--") else "how to read a parquet file"
        cold(query, src)
