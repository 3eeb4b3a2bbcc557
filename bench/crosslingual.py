"""What the cross-lingual lane and the query translation cost, measured on a built data dir in one run.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/crosslingual.py --data <bench data> [--n 400] [--queries 200]

Build side: a deterministic sample of ``--n`` chunks per model from ``<data>/chunks/*.jsonl`` (each chunk goes to the
model of its note's language, and every chunk to the cross-lingual model, as the embed stage does), embedded by each
model in this process after one warm-up batch; seconds per chunk x the corpus' chunk count per model gives the
embedding seconds of a full build with and without the cross-lingual model, and their ratio. (Fetch, normalize, chunk
and warehouse cost the same either way, so the ratio of whole builds is smaller than this one.)

Search side: the eval questions of ``../shared/evals`` (``--queries`` of them) searched over all sources (unscoped,
the default lanes) with every query vector embedded each time (the searcher's query cache is cleared before every
query) after 10 warm-up queries on other strings: p50 / p95 ms of the hybrid search, of the same search without the
cross-lingual lane, and of the translation alone for the Japanese ones. Prints one table. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DOCSVAULT_SHARED", REPO.parent / "shared")).resolve()
sys.path.insert(0, str(REPO))


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--n", type=int, default=400, help="chunks per model for the speed sample")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()

    from pipeline.common import artifacts
    from pipeline.config import Settings
    from pipeline.evaluate import load_cases
    from pipeline.index.embed import load_embedder
    from pipeline.ingest.sources import load_sources
    from pipeline.search.searcher import Searcher
    from pipeline.search.translate import Translator
    from pipeline.stages import chunk_models

    settings = Settings.from_env(data_dir=args.data)
    by_model: dict[str, list] = {}
    for name in sorted(p.stem for p in settings.chunks_dir.glob("*.jsonl")):
        chunks = artifacts.load_chunks(settings, name)
        sources = [s for s in load_sources(settings.sources_file) if s.name == name] if settings.sources_file.exists() else []
        source = sources[0] if sources else None
        if source is None:
            from pipeline.models import Source
            source = Source(name=name, kind="local")
        for spec, group in chunk_models(settings, source, chunks).items():
            by_model.setdefault(spec, []).extend(group)
    print(f"{'model':<28} {'chunks':>7} {'sample':>6} {'s/chunk':>8} {'full embed s':>12}")
    full: dict[str, float] = {}
    for spec, chunks in sorted(by_model.items()):
        emb = load_embedder(spec)
        step = max(1, len(chunks) // args.n)
        sample = [c.embed_text for c in chunks[::step][: args.n]]
        emb.embed_documents(sample[:8])                                     # warm-up (loads the model)
        t = time.perf_counter()
        for i in range(0, len(sample), 64):
            emb.embed_documents(sample[i:i + 64])
        per = (time.perf_counter() - t) / len(sample)
        full[spec] = per * len(chunks)
        print(f"{spec:<28} {len(chunks):>7} {len(sample):>6} {per:>8.4f} {full[spec]:>12.0f}")
    cross = settings.crosslingual
    with_cross = sum(full.values())
    without = sum(v for k, v in full.items() if k != cross)
    print(f"embedding a full build: {with_cross:.0f} s with the cross-lingual model, {without:.0f} s without "
          f"(x{with_cross / without:.2f})")

    cases = load_cases([SHARED / "evals"])
    step = max(1, len(cases) // args.queries)
    queries = [c.query for c in cases[::step]][: args.queries]
    warm = [f"warm-up question number {i}" for i in range(10)]
    rows = []
    for label, lanes in (("hybrid (default lanes)", None), ("without crosslingual", ("bm25", "bm25_page", "vector"))):
        with Searcher(settings.warehouse_path, query_threads=1) as s:
            for q in warm:
                s.search(q, lanes=lanes)
            times = []
            for q in queries:
                s._qcache.clear()
                s._translations.clear()
                t = time.perf_counter()
                s.search(q, k=10, lanes=lanes)
                times.append((time.perf_counter() - t) * 1000)
            rows.append((label, statistics.median(times), pct(times, 0.95)))
    tr = Translator()
    ja = [q for q in queries if any("\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" for ch in q)]
    tr.translate("ウォームアップ")
    ttimes = []
    for q in ja:
        t = time.perf_counter()
        tr.translate(q + " ")            # a fresh string: nothing memoised per query, words may be
        ttimes.append((time.perf_counter() - t) * 1000)
    print(f"\nunscoped search over {len(queries)} eval questions ({len(ja)} Japanese), query embedded every time:")
    for label, p50, p95 in rows:
        print(f"  {label:<24} p50 {p50:6.1f} ms   p95 {p95:6.1f} ms")
    if ttimes:
        print(f"  {'translation alone':<24} p50 {statistics.median(ttimes):6.1f} ms   p95 {pct(ttimes, 0.95):6.1f} ms")
    print(f"load average: {os.getloadavg()[0]:.1f}; chunks per model: "
          + ", ".join(f"{k}={len(v)}" for k, v in Counter({k: v for k, v in by_model.items()}).items()))


if __name__ == "__main__":
    main()
