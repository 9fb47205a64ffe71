"""Delayed-operation purgatory: wake-ups by key, timeouts, the waiter bound, shutdown.

Wake-ups are checked against timeouts far longer than the test's liveness guard
(``asyncio.wait_for(..., GUARD_S)``): a parked operation that was not woken would make
the guard fail, so no test asserts on how long anything took.
"""

from __future__ import annotations

import asyncio

from riverbed.server.purgatory import Purgatory

#: Operations that must be woken wait up to this long; the guard below is much shorter.
PARK_MS = 600_000
GUARD_S = 30


def test_notify_wakes_only_watchers_of_that_key() -> None:
    async def main() -> tuple[bool, bool]:
        p = Purgatory()
        state = {"a": 0, "b": 0}
        wa = asyncio.create_task(p.wait_until(["a"], lambda: state["a"] > 0, PARK_MS))
        wb = asyncio.create_task(p.wait_until(["b"], lambda: state["b"] > 0, PARK_MS))
        await asyncio.sleep(0)
        assert p.parked == 2
        state["a"] = 1
        state["b"] = 1  # changed, but nobody notifies "b": wb must stay parked
        p.notify("a")
        ra = await asyncio.wait_for(wa, GUARD_S)
        await asyncio.sleep(0.05)
        assert not wb.done() and p.parked == 1
        p.notify("b")
        rb = await asyncio.wait_for(wb, GUARD_S)
        assert p.parked == 0
        return ra, rb

    assert asyncio.run(main()) == (True, True)


def test_timeout_returns_false_and_spurious_notify_keeps_waiting() -> None:
    async def main() -> tuple[bool, bool]:
        p = Purgatory()
        task = asyncio.create_task(p.wait_until([("t", 0)], lambda: False, 200))
        await asyncio.sleep(0)
        p.notify(("t", 0))  # not ready: stays parked
        await asyncio.sleep(0)
        still_parked = not task.done()
        return still_parked, await asyncio.wait_for(task, GUARD_S)

    assert asyncio.run(main()) == (True, False)


def test_bound_answers_immediately_when_full() -> None:
    async def main() -> tuple[bool, int]:
        p = Purgatory(waiters_max=2)
        parked = [
            asyncio.create_task(p.wait_until(["k"], lambda: False, PARK_MS)) for _ in range(2)
        ]
        await asyncio.sleep(0)
        # Not parked (full): answered at once even with a very long timeout.
        extra = await asyncio.wait_for(p.wait_until(["k"], lambda: False, PARK_MS), GUARD_S)
        count = p.parked
        p.close()
        await asyncio.wait_for(asyncio.gather(*parked), GUARD_S)
        return extra, count

    assert asyncio.run(main()) == (False, 2)


def test_close_releases_parked_operations() -> None:
    async def main() -> bool:
        p = Purgatory()
        task = asyncio.create_task(p.wait_until(["k"], lambda: False, PARK_MS))
        await asyncio.sleep(0)
        p.close()
        result = await asyncio.wait_for(task, GUARD_S)
        # A closed purgatory parks nothing more.
        again = await asyncio.wait_for(p.wait_until(["k"], lambda: False, PARK_MS), GUARD_S)
        return result or again

    assert asyncio.run(main()) is False


def test_checked_skips_the_first_check_and_still_wakes() -> None:
    """A fetch that has just read its partitions parks with ``checked=True``: ``ready``
    is not called again before parking (it re-reads every partition, once per follower
    cycle), only after each notification."""

    async def main() -> tuple[int, int, bool]:
        p = Purgatory()
        calls = {"n": 0}
        state = {"ready": False}

        def ready() -> bool:
            calls["n"] += 1
            return state["ready"]

        task = asyncio.create_task(p.wait_until(["k"], ready, PARK_MS, checked=True))
        await asyncio.sleep(0)
        parked_calls = calls["n"]
        state["ready"] = True
        p.notify("k")
        result = await asyncio.wait_for(task, GUARD_S)
        return parked_calls, calls["n"], result

    assert asyncio.run(main()) == (0, 1, True)
