"""Dump the top-10 ranking of every eval case (scoped and unscoped) to JSON, or compare two dumps.

Used to prove that a speed change leaves every ranking identical (bench warehouse, read-only).

    source /work/benchrun/env.sh
    PYTHONPATH=$PWD python bench/rank_dump.py dump out.json [--full]  # all cases of $DOCSVAULT_EVALS; --full: also
                                                                        # each hit's title, heading, snippets
    PYTHONPATH=$PWD python bench/rank_dump.py compare a.json b.json

A dump: ``{"<case index> <scoped|unscoped>": [[vault_path, chunk_id, rank], ...]}``. ``compare`` prints every key
whose list differs and exits 1 when any does.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def dump(out: Path, full: bool = False) -> None:
    from pipeline.config import Settings, eval_paths
    from pipeline.evaluate import load_cases
    from pipeline.search.searcher import Searcher

    s = Settings.from_env()
    cases = load_cases(eval_paths(s))
    t0 = time.perf_counter()
    sr = Searcher(s.warehouse_path, query_threads=1)
    res: dict[str, list] = {}
    for i, c in enumerate(cases):
        for label, src in (("unscoped", None), ("scoped", c.corpus)):
            hits = sr.search(c.query, k=10, source=src)
            res[f"{i} {label}"] = [[h.vault_path, h.chunk_id, h.rank] for h in hits]
            if full:        # what a user sees of each hit, too
                res[f"{i} {label} shown"] = [[h.title, h.heading, h.snippet, h.context, h.source_path]
                                             for h in hits]
    out.write_text(json.dumps(res, ensure_ascii=False, indent=0))
    print(f"{len(cases)} cases, {len(res)} rankings in {time.perf_counter() - t0:.1f} s -> {out}")


def compare(a: Path, b: Path) -> int:
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    bad = [k for k in sorted(set(da) | set(db)) if da.get(k) != db.get(k)]
    for k in bad:
        print("DIFF", k, "\n  a:", da.get(k), "\n  b:", db.get(k))
    print(f"{len(da)} vs {len(db)} rankings, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(Path(sys.argv[2]), full="--full" in sys.argv)
    else:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
