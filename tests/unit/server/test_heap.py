"""The start-up heap is frozen out of the collector's way (issue 23: GC pauses)."""

from __future__ import annotations

import gc
import weakref

from riverbed.server.heap import freeze_startup_heap


class _Cell:
    def __init__(self) -> None:
        self.other: object = None


def test_freeze_collects_cycles_first_then_freezes_the_live_heap():
    gc.unfreeze()
    garbage = _Cell()
    garbage.other = garbage  # a cycle only the collector frees
    gone = weakref.ref(garbage)
    del garbage
    live = _Cell()
    try:
        frozen = freeze_startup_heap()
        assert gone() is None  # collected, not frozen for ever
        assert frozen == gc.get_freeze_count() > 0
        # the live object is in the permanent generation: no collection walks it
        assert gc.is_tracked(live) and not any(o is live for o in gc.get_objects())
        assert gc.get_count()[0] < 10  # the young generation starts empty
    finally:
        gc.unfreeze()
    assert any(o is live for o in gc.get_objects())
