"""Search UX through the CLI and the MCP service on the tiny vault (one build): exit codes, query syntax, inline
tags, lanes, neighbours, usage log and boost, capture (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import Settings
from tests.conftest import _tiny_env_at, _write_tiny, built_once

runner = CliRunner()


@pytest.fixture
def ux_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny env with a diary note and an inbox source, after one `docsvault build` (built once per test
    process, then restored: conftest.built_once)."""

    def build(root: Path) -> None:
        tiny_vault = _write_tiny(root)
        tiny_env = _tiny_env_at(root, tiny_vault, monkeypatch)
        (tiny_vault / "Diary.md").write_text("# Diary\n\nToday I fed the ducks. #日記 #life/family\n", encoding="utf-8")
        inbox = tiny_env / "inbox"
        inbox.mkdir()
        (inbox / "Seed.md").write_text("# Seed\n\nThe inbox holds captured notes.\n", encoding="utf-8")
        with (tiny_env / "sources.yaml").open("a", encoding="utf-8") as f:
            f.write(f"  - name: inbox\n    kind: local\n    path: {inbox}\n    format: obsidian\n")
        result = runner.invoke(app, ["build"])
        assert result.exit_code == 0, result.output

    return built_once("ux-built", tmp_path_factory, monkeypatch, build)[0]


def run(*args: str, code: int = 0, stdin: str | None = None) -> str:
    result = runner.invoke(app, list(args), input=stdin)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.output


def test_search_ux_end_to_end(ux_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # exit 1 when nothing matches, in every output mode; errors are one line
    assert run("search", "ducks", "--tag", "nothing-has-it", code=1) == (
        "No results: no note has the tag 'nothing-has-it' (frontmatter or inline #tag)\n")
    # a tag typo: the tag a note has that it probably meant (before session 47, the bare line of a made-up tag)
    assert run("search", "ducks", "--tag", "#Lfe/family", code=1) == (
        "No results: no note has the tag '#Lfe/family' (frontmatter or inline #tag; did you mean 'life/family'?)\n")
    assert run("search", "ducks", "--tag", "lfe/family", "--source", "inbox", code=1) == (
        "No results: no note of inbox has the tag 'lfe/family' (frontmatter or inline #tag)\n")   # not of that source
    assert run("search", "ducks", "--tag", "nothing-has-it", "--files", code=1) == ""
    assert run("search", "ducks", "--tag", "nothing-has-it", "--json", code=1) == "[]\n"
    assert run("embed", "x", "--source", "nope", code=2) == (
        "error: unknown source(s) 'nope'; known sources: inbox, tiny\n")
    assert run("search", 'ducks "pond', code=2) == (
        'error: unclosed " in the query: close the phrase, e.g. "exact words", or drop the quote\n')
    assert run("search", "ducks path:", code=2) == (
        "error: empty filter path: in the query: give a value, e.g. path:guides/\n")
    # inline tags, nested and Japanese, through --tag and tag:
    assert run("search", "ducks", "--tag", "日記", "--files") == "tiny/Diary.md\t0.0410\n" or \
        run("search", "ducks", "--tag", "日記", "--files").startswith("tiny/Diary.md\t")
    assert run("search", "ducks tag:life", "--files").splitlines()[0].startswith("tiny/Diary.md\t")
    # -k counts notes: every path once
    paths = [ln.split("\t")[0] for ln in run("search", "ducks pond water", "--files", "-k", "3").splitlines()]
    assert len(paths) == 3 and len(set(paths)) == 3
    # phrases, exclusions, path filters, lanes
    assert [h["vault_path"] for h in json.loads(run("search", '"water bird" ducks', "--json"))] == ["tiny/Ducks.md"]
    out = json.loads(run("search", "ducks -pond", "--json", "-k", "10"))
    assert "tiny/Ducks.md" not in [h["vault_path"] for h in out]
    assert [h["vault_path"] for h in json.loads(run("search", "parquet path:tiny/sub/", "--json"))] == [
        "tiny/sub/Parquet files.md"]
    bm25_only = json.loads(run("search", "parquet", "--lanes", "bm25", "--json", "--explain"))
    assert [h["lanes"] for h in bm25_only] == [{"bm25": 1}]
    # neighbours in search --json and read --json; the read is logged
    duck = json.loads(run("search", "water bird", "--json", "-k", "1"))[0]
    assert duck["backlinks"] == [{"path": "tiny/Home.md", "title": "Home", "links": 1}]
    home = json.loads(run("read", "tiny/Home.md", "--json"))
    assert [r["path"] for r in home["outlinks"]] == ["tiny/Ducks.md", "tiny/Install guide.md"]
    assert home["outlinks_total"] == 2 and home["backlinks"] == []
    run("read", "tiny/Install guide.md")
    log = json.loads((ux_env / "data" / "usage.json").read_text(encoding="utf-8"))["notes"]
    assert {k: v["reads"] for k, v in log.items()} == {"tiny/Home.md": 1, "tiny/Install guide.md": 1}
    # the boost: off by default (same scores), on lifts a read note by its documented amount
    plain = json.loads(run("search", "ducks", "--json", "-k", "10"))
    boosted = json.loads(run("search", "ducks", "--json", "-k", "10", "--usage-boost"))
    by_path = {h["vault_path"]: h["score"] for h in plain}
    after = {h["vault_path"]: h["score"] for h in boosted}
    assert after["tiny/Home.md"] == pytest.approx(by_path["tiny/Home.md"] + 0.2 / 61 * 0.430676558, abs=1e-6)
    assert after["tiny/Ducks.md"] == pytest.approx(by_path["tiny/Ducks.md"])

    # capture: into the inbox source, searchable at once, never overwriting, unsafe names refused
    monkeypatch.setenv("DOCSVAULT_CAPTURE_SOURCE", "inbox")
    got = json.loads(run("capture", "--title", "Heron facts", "--agent", "test-agent", "--json",
                         stdin="A heron stands still in shallow water to catch fish.\n"))
    assert got["vault_path"] == "inbox/Heron facts.md" and got["build"]["ok"] is True
    text = (ux_env / "inbox" / "Heron facts.md").read_text(encoding="utf-8")
    assert "\nagent: test-agent\nstatus: raw\n" in text and f"correlation_id: {got['correlation_id']}\n" in text
    assert "related:\n- " in text
    assert run("search", "heron shallow water", "--files", "-k", "1").startswith("inbox/Heron facts.md\t")
    assert run("capture", "--title", "Heron facts", "--no-build", "again", code=2).startswith(
        "error: a note named 'Heron facts.md' already exists in ")
    assert run("capture", "--name", "../../escape", "--no-build", "x", code=2).startswith(
        "error: unsafe note name '../../escape'")
    assert not (ux_env / "escape.md").exists()
    assert run("capture", "--source", "tiny-nope", "x", code=2).startswith(
        "error: unknown capture source 'tiny-nope'")


def test_mcp_service_syntax_links_related(ux_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.mcp_server import ToolFailure, VaultService

    monkeypatch.delenv("DOCSVAULT_CAPTURE_SOURCE", raising=False)
    svc = VaultService(Settings.from_env())
    found = svc.search('"water bird" ducks', k=3)
    assert [h["path"] for h in found["hits"]] == ["tiny/Ducks.md"]
    assert found["hits"][0]["text"] == "Ducks swim in the pond and eat bread. A duck is a water bird."
    assert svc.search("parquet", lanes=["bm25"])["hits"][0]["path"] == "tiny/sub/Parquet files.md"
    with pytest.raises(ToolFailure, match="unclosed"):
        svc.search('ducks "pond')
    with pytest.raises(ToolFailure, match="unknown lane 'nope'"):
        svc.search("ducks", lanes=["nope"])
    page = svc.read("tiny/Home.md")
    assert [r["path"] for r in page["outlinks"]] == ["tiny/Ducks.md", "tiny/Install guide.md"]
    rel = svc.related("tiny/Ducks.md")
    assert rel["path"] == "tiny/Ducks.md"
    assert (rel["related"][0]["path"], rel["related"][0]["hops"]) == ("tiny/Home.md", 1)
    assert ("tiny/Install guide.md", 2) in [(r["path"], r["hops"]) for r in rel["related"]]
    with pytest.raises(ToolFailure, match="no capture source"):
        svc.save_note("text")
    with pytest.raises(ToolFailure, match="unsafe note name"):
        svc.save_note("text", name="a/../b", source="inbox")


def test_build_force_redoes_a_source_from_scratch_with_progress_lines(ux_env: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """--force redoes a source; progress lines on stderr when it is not a terminal (none with --quiet), while
    stdout stays JSON (one test: the fixture's build serves both)."""
    monkeypatch.setenv("DOCSVAULT_PROGRESS_INTERVAL", "0")
    quiet = CliRunner().invoke(app, ["build", "--json", "--source", "inbox", "--quiet"])
    assert quiet.exit_code == 0 and "progress: " not in quiet.stderr
    again = json.loads(quiet.stdout)
    inbox = next(r for r in again["sources"] if r["name"] == "inbox")
    assert (inbox["status"], inbox["embedded"], again["shared"]["warehouse"]["mode"]) == ("unchanged", 0, "unchanged")
    result = CliRunner().invoke(app, ["build", "--json", "--source", "inbox", "--force"])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("progress: ")]
    stages = {ln.split()[1] for ln in lines}
    assert {"fetch", "normalize", "chunk", "embed", "warehouse"} <= stages, lines
    forced = json.loads(result.stdout)                            # stdout stays JSON
    inbox = next(r for r in forced["sources"] if r["name"] == "inbox")
    assert inbox["status"] == "built" and inbox["embedded"] == inbox["chunks"] == 1
    assert forced["shared"]["warehouse"]["mode"] == "full"
    assert "DOCSVAULT_FORCE" not in __import__("os").environ


def test_search_pauses_the_garbage_collector_and_restores_it(ux_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from pipeline import cli

    seen: list[bool] = []
    real = cli.open_searcher
    monkeypatch.setattr(cli, "open_searcher", lambda *a, **k: seen.append(gc.isenabled()) or real(*a, **k))
    assert gc.isenabled()
    assert run("search", "ducks", "--files").splitlines()
    assert run("search", "ducks", "--tag", "nothing-has-it", code=1).startswith("No results")   # exits through fail()
    assert seen == [False, False] and gc.isenabled()


def test_explain_shows_the_usage_boost_as_its_own_part(ux_env: Path) -> None:
    # the explain parts sum to the score: a boosted note's line and JSON name the boost (an unread note: none)
    run("read", "tiny/Home.md")
    boost = round(0.2 / 61 * 0.430676558, 6)              # hot tier, 1 read (README "Usage boost")
    hits = json.loads(run("search", "ducks", "--json", "-k", "10", "--usage-boost", "--explain"))
    home = next(h for h in hits if h["vault_path"] == "tiny/Home.md")
    assert home["explain"]["usage_boost"] == {"score": boost}
    assert home["score"] == pytest.approx(sum(p["score"] for p in home["explain"].values()), abs=1e-5)
    assert all("usage_boost" not in h["explain"] for h in hits if h["vault_path"] != "tiny/Home.md")
    lines = run("search", "ducks", "-k", "10", "--usage-boost", "--explain").splitlines()
    assert lines[3:6] == [                                   # lifted above Diary.md (0.1117) by the boost
        " 2. 0.1121  tiny/Home.md",
        "    Welcome. See Install guide and Ducks.",
        ("    explain: bm25 #3 (1/(20+3)=0.0435) + bm25_page #3 (0.5x1/(20+3)=0.0217) + vector #2 "
         "(1/(20+2)=0.0455) + usage boost 0.0014 = 0.1121")]
    assert [ln for ln in lines if "usage boost" in ln] == [lines[5]]
