"""Issue 14: raw HTML and source-format markup left in Markdown become Markdown (exact in -> out pairs)."""

from __future__ import annotations

import pytest

from pipeline.ingest.normalize import clean_body
from pipeline.ingest.vault_check import markup_residue

ROUGE = ('<div class="language-c highlighter-rouge"><div class="highlight"><pre class="highlight"><code>'
         '<span class="kt">void</span> <a href="#f"><span class="nf">f</span></a>();\n\n'
         '<span class="kt">int</span> x &lt; 1;\n</code></pre></div></div>\n\nAfter.\n')
SPHINX = ('<dl class="py class">\n<dt class="sig sig-object py" id="duckdb.BinaryValue">\n<em class="property"><span '
          'class="k"><span class="pre">class</span></span><span class="w"> </span></em><span class="sig-prename '
          'descclassname"><span class="pre">duckdb.</span></span><span class="sig-name descname"><span class="pre">'
          'BinaryValue</span></span><span class="sig-paren">(</span><em class="sig-param"><span class="n"><span '
          'class="pre">object</span></span></em><span class="sig-paren">)</span><a class="headerlink" '
          'href="#duckdb.BinaryValue" title="Link to this definition">¶</a>\n</dt>\n<dd>\n<p>Bases: <a class="reference '
          'internal" href="#duckdb.Value" title="duckdb.value.constant.Value"><code class="xref py py-class docutils '
          'literal notranslate"><span class="pre">Value</span></code></a></p>\n</dd>\n</dl>\n')


@pytest.mark.parametrize("fmt, text, expected", [
    # Rouge/Pygments-highlighted code (duckdb's C API pages): a fence in the language of its class, text verbatim,
    # blank lines inside <pre> kept
    ("jekyll", ROUGE, "```c\nvoid f();\n\nint x < 1;\n```\n\nAfter.\n"),
    # Sphinx autodoc output (duckdb's Python reference): the signature and its text, no tags
    ("jekyll", SPHINX, '*class* duckdb.BinaryValue(*object*)\n:   Bases: [`Value`](#duckdb.Value '
                       '"duckdb.value.constant.Value")\n'),
    # an embedded video: a link to it in a Markdown source (an Obsidian note keeps its HTML, which Obsidian renders:
    # tests/test_normalize.py::test_obsidian_note_keeps_its_html)
    ("markdown", 'Intro.\n<div style="padding:62.29% 0 0 0;position:relative;"><iframe '
                 'src="https://player.vimeo.com/video/1" title="Highlighter demo"></iframe></div>\nAfter.\n',
     "Intro.\n\n[Highlighter demo](https://player.vimeo.com/video/1)\n\nAfter.\n"),
    # a wrapper around Markdown (blank lines inside): only the tags go, the Markdown inside stays Markdown
    ("markdown", "<details>\n<summary>Show the answer</summary>\n\nThe **answer** is `42`.\n\n</details>\n",
     "Show the answer\n\nThe **answer** is `42`.\n\n"),
    ("mdx", "<div className=\"t-full-width\">\n\n  - a\n  - b `c`\n\n</div>\n", "\n- a\n- b `c`\n\n"),
    # JSX style objects ({{...}} is not Liquid) and an image inside a layout div (ja-react's blog)
    ("mdx", "<div style={{display: 'flex', justifyContent: 'center'}}>\n  <img src=\"/images/a.png\" alt=\"A\" "
            "width={300} />\n</div>\n", "![A](/images/a.png)\n"),
    # inline styling: the text stays; an icon link left empty goes (prefect's API headings)
    ("mdx", 'Run it <span class="badge cloud">Cloud</span> only.\n', "Run it Cloud only.\n"),
    ("mdx", '#### `emit` <sup><a href="https://github.com/x.py#L459" target="_blank"><Icon icon="github" /></a>'
            '</sup>\n', "#### `emit` \n"),
    # escaped tags are text; code is never touched
    ("markdown", "content in \\<div\\>.\n\n```html\n<div><span>x</span></div>\n```\n",
     "content in \\<div\\>.\n\n```html\n<div><span>x</span></div>\n```\n"),
    ("markdown", "Use `<span class=\"x\">` here.\n", "Use `<span class=\"x\">` here.\n"),
    # MDX components right after Japanese text (ja-react's <CodeStep>, <MathI>): their text
    ("mdx", "唯一のプロパティである<CodeStep step={2}>`current`</CodeStep>に、<MathI>x</MathI>です。\n",
     "唯一のプロパティである`current`に、xです。\n"),
    ("mdx", "y = 2<MathI>x</MathI> but `List<T>` and List<T> stay.\n", "y = 2x but `List<T>` and List<T> stay.\n"),
])
def test_markup_becomes_markdown(fmt: str, text: str, expected: str) -> None:
    out = clean_body(fmt, text, {})
    assert out == expected
    assert markup_residue(out) == []


def test_jekyll_site_variables_come_from_config() -> None:
    site = {"current_duckdb_version": "1.4.2", "nested": {"x": 7}}
    text = "Version {{ site.current_duckdb_version }}, {{ site.nested.x | relative_url }}, {{ site.nope }}.\n"
    assert clean_body("jekyll", text, {}, site) == "Version 1.4.2, 7, .\n"
    assert clean_body("jekyll", text, {}) == "Version , , .\n"


def test_site_config_is_read_from_the_source_root(tmp_path) -> None:
    from pipeline.ingest.normalize import normalize_source
    from pipeline.models import RawFile, Source

    (tmp_path / "docs").mkdir()
    (tmp_path / "_config.yml").write_text("current_duckdb_version: 1.4.2\n", encoding="utf-8")
    page = tmp_path / "docs" / "install.md"
    page.write_text("---\nlayout: docu\ntitle: Install\n---\nInstall DuckDB {{ site.current_duckdb_version }}.\n",
                    encoding="utf-8")
    result = normalize_source(Source(name="d", kind="git", paths=("docs",), format="jekyll"),
                              [RawFile("d", "docs/install.md", page)], "2026-01-01T00:00:00+00:00")
    assert result.notes[0].body == "Install DuckDB 1.4.2.\n"


def test_residue_finder() -> None:
    body = ("<span>a</span> {{ site.x }} {% include x %} <CodeStep step={1}>x</CodeStep> \\<div\\>\n"
            "```\n<div>in code</div>\n```\n`<Tip>`\n")
    assert markup_residue(body) == [("span", "<span>"), ("span", "</span>"), ("liquid", "{{ site.x }}"),
                                    ("liquid", "{% include x %}"), ("mdx", "<CodeStep step={1}>"),
                                    ("mdx", "</CodeStep>")]


def test_html_table_becomes_a_gfm_table_with_the_right_header() -> None:
    """Caption, column group, two header rows with a colspan, a rowspan, a footer before the body (valid HTML), a
    pipe and a line break in a cell: the shapes reported against HTML->Markdown converters (markdownify, turndown)
    for scraped API pages."""
    html = ('<table>\n<caption>Supported types</caption>\n<colgroup><col><col></colgroup>\n'
            '<thead><tr><th rowspan="2">Type</th><th colspan="2">Size</th></tr>\n<tr><th>min</th><th>max</th></tr>'
            '</thead>\n<tfoot><tr><td>Total</td><td colspan="2">3</td></tr></tfoot>\n'
            '<tbody><tr><td>INT</td><td>4</td><td><code>4</code></td></tr>\n'
            '<tr><td rowspan="2">VARCHAR</td><td>0</td><td>n | m</td></tr>\n'
            '<tr><td>1</td><td><a href="x.md">two</a><br>lines</td></tr></tbody>\n</table>\n')
    assert clean_body("markdown", html, {}) == (
        "Supported types\n\n"
        "| Type | Size min | Size max |\n| --- | --- | --- |\n| INT | 4 | `4` |\n| VARCHAR | 0 | n \\| m |\n"
        "| VARCHAR | 1 | [two](x.md)<br>lines |\n| Total | 3 |  |\n")


def test_html_table_header_rows() -> None:
    # no <th> anywhere: the first row is the header (microsoft/markitdown#1086: docx tables came out with an
    # empty header row and the real one in the body after markdownify 1.0)
    assert clean_body("markdown", "<table><tr><td>Product</td><td>Price</td></tr><tr><td>Apple</td></tr></table>\n",
                      {}) == "| Product | Price |\n| --- | --- |\n| Apple |  |\n"
    assert clean_body("markdown", "<table><tr><th>H1</th><th>H2</th></tr><tr><td>a</td></tr></table>\n", {}) == (
        "| H1 | H2 |\n| --- | --- |\n| a |  |\n")
    # <th> only further down: the header row stays empty rather than take data
    assert clean_body("markdown", "<table><tr><td>a</td><td>b</td></tr><tr><th>c</th><td>d</td></tr></table>\n",
                      {}) == "|  |  |\n| --- | --- |\n| a | b |\n| c | d |\n"


@pytest.mark.parametrize("html, expected", [
    # matthewwithanm/python-markdownify#121 (rowspan): the row below keeps its columns
    ('<table><tr><th>Month</th><th>Savings</th><th>Savings for holiday!</th></tr><tr><td>January</td><td>$100</td>'
     '<td rowspan="2">$50</td></tr><tr><td>February</td><td>$80</td></tr></table>',
     "| Month | Savings | Savings for holiday! |\n| --- | --- | --- |\n| January | $100 | $50 |\n"
     "| February | $80 | $50 |\n"),
    # matthewwithanm/python-markdownify#49: paragraphs inside cells and a colspan must not break the rows
    ('<table><thead><tr><th><p>Heading 1</p></th><th><p>Heading 2</p></th><th><p>Heading 3</p></th></tr></thead>'
     '<tbody><tr><td><div><p>\n\t\tThis is some text for the first column.\n\t    </p></div></td><td colspan=2>'
     '<div><p>This is the rest of the columns.</p></div></td></tr></tbody></table>',
     "| Heading 1 | Heading 2 | Heading 3 |\n| --- | --- | --- |\n| This is some text for the first column. | "
     "This is the rest of the columns. |  |\n"),
    # Alir3z4/html2text#367: a colspan in the header
    ('<table><tr><th colspan="2">A</th><th>B</th></tr><tr><td>1</td><td>2</td><td>3</td></tr></table>',
     "| A | A | B |\n| --- | --- | --- |\n| 1 | 2 | 3 |\n"),
    # microsoft/markitdown#2522: rowspan="0" reaches the end of its row group and never leaks into the footer
    ('<table><thead><tr><th>Region</th><th>Product</th><th>Units</th></tr></thead><tbody><tr><td rowspan="0">EU'
     '</td><td>Cable</td><td>12</td></tr><tr><td>Hub</td><td>7</td></tr></tbody><tfoot><tr><td>Total</td>'
     '<td>19</td></tr></tfoot></table>',
     "| Region | Product | Units |\n| --- | --- | --- |\n| EU | Cable | 12 |\n| EU | Hub | 7 |\n"
     "| Total | 19 |  |\n"),
])
def test_html_tables_from_converter_bug_reports(html: str, expected: str) -> None:
    assert clean_body("markdown", html + "\n", {}) == expected


def test_markdown_block_reference_stays_a_block_reference(tmp_path) -> None:
    from pipeline.ingest.normalize import normalize_source
    from pipeline.models import RawFile, Source

    (tmp_path / "a.md").write_text("# A\n\nSee [that paragraph](b.md#^p1) and [the part](b.md#part).\n")
    (tmp_path / "b.md").write_text("# B\n\n## Part\n\nA paragraph. ^p1\n")
    result = normalize_source(Source(name="s", kind="local", format="markdown"),
                              [RawFile("s", "a.md", tmp_path / "a.md"), RawFile("s", "b.md", tmp_path / "b.md")],
                              "2026-01-01T00:00:00+00:00")
    assert result.notes[0].body == "# A\n\nSee [[s/b#^p1|that paragraph]] and [[s/b#Part|the part]].\n"


# ---- inline HTML elements (prefect's "View on GitHub" anchors, <code>, <br>, <strong>) ----

@pytest.mark.parametrize("text, expected", [
    ('<a href="https://github.com/x/y.py" target="_blank">View on GitHub</a>\n', "[View on GitHub](https://github.com/x/y.py)\n"),
    ('See <a href="../b.md">the <code>b</code> page</a> and <strong>this</strong>.\n',
     "See [the `b` page](../b.md) and **this**.\n"),
    # a target with a space or parentheses stays one link destination (percent-encoded; resolution decodes it)
    ('<a href="My note (draft).md">draft</a>\n', "[draft](My%20note%20%28draft%29.md)\n"),
    # inline code (a placeholder while converting) inside an anchor
    ('<a href="x.md">`code`</a> <kbd>Ctrl</kbd>+<kbd>C</kbd>, <em>e</em> <b>b</b> <i>i</i> <s>old</s>\n',
     "[`code`](x.md) `Ctrl`+`C`, *e* **b** *i* ~~old~~\n"),
    # <br>: a hard break (two spaces) at a line's end; mid-line it continues under the list item or quote; a
    # heading stays one line; a line of only <br> (a spacer) and a table cell's <br> stay
    ("- **Q:** Where?<br/>\n   **A:** There.<br/>\n", "- **Q:** Where?  \n   **A:** There.  \n"),
    ("- a<br>b\n\n> c<br />d\n\n# H<br>x\n", "- a  \n  b\n\n> c  \n> d\n\n# H x\n"),
    ("Para.\n\n<br>\n\n> <br>\n", "Para.\n\n<br>\n\n> <br>\n"),
    ('| a | b<br/>c <a href="x.md">y</a> |\n|---|---|\n| 1 | 2 |\n', "| a | b<br/>c [y](x.md) |\n|---|---|\n| 1 | 2 |\n"),
    # code, escaped tags, generics and elements spanning lines are left alone
    ('Use `<a href="x">` and \\<a href="y">z</a>; Map<b> stays.\n', 'Use `<a href="x">` and \\<a href="y">z</a>; '
                                                                     "Map<b> stays.\n"),
    ('```html\n<a href="x">y</a> <br>\n```\n', '```html\n<a href="x">y</a> <br>\n```\n'),
    ('<a href="x.md">two\nlines</a>\n', '<a href="x.md">two\nlines</a>\n'),
])
def test_inline_html_becomes_markdown(text: str, expected: str) -> None:
    assert clean_body("mdx", text, {}) == expected


def test_inline_anchor_to_another_page_becomes_a_wikilink(tmp_path) -> None:
    """An internal ``<a href>`` is a link of the graph like any Markdown link (prefect's examples pages)."""
    from pipeline.ingest.normalize import normalize_source
    from pipeline.models import RawFile, Source

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.mdx").write_text(
        '# A\n\nRead <a href="/v3/b" target="_blank">the <code>B</code> guide</a> or '
        '<a href="https://github.com/o/r">GitHub</a>.\n')
    (tmp_path / "docs" / "b.mdx").write_text("# B\n\nText.\n")
    result = normalize_source(Source(name="p", kind="local", format="mdx", paths=("docs",),
                                     site_url="https://docs.ex.org/v3"),
                              [RawFile("p", "docs/a.mdx", tmp_path / "docs" / "a.mdx"),
                               RawFile("p", "docs/b.mdx", tmp_path / "docs" / "b.mdx")], "2026-01-01T00:00:00+00:00")
    assert result.notes[0].body == "# A\n\nRead [[p/docs/b|the `B` guide]] or [GitHub](https://github.com/o/r).\n"
    assert result.dangling == ()


@pytest.mark.integration
def test_prefect_notes_keep_no_raw_anchor() -> None:
    """Normalize alone over the prefect corpus: no note keeps a raw ``<a href>`` in its prose (10 before)."""
    import re

    from pipeline.common.markdown import split_code
    from pipeline.ingest.normalize import _protect_inline_code, normalize_source
    from pipeline.models import RawFile, Source

    from .conftest import shared_path

    root = shared_path("corpora", "prefect")
    files = [RawFile("prefect", p.relative_to(root).as_posix(), p) for p in sorted((root / "docs/v3").rglob("*.mdx"))]
    result = normalize_source(Source(name="prefect", kind="git", paths=("docs/v3",), format="mdx",
                                     site_url="https://docs.prefect.io/v3"), files, "2026-01-01T00:00:00+00:00")
    left = [n.source_path for n in result.notes
            if any(re.search(r"<a\s[^>\n]*href=", _protect_inline_code(chunk)[0])
                   for is_code, chunk in split_code(n.body) if not is_code)]
    assert (len(result.notes), left) == (781, [])
