"""HTML -> Markdown (EC-01, EC-02, EC-04, main content) and the html crawler (scope, robots, canonical, cap,
conditional GET, isolation); integration: the real txtai (MkDocs Material) and jekyllrb sites on loopback."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from pipeline.common.errors import FetchError
from pipeline.config import Settings
from pipeline.ingest.fetch import fetch_source, load_fetch_result
from pipeline.ingest.fetch.htmlmd import html_to_markdown
from pipeline.ingest.normalize import clean_body, normalize_source
from pipeline.models import Source
from tests.conftest import shared_path
from tests.loopback import ScriptedHandler, serve


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                    vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals")


# ---- conversion

def test_ec01_stray_nested_list_moves_into_previous_item():
    html = "<ul><li>Install</li><li>Configure</li><ul><li>env vars</li><li>config file</li></ul><li>Run</li></ul>"
    md = html_to_markdown(f"<html><body><main><h1>T</h1>{html}</main></body></html>").markdown
    assert md == "# T\n\n* Install\n* Configure\n  + env vars\n  + config file\n* Run\n"
    tokens = MarkdownIt().parse(md)
    outer = [t for t in tokens if t.type == "list_item_open" and t.level == 1]
    inner = [t for t in tokens if t.type == "list_item_open" and t.level == 3]
    assert (len(outer), len(inner)) == (3, 2)


def test_ec02_language_from_wrapper_code_verbatim_links_kept():
    html = ('<main><h1>T</h1><div class="language-bash highlight"><pre><span></span><code><span class="gp">$ </span>'
            'pip<span class="w"> </span>install<span class="w"> </span>my_pkg[extra]\n'
            '<span class="c1"># __init__ *not* emphasis</span></code></pre></div>\n'
            '<p>See <a href="/docs/setup.html">setup</a>.</p>\n<pre class="brush: js">let a = 1;</pre>'
            '<pre>no language</pre></main>')
    md = html_to_markdown(html).markdown
    assert md == ("# T\n\n```bash\n$ pip install my_pkg[extra]\n# __init__ *not* emphasis\n```\n\n"
                  "See [setup](/docs/setup.html).\n\n```js\nlet a = 1;\n```\n\n```\nno language\n```\n")


def test_ec04_base_href_and_page_url():
    html = ('<html><head><base href="../assets/"></head><body><main><h1>T</h1><p>'
            '<a href="intro.html">Intro</a> <img src="chart.png" alt="Chart"> <a href="#usage">Usage</a> '
            '<a href="https://other.example.net/x">Ext</a> <a href="mailto:a@example.invalid">Mail</a></p></main>'
            '</body></html>')
    md = html_to_markdown(html, "https://docs.example.org/v2/guide/start.html").markdown
    assert "[Intro](https://docs.example.org/v2/assets/intro.html)" in md
    assert "![Chart](https://docs.example.org/v2/assets/chart.png)" in md
    assert "[Usage](#usage)" in md and "[Ext](https://other.example.net/x)" in md
    assert "[Mail](mailto:a@example.invalid)" in md
    bare = html_to_markdown(html.replace('<base href="../assets/">', "")).markdown
    assert "[Intro](intro.html)" in bare and "![Chart](chart.png)" in bare


def test_main_content_drops_navigation_and_permalinks():
    html = ("<html><head><title>Site - Page</title></head><body><header><a href='/'>Home</a></header>"
            "<nav><ul><li><a href='/a/'>Menu A</a></li></ul></nav><div class='md-sidebar'>Side</div>"
            "<form role='search'><input placeholder='Search'></form>"
            "<article><a class='md-content__button' href='/edit'>Edit</a><h1 id='p'>Page<a class='headerlink' "
            "href='#p'>¶</a></h1><p>Body text.</p><div class='toc'>On this page</div>"
            "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table></article>"
            "<footer>Copyright</footer></body></html>")
    doc = html_to_markdown(html, "http://h/x/")
    # the h1's anchor `p` is not its text's slug: written as `{#p}`, which normalize reads and drops
    assert doc.markdown == "# Page {#p}\n\nBody text.\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n"
    assert doc.title == "Page" and doc.extractor == "container"
    assert doc.links == ("http://h/", "http://h/a/", "http://h/edit")


def test_boilerplate_words_in_ids_and_classes_never_drop_headings_or_sections():
    """Generators make ids from heading text (txtai's <h2 id="search">, Sphinx's <section
    id="share-an-index">): content elements stay; a wrapper named like boilerplate stays when it holds a
    heading and prose (Sphinx's <div class="section" id="social-graph">, a layout column named with-sidebar
    that holds the page's h2), and goes when it is links (a sidebar's "Related" list, a TOC)."""
    html = ('<main><h1>Embeddings</h1><p>Intro.</p><h2 id="search">Search</h2><p>Find things.</p>'
            '<section id="search-function"><h2>Search function</h2><p>Runs a query.</p></section>'
            '<section id="share-an-index"><h3 class="share">Share an index</h3><p>Copy the folder.</p>'
            '</section><div class="section" id="social-graph"><h3>Social graph</h3><p>Nodes and '
            '<a href="#e">edges</a>.</p></div><div class="sidebar"><h4>Related</h4><ul><li><a href="/a">'
            'Alpha page</a></li><li><a href="/b">Beta page</a></li></ul></div><div class="edit-this-page">'
            '<a href="/e">Edit this page</a></div><ul class="page-toc"><li><a href="#search">Search</a></li>'
            '</ul><p class="footer-note">Last words.</p><div class="with-sidebar"><h2>Install</h2><p>Run '
            '<a href="/pip">pip</a> in a fresh environment.</p></div></main>')
    assert html_to_markdown(html).markdown == (
        "# Embeddings\n\nIntro.\n\n## Search\n\nFind things.\n\n## Search function\n\nRuns a query.\n\n"
        "### Share an index\n\nCopy the folder.\n\n### Social graph\n\nNodes and [edges](#e).\n\n"
        "Last words.\n\n## Install\n\nRun [pip](/pip) in a fresh environment.\n")


def test_text_that_reads_as_markdown_block_syntax_is_escaped():
    """A paragraph whose text starts with `# `, `>`, `- `, `1.`, `---` or a fence stays a paragraph
    (jekyllrb.com's `<p class="line"># => Now browse to …`); mid-line, in headings, table cells and code
    nothing changes."""
    html = ('<main><h1>T</h1><p class="line">\n  <span class="output"># =&gt; Now browse to '
            'http://localhost:4000</span>\n</p><p>&gt; quoted</p><p>- dash\n+ plus\n1. one\n2) two</p>'
            '<p>See #3 and 1. and a - b</p><p>Title\n===\n---</p><p>```python</p><p><em>x</em> # not a '
            'heading</p><p>a<br># after break</p><ul><li># in item</li></ul><h2># kept</h2><table><tr><th>h'
            '</th></tr><tr><td># cell</td></tr></table><pre># code\n- x</pre><p>2024. A year</p>'
            '<p>#hashtag</p></main>')
    assert html_to_markdown(html).markdown == (
        "# T\n\n\\# => Now browse to http://localhost:4000\n\n\\> quoted\n\n\\- dash\n\\+ plus\n1\\. one\n"
        "2\\) two\n\nSee #3 and 1. and a - b\n\nTitle\n\\===\n\\---\n\n\\```python\n\n*x* # not a heading\n\n"
        "a\n\\# after break\n\n* \\# in item\n\n## # kept\n\n| h |\n| --- |\n| # cell |\n\n```\n# code\n- x\n"
        "```\n\n2024\\. A year\n\n#hashtag\n")
    tokens = [t.type for t in MarkdownIt().enable("table").parse(html_to_markdown(html).markdown)]
    assert [tokens.count(t) for t in ("heading_open", "fence", "bullet_list_open", "blockquote_open",
                                      "ordered_list_open", "hr")] == [2, 1, 1, 0, 0, 0]


_BANNER = ('<header><h1><a href="/" class="logo"><span class="sr-only">Jekyll</span><img src="/logo.png" '
           'alt="Logo"></a></h1><nav><ul><li><a href="/docs/">Docs</a></li></ul></nav><div class="search">'
           '<input placeholder="Search the docs…"></div></header>')
_FOOTER = '<footer><p>Jekyll is lovingly maintained by the <a href="/team/">core team</a>.</p></footer>'


def test_page_without_container_but_with_landmarks_keeps_its_sections():
    """jekyllrb.com's home page: no <main>/<article>, a logo <h1> in the <header>: the body without header,
    nav and footer is the content (trafilatura dropped its h2/h3 and the "How Jekyll works →" links)."""
    home = ('<html><head><title>Jekyll</title></head><body>' + _BANNER + '<section class="features"><div '
            'class="unit"><h2>Simple</h2><p>No more databases.</p><a href="/docs/usage/">How Jekyll works '
            '&rarr;</a></div></section><section class="quickstart"><h3>Get up and running <em>in&nbsp;'
            'seconds</em>.</h3><div class="shell"><p class="line">\n  <span class="command">jekyll serve'
            '</span>\n</p></div></section>' + _FOOTER + '</body></html>')
    doc = html_to_markdown(home, "https://jekyllrb.com/")
    assert (doc.extractor, doc.title) == ("container", "Jekyll")
    assert doc.markdown == ("# Jekyll\n\n## Simple\n\nNo more databases.\n\n[How Jekyll works →]"
                            "(https://jekyllrb.com/docs/usage/)\n\n### Get up and running "
                            "*in\xa0seconds*.\n\njekyll serve\n")


def test_logo_h1_is_not_the_title_and_a_listing_of_articles_is_kept_whole():
    """A post under a logo <h1> is its <article>; a listing of several <article>s is not the .post-content
    of its first one."""
    other = '<article><h2><a href="/n/1/">One Released</a></h2></article>'
    listing = ('<html><head><title>News</title></head><body>' + _BANNER + '<section class="news"><article>'
               '<h2><a href="/n/2/">Two Released</a></h2><div class="post-content"><p>Second.</p></div>'
               '</article>' + other + '</section>' + _FOOTER + '</body></html>')
    doc = html_to_markdown(listing, "https://jekyllrb.com/news/")
    assert doc.markdown == ("# News\n\n## [Two Released](https://jekyllrb.com/n/2/)\n\nSecond.\n\n"
                            "## [One Released](https://jekyllrb.com/n/1/)\n")
    post = html_to_markdown(listing.replace(other, ""))
    assert post.markdown == "# News\n\n## [Two Released](/n/2/)\n\nSecond.\n"


def test_mkdocstrings_collapsed_source_code_is_left_out_other_details_kept():
    """mkdocstrings' "Source code in …" listings (class quote, or mkdocstrings-source) are not the docs:
    txtai's embeddings/methods page was 68,040 characters, ~1,100 lines of them the class source."""
    html = ('<main><h1>API</h1><div class="doc"><h3 id="x.search">search</h3><p>Finds documents.</p>'
            '<details class="quote"><summary>Source code in <code>txtai/x.py</code></summary><div '
            'class="highlight"><pre><code>def search(self):\n    pass</code></pre></div></details><p>Returns '
            'ids.</p><details class="mkdocstrings-source"><summary>Source code in <code>txtai/y.py</code>'
            '</summary><pre><code>def y(): pass</code></pre></details><details class="example"><summary>'
            'Example</summary><pre><code>x.search(1)</code></pre></details></div></main>')
    assert html_to_markdown(html).markdown == (
        "# API\n\n### search {#x.search}\n\nFinds documents.\n\nReturns ids.\n\nExample\n\n```\nx.search(1)\n```\n")


def test_admonitions_become_callouts_and_only_the_light_theme_image_stays():
    """mkdocs/Sphinx admonitions -> `> [!kind] Title` (kind from the class, `note` without one; nested ones
    nest); mkdocs-material's `#only-light`/`#only-dark` pair (GitHub's `#gh-*-mode-only` too) -> the light
    one."""
    html = ('<main><h1>T</h1><p><img alt="pipeline" src="../images/pipeline.png#only-light" />\n<img '
            'alt="pipeline" src="../images/pipeline-dark.png#only-dark" /></p><div class="admonition note">'
            '<p class="admonition-title">Note</p><p>First <a href="https://neuml.com">NeuML</a>.</p><p># '
            'second</p></div><div class="admonition warning"><p class="admonition-title">Use <code>gpu</code>'
            '</p><pre><code class="language-python">x = 1\n</code></pre><div class="admonition tip"><p>'
            'Nested.</p></div></div><div class="admonition"><p>Plain.</p></div><p><img alt="a" '
            'src="a.png#gh-light-mode-only"><a href="d"><img alt="a" src="a-dark.png#gh-dark-mode-only"></a>'
            '</p></main>')
    assert html_to_markdown(html, "https://neuml.github.io/txtai/pipeline/").markdown == (
        "# T\n\n![pipeline](https://neuml.github.io/txtai/images/pipeline.png)\n\n"
        "> [!note] Note\n> First [NeuML](https://neuml.com).\n>\n> \\# second\n\n"
        "> [!warning] Use `gpu`\n> ```python\n> x = 1\n> ```\n>\n> > [!tip]\n> > Nested.\n\n"
        "> [!note]\n> Plain.\n\n![a](https://neuml.github.io/txtai/pipeline/a.png)\n")

def test_highlighttable_keeps_code_without_line_numbers():
    html = ('<main><h1>T</h1><div class="language-python highlight"><table class="highlighttable"><tr>'
            '<td class="linenos"><div class="linenodiv"><pre><span class="normal">1</span>\n'
            '<span class="normal">2</span></pre></div></td><td class="code"><div><pre><span></span><code>'
            'def f(a_b):\n    return a_b\n</code></pre></div></td></tr></table></div></main>')
    assert html_to_markdown(html).markdown == "# T\n\n```python\ndef f(a_b):\n    return a_b\n```\n"


def test_title_prepended_when_no_h1_and_fence_longer_than_backticks():
    md = html_to_markdown("<html><head><title>Doc</title></head><body><main><p>x</p><pre>a ``` b</pre>"
                          "</main></body></html>").markdown
    assert md == "# Doc\n\nx\n\n````\na ``` b\n````\n"


# ---- tables: one converter (pipeline/ingest/fetch/htmltable.py) for HTML pages and HTML blocks in Markdown notes

SIZES = ('<table><thead><tr><th rowspan="2">Name</th><th colspan="2">Size</th></tr><tr><th>min</th><th>max</th>'
         '</tr></thead>\n<tbody><tr><td>a</td><td>1 | 2</td><td>3</td></tr></tbody></table>')


def _gfm_rows(md: str) -> list[int]:
    """Cells per line of the one GFM table in ``md`` (unescaped pipes - 1), after checking that markdown-it's GFM
    table rule reads every ``|`` line as a row of that table."""
    lines = [line for line in md.split("\n") if line.startswith("|")]
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert [t.type for t in tokens].count("table_open") == 1
    assert [t.type for t in tokens].count("tr_open") == len(lines) - 1      # all but the delimiter row
    return [len(re.findall(r"(?<!\\)\|", line)) - 1 for line in lines]


@pytest.mark.parametrize("html, expected", [
    # two header rows (rowspan + colspan) merge per column; a pipe in a cell is escaped
    (SIZES, "| Name | Size min | Size max |\n| --- | --- | --- |\n| a | 1 \\| 2 | 3 |\n"),
    # no <thead>: the leading row of <th> is the header
    ("<table><tr><th>Key</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table>",
     "| Key | Value |\n| --- | --- |\n| a | 1 |\n"),
    # no <th> at all: the first row is the header; a single row stays data under an empty header
    ("<table><tr><td>Product</td><td>Price</td></tr><tr><td>Apple</td><td>1</td></tr></table>",
     "| Product | Price |\n| --- | --- |\n| Apple | 1 |\n"),
    ("<table><tr><td>only</td><td>row</td></tr></table>", "|  |  |\n| --- | --- |\n| only | row |\n"),
    # <th> as row headers (first column): no header row is taken from the data
    ("<table><tr><th>a</th><td>1</td></tr><tr><th>b</th><td>2</td></tr></table>",
     "|  |  |\n| --- | --- |\n| a | 1 |\n| b | 2 |\n"),
    # inline markup in cells; a soft line break is a space, paragraphs and <br> are <br>; a pipe in code escaped
    (('<table><tr><th>Link</th><th>Text</th></tr><tr><td><a href="https://x.org/a">link</a> and <code>x | y</code>'
      "</td><td><p>one\n  line</p><p>two <strong>bold</strong><br>three</p></td></tr></table>"),
     "| Link | Text |\n| --- | --- |\n| [link](https://x.org/a) and `x \\| y` | one line<br>two **bold**<br>three |\n"),
    # empty cells, a short row and a row longer than the header: every row gets the widest row's cells
    (("<table><thead><tr><th>A</th><th>B</th><th>C</th></tr></thead><tbody><tr><td></td><td>x</td></tr>"
      "<tr><td>1</td><td></td><td> </td><td>extra</td></tr></tbody></table>"),
     "| A | B | C |  |\n| --- | --- | --- | --- |\n|  | x |  |  |\n| 1 |  |  | extra |\n"),
    # a caption is a line above; <tfoot> rows come last, also when a footer row equals a body row
    (("<table><caption>Totals <em>2024</em></caption><thead><tr><th>Item</th><th>Cost</th></tr></thead>"
      "<tfoot><tr><td>b</td><td>2</td></tr></tfoot><tbody><tr><td>a</td><td>1</td></tr><tr><td>b</td><td>2</td></tr>"
      "</tbody></table>"),
     "Totals *2024*\n\n| Item | Cost |\n| --- | --- |\n| a | 1 |\n| b | 2 |\n| b | 2 |\n"),
    # a nested table stays inside its cell (its caption is not the outer table's)
    (("<table><tr><th>Outer</th></tr><tr><td><table><caption>inner</caption><tr><td>j</td></tr></table></td></tr>"
      "</table>"),
     "| Outer |\n| --- |\n| inner<br>\\|  \\|<br>\\| --- \\|<br>\\| j \\| |\n"),
], ids=["multi-row-header", "th-row-header", "no-th", "one-row", "row-headers", "inline-markup", "ragged",
        "caption-tfoot", "nested"])
def test_html_page_tables_are_gfm_tables_like_in_markdown_notes(html: str, expected: str):
    md = html_to_markdown(f"<html><body><main><h1>T</h1>{html}</main></body></html>").markdown
    assert md == "# T\n\n" + expected
    assert clean_body("markdown", html + "\n", {}) == expected          # the same table in a Markdown note
    widths = _gfm_rows(md)
    assert len(set(widths)) == 1, widths


def test_local_format_html_table_in_the_note(tmp_path: Path):
    """The reported page of a `format: html` source: one merged header row, the pipe escaped, three cells a row."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sizes.html").write_text(f"<html><body><main><h1>Sizes</h1>{SIZES}</main></body></html>",
                                     encoding="utf-8")
    source = Source(name="site", kind="local", path=(site,), format="html")
    files = fetch_source(source, _settings(tmp_path)).files
    notes = normalize_source(source, files, "2026-01-01T00:00:00+00:00").notes
    assert [n.body for n in notes] == [
        "# Sizes\n\n| Name | Size min | Size max |\n| --- | --- | --- |\n| a | 1 \\| 2 | 3 |\n"]


# ---- crawler on a tiny loopback site

PAGES = {
    "docs/index.html": "<nav><a href='guide/'>Guide</a> <a href='api.html'>API</a> <a href='/outside/'>Out</a>"
                       "<a href='private/x.html'>P</a><a href='logo.png'>img</a><a href='guide/?q=1'>q</a></nav>"
                       "<main><h1>Home</h1><p>Welcome, see <a href='guide/#setup'>the guide</a>.</p></main>",
    "docs/guide/index.html": "<main><h1>Guide</h1><h2 id='setup'>Setup</h2><p>Run <a href='../api.html'>api</a>"
                             "</p></main>",
    "docs/api.html": "<main><h1>API</h1><p>Calls.</p><a href='copy.html'>copy</a></main>",
    "docs/copy.html": "<head><link rel='canonical' href='api.html'></head><main><h1>API</h1><p>Calls.</p></main>",
    "docs/private/x.html": "<main><h1>Private</h1></main>",
    "outside/index.html": "<main><h1>Outside</h1></main>",
    "robots.txt": "User-agent: *\nDisallow: /docs/private/\n",
}


def _site(root: Path) -> Path:
    for rel, text in PAGES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text if rel.endswith(".txt") else f"<html>{text}</html>", encoding="utf-8")
    return root


def test_crawl_scope_robots_canonical_and_incremental(tmp_path):
    site = _site(tmp_path / "site")
    settings = _settings(tmp_path)
    with serve(site) as (base, requests):
        source = Source(name="mini", kind="html", url=f"{base}/docs/", rate_limit=0)
        first = fetch_source(source, settings)
        assert [f.source_path for f in first.files] == ["docs/api.md", "docs/guide/index.md", "docs/index.md"]
        assert [f.url for f in first.files] == [f"{base}/docs/api.html", f"{base}/docs/guide/", f"{base}/docs/"]
        assert first.strategy == "html" and first.changed
        assert any("disallowed by robots.txt" in w for w in first.warnings)
        assert "/outside/" not in requests and "/docs/logo.png" not in requests
        assert first.files[0].path.read_text() == "# API\n\nCalls.\n\n[copy](" + base + "/docs/copy.html)\n"
        assert first.stats["pages"] == 3 and first.stats["bytes"] > 0
        requests.clear()
        again = fetch_source(source, settings)
        assert again.changed is False and again.stats["bytes"] == 0 and again.stats["not_modified"] >= 3
        assert again.revision == first.revision and [f.source_path for f in again.files] == [
            "docs/api.md", "docs/guide/index.md", "docs/index.md"]
        capped = fetch_source(Source(name="cap", kind="html", url=f"{base}/docs/", rate_limit=0, max_pages=1),
                              settings)
        assert len(capped.files) == 1 and any("max_pages=1" in w for w in capped.warnings)
    notes = normalize_source(source, first.files, "2026-01-01T00:00:00+00:00").notes
    home = next(n for n in notes if n.source_path == "docs/index.md")
    assert home.body.startswith("# Home\n")


def test_dead_start_page_fails_and_keeps_last_good_copy(tmp_path):
    site = _site(tmp_path / "site")
    settings = _settings(tmp_path)
    with serve(site) as (base, _):
        source = Source(name="mini", kind="html", url=f"{base}/docs/", rate_limit=0)
        first = fetch_source(source, settings)
        shutil.rmtree(site / "docs")
        with pytest.raises(FetchError, match=rf"^source 'mini': cannot fetch start page {base}/docs/: HTTP 404"):
            fetch_source(source, settings)
    kept = load_fetch_result(source, settings)
    assert kept is not None and kept.files == first.files and all(f.path.is_file() for f in kept.files)


def test_start_page_errors_name_the_configured_url(tmp_path):
    """`url: …/index.html` is crawled as `…/` (normalize_url): an error names the URL as configured, and the one
    requested for it; a URL that normalizes to itself (or only gains the `/` of an empty path) is named alone."""
    import socket

    from pipeline.ingest.fetch.html import fetch_html
    from pipeline.ingest.fetch.http import HttpClient, HttpPolicy

    with socket.socket() as sock:                         # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = f"http://127.0.0.1:{port}"
    for url, named in [(f"{dead}/index.html", f"{dead}/index.html (requested as {dead}/)"),
                       (f"{dead}/docs/index.htm#top", f"{dead}/docs/index.htm#top (requested as {dead}/docs/)"),
                       (dead, dead), (f"{dead}/docs/", f"{dead}/docs/")]:
        source = Source(name="mini", kind="html", url=url, rate_limit=0)
        with pytest.raises(FetchError) as err:                # no retry: no back-off to wait for
            fetch_html(source, _settings(tmp_path), HttpClient("mini", policy=HttpPolicy(rate_limit=0, retries=0)))
        assert str(err.value) == (f"source 'mini': cannot fetch start page {named}: ConnectionError: [Errno 111] "
                                  f"Connection refused (127.0.0.1:{port})")
    site = _site(tmp_path / "site")
    with serve(site) as (base, _):
        shutil.rmtree(site / "docs")
        with pytest.raises(FetchError, match=re.escape(
                f"source 'mini': cannot fetch start page {base}/docs/index.html (requested as {base}/docs/): HTTP 404")):
            fetch_source(Source(name="mini", kind="html", url=f"{base}/docs/index.html", rate_limit=0),
                         _settings(tmp_path))


# ---- integration: the real built sites

@pytest.mark.integration
def test_txtai_site_scraped(tmp_path):
    root = shared_path("corpora", "html-txtai")
    settings = _settings(tmp_path)
    with serve(root) as (base, _):
        source = Source(name="txtai", kind="html", url=f"{base}/", rate_limit=0, site_url=f"{base}/")
        result = fetch_source(source, settings)
        second = fetch_source(source, settings)
    assert second.stats["bytes"] == 0 and second.changed is False
    notes = normalize_source(source, result.files, "2026-01-01T00:00:00+00:00").notes
    assert len(notes) >= 75
    for note in notes:
        first = note.body.lstrip().splitlines()[0]
        assert first.startswith("# "), (note.source_path, first)
    by_path = {n.source_path: n for n in notes}
    raw = {f.source_path: f.path.read_text() for f in result.files}
    summary = raw["pipeline/text/summary/index.md"]
    assert "### `__init__(path=None, quantize=False, gpu=True, batch=64, **kwargs)`" in summary
    assert "Source code in" not in summary and "def __init__(self, path=None" not in summary   # mkdocstrings'
    ann = raw["embeddings/configuration/ann/index.md"]
    assert "```\nhnsw:\n    efconstruction:  ef_construction param for init_index (int) - defaults to 200\n" in ann
    assert "\\_" not in "".join(re.findall(r"```.*?```", ann, re.DOTALL))
    for text in raw.values():
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"(?ms)^(`{3,}).*?^\1", "", text))
        for target in re.findall(r"\]\(([^)\s]+)", prose):
            assert target.startswith(("http://", "https://", "#", "mailto:")), target
    assert "[[txtai/" in by_path["pipeline/text/summary/index.md"].body     # own-site links became vault links


@pytest.mark.integration
def test_jekyllrb_site_scraped(tmp_path):
    root = shared_path("corpora", "html-jekyllrb")
    with serve(root) as (base, _):
        source = Source(name="jekyll", kind="html", url=f"{base}/docs/", rate_limit=0)
        result = fetch_source(source, _settings(tmp_path))
    raw = {f.source_path: f.path.read_text() for f in result.files}
    assert len(raw) >= 50 and all(p.startswith("docs/") for p in raw)
    assert raw["docs/configuration/options/index.md"].startswith("# Configuration Options\n\nThe tables below")


def test_pages_without_containers_use_trafilatura():
    text = "Plain pages without semantic markup still carry real content worth keeping in the vault. " * 3
    html = (f"<html><head><title>Plain</title></head><body><div class='menu'><a href='/'>Home</a></div>"
            f"<div><p>{text}</p></div></body></html>")
    doc = html_to_markdown(html, "http://h/p.html")
    assert doc.extractor == "trafilatura"
    assert doc.markdown.startswith("# Plain\n\nPlain pages without semantic markup")


def test_local_format_html_pages_are_converted_like_crawled_pages(tmp_path: Path):
    """A built HTML site on disk (`kind: local`, `format: html`): every *.html page is taken without an `include`
    and becomes Markdown as the html fetch makes it (no <head>, <script>, navigation); links between pages
    stay vault links."""
    site = tmp_path / "site"
    (site / "guide").mkdir(parents=True)
    page = ('<!doctype html><html><head><title>{t}</title><script>var x = 1;</script>'
            '<style>p {{color: red}}</style></head><body><nav><a href="/">Home</a> menu</nav>'
            '<main><h1>{t}</h1><p>{p}</p></main></body></html>')
    (site / "index.html").write_text(page.format(t="Start", p='Read the <a href="guide/setup.html">setup</a>.'),
                                     encoding="utf-8")
    (site / "guide" / "setup.html").write_text(page.format(t="Setup", p="Install it with <code>pip</code>."),
                                               encoding="utf-8")
    (site / "notes.txt").write_text("not a page", encoding="utf-8")
    source = Source(name="site", kind="local", path=(site,), format="html")
    result = fetch_source(source, _settings(tmp_path))
    assert [f.source_path for f in result.files] == ["guide/setup.html", "index.html"]
    notes = {n.vault_path: n.body for n in normalize_source(source, result.files, "2026-01-01T00:00:00+00:00").notes}
    assert notes == {"site/guide/setup.md": "# Setup\n\nInstall it with `pip`.\n",
                     "site/index.md": "# Start\n\nRead the [[site/guide/setup|setup]].\n"}


def test_local_format_html_page_honours_its_base_href_at_its_site_url(tmp_path: Path):
    """EC-04 for a built HTML site on disk: with `site_url`, the page sits at its URL under it, so its
    `<base href>` (resolved there) is the base of relative links and images; a link to a page of the site that
    was ingested stays a vault link; without `site_url` relative references stay as written."""
    site = tmp_path / "site"
    (site / "v2" / "guide").mkdir(parents=True)
    (site / "v2" / "assets").mkdir(parents=True)
    (site / "v2" / "guide" / "start.html").write_text(
        '<html><head><title>Start</title><base href="../assets/"></head><body><main><h1>Start</h1><p>'
        '<a href="intro.html">Intro</a> <img src="chart.png" alt="Chart"> <a href="/v2/guide/next.html">Next</a>'
        '</p></main></body></html>',
        encoding="utf-8")
    (site / "v2" / "guide" / "next.html").write_text(
        "<html><head><title>Next</title></head><body><main><h1>Next</h1><p>More.</p></main></body></html>",
        encoding="utf-8")
    for site_url, want in (
        ("https://docs.example.org", "# Start\n\n[Intro](https://docs.example.org/v2/assets/intro.html) "
                                     "![Chart](https://docs.example.org/v2/assets/chart.png) [[site/v2/guide/next|Next]]\n"),
        (None, "# Start\n\n[Intro](intro.html) ![Chart](chart.png) [[site/v2/guide/next|Next]]\n"),
    ):
        source = Source(name="site", kind="local", path=(site,), format="html", site_url=site_url)
        result = fetch_source(source, _settings(tmp_path))
        notes = {n.vault_path: n.body for n in normalize_source(source, result.files, "2026-01-01T00:00:00+00:00").notes}
        assert notes["site/v2/guide/start.md"] == want, site_url


def test_local_format_html_redirect_stub_is_no_note(tmp_path: Path):
    """A built site's redirect stub (mkdocs-redirects, jekyll-redirect-from) is left out: its page is the note."""
    site = tmp_path / "site"
    (site / "old").mkdir(parents=True)
    (site / "new.html").write_text("<html><body><main><h1>New</h1><p>Text.</p></main></body></html>",
                                   encoding="utf-8")
    (site / "old" / "index.html").write_text(
        '<!doctype html><html><head><title>Redirecting...</title><link rel="canonical" href="../new.html">'
        '<meta http-equiv="refresh" content="0; url=../new.html"></head>'
        '<body>You\'re being redirected to a <a href="../new.html">new destination</a>.</body></html>',
        encoding="utf-8")
    source = Source(name="site", kind="local", path=(site,), format="html")
    files = fetch_source(source, _settings(tmp_path)).files
    cache: dict = {}
    result = normalize_source(source, files, "2026-01-01T00:00:00+00:00", cache=cache)
    assert [n.source_path for n in result.notes] == ["new.html"]
    assert result.errors == []
    again = normalize_source(source, files, "2026-01-01T00:00:00+00:00", cache=cache)     # from the parse cache
    assert [n.source_path for n in again.notes] == ["new.html"]


def test_local_format_html_link_to_a_redirect_stub_reaches_the_page_it_redirects_to(tmp_path: Path):
    """jekyllrb.com links `/docs/home/`, a jekyll-redirect-from stub sending to `/docs/`: the link became a link
    to the web (`[documentation](https://jekyllrb.com/docs/home/)`); it is now a vault link to the page the stub
    redirects to, its heading kept, at the stub's URL or by a relative link, with and without a cache."""
    site = tmp_path / "site"
    (site / "docs" / "home").mkdir(parents=True)
    (site / "docs" / "index.html").write_text(
        '<html><body><main><h1>Quickstart</h1><h2 id="setup">Set up</h2><p>Text.</p></main></body></html>',
        encoding="utf-8")
    (site / "docs" / "home" / "index.html").write_text(
        '<!DOCTYPE html><html lang="en-US"><meta charset="utf-8"><title>Redirecting&hellip;</title>'
        '<link rel="canonical" href="https://jekyllrb.com/docs/">'
        '<meta http-equiv="refresh" content="0; url=https://jekyllrb.com/docs/">'
        '<h1>Redirecting&hellip;</h1><a href="https://jekyllrb.com/docs/">Click here</a></html>', encoding="utf-8")
    (site / "contributing.html").write_text(
        '<html><body><main><h1>Contributing</h1><p>Read the <a href="/docs/home/">documentation</a>, '
        '<a href="https://jekyllrb.com/docs/home/#setup">its setup</a> and <a href="docs/home/">again</a>; '
        '<a href="/docs/gone/">gone</a>.</p></main></body></html>', encoding="utf-8")
    source = Source(name="site", kind="local", path=(site,), format="html", site_url="https://jekyllrb.com")
    files = fetch_source(source, _settings(tmp_path)).files
    cache: dict = {}
    for _ in range(2):                      # the second time from the parse and link caches
        result = normalize_source(source, files, "2026-01-01T00:00:00+00:00", cache=cache)
        notes = {n.vault_path: n.body for n in result.notes}
        assert notes["site/contributing.md"] == (
            "# Contributing\n\nRead the [[site/docs/index|documentation]], [[site/docs/index#Set up|its setup]] and "
            "[[site/docs/index|again]]; [gone](https://jekyllrb.com/docs/gone/).\n")
        assert sorted(notes) == ["site/contributing.md", "site/docs/index.md"]
        assert [d.target for d in result.dangling] == ["https://jekyllrb.com/docs/gone/"]


def test_local_format_html_site_404_page_is_no_note(tmp_path: Path):
    """A built site's root 404.html ("404 - Not found", jekyllrb.com's "Huh. It seems that page is Hyde-ing...")
    was a note, the first hit for `jekyll 404 page not found`; it is left out. A page named 404 deeper in the
    site (a page about the error) stays."""
    site = tmp_path / "site"
    (site / "errors").mkdir(parents=True)
    for name, title in (("404.html", "404 - Not found"), ("index.html", "Home"), ("errors/404.html", "HTTP 404")):
        (site / name).write_text(f"<html><body><main><h1>{title}</h1><p>Text.</p></main></body></html>",
                                 encoding="utf-8")
    source = Source(name="site", kind="local", path=(site,), format="html")
    result = normalize_source(source, fetch_source(source, _settings(tmp_path)).files, "2026-01-01T00:00:00+00:00")
    assert [n.source_path for n in result.notes] == ["errors/404.html", "index.html"]
    assert result.errors == []


def test_local_format_html_page_that_becomes_a_redirect_stub_leaves_the_vault(tmp_path: Path):
    """A page of a built site that the next version of the site turns into a redirect stub (the page moved), or
    its 404.html, which earlier builds made a note: the normalize stage called them files that "failed to
    normalize" and kept their old notes for good ("serving their last good version: 404.html"); they now leave,
    with no warning. A page that does fail still keeps its last good note."""
    import dataclasses

    from pipeline import stages as b
    from pipeline.common import artifacts

    site = tmp_path / "site"
    site.mkdir()
    page = "<html><body><main><h1>{t}</h1><p>Text.</p></main></body></html>"
    for name in ("old.html", "new.html", "404.html", "bad.html"):
        (site / name).write_text(page.format(t=name[:-5].title()), encoding="utf-8")
    source = Source(name="site", kind="local", path=(site,), format="html")
    settings = _settings(tmp_path)
    b.fetch_stage(settings, source)
    b.normalize_stage(settings, source)
    artifacts.save_notes(settings, "site", [*artifacts.load_notes(settings, "site"),
                                            *[dataclasses.replace(n, source_path="404.html", rel_path="404.md", title="404")
                                              for n in artifacts.load_notes(settings, "site")[:1]]])  # as before
    (site / "old.html").write_text('<html><head><meta http-equiv="refresh" content="0; url=new.html"></head>'
                                   '<body>Redirecting...</body></html>', encoding="utf-8")
    (site / "bad.html").write_bytes(b"\xff\xfe\x00bad")
    b.fetch_stage(settings, source)
    result = b.normalize_stage(settings, source)
    assert sorted(n.source_path for n in artifacts.load_notes(settings, "site")) == ["bad.html", "new.html"]
    assert result.kept_last_good == ("bad.html",)


def test_jekyll_note_boxes_become_callouts():
    """jekyllrb.com's `<div class="note warning"><h5>Title</h5>…</div>` was a `##### Title` heading of the page
    with its paragraphs under it; it is a callout of its kind (`note` when it has none), as mkdocs' admonitions
    are. A `div.note` without a title heading first stays as it was."""
    html = ('<html><body><main><h1>Front Matter</h1><p>Intro.</p>'
            '<div class="note warning">\n  <h5>UTF-8 Warning</h5>\n  <p>No <code>BOM</code>, please.</p>\n</div>'
            '<div class="note">\n  <h5>ProTip™: Use it</h5>\n  <p>One.</p>\n  <p>Two.</p>\n</div>'
            '<div class="note"><p>Plain box.</p></div></main></body></html>')
    assert html_to_markdown(html, "https://jekyllrb.com/docs/front-matter/").markdown == (
        "# Front Matter\n\nIntro.\n\n> [!warning] UTF-8 Warning\n> No `BOM`, please.\n\n"
        "> [!note] ProTip™: Use it\n> One.\n>\n> Two.\n\nPlain box.\n")


def test_heading_anchors_that_are_not_slugs_resolve_to_the_heading(tmp_path: Path):
    """mkdocstrings' <h2 id="a.b.C"> and Sphinx's <section id="sec-9"><h2>: a link to page#anchor names the
    heading (it named `#a.b.C`, no heading of the note); the note's headings show no `{#anchor}`."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "p.html").write_text('<html><body><main><h1>P</h1><h2 id="a.b.C">C(x, y)</h2><p>Text.</p>'
                                 '<section id="sec-9"><h2>Plain Heading</h2><p>More.</p></section>'
                                 '<h2><a name="old-name"></a>Named</h2><p>Old.</p></main></body></html>',
                                 encoding="utf-8")
    (site / "q.html").write_text('<html><body><main><h1>Q</h1><p>See <a href="p.html#a.b.C">C</a>, '
                                 '<a href="p.html#sec-9">sec</a>, <a href="p.html#plain-heading">plain</a> and '
                                 '<a href="p.html#old-name">named</a>.</p></main></body></html>', encoding="utf-8")
    source = Source(name="site", kind="local", path=(site,), format="html")
    files = fetch_source(source, _settings(tmp_path)).files
    result = normalize_source(source, files, "2026-01-01T00:00:00+00:00")
    assert {n.source_path: n.body for n in result.notes} == {
        "p.html": "# P\n\n## C(x, y)\n\nText.\n\n## Plain Heading\n\nMore.\n\n## Named\n\nOld.\n",
        "q.html": "# Q\n\nSee [[site/p#C(x, y)|C]], [[site/p#Plain Heading|sec]], [[site/p#Plain Heading|plain]] "
                  "and [[site/p#Named|named]].\n"}
    assert result.dangling == ()


def test_credentials_in_the_start_url_stay_out_of_notes_and_warnings(tmp_path):
    """Before session 40 a start URL with ``user:password@`` put the password in every note's ``url:`` (the vault
    Obsidian syncs), in each page's absolute links and in the warning lines the build prints; the requests keep
    them."""
    site = _site(tmp_path / "site")
    with serve(site) as (base, _):
        with_creds = base.replace("http://", "http://bob:hunter2@")
        result = fetch_source(Source(name="mini", kind="html", url=f"{with_creds}/docs/", rate_limit=0),
                              _settings(tmp_path))
    assert [f.url for f in result.files] == [f"{base}/docs/api.html", f"{base}/docs/guide/", f"{base}/docs/"]
    assert result.files[0].path.read_text() == "# API\n\nCalls.\n\n[copy](" + base + "/docs/copy.html)\n"
    assert result.warnings and not any("hunter2" in w for w in result.warnings)
    assert not any("hunter2" in f.path.read_text() for f in result.files)


def _nested_page(depth: int) -> str:
    """A page of ``depth`` unclosed ``<div>``s, each opening inside the last (a broken generator's output)."""
    return "<html><body><main><h1>Deep</h1>" + "<div><p>word " * depth + "</main></body></html>"


def test_boilerplate_stripping_does_not_search_subtrees_of_a_deeply_nested_page(monkeypatch):
    """BeautifulSoup's ``decomposed`` falls through to ``Tag.__getattr__`` (a search of the tag's subtree) on a tag
    never decomposed: asked of every element, a page of unclosed <div>s took quadratic time (2,000: 6 s; the
    hostile tester's 200,000 held a fetch for hours). The stripping now reads no attribute through it."""
    from bs4 import BeautifulSoup
    from bs4.element import Tag

    from pipeline.ingest.fetch import htmlmd

    soup = BeautifulSoup(_nested_page(500), "lxml")
    container = htmlmd._pick_container(soup)
    looked_up: list[str] = []
    original = Tag.__getattr__

    def counting(self, name):
        looked_up.append(name)
        return original(self, name)

    monkeypatch.setattr(Tag, "__getattr__", counting)
    htmlmd._strip_boilerplate(container)
    assert looked_up == []
    assert len(container.find_all("div")) == 500                    # nothing of the page's text dropped


def test_a_page_nested_too_deeply_is_skipped_with_a_warning_and_the_site_fetched(tmp_path):
    """Such a page (deeper than the conversion's recursion can go) failed the whole site's fetch with a
    RecursionError; it is one warning now, and the other pages are fetched."""
    site = _site(tmp_path / "site")
    (site / "docs" / "deep.html").write_text(_nested_page(3000), encoding="utf-8")
    index = site / "docs" / "index.html"
    index.write_text(index.read_text(encoding="utf-8").replace("</main>", '<a href="deep.html">deep</a></main>'),
                     encoding="utf-8")
    with serve(site) as (base, _):
        result = fetch_source(Source(name="mini", kind="html", url=f"{base}/docs/", rate_limit=0), _settings(tmp_path))
    assert f"source 'mini': {base}/docs/deep.html: skipped, nested too deeply to convert (thousands of elements " \
           "inside one another, e.g. unclosed <div> tags)" in result.warnings
    assert "docs/index.md" in [f.source_path for f in result.files]
    assert "docs/deep.md" not in [f.source_path for f in result.files]


_LOOP_HOPS = {"/docs/": "/docs/a/", "/docs/a/": "/docs/", "/loop/": "/loop/", "/ok/self/": "/ok/self/"}


class _LoopHandler(ScriptedHandler):
    """/docs/ -> /docs/a/ -> /docs/ (a redirect loop through the start page); /loop/ and /ok/self/ -> themselves;
    /ok/ is a page linking to /ok/self/."""

    content_type = "text/html"

    def do_GET(self) -> None:
        if self.path in _LOOP_HOPS:
            return self._send(302, Location=_LOOP_HOPS[self.path])
        if self.path == "/ok/":
            return self._send(200, b'<html><main><h1>Ok</h1><p><a href="/ok/self/">self</a></p></main></html>')
        return self._send(404, b"nope")


def test_redirect_loop_is_named_as_one(tmp_path):
    """A start page that redirects back to itself (directly or through another page) is a redirect loop, said so;
    it was "start page … is of unknown type, not HTML". A linked page that does so is a page not fetched."""
    with serve(handler=_LoopHandler) as (base, _):
        for url in (f"{base}/docs/", f"{base}/loop/"):
            with pytest.raises(FetchError) as err:
                fetch_source(Source(name="mini", kind="html", url=url, rate_limit=0), _settings(tmp_path))
            assert str(err.value) == (f"source 'mini': start page {url} redirects back to itself (a redirect loop): "
                                      "fix the site's redirects, or set url: to the page they should end at")
        got = fetch_source(Source(name="ok", kind="html", url=f"{base}/ok/", rate_limit=0), _settings(tmp_path))
    assert [f.source_path for f in got.files] == ["ok/index.md"]
    assert f"source 'ok': cannot fetch {base}/ok/self/: redirect loop (its redirects lead back to it)" in got.warnings


class _TwinHandler(ScriptedHandler):
    """/docs/ links to page, page/ and other/ and other; /docs/page and /docs/page/ answer the same HTML without a
    redirect; /docs/other and /docs/other/ answer different HTML."""

    content_type = "text/html"

    def do_GET(self) -> None:
        bodies = {"/docs/": '<main><h1>Home</h1><a href="page">a</a> <a href="page/">b</a> <a href="other/">c</a>'
                            ' <a href="other">d</a></main>',
                  "/docs/page": "<main><h1>Page</h1><p>Same text.</p></main>",
                  "/docs/page/": "<main><h1>Page</h1><p>Same text.</p></main>",
                  "/docs/other/": "<main><h1>Other</h1><p>One text.</p></main>",
                  "/docs/other": "<main><h1>Other</h1><p>Another text.</p></main>"}
        if self.path in bodies:
            return self._send(200, f"<html>{bodies[self.path]}</html>".encode(), Last_Modified="Mon, 01 Jan 2024 "
                              "00:00:00 GMT")
        return self._send(404, b"nope")


def test_page_served_under_both_spellings_is_one_note(tmp_path):
    """`/page` and `/page/` answered alike without a redirect are one page (the first crawled), on the first crawl
    and on a re-crawl; two spellings with different text stay two pages."""
    settings = _settings(tmp_path)
    with serve(handler=_TwinHandler) as (base, _):
        source = Source(name="twins", kind="html", url=f"{base}/docs/", rate_limit=0)
        first = fetch_source(source, settings)
        again = fetch_source(source, settings)
    want = ["docs/index.md", "docs/other.md", "docs/other/index.md", "docs/page.md"]
    assert [f.source_path for f in first.files] == want
    assert [f.source_path for f in again.files] == want and again.revision == first.revision


def test_a_redirect_loop_is_named_as_one(tmp_path):
    """/docs/a -> /docs/b -> /docs/a was reported as `skipped, content type unknown is not HTML` (the crawler
    declines a redirect to a page it has seen, itself included, and then read the empty 302 as a page; found by
    the s42 hostile tester). It is a redirect loop, named so, and the build lists it among the pages not fetched."""
    from tests.loopback import ScriptedHandler

    class Loop(ScriptedHandler):
        def do_GET(self) -> None:
            if self.path == "/docs/":
                self._send(200, b'<html><main><h1>Home</h1><p>Hi.</p><a href="a">a</a></main></html>', "text/html")
            else:
                self._send(302, b"", "text/html", Location="/docs/b" if self.path == "/docs/a" else "/docs/a")

    with serve(handler=Loop) as (base, _):
        result = fetch_source(Source(name="mini", kind="html", url=f"{base}/docs/", rate_limit=0), _settings(tmp_path))
    assert [f.source_path for f in result.files] == ["docs/index.md"]
    assert result.warnings == ((f"source 'mini': cannot fetch {base}/docs/a: redirect loop (its redirects lead "
                                "back to it)"),)
    from types import SimpleNamespace

    from pipeline.service import pages_not_fetched_line
    st = SimpleNamespace(name="mini", metadata={"raw_docs": {"warning_lines": list(result.warnings), "warnings": 1}})
    assert pages_not_fetched_line(st) == f"mini: 1 page(s) not fetched (redirect loop (its redirects lead back to " \
                                         f"it): {base}/docs/a)"
