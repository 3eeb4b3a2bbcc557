"""What both shells answer (the CLI and the MCP server), so neither imports the other: the environment of a child
process, opening a searcher, lanes, a note's links, related notes of a capture, why a note was skipped, status.

Every function takes the :class:`~pipeline.config.Settings` it works on; none reads global state.
"""

from __future__ import annotations

import re
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pipeline.common.display import char_start
from pipeline.common.errors import PipelineError
from pipeline.config import Settings, environ
from pipeline.models import Record

if TYPE_CHECKING:
    from pipeline.search.reader import NoteNotFoundError
    from pipeline.search.searcher import Searcher
    from pipeline.stages.results import BuildReport

__all__ = [
    "NO_RESULTS", "BuildOutcome", "ModelStatus", "SearchAnswer", "SharedOutcome", "SkippedFiles", "SourceOutcome",
    "SourceStatus", "Status", "WarehouseOutcome", "WarehouseStatus", "build_outcome", "capture_related", "child_env",
    "dangling_links", "errors_file", "missing_vectors_line", "missing_words_line", "missing_words_message",  # noqa: F822
    "common_words_message", "no_hits_message", "query_words_line", "query_words_message",
    "no_notes_line", "no_results_message", "untagged_message",
    "no_project_here", "noop_build", "note_links", "note_missing_message", "open_searcher", "link_problems",
    "related_notes",
    "pages_not_fetched_line", "parse_lanes", "paths_warning_lines", "query_problem", "run_search", "search_lanes",
    "skipped_count", "skipped_file_reasons", "skipped_files", "skipped_reason", "source_warning_lines", "status_data", "unbuilt_name_reason", "unbuilt_reason", "warnings_about",  # noqa: F822
    "status_report", "writable_dir_problem", "write_dirs_problem", "eval_json",
]

#: re-exported from pipeline.ingest.normalize, imported on first access (a search never needs it: ~0.1-0.4 s)
_FROM_NORMALIZE = ("errors_file", "skipped_count")


def __getattr__(name: str) -> Any:
    """``errors_file`` and ``skipped_count`` of :mod:`pipeline.ingest.normalize`, on first access."""
    if name not in _FROM_NORMALIZE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pipeline.ingest import normalize

    value = getattr(normalize, name)
    globals()[name] = value
    return value


#: what search says when nothing matched (the CLI and the MCP search tool's ``message``)
NO_RESULTS = "No results"


class SkippedFiles(NamedTuple):
    """The files the last build of some sources skipped (:func:`skipped_files`): ``unsearched``, never built (no
    note of them is searched), and ``stale``, those whose last good version is served (:data:`pipeline.stages.
    KEPT_SUFFIX`: searched as they last built, not as they are now)."""

    unsearched: int = 0
    stale: int = 0

    def __bool__(self) -> bool:
        return bool(self.unsearched or self.stale)


def _files(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''} the build skipped {'are' if n != 1 else 'is'}"


#: a word of the query longer than this is cut in :func:`missing_words_message`
SHOWN_WORD_CHARS = 40


def missing_words_message(missing: Sequence[str], every: bool, sources: Sequence[str] = (),
                          skipped: int | SkippedFiles = 0, closest: Mapping[str, str] | None = None,
                          tags: Sequence[str] = (), paths: Sequence[str] = ()) -> str:
    """What to tell someone whose query has words no note contains (``Searcher.missing_words``); ``every``: no
    searched word is in any note, so the hits are only near in meaning (the vector lanes); ``skipped``: files of
    those sources the last build skipped (:func:`skipped_files`; an int: files never built), which may hold the
    words: a file never built is not searched, one serving its last good version is searched as it last built;
    ``closest``: missing word -> a word of the notes spelt nearly so (``MissingWords.closest``), offered beside it;
    ``tags``, ``paths``: the search's tag and ``path:`` filters, whose notes alone were looked in.

    >>> missing_words_message(["platypus", "lantern"], True)
    "no note contains 'platypus' or 'lantern': these notes are only near in meaning"
    >>> missing_words_message(["lantern"], False, ["duckdb"], skipped=2)
    "no note of duckdb contains 'lantern'; 2 files the build skipped are not searched (`docsvault status` names them)"
    >>> missing_words_message(["雨"], False, [], SkippedFiles(unsearched=0, stale=1))
    "no note contains '雨'; 1 file the build skipped is searched as it last built, not as it is now (`docsvault status` names them)"
    >>> missing_words_message(["paruqet"], True, closest={"paruqet": "parquet"})
    "no note contains 'paruqet' (did you mean 'parquet'?): these notes are only near in meaning"
    >>> missing_words_message(["キャッシュ"], True, ["ja"], tags=["学習", "til"])
    "no note of ja with the tag '学習' or 'til' contains 'キャッシュ': these notes are only near in meaning"
    >>> missing_words_message(["DuckDB"], False, paths=["prefect/"])
    "no note in path:prefect/ contains 'DuckDB'"
    >>> missing_words_message(["雨"], False, [], SkippedFiles(unsearched=1, stale=2))
    "no note contains '雨'; of the files the build skipped, 1 is not searched and 2 are searched as they last built, not as they are now (`docsvault status` names them)"
    """
    where = f"no note of {', '.join(sources)}" if sources else "no note"
    if tags:                # the hits are of these notes: a word only other notes have is missing from them
        where += " with the tag " + " or ".join(repr(_shown(t)) for t in tags)
    if paths:
        where += " in " + " or ".join(f"path:{_shown(p)}" for p in paths)
    # a word is cut to its first SHOWN_WORD_CHARS - 1 and `…`: a pasted 10 kB word made this note 2,000 chars long
    near = closest or {}
    words = " or ".join(repr(_shown(w)) + (f" (did you mean {near[w]!r}?)" if near.get(w) else "") for w in missing)
    files = SkippedFiles(skipped) if isinstance(skipped, int) else skipped
    stale = (f"searched as {'they' if files.stale != 1 else 'it'} last built, not as "
             f"{'they are' if files.stale != 1 else 'it is'} now")
    if files.unsearched and files.stale:
        what = (f"of the files the build skipped, {files.unsearched} {'are' if files.unsearched != 1 else 'is'} "
                f"not searched and {files.stale} {'are' if files.stale != 1 else 'is'} {stale}")
    else:
        what = (f"{_files(files.unsearched)} not searched" if files.unsearched
                else f"{_files(files.stale)} {stale}" if files.stale else "")
    note = f"; {what} (`docsvault status` names them)" if what else ""
    return f"{where} contains {words}" + (": these notes are only near in meaning" if every else "") + note


def common_words_message(text: str, hits: bool = True) -> str:
    """What to tell someone whose query has words but none that keyword search looks for (stopwords, question
    words: ``what is the``, ``これは何ですか``; ``Searcher.missing_words`` searched none): the hits are only near
    in meaning (``hits`` False: there are none to speak of). "" when ``text`` has no word (punctuation only).
    Before session 45 such a query returned hits with no word said, as if they matched it (helper-137).

    >>> common_words_message("what is the?")
    "every word of the query is too common to search for ('what', 'is', 'the'): these notes are only near in meaning; add a word that names what you look for"
    """
    words = [w.strip("\"'`.,;:!?()[]{}<>") for w in text.split()]
    words = [w for w in words if any(c.isalnum() for c in w)]
    if not words:
        return ""
    shown = ", ".join(repr(_shown(w)) for w in words[:8]) + (", ..." if len(words) > 8 else "")
    near = ": these notes are only near in meaning;" if hits else ";"
    return f"every word of the query is too common to search for ({shown}){near} add a word that names what you look for"


def query_words_message(missing: Any, text: str, sources: Sequence[str] = (),
                        skipped: int | SkippedFiles = 0, tags: Sequence[str] = (), paths: Sequence[str] = ()) -> str:
    """What search says of the query's words after its hits (the CLI and the MCP ``search`` tool alike): the words
    no note contains (:func:`missing_words_message`), or that every word is too common to search for
    (:func:`common_words_message`); "" when there is nothing to say. ``missing``: ``Searcher.missing_words``'s
    answer (None: not asked)."""
    if missing is None:
        return ""
    if missing.missing:
        return missing_words_message(missing.missing, missing.every, sources, skipped,
                                     dict(getattr(missing, "closest", ())), tags, paths)
    return "" if missing.words else common_words_message(text)


def no_hits_message(missing: Any, text: str, sources: Sequence[str] = (), skipped: int | SkippedFiles = 0,
                     tags: Sequence[str] = (), paths: Sequence[str] = ()) -> str:
    """What search says when its lanes found nothing and no filter explains it (keyword-only lanes, ``--lanes
    bm25``: the vector lanes always find the nearest notes): :data:`NO_RESULTS` and the query's words no note
    contains, with the word a misspelt one probably meant, or that every word is too common to search for. Before
    session 49 it said only "No results", so an agent that searched ``paruqet`` by keyword could not tell a typo
    from a topic the notes lack; the hybrid search names it. ``missing``: ``Searcher.missing_words``'s answer
    (None: not asked); the other arguments as :func:`missing_words_message` takes them.

    >>> from pipeline.search.searcher import MissingWords
    >>> no_hits_message(MissingWords(("paruqet",), ("paruqet",), (("paruqet", "parquet"),)), "paruqet", ["duckdb"])
    "No results: no note of duckdb contains 'paruqet' (did you mean 'parquet'?)"
    >>> no_hits_message(MissingWords((), ()), "what is the?")
    "No results: every word of the query is too common to search for ('what', 'is', 'the'); add a word that names what you look for"
    """
    if missing is None:
        return NO_RESULTS
    if missing.missing:
        return f"{NO_RESULTS}: " + missing_words_message(missing.missing, False, sources, skipped,
                                                          dict(getattr(missing, "closest", ())), tags, paths)
    if not missing.words and (common := common_words_message(text, hits=False)):
        return f"{NO_RESULTS}: {common}"
    return NO_RESULTS


def query_words_line(missing: Any, text: str, sources: Sequence[str] = (), skipped: int | SkippedFiles = 0,
                     tags: Sequence[str] = (), paths: Sequence[str] = ()) -> str:
    """:func:`query_words_message` as the CLI prints it, in parentheses like its other notes ("" when empty)."""
    message = query_words_message(missing, text, sources, skipped, tags, paths)
    return f"({message})" if message else ""


def _shown(term: str) -> str:
    """``term`` cut to its first SHOWN_WORD_CHARS - 1 characters and ``…`` when longer (a pasted phrase), never
    inside a character: not between a kana and its voiced mark (NFD) nor inside an emoji sequence (``👨‍👩‍👧``
    was shown ``👨`` and a dangling joiner before the ``…``)."""
    return term if len(term) <= SHOWN_WORD_CHARS else term[:char_start(term, SHOWN_WORD_CHARS - 1, 0)] + "…"


#: an IME's comma between two tags (``tag:読書、小説``): ``、`` or a full-width ``，``
_JA_COMMA = re.compile("[\u3001\uff0c]")


def untagged_message(tags: Sequence[str], sources: Sequence[str] = (), known: Sequence[str] = ()) -> str:
    """What search says when no note of ``sources`` (none: all) has any of ``tags`` (the CLI and the MCP ``search``
    tool alike), with the tag of ``known`` (the tags those notes have: ``Searcher.tag_names``) each one probably
    meant (`--tag cofee` beside notes tagged `coffee`).

    >>> untagged_message(["perf"], ["help"])
    "No results: no note of help has the tag 'perf' (frontmatter or inline #tag)"
    >>> untagged_message(["cofee"], [], ["coffee", "work"])
    "No results: no note has the tag 'cofee' (frontmatter or inline #tag; did you mean 'coffee'?)"

    A tag with a Japanese comma (``、`` or ``，``, as an IME types a list: ``tag:読書、小説``) may be one Obsidian
    tag, so it is no error as ``journal,urgent`` is; when no note has it, the message names the separate tags
    (``it has a Japanese comma: give '読書', '小説' as 2 separate tags``).
    """
    from pipeline.ingest.sources import close_names, did_you_mean_question
    from pipeline.search.tags import normalise_tag

    where = f"no note of {', '.join(sources)}" if sources else "no note"
    hints = close_names([normalise_tag(t) for t in tags], known)
    split = []
    for t in tags:
        parts = [p for p in _JA_COMMA.split(t.strip().lstrip("#")) if p.strip()]
        if len(parts) > 1:
            split.append(f"it has a Japanese comma: give {', '.join(map(repr, parts))} as {len(parts)} separate tags")
    notes = [*split[:1], *([did_you_mean_question(hints)] if hints else [])]
    return (f"{NO_RESULTS}: {where} has the tag {' or '.join(repr(t) for t in tags)} (frontmatter or inline #tag"
            + "".join(f"; {n}" for n in notes) + ")")


def no_results_message(misses: Any, filters: Any, sources: Sequence[str] = ()) -> str:
    """What search says when its filters left nothing: :data:`NO_RESULTS` and, from ``misses``
    (``Searcher.filter_misses``) of the parsed query ``filters``, the filter no note passes (a ``path:``, a quoted
    phrase, phrases together, or the exclusions); just :data:`NO_RESULTS` when none alone explains it.

    >>> from pipeline.search.searcher import FilterMisses
    >>> from pipeline.search.query import parse_query
    >>> no_results_message(FilterMisses(paths=("nothere/",)), parse_query("path:nothere/ foo"), ["duckdb"])
    "No results: no note of duckdb has a path starting with 'nothere/'"
    >>> no_results_message(FilterMisses(absent=(("usr_id",),)), parse_query('column "usr_id"'))
    'No results: no note contains "usr_id" (a quoted phrase must be in the note as typed; drop the quotes to rank by its words)'
    """
    where = f"no note of {', '.join(sources)}" if sources else "no note"
    if misses.paths:
        shown = " or ".join(("matching " if any(c in p for c in "*?[") else "starting with ") + repr(_shown(p))
                            for p in misses.paths)
        meant = getattr(misses, "meant", ())
        return f"{NO_RESULTS}: {where} has a path {shown}" + (
            f" (did you mean {' or '.join(f'path:{m}' for m in meant)}?)" if meant else "")
    if filters.paths:
        where += " in " + " or ".join(f"path:{_shown(p)}" for p in filters.paths)
    hint = " (a quoted phrase must be in the note as typed; drop the quotes to rank by its words)"

    def phrases(groups: Sequence[Sequence[str]], joint: str) -> str:
        return joint.join(" or ".join(f'"{_shown(alt)}"' for alt in group) for group in groups)

    if misses.absent:
        return f"{NO_RESULTS}: {where} contains {phrases(misses.absent, ', nor ')}{hint}"
    if misses.apart:
        return f"{NO_RESULTS}: {where} contains {phrases(filters.required, ' and ')} together{hint}"
    if misses.excluded:
        held = f" holding {phrases(filters.required, ' and ')}" if filters.required else ""
        return (f"{NO_RESULTS}: every note{where[7:]}{held} contains an excluded term: "
                + " or ".join(f'-"{_shown(t)}"' if " " in t else f"-{_shown(t)}" for t in filters.excluded))
    return NO_RESULTS


def missing_words_line(missing: Sequence[str], every: bool, sources: Sequence[str] = (),
                       skipped: int | SkippedFiles = 0) -> str:
    """:func:`missing_words_message` as the CLI prints it, in parentheses like its other notes."""
    return f"({missing_words_message(missing, every, sources, skipped)})"


def skipped_files(s: Settings, sources: Sequence[str] = ()) -> SkippedFiles:
    """Files the last build of ``sources`` (every source with a record when empty) skipped: malformed notes,
    unreadable files (the lines of their ``<data>/state/<source>.errors.txt``); ``stale`` those serving their
    last good version (the line ends in :data:`pipeline.stages.KEPT_SUFFIX`: the note is searched as it last
    built; before, they were counted as not searched)."""
    from pipeline.ingest.normalize import ERRORS_SUFFIX, skipped_lines
    from pipeline.stages import KEPT_SUFFIX

    names = list(sources) or [p.name[: -len(ERRORS_SUFFIX)] for p in s.state_dir.glob(f"*{ERRORS_SUFFIX}")]
    unsearched = stale = 0
    for name in names:
        lines = skipped_lines(s, name)
        kept = sum(1 for line in lines if line.strip().endswith(KEPT_SUFFIX.strip()))
        stale += kept
        unsearched += len(lines) - kept
    return SkippedFiles(unsearched, stale)


def skipped_file_reasons(s: Settings, source: str, cap: int = 50) -> list[dict[str, str]]:
    """The files the last build of ``source`` skipped, ``[{"file": source path, "reason"}]`` in the errors file's
    order, at most ``cap``: what the MCP ``refresh`` names, so an agent whose note has a frontmatter typo learns
    that it is not searchable, and why (its outcome gave only ``skipped_files``, a count)."""
    from pipeline.ingest.normalize import skipped_files as reasons

    return [{"file": f, "reason": r} for f, r in list(reasons(s, source).items())[:cap]]


def child_env(s: Settings) -> dict[str, str]:
    """The environment a child process (build, webserver) needs to see the same paths as this command."""
    env = dict(environ())
    env.update({
        "DOCSVAULT_SOURCES": str(s.sources_file), "DOCSVAULT_DATA": str(s.data_dir),
        "DOCSVAULT_VAULT": str(s.vault_dir), "DOCSVAULT_EVALS": str(s.evals_dir), "DOCSVAULT_MODEL": s.model,
        "DAGSTER_HOME": str(s.dagster_home),
    })
    if s.synonyms_required:     # only an explicit path: the default location stays optional in the child too
        env["DOCSVAULT_SYNONYMS"] = str(s.synonyms_file)
    else:
        env.pop("DOCSVAULT_SYNONYMS", None)
    return env


def open_searcher(s: Settings, embedder_factory: Any = None, **options: Any) -> Searcher:
    """A Searcher over ``s.warehouse_path`` (one query thread, the settings' synonyms); ``options`` are fields of
    :class:`pipeline.search.searcher.SearchConfig` (e.g. ``usage_boost``); ``embedder_factory`` None: the default.

    Raises:
        SynonymsError: the synonyms file is invalid (or missing when named explicitly).
        WarehouseNotBuiltError: no warehouse yet (the message says when the first build is still running).
    """
    from pipeline.common.errors import WarehouseNotBuiltError
    from pipeline.common.lock import running_build
    from pipeline.search.searcher import SearchConfig, Searcher
    from pipeline.search.synonyms import check_synonyms_file

    check_synonyms_file(s.synonyms_file, s.synonyms_required)
    try:
        config = SearchConfig(**{"query_threads": 1, "synonyms": s.synonyms_file, **options})
        return Searcher(s.warehouse_path, *([embedder_factory] if embedder_factory else []), config=config)
    except WarehouseNotBuiltError as exc:
        running = running_build(s.data_dir)
        if running:
            raise WarehouseNotBuiltError(f"no warehouse at {s.warehouse_path} yet: the first build is "
                                         f"running ({running}); search works when it has finished") from exc
        if (elsewhere := no_project_here(s)):    # no project here at all: a build would fail too
            raise WarehouseNotBuiltError(elsewhere) from exc
        raise


def no_project_here(s: Settings) -> str | None:
    """The one line of a command that needs the warehouse, run where there is neither a warehouse nor a sources
    file (from another folder than the project's, with the default ``./data`` and ``./sources.yaml``): both paths,
    and to run from the project or point the paths at it, since `docsvault build` would fail there too. None when
    either exists (a project not built yet is told to build)."""
    if s.warehouse_path.exists() or s.sources_file.exists():
        return None
    return (f"no warehouse at {s.warehouse_path} and no sources file at {s.sources_file}: run docsvault from "
            "your project's folder, or point --data and --sources (DOCSVAULT_DATA, DOCSVAULT_SOURCES) at "
            "where you built (relative paths are read from the current folder)")


class SearchAnswer(NamedTuple):
    """What :func:`run_search` found: the hits (at most k), whether more pass a query of filters alone
    (``more``; False for a ranked query), and the sources and tags searched (the caller's and the query's)."""

    hits: list[Any]
    more: bool
    sources: list[str]
    tags: list[str]


def run_search(s: Settings, searcher: Searcher, parsed: Any, k: int, sources: Sequence[str] = (),
               tags: Sequence[str] = (), lanes: Sequence[str] | None = None) -> SearchAnswer:
    """One search as both shells make it: ``parsed`` (:func:`pipeline.search.query.parse_query`) with the caller's
    ``sources`` and ``tags`` (``--source``/``--tag``, the MCP arguments) before the query's own, its required and
    excluded words and ``path:`` filters; a query of filters alone lists the notes that pass them (one more
    asked for, to tell whether the list was cut).

    Raises:
        UnknownSourceError: a source is not in the warehouse; the message says when it is configured but has no
            notes yet (:func:`pipeline.ingest.sources.unbuilt_sources_message`).
        ValueError: an unknown lane.
    """
    from pipeline.common.errors import UnknownSourceError

    sources = [*(w for w in sources if w), *parsed.sources]
    tags = [*tags, *parsed.tags]
    filters = parsed if (parsed.required or parsed.excluded or parsed.paths) else None
    listing = not parsed.text
    try:
        hits = searcher.search(parsed.text, k=k + listing, source=sources or None, tags=tags or None, lanes=lanes,
                               filters=filters)
    except UnknownSourceError as exc:
        from pipeline.ingest.sources import unbuilt_sources_message

        why = unbuilt_sources_message(s.sources_file, sources, searcher.sources)
        raise UnknownSourceError(why) if why else exc from None
    return SearchAnswer(hits[:k], len(hits) > k, sources, tags)


def search_lanes(spec: str | None, arg: str = "--lanes") -> list[str] | None:
    """``--lanes`` of search: ``"bm25,vector,graph"`` -> those lanes (``hybrid`` = the default lanes); None: the
    default lanes. ``arg``: how the caller's user names the argument in an error (``--lanes``; MCP ``lanes``).

    Raises:
        ValueError: an unknown lane or an empty list (the message lists the available ones).
    """
    if spec is None:
        return None
    lanes: list[str] = []
    for names in parse_lanes(spec, arg).values():
        lanes += [n for n in names if n not in lanes]
    return lanes


def parse_lanes(spec: str, arg: str = "--lanes") -> dict[str, list[str]]:
    """``"bm25,vector,hybrid"`` -> ``{"bm25": ["bm25"], "vector": ["vector"], "hybrid": [the default lanes]}``.
    ``arg``: the argument's name in an error (``--lanes`` in the CLI, ``lanes`` in MCP).

    Raises:
        ValueError: an unknown name (the message lists the available ones).
    """
    from pipeline.ingest.sources import did_you_mean
    from pipeline.search.searcher import DEFAULT_LANES, LANES

    names = [*LANES, "hybrid", "hybrid+graph"]
    out: dict[str, list[str]] = {}
    for name in (n.strip() for n in spec.split(",")):
        if not name:
            continue
        if name == "hybrid":
            out[name] = list(DEFAULT_LANES)
        elif name == "hybrid+graph":
            out[name] = [*DEFAULT_LANES, "graph"]
        elif name in LANES:
            out[name] = [name]
        else:
            raise ValueError(f"unknown lane {name!r} in {arg}{did_you_mean([name], names)}; available: "
                             f"{', '.join(names)}")
    if not out:
        raise ValueError(f"{arg} is empty; available: {', '.join(names)}")
    return out


def note_links(s: Settings, vault_path: str, cap: int | None = None) -> dict[str, Any]:
    """Outlinks and backlinks of a note from the warehouse (``read`` and the MCP ``read`` tool): ``{"outlinks",
    "backlinks"}`` (``[{"path", "title", "links"}]``, most links first, at most ``cap`` each: default
    :data:`~pipeline.search.neighbours.LINKS_CAP` (10), 0 for all of them) and their ``*_total``; empty without a
    warehouse."""
    from pipeline.search.neighbours import LINKS_CAP, links_for_paths

    cap = LINKS_CAP if cap is None else cap or None

    empty: dict[str, Any] = {"outlinks": [], "backlinks": [], "outlinks_total": 0, "backlinks_total": 0}
    if not s.warehouse_path.exists():
        return empty
    try:
        return links_for_paths(s.warehouse_path, [vault_path], cap=cap)[vault_path]
    except PipelineError:
        return empty


def related_notes(s: Settings, note: str, k: int = 10) -> dict[str, Any]:
    """The notes related to ``note`` (a vault path, name, title, alias or link, as ``read`` takes it) through the
    link graph, up to two hops, ranked by link weight and vector similarity (:func:`pipeline.search.neighbours.
    related`; ``docsvault related`` and the MCP ``related`` tool): ``{"path", "related"}`` (rows ``path``,
    ``title``, ``score``, ``hops``, ``link_weight``, ``similarity``; at most ``k``), with ``message`` when the note
    has no links.

    Raises:
        PipelineError: no warehouse yet; NoteNotFoundError: no such note, its message
            :func:`note_missing_message`'s (why the last build skipped it, when it did).
    """
    from pipeline.search.neighbours import related
    from pipeline.search.reader import NoteNotFoundError, find_link

    if not s.warehouse_path.exists():
        raise PipelineError(no_project_here(s) or f"no warehouse at {s.warehouse_path}: run `docsvault build` "
                            "first (or the refresh tool)")
    try:
        path = find_link(s.vault_dir, note, s.warehouse_path)[0]
    except NoteNotFoundError as exc:                # a note the build skipped: why, as read says it
        raise type(exc)(note_missing_message(s, note, exc)) from None
    try:
        rows = related(s.warehouse_path, path, k)
    except NoteNotFoundError as exc:                # a file of the vault no build reads: say so, not "build"
        raise type(exc)(_not_built_file(s, path) or str(exc)) from None
    return {"path": path, "related": rows, **({} if rows else {"message": _no_related_message(s, path)})}


def _no_related_message(s: Settings, vault_path: str) -> str:
    """What ``related`` says of a note with no linked notes: that it has no links, or that its links name only
    notes the vault does not have (``[[存在しないノート]]``; before, "no outlinks" of a note that has links)."""
    from pipeline import warehouse as wh

    con = wh.connect(s.warehouse_path, read_only=True)
    try:
        targets, n = wh.dangling_targets(con, vault_path)
    finally:
        con.close()
    if not targets:     # say what to do too: before, the line ended there (helper s49-ja)
        name = vault_path.rsplit("/", 1)[-1].removesuffix(".md")
        return (f"no linked notes: this note has no outlinks or backlinks; link it from another note ([[{name}]]), "
                f"or find the notes near it in meaning with a search: `docsvault search {shlex.quote(name)}` / the "
                "search tool")
    more = f" and {n - len(targets)} more" if n > len(targets) else ""
    names = ", ".join(f"[[{t}]]" for t in targets) + more
    them = "the notes, or fix the links" if n > 1 else "the note, or fix the link"
    return (f"no linked notes: this note has no backlinks, and its links name no note of the vault ({names}: "
            f"create {them}; `docsvault check-vault` lists every dangling link)"
            + "".join(f"; {hint}" for t in targets if (hint := _titled_note_hint(s, t))))


def _titled_note_hint(s: Settings, target: str) -> str | None:
    """What to write instead of the dangling link ``[[target]]`` when ``read`` finds one note by that name through
    its title or an alias, not its file name (``Camping.md`` renamed ``Outdoors.md``, its ``# Camping`` kept):
    Obsidian resolves a link by file name only, so the link stays dangling, and "create the note" would make a
    second note of that title. None when no note or several have the name, or the note's file has it."""
    import shlex

    from pipeline.search.reader import find_note

    try:
        path = find_note(s.vault_dir, target, s.warehouse_path)
    except PipelineError:
        return None
    stem = Path(path).stem
    if stem.casefold() == target.rsplit("/", 1)[-1].casefold():
        return None                 # the file has the name: dangling for another reason, no rename to point at
    return (f"no note's file is called {target!r}, but the note {path} has that title or alias "
            f"(`read {shlex.quote(target)}` opens it): to link it, write [[{stem}]]")


def _not_built_file(s: Settings, vault_path: str) -> str | None:
    """Why the vault file ``vault_path``, which ``read`` opens, is no note of the warehouse when no build wrote
    it: a file of the user's outside the source folders (``Inbox/x.md``), or in one (``me/x.md``), which no build
    reads, so a build would not make it one (before session 42 ``related`` said to run one); None for a file the
    build wrote (a note not yet published)."""
    import unicodedata

    from pipeline.ingest.ownership import load_manifest

    source, _, rel = vault_path.partition("/")
    manifest = load_manifest(s.vault_dir / source) if rel else None
    if manifest is not None and unicodedata.normalize("NFC", rel) in manifest:
        return None
    where = (f"in the source folder vault/{source}/ (a file docsvault did not write)" if manifest is not None
             else "outside the source folders of the vault")
    return (f"{vault_path!r} is your own file {where}: no build reads it, so it has no links or related notes; "
            f"to have it searched and linked, move it into the folder a `local` source of {s.sources_file} reads "
            "(not the vault) and run `docsvault build` (or the refresh tool)")


def dangling_links(s: Settings, sources: Sequence[Any]) -> list[dict[str, Any]] | None:
    """Every dangling link in the vault (``docsvault check-vault``): the first list of :func:`link_problems`;
    None when a note of the vault cannot be read."""
    found = link_problems(s, sources)
    return None if found is None else found[0]


def link_problems(s: Settings, sources: Sequence[Any]
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """``(dangling, missing_heading)``: the vault's links that ``docsvault check-vault`` names, resolved over the
    notes of every built source of ``sources`` (those with a vault folder) as the build's link graph resolves
    them; each ``{"path": note vault path, "link": the link as the vault has it (:func:`_as_written`), "file":
    the note's source path, "line": the line of that file the link is on (None when not found there),
    "written": the link as written in that file (:func:`_as_in_files`; else ``link``), "target": the note it
    names, as the vault has it, without ``#heading`` and ``|alias`` (``Nowhere``)}``.

    ``dangling``: a link of a built source's note that resolves to no note and to no attachment; one per note,
    target and kind (the rows of the warehouse's ``links`` table that ``status`` counts as dangling, after a
    build), its first occurrence: ``[[target#heading|alias]]``, ``![[target]]`` (an embed) or ``[…](target)``
    (a Markdown link). ``missing_heading``: a link whose note exists but whose ``#heading`` or ``#^block`` is
    not in it (:func:`pipeline.index.graph.missing_subpaths`), one per note and link. Each in vault path
    order, then the links' order in the note. None when a note of the vault cannot be read (``check-vault``
    names it)."""
    import functools
    from collections import defaultdict

    from pipeline.common.errors import NoteError
    from pipeline.index.graph import build_graph, missing_subpaths, parse_links, property_links
    from pipeline.ingest.vault import read_notes
    from pipeline.stages.index import built_sources

    try:
        notes = read_notes(s.vault_dir, built_sources(s, sources))
    except NoteError:
        return None
    parse = functools.lru_cache(maxsize=None)(parse_links)          # each body parsed once for three passes
    dangling: dict[str, set[tuple[str, str]]] = defaultdict(set)     # note id -> {(target, kind)}
    for e in build_graph(notes, parse).edges:
        if e.dst is None:
            dangling[e.src].add((e.target, e.kind))
    out = []
    for note in sorted((n for n in notes if n.note_id in dangling), key=lambda n: n.vault_path):
        for link in [*property_links(note.frontmatter), *parse(note.body)]:     # the file's order
            key = (link.target, "embed" if link.embed else link.kind)
            if key in dangling[note.note_id]:
                dangling[note.note_id].discard(key)
                out.append((note.vault_path, link))
    by_path = {n.vault_path: n for n in notes}
    files = _note_files(s, sources)
    return (_as_in_files(out, by_path, files),
            _as_in_files(missing_subpaths(notes, parse), by_path, files))


def _note_files(s: Settings, sources: Sequence[Any]) -> dict[tuple[str, str], Path]:
    """``{(source, source path): the file it was fetched from}`` (the fetch state's ``files``): a local source's
    own files, the checkout or download of the others."""
    from pipeline.ingest.fetch.base import read_state

    out: dict[tuple[str, str], Path] = {}
    for src in sources:
        for f in (read_state(src, s) or {}).get("files") or []:
            if isinstance(f, dict) and f.get("source_path") and f.get("path"):
                out[(src.name, str(f["source_path"]))] = Path(str(f["path"]))
    return out


def _as_in_files(found: Sequence[tuple[str, Any]], notes: Mapping[str, Any],
                 files: Mapping[tuple[str, str], Path]) -> list[dict[str, Any]]:
    """``found`` (``(note vault path, link)``, each note's in its order) as :func:`link_problems` reports them:
    each link quoted as written in the note's file, with its line (:func:`_written_links`): what the user wrote,
    not the vault's form of it (normalize rewrites links: ``[text](Install%20guide.md)``, a Markdown link to a
    note made a wikilink, a name another source shares qualified)."""
    from itertools import groupby

    out = []
    for path, group in groupby(found, key=lambda pair: pair[0]):
        links = [link for _, link in group]
        note = notes[path]
        where = _written_links(files.get((note.source, note.source_path)), links)
        for link, at in zip(links, where, strict=True):
            out.append({"path": path, "link": _as_written(link), "file": note.source_path,
                        "line": at[1] if at else None, "written": at[0] if at else _as_written(link),
                        "target": link.target})
    return out


def _written_links(file: Path | None, links: Sequence[Any]) -> list[tuple[str, int] | None]:
    """For each of ``links`` (a note's, in its order) the link as written in ``file`` and its 1-based line: the
    first link of the file not taken yet that parses the same (:func:`pipeline.index.graph.link_spans`), else the
    first that has its embed mark, heading, block and note name (the target's last part, without ``.md``, case
    ignored: the vault may have qualified or converted it); None when the file has no such link (or cannot be
    read). A link of the note's properties (``kind`` "property") is looked for in the file's frontmatter, any
    other in the text after it."""
    import unicodedata
    from dataclasses import replace

    from pipeline.common.frontmatter import frontmatter_end, normalize_newlines
    from pipeline.index.graph import link_spans

    try:
        raw = file.read_text(encoding="utf-8", errors="replace") if file else ""
    except OSError:
        raw = ""
    lines = normalize_newlines(raw).split("\n")
    end = frontmatter_end(lines)
    head = end + 1 if end is not None else 0
    # the text with its frontmatter blanked, and the frontmatter with the text blanked, each keeping its lines
    text = "\n".join([""] * head + lines[head:])
    spans = link_spans(text) if "[" in text else []
    props = "\n".join(lines[:head] + [""] * (len(lines) - head))

    def whole_value(start: int, end: int) -> bool:      # "[[x]]" or '[[x]]', not "text [[x]]": a property link
        before, after = props[:start].rstrip(" \t")[-1:], props[end:].lstrip(" \t")[:1]
        return before in ("'", '"') and after == before

    prop_spans = [(a, b, replace(w, kind="property")) for a, b, w in link_spans(props) if whole_value(a, b)] \
        if "[[" in props else []

    def name(link: Any) -> str:
        leaf = link.target.rstrip("/").rsplit("/", 1)[-1]
        return unicodedata.normalize("NFC", leaf.removesuffix(".md")).casefold()

    def like(written: Any, link: Any, exact: bool) -> bool:
        return written == link if exact else (
            (written.embed, written.heading, written.block, name(written)) ==
            (link.embed, link.heading, link.block, name(link)))

    taken: set[tuple[bool, int]] = set()
    out: list[tuple[str, int] | None] = []
    for link in links:
        prop = link.kind == "property"
        pool, source = (prop_spans, props) if prop else (spans, text)
        at = next((i for exact in (True, False) for i, (_, _, w) in enumerate(pool)
                   if (prop, i) not in taken and like(w, link, exact)), None)
        if at is None:
            out.append(None)
            continue
        taken.add((prop, at))
        start, end, _ = pool[at]
        out.append((source[start:end], source.count("\n", 0, start) + 1))
    return out


def _as_written(link: Any) -> str:
    """A parsed link (:class:`~pipeline.models.WikiLink`) as Markdown: ``[[target#heading#^block|alias]]``,
    ``!`` before an embed, ``[…](target#heading)`` for a Markdown link."""
    part = (f"#{link.heading}" if link.heading else "") + (f"#^{link.block}" if link.block else "")
    if link.kind == "markdown":
        return f"[…]({link.target}{part})"
    alias = f"|{link.alias}" if link.alias else ""
    return ("!" if link.embed else "") + f"[[{link.target}{part}{alias}]]"


def capture_related(s: Settings, title: str | None, text: str, k: int = 3) -> list[str]:
    """Vault paths of the top ``k`` notes a search for a captured note finds (its ``title`` as given, on one line;
    None or "": the one its text gives, :func:`pipeline.ingest.capture.title_of`); [] without a warehouse (or when
    the search fails: a capture never fails because of it)."""
    from pipeline.common.display import one_line
    from pipeline.ingest.capture import related_for, title_of

    if not s.warehouse_path.exists():
        return []
    try:
        searcher = open_searcher(s)
    except PipelineError:
        return []
    try:
        return related_for(searcher, one_line(title or title_of(text)), text, k)
    except (PipelineError, ValueError):
        return []
    finally:
        searcher.close()


def skipped_reason(s: Settings, note: str) -> str | None:
    """Why the last build left ``note`` (a vault path ``source/path`` or a source path) out of the vault, one line
    (``<source>/<path> is not in the vault: the last build skipped it (<reason>)``), or None when it did not.

    Two records are read: the source's normalize errors (:func:`pipeline.ingest.normalize.skipped_reason`:
    malformed, not UTF-8, empty) and the warnings its last fetch of a local folder kept in
    ``<data>/raw/<source>/fetch.json`` (a symlink leaving the root, a symlink loop, a dangling symlink, a file in
    a symlinked or unreadable folder). A note named without its ``.md`` (as an Obsidian link names it:
    ``Broken`` or ``tiny/Broken``) is looked up as ``Broken.md`` at the source's root (``<source>/Broken.md``) too;
    a name ending in ``/`` is a folder, not a note."""
    from pipeline.ingest.normalize import skipped_reason as normalize_reason

    bare = not note.lower().endswith((".md", ".mdx")) and not note.endswith("/")
    names = [note, f"{note}.md"] if bare else [note]
    for name in names:
        reason = normalize_reason(s, name) or _fetch_skip_reason(s, name)
        if reason:
            return reason
    return None


def note_missing_message(s: Settings, note: str, exc: NoteNotFoundError) -> str:
    """The one line ``read`` shows when :func:`pipeline.search.reader.find_note` raised ``exc`` for ``note``: where
    docsvault looked when there is neither a warehouse nor a sources file (:func:`no_project_here`: run from another
    folder), why the last build skipped it (:func:`skipped_reason`) when no note has that path or name, else
    ``exc``'s message — a name several notes share keeps the list of their vault paths."""
    from pipeline.search.reader import AmbiguousNoteError

    if isinstance(exc, AmbiguousNoteError):
        return str(exc)
    return (no_project_here(s) or skipped_reason(s, note) or unbuilt_reason(s, note) or unbuilt_name_reason(s, note)
            or str(exc))


def unbuilt_reason(s: Settings, note: str) -> str | None:
    """One line when ``note``, a vault path ``<source>/<path>.md`` of a ``local`` source, is a file of that source
    its build reads but no build has read yet (``save_note`` wrote it while another build held the lock, or a user
    just made it): where the file is and the rebuild that brings it in. None otherwise. Before session 44 ``read``
    and ``related`` said "no note … in the vault; use a vault_path from search results" of the ``path`` that
    ``save_note`` had just returned. A file of the source in its Obsidian vault's templates folder, which its build
    leaves out, gets that folder named instead (:func:`_template_reason`)."""
    from pipeline.ingest.sources import load_sources

    name, *parts = note.strip().strip("/").split("/")
    rest = "/".join(part for part in parts if part)          # `notes//x.md` is `x.md`, never an absolute path
    if not rest.lower().endswith(".md") or any(part in (".", "..") or "\\" in part for part in parts):
        return None
    try:
        source = next((x for x in load_sources(s.sources_file) if x.name == name and x.kind == "local"), None)
    except PipelineError:
        return None
    if source is None or not source.path:
        return None
    return _unbuilt_in(s, source, rest, note)


def _unbuilt_in(s: Settings, source: Any, rest: str, note: str) -> str | None:
    """:func:`unbuilt_reason` of the source path ``rest`` (``x.md``, checked safe) of the ``local`` source
    ``source``, ``note`` being the vault path asked for."""
    from pipeline.ingest.fetch.base import select_paths

    name = source.name
    head, _, below = rest.partition("/")       # several roots: a source path starts with its root's folder name
    files = ([root / below for root in source.path if root.name == head and below] if len(source.path) > 1
             else [source.path[0] / rest])
    file = next((f for f in files if _is_file(f)), None)
    if file is None:
        return None
    if not select_paths(source, [rest]):
        return _template_reason(source, rest)
    if s.warehouse_path.exists():       # built under a name the vault cleaned (`He said "hi".md`): that vault path
        from pipeline import warehouse as wh

        con = wh.connect(s.warehouse_path, read_only=True)
        try:
            built = [n["vault_path"] for n in wh.notes_by_source_path(con, rest) if n["source"] == name]
        finally:
            con.close()
        if f"{name}/{rest}" in built:   # built at that very path: its vault file is missing (a vault folder
            return None                    # that does not exist, a file deleted): the reader's line says which
        if built:
            return (f"no note {note!r} at that vault path: the file {rest!r} of source {name!r} is the note "
                    f"{built[0]!r} in the vault; read it by that path")
    return (f"{name}/{rest} is not in the vault yet: its file {file} is in source {name!r}, but no build has read it "
            f"since it was written; rebuild the source (the refresh tool, or `docsvault build --source {name}`)")


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the file system refuses (longer than 255 bytes: ENAMETOOLONG)."""
    try:
        return path.is_file()
    except OSError:
        return False


def unbuilt_name_reason(s: Settings, note: str) -> str | None:
    """:func:`unbuilt_reason` for ``note`` given as a note's name or source path (``Tea ceremony``, ``Tea
    ceremony.md``, ``ideas/x``) instead of its vault path: the first ``local`` source that has that file (from the
    root of its folder; of a source with several roots, below each root's folder) which no build has read yet. None
    otherwise. Before session 48 ``read "Tea ceremony"`` after ``capture --title "Tea ceremony" --no-build`` said
    "no note 'Tea ceremony': no vault path, source path, note name, title or alias is …", as if it did not exist."""
    from pipeline.ingest.sources import load_sources

    rest = note.strip().strip("/")
    if not s.warehouse_path.exists():     # nothing built: the reader's line says to build (names are looked up there)
        return None
    if not rest or "\\" in rest or any(part in ("", ".", "..") for part in rest.split("/")):
        return None
    rest = rest if rest.lower().endswith(".md") else f"{rest}.md"
    try:
        sources = [x for x in load_sources(s.sources_file) if x.kind == "local" and x.path]
    except PipelineError:
        return None
    for source in sources:
        for path in ([rest] if len(source.path) == 1 else [f"{root.name}/{rest}" for root in source.path]):
            if (reason := _unbuilt_in(s, source, path, f"{source.name}/{path}")) is not None:
                return reason
    return None


def _template_reason(source: Any, rest: str) -> str | None:
    """One line when the source path ``rest`` of the ``local`` source ``source`` is in its Obsidian vault's templates
    folder, which builds leave out (:func:`pipeline.ingest.fetch.base.left_out_templates`): a note an earlier
    version wrote there (a search hit copied then) is gone once an upgraded build removed it. None for a file left
    out otherwise (``include``/``exclude``)."""
    from pipeline.ingest.fetch.base import left_out_templates

    folder = next((t for t in left_out_templates(source) if rest.startswith(f"{t}/")), None)
    if folder is None:
        return None
    return (f"{source.name}/{rest} is not in the vault: {folder + '/'!r} is the Obsidian vault's templates folder "
            f"(.obsidian/templates.json or Templater's templates_folder), which source {source.name!r} leaves out (a "
            f"template is no note); to build it, give the source an include that starts with the folder: "
            f"include: [\"{folder}/**\", \"**/*.md\"]")


def _fetch_skip_reason(s: Settings, note: str) -> str | None:
    """:func:`skipped_reason` from the fetch warnings of every local source (``fetch.json`` with ``roots``)."""
    import json

    note = note.strip().strip("/")
    for state_file in sorted(s.raw_dir.glob("*/fetch.json")):
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(state, dict) or not isinstance(state.get("roots"), list):
            continue
        source = state_file.parent.name
        roots = [Path(r) for r in state["roots"] if isinstance(r, str)]
        warnings = [w for w in state.get("warnings") or [] if isinstance(w, str)]
        for sp in dict.fromkeys([note.removeprefix(f"{source}/"), note]):
            for root in roots:
                head, _, rest = sp.partition("/")
                if len(roots) > 1 and head != root.name:      # several roots: source paths start with the root's name
                    continue
                reason = _warning_about(warnings, source, sp, root.resolve(), rest if len(roots) > 1 else sp)
                if reason:
                    return f"{source}/{sp} is not in the vault: the last build skipped it ({reason})"
    return None


def _warning_about(warnings: Sequence[str], source: str, sp: str, root: Path, rel: str) -> str | None:
    """The reason of the fetch warning (``source 'x': skipped …``, see :mod:`pipeline.ingest.fetch.local`) about the
    file ``rel`` under ``root`` (source path ``sp``) or a folder holding it, without the leading "skipped" and the
    file's own path; None when no warning names it."""
    path = root / rel
    prefix, own = f"source '{source}': skipped", str(path)
    folders = [str(f) for f in path.parents if f != root and f.is_relative_to(root)]
    for line in warnings:
        if not line.startswith(prefix):
            continue
        text = line[len(prefix):]
        if text.endswith(f": {own}"):                   # "skipped symlink leaving the root: PATH"
            reason = text[: -len(own) - 2]
        elif f" {own}:" in text or text.startswith(f" {sp}:"):     # "skipped PATH: not a regular file"
            reason = text.replace(f" {own}:", ":", 1) if f" {own}:" in text else text[len(sp) + 1:]
        elif any(f" {folder}:" in text for folder in folders):     # "skipped symlinked folder DIR: …"
            reason = text
        else:
            continue
        return reason.lstrip(" :") or "skipped"
    return None


def writable_dir_problem(path: Path, what: str, hint: str) -> str | None:
    """Why the folder ``path`` cannot be used for writing, one line, or None: it is made (``mkdir -p``; a file in
    the way is "Not a directory"), then a write is tried with an anonymous temporary file (nothing is left behind).

    Args:
        path: the folder.
        what: its name in the message, e.g. ``data dir``.
        hint: what sets it, e.g. ``check --data / DOCSVAULT_DATA`` (in parentheses at the end).
    """
    import errno
    import os
    import tempfile

    try:
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create the {what} {path}: {exc.strerror or exc} ({hint})"
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"cannot write in the {what} {path}: {exc.strerror or exc} ({hint})"
    return None


def write_dirs_problem(s: Settings) -> str | None:
    """The first of the folders a build writes (the data dir, the vault, ``DAGSTER_HOME`` when it is not inside the
    data dir) that cannot be made or written (:func:`writable_dir_problem`), or None. ``docsvault build`` and
    ``capture`` check it before they start, so a mistyped ``--data`` / ``--vault`` is one line and no build
    failure is recorded."""
    dirs = [(s.data_dir, "data dir", "check --data / DOCSVAULT_DATA"),
            (s.vault_dir, "vault dir", "check --vault / DOCSVAULT_VAULT")]
    inside = s.dagster_home.is_relative_to(s.data_dir)
    if not inside:
        dirs.append((s.dagster_home, "Dagster home", "check DAGSTER_HOME"))
    if "?" in str(s.dagster_home):
        # Dagster's SQLite storage puts the path into a URL unquoted: it is cut at the '?', so the run storage
        # was made next to the folder (a file 'what' for '…/what?/data/dagster') and every build failed in a
        # SQLAlchemy traceback ("no such table: event_logs")
        hint = "check --data / DOCSVAULT_DATA, or set DAGSTER_HOME" if inside else "check DAGSTER_HOME"
        return (f"cannot use the Dagster home {s.dagster_home}: its path has a '?', which Dagster's SQLite storage "
                f"cannot open (it cuts the path there); use a folder without '?' ({hint})")
    return next((problem for problem in (writable_dir_problem(*d) for d in dirs) if problem), None)


@dataclass(frozen=True)
class SourceStatus(Record):
    """One source in ``status``: counts in the warehouse, files the last normalize skipped, the last fetch and
    error (as the source's state file has them: ``last_error`` is ``{"stage", "error", "at"}`` or None), and the
    vault files the build did not write. ``fetch_status`` is ``copied`` for a source this data dir never fetched
    whose notes the warehouse has (a warehouse copied from the host that built it, docs/deploy.md's reader): its
    ``last_fetch`` is then the source's last fetch where the warehouse was built (its ``meta`` ``fetched_at``;
    None in a warehouse that does not record it)."""

    name: str
    kind: str
    notes: int
    chunks: int
    skipped_files: int                      # files the last normalize skipped (as `build --json`; was `skipped`)
    fetch_status: str
    last_fetch: str | None
    fetch_error: Any
    last_error: Any
    vault_files: tuple[str, ...]
    #: ``{"error", "since"}`` while the Dagster sensor cannot check the source's upstream (a deleted branch, a moved
    #: repository): no run fetches it meanwhile, so ``fetch_status`` stays that of its last fetch
    upstream_check: Any = None


@dataclass(frozen=True)
class ModelStatus(Record):
    """One vector table: its model id, dimension and number of vectors."""

    model_id: str
    dim: int
    vectors: int


@dataclass(frozen=True)
class WarehouseStatus(Record):
    """The warehouse file; without one (``built`` False) only ``path`` and ``built`` are reported, and ``error``
    (the one-line error) when a file is there that cannot be read (corrupt, another schema)."""

    path: str
    built: bool
    bytes: int = 0
    built_at: str = ""
    notes: int = 0
    chunks: int = 0
    links: int = 0
    dangling_links: int = 0
    models: tuple[ModelStatus, ...] = ()
    crosslingual_depth: int | None = None   # what the build embedded by (None: a warehouse built before it was kept)
    built_on: str = ""                      # the host that published it ("" when a warehouse before it was kept)
    built_data_dir: str = ""                # the data dir it was published from (likewise)
    error: str = ""                         # a file that cannot be read: why (then ``built`` is False)
    missing_vectors_in: str = ""            # "<source> <n> of <chunks>, …": chunks published without a vector
    behind: bool | None = None              # the sources built here changed since it was published (None: unknown)
    # published by another version of docsvault (an upgrade or a downgrade since): what makes it ``behind`` then
    other_version: bool = False
    not_in_sources: tuple[str, ...] = ()    # sources it serves that sources.yaml no longer lists (a build removes them)
    # the last build's warehouse step failed ({"error", "at"}; None once one succeeds): this file is older
    publish_failed: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        full = {k: v for k, v in super().as_dict().items() if k != "error"}
        return full if self.built else {"path": self.path, "built": False, **({"error": self.error} if self.error
                                                                               else {}),
                                        **({"publish_failed": self.publish_failed} if self.publish_failed else {})}


@dataclass(frozen=True)
class Status(Record):
    """What ``status`` shows (``docsvault status --json`` and the MCP ``status`` tool: :meth:`as_dict`, keys in
    README)."""

    sources_file: str
    sources: tuple[SourceStatus, ...]
    warehouse: WarehouseStatus
    model: str
    multilingual_model: str
    crosslingual_model: str
    vault: str
    data: str
    dagster_home: str
    sources_error: str | None = None
    crosslingual_depth: int = 0          # what the next build embeds of an English note by the cross-lingual model
                                         # (0: every chunk); the warehouse's own is ``warehouse.crosslingual_depth``
    eval: Mapping[str, Any] | None = None   # the last eval of this data dir (:func:`eval_status`); None: never ran
    build_failed: Mapping[str, str] | None = None   # the last build's disk failure, when no build published since


def _warehouse_status(s: Settings) -> tuple[WarehouseStatus, dict[str, Any], dict[str, str]]:
    """The warehouse's status, its per-source counts (``{source: {"notes", "chunks", "fetched_at"}}``, empty
    without one; ``fetched_at``: the source's last fetch where the warehouse was built, None when not recorded)
    and its ``meta`` ({} without one)."""
    if not s.warehouse_path.exists():
        return WarehouseStatus(path=str(s.warehouse_path), built=False), {}, {}
    from pipeline import warehouse as wh
    from pipeline.common.errors import WarehouseCorruptError

    try:                # a file that cannot be read: status still shows the sources and says so (it failed whole)
        con = wh.connect(s.warehouse_path, read_only=True)
    except WarehouseCorruptError as exc:
        return WarehouseStatus(path=str(s.warehouse_path), built=False, error=str(exc)), {}, {}
    try:
        st = wh.stats(con)
    finally:
        con.close()
    fetched = _fetched(st["meta"].get("fetched_at"))
    return WarehouseStatus(
        path=str(s.warehouse_path), built=True, bytes=s.warehouse_path.stat().st_size,
        built_at=st["meta"].get("built_at", ""), notes=int(st["notes"]), chunks=int(st["chunks"]),
        links=int(st["links"]), dangling_links=int(st["dangling_links"]),
        models=tuple(ModelStatus(model_id=m["model_id"], dim=m["dim"], vectors=m["n"]) for m in st["models"]),
        crosslingual_depth=(int(st["meta"]["crosslingual_depth"])
                            if str(st["meta"].get("crosslingual_depth", "")).isdigit() else None),
        built_on=st["meta"].get("built_on", ""), built_data_dir=st["meta"].get("built_data_dir", ""),
        missing_vectors_in=st["meta"].get("missing_vectors_in", ""),
    ), {name: {**c, "fetched_at": fetched.get(name)} for name, c in st["sources"].items()}, st["meta"]


def _fetched(raw: str | None) -> dict[str, str | None]:
    """The warehouse's ``meta`` ``fetched_at`` (JSON ``{source: last fetch}``) as a dict; {} when absent or bad."""
    import json

    try:
        got = json.loads(raw or "{}")
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def status_report(s: Settings) -> Status:
    """What ``status`` shows, as a typed record. An invalid sources.yaml does not stop it (the warehouse and search
    still work while the file is fixed): ``sources_error`` holds the file's one-line error, and the sources listed
    are the warehouse's (``kind`` "?"). Nor does a warehouse file that cannot be read: the warehouse's ``error``
    says why, and the sources show no notes or chunks (before, status was that one error line)."""
    from pipeline.common.artifacts import load_state, upstream_check_failure
    from pipeline.common.errors import SourceConfigError
    from pipeline.ingest.normalize import skipped_count
    from pipeline.ingest.sources import load_sources
    from pipeline.ingest.vault_check import user_files_lines
    from pipeline.stages.base import SHARED_STATE
    from pipeline.stages.warehouse import PUBLISH_FAILED, built_by_other_version, warehouse_behind

    warehouse, counts, meta = _warehouse_status(s)
    failed = load_state(s, SHARED_STATE).get(PUBLISH_FAILED)
    warehouse = replace(warehouse, publish_failed=failed if isinstance(failed, dict) else None)
    sources_error = None
    try:
        loaded = load_sources(s.sources_file)
        listed = [(src.name, src.kind, src) for src in loaded]
        if warehouse.built:
            warehouse = replace(warehouse, behind=warehouse_behind(s, loaded, meta),
                                other_version=built_by_other_version(meta),
                                not_in_sources=tuple(sorted(set(counts) - {src.name for src in loaded})))
    except SourceConfigError as exc:
        sources_error, listed = str(exc), [(name, "?", None) for name in sorted(counts)]
    rows = []
    for name, kind, src in listed:
        state = load_state(s, name)
        c = counts.get(name, {})
        copied = not state and bool(c.get("notes"))        # never fetched here, yet in the warehouse: copied
        rows.append(SourceStatus(
            name=name, kind=kind, notes=int(c.get("notes", 0)), chunks=int(c.get("chunks", 0)),
            skipped_files=skipped_count(s, name),
            fetch_status="copied" if copied else state.get("fetch_status", "never"),
            last_fetch=c.get("fetched_at") if copied else state.get("fetched_at"),
            fetch_error=state.get("fetch_error"), last_error=state.get("last_error"),
            vault_files=tuple(user_files_lines(s, src)) if src is not None else (),
            upstream_check=upstream_check_failure(s, name),
        ))
    return Status(
        sources_file=str(s.sources_file), sources=tuple(rows), warehouse=warehouse, model=s.model,
        multilingual_model=s.multilingual_model, crosslingual_model=s.crosslingual or "none",
        crosslingual_depth=s.crosslingual_depth,
        vault=str(s.vault_dir), data=str(s.data_dir), dagster_home=str(s.dagster_home), sources_error=sources_error,
        eval=eval_status(s, warehouse.built_at if warehouse.built else None),
        build_failed=_unresolved_failure(s, warehouse),
    )


def _unresolved_failure(s: Settings, warehouse: WarehouseStatus) -> dict[str, str] | None:
    """:func:`build_failure` (``{"error", "at"}``, as status shows it), when no warehouse was published after it (a
    later build that published resolved it)."""
    failed = build_failure(s)
    if failed is None or (warehouse.built and (warehouse.built_at or "") > str(failed.get("at") or "")):
        return None
    return {k: v for k, v in failed.items() if k != "cause"}


#: the shared state's key of the last build that ended on a full, read-only or failing disk (:func:`record_build_failure`)
BUILD_FAILED = "build_failed"


def record_build_failure(s: Settings, line: str, cause: str | None = None) -> None:
    """Remember that a build ended on ``line`` (:attr:`pipeline.common.errors.StorageProblem.line`: the disk was
    full, read-only or failing, often where Dagster records the run, which then stays "started"), with the time, so
    that ``status`` says so and the next build does not call that build killed, quoting ``cause``
    (:attr:`~pipeline.common.errors.StorageProblem.cause`: what happened without what to do; ``line`` when None).
    Best effort: on a full disk the data dir may take no write either (then nothing is recorded)."""
    from pipeline.common import artifacts
    from pipeline.stages.base import SHARED_STATE, now

    try:
        artifacts.update_state(s, SHARED_STATE, **{BUILD_FAILED: {"error": line, "at": now(),
                                                                  **({"cause": cause} if cause else {})}})
    except OSError:
        pass


def build_failure(s: Settings, clear: bool = False) -> dict[str, str] | None:
    """The last build failure :func:`record_build_failure` kept (``{"error", "at"}``, and ``"cause"`` when it was
    given), None when there is none;
    ``clear``: forget it (a build succeeded since; best effort)."""
    from pipeline.common import artifacts
    from pipeline.stages.base import SHARED_STATE

    state = artifacts.load_state(s, SHARED_STATE)
    failed = state.pop(BUILD_FAILED, None)
    if clear and failed is not None:
        try:
            artifacts.write_state(s, SHARED_STATE, state)
        except OSError:
            pass
    return failed if isinstance(failed, dict) and failed.get("error") else None


def eval_status(s: Settings, built_at: str | None) -> dict[str, Any] | None:
    """The last retrieval eval the build ran in this data dir (its shared state), as ``status`` shows it: ``{"n"``
    (cases scored; 0 when none is about a built source), ``"hit_at_1"``, ``"hit_at_3"``, ``"mrr_at_10"``,
    ``"ndcg_at_10"`` (the hybrid set-up's pooled figures, when ``n``), ``"files"`` (the eval files it read),
    ``"run_at"``, ``"stale"`` (it scored another warehouse than the one built at ``built_at``: a build that left
    the eval out since, a capture's or ``--no-eval``), ``"floors_from"`` (``"build"``: ``"floors"`` and ``"below"``
    are the verdict of the build's ``eval_floors`` check on this report, :func:`pipeline.stages.record_floors_check`;
    ``"environment"``: no build recorded one, they are judged now with :func:`pipeline.evaluate.floors_from_env`),
    ``"floors"`` (``{metric: floor}``, its metrics keyed as the figures are: ``{"mrr_at_10", "hit_at_3"}``),
    ``"below"`` (``"mrr@10 0.333 < 0.700, …"``, ``""`` when every floor is met), ``"floors_now"`` (this
    environment's floors when they differ from the build's, which the next build checks, else absent),
    ``"floors_error"`` (this environment's floor variable that is no number in [0, 1], else absent; without the
    build's verdict, no ``"floors"`` then)}``; None when no eval ran here (no build yet, or only builds
    without the eval: captures' and ``--no-eval`` ones)."""
    from pipeline.evaluate import DEFAULT_FLOORS, METRICS, check_floors, floors_from_env, metric_key
    from pipeline.stages.evaluate import FLOORS_CHECK
    from pipeline.stages.index import shared_state

    state = shared_state(s)
    last = state.get("eval")
    report = last.get("report") if isinstance(last, dict) else None
    if not isinstance(report, dict):
        return None
    overall = report.get("overall") or {}
    out: dict[str, Any] = {"n": int(overall.get("n") or 0), "files": list(report.get("files") or [])}
    if not out["n"]:
        return out
    out.update({metric_key(key): float(overall.get(key) or 0.0) for key in METRICS})
    out["run_at"] = report.get("run_at", "")
    out["stale"] = bool(built_at and report.get("warehouse_built_at") and report["warehouse_built_at"] != built_at)
    check = state.get(FLOORS_CHECK)
    try:
        floors = floors_from_env()
    except PipelineError as exc:
        out["floors_error"] = str(exc)
        floors = None
    if (isinstance(check, dict) and check.get("key") == last.get("key")
            and isinstance(check.get("floors"), dict)):       # the build's verdict on this report, its floors
        order = [*DEFAULT_FLOORS, *sorted(set(check["floors"]) - set(DEFAULT_FLOORS))]   # the state's keys: sorted
        used = {m: float(check["floors"][m]) for m in order if m in check["floors"]}
        out.update({"floors_from": "build", "floors": {metric_key(m): f for m, f in used.items()},
                    "below": str(check.get("below") or "")})
        if floors is not None and floors != used:       # this environment says otherwise: the next build uses it
            out["floors_now"] = {metric_key(m): f for m, f in floors.items()}
        return out
    if floors is None:
        return out
    out["floors_from"] = "environment"          # no verdict recorded for it: judged now, with this shell's floors
    out["floors"] = {metric_key(key): floor for key, floor in floors.items()}   # one key per metric
    out["below"] = check_floors(report, floors).metadata.get("below", "")
    return out


def copied_line(data: dict[str, Any]) -> str:
    """The line ``status`` adds under its table when sources are ``copied`` (:class:`SourceStatus`): which, where
    the warehouse holding them was built (host and data dir, as its ``meta`` has them) and when; "" when none."""
    names = [r["name"] for r in data["sources"] if r["fetch_status"] == "copied"]
    if not names:
        return ""
    w = data["warehouse"]
    here = socket.gethostname()
    host = w.get("built_on") or ""
    where = ("on another host or data dir (this warehouse does not record which)" if not host else
             f"on host {host}" + (f" in {w['built_data_dir']}" if w.get("built_data_dir") else "") if host != here
             else f"on this host in {w.get('built_data_dir') or 'another data dir'}")
    return (f"{', '.join(names)}: not fetched in this data dir: the warehouse was built {where} at "
            f"{w.get('built_at') or '?'} and copied here (last fetch: there); build them there and copy it again "
            "to update them")


def status_data(s: Settings) -> dict[str, Any]:
    """:func:`status_report` as the JSON-safe dict both shells print (see README for the keys)."""
    return status_report(s).as_dict()


def eval_json(value: Any) -> Any:
    """An eval report (:meth:`pipeline.evaluate.EvalReport.public`, or a mapping of them by set-up or scope) with
    its metrics keyed as every JSON of docsvault spells them: ``hit_at_1``, ``hit_at_3``, ``mrr_at_10``,
    ``ndcg_at_10`` (``build --json``'s ``eval``, the history's columns, ``eval --history --json``): keys a jq path
    need not quote, as ``hit@1`` must be (``.["hit@1"]``)."""
    from pipeline.evaluate import METRICS, metric_key

    names = {m: metric_key(m) for m in METRICS}
    if isinstance(value, Mapping):
        return {names.get(k, k): eval_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [eval_json(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------------------------
# build outcome (``docsvault build --json``; the MCP ``refresh`` tool reads it)


@dataclass(frozen=True)
class SourceOutcome(Record):
    """One source of a build: ``status`` built | unchanged | failed; counts None when the stage did not run;
    ``warning`` the "has no notes" line of an empty source; ``kept_edits`` one line per generated note this build
    replaced while it held the user's edit (or per user file where the source now has a note): where the user's
    version is now (``vault/me/Home.md was edited since the build wrote it: your version is kept as vault/me/Home
    (edited).md``), as ``docsvault build`` prints it; ``warnings`` the source's other ``warning:`` lines of the
    build's table (:func:`source_warning_lines`: a note's missing attachment, an ambiguous link, …)."""

    name: str
    status: str
    notes: int | None
    chunks: int | None
    embedded: int | None
    skipped_files: int
    warning: str | None
    failed_stage: str | None
    error: str | None
    kept_edits: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class WarehouseOutcome(Record):
    """The warehouse stage: counts, file, ``mode`` unchanged | incremental | full."""

    notes: int
    chunks: int
    path: str | None
    mode: str


@dataclass(frozen=True)
class SharedOutcome(Record):
    """The shared stages: ``eval`` the hybrid set-up's ``{"n", "hit_at_1", ...}`` (None: not run); ``warnings`` one
    line per failed asset check of a shared stage (``eval_floors``, ``hybrid_beats_single_lanes``, ...), which does
    not fail the build."""

    ok: bool
    error: str | None
    warehouse: WarehouseOutcome | None
    eval: Mapping[str, Any] | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildOutcome(Record):
    """A build, as ``build --json`` prints it (:meth:`as_dict`, keys in README); ``removed`` the "removed
    vault/<name>/: ..." lines of sources dropped from sources.yaml; ``resumed`` when each killed build this
    one finished had started (ISO 8601 UTC; see :class:`pipeline.stages.results.BuildReport`)."""

    ok: bool
    sources: tuple[SourceOutcome, ...]
    removed: tuple[str, ...]
    shared: SharedOutcome
    resumed: tuple[str, ...] = ()
    note_changes: dict[str, list[str]] | None = None    # BuildReport.note_changes (build --json; else None)
    upgraded: tuple[str, ...] = ()                        # BuildReport.upgraded: stages another version built last


def query_problem(query: str | None) -> str | None:
    """Why a search query cannot be run (one line), or None: empty, or no letter or digit in it (punctuation or
    emoji alone match nothing by word, and the vector lanes would rank arbitrary pages). A modifier letter is no
    word either: the long vowel mark and iteration marks of a kaomoji (``(^ー^)``, ``ーー``, ``々``) ranked arbitrary
    notes without a word (before session 43)."""
    import unicodedata

    if not query or not query.strip():
        return "query is empty: pass words or a question"
    if not any(ch.isalnum() and unicodedata.category(ch) != "Lm" for ch in query):
        return f"query {query.strip()[:40]!r} has no words (letters or digits) to search for: pass words or a question"
    return None


def noop_build(s: Settings, source_names: Sequence[str] | None = None, wait: float = 0.0,
               force: bool = False, wait_arg: str = "--wait SECONDS") -> BuildReport | None:
    """The report of ``docsvault build`` when nothing changed since the last successful build of every source,
    answered without starting Dagster (:mod:`pipeline.stages.noop`), else None (build normally). Only for a build
    of every source, not forced. ``wait_arg``: how the caller's user sets ``wait`` (the lock error's advice).

    Raises:
        BuildLockedError: another build holds the lock past ``wait`` seconds.
        SourcesFileError: sources.yaml is invalid.
    """
    if source_names or force:
        return None
    from pipeline.common.lock import TURN_WAIT_ARG, build_lock, build_run_lock, turn_wait
    from pipeline.ingest.sources import load_sources
    from pipeline.stages.noop import noop_report

    sources = load_sources(s.sources_file)
    with build_run_lock(s.data_dir, wait=wait, wait_arg=wait_arg), \
            build_lock(s.data_dir, wait=turn_wait(wait), wait_arg=TURN_WAIT_ARG):
        return noop_report(s, sources)


def missing_vectors_line(missing_vectors_in: str) -> str:
    """What a warehouse that holds chunks without a vector means (``missing_vectors_in``: ``"<source> <n> of
    <chunks>, ..."``): `docsvault build`'s ``warning:`` line, the Dagster warehouse step's log line and the
    description of its failed ``all_chunks_embedded`` check."""
    return (f"chunks without a vector (their embeddings step did not finish): {missing_vectors_in}; keyword search "
            "finds them, the vector lanes do not until `docsvault build --source <name>` embeds them")


def no_notes_line(st: Any) -> str:
    """The fetch's "source X has no notes: ..." warning of an empty source (or a short one); ``st`` one source of
    a :class:`pipeline.stages.results.BuildReport`."""
    lines = st.metadata.get("raw_docs", {}).get("warning_lines") or []
    return next((ln for ln in lines if "has no notes" in ln), f"source '{st.name}' has no notes")


def source_warning_lines(st: Any) -> list[str]:
    """The ``warning:`` lines `docsvault build` prints below a source's row (without ``warning: ``), in its
    order: the fetch's warnings about ``paths`` (:func:`paths_warning_lines`), the files that failed to normalize
    and serve their last good version, the vault step's (an attachment a note embeds that is not in the source, a
    link several notes could mean, a file name no link can reach) and the chunk step's (a note cut at the chunk
    cap). The "has no notes" line of an empty source is not among them (``SourceOutcome.warning``). ``st``: one
    source of a build report."""
    from pipeline.stages.ingest import kept_line

    notes_meta = st.metadata.get("notes", {})
    lines = list(paths_warning_lines(st))
    if notes_meta.get("kept_last_good"):
        lines.append(kept_line(st.name, notes_meta["kept_last_good"]))
    lines += [*(st.metadata.get("vault", {}).get("warning_lines") or []),
              *(st.metadata.get("chunks", {}).get("warning_lines") or [])]
    return [str(line) for line in lines]


def warnings_about(lines: Sequence[str], vault_path: str) -> list[str]:
    """The lines of :func:`source_warning_lines` (``lines``) that are about the note at ``vault_path``
    (``<source>/<path in the source>``): those naming its source path, ``source 'me': Ideas.md: diagram.png (line 8)
    is not in the source …``; what ``capture`` and the MCP ``save_note`` tell of the note they saved."""
    own = f": {vault_path.split('/', 1)[-1]}: "
    return [line for line in lines if own in line]


def paths_warning_lines(st: Any) -> list[str]:
    """The fetch's warnings about a git source's ``paths`` (``source 'X': paths entry 'p' matches no file …``,
    selected files the sparse checkout did not write, submodules in them, whose files are not fetched, and symlinks,
    which are not followed); ``st`` one source of a build report."""
    lines = st.metadata.get("raw_docs", {}).get("warning_lines") or []
    return [ln for ln in lines
            if ": paths entry '" in ln or "not in the sparse checkout" in ln or " git submodule" in ln
            or " in the repository, which docsvault does not follow" in ln]


_PAGE_NOT_FETCHED = (
    re.compile(r"^source '[^']*': (?P<url>\S+): page skipped: (?P<cause>.+)$"),                  # llms_txt
    re.compile(r"^source '[^']*': cannot fetch (?P<url>\S+): (?P<cause>.+?)"
               r"(?: \(kept the last good copy\))?$"),                                        # html
    re.compile(r"^source '[^']*': (?P<url>\S+): skipped, (?P<cause>.+)$"),       # robots.txt, type, host
)


def pages_not_fetched_line(st: Any, shown: int = 3) -> str | None:
    """``<source>: N page(s) not fetched (HTTP 404: <url>; …)``: the pages of an ``llms_txt``/``html`` source
    its fetch could not get (from the fetch's warning lines: HTTP errors, robots.txt, a content type that is
    no page, a host not allowed), at most ``shown`` named (an HTTP status without its reason phrase), then how
    many more ("at least N" when the build kept only the first of the fetch's warning lines); None when there
    are none. ``st``: one source of a build report."""
    raw = st.metadata.get("raw_docs", {})
    failed: list[tuple[str, str]] = []
    for line in raw.get("warning_lines") or []:
        m = next((m for rx in _PAGE_NOT_FETCHED if (m := rx.match(line))), None)
        if m:
            cause = re.sub(r"^(HTTP \d{3})\b.*", r"\1", m.group("cause"))
            failed.append((cause, m.group("url")))
    if not failed:
        return None
    listed = "; ".join(f"{cause}: {url}" for cause, url in failed[:shown])
    more = f"; … and {len(failed) - shown} more" if len(failed) > shown else ""
    least = "at least " if int(raw.get("warnings") or 0) > len(raw.get("warning_lines") or []) else ""
    return f"{st.name}: {least}{len(failed)} page(s) not fetched ({listed}{more})"


def _source_outcome(st: Any) -> SourceOutcome:
    from pipeline.stages.ingest import conflict_line

    vault_meta = st.metadata.get("vault", {})
    chunk_meta = st.metadata.get("chunks", {})
    emb = st.metadata.get("embeddings", {})
    status = "failed" if not st.ok else (
        "unchanged" if vault_meta.get("skipped") and chunk_meta.get("skipped") and not emb.get("embedded")
        else "built")
    empty = st.ok and st.metadata.get("raw_docs", {}).get("files") == 0
    return SourceOutcome(
        name=st.name, status=status, notes=vault_meta.get("notes"), chunks=emb.get("chunks"),
        embedded=emb.get("embedded"), skipped_files=int(st.metadata.get("notes", {}).get("errors") or 0),
        warning=no_notes_line(st) if empty else None,
        failed_stage=st.failed_stage or None, error=st.error or None,
        kept_edits=tuple(conflict_line(st.name, c) for c in vault_meta.get("conflicts") or ()),
        warnings=tuple(source_warning_lines(st)),
    )


def build_outcome(report: Any) -> BuildOutcome:
    """A :class:`pipeline.stages.results.BuildReport` (the stages' Dagster metadata, by asset) as a typed record."""
    wh = report.shared_metadata.get("warehouse", {})
    ev = report.shared_metadata.get("retrieval_eval", {})
    warehouse = None
    if wh:
        mode = "unchanged" if wh.get("skipped") else ("incremental" if wh.get("mode") == "incremental" else "full")
        warehouse = WarehouseOutcome(notes=int(wh.get("notes", 0)), chunks=int(wh.get("chunks", 0)),
                                     path=wh.get("path"), mode=mode)
    evals = {k: ev[k] for k in ("n", "hit_at_1", "hit_at_3", "mrr_at_10", "ndcg_at_10", "unreachable",
                                "skipped_cases", "skipped_corpora") if k in ev} or None
    return BuildOutcome(
        ok=report.ok, sources=tuple(_source_outcome(st) for st in report.sources),
        removed=tuple(getattr(report, "removed", [])),
        shared=SharedOutcome(ok=report.shared_ok, error=report.shared_error or None, warehouse=warehouse,
                             eval=evals, warnings=tuple(getattr(report, "check_warnings", []))),
        resumed=tuple(getattr(report, "resumed", [])), note_changes=report.note_changes,
        upgraded=tuple(getattr(report, "upgraded", [])))

