"""The partition log's locks and their order (Kafka's UnifiedLog over its LocalLog).

A :class:`~riverbed.storage.log.PartitionLog` (the unified log) holds its own lock while
it calls its :class:`~riverbed.storage.local_log.LocalLog`, which takes its own: the order
is unified -> local, never the reverse. The local log's lock is a leaf: while it is held
nothing is called but the segments and the files below them (no hook, listener, epoch
cache or log dir), so it can never be taken before another lock of the log.

:class:`LeafLock` knows which thread holds it, so :class:`OuterLock` can assert the order
cheaply each time it is taken (a thread holding the leaf must not ask for the outer lock:
another thread holding the outer lock and waiting for the leaf would deadlock with it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["LeafLock", "LockOrderError", "OuterLock"]


class LockOrderError(AssertionError):
    """A lock was asked for in the reverse of the documented order."""


class LeafLock:
    """A reentrant lock that knows whether the current thread holds it."""

    __slots__ = ("_depth", "_lock", "_owner")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    def held(self) -> bool:
        """True when the calling thread holds this lock."""
        return self._owner == threading.get_ident()


class OuterLock:
    """A reentrant lock taken before an inner one, never while the thread holds that one
    (``inner_held`` tells)."""

    __slots__ = ("_inner_held", "_lock", "_what")

    def __init__(self, inner_held: Callable[[], bool], what: str) -> None:
        self._lock = threading.RLock()
        self._inner_held = inner_held
        self._what = what

    def __enter__(self) -> None:
        if self._inner_held():
            raise LockOrderError(
                f"{self._what}: the local log's lock is held (order: unified, local)"
            )
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
