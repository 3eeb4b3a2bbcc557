"""Scale of the one-file warehouse: publish time and file size against the number of chunks, search latency against
size, and the memory of the exact vector scan against the HNSW index.

    python bench/scale.py                         # 30k and 100k chunks (a few minutes on 2 cores)
    python bench/scale.py --sizes 30000 100000 300000 --queries 30

Chunks are synthetic but shaped like the real ones: 6 chunks per note, each 80-160 words cut from the project's own
docs and README (their vocabulary and word frequencies), headings and titles likewise; 384-dim vectors clustered by
note topic (a centroid per ~50 notes plus noise, L2-normalised), the shape of MiniLM vectors. Embedding itself is not
measured here (bench/embedders.py does: ~150 chunks/s per core with the int8 model). Every figure comes from
:func:`pipeline.warehouse.publish` and :class:`pipeline.search.searcher.Searcher`, as a build and the search commands use
them. Memory: RSS a fresh process adds by opening the warehouse, then by 20 HNSW queries, or by loading the vectors
into numpy and 20 exact scans (the Searcher's path up to DOCSVAULT_EXACT_MAX_ROWS rows). Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DIM = 384
CHUNKS_PER_NOTE = 6
MODEL_ID = f"hash-{DIM}"        # the query side: load_embedder("hash-384") gives query vectors of the same size


def word_stream() -> list[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))])
    return re.findall(r"[A-Za-z][A-Za-z0-9_'-]+", text)


def synthetic(n_chunks: int, seed: int = 7) -> tuple[list, list, dict, np.ndarray]:
    """(notes, chunks, vectors {model: (ids, float32 (n, DIM))}, topic centroids) for ``n_chunks`` chunks."""
    from pipeline.models import Chunk, Note, stable_id

    rnd = random.Random(seed)
    rng = np.random.default_rng(seed)
    words = word_stream()

    def window(lo: int, hi: int) -> str:
        n = rnd.randint(lo, hi)
        i = rnd.randrange(0, len(words) - n)
        return " ".join(words[i:i + n])

    n_notes = max(1, n_chunks // CHUNKS_PER_NOTE)
    centroids = rng.standard_normal((max(1, n_notes // 50), DIM)).astype(np.float32)
    notes, chunks, ids, vecs = [], [], [], []
    for i in range(n_notes):
        source = f"src{i % 8}"
        title = window(2, 5).title()
        note = Note(source=source, source_path=f"dir{i % 97}/page-{i}.md", rel_path=f"dir{i % 97}/page-{i}.md",
                    title=title, frontmatter={"title": title, "tags": [f"t{i % 40}"]}, body="")
        notes.append(note)
        topic = centroids[i % len(centroids)]
        for j in range(CHUNKS_PER_NOTE if i < n_notes - 1 else n_chunks - CHUNKS_PER_NOTE * (n_notes - 1)):
            heading = (window(1, 4).title(),)
            cid = stable_id(note.note_id, str(j))
            chunks.append(Chunk(chunk_id=cid, note_id=note.note_id, source=source, ordinal=j, heading_path=heading,
                                breadcrumb=f"{title} > {heading[0]}", text=window(80, 160)))
            v = topic + 0.6 * rng.standard_normal(DIM).astype(np.float32)
            ids.append(cid)
            vecs.append(v / np.linalg.norm(v))
    return notes, chunks, {MODEL_ID: (ids, np.stack(vecs).astype(np.float32))}, centroids


MEM_CODE = r"""
import json, resource, sys, numpy as np
sys.path.insert(0, sys.argv[4])
from pipeline import warehouse as wh

def rss():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024

imported = rss()
con = wh.connect(sys.argv[1], read_only=True)
table = wh.list_models(con)[0]["table_name"]
con.execute("SELECT count(*) FROM chunks").fetchone()
opened = rss()
rng = np.random.default_rng(1)
for _ in range(int(sys.argv[3])):
    q = rng.standard_normal(384).astype("float32"); q /= np.linalg.norm(q)
    if sys.argv[2] == "hnsw":
        wh.vector_search(con, table, q, 10)
    else:                       # the Searcher's exact path: all vectors in numpy, one matrix-vector product
        if _ == 0:
            ids, vecs = wh.load_live_vectors(con, table)
        np.argpartition(-(vecs @ q), 10)[:10]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"open_mb": opened - imported, "queries_mb": peak - opened}))
"""


def rss_mb(path: Path, mode: str, n: int = 20) -> dict[str, float]:
    """RSS a fresh process adds by opening the warehouse, and then by ``n`` vector queries (``hnsw`` | ``exact``)."""
    out = subprocess.run([sys.executable, "-c", MEM_CODE, str(path), mode, str(n), str(REPO)], capture_output=True,
                         text=True, check=True, env={"OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def pct(values: list[float], p: int) -> float:
    return round(statistics.quantiles(values, n=100)[p - 1], 1) if len(values) > 1 else round(values[0], 1)


def measure(n: int, root: Path, n_queries: int) -> dict:
    from pipeline import warehouse as wh
    from pipeline.index.analysis import Analyzer
    from pipeline.index.bm25 import PAGE_PREFIX, build_chunk_index, build_page_index
    from pipeline.search.searcher import Searcher

    notes, chunks, vectors, centroids = synthetic(n)
    t, c = time.perf_counter(), time.process_time()
    analyzer = Analyzer()
    blobs = build_chunk_index(chunks, notes, analyzer).to_blobs()
    blobs.update({PAGE_PREFIX + k: v for k, v in build_page_index(chunks, notes, analyzer).to_blobs().items()})
    bm25_s, bm25_cpu = time.perf_counter() - t, time.process_time() - c
    path = root / f"warehouse-{n}.duckdb"
    t, c = time.perf_counter(), time.process_time()
    stats = wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, vectors=vectors, bm25_blobs=blobs,
                                              run_info={"built_at": "bench", "sources": "synthetic"}))
    publish_s, publish_cpu = time.perf_counter() - t, time.process_time() - c
    size_mb = path.stat().st_size / 1e6
    raw_mb = (sum(len(c.text.encode()) for c in chunks) + n * DIM * 4) / 1e6

    rnd = random.Random(11)
    words = word_stream()
    queries = [" ".join(words[i:i + rnd.randint(3, 6)]) for i in (rnd.randrange(len(words) - 8)
                                                                  for _ in range(n_queries))]
    t = time.perf_counter()
    searcher = Searcher(path, query_threads=1)
    searcher.search(queries[0], k=10)
    open_s = time.perf_counter() - t
    hybrid = []
    for q in queries:
        t = time.perf_counter()
        searcher.search(q, k=10)
        hybrid.append((time.perf_counter() - t) * 1000)
    searcher.close()

    con = wh.connect(path, read_only=True)
    table = wh.list_models(con)[0]["table_name"]
    rng = np.random.default_rng(3)
    hnsw, exact, recall = [], [], []
    flat_ids, flat = wh.load_live_vectors(con, table)      # the Searcher's exact path (up to EXACT_MAX_ROWS rows)
    for _ in range(n_queries):      # queries near the data, as real questions are (a topic plus noise)
        q = centroids[rng.integers(len(centroids))] + 0.6 * rng.standard_normal(DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        t = time.perf_counter()
        a = wh.vector_search(con, table, q, 10)
        hnsw.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        scores = flat @ q
        top = np.argpartition(-scores, 10)[:10]
        exact.append((time.perf_counter() - t) * 1000)
        recall.append(len({x for x, _ in a} & {flat_ids[i] for i in top}) / 10)
    con.close()
    mem_hnsw, mem_exact = rss_mb(path, "hnsw"), rss_mb(path, "exact")
    return {
        "chunks": n, "notes": len(notes), "bm25_s": round(bm25_s, 1), "bm25_cpu_s": round(bm25_cpu, 1),
        "publish_s": round(publish_s, 1), "publish_cpu_s": round(publish_cpu, 1),
        "build_cpu_s": round(bm25_cpu + publish_cpu, 1), "size_mb": round(size_mb, 1),
        "raw_text_and_vectors_mb": round(raw_mb, 1), "open_and_first_query_s": round(open_s, 2),
        "hybrid_p50_ms": pct(hybrid, 50), "hybrid_p95_ms": pct(hybrid, 95),
        "hnsw_p50_ms": pct(hnsw, 50), "exact_p50_ms": pct(exact, 50), "hnsw_recall_at_10": round(statistics.mean(recall), 3),
        "rss_open_mb": round(mem_hnsw["open_mb"]), "rss_hnsw_queries_mb": round(mem_hnsw["queries_mb"]),
        "rss_exact_queries_mb": round(mem_exact["queries_mb"]), "publish_mode": stats.get("mode"),
        "load_avg": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[30000, 100000])
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="docsvault-scale-") as tmp:
        for n in args.sizes:
            row = measure(n, Path(tmp), args.queries)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if not args.json:
        cols = ["chunks", "build_cpu_s", "bm25_cpu_s", "publish_cpu_s", "size_mb", "raw_text_and_vectors_mb",
                "hybrid_p50_ms", "hybrid_p95_ms", "hnsw_p50_ms", "exact_p50_ms", "hnsw_recall_at_10", "rss_open_mb",
                "rss_hnsw_queries_mb", "rss_exact_queries_mb", "load_avg"]
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
        for r in rows:
            print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB",
          file=sys.stderr)


if __name__ == "__main__":
    main()
