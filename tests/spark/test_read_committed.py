"""read_committed (the reader's default) against a live broker's transactions: aborted
records are dropped using the Fetch response's aborted-transaction list, reads stop at
the last stable offset while a transaction is open, and the rows equal the
confluent-kafka path's (librdkafka's read_committed) in both isolation levels."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Producer

from riverbed.spark.fetch import read_range
from riverbed.spark.fetch_reader import PartitionClient
from riverbed.spark.offsets import OffsetRange
from riverbed.spark.options import fetch_settings


def _values(bootstrap: str, topic: str, end: int, isolation: str, reader: str) -> list[Any]:
    batches = read_range(
        {"bootstrap.servers": bootstrap, "isolation.level": isolation},
        OffsetRange(topic, 0, 0, end),
        include_headers=False,
        fail_on_data_loss=True,
        poll_timeout_ms=30_000,
        reader=reader,
    )
    return [v for b in batches for v in b.column("value").to_pylist()]


def test_aborted_transactions_and_the_last_stable_offset(bootstrap: str, new_topic: Any) -> None:
    topic = new_topic(1)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"rc-{uuid.uuid4()}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3):
        txn.produce(topic, f"c{i}".encode())
    txn.commit_transaction(30)  # 0-2, marker 3
    txn.begin_transaction()
    txn.produce(topic, b"a1")
    txn.produce(topic, b"a2")
    assert txn.flush(30) == 0  # written, then aborted: 4-5, marker 6
    txn.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"plain")  # 7
    assert plain.flush(30) == 0
    txn.begin_transaction()
    txn.produce(topic, b"open")  # 8, no marker yet
    assert txn.flush(30) == 0
    plain.produce(topic, b"after")  # 9: behind the open transaction
    assert plain.flush(30) == 0

    client = PartitionClient(fetch_settings({"bootstrap.servers": bootstrap}), topic, 0)
    try:
        assert client.refresh()
        part = client.fetch(0)
    finally:
        client.close()
    assert (part.high_watermark, part.last_stable_offset) == (10, 8)
    assert [(a.producer_id >= 0, a.first_offset) for a in part.aborted_transactions] == [(True, 4)]
    assert _values(bootstrap, topic, 8, "read_committed", "fetch") == [
        b"c0",
        b"c1",
        b"c2",
        b"plain",
    ]

    txn.commit_transaction(30)  # marker 10
    committed = [b"c0", b"c1", b"c2", b"plain", b"open", b"after"]
    everything = [b"c0", b"c1", b"c2", b"a1", b"a2", b"plain", b"open", b"after"]
    for reader in ("fetch", "consumer"):
        assert _values(bootstrap, topic, 11, "read_committed", reader) == committed, reader
        assert _values(bootstrap, topic, 11, "read_uncommitted", reader) == everything, reader
