"""Dagster shell: assets, checks, schedules and sensors over the library core (thin bodies calling pipeline.stages).

:func:`build_definitions` merges them for explicit settings (the CLI's build runner, ``pipeline.definitions``,
``pipeline.distributed``, tests); the modules here are also autoloaded by ``[tool.dg]``.
"""

from __future__ import annotations

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
