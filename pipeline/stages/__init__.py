"""One function per build stage: read the previous stage's files, run the stage, write its output, return metadata.

These are what the Dagster assets (``pipeline/defs``) call; they hold the I/O between stages so asset bodies stay a
line or two and the chain can also run (and be tested) without Dagster. Every stage returns a frozen record of
:mod:`pipeline.stages.results` (counts, paths, timings) whose ``as_dict()`` is its Dagster metadata.

Change-only work. Every stage records, in ``<data>/state/<source>.json``, a key of its inputs (content hashes of
the previous stage's output, the source's configuration and a hash of the code that shapes its output) and skips
when the key is unchanged and its output is still there (``skipped`` True in its result):

* normalize: the fetch revision (git commit / listing hash) + the fetched file list + source config + code;
* vault: the notes file's hash + code, and the vault folder's listing (a hand-deleted or edited vault file is
  rewritten);
* chunk: the vault folder's listing + model + code; when it must run, notes whose content hash is unchanged reuse
  their previous chunks (``<data>/chunks/<source>.notes.json`` maps note id -> content hash), so only edited notes
  are re-chunked;
* embed: the embedding cache (model id + chunk text hash) means only new texts are embedded; texts missing from
  the cache are first looked up in the warehouse (which keeps every vector with its chunk's text hash), so a
  deleted or moved cache is re-seeded instead of re-embedded; skipped outright (chunks not even read) when the
  chunks file, the models and the code are those of its last run and every cache shard that run left is still there;
* graph: the listings of every built source's vault folder;
* warehouse: a key of all of the above; unchanged -> nothing is published. Otherwise BM25 tokens come from a token
  cache keyed by text hash (``<data>/cache/bm25/``) and :func:`pipeline.warehouse.publish` updates a copy of the
  current file incrementally (vectors of changed chunks go to a small delta table, the HNSW index is not rebuilt)
  before swapping it in, or writes a new file when that is not possible (first build, new schema, model change).
* search_index: re-run only when the warehouse file changed; eval: only when the warehouse's content (its input
  key), the eval files, the search code or the synonyms did; an incremental build runs only the fused set-ups and
  carries the single-lane ablation (see :func:`pipeline.stages.evaluate.eval_stage`).

Every write is atomic and every key is recorded after its output is written, so a build killed at any moment
(SIGKILL) redoes at most the interrupted stage next time.

Modules (what a build runs, in order): ``base`` (code versions = cache keys, force switch, progress hooks, the
build lock, the JSON memo cache), ``layout`` (leftovers, dropped sources), ``ingest`` (fetch -> normalize -> vault),
``index`` (chunk, embed, graph), ``warehouse`` (BM25 tokens + publish), ``evaluate`` (search index, eval), and
``results`` (the record each stage returns). This
face re-exports what the shells call, ``from pipeline import stages``.
"""

from pipeline.stages.base import (
    FORCE_ENV,
    PER_SOURCE_LOCK_SHARED,
    PROGRESS_HOOKS,
    SHARED_STATE,
    STAGE_LOCK_WAIT,
    JsonCache,
    Progress,
    code_version,
    forced,
    now,
    stage_lock,
    vault_listing,
    vault_listings,
)
from pipeline.stages.evaluate import (
    FLOORS_CHECK,
    eval_files,
    eval_stage,
    record_floors_check,
    search_index_stage,
    stored_query_vectors,
)
from pipeline.stages.index import (
    built_sources,
    chunk_models,
    chunk_stage,
    embed_stage,
    graph_stage,
)
from pipeline.stages.ingest import (
    KEPT_SUFFIX,
    conflict_line,
    fetch_stage,
    frontmatter_check,
    kept_line,
    normalize_stage,
    unreported_conflicts,
    vault_skipped_path,
    vault_stage,
)
from pipeline.stages.layout import (
    REMOVE_ALL_OPTION,
    built_source_names,
    check_layout,
    cleanup_leftovers,
    no_sources_problem,
    remove_dropped_sources,
    remove_warehouse_temps,
)
from pipeline.stages.results import (
    ChunkResult,
    EmbedResult,
    EvalStageResult,
    FetchStageResult,
    FrontmatterCheck,
    GraphResult,
    NormalizeResult,
    SearchIndexResult,
    StageResult,
    VaultResult,
    WarehouseResult,
)
from pipeline.stages.warehouse import (
    TokenCache,
    caching_analyzer,
    warehouse_stage,
)

__all__ = [
    "FLOORS_CHECK",
    "FORCE_ENV",
    "KEPT_SUFFIX",
    "PER_SOURCE_LOCK_SHARED",
    "PROGRESS_HOOKS",
    "REMOVE_ALL_OPTION",
    "SHARED_STATE",
    "STAGE_LOCK_WAIT",
    "ChunkResult",
    "EmbedResult",
    "EvalStageResult",
    "FetchStageResult",
    "FrontmatterCheck",
    "GraphResult",
    "JsonCache",
    "NormalizeResult",
    "Progress",
    "SearchIndexResult",
    "StageResult",
    "TokenCache",
    "VaultResult",
    "WarehouseResult",
    "built_source_names",
    "built_sources",
    "caching_analyzer",
    "check_layout",
    "chunk_models",
    "chunk_stage",
    "cleanup_leftovers",
    "code_version",
    "conflict_line",
    "embed_stage",
    "eval_files",
    "eval_stage",
    "fetch_stage",
    "forced",
    "frontmatter_check",
    "graph_stage",
    "kept_line",
    "no_sources_problem",
    "normalize_stage",
    "now",
    "record_floors_check",
    "remove_dropped_sources",
    "remove_warehouse_temps",
    "search_index_stage",
    "stage_lock",
    "stored_query_vectors",
    "unreported_conflicts",
    "vault_listing",
    "vault_listings",
    "vault_skipped_path",
    "vault_stage",
    "warehouse_stage",
]
