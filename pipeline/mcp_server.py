"""`docsvault mcp`: the vault and its hybrid search as MCP tools (mcp 2.x ``MCPServer``; stdio, or streamable HTTP
bound to 127.0.0.1).

Tools: ``search``, ``read``, ``status``, ``refresh``. Every output is bounded (hit text, page size, list lengths);
every failure a user or agent can cause comes back as a tool error with one clear message (``search: <problem and
what to do>``: :func:`tool_error`), and a request whose params are not what its method takes gets a ``-32602`` reply
naming the field (:func:`explain_invalid_params`). On stdio, stdout is the protocol channel: the SDK diverts fd 1
to stderr while it serves, and all logging goes to stderr.

The logic lives in :class:`VaultService` (no MCP import; callable from tests); :func:`create_server` wraps it.

Warehouse swaps: a build publishes a new warehouse file with ``os.replace``. The service checks the file's identity
(inode, mtime, size) before every search and opens a new :class:`~pipeline.search.searcher.Searcher` when it changed, so
results switch to the new build at once; the embedding model is loaded once per process and shared by the
searchers.

``refresh`` runs ``docsvault build --source NAME…`` as a subprocess rather than ``run_build`` in this process:
the build imports Dagster and can print to stdout (the protocol channel) — a child with captured output cannot
corrupt the protocol; a child can be stopped when it exceeds the time bound (a thread cannot); and the build's
memory (model, Dagster) is released when it ends. The cost is the child's start-up (a few seconds).

Order: the ``tools/call`` requests of one session run one at a time, in the order they arrived (:class:`CallQueues`):
a ``save_note`` followed by a ``search`` and a ``refresh`` sent without waiting take effect in that order. Other
methods (``ping``, ``tools/list``, notifications) are answered at once, also while a long call runs. On stdio, the
end of stdin waits for the answers of every request read (:class:`InFlight`), then the server exits.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Self

from pydantic import Field, WithJsonSchema

from pipeline.common.errors import PipelineError, UnknownSourceError, one_line
from pipeline.config import Settings, float_env
from pipeline.config import environ as config_environ
from pipeline.ingest.capture import MAX_CORRELATION_CHARS
from pipeline.search.reader import locate_match, note_body, page_of, paginate, read_link

log = logging.getLogger("docsvault.mcp")

MAX_K = 20                 # hits per search call
HIT_TEXT_CHARS = 600       # text per hit
HIT_LINKS_CAP = 5          # outlinks / backlinks per hit
MAX_LINKS = 500            # outlinks / backlinks a read call may ask for (its `links`)
#: the message of a query of filters alone (``tag:recipe``): its hits are a listing, not a ranking
LISTING_MESSAGE = "a query of filters alone: the first k notes that pass them, by vault path (not ranked; score 0)"
LIST_CAP = 50              # paths listed per change kind in a refresh report
OUTPUT_TAIL_CHARS = 2000   # build output returned by refresh
DEFAULT_REFRESH_TIMEOUT = 600.0
#: seconds save_note / refresh may wait for another running build (their ``wait``): a tool call that waits longer
#: than a couple of minutes looks hung to the agent, which can call again instead; the wait counts toward the
#: refresh time bound
MAX_WAIT = 120
#: how the lock error names the tools' ``wait`` (:class:`pipeline.common.lock.BuildLock`'s ``wait_arg``)
WAIT_ARG = f"`wait` (seconds, at most {MAX_WAIT})"
#: seconds beyond the refresh time bound that the end of stdin waits for an answer (:class:`InFlight`): a refresh
#: over its bound gets SIGTERM and 10 s before SIGKILL, then reports
DRAIN_MARGIN = 30.0
#: the :class:`CallQueues` key of the stdio session (a stdio process serves one session)
STDIO_SESSION = "stdio"

INSTRUCTIONS = (
    "docsvault: local documentation and Obsidian notes with hybrid search. Call `search` with a question or keywords; "
    "each hit has `path` and a `continue_with` read call that opens the note at the hit. Call `read(path, page)` to "
    "read a note in ~1,000-character pages (with its outlinks and backlinks); `related` walks the link graph; "
    "`save_note` saves what you learned as a note. `status` lists the sources; `refresh` rebuilds local sources "
    "after notes were written."
)


#: the tools that write (a note, the vault, the warehouse): a read-only server (``docsvault mcp --read-only``,
#: env :data:`READ_ONLY_ENV`) does not offer them
WRITE_TOOLS = ("save_note", "refresh")
#: the environment variable that makes ``docsvault mcp`` read-only (``1``/``true``/``yes``/``on``)
READ_ONLY_ENV = "DOCSVAULT_MCP_READ_ONLY"
READ_ONLY_INSTRUCTIONS = (
    "docsvault (read-only): local documentation and Obsidian notes with hybrid search. Call `search` with a question "
    "or keywords; each hit has `path` and a `continue_with` read call that opens the note at the hit. Call "
    "`read(path, page)` to read a note in ~1,000-character pages (with its outlinks and backlinks); `related` walks "
    "the link graph; `status` lists the sources. This server does not save notes or rebuild sources."
)


#: the inclusive bounds (low, high; None: no upper bound) of the tools' numeric arguments, the one table that both
#: the input schemas (``minimum``/``maximum``: :func:`_bounds`) and the server's checks (:func:`range_problem`)
#: read, so what an agent is told is what the server enforces
BOUNDS: dict[str, tuple[int, int | None]] = {"k": (1, MAX_K), "page": (1, None), "wait": (0, MAX_WAIT),
                                             "links": (1, MAX_LINKS)}
#: the unit an argument's range error names after its bounds
_UNITS = {"wait": " seconds"}
#: the names the ``lanes`` argument of search takes (:func:`pipeline.service.parse_lanes` checks them; a test
#: keeps this list equal to :data:`pipeline.search.searcher.LANES` plus the two combinations)
LANE_CHOICES = ("bm25", "bm25_page", "vector", "crosslingual", "graph", "hybrid", "hybrid+graph")


def range_problem(arg: str, value: Any) -> str | None:
    """Why ``value`` is out of the bounds of the numeric argument ``arg`` (:data:`BOUNDS`), one clause (``k must
    be between 1 and 20, got 99``, ``page must be 1 or more, got 0``), or None when it is within them. ``k`` and
    ``page`` must be integers; true/false is no number."""
    low, high = BOUNDS[arg]
    kinds = (int,) if arg in ("k", "page", "links") else (int, float)
    if not isinstance(value, bool) and isinstance(value, kinds) and low <= value and (high is None or value <= high):
        return None
    if high is None:
        return f"{arg} must be {low} or more{_UNITS.get(arg, '')}, got {value!r}"
    return f"{arg} must be between {low} and {high}{_UNITS.get(arg, '')}, got {value!r}"


def _bounds(arg: str) -> dict[str, int]:
    """The pydantic ``Field`` bounds of ``arg`` (``ge``, and ``le`` when it has an upper bound): :data:`BOUNDS`."""
    low, high = BOUNDS[arg]
    return {"ge": low} | ({"le": high} if high is not None else {})


# The tools' arguments as an agent reads them in the input schema: each has a description (units, default,
# format, valid values), and the numeric ones their bounds (:data:`BOUNDS`). Module-level: the tool functions'
# annotations are resolved in this module's namespace.
_NOTE = ("The note: the `path` of a search hit (its vault path, 'source/folder/Note.md'), or its file name, title or "
         "alias ('Note'), or a link as a note writes it ('[[Note#Heading|text]]', 'Note#Heading'). Only Markdown "
         "notes inside the vault.")
QueryArg = Annotated[str, Field(description=(
    "What to find: a question or keywords, in English or Japanese (ranked on its first 2,000 characters; it needs a "
    "letter or digit). Syntax: \"exact phrase\" (required), -word or -\"a phrase\" (excluded), \"a b\" OR \"c d\" "
    "(one of them required), source:NAME, tag:TAG (a matches a/b), path:PREFIX (a vault path prefix, or a glob with "
    "* ? [). Filters alone (tag:recipe) list the notes that pass them by vault path, unranked."))]
SearchKArg = Annotated[int, Field(description="How many hits to return, one per note, best first (1-20; default 8).",
                                  **_bounds("k"))]
SourcesArg = Annotated[str | list[str] | None, Field(description=(
    "Only these sources: a source name as `status` lists it, or a list of them (any of them). Default: every "
    "source. Adds to source: in the query."))]
TagsArg = Annotated[str | list[str] | None, Field(description=(
    "Only notes with this tag (frontmatter tags or an inline #tag; a leading # is ignored; no spaces; a parent tag "
    "matches its nested tags: project matches project/alpha), or a list of tags (a note with any of them). "
    "Default: no tag filter. Adds to tag: in the query."))]
#: a lane name: the schema lists the names (``enum``); the check is parse_lanes', whose error lists them too
_LaneName = Annotated[str, WithJsonSchema({"type": "string", "enum": list(LANE_CHOICES)})]
LanesArg = Annotated[list[_LaneName] | None, Field(description=(
    "The ranking lanes to fuse, a list of: bm25 (keyword, chunks), bm25_page (keyword, whole notes), vector, "
    "crosslingual (across languages), graph (one hop along wikilinks), hybrid (= bm25, bm25_page, vector, "
    "crosslingual), hybrid+graph. Default: hybrid. [\"bm25\"] is keyword-only search."))]
NoteArg = Annotated[str, Field(description=_NOTE)]
PageArg = Annotated[int, Field(description=(
    "Which page of about 1,000 characters, from 1 (default 1); `pages` in the result says how many there are and "
    "`next` gives the call for the next page. With a #Heading link, page 1 opens where the heading starts."),
    **_bounds("page"))]
LinksArg = Annotated[int, Field(description=(
    f"How many outlinks and how many backlinks to list, most links first (1-{MAX_LINKS}; default 10); "
    "`outlinks_total` and `backlinks_total` say how many there are."), **_bounds("links"))]
RelatedKArg = Annotated[int, Field(description="How many related notes to return, best first (1-20; default 10).",
                                   **_bounds("k"))]
TextArg = Annotated[str, Field(description=(
    "The note's Markdown (at most 1,000,000 characters, with at least one word). It may start with its own YAML "
    "frontmatter block (---), merged into the note's: its aliases, tags and other keys are kept."))]
TitleArg = Annotated[str | None, Field(description=(
    "The note's title; the note is headed `# title` unless the text starts with a level-1 heading. Default: the "
    "text's frontmatter title, else its first heading, else the file name of `name`, else its first sentence."))]
NameArg = Annotated[str | None, Field(description=(
    "The file name without .md (at most 120 characters and 252 UTF-8 bytes: about 84 Japanese characters), optionally under up to 4 folders joined by / "
    "(daily/2026-12-04; a missing folder is made). No \\, .., empty parts, a leading '.', control characters or "
    ":*?\"<>|. Default: made from the title. An existing note is never overwritten: a taken name is an error."))]
CaptureSourceArg = Annotated[str | None, Field(description=(
    "The local source (a name `status` lists) to write the note into; it must read Markdown. Default: the server's "
    "DOCSVAULT_CAPTURE_SOURCE (an error names the sources that can take it when none is set)."))]
AgentArg = Annotated[str, Field(description=(
    "Who writes the note (your model or agent name), stored as `agent` in its frontmatter (first 100 characters). "
    "Default: \"mcp agent\"."))]
CorrelationArg = Annotated[str | None, Field(description=(
    "An id tying the note to your conversation or run (at most 200 characters), stored as `correlation_id` in "
    "its frontmatter and returned. Default: a new random 32-hex-digit id."), max_length=MAX_CORRELATION_CHARS)]
NoteTagsArg = Annotated[list[str] | None, Field(description=(
    "Tags for the note's frontmatter, e.g. [\"til\", \"project/alpha\"] (nested with /); a leading # or ＃ is "
    "dropped; no spaces. Default: none."))]
WaitArg = Annotated[float, Field(description=(
    "Seconds (0-120, default 0) to wait for another running build or refresh to finish before rebuilding; with 0 "
    "the rebuild fails at once while one runs."), **_bounds("wait"))]
RefreshSourceArg = Annotated[str | None, Field(description=(
    "The one local source to rebuild (a name `status` lists). Default: every local source. Git and web sources "
    "are refused (they are rebuilt from a terminal)."))]
FullArg = Annotated[bool, Field(description=(
    "true: rebuild from scratch (every chunk embedded again, the index written in full; slower). Default false: "
    "only what changed."))]


class ReadOnlyConfigError(PipelineError):
    """:data:`READ_ONLY_ENV` holds a value that is neither true nor false."""


def read_only_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether :data:`READ_ONLY_ENV` asks for a read-only server: ``1``, ``true``, ``yes``, ``on`` (any case) true;
    unset, empty, ``0``, ``false``, ``no``, ``off`` false.

    Raises:
        ReadOnlyConfigError: any other value: a typo must not leave the write tools on for readers.
    """
    raw = (config_environ() if environ is None else environ).get(READ_ONLY_ENV, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ReadOnlyConfigError(f"{READ_ONLY_ENV}={raw!r} is not a yes or no: set it to 1 (a read-only server: no "
                              "save_note, no refresh) or 0, or unset it")


def read_only_refusal(name: str) -> str:
    """The tool error of a write tool (:data:`WRITE_TOOLS`) called on a read-only server."""
    return (f"{name}: this server is read-only (docsvault mcp --read-only or {READ_ONLY_ENV}=1): it does not save "
            "notes or refresh sources; its tools: search, read, related, status")


class ToolFailure(Exception):
    """A failure to report to the client as a tool error (message only, no traceback)."""


#: what an argument must be, by the first word of a pydantic error type (``int_parsing``): (one, a list of them)
_MUST_BE = {"int": ("an integer", "integers"), "string": ("a string", "strings"), "bool": ("true or false", "booleans"),
            "float": ("a number", "numbers"), "list": ("a list", "lists"), "dict": ("an object", "objects")}


def argument_error(tool: str, errors: list[dict[str, Any]], arguments: dict[str, Any]) -> str:
    """One line for the argument errors pydantic found in a tool call (its ``ValidationError.errors()``), about the
    first argument in error: ``search: missing argument 'query'``, ``search: argument 'k' must be an integer, got
    'abc'``, ``search: argument 'source' must be a string or a list, got 5`` (a union's forms joined by "or")."""
    arg = str(errors[0]["loc"][0]) if errors and errors[0]["loc"] else "?"
    mine = [e for e in errors if e["loc"] and str(e["loc"][0]) == arg]
    if any(e["type"] == "missing" for e in mine):
        return f"{tool}: missing argument {arg!r}"
    if arg in BOUNDS and any(e["type"] in ("greater_than_equal", "less_than_equal") for e in mine):
        return f"{tool}: {range_problem(arg, arguments.get(arg))}"     # the schema's bounds, as the service says
    if too_long := next((e for e in mine if e["type"] == "string_too_long"), None):
        return (f"{tool}: argument {arg!r} is {len(str(arguments.get(arg))):,} characters; at most "
                f"{too_long.get('ctx', {}).get('max_length')}")
    wanted: list[str] = []
    for e in mine:
        one, many = _MUST_BE.get(str(e["type"]).split("_")[0], (None, None))
        if one is None:
            return f"{tool}: argument {arg!r} is invalid: {' '.join(str(e['msg']).split())}"
        text = f"a list of {many}" if any(isinstance(part, int) for part in e["loc"][1:]) else one
        if text not in wanted:
            wanted.append(text)
    got = repr(arguments.get(arg))
    got = got if len(got) <= 60 else got[:57] + "..."
    return f"{tool}: argument {arg!r} must be {' or '.join(wanted)}, got {got}"


def unknown_argument(tool: str, arguments: dict[str, Any] | None, known: dict[str, Any]) -> str | None:
    """One line for the first argument a tool does not take (``search: unknown argument 'limit'; its arguments:
    query, k, …``), None when every argument is known. Pydantic would drop it silently, and the agent would never
    learn that its ``limit`` was not ``k``."""
    unknown = sorted(set(arguments or {}) - set(known))
    if not unknown:
        return None
    return (f"{tool}: unknown argument {unknown[0]!r}; its arguments: {', '.join(known) or '(none)'}")


def boolean_number(tool: str, arguments: dict[str, Any] | None, known: dict[str, Any]) -> str | None:
    """One line for the first argument given as true/false where the tool takes a number (``search: argument 'k'
    must be an integer, got True``); pydantic's lax mode read ``k: true`` as 1. None when there is none."""
    for arg, value in (arguments or {}).items():
        schema = known.get(arg) or {}
        kinds = {schema.get("type"), *(s.get("type") for s in schema.get("anyOf") or ())}
        if isinstance(value, bool) and kinds & {"integer", "number"} and "boolean" not in kinds:
            return f"{tool}: argument {arg!r} must be {'an integer' if 'integer' in kinds else 'a number'}, got {value}"
    return None


#: an argument longer than this, quoted in a tool's error or message, is cut (:func:`shorten_quoted`)
QUOTED_CHARS = 120


def _saved_next(source: str) -> str:
    """What an agent does after ``save_note`` saved its note but could not rebuild the source (another build held
    the lock, a failed stage): refresh that source, not save the note again. The rebuild's own line says "pass
    `wait`", which an agent read as save_note's (session 49): called again with ``wait``, it was told the name is
    taken, and saved the note a second time under another name."""
    return (f"; the note stays saved: do not save it again (its name is taken); make it searchable with "
            f"refresh(source=\"{source}\") (its `wait` waits for a running build)")


def shorten_quoted(text: str, arguments: Mapping[str, Any]) -> str:
    """``text`` with every quoted echo (``'…'``, ``"…"``, a repr) of a string argument of ``arguments`` (or of a
    string in a list argument) longer than :data:`QUOTED_CHARS` cut to its first 117 characters and ``...``: an
    error or message that echoes an argument (``unknown source '<100,000 characters>'``) stays one readable line,
    and says what to do after it. Nothing else is cut: a long vault path or title the message suggests is the
    agent's next argument, and the words between two apostrophes (team's … don't) are no quoted value."""
    import unicodedata

    values = [v for value in arguments.values() for v in (value if isinstance(value, list) else [value])
              if isinstance(v, str) and len(v) > QUOTED_CHARS]
    for value in sorted(set(values), key=len, reverse=True):
        for form in dict.fromkeys((value, value.strip(), unicodedata.normalize("NFC", value.strip()))):
            if len(form) > QUOTED_CHARS:
                cut = form[:QUOTED_CHARS - 3] + "..."
                for quoted, short in ((repr(form), repr(cut)), (f"'{form}'", f"'{cut}'"), (f'"{form}"', f'"{cut}"')):
                    text = text.replace(quoted, short)
    return text


#: the library's advice in CLI terms, as an MCP tool error says it: the search tool's hits name a note's vault
#: path ``path``, where ``docsvault search --json`` names it ``vault_path`` (an agent was told to "use a vault_path
#: from search results", a field its hits do not have, before session 46)
MCP_TERMS = (
    ("use a vault_path from search results (`docsvault search ...` / the search tool)",
     "use the `path` of a search tool hit"),
    ("use a vault_path from search results (or run `docsvault build` if the note is new)",
     "use the `path` of a search tool hit (or call the refresh tool if the note is new)"),
)


def tool_error(tool: str, text: str, arguments: Mapping[str, Any] | None = None) -> str:
    """The one line a failed call of ``tool`` returns: ``search: <the problem and what to do>``, the tool's name
    once. The SDK puts ``Error executing tool search: `` before a tool's own message; that prefix (and a repeated
    ``search: ``) is dropped, only the first line is kept (:func:`pipeline.common.errors.one_line`), a long argument of the call (``arguments``) quoted
    in it is cut (:func:`shorten_quoted`), and advice in CLI terms is said in the tool's (:data:`MCP_TERMS`)."""
    line = shorten_quoted(one_line(text), arguments or {})
    for cli, mcp in MCP_TERMS:
        line = line.replace(cli, mcp)
    prefixes = (f"Error executing tool {tool}: ", f"{tool}: ")
    while (found := next((p for p in prefixes if line.startswith(p)), None)) is not None:
        line = line[len(found):]
    return f"{tool}: {line or 'failed'}"


def unknown_tool(name: str, tools: list[str]) -> str:
    """The tool error of a call of a tool the server does not have (``unknown tool 'find'; the tools: search,
    read, …``); the SDK's was ``Unknown tool: find``."""
    shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
    return f"unknown tool {shown}; the tools: {', '.join(tools) or '(none)'}"


#: what a request's field must be, by the first word of a pydantic error type (``dict_type``, ``model_type``)
_PARAM_MUST_BE = {**{k: one for k, (one, _) in _MUST_BE.items()}, "model": "an object"}


def invalid_params(method: str, errors: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The message and ``data`` of the ``-32602`` reply to a request whose params are not what ``method`` takes
    (pydantic's ``ValidationError.errors()`` of the SDK's check, locations under ``params``). The message names the
    first problem (``Invalid params for tools/call: field 'name' is required``); ``data`` lists them all (up to
    10) as ``{"method": …, "errors": [{"field": "name", "problem": "is required"}]}``. The SDK replied
    ``Invalid request parameters`` with ``data: ""``."""
    problems = []
    for e in errors[:10]:
        loc = [str(part) for part in e.get("loc", ())]
        field = ".".join(loc[1:] if loc[:1] == ["params"] else loc)
        kind = str(e.get("type", ""))
        if kind == "missing":
            problem = "is required"
        else:
            got = repr(e.get("input"))
            got = got if len(got) <= 60 else got[:57] + "..."
            wanted = _PARAM_MUST_BE.get(kind.split("_")[0]) if kind.endswith("_type") else None
            why = " ".join(str(e.get("msg", "is invalid")).split()).replace("Input should be", "must be", 1)
            problem = f"must be {wanted}, got {got}" if wanted else f"{why}, got {got}"
        problems.append({"field": field or "params", "problem": problem})
    first = problems[0] if problems else {"field": "params", "problem": "is invalid"}
    what = "params" if first["field"] == "params" else f"field {first['field']!r}"
    more = f" ({len(errors) - 1} more in data)" if len(errors) > 1 else ""
    return f"Invalid params for {method}: {what} {first['problem']}{more}", {"method": method, "errors": problems}


async def explain_invalid_params(ctx: Any, call_next: Any) -> Any:
    """Server middleware: a request whose params fail the SDK's check, and a request before ``initialize``, get a
    ``-32602`` reply that says what was wrong (:func:`invalid_params`) instead of the SDK's ``Invalid request
    parameters`` with ``data: ""``, on every transport. Other errors pass unchanged."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS
    from pydantic import ValidationError

    try:
        return await call_next(ctx)
    except ValidationError as exc:
        errors = exc.errors()
        if not errors or any(tuple(e.get("loc", ()))[:1] != ("params",) for e in errors):
            raise               # not the request's params: the SDK's reply
        message, data = invalid_params(ctx.method, errors)
        raise MCPError(code=INVALID_PARAMS, message=message, data=data) from None
    except MCPError as exc:
        if (exc.error.code, exc.error.message, exc.error.data) != (INVALID_PARAMS, "Invalid request parameters", ""):
            raise
        # the SDK's gate for a request before initialize (the only one with that error)
        raise MCPError(code=INVALID_PARAMS, message=f"Invalid params for {ctx.method}: the session is not "
                                                    f"initialized; send initialize first") from None


def _search_argument_problem(query: str, k: Any, tag: str | list[str] | None) -> str | None:
    """What is wrong with search's ``k``, ``query`` (:func:`pipeline.service.query_problem`) or ``tag`` (one tag or
    a list, as the CLI's repeated ``--tag``: one empty, as ``--tag ''``, or with a space:
    :func:`pipeline.search.query.tag_problem`), None when nothing."""
    from pipeline.search.query import tag_problem
    from pipeline.service import query_problem

    if problem := range_problem("k", k):
        return problem
    if problem := query_problem(query):
        return problem
    for one in [tag] if isinstance(tag, str) else tag or ():
        if not isinstance(one, str):
            return f"the `tag` argument must be a tag or a list of tags, got {one!r} in it"
        if not one.strip().lstrip("#"):
            return "the `tag` argument is empty: pass a tag, e.g. journal, or leave `tag` out"
        if problem := tag_problem(one):
            return problem
    return None


def _tags_problem(tags: list[str] | None) -> str | None:
    """The first of save_note's ``tags`` with a space (:func:`pipeline.search.query.tag_problem`), None when none."""
    from pipeline.search.query import tag_problem

    return next((p for t in tags or () if isinstance(t, str) and (p := tag_problem(t))), None)


def _wait_seconds(wait: Any) -> float:
    """The ``wait`` argument of save_note / refresh as seconds.

    Raises:
        ToolFailure: not a number from 0 to :data:`MAX_WAIT`.
    """
    if problem := range_problem("wait", wait):
        raise ToolFailure(problem)
    return float(wait)


@functools.lru_cache(maxsize=4)
def _shared_embedder(model_id: str) -> Any:
    from pipeline.index.embed import load_embedder

    return load_embedder(model_id)


def _read_call(path: str, page: int) -> str:
    return f'read(path="{path}", page={page})'


class VaultService:
    """What the MCP tools do, without the MCP layer.

    Args:
        settings: paths and model.
        embedder_factory: model id -> Embedder (default: load once per process and share).
        refresh_timeout: seconds a refresh may run before it is stopped (default env DOCSVAULT_REFRESH_TIMEOUT or
            600).
    """

    def __init__(self, settings: Settings, embedder_factory: Any = None, refresh_timeout: float | None = None) -> None:
        self.settings = settings
        self._factory = embedder_factory or _shared_embedder
        self.refresh_timeout = float(refresh_timeout or float_env("DOCSVAULT_REFRESH_TIMEOUT", 0) or DEFAULT_REFRESH_TIMEOUT)
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._searcher: Any = None
        self._identity: tuple[int, int, int, int | None] | None = None
        self._build: subprocess.Popen | None = None       # the refresh's running build (stop_build)

    # ---- searcher (reopened when a build swapped the file) ----
    def searcher(self) -> Any:
        """The Searcher over the current warehouse file (a new one after each publish)."""
        from pipeline.search.synonyms import SynonymsError, check_synonyms_file
        from pipeline.service import open_searcher

        try:
            check_synonyms_file(self.settings.synonyms_file, self.settings.synonyms_required)
        except SynonymsError as exc:
            raise ToolFailure(str(exc)) from None
        path = self.settings.warehouse_path
        try:
            st = path.stat()
        except FileNotFoundError:
            from pipeline.common.lock import running_build

            running = running_build(self.settings.data_dir)
            if running:
                raise ToolFailure(f"no warehouse at {path} yet: the first build is running ({running}); "
                                  f"search works when it has finished") from None
            raise ToolFailure(f"no warehouse at {path}: run `docsvault build` first (or the refresh tool)") from None
        try:    # an edited synonyms file takes effect at the next search, as in the CLI
            syn = self.settings.synonyms_file.stat().st_mtime_ns
        except OSError:
            syn = None
        ident = (st.st_ino, st.st_mtime_ns, st.st_size, syn)
        with self._lock:
            if self._searcher is None or ident != self._identity:
                # the old Searcher is not closed here: a search in another thread may still use it; it closes when
                # the last reference goes
                self._searcher = open_searcher(self.settings, embedder_factory=self._factory, preload_encoders=True)
                self._identity = ident
                log.info("opened warehouse %s (%d sources)", path, len(self._searcher.sources))
            return self._searcher

    # ---- tools ----
    def search(self, query: str, k: int = 8, source: str | list[str] | None = None,
               tag: str | list[str] | None = None, lanes: str | list[str] | None = None) -> dict[str, Any]:
        """Hits (one per note) with path, title, heading, score, clean bounded text, the note's links and the read
        call that continues at the hit. ``query`` takes the query syntax of :mod:`pipeline.search.query`; ``source``: one
        source name or several (a list), empty means all; ``tag``: one tag or several (a list: a note with any of
        them); ``lanes``: lane names (a list or comma-separated)."""
        from pipeline.search.neighbours import links_for_paths
        from pipeline.search.query import parse_query
        from pipeline.service import run_search, search_lanes

        if problem := _search_argument_problem(query, k, tag):
            raise ToolFailure(problem)
        try:
            parsed = parse_query(query)     # whole, as the CLI: a cut broke a phrase and dropped filters past it
            spec = ",".join(lanes) if isinstance(lanes, list) else lanes
            lane_list = search_lanes(spec, "the `lanes` argument") if lanes else None
        except (PipelineError, ValueError) as exc:
            raise ToolFailure(str(exc)) from None
        searcher = self.searcher()
        try:
            from pipeline.search.usage import boost_enabled, boosts, load

            searcher.usage_boost = boosts(load(self.settings.data_dir)) if boost_enabled() else {}
            hits, more, wanted, tags = run_search(
                self.settings, searcher, parsed, k, [source] if isinstance(source, str) else source or (),
                [tag] if isinstance(tag, str) else tag or (), lane_list)
        except (UnknownSourceError, ValueError) as exc:
            raise ToolFailure(str(exc)) from None
        try:
            links = links_for_paths(self.settings.warehouse_path, [h.vault_path for h in hits], cap=HIT_LINKS_CAP)
        except PipelineError:
            links = {}
        glossed = searcher.translation_terms(parsed.text) if parsed.text else ()   # a Japanese question's English
        out = [self._hit(h, parsed.text, glossed, links.get(h.vault_path, {})) for h in hits]
        if not out:
            return {"query": query[:200], "hits": out, **self._no_hits(searcher, parsed, wanted, tags)}
        if not parsed.text:
            cut = f"; more notes pass them: raise k (at most {MAX_K}) or add a filter" if more else ""
            return {"query": query[:200], "hits": out, "message": LISTING_MESSAGE + cut, "more": more}
        missing = searcher.missing_words(parsed.text, wanted or None, tags or None, parsed.paths)
        from pipeline.service import query_words_message, skipped_files

        # words no note has, or none searched by keyword: an agent should not read the hits as matches of them
        skipped = skipped_files(self.settings, wanted) if missing.missing else 0
        if message := query_words_message(missing, parsed.text, wanted, skipped, tags, parsed.paths):
            return {"query": query[:200], "hits": out, **({"missing": list(missing.missing)} if missing.missing
                                                          else {}), "message": message}
        return {"query": query[:200], "hits": out}

    def _no_hits(self, searcher: Any, parsed: Any, wanted: Sequence[str], tags: Sequence[str]) -> dict[str, Any]:
        """What the search tool says beside no hit (its ``message``, and ``missing`` when words no note has
        explain it): the tag no note has, the filter no note passes, else the words no note contains (keyword-only
        lanes found nothing: a typo's word is offered) or a bare "No results", as ``docsvault search`` says it."""
        from pipeline.service import NO_RESULTS  # the same words as `docsvault search`

        if tags and not searcher.tagged_notes(tags, wanted or None):     # of the sources searched, as the CLI
            from pipeline.service import untagged_message

            return {"message": shorten_quoted(untagged_message(tags, wanted, searcher.tag_names(wanted or None)),
                                              {"tag": list(tags)})}
        if parsed.required or parsed.excluded or parsed.paths:   # which filter left nothing, as the CLI says
            from pipeline.service import no_results_message

            return {"message": no_results_message(
                searcher.filter_misses(parsed, wanted or None, tags or None, searched=True), parsed, wanted)}
        if not parsed.text:
            return {"message": NO_RESULTS}
        # keyword-only lanes found nothing: name the words no note has (a typo's word), as hits' `missing` does
        from pipeline.service import no_hits_message, skipped_files

        missing = searcher.missing_words(parsed.text, wanted or None, tags or None, parsed.paths)
        skipped = skipped_files(self.settings, wanted) if missing.missing else 0
        return {**({"missing": list(missing.missing)} if missing.missing else {}),
                "message": no_hits_message(missing, parsed.text, wanted, skipped, tags, parsed.paths)}

    def _hit(self, h: Any, text_query: str, glossed: Sequence[str], nb: Mapping[str, Any]) -> dict[str, Any]:
        """One search hit as the tool returns it: up to HIT_TEXT_CHARS of clean text around the match (else around
        the first of ``glossed``, a Japanese question's English translation), the note's links ``nb``, and the
        page of the note the hit is on."""
        from pipeline.search.snippet import make_snippet

        text = make_snippet(h.chunk_text, text_query, width=HIT_TEXT_CHARS - 2,   # its … marks count: ≤ 600
                            fallback_terms=glossed) or h.snippet   # image-only chunk
        page = 1
        try:
            _, body = note_body(self.settings.vault_dir, h.vault_path)
            page = page_of(paginate(body), locate_match(body, h.heading, h.chunk_text or h.snippet, text_query))
        except (PipelineError, OSError) as exc:
            log.warning("hit %s: cannot open the vault note (%s)", h.vault_path, exc)
        return {
            "rank": h.rank, "path": h.vault_path, "source": h.source, "source_path": h.source_path,
            "title": h.title, "heading": h.heading, "score": round(float(h.score), 6), "text": text,
            "context": h.context, "outlinks": nb.get("outlinks", []), "backlinks": nb.get("backlinks", []),
            "read": {"path": h.vault_path, "page": page}, "continue_with": _read_call(h.vault_path, page),
        }

    def read(self, path: str, page: int = 1, links: int = 10) -> dict[str, Any]:
        """One ~1,000-char page of a vault note, with page/pages, its outlinks and backlinks (at most ``links`` of
        each) and the call for the next page. Records the read in the local usage log
        (:mod:`pipeline.search.usage`)."""
        from pipeline.search.reader import NoteNotFoundError
        from pipeline.search.usage import record
        from pipeline.service import note_links

        s = self.settings
        if problem := range_problem("links", links):
            raise ToolFailure(problem)
        try:
            pg = read_link(s.vault_dir, path, page, s.warehouse_path)
        except NoteNotFoundError as exc:
            from pipeline.service import note_missing_message

            raise ToolFailure(note_missing_message(s, path, exc)) from None
        except ValueError as exc:
            raise ToolFailure(str(exc)) from None
        record(s.data_dir, pg.path)
        out = pg.to_dict()
        out.update(note_links(s, pg.path, links))
        out["next"] = _read_call(pg.path, pg.next_page) if pg.next_page else None
        return out

    def related(self, path: str, k: int = 10) -> dict[str, Any]:
        """Notes linked to ``path`` (one and two hops), ranked by link weight and vector similarity
        (:func:`pipeline.search.neighbours.related`)."""
        from pipeline.service import related_notes

        if problem := range_problem("k", k):
            raise ToolFailure(problem)
        try:
            return related_notes(self.settings, path, k)
        except PipelineError as exc:             # no such note (why, when the build skipped it), no warehouse
            raise ToolFailure(str(exc)) from None

    def save_note(self, text: str, title: str | None = None, name: str | None = None, source: str | None = None,
                  agent: str = "mcp agent", correlation_id: str | None = None, tags: list[str] | None = None,
                  wait: float = 0) -> dict[str, Any]:
        """Write a note into the local capture source (:mod:`pipeline.ingest.capture`), then rebuild that source (as
        ``refresh``, waiting up to ``wait`` seconds for another running build) so it is searchable at once. The note
        is kept even when the rebuild fails (``searchable`` false, ``error`` says why). ``warnings``: the rebuild's
        warning lines about this note (an embed of a file not in the source, a link several notes could mean).
        ``kept_edits``: the rebuild's lines naming the generated notes of the source it replaced while they held a
        user's edit, and where each edit is kept now (at most :data:`LIST_CAP`; absent when none).

        Raises:
            ToolFailure: ``wait`` not 0-:data:`MAX_WAIT` seconds, no or unknown capture source, or one a Markdown
                note would not be read from (:func:`pipeline.ingest.capture.capture_problem`), empty or too long
                text or one with no words besides its frontmatter
                (:func:`pipeline.ingest.capture.check_text`), a tag with a space, unsafe or taken name;
                nothing is written then.
        """
        from pipeline.ingest.capture import capture_source, check_text, write_capture
        from pipeline.ingest.sources import load_sources
        from pipeline.service import capture_related, warnings_about

        s = self.settings
        wait = _wait_seconds(wait)
        if not isinstance(text, str) or not text.strip():
            raise ToolFailure("nothing to save: `text` is empty")
        if problem := _tags_problem(tags):
            raise ToolFailure(problem)
        try:
            src = capture_source(load_sources(s.sources_file), source, "the `source` argument")
            check_text(text)            # no words: refused before the related search
            related = capture_related(s, title, text)
            note = write_capture(src, text, title=title, name=name, agent=str(agent or "mcp agent")[:100],
                                 correlation_id=correlation_id, related=related, tags=tags or (),
                                 name_option="`name`")
        except PipelineError as exc:
            raise ToolFailure(str(exc)) from None
        out: dict[str, Any] = {"path": note.vault_path, "source": note.source, "file": str(note.path),
                               "correlation_id": note.correlation_id, "related": list(note.related),
                               **({"warning": note.warning} if note.warning else {})}
        try:
            result = self.refresh(src.name, wait=wait, evaluate=False)
            out["searchable"] = bool(note.vault_path in result.get("added", []) or result.get("ok"))
            out["refresh"] = {k: result.get(k) for k in ("ok", "seconds", "counts")}
            if mine := [ln for o in result.get("outcomes") or () if o.get("name") == src.name     # a broken embed
                        for ln in warnings_about(o.get("warnings") or (), note.vault_path)]:
                out["warnings"] = mine
            if kept := [ln for o in result.get("outcomes") or () if o.get("name") == src.name   # a user's hand edit
                        for ln in o.get("kept_edits") or ()][:LIST_CAP]:                      # the rebuild moved aside
                out["kept_edits"] = kept
            why = next((o["error"] for o in result.get("outcomes") or () if o.get("error")), None) \
                or (result.get("shared") or {}).get("error")
            if not result.get("ok") and why:
                out["error"] = f"the note is saved but the rebuild failed: {why}{_saved_next(src.name)}"
        except ToolFailure as exc:
            out["searchable"] = False
            out["error"] = f"the note is saved but the rebuild failed: {exc}{_saved_next(src.name)}"
        return out

    def status(self) -> dict[str, Any]:
        """Sources with note/chunk counts and last fetch, the warehouse, the model."""
        from pipeline.service import status_data

        data = status_data(self.settings)
        data["sources"] = data["sources"][:100]
        return data

    def refresh(self, source: str | None = None, full: bool = False, wait: float = 0, *,
                evaluate: bool = True) -> dict[str, Any]:
        """Rebuild local sources (one, or all of kind local) and report which notes were added, changed, removed.
        ``full``: from scratch (``docsvault build --force``: every chunk embedded again, the warehouse written in
        full). ``wait``: seconds (0-:data:`MAX_WAIT`) to wait for another running build or refresh to finish
        (``docsvault build --wait``); 0 refuses at once. ``evaluate`` False: ``build --no-eval`` (save_note's
        refresh: the note is searchable seconds sooner; the next build runs the eval).

        Returns ``outcomes`` (per source: ``status`` built | unchanged | failed, with ``failed_stage`` and the
        ``error`` line) and ``shared`` (the shared stages: ``ok``, ``error``, ``warehouse``, ``eval``); ``ok`` is
        False when a source or a shared stage failed. A failed source keeps serving its last good copy.

        Raises:
            ToolFailure: ``wait`` not 0-:data:`MAX_WAIT` seconds, unknown or non-local source, a refresh or build
                still running after ``wait``, the time bound exceeded, the build could not start, or every source
                failed (each source's error line in the message).
        """
        from pipeline.ingest.sources import did_you_mean, load_sources

        wait = _wait_seconds(wait)
        sources = load_sources(self.settings.sources_file)
        local = [s.name for s in sources if s.kind == "local"]
        if source:
            known = {s.name: s for s in sources}
            if source not in known:
                raise ToolFailure(f"unknown source {source!r}{did_you_mean([source], sorted(known))}; sources: "
                                  f"{', '.join(sorted(known)) or '(none)'}")
            if known[source].kind != "local":
                raise ToolFailure(
                    f"source {source!r} is kind {known[source].kind}: refresh rebuilds local sources only "
                    f"({', '.join(local) or 'none'}); run `docsvault build --source {source}` in a terminal"
                )
            names = [source]
        else:
            names = local
            if not names:
                raise ToolFailure("no local sources in sources.yaml: nothing to refresh")
        left = wait
        if not self._refresh_lock.acquire(blocking=False):
            started = time.monotonic()
            if not (wait > 0 and self._refresh_lock.acquire(timeout=wait)):
                raise ToolFailure(f"a refresh is still running after waiting {wait:g} s; call refresh again when "
                                  f"it has finished (or pass a larger {WAIT_ARG})" if wait > 0 else
                                  "a refresh is already running; call refresh again when it has finished (or pass "
                                  f"{WAIT_ARG})")
            left = round(max(0.0, wait - (time.monotonic() - started)), 1)     # the rest for the build's lock
        try:
            return self._refresh(names, full=bool(full), wait=left, evaluate=evaluate)
        finally:
            self._refresh_lock.release()

    def _note_hashes(self, names: list[str]) -> dict[str, str]:
        from pipeline import warehouse as wh

        if not self.settings.warehouse_path.exists():
            return {}
        con = wh.connect(self.settings.warehouse_path, read_only=True)
        try:
            return wh.note_hashes(con, names)
        finally:
            con.close()

    def _stopped(self, proc: subprocess.Popen, names: list[str], full: bool = False) -> ToolFailure:
        """Stop a refresh's build that ran past ``refresh_timeout`` (its process group: TERM, then KILL after 10 s);
        the tool error quotes the build's last warning line: what it was waiting for (a pool another run holds, a
        lock), and the command that runs the same build in a terminal (every source of the refresh, ``--force``
        for a ``full`` one: it named the first source alone before session 44)."""
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            _, errout = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, errout = proc.communicate()
        said = [ln.removeprefix("warning: ") for ln in (errout or "").splitlines() if ln.startswith("warning: ")]
        return ToolFailure(
            f"refresh of {', '.join(names)} took longer than {self.refresh_timeout:g} s and was stopped; the "
            f"previous index still serves. "
            + (f"The build's last warning: {said[-1][:600]}. " if said else "")
            + f"Run `docsvault build{' --force' if full else ''} {' '.join(f'--source {n}' for n in names)}` in a "
            "terminal")

    def stop_build(self, grace: float = 10.0) -> int | None:
        """Stop the build a refresh (or save_note) of this server runs, if one does: TERM to its process group (the
        build stops at once and releases its locks, as at a Ctrl-C), KILL after ``grace`` seconds. It runs in a
        session of its own, which a signal to the server does not reach. Returns its pid, None when none ran."""
        proc = self._build
        if proc is None or proc.poll() is not None:
            return None
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.pid

    def _outcome(self, o: Mapping[str, Any]) -> dict[str, Any]:
        """One source's outcome as ``refresh`` returns it, with ``skipped`` (``[{"file", "reason"}]``, at most
        :data:`LIST_CAP`) when the build skipped files of it: which notes are not searchable as they are, and why;
        and ``kept_edits`` (at most :data:`LIST_CAP` lines) when the build replaced generated notes that held the
        user's edits: where each edit is kept now."""
        from pipeline.service import skipped_file_reasons

        row = {k: o.get(k) for k in ("name", "status", "notes", "skipped_files", "warning", "failed_stage", "error")}
        if o.get("kept_edits"):             # a user's edit of a generated note, moved aside: say where it is now
            row["kept_edits"] = list(o["kept_edits"])[:LIST_CAP]
        if o.get("warnings"):               # a note's missing attachment, an ambiguous link: as the CLI prints them
            row["warnings"] = list(o["warnings"])[:LIST_CAP]
        if o.get("skipped_files"):
            row["skipped"] = skipped_file_reasons(self.settings, str(o.get("name")), LIST_CAP)
        return row

    def _refresh(self, names: list[str], full: bool = False, wait: float = 0.0,
                 evaluate: bool = True) -> dict[str, Any]:
        import json

        from pipeline.service import child_env

        cmd = [sys.executable, "-m", "pipeline.cli", "build", "--json", *(["--force"] if full else []),
               *([] if evaluate else ["--no-eval"]), "--wait", f"{wait:g}", "--wait-arg", WAIT_ARG]
        for n in names:
            cmd += ["--source", n]
        started = time.monotonic()
        log.info("refresh: %s", " ".join(cmd[2:]))
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=child_env(self.settings), start_new_session=True, text=True,
                                encoding="utf-8", errors="replace")
        self._build = proc
        try:
            output, errout = proc.communicate(timeout=self.refresh_timeout)
        except subprocess.TimeoutExpired:
            raise self._stopped(proc, names, full) from None
        finally:
            self._build = None
        seconds = round(time.monotonic() - started, 1)
        tail = errout[-OUTPUT_TAIL_CHARS:]
        try:
            outcome = json.loads(output)
            outcomes, shared = list(outcome["sources"]), dict(outcome["shared"])
        except (ValueError, KeyError, TypeError):      # the build did not start (lock, config): its error lines
            errors = [ln for ln in (errout + output).splitlines() if ln.startswith("error:")]
            raise ToolFailure(
                f"refresh of {', '.join(names)} failed (exit {proc.returncode}): "
                + ("; ".join(errors)[:1000] or tail[-500:])
            ) from None
        if outcomes and all(o.get("status") == "failed" for o in outcomes):
            raise ToolFailure(
                "refresh failed: " + "; ".join(f"{o.get('name')}: failed at {o.get('failed_stage')}: {o.get('error')}"
                                               for o in outcomes)[:1000]
                + "; the last good copy keeps serving search"
            )
        after = self._note_hashes(names)
        # the build's own changes, compared under its lock (a refresh that waited for another build: not that
        # build's, which a comparison here, before and after the child, would count)
        diff = outcome.get("note_changes") or {}
        added, changed, removed = (list(diff.get(k) or []) for k in ("added", "changed", "removed"))
        return {
            "sources": names, "ok": bool(outcome.get("ok")), "seconds": seconds, "notes": len(after),
            "outcomes": [self._outcome(o) for o in outcomes],
            "shared": shared,
            "counts": {"added": len(added), "changed": len(changed), "removed": len(removed)},
            "added": added[:LIST_CAP], "changed": changed[:LIST_CAP], "removed": removed[:LIST_CAP],
            "truncated": any(len(x) > LIST_CAP for x in (added, changed, removed)),
            "progress": [ln[len("progress: "):] for ln in errout.splitlines() if ln.startswith("progress: ")][-20:],
            "build_output": tail,
        }


def _request_id(value: Any) -> Any:
    """A JSON-RPC request id as the SDK correlates it (``"7"`` and ``7`` are one id), None for no id."""
    from mcp.shared.dispatcher import coerce_request_id

    return coerce_request_id(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def http_session_key(session_id: str) -> str:
    """The :class:`CallQueues` key of the streamable HTTP session ``session_id`` (its ``Mcp-Session-Id``)."""
    return f"http:{session_id}"


def session_key(ctx: Any) -> str | None:
    """The :class:`CallQueues` key of a request's session: :data:`STDIO_SESSION` without a transport request
    (stdio: one session per process), the ``Mcp-Session-Id`` on HTTP, None on stateless HTTP (no session, no
    order: each request may go to another process)."""
    request = getattr(ctx, "request", None)
    if request is None:
        return STDIO_SESSION
    headers = getattr(request, "headers", None)
    sid = headers.get("mcp-session-id") if headers is not None else None
    return http_session_key(sid) if sid else None


@dataclass
class _Queue:
    """One session's tickets: ``open`` are admitted and not done (claimed or not), ``waiting`` the unclaimed ones
    by request id (a list: a client may reuse an id)."""

    next: int = 0
    open: set[int] = field(default_factory=set)
    waiting: dict[Any, list[int]] = field(default_factory=dict)
    moved: Any = None                   # an anyio.Event while a call waits for its turn


class CallQueues:
    """The ``tools/call`` requests of each MCP session, run one at a time in the order they arrived.

    The transport's reader calls :meth:`arrived` for every message, in the order it receives them (stdio:
    :class:`InFlight`; HTTP: :class:`pipeline.mcp_http.ArrivalOrder`), before any task handles them: a
    ``tools/call`` takes the next ticket of its session then, so the order does not depend on the order in which
    the handler tasks start. The server middleware :meth:`in_order` holds each call until every earlier ticket of
    its session is done. A ticket is done when its call ends (answered, failed, or cancelled while it waits), or
    is dropped before its call started: a ``notifications/cancelled`` naming it, or its request answered without
    reaching the middleware (an error of an outer middleware; an HTTP request refused by the transport). A call
    without a ticket (in-process, or dropped) takes a new one, last, when it starts. Other methods never wait.
    All in one event loop: no locks.
    """

    def __init__(self) -> None:
        self._queues: dict[str, _Queue] = {}

    def admit(self, key: str, rid: Any) -> int:
        """Give the request ``rid`` of session ``key`` the next ticket."""
        queue = self._queues.setdefault(key, _Queue())
        ticket, queue.next = queue.next, queue.next + 1
        queue.open.add(ticket)
        queue.waiting.setdefault(_request_id(rid), []).append(ticket)
        return ticket

    def drop(self, key: str, rid: Any) -> bool:
        """Drop the ticket of ``rid`` if its call has not started (True when there was one)."""
        queue = self._queues.get(key)
        ticket = self._unclaimed(queue, rid) if queue is not None else None
        if ticket is None:
            return False
        self._done(key, queue, ticket)
        return True

    def arrived(self, key: str, method: str, rid: Any, params: Any) -> bool:
        """Note a message of session ``key`` as it is received: a ``tools/call`` request takes its ticket (True);
        a ``notifications/cancelled`` drops the ticket of the call it names if that has not started."""
        if method == "tools/call" and _request_id(rid) is not None:
            self.admit(key, rid)
            return True
        if method == "notifications/cancelled" and isinstance(params, dict):
            target = _request_id(params.get("requestId"))
            if target is not None:
                self.drop(key, target)
        return False

    def pending(self, key: str) -> int:
        """Tickets of session ``key`` not done yet (running, waiting, or not started)."""
        queue = self._queues.get(key)
        return len(queue.open) if queue is not None else 0

    @asynccontextmanager
    async def turn(self, key: str, rid: Any) -> AsyncIterator[None]:
        """Wait until the call ``rid`` is the first of its session; its ticket is done on leaving."""
        import anyio

        queue = self._queues.setdefault(key, _Queue())
        ticket = self._unclaimed(queue, rid)
        if ticket is None:
            self.admit(key, rid)
            ticket = self._unclaimed(queue, rid)
        try:
            while min(queue.open) != ticket:
                if queue.moved is None:
                    queue.moved = anyio.Event()
                await queue.moved.wait()
            yield
        finally:
            self._done(key, queue, ticket)

    async def in_order(self, ctx: Any, call_next: Any) -> Any:
        """Server middleware: a ``tools/call`` runs in its session's turn (:meth:`turn`); every other request and
        notification passes at once."""
        key = session_key(ctx) if ctx.method == "tools/call" and ctx.request_id is not None else None
        if key is None:
            return await call_next(ctx)
        async with self.turn(key, ctx.request_id):
            return await call_next(ctx)

    @staticmethod
    def _unclaimed(queue: _Queue, rid: Any) -> int | None:
        rid = _request_id(rid)
        tickets = queue.waiting.get(rid)
        if not tickets:
            return None
        ticket = tickets.pop(0)
        if not tickets:
            del queue.waiting[rid]
        return ticket

    def _done(self, key: str, queue: _Queue, ticket: int) -> None:
        queue.open.discard(ticket)
        if queue.moved is not None:
            queue.moved.set()
            queue.moved = None
        if not queue.open and self._queues.get(key) is queue:
            del self._queues[key]


class InFlight:
    """The requests a stdio session has read and not answered yet, so that the end of stdin waits for their
    answers. The SDK ends the session at EOF and cancels the handlers still running: a client that wrote its
    requests and closed stdin (``docsvault mcp < requests.jsonl``) lost every answer but the fast ones.

    :meth:`arrived` sees every message read (in order; tools/call tickets: :class:`CallQueues`), :meth:`answered`
    every answer written (:class:`AnswerWatch`); a ``notifications/cancelled`` settles the request it names (the
    SDK never answers a cancelled request).
    """

    def __init__(self, queues: CallQueues, key: str = STDIO_SESSION) -> None:
        self.queues = queues
        self.key = key
        self._open: Counter[Any] = Counter()
        self._last = 0.0                    # anyio clock of the last answer (or of EOF)
        self._moved: Any = None

    def arrived(self, item: Any) -> None:
        """Note a message read from stdin, before it is passed on."""
        from mcp_types import JSONRPCNotification, JSONRPCRequest

        msg = getattr(item, "message", None)
        if isinstance(msg, JSONRPCRequest):
            self._open[_request_id(msg.id)] += 1
            self.queues.arrived(self.key, msg.method, msg.id, msg.params)
        elif isinstance(msg, JSONRPCNotification):
            if msg.method == "notifications/cancelled" and isinstance(msg.params, dict):
                self._settle(msg.params.get("requestId"))
            self.queues.arrived(self.key, msg.method, None, msg.params)

    def answered(self, item: Any) -> None:
        """Note a message written to stdout: an answer settles its request (and its ticket, if its call never
        reached the queue)."""
        from mcp_types import JSONRPCError, JSONRPCResponse

        msg = getattr(item, "message", None)
        if isinstance(msg, (JSONRPCResponse, JSONRPCError)) and msg.id is not None:
            self._settle(msg.id)
            self.queues.drop(self.key, msg.id)

    def unanswered(self) -> list[Any]:
        """The ids of the requests read and not answered, in id order."""
        return sorted(self._open.elements(), key=lambda rid: (isinstance(rid, str), rid))

    async def drained(self, seconds: float) -> list[Any]:
        """Wait until every request read is answered (or cancelled); give up when none has been answered for
        ``seconds`` (counted from now, then from each answer). Returns the ids still unanswered, [] when none."""
        import anyio

        self._last = max(self._last, anyio.current_time())
        while self._open:
            left = self._last + seconds - anyio.current_time()
            if left <= 0:
                return self.unanswered()
            if self._moved is None:
                self._moved = anyio.Event()
            with anyio.move_on_after(left):
                await self._moved.wait()
        return []

    def _settle(self, rid: Any) -> None:
        import anyio

        rid = _request_id(rid)
        if rid is None or self._open[rid] <= 0:
            return
        self._open[rid] -= 1
        if not self._open[rid]:
            del self._open[rid]
        self._last = anyio.current_time()
        if self._moved is not None:
            self._moved.set()
            self._moved = None


class AnswerWatch:
    """The stdio write stream, telling :class:`InFlight` of every message written (after it was handed on)."""

    def __init__(self, inner: Any, in_flight: InFlight) -> None:
        self._inner = inner
        self._in_flight = in_flight

    async def send(self, item: Any) -> None:
        await self._inner.send(item)
        self._in_flight.answered(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def finish_answers(in_flight: InFlight, seconds: float) -> None:
    """At the end of stdin: wait for the answers of the requests still running (:meth:`InFlight.drained`), with
    one line on stderr when there are some, and a warning naming those still unanswered after ``seconds``
    without an answer (they are then stopped, unanswered)."""
    running = in_flight.unanswered()
    if not running:
        return
    log.info("stdin closed: answering the %d request(s) still running before exiting", len(running))
    stuck = await in_flight.drained(seconds)
    if stuck:
        shown = ", ".join(map(repr, stuck[:10])) + (", ..." if len(stuck) > 10 else "")
        log.warning("stdin closed: %d request(s) still running after %g s without an answer (id %s); stopping "
                    "them unanswered", len(stuck), seconds, shown)


async def answer_parse_errors(source: Any, sink: Any, write_stream: Any, in_flight: InFlight | None = None,
                              drain_seconds: float = DEFAULT_REFRESH_TIMEOUT + DRAIN_MARGIN) -> None:
    """Forward the stdio transport's messages from ``source`` to ``sink``; a line that is not a JSON-RPC message
    (the transport yields its validation exception) is answered on ``write_stream`` (:func:`bad_line_reply`) with
    one warning line on stderr, and a blank line is skipped. The SDK only logged such a line at debug level: a
    client that wrote it waited for a reply that never came.

    With ``in_flight``, every message is noted as it is read (:meth:`InFlight.arrived`: the tools/call tickets),
    and at the end of ``source`` the sink stays open until the requests read are answered
    (:func:`finish_answers`, bounded by ``drain_seconds`` without an answer): closing it ends the session."""
    from mcp.shared.message import SessionMessage

    async with sink:
        async for item in source:
            if not isinstance(item, Exception):
                if in_flight is not None:
                    in_flight.arrived(item)
                await sink.send(item)
                continue
            reply = bad_line_reply(item)
            if reply is None:
                continue
            log.warning("a line on stdin is not a JSON-RPC message (%s): answered with error %d", reply.error.message,
                        reply.error.code)
            await write_stream.send(SessionMessage(reply))
        if in_flight is not None:
            await finish_answers(in_flight, drain_seconds)


def bad_line_reply(exc: Exception) -> Any:
    """The JSON-RPC error for a stdin line the transport could not read as a message (its exception, pydantic's
    ``ValidationError`` when it is one): None for a blank line (skipped); ``-32700 Parse error: <why>`` (id null)
    for a line that is not JSON; ``-32600 Invalid Request: …`` for JSON that is no JSON-RPC 2.0 message, with the
    line's ``id`` when it has one (the client waiting on that id gets its answer) and the first field in error."""
    import mcp_types as types

    errors = exc.errors() if callable(getattr(exc, "errors", None)) else []
    first = errors[0] if errors else {}
    raw = first.get("input")
    bad = next((i for i, ch in enumerate(raw) if "\udc80" <= ch <= "\udcff"), None) if isinstance(raw, str) else None
    if bad is not None:             # a byte that is no UTF-8, kept by surrogateescape (run_stdio_async)
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=types.PARSE_ERROR, message=(
            f"Parse error: the line is not UTF-8 (byte 0x{ord(raw[bad]) - 0xDC00:02x} at character {bad + 1}): "
            "send JSON-RPC messages in UTF-8")))
    if first.get("type") == "json_invalid" or not errors:
        if isinstance(raw, str) and not raw.strip():
            return None
        why = " ".join(str(first.get("msg") or str(exc).split("\n")[0]).split())[:200]
        return types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=types.PARSE_ERROR,
                                                                                message=f"Parse error: {why}"))
    message = next((e["input"] for e in errors if isinstance(e.get("input"), dict)), {})   # the line's object
    rid = message.get("id")
    rid = rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
    where = ".".join(str(part) for part in first.get("loc", ())[1:])
    why = " ".join(f"{where + ': ' if where else ''}{first.get('msg', '')}".split())[:200]
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(
        code=types.INVALID_REQUEST, message=f"Invalid Request: not a JSON-RPC 2.0 request, notification or response "
                                            f"({why})"))


def create_server(settings: Settings, service: VaultService | None = None, read_only: bool = False) -> Any:
    """The MCPServer with the tools over ``service`` (default: a VaultService over ``settings``); its tool calls
    run one at a time per session in arrival order (:class:`CallQueues`, ``server.call_queues``). ``read_only``:
    the write tools (:data:`WRITE_TOOLS`) are not offered, and a call of one is refused in one line naming the
    option (:func:`read_only_refusal`).

    Long: a factory of the MCP tools: each tool is a closure over the service whose docstring is the tool's
    description; its length is the tools.
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from mcp_types import ToolAnnotations
    from pydantic import ValidationError

    from pipeline import __version__

    class Server(MCPServer):
        """MCPServer whose tool errors are one line with the tool's name once (:func:`tool_error`; argument errors:
        :func:`argument_error`, not pydantic's multi-line dump)."""

        call_queues: CallQueues
        #: seconds the end of stdin waits without an answer (:func:`finish_answers`)
        drain_seconds: float = DEFAULT_REFRESH_TIMEOUT + DRAIN_MARGIN

        async def run_stdio_async(self) -> None:
            """MCPServer's stdio loop, with a line that is no JSON-RPC message answered (:func:`answer_parse_errors`),
            the tool calls' tickets taken as they are read, and the end of stdin waiting for the answers
            (:class:`InFlight`). A client that closed stdout gets a warning, not a traceback."""
            import anyio
            from mcp.server.stdio import stdio_server
            from mcp.shared._context_streams import create_context_streams

            in_flight = InFlight(self.call_queues)
            # stdin claimed as the SDK claims it, but read with surrogateescape, not "replace": a line that is not
            # UTF-8 (a Shift_JIS client) is a parse error (:func:`bad_line_reply`), as over HTTP; it was decoded
            # to U+FFFD and save_note wrote the note '�V�t�gJIS.md' (before session 43)
            from mcp.server import stdio as sdk_stdio

            claim, divert, wrapper = (getattr(sdk_stdio, name, None)
                                      for name in ("_claim_fd", "_open_stdin_diversion", "_UnownedTextWrapper"))
            stdin, release = None, None     # another SDK release without these private helpers: its own stdin
            if claim is not None and divert is not None and wrapper is not None:
                buffer, release = claim(0, sys.stdin, "rb", divert)
                stdin = anyio.wrap_file(wrapper(buffer, encoding="utf-8", errors="surrogateescape"))
            try:
                async with stdio_server(stdin=stdin) as (read_stream, write_stream):
                    sink, messages = create_context_streams[Any](0)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(answer_parse_errors, read_stream, sink, write_stream, in_flight,
                                      self.drain_seconds)
                        await self._lowlevel_server.run(messages, AnswerWatch(write_stream, in_flight),
                                                        self._lowlevel_server.create_initialization_options())
            except* BrokenPipeError:
                log.warning("stdout was closed by the client: answers can no longer be delivered; exiting")
            finally:
                if release is not None:
                    release()

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            """MCPServer's call_tool, every failure one line (:func:`tool_error`, :func:`unknown_tool`)."""
            tool = self._tool_manager.get_tool(name)
            if tool is None and read_only and name in WRITE_TOOLS:
                raise ToolError(read_only_refusal(name))
            if tool is None:
                raise ToolError(unknown_tool(name, [t.name for t in self._tool_manager.list_tools()]))
            known = tool.parameters.get("properties") or {}
            if problem := unknown_argument(name, arguments, known) or boolean_number(name, arguments, known):
                raise ToolError(problem)
            try:
                if name in WRITE_TOOLS:         # a build of its own: stopped when the client cancels the call
                    return await stop_build_on_cancel(super().call_tool(name, arguments, context), svc, name)
                return await super().call_tool(name, arguments, context)
            except UnexpectedToolError as exc:     # a crash: logged with its traceback by the SDK, not shown
                raise UnexpectedToolError(tool_error(name, "internal error; the server's log (stderr) has the "
                                                           "details")) from exc.__cause__
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError):
                    raise ToolError(argument_error(name, cause.errors(), arguments)) from cause
                raise ToolError(tool_error(name, str(cause or exc), arguments)) from cause

    svc = service or VaultService(settings)
    queues = CallQueues()
    server = Server(name="docsvault", version=__version__,
                    instructions=READ_ONLY_INSTRUCTIONS if read_only else INSTRUCTIONS, log_level="WARNING",
                    middleware=[explain_invalid_params, queues.in_order])
    server.call_queues = queues
    server.drain_seconds = float(getattr(svc, "refresh_timeout", DEFAULT_REFRESH_TIMEOUT)) + DRAIN_MARGIN

    def guarded(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ToolFailure, PipelineError) as exc:
            raise ToolError(one_line(str(exc).split("\n")[0])) from None

    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(
        name="search",
        description=(
            "Search the local docs and notes (hybrid keyword + vector search). Returns up to k hits (1-20), best "
            "first, each with the note `path`, `title`, `heading`, `score`, up to 600 characters of `text` from "
            "the hit, the note's `outlinks`/`backlinks`, and `continue_with`: the exact read call that opens the note "
            "at the hit. One hit per note. Query syntax: \"exact phrase\" (required), -word (excluded), "
            "\"a b\" OR \"c d\", source:NAME, tag:TAG, path:PREFIX; a query of filters alone (tag:recipe) lists "
            "the notes that pass them by path. Optional `source` (a source name from status, "
            "or a list of them), `tag` (frontmatter or inline #tag; a list: any of them) and `lanes` (any of "
            "bm25, bm25_page, vector, crosslingual, graph, hybrid, hybrid+graph) narrow the search."
        ),
        annotations=reads,
    )
    def search(query: QueryArg, k: SearchKArg = 8, source: SourcesArg = None, tag: TagsArg = None,
               lanes: LanesArg = None) -> dict[str, Any]:
        return guarded(svc.search, query, k, source, tag, lanes)

    @server.tool(
        name="read",
        description=(
            "Read a note of the vault by its path (the `path` of a search hit, e.g. 'source/folder/Note.md'; "
            "a note's file name, title or alias works too, and a link as a note writes it: [[Note#Heading|text]] "
            "or Note#Heading (Note#^block-id) opens the page where that heading (block) starts; `warning` says when "
            "the note has no such heading), one page of about 1,000 characters at a time. "
            "Returns `text`, `page`, `pages`, `title`, frontmatter "
            "on page 1, the note's `outlinks`/`backlinks` (up to `links` each, default 10, most links first, with "
            "their totals; `related` ranks its neighbours), and `next`: the call for the next page (null on the last page). A page cut inside a "
            "fenced code block re-opens (`added_before`) or closes (`added_after`) the fence. Only Markdown "
            "notes inside the vault can be read."
        ),
        annotations=reads,
    )
    def read(path: NoteArg, page: PageArg = 1, links: LinksArg = 10) -> dict[str, Any]:
        return guarded(svc.read, path, page, links)

    @server.tool(
        name="related",
        description=(
            "Notes related to a note through the link graph (its outlinks, backlinks and their neighbours), ranked "
            "by link weight and vector similarity. Give the note's `path` (as search returns it, or a name or link as "
            "read takes it); returns up to k "
            "(1-20) rows with `path`, `title`, `score`, `hops`, `link_weight`, `similarity`."
        ),
        annotations=reads,
    )
    def related(path: NoteArg, k: RelatedKArg = 10) -> dict[str, Any]:
        return guarded(svc.related, path, k)

    @server.tool(
        name="save_note",
        description=(
            "Save what you learned as a new Markdown note in the local capture source (DOCSVAULT_CAPTURE_SOURCE, or "
            "`source`: a local source that reads Markdown; the error of any other names the sources that can take "
            "it), with frontmatter (created, agent, status: raw, correlation_id, related: the top notes a "
            "search for it finds), then rebuild that source so the note is searchable at once (seconds to minutes). "
            "`title` heads the note as `# title` unless the text starts with a level-1 heading (default: the text's "
            "first heading, else the `name`'s file name, else its first sentence). "
            "`name` is a file name without .md, or folders and a file name (daily/2026-12-04) (default: from the title or first heading); an existing note is "
            f"never overwritten. `wait` (seconds, 0-{MAX_WAIT}, default 0): how long the rebuild waits for another "
            "running build to finish; with 0 it fails at once while one runs (the note is saved either way: "
            "`searchable` false, `error` says why). Returns the note's `path` (for read/search), `correlation_id`, "
            "`related`, `searchable`, `warning` when no [[link]] can reach the note by its name (a name with "
            "# ^ [ ]: pick another name to link it), and `kept_edits` when the rebuild replaced generated notes a "
            "user had edited by hand (each line says where the user's version is kept now)."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=False),
    )
    def save_note(text: TextArg, title: TitleArg = None, name: NameArg = None, source: CaptureSourceArg = None,
                  agent: AgentArg = "mcp agent", correlation_id: CorrelationArg = None, tags: NoteTagsArg = None,
                  wait: WaitArg = 0) -> dict[str, Any]:
        return guarded(svc.save_note, text, title, name, source, agent, correlation_id, tags, wait)

    @server.tool(
        name="status",
        description=(
            "Show what is indexed: every source with its kind, note and chunk counts and last fetch; the "
            "warehouse (path, size, build time, counts) and the embedding model. Use source names from here "
            "as the `source` of search and refresh."
        ),
        annotations=reads,
    )
    def status() -> dict[str, Any]:
        return guarded(svc.status)

    @server.tool(
        name="refresh",
        description=(
            "Rebuild local sources (all local sources, or the one named) so notes just written to their folders "
            "become searchable. Takes seconds to minutes (stopped after a time limit); returns every source's "
            "outcome (built, unchanged or failed with its error), the shared stages, and the vault paths of notes "
            "added, changed and removed. `full=true` rebuilds them from scratch (every chunk embedded again, the "
            f"index written in full). `wait` (seconds, 0-{MAX_WAIT}, default 0): how long to wait for another running "
            "build or refresh to finish first (it counts toward the time limit); with 0 the call fails at once "
            "while one runs. Git and web sources are not refreshed here."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                    open_world_hint=False),
    )
    def refresh(source: RefreshSourceArg = None, full: FullArg = False, wait: WaitArg = 0) -> dict[str, Any]:
        return guarded(svc.refresh, source, full, wait)

    if read_only:                       # readers of a team service: nothing that writes is offered
        for name in WRITE_TOOLS:
            server.remove_tool(name)
    return server


#: seconds between two tries to stop a cancelled call's build (:func:`stop_build_on_cancel`)
CANCEL_POLL = 0.2


async def stop_build_on_cancel(call: Any, svc: Any, tool: str) -> Any:
    """Await ``call`` (a ``refresh`` or ``save_note`` tool call, which runs its build in a worker thread); when the
    client cancels it (``notifications/cancelled``, an HTTP client gone), stop the build it runs
    (:meth:`VaultService.stop_build`: the build stops as at a Ctrl-C and releases its locks; a saved note stays
    saved), wait for the call to end, then let the cancellation go on (the SDK answers no cancelled request).
    Before session 46 the worker thread could not be cancelled: the build ran on to its end (minutes for a
    ``full`` refresh) and every later call of the session waited behind it. The build is stopped again every
    :data:`CANCEL_POLL` seconds until the call ends, so one the call starts after the cancel is stopped too."""
    import anyio

    outcome: dict[str, Any] = {}

    async def run(stop: anyio.CancelScope) -> None:
        with anyio.CancelScope(shield=True):        # the thread runs on until the build it waits for ends
            try:
                outcome["result"] = await call
            except BaseException as exc:               # noqa: BLE001 - re-raised below, outside the task group
                outcome["error"] = exc
        stop.cancel()

    async def stop_when_cancelled(task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                while "result" not in outcome and "error" not in outcome:
                    pid = await anyio.to_thread.run_sync(getattr(svc, "stop_build", lambda: None))
                    if pid:
                        log.info("%s was cancelled by the client: stopped its build (pid %s)", tool, pid)
                    await anyio.sleep(CANCEL_POLL)
            raise

    async with anyio.create_task_group() as tg:
        await tg.start(stop_when_cancelled)
        tg.start_soon(run, tg.cancel_scope)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def stop_on_signals(svc: VaultService) -> None:
    """Ctrl-C (SIGINT) and SIGTERM end the stdio server at once (exit 130 / 143; Ctrl-C prints ``interrupted``, as
    every command), first stopping the build a refresh of it runs (:meth:`VaultService.stop_build`). Before session
    42 a Ctrl-C left the server waiting until stdin closed (the SDK reads stdin in a worker thread, which the end of
    the event loop waits for: in a terminal, for ever), and a SIGTERM left a refresh's build running on alone, holding
    the build lock. Only from the main thread (signal handlers cannot be set elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, _frame: Any) -> None:
        pid = svc.stop_build()
        said = f"docsvault-mcp INFO stopped the refresh's build (pid {pid})\n" if pid else ""
        said += "interrupted\n" if signum == signal.SIGINT else ""
        os.write(2, said.encode())
        os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)


def serve(settings: Settings, transport: str = "stdio", port: int = 8765, read_only: bool = False) -> None:
    """Run the server until the client disconnects (stdio) or the process is stopped (HTTP on 127.0.0.1:port);
    ``read_only``: without the write tools (:func:`create_server`)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="docsvault-mcp %(levelname)s %(message)s",
                        force=True)         # over the CLI's bare warning lines (cli._log_lines)
    svc = VaultService(settings)
    server = create_server(settings, svc, read_only=read_only)
    if read_only:
        log.info("read-only: save_note and refresh are not offered")
    if transport == "stdio":
        stop_on_signals(svc)
        server.run("stdio")
    elif transport == "streamable-http":
        log.info("serving MCP over streamable HTTP on http://127.0.0.1:%d/mcp", port)
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        raise ValueError(f"unknown transport {transport!r}; use stdio or streamable-http")
