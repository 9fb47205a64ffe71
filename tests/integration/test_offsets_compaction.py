"""`__consumer_offsets` survives restarts after the cleaner compacted it: committed offsets
are written, superseded many times over, the offsets topic is cleaned (small segments,
a short cleaner backoff), the broker is killed and restarted, and every group reads back
its last committed offsets; a deleted group stays deleted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
OFFSETS = "__consumer_offsets"
COMMITS = 40  # per group and partition: each supersedes the previous one


def _cleaned_up_to(data_dir: Path) -> int:
    """The cleaner checkpoint of __consumer_offsets-0 (-1: not cleaned yet)."""
    for path in data_dir.rglob("cleaner-offset-checkpoint"):
        for line in path.read_text().splitlines()[2:]:
            topic, partition, offset = line.split()
            if (topic, partition) == (OFFSETS, "0"):
                return int(offset)
    return -1


def _committed(bootstrap: str, group: str, tps: list[TopicPartition]) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        return [tp.offset for tp in c.committed(tps, timeout=20)]
    finally:
        c.close()


def _records_in_offsets_topic(bootstrap: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", **QUIET})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(OFFSETS, 0), timeout=10)
        c.assign([TopicPartition(OFFSETS, 0, lo)])
        n, last = 0, -1
        deadline = time.monotonic() + 20
        while last < hi - 1 and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                n, last = n + 1, msg.offset()
        assert last >= hi - 1, "could not read __consumer_offsets to its end"
        return n
    finally:
        c.close()


def test_committed_offsets_survive_a_restart_after_the_offsets_topic_is_compacted() -> None:
    overrides = {
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": "4096",
        "log.cleaner.backoff.ms": "100",
        "log.cleaner.min.cleanable.ratio": "0.1",
    }
    with BrokerProcess(overrides=overrides) as broker:
        b = broker.bootstrap
        topic = "oc-data"
        admin = AdminClient({"bootstrap.servers": b, **QUIET})
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(20)
        tps = [TopicPartition(topic, p) for p in range(3)]
        expected: dict[str, list[int]] = {}
        for g, group in enumerate(("g-kept", "g-other", "g-deleted")):
            c = Consumer({"bootstrap.servers": b, "group.id": group, **QUIET})
            for i in range(1, COMMITS + 1):
                offsets = [TopicPartition(topic, p, 100 * g + 10 * p + i) for p in range(3)]
                c.commit(offsets=offsets, asynchronous=False)
            c.close()
            expected[group] = [100 * g + 10 * p + COMMITS for p in range(3)]
        admin.delete_consumer_groups(["g-deleted"])["g-deleted"].result(20)
        written = 3 * 3 * COMMITS
        assert broker.data_dir is not None
        deadline = time.monotonic() + 60
        while _cleaned_up_to(broker.data_dir) <= 0 and time.monotonic() < deadline:
            time.sleep(0.3)
        cleaned = _cleaned_up_to(broker.data_dir)
        assert cleaned > 0, "the cleaner never cleaned __consumer_offsets"
        # what the cleaner left: far fewer records than commits were written
        assert _records_in_offsets_topic(b) < written // 2
        broker.restart(kill=True)
        assert _committed(b, "g-kept", tps) == expected["g-kept"]
        assert _committed(b, "g-other", tps) == expected["g-other"]
        assert _committed(b, "g-deleted", tps) == [-1001] * 3  # OFFSET_INVALID: none
        # the reloaded coordinator goes on committing on top of the cleaned log
        c = Consumer({"bootstrap.servers": b, "group.id": "g-kept", **QUIET})
        c.commit(offsets=[TopicPartition(topic, 0, 999)], asynchronous=False)
        c.close()
        broker.restart()
        assert _committed(b, "g-kept", tps) == [999, *expected["g-kept"][1:]]
