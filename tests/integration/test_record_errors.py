"""KIP-467 per-record produce errors with a real client (issue 18 defect 7).

A batch holding some invalid records is refused as a whole; from Produce v8 on the answer
names the bad records. What librdkafka (2.16, confluent-kafka's) does with that answer,
as measured here: when two or more records are named, each named record fails with
INVALID_RECORD and each other record of the batch with ``_INVALID_DIFFERENT_RECORD``
("part of a batch which had one more more invalid records"); it does not send the others
again by itself (nor does the Java producer), the application may, and they are then
written. (With a single record named, librdkafka 2.16 fails every record of the batch
with the partition's error, as it does without record errors.) Without record errors every
record of the batch fails alike, and the application cannot tell which ones to send again.
(confluent-kafka's delivery error shows the code's text, not the record's message: the
messages are checked by the unit tests.)
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.cluster import BrokerProcess

pytestmark = pytest.mark.integration

QUIET = {"log_level": 3}
HOUR_MS = 3_600_000
#: Everything produced before a flush goes out as one batch: librdkafka's flush sends at
#: once whatever linger.ms says, so a long one only keeps a slow test process (descheduled
#: for more than 500 ms on a loaded machine) from splitting the batch.
ONE_BATCH = {"linger.ms": 30_000, "acks": "all"}


def _create(broker: BrokerProcess, name: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    for fut in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        fut.result(15)


def _produce(broker: BrokerProcess, topic: str, records: list[dict[str, Any]]) -> list[Any]:
    """Delivery reports, in the order the records were given: (error or None, value)."""
    reports: dict[bytes, Any] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        reports[msg.value()] = err

    p = Producer({"bootstrap.servers": broker.bootstrap, **ONE_BATCH, **QUIET})
    for r in records:
        p.produce(topic, partition=0, on_delivery=on_delivery, **r)
    assert p.flush(30) == 0
    return [reports[r["value"]] for r in records]


def _consume(broker: BrokerProcess, topic: str, expected: int) -> list[Any]:
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": topic, "enable.auto.commit": False}
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 20
        while len(got) < expected and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                got.append(m)
        return got
    finally:
        c.close()


def _send_again(broker: BrokerProcess, topic: str, records: list[dict[str, Any]]) -> None:
    """The application's retry of the records failed only for sharing a batch."""
    assert all(err is None for err in _produce(broker, topic, records))


def test_keyless_records_fail_alone_and_the_rest_are_written_when_sent_again(
    broker: BrokerProcess, topic_name: str
) -> None:
    _create(broker, topic_name, **{"cleanup.policy": "compact"})
    keyless = set(range(5, 100, 10))  # 10 keyless records among 100
    records = [
        {"value": b"v%d" % i, "key": None if i in keyless else b"k%d" % i} for i in range(100)
    ]
    errors = _produce(broker, topic_name, records)
    for i, err in enumerate(errors):
        assert err is not None, i  # the batch is refused as a whole
        if i in keyless:
            assert err.code() == KafkaError.INVALID_RECORD
        else:
            assert err.code() == KafkaError._INVALID_DIFFERENT_RECORD, (i, err)
    retry = [
        r for r, e in zip(records, errors, strict=True) if e.code() != KafkaError.INVALID_RECORD
    ]
    _send_again(broker, topic_name, retry)
    got = _consume(broker, topic_name, len(retry))
    assert [(m.key(), m.value()) for m in got] == [(r["key"], r["value"]) for r in retry]
    assert [m.offset() for m in got] == list(range(90))


def test_out_of_range_timestamps_fail_alone(broker: BrokerProcess, topic_name: str) -> None:
    _create(
        broker,
        topic_name,
        **{"message.timestamp.before.max.ms": str(HOUR_MS)},
    )
    now = int(time.time() * 1000)
    old = {3, 11}
    records = [
        {"value": b"t%d" % i, "timestamp": now - 2 * HOUR_MS if i in old else now}
        for i in range(20)
    ]
    errors = _produce(broker, topic_name, records)
    for i, err in enumerate(errors):
        if i in old:
            # two records named: librdkafka gives each INVALID_RECORD
            assert err.code() == KafkaError.INVALID_RECORD
        else:
            assert err is not None and err.code() == KafkaError._INVALID_DIFFERENT_RECORD
    retry = [r for i, r in enumerate(records) if i not in old]
    _send_again(broker, topic_name, retry)
    got = _consume(broker, topic_name, len(retry))
    assert [m.value() for m in got] == [r["value"] for r in retry]
