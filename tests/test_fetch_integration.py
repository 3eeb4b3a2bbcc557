"""Acceptance of the fetch issue through `docsvault build` (Dagster, fake hash embedder): one dead source fails
alone and keeps serving its last good copy; a second build with nothing changed downloads nothing."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from tests.loopback import serve

runner = CliRunner()

SITE = {
    "docs/index.html": "<html><head><title>Web</title></head><body><nav><a href='guide/'>Guide</a></nav>"
                       "<main><h1>Web home</h1><p>The otter habitat is described in the <a href='guide/'>guide</a>."
                       "</p></main></body></html>",
    "docs/guide/index.html": "<html><body><main><h1>Guide</h1><p>Otters live near rivers and eat fish.</p></main>"
                             "</body></html>",
}


@pytest.mark.integration
def test_dead_source_fails_alone_and_incremental_build_downloads_nothing(tmp_path, tiny_env):
    site = tmp_path / "site"
    for rel, text in SITE.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text, encoding="utf-8")
    second = tmp_path / "second"
    second.mkdir()
    (second / "Second.md").write_text("# Second\n\nA second local source about teapots.\n", encoding="utf-8")
    sources = tmp_path / "sources.yaml"
    base_yaml = sources.read_text(encoding="utf-8")
    with serve(site) as (base, _):
        sources.write_text(
            base_yaml + f"  - name: second\n    kind: local\n    path: {second}\n"
            f"  - name: web\n    kind: html\n    url: {base}/docs/\n    rate_limit: 0\n", encoding="utf-8")
        first = runner.invoke(app, ["build"])
        assert first.exit_code == 0, first.output
        again = runner.invoke(app, ["build"])
        assert again.exit_code == 0, again.output
    data = tmp_path / "data"
    state = json.loads((data / "raw" / "web" / "fetch.json").read_text())
    assert state["stats"]["bytes"] == 0 and state["stats"]["not_modified"] == 2 and state["stats"]["seconds"] < 2
    vault_web = tmp_path / "vault" / "web"
    before = {p.relative_to(vault_web).as_posix(): p.read_bytes() for p in vault_web.rglob("*.md")}
    assert sorted(before) == ["_index.md", "docs/guide/index.md", "docs/index.md"]     # + the source's index note

    # the server is gone: 'web' fails alone, the others build, exit code 1, the old copy still serves
    (second / "Second.md").write_text("# Second\n\nTeapots and kettles.\n", encoding="utf-8")
    broken = runner.invoke(app, ["build"])
    assert broken.exit_code == 2
    lines = broken.output.splitlines()
    web_line = next(line for line in lines if line.startswith("web "))
    assert web_line.split()[1] == "failed" and f"cannot fetch start page {base}/docs/" in web_line
    assert next(line for line in lines if line.startswith("second ")).split()[1] == "built"
    assert next(line for line in lines if line.startswith("tiny ")).split()[1] == "unchanged"
    assert "1 source(s) failed: web" in broken.output
    after = {p.relative_to(vault_web).as_posix(): p.read_bytes() for p in vault_web.rglob("*.md")}
    assert after == before
    found = runner.invoke(app, ["search", "otters eat fish near rivers", "--source", "web", "--json"])
    assert found.exit_code == 0, found.output
    hits = json.loads(found.stdout)
    assert hits and hits[0]["source_path"] == "docs/guide/index.md"
    shutil.rmtree(site)
