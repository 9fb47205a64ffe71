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
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.group_coordinators import load_group_coordinators
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_quorum import OVERRIDES as QUORUM_OVERRIDES

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
    # KIP-848 groups: sessions long enough to outlive the fail-over of their coordinator
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.session.timeout.ms": "20000",
}
QUIET = {"log_level": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("groups"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        load_group_coordinators(c.nodes[1].bootstrap, timeout_s=60)
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


def test_a_consumer_protocol_group_keeps_its_members_when_its_coordinator_dies(
    cluster: QuorumCluster,
) -> None:
    """KIP-848 (``group.protocol=consumer``): the new coordinator loads the group's
    members, epochs and assignments from its replica of ``__consumer_offsets``, so the
    members carry on with their partitions (none revoked or lost, nothing read twice)."""
    dead = [
        n for n, node in cluster.nodes.items() if node.proc is None or node.proc.poll() is not None
    ]
    if dead:  # the test above killed a node: bring it back first
        cluster.start_nodes(dead, timeout_s=60)
    b = cluster.bootstrap_servers
    topic, group = "fo-848", "fo-848"
    admin = AdminClient({"bootstrap.servers": b, **QUIET})
    admin.create_topics([NewTopic(topic, 4, 3)])[topic].result(30)
    p = Producer({"bootstrap.servers": b, "acks": "all", **QUIET})

    def produce(first: int) -> None:
        for i in range(first, first + 100):
            p.produce(topic, b"%d" % i, partition=i % 4)
        assert p.flush(90) == 0

    produce(0)
    moved: list[tuple[str, int]] = []
    members = []
    for name in ("a", "b"):
        c = Consumer(
            {
                "bootstrap.servers": b,
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **QUIET,
            }
        )
        c.subscribe(
            [topic],
            on_revoke=lambda _c, ps, n=name: moved.extend((n, tp.partition) for tp in ps),
            on_lost=lambda _c, ps, n=name: moved.extend((n + "-lost", tp.partition) for tp in ps),
        )
        members.append(c)
    seen: list[tuple[int, int]] = []

    def poll_all(commit: bool) -> None:
        for c in members:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                seen.append((msg.partition(), msg.offset()))
                if commit:
                    with contextlib.suppress(Exception):
                        c.commit(message=msg, asynchronous=False)

    def held() -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in members]

    deadline = time.monotonic() + 60
    while (len(seen) < 100 or sorted(map(len, held())) != [2, 2]) and time.monotonic() < deadline:
        poll_all(commit=True)
    assert len(seen) == 100 and sorted(map(len, held())) == [2, 2]
    before = held()
    moved.clear()  # what the first member handed to the second while joining
    coordinator = admin.describe_consumer_groups([group])[group].result(20).coordinator.id
    cluster.kill(coordinator)
    alive = ",".join(
        f"127.0.0.1:{cluster.nodes[n].port}" for n in cluster.nodes if n != coordinator
    )
    survivors = AdminClient({"bootstrap.servers": alive, **QUIET})
    produce(100)  # (waits for the partitions' new leaders)
    deadline = time.monotonic() + 90
    desc = None
    while time.monotonic() < deadline:
        poll_all(commit=False)
        if len(seen) < 200:
            continue
        with contextlib.suppress(Exception):
            desc = survivors.describe_consumer_groups([group])[group].result(5)
        if desc is not None and desc.coordinator.id != coordinator and len(desc.members) == 2:
            break
    assert desc is not None and desc.coordinator.id != coordinator, "no new coordinator"
    settle = time.monotonic() + 3  # heartbeats reach the new coordinator meanwhile
    while time.monotonic() < settle:
        poll_all(commit=False)
    assert not moved, moved  # (before close(), which revokes everything)
    assert held() == before
    described = {
        frozenset(tp.partition for tp in m.assignment.topic_partitions) for m in desc.members
    }
    assert described == {frozenset(h) for h in before}
    for c in members:
        c.close()
    assert len(seen) == len(set(seen)), "records read twice"
    assert sorted(seen) == sorted((p, o) for p in range(4) for o in range(50))
