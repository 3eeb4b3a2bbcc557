"""Automation: a sensor that requests runs for only the sources that moved upstream, and a daily refresh schedule
as the fallback (it also catches pages that changed behind an unchanged llms.txt / sitemap)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import dagster as dg

from pipeline.config import Settings
from pipeline.defs.assets import PER_SOURCE_STAGES, SHARED_STAGES, key, source_slug
from pipeline.models import Source

refresh_all_job = dg.define_asset_job(name="refresh_all", selection=dg.AssetSelection.all())

daily_refresh = dg.ScheduleDefinition(
    name="daily_refresh",
    job=refresh_all_job,
    cron_schedule="0 4 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Re-fetch every source and rebuild what changed (unchanged content re-embeds nothing).",
)

SENSOR_INTERVAL_S = 15 * 60


def source_selection(source: Source) -> list[dg.AssetKey]:
    """The asset keys one source's run materializes: its own chain, then the shared stages."""
    return [key(stage, source) for stage in PER_SOURCE_STAGES] + [dg.AssetKey([s]) for s in SHARED_STAGES]


def upstream_change_sensor(sources: Sequence[Source], settings: Settings | Callable[[], Settings],
                           name: str = "upstream_change") -> dg.SensorDefinition:
    """A sensor that checks each source cheaply (:func:`pipeline.fetch.watch.check_upstream`) and yields one
    RunRequest per changed source, selecting that source's chain plus the shared stages.

    ``run_key`` = ``<source>:<upstream token>``, so a version is requested once; the cursor (JSON source -> token)
    keeps the last requested token per source. Unreachable sources are logged and skipped.
    """
    by_name = {s.name: s for s in sources}

    @dg.sensor(name=name, target=dg.AssetSelection.all(), minimum_interval_seconds=SENSOR_INTERVAL_S,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Requests a run for each source whose upstream moved (git ls-remote, conditional GET of "
                           "llms.txt / sitemap, local listing hash); only that source's assets + the shared stages.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        from pipeline.fetch.watch import check_upstream

        current = settings() if callable(settings) else settings
        try:
            cursor: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        except ValueError:
            cursor = {}
        requests: list[dg.RunRequest] = []
        for name_, source in by_name.items():
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
                tags={"docsvault/source": source.name, "docsvault/trigger": "upstream_change"},
            ))
            context.log.info(f"{source.name}: upstream changed ({check.detail}); requesting a run")
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))

    return _sensor
