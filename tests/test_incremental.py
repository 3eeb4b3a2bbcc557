"""Change-only builds (issue 6, acceptance 2): behaviour, never timings.

The chain runs through the stage functions of ``pipeline.stages`` (what the Dagster assets call) on the tiny local
vault with the fake ``hash`` embedder: a no-op rebuild embeds nothing and writes nothing; an edit embeds exactly the
changed chunks; a deleted page leaves nothing behind; switching the model re-embeds everything and search uses the
new vectors only; EC-17 (a stale keyword index after incremental ingest) does not happen.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline import stages as b
from pipeline import warehouse as wh
from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.index.embed import load_embedder
from pipeline.ingest.sources import load_sources
from pipeline.search.searcher import Searcher


@pytest.fixture(autouse=True)
def _no_growth_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """These warehouses are a few 256 KiB blocks: one update passes the 4 % growth bound, which would turn every
    update into a full publish. The delta logic is under test here; the bound has its own tests (test_warehouse)."""
    monkeypatch.setattr("pipeline.warehouse.write.MAX_GROWTH", 100.0)


def run_chain(settings: Settings, warehouse: bool = True) -> dict[str, Any]:
    """Every stage once (the warehouse only with ``warehouse``), in the order of `docsvault build`; returns stage ->
    metadata (per-source stages of the single source 'tiny')."""
    sources = load_sources(settings.sources_file)
    out: dict[str, Any] = {}
    for s in sources:
        out["fetch"] = b.fetch_stage(settings, s)
        out["normalize"] = b.normalize_stage(settings, s)
        out["vault"] = b.vault_stage(settings, s)
        out["chunk"] = b.chunk_stage(settings, s, load_embedder)
        out["embed"] = b.embed_stage(settings, s, load_embedder)
    out["graph"] = b.graph_stage(settings, sources)
    if warehouse:
        out["warehouse"] = b.warehouse_stage(settings, sources, load_embedder)
    return out


def vault_files(settings: Settings) -> dict[str, tuple[int, int]]:
    root = settings.vault_dir
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(root.rglob("*.md"))}


def live_vector_ids(settings: Settings) -> dict[str, set[str]]:
    con = wh.connect(settings.warehouse_path)
    try:
        out = {}
        for m in wh.list_models(con):
            rows = wh.brute_force_search(con, m["table_name"], np.eye(1, m["dim"], dtype=np.float32)[0], 10_000)
            out[m["model_id"]] = {cid for cid, _ in rows}
        return out
    finally:
        con.close()


@pytest.fixture
def settings(tiny_env: Path) -> Settings:
    return Settings.from_env()


def test_noop_rebuild_embeds_nothing_writes_nothing(settings: Settings) -> None:
    first = run_chain(settings)
    assert first["embed"]["embedded"] > 0 and first["warehouse"]["mode"] == "full"
    before = vault_files(settings)
    inode = settings.warehouse_path.stat().st_ino
    chunks_mtime = artifacts.chunks_path(settings, "tiny").stat().st_mtime_ns

    again = run_chain(settings)
    assert again["embed"]["embedded"] == 0
    assert again["embed"]["skipped"] is True                     # chunks and caches as they were: not even read
    assert again["embed"]["cached"] == first["embed"]["embedded"] + first["embed"]["cached"]
    assert again["vault"]["written"] == 0 and again["vault"]["skipped"] is True
    assert again["normalize"]["skipped"] and again["chunk"]["skipped"] and again["graph"]["skipped"]
    assert again["warehouse"]["skipped"] is True
    assert vault_files(settings) == before                       # no vault file touched
    assert settings.warehouse_path.stat().st_ino == inode        # nothing published
    assert artifacts.chunks_path(settings, "tiny").stat().st_mtime_ns == chunks_mtime


def test_touched_but_unchanged_file_reembeds_nothing(settings: Settings, tiny_env: Path) -> None:
    run_chain(settings)
    note = tiny_env / "tinyvault" / "Ducks.md"
    os.utime(note, ns=(note.stat().st_atime_ns, note.stat().st_mtime_ns + 5_000_000_000))
    again = run_chain(settings)
    assert again["normalize"]["skipped"] is True                 # the same bytes: the source's revision (of its
    assert again["vault"]["written"] == 0                        # files' content) did not move; nothing is redone
    assert again["embed"]["embedded"] == 0
    assert again["chunk"].get("rechunked", 0) == 0


def test_edit_embeds_exactly_the_changed_chunks(settings: Settings, tiny_env: Path) -> None:
    run_chain(settings)
    old_chunks = {c.chunk_id: c.text_hash for c in artifacts.load_chunks(settings, "tiny")}
    guide = tiny_env / "tinyvault" / "Install guide.md"
    guide.write_text(guide.read_text().replace("Download the installer and run it.",
                                               "Download the MSI package from the vendor and double-click it."))
    again = run_chain(settings)
    new_chunks = {c.chunk_id: c.text_hash for c in artifacts.load_chunks(settings, "tiny")}
    changed = {cid for cid, h in new_chunks.items() if old_chunks.get(cid) != h}
    assert len(changed) == 1                                     # the Windows section only
    assert again["embed"]["embedded"] == 1
    assert again["chunk"]["rechunked"] == 1                      # only the edited note was chunked again
    assert again["vault"]["written"] == 1
    wm = again["warehouse"]
    assert wm["mode"] == "incremental" and wm["changed_chunks"] == 1 and wm["vectors_added"] == 1
    assert wm["vectors_removed"] == 1
    (cid,) = changed
    assert live_vector_ids(settings)["hash-384"] == set(new_chunks)
    with Searcher(settings.warehouse_path) as s:
        hits = s.search("MSI package vendor double-click", k=3)
        assert hits[0].chunk_id == cid and "MSI package" in hits[0].snippet
        assert s.search("MSI package vendor double-click", k=3, lanes=("vector",))[0].chunk_id == cid
        assert s.search("MSI package vendor", k=3, lanes=("bm25",))[0].chunk_id == cid


def test_deleted_page_leaves_nothing(settings: Settings, tiny_env: Path) -> None:
    run_chain(settings)
    con = wh.connect(settings.warehouse_path)
    (ducks_id,) = con.execute("SELECT note_id FROM notes WHERE source_path = 'Ducks.md'").fetchone()
    ducks_chunks = {r[0] for r in con.execute("SELECT chunk_id FROM chunks WHERE note_id = ?", [ducks_id]).fetchall()}
    con.close()
    assert ducks_chunks

    (tiny_env / "tinyvault" / "Ducks.md").unlink()
    again = run_chain(settings)
    assert again["vault"]["removed"] == 1
    assert not (settings.vault_dir / "tiny" / "Ducks.md").exists()
    con = wh.connect(settings.warehouse_path)
    try:
        assert con.execute("SELECT count(*) FROM notes WHERE note_id = ?", [ducks_id]).fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM chunks WHERE note_id = ?", [ducks_id]).fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM links WHERE dst = ? OR src = ?", [ducks_id, ducks_id]).fetchone() == (0,)
    finally:
        con.close()
    assert not ducks_chunks & set().union(*live_vector_ids(settings).values())
    graph = json.loads((settings.graph_dir / "links.json").read_text())
    assert ducks_id not in {n["id"] for n in graph["nodes"]}
    assert all(e["dst"] != ducks_id and e["src"] != ducks_id for e in graph["edges"])
    assert "Ducks" not in (settings.graph_dir / "links.graphml").read_text()
    with Searcher(settings.warehouse_path) as s:
        for lanes in (("bm25",), ("vector",), ("bm25", "vector")):
            assert all(h.note_id != ducks_id for h in s.search("ducks swim in the pond water bird", k=10, lanes=lanes))


def test_switching_model_reembeds_everything_and_search_uses_new_vectors_only(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    run_chain(settings)
    n_texts = len({c.text_hash for c in artifacts.load_chunks(settings, "tiny")})
    monkeypatch.setenv("DOCSVAULT_MODEL", "hash:64")
    monkeypatch.setenv("DOCSVAULT_MULTILINGUAL_MODEL", "hash:64")     # the tiny vault has a Japanese note
    switched = Settings.from_env()
    again = run_chain(switched)
    assert again["embed"]["embedded"] == n_texts
    assert again["embed"]["model_changed"] == "hash-384 -> hash-64"
    assert again["warehouse"]["mode"] == "full" and "models changed" in again["warehouse"]["reason"]
    assert again["warehouse"]["models"] == ["hash-64"]
    con = wh.connect(switched.warehouse_path)
    try:
        assert [m["model_id"] for m in wh.list_models(con)] == ["hash-64"]
        assert [m["dim"] for m in wh.list_models(con)] == [64]
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert not any("384" in t for t in tables)
    finally:
        con.close()
    used: list[str] = []

    def factory(model_id: str) -> Any:
        used.append(model_id)
        return load_embedder(model_id)

    with Searcher(switched.warehouse_path, embedder_factory=factory) as s:
        assert s.search("water bird", k=3, lanes=("vector",))
    assert used == ["hash-64"]


@pytest.mark.parametrize("seed_min", [0, 64])
def test_lost_cache_is_seeded_from_the_warehouse(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                                 seed_min: int) -> None:
    """More missing texts than ``SEED_MIN_TEXTS`` come from the warehouse; a few are embedded again (the tiny
    corpus has fewer than 64 texts): a few missing texts are edited ones, which no warehouse holds."""
    import shutil

    from pipeline.stages import index

    monkeypatch.setattr(index, "SEED_MIN_TEXTS", seed_min)
    run_chain(settings)
    shutil.rmtree(settings.cache_dir / "hash_384")
    for f in settings.state_dir.glob("*.json"):
        f.unlink()                                              # and every stage's memory of the last build
    again = run_chain(settings)["embed"]
    texts = again["embedded"] + again["seeded"]
    assert (again["embedded"], again["seeded"]) == ((0, texts) if seed_min == 0 else (texts, 0))
    assert 0 < texts <= 64


@pytest.mark.parametrize("damage", ["garbage", "old-schema", "truncated"])
def test_corrupt_or_old_warehouse_is_reported_and_rebuilt(settings: Settings, damage: str) -> None:
    run_chain(settings)
    path = settings.warehouse_path
    if damage == "garbage":
        path.write_bytes(b"this is not a duckdb file" * 100)
    elif damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    else:
        con = wh.connect(path, read_only=False)
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        con.execute("CHECKPOINT")
        con.close()
    again = run_chain(settings)
    wm = again["warehouse"]
    assert wm["rebuilt_because"] and wm["mode"] == "full"
    if damage == "old-schema":
        assert "schema version 1" in wm["rebuilt_because"]
    assert again["embed"]["embedded"] == 0                       # rebuilt from the caches, nothing re-embedded
    con = wh.connect(path)
    try:
        assert wh.stats(con)["chunks"] == wm["chunks"] > 0
    finally:
        con.close()


def test_ec17_keyword_index_follows_incremental_changes(settings: Settings, tiny_env: Path) -> None:
    vault = tiny_env / "tinyvault"
    (vault / "c1.md").write_text("# C1\n\nduck pond notes\n")
    (vault / "c2.md").write_text("# C2\n\ncat care\n")
    run_chain(settings)
    (vault / "c3.md").write_text("# C3\n\notter habitat\n")
    (vault / "c2.md").write_text("# C2\n\ndog care\n")
    (vault / "c1.md").unlink()
    again = run_chain(settings)
    assert again["warehouse"]["mode"] == "incremental"
    with Searcher(settings.warehouse_path) as s:
        def bm25(q: str) -> list[str]:
            return [h.source_path for h in s.search(q, k=5, lanes=("bm25",))]

        assert bm25("otter") == ["c3.md"]
        assert bm25("dog") == ["c2.md"]
        assert bm25("cat") == []
        assert "c1.md" not in bm25("duck pond")
        assert all(h.source_path != "c1.md" for h in s.search("duck pond notes", k=10))


# run in a child process: the chain up to embedding, with batches of 2 texts and an embedder that SIGKILLs its own
# process when asked for its third batch (two batches = 4 vectors are in the cache by then)
_KILLED_EMBED = r"""
import functools, os, signal, sys
sys.path.insert(0, {repo!r})
from pipeline import stages as b
from pipeline.index import embed
from pipeline.config import Settings
from pipeline.index.embed import load_embedder
from pipeline.ingest.sources import load_sources

embed.embed_chunks = functools.partial(embed.embed_chunks, batch_size=2)
settings = Settings.from_env()
source = load_sources(settings.sources_file)[0]
inner = load_embedder(settings.model_for(source))

class Killing:
    calls = 0
    def __getattr__(self, name):
        return getattr(inner, name)
    def embed_documents(self, texts):
        Killing.calls += 1
        if Killing.calls == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return inner.embed_documents(texts)

for stage in (b.fetch_stage, b.normalize_stage, b.vault_stage):
    stage(settings, source)
b.chunk_stage(settings, source, load_embedder)
b.embed_stage(settings, source, lambda spec: Killing())
"""


def test_sigkill_during_embedding_then_rerun_embeds_only_what_was_not_stored(settings: Settings) -> None:
    import signal
    import subprocess
    import sys

    from pipeline.index.embed import EmbeddingCache

    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-c", _KILLED_EMBED.format(repo=repo)], env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    model_id = load_embedder(settings.model).model_id
    hashes = sorted({c.text_hash for c in artifacts.load_chunks(settings, "tiny")})
    stored = EmbeddingCache(settings.cache_dir, model_id).get_many(hashes)
    assert len(stored) == 4 < len(hashes)                     # two batches of 2 were stored before the kill

    # a warehouse published now (another source's build, a UI run of the shared stages) says which source's chunks
    # have no vector yet
    sources = load_sources(settings.sources_file)
    b.graph_stage(settings, sources)
    early = b.warehouse_stage(settings, sources, load_embedder)
    n_chunks = len(artifacts.load_chunks(settings, "tiny"))
    assert (early.missing_vectors, early.missing_vectors_in) == (n_chunks - 4, f"tiny {n_chunks - 4} of {n_chunks}")

    again = run_chain(settings)
    assert again["warehouse"]["missing_vectors_in"] == ""
    assert again["embed"]["embedded"] == len(hashes) - 4      # exactly the texts that were not stored
    assert again["embed"]["cached"] == 4
    assert again["warehouse"]["vectors"] == len(artifacts.load_chunks(settings, "tiny"))
    assert again["warehouse"]["missing_vectors"] == 0


def test_normalize_cache_gives_the_same_notes_and_parses_only_changed_files(settings: Settings,
                                                                             tiny_env: Path) -> None:
    from pipeline.ingest.fetch import load_fetch_result
    from pipeline.ingest.normalize import normalize_source

    first = run_chain(settings)
    assert first["normalize"]["parsed"] > 0 and first["normalize"]["parse_cached"] == 0
    source = load_sources(settings.sources_file)[0]
    edited = tiny_env / "tinyvault" / "Install guide.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
    again = run_chain(settings)
    assert again["normalize"]["parsed"] == 1                       # only the edited file was parsed again
    assert again["normalize"]["parse_cached"] == first["normalize"]["parsed"] - 1
    files = load_fetch_result(source, settings).files
    plain = normalize_source(source, files, fetched_at="2026-01-01T00:00:00+00:00")
    cached = normalize_source(source, files, fetched_at="2026-01-01T00:00:00+00:00", cache={})
    assert plain == cached


def test_frontmatter_check_is_reused_until_a_vault_file_changes(settings: Settings, tiny_env: Path) -> None:
    run_chain(settings)
    source = load_sources(settings.sources_file)[0]
    first = b.frontmatter_check(settings, source)
    assert first["invalid"] == 0 and first["notes"] > 0 and first["cached"] is False
    assert b.frontmatter_check(settings, source) == {**first, "cached": True}
    bad = settings.vault_dir / "tiny" / "Ducks.md"
    bad.write_text("no frontmatter here\n", encoding="utf-8")
    third = b.frontmatter_check(settings, source)        # the user's edit: theirs, not checked (test_ownership)
    assert (third["cached"], third["invalid"], third["notes"]) == (False, 0, first["notes"] - 1)
    import hashlib

    from pipeline.ingest.ownership import load_manifest, save_manifest

    root = settings.vault_dir / "tiny"
    files = load_manifest(root)
    files["Ducks.md"] = {hashlib.sha256(bad.read_bytes()).hexdigest()}    # as if the build had written it so
    save_manifest(root, "tiny", files)
    fourth = b.frontmatter_check(settings, source)
    assert fourth["cached"] is False and fourth["invalid"] == 1 and fourth["first_invalid"] == ["Ducks.md"]


def test_adding_and_removing_a_small_source_is_incremental(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small source added to (or dropped from) a built warehouse is published as a delta, not a full rewrite."""
    base, extra = tmp_path / "base", tmp_path / "extra"
    for i in range(60):
        (base / f"Note {i:02d}.md").parent.mkdir(parents=True, exist_ok=True)
        (base / f"Note {i:02d}.md").write_text(f"# Note {i}\n\nTopic number {i} of the base vault.\n", encoding="utf-8")
    extra.mkdir()
    (extra / "Pelicans.md").write_text("# Pelicans\n\nPelicans scoop fish with their pouch.\n", encoding="utf-8")
    (extra / "Herons.md").write_text("# Herons\n\nHerons wait motionless in shallow water.\n", encoding="utf-8")
    block = "  - name: {0}\n    kind: local\n    path: {1}\n    format: obsidian\n"
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n" + block.format("base", base), encoding="utf-8")
    for key, value in {"DOCSVAULT_SOURCES": sources, "DOCSVAULT_DATA": tmp_path / "data",
                       "DOCSVAULT_VAULT": tmp_path / "vault", "DOCSVAULT_EVALS": tmp_path / "evals",
                       "DOCSVAULT_MODEL": "hash", "DOCSVAULT_MULTILINGUAL_MODEL": "hash",
                       "DOCSVAULT_CROSSLINGUAL_MODEL": "none", "DAGSTER_HOME": tmp_path / "dagster"}.items():
        monkeypatch.setenv(key, str(value))
    settings = Settings.from_env()
    assert run_chain(settings)["warehouse"]["mode"] == "full"
    sources.write_text("sources:\n" + block.format("base", base) + block.format("extra", extra), encoding="utf-8")
    added = run_chain(settings)["warehouse"]
    assert (added["mode"], added["notes"]) == ("incremental", 62)
    with Searcher(settings.warehouse_path) as s:
        assert s.search("pelicans pouch", k=1)[0].source_path == "Pelicans.md"
    # a fresh full publish, so the removal below is the only delta (a tiny file that grew past 1.5x its full size
    # from two deltas in a row would be rewritten in full by that rule, a size no real warehouse stays at)
    settings.warehouse_path.unlink()
    assert run_chain(settings)["warehouse"]["mode"] == "full"
    sources.write_text("sources:\n" + block.format("base", base), encoding="utf-8")
    removed = run_chain(settings)["warehouse"]
    assert (removed["mode"], removed["notes"]) == ("incremental", 60), removed.get("reason")
    with Searcher(settings.warehouse_path) as s:
        assert s.sources == ["base"]


def test_embed_progress_is_one_task_over_the_per_language_and_cross_lingual_passes(tiny_env: Path) -> None:
    """The cross-lingual pass reports progress too: done counts on from the per-language pass, over one total."""
    settings = Settings.from_env().with_(crosslingual_model="hash:8")
    (s,) = load_sources(settings.sources_file)
    b.fetch_stage(settings, s)
    b.normalize_stage(settings, s)
    b.vault_stage(settings, s)
    b.chunk_stage(settings, s, load_embedder)
    n = len({c.embed_text for c in artifacts.load_chunks(settings, s.name)})
    calls: list[tuple[str, int, int]] = []
    hook = lambda stage, name, done, total: calls.append((stage, done, total))
    b.PROGRESS_HOOKS.append(hook)
    try:
        meta = b.embed_stage(settings, s, load_embedder)
    finally:
        b.PROGRESS_HOOKS.remove(hook)
    assert meta["models"] == {"hash-384": meta["chunks"], "hash-8": meta["chunks"]}
    assert {total for _, _, total in calls} == {2 * n}
    assert [done for _, done, _ in calls] == [0, n, n, 2 * n]     # one batch per pass (tiny has < 64 texts)


def test_a_source_without_files_reports_no_running_normalize_or_chunk(tiny_env: Path) -> None:
    """An empty local source (a new inbox) showed `normalize inbox running for 44 s; chunk inbox running for 41 s`
    on every progress line of a build (found by helper s36-nu2): its stages reported (0, 0), which reads as "total
    unknown", and never finished. They now report nothing; a source with files reports its start and its end."""
    settings = Settings.from_env()
    (s,) = load_sources(settings.sources_file)
    calls: list[tuple[str, int, int]] = []
    hook = lambda stage, name, done, total: calls.append((stage, done, total))

    def stages() -> list[tuple[str, int, int]]:
        calls.clear()
        b.PROGRESS_HOOKS.append(hook)
        try:
            b.fetch_stage(settings, s)
            b.normalize_stage(settings, s)
            b.vault_stage(settings, s)
            b.chunk_stage(settings, s, load_embedder)
        finally:
            b.PROGRESS_HOOKS.remove(hook)
        return [c for c in calls if c[0] in ("normalize", "chunk")]

    files = len([p for p in (tiny_env / "tinyvault").rglob("*.md")])
    assert stages() == [("normalize", 0, files), ("normalize", files, files), ("chunk", 0, 5), ("chunk", 5, 5)]
    for f in (tiny_env / "tinyvault").rglob("*"):
        if f.is_file():
            f.unlink()
    assert stages() == []


_FIRST_KEYS = {
    "fetch": ["strategy", "revision", "changed", "files", "requests", "bytes", "seconds", "warnings", "warning_lines"],
    "normalize": ["notes", "errors", "error_lines", "kept_last_good", "parsed", "parse_cached", "dangling",
                  "errors_file", "dangling_file", "skipped", "seconds"],
    "vault": ["notes", "written", "unchanged", "removed", "removed_files", "kept", "kept_files", "conflicts",
              "attachments", "attachments_written", "attachment_bytes", "attachments_skipped",
              "attachment_skip_lines", "unresolved_embeds", "qualified_links", "vault_dir", "skipped", "left_edited"],
    "chunk": ["notes", "chunks", "rechunked", "skipped", "languages", "language_warning", "warning_lines"],
    "embed": ["model", "models", "model_changed", "chunks", "embedded", "cached", "seeded", "seconds", "chunks_per_s",
              "skipped"],
    "graph": ["nodes", "edges", "links_resolved", "links_dangling", "attachments", "graphml", "json", "skipped"],
    "warehouse": ["sources", "models", "notes", "chunks", "vectors", "missing_vectors", "links", "path", "size_mb",
                  "tokens_cached", "tokens_analysed", "rebuilt_because", "bm25_blobs", "changed_chunks",
                  "removed_chunks", "vectors_added", "vectors_removed", "bytes", "ms", "mode", "reason", "read_s",
                  "graph_s", "vectors_s", "bm25_s", "publish_s", "missing_vectors_in", "skipped", "seconds"],
}


def test_stage_results_give_the_pinned_metadata_keys(settings: Settings) -> None:
    """Each stage's record (pipeline.stages.results) maps to these metadata keys, in this order, on a first run;
    a skipped run reports what it did now (no normalize figures) and the last run's figures of graph/warehouse."""
    first = run_chain(settings)
    assert {stage: list(r.as_dict()) for stage, r in first.items()} == _FIRST_KEYS
    assert (first["vault"].notes, first["chunk"]["chunks"], first["warehouse"].mode) == (5, 5, "full")
    again = run_chain(settings)
    assert list(again["normalize"].as_dict()) == ["notes", "errors", "error_lines", "skipped"]
    assert again["graph"].as_dict() == {**first["graph"].as_dict(), "skipped": True}
    wh_again = again["warehouse"].as_dict()
    assert sorted(wh_again) == sorted(_FIRST_KEYS["warehouse"])
    assert (wh_again["mode"], wh_again["skipped"], wh_again["rebuilt_because"]) == ("unchanged", True, "")
    assert {k: wh_again[k] for k in ("notes", "chunks", "bm25_blobs", "ms")} == \
        {k: first["warehouse"][k] for k in ("notes", "chunks", "bm25_blobs", "ms")}
    check = b.frontmatter_check(settings, load_sources(settings.sources_file)[0])
    assert check.as_dict() == {"notes": 6, "invalid": 0, "first_invalid": [], "cached": False}   # + the index note


def _warehouse_rows(settings: Settings) -> dict[str, list[tuple]]:
    """Every table of the published warehouse, rows sorted (meta without its times and input key)."""
    from tests.conftest import warehouse_rows

    return warehouse_rows(settings.warehouse_path, ("built_at", "full_built_at", "full_bytes", "input_key"))


def _publish_twice(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any, Any]:
    """The warehouse stage run twice on the same inputs from the same data dir: as it is, then as it gathered its
    vectors before (every vector gathered up front, no reader). Returns (its result, its tables, the eager
    result, its tables); results without their times and file size."""
    import shutil

    from pipeline.stages import warehouse as stage

    def run() -> tuple[dict[str, Any], dict[str, list[tuple]]]:
        got = b.warehouse_stage(settings, load_sources(settings.sources_file), load_embedder).as_dict()
        unstable = {"seconds", "size_mb", "ms", "bytes", *stage.WarehouseResult.TIMINGS}
        return {k: v for k, v in got.items() if k not in unstable}, _warehouse_rows(settings)

    saved = settings.data_dir.with_name("data-before-publish")
    shutil.copytree(settings.data_dir, saved)
    lazy, lazy_rows = run()
    shutil.rmtree(settings.data_dir)
    shutil.copytree(saved, settings.data_dir)
    real = stage._cached_vectors
    with monkeypatch.context() as m:
        m.setattr(stage, "_cached_vectors", lambda s, wanted, lazy=True: real(s, wanted, lazy=False))
        eager, eager_rows = run()
    return lazy, lazy_rows, eager, eager_rows


def _edit_and_run_up_to_the_warehouse(settings: Settings, tiny_env: Path) -> str:
    """A full chain, then one edited section and the stages before the warehouse; returns its new text hash."""
    run_chain(settings)
    guide = tiny_env / "tinyvault" / "Install guide.md"
    guide.write_text(guide.read_text().replace("Download the installer and run it.",
                                               "Download the MSI package from the vendor and double-click it."))
    old = {c.chunk_id: c.text_hash for c in artifacts.load_chunks(settings, "tiny")}
    run_chain(settings, warehouse=False)
    (changed,) = {c.text_hash for c in artifacts.load_chunks(settings, "tiny") if old.get(c.chunk_id) != c.text_hash}
    return changed


def test_an_incremental_publish_reads_only_the_changed_vectors(settings: Settings, tiny_env: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage reads the one vector it inserts (not every cached one), and publishes the same rows as when it
    gathered every vector before publishing."""
    from pipeline.index.embed import EmbeddingCache

    changed = _edit_and_run_up_to_the_warehouse(settings, tiny_env)
    taken: list[list[str]] = []
    real = EmbeddingCache.take
    monkeypatch.setattr(EmbeddingCache, "take", lambda self, hashes: taken.append(list(hashes)) or real(self, hashes))
    lazy, lazy_rows, eager, eager_rows = _publish_twice(settings, monkeypatch)
    n_chunks = len(artifacts.load_chunks(settings, "tiny"))
    assert [len(t) for t in taken] == [1, n_chunks] and taken[0] == [changed]     # the stage, then the eager one
    assert (lazy["mode"], lazy["vectors_added"], lazy["vectors"]) == ("incremental", 1, n_chunks)
    assert lazy == eager
    assert lazy_rows == eager_rows and len(lazy_rows["vec_hash_384_delta"]) == 1


def test_a_located_vector_that_cannot_be_read_falls_back_to_gathering(settings: Settings, tiny_env: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A shard damaged past its header is found by ``locate`` and not read by ``take``: the stage gathers every
    vector and publishes what it published before readers (the damaged text without a vector)."""
    from pipeline.index.embed import EmbeddingCache

    changed = _edit_and_run_up_to_the_warehouse(settings, tiny_env)
    real = EmbeddingCache.take

    def damaged(self: EmbeddingCache, hashes: list[str]) -> tuple[np.ndarray, np.ndarray]:
        positions, vectors = real(self, hashes)
        keep = [i for i, p in enumerate(positions.tolist()) if hashes[p] != changed]
        return positions[keep], vectors[keep]

    monkeypatch.setattr(EmbeddingCache, "take", damaged)
    lazy, lazy_rows, eager, eager_rows = _publish_twice(settings, monkeypatch)
    assert "gathering every vector" in caplog.text
    n_chunks = len(artifacts.load_chunks(settings, "tiny"))
    assert (lazy["missing_vectors"], lazy["missing_vectors_in"]) == (1, f"tiny 1 of {n_chunks}")
    assert (lazy["mode"], lazy["vectors_added"], lazy["vectors_removed"]) == ("incremental", 0, 1)
    assert lazy == eager and lazy_rows == eager_rows


def test_graph_files_written_again_only_when_the_graph_changed(settings: Settings, tiny_env: Path) -> None:
    """A text-only edit rebuilds the graph (its vault folder changed) but leaves links.graphml / links.json as they
    were; an edit of a link writes both again, with the new link."""
    run_chain(settings, warehouse=False)
    files = [settings.graph_dir / "links.graphml", settings.graph_dir / "links.json"]

    def stamps() -> list[tuple[int, int]]:
        return [(p.stat().st_mtime_ns, p.stat().st_ino) for p in files]

    before, before_json = stamps(), files[1].read_bytes()
    edited = tiny_env / "tinyvault" / "Install guide.md"
    edited.write_text(edited.read_text(encoding="utf-8") + "\nOne more line of text.\n", encoding="utf-8")
    again = run_chain(settings, warehouse=False)
    assert again["graph"]["skipped"] is False          # the folder changed: the graph was built again ...
    assert stamps() == before                          # ... and found equal to the files'
    assert files[1].read_bytes() == before_json

    edited.write_text(edited.read_text(encoding="utf-8") + "\nSee [[A note nobody wrote]].\n", encoding="utf-8")
    linked = run_chain(settings, warehouse=False)
    assert linked["graph"]["skipped"] is False
    assert [s[1] for s in stamps()] != [s[1] for s in before]          # replaced (temp file + rename)
    assert "A note nobody wrote" in files[1].read_text(encoding="utf-8")
    assert "A note nobody wrote" not in before_json.decode("utf-8")


def test_the_vault_stage_reports_progress_when_it_writes(tiny_env: Path) -> None:
    """The vault step of a 20,000-note source ran 2 min 13 s without a progress line (found by the s42 hostile
    tester: between `normalize done` and `chunk 0/20,000` the build looked hung). It reports its notes now, the
    index note counted, and nothing when the stage is skipped (nothing to write)."""
    settings = Settings.from_env()
    (s,) = load_sources(settings.sources_file)
    b.fetch_stage(settings, s)
    b.normalize_stage(settings, s)
    calls: list[tuple[str, str, int, int]] = []
    hook = lambda stage, name, done, total: calls.append((stage, name, done, total))
    b.PROGRESS_HOOKS.append(hook)
    try:
        b.vault_stage(settings, s)
        n = len(artifacts.load_notes(settings, s.name)) + 1          # and _index.md
        assert [c for c in calls if c[0] == "vault"] == [("vault", s.name, i, n) for i in range(n + 1)]
        calls.clear()
        assert b.vault_stage(settings, s).skipped is True
        assert calls == []
    finally:
        b.PROGRESS_HOOKS.remove(hook)
