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
from riverbed.protocol.messages import FetchRequest
from riverbed.server.broker.fetch import handle_fetch
from riverbed.server.network import RequestContext, SplicedResponse
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


def test_append_wakes_the_parked_follower_fetch_and_its_next_fetch_completes_the_produce(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1, 2])
        ctx = RequestContext(
            RequestHeader(int(ApiKey.FETCH), 15, 1, "f"), "peer", "PLAINTEXT", 1, 0
        )
        try:
            shell.broker.remote_log = None  # no tiered storage on this node
            shell.apply()
            # replicas.start() never called: no ticker, so no produce is completed by a poll
            fetch = asyncio.ensure_future(
                handle_fetch(shell.broker, ctx, _follower_fetch(shell, 0))
            )
            await _turns_until(lambda: shell.purgatory.parked == 1)
            produce = asyncio.ensure_future(shell.produce(acks=-1))
            await _turns_until(fetch.done)
            answer = fetch.result()
            assert isinstance(answer, SplicedResponse)  # the new batch, from the log file
            assert answer.body.responses[0].partitions[0].high_watermark == 0
            assert sum(fr.size for fr in answer.files) > 0
            for fr in answer.files:
                for rng in fr.ranges:
                    rng.close()
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
