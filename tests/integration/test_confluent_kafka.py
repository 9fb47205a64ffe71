"""confluent-kafka (librdkafka, unmodified) against a real riverbed broker process.

Producer with every codec and acks setting, consumer with assign/seek, watermarks and
offsets_for_times, and AdminClient: create (validate-only too), describe/alter configs
(classic and incremental), create partitions, delete records, describe cluster, delete.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}  # librdkafka warnings only


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})


def create(admin: AdminClient, name: str, partitions: int = 1, **kw: Any) -> None:
    for fut in admin.create_topics([NewTopic(name, partitions, 1, **kw)]).values():
        fut.result(15)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **conf: Any) -> list[Any]:
    errors: list[Any] = []
    delivered: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        (errors if err else delivered).append(err or msg)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **QUIET, **conf})
    for r in records:
        p.produce(topic, on_delivery=on_delivery, **r)
    assert p.flush(20) == 0
    assert errors == []
    return delivered


def consume(bootstrap: str, tps: list[TopicPartition], expected: int) -> list[Any]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **QUIET}
    )
    try:
        c.assign(tps)
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append(m)
        return got
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("acks", ["all", "1"])
def test_produce_consume(
    broker: BrokerProcess, admin: AdminClient, topic_name: str, codec: str, acks: str
) -> None:
    create(admin, topic_name, 3)
    records = [
        {
            "key": None if i % 5 == 0 else b"k%d" % i,
            "value": None if i % 9 == 0 else b"v" * (i % 300),
            "headers": [("n", str(i).encode()), ("null", None)] if i % 4 == 0 else None,
            "partition": i % 3,
        }
        for i in range(600)
    ]
    produce(broker.bootstrap, topic_name, records, **{"compression.type": codec, "acks": acks})
    tps = [TopicPartition(topic_name, p, 0) for p in range(3)]
    got = consume(broker.bootstrap, tps, len(records))
    assert len(got) == len(records)
    for p in range(3):
        mine = [m for m in got if m.partition() == p]
        want = [r for r in records if r["partition"] == p]
        assert [m.offset() for m in mine] == list(range(len(want)))
        assert [(m.key(), m.value()) for m in mine] == [(r["key"], r["value"]) for r in want]
        assert [m.headers() for m in mine] == [r["headers"] for r in want]


def test_assign_seek_watermarks_and_times(
    broker: BrokerProcess, admin: AdminClient, topic_name: str
) -> None:
    create(admin, topic_name)
    base = int(time.time() * 1000) - 50_000
    produce(
        broker.bootstrap,
        topic_name,
        [{"value": b"%d" % i, "timestamp": base + i * 100, "partition": 0} for i in range(50)],
        **{"linger.ms": 0, "batch.num.messages": 7},
    )
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 50)
        [found] = c.offsets_for_times([TopicPartition(topic_name, 0, base + 2050)], timeout=10)
        assert found.offset == 21
        # Seek into the middle of a batch: records below the offset must not be returned.
        c.assign([TopicPartition(topic_name, 0, 33)])
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while len(got) < 17 and time.monotonic() < deadline:
            got += c.consume(100, 0.5)
        assert [m.offset() for m in got] == list(range(33, 50))
        assert got[0].timestamp() == (1, base + 3300)  # (TIMESTAMP_CREATE_TIME, ts)
    finally:
        c.close()


def test_admin_configs_partitions_records(
    broker: BrokerProcess, admin: AdminClient, topic_name: str
) -> None:
    # validate_only creates nothing.
    for fut in admin.create_topics([NewTopic(topic_name, 2, 1)], validate_only=True).values():
        fut.result(15)
    assert topic_name not in admin.list_topics(timeout=10).topics
    create(admin, topic_name, 2, config={"retention.ms": "100000"})
    assert len(admin.list_topics(timeout=10).topics[topic_name].partitions) == 2

    res = ConfigResource("topic", topic_name)
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["retention.ms"].value == "100000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source in (
        ConfigSource.DEFAULT_CONFIG.value,
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )

    inc = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "3000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    admin.incremental_alter_configs([inc])[inc].result(15)
    configs = admin.describe_configs([res])[res].result(15)
    assert configs["max.message.bytes"].value == "3000"
    assert configs["retention.ms"].value == "604800000"  # back to the default
    # The altered config is in force for the partition logs right away.
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, **QUIET})
    p.produce(topic_name, value=b"z" * 6000, partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]

    for fut in admin.create_partitions([NewPartitions(topic_name, 4)]).values():
        fut.result(15)
    assert len(admin.list_topics(timeout=10).topics[topic_name].partitions) == 4
    with pytest.raises(KafkaException):
        for fut in admin.create_partitions([NewPartitions(topic_name, 2)]).values():
            fut.result(15)

    produce(broker.bootstrap, topic_name, [{"value": b"x", "partition": 3} for _ in range(10)])
    [deleted] = admin.delete_records([TopicPartition(topic_name, 3, 6)]).values()
    assert deleted.result(15).low_watermark == 6
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            **QUIET,
        }
    )
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 3), timeout=10) == (6, 10)
    finally:
        c.close()

    cluster = admin.describe_cluster().result(15)
    assert [n.id for n in cluster.nodes] == [1]
    assert cluster.controller.id == 1

    for fut in admin.delete_topics([topic_name]).values():
        fut.result(15)
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_describe_configs_synonyms(admin: AdminClient, topic_name: str) -> None:
    """Kafka's synonym lists: broker keys per layer (dynamic, static), then their defaults."""
    create(admin, topic_name, 1, config={"max.message.bytes": "5000"})
    broker_res = ConfigResource("broker", "1")
    dyn = ConfigResource(
        "broker",
        "1",
        incremental_configs=[
            ConfigEntry(
                "log.retention.ms", "987654321", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    admin.incremental_alter_configs([dyn])[dyn].result(15)
    try:
        res = ConfigResource("topic", topic_name)
        configs = admin.describe_configs([res])[res].result(15)

        def syn(key: str) -> list[tuple[str, str | None, int]]:
            return [(s.name, s.value, s.source) for s in configs[key].synonyms.values()]

        S = ConfigSource
        retention = configs["retention.ms"]
        assert (retention.value, retention.source) == ("987654321", S.DYNAMIC_BROKER_CONFIG.value)
        assert syn("retention.ms") == [
            ("log.retention.ms", "987654321", S.DYNAMIC_BROKER_CONFIG.value),
            ("log.retention.hours", "168", S.DEFAULT_CONFIG.value),
        ]
        # The module's broker sets log.segment.bytes in its static config.
        assert configs["segment.bytes"].source == S.STATIC_BROKER_CONFIG.value
        # confluent-kafka keys synonyms by name, so the static and default entries of
        # log.segment.bytes collapse into one (the kafka-python test sees both).
        assert [s[0] for s in syn("segment.bytes")] == ["log.segment.bytes"]
        assert syn("max.message.bytes") == [
            ("max.message.bytes", "5000", S.DYNAMIC_TOPIC_CONFIG.value),
            ("message.max.bytes", "1048588", S.DEFAULT_CONFIG.value),
        ]
        assert syn("message.timestamp.type") == [
            ("log.message.timestamp.type", "CreateTime", S.DEFAULT_CONFIG.value)
        ]
        broker_configs = admin.describe_configs([broker_res])[broker_res].result(15)
        assert [
            (s.name, s.source) for s in broker_configs["log.retention.ms"].synonyms.values()
        ] == [
            ("log.retention.ms", S.DYNAMIC_BROKER_CONFIG.value),
            ("log.retention.hours", S.DEFAULT_CONFIG.value),
        ]
    finally:
        undo = ConfigResource(
            "broker",
            "1",
            incremental_configs=[
                ConfigEntry(
                    "log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE
                )
            ],
        )
        admin.incremental_alter_configs([undo])[undo].result(15)


def test_unknown_topic_without_auto_create_fails_cleanly(broker: BrokerProcess) -> None:
    errors: list[Any] = []
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "message.timeout.ms": 3000,
            "allow.auto.create.topics": False,
            **QUIET,
        }
    )
    p.produce("no-such-topic-xyz", value=b"x", on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0] is not None


def test_recreated_topic_starts_empty(
    broker: BrokerProcess, admin: AdminClient, topic_name: str
) -> None:
    create(admin, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": b"old", "partition": 0} for _ in range(5)])
    for fut in admin.delete_topics([topic_name]).values():
        fut.result(15)
    create(admin, topic_name)
    produce(broker.bootstrap, topic_name, [{"value": b"new", "partition": 0}])
    got = consume(broker.bootstrap, [TopicPartition(topic_name, 0, 0)], 1)
    assert [(m.offset(), m.value()) for m in got] == [(0, b"new")]
