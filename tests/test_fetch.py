"""Fetch: git (local bare repos over file://, EC-22), local folders, globs, state on disk."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import git
import pytest

from pipeline.common.errors import FetchError
from pipeline.config import Settings
from pipeline.ingest.fetch import fetch_source, load_fetch_result, path_matches, select_paths
from pipeline.ingest.fetch.base import left_out_templates
from pipeline.ingest.fetch.watch import check_upstream
from pipeline.models import Source

TOOLS = Path("/work/shared/tools/make-git-mirrors")


def _settings(tmp_path: Path) -> Settings:
    return Settings(sources_file=tmp_path / "sources.yaml", data_dir=tmp_path / "data",
                    vault_dir=tmp_path / "vault", evals_dir=tmp_path / "evals")


def _commit(work: git.Repo, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        path = Path(work.working_tree_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    work.index.add(list(files))
    actor = git.Actor("t", "t@localhost")
    return work.index.commit(message, author=actor, committer=actor).hexsha


@pytest.fixture()
def remote(tmp_path: Path):
    """(bare repo path, working repo): README.md, docs/a.md, docs/ja/b.md, src/x.py on branch main."""
    work = git.Repo.init(tmp_path / "work", initial_branch="main")
    _commit(work, {"README.md": "# R\n", "docs/a.md": "# A\n", "docs/ja/b.md": "# B\n", "src/x.py": "x = 1\n"},
            "init")
    bare = tmp_path / "remote.git"
    git.Repo.clone_from(work.working_tree_dir, bare, bare=True)
    with git.Repo(bare).config_writer() as cw:
        cw.set_value("uploadpack", "allowFilter", "true")
        cw.set_value("uploadpack", "allowAnySHA1InWant", "true")
    work.create_remote("origin", str(bare))
    return bare, work


def _git_source(bare: Path, **kw) -> Source:
    return Source(**{"name": "demo", "kind": "git", "url": f"file://{bare}", "ref": "main", "paths": ("docs",), **kw})


@pytest.mark.parametrize("paths", [("docs",), ("docs/**/*.md",)])
def test_ec22_sparse_paths_and_patterns(tmp_path, remote, paths):
    bare, work = remote
    settings = _settings(tmp_path)
    result = fetch_source(_git_source(bare, paths=paths), settings)
    assert [f.source_path for f in result.files] == ["docs/a.md", "docs/ja/b.md"]
    assert result.strategy == "git"
    assert result.revision == work.head.commit.hexsha
    assert result.changed is True
    assert all(f.path.is_file() and f.source == "demo" for f in result.files)
    assert result.files[0].path == settings.raw_dir / "demo" / "repo" / "docs" / "a.md"
    assert set(result.stats) >= {"requests", "bytes", "seconds", "files"}
    assert result.stats["files"] == 2
    assert not (settings.raw_dir / "demo" / "repo" / "src" / "x.py").exists()


def test_second_fetch_unchanged_then_new_commit(tmp_path, remote):
    bare, work = remote
    settings = _settings(tmp_path)
    source = _git_source(bare)
    first = fetch_source(source, settings)
    again = fetch_source(source, settings)
    assert again.changed is False
    assert again.revision == first.revision
    assert again.stats["requests"] == 1 and again.stats["bytes"] == 0
    assert [f.source_path for f in again.files] == ["docs/a.md", "docs/ja/b.md"]

    new = _commit(work, {"docs/c.md": "# C\n"}, "add c")
    work.remote("origin").push("main")
    third = fetch_source(source, settings)
    assert third.changed is True
    assert third.revision == new
    assert [f.source_path for f in third.files] == ["docs/a.md", "docs/c.md", "docs/ja/b.md"]
    assert (settings.raw_dir / "demo" / "repo" / "docs" / "c.md").read_text() == "# C\n"


def test_fetch_json_and_load_fetch_result(tmp_path, remote):
    bare, _ = remote
    settings = _settings(tmp_path)
    source = _git_source(bare)
    assert load_fetch_result(source, settings) is None
    result = fetch_source(source, settings)
    state = json.loads((settings.raw_dir / "demo" / "fetch.json").read_text())
    assert state["revision"] == result.revision
    assert state["strategy"] == "git"
    assert state["file_count"] == 2
    assert state["fetched_at"].endswith("+00:00")
    loaded = load_fetch_result(source, settings)
    assert loaded is not None
    assert loaded.files == result.files and loaded.revision == result.revision and loaded.changed is False


def test_commit_id_ref(tmp_path, remote):
    bare, work = remote
    first = work.head.commit.hexsha
    _commit(work, {"docs/later.md": "# L\n"}, "later")
    work.remote("origin").push("main")
    settings = _settings(tmp_path)
    source = _git_source(bare, ref=first)
    result = fetch_source(source, settings)
    assert result.revision == first
    assert [f.source_path for f in result.files] == ["docs/a.md", "docs/ja/b.md"]
    again = fetch_source(source, settings)
    assert again.changed is False and again.stats["requests"] == 0


def test_tag_ref(tmp_path, remote):
    bare, work = remote
    work.create_tag("v1", message="v1")
    work.remote("origin").push("v1")
    settings = _settings(tmp_path)
    source = _git_source(bare, ref="v1")
    result = fetch_source(source, settings)
    assert result.revision == work.head.commit.hexsha
    assert fetch_source(source, settings).changed is False


def test_a_misspelt_ref_is_offered_the_closest_branch_or_tag(tmp_path, remote):
    """Finding of a new user's run (session 48): `ref: mian` failed with git's line alone, "fatal: Remote branch
    mian not found in upstream origin", where a misspelt `paths:` folder gets "did you mean …?". The remote's
    branch or tag closest to it is named now, on the first fetch and on a later one (ls-remote)."""
    bare, work = remote
    work.create_tag("v1.0", message="v1.0")
    work.remote("origin").push("v1.0")
    settings = _settings(tmp_path)
    for ref, meant in (("mian", "main"), ("v1.O", "v1.0")):
        with pytest.raises(FetchError) as err:
            fetch_source(_git_source(bare, ref=ref), settings)
        assert str(err.value) == (f"source 'demo': cannot fetch file://{bare}: ref '{ref}' not found on the remote "
                                  f"(did you mean '{meant}'?) (check 'ref' in sources.yaml)")
    with pytest.raises(FetchError) as err:           # close to no name: git's own line, as before
        fetch_source(_git_source(bare, ref="release-candidate"), settings)
    assert str(err.value) == (f"source 'demo': cannot fetch file://{bare}: fatal: Remote branch release-candidate "
                              "not found in upstream origin")
    fetch_source(_git_source(bare, ref="main"), settings)
    bare_repo = git.Repo(bare)                      # a later fetch (ls-remote) of a ref the remote no longer has
    bare_repo.git.branch("mains", "main")
    bare_repo.git.update_ref("-d", "refs/heads/main")
    with pytest.raises(FetchError) as err:
        fetch_source(_git_source(bare, ref="main"), settings)
    assert str(err.value) == (f"source 'demo': cannot fetch file://{bare}: ref 'main' not found on the remote "
                              "(did you mean 'mains'?) (check 'ref' in sources.yaml)")


def test_dead_url_raises_and_keeps_old_checkout(tmp_path, remote):
    bare, _ = remote
    settings = _settings(tmp_path)
    source = _git_source(bare)
    fetch_source(source, settings)
    moved = bare.with_name("gone.git")
    bare.rename(moved)
    with pytest.raises(FetchError) as exc:
        fetch_source(source, settings)
    msg = str(exc.value)
    assert msg.startswith(f"source 'demo': cannot fetch file://{bare}: ")
    assert "\n" not in msg and "Traceback" not in msg and "stderr" not in msg
    assert (settings.raw_dir / "demo" / "repo" / "docs" / "a.md").read_text() == "# A\n"
    loaded = load_fetch_result(source, settings)
    assert loaded is not None and len(loaded.files) == 2


def test_fresh_clone_failure_names_source_and_url(tmp_path):
    settings = _settings(tmp_path)
    source = Source(name="nope", kind="git", url=f"file://{tmp_path}/missing.git", paths=("docs",))
    with pytest.raises(FetchError, match=rf"^source 'nope': cannot fetch file://{tmp_path}/missing.git: "):
        fetch_source(source, settings)
    assert not (settings.raw_dir / "nope" / "repo").exists()
    assert [p.name for p in (settings.raw_dir / "nope").iterdir()] == []


def test_zero_matching_files_raises(tmp_path, remote):
    bare, _ = remote
    settings = _settings(tmp_path)
    for paths in (("nothing-here",), ("docs/*.rst",)):
        with pytest.raises(FetchError, match="no files match"):
            fetch_source(_git_source(bare, name="empty", paths=paths), settings)
    assert not (settings.raw_dir / "empty" / "repo").exists()


def test_include_globs_written_from_inside_the_paths_folder_get_the_rooted_globs(tmp_path, remote):
    """`paths: [docs]` with `include: ["ja/**"]` (a glob written from inside the folder) selected nothing, and the
    error said to check the folder names in `paths`, which were right (found by a new user, session 41): globs match
    a file's whole path in the repository. The error now gives the include that selects files."""
    bare, _ = remote
    settings = _settings(tmp_path)
    source = _git_source(bare, name="rel", include=("ja/**", "*.txt"))
    with pytest.raises(FetchError) as exc:
        fetch_source(source, settings)
    assert str(exc.value) == (
        f"source 'rel': cannot fetch file://{bare}: no files match paths=['docs'] include=['ja/**', '*.txt'] "
        "exclude=[]; include/exclude globs match a file's whole path in the repository, 'paths' folder included: "
        "did you mean include: ['docs/ja/**', '*.txt']?")
    result = fetch_source(_git_source(bare, name="rel", include=("docs/ja/**", "*.txt")), settings)
    assert [f.source_path for f in result.files] == ["docs/ja/b.md"]
    with pytest.raises(FetchError) as exc:           # nothing to suggest: the old advice
        fetch_source(_git_source(bare, name="rel2", include=("nowhere/**",)), settings)
    assert str(exc.value).endswith("include=['nowhere/**'] exclude=[] (check the folder names in 'paths' against "
                                   "the repository)")


@pytest.mark.parametrize("paths", [("README.md", "docs/ja/*.md"), ("docs/ja/*.md", "README.md")])
def test_paths_mixing_a_file_and_a_glob_select_the_union(tmp_path, remote, paths):
    bare, _ = remote
    settings = _settings(tmp_path)
    result = fetch_source(_git_source(bare, paths=paths), settings)
    assert [f.source_path for f in result.files] == ["README.md", "docs/ja/b.md"]
    assert result.warnings == ()
    repo = settings.raw_dir / "demo" / "repo"
    assert (repo / "README.md").read_text() == "# R\n"
    assert not (repo / "docs" / "a.md").exists() and not (repo / "src" / "x.py").exists()


def test_paths_mixing_a_folder_a_file_and_a_glob(tmp_path, remote):
    bare, _ = remote
    result = fetch_source(_git_source(bare, paths=("docs/ja", "README.md", "docs/a*.md")), _settings(tmp_path))
    assert [f.source_path for f in result.files] == ["README.md", "docs/a.md", "docs/ja/b.md"]
    assert result.warnings == ()


def test_paths_entry_matching_nothing_is_a_warning(tmp_path, remote):
    bare, work = remote
    settings = _settings(tmp_path)
    source = _git_source(bare, paths=("README.md", "docs/Typo", "docs/ja/*.rst"))
    result = fetch_source(source, settings)
    assert [f.source_path for f in result.files] == ["README.md"]
    rest = f"at commit {work.head.commit.hexsha[:12]} (include=default *.md/*.mdx/*.markdown/*.canvas, exclude=[]); " \
           "check it against the repository or remove it"
    assert result.warnings == (f"source 'demo': paths entry 'docs/Typo' matches no file {rest}",
                               f"source 'demo': paths entry 'docs/ja/*.rst' matches no file {rest}")
    assert fetch_source(source, settings).warnings == result.warnings     # unchanged fetch: still reported
    assert load_fetch_result(source, settings).warnings == result.warnings


def test_paths_entry_matching_nothing_names_the_folder_it_probably_meant(tmp_path, remote):
    """`paths: [en/Linking notes]` (the folder is `en/Linking notes and files`) failed with "check the folder names
    in 'paths' against the repository" and no name to check (a new user, session 45); now the error, and the warning
    of one entry among others, give the folder: the same in another case, one it starts, or a close spelling."""
    bare, work = remote
    settings = _settings(tmp_path)
    with pytest.raises(FetchError) as exc:
        fetch_source(_git_source(bare, paths=("Docs/JA", "srcc")), settings)
    assert str(exc.value) == (
        f"source 'demo': cannot fetch file://{bare}: no files match paths=['Docs/JA', 'srcc'] "
        "include=default *.md/*.mdx/*.markdown/*.canvas exclude=[] (check the folder names in 'paths' against the "
        "repository: did you mean paths: ['docs/ja', 'src']?)")
    result = fetch_source(_git_source(bare, paths=("README.md", "do", "zzz")), settings)
    rest = f"at commit {work.head.commit.hexsha[:12]} (include=default *.md/*.mdx/*.markdown/*.canvas, exclude=[]); " \
           "check it against the repository or remove it"
    assert result.warnings == (f"source 'demo': paths entry 'do' matches no file {rest} (did you mean 'docs'?)",
                               f"source 'demo': paths entry 'zzz' matches no file {rest}")


def test_checkout_missing_a_selected_file_is_repaired(tmp_path, remote):
    """A checkout whose sparse patterns an older docsvault wrote (``/README.md/`` matches no file)."""
    bare, _ = remote
    settings = _settings(tmp_path)
    source = _git_source(bare, paths=("README.md", "docs/ja/*.md"))
    fetch_source(source, settings)
    repo = settings.raw_dir / "demo" / "repo"
    git.Git(str(repo)).execute(["git", "sparse-checkout", "set", "--no-cone", "/README.md/", "docs/ja/*.md"])
    assert not (repo / "README.md").exists()
    result = fetch_source(source, settings)
    assert [f.source_path for f in result.files] == ["README.md", "docs/ja/b.md"]
    assert (repo / "README.md").read_text() == "# R\n"
    assert result.warnings == ()


def test_build_builds_the_union_and_prints_a_paths_entry_matching_nothing(tmp_path, remote, monkeypatch):
    from typer.testing import CliRunner

    from pipeline.cli import app
    from tests.conftest import _tiny_setenv

    bare, work = remote
    (tmp_path / "evals").mkdir()
    (tmp_path / "sources.yaml").write_text(
        f"sources:\n  - name: demo\n    kind: git\n    url: file://{bare}\n    ref: main\n"
        "    paths: [README.md, docs/Typo, 'docs/ja/*.md']\n", encoding="utf-8")
    _tiny_setenv(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["build", "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split()[:3] == ["demo", "built", "2"]
    assert "2 written, 0 removed" in result.stdout.splitlines()[1]
    assert result.stderr.splitlines() == [
        (f"warning: source 'demo': paths entry 'docs/Typo' matches no file at commit {work.head.commit.hexsha[:12]} "
        "(include=default *.md/*.mdx/*.markdown/*.canvas, exclude=[]); check it against the repository or remove it")]
    assert sorted(p.name for p in (tmp_path / "vault" / "demo").rglob("*.md") if p.name != "_index.md") == \
        ["README.md", "b.md"]


def test_include_exclude_on_git(tmp_path, remote):
    bare, _ = remote
    settings = _settings(tmp_path)
    result = fetch_source(_git_source(bare, paths=(), exclude=("docs/ja",)), settings)
    assert [f.source_path for f in result.files] == ["README.md", "docs/a.md"]
    result = fetch_source(_git_source(bare, name="py", paths=(), include=("src/*.py",)), settings)
    assert [f.source_path for f in result.files] == ["src/x.py"]


def test_token_never_in_config_or_errors(tmp_path, remote, monkeypatch):
    bare, _ = remote
    settings = _settings(tmp_path)
    monkeypatch.setenv("DEMO_TOKEN", "s3cr3t-token-value")
    source = _git_source(bare, token_env="DEMO_TOKEN")
    fetch_source(source, settings)
    config = (settings.raw_dir / "demo" / "repo" / ".git" / "config").read_text()
    assert "s3cr3t" not in config
    assert "s3cr3t" not in (settings.raw_dir / "demo" / "fetch.json").read_text()
    bad = _git_source(bare, name="bad", url="https://user:s3cr3t-token-value@127.0.0.1:9/x.git",
                      token_env="DEMO_TOKEN")
    with pytest.raises(FetchError) as exc:
        fetch_source(bad, settings)
    assert "s3cr3t" not in str(exc.value)
    monkeypatch.delenv("DEMO_TOKEN")
    with pytest.raises(FetchError, match="DEMO_TOKEN"):
        fetch_source(source, settings)


def test_http_kinds_unreachable_name_source_and_url(tmp_path):
    for kind in ("llms_txt", "html"):
        source = Source(name="w", kind=kind, url="http://127.0.0.1:9/docs/", rate_limit=0)
        with pytest.raises(FetchError, match=r"^source 'w': cannot fetch .*http://127\.0\.0\.1:9/docs/"):
            fetch_source(source, _settings(tmp_path))


# ---- local ----

def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_local_skips_dot_folders_and_files(tmp_path):
    vault = tmp_path / "Vault"
    _tree(vault, {"Home.md": "# H\n", "sub/Note.md": "n\n", ".obsidian/app.md": "x", ".trash/old.md": "x",
                  ".hidden.md": "x", "sub/.git/x.md": "x", "img.png": "p", "sub/page.mdx": "m"})
    source = Source(name="notes", kind="local", path=(vault,))
    before = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*"))
    result = fetch_source(source, _settings(tmp_path))
    assert [f.source_path for f in result.files] == ["Home.md", "sub/Note.md", "sub/page.mdx"]
    assert result.files[0].path == vault / "Home.md"
    assert result.strategy == "local" and result.changed is True
    assert sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*")) == before


def test_local_obsidian_vault_leaves_out_its_templates_folders(tmp_path):
    """Session 47: an Obsidian vault's templates folder (the core Templates plugin's `.obsidian/templates.json`,
    Templater's `templates_folder`) was built and searched: `docsvault search "coffee"` ranked `Templates/Daily.md
    > {{title}}` first. Those folders are left out of a `format: obsidian` source, also a source that is a folder
    in the vault; an `include` glob that starts with the folder keeps it; another source's folder is no template's."""
    vault = tmp_path / "Vault"
    _tree(vault, {".obsidian/templates.json": '{"folder": "/Meta/Templates/"}',
                  ".obsidian/plugins/templater-obsidian/data.json": '{"templates_folder": "Tpl"}',
                  "Home.md": "# H\n", "Meta/Templates/Daily.md": "# {{title}}\n", "Meta/Other.md": "o\n",
                  "Tpl/Meeting.md": "<% tp.file.title %>\n", "Tplx/Kept.md": "k\n"})
    settings = _settings(tmp_path)
    source = Source(name="notes", kind="local", path=(vault,), format="obsidian")
    assert [f.source_path for f in fetch_source(source, settings).files] == ["Home.md", "Meta/Other.md",
                                                                           "Tplx/Kept.md"]
    meta = Source(name="meta", kind="local", path=(vault / "Meta",), format="obsidian")
    assert [f.source_path for f in fetch_source(meta, settings).files] == ["Other.md"]
    kept = Source(name="kept", kind="local", path=(vault,), format="obsidian", include=("Tpl/**", "**/*.md"))
    assert "Tpl/Meeting.md" in select_paths(kept, ["Tpl/Meeting.md", "Meta/Templates/Daily.md"])
    assert select_paths(kept, ["Meta/Templates/Daily.md"]) == []
    # the folder itself as the glob (it matches what the folder holds): was left out, a source of it empty
    named = Source(name="named", kind="local", path=(vault,), format="obsidian", include=("Tpl", "/Meta/Templates"))
    assert select_paths(named, ["Home.md", "Tpl/Meeting.md", "Meta/Templates/Daily.md", "Tplx/Kept.md"]) == [
        "Meta/Templates/Daily.md", "Tpl/Meeting.md"]
    plain = Source(name="plain", kind="local", path=(vault,), format="markdown")
    assert "Tpl/Meeting.md" in select_paths(plain, ["Tpl/Meeting.md"])
    # what the eval names a case's expected page as in
    assert (left_out_templates(source), left_out_templates(kept), left_out_templates(named),
            left_out_templates(plain)) == (("Meta/Templates", "Tpl"), ("Meta/Templates",), (), ())


def test_local_multi_root_prefix_and_change_detection(tmp_path):
    a, b = tmp_path / "alpha", tmp_path / "beta"
    _tree(a, {"x.md": "1"})
    _tree(b, {"y/z.md": "2"})
    settings = _settings(tmp_path)
    source = Source(name="two", kind="local", path=(b, a))
    first = fetch_source(source, settings)
    assert [f.source_path for f in first.files] == ["alpha/x.md", "beta/y/z.md"]
    second = fetch_source(source, settings)
    assert second.changed is False and second.revision == first.revision
    (a / "x.md").write_text("changed size")
    third = fetch_source(source, settings)
    assert third.changed is True and third.revision != first.revision
    assert load_fetch_result(source, settings).revision == third.revision


def test_local_edit_that_keeps_size_and_mtime_is_a_change(tmp_path):
    """An edit of the same length whose old mtime is put back (`touch -r`, a sync tool that keeps times) is a change:
    before session 44 the revision read size and mtime only, and `docsvault build` said nothing changed for good."""
    import time

    root = tmp_path / "notes"
    _tree(root, {"Oncall.md": "rotate weekly", "img.png": "png"})
    settings = _settings(tmp_path)
    source = Source(name="n", kind="local", path=(root,))
    first = fetch_source(source, settings)
    st = (root / "Oncall.md").stat()
    time.sleep(0.05)                    # past the file system's timestamp granularity
    (root / "Oncall.md").write_text("rotate hourly")
    os.utime(root / "Oncall.md", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (root / "Oncall.md").stat().st_size == st.st_size
    second = fetch_source(source, settings)
    assert second.changed is True and second.revision != first.revision
    assert check_upstream(source, settings).changed is False      # the build's fetch recorded it
    st = (root / "img.png").stat()
    (root / "img.png").write_text("PNG")                            # an embedded image, the same way
    os.utime(root / "img.png", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert check_upstream(source, settings).changed is True
    assert fetch_source(source, settings).changed is True


def test_local_copy_that_keeps_times_and_touch_are_no_change(tmp_path):
    """A copy of the folder that keeps the files' times (`cp -a`: new inodes and ctimes) and a `touch` that changes
    no byte are no change: the revision is of the files' content, read again only where their stat moved."""
    root = tmp_path / "notes"
    _tree(root, {"a.md": "alpha", "sub/b.md": "beta", "sub/c.png": "png"})
    settings = _settings(tmp_path)
    source = Source(name="n", kind="local", path=(root,))
    first = fetch_source(source, settings)
    hashes = json.loads((settings.raw_dir / "n" / "content-hashes.json").read_text())
    assert sorted(Path(k).name for k in hashes) == ["a.md", "b.md", "c.png"]
    shutil.move(root, tmp_path / "old")
    shutil.copytree(tmp_path / "old", root, copy_function=shutil.copy2)
    os.utime(root / "a.md")                                         # touched: a new mtime, the same bytes
    assert check_upstream(source, settings).changed is False
    again = fetch_source(source, settings)
    assert again.changed is False and again.revision == first.revision


def test_local_include_exclude(tmp_path):
    root = tmp_path / "docs"
    _tree(root, {"a.md": "", "drafts/b.md": "", "c.txt": "", "deep/er/d.md": ""})
    settings = _settings(tmp_path)
    result = fetch_source(Source(name="l", kind="local", path=(root,), exclude=("drafts",)), settings)
    assert [f.source_path for f in result.files] == ["a.md", "deep/er/d.md"]
    result = fetch_source(Source(name="l", kind="local", path=(root,), include=("**/*.txt", "deep/**")), settings)
    assert [f.source_path for f in result.files] == ["c.txt", "deep/er/d.md"]


def test_local_symlink_leaving_root_skipped(tmp_path):
    root = tmp_path / "docs"
    _tree(root, {"a.md": "a", "inner.md": "i"})
    (tmp_path / "secret.md").write_text("s")
    os.symlink(tmp_path / "secret.md", root / "leak.md")
    os.symlink(root / "inner.md", root / "alias.md")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "h.md").write_text("h")
    os.symlink(root / ".hidden" / "h.md", root / "shown.md")
    result = fetch_source(Source(name="l", kind="local", path=(root,)), _settings(tmp_path))
    # a link to a note the source lists anyway is one note, not two; a link to an unlisted file is read
    assert [f.source_path for f in result.files] == ["a.md", "inner.md", "shown.md"]
    assert any("leak.md" in w for w in result.warnings)
    assert f"source 'l': skipped symlink {root / 'alias.md'}: it points to inner.md, which this source reads already " \
           "(one note, not two)" in result.warnings


def test_local_missing_root(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FetchError, match=rf"source 'l': local path {missing} does not exist"):
        fetch_source(Source(name="l", kind="local", path=(missing,)), _settings(tmp_path))


def test_local_folder_without_notes_is_an_empty_source(tmp_path):
    root = tmp_path / "Vault"
    _tree(root, {".obsidian/app.json": "{}", "img.png": "p"})
    settings = _settings(tmp_path)
    source = Source(name="l", kind="local", path=(root,))
    result = fetch_source(source, settings)
    assert result.files == () and result.changed is True
    assert result.warnings == (
        f"source 'l' has no notes: no files match under {root} (include=default *.md/*.mdx/*.markdown/*.canvas, exclude=[])",)
    loaded = load_fetch_result(source, settings)
    assert loaded is not None and loaded.files == () and loaded.revision == result.revision


def test_local_unreadable_root_is_an_error_not_an_empty_source(tmp_path, monkeypatch):
    root = tmp_path / "docs"
    _tree(root, {"a.md": "a", "sub/b.md": "b"})
    settings = _settings(tmp_path)
    source = Source(name="l", kind="local", path=(root,))
    fetch_source(source, settings)
    real_scandir = os.scandir

    def scandir(path=".", *args):
        if Path(path) in (root, root / "sub"):     # tests run as root: chmod cannot make a folder unreadable
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path, *args)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(FetchError) as exc:
        fetch_source(source, settings)
    assert str(exc.value) == (f"source 'l': cannot read local path {root}: Permission denied; check the folder's "
                              "permissions (or that its drive is mounted)")
    assert [f.source_path for f in load_fetch_result(source, settings).files] == ["a.md", "sub/b.md"]
    monkeypatch.setattr(os, "scandir", lambda path=".", *a: scandir(path, *a) if Path(path) != root
                        else real_scandir(path, *a))
    result = fetch_source(source, settings)        # an unreadable subfolder: skipped with a warning
    assert [f.source_path for f in result.files] == ["a.md"]
    assert result.warnings == (f"source 'l': skipped unreadable folder {root / 'sub'}: Permission denied",)


def test_glob_semantics():
    assert path_matches("docs/a.md", ["*.md"])
    assert path_matches("docs/a.md", ["docs/**/*.md"])
    assert path_matches("docs/x/y/b.md", ["docs/**/*.md"])
    assert not path_matches("src/a.md", ["docs/**/*.md"])
    assert not path_matches("docs/x/b.md", ["docs/*.md"])
    assert path_matches("docs/v3/api-ref/x.mdx", ["api-ref"])
    assert path_matches("a/b.md", ["a/b.[mM]d"])
    src = Source(name="s", kind="local")
    assert select_paths(src, ["b.mdx", "a.md", "c.markdown", "d.txt", "a.md"]) == ["a.md", "b.mdx", "c.markdown"]


@pytest.mark.integration
@pytest.mark.skipif(not TOOLS.exists() or shutil.which("git") is None, reason="mirror tool not available")
def test_integration_obsidian_help_mirror(tmp_path):
    out = subprocess.run([str(TOOLS), str(tmp_path / "mirrors"), "obsidian-help"], check=True,
                         capture_output=True, text=True).stdout
    assert "obsidian-help" in out
    source = Source(name="obsidian-help", kind="git", url=f"file://{tmp_path}/mirrors/obsidian-help.git",
                    ref="main", paths=("en",), format="obsidian")
    settings = _settings(tmp_path)
    result = fetch_source(source, settings)
    assert len(result.files) == 173
    assert "en/Linking notes and files/Internal links.md" in [f.source_path for f in result.files]
    assert fetch_source(source, settings).changed is False


def test_submodule_in_paths_is_named_not_silently_empty(tmp_path, remote):
    """A submodule inside `paths` (docs/ext, a docs repository pulled in as a submodule) was skipped without a word:
    its notes were simply missing from the vault (found by the s42 hostile tester). The fetch now names it, and a
    `paths` entry that is only a submodule fails saying so instead of "check the folder names"."""
    bare, work = remote
    sub = git.Repo.init(tmp_path / "sub", initial_branch="main")
    _commit(sub, {"Sub.md": "# Sub\n"}, "sub")
    subprocess.run(["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(tmp_path / "sub"),
                    "docs/ext"], cwd=work.working_tree_dir, check=True, capture_output=True)
    actor = git.Actor("t", "t@localhost")
    work.index.commit("submodule", author=actor, committer=actor)
    work.remote("origin").push("main:main")
    settings = _settings(tmp_path)
    result = fetch_source(_git_source(bare), settings)
    assert [f.source_path for f in result.files] == ["docs/a.md", "docs/ja/b.md"]
    assert result.warnings == (
        ("source 'demo': docs/ext is a git submodule, whose files live in another repository, which docsvault does "
         "not fetch: add that repository as a git source of its own to build them"),)
    assert fetch_source(_git_source(bare), settings).warnings == result.warnings     # unchanged fetch: still said
    assert fetch_source(_git_source(bare, name="nosub", paths=("docs/ja",)), settings).warnings == ()
    with pytest.raises(FetchError) as exc:
        fetch_source(_git_source(bare, name="only", paths=("docs/ext",)), settings)
    assert str(exc.value) == (
        f"source 'only': cannot fetch file://{bare}: no files match paths=['docs/ext'] include=default "
        "*.md/*.mdx/*.markdown/*.canvas exclude=[]; docs/ext is a git submodule, whose files live in another "
        "repository, which docsvault does not fetch: add that repository as a git source of its own to build them")


def test_a_symlinked_note_in_the_repository_is_named_not_silently_left_out(tmp_path, remote):
    """`docs/Intro.md -> ../README.md` in a git source was dropped without a word (found by the s42 hostile
    tester); a local source names its symlinks, a git source now too (only those `include` selects)."""
    bare, work = remote
    root = Path(work.working_tree_dir)
    (root / "docs" / "Intro.md").symlink_to("../README.md")
    (root / "docs" / "x.py").symlink_to("../src/x.py")                  # not selected by include: not named
    work.index.add(["docs/Intro.md", "docs/x.py"])
    actor = git.Actor("t", "t@localhost")
    work.index.commit("links", author=actor, committer=actor)
    work.remote("origin").push("main:main")
    result = fetch_source(_git_source(bare), _settings(tmp_path))
    assert [f.source_path for f in result.files] == ["docs/a.md", "docs/ja/b.md"]
    assert result.warnings == (
        ("source 'demo': docs/Intro.md is a symlink in the repository, which docsvault does not follow: not read (a "
         "target is read at its own path when 'paths' selects it)"),)


def test_local_root_inside_another_root_is_an_error_not_every_note_twice(tmp_path):
    """Finding of a new user's run (session 44): ``path: [notes, notes/daily]`` built every daily note twice
    (``notes/daily/x.md`` and ``daily/x.md``: two notes, two search hits, a link to either ambiguous) without a
    word. Now `sources validate` names the inner root, and the fetch fails that source (its last copy serves)."""
    from pipeline.ingest.sources import check_local_paths, load_sources

    _tree(tmp_path / "notes", {"Home.md": "# H\n", "daily/2026-12-01.md": "# d\n"})
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  - name: me\n    kind: local\n    path: [notes, notes/daily]\n", encoding="utf-8")
    source = load_sources(sources)[0]
    problem = (f"source 'me': local root {tmp_path / 'notes' / 'daily'} is inside {tmp_path / 'notes'}, another of "
               "its 'path' folders, so its notes would be read twice (notes/daily/… and daily/…); remove "
               f"{tmp_path / 'notes' / 'daily'} from 'path' (the outer folder reads it)")
    assert check_local_paths([source], sources) == [f"{sources}: line 4: {problem}"]
    with pytest.raises(FetchError) as info:
        fetch_source(source, _settings(tmp_path))
    assert str(info.value) == problem
    sources.write_text("sources:\n  - name: me\n    kind: local\n    path: [notes/daily, other]\n", encoding="utf-8")
    assert load_sources(sources)[0].path == (tmp_path / "notes" / "daily", tmp_path / "other")
    assert check_local_paths(load_sources(sources), sources) == [
        f"{sources}: line 4: sources[1] (source 'me'): 'path' {tmp_path / 'other'} does not exist; create the folder "
        f"or fix 'path' (a relative one is read from {tmp_path})"]
