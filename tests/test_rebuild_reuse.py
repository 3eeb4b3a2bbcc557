"""A rebuild after an edit reuses what the last build left (the chunks file's lines, the vault stage's link memo,
the embedding cache's index of hashes) and still writes exactly what a build from scratch writes: behaviour, never
timings."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from pipeline import stages as b
from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.index.embed import load_embedder
from pipeline.ingest.sources import load_sources
from pipeline.models import Chunk
from pipeline.stages import index as index_stages


def _chain(settings: Settings) -> dict[str, object]:
    out: dict[str, object] = {}
    for s in load_sources(settings.sources_file):
        b.fetch_stage(settings, s)
        out["normalize"] = b.normalize_stage(settings, s)
        out["vault"] = b.vault_stage(settings, s)
        out["chunk"] = b.chunk_stage(settings, s, load_embedder)
        out["embed"] = b.embed_stage(settings, s, load_embedder)
    return out


def _tree(root: Path) -> dict[str, str]:
    """sha256 of each file under ``root``, a note's ``fetched_at:`` line left out: a fetch sets it, and a rebuild
    does not rewrite a note for it alone (``vault._same_content``), so a fresh build a second later has another
    (the comparison below failed whenever the clock's second turned between the builds)."""
    from pipeline.ingest.vault import _without_volatile

    def content(p: Path) -> bytes:
        data = p.read_bytes()
        return _without_volatile(data) or data

    return {p.relative_to(root).as_posix(): hashlib.sha256(content(p)).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def settings(tiny_env: Path) -> Settings:
    return Settings.from_env()


def test_chunk_line_is_what_load_chunks_reads_back() -> None:
    c = Chunk(chunk_id="0123456789abcdef", note_id="fedcba9876543210", source="ti\"ny", ordinal=12,
              heading_path=("A \"quoted\" > path", "ß\\x"), breadcrumb="T > A", text="line\nnext \u2028 \"q\"",
              language="ja")
    line = artifacts.chunk_line(c)
    m = artifacts.CHUNK_LINE.fullmatch(line)
    assert m is not None and m.groups() == ("fedcba9876543210", "12", "ja")


def test_read_chunk_lines_only_for_the_file_the_stage_wrote(settings: Settings) -> None:
    _chain(settings)
    path = artifacts.chunks_path(settings, "tiny")
    sha = artifacts.load_state(settings, "tiny")["chunks_sha"]
    lines = artifacts.read_chunk_lines(path, sha)
    chunks = artifacts.load_chunks(settings, "tiny")
    assert lines is not None and [x.line for x in lines] == [artifacts.chunk_line(c) for c in chunks]
    assert [(x.note_id, x.ordinal, x.language) for x in lines] == [(c.note_id, c.ordinal, c.language) for c in chunks]
    assert artifacts.read_chunk_lines(path, "0" * 64) is None          # not the file the stage recorded
    path.write_text(path.read_text().replace('{"chunk_id"', '{ "chunk_id"', 1))
    assert artifacts.read_chunk_lines(path, hashlib.sha256(path.read_bytes()).hexdigest()) is None  # another form


def test_edit_writes_what_a_fresh_build_writes(settings: Settings, tiny_env: Path) -> None:
    """After an edit, the incremental rebuild's vault folder and chunks file are byte for byte those of a build of
    the edited vault from scratch; the second rebuild of the same content changes nothing."""
    _chain(settings)
    guide = tiny_env / "tinyvault" / "Install guide.md"
    guide.write_text(guide.read_text() + "\n\nA changed paragraph about incremental rebuilds.\n")
    again = _chain(settings)
    assert again["chunk"]["rechunked"] == 1 and again["embed"]["embedded"] >= 1
    chunks = artifacts.chunks_path(settings, "tiny").read_bytes()
    vault = {k: v for k, v in _tree(settings.vault_dir / "tiny").items() if not k.startswith(".")}
    shutil.rmtree(settings.data_dir)
    shutil.rmtree(settings.vault_dir)
    index_stages._CACHES.clear()
    fresh = _chain(settings)
    assert fresh["chunk"]["rechunked"] == fresh["chunk"]["notes"]
    assert artifacts.chunks_path(settings, "tiny").read_bytes() == chunks
    assert {k: v for k, v in _tree(settings.vault_dir / "tiny").items() if not k.startswith(".")} == vault
    third = _chain(settings)
    assert third["chunk"]["skipped"] is True and third["embed"]["embedded"] == 0


def test_chunks_file_not_from_the_last_stage_is_chunked_again(settings: Settings, tiny_env: Path) -> None:
    """A chunks file whose bytes are not those the last chunk stage recorded (edited by hand) is not trusted: every
    note is chunked again, so an edited text is not served and a deleted line is not lost; the file gets the
    canonical form again."""
    _chain(settings)
    path = artifacts.chunks_path(settings, "tiny")
    canonical = path.read_text()
    lines = canonical.splitlines()
    path.write_text("\n".join([lines[0].replace('", "note_id": "', '",  "note_id": "'), *lines[2:]]) + "\n")
    again = _chain(settings)
    assert again["chunk"]["rechunked"] == again["chunk"]["notes"]
    assert path.read_text() == canonical


def test_vault_link_memo_gives_the_same_notes(settings: Settings, tiny_env: Path) -> None:
    """The vault stage's link memo (`<cache>/vaultlinks`) is written by the first build and used by the next: a
    rebuild with it writes the same vault as one without it."""
    _chain(settings)
    memo = settings.cache_dir / "vaultlinks"
    assert [p.suffix for p in memo.iterdir()] == [".json"]
    guide = tiny_env / "tinyvault" / "Install guide.md"
    guide.write_text(guide.read_text() + "\n\nSee [[Ducks]] too.\n")
    _chain(settings)
    with_memo = _tree(settings.vault_dir / "tiny")
    shutil.rmtree(memo)
    (settings.vault_dir / "tiny" / "Install guide.md").unlink()      # the stage writes it again, without the memo
    b.vault_stage(settings, load_sources(settings.sources_file)[0])
    assert _tree(settings.vault_dir / "tiny") == with_memo


def test_embedding_cache_reused_while_its_shards_stay(settings: Settings) -> None:
    _chain(settings)
    model_id = load_embedder("hash").model_id
    cache = index_stages._embedding_cache(settings, model_id)
    assert index_stages._embedding_cache(settings, model_id) is cache
    for shard in cache.shards():
        shard.unlink()                                  # e.g. compacted by another process
    assert index_stages._embedding_cache(settings, model_id) is not cache
