"""Dagster entry point, loaded the way ``[tool.dg]`` in pyproject.toml says: every module of ``pipeline/defs/`` is
autoloaded (``dg check defs``, ``dg list defs``, ``dg launch --assets '*'``, ``dg dev``, and
``dagster asset materialize -m pipeline.definitions --select '*'`` / ``dagster-webserver -m pipeline.definitions``).

The sources come from DOCSVAULT_SOURCES (default ./sources.yaml); see pipeline.config for every path.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipeline.config import Settings


def build_definitions(settings: Settings) -> dg.Definitions:
    """The same definitions as the defs folder, for explicit settings (``docsvault build``, tests).

    Raises:
        SourceConfigError: sources.yaml invalid, or two source names map to the same asset key.
    """
    from pipeline.defs.assets import asset_defs
    from pipeline.defs.automation import automation_defs
    from pipeline.defs.executor import executor_defs
    from pipeline.defs.resources import resource_defs

    return dg.Definitions.merge(asset_defs(settings), automation_defs(settings), resource_defs(settings),
                                executor_defs())


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
