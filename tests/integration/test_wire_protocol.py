"""Raw Kafka requests (riverbed's own codec as the client) against a real broker process.

Checks per-partition error codes and edge cases that the client libraries hide: produce
errors (unknown partition, bad acks, corrupt CRC), acks=0 silence (and a closed connection
when an acks=0 produce fails), log_append_time, fetch limits (whole batches,
partition_max_bytes, response max_bytes), isolation levels (LastStableOffset = HW,
aborted-transactions list), the delayed fetch woken by an append, OFFSET_OUT_OF_RANGE
(above the end and below the log start), ListOffsets special timestamps (incl. v0),
metadata auto-creation, ApiVersions at an unknown version, and the placeholder group APIs.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
from typing import Any

import pytest

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeLogDirsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration


class Client:
    """A blocking one-connection Kafka client on riverbed's message engine."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.ids = itertools.count(1)

    def send(self, key: int, version: int, body: Any) -> RequestHeader:
        header = RequestHeader(key, version, next(self.ids), "wire-test")
        self.sock.sendall(encode_request(header, body))
        return header

    def recv(self, header: RequestHeader) -> Any:
        (size,) = struct.unpack(">i", self._exactly(4))
        return decode_response(header, self._exactly(size))

    def call(self, key: int, version: int, body: Any) -> Any:
        return self.recv(self.send(key, version, body))

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(broker: BrokerProcess) -> Any:
    c = Client(broker.port)
    yield c
    c.close()


def create_topic(
    c: Client, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    req = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in (configs or {}).items()
                ],
            )
        ],
        timeout_ms=10000,
    )
    resp = c.call(ApiKey.CREATE_TOPICS, 7, req)
    assert resp.topics[0].error_code == 0, resp


def produce_req(topic: str, partition: int, records: bytes | None, acks: int = -1) -> Any:
    return ProduceRequest(
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=partition, records=records)
                ],
            )
        ],
    )


def batch(*values: bytes, ts: int | None = None) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([SimpleRecord(v, timestamp=ts) for v in values], now_ms=now)


def produce(c: Client, topic: str, records: bytes, partition: int = 0, version: int = 9) -> Any:
    resp = c.call(ApiKey.PRODUCE, version, produce_req(topic, partition, records))
    return resp.responses[0].partition_responses[0]


def fetch_req(topic: str, parts: list[tuple[int, int, int]], **kw: Any) -> Any:
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=kw.get("max_wait_ms", 0),
        min_bytes=kw.get("min_bytes", 0),
        max_bytes=kw.get("max_bytes", 50 * 1024 * 1024),
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=p,
                        fetch_offset=off,
                        partition_max_bytes=pmax,
                        current_leader_epoch=-1,
                    )
                    for p, off, pmax in parts
                ],
            )
        ],
    )


def values_of(records: bytes | None) -> list[bytes | None]:
    out: list[bytes | None] = []
    for pos, h in iter_batches(records or b""):
        out += [r.value for r in iter_records((records or b"")[pos : pos + h.size])]
    return out


def test_produce_errors_and_acks0(broker: BrokerProcess, client: Client, topic_name: str) -> None:
    create_topic(client, topic_name)
    assert (
        produce(client, "no-such-topic-abc", batch(b"x")).error_code
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert (
        produce(client, topic_name, batch(b"x"), partition=5).error_code
        == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    resp = client.call(ApiKey.PRODUCE, 9, produce_req(topic_name, 0, batch(b"x"), acks=2))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    corrupt = bytearray(batch(b"hello"))
    corrupt[-1] ^= 0xFF  # inside the CRC-covered records
    assert produce(client, topic_name, bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE

    # acks=0: no response at all; the next response on the wire answers the next request.
    client.send(ApiKey.PRODUCE, 9, produce_req(topic_name, 0, batch(b"silent"), acks=0))
    h = client.send(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    assert client.recv(h).error_code == 0
    ok = produce(client, topic_name, batch(b"after"))
    assert (ok.error_code, ok.base_offset, ok.log_append_time_ms) == (0, 1, -1)
    fetched = client.call(ApiKey.FETCH, 12, fetch_req(topic_name, [(0, 0, 1 << 20)]))
    assert values_of(fetched.responses[0].partitions[0].records) == [b"silent", b"after"]


def test_produce_validation_errors(client: Client, topic_name: str) -> None:
    create_topic(client, topic_name, configs={"max.message.bytes": "2000"})
    future = int(time.time() * 1000) + 7_200_000  # beyond message.timestamp.after.max.ms
    assert (
        produce(client, topic_name, batch(b"late", ts=future)).error_code
        == ErrorCode.INVALID_TIMESTAMP
    )
    assert produce(client, topic_name, batch(b"z" * 5000)).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert produce(client, topic_name, b"").error_code == ErrorCode.INVALID_RECORD
    magic1 = bytearray(batch(b"old"))
    magic1[16] = 1  # a pre-0.11 message set
    assert produce(client, topic_name, bytes(magic1)).error_code == (
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    )
    ok = produce(client, topic_name, batch(b"fine"))
    assert (ok.error_code, ok.base_offset) == (0, 0)  # nothing refused was appended


def test_log_append_time_in_produce_response(client: Client, topic_name: str) -> None:
    create_topic(client, topic_name, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    r = produce(client, topic_name, batch(b"a", ts=1000))
    assert r.error_code == 0 and before <= r.log_append_time_ms <= int(time.time() * 1000)
    old = produce(client, topic_name, batch(b"b", ts=1000), version=3)  # pre-flexible version
    assert old.error_code == 0 and old.base_offset == 1


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch_limits_whole_batches(client: Client, topic_name: str, version: int) -> None:
    create_topic(client, topic_name, partitions=2)
    for p in (0, 1):
        for i in range(3):
            assert (
                produce(
                    client, topic_name, batch(b"%d-%d" % (p, i), b"y" * 500), partition=p
                ).error_code
                == 0
            )
    # partition_max_bytes smaller than one batch: still exactly one whole batch.
    r = client.call(ApiKey.FETCH, version, fetch_req(topic_name, [(0, 0, 10)]))
    part = r.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark) == (0, 6)
    assert values_of(part.records) == [b"0-0", b"y" * 500]
    # Response max_bytes reached by partition 0: partition 1 is answered, but empty.
    r = client.call(
        ApiKey.FETCH,
        version,
        fetch_req(topic_name, [(0, 2, 1 << 20), (1, 0, 1 << 20)], max_bytes=100),
    )
    p0, p1 = r.responses[0].partitions
    assert values_of(p0.records) == [b"0-1", b"y" * 500]
    assert (p1.partition_index, p1.error_code, values_of(p1.records)) == (1, 0, [])
    # Fetching from the middle of a batch returns the whole batch (clients skip the head).
    r = client.call(ApiKey.FETCH, version, fetch_req(topic_name, [(1, 3, 1 << 20)]))
    assert values_of(r.responses[0].partitions[0].records)[:2] == [b"1-1", b"y" * 500]
    # Out of range, and unknown partition.
    r = client.call(ApiKey.FETCH, version, fetch_req(topic_name, [(0, 7, 1 << 20), (9, 0, 100)]))
    codes = [p.error_code for p in r.responses[0].partitions]
    assert codes == [ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_isolation_levels_and_offsets_below_the_log_start(client: Client, topic_name: str) -> None:
    create_topic(client, topic_name)
    for i in range(4):
        assert produce(client, topic_name, batch(b"r%d" % i)).error_code == 0
    answers = {}
    for level in (0, 1):
        req = fetch_req(topic_name, [(0, 0, 1 << 20)])
        req.isolation_level = level
        part = client.call(ApiKey.FETCH, 12, req).responses[0].partitions[0]
        answers[level] = part
        # No transactions: the last stable offset is the high watermark for both levels.
        assert (part.error_code, part.high_watermark, part.last_stable_offset) == (0, 4, 4)
        assert values_of(part.records) == [b"r0", b"r1", b"r2", b"r3"]
    assert answers[0].aborted_transactions is None  # read_uncommitted: null, as Kafka
    assert answers[1].aborted_transactions == []  # read_committed: none aborted

    D = DeleteRecordsRequest
    deleted = client.call(
        ApiKey.DELETE_RECORDS,
        2,
        D(
            topics=[
                D.DeleteRecordsTopic(
                    name=topic_name,
                    partitions=[D.DeleteRecordsPartition(partition_index=0, offset=2)],
                )
            ],
            timeout_ms=5000,
        ),
    )
    assert deleted.topics[0].partitions[0].low_watermark == 2
    below = client.call(ApiKey.FETCH, 12, fetch_req(topic_name, [(0, 1, 1 << 20)]))
    part = below.responses[0].partitions[0]
    assert (part.error_code, part.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, 2)
    at_start = client.call(ApiKey.FETCH, 12, fetch_req(topic_name, [(0, 2, 1 << 20)]))
    assert values_of(at_start.responses[0].partitions[0].records)[-2:] == [b"r2", b"r3"]


def test_acks0_produce_error_closes_the_connection(broker: BrokerProcess, topic_name: str) -> None:
    c = Client(broker.port)
    try:
        create_topic(c, topic_name)
        # Kafka: no response can carry the error, so the producer's connection is closed.
        c.send(ApiKey.PRODUCE, 9, produce_req(topic_name, 7, batch(b"lost"), acks=0))
        with pytest.raises(ConnectionError):
            c.recv(c.send(ApiKey.API_VERSIONS, 3, ApiVersionsRequest()))
    finally:
        c.close()
    c = Client(broker.port)  # the broker serves on
    try:
        assert produce(c, topic_name, batch(b"kept")).error_code == 0
    finally:
        c.close()
    assert "produce with acks=0 failed" in broker.log_tail()


def test_old_fetch_versions_are_not_down_converted(client: Client, topic_name: str) -> None:
    create_topic(client, topic_name)
    assert produce(client, topic_name, batch(b"v2 only")).error_code == 0
    r = client.call(ApiKey.FETCH, 3, fetch_req(topic_name, [(0, 0, 1 << 20)]))
    part = r.responses[0].partitions[0]
    assert (part.error_code, part.records) == (ErrorCode.UNSUPPORTED_VERSION, b"")


def test_delayed_fetch_is_woken_by_an_append(
    broker: BrokerProcess, client: Client, topic_name: str
) -> None:
    create_topic(client, topic_name)
    h = client.send(
        ApiKey.FETCH, 12, fetch_req(topic_name, [(0, 0, 1 << 20)], max_wait_ms=30000, min_bytes=1)
    )

    def append_later() -> None:
        time.sleep(0.3)
        other = Client(broker.port)
        try:
            assert produce(other, topic_name, batch(b"wake")).error_code == 0
        finally:
            other.close()

    t = threading.Thread(target=append_later)
    t.start()
    # Well before max_wait_ms the parked fetch answers with the appended record.
    r = client.recv(h)
    t.join()
    assert values_of(r.responses[0].partitions[0].records) == [b"wake"]


def test_list_offsets_and_epochs(client: Client, topic_name: str) -> None:
    create_topic(client, topic_name)
    base = int(time.time() * 1000) - 10_000
    for i, ts in enumerate([base, base + 3000, base + 1000]):
        assert produce(client, topic_name, batch(b"%d" % i, ts=ts)).error_code == 0

    def list_offsets(ts: int, version: int = 7) -> Any:
        req = ListOffsetsRequest(
            replica_id=-1,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic_name,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=0,
                            timestamp=ts,
                            max_num_offsets=1,
                            current_leader_epoch=-1,
                        )
                    ],
                )
            ],
        )
        return client.call(ApiKey.LIST_OFFSETS, version, req).topics[0].partitions[0]

    assert list_offsets(-2).offset == 0
    assert list_offsets(-1).offset == 3
    latest_max = list_offsets(-3)
    assert (latest_max.offset, latest_max.timestamp) == (1, base + 3000)
    by_time = list_offsets(base + 500)
    assert (by_time.offset, by_time.timestamp) == (1, base + 3000)
    assert list_offsets(base + 5000).offset == -1
    assert list_offsets(-1, version=0).old_style_offsets == [3]

    req = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                topic=topic_name,
                partitions=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=-1, leader_epoch=0
                    )
                ],
            )
        ],
    )
    end = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, req).topics[0].partitions[0]
    assert (end.error_code, end.leader_epoch, end.end_offset) == (0, 0, 3)

    dirs = client.call(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
    sizes = {
        (t.name, p.partition_index): p.partition_size
        for d in dirs.results
        for t in d.topics
        for p in t.partitions
    }
    assert sizes[(topic_name, 0)] > 0


def test_metadata_auto_create_and_invalid_names(client: Client, topic_name: str) -> None:
    req = MetadataRequest(
        topics=[
            MetadataRequest.MetadataRequestTopic(name=topic_name),
            MetadataRequest.MetadataRequestTopic(name="bad/name"),
        ],
        allow_auto_topic_creation=True,
    )
    resp = client.call(ApiKey.METADATA, 12, req)
    by_name = {t.name: t for t in resp.topics}
    assert by_name[topic_name].error_code == 0
    assert [p.leader_id for p in by_name[topic_name].partitions] == [1]  # num.partitions=1
    assert by_name["bad/name"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert [(b.node_id, b.port) for b in resp.brokers] == [(1, client.sock.getpeername()[1])]
    # Without permission to create: unknown.
    req = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic_name + "-x")],
        allow_auto_topic_creation=False,
    )
    resp = client.call(ApiKey.METADATA, 12, req)
    assert resp.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_api_versions_fallback_and_placeholders(client: Client) -> None:
    # we speak 0-4: a v5 request (v4's body, the header's version patched) is answered
    # UNSUPPORTED_VERSION with our ranges, at v0
    header = RequestHeader(ApiKey.API_VERSIONS, 5, 999, "wire-test")
    frame = bytearray(
        encode_request(
            RequestHeader(ApiKey.API_VERSIONS, 4, 999, "wire-test"), ApiVersionsRequest()
        )
    )
    frame[6:8] = (5).to_bytes(2, "big")
    client.sock.sendall(bytes(frame))
    resp = client.recv(header)
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[ApiKey.PRODUCE][1] >= 9 and ranges[ApiKey.FETCH][1] >= 12

    fc = client.call(
        ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=["g"])
    )
    # the first FindCoordinator creates __consumer_offsets; this node leads it all
    port = client.sock.getpeername()[1]
    assert [(c.error_code, c.node_id, c.port) for c in fc.coordinators] == [(0, 1, port)]
    fc0 = client.call(ApiKey.FIND_COORDINATOR, 0, FindCoordinatorRequest(key="g"))
    assert (fc0.error_code, fc0.node_id, fc0.port) == (0, 1, port)
    bad = client.call(
        ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=7, coordinator_keys=["g"])
    )
    assert [c.error_code for c in bad.coordinators] == [ErrorCode.INVALID_REQUEST]

    pid1 = client.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
    )
    pid2 = client.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
    )
    assert pid1.error_code == 0 and pid1.producer_id >= 0 and pid2.producer_id != pid1.producer_id


def test_a_current_leader_epoch_newer_than_the_leaders_is_refused(
    client: Client, topic_name: str
) -> None:
    # A new topic's leader epoch is 0; a client that claims epoch 7 knows of a leader this
    # broker has not seen yet: Fetch, ListOffsets and OffsetForLeaderEpoch answer
    # UNKNOWN_LEADER_EPOCH (Kafka's checkCurrentLeaderEpoch), and -1 skips the check.
    create_topic(client, topic_name)
    assert produce(client, topic_name, batch(b"x")).error_code == 0
    for claimed, code in ((7, ErrorCode.UNKNOWN_LEADER_EPOCH), (-1, 0), (0, 0)):
        req = fetch_req(topic_name, [(0, 0, 1 << 20)])
        req.topics[0].partitions[0].current_leader_epoch = claimed
        part = client.call(ApiKey.FETCH, 12, req).responses[0].partitions[0]
        assert part.error_code == code, (claimed, part)
        assert values_of(part.records) == ([] if code else [b"x"])

        L = ListOffsetsRequest
        listed = client.call(
            ApiKey.LIST_OFFSETS,
            7,
            L(
                replica_id=-1,
                topics=[
                    L.ListOffsetsTopic(
                        name=topic_name,
                        partitions=[
                            L.ListOffsetsPartition(
                                partition_index=0, timestamp=-1, current_leader_epoch=claimed
                            )
                        ],
                    )
                ],
            ),
        )
        assert listed.topics[0].partitions[0].error_code == code, (claimed, listed)

        O = OffsetForLeaderEpochRequest  # noqa: E741
        ends = client.call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            4,
            O(
                replica_id=-1,
                topics=[
                    O.OffsetForLeaderTopic(
                        topic=topic_name,
                        partitions=[
                            O.OffsetForLeaderPartition(
                                partition=0, current_leader_epoch=claimed, leader_epoch=0
                            )
                        ],
                    )
                ],
            ),
        )
        end = ends.topics[0].partitions[0]
        assert end.error_code == code, (claimed, end)
        assert end.end_offset == (-1 if code else 1)
