"""`docsvault status` says what the last eval of the data dir found, or what is missing and what to run (session 47:
status said nothing of the eval, so a data dir whose eval never ran, or had no case about a built source, looked the
same as one that met its floors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.cli import eval_status_line
from pipeline.common.artifacts import update_state
from pipeline.config import Settings
from pipeline.service import eval_status
from pipeline.stages import record_floors_check
from pipeline.stages.base import SHARED_STATE

NEVER = ("eval: never run in this data dir (no build here ran it: a capture's build and `build --no-eval` leave it "
         "out, and a copied warehouse brings none)")
STALE = ("; of an earlier warehouse: a build that left the eval out (a capture's, or `build --no-eval`) published "
         "since; the next `docsvault build` scores this one")


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data", vault_dir=tmp_path / "vault",
                    evals_dir=tmp_path / "evals")


def test_status_says_the_eval_never_ran_and_what_to_run(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    assert eval_status(s, None) is None
    assert eval_status_line(None, s) == (
        f"{NEVER}: `docsvault build` scores the cases "
        f"of {tmp_path / 'evals'}, or `docsvault eval` now; there are none: point DOCSVAULT_EVALS at your cases "
        "(README: Eval files)")


def test_status_says_an_eval_folder_without_eval_files_holds_none(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`DOCSVAULT_EVALS` naming an existing but empty folder: status said "`docsvault build` scores the cases of
    …/evals", though there were none (helper s47-leftovers)."""
    s = _settings(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not cases")
    (tmp_path / "mine" / "._cases.yaml").write_bytes(b"\x00")           # macOS' resource fork: no eval file
    monkeypatch.setenv("DOCSVAULT_EVALS", str(tmp_path / "mine"))
    assert eval_status_line(None, s) == (
        f"{NEVER}: {tmp_path / 'mine'} holds no eval "
        "file (*.yaml, *.yml): add your cases there, or point DOCSVAULT_EVALS at them (README: Eval files)")
    (tmp_path / "mine" / "cases.yml").write_text("corpus: x\ncases: []\n")
    assert eval_status_line(None, s) == (
        f"{NEVER}: `docsvault build` scores the cases "
        f"of {tmp_path / 'mine'}, or `docsvault eval` now")
    monkeypatch.delenv("DOCSVAULT_EVALS")
    (tmp_path / "evals").mkdir()                                        # the default folder, empty
    assert eval_status_line(None, s).endswith(f": {tmp_path / 'evals'} holds no eval file (*.yaml, *.yml): add your "
                                              "cases there, or point DOCSVAULT_EVALS at them (README: Eval files)")


def test_status_says_the_eval_folder_it_read_holds_no_eval_file(tmp_path: Path) -> None:
    """The build's eval read an empty folder: status said `no eval case is about a built source (eval files:
    …/evals)`, as if cases were there with a wrong corpus (helper s49-ja)."""
    s = _settings(tmp_path)
    (tmp_path / "evals").mkdir()
    update_state(s, SHARED_STATE, eval={"key": "k", "report": {"overall": {"n": 0}, "files": [str(tmp_path / "evals")]}})
    ev = eval_status(s, "2026-12-07T10:00:00+00:00")
    assert eval_status_line(ev, s) == (
        f"eval: no case scored: {tmp_path / 'evals'} holds no eval file (*.yaml, *.yml), so no floor was checked: "
        "add your cases there, or point DOCSVAULT_EVALS at them (README: Eval files)")
    (tmp_path / "evals" / "cases.yaml").write_text("corpus: x\ncases: []\n")     # a case file now: as before
    assert eval_status_line(ev, s).startswith("eval: no eval case is about a built source (eval files: ")


def test_status_says_no_case_is_about_a_built_source(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    update_state(s, SHARED_STATE, eval={"key": "k", "report": {"overall": {"n": 0}, "files": ["/e/my.yaml"]}})
    ev = eval_status(s, "2026-12-07T10:00:00+00:00")
    assert ev == {"n": 0, "files": ["/e/my.yaml"]}
    assert eval_status_line(ev, s) == (
        "eval: no eval case is about a built source (eval files: /e/my.yaml), so no floor was checked; point "
        "DOCSVAULT_EVALS at your cases (README: Eval files)")


def _eval_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hit_at_3: float) -> Settings:
    """Settings of a data dir whose last eval (n=4, MRR@10 0.625, run at 10:00:05 on a warehouse built at 10:00) the
    shared state records, with no floor variable set."""
    monkeypatch.delenv("DOCSVAULT_EVAL_MIN_MRR", raising=False)
    monkeypatch.delenv("DOCSVAULT_EVAL_MIN_HIT3", raising=False)
    s = _settings(tmp_path)
    overall = {"n": 4, "hit@1": 0.5, "hit@3": hit_at_3, "mrr@10": 0.625, "ndcg@10": 0.7}
    update_state(s, SHARED_STATE, eval={"key": "k", "report": {
        "overall": overall, "files": ["/e"], "run_at": "2026-12-07T10:00:05+00:00",
        "warehouse_built_at": "2026-12-07T10:00:00+00:00"}})
    return s


def test_status_gives_the_last_eval_and_its_floors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _eval_recorded(tmp_path, monkeypatch, hit_at_3=0.75)
    ev = eval_status(s, "2026-12-07T11:00:00+00:00")      # a --no-eval build published since
    assert ev == {"n": 4, "files": ["/e"], "hit_at_1": 0.5, "hit_at_3": 0.75, "mrr_at_10": 0.625,
                  "ndcg_at_10": 0.7, "run_at": "2026-12-07T10:00:05+00:00", "stale": True,
                  "floors_from": "environment", "floors": {"mrr_at_10": 0.7, "hit_at_3": 0.8},
                  "below": "mrr@10 0.625 < 0.700, hit@3 0.750 < 0.800"}
    assert eval_status_line(ev, s) == (       # no build recorded a verdict (an eval of an older docsvault)
        f"eval: n=4 hit@1=0.500 hit@3=0.750 MRR@10=0.625 nDCG@10=0.700 (2026-12-07T10:00:05+00:00{STALE}); "
        "below this environment's floors (mrr@10 0.625 < 0.700, hit@3 0.750 < 0.800), judged now: no build "
        "recorded its check of this eval: see `docsvault eval` for the cases missed, or set DOCSVAULT_EVAL_MIN_MRR / "
        "DOCSVAULT_EVAL_MIN_HIT3 for your own cases")
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", "0.5")
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_HIT3", "0.5")
    ev = eval_status(s, "2026-12-07T10:00:00+00:00")
    assert eval_status_line(ev, s) == ("eval: n=4 hit@1=0.500 hit@3=0.750 MRR@10=0.625 nDCG@10=0.700 "
                                       "(2026-12-07T10:00:05+00:00); this environment's floors met (mrr@10 0.50, "
                                       "hit@3 0.50), judged now: no build recorded its check of this eval")
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", "high")
    assert eval_status_line(eval_status(s, None), s).endswith(
        "; floors not checked: DOCSVAULT_EVAL_MIN_MRR='high': the mrr@10 floor must be a number between 0 and 1")


def test_status_reports_the_floors_the_build_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build with `DOCSVAULT_EVAL_MIN_MRR=0.6`, then `docsvault status` from a shell without it: status judged the
    eval with its own floors (the default 0.70: "below its floors") where the build's eval_floors check had passed
    (session 48). It reports the build's verdict and floors, and the floors this shell would have the next build
    check."""
    s = _eval_recorded(tmp_path, monkeypatch, hit_at_3=1.0)
    record_floors_check(s, {"mrr@10": 0.6, "hit@3": 0.8}, "")           # what the build's asset check did
    ev = eval_status(s, "2026-12-07T10:00:00+00:00")
    assert {k: ev[k] for k in ("floors_from", "floors", "below", "floors_now")} == {
        "floors_from": "build", "floors": {"mrr_at_10": 0.6, "hit_at_3": 0.8}, "below": "",
        "floors_now": {"mrr_at_10": 0.7, "hit_at_3": 0.8}}
    assert eval_status_line(ev, s) == (
        "eval: n=4 hit@1=0.500 hit@3=1.000 MRR@10=0.625 nDCG@10=0.700 (2026-12-07T10:00:05+00:00); the build's "
        "floors met (mrr@10 0.60, hit@3 0.80); this environment's floors are mrr@10 0.70, hit@3 0.80: the next "
        "`docsvault build` checks those")
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", "0.6")                 # the build's shell: no second clause
    assert eval_status_line(eval_status(s, None), s).endswith("; the build's floors met (mrr@10 0.60, hit@3 0.80)")
    monkeypatch.setenv("DOCSVAULT_EVAL_MIN_MRR", "high")                # the build's verdict stands
    assert eval_status_line(eval_status(s, None), s).endswith(
        "; the build's floors met (mrr@10 0.60, hit@3 0.80); this environment's floors: DOCSVAULT_EVAL_MIN_MRR="
        "'high': the mrr@10 floor must be a number between 0 and 1")
    update_state(s, SHARED_STATE, eval={"key": "k2", "report": {
        "overall": {"n": 4, "hit@1": 0.5, "hit@3": 1.0, "mrr@10": 0.625, "ndcg@10": 0.7}, "files": ["/e"], "run_at": "2026-12-07T11:00:05+00:00"}})
    monkeypatch.delenv("DOCSVAULT_EVAL_MIN_MRR")                        # a verdict of another report: not this one's
    assert eval_status(s, None)["floors_from"] == "environment"


def test_after_a_capture_status_does_not_blame_no_eval(built_tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`docsvault capture` (its build leaves the eval out), then `docsvault status`: the eval line said "the next
    build without --no-eval scores this one", an option the user never passed (session 48)."""
    from typer.testing import CliRunner

    from pipeline.cli import app

    monkeypatch.delenv("DOCSVAULT_EVAL_MIN_MRR", raising=False)
    monkeypatch.delenv("DOCSVAULT_EVAL_MIN_HIT3", raising=False)
    runner = CliRunner()
    captured = runner.invoke(app, ["capture", "Herons stand still.", "--title", "Herons", "--source", "tiny"])
    assert captured.exit_code == 0, captured.output
    ev = json.loads(runner.invoke(app, ["status", "--json"]).stdout)["eval"]
    assert (ev["stale"], ev["floors_from"]) == (True, "build")          # the build's asset check recorded its verdict
    status = runner.invoke(app, ["status"])
    assert [line for line in status.stdout.splitlines() if line.startswith("eval:")] == [(
        f"eval: n=2 hit@1=1.000 hit@3=1.000 MRR@10=1.000 nDCG@10=1.000 ({ev['run_at']}{STALE}); the build's "
        "floors met (mrr@10 0.70, hit@3 0.80)")]
