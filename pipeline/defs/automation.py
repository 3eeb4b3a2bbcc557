"""Schedules: a daily refresh of every asset (sensors for upstream change come with the fetch issue)."""

from __future__ import annotations

import dagster as dg

refresh_all_job = dg.define_asset_job(name="refresh_all", selection=dg.AssetSelection.all())

daily_refresh = dg.ScheduleDefinition(
    name="daily_refresh",
    job=refresh_all_job,
    cron_schedule="0 4 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Re-fetch every source and rebuild what changed (unchanged content re-embeds nothing).",
)
