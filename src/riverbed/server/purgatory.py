"""Delayed-operation purgatory: requests parked until a watched key changes or time runs out.

Kafka parks a Fetch that has less than ``fetch.min.bytes`` ready for up to
``fetch.max.wait.ms``; an append to any of the watched partitions wakes it so it can
re-check and answer early. riverbed does the same with one `asyncio.Event` per parked
operation, indexed by key (``(topic, partition)`` for fetches).

Bounded: at most ``waiters_max`` operations are parked at once; one more is not parked
but answered right away with whatever is ready (the client simply polls again), so a
flood of long-polling consumers costs bounded memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable

from riverbed.server.fault_handler import FaultHandler, ProcessTerminatingFaultHandler
from riverbed.server.request_permits import park_current_request
from riverbed.server.supervise import guarded

#: Default bound on parked operations per node.
PURGATORY_WAITERS_MAX = 10000


class _Waiter:
    __slots__ = ("event", "expired", "keys")

    def __init__(self, keys: tuple[Hashable, ...]) -> None:
        self.keys = keys
        self.event = asyncio.Event()
        self.expired = False

    def expire(self) -> None:
        """The operation's deadline passed (its timer's callback)."""
        self.expired = True
        self.event.set()


def _expire(waiter: _Waiter) -> None:
    waiter.expire()


class Purgatory:
    """Parks operations on keys; `notify(key)` wakes every operation watching ``key``."""

    def __init__(
        self,
        waiters_max: int = PURGATORY_WAITERS_MAX,
        fault_handler: FaultHandler | None = None,
    ) -> None:
        assert waiters_max >= 0
        self.waiters_max = waiters_max
        fh = fault_handler or ProcessTerminatingFaultHandler(-1)
        #: the deadlines' callback, built once (a parked operation's timer runs it)
        self._guarded_expire = guarded("purgatory deadline", _expire, fh)
        self._watchers: dict[Hashable, set[_Waiter]] = {}
        self._count = 0
        self._closed = False

    @property
    def parked(self) -> int:
        """Operations parked right now."""
        return self._count

    def notify(self, key: Hashable) -> None:
        """Something changed for ``key`` (e.g. an append to a partition)."""
        for waiter in self._watchers.get(key, ()):
            waiter.event.set()

    def notify_all(self) -> None:
        for watchers in self._watchers.values():
            for waiter in watchers:
                waiter.event.set()

    def close(self) -> None:
        """Shutdown: wake everyone now and park nothing more."""
        self._closed = True
        self.notify_all()

    async def wait_until(
        self,
        keys: Iterable[Hashable],
        ready: Callable[[], bool],
        timeout_ms: int,
        *,
        checked: bool = False,
    ) -> bool:
        """Return True once ``ready()`` holds, False when ``timeout_ms`` elapsed first.

        ``ready`` is checked now and after every notification of one of ``keys``. When the
        purgatory is full or closed it is checked once and the result returned at once.
        ``checked=True``: the caller has just found it false with nothing awaited since
        (a fetch's first read), so the first check is skipped: a follower fetch parked
        once per replication cycle would otherwise read its partitions twice.
        """
        if not checked and ready():
            return True
        if timeout_ms <= 0 or self._closed or self._count >= self.waiters_max:
            return False
        # Parked, the request no longer occupies a handler: its queued.max.requests
        # permit goes back (Kafka's delayed operations hold no request-queue slot).
        park_current_request()
        loop = asyncio.get_running_loop()
        waiter = _Waiter(tuple(dict.fromkeys(keys)))
        for key in waiter.keys:
            self._watchers.setdefault(key, set()).add(waiter)
        self._count += 1
        # One timer for the whole wait, firing the same event as a notification: a
        # follower's fetch is parked once per leader append, and a deadline context
        # (asyncio.timeout_at) around each wait cost a Timeout object and its bookkeeping
        # every time (wait_for, before it, an extra task).
        timer = loop.call_at(loop.time() + timeout_ms / 1000.0, self._guarded_expire, waiter)
        try:
            while True:
                if waiter.expired or self._closed:
                    return ready()
                await waiter.event.wait()
                if waiter.expired or self._closed:
                    return ready()
                waiter.event.clear()
                if ready():
                    return True
        finally:
            timer.cancel()
            self._count -= 1
            for key in waiter.keys:
                watchers = self._watchers.get(key)
                if watchers is not None:
                    watchers.discard(waiter)
                    if not watchers:
                        del self._watchers[key]
