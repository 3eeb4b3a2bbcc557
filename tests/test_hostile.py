"""Issue 8: hostile and malformed input is reported per file and skipped; paths never escape the vault/data dirs.

A local source made of hostile files plus 1,000 generated malformed notes goes through fetch (local), normalize
(+ report files), vault, read-back, chunking and the link graph as the build does; every bad file is named with its
reason, every good note is in the vault and chunked, and nothing is written outside the vault and data dirs.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from pipeline.common.errors import NoteError, SourceConfigError
from pipeline.config import Settings
from pipeline.index.chunk import chunk_note
from pipeline.index.graph import build_graph
from pipeline.ingest.fetch.local import fetch_local
from pipeline.ingest.normalize import normalize_source, write_report
from pipeline.ingest.sources import parse_source
from pipeline.ingest.vault import read_notes, write_source
from pipeline.models import Note, RawFile, Source

FETCHED = "2026-01-01T00:00:00+00:00"

# file -> expected reason fragment (None: a good note that must reach the vault)
HOSTILE: dict[str, tuple[bytes, str | None]] = {
    "invalid-utf8.md": (b"# Title\n\xc3\x28 broken\n", "not valid UTF-8 (byte 8: invalid continuation byte)"),
    "binary.md": (bytes(range(256)) * 4, "binary file (contains NUL bytes)"),
    "empty.md": (b"", "empty file"),
    "blank.md": (b"\n  \n\t\n", "empty file"),
    "fm-only.md": (b"---\ntitle: Only metadata\ndescription: Findable by its description\n---\n", None),
    "invalid-yaml.md": (b"---\ntitle: [unclosed\n---\nbody\n", "invalid YAML frontmatter"),
    "tabs.md": (b"---\ntags:\n\t- a\n---\nbody\n", "line 3: invalid YAML frontmatter"),
    "dup-keys.md": (b"---\ntitle: a\ntitle: b\n---\nbody\n", "duplicate key 'title'"),
    "alias-bomb.md": (("---\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + "---\nbody\n"
    ).encode(), "alias bomb"),
    "deep-yaml.md": (b"---\nx: " + b"[" * 3000 + b"]" * 3000 + b"\n---\nbody\n", "nested"),
    "deep-list.md": ("".join("  " * i + "- item\n" for i in range(400)).encode(), None),
    "unclosed-fm.md": (b"---\ntitle: x\nno closing line\n", "never closed"),
    "not-mapping.md": (b"---\n- a\n- b\n---\nbody\n", "must be a YAML mapping"),
    "long-line.md": (b"# Long\n\n" + b"word " * 200_000 + b"\n", None),
    "ctl\x01name\x1b.md": (b"# Control characters in the name\n", None),
}
BIG = "huge.md"                                # 50 MB: refused by size, never read


def _malformed(i: int, rng: random.Random) -> tuple[bytes, str | None]:
    """The i-th generated malformed note: 60% bad (each with the reason expected), 40% odd but valid Markdown."""
    kind = i % 10
    word = "".join(rng.choice("abcdefgh") for _ in range(6))
    if kind == 0:
        return f"---\ntitle: {word}\nx: [\n---\nbody\n".encode(), "invalid YAML frontmatter"
    if kind == 1:
        return f"---\ntitle: {word}\n".encode(), "never closed"
    if kind == 2:
        return f"# {word}\n".encode() + bytes([0xFF, 0xFE, rng.randrange(256)]), "not valid UTF-8"
    if kind == 3:
        return f"---\n{word}: 1\n{word}: 2\n---\n".encode(), "duplicate key"
    if kind == 4:
        return b"\x00" * rng.randrange(1, 50) + word.encode(), "binary file"
    if kind == 5:
        return f"---\n\t{word}: x\n---\n".encode(), "invalid YAML frontmatter"
    if kind == 6:   # unclosed fences, stray JSX, broken links: valid notes
        return f"# {word}\n\n```\n[[{word}]]\n<Tip>\n[x](../../../etc)\n".encode(), None
    if kind == 7:
        return f"<Note>\n{word} {{/* open\n</Tabs>\n[[{word}#^|]]\n".encode(), None
    if kind == 8:
        return f"---\ntitle: '{word}'\ncreated: 2026-04-05\n---\n{'#' * 9} {word}\n\r\n\r{word}\n".encode(), None
    return f"[[]] [[|]] [[#]] ![[{word}.png]] [{word}](<>) {{% link %}} {{{{ site.x".encode(), None


@pytest.fixture
def hostile_tree(tmp_path: Path) -> tuple[Path, dict[str, str | None]]:
    root = tmp_path / "hostile"
    (root / "gen").mkdir(parents=True)
    expected: dict[str, str | None] = {}
    for name, (data, reason) in HOSTILE.items():
        (root / name).write_bytes(data)
        expected[name] = reason
    with open(root / BIG, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    expected[BIG] = "above the 4 MiB limit"
    rng = random.Random(8)
    for i in range(1000):
        data, reason = _malformed(i, rng)
        (root / "gen" / f"n{i:04d}.md").write_bytes(data)
        expected[f"gen/n{i:04d}.md"] = reason
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n")
    os.symlink(outside / "secret.md", root / "leak.md")
    os.symlink(outside, root / "leakdir")
    os.symlink(root / "loop-b.md", root / "loop-a.md")
    os.symlink(root / "loop-a.md", root / "loop-b.md")
    os.symlink(root / "missing.md", root / "dangling.md")
    os.symlink(root, root / "gen" / "self")          # folder loop
    os.mkfifo(root / "fifo.md")
    try:
        (root / os.fsdecode(b"bad-\xff-name.md")).write_bytes(b"# x\n")
    except OSError:                                   # file systems that refuse non-UTF-8 names
        pass
    return root, expected


def _snapshot(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*")}


def test_hostile_local_source_builds_and_reports_every_bad_file(tmp_path, hostile_tree):
    root, expected = hostile_tree
    settings = Settings(tmp_path / "sources.yaml", tmp_path / "data", tmp_path / "vault", tmp_path / "evals")
    before = _snapshot(tmp_path)
    source = Source(name="hostile", kind="local", path=(root,), format="mdx")

    fetched = fetch_local(source, settings)
    warnings = "\n".join(fetched.warnings)
    assert "skipped symlink leaving the root" in warnings and "leak.md" in warnings
    assert "skipped symlink loop" in warnings and "loop-a.md" in warnings
    assert "skipped dangling or unreadable symlink" in warnings and "dangling.md" in warnings
    assert f"skipped {root / 'fifo.md'}: not a regular file" in warnings
    listed = {f.source_path for f in fetched.files}
    assert "leak.md" not in listed and not any(p.startswith(("leakdir/", "gen/self/")) for p in listed)
    if any("not valid UTF-8" in w for w in fetched.warnings):
        assert not any("bad-" in p for p in listed)

    result = normalize_source(source, fetched.files, FETCHED)
    report = write_report(settings, "hostile", result)
    lines = report["errors"].read_text(encoding="utf-8").splitlines()
    assert lines == result.errors
    bad = {sp: reason for sp, reason in expected.items() if reason}
    good = {sp for sp, reason in expected.items() if reason is None}
    assert len(result.errors) == len(bad)
    for sp, reason in bad.items():
        shown = repr(sp) if not sp.isprintable() else sp
        (line,) = [ln for ln in lines if ln.startswith(f"source 'hostile': {shown}: ")]
        assert reason in line, (sp, line)
    assert all("Traceback" not in ln and "\n" not in ln for ln in lines)

    write_source(settings.vault_dir, "hostile", result.notes)
    back = read_notes(settings.vault_dir, ["hostile"])
    assert {n.source_path for n in back} == good
    assert len(good) == 404
    chunks = [c for n in back for c in chunk_note(n, count_tokens=len, max_tokens=512)]
    assert {c.note_id for c in chunks} == {n.note_id for n in back}
    lg = build_graph(back)
    assert lg.graph.number_of_nodes() == len(back)

    created = _snapshot(tmp_path) - before
    allowed = ("data", "vault")
    assert created and all(p.split("/", 1)[0] in allowed for p in created), sorted(created)[:5]


# ---- paths never escape ----------------------------------------------------------------------------------------

ESCAPING_NAMES = ["../x", "a/b", "a\\b", "c:", "C:\\x", "/abs", "x\x00", "..", ".", "%2e%2e", "a\u2215b", "a\uff0fb",
                  "x.", "con", "lpt1.docs", "x" * 65, "", " x", "Caps", "-lead"]


@pytest.mark.parametrize("name", ESCAPING_NAMES)
def test_escaping_source_names_refused(tmp_path, name):
    with pytest.raises(SourceConfigError, match="'name' must match"):
        parse_source({"name": name, "kind": "local", "path": "."}, tmp_path, "sources.yaml: sources[1]")
    with pytest.raises(NoteError):
        write_source(tmp_path / "vault", name, [])


ESCAPING_PATHS = [
    "../../outside.md", "../../../../../../tmp/x.md", "/etc/passwd", "/abs/path.md", "a/../../b.md",
    "..\\..\\win.md", "C:\\Windows\\x.md", "C:/x.md", "\\\\server\\share\\x.md", "nul\x00byte.md",
    "%2e%2e/%2e%2e/enc.md", "..%2f..%2fenc2.md", "a\u2215..\u2215..\u2215b.md", "\uff0e\uff0e/\uff0e\uff0e/wide.md",
    "trailing.../x.md", "x" * 600 + ".md", "/".join(["deep"] * 200) + ".md", "CON.md", "aux/com1.md",
    ".obsidian/x.md", "~/home.md", "line\nbreak.md", "\u202eevil.md", "a//b///c.md", "./.././x.md",
]


def test_escaping_page_paths_sanitized_and_stay_inside(tmp_path):
    src = tmp_path / "raw"
    src.mkdir()
    raws = []
    for i, sp in enumerate(ESCAPING_PATHS):
        disk = src / f"f{i}.md"
        disk.write_text(f"# Page {i}\n\n[up](../../../x.md) [abs](/etc/passwd)\n", encoding="utf-8")
        raws.append(RawFile("demo", sp, disk))
    source = Source(name="demo", kind="local", site_url="https://ex.org/docs")
    before = _snapshot(tmp_path)
    result = normalize_source(source, raws, FETCHED)
    assert result.errors == []
    assert len({n.rel_path.casefold() for n in result.notes}) == len(ESCAPING_PATHS)
    vault = tmp_path / "vault"
    written = write_source(vault, "demo", result.notes)
    assert len(written.written) == len(ESCAPING_PATHS)
    created = _snapshot(tmp_path) - before
    assert all(p == "vault" or p.startswith("vault/demo") for p in created), sorted(created)[:5]
    files = [p for p in (vault / "demo").rglob("*.md")]
    assert len(files) == len(ESCAPING_PATHS) + 1      # + _index.md
    for p in files:
        rel = p.relative_to(vault / "demo")
        assert p.resolve().is_relative_to((vault / "demo").resolve())
        assert all(len(part.encode()) <= 204 and not part.startswith(".") and part.isprintable()
                   for part in rel.parts)
    assert {n.source_path for n in read_notes(vault, ["demo"])} == set(ESCAPING_PATHS)


def test_hostile_rel_path_in_a_note_is_refused_before_any_write(tmp_path):
    ok = Note("demo", "ok.md", "ok.md", "ok", {}, "x\n")
    for rel in ("../x.md", "/tmp/x.md", "a/../../x.md", "C:/x.md", "x\x00.md", "a\\..\\x.md"):
        with pytest.raises(NoteError):
            write_source(tmp_path / "vault", "demo", [ok, Note("demo", "x", rel, "x", {}, "x\n")])
    assert not (tmp_path / "vault" / "demo" / "ok.md").exists()
    assert _snapshot(tmp_path) <= {"vault", "vault/demo"}


def test_hostile_source_through_the_cli_build(tmp_path, hostile_tree, monkeypatch):
    """The same hostile tree through `docsvault build` (Dagster, fake embedder): exit 0, no traceback on stdout or
    stderr, every bad file in the errors file, the good notes searchable."""
    import json as _json

    from typer.testing import CliRunner

    from pipeline.cli import app

    root, expected = hostile_tree
    (tmp_path / "sources.yaml").write_text(
        f"sources:\n  - name: hostile\n    kind: local\n    path: {root}\n    format: mdx\n", encoding="utf-8")
    for key, value in {"DOCSVAULT_SOURCES": tmp_path / "sources.yaml", "DOCSVAULT_DATA": tmp_path / "data",
                       "DOCSVAULT_VAULT": tmp_path / "vault", "DOCSVAULT_EVALS": tmp_path / "noevals",
                       "DOCSVAULT_MODEL": "hash", "DOCSVAULT_MULTILINGUAL_MODEL": "hash",
                       "DOCSVAULT_CROSSLINGUAL_MODEL": "none",      # fake embedders only: no real model loads
                       "DAGSTER_HOME": tmp_path / "dagster"}.items():
        monkeypatch.setenv(key, str(value))
    runner = CliRunner()
    result = runner.invoke(app, ["build"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    errors = (tmp_path / "data" / "state" / "hostile.errors.txt").read_text(encoding="utf-8").splitlines()
    bad_name = os.fsdecode(b"bad-\xff-name.md") in os.listdir(root)   # a skipped note too, since session 44
    assert len(errors) == sum(1 for reason in expected.values() if reason) + bad_name
    good = sorted(sp for sp, reason in expected.items() if reason is None)
    found = runner.invoke(app, ["search", "--json", "-k", "50", "--source", "hostile", "note"])
    assert found.exit_code == 0 and "Traceback" not in found.output
    assert _json.loads(found.stdout)                          # the good notes are searchable
    assert len(list((tmp_path / "vault" / "hostile").rglob("*.md"))) == len(good) + 1     # + the index note
