"""An eval's searches ranked in child processes (`pipeline/stages/eval_child.py`): the same rows as in process, and a
child that fails hands its searches back."""

from __future__ import annotations

import logging
import pickle
from collections import deque
from pathlib import Path

import pytest

from pipeline.evaluate import HYBRID, rank_tasks, run_eval
from pipeline.index.embed import HashEmbedder
from pipeline.models import EvalCase
from pipeline.search.searcher import Searcher
from pipeline.stages import eval_child
from tests.tiny_warehouse import publish_pages

PAGES = {
    ("guide", "install.md", "Installation"): ["Install docsvault with pip.", "Upgrade with pip install -U."],
    ("guide", "search.md", "Searching"): ["Hybrid search combines BM25 and vectors.", "Filters pick a source."],
    ("api", "publish.md", "publish"): ["publish writes a new warehouse file atomically."],
    ("api", "vector.md", "ベクトル検索"): ["ベクトル検索は埋め込みの類似度で文書を探します。"],
}
CASES = [
    EvalCase("g1", "guide", "how do I install it", ("install.md",), "task"),
    EvalCase("g2", "guide", "hybrid search with vectors", ("search.md",), "keyword"),
    EvalCase("a1", "api", "atomic publish of the warehouse", ("publish.md",), "paraphrase"),
    EvalCase("a2", "api", "ベクトル検索の仕組み", ("vector.md",), "japanese"),
    EvalCase("x1", "nope", "a source the warehouse lacks", ("x.md",), "task"),
]


@pytest.fixture()
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", "off")
    path = tmp_path / "warehouse.duckdb"
    publish_pages(path, PAGES, dims=(64,))
    return path


def _tasks(searcher: Searcher) -> list:
    return rank_tasks(searcher, CASES, {HYBRID: None, "bm25": ["bm25"]}, ["scoped", "unscoped"])


def test_a_child_ranks_as_this_process_does(warehouse: Path, monkeypatch: pytest.MonkeyPatch):
    first = Searcher(warehouse)
    tasks = _tasks(first)
    assert len(tasks) == 16 and ("a source the warehouse lacks", "nope", None) not in tasks
    for query, source, lanes in tasks:
        first.rank_pages(query, source=source, lanes=lanes)
    stored = first.query_vectors()                      # what an earlier eval stored
    first.close()

    with Searcher(warehouse) as searcher:               # as stored_query_vectors opens the eval's searcher
        searcher.remember_query_vectors(stored, keep=100)
        searcher.prime_scans()
        here = {t: searcher.rank_pages(t[0], source=t[1], lanes=t[2]) for t in tasks}
        job = pickle.dumps({"warehouse": str(searcher.path), "config": searcher.config, "stored": stored,
                            "keep": 100})
        todo = deque([tasks[:5], tasks[5:]])
        ranked: dict = {}
        eval_child._feed(job, todo, ranked, searcher)   # every chunk to the child
        assert not todo and ranked == here              # every row, scores included
        monkeypatch.setattr(eval_child, "CHUNK", 3)
        both = eval_child.eval_rankings(searcher, tasks, stored=stored, keep=100, workers=2)
        assert both == here
        report = run_eval(searcher, CASES, scope="unscoped", ranked=both)
        assert report.as_dict() == run_eval(searcher, CASES, scope="unscoped").as_dict()


def test_a_failing_child_hands_its_searches_back(warehouse: Path, caplog: pytest.LogCaptureFixture):
    with Searcher(warehouse) as searcher:
        tasks = _tasks(searcher)
        job = pickle.dumps({"warehouse": str(warehouse.with_name("missing.duckdb")), "config": searcher.config,
                            "stored": {}, "keep": 0})
        todo = deque([tasks[:5], tasks[5:]])
        with caplog.at_level(logging.WARNING, logger="docsvault"):
            eval_child._feed(job, todo, {}, searcher)
        assert [len(c) for c in todo] == [5, 11]        # nothing lost: this process ranks them
        assert "an eval child process failed" in caplog.text and "missing.duckdb" in caplog.text


def test_workers(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(eval_child.WORKERS_ENV, raising=False)
    assert eval_child.eval_workers(eval_child.MIN_PARALLEL - 1) == 1
    monkeypatch.setenv(eval_child.WORKERS_ENV, "3")
    assert eval_child.eval_workers(1) == 3
    monkeypatch.setenv(eval_child.WORKERS_ENV, "0")
    with pytest.raises(ValueError, match="DOCSVAULT_EVAL_WORKERS='0'"):
        eval_child.eval_workers(1000)


def test_a_custom_embedder_keeps_every_search_here(warehouse: Path, monkeypatch: pytest.MonkeyPatch):
    def no_child(*args, **kwargs):
        raise AssertionError("no child for a searcher with a custom embedder factory")

    monkeypatch.setattr(eval_child, "_feed", no_child)
    with Searcher(warehouse, lambda spec: HashEmbedder(64)) as searcher:
        tasks = _tasks(searcher)
        assert len(eval_child.eval_rankings(searcher, tasks, stored={}, keep=0, workers=2)) == len(tasks)


def test_ctrl_c_stops_handing_out_searches_and_no_child_warns(warehouse: Path, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture):
    """Ctrl-C in the parent (here: its first search raises KeyboardInterrupt) ends the eval at once: the children
    finish their current chunk and end; nothing is left to rank and no child is reported as failed."""
    monkeypatch.setattr(eval_child, "CHUNK", 1)
    with Searcher(warehouse) as searcher:
        tasks = _tasks(searcher)

        def interrupted(*_args: object, **_kwargs: object) -> None:
            raise KeyboardInterrupt

        fed: list[dict] = []
        feed = eval_child._feed

        def watched(job: bytes, todo: deque, ranked: dict, searcher: Searcher) -> None:
            feed(job, todo, ranked, searcher)
            fed.append(ranked)

        monkeypatch.setattr(eval_child, "_feed", watched)
        monkeypatch.setattr(searcher, "rank_pages", interrupted)
        with caplog.at_level(logging.WARNING, logger="docsvault"), pytest.raises(KeyboardInterrupt):
            eval_child.eval_rankings(searcher, tasks, stored={}, keep=0, workers=2)
        assert len(fed) == 1 and len(fed[0]) <= 1 < len(tasks)     # the child's chunk in hand at most, not the rest
        assert caplog.text == ""


def test_a_child_ignores_sigint(warehouse: Path):
    """A terminal's Ctrl-C reaches the child too (same process group): it keeps answering; its parent decides."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    with Searcher(warehouse) as searcher:
        task = _tasks(searcher)[0]
        here = searcher.rank_pages(task[0], source=task[1], lanes=task[2], depth=10)
        job = {"warehouse": str(warehouse), "config": searcher.config, "stored": {}, "keep": 0}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.stages.eval_child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        pickle.dump(job, proc.stdin)
        pickle.dump([task], proc.stdin)
        proc.stdin.flush()
        assert pickle.load(proc.stdout) == [here]          # its searcher is open: the handler is in place
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        pickle.dump([task], proc.stdin)
        proc.stdin.flush()
        assert pickle.load(proc.stdout) == [here]
        pickle.dump(None, proc.stdin)
        proc.stdin.flush()
        pickle.load(proc.stdout)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
