"""docsvault: docs and Obsidian vaults -> one vault, a link graph and a DuckDB warehouse with hybrid search."""

__version__ = "0.1.0"
