"""Issue 8: property-based tests (hypothesis) of the parsers that read third-party text.

Fixed seed (``derandomize``): the same examples every run. ``DOCSVAULT_FUZZ_EXAMPLES=<n>`` selects a larger run
(default 60 examples per property, whole file well under 30 s).

Properties: only documented errors (NoteError from the frontmatter reader, LlmsTxtError from the llms.txt parser,
nothing from the normalizers, the wikilink parser, the resolver and the chunker); frontmatter round-trips through
render_note; nothing inside a fenced code block is rewritten by a normalizer (its lines survive verbatim, at most
quoted by a callout) or read as a link; chunks are verbatim substrings of the body, fit the budget, and cover every
word that is not a heading.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.common.errors import NoteError
from pipeline.common.frontmatter import canonical_body, render_note, split_frontmatter
from pipeline.index.chunk import chunk_note
from pipeline.index.graph import LinkResolver, parse_links
from pipeline.ingest.fetch.llms_txt import LlmsTxtError, parse_llms_txt
from pipeline.ingest.normalize import _LinkIndex, _tidy, clean_body, collect_headings, convert_links
from pipeline.models import Note, Source

EXAMPLES = int(os.environ.get("DOCSVAULT_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Markdown-ish text: the tokens our parsers look for, mixed with arbitrary unicode.
TOKENS = [
    "---", "...", "\n", "\r\n", "\r", " ", "\t", "#", "## ", "`", "```", "~~~", "[[", "]]", "|", "\\|", "#^", "![[",
    "[", "](", ")", "<", ">", "</", "/>", "{", "}", "{/*", "*/}", "{%", "%}", "{{", "}}", "{:", ":", "- ", "> ",
    "<Note>", "</Note>", "<Tip>", "</Tip>", "<Tabs>", "<Tab title=\"a\">", "</Tab>", "</Tabs>", "<Card href=\"/x\">",
    "<Sandpack>", "</Sandpack>", "import x from 'y'", "export const a = {", "{% link a.md %}", "{{ site.x }}",
    "[[autodoc]] X", "<!--Copyright", "-->", "<hfoptions id=\"a\">", "</hfoptions>", "[a](b.md#c)", "[a](/x/y)",
    "[a](https://ex.org/docs/y)", "&a", "*a", "key: value", "\x00", "\ufeff", "\u2028", "\x85", "é", "日本",
]
markdownish = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=8)), max_size=60).map("".join)

# ---- frontmatter ------------------------------------------------------------------------------------------------
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)


@FUZZ
@given(markdownish)
def test_frontmatter_reader_raises_only_note_error(text):
    try:
        fm, body = split_frontmatter(text, "fuzz.md")
    except NoteError as exc:
        assert str(exc).startswith("fuzz.md: ")
        return
    assert isinstance(fm, dict) and "\r" not in body


@FUZZ
@given(st.dictionaries(st.text(max_size=12), json_values, max_size=6), markdownish)
def test_frontmatter_round_trips(fm, body):
    rendered = render_note(fm, body)
    assert split_frontmatter(rendered, "x") == (fm, canonical_body(body))


# ---- normalizers ------------------------------------------------------------------------------------------------
prose = st.lists(st.sampled_from([t for t in TOKENS if "`" not in t and "~" not in t]), max_size=25).map("".join)
code_lines = st.lists(markdownish.map(lambda s: s.replace("\r", "").replace("\n", " ").replace("`", "'")
                                      .replace("~", "-").replace("\x85", "").replace("\u2028", "")),
                      min_size=1, max_size=4)
SOURCE = Source(name="demo", kind="local", site_url="https://ex.org/docs")


def _normalize(fmt: str, text: str) -> str:
    index = _LinkIndex(SOURCE, {"a.md": "a.md", "x/y.md": "x/y.md"}, {"a.md": {}, "x/y.md": {}})
    collect_headings(text)
    return _tidy(convert_links(clean_body(fmt, text, {}), index, "a.md", "https://ex.org/docs/a"))


@FUZZ
@given(st.sampled_from(["mdx", "jekyll", "docbuilder", "markdown", "obsidian", "html"]), markdownish)
def test_normalizers_never_raise(fmt, text):
    out = _normalize(fmt, text.replace("\r", "\n"))
    assert isinstance(out, str)


@FUZZ
@given(st.sampled_from(["mdx", "jekyll", "docbuilder", "markdown"]), prose, code_lines, prose,
       st.sampled_from(["```", "````", "~~~"]))
def test_code_fences_never_rewritten(fmt, before, lines, after, fence):
    code = "\n".join(lines)
    text = f"{before.strip(chr(10))}\n\n{fence}text\n{code}\n{fence}\n\n{after}\n"
    out = _normalize(fmt, text)
    unquoted = "\n".join(re.sub(r"^(?:> ?)+", "", ln) for ln in out.split("\n"))
    block = f"{fence}text\n{code}\n{fence}"
    assert block in out or block in unquoted


# ---- wikilink parser and resolver --------------------------------------------------------------------------------
@FUZZ
@given(markdownish)
def test_wikilink_parser_never_raises(text):
    links = parse_links(text)
    resolver = LinkResolver(["v/a.md", "v/x/y.md", "v/日本.md"], {"v/a.md": ["A"]})
    for link in links:
        assert "\n" not in link.target
        resolver.resolve(link.target, "v/x/z.md", kind=link.kind)


# an unclosed "<!--" opens a CommonMark HTML block that swallows a following fence: not a fence then
prose_no_comment = st.lists(st.sampled_from([t for t in TOKENS if "`" not in t and "~" not in t and "<!--" not in t]),
                            max_size=25).map("".join)


@FUZZ
@given(prose_no_comment, code_lines, st.sampled_from(["```", "~~~~", "~~~"]))
def test_no_links_from_fenced_code(before, lines, fence):
    base = before.strip("\n") + "\n"
    with_code = f"{base}\n{fence}\n" + "\n".join(f"[[in code {i}]] {ln}" for i, ln in enumerate(lines)) + f"\n{fence}\n"
    assert parse_links(with_code) == parse_links(base)


# ---- chunker ------------------------------------------------------------------------------------------------------
@st.composite
def documents(draw):
    """(body, words that must be covered). Words are unique tokens w<n>; heading words are not required."""
    counter = iter(range(10**6))
    word = lambda: f"w{next(counter)}"
    blocks, required = [], []
    for kind in draw(st.lists(st.sampled_from(["h", "p", "code", "list", "quote", "table", "long"]), max_size=12)):
        if kind == "h":
            blocks.append("#" * draw(st.integers(1, 4)) + " " + word())
            continue
        n = draw(st.integers(1, 40))
        words = [word() for _ in range(n)]
        required += words
        if kind == "p":
            seps = draw(st.lists(st.sampled_from([" ", " ", ". ", "。", "\n", "! "]), min_size=n, max_size=n))
            blocks.append("".join(w + s for w, s in zip(words, seps)).strip())
        elif kind == "code":
            blocks.append("```\n" + "\n".join(f"# {w}" for w in words) + "\n```")
        elif kind == "list":
            blocks.append("\n".join(f"- {w}" for w in words))
        elif kind == "quote":
            blocks.append("\n".join(f"> {w}" for w in words))
        elif kind == "table":
            blocks.append("| a | b |\n| --- | --- |\n" + "\n".join(f"| {w} | x |" for w in words))
        else:
            blocks.append(" ".join(words) * 1)
    return "\n\n".join(blocks) + "\n", required


@FUZZ
@given(documents(), st.integers(24, 300), st.integers(0, 40))
def test_chunks_cover_the_text(doc, max_tokens, overlap):
    body, required = doc
    note = Note("demo", "a.md", "a.md", "T", {}, body)
    chunks = chunk_note(note, count_tokens=len, max_tokens=max_tokens, overlap_tokens=overlap)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.text in body
        assert len(c.embed_text) <= max_tokens
    covered = set(re.findall(r"w\d+", " ".join(c.text for c in chunks)))
    missing = [w for w in required if w not in covered]
    assert not missing, missing[:5]


@FUZZ
@given(markdownish, st.integers(8, 200))
def test_chunker_never_raises(text, max_tokens):
    chunks = chunk_note(Note("demo", "a.md", "a.md", "T", {}, text), count_tokens=len, max_tokens=max_tokens)
    assert all(len(c.embed_text) <= max_tokens for c in chunks)


# ---- llms.txt parser --------------------------------------------------------------------------------------------
llms_lines = st.lists(st.one_of(
    st.sampled_from(["# Title", "> summary", "## Docs", "## Optional", "- [a](https://ex.org/a.md): n",
                     "- [b](/b)", "- [c](http://[::1)", "- [d](http://[bad)", "```", "~~~", "* [e](x y)",
                     "[f](https://other.org/f)", "- [](https://ex.org/)", "#", "##", "- [g](javascript:x)"]),
    markdownish), max_size=20).map("\n".join)


@FUZZ
@given(llms_lines, st.sampled_from([None, "https://ex.org/llms.txt", "file:///x/llms.txt"]))
def test_llms_txt_parser_raises_only_llms_txt_error(text, base):
    try:
        parsed = parse_llms_txt(text, base)
    except LlmsTxtError:
        return
    for link in parsed.links:
        assert isinstance(link.url, str)


@pytest.mark.parametrize("text", ["# T\n## S\n- [x](http://[::1)\n", "# T\n- [y](http://[bad)\n"])
def test_llms_txt_invalid_urls_are_documented_errors_or_skipped(text):
    try:
        parse_llms_txt(text, "https://ex.org/llms.txt")
    except LlmsTxtError:
        pass
