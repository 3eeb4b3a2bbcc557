"""Automation: a sensor that requests runs for only the sources that moved upstream, and a daily refresh schedule
as the fallback (it also catches pages that changed behind an unchanged llms.txt / sitemap).

A sensor-requested run that fails is retried by the daemon (run retries, ``dagster.yaml``: ``run_retries``) up
to ``SENSOR_MAX_RETRIES`` times, from the failed steps; after that the source stays failed (red) until its
upstream moves again or someone re-executes the run. A failed fetch (of any run: the UI, the schedule) is
retried by the sensor once its upstream answers again, one request per failure.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from pipeline.config import Settings
from pipeline.defs.assets import PER_SOURCE_STAGES, SHARED_STAGES, key, source_slug
from pipeline.models import Source
from pipeline.stages.base import now as utc_now

log = logging.getLogger("docsvault")

refresh_all_job = dg.define_asset_job(name="refresh_all", selection=dg.AssetSelection.all(),
                                      description="Every asset: each source's chain, then the shared stages.")

SCHEDULE_TIMEZONE_ENV = "DOCSVAULT_SCHEDULE_TIMEZONE"


def schedule_timezone() -> str:
    """The time zone of ``daily_refresh``'s 04:00: ``$DOCSVAULT_SCHEDULE_TIMEZONE`` (an IANA name such as
    ``Asia/Tokyo``), else UTC, Dagster's default. A name the time-zone database does not know is one warning line
    and UTC (the code location still loads)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from pipeline.config import env_value

    name = env_value(SCHEDULE_TIMEZONE_ENV).strip()
    if not name:
        return "UTC"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("%s=%r is no time zone name (e.g. Asia/Tokyo, Europe/Berlin); daily_refresh runs at 04:00 UTC",
                    SCHEDULE_TIMEZONE_ENV, name)
        return "UTC"
    return name


_ZONE = schedule_timezone()
daily_refresh = dg.ScheduleDefinition(
    name="daily_refresh",
    job=refresh_all_job,
    cron_schedule="0 4 * * *",
    execution_timezone=_ZONE,
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description=f"Every day at 04:00 {_ZONE} ({SCHEDULE_TIMEZONE_ENV} sets the zone): re-fetch every "
                "source and rebuild what changed (unchanged content re-embeds nothing).",
)

SENSOR_INTERVAL_S = 15 * 60
SENSOR_INTERVAL_ENV = "DOCSVAULT_SENSOR_INTERVAL"
MIN_SENSOR_INTERVAL_S = 30


def sensor_interval() -> int:
    """Seconds between two ticks of the upstream sensor: ``$DOCSVAULT_SENSOR_INTERVAL`` (whole seconds, at least
    MIN_SENSOR_INTERVAL_S: a shorter one is raised to it with a warning), else SENSOR_INTERVAL_S (15 minutes).
    Read when the definitions load (the daemon's environment)."""
    from pipeline.config import int_env

    seconds = int_env(SENSOR_INTERVAL_ENV, SENSOR_INTERVAL_S)
    if seconds < MIN_SENSOR_INTERVAL_S:
        log.warning("%s=%d is below %d s: the sensor ticks every %d s", SENSOR_INTERVAL_ENV, seconds,
                    MIN_SENSOR_INTERVAL_S, MIN_SENSOR_INTERVAL_S)
        seconds = MIN_SENSOR_INTERVAL_S
    return seconds
SENSOR_MAX_RETRIES = 2

#: tags of a sensor-requested run: retried from its failed steps, at most SENSOR_MAX_RETRIES times
RETRY_TAGS = {"dagster/max_retries": str(SENSOR_MAX_RETRIES), "dagster/retry_strategy": "FROM_FAILURE"}


def source_selection(source: Source) -> list[dg.AssetKey]:
    """The asset keys one source's run materializes: its own chain, then the shared stages."""
    return [key(stage, source) for stage in PER_SOURCE_STAGES] + [dg.AssetKey([s]) for s in SHARED_STAGES]


#: the cursor's entry of the failed fetches a retry was requested for (source -> its ``failing_since``); a
#: source name cannot start with a dot, so it is no source's entry
RETRIED_KEY = ".retried"
#: the cursor's entry of the code version (:attr:`CodeChanged.token`) an upgrade run was requested for: once, not on
#: every tick while its stages still carry the older version (a run terminated or failed before they materialized)
CODE_KEY = ".code"


def upstream_change_sensor(sources: Sequence[Source], settings: Settings | Callable[[], Settings],
                           name: str = "upstream_change", sources_file: Path | None = None) -> dg.SensorDefinition:
    """A sensor that checks each source cheaply (:func:`pipeline.ingest.fetch.watch.check_upstream`) and yields one
    RunRequest per changed source, selecting that source's chain plus the shared stages.

    ``run_key`` = ``<source>:<upstream token>``, so a version is requested once; the cursor (JSON source ->
    token) keeps the last requested token per source, and forgets the sources no longer in sources.yaml. A
    source with nothing built has the token of its configuration, and of its removal when a build removed
    it before (:func:`pipeline.ingest.fetch.watch.check_upstream`): back in sources.yaml unchanged, it is
    requested again. A source whose last fetch failed (``fetch_status: failed`` in
    ``<data>/state/<source>.json``) while its upstream now answers and has not moved is requested once per
    failure (``run_key``
    ``<source>:fetch_failed:<failing_since>``, tag ``docsvault/trigger: fetch_failed``; the cursor's
    :data:`RETRIED_KEY` entry keeps the failures retried). A failed run is retried by the daemon
    (``RETRY_TAGS``), not requested again. Unreachable sources are logged and skipped. A tick that requests
    nothing returns a SkipReason saying why (``no source moved (3 checked)``, and the sources that could not
    be checked).

    ``sources_file``: the sources.yaml ``sources`` were loaded from, read again on each tick
    (:func:`sources_now`): a run started now reads it too, so a source no longer in it is not requested (its run
    failed to start: no asset supplies its keys), the others are checked as they stand in it, and the tick says
    the code location needs a reload.

    Long: the decorator's description and the tick function (one pass over the sources deciding each one's
    request against the cursor) belong together; the decisions live in ``check_upstream``.
    """
    by_name = {s.name: s for s in sources}

    @dg.sensor(name=name, target=dg.AssetSelection.all(), minimum_interval_seconds=sensor_interval(),
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Requests a run for each source whose upstream moved (git ls-remote, conditional GET of "
                           "llms.txt / sitemap, local listing hash), whose entry in sources.yaml was edited since its "
                           "last fetch, that has nothing built, or whose last "
                           "fetch failed and whose upstream answers again; only that source's assets + the "
                           f"shared stages. A failed run is retried up to {SENSOR_MAX_RETRIES} times.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        """One tick. Long: probes every source once, then updates the cursor and the retried failures in one
        place, so a tick that raises half-way requests nothing and keeps the cursor."""
        from pipeline.common import artifacts
        from pipeline.defs.executor import release_dead_builds
        from pipeline.ingest.fetch.watch import check_upstream, config_edit

        current = settings() if callable(settings) else settings
        if context.instance_ref is not None:      # a killed `docsvault build` must not keep holding a pool slot
            for run_id in release_dead_builds(current, context.instance):
                context.log.warning(f"released the pool slots of run {run_id}: its process is gone or the run has ended")
        held = other_sensor(context, current)
        if held:                                  # another daemon's sensor builds this data folder
            context.log.warning(held)
            return dg.SensorResult(skip_reason=held, cursor=context.cursor)
        try:
            loaded = json.loads(context.cursor) if context.cursor else {}
        except ValueError:
            loaded = {}
        loaded = loaded if isinstance(loaded, dict) else {}
        # sources no longer in sources.yaml are forgotten: back later, they are checked as new
        cursor: dict[str, Any] = {k: v for k, v in loaded.items() if k in by_name and isinstance(v, str)}
        retried = {k: v for k, v in dict(loaded.get(RETRIED_KEY) or {}).items() if k in by_name}
        requests: list[dg.RunRequest] = []
        unreachable: list[str] = []
        failed_checks: dict[str, str] = {}
        answered: list[str] = []
        try:
            instance: dg.DagsterInstance | None = context.instance
        except dg.DagsterInvariantViolationError:          # evaluated without an instance (a unit test, a preview)
            instance = None
        checked, stale = (by_name, "") if sources_file is None else sources_now(by_name, sources_file)
        if stale:
            context.log.warning(stale)
        unfinished, terminated = (unfinished_chains(instance, list(checked.values())) if instance is not None
                                  else ({}, []))
        pending = fetch_pending(instance, list(checked.values())) if instance is not None else {}
        waiting: list[str] = []

        def request(source: Source, run_key: str, trigger: str, why: str) -> None:
            requests.append(dg.RunRequest(
                run_key=f"{source_slug(source.name)}:{run_key}", asset_selection=source_selection(source),
                tags={"docsvault/source": source.name, "docsvault/trigger": trigger, **RETRY_TAGS}))
            context.log.info(f"{source.name}: {why}")

        for name_, source in checked.items():
            if name_ in unfinished:     # its last run died partway: fetched (and maybe chunked), never published
                request(source, f"unfinished:{unfinished[name_]}", "unfinished_run",
                        "its last run stopped after raw_docs and before embeddings; requesting a run to "
                        "finish the chain")
                continue
            check = check_upstream(source, current)
            if check.error:
                context.log.warning(f"{source.name}: upstream check failed: {check.error}")
                unreachable.append(name_)
                failed_checks[name_] = check.error
                continue
            answered.append(name_)
            state = artifacts.load_state(current, name_)
            failing = str(state.get("failing_since") or state.get("failed_at") or "") \
                if state.get("fetch_status") == "failed" and not check.never_fetched else ""
            token = moved_token(check)
            if name_ in pending and (check.changed or failing or config_edit(source, state) is not None):
                # the queued run fetches whatever is upstream when it starts: a run per commit would pile up behind
                # the source's pool, each fetching the same newest version; the cursor stays, so a version pushed
                # after that run's fetch began is requested on a later tick
                waiting.append(name_)
                context.log.info(f"{source.name}: upstream changed ({check.detail}); run {pending[name_]} is "
                                 "queued for it and has not fetched yet: it will fetch this version, no new run")
                continue
            if check.changed and cursor.get(name_) != token:
                cursor[name_] = token
                if failing:             # this run retries the failed fetch too
                    retried[name_] = failing
                request(source, token, "upstream_change", f"upstream changed ({check.detail}); requesting a run")
                continue
            edit = None if failing else config_edit(source, state)
            if edit is not None and cursor.get(name_) != edit:
                cursor[name_] = edit
                request(source, edit, "config_edit",
                        "its entry in sources.yaml, as this version of docsvault reads it, changed since its last "
                        "fetch (an edit, or an upgrade that reads it otherwise: a folder in an Obsidian vault is now "
                        "format: obsidian); requesting a run")
                continue
            if failing and retried.get(name_) != failing:
                retried[name_] = failing
                request(source, f"fetch_failed:{failing}", "fetch_failed",
                        f"its last fetch failed ({failing}: {state.get('fetch_error')}) and its upstream "
                        f"answers again ({check.detail}); requesting a run to retry it")
        # `docsvault status` names a source whose upstream the sensor cannot check (a deleted branch): no run is
        # requested for it, so its fetch stayed "ok" and its asset green for as long as that lasted
        artifacts.record_upstream_checks(current, failed_checks, answered, utc_now(), by_name)
        behind = unpublished(instance, list(checked.values())) if instance is not None and not requests else None
        if behind is not None:
            terminated += behind.terminated
        if behind is not None and behind.sources:
            requests.append(dg.RunRequest(
                run_key=f"unpublished:{behind.storage_id}", asset_selection=[dg.AssetKey([s]) for s in SHARED_STAGES],
                tags={"docsvault/trigger": "unpublished", **RETRY_TAGS}))
            context.log.info(f"{', '.join(behind.sources)}: embedded after the warehouse's last publish (a run "
                             "stopped before the shared stages); requesting link_graph, warehouse and retrieval_eval")
        upgraded = code_changed(instance, list(checked.values())) if instance is not None and not requests else None
        if upgraded is not None and upgraded.token == loaded.get(CODE_KEY):
            upgraded = None                       # requested on an earlier tick: once per version of the code
        if upgraded is not None:
            cursor[CODE_KEY] = upgraded.token
            for name_, stages in upgraded.by_source.items():
                request(checked[name_], f"code:{upgraded.token}", "code_changed",
                        f"{', '.join(stages)} last built by other code than this version's (an upgrade); "
                        "requesting a run to rebuild what the new code changes")
            if not upgraded.by_source and upgraded.shared:
                requests.append(dg.RunRequest(
                    run_key=f"code:{upgraded.token}", asset_selection=[dg.AssetKey([s]) for s in SHARED_STAGES],
                    tags={"docsvault/trigger": "code_changed", **RETRY_TAGS}))
                context.log.info(f"{', '.join(upgraded.shared)} last built by other code than this version's (an "
                                 "upgrade); requesting link_graph, warehouse and retrieval_eval")
        if not requests and not stale and instance is not None:
            removal = removal_request(instance, current, list(checked))
            if removal is not None:
                requests.append(removal[0])
                context.log.info(removal[1])
        if retried:
            cursor[RETRIED_KEY] = retried
        if CODE_KEY not in cursor and isinstance(loaded.get(CODE_KEY), str):
            cursor[CODE_KEY] = loaded[CODE_KEY]
        new_cursor = json.dumps(cursor, sort_keys=True)
        if requests:
            return dg.SensorResult(run_requests=requests, cursor=new_cursor)
        why = f"no source moved ({len(checked)} checked" if not waiting else (
            f"no new run ({len(checked)} checked; moved, each with a run queued that has not fetched yet and will "
            f"fetch the new version: {', '.join(f'{n} (run {pending[n]})' for n in waiting)}")
        if unreachable:
            why += f"; {len(unreachable)} could not be checked: {', '.join(unreachable)} (see the tick's log)"
        why += ")"
        if terminated:
            why += (f"; not restarted: the run building {', '.join(sorted(set(terminated)))} was terminated before "
                    "it published (materialize the source's assets or run `docsvault build` to finish it)")
        return dg.SensorResult(skip_reason=why + (f"; {stale}" if stale else ""), cursor=new_cursor)

    return _sensor


#: ticks another Dagster instance's sensor may miss and still hold a data folder (:func:`other_sensor`)
SENSOR_LIVE_TICKS = 3


def moved_token(check: Any) -> str:
    """The cursor's token and run key (after ``<source>:``) of the upstream version a check saw
    (:class:`pipeline.ingest.fetch.watch.UpstreamCheck`: its ``token``, a commit id, a listing or content hash, at
    most 40 characters of it), ``<token>@<8 hex digits of the last fetch it compared with>`` (``since``: the
    recorded revision and time: git and local sources), the bare token when nothing was fetched and for an http
    source (whose check may say "changed" after every fetch). So a version that comes back is requested again:
    a git source force-pushed back to a commit the sensor had requested before (a bad release undone with ``git
    push -f``; likewise a local folder restored from a backup with its mtimes), which Dagster would drop as a run
    key it has seen (``duck:<commit>``), or the cursor would still hold when the earlier run fetched a later
    commit."""
    import hashlib

    if not check.since:
        return check.token[:40]
    return f"{check.token[:40]}@{hashlib.sha256(check.since.encode('utf-8')).hexdigest()[:8]}"


def other_sensor(context: dg.SensorEvaluationContext, settings: Settings) -> str:
    """"" when this instance's sensor may tick over ``settings.data_dir`` (the tick is recorded there:
    :func:`pipeline.common.artifacts.claim_sensor`), else the line saying which other instance's sensor builds it:
    one that ticked within the last :data:`SENSOR_LIVE_TICKS` intervals from a process that is not gone. Two
    daemons over one data folder (a `docsvault ui` or `dg dev` with another DAGSTER_HOME beside the service) each
    requested a run for every change, and each UI showed only its own runs. "" too without an instance (a test)."""
    import time

    from pipeline.common import artifacts

    try:
        instance = context.instance
    except dg.DagsterInvariantViolationError:
        return ""
    now = time.time()
    home = str(Path(instance.root_directory).resolve())
    try:                             # the instance itself: DAGSTER_HOME paths are alike across hosts and containers
        storage = str(instance.run_storage.get_run_storage_id() or "")
    except Exception:  # noqa: BLE001 - a storage without an id: the instance is its DAGSTER_HOME
        storage = ""
    other = artifacts.claim_sensor(settings, home, SENSOR_LIVE_TICKS * sensor_interval(), now, storage)
    if other is None:
        return ""
    ago = f", last tick at {other['at_iso']}" if other.get("at_iso") else ""
    # the same DAGSTER_HOME path with another run storage (another machine's or container's instance): that path
    # is no remedy, one storage is
    fix = ("point both at one run storage (the same dagster.yaml storage) or start this one with its own "
           "DOCSVAULT_DATA") if other.get("instance") == home else \
        "start this one with the other's DAGSTER_HOME or its own DOCSVAULT_DATA"
    return (f"data folder {settings.data_dir} is built by the upstream_change sensor of another Dagster instance "
            f"(DAGSTER_HOME {other.get('instance')}, pid {other.get('pid')} on {other.get('host')}{ago}): this "
            f"sensor (DAGSTER_HOME {home}) requests nothing, so no change is built twice; stop one of the two "
            f"daemons, or {fix}")


def sources_now(loaded: dict[str, Source], sources_file: Path) -> tuple[dict[str, Source], str]:
    """The sources of ``loaded`` (name -> source, as the code location read sources.yaml when it loaded) still in
    ``sources_file``, each as the file has it now, and a line for the tick when the file no longer matches
    ``loaded`` ("" when it does). A file that does not load gives no source: every run would fail to start."""
    from pipeline.common.errors import SourceConfigError
    from pipeline.ingest.sources import load_sources

    reload = "reload the code location (UI: 'Reload definitions', or restart `dg dev` / the daemon)"
    try:
        now = {s.name: s for s in load_sources(sources_file)}
    except SourceConfigError as exc:
        return {}, f"{exc}: no source checked until it loads (a run started now would fail to load it)"
    removed, added = [n for n in loaded if n not in now], [n for n in now if n not in loaded]
    edited = [n for n in loaded if n in now and now[n] != loaded[n]]
    if not (removed or added or edited):
        return {n: now[n] for n in loaded}, ""
    what = [f"{label} {', '.join(names)}" for label, names in
            (("removed:", removed), ("added:", added), ("edited:", edited)) if names]
    skipped = f"; {', '.join(removed)} not requested" if removed else ""
    return ({n: now[n] for n in loaded if n in now},
            f"{sources_file} changed since the code location loaded ({'; '.join(what)}){skipped}: {reload}")


ACTIVE_RUN_STATUSES = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                       dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
#: how long a failed run that Dagster will retry (``dagster/will_retry``) counts as in progress while its retry is
#: not launched yet: the daemon launches it within seconds; one that never comes (the daemon was down when the run
#: failed: it skips failures older than its start) holds nothing after this
RETRY_WAIT_SECONDS = 300


def runs_in_progress(instance: dg.DagsterInstance) -> bool:
    """Whether a run is queued or in progress, or failed and about to be retried by the daemon (run retries:
    the sensor's runs carry :data:`RETRY_TAGS`): either may still finish a chain or publish. Before, a tick
    right after a run was killed (the tick itself reports it failed, :func:`pipeline.defs.executor.release_dead_builds`)
    requested the source's unfinished chain while the daemon retried the same run: two runs of one source."""
    import time

    from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG

    if instance.get_runs_count(filters=dg.RunsFilter(statuses=ACTIVE_RUN_STATUSES)):
        return True
    since = time.time() - RETRY_WAIT_SECONDS
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE],
                                                                 tags={WILL_RETRY_TAG: "true"}), limit=10):
        ended = record.end_time or record.update_timestamp.timestamp()
        if AUTO_RETRY_RUN_ID_TAG not in record.dagster_run.tags and ended >= since:
            return True
    return False


@dataclass(frozen=True)
class Unpublished:
    """What the warehouse's last publish left out (:func:`unpublished`).

    Attributes:
        storage_id: the storage id of the warehouse's last materialization (the sensor's run key: one request per
            publish, so a warehouse that keeps failing is requested once, not on every tick).
        sources: sources whose ``embeddings`` materialized after it, by a run that was not terminated: to publish.
        terminated: sources whose ``embeddings`` materialized after it by a terminated run
            (:func:`ended_by_terminate`): not started again by the sensor, only named in its skip reason.
    """

    storage_id: int
    sources: list[str]
    terminated: list[str]


def unpublished(instance: dg.DagsterInstance, sources: Sequence[Source]) -> Unpublished | None:
    """The sources of ``sources`` whose ``embeddings`` materialized after the warehouse's last materialization: a
    run that built them stopped before the shared stages (``dg launch --assets group:<source>``, a run killed or
    failed before ``warehouse``), so the vault holds notes that search does not, and upstream looks unchanged.
    None when the warehouse was never published, or while a run is queued or in progress (it may publish); both
    lists empty when every source's embeddings are older."""
    if runs_in_progress(instance):
        return None
    warehouse = dg.AssetKey(["warehouse"])
    keys = {key("embeddings", s): s.name for s in sources}
    last = {r.asset_entry.asset_key: r.asset_entry.last_materialization_record
            for r in instance.get_asset_records([warehouse, *keys])}
    published = last.get(warehouse)
    if published is None:
        return None
    newer = {name: last[k] for k, name in keys.items()
             if last.get(k) is not None and last[k].storage_id > published.storage_id}
    stopped = [name for name, record in newer.items() if ended_by_terminate(instance, record)]
    return Unpublished(published.storage_id, [name for name in newer if name not in stopped], stopped)


@dataclass(frozen=True)
class CodeChanged:
    """Stages last materialized by other code than the loaded one (:func:`code_changed`).

    Attributes:
        by_source: source -> its stages (``raw_docs`` …) whose last materialization has another code version.
        shared: the shared stages (``warehouse`` …) likewise.
        token: a hash of the loaded code versions (the run keys: one request per version of the code).
    """

    by_source: dict[str, list[str]]
    shared: list[str]
    token: str


def code_changed(instance: dg.DagsterInstance, sources: Sequence[Source]) -> CodeChanged | None:
    """The stages whose last materialization carries another ``dagster/code_version`` than the stage has now
    (:data:`pipeline.defs.assets.CODE_OF`): after an upgrade of docsvault (a `git pull`, the services restarted)
    the sensor said "no source moved" on every tick, and the data folder kept what the old code built until
    upstream moved (found by an operator, session 40). None while a run is queued or in progress (it may rebuild
    them) or when nothing differs; a stage never materialized, or recorded without a code version, does not
    count."""
    from pipeline import stages as build
    from pipeline.defs.assets import CODE_OF
    from pipeline.stages.base import digest

    if runs_in_progress(instance):
        return None
    now = {stage: build.code_version(code) for stage, code in CODE_OF.items()}

    def differs(keys: dict[dg.AssetKey, str]) -> list[str]:
        out = []
        for record in instance.get_asset_records(list(keys)):
            last = record.asset_entry.last_materialization_record
            materialization = last.asset_materialization if last is not None else None
            was = (materialization.tags or {}).get("dagster/code_version") if materialization is not None else None
            stage = keys[record.asset_entry.asset_key]
            if was and was != now[stage]:
                out.append(stage)
        return sorted(out, key=list(CODE_OF).index)

    by_source = {s.name: found for s in sources
                 if (found := differs({key(stage, s): stage for stage in PER_SOURCE_STAGES}))}
    shared = differs({dg.AssetKey([stage]): stage for stage in SHARED_STAGES})
    if not by_source and not shared:
        return None
    return CodeChanged(by_source, shared, digest(sorted(now.items()))[:16])


def ended_by_terminate(instance: dg.DagsterInstance, record: Any) -> bool:
    """Whether the run of a materialization ``record`` (an ``EventLogRecord``) was terminated: it ended CANCELED
    (the UI's Terminate, ``dagster run terminate``). The sensor does not start such a chain again by itself: a
    user who stops a run wants it stopped (it came back at the next tick); the next upstream change, the schedule,
    or a materialization by hand finishes it. A killed or failed run (FAILURE) is finished by the sensor."""
    run_id = getattr(record, "run_id", None)
    run = instance.get_run_by_id(run_id) if run_id else None
    return run is not None and run.status == dg.DagsterRunStatus.CANCELED


def removal_request(instance: dg.DagsterInstance, settings: Settings,
                    names: Sequence[str]) -> tuple[dg.RunRequest, str] | None:
    """A run of the shared stages (their ``warehouse`` step removes what was built of sources no longer in
    sources.yaml: :func:`pipeline.stages.remove_dropped_sources`) and the line for the tick's log, when sources
    that earlier builds wrote (:func:`pipeline.stages.built_source_names`) are not among ``names`` (the sources of
    sources.yaml, as loaded) and no run is queued or in progress (it may publish). Before, a source removed from
    sources.yaml stayed in search and in the vault until some other source moved: every tick said "no source
    moved". ``run_key`` ``removed:<hash of the names and their state files' times>``, so one removal is requested
    once; none when sources.yaml lists no source (a build refuses to remove every source)."""
    from pipeline.stages import built_source_names
    from pipeline.stages.base import digest

    gone = [n for n in built_source_names(settings) if n not in set(names)]
    if not gone or not names or runs_in_progress(instance):
        return None

    def stamp(name: str) -> int:
        for path in (settings.state_dir / f"{name}.json", settings.vault_dir / name):
            try:
                return path.stat().st_mtime_ns
            except OSError:
                continue
        return 0

    request = dg.RunRequest(run_key=f"removed:{digest([(n, stamp(n)) for n in gone])[:16]}",
                            asset_selection=[dg.AssetKey([s]) for s in SHARED_STAGES],
                            tags={"docsvault/trigger": "source_removed", **RETRY_TAGS})
    return request, (f"{', '.join(gone)}: no longer in sources.yaml but still built (in search and the vault); "
                     "requesting link_graph, warehouse and retrieval_eval to remove them")


def fetch_pending(instance: dg.DagsterInstance, sources: Sequence[Source]) -> dict[str, str]:
    """Sources that a queued or running run will fetch and has not started fetching: source name -> that run's id.

    A run fetches a source when its asset selection holds the source's ``raw_docs`` (a sensor request, the UI's
    Materialize) or it is a ``refresh_all`` run (the schedule); it has not started fetching while it is queued or
    starting, or running without a ``STEP_START`` of that ``raw_docs`` step (waiting for the source's pool). Such a
    run reads the upstream as it is when its fetch begins, so a newer version needs no run of its own. The oldest
    such run is named when several are."""
    from dagster._core.events import DagsterEventType

    wanted = {key("raw_docs", s): s.name for s in sources}
    waiting = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED]
    out: dict[str, str] = {}
    for record in reversed(instance.get_run_records(filters=dg.RunsFilter(statuses=waiting))):
        run = record.dagster_run
        if run.asset_selection is not None:
            names = [wanted[k] for k in run.asset_selection if k in wanted]
        else:
            names = list(wanted.values()) if run.job_name == refresh_all_job.name else []
        names = [n for n in names if n not in out]
        if not names:
            continue
        started: set[str] = set()
        if run.status == dg.DagsterRunStatus.STARTED:
            started = {r.event_log_entry.step_key or "" for r in instance.get_records_for_run(
                run.run_id, of_type=DagsterEventType.STEP_START, limit=10_000).records}
        for name in names:
            if key("raw_docs", name).to_python_identifier() not in started:
                out[name] = run.run_id
    return out


def unfinished_chains(instance: dg.DagsterInstance, sources: Sequence[Source]) -> tuple[dict[str, int], list[str]]:
    """Sources whose chain a run left unfinished: ``<source>/raw_docs`` materialized after the source's last
    ``embeddings`` (the run was killed or crashed between them; its fetch is recorded, so the upstream check sees
    nothing new and would never finish the chain). Source name -> storage id of that ``raw_docs`` materialization
    (one request per interrupted fetch), and apart the sources whose run was terminated (:func:`ended_by_terminate`),
    which are not requested. Empty while any run is queued or in progress: it may be finishing them."""
    if runs_in_progress(instance):
        return {}, []
    out: dict[str, int] = {}
    terminated: list[str] = []
    for source in sources:
        raw, emb = key("raw_docs", source), key("embeddings", source)
        last = {r.asset_entry.asset_key: r.asset_entry.last_materialization_record
                for r in instance.get_asset_records([raw, emb])}
        fetched, embedded = last.get(raw), last.get(emb)
        if fetched is not None and (embedded is None or embedded.storage_id < fetched.storage_id):
            if ended_by_terminate(instance, fetched):
                terminated.append(source.name)
            else:
                out[source.name] = fetched.storage_id
    return out, terminated


def automation_defs(settings: Settings) -> dg.Definitions:
    from pipeline.ingest.sources import load_sources

    sources = load_sources(settings.sources_file)
    return dg.Definitions(jobs=[refresh_all_job], schedules=[daily_refresh],
                          sensors=[upstream_change_sensor(sources, settings, sources_file=settings.sources_file)])


@dg.definitions
def automation() -> dg.Definitions:
    """The refresh job, its daily schedule and the upstream-change sensor."""
    return automation_defs(Settings.from_env())
