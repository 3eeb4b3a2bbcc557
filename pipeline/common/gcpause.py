"""Python's cyclic garbage collector paused for a block that builds many long-lived objects and few cycles."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause automatic cyclic garbage collection for the block; restore the previous state after, also on an error.

    For a block that loads or builds hundreds of thousands of objects that stay alive to its end (a warehouse
    stage's 27k chunks, their token lists and BM25 arrays; a searcher's key tables): each full pass the collector
    starts as they accumulate walks all of them and frees nothing (a warehouse update of the five shared corpora
    spent ~1.0 s of its ~6 s in 4 such passes). Reference counting still frees everything that is not a cycle;
    cycles made in the block are collected by the first pass after it.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
