"""The warehouse's ``all_chunks_embedded`` check (WARN): a Dagster run that published chunks without their vectors
(a source's embeddings step terminated or not selected) was green with every check passed, the gap only a
``missing_vectors`` figure in its metadata, while `docsvault build` printed a `warning:` line and `status` named
the source (found by a Dagster user, session 42)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.defs import build_definitions
from pipeline.defs.runner import _shared_check_warnings
from pipeline.service import missing_vectors_line

CHAIN = ("raw_docs", "notes", "vault", "chunks", "embeddings")


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, stages: tuple[str, ...]) -> dg.ExecuteInProcessResult:
    keys = [dg.AssetKey(["tiny", s]) for s in stages] + [dg.AssetKey(["link_graph"]), dg.AssetKey(["warehouse"])]
    return defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=keys, instance=instance, raise_on_error=False)


def _check(result: dg.ExecuteInProcessResult) -> tuple[bool, str, dict[str, Any], str | None]:
    """(passed, severity, metadata, description) of the run's ``all_chunks_embedded`` evaluation."""
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            ev = event.event_specific_data
            if ev.check_name == "all_chunks_embedded":
                return (ev.passed, ev.severity.value, {k: getattr(v, "value", v) for k, v in ev.metadata.items()},
                        ev.description)
    raise AssertionError("no all_chunks_embedded evaluation")


def test_a_run_that_publishes_chunks_without_vectors_warns_until_they_are_embedded(tiny_env: Path) -> None:
    settings = Settings.from_env()
    defs = build_definitions(settings)
    instance = dg.DagsterInstance.ephemeral()

    full = _run(defs, instance, CHAIN)
    assert full.success is True
    n = len(artifacts.load_chunks(settings, "tiny"))
    assert _check(full) == (True, "WARN", {"chunks": n, "missing_vectors_in": "none"}, None)

    # a new note, then a run of the source's chain without its embeddings (as a run terminated while embedding)
    (tiny_env / "tinyvault" / "Geese.md").write_text("# Geese\n\nGeese honk loudly over the marsh.\n",
                                                     encoding="utf-8")
    partial = _run(defs, instance, CHAIN[:-1])
    assert partial.success is True                       # WARN: the run stays green, the check says what is missing
    n = len(artifacts.load_chunks(settings, "tiny"))
    missing = f"tiny 1 of {n}"
    assert _check(partial) == (False, "WARN", {"chunks": n, "missing_vectors_in": missing},
                               missing_vectors_line(missing))
    assert missing_vectors_line(missing) == (
        f"chunks without a vector (their embeddings step did not finish): tiny 1 of {n}; keyword search finds them, "
        "the vector lanes do not until `docsvault build --source <name>` embeds them")
    logged = [r.user_message for r in instance.all_logs(partial.run_id) if r.level == 30]    # WARNING
    assert logged == [missing_vectors_line(missing)]
    mat = instance.get_latest_materialization_event(dg.AssetKey(["warehouse"])).asset_materialization
    assert mat.metadata["missing_vectors_in"].value == missing

    # a run of the shared stages alone that finds the file unchanged still says so (the check reads the file)
    again = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        asset_selection=[dg.AssetKey(["warehouse"])], instance=instance, raise_on_error=False)
    assert _check(again)[:2] == (False, "WARN")
    mat = instance.get_latest_materialization_event(dg.AssetKey(["warehouse"])).asset_materialization
    assert (mat.metadata["mode"].value, mat.metadata["missing_vectors_in"].value) == ("unchanged", missing)

    done = _run(defs, instance, CHAIN)
    assert _check(done) == (True, "WARN", {"chunks": n, "missing_vectors_in": "none"}, None)


def test_docsvault_build_says_missing_vectors_once() -> None:
    """`docsvault build` prints the warehouse's own `warning: chunks without a vector ...` line; the failed check
    is not repeated as `asset check all_chunks_embedded of warehouse failed`."""
    checks = {"warehouse": {"all_chunks_embedded": {"missing_vectors_in": "tiny 1 of 9"}},
              "retrieval_eval": {"eval_floors": {"below": "mrr@10 0.5 < 0.7"}}}
    assert _shared_check_warnings(checks) == [
        "asset check eval_floors of retrieval_eval failed: mrr@10 0.5 < 0.7 (see the Dagster UI)"]
