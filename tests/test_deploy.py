"""The distributed deployment's wiring without servers: Celery settings from the environment, the Celery executor
on the same assets, single-writer stages in one Dagster pool, and the stage lock switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import stages as build
from pipeline.common.lock import LOCK_NAME
from pipeline.config import Settings

REPO = Path(__file__).resolve().parents[1]


def test_celery_settings_from_environment() -> None:
    from pipeline.distributed import DeployConfigError, celery_settings

    conf = celery_settings({"DOCSVAULT_CELERY_BROKER": "redis://127.0.0.1:6379/0",
                            "DOCSVAULT_CELERY_VISIBILITY_TIMEOUT": "60"})
    assert conf == {
        "broker_url": "redis://127.0.0.1:6379/0", "result_backend": "redis://127.0.0.1:6379/0",
        "task_acks_late": True, "task_reject_on_worker_lost": True, "worker_prefetch_multiplier": 1,
        "broker_transport_options": {"visibility_timeout": 60, "unacked_restore_interval": 10,
                                     "unacked_restore_throttle": 1},
        "result_backend_transport_options": {"visibility_timeout": 60, "unacked_restore_interval": 10,
                                             "unacked_restore_throttle": 1},
        "broker_connection_retry_on_startup": True,
    }
    assert celery_settings({"DOCSVAULT_CELERY_BROKER": "redis://b", "DOCSVAULT_CELERY_BACKEND": "redis://r"}
                           )["result_backend"] == "redis://r"
    with pytest.raises(DeployConfigError, match=r"^DOCSVAULT_CELERY_BROKER is not set: give the Celery broker URL"):
        celery_settings({})
    with pytest.raises(DeployConfigError, match=r"^DOCSVAULT_CELERY_VISIBILITY_TIMEOUT='1h': give whole seconds"):
        celery_settings({"DOCSVAULT_CELERY_BROKER": "redis://b", "DOCSVAULT_CELERY_VISIBILITY_TIMEOUT": "1h"})


def test_distributed_definitions_use_celery_and_pool_the_single_writers(tiny_env: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from pipeline.distributed import distributed_definitions

    monkeypatch.setenv("DOCSVAULT_CELERY_BROKER", "redis://127.0.0.1:1/0")
    defs = distributed_definitions(Settings.from_env())
    dg.Definitions.validate_loadable(defs)
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == "docsvault_celery"
    pools = {node.name: node.definition.pool for node in job.graph.nodes}
    assert {name for name, pool in pools.items() if pool == "docsvault_warehouse"} == {
        "link_graph", "warehouse", "retrieval_eval"}
    assert {pool for name, pool in pools.items() if name.startswith("tiny__")} == {"docsvault_source_tiny"}


def test_deploy_instance_yaml_limits_the_pool() -> None:
    import yaml

    conf = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text(encoding="utf-8"))
    assert conf["concurrency"]["pools"] == {"default_limit": 1}
    assert conf["storage"]["postgres"] == {"postgres_url": {"env": "DAGSTER_PG_URL"}}
    assert conf["telemetry"] == {"enabled": False}


def test_importing_the_distributed_entry_point_changes_no_environment() -> None:
    import subprocess
    import sys

    code = "import os, pipeline.distributed; print(os.environ.get('DOCSVAULT_STAGE_LOCK'))"
    env = {k: v for k, v in __import__("os").environ.items() if k != "DOCSVAULT_STAGE_LOCK"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=REPO)
    assert out.stdout.strip() == "None"


def test_stage_lock_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env(data_dir=tmp_path / "data")
    lock = settings.data_dir / LOCK_NAME
    monkeypatch.setenv("DOCSVAULT_STAGE_LOCK", "off")
    with build.stage_lock(settings):
        assert not lock.exists()
    monkeypatch.delenv("DOCSVAULT_STAGE_LOCK")
    with build.stage_lock(settings):
        assert lock.read_text(encoding="utf-8") != ""        # held: names this process
