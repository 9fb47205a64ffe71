"""kafka-python (unmodified) against a real riverbed broker process.

Covers produce/consume with every compression codec (keys, headers, null values),
CreateTime vs LogAppendTime topics as the consumer sees them, offsets_for_times and
beginning/end offsets, and topic administration through KafkaAdminClient.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Any:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def create(
    admin: Any, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])


def consume_all(bootstrap: str, tps: list[TopicPartition], expected: int) -> list[Any]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(records)
        return got
    finally:
        consumer.close()


# kafka-python's snappy goes through python-snappy (installed with the dev extra).
@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_every_codec(
    broker: BrokerProcess, admin: Any, topic_name: str, codec: str | None
) -> None:
    create(admin, topic_name, partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5
    )
    sent = []
    for i in range(300):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value = None if i % 11 == 0 and key else (f"value-{i}-" * (i % 5 + 1)).encode()
        headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 3 == 0 else []
        part = i % 2
        producer.send(topic_name, key=key, value=value, headers=headers, partition=part)
        sent.append((part, key, value, headers))
    producer.flush(20)
    producer.close()

    tps = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
    got = consume_all(broker.bootstrap, tps, len(sent))
    assert len(got) == len(sent)
    for part in (0, 1):
        mine = [(r.partition, r.key, r.value, list(r.headers)) for r in got if r.partition == part]
        assert mine == [s for s in sent if s[0] == part]
        assert [r.offset for r in got if r.partition == part] == list(range(len(mine)))


def test_create_time_and_log_append_time(
    broker: BrokerProcess, admin: Any, topic_name: str
) -> None:
    ct, lat = topic_name + "-ct", topic_name + "-lat"
    create(admin, ct)
    create(admin, lat, configs={"message.timestamp.type": "LogAppendTime"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    old_ts = int(time.time() * 1000) - 3_600_000  # an hour ago: inside CreateTime bounds
    before = int(time.time() * 1000)
    meta_ct = producer.send(ct, value=b"x", timestamp_ms=old_ts).get(10)
    meta_lat = producer.send(lat, value=b"y", timestamp_ms=old_ts).get(10)
    after = int(time.time() * 1000)
    producer.close()
    # The produce response carries the broker's time only for LogAppendTime topics.
    assert meta_ct.timestamp == old_ts
    assert before <= meta_lat.timestamp <= after

    [rec_ct] = consume_all(broker.bootstrap, [TopicPartition(ct, 0)], 1)
    [rec_lat] = consume_all(broker.bootstrap, [TopicPartition(lat, 0)], 1)
    assert (rec_ct.timestamp, rec_ct.timestamp_type) == (old_ts, 0)
    assert rec_lat.timestamp_type == 1
    assert before <= rec_lat.timestamp <= after


def test_offsets_for_times_and_watermarks(
    broker: BrokerProcess, admin: Any, topic_name: str
) -> None:
    create(admin, topic_name)
    base = int(time.time() * 1000) - 100_000
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    for i in range(10):
        producer.send(topic_name, value=b"v%d" % i, timestamp_ms=base + i * 1000, partition=0).get(
            10
        )
    producer.close()
    tp = TopicPartition(topic_name, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        found = consumer.offsets_for_times({tp: base + 4500})
        assert found[tp] is not None
        assert (found[tp].offset, found[tp].timestamp) == (5, base + 5000)
        assert consumer.offsets_for_times({tp: base})[tp].offset == 0
        assert consumer.offsets_for_times({tp: base + 60_000})[tp] is None
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
    finally:
        consumer.close()


def test_admin_create_alter_partitions_delete(
    broker: BrokerProcess, admin: Any, topic_name: str
) -> None:
    create(admin, topic_name, partitions=2, configs={"retention.ms": "3600000"})
    assert topic_name in admin.list_topics()

    resource = ConfigResource(
        ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "7200000"}
    )
    admin.alter_configs([resource])
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name)], config_filter="all"
    )
    entries = described["topic"][topic_name]
    assert entries["retention.ms"]["value"] == "7200000"
    assert entries["cleanup.policy"]["value"] == "delete"

    admin.create_partitions({topic_name: NewPartitions(total_count=5)})
    [desc] = admin.describe_topics([topic_name])
    assert len(desc["partitions"]) == 5
    assert all(p["leader_id"] == 1 for p in desc["partitions"])
    assert "ALTER_CONFIGS" in desc["authorized_operations"]

    # The new partitions take data.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(topic_name, value=b"late", partition=4).get(10)
    producer.close()

    admin.delete_topics([topic_name])
    deadline = time.monotonic() + 10
    while topic_name in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic_name not in admin.list_topics()


def test_describe_configs_synonyms(admin: Any, topic_name: str) -> None:
    create(admin, topic_name, configs={"retention.ms": "3600000"})
    described = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name)],
        include_synonyms=True,
        config_filter="all",
    )
    entries = described["topic"][topic_name]

    def syn(key: str) -> list[tuple[str, str, str]]:
        return [(s["name"], s["value"], s["source"]) for s in entries[key]["synonyms"]]

    assert entries["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert syn("retention.ms") == [
        ("retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.hours", "168", "DEFAULT_CONFIG"),
    ]
    assert syn("segment.bytes")[0] == (
        "log.segment.bytes",
        str(1024 * 1024),
        "STATIC_BROKER_CONFIG",
    )
    assert syn("max.message.bytes") == [("message.max.bytes", "1048588", "DEFAULT_CONFIG")]
    assert entries["max.message.bytes"]["config_source"] == "DEFAULT_CONFIG"


def test_create_existing_topic_fails(broker: BrokerProcess, admin: Any, topic_name: str) -> None:
    from kafka.errors import TopicAlreadyExistsError

    create(admin, topic_name)
    with pytest.raises(TopicAlreadyExistsError):
        create(admin, topic_name)


def test_producer_auto_creates_topic(broker: BrokerProcess, admin: Any, topic_name: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    meta = producer.send(topic_name, value=b"first").get(15)
    producer.close()
    assert (meta.partition, meta.offset) == (0, 0)
    assert topic_name in admin.list_topics()


def test_create_topic_with_replica_assignment(admin: Any, topic_name: str) -> None:
    admin.create_topics(
        [
            NewTopic(
                topic_name,
                num_partitions=-1,
                replication_factor=-1,
                replica_assignments={0: [1], 1: [1], 2: [1]},
            )
        ]
    )
    [desc] = admin.describe_topics([topic_name])
    assert sorted((p["partition_index"], p["replica_nodes"]) for p in desc["partitions"]) == [
        (0, [1]),
        (1, [1]),
        (2, [1]),
    ]


def test_batches_larger_than_fetch_limits_still_progress(
    broker: BrokerProcess, admin: Any, topic_name: str
) -> None:
    create(admin, topic_name)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=2_000_000)
    values = [bytes([i]) * 900_000 for i in range(3)]
    for v in values:
        producer.send(topic_name, value=v, partition=0).get(15)
    producer.close()
    tp = TopicPartition(topic_name, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=1000,  # far below one batch
        fetch_max_bytes=1000,
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    assert got == values
