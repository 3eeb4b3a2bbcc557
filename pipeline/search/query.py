"""Query syntax of ``docsvault search`` and the MCP ``search`` tool: phrases, exclusions, OR and inline filters.

========================  ==========================================================================================
``word``                  ranked (BM25 + vectors); not required: hybrid search also finds notes without it
``"exact phrase"``        required: the note's text contains the phrase (case-insensitive, whitespace and Markdown
                          markup ignored); its words are ranked too
``-word`` / ``-"phrase"`` excluded: notes containing it are dropped (``--word``, a CLI flag, is a word: ranked)
``A OR B``                one of A, B required when either is a phrase (``"a b" OR "c d"`` keeps notes with either
                          phrase); between bare words it changes nothing (words are never required)
``source:NAME``           only that source (repeat for several: any of them); like ``--source``
``tag:TAG``               only notes with that tag (frontmatter or inline ``#tag``; ``a`` matches ``a/b``;
                          NFKC and case-folded: ``カタカナ`` matches ``ｶﾀｶﾅ``); like ``--tag``
``path:PREFIX``           only notes whose vault path (or source path) starts with PREFIX; a glob (``*``, ``?``,
                          ``[``) must match the whole vault path. Values with spaces: ``path:"My folder/"``.
                          Compared in Unicode NFC on both sides (macOS types NFD) and case-insensitively
========================  ==========================================================================================

A query of filters alone (``tag:recipe``, ``source:notes path:daily/ -draft``) has nothing to rank: it lists the
notes that pass them, by vault path, as Obsidian's search does for ``tag:#recipe``.

Typed quotes and minus signs count as the ASCII ones (:func:`ascii_syntax`): ``“…”`` and ``„…“`` (smart quotes, as
macOS and iOS type them) and the full-width ``＂`` are ``"``; a full-width ``－`` (U+FF0D, a Japanese keyboard's
minus) or ``−`` (U+2212, the full-width minus of macOS' Japanese input) that starts a word is ``-``; a full-width ``：`` after ``source``, ``tag`` or ``path`` is ``:``, and so are those keys and ``OR`` typed in full-width letters (``ｔａｇ：日記``, ``ＯＲ``: an IME in full-width mode). Japanese
brackets ``「…」`` stay words: a question is often written inside them.

Filters and operators are parsed here (no SQL, no search); :class:`ParsedQuery` says what to rank and what to keep.
Matching of required/excluded text is :meth:`ParsedQuery.keeps` on a note's plain text.
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from pipeline.common.errors import PipelineError
from pipeline.common.markdown import split_tag_list
from pipeline.search.snippet import WORD_END, WORD_START

__all__ = ["FILTER_KEYS", "INVISIBLE", "ParsedQuery", "QuerySyntaxError", "ascii_syntax", "parse_query", "tag_problem",
           "text_contains"]

FILTER_KEYS = ("source", "tag", "path")
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_TOKEN = re.compile(r'\s*(-?)(?:(source|tag|path):)?("([^"]*)"|(\S+))?', re.IGNORECASE)


class QuerySyntaxError(PipelineError, ValueError):
    """A query whose syntax cannot be parsed (unclosed quote, empty filter, dangling OR, nothing to search for)."""


@dataclass(frozen=True)
class ParsedQuery:
    """A parsed query.

    Attributes:
        text: what the lanes rank: the bare words and the phrases' words, operators and filters removed.
        required: groups of alternatives; a note is kept when, for every group, it contains one of them.
        excluded: words/phrases a kept note must not contain.
        sources, tags, paths: the inline filters (``source:``, ``tag:``, ``path:``), in query order.
    """

    text: str
    required: tuple[tuple[str, ...], ...] = ()
    excluded: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    paths: tuple[str, ...] = field(default=())

    @property
    def filters_text(self) -> bool:
        """Whether notes must be checked against their text (a required or excluded term)."""
        return bool(self.required or self.excluded)

    def keeps_text(self, plain: str) -> bool:
        """Whether a note whose plain text (title and body, see :func:`pipeline.search.snippet.clean_text`) is ``plain``
        passes the required and excluded terms. Both sides are compared in NFKC (as BM25 and tags compare them):
        ``"DuckDB を採用"`` is in ``ＤｕｃｋＤＢ　を採用``, and a phrase typed in NFD (macOS) is in a note written in NFC
        and the other way round."""
        folded = _fold(plain.replace("`", ""))                                 # inline code's backticks are markup
        if any(text_contains(folded, term) for term in self.excluded):
            return False
        return all(any(text_contains(folded, alt) for alt in group) for group in self.required)

    def held(self, plain: str) -> tuple[tuple[bool, ...], bool]:
        """What of the required and excluded terms a note's plain text holds, compared as :meth:`keeps_text`
        compares them (folded once): for each group of ``required`` whether the text holds one of its
        alternatives, and whether it holds an excluded term. ``keeps_text`` is ``all(groups) and not excluded``."""
        folded = _fold(plain.replace("`", ""))
        return (tuple(any(text_contains(folded, alt) for alt in group) for group in self.required),
                any(text_contains(folded, term) for term in self.excluded))

    def keeps_path(self, vault_path: str, source_path: str = "") -> bool:
        """Whether a note passes the ``path:`` filters (any of them; no filter: True). Both sides are compared in
        NFC (``path:ダウンロード`` typed in NFD matches a path stored in NFC and the other way round) and
        casefolded."""
        if not self.paths:
            return True
        vault_path, source_path = _nfc(vault_path), _nfc(source_path)
        for want in map(_nfc, self.paths):
            if any(c in want for c in "*?["):
                if fnmatch.fnmatchcase(vault_path, want) or fnmatch.fnmatchcase(vault_path.casefold(), want.casefold()):
                    return True
            elif vault_path.casefold().startswith(want.casefold()) or (
                    source_path and source_path.casefold().startswith(want.casefold())):
                return True
        return False


def _nfc(text: str) -> str:
    """``text`` in Unicode NFC (vault paths are NFC; a path typed on macOS may be NFD)."""
    return unicodedata.normalize("NFC", text)


def tag_problem(tag: str, subject: str | None = None) -> str | None:
    """Why ``tag`` can be no Obsidian tag (one line), or None: it has whitespace (also an ideographic space) inside,
    after its surrounding whitespace and ``#`` are dropped, or a comma between two tags (``journal,urgent``; with a
    comma, ``journal, urgent`` too, it names the separate tags to give). Such a filter never matches; such a frontmatter tag is
    broken. An empty tag is the caller's to refuse.

    Args:
        tag: the tag as given (``#`` optional).
        subject: how the message names it (default ``tag 'my tag'``; the CLI: ``--tag 'my tag'``).
    """
    words = tag.strip().lstrip("#").split()
    subject = subject or f"tag {tag.strip()!r}"
    if len(words) == 1 and "," in tag:              # 'journal,urgent': frontmatter's list written as one tag
        parts = [p.lstrip("#") for p in split_tag_list(tag) if p.lstrip("#")]
        if len(parts) >= 2:
            return (f"{subject} has a comma; Obsidian tags cannot contain commas or spaces "
                    f"(give {', '.join(map(repr, parts))} as {len(parts)} separate tags)")
    if len(words) < 2:
        return None
    if "," in tag:                      # a list of tags ('journal, urgent'), not one tag: 'journal,-urgent' is no fix
        parts = [p.lstrip("#") for p in split_tag_list(tag) if p.lstrip("#")]
        return (f"{subject} has a space; Obsidian tags cannot contain spaces or commas "
                f"(give {', '.join(map(repr, parts))} as {len(parts)} separate tags)")
    return (f"{subject} has a space; Obsidian tags cannot contain spaces "
            f"(use {'-'.join(words)} or {'/'.join(words)})")


def _fold(text: str) -> str:
    """``text`` as :func:`text_contains` compares it: NFKC (full-width Latin and half-width kana are the usual
    forms, NFD is NFC), whitespace collapsed (an ideographic space too), casefolded."""
    return " ".join(unicodedata.normalize("NFKC", text).split()).casefold()


def text_contains(folded_text: str, term: str) -> bool:
    """Whether ``folded_text`` (:func:`_fold`: NFKC, whitespace-collapsed, casefolded) contains ``term``: at word
    boundaries for Latin terms (``cat`` does not match ``category``; a CJK character beside it is a boundary:
    ``lora`` is in ``でloraを``), anywhere for terms with CJK characters."""
    t = _fold(term.replace("`", ""))
    if not t:
        return True
    if _CJK.search(t) or t not in folded_text:     # no need to compile a word-boundary pattern (~1-5 ms a term)
        return t in folded_text
    left = WORD_START if re.match(r"\w", t) else ""       # `LoRA` in `でLoRAを` is a word: CJK is no letter of it
    right = WORD_END if re.search(r"\w$", t) else ""
    return re.search(left + re.escape(t) + right, folded_text) is not None


#: what is trimmed from each end of a query's verbatim phrase: question marks and sentence punctuation
VERBATIM_TRIM = " ?!.,:;'\"()[]？！。、，：；「」『』（）"


def verbatim_terms(query: str) -> tuple[str, ...]:
    """What a page must contain (:func:`text_contains` of each) for ``query`` to be found in it verbatim, as
    quoted terms would be: for a query with CJK characters, each of its whitespace-separated parts (Japanese
    users separate keywords with spaces: ``山田さん 担当``; ``ダッシュボードの担当`` is one part); for another
    query of two words or more, the whole query as one phrase (``kubectl rollout restart``, ``warning-wombat``).
    Each end of a part loses its question marks and sentence punctuation, and a part of one character is left out
    (a particle written apart, `DuckDB で CSV を 読む`; one kanji is in too many pages to say anything).

    Returns:
        The terms, folded (:func:`_fold`); () for one Latin word (BM25 and the identifier lookup read it) and when
        no part is left.
    """
    folded = _fold(query.replace("`", ""))
    if _CJK.search(folded):
        return tuple(p for p in (part.strip(VERBATIM_TRIM) for part in folded.split(" ")) if len(p) >= 2)
    phrase = folded.strip(VERBATIM_TRIM)
    return (phrase,) if len(re.findall(r"\w+", phrase)) >= 2 else ()


def holds_verbatim(plain: str, terms: Sequence[str]) -> bool:
    """Whether the plain text ``plain`` (:func:`pipeline.search.snippet.clean_text`) contains every term of
    :func:`verbatim_terms` (compared as :meth:`ParsedQuery.keeps_text` compares quoted terms)."""
    folded = _fold(plain.replace("`", ""))
    return bool(terms) and all(text_contains(folded, term) for term in terms)


def _filter_value(key: str, value: str, negated: bool) -> str:
    """The value of a ``source:``/``tag:``/``path:`` filter as kept: a tag without ``#``, a path in NFC.

    Raises:
        QuerySyntaxError: an empty value, a negated filter, a tag with a space (:func:`tag_problem`).
    """
    if not value:
        raise QuerySyntaxError(f"empty filter {key}: in the query: give a value, e.g. "
                               f"{key}:{ {'source': 'duckdb', 'tag': 'journal', 'path': 'guides/'}[key]}")
    if negated:
        raise QuerySyntaxError(f"-{key}: is not supported: filters keep notes; use --source/--tag "
                               "to choose, or -word to exclude a word")
    if key == "tag":
        if problem := tag_problem(value, f'tag:"{value}" in the query'):
            raise QuerySyntaxError(problem)
        return value.lstrip("#")
    return _nfc(value) if key == "path" else value


def _scan(query: str) -> tuple[list[tuple[str, str, bool]], list[str], list[str], list[str]]:
    """The query's items ``(kind: word | phrase | or | filter, value, negated)`` in order (a filter's value is its
    key, ``tag``), and its ``source:``, ``tag:`` and ``path:`` filter values.

    Raises:
        QuerySyntaxError: an empty filter, a negated filter, a ``tag:"a b"`` with a space or an empty phrase.
    """
    items: list[tuple[str, str, bool]] = []      # (kind: word | phrase | or, value, negated)
    sources: list[str] = []
    tags: list[str] = []
    paths: list[str] = []
    pos = 0
    n = len(query)
    while pos < n:
        m = _TOKEN.match(query, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
        neg, key, inner, bare = m.group(1), m.group(2), m.group(4), m.group(5)
        quoted = inner
        if m.group(3) is None and not key and not neg:
            continue                                  # trailing whitespace
        if key:
            value = (inner if quoted is not None else bare or "").strip()
            {"source": sources, "tag": tags, "path": paths}[key.lower()].append(
                _filter_value(key.lower(), value, bool(neg)))
            items.append(("filter", key.lower(), False))     # where it stood, for an OR beside it (_drop_filters)
            continue
        if quoted is not None:
            if not inner.strip():
                raise QuerySyntaxError('empty phrase "" in the query: put words between the quotes')
            items.append(("phrase", " ".join(inner.split()), bool(neg)))
            continue
        if bare is None:                              # a lone "-"
            continue
        if bare == "OR" and not neg:
            items.append(("or", "OR", False))
            continue
        if neg and bare.startswith("-"):              # `--warp-speed`, `--`: a word (a CLI flag), not `-` + `-word`
            items.append(("word", neg + bare, False))
            continue
        if neg and bare:
            items.append(("word", bare, True))
        elif not neg:
            items.append(("word", bare, False))
    return items, sources, tags, paths


#: quote characters read as ``"``: smart quotes (U+201C, U+201D, U+201E) and the full-width one (U+FF02)
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\uff02": '"'})
#: a full-width minus that starts a word: U+FF0D (Windows' IME) or U+2212 (macOS' Japanese input, whose full-width
#: minus is the MINUS SIGN: `−便利` excluded nothing)
_WIDE_MINUS = re.compile(r"(^|\s)[\uff0d\u2212]")
#: a filter key typed in full-width letters (a Japanese IME in full-width mode: ``ｔａｇ：日記``), either colon
_WIDE_KEY = re.compile(r"(?i)(^|\s|-|\uff0d|\u2212)(ｓｏｕｒｃｅ|ｔａｇ|ｐａｔｈ)([:\uff1a])")
_WIDE_COLON = re.compile(r"(?i)(^|\s|-|\uff0d|\u2212)(source|tag|path)\uff1a")
#: ``ＯＲ`` in full-width letters, as a word of its own
_WIDE_OR = re.compile(r"(?<!\S)ＯＲ(?!\S)")


#: invisible characters a query pasted from a web page or a note may hold (zero-width space, word joiner, BOM, soft
#: hyphen): ``Excel\u200bの読み込み`` read as two words that no note has together (found by a note-taker, session 37).
#: Not the zero-width joiner, which holds emoji sequences (a tag `#👨‍💻`) together.
INVISIBLE = str.maketrans("", "", "\u200b\u2060\ufeff\u00ad")


def _drop_filters(items: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    """``items`` without the filters' places, and without an ``OR`` between two filters of one key (``tag:a OR
    tag:b``, Obsidian's way to write it): filters of one key already match any of their values. Before session 38
    that query was an error ("OR needs a word or a phrase on both sides").

    Raises:
        QuerySyntaxError: an ``OR`` between filters of two keys (``tag:a OR source:b``): filters of different keys
            all apply.
    """
    out: list[tuple[str, str, bool]] = []
    for i, item in enumerate(items):
        if item[0] != "or":
            if item[0] != "filter":
                out.append(item)
            continue
        before, after = items[i - 1] if i else None, items[i + 1] if i + 1 < len(items) else None
        if before is not None and after is not None and before[0] == after[0] == "filter":
            if before[1] == after[1]:
                continue
            raise QuerySyntaxError(
                f"OR between a {before[1]}: and a {after[1]}: filter: filters of different kinds all apply; OR "
                f"works between words or phrases, or between filters of one kind (tag:a OR tag:b, the same as "
                f"tag:a tag:b)")
        out.append(item)
    return out


def ascii_syntax(query: str) -> str:
    """``query`` with its typed syntax characters as the ASCII ones the parser reads (module docstring): smart and
    full-width quotes -> ``"``, a full-width minus starting a word -> ``-``, ``tag：`` and ``ｔａｇ：`` -> ``tag:``
    (a key in full-width letters too), ``ＯＲ`` -> ``OR``; the :data:`INVISIBLE` characters dropped; the rest as
    is."""
    query = query.translate(_QUOTES).translate(INVISIBLE)
    if not query.isascii():
        query = _WIDE_KEY.sub(lambda m: f"{m.group(1)}{unicodedata.normalize('NFKC', m.group(2))}:", query)
        query = _WIDE_OR.sub("OR", query)
    query = _WIDE_COLON.sub(lambda m: f"{m.group(1)}{m.group(2)}:", query)
    return _WIDE_MINUS.sub(r"\1-", query)


def parse_query(query: str) -> ParsedQuery:
    """Parse the query syntax (see the module docstring).

    Args:
        query: what the user typed.

    Returns:
        The parsed query. ``text`` is empty only for a query of filters (and exclusions): ``tag:recipe``,
        ``path:notes/ -draft`` lists the notes that pass them (:meth:`pipeline.search.searcher.Searcher.search`).

    Raises:
        QuerySyntaxError: an unclosed ``"``, an empty filter (``tag:``), a tag with a space (``tag:"a b"``), an
            ``OR`` without a term on both sides, an empty phrase, or a query of only exclusions (nothing to rank or
            list).
    """
    query = ascii_syntax(query)
    if query.count('"') % 2:
        raise QuerySyntaxError('unclosed " in the query: close the phrase, e.g. "exact words", or drop the quote')
    items, sources, tags, paths = _scan(query)
    items = _drop_filters(items)
    # OR groups
    groups: list[list[tuple[str, str]]] = []
    excluded: list[str] = []
    pending_or = False
    for i, (kind, value, negated) in enumerate(items):
        if kind == "or":
            if not groups or pending_or or i == len(items) - 1 or items[i + 1][0] == "or" or items[i + 1][2] \
                    or items[i - 1][2]:
                raise QuerySyntaxError("OR needs a word or a phrase on both sides, e.g. \"sync\" OR \"backup\"")
            pending_or = True
            continue
        if negated:
            excluded.append(value)
            continue
        if pending_or:
            groups[-1].append((kind, value))
            pending_or = False
        else:
            groups.append([(kind, value)])
    required = tuple(tuple(v for _, v in g) for g in groups if any(k == "phrase" for k, _ in g))
    text = " ".join(v for g in groups for _, v in g)
    if not text.strip() and not (sources or tags or paths):
        raise QuerySyntaxError("nothing to search for: the query has only exclusions; add words or a filter, e.g. "
                               "`sync -mobile` or `tag:howto -mobile`")
    return ParsedQuery(text=text, required=required, excluded=tuple(excluded), sources=tuple(sources),
                       tags=tuple(tags), paths=tuple(paths))
