"""The UI's "Materialize all" with one source that cannot be fetched any more, through the real webserver.

``dagster-webserver`` and ``dagster-daemon`` (the pair ``dg dev`` starts) serve the project on loopback. The test
sends the GraphQL mutation the UI's "Materialize all" button sends: ``launchPipelineExecution`` of the implicit
asset job ``__ASSET_JOB`` with every asset key (and every asset check) selected, empty run config, so the run uses
the project's default (in-process) executor. The run is queued, dequeued by the daemon, and must end as the
other paths do (tests/test_dagster_paths.py): run failed, only ``remote``'s fetch step red, the shared stages
materialized, ``remote``'s last good notes still searchable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from pipeline.config import Settings
from tests.conftest import stop_group, wait_for_webserver
from tests.test_dagster_paths import (
    BIN,
    REPO,
    _assert_dead_alone,
    _cli_env,
    _run_outcome,
    _searchable,
    dead_remote,  # noqa: F401  (the fixture)
)
from tests.test_ui import _free_port

#: what the UI's asset graph loads before its "Materialize all" button can build the launch
ASSET_NODES = """
{ assetNodes { assetKey { path } jobNames repository { name location { name } }
               assetChecksOrError { ... on AssetChecks { checks { name } } } } }
"""

#: the UI's LAUNCH_PIPELINE_EXECUTION_MUTATION (ui-core runs/RunUtils), as "Materialize all" sends it
LAUNCH = """
mutation LaunchPipelineExecution($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId pipelineName } }
    ... on PythonError { message stack }
    ... on InvalidStepError { invalidStepKey }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on PipelineNotFoundError { message }
  }
}
"""

RUN_STATUS = """
query RunStatus($runId: ID!) {
  runOrError(runId: $runId) { __typename ... on Run { status stepStats { stepKey status } } }
}
"""

TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}


def _gql(port: int, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = json.loads(resp.read())
    assert "errors" not in body, body.get("errors")
    return body["data"]


def _start(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)   # setsid: own process group


@pytest.mark.integration   # a webserver, a daemon and one multiprocess run (~1-2 min on 2 busy cores)
def test_ui_materialize_all_with_a_dead_source(dead_remote: Settings,  # noqa: F811
                                                tmp_path: Path) -> None:
    home = Path(os.environ["DAGSTER_HOME"])
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = _cli_env(dead_remote)
    port = _free_port()
    web = _start([str(BIN / "dagster-webserver"), "-m", "pipeline.definitions", "-h", "127.0.0.1", "-p", str(port)],
                 env, tmp_path / "webserver.log")
    daemon = _start([str(BIN / "dagster-daemon"), "run", "-m", "pipeline.definitions"], env, tmp_path / "daemon.log")

    def logs() -> str:
        return "\n".join(f"{p.name}:\n{p.read_text(errors='replace')[-3000:]}"
                         for p in (tmp_path / "webserver.log", tmp_path / "daemon.log"))

    try:
        wait_for_webserver(port, lambda: web.poll() is None and daemon.poll() is None, 120, logs)

        nodes = _gql(port, ASSET_NODES)["assetNodes"]
        assert all("__ASSET_JOB" in n["jobNames"] for n in nodes)
        repo = nodes[0]["repository"]
        keys = [{"path": n["assetKey"]["path"]} for n in nodes]
        checks = [{"assetKey": {"path": n["assetKey"]["path"]}, "name": c["name"]}
                  for n in nodes for c in n["assetChecksOrError"].get("checks", [])]
        params = {
            "mode": "default",
            "runConfigData": {},
            "executionMetadata": {"tags": []},
            "selector": {"repositoryLocationName": repo["location"]["name"], "repositoryName": repo["name"],
                         "pipelineName": "__ASSET_JOB", "assetSelection": keys, "assetCheckSelection": checks},
        }
        launched = _gql(port, LAUNCH, {"executionParams": params})["launchPipelineExecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        deadline = time.monotonic() + 600
        while True:
            run = _gql(port, RUN_STATUS, {"runId": run_id})["runOrError"]
            if run["status"] in TERMINAL:
                break
            assert web.poll() is None and daemon.poll() is None, logs()
            assert time.monotonic() < deadline, f"run {run_id} still {run['status']} after 600 s\n" + logs()
            time.sleep(1)
    finally:
        stop_group(daemon)
        stop_group(web)

    # what the UI's run page shows: the run failed, only remote's fetch step is red
    steps = {s["stepKey"]: s["status"] for s in run["stepStats"]}
    assert run["status"] == "FAILURE"
    assert {k for k, v in steps.items() if v == "FAILURE"} == {"remote__raw_docs"}, steps
    assert {k for k, v in steps.items() if v != "SUCCESS"} == {"remote__raw_docs"}, steps
    with dg.DagsterInstance.get() as instance:
        _assert_dead_alone(_run_outcome(instance, run_id))
    assert _searchable(dead_remote)[0] == "docs/Pelicans.md"
