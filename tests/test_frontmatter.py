"""Frontmatter: split (BOM, CRLF, dates), decode, render round-trip."""

from __future__ import annotations

import json

import pytest

from pipeline.common.errors import NoteError
from pipeline.common.frontmatter import (
    canonical_body,
    decode_bytes,
    json_safe,
    render_note,
    split_frontmatter,
)


def test_split_basic():
    fm, body = split_frontmatter("---\ntitle: Guide\ntags:\n  - a\n---\n# Start\nline one\n", "x.md")
    assert fm == {"title": "Guide", "tags": ["a"]}
    assert body == "# Start\nline one\n"


def test_ec12_crlf_bytes_identical_to_lf():
    crlf = b"---\r\ntitle: Guide\r\ntags:\r\n  - a\r\n---\r\n# Start\r\nline one\r\n"
    lf = crlf.replace(b"\r\n", b"\n")
    got = split_frontmatter(decode_bytes(crlf, "x.md"), "x.md")
    assert got == ({"title": "Guide", "tags": ["a"]}, "# Start\nline one\n")
    assert got == split_frontmatter(decode_bytes(lf, "x.md"), "x.md")
    assert "\r" not in json.dumps(got)


def test_bom_is_dropped():
    data = "\ufeff---\ntitle: T\n---\nbody\n".encode("utf-8")
    assert split_frontmatter(decode_bytes(data, "x"), "x") == ({"title": "T"}, "body\n")
    assert split_frontmatter("\ufeff---\ntitle: T\n---\nbody\n", "x") == ({"title": "T"}, "body\n")


def test_ec12_negative_not_frontmatter():
    text = "---title: x\nbody\n"
    assert split_frontmatter(text, "x") == ({}, text)


def test_no_frontmatter_and_empty_block():
    assert split_frontmatter("# Hi\n", "x") == ({}, "# Hi\n")
    assert split_frontmatter("---\n---\nbody\n", "x") == ({}, "body\n")


def test_dots_closer():
    assert split_frontmatter("---\na: 1\n...\nbody\n", "x") == ({"a": 1}, "body\n")


def test_ec11_dates_become_iso_strings():
    text = "---\ncreated: 2026-04-05\nupdated: 2026-04-06T09:30:00\ndue: \"2026-05-01\"\n---\n# Note\n"
    fm, _ = split_frontmatter(text, "x.md")
    assert fm == {"created": "2026-04-05", "updated": "2026-04-06T09:30:00", "due": "2026-05-01"}
    assert json.loads(json.dumps(fm)) == fm


def test_json_safe_nested():
    import datetime as dt

    value = {"a": [dt.date(2026, 1, 2), {"b": dt.datetime(2026, 1, 2, 3, 4, 5)}], 1: float("nan"), "s": {3}}
    assert json_safe(value) == {"a": ["2026-01-02", {"b": "2026-01-02T03:04:05"}], "1": "nan", "s": [3]}


def test_invalid_yaml_names_file_and_line():
    with pytest.raises(NoteError) as exc:
        split_frontmatter("---\ntitle: ok\nbad: [unclosed\n---\nbody\n", "source 'x': a.md")
    msg = str(exc.value)
    assert msg.startswith("source 'x': a.md: line ")
    assert "invalid YAML" in msg


@pytest.mark.parametrize(("frontmatter", "line", "problem", "fix"), [
    ("date: {{date}}\ntags: [daily]", 2, "{{date}} is a template placeholder", 'date: "{{date}}"'),
    ("title: x\ncreated: {{date:YYYY-MM-DD}} {{time}}", 3, "{{date:YYYY-MM-DD}} is a template placeholder",
     'created: "{{date:YYYY-MM-DD}} {{time}}"'),
    ("aliases: [{{title}}, Daily]", 2, "{{title}} is a template placeholder", 'aliases: ["{{title}}", Daily]'),
    ("tags:\n  - {{tag}}", 3, "{{tag}} is a template placeholder", '- "{{tag}}"'),
])
def test_a_template_placeholder_in_frontmatter_is_named_with_the_quoted_value(frontmatter, line, problem, fix):
    """An Obsidian templates folder (`Templates/Daily.md` with `date: {{date}}`) was skipped with "found unhashable
    key; fix or quote the value": YAML's words, not the user's. Now the line names the placeholder and gives the
    line quoted, as Obsidian's Templates help writes it."""
    with pytest.raises(NoteError) as exc:
        split_frontmatter(f"---\n{frontmatter}\n---\n# {{{{title}}}}\n", "Templates/Daily.md")
    assert str(exc.value) == (f"Templates/Daily.md: line {line}: invalid YAML frontmatter: {problem}, which YAML "
                              f"reads as a mapping; quote it: {fix} (as Obsidian's Templates help writes it)")


def test_a_placeholder_yaml_reads_as_text_is_no_template_error():
    """`title: My {{title}}` is a plain text value: an error on that line is YAML's own."""
    assert split_frontmatter("---\ntitle: My {{title}}\n---\nx\n", "a.md") == ({"title": "My {{title}}"}, "x\n")
    with pytest.raises(NoteError) as exc:
        split_frontmatter("---\ntitle: My {{title}}\n  bad: 1\n---\nx\n", "a.md")
    assert str(exc.value) == "a.md: line 3: invalid YAML frontmatter: mapping values are not allowed here; fix or " \
                             "quote the value"


def test_non_mapping_frontmatter():
    with pytest.raises(NoteError, match="mapping"):
        split_frontmatter("---\n- a\n- b\n---\nbody\n", "a.md")


def test_unclosed_frontmatter():
    with pytest.raises(NoteError, match="never closed"):
        split_frontmatter("---\ntitle: x\nbody\n", "a.md")


def test_unsafe_yaml_tag_rejected():
    with pytest.raises(NoteError):
        split_frontmatter("---\nx: !!python/object/apply:os.system ['echo hi']\n---\n", "a.md")


def test_decode_invalid_utf8_and_binary():
    with pytest.raises(NoteError, match="not valid UTF-8"):
        decode_bytes(b"ok \xff\xfe", "source 'x': a.md")
    with pytest.raises(NoteError, match="binary"):
        decode_bytes(b"PNG\x00\x01", "source 'x': a.png")


def test_render_exact():
    text = render_note({"title": "Grüße", "tags": ["a", "b"], "n": 1}, "# Hi\n\nText")
    assert text == "---\ntitle: Grüße\ntags:\n- a\n- b\nn: 1\n---\n\n# Hi\n\nText\n"


@pytest.mark.parametrize("fm, body", [
    ({"title": "T", "created": "2026-04-05", "hash": "1e5", "empty": None, "nested": {"k": [1, "x: y"]}}, "b\n"),
    ({"title": "Long " * 100, "multi": "line1\nline2"}, "\n\nbody with trailing\n\n\n"),
    ({}, "just body\n"),
    ({"title": "yes", "flag": "true", "on": "on"}, ""),
])
def test_render_round_trips(fm, body):
    assert split_frontmatter(render_note(fm, body), "x") == (fm, canonical_body(body))


# ---- hostile frontmatter (issue 8): refused with the file and line named, bounded in time and memory ----

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("yaml_text, message", [
    ("title: a\ntitle: b\n", "line 3: invalid YAML frontmatter: duplicate key 'title'"),
    ("a:\n  x: 1\n  x: 2\n", "line 4: invalid YAML frontmatter: duplicate key 'x'"),
    (BOMB, "frontmatter refused: more than 100000 values (an alias bomb?)"),
    ("a: &a x\nb: [" + ", ".join(["*a"] * 101) + "]\n", "invalid YAML frontmatter: more than 100 alias references"),
    ("a: " + "[" * 60 + "]" * 60 + "\n", "invalid YAML frontmatter: nested deeper than 50 levels"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "invalid YAML frontmatter: nested"),
    ("a:\n\t- b\n", "line 3: invalid YAML frontmatter"),
    ("x: [unclosed\n", "invalid YAML frontmatter"),
    # an unclosed list is noticed on the next line; the line to fix is where it starts
    ("title: t\ntags: [work/meetings\nstatus: draft\n", ("line 3: invalid YAML frontmatter: expected ',' or ']', but "
     "got ':' on line 4, in the flow sequence that starts on line 3; fix or quote the value")),
    ("k: " + "v" * (256 * 1024) + "\n", "line 2: frontmatter is 262147 characters, above the limit"),
    # an unclosed quote is noticed at the closing `---`; the line to fix is where the quote opens
    ('title: "unclosed\ntags: [a]\n', ("line 2: invalid YAML frontmatter: the quoted value that starts on line 2 "
     "is never closed; close the quote (a quote character inside the value: write it twice in '…', as \\\" in "
     "\"…\")")),
    ("date: 2024\nnote: 'it\nx: 1\n", ("line 3: invalid YAML frontmatter: the quoted value that starts on line 3 is "
     "never closed; close the quote")),
])
def test_hostile_frontmatter_refused(yaml_text, message):
    with pytest.raises(NoteError) as info:
        split_frontmatter(f"---\n{yaml_text}---\nbody\n", "source 's': bad.md")
    assert str(info.value).startswith("source 's': bad.md: ") and message in str(info.value)



_IND = "(a key or '- ' item starts in the same column as the others at its level), or quote the value"


@pytest.mark.parametrize("yaml_text, message", [
    # opened and never closed: named where it opens (PyYAML's context mark), not where YAML noticed
    ('title: "unclosed\ntags: [a]\n', ("line 2: invalid YAML frontmatter: the quoted value that starts on line 2 is "
                                      "never closed; close the quote (a quote character inside the value: write it "
                                      "twice in '…', as \\\" in \"…\")")),
    ("a: 1\nb: 'x\n", ("line 3: invalid YAML frontmatter: the quoted value that starts on line 3 is never closed; "
                       "close the quote (a quote character inside the value: write it twice in '…', as \\\" in "
                       "\"…\")")),
    ("tags: [a,\n  b,\n  c\n", ("line 2: invalid YAML frontmatter: the flow sequence ([…]) that starts on line 2 "
                                "is never closed; add the closing ']'")),
    ("a: 1\nb: {x: 1\n", ("line 3: invalid YAML frontmatter: the flow mapping ({…}) that starts on line 3 is never "
                          "closed; add the closing '}'")),
    ("title: t\ntags: [work/meetings\nstatus: draft\n", ("line 3: invalid YAML frontmatter: expected ',' or ']', but "
                                                         "got ':' on line 4, in the flow sequence that starts on line "
                                                         "3; fix or quote the value")),
    ("a: 1\nfoo\nb: 2\n", ("line 3: invalid YAML frontmatter: could not find expected ':' on line 4, in the simple "
                           "key that starts on line 3; fix or quote the value")),
    # a bad indentation: the block mapping (context) starts on line 2, the line to fix is the indented one
    ("title: t\ntags:\n  - a\n  - b\n status: x\nz: 1\n", ("line 6: invalid YAML frontmatter: expected <block "
                                                           "end>, but found '<block mapping start>', in the block "
                                                           "mapping that starts on line 2; check the indentation of "
                                                           f"line 6 {_IND}")),
    ("tags:\n  - a\n - b\n", ("line 4: invalid YAML frontmatter: expected <block end>, but found '<block sequence "
                              "start>', in the block mapping that starts on line 2; check the indentation of line 4 "
                              f"{_IND}")),
    ('a: 1\nb: "x" y\n', ("line 3: invalid YAML frontmatter: expected <block end>, but found '<scalar>', in the "
                          f"block mapping that starts on line 2; check the indentation of line 3 {_IND}")),
    # a bad escape: on its own line, inside the "…" that starts above
    ('a: 1\nb: "abc\n  \\q"\n', ("line 4: invalid YAML frontmatter: found unknown escape character 'q', in the "
                                 "double-quoted scalar that starts on line 3; write a backslash as \\\\ inside "
                                 "\"…\", or use '…' quotes")),
    # a tab
    ("a: 1\nb:\n  - c\n\t- d\n", ("line 5: invalid YAML frontmatter: found character '\\t' that cannot start any "
                                  "token; replace the tab with spaces")),
    # the second of two anchors, the first named
    ("a: &x 1\nb: 2\nc: &x 3\n", ("line 4: invalid YAML frontmatter: found duplicate anchor 'x', first on line 2; "
                                  "rename one of the two anchors")),
    # the second of two keys, both named: one is removed or renamed (quoting a value changes nothing)
    ("title: a\ntags: [x]\ntitle: b\n", ("line 4: invalid YAML frontmatter: duplicate key 'title' on lines 2 "
                                         "and 4; remove or rename one of the two keys")),
    ("a:\n  x: 1\n  x: 2\n", ("line 4: invalid YAML frontmatter: duplicate key 'x' on lines 3 and 4; remove "
                             "or rename one of the two keys")),
    # the 101st alias is on line 5 (its line in the file, not in the YAML block)
    ("t: x\na: &a x\nb: 1\nc: [" + ", ".join(["*a"] * 101) + "]\n", ("line 5: invalid YAML frontmatter: more than "
                                                                     "100 alias references (*name); fix or quote "
                                                                     "the value")),
])
def test_yaml_error_names_the_line_to_fix(yaml_text, message):
    with pytest.raises(NoteError) as info:
        split_frontmatter(f"---\n{yaml_text}---\nbody\n", "n.md")
    assert str(info.value) == f"n.md: {message}"

def test_aliases_within_bounds_still_work():
    fm, _ = split_frontmatter("---\nbase: &b {k: 1}\nx: *b\ny: *b\n<<: *b\n---\n", "x")
    assert fm == {"base": {"k": 1}, "x": {"k": 1}, "y": {"k": 1}, "k": 1}


def test_alias_expansion_budget():
    wide = "a: &a [" + ", ".join(["x"] * 5000) + "]\nb: [" + ", ".join(["*a"] * 30) + "]\n"
    with pytest.raises(NoteError, match="more than 100000 values"):
        split_frontmatter(f"---\n{wide}---\n", "x")


# ---- libyaml fast path (pipeline.common.frontmatter._fast_load) ----

FAST_SAME = [
    "title: Hello\nsource_path: docs/a.md",
    "date: 2026-04-05\nwhen: 2026-04-06T09:30:00\nt: 09:30",
    "a: yes\nb: No\nc: on\nd: ~\ne: null\nf: 0755\ng: 0x1F\nh: 1e3\ni: .inf\nj: -.nan",
    "tags: [a, 'b c', \"d\"]\naliases:\n  - x\n  - y: z",
    "description: >\n  folded\n  text\n\nlong: |\n  kept\n  lines\n",
    "タイトル: 東京の旅行\nタグ: [日本語, テスト]\nemoji: 🎉",
    "url: https://example.com/a?b=c#d\nkey with spaces: 'value: with colon'",
    "nested:\n  a:\n    b:\n      c: [1, 2, {d: e}]",
    "empty_list: []\nempty_map: {}\nquoted: '*not an alias*'\nstar: a * b",
    "? complex key\n: value",
    "multi: \"line one\\nline two \\u00e9\"",
]


@pytest.mark.parametrize("raw", FAST_SAME)
def test_the_libyaml_path_loads_what_the_python_loader_loads(raw: str):
    from pipeline.common import frontmatter as F

    fast = F._fast_load(raw)
    assert fast is not F._SLOW
    assert repr(fast) == repr(F.safe_load(raw))


@pytest.mark.parametrize("raw", [
    "a: &x [1]\nb: *x",                       # anchors: the alias bounds are counted by the Python loader
    "a:\tb",                                   # a tab
    "a: b\x07",                                # a control character
    "a: 1\na: 2",                              # duplicate key: the error message comes from the Python loader
    "a: [1, 2",                                # invalid YAML
    "a: " + "[" * 46 + "]" * 46,               # nested within 5 of MAX_DEPTH
])
def test_the_python_loader_decides_what_the_libyaml_path_cannot_vouch_for(raw: str):
    from pipeline.common import frontmatter as F

    assert F._fast_load(raw) is F._SLOW


def test_errors_name_the_line_as_before_through_the_fast_path():
    with pytest.raises(NoteError) as info:
        split_frontmatter("---\na: 1\na: 2\n---\nbody", "x.md")
    assert str(info.value) == ("x.md: line 3: invalid YAML frontmatter: duplicate key 'a' on lines 2 and 3; "
                               "remove or rename one of the two keys")


def test_render_note_through_a_memo_writes_the_same_bytes(tmp_path):
    from pipeline.common.memo import MemoCache

    fm = {"title": "東京", "tags": ["a", "b"], "when": "2026-04-05", "odd": "line\u2028break"}
    memo = MemoCache(tmp_path / "render.json")
    first = render_note(fm, "body\n", memo)
    assert first == render_note(fm, "body\n") and (memo.misses, memo.hits) == (4, 0)
    assert "\\u6771\\u4EAC" in first            # a line-break character escapes the whole mapping, as without memo
    memo.save()
    again = MemoCache(tmp_path / "render.json")
    assert render_note(dict(fm), "other body", again) == render_note(fm, "other body")
    assert (again.misses, again.hits) == (0, 4)
    plain = {k: v for k, v in fm.items() if k != "odd"}
    changed = {**plain, "title": "大阪"}
    assert render_note(changed, "x", again) == render_note(changed, "x") and "大阪" in render_note(changed, "x", again)
    assert again.misses == 1                      # only the changed entry is dumped again


@pytest.mark.parametrize("text, line, problem", [
    ("---\ntitle: a\ntags: [x]\nn: !!int 12abc\n---\nbody\n", 4,
     "invalid literal for int() with base 10: '12abc'"),
    ("---\ntitle: a\nts: !!int 2025-01-01 25:99:00\n---\n", 3,
     "invalid literal for int() with base 10: '2025-01-01 25'"),
    ("---\nlist:\n  - ok\n  - !!float one\n---\n", 4, "could not convert string to float: 'one'"),
])
def test_an_invalid_value_names_its_own_line(text: str, line: int, problem: str) -> None:
    with pytest.raises(NoteError) as err:
        split_frontmatter(text, "n.md")
    assert str(err.value) == f"n.md: line {line}: invalid value in frontmatter: {problem}; quote the value"


@pytest.mark.parametrize("raw, value", [
    ("2026-02-30", "2026-02-30"),                      # no such day: the string written (it skipped the note)
    ("2025-13-45", "2025-13-45"),
    ("2025-01-01 25:99:00", "2025-01-01 25:99:00"),
    ("0000-01-01", "0000-01-01"),
    ("2026-02-28", "2026-02-28"),                      # a valid date or time as before: its ISO string
    ("2026-04-06 09:30:00", "2026-04-06T09:30:00"),
])
def test_a_date_that_is_none_stays_the_string_written(raw: str, value: str) -> None:
    text = f"---\ntitle: a\ndate: {raw}\nlist:\n  - ok\n  - {raw}\n---\nbody\n"
    assert split_frontmatter(text, "n.md") == ({"title": "a", "date": value, "list": ["ok", value]}, "body\n")
    anchored = f"---\ndate: &d {raw}\nagain: *d\n---\n"             # an anchor: the pure-Python loader
    assert split_frontmatter(anchored, "n.md") == ({"date": value, "again": value}, "")


def test_a_note_saved_as_shift_jis_or_euc_jp_is_named_with_the_command_that_converts_it():
    """Finding of a Japanese note-taker (s37-nu3): a note saved by an older Windows editor in Shift_JIS was skipped
    with "re-save the file as UTF-8", while `capture` of the same bytes named `iconv -f SHIFT_JIS -t UTF-8`. The
    build's line now names the encoding the bytes read as (the one giving Japanese text: the most kana) and the
    command; bytes that read as no Japanese text get no guess."""
    from pipeline.common.errors import NoteError
    from pipeline.common.frontmatter import decode_bytes

    def message(data: bytes) -> str:
        with pytest.raises(NoteError) as err:
            decode_bytes(data, "source 'me': Inbox/sjis.md")
        return str(err.value)

    base = "source 'me': Inbox/sjis.md: not valid UTF-8 (byte {}: invalid start byte); re-save the file as UTF-8"
    assert message("# 文字コード\nシフトJISで保存したメモ。\n".encode("cp932")) == (
        base.format(2) + " (it reads as SHIFT_JIS: e.g. `iconv -f SHIFT_JIS -t UTF-8`)")
    assert message("# 文字コード\nEUCのメモです。\n".encode("euc_jp")) == (
        base.format(4) + " (it reads as EUC-JP: e.g. `iconv -f EUC-JP -t UTF-8`)")
    assert message(b"\xff\xfe\xfa") == base.format(0)                        # no Japanese text: no guess
    assert message("café Ærø".encode("latin-1")).endswith("invalid continuation byte); re-save the file as UTF-8")
