"""docsvault benchmark: build the ../shared/corpora trees through git mirrors and print one table of figures with
their targets (issue 6), plus baselines measured on the same data in the same run.

    python bench/run.py                                  # all five corpora, fresh data dir (~15-25 min on 2 cores)
    python bench/run.py --corpora duckdb obsidian-help   # a subset
    python bench/run.py --data /tmp/bench-data           # reuse a data dir: the first run builds it, later runs
                                                         # measure a (no-op) rebuild instead of a full build

Figures: full build wall time and time per stage (summed over sources), embedding chunks/s, no-op rebuild, rebuild
after 5 pages changed (committed to the mirrors), query latency p50/p95 warm in-process for hybrid, BM25 alone and
vector alone over the eval queries, `docsvault search` cold wall time, warehouse size against raw vector + text
bytes, peak RSS of the build, eval hit@3/MRR. Baselines: exact brute-force vector scan vs HNSW (latency, recall@10)
and BM25 re-tokenized and re-indexed per query vs the built index.

Every build is a real `docsvault build` child process (through Dagster) wrapped only to time the stage functions.
Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DOCSVAULT_SHARED", REPO.parent / "shared")).resolve()
ALL = ("obsidian-help", "duckdb", "prefect", "diffusers", "ja-react")
EXTRA = {
    "duckdb": "    site_url: https://duckdb.org/docs/stable\n",
    "prefect": "    site_url: https://docs.prefect.io/v3\n",
    "diffusers": "    site_url: https://huggingface.co/docs/diffusers/main/en\n",
    "ja-react": "    site_url: https://ja.react.dev\n    language: ja\n",
}
STAGES = ("fetch_stage", "normalize_stage", "vault_stage", "chunk_stage", "embed_stage", "graph_stage",
          "warehouse_stage", "search_index_stage", "eval_stage")

# runs `docsvault build` in this child process with the stage functions timed; writes the timings as JSON
WRAPPER = r"""
import json, sys, time
from pipeline import stages as b
timings, metas = {}, {}
for name in %(stages)r:
    f = getattr(b, name)
    def timed(*a, _f=f, _n=name, **k):
        t = time.perf_counter()
        try:
            out = _f(*a, **k)
        finally:
            timings[_n] = timings.get(_n, 0.0) + time.perf_counter() - t
        if _n in ("embed_stage", "warehouse_stage") and isinstance(out, dict):
            metas.setdefault(_n, []).append({k: v for k, v in out.items() if isinstance(v, (int, float, str, bool))})
        return out
    setattr(b, name, timed)
from pipeline.cli import main
sys.argv = ["docsvault", "build"]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
json.dump({"timings": timings, "metas": metas, "code": code}, open(%(out)r, "w"))
sys.exit(code or 0)
"""


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def run_build(env: dict[str, str], work: Path, label: str) -> dict:
    out = work / f"timings-{label}.json"
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run([sys.executable, "-c", WRAPPER % {"stages": STAGES, "out": str(out)}], env=env, cwd=REPO,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"build {label} failed (exit {proc.returncode})")
    data = json.loads(out.read_text())
    data.update(wall=wall, peak_rss_kb=max(rss, before), stdout=proc.stdout)
    print(f"[bench] {label} build: {wall:.1f} s", file=sys.stderr)
    return data


def make_sources(corpora: list[str], mirrors: Path, path: Path) -> None:
    out = subprocess.run([str(SHARED / "tools" / "make-git-mirrors"), str(mirrors), *corpora], check=True,
                         capture_output=True, text=True).stdout
    blocks = out.split("  - name: ")
    text = blocks[0]
    for block in blocks[1:]:
        name = block.split("\n", 1)[0].strip()
        text += "  - name: " + block + EXTRA.get(name, "")
    path.write_text(text)


def change_pages(mirrors: Path, corpora: list[str], work: Path, n: int = 5) -> list[str]:
    """Append a paragraph to n pages (spread over the corpora), committed and pushed to the mirrors."""
    changed: list[str] = []
    per = {c: 0 for c in corpora}
    i = 0
    while sum(per.values()) < n:
        per[corpora[i % len(corpora)]] += 1
        i += 1
    paths = {"obsidian-help": "en", "duckdb": "docs/stable", "prefect": "docs/v3", "diffusers": "docs/source/en",
             "ja-react": "src/content"}
    for corpus, k in per.items():
        if not k:
            continue
        clone = work / f"edit-{corpus}"
        shutil.rmtree(clone, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", str(mirrors / f"{corpus}.git"), str(clone)], check=True)
        files = sorted(p for p in (clone / paths[corpus]).rglob("*") if p.suffix in (".md", ".mdx"))
        stamp = time.strftime("%H%M%S")
        for p in files[len(files) // 3:][:k]:
            p.write_text(p.read_text(encoding="utf-8") + f"\n\nBenchmark edit {stamp}: a changed paragraph about "
                         f"incremental rebuilds of {p.stem}.\n", encoding="utf-8")
            changed.append(f"{corpus}/{p.relative_to(clone)}")
        git = ["git", "-C", str(clone), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        subprocess.run([*git, "commit", "-qam", "bench edit"], check=True)
        subprocess.run([*git, "push", "-q", "origin", "HEAD:main"], check=True)
    return changed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", nargs="+", default=list(ALL), choices=ALL)
    ap.add_argument("--data", type=Path, help="data dir to (re)use; default: a fresh temp dir")
    ap.add_argument("--queries", type=int, default=0, help="at most this many eval queries (0: all)")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    work = Path(tempfile.mkdtemp(prefix="docsvault-bench-"))
    data = (args.data or work / "data").resolve()
    base = data.parent
    reuse = (data / "warehouse.duckdb").exists()
    mirrors = base / "bench-mirrors"
    sources = base / "bench-sources.yaml"
    vault = base / "bench-vault"
    make_sources(args.corpora, mirrors, sources)
    evals = [str(SHARED / "evals" / f"{c}.yaml") for c in args.corpora if (SHARED / "evals" / f"{c}.yaml").exists()]
    env = {**os.environ, "DOCSVAULT_SOURCES": str(sources), "DOCSVAULT_DATA": str(data),
           "DOCSVAULT_VAULT": str(vault), "DOCSVAULT_EVALS": os.pathsep.join(evals),
           "DAGSTER_HOME": str(data / "dagster")}
    os.environ.update({k: env[k] for k in ("DOCSVAULT_SOURCES", "DOCSVAULT_DATA", "DOCSVAULT_VAULT", "DOCSVAULT_EVALS")})

    rows: list[tuple[str, str, str, str]] = []   # figure, measured, target, verdict

    def row(figure: str, measured: str, target: str = "", ok: bool | None = None) -> None:
        rows.append((figure, measured, target, "" if ok is None else ("ok" if ok else "MISSED")))

    full = run_build(env, work, "full" if not reuse else "rebuild-of-reused-dir")
    emb = full["metas"].get("embed_stage", [])
    n_emb = sum(m.get("embedded", 0) for m in emb)
    s_emb = sum(m.get("seconds", 0.0) for m in emb)
    label = "full build" if not reuse else "first build of this run (reused data dir)"
    row(f"{label}, {len(args.corpora)} corpora", f"{full['wall']:.0f} s", "≤ 600 s" if not reuse else "",
        full["wall"] <= 600 if not reuse else None)
    for st in STAGES:
        if st in full["timings"]:
            row(f"  stage {st.replace('_stage', '')}", f"{full['timings'][st]:.1f} s")
    by_model: dict[str, list[float]] = {}
    for m in emb:
        if m.get("embedded"):
            by_model.setdefault(m.get("model", "?"), [0, 0.0])
            by_model[m["model"]][0] += m["embedded"]
            by_model[m["model"]][1] += m["seconds"]
    for model, (n, s) in by_model.items():
        row(f"  embedding {model}", f"{n} chunks, {n / s:.1f} chunks/s" if s else "-")
    if not n_emb:
        row("  embedding", "0 chunks embedded (all cached)")
    row("peak RSS of the build", f"{full['peak_rss_kb'] / 1024 / 1024:.2f} GB", "≤ 2.5 GB",
        full["peak_rss_kb"] / 1024 / 1024 <= 2.5)

    noop = run_build(env, work, "noop")
    n_noop = sum(m.get("embedded", 0) for m in noop["metas"].get("embed_stage", []))
    row("no-op rebuild", f"{noop['wall']:.1f} s ({n_noop} embedded)", "≤ 10 s", noop["wall"] <= 10)

    changed = change_pages(mirrors, args.corpora, work)
    five = run_build(env, work, "5-pages")
    n_five = sum(m.get("embedded", 0) for m in five["metas"].get("embed_stage", []))
    whm = (five["metas"].get("warehouse_stage") or [{}])[-1]
    row("rebuild after 5 pages changed", f"{five['wall']:.1f} s ({n_five} chunks embedded, warehouse "
        f"{whm.get('mode', '?')})", "≤ 15 s", five["wall"] <= 15)
    for st in STAGES:
        if five["timings"].get(st, 0) >= 0.5:
            row(f"  stage {st.replace('_stage', '')}", f"{five['timings'][st]:.1f} s")

    # ---- queries, in process
    import numpy as np

    from pipeline import warehouse as wh
    from pipeline.index.analysis import Analyzer
    from pipeline.index.bm25 import Bm25Index, chunk_token_lists
    from pipeline.config import Settings
    from pipeline.evaluate import load_cases, run_eval
    from pipeline.search.searcher import DEFAULT_LANES, Searcher
    from pipeline.ingest.vault import read_notes
    from pipeline.common import artifacts

    settings = Settings.from_env()
    cases = load_cases([Path(e) for e in evals])
    if args.queries:
        cases = cases[: args.queries]
    queries = [c.query for c in cases]
    searcher = Searcher(settings.warehouse_path)
    for q in queries:                                   # warm: models loaded, lazy indexes built (other strings,
        searcher.search("warm up " + q, k=10)           # so that no timed query finds its vector cached)
    lat: dict[str, list[float]] = {}
    for lanes, name in ((DEFAULT_LANES, "hybrid"), (("bm25",), "BM25"), (("vector",), "vector")):
        ts = []
        for q in queries:
            searcher._qcache.clear()                    # every timed query embeds its text (as a new query does)
            t = time.perf_counter()
            searcher.search(q, k=10, lanes=lanes)
            ts.append((time.perf_counter() - t) * 1000)
        lat[name] = ts
    p50, p95 = pct(lat["hybrid"], 0.5), pct(lat["hybrid"], 0.95)
    row(f"hybrid query p50 / p95 warm ({len(queries)} eval queries)", f"{p50:.1f} / {p95:.1f} ms",
        "≤ 30 / ≤ 80 ms", p50 <= 30 and p95 <= 80)
    for name in ("BM25", "vector"):
        row(f"  {name} alone p50 / p95", f"{pct(lat[name], 0.5):.1f} / {pct(lat[name], 0.95):.1f} ms")
    # scoped to the case's source (as the eval searches): one model's query embedding, the source filter
    scoped: list[float] = []
    for c in cases:
        searcher._qcache.clear()
        t = time.perf_counter()
        searcher.search(c.query, k=10, source=c.corpus)
        scoped.append((time.perf_counter() - t) * 1000)
    row("  hybrid scoped to the case's source p50 / p95", f"{pct(scoped, 0.5):.1f} / {pct(scoped, 0.95):.1f} ms")
    # the vector lane's two k-NN paths through the same Searcher code: exact in-memory scan vs DuckDB HNSW
    hnsw_searcher = Searcher(settings.warehouse_path, exact_max_rows=0)
    lane_t: dict[str, list[float]] = {"exact": [], "hnsw": []}
    agree: list[float] = []
    for c in cases:
        got = {}
        for name, s_ in (("exact", searcher), ("hnsw", hnsw_searcher)):
            t = time.perf_counter()
            got[name] = [p for _, p, _ in s_.rank_pages(c.query, source=c.corpus, lanes=("vector",), depth=10)]
            lane_t[name].append((time.perf_counter() - t) * 1000)
        agree.append(len(set(got["exact"]) & set(got["hnsw"])) / max(1, len(got["exact"])))
    hnsw_searcher.close()
    row("vector lane scoped to a source: exact scan vs HNSW p50", f"{pct(lane_t['exact'], 0.5):.1f} vs "
        f"{pct(lane_t['hnsw'], 0.5):.1f} ms ({pct(lane_t['hnsw'], 0.5) / max(pct(lane_t['exact'], 0.5), 1e-9):.1f}x); "
        f"top-10 pages shared {statistics.mean(agree):.3f}")
    report = run_eval(searcher, cases)
    ov = report["overall"]
    row("eval hit@3 / MRR@10 (hybrid)", f"{ov.get('hit@3', 0):.3f} / {ov.get('mrr@10', 0):.3f} (n={ov.get('n')})")

    # ---- baselines: brute force vs HNSW
    con = searcher._con
    hnsw_t: list[float] = []
    brute_t: list[float] = []
    recalls: list[float] = []
    for model in wh.list_models(con):
        emb_model = searcher.embedder(model["model_id"])
        for q in queries:
            qv = emb_model.embed_query(q)
            t = time.perf_counter()
            a = wh.vector_search(con, model["table_name"], qv, 10)
            hnsw_t.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            ex = wh.brute_force_search(con, model["table_name"], qv, 10)
            brute_t.append((time.perf_counter() - t) * 1000)
            recalls.append(len({c for c, _ in a} & {c for c, _ in ex}) / max(1, len(ex)))
    row("vector k=10: HNSW vs exact brute force p50", f"{pct(hnsw_t, 0.5):.1f} vs {pct(brute_t, 0.5):.1f} ms "
        f"({pct(brute_t, 0.5) / max(pct(hnsw_t, 0.5), 1e-9):.1f}x)")
    row("  HNSW recall@10 vs brute force", f"{statistics.mean(recalls):.3f}" if recalls else "-")

    # ---- baseline: BM25 re-tokenized and re-indexed per query (3 queries) vs the built index
    names = [n for n in args.corpora if (settings.vault_dir / n).is_dir()]
    notes = read_notes(settings.vault_dir, names)
    chunks = [c for n in names for c in artifacts.load_chunks(settings, n)]
    per_query: list[float] = []
    for q in queries[:3]:
        t = time.perf_counter()
        an = Analyzer()
        idx = Bm25Index.build([c.chunk_id for c in chunks], chunk_token_lists(chunks, notes, an))
        idx.search(an.tokens(q), 10)
        per_query.append((time.perf_counter() - t) * 1000)
    built = pct(lat["BM25"], 0.5)
    row("BM25 rebuilt per query vs built index p50", f"{pct(per_query, 0.5) / 1000:.1f} s vs {built:.1f} ms "
        f"({pct(per_query, 0.5) / max(built, 1e-9):.0f}x)")
    searcher.close()

    # ---- cold CLI search
    colds = []
    for q in queries[:3] or ["getting started"]:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pipeline.cli", "search", q, "-k", "5"], env=env, cwd=REPO,
                       capture_output=True, check=True)
        colds.append(time.perf_counter() - t)
    cold = statistics.median(colds)
    row("`docsvault search` cold, end to end (median of 3)", f"{cold:.2f} s", "≤ 2.5 s", cold <= 2.5)

    # ---- size
    con = wh.connect(settings.warehouse_path)
    models = wh.list_models(con)
    vec_bytes = sum(m["n"] * m["dim"] * 4 for m in models)
    text_bytes = con.execute("SELECT coalesce(sum(strlen(text) + strlen(breadcrumb)), 0) FROM chunks").fetchone()[0]
    n_chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    con.close()
    size = settings.warehouse_path.stat().st_size
    limit = 2.5 * vec_bytes + text_bytes
    row(f"warehouse size ({n_chunks} chunks)", f"{size / 1e6:.1f} MB (vectors {vec_bytes / 1e6:.1f} MB + text "
        f"{text_bytes / 1e6:.1f} MB)", f"≤ {limit / 1e6:.1f} MB", size <= limit)

    width = max(len(r[0]) for r in rows)
    mw = max(len(r[1]) for r in rows)
    print(f"\ndocsvault bench — corpora: {', '.join(args.corpora)}; data: {data}; 5 pages changed: {len(changed)}")
    print(f"{'figure':{width}}  {'measured':{mw}}  {'target':14}  verdict")
    print("-" * (width + mw + 28))
    for figure, measured, target, verdict in rows:
        print(f"{figure:{width}}  {measured:{mw}}  {target:14}  {verdict}")
    missed = [r[0].strip() for r in rows if r[3] == "MISSED"]
    print("\nmissed targets: " + (", ".join(missed) if missed else "none"))


if __name__ == "__main__":
    main()
