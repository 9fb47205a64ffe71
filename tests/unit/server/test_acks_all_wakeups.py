"""acks=all on the hot path is event-driven, never polled (issue 23, latency).

Node 1's real broker shell (`riverbed.testing.broker_shell`: real logs, partition and
replica managers, the real Produce and Fetch handlers) leads ``t``-0 with ISR [1, 2]. Its
replica manager's timer is never started and the clock never moves, so nothing here can
be completed by a timer or a poll:

- follower 2's long-poll Fetch at the log end, parked for ``max_wait_ms`` = 60 s, is
  answered with the new batch by the leader's append itself (Kafka's
  ``DelayedFetch.tryComplete`` on append), not after ``replica.fetch.wait.max.ms``;
- the acks=all produce waiting for the ISR (the delayed produce) completes in the call
  that handles the follower's next Fetch, whose offset moves the high watermark past the
  batch (Kafka's ``tryCompleteDelayedProduce`` on HW advance), not at a later tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader
from riverbed.protocol.messages import FetchRequest, FetchResponse
from riverbed.replication.actions import FetchPosition
from riverbed.server.broker.fetch import handle_fetch
from riverbed.server.network import RequestContext
from riverbed.testing.broker_shell import TOPIC, BrokerShell

#: Event-loop turns a parked operation may take to react (a positive event, not a sleep).
TURNS_MAX = 50
#: Longer than the test could ever wait: a fetch answered by its timeout fails it.
PARK_MS = 60_000


def _follower_fetch(shell: BrokerShell, offset: int) -> FetchRequest:
    hosted = shell.partitions.get(TOPIC, 0)
    assert hosted is not None
    return FetchRequest(
        replica_id=-1,
        replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=-1),
        max_wait_ms=PARK_MS,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=TOPIC,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0,
                        current_leader_epoch=hosted.registration.leader_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )


async def _turns_until(done: Callable[[], bool]) -> int:
    for turn in range(TURNS_MAX):
        if done():
            return turn
        await asyncio.sleep(0)
    raise AssertionError(f"nothing happened within {TURNS_MAX} event-loop turns")


def _fetch_ctx() -> RequestContext:
    return RequestContext(RequestHeader(int(ApiKey.FETCH), 15, 1, "f"), "peer", "PLAINTEXT", 1, 0)


async def _produce_woken_fetch(
    shell: BrokerShell, on_parked: Callable[[], None] = lambda: None
) -> tuple[asyncio.Future[int], FetchResponse]:
    """Follower 2's fetch at offset 0 parks; an acks=all produce's append wakes it:
    (the produce, still waiting, and the fetch's answer: the batch read by the handler)."""
    shell.broker.remote_log = None  # no tiered storage on this node
    shell.apply()
    # replicas.start() never called: no ticker, so no produce is completed by a poll
    fetch = asyncio.ensure_future(
        handle_fetch(shell.broker, _fetch_ctx(), _follower_fetch(shell, 0))
    )
    await _turns_until(lambda: shell.purgatory.parked == 1)
    on_parked()
    produce = asyncio.ensure_future(shell.produce(acks=-1))
    await _turns_until(fetch.done)
    answer = fetch.result()
    # the new batch, read from the log file into the answer (small: no file ranges left)
    assert isinstance(answer, FetchResponse)
    return produce, answer


def test_append_wakes_the_parked_follower_fetch_and_its_next_fetch_completes_the_produce(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1, 2])
        ctx = _fetch_ctx()
        try:
            produce, answer = await _produce_woken_fetch(shell)
            part = answer.responses[0].partitions[0]
            assert part.high_watermark == 0
            # the whole batch: base offset 0, the length its header gives
            assert part.records is not None and part.records[:8] == bytes(8)
            assert len(part.records) == 12 + int.from_bytes(part.records[8:12], "big")
            assert not produce.done()  # follower 2 (in the ISR) does not have it yet
            # the follower appended it and fetches from offset 1: the HW passes the batch
            nxt = asyncio.ensure_future(handle_fetch(shell.broker, ctx, _follower_fetch(shell, 1)))
            await _turns_until(produce.done)
            assert produce.result() == ErrorCode.NONE
            hosted = shell.partitions.get(TOPIC, 0)
            assert hosted is not None and int(hosted.log.high_watermark) == 1
            nxt.cancel()
        finally:
            await shell.close()

    asyncio.run(run())


def test_a_parked_follower_fetch_reads_its_partition_once_before_parking(
    tmp_path: Path,
) -> None:
    """The fetch that finds nothing new is parked on the reads it has just made: the
    leader core judges and records it once (it moved the high watermark already), not a
    second time by the purgatory's first check; the append that wakes it reads once more,
    judged but not recorded (Kafka's ``updateFetchState = !readFromPurgatory``)."""

    async def run() -> tuple[list[int], list[int], list[int]]:
        shell = BrokerShell(tmp_path, isr=[1, 2])
        judged: list[int] = []
        reread: list[int] = []
        real, real_reread = shell.replicas.follower_fetch, shell.replicas.follower_reread

        def counting(hosted: object, pos: FetchPosition) -> object:
            judged.append(pos.fetch_offset)
            return real(hosted, pos)  # type: ignore[arg-type]

        def counting_reread(hosted: object, pos: FetchPosition) -> object:
            reread.append(pos.fetch_offset)
            return real_reread(hosted, pos)  # type: ignore[arg-type]

        shell.replicas.follower_fetch = counting  # type: ignore[method-assign,assignment]
        shell.replicas.follower_reread = counting_reread  # type: ignore[method-assign,assignment]
        parked: list[int] = []
        try:
            produce, _ = await _produce_woken_fetch(shell, lambda: parked.extend(judged + reread))
            produce.cancel()
            return parked, judged, reread
        finally:
            await shell.close()

    parked, judged, reread = asyncio.run(run())
    assert parked == [0]  # parked after one judgement, recorded
    assert judged == [0]  # never recorded again
    assert reread == [0]  # the append's wake-up reads (and judges) once more


def test_a_woken_follower_fetch_dates_the_followers_progress_to_its_fetch(
    tmp_path: Path,
) -> None:
    """Follower 2 fetched at the log end (offset 0) at time T; an append at T + 5 s
    wakes its parked fetch. Its progress stays what its fetch said (Kafka's Replica
    state: ``lastFetchLeaderLogEndOffset`` 0, ``lastFetchTimeMs`` T): were the wake-up
    recorded as a fetch, a follower that then fell behind would count as caught up at
    T + 5 s and leave the ISR 5 s late."""

    async def run() -> tuple[int, int, int]:
        shell = BrokerShell(tmp_path, isr=[1, 2])
        fetched_ms = shell.clock.now_ms()

        def later() -> None:  # the append comes 5 s after the fetch (no timer runs here)
            shell.clock.advance(5_000)

        try:
            produce, answer = await _produce_woken_fetch(shell, later)
            assert answer.responses[0].partitions[0].records  # woken with the batch
            produce.cancel()
            core = shell.replicas.cores[(TOPIC, 0)].leader
            assert core is not None
            remote = core.remotes[2]
            return remote.last_fetch_leader_end, remote.last_fetch_ms, fetched_ms
        finally:
            await shell.close()

    leader_end, fetch_ms, fetched_ms = asyncio.run(run())
    assert leader_end == 0  # the log end when the follower fetched, not after the append
    assert fetch_ms == fetched_ms


def test_the_produce_answers_one_loop_pass_after_the_fetch_that_moves_the_hw(
    tmp_path: Path,
) -> None:
    """The delayed produce is a future the Produce handler awaits itself (parked at the
    append): the follower fetch that moves the high watermark resolves it, and the
    handler returns in the next pass of the event loop. Through a task per partition and
    a gather it took three more hand-offs, each behind everything else ready to run (on a
    busy leader: the follower's response, the other fetches)."""

    async def run() -> tuple[int, int]:
        shell = BrokerShell(tmp_path, isr=[1, 2])
        ctx = _fetch_ctx()
        try:
            produce, _ = await _produce_woken_fetch(shell)
            assert not produce.done()  # the follower has not fetched past the batch yet
            nxt = asyncio.ensure_future(handle_fetch(shell.broker, ctx, _follower_fetch(shell, 1)))
            turns = await _turns_until(produce.done)
            nxt.cancel()
            return turns, produce.result()
        finally:
            await shell.close()

    # turn 1 runs the follower's fetch (it completes the delayed produce), turn 2 the
    # Produce handler, which returns
    assert asyncio.run(run()) == (2, ErrorCode.NONE)
