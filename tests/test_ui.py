"""The Dagster UI's GraphQL API, served by `dagster-webserver` on loopback after a build: every asset, their
groups and kinds, asset checks, and the latest `retrieval_eval` materialization with float metrics."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import Settings
from tests.conftest import stop_group, wait_for_webserver

ASSETS_QUERY = """
{ assetNodes { assetKey { path } groupName kinds description
               assetChecksOrError { ... on AssetChecks { checks { name blocking } } } } }
"""
EVAL_QUERY = """
{ assetOrError(assetKey: {path: ["retrieval_eval"]}) {
    ... on Asset { assetMaterializations(limit: 1) { runId timestamp
        metadataEntries { __typename label ... on FloatMetadataEntry { floatValue } ... on IntMetadataEntry { intValue } }
    } } } }
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = json.loads(resp.read())
    assert "errors" not in body, body.get("errors")
    return body["data"]


@pytest.mark.integration   # ~25 s: a build, then a webserver start
def test_webserver_graphql_shows_assets_and_eval_metrics(tiny_env: Path) -> None:
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    report = run_build(settings)
    assert report.ok, (report.sources, report.shared_error)
    port = _free_port()
    exe = Path(sys.executable).with_name("dagster-webserver")
    with open(tiny_env / "webserver.log", "wb") as log:             # the child keeps its own copy
        proc = subprocess.Popen(
            [str(exe), "-m", "pipeline.definitions", "-h", "127.0.0.1", "-p", str(port)],
            env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,                                  # setsid: its own process group
        )
    try:
        wait_for_webserver(port, lambda: proc.poll() is None, 90,
                           lambda: (tiny_env / "webserver.log").read_text(errors="replace")[-2000:])

        nodes = _graphql(port, ASSETS_QUERY)["assetNodes"]
        by_key = {"/".join(n["assetKey"]["path"]): n for n in nodes}
        assert set(by_key) == {
            "tiny/raw_docs", "tiny/notes", "tiny/vault", "tiny/chunks", "tiny/embeddings",
            "link_graph", "warehouse", "retrieval_eval",
        }
        assert by_key["warehouse"]["groupName"] == "warehouse" and by_key["warehouse"]["kinds"] == ["duckdb"]
        assert by_key["tiny/embeddings"]["groupName"] == "tiny" and by_key["tiny/embeddings"]["kinds"] == ["numpy"]
        # descriptions are Markdown: a placeholder like <data> is in code spans, not lost as an HTML tag
        assert "`<data>/eval_runs.duckdb`" in by_key["retrieval_eval"]["description"]
        assert by_key["link_graph"]["kinds"] == ["networkx"]
        assert all(n["description"] for n in nodes)
        checks = {c["name"]: c["blocking"] for n in nodes for c in n["assetChecksOrError"].get("checks", [])}
        assert checks.get("frontmatter_valid") is True and checks.get("hnsw_index_used") is True
        assert checks.get("ran_without_error") is True and checks.get("serves_queries") is False

        (mat,) = _graphql(port, EVAL_QUERY)["assetOrError"]["assetMaterializations"]
        entries = {e["label"]: e for e in mat["metadataEntries"]}
        assert entries["n"]["intValue"] == 2
        for metric in ("hit_at_1", "hit_at_3", "mrr_at_10", "ndcg_at_10"):
            assert entries[metric]["__typename"] == "FloatMetadataEntry", entries[metric]
            assert 0.0 <= entries[metric]["floatValue"] <= 1.0
        assert entries["tiny/hit_at_3"]["__typename"] == "FloatMetadataEntry"
    finally:
        stop_group(proc, timeout=20)


LOCATIONS_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""


@contextmanager
def _running_ui(tiny_env: Path, cwd: Path) -> Iterator[tuple[subprocess.Popen, int, Path, dict[str, str]]]:
    """`docsvault ui` started for real in ``cwd`` (its own process group) and serving: (process, port, its log file,
    the environment it runs with); stopped by process group afterwards."""
    repo = Path(__file__).resolve().parents[1]
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(repo), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    port = _free_port()
    log_path = tiny_env / "ui.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(bin_dir / "docsvault"), "ui", "--port", str(port)], cwd=cwd, env=env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)          # setsid: its own process group
    try:
        wait_for_webserver(port, lambda: proc.poll() is None, 120,
                           lambda: log_path.read_text(errors="replace")[-3000:])
        yield proc, port, log_path, env
    finally:
        stop_group(proc)


@pytest.mark.integration   # `docsvault ui` for real (~20 s): dg dev, webserver + daemon
def test_ui_starts_clean_beside_a_module_named_like_a_dependency(tiny_env: Path) -> None:
    """`docsvault ui` started in a folder holding a `gql.py` (dagster-graphql imports `gql`): the webserver and the
    code location load anyway, and Dagster prints no SupersessionWarning or other Python warning at start (`dg
    dev`, not the superseded `dagster dev`)."""
    stray = tiny_env / "cwd"
    stray.mkdir()
    (stray / "gql.py").write_text('raise ImportError("the gql.py of the current directory was imported")\n')
    with _running_ui(tiny_env, stray) as (_, port, log_path, _env):
        (entry,) = _graphql(port, LOCATIONS_QUERY)["workspaceOrError"]["locationEntries"]
        assert (entry["name"], entry["loadStatus"], entry["locationOrLoadError"]["__typename"]) == (
            "pipeline.definitions", "LOADED", "RepositoryLocation")
        out = log_path.read_text(errors="replace")
        assert "Warning:" not in out and "gql.py" not in out, out[-3000:]


@pytest.mark.integration   # `docsvault ui` for real (~20 s), then two refused at once
def test_a_second_ui_is_refused_and_the_checkout_dagster_yaml_brings_no_warning(tiny_env: Path) -> None:
    """Started in the checkout's root (which holds the project's dagster.yaml, the one DAGSTER_HOME gets), `docsvault
    ui` prints no "Found a dagster instance configuration" warning; a second `docsvault ui` on the same DAGSTER_HOME
    exits 1 at once (another port: the daemon is running; the same port: that too), and no second daemon starts."""
    repo = Path(__file__).resolve().parents[1]
    bin_dir = Path(sys.executable).parent
    with _running_ui(tiny_env, repo) as (proc, port, log_path, env):
        for p in (_free_port(), port):
            second = subprocess.run([str(bin_dir / "docsvault"), "ui", "--port", str(p)], cwd=repo, env=env,
                                    capture_output=True, text=True, timeout=60, check=False)
            assert second.returncode == 2 and second.stdout == "", second.stderr
            assert f"another `docsvault ui` (pid {proc.pid}, http://127.0.0.1:{port}) runs the Dagster daemon" \
                in second.stderr and len(second.stderr.splitlines()) == 1, second.stderr
            assert (f"127.0.0.1:{p} is already in use" in second.stderr) == (p == port)
        out = log_path.read_text(errors="replace")
        assert "Found a dagster instance configuration" not in out and "still sending heartbeats" not in out, out
