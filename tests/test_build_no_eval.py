"""A build without the retrieval eval (``docsvault build --no-eval``, and the build of ``capture`` / MCP
``save_note``): the run leaves ``retrieval_eval`` out, says so, records no no-op, and the next build evaluates the
warehouse it published."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.defs.assets import key

runner = CliRunner()


def _eval_materializations(root: Path) -> int:
    """How many times the tiny env's Dagster instance materialized ``retrieval_eval``."""
    with dg.DagsterInstance.from_config(str(root / "dagster")) as instance:
        return len(instance.fetch_materializations(key("retrieval_eval"), limit=100).records)


def _eval_line(output: str) -> str:
    return next(ln for ln in output.splitlines() if ln.startswith("eval:"))


def test_capture_builds_without_the_eval_and_the_next_build_evaluates(built_tiny_env: Path) -> None:
    assert _eval_materializations(built_tiny_env) == 1
    result = runner.invoke(app, ["capture", "Lemmings migrate in large groups.", "--source", "tiny",
                                 "--name", "Lemmings", "--correlation-id", "c9"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"captured {built_tiny_env / 'tinyvault' / 'Lemmings.md'} (tiny/Lemmings.md, correlation id c9)"
    assert lines[-1] == "  searchable now: source tiny rebuilt"
    assert _eval_materializations(built_tiny_env) == 1
    assert runner.invoke(app, ["search", "lemmings migrate", "-k", "1", "--files"]).stdout.count("tiny/Lemmings.md") == 1

    again = runner.invoke(app, ["build"])
    assert again.exit_code == 0, again.output
    assert _eval_line(again.stdout).startswith("eval: n=2 ")
    assert "no Dagster run was needed" not in again.stdout     # the no-op record predates the capture
    assert _eval_materializations(built_tiny_env) == 2


def test_build_no_eval_says_so_and_records_no_noop(built_tiny_env: Path) -> None:
    (built_tiny_env / "tinyvault" / "Otters.md").write_text("# Otters\n\nOtters hold hands while they sleep.\n",
                                                           encoding="utf-8")
    result = runner.invoke(app, ["build", "--no-eval"])
    assert result.exit_code == 0, result.output
    assert _eval_line(result.stdout) == "eval: not run (--no-eval); the next build evaluates this warehouse"
    assert _eval_materializations(built_tiny_env) == 1

    again = runner.invoke(app, ["build"])
    assert again.exit_code == 0, again.output
    assert _eval_line(again.stdout).startswith("eval: n=2 ")
    assert "no Dagster run was needed" not in again.stdout
    assert _eval_materializations(built_tiny_env) == 2
