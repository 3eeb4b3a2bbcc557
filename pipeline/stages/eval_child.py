"""An eval's searches ranked by child processes beside the parent's own, so an eval uses every core.

An eval is hundreds of searches of a known set of questions (834 for the 417 public cases, scoped and unscoped),
each ~4-15 ms of Python (lanes, page grouping, fusion) that holds the GIL, so one process uses one core however
many the machine has. :func:`eval_rankings` hands chunks of the searches to children that open the same warehouse
with the same options and the same stored query vectors (:func:`pipeline.stages.evaluate.stored_query_vectors`),
while the parent ranks chunks itself; whoever is free takes the next chunk. A child's rankings are the parent's:
the same searcher state (options, synonyms, query vectors primed as one product of the same stored set) gives the
same floats (a test compares every row).

Protocol (``python -m pipeline.stages.eval_child``): stdin carries pickled messages, stdout pickled replies. First
the job ``{"warehouse", "config", "stored", "keep"}`` (no reply; ``stored``: the query vectors to hold and prime); then any number of chunks ``[RankTask,
...]``, each answered by ``[rows, ...]`` (:meth:`Searcher.rank_pages` of each task, ``depth`` 10); then ``None``,
answered by the query vectors the child embedded beyond the stored ones (``{(model id, text): vector}``), after
which it exits. A closed stdin (the parent has gone) ends it too. Errors go to stderr; the parent then ranks that
chunk itself (and meets the error there, if it is one of the search).
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.evaluate import DEPTH, PageRows, RankTask

log = logging.getLogger("docsvault")

#: ``DOCSVAULT_EVAL_WORKERS``: processes that rank an eval's searches (1: the eval's own process only); default:
#: the CPUs this process may use, at most :data:`MAX_WORKERS`, for an eval of at least :data:`MIN_PARALLEL` searches
WORKERS_ENV = "DOCSVAULT_EVAL_WORKERS"
MAX_WORKERS = 4
#: below this many searches a child's start (~1-2 s of imports, warehouse keys, priming) costs more than it saves
MIN_PARALLEL = 200
#: searches per chunk handed out (a few hundred ms of work: small enough to balance, large enough for the pipe)
CHUNK = 24


def eval_workers(searches: int) -> int:
    """How many processes rank ``searches`` searches: ``DOCSVAULT_EVAL_WORKERS`` when set (an integer >= 1), else
    the usable CPUs (``os.sched_getaffinity``) up to :data:`MAX_WORKERS` when ``searches >= MIN_PARALLEL``, else 1.

    Raises:
        ValueError: ``DOCSVAULT_EVAL_WORKERS`` is not an integer >= 1.
    """
    from pipeline.config import environ

    raw = environ().get(WORKERS_ENV, "").strip()
    if raw:
        try:
            workers = int(raw)
        except ValueError:
            workers = 0
        if workers < 1:
            raise ValueError(f"{WORKERS_ENV}={raw!r} is not a number of processes (an integer >= 1; 1: no child)")
        return workers
    if searches < MIN_PARALLEL:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_WORKERS, cpus))


def eval_rankings(searcher: Any, tasks: Sequence[RankTask], *, stored: Mapping[tuple[str, str], Any], keep: int,
                  workers: int | None = None, prepare: Callable[[], Any] | None = None) -> dict[RankTask, PageRows]:
    """Rank ``tasks`` (:func:`pipeline.evaluate.rank_tasks`) with ``searcher`` and ``workers - 1`` child processes
    that open the same searcher (``searcher.path``, ``searcher.config``, the default embedders) holding the query
    vectors ``stored`` (``(model id, text) -> vector``; at least ``keep`` held, and primed, as ``searcher`` was).

    Everything runs in this process when ``workers`` (default :func:`eval_workers`) is 1, when the searcher cannot
    be opened elsewhere (a custom embedder factory or options that do not pickle: tests' fakes), or as far as the
    children fail (a child that dies hands its chunk back; a warning names its last error line).

    ``prepare`` (e.g. ``searcher.prime_scans``) runs in this process once the children are started, so their
    start (imports, opening the warehouse: ~1 s) overlaps it.

    Returns:
        task -> its rows (``[(note_id, source_path, score)]``, best first, at most 10), for every task.
    """
    from pipeline.index.embed import load_embedder

    workers = eval_workers(len(tasks)) if workers is None else workers
    todo: deque[list[RankTask]] = deque(list(tasks[i:i + CHUNK]) for i in range(0, len(tasks), CHUNK))
    ranked: dict[RankTask, PageRows] = {}
    job = None
    if workers > 1 and len(todo) > 1 and getattr(searcher, "_factory", None) is load_embedder:
        try:
            job = pickle.dumps({"warehouse": str(searcher.path), "config": searcher.config, "stored": dict(stored),
                                "keep": keep}, protocol=pickle.HIGHEST_PROTOCOL)
        except (TypeError, AttributeError, pickle.PicklingError) as exc:
            log.debug("eval searches stay in this process: its searcher's options do not pickle (%s)", exc)
    feeders = [threading.Thread(target=_feed, args=(job, todo, ranked, searcher), daemon=True, name=f"eval-child-{i}")
               for i in range(workers - 1 if job else 0)]
    for feeder in feeders:
        feeder.start()
    threads = getattr(searcher, "model_threads", None)
    try:
        if prepare is not None:
            prepare()
        if feeders and threads is not None:     # the processes keep the cores busy: no model threads (see Searcher)
            searcher.model_threads = False
        _rank_here(searcher, todo, ranked)
    except BaseException:               # Ctrl-C, SIGTERM: the children end after their current chunk
        todo.clear()
        raise
    finally:
        if threads is not None:
            searcher.model_threads = threads
        for feeder in feeders:
            feeder.join()
    _rank_here(searcher, todo, ranked)          # chunks a failing child handed back after this process finished
    return ranked


def _rank_here(searcher: Any, todo: deque[list[RankTask]], ranked: dict[RankTask, PageRows]) -> None:
    while True:
        try:
            chunk = todo.popleft()
        except IndexError:
            return
        for task in chunk:
            query, source, lanes = task
            ranked[task] = searcher.rank_pages(query, source=source, lanes=lanes, depth=DEPTH)


def _feed(job: bytes, todo: deque[list[RankTask]], ranked: dict[RankTask, PageRows], searcher: Any) -> None:
    """One child: start it, hand it chunks until none is left, take back the query vectors it embedded."""
    from pipeline.config import environ

    root = str(Path(__file__).resolve().parents[2])         # the directory holding the `pipeline` package
    env = dict(environ())
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    chunk: list[RankTask] | None = None
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen([sys.executable, "-m", "pipeline.stages.eval_child"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, env=env)
        except OSError as exc:
            log.warning("could not start an eval child process (%s): its searches run in this one", exc)
            return
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(job)
            while True:
                try:
                    chunk = todo.popleft()
                except IndexError:
                    chunk = None
                    break
                pickle.dump(chunk, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
                proc.stdin.flush()
                rows = pickle.load(proc.stdout)
                ranked.update(zip(chunk, rows))
                chunk = None
            pickle.dump(None, proc.stdin)
            proc.stdin.flush()
            embedded = pickle.load(proc.stdout)
            if embedded:
                searcher.remember_query_vectors(embedded)       # stored with the parent's: embedded once, ever
            proc.stdin.close()
            proc.wait(timeout=60)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError, subprocess.TimeoutExpired) as exc:
            if chunk is not None:
                todo.appendleft(chunk)
            proc.kill()
            proc.wait()
            err.seek(0)
            lines = [ln.strip() for ln in err.read().decode("utf-8", "replace").splitlines() if ln.strip()]
            log.warning("an eval child process failed (%s: %s); this process ranks its searches",
                        type(exc).__name__, lines[-1] if lines else exc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _main() -> int:
    import signal

    from pipeline.search.searcher import Searcher

    # Ctrl-C in a terminal reaches the whole process group: the parent decides (it stops handing out chunks), and
    # this child ends at its next read of stdin, instead of dying mid-chunk with a warning about a failed child
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    stdout = os.fdopen(os.dup(1), "wb")     # the replies' own descriptor: anything a library prints goes to stderr
    os.dup2(2, 1)
    job: dict[str, Any] = pickle.load(stdin)
    searcher = Searcher(Path(job["warehouse"]), config=job["config"])
    try:
        stored = job["stored"]
        searcher.remember_query_vectors(stored, keep=job["keep"])
        searcher.prime_scans()
        searcher.model_threads = False          # the parent and the other children use the other cores
        while True:
            try:
                chunk = pickle.load(stdin)
            except EOFError:                # the parent has gone
                return 0
            if chunk is None:
                held = searcher.query_vectors()
                pickle.dump({k: v for k, v in held.items() if k not in stored}, stdout,
                            protocol=pickle.HIGHEST_PROTOCOL)
                stdout.flush()
                return 0
            rows = [searcher.rank_pages(query, source=source, lanes=lanes, depth=DEPTH)
                    for query, source, lanes in chunk]
            pickle.dump(rows, stdout, protocol=pickle.HIGHEST_PROTOCOL)
            stdout.flush()
    finally:
        searcher.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(_main())
