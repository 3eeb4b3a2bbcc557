"""Crash safety (issue 8 acceptance 1, issue 6 acceptance 3): a real `docsvault build` is killed with SIGKILL at 20
random moments across its stages; after each kill the warehouse (if any) still opens, and the next build converges
to the same note, chunk and vector counts and the same eval metrics as an uninterrupted build.

Fast fake embedder (DOCSVAULT_MODEL=hash) on a generated 80-note local vault. Before each killed build part of the
data dir is reset (all of it, the stage state, the embedding cache, or the warehouse) so the kills land in every
stage: fetch/normalize/vault writes, chunking, embedding (cache shards), graph, warehouse publish and the index build.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORDS = ["duck", "pond", "water", "bird", "install", "linux", "windows", "package", "parquet", "column", "storage", "query", "index", "vector", "search", "graph", "link", "note", "vault", "chunk", "heading", "embed", "model", "cache", "build", "lock", "crash", "kill", "signal", "warehouse", "table", "schema"]


def _make_vault(root: Path, n: int = 80) -> None:
    rng = random.Random(7)
    for i in range(n):
        sections = []
        for j in range(4):
            words = " ".join(rng.choice(WORDS) for _ in range(60))
            sections.append(f"## Part {j}\n\n{words}.\n")
        links = f"See [[Note {(i + 1) % n}]] and [[Note {(i * 7) % n}]].\n"
        (root / f"Note {i}.md").write_text(f"# Note {i}\n\nTopic {WORDS[i % len(WORDS)]}. {links}\n" + "\n".join(sections))


def _env(base: Path, vault_src: Path) -> dict[str, str]:
    base.mkdir(parents=True, exist_ok=True)
    sources = base / "sources.yaml"
    sources.write_text(f"sources:\n  - name: gen\n    kind: local\n    path: {vault_src}\n    format: obsidian\n")
    env = {**os.environ, "DOCSVAULT_SOURCES": str(sources), "DOCSVAULT_DATA": str(base / "data"),
           "DOCSVAULT_VAULT": str(base / "vault"), "DOCSVAULT_EVALS": str(base.parent / "evals.yaml"),
           "DOCSVAULT_MODEL": "hash", "DOCSVAULT_MULTILINGUAL_MODEL": "hash", "DAGSTER_HOME": str(base / "dagster"),
           "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return env


def _cmd() -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "build"]


def _outcome(base: Path) -> dict:
    """note/chunk/vector counts and eval metrics of the built warehouse."""
    from pipeline import warehouse as wh

    con = wh.connect(base / "data" / "warehouse.duckdb")
    try:
        st = wh.stats(con)
    finally:
        con.close()
    shared = json.loads((base / "data" / "state" / ".shared.json").read_text())
    return {"notes": st["notes"], "chunks": st["chunks"], "links": st["links"],
            "vectors": {m["model_id"]: m["n"] for m in st["models"]},
            "eval": shared["eval"]["report"]["overall"]}


def _opens(path: Path) -> bool:
    from pipeline import warehouse as wh

    if not path.exists():
        return True
    try:
        con = wh.connect(path)
    except Exception:  # noqa: BLE001
        return False
    try:
        wh.stats(con)
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        con.close()


@pytest.mark.integration   # ~5-8 min: 41 real builds through Dagster
def test_sigkill_at_20_random_moments_converges(tmp_path: Path) -> None:
    vault_src = tmp_path / "notes"
    vault_src.mkdir()
    _make_vault(vault_src)
    (tmp_path / "evals.yaml").write_text(
        "corpus: gen\ncases:\n" + "".join(
            f"  - id: q{i}\n    query: topic {WORDS[i]}\n    expected: ['Note {i}.md']\n    kind: keyword\n"
            for i in range(10)))

    ref = tmp_path / "ref"
    env_ref = _env(ref, vault_src)
    started = time.monotonic()
    subprocess.run(_cmd(), env=env_ref, cwd=REPO, check=True, capture_output=True, timeout=600)
    full_time = time.monotonic() - started
    expected = _outcome(ref)
    assert expected["notes"] == 80 and expected["eval"]["n"] == 10

    work = tmp_path / "work"
    env = _env(work, vault_src)
    data, vault = work / "data", work / "vault"
    rng = random.Random(20260101)
    results = []
    corrupt = 0
    kills = 0
    attempts = 0
    while kills < 20 and attempts < 60:
        attempts += 1
        prep = ("fresh", "state", "cache", "warehouse")[kills % 4]
        if prep == "fresh":
            shutil.rmtree(data, ignore_errors=True)
            shutil.rmtree(vault, ignore_errors=True)
        elif prep == "state":
            shutil.rmtree(data / "state", ignore_errors=True)
        elif prep == "cache":
            shutil.rmtree(data / "cache", ignore_errors=True)
            shutil.rmtree(data / "state", ignore_errors=True)
        else:
            (data / "warehouse.duckdb").unlink(missing_ok=True)
        delay = rng.uniform(0.5, max(1.0, full_time * 0.9))
        proc = subprocess.Popen(_cmd(), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=delay)
            continue                      # finished before the kill: not a crash, try again
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        kills += 1
        if not _opens(data / "warehouse.duckdb"):
            corrupt += 1
        done = subprocess.run(_cmd(), env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (prep, delay, done.stdout[-2000:], done.stderr[-2000:])
        got = _outcome(work)
        results.append((prep, round(delay, 2), got == expected))
        assert got == expected, (prep, delay, got, expected)
        assert not list(data.glob("warehouse.duckdb.tmp-*"))
    print(f"kills={kills} attempts={attempts} converged={sum(r[2] for r in results)}/{len(results)} "
          f"corrupt={corrupt} full_build={full_time:.1f}s", results)
    assert kills == 20
    assert corrupt == 0
    assert all(r[2] for r in results)
