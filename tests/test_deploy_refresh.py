"""docs/deploy.md's refresh of a reader host's copy ("Read-only copies per reader host"), run as written against
folders in tmp_path, with `cp` and `mv` logged: until session 48 it copied and swapped the vault, then copied the
warehouse (the slow part) and swapped it, so for that long readers served a vault newer than the warehouse. Now both
are copied aside first and swapped by renames one right after the other, and a pair copied while a build published
is not swapped in."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _recipe() -> str:
    doc = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    section = doc[doc.index("**Read-only copies per reader host.**"):]
    return re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)     # type: ignore[union-attr]


def _setup(tmp_path: Path, publish_during_copy: bool) -> tuple[str, dict[str, str], Path, Path]:
    shared, reader, shims = tmp_path / "shared", tmp_path / "reader", tmp_path / "bin"
    for root, text in ((shared, "new"), (reader, "old")):
        (root / "data").mkdir(parents=True)
        (root / "data" / "warehouse.duckdb").write_text(f"warehouse {text}")
        (root / "vault" / "notes").mkdir(parents=True)
        (root / "vault" / "notes" / f"{text}.md").write_text(f"# {text}")
    shims.mkdir()
    log = tmp_path / "log"
    real_cp, real_mv = shutil.which("cp"), shutil.which("mv")
    once = tmp_path / "published"                   # a build publishes during the first copy of the vault only
    publish = (f'if [ "$1" = -a ] && [ ! -e {once} ]; then touch {once}; printf "warehouse newer" > '
               f"{shared}/data/.w; {real_mv} {shared}/data/.w {shared}/data/warehouse.duckdb; fi\n"
               ) if publish_during_copy else ""
    (shims / "cp").write_text(f'#!/bin/sh\necho "cp $*" >> {log}\n{real_cp} "$@" || exit\n{publish}')
    (shims / "mv").write_text(f'#!/bin/sh\necho "mv $*" >> {log}\nexec {real_mv} "$@"\n')
    for shim in ("cp", "mv"):
        (shims / shim).chmod(0o755)
    script = _recipe().replace("reader=/srv/docsvault ", f"reader={reader} ").replace(
        "shared=/mnt/shared ", f"shared={shared} ")
    return script, {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}"}, reader, log


def _state(reader: Path) -> list[str]:
    return sorted(str(p.relative_to(reader)) for p in reader.rglob("*"))


@pytest.mark.skipif(shutil.which("stat") is None or os.uname().sysname != "Linux", reason="GNU coreutils")
def test_the_refresh_copies_both_aside_then_swaps_them_by_renames(tmp_path: Path) -> None:
    script, env, reader, log = _setup(tmp_path, publish_during_copy=False)
    subprocess.run(["sh", "-c", script], env=env, check=True, timeout=60)
    shared = tmp_path / "shared"
    assert log.read_text().splitlines() == [
        f"cp {shared}/data/warehouse.duckdb data/.warehouse.new", f"cp -a {shared}/vault vault.new",   # copies first
        "mv data/.warehouse.new data/warehouse.duckdb", "mv -T vault vault.old", "mv -T vault.new vault"]  # renames
    assert (reader / "data" / "warehouse.duckdb").read_text() == "warehouse new"
    assert _state(reader) == ["data", "data/warehouse.duckdb", "vault", "vault/notes", "vault/notes/new.md"]
    subprocess.run(["sh", "-c", script], env=env, check=True, timeout=60)      # again: no leftover in the way
    assert _state(reader) == ["data", "data/warehouse.duckdb", "vault", "vault/notes", "vault/notes/new.md"]


@pytest.mark.skipif(shutil.which("stat") is None or os.uname().sysname != "Linux", reason="GNU coreutils")
def test_a_pair_copied_while_a_build_published_is_not_swapped_in(tmp_path: Path) -> None:
    script, env, reader, _log = _setup(tmp_path, publish_during_copy=True)
    subprocess.run(["sh", "-c", script], env=env, check=True, timeout=60)
    assert (reader / "data" / "warehouse.duckdb").read_text() == "warehouse old"
    assert _state(reader) == ["data", "data/warehouse.duckdb", "vault", "vault/notes", "vault/notes/old.md"]
    subprocess.run(["sh", "-c", script], env=env, check=True, timeout=60)      # the next run: the published pair
    assert (reader / "data" / "warehouse.duckdb").read_text() == "warehouse newer"
