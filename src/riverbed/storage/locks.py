"""The partition log's locks and their order (Kafka's UnifiedLog over its LocalLog).

A :class:`~riverbed.storage.log.PartitionLog` (the unified log) holds its own lock while
it calls its :class:`~riverbed.storage.local_log.LocalLog`, which takes its own: the order
is unified -> local, never the reverse. The local log's lock is a leaf: while it is held
nothing is called but the segments and the files below them (no hook, listener, epoch
cache or log dir), so it can never be taken before another lock of the log.

:class:`OuterLock` asserts the order cheaply each time it is taken: a thread holding the
leaf must not ask for the outer lock (another thread holding the outer lock and waiting
for the leaf would deadlock with it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["LockOrderError", "OuterLock"]


class LockOrderError(AssertionError):
    """A lock was asked for in the reverse of the documented order."""


class OuterLock:
    """A reentrant lock taken before ``inner``, never while the thread holds ``inner``.

    The check is the RLock's own owner test (the one ``threading.Condition`` uses), a C
    call: the inner lock stays a plain RLock on the hot path. Made by the owner of the
    inner lock (:meth:`LocalLog.outer_lock`), which nobody else gets to see.
    """

    __slots__ = ("_inner_held", "_lock", "_what")

    def __init__(self, inner: threading.RLock, what: str) -> None:
        self._lock = threading.RLock()
        self._inner_held: Callable[[], bool] = inner._is_owned  # type: ignore[attr-defined]
        self._what = what

    def __enter__(self) -> None:
        if self._inner_held():
            raise LockOrderError(
                f"{self._what}: the local log's lock is held (order: unified, local)"
            )
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
