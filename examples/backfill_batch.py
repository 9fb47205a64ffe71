"""Batch backfill: recount clicks per page per minute for a past time range.

Counts the clicks whose event time (record timestamp) lies in ``[--from, --to)`` of the
``clicks`` topic. ``startingTimestamp`` / ``endingTimestamp`` are resolved per partition
through ListOffsets on the broker's time index, so only that stretch of each log is
fetched. They select an *offset* range: from the first record stamped at or after
``--from`` up to the first stamped at or after the end. Clicks arrive somewhat out of
order, so the job reads on until ``--to`` plus ``--lateness`` and then filters on the
timestamp. The counts are printed and, with ``--output``, written to Parquet.

Times are epoch milliseconds, or minutes before now with an ``m`` suffix
(``--from 9m --to 5m``: from nine to five minutes ago).

    riverbed pipeline run examples/backfill_batch.py --from 9m --to 5m
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

CLICK_SCHEMA = "user string, page string, ts long"


def parse_time(text: str, now_ms: int) -> int:
    text = text.strip()
    if text.endswith("m"):
        return now_ms - int(float(text[:-1]) * 60_000)
    return int(text)


def backfill(
    spark: Any, bootstrap: str, topic: str, start_ms: int, end_ms: int, lateness_ms: int = 60_000
) -> Any:
    """(window_start, page, clicks) for clicks with start_ms <= CreateTime < end_ms.

    Records up to ``lateness_ms`` late (stamped before end_ms, written after a record
    stamped at or after it) are still counted.
    """
    import datetime as dt

    from pyspark.sql import functions as F

    def at(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)

    clicks = (
        spark.read.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingTimestamp", str(start_ms))
        .option("endingTimestamp", str(end_ms + lateness_ms))
        # Partitions with no click after start_ms simply contribute nothing.
        .option("startingOffsetsByTimestampStrategy", "latest")
        .load()
    )
    return (
        clicks.where((F.col("timestamp") >= at(start_ms)) & (F.col("timestamp") < at(end_ms)))
        .select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("c"), "timestamp")
        .groupBy(F.window("timestamp", "1 minute").start.alias("window_start"), F.col("c.page"))
        .agg(F.count("*").alias("clicks"))
        .orderBy("window_start", "page")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", default="localhost:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--from", dest="start", default="10m")
    parser.add_argument("--to", dest="end", default="5m")
    parser.add_argument("--lateness-s", type=float, default=60.0, help="how late clicks arrive")
    parser.add_argument("--output", default=None, help="write the counts as Parquet here")
    args = parser.parse_args(argv)
    now_ms = int(time.time() * 1000)
    start_ms, end_ms = parse_time(args.start, now_ms), parse_time(args.end, now_ms)
    if start_ms >= end_ms:
        parser.error(f"--from ({start_ms}) must be before --to ({end_ms})")

    from riverbed.spark.session import local_session

    spark = local_session("backfill")
    try:
        lateness_ms = int(args.lateness_s * 1000)
        counts = backfill(spark, args.bootstrap_server, args.topic, start_ms, end_ms, lateness_ms)
        total = counts.groupBy().sum("clicks").collect()[0][0] or 0
        print(f"{total} clicks in [{start_ms}, {end_ms}) ms:")
        counts.show(50, truncate=False)
        if args.output:
            counts.write.mode("overwrite").parquet(args.output)
            print(f"written to {args.output}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
