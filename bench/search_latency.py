"""Warm hybrid search latency with query embedding (every case's query vectors dropped before it is searched),
unscoped and scoped to the case's corpus, over the eval cases; also the process CPU seconds per query. Unscoped p50 /
p95 are printed beside their issue-19 targets (≤ 15 / ≤ 30 ms) with met/MISSED.

    source /work/benchrun/env.sh
    PYTHONPATH=$PWD python bench/search_latency.py            # all cases of $DOCSVAULT_EVALS

Compare two trees in the same run (the machine may be shared): run it with each tree on PYTHONPATH, alternating
(the current directory is put on ``sys.path`` only when PYTHONPATH is unset, so PYTHONPATH picks the tree).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import T_P50_MS, T_P95_MS, verdict


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


def main() -> None:
    from pipeline.config import Settings, eval_paths
    from pipeline.evaluate import load_cases
    from pipeline.service import open_searcher

    s = Settings.from_env()
    cases = load_cases(eval_paths(s))
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else len(cases)
    cases = cases[:limit]
    sr = open_searcher(s)          # as the CLI and the MCP server open it
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
        p50, p95 = pct(ts, .5), pct(ts, .95)
        target = (f"  [target ≤ {T_P50_MS} / ≤ {T_P95_MS} ms: {verdict(p50 <= T_P50_MS and p95 <= T_P95_MS)}]"
                  if label == "unscoped" else "")
        print(f"{label:8s} n {len(ts)} p50 {p50:.1f} p95 {p95:.1f} ms{target}  cpu {cpu:.1f} ms/query")


if __name__ == "__main__":
    if not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, str(Path.cwd()))
    main()
