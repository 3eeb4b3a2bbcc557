"""Dagster definitions load, have the expected assets, and build the tiny vault end to end (fake embedder)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from pipeline.config import Settings
from pipeline.definitions import build_definitions


def test_definitions_load_with_expected_assets(tiny_env: Path) -> None:
    defs = build_definitions(Settings.from_env())
    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {
        "tiny/raw_docs", "tiny/notes", "tiny/vault", "tiny/chunks", "tiny/embeddings",
        "link_graph", "warehouse", "retrieval_eval",
    }
    assert defs.resolve_schedule_def("daily_refresh") is not None


def test_the_daily_refresh_runs_at_4_in_the_zone_the_environment_names(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """04:00 UTC by default (what the schedule and README say now; before session 43 both said only "04:00");
    DOCSVAULT_SCHEDULE_TIMEZONE names another zone; a name that is no zone is one warning and UTC."""
    from pipeline.defs import automation

    assert automation.daily_refresh.execution_timezone == "UTC"
    assert automation.daily_refresh.description.startswith("Every day at 04:00 UTC (DOCSVAULT_SCHEDULE_TIMEZONE")
    monkeypatch.setenv("DOCSVAULT_SCHEDULE_TIMEZONE", "Asia/Tokyo")
    assert automation.schedule_timezone() == "Asia/Tokyo"
    monkeypatch.setenv("DOCSVAULT_SCHEDULE_TIMEZONE", "Tokio")
    with caplog.at_level("WARNING", logger="docsvault"):
        assert automation.schedule_timezone() == "UTC"
    assert [r.getMessage() for r in caplog.records] == [(
        "DOCSVAULT_SCHEDULE_TIMEZONE='Tokio' is no time zone name (e.g. Asia/Tokyo, Europe/Berlin); daily_refresh "
        "runs at 04:00 UTC")]


def test_embeddings_asset_names_the_models_its_source_uses(tiny_env: Path) -> None:
    """A source without `language:` is embedded per note (English model, or the multilingual one for a note
    detected as Japanese): its description names both, not the English model alone; `language:`/`embedding:`
    fix one model."""
    from pipeline.defs.assets import embeddings_description

    settings = Settings.from_env().with_(model="en-model", multilingual_model="ml-model", crosslingual_model="none")
    sources = Path(tiny_env) / "sources.yaml"
    sources.write_text(sources.read_text() + f"  - name: ja\n    kind: local\n    path: {tiny_env}\n    "
                       f"language: ja\n  - name: own\n    kind: local\n    path: {tiny_env}\n    embedding: hash\n",
                       encoding="utf-8")
    from pipeline.ingest.sources import load_sources

    tiny, ja, own = load_sources(sources)
    assert embeddings_description(settings, tiny) == (
        "Chunk embeddings of `tiny` with `en-model`, or `ml-model` for notes detected as ja/ko/zh (each note's "
        "language is detected when it is chunked; the `models` metadata of a materialization counts the chunks per "
        "model) (cached by model id + chunk text hash: only new texts are embedded).")
    assert embeddings_description(settings, ja) == (
        "Chunk embeddings of `ja` with `ml-model` (its `language: ja`) (cached by model id + chunk text hash: only "
        "new texts are embedded).")
    assert embeddings_description(settings.with_(crosslingual_model="x-model"), own) == (
        "Chunk embeddings of `own` with `hash` (its `embedding:` in sources.yaml); every chunk (of an English note "
        "its first 4) also with `x-model` for the cross-lingual lane (cached by model id + chunk text hash: only new texts are embedded).")
    defs = build_definitions(Settings.from_env())      # what `dg list defs` shows: the same text
    spec = defs.resolve_assets_def(dg.AssetKey(["tiny", "embeddings"])).specs_by_key[dg.AssetKey(["tiny", "embeddings"])]
    assert spec.description == embeddings_description(Settings.from_env(), tiny)


def test_build_end_to_end_and_noop_rebuild(built_tiny_env: Path, tiny_first_report) -> None:
    from pipeline.defs.runner import run_build
    from pipeline.search.searcher import Searcher

    settings = Settings.from_env()
    report = tiny_first_report                                      # the first build (run_build) of tiny_env
    assert report.ok, (report.sources, report.shared_error)
    (st,) = report.sources
    assert st.metadata["vault"]["notes"] == 5                       # .obsidian/ skipped
    first_embedded = st.metadata["embeddings"]["embedded"]
    assert first_embedded == st.metadata["embeddings"]["chunks"] > 0
    note = settings.vault_dir / "tiny" / "Install guide.md"
    fm = yaml.safe_load(note.read_text(encoding="utf-8").split("---\n")[1])
    assert fm["source"] == "tiny" and fm["source_path"] == "Install guide.md" and fm["title"] == "Install guide"
    assert (settings.graph_dir / "links.graphml").exists() and (settings.graph_dir / "links.json").exists()
    ev = report.shared_metadata["retrieval_eval"]
    assert ev["n"] == 2
    hits = Searcher(settings.warehouse_path).search("install the tool on windows", k=3)
    assert hits[0].source_path == "Install guide.md"

    mtime = note.stat().st_mtime_ns
    again = run_build(settings)
    assert again.ok
    assert again.sources[0].metadata["embeddings"]["embedded"] == 0       # nothing re-embedded
    assert again.sources[0].metadata["vault"]["written"] == 0             # nothing rewritten
    assert note.stat().st_mtime_ns == mtime


def test_failing_source_fails_alone(tiny_env: Path, tmp_path: Path) -> None:
    from pipeline.defs.runner import run_build

    sources = Path(tiny_env) / "sources.yaml"
    sources.write_text(
        sources.read_text() + f"  - name: dead\n    kind: git\n    url: file://{tmp_path}/nowhere.git\n    paths: [docs]\n",
        encoding="utf-8",
    )
    report = run_build(Settings.from_env())
    status = {s.name: s for s in report.sources}
    assert status["tiny"].ok and not status["dead"].ok
    assert status["dead"].failed_stage == "raw_docs"
    assert "dead" in status["dead"].error and "nowhere.git" in status["dead"].error
    assert report.shared_ok and not report.ok


def _check_results(result: dg.ExecuteInProcessResult) -> dict[str, tuple[bool, str, dict]]:
    """check name -> (passed, severity, metadata) of the run's asset check evaluations."""
    out = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            ev = event.event_specific_data
            out[ev.check_name] = (ev.passed, ev.severity.value,
                                  {k: getattr(v, "value", v) for k, v in ev.metadata.items()})
    return out


def _materialize_shared(settings: Settings) -> dg.ExecuteInProcessResult:
    defs = build_definitions(settings)
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(asset_selection=[dg.AssetKey([s]) for s in
                                                   ("link_graph", "warehouse", "retrieval_eval")],
                                  instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)


def test_eval_ablation_metadata_checks_and_history_survive_rebuild(built_tiny_env: Path, tiny_first_report,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.defs.runner import run_build
    from pipeline.evaluate import eval_history_path
    from pipeline.warehouse import read_eval_runs

    settings = Settings.from_env()
    report = tiny_first_report                                      # the first build (run_build) of tiny_env
    assert report.ok, (report.sources, report.shared_error)
    ev = report.shared_metadata["retrieval_eval"]
    assert (ev["n"], ev["mrr_at_10"], ev["hit_at_3"], ev["history_rows"]) == (2, 1.0, 1.0, 24)
    assert {k: ev[k] for k in ev if k.endswith("pooled_mrr_at_10")} == {
        "bm25/pooled_mrr_at_10": 1.0, "bm25_page/pooled_mrr_at_10": 1.0, "vector/pooled_mrr_at_10": 1.0,
        "graph/pooled_mrr_at_10": 0.4167,
        "hybrid/pooled_mrr_at_10": 1.0, "hybrid unscoped/pooled_mrr_at_10": 1.0}
    assert ev["best_single_lane"] == "bm25"
    assert ev["ablation"].splitlines()[:3] == [
        "| group | setup | n | hit@1 | hit@3 | mrr@10 | ndcg@10 |", "|---|---|---|---|---|---|---|",
        "| overall | bm25 | 2 | 1.000 | 1.000 | 1.000 | 1.000 |"]
    assert ev["config"] == {"k_rrf": 20.0, "weights": {"bm25": 1.0, "bm25_page": 0.5, "vector": 1.0, "crosslingual": 1.0,
                                                     "graph": 1.0},
                            "models": ["hash-384"]}

    history = eval_history_path(settings.data_dir)
    rows = read_eval_runs(history)
    # 6 set-ups (the 5 scoped ones and hybrid unscoped) x (overall, source tiny, kind keyword, kind paraphrase)
    assert len(rows) == 24 and len({r["run_id"] for r in rows}) == 1
    assert {(r["setup"], r["lanes"]) for r in rows} == {
        ("bm25", "bm25"), ("bm25_page", "bm25_page"), ("vector", "vector"), ("graph", "graph"),
        ("hybrid", "bm25+bm25_page+vector"), ("hybrid unscoped", "bm25+bm25_page+vector")}
    assert {(r["group_kind"], r["group_name"]) for r in rows} == {
        ("overall", "overall"), ("source", "tiny"), ("kind", "keyword"), ("kind", "paraphrase")}
    first = rows[0]
    assert (first["k_rrf"], first["models"], first["weights"]) == (
        20.0, "hash-384", '{"bm25": 1.0, "bm25_page": 0.5, "crosslingual": 1.0, "graph": 1.0, "vector": 1.0}')
    assert first["warehouse_built_at"] and first["warehouse_key"] and first["cases_key"]

    # nothing changed: the eval is skipped, appends nothing and records no figures (its plots get no new point)
    ev = run_build(settings).shared_metadata["retrieval_eval"]
    assert (ev["skipped"], ev["history_rows"]) == (True, 0) and "mrr_at_10" not in ev and "n" not in ev
    assert len(read_eval_runs(history)) == 24

    # the warehouse written again in full with the same content: the last report is reused, nothing appended
    settings.warehouse_path.unlink()
    again = run_build(settings)
    assert again.ok, again.shared_error
    assert again.shared_metadata["retrieval_eval"]["skipped"] is True and len(read_eval_runs(history)) == 24
    # a forced build redoes the eval (every set-up): the history is kept and gets the new run's rows
    monkeypatch.setenv("DOCSVAULT_FORCE", "*")
    again = run_build(settings)
    monkeypatch.delenv("DOCSVAULT_FORCE")
    assert again.ok, again.shared_error
    assert again.shared_metadata["retrieval_eval"]["ablation_carried"] is False
    rows = read_eval_runs(history)
    assert len(rows) == 48 and len({r["run_id"] for r in rows}) == 2
    assert len(read_eval_runs(history, last=1)) == 24
    assert not list(settings.data_dir.glob("eval_runs.duckdb.tmp-*"))
    from typer.testing import CliRunner

    from pipeline.cli import app

    shown = CliRunner().invoke(app, ["eval", "--history"])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[1].split() == ["run", "at", "(UTC)", "warehouse", "built", "at", "n", "bm25", "bm25_page", "vector",
                                "graph", "hybrid", "hybrid", "unscoped"]
    assert [line.split()[2:] for line in lines[3:]] == [["2", "1.000", "1.000", "1.000", "0.417", "1.000", "1.000"]] * 2

    # the asset checks: floors met, hybrid ties the best single lane (passes), both on the tiny fixture
    checks = _check_results(_materialize_shared(settings))
    assert checks["eval_floors"][0] is True
    assert checks["eval_floors"][2]["mrr_at_10"] == 1.0 and checks["eval_floors"][2]["floor_mrr_at_10"] == 0.70
    assert checks["hybrid_beats_single_lanes"][:2] == (True, "WARN")
    assert checks["hybrid_beats_single_lanes"][2]["best_single_lane"] == "bm25"


def test_eval_checks_pass_with_a_note_without_eval_files(tiny_env: Path, monkeypatch) -> None:
    monkeypatch.setenv("DOCSVAULT_EVALS", str(tiny_env / "no-evals-here"))
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    report = run_build(settings)
    assert report.ok, report.shared_error
    ev = report.shared_metadata["retrieval_eval"]
    assert (ev["n"], ev["history_rows"]) == (0, 0)
    checks = _check_results(_materialize_shared(settings))
    for name in ("eval_floors", "hybrid_beats_single_lanes"):
        passed, _, meta = checks[name]
        assert passed is True
        assert meta["note"].startswith("no eval case of a built source was scored, nothing to check")
    assert not (settings.data_dir / "eval_runs.duckdb").exists()


def test_defs_folder_is_what_dg_loads_and_matches_build_definitions(tiny_env: Path) -> None:
    """`dg` and `dagster -m pipeline.definitions` load the autoloaded defs folder; it holds the same definitions
    as build_definitions, on the project's executor, with versions, pools and checks on every asset."""
    import tomllib

    from pipeline.definitions import defs
    from pipeline.defs.executor import docsvault_executor

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["tool"]["dg"]
    assert project["project"] == {"root_module": "pipeline", "defs_module": "pipeline.defs",
                                  "code_location_target_module": "pipeline.definitions",
                                  "code_location_name": "pipeline.definitions"}   # = `-m pipeline.definitions`
    deps = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert "dagster-dg-cli==1.13.27" in deps["dependencies"]        # `make install` gives `dg` (README)
    loaded = defs()
    built = build_definitions(Settings.from_env())
    graph = loaded.resolve_asset_graph()
    assert graph.get_all_asset_keys() == built.resolve_asset_graph().get_all_asset_keys()
    assert {c.to_user_string() for c in graph.asset_check_keys} == {
        "tiny/raw_docs:ran_without_error", "tiny/raw_docs:has_files", "tiny/notes:ran_without_error",
        "tiny/notes:all_files_read",
        "tiny/vault:ran_without_error", "tiny/vault:frontmatter_valid", "tiny/chunks:ran_without_error",
        "tiny/embeddings:ran_without_error",
        "warehouse:hnsw_index_used", "warehouse:serves_queries", "warehouse:all_chunks_embedded",
        "retrieval_eval:eval_floors",
        "retrieval_eval:hybrid_beats_single_lanes"}
    assert loaded.executor is docsvault_executor
    pools = {k.to_user_string(): graph.get(k).pools for k in graph.get_all_asset_keys()}
    assert pools["tiny/embeddings"] == {"docsvault_source_tiny"} and pools["warehouse"] == {"docsvault_warehouse"}
    assert all(graph.get(k).code_version for k in graph.get_all_asset_keys())
    assert graph.get(dg.AssetKey(["tiny", "embeddings"])).group_name == "tiny"
    assert {s.name for s in loaded.schedules or []} == {"daily_refresh"}
    sensor = loaded.resolve_sensor_def("upstream_change")     # README: on by default, every 15 minutes at most
    assert (sensor.default_status, sensor.minimum_interval_seconds) == (dg.DefaultSensorStatus.RUNNING, 900)


def test_project_dagster_yaml_configures_pools_and_run_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The instance config is valid for this Dagster version: pools (one step per pool), run retries, the project's
    event log storage (its folder named by DAGSTER_HOME)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    from pipeline.defs.runner import instance_config

    (home / "dagster.yaml").write_text(instance_config())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.run_retries_enabled and instance.run_retries_max_retries == 0
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 4
        assert type(instance.event_log_storage).__name__ == "WalSqliteEventLogStorage"
        # Dagster's first-run newsletter popup covered the UI (found by a Dagster user)
        assert (instance.nux_enabled, instance.telemetry_enabled) == (False, False)


def test_the_instance_templates_turn_off_the_first_run_popup(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a checkout's dagster.yaml docsvault writes INSTANCE_YAML; the team deployment copies
    deploy/dagster.yaml: each is valid for this Dagster's instance schema and turns nux (the newsletter popup)
    off."""
    from dagster._core.instance.config import dagster_instance_config

    from pipeline.defs.runner import INSTANCE_YAML

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert (instance.nux_enabled, instance.telemetry_enabled) == (False, False)
    deploy = Path(__file__).resolve().parents[1] / "deploy" / "dagster.yaml"
    (home / "dagster.yaml").write_text(deploy.read_text(encoding="utf-8"))
    config, _ = dagster_instance_config(str(home))                  # validated against the schema
    assert config["nux"] == {"enabled": False}


@pytest.mark.timeout(600)
def test_a_killed_build_does_not_leave_the_warehouse_pool_taken(built_tiny_env: Path, tiny_first_report) -> None:
    """A build killed while its single-writer step held the docsvault_warehouse slot: the next build releases the
    dead run (reported failed) and builds, instead of waiting forever on 'Step blocked by limit for pool'."""
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    assert tiny_first_report.ok                                     # after a first build (run_build) of tiny_env
    instance = dg.DagsterInstance.get()
    dead = instance.add_run(dg.DagsterRun(job_name="__ASSET_JOB", run_id="dead0000-0000-0000-0000-000000000000",
                                          status=dg.DagsterRunStatus.STARTED, tags={"docsvault/run": "build"}))
    claim = instance.event_log_storage.claim_concurrency_slot("docsvault_warehouse", dead.run_id, "link_graph")
    assert claim.is_claimed
    report = run_build(settings)
    assert report.ok, (report.sources, report.shared_error)
    assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
    assert instance.event_log_storage.get_concurrency_info("docsvault_warehouse").claimed_slots == []


def test_stage_progress_reaches_the_run_log(built_tiny_env: Path, tiny_first_report) -> None:
    """The progress the CLI draws (fetch, normalize, chunk, warehouse) is in the Dagster run's log too, for a step
    that runs ``PROGRESS_LOG_SECONDS``; the tiny build's steps are quicker: only their summaries are logged."""
    assert tiny_first_report.ok                                     # the first build (run_build) of tiny_env
    instance = dg.DagsterInstance.get()
    (run,) = instance.get_runs(limit=1)
    messages = [e.user_message for e in instance.all_logs(run.run_id) if e.user_message]
    assert not [m for m in messages if m.startswith(("tiny: normalize ", "tiny: chunk ", "tiny: fetch "))]


def test_progress_of_a_long_step_reaches_the_run_log(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.defs import assets
    from pipeline.defs.runner import run_build

    monkeypatch.setattr(assets, "PROGRESS_LOG_SECONDS", 0.0)        # every step counts as long
    assert run_build(Settings.from_env()).ok
    instance = dg.DagsterInstance.get()
    (run,) = instance.get_runs(limit=1)
    messages = [e.user_message for e in instance.all_logs(run.run_id) if e.user_message]
    assert "tiny: normalize 5/5" in messages and "tiny: chunk 5/5" in messages


def test_the_sensor_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """DOCSVAULT_SENSOR_INTERVAL sets the upstream sensor's tick (a platform engineer waited 15 minutes for an
    edit); below 30 s it is raised to 30; unset or not a number: 15 minutes."""
    from pipeline.defs.automation import sensor_interval

    for raw, seconds in (("120", 120), ("5", 30), ("soon", 900)):
        monkeypatch.setenv("DOCSVAULT_SENSOR_INTERVAL", raw)
        assert sensor_interval() == seconds, raw
    monkeypatch.delenv("DOCSVAULT_SENSOR_INTERVAL")
    assert sensor_interval() == 900


def test_every_file_a_stage_names_is_a_path_in_dagster_metadata() -> None:
    """The UI shows a path entry with its copy button and as a path; `notes`' `errors_file` / `dangling_file` and
    `link_graph`'s `json` were plain text beside `graphml`, `vault_dir`, `path` and the check's `errors_file`
    (session 45)."""
    from pipeline.defs.assets import _metadata
    from pipeline.stages.results import GraphResult, NormalizeResult

    notes = _metadata(NormalizeResult.from_dict({"notes": 1, "errors": 0, "error_lines": [],
                                                 "errors_file": "/d/state/s.errors.txt",
                                                 "dangling_file": "/d/graph/dangling-s.json"}))
    graph = _metadata(GraphResult.from_dict({"nodes": 1, "edges": 0, "graphml": "/d/graph/links.graphml",
                                             "json": "/d/graph/links.json"}))
    assert {k: type(v).__name__ for k, v in notes.items() if k.endswith("_file")} == {
        "errors_file": "PathMetadataValue", "dangling_file": "PathMetadataValue"}
    assert {k: (type(v).__name__, v.value) for k, v in graph.items() if k in ("graphml", "json")} == {
        "graphml": ("PathMetadataValue", "/d/graph/links.graphml"),
        "json": ("PathMetadataValue", "/d/graph/links.json")}
