"""The transaction coordinator follows ``__transaction_state`` leadership on 3 real nodes
(issue 19).

``__transaction_state`` is replicated 3 ways (min.isr 2). The node that coordinates a
confluent-kafka producer's transactional id is killed with SIGKILL; the partition's new
leader loads the id from its replica (coordinator epoch = the new leader epoch):

- the producer's next transaction runs against it (same producer id and epoch);
- a commit whose PrepareCommit was written but whose markers were not (the data
  partition's leader is down, not yet fenced, when the coordinator dies) is finished by
  the new coordinator: it finds the PrepareCommit at load, writes the markers and the
  CompleteCommit, and read_committed consumers see the transaction's records.

Broker sessions last 15 s here, so a killed node keeps its leaderships (and a dead
leader its partitions) for that long: the window in which the coordinator is killed.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.coordinator.records import partition_for
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import DescribeTransactionsRequest, FindCoordinatorRequest
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_quorum import OVERRIDES as QUORUM_OVERRIDES
from .test_wire_protocol import Client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

OVERRIDES = {
    **QUORUM_OVERRIDES,
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "200",
    "broker.session.timeout.ms": "15000",
}
#: The load of a shard logs how many Prepare* transactions it found to complete.
LOADED_RE = r"loaded \d+ transactional ids of __transaction_state-{partition} \(coordinator epoch \d+\), (\d+) to complete"
QUIET = {"log_level": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("txn-failover"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def coordinator_of(port: int, tid: str) -> int:
    c = Client(port)
    try:
        resp = c.call(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=tid, key_type=1))
        assert resp.error_code == 0, resp
        return int(resp.node_id)
    finally:
        c.close()


def describe(port: int, tid: str) -> Any:
    c = Client(port)
    try:
        resp = c.call(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=[tid])
        )
        (state,) = resp.transaction_states
        return state
    finally:
        c.close()


def test_the_next_transaction_runs_on_the_new_coordinator(cluster: QuorumCluster) -> None:
    topic, tid = "txn-fo", "tid-failover"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid, **QUIET})
    p.init_transactions(60)
    first = coordinator_of(cluster.ports[1][0], tid)
    before = describe(cluster.ports[first][0], tid)
    assert before.error_code == 0 and before.transaction_state == "Empty", before
    cluster.kill(first)
    p.begin_transaction()
    p.produce(topic, b"after the fail-over")
    p.commit_transaction(90)  # AddPartitionsToTxn and EndTxn on the new coordinator
    alive = next(n for n in cluster.ids if n != first)
    deadline = time.monotonic() + 30
    while (now := coordinator_of(cluster.ports[alive][0], tid)) == first:
        assert time.monotonic() < deadline, "the coordinator did not move"
        time.sleep(0.2)
    after = describe(cluster.ports[now][0], tid)
    assert after.error_code == 0, after
    # the id loaded from the replica: same producer, its committed transaction
    assert (after.producer_id, after.producer_epoch) == (before.producer_id, before.producer_epoch)
    assert after.transaction_state in ("PrepareCommit", "CompleteCommit"), after
    assert [(t.topic, list(t.partitions)) for t in after.topics] in ([(topic, [0])], [])


def restart_dead(cluster: QuorumCluster) -> None:
    dead = [
        n for n, node in cluster.nodes.items() if node.proc is None or node.proc.poll() is not None
    ]
    if dead:
        cluster.start_nodes(dead, timeout_s=90)


def test_a_new_coordinator_completes_a_commit_its_predecessor_prepared(
    cluster: QuorumCluster,
) -> None:
    restart_dead(cluster)  # the test above killed a node
    topic = "txn-prepared"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    leader = admin.list_topics(topic, timeout=20).topics[topic].partitions[0].leader
    # a transactional id coordinated by another node than the data partition's leader
    tid = next(
        t
        for t in (f"tid-prepared-{i}" for i in range(100))
        if coordinator_of(cluster.ports[leader][0], t) != leader
    )
    coordinator = coordinator_of(cluster.ports[leader][0], tid)
    third = next(n for n in cluster.ids if n not in (leader, coordinator))
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid, **QUIET})
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, b"prepared by the first coordinator")
    assert p.flush(30) == 0  # written on every replica, the partition in the transaction
    cluster.kill(leader)  # the markers cannot be written until another leader is elected
    p.commit_transaction(60)  # EndTxn: the PrepareCommit is committed
    assert describe(cluster.ports[coordinator][0], tid).transaction_state == "PrepareCommit"
    cluster.kill(coordinator)
    cluster.start_nodes([leader], timeout_s=90)  # a quorum again (2 of 3 voters)
    port = cluster.ports[third][0]
    deadline = time.monotonic() + 120
    while True:
        now = coordinator_of(port, tid)
        if now != coordinator and describe(cluster.ports[now][0], tid).transaction_state == (
            "CompleteCommit"
        ):
            break
        assert time.monotonic() < deadline, "the new coordinator did not complete the commit"
        time.sleep(0.5)
    # the new coordinator found the PrepareCommit when it loaded the partition
    pattern = LOADED_RE.format(partition=partition_for(tid, 3))
    found = [int(n) for n in re.findall(pattern, cluster.nodes[now].log_path.read_text())]
    assert found and max(found) >= 1, found
    alive = ",".join(f"127.0.0.1:{cluster.ports[n][0]}" for n in (leader, third))
    c = Consumer(
        {"bootstrap.servers": alive, "group.id": "rc-prepared",
         "isolation.level": "read_committed", **QUIET}
    )  # fmt: skip
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        msg = None
        while msg is None or msg.error() is not None:
            assert time.monotonic() < deadline, "read_committed never saw the commit"
            msg = c.poll(0.5)
        assert msg.value() == b"prepared by the first coordinator"
    finally:
        c.close()
