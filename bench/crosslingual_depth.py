"""How many chunks of a English page the cross-lingual model needs: the public cases searched (scoped and
unscoped, default settings) on copies of a built warehouse in which the cross-lingual (USE-m3) vectors of every
English chunk past a page's first N are marked dead, as if the build had embedded only those; the setting is
chosen per fold (``cv.cross_validate``, mean of scoped and unscoped MRR@10) and each N is bootstrapped against
"every chunk". A English page's cross-lingual vectors serve only questions in other scripts (an English
question's bridge leaves the English pages out), so this is the cost of that lane on English pages against its use.

    PYTHONPATH=$PWD python bench/crosslingual_depth.py --data <bench data> --depths 1 2 3 4 6 8

The copies go to ``--work`` (default: a temporary directory, removed after). Measure it on a warehouse built with
every chunk embedded (``DOCSVAULT_CROSSLINGUAL_DEPTH=0``); masking a warehouse built with a depth gives no more.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import SHARED, cached_embedder_factory, evaluate_setting, per_case_arrays
from cv import cross_validate, format_cv


def masked_copy(warehouse: Path, out: Path, depth: int) -> int:
    """Copy ``warehouse`` to ``out`` with the cross-lingual vectors of English notes' chunks of ordinal >=
    ``depth`` marked dead (``vec_dead``, the registry's counts updated); returns how many were marked."""
    import duckdb

    shutil.copy(warehouse, out)
    con = duckdb.connect(str(out))
    try:
        model = con.execute("SELECT value FROM meta WHERE key = 'crosslingual_model'").fetchone()
        table = con.execute("SELECT table_name FROM models WHERE model_id = ?", [model[0]]).fetchone()[0]
        sel = f"SELECT chunk_id FROM chunks WHERE ordinal >= {int(depth)} AND language = 'en'"
        con.execute(f"DELETE FROM {table}_delta WHERE chunk_id IN ({sel})")
        before = con.execute("SELECT count(*) FROM vec_dead WHERE table_name = ?", [table]).fetchone()[0]
        con.execute(f"INSERT INTO vec_dead SELECT '{table}', chunk_id FROM {table} WHERE chunk_id IN ({sel}) "
                    f"AND chunk_id NOT IN (SELECT chunk_id FROM vec_dead WHERE table_name = '{table}')")
        n_dead = con.execute("SELECT count(*) FROM vec_dead WHERE table_name = ?", [table]).fetchone()[0]
        n_delta = con.execute(f"SELECT count(*) FROM {table}_delta").fetchone()[0]
        n_base = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        con.execute("UPDATE models SET n_dead = ?, n_delta = ?, n = ? WHERE table_name = ?",
                    [n_dead, n_delta, n_base - n_dead + n_delta, table])
        return int(n_dead - before)
    finally:
        con.close()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="data dir of a build (its warehouse.duckdb)")
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    ap.add_argument("--evals", type=Path, nargs="+", default=[SHARED / "evals"])
    ap.add_argument("--work", type=Path, help="where the masked copies go (kept)")
    args = ap.parse_args(argv)
    from pipeline.evaluate import load_cases

    cases = load_cases(list(args.evals))
    factory = cached_embedder_factory()
    work = args.work or Path(tempfile.mkdtemp(prefix="xdepth-"))
    work.mkdir(parents=True, exist_ok=True)
    names: list[str] = ["every chunk"]
    per: dict[str, list[dict]] = {"scoped": [], "unscoped": []}
    warehouses = [args.data / "warehouse.duckdb"]
    for depth in args.depths:
        out = work / f"depth{depth}.duckdb"
        n = masked_copy(warehouses[0], out, depth)
        print(f"depth {depth}: {n} cross-lingual vectors of English chunks marked dead", file=sys.stderr)
        names.append(f"first {depth} chunks")
        warehouses.append(out)
    try:
        ids = corpora = kinds = None
        for name, wh in zip(names, warehouses):
            reports = evaluate_setting(wh, cases, {}, factory, scopes=("scoped", "unscoped"))
            for scope, report in reports.items():
                per[scope].append(per_case_arrays(report))
            first = reports["scoped"]["cases"]
            ids, corpora, kinds = ([c[k] for c in first] for k in ("id", "corpus", "kind"))
            print(f"{name}: " + ", ".join(f"{s} {r['overall']['mrr@10']:.4f}" for s, r in reports.items()),
                  file=sys.stderr, flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    arrays = {s: {m: np.vstack([a[m] for a in per[s]]) for m in per[s][0]} for s in per}
    chooser = (arrays["scoped"]["mrr@10"] + arrays["unscoped"]["mrr@10"]) / 2
    for scope in ("scoped", "unscoped"):
        res = cross_validate(names, ids, corpora, kinds, arrays[scope], chooser=chooser,
                             chosen_on="mrr@10 (mean of scoped and unscoped)")
        print(format_cv(res, scope), end="\n\n")


if __name__ == "__main__":
    main()
