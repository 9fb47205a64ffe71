"""Replica fetches carry the follower's broker epoch (Fetch v15 ReplicaState, KIP-903) and
the leader refuses one from an incarnation older than the follower's registration (issue
18, defect 2): before, followers sent Fetch v12, no broker epoch reached the leader, and a
restarted process's in-flight fetch counted as its progress.

Node 1's real broker shell (`riverbed.testing.broker_shell`) leads ``t``-0 on [1, 2]; the
requests go through the real Fetch handler after a wire round trip at v15.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from riverbed.metadata.image import replay_all
from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from riverbed.protocol.messages import FetchRequest
from riverbed.replication.actions import FetchPosition
from riverbed.server.broker import fetch
from riverbed.server.network import RequestContext
from riverbed.server.replication.fetcher import REPLICA_FETCH_VERSION
from riverbed.testing.broker_shell import LISTENER, TOPIC, BrokerShell

FOLLOWER = 2


def _fetch_v15(topic_id: uuid.UUID, replica_epoch: int) -> FetchRequest:
    F = FetchRequest
    part = F.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=0, partition_max_bytes=1 << 20
    )
    return F(
        replica_state=F.ReplicaState(replica_id=FOLLOWER, replica_epoch=replica_epoch),
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[F.FetchTopic(topic_id=topic_id, partitions=[part])],
    )


async def _call(shell: BrokerShell, req: FetchRequest) -> Any:
    """Encode at v15, decode as the broker does, handle, and decode the response."""
    header = RequestHeader(int(ApiKey.FETCH), 15, 7, "replica-fetcher-2")
    got_header, body = decode_request(encode_request(header, req)[4:])
    assert isinstance(body, FetchRequest)
    ctx = RequestContext(got_header, "peer", LISTENER, 1, 0)
    response = await fetch.handle_fetch(shell.broker, ctx, body)
    plain = response.body if isinstance(response, fetch.SplicedResponse) else response
    return decode_response(header, encode_response(header, plain)[4:])


def test_a_v15_fetch_from_an_older_incarnation_is_refused(tmp_path: Path) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1])
        shell.broker.remote_log = None  # no tiered storage
        shell.apply()
        try:
            assert await shell.produce(acks=1) == ErrorCode.NONE
            # broker 2 restarted: its new registration (epoch 50) reaches the leader
            image = shell.metadata.image
            epoch = 50
            restarted = replace(image.brokers[FOLLOWER], broker_epoch=epoch)
            shell.metadata.image = replay_all(image, [restarted.to_record()])
            shell.apply()
            topic = shell.metadata.image.topic(TOPIC)
            stale = await _call(shell, _fetch_v15(topic.topic_id, epoch - 1))
            (t,) = stale.responses
            assert t.topic_id == topic.topic_id
            assert t.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            current = (await _call(shell, _fetch_v15(topic.topic_id, epoch))).responses[0]
            assert current.partitions[0].error_code == ErrorCode.NONE
            assert current.partitions[0].records  # the follower reads the record
            unknown = (await _call(shell, _fetch_v15(uuid.uuid4(), epoch))).responses[0]
            assert unknown.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
        finally:
            await shell.close()

    asyncio.run(run())


def test_replica_fetchers_send_v15_with_their_broker_epoch(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        shell = BrokerShell(tmp_path, isr=[1])
        shell.apply()
        try:
            topic = shell.metadata.image.topic(TOPIC)
            pos = FetchPosition(1, 3, 5, 2, replica_epoch=42)
            req = shell.replicas.fetchers.request_for({(TOPIC, 0): pos})
            header = RequestHeader(int(ApiKey.FETCH), REPLICA_FETCH_VERSION, 1, "r")
            _, body = decode_request(encode_request(header, req)[4:])
            assert isinstance(body, FetchRequest)
            assert fetch.replica_of(body) == (1, 42)
            assert body.topics[0].topic_id == topic.topic_id
        finally:
            await shell.close()

    asyncio.run(run())
    assert REPLICA_FETCH_VERSION >= 15
    # clients are offered Kafka 4.1's maximum (topics by id from v13 on) too
    assert SUPPORTED_VERSIONS[ApiKey.FETCH][1] >= REPLICA_FETCH_VERSION
