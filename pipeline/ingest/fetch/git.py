"""Git sources: shallow, blob-filtered, sparse clone of the configured ``paths`` (GitPython drives the git CLI).

Layout: ``<raw>/<name>/repo`` (the checkout) and ``<raw>/<name>/fetch.json`` (commit, fetched_at, file list).

- First run (or when url/ref/paths changed): ``clone --depth=1 --filter=blob:none --sparse --no-checkout`` into a temp
  folder next to ``repo``, ``sparse-checkout set`` (cone mode for plain folders, ``--no-cone`` as soon as one entry
  holds a glob character — git >= 2.37 takes a glob as a folder name in cone mode and silently checks out nothing,
  EC-22; there a plain entry becomes ``/entry``, which matches a file or a folder), checkout, then swap the folder
  into place. A failure leaves the previous checkout untouched.
- ``paths`` selects the union of its entries (folders, files, globs); an entry that selects no file is a warning
  naming the source and the entry (every entry selecting nothing is an error, see below).
- Later runs: ``ls-remote`` the ref; same commit as recorded -> nothing to do (``changed=False``). Otherwise
  ``fetch --depth=1`` and, only when that succeeded and selects at least one file, ``reset --hard`` to it.
- A 40-hex ``ref`` is a commit id: it is fetched by id (the server must allow it) and compared as is.
- ``token_env`` names an environment variable holding a token for private https remotes. The token is passed to git
  as an ``http.extraHeader`` through ``GIT_CONFIG_*`` environment variables of the git process only: it is never on a
  command line, never in ``.git/config`` and never in logs; error messages have it replaced by ``***``.
- A submodule (gitlink) inside ``paths`` is not fetched (its files are another repository's): a warning names it,
  and the error of a fetch that selects no file names the submodules its ``paths`` hold. A symlink that
  ``include`` selects is not followed either, and named the same way.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import git

from pipeline.common.errors import FetchError
from pipeline.config import Settings, env_value
from pipeline.ingest.fetch.base import (
    is_glob,
    now_iso,
    path_matches,
    read_state,
    select_paths,
    source_dir,
    write_state,
)
from pipeline.models import FetchResult, RawFile, Source

COMMIT_RE = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_USERINFO_RE = re.compile(r"(?<=://)[^/@\s]+@")


def is_commit_id(ref: str | None) -> bool:
    """True when ``ref`` is a full commit id (40 or 64 lower-case hex digits)."""
    return bool(ref and COMMIT_RE.match(ref))


def redact_url(url: str) -> str:
    """The URL with any ``user:password@`` part replaced by ``***@``."""
    return _USERINFO_RE.sub("***@", url)


class _GitRunner:
    """Runs git commands for one source with a clean, non-interactive environment and the auth header if any."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.url = source.url or ""
        self.env: dict[str, str] = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": "",
                                    "LC_ALL": "C", "LANGUAGE": "C"}
        self.secrets: list[str] = []
        if source.token_env:
            token = env_value(source.token_env)
            if not token:
                raise FetchError(
                    f"source '{source.name}': environment variable {source.token_env} (token_env) is not set or "
                    f"empty; export it with a token that can read {redact_url(self.url)}"
                )
            basic = base64.b64encode(f"x-access-token:{token}".encode()).decode("ascii")
            self.secrets = [token, basic]
            self.env.update({
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
            })

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return redact_url(text)

    def error(self, cause: str) -> FetchError:
        return FetchError(self.redact(f"source '{self.source.name}': cannot fetch {self.url}: {cause}"))

    def run(self, args: list[str], cwd: Path | None = None) -> str:
        """Run ``git <args>``; stdout (stripped). Raises FetchError with git's first stderr line as cause."""
        try:
            out = git.Git(str(cwd) if cwd else None).execute(
                ["git", *args], env=self.env, strip_newline_in_stdout=True, stdout_as_string=True
            )
        except git.GitCommandError as exc:
            raise self.error(_first_error_line(exc)) from None
        except (git.GitCommandNotFound, OSError) as exc:
            raise self.error(f"git is not available ({exc.__class__.__name__}); install git >= 2.25") from None
        return str(out)


def _first_error_line(exc: git.GitCommandError) -> str:
    text = str(exc.stderr or "")
    text = re.sub(r"^\s*stderr:\s*'", "", text)
    lines = [ln.strip().rstrip("'").strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    for ln in lines:
        if ln.startswith(("fatal:", "error:")):
            return ln
    return lines[0] if lines else f"git {exc.command[1] if len(exc.command) > 1 else ''} exited with status {exc.status}"


def _remote_commit(runner: _GitRunner, ref: str | None) -> str:
    """Resolve ``ref`` (default HEAD) on the remote with one ``ls-remote``; a commit id resolves to itself."""
    if is_commit_id(ref):
        return str(ref)
    name = ref or "HEAD"
    refs = _refs(runner.run(["ls-remote", runner.url, name, f"{name}^{{}}"]))
    for candidate in (name, f"{name}^{{}}", f"refs/heads/{name}", f"refs/tags/{name}^{{}}", f"refs/tags/{name}"):
        if candidate in refs and not (candidate == name and f"{name}^{{}}" in refs):
            return refs[candidate]
    raise _ref_not_found(runner, name, _ref_hint(runner, name))


def _refs(out: str) -> dict[str, str]:
    """``git ls-remote`` output -> ``{refname: sha}``."""
    refs: dict[str, str] = {}
    for line in out.splitlines():
        sha, _, refname = line.partition("\t")
        if sha and refname:
            refs[refname.strip()] = sha.strip()
    return refs


def _ref_not_found(runner: _GitRunner, ref: str, hint: str) -> FetchError:
    """The error of a ``ref`` the remote does not have, with :func:`_ref_hint`'s ``hint``."""
    return runner.error(f"ref '{ref}' not found on the remote{hint} (check 'ref' in sources.yaml)")


def _ref_hint(runner: _GitRunner, ref: str) -> str:
    """`` (did you mean 'main'?)`` naming the remote's branch or tag closest to ``ref`` (one more ``ls-remote``,
    only after a fetch of ``ref`` failed; :func:`pipeline.ingest.sources.closest_name`); ``""`` when the remote
    has ``ref`` (the failure was something else), none is close, or the listing fails."""
    from pipeline.ingest.sources import closest_name

    try:
        out = runner.run(["ls-remote", "--heads", "--tags", runner.url])
    except FetchError:
        return ""
    names = sorted({re.sub(r"^refs/(heads|tags)/", "", refname).removesuffix("^{}") for refname in _refs(out)})
    if ref in names:
        return ""
    close = closest_name(ref, names)
    return f" (did you mean '{close}'?)" if close else ""


def _in_sparse_paths(path: str, paths: tuple[str, ...]) -> bool:
    if not paths:
        return True
    for p in paths:
        if is_glob(p):
            if path_matches(path, [p]):
                return True
        else:
            folder = p.strip("/")
            if folder in ("", ".") or path == folder or path.startswith(folder + "/"):
                return True
    return False


#: :func:`_tree_entries` of the last few (repository, commit): a commit's tree never changes, and one fetch reads it
#: twice (the selection, then the warnings about what is not read)
_TREES: dict[tuple[str, str], tuple[list[str], list[str], list[str]]] = {}


def _tree_entries(runner: _GitRunner, repo: Path, commit: str) -> tuple[list[str], list[str], list[str]]:
    """(regular files, submodule paths, symlink paths) of a commit's tree, read from the tree objects (no blobs
    needed); one ``git ls-tree`` per repository and commit (:data:`_TREES`)."""
    key = (str(repo), commit)
    if key not in _TREES:
        while len(_TREES) >= 8:
            _TREES.pop(next(iter(_TREES)))
        _TREES[key] = _read_tree(runner, repo, commit)
    return _TREES[key]


def _read_tree(runner: _GitRunner, repo: Path, commit: str) -> tuple[list[str], list[str], list[str]]:
    out = runner.run(["ls-tree", "-r", "-z", "--full-tree", commit], cwd=repo)
    kinds: dict[str, list[str]] = {"file": [], "160000": [], "120000": []}
    for entry in out.split("\x00"):
        meta, _, path = entry.partition("\t")
        mode = meta.split(" ")[0]
        kind = "file" if mode in ("100644", "100755") else mode
        if path and kind in kinds:
            kinds[kind].append(path)
    return kinds["file"], kinds["160000"], kinds["120000"]


def _unfetched_lines(runner: _GitRunner, source: Source, repo: Path, commit: str) -> list[str]:
    """The warnings naming what the source's ``paths`` hold that is not read: submodules (their files are in another
    repository, which a clone does not fetch) and symlinks that ``include``/``exclude`` would select (a symlinked
    note is not followed; a local source says the same of its symlinks)."""
    _, submodules, symlinks = _tree_entries(runner, repo, commit)
    lines = [_submodule_note(source, [p for p in submodules if _in_sparse_paths(p, source.paths)])]
    links = select_paths(source, [p for p in symlinks if _in_sparse_paths(p, source.paths)])
    if links:
        lines.append(f"source '{source.name}': {_first_five(links)} {'is a symlink' if len(links) == 1 else 'are symlinks'} in "
                     f"the repository, which docsvault does not follow: not read (a target is read at its own path "
                     f"when 'paths' selects it)")
    return [ln for ln in lines if ln]


def _first_five(paths: Sequence[str]) -> str:
    """``a, b, c, d, e and 3 more``: the first five of ``paths`` and how many others."""
    return ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")


def _submodule_note(source: Source, submodules: Sequence[str]) -> str:
    """The sentence naming the submodules in ``paths`` ("" when none)."""
    if not submodules:
        return ""
    return (f"source '{source.name}': {_first_five(submodules)} {'is a git submodule' if len(submodules) == 1 else 'are git submodules'}"
            f", whose files live in another repository, which docsvault does not fetch: add that repository as a git "
            f"source of its own to build them")


def _closest_folder(entry: str, tree: Sequence[str]) -> str | None:
    """The folder of the repository a ``paths`` entry that matches no file probably meant (``en/Linking notes`` ->
    ``en/Linking notes and files``, ``Docs`` -> ``docs``): the same path in another case, else the shortest folder
    that starts with it, else the closest spelling (:func:`difflib.get_close_matches`, ratio >= 0.75); None for a
    glob or when none is close. ``tree``: the commit's files."""
    from difflib import get_close_matches

    folder = entry.strip("/")
    if not folder or is_glob(folder):
        return None
    folders = {parent for path in tree for parent in (path.rsplit("/", i)[0] for i in range(1, path.count("/") + 1))}
    folded = {f.casefold(): f for f in sorted(folders)}
    key = folder.casefold()
    if key in folded:
        return folded[key]
    longer = sorted((f for k, f in folded.items() if k.startswith(key)), key=lambda f: (len(f), f))
    if longer:
        return longer[0]
    close = get_close_matches(key, list(folded), n=1, cutoff=0.75)
    return folded[close[0]] if close else None


def _select(runner: _GitRunner, source: Source, repo: Path, commit: str) -> list[str]:
    """The union of what each ``paths`` entry selects (a folder, a file or a glob), after include/exclude.

    Raises:
        FetchError: it selects no file (:func:`_no_files_error`).
    """
    tree, submodules, _ = _tree_entries(runner, repo, commit)
    candidates = [p for p in tree if _in_sparse_paths(p, source.paths)]
    selected = select_paths(source, candidates)
    if not selected:
        inside = [p for p in submodules if _in_sparse_paths(p, source.paths)]
        raise _no_files_error(runner, source, candidates, inside, tree)
    return selected


def _path_warnings(source: Source, selected: list[str], on_disk: set[str], commit: str,
                   tree: Sequence[str] = ()) -> tuple[str, ...]:
    """One warning per ``paths`` entry that selects no file (a typo among entries that do select files, with the
    folder of ``tree``, the commit's files, it probably meant: :func:`_closest_folder`), and one listing the
    selected files the sparse checkout did not write (they would otherwise vanish silently)."""
    warnings = [
        f"source '{source.name}': paths entry '{entry}' matches no file at commit {commit[:12]} "
        f"(include={list(source.include) or 'default *.md/*.mdx/*.markdown/*.canvas'}, "
        f"exclude={list(source.exclude)}); check it against the repository or remove it"
        + (f" (did you mean '{close}'?)" if (close := _closest_folder(entry, tree)) else "")
        for entry in source.paths if not any(_in_sparse_paths(p, (entry,)) for p in selected)
    ]
    missing = [p for p in selected if p not in on_disk]
    if missing:
        warnings.append(f"source '{source.name}': {len(missing)} selected file(s) not in the sparse checkout, "
                        f"skipped: {', '.join(missing[:5])}{', …' if len(missing) > 5 else ''}")
    return tuple(warnings)


def _no_files_error(runner: _GitRunner, source: Source, candidates: Sequence[str] = (),
                    submodules: Sequence[str] = (), tree: Sequence[str] = ()) -> FetchError:
    """The error of a fetch that selects no file; ``candidates``: the files the ``paths`` entries hold, before
    include/exclude (:func:`_rooted_include`); ``submodules``: the submodules they hold (named, see
    :func:`_submodule_note`); ``tree``: the commit's files, for the folders ``paths`` entries that hold none
    probably meant (:func:`_closest_folder`: ``paths: [en/Linking notes]`` gets "did you mean paths: ['en/Linking
    notes and files']?"; before session 45 only "check the folder names")."""
    rooted = _rooted_include(source, candidates)
    meant = {entry: _closest_folder(entry, tree) for entry in source.paths
             if not any(_in_sparse_paths(p, (entry,)) for p in candidates)}
    fixed = [meant.get(entry) or entry for entry in source.paths]
    folders = f": did you mean paths: {fixed}?" if any(meant.values()) else ""
    hint = (f"; include/exclude globs match a file's whole path in the repository, 'paths' folder included: did "
            f"you mean include: {rooted}?" if rooted
            else f" (check the folder names in 'paths' against the repository{folders})")
    if submodules:
        hint = "; " + _submodule_note(source, submodules).removeprefix(f"source '{source.name}': ")
    return runner.error(
        f"no files match paths={list(source.paths) or ['.']} "
        f"include={list(source.include) or 'default *.md/*.mdx/*.markdown/*.canvas'} exclude={list(source.exclude)}"
        + hint
    )


def _rooted_include(source: Source, candidates: Sequence[str]) -> list[str]:
    """``include`` with a ``paths`` folder put in front of its globs that have a ``/`` (a glob without one matches
    a file name at any depth already), when that selects files among ``candidates``: globs written from inside
    the folder (``paths: [en]``, ``include: ["Linking notes and files/**"]``) select nothing, since globs match a
    file's path from the repository's root (``en/Linking notes and files/Aliases.md``). [] when no folder does."""
    if not any("/" in g for g in source.include):
        return []
    for entry in source.paths:
        folder = entry.strip("/")
        if is_glob(folder) or folder in ("", "."):
            continue
        rooted = [f"{folder}/{g.lstrip('/')}" if "/" in g and not g.startswith(folder + "/") else g
                  for g in source.include]
        if select_paths(replace(source, include=tuple(rooted)), candidates):
            return rooted
    return []


def _sparse_set(runner: _GitRunner, source: Source, repo: Path) -> str:
    """Apply sparse-checkout for ``source.paths``; returns the mode used ("cone", "no-cone" or "full")."""
    if not source.paths or any(p.strip("/") in ("", ".") for p in source.paths):
        runner.run(["sparse-checkout", "disable"], cwd=repo)
        return "full"
    if any(is_glob(p) for p in source.paths):
        # a plain entry may be a folder or a file: "/x" (no trailing "/") matches both; "/x/" would drop a file
        patterns = [p if is_glob(p) else "/" + p.strip("/") for p in source.paths]
        runner.run(["sparse-checkout", "set", "--no-cone", *patterns], cwd=repo)
        return "no-cone"
    runner.run(["sparse-checkout", "set", *[p.strip("/") for p in source.paths]], cwd=repo)
    return "cone"


def _checked_out(runner: _GitRunner, source: Source, repo_dir: Path, selected: list[str]) -> set[str]:
    """The selected files present in the checkout. When some are missing (a checkout whose sparse patterns an older
    docsvault wrote, e.g. ``/file.md/``, which matches no file), the patterns are set again first (git then checks
    out the missing files in place)."""
    on_disk = {p for p in selected if (repo_dir / p).is_file()}
    if len(on_disk) < len(selected):
        _sparse_set(runner, source, repo_dir)
        on_disk = {p for p in selected if (repo_dir / p).is_file()}
    return on_disk


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _clone(runner: _GitRunner, source: Source, repo_dir: Path) -> tuple[str, list[str], int, str]:
    """Fresh sparse clone into a temp folder, swapped into ``repo_dir`` when complete.

    Returns (commit, selected source paths, requests made, sparse mode).
    """
    tmp = repo_dir.with_name(f"{repo_dir.name}.tmp-{os.getpid()}")
    _rmtree(tmp)
    requests = 0
    try:
        args = ["clone", "-q", "--depth=1", "--filter=blob:none", "--sparse", "--no-checkout"]
        if source.ref and not is_commit_id(source.ref):
            args += ["--branch", source.ref]
        requests += 1
        try:
            runner.run([*args, runner.url, str(tmp)])
        except FetchError:
            # git says "Remote branch mian not found in upstream origin": name the branch or tag it probably meant
            if source.ref and not is_commit_id(source.ref) and (hint := _ref_hint(runner, source.ref)):
                raise _ref_not_found(runner, source.ref, hint) from None
            raise
        if is_commit_id(source.ref):
            requests += 1
            runner.run(["fetch", "-q", "--depth=1", "--filter=blob:none", "origin", str(source.ref)], cwd=tmp)
            commit = runner.run(["rev-parse", f"{source.ref}^{{commit}}"], cwd=tmp)
        else:
            commit = runner.run(["rev-parse", "HEAD^{commit}"], cwd=tmp)
        selected = _select(runner, source, tmp, commit)
        mode = _sparse_set(runner, source, tmp)
        runner.run(["checkout", "-q", "--detach", commit], cwd=tmp)
        if not any((tmp / p).is_file() for p in selected):
            raise runner.error("sparse checkout produced none of the selected files")
        old = repo_dir.with_name(f"{repo_dir.name}.old-{os.getpid()}")
        if repo_dir.exists():
            os.replace(repo_dir, old)
        os.replace(tmp, repo_dir)
        _rmtree(old)
    except BaseException:
        _rmtree(tmp)
        raise
    return commit, selected, requests, mode


def _update(runner: _GitRunner, source: Source, repo_dir: Path) -> tuple[str, list[str], int]:
    """Fetch the ref shallowly and hard-reset to it only when the fetch succeeded and selects files."""
    target = source.ref if source.ref else "HEAD"
    runner.run(["fetch", "-q", "--depth=1", "--filter=blob:none", "origin", target], cwd=repo_dir)
    commit = runner.run(["rev-parse", "FETCH_HEAD^{commit}"], cwd=repo_dir)
    selected = _select(runner, source, repo_dir, commit)
    runner.run(["reset", "-q", "--hard", commit], cwd=repo_dir)
    return commit, selected, 1


def fetch_git(source: Source, settings: Settings) -> FetchResult:
    """Fetch a git source (see module doc and :func:`pipeline.ingest.fetch.fetch_source`).

    Raises:
        FetchError: ``source '<name>': cannot fetch <url>: <cause>`` — one line, git's first error line as cause, the
            token redacted; also when the sparse paths select zero files. The previous checkout is left untouched.
    """
    started = time.monotonic()
    if not source.url:
        raise FetchError(f"source '{source.name}': kind git needs 'url'")
    runner = _GitRunner(source)
    base = source_dir(source, settings)
    base.mkdir(parents=True, exist_ok=True)
    repo_dir = base / "repo"
    state = read_state(source, settings)
    config = {"url": redact_url(source.url), "ref": source.ref, "paths": list(source.paths)}
    same_config = (
        state is not None
        and all(state.get(k) == v for k, v in config.items())
        and (repo_dir / ".git").is_dir()
        and isinstance(state.get("revision"), str)
    )
    requests = 0
    mode = state.get("sparse_mode", "") if state else ""
    if same_config:
        assert state is not None
        remote = _remote_commit(runner, source.ref)
        requests += 0 if is_commit_id(source.ref) else 1
        head = runner.run(["rev-parse", "HEAD"], cwd=repo_dir)
        if remote == state["revision"] and head == remote:
            selected = _select(runner, source, repo_dir, head)
            commit, moved = head, False
        else:
            commit, selected, n = _update(runner, source, repo_dir)
            requests += n
            moved = True
    else:
        commit, selected, requests, mode = _clone(runner, source, repo_dir)
        moved = True

    on_disk = _checked_out(runner, source, repo_dir, selected)
    files = tuple(RawFile(source=source.name, source_path=unicodedata.normalize("NFC", p), path=repo_dir / p)
                  for p in selected if p in on_disk)
    if not files:
        raise _no_files_error(runner, source)
    warnings = _path_warnings(source, selected, on_disk, commit, _tree_entries(runner, repo_dir, commit)[0]) + tuple(
        _unfetched_lines(runner, source, repo_dir, commit))
    recorded = [f.get("source_path") for f in (state or {}).get("files", [])] if state else []
    changed = moved or [f.source_path for f in files] != recorded
    size = sum(f.path.stat().st_size for f in files) if changed else 0
    stats: dict[str, Any] = {"requests": requests, "bytes": size,
                             "seconds": round(time.monotonic() - started, 3), "files": len(files)}
    result = FetchResult(source=source.name, strategy="git", revision=commit, files=files, changed=changed,
                         stats=stats, warnings=warnings)
    write_state(source, settings, result, now_iso(), {**config, "commit": commit, "sparse_mode": mode})
    return result
