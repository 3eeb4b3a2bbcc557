"""What each build stage returns: one frozen record per stage (:mod:`pipeline.stages`).

A record travels from the stage function to the Dagster asset (``pipeline/defs/assets.py``), which records
:meth:`StageResult.as_dict` as the materialization's metadata (the CLI's and MCP's build outcome read those
figures back from the run), and to the state file where a stage keeps its last result for a skipped run.

:meth:`StageResult.as_dict` is the one mapping of a result: its fields in declaration order, tuples as lists,
nested mappings as dicts, and a field that is ``None`` left out (a figure the run did not produce, e.g. the timings
of a skipped stage). The records also read as that mapping (``result["notes"]``), as
:class:`pipeline.evaluate.EvalReport` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar, Self

from pipeline.models import MappingRecord, plain


@dataclass(frozen=True, eq=False)
class StageResult(MappingRecord):
    """Base of the stage records. ``PATHS``: fields that name a file or folder (Dagster shows them as paths)."""

    PATHS: ClassVar[tuple[str, ...]] = ()

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-safe metadata: fields in declaration order, ``None`` fields left out."""
        return {f.name: plain(v) for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **changes: Any) -> Self:
        """The record of a mapping :meth:`as_dict` gave (a stage's last result, read back from its state file);
        a key it lacks takes the field's default, else ``None`` (left out again by :meth:`as_dict`); lists become
        tuples; ``changes`` override."""
        return replace(cls(**_values(cls, data)), **changes)


def _values(cls: type[StageResult], data: Mapping[str, Any]) -> dict[str, Any]:
    """Field name -> ``data``'s value (lists as tuples), the field's default or ``None`` when ``data`` lacks it."""
    out = {}
    for f in fields(cls):
        value = data.get(f.name, None if f.default is MISSING else f.default)
        out[f.name] = tuple(value) if isinstance(value, list) else value
    return out


def _splice(base: dict[str, Any], where: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with its key ``where`` replaced, in place, by the items of ``extra`` (keys of ``base`` win)."""
    items = {k: plain(v) for k, v in extra.items() if k not in base}
    out: dict[str, Any] = {}
    for k, v in base.items():
        if k == where:
            out.update(items)
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------- ingest
@dataclass(frozen=True, eq=False)
class FetchStageResult(StageResult):
    """``fetch_stage``: the strategy used, the revision (git commit or listing hash, ``""`` when none), whether
    anything moved upstream, counts, seconds, the fetcher's other numeric stats (``stats``, in the mapping after
    ``seconds``) and its warnings (count and up to 20 lines)."""

    strategy: str
    revision: str
    changed: bool
    files: int
    requests: int
    bytes: int
    seconds: float
    stats: Mapping[str, float]
    warnings: int
    warning_lines: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return _splice(super().as_dict(), "stats", self.stats)


@dataclass(frozen=True, eq=False)
class NormalizeResult(StageResult):
    """``normalize_stage``: notes written, files skipped (``errors``, up to 50 ``error_lines``); a run that
    normalized also reports the files that kept their last good note, parse cache hits and misses, dangling links,
    the two report files and its seconds (``None`` when ``skipped``)."""

    PATHS: ClassVar[tuple[str, ...]] = ("errors_file", "dangling_file")

    notes: int
    errors: int
    error_lines: tuple[str, ...]
    kept_last_good: tuple[str, ...] | None = None
    parsed: int | None = None
    parse_cached: int | None = None
    dangling: int | None = None
    errors_file: str | None = None
    dangling_file: str | None = None
    skipped: bool = False
    seconds: float | None = None


@dataclass(frozen=True, eq=False)
class VaultResult(StageResult):
    """``vault_stage``: counts of notes written, unchanged and removed (with up to 50 ``removed_files``), the
    user's files kept in the folder, ``conflicts`` (``"<rel> -> <copy>"``), attachments copied and skipped (up to
    50 ``attachment_skip_lines``), unresolved embeds, links qualified to path form, the folder, and the warnings of
    notes whose attachment is missing or whose link several notes could mean (``warning_lines``, None when there
    is none), and the edited files whose page left the source, kept where they are (``left_edited``, up to 50)."""

    PATHS: ClassVar[tuple[str, ...]] = ("vault_dir",)

    notes: int
    written: int
    unchanged: int
    removed: int
    removed_files: tuple[str, ...]
    kept: int
    kept_files: tuple[str, ...]
    conflicts: tuple[str, ...]
    attachments: int
    attachments_written: int
    attachment_bytes: int
    attachments_skipped: int
    attachment_skip_lines: tuple[str, ...]
    unresolved_embeds: int
    qualified_links: int
    vault_dir: str
    skipped: bool
    warning_lines: tuple[str, ...] | None = None
    left_edited: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class FrontmatterCheck(StageResult):
    """``frontmatter_check``: generated notes checked, how many are invalid (up to 10 rel paths), and whether the
    result is the recorded one (``cached``)."""

    notes: int
    invalid: int
    first_invalid: tuple[str, ...]
    cached: bool = False


# ---------------------------------------------------------------- index
@dataclass(frozen=True, eq=False)
class ChunkResult(StageResult):
    """``chunk_stage``: notes and chunks, notes chunked again, notes per detected language, and the warning when a
    configured ``language:`` disagrees with the notes (``""`` when none), and one line per note cut at
    ``MAX_CHUNKS_PER_NOTE`` (repeated while the note is unchanged)."""

    notes: int
    chunks: int
    rechunked: int
    skipped: bool
    languages: Mapping[str, int]
    language_warning: str
    warning_lines: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class EmbedResult(StageResult):
    """``embed_stage``: the notes' model(s) (``", "``-joined), chunks per model id, ``"old -> new"`` when the
    models changed (``""`` otherwise), chunk counts (new model calls, from the cache, seeded from the warehouse),
    seconds and chunks embedded per second (0.0 when none)."""

    model: str
    models: Mapping[str, int]
    model_changed: str
    chunks: int
    embedded: int
    cached: int
    seeded: int
    seconds: float
    chunks_per_s: float
    skipped: bool = False


@dataclass(frozen=True, eq=False)
class GraphResult(StageResult):
    """``graph_stage``: nodes, edges, resolved and dangling link occurrences, attachment links, the two export
    files."""

    PATHS: ClassVar[tuple[str, ...]] = ("graphml", "json")

    nodes: int
    edges: int
    links_resolved: int
    links_dangling: int
    attachments: int
    graphml: str
    json: str
    skipped: bool = False


# ---------------------------------------------------------------- warehouse
@dataclass(frozen=True, eq=False)
class WarehouseResult(StageResult):
    """``warehouse_stage``: what the published file holds (sources, model ids, counts, path, size in MB), BM25
    token cache hits and misses, why an unusable file was rebuilt (``""``), the publish's own figures (``publish``:
    ``bm25_blobs``, ``changed_chunks``, …, ``bytes``, ``ms``, ``mode`` full | incremental | unchanged, ``reason``)
    and the step timings (``timings``: ``read_s``, ``graph_s``, ``vectors_s``, ``bm25_s``, ``publish_s``), both in
    the mapping in place of their field, then ``skipped`` and ``seconds``."""

    PATHS: ClassVar[tuple[str, ...]] = ("path",)
    TIMINGS: ClassVar[tuple[str, ...]] = ("read_s", "graph_s", "vectors_s", "bm25_s", "publish_s")

    sources: tuple[str, ...]
    models: tuple[str, ...]
    notes: int
    chunks: int
    vectors: int
    missing_vectors: int
    links: int
    path: str
    size_mb: float
    tokens_cached: int
    tokens_analysed: int
    rebuilt_because: str
    publish: Mapping[str, Any]
    timings: Mapping[str, float]
    #: sources with chunks that have no vector yet, ``"notes 546 of 549, ja-react 3 of 4352"`` (their embeddings
    #: step did not finish: BM25 finds those chunks, the vector lanes do not until the source is built again)
    missing_vectors_in: str = ""
    skipped: bool = False
    seconds: float | None = None

    @property
    def mode(self) -> str:
        return str(self.publish.get("mode", ""))

    def as_dict(self) -> dict[str, Any]:
        return _splice(_splice(super().as_dict(), "publish", self.publish), "timings", self.timings)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **changes: Any) -> Self:
        """From the flat mapping :meth:`as_dict` gave: the keys that are no field are the publish figures and the
        timings."""
        names = {f.name for f in fields(cls)}
        timings = {k: data[k] for k in cls.TIMINGS if k in data}
        publish = {k: v for k, v in data.items() if k not in names and k not in timings}
        return replace(cls(**{**_values(cls, data), "publish": publish, "timings": timings}), **changes)


# ---------------------------------------------------------------- after the warehouse
@dataclass(frozen=True, eq=False)
class SearchIndexResult(StageResult):
    """``search_index_stage``: the published file's counts, its model ids, whether every vector search plan uses
    the HNSW index, the sample query's time (ms) and hits (``"<vault path> > <heading>"``), and the sources whose
    chunks the file holds without a vector (``"<source> <n> of <chunks>, ..."``, the publish's ``missing_vectors_in``;
    "" when every chunk has its vectors)."""

    notes: int
    chunks: int
    links: int
    dangling_links: int
    models: tuple[str, ...]
    hnsw_index_scan: bool
    sample_query_ms: float
    sample_hits: tuple[str, ...]
    missing_vectors_in: str = ""
    skipped: bool = False


@dataclass(frozen=True, eq=False)
class EvalStageResult(StageResult):
    """``eval_stage``: the hybrid set-up's report (``overall``, ``by_source``, ``by_kind``; with scored cases also
    ``lanes``, ``cases``, ``unreachable``, ``scope``, as :class:`pipeline.evaluate.EvalReport`), ``setups`` (set-up
    -> ``{lanes, scope, overall, by_source, by_kind}``), the eval ``files``, the ``history`` file and the rows
    appended to it, the ``hybrid unscoped`` report, the searcher's ``config``, the run's id and time and the
    warehouse's build time. ``None`` (left out): not produced because no case was scored.
    ``skipped_cases``: corpus -> number of cases left out because the corpus is no built source (a typo in
    ``corpus:``, a source renamed or not built yet); ``{}`` when none. ``skipped_meant``: such a corpus -> the
    built source it probably meant (``my_notes`` -> ``my-notes``), for those that have one."""

    overall: Mapping[str, Any]
    by_source: Mapping[str, Any]
    by_kind: Mapping[str, Any]
    setups: Mapping[str, Any]
    files: tuple[str, ...]
    history: str
    history_rows: int
    lanes: tuple[str, ...] | None = None
    cases: tuple[Mapping[str, Any], ...] | None = None
    unreachable: tuple[Mapping[str, Any], ...] | None = None
    scope: str | None = None
    unscoped: Mapping[str, Any] | None = None
    config: Mapping[str, Any] | None = None
    run_id: str | None = None
    run_at: str | None = None
    warehouse_built_at: str | None = None
    ablation: Mapping[str, Any] | None = None
    skipped_cases: Mapping[str, int] | None = None
    skipped_meant: Mapping[str, str] | None = None
    skipped: bool = False


@dataclass
class SourceStatus:
    """One source of a build: ``ok``, else the stage that failed and its one-line error; ``metadata`` each
    per-source stage's metadata (stage -> dict; {} for a stage that did not run)."""

    name: str
    ok: bool = True
    failed_stage: str = ""
    error: str = ""
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KilledRun:
    """A killed run a build found unfinished and finished: ``started`` (ISO 8601 UTC, to the second); for a
    Dagster run other than a ``docsvault build``'s (a killed ``dagster asset materialize``), its ``run_id``
    and the names of the build's sources it had selected (``sources``); a killed build has neither."""

    started: str
    run_id: str = ""
    sources: tuple[str, ...] = ()


@dataclass
class BuildReport:
    """A whole build (``docsvault build``): its sources, the shared stages (``shared_ok``, ``shared_error``,
    ``shared_metadata``: stage -> dict), ``removed`` ("removed vault/<name>/: ..." of sources dropped from
    sources.yaml), ``noop`` (True: nothing had changed, answered without a Dagster run: :mod:`pipeline.stages.noop`),
    ``check_warnings`` (one line per failed asset check of a shared stage, e.g. ``eval_floors``: the check does not
    fail the build, the build says so), ``resumed`` (when each killed build whose Dagster run this build
    found unfinished had started, ISO 8601 UTC: this build finished its work, so a source whose stages it had
    all done skips them now; the killed Dagster runs of other commands among them, a ``dagster asset
    materialize``, are also in ``resumed_runs``)."""

    sources: list[SourceStatus]
    shared_ok: bool
    shared_error: str = ""
    shared_metadata: dict = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    noop: bool = False
    check_warnings: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    resumed_runs: list[KilledRun] = field(default_factory=list)
    #: the notes of the built sources this build added, changed and removed (``{"added", "changed", "removed"}``:
    #: sorted vault paths, compared in the warehouse under the build's lock: :func:`pipeline.warehouse.note_changes`),
    #: when the caller asked (``run_build(note_changes=True)``; else None); empty lists for a no-op build
    #: (:mod:`pipeline.stages.noop`: nothing changed)
    note_changes: dict[str, list[str]] | None = None
    #: the stages this build ran again because another version of docsvault built them last (an upgrade), as
    #: ``"<source>: notes, vault, chunks"`` and, for the shared stages, ``"link_graph, warehouse"`` (their last
    #: materialization's ``dagster/code_version`` differs from this code's); [] when none
    upgraded: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.shared_ok and all(s.ok for s in self.sources)
