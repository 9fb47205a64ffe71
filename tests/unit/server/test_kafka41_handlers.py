"""Handlers at the versions Kafka 4.1 added (issue 19, protocol level): each new
version's fields are read and written, and older versions answer as before."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tests.unit.server.test_produce_record_errors import PLAIN, Node

from riverbed.metadata.controller import Controller, ControllerConfig
from riverbed.metadata.image import BrokerEndpoint, replay_all
from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_response
from riverbed.protocol.messages import (
    ApiVersionsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from riverbed.protocol.records import SimpleRecord, build_batch
from riverbed.server.broker import cluster_info, groups, offsets, produce
from riverbed.server.network import RequestContext


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = Node(tmp_path)
    yield n
    n.logs.shutdown()


def _ctx(key: ApiKey, version: int) -> RequestContext:
    return RequestContext(RequestHeader(int(key), version, 7, "test"), "peer", "PLAINTEXT", 1, 0)


def _wire(key: ApiKey, version: int, response: Any) -> Any:
    """``response`` as a client decodes it at ``version``."""
    header = RequestHeader(int(key), version, 7, "test")
    return decode_response(header, encode_response(header, response)[4:])


def _produce(node: Node, version: int, topic: ProduceRequest.TopicProduceData) -> Any:
    req = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[topic])
    response = asyncio.run(produce.handle_produce(node.broker, _ctx(ApiKey.PRODUCE, version), req))
    decoded = _wire(ApiKey.PRODUCE, version, response)
    assert isinstance(decoded, ProduceResponse)
    return decoded.responses[0]


def test_produce_v13_names_topics_by_id(node: Node) -> None:
    P = ProduceRequest
    batch = build_batch([SimpleRecord(b"v", key=b"k")])
    topic_id = node.broker.metadata.image.topic(PLAIN).topic_id
    data = [P.PartitionProduceData(index=0, records=batch)]
    t = _produce(node, 13, P.TopicProduceData(topic_id=topic_id, partition_data=data))
    assert t.topic_id == topic_id and t.name == ""  # no name on the wire from v13 on
    assert t.partition_responses[0].error_code == ErrorCode.NONE
    assert node.log_end(PLAIN) == 1
    unknown = uuid.UUID(int=77)
    t = _produce(node, 13, P.TopicProduceData(topic_id=unknown, partition_data=data))
    assert t.topic_id == unknown
    assert t.partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert node.log_end(PLAIN) == 1
    t = _produce(node, 12, P.TopicProduceData(name=PLAIN, partition_data=data))  # by name
    assert t.name == PLAIN and t.partition_responses[0].base_offset == 1


def _list_offsets(node: Node, version: int, timestamp: int) -> Any:
    L = ListOffsetsRequest
    req = L(
        replica_id=-1,
        timeout_ms=5000,
        topics=[
            L.ListOffsetsTopic(
                name=PLAIN,
                partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=timestamp)],
            )
        ],
    )
    ctx = _ctx(ApiKey.LIST_OFFSETS, version)
    response = asyncio.run(offsets.handle_list_offsets(node.broker, ctx, req))
    decoded = _wire(ApiKey.LIST_OFFSETS, version, response)
    assert isinstance(decoded, ListOffsetsResponse)
    return decoded.topics[0].partitions[0]


def test_list_offsets_latest_tiered_without_a_remote_tier(node: Node) -> None:
    """v9 (KIP-1005) -5: the highest offset in the remote tier; -1 / epoch -1 when the
    partition has none (Kafka's answer without remote storage), not INVALID_REQUEST."""
    part = _list_offsets(node, 9, offsets.LATEST_TIERED_TIMESTAMP)
    assert (part.error_code, part.offset, part.timestamp, part.leader_epoch) == (0, -1, -1, -1)
    log = node.logs.get(PLAIN, 0)
    assert log is not None
    log.update_highest_offset_in_remote(0)
    part = _list_offsets(node, 10, offsets.LATEST_TIERED_TIMESTAMP)
    assert (part.error_code, part.offset) == (0, 0)
    assert _list_offsets(node, 9, -6).error_code == ErrorCode.INVALID_REQUEST


def test_describe_groups_v6_answers_an_unknown_group_not_found() -> None:
    """KIP-1043: v6 answers GROUP_ID_NOT_FOUND with a message where older versions get
    the Dead group without an error; a known group is untouched."""

    def dead() -> DescribeGroupsResponse.DescribedGroup:
        return DescribeGroupsResponse.DescribedGroup(
            error_code=0, group_id="g", group_state="Dead", members=[]
        )

    described = dead()
    groups._not_found(described)
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert described.error_message == "Group g not found."
    wire = _wire(ApiKey.DESCRIBE_GROUPS, 6, DescribeGroupsResponse(groups=[described]))
    assert wire.groups[0].error_message == "Group g not found."
    stable = DescribeGroupsResponse.DescribedGroup(error_code=0, group_id="s", group_state="Stable")
    groups._not_found(stable)
    assert stable.error_code == 0 and stable.error_message is None
    assert groups.DESCRIBE_GROUPS_NOT_FOUND_VERSION == 6


def test_api_versions_below_v4_leave_out_features_of_minimum_level_0(node: Node) -> None:
    """KAFKA-17492: transaction.version (levels 0-2) is listed from ApiVersions v4 on."""
    image = node.broker.metadata.image
    listed = {}
    for version in (3, 4):
        response = ApiVersionsResponse()
        cluster_info.add_features(response, image, SUPPORTED_VERSIONS, version)
        listed[version] = {f.name for f in response.supported_features}
    assert "transaction.version" in listed[4] and "transaction.version" not in listed[3]
    assert "metadata.version" in listed[3]


def _describe_cluster(node: Node, version: int, include_fenced: bool) -> Any:
    broker = SimpleNamespace(
        metadata=SimpleNamespace(image=node.broker.metadata.image, active_controller_id=lambda: 1),
        config=SimpleNamespace(node_id=1),
        cluster_id="c",
    )
    req = DescribeClusterRequest(include_fenced_brokers=include_fenced)
    ctx = _ctx(ApiKey.DESCRIBE_CLUSTER, version)
    response = asyncio.run(cluster_info.handle_describe_cluster(broker, ctx, req))  # type: ignore[arg-type]
    decoded = _wire(ApiKey.DESCRIBE_CLUSTER, version, response)
    assert isinstance(decoded, DescribeClusterResponse)
    return {b.broker_id: b.is_fenced for b in decoded.brokers}


def test_describe_cluster_v2_lists_fenced_brokers_when_asked(node: Node) -> None:
    """KIP-1073: IncludeFencedBrokers lists fenced brokers too, each with IsFenced."""
    image = node.broker.metadata.image
    c = Controller(ControllerConfig(node_id=1))
    eps = [BrokerEndpoint("PLAINTEXT", "host2", 9092)]
    image = replay_all(image, c.register_broker(image, 2, uuid.UUID(int=2), eps, None, 0).records)
    assert image.brokers[2].fenced  # a registration starts fenced
    node.broker.metadata.image = image
    assert _describe_cluster(node, 2, True) == {1: False, 2: True}
    assert _describe_cluster(node, 2, False) == {1: False}
    assert _describe_cluster(node, 1, True) == {1: False}  # v1 has no such field
