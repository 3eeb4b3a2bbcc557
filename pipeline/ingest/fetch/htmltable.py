"""HTML ``<table>`` -> one valid GFM table: the single table converter of HTML pages and of HTML in Markdown.

Both converters go through it: :class:`pipeline.ingest.fetch.htmlmd._Converter` (HTML pages: crawled sites, built
sites on disk) renders every ``<table>`` with :func:`html_table_to_gfm`, and :mod:`pipeline.ingest.htmlblocks`
(HTML blocks in Markdown notes) uses that converter. The rules (README, "What normalize does with source markup"):

* rows in reading order: ``<thead>`` rows, body rows, then ``<tfoot>`` rows (a footer is the last rows of the table,
  wherever the HTML puts it); a nested table's rows belong to the nested table;
* one header row: the ``<thead>`` rows, else the leading rows made only of ``<th>`` cells, merged per column
  (``Size`` over ``min``/``max`` -> ``Size min``, ``Size max``); a table without any ``<th>`` takes its first row as
  the header (as markdownify did before 1.0 and docx exports expect), a table with ``<th>`` only further down gets
  an empty header row (data is not promoted);
* ``rowspan`` repeats the cell's text in each row it covers, within its row group (``rowspan="0"``: to the group's
  end, as browsers do); ``colspan`` leaves the covered cells empty, except in the header, where it repeats;
* every row has the header's number of columns (the widest row's; shorter rows padded with empty cells);
* a cell is one line: ``|`` escaped, line breaks (paragraphs, list items, ``<br>``) become ``<br>``; a nested
  table stays in its cell, its GFM lines joined by ``<br>`` (their pipes escaped);
* a ``<caption>`` becomes a paragraph before the table; ``<colgroup>`` is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bs4 import Tag

__all__ = ["MAX_TABLE_CELLS", "html_table_to_gfm"]

MAX_TABLE_CELLS = 20_000
"""Cells read per table; rows after the cap are dropped (a bound on the work a hostile page can cause)."""
MAX_COLSPAN = 100
MAX_ROWSPAN = 1_000

_LINE_BREAKS = re.compile(r"\s*\n+\s*")
_PIPE = re.compile(r"(?<!\\)\|")


def _cells(tr: Tag) -> list[Tag]:
    return tr.find_all(["td", "th"], recursive=False)


def _table_sections(table: Tag) -> tuple[list[Tag], list[Tag], list[Tag]]:
    """``(header rows, body rows, footer rows)`` of ``table``: its own ``<tr>`` (not a nested table's), each list in
    document order. Header rows: the ``<thead>`` rows, else the leading body rows of only ``<th>`` cells, else
    (no ``<th>`` in the table at all, and more than one row) the first row."""
    head: list[Tag] = []
    body: list[Tag] = []
    foot: list[Tag] = []
    for tr in table.find_all("tr"):
        if tr.find_parent("table") is not table:
            continue
        section = tr.find_parent(["thead", "tbody", "tfoot", "table"])
        name = section.name if isinstance(section, Tag) else "table"
        (head if name == "thead" else foot if name == "tfoot" else body).append(tr)
    if not head:
        while body and _cells(body[0]) and all(c.name == "th" for c in _cells(body[0])):
            head.append(body.pop(0))
    if not head and len(body) > 1 and not any(c.name == "th" for tr in body + foot for c in _cells(tr)):
        head.append(body.pop(0))          # no header cell anywhere: the first row is the header (as in docx exports)
    return head, body, foot


def _spans(cell: Tag, rows_left: int) -> tuple[int, int]:
    """``(colspan, rowspan)`` of a cell, clamped to 1..MAX_COLSPAN / 1..MAX_ROWSPAN; ``rowspan="0"`` is
    ``rows_left`` (the rest of its row group); an unreadable value counts as ``(1, 1)``."""
    try:
        span_c = max(1, min(MAX_COLSPAN, int(str(cell.get("colspan", "1")).strip() or 1)))
        span_r = int(str(cell.get("rowspan", "1")).strip() or 1)
    except ValueError:
        return 1, 1
    return span_c, rows_left if span_r == 0 else max(1, min(MAX_ROWSPAN, span_r))


def _fill_pending(row: list[str], pending: dict[int, tuple[int, str]]) -> None:
    """Append to ``row`` the texts of the rowspans from rows above that cover its next columns."""
    while len(row) in pending:
        left, text = pending.pop(len(row))
        if left > 1:
            pending[len(row)] = (left - 1, text)
        row.append(text)


def _grid(groups: tuple[list[Tag], ...], cell_text: Callable[[Tag], str]) -> list[list[str]]:
    """Rows of cell texts for the row groups (header, body, footer), spans expanded (see module doc); rows may
    differ in length. Stops at :data:`MAX_TABLE_CELLS` cells."""
    grid: list[list[str]] = []
    seen = 0
    for g, rows in enumerate(groups):
        pending: dict[int, tuple[int, str]] = {}      # column -> (rows left, text): a rowspan ends with its group
        for k, tr in enumerate(rows):
            row: list[str] = []
            for cell in _cells(tr):
                _fill_pending(row, pending)
                seen += 1
                if seen > MAX_TABLE_CELLS:
                    return grid
                text = cell_text(cell)
                span_c, span_r = _spans(cell, len(rows) - k)
                for j in range(span_c):
                    value = text if j == 0 or g == 0 else ""      # a merged header repeats, a merged cell does not
                    if span_r > 1:
                        pending[len(row)] = (span_r - 1, value)
                    row.append(value)
            _fill_pending(row, pending)
            grid.append(row)
    return grid


def html_table_to_gfm(table: Tag, cell_markdown: Callable[[Tag], str]) -> str:
    """A GFM table for an HTML ``<table>`` (see module doc).

    Args:
        table: the ``<table>`` element (BeautifulSoup, any parser).
        cell_markdown: renders a cell's (or the caption's) content as Markdown; may return several lines.

    Returns:
        ``"<caption>\\n\\n"`` (when there is one) + header row, delimiter row and data rows, all with the same
        number of columns, joined by ``\\n`` without a final newline; only the caption (or ``""``) when the table
        has no cells.
    """
    def cell_text(cell: Tag) -> str:
        text = _LINE_BREAKS.sub("<br>", cell_markdown(cell).strip())
        return _PIPE.sub(r"\\|", text)

    head, body, foot = _table_sections(table)
    grid = _grid((head, body, foot), cell_text)
    caption = table.find("caption", recursive=False)
    cap = _LINE_BREAKS.sub(" ", cell_markdown(caption).strip()) if isinstance(caption, Tag) else ""
    width = max((len(r) for r in grid), default=0)
    if width == 0:
        return cap
    rows = [r + [""] * (width - len(r)) for r in grid]
    header = [""] * width
    for r in rows[:len(head)]:
        header = [(h + " " + c).strip() if c and c != h else h for h, c in zip(header, r)]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---"] * width) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows[len(head):]]
    return (f"{cap}\n\n" if cap else "") + "\n".join(lines)
