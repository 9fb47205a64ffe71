"""A topic's ``compression.type`` on a real broker: a producer's uncompressed batches are
stored in the topic's codec (the segment file says so) and every client reads the same
records back; ``producer`` keeps the producer's codec."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.records import iter_batches
from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.group_coordinators import load_group_coordinators

pytestmark = pytest.mark.integration

RECORDS = 200
QUIET = {"log_level": 3}


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    # a new group's first join is not delayed (the default 3 s): what the tests check is
    # the codec, and each consumer joins a group of its own
    with BrokerProcess(overrides={"group.initial.rebalance.delay.ms": "0"}) as proc:
        load_group_coordinators(proc.bootstrap)  # not in the first consumer's join (3 s)
        yield proc


def _topic(broker: BrokerProcess, codec: str) -> str:
    name = f"compressed-{codec}-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic(name, 1, 1, config={"compression.type": codec})
    for future in admin.create_topics([topic]).values():
        future.result(timeout=30)
    return name


def _produce(broker: BrokerProcess, topic: str, compression: str) -> list[bytes]:
    values = [b"record %d " % i + b"z" * (i % 40) for i in range(RECORDS)]
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": compression, "linger.ms": 50}
    )
    for value in values:
        producer.produce(topic, value, key=b"k")
    assert producer.flush(30) == 0
    return values


def _stored_codecs(broker: BrokerProcess, topic: str) -> set[CompressionType]:
    data = b"".join(p.read_bytes() for p in sorted((broker.data_dir / f"{topic}-0").glob("*.log")))
    return {h.compression for _, h in iter_batches(data)}


def _consume_confluent(broker: BrokerProcess, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            **QUIET,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            value = msg.value()
            assert value is not None
            got.append(value)
    consumer.close()
    return got


def test_uncompressed_batches_are_stored_in_zstd_and_read_back(broker: BrokerProcess) -> None:
    topic = _topic(broker, "zstd")
    values = _produce(broker, topic, "none")
    assert _stored_codecs(broker, topic) == {CompressionType.ZSTD}
    assert _consume_confluent(broker, topic) == values
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=30000,  # a stall ends the iteration (and fails the test)
    )
    got = []
    for m in consumer:
        got.append(m.value)
        if len(got) == len(values):
            break
    # no record beyond them: the consumer stands at the partition's end
    partition = KafkaTopicPartition(topic, 0)
    assert consumer.position(partition) == consumer.end_offsets([partition])[partition]
    assert got == values
    consumer.close()


def test_lz4_batches_are_stored_uncompressed(broker: BrokerProcess) -> None:
    topic = _topic(broker, "uncompressed")
    values = _produce(broker, topic, "lz4")
    assert _stored_codecs(broker, topic) == {CompressionType.NONE}
    assert _consume_confluent(broker, topic) == values


def test_producer_keeps_the_producers_codec(broker: BrokerProcess) -> None:
    topic = _topic(broker, "producer")
    _produce(broker, topic, "gzip")
    assert _stored_codecs(broker, topic) == {CompressionType.GZIP}


def test_an_altered_compression_type_applies_to_the_next_batches(broker: BrokerProcess) -> None:
    topic = _topic(broker, "producer")
    _produce(broker, topic, "none")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("compression.type", "snappy", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    deadline = time.monotonic() + 10
    while _stored_codecs(broker, topic) != {CompressionType.NONE, CompressionType.SNAPPY}:
        assert time.monotonic() < deadline, _stored_codecs(broker, topic)
        _produce(broker, topic, "none")  # the broker applies the change at its next update
    assert CompressionType.SNAPPY in _stored_codecs(broker, topic)
