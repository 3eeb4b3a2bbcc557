"""Clean, readable snippets of Markdown chunks: what a search hit shows (CLI, ``--json``, MCP ``text``).

:func:`clean_text` turns a chunk's Markdown into one line of plain text: fenced and indented code becomes inline
code (`` `SELECT 1` ``, the language tag dropped), callout markers (``> [!note] Title``) and quote markers go,
HTML comments and Obsidian's ``%%comments%%`` go, HTML tags lose their attributes and markup (``<img … alt="x">`` disappears, ``<b>x</b>`` -> ``x``), footnote markers go (``[^1]``; a footnote's text stays), links keep their
text (``[text](url)`` -> ``text``, also a link a chunk boundary cut, ``text](url)`` or ``[text](ur``; ``[[Note|alias]]`` and, in a table row, ``[[Note\\|alias]]`` -> ``alias``), images
and embeds of files go, an embedded note shows as its name (``![[Note#Part]]`` -> ``Note``), emphasis, heading and list markers go. :func:`cut_around` cuts such a line to about ``width``
characters around the first query match, at a sentence start when one is near, else at a word boundary; cut ends are
marked with ``…``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pipeline.common.display import char_start, one_line
from pipeline.common.markdown import EMBED, IMAGE, LINK, WIKILINK, code_lines, replace_code, wikilink_text

__all__ = ["clean_text", "cut_around", "heading_at", "make_snippet", "match_position", "plain_heading",
           "strip_controls"]

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_OBSIDIAN_COMMENT = re.compile(r"%%.*?(?:%%|\Z)", re.DOTALL)   # ``%%hidden%%``: Obsidian does not show it either
_HTML_BLOCK_DROP = re.compile(r"<(script|style)\b[^>]*>.*?(?:</\1\s*>|\Z)", re.IGNORECASE | re.DOTALL)
_HTML_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:-]*(?:\s+(?:[^<>\"']|\"[^\"]*\"|'[^']*')*)?/?>")
#: tags of HTML's inline (phrasing) elements: removed without a space, so ``H<sub>2</sub>O`` reads ``H2O`` and
#: ``<u>underline</u>, <mark>marked</mark>`` reads ``underline, marked`` (other tags separate words: `` ``)
_INLINE_HTML_TAG = re.compile(r"</?(?:a|abbr|b|bdi|bdo|cite|code|data|del|dfn|em|font|i|ins|kbd|mark|q|s|samp|small|"
                              r"span|strong|sub|sup|time|u|var)(?:\s+(?:[^<>\"']|\"[^\"]*\"|'[^']*')*)?/?>",
                              re.IGNORECASE)
_CALLOUT = re.compile(r"^[ \t]*(?:>[ \t]*)+\[![^\]\n]*\][+-]?[ \t]*", re.MULTILINE)
_QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+", re.MULTILINE)
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.MULTILINE)
_LIST = re.compile(r"^[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?", re.MULTILINE)
_RULE = re.compile(r"^[ \t]*(?:[-*_][ \t]*){3,}$", re.MULTILINE)
#: a table's delimiter row: cells of 2+ hyphens, or of one (``|-|-|``, as GFM and Obsidian take it: the help's tables
#: showed ``Action | Shortcut | - | - | Insert new line`` in snippets) between pipes
_TABLE_SEP = re.compile(r"^[ \t]*\|?[ \t]*:?-{2,}:?[ \t]*(?:\|[ \t]*:?-{2,}:?[ \t]*)*\|?[ \t]*$"
                        r"|^[ \t]*\|?(?:[ \t]*:?-+:?[ \t]*\|)+(?:[ \t]*:?-+:?)?[ \t]*$", re.MULTILINE)
_REF_LINK = re.compile(r"\[([^\]\n]+)\]\[[^\]\n]*\]")
_FOOTNOTE_DEF = re.compile(r"^[ \t]*\[\^[^\]\n]+\]:[ \t]*", re.MULTILINE)   # ``[^1]: text`` -> ``text``
_FOOTNOTE_REF = re.compile(r"\[\^[^\]\n]+\]")                                # ``word[^1]`` -> ``word``
_INLINE_FOOTNOTE = re.compile(r"\^\[([^\]\n]+)\]")                          # Obsidian's ``^[text]`` -> ``text``
_EMPHASIS = re.compile(r"(\*\*|__|~~|==)(?=\S)(.+?)(?<=\S)\1")
_STAR = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
#: the tail of a link whose ``[`` is in the chunk before (a sentence too long for one chunk is cut between its
#: words: ``プレイグラウンド](https://…800 characters…)で、``): its text stays, its target goes, as a whole link's does
_LINK_TAIL = re.compile(r"\A([^\[\]\n]*)\]\((?:[^()\n]|\([^)\n]*\))*\)")
#: the head of a link whose target runs into the next chunk (``[docs](https://exa`` at the chunk's end): its text stays
#: a link whose text runs over one line break, as CommonMark allows: ``[![avatar](a.png)\nashmaroli](url)`` (the
#: image gone first) showed as ``[ ashmaroli](https://github.com/ashmaroli)`` (LINK reads a one-line text only)
_LINK_WRAPPED = re.compile(r"\[([^\[\]\n]*\n[^\[\]\n]*)\]\((?:[^()\n]|\([^)\n]*\))*\)")
_LINK_HEAD = re.compile(r"\[([^\[\]\n]+)\]\((?:[^()\n]|\([^)\n]*\))*\Z")
_ENTITY = {"&nbsp;": " ", "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'"}


_FILE_EXT = re.compile(r"\.[A-Za-z0-9]{1,8}$")


def _embed_text(m: re.Match[str]) -> str:
    """An embed as a snippet shows it: a note's (``![[Guide#Install]]``, no file extension or ``.md``) as the
    note's name, as a link to it reads (``See ![[Guide#Install]].`` read ``See .``); a file's (image, PDF, canvas)
    goes."""
    target = re.split(r"\\?\|", m.group(0)[3:-2], maxsplit=1)[0]
    name = target.split("#")[0].strip() or target.strip().lstrip("#")
    if name.lower().endswith(".md"):
        name = name[:-3]
    elif _FILE_EXT.search(name):
        return " "
    return name or " "


#: :func:`clean_text`'s substitutions in order: (a string every match contains, or "" to run it always; pattern;
#: replacement)
_STEPS: tuple[tuple[str, re.Pattern[str], Any], ...] = (
    ("<", _COMMENT, " "),
    ("%%", _OBSIDIAN_COMMENT, " "),
    ("<", _HTML_BLOCK_DROP, " "),
    ("![", IMAGE, " "),
    ("![", EMBED, _embed_text),
    ("<", _INLINE_HTML_TAG, ""),
    ("<", _HTML_TAG, " "),
    (">", _CALLOUT, ""),
    (">", _QUOTE, ""),
    ("-", _TABLE_SEP, " "),
    ("", _RULE, " "),
    ("#", _HEADING, ""),
    ("", _LIST, ""),
    ("[^", _FOOTNOTE_DEF, ""),
    ("[^", _FOOTNOTE_REF, ""),
    ("^[", _INLINE_FOOTNOTE, r"\1"),
    ("[", WIKILINK, wikilink_text),
    ("[", LINK, r"\1"),
    ("[", _LINK_WRAPPED, r"\1"),
    ("[", _REF_LINK, r"\1"),
    ("](", _LINK_TAIL, r"\1"),
    ("](", _LINK_HEAD, r"\1"),
)

#: what a terminal would act on: escape sequences (CSI ``ESC [ … letter``, OSC ``ESC ] … BEL``) and the other
#: control characters (C0 but tab and newline, DEL, C1). A page carrying them must not drive the terminal of whoever
#: reads its snippet; ``--json`` and MCP consumers print the text too, so they are removed, not escaped. An OSC
#: left unclosed ends with its line (it took the rest of a note's text with it).
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"
                      r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_controls(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (tab and newline kept)."""
    return _CONTROL.sub("", text)


def plain_heading(heading: str) -> str:
    """A heading as a search hit shows it: its HTML tags, comments and control characters removed, entities
    decoded, links as their text (``[Install](https://x)``, ``<a href="x">Install</a>`` -> ``Install``;
    ``[[Page|Alias]]`` -> ``Alias``), images and embeds removed, whitespace collapsed as
    :func:`~pipeline.common.display.one_line` does (``Install <Badge text="beta"/>`` -> ``Install``; ``a < b``
    stays; ``第１章\u3000はじめに`` keeps its ideographic space). Its other Markdown is kept (a heading's ``__init__.py`` is a
    name, not emphasis)."""
    text = strip_controls(heading)
    if "<" in text:
        for pattern, repl in ((_COMMENT, " "), (_INLINE_HTML_TAG, ""), (_HTML_TAG, " ")):
            text = pattern.sub(repl, text)
    if "[" in text:
        for pattern, repl in ((IMAGE, " "), (EMBED, " "), (WIKILINK, wikilink_text), (LINK, r"\1"),
                              (_REF_LINK, r"\1")):
            text = pattern.sub(repl, text)
    if "&" in text:
        for entity, char in _ENTITY.items():
            text = text.replace(entity, char)
    return one_line(text)


_ATX_LINE = re.compile(r"[ \t]{0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*")


def heading_at(text: str, pos: int) -> str | None:
    """The heading of the last ATX heading line (``## Use``; not in a code fence) of a chunk's ``text`` that
    starts at or before offset ``pos``, as written (:func:`plain_heading` makes it a shown heading); None when
    there is none.
    A chunk of several small sections merged (``## Setup`` … ``## Use`` …) has only their common parent in its
    heading path; this names the section a match in it is in."""
    found = None
    at = 0
    for is_code, line in code_lines(text.split("\n")):
        if at > pos:
            break
        if not is_code and "#" in line:
            m = _ATX_LINE.fullmatch(line)
            if m:
                found = m.group(1)
        at += len(line) + 1
    return found


_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
#: a letter, digit or ``_`` that is not CJK: what a Latin word may not touch. Japanese writes English words right
#: against kana and kanji (``でLoRAを``), where ``\b`` sees no boundary (both sides are ``\w``); a regex class in
#: ``(?-i:...)``: under IGNORECASE the compiler would case-fold its 40k CJK characters (4.6 against 1.5 ms a
#: compile, and every query's term pattern is new)
LATIN_WORD_CHAR = "(?-i:[^\\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af])"
_LATIN_WORD_CHAR = re.compile(LATIN_WORD_CHAR)
#: the start and end of a Latin word (``\b`` that counts CJK characters as outside the word)
WORD_START, WORD_END = f"(?<!{LATIN_WORD_CHAR})", f"(?!{LATIN_WORD_CHAR})"
#: a Markdown backslash escape: ``\`` before ASCII punctuation but ``|`` (CommonMark), e.g. ``\_`` and ``\#``
#: written by the HTML converter so that text does not read as Markdown syntax
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{}~])")      # not ``\|``: a table cell's pipe, which the steps read
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])")
#: the end of a Japanese / Chinese clause (``、`` ``，`` ``；`` ``：``): where a cut of CJK text without a sentence end
#: or a space in reach goes, rather than mid-word (``…ヒーを淹れて`` of ``コーヒーを淹れて``)
_CLAUSE_END = re.compile("(?<=[\u3001\uff0c\uff1b\uff1a])")


def width_insensitive(term: str) -> str:
    """A regex of ``term`` (escaped) that also matches it written in full-width characters: each printable ASCII
    character as a class of it and its full-width form (``db`` -> ``[dｄ][bｂ]``; with IGNORECASE ``ＤＢ`` too).
    Japanese pages write Latin words in full width (``ＤｕｃｋＤＢ``), which BM25 reads as ``duckdb`` (NFKC); a
    query's ``duckdb`` found such a page but neither placed its snippet nor was highlighted there."""
    out = []
    for ch in term:
        if "!" <= ch <= "~":
            wide = chr(ord(ch) + 0xFEE0)
            out.append(f"[{re.escape(ch)}{wide}]" if ch not in "\\]^-" else f"(?:{re.escape(ch)}|{wide})")
        else:
            out.append(re.escape(ch))
    return "".join(out)


def clean_text(markdown: str) -> str:
    """One line of plain text from Markdown (see the module docstring); whitespace collapsed, code kept as
    `` `inline code` `` (its inner whitespace collapsed too), both by :func:`~pipeline.common.display.one_line`: a
    run of only ideographic (``\\u3000``) or no-break spaces stays as written (``[[プロジェクト\\u3000計画]]`` keeps
    its space: with an ASCII one it would name a note the vault does not have)."""
    codes: list[str] = []

    def keep(code: str, pad: str = " ") -> str:
        code = one_line(code)
        if not code:
            return pad
        codes.append(f"`{code}`")
        return f"{pad}\x00{len(codes) - 1}\x00{pad}"

    text = strip_controls(markdown.replace("\r\n", "\n"))
    text = replace_code(text, keep)
    # each pattern only where its marker occurs (_STEPS): the same text, without ~20 regex passes over every chunk
    # of every hit (20 snippets per search: 2-3 ms of a 25 ms query)
    if "`" in text:
        text = _INLINE_CODE.sub(lambda m: keep(m.group(2), ""), text)
    escaped: list[str] = []         # `\_`, `\#`, `\*`: the character itself, never a marker (CommonMark; not in code)
    if "\\" in text:
        def hold(m: re.Match[str]) -> str:
            escaped.append(m.group(1))
            return f"\x01{len(escaped) - 1}\x01"

        text = _ESCAPE.sub(hold, text)
    for marker, pattern, repl in _STEPS:
        if marker in text:                          # "" is in every text
            text = pattern.sub(repl, text)
    for _ in range(2):                               # nested: **_x_**
        if "*" in text or "_" in text or "~" in text or "=" in text:
            text = _EMPHASIS.sub(r"\2", text)
        if "*" in text:
            text = _STAR.sub(r"\1", text)
    for entity, char in _ENTITY.items():
        text = text.replace(entity, char)
    text = text.replace("|", " | ")
    text = one_line(text)               # an ideographic space stays: `[[プロジェクト　計画]]` names that note
    text = re.sub(r"(?:\| )+\|", "|", text).strip(" |")
    if codes:
        text = re.sub(r"\x00(\d+)\x00", lambda m: codes[int(m.group(1))], text)
    if escaped:
        text = re.sub(r"\x01(\d+)\x01", lambda m: escaped[int(m.group(1))], text)
    return text


def _terms(query: str, extra_terms: Iterable[str]) -> list[str]:
    from pipeline.index.analysis import STOPWORDS_EN

    query = unicodedata.normalize("NFKC", query)        # ＤｕｃｋＤＢ typed: width_insensitive matches both forms
    terms = {w.casefold() for w in re.findall(r"\w+", query)} | {t.casefold() for t in extra_terms}
    return sorted((t for t in terms if t and t not in STOPWORDS_EN and (len(t) >= 2 or _CJK.search(t))),
                  key=lambda t: (-len(t), t))


#: characters after a match that count as "near it" when matches are weighed by how many query terms they gather
MATCH_WINDOW = 160


def match_position(text: str, query: str, extra_terms: Iterable[str] = (), window: int = MATCH_WINDOW
                   ) -> int | None:
    """Offset of the query match in ``text`` that starts the shortest run of matches holding the most distinct
    query terms that fit in ``window`` chars and cross no Markdown heading line (the first such run on a tie), or
    None without a match. Latin terms match at a word start, CJK anywhere.

    In a long chunk, the first match is rarely the best one. The chunk of ``"quoted line 40"`` starts at
    ``quoted line 20``: that line has two of the three terms, line 40 has all three. ``window`` 0 gives the
    first match of any term."""
    terms = _terms(query, extra_terms)
    if not terms:
        return None
    matches = term_matches(text, terms)
    if not matches:
        return None
    if window <= 0 or len(terms) < 2:
        return matches[0][0]
    def one_section(start: int, end: int) -> bool:      # raw Markdown: a run does not cross a heading line
        return "\n#" not in text[start:end]

    for target in range(len({t for _, t in matches}), 1, -1):
        span = _shortest_span(matches, target, one_section)
        if span is not None and span[1] <= window:
            return span[0]
    return matches[0][0]


def term_matches(text: str, terms: Sequence[str]) -> list[tuple[int, str]]:
    """``(offset, casefolded match)`` of every non-overlapping match of ``terms`` in ``text``, left to right,
    ignoring case: a term with a CJK character anywhere, a Latin term at a Latin word start (:data:`WORD_START`);
    at one offset the first term of ``terms`` that matches there.

    Equal to ``re.finditer`` of the terms' alternation with :data:`WORD_START` before each Latin one, but the word
    start is checked here: that pattern holds the class once per term and is new for every query (~50 ms to
    compile for a long question with its synonyms, more than the rest of a search)."""
    pattern = _term_alternation(tuple(terms))
    # a Latin word written in full width (ＤｕｃｋＤＢ) is matched in the text read as ASCII, one character for one
    # (offsets kept); a regex of width classes (:func:`width_insensitive`) lost its literal search: +4 ms a query.
    # Half-width katakana (ｺｰﾋｰ, ﾌﾟ) is read in full width in the same pass, its voiced marks combining (NFD)
    folded = text.translate(_WIDTH_FOLD)
    found: list[tuple[int, str]] = []
    pos = 0
    while (m := pattern.search(folded, pos)) is not None:
        start = m.start()
        if m.lastgroup == "latin" and start > 0 and _LATIN_WORD_CHAR.match(folded, start - 1):
            pos = start + 1                  # inside a Latin word: no term starts here (a CJK one was tried first)
            continue
        found.append((start, text[start:m.end()].casefold()))
        pos = max(m.end(), start + 1)
    return found


#: the full-width forms of the printable ASCII characters (U+FF01-U+FF5E: ＤｕｃｋＤＢ) -> those characters
_FULL_WIDTH_TO_ASCII = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)}
#: the half-width katakana and its punctuation (U+FF61-U+FF9F: ｺｰﾋｰ, ｡) -> their full-width forms, one character
#: for one (NFKC, the voiced marks ﾞ ﾟ as the combining U+3099 U+309A: ﾌﾟ reads as プ in NFD)
_HALF_WIDTH_KANA_FOLD = {c: ord(unicodedata.normalize("NFKC", chr(c))) for c in range(0xFF61, 0xFFA0)}
_WIDTH_FOLD = {**_FULL_WIDTH_TO_ASCII, **_HALF_WIDTH_KANA_FOLD}
#: what :func:`half_width_kana` writes for a full-width character: the inverse of :data:`_HALF_WIDTH_KANA_FOLD`
_TO_HALF_WIDTH_KANA = {v: k for k, v in _HALF_WIDTH_KANA_FOLD.items()}


def half_width_kana(term: str) -> str:
    """``term`` with its katakana (and ー ・) in half width, a voiced one as two characters (``コーヒー`` -> ``ｺｰﾋｰ``,
    ``プ`` -> ``ﾌﾟ``); hiragana, kanji and the rest as they are. How a note typed with a half-width IME, or pasted
    from an old system, writes a word that BM25 reads in NFKC: the CLI highlights that form too."""
    out: list[str] = []
    kana = False                        # the last character was katakana made half width: a voiced mark follows it
    for ch in unicodedata.normalize("NFD", term):
        half = _TO_HALF_WIDTH_KANA.get(ord(ch))
        kana = half is not None and ("\u30a0" <= ch <= "\u30ff" or (kana and ch in "\u3099\u309a"))
        out.append(chr(half) if kana and half is not None else ch)
    return unicodedata.normalize("NFC", "".join(out))


@functools.lru_cache(maxsize=64)
def _term_alternation(terms: tuple[str, ...]) -> re.Pattern[str]:
    """:func:`term_matches`' alternation of ``terms``. A CJK term and a Latin one match at the same offset only
    when the CJK one is the longer (a Latin term has no CJK character), which the terms' order (longest first)
    would try first: so CJK terms go first."""
    cjk = "|".join(re.escape(v) for t in terms if _CJK.search(t)
                   for v in dict.fromkeys((t, unicodedata.normalize("NFD", t)))) or "(?!)"   # ﾌﾟ folded is NFD
    latin = "|".join(re.escape(t) for t in terms if not _CJK.search(t)) or "(?!)"
    return re.compile(f"(?P<cjk>{cjk})|(?P<latin>{latin})", re.IGNORECASE)


def _shortest_span(matches: Sequence[tuple[int, str]], target: int,
                   allowed: Callable[[int, int], bool] = lambda start, end: True) -> tuple[int, int] | None:
    """``(start, length)`` of the shortest run of ``matches`` (``(offset, term)``, by offset) holding ``target``
    distinct terms that ``allowed(start, end)`` accepts (the first such run on a tie; length from its first
    match's start to its last's), or None."""
    best: tuple[int, int] | None = None
    counts: dict[str, int] = {}
    lo = 0
    for hi, (end, term) in enumerate(matches):
        counts[term] = counts.get(term, 0) + 1
        while len(counts) >= target:
            start, first = matches[lo]
            if len(counts) == target and (best is None or end - start < best[1]) and allowed(start, end):
                best = (start, end - start)
            counts[first] -= 1
            if not counts[first]:
                del counts[first]
            lo += 1
    return best


def cut_around(text: str, pos: int | None, width: int) -> str:
    """About ``width`` chars of the one-line ``text`` around offset ``pos`` (None: from the start).

    The cut starts at the start of the sentence holding ``pos`` when that is within ``width // 2`` before it, else
    about ``width // 3`` before ``pos`` at a word boundary; it ends at the last sentence end in the window's second
    half, else at a word boundary (CJK text without spaces: after a clause's ``、`` or ``，``, else at ``width``).
    ``…`` marks each cut end; the result is at most ``width + 2`` chars.
    """
    if len(text) <= width:
        return text
    if pos is None or pos < 0:
        start = 0
    else:
        start = max(0, pos - width // 3)
        sentence = None
        for m in _SENTENCE_END.finditer(text, max(0, pos - width // 2), pos + 1):
            if m.end() <= pos:
                sentence = m.end()
        if sentence is not None:
            start = sentence
        elif start > 0:
            space = text.find(" ", start, pos)
            if space != -1:
                start = space + 1
            elif (m := _CLAUSE_END.search(text, start, pos)) is not None:
                start = m.end()      # CJK without a space: after a 、 (not …ヒーを淹れて, mid-word)
    end = min(len(text), start + width)
    start = max(0, min(start, end - width)) if end == len(text) else start
    if start > 0 and end == len(text) and text[start - 1] != " ":
        space = text.find(" ", start, start + 30)
        if space != -1:
            start = space + 1
        elif (m := _SENTENCE_END.search(text, start, start + 30)) is not None:
            start = m.end()          # Japanese has no spaces: after a 。 (it began mid-sentence: "…が続きます。")
        elif (m := _CLAUSE_END.search(text, start, start + 30)) is not None:
            start = m.end()          # else after a 、
    if end < len(text):
        best = None
        for m in _SENTENCE_END.finditer(text, start + width // 2, end + 1):
            if m.start() <= end:
                best = m.start()
        if best is None:
            space = text.rfind(" ", start + width // 2, end + 1)
            best = space if space != -1 else end
            if space == -1:      # CJK without a space: after the window's last 、, not mid-word
                for m in _CLAUSE_END.finditer(text, start + width // 2, end + 1):
                    best = m.end()
        end = best
    # never between a character and its combining marks (a note written in NFD: ズンドコ's voiced marks apart)
    end = char_start(text, end, start)
    while 0 < start < end and char_start(text, start) != start:
        start += 1
    body = text[start:end].strip()
    if body.count("`") % 2:                          # cut inside a code span: close it
        body = body + "`" if end < len(text) else "`" + body
    return ("…" if start > 0 else "") + body + ("…" if end < len(text) else "")


def make_snippet(text: str, query: str, extra_terms: Iterable[str] = (), width: int = 240,
                 fallback_terms: Sequence[str] = ()) -> str:
    """Clean ``text`` (:func:`clean_text`) and cut it to about ``width`` chars around the query match that
    gathers the most query terms (:func:`match_position`, :func:`cut_around`); no match of the query or ``extra_terms``: around the first of ``fallback_terms`` (a
    Japanese question's English translation on an English page), else from the start."""
    flat = clean_text(text)
    if len(flat) <= width:
        return flat
    pos = match_position(flat, query, extra_terms)
    if pos is None and fallback_terms:
        pos = match_position(flat, "", fallback_terms)
    return cut_around(flat, pos, width)
