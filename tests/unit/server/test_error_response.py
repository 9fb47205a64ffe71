"""The generic error response (Kafka's getErrorResponse) and a crashing handler in a node.

The unit half checks, per API, that the error response mirrors the request's topics /
partitions / resources with the error code set and encodes at every served version. The
node half runs a real node in this process with one handler replaced by one that raises:
the client gets UNKNOWN_SERVER_ERROR and the SAME connection keeps working.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest

from riverbed.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import (
    RequestHeader,
    decode_response,
    encode_request,
    encode_response,
)
from riverbed.protocol.messages import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeProducersRequest,
    ElectLeadersRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
    message_spec,
    request_class,
)
from riverbed.server.broker import dispatch
from riverbed.server.broker.error_response import error_code_of, error_response
from riverbed.storage.errors import StorageError

U = int(ErrorCode.UNKNOWN_SERVER_ERROR)


def _roundtrip(api: int, version: int, response: Any) -> Any:
    """Encode the response as the broker would and decode it as a client would."""
    header = RequestHeader(api, version, 7, "t")
    frame = encode_response(header, response)
    return decode_response(header, frame[4:])


def test_every_served_api_and_version_gets_an_encodable_error_response() -> None:
    for api in dispatch.HANDLERS:
        lo, hi = SUPPORTED_VERSIONS[ApiKey(api)]
        for version in range(lo, hi + 1):
            req = request_class(api)()
            resp = _roundtrip(api, version, error_response(api, req, version, U))
            top = {f.attr: f for f in message_spec(resp).struct.fields}
            if "error_code" in top and version in top["error_code"].versions:
                assert resp.error_code == U, (api, version)


def _filled(spec: Any, depth: int = 0) -> Any:
    """A request struct whose arrays of structs hold one (recursively filled) entry."""
    obj = spec.cls()
    for f in spec.fields:
        if f.is_struct_array and f.struct is not None and depth < 3:
            setattr(obj, f.attr, [_filled(f.struct, depth + 1)])
    return obj


def test_error_responses_to_filled_requests_encode_at_every_version() -> None:
    for api in dispatch.HANDLERS:
        lo, hi = SUPPORTED_VERSIONS[ApiKey(api)]
        req = _filled(message_spec(request_class(api)).struct)
        for version in range(lo, hi + 1):
            _roundtrip(api, version, error_response(api, req, version, U))


def test_produce_mirrors_topics_and_partitions() -> None:
    P = ProduceRequest
    req = P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name="a",
                partition_data=[P.PartitionProduceData(index=i) for i in (0, 3)],
            ),
            P.TopicProduceData(name="b", partition_data=[P.PartitionProduceData(index=1)]),
        ],
    )
    for version in (3, 9):
        resp = _roundtrip(0, version, error_response(0, req, version, U))
        got = [
            (t.name, p.index, p.error_code, p.base_offset)
            for t in resp.responses
            for p in t.partition_responses
        ]
        assert got == [("a", 0, U, -1), ("a", 3, U, -1), ("b", 1, U, -1)]


def test_fetch_mirrors_requested_topics_not_forgotten_ones() -> None:
    F = FetchRequest
    req = F(
        topics=[F.FetchTopic(topic="t", partitions=[F.FetchPartition(partition=2)])],
        forgotten_topics_data=[F.ForgottenTopic(topic="old", partitions=[0])],
    )
    resp = _roundtrip(1, 12, error_response(1, req, 12, U))
    assert resp.error_code == U
    assert [
        (t.topic, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.responses
    ] == [("t", [(2, U)])]
    p = resp.responses[0].partitions[0]
    assert (p.high_watermark, p.last_stable_offset, p.log_start_offset) == (-1, -1, -1)


def test_list_offsets_and_offset_for_leader_epoch_and_delete_records() -> None:
    L = ListOffsetsRequest
    req = L(
        topics=[
            L.ListOffsetsTopic(name="t", partitions=[L.ListOffsetsPartition(partition_index=4)])
        ]
    )
    resp = _roundtrip(2, 7, error_response(2, req, 7, U))
    p = resp.topics[0].partitions[0]
    assert (resp.topics[0].name, p.partition_index, p.error_code, p.offset) == ("t", 4, U, -1)

    OE = OffsetForLeaderEpochRequest
    req2 = OE(
        topics=[
            OE.OffsetForLeaderTopic(
                topic="t", partitions=[OE.OffsetForLeaderPartition(partition=1, leader_epoch=5)]
            )
        ]
    )
    resp2 = _roundtrip(23, 4, error_response(23, req2, 4, U))
    p2 = resp2.topics[0].partitions[0]
    # The epoch is an answer, not a key: it is not echoed back.
    assert (resp2.topics[0].topic, p2.partition, p2.error_code, p2.leader_epoch) == ("t", 1, U, -1)

    D = DeleteRecordsRequest
    req3 = D(
        topics=[
            D.DeleteRecordsTopic(
                name="t", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=9)]
            )
        ]
    )
    resp3 = _roundtrip(21, 2, error_response(21, req3, 2, U))
    p3 = resp3.topics[0].partitions[0]
    assert (p3.error_code, p3.low_watermark) == (U, -1)


def test_admin_apis_mirror_topics_and_resources() -> None:
    C = CreateTopicsRequest
    req = C(topics=[C.CreatableTopic(name="x", num_partitions=1, replication_factor=1)])
    resp = _roundtrip(19, 7, error_response(19, req, 7, U))
    assert [(t.name, t.error_code) for t in resp.topics] == [("x", U)]

    old = DeleteTopicsRequest(topic_names=["x", "y"])
    resp = _roundtrip(20, 3, error_response(20, old, 3, U))
    assert [(r.name, r.error_code) for r in resp.responses] == [("x", U), ("y", U)]
    tid = uuid.uuid4()
    new = DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=tid)]
    )
    resp = _roundtrip(20, 6, error_response(20, new, 6, U))
    assert [(r.topic_id, r.error_code) for r in resp.responses] == [(tid, U)]

    R = DescribeConfigsRequest
    req4 = R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name="x")])
    resp4 = _roundtrip(32, 4, error_response(32, req4, 4, U))
    assert [(r.resource_type, r.resource_name, r.error_code) for r in resp4.results] == [
        (2, "x", U)
    ]

    CP = CreatePartitionsRequest
    req5 = CP(topics=[CP.CreatePartitionsTopic(name="x", count=3)])
    resp5 = _roundtrip(37, 3, error_response(37, req5, 3, U))
    assert [(r.name, r.error_code) for r in resp5.results] == [("x", U)]

    M = MetadataRequest
    req6 = M(topics=[M.MetadataRequestTopic(name="x")])
    resp6 = _roundtrip(3, 12, error_response(3, req6, 12, U))
    assert [(t.name, t.error_code) for t in resp6.topics] == [("x", U)]
    assert resp6.brokers == []


def test_partitions_named_by_index_alone_are_answered_each() -> None:
    """Requests naming partitions by bare index (DescribeProducers' and WriteTxnMarkers'
    ``PartitionIndexes``, ElectLeaders' ``Partitions``) get an entry per partition, as
    Kafka's getErrorResponse: clients read their partition's error there (the admin
    client's describeProducers / abortTransaction / electLeaders)."""
    D = DescribeProducersRequest
    req = D(topics=[D.TopicRequest(name="t", partition_indexes=[0, 2])])
    resp = _roundtrip(61, 0, error_response(61, req, 0, U))
    assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
        (0, U),
        (2, U),
    ]

    W = WriteTxnMarkersRequest
    marker = W.WritableTxnMarker(
        producer_id=7, producer_epoch=1, transaction_result=True, coordinator_epoch=0,
        topics=[W.WritableTxnMarkerTopic(name="t", partition_indexes=[3])],
    )  # fmt: skip
    resp2 = _roundtrip(27, 1, error_response(27, W(markers=[marker]), 1, U))
    assert [
        (m.producer_id, t.name, p.partition_index, p.error_code)
        for m in resp2.markers
        for t in m.topics
        for p in t.partitions
    ] == [(7, "t", 3, U)]

    E = ElectLeadersRequest
    req3 = E(election_type=0, topic_partitions=[E.TopicPartitions(topic="t", partitions=[1])])
    resp3 = _roundtrip(43, 2, error_response(43, req3, 2, U))
    (result,) = resp3.replica_election_results
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [(1, U)]


def test_a_typed_error_keeps_its_kafka_code() -> None:
    class Disk(StorageError):
        error_code = 56

    from riverbed.metadata.control_common import ControllerError
    from riverbed.raft.node import NotLeaderError

    assert error_code_of(Disk("gone")) is ErrorCode.KAFKA_STORAGE_ERROR
    assert error_code_of(ControllerError(ErrorCode.POLICY_VIOLATION, "no")) is (
        ErrorCode.POLICY_VIOLATION
    )
    assert error_code_of(NotLeaderError(2, 5)) is ErrorCode.NOT_CONTROLLER
    assert error_code_of(ValueError("bug")) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert error_code_of(OSError(5, "EIO")) is ErrorCode.UNKNOWN_SERVER_ERROR


# -- a real node in this process, one handler crashing ----------------------------------


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    cid: int,
    api: int,
    version: int,
    body: Any,
) -> Any:
    header = RequestHeader(api, version, cid, "crash-test")
    writer.write(encode_request(header, body))
    await writer.drain()
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 20))
    return decode_response(header, await asyncio.wait_for(reader.readexactly(size), 20))


def test_crashing_handler_answers_unknown_server_error_and_connection_survives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from riverbed.server.config import ServerConfig
    from riverbed.server.node import Node

    async def boom(broker: Any, ctx: Any, req: Any) -> Any:
        raise RuntimeError("handler bug for the test")

    monkeypatch.setitem(dispatch.HANDLERS, ApiKey.LIST_OFFSETS, boom)
    monkeypatch.setitem(dispatch.HANDLERS, ApiKey.DESCRIBE_CONFIGS, boom)
    config = ServerConfig.load(
        None,
        [
            "node.id=1",
            "process.roles=broker,controller",
            "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "advertised.listeners=PLAINTEXT://127.0.0.1:0",
            "controller.listener.names=CONTROLLER",
            "controller.quorum.voters=1@127.0.0.1:9093",
            f"log.dirs={tmp_path / 'data'}",
            "riverbed.http.listeners=",  # no fixed port: another node may hold 9644
        ],
    )

    async def scenario() -> None:
        node = Node(config)
        await node.start()
        try:
            host, port = node.bound_listeners["PLAINTEXT"]
            reader, writer = await asyncio.open_connection(host, port)
            ids = itertools.count(1)
            L = ListOffsetsRequest
            lo = L(
                replica_id=-1,
                topics=[
                    L.ListOffsetsTopic(
                        name="t",
                        partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)],
                    )
                ],
            )
            resp = await _call(reader, writer, next(ids), ApiKey.LIST_OFFSETS, 7, lo)
            assert [
                (t.name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in resp.topics
            ] == [("t", [(0, U)])]
            R = DescribeConfigsRequest
            dc = R(resources=[R.DescribeConfigsResource(resource_type=4, resource_name="1")])
            resp = await _call(reader, writer, next(ids), ApiKey.DESCRIBE_CONFIGS, 1, dc)
            assert [(r.resource_name, r.error_code) for r in resp.results] == [("1", U)]
            # The same connection still serves a healthy API.
            meta = await _call(
                reader, writer, next(ids), ApiKey.METADATA, 12, MetadataRequest(topics=[])
            )
            assert [b.node_id for b in meta.brokers] == [1]
            writer.close()
        finally:
            await node.stop()

    with caplog.at_level("ERROR", logger="riverbed.server.broker.dispatch"):
        asyncio.run(scenario())
    assert "handler bug for the test" in caplog.text
    assert "UNKNOWN_SERVER_ERROR" in caplog.text
