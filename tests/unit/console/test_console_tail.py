"""The live tail's hand-over to the event loop: bounded, and a slow browser is told how
many records it lost (without a cluster: `Tail._put` runs on the loop)."""

from __future__ import annotations

import asyncio
from typing import Any

from riverbed.console.admin import TopicRow
from riverbed.console.browse import Filters, Found, Shown
from riverbed.console.tail import TAIL_QUEUE_MAX, Dropped, Tail


def _found(offset: int) -> Found:
    empty = Shown("", "text", False)
    return Found(0, offset, None, empty, empty, ())


def test_a_full_queue_drops_and_then_says_how_many() -> None:
    """The queue holds TAIL_QUEUE_MAX; 5 more are dropped; two slots free up; the next
    record arrives behind a notice of the 5."""

    async def run() -> list[Any]:
        admin: Any = object()  # never used: the thread is not started
        tail = Tail(admin, TopicRow("t", ()), Filters(), "auto", asyncio.get_running_loop())
        for i in range(TAIL_QUEUE_MAX + 5):
            tail._put(_found(i))
        assert tail.queue.full()
        first = [tail.queue.get_nowait() for _ in range(2)]
        tail._put(_found(TAIL_QUEUE_MAX + 5))
        rest = [tail.queue.get_nowait() for _ in range(tail.queue.qsize())]
        return first + rest

    items = asyncio.run(run())
    offsets = [i.offset for i in items if isinstance(i, Found)]
    assert offsets[:TAIL_QUEUE_MAX] == list(range(TAIL_QUEUE_MAX))
    # 5 dropped while full; once two slots are free the browser hears of the 5, then
    # gets the next record
    assert items[TAIL_QUEUE_MAX:] == [Dropped(5), _found(TAIL_QUEUE_MAX + 5)]


def test_the_notice_waits_for_room_for_itself() -> None:
    async def run() -> list[Any]:
        admin: Any = object()
        tail = Tail(admin, TopicRow("t", ()), Filters(), "auto", asyncio.get_running_loop())
        for i in range(TAIL_QUEUE_MAX + 3):
            tail._put(_found(i))
        tail.queue.get_nowait()  # one slot: the notice takes it, the record is dropped
        tail._put(_found(TAIL_QUEUE_MAX + 3))
        tail.queue.get_nowait()
        tail._put(_found(TAIL_QUEUE_MAX + 4))  # one slot again: a notice of that one
        return [tail.queue.get_nowait() for _ in range(tail.queue.qsize())]

    items = asyncio.run(run())
    # every lost record is counted in exactly one notice, even when notices fill the room
    assert items[-2:] == [Dropped(3), Dropped(1)]
    assert not any(isinstance(i, Found) and i.offset >= TAIL_QUEUE_MAX for i in items)
