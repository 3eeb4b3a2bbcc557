"""Fusion settings learned from pseudo-queries the corpus itself provides, never from eval cases (issue 13, item 5):
does the combination chosen on headings -> their page carry over to real questions?

    python bench/pseudo_fusion.py --data <bench data>                       # ../shared/evals to check on
    python bench/pseudo_fusion.py --data <bench data> --per-source 150 --evals evals/

How:
1. Pseudo-queries from the built warehouse: a section heading (the last part of a chunk's breadcrumb) -> the page it
   heads, kept when it has 3-12 words (Japanese: 6-40 characters), differs from its page's title and heads exactly one
   page of its source (a heading shared by several pages, "Examples", has no single answer); ``--per-source`` of
   them per source, sampled with a fixed seed, one per page.
2. Every pseudo-query and every eval case is searched ONCE per scope (scoped to its source, and over all sources)
   with the default lanes; each candidate page's rank in each lane is kept (``Searcher._fused``: the fused list is
   the union of the lanes' pages).
3. RRF is recomputed from those ranks for every setting of a grid (lane weights x k): ``score = sum w_lane /
   (k + rank)``, ties to the better BM25 rank, as the product fuses. The setting with the best mean MRR@10 over the
   pseudo-queries (scoped and unscoped averaged) is "learned".
4. The learned setting and the default are scored on the eval cases (same recomputation) and compared by a paired
   bootstrap (10,000 resamples): the learned setting never saw an eval case, so its gain is out-of-sample by
   construction.

The recomputation reproduces the product's fused top 10 except where ``_named_first`` (a query that is a page's
name) or the usage boost reorders it; the script prints how many default rankings it reproduced. Not part of
``make test``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import SHARED, cached_embedder_factory
from cv import paired_bootstrap

LANES = ("bm25", "bm25_page", "vector", "crosslingual")
DEPTH = 10
JA = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


def pseudo_cases(warehouse: Path, per_source: int, seed: int) -> list:
    """Heading -> page pseudo-queries (see the module docstring) as :class:`pipeline.models.EvalCase`."""
    from pipeline import warehouse as wh
    from pipeline.models import EvalCase

    con = wh.connect(warehouse, read_only=True)
    try:
        titles = dict(con.execute("SELECT note_id, coalesce(title, '') FROM notes").fetchall())
        paths = dict(con.execute("SELECT note_id, source_path FROM notes").fetchall())
        rows = con.execute("SELECT DISTINCT source, note_id, heading FROM chunks WHERE heading IS NOT NULL "
                           "AND heading <> ''").fetchall()
    finally:
        con.close()
    by_heading: dict[tuple[str, str], set[str]] = {}
    for src, nid, heading in rows:
        by_heading.setdefault((src, heading.strip().casefold()), set()).add(nid)
    cands: dict[str, dict[str, list[str]]] = {}
    for src, nid, heading in rows:
        h = heading.strip()
        size = len(h) if JA.search(h) else len(h.split())
        ok = (6 <= size <= 40) if JA.search(h) else (3 <= size <= 12)
        if not ok or h.casefold() == titles.get(nid, "").strip().casefold():
            continue
        if len(by_heading[(src, h.casefold())]) != 1:
            continue
        cands.setdefault(src, {}).setdefault(nid, []).append(h)
    rng = random.Random(seed)
    out = []
    for src in sorted(cands):
        pages = sorted(cands[src])
        rng.shuffle(pages)
        for nid in pages[:per_source]:
            h = rng.choice(sorted(cands[src][nid]))
            kind = "pseudo-ja" if JA.search(h) else "pseudo-en"
            out.append(EvalCase(id=f"pseudo-{src}-{nid}", corpus=src, query=h, expected=(paths[nid],), kind=kind))
    return out


def lane_ranks(searcher, cases, scope: str) -> list[dict]:
    """Per case: ``{"target": set of note ids, "pages": [(note_id, {lane: rank})]}`` from one default search."""
    out = []
    for case in cases:
        source = case.corpus if scope == "scoped" else None
        with searcher._lock:
            pages, _ = searcher._fused(case.query, source, LANES)
        targets = {nid for nid, path in searcher._note_path.items()
                   if path in case.expected and searcher.note_source(nid) == case.corpus}
        out.append({"target": targets, "pages": [(nid, dict(ranks)) for nid, _, ranks in pages],
                    "default_top": [nid for nid, _, _ in pages[:DEPTH]]})
    return out


class Ranks:
    """One case's candidate pages as arrays: ``inv[k]`` (pages x lanes) of ``1 / (k + rank)`` (0 where a lane did not
    rank the page), ``tie`` the page's position under the product's tie-break (better BM25 rank first, then the
    other lanes, then the note id), ``target`` the indexes of the expected pages."""

    def __init__(self, entry: dict, ks: tuple[float, ...]) -> None:
        far = float(1 << 30)
        pages = entry["pages"]
        r = np.array([[ranks.get(lane, far) for lane in LANES] for _, ranks in pages], dtype=np.float64).reshape(
            -1, len(LANES))
        self.inv = {k: np.where(r < far, 1.0 / (k + r), 0.0) for k in ks}
        keys = [(*row, nid) for row, (nid, _) in zip(r.tolist(), pages)]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        self.tie = np.empty(len(keys), dtype=np.int64)
        self.tie[order] = np.arange(len(keys))
        self.target = np.array([i for i, (nid, _) in enumerate(pages) if nid in entry["target"]], dtype=np.int64)

    def rr(self, k: float, weights: np.ndarray) -> np.ndarray:
        """Reciprocal rank at depth DEPTH of the best expected page, per setting (``weights``: settings x lanes)."""
        if not len(self.target):
            return np.zeros(len(weights))
        s = self.inv[k] @ weights.T                                     # pages x settings
        st = s[self.target]                                             # targets x settings
        above = (s[None, :, :] > st[:, None, :]).sum(axis=1)
        tied = ((s[None, :, :] == st[:, None, :]) & (self.tie[None, :, None] < self.tie[self.target][:, None, None])
                ).sum(axis=1)
        rank = (above + tied + 1).min(axis=0)
        return np.where(rank <= DEPTH, 1.0 / rank, 0.0)


def mrr_matrix(entries: list[Ranks], k: float, weights: np.ndarray) -> np.ndarray:
    """cases x settings reciprocal ranks."""
    return np.stack([e.rr(k, weights) for e in entries]) if entries else np.zeros((0, len(weights)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--evals", type=Path, default=SHARED / "evals")
    ap.add_argument("--per-source", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", type=Path, help="write the lane ranks of every case (JSON) here")
    ap.add_argument("--load", type=Path, help="read the lane ranks saved by --save instead of searching")
    args = ap.parse_args()

    from pipeline.evaluate import load_cases
    from pipeline.search.searcher import DEFAULT_WEIGHTS, K_RRF, Searcher

    warehouse = args.data / "warehouse.duckdb"
    pseudo = pseudo_cases(warehouse, args.per_source, args.seed)
    real = load_cases([args.evals])
    print(f"{len(pseudo)} pseudo-queries ({sum(c.kind == 'pseudo-ja' for c in pseudo)} Japanese), "
          f"{len(real)} eval cases", flush=True)
    if args.load:
        saved = json.loads(args.load.read_text())
        ranks = {tuple(key.split(":")): [{**e, "target": set(e["target"])} for e in v] for key, v in saved.items()}
    else:
        ranks = {}
        searcher = Searcher(warehouse, cached_embedder_factory())
        try:
            for name, cases in (("pseudo", pseudo), ("real", real)):
                for scope in ("scoped", "unscoped"):
                    t = time.perf_counter()
                    ranks[(name, scope)] = lane_ranks(searcher, cases, scope)
                    print(f"  searched {name} {scope}: {time.perf_counter() - t:.0f} s", flush=True)
        finally:
            searcher.close()
    if args.save:
        args.save.write_text(json.dumps({f"{n}:{s}": [{**e, "target": sorted(e["target"])}
                                                      for e in v] for (n, s), v in ranks.items()}))
    ks = (10.0, 20.0, 40.0, 60.0)
    if K_RRF not in ks:
        ks = (*ks, K_RRF)
    arrays = {key: [Ranks(e, ks) for e in v] for key, v in ranks.items()}
    default_w = np.array([[float(DEFAULT_WEIGHTS[lane]) for lane in LANES]])
    weights = np.array(list(itertools.product((0.5, 0.75, 1.0, 1.5, 2.0), (0.0, 0.25, 0.5, 1.0),
                                              (0.5, 0.75, 1.0, 1.5, 2.0), (0.5, 0.75, 1.0, 1.5))))

    def fit(name: str, k: float, w: np.ndarray) -> np.ndarray:
        return np.mean([mrr_matrix(arrays[(name, s)], k, w).mean(axis=0) for s in ("scoped", "unscoped")], axis=0)

    t = time.perf_counter()
    table = [(float(v), k, tuple(float(x) for x in w)) for k in ks for v, w in zip(fit("pseudo", k, weights), weights)]
    table.sort(key=lambda row: -row[0])
    best_v, best_k, best_w = table[0]
    print(f"grid of {len(table)} settings (lane weights {LANES} x k) scored on the pseudo-queries in "
          f"{time.perf_counter() - t:.0f} s")
    print(f"pseudo-queries: default {float(fit('pseudo', K_RRF, default_w)[0]):.3f}; learned {best_v:.3f}: "
          f"weights {best_w}, k {best_k:g}")
    for rank, (v, k, w) in enumerate(table[1:5], start=2):
        print(f"  #{rank}: {v:.3f} weights {w} k {k:g}")
    kinds = sorted({c.kind for c in real})
    for scope in ("scoped", "unscoped"):
        d = mrr_matrix(arrays[("real", scope)], K_RRF, default_w)[:, 0]
        lrn = mrr_matrix(arrays[("real", scope)], best_k, np.array([best_w]))[:, 0]
        product = np.array([next((1.0 / i for i, nid in enumerate(e["default_top"], start=1) if nid in e["target"]),
                                 0.0) for e in ranks[("real", scope)]])
        m, lo, hi = paired_bootstrap(lrn - d)
        print(f"eval cases, {scope}: default {d.mean():.3f} (the product's own fused top {DEPTH}: "
              f"{product.mean():.3f}, {int((product == d).sum())}/{len(d)} cases equal), learned {lrn.mean():.3f}, "
              f"Δ {m:+.3f} [{lo:+.3f}, {hi:+.3f}]")
        for kind in kinds:
            sel = np.array([c.kind == kind for c in real])
            m, lo, hi = paired_bootstrap(lrn[sel] - d[sel])
            print(f"  {kind:14s} n={sel.sum():3d} default {d[sel].mean():.3f} learned {lrn[sel].mean():.3f} "
                  f"Δ {m:+.3f} [{lo:+.3f}, {hi:+.3f}]")


if __name__ == "__main__":
    main()
