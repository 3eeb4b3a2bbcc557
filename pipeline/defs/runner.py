"""`docsvault build`: materialize every asset through Dagster in one run, recorded in DAGSTER_HOME, one source
failing alone.

The run selects the chains of the chosen sources and the shared stages, on the in-process executor (the project's
executor with ``in_process`` config: :mod:`pipeline.defs.executor`). A source that fails records its last good
copy and fails its ``ran_without_error`` check (red in the UI); the shared stages still build over every source's
last good copy. The run shows in the Dagster UI like any other.

One writer: the whole build holds ``<data>/build-run.lock`` and each stage ``<data>/build.lock``
(``pipeline.common.lock``), taken after the stage's Dagster pool slot, as in any other run; a second build waits up to
``wait`` seconds, then refuses with the holder's pid and start time. A lock left by a killed build is taken over, and
the temp files it left are removed (under ``build.lock``, so no stage of another run is mid-write) before anything
else runs.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError

from pipeline import stages as build
from pipeline.common import artifacts
from pipeline.common.errors import BuildInterrupted, SourceConfigError
from pipeline.config import Settings, scoped_env, set_env
from pipeline.defs.assets import (
    ALL_CHUNKS_EMBEDDED,
    PER_SOURCE_STAGES,
    RAN_WITHOUT_ERROR,
    SHARED_STAGES,
    WAREHOUSE_POOL,
    key,
    source_pool,
    source_slug,
)
from pipeline.defs.executor import (
    HOST_TAG,
    IN_PROCESS_RUN_CONFIG,
    PID_RUN_TAG,
    PID_TAG,
    TERMINATED_SUFFIX,
    free_slots_of_ended_runs,
    process_tags,
    release_killed_builds,
    release_runs_of_dead_processes,
)
from pipeline.defs.resources import sources_digest
from pipeline.ingest.sources import load_sources, model_settings_problem, select_sources
from pipeline.models import Source
from pipeline.stages.results import BuildReport, KilledRun, SourceStatus

log = logging.getLogger(__name__)

INSTANCE_YAML = """\
# docsvault: everything stays local (SQLite storage under DAGSTER_HOME); no telemetry, no first-run popup.
telemetry:
  enabled: false
nux:
  enabled: false
"""


def instance_config() -> str:
    """The text of a new instance's ``<DAGSTER_HOME>/dagster.yaml``: the checkout's ``dagster.yaml`` (pools, run
    retries, telemetry off) followed by ``dagster-event-log.yaml`` (the project's event log storage, which names its
    folder by DAGSTER_HOME, so it is not in the checkout's file that Dagster's throw-away instances read);
    :data:`INSTANCE_YAML` without a checkout."""
    root = Path(__file__).resolve().parents[2]
    parts = [root / "dagster.yaml", root / "dagster-event-log.yaml"]
    if not parts[0].is_file():
        return INSTANCE_YAML
    return "".join(p.read_text(encoding="utf-8") for p in parts if p.is_file())


def ensure_instance(settings: Settings) -> Path:
    """Point DAGSTER_HOME at <data>/dagster (unless set) and give it a dagster.yaml (:func:`instance_config`) unless
    it has one (a user's instance file is never rewritten)."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    set_env("DAGSTER_HOME", str(home))
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(instance_config(), encoding="utf-8")
    return home


def _metadata(result: Any) -> dict[str, dict]:
    """asset key ("tiny/raw_docs", "warehouse") -> its materialization's metadata as plain values."""
    out: dict[str, dict] = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_MATERIALIZATION":
            mat = event.event_specific_data.materialization
            out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def _failed_checks(result: Any, severities: Sequence[str] = ("ERROR",)) -> dict[str, dict[str, dict]]:
    """asset key -> failed check name -> its metadata, for the checks of these severities that failed in the run."""
    out: dict[str, dict[str, dict]] = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            ev = event.event_specific_data
            if not ev.passed and ev.severity.value in severities:
                out.setdefault(ev.asset_key.to_user_string(), {})[ev.check_name] = {
                    k: getattr(v, "value", v) for k, v in ev.metadata.items()}
    return out


#: failed checks the CLI says in its own words (``all_chunks_embedded``: the warehouse's ``missing_vectors_in``
#: warning line), so not once more as "asset check ... failed"
CLI_OWN_LINE = frozenset({ALL_CHUNKS_EMBEDDED})


def _shared_check_warnings(checks: dict[str, dict[str, dict]]) -> list[str]:
    """One line per failed check of a shared stage (``_failed_checks`` of every severity), e.g. "asset check
    eval_floors of retrieval_eval failed: mrr@10 0.612 < 0.700". Such a check does not fail the build (Dagster runs
    it after the asset); the CLI prints these lines as warnings so a passing exit code is not mistaken for them."""
    lines = []
    for stage in SHARED_STAGES:
        for name, meta in sorted(checks.get(key(stage).to_user_string(), {}).items()):
            if name in CLI_OWN_LINE:
                continue
            why = meta.get("below") or meta.get("error") or meta.get("note") or (
                f"gain {meta['gain']}" if "gain" in meta else "")
            lines.append(f"asset check {name} of {stage} failed" + (f": {_one_line(str(why))}" if why else "")
                         + " (see the Dagster UI)")
    return lines


def _failures(result: Any, data_dir: Path | None = None) -> dict[str, str]:
    """step key -> first line of the error message, for failed steps; a full, read-only or failing disk as the
    line the CLI prints for it anywhere else (:func:`_storage_line`)."""
    failures: dict[str, str] = {}
    for event in result.all_events:
        if event.is_step_failure and event.step_key:
            data = event.step_failure_data
            err = data.error if data else None
            msg = (err.message if err else "failed").strip()
            # the user error's own message, not Dagster's wrapper line
            if err and err.cause is not None:
                msg = err.cause.message.strip()
            failures[event.step_key] = _storage_line(err, data_dir) or _one_line(msg)
    return failures


#: an OSError's message as Dagster serializes it: ``OSError: [Errno 28] No space left on device: '/d/x'``
_OS_ERROR = re.compile(r"^(?:\w+: )?\[Errno (\d+)\] ([^:\n]+?)(?:: '([^'\n]*)')?\s*$")


def _storage_line(err: Any, data_dir: Path | None) -> str | None:
    """:func:`pipeline.common.errors.storage_error_line` of a step's error (Dagster's ``SerializableErrorInfo``:
    class names and messages only), or None. Before, a build whose warehouse step filled the disk said
    ``error: shared stages failed: warehouse: [Errno 28] No space left on device: '…'`` and not what to do."""
    from pipeline.common.errors import storage_error_line

    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        message = str(err.message).strip()
        found = _OS_ERROR.match(message)
        if found:
            exc = OSError(int(found[1]), found[2], *([found[3]] if found[3] else []))
        elif "No space left on device" in message:          # DuckDB's IOException, which has no errno
            exc = OSError(errno.ENOSPC, "No space left on device")
        else:
            exc = None
        line = storage_error_line(exc, data_dir=data_dir) if exc is not None else None
        if line:
            return line
        err = err.cause or err.context
    return None


#: the storage line of a step's serialized error, for the distributed run process (``pipeline.distributed``)
storage_line_of_step_error = _storage_line


def _one_line(msg: str) -> str:
    """An error message as one line of at most 500 characters, without a leading ``SomeError: ``."""
    first = " ".join(line.strip() for line in msg.splitlines() if line.strip())[:500] if msg.strip() else "failed"
    return re.sub(r"^(?:[\w.]+\.)?\w*(?:Error|Exception): ", "", first)


_ENV = {"DOCSVAULT_SOURCES": "sources_file", "DOCSVAULT_DATA": "data_dir", "DOCSVAULT_VAULT": "vault_dir",
        "DOCSVAULT_EVALS": "evals_dir", "DOCSVAULT_MODEL": "model", "DOCSVAULT_MULTILINGUAL_MODEL": "multilingual_model",
        "DOCSVAULT_SYNONYMS": "synonyms"}


@contextmanager
def _settings_env(settings: Settings) -> Iterator[None]:
    """The environment that makes ``Settings.from_env()`` return ``settings`` (restored afterwards): the run's job
    is rebuilt from the environment (:func:`_global_job`), as Dagster rebuilds it in any other process."""
    current = Settings.from_env()
    changed = {var: None if getattr(settings, attr) is None else str(getattr(settings, attr))
               for var, attr in _ENV.items()
               if getattr(current, attr) != getattr(settings, attr)}  # unchanged kept as given (a DOCSVAULT_EVALS list)
    with scoped_env(changed):
        yield


@contextmanager
def _log_tails_outside_the_terminal_group() -> Iterator[None]:
    """While a build's steps run, start Dagster's per-step compute-log processes (``tail -F`` and its
    ``watch_orphans.py`` watcher, :func:`dagster._core.execution.compute_logs.execute_posix_tail`) in a process group
    of their own. In the terminal's group, Ctrl-C reached them too and each watcher printed a ``KeyboardInterrupt``
    traceback under the build's one-line ``interrupted`` error. They still stop as before: Dagster terminates
    both when the step ends or fails, and the watcher ends the tail when the build process dies. On Linux the tail
    also gets GNU tail's ``--pid=<build pid>``, so it ends within a second of the build's death by itself: a
    ``kill -9`` between Dagster's two spawns (the tail started, its watcher not yet) left a ``tail -F`` running
    for good, out of reach of a kill of the build's group. The tail's output (the step's stdout/stderr) still goes
    to the terminal. Without that Dagster module (another Dagster version) nothing changes."""
    import types

    try:
        from dagster._core.execution import compute_logs
    except ImportError:         # pragma: no cover - another Dagster layout
        yield
        return
    real = getattr(compute_logs, "subprocess", None)
    if real is not subprocess:
        yield
        return
    compute_logs.subprocess = types.SimpleNamespace(Popen=_own_group_popen)
    try:
        yield
    finally:
        compute_logs.subprocess = real


def _own_group_popen(args: Any, **kwargs: Any) -> subprocess.Popen:
    """:class:`subprocess.Popen` in a process group of its own; a ``tail`` command (a list starting with "tail")
    gets ``--pid=<this process>`` on Linux (GNU coreutils: the tail exits once this process is gone)."""
    if sys.platform.startswith("linux") and isinstance(args, list) and args[:1] == ["tail"]:
        args = ["tail", f"--pid={os.getpid()}", *args[1:]]
    return subprocess.Popen(args, process_group=0, **kwargs)


def _global_job() -> dg.JobDefinition:
    """Every asset, for the settings in the environment (reconstructable: a module-level function)."""
    from pipeline.defs import build_definitions

    return build_definitions(Settings.from_env()).resolve_job_def("refresh_all")


def _keyed_global_job(definitions_key: str) -> dg.JobDefinition:
    """:func:`_global_job`; ``definitions_key`` (:func:`_definitions_key`) is not read: it only makes the
    reconstructable job of one set of settings and sources differ from another's (:func:`_reconstructable_job`)."""
    return _global_job()


def _definitions_key(settings: Settings) -> str:
    """What :func:`_global_job` builds its definitions from: the settings and the bytes of their sources file (a
    hex digest; an unreadable file counts as empty, and fails later with its own error)."""
    return hashlib.sha256(f"{settings!r}\0{sources_digest(settings.sources_file)}".encode()).hexdigest()


def _reconstructable_job(settings: Settings) -> dg.ReconstructableJob:
    """:func:`_global_job` as Dagster reconstructs it, keyed by :func:`_definitions_key`. Dagster caches the last
    definition it reconstructed per process (``lru_cache`` on ``ReconstructableJob``, by its pointer and
    selection): with one key for every build, a process that built before (a library caller, a test) could run a
    later build on the earlier sources.yaml's assets and fail with ``DagsterInvalidSubsetError`` for a source
    added since."""
    return dg.build_reconstructable_job(__name__, _keyed_global_job.__name__,
                                        reconstructable_kwargs={"definitions_key": _definitions_key(settings)})


def run_build(settings: Settings, source_names: Sequence[str] | None = None, log_level: str = "CRITICAL",
              *, wait: float = 0.0, progress: Callable[[str, str, int, int], None] | None = None,
              remove_all_sources: bool = False, wait_arg: str = "--wait SECONDS",
              evaluate: bool = True, note_changes: bool = False) -> BuildReport:
    """Materialize the chains of the selected sources (default: all), then the shared stages.

    Args:
        settings: paths and models.
        source_names: only these sources (default: all of sources.yaml).
        log_level: level of Dagster's console logger (the full event log is always kept in DAGSTER_HOME and shown
            by the UI); the CLI passes INFO with --verbose.
        wait: seconds to wait for another build holding the lock (0: refuse at once).
        wait_arg: how the caller's user sets ``wait``, for the lock error's advice (``--wait SECONDS``; the MCP
            tools: their ``wait`` argument).
        progress: called as ``progress(stage, source, done, total)`` while long stages run (embedding).
        remove_all_sources: when sources.yaml lists no sources, remove every built source (refused otherwise).
        evaluate: False leaves ``retrieval_eval`` out of the run (a capture's build: its note is searchable ~2 s
            sooner beside the five corpora). The eval's key is the warehouse's content, so the next build that
            includes it evaluates this warehouse; meanwhile Dagster shows the asset stale. Not recorded for the
            no-op path (its record would say the eval is current).
        note_changes: record in the report which notes of the selected sources this build added, changed and
            removed (``BuildReport.note_changes``), compared in the warehouse once this build holds the lock: a
            caller that waited for another build (the MCP refresh) is told this build's changes, not that one's.

    A build of every source that succeeded is recorded for :func:`pipeline.service.noop_build` (a later build with
    nothing to do answers without Dagster); a failed one forgets the record.

    Raises:
        BuildLockedError: another build holds the lock (its pid and start time are in the message).
        SourceConfigError: sources.yaml invalid, or it lists no sources while sources are built and
            ``remove_all_sources`` is False (nothing is removed).
        BuildInterrupted: SIGINT (or SIGTERM, when the caller maps it, as the CLI does) while it waited for a lock
            or ran; every lock it took is released.
    """
    from pipeline import stages as build
    from pipeline import warehouse as wh
    from pipeline.common.lock import TURN_WAIT_ARG, build_lock, build_run_lock, turn_wait
    from pipeline.stages.noop import record_noop

    # the settings' environment while the locks are taken: a killed forced rebuild's warning reads
    # sources.yaml
    with _settings_env(settings), build_run_lock(settings.data_dir, wait=wait, wait_arg=wait_arg):
        with build_lock(settings.data_dir, wait=turn_wait(wait), wait_arg=TURN_WAIT_ARG):
            build.cleanup_leftovers(settings)
            sources, removed, killed = _prepare(settings, source_names, remove_all_sources)
        if progress is not None:
            build.PROGRESS_HOOKS.append(progress)
        names = [s.name for s in sources]
        before = wh.note_hashes_of(settings.warehouse_path, names) if note_changes else {}
        shared = SHARED_STAGES if evaluate else tuple(st for st in SHARED_STAGES if st != "retrieval_eval")
        upgraded = upgraded_stages(dg.DagsterInstance.get(), sources, shared)
        try:
            report = _run(settings, sources, removed, log_level, shared)
        finally:
            if progress is not None:
                build.PROGRESS_HOOKS.remove(progress)
        if note_changes:
            report.note_changes = wh.note_changes(before, wh.note_hashes_of(settings.warehouse_path, names))
        report.upgraded = upgraded
        report.resumed = [k.started for k in killed]
        report.resumed_runs = [k for k in killed if k.run_id]
        if killed:
            _name_unreported_edits(settings, report, min(k.started for k in killed))
        if not source_names and evaluate:    # a build of every source: what the next no-op build answers from
            with build_lock(settings.data_dir, wait=turn_wait(wait), wait_arg=TURN_WAIT_ARG):
                record_noop(settings, sources, report)
        return report


def upgraded_stages(instance: dg.DagsterInstance, sources: Sequence[Source],
                    shared: Sequence[str] = SHARED_STAGES) -> list[str]:
    """The stages of ``sources`` (and of the ``shared`` ones the build runs) last materialized by another version
    of docsvault (their ``dagster/code_version`` is not this code's: :func:`pipeline.defs.automation.code_changed`,
    what the sensor requests an upgrade run for), as ``BuildReport.upgraded`` lines; [] when none, or while a run
    of the instance is queued or in progress (it may rebuild them). Before, a build after an upgrade said only "16
    notes re-chunked", not why; and a `--no-eval` build (a capture's) named retrieval_eval, which it does not run."""
    from pipeline.defs.automation import code_changed

    changed = code_changed(instance, sources)
    if changed is None:
        return []
    lines = [f"{name}: {', '.join(stages)}" for name, stages in changed.by_source.items()]
    ran = [st for st in changed.shared if st in shared]
    return lines + ([", ".join(ran)] if ran else [])


def _name_unreported_edits(settings: Settings, report: BuildReport, since: str) -> None:
    """A source whose vault stage this build skipped, since the killed build(s) it finished (started at ``since``
    or later) had done it, reports the edited notes that stage moved aside (``vault`` metadata ``conflicts``), which
    the killed build never got to print (:func:`pipeline.stages.unreported_conflicts`)."""
    from pipeline import stages as build

    for st in report.sources:
        vault = st.metadata.get("vault")
        if st.ok and isinstance(vault, dict) and vault.get("skipped") and not vault.get("conflicts"):
            lines = build.unreported_conflicts(settings, st.name, since)
            if lines:
                st.metadata["vault"] = {**vault, "conflicts": lines}


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _prepare(settings: Settings, source_names: Sequence[str] | None,
             remove_all: bool = False) -> tuple[list[Source], list[str], list[KilledRun]]:
    """Under ``build.lock``, before the run: the selected sources, the vault layout checked, the sources
    dropped from sources.yaml removed (what was removed, one line each), and the killed runs released, oldest
    first ([] when none): a killed ``docsvault build``'s runs
    (:func:`pipeline.defs.executor.release_killed_builds`) and the runs of this host whose process is gone
    (:func:`pipeline.defs.executor.release_runs_of_dead_processes`: a killed ``dagster asset materialize``,
    with the selected sources whose assets it was to materialize).

    Raises:
        SourceConfigError: sources.yaml invalid, a name of ``source_names`` not in it, or a model setting that
            cannot load (:func:`pipeline.ingest.sources.model_settings_problem`)."""
    ensure_instance(settings)
    all_sources = load_sources(settings.sources_file)
    sources = select_sources(all_sources, list(source_names or []))
    problem = model_settings_problem(settings)
    if problem:
        raise SourceConfigError(problem)
    build.check_layout(settings, all_sources)
    removed = build.remove_dropped_sources(settings, all_sources, remove_all=remove_all)
    instance = dg.DagsterInstance.get()
    forget_dropped_assets(instance, all_sources)
    killed = [KilledRun(_iso(start)) for _, start in release_killed_builds(instance)]
    killed += [_killed_run(instance, run_id, sources) for run_id in release_runs_of_dead_processes(instance)]
    killed.sort(key=lambda k: k.started)
    free_slots_of_ended_runs(instance)
    for line in pools_held_by_other_runs(instance, [source_pool(s) for s in sources] + [WAREHOUSE_POOL]):
        log.warning(line)
    return sources, removed, killed


def _killed_run(instance: dg.DagsterInstance, run_id: str, sources: Sequence[Source]) -> KilledRun:
    """The released run ``run_id`` of a killed process (not a ``docsvault build``): when it started (else was
    created) and which of ``sources`` had a step in it (its asset selection, else its execution plan's
    steps)."""
    record = instance.get_run_record_by_id(run_id)
    if record is None:                                  # deleted meanwhile
        return KilledRun(_iso(datetime.now(UTC).timestamp()), run_id)
    run = record.dagster_run
    steps: set[str] = set()
    if run.asset_selection is not None:
        steps = {k.to_python_identifier() for k in run.asset_selection}
    elif run.execution_plan_snapshot_id:
        plan = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
        steps = set(plan.step_keys_to_execute or [])
    names = tuple(s.name for s in sources if any(key(stage, s).to_python_identifier() in steps
                                            for stage in PER_SOURCE_STAGES))
    return KilledRun(_iso(record.start_time or record.create_timestamp.timestamp()), run_id, names)


def pools_held_by_other_runs(instance: dg.DagsterInstance, pools: Sequence[str], waiter: str = "this build",
                             own_run: str | None = None) -> list[str]:
    """One line per pool of ``pools`` whose slot a live run holds (a UI, sensor or schedule run): the build's steps
    of that pool wait for it, and Dagster prints nothing while they do. Runs that have ended hold nothing (their
    slots were freed by :func:`pipeline.defs.executor.free_slots_of_ended_runs`), nor do runs of this host whose
    process is gone (:func:`pipeline.defs.executor.release_runs_of_dead_processes`). The line says what happens if
    the run's process was killed: released automatically when it ran on this host; for a run of another host, or of
    another executor (no process recorded), the UI's Terminate ends it (``dagster run delete -f`` would also delete
    its history). ``waiter`` names who waits (``"this run"``: a distributed run's own notice,
    :class:`pipeline.distributed.HeldPoolWatch`); the slots of ``own_run`` are not listed."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    lines = []
    known = storage.get_concurrency_keys()
    for pool in pools:
        if pool not in known:
            continue
        for slot in storage.get_concurrency_info(pool).claimed_slots:
            if slot.run_id == own_run:
                continue
            run = instance.get_run_by_id(slot.run_id)
            status = run.status.value if run is not None else "gone"
            line = (f"pool {pool} is held by run {slot.run_id} ({status}, step {slot.step_key}): {waiter}'s "
                    "steps of that pool wait until it is done (the Dagster UI shows the run); ")
            tags = process_tags(run.tags) if run is not None else {}
            tags = tags if tags.get(PID_RUN_TAG) == slot.run_id else {}
            host = tags.get(HOST_TAG)
            if host == socket.gethostname():
                line += (f"it runs in pid {tags.get(PID_TAG, '?')} on this host: if that process is killed, the run "
                         f"is released automatically and {waiter} goes on")
            else:
                where = (f"it runs on host {host}: if its process was killed there, a build, the sensor or a "
                         "distributed run on that host releases it, or" if host else
                         "if its process was killed, Dagster still counts it as running:")
                line += (f"{where} Terminate it in the Dagster UI (Force termination immediately) and "
                         f"{waiter} goes on")
            lines.append(line)
    return lines


def forget_dropped_assets(instance: dg.DagsterInstance, sources: Sequence[Source]) -> list[dg.AssetKey]:
    """Wipe from the Dagster catalog the per-source assets (``<source>/<stage>``) of sources that are no longer in
    sources.yaml: the build has just removed their data, and the UI would otherwise list them for good as assets
    without a definition. Other keys (shared stages, anyone else's assets) are never touched.

    Returns:
        The wiped keys (sorted).
    """
    keep = {source_slug(s.name) for s in sources}
    stale = sorted((k for k in instance.get_asset_keys()
                    if len(k.path) == 2 and k.path[1] in PER_SOURCE_STAGES and k.path[0] not in keep),
                   key=lambda k: k.path)
    if stale:
        instance.wipe_assets(stale)
        log.info("removed %d asset(s) of dropped sources from the Dagster catalog: %s", len(stale),
                 ", ".join(sorted({k.path[0] for k in stale})))
    return stale


def _run(settings: Settings, sources: Sequence[Source], removed: list[str], log_level: str,
         shared: Sequence[str] = SHARED_STAGES) -> BuildReport:
    instance = dg.DagsterInstance.get()
    selection = [key(stage, s) for s in sources for stage in PER_SOURCE_STAGES] + [key(s) for s in shared]
    run_config = {**IN_PROCESS_RUN_CONFIG, "loggers": {"console": {"config": {"log_level": log_level}}}}
    # SIGINT/SIGTERM while the run executes: Dagster's handler fails the running step with
    # DagsterExecutionInterruptedError and ends the run (a step waiting for a pool slot: the run fails with it,
    # pipeline.defs.executor.PoolSlotWait); the build then stops as interrupted (nothing recorded as a source
    # failure) and its `with` blocks release the locks
    # what is alive now (the imports, Dagster's definitions and instance: ~0.5M objects) lives to the end of this
    # one-shot process: out of the collector's generations, so its full passes during the run walk only what the
    # run makes (run_build's callers are the CLI's `build` and `capture`)
    gc.freeze()
    try:
        with _settings_env(settings), _log_tails_outside_the_terminal_group(), \
                dg.execute_job(_reconstructable_job(settings), instance=instance, run_config=run_config,
                               asset_selection=selection, tags={"docsvault/run": "build"}) as result:
            if _terminated(result):
                raise BuildInterrupted(terminated=True)
            if _interrupted(result):
                _record_interrupt(instance, result.dagster_run)
                raise BuildInterrupted()
            failures = _failures(result, settings.data_dir)
            meta = _metadata(result)
            checks = _failed_checks(result)
            warnings = _shared_check_warnings(_failed_checks(result, ("ERROR", "WARN")))
    except DagsterExecutionInterruptedError as exc:
        # a run the UI terminated (pipeline.defs.executor._in_process_iterator) or a signal to this process
        terminated = str(exc).endswith(TERMINATED_SUFFIX)
        if not terminated:
            _record_interrupt(instance, _own_last_run(instance))
        raise BuildInterrupted(terminated=terminated) from None
    report = _report(settings, sources, removed, failures, meta, checks, shared)
    report.check_warnings = warnings
    return report


INTERRUPTED_MESSAGE = ("docsvault build was interrupted (Ctrl-C or SIGTERM): stopped by its user, so the "
                       "upstream_change sensor does not start its unfinished chain again; `docsvault build` finishes it")


def _record_interrupt(instance: dg.DagsterInstance, run: Any) -> None:
    """Mark the run of a build stopped by Ctrl-C or SIGTERM CANCELED, as the UI's Terminate does. Dagster ends such
    a run FAILURE ("No user initiated termination request was found, treating as failure"): the Runs page showed
    the user's own Ctrl-C as a red failure, and the sensor's next tick started the chain it left unfinished again
    (:func:`pipeline.defs.automation.ended_by_terminate` leaves only a CANCELED run's chain alone), as a plain run
    after a ``--force`` one. A run that is not FAILURE (already CANCELED, or none) is left as it is; an error of the
    instance only logs, the build stops as interrupted either way."""
    if run is None:
        return
    try:
        current = instance.get_run_by_id(run.run_id)
        if current is not None and current.status == dg.DagsterRunStatus.FAILURE:
            instance.report_run_canceled(current, message=INTERRUPTED_MESSAGE)
    except Exception as exc:  # noqa: BLE001 - the interrupt is what the user sees; the run's status is secondary
        log.debug("could not mark the interrupted run %s canceled: %s", run.run_id, exc)


def _own_last_run(instance: dg.DagsterInstance) -> Any:
    """The latest build run this process executed (its :data:`PID_TAG`), or None."""
    try:
        runs = instance.get_runs(dg.RunsFilter(tags={"docsvault/run": "build", PID_TAG: str(os.getpid())}), limit=1)
    except Exception:  # noqa: BLE001
        return None
    return runs[0] if runs else None


def _terminated(result: Any) -> bool:
    """True when the run ended as terminated from the Dagster UI (its Terminate: the project's in-process executor
    starts no further step, :class:`pipeline.defs.executor.InProcessPoolSlotWait`, and Dagster reports the run
    canceled)."""
    from dagster._core.events import DagsterEventType

    return any(event.event_type == DagsterEventType.RUN_CANCELED for event in result.all_events)


def _interrupted(result: Any) -> bool:
    """True when the run failed because the process was interrupted (SIGINT/SIGTERM): a step of it failed so while
    it ran, or the run itself while a step waited for a pool slot another run holds
    (:class:`pipeline.defs.executor.PoolSlotWait`)."""
    for event in result.all_events:
        err = None
        if event.is_step_failure and event.step_failure_data:
            err = event.step_failure_data.error
        elif event.is_run_failure:
            err = getattr(event.event_specific_data, "error", None)
        while err is not None:
            if err.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt", "BuildInterrupted"):
                return True
            err = err.cause
    return False


def _report(settings: Settings, sources: Sequence[Source], removed: list[str], failures: dict[str, str],
            meta: dict[str, dict], checks: dict[str, dict[str, dict]],
            shared: Sequence[str] = SHARED_STAGES) -> BuildReport:
    """The build report of a finished run (and each source's last failure recorded for `status`); ``shared``: the
    shared stages the run was to materialize."""
    statuses: list[SourceStatus] = []
    for s in sources:
        st = SourceStatus(name=s.name)
        for stage in PER_SOURCE_STAGES:
            asset = key(stage, s)
            st.metadata[stage] = meta.get(asset.to_user_string(), {})
            failed = checks.get(asset.to_user_string(), {})
            if not st.ok:
                continue
            if RAN_WITHOUT_ERROR in failed:
                st.ok, st.failed_stage = False, stage
                st.error = _one_line(str(failed[RAN_WITHOUT_ERROR].get("error", "")))
            elif asset.to_python_identifier() in failures:
                st.ok, st.failed_stage, st.error = False, stage, failures[asset.to_python_identifier()]
            elif failed:
                st.ok, st.failed_stage = False, "checks"
                st.error = f"asset check {', '.join(sorted(failed))} of {asset.to_user_string()} failed (see the Dagster UI)"
        if not st.ok and st.failed_stage in PER_SOURCE_STAGES:      # what did not run for the failed source
            for stage in PER_SOURCE_STAGES[PER_SOURCE_STAGES.index(st.failed_stage):]:
                st.metadata[stage] = {}
        # shown by `status` until a build of the source succeeds
        last_error = None if st.ok else {"stage": st.failed_stage, "error": st.error, "at": build.now()}
        if last_error is not None or artifacts.load_state(settings, s.name).get("last_error") is not None:
            artifacts.update_state(settings, s.name, last_error=last_error)
        statuses.append(st)

    shared_errors = [f"{stage}: {failures[stage]}" for stage in SHARED_STAGES if stage in failures]
    shared_errors += [f"{stage}: {stage} was not built" for stage in shared
                      if stage not in meta and stage not in failures]
    return BuildReport(sources=statuses, shared_ok=not shared_errors, shared_error="; ".join(shared_errors),
                       shared_metadata={k: v for k, v in meta.items() if k in SHARED_STAGES}, removed=removed)
