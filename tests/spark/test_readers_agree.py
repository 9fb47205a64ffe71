"""The columnar reader (reader=fetch) against the confluent-kafka path (reader=consumer) on
the same records of a live broker: keys, values, headers, null keys / values / header
values, every codec plus none, CreateTime and LogAppendTime topics, sub-ranges."""

from __future__ import annotations

import random
import time
import uuid
from typing import Any

import pyarrow as pa
import pytest

from riverbed.spark.fetch import read_range
from riverbed.spark.offsets import OffsetRange

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
NOW_MS = int(time.time() * 1000)


def _records(rng: random.Random, n: int) -> list[dict[str, Any]]:
    def blob() -> bytes | None:
        return None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 60))

    out = []
    for _ in range(n):
        headers = [(f"h{i}-{rng.randrange(99)}é", blob()) for i in range(rng.choice([0, 0, 1, 3]))]
        out.append(
            {
                "key": blob(),
                "value": blob(),
                "headers": headers or None,
                # past times (brokers refuse records more than an hour ahead)
                "timestamp": NOW_MS - rng.randrange(0, 10**10),
            }
        )
    return out


def _create(bootstrap: str, config: dict[str, str]) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"agree-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        fut.result(30)
    return name


def _produce(bootstrap: str, topic: str, rng: random.Random) -> int:
    """Batches of every codec, interleaved; returns the number of records."""
    from confluent_kafka import Producer

    total = 0
    errors: list[Any] = []
    for _ in range(2):
        for codec in CODECS:
            producer = Producer(
                {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5}
            )
            for r in _records(rng, rng.randrange(1, 40)):
                producer.produce(
                    topic, **r, on_delivery=lambda e, _m: errors.append(e) if e else None
                )
                total += 1
            assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return total


def _read(bootstrap: str, r: OffsetRange, reader: str) -> pa.Table:
    batches = list(
        read_range(
            {"bootstrap.servers": bootstrap},
            r,
            include_headers=True,
            fail_on_data_loss=True,
            poll_timeout_ms=30_000,
            reader=reader,
        )
    )
    return pa.Table.from_batches(batches) if batches else pa.table({})


@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_columnar_reader_matches_the_consumer_path(bootstrap: str, timestamps: str) -> None:
    rng = random.Random(f"agree-{timestamps}")
    topic = _create(bootstrap, {"message.timestamp.type": timestamps})
    n = _produce(bootstrap, topic, rng)
    for lo, hi in [(0, n), (3, n - 5), (n // 2, n // 2 + 1)]:
        r = OffsetRange(topic, 0, lo, hi)
        ours, theirs = _read(bootstrap, r, "fetch"), _read(bootstrap, r, "consumer")
        assert ours.num_rows == hi - lo
        assert ours.to_pylist() == theirs.to_pylist(), (lo, hi)
    rows = _read(bootstrap, OffsetRange(topic, 0, 0, n), "fetch").to_pylist()
    assert {r["timestampType"] for r in rows} == {1 if timestamps == "LogAppendTime" else 0}
    assert any(r["headers"] is None for r in rows) and any(r["key"] is None for r in rows)
