"""Retrieval evaluation: eval cases (query -> expected pages) scored on the fused page ranking.

Metrics (binary relevance; a page is relevant when its ``source_path`` is one of the case's ``expected``, or
its vault path is and no page has that source path):
hit@1 / hit@3 (a relevant page in the top 1 / 3), MRR@10 (1 / rank of the first relevant page, 0 beyond 10) and
nDCG@10 (DCG = sum of 1 / log2(rank + 1) over relevant ranks <= 10; ideal DCG over min(len(expected), 10) pages).

Scope: ``scoped`` searches each case within its corpus (``--source``), ``unscoped`` over every source of the
warehouse, as a user searches by default; there a hit must be one of the case's pages *in the case's source* (a page
of another source never counts, even with the same path). :func:`format_scopes` shows both side by side.

Ablation: :func:`run_ablation` scores several lane set-ups on the same cases (by default each lane alone and
``hybrid``, the default fusion); :func:`format_ablation` renders them as one table (text for the CLI, Markdown for
the Dagster asset); :func:`history_rows` flattens a run into the rows of the eval history
(:func:`pipeline.warehouse.append_eval_runs`), :func:`format_history` shows past runs. :func:`check_floors` and
:func:`check_fusion_gain` are the asset checks' logic (pure, so they are tested without Dagster). "Pooled" means
over every scored case of every source (the ``overall`` row).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from difflib import get_close_matches
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import yaml

from pipeline.common.display import char_start, fit, pad
from pipeline.common.errors import EvalFileError, PipelineError
from pipeline.common.yamlload import DuplicateKeyError, safe_load
from pipeline.config import environ as config_environ
from pipeline.models import EvalCase, MappingRecord, plain

__all__ = [
    "DEFAULT_FLOORS",
    "DEPTH",
    "FLOOR_ENV",
    "HYBRID",
    "METRICS",
    "NO_EVAL_RUNS",
    "SCOPES",
    "SCOPE_NOTE",
    "UNSCOPED_SETUP",
    "CheckOutcome",
    "ablation_rows",
    "ablation_setups",
    "best_single_lane",
    "case_files",
    "case_metrics",
    "check_floors",
    "check_fusion_gain",
    "eval_history_path",
    "first_rank",
    "floors_from_env",
    "format_ablation",
    "format_history",
    "format_report",
    "format_scopes",
    "history_rows",
    "hit_at",
    "load_cases",
    "metric_key",
    "ndcg_at",
    "reciprocal_rank",
    "rank_task",
    "rank_tasks",
    "run_ablation",
    "run_eval",
]

DEPTH = 10
METRICS: tuple[str, ...] = ("hit@1", "hit@3", "mrr@10", "ndcg@10")


def metric_key(metric: str) -> str:
    """The key of a metric where it leaves the eval as a name (JSON, history columns, Dagster metadata):
    ``hit@1`` -> ``hit_at_1``, a key a jq path or a column need not quote; other names as they are."""
    return metric.replace("@", "_at_")

SCOPES: tuple[str, ...] = ("scoped", "unscoped")
#: The set-up name of the default fusion searched unscoped, beside the (scoped) ablation set-ups of the eval stage.
UNSCOPED_SETUP = "hybrid unscoped"


class PageRanker(Protocol):
    """What ``run_eval`` needs from a searcher (``pipeline.search.searcher.Searcher`` fits)."""

    sources: list[str]

    def rank_pages(
        self, query: str, source: str | Sequence[str] | None = None, lanes: Sequence[str] | None = ..., depth: int = 10
    ) -> list[tuple[str, str, float]]: ...

    # unscoped runs also need ``note_source(note_id) -> source name`` (``Searcher.note_source``)


# ---------------------------------------------------------------------------------------------------------------
# cases


def case_files(paths: Sequence[Path]) -> list[Path]:
    """The eval files :func:`load_cases` would read of those of ``paths`` that exist (a file as given, a folder's
    ``*.yaml`` / ``*.yml`` but its hidden ones); [] when none exists or its folders hold none."""
    return _case_files([p for p in map(Path, paths) if p.exists()])


def _case_files(paths: Sequence[Path]) -> list[Path]:
    """The eval files of ``paths``: a file as given, a folder's ``*.yaml`` / ``*.yml`` (sorted) but not its hidden
    ones, which are an editor's or a copy's, not the user's cases: Emacs' lock ``.#cases.yaml`` (a dangling
    symlink while the file is edited), macOS' ``._cases.yaml`` (its resource fork, binary, on a USB stick or a
    network share). Before session 45 either one failed the whole eval."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(f for f in [*p.glob("*.yaml"), *p.glob("*.yml")] if not f.name.startswith(".")))
        elif p.is_file():
            files.append(p)
        else:
            raise EvalFileError(f"eval cases not found: {p} (give a .yaml file or a directory of them)")
    return files


#: the keys of one eval case (README "eval"); any other is refused, naming its line
CASE_KEYS: tuple[str, ...] = ("id", "query", "expected", "kind", "corpus")


#: the top-level keys of an eval file
FILE_KEYS: tuple[str, ...] = ("corpus", "cases")


def _root_items(path: Path) -> list[tuple[yaml.ScalarNode, yaml.Node]]:
    """The (key, value) nodes of the top-level mapping of ``path`` with a scalar key; [] when the file cannot be
    composed again or is no mapping."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    if not isinstance(root, yaml.MappingNode):
        return []
    return [(k, v) for k, v in root.value if isinstance(k, yaml.ScalarNode)]


def _top_key_line(path: Path, key: str) -> int | None:
    """The 1-based line of the top-level ``key`` of ``path``; None when unknown."""
    return next((k.start_mark.line + 1 for k, _ in _root_items(path) if k.value == key), None)


def _cases_node(path: Path) -> yaml.SequenceNode | None:
    """The YAML node of the ``cases:`` list of ``path``; None when the file cannot be composed again or has none."""
    return next((v for k, v in _root_items(path) if k.value == "cases" and isinstance(v, yaml.SequenceNode)), None)


def _case_lines(path: Path) -> list[int]:
    """The 1-based line where each item of the ``cases:`` list of ``path`` starts, in order ([] when unknown)."""
    node = _cases_node(path)
    return [item.start_mark.line + 1 for item in node.value] if node is not None else []


def _case_key_line(path: Path, index: int, key: object) -> int | None:
    """The 1-based line of ``key`` in the ``index``-th (1-based) item of the ``cases:`` list of ``path``; None when
    the file cannot be composed again or has no such key."""
    node = _cases_node(path)
    if node is not None and len(node.value) >= index and isinstance(node.value[index - 1], yaml.MappingNode):
        return next((kn.start_mark.line + 1 for kn, _ in node.value[index - 1].value
                     if isinstance(kn, yaml.ScalarNode) and kn.value == str(key)), None)
    return None


def _case_where(path: Path, index: int, name: str) -> Callable[[], str]:
    """``<file>: line N: <name>`` of the ``index``-th (1-based) case of ``path`` (without ``line N`` when the
    file cannot be read again), computed when called: only an error reads the file a second time."""

    def where() -> str:
        lines = _case_lines(path)
        at = f"line {lines[index - 1]}: " if len(lines) >= index else ""
        return f"{path}: {at}{name}"

    return where


def _unknown_key_error(path: Path, index: int, where: str, key: object) -> str:
    """``<file>: line N: case 'x': unknown key 'expectd'; did you mean 'expected'? (allowed: [...])``, as
    sources.yaml's unknown keys."""
    line = _case_key_line(path, index, key)
    if line is not None:
        where = f"{path}: line {line}: {where[len(f'{path}: '):]}"
    close = get_close_matches(str(key), CASE_KEYS, n=1)
    todo = (f"did you mean {close[0]!r}? (allowed: {list(CASE_KEYS)})" if close
            else f"remove it or use an allowed key: {list(CASE_KEYS)}")
    return f"{where}: unknown key {key!r}; {todo}"


def _check_top(path: Path, doc: Any) -> None:
    """Refuse a top-level shape that would lose cases without a word: a case's key at the top level (`kind:` for the
    whole file), a misspelt `cases:`, a `cases:` that is no list, or no `cases:` list at all. Other top-level keys
    stay allowed (`defaults: &d {...}` for `<<: *d` in the cases).

    Raises:
        EvalFileError: naming the file, the line when known, and what to do.
    """
    stray = [k for k in doc if k not in FILE_KEYS and (k in CASE_KEYS or (
        "cases" not in doc and get_close_matches(str(k), ("cases",), n=1)))] if isinstance(doc, dict) else []
    if stray:
        todo = ("set it on each case (a case's keys: " + ", ".join(CASE_KEYS) + ")" if stray[0] in CASE_KEYS
                else "did you mean 'cases'?")
        line = _top_key_line(path, str(stray[0]))
        at = f"line {line}: " if line else ""
        raise EvalFileError(f"{path}: {at}unknown top-level key {stray[0]!r}; {todo} (a file's keys: "
                            f"{', '.join(FILE_KEYS)})")
    if isinstance(doc, dict) and doc.get("cases") is not None and not isinstance(doc["cases"], list):
        line = _top_key_line(path, "cases")
        raise EvalFileError(f"{path}: {f'line {line}: ' if line else ''}`cases` must be a list, got a "
                            f"{type(doc['cases']).__name__}; start each case with '- ' (`- id: ...`)")
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise EvalFileError(f"{path}: expected a mapping with `corpus: <source>` and `cases: [...]`")


def _load_file(path: Path) -> list[EvalCase]:
    try:
        doc = safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalFileError(f"{path}: cannot read eval cases ({exc})") from exc
    except DuplicateKeyError as exc:
        raise EvalFileError(f"{path}: {exc}") from exc
    except yaml.YAMLError as exc:       # the line to fix: where an unclosed quote or bracket opens, not the end
        from pipeline.common.frontmatter import yaml_error_parts

        line, problem, fix = yaml_error_parts(exc, first_line=1)
        raise EvalFileError(f"{path}: invalid YAML at line {line}: {problem}; {fix}") from exc
    if doc is None:
        return []
    _check_top(path, doc)
    corpus = doc.get("corpus")
    if corpus is not None and not isinstance(corpus, str):
        raise EvalFileError(f"{path}: `corpus` must be a source name, got {corpus!r}")
    cases: list[EvalCase] = []
    for i, raw in enumerate(doc["cases"], start=1):
        name = f"case {raw['id']!r}" if isinstance(raw, dict) and raw.get("id") is not None else f"case #{i}"
        where = _case_where(path, i, name)
        if not isinstance(raw, dict):
            raise EvalFileError(f"{where()}: expected a mapping with id, query, expected, got {raw!r}")
        unknown = [key for key in raw if key not in CASE_KEYS]
        if unknown:
            raise EvalFileError(_unknown_key_error(path, i, f"{path}: {name}", unknown[0]))
        case_id, query, expected = raw.get("id"), raw.get("query"), raw.get("expected")
        if not isinstance(case_id, (str, int)) or str(case_id).strip() == "":
            raise EvalFileError(f"{where()}: missing `id`")
        if not isinstance(query, str) or not query.strip():
            raise EvalFileError(f"{where()}: missing or empty `query`")
        if isinstance(expected, str):
            expected = [expected]
        if not isinstance(expected, list) or not expected or not all(isinstance(e, str) and e for e in expected):
            raise EvalFileError(f"{where()}: `expected` must be a non-empty list of source paths, got {expected!r}")
        case_corpus = raw.get("corpus", corpus)
        if not isinstance(case_corpus, str) or not case_corpus:
            raise EvalFileError(f"{where()}: no corpus (set top-level `corpus:` or the case's `corpus:`)")
        kind = raw.get("kind")
        if kind is not None and not (isinstance(kind, str) and kind.strip()):
            raise EvalFileError(f"{where()}: `kind` must be a word that groups cases (paraphrase, task, keyword, "
                                f"...), got {kind!r}; give one kind per case")
        kind = kind or "unknown"
        cases.append(
            EvalCase(
                id=str(case_id), corpus=case_corpus, query=query,
                expected=tuple(dict.fromkeys(unicodedata.normalize("NFC", e) for e in expected)),
                kind=str(kind), file=str(path),
            )
        )
    return cases


def load_cases(paths: Sequence[Path]) -> list[EvalCase]:
    """Read eval cases from YAML files and/or directories of ``*.yaml``.

    File format: ``corpus: <source>`` and ``cases: [{id, query, expected: [source_path, ...], kind}]``; a case may
    override ``corpus``. ``expected`` may be a single string; a page's vault path there is read as its source
    path when the case is run (:func:`run_eval`, which knows the warehouse). Paths are read in NFC, as the
    warehouse keeps them: a path copied from macOS' Finder or typed with its tab completion is NFD.

    Raises:
        EvalFileError: a path is missing, a file is not valid YAML, a case lacks id/query/expected, or two cases
            share an id (the message names file and case).
    """
    out: list[EvalCase] = []
    seen: dict[str, tuple[Path, int]] = {}
    for path in _case_files(paths):
        for i, case in enumerate(_load_file(path), start=1):
            if case.id in seen:
                first, j = seen[case.id]
                lines = _case_lines(first)
                there = f"line {lines[j - 1]} of {first}" if len(lines) >= j else str(first)
                raise EvalFileError(f"{_case_where(path, i, f'case {case.id!r}')()}: this id is also the case at "
                                    f"{there}; ids must be unique: rename one")
            seen[case.id] = (path, i)
            out.append(case)
    return out


# ---------------------------------------------------------------------------------------------------------------
# metrics (pure)


def first_rank(ranked: Sequence[str], expected: Sequence[str]) -> int | None:
    """1-based rank of the first expected item in ``ranked``, None when absent."""
    wanted = set(expected)
    for i, item in enumerate(ranked, start=1):
        if item in wanted:
            return i
    return None


def hit_at(ranked: Sequence[str], expected: Sequence[str], k: int) -> float:
    """1.0 when an expected item is in the top k, else 0.0."""
    rank = first_rank(ranked[:k], expected)
    return 1.0 if rank is not None else 0.0


def reciprocal_rank(ranked: Sequence[str], expected: Sequence[str], k: int = DEPTH) -> float:
    """1 / rank of the first expected item within the top k, 0.0 when none."""
    rank = first_rank(ranked[:k], expected)
    return 1.0 / rank if rank is not None else 0.0


def ndcg_at(ranked: Sequence[str], expected: Sequence[str], k: int = DEPTH) -> float:
    """Binary-relevance nDCG@k; ideal DCG over min(len(set(expected)), k) relevant items. Repeats count once."""
    wanted = set(expected)
    if not wanted:
        return 0.0
    dcg, seen = 0.0, set()
    for i, item in enumerate(ranked[:k], start=1):
        if item in wanted and item not in seen:
            seen.add(item)
            dcg += 1.0 / math.log2(i + 1)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(wanted), k) + 1))
    return dcg / ideal


def case_metrics(ranked: Sequence[str], expected: Sequence[str]) -> dict[str, float]:
    """All metrics of one case: ``{"hit@1", "hit@3", "mrr@10", "ndcg@10"}``."""
    return {
        "hit@1": hit_at(ranked, expected, 1),
        "hit@3": hit_at(ranked, expected, 3),
        "mrr@10": reciprocal_rank(ranked, expected, DEPTH),
        "ndcg@10": ndcg_at(ranked, expected, DEPTH),
    }


def _aggregate(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    n = len(rows)
    out: dict[str, float] = {"n": n}
    for m in METRICS:
        out[m] = round(sum(r[m] for r in rows) / n, 4) if n else 0.0
    return out


# ---------------------------------------------------------------------------------------------------------------
# run


@dataclass(frozen=True, eq=False)
class EvalReport(MappingRecord):
    """One eval run (:func:`run_eval`); reads as the mapping :meth:`as_dict` gives (keys in this order).

    ``overall``, ``by_source[s]``, ``by_kind[k]``: ``{"n", "hit@1", "hit@3", "mrr@10", "ndcg@10"}``; ``cases``:
    ``{"id", "query", "corpus", "kind", "rank", "top", **metrics}`` per scored case; ``skipped``:
    ``{"id", "corpus", "reason"}``; ``unreachable``: ``{"id", "corpus", "expected"}`` and ``"did_you_mean"`` (the
    corpus's pages closest to ``expected``) when there are any, or ``"templates"`` (the source's templates folders
    that hold them, left out on purpose); ``partly_unreachable``: ``{"id", "corpus",
    "missing"}`` (and ``"did_you_mean"``) of a case some of whose expected pages are in the warehouse and some not
    (its nDCG@10 counts the missing ones, so it stays below 1).
    """

    lanes: tuple[str, ...]
    overall: Mapping[str, float]
    by_source: Mapping[str, Mapping[str, float]]
    by_kind: Mapping[str, Mapping[str, float]]
    cases: tuple[Mapping[str, Any], ...]
    skipped: tuple[Mapping[str, str], ...]
    unreachable: tuple[Mapping[str, Any], ...]
    scope: str
    partly_unreachable: tuple[Mapping[str, Any], ...] = ()

    def public(self) -> dict[str, Any]:
        """What ``docsvault eval --json`` prints of it: scope, overall, by_source, by_kind, cases (each scored
        case's ``{"id", "query", "corpus", "kind", "rank", "top", **metrics}``: its rank is what the pooled figures
        are averaged from), and skipped / unreachable / partly_unreachable when there are any."""
        out = {k: plain(getattr(self, k)) for k in ("scope", "overall", "by_source", "by_kind", "cases")}
        for key in ("skipped", "unreachable", "partly_unreachable"):
            if getattr(self, key):
                out[key] = plain(getattr(self, key))
        return out


#: One search of an eval: ``(query, source or None for all sources, lanes or None for the default fusion)``.
RankTask = tuple[str, str | None, tuple[str, ...] | None]
#: A search's fused pages, best first: ``[(note_id, source_path, score)]`` (``Searcher.rank_pages``).
PageRows = Sequence[tuple[str, str, float]]


def rank_task(case: EvalCase, lanes: Sequence[str] | None, scope: str) -> RankTask:
    """The search :func:`run_eval` makes for ``case`` in ``scope``."""
    return (case.query, case.corpus if scope == "scoped" else None, None if lanes is None else tuple(lanes))


def rank_tasks(searcher: PageRanker, cases: Sequence[EvalCase], setups: Mapping[str, Sequence[str] | None],
               scopes: Sequence[str]) -> list[RankTask]:
    """Every distinct search :func:`run_eval` makes for these set-ups (name -> lanes) in these scopes, in the order
    it makes them (cases whose corpus the searcher lacks make none)."""
    known = set(searcher.sources)
    tasks = (rank_task(c, lanes, scope) for scope in scopes for lanes in setups.values() for c in cases
             if c.corpus in known)
    return list(dict.fromkeys(tasks))


def run_eval(searcher: PageRanker, cases: Sequence[EvalCase], lanes: Sequence[str] | None = None,
             scope: str = "scoped", ranked: Mapping[RankTask, PageRows] | None = None,
             templates: Mapping[str, Sequence[str]] | None = None) -> EvalReport:
    """Run every case through ``searcher.rank_pages(query, source=case.corpus, lanes, depth=10)``; ``lanes`` None
    means the searcher's default fusion (``Searcher.default_lanes``). A search found in ``ranked`` (:func:`rank_task`
    -> its rows, e.g. ranked by other processes: :func:`pipeline.stages.eval_rankings`) is read from there instead.

    ``scope="unscoped"`` searches every case over all sources (``source=None``) and counts a page as a hit only
    when it is one of the case's ``expected`` paths in the case's corpus (``searcher.note_source(note_id)``); a
    page of another source is a miss and shows in ``top`` as ``<source>:<path>``.

    An ``expected`` entry that is no source path of the case's corpus but a page's vault path
    (``<corpus>/<path in the vault>``) is that page's source path (when the searcher has
    ``page_vault_paths``).

    Cases whose corpus is not a source of the warehouse are listed under ``"skipped"`` and not scored.

    ``templates`` (corpus -> the templates folders its source leaves out on purpose,
    :func:`pipeline.ingest.fetch.base.left_out_templates`) gives an unreachable row whose expected pages are all in
    such a folder ``"templates": [folder, …]``: no fix of the path finds them.

    Returns:
        An :class:`EvalReport` (as a mapping: ``{"lanes": [...], "overall": {"n", "hit@1", "hit@3", "mrr@10",
        "ndcg@10"}, "by_source": {source: {...}}, "by_kind": {kind: {...}}, "cases": [{"id", "query", "corpus",
        "kind", "rank", "top", **metrics}], "skipped": [{"id", "corpus", "reason", "did_you_mean"?}],
        "unreachable": [{"id", "corpus", "expected", "did_you_mean"?}], "scope": "scoped" | "unscoped"}``);
        ``rank`` is the first expected page's rank (None beyond 10), ``top`` the first 3 source paths;
        ``unreachable`` lists scored cases none of whose expected pages is in the warehouse (only when the searcher
        has ``page_paths(source) -> set of source paths``).

    Raises:
        ValueError: ``scope`` is not one of :data:`SCOPES`.
    """
    if scope not in SCOPES:
        raise ValueError(f"unknown eval scope {scope!r}; one of {', '.join(SCOPES)}")
    known = set(searcher.sources)
    per_case: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    unreachable: list[dict[str, Any]] = []
    partly: list[dict[str, Any]] = []
    page_paths = getattr(searcher, "page_paths", None)
    for case in cases:
        if case.corpus not in known:
            from pipeline.ingest.sources import closest_name

            close = closest_name(case.corpus, sorted(known))         # `my_notes` (the Dagster group) -> my-notes
            skipped.append({"id": case.id, "corpus": case.corpus,
                            "reason": f"source {case.corpus!r} is not in the warehouse",
                            **({"did_you_mean": close} if close else {})})
            continue
        case = _with_source_paths(searcher, case)
        if page_paths is not None and (row := _missing_pages(case, page_paths(case.corpus),
                                                             (templates or {}).get(case.corpus, ()))) is not None:
            # still scored, but named: a typo in the case or a page the build skipped can never be found
            (partly if "missing" in row else unreachable).append(row)
        task = rank_task(case, lanes, scope)
        rows = ranked.get(task) if ranked is not None else None
        if rows is None:
            rows = searcher.rank_pages(task[0], source=task[1], lanes=lanes, depth=DEPTH)
        rows = rows[:DEPTH]
        if scope == "scoped":
            pages: list[Any] = [path for _, path, _ in rows]
            expected: Sequence[Any] = case.expected
            top = pages[:3]
        else:
            pages = [(searcher.note_source(nid), path) for nid, path, _ in rows]  # type: ignore[attr-defined]
            expected = [(case.corpus, e) for e in case.expected]
            top = [path if src == case.corpus else f"{src}:{path}" for src, path in pages[:3]]
        metrics = case_metrics(pages, expected)
        per_case.append({
            "id": case.id, "query": case.query, "corpus": case.corpus, "kind": case.kind,
            "rank": first_rank(pages[:DEPTH], expected), "top": top, **metrics,
        })
    by_source: dict[str, list[dict[str, Any]]] = {}
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in per_case:
        by_source.setdefault(row["corpus"], []).append(row)
        by_kind.setdefault(row["kind"], []).append(row)
    return EvalReport(
        lanes=tuple(lanes if lanes is not None else getattr(searcher, "default_lanes", ())),
        overall=_aggregate(per_case),
        by_source={k: _aggregate(v) for k, v in sorted(by_source.items())},
        by_kind={k: _aggregate(v) for k, v in sorted(by_kind.items())},
        cases=tuple(per_case),
        skipped=tuple(skipped),
        unreachable=tuple(unreachable),
        scope=scope,
        partly_unreachable=tuple(partly),
    )


def _missing_pages(case: EvalCase, paths: Collection[str], templates: Sequence[str] = ()) -> dict[str, Any] | None:
    """The row naming ``case``'s expected pages that are not among its corpus's pages ``paths``: ``{"id",
    "corpus", "expected"}`` when none is there (an ``unreachable`` case: a miss), ``{"id", "corpus", "missing"}``
    when some are (``partly_unreachable``), each with ``did_you_mean`` when a page is close, or with
    ``"templates"`` (the folders of ``templates``, the source's left-out templates folders, that hold them) when
    every missing page is in one; None when all are."""
    missing = [e for e in case.expected if e not in paths]
    if not missing:
        return None
    key = "expected" if len(missing) == len(case.expected) else "missing"
    row: dict[str, Any] = {"id": case.id, "corpus": case.corpus, key: missing}
    held = [next((t for t in templates if e.startswith(f"{t}/")), None) for e in missing]
    if held and all(held):
        row["templates"] = list(dict.fromkeys(t for t in held if t))
    elif hint := _nearest_pages(missing, paths, case.corpus):
        row["did_you_mean"] = hint
    return row


def _with_source_paths(searcher: PageRanker, case: EvalCase) -> EvalCase:
    """``case`` with each ``expected`` entry that is no source path of its corpus but the vault path of one of
    its pages (``<corpus>/<path in the vault>``, as search prints it) replaced by that page's source path; a
    source path wins when an entry is both. Unchanged when the searcher lacks ``page_paths`` /
    ``page_vault_paths`` (:class:`pipeline.search.searcher.Searcher` has both) or no entry is such a vault
    path."""
    page_paths = getattr(searcher, "page_paths", None)
    vault_paths = getattr(searcher, "page_vault_paths", None)
    if page_paths is None or vault_paths is None:
        return case
    own = page_paths(case.corpus)
    if all(e in own for e in case.expected):
        return case
    by_vault = vault_paths(case.corpus)
    expected = tuple(dict.fromkeys(e if e in own else by_vault.get(e, e) for e in case.expected))
    return case if expected == case.expected else replace(case, expected=expected)


def _miss_lines(report: Mapping[str, Any], label: str) -> list[str]:
    """The report's cases not in the top 3: a blank line, ``label (n):``, then two lines per case (rank, query;
    its top pages); [] when there is none."""
    misses = [c for c in report["cases"] if c["rank"] is None or c["rank"] > 3]
    if not misses:
        return []
    lines = ["", f"{label} ({len(misses)}):"]
    for c in misses:
        rank = "-" if c["rank"] is None else str(c["rank"])
        lines.append(f"  {pad(c['id'], 22)} rank {rank:>2}  {c['query'][:char_start(c['query'], 60)]}")
        lines.append(f"  {'':<22} top: {' | '.join(c['top'])}")
    return lines


def format_report(report: dict[str, Any], show_misses: bool = True) -> str:
    """A plain-text table of a :func:`run_eval` report (overall, per source, per kind, misses, skipped)."""
    header = f"{'':<24}{'n':>5}" + "".join(f"{m:>10}" for m in METRICS)
    lines = [f"lanes: {', '.join(report.get('lanes', []))}"]
    if report.get("scope") == "unscoped":
        lines.append(SCOPE_NOTE["unscoped"])
    lines += [header, "-" * len(header)]

    def row(name: str, agg: dict[str, float]) -> str:
        return f"{fit(name, 24)}{int(agg['n']):>5}" + "".join(f"{agg[m]:>10.3f}" for m in METRICS)

    lines.append(row("overall", report["overall"]))
    if report["by_source"]:
        lines.append("")
        lines.extend(row(name, agg) for name, agg in report["by_source"].items())
    if report["by_kind"]:
        lines.append("")
        lines.extend(row(f"kind: {name}", agg) for name, agg in report["by_kind"].items())
    if show_misses:
        lines.extend(_miss_lines(report, "not in top 3"))
    lines.extend(format_unreachable(report))
    lines.extend(format_skipped(report))
    return "\n".join(lines)


SCOPE_NOTE: dict[str, str] = {
    "scoped": "scoped: each case searched within its own source (as `search --source <corpus>`)",
    "unscoped": "unscoped: each case searched over all sources (as `search` by default); "
                "a page of another source is a miss",
}


def format_scopes(reports: Mapping[str, Mapping[str, Any]], show_misses: bool = True) -> str:
    """Scoped and unscoped reports of the same cases side by side: per group (overall, per source, per kind) ``n``
    and each metric as a ``scoped`` and an ``unscoped`` column (``s`` / ``u``), then each scope's misses.

    Args:
        reports: ``{"scoped": report, "unscoped": report}`` as :func:`run_eval` returns them.
    """
    s_rep, u_rep = reports["scoped"], reports["unscoped"]
    cols = [(m, sc) for m in METRICS for sc in ("s", "u")]
    header = f"{'':<24}{'n':>5}" + "".join(f"{f'{m} {sc}':>11}" for m, sc in cols)
    lines = [f"lanes: {', '.join(s_rep.get('lanes', []))}",
             f"s = {SCOPE_NOTE['scoped']}", f"u = {SCOPE_NOTE['unscoped']}", header, "-" * len(header)]

    def row(name: str, s_agg: Mapping[str, float] | None, u_agg: Mapping[str, float] | None) -> str:
        n = int((s_agg or u_agg or {"n": 0})["n"])
        cells = []
        for m, sc in cols:
            agg = s_agg if sc == "s" else u_agg
            cells.append(f"{agg[m]:>11.3f}" if agg else f"{'-':>11}")
        return f"{fit(name, 24)}{n:>5}" + "".join(cells)

    lines.append(row("overall", s_rep["overall"], u_rep["overall"]))
    for key, prefix in (("by_source", ""), ("by_kind", "kind: ")):
        names = list(dict.fromkeys([*s_rep.get(key, {}), *u_rep.get(key, {})]))
        if names:
            lines.append("")
            lines.extend(row(f"{prefix}{name}", s_rep[key].get(name), u_rep[key].get(name)) for name in names)
    if show_misses:
        for scope, rep in (("scoped", s_rep), ("unscoped", u_rep)):
            lines.extend(_miss_lines(rep, f"not in top 3, {scope}"))
    lines.extend(format_unreachable(s_rep))
    lines.extend(format_skipped(s_rep))
    return "\n".join(lines)


def format_skipped(report: Mapping[str, Any]) -> list[str]:
    """Lines naming the corpora whose cases were not scored because they are not a source of the warehouse, one
    line per corpus with its count of cases and the built source it probably meant (a row's ``did_you_mean``:
    ``my_notes  1 case(s) (did you mean 'my-notes'?)``), [] when none."""
    rows = report.get("skipped") or []
    if not rows:
        return []
    per_corpus: dict[str, int] = {}
    meant: dict[str, str] = {}
    for r in rows:
        per_corpus[r["corpus"]] = per_corpus.get(r["corpus"], 0) + 1
        if r.get("did_you_mean"):
            meant[r["corpus"]] = r["did_you_mean"]
    lines = ["", (f"skipped ({len(rows)} case(s), source not in the warehouse: a typo in `corpus:`, or a source "
                  "not built):")]
    lines.extend(f"  {corpus:<22} {n} case(s)" + (f" (did you mean {meant[corpus]!r}?)" if corpus in meant else "")
                 for corpus, n in sorted(per_corpus.items()))
    return lines


def _nearest_pages(expected: Sequence[str], paths: Collection[str], corpus: str = "") -> list[str]:
    """For an eval case whose ``expected`` pages are none of the corpus's ``paths`` (source paths): the pages it
    probably meant, one per expected entry that has one: the same path in another case or Unicode form, also
    written as a vault path (``ducks.md``, ``tiny/ducks.md`` -> ``Ducks.md``), or as a built site's page URL or
    site path (``https://neuml.github.io/txtai/why/``, ``why/`` -> ``why/index.html``), else the closest path by
    :func:`difflib.get_close_matches` (ratio >= 0.8: ``Duck.md`` -> ``Ducks.md``). [] when nothing is close."""
    import difflib
    import unicodedata

    def key(p: str) -> str:
        return unicodedata.normalize("NFC", p).casefold()

    ordered = sorted(paths)
    by_key = {key(p): p for p in ordered}
    prefix = key(f"{corpus}/") if corpus else ""
    out: list[str] = []
    for want in expected:
        k = key(want)
        k = k[len(prefix):] if prefix and k.startswith(prefix) and k[len(prefix):] else k
        near = by_key.get(k) or _named_page(k, by_key) or _page_at_url(k, by_key) or next(
            iter(difflib.get_close_matches(want, ordered, n=1, cutoff=0.8)), None)
        if near and near not in out:
            out.append(near)
    return out


def _page_at_url(k: str, by_key: Mapping[str, str]) -> str | None:
    """The page of a built site (``x/index.html``, ``x.html``, ``x/index.md``, ``x.md``) that an expected entry
    written as its URL or site path names (``k`` case-folded; ``https://neuml.github.io/txtai/why/`` or ``why/``
    for ``why/index.html``; leading folders of the URL such as a project's ``txtai/`` may be dropped, the page's
    own folders not); None when it names none."""
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(k)
    except ValueError:
        return None
    if parts.scheme in ("http", "https"):
        path = parts.path
    elif not parts.scheme and k.endswith("/"):
        path = k
    else:
        return None
    segments = [s for s in unquote(path).split("/") if s]
    for i in range(len(segments) + 1 if not segments else len(segments)):
        rest = "/".join(segments[i:])
        for name in ((f"{rest}/index.html", f"{rest}.html", f"{rest}/index.md", f"{rest}.md") if rest
                     else ("index.html", "index.md")):
            if name in by_key:
                return by_key[name]
    return None


def _named_page(k: str, by_key: Mapping[str, str]) -> str | None:
    """The page an expected entry written as a note's name names (``k`` case-folded): a link as a note writes it
    (``[[週次レビュー#Steps|review]]``), or a name without ``.md`` or its folders, as Obsidian resolves a link (the
    path itself, else the shortest path ending in ``/<name>.md``); None when it names none."""
    name = k.strip()
    if name.startswith("[[") and name.endswith("]]"):
        name = name[2:-2]
    name = name.split("|", 1)[0].split("#", 1)[0].strip().strip("/")
    from pipeline.common.markdown import shortest_named

    return shortest_named(by_key, list(dict.fromkeys([name, f"{name}.md"]))) if name else None


def format_unreachable(report: Mapping[str, Any]) -> list[str]:
    """Lines naming the cases whose expected pages are not in the warehouse, then those some of whose expected
    pages are not ([] when none)."""
    lines: list[str] = []
    unreachable = report.get("unreachable") or []
    for rows, field, title in (
            ([r for r in unreachable if not r.get("templates")], "expected",
             ("expected page not in the warehouse ({n}; scored as misses: fix the path in the case, or see the "
              "source's skipped files in `docsvault status`):")),
            ([r for r in unreachable if r.get("templates")], "expected",
             ("expected page in a templates folder ({n}; scored as misses: a `format: obsidian` source leaves its "
              "vault's templates folder out on purpose, a template is no note to search: expect a note instead, "
              "or name the folder in the source's `include` to search it, e.g. include: "
              "[\"{folder}/**\", \"**/*.md\"]):")),
            (report.get("partly_unreachable") or [], "missing",
             ("expected page partly not in the warehouse ({n}; nDCG@10 counts it, so it stays below 1: fix the "
              "path or drop it):"))):
        if rows:
            lines += ["", title.format(n=len(rows), folder=(rows[0].get("templates") or [""])[0])]
        for r in rows:
            hint = (f" (did you mean {' | '.join(r['did_you_mean'])}?)" if r.get("did_you_mean")
                    else f" (in {', '.join(repr(f'{t}/') for t in r['templates'])}, the vault's templates folder, "
                         "left out on purpose)" if r.get("templates") else "")
            lines.append(f"  {pad(r['id'], 22)} {r['corpus']}: {' | '.join(r[field])}{hint}")
    return lines


# ---------------------------------------------------------------------------------------------------------------
# ablation: several lane set-ups on the same cases

HYBRID = "hybrid"


def ablation_setups(graph: bool = True, lanes: Sequence[str] | None = None) -> dict[str, list[str]]:
    """The set-ups the eval asset compares: each lane of the default fusion alone, then ``hybrid`` (that fusion).

    Args:
        graph: include the graph lane alone (only meaningful when the warehouse has resolved links).
        lanes: the fused lanes (a searcher's ``default_lanes``: without ``crosslingual`` when the warehouse has no
            cross-lingual model); None: ``pipeline.search.searcher.DEFAULT_LANES``.

    Returns:
        ``{"bm25": ["bm25"], "bm25_page": ["bm25_page"], "vector": ["vector"], ("crosslingual": [...],)
        ("graph": ["graph"],) "hybrid": [lanes]}``, in that order.
    """
    from pipeline.search.searcher import DEFAULT_LANES

    fused = list(DEFAULT_LANES if lanes is None else lanes)
    setups: dict[str, list[str]] = {lane: [lane] for lane in fused}
    if graph:
        setups["graph"] = ["graph"]
    setups[HYBRID] = fused
    return setups


def run_ablation(searcher: PageRanker, cases: Sequence[EvalCase], setups: Mapping[str, Sequence[str]],
                 scope: str = "scoped", ranked: Mapping[RankTask, PageRows] | None = None,
                 templates: Mapping[str, Sequence[str]] | None = None) -> dict[str, dict[str, Any]]:
    """One :func:`run_eval` report per set-up (``name -> lanes``), in the order of ``setups``, all in ``scope``
    (``templates``: as :func:`run_eval` reads it)."""
    return {name: run_eval(searcher, cases, lanes=lanes, scope=scope, ranked=ranked, templates=templates)
            for name, lanes in setups.items()}


def _groups(report: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, float]]]:
    """(group kind, group, aggregate): overall, then each source, then each kind."""
    out: list[tuple[str, str, Mapping[str, float]]] = [("overall", "overall", report["overall"])]
    out += [("source", name, agg) for name, agg in report.get("by_source", {}).items()]
    out += [("kind", name, agg) for name, agg in report.get("by_kind", {}).items()]
    return out


def ablation_rows(reports: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str, Mapping[str, float]]]:
    """``(group kind, group, set-up, aggregate)`` rows, group by group (overall, sources, kinds in the order of the
    first report that has them), the set-ups in the order of ``reports`` within a group; a set-up without a group
    (no case of it scored) is left out of that group."""
    groups = {setup: {(gk, name): agg for gk, name, agg in _groups(report)} for setup, report in reports.items()}
    order: dict[tuple[str, str], None] = {}
    for by_group in groups.values():
        order.update(dict.fromkeys(by_group))
    rows = []
    for gk, name in order:
        for setup, by_group in groups.items():
            if (gk, name) in by_group:
                rows.append((gk, name, setup, by_group[(gk, name)]))
    return rows


def best_single_lane(reports: Mapping[str, Mapping[str, Any]], metric: str = "mrr@10", scope: str = "scoped"
                     ) -> tuple[str, float] | None:
    """The single-lane set-up (``lanes`` of length 1) of ``scope`` (a report without ``scope`` is scoped) with the
    best pooled ``metric``; first one wins a tie. None when no such set-up scored a case."""
    best: tuple[str, float] | None = None
    for name, report in reports.items():
        if len(report.get("lanes", ())) != 1 or not report["overall"].get("n") or _scope(report) != scope:
            continue
        value = float(report["overall"][metric])
        if best is None or value > best[1]:
            best = (name, value)
    return best


def _scope(report: Mapping[str, Any]) -> str:
    return str(report.get("scope") or "scoped")


def _fusion_lines(reports: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each fused set-up against the best single lane of the same scope."""
    lines = []
    for scope in SCOPES:
        best = best_single_lane(reports, scope=scope)
        if best is None:
            continue
        for name, report in reports.items():
            if len(report.get("lanes", ())) > 1 and report["overall"].get("n") and _scope(report) == scope:
                mrr = float(report["overall"]["mrr@10"])
                lines.append(f"pooled MRR@10: {name} {mrr:.3f} vs best single lane {best[0]} {best[1]:.3f} "
                             f"({mrr - best[1]:+.3f})")
    return lines


def format_ablation(reports: Mapping[str, Mapping[str, Any]], markdown: bool = False) -> str:
    """The ablation table of :func:`run_ablation` reports: one row per group and set-up (see :func:`ablation_rows`),
    then one line per fused set-up comparing its pooled MRR@10 with the best single lane.

    Args:
        reports: set-up name -> report (``lanes``, ``overall``, ``by_source``, ``by_kind``).
        markdown: a Markdown table (the Dagster asset's metadata) instead of fixed-width text (the CLI).
    """
    header = ["group", "setup", "n", *METRICS]
    cells: list[list[str]] = []
    prev = None
    for gk, name, setup, agg in ablation_rows(reports):
        label = name if gk == "overall" else f"{gk}: {name}"
        shown = label if (markdown or label != prev) else ""
        prev = label
        cells.append([shown, setup, str(int(agg["n"])), *(f"{agg[m]:.3f}" for m in METRICS)])
    summary = _fusion_lines(reports)
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
        return "\n".join(lines + ([""] + summary if summary else []))
    setup_w = max([14, *(len(name) + 1 for name in reports)])
    widths = (24, setup_w, 5, *(10,) * len(METRICS))

    def line(row: Sequence[str]) -> str:
        first, setup, *nums = row
        return (f"{fit(first, 23)} {fit(setup, setup_w - 1)} "
                + "".join(f"{v:>{w}}" for v, w in zip(nums, widths[2:])))

    lines = [line(header), "-" * sum(widths)]
    lines += [line(row) for row in cells]
    return "\n".join(lines + ([""] + summary if summary else []))


# ---------------------------------------------------------------------------------------------------------------
# history


def eval_history_path(data_dir: Path) -> Path:
    """``<data>/eval_runs.duckdb``: the eval history (every run's rows), kept apart from the warehouse file."""
    return Path(data_dir) / "eval_runs.duckdb"


def history_rows(reports: Mapping[str, Mapping[str, Any]], *, run_id: str, run_at: str, built_at: str = "",
                 warehouse_key: str = "", cases_key: str = "", config: Mapping[str, Any] | None = None
                 ) -> list[dict[str, Any]]:
    """The rows one eval run appends to the history: one per set-up and group (overall / source / kind).

    Args:
        reports: set-up name -> report, as :func:`run_ablation` returns.
        run_id: identifies the run (every row of a run shares it).
        run_at: when the run happened (ISO-8601 UTC).
        built_at: the warehouse's ``built_at`` (which build was evaluated).
        warehouse_key: the warehouse's input key.
        cases_key: a digest of the eval files (changes when the cases change).
        config: ``{"k_rrf": float, "weights": {lane: float}, "models": [model id]}`` of the searcher.

    Returns:
        Dicts with the columns of :data:`pipeline.warehouse.EVAL_RUN_COLUMNS` (``weights`` as JSON text,
        ``models`` comma-separated, ``lanes`` '+'-joined).
    """
    import json

    config = dict(config or {})
    weights = json.dumps(config.get("weights") or {}, sort_keys=True)
    models = ",".join(config.get("models") or [])
    k_rrf = config.get("k_rrf")
    rows = []
    for gk, name, setup, agg in ablation_rows(reports):
        rows.append({
            "run_id": run_id, "run_at": run_at, "warehouse_built_at": built_at, "warehouse_key": warehouse_key,
            "cases_key": cases_key, "setup": setup, "lanes": "+".join(reports[setup].get("lanes", ())),
            "group_kind": gk, "group_name": name, "n": int(agg["n"]),
            **{metric_key(m): float(agg[m]) for m in METRICS},
            "k_rrf": float(k_rrf) if k_rrf is not None else None, "weights": weights, "models": models,
        })
    return rows


#: what ``eval --history`` says when no run is recorded (exit 1: nothing found)
NO_EVAL_RUNS = ("no eval has run in this data dir: `docsvault build` scores your eval cases and records the run "
                "(the retrieval_eval asset records one per build that changes the warehouse; a capture's build and "
                "`build --no-eval` leave it out)")


def format_history(rows: Sequence[Mapping[str, Any]], metric: str = "mrr@10") -> str:
    """Past runs, oldest first, one line each: run time, warehouse built_at, pooled n, then the pooled ``metric``
    of every set-up seen in ``rows`` (``-`` when a run lacks it). ``rows`` as :func:`history_rows` makes them."""
    col = metric_key(metric)
    runs: dict[str, dict[str, Any]] = {}
    setups: dict[str, None] = {}
    for r in rows:
        if r["group_kind"] != "overall":
            continue
        run = runs.setdefault(r["run_id"], {"run_at": r["run_at"], "built_at": r["warehouse_built_at"] or "",
                                            "n": r["n"], "cases": r.get("cases_key"), "values": {}})
        run["values"][r["setup"]] = r[col]
        setups.setdefault(r["setup"], None)
    if not runs:
        return NO_EVAL_RUNS
    width = {s: max(14, len(s) + 1) for s in setups}
    head = f"{'run at (UTC)':<27}{'warehouse built at':<27}{'n':>5}" + "".join(f"{s:>{width[s]}}" for s in setups)
    lines = [f"pooled {metric} per set-up", head, "-" * len(head)]
    before, marked = None, False
    for run in runs.values():
        vals = "".join(f"{run['values'][s]:>{width[s]}.3f}" if s in run["values"] else f"{'-':>{width[s]}}"
                       for s in setups)
        cases = (run["cases"], int(run["n"]))
        mark = "  *" if before is not None and cases != before else ""
        marked, before = marked or bool(mark), cases
        lines.append(f"{run['run_at'][:26]:<27}{run['built_at'][:26]:<27}{int(run['n']):>5}" + vals + mark)
    if marked:      # a source renamed or removed leaves its cases out: n falls, the figures move without a change
        lines.append("* other cases than the run above (eval files changed, or cases left out or back: a source "
                     "renamed, removed or added): its figures are not comparable with the rows above it")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# checks (the logic of the retrieval_eval asset checks)

#: Floors of the hybrid set-up's pooled metrics: about 0.1 under the measured 0.807 MRR@10 / 0.897 hit@3 of the
#: public eval set (README), so they catch a regression, not noise.
DEFAULT_FLOORS: dict[str, float] = {"mrr@10": 0.70, "hit@3": 0.80}
FLOOR_ENV: dict[str, str] = {"mrr@10": "DOCSVAULT_EVAL_MIN_MRR", "hit@3": "DOCSVAULT_EVAL_MIN_HIT3"}


class CheckOutcome(NamedTuple):
    """Result of an eval check: ``passed``, and metadata to show (numbers, or a ``note`` when nothing was checked)."""

    passed: bool
    metadata: dict[str, Any]


def floors_from_env(environ: Mapping[str, str] | None = None) -> dict[str, float]:
    """The floors: :data:`DEFAULT_FLOORS`, each overridden by its :data:`FLOOR_ENV` variable (a number in [0, 1]).

    Raises:
        PipelineError: a variable is not a number in [0, 1] (the message names it).
    """
    env = config_environ() if environ is None else environ
    floors = dict(DEFAULT_FLOORS)
    for metric, var in FLOOR_ENV.items():
        raw = env.get(var)
        if raw is None or not raw.strip():
            continue
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not 0.0 <= value <= 1.0:
            raise PipelineError(f"{var}={raw!r}: the {metric} floor must be a number between 0 and 1")
        floors[metric] = value
    return floors


def _nothing_to_check(report: Mapping[str, Any] | None) -> CheckOutcome | None:
    if not report or not report.get("overall", {}).get("n"):
        files = ", ".join((report or {}).get("files") or []) or "none found"
        return CheckOutcome(True, {"note": "no eval case of a built source was scored, nothing to check "
                                           f"(eval files: {files}; set DOCSVAULT_EVALS)"})
    return None


def check_floors(report: Mapping[str, Any] | None, floors: Mapping[str, float]) -> CheckOutcome:
    """Pooled metrics of ``report`` (the hybrid set-up's) at or above every floor. Passes with a ``note`` when no
    case was scored (no eval files, or none for a built source)."""
    empty = _nothing_to_check(report)
    if empty is not None:
        return empty
    overall = report["overall"]  # type: ignore[index]
    below = [m for m, floor in floors.items() if float(overall[m]) < floor]
    meta: dict[str, Any] = {"n": int(overall["n"])}
    for m, floor in floors.items():
        meta[metric_key(m)] = float(overall[m])
        meta[f"floor_{m.replace('@', '_at_')}"] = float(floor)
    if below:
        meta["below"] = ", ".join(f"{m} {float(overall[m]):.3f} < {floors[m]:.3f}" for m in below)
    return CheckOutcome(not below, meta)


#: significance level of :func:`check_fusion_gain`'s paired sign test
FUSION_SIGN_TEST_P = 0.05


def check_fusion_gain(report: Mapping[str, Any] | None, metric: str = "mrr@10") -> CheckOutcome:
    """The hybrid set-up's pooled ``metric`` at or above the best single lane's (a tie passes), or behind it by no
    more than chance: it fails only when the lane wins clearly more cases than the hybrid set-up, per a one-sided
    paired sign test at ``FUSION_SIGN_TEST_P`` (cases where the two score the same are left out). With 8 cases, the
    lane must win 7 of 8 differing ones. ``report`` holds ``setups`` (name -> report), as the eval stage returns;
    without per-case figures (a carried report) the pooled comparison alone decides. Passes with a ``note`` when
    nothing was scored or no single lane ran."""
    empty = _nothing_to_check(report)
    if empty is not None:
        return empty
    setups = report.get("setups") or {}  # type: ignore[union-attr]
    best = best_single_lane(setups, metric)
    if HYBRID not in setups or best is None:
        return CheckOutcome(True, {"note": "no hybrid and single-lane set-ups to compare"})
    hybrid = float(setups[HYBRID]["overall"][metric])
    key = metric_key(metric)
    meta: dict[str, Any] = {f"hybrid_{key}": hybrid, "best_single_lane": best[0], f"best_single_lane_{key}": best[1],
                            "gain": round(hybrid - best[1], 4)}
    if hybrid >= best[1]:
        return CheckOutcome(True, meta)
    paired = _paired_wins(setups[HYBRID], setups[best[0]], metric)
    if paired is None:
        return CheckOutcome(False, meta)
    hybrid_wins, lane_wins = paired
    p = sign_test_p(lane_wins, hybrid_wins + lane_wins)
    meta.update(cases_hybrid_better=hybrid_wins, cases_lane_better=lane_wins, sign_test_p=round(p, 4))
    if p >= FUSION_SIGN_TEST_P:
        meta["note"] = (f"behind {best[0]} by {best[1] - hybrid:.4f} {metric}, within chance: {best[0]} is better on "
                        f"{lane_wins} case(s), hybrid on {hybrid_wins} (sign test p={p:.3f})")
        return CheckOutcome(True, meta)
    return CheckOutcome(False, meta)


def _paired_wins(hybrid: Mapping[str, Any], lane: Mapping[str, Any], metric: str) -> tuple[int, int] | None:
    """(cases where ``hybrid`` scores higher on ``metric``, cases where ``lane`` does), over the cases both scored;
    None when either report lacks per-case figures."""
    a = {c["id"]: c.get(metric) for c in hybrid.get("cases") or () if "id" in c}
    b = {c["id"]: c.get(metric) for c in lane.get("cases") or () if "id" in c}
    common = [i for i in a if i in b and a[i] is not None and b[i] is not None]
    if not common:
        return None
    return (sum(1 for i in common if a[i] > b[i] + 1e-12), sum(1 for i in common if b[i] > a[i] + 1e-12))


def sign_test_p(wins: int, n: int) -> float:
    """One-sided sign test: P(X >= wins) for X ~ Binomial(n, 1/2); 1.0 when n is 0."""
    if n <= 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2 ** n


