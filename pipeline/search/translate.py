"""Dictionary query translation, Japanese -> English: the English words a Japanese question is asking about.

A Japanese question about English documentation shares almost no terms with the pages it wants, and the English
embedding model cannot read it. Dictionary-based query translation (the classic cross-language IR baseline: Ballesteros
& Croft, SIGIR 1997; Pirkola's structured queries, SIGIR 1998) closes much of that gap without any model: each
content word of the question is looked up in JMdict (Jim Breen's Japanese-English dictionary, the `jamdict-data`
package's SQLite file, CC BY-SA 4.0) and replaced by the glosses of its first senses. The result is a bag of English
words, ``"each transaction timestamp time most new quote join"``, that BM25 and the English model can match.

Words come from SudachiPy (mode C, then mode A parts of a compound JMdict does not know), looked up by dictionary
form, then surface; particles, auxiliaries, symbols and the light verbs (する, いる, ある, なる, できる) carry no
meaning here and are skipped. Latin words (``Parquet``, ``DataFrame``, ``cron``) pass through unchanged. An entry's
glosses: the first ``GLOSSES_FIRST_SENSE`` glosses of its first sense and the first gloss of the next
``MORE_SENSES`` senses, parentheticals and a leading "to " removed, glosses of more than ``MAX_GLOSS_WORDS``
words (definitions rather than translations) dropped; among several entries of one word, those with a
priority mark (``ichi1``/``news1``/``spec1``...) come first and at most ``ENTRIES`` are used.

Lookups are memoised per word; the dictionary opens read-only on first use. Without the `jamdict-data` package the
translator returns None for every query (search runs without the translated lanes) and says so once in the log.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import threading
from functools import lru_cache
from pathlib import Path

__all__ = ["Translator", "dictionary_path"]

log = logging.getLogger(__name__)

GLOSSES_FIRST_SENSE = 3
MORE_SENSES = 1
ENTRIES = 1
MAX_GLOSS_WORDS = 3          # a longer gloss is a definition, not a translation
_SKIP_POS = {"助詞", "助動詞", "補助記号", "記号", "空白", "接頭辞", "接尾辞", "代名詞", "連体詞", "接続詞", "感動詞"}
_LIGHT = {"する", "いる", "ある", "なる", "できる", "為る", "居る", "有る", "成る", "出来る", "こと", "事", "もの",
          "物", "ため", "為", "よう", "様", "とき", "時", "ところ", "所", "の", "ん", "たい", "いい", "良い", "どう",
          "どうやって", "どの", "どれ", "何", "なに", "なん"}
_JA = re.compile("[\u3041-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005]")
_PAREN = re.compile(r"\s*\([^)]*\)")
_JA_CHARS = "\u3041-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005"
_PIECES = re.compile(f"[{_JA_CHARS}]+|[^\\s{_JA_CHARS}、。「」『』（）！？・：]+")


def dictionary_path() -> Path | None:
    """The JMdict SQLite file of the installed `jamdict-data` package, None when it is not installed."""
    try:
        import jamdict_data
    except ImportError:
        return None
    path = Path(jamdict_data.__file__).parent / "jamdict.db"
    return path if path.is_file() else None


class Translator:
    """Japanese question -> English words (a space-joined string), or None for a question with no Japanese.

    Thread-safe; one per process is enough (``Translator.shared()``).
    """

    _shared: "Translator | None" = None

    def __init__(self, db_path: Path | None = None) -> None:
        self._path = db_path if db_path is not None else dictionary_path()
        self._con: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._tokenizers: tuple[object, object] | None = None
        self._warned = False

    @classmethod
    def shared(cls) -> "Translator":
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    @property
    def available(self) -> bool:
        return self._path is not None

    def _db(self) -> sqlite3.Connection:
        if self._con is None:
            self._con = sqlite3.connect(f"file:{self._path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        return self._con

    def _sudachi(self) -> tuple[object, object]:
        if self._tokenizers is None:
            from sudachipy import SplitMode

            from pipeline.index.analysis import sudachi_dictionary

            d = sudachi_dictionary()
            self._tokenizers = (d.tokenizer(mode=SplitMode.C), SplitMode.A)
        return self._tokenizers

    def knows_english(self, word: str) -> bool:
        """Whether ``word`` (compared in lower case) is on its own an English gloss of the dictionary (JMdict's
        indexed ``SenseGloss.text``): a real English word, ``hot``, ``water``, ``connections``; False without a
        dictionary. Search offers no spelling for a missing word that is one (``hot`` is no typo of ``host``)."""
        if not self.available:
            return False
        with self._lock:
            return self._db().execute("SELECT 1 FROM SenseGloss WHERE text = ? LIMIT 1",
                                      (word.casefold(),)).fetchone() is not None

    def translate(self, query: str) -> str | None:
        """English words for the Japanese words of ``query`` (Latin words kept in place), None when the query has no
        Japanese or no dictionary is installed."""
        groups = self.translate_groups(query)
        return " ".join(groups) if groups else None

    def translate_groups(self, query: str) -> list[str] | None:
        """The translation of ``query`` word by word: one string per Japanese word (its glosses, space-joined) or
        Latin word (as is), in query order; :meth:`translate` joins them. None when the query has no Japanese or no
        dictionary is installed (warned once), or no word of it has a gloss."""
        if not _JA.search(query or ""):
            return None
        if self._path is None:
            if not self._warned:
                log.warning("jamdict-data is not installed: Japanese questions are not translated for English pages")
                self._warned = True
            return None
        with self._lock:
            groups: list[str] = []
            for piece in _PIECES.findall(query):
                if not _JA.search(piece):
                    groups.append(piece)          # Latin words, identifiers, numbers pass through
                    continue
                for surface, forms, pos, parts in self._morphemes(piece):
                    if pos in _SKIP_POS or forms[0] in _LIGHT or surface in _LIGHT or not _JA.search(surface):
                        continue
                    glosses = self._glosses(forms)
                    if not glosses and parts:
                        glosses = [g for part in parts for g in self._glosses(part)]
                    if glosses:
                        groups.append(" ".join(glosses))
            groups = [g for g in (g.strip() for g in groups) if g]
            return groups or None

    def _morphemes(self, query: str) -> list[tuple[str, tuple[str, ...], str, list[tuple[str, ...]]]]:
        """(surface, (dictionary form, surface), part of speech, mode-A parts as forms) per mode-C morpheme."""
        from pipeline.index.analysis import SUDACHI_MAX_CHARS

        tok, mode_a = self._sudachi()
        out = []
        # SudachiPy refuses input over 49,149 bytes: a long question goes in pieces (a word may be cut at a seam)
        pieces = [query[i:i + SUDACHI_MAX_CHARS] for i in range(0, len(query), SUDACHI_MAX_CHARS)]
        for m in (m for piece in pieces for m in tok.tokenize(piece)):  # type: ignore[attr-defined]
            surface = m.surface()
            pos = m.part_of_speech()[0]
            parts = []
            split = m.split(mode_a)
            if len(split) > 1:
                parts = [(p.dictionary_form(), p.surface()) for p in split
                         if p.part_of_speech()[0] not in _SKIP_POS and p.dictionary_form() not in _LIGHT]
            out.append((surface, (m.dictionary_form(), surface), pos, parts))
        return out

    def _glosses(self, forms: tuple[str, ...]) -> list[str]:
        for form in dict.fromkeys(forms):
            got = _lookup(self, form)
            if got:
                return list(got)
        return []


@lru_cache(maxsize=50_000)
def _lookup(tr: Translator, word: str) -> tuple[str, ...]:
    con = tr._db()
    ids = [r[0] for r in con.execute(
        "SELECT idseq FROM Kanji WHERE text = ? UNION SELECT idseq FROM Kana WHERE text = ?", (word, word))]
    if not ids:
        return ()
    marks = "?" * 0
    ranked = []
    for idseq in ids:
        prio = con.execute(
            "SELECT count(*) FROM KJP JOIN Kanji ON KJP.kid = Kanji.ID WHERE Kanji.idseq = ? AND Kanji.text = ?",
            (idseq, word)).fetchone()[0]
        prio += con.execute(
            "SELECT count(*) FROM KNP JOIN Kana ON KNP.kid = Kana.ID WHERE Kana.idseq = ? AND Kana.text = ?",
            (idseq, word)).fetchone()[0]
        ranked.append((-prio, idseq))
    del marks
    out: list[str] = []
    for _, idseq in sorted(ranked)[:ENTRIES]:
        senses = [r[0] for r in con.execute("SELECT ID FROM Sense WHERE idseq = ? ORDER BY ID", (idseq,))]
        for i, sid in enumerate(senses[: 1 + MORE_SENSES]):
            glosses = [r[0] for r in con.execute(
                "SELECT text FROM SenseGloss WHERE sid = ? AND (lang = 'eng' OR lang IS NULL) ORDER BY rowid", (sid,))]
            for g in glosses[: GLOSSES_FIRST_SENSE if i == 0 else 1]:
                g = _PAREN.sub("", g).strip()
                if g.startswith("to "):
                    g = g[3:]
                if g and g not in out and len(g.split()) <= MAX_GLOSS_WORDS:
                    out.append(g)
    return tuple(out)
