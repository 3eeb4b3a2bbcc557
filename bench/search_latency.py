"""Warm hybrid search latency with query embedding (every case's query vectors dropped before it is searched),
unscoped and scoped to the case's corpus, over the eval cases; also the process CPU seconds per query.

    source /work/benchrun/env.sh
    PYTHONPATH=$PWD python bench/search_latency.py            # all cases of $DOCSVAULT_EVALS

Compare two trees in the same run (the machine may be shared): run it with each tree on PYTHONPATH, alternating.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


def main() -> None:
    from pipeline.config import Settings, eval_paths
    from pipeline.evaluate import load_cases
    from pipeline.search.searcher import Searcher

    s = Settings.from_env()
    cases = load_cases(eval_paths(s))
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else len(cases)
    cases = cases[:limit]
    sr = Searcher(s.warehouse_path, query_threads=1)
    for c in cases[:30]:
        sr.search("warm " + c.query, k=10)
    for label, scoped in (("unscoped", False), ("scoped", True)):
        ts, cpu0 = [], time.process_time()
        for c in cases:
            sr._qcache.clear()
            t = time.perf_counter()
            sr.search(c.query, k=10, source=c.corpus if scoped else None)
            ts.append(1000 * (time.perf_counter() - t))
        cpu = 1000 * (time.process_time() - cpu0) / len(cases)
        print(f"{label:8s} n {len(ts)} p50 {pct(ts, .5):.1f} p95 {pct(ts, .95):.1f} ms  cpu {cpu:.1f} ms/query")


if __name__ == "__main__":
    sys.path.insert(0, str(Path.cwd()))
    main()
