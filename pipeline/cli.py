"""`docsvault` command line: a thin shell over the library core.

Search, read and eval never import Dagster (fast cold start); `build` runs the assets through Dagster; `mcp` imports
the MCP SDK only when it runs. Errors are one line on stderr; JSON goes to stdout, alone. Exit codes are grep's
(:data:`EXIT_OK`, :data:`EXIT_NONE`, :data:`EXIT_ERROR`; 130 when interrupted); a reader that closes the pipe early
(`docsvault search … | head -1`) changes none of them.
"""

from __future__ import annotations

import errno
import gc
import json
import logging
import math
import os
import re
import shutil
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Self

from pipeline.config import library_env_default as _env_default

_env_default("OPENBLAS_NUM_THREADS", "1")   # numpy and torch share 2 cores: avoid busy-wait (p95 5-8x)
_env_default("HF_HUB_OFFLINE", "1")
_env_default("TOKENIZERS_PARALLELISM", "false")

import typer

from pipeline.common.errors import BuildInterrupted, PipelineError, StorageProblem, one_line, storage_problem
from pipeline.common.gcpause import collector_paused
from pipeline.config import Settings, eval_env_paths, eval_paths, float_env, no_color, scoped_env, set_env
from pipeline.service import (
    NO_RESULTS,
    build_failure,
    build_outcome,
    capture_related,
    child_env,
    copied_line,
    eval_json,
    link_problems,
    missing_vectors_line,
    no_hits_message,
    no_notes_line,
    no_results_message,
    noop_build,
    note_links,
    note_missing_message,
    open_searcher,
    pages_not_fetched_line,
    parse_lanes,
    query_problem,
    query_words_line,
    record_build_failure,
    related_notes,
    run_search,
    search_lanes,
    skipped_files,
    source_warning_lines,
    status_data,
    untagged_message,
    warnings_about,
    write_dirs_problem,
)


def _errors_file(s: Settings, source: str) -> Path:
    """:func:`pipeline.ingest.normalize.errors_file`, imported when needed (a search never needs normalize)."""
    from pipeline.ingest.normalize import errors_file

    return errors_file(s, source)


if TYPE_CHECKING:
    from pipeline.models import Hit
    from pipeline.search.searcher import Searcher
    from pipeline.stages.results import BuildReport

app = typer.Typer(
    name="docsvault",
    help="Docs and Obsidian vaults -> one Obsidian vault, a link graph and a local DuckDB warehouse with hybrid search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
sources_app = typer.Typer(help="Check and list the sources of sources.yaml.", no_args_is_help=True,
                          rich_markup_mode=None)
app.add_typer(sources_app, name="sources")

_state: dict[str, Settings] = {}

#: keys of one ``search --json`` hit, in order (stable; ``--explain`` adds ``lanes`` and ``explain``)
HIT_KEYS = ("rank", "source", "source_path", "vault_path", "title", "heading", "score", "snippet", "context")
#: outlinks / backlinks listed per ``search --json`` hit
SEARCH_LINKS_CAP = 5
#: keys of one ``search --files --json`` row
FILE_KEYS = ("rank", "source", "source_path", "vault_path", "title", "score")


#: exit codes, as grep's (README "Exit codes"): done, and something found (a hit, a valid file, no problem)
EXIT_OK = 0
#: done, and nothing found: ``search`` had no hit, ``check-vault`` and ``sources validate`` found a problem
EXIT_NONE = 1
#: not done: a bad option or argument, no warehouse, a failed build, an unreadable file, an internal error
EXIT_ERROR = 2


def fail(message: str, code: int = EXIT_ERROR) -> None:
    """Print ``error: <message>`` (first line only, :func:`pipeline.common.errors.one_line`) on stderr and exit ``code`` (:data:`EXIT_NONE` only for the
    one problem a check command found, e.g. ``sources validate``'s unreadable file)."""
    line = one_line(message) or "failed"
    typer.echo(f"error: {line}", err=True)
    raise typer.Exit(code)


def settings() -> Settings:
    return _state["settings"]


def refuse_unwritable_dirs(s: Settings) -> None:
    """Before a build (``build``, ``capture``): one line and exit 2 when the data dir, the vault or ``DAGSTER_HOME``
    cannot be made or written (:func:`pipeline.service.write_dirs_problem`), so nothing starts and no source
    failure is recorded. A vault or data dir inside a local source's folder is refused first
    (:func:`pipeline.stages.check_layout`, which the build checks too): the check made the folder, so a build
    refused for `DOCSVAULT_VAULT=notes/vault` left an empty `vault/` among the notes (session 48)."""
    from pipeline.ingest.sources import load_sources
    from pipeline.stages import check_layout

    try:
        sources = load_sources(s.sources_file)
    except PipelineError:       # an invalid or missing sources file: the command's own load says so
        sources = []
    try:
        check_layout(s, sources)
    except PipelineError as exc:
        fail(str(exc))
        return
    problem = write_dirs_problem(s)
    if problem:
        fail(problem)


def _color() -> bool:
    return sys.stdout.isatty() and not no_color()


def _version(value: bool) -> None:
    """``--version``: ``docsvault <version>`` of the installed distribution, then exit 0."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"docsvault {version('docsvault')}")
        except PackageNotFoundError:            # run from a source tree that is not installed
            from pipeline import __version__

            typer.echo(f"docsvault {__version__} (not installed)")
        raise typer.Exit()


@app.callback()
def main_options(
    sources: Annotated[Path | None, typer.Option("--sources", metavar="FILE", help="sources.yaml [env DOCSVAULT_SOURCES]")] = None,
    data: Annotated[Path | None, typer.Option("--data", metavar="DIR", help="data dir [env DOCSVAULT_DATA, ./data]")] = None,
    vault: Annotated[Path | None, typer.Option("--vault", metavar="DIR", help="vault dir [env DOCSVAULT_VAULT, ./vault]")] = None,
    synonyms: Annotated[Path | None, typer.Option("--synonyms", metavar="FILE", help="BM25 query synonyms [env DOCSVAULT_SYNONYMS, synonyms.yaml next to sources.yaml]")] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Paths come from these flags, else the environment, else the defaults."""
    _state["settings"] = Settings.from_env(sources_file=sources, data_dir=data, vault_dir=vault, synonyms=synonyms)


# ---------------------------------------------------------------------------------------------------------------
# build


@app.command()
def build(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", metavar="NAME", help="Only these sources (repeatable).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show Dagster's step log on stderr.")] = False,
    wait: Annotated[float, typer.Option("--wait", metavar="SECONDS", min=0.0, help="Wait this long for another running `docsvault build` to finish (default: refuse at once; a Dagster run's step holding the lock is waited for anyway, up to DOCSVAULT_LOCK_WAIT).")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Every source's outcome and the shared stages as JSON on stdout (keys in README).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Redo everything of the selected sources (all by default): normalize, vault, chunk, embed every chunk again, write the warehouse in full.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (neither the bar nor the log lines).")] = False,
    remove_all_sources: Annotated[bool, typer.Option("--remove-all-sources", help="When sources.yaml lists no sources: remove every built source (vault folders and data); refused without this option.")] = False,
    no_eval: Annotated[bool, typer.Option("--no-eval", help="Leave the retrieval eval out (a few seconds on large vaults); the next build without it evaluates this warehouse.")] = False,
    wait_arg: Annotated[str, typer.Option("--wait-arg", hidden=True, help="How the caller's user sets --wait, for the lock error (the MCP refresh tool passes its `wait` argument).")] = "--wait SECONDS",
) -> None:
    """Fetch, normalize, write the vault, chunk, embed and publish the warehouse (through Dagster).

    Only what changed is redone: unchanged sources skip normalize/vault/chunk, only new chunk texts are embedded,
    and the warehouse is updated incrementally (or not at all when nothing changed).

    \f
    Long: a typer command: the option declarations, then the text rendering of the build report (the JSON is
    service.build_outcome).
    """
    import time as _time

    from pipeline.ingest.fetch.base import left_out_templates
    from pipeline.ingest.sources import load_sources, select_sources

    s = settings()
    started = _time.perf_counter()
    bar = _BuildProgress(progress_mode(quiet, verbose))
    try:
        configured = load_sources(s.sources_file)
        select_sources(configured, source)   # validate before starting Dagster
        refuse_unwritable_dirs(s)
        with _stop_on_signals():
            report = noop_build(s, source, wait=wait, force=force, wait_arg=wait_arg)
        if report is None:
            from pipeline.defs.runner import run_build
            from pipeline.stages import FORCE_ENV

            with scoped_env({FORCE_ENV: ",".join(source) if source else "*"} if force else {}), bar, \
                    _stop_on_signals():
                report = run_build(s, source, log_level="INFO" if verbose else "CRITICAL", wait=wait,
                                   progress=bar.update, remove_all_sources=remove_all_sources, wait_arg=wait_arg,
                                   evaluate=not no_eval, note_changes=as_json)
    except PipelineError as exc:
        fail(str(exc))
        return
    except Exception as exc:            # a full disk where Dagster records the run: _main prints the line
        if (problem := _storage_problem(exc)) is not None:
            # status says so, and the next build does not call this one killed (quoting its cause)
            record_build_failure(s, problem.line, cause=problem.cause)
        raise
    except BuildInterrupted as exc:   # one line, exit 128 + the signal (Click would print "Aborted!" for it)
        again = "docsvault build" + (" --force" if force else "") + "".join(f" --source {n}" for n in source or [])
        typer.echo(f"error: {exc.line(again)}", err=True)
        sys.exit(128 + (exc.signum or signal.SIGINT))       # SystemExit passes Typer by: not `_main`'s 130 below
    if as_json:
        out = build_outcome(report).as_dict()
        out["seconds"] = round(_time.perf_counter() - started, 1)
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))
        if not report.ok:
            raise typer.Exit(EXIT_ERROR)
        return
    for line in report.removed:
        typer.echo(line)
    if report.upgraded:
        typer.echo(_upgrade_line(report.upgraded))
    typer.echo(f"{'source':24} {'status':9} {'notes':>6} {'chunks':>7} {'embedded':>9}  detail")
    outcomes = {o.name: o for o in build_outcome(report).sources}
    templates = {x.name: left_out_templates(x) for x in configured}
    for st in report.sources:
        vault_meta = st.metadata.get("vault", {})
        emb = st.metadata.get("embeddings", {})
        chunk_meta = st.metadata.get("chunks", {})
        if not st.ok:
            detail = f"failed at {st.failed_stage}: {st.error}"
        elif vault_meta.get("skipped") and chunk_meta.get("skipped") and not emb.get("embedded"):
            detail = f"nothing changed since the {'interrupted' if report.resumed else 'last'} build"
        elif vault_meta.get("skipped") and chunk_meta.get("skipped"):
            detail = "notes unchanged"        # chunks a killed build had not embedded yet
        else:
            detail = f"{vault_meta.get('written', 0)} written, {vault_meta.get('removed', 0)} removed"
            if chunk_meta.get("rechunked"):
                detail += f", {chunk_meta['rechunked']} notes re-chunked"
        if emb.get("embedded"):
            rate = emb.get("chunks_per_s") or 0
            detail += f", {emb['embedded']} embedded at {rate:g}/s"
        typer.echo(
            f"{st.name:24} {outcomes[st.name].status:9} {vault_meta.get('notes', '-'):>6} "
            f"{emb.get('chunks', '-'):>7} {emb.get('embedded', '-'):>9}  {detail}"
        )
        if st.ok and st.metadata.get("raw_docs", {}).get("files") == 0:
            typer.echo(f"warning: {no_notes_line(st)}", err=True)
        for line in source_warning_lines(st):
            typer.echo(f"warning: {line}", err=True)
        notes_meta = st.metadata.get("notes", {})
        if notes_meta.get("errors"):
            where = notes_meta.get("errors_file") or str(_errors_file(settings(), st.name))
            typer.echo(f"  {st.name}: {notes_meta['errors']} file(s) skipped, each with its reason in {where}")
            shown = (notes_meta.get("error_lines") or [])[:3]
            for line in shown:
                typer.echo(f"    {line}")
            if shown and int(notes_meta["errors"]) > len(shown):
                typer.echo(f"    … and {int(notes_meta['errors']) - len(shown)} more (see {where})")
        not_fetched = pages_not_fetched_line(st)
        if not_fetched:
            typer.echo(f"  {not_fetched}")
        for line in vault_lines(st.name, vault_meta, settings().state_dir, templates.get(st.name, ())):
            typer.echo(f"  {line}")
        if emb.get("model_changed"):
            typer.echo(f"  {st.name}: embedding model changed ({emb['model_changed']}): every chunk re-embedded; "
                       "search uses the new vectors only")
    wh = report.shared_metadata.get("warehouse", {})
    ev = report.shared_metadata.get("retrieval_eval", {})
    if report.shared_ok:
        if wh.get("skipped"):
            how = "unchanged, not republished"
        elif wh.get("mode") == "incremental":
            how = (f"updated incrementally: {wh.get('changed_chunks', 0)} chunks changed, "
                   f"{wh.get('removed_chunks', 0)} removed")
            if not wh.get("changed_chunks") and not wh.get("removed_chunks") and (
                    wh.get("vectors_added") or wh.get("vectors_removed")):
                # the same chunks, other vectors: a model took up or left some (e.g. the cross-lingual depth)
                how += f"; vectors: {wh.get('vectors_added', 0)} added, {wh.get('vectors_removed', 0)} removed"
        else:
            how = "written in full" + (f" ({wh['reason']})" if wh.get("reason") not in (None, "", "requested") else "")
        typer.echo(f"warehouse: {wh.get('notes', 0)} notes, {wh.get('chunks', 0)} chunks -> {wh.get('path', '')} "
                   f"({how})")
        if wh.get("rebuilt_because"):
            typer.echo(f"  the previous warehouse could not be used and was rebuilt: {wh['rebuilt_because']}")
        if wh.get("missing_vectors_in"):
            typer.echo(f"warning: {missing_vectors_line(wh['missing_vectors_in'])}", err=True)
        if ev.get("n"):
            typer.echo("eval: n={n} hit@1={h1:.3f} hit@3={h3:.3f} MRR@10={mrr:.3f} nDCG@10={nd:.3f}".format(
                n=ev["n"], h1=ev.get("hit_at_1", 0), h3=ev.get("hit_at_3", 0), mrr=ev.get("mrr_at_10", 0),
                nd=ev.get("ndcg_at_10", 0))
                + (f" ({ev['unreachable']} of the {ev['n']} cases expect a page that is not built, scored as misses: "
                   "`docsvault eval` lists them)" if ev.get("unreachable") else "")
                + (f" ({ev['skipped_cases']} case(s) left out, their corpus is no built source: "
                   f"{ev['skipped_corpora']}; fix `corpus:` or build the source)" if ev.get("skipped_cases") else ""))
        elif "eval_files" in ev and ev["eval_files"] == "none" and (named := _eval_env_all_missing()):
            # a misspelt DOCSVAULT_EVALS: name the missing path, not "point DOCSVAULT_EVALS at your cases"
            typer.echo(f"eval: no case scored: DOCSVAULT_EVALS names {', '.join(map(str, named))}, which "
                       f"{'does' if len(named) == 1 else 'do'} not exist; create it or fix DOCSVAULT_EVALS "
                       "(README: Eval files)")
        elif "eval_files" in ev and (empty := _caseless_eval_folders(ev["eval_files"])):
            typer.echo(f"eval: no case scored: {empty} holds no eval file (*.yaml, *.yml): add your cases there, "
                       "or point DOCSVAULT_EVALS at them (README: Eval files)")
        elif "eval_files" in ev:
            typer.echo(f"eval: no eval case is about a built source (eval files: {ev['eval_files']}"
                       + (f"; their corpora: {ev['skipped_corpora']}" if ev.get("skipped_corpora") else "")
                       + "); point DOCSVAULT_EVALS at your cases (README: Eval files)")
        elif no_eval and not report.noop:
            typer.echo("eval: not run (--no-eval); the next build evaluates this warehouse")
        if not no_eval and (gone := _missing_eval_paths()):
            typer.echo(f"warning: {gone}", err=True)
    else:
        typer.echo(f"error: shared stages failed: {report.shared_error}", err=True)
    for line in report.check_warnings:
        typer.echo(f"warning: {line}", err=True)
    failed_before = build_failure(s, clear=report.ok)
    if report.resumed:
        typer.echo(resumed_line(report, failed_before))
    if report.noop:
        typer.echo("no Dagster run was needed: nothing changed since the last successful build (--force redoes it)")
    typer.echo(f"build took {_time.perf_counter() - started:.1f} s")
    failed = [st.name for st in report.sources if not st.ok]
    if failed:
        typer.echo(f"error: {len(failed)} source(s) failed: {', '.join(failed)} (a failed source's last good copy, if it has one, keeps serving search)",
                   err=True)
    if not report.ok:
        raise typer.Exit(EXIT_ERROR)


def resumed_line(report: BuildReport, failed: Mapping[str, str] | None = None) -> str:
    """What a build did for the killed builds it found unfinished (``report.resumed``: when each started; the
    Dagster runs of other commands among them in ``report.resumed_runs``), e.g. ``finished the build started
    at 2026-01-01T10:00:00+00:00, which was killed: search now has what it had built`` (this build wrote the
    warehouse), ``finished the Dagster run 2feea5dc started at … (sources: notes), which was killed: …`` (a
    killed ``dagster asset materialize``: its run id's first 8 characters, as the UI shows it, and the sources
    it was to materialize), ``…: search already had everything it had built`` (the warehouse's inputs were
    unchanged: it had published, or built nothing new) or, when this build failed, ``redid what the build …
    had left unfinished, as far as this build got (…)``. ``failed``: the disk failure the last build ended on
    (:func:`pipeline.service.build_failure`), recorded after such a build started: that build was not killed but
    stopped on it, ``which stopped on a full or failing disk (cannot write …)``, not ``which was killed``."""
    from collections import Counter

    one = len(report.resumed) == 1
    builds = list((Counter(report.resumed) - Counter(r.started for r in report.resumed_runs)).elements())
    parts = [f"the build{'' if len(builds) == 1 else 's'} started at {', '.join(builds)}"] if builds else []
    parts += [f"the Dagster run {r.run_id[:8]} started at {r.started}"
              + (f" (sources: {', '.join(r.sources)})" if r.sources else "") for r in report.resumed_runs]
    which = f"{' and '.join(parts)}, which {'was' if one else 'were'} killed"
    if failed and one and str(failed.get("at") or "") >= report.resumed[0]:
        which = (f"{' and '.join(parts)}, which stopped on a full or failing disk "
                 f"({failed.get('cause') or failed['error']})")
    it = "it" if one else "they"
    if not report.ok:
        return f"redid what {which}, had left unfinished, as far as this build got (see the errors)"
    if report.shared_metadata.get("warehouse", {}).get("skipped"):
        # the warehouse's inputs are what it was built from: the killed build published, or built nothing new
        # (a forced rebuild killed before its warehouse step redoes the same content)
        return f"finished {which}: search already had everything {it} had built"
    return f"finished {which}: search now has what {it} had built"


def vault_lines(name: str, meta: dict[str, Any], state_dir: Path | None = None,
                templates: Sequence[str] = ()) -> list[str]:
    """What the vault stage did with files a user may care about: edited notes moved aside, the user's own files
    kept, notes removed, attachments not copied (see ``pipeline.stages.vault_stage``). ``templates``: the source's
    Obsidian templates folders it leaves out (:func:`pipeline.ingest.fetch.base.left_out_templates`), whose removed
    notes are named apart: their pages are still in the source, which leaves the folder out."""
    from pipeline.ingest.ownership import conflict_original, load_yours
    from pipeline.stages.ingest import FOREIGN, conflict_line

    records = list(meta.get("conflicts") or [])
    lines = [f"{name}: {conflict_line(name, c)}" for c in records]
    copies = {c.removesuffix(FOREIGN).split(" -> ", 1)[1] for c in records}   # named above: not again as kept files
    copies |= set(meta.get("left_edited") or ())                            # named below, as such
    kept = int(meta.get("kept") or 0) - len(copies & set(meta.get("kept_files") or []))
    if kept > 0 and not meta.get("skipped"):
        listed = [f for f in meta.get("kept_files") or [] if f not in copies]
        # earlier builds' "(edited)" copies of your edits, named apart as `status` and `check-vault` name them; not
        # your own files an earlier build moved out of a note's way (the manifest's `yours`)
        yours = load_yours(Path(str(meta["vault_dir"]))) if meta.get("vault_dir") else set()
        older = [f for f in listed if conflict_original(f) is not None and f not in yours]
        shown = [f for f in listed if f not in older]
        own = kept - len(older)
        if own > 0:
            more = f" and {own - len(shown[:5])} more" if own > len(shown[:5]) else ""
            lines.append(f"{name}: kept {own} file(s) in vault/{name}/ that docsvault did not write: "
                         f"{', '.join(shown[:5])}{more}")
        if older:
            more = f" and {len(older) - 5} more" if len(older) > 5 else ""
            lines.append(f"{name}: kept {len(older)} copy(ies) of your edits to generated notes (merge and delete "
                         f"them when done): {', '.join(older[:5])}{more}")
    if meta.get("removed_files"):
        folders = tuple(f"{t}/" for t in templates)
        left = [f for f in meta["removed_files"] if not f.startswith(folders)]
        out = [f for f in meta["removed_files"] if f.startswith(folders)]
        total = max(int(meta.get("removed") or 0), len(meta["removed_files"]))
        if out:     # not "their pages left the source": the templates are still in it
            where = ", ".join(repr(f) for f in folders if any(x.startswith(f) for x in out))
            lines.append(f"{name}: removed (the Obsidian vault's templates folder {where}, which the source leaves "
                         f"out; the templates in the source are untouched): {', '.join(out[:5])}"
                         + (f" and {len(out) - 5} more" if len(out) > 5 else ""))
        if left or total > len(meta["removed_files"]):
            shown = left[:5]
            more = total - len(out) - len(shown)
            lines.append(f"{name}: removed (their pages left the source): {', '.join(shown)}"
                         + ((" and " if shown else "") + f"{more} more" if more > 0 else ""))
    if meta.get("left_edited"):
        edited = list(meta["left_edited"])
        lines.append(f"{name}: kept where they are, as your files (their pages left the source, but you edited them "
                     f"since the build wrote them): {', '.join(edited[:5])}"
                     + (f" and {len(edited) - 5} more" if len(edited) > 5 else ""))
    if meta.get("attachments_written"):
        lines.append(f"{name}: {meta['attachments_written']} attachment(s) copied "
                     f"({meta.get('attachments', 0)} in the vault, {meta.get('attachment_bytes', 0) / 2**20:.1f} MiB)")
    if meta.get("attachments_skipped") and not meta.get("skipped"):
        lines.append(f"{name}: {meta['attachments_skipped']} attachment(s)/link(s) not copied, each with its reason "
                     f"in {state_dir or '<data>/state'}/{name}.vault-skipped.txt")
        lines += [f"  {ln}" for ln in (meta.get("attachment_skip_lines") or [])[:3]]
    return lines


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """While a build runs: SIGINT and SIGTERM raise :class:`BuildInterrupted` (also when the shell handed the
    process an ignored SIGINT), so a build waiting for a lock or running a stage stops at once and its ``with``
    blocks release the locks; the previous handlers come back afterwards. Dagster's own handler takes over while
    the run executes (it fails the running step; the runner then raises BuildInterrupted)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise BuildInterrupted(signum)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class _BuildProgress:
    """Build progress on stderr: a rich bar per stage and source (rate, ETA) on a terminal, else a plain line every
    ~10 s (:class:`pipeline.common.progress.PlainProgress`); nothing when ``mode`` is ``"off"`` (``--quiet``).

    Args:
        mode: ``"bar"``, ``"lines"`` or ``"off"``.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._progress: Any = None
        self._plain: Any = None
        self._tasks: dict[tuple[str, str], Any] = {}

    def __enter__(self) -> Self:
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                      console=Console(stderr=True), transient=False)
            self._progress.start()
        elif self.mode == "lines":
            from pipeline.common.progress import PlainProgress

            interval = float_env("DOCSVAULT_PROGRESS_INTERVAL", 10)
            self._plain = PlainProgress(sys.stderr, interval=interval).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._plain is not None:
            self._plain.__exit__()

    def update(self, stage: str, source: str, done: int, total: int) -> None:
        if self._plain is not None:
            self._plain.update(stage, source, done, total)
            return
        if self._progress is None:
            return
        import time

        from pipeline.common.progress import UNITS

        key = (stage, source)
        if key not in self._tasks:
            self._tasks[key] = (self._progress.add_task(f"{stage:9} {source}", total=total or None, rate=""),
                                time.perf_counter())
        task, t0 = self._tasks[key]
        elapsed = time.perf_counter() - t0
        rate = f"{done / elapsed:.1f} {UNITS.get(stage, '')}/s" if done and elapsed > 0 and total else ""
        if total and done >= total:
            rate = ""
        self._progress.update(task, completed=done, total=total or None, rate=rate)


def progress_mode(quiet: bool, verbose: bool = False) -> str:
    """``off`` with --quiet (or --verbose, whose Dagster log says the same), ``bar`` on a terminal, else ``lines``."""
    if quiet or verbose:
        return "off"
    return "bar" if sys.stderr.isatty() else "lines"


# ---------------------------------------------------------------------------------------------------------------
# search


def query_terms(query: str, analyzer_tokens: Sequence[str] = ()) -> list[str]:
    """Terms to highlight: the query's words (in NFKC, 2+ letters, English stopwords dropped), its analyzer terms
    (Japanese ones of 2+ characters, Latin stems of 3+ letters: ``feed`` of ``feeding`` marks ``feeds``) and its
    Japanese words as typed: the katakana runs (2+) and kanji runs (any length: 岩 is a
    word) of the query. The analyzer's terms are normalised forms (カワウソ -> 川獺) that a page may not contain
    as written."""
    import unicodedata

    from pipeline.index.analysis import STOPWORDS_EN

    cjk = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
    query = unicodedata.normalize("NFKC", query)           # ＤｕｃｋＤＢ typed with an IME: the word duckdb
    # lower(), not casefold(): 'straße' casefolds to 'strasse', which no regex matches in 'Straße'
    terms = {w.lower() for w in re.findall(r"\w+", query) if not cjk.search(w)}
    terms |= {t.casefold() for t in analyzer_tokens if cjk.search(t) and len(t) >= 2}
    terms = {t for t in terms if t.casefold() not in STOPWORDS_EN and len(t) >= 2}
    terms |= {t for t in analyzer_tokens if not cjk.search(t) and len(t) >= 3 and t not in STOPWORDS_EN}   # stems
    terms |= set(re.findall("[\u30a0-\u30ff]{2,}", query))                     # katakana words as typed
    terms |= set(re.findall("[\u3400-\u4dbf\u4e00-\u9fff]+", query))          # kanji words, 岩 too
    return sorted(terms, key=lambda t: (-len(t), t))


def term_pattern(terms: list[str]) -> re.Pattern[str] | None:
    """A regex matching any term: Latin terms at a word start (the rest of the word too), also written in
    full-width characters (:func:`~pipeline.search.snippet.width_insensitive`), CJK terms anywhere, their katakana
    also in half width (:func:`~pipeline.search.snippet.half_width_kana`: ``コーヒー`` marks ``ｺｰﾋｰ``), and also
    decomposed (NFD), as a file name copied from macOS' Finder writes ``ガジェット`` in a note (BM25 finds the note
    and the snippet is cut at the word, but before session 45 it was not marked)."""
    if not terms:
        return None
    import unicodedata

    from pipeline.search.snippet import LATIN_WORD_CHAR, WORD_START, half_width_kana, width_insensitive

    cjk = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
    parts = ["|".join(re.escape(v) for v in dict.fromkeys((t, half_width_kana(t), unicodedata.normalize("NFD", t))))
             if cjk.search(t)
             else f"{WORD_START}{width_insensitive(t)}{LATIN_WORD_CHAR}*" for t in terms]
    return re.compile("|".join(parts), re.IGNORECASE)


def highlight(text: str, pattern: re.Pattern[str] | None, color: bool) -> str:
    """Wrap matches in bold yellow ANSI codes when ``color``; the text unchanged otherwise."""
    if not color or pattern is None:
        return text
    return pattern.sub(lambda m: f"\x1b[1;33m{m.group(0)}\x1b[0m", text)


def explain_parts(hit: Hit, searcher: Searcher) -> dict[str, dict[str, float | int]]:
    """The parts whose sum is the hit's score: per lane ``{"rank", "weight", "score"}`` (the page's rank in
    that lane, the lane weight and its RRF part ``weight / (k_rrf + rank)``), then
    ``"usage_boost": {"score"}`` when the usage boost added something to the page (``Hit.boost`` != 0;
    ``--usage-boost``), then ``"exact": {"score"}``, what the page was given to come first: its title or an alias
    is the query, it holds the query verbatim or every code identifier of it (``Searcher._named_first``,
    ``Searcher._exact_first``). Scores rounded to 6 decimals."""
    from pipeline.search.searcher import rrf

    out: dict[str, dict[str, float | int]] = {}
    for lane, rank in sorted(hit.lanes.items()):
        w = float(searcher.weights.get(lane, 1.0))
        out[lane] = {"rank": int(rank), "weight": w, "score": round(rrf(w, rank, searcher.k_rrf), 6)}
    if hit.boost:
        out["usage_boost"] = {"score": round(hit.boost, 6)}
    moved = hit.score - sum(rrf(float(searcher.weights.get(lane, 1.0)), rank, searcher.k_rrf)
                            for lane, rank in hit.lanes.items()) - hit.boost
    if moved > 1e-6:
        out["exact"] = {"score": round(moved, 6)}
    return out


def _explain_line(hit: Hit, searcher: Searcher) -> str:
    if not hit.lanes and not hit.boost and not hit.score:     # listed past the lanes' pages by a filter
        return "explain: no lane ranked it: it passes the query's filters, listed by vault path = 0.0000"
    parts = explain_parts(hit, searcher)
    boost = parts.pop("usage_boost", None)
    exact = parts.pop("exact", None)
    k = f"{searcher.k_rrf:g}"
    shown = []
    lanes = list(searcher.default_lanes)
    for lane in lanes + sorted(set(parts) - set(lanes)):
        p = parts.get(lane)
        if p is None:
            shown.append(f"{lane} -")
            continue
        w = "" if p["weight"] == 1.0 else f"{p['weight']:g}x"
        shown.append(f"{lane} #{p['rank']} ({w}1/({k}+{p['rank']})={p['score']:.4f})")
    if boost is not None:
        shown.append(f"usage boost {boost['score']:.4f}")
    if exact is not None:
        shown.append(f"exact match first {exact['score']:.4f}")
    return "explain: " + " + ".join(shown) + f" = {hit.score:.4f}"


def _best_lines(lines: Sequence[str], start: int, end: int, pattern: re.Pattern[str] | None,
                keep: int = 3) -> list[int]:
    """Indexes (in order) of ``keep`` matching lines from ``start``: of the lines before ``end`` (the chunk), those
    with the most distinct matches of ``pattern`` (the earlier line on a tie); then, grep-like, the first matching
    lines after it."""
    if pattern is None:
        return []
    found = [i for i in range(start, len(lines)) if pattern.search(lines[i])]
    inside = [i for i in found if i < end]
    distinct = {i: len({m.group().casefold() for m in pattern.finditer(lines[i])}) for i in inside}
    best = sorted(inside, key=lambda i: -distinct[i])[:keep]
    return sorted(best + [i for i in found if i >= end][:keep - len(best)])


def _words_line(hits: Sequence[Hit], missing: Any, parsed: Any, sources: Sequence[str], skipped: Any,
                tags: Sequence[str]) -> str:
    """The stderr line of ``search --json``/``--files`` about the query's words: beside hits, those no note
    contains (:func:`query_words_line`); with none, why keyword-only lanes found nothing, as plain output says
    it (:func:`no_hits_message`; "" when it is only "No results")."""
    if hits:
        return query_words_line(missing, parsed.text, sources, skipped, tags, parsed.paths)
    message = no_hits_message(missing, parsed.text, sources, skipped, tags, parsed.paths)
    return f"({message})" if message != NO_RESULTS else ""


def _context_lines(hit: Hit, n: int, pattern: re.Pattern[str] | None, color: bool,
                   fallback: re.Pattern[str] | None = None) -> list[str]:
    """grep-like lines of the hit's section in its vault note: ``LINE:text`` matches, ``LINE-text`` context; a
    line as the note has it (Markdown, HTML) but without terminal escape sequences or control characters
    (:func:`~pipeline.search.snippet.strip_controls`, as in every hit's snippet, heading and title). No line
    matching ``pattern``: the lines matching ``fallback`` (a Japanese question's English translation)."""
    from pipeline.search.reader import locate, resolve_note_path
    from pipeline.search.snippet import strip_controls

    try:
        path, _ = resolve_note_path(settings().vault_dir, hit.vault_path)
        # line by line (an unclosed OSC ends with its line), before locating the chunk (its words as shown)
        raw = path.read_text(encoding="utf-8", errors="replace")
        lines = [strip_controls(line) for line in raw.split("\n")]
    except (PipelineError, OSError) as exc:
        return [f"(cannot show context: {str(exc).splitlines()[0]})"]
    start = 0
    if lines and lines[0].strip() == "---":                    # skip frontmatter
        for i in range(1, len(lines)):
            if lines[i].strip() in ("---", "..."):
                start = i + 1
                break
    # where the hit's chunk is: its snippet's opening words after its heading, else the heading (as MCP's search),
    # so two chunks of one long section show their own lines
    text = "\n".join(lines)
    body_at = len("\n".join(lines[:start])) + (1 if start else 0)
    at = body_at + locate(text[body_at:], hit.heading, hit.chunk_text or hit.snippet)
    start, col = text.count("\n", 0, at), at - (text.rfind("\n", 0, at) + 1)    # the chunk's line and column
    # like grep from there on: of the chunk's matching lines, the 3 with the most distinct query terms (the
    # first ones on a tie; a long chunk's first matching lines may hold one common term), else the first ones after
    matches = _best_lines(lines, start, start + (hit.chunk_text or "").count("\n") + 12, pattern)
    if not matches and fallback is not None:
        pattern = fallback
        matches = [i for i in range(start, len(lines)) if pattern.search(lines[i])][:3]
    # no line matches (a hit found by meaning alone): the chunk's first line, shown as context ('-'), not a match
    around = matches or [next((i for i in range(start, len(lines)) if lines[i].strip()), start)]
    shown: list[int] = []
    for i in around:
        for j in range(max(0, i - n), min(len(lines), i + n + 1)):
            if j not in shown:
                shown.append(j)
    shown.sort()
    out: list[str] = []
    for idx, j in enumerate(shown):
        if idx and j != shown[idx - 1] + 1:
            out.append("--")
        text = _long_line(lines[j], pattern if j in matches else None, col if j == start else 0)
        mark = ":" if j in matches else "-"
        out.append(f"{j + 1}{mark}{highlight(text, pattern, color)}")
    return out


def _long_line(line: str, pattern: re.Pattern[str] | None, col: int = 0, width: int = 200) -> str:
    """A ``--context`` line of at most about ``width`` chars: a longer one cut around its first match of
    ``pattern`` at or after ``col`` (else its first match: a long paragraph's match is often far past its
    start), without one from ``col`` (where the hit's chunk starts in it), ``…`` marking each cut end
    (:func:`~pipeline.search.snippet.cut_around`)."""
    from pipeline.search.snippet import cut_around

    if len(line) <= width:
        return line
    m = (pattern.search(line, col) or pattern.search(line)) if pattern is not None else None
    pos = m.start() if m else col
    # from the start too (a line around a match, or a match at its start): at a boundary, not after its 199th
    # character, which cut a Japanese word, or an emoji sequence (`👨‍` and a dangling joiner), in two
    return cut_around(line, pos, width)


def _refuse_spaced_tags(tags: Sequence[str] | None) -> None:
    """Fail on a ``--tag`` with a space inside (:func:`pipeline.search.query.tag_problem`): an Obsidian tag has
    none, so as a filter it never matches and in a captured note's frontmatter it is broken."""
    from pipeline.search.query import tag_problem

    for t in tags or ():
        if problem := tag_problem(t, f"--tag {t.strip()!r}"):
            fail(problem)


@app.command()
@collector_paused()     # a search loads ~1M objects to answer once: GC passes over them cost ~0.08 s, free nothing
def search(
    query: Annotated[str, typer.Argument(metavar="QUERY", help='What you are looking for, in any words (English or Japanese). Syntax: "exact phrase", -word, A OR B, source:NAME, tag:TAG, path:PREFIX (see README).')],
    k: Annotated[int, typer.Option("-k", metavar="N", min=1, max=100, help="Number of notes.")] = 10,
    source: Annotated[list[str] | None, typer.Option("--source", "-s", metavar="NAME", help="Only these sources (repeatable).")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", metavar="TAG", help="Only notes with one of these tags, frontmatter or inline #tag (repeatable; '#' optional; 'a' matches 'a/b').")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list of hits on stdout (keys in README).")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show each lane's page rank and the RRF parts of every score.")] = False,
    files: Annotated[bool, typer.Option("--files", "-l", help="Note paths and scores only, one line per note.")] = False,
    context: Annotated[int | None, typer.Option("--context", "-C", metavar="N", min=0, max=20, help="Show N lines of the note around each hit's matching lines, like grep -C.")] = None,
    lanes: Annotated[str | None, typer.Option("--lanes", metavar="LANES", help="Lanes to fuse, comma-separated: bm25, bm25_page, vector, crosslingual, graph, hybrid (the default: bm25+bm25_page+vector+crosslingual).")] = None,
    usage_boost: Annotated[bool, typer.Option("--usage-boost", help="Boost notes you read recently and often (local usage log; also DOCSVAULT_USAGE_BOOST=1).")] = False,
) -> None:
    """Hybrid search (BM25 over chunks and whole pages + vector + cross-lingual, RRF k=20), one result per note.

    Exit status: 0 when something matched, 1 when nothing did, 2 on an error (as grep).

    \f
    Long: a typer command: the option declarations, then one output switch (--json, --files, --explain, -C) over the
    same hits.
    """
    from pipeline.search.query import parse_query

    problem = query_problem(query)
    if problem:
        fail(problem)
    if context is not None and (as_json or files):
        if as_json:
            fail("--context shows note lines under each hit; it does not combine with --json (hits in JSON carry "
                 "`vault_path` and `heading`: read the lines with `docsvault read`)")
        fail("--context shows note lines under each hit; it does not combine with --files (one line per note)")
    if explain and files:
        fail("--explain explains each hit's score; it does not combine with --files (drop --files to see it)")
    if tag is not None and any(not t.strip().lstrip("#") for t in tag):
        fail("--tag is empty: pass a tag, e.g. --tag journal")
    _refuse_spaced_tags(tag)
    if source is not None and any(not s.strip() for s in source):
        fail("--source is empty: pass a source name (`docsvault sources list`)")
    try:
        parsed = parse_query(query)
        lane_list = search_lanes(lanes)
    except (PipelineError, ValueError) as exc:
        fail(str(exc))
        return
    try:
        boost = {}
        if usage_boost or _usage_boost_on():
            from pipeline.search.usage import boosts, load

            boost = boosts(load(settings().data_dir))
        searcher = open_searcher(settings(), usage_boost=boost, preload_encoders=True)
        try:
            listing = not parsed.text           # filters alone: the notes that pass them, by vault path
            hits, more, sources, tags = run_search(settings(), searcher, parsed, k, source or (), tag or (), lane_list)
            tokens = searcher.analyzer.tokens(parsed.text) if not as_json and not files else []
            untagged = not hits and bool(tags) and not searcher.tagged_notes(tags, sources or None)
            known_tags = searcher.tag_names(sources or None) if untagged else []     # what a typed tag meant
            # which filter left nothing (a pasted error's quoted name, a path: no note has): plain output only
            misses = (searcher.filter_misses(parsed, sources or None, tags or None, searched=True)
                      if not hits and not untagged and not as_json and not files
                      and (parsed.required or parsed.excluded or parsed.paths) else None)
            glossed = searcher.translation_terms(parsed.text) if context is not None and parsed.text else ()
            # the words no note has: beside hits, or as why keyword-only lanes (--lanes bm25) found nothing
            missing = (searcher.missing_words(parsed.text, sources or None, tags or None, parsed.paths)
                       if parsed.text and (hits or not (untagged or parsed.required or parsed.excluded
                                                        or parsed.paths)) else None)
            skipped = skipped_files(settings(), sources) if missing and missing.missing else 0
        finally:
            searcher.close()
        links = {}
        if as_json and not files and hits:
            from pipeline.search.neighbours import links_for_paths

            links = links_for_paths(settings().warehouse_path, [h.vault_path for h in hits], cap=SEARCH_LINKS_CAP)
    except PipelineError as exc:
        fail(str(exc))
        return
    except ValueError as exc:       # an unknown lane
        fail(str(exc))
        return
    if files:
        seen: dict[str, Hit] = {}
        for h in hits:
            seen.setdefault(h.vault_path, h)
        rows = list(seen.values())[:k]
        if as_json:
            typer.echo(json.dumps([{**{key: getattr(h, key) for key in FILE_KEYS}, "rank": i}
                                   for i, h in enumerate(rows, start=1)], ensure_ascii=False, indent=2))
        else:
            for h in rows:
                typer.echo(f"{h.vault_path}\t{h.score:.4f}")
        if listing and more:        # stdout stays the list; the note that it was cut goes to stderr
            typer.echo(f"(the first {k} notes by path; more match)", err=True)
        if words_line := _words_line(hits, missing, parsed, sources, skipped, tags):
            typer.echo(words_line, err=True)
        if not rows:
            raise typer.Exit(EXIT_NONE)
        return
    if as_json:
        out = []
        for h in hits:
            row: dict[str, Any] = {key: getattr(h, key) for key in HIT_KEYS}
            nb = links.get(h.vault_path, {})
            row["outlinks"] = nb.get("outlinks", [])
            row["backlinks"] = nb.get("backlinks", [])
            if explain:
                row["lanes"] = dict(h.lanes)
                row["explain"] = explain_parts(h, searcher)
            out.append(row)
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))
        if listing and more:
            typer.echo(f"(the first {k} notes by path; more match)", err=True)
        if words_line := _words_line(hits, missing, parsed, sources, skipped, tags):
            typer.echo(words_line, err=True)
        if not hits:
            raise typer.Exit(EXIT_NONE)
        return
    if not hits:
        typer.echo(untagged_message(tags, sources, known_tags) if untagged
                   else no_results_message(misses, parsed, sources) if misses
                   else no_hits_message(missing, parsed.text, sources, skipped, tags, parsed.paths))
        raise typer.Exit(EXIT_NONE)
    color = _color()
    pattern = term_pattern(query_terms(parsed.text, tokens))
    # a Japanese question's English translation: the lines an English page matched when no word of the question is in it
    fallback = term_pattern(query_terms(" ".join(glossed))) if glossed else None
    shown: set[tuple[str, int]] = set()       # (note, first line) of context already printed: never twice
    if words_line := query_words_line(missing, parsed.text, sources, skipped, tags, parsed.paths):
        typer.echo(words_line)
    for h in hits:
        where = f"{h.vault_path}" + (f" > {h.heading}" if h.heading else "")
        typer.echo(f"{h.rank:>2}. {where}" if listing else f"{h.rank:>2}. {h.score:.4f}  {where}")
        if context is not None:
            lines = _context_lines(h, context, pattern, color, fallback)
            key = (h.vault_path, hash(tuple(lines)))
            if key in shown:
                typer.echo("    (same lines as above)")
            else:
                shown.add(key)
                for line in lines:
                    typer.echo(f"    {line}")
        else:
            typer.echo(f"    {highlight(h.snippet, pattern, color)}")
        if explain:
            typer.echo(f"    {_explain_line(h, searcher)}")
    if listing and more:
        typer.echo(f"(the first {k} notes by path; more match: " + (f"-k {min(100, 2 * k)} shows more)" if k < 100
                                                                       else "add a filter or words to narrow them)"))


def _usage_boost_on() -> bool:
    from pipeline.search.usage import boost_enabled

    return boost_enabled()


# ---------------------------------------------------------------------------------------------------------------
# embed, read


@app.command()
def embed(
    text: Annotated[str, typer.Argument(metavar="TEXT", help="Text to embed as a query.")],
    source: Annotated[str | None, typer.Option("--source", metavar="NAME", help="Use the model this source's notes in TEXT's language are embedded with (its `embedding:`, else by language: `language:` or the detected one) instead of DOCSVAULT_MODEL.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help='{"model", "dim", "norm", "vector"} on stdout.')] = False,
) -> None:
    """Print the query vector of TEXT with the configured model (DOCSVAULT_MODEL, or a source's), for debugging."""
    import numpy as np

    from pipeline.index.embed import load_embedder

    if not text.strip():
        fail("text is empty: pass words or a question")
    try:
        spec = settings().model
        if source is not None:
            from pipeline.index.language import detect_language
            from pipeline.ingest.sources import load_sources, select_sources

            spec = settings().model_for(select_sources(load_sources(settings().sources_file), [source])[0],
                                        detect_language(text))
        _check_model_spec(spec)
        vec = np.asarray(load_embedder(spec).embed_query(text), dtype=np.float32).reshape(-1)
    except PipelineError as exc:
        fail(str(exc))
        return
    norm = float(np.linalg.norm(vec))
    if as_json:
        typer.echo(json.dumps({"model": spec, "dim": int(vec.shape[0]), "norm": round(norm, 6),
                               "vector": [round(float(x), 6) for x in vec]}))
        return
    typer.echo(f"model {spec}, dim {vec.shape[0]}, norm {norm:.6f}")
    typer.echo(" ".join(f"{x:.6f}" for x in vec))


def _check_model_spec(spec: str) -> None:
    """Fail as ``build`` does when ``spec`` (the model ``embed`` uses) is no spec a model loads from: a misspelt
    ``DOCSVAULT_MODEL=all-MiniLM-L6-v3`` was looked up on the Hugging Face hub (seconds to minutes of retries
    offline, then "We couldn't connect to 'https://huggingface.co'"), with no "did you mean"."""
    from pipeline.ingest.sources import MODEL_SETTINGS, model_spec_problem

    problem = model_spec_problem(settings(), spec)
    if problem:
        name = next((env for field, env in MODEL_SETTINGS if getattr(settings(), field) == spec), "the model")
        fail(f"{name} {problem}")


def _quoted(path: str) -> str:
    """``path`` single-quoted for a shell command line that ``read`` prints (``'me/Hub.md'``), a ``'`` in it
    written ``'\\''`` (``'me/Bob'\\''s notes.md'``), so that a shell can run the line as printed."""
    return "'" + path.replace("'", "'\\''") + "'"


@app.command()
def read(
    note: Annotated[str, typer.Argument(metavar="NOTE", help="A note's vault path (as search prints it, e.g. 'source/dir/Note.md'), its source path, or its name: file name, title or alias; or a link as a note writes it ('Note#Heading', '[[Note#Heading|text]]': the page of that heading).")],
    page: Annotated[int, typer.Option("--page", "-p", metavar="N", min=1, help="Page number (pages are ~1,000 characters).")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="The page as JSON (path, title, page, pages, next_page, total_chars, text, frontmatter, added_before/added_after (fence lines re-opening/closing a code block cut by the page), outlinks, backlinks, outlinks_total, backlinks_total).")] = False,
    links: Annotated[int, typer.Option("--links", min=0, metavar="N", help="List at most N outlinks and N backlinks, most links first (default 10; 0: all of them).")] = 10,
) -> None:
    """Print one ~1,000-character page of a vault note (only Markdown notes inside the vault)."""
    from pipeline.search.reader import NoteNotFoundError, read_link

    s = settings()
    try:
        pg = read_link(s.vault_dir, note, page, s.warehouse_path)
    except NoteNotFoundError as exc:
        fail(note_missing_message(s, note, exc))
        return
    except (PipelineError, ValueError) as exc:
        fail(str(exc))
        return
    from pipeline.search.usage import record

    record(s.data_dir, pg.path)
    neighbours = note_links(s, pg.path, links)
    if pg.warning:                                 # `Note#NoSuchHeading`: the note is read, the heading named
        typer.echo(f"warning: {pg.warning}", err=True)
    if as_json:
        typer.echo(json.dumps({**pg.to_dict(), **neighbours}, ensure_ascii=False, indent=2))
        return
    typer.echo(f"{pg.path} — {pg.title} (page {pg.page}/{pg.pages})")
    typer.echo("")
    typer.echo(pg.text.rstrip("\n"))
    if pg.next_page:
        typer.echo("")
        typer.echo(f"-- page {pg.page} of {pg.pages}; next: docsvault read {_quoted(pg.path)} --page {pg.next_page}")
    if pg.page == 1 and (neighbours["outlinks"] or neighbours["backlinks"]):
        typer.echo("")
        for key, arrow in (("outlinks", "links to"), ("backlinks", "linked from")):
            if neighbours[key]:
                more = neighbours[f"{key}_total"] - len(neighbours[key])
                typer.echo(f"-- {arrow}: " + "; ".join(f"{r['title'] or r['path']} ({r['path']})"
                                                       for r in neighbours[key])
                           + (f"; … {more} more (all: docsvault read {_quoted(pg.path)} --links 0)"
                              if more > 0 else ""))


@app.command()
def related(
    note: Annotated[str, typer.Argument(metavar="NOTE", help="A note as `read` takes it: its vault path, source path, name, title, alias or a link ('[[Note]]').")],
    k: Annotated[int, typer.Option("-k", min=1, max=50, metavar="N", help="How many related notes (1-50).")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="As JSON: path, related (path, title, score, hops, link_weight, similarity), message when the note has no links.")] = False,
) -> None:
    """Notes related to NOTE through the link graph (up to two hops), ranked by link weight and vector similarity
    (the MCP `related` tool)."""
    try:
        out = related_notes(settings(), note, k)
    except PipelineError as exc:                    # no warehouse; no such note (why, when the build skipped it)
        fail(str(exc))
        return
    if as_json:
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))
        return
    typer.echo(f"related to {out['path']}:" if out["related"] else f"{out['path']}: {out['message']}")
    for i, row in enumerate(out["related"], 1):
        hops = "1 hop" if row["hops"] == 1 else f"{row['hops']} hops"
        typer.echo(f"{i:2d}. {row['score']:.3f}  {row['path']} — {row['title']} ({hops}, link weight "
                   f"{row['link_weight']}, similarity {row['similarity']})")


# ---------------------------------------------------------------------------------------------------------------
# capture


def _capture_input(file: Path | None) -> str:
    """The text ``capture`` reads from ``file`` (``-`` or None: stdin), read as bytes and decoded by
    :func:`pipeline.ingest.capture.decode_text` (a BOM dropped; not UTF-8 is a one-line error)."""
    from pipeline.ingest.capture import decode_text

    if file is not None and str(file) != "-":
        return decode_text(file.read_bytes(), str(file))
    if sys.stdin is None:           # started with stdin closed (`<&-`, a service without one): no text to read
        fail("nothing to capture: stdin is closed; pass TEXT or --file FILE")
    stream = getattr(sys.stdin, "buffer", None)
    return decode_text(stream.read(), "the text on stdin") if stream is not None else sys.stdin.read()


def _upgrade_line(upgraded: Sequence[str]) -> str:
    """The line a build (``build``, ``capture``'s) prints when it ran stages again that another version of docsvault
    built last (``BuildReport.upgraded``)."""
    return (f"upgrade: stages last built by another version of docsvault run again: {'; '.join(upgraded)} "
            "(only what their new code changes is rewritten; cached embeddings of unchanged text are reused)")


@app.command()
def capture(
    text: Annotated[str | None, typer.Argument(metavar="[TEXT]", help="The note's Markdown ('-' = stdin; or use --file, or pipe it on stdin).")] = None,
    file: Annotated[Path | None, typer.Option("--file", "-f", metavar="FILE", help="Read the text from FILE ('-' = stdin).")] = None,
    title: Annotated[str | None, typer.Option("--title", metavar="TITLE", help="Title (default: the first heading or line); heads the note as '# TITLE' unless the text starts with a level-1 heading.")] = None,
    name: Annotated[str | None, typer.Option("--name", metavar="NAME", help="File name without .md (default: from the title), or folders and a file name: daily/2026-12-04; never overwrites.")] = None,
    source: Annotated[str | None, typer.Option("--source", "-s", metavar="NAME", help="The local Markdown source to write into [env DOCSVAULT_CAPTURE_SOURCE].")] = None,
    agent: Annotated[str, typer.Option("--agent", metavar="NAME", help="Who wrote it (model or agent), for the frontmatter.")] = "docsvault capture",
    correlation_id: Annotated[str | None, typer.Option("--correlation-id", metavar="ID", help="Ties the note to a conversation or run (default: a new id).")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", metavar="TAG", help="Frontmatter tags (repeatable).")] = None,
    no_build: Annotated[bool, typer.Option("--no-build", help="Only write the note; do not build its source.")] = False,
    wait: Annotated[float, typer.Option("--wait", metavar="SECONDS", min=0.0, help="Wait this long for another running build to finish before building the note's source (default: refuse at once; the note is saved either way).")] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="What was written as JSON on stdout.")] = False,
) -> None:
    """Write a note into the local capture source (frontmatter: created, agent, status raw, correlation id, related
    notes found by search), then build that source so the note is searchable at once.

    \f
    Long: a typer command: the option declarations, then one write and its output line.
    """
    from pipeline.ingest.capture import capture_source, check_text, write_capture
    from pipeline.ingest.sources import load_sources

    s = settings()
    if text is not None and file is not None:
        fail("give the text as an argument or with --file, not both")
    _refuse_spaced_tags(tag)
    if not no_build:        # refused before the note is written: a rerun with the right --data makes no second copy
        refuse_unwritable_dirs(s)
    try:
        if text is not None and file is None and text != "-":
            body = text
        elif text == "-" or file is not None or (sys.stdin is not None and not sys.stdin.isatty()):   # `capture -`
            body = _capture_input(file)
        else:
            fail("nothing to capture: pass TEXT, --file FILE, or pipe the text on stdin")
            return
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}")
        return
    except PipelineError as exc:
        fail(str(exc))
        return
    try:
        src = capture_source(load_sources(s.sources_file), source)
        check_text(body)                # no words: refused before the related search
        related = capture_related(s, title, body)
        note = write_capture(src, body, title=title, name=name, agent=agent, correlation_id=correlation_id,
                             related=related, tags=tag or ())
    except PipelineError as exc:
        fail(str(exc))
        return
    built: dict[str, Any] | None = None
    stopped: BuildInterrupted | None = None
    if not no_build:
        from pipeline.defs.runner import run_build

        try:
            with _stop_on_signals():            # Ctrl-C stops a --wait for the lock at once, the note stays saved
                report = run_build(s, [src.name], wait=wait, evaluate=False)     # the next build evaluates
            out = build_outcome(report).as_dict()
            built = {"ok": out["ok"], "source": next((r for r in out["sources"] if r["name"] == src.name), None),
                     "upgraded": list(out.get("upgraded") or [])}
            if not out["ok"] and not (built["source"] or {}).get("error") and out["shared"]["error"]:
                built["error"] = out["shared"]["error"]     # the warehouse's line: the note is not searchable
        except PipelineError as exc:
            built = {"ok": False, "error": " ".join(str(exc).split())}
        except BuildInterrupted as exc:     # reported as a failed build, then exit 128 + the signal as `build`
            stopped, built = exc, {"ok": False, "error": str(exc)}
    if as_json:
        typer.echo(json.dumps({"file": str(note.path), "vault_path": note.vault_path, "source": note.source,
                               "correlation_id": note.correlation_id, "related": list(note.related),
                               **({"warning": note.warning} if note.warning else {}),
                               "build": built}, ensure_ascii=False, indent=2))
    else:
        typer.echo(f"captured {note.path} ({note.vault_path}, correlation id {note.correlation_id})")
        if note.warning:
            typer.echo(f"warning: {note.warning}", err=True)
        if note.related:
            typer.echo(f"  related: {', '.join(note.related)}")
        if built is None:           # --no-build: where it is searchable from, as a failed build says
            typer.echo(f"  not searchable yet (--no-build): run `docsvault build --source {src.name}` to build it")
        else:
            for line in warnings_about((built.get("source") or {}).get("warnings") or (), note.vault_path):
                typer.echo(f"warning: {line}", err=True)        # the build's lines about it: a broken embed
            if built.get("upgraded"):       # the first build after an upgrade: why it took longer
                typer.echo(f"  {_upgrade_line(built['upgraded'])}")
            for line in (built.get("source") or {}).get("kept_edits") or ():    # a hand edit the build moved aside
                typer.echo(f"  {src.name}: {line}")
            if built["ok"]:
                typer.echo(f"  searchable now: source {src.name} rebuilt")
            else:
                why = built.get("error") or ((built.get("source") or {}).get("error")) or "see `docsvault status`"
                typer.echo(f"error: the note is saved but the build of {src.name} failed: {why} (to make this note "
                           f"searchable run `docsvault build --source {src.name}`; a second capture of it would be "
                           "refused: its name is taken)", err=True)
    if stopped is not None:
        sys.exit(128 + (stopped.signum or signal.SIGINT))
    if built is not None and not built["ok"]:
        raise typer.Exit(EXIT_ERROR)


# ---------------------------------------------------------------------------------------------------------------
# eval


def _left_out_templates() -> dict[str, tuple[str, ...]]:
    """Source name -> the templates folders it leaves out (an Obsidian vault's, of a ``format: obsidian`` source:
    :func:`pipeline.ingest.fetch.base.left_out_templates`), for the eval to say a case expects a template; {} when
    the sources file cannot be read (the eval itself reads the warehouse only)."""
    from pipeline.ingest.fetch.base import left_out_templates
    from pipeline.ingest.sources import load_sources

    try:
        return {src.name: folders for src in load_sources(settings().sources_file)
                if (folders := left_out_templates(src))}
    except PipelineError:
        return {}


def _no_eval_files(s: Settings) -> str:
    """The error when no eval file exists: names the folder(s) looked in (DOCSVAULT_EVALS or ./evals)."""
    named = eval_env_paths()
    if named:
        looked = ", ".join(str(p) for p in named)
        return f"no eval files at {looked} (DOCSVAULT_EVALS); pass FILE..., or create it or fix DOCSVAULT_EVALS " \
               "(format: see README)"
    return f"no eval files at {s.evals_dir}; pass FILE..., create that folder (format: see README) or set DOCSVAULT_EVALS"


def _caseless_eval_folders(files: Sequence[str] | str | None) -> str:
    """The eval paths a build's eval read (``files``: its report's list, or the asset's ``", "``-joined string)
    when they are folders that now hold no eval file (``*.yaml`` / ``*.yml``), ``", "``-joined; '' otherwise (a
    file among them, or a case file there now). An empty ``./evals`` was said to be "eval files: …/evals" of no
    built source, sending the user to their cases' ``corpus:`` (helper s49-ja)."""
    from pipeline.evaluate import case_files

    paths = [Path(f) for f in (files.split(", ") if isinstance(files, str) else files or []) if f and f != "none"]
    if not paths or not all(p.is_dir() for p in paths):
        return ""
    try:
        return "" if case_files(paths) else ", ".join(map(str, paths))
    except PipelineError:
        return ""


def _eval_env_all_missing() -> list[Path]:
    """The paths ``DOCSVAULT_EVALS`` names when it is set and none of them exists, else []."""
    named = eval_env_paths() or []
    return named if not any(p.exists() for p in named) else []


def _missing_eval_paths() -> str:
    """The line naming the paths of ``DOCSVAULT_EVALS`` that do not exist while others do ('' when none): their
    cases are not scored, and before session 45 nothing said so (a typo in one entry of the list, ``.yml`` for
    ``.yaml``, dropped its cases from `docsvault eval` and the build's eval)."""
    named = eval_env_paths() or []
    gone = [p for p in named if not p.exists()]
    if not gone or len(gone) == len(named):     # none: the usual "no eval files" says it
        return ""
    return (f"DOCSVAULT_EVALS names {', '.join(map(str, gone))}, which {'does' if len(gone) == 1 else 'do'} not "
            "exist: no case of it is scored; fix DOCSVAULT_EVALS (paths separated by "
            f"'{os.pathsep}')")


@app.command("eval")
def eval_(
    files: Annotated[list[Path] | None, typer.Argument(metavar="FILE", help="Eval case files or folders (default DOCSVAULT_EVALS or evals/).")] = None,
    lanes: Annotated[str | None, typer.Option("--lanes", metavar="LANES", help="Compare lane set-ups, comma-separated: bm25, bm25_page, vector, crosslingual, graph, hybrid (the default lanes fused), hybrid+graph.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Metrics as JSON on stdout.")] = False,
    history: Annotated[bool, typer.Option("--history", help="Show the last 20 runs recorded by the build (pooled MRR@10 per set-up) instead of evaluating.")] = False,
    unscoped: Annotated[bool, typer.Option("--unscoped", help="Search each case over all sources (as `search` does by default) instead of within its corpus; a page of another source is a miss.")] = False,
    both: Annotated[bool, typer.Option("--both", help="Scoped and unscoped side by side (JSON: {\"scoped\": ..., \"unscoped\": ...}).")] = False,
) -> None:
    """hit@1, hit@3, MRR@10 and nDCG@10 of eval cases against the built warehouse (each case searched within its
    corpus; --unscoped over all sources; --both side by side).

    \f
    Long: a typer command: the option declarations, then text/JSON rendering of three report shapes (one run,
    ablation, history).
    """
    from pipeline.evaluate import (
        SCOPE_NOTE,
        EvalReport,
        eval_history_path,
        format_ablation,
        format_history,
        format_report,
        format_scopes,
        format_skipped,
        format_unreachable,
        load_cases,
        rank_tasks,
        run_ablation,
    )
    from pipeline.stages import eval_files, stored_query_vectors

    if history:
        from pipeline.warehouse import read_eval_runs

        given = [name for name, on in (("--lanes", lanes is not None), ("--unscoped", unscoped), ("--both", both),
                                       ("FILE arguments", bool(files))) if on]
        if given:
            fail(f"--history shows the recorded runs; it does not combine with {given[0]}")

        try:
            rows = read_eval_runs(eval_history_path(settings().data_dir), last=20)
        except PipelineError as exc:
            fail(str(exc))
            return
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2) if as_json else format_history(rows))
        if not rows:                # nothing found: 1, as a search without a hit
            raise typer.Exit(EXIT_NONE)
        return
    if unscoped and both:
        fail("--unscoped and --both exclude each other: --both already includes the unscoped figures")
    scopes = ["scoped", "unscoped"] if both else ["unscoped"] if unscoped else ["scoped"]
    try:
        setups = parse_lanes(lanes) if lanes is not None else None
        paths = list(files or []) or eval_files(settings())
        if not paths:
            fail(_no_eval_files(settings()))
        if not files and (gone := _missing_eval_paths()):
            typer.echo(f"warning: {gone}", err=True)
        cases = load_cases(paths)
        if not cases:
            fail(f"no eval cases in {', '.join(str(p) for p in paths)}; add *.yaml case files (format: see README)")
        searcher = open_searcher(settings())
        try:
            by_scope: dict[str, dict[str, EvalReport]] = {}
            with stored_query_vectors(settings(), searcher, keep=16 * len(cases)) as rank:   # embedded once, ever
                named = {"": None} if setups is None else setups
                ranked = rank(rank_tasks(searcher, cases, named, scopes))    # on every CPU
                templates = _left_out_templates()
                for scope in scopes:
                    by_scope[scope] = run_ablation(searcher, cases, named, scope=scope, ranked=ranked,
                                                   templates=templates)
            built = list(searcher.sources)
        finally:
            searcher.close()
        reports = by_scope[scopes[0]]
        first = next(iter(reports.values()))
        if not first["overall"].get("n") and first.get("skipped"):
            from pipeline.ingest.sources import did_you_mean

            unknown = sorted({r["corpus"] for r in first["skipped"]})
            fail(f"no case could be scored: no source of the warehouse is named {', '.join(map(repr, unknown))}"
                 f"{did_you_mean(unknown, built)} (a typo in `corpus:`, or a source not built yet); built sources: "
                 f"{', '.join(built) or '(none)'}")
    except (PipelineError, ValueError) as exc:
        fail(str(exc))
        return

    if as_json:
        shown = {scope: r[""].public() if setups is None else {name: x.public() for name, x in r.items()}
                 for scope, r in by_scope.items()}
        typer.echo(json.dumps(eval_json(shown if both else shown[scopes[0]]), ensure_ascii=False, indent=2))
        return
    if setups is None:
        if both:
            typer.echo(format_scopes({scope: r[""] for scope, r in by_scope.items()}))
        else:
            typer.echo(format_report(reports[""]))
        return
    if both or unscoped:
        blocks = [f"{SCOPE_NOTE[scope]}\n{format_ablation(r)}" for scope, r in by_scope.items()]
        typer.echo("\n\n".join(blocks))
    else:
        typer.echo(format_ablation(reports))
    first = next(iter(reports.values()), {})
    extra = format_unreachable(first) + format_skipped(first)
    if extra:
        typer.echo("\n".join(extra))


# ---------------------------------------------------------------------------------------------------------------
# status, sources


def _status_sources(data: dict[str, Any]) -> None:
    """``status``'s table of sources and the lines about them (skipped files, your vault files, failures, sources
    of a warehouse copied here: :func:`pipeline.service.copied_line`), then the last build's disk failure."""
    typer.echo(f"  {'name':24} {'kind':8} {'notes':>6} {'chunks':>7} {'skipped':>7}  {'fetch':7} last fetch")
    for r in data["sources"]:
        typer.echo(f"  {r['name']:24} {r['kind']:8} {r['notes']:>6} {r['chunks']:>7} {r['skipped_files']:>7}  "
                   f"{r['fetch_status']:7} {r['last_fetch'] or '-'}")
    if copied := copied_line(data):                 # a reader host: "never" would be wrong
        typer.echo(f"  {copied}")
    for r in data["sources"]:
        if r["skipped_files"]:
            typer.echo(f"  {r['name']}: {r['skipped_files']} file(s) skipped, each with its reason in "
                       f"{_errors_file(settings(), r['name'])}")
        for line in r.get("vault_files") or []:
            typer.echo(f"  {line}")
        if r["fetch_status"] == "failed" and r["fetch_error"]:
            kept = f"; its last good copy ({r['notes']} notes) still serves search" if r["notes"] else ""
            typer.echo(f"  {r['name']}: last fetch failed: {r['fetch_error']}{kept}")
        if check := r.get("upstream_check"):           # no run fetches it, so its fetch above still reads as it was
            typer.echo(f"  {r['name']}: the upstream_change sensor cannot check its upstream since {check['since']}: "
                       f"{check['error']}; nothing is fetched for it meanwhile (the last fetch above is what search "
                       "serves)")
        err = r["last_error"]
        if err and err.get("stage") != "raw_docs":     # a fetch failure has its own line above
            typer.echo(f"  {r['name']}: last build failed at {err['stage']} ({err['at']}): {err['error']}")
    if failed := data.get("build_failed"):          # a full disk where Dagster records the run
        typer.echo(f"last build failed ({failed.get('at')}): {failed.get('error')}")


def _warehouse_lag_lines(w: dict[str, Any], sources: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The lines ``status`` prints under the warehouse line when it does not serve what the data dir built: chunks
    without a vector, sources it serves that sources.yaml no longer lists, else ``behind`` (naming first the
    generated notes edited in the vault, from ``sources``' ``vault_files``, when there are any)."""
    from pipeline.ingest.vault_check import DELETED_FILES, EDITED_FILES

    lines = []
    edited = [r["name"] for r in sources if any(what in line for line in r.get("vault_files") or []
                                                for what in (EDITED_FILES, DELETED_FILES))]
    if w.get("missing_vectors_in"):
        lines.append(f"  chunks without a vector (their embeddings step did not finish): {w['missing_vectors_in']}; "
                     "keyword search finds them, the vector lanes do not until `docsvault build --source <name>` "
                     "embeds them")
    failed = w.get("publish_failed")
    if failed:
        serves = "" if "serves search" in str(failed.get("error")) else (
            f"; search serves {'this file' if w.get('built') else 'nothing'} until a build publishes again")
        lines.append(f"  last publish failed ({failed.get('at')}): {failed.get('error')}{serves}")
    gone = w.get("not_in_sources") or []
    one = len(gone) == 1
    if gone:
        lines.append(f"  serves {'a source' if one else f'{len(gone)} sources'} no longer in sources.yaml: "
                     f"{', '.join(gone)}; search finds {'its' if one else 'their'} notes until `docsvault build` "
                     f"removes {'it' if one else 'them'}")
    elif w.get("behind") and w.get("other_version") and not failed:
        lines.append("  behind: published by another version of docsvault (an upgrade or a downgrade since); search, "
                     "read and related serve it as it is until `docsvault build` runs again the stages whose code "
                     "changed and publishes it (cached embeddings of unchanged text are reused)")
    elif w.get("behind") and not failed and edited:
        # a generated note edited by hand moves the vault listing the warehouse is keyed on: name that cause, and no
        # other (whatever else moved, the next build publishes it too)
        lines.append(f"  behind: generated notes of {', '.join(edited)} were edited or deleted in the vault since the "
                     "build wrote them (named above): search serves them as built, and the next build keeps each "
                     "edit as '<name> (edited).md' and writes the notes again")
    elif w.get("behind") and not failed:
        lines.append("  behind: what it is published from changed since (notes or chunks built here by a Dagster run "
                     "of some sources' assets without `warehouse` or one stopped before it, another version of "
                     "docsvault, files copied without their times); search may not see those changes until "
                     "`docsvault build` publishes it again")
    return lines


def eval_status_line(ev: dict[str, Any] | None, s: Settings) -> str:
    """``status``'s eval line (:func:`pipeline.service.eval_status`): the last eval's figures and its floors, or
    what is missing and what to run (no eval yet, no case about a built source), so that a data dir whose eval
    never ran does not look like one that met its floors."""
    from pipeline.evaluate import case_files

    cases = "point DOCSVAULT_EVALS at your cases (README: Eval files)"
    if ev is None:
        # not "--no-eval" alone: a capture's build (and MCP save_note's) leaves the eval out too, unasked
        never = ("eval: never run in this data dir (no build here ran it: a capture's build and `build --no-eval` "
                 "leave it out, and a copied warehouse brings none)")
        paths = eval_paths(s)
        where = ", ".join(map(str, paths))
        if not any(p.exists() for p in paths):
            return (f"{never}: `docsvault build` scores the cases of {where}, or `docsvault eval` now; there are "
                    f"none: {cases}")
        try:
            found = case_files(paths)
        except PipelineError:              # a file unreadable as such: the eval says what
            found = [Path(where)]
        if not found:       # a folder without a case file: say so, not that a build scores its cases
            return (f"{never}: {where} holds no eval file (*.yaml, *.yml): add your cases there, or point "
                    "DOCSVAULT_EVALS at them (README: Eval files)")
        return f"{never}: `docsvault build` scores the cases of {where}, or `docsvault eval` now"
    if not ev.get("n"):
        if empty := _caseless_eval_folders(ev.get("files")):
            return (f"eval: no case scored: {empty} holds no eval file (*.yaml, *.yml), so no floor was checked: "
                    "add your cases there, or point DOCSVAULT_EVALS at them (README: Eval files)")
        files = ", ".join(ev.get("files") or []) or f"none at {s.evals_dir}"
        return f"eval: no eval case is about a built source (eval files: {files}), so no floor was checked; {cases}"
    line = (f"eval: n={ev['n']} hit@1={ev['hit_at_1']:.3f} hit@3={ev['hit_at_3']:.3f} "
            f"MRR@10={ev['mrr_at_10']:.3f} nDCG@10={ev['ndcg_at_10']:.3f} ({ev.get('run_at') or '?'}"
            + ("; of an earlier warehouse: a build that left the eval out (a capture's, or `build --no-eval`) "
               "published since; the next `docsvault build` scores this one" if ev.get("stale") else "")
            + ")")
    if "floors" not in ev:
        return f"{line}; floors not checked: {ev['floors_error']}"

    def listed(floors: Mapping[str, float]) -> str:
        return ", ".join(f"{m.replace('_at_', '@')} {f:.2f}" for m, f in floors.items())

    # the build's eval_floors verdict (what Dagster's check said), not one with this shell's variables
    by_build = ev.get("floors_from") == "build"
    whose = "the build's floors" if by_build else "this environment's floors"
    verdict = f"below {whose} ({ev['below']})" if ev.get("below") else f"{whose} met ({listed(ev['floors'])})"
    if not by_build:
        verdict += ", judged now: no build recorded its check of this eval"
    if ev.get("below"):
        verdict += (": see `docsvault eval` for the cases missed, or set DOCSVAULT_EVAL_MIN_MRR / "
                    "DOCSVAULT_EVAL_MIN_HIT3 for your own cases")
    if ev.get("floors_now"):
        verdict += (f"; this environment's floors are {listed(ev['floors_now'])}: the next `docsvault build` "
                    "checks those")
    elif ev.get("floors_error"):
        verdict += f"; this environment's floors: {ev['floors_error']}"
    return f"{line}; {verdict}"


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Status as JSON on stdout.")] = False,
) -> None:
    """Sources (notes, chunks, last fetch and its error, skipped files, last failed stage, your files in the vault),
    the warehouse (path, size, counts, models), the vault, the models in use and DAGSTER_HOME (README: status)."""
    try:
        data = status_data(settings())
    except PipelineError as exc:
        fail(str(exc))
        return
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
        if data.get("sources_error") or data["warehouse"].get("error"):
            raise typer.Exit(EXIT_ERROR)
        return
    typer.echo(f"sources: {data['sources_file']}")
    if data.get("sources_error") and not Path(data["sources_file"]).is_file():      # missing, not invalid
        typer.echo(f"  (no sources file at {data['sources_file']}: create it, or point --sources / DOCSVAULT_SOURCES "
                   "at one; the sources listed are the warehouse's)")
    elif data.get("sources_error"):
        typer.echo("  (sources.yaml is invalid, see the error below: the sources listed are the warehouse's)")
    _status_sources(data)
    w = data["warehouse"]
    if w["built"]:
        named = ": `docsvault check-vault` names them" if w["dangling_links"] else ""
        typer.echo(f"warehouse: {w['path']} ({w['bytes'] / 1e6:.1f} MB), built {w['built_at'] or '?'}: "
                   f"{w['notes']} notes, {w['chunks']} chunks, {w['links']} links "
                   f"({w['dangling_links']} dangling{named})")
        for m in w["models"]:
            typer.echo(f"  vectors: {m['model_id']} ({m['dim']}-d, {m['vectors']} chunks)")
        for line in [*_warehouse_lag_lines(w, data["sources"]), eval_status_line(data.get("eval"), settings())]:
            typer.echo(line)
    elif w.get("error"):
        typer.echo(f"warehouse: {w['path']} (cannot be read, see the error below: run `docsvault build` to rebuild "
                   "it; the sources' counts are unknown until then)")
    elif data.get("sources_error") and not Path(data["sources_file"]).is_file():
        # no project here at all (run from another folder): a build would fail with "sources file not found"
        typer.echo(f"warehouse: {w['path']} (none here, nor a sources file: run docsvault from your project's "
                   "folder, or point --data and --sources (DOCSVAULT_DATA, DOCSVAULT_SOURCES) at where you built)")
        for line in _warehouse_lag_lines(w):
            typer.echo(line)
    else:
        typer.echo(f"warehouse: {w['path']} (not built yet: run `docsvault build`)")
        for line in _warehouse_lag_lines(w):
            typer.echo(line)
    built_depth = w.get("crosslingual_depth")
    depth = data["crosslingual_depth"] if built_depth is None else built_depth
    cross = ("cross-lingual lane off" if data["crosslingual_model"] == "none" else
             "cross-lingual lane: every chunk" + (f", of an English note its first {depth}" if depth else ""))
    if built_depth is not None and built_depth != data["crosslingual_depth"] and data["crosslingual_model"] != "none":
        nxt = data["crosslingual_depth"]
        cross += (f"; DOCSVAULT_CROSSLINGUAL_DEPTH={nxt} now: the next build embeds "
                  + (f"the first {nxt}" if nxt else "every chunk"))
    typer.echo(f"models: {data['model']} (English notes), {data['multilingual_model']} (ja/zh/ko notes), "
               f"{data['crosslingual_model']} ({cross})")
    typer.echo(f"vault: {data['vault']}")
    typer.echo(f"dagster home: {data['dagster_home']}")
    errors = [e for e in (data.get("sources_error"), w.get("error")) if e]     # an invalid file, an unreadable one
    for e in errors[:-1]:
        typer.echo(f"error: {one_line(e.splitlines()[0])}", err=True)
    if errors:
        fail(errors[-1])


@app.command("check-vault")
def check_vault_cmd(
    source: Annotated[list[str] | None, typer.Option("--source", "-s", metavar="NAME", help="Only these sources (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON on stdout (keys in README).")] = False,
) -> None:
    """Check the built vault: embeds of files in the source that do not resolve, markup left outside code, note
    modes, your own files in the source folders, dangling links and links to a heading their note does not
    have (named, not a problem). Exit 1 when a problem is found, 2 on an error."""
    from pipeline.ingest.sources import load_sources, select_sources
    from pipeline.ingest.vault_check import check_vault, format_report

    s = settings()
    try:
        every = load_sources(s.sources_file)
        links = link_problems(s, every)
        report = check_vault(s, select_sources(every, source), dangling=links and links[0],
                             missing_headings=links and links[1])
    except PipelineError as exc:
        fail(str(exc))
        return
    typer.echo(json.dumps(report, ensure_ascii=False, indent=2) if as_json else "\n".join(format_report(report)))
    if not report["ok"]:
        raise typer.Exit(EXIT_NONE)


@sources_app.command("validate")
def sources_validate() -> None:
    """Validate sources.yaml; errors name the source, the key and what is allowed, every one found, one line
    each (a file that is no valid YAML: its first error). Local folders must exist. Exit 1 when the file has a
    problem (also when it is missing)."""
    from pipeline.ingest.sources import check_local_paths, source_problems
    from pipeline.stages import REMOVE_ALL_OPTION, built_source_names, check_layout, no_sources_problem

    s = settings()
    try:
        found, problems = source_problems(s.sources_file)
    except PipelineError as exc:        # missing, unreadable, no YAML: a problem of the file, as a bad block is
        fail(str(exc), EXIT_NONE)
        return
    sources = [source for _, source in found]
    try:
        check_layout(s, sources)
    except PipelineError as exc:
        problems.append(str(exc))
    problems += check_local_paths(sources, s.sources_file, [i for i, _ in found])
    for line in problems:
        typer.echo(f"error: {line}", err=True)
    if problems:
        raise typer.Exit(EXIT_NONE)
    from pipeline.ingest.fetch.local import overlapping_sources

    for line in overlapping_sources(sources):
        typer.echo(f"warning: {s.sources_file}: {line}", err=True)
    built = [] if sources else built_source_names(s)
    if built:
        typer.echo(f"warning: {s.sources_file}: {no_sources_problem(built)}: `docsvault build` will refuse to "
                   f"remove them all; restore the file's sources, or run `docsvault build {REMOVE_ALL_OPTION}` "
                   "to remove them all", err=True)
    typer.echo(f"{s.sources_file}: {len(sources)} source(s), valid")


@sources_app.command("list")
def sources_list() -> None:
    """List the sources of sources.yaml (name, kind, format, where)."""
    from pipeline.ingest.sources import load_sources

    try:
        sources = load_sources(settings().sources_file)
    except PipelineError as exc:
        fail(str(exc))
        return
    from pipeline.ingest.fetch.http import redact

    for src in sources:     # a URL's credentials (https://user:token@…) are not printed
        where = redact(src.url) if src.url else ", ".join(str(p) for p in src.path)
        typer.echo(f"{src.name:24} {src.kind:8} {src.format or 'auto':10} {where}")


# ---------------------------------------------------------------------------------------------------------------
# mcp, ui


@app.command()
def mcp(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP (on 127.0.0.1 unless --host) instead of stdio.")] = False,
    port: Annotated[int, typer.Option("--port", metavar="PORT", min=1, max=65535, help="Port for --http.")] = 8765,
    host: Annotated[str, typer.Option("--host", metavar="ADDR", help="Address for --http; beyond loopback a token is "
                                      "required [127.0.0.1].")] = "127.0.0.1",
    token_file: Annotated[Path | None, typer.Option("--token-file", metavar="FILE", help="File holding the bearer token "
                                                    "[env DOCSVAULT_MCP_TOKEN_FILE, or DOCSVAULT_MCP_TOKEN].")] = None,
    allow_host: Annotated[list[str] | None, typer.Option("--allow-host", metavar="NAME", help="Host name clients use in "
                                                         "the URL (repeatable; checked against Host/Origin).")] = None,
    stateless: Annotated[bool, typer.Option("--stateless", help="No MCP sessions: any of several server processes "
                                            "behind a load balancer can answer any call.")] = False,
    read_only: Annotated[bool, typer.Option("--read-only", help="Offer only the tools that read (search, read, "
                                            "related, status): no save_note, no refresh, for a team's readers "
                                            "[env DOCSVAULT_MCP_READ_ONLY=1].")] = False,
) -> None:
    """Serve the MCP tools search, read, related, status, refresh and save_note (stdio by default; logs go to
    stderr); with --read-only, only search, read, related and status."""
    from pipeline.mcp_server import read_only_env, serve

    try:
        read_only = read_only or read_only_env()
    except PipelineError as exc:
        fail(str(exc))
        return
    if http:
        import socket

        from pipeline.mcp_http import HttpOptions, check_http_options, load_token, serve_http

        try:
            opts = HttpOptions(host=host, port=port, token=load_token(token_file), allow_hosts=tuple(allow_host or ()),
                               stateless=stateless, read_only=read_only)
            check_http_options(opts)
        except PipelineError as exc:
            fail(str(exc))
            return
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as probe:
            try:
                probe.bind((host.strip("[]"), port))
            except OSError as exc:
                fail(f"cannot serve MCP on {host}:{port}: {exc.strerror or exc}; choose another --port (or --host)")
        try:
            serve_http(settings(), opts)
        except PipelineError as exc:
            fail(str(exc))
        return
    if sys.stdin is None or sys.stdout is None:     # `<&-` / `>&-`: no channel to serve on (was a traceback)
        closed = " and ".join(n for n, f in (("stdin", sys.stdin), ("stdout", sys.stdout)) if f is None)
        fail(f"{closed} {'are' if ' and ' in closed else 'is'} closed: `docsvault mcp` serves MCP over stdin and stdout; start it from an MCP client "
             "(or serve HTTP with --http)")
    try:
        serve(settings(), transport="stdio", port=port, read_only=read_only)
    except PipelineError as exc:
        fail(str(exc))


UI_HOST = "127.0.0.1"
#: in DAGSTER_HOME: held (flock) by a `docsvault ui` that runs the daemon, for as long as its `dg dev` runs
UI_LOCK = "docsvault-ui.lock"


@app.command()
def ui(
    port: Annotated[int, typer.Option("--port", metavar="PORT", min=1, max=65535,
                                      help="Port of the Dagster UI on 127.0.0.1.")] = 3000,
    webserver_only: Annotated[bool, typer.Option(
        "--webserver-only", help="Only the UI (dagster-webserver), no dagster-daemon: runs launched from the UI "
                                 "stay queued and the refresh sensors and schedules do not tick.")] = False,
) -> None:
    """Start the Dagster UI on 127.0.0.1 with this command's paths: `dg dev` (the webserver and the daemon, so
    the refresh sensors and schedules tick when turned on), or only dagster-webserver with --webserver-only.

    Refused at once (exit 2, nothing started) when the port is taken, or when another `docsvault ui` runs the
    daemon for the same DAGSTER_HOME (two daemons on one instance fight over its sensors and run queue), or
    another daemon beats in the instance (not the one a `docsvault ui` ran and stopped:
    :func:`record_stopped_daemon`).

    The code location is loaded from the folder docsvault's `pipeline` package is imported from (`-d`), never from
    the current directory, and every Dagster process runs with PYTHONSAFEPATH=1 in DAGSTER_HOME: a `gql.py` or other
    file named like a dependency in the current directory cannot shadow it."""
    s = settings()
    tool = "dagster-webserver" if webserver_only else "dg"
    exe = Path(sys.executable).with_name(tool)
    cmd = str(exe) if exe.exists() else shutil.which(tool)
    if not cmd:
        package = "dagster-webserver" if webserver_only else "dagster-dg-cli"
        fail(f"{tool} not found; run `make install` (it comes with the {package} package)")
        return
    home = s.dagster_home
    problem = ui_sources_problem(s.sources_file)
    if problem:
        fail(problem)
        return
    problem = ui_port_problem(UI_HOST, port)
    if not webserver_only:
        problem = ui_daemon_problem(home, port, problem)
    if problem:
        fail(problem)
        return
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        from pipeline.defs.runner import instance_config

        (home / "dagster.yaml").write_text(instance_config(), encoding="utf-8")
    unused = unused_instance_file(Path.cwd(), home)
    if unused:
        typer.echo(f"warning: {unused}", err=True)
    what = "webserver only, no daemon" if webserver_only else "webserver + daemon"
    typer.echo(f"Dagster UI on http://{UI_HOST}:{port} ({what}; DAGSTER_HOME={home})", err=True)
    args = [*ui_target(), "-h", UI_HOST, "-p", str(port)]
    env = child_env(s)
    env["PYTHONSAFEPATH"] = "1"       # `python -m dagster…` children: no current directory at the head of sys.path
    if env.get("PYTHONPATH"):         # they run in DAGSTER_HOME: a relative entry would name another folder there
        env["PYTHONPATH"] = os.pathsep.join(str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    # `dg dev` warns of any dagster.yaml in its current folder that is not DAGSTER_HOME's: it runs in DAGSTER_HOME.
    # A child, not an exec: Dagster exits 0 on Ctrl-C, and this process says `interrupted` and exits 130 instead.
    import time

    started = time.time()
    try:
        code, stopped_by = run_until_stopped([cmd, *args] if webserver_only else [cmd, "dev", *args], env, home)
    except OSError as exc:
        fail(f"cannot start {cmd}: {exc.strerror or exc}")
        return
    if not webserver_only:
        record_stopped_daemon(home, started)
    if stopped_by == signal.SIGINT:
        raise KeyboardInterrupt          # one line, `interrupted`, exit 130, as every command (`_main`)
    if stopped_by is not None:
        typer.echo(f"error: docsvault ui stopped by {signal.Signals(stopped_by).name}", err=True)
        sys.exit(128 + stopped_by)
    if code:
        sys.exit(code if code >= 128 else EXIT_ERROR)     # a signal's 128 + N as the child's; else an error


#: what stops `docsvault ui`: passed on to its Dagster process group (SIGHUP as SIGTERM)
UI_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_until_stopped(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, int | None]:
    """Run ``argv`` (in ``cwd``, with ``env``, stdin closed, inheritable descriptors such as the ui lock kept) in a
    process group of its own and wait until it exits; each SIGINT, SIGTERM or SIGHUP this process gets is passed on
    to that whole group once (SIGHUP as SIGTERM, which Dagster shuts down on cleanly).

    Its own group, so a Ctrl-C reaches the Dagster processes exactly once whether it was sent to this process's group
    (a terminal's Ctrl-C) or to this process alone: a second SIGINT during `dg dev`'s shutdown would cut it short.
    On Linux the child also gets SIGTERM when this process dies (even by SIGKILL): it never outlives it unnoticed.
    The child starts with default signal dispositions (an ignored SIGINT, as a background job of a script inherits,
    is not passed on: Dagster could then not be stopped but by kill -9).

    Returns:
        ``(exit code, signal)``: the child's exit code (``128 + N`` when signal N ended it), and the first stop signal
        this process got while it ran (None when it exited by itself).
    """
    import subprocess

    received: list[int] = []
    child: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if child and child[0].poll() is None:
            try:
                os.killpg(child[0].pid, signal.SIGTERM if signum == signal.SIGHUP else signum)
            except ProcessLookupError:
                pass

    previous = {sig: signal.getsignal(sig) for sig in UI_STOP_SIGNALS}
    for sig in UI_STOP_SIGNALS:       # caught here: the child starts with the default action, never an ignore
        signal.signal(sig, forward)
    try:
        # blocked while the child starts: a signal in between is forwarded once it is known (unblocked in the child)
        # (preexec_fn: `docsvault ui` runs no other thread, and nothing else sets the mask or the parent-death signal)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, UI_STOP_SIGNALS)
        try:
            child.append(subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, close_fds=False,
                                          process_group=0,
                                          preexec_fn=_child_setup(os.getpid(), mask)))  # noqa: PLW1509
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        code = child[0].wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    return (128 - code if code < 0 else code), (received[0] if received else None)


def _child_setup(parent: int, mask: set[signal.Signals]) -> Callable[[], None]:
    """The child's set-up between fork and exec (:func:`run_until_stopped`): the parent's signal mask, and on Linux
    SIGTERM when the parent dies (``PR_SET_PDEATHSIG``)."""
    prctl = None
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if prctl is not None:
            prctl(1, int(signal.SIGTERM))           # PR_SET_PDEATHSIG
            if os.getppid() != parent:              # the parent died before: stop now
                os._exit(128 + signal.SIGTERM)

    return setup


def ui_sources_problem(sources_file: Path) -> str | None:
    """Why the code location `docsvault ui` starts could not load ``sources_file`` (the assets are made from it), or
    None when it loads. Before session 46 a mistyped sources.yaml (`kind: lcoal`) or none in the current folder
    started the UI anyway: a 40-line ComponentTreeException traceback in the terminal, the line naming the typo
    in its middle, and a UI whose code location had "Failed" (no assets, jobs, sensor or schedule)."""
    from pipeline.common.errors import PipelineError
    from pipeline.ingest.sources import load_sources

    try:
        load_sources(sources_file)
    except PipelineError as exc:
        return (f"{exc}; the Dagster UI's code location loads its assets from it and would not load: fix it "
                "(`docsvault sources validate`) and run `docsvault ui` again")
    return None


def ui_port_problem(host: str, port: int) -> str | None:
    """Why the Dagster webserver could not listen on ``host:port`` (a bind test with SO_REUSEADDR, as uvicorn
    binds), or None when it can."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"{host}:{port} is already in use: stop what listens there, or pass --port PORT (a free port)"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}; pass --port PORT (a free port)"
    return None


def ui_daemon_problem(home: Path, port: int, port_problem: str | None) -> str | None:
    """``port_problem``, and the `docsvault ui` already running the Dagster daemon for ``home`` when there is one.
    When neither, this process takes ``<home>/docsvault-ui.lock`` for the `dg dev` it starts, which inherits it
    (released when both have exited), so the next `docsvault ui` on this DAGSTER_HOME sees it."""
    from datetime import UTC, datetime

    from pipeline.common.lock import hold_across_exec

    if port_problem and not (home / UI_LOCK).exists():
        return port_problem
    info = {"pid": os.getpid(), "host": UI_HOST, "port": port,
            "started_at": datetime.now(UTC).replace(microsecond=0).isoformat()}
    try:
        lock = hold_across_exec(home / UI_LOCK, info, f"point DAGSTER_HOME ({home}) at a folder on another file system")
    except OSError as exc:
        return f"cannot write {home / UI_LOCK}: {exc.strerror or exc}; fix DAGSTER_HOME ({home}) or its permissions"
    except PipelineError as exc:        # no file locks there: no other UI is known to run
        return str(exc)
    if lock.fd is not None:
        beat = daemon_heartbeat_age(home)        # no `docsvault ui`, but `dg dev` or `dagster-daemon` may run
        if beat is not None:
            lock.release()
            running = (f"a Dagster daemon already runs for DAGSTER_HOME={home} (`dg dev`, `dagster dev` or "
                       f"`dagster-daemon`; last heartbeat {beat:.0f} s ago): use its UI, or start a second UI only "
                       "with --port PORT --webserver-only (two daemons on one instance fight over its sensors and "
                       "run queue); if you have just stopped or killed it, its last heartbeat counts as a running "
                       f"daemon for {max(1, math.ceil(DAEMON_ALIVE_S - beat))} s more: try again then")
            return f"{port_problem}; also, {running}" if port_problem else running
        if port_problem:             # nothing starts: let go at once, naming nobody
            lock.release()
        return port_problem
    other = lock.holder
    where = f"pid {other.get('pid', '?')}, http://{other.get('host', UI_HOST)}:{other.get('port', '?')}"
    running = (f"another `docsvault ui` ({where}) runs the Dagster daemon for DAGSTER_HOME={home}: open its UI or "
               "stop it first (a second UI on this instance without a second daemon: --port PORT --webserver-only)")
    return f"{port_problem}; also, {running}" if port_problem else running


#: a daemon beats every ~20-30 s: a heartbeat younger than this is a daemon that runs now
DAEMON_ALIVE_S = 90.0

#: ``<DAGSTER_HOME>/docsvault-ui-stopped.json``: the daemon a `docsvault ui` ran, recorded once it has exited
#: (:func:`record_stopped_daemon`)
UI_STOPPED = "docsvault-ui-stopped.json"


def _daemon_heartbeats(home: Path) -> list[Any] | None:
    """The latest heartbeat of each daemon type of the instance at ``home`` (``DaemonHeartbeat``:
    ``timestamp`` in epoch seconds, ``daemon_id`` the uuid of the daemon process), or None without an instance
    or when it cannot be read."""
    if not (home / "dagster.yaml").is_file():
        return None
    set_env("DAGSTER_HOME", str(home))      # the instance's dagster.yaml names its event log folder by it
    try:
        import dagster as dg

        with dg.DagsterInstance.from_config(str(home)) as instance:
            return list(instance.get_daemon_heartbeats().values())
    except Exception:          # an instance that cannot be opened: `dg dev` will say why
        return None


def record_stopped_daemon(home: Path, started: float) -> None:
    """After the `dg dev` of `docsvault ui` has exited (its daemon shut down with it): write
    :data:`UI_STOPPED`, ``{"daemon_ids": [...], "stopped_at": <epoch s>}``, the ids of the daemons that beat
    since ``started`` (epoch s), i.e. this UI's daemon, so the next `docsvault ui` does not take their last
    heartbeats for a daemon that runs (:func:`daemon_heartbeat_age`). Nothing is written when nothing beat or
    the file cannot be written."""
    import time

    beats = _daemon_heartbeats(home) or []
    ids = sorted({hb.daemon_id for hb in beats if hb.daemon_id and hb.timestamp >= started})
    if not ids:
        return
    try:
        record = {"daemon_ids": ids, "stopped_at": time.time()}
        (home / UI_STOPPED).write_text(json.dumps(record), encoding="utf-8")
    except OSError:
        pass                   # the next `docsvault ui` may then refuse for up to DAEMON_ALIVE_S, as before


def daemon_heartbeat_age(home: Path) -> float | None:
    """Seconds since the newest Dagster daemon heartbeat of the instance at ``home`` when younger than
    :data:`DAEMON_ALIVE_S` (a daemon runs for it now, whoever started it), else None (also without an instance
    or when it cannot be read). The last heartbeats of the daemon a `docsvault ui` ran and has stopped
    (:data:`UI_STOPPED`: its id, beating no later than it stopped) are not counted: a restart right after a
    clean stop was refused for up to 90 s."""
    import time

    beats = _daemon_heartbeats(home)
    if not beats:
        return None
    try:
        stopped = json.loads((home / UI_STOPPED).read_text(encoding="utf-8"))
        ours, stopped_at = set(stopped["daemon_ids"]), float(stopped["stopped_at"])
    except (OSError, ValueError, KeyError, TypeError):
        ours, stopped_at = set(), 0.0
    alive = [hb.timestamp for hb in beats if not (hb.daemon_id in ours and hb.timestamp <= stopped_at)]
    age = time.time() - max(alive) if alive else None
    return age if age is not None and age < DAEMON_ALIVE_S else None


def unused_instance_file(cwd: Path, home: Path) -> str | None:
    """A warning when ``cwd`` holds a ``dagster.yaml`` (or ``.yml``) that Dagster will not read (it reads
    ``<DAGSTER_HOME>/dagster.yaml``) and that differs from it; None when there is none, when ``cwd`` is DAGSTER_HOME,
    or when it is the same file (the project's template, as `make` and `docsvault build` copy it, followed by
    ``dagster-event-log.yaml``)."""
    here = next((cwd / n for n in ("dagster.yaml", "dagster.yml") if (cwd / n).is_file()), None)
    if here is None or cwd.resolve() == home.resolve():
        return None
    used = home / "dagster.yaml"
    try:
        if used.is_file() and used.read_bytes().startswith(here.read_bytes()):
            return None         # the same file, or it with the project's event log block after it
    except OSError:
        pass
    return (f"{here} is not used: Dagster reads {used}{'' if used.is_file() else ' (missing)'}; copy it there to "
            "apply it")


def ui_target() -> list[str]:
    """The Dagster code-location options of `docsvault ui`: ``-m pipeline.definitions -d <folder holding the
    pipeline package>`` (Dagster's default working directory, the current one, would go on the code location's
    sys.path ahead of the installed packages)."""
    import pipeline

    return ["-m", "pipeline.definitions", "-d", str(Path(pipeline.__file__).resolve().parents[1])]


def main() -> None:
    """Console-script entry point. Every error is one line on stderr with exit code 2 (README "Exit codes"), option
    and argument errors too (Click's own handling prints the usage block), a bug's too (after its traceback).

    The process ends here: its objects go to the garbage collector's permanent generation first (``gc.freeze``),
    so the interpreter's last collection does not walk the ~1M objects a search holds (key tables, vocabularies) to
    free nothing (~0.06 s of a cold `docsvault search`); memory goes back to the system at exit either way."""
    try:
        _main()
    finally:
        gc.freeze()


INTERRUPTED = 130
"""Exit code of a command stopped by Ctrl-C (128 + SIGINT); Typer returns it for a KeyboardInterrupt in a command."""


def usage_error_line(exc: Exception, argv: Sequence[str] = ()) -> str:
    """Click's usage or parameter error as one line, ending with `` (see `docsvault CMD --help`)``.

    An unknown "option" that is text gets how to pass such text (after ``--``; for ``capture`` also piped or with
    ``--file -``): the argument of ``argv`` (the command line) it comes from has a newline or a space in it, or
    starts with ``---`` (a note with frontmatter, a query such as ``'-plugin template'``; Click names only its
    first letters, ``-p``, then)."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    option = getattr(exc, "option_name", None)
    root = ctx.find_root() if ctx is not None else None
    placed = {o: p for p in (root.command.params if root is not None and ctx is not root else ())
              for o in p.opts if o not in ("--help", "--version")}
    if type(exc).__name__ == "NoSuchOption" and option in placed and root is not None and ctx is not None:
        # a global option after the command (`docsvault build --data DIR`, as a Makefile writes it): Click offered
        # `--source` for `--sources` (a source name, not a file) and `--tag` for `--data`
        sub = ctx.command_path.removeprefix(root.command_path).strip()
        metavar = placed[option].metavar or "VALUE"
        message = (f"No such option: {option}: it is an option of {root.command_path} itself and goes before the "
                   f"command: {root.command_path} {option} {metavar} {sub} …")
    elif type(exc).__name__ == "NoSuchOption" and isinstance(option, str):
        text = next((a for a in argv if a.startswith(option) and not a.startswith(f"{option}=")), option)
        cmd = ctx.command_path if ctx is not None else "docsvault COMMAND"
        # a search query's `-word` (an excluded word, README "Query syntax") given alone: `-oolong`, not `-p`
        word = cmd.endswith(" search") and len(text) > 2 and not text.startswith("--")
        if text.startswith("---") or any(ch.isspace() for ch in text) or word:
            shown = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
            shown = shown if len(shown) <= 40 else shown[:40] + "…"
            piped = ", or pipe it or pass it with --file -" if cmd.endswith(" capture") else ""
            message = (f"No such option: '{shown}': text that starts with '-' must come after '--' (options first: "
                       f'{cmd} [OPTIONS] -- "$TEXT"){piped}')
    elif type(exc).__name__ == "MissingParameter" and ctx is not None and (glued := _glued_option(ctx, argv)):
        # `docsvault search -tea`: Click read `-t ea` (a --tag), then found no QUERY
        message += (f" '{glued[0]}' was read as the option {glued[1]} with the value '{glued[0][2:]}': text that "
                    f"starts with '-' must come after '--' (options first: {ctx.command_path} [OPTIONS] -- "
                    '"$TEXT")')
    return f"{' '.join(message.split())}{where}"


def _glued_option(ctx: Any, argv: Sequence[str]) -> tuple[str, str] | None:
    """``(argument, option)`` of the first argument of ``argv`` that Click read as a short option of ``ctx``'s
    command taking a value, glued to it (``-tea``: ``-t`` with ``ea``), when the command takes text (a QUERY or
    TEXT argument): text that starts with ``-`` given before ``--``; None otherwise."""
    params = getattr(ctx.command, "params", ())      # Typer's own Click: its classes, told by param_type_name
    if not any(p.param_type_name == "argument" and (p.name or "").lower() in ("query", "text") for p in params):
        return None
    short = {o for p in params if p.param_type_name == "option" and not getattr(p, "is_flag", False)
             and not getattr(p, "count", False)
             for o in p.opts if len(o) == 2 and o[0] == "-" and o[1] != "-"}
    for arg in argv:
        if arg == "--":
            break
        if len(arg) > 2 and not arg.startswith("--") and arg[:2] in short:
            return arg, arg[:2]
    return None


class _LevelPrefix(logging.Formatter):
    """``warning: …`` / ``error: …`` as the CLI's own warning and error lines begin (a line that already says so is
    left as it is)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno < logging.WARNING:
            return text
        prefix = "error: " if record.levelno >= logging.ERROR else "warning: "
        return text if text.startswith(("warning:", "error:")) else prefix + text


def _log_lines() -> None:
    """Warnings of the core's loggers as lines on stderr (``warning: `` before each, as the CLI's own), set up
    before anything runs: a library that calls ``logging.basicConfig()`` on import (ONNX Runtime's quantizer does,
    at INFO) then changes nothing, where it used to turn later warnings into ``WARNING:pipeline.index.onnx_embed:
    …`` lines (a new user's first build)."""
    if not logging.root.handlers:
        handler = logging.StreamHandler()               # stderr, looked up per record (as the last-resort one)
        handler.setFormatter(_LevelPrefix("%(message)s"))
        logging.root.addHandler(handler)
        logging.root.setLevel(logging.WARNING)


def _storage_problem(exc: BaseException) -> StorageProblem | None:
    """:func:`storage_problem` of an error a command did not catch, naming this command's DAGSTER_HOME and data dir
    (when its options were read); None when a full or read-only disk did not cause it."""
    s = _state.get("settings")
    return storage_problem(exc, dagster_home=s.dagster_home if s else None, data_dir=s.data_dir if s else None)


#: options whose value is a path, which may be any bytes on Linux (other arguments are text: read as UTF-8)
PATH_OPTIONS = ("--sources", "--data", "--vault", "--synonyms", "--file", "-f", "--token-file")


def undecodable_arg_line(argv: Sequence[str]) -> str | None:
    """The error line for the first argument of ``argv`` (``sys.argv[1:]``) that is not UTF-8 text (Python keeps
    such bytes as lone surrogates, ``'\\udcff'``), e.g. a query typed in a Latin-1 terminal or read from a
    Shift_JIS file by a script; None when there is none. A path option's value, or an argument naming an existing
    file, is a path and passes. Before, such an argument was a traceback of ``read``, ``related`` and ``capture``
    and a ``'utf-8' codec can't encode character '\\udce9'`` line of ``search``."""
    for i, arg in enumerate(argv):
        if not any("\udc80" <= ch <= "\udcff" for ch in arg):
            continue
        if (i and argv[i - 1] in PATH_OPTIONS) or arg.startswith(tuple(f"{o}=" for o in PATH_OPTIONS)) \
                or os.path.lexists(arg):
            continue
        raw = arg.encode("utf-8", "surrogateescape")
        shown = raw.decode("utf-8", "backslashreplace")
        shown = shown if len(shown) <= 60 else shown[:60] + "…"
        bad = next(ch for ch in arg if "\udc80" <= ch <= "\udcff")
        return (f"argument '{shown}' is not UTF-8 text (byte 0x{ord(bad) - 0xDC00:02x}): docsvault reads its "
                "arguments as UTF-8; convert it (e.g. iconv -f latin1 -t utf-8) or pass it from a UTF-8 terminal")
    return None


def internal_error_line(exc: BaseException) -> str:
    """The last line of a command that met an error it does not know (a bug): its type and first line, and to
    report it with the traceback printed above it."""
    what = one_line(exc)
    return (f"internal error: {type(exc).__name__}{': ' + what if what else ''} (a bug in docsvault: please report "
            "it with the traceback above and the command that gave it)")


class ClosedPipeTolerant:
    """``sys.stdout`` (and ``sys.stderr``) for a command: once its reader has gone (``docsvault search … | head -1``), what the command
    still writes goes to ``/dev/null``, so it ends with its own exit code (Click would turn the ``BrokenPipeError``
    into exit 1, nothing found to a script, or a failure to ``set -o pipefail``, of a search that found hits)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _closed(self) -> None:
        """Point the stream's file descriptor at ``/dev/null`` (what it still buffers goes there too, also at exit)."""
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _main() -> None:
    _log_lines()
    if sys.stdout is not None and not isinstance(sys.stdout, ClosedPipeTolerant):
        sys.stdout = ClosedPipeTolerant(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, ClosedPipeTolerant):     # `2>&1 | head -1`
        sys.stderr = ClosedPipeTolerant(sys.stderr)
    bad_arg = undecodable_arg_line(sys.argv[1:])
    if bad_arg:
        typer.echo(f"error: {bad_arg}", err=True)
        sys.exit(EXIT_ERROR)
    try:
        rv = app(standalone_mode=False)
    except KeyboardInterrupt:                  # outside a command (Typer converts one inside a command to 130)
        rv = INTERRUPTED
    except PipelineError as exc:          # a user error a command did not catch: still one line
        typer.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(EXIT_ERROR)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(EXIT_ERROR)
    except typer.TyperException as exc:                     # Click's usage and parameter errors (typer vendors Click)
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:   # `docsvault` alone: the help
            typer.echo(ctx.get_help())
            sys.exit(0)
        typer.echo(f"error: {usage_error_line(exc, sys.argv[1:])}", err=True)
        sys.exit(EXIT_ERROR)
    except Exception as exc:  # noqa: BLE001 -- a full or read-only disk (Dagster's SQLite, a lock file), a bug: one line
        problem = _storage_problem(exc)
        line = problem.line if problem is not None else None
        if line is None:                      # a bug: its traceback for the report, then one line, exit 2
            traceback.print_exc()
            line = internal_error_line(exc)
        typer.echo(f"error: {line}", err=True)
        sys.exit(EXIT_ERROR)
    if rv == INTERRUPTED:                 # no command returns 130 itself (`build` exits with its own line)
        typer.echo("interrupted", err=True)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
