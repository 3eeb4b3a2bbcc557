"""Ingest: sources.yaml -> fetch (``fetch/``) -> normalize (Markdown notes) -> vault (the Obsidian folder), plus the
vault's ownership manifest, attachments, the vault check and note capture."""
