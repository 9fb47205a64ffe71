"""Client compatibility against a real broker: what real clients see on the wire.

- Nullable strings go out as null (length -1, compact 0) where Kafka writes null: a
  successful CreateTopics answers ``ErrorMessage`` null, checked on the raw response bytes
  and through kafka-python and confluent-kafka.
- Each listener advertises exactly the APIs it serves (the specs' ``listeners``): every
  API a listener advertises is answered on it, and a controller-only API on a client
  listener closes the connection (Kafka's behaviour for an API the listener lacks).
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from riverbed.protocol.api_versions import (
    API_LISTENERS,
    BROKER_LISTENER,
    SUPPORTED_VERSIONS,
    ApiKey,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.headers import RequestHeader, decode_response, encode_request
from riverbed.protocol.messages import (
    AllocateProducerIdsRequest,
    ApiVersionsRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DescribeQuorumRequest,
    Message,
    ProduceRequest,
    UnregisterBrokerRequest,
    VoteRequest,
    request_class,
)
from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

_ids = itertools.count(1)


def exchange(sock: socket.socket, key: int, version: int, body: Message) -> bytes:
    """One request; the response frame's bytes after the size (ConnectionError if closed)."""
    sock.sendall(encode_request(RequestHeader(key, version, next(_ids), "compat"), body))
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} bytes")
        buf += chunk
    return buf[4:]


def raw_call(port: int, key: int, version: int, body: Message) -> bytes:
    """One request on a fresh connection; the response frame's bytes after the size."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        return exchange(sock, key, version, body)


def call(port: int, key: int, version: int, body: Message) -> Message:
    header = RequestHeader(key, version, 0, "compat")
    frame = raw_call(port, key, version, body)
    header.correlation_id = struct.unpack(">i", frame[:4])[0]
    return decode_response(header, frame)


def create_request(name: str) -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1)
    return CreateTopicsRequest(topics=[topic], timeout_ms=10000)


@pytest.mark.parametrize("version", [3, 4, 5, 7])
def test_create_topics_success_has_a_null_error_message_on_the_wire(
    broker: BrokerProcess, topic_name: str, version: int
) -> None:
    name = f"{topic_name}-v{version}".encode()
    frame = raw_call(broker.port, ApiKey.CREATE_TOPICS, version, create_request(name.decode()))
    flexible = version >= 5
    # response header: correlation id (+ an empty tagged section when flexible)
    pos = 4 + (1 if flexible else 0)
    pos += 4  # throttle_time_ms
    if flexible:
        assert frame[pos] == 2  # compact array of one topic
        pos += 1
        assert frame[pos] == len(name) + 1
        pos += 1
    else:
        assert frame[pos : pos + 4] == b"\x00\x00\x00\x01"
        pos += 4
        assert frame[pos : pos + 2] == struct.pack(">h", len(name))
        pos += 2
    assert frame[pos : pos + len(name)] == name
    pos += len(name)
    if version >= 7:
        pos += 16  # topic id
    assert frame[pos : pos + 2] == b"\x00\x00"  # error code NONE
    pos += 2
    null = b"\x00" if flexible else b"\xff\xff"
    assert frame[pos : pos + len(null)] == null, frame[pos : pos + 8].hex()


def test_real_clients_see_a_null_error_message(broker: BrokerProcess, topic_name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        result = admin.create_topics(
            {f"{topic_name}-kp": {"num_partitions": 1, "replication_factor": 1}}
        )
    finally:
        admin.close()
    [topic] = result["topics"]
    assert topic["error_code"] == 0 and topic["error_message"] is None, topic

    confluent = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    futures = confluent.create_topics([NewTopic(f"{topic_name}-ck", 2, 1)])
    for fut in futures.values():
        assert fut.result(15) is None


def advertised(port: int) -> dict[int, tuple[int, int]]:
    resp = call(port, ApiKey.API_VERSIONS, 3, ApiVersionsRequest())
    assert resp.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


#: Requests that differ from the schema defaults so that calling every advertised API
#: changes nothing (no registration of broker 0) and every call has a response (acks=1).
SAFE_BODIES = {
    ApiKey.PRODUCE: lambda: ProduceRequest(acks=1, timeout_ms=1000),
    ApiKey.BROKER_REGISTRATION: lambda: BrokerRegistrationRequest(
        broker_id=4242, cluster_id="not-this-cluster"
    ),
    ApiKey.UNREGISTER_BROKER: lambda: UnregisterBrokerRequest(broker_id=4242),
    ApiKey.ALLOCATE_PRODUCER_IDS: lambda: AllocateProducerIdsRequest(broker_id=4242),
}


def call_every_advertised_api(port: int, versions: dict[int, tuple[int, int]]) -> list[int]:
    """Each advertised API at its highest version on one connection; the api keys answered."""
    answered = []
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        for key, (_, hi) in sorted(versions.items()):
            body = SAFE_BODIES.get(key, request_class(key))()
            try:
                exchange(sock, key, hi, body)
            except (ConnectionError, OSError) as exc:
                raise AssertionError(f"api key {key} v{hi} is advertised but {exc}") from None
            answered.append(key)
    return answered


def test_broker_listener_serves_exactly_what_it_advertises(broker: BrokerProcess) -> None:
    versions = advertised(broker.port)
    # what Kafka serves on controller listeners only (Vote, AlterPartition, ...)
    controller_only = {k for k in SUPPORTED_VERSIONS if BROKER_LISTENER not in API_LISTENERS[k]}
    assert {ApiKey.VOTE, ApiKey.BROKER_REGISTRATION, ApiKey.ALTER_PARTITION} <= controller_only
    assert not set(versions) & controller_only
    assert {ApiKey.DESCRIBE_QUORUM, ApiKey.UNREGISTER_BROKER} <= set(versions)
    assert call_every_advertised_api(broker.port, versions) == sorted(versions)

    # served on the broker listener, passed on to the quorum leader
    quorum = call(
        broker.port,
        ApiKey.DESCRIBE_QUORUM,
        1,
        DescribeQuorumRequest(
            topics=[
                DescribeQuorumRequest.TopicData(
                    topic_name="__cluster_metadata",
                    partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)],
                )
            ]
        ),
    )
    [topic] = quorum.topics
    [part] = topic.partitions
    assert part.error_code == 0 and part.leader_id == broker.node_id, quorum
    gone = call(broker.port, ApiKey.UNREGISTER_BROKER, 0, UnregisterBrokerRequest(broker_id=4242))
    assert gone.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED

    # a controller-only API on a client listener: the connection is closed
    with pytest.raises(ConnectionError):
        raw_call(broker.port, ApiKey.VOTE, 0, VoteRequest())


def test_controller_listener_serves_exactly_what_it_advertises(broker: BrokerProcess) -> None:
    versions = advertised(broker.controller_port)
    assert {ApiKey.VOTE, ApiKey.FETCH_SNAPSHOT, ApiKey.BROKER_HEARTBEAT} <= set(versions)
    assert not set(versions) & {ApiKey.PRODUCE, ApiKey.METADATA, ApiKey.LIST_OFFSETS}
    assert call_every_advertised_api(broker.controller_port, versions) == sorted(versions)
    with pytest.raises(ConnectionError):
        raw_call(broker.controller_port, ApiKey.PRODUCE, 9, ProduceRequest(acks=1))


def test_describe_quorum_through_a_broker_listener(broker: BrokerProcess) -> None:
    """Real tools ask a broker: kafka-python's describe_metadata_quorum and
    ``riverbed quorum describe --bootstrap-server`` (as kafka-metadata-quorum does)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    [topic] = quorum["topics"]
    [part] = topic["partitions"]
    assert part["error"] is None and part["leader_id"] == broker.node_id, quorum
    assert [v["replica_id"] for v in part["current_voters"]] == [broker.node_id]

    cli = [sys.executable, "-m", "riverbed.cli.main", "quorum", "describe"]
    done = subprocess.run(
        [*cli, "--bootstrap-server", broker.bootstrap, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)["status"]
    assert status["leader_id"] == broker.node_id
    assert status["current_voters"] == [broker.node_id]
