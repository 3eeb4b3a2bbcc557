"""Assets: per source a chain ``<source>/raw_docs -> notes -> vault -> chunks -> embeddings`` (one group per source,
so the lineage shows one labelled box per source and collapses to one node each), then the shared stages
``link_graph -> warehouse -> retrieval_eval`` over every source's last good copy.

Every stage is written once (a factory per stage below) and instantiated per source of sources.yaml; asset bodies
call the stage functions of :mod:`pipeline.stages`.

A source that fails (a :class:`~pipeline.common.errors.PipelineError`: unreachable, nothing parsable...) does not raise:
its asset records what it serves now (its last good copy, ``status: failed`` and the error) with an unchanged
data version, and its blocking ``ran_without_error`` check fails (the error line its description and its ``error``
metadata), so the step is red and the run fails; the source's later stages keep their last good output and record
the error line too (``cause_error``). The project's executor (:mod:`pipeline.defs.executor`) lets downstream steps
run on that output, so the shared stages still build. Any other exception (a bug) fails the step without an output and stops what depends on it.

Versions: ``code_version`` is the hash of the code that shapes a stage's output (:func:`pipeline.stages.code_version`),
``data_version`` the stage's content key (fetch revision, notes/chunks file hash, vault listing, embed key,
warehouse input key, eval key), so the UI's staleness markers follow real changes. A stage that found nothing to do
records ``skipped: true`` and what it did now (0 embedded...), never the figures of an earlier run.

Concurrency: per-source steps take the build lock shared and a per-source lock, and sit in the Dagster pool
``docsvault_source_<source>`` (one step per source at a time); the shared stages sit in the pool
``docsvault_warehouse`` (one writer) and take the build lock exclusively (``dagster.yaml``: ``concurrency``).
"""


import contextlib
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from pipeline import stages as build
from pipeline.common import artifacts
from pipeline.common.errors import PipelineError, storage_error_line
from pipeline.common.lock import BuildLock
from pipeline.config import Settings
from pipeline.defs.resources import (
    DocsvaultResource,
    apply_run_force,
    cached_embedder,
    record_loaded_sources,
    sources_digest,
)
from pipeline.ingest.sources import asset_slug
from pipeline.models import Source, plain
from pipeline.service import missing_vectors_line
from pipeline.stages.results import EvalStageResult, StageResult

PER_SOURCE_STAGES = ("raw_docs", "notes", "vault", "chunks", "embeddings")
SHARED_STAGES = ("link_graph", "warehouse", "retrieval_eval")
WAREHOUSE_POOL = "docsvault_warehouse"
RAN_WITHOUT_ERROR = "ran_without_error"            # the blocking check every per-source asset evaluates on its own run
#: the quality gates of retrieval_eval (``eval_floors``, ``hybrid_beats_single_lanes``) are non-blocking and report
#: severity WARN (a warning in the UI, a `warning:` line of `docsvault build`); every other check is ERROR (a failure
#: means broken or missing data). AssetCheckSpec has no severity (Dagster 1.13): the spec's description says it.
_WARN_NOTE = " Severity WARN: a quality gate that does not block (`docsvault build` prints it as a `warning:` line)."
FAILED_STAGES = "failed_stages"    # <data>/state/<source>.json: stage -> error of its last run (while it fails)

#: stage -> the code whose hash is its code_version (:func:`pipeline.stages.code_version`)
CODE_OF = {"raw_docs": "fetch", "notes": "normalize", "vault": "vault", "chunks": "chunk", "embeddings": "embed",
           "link_graph": "graph", "warehouse": "warehouse", "retrieval_eval": "eval"}


def source_slug(name: str) -> str:
    """Source name -> asset-key part and group name (Dagster allows [A-Za-z0-9_])."""
    return asset_slug(name)


def key(stage: str, source: Source | str | None = None) -> dg.AssetKey:
    """``<source>/<stage>`` for a per-source stage (the node label is the stage, the group the source), else
    ``<stage>``."""
    if source is None:
        return dg.AssetKey([stage])
    name = source if isinstance(source, str) else source.name
    return dg.AssetKey([source_slug(name), stage])


def source_pool(source: Source | str) -> str:
    return f"docsvault_source_{source_slug(source if isinstance(source, str) else source.name)}"


def source_lock(data_dir: Path, source: str) -> BuildLock:
    """The lock a per-source step holds, ``<data>/locks/<source>.lock`` (a ``BuildLock``, not yet taken), waiting
    up to ``DOCSVAULT_LOCK_WAIT`` seconds. Its timeout error names that variable: it advised "pass a larger --wait
    SECONDS", an option no Dagster step (a Celery worker's, say) has."""
    return BuildLock(Path(data_dir) / "locks" / f"{source}.lock", wait=build.STAGE_LOCK_WAIT,
                     wait_arg="DOCSVAULT_LOCK_WAIT (seconds)")


#: ``<data>/locks/<WAREHOUSE_LOCK>.lock``: the distributed warehouse step's lock (a source name cannot start with a dot)
WAREHOUSE_LOCK = ".warehouse"


@contextlib.contextmanager
def publish_lock(settings: Settings, say: Callable[[str], None]) -> Iterator[None]:
    """The warehouse step's hold on the data dir's warehouse. In process (the stage takes ``build.lock``) nothing
    more; in the distributed deployment (``DOCSVAULT_STAGE_LOCK=off``) ``<data>/locks/.warehouse.lock`` on the
    shared volume (a ``flock`` its holder's kernel or NFS server releases when it dies), under which no other
    process can be writing a ``warehouse.duckdb.tmp-*``: those there were left by killed writers on any host and
    are removed (``say`` reports how many). Before, a publish removed only the temps of pids gone on its own host,
    so one left by a worker killed on another host stayed on the volume for good. Two warehouse steps that
    overlap (a dead run's step still running on a worker) now publish one after the other."""
    from pipeline.config import stage_lock_on

    if stage_lock_on():
        yield
        return
    with source_lock(settings.data_dir, WAREHOUSE_LOCK):
        removed = build.remove_warehouse_temps(settings)
        if removed:
            say(f"removed {len(removed)} temp file(s) of the warehouse left by a killed writer: "
                f"{', '.join(Path(p).name for p in removed)}")
        yield


def embedding_kind(spec: str) -> str:
    """The compute kind of a model spec as :func:`pipeline.index.embed.load_embedder` runs it for documents (its
    registry record's ``kind``); ``"pytorch"`` for a spec load_embedder rejects (empty, malformed ``hash:<dim>``)."""
    from pipeline.index import embed

    try:
        return embed.model_record(spec).kind
    except embed.EmbeddingError:
        return "pytorch"


def embedding_kinds(settings: Settings, source: Source) -> set[str]:
    """The compute kinds (:func:`embedding_kind`) of every model ``source``'s embeddings can use (at most 3, as
    Dagster allows)."""
    return set(sorted({embedding_kind(s) for s in settings.embedding_specs(source)})[:3])


def embeddings_description(settings: Settings, source: Source) -> str:
    """The embeddings asset's description, naming every model its chunks can be embedded with: one model when the
    source fixes it (``embedding:``, or ``language:``), else the English model and the multilingual one with the
    languages that choose it (each note's language is detected at build time, so which notes take which model is
    known only after a run: the materialization's ``models`` metadata counts the chunks per model)."""
    from pipeline.common.embedding_models import MULTILINGUAL_LANGUAGES

    models = settings.models_of(source)
    if len(models) == 1:
        how = f"with `{models[0]}`"
        if source.embedding:
            how += " (its `embedding:` in sources.yaml)"
        elif source.language:
            how += f" (its `language: {source.language}`)"
    else:
        langs = "/".join(sorted(MULTILINGUAL_LANGUAGES))
        how = (f"with `{settings.model_for(source, 'en')}`, or `{settings.model_for(source, 'ja')}` for notes "
               f"detected as {langs} (each note's language is detected when it is chunked; the `models` metadata "
               "of a materialization counts the chunks per model)")
    cross = settings.crosslingual
    depth = (f" (of an English note its first {settings.crosslingual_depth})" if settings.crosslingual_depth
             else "")
    also = (f"; every chunk{depth} also with `{cross}` for the cross-lingual lane" if cross and cross not in models
            else "")
    return (f"Chunk embeddings of `{source.name}` {how}{also} (cached by model id + chunk text hash: only new texts "
            "are embedded).")


# ---------------------------------------------------------------- metadata helpers
def _clean(meta: dict[str, Any]) -> dict[str, Any]:
    """Metadata Dagster can show: scalars as they are, lists and dicts as JSON; empty strings (nothing to say,
    e.g. ``model_changed`` when the model did not change) and other types are left out."""
    clean: dict[str, Any] = {}
    for k, v in meta.items():
        if isinstance(v, str) and not v:
            continue
        if isinstance(v, (bool, int, float, str, dg.MetadataValue)):
            clean[k] = v
        elif isinstance(v, (list, dict)):
            clean[k] = dg.MetadataValue.json(v)
    return clean


def _metadata(result: StageResult) -> dict[str, Any]:
    """A stage's result as Dagster metadata (before :func:`_clean`): :meth:`StageResult.as_dict`, its path fields
    (``PATHS``) shown as paths."""
    return {k: dg.MetadataValue.path(v) if k in result.PATHS else v for k, v in result.as_dict().items()}


def _version(value: Any) -> dg.DataVersion | None:
    return dg.DataVersion(str(value)[:64]) if value else None


#: stage -> its content key in ``<data>/state/<source>.json`` (what the next stage reads changed iff it changed)
_STATE_VERSION = {"raw_docs": "revision", "notes": "notes_sha", "vault": "vault_listing", "chunks": "chunks_sha",
                  "embeddings": "embed_key"}
#: what each per-source stage reads; missing -> the stage has nothing to work on (its upstream never succeeded)
_INPUT = {
    "vault": lambda s, n: artifacts.notes_path(s, n),
    "chunks": lambda s, n: s.vault_dir / n,
    "embeddings": lambda s, n: artifacts.chunks_path(s, n),
}
_UPSTREAM = {"vault": "notes", "chunks": "vault", "embeddings": "chunks"}


def _honest(stage: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Drop rate figures of a run that did no such work (a rate of 0 would plot as a drop)."""
    out = dict(meta)
    if stage == "embeddings" and not out.get("embedded"):
        out.pop("chunks_per_s", None)
    return out


PROGRESS_LOG_SECONDS = 10.0


def _with_progress_log(context: dg.AssetExecutionContext, source: str | None, work: Any) -> Any:
    """Run ``work()`` with the stage's progress (``build.PROGRESS_HOOKS``: fetch, normalize, chunk, warehouse) in the
    run's log: a line once the step has run ``PROGRESS_LOG_SECONDS``, then at most one every ``PROGRESS_LOG_SECONDS``,
    and one when a counted step that logged progress ends (a shorter step logs only its summary: each line is an
    event in the run's storage, ~10 ms, and a rebuild after a few edits wrote 80 of them); the embedding asset logs
    its own (with its rate). ``source`` None: every source's lines (the shared stages)."""
    last = [time.monotonic()]
    logged = [False]

    def hook(stage: str, name: str, done: int, total: int) -> None:
        if stage == "embed" or (source is not None and name != source):
            return
        now = time.monotonic()
        if now - last[0] >= PROGRESS_LOG_SECONDS or (logged[0] and total and done >= total):
            last[0], logged[0] = now, True
            context.log.info(f"{name}: {stage} {done}/{total}" if total else f"{name}: {stage} running")

    build.PROGRESS_HOOKS.append(hook)
    try:
        return work()
    finally:
        build.PROGRESS_HOOKS.remove(hook)


class StepStorageError(PipelineError):
    """A step could not write its files: the disk is full or read-only where it writes (the message says which)."""


def _run_settings(context: dg.AssetExecutionContext, docsvault: DocsvaultResource,
                  loaded_sources: Path) -> Settings:
    """The run's settings (the resource's config), once its ``sources_file`` is the file the code location
    loaded (``loaded_sources``) and its data and vault folders are those the run builds (a distributed run's
    tags: a Celery worker started with another ``DOCSVAULT_DATA``): the step fails with a one-line error
    otherwise, before anything is read or written (:meth:`DocsvaultResource.check_paths`: no empty path,
    :meth:`DocsvaultResource.check_models`, :meth:`DocsvaultResource.check_sources_file`,
    :meth:`DocsvaultResource.check_run_folders`). Every docsvault asset step starts here."""
    docsvault.check_paths()
    docsvault.check_models()
    docsvault.check_sources_file(loaded_sources)
    try:
        run = context.run
    except dg.DagsterError:        # invoked directly (a test, a script; DagsterInvalidPropertyError): no run
        run = None
    if run is not None:
        docsvault.check_run_folders(run.run_id, run.tags)
        docsvault.check_run_models(run.run_id, run.tags)
        docsvault.check_run_code(run.run_id, run.tags)
        docsvault.check_run_sources(run.run_id, run.tags)
        apply_run_force(run.tags)           # a worker's step forced as its run process was (DOCSVAULT_FORCE)
    docsvault.apply_evals_dir()             # the run's evals_dir, also where DOCSVAULT_EVALS is set
    return docsvault.settings()


def _run_source_stage(context: dg.AssetExecutionContext, docsvault: DocsvaultResource, stage: str, source: Source,
                      run: Callable[[Settings], StageResult], loaded_sources: Path,
                      extra_checks: Callable[[Settings, StageResult | None], list[dg.AssetCheckResult]] | None = None,
                      ) -> dg.MaterializeResult:
    """Run one per-source stage (:func:`_source_stage`). A full or read-only disk where the step writes (the shared
    volume mounted read-only on this worker, say) fails the step with one line naming the file, what happened, what
    to do and this host (:class:`StepStorageError`); before, the stage's failure could not be recorded either and the
    step raised the bare ``OSError: [Errno 30] Read-only file system: '…/state/.<source>.json.….tmp'``."""
    try:
        return _source_stage(context, docsvault, stage, source, run, loaded_sources, extra_checks)
    except OSError as exc:
        line = storage_error_line(exc, data_dir=Path(docsvault.data_dir).expanduser())
        if line is None:
            raise
        raise StepStorageError(f"source '{source.name}': {stage} on host {socket.gethostname()}: {line}") from exc


def _source_stage(context: dg.AssetExecutionContext, docsvault: DocsvaultResource, stage: str, source: Source,
                      run: Callable[[Settings], StageResult], loaded_sources: Path,
                      extra_checks: Callable[[Settings, StageResult | None], list[dg.AssetCheckResult]] | None = None,
                      ) -> dg.MaterializeResult:
    """Run one per-source stage function; a PipelineError is recorded (see module doc), anything else raises.
    ``extra_checks`` get the stage's result (None when it did not run). ``loaded_sources``: the sources file the
    code location loaded (:func:`_run_settings`)."""
    settings = _run_settings(context, docsvault, loaded_sources)
    started = time.perf_counter()
    error, held = "", False      # held: an upstream stage failed; this stage's last output and failure record stay
    meta: dict[str, Any] = {}
    result: StageResult | None = None
    token = build.PER_SOURCE_LOCK_SHARED.set(True)
    try:
        with source_lock(settings.data_dir, source.name):
            failed = dict(artifacts.load_state(settings, source.name).get(FAILED_STAGES) or {})
            upstream = [s for s in PER_SOURCE_STAGES[:PER_SOURCE_STAGES.index(stage)] if s in failed]
            upstream_input, held = _INPUT.get(stage), bool(upstream)
            # the failed stage's error line (<data>/state/<source>.json), shown here too: the UI's asset page
            cause_error = str(failed[upstream[0]]) if upstream else ""
            if upstream and not artifacts.load_state(settings, source.name).get(_STATE_VERSION[stage]):
                # never built: nothing to keep or serve; the `ran_without_error` check fails below
                meta = {"skipped": True, "kept": "nothing (never built)",
                        "cause": f"{key(upstream[0], source).to_user_string()} failed", "cause_error": cause_error}
            elif upstream:
                # keep this stage's last good output: never rebuild it from a failed upstream (a vanished local
                # folder must not empty the vault)
                meta = {"skipped": True, "kept": f"last good copy: {key(upstream[0], source).to_user_string()} "
                                                  "failed", "cause_error": cause_error}
            elif upstream_input is not None and not upstream_input(settings, source.name).exists():
                raise PipelineError(
                    f"source '{source.name}': {stage} has nothing to work on yet: "
                    f"{key(_UPSTREAM[stage], source).to_user_string()} has never succeeded")
            else:
                result = _with_progress_log(context, source.name, lambda: run(settings))
                meta = _metadata(result)
    except PipelineError as exc:
        error = str(exc)
        context.log.error(f"{source.name}: {stage} failed: {error}")
    finally:
        build.PER_SOURCE_LOCK_SHARED.reset(token)
    if not held:
        _record_outcome(settings, source, stage, error)
    state = artifacts.load_state(settings, source.name)
    version = state.get(_STATE_VERSION[stage])
    checks = [] if extra_checks is None else extra_checks(settings, result)    # every declared check reports
    if error:
        meta = {"status": "failed", "error": error,
                "serving": "last good copy" if version else "nothing (never built)",
                "seconds": round(time.perf_counter() - started, 3)}
    else:
        meta = {"status": "skipped" if meta.get("skipped") else "ok", **_honest(stage, meta)}
    checks.append(_ran_without_error_result(error, meta))
    return dg.MaterializeResult(metadata=_clean(meta), data_version=_version(version), check_results=checks)


def _record_outcome(settings: Settings, source: Source, stage: str, error: str) -> None:
    """Record in the source's state whether ``stage`` failed (``error``, "" when it ran): its entry in
    ``failed_stages``, and `status`'s ``last_error`` in every path (a Dagster run too, not only `docsvault build`'s
    report): set by a failure, cleared once no stage of the source is failed."""
    failed = dict(artifacts.load_state(settings, source.name).get(FAILED_STAGES) or {})
    if error:
        failed[stage] = error
    else:
        failed.pop(stage, None)
    updates: dict[str, Any] = {FAILED_STAGES: failed}
    if error:
        updates["last_error"] = {"stage": stage, "error": error, "at": build.now()}
    elif not failed:
        updates["last_error"] = None
    artifacts.update_state(settings, source.name, **updates)


def _ran_without_error_result(error: str, meta: dict[str, Any]) -> dg.AssetCheckResult:
    """The ``ran_without_error`` evaluation of a stage's run (``meta``: its materialization's metadata). The cause
    is also the description: the UI shows it on the check's evaluation, beside the failed run."""
    never_built = meta.get("kept") == "nothing (never built)"
    return dg.AssetCheckResult(
        check_name=RAN_WITHOUT_ERROR, passed=not error and not never_built,
        metadata={"error": error, "serving": meta["serving"]} if error else {"status": meta["status"], **(
            {"kept": meta["kept"], "cause": meta["cause"], "cause_error": meta["cause_error"]} if never_built
            else {})},
        description=(f"{error} (serving: {meta['serving']})" if error else
                     f"{meta['cause']}: nothing to serve (never built)" if never_built else None))


#: the WARN check of every ``<source>/notes``: the files its last normalize skipped (:func:`all_files_read_result`)
ALL_FILES_READ = "all_files_read"


def all_files_read_result(settings: Settings, source: Source) -> dg.AssetCheckResult:
    """The ``all_files_read`` evaluation of ``source``'s notes: the files its last normalize skipped, as the source's
    state records them (this run's normalize, or the last one when this run's did not run: the notes served are
    that one's). Severity WARN: the source built; the files left out are the user's to fix. Before, only
    `docsvault build` and `status` said so: a Dagster run was green, with a warning line in its log."""
    from pipeline.ingest.normalize import errors_file

    state = artifacts.load_state(settings, source.name)
    n = int(state.get("normalize_errors") or 0)
    lines = [str(line) for line in state.get("normalize_error_lines") or []]
    where = str(errors_file(settings, source.name))
    if not n:
        return dg.AssetCheckResult(check_name=ALL_FILES_READ, passed=True, metadata={"skipped_files": 0},
                                   severity=dg.AssetCheckSeverity.WARN)
    more = f" and {n - 1} more" if n > 1 else ""
    return dg.AssetCheckResult(
        check_name=ALL_FILES_READ, passed=False, severity=dg.AssetCheckSeverity.WARN,
        metadata={"skipped_files": n, "first_skipped": dg.MetadataValue.json(lines[:10]),
                  "errors_file": dg.MetadataValue.path(where)},
        description=f"{n} file(s) skipped, not in the vault or search (or serving their last good version): "
                    f"{lines[0] if lines else '?'}{more}; each with its reason in {where}")


# ---------------------------------------------------------------- per source
def _ran_without_error_spec(asset_key: dg.AssetKey) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(RAN_WITHOUT_ERROR, asset=asset_key, blocking=True,
                             description="This stage ran for this source without error (a failed fetch, or no file "
                                         "that could be read, fails it; the last good copy keeps serving; a stage "
                                         "never built serves nothing and fails it too).")


def source_assets(source: Source, settings: Settings) -> list[dg.AssetsDefinition]:
    """The chain of one source of sources.yaml: five assets in the group ``<source>``.

    Long: defines the five Dagster assets (and checks) of one source as closures over it; its length is the asset
    definitions.
    """
    tags = {"docsvault/source": source.name}
    group = source_slug(source.name)
    loaded = settings.sources_file
    pool = source_pool(source)

    def spec(stage: str) -> dict[str, Any]:
        return {"key": key(stage, source), "group_name": group, "tags": tags, "pool": pool,
                "code_version": build.code_version(CODE_OF[stage])}

    raw_key = key("raw_docs", source)

    @dg.asset(**spec("raw_docs"), kinds={source.kind if source.kind != "local" else "python"},
              description=f"Fetched files of source `{source.name}` ({source.kind}).",
              check_specs=[_ran_without_error_spec(raw_key), dg.AssetCheckSpec(
                  "has_files", asset=raw_key, blocking=True,
                  description="The fetch produced at least one file (a fetched local folder may be empty; a "
                              "source whose fetch never succeeded fails it).")])
    def raw_docs(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        def run(s: Settings) -> StageResult:
            fetched = build.fetch_stage(s, source)
            context.log.info(f"{source.name}: {fetched.files} files via {fetched.strategy} "
                             f"(changed={fetched.changed})")
            for line in fetched.warning_lines:
                context.log.warning(line)
            return fetched

        def checks(s: Settings, fetched: Any) -> list[dg.AssetCheckResult]:
            if fetched is not None:
                n = int(fetched.files)
                return [dg.AssetCheckResult(check_name="has_files", passed=n > 0 or source.kind == "local",
                                            metadata={"files": n, "counted": "this run's fetch"})]
            # the fetch failed (or did not run): what is served is the last good copy; say so, do not pass it off
            # as this run's
            n = int(artifacts.load_state(s, source.name).get("files", 0))
            last = (f"the last good copy ({n} file{'' if n == 1 else 's'})" if n
                    else "nothing (no fetch has succeeded)")
            return [dg.AssetCheckResult(check_name="has_files", passed=n > 0,      # an empty folder fetched
                                        metadata={"files": n, "counted": "last good copy: this run's fetch failed"},
                                        description=f"this run's fetch failed (see ran_without_error); serving "
                                                    f"{last}")]

        return _run_source_stage(context, docsvault, "raw_docs", source, run, loaded, checks)

    notes_key = key("notes", source)

    @dg.asset(**spec("notes"), deps=[raw_docs], kinds={"markdown"},
              check_specs=[_ran_without_error_spec(notes_key), dg.AssetCheckSpec(
                  ALL_FILES_READ, asset=notes_key,
                  description="Every fetched file of the source became a note: a file the last normalize skipped "
                              "(invalid frontmatter, not UTF-8, empty...) fails it, naming the file and its reason; "
                              "such a file is not in the vault or search (or keeps its last good version)."
                              " Severity WARN: does not block (`docsvault build` lists the skipped files, "
                              "`docsvault status` counts them).")],
              description=f"Normalized Markdown notes of `{source.name}` with merged frontmatter.")
    def notes(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        def run(s: Settings) -> StageResult:
            normalized = build.normalize_stage(s, source)
            for line in normalized.error_lines:
                context.log.warning(line)
            if normalized.kept_last_good:
                context.log.warning(build.kept_line(source.name, normalized.kept_last_good))
            return normalized

        def checks(s: Settings, _: Any) -> list[dg.AssetCheckResult]:
            return [all_files_read_result(s, source)]

        return _run_source_stage(context, docsvault, "notes", source, run, loaded, checks)

    vault_key = key("vault", source)

    @dg.asset(**spec("vault"), deps=[notes], kinds={"obsidian"},
              check_specs=[_ran_without_error_spec(vault_key), dg.AssetCheckSpec(
                  "frontmatter_valid", asset=vault_key, blocking=True,
                  description="Every note's frontmatter parses and has `source_path`.")],
              description=f"Obsidian notes of `{source.name}` under `vault/{source.name}/` (written only when "
                          "changed).")
    def vault(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        def checks(s: Settings, _: Any) -> list[dg.AssetCheckResult]:
            res = build.frontmatter_check(s, source)
            return [dg.AssetCheckResult(check_name="frontmatter_valid", passed=not res.invalid, metadata={
                "notes": res.notes, "invalid": res.invalid, "first_invalid": list(res.first_invalid)})]

        def run(s: Settings) -> StageResult:
            written = build.vault_stage(s, source)
            for line in written.warning_lines or ():     # missing attachments, ambiguous links, '#' names
                context.log.warning(line)
            # the user's edits moved aside and the notes removed: `docsvault build` prints them, the run's log too
            for record in written.conflicts:
                context.log.warning(f"source '{source.name}': {build.conflict_line(source.name, record)}")
            if written.removed_files:
                more = written.removed - len(written.removed_files)
                context.log.info(f"source '{source.name}': removed from vault/{source.name}/ (their pages left the "
                                 f"source): {', '.join(written.removed_files)}" + (f" and {more} more" if more else ""))
            if written.left_edited:
                context.log.warning(f"source '{source.name}': kept in vault/{source.name}/ as your files (their pages "
                                    f"left the source, but you edited them since the build wrote them): "
                                    f"{', '.join(written.left_edited)}")
            return written

        return _run_source_stage(context, docsvault, "vault", source, run, loaded, checks)

    chunks_key = key("chunks", source)

    @dg.asset(**spec("chunks"), deps=[vault], kinds={"python"}, check_specs=[_ran_without_error_spec(chunks_key)],
              description=f"Heading chunks of `{source.name}` with breadcrumbs, within the model's token window.")
    def chunks(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        def run(s: Settings) -> StageResult:
            chunked = build.chunk_stage(s, source, cached_embedder)
            if chunked.language_warning:
                context.log.warning(chunked.language_warning)
            for line in chunked.warning_lines:
                context.log.warning(line)
            return chunked

        return _run_source_stage(context, docsvault, "chunks", source, run, loaded)

    emb_key = key("embeddings", source)

    @dg.asset(**spec("embeddings"), deps=[chunks], kinds=embedding_kinds(settings, source),
              check_specs=[_ran_without_error_spec(emb_key)],
              description=embeddings_description(settings, source))
    def embeddings(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        last = [0.0]
        started = time.perf_counter()

        def progress(done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] >= 10 or done == total:
                last[0] = now
                rate = done / max(now - started, 1e-9)
                context.log.info(f"{source.name}: embedded {done}/{total} vectors ({rate:.1f}/s)")

        def run(s: Settings) -> StageResult:
            embedded = build.embed_stage(s, source, cached_embedder, progress=progress)
            # vectors, not chunks: a chunk has one per model that embeds it (its language's and the cross-lingual)
            context.log.info(f"{source.name}: {embedded.embedded} vectors computed, {embedded.cached} from cache "
                             f"({embedded.chunks} chunks)")
            return embedded

        return _run_source_stage(context, docsvault, "embeddings", source, run, loaded)

    return [raw_docs, notes, vault, chunks, embeddings]


# ---------------------------------------------------------------- shared stages
def _warehouse_tables(settings: Settings) -> dict[str, Any]:
    """``dagster/row_count`` (chunks), ``dagster/column_schema`` (the chunks table) and the row count of every
    table, read from the published file now (empty when there is none)."""
    from pipeline.warehouse import connect, stats

    path = settings.warehouse_path
    if not path.exists():
        return {}
    con = connect(path, read_only=True)
    try:
        counts = stats(con)
        rel = con.table("chunks")
        schema = dg.TableSchema(columns=[dg.TableColumn(name, str(dtype)) for name, dtype in zip(rel.columns, rel.types)])
        tables = {"notes": counts["notes"], "chunks": counts["chunks"], "links": counts["links"]}
        for m in counts["models"]:
            tables[m["table_name"]] = int(con.table(m["table_name"]).aggregate("count(*)").fetchone()[0])
    finally:
        con.close()
    return {
        "dagster/row_count": dg.MetadataValue.int(int(counts["chunks"])),
        "dagster/column_schema": dg.MetadataValue.table_schema(schema),
        "dagster/table_name": "chunks",
        "table_rows": dg.MetadataValue.json(tables),
        "per_source": dg.MetadataValue.json(counts["sources"]),
    }


#: warehouse metadata that describes the published file (true after a no-op too); everything else is the work
#: of the run that published it and is recorded only by that run
_WAREHOUSE_STATE_KEYS = ("sources", "models", "notes", "chunks", "vectors", "links", "path", "size_mb",
                         "missing_vectors_in")


def shared_assets(sources: Sequence[Source], loaded_sources: Path) -> list[Any]:
    """Stages over all sources: link graph, warehouse (with its serving checks), eval (with its floors).
    ``loaded_sources``: the sources file ``sources`` were read from (:func:`_run_settings`).

    Long: defines the three shared Dagster assets and their checks as closures; its length is the asset definitions.
    """
    vault_keys = [key("vault", s) for s in sources]
    embedding_keys = [key("embeddings", s) for s in sources]

    @dg.asset(key=key("link_graph"), deps=vault_keys, group_name="warehouse", kinds={"networkx"},
              pool=WAREHOUSE_POOL, code_version=build.code_version("graph"),
              description="Wikilink graph of the vault (Obsidian resolution), exported as GraphML and JSON. "
                          "`edges`: pairs of linked notes; `links_resolved` / `links_dangling`: links as written, "
                          "each time (a note linking a missing note twice counts 2; `docsvault status` and "
                          "`docsvault check-vault` count each note's dangling target once).")
    def link_graph(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        settings = _run_settings(context, docsvault, loaded_sources)
        graph = build.graph_stage(settings, sources)
        shared = artifacts.load_state(settings, build.SHARED_STATE).get("graph") or {}
        return dg.MaterializeResult(metadata=_clean(_metadata(graph)), data_version=_version(shared.get("key")))

    wh_key = key("warehouse")

    @dg.asset(key=wh_key, deps=[link_graph, *embedding_keys], group_name="warehouse", kinds={"duckdb"},
              pool=WAREHOUSE_POOL, code_version=build.code_version("warehouse"),
              check_specs=[
                  dg.AssetCheckSpec("hnsw_index_used", asset=wh_key, blocking=True,
                                    description="The vector lane's plan uses the HNSW index (vacuous when no "
                                                "source has a chunk)."),
                  dg.AssetCheckSpec("serves_queries", asset=wh_key,
                                    description="The published file opens as search opens it and answers a sample "
                                                "hybrid query."),
                  dg.AssetCheckSpec(ALL_CHUNKS_EMBEDDED, asset=wh_key,
                                    description="Every chunk of the published file has its vectors: the chunks of a "
                                                "source whose embeddings step did not finish (a terminated or failed "
                                                "run, a run of its chunks without its embeddings) are found by "
                                                "keyword search only, until its embeddings materialize and the "
                                                "warehouse publishes again." + _WARN_NOTE),
              ],
              description="One DuckDB file: notes, chunks, links, vectors (HNSW, cosine) and BM25; published "
                          "atomically, updated incrementally, not at all when nothing changed.")
    def warehouse(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        settings = _run_settings(context, docsvault, loaded_sources)
        with publish_lock(settings, context.log.info):
            for line in remove_dropped(settings, sources):
                context.log.info(line)
            published = _with_progress_log(
                context, None, lambda: build.warehouse_stage(settings, sources, embedder_factory=cached_embedder))
        meta = _metadata(published)
        if published.skipped:
            meta = {"skipped": True, "mode": "unchanged", "seconds": published.seconds,
                    **{k: meta[k] for k in _WAREHOUSE_STATE_KEYS if k in meta}}
        context.log.info(f"warehouse: {meta.get('notes')} notes, {meta.get('chunks')} chunks -> "
                         f"{published.path} ({meta.get('mode')})")
        if published.missing_vectors_in:
            context.log.warning(missing_vectors_line(published.missing_vectors_in))
        out = _clean(meta)
        out.update(_warehouse_tables(settings))
        last = artifacts.load_state(settings, build.SHARED_STATE).get("warehouse") or {}
        return dg.MaterializeResult(metadata=out, data_version=_version(last.get("input_key")),
                                    check_results=_warehouse_checks(settings))

    @dg.asset(key=key("retrieval_eval"), deps=[warehouse], group_name="eval", kinds={"python"},
              code_version=build.code_version("eval"), pool=WAREHOUSE_POOL,
              check_specs=[
                  dg.AssetCheckSpec("eval_floors", asset=key("retrieval_eval"),
                                    description="Hybrid pooled MRR@10 and hit@3 at or above their floors "
                                                "(`DOCSVAULT_EVAL_MIN_MRR`, `DOCSVAULT_EVAL_MIN_HIT3`); passes "
                                                "with a note when no case was scored." + _WARN_NOTE),
                  dg.AssetCheckSpec("hybrid_beats_single_lanes", asset=key("retrieval_eval"),
                                    description="Hybrid pooled MRR@10 at or above the best single lane's, or "
                                                "behind it within chance (paired sign test over the cases, "
                                                "p >= 0.05)." + _WARN_NOTE),
              ],
              description="Ablation (each lane alone and hybrid) of the eval cases (`DOCSVAULT_EVALS`): hit@1, "
                          "hit@3, MRR@10, nDCG@10 overall, per source and per kind; each run that scored appended "
                          "to `<data>/eval_runs.duckdb`. Metrics are recorded only when the warehouse or the cases "
                          "changed, so their plots get one point per real change.")
    def retrieval_eval(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        from pipeline.evaluate import check_floors, check_fusion_gain, floors_from_env

        settings = _run_settings(context, docsvault, loaded_sources)
        report = build.eval_stage(settings, sources)     # the default embedders: its child processes load them too
        meta = eval_metadata(report)
        context.log.info(f"eval (hybrid): {dict(report.overall)}" + (" (unchanged, not re-run)" if report.skipped
                                                                     else ""))
        limits = floors_from_env()
        floors = check_floors(report, limits)
        build.record_floors_check(settings, limits, str(floors.metadata.get("below", "")))    # what status reports
        gain = check_fusion_gain(report)
        last = artifacts.load_state(settings, build.SHARED_STATE).get("eval") or {}
        return dg.MaterializeResult(metadata=meta, data_version=_version(last.get("key")), check_results=[
            dg.AssetCheckResult(check_name="eval_floors", passed=floors.passed, metadata=floors.metadata,
                                severity=dg.AssetCheckSeverity.WARN),
            dg.AssetCheckResult(check_name="hybrid_beats_single_lanes", passed=gain.passed, metadata=gain.metadata,
                                severity=dg.AssetCheckSeverity.WARN),
        ])

    return [link_graph, warehouse, retrieval_eval]


def remove_dropped(settings: Settings, sources: Sequence[Source]) -> list[str]:
    """What earlier builds wrote for sources no longer in sources.yaml, removed under the build lock
    (:func:`pipeline.stages.remove_dropped_sources`: only generated vault folders, and in them only the files the
    build wrote and nobody edited since) by the warehouse asset of every Dagster run (the UI, the schedule, the
    sensor, ``dagster asset materialize``), as ``docsvault build`` does before its run (which leaves nothing here).

    Returns:
        One line per removed vault folder (``removed vault/<name>/: source '<name>' is no longer in sources.yaml``).

    Raises:
        SourceConfigError: ``sources`` is empty while sources are built (nothing removed), as the warehouse stage.
    """
    with build.stage_lock(settings):
        return build.remove_dropped_sources(settings, sources)


#: the WARN check of ``warehouse``: every published chunk has its vectors (:func:`_warehouse_checks`)
ALL_CHUNKS_EMBEDDED = "all_chunks_embedded"


def _warehouse_checks(settings: Settings) -> list[dg.AssetCheckResult]:
    """``hnsw_index_used``, ``serves_queries`` and ``all_chunks_embedded`` (WARN) from
    :func:`pipeline.stages.search_index_stage` (one read-only open of the published file: its counts, every model's
    vector search plan, a sample query and the sources whose chunks it holds without a vector)."""
    if not settings.warehouse_path.exists():
        return [dg.AssetCheckResult(check_name=n, passed=False, metadata={"error": "no warehouse file"},
                                    severity=dg.AssetCheckSeverity.WARN if n == ALL_CHUNKS_EMBEDDED
                                    else dg.AssetCheckSeverity.ERROR)
                for n in ("hnsw_index_used", "serves_queries", ALL_CHUNKS_EMBEDDED)]
    serving = build.search_index_stage(settings, embedder_factory=cached_embedder)
    served = serving.as_dict()
    n_chunks, models = int(serving.chunks or 0), list(serving.models or ())
    ok = bool(serving.hnsw_index_scan) if models else n_chunks == 0
    missing = str(serving.missing_vectors_in or "")
    return [
        dg.AssetCheckResult(check_name="hnsw_index_used", passed=ok, metadata={"models": models,
                                                                               "chunks": n_chunks}),
        dg.AssetCheckResult(check_name="serves_queries", passed=bool(serving.sample_hits) or n_chunks == 0,
                            metadata=_clean({k: served[k] for k in ("sample_query_ms", "sample_hits", "models")
                                             if k in served})),
        dg.AssetCheckResult(check_name=ALL_CHUNKS_EMBEDDED, passed=not missing, severity=dg.AssetCheckSeverity.WARN,
                            metadata={"chunks": n_chunks, "missing_vectors_in": missing or "none"},
                            description=missing_vectors_line(missing) if missing else None),
    ]


def eval_metadata(report: EvalStageResult) -> dict[str, Any]:
    """Metadata of one ``retrieval_eval`` materialization: the figures only when the eval ran now (a skipped eval
    records ``skipped`` and nothing to plot)."""
    from pipeline.evaluate import METRICS, best_single_lane, format_ablation, metric_key

    meta: dict[str, Any] = {"skipped": bool(report.skipped), "history_rows": int(report.history_rows or 0),
                            "history": dg.MetadataValue.path(report.history or "")}
    if report.skipped:
        return meta
    overall, setups = report.overall, report.setups or {}
    meta["n"] = int(overall.get("n", 0))
    if not meta["n"]:                                        # say where the eval looked
        meta["eval_files"] = ", ".join(report.files or ()) or "none"
    if report.unreachable:                                   # cases whose expected page was not built: misses
        meta["unreachable"] = len(report.unreachable)
    if report.skipped_cases:                                 # cases of a corpus that is no built source: left out
        meta["skipped_cases"] = sum(report.skipped_cases.values())
        meant = report.skipped_meant or {}
        meta["skipped_corpora"] = ", ".join(f"{name} ({n}" + (f", did you mean {meant[name]!r}?)" if name in meant
                                                              else ")") for name, n in report.skipped_cases.items())
    for metric in METRICS:                                   # the hybrid set-up (plotted across runs)
        if metric in overall:
            meta[metric_key(metric)] = dg.MetadataValue.float(float(overall[metric]))
    for name, row in sorted((report.by_source or {}).items()):
        for metric in ("hit@3", "mrr@10"):
            meta[f"{name}/{metric.replace('@', '_at_')}"] = dg.MetadataValue.float(float(row[metric]))
    for name, r in setups.items():
        if r["overall"].get("n"):
            meta[f"{name}/pooled_mrr_at_10"] = dg.MetadataValue.float(float(r["overall"]["mrr@10"]))
    best = best_single_lane(setups)
    if best is not None:
        meta["best_single_lane"] = best[0]
    if setups:
        meta["ablation"] = dg.MetadataValue.md(format_ablation(setups, markdown=True))
        meta["config"] = dg.MetadataValue.json(plain(report.config or {}))
    ablation = report.ablation or {}
    if ablation:        # the single-lane figures: computed now, or carried from the warehouse they were computed on
        meta["ablation_carried"] = bool(ablation.get("carried"))
        meta["ablation_warehouse_built_at"] = str(ablation.get("warehouse_built_at", ""))
    return meta


def asset_defs(settings: Settings) -> dg.Definitions:
    """Every asset of the sources in ``settings.sources_file``.

    Raises:
        SourceConfigError: sources.yaml invalid, or two source names map to the same asset key.
    """
    from pipeline.ingest.sources import load_sources

    digest = sources_digest(settings.sources_file)
    sources = load_sources(settings.sources_file)   # also rejects two names with one asset key
    record_loaded_sources(settings.sources_file, digest)
    assets: list[Any] = []
    for s in sources:
        assets.extend(source_assets(s, settings))
    assets.extend(shared_assets(sources, settings.sources_file))
    return dg.Definitions(assets=assets)


@dg.definitions
def defs() -> dg.Definitions:
    """The assets of the sources in DOCSVAULT_SOURCES (default ./sources.yaml)."""
    return asset_defs(Settings.from_env())
