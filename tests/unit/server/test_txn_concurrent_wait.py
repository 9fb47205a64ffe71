"""An add that starts a transaction waits (bounded) for its id's previous transaction to
complete instead of answering CONCURRENT_TRANSACTIONS at once (server.broker.transactions)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.protocol.errors import ErrorCode
from riverbed.server.broker import transactions
from riverbed.transaction.api import Result, TxnResult

E = ErrorCode


class FakeCoordinator:
    """Answers from a script; `progressed` is a step of the coordinator."""

    def __init__(self, *answers: ErrorCode) -> None:
        self.answers = list(answers)
        self.asked = 0
        self._progress = asyncio.Event()

    def check(self, tid: str) -> ErrorCode:
        return E.NONE

    async def wait_ready(self, tids: Any) -> None:
        return None  # always ready

    def now_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def progress(self) -> asyncio.Event:
        return self._progress

    async def call(self, op: Any) -> Result:
        self.asked += 1
        return TxnResult(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])

    async def wait_progress(self, progress: asyncio.Event, timeout_ms: int) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(progress.wait(), timeout_ms / 1000)

    def progressed(self) -> None:
        done, self._progress = self._progress, asyncio.Event()
        done.set()


def ask(coordinator: FakeCoordinator, *, await_completion: bool, step_after_s: float | None
        ) -> Result | ErrorCode:  # fmt: skip
    async def go() -> Result | ErrorCode:
        if step_after_s is not None:
            asyncio.get_running_loop().call_later(step_after_s, coordinator.progressed)
        broker: Any = SimpleNamespace(transactions=coordinator)
        return await transactions._ask(broker, "tid", None, await_completion=await_completion)  # type: ignore[arg-type]

    return asyncio.run(go())


def test_an_add_is_answered_once_the_previous_transaction_completed() -> None:
    c = FakeCoordinator(E.CONCURRENT_TRANSACTIONS, E.NONE)
    assert ask(c, await_completion=True, step_after_s=0.01) == TxnResult(E.NONE)
    assert c.asked == 2


def test_the_wait_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "CONCURRENT_WAIT_MS", 50)
    c = FakeCoordinator(E.CONCURRENT_TRANSACTIONS)
    start = time.monotonic()
    assert ask(c, await_completion=True, step_after_s=None) == TxnResult(E.CONCURRENT_TRANSACTIONS)
    assert time.monotonic() - start >= 0.05 and c.asked == 2  # asked again at the bound


def test_other_requests_are_answered_at_once() -> None:
    c = FakeCoordinator(E.CONCURRENT_TRANSACTIONS, E.NONE)
    assert ask(c, await_completion=False, step_after_s=0.01) == TxnResult(E.CONCURRENT_TRANSACTIONS)
    assert c.asked == 1
