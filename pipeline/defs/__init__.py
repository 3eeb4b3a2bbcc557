"""Dagster shell: assets, checks, schedules and sensors over the library core (thin bodies calling pipeline.stages)."""
