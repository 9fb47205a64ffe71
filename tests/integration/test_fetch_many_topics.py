"""Consumers of many topics against a real broker: every record, no disconnect.

Issue 18 defect 6: librdkafka (Fetch v12) lists a topic several times in one Fetch when
its rotating list of partitions wraps around, the broker regrouped the partitions per
topic, and the sendfile splicing then failed ("fetch response token not found in the
encoded response"): the connection was closed on every such fetch. kafka-python uses
older Fetch versions and is checked the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from riverbed.testing.cluster import BrokerProcess
from riverbed.testing.group_coordinators import load_group_coordinators

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
TOPIC_COUNT = 24
PARTITIONS = 3
RECORDS_PER_PARTITION = 60
RECORDS_PER_BATCH = 3
PARTITION_FETCH_BYTES = 1024
CONSUME_DEADLINE_S = 60.0
SPLICE_ERROR = "token not found"


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    # conftest's broker, but a new group's first join is not delayed (the default 3 s):
    # what the tests check is the fetches, and each consumer joins a group of its own
    overrides = {
        "log.segment.bytes": str(1024 * 1024),
        "num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerProcess(overrides=overrides) as proc:
        load_group_coordinators(proc.bootstrap)  # not in the first consumer's join (3 s)
        yield proc


def _create_and_fill(broker: BrokerProcess, prefix: str) -> tuple[list[str], set[bytes]]:
    """TOPIC_COUNT topics of PARTITIONS partitions, RECORDS_PER_PARTITION records each."""
    topics = [f"{prefix}-{i:02d}" for i in range(TOPIC_COUNT)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    for fut in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
        fut.result(30)
    # small batches: every partition has data for several fetches
    conf = {"linger.ms": 5, "batch.num.messages": RECORDS_PER_BATCH}
    p = Producer({"bootstrap.servers": broker.bootstrap, **conf, **QUIET})
    expected: set[bytes] = set()
    for t in topics:
        for part in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION):
                value = f"{t}/{part}/{i}".encode()
                p.produce(t, value=value, partition=part)
                expected.add(value)
    assert p.flush(30) == 0
    return topics, expected


def _disconnects(stats: dict[str, Any]) -> dict[str, int]:
    """Disconnects per broker connection, the group coordinator's included (librdkafka
    counts a closed shared connection there), the bootstrap entries left out (librdkafka
    drops them once it knows the cluster's brokers)."""
    return {
        name: b["disconnects"] for name, b in stats["brokers"].items() if "bootstrap" not in name
    }


def test_confluent_consumer_of_many_topics_reads_all_without_disconnects(
    broker: BrokerProcess, topic_name: str
) -> None:
    topics, expected = _create_and_fill(broker, topic_name)
    errors: list[Any] = []
    stats: list[dict[str, Any]] = []
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": topic_name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # a few batches per partition per fetch: several fetches with data for every
            # partition (each one starts a partition further in librdkafka's list)
            "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
            "statistics.interval.ms": 200,
            "error_cb": errors.append,
            "stats_cb": lambda s: stats.append(json.loads(s)),
            **QUIET,
        }
    )
    got: list[bytes] = []
    try:
        c.subscribe(topics)
        deadline = time.monotonic() + CONSUME_DEADLINE_S
        while len(got) < len(expected) and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        seen = len(stats)
        while len(stats) == seen and time.monotonic() < deadline:
            c.poll(0.1)  # the statistics after the last record
    finally:
        c.close()
    assert SPLICE_ERROR not in broker.log_tail()
    assert errors == []
    assert sorted(got) == sorted(expected)
    disconnects = _disconnects(stats[-1])
    assert disconnects and all(n == 0 for n in disconnects.values()), disconnects


def test_kafka_python_consumer_of_many_topics_reads_all(
    broker: BrokerProcess, topic_name: str
) -> None:
    topics, expected = _create_and_fill(broker, topic_name)
    c = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=topic_name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
    )
    got: list[bytes] = []
    try:
        c.subscribe(topics)
        deadline = time.monotonic() + CONSUME_DEADLINE_S
        while len(got) < len(expected) and time.monotonic() < deadline:
            for records in c.poll(500).values():
                got.extend(r.value for r in records)
    finally:
        c.close()
    assert SPLICE_ERROR not in broker.log_tail()
    assert sorted(got) == sorted(expected)
