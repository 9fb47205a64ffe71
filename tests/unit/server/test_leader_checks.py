"""Client requests are served by the partition's leader only (issue 11, partition leadership).

Node 1's broker handlers run against a real `PartitionManager` over real logs, with a
metadata image (built by the real controller) of four brokers and topic ``t``:

- partition 0: replicas (2, 1, 3), led by 2: node 1 hosts it as a follower;
- partition 1: replicas (1, 2, 3), led by 1;
- partition 2: replicas (2, 3, 4), not hosted by node 1 at all.

Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeProducers to
partitions 0 and 2 answer NOT_LEADER_OR_FOLLOWER; Produce v10+ and Fetch v12+ name the
current leader (KIP-951 tagged fields, checked on the encoded bytes), and Produce v10+
gives its endpoint. A client's produce never reaches the follower's log. When the image
moves leadership to node 1, the same requests succeed; when it moves away again, a
parked long-poll Fetch wakes up and answers NOT_LEADER_OR_FOLLOWER at once.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, MetadataImage, replay_all
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import (
    RequestHeader,
    decode_response,
    encode_response,
)
from riverbed.protocol.messages import (
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeProducersRequest,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    PartitionChangeRecord,
    ProduceRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.security.client_quotas import QuotaWindows
from riverbed.server.broker import fetch, offsets, produce, producers
from riverbed.server.broker.partitions import PartitionManager
from riverbed.server.broker.quota_enforcement import BrokerQuotas
from riverbed.server.network import RequestContext
from riverbed.server.purgatory import Purgatory
from riverbed.storage.clock import ManualClock
from riverbed.storage.log_manager import LogManager

NODE = 1
LISTENER = "PLAINTEXT"
FOLLOWED, LED, ELSEWHERE = 0, 1, 2


def _image() -> MetadataImage:
    c = Controller(ControllerConfig(node_id=NODE))
    image = replay_all(MetadataImage.EMPTY, c.bootstrap_records())
    for b in (1, 2, 3, 4):
        eps = [BrokerEndpoint(LISTENER, f"host{b}", 9090 + b)]
        res = c.register_broker(image, b, uuid.UUID(int=b), eps, f"rack{b}", 0)
        image = replay_all(image, res.records)
        up = c.unfence_broker(image, b, -1, 0, metadata_offset=image.offset)
        image = replay_all(image, up.records)
    CT = CreateTopicsRequest
    assignment = {FOLLOWED: [2, 1, 3], LED: [1, 2, 3], ELSEWHERE: [2, 3, 4]}
    req = CT(
        topics=[
            CT.CreatableTopic(
                name="t",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    CT.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                    for i, b in assignment.items()
                ],
            )
        ],
        timeout_ms=0,
        validate_only=False,
    )
    return replay_all(image, c.create_topics(image, req, 0).records)


class Node:
    def __init__(self, tmp_path: Path) -> None:
        self.purgatory = Purgatory()
        self.logs = LogManager([tmp_path / "logs"], ManualClock(1_700_000_000_000))
        self.partitions = PartitionManager(self.logs, NODE, {}, self.purgatory)
        self.metadata = SimpleNamespace(image=_image())
        self.partitions.apply_image(self.metadata.image)
        self.broker: Any = SimpleNamespace(
            partitions=self.partitions,
            metadata=self.metadata,
            fetch_purgatory=self.purgatory,
            remote_log=None,  # no tiered storage
            quotas=BrokerQuotas(QuotaWindows(11, 1000)),  # no quota configured
            topic_stats=None,  # riverbed.metrics.enable=false
        )

    def move_leader(self, index: int, leader: int) -> None:
        """Publish an image where ``leader`` leads partition ``index`` (ISR = {leader})."""
        topic = self.metadata.image.topic("t")
        rec = PartitionChangeRecord(
            partition_id=index, topic_id=topic.topic_id, leader=leader, isr=[leader]
        )
        self.metadata.image = replay_all(self.metadata.image, [rec])
        self.partitions.apply_image(self.metadata.image)

    def leader(self, index: int) -> tuple[int, int]:
        p = self.metadata.image.partition("t", index)
        return p.leader, p.leader_epoch

    async def call(self, api: ApiKey, version: int, handler: Any, req: Any) -> Any:
        """Run the handler; return the response as a client decodes it at ``version``."""
        header = RequestHeader(int(api), version, 7, "leader-test")
        ctx = RequestContext(header, "peer", LISTENER, 1, 0)
        response = await handler(self.broker, ctx, req)
        body = getattr(response, "body", response)  # a spliced Fetch response
        return decode_response(header, encode_response(header, body)[4:])


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = Node(tmp_path)
    yield n
    n.logs.shutdown()


def produce_req(*indexes: int) -> ProduceRequest:
    P = ProduceRequest
    batch = build_batch([SimpleRecord(b"v")], now_ms=1_700_000_000_000)
    return P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name="t",
                partition_data=[P.PartitionProduceData(index=i, records=batch) for i in indexes],
            )
        ],
    )


def fetch_req(*indexes: int, max_wait_ms: int = 0, current_epoch: int = -1) -> FetchRequest:
    F = FetchRequest
    return F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[
            F.FetchTopic(
                topic="t",
                partitions=[
                    F.FetchPartition(
                        partition=i,
                        current_leader_epoch=current_epoch,
                        fetch_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                    for i in indexes
                ],
            )
        ],
    )


def list_req(*indexes: int, replica_id: int = -1) -> ListOffsetsRequest:
    L = ListOffsetsRequest
    return L(
        replica_id=replica_id,
        topics=[
            L.ListOffsetsTopic(
                name="t",
                partitions=[
                    L.ListOffsetsPartition(partition_index=i, timestamp=-1) for i in indexes
                ],
            )
        ],
    )


def test_produce_to_a_non_leader_names_the_leader_and_leaves_the_follower_log_empty(
    node: Node,
) -> None:
    resp = asyncio.run(node.call(ApiKey.PRODUCE, 10, produce.handle_produce, produce_req(0, 1, 2)))
    parts = {p.index: p for p in resp.responses[0].partition_responses}
    assert parts[LED].error_code == 0 and parts[LED].base_offset == 0
    for index in (FOLLOWED, ELSEWHERE):
        p = parts[index]
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.base_offset == -1
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == node.leader(index)
    assert node.leader(FOLLOWED)[0] == 2 and node.leader(ELSEWHERE)[0] == 2
    assert [(e.node_id, e.host, e.port, e.rack) for e in resp.node_endpoints] == [
        (2, "host2", 9092, "rack2")
    ]
    assert node.partitions.get("t", FOLLOWED).log.log_end_offset == 0
    assert node.partitions.get("t", LED).log.log_end_offset == 1
    # before v10 the error alone (the client refreshes its metadata)
    old = asyncio.run(node.call(ApiKey.PRODUCE, 9, produce.handle_produce, produce_req(0)))
    p = old.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.current_leader.leader_id == -1
    assert old.node_endpoints == []


def test_produce_to_an_unknown_partition_is_still_unknown(node: Node) -> None:
    resp = asyncio.run(node.call(ApiKey.PRODUCE, 10, produce.handle_produce, produce_req(9)))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and resp.node_endpoints == []


def test_fetch_from_a_non_leader_names_the_leader(node: Node) -> None:
    asyncio.run(node.call(ApiKey.PRODUCE, 10, produce.handle_produce, produce_req(1)))
    resp = asyncio.run(node.call(ApiKey.FETCH, 12, fetch.handle_fetch, fetch_req(0, 1, 2)))
    parts = {p.partition_index: p for p in resp.responses[0].partitions}
    assert parts[LED].error_code == 0 and parts[LED].high_watermark == 1 and parts[LED].records
    for index in (FOLLOWED, ELSEWHERE):
        p = parts[index]
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and not p.records
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == node.leader(index)
    # a stale leader epoch is fenced, and the answer names the current leader too
    _leader, epoch = node.leader(LED)
    node.move_leader(LED, NODE)  # a new epoch, same leader
    stale = fetch_req(1, current_epoch=epoch)
    p = asyncio.run(node.call(ApiKey.FETCH, 12, fetch.handle_fetch, stale)).responses[0]
    assert p.partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert p.partitions[0].current_leader.leader_epoch == epoch + 1
    # v11 has no current_leader field: the error alone
    p = asyncio.run(node.call(ApiKey.FETCH, 11, fetch.handle_fetch, fetch_req(0))).responses[0]
    assert p.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.partitions[0].current_leader.leader_id == -1


def test_list_offsets_epochs_and_delete_records_on_a_non_leader(node: Node) -> None:
    resp = asyncio.run(
        node.call(ApiKey.LIST_OFFSETS, 7, offsets.handle_list_offsets, list_req(0, 1, 2))
    )
    codes = {p.partition_index: p.error_code for p in resp.topics[0].partitions}
    assert codes == {
        FOLLOWED: ErrorCode.NOT_LEADER_OR_FOLLOWER,
        LED: 0,
        ELSEWHERE: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    }
    # Kafka's debugging replica id may read a follower's offsets
    debug = asyncio.run(
        node.call(ApiKey.LIST_OFFSETS, 7, offsets.handle_list_offsets, list_req(0, replica_id=-2))
    )
    assert debug.topics[0].partitions[0].error_code == 0
    OE = OffsetForLeaderEpochRequest
    req = OE(
        replica_id=-1,
        topics=[
            OE.OffsetForLeaderTopic(
                topic="t",
                partitions=[
                    OE.OffsetForLeaderPartition(partition=i, leader_epoch=0) for i in (0, 1)
                ],
            )
        ],
    )
    resp = asyncio.run(
        node.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, offsets.handle_offset_for_leader_epoch, req)
    )
    codes = {p.partition: p.error_code for p in resp.topics[0].partitions}
    assert codes == {FOLLOWED: ErrorCode.NOT_LEADER_OR_FOLLOWER, LED: 0}
    D = DeleteRecordsRequest
    req = D(
        topics=[
            D.DeleteRecordsTopic(
                name="t",
                partitions=[D.DeleteRecordsPartition(partition_index=0, offset=-1)],
            )
        ],
        timeout_ms=1000,
    )
    resp = asyncio.run(node.call(ApiKey.DELETE_RECORDS, 2, offsets.handle_delete_records, req))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    DP = DescribeProducersRequest
    req = DP(topics=[DP.TopicRequest(name="t", partition_indexes=[0, 1, 2, 9])])
    resp = asyncio.run(
        node.call(ApiKey.DESCRIBE_PRODUCERS, 0, producers.handle_describe_producers, req)
    )
    codes = {p.partition_index: p.error_code for p in resp.topics[0].partitions}
    assert codes == {
        FOLLOWED: ErrorCode.NOT_LEADER_OR_FOLLOWER,
        LED: 0,
        ELSEWHERE: ErrorCode.NOT_LEADER_OR_FOLLOWER,
        9: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_leadership_moving_here_and_away(node: Node) -> None:
    node.move_leader(FOLLOWED, NODE)
    resp = asyncio.run(node.call(ApiKey.PRODUCE, 10, produce.handle_produce, produce_req(0)))
    assert resp.responses[0].partition_responses[0].error_code == 0
    fetched = asyncio.run(node.call(ApiKey.FETCH, 12, fetch.handle_fetch, fetch_req(0)))
    assert fetched.responses[0].partitions[0].high_watermark == 1

    async def parked_fetch_wakes_when_leadership_moves() -> Any:
        # a long poll at the log end (nothing to return yet) is parked...
        F = FetchRequest
        req = fetch_req(0, max_wait_ms=30_000)
        req.topics[0].partitions[0].fetch_offset = 1
        assert isinstance(req, F)
        call = asyncio.ensure_future(node.call(ApiKey.FETCH, 12, fetch.handle_fetch, req))
        await asyncio.sleep(0.05)
        assert not call.done() and node.purgatory.parked == 1
        node.move_leader(FOLLOWED, 3)  # ...and answers as soon as this node stops leading
        return await asyncio.wait_for(call, 5)

    resp = asyncio.run(parked_fetch_wakes_when_leadership_moves())
    p = resp.responses[0].partitions[0]
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == node.leader(FOLLOWED)
    resp = asyncio.run(node.call(ApiKey.PRODUCE, 10, produce.handle_produce, produce_req(0)))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.current_leader.leader_id == 3
    assert [e.node_id for e in resp.node_endpoints] == [3]
