"""Query-side synonym expansion for the BM25 lane, from a user's ``synonyms.yaml``.

Docs and vaults name things their own way ("refund" vs "money back", "k8s" vs "Kubernetes", "保管庫" vs "vault");
BM25 only matches shared terms. A synonyms file lets a user say which words mean the same. Expansion happens at
query time only (the index is unchanged, so editing the file needs no rebuild): when a query contains a phrase of
a group, the analysed terms of the group's other phrases are added to the BM25 query. The vector lane does not
use it (embeddings already match paraphrases).

File format (YAML), next to ``sources.yaml`` by default (``DOCSVAULT_SYNONYMS`` or ``--synonyms`` to move it)::

    groups:                       # two-way: each phrase of a group finds the others
      - [refund, money back, reimbursement]
      - [vault, 保管庫]
    expand:                       # one-way: the key finds its values, not the reverse
      k8s: [kubernetes]

A phrase matches when its analysed terms occur contiguously in the analysed query (so "Refunds" matches "refund"
through stemming, and "money back" needs both words in that order). docsvault ships no synonyms: the file is
yours (a list tuned on an eval would only fit that eval).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.common.errors import SynonymsError

__all__ = ["Synonyms", "SynonymsError", "check_synonyms_file", "load_synonyms"]

MAX_FILE_BYTES = 1_000_000


@dataclass(frozen=True)
class Synonyms:
    """Analysed phrases and what each expands to.

    ``rules``: ``[(phrase terms, [expansion terms, ...])]``; built by :meth:`from_mapping` with the search analyzer.
    """

    rules: tuple[tuple[tuple[str, ...], tuple[tuple[str, ...], ...]], ...] = ()
    path: Path | None = None
    groups: int = 0
    one_way: int = 0
    _first: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for i, (phrase, _) in enumerate(self.rules):
            self._first.setdefault(phrase[0], []).append(i)

    def __bool__(self) -> bool:
        return bool(self.rules)

    @classmethod
    def from_mapping(cls, data: Any, analyze: Callable[[str], list[str]], where: str = "synonyms",
                     path: Path | None = None) -> "Synonyms":
        """Build from the parsed YAML (``{"groups": [[...]], "expand": {key: [...]}}``).

        Raises:
            SynonymsError: wrong shapes (names ``where`` and the entry), a phrase with no searchable term.
        """
        if data is None:
            return cls(path=path)
        if not isinstance(data, dict) or set(data) - {"groups", "expand"}:
            raise SynonymsError(f"{where}: expected a mapping with `groups:` (a list of lists) and/or `expand:` "
                                f"(term: [terms]); got {_shape(data)}")
        rules: list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]] = []

        def terms(phrase: Any, entry: str) -> tuple[str, ...]:
            if not isinstance(phrase, (str, int, float)) or isinstance(phrase, bool):
                raise SynonymsError(f"{where}: {entry}: every phrase must be a string, got {_shape(phrase)}")
            out = tuple(analyze(str(phrase)))
            if not out:
                raise SynonymsError(f"{where}: {entry}: {str(phrase)!r} has no searchable term (only stopwords or "
                                    f"punctuation); remove it")
            return out

        groups = data.get("groups") or []
        if not isinstance(groups, list):
            raise SynonymsError(f"{where}: `groups` must be a list of lists of phrases, got {_shape(groups)}")
        for n, group in enumerate(groups, start=1):
            if not isinstance(group, list) or len(group) < 2:
                raise SynonymsError(f"{where}: groups entry {n} must be a list of at least two phrases, "
                                    f"got {_shape(group)}")
            analysed = [terms(p, f"groups entry {n}") for p in group]
            for i, phrase in enumerate(analysed):
                others = tuple(dict.fromkeys(o for j, o in enumerate(analysed) if j != i and o != phrase))
                if others:
                    rules.append((phrase, others))
        expand = data.get("expand") or {}
        if not isinstance(expand, dict):
            raise SynonymsError(f"{where}: `expand` must map a phrase to a list of phrases, got {_shape(expand)}")
        for key, values in expand.items():
            entry = f"expand entry {key!r}"
            if isinstance(values, str):
                values = [values]
            if not isinstance(values, list) or not values:
                raise SynonymsError(f"{where}: {entry} must map to a list of phrases, got {_shape(values)}")
            phrase = terms(key, entry)
            others = tuple(dict.fromkeys(o for o in (terms(v, entry) for v in values) if o != phrase))
            if others:
                rules.append((phrase, others))
        return cls(rules=tuple(rules), path=path, groups=len(groups), one_way=len(expand))

    def expand(self, tokens: Sequence[str]) -> list[str]:
        """``tokens`` plus the terms of every phrase that a phrase found in ``tokens`` expands to (each added once,
        in rule order). Tokens are analysed query terms (the same analyzer as the rules)."""
        out = list(tokens)
        if not self.rules or not tokens:
            return out
        added: set[tuple[str, ...]] = set()
        for pos, tok in enumerate(tokens):
            for i in self._first.get(tok, ()):
                phrase, expansions = self.rules[i]
                if tuple(tokens[pos:pos + len(phrase)]) != phrase:
                    continue
                for exp in expansions:
                    if exp not in added:
                        added.add(exp)
                        out.extend(exp)
        return out


def _shape(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'…' if len(text) > 60 else ''}"


def check_synonyms_file(path: Path | None, required: bool) -> None:
    """Refuse a missing synonyms file that the user named explicitly.

    Args:
        path: the synonyms file (``Settings.synonyms_file``).
        required: True when the path was given with ``--synonyms`` / ``DOCSVAULT_SYNONYMS``
            (``Settings.synonyms_required``); the default location next to sources.yaml stays optional.

    Raises:
        SynonymsError: ``synonyms file <path> not found (--synonyms / DOCSVAULT_SYNONYMS): fix the path or unset it``.
    """
    if required and path is not None and not path.exists():
        raise SynonymsError(f"synonyms file {path} not found (--synonyms / DOCSVAULT_SYNONYMS): "
                            f"fix the path or unset it")


def load_synonyms(path: Path | None, analyze: Callable[[str], list[str]], required: bool = False) -> Synonyms:
    """Read a synonyms file; a missing file (or ``None``) means no synonyms unless ``required``.

    Args:
        path: the YAML file.
        analyze: the BM25 analyzer's ``tokens`` (phrases are analysed like queries).
        required: the path was given explicitly, so a missing file is an error (:func:`check_synonyms_file`).

    Raises:
        SynonymsError: missing while required, unreadable, too large (> 1 MB), not YAML (with the line), a duplicate
            key (with both lines), or of the wrong shape.
    """
    check_synonyms_file(path, required)
    if path is None or not path.exists():
        return Synonyms(path=None)
    import yaml      # only with a file: a search without synonyms never imports it (~0.03-0.08 s)

    from pipeline.common.yamlload import DuplicateKeyError, safe_load

    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SynonymsError(f"{path}: larger than {MAX_FILE_BYTES:,} bytes; a synonyms file is a short list")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SynonymsError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}); save it as UTF-8") from exc
    except OSError as exc:
        raise SynonymsError(f"{path}: cannot read it ({exc.strerror or exc}); fix its permissions or "
                            f"set DOCSVAULT_SYNONYMS to another file") from exc
    try:
        data = safe_load(text)
    except DuplicateKeyError as exc:
        raise SynonymsError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:       # the line to fix: where an unclosed quote or bracket opens, not the end
        from pipeline.common.frontmatter import yaml_error_parts

        line, problem, fix = yaml_error_parts(exc, first_line=1)
        raise SynonymsError(f"{path}: line {line} is not valid YAML ({problem}; {fix}); see the format in the "
                            "README") from exc
    return Synonyms.from_mapping(data, analyze, where=str(path), path=path)
