"""The warehouse after incremental updates holds what a full build of the same content holds, table by table and row
by row (the vector tables as their live vectors), and a model reached by two specs gets each chunk's vector once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline import stages as b
from pipeline import warehouse as wh
from pipeline.config import Settings
from pipeline.index.embed import load_embedder
from pipeline.ingest.sources import load_sources
from tests.test_incremental import run_chain

ENGLISH = ("Alpha holds the settings that every install shares, from the folder the tool writes to and the port "
           "it listens on to the colour of its window and the language of its menus. ")
JAPANESE = "ベータはあとからかきかえたせつめいで、ひらがなとカタカナだけでかいてあります。" * 6


@pytest.fixture(autouse=True)
def _no_growth_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Updates of a warehouse of a few blocks pass the 4 % bound; the delta logic is what is compared here."""
    monkeypatch.setattr("pipeline.warehouse.write.MAX_GROWTH", 100.0)


@pytest.fixture
def settings(tiny_env: Path) -> Settings:
    return Settings.from_env()


def _logical_rows(settings: Settings) -> dict[str, Any]:
    """Every table as a build would be judged by: rows sorted; meta without times, sizes and the update count;
    ``models`` as (model, table, dim, live vectors); each vector table as its live (chunk id, vector) pairs."""
    con = wh.connect(settings.warehouse_path)
    try:
        out: dict[str, Any] = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                               for t in ("notes", "chunks", "links", "bm25_index")}
        out["meta"] = sorted(r for r in con.execute("SELECT key, value FROM meta").fetchall()
                             if r[0] not in ("built_at", "full_built_at", "full_bytes", "updates"))
        out["models"] = [(m["model_id"], m["table_name"], m["dim"], m["n"]) for m in wh.list_models(con)]
        for m in wh.list_models(con):
            ids, vecs = wh.load_live_vectors(con, m["table_name"])
            out[m["table_name"]] = (ids, np.asarray(vecs).tolist())
    finally:
        con.close()
    return out


def _full_build_rows(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The warehouse written in full (forced) from the same vault, chunks and caches; the incremental file is put
    back after, so the next update starts from it (updates accumulate)."""
    import shutil

    kept = settings.warehouse_path.with_name("incremental.duckdb")
    shutil.copyfile(settings.warehouse_path, kept)
    with monkeypatch.context() as m:
        m.setenv("DOCSVAULT_FORCE", "*")
        got = b.warehouse_stage(settings, load_sources(settings.sources_file), load_embedder)
    assert got.publish["mode"] == "full"
    rows = _logical_rows(settings)
    kept.replace(settings.warehouse_path)
    return rows


def test_a_note_whose_language_flips_keeps_no_stale_language_in_its_unchanged_chunks(
        settings: Settings, tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A note's second section rewritten in Japanese makes the note Japanese: its first section, unchanged, is a
    Japanese note's chunk too. The incremental update kept that chunk's row, and with it language 'en'."""
    mixed = tiny_env / "tinyvault" / "Mixed.md"
    mixed.write_text(f"# Mixed\n\n## Alpha\n\n{ENGLISH}\n\n## Beta\n\n{ENGLISH}\n", encoding="utf-8")
    run_chain(settings)
    mixed.write_text(f"# Mixed\n\n## Alpha\n\n{ENGLISH}\n\n## Beta\n\n{JAPANESE}\n", encoding="utf-8")
    out = run_chain(settings)
    assert out["warehouse"]["mode"] == "incremental"
    incremental = _logical_rows(settings)
    languages = sorted((r[5], r[8]) for r in incremental["chunks"] if r[5].startswith("Mixed"))
    assert languages == [("Mixed > Alpha", "ja"), ("Mixed > Beta", "ja")]
    assert incremental == _full_build_rows(settings, monkeypatch)


def test_n_incremental_updates_equal_a_full_build(settings: Settings, tiny_env: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Edits, an edit undone (A -> B -> A), a note added, one deleted, a link added, a language flipped: after each
    incremental update the warehouse equals a full build of the same content."""
    vault = tiny_env / "tinyvault"
    guide = vault / "Install guide.md"
    original = guide.read_text(encoding="utf-8")
    mixed = vault / "Mixed.md"
    edits = [
        lambda: guide.write_text(original.replace("Download the installer", "Fetch the MSI package"), "utf-8"),
        lambda: guide.write_text(original, "utf-8"),                                    # A -> B -> A
        lambda: mixed.write_text(f"# Mixed\n\n## Alpha\n\n{ENGLISH}\n\n## Beta\n\n{ENGLISH}\n", "utf-8"),
        lambda: (vault / "Ducks.md").unlink(),
        lambda: (vault / "Home.md").write_text((vault / "Home.md").read_text("utf-8") + "\nAlso [[Mixed]].\n",
                                               "utf-8"),
        lambda: mixed.write_text(f"# Mixed\n\n## Alpha\n\n{ENGLISH}\n\n## Beta\n\n{JAPANESE}\n", "utf-8"),
    ]
    run_chain(settings)
    for i, edit in enumerate(edits):
        edit()
        out = run_chain(settings)
        assert out["warehouse"]["mode"] == "incremental", i
        incremental = _logical_rows(settings)
        assert incremental == _full_build_rows(settings, monkeypatch), f"after edit {i}"


def test_a_model_reached_by_two_specs_gets_one_vector_per_chunk(tiny_env: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The cross-lingual lane on 'hash:384', the notes' model 'hash': one model id (hash-384) by two specs. Every
    chunk was listed twice for that model (its language's pass and the cross-lingual one), so the vector table
    held two rows of each chunk id."""
    monkeypatch.setenv("DOCSVAULT_CROSSLINGUAL_MODEL", "hash:384")
    settings = Settings.from_env()
    out = run_chain(settings)
    con = wh.connect(settings.warehouse_path)
    try:
        n_chunks = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        ((model,),) = [(m["model_id"],) for m in wh.list_models(con)]
        rows = con.execute("SELECT count(*), count(DISTINCT chunk_id) FROM vec_hash_384").fetchone()
        n = wh.list_models(con)[0]["n"]
    finally:
        con.close()
    assert model == "hash-384"
    assert rows == (n_chunks, n_chunks) and n == n_chunks
    assert out["warehouse"]["vectors"] == n_chunks and out["embed"]["models"] == {"hash-384": n_chunks}


def _version_moves_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str, rel: str) -> bool:
    """Whether ``code_version(stage)`` changes when the package file ``rel`` does (on a copy of the stage's files)."""
    import shutil

    from pipeline.stages import base

    for name in base._CODE[stage]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base._PKG / name, tmp_path / name)
    monkeypatch.setattr(base, "_PKG", tmp_path)
    before = base.code_version.__wrapped__(stage)
    with (tmp_path / rel).open("a", encoding="utf-8") as f:
        f.write("# changed\n")
    return base.code_version.__wrapped__(stage) != before


def test_the_warehouse_code_version_covers_the_code_that_shapes_its_notes_and_links(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warehouse is skipped when its key, which holds ``code_version("warehouse")``, is unchanged. Its notes rows
    come from ``read_notes`` (ingest/vault.py, common/frontmatter.py) as :class:`~pipeline.models.Note` values
    (models.py: aliases, description, url), its links from the graph code: a change to any of these left the
    published rows as the old code made them (a new program version re-ran the chunk and graph stages, not the
    warehouse)."""

    from pipeline.stages import base

    shaping = {"models.py", "ingest/vault.py", "common/frontmatter.py", "ingest/ownership.py", *base._CODE["graph"],
               *base._CODE["bm25"]}
    assert shaping - set(base._CODE["warehouse"]) == set()
    assert _version_moves_with(tmp_path, monkeypatch, "warehouse", "models.py")


def test_a_new_sudachi_dictionary_analyses_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BM25 tokens come from SudachiDict and PyStemmer as much as from analysis.py; the token cache, the warehouse
    key and the no-op fingerprint held only the code, so after `pip install -U sudachidict-core` every build kept
    the old dictionary's tokens while questions were analysed with the new one. Their versions count now."""
    import importlib.metadata

    from pipeline.models import Source
    from pipeline.stages import base
    from pipeline.stages.noop import fingerprint

    settings = Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                        vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals", model="hash",
                        multilingual_model="hash", crosslingual_model="none")
    sources = [Source(name="notes", kind="local", path=(tmp_path / "notes",))]
    real = importlib.metadata.version
    before = {s: base.code_version.__wrapped__(s) for s in ("bm25", "warehouse", "eval", "chunk")}
    noop = fingerprint(settings, sources)
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "20991231" if name == "SudachiDict-core" else real(name))
    after = {s: base.code_version.__wrapped__(s) for s in ("bm25", "warehouse", "eval", "chunk")}
    assert [s for s in before if before[s] != after[s]] == ["bm25", "warehouse", "eval"]
    assert fingerprint(settings, sources) != noop


def test_the_embed_stage_code_version_covers_which_chunks_each_model_embeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embed stage is skipped while its key (chunks file, models, depth, ``code_version("embed")``) holds; "embed"
    had no files, so its version was the package version only: a change to which chunks a model embeds
    (``chunk_models`` in stages/index.py, ``Settings.crosslingual_embeds`` in config.py) skipped the stage, and the
    warehouse published the chunks it now wants vectors for without them."""

    from pipeline.stages import base

    assert {"stages/index.py", "config.py", "index/embed.py"} - set(base._CODE.get("embed", ())) == set()
    assert _version_moves_with(tmp_path, monkeypatch, "embed", "config.py")


def test_a_chunks_file_edited_since_its_chunk_stage_is_never_published(settings: Settings, tiny_env: Path) -> None:
    """The chunk stage trusts its chunks file only when its sha256 is the one it recorded; the warehouse stage read
    the file as it was, so a run of the warehouse alone (a Dagster run of that asset) published a hand-edited text
    (a damaged line failed with a bare JSON error naming no file). Now it refuses in one line naming the file and
    what to run, and the warehouse stays as published."""
    from pipeline.common import artifacts
    from pipeline.common.errors import PipelineError

    run_chain(settings)
    path = artifacts.chunks_path(settings, "tiny")
    before = _logical_rows(settings)
    path.write_text(path.read_text("utf-8").replace("Download the installer", "Download this other thing"), "utf-8")
    with pytest.raises(PipelineError) as err:
        b.warehouse_stage(settings, load_sources(settings.sources_file), load_embedder)
    assert str(err.value) == (
        f"{path}: not the chunks file the chunk stage wrote (edited or replaced since: its sha256 is not the one "
        f"recorded in {artifacts.state_path(settings, 'tiny')}); the warehouse is kept as published: run "
        "`docsvault build --source tiny` to chunk the source again")
    assert _logical_rows(settings) == before
    out = run_chain(settings)           # the chunk stage writes the file again: its text is the note's
    assert out["chunk"]["rechunked"] > 0 and _logical_rows(settings) == before
