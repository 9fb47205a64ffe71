"""The partition side of transactions on 3 real nodes (issue 19).

A confluent-kafka transactional producer writes transactions over three partitions led by
different nodes (so most partitions verify with a coordinator on another node: KIP-890's
AddPartitionsToTxn v4 between brokers), committing and aborting in turn; the leader of a
partition not led by the coordinator is SIGKILLed between transactions. Its follower,
now leader, built its producer state and aborted-transaction index from the replicated
batches and markers: read_committed consumers see exactly the committed records, in
order, on every partition; read_uncommitted sees the aborted ones too; the new leader's
Fetch answers the same aborted transactions and an LSO at the high watermark.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.messages import FetchRequest
from riverbed.testing.quorum_cluster import QuorumCluster

from .test_transactions_failover import OVERRIDES as TXN_OVERRIDES
from .test_transactions_failover import coordinator_of
from .test_wire_protocol import Client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OVERRIDES = {**TXN_OVERRIDES, "broker.session.timeout.ms": "4000"}
QUIET = {"log_level": 3}
TOPIC, PARTITIONS, TID = "txn-part-fo", 3, "tid-part-fo"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = QuorumCluster(tmp_path_factory.mktemp("txn-part-fo"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def leaders(admin: AdminClient) -> dict[int, int]:
    parts = admin.list_topics(TOPIC, timeout=20).topics[TOPIC].partitions
    return {p: md.leader for p, md in parts.items()}


def start_producer(cluster: QuorumCluster, tid: str) -> tuple[AdminClient, Producer, int]:
    """The topic, a transactional producer of ``tid`` ready for transactions, and the node
    that coordinates ``tid``."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **QUIET})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid,
                  **QUIET})  # fmt: skip
    p.init_transactions(60)
    return admin, p, coordinator_of(cluster.ports[1][0], tid)


def run_transaction(p: Producer, i: int, commit: bool) -> bool:
    """One transaction over every partition; True when it committed."""
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce(TOPIC, b"t%d-p%d" % (i, part), partition=part)
    try:
        p.flush(60)  # written before the end (an abort purges what is still queued)
        if commit:
            p.commit_transaction(90)
            return True
        p.abort_transaction(90)
    except KafkaException as exc:
        if not exc.args[0].txn_requires_abort():
            raise
        p.abort_transaction(90)  # the fail-over made it abortable: it is aborted
    return False


def read(bootstrap: str, level: str, part: int, n: int) -> list[bytes]:
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"rd-{level}-{part}",
         "isolation.level": level, "enable.auto.commit": False, **QUIET}
    )  # fmt: skip
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(TOPIC, part, 0)])
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(bytes(msg.value()))
        return got
    finally:
        c.close()


def test_read_committed_across_a_partition_leader_kill(cluster: QuorumCluster) -> None:
    admin, p, coordinator = start_producer(cluster, TID)
    by_partition = leaders(admin)
    assert any(leader != coordinator for leader in by_partition.values())  # remote verification
    victim_part = next(part for part, leader in by_partition.items() if leader != coordinator)
    victim = by_partition[victim_part]

    survivors = ",".join(f"127.0.0.1:{cluster.ports[n][0]}" for n in cluster.ids if n != victim)
    committed: list[int] = []
    for i in range(6):
        if i == 3:
            cluster.kill(victim)
            # Asked of the survivors: librdkafka retries a Metadata request on the node it
            # was sent to, so one that went to the victim as it died waited out its whole
            # timeout (2 runs in 26 here: "Failed to get metadata: Local: Timed out").
            after_kill = AdminClient({"bootstrap.servers": survivors, **QUIET})
            deadline = time.monotonic() + 60
            while leaders(after_kill)[victim_part] in (victim, -1):
                assert time.monotonic() < deadline, "no new leader"
                time.sleep(0.2)
        if run_transaction(p, i, commit=i % 2 == 0):
            committed.append(i)
    assert committed, "no transaction committed"
    in_log: dict[int, int] = {}
    for part in range(PARTITIONS):
        expected = [b"t%d-p%d" % (i, part) for i in committed]
        assert read(survivors, "read_committed", part, len(expected)) == expected, part
        everything = read(survivors, "read_uncommitted", part, 6)
        assert [v for v in everything if v in expected] == expected
        in_log[part] = len(everything)
    aborted_in_log = in_log[victim_part] - len(committed)
    assert aborted_in_log > 0, "the aborted transactions' records are in the log"

    new_leader = leaders(AdminClient({"bootstrap.servers": survivors}))[victim_part]
    c = Client(cluster.ports[new_leader][0])
    try:
        req = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=1,
            session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[FetchRequest.FetchPartition(
                partition=victim_part, fetch_offset=0, partition_max_bytes=1 << 22,
                current_leader_epoch=-1)])],
        )  # fmt: skip
        part_data = c.call(ApiKey.FETCH, 12, req).responses[0].partitions[0]
        assert part_data.error_code == 0
        assert part_data.last_stable_offset == part_data.high_watermark
        # every aborted transaction of the partition, built by the follower that leads now
        aborted = {a.first_offset for a in part_data.aborted_transactions}
        assert len(aborted) == aborted_in_log, part_data.aborted_transactions
    finally:
        c.close()
