"""The upstream-change sensor (evaluated with dg.build_sensor_context) and the daily schedule in the Definitions."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import git
import pytest

from pipeline.config import Settings
from pipeline.defs.assets import PER_SOURCE_STAGES, SHARED_STAGES
from pipeline.defs.automation import upstream_change_sensor
from pipeline.ingest.fetch import fetch_source
from pipeline.ingest.fetch.watch import check_upstream
from pipeline.models import Source

TOOLS = Path("/work/shared/tools/make-git-mirrors")


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                    vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals")


def _commit(work: git.Repo, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        path = Path(work.working_tree_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    work.index.add(list(files))
    actor = git.Actor("t", "t@localhost")
    return work.index.commit(message, author=actor, committer=actor).hexsha


def _evaluate(sensor: dg.SensorDefinition, cursor: str | None = None) -> dg.SensorResult:
    context = dg.build_sensor_context(cursor=cursor)
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def _expected_keys(slug: str) -> set[dg.AssetKey]:
    return {dg.AssetKey([slug, s]) for s in PER_SOURCE_STAGES} | {dg.AssetKey([s]) for s in SHARED_STAGES}


@pytest.fixture()
def two_sources(tmp_path):
    work = git.Repo.init(tmp_path / "work", initial_branch="main")
    _commit(work, {"docs/a.md": "# A\n"}, "init")
    bare = tmp_path / "remote.git"
    git.Repo.clone_from(work.working_tree_dir, bare, bare=True)
    with git.Repo(bare).config_writer() as cw:
        cw.set_value("uploadpack", "allowFilter", "true")
    work.create_remote("origin", str(bare))
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "n.md").write_text("# N\n")
    sources = [Source(name="repo-docs", kind="git", url=f"file://{bare}", ref="main", paths=("docs",)),
               Source(name="notes", kind="local", path=(notes,))]
    settings = _settings(tmp_path)
    for s in sources:
        fetch_source(s, settings)
    return work, sources, settings, notes


def test_sensor_requests_only_the_changed_source(two_sources):
    work, sources, settings, notes = two_sources
    sensor = upstream_change_sensor(sources, settings)
    quiet = _evaluate(sensor)
    assert quiet.run_requests == []
    new = _commit(work, {"docs/b.md": "# B\n"}, "add b")
    work.remote("origin").push("main")
    result = _evaluate(sensor, quiet.cursor)
    assert len(result.run_requests) == 1
    request = result.run_requests[0]
    assert request.run_key.startswith(f"repo_docs:{new}@") and len(request.run_key) == len(f"repo_docs:{new}@") + 8
    assert set(request.asset_selection) == _expected_keys("repo_docs")
    assert request.tags["docsvault/source"] == "repo-docs"
    # a failed run is retried by the daemon from its failed steps, twice at most (dagster.yaml enables run retries)
    assert (request.tags["dagster/max_retries"], request.tags["dagster/retry_strategy"]) == ("2", "FROM_FAILURE")
    # same upstream version again: not requested twice; after the fetch: quiet
    assert _evaluate(sensor, result.cursor).run_requests == []
    fetch_source(sources[0], settings)
    assert _evaluate(sensor).run_requests == []
    # a local change is seen too
    (notes / "n.md").write_text("# N changed\n")
    local = _evaluate(sensor)
    assert [r.tags["docsvault/source"] for r in local.run_requests] == ["notes"]


def test_a_commit_force_pushed_back_is_built_again(two_sources):
    """An operator undid a bad release with `git push -f origin <good>:main` while the daemon ran (session 47).
    The good commit had been requested before, so Dagster dropped the request of its used run key
    (`duck:<good>`); and when that run had fetched the bad commit already (pushed right after), the cursor still
    held the good one and every tick said "no source moved" while search served the bad release. Now a version
    seen after each fetch is its own token and run key."""
    work, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    quiet = _evaluate(sensor)
    good = _commit(work, {"docs/b.md": "# B\n"}, "good")
    work.remote("origin").push("main")
    first = _evaluate(sensor, quiet.cursor)
    assert [r.tags["docsvault/source"] for r in first.run_requests] == ["repo-docs"]
    fetch_source(sources[0], settings)                          # its run
    _commit(work, {"docs/b.md": "# B, broken\n"}, "bad")
    work.remote("origin").push("main")
    second = _evaluate(sensor, first.cursor)
    assert [r.tags["docsvault/source"] for r in second.run_requests] == ["repo-docs"]
    fetch_source(sources[0], settings)
    work.git.reset("--hard", good)
    work.git.push("--force", "origin", "main")
    back = _evaluate(sensor, second.cursor)
    assert [r.tags["docsvault/trigger"] for r in back.run_requests] == ["upstream_change"]
    assert back.run_requests[0].run_key != first.run_requests[0].run_key     # a key Dagster has not seen
    assert back.run_requests[0].run_key.startswith(f"repo_docs:{good}@")
    assert _evaluate(sensor, back.cursor).run_requests == []                # once
    # the race: the good commit requested, its run fetched the bad one pushed meanwhile, then the push is undone
    fetch_source(sources[0], settings)
    _commit(work, {"docs/b.md": "# B, broken again\n"}, "bad again")
    work.remote("origin").push("main")
    fetch_source(sources[0], settings)                          # the run requested for `good` fetched this one
    work.git.reset("--hard", good)
    work.git.push("--force", "origin", "main")
    undone = _evaluate(sensor, back.cursor)
    assert [r.tags["docsvault/trigger"] for r in undone.run_requests] == ["upstream_change"]
    assert undone.run_requests[0].run_key not in {first.run_requests[0].run_key, back.run_requests[0].run_key}


def test_an_http_source_whose_check_always_says_changed_is_requested_once(tmp_path, monkeypatch):
    """An html source with a sitemap whose server sends no ETag: its check says "changed" after every fetch (no
    recorded hash to compare with), with the sitemap's hash as token. Keyed by the last fetch, as a git source's
    version is, it would be requested on every tick; its token stays the content's."""
    import json

    from pipeline.ingest.fetch import watch
    from pipeline.ingest.fetch.base import source_dir

    settings = _settings(tmp_path)
    site = Source(name="site", kind="html", url="https://docs.example.com/", sitemap="https://docs.example.com/s.xml")
    monkeypatch.setattr(watch, "_check_http", lambda source, state: watch.UpstreamCheck(
        source.name, True, "a" * 64, "https://docs.example.com/s.xml: content hash differs"))
    folder = source_dir(site, settings)
    folder.mkdir(parents=True)
    sensor = upstream_change_sensor([site], settings)
    cursor = None
    requested = []
    for fetched_at in ("2026-01-01T00:00:00+00:00", "2026-01-01T00:15:00+00:00", "2026-01-01T00:30:00+00:00"):
        (folder / "fetch.json").write_text(json.dumps({"revision": "r1", "fetched_at": fetched_at}))   # a run
        result = _evaluate(sensor, cursor)
        cursor = result.cursor
        requested += [r.run_key for r in result.run_requests]
    assert requested == ["site:" + "a" * 40]


def test_unreachable_source_is_logged_not_requested(two_sources, tmp_path):
    _, sources, settings, _ = two_sources
    gone = Path(sources[0].url.removeprefix("file://"))
    gone.rename(tmp_path / "moved.git")
    check = check_upstream(sources[0], settings)
    assert check.changed is False and check.error and "cannot fetch" in check.error
    assert _evaluate(upstream_change_sensor(sources, settings)).run_requests == []


def test_status_names_a_source_whose_upstream_the_sensor_cannot_check(two_sources, tmp_path, capsys):
    """The branch a git source follows was deleted upstream (renamed `master` -> `main`) while the daemon ran
    (session 47). The sensor requests no run for a source it cannot check, so no fetch failed: for weeks
    `docsvault status` said `fetch ok` with the old time and the asset stayed green; only each tick's skip reason
    named it. Now status says since when the sensor cannot check it, and why; the line goes once it answers."""
    from pipeline.cli import _status_sources
    from pipeline.common import artifacts
    from pipeline.service import status_data, status_report

    work, sources, settings, _ = two_sources
    bare = Path(sources[0].url.removeprefix("file://"))
    sensor = upstream_change_sensor(sources, settings)
    quiet = _evaluate(sensor)
    git.Repo(bare).git.update_ref("-d", "refs/heads/main")      # the branch is gone
    error = (f"source 'repo-docs': cannot fetch file://{bare}: ref 'main' not found on the remote (check 'ref' in "
             "sources.yaml)")
    first = _evaluate(sensor, quiet.cursor)
    assert first.run_requests == []
    since = artifacts.upstream_check_failure(settings, "repo-docs")["since"]
    assert artifacts.upstream_check_failure(settings, "repo-docs") == {"error": error, "since": since}
    _evaluate(sensor, first.cursor)                              # a later tick keeps when it began
    assert artifacts.upstream_check_failure(settings, "repo-docs") == {"error": error, "since": since}
    assert artifacts.upstream_check_failure(settings, "notes") is None
    (tmp_path / "sources.yaml").write_text(
        f"sources:\n  - name: repo-docs\n    kind: git\n    url: file://{bare}\n    ref: main\n"
        f"    paths: [docs]\n  - name: notes\n    kind: local\n    path: {sources[1].path[0]}\n")
    rows = {r.name: r for r in status_report(settings).sources}
    assert (rows["repo-docs"].upstream_check, rows["notes"].upstream_check) == ({"error": error, "since": since}, None)
    _status_sources(status_data(settings))
    assert [line for line in capsys.readouterr().out.splitlines() if "sensor" in line] == [(
        f"  repo-docs: the upstream_change sensor cannot check its upstream since {since}: {error}; nothing is "
        "fetched for it meanwhile (the last fetch above is what search serves)")]
    _evaluate(upstream_change_sensor(sources[1:], settings))    # removed from sources.yaml: forgotten
    assert artifacts.upstream_check_failure(settings, "repo-docs") is None
    _evaluate(sensor, first.cursor)                              # listed again and still failing: from this tick on
    assert artifacts.upstream_check_failure(settings, "repo-docs")["since"] >= since
    git.Repo(bare).git.update_ref("refs/heads/main", work.head.commit.hexsha)   # back: the line goes
    assert _evaluate(sensor, first.cursor).run_requests == []
    assert artifacts.upstream_check_failure(settings, "repo-docs") is None


def test_never_fetched_counts_as_changed(tmp_path):
    source = Source(name="fresh", kind="local", path=(tmp_path,))
    assert check_upstream(source, _settings(tmp_path)).changed is True


def test_a_source_whose_first_run_failed_is_requested_again_once_fixed(tmp_path):
    # a mistyped git URL: requested once (its run fails, nothing is fetched), not again while unchanged; fixing the
    # URL in sources.yaml gives a new token, so the sensor requests it (before, every never-fetched source had one
    # token, "never-fetched", and a fixed source was never built unattended)
    settings = _settings(tmp_path)
    dead = Source(name="deadgit", kind="git", url=f"file://{tmp_path}/nowhere.git", ref="main")
    first = _evaluate(upstream_change_sensor([dead], settings))
    assert [r.tags["docsvault/source"] for r in first.run_requests] == ["deadgit"]
    assert _evaluate(upstream_change_sensor([dead], settings), first.cursor).run_requests == []
    fixed = Source(name="deadgit", kind="git", url=f"file://{tmp_path}/remote.git", ref="main")
    again = _evaluate(upstream_change_sensor([fixed], settings), first.cursor)
    assert [r.tags["docsvault/source"] for r in again.run_requests] == ["deadgit"]
    assert again.run_requests[0].run_key != first.run_requests[0].run_key
    # a local folder missing on the first build: not requested (logged) until it exists, then requested
    notes = tmp_path / "notes"
    local = Source(name="notes", kind="local", path=(notes,))
    check = check_upstream(local, settings)
    assert (check.changed, check.error) == (False, (f"source 'notes': local path {notes} does not exist or is "
                                                    "not a folder"))
    notes.mkdir()
    (notes / "n.md").write_text("# N\n")
    assert [r.tags["docsvault/source"] for r in _evaluate(upstream_change_sensor([local], settings)).run_requests] \
        == ["notes"]


def test_definitions_register_sensor_and_schedule(tmp_path, tiny_env):
    from pipeline.definitions import build_definitions

    defs = build_definitions(Settings.from_env())
    sensor = defs.resolve_sensor_def("upstream_change")
    schedule = defs.resolve_schedule_def("daily_refresh")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert schedule.cron_schedule == "0 4 * * *"


@pytest.mark.integration
@pytest.mark.skipif(not TOOLS.exists() or shutil.which("git") is None, reason="mirror tool not available")
def test_sensor_on_a_real_mirror_that_gained_a_commit(tmp_path):
    subprocess.run([str(TOOLS), str(tmp_path / "mirrors"), "obsidian-help"], check=True, capture_output=True)
    bare = tmp_path / "mirrors" / "obsidian-help.git"
    mirror = Source(name="obsidian-help", kind="git", url=f"file://{bare}", ref="main", paths=("en",),
                    format="obsidian")
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.md").write_text("# X\n")
    sources = [mirror, Source(name="other", kind="local", path=(other,))]
    settings = _settings(tmp_path)
    first = {s.name: fetch_source(s, settings) for s in sources}
    sensor = upstream_change_sensor(sources, settings)
    assert _evaluate(sensor).run_requests == []
    clone = git.Repo.clone_from(str(bare), tmp_path / "clone")
    new = _commit(clone, {"en/Home.md": "# Home\n\nchanged upstream\n"}, "edit home")
    clone.remote("origin").push("main")
    result = _evaluate(sensor)
    assert [(r.run_key[:len(f"obsidian_help:{new}@")], set(r.asset_selection)) for r in result.run_requests] == [
        (f"obsidian_help:{new}@", _expected_keys("obsidian_help"))]
    # only that source re-fetches
    again = {s.name: fetch_source(s, settings) for s in sources}
    assert again["obsidian-help"].changed is True and again["other"].changed is False
    assert again["obsidian-help"].revision == new != first["obsidian-help"].revision


def test_sensor_finishes_a_chain_a_dead_run_left_after_its_fetch(two_sources, tmp_path):
    """A run killed between `raw_docs` and `embeddings` has recorded its fetch, so the upstream check sees nothing
    new: the sensor requests that source's chain once per interrupted fetch, and none while a run is in progress."""
    from dagster._core.storage.dagster_run import DagsterRun

    _, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        materialize, evaluate = _runless(instance, sensor)

        materialize(["repo_docs", "raw_docs"], ["repo_docs", "embeddings"], ["notes", "raw_docs"],
                    ["notes", "embeddings"])
        assert evaluate().run_requests == []
        materialize(["notes", "raw_docs"], ["notes", "notes"])             # killed at chunks/embeddings
        fetched = instance.get_asset_records([dg.AssetKey(["notes", "raw_docs"])])[0] \
            .asset_entry.last_materialization_record.storage_id
        result = evaluate()
        assert [(r.run_key, r.tags["docsvault/trigger"], set(r.asset_selection)) for r in result.run_requests] == [
            (f"notes:unfinished:{fetched}", "unfinished_run", _expected_keys("notes"))]
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="finishing", status=dg.DagsterRunStatus.STARTED))
        assert evaluate(result.cursor).run_requests == []                  # a run in progress may be finishing it
        instance.report_run_failed(instance.get_run_by_id("finishing"))
        materialize(["notes", "embeddings"])
        assert evaluate(result.cursor).run_requests == []


def test_a_killed_run_that_the_daemon_retries_is_not_also_requested_as_unfinished(two_sources, tmp_path,
                                                                                   monkeypatch):
    """An operator kills a sensor run's process (`kill -9`) during `embeddings`. The next tick reports the run
    failed, and both the daemon's run retry (the sensor's runs carry `dagster/max_retries`) and the tick's
    unfinished-chain rule started the source's chain again: two runs of one source (seen in session 43). Now a
    failed run that Dagster will retry counts as in progress until its retry is launched (at most
    RETRY_WAIT_SECONDS: a retry that never comes holds nothing)."""
    import time

    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG

    from pipeline.defs import automation
    from pipeline.defs.automation import RETRY_TAGS

    _, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster"), overrides={"run_retries": {"enabled": True}}) \
            as instance:
        materialize, evaluate = _runless(instance, sensor)
        materialize(*([s, stage] for s in ("repo_docs", "notes") for stage in PER_SOURCE_STAGES),
                    *([s] for s in SHARED_STAGES))
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="killed", status=dg.DagsterRunStatus.STARTED,
                                    tags={"docsvault/source": "notes", **RETRY_TAGS}))
        for k in (["notes", "raw_docs"], ["notes", "notes"]):
            instance.store_event(EventLogEntry(
                error_info=None, level="debug", user_message="", run_id="killed", timestamp=time.time(),
                dagster_event=DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, "__ASSET_JOB",
                                           event_specific_data=StepMaterializationData(
                                               dg.AssetMaterialization(asset_key=dg.AssetKey(k))))))
        instance.report_run_failed(instance.get_run_by_id("killed"))          # as the tick reports a dead run
        assert instance.get_run_by_id("killed").tags[WILL_RETRY_TAG] == "true"
        assert evaluate().run_requests == []                                  # the daemon's retry finishes it
        monkeypatch.setattr(automation, "RETRY_WAIT_SECONDS", -1)
        fetched = instance.get_asset_records([dg.AssetKey(["notes", "raw_docs"])])[0] \
            .asset_entry.last_materialization_record.storage_id
        assert [r.run_key for r in evaluate().run_requests] == [f"notes:unfinished:{fetched}"]  # it never came
        monkeypatch.setattr(automation, "RETRY_WAIT_SECONDS", 300)
        instance.add_run_tags("killed", {AUTO_RETRY_RUN_ID_TAG: "its-retry"})  # launched, and failed for good
        assert [r.run_key for r in evaluate().run_requests] == [f"notes:unfinished:{fetched}"]


def test_a_chain_the_user_terminated_is_not_started_again(two_sources, tmp_path):
    """A user terminates a run in the UI after its fetch (or after its embeddings): the next tick requested the same
    chain again (its unfinished-chain rule), so Terminate did not stick. A run that ended CANCELED is now left
    alone, and the tick's skip reason says so; a killed or failed run is still finished (tests above)."""
    import time

    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.storage.dagster_run import DagsterRun

    _, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        materialize, evaluate = _runless(instance, sensor)

        def in_run(run_id: str, status: dg.DagsterRunStatus, *keys: list[str]) -> None:
            instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id=run_id, status=status))
            for k in keys:
                instance.store_event(EventLogEntry(
                    error_info=None, level="debug", user_message="", run_id=run_id, timestamp=time.time(),
                    dagster_event=DagsterEvent(DagsterEventType.ASSET_MATERIALIZATION.value, "__ASSET_JOB",
                                               event_specific_data=StepMaterializationData(
                                                   dg.AssetMaterialization(asset_key=dg.AssetKey(k))))))

        every = [[s, stage] for s in ("repo_docs", "notes") for stage in PER_SOURCE_STAGES]
        materialize(*every, *([s] for s in SHARED_STAGES))
        in_run("stopped-early", dg.DagsterRunStatus.CANCELED, ["notes", "raw_docs"], ["notes", "notes"])
        result = evaluate()
        assert result.run_requests == []
        assert result.skip_reason is not None and result.skip_reason.skip_message.endswith(
            "; not restarted: the run building notes was terminated before it published (materialize the "
            "source's assets or run `docsvault build` to finish it)")
        materialize(["notes", "chunks"], ["notes", "embeddings"])            # finished by hand
        in_run("stopped-late", dg.DagsterRunStatus.CANCELED, ["repo_docs", "raw_docs"], ["repo_docs", "notes"],
               ["repo_docs", "chunks"], ["repo_docs", "embeddings"])         # terminated before the warehouse
        result = evaluate()
        # notes (by hand, not terminated) is published; repo_docs (terminated) is not, and is named
        published = instance.get_asset_records([dg.AssetKey(["warehouse"])])[0] \
            .asset_entry.last_materialization_record.storage_id
        assert [(r.run_key, r.tags["docsvault/trigger"]) for r in result.run_requests] == [
            (f"unpublished:{published}", "unpublished")]
        materialize(*([s] for s in SHARED_STAGES))                       # that run publishes repo_docs' too
        result = evaluate()
        assert result.run_requests == [] and result.skip_reason.skip_message == "no source moved (2 checked)"


def test_a_source_removed_and_added_back_unchanged_is_requested_again(tmp_path):
    """`memo` built, removed by a build (vault/memo/ and its data go), then added back with the same entry: it has
    nothing built again, so the sensor requests it once per removal, under a run key Dagster has not seen (the
    cursor's old token of memo and the used key memo:<listing> would both have kept it quiet for good)."""
    import json

    from pipeline import stages as build
    from pipeline.common import artifacts

    settings = _settings(tmp_path)
    folder = tmp_path / "memo"
    folder.mkdir()
    (folder / "m.md").write_text("# M\n")
    memo = Source(name="memo", kind="local", path=(folder,))
    sensor = upstream_change_sensor([memo], settings)
    first = _evaluate(sensor)
    listing = check_upstream(memo, settings).token
    assert [(r.run_key, r.tags["docsvault/trigger"]) for r in first.run_requests] == [
        (f"memo:{listing[:40]}", "upstream_change")]
    build.fetch_stage(settings, memo)                          # its run
    assert build.remove_dropped_sources(settings, [], remove_all=True) == []     # no vault folder: no line
    assert not artifacts.state_path(settings, "memo").exists()
    removed = artifacts.removed_at(settings, "memo")
    assert removed is not None
    # a tick while it is out of sources.yaml forgets it; a quiet tick says why
    out = upstream_change_sensor([], settings)(dg.build_sensor_context(cursor=first.cursor))
    assert json.loads(out.cursor) == {}
    assert out.skip_reason.skip_message == "no source moved (0 checked)"
    # back, unchanged: requested again (the daemon may not have ticked while it was out: the old cursor)
    again = _evaluate(sensor, first.cursor)
    readded = hashlib.sha256(f"{listing}|{removed}".encode()).hexdigest()[:24]
    assert [(r.run_key, r.tags["docsvault/trigger"]) for r in again.run_requests] == [
        (f"memo:re-added:{readded}", "upstream_change")]
    assert check_upstream(memo, settings).detail == f"nothing fetched since it was removed from sources.yaml at " \
                                                   f"{removed}"
    quiet = _evaluate(sensor, again.cursor)
    assert (quiet.run_requests, quiet.skip_reason.skip_message) == ([], "no source moved (1 checked)")
    # built and removed once more: a new removal, a new key
    build.fetch_stage(settings, memo)
    build.remove_dropped_sources(settings, [], remove_all=True)
    third = _evaluate(sensor, quiet.cursor)
    assert len(third.run_requests) == 1
    assert third.run_requests[0].run_key not in {again.run_requests[0].run_key, first.run_requests[0].run_key}


def test_a_failed_fetch_is_retried_once_its_upstream_answers_again(two_sources, tmp_path):
    """The git mirror moved away, a run (the UI, the 04:00 schedule) fails its fetch; the mirror is back, upstream
    has not moved: the sensor requests that source once for that failure (before: every tick skipped, the source
    stayed 'last fetch failed' until someone ran it by hand)."""
    from pipeline import stages as build
    from pipeline.common import artifacts
    from pipeline.common.errors import FetchError

    _, sources, settings, _ = two_sources
    repo = sources[0]
    sensor = upstream_change_sensor(sources, settings)
    bare = Path(repo.url.removeprefix("file://"))
    bare.rename(tmp_path / "moved.git")
    with pytest.raises(FetchError):
        build.fetch_stage(settings, repo)
    state = artifacts.load_state(settings, "repo-docs")
    since = state["failing_since"]
    assert state["fetch_status"] == "failed"
    down = _evaluate(sensor)
    assert (down.run_requests, down.skip_reason.skip_message) == (
        [], "no source moved (2 checked; 1 could not be checked: repo-docs (see the tick's log))")
    with pytest.raises(FetchError):                             # failing again: the same failure
        build.fetch_stage(settings, repo)
    assert artifacts.load_state(settings, "repo-docs")["failing_since"] == since
    (tmp_path / "moved.git").rename(bare)
    up = _evaluate(sensor, down.cursor)
    assert [(r.run_key, r.tags["docsvault/trigger"], set(r.asset_selection)) for r in up.run_requests] == [
        (f"repo_docs:fetch_failed:{since}", "fetch_failed", _expected_keys("repo_docs"))]
    assert _evaluate(sensor, up.cursor).run_requests == []     # once per failure, not every tick
    build.fetch_stage(settings, repo)                           # its run
    state = artifacts.load_state(settings, "repo-docs")
    assert (state["fetch_status"], state["failing_since"]) == ("ok", None)
    assert _evaluate(sensor, up.cursor).run_requests == []
    # a new failure is a new request
    bare.rename(tmp_path / "moved.git")
    with pytest.raises(FetchError):
        build.fetch_stage(settings, repo)
    (tmp_path / "moved.git").rename(bare)
    later = artifacts.load_state(settings, "repo-docs")["failing_since"]
    assert later != since
    assert [r.run_key for r in _evaluate(sensor, up.cursor).run_requests] == [f"repo_docs:fetch_failed:{later}"]


def test_an_edit_of_a_git_sources_paths_is_requested_though_its_commit_was(two_sources):
    """A user adds a folder to a git source's `paths:` in sources.yaml (and reloads the code location) while the
    daemon runs. Its commit was requested before, so the cursor held that commit as the source's token: the check
    said changed (the recorded paths differ) but every tick skipped it as already requested, and the new folder
    was never built unattended (found by a new user, session 35). Now the edit is its own token and run key."""
    from dataclasses import replace

    work, sources, settings, _ = two_sources
    new = _commit(work, {"docs/b.md": "# B\n", "guide/g.md": "# G\n"}, "add b and a guide")
    work.remote("origin").push("main")
    moved = _evaluate(upstream_change_sensor(sources, settings))
    assert [r.run_key[:len(f"repo_docs:{new}@")] for r in moved.run_requests] == [f"repo_docs:{new}@"]
    fetch_source(sources[0], settings)                          # its run
    assert _evaluate(upstream_change_sensor(sources, settings), moved.cursor).run_requests == []
    edited = [replace(sources[0], paths=("docs", "guide")), sources[1]]
    result = _evaluate(upstream_change_sensor(edited, settings), moved.cursor)
    assert [(r.tags["docsvault/source"], r.run_key[:len("repo_docs:") + 18]) for r in result.run_requests] == [
        ("repo-docs", f"repo_docs:{new[:12]}+edit:")]
    assert check_upstream(edited[0], settings).detail.endswith("; ref or paths edited")
    assert _evaluate(upstream_change_sensor(edited, settings), result.cursor).run_requests == []   # once
    fetch_source(edited[0], settings)                           # its run: the new paths are recorded, quiet again
    assert _evaluate(upstream_change_sensor(edited, settings), result.cursor).run_requests == []
    back = _evaluate(upstream_change_sensor(sources, settings), result.cursor)   # the edit undone: requested too
    assert len(back.run_requests) == 1 and back.run_requests[0].run_key not in {
        result.run_requests[0].run_key, moved.run_requests[0].run_key}


def test_the_sensor_reads_sources_yaml_again_on_each_tick(two_sources, tmp_path):
    """A user removed a source from sources.yaml while `dg dev` ran and did not reload the code location. The
    sensor, with the sources of its load, requested a run for the removed source when its folder changed; the run
    loads sources.yaml again, so no asset supplied the source's keys: a framework error, retried twice, three red
    runs (found by a new user, session 35). Now each tick reads the file: a removed source is not requested, the
    others are checked as the file has them, and the tick says to reload."""
    from dataclasses import replace

    from pipeline.defs.automation import sources_now

    work, sources, settings, notes = two_sources
    repo, local = sources
    sources_file = settings.sources_file

    def write(*entries: str) -> None:
        sources_file.write_text("sources:\n" + "".join(entries), encoding="utf-8")

    repo_entry = f"  - name: repo-docs\n    kind: git\n    url: {repo.url}\n    ref: main\n    paths: [docs]\n"
    local_entry = f"  - name: notes\n    kind: local\n    path: {notes}\n"
    write(repo_entry, local_entry)
    sensor = upstream_change_sensor(sources, settings, sources_file=sources_file)
    assert sources_now({s.name: s for s in sources}, sources_file) == ({s.name: s for s in sources}, "")
    assert _evaluate(sensor).skip_reason.skip_message == "no source moved (2 checked)"
    write(repo_entry)                                           # notes removed, no reload
    (notes / "n.md").write_text("# N changed\n")
    removed = _evaluate(sensor)
    reload = "reload the code location (UI: 'Reload definitions', or restart `dg dev` / the daemon)"
    assert (removed.run_requests, removed.skip_reason.skip_message) == ([], (
        f"no source moved (1 checked); {sources_file} changed since the code location loaded (removed: notes); "
        f"notes not requested: {reload}"))
    # an edit is checked as the file has it (the run reads the file too); an added source waits for the reload
    write(repo_entry.replace("[docs]", "[docs, guide]"), local_entry, "  - name: more\n    kind: local\n    path: .\n")
    checked, line = sources_now({s.name: s for s in sources}, sources_file)
    assert checked == {"repo-docs": replace(repo, paths=("docs", "guide")), "notes": local}
    assert line == f"{sources_file} changed since the code location loaded (added: more; edited: repo-docs): {reload}"
    assert [r.tags["docsvault/source"] for r in _evaluate(sensor, removed.cursor).run_requests] == [
        "repo-docs", "notes"]
    sources_file.write_text("sources:\n  - name: x\n", encoding="utf-8")   # broken: nothing requested
    broken = _evaluate(sensor)
    assert broken.run_requests == [] and broken.skip_reason.skip_message.startswith(
        f"no source moved (0 checked); {sources_file}") and broken.skip_reason.skip_message.endswith(
        ": no source checked until it loads (a run started now would fail to load it)")


def test_sensor_publishes_the_warehouse_a_run_left_behind(two_sources, tmp_path):
    """A user ran one source's group (`dg launch --assets 'group:duckdb'`) after an upstream edit: the vault had
    the new text, `docsvault search` said no note contains it, and the sensor said "no source moved" on every
    tick (the fetch was recorded), so the warehouse stayed behind until someone ran it (found by a new user,
    session 35; the same after a run killed between embeddings and warehouse). Now the sensor requests the
    shared stages once per warehouse materialization, none while a run is in progress."""
    from dagster._core.storage.dagster_run import DagsterRun

    _, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        materialize, evaluate = _runless(instance, sensor)

        every = [[s, stage] for s in ("repo_docs", "notes") for stage in PER_SOURCE_STAGES]
        materialize(*every)
        assert evaluate().run_requests == []                   # never published: nothing to catch up with
        materialize(*([s] for s in SHARED_STAGES))
        assert evaluate().run_requests == []
        published = instance.get_asset_records([dg.AssetKey(["warehouse"])])[0] \
            .asset_entry.last_materialization_record.storage_id
        materialize(*([["notes", stage] for stage in PER_SOURCE_STAGES]))   # the group alone
        result = evaluate()
        assert [(r.run_key, r.tags["docsvault/trigger"], set(r.asset_selection)) for r in result.run_requests] == [
            (f"unpublished:{published}", "unpublished", {dg.AssetKey([s]) for s in SHARED_STAGES})]
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="publishing", status=dg.DagsterRunStatus.STARTED))
        assert evaluate(result.cursor).run_requests == []       # a run in progress may publish it
        instance.report_run_failed(instance.get_run_by_id("publishing"))
        materialize(["link_graph"], ["warehouse"], ["retrieval_eval"])
        assert evaluate(result.cursor).run_requests == []


def _runless(instance: dg.DagsterInstance, sensor: Any) -> tuple[Callable[..., None], Callable[..., dg.SensorResult]]:
    """``(materialize(*asset key paths), evaluate(cursor=None))`` on ``instance``: runless materializations, and one
    tick of ``sensor`` (its SensorResult)."""
    def materialize(*keys: list[str]) -> None:
        for k in keys:
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=dg.AssetKey(k)))

    def evaluate(cursor: str | None = None) -> dg.SensorResult:
        result = sensor(dg.build_sensor_context(cursor=cursor, instance=instance))
        assert isinstance(result, dg.SensorResult)
        return result

    return materialize, evaluate


def test_an_edit_of_any_field_of_a_sources_entry_is_requested_once(two_sources):
    """A user changes a source's `format`, `include` or `site_url` in sources.yaml while the daemon runs. Only a git
    source's `ref`/`paths` counted as a change, so the edit waited for the daily schedule (noticed in session 35).
    Now the fetch stage records the entry it fetched with, and any other entry is requested, once per edit."""
    from dataclasses import replace

    from pipeline import stages as build

    _, sources, settings, _ = two_sources
    repo, local = sources
    for s in sources:
        build.fetch_stage(settings, s)          # as a run does: records each entry's configuration
    quiet = _evaluate(upstream_change_sensor(sources, settings))
    assert quiet.run_requests == []
    edited = [repo, replace(local, site_url="https://notes.example.org")]
    result = _evaluate(upstream_change_sensor(edited, settings), quiet.cursor)
    assert [(r.tags["docsvault/source"], r.tags["docsvault/trigger"], r.run_key[:len("notes:config:")])
            for r in result.run_requests] == [("notes", "config_edit", "notes:config:")]
    assert set(result.run_requests[0].asset_selection) == _expected_keys("notes")
    assert _evaluate(upstream_change_sensor(edited, settings), result.cursor).run_requests == []   # once
    build.fetch_stage(settings, edited[1])      # its run fetched with the new entry: quiet again
    assert _evaluate(upstream_change_sensor(edited, settings), result.cursor).run_requests == []
    back = _evaluate(upstream_change_sensor(sources, settings), result.cursor)     # undone: requested again
    assert [r.run_key for r in back.run_requests] != [] and back.run_requests[0].run_key != result.run_requests[0].run_key


def test_a_source_removed_from_sources_yaml_is_removed_from_search_unattended(two_sources, tmp_path):
    """A user removed a source from sources.yaml and reloaded the code location: every tick said "no source moved",
    so its notes stayed in search and its folder in the vault until some other source moved (found by a Dagster
    user, session 37). Now a quiet tick requests the shared stages once (their warehouse step removes it), none
    while a run is in progress, none once it is removed."""
    from dagster._core.storage.dagster_run import DagsterRun

    from pipeline import stages as build

    _, sources, settings, _ = two_sources
    for s in sources:
        build.fetch_stage(settings, s)
    kept = [s for s in sources if s.name == "repo-docs"]
    sensor = upstream_change_sensor(kept, settings)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        _, evaluate = _runless(instance, sensor)
        first = result = evaluate()
        assert [(r.run_key[:8], r.tags["docsvault/trigger"], set(r.asset_selection)) for r in result.run_requests] == [
            ("removed:", "source_removed", {dg.AssetKey([s]) for s in SHARED_STAGES})]
        assert evaluate(first.cursor).run_requests[0].run_key == result.run_requests[0].run_key   # once per removal
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="busy", status=dg.DagsterRunStatus.STARTED))
        assert evaluate(first.cursor).run_requests == []     # a run in progress may remove it
        instance.report_run_failed(instance.get_run_by_id("busy"))
        assert build.remove_dropped_sources(settings, kept) == []    # what the requested warehouse step does
        quiet = evaluate(first.cursor)
        assert (quiet.run_requests, quiet.skip_reason.skip_message) == ([], "no source moved (1 checked)")
        # sources.yaml listing no source: a build refuses to remove them all, so nothing is requested
        build.fetch_stage(settings, sources[1])
        assert upstream_change_sensor([], settings)(dg.build_sensor_context(instance=instance)).run_requests == []


def test_a_second_instances_sensor_over_the_same_data_folder_requests_nothing(tmp_path, monkeypatch):
    """Two daemons (two DAGSTER_HOMEs) over one data folder: each sensor requested a run for every change. The
    sensor of the instance that ticks there first keeps the folder; the other's tick requests nothing and says
    why, until the first one's process is gone or it has not ticked for SENSOR_LIVE_TICKS intervals."""
    import json
    import os
    import socket

    from pipeline.defs.automation import SENSOR_LIVE_TICKS

    monkeypatch.setenv("DOCSVAULT_SENSOR_INTERVAL", "60")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "n.md").write_text("# N\n")
    settings = _settings(tmp_path)
    sensor = upstream_change_sensor([Source(name="notes", kind="local", path=(notes,))], settings)
    record = settings.state_dir / ".sensor.json"
    home_a, home_b = (tmp_path / "home-a").resolve(), (tmp_path / "home-b").resolve()
    home_a.mkdir()
    home_b.mkdir()
    with dg.instance_for_test(temp_dir=str(home_a)) as a, dg.instance_for_test(temp_dir=str(home_b)) as b:
        first = sensor(dg.build_sensor_context(instance=a))
        assert [r.tags["docsvault/source"] for r in first.run_requests] == ["notes"]       # never built
        held = json.loads(record.read_text())
        assert (held["instance"], held["host"], held["pid"]) == (str(home_a), socket.gethostname(), os.getpid())

        second = sensor(dg.build_sensor_context(instance=b))
        assert not second.run_requests
        assert second.skip_reason is not None and second.skip_reason.skip_message == (
            f"data folder {settings.data_dir} is built by the upstream_change sensor of another Dagster instance "
            f"(DAGSTER_HOME {home_a}, pid {os.getpid()} on {socket.gethostname()}, last tick at {held['at_iso']}): "
            f"this sensor (DAGSTER_HOME {home_b}) requests nothing, so no change is built twice; stop one of the "
            "two daemons, or start this one with the other's DAGSTER_HOME or its own DOCSVAULT_DATA")
        assert json.loads(record.read_text()) == held                 # the other's record is left as it was

        again = sensor(dg.build_sensor_context(instance=a, cursor=first.cursor))     # the holder goes on ticking
        assert not again.run_requests
        assert again.skip_reason is not None
        assert again.skip_reason.skip_message == "no source moved (1 checked)"

        gone = subprocess.Popen(["true"])                # the holder's process is gone (same host): taken over
        gone.wait()
        record.write_text(json.dumps({**held, "pid": gone.pid}))
        taken = sensor(dg.build_sensor_context(instance=b))
        assert [r.tags["docsvault/source"] for r in taken.run_requests] == ["notes"]
        assert json.loads(record.read_text())["instance"] == str(home_b)

        # a holder that has not ticked for SENSOR_LIVE_TICKS intervals (its daemon stopped on another host)
        record.write_text(json.dumps({**held, "host": "elsewhere", "at": held["at"] - SENSOR_LIVE_TICKS * 60 - 1}))
        assert [r.tags["docsvault/source"] for r in sensor(dg.build_sensor_context(instance=b)).run_requests] \
            == ["notes"]
        record.write_text(json.dumps({**held, "host": "elsewhere"}))   # another host's live holder: not judged
        assert not sensor(dg.build_sensor_context(instance=b)).run_requests
        # a record copied along with the data folder (another folder's inode): not a holder of this one
        record.write_text(json.dumps({**held, "host": "elsewhere", "folder": held["folder"] + 1}))
        assert [r.tags["docsvault/source"] for r in sensor(dg.build_sensor_context(instance=b)).run_requests] \
            == ["notes"]
        assert json.loads(record.read_text())["instance"] == str(home_b)


def _notes_sensor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, Any]:
    monkeypatch.setenv("DOCSVAULT_SENSOR_INTERVAL", "60")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "n.md").write_text("# N\n")
    settings = _settings(tmp_path)
    return settings, upstream_change_sensor([Source(name="notes", kind="local", path=(notes,))], settings)


def test_the_sensor_claim_tells_instances_apart_by_their_run_storage_not_their_home_path(tmp_path, monkeypatch):
    """Two team deployments on two hosts over one shared data volume, each with its own Postgres but the same
    DAGSTER_HOME path (/opt/dagster/dagster_home in every container): the record named only the path, so each
    took the other's record for its own and both built every change. And one instance whose ticks run on two
    hosts with different DAGSTER_HOME paths (code servers in two pods) held the folder against itself. An
    instance is now its run storage's id (the same on every host of a Postgres instance, another for another
    instance even at the same path)."""
    import json
    import time

    settings, sensor = _notes_sensor(tmp_path, monkeypatch)
    record = settings.state_dir / ".sensor.json"
    home = (tmp_path / "home").resolve()
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        first = sensor(dg.build_sensor_context(instance=instance))
        assert [r.tags["docsvault/source"] for r in first.run_requests] == ["notes"]
        mine = json.loads(record.read_text())
        assert mine["storage"] == instance.run_storage.get_run_storage_id()
        # another instance, same DAGSTER_HOME path, on another host, ticking now: it holds the folder
        other = {**mine, "host": "elsewhere", "pid": 1, "storage": "another-instance", "at": time.time()}
        record.write_text(json.dumps(other))
        held = sensor(dg.build_sensor_context(instance=instance))
        assert held.run_requests == []
        assert held.skip_reason is not None
        assert held.skip_reason.skip_message == (
            f"data folder {settings.data_dir} is built by the upstream_change sensor of another Dagster instance "
            f"(DAGSTER_HOME {home}, pid 1 on elsewhere, last tick at {mine['at_iso']}): this sensor (DAGSTER_HOME "
            f"{home}) requests nothing, so no change is built twice; stop one of the two daemons, or point both at "
            "one run storage (the same dagster.yaml storage) or start this one with its own DOCSVAULT_DATA")
        assert json.loads(record.read_text()) == other
        # this very instance (its storage) ticking on another host with another DAGSTER_HOME path: not another one
        record.write_text(json.dumps({**other, "instance": "/srv/other/home", "storage": mine["storage"]}))
        again = sensor(dg.build_sensor_context(instance=instance))
        assert [r.tags["docsvault/source"] for r in again.run_requests] == ["notes"]
        assert json.loads(record.read_text())["host"] == mine["host"]


def test_a_sensor_record_from_a_clock_far_ahead_holds_the_folder_no_longer_than_a_live_one(tmp_path, monkeypatch):
    """A holder on another host whose clock is ahead (a VM's clock off by a day) wrote ``at`` in this host's
    future: its age here was negative, so once its daemon stopped, this one waited out the skew plus 3 intervals
    (a day; forever for ``at`` 1e308) and nothing was built, where the README promises a takeover after 3
    intervals. A record dated more than SENSOR_LIVE_TICKS intervals ahead holds nothing; a little ahead, it holds."""
    import json
    import time

    from pipeline.defs.automation import SENSOR_LIVE_TICKS

    settings, sensor = _notes_sensor(tmp_path, monkeypatch)
    record = settings.state_dir / ".sensor.json"
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        first = sensor(dg.build_sensor_context(instance=instance))
        mine = json.loads(record.read_text())
        other = {**mine, "instance": "/srv/other", "storage": "another-instance", "host": "elsewhere", "pid": 1}
        record.write_text(json.dumps({**other, "at": time.time() + 60}))          # a minute ahead: it holds
        assert sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor)).skip_reason.skip_message \
            .startswith(f"data folder {settings.data_dir} is built by the upstream_change sensor of another")
        for at in (time.time() + 86_400, 1e308):
            record.write_text(json.dumps({**other, "at": at}))
            taken = sensor(dg.build_sensor_context(instance=instance))
            assert [r.tags["docsvault/source"] for r in taken.run_requests] == ["notes"], at
            assert json.loads(record.read_text())["storage"] == mine["storage"]
        assert SENSOR_LIVE_TICKS * 60 < 86_400


def test_a_holder_in_another_pid_namespace_of_this_host_is_judged_by_time_not_by_its_pid(tmp_path, monkeypatch):
    """Two containers of one machine that share its host name (network_mode: host, hostNetwork, or the same
    ``hostname:``) but not its processes: the holder's pid was looked up among this container's processes, found
    gone, and the folder taken over on every tick, so both instances built every change. The pid is judged only
    in the holder's own pid namespace (``pidns`` in the record); elsewhere, by time as another host's."""
    import json
    import os
    import socket
    import time

    settings, sensor = _notes_sensor(tmp_path, monkeypatch)
    record = settings.state_dir / ".sensor.json"
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        first = sensor(dg.build_sensor_context(instance=instance))
        mine = json.loads(record.read_text())
        assert mine["pidns"] == os.readlink("/proc/self/ns/pid")
        gone = subprocess.Popen(["true"])
        gone.wait()
        other = {**mine, "instance": "/srv/other", "storage": "another-instance", "host": socket.gethostname(),
                 "pid": gone.pid, "at": time.time()}
        record.write_text(json.dumps({**other, "pidns": "pid:[1]"}))       # another container's process
        held = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
        assert held.run_requests == [] and held.skip_reason is not None
        assert held.skip_reason.skip_message.startswith(f"data folder {settings.data_dir} is built by the ")
        record.write_text(json.dumps(other))                                # this namespace's process, gone
        taken = sensor(dg.build_sensor_context(instance=instance))
        assert [r.tags["docsvault/source"] for r in taken.run_requests] == ["notes"]


def test_a_data_folder_the_daemon_cannot_write_fails_no_tick(tmp_path, monkeypatch, caplog):
    """A daemon that reads the data folder but may not write it (a read-only mount: the runs write it, the
    sensor only reads): before the sensor's record, its ticks wrote nothing there; the record's write raised
    OSError and every tick failed, so nothing was built. The tick goes on unrecorded (it cannot hold the folder)."""
    import errno

    from pipeline.common import artifacts

    settings, sensor = _notes_sensor(tmp_path, monkeypatch)
    settings.state_dir.mkdir(parents=True)

    def read_only(path: Path, data: bytes, **_: Any) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(artifacts, "write_atomic", read_only)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance, caplog.at_level("WARNING", "docsvault"):
        result = sensor(dg.build_sensor_context(instance=instance))
        assert [r.tags["docsvault/source"] for r in result.run_requests] == ["notes"]
    assert not (settings.state_dir / ".sensor.json").exists()
    assert [r.getMessage() for r in caplog.records if "sensor" in r.getMessage()] == [(
        f"cannot record the sensor's tick in {settings.state_dir / '.sensor.json'} (Read-only file system): a "
        "second daemon over this data folder is not held off")]


def test_a_holder_is_judged_live_by_its_own_tick_interval(tmp_path, monkeypatch):
    """The service's daemon ticks every 15 minutes (the default); a `docsvault ui` beside it with
    DOCSVAULT_SENSOR_INTERVAL=60 judged the service's record by its own 3 x 60 s, took the folder 3 minutes after
    the service's tick, and requested again the change whose run the service had just requested (and not yet
    fetched): one change built by both. The record carries its holder's live window (``live``); the longer of
    the two is the one a holder keeps the folder for (at most a day)."""
    import json
    import time

    settings, sensor = _notes_sensor(tmp_path, monkeypatch)                 # this sensor: every 60 s
    record = settings.state_dir / ".sensor.json"
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        first = sensor(dg.build_sensor_context(instance=instance))
        mine = json.loads(record.read_text())
        assert mine["live"] == 180
        service = {**mine, "instance": "/srv/dagster", "storage": "the-service", "host": "elsewhere", "pid": 1,
                   "live": 2700}
        record.write_text(json.dumps({**service, "at": time.time() - 400}))     # ticked 400 s ago
        held = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
        assert held.run_requests == [] and held.skip_reason is not None
        assert held.skip_reason.skip_message.startswith(f"data folder {settings.data_dir} is built by the ")
        record.write_text(json.dumps({**service, "at": time.time() - 2701}))    # missed its 3 ticks
        assert [r.tags["docsvault/source"] for r in sensor(dg.build_sensor_context(instance=instance)).run_requests] \
            == ["notes"]
        record.write_text(json.dumps({**service, "live": 1e300, "at": time.time() - 86_401}))   # at most a day
        assert [r.tags["docsvault/source"] for r in sensor(dg.build_sensor_context(instance=instance)).run_requests] \
            == ["notes"]


@pytest.mark.parametrize("text", ["null", "[]", "\"x\"", "3", "{\"instance\": \"/a\", \"at\": \"soon\", \"pid\": []"])
def test_a_corrupt_sensor_record_is_overwritten_not_a_failed_tick(tmp_path, monkeypatch, text):
    """A .sensor.json holding JSON that is no object (null, a list: a hand edit, another tool) made every tick
    fail with AttributeError ('list' object has no attribute 'get'), so nothing was built unattended."""
    import json

    settings, sensor = _notes_sensor(tmp_path, monkeypatch)
    record = settings.state_dir / ".sensor.json"
    record.parent.mkdir(parents=True)
    record.write_text(text)
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        result = sensor(dg.build_sensor_context(instance=instance))
        assert [r.tags["docsvault/source"] for r in result.run_requests] == ["notes"]
        assert json.loads(record.read_text())["instance"] == str((tmp_path / "home").resolve())


def test_two_sensors_claiming_at_the_same_moment_see_each_others_claim(tmp_path, monkeypatch):
    """Two daemons' ticks that read the record at the same moment both saw no holder and both claimed the folder
    for that tick (each then requested the change). The claim reads and writes under a lock of ``<data>/state``:
    a tick that comes while another claims waits, then sees that claim and holds off."""
    import fcntl
    import json
    import os
    import socket
    import threading
    import time

    from pipeline.common.artifacts import claim_sensor

    settings, _ = _notes_sensor(tmp_path, monkeypatch)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    got: list[object] = []
    fd = os.open(settings.state_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)                   # instance A is claiming (between its read and its write)
    try:
        b = threading.Thread(target=lambda: got.append(claim_sensor(settings, "/srv/b", 90.0, time.time())))
        b.start()
        b.join(timeout=1.0)                          # B must wait for A's claim, not read before it
        a = {"instance": "/srv/a", "storage": "", "host": socket.gethostname(), "pid": os.getpid(),
             "pidns": os.readlink("/proc/self/ns/pid"), "at": time.time(), "live": 90.0,
             "folder": settings.data_dir.stat().st_ino, "at_iso": "2026-12-06T00:00:00+00:00"}
        (settings.state_dir / ".sensor.json").write_text(json.dumps(a))
    finally:
        os.close(fd)
    b.join(timeout=30)
    assert got == [a]                                # B sees A's claim and holds off
    assert json.loads((settings.state_dir / ".sensor.json").read_text()) == a


def _code_versions() -> tuple[dict[str, str], str]:
    """Each asset's code version now (asset name -> version) and the sensor's token of them all."""
    from pipeline import stages as build
    from pipeline.defs.assets import CODE_OF
    from pipeline.stages.base import digest

    now = {stage: build.code_version(code) for stage, code in CODE_OF.items()}
    return now, digest(sorted(now.items()))[:16]


def test_stages_built_by_other_code_are_rebuilt_once_after_an_upgrade(two_sources, tmp_path):
    """After an upgrade (a `git pull`, the services restarted) every tick said "no source moved", and the data
    folder kept what the older code built until upstream moved (an operator, session 40). A source whose stages
    were last materialized with another code version is requested once per version of the code (its chain with
    the shared stages); when only a shared stage's code changed, the shared stages; nothing while a run is in
    progress, nor for materializations that record no code version."""
    from dagster._core.storage.dagster_run import DagsterRun

    _, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    now, token = _code_versions()
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        def materialize(*keys: list[str], code: str | None = None) -> None:
            for k in keys:
                tags = {"dagster/code_version": code or now[k[-1]]}
                instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=dg.AssetKey(k), tags=tags))

        def requested(cursor: str | None = None) -> list[tuple[str, str, set]]:
            result = sensor(dg.build_sensor_context(cursor=cursor, instance=instance))
            return [(r.run_key, r.tags["docsvault/trigger"], set(r.asset_selection)) for r in result.run_requests]

        materialize(*([s, stage] for s in ("repo_docs", "notes") for stage in PER_SOURCE_STAGES))
        materialize(*([s] for s in SHARED_STAGES))
        assert requested() == []
        materialize(["notes", "notes"], ["notes", "chunks"], code="0ld0ld0ld0ld0ld0")      # built by the old code
        assert requested() == [(f"notes:code:{token}", "code_changed", _expected_keys("notes"))]
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="busy", status=dg.DagsterRunStatus.STARTED))
        assert requested() == []                                    # a run in progress may rebuild them
        instance.report_run_failed(instance.get_run_by_id("busy"))
        materialize(["notes", "notes"], ["notes", "chunks"])
        materialize(["warehouse"], code="0ld0ld0ld0ld0ld0")
        assert requested() == [(f"code:{token}", "code_changed", {dg.AssetKey([s]) for s in SHARED_STAGES})]
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=dg.AssetKey(["warehouse"])))
        assert requested() == []                                    # no code version recorded: not judged


def test_an_upgrade_run_is_requested_once_not_on_every_tick_after_it(two_sources, tmp_path):
    """A review finding (session 40): the sensor kept no record of the upgrade run it requested. While the stages
    still carried the old code version (that run terminated, or failed before they materialized) every tick
    requested it again: Dagster skipped the repeated run key, but the tick said "requesting a run to rebuild" for
    ever, never "no source moved", and never reached the request that publishes a removal. The cursor now keeps the
    code version requested: the next tick requests nothing for it; another version of the code is requested."""
    import json

    _, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    now, token = _code_versions()
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        for k in ([s, stage] for s in ("repo_docs", "notes") for stage in PER_SOURCE_STAGES):
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=dg.AssetKey(k), tags={"dagster/code_version": now[k[-1]]}))
        for k in SHARED_STAGES:
            instance.report_runless_asset_event(dg.AssetMaterialization(
                asset_key=dg.AssetKey([k]), tags={"dagster/code_version": now[k]}))
        instance.report_runless_asset_event(dg.AssetMaterialization(
            asset_key=dg.AssetKey(["notes", "chunks"]), tags={"dagster/code_version": "0ld0ld0ld0ld0ld0"}))
        first = sensor(dg.build_sensor_context(instance=instance))
        assert [r.run_key for r in first.run_requests] == [f"notes:code:{token}"]
        again = sensor(dg.build_sensor_context(cursor=first.cursor, instance=instance))   # the run did not rebuild it
        assert again.run_requests == [] and again.skip_reason.skip_message == "no source moved (2 checked)"
        assert json.loads(again.cursor)[".code"] == token
        other = sensor(dg.build_sensor_context(cursor=json.dumps({".code": "0ld0ld0ld0ld0ld0"}), instance=instance))
        assert [r.run_key for r in other.run_requests] == [f"notes:code:{token}"]


def test_a_folder_that_cannot_be_locked_still_records_the_claim(tmp_path, monkeypatch):
    """A file system without ``flock`` (ENOLCK on some network mounts) failed every tick of the sensor once its
    claim took a lock; the claim now goes on unlocked there, as it did before the lock."""
    import errno
    import fcntl
    import json
    import time

    from pipeline.common.artifacts import claim_sensor

    settings, _ = _notes_sensor(tmp_path, monkeypatch)

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert claim_sensor(settings, "/srv/a", 90.0, time.time()) is None
    assert json.loads((settings.state_dir / ".sensor.json").read_text())["instance"] == "/srv/a"


def test_a_version_pushed_while_a_run_for_it_waits_to_fetch_requests_no_second_run(two_sources, tmp_path):
    """A team pushes to a docs repo every few minutes while a long build holds the source's pool. Each tick
    requested a run per new commit, and the runs piled up behind the pool, each fetching the same newest version
    when its turn came (noted in session 47). A run queued for the source, or running but not yet fetching it,
    fetches whatever is upstream when its fetch begins: the tick requests nothing for that source and says why.
    Once that run's fetch has started, a newer version is requested again."""
    import time

    from dagster._core.events import DagsterEvent, DagsterEventType
    from dagster._core.events.log import EventLogEntry
    from dagster._core.storage.dagster_run import DagsterRun

    work, sources, settings, _ = two_sources
    sensor = upstream_change_sensor(sources, settings)
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        materialize, evaluate = _runless(instance, sensor)
        materialize(*([s, stage] for s in ("repo_docs", "notes") for stage in PER_SOURCE_STAGES),
                    *([s] for s in SHARED_STAGES))
        quiet = evaluate()
        assert quiet.run_requests == []
        first = _commit(work, {"docs/b.md": "# B\n"}, "b")
        work.remote("origin").push("main")
        requested = evaluate(quiet.cursor)
        assert [r.run_key.split("@")[0] for r in requested.run_requests] == [f"repo_docs:{first}"]
        instance.add_run(DagsterRun(job_name="__ASSET_JOB", run_id="queued-run",
                                    status=dg.DagsterRunStatus.NOT_STARTED,
                                    asset_selection=frozenset(requested.run_requests[0].asset_selection),
                                    tags=requested.run_requests[0].tags))
        second = _commit(work, {"docs/c.md": "# C\n"}, "c")
        work.remote("origin").push("main")
        waited = evaluate(requested.cursor)
        assert waited.run_requests == []
        assert waited.skip_reason.skip_message == ("no new run (2 checked; moved, each with a run queued that has not fetched yet "
                                                   "and will fetch the new version: repo-docs (run queued-run))")
        assert waited.cursor == requested.cursor
        instance.run_storage.handle_run_event("queued-run", DagsterEvent(DagsterEventType.RUN_START.value,
                                                                         "__ASSET_JOB"))
        assert instance.get_run_by_id("queued-run").status == dg.DagsterRunStatus.STARTED
        assert evaluate(waited.cursor).run_requests == []            # started, waiting for the pool: not fetching
        instance.store_event(EventLogEntry(
            error_info=None, level="debug", user_message="", run_id="queued-run", timestamp=time.time(),
            step_key="repo_docs__raw_docs",
            dagster_event=DagsterEvent(DagsterEventType.STEP_START.value, "__ASSET_JOB",
                                       step_key="repo_docs__raw_docs")))
        # its fetch began (here it fetched nothing, so the pushed version is still new): requested again
        again = evaluate(waited.cursor)
        assert [r.run_key.split("@")[0] for r in again.run_requests] == [f"repo_docs:{second}"]
