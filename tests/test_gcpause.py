"""collector_paused: automatic cyclic GC off inside the block, the previous state back after it."""

from __future__ import annotations

import gc

import pytest

from pipeline.common.gcpause import collector_paused


def test_collector_paused_restores_the_state_it_found():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("a stage failed")
    assert gc.isenabled()                   # back on after an error
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()           # it was off before: it stays off
    finally:
        gc.enable()

