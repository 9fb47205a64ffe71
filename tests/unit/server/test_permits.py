"""`Permits`: the request path's semaphore (in-flight slots, queued.max.requests)."""

from __future__ import annotations

import asyncio

import pytest

from riverbed.server.request_permits import Permits, RequestPermit


def test_free_permits_are_taken_without_waiting_and_counted() -> None:
    permits = Permits(2)
    assert permits.try_acquire() and permits.try_acquire()
    assert permits.held == 2 and permits.locked()
    assert not permits.try_acquire()
    permits.release()
    assert permits.held == 1 and not permits.locked()
    assert permits.try_acquire()


def test_waiters_are_served_in_order_and_a_free_permit_is_not_taken_past_them() -> None:
    async def run() -> list[str]:
        permits = Permits(1)
        order: list[str] = []
        assert permits.try_acquire()

        async def wait(name: str) -> None:
            await permits.acquire()
            order.append(name)

        first = asyncio.create_task(wait("first"))
        await asyncio.sleep(0)
        second = asyncio.create_task(wait("second"))
        await asyncio.sleep(0)
        permits.release()  # handed to "first", not made free
        assert not permits.try_acquire(), "took a permit past a waiter"
        await first
        assert permits.held == 1
        permits.release()
        await second
        assert permits.held == 1 and permits.locked()
        permits.release()
        assert permits.held == 0 and not permits.locked()
        return order

    assert asyncio.run(run()) == ["first", "second"]


def test_a_cancelled_waiter_passes_its_permit_on() -> None:
    async def run() -> None:
        permits = Permits(1)
        assert permits.try_acquire()
        cancelled = asyncio.create_task(permits.acquire())
        await asyncio.sleep(0)
        served = asyncio.create_task(permits.acquire())
        await asyncio.sleep(0)
        permits.release()  # handed to `cancelled`...
        cancelled.cancel()  # ...which is cancelled before it resumes
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await asyncio.wait_for(served, 5)
        assert permits.held == 1
        permits.release()
        assert permits.try_acquire() and permits.held == 1

    asyncio.run(run())


def test_a_waiter_cancelled_while_waiting_is_skipped() -> None:
    async def run() -> None:
        permits = Permits(1)
        assert permits.try_acquire()
        gone = asyncio.create_task(permits.acquire())
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert permits.locked()  # the one permit is still held
        permits.release()
        assert not permits.locked() and permits.held == 0
        assert permits.try_acquire()

    asyncio.run(run())


def test_request_permit_takes_at_once_and_gives_back_once() -> None:
    permits = Permits(1)
    permit = RequestPermit(permits)
    assert permit.try_acquire() and permit.held and permits.held == 1
    assert not RequestPermit(permits).try_acquire()
    permit.release()
    permit.release()  # a second release gives nothing more back
    assert permits.held == 0
    assert permits.try_acquire() and not permits.try_acquire()
