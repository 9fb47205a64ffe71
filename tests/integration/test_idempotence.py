"""Idempotent production against a real broker process (issue 14).

- raw protocol: a re-sent batch is acknowledged with its original base offset and not
  appended again; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch
  INVALID_PRODUCER_EPOCH; DescribeProducers and `riverbed producers describe` show the
  producer (and the ledger's counts);
- producer ids come from controller blocks persisted in the metadata log: after a SIGKILL
  and restart no id is handed out twice;
- confluent-kafka with enable.idempotence=true keeps producing while the broker is
  SIGKILLed and restarted: every message is in the log exactly once, in order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from riverbed.cli.main import main
from riverbed.protocol.api_versions import ApiKey
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    DescribeProducersRequest,
    InitProducerIdRequest,
)
from riverbed.protocol.records import SimpleRecord, build_batch, iter_batches, iter_records
from riverbed.testing.cluster import BrokerProcess

from .test_wire_protocol import Client, create_topic, fetch_req, produce

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}


@pytest.fixture(scope="module")
def node() -> Iterator[BrokerProcess]:
    proc = BrokerProcess(overrides={"log.segment.bytes": "65536", "num.partitions": "1"})
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


def init_pid(c: Client) -> tuple[int, int]:
    r = c.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
    )
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def idem_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return build_batch(
        [SimpleRecord(v, timestamp=now) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def fetch_values(c: Client, topic: str) -> list[bytes | None]:
    resp = c.call(ApiKey.FETCH, 12, fetch_req(topic, [(0, 0, 1 << 20)]))
    records = resp.responses[0].partitions[0].records or b""
    out: list[bytes | None] = []
    for pos, h in iter_batches(records):
        out += [r.value for r in iter_records(records[pos : pos + h.size])]
    return out


def test_resent_batch_gets_its_original_offset_and_is_not_appended(
    node: BrokerProcess, topic_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    c = Client(node.port)
    try:
        create_topic(c, topic_name)
        pid, epoch = init_pid(c)
        first = idem_batch(pid, epoch, 0, b"a", b"b", b"c")
        r1 = produce(c, topic_name, first)
        r2 = produce(c, topic_name, idem_batch(pid, epoch, 3, b"d"))
        assert (r1.error_code, r1.base_offset, r2.error_code, r2.base_offset) == (0, 0, 0, 3)
        again = produce(c, topic_name, first)  # the client's retry of a lost response
        assert (again.error_code, again.base_offset) == (0, 0)
        assert fetch_values(c, topic_name) == [b"a", b"b", b"c", b"d"]

        gap = produce(c, topic_name, idem_batch(pid, epoch, 9, b"x"))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        bumped = produce(c, topic_name, idem_batch(pid, epoch + 1, 0, b"e"))
        assert (bumped.error_code, bumped.base_offset) == (0, 4)
        fenced = produce(c, topic_name, idem_batch(pid, epoch, 4, b"z"))
        assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        assert fetch_values(c, topic_name) == [b"a", b"b", b"c", b"d", b"e"]

        desc = c.call(
            ApiKey.DESCRIBE_PRODUCERS,
            0,
            DescribeProducersRequest(
                topics=[
                    DescribeProducersRequest.TopicRequest(name=topic_name, partition_indexes=[0])
                ]
            ),
        )
        part = desc.topics[0].partitions[0]
        assert part.error_code == 0
        (p,) = part.active_producers
        assert (p.producer_id, p.producer_epoch, p.last_sequence) == (pid, epoch + 1, 0)
    finally:
        c.close()
    # the CLI shows the same producer and the partition's ledger counts
    code = main(["producers", "describe", "-b", node.bootstrap, "--topic", topic_name, "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["partitions"]
    assert [p["producer_id"] for p in row["producers"]] == [pid]
    assert row["ledger"]["ledger_entries"] >= 1 and row["ledger"]["cached_entries"] >= 1


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "clean"])
def test_retry_after_restart_is_still_a_duplicate(
    node: BrokerProcess, topic_name: str, kill: bool
) -> None:
    # the producer state is rebuilt at start (ledger files + replay of the log after them)
    c = Client(node.port)
    try:
        create_topic(c, topic_name)
        pid, epoch = init_pid(c)
        first = idem_batch(pid, epoch, 0, b"a", b"b")
        second = idem_batch(pid, epoch, 2, b"c")
        assert produce(c, topic_name, first).base_offset == 0
        assert produce(c, topic_name, second).base_offset == 2
    finally:
        c.close()
    node.restart(kill=kill)
    c = Client(node.port)
    try:
        deadline = time.monotonic() + 20
        while (r := produce(c, topic_name, second)).error_code and time.monotonic() < deadline:
            time.sleep(0.2)  # the partition may still be loading
        assert (r.error_code, r.base_offset) == (0, 2)
        gap = produce(c, topic_name, idem_batch(pid, epoch, 5, b"x"))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = produce(c, topic_name, idem_batch(pid, epoch, 3, b"d"))
        assert (nxt.error_code, nxt.base_offset) == (0, 3)
        assert fetch_values(c, topic_name) == [b"a", b"b", b"c", b"d"]
    finally:
        c.close()


def test_producer_ids_are_never_reused_across_a_crash(node: BrokerProcess) -> None:
    c = Client(node.port)
    try:
        before = {init_pid(c)[0] for _ in range(5)}
    finally:
        c.close()
    node.restart(kill=True)
    c = Client(node.port)
    try:
        after = {init_pid(c)[0] for _ in range(5)}
    finally:
        c.close()
    assert len(before) == 5 and len(after) == 5
    assert min(after) > max(before)  # the next block, never the crashed node's old one


def test_confluent_idempotent_producer_survives_sigkill(
    node: BrokerProcess, topic_name: str
) -> None:
    c = Client(node.port)
    try:
        create_topic(c, topic_name)
    finally:
        c.close()
    total = 3000
    errors: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 50,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 100,
            **QUIET,
        }
    )
    halfway = threading.Event()

    def run() -> None:
        for i in range(total):
            while True:
                try:
                    producer.produce(
                        topic_name,
                        value=b"%06d" % i,
                        partition=0,
                        on_delivery=lambda err, msg: errors.append(err) if err else None,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            if i == total // 2:
                halfway.set()
            if i % 50 == 0:
                producer.poll(0)
                time.sleep(0.005)
        producer.flush(120)

    t = threading.Thread(target=run)
    t.start()
    assert halfway.wait(60)
    node.restart(kill=True)  # SIGKILL mid-stream
    t.join(150)
    assert not t.is_alive()
    assert errors == []

    consumer = Consumer(
        {"bootstrap.servers": node.bootstrap, "group.id": "unused", "enable.auto.commit": False}
        | QUIET
    )
    consumer.assign([TopicPartition(topic_name, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < total and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    # read a moment longer: a duplicate would show up past the expected count
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    consumer.close()
    assert values == [b"%06d" % i for i in range(total)]


def test_kafka_python_idempotent_producer_survives_sigkill(
    node: BrokerProcess, topic_name: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    c = Client(node.port)
    try:
        create_topic(c, topic_name)
    finally:
        c.close()
    total = 2000
    producer = KafkaProducer(
        bootstrap_servers=node.bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=2,
        retries=1_000_000,
        retry_backoff_ms=100,
        request_timeout_ms=10_000,
        delivery_timeout_ms=120_000,
        reconnect_backoff_max_ms=500,
    )
    futures = []
    for i in range(total):
        futures.append(producer.send(topic_name, value=b"%06d" % i, partition=0))
        if i == total // 2:
            producer.flush(60)  # half acknowledged; the rest goes out around the kill
            node.kill()
            restarter = threading.Thread(target=node.start)
            restarter.start()
    restarter.join(60)
    producer.flush(120)
    for f in futures:
        f.get(timeout=60)  # every send acknowledged
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=node.bootstrap, enable_auto_commit=False)
    tp = KTopicPartition(topic_name, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=500)
        got = [m.value for msgs in batch.values() for m in msgs]
        values += got
        if len(values) >= total and not got:
            break
    consumer.close()
    assert values == [b"%06d" % i for i in range(total)]
