"""A warehouse of a few pages for search tests: notes, one chunk per text, HashEmbedder vectors and the BM25 chunk
index, published as the build publishes it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline import warehouse as wh
from pipeline.index.analysis import Analyzer
from pipeline.index.bm25 import build_chunk_index
from pipeline.index.embed import HashEmbedder, embed_chunks
from pipeline.models import Chunk, Edge, Note


def publish_pages(path: Path, pages: Mapping[tuple[str, str, str], Sequence[str]],
                  dims: Sequence[int] = (64, 32)) -> None:
    """Publish ``{(source, rel path, title): [chunk text, ...]}`` to ``path``, one HashEmbedder model per dim."""
    notes, chunks = [], []
    for (source, rel, title), texts in pages.items():
        note = Note(source, rel, rel, title, {"title": title}, "\n\n".join(texts))
        notes.append(note)
        chunks += [Chunk(f"{note.note_id}-{i}", note.note_id, source, i, (f"Part {i}",), f"{title} > Part {i}", t)
                   for i, t in enumerate(texts)]
    publish_chunks(path, notes, chunks, dims)


def publish_chunks(path: Path, notes: Sequence[Note], chunks: Sequence[Chunk], dims: Sequence[int] = (64,),
                   edges: Sequence[Edge] = ()) -> None:
    """Publish ``notes`` and their ``chunks`` (and the links ``edges``) to ``path``: one HashEmbedder model per
    dim, the BM25 chunk index."""
    notes, chunks = list(notes), list(chunks)
    vectors = {}
    for dim in dims:
        emb = HashEmbedder(dim)
        res = embed_chunks(chunks, emb, None)
        vectors[emb.model_id] = (res.chunk_ids, res.vectors)
    bm25 = build_chunk_index(chunks, notes, Analyzer())
    wh.publish(path, wh.WarehouseData(notes=notes, chunks=chunks, vectors=vectors, bm25_blobs=bm25.to_blobs(),
                                      edges=edges))
