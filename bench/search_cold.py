"""Cold ``docsvault search`` (a new process per query, as a user runs it): wall seconds, user+sys CPU seconds and
peak RSS, median of N runs, unscoped and scoped. Start-up caches (pipeline.index.fastcache) are warmed by one
untimed run first; ``--no-warm`` skips that.

    source /work/benchrun/env.sh
    PYTHONPATH=$PWD python bench/search_cold.py [--runs 3] [--source duckdb] [--query "..."]

Compare two trees in the same run by calling it with each tree on PYTHONPATH, alternating.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys


def run_once(args: list[str]) -> tuple[float, float, float]:
    """(wall s, cpu s, peak RSS MB) of one ``python -m pipeline.cli search ...`` via GNU time."""
    fmt = "%e %U %S %M"
    proc = subprocess.run(["/usr/bin/time", "-f", fmt, sys.executable, "-m", "pipeline.cli", "search", *args],
                          capture_output=True, text=True, env=os.environ.copy())
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
    if not a.no_warm:
        run_once([a.query])
    for label, extra in (("unscoped", []), (f"scoped {a.source}", ["--source", a.source])):
        got = [run_once([a.query, *extra]) for _ in range(a.runs)]
        med = [statistics.median(g[i] for g in got) for i in range(3)]
        print(f"{label:16s} wall {med[0]:.2f} s  cpu {med[1]:.2f} s  peak RSS {med[2]:.0f} MB  (median of {a.runs})")


if __name__ == "__main__":
    main()
