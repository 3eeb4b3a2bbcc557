"""A read of a vault path with a heading the note has not named the note twice (session 48, an agent over MCP):
`read(path="duckdb/data/csv/overview.md#Exampels")` warned "heading 'Exampels' not found in
'duckdb/data/csv/overview.md' (duckdb/data/csv/overview.md)". The vault path in parentheses is for a link that
named the note otherwise ('Install guide' (tiny/Install guide.md)); given as the vault path, it is said once."""

from __future__ import annotations

from pipeline.search.reader import subpath_missing

BODY = "# CSV Import\n\n## Examples\n\nRead a CSV file.\n"


def test_a_vault_path_with_a_missing_heading_is_named_once() -> None:
    assert subpath_missing(BODY, "duckdb/data/csv/overview.md", "duckdb/data/csv/overview.md", "Exampels", 1) == (
        "heading 'Exampels' not found in 'duckdb/data/csv/overview.md'; showing page 1; closest headings: "
        "'Examples'; e.g. read 'duckdb/data/csv/overview.md#Examples'")
    # a name: the vault path it resolved to follows, as before
    assert subpath_missing(BODY, "overview", "duckdb/data/csv/overview.md", "Exampels", 1).startswith(
        "heading 'Exampels' not found in 'overview' (duckdb/data/csv/overview.md); showing page 1;")
