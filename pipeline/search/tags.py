"""Obsidian tags: frontmatter ``tags`` and inline ``#tags`` in the body, and the ``--tag`` match rule.

An inline tag (as Obsidian reads it) is ``#`` at the start of a line or after whitespace, followed by letters of any
script, digits, emoji, ``_``, ``-`` or ``/`` (nested tags ``#a/b``), with at least one character that is not a digit
(``#1`` is not a tag). Headings (``# Title``: a space after ``#``), URL fragments (``page#part``), ``#`` inside
fenced or inline code are not tags.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from pipeline.common.markdown import replace_code, split_tag_list

__all__ = ["frontmatter_tags", "inline_tags", "normalise_tag", "tag_matches"]

_INLINE_CODE = re.compile(r"(`+).+?\1", re.DOTALL)
#: emoji and pictographs a tag may hold besides letters, digits, ``_``, ``-`` and ``/`` (Obsidian's help, "Tag
#: format": "commonly accepted Unicode characters, including emojis"): arrows, technical and geometric symbols,
#: dingbats, the pictograph planes, and the joiner and variation selector of composed emoji; not punctuation (a
#: tag ends at ``。`` or ``,``)
_EMOJI = ("\u2190-\u21ff\u2300-\u23ff\u24c2\u25a0-\u27bf\u2934\u2935\u2b05-\u2b55\u3030\u303d\u3297\u3299"
          "\U0001f000-\U0001faff\u200d\ufe0f")
_TAG = re.compile(f"(?<!\\S)#([\\w/{_EMOJI}-]+)")


def normalise_tag(tag: str) -> str:
    """A tag as compared: ``#`` and surrounding ``/`` stripped, NFKC-normalised and case-folded, as ``read``
    compares note names (``#Journal/`` -> ``journal``; half-width ``ｶﾀｶﾅ`` -> ``カタカナ``; full-width ``ＴＩＬ`` ->
    ``til``). Both sides of a tag filter go through it: the note's tags and the wanted ones."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", tag).casefold())
    return folded.strip().lstrip("#").strip("/")


def frontmatter_tags(values: Iterable[str]) -> tuple[str, ...]:
    """The tags of a note's frontmatter ``tags`` values (as the warehouse keeps them: one string per list item, a
    string value as one item), normalised (:func:`normalise_tag`): a value is split at commas and whitespace, as
    Obsidian reads ``tags: project/alpha, urgent`` (two tags; a tag holds neither), empty parts dropped."""
    return tuple(t for value in values for part in split_tag_list(value) if (t := normalise_tag(part)))


def inline_tags(markdown: str) -> set[str]:
    """The inline ``#tags`` of a Markdown body, normalised (:func:`normalise_tag`)."""
    text = _INLINE_CODE.sub(" ", replace_code(markdown, lambda code: " "))
    out = set()
    for m in _TAG.finditer(text):
        tag = normalise_tag(m.group(1))
        if tag and not tag.replace("/", "").isdigit() and not tag.startswith("-"):
            out.add(tag)
    return out


def tag_matches(note_tags: Iterable[str], wanted: Iterable[str]) -> bool:
    """Whether a note with ``note_tags`` (normalised: :func:`normalise_tag`) carries one of ``wanted``
    (normalised here): equal, or a nested tag under it (``a`` matches ``a/b``)."""
    want = [normalise_tag(t) for t in wanted]
    return any(nt == t or nt.startswith(t + "/") for nt in note_tags for t in want if t)
