"""Transactions on the partition side in a real broker process (issue 19): transactional
Produce batches and WriteTxnMarkers sent with riverbed's own codec, then real consumers.

One partition holds, in order: a plain record, producer P1's committed transaction,
producer P2's aborted one, another plain record, and producer P3's open transaction with
a plain record after it. read_committed sees the committed data up to the last stable
offset (P3's first offset) and never P2's records; read_uncommitted sees everything; the
Fetch answer carries the LSO and P2's aborted transaction; ListOffsets READ_COMMITTED
LATEST is the LSO. A marker from an older coordinator epoch is
TRANSACTION_COORDINATOR_FENCED, a plain batch of a producer inside its transaction
INVALID_TXN_STATE. Once P3 commits, read_committed consumers (confluent-kafka and
kafka-python) see exactly the committed records in log order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    WriteTxnMarkersRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from riverbed.testing.cluster import BrokerProcess

from .test_wire_protocol import Client, create_topic, fetch_req, produce, produce_req

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

P1, P2, P3, P4 = 9001, 9002, 9003, 9004
COORDINATOR_EPOCH = 5
#: the transactional id of the batches written without a coordinator (Kafka requires one)
DIRECT = "direct"


@pytest.fixture(scope="module")
def node() -> Iterator[BrokerProcess]:
    # the batches are written without a coordinator: no KIP-890 verification here
    proc = BrokerProcess(overrides={"transaction.partition.verification.enable": "false"})
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


@pytest.fixture
def client(node: BrokerProcess) -> Iterator[Client]:
    c = Client(node.port)
    yield c
    c.close()


def txn_batch(pid: int, seq: int, *values: bytes, txn: bool = True) -> bytes:
    now = int(time.time() * 1000)
    return build_batch(
        [SimpleRecord(v, timestamp=now) for v in values],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=txn,
        now_ms=now,
    )


def markers(
    c: Client, topic: str, pid: int, commit: bool, coordinator_epoch: int = COORDINATOR_EPOCH
) -> int:
    W = WriteTxnMarkersRequest
    req = W(
        markers=[
            W.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=0,
                transaction_result=commit,
                topics=[W.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
                coordinator_epoch=coordinator_epoch,
            )
        ]
    )
    resp = c.call(ApiKey.WRITE_TXN_MARKERS, 1, req)
    (marker,) = resp.markers
    assert marker.producer_id == pid
    return int(marker.topics[0].partitions[0].error_code)


def values_of(records: bytes | None) -> list[bytes | None]:
    """The values of the data records (control batches left out, as consumers do)."""
    data = records or b""
    out: list[bytes | None] = []
    for pos, h in iter_batches(data):
        if not h.is_control:
            out += [r.value for r in iter_records(data[pos : pos + h.size])]
    return out


def fetch(c: Client, topic: str, level: int) -> Any:
    req = fetch_req(topic, [(0, 0, 1 << 20)])
    req.isolation_level = level
    return c.call(ApiKey.FETCH, 12, req).responses[0].partitions[0]


def latest(c: Client, topic: str, level: int) -> int:
    L = ListOffsetsRequest
    req = L(
        replica_id=-1,
        isolation_level=level,
        topics=[
            L.ListOffsetsTopic(
                name=topic, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)]
            )
        ],
    )
    part = c.call(ApiKey.LIST_OFFSETS, 7, req).topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


def write_history(c: Client, topic: str) -> int:
    """The partition described in the module docstring; returns P3's first offset."""
    create_topic(c, topic)
    assert produce(c, topic, txn_batch(-1, -1, b"a", txn=False)).error_code == 0  # 0
    no_id = produce(c, topic, txn_batch(P1, 0, b"c1", b"c2"))
    assert no_id.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert txn_produce(c, topic, DIRECT, txn_batch(P1, 0, b"c1", b"c2")).error_code == 0  # 1-2
    assert txn_produce(c, topic, DIRECT, txn_batch(P2, 0, b"x1", b"x2")).error_code == 0  # 3-4
    assert markers(c, topic, P1, True) == 0  # 5
    assert markers(c, topic, P2, False) == 0  # 6
    assert produce(c, topic, txn_batch(-1, -1, b"b", txn=False)).error_code == 0  # 7
    p3 = txn_produce(c, topic, DIRECT, txn_batch(P3, 0, b"o1"))  # 8
    assert p3.error_code == 0
    assert produce(c, topic, txn_batch(-1, -1, b"d", txn=False)).error_code == 0  # 9
    return int(p3.base_offset)


COMMITTED_BEFORE_P3 = [b"a", b"c1", b"c2", b"b"]
EVERYTHING = [b"a", b"c1", b"c2", b"x1", b"x2", b"b", b"o1", b"d"]


def confluent_values(node: BrokerProcess, topic: str, level: str, n: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": node.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": level,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(bytes(msg.value()))
        return got
    finally:
        consumer.close()


def kafka_python_values(node: BrokerProcess, topic: str, n: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=node.bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        consumer.assign([KTP(topic, 0)])
        consumer.seek(KTP(topic, 0), 0)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [bytes(r.value) for r in records]
        return got
    finally:
        consumer.close()


def test_read_committed_reads_to_the_lso_without_aborted_data(
    node: BrokerProcess, client: Client
) -> None:
    topic = "txn-part-read"
    lso = write_history(client, topic)
    assert lso == 8

    committed = fetch(client, topic, 1)
    assert (committed.high_watermark, committed.last_stable_offset) == (10, 8)
    # only batches below the LSO; P2's aborted transaction with its first offset
    assert values_of(committed.records)[-1] == b"b"
    assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(P2, 3)]
    uncommitted = fetch(client, topic, 0)
    assert uncommitted.last_stable_offset == 8 and uncommitted.aborted_transactions is None
    assert values_of(uncommitted.records) == EVERYTHING

    assert latest(client, topic, 1) == 8
    assert latest(client, topic, 0) == 10

    assert confluent_values(node, topic, "read_committed", 4) == COMMITTED_BEFORE_P3
    assert confluent_values(node, topic, "read_uncommitted", 8) == EVERYTHING

    # P3 commits: the LSO reaches the HW and every committed record is readable
    assert markers(client, topic, P3, True) == 0
    assert latest(client, topic, 1) == 11
    final = [*COMMITTED_BEFORE_P3, b"o1", b"d"]
    assert confluent_values(node, topic, "read_committed", 6) == final
    assert kafka_python_values(node, topic, 6) == final


def test_marker_fencing_and_invalid_txn_state(client: Client) -> None:
    topic = "txn-part-fence"
    create_topic(client, topic)
    assert txn_produce(client, topic, DIRECT, txn_batch(P4, 0, b"t1")).error_code == 0
    # a plain batch of a producer inside its transaction
    plain = produce(client, topic, txn_batch(P4, 1, b"p", txn=False))
    assert plain.error_code == ErrorCode.INVALID_TXN_STATE
    assert markers(client, topic, P4, True, coordinator_epoch=7) == 0
    assert txn_produce(client, topic, DIRECT, txn_batch(P4, 1, b"t2")).error_code == 0
    # a zombie coordinator (older epoch) may not end the new transaction
    fenced = markers(client, topic, P4, False, coordinator_epoch=6)
    assert fenced == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert latest(client, topic, 1) == 2  # still open: the LSO stays at t2
    assert markers(client, topic, P4, False, coordinator_epoch=7) == 0
    assert latest(client, topic, 1) == 4
    unknown = WriteTxnMarkersRequest.WritableTxnMarker  # a partition that does not exist
    W = WriteTxnMarkersRequest
    resp = client.call(
        ApiKey.WRITE_TXN_MARKERS,
        0,
        W(
            markers=[
                unknown(
                    producer_id=P4,
                    producer_epoch=0,
                    transaction_result=True,
                    topics=[W.WritableTxnMarkerTopic(name="no-such-topic", partition_indexes=[0])],
                    coordinator_epoch=7,
                )
            ]
        ),
    )
    code = resp.markers[0].topics[0].partitions[0].error_code
    assert code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ---- end to end: the transaction coordinator writes the markers -----------------------------


@pytest.fixture(scope="module")
def cluster_node() -> Iterator[BrokerProcess]:
    """A broker with Kafka's defaults (verification on) and a small __transaction_state."""
    proc = BrokerProcess(overrides={"transaction.state.log.num.partitions": "3"})
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


def test_transactional_producers_and_read_committed_consumers(cluster_node: BrokerProcess) -> None:
    from confluent_kafka import Producer

    c = Client(cluster_node.port)
    try:
        create_topic(c, "txn-e2e")
    finally:
        c.close()
    p = Producer(
        {"bootstrap.servers": cluster_node.bootstrap, "transactional.id": "e2e", "log_level": 3}
    )
    p.init_transactions(30)
    for values, commit in (([b"k1", b"k2"], True), ([b"z1", b"z2"], False), ([b"k3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce("txn-e2e", v, partition=0)
        p.flush(10)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    committed = [b"k1", b"k2", b"k3"]
    assert confluent_values(cluster_node, "txn-e2e", "read_committed", 3) == committed
    assert kafka_python_values(cluster_node, "txn-e2e", 3) == committed
    everything = [b"k1", b"k2", b"z1", b"z2", b"k3"]
    assert confluent_values(cluster_node, "txn-e2e", "read_uncommitted", 5) == everything


def init_producer(c: Client, tid: str) -> Any:
    req = InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    find = FindCoordinatorRequest(key_type=1, coordinator_keys=[tid])
    c.call(ApiKey.FIND_COORDINATOR, 4, find)  # the first use creates __transaction_state
    retry = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    deadline = time.monotonic() + 30
    while True:
        resp = c.call(ApiKey.INIT_PRODUCER_ID, 4, req)
        if resp.error_code not in retry or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # until __transaction_state is created and loaded
    assert resp.error_code == 0, resp
    return resp


def txn_produce(c: Client, topic: str, tid: str, records: bytes) -> Any:
    req = produce_req(topic, 0, records)
    req.transactional_id = tid
    return c.call(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]


def test_verification_refuses_a_produce_outside_the_transaction(
    cluster_node: BrokerProcess,
) -> None:
    """KIP-890: the leader verifies a transactional produce with the coordinator: before
    AddPartitionsToTxn and after the abort (a late produce) it is refused and nothing is
    appended, so nothing hangs the LSO; inside the transaction it is appended."""
    c = Client(cluster_node.port)
    try:
        topic, tid = "txn-verified", "tid-late"
        create_topic(c, topic)
        init = init_producer(c, tid)
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(seq: int, value: bytes) -> bytes:
            return build_batch(
                [SimpleRecord(value)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                is_transactional=True,
            )

        early = txn_produce(c, topic, tid, batch(0, b"early"))
        # the partition is not in the transaction: TRANSACTION_ABORTABLE from the
        # coordinator, INVALID_TXN_STATE for a Produce v9 client
        assert early.error_code == ErrorCode.INVALID_TXN_STATE, early
        assert latest(c, topic, 0) == 0  # nothing appended

        A = AddPartitionsToTxnRequest
        added = c.call(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            A(
                v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
            ),
        )
        assert (
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        )
        inside = txn_produce(c, topic, tid, batch(0, b"inside"))
        assert inside.error_code == 0, inside
        assert latest(c, topic, 1) == 0  # open: the LSO holds at its first offset

        end = c.call(
            ApiKey.END_TXN,
            3,
            EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=False
            ),
        )
        assert end.error_code == 0, end
        deadline = time.monotonic() + 20
        while latest(c, topic, 1) != latest(c, topic, 0) and time.monotonic() < deadline:
            time.sleep(0.1)  # the coordinator writes the ABORT marker
        end_offset = latest(c, topic, 0)
        assert latest(c, topic, 1) == end_offset == 2  # the record and the marker

        late = txn_produce(c, topic, tid, batch(1, b"late"))
        assert late.error_code != 0, late  # the transaction was aborted: refused
        assert latest(c, topic, 0) == end_offset  # nothing appended, nothing hangs
        assert latest(c, topic, 1) == end_offset
    finally:
        c.close()
