"""Issue 19: the vault is a pure function of the sources' content. Bare links whose name is also a note of another
source (or of the user's own folder) are qualified from the other sources' notes, not from what their vault folders
hold at the moment, so a rebuild with nothing changed writes no note and embeds nothing, whatever the order in
which the sources are written and whatever the vault held before."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline import stages as b
from pipeline.config import Settings
from pipeline.index.embed import load_embedder
from pipeline.ingest.sources import load_sources

ALPHA = {
    "Home.md": "# Home\n\nStart with [[Setup]], then [[Only alpha]] and [[Mine]].\n",
    "guide/Setup.md": "# Setup\n\nBack to [[Home|the start]]; see also [[Setup#Steps]].\n\n## Steps\n\nOne.\n",
    "Only alpha.md": "# Only alpha\n\nNothing else is called so. [[Home]]\n",
    "Mine.md": "# Mine\n\nAlpha's own page named like the user's inbox note. [[Only alpha]]\n",
}
BETA = {
    "Home.md": "# Home\n\nBeta's start: [[Setup]] and [[Only beta]].\n",
    "Setup.md": "# Setup\n\nInstall beta. [[Home]]\n",
    "Only beta.md": "# Only beta\n\nUnique to beta. [[Setup|setting up]]\n",
}
HOME_ALPHA = ("---\n", "# Home\n\nStart with [[alpha/guide/Setup|Setup]], then [[Only alpha]] and [[alpha/Mine|Mine]].\n")
SETUP_BETA = "# Setup\n\nInstall beta. [[beta/Home|Home]]\n"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Two local sources whose notes share names (Home, Setup) and a user folder in the vault (Inbox/Mine.md)."""
    _write(tmp_path / "alpha", ALPHA)
    _write(tmp_path / "beta", BETA)
    _write(tmp_path / "vault" / "Inbox", {"Mine.md": "my own note\n"})
    block = "  - name: {0}\n    kind: local\n    path: {1}\n    format: obsidian\n"
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n" + block.format("alpha", tmp_path / "alpha") + block.format("beta", tmp_path / "beta"),
                       encoding="utf-8")
    for key, value in {"DOCSVAULT_SOURCES": sources, "DOCSVAULT_DATA": tmp_path / "data",
                       "DOCSVAULT_VAULT": tmp_path / "vault", "DOCSVAULT_EVALS": tmp_path / "evals",
                       "DOCSVAULT_MODEL": "hash", "DOCSVAULT_MULTILINGUAL_MODEL": "hash",
                       "DOCSVAULT_CROSSLINGUAL_MODEL": "none", "DAGSTER_HOME": tmp_path / "dagster"}.items():
        monkeypatch.setenv(key, str(value))
    return Settings.from_env()


def build(settings: Settings, order: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The per-source stages breadth first (every source's fetch, then every normalize, ...), the sources in
    ``order``, as `docsvault build` runs them; returns "<stage>/<source>" -> metadata."""
    sources = {s.name: s for s in load_sources(settings.sources_file)}
    out: dict[str, dict[str, Any]] = {}
    for stage, run in (("fetch", lambda s: b.fetch_stage(settings, s)),
                       ("normalize", lambda s: b.normalize_stage(settings, s)),
                       ("vault", lambda s: b.vault_stage(settings, s)),
                       ("chunk", lambda s: b.chunk_stage(settings, s, load_embedder)),
                       ("embed", lambda s: b.embed_stage(settings, s, load_embedder))):
        for name in order:
            out[f"{stage}/{name}"] = run(sources[name])
    return out


def vault_files(settings: Settings) -> dict[str, tuple[int, int]]:
    root = settings.vault_dir
    return {p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, p.stat().st_ino) for p in sorted(root.rglob("*.md"))}


def test_first_build_qualifies_against_every_source_whatever_the_order(settings: Settings) -> None:
    first = build(settings, ("alpha", "beta"))
    # alpha: Setup, Mine (user's Inbox), Home (x2: in Setup and Only alpha) and Setup#Steps; beta: Setup x2, Home
    assert (first["vault/alpha"]["qualified_links"], first["vault/beta"]["qualified_links"]) == (5, 3)
    home = (settings.vault_dir / "alpha" / "Home.md").read_text(encoding="utf-8")
    assert home.startswith(HOME_ALPHA[0]) and home.endswith(HOME_ALPHA[1])
    assert (settings.vault_dir / "beta" / "Setup.md").read_text(encoding="utf-8").endswith(SETUP_BETA)
    assert (first["embed/alpha"]["embedded"], first["embed/beta"]["embedded"]) == (4, 3)


@pytest.mark.parametrize("order", [("alpha", "beta"), ("beta", "alpha")])
def test_rebuild_with_nothing_changed_rewrites_no_note_and_embeds_nothing(settings: Settings,
                                                                          order: tuple[str, str]) -> None:
    build(settings, order)
    before = vault_files(settings)
    again = build(settings, order[::-1])          # the other order: still nothing to do
    for name in ("alpha", "beta"):
        assert again[f"vault/{name}"]["written"] == 0
        assert again[f"vault/{name}"]["skipped"] is True
        assert again[f"chunk/{name}"]["skipped"] is True
        assert again[f"embed/{name}"]["embedded"] == 0
    assert vault_files(settings) == before


def test_a_sources_notes_do_not_depend_on_another_sources_vault_folder(settings: Settings) -> None:
    """beta's vault folder gone (or half written by an interrupted build): alpha's notes stay byte for byte."""
    build(settings, ("alpha", "beta"))
    before = vault_files(settings)
    shutil.rmtree(settings.vault_dir / "beta")
    again = build(settings, ("alpha", "beta"))
    assert again["vault/alpha"]["skipped"] is True and again["vault/alpha"]["written"] == 0
    assert again["vault/beta"]["written"] == 3                 # its own notes come back ...
    assert (again["embed/alpha"]["embedded"], again["embed/beta"]["embedded"]) == (0, 0)   # ... as they were
    after = vault_files(settings)
    assert sorted(after) == sorted(before)
    assert {k: v for k, v in after.items() if k.startswith("alpha/")} == \
        {k: v for k, v in before.items() if k.startswith("alpha/")}


def test_a_dagster_rebuild_with_nothing_changed_writes_no_note(settings: Settings) -> None:
    """The same through `docsvault build`'s Dagster run (the in-process executor runs the steps breadth first)."""
    from pipeline.defs.runner import run_build

    first = run_build(settings)
    assert first.ok, [(s.name, s.error) for s in first.sources]
    assert {s.name: s.metadata["vault"]["qualified_links"] for s in first.sources} == {"alpha": 5, "beta": 3}
    before = vault_files(settings)
    again = run_build(settings)
    assert again.ok
    assert {s.name: (s.metadata["vault"]["written"], s.metadata["embeddings"]["embedded"])
            for s in again.sources} == {"alpha": (0, 0), "beta": (0, 0)}
    assert again.shared_metadata["warehouse"]["mode"] == "unchanged"
    assert vault_files(settings) == before


def test_a_name_another_source_gains_is_qualified_in_one_build(settings: Settings, tmp_path: Path) -> None:
    build(settings, ("alpha", "beta"))
    _write(tmp_path / "beta", {"Only alpha.md": "# Only alpha\n\nBeta now has a page of that name too.\n"})
    changed = build(settings, ("beta", "alpha"))
    assert changed["vault/alpha"]["skipped"] is False and changed["vault/alpha"]["qualified_links"] == 7
    assert (changed["vault/alpha"]["written"], changed["vault/beta"]["written"]) == (2, 1)
    home = (settings.vault_dir / "alpha" / "Home.md").read_text(encoding="utf-8")
    assert home.endswith("then [[alpha/Only alpha|Only alpha]] and [[alpha/Mine|Mine]].\n")
    again = build(settings, ("alpha", "beta"))                  # converged: the next build writes nothing
    assert [again[f"vault/{n}"]["written"] for n in ("alpha", "beta")] == [0, 0]
    assert [again[f"embed/{n}"]["embedded"] for n in ("alpha", "beta")] == [0, 0]
