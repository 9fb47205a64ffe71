"""Lost offsets (DeleteRecords / retention) and deleted topics, per failOnDataLoss."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import riverbed_read

pytestmark = pytest.mark.spark


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    from confluent_kafka import TopicPartition

    admin = _admin(bootstrap)  # must outlive the futures
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for fut in futures.values():
        fut.result(30)


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    for fut in admin.delete_topics([topic]).values():
        fut.result(30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed after deletion"
        time.sleep(0.2)


def test_expired_offsets_fail_or_are_skipped(
    spark: Any, bootstrap: str, new_topic: Callable[..., str], produce: Callable[..., None]
) -> None:
    topic = new_topic(1)
    produce(topic, [{"value": f"v{i}".encode()} for i in range(10)])
    # As retention would: the log now starts at offset 5.
    _delete_records_before(bootstrap, topic, 0, 5)

    def load(fail: str) -> Any:
        return riverbed_read(
            spark,
            bootstrap,
            subscribe=topic,
            startingOffsets=json.dumps({topic: {"0": 0}}),
            failOnDataLoss=fail,
        )

    with pytest.raises(Exception, match=rf"Cannot fetch offsets 0\.\.4 of {topic}-0") as info:
        load("true").collect()
    assert "failOnDataLoss" in str(info.value)
    rows = sorted(load("false").collect(), key=lambda r: r.offset)
    assert [(r.offset, r.value) for r in rows] == [(o, f"v{o}".encode()) for o in range(5, 10)]
    # earliest resolves to the new log start offset: no loss is reported at all.
    earliest = riverbed_read(spark, bootstrap, subscribe=topic)
    assert earliest.count() == 5


def test_deleted_topic_fails_the_stream_or_is_skipped(
    spark: Any,
    bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    produce: Callable[..., None],
) -> None:
    keep, doomed = new_topic(1), new_topic(1)
    produce(keep, [{"value": b"k0"}])
    produce(doomed, [{"value": b"d0"}])
    seen: list[bytes] = []

    def run(fail: str) -> Any:
        query = (
            riverbed_read(
                spark,
                bootstrap,
                stream=True,
                subscribe=f"{keep},{doomed}",
                startingOffsets="earliest",
                failOnDataLoss=fail,
            )
            .writeStream.foreachBatch(
                lambda df, _id: seen.extend(bytes(r.value) for r in df.collect())
            )
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except Exception as e:  # the query's failure surfaces here
            return e
        finally:
            query.stop()
        return query.exception()

    assert run("true") is None
    assert sorted(seen) == [b"d0", b"k0"]
    _delete_topic(bootstrap, doomed)
    produce(keep, [{"value": b"k1"}])
    error = run("true")
    assert error is not None and f"{doomed}-0 are gone" in str(error)
    assert "failOnDataLoss" in str(error)
    assert sorted(seen) == [b"d0", b"k0"]
    # The same checkpoint with failOnDataLoss=false carries on with the surviving topic.
    assert run("false") is None
    assert sorted(seen) == [b"d0", b"k0", b"k1"]


def _read_range(bootstrap: str, topic: str, start: int, end: int, fail: bool) -> list[int]:
    from riverbed.spark.fetch import read_range
    from riverbed.spark.offsets import OffsetRange

    batches = read_range(
        {"bootstrap.servers": bootstrap},
        OffsetRange(topic, 0, start, end),
        include_headers=False,
        fail_on_data_loss=fail,
        poll_timeout_ms=20_000,
    )
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_executor_meets_records_deleted_after_planning(
    bootstrap: str, new_topic: Callable[..., str], produce: Callable[..., None]
) -> None:
    """A range planned before DeleteRecords: the task fails or reads what is left."""
    from riverbed.spark.client import DataLossError

    topic = new_topic(1)
    produce(topic, [{"value": f"v{i}".encode()} for i in range(10)])
    assert _read_range(bootstrap, topic, 0, 10, True) == list(range(10))
    _delete_records_before(bootstrap, topic, 0, 6)
    with pytest.raises(DataLossError, match=f"Cannot fetch offset 0 of {topic}-0"):
        _read_range(bootstrap, topic, 0, 10, True)
    assert _read_range(bootstrap, topic, 0, 10, False) == [6, 7, 8, 9]
    # A range wholly deleted yields nothing rather than waiting for offsets that are gone.
    assert _read_range(bootstrap, topic, 1, 4, False) == []


def test_executor_meets_a_topic_deleted_after_planning(
    bootstrap: str, new_topic: Callable[..., str], produce: Callable[..., None]
) -> None:
    from riverbed.spark.client import DataLossError

    topic = new_topic(1)
    produce(topic, [{"value": b"x"}, {"value": b"y"}])
    _delete_topic(bootstrap, topic)
    # Not a wait for kafkaConsumer.pollTimeoutMs (20 s here): the partition is seen gone.
    with pytest.raises(DataLossError, match=f"{topic}-0 is gone"):
        _read_range(bootstrap, topic, 0, 2, True)
    assert _read_range(bootstrap, topic, 0, 2, False) == []
