"""A partition leader SIGKILLed while the coordinator writes a commit's markers, on 3 real
nodes (issue 19, "## Tests").

A confluent-kafka transactional producer writes 3 records to each of 3 partitions (replicated
3 ways, leaders spread over the nodes) and flushes them (acks=all: every replica has them).
The leader of a partition that the coordinator does not lead is SIGKILLed and the producer
commits at once: the coordinator writes PrepareCommit, answers, and sends the markers, the
one for the dead leader's partition to a node that is gone (its leadership stays in the
metadata until its broker session, 4 s, expires; the early fence of a dead broker is off
here, or leadership could move before the first marker is sent and the fault would not be
exercised). The marker is retried to the new leader;
the commit completes (CompleteCommit), and read_committed consumers on the survivors read
every record of the transaction on every partition exactly once, to an LSO at the high
watermark.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from riverbed.testing.cluster import scaled_s
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_transactions_failover import coordinator_of, describe
from .test_txn_partitions_failover import (
    OVERRIDES,
    PARTITIONS,
    QUIET,
    TOPIC,
    leaders,
    start_producer,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """3 nodes, broker sessions of 4 s, no early fence."""
    overrides = {**OVERRIDES, "riverbed.broker.early.fence.enable": "false"}
    c = QuorumCluster(tmp_path_factory.mktemp("txn-faults"), 3, overrides=overrides)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


TID, PER_PARTITION = "tid-marker-kill", 3


def read_to_the_lso(bootstrap: str, part: int) -> list[bytes]:
    """Everything a read_committed consumer reads of the partition before its end (the LSO)."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"rc-{part}", "enable.partition.eof": True,
         "isolation.level": "read_committed", "enable.auto.commit": False, **QUIET}
    )  # fmt: skip
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(TOPIC, part, 0)])
        deadline = time.monotonic() + scaled_s(60)
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error() is None:
                got.append(bytes(msg.value()))
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                return got
        raise AssertionError(f"no end of partition {part} after {got}")
    finally:
        c.close()


def wait_committed(cluster: QuorumCluster, alive: int, tid: str) -> Any:
    deadline = time.monotonic() + scaled_s(60)
    while True:
        coordinator = coordinator_of(cluster.ports[alive][0], tid)
        state = describe(cluster.ports[coordinator][0], tid)
        if state.error_code == 0 and state.transaction_state == "CompleteCommit":
            return state
        assert time.monotonic() < deadline, f"the commit did not complete: {state}"
        time.sleep(0.2)


def test_a_commit_completes_across_a_partition_leader_kill_during_its_markers(
    cluster: QuorumCluster,
) -> None:
    admin, p, coordinator = start_producer(cluster, TID)
    by_partition = leaders(admin)
    victim = next(leader for leader in by_partition.values() if leader != coordinator)
    expected = {
        part: [b"p%d-%d" % (part, i) for i in range(PER_PARTITION)] for part in range(PARTITIONS)
    }
    p.begin_transaction()
    for part, values in expected.items():
        for v in values:
            p.produce(TOPIC, v, partition=part)
    assert p.flush(60) == 0
    cluster.kill(victim)
    p.commit_transaction(scaled_s(90))  # answered after PrepareCommit; markers follow
    alive = next(n for n in cluster.ids if n not in (victim,))
    wait_committed(cluster, alive, TID)
    # the kill fell into the markers' writing: one to the dead leader was lost and retried
    lost = f"WriteTxnMarkers to broker {victim} lost"
    assert lost in cluster.nodes[coordinator].log_text(), "no marker went to the dead leader"

    survivors = ",".join(f"127.0.0.1:{cluster.ports[n][0]}" for n in cluster.ids if n != victim)
    now = leaders(AdminClient({"bootstrap.servers": survivors, **QUIET}))
    moved = [part for part, leader in by_partition.items() if leader == victim]
    assert moved and all(now[part] not in (victim, -1) for part in moved), now
    for part, values in expected.items():
        assert read_to_the_lso(survivors, part) == values, part
