"""``queued.max.requests`` permits: one per request that waits for or runs in a handler.

Kafka bounds the request queue between its network threads and its request handler
threads by ``queued.max.requests``; an idle connection holds nothing, and a request parked
in a purgatory (a long-poll fetch, a delayed produce, a group join) has left the handler
threads, so it holds nothing either. riverbed's handlers are asyncio tasks: a request takes
a permit once it has been read, and gives it back when its handler returns or parks
(`park_current_request`, called by the purgatory, and by the broker for a request that
waits for its connection's client-quota throttle: Kafka's muted channel). The permit travels with the handler
task in a context variable, so nothing between the network layer and the purgatory has to
pass it along.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: The running request's permit (its task's context): set by `run_with_permit` and by
#: the metrics' `TrafficStats.run_timed`, read by `park_current_request`.
CURRENT_PERMIT: contextvars.ContextVar[RequestPermit | None] = contextvars.ContextVar(
    "riverbed_request_permit", default=None
)


class Permits:
    """A counting semaphore whose free permit is taken without suspending: the request
    path takes two per request (the connection's in-flight slot and a
    ``queued.max.requests`` permit), and asyncio.Semaphore's ``acquire`` is a coroutine
    even when a permit is free (with `try_acquire`, and the handler tasks no longer kept
    in a second set, a node's CPU per request fell 6-9%, ``benchmarks/request_cost.py``,
    RESULTS.md stop 41). A permit given back goes straight to the longest waiter, so
    waiters are served first come, first served and a permit is never free while one
    waits; ``held`` counts the permits held (Kafka's RequestQueueSize for the metrics)."""

    __slots__ = ("_free", "_waiters", "held")

    def __init__(self, value: int) -> None:
        assert value >= 1, f"a semaphore of {value} permits"
        self._free = value
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.held = 0

    def locked(self) -> bool:
        """No permit can be taken now."""
        return self._free == 0

    def try_acquire(self) -> bool:
        """Take a permit if one is free; never suspends."""
        if self._free > 0:
            self._free -= 1
            self.held += 1
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # handed a permit as the cancel came: it goes to the next in line
                self.held += 1
                self.release()
            raise
        self.held += 1  # `release` handed it over without making it free

    def release(self) -> None:
        """Give a permit back: to the longest waiter still waiting, else free."""
        self.held -= 1
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class RequestPermit:
    """One permit of a semaphore, given back exactly once."""

    __slots__ = ("_held", "_semaphore")

    def __init__(self, semaphore: Permits) -> None:
        self._semaphore = semaphore
        self._held = False

    def try_acquire(self) -> bool:
        """Take the permit if one is free at once (`Permits.try_acquire`)."""
        if self._semaphore.try_acquire():
            self._held = True
        return self._held

    async def acquire(self) -> None:
        await self._semaphore.acquire()
        self._held = True

    @property
    def held(self) -> bool:
        return self._held

    def release(self) -> None:
        if self._held:
            self._held = False
            self._semaphore.release()

    def release_on_done(self, _task: asyncio.Future[T]) -> None:
        """Done callback: also runs for a task cancelled before it ever started."""
        self.release()

    def park(self) -> None:
        """The request waits in a purgatory: the permit goes back (a `TimedPermit` also
        stamps the park)."""
        self.release()


async def run_with_permit(
    handler: Callable[[*Ts], Awaitable[T]], permit: RequestPermit, *args: *Ts
) -> T:
    """Run ``handler(*args)`` in a task that owns ``permit`` (see `park_current_request`)."""
    CURRENT_PERMIT.set(permit)  # the task runs in its own copy of the context
    try:
        return await handler(*args)
    finally:
        permit.release()


def park_current_request() -> None:
    """The running request is about to wait in a purgatory: give back its permit (and
    its RemoteTime starts at its first park, `riverbed.server.request_timing`)."""
    permit = CURRENT_PERMIT.get()
    if permit is not None:
        permit.park()
