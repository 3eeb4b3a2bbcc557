"""Assets: one chain per source (raw_docs -> notes -> vault -> chunks -> embeddings), then the shared stages
(link_graph, warehouse, search_index, retrieval_eval) over every source's last good copy.

Each source has its own assets, so a failing source fails only its own chain (and can be re-run alone), while
``dagster asset materialize --select '*'`` needs no partition argument.
"""


import re
import time
from collections.abc import Sequence
from typing import Any

import dagster as dg

from pipeline import build
from pipeline.defs.resources import DocsvaultResource
from pipeline.models import Source

SHARED_GROUP = "warehouse"
#: Dagster pool of the single-writer stages (graph, warehouse publish, search check, eval): a deployment limits it
#: to 1 (deploy/dagster.yaml) instead of the host-local file lock.
SHARED_POOL = "docsvault_shared"


def source_slug(name: str) -> str:
    """Source name -> asset-key part (Dagster keys allow [A-Za-z0-9_])."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def key(stage: str, source: Source | None = None) -> dg.AssetKey:
    return dg.AssetKey([stage, source_slug(source.name)] if source else [stage])


def _md_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> dg.MetadataValue:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines))


def _result(meta: dict[str, Any], **extra: Any) -> dg.MaterializeResult:
    clean: dict[str, Any] = {}
    for k, v in {**meta, **extra}.items():
        if isinstance(v, (bool, int, float, str, dg.MetadataValue)):
            clean[k] = v
        elif isinstance(v, (list, dict)):
            clean[k] = dg.MetadataValue.json(v)
    return dg.MaterializeResult(metadata=clean)


def source_assets(source: Source) -> list[dg.AssetsDefinition]:
    """The per-source chain for one source of sources.yaml."""
    tags = {"source": source.name}

    @dg.asset(key=key("raw_docs", source), group_name="fetch", kinds={source.kind if source.kind != "local" else "python"},
              tags=tags, description=f"Fetched files of source '{source.name}' ({source.kind}).")
    def raw_docs(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        meta = build.fetch_stage(docsvault.settings(), source)
        context.log.info(f"{source.name}: {meta['files']} files via {meta['strategy']} (changed={meta['changed']})")
        return _result(meta)

    @dg.asset(key=key("notes", source), deps=[raw_docs], group_name="normalize", kinds={"markdown"}, tags=tags,
              description=f"Normalized Markdown notes of '{source.name}' with merged frontmatter.")
    def notes(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        meta = build.normalize_stage(docsvault.settings(), source)
        for line in meta["error_lines"]:
            context.log.warning(line)
        return _result(meta)

    @dg.asset(key=key("vault", source), deps=[notes], group_name="vault", kinds={"obsidian"}, tags=tags,
              description=f"Obsidian notes of '{source.name}' under vault/{source.name}/ (written only when changed).")
    def vault(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        meta = build.vault_stage(docsvault.settings(), source)
        return _result(meta, vault_dir=dg.MetadataValue.path(meta["vault_dir"]))

    @dg.asset(key=key("chunks", source), deps=[vault], group_name="index", kinds={"python"}, tags=tags,
              description=f"Heading chunks of '{source.name}' with breadcrumbs, within the model's token window.")
    def chunks(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        embedder = docsvault.embedder(source)
        meta = build.chunk_stage(docsvault.settings(), source, embedder.count_tokens, embedder.max_tokens)
        return _result(meta)

    @dg.asset(key=key("embeddings", source), deps=[chunks], group_name="index", kinds={"pytorch"}, tags=tags,
              description=f"Chunk embeddings of '{source.name}' (cached by model id + chunk text hash).")
    def embeddings(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        last = [0.0]
        started = time.perf_counter()

        def progress(done: int, total: int) -> None:
            now = time.perf_counter()
            if now - last[0] >= 10 or done == total:
                last[0] = now
                rate = done / max(now - started, 1e-9)
                context.log.info(f"{source.name}: embedded {done}/{total} chunks ({rate:.1f}/s)")

        meta = build.embed_stage(docsvault.settings(), source, docsvault.embedder(source), progress=progress)
        context.log.info(f"{source.name}: {meta['embedded']} chunks embedded, {meta['cached']} from cache")
        return _result(meta)

    @dg.asset_check(asset=raw_docs, blocking=True,
                    description="The fetch produced at least one file (a local folder may be empty).")
    def has_files(docsvault: DocsvaultResource) -> dg.AssetCheckResult:
        from pipeline.artifacts import load_state

        n = int(load_state(docsvault.settings(), source.name).get("files", 0))
        return dg.AssetCheckResult(passed=n > 0 or source.kind == "local", metadata={"files": n})

    @dg.asset_check(asset=vault, blocking=True, description="Every note's frontmatter parses and has source_path.")
    def frontmatter_valid(docsvault: DocsvaultResource) -> dg.AssetCheckResult:
        res = build.frontmatter_check(docsvault.settings(), source)
        return dg.AssetCheckResult(passed=not res["invalid"], metadata={
            "notes": res["notes"], "invalid": res["invalid"], "first_invalid": res["first_invalid"],
            "cached": res["cached"]})

    return [raw_docs, notes, vault, chunks, embeddings, has_files, frontmatter_valid]


def shared_assets(sources: Sequence[Source]) -> list[Any]:
    """Stages over all sources: graph, warehouse, search index, eval."""
    vault_keys = [key("vault", s) for s in sources]
    embedding_keys = [key("embeddings", s) for s in sources]

    @dg.asset(key=key("link_graph"), pool=SHARED_POOL, deps=vault_keys, group_name="graph", kinds={"networkx"},
              description="Wikilink graph of the vault (Obsidian resolution), exported as GraphML and JSON.")
    def link_graph(docsvault: DocsvaultResource) -> dg.MaterializeResult:
        meta = build.graph_stage(docsvault.settings(), sources)
        return _result(meta, graphml=dg.MetadataValue.path(meta["graphml"]))

    @dg.asset(key=key("warehouse"), pool=SHARED_POOL, deps=[link_graph, *embedding_keys], group_name=SHARED_GROUP,
              kinds={"duckdb"},
              description="One DuckDB file: notes, chunks, links, vectors (HNSW, cosine) and BM25; published atomically.")
    def warehouse(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        from pipeline.defs.resources import cached_embedder

        meta = build.warehouse_stage(docsvault.settings(), sources, embedder_factory=cached_embedder)
        context.log.info(f"warehouse: {meta['notes']} notes, {meta['chunks']} chunks -> {meta['path']}")
        return _result(meta, path=dg.MetadataValue.path(meta["path"]))

    @dg.asset(key=key("search_index"), pool=SHARED_POOL, deps=[warehouse], group_name=SHARED_GROUP, kinds={"duckdb"},
              description="Serving check of the search indexes: HNSW used by the vector lane, a sample hybrid query.")
    def search_index(docsvault: DocsvaultResource) -> dg.MaterializeResult:
        from pipeline.defs.resources import cached_embedder

        meta = build.search_index_stage(docsvault.settings(), embedder_factory=cached_embedder)
        return _result(meta)

    @dg.asset_check(asset=search_index, blocking=True,
                    description="The vector lane's plan uses the HNSW index (vacuous when no source has a chunk).")
    def hnsw_index_used(docsvault: DocsvaultResource) -> dg.AssetCheckResult:
        from pipeline.warehouse import connect, explain_vector_search, list_models, stats

        con = connect(docsvault.settings().warehouse_path, read_only=True)
        try:
            plans = {m["model_id"]: explain_vector_search(con, m["table_name"]) for m in list_models(con)}
            chunks = int(stats(con)["chunks"])
        finally:
            con.close()
        ok = all("HNSW_INDEX_SCAN" in p for p in plans.values()) if plans else chunks == 0
        return dg.AssetCheckResult(passed=ok, metadata={"models": list(plans), "chunks": chunks})

    @dg.asset(key=key("retrieval_eval"), pool=SHARED_POOL, deps=[search_index], group_name="eval", kinds={"python"},
              description="Ablation (each lane alone and hybrid) of the eval cases (DOCSVAULT_EVALS): hit@1, hit@3, "
                          "MRR@10, nDCG@10 overall/per source/kind; each run appended to <data>/eval_runs.duckdb.")
    def retrieval_eval(context: dg.AssetExecutionContext, docsvault: DocsvaultResource) -> dg.MaterializeResult:
        from pipeline.defs.resources import cached_embedder
        from pipeline.evaluate import METRICS, best_single_lane, format_ablation

        report = build.eval_stage(docsvault.settings(), sources, embedder_factory=cached_embedder)
        overall, setups = report["overall"], report.get("setups") or {}
        meta: dict[str, Any] = {"n": int(overall.get("n", 0)), "skipped": bool(report.get("skipped")),
                                "history": dg.MetadataValue.path(report["history"]),
                                "history_rows": int(report.get("history_rows", 0))}
        for metric in METRICS:                                   # the hybrid set-up (plotted across runs)
            if metric in overall:
                meta[metric.replace("@", "_at_")] = dg.MetadataValue.float(float(overall[metric]))
        for name, row in sorted(report.get("by_source", {}).items()):
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
            meta["config"] = dg.MetadataValue.json(report.get("config", {}))
        context.log.info(f"eval (hybrid): {overall}")
        return dg.MaterializeResult(metadata=meta)

    def _last_eval(docsvault: DocsvaultResource) -> dict[str, Any]:
        from pipeline.artifacts import load_state

        return (load_state(docsvault.settings(), build.SHARED_STATE).get("eval") or {}).get("report") or {}

    @dg.asset_check(asset=retrieval_eval, description="Hybrid pooled MRR@10 and hit@3 at or above their floors "
                    "(DOCSVAULT_EVAL_MIN_MRR, DOCSVAULT_EVAL_MIN_HIT3); passes with a note when no case was scored.")
    def eval_floors(docsvault: DocsvaultResource) -> dg.AssetCheckResult:
        from pipeline.evaluate import check_floors, floors_from_env

        outcome = check_floors(_last_eval(docsvault), floors_from_env())
        return dg.AssetCheckResult(passed=outcome.passed, metadata=outcome.metadata)

    @dg.asset_check(asset=retrieval_eval, description="Hybrid pooled MRR@10 at or above the best single lane's.")
    def hybrid_beats_single_lanes(docsvault: DocsvaultResource) -> dg.AssetCheckResult:
        from pipeline.evaluate import check_fusion_gain

        outcome = check_fusion_gain(_last_eval(docsvault))
        return dg.AssetCheckResult(passed=outcome.passed, metadata=outcome.metadata,
                                   severity=dg.AssetCheckSeverity.WARN)

    return [link_graph, warehouse, search_index, hnsw_index_used, retrieval_eval, eval_floors,
            hybrid_beats_single_lanes]


SHARED_STAGES = ("link_graph", "warehouse", "search_index", "retrieval_eval")
PER_SOURCE_STAGES = ("raw_docs", "notes", "vault", "chunks", "embeddings")
