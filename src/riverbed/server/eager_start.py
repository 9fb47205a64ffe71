"""Eager start of a request's handler: its first step runs at once, in the task that read
the request, and a Task is made only if the handler has to wait.

Most requests never wait: a Metadata, an acks=1 Produce, a follower's fetch that finds
records at its offset. As a task, each cost a Task, a pass of the event loop before its
first step and another before the writer saw its answer. On an acks=all replication cycle
that is two passes of a loaded leader's loop on the critical path (the fetch that carries
the records out, the fetch that brings the follower's position back). Python 3.12's
``asyncio.eager_task_factory`` does the same; this is it for the 3.11 that riverbed runs on.

The rules, each as a task would have it:

- the first step runs in its own copy of the context (a task copies it), and a Task made
  for the rest runs in that same copy, so context variables set by the first step
  (`riverbed.server.request_permits.CURRENT_PERMIT`) hold to the end;
- what the first step returns or raises is the outcome of a done future; a
  ``CancelledError`` it raises cancels that future; ``KeyboardInterrupt`` and
  ``SystemExit`` propagate, as a task's do;
- when the first step waits, the Task resumes the coroutine where it stopped
  (`_Continuation`): cancelling that Task, even before its first step, throws
  ``CancelledError`` into the waiting coroutine, so its ``finally`` blocks run.

The one difference: during its first step ``asyncio.current_task()`` is the reading task,
not a task of the handler's own. So a handler must not hold on to the current task across
a wait that its first step may start: ``asyncio.timeout``/``timeout_at`` (they cancel the
task current at their start) and ``asyncio.TaskGroup`` are not used in the request path
(``tests/unit/server/test_eager_start.py`` checks the server package). ``asyncio.wait_for``
(3.11's does not look at the current task), futures, events and locks are fine.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")


class _Nothing:
    """`_Continuation`'s first yield has been handed to the Task."""


_NOTHING = _Nothing()


class _Continuation(Coroutine[object, object, T]):
    """The rest of a coroutine whose first step has run and yielded ``first``: a Task's
    first ``send`` gets ``first`` back, every later ``send``/``throw`` goes to the
    coroutine (a ``throw`` first, e.g. a cancel before the Task's first step, too)."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[object, object, T], first: object) -> None:
        self._coro = coro
        self._first = first

    def send(self, value: object) -> object:
        first = self._first
        if first is not _NOTHING:
            self._first = _NOTHING
            return first
        return self._coro.send(value)

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: TracebackType | None = None,
    ) -> object:
        self._first = _NOTHING
        if val is None and tb is None:  # (how a Task throws)
            return self._coro.throw(typ)
        if isinstance(typ, BaseException):
            return self._coro.throw(typ, None, tb)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._first = _NOTHING
        self._coro.close()

    def __await__(self) -> Generator[object, None, T]:
        raise TypeError("a _Continuation is driven by its Task, not awaited")


def start_eagerly(coro: Coroutine[object, object, T]) -> asyncio.Future[T]:
    """Run ``coro``'s first step now; its outcome as a done future, or the Task that
    runs the rest when the step waits (see the module docstring)."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    try:
        yielded = context.run(coro.send, None)
    except StopIteration as stop:
        done: asyncio.Future[T] = loop.create_future()
        done.set_result(stop.value)
        return done
    except asyncio.CancelledError:
        cancelled: asyncio.Future[T] = loop.create_future()
        cancelled.cancel()
        return cancelled
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # (an Exception: the awaiting writer handles it)
        failed: asyncio.Future[T] = loop.create_future()
        failed.set_exception(exc)
        return failed
    return loop.create_task(_Continuation(coro, yielded), context=context)
