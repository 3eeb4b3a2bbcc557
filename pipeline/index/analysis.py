"""Text analysis for BM25: one tokenizer for documents and queries, English and Japanese.

Text is NFKC-normalised (full-width ASCII -> ASCII, half-width katakana -> full-width; dakuten are kept, so
バス and パス stay distinct) and cut into script runs:

- Japanese runs (hiragana, katakana, kanji) go through SudachiPy, mode C, ``normalized_form()``; particles (助詞),
  auxiliary verbs (助動詞), symbols (補助記号, 記号), whitespace (空白) and a few function words (pronouns 代名詞,
  adnominals 連体詞, conjunctions 接続詞, interjections 感動詞, and the light verbs する/いる/ある/なる/できる) are
  dropped. Optionally (``ja_bigrams``) character bigrams of kanji and katakana runs are added.
- Everything else is tokenised as Latin-script words: accents folded (``naïve résumé`` -> ``naive resume``: a
  Latin letter whose compatibility decomposition starts with an ASCII letter becomes that letter; only outside
  Japanese runs, so dakuten are never touched), lowercased; identifiers are kept whole *and* split
  (``read_csv_auto`` -> ``read_csv_auto, read, csv, auto``; ``useState`` -> ``usestate, use, state``;
  ``pd.read_csv`` -> ``pd.read_csv, pd, read_csv, read, csv``); the whole identifier is not stemmed, plain words and
  identifier parts are Snowball-stemmed (PyStemmer) and English stopwords (the Lucene list that bm25s uses) dropped.
  Numbers are kept.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

__all__ = ["QUESTION_WORDS_EN", "STOPWORDS_EN", "SUDACHI_MAX_CHARS", "Analyzer", "field_text", "is_japanese"]

# Lucene's English stop set (the one bm25s ships as STOPWORDS_EN): small enough not to eat technical words such as
# "where", "from", "select", "case".
_STOPWORDS_TEXT = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with "
)
STOPWORDS_EN: frozenset[str] = frozenset(_STOPWORDS_TEXT.split())
#: the words an English question is phrased with (interrogatives, auxiliaries, the asker's pronouns): BM25 searches
#: them (not stopwords: ``where`` and ``case`` are SQL), but a note lacking one is no news, so
#: :meth:`pipeline.search.searcher.Searcher.missing_words` never names them, as it leaves out a Japanese question's
#: どう and とき (``how do I read parquet`` said "no note contains 'how'" over a vault of notes)
_QUESTION_WORDS_TEXT = (
    "how what when where why who whom whose which do does did done can could should would shall may might must "
    "am been have has had i i'm i've me my we our us you your don't doesn't didn't can't what's how's"
)
QUESTION_WORDS_EN: frozenset[str] = frozenset(_QUESTION_WORDS_TEXT.split())

# Japanese: hiragana, katakana (+ ー, ヵヶ), CJK ideographs (incl. ext. A, compatibility), 々〆.
_JA_CHARS = "\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u3006"
_JA_RUN = re.compile(f"[{_JA_CHARS}]+")
_KANJI_OR_KATAKANA_RUN = re.compile(
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005]{2,}|[\u30a1-\u30fa\u30fc]{2,}"
)
_JA_CHAR = re.compile(f"[{_JA_CHARS}]")
_LETTER_OR_DIGIT = re.compile(r"[^\W_]")

# A Latin "compound": word characters joined by '.' or '::' (pd.read_csv, v1.2.3, std::vector).
_COMPOUND = re.compile(r"\w+(?:(?:\.|::)\w+)*")
_DOTTED = re.compile(r"\.|::")
# camelCase / PascalCase / acronym boundaries inside one identifier part: HTTPServer -> HTTP, Server.
# Digits stay attached to the letters before them (v2, utf8, HTTP2). Only applied to ASCII parts.
_CAMEL = re.compile(r"[A-Z]+\d*(?=[A-Z][a-z])|[A-Z]?[a-z]+\d*|[A-Z]+\d*|\d+")


def _latin_fold_table() -> dict[int, str]:
    """Latin-1 Supplement, Latin Extended-A/B and Latin Extended Additional letters -> their ASCII base letter
    (é -> e, Ł stays: no decomposition; ß, æ, ø stay)."""
    table: dict[int, str] = {}
    for lo, hi in ((0x00C0, 0x024F), (0x1E00, 0x1EFF)):
        for cp in range(lo, hi + 1):
            base = unicodedata.normalize("NFKD", chr(cp))[:1]
            if base.isascii() and base.isalpha() and base != chr(cp):
                table[cp] = base
    return table


_LATIN_FOLD = _latin_fold_table()

_JA_DROP_POS = frozenset(
    {"助詞", "助動詞", "補助記号", "記号", "空白", "代名詞", "連体詞", "接続詞", "感動詞"}
)
_JA_STOP_LEMMAS = frozenset({"為る", "居る", "有る", "在る", "成る", "出来る"})

# SudachiPy rejects input over 49,149 bytes; Japanese runs are batched below this many characters (≤ 3 bytes each).
SUDACHI_MAX_CHARS = 12_000


@lru_cache(maxsize=1)
def sudachi_dictionary() -> Any:
    """The process's one SudachiPy ``Dictionary`` of ``sudachidict_core`` (opened on first use; thread-safe to
    share: each user makes its own tokenizer from it). One instance, because each one maps the 200 MB
    ``system.dic`` and reads its lexicon apart: a cold search of a Japanese question opened two (the BM25
    analyzer's and the translator's) and peaked at 683-686 MB; with one, 608-613 MB."""
    from sudachipy import Dictionary

    return Dictionary(dict="core")


def is_japanese(text: str, threshold: float = 0.2) -> bool:
    """True when at least ``threshold`` of the letters/digits in ``text`` are kana or kanji.

    Args:
        text: any text.
        threshold: share in [0, 1] of letter/digit characters that must be Japanese.

    Returns:
        False for text without letters or digits.
    """
    letters = len(_LETTER_OR_DIGIT.findall(text))
    if not letters:
        return False
    return len(_JA_CHAR.findall(text)) / letters >= threshold


_HIRAGANA = re.compile("[\u3041-\u309fー]+")


def _not_a_name(pos: Sequence[str], surface: str) -> bool:
    """Whether a Sudachi word is one a question is phrased with rather than a name looked for (see
    :meth:`Analyzer.words`' ``skip_inflected``): a verb, an adjective, or an adverb or adverbial noun written in
    hiragana (どう, よく, とき; not ズンドコ, which Sudachi also reads as an adverb, nor 今日)."""
    adverbial = pos[0] == "副詞" or (pos[0] == "名詞" and len(pos) > 2 and pos[2] == "副詞可能")
    return pos[0] in ("動詞", "形容詞") or (adverbial and bool(_HIRAGANA.fullmatch(surface)))


class Analyzer:
    """BM25 tokenizer, identical for documents and queries.

    The Sudachi tokenizer is created lazily on first Japanese input and reused, one per thread: a Sudachi tokenizer
    cannot be used by two threads at once ("Tokenizer is already in use"), and one analyzer serves every thread of
    a server (the MCP HTTP server answers its sessions' calls in worker threads). Stemming is memoised.

    Args:
        ja_bigrams: also emit character bigrams of kanji and katakana runs (``検索機能`` -> 検索, 索機, 機能).
        stem_cache_size: entries kept by the stemming memo.
    """

    def __init__(self, *, ja_bigrams: bool = False, stem_cache_size: int = 200_000) -> None:
        self.ja_bigrams = ja_bigrams
        self._sudachi = threading.local()     # .tokenizer: this thread's Sudachi tokenizer
        import Stemmer  # PyStemmer

        stemmer = Stemmer.Stemmer("english")
        self._stem = lru_cache(maxsize=stem_cache_size)(stemmer.stemWord)

    # ---- public ----
    def tokens(self, text: str) -> list[str]:
        """BM25 terms of ``text`` in reading order (duplicates kept: they are term frequencies).

        Args:
            text: any text (Markdown is fine: punctuation is dropped).

        Returns:
            Lowercased, stemmed Latin terms and Sudachi-normalised Japanese terms; [] for empty text.
        """
        if not text:
            return []
        text = unicodedata.normalize("NFKC", text)
        segments: list[tuple[bool, str]] = []  # (is_japanese_run, text)
        pos = 0
        for m in _JA_RUN.finditer(text):
            if m.start() > pos:
                segments.append((False, text[pos : m.start()]))
            segments.append((True, m.group()))
            pos = m.end()
        if pos < len(text):
            segments.append((False, text[pos:]))

        ja_runs = [seg for is_ja, seg in segments if is_ja]
        ja_tokens = iter(self._japanese_runs(ja_runs)) if ja_runs else iter(())
        out: list[str] = []
        for is_ja, seg in segments:
            if is_ja:
                out.extend(next(ja_tokens))
            else:
                out.extend(self._latin(seg))
        return out

    @staticmethod
    def whole(word: str) -> str:
        """A Latin word as an identifier is kept whole among its terms (:meth:`tokens`): NFKC, accents folded,
        lower-cased, not stemmed (``useState`` -> ``usestate``, ``Naïve`` -> ``naive``)."""
        return unicodedata.normalize("NFKC", word).translate(_LATIN_FOLD).lower()

    def words(self, text: str, *, skip_inflected: bool = False) -> list[tuple[str, list[str]]]:
        """``text``'s words as written, each with its BM25 terms (:meth:`tokens` of the word), in reading order:
        a Japanese run is split into Sudachi's words (``京都のズンドコ`` -> ``("京都", ["京都"])``,
        ``("ズンドコ", ["ずんどこ"])``: the surface as written, the term normalised), other text into its words;
        a word with no term (a particle, a stopword, punctuation) is left out, and with ``skip_inflected`` a
        Japanese verb or adjective (動詞, 形容詞: つける, 速い), and an adverb (副詞: どう, よく) or adverbial noun (名詞
        副詞可能: とき) written in hiragana: words a question is phrased with, not names a note is looked for by. NFKC-normalised like :meth:`tokens`."""
        out: list[tuple[str, list[str]]] = []
        text = unicodedata.normalize("NFKC", text or "")
        pos = 0
        for m in [*_JA_RUN.finditer(text), None]:
            end = m.start() if m is not None else len(text)
            for w in _COMPOUND.finditer(text, pos, end):
                terms = self._latin(w.group())
                if terms:
                    out.append((w.group(), terms))
            if m is None:
                break
            run = m.group()         # in pieces SudachiPy takes (a pasted run of 16,384 kana was a SudachiError)
            for morpheme in (mo for i in range(0, len(run), SUDACHI_MAX_CHARS)
                             for mo in self._tokenizer().tokenize(run[i : i + SUDACHI_MAX_CHARS])):
                kept = self._kept_lemma(morpheme)
                if kept is not None and not (skip_inflected and _not_a_name(morpheme.part_of_speech(), morpheme.surface())):
                    out.append((morpheme.surface(), [kept]))
            pos = m.end()
        return out

    # ---- Latin ----
    def _latin(self, text: str) -> list[str]:
        out: list[str] = []
        text = text.translate(_LATIN_FOLD)
        for m in _COMPOUND.finditer(text):
            word = m.group()
            if _DOTTED.search(word):
                out.append(word.lower())
                for part in _DOTTED.split(word):
                    if part:
                        out.extend(self._identifier(part))
            else:
                out.extend(self._identifier(word))
        return out

    def _identifier(self, word: str) -> list[str]:
        """``read_csv`` -> [read_csv, read, csv]; ``Installing`` -> [instal]; ``the`` -> []."""
        pieces = [
            p
            for chunk in word.split("_")
            if chunk
            for p in (_CAMEL.findall(chunk) if chunk.isascii() else [chunk])
        ]
        lower = word.lower()
        if len(pieces) <= 1:
            if lower in STOPWORDS_EN or not pieces and not lower.strip("_"):
                return []
            return [self._stem(lower.strip("_") or lower)]
        out = [lower]
        for piece in pieces:
            p = piece.lower()
            if p in STOPWORDS_EN:
                continue
            out.append(self._stem(p))
        return out

    # ---- Japanese ----
    def _tokenizer(self) -> Any:
        """This thread's Sudachi tokenizer (mode C), made on its first use in the thread from the process's one
        dictionary."""
        tokenizer = getattr(self._sudachi, "tokenizer", None)
        if tokenizer is None:
            from sudachipy import SplitMode

            dictionary = sudachi_dictionary()
            if hasattr(dictionary, "tokenizer"):  # SudachiPy >= 0.7
                tokenizer = dictionary.tokenizer(mode=SplitMode.C)
            else:  # pragma: no cover - SudachiPy 0.6
                tokenizer = dictionary.create(mode=SplitMode.C)
            self._sudachi.tokenizer = tokenizer
        return tokenizer

    def _japanese_runs(self, runs: list[str]) -> list[list[str]]:
        """Tokens of each run; runs are joined by newlines into few Sudachi calls (each < 49 KB)."""
        pieces: list[tuple[int, str]] = []  # (run index, text ≤ SUDACHI_MAX_CHARS)
        for i, run in enumerate(runs):
            for start in range(0, len(run), SUDACHI_MAX_CHARS):
                pieces.append((i, run[start : start + SUDACHI_MAX_CHARS]))
        result: list[list[str]] = [[] for _ in runs]
        batch: list[tuple[int, str]] = []
        size = 0
        for item in pieces:
            if batch and size + len(item[1]) + 1 > SUDACHI_MAX_CHARS:
                self._tokenize_batch(batch, result)
                batch, size = [], 0
            batch.append(item)
            size += len(item[1]) + 1
        if batch:
            self._tokenize_batch(batch, result)
        if self.ja_bigrams:
            for i, run in enumerate(runs):
                for m in _KANJI_OR_KATAKANA_RUN.finditer(run):
                    s = m.group()
                    result[i].extend(s[k : k + 2] for k in range(len(s) - 1))
        return result

    def _tokenize_batch(self, batch: list[tuple[int, str]], result: list[list[str]]) -> None:
        joined = "\n".join(text for _, text in batch)
        starts: list[int] = []
        offset = 0
        for _, text in batch:
            starts.append(offset)
            offset += len(text) + 1
        k = 0
        for m in self._tokenizer().tokenize(joined):
            lemma = self._kept_lemma(m)
            if lemma is None:
                continue
            begin = m.begin()
            while k + 1 < len(starts) and starts[k + 1] <= begin:
                k += 1
            result[batch[k][0]].append(lemma)

    @staticmethod
    def _kept_lemma(morpheme: Any) -> str | None:
        """A Sudachi morpheme's BM25 term (its normalised form, lowercased), or None for a dropped part of speech
        or a stop lemma."""
        if morpheme.part_of_speech()[0] in _JA_DROP_POS:
            return None
        lemma = morpheme.normalized_form()
        return None if lemma in _JA_STOP_LEMMAS else lemma.lower()


def field_text(
    title: str,
    aliases: Sequence[str],
    description: str,
    breadcrumb: str,
    text: str,
    *,
    keywords: Sequence[str] = (),
    analyzer: Analyzer | None = None,
) -> list[str]:
    """A chunk's BM25 document: page-level fields twice, then the chunk text.

    The one place where field weighting lives: tokens of title, aliases, description, frontmatter keywords/tags and
    breadcrumb, repeated twice, followed by the tokens of ``text`` (page fields x2: +0.038 MRR on English, see
    guide/retrieval-notes.md; adding keywords/tags: pooled hybrid MRR 0.796 -> 0.811, prefect 0.787 -> 0.840 on the
    126 public cases, `bench/` note in README).

    Args:
        title: note title.
        aliases: frontmatter aliases.
        description: frontmatter description ("" when absent).
        keywords: frontmatter keywords and tags (page-level labels).
        breadcrumb: ``Title > H2 > H3`` of the chunk.
        text: the chunk's body text.
        analyzer: the Analyzer to use; a shared default one when None.

    Returns:
        The token list to index.
    """
    a = analyzer or _default_analyzer()
    fields = a.tokens(title) + [t for alias in aliases for t in a.tokens(alias)]
    fields += a.tokens(description) + [t for kw in keywords for t in a.tokens(kw)] + a.tokens(breadcrumb)
    return fields + fields + a.tokens(text)


@lru_cache(maxsize=1)
def _default_analyzer() -> Analyzer:
    return Analyzer()
