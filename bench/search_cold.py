"""Cold ``docsvault search`` (a new process per query, as a user runs it): wall seconds, user+sys CPU seconds and
peak RSS, median of N runs, unscoped and scoped, each beside its issue-19 target (cold unscoped ≤ 1.0 s, peak RSS of
a search process ≤ 600 MB) with met/MISSED. Start-up caches (pipeline.index.fastcache) are warmed by one untimed run
first; ``--no-warm`` skips that.

    source /work/benchrun/env.sh
    PYTHONPATH=$PWD python bench/search_cold.py [--runs 3] [--source duckdb] [--query "..."]

Compare two trees in the same run by calling it with each tree on PYTHONPATH, alternating. The child runs with
``python -P`` (no current directory on ``sys.path``), so PYTHONPATH alone picks the tree: without ``-P``,
``python -m`` run from a checkout imports that checkout's ``pipeline`` whatever PYTHONPATH says.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import T_COLD_S, T_SEARCH_RSS_MB, compile_bytecode, verdict


def run_once(args: list[str]) -> tuple[float, float, float]:
    """(wall s, cpu s, peak RSS MB) of one ``python -P -m pipeline.cli search ...`` via GNU time."""
    fmt = "%e %U %S %M"
    proc = subprocess.run(["/usr/bin/time", "-f", fmt, sys.executable, "-P", "-m", "pipeline.cli", "search", *args],
                          check=False, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode != 0:
        raise SystemExit(f"search failed: {proc.stderr[-2000:]}")
    wall, user, sys_, rss = proc.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(sys_), int(rss) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--source", default="duckdb")
    ap.add_argument("--query", default="how to read a parquet file")
    ap.add_argument("--no-warm", action="store_true")
    a = ap.parse_args()
    compile_bytecode(os.environ.copy(), Path.cwd(), ["-P"])      # as installed: the .pyc files exist
    if not a.no_warm:
        run_once([a.query])
    peak = 0.0
    for label, extra in (("unscoped", []), (f"scoped {a.source}", ["--source", a.source])):
        got = [run_once([a.query, *extra]) for _ in range(a.runs)]
        med = [statistics.median(g[i] for g in got) for i in range(3)]
        peak = max(peak, *(g[2] for g in got))
        target = f"  [target ≤ {T_COLD_S} s: {verdict(med[0] <= T_COLD_S)}]" if label == "unscoped" else ""
        print(f"{label:16s} wall {med[0]:.2f} s{target}  cpu {med[1]:.2f} s  peak RSS {med[2]:.0f} MB"
              f"  (median of {a.runs})")
    print(f"{'peak RSS (max)':16s} {peak:.0f} MB  [target ≤ {T_SEARCH_RSS_MB} MB: {verdict(peak <= T_SEARCH_RSS_MB)}]"
          f"  (largest of the {2 * a.runs} timed search processes)")


if __name__ == "__main__":
    main()
