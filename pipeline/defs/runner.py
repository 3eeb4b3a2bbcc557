"""`docsvault build`: materialize every asset through Dagster, recorded in DAGSTER_HOME, one source failing alone.

Run 1 materializes the per-source chains (a failed source skips only its own downstream assets); run 2 the shared
stages, over every source's last good copy. Both runs show in the Dagster UI.

One writer: the whole build holds ``<data>/build.lock`` (``pipeline.lock``); a second build waits up to ``wait``
seconds, then refuses with the holder's pid and start time. A lock left by a killed build is taken over, and the
temp files it left are removed before anything else runs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from pipeline import artifacts, build
from pipeline.config import Settings
from pipeline.defs.assets import PER_SOURCE_STAGES, SHARED_STAGES, source_slug
from pipeline.sources import load_sources, select_sources

INSTANCE_YAML = """\
# docsvault: everything stays local (SQLite storage under DAGSTER_HOME); no telemetry.
telemetry:
  enabled: false
"""


@dataclass
class SourceStatus:
    name: str
    ok: bool = True
    failed_stage: str = ""
    error: str = ""
    metadata: dict = field(default_factory=dict)   # stage -> metadata dict


@dataclass
class BuildReport:
    sources: list[SourceStatus]
    shared_ok: bool
    shared_error: str = ""
    shared_metadata: dict = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)   # "removed vault/<name>/: ..." of sources dropped from sources.yaml

    @property
    def ok(self) -> bool:
        return self.shared_ok and all(s.ok for s in self.sources)


def ensure_instance(settings: Settings) -> Path:
    """Point DAGSTER_HOME at <data>/dagster (unless set) and give it a dagster.yaml with telemetry off."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        project_cfg = Path(__file__).resolve().parents[2] / "dagster.yaml"
        cfg.write_text(project_cfg.read_text() if project_cfg.is_file() else INSTANCE_YAML, encoding="utf-8")
    return home


def _metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def _failures(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    """step key -> first line of the error message, for failed steps."""
    failures: dict[str, str] = {}
    for event in result.all_events:
        if event.is_step_failure and event.step_key:
            data = event.step_failure_data
            err = data.error if data else None
            msg = (err.message if err else "failed").strip()
            # the user error's own message, not Dagster's wrapper line
            if err and err.cause is not None:
                msg = err.cause.message.strip()
            first = " ".join(line.strip() for line in msg.splitlines() if line.strip())[:500] if msg else "failed"
            failures[event.step_key] = re.sub(r"^(?:[\w.]+\.)?\w*(?:Error|Exception): ", "", first)
    return failures


def run_build(settings: Settings, source_names: Sequence[str] | None = None, log_level: str = "CRITICAL",
              *, wait: float = 0.0, progress: Callable[[str, str, int, int], None] | None = None) -> BuildReport:
    """Materialize the chains of the selected sources (default: all), then the shared stages.

    Args:
        settings: paths and models.
        source_names: only these sources (default: all of sources.yaml).
        log_level: level of Dagster's console logger (the full event log is always kept in DAGSTER_HOME and shown
            by the UI); the CLI passes INFO with --verbose.
        wait: seconds to wait for another build holding the lock (0: refuse at once).
        progress: called as ``progress(stage, source, done, total)`` while long stages run (embedding).

    Raises:
        BuildLockedError: another build holds the lock (its pid and start time are in the message).
    """
    from pipeline import build
    from pipeline.lock import build_lock

    with build_lock(settings.data_dir, wait=wait):
        build.cleanup_leftovers(settings)
        if progress is not None:
            build.PROGRESS_HOOKS.append(progress)
        try:
            return _run(settings, source_names, log_level)
        finally:
            if progress is not None:
                build.PROGRESS_HOOKS.remove(progress)


def _run(settings: Settings, source_names: Sequence[str] | None, log_level: str) -> BuildReport:
    from pipeline.definitions import build_definitions

    ensure_instance(settings)
    all_sources = load_sources(settings.sources_file)
    sources = select_sources(all_sources, list(source_names or []))
    build.check_layout(settings, all_sources)
    removed = build.remove_dropped_sources(settings, all_sources)
    defs = build_definitions(settings)
    job = defs.resolve_implicit_global_asset_job_def()
    instance = dg.DagsterInstance.get()

    per_source = [dg.AssetKey([stage, source_slug(s.name)]) for s in sources for stage in PER_SOURCE_STAGES]
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    r1 = job.execute_in_process(instance=instance, asset_selection=per_source, raise_on_error=False, run_config=run_config,
                                tags={"docsvault/run": "sources"})
    failures = _failures(r1)
    meta = _metadata(r1)
    statuses: list[SourceStatus] = []
    for s in sources:
        st = SourceStatus(name=s.name)
        slug = source_slug(s.name)
        for stage in PER_SOURCE_STAGES:
            st.metadata[stage] = meta.get(f"{stage}/{slug}", {})
            step = f"{stage}__{slug}"
            if step in failures and st.ok:
                st.ok, st.failed_stage, st.error = False, stage, failures[step]
        if st.ok and not st.metadata.get("embeddings"):
            st.ok, st.failed_stage, st.error = False, "checks", "a blocking asset check failed (see the Dagster UI)"
        # shown by `status` until a build of the source succeeds
        last_error = None if st.ok else {"stage": st.failed_stage, "error": st.error, "at": build._now()}
        if last_error is not None or artifacts.load_state(settings, s.name).get("last_error") is not None:
            artifacts.update_state(settings, s.name, last_error=last_error)
        statuses.append(st)

    shared = [dg.AssetKey([stage]) for stage in SHARED_STAGES]
    r2 = job.execute_in_process(instance=instance, asset_selection=shared, raise_on_error=False, run_config=run_config,
                                tags={"docsvault/run": "shared"})
    f2 = _failures(r2)
    shared_error = "; ".join(f"{k}: {v}" for k, v in f2.items())
    return BuildReport(sources=statuses, shared_ok=r2.success and not f2, shared_error=shared_error,
                       shared_metadata=_metadata(r2), removed=removed)
