"""A large pass of a torch model runs in a child process (``pipeline.index.embed_child``): the vectors land in the
model's embedding cache exactly as an in-process pass would put them, and a failed child leaves the work to the
build's own process."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline import stages as b
from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.index import embed
from pipeline.index.embed import EmbeddingCache, HashEmbedder
from pipeline.index.embed_child import embed_in_child
from pipeline.ingest.sources import load_sources
from pipeline.models import text_hash


class ChildOnly(HashEmbedder):
    """The fake embedder as a torch model would be: it asks for a child process, and never embeds in this one."""

    embeds_in_child = True

    def embed_documents(self, texts: Any) -> np.ndarray:
        raise AssertionError("embedded in the build's process")


def test_embed_in_child_fills_the_cache_with_the_models_vectors(tmp_path: Path):
    items = [(text_hash(t), t) for t in ("alpha beta", "gamma", "delta epsilon zeta")]
    seen: list[tuple[int, int]] = []
    n = embed_in_child("hash:16", "hash-16", tmp_path, items, batch_size=2, progress=lambda d, t: seen.append((d, t)))
    assert n == 3
    assert seen == [(0, 3), (2, 3), (3, 3)]
    got = EmbeddingCache(tmp_path, "hash-16").get_many([h for h, _ in items])
    want = HashEmbedder(16).embed_documents([t for _, t in items])
    assert np.array_equal(np.stack([got[h] for h, _ in items]), want)


def test_the_child_gets_a_small_onednn_primitive_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import subprocess

    envs: list[dict[str, str]] = []
    real = subprocess.Popen

    def popen(*a: Any, env: dict[str, str], **k: Any) -> Any:
        envs.append(env)
        return real(*a, env=env, **k)

    monkeypatch.setattr(subprocess, "Popen", popen)
    items = [(text_hash("x"), "x")]
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    assert embed_in_child("hash:16", "hash-16", tmp_path, items) == 1
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")          # the user's own value is kept
    assert embed_in_child("hash:16", "hash-16", tmp_path, items) == 1
    assert [e["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] for e in envs] == ["4", "64"]


def test_a_failed_child_returns_zero_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="pipeline.index.embed_child"):
        n = embed_in_child("hash:16", "hash-32", tmp_path, [(text_hash("x"), "x")])
    assert n == 0
    assert "in a child process failed (exit 2: model spec 'hash:16' gives 'hash-16', not 'hash-32')" in caplog.text
    assert EmbeddingCache(tmp_path, "hash-32").shards() == []


def test_embed_stage_runs_a_large_pass_in_a_child(tiny_env: Path, monkeypatch: pytest.MonkeyPatch):
    settings = Settings.from_env()
    (source,) = load_sources(settings.sources_file)
    b.fetch_stage(settings, source)
    b.normalize_stage(settings, source)
    b.vault_stage(settings, source)
    b.chunk_stage(settings, source, embed.load_embedder)
    monkeypatch.setattr(embed, "CHILD_MIN_TEXTS", 1)
    result = b.embed_stage(settings, source, lambda spec: ChildOnly(embed.load_embedder(spec).dim))
    assert result.cached == 0
    chunks = artifacts.load_chunks(settings, source.name)
    hashes = sorted({text_hash(c.embed_text) for c in chunks})
    assert result.embedded == len(hashes)
    model = embed.load_embedder(settings.models_of(source)[0])
    got = EmbeddingCache(settings.cache_dir, model.model_id).get_many(hashes)
    texts = {text_hash(c.embed_text): c.embed_text for c in chunks}
    want = HashEmbedder(model.dim).embed_documents([texts[h] for h in hashes])
    assert np.array_equal(np.stack([got[h] for h in hashes]), want)
