"""Per-source chains in parallel under Dagster's multiprocess executor, against an in-process `docsvault build`.

    python bench/dagster_parallel.py                    # three small sources from ../shared/corpora, 40 pages each
    python bench/dagster_parallel.py --pages 80 --model hash

Builds the same three local sources twice, each in a fresh data dir:

1. ``dagster asset materialize -m pipeline.definitions --select '*'`` (the CI command) with the project's executor
   in multiprocess mode (run config; the default is in-process since session 26), the project's dagster.yaml with
   its pools, then reads the run's event log: each
   step's start and end, each source's chain span (its first step's start to its last step's end) and step time
   (the sum of its five steps), and the wall time from the first per-source step's start to the last one's end.
   The chains overlap when that wall time is below the sum of the spans; it beats a sequential build only when it
   is also below the sum of the step times (on a machine with idle cores: each step is a new process).
2. ``docsvault build`` (in-process executor), then compares the two warehouses: notes, chunks (id + text hash),
   links and every model's vectors (ids equal, max abs difference).

Prints one table; exit 1 when the warehouses differ. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DOCSVAULT_SHARED", REPO.parent / "shared")).resolve()
CORPORA = ("obsidian-help", "duckdb", "diffusers")


def make_sources(work: Path, pages: int) -> Path:
    """Three local sources of ``pages`` Markdown files each (the first ones in path order) -> sources.yaml."""
    lines = ["sources:"]
    for name in CORPORA:
        root = SHARED / "corpora" / name
        files = sorted(p for p in root.rglob("*.md") if p.is_file())[:pages]
        if not files:
            raise SystemExit(f"no Markdown files under {root} (set DOCSVAULT_SHARED to the shared folder)")
        dest = work / "src" / name
        for p in files:
            target = dest / p.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
        lines += [f"  - name: {name}", "    kind: local", f"    path: {dest}", "    format: markdown"]
    (work / "sources.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return work / "sources.yaml"


def env_for(work: Path, label: str, model: str) -> dict[str, str]:
    home = work / label / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    return {**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_HOME": str(home),
            "DOCSVAULT_SOURCES": str(work / "sources.yaml"), "DOCSVAULT_DATA": str(work / label / "data"),
            "DOCSVAULT_VAULT": str(work / label / "vault"), "DOCSVAULT_EVALS": str(work / "no-evals"),
            "DOCSVAULT_MODEL": model, "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def step_times(home: Path) -> dict[str, tuple[float, float]]:
    """step key -> (start, end) timestamps of the last run in the instance at ``home``."""
    os.environ["DAGSTER_HOME"] = str(home)
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs(limit=1)
        out: dict[str, list[float]] = {}
        for rec in instance.all_logs(run.run_id):
            ev = rec.dagster_event
            if ev is None or not ev.step_key:
                continue
            if ev.event_type_value == "STEP_START":
                out.setdefault(ev.step_key, [rec.timestamp, rec.timestamp])[0] = rec.timestamp
            elif ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
                out.setdefault(ev.step_key, [rec.timestamp, rec.timestamp])[1] = rec.timestamp
    return {k: (v[0], v[1]) for k, v in out.items()}


def warehouse_digest(path: Path) -> dict[str, object]:
    """What two builds of the same sources must agree on: rows of notes/chunks/links and the vectors."""
    import numpy as np

    from pipeline.warehouse import connect, list_models, load_live_vectors

    con = connect(path, read_only=True)
    try:
        out: dict[str, object] = {
            "notes": sorted(con.table("notes").project("note_id, source, title").fetchall()),
            "chunks": sorted(con.table("chunks").project("chunk_id, text_hash").fetchall()),
            "links": sorted(con.table("links").project("src, target, kind").fetchall(), key=repr),
        }
        for m in list_models(con):
            ids, vecs = load_live_vectors(con, m["table_name"])
            order = np.argsort(np.asarray(ids))
            out[f"vectors:{m['model_id']}"] = (sorted(ids), np.asarray(vecs)[order])
    finally:
        con.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=40, help="Markdown pages per source (default 40)")
    ap.add_argument("--model", default=os.environ.get("DOCSVAULT_MODEL", "all-MiniLM-L6-v2"))
    ap.add_argument("--work", type=Path, help="work folder (default: a temp folder, removed afterwards)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="docsvault-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    try:
        make_sources(work, args.pages)
        mp_env = env_for(work, "multiprocess", args.model)
        t = time.perf_counter()
        multiprocess = '{"execution": {"config": {"multiprocess": {"max_concurrent": 4}}}}'
        mp = subprocess.run([str(bin_dir / "dagster"), "asset", "materialize", "-m", "pipeline.definitions",
                             "--select", "*", "--config-json", multiprocess], env=mp_env, cwd=REPO,
                            capture_output=True, text=True)
        mp_wall = time.perf_counter() - t
        if mp.returncode != 0:
            print(mp.stderr[-3000:], file=sys.stderr)
            return 1
        steps = step_times(Path(mp_env["DAGSTER_HOME"]))

        ip_env = env_for(work, "in_process", args.model)
        t = time.perf_counter()
        ip = subprocess.run([sys.executable, "-m", "pipeline.cli", "build"], env=ip_env, cwd=REPO,
                            capture_output=True, text=True)
        ip_wall = time.perf_counter() - t
        if ip.returncode != 0:
            print(ip.stdout[-2000:], ip.stderr[-3000:], file=sys.stderr)
            return 1

        from pipeline.defs.assets import source_slug

        print(f"{'source':16} {'steps s (sum of 5)':>19} {'first start':>12} {'last end':>9} {'span s':>7}")
        per_source = [k for k in steps if "__" in k]
        t0 = min(steps[k][0] for k in per_source)
        busy, spans = {}, {}
        for name in CORPORA:
            mine = [k for k in per_source if k.startswith(source_slug(name) + "__")]
            busy[name] = sum(steps[k][1] - steps[k][0] for k in mine)
            first, last = min(steps[k][0] for k in mine) - t0, max(steps[k][1] for k in mine) - t0
            spans[name] = last - first
            print(f"{name:16} {busy[name]:19.1f} {first:12.1f} {last:9.1f} {spans[name]:7.1f}")
        wall = max(steps[k][1] for k in per_source) - t0
        print(f"per-source phase wall time {wall:.1f} s; sum of chain spans {sum(spans.values()):.1f} s "
              f"({'the chains overlap' if wall < sum(spans.values()) else 'the chains ran one after another'}); "
              f"sum of step times {sum(busy.values()):.1f} s (without process start-up between steps)")
        for k in ("link_graph", "warehouse", "retrieval_eval"):
            if k in steps:
                print(f"{k:16} {steps[k][1] - steps[k][0]:26.1f}")
        print(f"dagster asset materialize (multiprocess) wall {mp_wall:.1f} s; docsvault build (in-process) wall "
              f"{ip_wall:.1f} s")

        import numpy as np

        a = warehouse_digest(work / "multiprocess" / "data" / "warehouse.duckdb")
        b = warehouse_digest(work / "in_process" / "data" / "warehouse.duckdb")
        same = a.keys() == b.keys()
        for k in a:
            if k.startswith("vectors:"):
                ids_equal = a[k][0] == b[k][0]
                diff = float(np.max(np.abs(a[k][1] - b[k][1]))) if ids_equal and len(a[k][0]) else 0.0
                print(f"{k}: ids {'equal' if ids_equal else 'DIFFER'} ({len(a[k][0])}), max abs diff {diff:.2e}")
                same = same and ids_equal and diff < 1e-5
            else:
                print(f"{k}: {'equal' if a[k] == b.get(k) else 'DIFFER'} ({len(a[k])} rows)")
                same = same and a[k] == b.get(k)
        print(f"warehouses {'identical' if same else 'DIFFER'}")
        return 0 if same else 1
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
