"""Automation: a sensor that requests runs for only the sources that moved upstream, and a daily refresh schedule
as the fallback (it also catches pages that changed behind an unchanged llms.txt / sitemap).

A sensor-requested run that fails is retried by the daemon (run retries, ``dagster.yaml``: ``run_retries``) up to
``SENSOR_MAX_RETRIES`` times, from the failed steps; after that the source stays failed (red) until its upstream
moves again or someone re-executes the run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

import dagster as dg

from pipeline.config import Settings
from pipeline.defs.assets import PER_SOURCE_STAGES, SHARED_STAGES, key, source_slug
from pipeline.models import Source

log = logging.getLogger("docsvault")

refresh_all_job = dg.define_asset_job(name="refresh_all", selection=dg.AssetSelection.all(),
                                      description="Every asset: each source's chain, then the shared stages.")

daily_refresh = dg.ScheduleDefinition(
    name="daily_refresh",
    job=refresh_all_job,
    cron_schedule="0 4 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Re-fetch every source and rebuild what changed (unchanged content re-embeds nothing).",
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


def upstream_change_sensor(sources: Sequence[Source], settings: Settings | Callable[[], Settings],
                           name: str = "upstream_change") -> dg.SensorDefinition:
    """A sensor that checks each source cheaply (:func:`pipeline.ingest.fetch.watch.check_upstream`) and yields one
    RunRequest per changed source, selecting that source's chain plus the shared stages.

    ``run_key`` = ``<source>:<upstream token>``, so a version is requested once; the cursor (JSON source -> token)
    keeps the last requested token per source. A failed run is retried by the daemon (``RETRY_TAGS``), not
    requested again. Unreachable sources are logged and skipped.
    """
    by_name = {s.name: s for s in sources}

    @dg.sensor(name=name, target=dg.AssetSelection.all(), minimum_interval_seconds=sensor_interval(),
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Requests a run for each source whose upstream moved (git ls-remote, conditional GET of "
                           "llms.txt / sitemap, local listing hash); only that source's assets + the shared stages. "
                           f"A failed run is retried up to {SENSOR_MAX_RETRIES} times.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        from pipeline.defs.executor import release_dead_builds
        from pipeline.ingest.fetch.watch import check_upstream

        current = settings() if callable(settings) else settings
        if context.instance_ref is not None:      # a killed `docsvault build` must not keep holding a pool slot
            for run_id in release_dead_builds(current, context.instance):
                context.log.warning(f"released the pool slots of run {run_id}: its process is gone or the run has ended")
        try:
            cursor: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        except ValueError:
            cursor = {}
        requests: list[dg.RunRequest] = []
        try:
            instance: dg.DagsterInstance | None = context.instance
        except dg.DagsterInvariantViolationError:          # evaluated without an instance (a unit test, a preview)
            instance = None
        unfinished = unfinished_chains(instance, list(by_name.values())) if instance is not None else {}
        for name_, source in by_name.items():
            if name_ in unfinished:     # its last run died partway: fetched (and maybe chunked), never published
                requests.append(dg.RunRequest(
                    run_key=f"{source_slug(source.name)}:unfinished:{unfinished[name_]}",
                    asset_selection=source_selection(source),
                    tags={"docsvault/source": source.name, "docsvault/trigger": "unfinished_run", **RETRY_TAGS},
                ))
                context.log.info(f"{source.name}: its last run stopped after raw_docs and before embeddings; "
                                 "requesting a run to finish the chain")
                continue
            check = check_upstream(source, current)
            if check.error:
                context.log.warning(f"{source.name}: upstream check failed: {check.error}")
                continue
            if not check.changed or cursor.get(name_) == check.token:
                continue
            cursor[name_] = check.token
            requests.append(dg.RunRequest(
                run_key=f"{source_slug(source.name)}:{check.token[:40]}",
                asset_selection=source_selection(source),
                tags={"docsvault/source": source.name, "docsvault/trigger": "upstream_change", **RETRY_TAGS},
            ))
            context.log.info(f"{source.name}: upstream changed ({check.detail}); requesting a run")
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))

    return _sensor


def unfinished_chains(instance: dg.DagsterInstance, sources: Sequence[Source]) -> dict[str, int]:
    """Sources whose chain a run left unfinished: ``<source>/raw_docs`` materialized after the source's last
    ``embeddings`` (the run was killed or crashed between them; its fetch is recorded, so the upstream check sees
    nothing new and would never finish the chain). Source name -> storage id of that ``raw_docs`` materialization
    (one request per interrupted fetch). Empty while any run is queued or in progress: it may be finishing them."""
    active = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    if instance.get_runs_count(filters=dg.RunsFilter(statuses=active)):
        return {}
    out: dict[str, int] = {}
    for source in sources:
        raw, emb = key("raw_docs", source), key("embeddings", source)
        last = {r.asset_entry.asset_key: r.asset_entry.last_materialization_record
                for r in instance.get_asset_records([raw, emb])}
        fetched, embedded = last.get(raw), last.get(emb)
        if fetched is not None and (embedded is None or embedded.storage_id < fetched.storage_id):
            out[source.name] = fetched.storage_id
    return out


def automation_defs(settings: Settings) -> dg.Definitions:
    from pipeline.ingest.sources import load_sources

    sources = load_sources(settings.sources_file)
    return dg.Definitions(jobs=[refresh_all_job], schedules=[daily_refresh],
                          sensors=[upstream_change_sensor(sources, settings)])


@dg.definitions
def automation() -> dg.Definitions:
    """The refresh job, its daily schedule and the upstream-change sensor."""
    return automation_defs(Settings.from_env())
