"""One rule for every long-running asyncio task of the node: an unexpected error halts it.

A loop that dies quietly leaves a node that looks alive and is wedged: an AlterPartition
sender that stopped means no ISR ever shrinks again on this broker (a dead follower pins
the high watermark), a replica fetcher that stopped means a follower that never catches
up. So every long-running task in ``server/`` is started with :func:`supervise`: the
errors its loop expects (a lost connection, a controller moving, the documented
retriable errors) are handled where they happen, with back-off (``riverbed.server.backoff``);
cancellation ends the task; anything else reaches the fault handler, which writes the
FATAL line and ends the process (crash-only, ``riverbed.server.fault_handler``): the
start-up path is the recovery path.

Callbacks handed to the loop (``call_soon_threadsafe`` from a pool thread, ``call_later``)
go through :func:`guarded`, for the same reason.

Tasks that serve one connection or one request are not long-running node tasks: their
errors end that connection or answer that request (``tests/unit/server/test_supervised``
lists them, each with its reason).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable, Coroutine
from typing import ParamSpec, TypeAlias

from riverbed.server.fault_handler import FaultHandler

__all__ = ["Work", "guarded", "supervise"]

P = ParamSpec("P")
#: A long-running task's body: a coroutine (``async def`` ... ``-> None``) not yet awaited.
Work: TypeAlias = Coroutine[object, object, None]


async def _guarded(what: str, work: Work, fault_handler: FaultHandler) -> None:
    try:
        await work
    except asyncio.CancelledError:
        raise  # stopped on purpose (close, a partition removed)
    except Exception as exc:
        fault_handler.handle_fault(f"{what} failed", exc)


def supervise(
    what: str,
    work: Work,
    fault_handler: FaultHandler,
    *,
    context: contextvars.Context | None = None,
) -> asyncio.Task[None]:
    """Start ``work`` as a task of the running loop; an exception escaping it other than
    cancellation halts the node with ``FATAL ...: <what> failed: <error>``. ``context``:
    the task's contextvars (a fresh one keeps a request's permit out of background work)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        work.close()  # never started: no "coroutine was never awaited" later
        raise
    task = loop.create_task(_guarded(what, work, fault_handler), name=what, context=context)
    task.add_done_callback(lambda _task: _close_if_unstarted(work))
    return task


def supervise_background(
    what: str,
    work: Work,
    fault_handler: FaultHandler,
    tasks: set[asyncio.Task[None]],
) -> asyncio.Task[None]:
    """``supervise`` for a coordinator's background work, kept in ``tasks`` until done
    (its owner cancels them on close). A fresh context: background work must not release
    the permit of the request that happened to start it (see request_permits)."""
    task = supervise(what, work, fault_handler, context=contextvars.Context())
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


def _close_if_unstarted(work: Work) -> None:
    # a task cancelled before its first step never awaited ``work``: close it quietly
    if inspect.getcoroutinestate(work) == inspect.CORO_CREATED:
        work.close()


def guarded(
    what: str, callback: Callable[P, None], fault_handler: FaultHandler
) -> Callable[P, None]:
    """``callback`` for ``call_soon`` / ``call_soon_threadsafe`` / ``call_later``: an error
    in it halts the node (asyncio's own handler would only log it and run on, with the
    bookkeeping the callback did not finish left wrong)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            callback(*args, **kwargs)
        except Exception as exc:
            fault_handler.handle_fault(f"{what} failed", exc)

    return run
