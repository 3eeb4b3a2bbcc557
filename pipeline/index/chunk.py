"""Notes -> chunks: heading sections, split to fit the embedding model's window, with stable ids.

How a note body becomes chunks:

1. A leading YAML frontmatter block left in the body is skipped (it is metadata, never a setext heading).
2. markdown-it-py parses the body; its top-level block tokens give headings (ATX and setext: it knows fences of
   any length, ``~~~``, lists, quotes, so ``# comment`` in code and ``---`` after a list item are not headings)
   and line ranges, used to slice the *original* text: chunk text is always a verbatim substring of the body.
   A thematic break (``---``, ``***``) is no block of its own: a setext heading right after one
   (``---\nTitle\n-----``) heads its section, never merged away with a "section" holding only the rule.
3. Sections run from one heading to the next. ``heading_path`` = the headings above, outermost first; an H1 equal
   to the note title (NFKC, case-folded, runs of whitespace as one space; also without the #tags that end it) is
   dropped from paths; an empty heading adds no path element.
4. Tiny sections (body < ``min_tokens``) are merged with the following section(s) while the result fits. The merged
   chunk's text runs verbatim from the first section's body through the later sections (their heading lines
   included) and its ``heading_path`` is the longest common prefix of the merged paths, so a breadcrumb never
   claims text for a heading it is not under (parent + child -> the parent's path; siblings -> their parent's).
   When that path leaves out the first section's own heading (siblings), the text starts at that heading's
   line, so the heading stays in the chunk (``## Setup`` + text + ``## Use`` + text lost the word "Setup").
   A section without body that cannot merge is dropped when the next section lies under it (its heading lives on
   in that section's breadcrumb), else kept as a breadcrumb-only chunk. A section without body whose heading
   adds nothing to the path (the H1 equal to the title, an empty heading) is dropped before the next section
   and never merged: merged, the common prefix ``()`` lost the next section's heading (``# Title`` +
   ``## Setup`` + text was one chunk with heading "").
5. A section too large for one chunk is split into pieces of whole atoms: sentences of prose blocks
   (``split_sentences``), whole code blocks and tables (or their lines when one alone is too large; a single line
   that is too large is cut by characters). A piece ends preferably at a block (paragraph) boundary when that keeps
   it at least half full, else at a sentence end. When a cut falls inside a block (mid-paragraph), the next piece
   starts with the previous piece's last whole sentences totalling ≤ ``overlap_tokens``; a cut at a block boundary
   has no overlap (the new paragraph starts fresh).
6. ``count_tokens(chunk.embed_text) <= max_tokens`` holds for every chunk (a breadcrumb longer than half the budget
   is shortened with "…"), and so does ``len(chunk.embed_text) <= max_tokens * MAX_CHARS_PER_TOKEN``: a WordPiece
   tokenizer reads any word longer than 100 characters as one ``[UNK]``, so a note that is one 2,000,000-character
   run without spaces (minified text, a pasted base64 image) counted 3 tokens and became one 2 MB chunk, re-embedded
   for minutes on every change. The character cap (8,192 for 256 tokens) is above every chunk of the five shared
   corpora (the longest: 4,331 characters), so it cuts only such runs.
7. ``chunk_id = stable_id(note_id, " > ".join(heading_path), str(piece))`` where ``piece`` is the piece index
   within the section; when the same heading path text occurs again in the note, its occurrence index n ≥ 1 is
   added as a fourth part (``stable_id(note_id, path, str(piece), str(n))``). Paths are compared as that joined
   text, so ``## Settings > Privacy`` and ``## Settings`` + ``### Privacy`` (the same text) never share an id: the
   later one is occurrence 1. ``ordinal`` is the position in the note.
8. A note whose body has no text gives one chunk (breadcrumb = title, text = ``note.description`` or "") so that
   a frontmatter-only note stays findable; a note with neither title nor body nor description gives no chunk.
   When that body has headings other than the title's H1 (``# Quagga heading`` under ``title: Beta note``), their
   breadcrumb-only chunks are kept (after the description's chunk when there is a description), so the headings'
   words stay indexed.
9. A note gives at most ``max_chunks`` chunks (:data:`MAX_CHUNKS_PER_NOTE`): its first ones, in note order (the
   same chunks, ids included, as without the cap), and chunking stops there, so one huge note (a 4 MB log pasted
   into a vault: ~4,000 chunks) costs bounded chunking and embedding time and cannot crowd every other note out of
   the lanes. The note itself is untouched (whole in the vault, readable with ``docsvault read``); ``warnings``
   gets one line naming it, the first section left out, and what to do.
"""

from __future__ import annotations

import re
import string
import unicodedata
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import yaml
from markdown_it import MarkdownIt

from pipeline.common.display import char_start
from pipeline.common.markdown import (
    QUOTE_PREFIX,
    TABLE_DELIMITER,
    code_lines,
    excalidraw_text,
    is_excalidraw,
    without_heading_tags,
)
from pipeline.models import Chunk, Note, stable_id

__all__ = ["MAX_CHARS_PER_TOKEN", "MAX_CHUNKS_PER_NOTE", "chunk_note", "split_sentences"]

MAX_CHUNKS_PER_NOTE = 1_500
#: a chunk's ``embed_text`` holds at most ``max_tokens`` x this many characters (rule 6)
MAX_CHARS_PER_TOKEN = 32
"""Most chunks one note gives. Above every page of the five real corpora (the largest, DuckDB's C API reference
(221 kB), gives 1,159 chunks with all-MiniLM-L6-v2; most pages give under 100) and about a minute of embedding at the
measured 25-35 chunks/s on 2 cores; a 4 MB note would give ~4,000."""

#: block structure only: the chunker reads block tokens (types, line maps, a heading's ``content``), never the
#: inline tokens, so the core "inline" pass is off (same blocks on all 1,931 notes of the five corpora; about half
#: the parse time)
_MD = MarkdownIt("commonmark").enable("table").disable("inline")
_FRONTMATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?---[ \t]*(?:\n|\Z)", re.DOTALL)

# ---------------------------------------------------------------------------------------------------------------
# sentences
# ---------------------------------------------------------------------------------------------------------------
_JA_TERMINATORS = "。｡！？"
_ASCII_TERMINATORS = ".!?"
_CLOSERS = "」』）)】〕］]\"'”’»"
_BRACKETS = {"「": "」", "『": "』", "（": "）", "【": "】"}
_BRACKET_SPAN = 200  # chars: a bracket pair longer than this (or unclosed) does not protect its inside
_ABBREVIATIONS = frozenset({"e.g", "i.e", "etc", "vs", "cf", "fig", "no", "approx", "mr", "mrs", "dr", "st"})
_JA_CHAR = re.compile("[\u3041-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_BLOCK_START = re.compile(r"[ \t]{0,3}(?:[-*+][ \t]|\d{1,9}[.)][ \t]|>|\||#{1,6}[ \t])")
_WORD_CHARS = frozenset(string.ascii_letters + ".")     # a word before a period: an abbreviation is one of them


def _protected(text: str) -> list[bool]:
    """inside[i] is True when position i lies strictly inside a closed 「…」-style pair of ≤ _BRACKET_SPAN chars."""
    diff = [0] * (len(text) + 1)
    stack: list[tuple[str, int]] = []
    for i, ch in enumerate(text):
        if ch in _BRACKETS:
            stack.append((_BRACKETS[ch], i))
        elif stack and ch == stack[-1][0]:
            _, start = stack.pop()
            if i - start <= _BRACKET_SPAN:
                diff[start + 1] += 1
                diff[i] -= 1
        elif ch == "\n" and text.startswith("\n", i + 1):
            stack.clear()
    inside, depth = [], 0
    for i in range(len(text)):
        depth += diff[i]
        inside.append(depth > 0)
    return inside


def split_sentences(text: str) -> list[str]:
    """Split text into sentences; ``"".join(result) == text`` exactly.

    A sentence ends after ``。！？`` (no space needed; not inside a ``「…」``/``『…』``/``（…）`` pair, and closing
    brackets/quotes right after the terminator stay with the sentence), after ASCII ``.!?`` followed by whitespace
    (so ``v1.2.3``, ``docs.example.org``, ``file.py`` never split; ``e.g.``/``etc.`` and list numbers ``1.`` do not
    end sentences; ``!``/``?`` also end before Japanese text), at a blank line, and before a line that starts a list
    item, quote, table row or heading. Whitespace after a sentence end belongs to the sentence before it.

    Args:
        text: any text (one paragraph or several).

    Returns:
        The sentences, in order; [] for "".
    """
    if not text:
        return []
    n = len(text)
    inside = _protected(text) if any(ch in text for ch in _BRACKETS) else None
    cuts: list[int] = []
    i = 0
    line_start = seen = 0       # the start of the line of position ``seen`` (i only grows: each \n is found once)
    while i < n:
        ch = text[i]
        end = -1
        if ch in _JA_TERMINATORS:
            if inside is None or not inside[i]:
                end = i + 1
        elif ch in _ASCII_TERMINATORS:
            j = i + 1
            while j < n and text[j] in _ASCII_TERMINATORS:
                j += 1
            k = j
            while k < n and text[k] in _CLOSERS:
                k += 1
            nxt = text[k] if k < n else ""
            if nxt == "" or nxt.isspace():
                if ch == ".":
                    nl = text.rfind("\n", seen, i)
                    line_start, seen = (nl + 1 if nl >= 0 else line_start), i
                if ch != "." or _ends_sentence_with_period(text, i, line_start):
                    end = k
            elif ch in "!?" and _JA_CHAR.match(nxt):
                end = k
        elif ch == "\n":
            j = i + 1
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "\n":
                end = i  # blank line: whitespace run absorbed below
            elif _BLOCK_START.match(text, i + 1):
                cuts.append(i + 1)
                i += 1
                continue
        if end < 0:
            i += 1
            continue
        while end < n and (text[end] in _CLOSERS or text[end] in _JA_TERMINATORS):
            end += 1
        while end < n and text[end].isspace():
            end += 1
        if end < n:
            cuts.append(end)
        i = max(end, i + 1)
    out: list[str] = []
    prev = 0
    for c in cuts:
        if c > prev:
            out.append(text[prev:c])
            prev = c
    if prev < n:
        out.append(text[prev:])
    return out


def _ends_sentence_with_period(text: str, i: int, line_start: int) -> bool:
    """Whether the period at ``text[i]`` ends a sentence: not after a list number alone on its line (``1.``) nor
    after an abbreviation (``e.g.``, the ASCII word before it, from its first letter). ``line_start``: where the
    line of ``i`` starts. Looks only at the characters next to the period, never copies or searches the whole line
    (a 0.44 MB line of sentences took 85 s when each period did)."""
    j = line_start
    while j < i and text[j].isspace():
        j += 1
    k = j
    while k < i and text[k].isdigit():
        k += 1
    while k < i and text[k].isspace():
        k += 1
    if k == i and i > j and not text[j].isspace():  # "1. " list number (the line before it: digits, spaces)
        return False
    start = i
    while start > line_start and text[start - 1] in _WORD_CHARS:
        start -= 1
    word = text[start:i].lstrip(".")
    return not (word and word.lower() in _ABBREVIATIONS)


# ---------------------------------------------------------------------------------------------------------------
# blocks and sections
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Block:
    kind: str  # "heading" | "code" | "table" | "prose"
    start: int  # char offsets in the parsed text, trimmed of surrounding whitespace
    end: int
    level: int = 0  # heading level
    title: str = ""  # heading text


@dataclass
class _Section:
    path: tuple[str, ...]
    heading: _Block | None
    blocks: list[_Block]


class _Atom(NamedTuple):
    start: int
    end: int
    block: int  # index of the block it came from
    kind: str  # "block" (whole code block/table), "sentence", "line" (code/table line), "text" (prose line),
    #            "word", "chars" (a hard cut that fits); only "sentence" atoms are repeated as overlap


_BLOCK_ID = re.compile(r"(?:[ \t]+|^)\^[A-Za-z0-9][A-Za-z0-9-]*[ \t]*$", re.MULTILINE)


def strip_block_ids(markdown: str) -> str:
    """Obsidian block ids (``Some paragraph ^quote-1``, or ``^id`` alone on the line after a block) removed outside
    fenced code: they are link targets (``[[Note#^quote-1]]``), not words a reader searches for."""
    if "^" not in markdown:
        return markdown
    return "\n".join(line if is_code or "^" not in line else _BLOCK_ID.sub("", line)
                     for is_code, line in code_lines(markdown.split("\n")))


_DASH_RUN = re.compile(r"-{4,}")


def compact_table_delimiters(markdown: str) -> str:
    """Each GFM table delimiter row outside fenced code with its dash runs cut to ``---`` (``| :--------- | ---- |``
    -> ``| :--- | --- |``): the same table (a delimiter cell needs one dash), and no words.

    A WordPiece tokenizer reads each ``-`` as a token, so the delimiter row of a table padded to its widest cell (a
    generated API reference: 200+ dashes) filled a chunk's 256-token window alone, or was cut across two chunks
    (the row's words-free pieces embedded and indexed like any passage: one won an agent's Japanese question). On
    the five shared corpora, 36 chunks held only such pieces and the tables took 218 chunks more (27,580 against
    27,362); MRR@10 scoped +0.0001 [−0.0030, +0.0025], unscoped −0.0013 [−0.0066, +0.0043] (``bench/warehouse_ab.py``)."""
    if "--" not in markdown or "|" not in markdown:
        return markdown
    return "\n".join(_DASH_RUN.sub("---", line) if not is_code and "|" in line and "----" in line
                     and TABLE_DELIMITER.match(QUOTE_PREFIX.sub("", line, count=1)) else line
                     for is_code, line in code_lines(markdown.split("\n")))


def _strip_frontmatter(body: str) -> str:
    m = _FRONTMATTER.match(body)
    if not m:
        return body
    try:
        data = yaml.safe_load(m.group(1) or "")
    except yaml.YAMLError:
        return body
    return body[m.end() :] if isinstance(data, dict) or data is None else body


def _blocks(text: str) -> list[_Block]:
    """Top-level blocks of ``text`` with trimmed char spans; non-blank lines no token covers become prose."""
    line_starts = [0]
    for m in re.finditer(r"\r\n?|\n", text):  # line breaks as markdown-it counts them
        line_starts.append(m.end())
    n_lines = len(line_starts)

    def span(l0: int, l1: int) -> tuple[int, int]:
        start = line_starts[l0]
        end = line_starts[l1] if l1 < n_lines else len(text)
        seg = text[start:end]
        lead = len(seg) - len(seg.lstrip())
        return start + lead, start + len(seg.rstrip())

    tokens = _MD.parse(text)
    raw: list[tuple[int, int, str, int, str]] = []  # (line0, line1, kind, level, title)
    for idx, tok in enumerate(tokens):
        if tok.level != 0 or tok.map is None or tok.nesting == -1:
            continue
        l0, l1 = tok.map
        if tok.type == "heading_open":
            inline = tokens[idx + 1]
            raw.append((l0, l1, "heading", int(tok.tag[1]), inline.content.strip()))
        elif tok.type == "hr":          # a thematic break (---, ***, ___) has no words: covered, never a block
            raw.append((l0, l1, "", 0, ""))
        elif tok.type in ("fence", "code_block"):
            raw.append((l0, l1, "code", 0, ""))
        elif tok.type == "table_open":
            raw.append((l0, l1, "table", 0, ""))
        else:
            raw.append((l0, l1, "prose", 0, ""))
    raw.sort()
    blocks: list[_Block] = []
    line = 0
    for l0, l1, kind, level, title in raw + [(n_lines, n_lines, "", 0, "")]:
        if l0 > line:  # uncovered lines (e.g. link reference definitions)
            s, e = span(line, l0)
            if e > s:
                blocks.append(_Block("prose", s, e))
        if kind:
            s, e = span(l0, l1)
            if e > s or kind == "heading":
                blocks.append(_Block(kind, s, max(e, s), level, title))
        line = max(line, l1)
    return blocks


def _name_key(name: str) -> str:
    """A heading or title as compared with the other: NFKC, case-folded, runs of whitespace as one space."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def _sections(blocks: list[_Block], title: str) -> list[_Section]:
    title_key = _name_key(title)
    sections = [_Section((), None, [])]
    stack: list[tuple[int, str]] = []
    for b in blocks:
        if b.kind != "heading":
            sections[-1].blocks.append(b)
            continue
        while stack and stack[-1][0] >= b.level:
            stack.pop()
        name = " ".join(b.title.split())
        # the title's H1, also with the #tags that end it (`# Home #project` of the note titled Home)
        if name and not (b.level == 1 and title_key in (_name_key(name), _name_key(without_heading_tags(name)))):
            stack.append((b.level, name))
        sections.append(_Section(tuple(n for _, n in stack), b, []))
    if not sections[0].blocks:
        sections.pop(0)
    return sections


def _common_prefix(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    out: list[str] = []
    for items in zip(*paths):
        if any(x != items[0] for x in items):
            break
        out.append(items[0])
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------------
# chunking
# ---------------------------------------------------------------------------------------------------------------
#: a position next to one of these characters splits a BERT WordPiece text into independently counted
#: halves (``token_starts`` of :func:`chunk_note`): ASCII whitespace BertNormalizer keeps (it drops \v and \f
#: as control characters) and ASCII punctuation, which BertPreTokenizer isolates
_WORD_EDGE = frozenset(" \t\n\r" + string.punctuation)
#: a clause of a Japanese or Chinese run: up to and with its comma(s) (、，), or the run's rest
_CLAUSE = re.compile(r"[^、，]*[、，]+|[^、，]+")


class _Chunker:
    def __init__(
        self, note: Note, count_tokens: Callable[[str], int], max_tokens: int, overlap: int, min_tokens: int,
        max_chunks: int | None = None, token_starts: Callable[[str], Sequence[int]] | None = None,
    ):
        self.note = note
        self.max_chunks = max_chunks
        self.capped_at: tuple[str, ...] | None = None   # heading path of the first section left out by the cap
        self.capped_within = False                        # True: the cap fell inside that section
        self.count = count_tokens
        self.max = max_tokens
        self.max_chars = max_tokens * MAX_CHARS_PER_TOKEN
        self.overlap = overlap
        self.min = min_tokens
        text = _strip_frontmatter(note.body)
        if is_excalidraw(note.frontmatter):
            text = excalidraw_text(text)   # the plugin's banner and the drawing's JSON are no text of it
        self.text = compact_table_delimiters(strip_block_ids(text))
        self._bc_cache: dict[tuple[str, ...], str] = {}
        self._counts: dict[str, int] = {}             # text -> count_tokens(text): the chunker asks again
        self._token_starts = token_starts
        self._starts: Sequence[int] | None = None     # token_starts(self.text), computed on first use

    # -- helpers --
    def count_text(self, text: str) -> int:
        """``count_tokens(text)``, each distinct text counted once per note."""
        n = self._counts.get(text)
        if n is None:
            n = self._counts[text] = self.count(text)
        return n

    def _at_word_edge(self, pos: int) -> bool:
        text = self.text
        return pos <= 0 or pos >= len(text) or text[pos - 1] in _WORD_EDGE or text[pos] in _WORD_EDGE

    def span_tokens(self, start: int, end: int, prefix: str | None = None) -> int:
        """``count_tokens`` of ``self.text[start:end]`` (start < end), or of ``prefix + "\\n\\n"`` + that
        span.

        With ``token_starts`` and both ends at a word edge (:data:`_WORD_EDGE`) the span's tokens are those
        of the note's one encoding that start inside it, plus the prefix's count (or the special tokens, the
        count of ""); otherwise the text is counted.
        """
        if self._token_starts is not None and self._at_word_edge(start) and self._at_word_edge(end):
            if self._starts is None:
                self._starts = self._token_starts(self.text)
            inside = bisect_left(self._starts, end) - bisect_left(self._starts, start)
            return inside + self.count_text("" if prefix is None else prefix)
        body = self.text[start:end]
        return self.count_text(body if prefix is None else f"{prefix}\n\n{body}")

    def breadcrumb(self, path: tuple[str, ...]) -> str:
        bc = self._bc_cache.get(path)
        if bc is None:
            bc = " > ".join([self.note.title, *path])
            limit = max(1, self.max // 2)
            if self.count_text(bc) > limit:
                lo, hi = 0, len(bc)
                while lo < hi:  # longest prefix + "…" within half the budget
                    mid = (lo + hi + 1) // 2
                    if self.count_text(bc[:mid] + "…") <= limit:
                        lo = mid
                    else:
                        hi = mid - 1
                bc = bc[:lo] + "…"
            self._bc_cache[path] = bc
        return bc

    def fits(self, prefix: str, body: str) -> bool:
        text = f"{prefix}\n\n{body}" if body else prefix
        return len(text) <= self.max_chars and self.count_text(text) <= self.max

    def fits_span(self, prefix: str, start: int, end: int) -> bool:
        """``fits(prefix, self.text[start:end])`` without building the text (:meth:`span_tokens`)."""
        if end <= start:
            return len(prefix) <= self.max_chars and self.count_text(prefix) <= self.max
        return (len(prefix) + 2 + end - start <= self.max_chars
                and self.span_tokens(start, end, prefix) <= self.max)

    # -- main --
    def run(self) -> list[Chunk]:
        text = self.text
        sections = _sections(_blocks(text), self.note.title) if text.strip() else []
        groups = self._groups(sections)
        chunks: list[Chunk] = []
        seen: dict[str, int] = {}       # path text -> its occurrences so far (("A > B",) reads as ("A", "B"))
        for path, start, end, section in groups:
            if self.max_chunks is not None and len(chunks) >= self.max_chunks:
                self.capped_at = path
                break
            joined = " > ".join(path)
            occurrence = seen.get(joined, 0)
            seen[joined] = occurrence + 1
            bc = self.breadcrumb(path)
            # one piece past the cap tells that it cut the section; none after it is made (a 4 MB log: 63k counts)
            room = None if self.max_chunks is None else self.max_chunks - len(chunks) + 1
            pieces = [text[start:end]] if self.fits_span(bc, start, end) else self._split(bc, section, room)
            if self.max_chunks is not None and len(chunks) + len(pieces) > self.max_chunks:
                pieces = pieces[: self.max_chunks - len(chunks)]
                self.capped_at, self.capped_within = path, True
            for piece_no, piece in enumerate(pieces):
                parts = [self.note.note_id, joined, str(piece_no)]
                if occurrence:
                    parts.append(str(occurrence))
                chunks.append(
                    Chunk(
                        chunk_id=stable_id(*parts),
                        note_id=self.note.note_id,
                        source=self.note.source,
                        ordinal=len(chunks),
                        heading_path=path,
                        breadcrumb=bc,
                        text=piece,
                    )
                )
        if not any(c.text for c in chunks):
            return self._fallback([c for c in chunks if c.heading_path])
        return chunks

    def _fallback(self, headed: list[Chunk]) -> list[Chunk]:
        """No body text: one chunk (title breadcrumb, description text) when there is a title or description, then
        ``headed`` (the breadcrumb-only chunks of headings other than the title's H1), renumbered; without a
        description and with ``headed``, just ``headed``."""
        desc = self.note.description.strip()
        if headed:
            first = self._fallback([]) if desc else []
            out = [replace(c, ordinal=i) for i, c in enumerate(first + headed)]
            return out[: self.max_chunks] if self.max_chunks is not None else out
        if not self.note.title.strip() and not desc:
            return []
        bc = self.breadcrumb(())
        if desc and not self.fits(bc, desc):
            desc = self._cut_chars(bc, desc, 0, len(desc))[0]
        return [
            Chunk(
                chunk_id=stable_id(self.note.note_id, "", "0"),
                note_id=self.note.note_id,
                source=self.note.source,
                ordinal=0,
                heading_path=(),
                breadcrumb=bc,
                text=desc,
            )
        ]

    def _groups(self, sections: list[_Section]) -> list[tuple[tuple[str, ...], int, int, _Section | None]]:
        """(path, start, end, section-if-single) of each chunk group after merging tiny sections."""
        out: list[tuple[tuple[str, ...], int, int, _Section | None]] = []
        i = 0
        while i < len(sections):
            if not sections[i].path and not sections[i].blocks and i + 1 < len(sections):
                # the title's H1 (or an empty heading) with no text: not merged into what follows, whose
                # heading the common prefix () would lose (`# Title` + `## Setup` + text: one chunk headed "")
                i += 1
                continue
            group = [sections[i]]
            start, end = self._body_span(sections[i])
            size = self.span_tokens(start, end) if end > start else 0
            while size < self.min and i + 1 < len(sections):
                nxt = sections[i + 1]
                n_start = nxt.heading.start if nxt.heading else nxt.blocks[0].start
                n_end = nxt.blocks[-1].end if nxt.blocks else nxt.heading.end  # type: ignore[union-attr]
                m_start = start if end > start else n_start
                path = _common_prefix([s.path for s in group] + [nxt.path])
                if group[0].heading is not None and len(path) < len(group[0].path):
                    m_start = group[0].heading.start      # its heading, not in the path, opens the text
                if not self.fits_span(self.breadcrumb(path), m_start, n_end):
                    break
                group.append(nxt)
                start, end = m_start, n_end
                size = self.span_tokens(start, end) if end > start else self.count_text("")
                i += 1
            i += 1
            path = _common_prefix([s.path for s in group])
            if end <= start:
                following = sections[i].path if i < len(sections) else None
                if following is not None and following[: len(path)] == path:
                    continue  # an empty parent heading: it lives on in the next section's breadcrumb
                out.append((path, 0, 0, None))
                continue
            out.append((path, start, end, group[0] if len(group) == 1 else None))
        return out

    @staticmethod
    def _body_span(section: _Section) -> tuple[int, int]:
        if not section.blocks:
            return (0, 0)
        return section.blocks[0].start, section.blocks[-1].end

    # -- splitting a section that does not fit --
    def _split(self, bc: str, section: _Section | None, limit: int | None = None) -> list[str]:
        """The section's pieces, in order; its first ``limit`` pieces only (the same ones) when given."""
        assert section is not None  # merged groups always fit
        atoms = self._atoms(section)
        text = self.text
        pieces: list[str] = []
        i = 0
        half = self.max // 2
        while i < len(atoms) and (limit is None or len(pieces) < limit):
            if not self.fits_span(bc, atoms[i].start, atoms[i].end):
                atoms[i : i + 1] = self._refine(bc, atoms[i])  # lazily: only atoms too large alone are split
                continue
            n = len(atoms)
            j = i
            # largest j with atoms i..j fitting: gallop then bisect (token counts grow with the text)
            step = 1
            while j + step < n and self.fits_span(bc, atoms[i].start, atoms[j + step].end):
                j += step
                step *= 2
            hi = min(j + step, n) - 1  # atoms[hi + 1] is known not to fit (or hi is the last atom)
            while j < hi:
                mid = (j + hi + 1) // 2
                if self.fits_span(bc, atoms[i].start, atoms[mid].end):
                    j = mid
                else:
                    hi = mid - 1
            e = j
            if j + 1 < n and atoms[j + 1].block == atoms[j].block:
                # prefer ending at a block boundary when the piece stays at least half full
                for k in range(j - 1, i - 1, -1):
                    if atoms[k].block != atoms[k + 1].block:
                        if self.span_tokens(atoms[i].start, atoms[k].end, bc) >= half:
                            e = k
                        break
            pieces.append(text[atoms[i].start : atoms[e].end])
            if e + 1 >= n:
                break
            # overlap (only for a cut inside a block): whole sentences from the end of this piece, ≤ overlap
            # tokens; the next piece must still fit
            s = e + 1
            k = e
            mid_block = atoms[e].block == atoms[e + 1].block
            while mid_block and k > i and atoms[k].kind == "sentence" and self.overlap > 0:
                if self.span_tokens(atoms[k].start, atoms[e].end) > self.overlap:
                    break
                s = k
                k -= 1
            while s <= e and not self.fits_span(bc, atoms[s].start, atoms[e + 1].end):
                s += 1
            i = s
        return pieces

    def _atoms(self, section: _Section) -> list[_Atom]:
        """Whole code blocks/tables and prose sentences (trimmed spans), in order."""
        text = self.text
        atoms: list[_Atom] = []
        for bi, b in enumerate(section.blocks):
            if b.kind in ("code", "table"):
                atoms.append(_Atom(b.start, b.end, bi, "block"))
                continue
            pos = b.start
            for sent in split_sentences(text[b.start : b.end]):
                s = pos + len(sent) - len(sent.lstrip())
                e = pos + len(sent.rstrip())
                pos += len(sent)
                if e > s:
                    atoms.append(_Atom(s, e, bi, "sentence"))
        return atoms

    def _refine(self, bc: str, atom: _Atom) -> list[_Atom]:
        """Smaller atoms covering an atom too large for one chunk.

        block -> its lines; sentence -> its lines, or its words when it is one line; code line -> hard character
        cuts (code is never cut mid-line otherwise); prose line -> words; word -> its clauses (a Japanese run
        without spaces, cut after each ``、``: a hard cut split ズンドコ into ズン and ドコ, a word in neither chunk),
        else hard character cuts (never between a character and its combining marks).
        """
        text = self.text
        if atom.kind in ("block", "sentence"):
            lines = self._line_spans(atom.start, atom.end)
            if len(lines) > 1:
                kind = "line" if atom.kind == "block" else "text"
                return [_Atom(s, e, atom.block, kind) for s, e in lines]
            atom = atom._replace(kind="line" if atom.kind == "block" else "text")
        if atom.kind == "text":
            words = [
                _Atom(atom.start + m.start(), atom.start + m.end(), atom.block, "word")
                for m in re.finditer(r"\S+", text[atom.start : atom.end])
            ]
            if len(words) > 1:
                return words
            atom = atom._replace(kind="word")
        if atom.kind == "word":     # Japanese and Chinese have no spaces: a run is cut at its commas first
            clauses = [_Atom(atom.start + m.start(), atom.start + m.end(), atom.block, "clause")
                       for m in _CLAUSE.finditer(text[atom.start : atom.end])]
            if len(clauses) > 1:
                return clauses
        return [
            _Atom(s, e, atom.block, "chars") for s, e in self._cut_chars(bc, text, atom.start, atom.end)[1]
        ]

    def _line_spans(self, start: int, end: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        pos = start
        for line in self.text[start:end].split("\n"):
            if line.strip():
                out.append((pos, pos + len(line.rstrip())))
            pos += len(line) + 1
        return out

    def _cut_chars(self, bc: str, text: str, start: int, end: int) -> tuple[str, list[tuple[int, int]]]:
        """Hard cut of text[start:end] into the longest prefixes that fit; returns (first piece, spans)."""
        spans: list[tuple[int, int]] = []
        s = start
        while s < end:
            lo, hi = s + 1, min(end, s + self.max_chars)       # no prefix longer than the character cap fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self.fits_span(bc, s, mid) if text is self.text else self.fits(bc, text[s:mid]):
                    lo = mid
                else:
                    hi = mid - 1
            lo = char_start(text, lo, s)        # not between a character and its marks (NFD ズンドコ: ズント | ゙コ)
            spans.append((s, lo))
            s = lo
        return (text[spans[0][0] : spans[0][1]] if spans else ""), spans


def chunk_note(
    note: Note,
    *,
    count_tokens: Callable[[str], int],
    max_tokens: int = 256,
    overlap_tokens: int = 32,
    min_tokens: int = 24,
    max_chunks: int | None = MAX_CHUNKS_PER_NOTE,
    warnings: list[str] | None = None,
    token_starts: Callable[[str], Sequence[int]] | None = None,
) -> list[Chunk]:
    """Cut a note into heading-section chunks that fit the embedding window (rules in the module docstring).

    Args:
        note: the note; ``note.body`` is Markdown without frontmatter (a leading YAML block is skipped anyway).
        count_tokens: size of a string in the embedding model's tokens (special tokens included if the model
            counts them); ``len`` measures characters.
        max_tokens: budget for ``chunk.embed_text`` (breadcrumb + blank line + text), ≥ 8 tokens.
        overlap_tokens: at most this many tokens of whole sentences repeated between consecutive pieces of a section.
        min_tokens: sections whose body is smaller are merged with the following section when the result fits.
        max_chunks: at most this many chunks, the note's first ones (rule 9); None: no cap.
        warnings: when given and the cap cuts the note, one line is appended: ``<vault path>: only its first N
            chunks are searchable …; split the note …`` (the note itself stays whole in the vault).
        token_starts: optional, for a BERT WordPiece tokenizer: the start offsets (characters, ascending) of
            the tokens of a text without special tokens. Its counts add up at ASCII whitespace and
            punctuation: ``count_tokens(a + b) == count_tokens(a) + count_tokens(b) - count_tokens("")`` when
            ``a`` ends or ``b`` starts with one. Then a part of the note between such places is counted from
            one encoding of the note instead of being tokenized again (the same counts, so the same chunks).

    Returns:
        Chunks in note order (``ordinal`` 0, 1, ...); [] for a note without title, description or text.

    Raises:
        ValueError: max_tokens < 8, negative overlap_tokens/min_tokens, or max_chunks < 1.
    """
    if max_tokens < 8:
        raise ValueError(f"max_tokens must be ≥ 8, got {max_tokens} (note {note.vault_path})")
    if overlap_tokens < 0 or min_tokens < 0:
        raise ValueError(f"overlap_tokens and min_tokens must be ≥ 0 (note {note.vault_path})")
    if max_chunks is not None and max_chunks < 1:
        raise ValueError(f"max_chunks must be ≥ 1 or None, got {max_chunks} (note {note.vault_path})")
    chunker = _Chunker(note, count_tokens, max_tokens, overlap_tokens, min_tokens, max_chunks, token_starts)
    chunks = chunker.run()
    if chunker.capped_at is not None and warnings is not None:
        section = " > ".join(chunker.capped_at) or "(no heading)"
        size = len(chunker.text.encode("utf-8")) / 1e6
        where = "within" if chunker.capped_within else "from"
        warnings.append(f"{note.vault_path}: only its first {max_chunks:,} chunks are searchable ({size:.1f} MB of "
                        f"text, not indexed {where} section '{section}' on); split it into smaller notes to make all "
                        "of it searchable (the note stays whole in the vault)")
    return chunks
