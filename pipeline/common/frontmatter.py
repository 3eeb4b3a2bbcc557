"""YAML frontmatter: decode bytes, split ``---`` blocks off a note, render a note back.

Only the safe YAML loader / ``yaml.safe_dump`` are used (never a full loader). Values are made JSON-safe on the way
in: dates become ISO strings (``2026-04-05``, ``2026-04-06T09:30:00``), any other non-JSON scalar becomes
``str``; a value written like a date that is none (``2026-02-30``) stays the string written
(:func:`_timestamp_or_text`).

Hostile frontmatter is bounded and refused with a :class:`NoteError` naming file and line: a block larger than
:data:`MAX_FRONTMATTER_CHARS`, more than :data:`MAX_ALIASES` alias references (``*x``: "billion laughs" bombs),
nesting deeper than :data:`MAX_DEPTH`, more than :data:`MAX_NODES` values once aliases are expanded, and duplicate
keys in one mapping (YAML forbids them; PyYAML would silently keep the last).
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from pipeline.common.errors import NoteError
from pipeline.common.yamlload import DuplicateKeyError, UniqueKeys, load_with

_BOM = "\ufeff"
_CLOSERS = ("---", "...")
_YAML_BREAKS = re.compile("[\x85\u2028\u2029\ufeff]")
MAX_FRONTMATTER_CHARS = 256 * 1024
MAX_ALIASES = 100
MAX_DEPTH = 50
MAX_NODES = 100_000


class _Limits(ValueError):
    """A frontmatter value exceeds a bound (message says which)."""


_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


def _timestamp_or_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    """YAML's timestamp constructor, except that a value that looks like one but is no valid date or time
    (``2026-02-30``, ``2026-13-01``, ``2026-01-01 25:00``) is the string written (``"2026-02-30"``), as
    Obsidian shows it, instead of a ValueError that would skip the note."""
    try:
        return yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    except (ValueError, OverflowError):
        return node.value


class _SafeLoader(UniqueKeys, yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys (:class:`pipeline.common.yamlload.UniqueKeys`), too many
    aliases and too deep nesting (its own bounds, tighter than a config file's
    :class:`pipeline.common.yamlload.BoundedAliases`: a note's frontmatter is refused past :data:`MAX_NODES`)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.MarkedYAMLError(problem=f"more than {MAX_ALIASES} alias references (*name)",
                                           problem_mark=mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.MarkedYAMLError(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` with the bounds of this module (duplicate keys, aliases, depth).

    Raises:
        yaml.YAMLError: invalid or hostile YAML.
    """
    return load_with(_SafeLoader, text)


_CLoader = getattr(yaml, "CSafeLoader", None)      # PyYAML built with libyaml (its wheels are)
_SLOW = object()                                   # what _fast_load returns when safe_load must decide


_SafeLoader.add_constructor(_TIMESTAMP_TAG, _timestamp_or_text)


class _FastLoader(UniqueKeys, _CLoader or yaml.SafeLoader):     # type: ignore[misc]
    """libyaml's parser with the same constructor (duplicate keys refused as
    :class:`pipeline.common.yamlload.UniqueKeySafeLoader` does)."""


_FastLoader.add_constructor(_TIMESTAMP_TAG, _timestamp_or_text)


#: What :func:`_fast_load` leaves to the pure-Python loader: anchors (``&``: the alias bounds are counted there),
#: tabs, and any character outside printable Unicode (where libyaml and PyYAML's reader could differ).
_SLOW_PATH = re.compile("[&\t\r\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff\ufffe\uffff\u2028\u2029]")


def _depth(value: Any) -> int:
    """Nodes on the deepest path of a loaded YAML value, as ``_SafeLoader`` counts them (a scalar is 1)."""
    if isinstance(value, dict):
        return 1 + max((max(_depth(k), _depth(v)) for k, v in value.items()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 1


def _fast_load(raw: str) -> Any:
    """The frontmatter block parsed by libyaml when the result is certainly what :func:`safe_load` gives (10x
    faster: 1,936 notes in 0.09 s against 1.0 s), else :data:`_SLOW` (then :func:`safe_load` decides, with its
    own errors): no libyaml, a character of :data:`_SLOW_PATH`, any error, or nesting within 5 of ``MAX_DEPTH``."""
    if _CLoader is None or _SLOW_PATH.search(raw):
        return _SLOW
    try:
        data = load_with(_FastLoader, raw)
    except Exception:  # noqa: BLE001 - the pure-Python loader gives the error message
        return _SLOW
    if _depth(data) > MAX_DEPTH - 5:
        return _SLOW
    return data


def decode_bytes(data: bytes, where: str) -> str:
    """Decode a file's bytes as UTF-8 (a leading BOM is dropped).

    Args:
        data: raw file content.
        where: names the file in error messages, e.g. ``"source 'x': docs/a.md"``.

    Returns:
        The text, line endings untouched (``split_frontmatter`` normalizes them).

    Raises:
        NoteError: the bytes are not valid UTF-8 (message names ``where`` and the byte offset) or contain NUL
            bytes (a binary file).
    """
    if b"\x00" in data:
        raise NoteError(f"{where}: binary file (contains NUL bytes); exclude it from the source or fix the file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoteError(
            f"{where}: not valid UTF-8 (byte {exc.start}: {exc.reason}); re-save the file as UTF-8"
            f"{_japanese_encoding_hint(data)}"
        ) from None
    return text[1:] if text.startswith(_BOM) else text


#: hiragana and full-width katakana: Japanese prose has many; bytes of another encoding read as Shift_JIS or
#: EUC-JP give mostly kanji and half-width katakana instead
_KANA = re.compile(r"[\u3041-\u3096\u30a1-\u30fa\u30fc]")


def _japanese_encoding_hint(data: bytes) -> str:
    """`` (it reads as SHIFT_JIS: e.g. `iconv -f SHIFT_JIS -t UTF-8`)`` when ``data`` (not UTF-8) decodes as
    Shift_JIS (Windows' cp932) or EUC-JP to Japanese text, as a note saved by an older Japanese Windows or Unix
    editor does: the encoding whose text has the most kana, at least 2 of them; "" otherwise."""
    best, most = "", 1
    for codec, name in (("cp932", "SHIFT_JIS"), ("euc_jp", "EUC-JP")):
        try:
            kana = len(_KANA.findall(data.decode(codec)))
        except UnicodeDecodeError:
            continue
        if kana > most:
            best, most = name, kana
    return f" (it reads as {best}: e.g. `iconv -f {best} -t UTF-8`)" if best else ""


def normalize_newlines(text: str) -> str:
    """Drop a leading BOM and turn CRLF / lone CR into LF."""
    if text.startswith(_BOM):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def json_safe(value: Any, _budget: list[int] | None = None, _depth: int = 0) -> Any:
    """Recursively turn YAML values into JSON-safe ones.

    dict keys become ``str``; ``datetime``/``date``/``time`` become ISO strings; tuples/sets become lists;
    NaN/inf and any other non-JSON type become ``str``.

    Raises:
        ValueError: more than :data:`MAX_NODES` values (aliases expanded) or nesting deeper than :data:`MAX_DEPTH`.
    """
    if _budget is None:
        _budget = [MAX_NODES]
    _budget[0] -= 1
    if _budget[0] < 0:
        raise _Limits(f"more than {MAX_NODES} values (an alias bomb?)")
    if _depth > MAX_DEPTH:
        raise _Limits(f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, (_dt.date, _dt.time)) else k.isoformat(): json_safe(v, _budget, _depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, _budget, _depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v, _budget, _depth + 1) for v in value), key=str)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _bad_value_line(raw: str) -> int | None:
    """The file line (frontmatter ``raw`` starts on line 2) of the first scalar, in document order, whose value YAML
    cannot construct (``date: 2025-13-45``: a ValueError of the date constructor, which carries no position), or None.
    Composes the node tree (no values) and constructs scalar by scalar; at most :data:`MAX_NODES` nodes."""
    try:
        root = yaml.compose(raw, Loader=_SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return None
    loader = yaml.SafeLoader("")
    todo, seen = ([] if root is None else [root]), set()
    try:
        while todo and len(seen) < MAX_NODES:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, yaml.ScalarNode):
                try:
                    loader.construct_object(node, deep=True)
                except (ValueError, TypeError, OverflowError, yaml.YAMLError):
                    return node.start_mark.line + 2
            elif isinstance(node, yaml.MappingNode):
                todo.extend(reversed([n for pair in node.value for n in pair]))
            elif isinstance(node, yaml.SequenceNode):
                todo.extend(reversed(node.value))
    finally:
        loader.dispose()
    return None


#: PyYAML contexts that start where the user opened something never closed: a quote, a ``[`` or ``{``, a key whose
#: ``:`` never comes. YAML notices on a later line (for a quote, at the closing ``---``); the line to fix is the
#: context's. Any other context encloses the mistake, which is at the problem mark: the block mapping above a badly
#: indented line (often the whole frontmatter, from line 2), the ``"…"`` around a bad escape, the mapping being built.
OPENED_AT_CONTEXT = ("while scanning a quoted scalar", "while parsing a flow sequence",
                     "while parsing a flow mapping", "while scanning a simple key")
_BRACKETS = {"while parsing a flow sequence": "[]", "while parsing a flow mapping": "{}"}
CLOSE_QUOTE = "close the quote (a quote character inside the value: write it twice in '…', as \\\" in \"…\")"


def yaml_error_parts(exc: yaml.YAMLError, first_line: int = 2) -> tuple[int, str, str]:
    """``(file line to fix, problem, what to do)`` for a YAML error in a frontmatter block (its first line is file
    line ``first_line``, 2; 1 for a YAML file of its own: an eval file, synonyms.yaml), from PyYAML's problem mark
    (where the parser stopped) and context mark (what it was reading, from where): an unclosed quote or bracket is named where it opens, a bad indentation on its own line with the
    enclosing block's first line mentioned, a tab with "replace the tab with spaces", a duplicate key on the
    second of its two lines, naming both, with "remove or rename one of the two keys"."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["unknown error"])[0]
    if mark is None:
        return first_line, problem, "fix or quote the value"
    line, fix = mark.line + first_line, "fix or quote the value"
    if isinstance(exc, DuplicateKeyError):        # its lines count from the block's first line: file line 2
        return line, f"duplicate key {exc.key!r} on lines {exc.first_line + first_line - 1} and {line}", \
            "remove or rename one of the two keys"
    ctx, context = getattr(exc, "context_mark", None), getattr(exc, "context", None) or ""
    if "'\\t'" in problem:                          # found character '\t' that cannot start any token
        return line, problem, "replace the tab with spaces"
    if context == "while scanning a double-quoted scalar":        # a bad escape: \q, \x4
        fix = "write a backslash as \\\\ inside \"…\", or use '…' quotes"
    if problem == "but found another document":     # a second `---` in a YAML file of its own
        return line, f"a second YAML document starts here (a `---` line; the first starts on line {first_line})", \
            "a file holds one document: remove the `---` line (or split the file in two)"
    if ctx is None:
        return line, problem, fix
    start = ctx.line + first_line
    what = re.sub(r"^(while (parsing|scanning|constructing) )?(an? )?", "", context)
    # the closing `---` ends the block (the YAML stream) with a quote or bracket still open
    if context == "while scanning a quoted scalar" and "end of stream" in problem:
        return start, f"the quoted value that starts on line {start} is never closed", CLOSE_QUOTE
    if context in _BRACKETS and "<stream end>" in problem:
        opener, closer = _BRACKETS[context]
        return start, f"the {what} ({opener}…{closer}) that starts on line {start} is never closed", \
            f"add the closing '{closer}'"
    if ctx.line >= mark.line:
        return line, problem, fix
    if context in OPENED_AT_CONTEXT:
        return start, f"{problem} on line {line}, in the {what} that starts on line {start}", fix
    if context.endswith("; first occurrence"):    # the composer's "found duplicate anchor 'x'; first occurrence"
        return line, f"{context.removesuffix('; first occurrence')}, first on line {start}", \
            "rename one of the two anchors"
    if problem.startswith("expected <block end>"):   # a line indented off its block, or text after a "…" value
        fix = (f"check the indentation of line {line} (a key or '- ' item starts in the same column as the others "
               "at its level), or quote the value")
    return line, f"{problem}, in the {what} that starts on line {start}", fix


_PLACEHOLDER = re.compile(r"\{\{[^{}\n]*\}\}")
#: ``key: value``, ``- key: value`` or a list item ``- value``: (what precedes the value, the value)
_KEY_VALUE = re.compile(r"^(\s*(?:- )?[^\s:#'\"{\[-][^:]*:\s+|\s*- )(.*?)\s*$")


def _placeholder_parts(text: str) -> tuple[str, str] | None:
    """``(problem, what to do)`` for a frontmatter line that holds an unquoted template placeholder (``date:
    {{date}}`` in a templates folder, Obsidian's Templates or Daily notes syntax), which YAML reads as a mapping
    and rejects with "found unhashable key" or "expected <block end>"; None for any other line. The fix quotes
    the value as Obsidian's Templates help does (``date: "{{date}}"``), or each placeholder inside a ``[…]`` list."""
    found = _PLACEHOLDER.search(text)
    match = _KEY_VALUE.match(text)
    if found is None or match is None:
        return None
    key, value = match.groups()
    # only a placeholder where YAML reads its braces as a mapping: `title: My {{title}}` is a plain text value
    if not (value.startswith("{{") or (value.startswith("[") and re.search(r"[\[,]\s*\{\{", value))):
        return None
    if value.startswith("["):
        quoted = _PLACEHOLDER.sub(lambda m: f'"{m.group(0)}"', value)
    else:
        quoted = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return (f"{found.group(0)} is a template placeholder, which YAML reads as a mapping",
            f"quote it: {key.strip()} {quoted} (as Obsidian's Templates help writes it)")


def frontmatter_end(lines: Sequence[str]) -> int | None:
    """Index in ``lines`` (a note's LF-split lines) of the line closing its frontmatter block: the first line after
    an opening ``---`` (line 1, exactly) that is ``---`` or ``...``; None when line 1 opens none or it is never
    closed."""
    if not lines or lines[0] != "---":
        return None
    return next((i for i in range(1, len(lines)) if lines[i].rstrip(" \t") in _CLOSERS), None)


def split_frontmatter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """Split a note into (frontmatter, body).

    Frontmatter exists only when line 1 is exactly ``---``; it ends at the next line that is exactly ``---`` or
    ``...``. BOM and CRLF/CR are normalized to LF first, so the body never contains ``\\r``.

    Args:
        text: the whole file as text.
        where: names the file in error messages.

    Returns:
        ``(frontmatter, body)``: a JSON-safe dict (``{}`` when there is none or it is empty) and the text after the
        closing line, leading blank lines dropped (the whole text when there is no frontmatter).

    Raises:
        NoteError: the YAML is invalid (message names ``where`` and the file line to fix, see
            :func:`yaml_error_parts`), is not a mapping, or the block is never closed.
    """
    text = normalize_newlines(text)
    if not (text.startswith("---\n") or text == "---"):
        return {}, text
    lines = text.split("\n")
    end = frontmatter_end(lines)
    if end is None:
        raise NoteError(f"{where}: line 1: frontmatter opened with '---' is never closed; add a closing '---' line")
    raw = "\n".join(lines[1:end])
    body = "\n".join(lines[end + 1:]).lstrip("\n")
    if len(raw) > MAX_FRONTMATTER_CHARS:
        raise NoteError(f"{where}: line 2: frontmatter is {len(raw)} characters, above the limit of "
                        f"{MAX_FRONTMATTER_CHARS}; move the data out of the frontmatter")
    try:
        data = _fast_load(raw) if raw.strip() else None
        if data is _SLOW:
            data = safe_load(raw)
        if isinstance(data, dict):
            data = json_safe(data)
    except RecursionError:
        raise NoteError(f"{where}: line 2: invalid YAML frontmatter: nested too deeply") from None
    except _Limits as exc:
        raise NoteError(f"{where}: line 2: frontmatter refused: {exc}; simplify it") from None
    except yaml.YAMLError as exc:
        line, problem, fix = yaml_error_parts(exc)
        problem, fix = _placeholder_parts(lines[line - 1] if 1 < line <= end else "") or (problem, fix)
        raise NoteError(f"{where}: line {line}: invalid YAML frontmatter: {problem}; {fix}") from None
    except (ValueError, TypeError, OverflowError) as exc:   # e.g. `due: 2021-13-45` (YAML's date constructor)
        line = _bad_value_line(raw) or 2
        raise NoteError(f"{where}: line {line}: invalid value in frontmatter: {exc}; quote the value") from None
    if data is None:
        return {}, body
    if not isinstance(data, dict):
        raise NoteError(
            f"{where}: line 2: frontmatter must be a YAML mapping (key: value lines), got {type(data).__name__}"
        )
    return data, body


def render_note(frontmatter: dict[str, Any], body: str, memo: Any = None) -> str:
    """Render a note: ``---``, the YAML mapping (key order kept, unicode as is), ``---``, a blank line, the body.

    The body is written with leading/trailing blank lines trimmed and exactly one final newline, so
    ``split_frontmatter(render_note(fm, body))`` returns ``(fm, canonical_body(body))`` for JSON-safe ``fm``.
    ``memo``: optional :class:`pipeline.common.memo.MemoCache` of YAML dumps of single ``key: value`` entries,
    keyed by the entry's JSON (the vault stage keeps one per source: dumping every note's frontmatter again took
    ~0.5 ms a note, and ``fetched_at`` changes on every build, so whole mappings would never repeat). A block
    mapping's dump is its entries' dumps one after the other (checked on the 1,931 notes of the five corpora).
    """
    dumped = ""
    if frontmatter:
        data = json_safe(frontmatter)
        dumped = _dump(data) if memo is None else _dump_entries(data, memo)
    text = canonical_body(body)
    return f"---\n{dumped}---\n\n{text}" if text else f"---\n{dumped}---\n"


def _dump(data: dict[str, Any], allow_unicode: bool = True, fallback: bool = True) -> str:
    dumped = yaml.safe_dump(data, allow_unicode=allow_unicode, sort_keys=False, default_flow_style=False,
                            width=10**9)
    if fallback and _YAML_BREAKS.search(dumped):   # YAML folds these as line breaks: write them escaped instead
        dumped = _dump(data, allow_unicode=False, fallback=False)
    return dumped


def _dump_entries(data: dict[str, Any], memo: Any) -> str:
    """``_dump(data)`` assembled from the memo's dumps of its entries; the whole mapping escaped as ``_dump`` does
    when any entry holds a line-break character."""
    parts = []
    for k, v in data.items():
        key = hashlib.sha1(json.dumps([k, v], ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()[:24]
        parts.append(memo.memo(key, lambda k=k, v=v: _dump({k: v}, fallback=False)))
    dumped = "".join(parts)
    return _dump(data) if _YAML_BREAKS.search(dumped) else dumped


def canonical_body(body: str) -> str:
    """The body as stored in a Note: LF only, no leading blank lines, exactly one final newline ("" when empty)."""
    text = normalize_newlines(body).strip("\n")
    return f"{text}\n" if text else ""


#: frontmatter ``docsvault: index`` marks the generated index note of a source folder (vault.index_note)
INDEX_KEY = "docsvault"
INDEX_VALUE = "index"


@functools.lru_cache(maxsize=20_000)
def _parse_cached(data: bytes) -> tuple[str, str]:
    fm, body = split_frontmatter(decode_bytes(data, ""), "")
    return json.dumps(fm, ensure_ascii=False), body


def parse_note(data: bytes, where: str) -> tuple[dict, str]:
    """``split_frontmatter(decode_bytes(data))``, memoized by the file's bytes: the stages of one build (chunk,
    graph, warehouse) read the same vault files, and YAML parsing is most of reading them. The frontmatter is
    JSON-safe, so each call returns a fresh copy via JSON."""
    try:
        fm_json, body = _parse_cached(data)
    except NoteError:
        split_frontmatter(decode_bytes(data, where), where)     # the same error, naming the file
        raise
    return json.loads(fm_json), body


def kept_originals(page: Mapping[str, Any], replaced: Mapping[str, Any]) -> dict[str, Any]:
    """``{"original_<key>": value}`` for each of a page's own values that a writer replaced with its own
    (``replaced``: key -> the page's value), unless the page has that ``original_<key>`` itself: nothing the page
    said is lost (the normalize stage's ``source``/``url``/…, capture's ``created``/``agent``/…)."""
    return {f"original_{key}": value for key, value in replaced.items() if f"original_{key}" not in page}
