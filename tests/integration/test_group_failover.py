"""The group coordinator follows ``__consumer_offsets`` leadership on 3 real nodes.

``__consumer_offsets`` is replicated 3 ways (min.insync.replicas 2). A consumer group
commits offsets; the node that coordinates it is killed with SIGKILL; the partition's new
leader loads the group from its replica and the same consumer carries on (it finds the
new coordinator): every offset it had committed is still committed, and its later
commits land on the new coordinator.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from riverbed.testing.quorum_cluster import QuorumCluster

from .test_quorum import OVERRIDES as QUORUM_OVERRIDES

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OVERRIDES = {
    **QUORUM_OVERRIDES,
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "200",
    "broker.session.timeout.ms": "4000",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}
QUIET = {"log_level": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("groups"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=20)
        return int(tp.offset)
    finally:
        c.close()


def test_a_killed_coordinator_hands_its_groups_to_the_new_leader(cluster: QuorumCluster) -> None:
    b = cluster.bootstrap_servers
    topic, group = "fo-topic", "fo-group"
    admin = AdminClient({"bootstrap.servers": b, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    p = Producer({"bootstrap.servers": b, "acks": "all", **QUIET})
    for i in range(100):
        p.produce(topic, b"%d" % i)
    assert p.flush(30) == 0
    c = Consumer(
        {
            "bootstrap.servers": b,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            **QUIET,
        }
    )
    c.subscribe([topic])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < 40 and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.append(msg.offset())
            c.commit(message=msg, asynchronous=False)
    assert len(seen) == 40
    desc = admin.describe_consumer_groups([group])[group].result(20)
    coordinator = desc.coordinator.id
    cluster.kill(coordinator)
    # the consumer goes on through the new coordinator (the partition's new leader)
    deadline = time.monotonic() + 90
    while len(seen) < 70 and time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.append(msg.offset())
            # the coordinator may move under this commit: a later one lands
            with contextlib.suppress(Exception):
                c.commit(message=msg, asynchronous=False)
    assert len(seen) >= 70, f"stuck after the coordinator died: {len(seen)} records"
    final = [TopicPartition(topic, 0, seen[-1] + 1)]
    deadline = time.monotonic() + 30
    while True:  # the last position, committed for sure
        try:
            c.commit(offsets=final, asynchronous=False)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    c.close()
    alive = ",".join(
        f"127.0.0.1:{cluster.nodes[n].port}" for n in cluster.nodes if n != coordinator
    )
    now_coordinating = AdminClient({"bootstrap.servers": alive, **QUIET})
    desc = now_coordinating.describe_consumer_groups([group])[group].result(30)
    assert desc.coordinator.id != coordinator
    assert committed(alive, group, topic) == seen[-1] + 1
    assert sorted(set(seen)) == list(range(seen[-1] + 1))  # no gap across the fail-over
