"""Writes (batch and streaming) read back through the source, with keys and headers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from riverbed.testing.cluster import scaled_s

from .conftest import BROKER_KIND, riverbed_read

pytestmark = pytest.mark.spark

TS = dt.datetime(2024, 5, 1, 12, 30, 15, 123000, tzinfo=dt.UTC)


def _read(spark: Any, bootstrap: str, topic: str) -> list[Any]:
    df = riverbed_read(spark, bootstrap, subscribe=topic, includeHeaders="true")
    return sorted(df.collect(), key=lambda r: (r.partition, r.offset))


def test_write_then_read_back_keys_headers_partitions_timestamps(
    spark: Any, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(2)
    rows = [
        ("k1", b"one", [("a", b"1"), ("b", None)], 1, TS),
        (None, b"two", None, 0, None),
        ("k3", b"three", [], 1, TS + dt.timedelta(seconds=1)),
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, headers array<struct<key:string,value:binary>>,"
        " partition int, timestamp timestamp",
    )
    # One task, so that the order within each Kafka partition is the order of the rows.
    df.coalesce(1).write.format("riverbed").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).mode("append").save()
    got = _read(spark, bootstrap, topic)
    assert [(r.partition, r.offset, r.key, r.value) for r in got] == [
        (0, 0, None, b"two"),
        (1, 0, b"k1", b"one"),
        (1, 1, b"k3", b"three"),
    ]
    one = got[1]
    assert [(h.key, h.value) for h in one.headers] == [("a", b"1"), ("b", None)]
    assert got[0].headers == [] or got[0].headers is None
    assert one.timestamp.replace(tzinfo=dt.UTC) == TS
    assert one.timestampType == 0  # CreateTime, as written


def test_topic_column_routes_rows_and_option_overrides_it(
    spark: Any, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    a, b, c = new_topic(1), new_topic(1), new_topic(1)
    df = spark.createDataFrame([(a, "x"), (b, "y"), (a, "z")], "topic string, value string")
    writer = (
        df.coalesce(1)
        .write.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .mode("append")
    )
    writer.save()
    assert [r.value for r in _read(spark, bootstrap, a)] == [b"x", b"z"]
    assert [r.value for r in _read(spark, bootstrap, b)] == [b"y"]
    writer.option("topic", c).save()
    assert sorted(r.value for r in _read(spark, bootstrap, c)) == [b"x", b"y", b"z"]


@pytest.mark.timeout(900)  # a Spark query on a loaded machine (the wait below is scaled)
def test_stream_write_copies_a_topic(
    spark: Any,
    bootstrap: str,
    tmp_path: Path,
    new_topic: Callable[..., str],
    produce: Callable[..., None],
) -> None:
    src, dst = new_topic(2), new_topic(1)
    produce(src, [{"value": f"v{i}".encode(), "key": b"k", "partition": i % 2} for i in range(8)])
    query = (
        riverbed_read(spark, bootstrap, stream=True, subscribe=src, startingOffsets="earliest")
        .selectExpr("key", "value")
        .writeStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        # Tansu has no KIP-939: at-least-once there, the default (exactly-once) on riverbed
        .option("exactlyOnce", "false" if BROKER_KIND == "tansu" else "true")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(scaled_s(120))
    assert query.exception() is None
    got = _read(spark, bootstrap, dst)
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(8))
    assert {r.key for r in got} == {b"k"}


def test_bad_writes_fail_with_a_clear_error(
    spark: Any, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(1)
    base = spark.createDataFrame([("v",)], "value string").write.format("riverbed")
    base = base.option("kafka.bootstrap.servers", bootstrap).mode("append")
    with pytest.raises(Exception, match="required column 'value' not found"):
        spark.createDataFrame([("v",)], "payload string").write.format("riverbed").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", topic).mode("append").save()
    with pytest.raises(Exception, match="no 'topic' column and no 'topic' option"):
        base.save()
    with pytest.raises(Exception, match="'subscribe'"):
        base.option("topic", topic).option("subscribe", topic).save()
    with pytest.raises(Exception, match="save mode 'overwrite' is not allowed"):
        base.option("topic", topic).mode("overwrite").save()
    # A broker-side rejection fails the task with the broker's error.
    from confluent_kafka.admin import AdminClient, NewTopic

    small = f"{topic}-small"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(small, 1, 1, config={"max.message.bytes": "2000"})
    for fut in admin.create_topics([new]).values():
        fut.result(30)
    big = spark.createDataFrame([(b"x" * 5000,)], "value binary")
    with pytest.raises(Exception, match=f"delivery to {small}-0 failed: MSG_SIZE_TOO_LARGE"):
        big.write.format("riverbed").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", small
        ).mode("append").save()
    # A client-side one (no such partition) too.
    bad = spark.createDataFrame([("v", 7)], "value string, partition int")
    with pytest.raises(Exception, match=f"delivery to {topic}-7 failed: _UNKNOWN_PARTITION"):
        bad.write.format("riverbed").option("kafka.bootstrap.servers", bootstrap).option(
            "topic", topic
        ).mode("append").save()
