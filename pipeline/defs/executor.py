"""The executor: Dagster's own (in-process by default, multiprocess by config) with non-blocking dependencies.

A source that fails (unreachable, nothing parsable) must not stop the shared stages from building over the other
sources and the failed source's last good copy. Each per-source asset therefore records what it serves now and
fails its blocking ``ran_without_error`` check (the step turns red, the run fails); with
``step_dependency_config.require_upstream_step_success: false`` downstream steps then run on that output instead
of being skipped. A step that fails without an output (a bug) still stops everything downstream of it.

Run config, as for ``dg.multi_or_in_process_executor``, whose default is turned round::

    execution:
      config:
        in_process: {}         # the default (`docsvault build`, the UI, schedules, sensors, `dagster asset
                               # materialize`, `dg launch`): every step in the run's own process
    # or
    execution:
      config:
        multiprocess:          # one process per step, pools decide what runs at once
          max_concurrent: 4

Why in-process by default: a step process starts in ~2-3 s (Python, Dagster and the pipeline's imports) and a
build has 6 steps per source plus 4 shared ones. After a one-note edit of a two-source vault,
``dagster asset materialize --select '*'`` took 42.9 / 44.6 s multiprocess against 9.3 / 7.7 s in-process
(README, "Dagster"); on a full build of three corpora the parallel chains gained nothing on two cores (828 against
825 s, ``bench/dagster_parallel.py``): embedding already uses every core.

``step_dependency_config`` may be given explicitly; when it is not, it is ``require_upstream_step_success: false``.

In process, a step whose pool slot another run holds waits for it asleep and stops on Ctrl-C
(:class:`PoolSlotWait`); Dagster's own in-process loop spun at 100 % CPU and deferred Ctrl-C until the slot freed.
The multiprocess loop spun the same way while no child step ran (:class:`MultiprocessPoolSlotWait`).

Every run this executor executes records the process that runs it (run tags :data:`HOST_TAG`, :data:`PID_TAG`,
:data:`PID_START_TAG`, :data:`PID_RUN_TAG`: :func:`record_run_process`), so a run whose process was killed
(``kill -9`` of a ``dagster asset materialize``: nothing else ever marks it) is reported failed and its pool slots
freed by :func:`release_runs_of_dead_processes` on the same host: at a build's start, on the sensor's ticks and while
a step of another run waits for a slot it holds.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.errors import raise_execution_interrupts
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import ExecuteRunWithPlanIterable
from dagster._core.execution.context_creation_job import PlanExecutionContextManager
from dagster._core.execution.plan.execute_plan import inner_plan_execution_iterator
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.executor import multiprocess
from dagster._core.executor.in_process import InProcessExecutor
from dagster._core.executor.multiprocess import MultiprocessExecutor
from dagster._utils.timing import time_execution_scope
from dagster_shared.utils.timing import format_duration

if TYPE_CHECKING:
    from dagster._core.execution.context.system import PlanExecutionContext, PlanOrchestrationContext
    from dagster._core.execution.plan.plan import ExecutionPlan

    from pipeline.config import Settings

log = logging.getLogger(__name__)

NON_BLOCKING = {"require_upstream_step_success": False}

IN_PROCESS_RUN_CONFIG: dict[str, Any] = {"execution": {"config": {"in_process": {}}}}


#: the run config's ``execution.config`` when a run gives none (:data:`CONFIG_SCHEMA`)
DEFAULT_MODE: dict[str, Any] = {"in_process": {}}

#: ``multi_or_in_process_executor``'s config (the ``multiprocess`` / ``in_process`` selector), defaulting to
#: :data:`DEFAULT_MODE`
CONFIG_SCHEMA = dg.Field(dg.Selector(dict(dg.multi_or_in_process_executor.config_schema.as_field().config_type.fields)),
                         default_value=DEFAULT_MODE)


def _with_non_blocking(config: Any) -> dict[str, Any]:
    mode, opts = next(iter(dict(config or DEFAULT_MODE).items()))
    opts = dict(opts or {})
    opts.setdefault("step_dependency_config", dict(NON_BLOCKING))
    return {mode: opts}


#: run tags naming the process that executes a run (:func:`record_run_process`): its host (``socket.gethostname()``),
#: pid, start (:func:`process_start`) and the run they were recorded for (a re-executed run may copy its parent's
#: tags, which name the parent's process). Under Dagster's hidden-tag prefix (``.dagster/``), as Dagster's own run
#: worker and gRPC tags are: bookkeeping, not for the Runs page, where four such tags took a run's whole row
#: (session 37; runs recorded before carry them as ``docsvault/host`` …, read too: :func:`process_tags`)
HOST_TAG, PID_TAG, PID_START_TAG, PID_RUN_TAG = (f".dagster/docsvault/{name}" for name in ("host", "pid", "pid_start",
                                                                                        "pid_run"))
_PROCESS_TAGS = (HOST_TAG, PID_TAG, PID_START_TAG, PID_RUN_TAG)


def process_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The process tags (:data:`HOST_TAG` …) of a run's ``tags``, also of a run that recorded them under their
    names before session 37 (``docsvault/host`` …), by the current names."""
    return {name: tags[name] if name in tags else tags[name.removeprefix(".dagster/")]
            for name in _PROCESS_TAGS if name in tags or name.removeprefix(".dagster/") in tags}

#: statuses of a run whose process may have been killed (:func:`release_runs_of_dead_processes`)
EXECUTING = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]

#: seconds between two looks, by a step waiting for a pool slot another run holds, for runs that ended (the UI's
#: Terminate) or whose process is gone (:meth:`PoolSlotWait.claim`): two queries of the instance
DEAD_RUN_CHECK_SECONDS = 5.0


@cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state, start)`` of process ``pid`` from ``/proc/<pid>/stat`` (state ``Z``: a zombie; start:
    ``<boot id>:<start time in clock ticks after boot>``); ``("", "")`` when there is no such process, None when this
    system has no ``/proc`` (not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ("", "") if Path("/proc/self/stat").exists() else None
    fields = stat[stat.rindex(")") + 2:].split()          # the name (2nd field) may hold spaces and parentheses
    return fields[0], f"{_boot_id()}:{fields[19]}"


def process_start(pid: int) -> str:
    """When process ``pid`` of this host started, as an opaque string that differs for a later process given the
    same pid (Linux: boot id and start time in clock ticks); "" when unknown (no ``/proc``, no such process)."""
    stat = _proc_stat(pid)
    return stat[1] if stat else ""


def process_alive(pid: int, start: str = "") -> bool:
    """True when process ``pid`` of this host runs (a zombie does not) and, when ``start`` is given
    (:func:`process_start`) and this system tells, it is the process that started then, not a later one reusing the
    pid. Without ``/proc`` only the pid is checked."""
    from pipeline.common.lock import pid_alive

    if not pid_alive(pid):
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, started = stat
    return bool(state) and state not in "ZX" and (not start or started == start)


def record_run_process(instance: dg.DagsterInstance, run_id: str) -> None:
    """Tag run ``run_id`` with the process that executes it (this one): :data:`HOST_TAG`, :data:`PID_TAG`,
    :data:`PID_START_TAG` (when known) and :data:`PID_RUN_TAG`, read by :func:`release_runs_of_dead_processes`."""
    pid = os.getpid()
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), PID_START_TAG: process_start(pid), PID_RUN_TAG: run_id}
    instance.add_run_tags(run_id, {k: v for k, v in tags.items() if v})


def release_runs_of_dead_processes(instance: dg.DagsterInstance) -> list[str]:
    """Report failed, and free the pool slots of, each run still executing (STARTING, STARTED, CANCELING) whose
    process (:func:`record_run_process`) ran on this host and is gone: its pid is not alive, is a zombie, or is a
    later process's (another start time). Such a run (a ``dagster asset materialize`` killed with ``kill -9``) stays
    STARTED for good: no daemon watches an in-process run, and every later run of its pools
    (``docsvault_source_<slug>``, ``docsvault_warehouse``) waited for it. A run of another host (a team deployment's
    shared instance), one without these tags (another executor, an older docsvault) or one whose tags were recorded
    for another run (copied from the parent of a re-execution) is never touched. One warning is logged per run.

    Returns:
        The run ids released, sorted.
    """
    host = socket.gethostname()
    released = []
    records = [r for name in (HOST_TAG, HOST_TAG.removeprefix(".dagster/"))      # the tag's name now and before
               for r in instance.get_run_records(filters=dg.RunsFilter(statuses=EXECUTING, tags={name: host}))]
    for record in sorted({r.dagster_run.run_id: r for r in records}.values(), key=lambda r: r.create_timestamp):
        run = record.dagster_run                                               # oldest first
        tags = process_tags(run.tags)
        if tags.get(PID_RUN_TAG) != run.run_id:
            continue
        try:
            pid = int(tags.get(PID_TAG, ""))
        except ValueError:
            continue
        if process_alive(pid, tags.get(PID_START_TAG, "")):
            continue
        current = instance.get_run_by_id(run.run_id)       # its process may have ended it just before it exited
        if current is None or current.status not in EXECUTING:
            continue
        instance.report_run_failed(current, message=f"the process of this run (pid {pid} on {host}) is gone (killed); "
                                                    "docsvault marked the run failed and freed its pool slots")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        log.warning("run %s: its process (pid %d on this host) is gone (killed); marked it failed and freed its pool "
                    "slots", run.run_id, pid)
        released.append(run.run_id)
    return sorted(released)


#: seconds between two attempts of an in-process step to claim a pool slot another run holds (Dagster backs off
#: from 1 s to 15 s; one SQLite query a second costs nothing, and the step starts within a second of the slot freeing)
POOL_POLL_SECONDS = 1.0


class PoolSlotWait(InstanceConcurrencyContext):
    """Dagster's pool-slot bookkeeping of an in-process run, waiting asleep and interruptibly for a held slot.

    Dagster 1.13's :meth:`InstanceConcurrencyContext.interval_to_next_pending_claim_check` returns
    ``min([0, *intervals])``, never more than 0, so ``ActiveExecution.sleep_til_ready`` never sleeps and the step loop
    (``inner_plan_execution_iterator``) spins at 100 % CPU while a step waits for its slot; and the loop runs under
    ``capture_interrupts``, which only records a Ctrl-C until the next step's body starts, i.e. after the slot
    frees. Here the wait until the next claim attempt is slept, with SIGINT/SIGTERM raising
    ``DagsterExecutionInterruptedError`` (the run ends as failed, its pending claims are freed by ``__exit__``, and
    :func:`pipeline.defs.runner.run_build` raises ``BuildInterrupted``); claims are retried every
    :data:`POOL_POLL_SECONDS` at most.

    It is made when the run's steps start (in the run's process, in process or multiprocess), and records that
    process in the run's tags (:func:`record_run_process`). While a claim waits, the runs that ended (the UI's
    Terminate) or whose process is gone are released every :data:`DEAD_RUN_CHECK_SECONDS` (the first time at the
    first refused claim): :func:`free_slots_of_ended_runs`, :func:`release_runs_of_dead_processes`; the next attempt
    then gets the slot, so a step waiting for a killed run's slot goes on by itself.
    """

    def __init__(self, instance: dg.DagsterInstance, dagster_run: Any) -> None:
        super().__init__(instance, dagster_run)
        self._last_dead_check = float("-inf")
        record_run_process(instance, dagster_run.run_id)

    def claim(self, concurrency_key: str, step_key: str, step_priority: int = 0) -> bool:
        claimed = super().claim(concurrency_key, step_key, step_priority)
        if not claimed and step_key in self._pending_timeouts:
            self._pending_timeouts[step_key] = min(self._pending_timeouts[step_key], time.time() + POOL_POLL_SECONDS)
            if time.monotonic() - self._last_dead_check >= DEAD_RUN_CHECK_SECONDS:
                self._last_dead_check = time.monotonic()
                if release_runs_of_dead_processes(self._instance) + free_slots_of_ended_runs(self._instance):
                    self._pending_timeouts[step_key] = 0.0        # the next attempt is due at once
        return claimed

    def interval_to_next_pending_claim_check(self) -> float:
        """Sleep until the next claim attempt is due (at most :data:`POOL_POLL_SECONDS`), stopping at once on
        SIGINT/SIGTERM, also one received since the last step; returns 0 (the caller then sleeps no more)."""
        now = time.time()
        due = [ready_at for step, ready_at in self._pending_timeouts.items() if step in self._pending_claims]
        seconds = min(POOL_POLL_SECONDS, max(0.0, min(due, default=now + POOL_POLL_SECONDS) - now))
        with raise_execution_interrupts():
            time.sleep(seconds)
        return 0.0


#: seconds a pass of the multiprocess executor's step loop sleeps when it came round at once (no child step to wait
#: on) while steps wait for pool slots: Dagster's own tick for polling a child step
MULTIPROCESS_TICK = 0.02


class MultiprocessPoolSlotWait(PoolSlotWait):
    """:class:`PoolSlotWait` for Dagster's multiprocess executor (the UI's, a schedule's, `dagster asset materialize`).

    Its step loop (``MultiprocessExecutor.execute``) sleeps only while it polls a running child step (20 ms); when
    every ready step waits for a slot another run holds and no child runs, it spun at 100 % CPU, one of the cores
    that other run builds on (measured: 2.1 s of CPU in 3 s of waiting). The loop asks for the pending claims once
    a pass (``ActiveExecution.concurrency_event_iterator``); a pass that comes round within a quarter tick of the
    last one, with claims pending, sleeps :data:`MULTIPROCESS_TICK` first. A pass that polled a child took longer
    and does not sleep, so events of running steps are not delayed while nothing waits."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_look = 0.0

    def pending_claim_steps(self) -> list[str]:
        steps = super().pending_claim_steps()
        now = time.monotonic()
        if steps and now - self._last_look < MULTIPROCESS_TICK / 4:
            time.sleep(MULTIPROCESS_TICK)
            now = time.monotonic()
        self._last_look = now
        return steps


#: run statuses that the UI's Terminate (or ``instance.report_run_canceling``) gives a run
TERMINATING = (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)
#: the end of the message of the interruption that stops a terminated run (:class:`InProcessPoolSlotWait`)
TERMINATED_SUFFIX = ": terminated, no further step starts"


class InProcessPoolSlotWait(PoolSlotWait):
    """:class:`PoolSlotWait` of an in-process run, which also stops the run between two steps once it is terminated.

    An in-process run (``docsvault build``, ``dg launch``, ``dagster asset materialize``, a sensor's or the UI's run
    without a run worker of its own) has no process the UI can signal: its Terminate marked the run CANCELING, said
    "Unable to terminate run", and the run went on to publish the warehouse (Force termination marked it CANCELED
    while it still ran, and the refresh sensor then requested the unfinished chain again). Dagster's step loop
    asks its concurrency context for the pending claims once between two steps
    (``ActiveExecution.concurrency_event_iterator``); here that also looks at the run's status (one query of the
    instance), and a run marked CANCELING or CANCELED raises ``DagsterExecutionInterruptedError`` there, out of the
    loop: the step running when Terminate was pressed has finished (no stage stops half-written), no further step
    starts, and Dagster ends the run as a terminated one (CANCELING becomes CANCELED)."""

    def pending_claim_steps(self) -> list[str]:
        run = self._instance.get_run_by_id(self._run_id)
        if run is not None and run.status in TERMINATING:
            from dagster._core.errors import DagsterExecutionInterruptedError

            raise DagsterExecutionInterruptedError(f"run {self._run_id} is {run.status.value}{TERMINATED_SUFFIX}")
        return super().pending_claim_steps()


def _in_process_iterator(job_context: PlanExecutionContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
    """``dagster._core.executor.in_process.inprocess_execution_iterator`` with :class:`InProcessPoolSlotWait`."""
    with InProcessPoolSlotWait(job_context.instance, job_context.dagster_run) as concurrency:
        yield from inner_plan_execution_iterator(job_context, execution_plan, concurrency)


class InProcessPoolWaitExecutor(InProcessExecutor):
    """Dagster's in-process executor whose steps wait for a held pool slot asleep and interruptibly
    (:class:`PoolSlotWait`): ``InProcessExecutor.execute`` of Dagster 1.13 with :func:`_in_process_iterator`."""

    def execute(self, plan_context: PlanOrchestrationContext,
                execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        steps, pid = execution_plan.step_keys_to_execute, os.getpid()
        warning = whole_job_warning(plan_context.dagster_run)
        if warning:
            plan_context.log.warning(warning)
        yield DagsterEvent.engine_event(plan_context, f"Executing steps in process (pid: {pid})",
                                        event_specific_data=EngineEventData.in_process(pid, steps))
        with time_execution_scope() as timer:
            yield from iter(ExecuteRunWithPlanIterable(
                execution_plan=plan_context.execution_plan,
                iterator=_in_process_iterator,
                execution_context_manager=PlanExecutionContextManager(
                    job=plan_context.job, retry_mode=plan_context.retry_mode,
                    execution_plan=plan_context.execution_plan, run_config=plan_context.run_config,
                    dagster_run=plan_context.dagster_run, instance=plan_context.instance,
                    raise_on_error=plan_context.raise_on_error, output_capture=plan_context.output_capture,
                    step_dependency_config=self.step_dependency_config)))
        yield DagsterEvent.engine_event(
            plan_context, f"Finished steps in process (pid: {pid}) in {format_duration(timer.millis)}",
            event_specific_data=EngineEventData.in_process(pid, steps))


#: what a run of every asset without an asset selection logs first (:func:`whole_job_warning`)
WHOLE_JOB_WARNING = (
    "this run builds every asset: it has no asset selection. A --select (dagster asset materialize) or --assets "
    "(dg launch) that matches no asset, such as a misspelt key or a source's name with '-' instead of its group "
    "'obsidian_help', runs them all (Dagster's own behaviour, exit status 0); `dg list defs` without --assets lists "
    "the keys and groups")


def whole_job_warning(dagster_run: Any) -> str | None:
    """:data:`WHOLE_JOB_WARNING` for a run of the implicit asset job without an asset selection, else None.

    Dagster's ``dagster asset materialize --select`` and ``dg launch --assets`` resolve a selection that matches
    no asset (``key:warehous``, ``group:"obsidian-help"``) to the empty list, which ``execute_job`` takes as no
    selection: every asset of every source was built and the command exited 0 (an operator's CI typo, session
    40). A selection that matches assets (``'*'`` too), the UI's, a sensor's and ``docsvault build``'s runs name
    their assets, so only such a run has none."""
    from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME

    if dagster_run.job_name == IMPLICIT_ASSET_JOB_NAME and dagster_run.asset_selection is None:
        return WHOLE_JOB_WARNING
    return None


def _requirements(config: Any) -> Any:
    return dg.multi_or_in_process_executor.get_requirements(config)   # as Dagster's default executor


@dg.executor(
    name="docsvault_executor",
    config_schema=CONFIG_SCHEMA,
    requirements=_requirements,
)
def docsvault_executor(init_context: dg.InitExecutorContext) -> Any:
    """``multi_or_in_process_executor`` whose steps wait for their upstream *outputs*, not upstream success, in
    process unless the run config asks for ``multiprocess``."""
    context = init_context._replace(executor_config=_with_non_blocking(init_context.executor_config))
    executor = dg.multi_or_in_process_executor.executor_creation_fn(context)  # type: ignore[misc]
    if type(executor) is InProcessExecutor:      # the same settings; steps wait for a held pool slot asleep
        executor = InProcessPoolWaitExecutor(retries=executor.retries,
                                             step_dependency_config=executor.step_dependency_config,
                                             marker_to_close=executor.marker_to_close)
    elif isinstance(executor, MultiprocessExecutor):
        # its execute() makes the concurrency context by this module-level name: one attribute, in the run worker
        # process that executes this job, instead of a copy of Dagster's 200-line step loop
        multiprocess.InstanceConcurrencyContext = MultiprocessPoolSlotWait   # type: ignore[misc]
    return executor


def executor_defs() -> dg.Definitions:
    return dg.Definitions(executor=docsvault_executor)


@dg.definitions
def executor() -> dg.Definitions:
    return executor_defs()


def release_dead_builds(settings: Settings, instance: dg.DagsterInstance) -> list[str]:
    """Release the runs of a ``docsvault build`` that died (:func:`release_build_runs`) when no build runs now;
    the upstream-change sensor calls it, so a daemon-only deployment is not left waiting for the pool slot a killed
    build's step held, and (also while a build runs) the runs of this host whose process is gone
    (:func:`release_runs_of_dead_processes`) and the slots of runs that have ended (:func:`free_slots_of_ended_runs`).
    Returns the run ids released, sorted."""
    from pipeline.common.errors import BuildLockedError
    from pipeline.common.lock import build_run_lock

    dead = release_runs_of_dead_processes(instance)
    try:
        with build_run_lock(settings.data_dir, wait=0, brief="the upstream_change sensor's tick"):
            return sorted(set(dead + release_build_runs(instance)))
    except BuildLockedError:
        return sorted(set(dead + free_slots_of_ended_runs(instance)))


def release_build_runs(instance: dg.DagsterInstance) -> list[str]:
    """Runs of ``docsvault build`` still marked in progress are from a build process that died (killed, power cut):
    the caller holds ``build-run.lock``, so no other build runs. Each is reported failed and its pool slots are freed,
    or the single-writer stages of every later build would wait forever for the slot a dead step still holds
    ("Step blocked by limit for pool docsvault_warehouse"); so are the slots of runs that ended
    (:func:`free_slots_of_ended_runs`). Returns the run ids released."""
    return [run_id for run_id, _ in release_killed_builds(instance)] + free_slots_of_ended_runs(instance)


def release_killed_builds(instance: dg.DagsterInstance) -> list[tuple[str, float]]:
    """The killed builds' part of :func:`release_build_runs` (call it holding ``build-run.lock``): each run
    of ``docsvault build`` still marked in progress is reported failed and its pool slots are freed.

    Returns:
        ``(run id, start)`` of each, oldest first; ``start`` in epoch seconds (when the run started, else when
        it was created).
    """
    released = []
    in_progress = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.QUEUED,
                   dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.CANCELING]
    build_runs = dg.RunsFilter(statuses=in_progress, tags={"docsvault/run": "build"})
    for record in instance.get_run_records(filters=build_runs):
        run = record.dagster_run
        instance.report_run_failed(run, message="the docsvault build process of this run is gone (killed); "
                                                "the next build released its pool slots")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append((run.run_id, record.start_time or record.create_timestamp.timestamp()))
    return sorted(released, key=lambda r: r[1])


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
