"""The checkpoint intervals a broker is configured with are the ones it writes at
(``replica.high.watermark.checkpoint.interval.ms``,
``log.flush.start.offset.checkpoint.interval.ms``): before, the keys were accepted and
described but the broker kept Kafka's defaults (5 s and 60 s) whatever they said."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
)
from riverbed.storage.layout import METADATA_PARTITION_DIR
from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

TOPIC = "checkpointed"
RECORDS = 10
#: Far below the defaults (5,000 and 60,000 ms) this test would outwait.
INTERVAL_MS = 100
#: The wait for a checkpoint: many intervals, and well under the 5 s default.
CHECKPOINT_WAIT_S = 3.0


@pytest.fixture(scope="module")
def checkpointing_broker() -> Iterator[BrokerProcess]:
    overrides = {
        "replica.high.watermark.checkpoint.interval.ms": str(INTERVAL_MS),
        "log.flush.start.offset.checkpoint.interval.ms": str(INTERVAL_MS),
    }
    with BrokerProcess(overrides=overrides) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all"})
        for i in range(RECORDS):
            producer.produce(TOPIC, str(i).encode())
        assert producer.flush(30) == 0
        yield proc


def _checkpointed(broker: BrokerProcess, name: str) -> int:
    """The offset ``name`` holds for the topic's partition once it shows one, else -1."""
    deadline = time.monotonic() + CHECKPOINT_WAIT_S
    while True:
        offset = read_offset_checkpoint(broker.data_dir / name).get((TOPIC, 0), -1)
        if offset > 0 or time.monotonic() > deadline:
            return offset
        time.sleep(0.05)


def test_the_high_watermark_checkpoint_follows_its_interval(
    checkpointing_broker: BrokerProcess,
) -> None:
    assert _checkpointed(checkpointing_broker, REPLICATION_OFFSET_CHECKPOINT) == RECORDS


def test_the_log_start_checkpoint_follows_its_interval(
    checkpointing_broker: BrokerProcess,
) -> None:
    admin = AdminClient({"bootstrap.servers": checkpointing_broker.bootstrap})
    moved = admin.delete_records([TopicPartition(TOPIC, 0, 4)])
    for future in moved.values():
        future.result(timeout=30)
    assert _checkpointed(checkpointing_broker, LOG_START_OFFSET_CHECKPOINT) == 4


def test_the_metadata_log_rolls_at_metadata_log_segment_bytes() -> None:
    """``metadata.log.segment.bytes`` bounds the metadata log's segments (before, the log
    kept one 1 GiB segment whatever it said)."""
    with BrokerProcess(overrides={"metadata.log.segment.bytes": "4096"}) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        topics = [NewTopic(f"meta-{i}", 1, 1) for i in range(60)]
        for future in admin.create_topics(topics).values():
            future.result(timeout=60)
        segments = sorted((proc.data_dir / METADATA_PARTITION_DIR).glob("*.log"))
    assert len(segments) >= 2, segments
