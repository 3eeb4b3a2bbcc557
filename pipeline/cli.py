"""`docsvault` command line: a thin shell over the library core.

Search and eval never import Dagster (fast cold start); `build` runs the assets through Dagster.
Errors are one line on stderr with exit code 1; JSON goes to stdout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # numpy and torch share 2 cores: avoid busy-wait (p95 5-8x)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402

from pipeline.config import Settings  # noqa: E402
from pipeline.errors import PipelineError  # noqa: E402

app = typer.Typer(
    name="docsvault",
    help="Docs and Obsidian vaults -> one Obsidian vault, a link graph and a local DuckDB warehouse with hybrid search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
sources_app = typer.Typer(help="Check and list the sources of sources.yaml.", no_args_is_help=True)
app.add_typer(sources_app, name="sources")

_state: dict[str, Settings] = {}


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def settings() -> Settings:
    return _state["settings"]


@app.callback()
def main_options(
    sources: Annotated[Optional[Path], typer.Option("--sources", help="sources.yaml [env DOCSVAULT_SOURCES]")] = None,
    data: Annotated[Optional[Path], typer.Option("--data", help="data dir [env DOCSVAULT_DATA, ./data]")] = None,
    vault: Annotated[Optional[Path], typer.Option("--vault", help="vault dir [env DOCSVAULT_VAULT, ./vault]")] = None,
) -> None:
    """Paths come from these flags, else the environment, else the defaults."""
    _state["settings"] = Settings.from_env(sources_file=sources, data_dir=data, vault_dir=vault)


@app.command()
def build(
    source: Annotated[Optional[list[str]], typer.Option("--source", "-s", help="Only these sources (repeatable).")] = None,
) -> None:
    """Fetch, normalize, write the vault, chunk, embed and publish the warehouse (through Dagster)."""
    from pipeline.sources import load_sources, select_sources

    s = settings()
    try:
        select_sources(load_sources(s.sources_file), source)   # validate before starting Dagster
        from pipeline.defs.runner import run_build

        report = run_build(s, source)
    except PipelineError as exc:
        fail(str(exc))
        return
    typer.echo(f"{'source':24} {'status':8} {'notes':>6} {'chunks':>7} {'embedded':>9}  detail")
    for st in report.sources:
        vault_meta = st.metadata.get("vault", {})
        emb = st.metadata.get("embeddings", {})
        detail = f"failed at {st.failed_stage}: {st.error}" if not st.ok else (
            f"{vault_meta.get('written', 0)} written, {vault_meta.get('removed', 0)} removed")
        typer.echo(
            f"{st.name:24} {'ok' if st.ok else 'FAILED':8} {vault_meta.get('notes', '-'):>6} "
            f"{emb.get('chunks', '-'):>7} {emb.get('embedded', '-'):>9}  {detail}"
        )
    wh = report.shared_metadata.get("warehouse", {})
    ev = report.shared_metadata.get("retrieval_eval", {})
    if report.shared_ok:
        typer.echo(f"warehouse: {wh.get('notes', 0)} notes, {wh.get('chunks', 0)} chunks -> {wh.get('path', '')}")
        if ev.get("n"):
            typer.echo("eval: n={n} hit@1={h1:.3f} hit@3={h3:.3f} MRR@10={mrr:.3f} nDCG@10={nd:.3f}".format(
                n=ev["n"], h1=ev.get("hit_at_1", 0), h3=ev.get("hit_at_3", 0), mrr=ev.get("mrr_at_10", 0),
                nd=ev.get("ndcg_at_10", 0)))
    else:
        typer.echo(f"shared stages FAILED: {report.shared_error}", err=True)
    failed = [st.name for st in report.sources if not st.ok]
    if failed:
        typer.echo(f"error: {len(failed)} source(s) failed: {', '.join(failed)} (their last good copy still serves)",
                   err=True)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What you are looking for, in any words (English or Japanese).")],
    k: Annotated[int, typer.Option("-k", min=1, max=100, help="Number of results.")] = 10,
    source: Annotated[Optional[list[str]], typer.Option("--source", "-s", help="Only these sources.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list of hits on stdout.")] = False,
) -> None:
    """Hybrid search (BM25 + vector, RRF k=60, at most 2 chunks per note)."""
    from pipeline.search import Searcher

    try:
        searcher = Searcher(settings().warehouse_path)
        hits = searcher.search(query, k=k, source=source or None)
    except PipelineError as exc:
        fail(str(exc))
        return
    if as_json:
        keys = ("rank", "source", "source_path", "vault_path", "title", "heading", "score", "snippet")
        typer.echo(json.dumps([{key: getattr(h, key) for key in keys} for h in hits], ensure_ascii=False, indent=2))
        return
    if not hits:
        typer.echo("no results")
        return
    for h in hits:
        where = f"{h.vault_path}" + (f" > {h.heading}" if h.heading else "")
        typer.echo(f"{h.rank:>2}. {h.score:.4f}  {where}")
        typer.echo(f"    {h.snippet}")


@app.command("eval")
def eval_(
    files: Annotated[Optional[list[Path]], typer.Argument(help="Eval case files or folders (default DOCSVAULT_EVALS or evals/).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Metrics as JSON on stdout.")] = False,
) -> None:
    """hit@1, hit@3, MRR@10 and nDCG@10 of eval cases against the built warehouse."""
    from pipeline.build import eval_files
    from pipeline.evaluate import format_report, load_cases, run_eval
    from pipeline.search import Searcher

    try:
        paths = list(files or []) or eval_files(settings())
        if not paths:
            fail("no eval files: pass FILE... or create evals/ (format: see README)")
        cases = load_cases(paths)
        report = run_eval(Searcher(settings().warehouse_path), cases)
    except PipelineError as exc:
        fail(str(exc))
        return
    if as_json:
        out = {k: report[k] for k in ("overall", "by_source", "by_kind") if k in report}
        if report.get("skipped"):
            out["skipped"] = report["skipped"]
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))
    else:
        typer.echo(format_report(report))


@app.command()
def status() -> None:
    """Sources, their last build, and the warehouse (path, size, counts)."""
    from pipeline.artifacts import load_state
    from pipeline.sources import load_sources

    s = settings()
    try:
        sources = load_sources(s.sources_file)
    except PipelineError as exc:
        fail(str(exc))
        return
    typer.echo(f"sources: {s.sources_file}")
    for src in sources:
        st = load_state(s, src.name)
        typer.echo(f"  {src.name:24} {src.kind:8} fetch={st.get('fetch_status', 'never')} "
                   f"files={st.get('files', '-')} chunks={st.get('chunks', '-')} last={st.get('fetched_at', '-')}")
    wh = s.warehouse_path
    if wh.exists():
        typer.echo(f"warehouse: {wh} ({wh.stat().st_size / 1e6:.1f} MB), model {s.model}")
    else:
        typer.echo(f"warehouse: {wh} (not built yet: run `docsvault build`)")


@sources_app.command("validate")
def sources_validate() -> None:
    """Validate sources.yaml; errors name the source, the key and what is allowed."""
    from pipeline.sources import load_sources

    try:
        n = len(load_sources(settings().sources_file))
    except PipelineError as exc:
        fail(str(exc))
        return
    typer.echo(f"{settings().sources_file}: {n} source(s), valid")


@sources_app.command("list")
def sources_list() -> None:
    """List the sources of sources.yaml."""
    from pipeline.sources import load_sources

    try:
        sources = load_sources(settings().sources_file)
    except PipelineError as exc:
        fail(str(exc))
        return
    for src in sources:
        where = src.url or ", ".join(str(p) for p in src.path)
        typer.echo(f"{src.name:24} {src.kind:8} {src.format or 'auto':10} {where}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
