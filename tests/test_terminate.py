"""The UI's Terminate stops an in-process run (pipeline.defs.executor.InProcessPoolSlotWait).

An in-process run (`docsvault build`, `dg launch`, `dagster asset materialize`) has no process the UI can signal:
Terminate marked it CANCELING, answered "Unable to terminate run", and the run went on to the warehouse (found by a
Dagster user driving the UI, helper s37-nu1). Now no step starts after the run is marked CANCELING or CANCELED;
the step that was running finishes, and the run ends CANCELED."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from pipeline.common.errors import BuildInterrupted
from pipeline.defs.executor import docsvault_executor


def _ran(name: str) -> None:
    """Record that an asset's body ran, in the file the test names (the run may reconstruct the job anew)."""
    import os

    with open(os.environ["TERMINATE_TEST_LOG"], "a", encoding="utf-8") as fh:
        fh.write(name + "\n")


@dg.asset
def first(context) -> int:
    _ran("first")
    context.instance.report_run_canceling(context.run)      # what the UI's Terminate does
    return 1


@dg.asset
def second(first: int) -> int:
    _ran("second")
    return first + 1


@dg.asset
def alone() -> int:
    _ran("alone")
    return 0


def terminate_job() -> dg.JobDefinition:
    """The three assets' job with the docsvault executor, as Dagster reconstructs it (``execute_job``; the
    executor a job run in process by ``execute_in_process`` would get is Dagster's own)."""
    defs = dg.Definitions(assets=[first, second, alone], executor=docsvault_executor,
                          jobs=[dg.define_asset_job("terminate_job", selection="*")])
    return defs.resolve_job_def("terminate_job")


def _run(instance: dg.DagsterInstance, selection: list[str], log: Path) -> tuple[list[str], dg.DagsterRun]:
    """Execute the selection in process; returns the assets whose bodies ran (in order) and the run."""
    job = dg.build_reconstructable_job(__name__, terminate_job.__name__)
    with dg.execute_job(job, instance=instance, asset_selection=[dg.AssetKey(s) for s in selection],
                        raise_on_error=False, run_config={"execution": {"config": {"in_process": {}}}}) as result:
        run_id = result.run_id
    ran = log.read_text(encoding="utf-8").split() if log.exists() else []
    log.unlink(missing_ok=True)
    return ran, instance.get_run_by_id(run_id)


def test_a_terminated_in_process_run_starts_no_further_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    log = tmp_path / "ran.txt"
    monkeypatch.setenv("TERMINATE_TEST_LOG", str(log))
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        ran, run = _run(instance, ["first", "second"], log)
        assert ran == ["first"]                                     # `second` never started
        assert run.status == dg.DagsterRunStatus.CANCELED
        assert instance.get_latest_materialization_event(dg.AssetKey("first")) is not None   # it had finished
        assert instance.get_latest_materialization_event(dg.AssetKey("second")) is None
        # a run nobody terminates runs every step (one status query per step)
        ran, run = _run(instance, ["alone"], log)
        assert (ran, run.status) == (["alone"], dg.DagsterRunStatus.SUCCESS)


def test_a_terminated_build_says_so() -> None:
    assert BuildInterrupted(terminated=True).line() == (
        "build terminated: its Dagster run was terminated (Terminate in the UI); stopped after the step that was "
        "running, its locks released; run `docsvault build` again to finish it")
    assert BuildInterrupted().line() == ("build interrupted: stopped, its locks released; run `docsvault build` "
                                         "again to finish it")


def test_a_build_terminated_in_the_ui_stops_after_its_step_and_says_so(tiny_env: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`docsvault build` whose run is terminated from the UI while its normalize step runs: the step finishes, no
    other starts (no warehouse), the run ends CANCELED, the CLI says so in one line (exit 130); the next build
    builds."""
    from typer.testing import CliRunner

    from pipeline import stages
    from pipeline.cli import app
    from pipeline.config import Settings

    normalize = stages.normalize_stage

    def terminated_meanwhile(settings: Settings, source: object) -> object:
        instance = dg.DagsterInstance.get()
        for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
            instance.report_run_canceling(run)                           # the UI's Terminate
        return normalize(settings, source)

    monkeypatch.setattr(stages, "normalize_stage", terminated_meanwhile)
    result = CliRunner().invoke(app, ["build"])
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (130, BuildInterrupted(terminated=True).line().join(
        ("error: ", "")))
    settings = Settings.from_env()
    assert not settings.warehouse_path.exists()
    assert [r.status for r in dg.DagsterInstance.get().get_runs()] == [dg.DagsterRunStatus.CANCELED]
    monkeypatch.setattr(stages, "normalize_stage", normalize)
    assert CliRunner().invoke(app, ["build"]).exit_code == 0
    assert settings.warehouse_path.exists()
