"""After the warehouse: the search index warm-up and the retrieval eval stage."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.common import artifacts
from pipeline.common.gcpause import collector_paused
from pipeline.config import Settings, eval_paths
from pipeline.ingest.sources import closest_name
from pipeline.models import Source
from pipeline.stages.base import SHARED_STATE, code_version, digest, file_sha, forced, now, stage_lock
from pipeline.stages.index import built_sources, shared_state
from pipeline.stages.results import EvalStageResult, SearchIndexResult

if TYPE_CHECKING:
    from pipeline.evaluate import PageRows, RankTask

log = logging.getLogger("docsvault")

#: ``DOCSVAULT_EVAL_ABLATION=1``: the eval stage computes every single-lane set-up even when it could carry them
ABLATION_ENV = "DOCSVAULT_EVAL_ABLATION"


def eval_files(settings: Settings) -> list[Path]:
    """The eval files named by DOCSVAULT_EVALS (a file or folder; several separated by the OS path separator)."""
    return [p for p in eval_paths(settings) if p.exists()]


def _warehouse_version(settings: Settings) -> str:
    """Identity of the published warehouse file (inode, size, mtime): changes whenever a build publishes."""
    try:
        st = settings.warehouse_path.stat()
    except OSError:
        return ""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _warehouse_content(settings: Settings) -> str:
    """The published warehouse's input key (a digest of everything it was built from: the same content gives the
    same key, whether written in full or updated), else its file identity (:func:`_warehouse_version`)."""
    from pipeline.warehouse import connect, read_meta

    if settings.warehouse_path.exists():
        try:
            con = connect(settings.warehouse_path, read_only=True)
            try:
                key = read_meta(con).get("input_key")
            finally:
                con.close()
            if key:
                return f"input:{key}"
        except Exception:           # an unreadable file: its identity; the eval run itself reports the problem
            pass
    return _warehouse_version(settings)


def query_vectors_path(settings: Settings) -> Path:
    """``<data>/cache/eval-query-vectors.npz``: the eval queries' vectors (see :func:`load_query_vectors`)."""
    return settings.cache_dir / "eval-query-vectors.npz"


#: The query of the ``serves_queries`` check (:func:`search_index_stage`).
SAMPLE_QUERY = "getting started"


def sample_query_vectors_path(settings: Settings) -> Path:
    """``<data>/cache/sample-query-vectors.npz``: :data:`SAMPLE_QUERY`'s vectors (:func:`load_query_vectors`)."""
    return settings.cache_dir / "sample-query-vectors.npz"


def load_query_vectors(path: Path, version: str) -> dict[tuple[str, str], Any]:
    """The query vectors a past eval stored with :func:`save_query_vectors` under the same ``version`` (the code
    that embeds and searches): ``(model id, text) -> float32 (dim,)``; ``{}`` when there is none, it is of other
    code or unreadable (the eval then embeds its queries, as before)."""
    import json

    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as data:
            index = json.loads(str(data["index"]))
            if index.get("version") != version:
                return {}
            out: dict[tuple[str, str], Any] = {}
            for i, (model_id, texts) in enumerate(index["models"]):
                matrix = data[f"m{i}"]
                out.update({(model_id, text): matrix[j] for j, text in enumerate(texts)})
            return out
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def save_query_vectors(path: Path, version: str, vectors: dict[tuple[str, str], Any]) -> None:
    """Store query vectors (``(model id, text) -> vector``) for :func:`load_query_vectors`, atomically."""
    import json

    import numpy as np

    by_model: dict[str, list[tuple[str, Any]]] = {}
    for (model_id, text), vec in sorted(vectors.items(), key=lambda kv: kv[0]):
        by_model.setdefault(model_id, []).append((text, vec))
    models = sorted(by_model)
    arrays = {f"m{i}": np.stack([np.asarray(v, dtype=np.float32) for _, v in by_model[m]]) for i, m in enumerate(models)}
    index = {"version": version, "models": [[m, [t for t, _ in by_model[m]]] for m in models]}
    artifacts.write_atomic_with(path, lambda out: np.savez(out, index=np.array(json.dumps(index, ensure_ascii=False)),
                                                           **arrays))


@contextmanager
def stored_query_vectors(settings: Settings, searcher: Any, keep: int
                         ) -> Iterator[Callable[[Sequence[RankTask]], dict[RankTask, PageRows]]]:
    """An eval's searches with the query vectors of earlier evals (the build's and ``docsvault eval``'s): the stored
    ones (:func:`load_query_vectors`) held by ``searcher`` (at least ``keep`` of them) and primed
    (``Searcher.prime_scans``: one matrix product per model instead of a scan per search) by the first ``rank``
    once its child processes are started; after the body,
    the vectors ``searcher`` then holds are stored when it embedded new ones. An unwritable data dir is only logged:
    the next run embeds those queries again.

    Yields:
        ``rank(tasks)``: the rows of these searches (:func:`pipeline.evaluate.rank_tasks`), ranked by ``searcher``
        and child processes on the other CPUs (:func:`pipeline.stages.eval_child.eval_rankings`), for
        :func:`pipeline.evaluate.run_eval`'s ``ranked``.
    """
    from pipeline.stages.eval_child import eval_rankings

    primed: list[int] = []

    def prime() -> None:            # once, after the first rank's children are started (their start overlaps it)
        if not primed:
            primed.append(searcher.prime_scans())

    with kept_query_vectors(query_vectors_path(settings), searcher, keep) as stored:   # embedded once, ever
        yield lambda tasks: eval_rankings(searcher, tasks, stored=stored, keep=keep, prepare=prime)


@contextmanager
def kept_query_vectors(path: Path, searcher: Any, keep: int = 0) -> Iterator[dict[tuple[str, str], Any]]:
    """``searcher`` holds the query vectors stored at ``path`` for this embedding and search code
    (:func:`load_query_vectors`; at least ``keep`` of them) during the body, which gets them; after it, the vectors
    ``searcher`` then holds are stored when it embedded new ones. An unwritable data dir is only logged: the next
    run embeds those queries again."""
    version = code_version("eval")
    stored = load_query_vectors(path, version)
    searcher.remember_query_vectors(stored, keep=keep)
    yield stored
    held = searcher.query_vectors()
    if held.keys() != stored.keys():
        try:
            save_query_vectors(path, version, held)
        except OSError as exc:
            log.warning("could not store query vectors in %s (%s): the next run embeds those queries again", path,
                        exc)

def _plans_key(con: Any) -> tuple[str, int]:
    """What the vector lane's plans (:func:`pipeline.warehouse.explain_vector_search`) depend on: ``(key, updates)``.

    ``key`` digests the code that plans and writes them (``code_version("warehouse")``, which holds
    ``warehouse/vectors.py``),
    DuckDB's version, the ``vss`` extension file (size, mtime) and the base vector tables with their HNSW indexes:
    only a full publish creates those (an incremental one never touches them), so its ``full_built_at`` (seconds),
    the file's schema and program version and each model's table, dim and base rows (``n_base``) stand for them.
    ``updates``: the incremental updates since that full publish (``meta.updates``, 0 right after it). The plans of
    a file with the same key and more updates than one checked before are that file's: the same indexed tables
    (a full publish in the same second starts again at 0 updates). The sample query still runs on every new file."""
    import duckdb
    import duckdb_ext

    from pipeline.stages.base import file_stats
    from pipeline.warehouse import indexed_tables, read_meta

    meta = read_meta(con)
    tables = indexed_tables(con)
    return digest(code_version("warehouse"), duckdb.__version__,
                  file_stats(Path(duckdb_ext.get_extension_dir())),
                  [meta.get(k) for k in ("schema_version", "docsvault_version", "full_built_at")],
                  [list(r) for r in tables]), int(meta.get("updates") or 0)


def search_index_stage(settings: Settings, embedder_factory: Callable[[str], Any] | None = None
                       ) -> SearchIndexResult:
    """Open the published warehouse as search does and run one sample query per lane: proves the indexes serve.

    Skipped when the warehouse file is the one checked last time. The sample query's vectors are embedded once per
    embedding and search code (:func:`kept_query_vectors` at :func:`sample_query_vectors_path`, as the eval keeps
    its queries'), so a rebuild after a small edit does not load three query encoders (~0.3-0.9 s) for one query; the query models
    themselves are proved by the first check after a model or code change. ``sample_query_ms`` is the search's
    time, the query's embedding included only when it was embedded.

    ``hnsw_index_scan`` (every vector table's plan uses its HNSW index) is carried from the last check when the
    file is an update of the file checked then (:func:`_plans_key`: an incremental publish leaves the indexed
    tables as they were), which spares loading ``vss`` (~0.1-0.25 s) and planning; a forced build plans again.
    """
    from pipeline.search.searcher import Searcher
    from pipeline.warehouse import connect, explain_vector_search, list_models, stats

    version = _warehouse_version(settings)
    last = shared_state(settings).get("search_index") or {}
    # a check recorded before ``missing_vectors_in`` was (an upgrade) reads the file again
    if version and last.get("version") == version and "missing_vectors_in" in (last.get("meta") or {}):
        return SearchIndexResult.from_dict(last.get("meta") or {}, skipped=True)
    con = connect(settings.warehouse_path, read_only=True)
    try:
        counts = stats(con)
        models = list_models(con)
        plans_key, updates = _plans_key(con)
        carried = (last.get("meta") or {}).get("hnsw_index_scan")
        if (last.get("plans_key") == plans_key and updates > int(last.get("plans_updates", updates))
                and isinstance(carried, bool) and not forced()):
            hnsw = carried
        else:
            plans = [explain_vector_search(con, m["table_name"]) for m in models]
            hnsw = all("HNSW_INDEX_SCAN" in p for p in plans) if plans else False
    finally:
        con.close()
    searcher = Searcher(settings.warehouse_path, **({"embedder_factory": embedder_factory} if embedder_factory else {}))
    try:
        with kept_query_vectors(sample_query_vectors_path(settings), searcher):
            started = time.perf_counter()
            hits = searcher.search(SAMPLE_QUERY, k=3)
            seconds = time.perf_counter() - started
    finally:
        close = getattr(searcher, "close", None)
        if close:
            close()
    result = SearchIndexResult(
        notes=counts["notes"], chunks=counts["chunks"], links=counts["links"], dangling_links=counts["dangling_links"],
        models=tuple(m["model_id"] for m in models),
        hnsw_index_scan=hnsw,
        sample_query_ms=round(seconds * 1000, 1),
        sample_hits=tuple(h.vault_path + (f" > {h.heading}" if h.heading else "") for h in hits),
        missing_vectors_in=str(counts["meta"].get("missing_vectors_in") or ""),
    )
    meta = {k: v for k, v in result.as_dict().items() if k != "skipped"}
    with stage_lock(settings):
        artifacts.update_state(settings, SHARED_STATE, search_index={"version": version, "meta": meta,
                                                                     "plans_key": plans_key, "plans_updates": updates})
    return result


#: the shared state's key of the last verdict of retrieval_eval's ``eval_floors`` check (:func:`record_floors_check`)
FLOORS_CHECK = "eval_floors"


def record_floors_check(settings: Settings, floors: dict[str, float], below: str) -> None:
    """Record the verdict of ``retrieval_eval``'s ``eval_floors`` check on the last eval report, for ``status``: a
    shell without the build's ``DOCSVAULT_EVAL_MIN_*`` variables then reports what the build checked, not its own
    floors' verdict. Kept in the shared state as ``eval_floors``: ``{"key"`` (the eval's key: a verdict of
    another report is not this one's), ``"floors"`` (``{metric: floor}``, metrics as
    :data:`pipeline.evaluate.DEFAULT_FLOORS` names them), ``"below"`` (``"mrr@10 0.612 < 0.700, …"``, ``""`` when
    met), ``"at"`` (ISO 8601 UTC, when that verdict was first recorded)}``. The same verdict on the same report
    again (a run whose eval skipped) writes nothing.

    Raises:
        OSError: the state file cannot be written.
    """
    with stage_lock(settings):
        state = shared_state(settings)
        verdict = {"key": (state.get("eval") or {}).get("key"), "floors": {m: float(f) for m, f in floors.items()},
                   "below": below}
        last = state.get(FLOORS_CHECK)
        if isinstance(last, dict) and {k: last.get(k) for k in verdict} == verdict:
            return
        artifacts.update_state(settings, SHARED_STATE, **{FLOORS_CHECK: {**verdict, "at": now()}})


def eval_stage(settings: Settings, sources: Sequence[Source], embedder_factory: Callable[[str], Any] | None = None
               ) -> EvalStageResult:
    """Run the ablation over the eval cases of DOCSVAULT_EVALS (default evals/) whose corpus is a built source: each
    lane alone (bm25, vector, and graph when the warehouse has resolved links) and ``hybrid`` (the default fusion),
    each case searched within its corpus, plus ``hybrid unscoped`` (the default fusion with every case searched over
    all sources, as users search; a page of another source is a miss), scored overall (pooled), per source and per
    kind; the run's rows (every set-up, ``hybrid unscoped`` included) are appended to the eval history
    (``<data>/eval_runs.duckdb``, :func:`pipeline.warehouse.append_eval_runs`: a file of its own, so it survives
    every warehouse publish).

    Skipped (the last report, ``skipped: True``, nothing appended) when neither the warehouse's content (its input
    key), the eval files' content, the built sources, the synonyms file nor the search code changed, unless the
    build is forced (``--force`` / ``DOCSVAULT_FORCE``). Searches use the synonyms file, as the CLI and MCP do.

    Ablation only when it can differ in kind: the single-lane set-ups are computed on the first run, when the
    scored cases, the search code or settings (synonyms, models, weights, lanes) changed, on a forced build, or
    with ``DOCSVAULT_EVAL_ABLATION=1``; otherwise (an incremental build: only the warehouse content moved) only
    ``hybrid`` and ``hybrid unscoped`` are run and the single-lane set-ups are carried from the last run that
    computed them. Every set-up in ``setups`` carries ``warehouse_key`` / ``warehouse_built_at`` of the warehouse
    it was computed on; ``ablation`` says ``{key, carried, warehouse_key, warehouse_built_at, run_at}`` of the
    single-lane figures; only computed set-ups are appended to the history.

    Returns:
        An :class:`~pipeline.stages.results.EvalStageResult`: the hybrid set-up's report (``overall``, ``by_source``, ``by_kind``, ``cases``, ``lanes``, as
        :func:`pipeline.evaluate.run_eval`) plus ``setups`` (set-up -> ``{lanes, scope, overall, by_source,
        by_kind, cases}``, ``cases`` being ``[{"id", "mrr@10"}]`` per scored case; the scoped ablation, then ``hybrid unscoped`` with ``scope: "unscoped"``), ``unscoped`` (the
        ``hybrid unscoped`` report: ``overall``, ``by_source``, ``by_kind``, ``cases``),
        ``config`` (``k_rrf``, ``weights``, ``models``), ``run_id``, ``run_at``, ``warehouse_built_at``, ``files``,
        ``history`` (the history file), ``history_rows`` (rows appended), ``skipped``. No scored case:
        ``overall = {"n": 0}`` and empty ``setups``.

    Long: skip check, ablation run, history append under the lock and state record: one sequence whose order keeps
    the history consistent.
    """
    from pipeline.config import env_flag
    from pipeline.evaluate import (
        HYBRID,
        UNSCOPED_SETUP,
        ablation_setups,
        eval_history_path,
        history_rows,
        load_cases,
        rank_tasks,
        run_ablation,
        run_eval,
    )
    from pipeline.search.searcher import LANES, Searcher
    from pipeline.warehouse import append_eval_runs, connect, load_graph, read_meta

    files = eval_files(settings)
    names = sorted(built_sources(settings, sources))
    listing = []
    for f in files:
        for p in sorted(f.rglob("*")) if f.is_dir() else [f]:
            if p.is_file():
                listing.append((str(p), file_sha(p)))
    syn = settings.synonyms_file
    search_key = digest(code_version("eval"), file_sha(syn) if syn.is_file() else None)
    content = _warehouse_content(settings)
    key = digest("eval-3", content, listing, names, search_key)
    last = shared_state(settings).get("eval") or {}
    last_report = last.get("report") if isinstance(last.get("report"), dict) else {}
    if last.get("key") == key and last_report and not forced():
        return EvalStageResult.from_dict(last_report, skipped=True, history_rows=0,
                                         history=str(eval_history_path(settings.data_dir)))
    history = eval_history_path(settings.data_dir)
    loaded = load_cases(files) if files else []
    cases = [c for c in loaded if c.corpus in set(names)]
    left_out = Counter(c.corpus for c in loaded if c.corpus not in set(names))   # said by the build, not dropped silently
    report: dict[str, Any] = {"overall": {"n": 0}, "by_source": {}, "by_kind": {}, "setups": {},
                              "files": [str(f) for f in files], "history": str(history), "history_rows": 0,
                              "skipped_cases": dict(sorted(left_out.items())),
                              "skipped_meant": {c: close for c in sorted(left_out)
                                                if (close := closest_name(c, names))}}
    rows: list[dict[str, Any]] = []
    if cases:
        con = connect(settings.warehouse_path, read_only=True)
        try:
            meta = read_meta(con)
            has_graph = load_graph(con)[0].num_rows > 0
        finally:
            con.close()
        # the searcher's key tables live to the end and its searches make few cycles: no GC passes over them
        with collector_paused():
            searcher = Searcher(settings.warehouse_path, synonyms=settings.synonyms_file,
                                **({"embedder_factory": embedder_factory} if embedder_factory else {}))
            try:
                with stored_query_vectors(settings, searcher, keep=16 * len(cases)) as rank:
                    setups = ablation_setups(graph=has_graph, lanes=searcher.default_lanes)
                    config = {"k_rrf": float(searcher.k_rrf),
                              "weights": {lane: float(searcher.weights[lane]) for lane in LANES},
                              "models": [m["model_id"] for m in searcher.models]}
                    ablation_key = digest("ablation-4", listing, sorted({c.corpus for c in cases}), search_key, config,
                                          setups)
                    before = last_report.get("ablation") or {}
                    carried = last_report.get("setups") or {}
                    carry = (before.get("key") == ablation_key and not forced() and not env_flag(ABLATION_ENV, False)
                             and all(name in carried for name in setups))
                    # only the warehouse content moved: the fused set-ups now, the single lanes as they were
                    computed = {HYBRID: setups[HYBRID]} if carry else setups
                    ranked = rank(rank_tasks(searcher, cases, computed, ["scoped"])
                                  + rank_tasks(searcher, cases, {HYBRID: setups[HYBRID]}, ["unscoped"]))
                    reports = run_ablation(searcher, cases, computed, ranked=ranked)
                    reports[UNSCOPED_SETUP] = run_eval(searcher, cases, lanes=setups[HYBRID], scope="unscoped",
                                                       ranked=ranked)
            finally:
                searcher.close()
        run_at = now()
        run_id = digest(run_at, key)[:16]
        built_at = meta.get("built_at", "")
        computed_on = {"warehouse_key": content, "warehouse_built_at": built_at}
        # each case's MRR@10 too: hybrid_beats_single_lanes pairs the set-ups case by case (a sign test)
        entries = {name: {**{k: r[k] for k in ("lanes", "scope", "overall", "by_source", "by_kind")}, **computed_on,
                          "cases": [{"id": c["id"], "mrr@10": c["mrr@10"]} for c in r.get("cases", ())]}
                   for name, r in reports.items()}
        if carry:
            entries = {**{name: carried[name] for name in setups if name != HYBRID}, HYBRID: entries[HYBRID],
                       UNSCOPED_SETUP: entries[UNSCOPED_SETUP]}
            ablation = {**before, "carried": True}
        else:
            ablation = {"key": ablation_key, "carried": False, **computed_on, "run_at": run_at}
        hybrid = {k: v for k, v in reports[HYBRID].items() if k != "skipped"}   # cases are of built sources only
        report.update(hybrid)
        report.update({
            "setups": entries, "ablation": ablation,
            "unscoped": {k: v for k, v in reports[UNSCOPED_SETUP].items() if k != "skipped"},
            "config": config, "run_id": run_id, "run_at": run_at, "warehouse_built_at": built_at,
        })
        rows = history_rows(reports, run_id=run_id, run_at=run_at, built_at=built_at,
                            warehouse_key=meta.get("input_key", ""), cases_key=digest(listing)[:16], config=config)
    with stage_lock(settings):
        if rows:
            append_eval_runs(history, rows)
            report["history_rows"] = len(rows)
        artifacts.update_state(settings, SHARED_STATE, eval={"key": key, "report": report})
    return EvalStageResult.from_dict(report)
