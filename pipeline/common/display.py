"""Text as a terminal shows it: one line with the spaces a writer typed (:func:`one_line`), a cut that never
splits a character from its combining marks (:func:`char_start`), and columns padded by display width, a wide
(CJK, full-width) character taking two (:func:`width`, :func:`fit`)."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["char_start", "fit", "one_line", "pad", "width"]

_SPACE_RUN = re.compile(r"\s+")
#: a space of another width than ASCII's (Unicode category Zs but U+0020): the only text one_line keeps as written
_OTHER_SPACE = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")


def _kept_space(run: str) -> bool:
    """Whether a whitespace run is only spaces of another width (``\\u3000``, a no-break space): text, not layout."""
    return all(c != " " and unicodedata.category(c) == "Zs" for c in run)


def one_line(text: str) -> str:
    """``text`` on one line: each run of line breaks, tabs and ASCII spaces becomes one space and the ends are
    stripped, as ``" ".join(text.split())`` does, but a run of only ideographic (``\\u3000``) or no-break spaces
    stays as written: ``プロジェクト\\u3000計画`` is a note's name, and a message or title that showed it with an
    ASCII space would name a file the vault does not have.

    Args:
        text: any text.

    Returns:
        The line (chars); "" for blank text.
    """
    if not _OTHER_SPACE.search(text):   # nearly every text: one C scan (a snippet's chunk text, ~1.5 ms a search)
        return " ".join(text.split())
    return _SPACE_RUN.sub(lambda m: m.group() if _kept_space(m.group()) else " ", text).strip()


def _regional(ch: str) -> bool:
    """Whether ``ch`` is a regional indicator (U+1F1E6-U+1F1FF), two of which make a flag: ``🇯🇵``."""
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _joined(text: str, i: int) -> bool:
    """Whether ``text[i]`` belongs to the character before it: a combining mark (the voiced mark U+3099 of an NFD
    ``ガ``, a keycap's enclosing U+20E3), a zero-width joiner or what follows one, a variation selector, an emoji
    skin tone or tag character (a subdivision flag), or the second regional indicator of a flag (``🇯🇵`` was cut
    to ``🇯``, a lone letter in a box)."""
    ch = text[i]
    if bool(unicodedata.combining(ch)) or ch in "\u200d\ufe0e\ufe0f\u20e3" or "\U0001f3fb" <= ch <= "\U0001f3ff" \
            or "\U000e0020" <= ch <= "\U000e007f" or text[i - 1] == "\u200d":
        return True
    if _regional(ch) and _regional(text[i - 1]):
        run = 0                                     # the indicators before it: pairs from the run's start
        while i - run - 1 >= 0 and _regional(text[i - run - 1]):
            run += 1
        return run % 2 == 1
    return False


def char_start(text: str, i: int, floor: int = -1) -> int:
    """The nearest offset at or before ``i`` where a cut of ``text`` splits no character from the marks that
    follow it (see :func:`_joined`), but not below ``floor + 1`` (a piece cut from ``floor`` keeps a character).

    Args:
        text: the text to cut.
        i: the wanted cut offset (chars).
        floor: the start of the piece being cut (default: none, the offset may go down to 0).

    Returns:
        The offset (chars), ``i`` itself when it is at a character's start, at ``len(text)`` or at most ``floor + 1``.
    """
    while floor + 1 < i < len(text) and _joined(text, i):
        i -= 1
    return i


def _char_width(text: str, i: int) -> int:
    """Columns ``text[i]`` adds: 0 when it belongs to the character before it (:func:`_joined`: a combining mark,
    or the rest of an emoji sequence, ``👨‍👩‍👧`` or ``👍🏽`` being one emoji of 2 columns, not 8 and 4), else 2 for
    a wide one (East Asian Width W or F), for a flag's first regional indicator and for a character an emoji
    variation selector (U+FE0F) follows, else 1."""
    c = text[i]
    if unicodedata.combining(c) or (i and _joined(text, i)):
        return 0
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if unicodedata.east_asian_width(c) in "WF" or nxt == "\ufe0f" or (_regional(c) and _regional(nxt)):
        return 2
    return 1


def width(text: str) -> int:
    """Columns ``text`` takes in a terminal: 2 for a wide or full-width character (East Asian Width W or F:
    kanji, kana, ``ＡＢＣ``) and for an emoji sequence (``👨‍👩‍👧``, ``🇯🇵``, ``👍🏽``: one emoji), 0 for a combining
    mark, 1 otherwise (half-width katakana ``ｶﾅ`` too)."""
    return sum(_char_width(text, i) for i in range(len(text)))


def fit(text: str, cols: int, align: str = "<") -> str:
    """``text`` in exactly ``cols`` columns: cut to fit (never inside a wide character or before its combining
    marks) and padded with spaces, on the right (``align="<"``) or the left (``">"``): a table column that
    ``f"{text:<24}"`` misaligned when ``text`` held Japanese."""
    out, used = [], 0
    for i, c in enumerate(text):
        w = _char_width(text, i)
        if used + w > cols:
            break
        out.append(c)
        used += w
    while out and len(out) < len(text) and _joined(text, len(out)):
        used -= _char_width(text, len(out) - 1)   # a cut base character without its marks is another character
        out.pop()
    pad = " " * (cols - used)
    return "".join(out) + pad if align == "<" else pad + "".join(out)


def pad(text: str, cols: int) -> str:
    """``text`` padded with spaces on the right to ``cols`` columns (:func:`width`), never cut: an id to copy."""
    return text + " " * max(0, cols - width(text))
