"""The run's log gets progress lines only for a step that runs long (each line is an event in Dagster's storage)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.defs import assets
from pipeline.stages.base import notify


def test_progress_lines_only_for_a_step_that_runs_long(monkeypatch: pytest.MonkeyPatch):
    lines: list[str] = []
    context = SimpleNamespace(log=SimpleNamespace(info=lines.append))
    clock = [100.0]
    monkeypatch.setattr(assets.time, "monotonic", lambda: clock[0])

    def quick() -> None:
        notify("fetch", "docs", 0, 3)
        clock[0] += 2
        notify("fetch", "docs", 3, 3)

    def slow() -> None:
        notify("fetch", "docs", 0, 3)
        clock[0] += 11
        notify("fetch", "docs", 1, 3)
        notify("fetch", "other", 1, 3)              # another source's step: not this asset's line
        clock[0] += 1
        notify("fetch", "docs", 2, 3)               # within PROGRESS_LOG_SECONDS of the last line
        notify("fetch", "docs", 3, 3)               # the end of a step that logged progress

    assets._with_progress_log(context, "docs", quick)
    assert lines == []
    assets._with_progress_log(context, "docs", slow)
    assert lines == ["docs: fetch 1/3", "docs: fetch 3/3"]
