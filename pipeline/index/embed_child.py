"""Embed texts into a model's cache in a child process, so the model's memory goes back to the OS when it is done.

A torch model stays in a process after use: e5's weights, tokenizer and torch's own heap and libraries held ~1.1 GB
after ja-react's documents, and ~0.45 GB of it stayed after :func:`pipeline.index.embed.release_models` (measured:
the peak of a full build of the five bench corpora came in the warehouse stage, with that residue under it). A large
pass of such a model runs here instead (:func:`embed_in_child`): the child writes the vectors to the embedding cache
shard by shard, as :func:`pipeline.index.embed.embed_chunks` would, and the parent reads them from the cache.

Protocol (``python -m pipeline.index.embed_child``): stdin is one pickled dict ``{"spec", "model_id", "cache_dir",
"items": [(text hash, text), ...], "batch_size"}``; stdout carries ``"<done> <total>"`` progress lines; exit status 0
when every text is in the cache. The child stops between batches when its parent has gone (``os.getppid()``
changed), so a killed build leaves no embedder running; every finished batch stays cached.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: oneDNN's primitive cache in the child (its own default: 1024 primitives). torch runs e5's bf16 matmuls through
#: oneDNN, and texts sorted by length give nearly every batch a shape of its own, so the cache kept a primitive (and
#: its buffers) per shape: the child grew from ~0.6 to ~1.55 GB over ja-react's 3,546 texts, the peak of a full
#: build. With 4: 1,800 texts peaked at 1,115 MB PSS against 1,291 MB, CPU 137.3 s against 138.8 s, vectors equal
#: bit for bit (300 texts compared). A value already in the environment is kept.
ONEDNN_CACHE_ENV = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
ONEDNN_CACHE = 4


def embed_in_child(spec: str, model_id: str, cache_dir: Path, items: Sequence[tuple[str, str]], *,
                   batch_size: int = 64, progress: Callable[[int, int], None] | None = None) -> int:
    """Embed ``items`` (text hash, text) with the model ``spec`` into the cache of ``model_id`` under ``cache_dir``,
    in a child Python process; returns how many texts it embedded (``len(items)``), or 0 when the child failed
    (logged as a warning with the child's last error line: the caller embeds what is missing itself, and every batch
    the child finished stays cached).

    ``progress(done, total)`` is called as the child reports each batch. An exception in the caller's thread
    (KeyboardInterrupt, a run being terminated) kills the child.
    """
    if not items:
        return 0
    job = pickle.dumps({"spec": spec, "model_id": model_id, "cache_dir": str(cache_dir), "items": list(items),
                        "batch_size": batch_size}, protocol=pickle.HIGHEST_PROTOCOL)
    from pipeline.config import environ

    root = str(Path(__file__).resolve().parents[2])         # the directory holding the `pipeline` package
    env = dict(environ())
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault(ONEDNN_CACHE_ENV, str(ONEDNN_CACHE))
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.index.embed_child"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=err, env=env)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(job)
                proc.stdin.close()
            except BrokenPipeError:
                pass
            for line in proc.stdout:
                parts = line.split()
                if progress is not None and len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    progress(int(parts[0]), int(parts[1]))
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if code == 0:
            return len(items)
        err.seek(0)
        lines = [ln.strip() for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    log.warning("embedding %d texts with %s in a child process failed (exit %s: %s); embedding them in this process",
                len(items), model_id, code, lines[-1] if lines else "no message")
    return 0


def _main() -> int:
    from pipeline.index.embed import EmbeddingCache, embed_texts, load_embedder

    job: dict[str, Any] = pickle.load(sys.stdin.buffer)
    parent = os.getppid()
    embedder = load_embedder(job["spec"])
    if embedder.model_id != job["model_id"]:
        print(f"model spec {job['spec']!r} gives {embedder.model_id!r}, not {job['model_id']!r}", file=sys.stderr)
        return 2
    cache = EmbeddingCache(Path(job["cache_dir"]), job["model_id"])

    def report(done: int, total: int) -> None:
        if os.getppid() != parent:
            raise SystemExit(3)             # the build that asked is gone: stop (finished batches stay cached)
        print(done, total, flush=True)

    embed_texts(dict(job["items"]), embedder, cache, batch_size=job["batch_size"], progress=report)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(_main())
