"""BM25 (Lucene variant) over pre-tokenized chunks, serializable to blobs so the index lives in the warehouse file.

Tokens come from ``pipeline.index.analysis.Analyzer`` (the same analyzer for documents and queries). The index is built
once per warehouse build and loaded once per searcher; queries only do sparse lookups (never a rebuild). Building and
scoring are numpy over one precomputed score matrix, with the float operations of bm25s 0.2 (which built and scored
the index before; ``tests/test_search_startup.py`` compares both bit for bit, bm25s being a test dependency only).
"""

from __future__ import annotations

import io
import json
import logging
import marshal
import math
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np

from pipeline.common.errors import WarehouseCorruptError
from pipeline.index.analysis import Analyzer, field_text
from pipeline.models import Chunk, Note

log = logging.getLogger(__name__)

__all__ = ["PAGE_PREFIX", "Bm25Index", "build_chunk_index", "build_page_index", "chunk_token_lists", "page_token_lists",
           "split_blobs"]

_ARRAYS = ("data", "indices", "indptr")
#: Blob-name prefix of the page-level index (``bm25_page`` lane) beside the chunk-level one in ``bm25_index``.
PAGE_PREFIX = "page."


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def _from_npy(blob: bytes) -> np.ndarray:
    return np.load(io.BytesIO(blob), allow_pickle=False)


def _pack(data: bytes) -> bytes:
    """zlib (level 1: ~2x smaller, ~40 ms to unpack the whole index of 30k chunks)."""
    return zlib.compress(data, 1)


def _unpack(blob: bytes) -> bytes:
    """A blob of :meth:`Bm25Index.to_blobs`: zlib data (first byte 0x78), or raw bytes as written before (``.npy``
    starts with 0x93, JSON with ``{``/``[``)."""
    blob = bytes(blob)
    return zlib.decompress(blob) if blob[:1] == b"\x78" else blob


class Bm25Index:
    """A BM25 (Lucene variant) index over documents identified by string ids.

    Scores are BM25 sums over query tokens (higher is better; a document sharing no token scores 0 and is never
    returned). Build with :meth:`build`, persist with :meth:`to_blobs` / :meth:`from_blobs`.

    Held as a precomputed score matrix in CSC form (as bm25s holds it), one column per vocabulary token: ``data`` float32 (nnz,)
    scores, ``indices`` int (nnz,) document positions, ``indptr`` (vocab + 1,) column starts.
    """

    def __init__(self, arrays: Mapping[str, np.ndarray], vocab: dict[str, int], params: Mapping[str, Any],
                 doc_ids: Sequence[str]) -> None:
        self._data = arrays["data"]
        self._indices = arrays["indices"]
        self._indptr = arrays["indptr"]
        self._params = {"k1": params["k1"], "b": params["b"], "method": params["method"]}   # as written
        self.doc_ids: list[str] = list(doc_ids)
        self._vocab: dict[str, int] = vocab

    def __len__(self) -> int:
        return len(self.doc_ids)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @classmethod
    def build(
        cls, doc_ids: Sequence[str], token_lists: Sequence[list[str]], k1: float = 1.5, b: float = 0.75
    ) -> Bm25Index:
        """Index documents given as token lists.

        Args:
            doc_ids: one id per document (chunk ids), unique.
            token_lists: the documents' BM25 terms, same order as ``doc_ids`` (an empty list is allowed).
            k1: term-frequency saturation.
            b: length normalisation (0 none, 1 full).

        Raises:
            ValueError: lengths differ or ids repeat.
        """
        if len(doc_ids) != len(token_lists):
            raise ValueError(f"{len(doc_ids)} doc ids but {len(token_lists)} token lists")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("doc ids must be unique")
        arrays, vocab = _score_matrix(token_lists, k1, b)
        return cls(arrays, vocab, {"k1": k1, "b": b, "method": "lucene"}, doc_ids)

    def _term_ids(self, query_tokens: Sequence[str], weights: Sequence[float] | None
                  ) -> list[tuple[int, float]]:
        """(term id, weight) of each query token the index knows, in query order (weight 1.0 without ``weights``)."""
        if weights is None:
            return [(self._vocab[t], 1.0) for t in query_tokens if t and t in self._vocab]
        if len(weights) != len(query_tokens):
            raise ValueError(f"{len(weights)} weights for {len(query_tokens)} query tokens")
        return [(self._vocab[t], float(w)) for t, w in zip(query_tokens, weights) if t and t in self._vocab]

    def contains(self, token: str, scope: np.ndarray | None = None) -> bool:
        """True when some document (of ``scope``, bool (n_docs,); None: any) has the analysed term ``token``."""
        tid = self._vocab.get(token)
        if tid is None:
            return False
        start, end = int(self._indptr[tid]), int(self._indptr[tid + 1])
        return end > start if scope is None else bool(scope[self._indices[start:end]].any())

    def terms(self) -> Iterable[str]:
        """Every analysed term of the vocabulary (insertion order)."""
        return self._vocab.keys()

    def docs_with(self, token: str, scope: np.ndarray | None = None) -> np.ndarray:
        """Positions (int, index order) of the documents (of ``scope``, bool (n_docs,); None: any) that have the
        analysed term ``token``; empty when none has it."""
        tid = self._vocab.get(token)
        if tid is None:
            return np.zeros(0, dtype=np.int64)
        docs = self._indices[int(self._indptr[tid]):int(self._indptr[tid + 1])]
        return docs if scope is None else docs[scope[docs]]

    def docs_with_all(self, tokens: Sequence[str]) -> list[str]:
        """Ids of the documents that have every analysed term of ``tokens`` (index order; [] when ``tokens`` is
        empty or a term is unknown): the terms' posting lists intersected in numpy."""
        hits: np.ndarray | None = None
        for token in dict.fromkeys(tokens):
            tid = self._vocab.get(token)
            if tid is None:
                return []
            docs = self._indices[int(self._indptr[tid]):int(self._indptr[tid + 1])]
            hits = docs if hits is None else np.intersect1d(hits, docs, assume_unique=True)
            if not len(hits):
                return []
        if hits is None:
            return []
        ids = self.doc_ids
        return [ids[i] for i in np.sort(hits).tolist()]

    def scores_in_scope(self, query_tokens: Sequence[str], scope: np.ndarray,
                        weights: Sequence[float] | None = None) -> np.ndarray:
        """BM25 scores as if the index held only the documents of ``scope`` (bool (n_docs,)) for the IDF: each query
        term's column is scaled by ``idf(df_scope, n_scope) / idf(df, n)`` (Lucene idf, df counted in the scope);
        documents outside the scope score 0. Length normalisation keeps the whole index's average length (the stored
        scores do not keep tf apart from it). ``weights``: one per query token (as :meth:`scores`). float32
        (n_docs,)."""
        ids = self._term_ids(query_tokens, weights)
        scores = np.zeros(len(self.doc_ids), dtype=np.float32)
        if not ids or not self.doc_ids:
            return scores
        n_all, n_scope = len(self.doc_ids), int(np.count_nonzero(scope))
        indptr, indices, data = self._indptr, self._indices, self._data
        for tid, weight in ids:
            start, end = int(indptr[tid]), int(indptr[tid + 1])
            rows = indices[start:end]
            inside = scope[rows]
            df_scope = int(np.count_nonzero(inside))
            if not df_scope:
                continue
            df = end - start
            ratio = (math.log(1 + (n_scope - df_scope + 0.5) / (df_scope + 0.5))
                     / math.log(1 + (n_all - df + 0.5) / (df + 0.5))) * weight
            scores[rows[inside]] += (data[start:end][inside] * ratio).astype(np.float32)   # rows are distinct
        return scores

    def scores(self, query_tokens: Sequence[str], weights: Sequence[float] | None = None) -> np.ndarray:
        """BM25 score of every document for the query, float32 (n_docs,). Unknown tokens are ignored; a token
        given twice counts twice. ``weights``: one per query token, multiplying its column (a Japanese question's
        English glosses, see :meth:`pipeline.search.searcher.Searcher._bm25_query`); None: every token 1.

        Raises:
            ValueError: ``weights`` not one per query token.

        The sum of each token's column of the score matrix, token by token in query order (one float32 addition per
        document of the column, as ``np.add.at`` made it: a column lists each document once): bit-identical to ``bm25s.BM25.get_scores_from_ids`` (numpy backend, float32, lucene: no non-occurrence
        term), which the index was scored with before this module stopped importing bm25s for queries."""
        ids = self._term_ids(query_tokens, weights)
        scores = np.zeros(len(self.doc_ids), dtype=np.float32)
        if not ids or not self.doc_ids:
            return scores
        indptr, indices, data = self._indptr, self._indices, self._data
        for tid, weight in ids:
            start, end = int(indptr[tid]), int(indptr[tid + 1])
            column = data[start:end] if weight == 1.0 else data[start:end] * np.float32(weight)
            scores[indices[start:end]] += column     # a column's documents are distinct
        return scores

    def search(
        self, query_tokens: Sequence[str], k: int, mask: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Top documents for the query.

        Args:
            query_tokens: analyzed query terms (``Analyzer.tokens``).
            k: at most this many results (k >= 1).
            mask: optional bool/0-1 array (n_docs,) aligned with ``doc_ids``; documents with a false/0 entry are
                excluded (e.g. other sources).

        Returns:
            ``[(doc_id, score)]`` best first, only scores > 0; ties break by document order.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        scores = self.scores(query_tokens)
        if mask is not None:
            if len(mask) != len(scores):
                raise ValueError(f"mask has {len(mask)} entries for {len(scores)} documents")
            scores = np.where(np.asarray(mask, dtype=bool), scores, 0.0)
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        if positive.size > k:
            part = np.argpartition(-scores[positive], k - 1)[:k]
            positive = positive[part]
        # stable: by score desc, then document order
        order = positive[np.lexsort((positive, -scores[positive]))]
        return [(self.doc_ids[i], float(scores[i])) for i in order]

    # ---- persistence ----
    def to_blobs(self) -> dict[str, bytes]:
        """Serialize: ``.npy`` bytes of the sparse score matrix, JSON of vocabulary and ids (each zlib-compressed:
        the index is rewritten by every warehouse update, half the bytes is half the file growth) and JSON of the
        parameters."""
        s = {"data": self._data, "indices": self._indices, "indptr": self._indptr}
        params = {**self._params, "num_docs": len(self.doc_ids)}
        blobs = {name: _pack(_npy(s[name])) for name in _ARRAYS}
        blobs["vocab"] = _pack(json.dumps(self._vocab, ensure_ascii=False).encode("utf-8"))
        blobs["doc_ids"] = _pack(json.dumps(self.doc_ids).encode("utf-8"))
        blobs["params"] = json.dumps(params).encode("utf-8")
        return blobs

    @classmethod
    def from_blobs(cls, blobs: Mapping[str, bytes]) -> Bm25Index:
        """Rebuild an index from :meth:`to_blobs` output (no re-indexing).

        Raises:
            WarehouseCorruptError: a blob is missing or unreadable.
        """
        try:
            params: dict[str, Any] = json.loads(_unpack(blobs["params"]))
            scores: dict[str, Any] = {name: _from_npy(_unpack(blobs[name])) for name in _ARRAYS}
            scores["num_docs"] = int(params["num_docs"])
            vocab = {str(k): int(v) for k, v in json.loads(_unpack(blobs["vocab"])).items()}
            doc_ids = json.loads(_unpack(blobs["doc_ids"]))
            if params["method"] != "lucene":      # other variants add a non-occurrence term bm25s keeps apart
                raise ValueError(f"BM25 method {params['method']!r} (only 'lucene' is written)")
        except (KeyError, ValueError, TypeError, zlib.error) as exc:
            raise WarehouseCorruptError(
                f"the BM25 index in the warehouse is unreadable ({exc!r}); run `docsvault build` to rebuild it"
            ) from exc
        if len(doc_ids) != scores["num_docs"]:
            raise WarehouseCorruptError(
                f"the BM25 index lists {len(doc_ids)} ids for {scores['num_docs']} documents; run `docsvault build`"
            )
        return cls(scores, vocab, params, doc_ids)


    # ---- start-up cache (pipeline.warehouse.load_bm25_cached) ----
    def save_dir(self, directory: Path, prefix: str) -> None:
        """Write the index as ``<prefix>.<array>.npy`` (raw) and ``<prefix>.meta.marshal`` (vocabulary, ids,
        parameters) into ``directory``, for :meth:`load_dir`."""
        for name in _ARRAYS:
            np.save(directory / f"{prefix}.{name}.npy", getattr(self, f"_{name}"), allow_pickle=False)
        (directory / f"{prefix}.meta.marshal").write_bytes(marshal.dumps(
            {"vocab": self._vocab, "doc_ids": self.doc_ids, "params": {**self._params, "num_docs": len(self.doc_ids)}}))

    @classmethod
    def load_dir(cls, directory: Path, prefix: str) -> Bm25Index | None:
        """The index :meth:`save_dir` wrote under ``prefix`` (arrays memory-mapped read-only), None when there is
        none.

        Raises:
            OSError, ValueError, EOFError, TypeError, KeyError: an unreadable or inconsistent entry.
        """
        meta_path = directory / f"{prefix}.meta.marshal"
        if not meta_path.exists():
            return None
        meta = marshal.loads(meta_path.read_bytes())
        arrays = {name: np.asarray(np.load(directory / f"{prefix}.{name}.npy", mmap_mode="r", allow_pickle=False))
                  for name in _ARRAYS}
        if len(arrays["data"]) != len(arrays["indices"]) or len(meta["doc_ids"]) != meta["params"]["num_docs"]:
            raise ValueError(f"{prefix}: inconsistent BM25 cache entry")
        return cls(arrays, meta["vocab"], meta["params"], meta["doc_ids"])


def _score_matrix(token_lists: Sequence[list[str]], k1: float, b: float) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The Lucene BM25 score of every (term, document) pair of documents given as token lists: the terms numbered
    (C loops: ``dict.fromkeys``, ``map``), then :func:`_score_ids`."""
    terms, lengths, words = _number_terms(token_lists)
    return _score_ids(terms, lengths, words, k1, b)


def _number_terms(token_lists: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(ids, lengths, words)``: every token of the lists one after the other as int32 (n_tokens,) positions in
    ``words`` (the distinct tokens, in order of first occurrence), and each list's length, int64 (n_lists,)."""
    flat: list[str] = []
    for tokens in token_lists:
        flat.extend(tokens)
    words = list(dict.fromkeys(flat))
    number = dict(zip(words, range(len(words))))
    ids = np.fromiter(map(number.__getitem__, flat), dtype=np.int32, count=len(flat))
    return ids, np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists)), words


def _score_ids(terms: np.ndarray, lengths: np.ndarray, words: Sequence[str], k1: float, b: float
               ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The Lucene BM25 score of every (term, document) pair, as the CSC arrays of :class:`Bm25Index` (``data``
    float32, ``indices`` int32 document positions ascending within a column, ``indptr`` int64) and the vocabulary
    (term -> column, in order of first occurrence: the same corpus gives the same arrays). Empty tokens are dropped
    (not counted in a document's length either).

    Args:
        terms: int (n_tokens,): every document's tokens one after the other, as positions in ``words``.
        lengths: int64 (n_docs,): tokens per document (they sum to n_tokens).
        words: the terms the positions stand for (distinct; any order, some may not occur).
        k1, b: BM25 parameters.

    The same float operations as bm25s 0.2 (``BM25(method="lucene").index``), vectorised over all pairs instead
    of a ``Counter`` per document: idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` in float64 (``math.log``, one call
    per distinct df) stored as float32; ``tf / (k1 * ((1 - b) + b * dl / avgdl) + tf)`` in float64 with tf as
    float32; their product rounded to float32 (a test compares both bit for bit). The (term, document) pairs are
    grouped by a stable 16-bit radix argsort of the columns (documents stay in order within a column): ~0.04 s for
    2.4 M tokens, where ``np.unique`` of term x document keys took 0.14 s.
    """
    n_docs = len(lengths)
    if "" in words:
        terms, lengths = _without(terms, lengths, words.index(""))
    column, vocab = _first_occurrence(terms, words)
    n_terms = len(vocab)
    if not terms.size:          # no terms at all: an index that matches nothing
        return ({"data": np.zeros(0, dtype=np.float32), "indices": np.zeros(0, dtype=np.int32),
                 "indptr": np.zeros(n_terms + 1, dtype=np.int64)}, vocab)
    term = column[terms]
    doc = np.repeat(np.arange(n_docs, dtype=np.int32), lengths)
    order = _stable_order(term, n_terms)
    term, doc = term[order], doc[order]                                     # sorted by term, then document
    first = np.empty(term.size, dtype=bool)
    first[0] = True
    np.not_equal(term[1:], term[:-1], out=first[1:])
    first[1:] |= doc[1:] != doc[:-1]
    starts = np.flatnonzero(first)
    tf = np.diff(starts, append=term.size)
    term, doc = term[starts], doc[starts]
    df = np.bincount(term, minlength=n_terms)
    distinct = np.unique(df)
    idf_of = np.array([math.log(1 + (n_docs - int(x) + 0.5) / (int(x) + 0.5)) for x in distinct], dtype=np.float32)
    idf = idf_of[np.searchsorted(distinct, df)]
    avg_len = lengths.mean()
    tfs = tf.astype(np.float32).astype(np.float64)
    norm = k1 * ((1 - b) + b * lengths.astype(np.float64) / avg_len)
    data = (idf[term].astype(np.float64) * (tfs / (norm[doc] + tfs))).astype(np.float32)
    indptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    return {"data": data, "indices": doc, "indptr": indptr}, vocab


def _without(terms: np.ndarray, lengths: np.ndarray, dropped: int) -> tuple[np.ndarray, np.ndarray]:
    """``terms`` and ``lengths`` (as in :func:`_score_ids`) without the tokens whose id is ``dropped``."""
    keep = terms != dropped
    if keep.all():
        return terms, lengths
    doc = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return terms[keep], np.bincount(doc[keep], minlength=len(lengths)).astype(np.int64)


def _first_occurrence(terms: np.ndarray, words: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
    """``(column, vocab)``: the column of every id of ``words`` (int32 (len(words),), -1 for ids not in
    ``terms``) and the vocabulary term -> column, columns numbered in order of first occurrence in ``terms``."""
    first = np.full(len(words), terms.size, dtype=np.int64)
    np.minimum.at(first, terms, np.arange(terms.size, dtype=np.int64))
    used = np.flatnonzero(first < terms.size)
    used = used[np.argsort(first[used])]            # distinct positions: the order is unique
    column = np.full(len(words), -1, dtype=np.int32)
    column[used] = np.arange(used.size, dtype=np.int32)
    return column, dict(zip(map(words.__getitem__, used.tolist()), range(used.size)))


def _stable_order(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """The positions of ``keys`` (ints in [0, n_keys)) sorted by key, equal keys in position order: a least
    significant digit radix sort of 16-bit digits, numpy's stable argsort of uint16 being a radix sort (linear)."""
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    shift = 16
    while n_keys > 1 << shift:
        digit = ((keys[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


def page_labels(note: Note) -> list[str]:
    """The note's frontmatter ``keywords`` and ``tags`` as strings (either may be a list or a single value: a
    string, number or boolean is one label, as it is as a list item; mappings are left out)."""
    labels: list[str] = []
    for key in ("keywords", "tags"):
        value = note.frontmatter.get(key)
        for v in value if isinstance(value, list) else [] if value is None else [value]:
            if isinstance(v, (str, int, float)) and str(v).strip():
                labels.append(str(v).lstrip("#"))
    return labels


#: frontmatter keys whose values are no text of the note for :func:`property_text`: docsvault's own
#: (``normalize.OWN_KEYS``), the page fields read apart (title, aliases, description, keywords, tags) and the keys
#: Obsidian reserves for display and publishing (its help, Properties: cssclasses, publish, permalink)
_NOT_PROPERTIES = frozenset({"title", "source", "source_path", "url", "content_hash", "fetched_at", "docsvault",
                             "aliases", "alias", "description", "keywords", "tags", "tag", "cssclasses", "cssclass",
                             "publish", "permalink",
                             # capture's bookkeeping (``capture.CAPTURE_KEYS`` but title and status, and related)
                             "created", "agent", "correlation_id", "related"})
#: (key, value) pairs docsvault writes, no text of the note: capture's ``status: raw`` (``capture.CAPTURE_STATUS``),
#: in every captured note, made each of them a match of a query with the word 'raw'; ``status: done`` is the user's
_WRITTEN_VALUES = frozenset({("status", "raw")})
#: a date or a date and time as YAML and ISO 8601 write them (``2026-12-07``, ``2026-12-07T01:02:03Z``): no text
_DATE = re.compile(r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?")


def property_text(note: Note) -> str:
    """The text of the note's other frontmatter properties (``著者: 夏目漱石``, ``status: draft``,
    ``sidebarTitle: Deploy``), one value per line, keys in order: as Obsidian's search finds a note by a property's
    value. A value counts when it is a string (or a list's string item) with a letter in it and is no URL or path
    (``/`` without a space: ``redirect_from``, ``github_repository``); numbers, booleans, dates and nested mappings
    (``2026-12-07T01:02:03Z`` too) are left out, and so are the keys of :data:`_NOT_PROPERTIES` (capture's
    ``created``/``agent``/``correlation_id`` among them) and capture's ``status: raw`` (:data:`_WRITTEN_VALUES`).
    "" when there is none."""
    out: list[str] = []
    for key, value in note.frontmatter.items():
        if not isinstance(key, str) or key.lower() in _NOT_PROPERTIES or (
                isinstance(value, str) and (key.lower(), value.strip()) in _WRITTEN_VALUES):
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and any(c.isalpha() for c in v) and not ("/" in v and " " not in v.strip()) \
                    and not _DATE.fullmatch(v.strip()):
                out.append(v.strip())
    return "\n".join(out)


def chunk_token_lists(chunks: Sequence[Chunk], notes: Sequence[Note], analyzer: Analyzer) -> list[list[str]]:
    """BM25 token list of every chunk with its page's fields weighted (``analysis.field_text``).

    Args:
        chunks: the chunks, in index order.
        notes: their notes (looked up by ``note_id``; a chunk without its note gets only its own text).
        analyzer: the text analyzer used for queries too.
    """
    texts, pieces, counts = _chunk_pieces(chunks, notes)
    return _token_lists(texts, pieces, counts, analyzer)


def build_chunk_index(
    chunks: Sequence[Chunk], notes: Sequence[Note], analyzer: Analyzer, k1: float = 1.5, b: float = 0.75
) -> Bm25Index:
    """BM25 index over chunks (doc ids = chunk ids) with page fields weighted; see :func:`chunk_token_lists` (the
    same index as ``Bm25Index.build`` of those lists, built from token ids: :func:`_index_of_pieces`)."""
    return _index_of_pieces([c.chunk_id for c in chunks], *_chunk_pieces(chunks, notes), analyzer, k1, b)


def page_token_lists(chunks: Sequence[Chunk], notes: Sequence[Note], analyzer: Analyzer
                     ) -> tuple[list[str], list[list[str]]]:
    """BM25 token list of every page (note) that has chunks: its page fields weighted as in ``field_text`` (title,
    aliases, description, keywords/tags, twice), then the text of all its chunks in order, each section heading of
    its ``heading_path`` once before the first chunk it heads: the page as written. A section that is a chunk of
    its own has its heading only in the breadcrumb, so until session 41 such headings were missing from the page's
    document (a note's ``## ウィンドウ関数`` section: the word was in no page of this lane). On the 417 public cases
    (`bench/warehouse_ab.py`, session 41): scoped +0.0000 [−0.0004, +0.0004], unscoped +0.0030 [+0.0002, +0.0070]
    (``japanese`` 0.816 -> 0.834 unscoped); no setting, so nothing was chosen on the cases.

    Scoring whole pages complements the chunk index: a paraphrased question often matches words that are spread over
    a page's sections, which no single chunk holds. As an RRF lane at weight 0.5 on the 126 public cases: pooled
    hybrid MRR 0.818 -> 0.833 beside the chunk lanes, neutral (0.859 both) once the vector lane has page vectors;
    see README "Search quality" and ``bench/fusion.py``.

    Returns:
        ``(note ids, token lists)``, notes in first-chunk order.
    """
    ids, texts, pieces, counts = _page_pieces(chunks, notes)
    return ids, _token_lists(texts, pieces, counts, analyzer)


def build_page_index(
    chunks: Sequence[Chunk], notes: Sequence[Note], analyzer: Analyzer, k1: float = 1.5, b: float = 0.75
) -> Bm25Index:
    """BM25 index over pages (doc ids = note ids); see :func:`page_token_lists` (built as :func:`build_chunk_index`)."""
    return _index_of_pieces(*_page_pieces(chunks, notes), analyzer, k1, b)


class _PieceNumbers(dict[str, list[int]]):
    """text -> ``[its piece number]``, texts numbered in order of first use (a missing text gets the next number).
    Its ``__getitem__`` is the ``tokens`` of the analyzer given to ``field_text``, which only concatenates the lists
    it gets (never changes one: they are shared)."""

    def __missing__(self, text: str) -> list[int]:
        got = self[text] = [len(self)]
        return got


def _chunk_pieces(chunks: Sequence[Chunk], notes: Sequence[Note]) -> tuple[list[str], list[int], list[int]]:
    """The chunks' BM25 documents (:func:`chunk_token_lists`) as pieces: ``(texts, pieces, counts)``, the distinct
    texts in order of first use, every document's texts one after the other as positions in ``texts``, and the
    number of texts of each document (chunk order).

    ``field_text`` arranges them, given an analyzer whose tokens of a text are ``[its position]``: the weighting
    stays defined in one place."""
    by_id = {n.note_id: n for n in notes}
    numbers = _PieceNumbers()
    by_number = cast(Analyzer, SimpleNamespace(tokens=numbers.__getitem__))
    fields: dict[str, tuple[str, tuple[str, ...], str, list[str]]] = {}
    pieces: list[int] = []
    counts: list[int] = []
    for c in chunks:
        note = by_id.get(c.note_id)
        if note is None:
            doc = field_text("", (), "", c.breadcrumb, c.text, analyzer=by_number)
        else:
            f = fields.get(c.note_id)
            if f is None:
                f = fields[c.note_id] = (note.title, note.aliases, note.description, page_labels(note))
            doc = field_text(f[0], f[1], f[2], c.breadcrumb, c.text, keywords=f[3], analyzer=by_number)
        pieces.extend(doc)
        counts.append(len(doc))
    return list(numbers), pieces, counts


def _page_pieces(chunks: Sequence[Chunk], notes: Sequence[Note]
                 ) -> tuple[list[str], list[str], list[int], list[int]]:
    """The pages' BM25 documents (:func:`page_token_lists`) as pieces: ``(note ids, texts, pieces, counts)`` as in
    :func:`_chunk_pieces`, pages in first-chunk order."""
    by_id = {n.note_id: n for n in notes}
    grouped: dict[str, list[Chunk]] = {}
    for c in chunks:
        grouped.setdefault(c.note_id, []).append(c)
    numbers = _PieceNumbers()
    by_number = cast(Analyzer, SimpleNamespace(tokens=numbers.__getitem__))
    pieces: list[int] = []
    counts: list[int] = []
    for note_id, page_chunks in grouped.items():
        note = by_id.get(note_id)
        doc = (field_text(note.title, note.aliases, note.description, "", "", keywords=page_labels(note),
                          analyzer=by_number) if note is not None else [])
        if note is not None and (props := property_text(note)):
            doc.append(numbers[props][0])          # the note's properties, once (the page as written)
        seen: set[str] = set()          # the page's section headings, each once, where it first heads a chunk
        for c in sorted(page_chunks, key=attrgetter("ordinal")):
            for heading in c.heading_path:
                if heading and heading not in seen:
                    seen.add(heading)
                    doc.append(numbers[heading][0])
            doc.append(numbers[c.text][0])
        pieces.extend(doc)
        counts.append(len(doc))
    return list(grouped), list(numbers), pieces, counts


def _token_lists(texts: list[str], pieces: list[int], counts: list[int], analyzer: Analyzer) -> list[list[str]]:
    """The documents of :func:`_chunk_pieces` / :func:`_page_pieces` as token lists (each text analysed once)."""
    tokens = [analyzer.tokens(t) for t in texts]
    out: list[list[str]] = []
    at = 0
    for n in counts:
        out.append([t for p in pieces[at:at + n] for t in tokens[p]])
        at += n
    return out


def _text_ids(analyzer: Analyzer, texts: list[str]) -> tuple[np.ndarray, np.ndarray, Sequence[str]]:
    """``(ids, lengths, words)`` of the texts' tokens as in :func:`_number_terms`, from the analyzer's
    ``term_ids(texts)`` when it has one (``pipeline.stages.warehouse.caching_analyzer``: ids read from its cache,
    no string made per token), else from ``tokens`` of each text."""
    term_ids = getattr(analyzer, "term_ids", None)
    if term_ids is not None:
        ids, lengths, words = term_ids(texts)
        return ids, lengths, words
    return _number_terms([analyzer.tokens(t) for t in texts])


def _piece_ids(ids: np.ndarray, lengths: np.ndarray, pieces: list[int], counts: list[int]
               ) -> tuple[np.ndarray, np.ndarray]:
    """Documents made of pieces as the ``(terms, lengths)`` of :func:`_score_ids`: the token ids of every
    document's texts one after the other (one gather), and tokens per document, int64 (n_docs,).

    Args:
        ids, lengths: the texts' token ids one text after the other, and tokens per text (:func:`_text_ids`).
        pieces, counts: as returned by :func:`_chunk_pieces`.
    """
    seq = np.asarray(pieces, dtype=np.int64)
    text_start = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=text_start[1:])
    piece_len = lengths[seq]
    piece_end = np.zeros(len(seq) + 1, dtype=np.int64)
    np.cumsum(piece_len, out=piece_end[1:])
    total = int(piece_end[-1])
    gather = np.repeat(text_start[seq] - piece_end[:-1], piece_len) + np.arange(total, dtype=np.int64)
    doc_end = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=doc_end[1:])
    return ids[gather], piece_end[doc_end[1:]] - piece_end[doc_end[:-1]]


def _index_of_pieces(doc_ids: list[str], texts: list[str], pieces: list[int], counts: list[int],
                     analyzer: Analyzer, k1: float, b: float) -> Bm25Index:
    """:meth:`Bm25Index.build` of documents given as pieces (:func:`_chunk_pieces`): the same arrays and vocabulary
    as building their token lists, from token ids (each distinct text read once).

    Raises:
        ValueError: ids repeat.
    """
    if len(set(doc_ids)) != len(doc_ids):
        raise ValueError("doc ids must be unique")
    ids, lengths, words = _text_ids(analyzer, texts)
    terms, doc_lengths = _piece_ids(ids, lengths, pieces, counts)
    arrays, vocab = _score_ids(terms, doc_lengths, words, k1, b)
    return Bm25Index(arrays, vocab, {"k1": k1, "b": b, "method": "lucene"}, doc_ids)


def split_blobs(blobs: Mapping[str, bytes]) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The warehouse's ``bm25_index`` rows split into the chunk index's and the page index's blobs (names without
    :data:`PAGE_PREFIX`); either may be empty (a warehouse built before page indexes has none of the second)."""
    chunk = {k: v for k, v in blobs.items() if not k.startswith(PAGE_PREFIX)}
    page = {k[len(PAGE_PREFIX):]: v for k, v in blobs.items() if k.startswith(PAGE_PREFIX)}
    return chunk, page
