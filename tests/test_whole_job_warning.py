"""A run of the implicit asset job without an asset selection says first that it builds every asset: Dagster's
`dagster asset materialize --select` and `dg launch --assets` turn a selection that matches no asset (a misspelt
key, a source's name where its group is meant) into no selection and build everything, exit status 0 (an
operator's CI typo, session 40)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableRepository

from pipeline.defs.executor import WHOLE_JOB_WARNING, whole_job_warning

REPO = Path(__file__).resolve().parents[1]


def _warnings(instance: dg.DagsterInstance, selection: list[dg.AssetKey] | None) -> list[str]:
    job = ReconstructableRepository.for_module("pipeline.definitions", "defs", working_directory=str(REPO)) \
        .get_reconstructable_job("__ASSET_JOB")
    result = dg.execute_job(job, instance=instance, asset_selection=selection)
    assert result.success
    return [e.user_message for e in instance.all_logs(result.run_id) if e.user_message == WHOLE_JOB_WARNING]


def test_a_run_of_every_asset_without_a_selection_says_so(built_tiny_env: Path, tmp_path: Path) -> None:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        assert _warnings(instance, None) == [WHOLE_JOB_WARNING]
        assert _warnings(instance, [dg.AssetKey("warehouse")]) == []


def test_only_the_implicit_job_without_a_selection_is_warned_about() -> None:
    from dagster._core.storage.dagster_run import DagsterRun

    every = [dg.AssetKey("warehouse"), dg.AssetKey(["tiny", "raw_docs"])]
    assert whole_job_warning(DagsterRun(job_name="__ASSET_JOB")) == WHOLE_JOB_WARNING
    assert whole_job_warning(DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset(every))) is None
    assert whole_job_warning(DagsterRun(job_name="refresh_all")) is None
    assert WHOLE_JOB_WARNING == (
        "this run builds every asset: it has no asset selection. A --select (dagster asset materialize) or --assets "
        "(dg launch) that matches no asset, such as a misspelt key or a source's name with '-' instead of its "
        "group 'obsidian_help', runs them all (Dagster's own behaviour, exit status 0); `dg list defs` without "
        "--assets lists the keys and groups")
