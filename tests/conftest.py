"""Shared fixtures: paths to ../shared (read-only real corpora), a tiny local source, isolated settings."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the fake embedder's tests must not load the real cross-lingual model (USE-m3) for every build; the tests of the
# cross-lingual lane (tests/test_mixed_vault.py) name it in their Settings
os.environ.setdefault("DOCSVAULT_CROSSLINGUAL_MODEL", "none")
# search start-up caches (pipeline.index.fastcache) of test warehouses go to a throwaway directory, not ~/.cache
os.environ.setdefault("DOCSVAULT_SEARCH_CACHE", tempfile.mkdtemp(prefix="docsvault-search-cache-"))

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


@pytest.fixture
def tiny_vault(tmp_path: Path) -> Path:
    """A small Obsidian vault on disk (with a .obsidian folder that must be skipped)."""
    root = tmp_path / "tinyvault"
    for rel, text in TINY_NOTES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def tiny_env(tmp_path: Path, tiny_vault: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Environment for a build of the tiny vault with the fake hash embedder, everything under tmp_path."""
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"sources:\n  - name: tiny\n    kind: local\n    path: {tiny_vault}\n    format: obsidian\n", encoding="utf-8"
    )
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "tiny.yaml").write_text(
        "corpus: tiny\ncases:\n"
        "  - id: t1\n    query: install the tool on windows\n    expected: ['Install guide.md']\n    kind: keyword\n"
        "  - id: t2\n    query: water bird in the pond\n    expected: ['Ducks.md']\n    kind: paraphrase\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("DOCSVAULT_SOURCES", str(sources))
    monkeypatch.setenv("DOCSVAULT_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(tmp_path / "vault"))
    monkeypatch.setenv("DOCSVAULT_EVALS", str(evals))
    monkeypatch.setenv("DOCSVAULT_MODEL", "hash")
    monkeypatch.setenv("DOCSVAULT_MULTILINGUAL_MODEL", "hash")
    monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_MODEL", "none")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.setenv("DOCSVAULT_PROGRESS_INTERVAL", "3600")   # no progress lines in outputs tests compare exactly
    return tmp_path


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
