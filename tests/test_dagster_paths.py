"""Every way a Dagster user builds docsvault, with one source that cannot be fetched any more.

The source ``remote`` (a git repo on file://) is built once, then its repository disappears. In each path its steps
fail (red, the run fails) while the shared stages build over ``tiny`` and ``remote``'s last good copy, which stays
searchable. The CLI paths (``dagster asset materialize``, ``dg launch``) run in child processes: one on the
multiprocess executor (run config), one on the project's default (in-process) executor. UI "Materialize all" through a real webserver and daemon:
tests/test_dagster_ui_path.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import git
import pytest

from pipeline import stages as build_stages
from pipeline.common.errors import PipelineError
from pipeline.config import Settings

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _commit(work: git.Repo, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = Path(work.working_tree_dir) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    work.index.add(list(files))
    actor = git.Actor("t", "t@localhost")
    work.index.commit("docs", author=actor, committer=actor)


@pytest.fixture()
def dead_remote(tiny_env: Path) -> Settings:
    """tiny (local) + remote (git), both built once; then remote's repository is gone."""
    from pipeline.defs.runner import run_build

    work = git.Repo.init(tiny_env / "work", initial_branch="main")
    _commit(work, {"docs/Pelicans.md": "# Pelicans\n\nA pelican scoops fish with its throat pouch.\n"})
    bare = tiny_env / "remote.git"
    git.Repo.clone_from(work.working_tree_dir, bare, bare=True)
    with git.Repo(bare).config_writer() as cw:
        cw.set_value("uploadpack", "allowFilter", "true")
    sources = tiny_env / "sources.yaml"
    sources.write_text(sources.read_text() + f"  - name: remote\n    kind: git\n    url: file://{bare}\n"
                       "    ref: main\n    paths: [docs]\n", encoding="utf-8")
    settings = Settings.from_env()
    report = run_build(settings)
    assert report.ok, (report.sources, report.shared_error)
    shutil.move(str(bare), str(tiny_env / "gone.git"))
    return settings


def _searchable(settings: Settings) -> list[str]:
    from pipeline.search.searcher import Searcher

    searcher = Searcher(settings.warehouse_path)
    try:
        return [h.source_path for h in searcher.search("pelican throat pouch", k=2)]
    finally:
        searcher.close()


def _run_outcome(instance: dg.DagsterInstance, run_id: str) -> dict[str, object]:
    """What the UI shows of a run: its status, the failed steps, the materialized assets and failed checks."""
    run = instance.get_run_by_id(run_id)
    failed_steps, materialized, failed_checks, described = set(), set(), set(), {}
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is None:
            continue
        if ev.event_type_value == "STEP_FAILURE":
            failed_steps.add(ev.step_key)
        elif ev.event_type_value == "ASSET_MATERIALIZATION":
            materialized.add(ev.asset_key.to_user_string())
        elif ev.event_type_value == "ASSET_CHECK_EVALUATION":
            data = ev.event_specific_data
            name = f"{data.asset_key.to_user_string()}:{data.check_name}"
            if not data.passed:
                failed_checks.add(name)
            if data.description:
                described[name] = data.description
    return {"status": run.status.value, "failed_steps": failed_steps, "materialized": materialized,
            "failed_checks": failed_checks, "described": described}


def _assert_dead_alone(outcome: dict[str, object]) -> None:
    assert outcome["status"] == "FAILURE"
    assert outcome["failed_steps"] == {"remote__raw_docs"}
    assert "remote/raw_docs:ran_without_error" in outcome["failed_checks"]
    assert {"link_graph", "warehouse", "retrieval_eval", "tiny/embeddings"} <= outcome["materialized"]
    assert not {c for c in outcome["failed_checks"] if not c.startswith("remote/raw_docs:")}
    # the cause where a Dagster user looks: on the failed check itself, not only in the step's log
    described = outcome["described"]
    assert "remote.git" in described["remote/raw_docs:ran_without_error"]
    assert described["remote/raw_docs:ran_without_error"].endswith(" (serving: last good copy)")
    assert described["remote/raw_docs:has_files"] == ("this run's fetch failed (see ran_without_error); serving "
                                                      "the last good copy (1 file)")
    assert "tiny/raw_docs:has_files" not in described          # a fetch that ran: nothing to explain


def _docsvault_build_with_a_dead_source(dead_remote: Settings) -> None:
    """`docsvault build`: the dead source fails alone (exit 2), its last good copy keeps serving."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    result = CliRunner().invoke(app, ["build", "--json"])
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    by_name = {s["name"]: s for s in out["sources"]}
    assert (by_name["tiny"]["status"], by_name["remote"]["status"]) == ("unchanged", "failed")
    assert by_name["remote"]["failed_stage"] == "raw_docs" and "remote.git" in by_name["remote"]["error"]
    assert out["shared"]["ok"] is True
    assert _searchable(dead_remote)[0] == "docs/Pelicans.md"
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs(limit=1)
        _assert_dead_alone(_run_outcome(instance, run.run_id))


def test_cli_build_schedule_and_sensor_runs_with_a_dead_source(dead_remote: Settings) -> None:
    """The CLI build, then the daily schedule's run and the sensor's, over one built fixture (one two-source build
    instead of one per path)."""
    from pipeline.common import artifacts
    from pipeline.definitions import build_definitions

    _docsvault_build_with_a_dead_source(dead_remote)
    from pipeline.defs.executor import IN_PROCESS_RUN_CONFIG
    from pipeline.defs.runner import _reconstructable_job, _settings_env

    defs = build_definitions(dead_remote)
    with dg.DagsterInstance.get() as instance, _settings_env(dead_remote):
        # the daily schedule: a run of the refresh_all job (every asset) on the project's executor
        schedule = defs.resolve_schedule_def("daily_refresh")
        (request,) = schedule.evaluate_tick(dg.build_schedule_context(instance=instance)).run_requests
        assert schedule.job_name == "refresh_all"
        with dg.execute_job(_reconstructable_job(Settings.from_env()), instance=instance, tags=request.tags,
                            run_config=IN_PROCESS_RUN_CONFIG) as result:
            _assert_dead_alone(_run_outcome(instance, result.run_id))
        assert _searchable(dead_remote)[0] == "docs/Pelicans.md"

        # the sensor: remote's upstream check fails (logged, not requested); tiny moved -> its chain + shared
        (Path(os.environ["DOCSVAULT_SOURCES"]).parent / "tinyvault" / "Ducks.md").write_text(
            "# Ducks\n\nDucks swim and dive.\n", encoding="utf-8")
        sensor = defs.resolve_sensor_def("upstream_change")
        ctx = dg.build_sensor_context(instance=instance, cursor=None)
        tick = sensor(ctx)
        (request,) = tick.run_requests
        assert request.tags["docsvault/source"] == "tiny"
        with dg.execute_job(_reconstructable_job(Settings.from_env()), instance=instance, tags=request.tags,
                            asset_selection=request.asset_selection, run_config=IN_PROCESS_RUN_CONFIG) as result:
            outcome = _run_outcome(instance, result.run_id)
        assert outcome["status"] == "SUCCESS" and {"tiny/vault", "warehouse"} <= outcome["materialized"]
        assert _searchable(dead_remote)[0] == "docs/Pelicans.md"      # the dead source's last good copy is kept

        # the repository is back, unmoved: the sensor retries remote's failed fetch, once
        home = Path(os.environ["DOCSVAULT_SOURCES"]).parent
        shutil.move(str(home / "gone.git"), str(home / "remote.git"))
        back = sensor(dg.build_sensor_context(instance=instance, cursor=tick.cursor))
        (retry,) = back.run_requests
        since = artifacts.load_state(dead_remote, "remote")["failing_since"]
        assert (retry.run_key, retry.tags["docsvault/source"], retry.tags["docsvault/trigger"]) == (
            f"remote:fetch_failed:{since}", "remote", "fetch_failed")
        with dg.execute_job(_reconstructable_job(Settings.from_env()), instance=instance, tags=retry.tags,
                            asset_selection=retry.asset_selection, run_config=IN_PROCESS_RUN_CONFIG) as result:
            outcome = _run_outcome(instance, result.run_id)
        assert outcome["status"] == "SUCCESS" and "remote/raw_docs:ran_without_error" not in outcome["failed_checks"]
        state = artifacts.load_state(dead_remote, "remote")
        assert (state["fetch_status"], state["fetch_error"], state["last_error"]) == ("ok", None, None)
        quiet = sensor(dg.build_sensor_context(instance=instance, cursor=back.cursor))
        assert (quiet.run_requests, quiet.skip_reason.skip_message) == ([], "no source moved (2 checked)")


def _cli_env(settings: Settings) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "VIRTUAL_ENV": str(BIN.parent),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _last_run(settings: Settings) -> dict[str, object]:
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs(limit=1)
        return _run_outcome(instance, run.run_id)


def _engine_mode(run_id: str) -> str:
    """How the run's executor ran its steps: Dagster's engine event ``Executing steps in process`` / ``… using
    multiprocess executor``."""
    with dg.DagsterInstance.get() as instance:
        for rec in instance.all_logs(run_id):
            message = (rec.dagster_event.message or "") if rec.dagster_event is not None else ""
            if message.startswith("Executing steps"):
                return "in_process" if "in process" in message else "multiprocess"
    return ""


@pytest.mark.integration   # two child runs, one on the multiprocess executor (~1-2 min on 2 busy cores)
def test_dagster_cli_and_dg_launch_with_a_dead_source(dead_remote: Settings) -> None:
    shutil.copyfile(REPO / "dagster.yaml", Path(os.environ["DAGSTER_HOME"]) / "dagster.yaml")
    env = _cli_env(dead_remote)
    multiprocess = {"execution": {"config": {"multiprocess": {"max_concurrent": 4}}}}
    done = subprocess.run([str(BIN / "dagster"), "asset", "materialize", "-m", "pipeline.definitions",
                           "--select", "*", "--config-json", json.dumps(multiprocess)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode != 0, done.stderr[-2000:]
    _assert_dead_alone(_last_run(dead_remote))
    assert _searchable(dead_remote)[0] == "docs/Pelicans.md"
    with dg.DagsterInstance.get() as instance:
        assert _engine_mode(instance.get_runs(limit=1)[0].run_id) == "multiprocess"

    done = subprocess.run([str(BIN / "dg"), "launch", "--assets", "*"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode != 0, done.stderr[-2000:]
    _assert_dead_alone(_last_run(dead_remote))
    assert _searchable(dead_remote)[0] == "docs/Pelicans.md"
    with dg.DagsterInstance.get() as instance:                 # no run config: the project's default
        assert _engine_mode(instance.get_runs(limit=1)[0].run_id) == "in_process"


#: metadata a run may record only when it did that work itself
WORK_KEYS = {"warehouse": {"changed_chunks", "removed_chunks", "reason", "tokens_analysed", "tokens_cached",
                           "publish_s", "bm25_s", "read_s", "graph_s", "vectors_s", "rebuilt_because"},
             "tiny/embeddings": {"chunks_per_s"},
             "retrieval_eval": {"n", "hit_at_1", "hit_at_3", "mrr_at_10", "ndcg_at_10", "ablation"}}


def _materializations(run_id: str) -> dict[str, tuple[dict, str | None]]:
    with dg.DagsterInstance.get() as instance:
        out = {}
        for rec in instance.all_logs(run_id):
            ev = rec.dagster_event
            if ev is not None and ev.event_type_value == "ASSET_MATERIALIZATION":
                mat = ev.event_specific_data.materialization
                out[mat.asset_key.to_user_string()] = ({k: getattr(v, "value", v) for k, v in mat.metadata.items()},
                                                       mat.tags.get("dagster/data_version"))
        return out


@pytest.mark.integration   # three child runs of `dagster asset materialize`
def test_two_noop_materialize_runs_record_no_stale_figures(tiny_env: Path) -> None:
    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = _cli_env(Settings.from_env())
    cmd = [str(BIN / "dagster"), "asset", "materialize", "-m", "pipeline.definitions", "--select", "*",
           "--config-json", json.dumps({"execution": {"config": {"in_process": {}}}})]
    runs = []
    for _ in range(3):
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
        with dg.DagsterInstance.get() as instance:
            runs.append(instance.get_runs(limit=1)[0].run_id)
    first, *noops = [_materializations(r) for r in runs]
    assert first["tiny/embeddings"][0]["embedded"] > 0 and first["warehouse"][0]["mode"] == "full"
    assert "mrr_at_10" in first["retrieval_eval"][0]
    for mats in noops:
        for asset, (meta, version) in mats.items():
            assert version == first[asset][1], asset                       # same data version: nothing is stale
            assert not WORK_KEYS.get(asset, set()) & set(meta), (asset, meta)
        assert mats["tiny/embeddings"][0]["embedded"] == 0
        assert mats["warehouse"][0]["mode"] == "unchanged" and mats["warehouse"][0]["dagster/row_count"] == \
            first["warehouse"][0]["dagster/row_count"]
        assert mats["retrieval_eval"][0]["skipped"] is True and mats["retrieval_eval"][0]["history_rows"] == 0
        assert [mats[f"tiny/{stage}"][0]["status"] for stage in ("notes", "vault", "chunks")] == ["skipped"] * 3


def test_a_never_built_source_serves_nothing_and_says_so(tiny_env: Path) -> None:
    """A source whose fetch has never succeeded: its later stages claim no last good copy and fail
    `ran_without_error`; the shared stages still build over tiny."""
    from pipeline.defs.runner import run_build

    sources = tiny_env / "sources.yaml"
    sources.write_text(sources.read_text() + f"  - name: never\n    kind: git\n    url: file://{tiny_env}/none.git\n"
                       "    ref: main\n", encoding="utf-8")
    settings = Settings.from_env()
    report = run_build(settings)
    assert not report.ok
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs(limit=1)
        outcome = _run_outcome(instance, run.run_id)
        later = ("notes", "vault", "chunks", "embeddings")
        assert {c for c in outcome["failed_checks"] if c.startswith("never/")} == {
            "never/raw_docs:ran_without_error", "never/raw_docs:has_files",
            *(f"never/{s}:ran_without_error" for s in later)}
        assert {"link_graph", "warehouse", "retrieval_eval", "tiny/embeddings"} <= outcome["materialized"]
        fetched = instance.get_latest_materialization_event(dg.AssetKey(["never", "raw_docs"]))
        error = fetched.asset_materialization.metadata["error"].value
        assert error.startswith("source 'never': ")
        for stage in later:
            ev = instance.get_latest_materialization_event(dg.AssetKey(["never", stage]))
            meta = {k: v.value for k, v in ev.asset_materialization.metadata.items()}
            assert (meta["status"], meta["kept"], meta["cause"], meta["cause_error"]) == (
                "skipped", "nothing (never built)", "never/raw_docs failed", error)
        checks = [e.event_specific_data for e in (r.dagster_event for r in instance.all_logs(run.run_id))
                  if e is not None and e.event_type_value == "ASSET_CHECK_EVALUATION"
                  and e.event_specific_data.asset_key == dg.AssetKey(["never", "notes"])]
        assert [({k: v.value for k, v in c.metadata.items()}, c.description) for c in checks] == [
            ({"skipped_files": 0}, None),          # all_files_read: no normalize ever skipped a file of it
            ({"status": "skipped", "kept": "nothing (never built)", "cause": "never/raw_docs failed",
              "cause_error": error}, "never/raw_docs failed: nothing to serve (never built)")]


def test_a_local_source_that_never_fetched_fails_has_files_and_says_why(tiny_env: Path) -> None:
    """A `local` folder may be empty (`has_files` passes a fetch of an empty folder), but a source whose fetch has
    never succeeded has no files at all: `has_files` fails, and both checks say why on their evaluation."""
    from pipeline.defs.runner import run_build

    sources = tiny_env / "sources.yaml"
    sources.write_text(sources.read_text() + f"  - name: gone\n    kind: local\n    path: {tiny_env}/no-such\n",
                       encoding="utf-8")
    assert not run_build(Settings.from_env()).ok
    with dg.DagsterInstance.get() as instance:
        (run,) = instance.get_runs(limit=1)
        outcome = _run_outcome(instance, run.run_id)
    assert {"gone/raw_docs:ran_without_error", "gone/raw_docs:has_files"} <= outcome["failed_checks"]
    assert outcome["described"]["gone/raw_docs:ran_without_error"] == (
        f"source 'gone': local path {tiny_env}/no-such does not exist or is not a folder; fix 'path' in "
        "sources.yaml (serving: nothing (never built))")
    assert outcome["described"]["gone/raw_docs:has_files"] == (
        "this run's fetch failed (see ran_without_error); serving nothing (no fetch has succeeded)")


def test_a_dagster_run_records_status_last_error_too(tiny_env: Path) -> None:
    """`status`'s last_error is set by the stage that failed in any path (a Dagster run, not only `docsvault
    build`'s report) and cleared once no stage of the source is failed."""
    from pipeline.common import artifacts
    from pipeline.defs.assets import _run_source_stage
    from pipeline.defs.resources import DocsvaultResource
    from pipeline.ingest.sources import load_sources

    settings = Settings.from_env()
    (source,) = load_sources(settings.sources_file)
    docsvault = DocsvaultResource.from_settings(settings)

    def fails(_: Settings) -> Any:
        raise PipelineError("source 'tiny': upstream is gone")

    _run_source_stage(dg.build_asset_context(), docsvault, "raw_docs", source, fails, settings.sources_file)
    last = artifacts.load_state(settings, "tiny")["last_error"]
    assert (last["stage"], last["error"]) == ("raw_docs", "source 'tiny': upstream is gone")
    _run_source_stage(dg.build_asset_context(), docsvault, "raw_docs", source,
                      lambda s: build_stages.fetch_stage(s, source), settings.sources_file)
    assert artifacts.load_state(settings, "tiny")["last_error"] is None


def test_a_dagster_run_removes_a_source_dropped_from_sources_yaml(dead_remote: Settings) -> None:
    """`remote` leaves sources.yaml and a Dagster run (the UI, the schedule, `dagster asset materialize`: the
    refresh_all job here) builds: its warehouse step removes what builds wrote for it, as `docsvault build` does, with
    the same line in the run's log, once; a file of the user's in vault/remote/ stays."""
    from pipeline.defs.executor import IN_PROCESS_RUN_CONFIG
    from pipeline.defs.runner import _reconstructable_job, _settings_env

    settings = dead_remote
    vault, data = settings.vault_dir, settings.data_dir
    (vault / "remote" / "Mine.md").write_text("# Mine\n", encoding="utf-8")
    sources = settings.sources_file
    text = sources.read_text(encoding="utf-8")
    sources.write_text(text[:text.index("  - name: remote\n")], encoding="utf-8")

    def removed_lines(instance: dg.DagsterInstance, run_id: str) -> list[str]:
        return [r.user_message for r in instance.all_logs(run_id)
                if r.dagster_event is None and r.user_message.startswith("removed vault/")]

    with dg.DagsterInstance.get() as instance, _settings_env(settings):
        with dg.execute_job(_reconstructable_job(Settings.from_env()), instance=instance,
                            run_config=IN_PROCESS_RUN_CONFIG) as result:
            assert result.success
            assert removed_lines(instance, result.run_id) == [(
                "removed vault/remote/: source 'remote' is no longer in sources.yaml (kept 1 file(s) docsvault did "
                "not write, or that were edited since: Mine.md)")]
        assert sorted(p.name for p in (vault / "remote").iterdir()) == ["Mine.md"]
        assert not (data / "state" / "remote.json").exists() and not (data / "raw" / "remote").exists()
        assert not (data / "chunks" / "remote.jsonl").exists() and not (data / "notes" / "remote.jsonl").exists()
        assert "docs/Pelicans.md" not in _searchable(settings)
        with dg.execute_job(_reconstructable_job(Settings.from_env()), instance=instance,
                            run_config=IN_PROCESS_RUN_CONFIG) as again:
            assert again.success and removed_lines(instance, again.run_id) == []
