"""e5 *documents* in int8 (measured, not the default): copy a built warehouse, re-embed its e5 chunks with the
int8 encoder that queries use (``onnx_embed.e5_query_session``'s file, on all cores), and compare the eval of the
copy against the original (queries as the product embeds them): MRR@10 scoped / unscoped, paired bootstrap 95%
interval (copy − original; the original's vectors are the product's: torch, bf16 where the CPU multiplies bf16
natively, else float32), per kind where anything moved, the ja-react corpus; plus chunks/s of the int8 pass and
of the product's document path (torch) on the first ``--speed-sample`` chunks, same run.

    source <bench data>/env.sh
    PYTHONPATH=$PWD python bench/e5_doc_int8.py --data <data dir> --work /tmp/e5int8 [--speed-sample 64]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import SHARED
from warehouse_ab import compare_warehouses


def reembed(warehouse: Path, speed_sample: int) -> None:
    """Replace the e5 vector table of ``warehouse`` (a copy) by int8 document vectors; print rates and cosines."""
    import pyarrow as pa

    from pipeline.index.embed import E5Embedder
    from pipeline.index.onnx_embed import e5_query_dir, open_session
    from pipeline.warehouse import connect

    e5 = E5Embedder()
    e5.embed_query("warm up")                                          # makes the int8 file when missing
    session = open_session(e5_query_dir(e5.model_id) / "model.onnx", 2)
    con = connect(warehouse, read_only=False)
    con.execute("SET hnsw_enable_experimental_persistence = true")
    table = con.execute("select table_name from models where model_id = ?", [e5.model_id]).fetchone()[0]
    rows = con.execute(f"select v.chunk_id, v.emb, c.breadcrumb, c.text from {table} v join chunks c using (chunk_id)"
                       ).fetchall()
    texts = [e5.DOC_PREFIX + (f"{b}\n\n{t}" if t else b) for _, _, b, t in rows]
    sample = texts[:speed_sample]
    e5._embed(sample[:2], e5._torch_means)                             # load torch outside the timing
    for name, means in (("torch (the product's document path)", e5._torch_means),
                        ("ONNX int8", e5._onnx_means(session))):
        started = time.perf_counter()
        e5._embed(sample, means)
        print(f"{name}: {len(sample) / (time.perf_counter() - started):.1f} chunks/s on {len(sample)} chunks")
    started = time.perf_counter()
    vecs = np.concatenate([e5._embed(texts[s : s + 64], e5._onnx_means(session)) for s in range(0, len(texts), 64)])
    print(f"int8 pass: {len(texts)} chunks in {time.perf_counter() - started:.0f} s")
    cos = (vecs * np.array([r[1] for r in rows], dtype=np.float32)).sum(1)
    print(f"cosine int8 vs stored document vectors: min {cos.min():.4f}  1st percentile "
          f"{np.percentile(cos, 1):.4f}  median {np.median(cos):.4f}")
    indexes = [r[0] for r in con.execute("select index_name from duckdb_indexes() where table_name = ?",
                                         [table]).fetchall()]
    for name in indexes:
        con.execute(f"drop index {name}")
    con.execute(f"delete from {table}")
    con.register("new_vectors", pa.table({"chunk_id": [r[0] for r in rows], "emb": pa.FixedSizeListArray.from_arrays(
        pa.array(vecs.ravel()), vecs.shape[1])}))
    con.execute(f"insert into {table} select chunk_id, emb::FLOAT[{vecs.shape[1]}] from new_vectors")
    for name in indexes:
        con.execute(f"create index {name} on {table} using hnsw (emb) with (metric = 'cosine')")
    con.execute("checkpoint")
    con.close()


def compare(original: Path, copy: Path, evals: list[Path]) -> None:
    compare_warehouses(original, copy, evals, labels=("stored documents", "int8 documents"), slices=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="data dir of a build of the five corpora")
    ap.add_argument("--work", type=Path, required=True, help="folder for the warehouse copy")
    ap.add_argument("--evals", type=Path, nargs="+", default=[SHARED / "evals"])
    ap.add_argument("--speed-sample", type=int, default=64)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    copy = args.work / "warehouse.duckdb"
    shutil.copyfile(args.data / "warehouse.duckdb", copy)
    reembed(copy, args.speed_sample)
    compare(args.data / "warehouse.duckdb", copy, args.evals)


if __name__ == "__main__":
    main()
