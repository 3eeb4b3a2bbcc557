"""Paired A/B warm search latency of two source trees on a shared machine: one worker process per tree, each query
sent to both back to back (order alternating), so both see the same load. Every query is embedded (the query-vector
cache is cleared first). Prints p50/p95 per tree and the median of the per-query ratio B/A, unscoped and scoped.

    source /work/benchrun/env.sh
    python bench/search_ab.py /path/to/tree_A /path/to/tree_B [n_cases]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

WORKER = r'''
import json, sys, time
from pipeline.config import Settings, eval_paths
from pipeline.evaluate import load_cases
from pipeline.search.searcher import Searcher
s = Settings.from_env()
cases = load_cases(eval_paths(s))
sr = Searcher(s.warehouse_path, query_threads=1)
for c in cases[:30]:
    sr.search("warm " + c.query, k=10)
print(json.dumps(len(cases)), flush=True)
for line in sys.stdin:
    i, scoped = json.loads(line)
    c = cases[i]
    sr._qcache.clear()
    t0, c0 = time.perf_counter(), time.process_time()
    sr.search(c.query, k=10, source=c.corpus if scoped else None)
    print(json.dumps([1000 * (time.perf_counter() - t0), 1000 * (time.process_time() - c0)]), flush=True)
'''


def pct(v: list[float], p: float) -> float:
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


def main() -> None:
    trees = sys.argv[1:3]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], cwd=t, env={**os.environ, "PYTHONPATH": t},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for t in trees]
    n = min(json.loads(p.stdout.readline()) for p in procs)
    n = min(n, int(sys.argv[3])) if len(sys.argv) > 3 else n
    for scoped in (False, True):
        wall: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        for i in range(n):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for k in order:
                procs[k].stdin.write(json.dumps([i, scoped]) + "\n")
                procs[k].stdin.flush()
                w, c = json.loads(procs[k].stdout.readline())
                wall[k].append(w)
                cpu[k].append(c)
        label = "scoped" if scoped else "unscoped"
        for k, t in enumerate(trees):
            print(f"{label:8s} {t}: p50 {pct(wall[k], .5):.1f} p95 {pct(wall[k], .95):.1f} ms, "
                  f"process CPU (all threads) p50 {pct(cpu[k], .5):.1f} ms (n {n})")
        ratio = [b / a for a, b in zip(wall[0], wall[1]) if a > 0]
        print(f"{label:8s} per-query wall ratio B/A: median {statistics.median(ratio):.2f}")
    for p in procs:
        p.stdin.close()
        p.wait()


if __name__ == "__main__":
    main()
