"""Transactional offset commits in a real broker process (issue 19, KIP-98 / KIP-447).

With riverbed's own codec: a TxnOffsetCommit's offsets are pending (OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT, without it the last committed offset),
stay pending across a SIGKILL and restart (the coordinator's load replays the
transactional records and the markers from the log), become the committed offsets with
the producer's COMMIT marker (WriteTxnMarkers) and are dropped by an ABORT marker.

With confluent-kafka: ``send_offsets_to_transaction`` in a transaction; the offsets are
unstable until ``commit_transaction`` (the transaction coordinator writes the markers),
then a read_committed consumer's ``committed()`` sees them; an aborted transaction's
offsets never become committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from riverbed.coordinator.records import OFFSETS_TOPIC, partition_for
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    FindCoordinatorRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from riverbed.testing.cluster import BrokerProcess

from .test_wire_protocol import Client, create_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

E = ErrorCode
OFFSETS_PARTITIONS = 3
#: Errors a coordinator answers while it loads or the topic is created: asked again.
NOT_READY = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}
QUIET = {"log_level": 3}


def _broker(**overrides: str) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        overrides={"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)} | overrides
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


@pytest.fixture(scope="module")
def node() -> Iterator[BrokerProcess]:
    # the codec's producer ids have no transaction coordinator behind them: no KIP-890
    # verification here (the node below verifies)
    yield from _broker(**{"transaction.partition.verification.enable": "false"})


@pytest.fixture(scope="module")
def verifying_node() -> Iterator[BrokerProcess]:
    yield from _broker()


def until(what: str, attempt: Callable[[], Any | None], timeout_s: float = 30) -> Any:
    """``attempt()`` until it gives something (None: not yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = attempt()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def txn_commit(c: Client, group: str, pid: int, offsets: dict[int, int], topic: str) -> int:
    """TxnOffsetCommit v3 (KIP-447's fields, a simple group): its one error code."""
    R = TxnOffsetCommitRequest
    req = R(
        transactional_id=f"tx-{pid}",
        group_id=group,
        producer_id=pid,
        producer_epoch=0,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            R.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    R.TxnOffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_metadata=f"p{pid}"
                    )
                    for p, o in sorted(offsets.items())
                ],
            )
        ],
    )

    def attempt() -> int | None:
        resp = c.call(ApiKey.TXN_OFFSET_COMMIT, 3, req)
        codes = {p.error_code for t in resp.topics for p in t.partitions}
        assert len(codes) == 1, resp
        (code,) = codes
        return None if E(code) in NOT_READY else code

    return int(until("TxnOffsetCommit", attempt))


def fetch(
    c: Client, group: str, topic: str, stable: bool, version: int = 8
) -> dict[int, tuple[int, E]]:
    """OffsetFetch of partitions 0-1: partition -> (offset, error)."""
    if version >= 8:
        req = OffsetFetchRequest(
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestTopics(
                            name=topic, partition_indexes=[0, 1]
                        )
                    ],
                )
            ],
            require_stable=stable,
        )
    else:
        req = OffsetFetchRequest(
            group_id=group,
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])
            ],
            require_stable=stable,
        )

    def attempt() -> dict[int, tuple[int, E]] | None:
        resp = c.call(ApiKey.OFFSET_FETCH, version, req)
        top = resp.groups[0] if version >= 8 else resp
        if E(top.error_code) in NOT_READY:
            return None
        assert top.error_code == 0, resp
        return {
            p.partition_index: (p.committed_offset, E(p.error_code))
            for t in top.topics
            for p in t.partitions
        }

    return dict(until("OffsetFetch", attempt))


def marker(c: Client, group: str, pid: int, commit: bool) -> None:
    """The transaction coordinator's marker for ``pid`` on the group's offsets partition."""
    M = WriteTxnMarkersRequest
    req = M(
        markers=[
            M.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=0,
                transaction_result=commit,
                coordinator_epoch=0,
                topics=[
                    M.WritableTxnMarkerTopic(
                        name=OFFSETS_TOPIC,
                        partition_indexes=[partition_for(group, OFFSETS_PARTITIONS)],
                    )
                ],
            )
        ]
    )
    resp = c.call(ApiKey.WRITE_TXN_MARKERS, 1, req)
    assert resp.markers[0].topics[0].partitions[0].error_code == 0, resp


def find_coordinator(c: Client, key: str, key_type: int = 0) -> None:
    """FindCoordinator (a group's, or with ``key_type`` 1 a transactional id's) until
    found: it creates the internal topic."""

    def attempt() -> bool | None:
        req = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
        resp = c.call(ApiKey.FIND_COORDINATOR, 4, req)
        return True if resp.coordinators[0].error_code == 0 else None

    until("the group coordinator", attempt)


def test_pending_until_the_marker_and_across_a_restart(node: BrokerProcess) -> None:
    topic, group, pid = "txn-offsets-in", "txn-offsets-g", 81_000
    c = Client(node.port)
    try:
        create_topic(c, topic, partitions=2)
        find_coordinator(c, group)
        assert txn_commit(c, group, pid, {0: 42, 1: 43}, topic) == 0
        unstable = (-1, E.UNSTABLE_OFFSET_COMMIT)
        assert fetch(c, group, topic, stable=True) == {0: unstable, 1: unstable}
        assert fetch(c, group, topic, stable=True, version=7) == {0: unstable, 1: unstable}
        # without require_stable: the last committed offsets (none yet)
        assert fetch(c, group, topic, stable=False) == {0: (-1, E.NONE), 1: (-1, E.NONE)}
    finally:
        c.close()
    node.restart(kill=True)  # the load replays the transactional records: still pending
    c = Client(node.port)
    try:
        assert fetch(c, group, topic, stable=True) == {0: unstable, 1: unstable}
        marker(c, group, pid, commit=True)
        assert fetch(c, group, topic, stable=True) == {0: (42, E.NONE), 1: (43, E.NONE)}
        # another producer's transaction, aborted: its offsets never become committed
        assert txn_commit(c, group, pid + 1, {0: 99}, topic) == 0
        assert fetch(c, group, topic, stable=True)[0] == unstable
        marker(c, group, pid + 1, commit=False)
        assert fetch(c, group, topic, stable=True) == {0: (42, E.NONE), 1: (43, E.NONE)}
    finally:
        c.close()
    node.restart(kill=True)  # and the log says the same after another load
    c = Client(node.port)
    try:
        assert fetch(c, group, topic, stable=True) == {0: (42, E.NONE), 1: (43, E.NONE)}
    finally:
        c.close()


def test_a_commit_outside_any_transaction_is_refused_by_verification(
    verifying_node: BrokerProcess,
) -> None:
    """KIP-890 part 1: the transaction coordinator knows no transaction of this producer
    including the group's partition, so nothing is written and nothing is pending (with
    verification off the same commit is pending: the test above)."""
    topic, group = "txn-offsets-zombie", "txn-offsets-zg"
    c = Client(verifying_node.port)
    try:
        create_topic(c, topic, partitions=2)
        find_coordinator(c, group)
        find_coordinator(c, "tx-82000", key_type=1)  # the producer's coordinator exists
        code = txn_commit(c, group, 82_000, {0: 5}, topic)
        assert code not in (0, *NOT_READY), E(code)
        assert fetch(c, group, topic, stable=True) == {0: (-1, E.NONE), 1: (-1, E.NONE)}
    finally:
        c.close()


def test_confluent_send_offsets_to_transaction(verifying_node: BrokerProcess) -> None:
    node = verifying_node
    source, sink, group = "txn-offsets-src", "txn-offsets-out", "txn-offsets-cg"
    c = Client(node.port)
    create_topic(c, source, partitions=2)
    create_topic(c, sink)
    bootstrap = f"127.0.0.1:{node.port}"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
        | QUIET
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "txn-offsets-copier"} | QUIET
    )
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(sink, b"copied")
        meta = consumer.consumer_group_metadata()
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 7)], meta, 30)
        assert fetch(c, group, source, stable=True)[0] == (-1, E.UNSTABLE_OFFSET_COMMIT)
        producer.commit_transaction(30)
        # the markers are written after EndTxn is answered
        until(
            "the committed offset",
            lambda: True if fetch(c, group, source, stable=True)[0] == (7, E.NONE) else None,
        )
        (tp,) = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert tp.offset == 7
        producer.begin_transaction()
        producer.produce(sink, b"dropped")
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 9)], meta, 30)
        assert fetch(c, group, source, stable=True)[0] == (-1, E.UNSTABLE_OFFSET_COMMIT)
        producer.abort_transaction(30)
        stable = until(
            "the abort marker",
            lambda: ((got := fetch(c, group, source, stable=True)[0])[1] == E.NONE and got) or None,
        )
        assert stable == (7, E.NONE)
        (tp,) = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert tp.offset == 7
    finally:
        consumer.close()
        c.close()


def test_kafka_python_kip_447_fencing(verifying_node: BrokerProcess) -> None:
    """kafka-python sends the consumer's group metadata (KIP-447: generation and member
    id, TxnOffsetCommit v3+): the current member's offsets commit with the transaction; a
    stale generation is fenced and its transaction's offsets never become committed."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import CommitFailedError
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    source, sink, group = "txn-kp-src", "txn-kp-out", "txn-kp-g"
    c = Client(verifying_node.port)
    create_topic(c, source, partitions=2)
    create_topic(c, sink)
    bootstrap = verifying_node.bootstrap
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-kp-copier")
    try:
        consumer.subscribe([source])
        until(
            "an assignment",
            lambda: consumer.poll(timeout_ms=200) is not None and (consumer.assignment() or None),
        )
        meta = consumer.group_metadata()
        assert meta.generation_id >= 1 and meta.member_id
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(sink, b"copied").get(timeout=30)
        producer.send_offsets_to_transaction({KTP(source, 0): OffsetAndMetadata(11, "", -1)}, meta)
        assert fetch(c, group, source, stable=True)[0] == (-1, E.UNSTABLE_OFFSET_COMMIT)
        producer.commit_transaction()
        until(
            "the committed offset",
            lambda: True if fetch(c, group, source, stable=True)[0] == (11, E.NONE) else None,
        )
        stale = meta._replace(generation_id=meta.generation_id + 7)
        producer.begin_transaction()
        producer.send(sink, b"zombie").get(timeout=30)
        # ILLEGAL_GENERATION: kafka-python's abortable CommitFailedError
        with pytest.raises(CommitFailedError):
            producer.send_offsets_to_transaction(
                {KTP(source, 0): OffsetAndMetadata(13, "", -1)}, stale
            )
        producer.abort_transaction()
        assert fetch(c, group, source, stable=True)[0] == (11, E.NONE)
    finally:
        producer.close(timeout=5)
        consumer.close()
        c.close()


def test_aiokafka_v0_send_offsets(verifying_node: BrokerProcess) -> None:
    """aiokafka speaks v0 of every transactional API (TxnOffsetCommit without KIP-447's
    fields): the offsets commit with the transaction."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import OffsetAndMetadata
    from aiokafka.structs import TopicPartition as ATP

    source, sink, group = "txn-aio-src", "txn-aio-out", "txn-aio-g"
    c = Client(verifying_node.port)
    create_topic(c, source, partitions=2)
    create_topic(c, sink)

    async def run() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=verifying_node.bootstrap, transactional_id="txn-aio-copier"
        )
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(sink, b"copied")
                await p.send_offsets_to_transaction(
                    {ATP(source, 1): OffsetAndMetadata(21, "")}, group
                )
                assert fetch(c, group, source, stable=True)[1] == (-1, E.UNSTABLE_OFFSET_COMMIT)
            with pytest.raises(RuntimeError):
                async with p.transaction():  # an exception aborts the transaction
                    await p.send_and_wait(sink, b"dropped")
                    await p.send_offsets_to_transaction(
                        {ATP(source, 1): OffsetAndMetadata(23, "")}, group
                    )
                    raise RuntimeError("abort it")
        finally:
            await asyncio.wait_for(p.stop(), 30)

    try:
        asyncio.run(asyncio.wait_for(run(), 90))
        stable = until(
            "the abort marker",
            lambda: ((got := fetch(c, group, source, stable=True)[1])[1] == E.NONE and got) or None,
        )
        assert stable == (21, E.NONE)
    finally:
        c.close()
