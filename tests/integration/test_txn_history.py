"""Histories of real transactional clients on 3 real nodes, checked by
`riverbed.testing.txn_history` (issue 19).

Three confluent-kafka transactional producers commit and abort random transactions over
3 partitions (replicated 3 ways, min.isr 2), each polling read_committed inside its
transactions (consume-transform-produce: write-read edges for the G1c search), while two
read_committed consumers poll from offset 0; the leader of partition 0 is SIGKILLed mid-run. The checker finds no
anomaly, and every value of a committed transaction is read by both consumers. A
read_uncommitted consumer of the same run stands for a broken LSO rule: its history is
flagged with aborted reads, which shows the checker catches the bug on real data.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.testing.quorum_cluster import QuorumCluster
from riverbed.testing.txn_history import Outcome, Txn, check
from riverbed.testing.txn_history_clients import QUIET, Reader, TxnWriter

from .test_quorum import OVERRIDES as QUORUM_OVERRIDES

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
}
TOPIC, PARTITIONS = "hist", 3
WRITERS, SEED = 3, 19
#: Seconds the writers run; the kill comes after KILL_AFTER_S of them.
RUN_S, KILL_AFTER_S = 16.0, 5.0
#: Seconds the readers get, after the writers stop, to read every committed value.
DRAIN_S = 60.0
VALUES_PER_WRITER = 1_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuorumCluster]:
    c = QuorumCluster(tmp_path_factory.mktemp("txn-history"), 3, overrides=OVERRIDES)
    try:
        c.start(timeout_s=60)
        yield c
    finally:
        c.stop()


def run_workload(cluster: QuorumCluster) -> tuple[list[TxnWriter], list[Reader]]:
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    writers = [
        TxnWriter(bootstrap, TOPIC, PARTITIONS, f"w{i}", seed=SEED + i, reads=True)
        for i in range(WRITERS)
    ]
    readers = [
        Reader(bootstrap, TOPIC, PARTITIONS, "rc1"),
        Reader(bootstrap, TOPIC, PARTITIONS, "rc2"),
        Reader(bootstrap, TOPIC, PARTITIONS, "ru", isolation="read_uncommitted"),
    ]
    stop, done = threading.Event(), threading.Event()
    deadline = time.monotonic() + RUN_S + DRAIN_S
    threads = [
        threading.Thread(target=w.run, args=(stop, i * VALUES_PER_WRITER))
        for i, w in enumerate(writers)
    ] + [threading.Thread(target=r.run, args=(done, deadline)) for r in readers]
    for t in threads:
        t.start()
    # the leader of partition 0 dies in the middle of the run (a fault, not a wait for
    # an outcome): its appends, markers and fetches move to a new leader
    leader = admin.list_topics(TOPIC, timeout=20).topics[TOPIC].partitions[0].leader
    time.sleep(KILL_AFTER_S)
    cluster.kill(leader)
    time.sleep(RUN_S - KILL_AFTER_S)
    stop.set()
    for t in threads[:WRITERS]:
        t.join()
    committed = {s.value for w in writers for t in w.history if t.outcome is Outcome.OK
                 for s in t.sends}  # fmt: skip
    for r in readers:
        r.want = committed
    done.set()
    for t in threads[WRITERS:]:
        t.join()
    return writers, readers


def test_histories_of_real_clients_under_a_broker_kill(cluster: QuorumCluster) -> None:
    writers, readers = run_workload(cluster)
    written: list[Txn] = [t for w in writers for t in w.history]
    outcomes = {o: sum(t.outcome is o for t in written) for o in Outcome}
    # the run did both, many times
    assert outcomes[Outcome.OK] >= 10 and outcomes[Outcome.FAIL] >= 5, outcomes
    # the writers read inside their transactions: write-read edges between them
    assert sum(bool(t.polls) for t in written if t.outcome is Outcome.OK) >= 5
    rc1, rc2, ru = readers
    committed = {s.value for t in written if t.outcome is Outcome.OK for s in t.sends}
    for r in (rc1, rc2):
        assert committed <= r.seen, f"{r.process} missed {sorted(committed - r.seen)[:10]}"
    report = check([*written, *rc1.history, *rc2.history])
    assert report.clean, f"{outcomes}\n{report}\n" + "\n".join(e for w in writers for e in w.errors)
    # a broken LSO rule: reading past open and aborted transactions is caught
    aborted = {s.value for t in written if t.outcome is Outcome.FAIL for s in t.sends}
    assert ru.seen & aborted, "the read_uncommitted consumer read no aborted value"
    broken = check([*written, *ru.history])
    assert "aborted_read" in broken.kinds(), str(broken)
