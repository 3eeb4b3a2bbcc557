"""What the opt-in usage boost (pipeline/search/usage.py) does to the eval, on a built warehouse.

Scenarios, each scored with the project eval (pooled over the given case files):

- ``off``: no usage log (the default). Must equal the plain eval exactly (checked).
- ``relevant``: the user earlier read the expected note of a random half of the cases (1 read, 2 days ago: hot);
  reported on those "seen" cases and on the other, "unseen" half.
- ``unrelated``: the user read 30 random notes 4 times each in the last week (hot, full frequency), none chosen
  for the cases: what the boost costs when usage has nothing to do with the query.

Usage:
    PYTHONPATH=. .venv/bin/python bench/usage_boost.py --data DIR [--seed 0] evals/ [more case files...]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from pipeline.evaluate import load_cases, run_eval
from pipeline.search.searcher import Searcher
from pipeline.search.usage import USAGE_WEIGHT, boosts


def _mrr(report: dict, ids: set[str] | None = None) -> tuple[int, float, float]:
    rows = [c for c in report["cases"] if ids is None or c["id"] in ids]
    if not rows:
        return 0, 0.0, 0.0
    mrr = sum(1.0 / c["rank"] if c["rank"] else 0.0 for c in rows) / len(rows)
    hit1 = sum(1 for c in rows if c["rank"] == 1) / len(rows)
    return len(rows), hit1, mrr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--data", type=Path, required=True, help="data dir with warehouse.duckdb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=int, default=10, help="Searcher usage_window")
    ap.add_argument("--weight", type=float, nargs="+", default=[USAGE_WEIGHT], help="USAGE_WEIGHT values to try")
    args = ap.parse_args()
    cases = load_cases(args.files)
    wpath = args.data / "warehouse.duckdb"
    now = time.time()
    rnd = random.Random(args.seed)
    with Searcher(wpath, query_threads=1) as s:
        base = run_eval(s, cases)
        vault_of = {(s._note_source[n], p): s._vault_path[n] for n, p in s._note_path.items()}
        all_notes = sorted(s._vault_path.values())
    scored = [c for c in cases if any((c.corpus, e) in vault_of for e in c.expected)]
    seen = {c.id for c in rnd.sample(scored, len(scored) // 2)}
    relevant = {vault_of[(c.corpus, e)]: {"reads": 1, "last": now - 2 * 86400}
                for c in scored if c.id in seen for e in c.expected[:1] if (c.corpus, e) in vault_of}
    expected_paths = {vault_of.get((c.corpus, e)) for c in cases for e in c.expected}
    pool = [p for p in all_notes if p not in expected_paths]
    unrelated = {p: {"reads": 4, "last": now - rnd.uniform(0, 6) * 86400} for p in rnd.sample(pool, min(30, len(pool)))}
    unseen = {c.id for c in scored} - seen
    print(f"cases: {len(cases)} ({len(scored)} scorable); seen half: {len(seen)}; seed {args.seed}")
    print(f"{'weight':>7} {'scenario':10} {'subset':7} {'n':>4} {'hit@1':>6} {'MRR@10':>7}   (plain eval: hit@1 / MRR)")
    for weight in args.weight:
        for name, log in (("off", {}), ("relevant", relevant), ("unrelated", unrelated)):
            with Searcher(wpath, query_threads=1, usage_boost=boosts(log, now=now, weight=weight),
                          usage_window=args.window) as s:
                rep = run_eval(s, cases)
            if name == "off":
                assert [c["rank"] for c in rep["cases"]] == [c["rank"] for c in base["cases"]], "off changed ranks"
            for subset, ids in (("all", None), ("seen", seen), ("unseen", unseen)):
                if name != "relevant" and subset != "all":
                    continue
                n, h1, mrr = _mrr(rep, ids)
                _, bh1, bmrr = _mrr(base, ids)
                print(f"{weight:>7g} {name:10} {subset:7} {n:>4} {h1:>6.3f} {mrr:>7.3f}   ({bh1:.3f} / {bmrr:.3f})")


if __name__ == "__main__":
    main()
