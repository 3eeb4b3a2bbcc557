"""A build killed after its vault stage moved edited notes aside (``Home (edited).md``) never printed those lines;
the build that finishes it skips the vault stage (done already) and, before session 40, said nothing of them either
(a `kill -9` five seconds into a build of 80 edited notes: 80 edits moved to copies without a word). It now names
them, as the killed build would have."""

from __future__ import annotations

from pathlib import Path

from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.defs.runner import _name_unreported_edits
from pipeline.service import build_outcome
from pipeline.stages import unreported_conflicts
from pipeline.stages.results import BuildReport, SourceStatus

KILLED_AT = "2026-12-06T10:00:00+00:00"


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data", vault_dir=tmp_path / "vault",
                    evals_dir=tmp_path / "evals")


def test_the_vault_write_of_a_killed_build_is_unreported(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    assert unreported_conflicts(s, "me", KILLED_AT) == []                       # no state
    artifacts.update_state(s, "me", vault_conflicts=["Home.md -> Home (edited).md"],
                           vault_written_at="2026-12-06T10:00:05+00:00")
    assert unreported_conflicts(s, "me", KILLED_AT) == ["Home.md -> Home (edited).md"]
    assert unreported_conflicts(s, "me", "2026-12-06T10:00:06+00:00") == []    # an earlier build's, reported then
    artifacts.update_state(s, "me", vault_written_at="not a time")
    assert unreported_conflicts(s, "me", KILLED_AT) == []


def test_the_finishing_build_names_them_for_a_skipped_vault_stage_only(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    for name in ("me", "ran", "failed"):
        artifacts.update_state(s, name, vault_conflicts=["Home.md -> Home (edited).md"],
                               vault_written_at="2026-12-06T10:00:05+00:00")
    report = BuildReport(sources=[
        SourceStatus("me", metadata={"vault": {"skipped": True, "notes": 3}}),
        SourceStatus("ran", metadata={"vault": {"skipped": False, "conflicts": []}}),     # its own write: its own
        SourceStatus("failed", ok=False, failed_stage="fetch", metadata={"vault": {"skipped": True}}),
    ], shared_ok=True)
    _name_unreported_edits(s, report, KILLED_AT)
    assert report.sources[0].metadata["vault"] == {"skipped": True, "notes": 3,
                                                   "conflicts": ["Home.md -> Home (edited).md"]}
    assert report.sources[1].metadata["vault"] == {"skipped": False, "conflicts": []}
    assert report.sources[2].metadata["vault"] == {"skipped": True}
    assert build_outcome(report).sources[0].kept_edits == (
        "vault/me/Home.md was edited since the build wrote it: your version is kept as vault/me/Home (edited).md",)
