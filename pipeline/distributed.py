"""Dagster entry point of the distributed deployment: the same assets as ``pipeline.definitions``, executed by
``dagster-celery`` workers (``-m pipeline.distributed``), with the instance in PostgreSQL (``deploy/dagster.yaml``).

Every step is a Celery task on the broker; any worker that shares the storage root (``DOCSVAULT_DATA``,
``DOCSVAULT_VAULT``: one mounted volume) runs it. Per-source steps read and write only their own source's files
(``raw/<s>/``, ``notes/<s>.jsonl``, ``chunks/<s>.jsonl``, ``state/<s>.json``, ``vault/<s>/``) plus content-addressed
cache shards that are written no-clobber, so they take no lock (``DOCSVAULT_STAGE_LOCK=off``, set when Dagster
loads :func:`defs`) and can be retried on another worker. The single-writer stages are in the Dagster pool
``docsvault_warehouse``, limited to one
step at a time by ``concurrency: pools: default_limit: 1`` in the deployment's dagster.yaml.

Environment (read by the run process and by every worker: give both the same values):

* ``DOCSVAULT_CELERY_BROKER``: the broker URL (``redis://host:6379/0``); required.
* ``DOCSVAULT_CELERY_BACKEND``: the result backend (default: the broker URL).
* ``DOCSVAULT_CELERY_VISIBILITY_TIMEOUT``: seconds after which a task taken by a worker that died (SIGKILL, lost
  node) is handed to another worker (default 7200). Must exceed the longest step (embedding the biggest source):
  a task still running after it would be started a second time.

Workers: ``celery -A dagster_celery.app worker -Q dagster -n NAME@%h`` with ``deploy/`` (it holds
``dagster_celery_config.py``, which reads the same variables) and the project on ``PYTHONPATH``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from pipeline.common.errors import PipelineError
from pipeline.config import Settings, library_env_default
from pipeline.config import environ as config_environ
from pipeline.defs import build_definitions

BROKER_ENV = "DOCSVAULT_CELERY_BROKER"
BACKEND_ENV = "DOCSVAULT_CELERY_BACKEND"
VISIBILITY_ENV = "DOCSVAULT_CELERY_VISIBILITY_TIMEOUT"
DEFAULT_VISIBILITY_S = 7200


class DeployConfigError(PipelineError):
    """The distributed deployment's environment is incomplete or invalid (the message names the variable)."""


def celery_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Celery settings shared by the run process (the executor) and the workers (``dagster_celery_config``).

    Late acknowledgement: a task is acknowledged when its step has finished, so a task whose worker died is
    redelivered to another worker after the visibility timeout (and at once when only a pool child died).

    Raises:
        DeployConfigError: DOCSVAULT_CELERY_BROKER is not set, or the visibility timeout is not a positive integer.
    """
    env = config_environ() if environ is None else environ
    if not env.get(BROKER_ENV):
        raise DeployConfigError(f"{BROKER_ENV} is not set: give the Celery broker URL, e.g. redis://127.0.0.1:6379/0")
    broker = env[BROKER_ENV]
    raw = env.get(VISIBILITY_ENV) or str(DEFAULT_VISIBILITY_S)
    if not raw.strip().isdigit() or int(raw) <= 0:
        raise DeployConfigError(f"{VISIBILITY_ENV}={raw!r}: give whole seconds above the longest step, e.g. 7200")
    visibility = int(raw)
    transport = {"visibility_timeout": visibility,
                 # sweep for abandoned tasks often enough for the timeout to hold
                 "unacked_restore_interval": max(1, min(10, visibility // 4)), "unacked_restore_throttle": 1}
    return {
        "broker_url": broker,
        "result_backend": env.get(BACKEND_ENV) or broker,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": transport,
        "result_backend_transport_options": transport,
        "broker_connection_retry_on_startup": True,
    }


def celery_executor_def() -> dg.ExecutorDefinition:
    """dagster-celery's executor configured from :func:`celery_settings`."""
    from dagster_celery import celery_executor

    conf = celery_settings()
    source = {k: v for k, v in conf.items() if k not in ("broker_url", "result_backend")}
    return celery_executor.configured({"broker": conf["broker_url"], "backend": conf["result_backend"],
                                       "config_source": source}, name="docsvault_celery")


def distributed_definitions(settings: Settings) -> dg.Definitions:
    """``build_definitions(settings)`` with the Celery executor."""
    base = build_definitions(settings)
    return dg.Definitions(assets=base.assets, asset_checks=base.asset_checks, jobs=base.jobs,
                          schedules=base.schedules, sensors=base.sensors, resources=base.resources,
                          executor=celery_executor_def())


@dg.definitions
def defs() -> dg.Definitions:
    # every process that loads these definitions (run process, Celery workers) runs stages without the host-local
    # lock; set here rather than at import, so importing the module (tests, tools) changes nothing
    library_env_default("DOCSVAULT_STAGE_LOCK", "off")
    return distributed_definitions(Settings.from_env())
