"""The replication shells are crash-only and back off (issue 18, defect 5).

Node 1's real broker shell (`riverbed.testing.broker_shell`) with a recording fault
handler, a manual clock and seeded random numbers:

- an error the AlterPartition sender does not expect halts the node (before: the loop
  took any exception for NOT_CONTROLLER, and an unknown error code in the answer killed
  the task silently, so no ISR of this broker changed again);
- the errors it does expect (no controller, a timeout, an unknown error code: Kafka's
  UNKNOWN_SERVER_ERROR) are answered to the core, which sends again;
- a follower whose local log refuses the leader's batch backs that partition off,
  exponentially, on the injected clock (before: it fetched again at network speed); so
  does a fetcher that cannot reach its leader, and one that meets an error nobody
  expects halts the node.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import AlterPartitionRequest, AlterPartitionResponse, FetchResponse
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.raft.node import NotLeaderError
from riverbed.server.replication.fetcher import REPLICA_FETCH_BACKOFF_MAX_MS
from riverbed.testing.broker_shell import START_MS, TOPIC, BrokerShell

#: Event-loop turns a test waits for a task to react (a positive event, not a sleep).
TURNS_MAX = 1000


async def _turns_until(done: Any) -> None:
    for _ in range(TURNS_MAX):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the shell did not react")


async def _lagging_follower(shell: BrokerShell) -> None:
    """ISR [1, 2] with follower 2 silent for longer than replica.lag.time.max.ms: the
    leader core proposes ISR [1] at the next tick."""
    shell.apply()
    shell.replicas.start()
    assert await shell.produce(acks=1) == ErrorCode.NONE
    shell.clock.advance(31_000)
    shell.replicas.tick()


def test_an_unexpected_error_in_the_alter_partition_sender_halts_the_node(
    tmp_path: Path,
) -> None:
    cause = RuntimeError("a bug in the controller channel")

    async def broken(request: AlterPartitionRequest) -> AlterPartitionResponse:
        raise cause

    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1, 2], alter_partition=broken)
        try:
            await _lagging_follower(shell)
            await _turns_until(lambda: shell.faults.faults)
            assert shell.faults.faults == [("AlterPartition sender failed", cause)]
            # (the finally's close does not raise the halt again: it was the handler's)
        finally:
            await shell.close()

    asyncio.run(run())


def _unknown_code(request: AlterPartitionRequest) -> AlterPartitionResponse:
    return AlterPartitionResponse(error_code=9999)  # no such Kafka error


@pytest.mark.parametrize(
    "answer",
    [
        NotLeaderError(-1, 3),  # the controller is moving
        TimeoutError(),
        ConnectionRefusedError(),
        _unknown_code,
    ],
    ids=["not-leader", "timeout", "refused", "unknown-error-code"],
)
def test_expected_alter_partition_failures_are_sent_again(tmp_path: Path, answer: Any) -> None:
    async def failing(request: AlterPartitionRequest) -> AlterPartitionResponse:
        if isinstance(answer, BaseException):
            raise answer
        return answer(request)  # type: ignore[no-any-return]

    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1, 2], alter_partition=failing)
        try:
            await _lagging_follower(shell)
            await _turns_until(lambda: len(shell.alter_requests) == 1)
            for _ in range(50):  # the core resends after its back-off / timeout
                shell.clock.advance(1_000)
                shell.replicas.tick()
                await asyncio.sleep(0)
                if len(shell.alter_requests) > 1:
                    break
            assert len(shell.alter_requests) > 1
            assert shell.faults.faults == []
        finally:
            await shell.close()

    asyncio.run(run())


class RefusingLeader:
    """Leader 2 as the follower's fetcher sees it: every fetch of ``t``-0 answers a batch
    whose CRC is wrong, so node 1's log refuses it; each exchange takes 1 ms."""

    def __init__(self, shell: BrokerShell) -> None:
        self.shell = shell
        self.fetch_times_ms: list[int] = []
        batch = bytearray(build_batch([SimpleRecord(b"v")], now_ms=START_MS))
        batch[-1] ^= 0xFF
        self.batch = bytes(batch)

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float) -> Any:
        self.shell.clock.advance(1)
        self.fetch_times_ms.append(self.shell.clock.now_ms() - START_MS)
        await asyncio.sleep(0)
        part = FetchResponse.PartitionData(
            partition_index=0,
            high_watermark=1,
            last_stable_offset=1,
            log_start_offset=0,
            records=self.batch,
        )
        topic = FetchResponse.FetchableTopicResponse(topic=TOPIC, partitions=[part])
        return FetchResponse(throttle_time_ms=0, session_id=0, responses=[topic])

    def close(self) -> None:
        pass


class UnreachableLeader(RefusingLeader):
    """Every exchange with leader 2 fails as a refused connection does."""

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float) -> Any:
        self.shell.clock.advance(1)
        self.fetch_times_ms.append(self.shell.clock.now_ms() - START_MS)
        await asyncio.sleep(0)
        raise ConnectionRefusedError(111, "Connection refused")


class BrokenLeader(RefusingLeader):
    """Answers something the fetcher cannot have expected (a bug, not a network error)."""

    async def request(self, api_key: int, version: int, body: Any, timeout_s: float) -> Any:
        self.fetch_times_ms.append(self.shell.clock.now_ms() - START_MS)
        return None  # no such response: the fetcher refuses it with a TypeError


async def _follow(shell: BrokerShell, leader: RefusingLeader, window_ms: int) -> list[int]:
    """Node 1 follows ``leader`` for ``window_ms`` of the injected clock (or until 200
    fetches or a fault); the times of its fetches."""

    async def sleep(seconds: float) -> None:
        shell.clock.advance(int(seconds * 1000))
        await asyncio.sleep(0)

    shell.replicas.fetchers.sleep = sleep
    shell.replicas.fetchers.channel_factory = lambda broker_id: leader
    shell.apply()
    for _ in range(100_000):
        if (
            shell.clock.now_ms() - START_MS >= window_ms
            or len(leader.fetch_times_ms) >= 200
            or shell.faults.faults
        ):
            break
        await asyncio.sleep(0)
    return leader.fetch_times_ms


def test_a_follower_whose_log_refuses_the_batch_backs_off_exponentially(tmp_path: Path) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, leader=2, isr=[1, 2])
        try:
            times = await _follow(shell, RefusingLeader(shell), 20_000)
            assert shell.faults.faults == []
            gaps = [b - a for a, b in itertools.pairwise(times)]
            # replica.fetch.backoff.ms (1000) doubling, +-20 % jitter, capped (before the
            # fix: 200 fetches in 200 ms, one per exchange)
            assert 3 <= len(times) <= 6, times
            assert gaps[0] >= 800, gaps
            assert all(later > earlier for earlier, later in itertools.pairwise(gaps))
            assert max(gaps) <= REPLICA_FETCH_BACKOFF_MAX_MS + 100, gaps
            assert shell.partitions.get(TOPIC, 0).log.log_end_offset == 0  # nothing appended
        finally:
            await shell.close()

    asyncio.run(run())


def test_a_fetcher_that_cannot_reach_the_leader_backs_off_exponentially(tmp_path: Path) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, leader=2, isr=[1, 2], seed=7)
        try:
            times = await _follow(shell, UnreachableLeader(shell), 40_000)
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert shell.faults.faults == []
            assert 5 <= len(times) <= 9, times  # ~1, 2, 4, 8, 10, 10 ... s
            assert 800 <= gaps[0] <= 1200 and gaps[1] >= 1600, gaps
            assert max(gaps) <= REPLICA_FETCH_BACKOFF_MAX_MS + 1, gaps
        finally:
            await shell.close()

    asyncio.run(run())


def test_an_unexpected_error_in_a_fetcher_halts_the_node(tmp_path: Path) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, leader=2, isr=[1, 2])
        try:
            await _follow(shell, BrokenLeader(shell), 10_000)
            [(what, cause)] = shell.faults.faults
            assert what == "replica fetcher from broker 2 failed"
            assert isinstance(cause, TypeError)
        finally:
            await shell.close()

    asyncio.run(run())
