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

The run process executes dagster-celery's executor wrapped in :class:`DocsvaultCeleryExecutor`: it records its
process (``.dagster/docsvault/host``, ``.dagster/docsvault/pid``...: hidden in the UI) and the run's resolved data and vault folders
(``docsvault/data_dir``, ``docsvault/vault_dir``) in the run's tags; it releases, at its start and every few
seconds while it executes (:class:`HeldPoolWatch`), the runs of this host whose process is gone and the slots
of runs that ended, and says in the run's log which run holds a pool its steps wait for. Every step a worker
runs compares its folders with the run's tags and fails at once on a mismatch
(:meth:`pipeline.defs.resources.DocsvaultResource.check_run_folders`).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.step_dependency_config import StepDependencyConfig

from pipeline.common.errors import PipelineError
from pipeline.config import Settings, library_env_default
from pipeline.config import environ as config_environ
from pipeline.defs import build_definitions
from pipeline.defs import executor as docsvault_executor
from pipeline.defs.executor import (
    free_slots_of_ended_runs,
    record_run_process,
    release_runs_of_dead_processes,
)
from pipeline.defs.resources import (
    DATA_DIR_TAG,
    SOURCES_DIGEST_TAG,
    SOURCES_FILE_TAG,
    forget_changed_sources,
    loaded_sources_digest,
    run_code_tags,
    run_folder_tags,
    run_force_tags,
    run_model_tags,
)

if TYPE_CHECKING:
    from dagster._core.execution.context.system import PlanOrchestrationContext
    from dagster._core.execution.plan.active import ActiveExecution
    from dagster._core.execution.retries import RetryMode

log = logging.getLogger(__name__)

BROKER_ENV = "DOCSVAULT_CELERY_BROKER"
BACKEND_ENV = "DOCSVAULT_CELERY_BACKEND"
VISIBILITY_ENV = "DOCSVAULT_CELERY_VISIBILITY_TIMEOUT"
DEFAULT_VISIBILITY_S = 7200


class DeployConfigError(PipelineError):
    """The distributed deployment's environment is incomplete or invalid (the message names the variable)."""


#: Python warnings that ``dagster asset materialize -m pipeline.distributed`` printed on every run, known harmless
#: and not actionable by whoever runs the build, as ``(message regex, category name, module regex)``; silenced by
#: :func:`quiet_known_warnings` (only these: every other warning, of these categories too, is still shown):
KNOWN_HARMLESS_WARNINGS = (
    # Dagster's own parse of `--select '*'` calls AssetSelection.all(include_sources=…), a parameter in beta; no
    # code of docsvault's uses it and the user has nothing to change
    (r"Parameter `include_sources` of function `AssetSelection\.all`", "BetaWarning", r"dagster\."),
    # dagster-celery's executor calls create_task(app) for every step it submits, and Celery warns, once per run
    # process, that the task name 'execute_plan' is registered already: it is the same task (dagster-celery's
    # design), whose first registration is the one Celery uses
    (r"Task name 'execute_plan' is already registered", "DuplicateTaskNameWarning", r"dagster_celery\."),
)
# Not silenced: Dagster's SupersessionWarning for `dagster asset materialize` (printed before this module loads;
# `dg launch` is its successor) and Celery's SecurityWarning for a worker run as root (run it as another user).


def quiet_known_warnings() -> None:
    """Ignore the warnings of :data:`KNOWN_HARMLESS_WARNINGS` in this process (Dagster loads :func:`defs` in the
    run process and in every worker before the warnings are raised)."""
    from celery.exceptions import DuplicateTaskNameWarning

    categories: dict[str, type[Warning]] = {"BetaWarning": dg.BetaWarning,
                                            "DuplicateTaskNameWarning": DuplicateTaskNameWarning}
    for message, category, module in KNOWN_HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=categories[category], module=module)


#: a line of Dagster's console log: ``2026-12-06 08:25:31 +0000 - dagster - DEBUG - …``
_DAGSTER_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} - dagster - (DEBUG|INFO) - ")


class DagsterLinesAtTheirLevel(logging.Filter):
    """For Celery's ``celery.redirected`` logger in a worker: a Celery worker logs every line a step prints as a
    WARNING (``worker_redirect_stdouts_level``), so each of Dagster's DEBUG and INFO event lines (``STEP_START``,
    ``ASSET_MATERIALIZATION``, …, 25 a step) came as ``WARNING/MainProcess``. Such a line gets its own level
    back, and is dropped when the worker's ``--loglevel`` is above it; every other line (Dagster's WARNING and
    ERROR lines, tracebacks, prints) stays a WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        m = _DAGSTER_LINE.match(str(record.msg)) if record.levelno == logging.WARNING else None
        if m is None:
            return True
        level = logging.DEBUG if m.group(1) == "DEBUG" else logging.INFO
        record.levelno, record.levelname = level, logging.getLevelName(level)
        return logging.getLogger(record.name).isEnabledFor(level)


#: the step keys in the first event of dagster-celery's task result (``"text": "a__raw_docs"}, "label": "step_keys"``)
_STEP_KEYS = re.compile(r'"text": "([^"]+)"\}, "label": "step_keys"')


class StepResultInBrief(logging.Filter):
    """For Celery's ``celery.app.trace`` logger in a worker: its INFO line for a finished task ends with the task's
    return value, for dagster-celery's ``execute_plan`` the step's serialized Dagster events (~1.2 KB of JSON cut
    off by Celery, two thirds of a worker's log at ``--loglevel INFO``). That value becomes the step it ran:
    ``Task execute_plan[…] succeeded in 3.46s: step recipes__raw_docs``. Other tasks' lines stay as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping) and args.get("name") == "execute_plan" and "return_value" in args:
            keys = _STEP_KEYS.search(str(args["return_value"]))
            record.args = {**args, "return_value": f"step {keys.group(1)}" if keys else "Dagster events of its step"}
        return True


def quiet_worker_output(logger: str = "celery.redirected") -> None:
    """Give a worker's redirected Dagster lines their own level (:class:`DagsterLinesAtTheirLevel`; once per
    logger), shorten its lines for finished steps (:class:`StepResultInBrief`) and ignore
    :data:`KNOWN_HARMLESS_WARNINGS`: called by ``deploy/dagster_celery_config.py``."""
    target = logging.getLogger(logger)
    if not any(isinstance(f, DagsterLinesAtTheirLevel) for f in target.filters):
        target.addFilter(DagsterLinesAtTheirLevel())
    trace = logging.getLogger("celery.app.trace")
    if not any(isinstance(f, StepResultInBrief) for f in trace.filters):
        trace.addFilter(StepResultInBrief())
    quiet_known_warnings()


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


#: seconds between two repeats of one "pool X is held by run Y" line while this run's steps wait for it
#: (:class:`HeldPoolWatch`); a line that changes (another holder, another status) is said at once
WAIT_NOTICE_SECONDS = 60.0


class _Periodic:
    """A context manager that calls :meth:`tick` every ``period`` seconds on a daemon thread while it is entered
    (the thread ends at exit)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def period(self) -> float:
        """Seconds between two ticks (:data:`WAIT_NOTICE_SECONDS`)."""
        return WAIT_NOTICE_SECONDS

    def tick(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.tick()

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period)


class HeldPoolWatch(_Periodic):
    """What a distributed run's process does about the pool slots its steps wait for, on a daemon thread every
    :data:`pipeline.defs.executor.DEAD_RUN_CHECK_SECONDS` (5 s) while the run executes.

    Dagster-celery's run loop claims the slots of the run's steps in the run process and waits, silently,
    while another run holds them (``pending_steps``). A holder whose process was killed (``kill -9`` of a
    ``dagster asset materialize -m pipeline.distributed``) stayed STARTED for good, and one terminated in the
    UI (CANCELED) kept its slot row: every later run waited without a word. Each pass (:meth:`check`) reports
    failed, and frees the slots of, the runs of this host whose process is gone
    (:func:`~pipeline.defs.executor.release_runs_of_dead_processes`) and frees those of runs that ended
    (:func:`~pipeline.defs.executor.free_slots_of_ended_runs`), saying so in one line; Dagster's next claim
    (it retries every 1 to 15 s) then gets the slot. While a step of this run still waits for a pool of
    ``pools``, it says who holds it, as ``docsvault build`` does before it waits
    (:func:`pipeline.defs.runner.pools_held_by_other_runs`), the same line at most every
    :data:`WAIT_NOTICE_SECONDS`.

    Args:
        instance: the run's instance (its event log storage holds the pool slots).
        run_id: this run.
        pools: the pools of the steps this run executes.
        say: where a line goes (the run's log: its console and the UI's run view).
    """

    def __init__(self, instance: dg.DagsterInstance, run_id: str, pools: Sequence[str],
                 say: Callable[[str], None]) -> None:
        self._instance, self._run_id, self._pools, self._say = instance, run_id, list(pools), say
        super().__init__("docsvault-held-pool-watch")
        self._said: dict[str, float] = {}          # line -> when it was last said (time.monotonic())
        self._failing = False

    def check(self) -> list[str]:
        """One pass: release dead and ended runs, then name the holders of the pools this run waits for.

        Returns:
            The lines said, in order.
        """
        from pipeline.defs.runner import pools_held_by_other_runs

        lines = []
        released = sorted(set(release_runs_of_dead_processes(self._instance)
                               + free_slots_of_ended_runs(self._instance)))
        if released:
            lines.append(f"released the pool slots of run(s) {', '.join(released)}: ended, or their process "
                         "on this host is gone")
        now = time.monotonic()
        for line in pools_held_by_other_runs(self._instance, self.waiting_pools(), waiter="this run",
                                             own_run=self._run_id):
            if now - self._said.get(line, float("-inf")) >= WAIT_NOTICE_SECONDS:
                self._said[line] = now
                lines.append(line)
        for line in lines:
            self._say(line)
        return lines

    def waiting_pools(self) -> list[str]:
        """The pools of ``pools`` in which a step of this run waits for a slot (a pending claim)."""
        storage = self._instance.event_log_storage
        if not self._pools or not storage.supports_global_concurrency_limits \
                or self._run_id not in storage.get_concurrency_run_ids():
            return []
        infos = storage.get_concurrency_infos(self._pools)
        return [pool for pool in self._pools if any(p.run_id == self._run_id and p.assigned_timestamp is None
                                                    for p in infos[pool].pending_steps)]

    @property
    def period(self) -> float:
        return docsvault_executor.DEAD_RUN_CHECK_SECONDS

    def tick(self) -> None:
        try:
            self.check()
            self._failing = False
        except Exception as exc:  # noqa: BLE001 - the instance's database away: the next pass retries
            if not self._failing:
                log.warning("run %s: could not look for runs holding its pools: %s", self._run_id, exc)
            self._failing = True


class WorkerWatch(_Periodic):
    """Whether any Celery worker answers, asked every :data:`WAIT_NOTICE_SECONDS` on a daemon thread while a
    distributed run executes: with none (none started, or started with another broker), the run's steps wait in
    the queue for good, and the run's log said nothing after `Submitting celery task for step …` (an operator,
    session 43). Then one WARNING line a minute names the broker and what to do.

    Args:
        ping: Celery's ``app.control.ping`` (the replies of the workers that answered).
        broker: the broker URL, as the run process has it.
        say: where the line goes (the run's log).
    """

    def __init__(self, ping: Callable[[], list[Any]], broker: str, say: Callable[[str], None]) -> None:
        super().__init__("docsvault-worker-watch")
        self._ping, self._broker, self._say = ping, broker, say

    def check(self) -> str | None:
        """One ask; the line said when no worker answered, else None (also when the broker cannot be reached:
        :func:`broker_error_line` says that)."""
        from kombu.utils.url import maybe_sanitize_url

        try:
            if self._ping():
                return None
        except Exception:  # noqa: BLE001 - the broker away: the run's own error names it
            return None
        line = (f"no Celery worker answers on {BROKER_ENV} {maybe_sanitize_url(self._broker)}: this run's steps "
                "wait in the queue until one does; start workers with the run process's environment (`celery -A "
                "dagster_celery.app worker -Q dagster`; docs/deploy.md, Instance)")
        self._say(line)
        return line

    def tick(self) -> None:
        self.check()


def run_folders(plan_context: PlanOrchestrationContext) -> dict[str, str]:
    """The run's data and vault folders as run tags (:func:`pipeline.defs.resources.run_folder_tags`): the
    ``docsvault`` resource's config as the run resolves it (the run config's, else the defaults this process
    loaded from ``DOCSVAULT_DATA`` / ``DOCSVAULT_VAULT``), its embedding settings
    (:func:`~pipeline.defs.resources.run_model_tags`), and the sha256 of the sources file this process
    built the assets from (:data:`~pipeline.defs.resources.SOURCES_DIGEST_TAG`) with its resolved path
    (:data:`~pipeline.defs.resources.SOURCES_FILE_TAG`), its code version
    (:data:`~pipeline.defs.resources.CODE_TAG`), and its ``DOCSVAULT_FORCE``
    (:data:`~pipeline.defs.resources.FORCE_TAG`, when set: every step applies it); {} when the job has no such
    resource."""
    from dagster._core.system_config.objects import ResolvedRunConfig

    resolved = ResolvedRunConfig.build(plan_context.job.get_definition(), plan_context.run_config)
    resource = resolved.resources.get("docsvault")
    if resource is None:
        return {}
    tags = {**run_folder_tags(resource.config["data_dir"], resource.config["vault_dir"]),
            **run_model_tags(resource.config), **run_force_tags(), **run_code_tags()}
    digest = loaded_sources_digest(resource.config["sources_file"])
    if not digest:
        return tags
    return {**tags, SOURCES_DIGEST_TAG: digest,
            SOURCES_FILE_TAG: str(Path(resource.config["sources_file"]).expanduser().resolve())}


def record_run_start(plan_context: PlanOrchestrationContext) -> dict[str, str]:
    """Record in the run's tags the process that executes it
    (:func:`~pipeline.defs.executor.record_run_process`: this one, as docsvault's own executor records it)
    and the run's folders (:func:`run_folders`); a re-executed run's copies of its parent's tags are
    overwritten.

    Returns:
        The folder tags recorded ({} when the job has no ``docsvault`` resource)."""
    instance, run_id = plan_context.instance, plan_context.dagster_run.run_id
    record_run_process(instance, run_id)
    folders = run_folders(plan_context)
    if folders:
        instance.add_run_tags(run_id, folders)
    return folders


def _pool_limit(instance: dg.DagsterInstance, pool: str) -> Any:
    """The instance's ``PoolLimit`` row of ``pool`` (name, limit, from_default), None when it has none."""
    return next((p for p in instance.event_log_storage.get_pool_limits() if p.name == pool), None)


def prepare_pools(instance: dg.DagsterInstance, pools: Sequence[str]) -> None:
    """Give each pool of ``pools`` its limit row as the run's first claim of it would (Dagster's
    ``initialize_concurrency_limit_to_default``), before dagster-celery's run loop claims, where a PostgreSQL
    error failed the run: Dagster inserts the row and, when the INSERT fails, updates it in the same transaction,
    which PostgreSQL has aborted by then (``InFailedSqlTransaction``, "An exception was thrown during execution").

    * Two runs that start at once on a fresh instance (the ``upstream_change`` sensor's, one per source) both
      inserted the row of ``docsvault_warehouse``: the second failed. Here it finds the first's row and goes on.
    * A ``concurrency: pools: default_limit`` changed in dagster.yaml after the row was made: every run failed
      so, for good. Here the run fails at once with one line naming the setting and what to do.

    Nothing is done for a pool whose row matches the instance's default limit (or that has no default).

    Raises:
        DeployConfigError: the instance's pool limit cannot be changed to dagster.yaml's ``default_limit``.
    """
    from dagster._core.instance.config import PoolGranularity
    from sqlalchemy.exc import DBAPIError

    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return
    config = storage.get_pool_config()
    default = config.default_pool_limit
    if config.pool_granularity == PoolGranularity.RUN:
        return          # the run's claims do not touch pool rows (Dagster's claim returns at once)
    stuck: list[tuple[str, Any]] = []      # (pool, the instance's limit) that Dagster could not change
    why = ""
    for pool in pools:
        before = _pool_limit(instance, pool)
        if (before is None and default is None) or (before is not None and (not before.from_default
                                                                            or before.limit == default)):
            continue
        try:
            storage.initialize_concurrency_limit_to_default(pool)
        except DBAPIError as exc:
            now = _pool_limit(instance, pool)
            if before is None and now is not None and (not now.from_default or now.limit == default):
                continue            # another run inserted the row meanwhile: the same limit, nothing to do
            why = why or " ".join(str(getattr(exc, "orig", exc)).split())
            stuck.append((pool, (now or before).limit if (now or before) is not None else "?"))
    if stuck:
        limits = ", ".join(sorted({str(limit) for _, limit in stuck}))
        commands = " && ".join(f"dagster instance concurrency set {pool} {default}" for pool, _ in stuck)
        raise DeployConfigError(
            f"pool(s) {', '.join(pool for pool, _ in stuck)}: the Dagster instance keeps limit {limits} from an "
            f"earlier concurrency.pools.default_limit, and Dagster cannot change it to this run's default_limit "
            f"{default} (dagster.yaml in DAGSTER_HOME {instance.root_directory}) on PostgreSQL ({why}); set it "
            f"once with `{commands}`, or give every process's dagster.yaml default_limit {limits} again "
            "(docs/deploy.md, Instance)")


class NonBlockingPlan(ExecutionPlan):
    """The run's execution plan, started with ``require_upstream_step_success: false``, as
    :mod:`pipeline.defs.executor` starts it in process (:meth:`of`).

    dagster-celery's run loop starts the plan with Dagster's default (every upstream step must succeed) and has no
    ``step_dependency_config`` of its own: a source that failed (its blocking ``ran_without_error`` check) stopped
    ``link_graph``, ``warehouse`` and ``retrieval_eval`` of the whole run ("Dependencies for step warehouse were
    not executed"), so one unreachable source kept every other source's change out of search in the team
    deployment, while the in-process run published them over the failed source's last good copy. The loop reads
    the plan, checks that it is an ``ExecutionPlan`` and calls its ``start``: this subclass, with the same fields,
    adds the config there. A step that fails without an output (a bug) still stops what depends on it."""

    __slots__ = ()

    @classmethod
    def of(cls, plan: ExecutionPlan) -> NonBlockingPlan:
        """``plan``'s fields in a :class:`NonBlockingPlan`."""
        return cls._make(plan)

    def start(self, *args: Any, **kwargs: Any) -> ActiveExecution:
        kwargs.setdefault("step_dependency_config", StepDependencyConfig.from_config(docsvault_executor.NON_BLOCKING))
        return super().start(*args, **kwargs)


#: Dagster's errors that wrap the one a step's code raised (its ``cause``)
_DAGSTER_WRAPPERS = ("DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError")


def worker_definitions_error_line(exc: BaseException, sources_file: str | None) -> str | None:
    """One line for a run whose steps a worker could not even plan because its definitions lack the run's
    assets (dagster-celery's ``DagsterSubprocessError`` carrying a worker's ``DagsterInvalidSubsetError``): the
    worker loaded another sources file (its ``DOCSVAULT_SOURCES``) or older code. Before, the run said only
    "Step prefect__raw_docs finished without success or failure event" and Dagster's "AssetKey(s) [...] were
    selected, but no AssetsDefinition objects supply these keys". None for any other error.

    Args:
        exc: the error the Celery run loop raised.
        sources_file: the sources file this run's process built its assets from (None: unknown).
    """
    infos = list(getattr(exc, "subprocess_error_infos", None) or [])
    while infos:
        info = infos.pop()
        if info.cls_name == "DagsterInvalidSubsetError":
            mine = f" ({sources_file})" if sources_file else ""
            return ("a worker has no definition of some of this run's assets: it loaded another sources file "
                    f"than this run's process{mine} or older code; start every worker with the run process's "
                    "DOCSVAULT_SOURCES and code, then run again (docs/deploy.md, Instance)")
        infos.extend(e for e in (info.cause, info.context) if e is not None)
    return None


def worker_failure_line(event: DagsterEvent, data_dir: str | None = None) -> str | None:
    """The line the run process logs for a worker's failed step or failed ERROR check (None for any other event).

    A step's own log lines are written where the step runs, by the worker: the console of ``dagster asset
    materialize -m pipeline.distributed`` (a CI job's log) said only ``Steps failed: ['team_notes__raw_docs']``
    and "1 blocking asset check failed", never why, while the in-process run prints the source's error line. The
    failed ``ran_without_error`` check carries that line as its description; a step that raised, its error, or,
    for a full or read-only disk, the line ``docsvault build`` prints for it (``data_dir``: the run's, named when
    the error names no file). Before session 49 a warehouse step that filled the shared volume said only DuckDB's
    ``TransactionException: … Could not write file "…/warehouse.duckdb.tmp-7030": No space left on device``."""
    from pipeline.defs.runner import storage_line_of_step_error

    if event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
        check = event.asset_check_evaluation_data
        if not check.passed and check.severity == dg.AssetCheckSeverity.ERROR:
            return (f"{check.asset_key.to_user_string()}: check {check.check_name} failed on a worker: "
                    f"{check.description or '(no description: see the step in the Dagster UI)'}")
    elif event.event_type == DagsterEventType.STEP_FAILURE:
        error = event.step_failure_data.error
        if error is not None and error.cls_name != "DagsterAssetCheckFailedError":     # said by the check's line
            # the error the step's code raised, not Dagster's wrapper of it ("Error occurred while executing op")
            while error.cls_name in _DAGSTER_WRAPPERS and error.cause is not None:
                error = error.cause
            storage = storage_line_of_step_error(error, Path(data_dir) if data_dir else None)
            if storage:
                return f"step {event.step_key} failed on a worker: {storage}"
            first = next(iter(error.message.strip().splitlines()), "") or error.cls_name
            return f"step {event.step_key} failed on a worker: {first}"
    return None


class DocsvaultCeleryExecutor(dg.Executor):
    """dagster-celery's executor (``CeleryExecutor``, made from the same config) after
    :func:`record_run_start` and a first pass of :class:`HeldPoolWatch` (the runs of this host whose process
    is gone and the slots of runs that ended are released, as ``docsvault build`` does at its start), then
    under the watch, over a :class:`NonBlockingPlan` (a failed source does not stop the shared stages), logging
    :func:`worker_failure_line` for what failed on a worker; steps, queues, retries and Celery settings are
    dagster-celery's.

    Dagster-celery's run loop reads ``app_args()`` and ``retries`` from the run's executor (this one): both
    are the wrapped executor's."""

    def __init__(self, celery: Any) -> None:
        self._celery = celery

    @property
    def retries(self) -> RetryMode:
        return self._celery.retries

    def app_args(self) -> dict[str, Any]:
        return self._celery.app_args()

    def _ping(self) -> list[Any]:
        """The replies of the Celery workers that answer a ping within 2 s (:class:`WorkerWatch`)."""
        from dagster_celery.make_app import make_app

        return make_app(self.app_args()).control.ping(timeout=2.0) or []

    def execute(self, plan_context: PlanOrchestrationContext,
                execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        folders = record_run_start(plan_context)
        warning = docsvault_executor.whole_job_warning(plan_context.dagster_run)
        if warning:
            plan_context.log.warning(warning)
        pools = sorted({step.pool for step in execution_plan.get_steps_to_execute_in_topo_order()
                        if getattr(step, "pool", None)})
        watch = HeldPoolWatch(plan_context.instance, plan_context.dagster_run.run_id, pools,
                              plan_context.log.warning)
        watch.check()
        prepare_pools(plan_context.instance, pools)      # before the run loop's first claim
        with watch, WorkerWatch(self._ping, str(self.app_args().get("broker") or ""), plan_context.log.warning):
            try:
                for event in self._celery.execute(plan_context, NonBlockingPlan.of(execution_plan)):
                    yield event
                    line = worker_failure_line(event, folders.get(DATA_DIR_TAG))
                    if line:
                        plan_context.log.error(line)
            except Exception as exc:
                line = (broker_error_line(exc, self._celery.app_args())
                        or instance_error_line(exc, getattr(plan_context.instance.run_storage, "postgres_url",
                                                            None))
                        or worker_definitions_error_line(exc, folders.get(SOURCES_FILE_TAG)))
                if line:            # the run still fails with Celery's traceback; this says what to do
                    say_error(plan_context, line)
                raise


def say_error(plan_context: PlanOrchestrationContext, line: str) -> None:
    """Log ``line`` as an ERROR of the run; when that raises (the instance's database is unreachable: Dagster's log
    manager hands a record to the event log's handler first, and its error stops the record before the console
    logger prints it), write it to stderr in the console's form, so the run process's output still says it."""
    try:
        plan_context.log.error(line)
    except Exception:  # noqa: BLE001 - whatever the event log raised, the line must reach the console
        stamp = time.strftime("%Y-%m-%d %H:%M:%S +0000", time.gmtime())
        print(f"{stamp} - docsvault - ERROR - {plan_context.dagster_run.job_name} - "
              f"{plan_context.dagster_run.run_id} - {line}", file=sys.stderr, flush=True)


def broker_error_line(exc: BaseException, app_args: Mapping[str, Any]) -> str | None:
    """One line for a run process that cannot reach its Celery broker or result backend (``exc`` or an error of
    its chain is a connection error of redis, kombu or the OS), naming both URLs (no password) and what to do;
    None for any other error. Before, such a run failed after ~20 s with only "An exception was thrown during
    execution" and 300 lines of redis and Celery tracebacks (a typo in the broker's port, Redis restarted)."""
    from kombu.utils.url import maybe_sanitize_url

    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        kind = type(err)
        if isinstance(err, ConnectionError) or (kind.__module__.split(".")[0] in ("redis", "kombu", "amqp")
                                                 and kind.__name__ in ("ConnectionError", "OperationalError",
                                                                       "TimeoutError")):
            broker, backend = (maybe_sanitize_url(str(app_args.get(k) or "")) for k in ("broker", "backend"))
            urls = f"{BROKER_ENV} {broker}" + (f", {BACKEND_ENV} {backend}" if backend and backend != broker
                                               else "")
            why = " ".join(str(err).split()).rstrip(".")
            return (f"cannot reach the Celery broker or result backend ({urls}): {why}; start it (Redis) or fix "
                    "the URL in the run process's environment, then run again (a step a worker had already taken "
                    "runs to its end there; docs/deploy.md, Instance)")
        err = err.__cause__ or err.__context__
    return None


def instance_error_line(exc: BaseException, postgres_url: str | None) -> str | None:
    """One line for a run process that lost the Dagster instance's PostgreSQL (``exc`` or an error of its chain is
    dagster-postgres's "too many retries for DB connection" or psycopg2's ``OperationalError``: the server stopped,
    restarted or unreachable), naming the URL (``postgres_url``, the instance's; no password) and what to do;
    None for any other error. Before, such a run failed after ~30 s of retries with only "An exception was thrown
    during execution" and ~300 lines of SQLAlchemy and psycopg2 tracebacks, and nothing said whether what the run
    had built was kept."""
    seen: set[int] = set()
    err: BaseException | None = exc
    found: BaseException | None = None
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        kind = type(err)
        if kind.__module__.split(".")[0] == "psycopg2" and kind.__name__ == "OperationalError":
            found = err             # the driver's own words: the most precise cause
            break
        if kind.__name__ == "DagsterPostgresException" and found is None:
            found = err
        err = err.__cause__ or err.__context__
    if found is None:
        return None
    where = "the Dagster instance's PostgreSQL"
    if postgres_url:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            named = make_url(postgres_url).render_as_string(hide_password=True)
        except ArgumentError:           # an unparsable URL is not named (it may hold a password)
            named = ""
        where += f" ({named})" if named else ""
    why = " ".join(str(found).split()).rstrip(".?")
    return (f"cannot reach {where}: {why}; start it (or fix DAGSTER_PG_URL, storage.postgres in DAGSTER_HOME's "
            "dagster.yaml), then run again: what this run's steps built stays on the shared volume and the next "
            "run redoes only what is missing (a step a worker had already taken runs to its end there; "
            "docs/deploy.md, Instance)")


def reload_definitions_if_sources_changed(**_signal: Any) -> bool:
    """Celery ``task_prerun`` handler of the workers (connected in ``deploy/dagster_celery_config.py``): when a
    sources file this worker built its definitions from has changed since, forget the loaded job, so this
    step's task loads the definitions again from the file as it is now, as the run process did.

    Dagster keeps the last loaded job per process (``ReconstructableJob``'s ``lru_cache``) and a worker lives
    from one run to the next: after an edit of a source's ``paths`` or ``format`` (the same assets), its steps
    built the source as it was and reported success.

    Returns:
        True when the loaded definitions were dropped.
    """
    from dagster._core.definitions.reconstruct import ReconstructableJob

    changed = forget_changed_sources()
    if not changed:
        return False
    log.info("%s changed since this worker loaded it: loading the definitions again", ", ".join(changed))
    ReconstructableJob.get_definition.cache_clear()
    ReconstructableJob.get_repository_definition.cache_clear()
    return True


def celery_executor_def() -> dg.ExecutorDefinition:
    """dagster-celery's executor, wrapped in :class:`DocsvaultCeleryExecutor`, configured from
    :func:`celery_settings` (its config schema and requirements are dagster-celery's)."""
    from dagster_celery import celery_executor
    from dagster_celery.executor import CELERY_CONFIG

    @dg.executor(name="docsvault_celery_executor", config_schema=CELERY_CONFIG,
                 requirements=dg.multiple_process_executor_requirements())
    def docsvault_celery_executor(init_context: dg.InitExecutorContext) -> DocsvaultCeleryExecutor:
        celery = celery_executor.executor_creation_fn(init_context)  # type: ignore[misc]
        return DocsvaultCeleryExecutor(celery)

    conf = celery_settings()
    source = {k: v for k, v in conf.items() if k not in ("broker_url", "result_backend")}
    return docsvault_celery_executor.configured(
        {"broker": conf["broker_url"], "backend": conf["result_backend"], "config_source": source},
        name="docsvault_celery")


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
    quiet_known_warnings()          # before Dagster parses `--select` and submits the steps
    return distributed_definitions(Settings.from_env())
