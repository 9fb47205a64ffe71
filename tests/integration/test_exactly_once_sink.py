"""The exactly-once sink's two-phase commit against a real broker, without Spark (issue
22): tasks' prepared transactions stay invisible to read_committed until the driver's
commit, the commit shows them all, a re-run of a decided batch is dropped, a decision
half-completed by a crashed driver is rolled forward by the next writer, an undecided
transaction is aborted, and a broker without ``transaction.two.phase.commit.enable``
is refused with an error that names it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from riverbed.spark.exactly_once import (
    CommitLog,
    SinkCoordinator,
    TxnCommitMessage,
    complete,
    write_task,
)
from riverbed.spark.options import WriteOptions, parse_write_options
from riverbed.spark.txn_client import Cluster, TxnSinkError
from riverbed.testing.cluster import BrokerProcess, scaled_s


@pytest.fixture(scope="module")
def broker_2pc() -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        overrides={"num.partitions": "2", "transaction.two.phase.commit.enable": "true"}
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


def _options(bootstrap: str, topic: str) -> WriteOptions:
    opts = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "exactlyOnce": "true"}
    return parse_write_options(opts).with_default_exactly_once(True)


def _rows(tag: str, n: int = 100) -> Iterator[pa.RecordBatch]:
    values = [f"{tag}-{i}".encode() for i in range(n)]
    yield pa.RecordBatch.from_pydict({"value": values, "key": [b"k%d" % i for i in range(n)]})


def _create(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)


def _end(bootstrap: str, topic: str, read_committed: bool) -> dict[int, int]:
    """Each partition's last stable offset (read_committed) or high watermark."""
    from riverbed.cli.wire import WireClient
    from riverbed.protocol.api_versions import ApiKey
    from riverbed.protocol.messages import ListOffsetsRequest, ListOffsetsResponse

    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1 if read_committed else 0,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1)
                    for p in (0, 1)
                ],
            )
        ],
    )
    with WireClient(bootstrap) as c:
        r = c.request(ApiKey.LIST_OFFSETS, request)
    assert isinstance(r, ListOffsetsResponse)
    return {p.partition_index: p.offset for p in r.topics[0].partitions}


def _committed(bootstrap: str, topic: str) -> list[bytes]:
    """Every value a read_committed consumer reads from ``topic``, once it has read up to
    the high watermark of both partitions (so no transaction is open)."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + scaled_s(30)
    ends = _end(bootstrap, topic, read_committed=False)
    while _end(bootstrap, topic, read_committed=True) != ends:
        assert time.monotonic() < deadline, "a transaction stays open"
        time.sleep(0.1)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        got: list[bytes] = []
        while True:
            positions = c.position([TopicPartition(topic, p) for p in (0, 1)])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return got
            assert time.monotonic() < deadline, f"not read to {ends}: {positions}"
            msg: Any = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        c.close()


def _two_tasks(b: str, topic: str) -> tuple[WriteOptions, TxnCommitMessage, TxnCommitMessage]:
    """A started writer and two tasks' prepared transactions (100 rows "a-i", "b-i")."""
    _create(b, topic)
    opts = _options(b, topic)
    SinkCoordinator(opts).start()
    return opts, write_task(opts, _rows("a"), 0), write_task(opts, _rows("b"), 1)


def test_prepared_rows_are_invisible_until_the_driver_commits(
    broker_2pc: BrokerProcess, topic_name: str
) -> None:
    b = broker_2pc.bootstrap
    opts, m0, m1 = _two_tasks(b, topic_name)
    assert (m0.records, m1.records) == (100, 100)
    # prepared: a read_committed reader stops at the transactions' first offsets
    assert _end(b, topic_name, read_committed=True) == {0: 0, 1: 0}
    assert sum(_end(b, topic_name, read_committed=False).values()) == 200
    coordinator = SinkCoordinator(opts)  # Spark makes the writer again to commit
    coordinator.start()
    coordinator.commit([m0, m1, None], 0)
    got = _committed(b, topic_name)
    assert sorted(got) == sorted([f"a-{i}".encode() for i in range(100)] + [
        f"b-{i}".encode() for i in range(100)])  # fmt: skip
    # Spark re-runs batch 0 after a crash before its commit log: the copy is dropped
    rerun = write_task(opts, _rows("a"), 0)
    coordinator = SinkCoordinator(opts)
    coordinator.start()
    assert coordinator.decided_batch == 0
    coordinator.commit([rerun], 0)
    later = write_task(opts, _rows("c", 10), 0)
    coordinator = SinkCoordinator(opts)
    coordinator.start()
    coordinator.commit([later], 1)
    got = _committed(b, topic_name)
    assert len(got) == 210 and len(set(got)) == 210


def test_a_half_completed_decision_is_rolled_forward_and_strays_aborted(
    broker_2pc: BrokerProcess, topic_name: str
) -> None:
    b = broker_2pc.bootstrap
    opts, m0, m1 = _two_tasks(b, topic_name)
    stray = write_task(opts, _rows("x"), 7)  # a task of a run that died undecided
    # a driver that recorded its decision and completed one transaction, then died
    cluster = Cluster(b)
    CommitLog(opts).record(cluster, opts.prefix(), {"batch": 4, "txns": [m0.txn, m1.txn]})
    assert complete(cluster, m0.txn, True, opts.transaction_timeout_ms)
    cluster.close()
    coordinator = SinkCoordinator(opts)
    coordinator.start()  # rolls batch 4 forward
    assert coordinator.decided_batch == 4
    later = write_task(opts, _rows("c", 10), 0)
    coordinator.commit([later], 5)  # and, committing batch 5, aborts the stray
    got = _committed(b, topic_name)
    assert sorted(set(got)) == sorted(got) and len(got) == 210
    assert not any(v.startswith(b"x-") for v in got)
    assert stray.producer_id >= 0


def test_a_broker_without_two_phase_commit_is_refused_clearly(topic_name: str) -> None:
    proc = BrokerProcess(overrides={"transaction.two.phase.commit.enable": "false"})
    proc.start()
    try:
        opts = _options(proc.bootstrap, topic_name)
        with pytest.raises(TxnSinkError, match=r"transaction\.two\.phase\.commit\.enable=true"):
            SinkCoordinator(opts).start()
    finally:
        proc.close()
