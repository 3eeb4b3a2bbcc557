"""Normalize: exact in -> out pairs per format, frontmatter merge, links, code protection, rel_paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.ingest.normalize import (
    assign_rel_paths,
    clean_body,
    guess_format,
    normalize_source,
    rel_path_for,
    split_code,
)
from pipeline.models import RawFile, Source, text_hash

FETCHED = "2026-01-02T03:04:05+00:00"
CORPORA = Path("/work/shared/corpora")


def _norm(tmp_path: Path, files: dict[str, str | bytes], **source_kw):
    """Write files under tmp_path/src and normalize them as one source ("demo" unless given)."""
    root = tmp_path / "src"
    raws = []
    for sp, content in files.items():
        path = root / sp
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        raws.append(RawFile(source=source_kw.get("name", "demo"), source_path=sp, path=path))
    source = Source(**{"name": "demo", "kind": "local", **source_kw})
    return normalize_source(source, raws, FETCHED)


def _body(tmp_path: Path, fmt: str, text: str, **kw) -> str:
    result = _norm(tmp_path, {"page.md": text}, format=fmt, **kw)
    assert result.errors == []
    return result.notes[0].body


# ---- frontmatter / metadata ----

def test_frontmatter_merge_and_keys(tmp_path):
    text = "---\ntitle: Guide\naliases: [G]\ndescription: About it\ntags: [a]\ncustom: 1\n---\n# Heading\n\nBody.\n"
    result = _norm(tmp_path, {"docs/guide.md": text}, format="markdown", site_url="https://ex.org/docs/",
                   paths=("docs",))
    note = result.notes[0]
    assert note.title == "Guide"
    assert note.rel_path == "docs/guide.md"
    assert note.body == "# Heading\n\nBody.\n"
    assert note.frontmatter == {
        "title": "Guide", "aliases": ["G"], "description": "About it", "tags": ["a"], "custom": 1,
        "source": "demo", "source_path": "docs/guide.md", "url": "https://ex.org/docs/guide",
        "content_hash": text_hash("# Heading\n\nBody.\n"), "fetched_at": FETCHED,
    }
    assert next(iter(note.frontmatter)) == "title"


def test_title_fallbacks_and_no_url_without_site(tmp_path):
    result = _norm(tmp_path, {"a/First.md": "Intro\n\n# The H1\n", "b/Stem name.mdx": "no heading\n"},
                   format="markdown")
    assert [n.title for n in result.notes] == ["The H1", "Stem name"]
    assert all("url" not in n.frontmatter for n in result.notes)
    assert [n.rel_path for n in result.notes] == ["a/First.md", "b/Stem name.md"]


def test_index_page_url(tmp_path):
    result = _norm(tmp_path, {"docs/v3/index.mdx": "# Home\n", "docs/v3/guide/index.mdx": "# G\n"},
                   format="mdx", site_url="https://docs.ex.io/v3", paths=("docs/v3",))
    assert [n.frontmatter["url"] for n in result.notes] == ["https://docs.ex.io/v3/guide/",
                                                            "https://docs.ex.io/v3/"]


def test_ec12_crlf_bytes_same_note_as_lf(tmp_path):
    crlf = b"---\r\ntitle: Guide\r\ntags:\r\n  - a\r\n---\r\n# Start\r\nline one\r\n"
    a = _norm(tmp_path / "a", {"n.md": crlf}, format="obsidian").notes[0]
    b = _norm(tmp_path / "b", {"n.md": crlf.replace(b"\r\n", b"\n")}, format="obsidian").notes[0]
    assert a.frontmatter["tags"] == ["a"] and a.title == "Guide"
    assert a.body == "# Start\nline one\n"
    assert (a.frontmatter, a.body) == (b.frontmatter, b.body)
    assert "\r" not in repr(a)


def test_ec11_dates_in_note_frontmatter(tmp_path):
    text = "---\ncreated: 2026-04-05\nupdated: 2026-04-06T09:30:00\ndue: \"2026-05-01\"\n---\n# Note\n"
    fm = _norm(tmp_path, {"n.md": text}, format="obsidian").notes[0].frontmatter
    assert (fm["created"], fm["updated"], fm["due"]) == ("2026-04-05", "2026-04-06T09:30:00", "2026-05-01")


def test_errors_skip_file_and_keep_others(tmp_path):
    result = _norm(tmp_path, {
        "bad-utf8.md": b"\xff\xfe bad",
        "bin.md": b"\x89PNG\x00\x00",
        "bad-yaml.md": "---\ntitle: [x\n---\nbody\n",
        "good.md": "# Good\n",
    }, format="markdown")
    assert [n.source_path for n in result.notes] == ["good.md"]
    assert len(result.errors) == 3
    assert result.errors[0].startswith("source 'demo': bad-utf8.md: not valid UTF-8")
    assert result.errors[1].startswith("source 'demo': bad-yaml.md: line ")
    assert result.errors[2].startswith("source 'demo': bin.md: binary file")


def test_guess_format():
    assert guess_format("a.mdx", {}, "") == "mdx"
    assert guess_format("a.md", {"layout": "docu"}, "") == "jekyll"
    assert guess_format("a.md", {}, "see {% link x.md %}") == "jekyll"
    assert guess_format("a.md", {}, "<!--Copyright 2025 HF-->\n# x") == "docbuilder"
    assert guess_format("a.md", {}, "[[autodoc]] X") == "docbuilder"
    assert guess_format("a.md", {}, "# plain") == "markdown"
    # MDX kept in .md files (react.dev): a JSX comment or a component tag alone on its line, outside code
    assert guess_format("a.md", {}, "## Usage {/*usage*/}\n\ntext\n") == "mdx"
    assert guess_format("a.md", {}, "<Intro>\n\nReact lets you...\n\n</Intro>\n") == "mdx"
    assert guess_format("a.md", {}, "text\n\n<Sandpack />\n") == "mdx"
    assert guess_format("a.md", {}, "```jsx\n<App>\n  {/* a comment */}\n</App>\n```\n") == "markdown"
    assert guess_format("a.md", {}, "<details>\n<summary>More</summary>\n</details>\n") == "markdown"


def test_mdx_in_a_md_file_is_cleaned_without_a_format(tmp_path):
    text = "---\ntitle: useState\n---\n<Intro>\n\n`useState` adds state.\n\n</Intro>\n\n## Usage {/*usage*/}\n\nCall it.\n"
    guessed = _norm(tmp_path / "auto", {"page.md": text})
    configured = _norm(tmp_path / "mdx", {"page.md": text}, format="mdx")
    assert guessed.errors == [] and guessed.notes[0].body == configured.notes[0].body
    assert "{/*" not in guessed.notes[0].body and "<Intro>" not in guessed.notes[0].body


def test_deterministic_order(tmp_path):
    files = {"b.md": "# B\n", "a/z.md": "# Z\n", "a.md": "# A\n"}
    r1 = _norm(tmp_path / "1", files, format="markdown")
    r2 = _norm(tmp_path / "2", dict(reversed(list(files.items()))), format="markdown")
    assert [n.source_path for n in r1.notes] == ["a.md", "a/z.md", "b.md"]
    assert [(n.rel_path, n.body) for n in r1.notes] == [(n.rel_path, n.body) for n in r2.notes]


# ---- obsidian ----

def test_obsidian_body_kept(tmp_path):
    text = ("# Note\n\nSee [[Other#Head|alias]] and ![[img.png]].\n\n> [!tip] Title\n> text\n\n"
            "[md](Other.md)\n")
    assert _body(tmp_path, "obsidian", text) == text



def test_obsidian_note_keeps_its_html(tmp_path):
    """An Obsidian power user's finding (session 46): a note's `<details>` became two plain paragraphs, a YouTube
    `<iframe>` the link `[iframe](https://…)` and `<span style="color:red">` bare text in the built vault, though
    Obsidian renders that HTML: an Obsidian note keeps it as written."""
    text = ('# HTML bits\n\nSome <span style="color:red">red warning</span> and <u>underlined</u> words.\n\n'
            "<details>\n<summary>Spoiler</summary>\n\nThe heron did it.\n\n</details>\n\n"
            '<iframe width="560" src="https://www.youtube.com/embed/x"></iframe>\n\n<center>Lynx</center>\n\n'
            "Line one<br>line two\n")
    assert _body(tmp_path, "obsidian", text) == text
    assert _body(tmp_path / "md", "markdown", text) == (
        "# HTML bits\n\nSome red warning and <u>underlined</u> words.\n\nSpoiler\n\nThe heron did it.\n\n"
        "[iframe](https://www.youtube.com/embed/x)\n\nLynx\n\nLine one  \nline two\n")


# ---- mdx ----

MDX_IN = '''import { HELM } from "/snippets/helm.mdx"
import {
  A,
  B,
} from "./x"
export const meta = {
  a: 1,
}

## Install {/*install*/}

<Note>
Use **uv**.
</Note>

<Tip>Short tip.</Tip>

<Tabs>
  <Tab title="uv">

    {/* pmd-metadata: notest */}
    ```bash
    import this
    export X=1
    ```
  </Tab>
  <Tab title="pip">
    Run `<Note>` here.
  </Tab>
</Tabs>

## Next {#next-steps}

<CardGroup cols={2}>
  <Card title="Flows" icon="x" href="https://ex.org/flows">
    Learn flows.
  </Card>
</CardGroup>

<DeepDive>

#### Why?

Do not <CodeStep step={1}>mutate</CodeStep> state.

</DeepDive>

<Steps>
  <Step title="Login">
    Log in.
  </Step>
</Steps>

<Accordion title="More">
Hidden text.
</Accordion>

<Intro>
Intro text.
</Intro>

<HELM />
<img src="https://ex.org/a.png" alt="A" style={{margin: 0}} />
'''

MDX_OUT = '''## Install

> [!note]
> Use **uv**.

> [!tip]
> Short tip.

### uv

```bash
import this
export X=1
```

### pip

Run `<Note>` here.

## Next

[Flows](https://ex.org/flows)

Learn flows.

> [!example]
> #### Why?
>
> Do not mutate state.

### Login

Log in.

### More

Hidden text.

> [!abstract]
> Intro text.

![A](https://ex.org/a.png)
'''


def test_mdx_exact(tmp_path):
    assert _body(tmp_path, "mdx", MDX_IN) == MDX_OUT


def test_mdx_no_import_export_outside_fences(tmp_path):
    body = _body(tmp_path, "mdx", MDX_IN)
    for is_code, chunk in split_code(body):
        if not is_code:
            assert not re.search(r"^(import|export)\s", chunk, re.MULTILINE)


def test_mdx_other_callouts_and_sandpack(tmp_path):
    text = ("<Warning>\nW\n</Warning>\n\n<Info>\nI\n</Info>\n\n<Check>\nC\n</Check>\n\n<Pitfall>\nP\n</Pitfall>\n\n"
            "<Danger>\nD\n</Danger>\n\n<Callout>\nX\n</Callout>\n\n<Sandpack>\n\n```js src/App.js\n"
            "export default function App() { return <Note />; }\n```\n\n</Sandpack>\n")
    assert _body(tmp_path, "mdx", text) == (
        "> [!warning]\n> W\n\n> [!info]\n> I\n\n> [!success]\n> C\n\n> [!warning]\n> P\n\n> [!danger]\n> D\n\n"
        "> [!note]\n> X\n\n```js src/App.js\nexport default function App() { return <Note />; }\n```\n"
    )



def test_mdx_components_inside_inline_code_are_code(tmp_path):
    # inline code is never changed: a component tag in a code span is the code's text, not a component
    text = ("Use `{cond ? <A /> : <B />}` or `{cond && <A />}`.\n\n<Note>\nSee `isPlatypus && <Egg />` here.\n"
            "</Note>\n\nA real one: <A /> drops.\n")
    assert _body(tmp_path, "mdx", text) == (
        "Use `{cond ? <A /> : <B />}` or `{cond && <A />}`.\n\n> [!note]\n> See `isPlatypus && <Egg />` here.\n\n"
        "A real one:  drops.\n")


# ---- jekyll ----

JEKYLL_IN = '''See [`PIVOT`]({% link docs/stable/pivot.md %}#pivot-syntax) and [post]({% post_url 2024-02-13-announcing-duckdb-0100 %}).
Version {{ site.current_duckdb_version }} of {{ page.title }}.
`try_cast(x)`{:.language-sql .highlight} works.
{: .note }
{% include iframe.html src="https://shell.duckdb.org" %}

> Warning Be careful.

{% raw %}
```go
x := "{{ site.keep }}" // {% link keep.md %}
```
{% endraw %}
'''

JEKYLL_OUT = '''See [[demo/docs/stable/pivot#Simplified PIVOT Syntax|`PIVOT`]] and [post](https://duckdb.org/2024/02/13/announcing-duckdb-0100.html).
Version  of Guide.
`try_cast(x)` works.

> [!warning]
> Be careful.

```go
x := "{{ site.keep }}" // {% link keep.md %}
```
'''


def test_jekyll_exact(tmp_path):
    result = _norm(tmp_path, {
        "docs/stable/guide.md": "---\ntitle: Guide\nlayout: docu\n---\n" + JEKYLL_IN,
        "docs/stable/pivot.md": "---\ntitle: PIVOT\n---\n## Simplified PIVOT Syntax {#pivot-syntax}\n",
    }, format="jekyll", site_url="https://duckdb.org/docs/stable/", paths=("docs/stable",))
    assert result.errors == []
    guide = result.notes[0]
    assert guide.body == JEKYLL_OUT
    assert guide.frontmatter["layout"] == "docu"
    assert result.notes[1].body == "## Simplified PIVOT Syntax\n"


# ---- docbuilder ----

DOCBUILDER_IN = '''<!--Copyright 2025 The HuggingFace Team. All rights reserved.

Licensed under the Apache License.
-->

[[open-in-colab]]

# Loading

## Inference[[python-inference]]

[[autodoc]] ConfigMixin
	- load_config
	- from_config

Use [`~DiffusionPipeline.from_pretrained`] or [`DiffusionPipeline`].

<Tip warning={true}>

Careful.

</Tip>

<Tip>

Hint.

</Tip>

<hfoptions id="install">
<hfoption id="PyPI">

```bash
pip install x
```

</hfoption>
<hfoption id="source">

Build it.

</hfoption>
</hfoptions>
'''

DOCBUILDER_OUT = '''# Loading

## Inference

API reference: `ConfigMixin`

- `load_config`
- `from_config`

Use `from_pretrained` or `DiffusionPipeline`.

> [!warning]
> Careful.

> [!tip]
> Hint.

### PyPI

```bash
pip install x
```

### source

Build it.
'''


def test_docbuilder_exact(tmp_path):
    result = _norm(tmp_path, {"loading.md": DOCBUILDER_IN}, format="docbuilder")
    assert result.notes[0].body == DOCBUILDER_OUT
    assert result.notes[0].title == "Loading"


# ---- code is never rewritten ----

CODE_BODY = '''Text [a](b.md) `[x](b.md)` `{% link b.md %}`

```python
import os
[y](b.md) {% raw %} {/* c */} <Note>x</Note> [[autodoc]] X
```

~~~~
```
<Tip>inner</Tip> {{ site.x }}
```
~~~~

````md
```
export A=1
```
````
'''


@pytest.mark.parametrize("fmt", ["markdown", "mdx", "jekyll", "docbuilder"])
def test_fences_and_inline_code_untouched(tmp_path, fmt):
    result = _norm(tmp_path, {"a.md": CODE_BODY, "b.md": "# B\n"}, format=fmt)
    body = result.notes[0].body
    assert body.startswith("Text [[demo/b|a]] `[x](b.md)` `{% link b.md %}`\n")
    assert body.endswith(CODE_BODY.split("\n", 1)[1])


# ---- links ----

def test_links_to_wikilinks(tmp_path):
    files = {
        "docs/guide/start.md": (
            "[rel](../api/ref.md#the-ref) [noext](../api/ref) [dot](./other) [mdx](sub/deep.mdx)\n"
            "[abs](/docs/api/ref) [site](https://ex.org/docs/api/ref#x) [folder](../api/)\n"
            "[ext](https://other.org/x) [mail](mailto:a@b.c) [frag](#local) ![img](../api/ref.md)\n"
            "[missing](/docs/none) [missing-rel](none.md)\n\n"
            "| Page | Why |\n| --- | --- |\n| [Ref](../api/ref.md#the-ref) | first |\n"
        ),
        "docs/guide/other.md": "# Other\n",
        "docs/guide/sub/deep.mdx": "# Deep\n",
        "docs/api/ref.md": "# Ref\n\n## The Ref\n",
        "docs/api/index.md": "# API\n",
    }
    result = _norm(tmp_path, files, format="markdown", site_url="https://ex.org/docs", paths=("docs",))
    start = next(n for n in result.notes if n.source_path == "docs/guide/start.md")
    assert start.body == (
        "[[demo/docs/api/ref#The Ref|rel]] [[demo/docs/api/ref|noext]] [[demo/docs/guide/other|dot]] "
        "[[demo/docs/guide/sub/deep|mdx]]\n"
        "[[demo/docs/api/ref|abs]] [[demo/docs/api/ref#x|site]] [[demo/docs/api/index|folder]]\n"
        "[ext](https://other.org/x) [mail](mailto:a@b.c) [frag](#local) ![img](../api/ref.md)\n"
        "[missing](https://ex.org/docs/none) [missing-rel](https://ex.org/docs/guide/none.md)\n\n"
        "| Page | Why |\n| --- | --- |\n| [[demo/docs/api/ref#The Ref\\|Ref]] | first |\n"
    )


def test_a_link_to_a_heading_of_the_same_page_becomes_a_heading_wikilink(tmp_path):
    """A new user's finding: duckdb's 1,728 in-page links such as `[structs](#creating-structs)` stayed Markdown
    links to a slug, which Obsidian follows to no heading. One whose anchor names a heading of the page (its slug or
    explicit id) is `[[#Heading|text]]`, in a table with `\\|`, inline code kept; one naming no heading stays."""
    body = _body(tmp_path, "jekyll", (
        "See [structs](#creating-structs), [the `sha256` function](#sha256string), [by id](#opts) and "
        "[gone](#nowhere).\n\n| Name | Why |\n| --- | --- |\n| [`sha256(string)`](#sha256string) | hash |\n\n"
        "## Creating Structs\n\n#### `sha256(string)`\n\n## Options {#opts}\n\n`[code](#creating-structs)`\n"))
    assert body.split("\n\n## Creating")[0] == (
        "See [[#Creating Structs|structs]], [[#`sha256(string)`|the `sha256` function]], [[#Options|by id]] and "
        "[gone](#nowhere).\n\n| Name | Why |\n| --- | --- |\n| [[#`sha256(string)`\\|`sha256(string)`]] | hash |")
    assert body.endswith("\n`[code](#creating-structs)`\n")


def test_a_link_whose_text_wraps_onto_the_next_line_is_converted(tmp_path):
    """A reviewer's finding: links were looked for line by line, so in hard-wrapped prose `[installation\nguide](b.md)`
    (a link in CommonMark and Obsidian: the break is a soft one) stayed a Markdown link to the source's file name
    (prefect's `.mdx` pages have four), no edge of the graph and no dangling link either. Its text may now go on over
    one line break, not into a blank line, a list item or a table row."""
    files = {
        "a.md": ("Read the [installation\nguide](b.md#setup) first, or [the\n`cli`\nreference](b.md).\n\n"
                 "[not\n\na link](b.md) [not\n- an item](b.md)\n\n"
                 "[gone\npage](none.md)\n\n| a | b |\n|---|---|\n| [x](b.md) | [y\n| z](b.md) |\n"),
        "b.md": "# B\n\n## Setup\n",
    }
    result = _norm(tmp_path, files, format="markdown")
    a = next(n for n in result.notes if n.source_path == "a.md")
    assert a.body == (
        "Read the [[demo/b#Setup|installation guide]] first, or [[demo/b|the `cli` reference]].\n\n"
        "[not\n\na link](b.md) [not\n- an item](b.md)\n\n"
        "[gone\npage](none.md)\n\n| a | b |\n|---|---|\n| [[demo/b\\|x]] | [y\n| z](b.md) |\n")
    assert [d.target for d in result.dangling] == ["none.md"]


def test_a_wikilink_in_a_table_inside_a_callout_escapes_its_pipe(tmp_path):
    """A reviewer's finding: a table row's wikilink gets `\\|` (an unescaped pipe ends the cell in Obsidian), but a
    table inside a blockquote or callout (an MDX `<Note>` around a table, `> | a | b |`) was not seen as one, so
    `[[demo/b|Ref]]` split its row in two cells. Rows behind `>` markers are table rows too."""
    files = {"a.mdx": ("# A\n\n<Note>\n\n| Page | Why |\n| --- | --- |\n| [Ref](b.mdx) | first |\n\n</Note>\n\n"
                       "> | x | y |\n> |---|---|\n> | [[b|bee]] | [c](b.mdx) |\n>\n> [d](b.mdx) after it\n"),
             "b.mdx": "# B\n"}
    a = next(n for n in _norm(tmp_path, files, format="mdx").notes if n.source_path == "a.mdx")
    assert a.body == ("# A\n\n> [!note]\n> | Page | Why |\n> | --- | --- |\n> | [[demo/b\\|Ref]] | first |\n\n"
                      "> | x | y |\n> |---|---|\n> | [[b\\|bee]] | [[demo/b\\|c]] |\n>\n> [[demo/b|d]] after it\n")


def test_a_line_with_a_pipe_over_a_rule_is_no_table_row():
    """A reviewer's finding: a line holding `|` over a `---` line was read as a table's header (ja-react's hooks page:
    a list item linking `[[…|`useEffectEvent`]]` above a rule), so its wikilink got a table's `\\|` outside any
    table. A delimiter row has a `|` (GFM); a bare `---` is a rule or a setext underline."""
    from pipeline.ingest.normalize import escape_table_wikilinks

    assert escape_table_wikilinks("- [[a|b]] item\n---\n") == "- [[a|b]] item\n---\n"
    assert escape_table_wikilinks("See [[x|y]] | b\n---\n") == "See [[x|y]] | b\n---\n"
    assert escape_table_wikilinks("| a |\n| --- |\n| [[x|y]] |\n") == "| a |\n| --- |\n| [[x\\|y]] |\n"
    assert escape_table_wikilinks("a | b\n--- | ---\n[[x|y]] | c\n") == "a | b\n--- | ---\n[[x\\|y]] | c\n"


def test_unresolvable_links_kept_without_site_url(tmp_path):
    body = _body(tmp_path, "markdown", "[a](/x/y) [b](../up.md) [c](nope.md)\n")
    assert body == "[a](/x/y) [b](../up.md) [c](nope.md)\n"


def test_site_absolute_suffix_match(tmp_path):
    result = _norm(tmp_path, {"src/content/learn/a.md": "[b](/learn/b) [r](/reference/b)\n",
                              "src/content/learn/b.md": "# B\n", "src/content/reference/b.md": "# RB\n"},
                   format="mdx")
    assert result.notes[0].body == "[[demo/src/content/learn/b|b]] [[demo/src/content/reference/b|r]]\n"


# ---- rel paths ----

def test_rel_path_sanitizing():
    assert rel_path_for("docs/a.mdx") == "docs/a.md"
    assert rel_path_for("docs/a.markdown") == "docs/a.md"
    assert rel_path_for('we*ird/na:me|x?"<>#^[1].md') == "we-ird/na-me-x-------1-.md"
    assert rel_path_for("dots./trail .md") == "dots/trail.md"
    assert rel_path_for("a/.../b.md") == "a/_/b.md"
    assert rel_path_for("tab\there.md") == "tab-here.md"
    assert rel_path_for("CON.md") == "CON_.md"
    assert rel_path_for("cafe\u0301.md") == "caf\u00e9.md"


def test_rel_path_collisions():
    got = assign_rel_paths(["a/x.mdx", "a/x.md", "a/X.md", "a/x?.md", "a/x*.md"])
    assert got == {"a/X.md": "a/X.md", "a/x*.md": "a/x-.md", "a/x.md": "a/x (2).md", "a/x.mdx": "a/x (3).md",
                   "a/x?.md": "a/x- (2).md"}
    # the file that has the name keeps it; a name the vault had to change yields, whatever the order
    assert assign_rel_paths(["c/x#1.md", "c/x-1.md", "c/x-1 (2).md"]) == {
        "c/x-1.md": "c/x-1.md", "c/x-1 (2).md": "c/x-1 (2).md", "c/x#1.md": "c/x-1 (3).md"}


def test_a_renamed_clash_is_one_warning_line_naming_both_files(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                                  ) -> None:
    with caplog.at_level("WARNING", logger="pipeline.ingest.normalize"):
        result = _norm(tmp_path, {"a-b.md": "one", "a#b.md": "two", "Notes/X.md": "three", "notes/x.md": "four",
                                  "y.md": "five"})
    assert sorted(n.rel_path for n in result.notes) == ["Notes/X.md", "a-b (2).md", "a-b.md", "notes/x (2).md",
                                                        "y.md"]
    assert [r.getMessage() for r in caplog.records] == [
        "source 'demo': a#b.md is written as 'a-b (2).md': its vault name 'a-b.md' is taken by a-b.md (vault names "
        "ignore case and replace characters such as #); rename one of the two to keep both names",
        "source 'demo': notes/x.md is written as 'notes/x (2).md': its vault name 'notes/x.md' is taken by "
        "Notes/X.md (vault names ignore case and replace characters such as #); rename one of the two to keep both "
        "names"]


def test_more_renamed_files_than_lines_are_counted() -> None:
    from pipeline.ingest.normalize import RENAMED_LINES, renamed_lines

    paths = assign_rel_paths([f"p{i}.md" for i in range(8)] + [f"P{i}.md" for i in range(8)])
    lines = renamed_lines("demo", paths)
    assert len(lines) == RENAMED_LINES + 1 and lines[-1] == "source 'demo': 3 more files renamed the same way"


def test_a_file_whose_name_holds_a_hash_is_named_once_with_its_vault_name_and_why() -> None:
    """Finding of an Obsidian note-taker: ``料理 レシピ 🍜 #1 ＡＢＣ.md`` was written as ``… -1 ….md`` without a
    word, and ``[[料理 レシピ 🍜 #1 ＡＢＣ]]`` (heading ``1 ＡＢＣ`` of note ``料理 レシピ 🍜``) never reached it. One
    line per such file; a folder's ``#`` does not count (``[[Note]]`` reaches ``a#b/Note.md``)."""
    from pipeline.ingest.normalize import RENAMED_LINES, unlinkable_lines

    paths = assign_rel_paths(["料理 レシピ 🍜 #1 ＡＢＣ.md", "a#b/Note.md", "x|y.md", "Board #2.canvas",
                              "plain.md"])
    assert unlinkable_lines("me", paths) == [
        "source 'me': Board #2.canvas is written as 'Board -2.canvas.md': a name Obsidian can link cannot "
        "hold '#' (Obsidian reads [[Board #2.canvas]] as heading '2.canvas' of note 'Board'), so no [[…]] "
        "link reaches this note by its name; rename the file without '#' to link to it",
        "source 'me': x|y.md is written as 'x-y.md': a name Obsidian can link cannot hold '|' (Obsidian "
        "reads '|' in a link as the start of the link's text), so no [[…]] link reaches this note by its "
        "name; rename the file without '|' to link to it",
        "source 'me': 料理 レシピ 🍜 #1 ＡＢＣ.md is written as '料理 レシピ 🍜 -1 ＡＢＣ.md': a name Obsidian "
        "can link cannot hold '#' (Obsidian reads [[料理 レシピ 🍜 #1 ＡＢＣ]] as heading '1 ＡＢＣ' of note "
        "'料理 レシピ 🍜'), so no [[…]] link reaches this note by its name; rename the file without '#' to link "
        "to it"]
    lines = unlinkable_lines("me", assign_rel_paths([f"n#{i}.md" for i in range(RENAMED_LINES + 2)]))
    assert len(lines) == RENAMED_LINES + 1
    assert lines[-1] == "source 'me': … and 2 more files whose name holds # ^ | [ ], renamed the same way"

def test_clean_body_passthrough_markdown():
    assert clean_body("markdown", "# T\n{% x %}\n", {}) == "# T\n{% x %}\n"


# ---- real corpora ----

def _corpus(name: str, root: str, fmt: str, **kw):
    base = CORPORA / name
    files = [RawFile(name, p.relative_to(base).as_posix(), p)
             for p in sorted((base / root).rglob("*")) if p.is_file() and p.suffix in (".md", ".mdx")]
    return normalize_source(Source(name=name, kind="git", url="file:///x", format=fmt, paths=(root,), **kw),
                            files, FETCHED)


def _prose_lines(body: str):
    for is_code, chunk in split_code(body):
        if not is_code:
            yield from chunk.split("\n")


@pytest.mark.integration
@pytest.mark.skipif(not CORPORA.exists(), reason="corpora not available")
@pytest.mark.parametrize("name, root, fmt, count", [
    ("obsidian-help", "en", "obsidian", 173),
    ("duckdb", "docs/stable", "jekyll", 378),
    ("prefect", "docs/v3", "mdx", 781),
    ("diffusers", "docs/source/en", "docbuilder", 377),
    ("ja-react", "src/content", "mdx", 222),
])
def test_integration_real_corpora(name, root, fmt, count):
    result = _corpus(name, root, fmt)
    assert result.errors == []
    assert len(result.notes) == count
    assert len({n.rel_path.casefold() for n in result.notes}) == count
    for note in result.notes:
        assert "\r" not in note.body and note.title
        lines = list(_prose_lines(note.body))
        if fmt == "mdx":
            assert not any(re.match(r"^(import|export)\s", ln) for ln in lines), note.source_path
            assert not any("{/*" in ln for ln in lines), note.source_path
        if fmt == "jekyll":
            assert not any("{%" in ln for ln in lines), note.source_path
        if fmt == "docbuilder":
            assert "<!--Copyright" not in note.body and "[[autodoc]]" not in note.body
    if fmt != "obsidian":
        assert sum(n.body.count(f"[[{name}/") for n in result.notes) > 100


# ---- issue 4: key order, site links, dangling report, canvas ----

def test_frontmatter_key_order(tmp_path):
    text = "---\ncustom: 1\ntags: [a]\ntitle: T\nurl: old\ndate: 2026-04-05\naliases: [x]\n---\nBody.\n"
    (note,) = _norm(tmp_path, {"p.md": text}, format="markdown", site_url="https://ex.org").notes
    assert list(note.frontmatter) == ["title", "aliases", "tags", "source", "source_path", "url", "content_hash",
                                      "fetched_at", "original_url", "custom", "date"]
    assert note.frontmatter["date"] == "2026-04-05" and note.frontmatter["url"] == "https://ex.org/p"
    assert note.frontmatter["original_url"] == "old"


def test_a_pages_own_values_of_docsvaults_keys_stay_as_original_keys(tmp_path):
    clipped = ("---\ntitle: Clipped article\nsource: https://example.com/article\ncontent_hash: user-value\n"
               "tags: [clippings]\n---\nClipped text about numbats.\n")
    own = "---\nsource: demo\noriginal_source: kept as written\nsource_path: elsewhere.md\n---\nText.\n"
    clip, mine = _norm(tmp_path, {"Clipped.md": clipped, "Own.md": own}, format="obsidian").notes
    assert clip.frontmatter == {
        "title": "Clipped article", "tags": ["clippings"], "source": "demo", "source_path": "Clipped.md",
        "content_hash": text_hash("Clipped text about numbats.\n"), "fetched_at": FETCHED,
        "original_source": "https://example.com/article", "original_content_hash": "user-value",
    }
    # the same value is nothing to keep; the page's own original_<key> wins over the replaced value
    assert {k: v for k, v in mine.frontmatter.items() if k.startswith(("source", "original"))} == {
        "source": "demo", "source_path": "Own.md", "original_source_path": "elsewhere.md",
        "original_source": "kept as written"}


def test_a_title_that_is_no_text_stays_as_original_title(tmp_path):
    """`title: [1, 2]` cannot title a note: its heading does, and the page's value stays as original_title; a
    number is a title (`title: 2024`), kept as text, with nothing to keep."""
    listed = "---\ntitle: [1, 2]\n---\n# Quokka facts\n\nText.\n"
    number = "---\ntitle: 2024\n---\nText.\n"
    a, b = _norm(tmp_path, {"Listed.md": listed, "Year.md": number}, format="obsidian").notes
    assert (a.title, a.frontmatter["title"], a.frontmatter["original_title"]) == ("Quokka facts", "Quokka facts", [1, 2])
    assert (b.title, b.frontmatter["title"], "original_title" in b.frontmatter) == ("2024", "2024", False)


def test_site_links_by_longest_suffix_and_dangling_report(tmp_path):
    files = {
        "docs/source/en/api/flux.md": "# Flux\n",
        "docs/source/en/index.md": (
            "[a](https://hf.co/docs/diffusers/main/en/api/flux) [b](https://hf.co/docs/diffusers/api/flux#x) "
            "[c](https://hf.co/docs/diffusers/v0.31.0/en/api/flux) [d](https://hf.co/docs/transformers/main/en/index) "
            "[e](/docs/diffusers/main/en/api/gone) [f](gone.md) [g](https://hf.co/docs/diffusers/main/en/logo.png) "
            "[h](https://hf.co/docs/diffusers/main/en)\n"),
    }
    result = _norm(tmp_path, files, format="markdown", site_url="https://hf.co/docs/diffusers/main/en",
                   paths=("docs/source/en",))
    index = next(n for n in result.notes if n.source_path.endswith("index.md"))
    assert index.body == (
        "[[demo/docs/source/en/api/flux|a]] [[demo/docs/source/en/api/flux#x|b]] [[demo/docs/source/en/api/flux|c]] "
        "[d](https://hf.co/docs/transformers/main/en/index) [e](https://hf.co/docs/diffusers/main/en/api/gone) "
        "[f](https://hf.co/docs/diffusers/main/en/gone.md) [g](https://hf.co/docs/diffusers/main/en/logo.png) "
        "[[demo/docs/source/en/index|h]]\n")
    assert [(d.target, d.url) for d in result.dangling] == [
        ("https://hf.co/docs/transformers/main/en/index", None),
        ("/docs/diffusers/main/en/api/gone", "https://hf.co/docs/diffusers/main/en/api/gone"),
        ("gone.md", "https://hf.co/docs/diffusers/main/en/gone.md"),
    ]
    assert {d.source_path for d in result.dangling} == {"docs/source/en/index.md"}


def test_write_report_files(tmp_path):
    from pipeline.config import Settings
    from pipeline.ingest.normalize import write_report

    result = _norm(tmp_path, {"a.md": "[x](/nope)\n", "b.md": b"\xff\xfe bad", "c.md": b""},
                   format="markdown", site_url="https://ex.org")
    settings = Settings(tmp_path / "s.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    paths = write_report(settings, "demo", result)
    assert paths["errors"] == tmp_path / "data" / "state" / "demo.errors.txt"
    assert paths["errors"].read_text().splitlines() == [
        "source 'demo': b.md: not valid UTF-8 (byte 0: invalid start byte); re-save the file as UTF-8",
        "source 'demo': c.md: empty file (no text); add content or exclude it",
    ]
    import json
    assert json.loads((tmp_path / "data" / "graph" / "dangling-demo.json").read_text()) == [
        {"source_path": "a.md", "target": "/nope", "url": "https://ex.org/nope"}]


def test_canvas_becomes_note_of_cards(tmp_path):
    import json as _json
    canvas = {"nodes": [
        {"id": "2", "type": "file", "file": "notes/Plan.md", "x": 300, "y": 0},
        {"id": "1", "type": "text", "text": "# Board\r\nIdeas", "x": 0, "y": 0},
        {"id": "3", "type": "file", "file": "img/a.png", "x": 0, "y": 100},
        {"id": "4", "type": "link", "url": "https://ex.org", "x": 0, "y": 200},
        {"id": "5", "type": "group", "label": "Later", "x": 0, "y": 300},
        {"id": "6", "type": "file", "file": "notes/Plan.md", "subpath": "#Step", "x": 0, "y": 400},
    ], "edges": []}
    result = _norm(tmp_path, {"Board.canvas": _json.dumps(canvas), "bad.canvas": "{nope"})
    (note,) = result.notes
    assert (note.rel_path, note.title) == ("Board.canvas.md", "Board")
    assert note.body == "# Board\nIdeas\n\n[[notes/Plan]]\n\n![[img/a.png]]\n\n<https://ex.org>\n\n## Later\n\n" \
                        "[[notes/Plan#Step]]\n"
    assert len(result.errors) == 1 and result.errors[0].startswith("source 'demo': bad.canvas: not a valid .canvas")


def test_canvas_is_titled_by_its_file_name_without_canvas(tmp_path):
    """Obsidian names a canvas by its file name: ``Plan.canvas`` is ``Plan`` in search hits and read (it was
    ``Plan.canvas``), also when its first card has a heading of its own (a card, not the canvas's title)."""
    import json as _json
    cards = {"nodes": [{"id": "1", "type": "text", "text": "# Goals\nShip it", "x": 0, "y": 0}]}
    plain = {"nodes": [{"id": "1", "type": "text", "text": "Ship it", "x": 0, "y": 0}]}
    result = _norm(tmp_path, {"Plan.canvas": _json.dumps(plain), "計画/ボード.CANVAS": _json.dumps(cards)})
    assert sorted((n.rel_path, n.title, n.frontmatter["title"]) for n in result.notes) == [
        ("Plan.canvas.md", "Plan", "Plan"),
        ("計画/ボード.CANVAS.md", "ボード", "ボード")]


def test_oversized_file_is_reported_not_read(tmp_path, monkeypatch):
    import pipeline.ingest.normalize as nz

    monkeypatch.setattr(nz, "MAX_FILE_BYTES", 100)
    result = _norm(tmp_path, {"big.md": "x" * 101, "ok.md": "fine\n"})
    assert [n.source_path for n in result.notes] == ["ok.md"]
    assert result.errors == ["source 'demo': big.md: file is 0.0 MiB, above the 0 MiB limit for one note; "
                             "split it or exclude it from the source"]


@pytest.mark.parametrize("sp, expected", [
    ("../../etc/passwd", "_/_/etc/passwd.md"),
    ("/abs/x.md", "abs/x.md"),
    ("a\\..\\..\\b.md", "a/_/_/b.md"),
    ("C:/win.md", "C-/win.md"),
    ("x\x00y.md", "x-y.md"),
    (".hidden/.x.md", "_hidden/_x.md"),
    ("a\u2215b\uff0fc.md", "a-b-c.md"),
    ("trail. . ./x.md", "trail/x.md"),
    ("%2e%2e%2fx.md", "%2e%2e%2fx.md"),
    ("ctl\x1b[31m\n.md", "ctl--31m-.md"),
])
def test_rel_path_hostile(sp, expected):
    assert rel_path_for(sp) == expected


def test_rel_path_long_names_are_cut_with_hash():
    a, b = rel_path_for("d" * 300 + "/" + "é" * 300 + "a.md"), rel_path_for("d" * 300 + "/" + "é" * 300 + "b.md")
    assert a != b
    assert all(len(part.encode()) <= 200 for part in a.split("/")) and a.endswith(".md")
    assert len(rel_path_for("/".join(["x"] * 100) + ".md").split("/")) == 33


def test_a_page_title_is_an_h1_that_heads_the_page_not_one_after_code_or_headings() -> None:
    from pipeline.ingest.normalize import _title, leading_h1

    badges = "[![LoRA](https://img.shields.io/badge/LoRA-green)](https://x.org/lora)\n<!-- c -->\n\n# AnyFlow\n\nText."
    assert leading_h1(badges) == "AnyFlow"
    assert _title({}, badges, "api/anyflow.md") == "AnyFlow"
    # Obsidian's help: fenced Markdown examples, then an HTML example converted to headings: the file name is the title
    example = "Learn how to format.\n\n```md\n# Heading 1\n```\n\n%% comment %%\n# This is a heading 1\n## Two\n"
    assert leading_h1(example) is None
    assert _title({}, example, "en/Basic formatting syntax.md") == "Basic formatting syntax"
    assert _title({"title": "Given"}, example, "x.md") == "Given"
    assert _title({}, "## Part\n\n# Later\n", "notes/Part and later.md") == "Part and later"


def test_a_title_of_template_placeholders_is_none_the_file_name_titles_the_note() -> None:
    """An Obsidian templates folder's note (`# {{title}}`) was titled `{{title}}` in search hits, related and the
    source's index (session 41); it is titled by its file name, as Obsidian names it."""
    from pipeline.ingest.normalize import _title

    assert _title({}, "# {{title}}\n\n## 今日のこと\n", "テンプレート/日記テンプレート.md") == "日記テンプレート"
    assert _title({}, "# {{date:YYYY-MM-DD}} {{time}}\n", "Templates/Daily.md") == "Daily"
    assert _title({"title": "<% tp.file.title %>"}, "text", "Templates/Meeting.md") == "Meeting"
    assert _title({"title": "{{title}}"}, "# {{title}}\n", "t/Plain.md") == "Plain"
    assert _title({}, "# {{title}} の振り返り\n", "t/Review.md") == "{{title}} の振り返り"    # text besides: a title
    assert _title({"title": "Vue {{ x }} tips"}, "", "t/vue.md") == "Vue {{ x }} tips"


def test_the_tags_that_end_a_title_h1_are_no_part_of_the_title() -> None:
    """Session 47: an Obsidian note `# Home #project` (the tag written in its H1, as Obsidian renders it: a tag) was
    titled `Home #project` in hits, read and the index; the tags that end the heading go, `C#` and `#42` stay."""
    from pipeline.ingest.normalize import _title

    assert _title({}, "# Home #project\n\ntext\n", "Home.md") == "Home"
    assert _title({}, "# 会議メモ #仕事 #todo/next\n", "m.md") == "会議メモ"
    assert _title({}, "# #daily\n", "2026-12-07.md") == "2026-12-07"           # only tags: the file name
    assert _title({}, "# Learn C#\n", "c.md") == "Learn C#"
    assert _title({}, "# Issue #42\n", "i.md") == "Issue #42"
    assert _title({}, "# The #hashtag trend\n", "h.md") == "The #hashtag trend"   # not at the end: words


def test_heading_tags_of_a_long_heading_are_read_in_linear_time() -> None:
    """Review of session 47: the heading-tag patterns tried every split of a run of word characters
    (``[\\w/-]*[^\\W\\d][\\w/-]*``, then ``\\s*$`` from every position), so an H1 of 12,000 characters took 3.5 s to
    title and a 60,000-character one minutes; a heading is now read word by word from its end."""
    from pipeline.common.markdown import heading_tags, without_heading_tags

    many = "Log" + " #a" * 20_000 + " !"               # tags, then a word: none of them ends the heading
    assert (without_heading_tags(many), len(heading_tags(many))) == (many, 20_000)
    word = "#" + "a" * 60_000 + "!"
    assert (without_heading_tags(word), heading_tags(word)) == (word, ["a" * 60_000])
    assert (without_heading_tags("Home #a " + "#1" * 30_000), heading_tags("x #" + "1" * 60_000)) == (
        "Home #a " + "#1" * 30_000, [])
    assert without_heading_tags("Home\u3000#project\t#todo/next ") == "Home"
    assert heading_tags("Home #project, #todo/next and #42 C#") == ["project", "todo/next"]


def test_a_heading_ending_in_a_hash_keeps_it_only_a_spaced_closing_sequence_goes() -> None:
    """A reviewer's finding: the ATX pattern dropped any `#`s at a heading's end, so a page `# Learn C#` was titled
    `Learn C`. CommonMark ends a heading at a closing sequence only after a space or tab (`# Closed ##`); `C#`,
    `F#` keep theirs."""
    from pipeline.ingest.normalize import _title, first_h1, leading_h1

    assert _title({}, "# Learn C#\n\nText.\n", "x.md") == "Learn C#"
    assert leading_h1("# F# ##\n") == "F#"
    assert leading_h1("# Closed ##  \n") == "Closed"
    assert first_h1("## Two\n\n# Using C#\n") == "Using C#"
    assert leading_h1("# ###\n\n# Real\n") == "Real"       # `# ###` is an empty heading, as before


@pytest.mark.parametrize("rule", ["---", "***"])
def test_link_to_a_setext_heading_after_a_thematic_break(tmp_path, rule):
    """`Title` underlined by dashes right after a rule is a heading (CommonMark, read by markdown-it-py): a link to
    its anchor gets the heading's own text, as for an ATX heading."""
    files = {
        "a.md": "See [the setup](b.md#first-steps) and [more](b.md#other-heading).\n",
        "b.md": f"# B\n\nIntro.\n\n{rule}\nFirst *Steps*\n-----\nText.\n\nOther Heading\n===\n",
    }
    body = next(n.body for n in _norm(tmp_path, files, format="markdown").notes if n.source_path == "a.md")
    assert body == "See [[demo/b#First *Steps*|the setup]] and [[demo/b#Other Heading|more]].\n"


def test_a_link_to_a_repeated_heading_slug_names_the_heading(tmp_path):
    """A reviewer's finding: GitHub numbers a repeated slug (`## Example` twice: `#example`, `#example-1`; `## NodeJS`
    after `## Node.js`: `#nodejs-1`), but only a heading's first slug was known, so `[x](b.md#example-1)` became
    `[[demo/b#example-1|x]]`, a heading Obsidian does not find, and `[y](#nodejs-1)` stayed a link to a slug.
    Each numbered slug now names its heading's text (Obsidian opens a repeated heading's first occurrence)."""
    files = {
        "a.md": "See [x](b.md#example-1), [z](b.md#example-2) and [n](b.md#nodejs-1).\n",
        "b.md": "# B\n\n## Example\n\n## Node.js\n\n## Example\n\n## NodeJS\n\n## Example\n\n[y](#nodejs-1)\n",
    }
    notes = {n.source_path: n.body for n in _norm(tmp_path, files, format="markdown").notes}
    assert notes["a.md"] == "See [[demo/b#Example|x]], [[demo/b#Example|z]] and [[demo/b#NodeJS|n]].\n"
    assert notes["b.md"].endswith("## Example\n\n[[#NodeJS|y]]\n")


# ---- frontmatter values of any YAML type; the build's own `docsvault` marker ----

def test_a_scalar_alias_or_tag_of_any_yaml_type_is_one_item_like_a_list_item(tmp_path):
    from pipeline.index.bm25 import page_labels
    from pipeline.index.vaultlinks import qualify_ambiguous_links
    from pipeline.ingest.vault import read_notes, write_source

    files = {
        "int.md": "---\naliases: 2024\ntags: 7\n---\n# year alias about yaks\n",
        "float.md": "---\naliases: 3.14\nkeywords: 2.5\n---\nText.\n",
        "bool.md": "---\naliases: true\ntags: true\n---\nText.\n",
        "list.md": "---\naliases: [2024, true, 3.14]\ntags: [2024, true]\n---\nSee [[int]] and [[2024]].\n",
        "date.md": "---\naliases: 2024-01-01\n---\nText.\n",
        "off.md": "---\naliases: false\ntags: false\n---\nText.\n",
        "map.md": "---\naliases: {a: 1}\ntags: {a: 1}\n---\nText.\n",
    }
    result = _norm(tmp_path, files, format="obsidian")
    assert result.errors == []
    notes = {n.source_path: n for n in result.notes}
    assert {sp: n.aliases for sp, n in notes.items()} == {
        "int.md": ("2024",), "float.md": ("3.14",), "bool.md": ("True",), "list.md": ("2024", "True", "3.14"),
        "date.md": ("2024-01-01",), "off.md": (), "map.md": ("{'a': 1}",)}
    assert {sp: page_labels(n) for sp, n in notes.items()} == {
        "int.md": ["7"], "float.md": ["2.5"], "bool.md": ["True"], "list.md": ["2024", "True"], "date.md": [],
        "off.md": ["False"], "map.md": []}
    # what the vault stage does with them (link resolution by alias, writing, reading back) fails on none; `[[2024]]`,
    # a link by an alias, which Obsidian does not follow, is written with the path of its note (the shorter of two)
    qualified, _ = qualify_ambiguous_links("demo", list(notes.values()), {"int"})
    assert next(n for n in qualified if n.source_path == "list.md").body == (
        "See [[demo/int|int]] and [[demo/int|2024]].\n")
    write_source(tmp_path / "vault", "demo", result.notes)
    assert {n.source_path: n.aliases for n in read_notes(tmp_path / "vault")}["int.md"] == ("2024",)


def test_a_pages_own_docsvault_key_is_kept_as_original_and_never_marks_it_an_index_note(tmp_path):
    from pipeline.ingest.vault import read_notes, write_source

    files = {
        "mine.md": "---\ntitle: My own index\ndocsvault: index\n---\n# My index about lynxes\n",
        "other.md": "---\ndocsvault: [x, 1]\ncustom: 1\n---\nText.\n",
        "both.md": "---\ndocsvault: index\noriginal_docsvault: mine\n---\nText.\n",
    }
    notes = {n.source_path: n for n in _norm(tmp_path, files, format="obsidian").notes}
    assert notes["mine.md"].frontmatter == {
        "title": "My own index", "source": "demo", "source_path": "mine.md",
        "content_hash": text_hash("# My index about lynxes\n"), "fetched_at": FETCHED, "original_docsvault": "index"}
    assert list(notes["other.md"].frontmatter)[-2:] == ["original_docsvault", "custom"]
    assert notes["other.md"].frontmatter["original_docsvault"] == ["x", 1]
    assert "docsvault" not in notes["both.md"].frontmatter
    assert notes["both.md"].frontmatter["original_docsvault"] == "mine"     # the page's own original_ key wins
    write_source(tmp_path / "vault", "demo", list(notes.values()))
    assert sorted(n.source_path for n in read_notes(tmp_path / "vault")) == ["both.md", "mine.md", "other.md"]


class _WrongShapeCache(dict):
    """A parse cache whose every entry is well-formed JSON of the wrong shape (a hand-edited cache file)."""

    def get(self, key, default=None):
        return ["x", "not a dict", 3, None] if not key.startswith("links:") else ["body", "not a list"]


def test_a_cache_entry_of_another_shape_is_a_miss_not_a_failure(tmp_path: Path) -> None:
    files = {"a.md": "---\ntags: [x]\n---\n# A\n\nSee [b](b.md).\n", "b.md": "# B\n\ntext\n"}
    plain = _norm(tmp_path / "plain", files)
    root = tmp_path / "junk" / "src"
    raws = []
    for sp, content in files.items():
        (root / sp).parent.mkdir(parents=True, exist_ok=True)
        (root / sp).write_text(content, encoding="utf-8")
        raws.append(RawFile(source="demo", source_path=sp, path=root / sp))
    junk = normalize_source(Source(name="demo", kind="local"), raws, FETCHED, cache=_WrongShapeCache())
    assert junk.errors == plain.errors == []
    assert [(n.rel_path, n.frontmatter, n.body) for n in junk.notes] == [
        (n.rel_path, n.frontmatter, n.body) for n in plain.notes]


def test_an_excalidraw_drawing_is_titled_by_its_file_name(tmp_path):
    """Every drawing of Obsidian's Excalidraw plugin has the heading `# Excalidraw Data` (`# Text Elements` before
    its 2.0), so every drawing was titled so in search hits, `read` and `related`, and `read 'Excalidraw Data'`
    named them all. A drawing is titled by its file name, as Obsidian names it (`Kyoto.excalidraw`); a `title:` of
    its own still wins."""
    head = "---\nexcalidraw-plugin: parsed\ntags: [excalidraw]\n---\n==⚠  Switch to EXCALIDRAW VIEW ⚠==\n\n"
    result = _norm(tmp_path, {
        "Drawings/Kyoto.excalidraw.md": head + "# Excalidraw Data\n\n## Text Elements\nKyoto sketch ^a1\n",
        "Old.excalidraw.md": head + "# Text Elements\nOld sketch ^b2\n",
        "Named.excalidraw.md": head.replace("tags:", "title: Board plan\ntags:") + "# Excalidraw Data\n",
        "Notes.md": "# Excalidraw Data\n\nA note about the plugin.\n",
    })
    assert sorted((n.rel_path, n.title, n.frontmatter["title"]) for n in result.notes) == [
        ("Drawings/Kyoto.excalidraw.md", "Kyoto.excalidraw", "Kyoto.excalidraw"),
        ("Named.excalidraw.md", "Board plan", "Board plan"),
        ("Notes.md", "Excalidraw Data", "Excalidraw Data"),
        ("Old.excalidraw.md", "Old.excalidraw", "Old.excalidraw")]
