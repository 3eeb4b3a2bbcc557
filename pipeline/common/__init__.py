"""Shared by every stage and shell: errors, YAML loading, atomic artifacts, the build lock, progress lines, front
matter, the embedding model registry (``embedding_models``)."""
