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
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: The running request's permit (its task's context): set by `run_with_permit` and by
#: the metrics' `TrafficStats.run_timed`, read by `park_current_request`.
CURRENT_PERMIT: contextvars.ContextVar[RequestPermit | None] = contextvars.ContextVar(
    "riverbed_request_permit", default=None
)


class CountedSemaphore(asyncio.Semaphore):
    """The permits of ``queued.max.requests``, knowing how many are held (Kafka's
    RequestQueueSize for the metrics)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.held = 0

    async def acquire(self) -> Literal[True]:
        await super().acquire()
        self.held += 1
        return True

    def release(self) -> None:
        self.held -= 1
        super().release()


class RequestPermit:
    """One permit of a semaphore, given back exactly once."""

    __slots__ = ("_held", "_semaphore")

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self._held = False

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
