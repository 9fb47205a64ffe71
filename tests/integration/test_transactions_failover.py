"""The transaction coordinator follows ``__transaction_state`` leadership on 3 real nodes
(issue 19).

``__transaction_state`` is replicated 3 ways (min.isr 2). A confluent-kafka producer
initialises its transactional id; the node that coordinates it is killed with SIGKILL;
the partition's new leader loads the id from its replica (coordinator epoch = the new
leader epoch) and the producer's next transaction runs against it: same producer id and
epoch, and EndTxn answered.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

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
    "broker.session.timeout.ms": "4000",
}
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
