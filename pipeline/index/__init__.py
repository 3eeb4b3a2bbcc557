"""Index: what search needs from the notes: chunks, the link graph, text analysis + BM25, embeddings (MiniLM, E5, ONNX)."""
