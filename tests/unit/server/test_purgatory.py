"""Delayed-operation purgatory: wake-ups by key, timeouts, the waiter bound, shutdown."""

from __future__ import annotations

import asyncio

from riverbed.server.purgatory import Purgatory


def test_notify_wakes_only_watchers_of_that_key() -> None:
    async def main() -> tuple[bool, bool, float]:
        p = Purgatory()
        state = {"a": 0, "b": 0}
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        wa = asyncio.create_task(p.wait_until(["a"], lambda: state["a"] > 0, 5000))
        wb = asyncio.create_task(p.wait_until(["b"], lambda: state["b"] > 0, 300))
        await asyncio.sleep(0.05)
        assert p.parked == 2
        state["a"] = 1
        state["b"] = 1  # changed, but nobody notifies "b": wb must time out, then see it
        p.notify("a")
        ra = await wa
        elapsed_a = loop.time() - t0
        rb = await wb
        assert p.parked == 0
        return ra, rb, elapsed_a

    ra, rb, elapsed_a = asyncio.run(main())
    assert ra is True
    assert elapsed_a < 1.0
    assert rb is True  # re-checked at the deadline


def test_timeout_returns_false_and_spurious_notify_keeps_waiting() -> None:
    async def main() -> tuple[bool, float]:
        p = Purgatory()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        task = asyncio.create_task(p.wait_until([("t", 0)], lambda: False, 200))
        await asyncio.sleep(0.05)
        p.notify(("t", 0))  # not ready yet: stays parked
        result = await task
        return result, loop.time() - t0

    result, elapsed = asyncio.run(main())
    assert result is False
    assert elapsed >= 0.19


def test_bound_answers_immediately_when_full() -> None:
    async def main() -> tuple[bool, float, int]:
        p = Purgatory(waiters_max=2)
        loop = asyncio.get_running_loop()
        parked = [asyncio.create_task(p.wait_until(["k"], lambda: False, 2000)) for _ in range(2)]
        await asyncio.sleep(0.02)
        t0 = loop.time()
        extra = await p.wait_until(["k"], lambda: False, 2000)
        waited = loop.time() - t0
        count = p.parked
        p.close()
        await asyncio.gather(*parked)
        return extra, waited, count

    extra, waited, count = asyncio.run(main())
    assert extra is False
    assert waited < 0.5
    assert count == 2


def test_close_releases_parked_operations() -> None:
    async def main() -> float:
        p = Purgatory()
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(p.wait_until(["k"], lambda: False, 10_000))
        await asyncio.sleep(0.02)
        t0 = loop.time()
        p.close()
        await task
        return loop.time() - t0

    assert asyncio.run(main()) < 0.5
