"""Batch reads: offset ranges, timestamp ranges, Spark partition splitting, bad options."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from .conftest import riverbed_read

pytestmark = pytest.mark.spark

BASE_MS = 1_700_000_000_000


@pytest.fixture
def clicks(new_topic: Callable[..., str], produce: Callable[..., None]) -> str:
    """20 records: record i in partition i % 2 with CreateTime BASE_MS + i seconds."""
    topic = new_topic(2)
    produce(
        topic,
        [
            {
                "value": f"v{i}".encode(),
                "key": None if i == 3 else f"k{i}".encode(),
                "partition": i % 2,
                "timestamp": BASE_MS + i * 1000,
                "headers": [("n", str(i).encode())],
            }
            for i in range(20)
        ],
    )
    return topic


def test_offset_range_rows_have_the_kafka_schema(spark: Any, bootstrap: str, clicks: str) -> None:
    df = riverbed_read(
        spark,
        bootstrap,
        subscribe=clicks,
        startingOffsets=json.dumps({clicks: {"0": 2, "1": -2}}),
        endingOffsets=json.dumps({clicks: {"0": 5, "1": -1}}),
    )
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    got = [(r.partition, r.offset, r.key, r.value, r.topic, r.timestampType) for r in rows]
    # Partition 0 holds even i at offset i/2; partition 1 holds odd i at (i-1)/2.
    expected = [(0, o, f"k{2 * o}".encode(), f"v{2 * o}".encode(), clicks, 0) for o in (2, 3, 4)]
    expected += [
        (
            1,
            o,
            None if 2 * o + 1 == 3 else f"k{2 * o + 1}".encode(),
            f"v{2 * o + 1}".encode(),
            clicks,
            0,
        )
        for o in range(10)
    ]
    assert got == expected
    first = rows[0]
    assert first.timestamp.replace(tzinfo=dt.UTC) == dt.datetime.fromtimestamp(
        (BASE_MS + 4000) / 1000, dt.UTC
    )


def test_timestamp_range_uses_the_time_index(spark: Any, bootstrap: str, clicks: str) -> None:
    # Records with BASE+5s <= CreateTime < BASE+11s are i = 5..10.
    df = riverbed_read(
        spark,
        bootstrap,
        subscribe=clicks,
        startingTimestamp=str(BASE_MS + 5000),
        endingTimestamp=str(BASE_MS + 11000),
        includeHeaders="true",
    )
    rows = df.collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(5, 11))
    assert all([(h.key, h.value) for h in r.headers] == [("n", r.value[1:])] for r in rows)
    # Per-partition timestamps; a start after the last record resolves to the end (empty).
    by_ts = riverbed_read(
        spark,
        bootstrap,
        assign=json.dumps({clicks: [0, 1]}),
        startingOffsetsByTimestamp=json.dumps(
            {clicks: {"0": BASE_MS + 16000, "1": BASE_MS + 99_000}}
        ),
        endingOffsetsByTimestamp=json.dumps(
            {clicks: {"0": BASE_MS + 99_000, "1": BASE_MS + 99_000}}
        ),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert sorted(r.value for r in by_ts.collect()) == [b"v16", b"v18"]
    # With the default strategy (error), a starting time after every record is an error.
    with pytest.raises(Exception, match="no offset matched the timestamp"):
        riverbed_read(
            spark, bootstrap, subscribe=clicks, startingTimestamp=str(BASE_MS + 10**9)
        ).collect()


def test_min_partitions_and_max_records_split_ranges(
    spark: Any, bootstrap: str, clicks: str
) -> None:
    assert riverbed_read(spark, bootstrap, subscribe=clicks).rdd.getNumPartitions() == 2
    df = riverbed_read(spark, bootstrap, subscribe=clicks, maxRecordsPerPartition="3")
    assert df.rdd.getNumPartitions() == 8  # ceil(10 / 3) per Kafka partition
    rows = df.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(10)
    ]
    assert (
        riverbed_read(spark, bootstrap, subscribe=clicks, minPartitions="5").rdd.getNumPartitions()
        >= 5
    )
    # subscribePattern matches whole topic names (Java's Pattern.matches).
    assert riverbed_read(spark, bootstrap, subscribePattern=re.escape(clicks)).count() == 20
    assert riverbed_read(spark, bootstrap, subscribePattern=re.escape(clicks[:-1])).count() == 0


def test_bad_options_fail_fast_naming_them(spark: Any, bootstrap: str, clicks: str) -> None:
    with pytest.raises(Exception, match="'subscribe', 'subscribePattern', 'assign'"):
        riverbed_read(spark, bootstrap).collect()
    with pytest.raises(Exception, match="'startingoffsetz'"):
        riverbed_read(spark, bootstrap, subscribe=clicks, startingOffsetz="earliest").collect()
    with pytest.raises(Exception, match="conflicting options"):
        riverbed_read(
            spark, bootstrap, subscribe=clicks, startingOffsets="earliest", startingTimestamp="1"
        ).collect()
    with pytest.raises(Exception, match=f"missing: {clicks}-1"):
        riverbed_read(
            spark, bootstrap, subscribe=clicks, startingOffsets=json.dumps({clicks: {"0": 0}})
        ).collect()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("riverbed").schema("value string").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("subscribe", clicks).load().collect()
