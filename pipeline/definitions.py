"""Dagster entry point: ``dagster asset materialize -m pipeline.definitions --select '*'`` / ``dagster dev``.

The sources come from DOCSVAULT_SOURCES (default ./sources.yaml); see pipeline.config for every path.
"""

from __future__ import annotations

import dagster as dg

from pipeline.config import Settings
from pipeline.defs.assets import shared_assets, source_assets, source_slug
from pipeline.defs.automation import daily_refresh, refresh_all_job, upstream_change_sensor
from pipeline.defs.resources import DocsvaultResource
from pipeline.errors import SourceConfigError
from pipeline.sources import load_sources


def build_definitions(settings: Settings) -> dg.Definitions:
    """Definitions for the sources in ``settings.sources_file``: one asset chain per source + the shared stages.

    Raises:
        SourceConfigError: sources.yaml invalid, or two source names map to the same asset key.
    """
    sources = load_sources(settings.sources_file)
    slugs: dict[str, str] = {}
    for s in sources:
        other = slugs.setdefault(source_slug(s.name), s.name)
        if other != s.name:
            raise SourceConfigError(
                f"{settings.sources_file}: sources '{other}' and '{s.name}' map to the same asset key "
                f"'{source_slug(s.name)}'; rename one"
            )
    assets: list = []
    for s in sources:
        assets.extend(source_assets(s))
    assets.extend(shared_assets(sources))
    return dg.Definitions(
        assets=[a for a in assets if not isinstance(a, dg.AssetChecksDefinition)],
        asset_checks=[a for a in assets if isinstance(a, dg.AssetChecksDefinition)],
        jobs=[refresh_all_job],
        schedules=[daily_refresh],
        sensors=[upstream_change_sensor(sources, settings)],
        resources={"docsvault": DocsvaultResource.from_settings(settings)},
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(Settings.from_env())
