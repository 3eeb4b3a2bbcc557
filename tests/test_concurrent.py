"""Search keeps working while a build publishes: zero errors, old -> new without a mixed state."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pipeline.config import Settings
from pipeline.search.searcher import Searcher

OLD = "# Ducks\n\nDucks swim in the pond and eat bread. A duck is a water bird.\n"
NEW = "# Ducks\n\nDucks paint zebra stripes on their feathers before the parade.\n"
QUERY = "ducks zebra stripes"


def _state(hits: list) -> str:
    """'old' or 'new' from one search, checking that its lanes and texts come from the same warehouse version."""
    ducks = [h for h in hits if h.vault_path == "tiny/Ducks.md"]
    assert ducks, [h.vault_path for h in hits]
    snippet = ducks[0].snippet
    if snippet == " ".join(NEW.split("\n\n", 1)[1].split()):
        # the BM25 index of the same file must know "zebra": Ducks is ranked by the bm25 lane
        assert "bm25" in ducks[0].lanes, ducks[0]
        return "new"
    assert snippet == " ".join(OLD.split("\n\n", 1)[1].split()), snippet
    # the old BM25 index has no "zebra"/"stripes"; "ducks" alone still ranks the old note, from the old text
    return "old"


@pytest.mark.integration   # ~20 s: two builds of the tiny vault
def test_searches_during_a_build_switch_from_old_to_new(tiny_env: Path) -> None:
    from pipeline.defs.runner import run_build

    settings = Settings.from_env()
    assert run_build(settings).ok
    path = settings.warehouse_path
    inode_before = path.stat().st_ino
    held = Searcher(path)                                    # a reader that stays open across the swap
    assert _state(held.search(QUERY, k=5)) == "old"

    (tiny_env / "tinyvault" / "Ducks.md").write_text(NEW, encoding="utf-8")
    states: list[str] = []
    errors: list[BaseException] = []
    build_done = threading.Event()
    stop = threading.Event()

    def search_loop() -> None:
        after_build = 0
        while not stop.is_set():
            try:
                s = Searcher(path)                           # a fresh reader per iteration, as a CLI call is
                try:
                    states.append(_state(s.search(QUERY, k=5)))
                finally:
                    s.close()
            except BaseException as exc:                    # noqa: BLE001 - every failure counts
                errors.append(exc)
            if build_done.is_set():
                after_build += 1
                if after_build >= 3:
                    return
            time.sleep(0.01)

    worker = threading.Thread(target=search_loop)
    worker.start()
    try:
        report = run_build(settings)
    finally:
        build_done.set()
        worker.join(timeout=120)
        stop.set()
    assert report.ok, (report.sources, report.shared_error)
    assert errors == []
    print(f"states: {states.count('old')} old, {states.count('new')} new")
    assert states.count("old") >= 1 and states[-1] == "new"
    first_new = states.index("new")
    assert set(states[first_new:]) == {"new"}                 # switched once, never back
    # published by os.replace of a complete file: a new inode, no temp file left, the old reader still serves
    assert path.stat().st_ino != inode_before
    assert list(path.parent.glob(f"{path.name}.tmp-*")) == []
    assert _state(held.search(QUERY, k=5)) == "old"
    held.close()
