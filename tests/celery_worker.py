"""Test-only Celery worker: ``celery ARGS`` (the docsvault deployment's worker) with two hooks set by environment.

* ``DOCSVAULT_TEST_BARRIER=<dir>:<n>``: inside the fetch stage (where the host-local stage lock would be held),
  each fetch waits until ``n`` fetches have started (at most 60 s). With solo workers (one task at a time) this
  puts ``n`` per-source steps on ``n`` different workers at once — and would time out if a lock serialized them.
* ``DOCSVAULT_TEST_PAUSE=<dir>:<source>``: the first embedding step of ``<source>`` writes ``<dir>/paused``
  (this worker's pid) and sleeps, so the test can SIGKILL the worker in the middle of a build. A retry (on any
  worker) finds the file and runs normally.

Run as ``python tests/celery_worker.py -A dagster_celery.app worker ...`` with the project and ``deploy/`` on
PYTHONPATH.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def install_hooks() -> None:
    barrier = os.environ.get("DOCSVAULT_TEST_BARRIER")
    if barrier:
        from pipeline.ingest import fetch

        folder, n = barrier.rsplit(":", 1)
        original_fetch = fetch.fetch_source

        def fetch_source(source, settings, *args, **kwargs):
            Path(folder, f"fetch-{source.name}-{os.getpid()}").write_text(str(time.time()))
            deadline = time.monotonic() + 60
            while len(list(Path(folder).glob("fetch-*"))) < int(n) and time.monotonic() < deadline:
                time.sleep(0.05)
            return original_fetch(source, settings, *args, **kwargs)

        fetch.fetch_source = fetch_source

    pause = os.environ.get("DOCSVAULT_TEST_PAUSE")
    if pause:
        from pipeline import stages as build

        folder, target = pause.rsplit(":", 1)
        original_embed = build.embed_stage

        def embed_stage(settings, source, *args, **kwargs):
            marker = Path(folder, "paused")
            if source.name == target and not marker.exists():
                tmp = marker.with_suffix(".tmp")
                tmp.write_text(str(os.getpid()))
                tmp.rename(marker)
                time.sleep(600)
            return original_embed(settings, source, *args, **kwargs)

        build.embed_stage = embed_stage


if __name__ == "__main__":
    install_hooks()
    from celery.__main__ import main

    sys.argv = ["celery", *sys.argv[1:]]
    sys.exit(main())
