"""Replication with broker-only nodes beside the 3 combined nodes (issue 12).

Nodes 1-3 run the controller quorum and a broker; nodes 4 and 5 are broker-only (Raft
observers), so killing them never costs the metadata quorum its majority:

- reassignment of a loaded partition from {1, 2, 3} to {2, 3, 4} under continuous
  idempotent acks=all production: the move completes (nothing listed as moving, replicas
  [2, 3, 4], all in sync), node 1 deletes its log, and every acknowledged record is
  readable afterwards at the offset it was acknowledged with, in production order, once
  (4 MiB before the move, then a producer that runs through it);
- ``min.insync.replicas=2`` on a replication factor 3 topic on {4, 5, 1}: with 4 and 5
  SIGKILLed the ISR is [1], an acks=all produce is refused with NOT_ENOUGH_REPLICAS (acks=1
  is taken) and an idempotent acks=all producer gets no acknowledgement; once both are
  back in the ISR its retries land and acks=all produce succeeds, nothing acknowledged is
  lost, and nothing is written twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.quorum_cluster import QuorumCluster

from .test_replication import OVERRIDES, Production, partition_state, read_all, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: Broker-only nodes added to the 3 combined ones.
BROKER_ONLY = (4, 5)
#: The partition's load before its reassignment starts (4 MiB).
PRELOAD_RECORDS = 16_384
PRELOAD_RECORD_BYTES = 256
#: Produce requests the idempotent producer must send while the ISR is below minimum
#: (more than the 5 it keeps in flight, so some of them were answered) with no
#: acknowledgement coming back; its retries back off to one a second.
OUTAGE_PRODUCE_REQUESTS = 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    c = QuorumCluster(tmp_path_factory.mktemp("replication-4"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        c.add_brokers(list(BROKER_ONLY), timeout_s=60)
        yield c
    finally:
        # broker-only nodes first: a controlled shutdown needs the controller quorum
        for node in reversed(BROKER_ONLY):
            if node in c.nodes:
                c.nodes[node].stop()
        c.stop()


def create_assigned(cluster: QuorumCluster, topic: str, replicas: list[int]) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, 1, replica_assignment=[replicas], config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(30)
    wait_for(
        f"{topic}: leader {replicas[0]}, ISR = {replicas}",
        lambda: partition_state(admin, topic) == (replicas[0], replicas, sorted(replicas)),
        30,
    )
    return admin


def check_acknowledged(cluster: QuorumCluster, topic: str, acked: dict[bytes, int]) -> None:
    """Every acknowledged record at its offset, each offset acknowledged once, and the log
    in production order without a record written twice."""
    assert acked, "nothing acknowledged"
    assert len(set(acked.values())) == len(acked), "an offset acknowledged for two records"
    got = read_all(cluster, topic, max(acked.values()) + 1)
    missing = [(v, o) for v, o in acked.items() if got.get(o) != v]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost: {missing[:5]}"
    values = [got[o] for o in sorted(got)]
    assert len(values) == len(set(values)), "a record written twice"
    sequence = [int(v[1:]) for v in values if v.startswith(b"m")]
    assert sequence == sorted(sequence), "records out of production order"


def preload(cluster: QuorumCluster, topic: str, count: int, size: int) -> dict[bytes, int]:
    """``count`` records of ``size`` bytes, idempotent acks=all: value -> offset."""
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
        }
    )
    acked: dict[bytes, int] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            errors.append(err)

    for i in range(count):
        value = f"p{i:07d}".encode().ljust(size, b".")
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors and len(acked) == count, errors[:5]
    return acked


def test_reassignment_of_a_loaded_partition_to_a_broker_only_node(cluster: QuorumCluster) -> None:
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient

    topic = "moved-to-four"
    admin = create_assigned(cluster, topic, [1, 2, 3])
    # the new replica has several MiB to copy (several replica fetches of
    # replica.fetch.max.bytes) while production goes on
    loaded = preload(cluster, topic, PRELOAD_RECORDS, PRELOAD_RECORD_BYTES)
    mover = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20000)
    tp = KafkaTopicPartition(topic, 0)
    try:
        with Production(cluster, topic) as prod:
            wait_for("acks before the move", lambda: len(prod.acked) >= 1000, 60)
            assert mover.alter_partition_reassignments({tp: [2, 3, 4]}) == {tp: None}
            at_move = len(prod.acked)

            def moved() -> bool:
                leader, replicas, isr = partition_state(admin, topic)
                return replicas == [2, 3, 4] and set(isr) >= {2, 3, 4} and leader in (2, 3, 4)

            wait_for("the move to [2, 3, 4] completed", moved, 60)
            assert mover.list_partition_reassignments() == {}
            wait_for("acks during and after the move", lambda: len(prod.acked) >= at_move + 2000)
    finally:
        mover.close()
    assert not prod.errors, prod.errors[:5]
    leader, replicas, isr = partition_state(admin, topic)
    assert replicas == [2, 3, 4] and isr == [2, 3, 4], (leader, replicas, isr)
    check_acknowledged(cluster, topic, loaded | prod.acked)
    assert max(loaded.values()) < min(prod.acked.values())
    wait_for("node 1's log deleted", lambda: not (cluster.data_dir(1) / f"{topic}-0").exists())

    def size(i: int) -> int:
        return sum(f.stat().st_size for f in (cluster.data_dir(i) / f"{topic}-0").glob("*.log"))

    # the added replica holds the same batches as the others
    wait_for("node 4 caught up with nodes 2 and 3", lambda: size(4) == size(2) == size(3))
    assert size(4) > PRELOAD_RECORDS * PRELOAD_RECORD_BYTES


def produce_one(cluster: QuorumCluster, topic: str, value: bytes, acks: str = "all") -> Any:
    """One record with no retry: (delivery error or None, offset)."""
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": acks,
            "retries": 0,
            "message.timeout.ms": 10000,
        }
    )
    outcome: list[Any] = []
    producer.produce(topic, value, on_delivery=lambda e, m: outcome.append((e, m.offset())))
    assert producer.flush(30) == 0
    (result,) = outcome
    return result


def test_min_insync_replicas_with_two_replica_brokers_killed(cluster: QuorumCluster) -> None:
    """An idempotent acks=all producer runs through the outage: it gets no acknowledgement
    while the ISR is below min.insync.replicas, its retries land once the ISR is whole
    again, and no record it sent is written twice (the kill can leave batches appended
    but not acknowledged; their retries must not append them again)."""
    topic = "minisr-broker-only"
    admin = create_assigned(cluster, topic, [4, 5, 1])
    with Production(cluster, topic) as prod:
        wait_for("acks before the kill", lambda: len(prod.acked) >= 1000, 60)
        for node in BROKER_ONLY:
            cluster.kill(node)  # SIGKILL
        acked_at_kill = dict(prod.acked)
        try:
            # both fenced (session timeout): node 1 leads alone, the quorum of 1-3 intact
            wait_for(
                "leader 1 with ISR [1]",
                lambda: partition_state(admin, topic)[::2] == (1, [1]),
                30,
            )
            error, _ = produce_one(cluster, topic, b"refused")
            assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error
            refused_at = len(prod.acked)
            # min.insync.replicas binds acks=all only
            error, acks_one_offset = produce_one(cluster, topic, b"acks=1", acks="1")
            assert error is None, error
            # its retries reach the leader and come back refused: once it has sent that
            # many more Produce requests, none may have been acknowledged
            sent_at = prod.produce_requests
            wait_for(
                f"{OUTAGE_PRODUCE_REQUESTS} produce requests during the outage",
                lambda: prod.produce_requests >= sent_at + OUTAGE_PRODUCE_REQUESTS,
                30,
            )
            assert len(prod.acked) == refused_at, "acks=all acknowledged below min.insync"
        finally:
            for node in BROKER_ONLY:
                cluster.nodes[node].start(60)
        wait_for("acks after the restart", lambda: len(prod.acked) >= refused_at + 1000, 60)
    assert not prod.errors, prod.errors[:5]
    assert all(prod.acked.get(v) == o for v, o in acked_at_kill.items())
    # back in the ISR, and (auto.leader.rebalance.enable) 4 leads again as preferred: a
    # produce without retries then meets no leader change
    wait_for(
        "4 and 5 back in the ISR, 4 leading",
        lambda: partition_state(admin, topic) == (4, [4, 5, 1], [1, 4, 5]),
        60,
    )
    error, after_offset = produce_one(cluster, topic, b"after")
    assert error is None, error
    check_acknowledged(cluster, topic, prod.acked | {b"acks=1": acks_one_offset})
    got = read_all(cluster, topic, after_offset + 1)
    assert b"refused" not in got.values()
    assert got.get(after_offset) == b"after"
