"""Dagster entry point, loaded the way ``[tool.dg]`` in pyproject.toml says: every module of ``pipeline/defs/`` is
autoloaded (``dg check defs``, ``dg list defs``, ``dg launch --assets '*'``, ``dg dev``, and
``dagster asset materialize -m pipeline.definitions --select '*'`` / ``dagster-webserver -m pipeline.definitions``).

The sources come from DOCSVAULT_SOURCES (default ./sources.yaml); see pipeline.config for every path.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipeline.defs import build_definitions  # noqa: F401  (the entry point's API: docsvault build, tests)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
