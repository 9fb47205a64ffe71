"""Client compatibility against a real broker: what real clients see on the wire.

- Nullable strings go out as null (length -1, compact 0) where Kafka writes null: a
  successful CreateTopics answers ``ErrorMessage`` null, checked on the raw response bytes
  and through kafka-python and confluent-kafka.
"""

from __future__ import annotations

import itertools
import socket
import struct

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.headers import RequestHeader, encode_request
from riverbed.protocol.messages import CreateTopicsRequest
from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

_ids = itertools.count(1)


def raw_call(port: int, key: int, version: int, body: object) -> bytes:
    """One request on a fresh connection; the response frame's bytes after the size."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(encode_request(RequestHeader(key, version, next(_ids), "compat"), body))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {len(buf)} bytes")
            buf += chunk
        return buf[4:]


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
