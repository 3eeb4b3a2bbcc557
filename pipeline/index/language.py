"""The language of a note, detected from its script: Japanese, Chinese, Korean, or a Latin-script language.

Script counting is enough to choose an embedding model: the default English model (MiniLM) reads Latin-script
text and nothing else, and what it cannot read are the CJK scripts. Code (fenced blocks, inline code) is left out
of the count, since Japanese documentation is full of English identifiers.

- ``ja``: kana (hiragana, katakana) present among the CJK characters (kanji alone is ambiguous with Chinese);
- ``ko``: hangul outnumbers kana;
- ``zh``: han characters without kana or hangul;
- ``en``: everything else with letters (Latin script and others the default model treats alike);
- ``""``: no letters at all (an empty or code-only note): the source's other notes decide.

A text is CJK when at least ``CJK_SHARE`` of its letters (outside code) are CJK characters.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from pipeline.common.embedding_models import LANGUAGES, valid_language
from pipeline.common.markdown import replace_code

__all__ = ["CJK_LANGUAGES", "CJK_SHARE", "LANGUAGES", "detect_language", "majority_language", "valid_language"]

CJK_LANGUAGES = frozenset({"ja", "zh", "ko"})
CJK_SHARE = 0.2

_INLINE_CODE = re.compile(r"`[^`\n]+`")
_KANA = re.compile("[\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9d]")
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_HANGUL = re.compile("[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")
_LETTER = re.compile(r"[^\W\d_]")


def detect_language(text: str) -> str:
    """``"ja"``, ``"zh"``, ``"ko"``, ``"en"`` or ``""`` (no letters outside code) for a Markdown text."""
    prose = _INLINE_CODE.sub(" ", replace_code(text or "", lambda code: " "))
    letters = len(_LETTER.findall(prose))
    if not letters:
        return ""
    kana, han, hangul = (len(p.findall(prose)) for p in (_KANA, _HAN, _HANGUL))
    cjk = kana + han + hangul
    if cjk < CJK_SHARE * letters:
        return "en"
    if hangul > kana:
        return "ko"
    return "ja" if kana else "zh"


def majority_language(languages: Iterable[str]) -> str:
    """The most common detected language of a source's notes (ties: alphabetical), ``""`` when none has one."""
    counts = Counter(lang for lang in languages if lang)
    if not counts:
        return ""
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
