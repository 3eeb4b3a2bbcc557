"""A full build of the five corpora against an earlier commit's, same machine, same run (issue 13's cost target:
"a full build of the five corpora at most 30 % slower than today's", today = 2d6f27a when the issue was filed).

    python bench/build_vs_baseline.py                          # 2d6f27a, then this tree; ~30-40 min on 2 cores
    python bench/build_vs_baseline.py --rounds 2               # baseline, this tree, this tree, baseline (drift)
    python bench/build_vs_baseline.py --corpora obsidian-help --pages 40   # a quick check of the script itself

Each build is a real `docsvault build` (``python -m pipeline.cli build``) of a fresh data dir, fresh vault and
fresh caches (``XDG_CACHE_HOME``: the ONNX exports and search caches a new user's first build makes), from the same
git mirrors of ``../shared/corpora``, with the same eval files. The baseline runs from a ``git worktree`` of its
commit on this interpreter, with the ja-react source configured ``language: ja`` as the issue's baseline was (that
commit did not detect the language; without it ja-react would go to MiniLM, a cheaper and worse build). This tree
gets no ``language:`` key (detected). Printed: wall time and peak memory per build (the process tree's summed PSS or
its largest process's ``ru_maxrss``, as in ``bench/run.py``), the ratio of this tree's to the baseline's (mean over
rounds), the target (<= 1.30) and the load average around each build.

What the baseline needs beyond this project's dependencies: ``bm25s`` (a dev dependency here) and DuckDB's ``fts``
extension, which 2d6f27a loaded and this project no longer installs. The script fetches the extension's wheel with
pip (the pin named in the baseline's ``pyproject.toml``) and puts a copy of the installed ``duckdb_ext`` package
plus that extension first on the baseline's ``PYTHONPATH`` -- nothing is installed into the environment. Not part of
`make test`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import compile_bytecode, run_child
from run import ALL, REPO, build_env, eval_files, log, make_sources

T_RATIO = 1.30
DEFAULT_BASELINE = "2d6f27a"
#: what the baseline's sources file adds to a corpus's block (its configuration when the issue measured it)
BASELINE_EXTRA = {"ja-react": "    language: ja\n"}


def baseline_sources(text: str, extra: dict[str, str] = BASELINE_EXTRA) -> str:
    """``text`` (a sources.yaml of ``  - name:`` blocks with 4-space keys) with ``extra[name]`` appended to the block
    of each source named in ``extra``."""
    for name, more in extra.items():
        text = re.sub(rf"(  - name: {re.escape(name)}\n(?:    .*\n)*)", lambda m, more=more: m.group(1) + more, text)
    return text


def baseline_site(tree: Path, work: Path) -> Path | None:
    """A folder to put first on the baseline's ``PYTHONPATH`` when its ``pyproject.toml`` pins ``duckdb-ext-fts``:
    a copy of the installed ``duckdb_ext`` package with the ``fts`` extension of that pin added. None when the
    baseline does not need it.

    Raises:
        SystemExit: pip could not fetch the wheel (no package index reachable), in one line.
    """
    pins = re.findall(r'"duckdb-ext-fts==([^"]+)"', (tree / "pyproject.toml").read_text(encoding="utf-8"))
    if not pins:
        return None
    import duckdb_ext

    site = work / "baseline-site"
    if (site / "duckdb_ext").exists():
        return site
    wheels = work / "wheels"
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                          f"duckdb-ext-fts=={pins[0]}"], check=False, capture_output=True, text=True)
    found = sorted(wheels.glob("duckdb_ext_fts-*.whl")) if wheels.is_dir() else []
    if got.returncode != 0 or not found:
        raise SystemExit(f"error: could not fetch duckdb-ext-fts=={pins[0]} for the baseline with pip "
                         f"({(got.stderr.strip().splitlines() or ['no wheel'])[-1]}); the baseline loads DuckDB's "
                         "fts extension")
    shutil.copytree(Path(duckdb_ext.__file__).parent, site / "duckdb_ext",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with zipfile.ZipFile(found[0]) as wheel:
        for name in wheel.namelist():
            if name.startswith("duckdb_ext/extensions/") and name.endswith(".duckdb_extension"):
                target = site / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(wheel.read(name))
    return site


def one_build(label: str, tree: Path, work: Path, sources: Path, evals: list[str], extra_path: Path | None) -> dict:
    """A fresh `docsvault build` of ``sources`` by the code in ``tree``: {"wall" s, "memory_kb", "load" before/after}.

    Raises:
        SystemExit: the build failed (its last output line in the message).
    """
    run = work / label
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    env = build_env(sources, run / "data", run / "vault", evals, [tree, *([extra_path] if extra_path else [])])
    env["XDG_CACHE_HOME"] = str(run / "cache")
    for var in ("DOCSVAULT_ONNX_CACHE", "DOCSVAULT_SEARCH_CACHE"):     # fresh caches, as a new user's first build
        env.pop(var, None)
    (run / "data" / "dagster").mkdir(parents=True)
    compile_bytecode(env, tree)
    load = os.getloadavg()[0]
    log(f"{label}: building (load average {load:.1f})")
    child = run_child([sys.executable, "-m", "pipeline.cli", "build"], env, tree, run)
    if child.returncode != 0:
        tail = [ln for ln in (child.stdout + "\n" + child.stderr).splitlines() if ln.strip()]
        print("\n".join(tail[-20:]), file=sys.stderr)
        raise SystemExit(f"error: the {label} build exited {child.returncode}: {tail[-1] if tail else 'no output'}")
    after = os.getloadavg()[0]
    log(f"{label}: {child.wall:.0f} s, peak memory {child.memory_kb / 1024:.0f} MB (load average {after:.1f})")
    return {"wall": child.wall, "memory_kb": child.memory_kb, "load": (load, after)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help=f"commit to compare with (default {DEFAULT_BASELINE})")
    ap.add_argument("--corpora", nargs="+", default=list(ALL), choices=ALL)
    ap.add_argument("--pages", type=int, default=0, help="only each corpus's first N pages (0: all)")
    ap.add_argument("--rounds", type=int, default=1, help="1: baseline, this tree; 2: then this tree, baseline")
    ap.add_argument("--work", type=Path, help="work dir (default: a fresh temp dir; removed only by you)")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    work = (args.work or Path(tempfile.mkdtemp(prefix="docsvault-vs-baseline-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    tree = work / "baseline-tree"
    if not tree.exists():
        made = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(tree), args.baseline],
                              check=False, capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"error: git worktree of {args.baseline}: {made.stderr.strip().splitlines()[-1]}")
    site = baseline_site(tree, work)
    mirrors = work / "mirrors"
    ours, theirs = work / "sources.yaml", work / "baseline-sources.yaml"
    make_sources(args.corpora, mirrors, ours, args.pages)
    theirs.write_text(baseline_sources(ours.read_text(encoding="utf-8")), encoding="utf-8")
    evals = eval_files(args.corpora)

    order = ["baseline", "this"] + (["this", "baseline"] if args.rounds > 1 else [])
    runs: dict[str, list[dict]] = {"baseline": [], "this": []}
    for i, who in enumerate(order):
        label = f"{who}-{i + 1}"
        if who == "baseline":
            runs[who].append(one_build(label, tree, work, theirs, evals, site))
        else:
            runs[who].append(one_build(label, REPO, work, ours, evals, None))

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=False,
                          capture_output=True, text=True).stdout.strip()
    base = statistics.mean(r["wall"] for r in runs["baseline"])
    this = statistics.mean(r["wall"] for r in runs["this"])
    ratio = this / base
    print(f"\nfull build, {', '.join(args.corpora)}{f' ({args.pages} pages each)' if args.pages else ''}; "
          f"{os.cpu_count()} CPUs")
    print(f"{'build':28} {'wall':>8} {'peak memory':>12} {'load before/after':>18}")
    for who, name in (("baseline", f"baseline {args.baseline}"), ("this", f"this tree {head}")):
        for r in runs[who]:
            print(f"{name:28} {r['wall']:7.0f}s {r['memory_kb'] / 1024 / 1024:10.2f}GB "
                  f"{r['load'][0]:8.1f} / {r['load'][1]:.1f}")
    verdict = "met" if ratio <= T_RATIO else "MISSED"
    print(f"this tree / baseline: {ratio:.2f} (target ≤ {T_RATIO:.2f}: {verdict})")
    print(f"work dir: {work} (the baseline's worktree: `git worktree remove --force {tree}`)")


if __name__ == "__main__":
    main()
