"""Credentials written into a source's URL (``https://user:token@host/…``) are printed nowhere: `sources list` hides
them as the build's errors do (the fetches keep them out of notes and warnings: tests/test_html.py,
tests/test_llms_txt.py)."""

from __future__ import annotations

from pathlib import Path

from pipeline.cli import app


def test_sources_list_does_not_print_a_urls_credentials(tmp_path: Path) -> None:
    """`sources list` printed ``https://user:s3cr3t@host/x.git`` as written (the build's errors already hid it)."""
    from typer.testing import CliRunner

    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  - name: g\n    kind: git\n    url: https://user:s3cr3t@git.example/x.git\n"
                       "  - name: h\n    kind: llms_txt\n    url: http://bob:hunter2@docs.example/llms.txt\n",
                       encoding="utf-8")
    result = CliRunner().invoke(app, ["--sources", str(sources), "sources", "list"])
    assert (result.exit_code, result.stdout) == (0, (
        "g                        git      auto       https://***@git.example/x.git\n"
        "h                        llms_txt auto       http://***@docs.example/llms.txt\n"))
