from pathlib import Path

import pytest

from pipeline.errors import SourceConfigError
from pipeline.sources import load_sources, select_sources


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
    ("  - name: x\n    kind: svn\n    url: https://a", "sources[1] (source 'x'): 'kind' must be one of ['git', 'llms_txt', 'html', 'local'], got 'svn'"),
    ("  - name: x\n    kind: git", "sources[1] (source 'x'): kind 'git' needs 'url'"),
    ("  - name: x\n    kind: local\n    path: d\n    fromat: mdx", "sources[1] (source 'x'): unknown key(s) ['fromat']"),
    ("  - name: x\n    kind: local\n    path: d\n    format: rst", "sources[1] (source 'x'): 'format' must be one of"),
    ("  - name: Bad Name\n    kind: local\n    path: d", "sources[1]: 'name' must match"),
    ("  - name: ../evil\n    kind: local\n    path: d", "sources[1]: 'name' must match"),
    ("  - name: x\n    kind: git\n    url: https://a\n    paths: ['../up']", "'paths' entries are folders inside the repository"),
    ("  - name: x\n    kind: local\n    path: d\n  - name: x\n    kind: local\n    path: e", "sources[2]: duplicate source name 'x'"),
])
def test_invalid_blocks_name_source_and_key(tmp_path: Path, block: str, expected: str) -> None:
    p = write(tmp_path, "sources:\n" + block + "\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(p)
    assert str(err.value).startswith(str(p))
    assert expected in str(err.value)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    p = write(tmp_path, "sources:\n  - name: x\n    kind: [local\n")
    with pytest.raises(SourceConfigError, match=r"sources.yaml: line \d+ is not valid YAML"):
        load_sources(p)


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(SourceConfigError, match="sources file not found"):
        load_sources(tmp_path / "nope.yaml")


def test_select_unknown_lists_known(tmp_path: Path) -> None:
    p = write(tmp_path, "sources:\n  - name: a\n    kind: local\n    path: d\n")
    with pytest.raises(SourceConfigError, match=r"unknown source\(s\) \['b'\]; known sources: \['a'\]"):
        select_sources(load_sources(p), ["b"])
