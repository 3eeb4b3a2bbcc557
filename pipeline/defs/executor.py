"""The executor: Dagster's own (multiprocess by default, in-process by config) with non-blocking dependencies.

A source that fails (unreachable, nothing parsable) must not stop the shared stages from building over the other
sources and the failed source's last good copy. Each per-source asset therefore records what it serves now and
fails its blocking ``succeeded`` check (the step turns red, the run fails); with
``step_dependency_config.require_upstream_step_success: false`` downstream steps then run on that output instead
of being skipped. A step that fails without an output (a bug) still stops everything downstream of it.

Run config, as for ``dg.multi_or_in_process_executor``::

    execution:
      config:
        multiprocess:          # the default: one process per step, pools decide what runs at once
          max_concurrent: 4
    # or
    execution:
      config:
        in_process: {}         # `docsvault build` uses this

``step_dependency_config`` may be given explicitly; when it is not, it is ``require_upstream_step_success: false``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dagster as dg

if TYPE_CHECKING:
    from pipeline.config import Settings

NON_BLOCKING = {"require_upstream_step_success": False}

IN_PROCESS_RUN_CONFIG: dict[str, Any] = {"execution": {"config": {"in_process": {}}}}


def _with_non_blocking(config: Any) -> dict[str, Any]:
    mode, opts = next(iter(dict(config or {"multiprocess": {}}).items()))
    opts = dict(opts or {})
    opts.setdefault("step_dependency_config", dict(NON_BLOCKING))
    return {mode: opts}


def _requirements(config: Any) -> Any:
    return dg.multi_or_in_process_executor.get_requirements(config)   # as Dagster's default executor


@dg.executor(
    name="docsvault_executor",
    config_schema=dg.multi_or_in_process_executor.config_schema,
    requirements=_requirements,
)
def docsvault_executor(init_context: dg.InitExecutorContext) -> Any:
    """``multi_or_in_process_executor`` whose steps wait for their upstream *outputs*, not upstream success."""
    context = init_context._replace(executor_config=_with_non_blocking(init_context.executor_config))
    return dg.multi_or_in_process_executor.executor_creation_fn(context)  # type: ignore[misc]


def executor_defs() -> dg.Definitions:
    return dg.Definitions(executor=docsvault_executor)


@dg.definitions
def executor() -> dg.Definitions:
    return executor_defs()


def release_dead_builds(settings: Settings, instance: dg.DagsterInstance) -> list[str]:
    """Release the runs of a ``docsvault build`` that died (:func:`release_build_runs`) when no build runs now;
    the upstream-change sensor calls it, so a daemon-only deployment is not left waiting for the pool slot a killed
    build's step held, and the slots of runs that have ended (:func:`free_slots_of_ended_runs`, also while a build
    runs). Returns the run ids released."""
    from pipeline.common.errors import BuildLockedError
    from pipeline.common.lock import build_run_lock

    try:
        with build_run_lock(settings.data_dir, wait=0):
            return release_build_runs(instance)
    except BuildLockedError:
        return free_slots_of_ended_runs(instance)


def release_build_runs(instance: dg.DagsterInstance) -> list[str]:
    """Runs of ``docsvault build`` still marked in progress are from a build process that died (killed, power cut):
    the caller holds ``build-run.lock``, so no other build runs. Each is reported failed and its pool slots are freed,
    or the single-writer stages of every later build would wait forever for the slot a dead step still holds
    ("Step blocked by limit for pool docsvault_warehouse"). Returns the run ids released."""
    released = []
    in_progress = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.QUEUED,
                   dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.CANCELING]
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=in_progress, tags={"docsvault/run": "build"})):
        instance.report_run_failed(run, message="the docsvault build process of this run is gone (killed); "
                                                "the next build released its pool slots")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released + free_slots_of_ended_runs(instance)


def free_slots_of_ended_runs(instance: dg.DagsterInstance) -> list[str]:
    """Free the pool slots still claimed (or waited for) by runs that have ended or are gone from the instance.

    A run whose worker was killed (out of memory, ``kill -9``, a crashed host) is marked failed by Dagster's run
    monitoring or the UI, but the slot its running step had claimed stays claimed: every later run of that pool
    (``docsvault_source_<source>``, ``docsvault_warehouse``) would wait in the queue for good. Any run, whoever
    launched it, that is finished (success, failure, canceled) or deleted holds nothing. Returns the run ids freed.
    """
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    freed = []
    for run_id in sorted(storage.get_concurrency_run_ids()):
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            storage.free_concurrency_slots_for_run(run_id)
            freed.append(run_id)
    return freed
