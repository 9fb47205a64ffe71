"""`riverbed.server.eager_start`: a handler's first step runs at once, and its outcome,
context and cancellation are what a task would give it."""

from __future__ import annotations

import ast
import asyncio
import contextvars
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from riverbed.server.broker.producers import BrokerProducerIds
from riverbed.server.eager_start import start_eagerly
from riverbed.server.quorum import QuorumMetadata

SERVER = Path(__file__).parents[3] / "src" / "riverbed" / "server"
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("eager_test", default="unset")


def test_a_handler_that_never_waits_is_answered_before_start_eagerly_returns() -> None:
    steps: list[str] = []

    async def handler() -> int:
        steps.append("ran")
        return 7

    async def main() -> None:
        answer = start_eagerly(handler())
        assert steps == ["ran"]  # no loop pass in between
        assert answer.done() and answer.result() == 7
        assert not isinstance(answer, asyncio.Task)

    asyncio.run(main())


def test_the_first_step_runs_in_its_own_context_which_the_rest_keeps() -> None:
    seen: list[str] = []

    async def handler(gate: asyncio.Event) -> str:
        VAR.set("handler")
        await gate.wait()
        seen.append(VAR.get())
        return VAR.get()

    async def main() -> None:
        gate = asyncio.Event()
        answer = start_eagerly(handler(gate))
        assert VAR.get() == "unset"  # the reading task's context is untouched
        assert isinstance(answer, asyncio.Task) and not answer.done()
        gate.set()
        assert await answer == "handler"
        assert VAR.get() == "unset"

    asyncio.run(main())
    assert seen == ["handler"]


def test_errors_are_the_answer_not_the_readers() -> None:
    async def fails_at_once() -> None:
        raise ValueError("first step")

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("later")

    async def cancels_itself() -> None:
        raise asyncio.CancelledError

    async def main() -> None:
        first = start_eagerly(fails_at_once())
        later = start_eagerly(fails_later())
        cancelled = start_eagerly(cancels_itself())
        with pytest.raises(ValueError, match="first step"):
            await first
        with pytest.raises(KeyError, match="later"):
            await later
        assert cancelled.cancelled()

    asyncio.run(main())


@pytest.mark.parametrize("before_first_step", [True, False])
def test_cancelling_the_rest_cancels_the_waiting_handler(before_first_step: bool) -> None:
    """A connection that closes cancels its in-flight answers: the handler, waiting where
    its first step stopped, gets the CancelledError and its ``finally`` runs, whether
    the cancel comes before the Task's first step or after it."""
    trail: list[str] = []

    async def handler(never: asyncio.Future[None]) -> None:
        try:
            await never
        except asyncio.CancelledError:
            trail.append("cancelled")
            raise
        finally:
            trail.append("finally")

    async def main() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        answer = start_eagerly(handler(never))
        if not before_first_step:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        answer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await answer
        assert answer.cancelled()

    asyncio.run(main())
    assert trail == ["cancelled", "finally"]


def test_a_handler_resumed_several_times_gets_each_value() -> None:
    async def handler(queue: asyncio.Queue[int]) -> list[int]:
        got = [await queue.get()]
        got.append(await queue.get())
        await asyncio.sleep(0)  # a bare yield, too
        got.append(await queue.get())
        return got

    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue()
        answer = start_eagerly(handler(queue))
        for value in (1, 2, 3):
            await asyncio.sleep(0.001)
            queue.put_nowait(value)
        assert await answer == [1, 2, 3]

    asyncio.run(main())


class _NeverAllocates:
    """The quorum never answers AllocateProducerIds (a controller that is moving)."""

    image = SimpleNamespace(brokers={})

    async def allocate_producer_ids(self, _request: object) -> object:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_a_handler_timing_out_after_its_first_step_does_not_cancel_the_reader() -> None:
    """InitProducerId with no producer id block waits at most its timeout, started in its
    first step, i.e. in the reading task: that timeout must end the wait, not the reader
    (``asyncio.timeout`` would cancel the task current at its start)."""
    ids = BrokerProducerIds(1, cast(QuorumMetadata, _NeverAllocates()))

    async def reader() -> asyncio.Future[int]:
        answer = start_eagerly(ids.next_id(wait_s=0.05))
        await asyncio.sleep(0.2)  # the reader goes on reading
        return answer

    async def main() -> None:
        answer = await reader()
        assert answer.done()
        with pytest.raises(TimeoutError):
            answer.result()

    asyncio.run(main())


#: Where a server module may start a wait bound to the current task: not in a request's
#: path, so never in a handler's first step.
BOUND_TO_CURRENT_TASK_ALLOWED = {
    ("replication/fetcher.py", "timeout_at"): "the replica fetcher's own task",
}
BOUND_TO_CURRENT_TASK = {"timeout", "timeout_at", "TaskGroup"}


def test_no_server_module_starts_a_wait_bound_to_the_current_task() -> None:
    found = set()
    for path in SERVER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in BOUND_TO_CURRENT_TASK
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                found.add((path.relative_to(SERVER).as_posix(), node.attr))
    assert found == set(BOUND_TO_CURRENT_TASK_ALLOWED), (
        "asyncio.timeout/timeout_at/TaskGroup cancel or watch the task current at their"
        " start; in a handler's first step that is the connection's reader"
        " (riverbed.server.eager_start): use asyncio.wait_for"
    )
