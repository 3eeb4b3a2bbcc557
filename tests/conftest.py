"""Shared fixtures: paths to ../shared (read-only real corpora), a tiny local source, isolated settings."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def _ram_tmpdir() -> None:
    """Temporary files of the tests (tmp_path, the search cache below, the subprocesses they start) on a RAM file
    system when there is one (/dev/shm): the tiny builds commit SQLite (Dagster's run and event storage) and DuckDB
    files ~1,200 times each, and on a disk every commit waits for an fsync, ~40 % of a build's wall time. Nothing a
    test checks depends on the disk. Only with 2 GiB free there (a container's /dev/shm may have 64 MiB); the
    folders of passed tests are removed as they pass (tmp_path_retention_policy in pyproject.toml).
    DOCSVAULT_TEST_TMPDIR names another folder, or "" to keep TMPDIR. Runs that select integration tests (real
    corpora, hundreds of MB each) keep TMPDIR unless DOCSVAULT_TEST_TMPDIR says otherwise (:func:`pytest_configure`)."""
    chosen = os.environ.get("DOCSVAULT_TEST_TMPDIR")
    if chosen is None:
        shm, chosen = Path("/dev/shm"), ""
        if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) and shutil.disk_usage(shm).free >= 2 * 1024**3:
            chosen = str(shm)
    if chosen:
        os.environ["TMPDIR"] = chosen              # xdist workers and subprocesses inherit it
        tempfile.tempdir = None                    # re-read on the next gettempdir()


def pytest_configure(config: pytest.Config) -> None:
    """`make test` (``-m "not integration"``) puts its temp files on /dev/shm (:func:`_ram_tmpdir`); before any
    tmp_path exists and before pytest-xdist starts its workers, which inherit TMPDIR."""
    if "not integration" in (config.option.markexpr or "") or "DOCSVAULT_TEST_TMPDIR" in os.environ:
        _ram_tmpdir()


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the fake embedder's tests must not load the real cross-lingual model (USE-m3) for every build; the tests of the
# cross-lingual lane (tests/test_mixed_vault.py) name it in their Settings
os.environ.setdefault("DOCSVAULT_CROSSLINGUAL_MODEL", "none")
# search start-up caches (pipeline.index.fastcache) of test warehouses go to a throwaway directory, not ~/.cache
if "DOCSVAULT_SEARCH_CACHE" not in os.environ:
    os.environ["DOCSVAULT_SEARCH_CACHE"] = tempfile.mkdtemp(prefix="docsvault-search-cache-")
    atexit.register(shutil.rmtree, os.environ["DOCSVAULT_SEARCH_CACHE"], ignore_errors=True)

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DOCSVAULT_SHARED", REPO.parent / "shared")).resolve()


def shared_path(*parts: str) -> Path:
    """A path under ../shared; skips the test when the shared folder is not beside the checkout."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available (set DOCSVAULT_SHARED)")
    return path


TINY_NOTES = {
    "Home.md": "---\ntitle: Home\ntags: [start]\n---\n# Home\n\nWelcome. See [[Install guide]] and [[Ducks]].\n",
    "Install guide.md": (
        "# Install guide\n\nHow to install the tool on your computer.\n\n## Linux\n\nRun the package manager "
        "to install it.\n\n## Windows\n\nDownload the installer and run it.\n"
    ),
    "Ducks.md": "# Ducks\n\nDucks swim in the pond and eat bread. A duck is a water bird.\n",
    "sub/Parquet files.md": (
        "# Parquet files\n\nRead a parquet file with `read_parquet`. Columnar storage is fast.\n\n"
        "```python\n# not a heading\nimport duckdb\n```\n"
    ),
    "ja/検索.md": "# 検索\n\nベクトル検索とキーワード検索を組み合わせて、関係のあるページを見つけます。\n",
    ".obsidian/app.json": "{}",
}


def local_source(tmp_path: Path, name: str, path: Path) -> tuple[Any, Any]:
    """(Settings, Source) of one ``local`` obsidian source ``name`` at ``path``, everything else under tmp_path, with
    its fetch and normalize stages run (the start of a test of the later stages)."""
    from pipeline import stages as build
    from pipeline.config import Settings
    from pipeline.ingest.sources import load_sources

    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  - name: {name}\n    kind: local\n    path: {path}\n    format: obsidian\n",
                       encoding="utf-8")
    settings = Settings(sources, tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    source = load_sources(sources)[0]
    build.fetch_stage(settings, source)
    build.normalize_stage(settings, source)
    return settings, source


def _write_tiny(root: Path) -> Path:
    """The tiny vault (with a .obsidian folder that must be skipped) in ``root / "tinyvault"``; returns its folder."""
    vault = root / "tinyvault"
    for rel, text in TINY_NOTES.items():
        p = vault / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return vault


def _tiny_env_at(root: Path, tiny_vault: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sources.yaml and evals of the tiny vault in ``root``, and the environment of a build of it there."""
    sources = root / "sources.yaml"
    sources.write_text(
        f"sources:\n  - name: tiny\n    kind: local\n    path: {tiny_vault}\n    format: obsidian\n", encoding="utf-8"
    )
    evals = root / "evals"
    evals.mkdir()
    (evals / "tiny.yaml").write_text(
        "corpus: tiny\ncases:\n"
        "  - id: t1\n    query: install the tool on windows\n    expected: ['Install guide.md']\n    kind: keyword\n"
        "  - id: t2\n    query: water bird in the pond\n    expected: ['Ducks.md']\n    kind: paraphrase\n",
        encoding="utf-8",
    )
    _tiny_setenv(root, monkeypatch)
    return root


def _tiny_setenv(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCSVAULT_SOURCES", str(root / "sources.yaml"))
    monkeypatch.setenv("DOCSVAULT_DATA", str(root / "data"))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(root / "vault"))
    monkeypatch.setenv("DOCSVAULT_EVALS", str(root / "evals"))
    monkeypatch.setenv("DOCSVAULT_MODEL", "hash")
    monkeypatch.setenv("DOCSVAULT_MULTILINGUAL_MODEL", "hash")
    monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_MODEL", "none")
    monkeypatch.setenv("DAGSTER_HOME", str(root / "dagster"))
    monkeypatch.setenv("DOCSVAULT_PROGRESS_INTERVAL", "3600")   # no progress lines in outputs tests compare exactly


@pytest.fixture
def tiny_vault(tmp_path: Path) -> Path:
    """A small Obsidian vault on disk (with a .obsidian folder that must be skipped)."""
    return _write_tiny(tmp_path)


@pytest.fixture
def tiny_env(tmp_path: Path, tiny_vault: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Environment for a build of the tiny vault with the fake hash embedder, everything under tmp_path."""
    return _tiny_env_at(tmp_path, tiny_vault, monkeypatch)


_BUILT: dict[str, object] = {}     # name -> what the build of built_once returned, in this test process


def built_once(name: str, factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
               build: Callable[[Path], object]) -> tuple[Path, object]:
    """A folder ``<base temp>/<name>`` holding what ``build(folder)`` made of it (a tiny env it wrote there, and
    its first build), and what ``build`` returned.

    ``build`` runs once per test process; a copy of the folder is kept, and every later call restores that copy
    in the same folder (the same absolute paths, so the sources.yaml, the no-op record and the Dagster instance
    are those of the build) and sets the tiny env's environment: the state a test's own first build, which is
    deterministic, would leave, without running it again."""
    root = factory.getbasetemp() / name
    snapshot = factory.getbasetemp() / f"{name}-snapshot"
    if name not in _BUILT:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        result = build(root)
        shutil.rmtree(snapshot, ignore_errors=True)
        shutil.copytree(root, snapshot, symlinks=True)
        _BUILT[name] = result
        return root, result
    shutil.rmtree(root)
    shutil.copytree(snapshot, root, symlinks=True)
    _tiny_setenv(root, monkeypatch)
    return root, _BUILT[name]


@pytest.fixture
def built_tiny_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``tiny_env`` (in its own folder, not tmp_path) after its first build: ``run_build`` of every source, one
    Dagster run, the no-op record (:func:`built_once`). Its report is :func:`tiny_first_report`."""

    def build(root: Path) -> object:
        from pipeline.config import Settings
        from pipeline.defs.runner import run_build

        _tiny_env_at(root, _write_tiny(root), monkeypatch)
        report = run_build(Settings.from_env())
        assert report.ok, (report.sources, report.shared_error)
        return report

    yield built_once("tiny-built", tmp_path_factory, monkeypatch, build)[0]
    # The build is shared by the worker's tests: a test's MCP server or VaultService, in a reference cycle, holds
    # the warehouse attached until the garbage collector runs, and a later test that opens the file itself
    # (duckdb.connect) met "Unique file handle conflict" (CI of session 44, a file order that left it so).
    gc.collect()


@pytest.fixture
def tiny_first_report(built_tiny_env: Path):
    """The ``BuildReport`` of the first build that ``built_tiny_env`` holds."""
    return _BUILT["tiny-built"]


def wait_for_webserver(port: int, alive: Callable[[], bool], seconds: float, logs: Callable[[], str]) -> None:
    """Poll ``http://127.0.0.1:<port>/server_info`` (the Dagster webserver) until it answers; fail with ``logs()``
    when ``alive()`` turns false or ``seconds`` pass."""
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            assert alive(), logs()
            assert time.monotonic() < deadline, f"webserver did not start within {seconds:.0f} s\n" + logs()
            time.sleep(0.5)


def stop_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Stop a server started with ``start_new_session=True``: SIGTERM to its process group, SIGKILL after
    ``timeout`` seconds."""
    import signal

    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def warehouse_rows(path: Path, skip_meta: tuple[str, ...] = ("built_at", "full_built_at", "full_bytes")
                   ) -> dict[str, list[tuple]]:
    """Every table of the warehouse at ``path``, rows sorted; ``meta`` without the keys ``skip_meta`` (times and
    sizes that differ between equal builds); vector tables as (chunk_id, emb)."""
    from pipeline import warehouse as wh

    con = wh.connect(path)
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'wh'")
                 .fetchall()]
        out = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in names}
    finally:
        con.close()
    out["meta"] = [r for r in out["meta"] if r[0] not in skip_meta]
    return out
